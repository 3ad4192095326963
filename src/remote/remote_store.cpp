#include "remote/remote_store.hpp"

#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"
#include "util/log.hpp"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

namespace kjit::remote {

namespace {

// A lease's value once its holder compiled but could not store the entry (too large, the server
// full or refusing the key): kUnstored, then who and why. Waiters that see it compile at once,
// side by side, instead of taking the lease over one after another.
constexpr std::string_view kUnstored = "unstored:";
// How long that marker stays: a waiter polling once a second sees it; later comers too.
constexpr std::chrono::milliseconds kUnstoredAtLeast{5000};

// KEYS: entry, lease, failure. ARGV: token, lease length in ms. One atomic step: the entry is
// there: "hit"; a shared failure: "failed" and its text; the lease was free and is now ours:
// "owner"; its holder could not store the entry: "unstored" and the marker; else "wait".
constexpr const char *kClaimScript =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return {'hit'} end "
    "local f = redis.call('GET', KEYS[3]) "
    "if f then return {'failed', f} end "
    "if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'owner'} end "
    "local l = redis.call('GET', KEYS[2]) "
    "if l and string.sub(l, 1, 9) == 'unstored:' then return {'unstored', l} end "
    "return {'wait'}";
// Compare-and-PEXPIRE, compare-and-DEL: only the lease's own holder renews or releases it.
constexpr const char *kRenewScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
constexpr const char *kReleaseScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
// Compare-and-replace the lease by the kUnstored marker (ARGV[2], for ARGV[3] ms). A server at
// maxmemory with noeviction refuses the SET (OOM) but not the DEL: then the lease is released
// plainly, and the waiters' own claims, refused alike, send them to compile at once anyway.
constexpr const char *kReleaseUnstoredScript = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
                                               "local ok = redis.pcall('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) "
                                               "if type(ok) == 'table' and ok.err then redis.call('DEL', KEYS[1]) end "
                                               "return 1";

constexpr std::size_t kMaxFailureText = 64 * 1024;
constexpr int kFailureSeconds = 60;
constexpr auto kFirstPoll = std::chrono::milliseconds(50);
constexpr auto kLongestPoll = std::chrono::milliseconds(1000);

// "host:pid:tid:random": unique per lease, and says who holds it to an operator reading it.
std::string new_token() {
    static std::atomic<std::uint64_t> sequence{0};
    thread_local std::mt19937_64 random{std::random_device{}() ^ static_cast<std::uint64_t>(steady_ns())};
    return host_name() + ":" + std::to_string(::getpid()) + ":" + std::to_string(::syscall(SYS_gettid)) + ":" +
           std::to_string(random() ^ sequence.fetch_add(1, std::memory_order_relaxed));
}

// "13.0" of an NVRTC identity "13.0 libnvrtc.so.13.0.88 12345678".
std::string nvrtc_release(const std::string &identity) { return identity.substr(0, identity.find(' ')); }

std::mutex registry_mutex;
std::map<std::string, Tier *> *registry = nullptr;  // leaked: tiers live as long as the process

void renew_registry_in_child() { fork_guard::renew(registry_mutex); }
const bool registry_fork_handler = fork_guard::at_fork_child(fork_guard::State::remote_tiers, &renew_registry_in_child);

bool is_unstored_marker(const redisReply &lease) {
    return lease.type == REDIS_REPLY_STRING && text_of(lease).substr(0, kUnstored.size()) == kUnstored;
}

// What settle() returns when the lease's holder compiled but could not store the entry.
Settled compile_beside_holder(const std::string &entry_key, std::string_view marker) {
    log().debug("remote cache: {}: its compiler could not store it ({}); compiling here at once", entry_key,
                marker.substr(kUnstored.size()));
    return Settled{};
}

// What settle() returns for the compile error another node stored (its text, with its log).
Settled shared_failure(std::string_view text) {
    counters().shared_failures.fetch_add(1, std::memory_order_relaxed);
    Settled settled;
    settled.kind = Settled::Kind::failed;
    settled.failure = Error{Errc::compile, std::string(text)};
    return settled;
}

}  // namespace

Counters &counters() {
    static Counters c;
    return c;
}

Result<Tier *> Tier::for_spec(const std::string &spec, std::string_view origin) {
    (void)registry_fork_handler;
    {
        std::lock_guard<std::mutex> lock(registry_mutex);
        if (registry) {
            auto it = registry->find(spec);
            if (it != registry->end()) return it->second;
        }
    }
    auto config = parse(spec, origin);
    if (!config) return std::move(config).error();
    std::lock_guard<std::mutex> lock(registry_mutex);
    if (!registry) registry = new std::map<std::string, Tier *>();
    auto &slot = (*registry)[spec];
    if (!slot && *config) {
        slot = new Tier(std::move(**config));
        log().debug("remote cache: {}", slot->config().canonical);
    }
    return slot;
}

Tier::Tier(Config config) : config_(std::move(config)) {
    for (const Server &s : config_.servers) links_.push_back(std::make_unique<ServerLink>(s, config_));
}

std::string Tier::redis_key(const Expected &expected, char kind) const {
    return "kjit:" + std::to_string(expected.format) + ":" + config_.name_space + ":" +
           nvrtc_release(expected.nvrtc_identity) + ":" + expected.arch + ":" + kind + ":{" + expected.key + "}";
}

ServerLink &Tier::link_for(const std::string &key) {
    // Rendezvous hashing: each key goes to the server with the highest score for it, so adding
    // or removing a server moves only the keys it wins or held.
    ServerLink *best = links_.front().get();
    std::uint64_t best_score = 0;
    for (const auto &link : links_) {
        const std::uint64_t score = hash64(link->server().id + "\n" + key);
        if (score >= best_score) {
            best_score = score;
            best = link.get();
        }
    }
    return *best;
}

Result<std::vector<Reply>> Tier::round_trip(ServerLink &link, const std::vector<Command> &commands, int cancel_fd) {
    LinkFailure failure = LinkFailure::broken;
    auto replies = link.run(commands, &failure, cancel_fd);
    if (!replies && failure != LinkFailure::open_breaker && failure != LinkFailure::cancelled) {
        counters().errors.fetch_add(1, std::memory_order_relaxed);
        if (failure == LinkFailure::timeout) counters().timeouts.fetch_add(1, std::memory_order_relaxed);
    }
    return replies;
}

void Tier::refused(ServerLink &link, const char *what, std::string_view reply_text) {
    counters().errors.fetch_add(1, std::memory_order_relaxed);
    const std::int64_t now = steady_ns();
    std::int64_t last = last_refusal_log_ns_.load(std::memory_order_relaxed);
    if (now - last >= 60'000'000'000 && last_refusal_log_ns_.compare_exchange_strong(last, now)) {
        log().warn("remote cache {}: {} refused: {} (compiles go on; said once a minute)", display(link.server()), what,
                   reply_text);
    } else {
        log().debug("remote cache {}: {} refused: {}", display(link.server()), what, reply_text);
    }
}

Settled Tier::settle(const Expected &expected, bool defer_waits) {
    ServerLink &link = link_for(expected.key);
    if (!link.usable()) return Settled{};  // compile_here: the breaker said so once already
    Settling s{expected,
               redis_key(expected, 'b'),
               redis_key(expected, 'l'),
               redis_key(expected, 'f'),
               new_token(),
               std::to_string(config_.lease.count()),
               steady_ns() + config_.wait_timeout.count() * 1'000'000};
    s.poll = kFirstPoll;
    for (;;) {
        Settled settled;
        const Claim claim = look_up_and_claim(link, s, settled);
        if (claim == Claim::settled) return settled;
        if (claim == Claim::again) continue;
        // Another node compiles it: wait for its entry, its failure or its lease's end; or, asked
        // not to wait, say so (only before any wait: a key settled again is waited for).
        if (defer_waits && !s.waited) {
            settled.kind = Settled::Kind::busy;
            return settled;
        }
        if (!s.waited) {
            counters().lease_waits.fetch_add(1, std::memory_order_relaxed);
            s.waited = true;
            log().debug("remote cache: waiting for another node's compile of {}", s.entry_key);
        }
        if (wait_for_holder(link, s, settled)) return settled;
    }
}

Tier::Claim Tier::look_up_and_claim(ServerLink &link, Settling &s, Settled &out) {
    // The entry, and in the same round trip the claim (or, read-only, what a claim would see).
    std::vector<Command> first{{"GET", s.entry_key}};
    if (config_.read_only) {
        first.push_back({"GET", s.lease_key});
        first.push_back({"GET", s.failure_key});
    } else {
        first.push_back({"EVAL", kClaimScript, "3", s.entry_key, s.lease_key, s.failure_key, s.token, s.lease_ms});
    }
    auto replies = round_trip(link, first);
    if (!replies) return Claim::settled;
    const redisReply &value = *(*replies)[0];
    if (value.type == REDIS_REPLY_STRING) {
        if (auto entry = verify_fetched(link, value, s.expected, s.entry_key)) {
            out.kind = Settled::Kind::fetched;
            out.entry = std::move(*entry);
            return Claim::settled;
        }
        // Deleted (or, read-only, left there): a miss; ask again, at most twice.
        return config_.read_only || ++s.corrupt_values > 2 ? Claim::settled : Claim::again;
    }
    if (is_error(value)) {
        refused(link, "GET", text_of(value));
        return Claim::settled;
    }
    if (!s.counted_miss) {
        counters().misses.fetch_add(1, std::memory_order_relaxed);
        s.counted_miss = true;
    }
    const redisReply &second = *(*replies)[1];
    if (config_.read_only) {
        const redisReply &failure = *(*replies)[2];
        if (failure.type == REDIS_REPLY_STRING) {
            out = shared_failure(text_of(failure));
        } else if (is_unstored_marker(second)) {
            out = compile_beside_holder(s.entry_key, text_of(second));
        } else if (second.type == REDIS_REPLY_STRING) {
            return Claim::wait;  // read-only never takes a lease; it waits on one another node holds
        }
        return Claim::settled;
    }
    if (is_error(second) || second.type != REDIS_REPLY_ARRAY || second.elements == 0) {
        refused(link, "the lease script", is_error(second) ? text_of(second) : "an unexpected reply");
        return Claim::settled;
    }
    const std::string_view verdict = text_of(*second.element[0]);
    const std::string_view detail = second.elements >= 2 ? text_of(*second.element[1]) : std::string_view();
    if (verdict == "owner") {
        counters().leases_owned.fetch_add(1, std::memory_order_relaxed);
        if (s.waited) counters().lease_takeovers.fetch_add(1, std::memory_order_relaxed);
        out.kind = Settled::Kind::owner;
        out.lease = std::make_unique<Lease>(*this, link, s.lease_key, s.token);
        return Claim::settled;
    }
    if (verdict == "failed" && second.elements >= 2) {
        out = shared_failure(detail);
        return Claim::settled;
    }
    if (verdict == "unstored" && second.elements >= 2) {
        out = compile_beside_holder(s.entry_key, detail);
        return Claim::settled;
    }
    if (verdict == "hit") return Claim::again;  // put between the GET and the script: fetch it
    return Claim::wait;
}

bool Tier::wait_for_holder(ServerLink &link, Settling &s, Settled &out) {
    for (;;) {
        const std::int64_t now = steady_ns();
        if (now >= s.deadline_ns) {
            log().info("remote cache: waited {} ms for another node's compile of {}; compiling here",
                       config_.wait_timeout.count(), s.entry_key);
            return true;
        }
        const auto sleep_ns = std::min<std::int64_t>(std::chrono::nanoseconds(s.poll).count(), s.deadline_ns - now);
        std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
        s.poll = std::min<std::chrono::milliseconds>(kLongestPoll, s.poll * 3 / 2);
        auto state = round_trip(link, {{"EXISTS", s.entry_key}, {"GET", s.lease_key}, {"GET", s.failure_key}});
        if (!state) return true;
        const redisReply &has_entry = *(*state)[0];
        const redisReply &lease = *(*state)[1];
        const redisReply &failure = *(*state)[2];
        if (failure.type == REDIS_REPLY_STRING) {
            out = shared_failure(text_of(failure));
            return true;
        }
        if (has_entry.type == REDIS_REPLY_INTEGER && has_entry.integer == 1) return false;  // fetch it
        if (is_error(has_entry) || is_error(lease)) {
            refused(link, "EXISTS", text_of(is_error(has_entry) ? has_entry : lease));
            return true;
        }
        if (is_unstored_marker(lease)) {
            out = compile_beside_holder(s.entry_key, text_of(lease));
            return true;
        }
        // Its holder is gone: read-only compiles here; else it tries to take the lease.
        if (is_nil(lease)) return config_.read_only;
    }
}

std::optional<Entry> Tier::verify_fetched(ServerLink &link, const redisReply &value, const Expected &expected,
                                          const std::string &entry_key) {
    counters().bytes_in.fetch_add(value.len, std::memory_order_relaxed);
    auto entry = decode(text_of(value), expected, entry_key, config_.max_entry_bytes);
    if (entry) {
        counters().hits.fetch_add(1, std::memory_order_relaxed);
        log().debug("remote hit {} ({} bytes, made on {})", entry_key, value.len, entry->producer);
        return std::move(*entry);
    }
    counters().corrupt.fetch_add(1, std::memory_order_relaxed);
    log().warn("remote cache {}: {}; {}", display(link.server()), entry.error().message,
               config_.read_only ? "not used (read-only: left there)" : "deleted");
    // Deleted only if it is still the bad value (another node may have put a good one since).
    if (!config_.read_only) (void)round_trip(link, {{"EVAL", kReleaseScript, "1", entry_key, text_of(value)}});
    return std::nullopt;
}

std::vector<std::optional<Entry>> Tier::fetch_many(const std::vector<Expected> &wanted) {
    constexpr std::size_t kKeysPerRoundTrip = 64;
    std::vector<std::optional<Entry>> found(wanted.size());
    // The keys of each server, in order.
    std::map<ServerLink *, std::vector<std::size_t>> by_link;
    for (std::size_t i = 0; i < wanted.size(); ++i) by_link[&link_for(wanted[i].key)].push_back(i);
    for (auto &[link, indexes] : by_link) {
        for (std::size_t start = 0; start < indexes.size() && link->usable(); start += kKeysPerRoundTrip) {
            const std::size_t end = std::min(indexes.size(), start + kKeysPerRoundTrip);
            std::vector<std::string> entry_keys;
            std::vector<Command> gets;
            for (std::size_t k = start; k < end; ++k) entry_keys.push_back(redis_key(wanted[indexes[k]], 'b'));
            for (const std::string &key : entry_keys) gets.push_back({"GET", key});
            auto replies = round_trip(*link, gets);
            if (!replies) break;
            for (std::size_t k = start; k < end; ++k) {
                const redisReply &value = *(*replies)[k - start];
                if (value.type == REDIS_REPLY_STRING) {
                    found[indexes[k]] = verify_fetched(*link, value, wanted[indexes[k]], entry_keys[k - start]);
                } else if (is_error(value)) {
                    refused(*link, "GET", text_of(value));
                }
            }
        }
    }
    return found;
}

void Tier::put(const Expected &expected, const store::cache_entry::Manifest &manifest, std::string_view cubin,
               Lease *lease) {
    auto not_stored = [&](std::string why) {
        if (lease) lease->not_stored(std::move(why));
    };
    if (config_.read_only) return not_stored("read-only");
    ServerLink &link = link_for(expected.key);
    if (!link.usable()) return not_stored("the server failed moments ago");
    const std::string value = encode(manifest, cubin, expected.format, host_name());
    // Compressed, the value is smaller than its cubin; the reader bounds what a value may unpack
    // to by max-entry-size too, so both are held to it.
    const std::size_t size = std::max(value.size(), cubin.size());
    if (size > config_.max_entry_bytes) {
        log().info("remote cache: {} not stored: {} bytes, over max-entry-size ({} bytes)", manifest.key, size,
                   config_.max_entry_bytes);
        return not_stored(std::to_string(size) + " bytes, over max-entry-size");
    }
    const std::string entry_key = redis_key(expected, 'b');
    auto replies = round_trip(link, {{"SET", entry_key, value, "NX"}});
    if (!replies) return not_stored(replies.error().message);
    const redisReply &r = *(*replies)[0];
    if (is_error(r)) {
        refused(link, "SET", text_of(r));  // e.g. OOM at maxmemory with noeviction
        return not_stored("SET refused: " + std::string(text_of(r)));
    }
    if (r.type == REDIS_REPLY_STATUS) {
        counters().puts.fetch_add(1, std::memory_order_relaxed);
        counters().bytes_out.fetch_add(value.size(), std::memory_order_relaxed);
    }
    if (lease) lease->stored();  // ours, or (NX lost) another writer's: the entry is there
}

void Tier::put_failure(const Expected &expected, const Error &error, Lease &lease) {
    if (config_.read_only) return;
    ServerLink &link = link_for(expected.key);
    if (!link.usable()) return;
    std::string text = error.message.substr(0, kMaxFailureText);
    text += "\n(compiled on " + host_name() + "; shared by libkjit's remote cache for " +
            std::to_string(kFailureSeconds) + " s)";
    auto replies = round_trip(link, {{"SET", redis_key(expected, 'f'), text, "EX", std::to_string(kFailureSeconds)}});
    if (!replies) return;
    if (is_error(*(*replies)[0])) return refused(link, "SET", text_of(*(*replies)[0]));
    lease.stored();
}

std::string Tier::describe_servers() {
    std::string out;
    for (const auto &link : links_) {
        out += "server " + display(link->server()) + "\n";
        auto info = round_trip(*link, {{"INFO", "server"}, {"INFO", "memory"}, {"INFO", "stats"}, {"DBSIZE"}});
        if (!info) {
            out += "  unreachable: " + info.error().message + "\n";
            continue;
        }
        // Refused (NOAUTH: a password is wanted; an ACL without INFO): said and counted as an
        // error, so that `kjit cache stats --remote` fails, as for a server out of reach.
        if (is_error(*(*info)[0])) {
            counters().errors.fetch_add(1, std::memory_order_relaxed);
            out += "  refused: remote cache " + display(link->server()) +
                   ": INFO refused: " + std::string(text_of(*(*info)[0])) + "\n";
            continue;
        }
        const char *wanted[] = {"redis_version", "used_memory_human", "maxmemory_human", "maxmemory_policy",
                                "evicted_keys",  "keyspace_hits",     "keyspace_misses"};
        for (std::size_t i = 0; i < 3; ++i) {
            std::string_view text = text_of(*(*info)[i]);
            for (std::size_t pos = 0; pos < text.size();) {
                std::size_t end = text.find('\n', pos);
                if (end == std::string_view::npos) end = text.size();
                std::string_view line = text.substr(pos, end - pos);
                if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
                const auto colon = line.find(':');
                for (const char *w : wanted) {
                    if (colon != std::string_view::npos && line.substr(0, colon) == w) {
                        out += "  " + std::string(line.substr(0, colon)) + ": " + std::string(line.substr(colon + 1)) +
                               "\n";
                    }
                }
                pos = end + 1;
            }
        }
        const redisReply &dbsize = *(*info)[3];
        if (dbsize.type == REDIS_REPLY_INTEGER) out += "  keys: " + std::to_string(dbsize.integer) + "\n";
        // libkjit's entries in this namespace, counted by SCAN (bounded: an operator's view).
        const std::string pattern = "kjit:*:" + config_.name_space + ":*:b:*";
        std::string cursor = "0";
        std::uint64_t entries = 0;
        int rounds = 0;
        bool complete = false;
        for (; rounds < 1000; ++rounds) {
            auto scan = round_trip(*link, {{"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}});
            if (!scan) break;
            const redisReply &r = *(*scan)[0];
            if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) break;
            cursor = std::string(text_of(*r.element[0]));
            entries += r.element[1]->elements;
            if (cursor == "0") {
                complete = true;
                break;
            }
        }
        out += "  libkjit entries (namespace " + config_.name_space + "): " + std::to_string(entries) +
               (complete ? "" : " (at least; the count stopped early)") + "\n";
    }
    return out;
}

Lease::Lease(Tier &tier, ServerLink &link, std::string key, std::string token)
    : tier_(tier), link_(link), key_(std::move(key)), token_(std::move(token)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    // No descriptor or no thread: the lease lapses after its length, costing another node a
    // duplicate compile at worst.
    if (!wake_.valid()) return;
    try {
        renewer_ = std::thread([this] { renew_until_released(); });
    } catch (const std::system_error &) {
    }
}

void Lease::renew_until_released() {
    const int every_ms = static_cast<int>(std::max<std::int64_t>(tier_.config().lease.count() / 3, 1));
    const std::string lease_ms = std::to_string(tier_.config().lease.count());
    for (;;) {
        pollfd released{wake_.get(), POLLIN, 0};
        const int n = ::poll(&released, 1, every_ms);
        if (n > 0) return;
        if (n < 0 && errno != EINTR) return;  // cannot wait: let it lapse rather than spin
        if (n == 0) (void)tier_.round_trip(link_, {{"EVAL", kRenewScript, "1", key_, token_, lease_ms}}, wake_.get());
    }
}

Lease::~Lease() {
    if (renewer_.joinable()) {
        const std::uint64_t one = 1;
        (void)!::write(wake_.get(), &one, sizeof one);  // an eventfd's write of 1 cannot block or fail here
        renewer_.join();
    }
    if (!link_.usable()) return;  // the server failed moments ago (perhaps this very store): it lapses
    if (stored_) {
        (void)tier_.round_trip(link_, {{"EVAL", kReleaseScript, "1", key_, token_}});
        return;
    }
    const std::string marker = std::string(kUnstored) + host_name() + ": " + why_not_stored_;
    const std::string marker_ms = std::to_string(std::max(tier_.config().lease, kUnstoredAtLeast).count());
    (void)tier_.round_trip(link_, {{"EVAL", kReleaseUnstoredScript, "1", key_, token_, marker, marker_ms}});
}

}  // namespace kjit::remote
