#include "remote/tier.hpp"

#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"
#include "util/log.hpp"

#include <hiredis/hiredis.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

namespace kjit::remote {

namespace {

// A lease's value once its holder compiled but could not store the entry (too large, the server
// full or refusing the key): kUnstored, then who and why. Waiters that see it compile at once,
// side by side, instead of taking the lease over one after another.
constexpr std::string_view kUnstored = "unstored:";
// How long that marker stays: a waiter polling once a second sees it; later comers too.
constexpr std::chrono::milliseconds kUnstoredAtLeast{5000};

// Redis 7 runs a script so flagged even at maxmemory with noeviction, every write in it
// included: the lease scripts write a hundred bytes that expire, and must work on a full server
// (the entry's own SET is never sent so). An older server refuses the line: Shard::plain_scripts.
constexpr std::string_view kAllowOom = "#!lua flags=allow-oom\n";

// KEYS: entry, lease, failure. ARGV: token, lease length in ms. One atomic step: the entry is
// there: "hit"; a shared failure: "failed" and its text; the lease was free and is now ours:
// "owner"; its holder could not store the entry: "unstored" and the marker; else "wait".
constexpr std::string_view kClaimScript =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return {'hit'} end "
    "local f = redis.call('GET', KEYS[3]) "
    "if f then return {'failed', f} end "
    "if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'owner'} end "
    "local l = redis.call('GET', KEYS[2]) "
    "if l and string.sub(l, 1, 9) == 'unstored:' then return {'unstored', l} end "
    "return {'wait'}";
// Compare-and-PEXPIRE, compare-and-DEL: only the lease's own holder renews or releases it
// (PEXPIRE and DEL are allowed at maxmemory: no flag needed).
constexpr const char *kRenewScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
constexpr const char *kReleaseScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
// Compare-and-replace the lease by the kUnstored marker (ARGV[2], for ARGV[3] ms). Should the
// server refuse the SET anyway (no allow-oom before Redis 7), the lease is released plainly,
// and the waiters' own claims, refused alike, send them to compile at once anyway.
constexpr std::string_view kReleaseUnstoredScript =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "local ok = redis.pcall('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) "
    "if type(ok) == 'table' and ok.err then redis.call('DEL', KEYS[1]) end "
    "return 1";

constexpr std::size_t kMaxFailureText = 64 * 1024;
constexpr int kFailureSeconds = 60;
constexpr auto kFirstPoll = std::chrono::milliseconds(50);
// How long one call may wait for a server that failed moments ago (its breaker's quick probes)
// before it goes on without the tier. A restart takes about a second: a call that waits it out
// costs that wait, one that compiles at once costs a compile the cluster already has under way,
// and the node that compiled through the outage can still store what it made. A server down for
// good costs only the calls of its outage's first second, since the wait ends with the quick
// probes (kSteadyProbes in redis_client.cpp).
constexpr std::int64_t kQuickRetryWindowNs = 2'000'000'000;
constexpr auto kLongestPoll = std::chrono::milliseconds(1000);
// A full server's eviction: keys sampled per SCAN page, pages at most, rounds of sample-delete-retry.
constexpr const char *kScanPage = "128";
constexpr int kMostScanPages = 16;
constexpr std::size_t kEnoughCandidates = 32;
constexpr int kStoreAttempts = 4;
constexpr int kMostRemovalRounds = 8;

bool is_out_of_memory(const redisReply &r) { return is_error(r) && text_of(r).rfind("OOM ", 0) == 0; }

// A server that refused a script's first line (Redis 6: a Lua syntax error at '#'; a server that
// does not know the flag).
bool refused_shebang(const redisReply &r) {
    const std::string_view text = text_of(r);
    return is_error(r) &&
           (text.find("near '#'") != std::string_view::npos || text.find("shebang") != std::string_view::npos ||
            text.find("Unknown lua shebang") != std::string_view::npos);
}

// Whether `key` is an entry of namespace `name_space` ("kjit:<format>[e<envelope>]:<namespace>:...:b:{...}").
// The value of `name` in the text of an INFO reply ("name:value" lines ending in CRLF), if there.
std::optional<std::string_view> info_field(std::string_view text, std::string_view name) {
    for (std::size_t pos = 0; pos < text.size();) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        const auto colon = line.find(':');
        if (colon != std::string_view::npos && line.substr(0, colon) == name) return line.substr(colon + 1);
        pos = end + 1;
    }
    return std::nullopt;
}

// The SCAN pattern of a namespace's entries (entry_of_namespace checks what it matches).
std::string entries_pattern(const std::string &name_space) { return "kjit:*:" + name_space + ":*:b:*"; }

bool entry_of_namespace(std::string_view key, const std::string &name_space) {
    const auto first = key.find(':');
    const auto second = first == std::string_view::npos ? first : key.find(':', first + 1);
    if (second == std::string_view::npos || key.substr(0, first) != "kjit") return false;
    return key.substr(second + 1, name_space.size() + 1) == name_space + ":" &&
           key.find(":b:{") != std::string_view::npos;
}

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

// Renews every lease the process holds on one server: one thread, started by the first lease
// and kept (its connection too), that sends one pipeline of compare-and-PEXPIREs every third of
// the lease's length. Adding and removing a lease takes a lock the thread never holds across a
// round trip, so a release never waits for a renewal. A forked child starts its own thread (the
// parent's is not there) on a list of its own.
class Renewer {
public:
    Renewer(Tier &tier, ServerLink &link) : tier_(tier), link_(link) {}

    // Renews `key` while it holds `token`, until remove(): its id (0: no thread could start,
    // the lease lapses after its length).
    std::uint64_t add(const std::string &key, const std::string &token) {
        State &st = state();
        std::lock_guard<std::mutex> lock(st.mutex);
        if (!st.running) {
            try {
                std::thread([this, &st] { run(st); }).detach();
                st.running = true;
            } catch (const std::system_error &) {
                return 0;
            }
        }
        const std::uint64_t id = ++st.last_id;
        const bool first = st.leases.empty();
        st.leases.emplace(id, std::make_pair(key, token));
        if (first) st.wake.notify_one();  // else its tick comes anyway: no pipeline per new lease
        return id;
    }
    void remove(std::uint64_t id) {
        if (id == 0) return;
        State &st = state();
        std::lock_guard<std::mutex> lock(st.mutex);
        st.leases.erase(id);
    }

private:
    struct State {
        std::uint64_t generation = fork_guard::generation();
        std::mutex mutex;
        std::condition_variable wake;
        std::map<std::uint64_t, std::pair<std::string, std::string>> leases;  // id: key, token
        std::uint64_t last_id = 0;
        bool running = false;
    };

    // This process's state (a forked child's is a new one: the parent's lock may be held, and
    // its thread is not in the child). Leaked: the thread uses it to the process's end.
    State &state() {
        State *st = state_.load(std::memory_order_acquire);
        if (st && st->generation == fork_guard::generation()) return *st;
        auto *fresh = new State();
        if (state_.compare_exchange_strong(st, fresh, std::memory_order_acq_rel)) return *fresh;
        delete fresh;
        return *st;
    }

    void run(State &st) {
        const auto every = std::chrono::milliseconds(std::max<std::int64_t>(tier_.config().lease.count() / 3, 1));
        const std::string lease_ms = std::to_string(tier_.config().lease.count());
        std::unique_lock<std::mutex> lock(st.mutex);
        for (;;) {
            st.wake.wait(lock, [&] { return !st.leases.empty(); });
            // A new lease was set for its whole length: renewing it early or a tick late is fine.
            st.wake.wait_for(lock, every);
            std::vector<std::pair<std::string, std::string>> held;
            for (const auto &entry : st.leases) held.push_back(entry.second);
            if (held.empty()) continue;
            lock.unlock();
            std::vector<Command> renewals;
            for (const auto &[key, token] : held) renewals.push_back({"EVAL", kRenewScript, "1", key, token, lease_ms});
            (void)tier_.round_trip(link_, renewals);
            lock.lock();
        }
    }

    Tier &tier_;
    ServerLink &link_;
    std::atomic<State *> state_{nullptr};
};

struct Shard {
    Shard(Tier &tier, const Server &server, const Config &config) : link(server, config), renewer(tier, link) {}
    ServerLink link;
    Renewer renewer;
    std::atomic<bool> plain_scripts{false};     // the server refused kAllowOom (Redis 6): scripts go without it
    std::atomic<std::uint64_t> scan_cursor{0};  // where make_room's sampling goes on
    // The server refused a command that making room needs (SCAN, OBJECT or MEMORY: an ACL or a
    // renamed command, as managed servers have): a full server's store is not retried.
    std::atomic<bool> room_making_refused{false};

    // `script` with the allow-oom flag, unless the server refused it.
    std::string flagged(std::string_view script) const {
        return plain_scripts.load(std::memory_order_relaxed) ? std::string(script)
                                                             : std::string(kAllowOom) + std::string(script);
    }
};

void ShardFree::operator()(Shard *shard) const noexcept { delete shard; }

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
    for (const Server &server : config_.servers) shards_.emplace_back(new Shard(*this, server, config_));
}

Tier::~Tier() = default;

std::string Tier::redis_key(const Expected &expected, char kind) const {
    // The envelope version beside the cache format: a node of another version never reads,
    // counts as corrupt or replaces a value it cannot decode, and old and new nodes in a fleet
    // being upgraded keep to their own keys (0.6-0.8 deleted version 2 values as damaged).
    return "kjit:" + std::to_string(expected.format) + "e" + std::to_string(kEnvelopeVersion) + ":" +
           config_.name_space + ":" + nvrtc_release(expected.nvrtc_identity) + ":" + expected.arch + ":" + kind + ":{" +
           expected.key + "}";
}

std::vector<Shard *> Tier::order_of(const std::string &key) {
    // Rendezvous hashing: each server scores the key; the key goes to the highest. Adding or
    // removing a server moves only the keys it wins or held, and a server down hands each of
    // its keys to that key's second, spreading them over the others.
    std::vector<std::pair<std::uint64_t, Shard *>> scored;
    for (const auto &shard : shards_) scored.emplace_back(hash64(shard->link.server().id + "\n" + key), shard.get());
    std::stable_sort(scored.begin(), scored.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
    std::vector<Shard *> order;
    for (const auto &entry : scored) order.push_back(entry.second);
    return order;
}

Shard &Tier::first_usable(const std::string &key) {
    const std::vector<Shard *> order = order_of(key);
    for (Shard *shard : order) {
        if (shard->link.usable()) return *shard;
    }
    return *order.front();
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
    Settling s{expected,
               redis_key(expected, 'b'),
               redis_key(expected, 'l'),
               redis_key(expected, 'f'),
               new_token(),
               std::to_string(config_.lease.count()),
               steady_ns() + config_.wait_timeout.count() * 1'000'000};
    s.poll = kFirstPoll;
    // The key's servers in its order: a server that is down (its breaker open, or failing now)
    // hands the key to the next, as every node does.
    const std::vector<Shard *> order = order_of(expected.key);
    const std::int64_t quick_deadline = steady_ns() + kQuickRetryWindowNs;
    do {
        for (Shard *shard : order) {
            if (!shard->link.usable()) continue;  // its breaker said so once already
            s.link_failed = false;
            Settled settled = settle_on(*shard, s, defer_waits);
            if (!s.link_failed) return settled;
            log().debug("remote cache: {} failed; {} goes to the next server", display(shard->link.server()),
                        s.entry_key);
        }
    } while (wait_for_quick_retry(order, quick_deadline));
    return Settled{};  // compile_here: no server is up
}

bool Tier::wait_for_quick_retry(const std::vector<Shard *> &order, std::int64_t deadline_ns) {
    std::int64_t at = 0;
    for (const Shard *shard : order) {
        const std::int64_t when = shard->link.quick_retry_at_ns();
        if (when != 0 && (at == 0 || when < at)) at = when;
    }
    if (at == 0 || at > deadline_ns) return false;
    std::this_thread::sleep_for(std::chrono::nanoseconds(at - steady_ns()));
    return true;
}

Settled Tier::settle_on(Shard &shard, Settling &s, bool defer_waits) {
    for (;;) {
        Settled settled;
        const Claim claim = look_up_and_claim(shard, s, settled);
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
        if (wait_for_holder(shard, s, settled)) return settled;
    }
}

Tier::Claim Tier::look_up_and_claim(Shard &shard, Settling &s, Settled &out) {
    ServerLink &link = shard.link;
    // The entry, and in the same round trip the claim (or, read-only, what a claim would see).
    const std::string claim_script = shard.flagged(kClaimScript);
    std::vector<Command> first{{"GET", s.entry_key}};
    if (config_.read_only) {
        first.push_back({"GET", s.lease_key});
        first.push_back({"GET", s.failure_key});
    } else {
        first.push_back({"EVAL", claim_script, "3", s.entry_key, s.lease_key, s.failure_key, s.token, s.lease_ms});
    }
    auto replies = round_trip(link, first);
    if (!replies) {
        s.link_failed = true;
        return Claim::settled;
    }
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
    return take_verdict(shard, s, second, out);
}

Tier::Claim Tier::take_verdict(Shard &shard, Settling &s, const redisReply &second, Settled &out) {
    if (refused_shebang(second) && !shard.plain_scripts.exchange(true)) {
        log().debug("remote cache {}: no script flags (before Redis 7): leases are refused when it is full",
                    display(shard.link.server()));
        return Claim::again;
    }
    if (is_error(second) || second.type != REDIS_REPLY_ARRAY || second.elements == 0) {
        refused(shard.link, "the lease script", is_error(second) ? text_of(second) : "an unexpected reply");
        return Claim::settled;
    }
    const std::string_view verdict = text_of(*second.element[0]);
    const std::string_view detail = second.elements >= 2 ? text_of(*second.element[1]) : std::string_view();
    if (verdict == "owner") {
        counters().leases_owned.fetch_add(1, std::memory_order_relaxed);
        if (s.waited) counters().lease_takeovers.fetch_add(1, std::memory_order_relaxed);
        out.kind = Settled::Kind::owner;
        out.lease = std::make_unique<Lease>(*this, shard, s.lease_key, s.token);
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

bool Tier::wait_for_holder(Shard &shard, Settling &s, Settled &out) {
    ServerLink &link = shard.link;
    for (;;) {
        const std::int64_t now = steady_ns();
        if (now >= s.deadline_ns) {
            log().info("remote cache: waited {} ms for another node's compile of {}; compiling here",
                       config_.wait_timeout.count(), s.entry_key);
            return true;
        }
        // Never past the lease's end (plus a little): a holder that died costs at most its lease.
        std::int64_t sleep_ns = std::chrono::nanoseconds(s.poll).count();
        if (s.lease_left_ms >= 0) sleep_ns = std::min<std::int64_t>(sleep_ns, (s.lease_left_ms + 5) * 1'000'000);
        sleep_ns = std::min<std::int64_t>(sleep_ns, s.deadline_ns - now);
        std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
        s.poll = std::min<std::chrono::milliseconds>(kLongestPoll, s.poll * 3 / 2);
        auto state =
            round_trip(link,
                       {{"EXISTS", s.entry_key}, {"GET", s.lease_key}, {"GET", s.failure_key}, {"PTTL", s.lease_key}});
        if (!state) {
            s.link_failed = true;
            return true;
        }
        const redisReply &has_entry = *(*state)[0];
        const redisReply &lease = *(*state)[1];
        const redisReply &failure = *(*state)[2];
        const redisReply &ttl = *(*state)[3];
        s.lease_left_ms = ttl.type == REDIS_REPLY_INTEGER && ttl.integer >= 0 ? ttl.integer : -1;
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
    for (std::size_t i = 0; i < wanted.size(); ++i) by_link[&first_usable(wanted[i].key).link].push_back(i);
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
    // The lease's server; that one down, the key's next (where the nodes now look for it); all
    // of them down, or failing as it is stored, moments ago: the next quick probe's (a restart:
    // the entry still reaches the cluster, and the lease is released rather than left to lapse,
    // which a server restored from a snapshot would otherwise keep for its waiters to wait out).
    const std::int64_t quick_deadline = steady_ns() + kQuickRetryWindowNs;
    std::string why = "the server failed moments ago";
    do {
        Shard &shard = lease && lease->shard().link.usable() ? lease->shard() : first_usable(expected.key);
        if (!shard.link.usable()) continue;
        auto reply = store(shard, entry_key, value);
        if (!reply) {
            why = reply.error().message;
            continue;
        }
        const redisReply &r = **reply;
        if (is_error(r)) {
            refused(shard.link, "SET", text_of(r));  // e.g. OOM, with nothing of this namespace to remove
            return not_stored("SET refused: " + std::string(text_of(r)));
        }
        if (r.type == REDIS_REPLY_STATUS) {
            counters().puts.fetch_add(1, std::memory_order_relaxed);
            counters().bytes_out.fetch_add(value.size(), std::memory_order_relaxed);
        }
        if (lease && &lease->shard() == &shard) lease->stored();  // ours, or (NX lost) another writer's: it is there
        return;
    } while (wait_for_quick_retry(order_of(expected.key), quick_deadline));
    not_stored(why);
}

Result<Reply> Tier::store(Shard &shard, const std::string &entry_key, const std::string &value) {
    for (int attempt = 0;; ++attempt) {
        auto replies = round_trip(shard.link, {{"SET", entry_key, value, "NX"}});
        if (!replies) return std::move(replies).error();
        Reply reply = std::move((*replies)[0]);
        if (!is_out_of_memory(*reply) || attempt + 1 == kStoreAttempts ||
            shard.room_making_refused.load(std::memory_order_relaxed)) {
            return reply;
        }
        static std::atomic<bool> said{false};
        if (!said.exchange(true)) {
            log().warn("remote cache {}: the server is full and refused an entry ({}): libkjit now removes the least "
                       "recently used entries of its namespace '{}' there to make room. Set maxmemory-policy "
                       "allkeys-lru on the server (Redis then evicts by itself), or give libkjit more maxmemory or "
                       "a server of its own (said once per process)",
                       display(shard.link.server()), text_of(*reply), config_.name_space);
        }
        if (make_room(shard, room_wanted(shard, value.size())) == 0) return reply;
    }
}

bool Tier::allowed(Shard &shard, const char *command, const redisReply &reply) {
    if (!is_error(reply)) return true;
    if (std::strcmp(command, "INFO") != 0) shard.room_making_refused.store(true, std::memory_order_relaxed);
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
        log().warn("remote cache {}: {} refused ({}): the server's ACL or a renamed command, as managed servers have. "
                   "libkjit cannot choose the entries to remove when the server is full: entries are stored while "
                   "there is room. Set maxmemory-policy allkeys-lru on the server, or allow INFO, SCAN, OBJECT and "
                   "MEMORY to libkjit's user (docs/remote.md, \"Commands and ACLs\"; said once per process)",
                   display(shard.link.server()), command, text_of(reply));
    }
    return false;
}

std::uint64_t Tier::room_wanted(Shard &shard, std::size_t value_bytes) {
    // What the server is over its maxmemory (its clients' buffers count too: the connections of
    // many nodes), then room for the value twice (it sits in the request's buffer as it is
    // stored) and for what other nodes store meanwhile.
    std::uint64_t over = 0;
    if (auto info = round_trip(shard.link, {{"INFO", "memory"}}); info && allowed(shard, "INFO", *(*info)[0])) {
        const std::string_view text = text_of(*(*info)[0]);
        auto field = [&](std::string_view name) -> std::uint64_t {
            const auto value = info_field(text, name);
            return value ? std::strtoull(std::string(*value).c_str(), nullptr, 10) : 0;
        };
        const std::uint64_t used = field("used_memory"), limit = field("maxmemory");
        if (limit != 0 && used > limit) over = used - limit;
    }
    return over + 2 * static_cast<std::uint64_t>(value_bytes) + 64 * 1024;
}

std::uint64_t Tier::make_room(Shard &shard, std::uint64_t bytes) {
    std::uint64_t freed = 0;
    for (int round = 0; round < kMostRemovalRounds && freed < bytes; ++round) {
        const std::uint64_t now = remove_idlest(shard, bytes - freed);
        if (now == 0) break;
        freed += now;
    }
    if (freed != 0) {
        log().debug("remote cache {}: full: removed {} bytes of namespace {}'s least recently used entries",
                    display(shard.link.server()), freed, config_.name_space);
    }
    return freed;
}

std::uint64_t Tier::remove_idlest(Shard &shard, std::uint64_t bytes) {
    // A sample of this namespace's entries, from where the last sampling stopped (a clock hand
    // over the key space), as Redis's own LRU samples: then the longest idle go first.
    const std::string pattern = entries_pattern(config_.name_space);
    std::vector<std::string> sample;
    std::uint64_t cursor = shard.scan_cursor.load(std::memory_order_relaxed);
    for (int page = 0; page < kMostScanPages && sample.size() < kEnoughCandidates; ++page) {
        const std::string from = std::to_string(cursor);
        auto scan = round_trip(shard.link, {{"SCAN", from, "MATCH", pattern, "COUNT", kScanPage}});
        if (!scan) return 0;
        const redisReply &r = *(*scan)[0];
        if (!allowed(shard, "SCAN", r)) return 0;
        if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) break;
        cursor = std::strtoull(std::string(text_of(*r.element[0])).c_str(), nullptr, 10);
        for (std::size_t i = 0; i < r.element[1]->elements; ++i) {
            const std::string_view key = text_of(*r.element[1]->element[i]);
            if (entry_of_namespace(key, config_.name_space)) sample.emplace_back(key);
        }
        if (cursor == 0 && page > 0) break;  // once round the key space
    }
    shard.scan_cursor.store(cursor, std::memory_order_relaxed);
    if (sample.empty()) return 0;
    // Idle time and size of each (neither touches the key: the sampling leaves the LRU as it is).
    std::vector<Command> ask;
    for (const std::string &key : sample) {
        ask.push_back({"OBJECT", "IDLETIME", key});
        ask.push_back({"MEMORY", "USAGE", key});
    }
    auto facts = round_trip(shard.link, ask);
    if (!facts || !allowed(shard, "OBJECT IDLETIME", *(*facts)[0]) || !allowed(shard, "MEMORY USAGE", *(*facts)[1])) {
        return 0;
    }
    struct Candidate {
        long long idle, bytes;
        const std::string *key;
    };
    std::vector<Candidate> candidates;
    for (std::size_t i = 0; i < sample.size(); ++i) {
        const redisReply &idle = *(*facts)[2 * i];
        const redisReply &size = *(*facts)[2 * i + 1];
        if (size.type != REDIS_REPLY_INTEGER) continue;  // gone since
        // An LFU policy does not keep idle times: then the sample's order.
        candidates.push_back({idle.type == REDIS_REPLY_INTEGER ? idle.integer : 0, size.integer, &sample[i]});
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate &a, const Candidate &b) { return a.idle > b.idle; });
    std::vector<Command> removals;
    std::uint64_t freed = 0;
    for (const Candidate &c : candidates) {
        if (freed >= bytes) break;
        removals.push_back({"DEL", *c.key});
        freed += static_cast<std::uint64_t>(c.bytes);
    }
    if (removals.empty() || !round_trip(shard.link, removals)) return 0;
    return freed;
}

void Tier::put_failure(const Expected &expected, const Error &error, Lease &lease) {
    if (config_.read_only) return;
    ServerLink &link = lease.shard().link;
    if (!link.usable()) return;
    std::string text = error.message.substr(0, kMaxFailureText);
    text += "\n(compiled on " + host_name() + "; shared by libkjit's remote cache for " +
            std::to_string(kFailureSeconds) + " s)";
    auto replies = round_trip(link, {{"SET", redis_key(expected, 'f'), text, "EX", std::to_string(kFailureSeconds)}});
    if (!replies) return;
    if (is_error(*(*replies)[0])) return refused(link, "SET", text_of(*(*replies)[0]));
    lease.stored();
}

namespace {

// A describe line for `command`'s refusal on `link`'s server: NOAUTH (a password wanted and
// none given) is a failure of the server ("  refused: ", counted as an error: `kjit cache stats
// --remote` fails); any other (NOPERM of an ACL, a renamed or disabled command, as managed
// servers have) only limits what is shown ("  limited: ", which the command says as a warning).
std::string refusal_line(ServerLink &link, const char *command, const redisReply &reply, const char *consequence) {
    const std::string_view text = text_of(reply);
    const std::string what =
        "remote cache " + display(link.server()) + ": " + command + " refused: " + std::string(text);
    if (text.rfind("NOAUTH", 0) == 0) {
        counters().errors.fetch_add(1, std::memory_order_relaxed);
        return "  refused: " + what + "\n";
    }
    return "  limited: " + what + " (the server's ACL or a renamed command): " + consequence + "\n";
}

// The figures an operator looks at, from the replies of INFO server, memory and stats.
std::string info_lines(const std::vector<Reply> &info) {
    static const char *const wanted[] = {"redis_version", "used_memory_human", "maxmemory_human", "maxmemory_policy",
                                         "evicted_keys",  "keyspace_hits",     "keyspace_misses"};
    std::string out;
    for (std::size_t i = 0; i < 3; ++i) {
        for (const char *w : wanted) {
            if (const auto value = info_field(text_of(*info[i]), w)) {
                out += "  " + std::string(w) + ": " + std::string(*value) + "\n";
            }
        }
    }
    return out;
}

}  // namespace

std::string Tier::count_entries(ServerLink &link) {
    // libkjit's entries in this namespace, counted by SCAN (bounded: an operator's view).
    const std::string pattern = entries_pattern(config_.name_space);
    std::string cursor = "0";
    std::uint64_t entries = 0;
    bool complete = false;
    for (int rounds = 0; rounds < 1000; ++rounds) {
        auto scan = round_trip(link, {{"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}});
        if (!scan) break;
        const redisReply &r = *(*scan)[0];
        if (is_error(r)) return refusal_line(link, "SCAN", r, "libkjit's entries are not counted");
        if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) break;
        cursor = std::string(text_of(*r.element[0]));
        entries += r.element[1]->elements;
        if (cursor == "0") {
            complete = true;
            break;
        }
    }
    return "  libkjit entries (namespace " + config_.name_space + "): " + std::to_string(entries) +
           (complete ? "" : " (at least; the count stopped early)") + "\n";
}

std::string Tier::describe_servers() {
    std::string out;
    for (const auto &shard : shards_) {
        ServerLink *const link = &shard->link;
        out += "server " + display(link->server()) + "\n";
        auto info = round_trip(*link, {{"INFO", "server"}, {"INFO", "memory"}, {"INFO", "stats"}, {"DBSIZE"}});
        if (!info) {
            out += "  unreachable: " + info.error().message + "\n";
            continue;
        }
        const redisReply &first = *(*info)[0];
        if (is_error(first)) {
            out += refusal_line(*link, "INFO", first, "the server's figures are not shown");
            if (text_of(first).rfind("NOAUTH", 0) == 0) continue;
        } else {
            out += info_lines(*info);
        }
        const redisReply &dbsize = *(*info)[3];
        if (dbsize.type == REDIS_REPLY_INTEGER) out += "  keys: " + std::to_string(dbsize.integer) + "\n";
        out += count_entries(*link);
    }
    return out;
}

Lease::Lease(Tier &tier, Shard &shard, std::string key, std::string token)
    : tier_(tier), shard_(shard), key_(std::move(key)), token_(std::move(token)) {
    renewal_ = shard_.renewer.add(key_, token_);
}

Lease::~Lease() {
    shard_.renewer.remove(renewal_);
    ServerLink &link = shard_.link;
    if (!link.usable()) return;  // the server failed moments ago (perhaps this very store): it lapses
    if (stored_) {
        (void)tier_.round_trip(link, {{"EVAL", kReleaseScript, "1", key_, token_}});
        return;
    }
    const std::string marker = std::string(kUnstored) + host_name() + ": " + why_not_stored_;
    const std::string marker_ms = std::to_string(std::max(tier_.config().lease, kUnstoredAtLeast).count());
    const std::string script = shard_.flagged(kReleaseUnstoredScript);
    (void)tier_.round_trip(link, {{"EVAL", script, "1", key_, token_, marker, marker_ms}});
}

}  // namespace kjit::remote
