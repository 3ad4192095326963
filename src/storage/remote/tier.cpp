#include "storage/remote/tier.hpp"

#include "storage/remote/key_layout.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"
#include "util/log.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace kjit::storage::remote {

namespace {

// A lease's value once its holder compiled but could not store the entry (too large, the server
// full or refusing the key): kUnstored, then who and why. Waiters that see it compile at once,
// side by side, instead of taking the lease over one after another. A backend's atomic claim
// reports it (redis_backend.cpp's claim script knows the prefix).
constexpr std::string_view kUnstored = "unstored:";
// How long that marker stays: a waiter polling once a second sees it; later comers too.
constexpr std::chrono::milliseconds kUnstoredAtLeast{5000};

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
// Keys a fetch_many asks a server for in one round trip.
constexpr std::size_t kKeysPerRoundTrip = 64;

// "host:pid:tid:random": unique per lease, and says who holds it to an operator reading it.
std::string new_token() {
    static std::atomic<std::uint64_t> sequence{0};
    thread_local std::mt19937_64 random{std::random_device{}() ^ static_cast<std::uint64_t>(steady_ns())};
    return host_name() + ":" + std::to_string(::getpid()) + ":" + std::to_string(::syscall(SYS_gettid)) + ":" +
           std::to_string(random() ^ sequence.fetch_add(1, std::memory_order_relaxed));
}

std::mutex registry_mutex;
std::map<std::string, Tier *> *registry = nullptr;  // leaked: tiers live as long as the process

void renew_registry_in_child() { fork_guard::renew(registry_mutex); }
const bool registry_fork_handler = fork_guard::at_fork_child(fork_guard::State::remote_tiers, &renew_registry_in_child);

bool is_unstored_marker(const std::optional<std::string> &lease) {
    return lease && lease->compare(0, kUnstored.size(), kUnstored) == 0;
}

// What settle() returns when the lease's holder compiled but could not store the entry.
Settled compile_beside_holder(const std::string &entry_key, std::string_view marker) {
    log().debug("remote cache: {}: its compiler could not store it ({}); compiling here at once", entry_key,
                marker.substr(std::min(marker.size(), kUnstored.size())));
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
// and kept (its backend connection too), that renews them all in one round trip every third of
// the lease's length. Adding and removing a lease takes a lock the thread never holds across a
// round trip, so a release never waits for a renewal. A forked child starts its own thread (the
// parent's is not there) on a list of its own.
class Renewer {
public:
    Renewer(Tier &tier, Backend &backend) : tier_(tier), backend_(backend) {}

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
        if (first) st.wake.notify_one();  // else its tick comes anyway: no round trip per new lease
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
        const std::int64_t lease_ms = tier_.config().lease.count();
        const auto every = std::chrono::milliseconds(std::max<std::int64_t>(lease_ms / 3, 1));
        std::unique_lock<std::mutex> lock(st.mutex);
        for (;;) {
            st.wake.wait(lock, [&] { return !st.leases.empty(); });
            // A new lease was set for its whole length: renewing it early or a tick late is fine.
            st.wake.wait_for(lock, every);
            std::vector<std::pair<std::string, std::string>> held;
            for (const auto &entry : st.leases) held.push_back(entry.second);
            if (held.empty()) continue;
            lock.unlock();
            (void)backend_.renew(held, lease_ms);
            lock.lock();
        }
    }

    Tier &tier_;
    Backend &backend_;
    std::atomic<State *> state_{nullptr};
};

struct Shard {
    Shard(Tier &tier, std::unique_ptr<Backend> owned) : backend(std::move(owned)), renewer(tier, *backend) {}
    std::unique_ptr<Backend> backend;
    Renewer renewer;
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
    KJIT_TRY_ASSIGN(auto config, parse(spec, origin));
    std::lock_guard<std::mutex> lock(registry_mutex);
    if (!registry) registry = new std::map<std::string, Tier *>();
    auto &slot = (*registry)[spec];
    if (!slot && config) {
        std::vector<std::unique_ptr<Backend>> backends;
        for (const Server &server : config->servers) {
            KJIT_TRY_ASSIGN(auto backend, make_backend(server, *config));
            backends.push_back(std::move(backend));
        }
        slot = new Tier(std::move(*config), std::move(backends));
        log().debug("remote cache: {}", slot->config().canonical);
    }
    return slot;
}

Tier::Tier(Config config, std::vector<std::unique_ptr<Backend>> backends) : config_(std::move(config)) {
    for (auto &backend : backends) shards_.emplace_back(new Shard(*this, std::move(backend)));
}

Tier::~Tier() = default;

std::string Tier::server_key(const Expected &expected, char kind) const {
    return key_layout::key_of(expected, config_.name_space, kind);
}

std::vector<Shard *> Tier::order_of(const std::string &key) {
    // Rendezvous hashing: each server scores the key; the key goes to the highest. Adding or
    // removing a server moves only the keys it wins or held, and a server down hands each of
    // its keys to that key's second, spreading them over the others.
    std::vector<std::pair<std::uint64_t, Shard *>> scored;
    for (const auto &shard : shards_) {
        scored.emplace_back(hash64(shard->backend->server().id + "\n" + key), shard.get());
    }
    std::stable_sort(scored.begin(), scored.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
    std::vector<Shard *> order;
    for (const auto &entry : scored) order.push_back(entry.second);
    return order;
}

Shard &Tier::first_usable(const std::string &key) {
    const std::vector<Shard *> order = order_of(key);
    for (Shard *shard : order) {
        if (shard->backend->usable()) return *shard;
    }
    return *order.front();
}

void Tier::refused(const Backend &backend, const Refusal &refusal) {
    counters().errors.fetch_add(1, std::memory_order_relaxed);
    const std::int64_t now = steady_ns();
    std::int64_t last = last_refusal_log_ns_.load(std::memory_order_relaxed);
    if (now - last >= 60'000'000'000 && last_refusal_log_ns_.compare_exchange_strong(last, now)) {
        log().warn("remote cache {}: {} refused: {} (compiles go on; said once a minute)", display(backend.server()),
                   refusal.command, refusal.text);
    } else {
        log().debug("remote cache {}: {} refused: {}", display(backend.server()), refusal.command, refusal.text);
    }
}

Settled Tier::settle(const Expected &expected, bool defer_waits) {
    Settling s{expected, KeySet{server_key(expected, 'b'), server_key(expected, 'l'), server_key(expected, 'f')},
               new_token(), steady_ns() + config_.wait_timeout.count() * 1'000'000};
    s.poll = kFirstPoll;
    // The key's servers in its order: a server that is down (its breaker open, or failing now)
    // hands the key to the next, as every node does.
    const std::vector<Shard *> order = order_of(expected.key);
    const std::int64_t quick_deadline = steady_ns() + kQuickRetryWindowNs;
    do {
        for (Shard *shard : order) {
            if (!shard->backend->usable()) continue;  // its breaker said so once already
            s.link_failed = false;
            Settled settled = settle_on(*shard, s, defer_waits);
            if (!s.link_failed) return settled;
            log().debug("remote cache: {} failed; {} goes to the next server", display(shard->backend->server()),
                        s.keys.entry);
        }
    } while (wait_for_quick_retry(order, quick_deadline));
    return Settled{};  // compile_here: no server is up
}

bool Tier::wait_for_quick_retry(const std::vector<Shard *> &order, std::int64_t deadline_ns) {
    std::int64_t at = 0;
    for (const Shard *shard : order) {
        const std::int64_t when = shard->backend->quick_retry_at_ns();
        if (when != 0 && (at == 0 || when < at)) at = when;
    }
    if (at == 0 || at > deadline_ns) return false;
    std::this_thread::sleep_for(std::chrono::nanoseconds(at - steady_ns()));
    return true;
}

Settled Tier::settle_on(Shard &shard, Settling &s, bool defer_waits) {
    for (;;) {
        Settled settled;
        const Step step = look_up_and_claim(shard, s, settled);
        if (step == Step::settled) return settled;
        if (step == Step::again) continue;
        // Another node compiles it: wait for its entry, its failure or its lease's end; or, asked
        // not to wait, say so (only before any wait: a key settled again is waited for).
        if (defer_waits && !s.waited) {
            settled.kind = Settled::Kind::busy;
            return settled;
        }
        if (!s.waited) {
            counters().lease_waits.fetch_add(1, std::memory_order_relaxed);
            s.waited = true;
            log().debug("remote cache: waiting for another node's compile of {}", s.keys.entry);
        }
        if (wait_for_holder(shard, s, settled)) return settled;
    }
}

Tier::Step Tier::look_up_and_claim(Shard &shard, Settling &s, Settled &out) {
    Backend &backend = *shard.backend;
    auto claim = backend.look_up_and_claim(s.keys, s.token, config_.lease.count(), config_.read_only);
    if (!claim) {
        s.link_failed = true;
        return Step::settled;
    }
    if (claim->kind == Claim::Kind::entry) {
        if (auto entry = verify_fetched(backend, claim->value, s.expected, s.keys.entry)) {
            out.kind = Settled::Kind::fetched;
            out.entry = std::move(*entry);
            return Step::settled;
        }
        // Deleted (or, read-only, left there): a miss; ask again, at most twice.
        return config_.read_only || ++s.corrupt_values > 2 ? Step::settled : Step::again;
    }
    if (claim->kind == Claim::Kind::refused) {
        refused(backend, claim->refusal);
        return Step::settled;
    }
    if (!s.counted_miss) {
        counters().misses.fetch_add(1, std::memory_order_relaxed);
        s.counted_miss = true;
    }
    switch (claim->kind) {
        case Claim::Kind::owner:
            counters().leases_owned.fetch_add(1, std::memory_order_relaxed);
            if (s.waited) counters().lease_takeovers.fetch_add(1, std::memory_order_relaxed);
            out.kind = Settled::Kind::owner;
            out.lease = std::make_unique<Lease>(*this, shard, s.keys.lease, s.token);
            return Step::settled;
        case Claim::Kind::failed: out = shared_failure(claim->value); return Step::settled;
        case Claim::Kind::unstored: out = compile_beside_holder(s.keys.entry, claim->value); return Step::settled;
        case Claim::Kind::appeared: return Step::again;  // put between the read and the claim: fetch it
        case Claim::Kind::held:
            return Step::wait;      // read-only too: it never takes a lease, but waits on one another node holds
        case Claim::Kind::free:     // read-only, nothing there: compile here
        case Claim::Kind::entry:    // (handled above)
        case Claim::Kind::refused:  // (handled above)
            break;
    }
    return Step::settled;
}

bool Tier::wait_for_holder(Shard &shard, Settling &s, Settled &out) {
    Backend &backend = *shard.backend;
    for (;;) {
        const std::int64_t now = steady_ns();
        if (now >= s.deadline_ns) {
            log().info("remote cache: waited {} ms for another node's compile of {}; compiling here",
                       config_.wait_timeout.count(), s.keys.entry);
            return true;
        }
        // Never past the lease's end (plus a little): a holder that died costs at most its lease.
        std::int64_t sleep_ns = std::chrono::nanoseconds(s.poll).count();
        if (s.lease_left_ms >= 0) sleep_ns = std::min<std::int64_t>(sleep_ns, (s.lease_left_ms + 5) * 1'000'000);
        sleep_ns = std::min<std::int64_t>(sleep_ns, s.deadline_ns - now);
        std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
        s.poll = std::min<std::chrono::milliseconds>(kLongestPoll, s.poll * 3 / 2);
        auto state = backend.poll_holder(s.keys);
        if (!state) {
            s.link_failed = true;
            return true;
        }
        s.lease_left_ms = state->lease_left_ms;
        if (state->failure) {
            out = shared_failure(*state->failure);
            return true;
        }
        if (state->entry_there) return false;  // fetch it
        if (state->refusal) {
            refused(backend, *state->refusal);
            return true;
        }
        if (is_unstored_marker(state->lease)) {
            out = compile_beside_holder(s.keys.entry, *state->lease);
            return true;
        }
        // Its holder is gone: read-only compiles here; else it tries to take the lease.
        if (!state->lease) return config_.read_only;
    }
}

std::optional<Entry> Tier::verify_fetched(Backend &backend, const std::string &value, const Expected &expected,
                                          const std::string &entry_key) {
    counters().bytes_in.fetch_add(value.size(), std::memory_order_relaxed);
    auto entry = decode(value, expected, entry_key, config_.max_entry_bytes);
    if (entry) {
        counters().hits.fetch_add(1, std::memory_order_relaxed);
        log().debug("remote hit {} ({} bytes, made on {})", entry_key, value.size(), entry->producer);
        return std::move(*entry);
    }
    counters().corrupt.fetch_add(1, std::memory_order_relaxed);
    log().warn("remote cache {}: {}; {}", display(backend.server()), entry.error().message,
               config_.read_only ? "not used (read-only: left there)" : "deleted");
    // Deleted only if it is still the bad value (another node may have put a good one since).
    if (!config_.read_only) (void)backend.remove_if_same(entry_key, value);
    return std::nullopt;
}

std::vector<std::optional<Entry>> Tier::fetch_many(const std::vector<Expected> &wanted) {
    std::vector<std::optional<Entry>> found(wanted.size());
    // The keys of each server, in order.
    std::map<Backend *, std::vector<std::size_t>> by_server;
    for (std::size_t i = 0; i < wanted.size(); ++i) by_server[first_usable(wanted[i].key).backend.get()].push_back(i);
    for (auto &[backend, indexes] : by_server) {
        for (std::size_t start = 0; start < indexes.size() && backend->usable(); start += kKeysPerRoundTrip) {
            const std::size_t end = std::min(indexes.size(), start + kKeysPerRoundTrip);
            std::vector<std::string> entry_keys;
            for (std::size_t k = start; k < end; ++k) entry_keys.push_back(server_key(wanted[indexes[k]], 'b'));
            auto fetched = backend->fetch(entry_keys);
            if (!fetched) break;
            for (std::size_t k = start; k < end; ++k) {
                const Fetched &one = (*fetched)[k - start];
                if (one.value) {
                    found[indexes[k]] = verify_fetched(*backend, *one.value, wanted[indexes[k]], entry_keys[k - start]);
                } else if (one.refusal) {
                    refused(*backend, *one.refusal);
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
    const std::string entry_key = server_key(expected, 'b');
    // The lease's server; that one down, the key's next (where the nodes now look for it); all
    // of them down, or failing as it is stored, moments ago: the next quick probe's (a restart:
    // the entry still reaches the cluster, and the lease is released rather than left to lapse,
    // which a server restored from a snapshot would otherwise keep for its waiters to wait out).
    const std::int64_t quick_deadline = steady_ns() + kQuickRetryWindowNs;
    std::string why = "the server failed moments ago";
    do {
        Shard &shard = lease && lease->shard().backend->usable() ? lease->shard() : first_usable(expected.key);
        if (!shard.backend->usable()) continue;
        auto stored = shard.backend->put_if_absent(entry_key, value);
        if (!stored) {
            why = stored.error().message;
            continue;
        }
        if (stored->refusal) {
            refused(*shard.backend, *stored->refusal);  // e.g. full, with nothing of this namespace to remove
            return not_stored(stored->refusal->command + " refused: " + stored->refusal->text);
        }
        if (stored->added) {
            counters().puts.fetch_add(1, std::memory_order_relaxed);
            counters().bytes_out.fetch_add(value.size(), std::memory_order_relaxed);
        }
        if (lease && &lease->shard() == &shard) lease->stored();  // ours, or (first writer lost) another's: it is there
        return;
    } while (wait_for_quick_retry(order_of(expected.key), quick_deadline));
    not_stored(why);
}

void Tier::put_failure(const Expected &expected, const Error &error, Lease &lease) {
    if (config_.read_only) return;
    Backend &backend = *lease.shard().backend;
    if (!backend.usable()) return;
    std::string text = error.message.substr(0, kMaxFailureText);
    text += "\n(compiled on " + host_name() + "; shared by libkjit's remote cache for " +
            std::to_string(kFailureSeconds) + " s)";
    auto refusal = backend.put_failure(server_key(expected, 'f'), text, kFailureSeconds);
    if (!refusal) return;
    if (*refusal) return refused(backend, **refusal);
    lease.stored();
}

std::string Tier::describe_servers() {
    std::string out;
    for (const auto &shard : shards_) {
        out += "server " + display(shard->backend->server()) + "\n" + shard->backend->describe();
    }
    return out;
}

Lease::Lease(Tier &tier, Shard &shard, std::string key, std::string token)
    : tier_(tier), shard_(shard), key_(std::move(key)), token_(std::move(token)) {
    renewal_ = shard_.renewer.add(key_, token_);
}

Lease::~Lease() {
    shard_.renewer.remove(renewal_);
    Backend &backend = *shard_.backend;
    if (!backend.usable()) return;  // the server failed moments ago (perhaps this very store): it lapses
    if (stored_) {
        (void)backend.remove_if_same(key_, token_);
        return;
    }
    const std::string marker = std::string(kUnstored) + host_name() + ": " + why_not_stored_;
    const std::int64_t marker_ms = std::max(tier_.config().lease, kUnstoredAtLeast).count();
    (void)backend.leave_marker(key_, token_, marker, marker_ms);
}

}  // namespace kjit::storage::remote
