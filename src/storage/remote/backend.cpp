#include "storage/remote/backend.hpp"

#include "storage/remote/redis_backend.hpp"

#include <iterator>

namespace kjit::storage::remote {

namespace {

using Maker = Result<std::unique_ptr<Backend>> (*)(const Server &, const Config &);

// The one table of schemes: a scheme that config.cpp parses (Server::scheme) and the backend
// that speaks it. A new kind of server is a row here and a file of its own.
struct Scheme {
    std::string_view name;
    Maker make;
};
constexpr Scheme kSchemes[] = {
    {"redis", &redis_backend::make},       // redis://HOST[:PORT][/DB]
    {"rediss", &redis_backend::make},      // rediss://: the same over TLS (tls_session.hpp)
    {"redis+unix", &redis_backend::make},  // redis+unix:PATH
};

}  // namespace

Result<std::unique_ptr<Backend>> make_backend(const Server &server, const Config &config) {
    for (const Scheme &scheme : kSchemes) {
        if (scheme.name == server.scheme) return scheme.make(server, config);
    }
    std::string known;
    for (const Scheme &scheme : kSchemes) known += (known.empty() ? "" : ", ") + std::string(scheme.name);
    return Error{Errc::invalid_argument, "remote cache " + display(server) + ": no backend speaks scheme '" +
                                             server.scheme + "' (known: " + known + ")"};
}

}  // namespace kjit::storage::remote
