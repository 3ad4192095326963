// The cluster tier in a libkjit built without hiredis and zstd (KJIT_REMOTE=OFF): a setting
// that asks for a tier is checked as usual, then refused with what to do; "none" (and no
// setting) is fine. No Tier is ever made, so the cache never reaches the members below, which
// only keep the build whole.
#include "storage/remote/tier.hpp"

namespace kjit::storage::remote {

Counters &counters() {
    static Counters c;
    return c;
}

Result<Tier *> Tier::for_spec(const std::string &spec, std::string_view origin) {
    KJIT_TRY_ASSIGN(auto config, parse(spec, origin));
    if (!config) return static_cast<Tier *>(nullptr);
    return Error{Errc::invalid_argument,
                 std::string(origin) + " asks for a remote cache, but this libkjit was built without it "
                                       "(KJIT_REMOTE=OFF); build it with libhiredis-dev and libzstd-dev installed, "
                                       "or set it to none"};
}

void ShardFree::operator()(Shard *) const noexcept {}
Tier::Tier(Config config, std::vector<std::unique_ptr<Backend>>) : config_(std::move(config)) {}
Tier::~Tier() = default;
Settled Tier::settle(const Expected &, bool) { return Settled{}; }
std::vector<std::optional<Entry>> Tier::fetch_many(const std::vector<Expected> &wanted) {
    return std::vector<std::optional<Entry>>(wanted.size());
}
void Tier::put(const Expected &, const store::cache_entry::Manifest &, std::string_view, Lease *) {}
void Tier::put_failure(const Expected &, const Error &, Lease &) {}
std::string Tier::describe_servers() { return std::string(); }
std::string Tier::server_key(const Expected &, char) const { return std::string(); }

Lease::Lease(Tier &tier, Shard &shard, std::string key, std::string token)
    : tier_(tier), shard_(shard), key_(std::move(key)), token_(std::move(token)) {}
Lease::~Lease() = default;

}  // namespace kjit::storage::remote
