#include "batch/worker_protocol.hpp"

#include "compile/compiler.hpp"

#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <utility>

namespace kjit::batch::worker_protocol {

namespace {

constexpr char kMagic[4] = {'K', 'J', 'W', '1'};
constexpr std::size_t kHeaderSize = 16;

void put_u64(std::string &out, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(const char *p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
}

// Appends fields: numbers as 8 bytes, strings as their length and bytes, lists as their
// count and items.
class Writer {
public:
    Writer &number(std::uint64_t v) {
        put_u64(out_, v);
        return *this;
    }
    Writer &text(std::string_view s) {
        put_u64(out_, s.size());
        out_.append(s);
        return *this;
    }
    Writer &texts(const std::vector<std::string> &list) {
        number(list.size());
        for (const std::string &s : list) text(s);
        return *this;
    }
    Writer &pairs(const std::vector<std::pair<std::string, std::string>> &list) {
        number(list.size());
        for (const auto &p : list) text(p.first).text(p.second);
        return *this;
    }
    std::string take() { return std::move(out_); }

private:
    std::string out_;
};

// Reads the fields Writer wrote; the first field that does not fit what is left (or a list
// longer than the bytes left could hold) fails the message, naming it and the field.
class Reader {
public:
    Reader(std::string_view in, const char *message) : in_(in), message_(message) {}

    bool number(std::uint64_t &v, const char *field) {
        if (!fail_.empty()) return false;
        if (in_.size() < 8) return fail(field, "ends before it");
        v = get_u64(in_.data());
        in_.remove_prefix(8);
        return true;
    }
    bool flag(bool &v, const char *field) {
        std::uint64_t n = 0;
        if (!number(n, field)) return false;
        if (n > 1) return fail(field, "is neither 0 nor 1");
        v = n == 1;
        return true;
    }
    bool text(std::string &s, const char *field) {
        std::uint64_t n = 0;
        if (!number(n, field)) return false;
        if (n > in_.size()) return fail(field, "is longer than the message");
        s.assign(in_.data(), static_cast<std::size_t>(n));
        in_.remove_prefix(static_cast<std::size_t>(n));
        return true;
    }
    bool texts(std::vector<std::string> &list, const char *field) {
        std::uint64_t n = 0;
        if (!number(n, field)) return false;
        if (n > in_.size() / 8) return fail(field, "counts more items than the message holds");
        list.resize(static_cast<std::size_t>(n));
        for (std::string &s : list) {
            if (!text(s, field)) return false;
        }
        return true;
    }
    bool pairs(std::vector<std::pair<std::string, std::string>> &list, const char *field) {
        std::uint64_t n = 0;
        if (!number(n, field)) return false;
        if (n > in_.size() / 16) return fail(field, "counts more items than the message holds");
        list.resize(static_cast<std::size_t>(n));
        for (auto &p : list) {
            if (!text(p.first, field) || !text(p.second, field)) return false;
        }
        return true;
    }
    // Fails the message: `field` `what` ("is unknown"); false.
    bool fail(const char *field, const char *what) {
        if (fail_.empty()) fail_ = std::string("worker protocol: a ") + message_ + " message's " + field + " " + what;
        return false;
    }
    // The message's error, or none once every field was read and nothing is left over.
    std::optional<Error> finish() {
        if (fail_.empty() && !in_.empty()) fail("its end", "has bytes after the last field");
        if (fail_.empty()) return std::nullopt;
        return Error{Errc::internal, fail_};
    }

private:
    std::string_view in_;
    const char *message_;
    std::string fail_;
};

constexpr std::uint64_t kCodeMax = static_cast<std::uint64_t>(Errc::not_cached);

}  // namespace

std::string encode_hello(const Hello &hello) {
    Writer w;
    w.number(hello.version).number(hello.nvrtc_identity ? 1 : 0);
    if (hello.nvrtc_identity) {
        w.text(*hello.nvrtc_identity);
    } else {
        w.number(static_cast<std::uint64_t>(hello.nvrtc_identity.error().code))
            .text(hello.nvrtc_identity.error().message);
    }
    return w.take();
}

Result<Hello> decode_hello(std::string_view payload) {
    Reader r(payload, "hello");
    Hello hello;
    std::uint64_t version = 0;
    bool ok = false;
    std::string text;
    std::uint64_t code = 0;
    if (r.number(version, "version") && r.flag(ok, "status")) {
        if (ok) {
            r.text(text, "NVRTC identity");
        } else if (r.number(code, "error code") && r.text(text, "error message")) {
            if (code == 0 || code > kCodeMax) code = static_cast<std::uint64_t>(Errc::internal);
        }
    }
    if (auto bad = r.finish()) return std::move(*bad);
    hello.version = static_cast<std::uint32_t>(version);
    if (version != static_cast<std::uint32_t>(version)) hello.version = 0;
    hello.nvrtc_identity = ok ? Result<std::string>(std::move(text)) : Error{static_cast<Errc>(code), std::move(text)};
    return hello;
}

namespace {

// A Writer as job_fields calls it: each field with its name (for the Reader's messages), true.
struct JobWriter {
    Writer &w;
    bool text(const std::string &s, const char *) {
        w.text(s);
        return true;
    }
    bool texts(const std::vector<std::string> &list, const char *) {
        w.texts(list);
        return true;
    }
    bool pairs(const std::vector<std::pair<std::string, std::string>> &list, const char *) {
        w.pairs(list);
        return true;
    }
};

// A job's link inputs: their count, then each one's path, kind and bytes (what the parent keyed:
// the worker links these, never the files as they are by then).
bool link_inputs(JobWriter &out, const std::vector<compile::linker::Input> &inputs) {
    out.w.number(inputs.size());
    for (const compile::linker::Input &in : inputs) {
        out.w.text(in.path).number(static_cast<std::uint64_t>(in.kind)).text(*in.bytes);
    }
    return true;
}

bool link_inputs(Reader &r, std::vector<compile::linker::Input> &inputs) {
    std::uint64_t n = 0;
    if (!r.number(n, "link input count")) return false;
    for (std::uint64_t i = 0; i < n; ++i) {
        compile::linker::Input in;
        std::uint64_t kind = 0;
        std::string bytes;
        if (!r.text(in.path, "link input path") || !r.number(kind, "link input kind") ||
            !r.text(bytes, "link input bytes")) {
            return false;
        }
        if (kind > static_cast<std::uint64_t>(compile::linker::Kind::library))
            return r.fail("link input kind", "is unknown");
        in.kind = static_cast<compile::linker::Kind>(kind);
        in.bytes = std::make_shared<const std::string>(std::move(bytes));
        inputs.push_back(std::move(in));
    }
    return true;
}

// A job's fields in its frame, in their one order, for the writer (`Io` a JobWriter, `JobRef`
// a const compile::Job) and the reader (a Reader, a compile::Job) alike: a field added here is
// written and read in the same place, never in one and not the other.
template <class Io, class JobRef>
bool job_fields(Io &io, JobRef &job) {
    return io.text(job.request.source, "source") && io.text(job.request.program_name, "program name") &&
           io.texts(job.request.options, "options") && io.pairs(job.request.headers, "headers") &&
           io.texts(job.request.name_expressions, "name expressions") && io.text(job.pch_identity, "PCH identity") &&
           io.texts(job.pch_options, "PCH options") && link_inputs(io, job.request.link_inputs) &&
           io.texts(job.request.link_options, "link options") && io.text(job.request.link_arch, "link arch");
}

}  // namespace

std::string encode_job(const compile::Job &job) {
    Writer w;
    JobWriter out{w};
    (void)job_fields(out, job);  // a writer never fails
    return w.take();
}

Result<compile::Job> decode_job(std::string_view payload) {
    Reader r(payload, "job");
    compile::Job job;
    (void)job_fields(r, job);  // the first field that does not fit stops it: finish() says which
    if (auto bad = r.finish()) return std::move(*bad);
    return job;
}

std::string encode_outcome(const compile::JobOutcome &outcome) {
    Writer w;
    w.number(outcome.used_pch ? 1 : 0).number(outcome.made_pch ? 1 : 0).number(outcome.output ? 1 : 0);
    if (outcome.output) {
        w.text(outcome.output->cubin).text(outcome.output->log).pairs(outcome.output->lowered_names);
        w.number(static_cast<std::uint64_t>(outcome.output->link_nanoseconds + 1));  // 0: no link
    } else {
        const Error &e = outcome.output.error();
        w.number(static_cast<std::uint64_t>(e.code)).text(e.message).number(static_cast<std::uint64_t>(e.sys_errno));
    }
    return w.take();
}

Result<compile::JobOutcome> decode_outcome(std::string_view payload) {
    Reader r(payload, "outcome");
    bool used = false, made = false, ok = false;
    compile::compiler::Output out;
    Error error{Errc::internal, {}};
    std::uint64_t code = 0, sys_errno = 0;
    if (r.flag(used, "PCH use") && r.flag(made, "PCH creation") && r.flag(ok, "status")) {
        if (ok) {
            std::uint64_t link_ns = 0;
            r.text(out.cubin, "cubin") && r.text(out.log, "log") && r.pairs(out.lowered_names, "lowered names") &&
                r.number(link_ns, "link time");
            out.link_nanoseconds = static_cast<std::int64_t>(link_ns & 0x7fffffffffffffff) - 1;
        } else if (r.number(code, "error code") && r.text(error.message, "error message") &&
                   r.number(sys_errno, "errno")) {
            error.code = code == 0 || code > kCodeMax ? Errc::internal : static_cast<Errc>(code);
            error.sys_errno = static_cast<int>(sys_errno & 0x7fffffff);
        }
    }
    if (auto bad = r.finish()) return std::move(*bad);
    compile::JobOutcome outcome{ok ? Result<compile::compiler::Output>(std::move(out)) : std::move(error), used, made};
    return outcome;
}

Status send_frame(int fd, Type type, std::string_view payload, const std::string &peer) {
    std::string header(kMagic, sizeof kMagic);
    const auto t = static_cast<std::uint32_t>(type);
    for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>((t >> (8 * i)) & 0xff));
    put_u64(header, payload.size());
    for (std::string_view part : {std::string_view(header), payload}) {
        while (!part.empty()) {
            const ssize_t n = ::send(fd, part.data(), part.size(), MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                const int err = errno;
                return Error{Errc::io, "cannot write to " + peer + ": " + errno_text(err), err};
            }
            part.remove_prefix(static_cast<std::size_t>(n));
        }
    }
    return Ok{};
}

namespace {

// Reads exactly `size` bytes; how many it got before the peer closed, or -errno.
long long read_exactly(int fd, char *out, std::size_t size) {
    std::size_t got = 0;
    while (got < size) {
        const ssize_t n = ::read(fd, out + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -static_cast<long long>(errno);
        if (n == 0) break;
        got += static_cast<std::size_t>(n);
    }
    return static_cast<long long>(got);
}

}  // namespace

Result<std::optional<std::string>> read_frame(int fd, Type expected, const std::string &peer) {
    char header[kHeaderSize];
    const long long got = read_exactly(fd, header, kHeaderSize);
    if (got < 0)
        return Error{Errc::io, "cannot read from " + peer + ": " + errno_text(static_cast<int>(-got)),
                     static_cast<int>(-got)};
    if (got == 0) return std::optional<std::string>();
    if (got < static_cast<long long>(kHeaderSize))
        return Error{Errc::io, peer + " closed the connection inside a message"};
    if (std::memcmp(header, kMagic, sizeof kMagic) != 0) {
        return Error{Errc::internal, "worker protocol: " + peer + " sent a frame without the KJW1 magic"};
    }
    std::uint32_t type = 0;
    for (int i = 3; i >= 0; --i) type = (type << 8) | static_cast<unsigned char>(header[4 + i]);
    const std::uint64_t size = get_u64(header + 8);
    if (type != static_cast<std::uint32_t>(expected)) {
        return Error{Errc::internal, "worker protocol: " + peer + " sent a message of type " + std::to_string(type) +
                                         " where type " + std::to_string(static_cast<std::uint32_t>(expected)) +
                                         " was due"};
    }
    if (size > kMaxPayload) {
        return Error{Errc::internal, "worker protocol: " + peer + " announced a message of " + std::to_string(size) +
                                         " bytes, over the limit"};
    }
    std::string payload(static_cast<std::size_t>(size), '\0');
    const long long body = read_exactly(fd, payload.data(), payload.size());
    if (body < 0)
        return Error{Errc::io, "cannot read from " + peer + ": " + errno_text(static_cast<int>(-body)),
                     static_cast<int>(-body)};
    if (static_cast<std::uint64_t>(body) < size)
        return Error{Errc::io, peer + " closed the connection inside a message"};
    return std::optional<std::string>(std::move(payload));
}

int serve(int fd, pid_t parent, void (*before_job)(const compile::Job &)) {
    // The parent thread that started this worker may die at any time, even before the prctl:
    // then the parent is no longer `parent`, and this worker ends at once.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) return 1;
    const std::string peer = "the parent process";
    Hello hello;
    hello.nvrtc_identity = compile::compiler::nvrtc_identity();
    if (auto st = send_frame(fd, Type::hello, encode_hello(hello), peer); !st) {
        std::fprintf(stderr, "kjit-worker: %s\n", st.error().message.c_str());
        return 1;
    }
    for (;;) {
        auto frame = read_frame(fd, Type::job, peer);
        if (!frame) {
            std::fprintf(stderr, "kjit-worker: %s\n", frame.error().message.c_str());
            return 1;
        }
        if (!*frame) return 0;  // the batch is over
        std::string reply;
        try {
            auto job = decode_job(**frame);
            if (!job) {
                reply = encode_outcome(compile::JobOutcome{std::move(job).error()});
            } else {
                if (before_job) before_job(*job);
                reply = encode_outcome(compile::run_here(*job));
            }
        } catch (const std::bad_alloc &) {
            reply = encode_outcome(compile::JobOutcome{Error{Errc::out_of_memory, "kjit-worker: out of memory"}});
        } catch (const std::exception &e) {
            reply = encode_outcome(compile::JobOutcome{Error{Errc::internal, std::string("kjit-worker: ") + e.what()}});
        }
        if (auto st = send_frame(fd, Type::outcome, reply, peer); !st) {
            std::fprintf(stderr, "kjit-worker: %s\n", st.error().message.c_str());
            return 1;
        }
    }
}

}  // namespace kjit::batch::worker_protocol
