#include "storage/remote/redis_backend.hpp"

#include "storage/remote/key_layout.hpp"
#include "storage/remote/redis_client.hpp"
#include "util/log.hpp"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kjit::storage::remote::redis_backend {

namespace {

// Redis 7 runs a script so flagged even at maxmemory with noeviction, every write in it
// included: the lease scripts write a hundred bytes that expire, and must work on a full server
// (the entry's own SET is never sent so). An older server refuses the line: plain_scripts_.
constexpr std::string_view kAllowOom = "#!lua flags=allow-oom\n";

// KEYS: entry, lease, failure. ARGV: token, lease length in ms. One atomic step: the entry is
// there: "hit"; a shared failure: "failed" and its text; the lease was free and is now ours:
// "owner"; its holder could not store the entry: "unstored" and the marker (tier.cpp's
// kUnstored); else "wait".
constexpr std::string_view kClaimScript =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return {'hit'} end "
    "local f = redis.call('GET', KEYS[3]) "
    "if f then return {'failed', f} end "
    "if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'owner'} end "
    "local l = redis.call('GET', KEYS[2]) "
    "if l and string.sub(l, 1, 9) == 'unstored:' then return {'unstored', l} end "
    "return {'wait'}";
// Compare-and-PEXPIRE, compare-and-DEL: only a lease's own holder renews or releases it, and a
// bad value is deleted only while it is still there (PEXPIRE and DEL are allowed at maxmemory:
// no flag needed).
constexpr const char *kRenewScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
constexpr const char *kRemoveIfSameScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
// Compare-and-replace the lease by the marker (ARGV[2], for ARGV[3] ms). Should the server
// refuse the SET anyway (no allow-oom before Redis 7), the lease is released plainly, and the
// waiters' own claims, refused alike, send them to compile at once anyway.
constexpr std::string_view kLeaveMarkerScript = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
                                                "local ok = redis.pcall('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) "
                                                "if type(ok) == 'table' and ok.err then redis.call('DEL', KEYS[1]) end "
                                                "return 1";

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

std::optional<std::string> string_of(const redisReply &r) {
    if (r.type != REDIS_REPLY_STRING) return std::nullopt;
    return std::string(text_of(r));
}

Refusal refusal_of(const char *command, std::string_view text) { return Refusal{command, std::string(text)}; }

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

// A describe line for `command`'s refusal on `server`: NOAUTH (a password wanted and none
// given) is a failure of the server ("  refused: ", counted as an error: `kjit cache stats
// --remote` fails); any other (NOPERM of an ACL, a renamed or disabled command, as managed
// servers have) only limits what is shown ("  limited: ", which the command says as a warning).
std::string refusal_line(const Server &server, const char *command, const redisReply &reply, const char *consequence) {
    const std::string_view text = text_of(reply);
    const std::string what = "remote cache " + display(server) + ": " + command + " refused: " + std::string(text);
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

// One Redis server (or the Redis Cluster it is a node of) through its ServerLink: each thread
// its own connection, one circuit breaker for the process (redis_client.hpp).
class RedisBackend final : public Backend {
public:
    RedisBackend(const Server &server, const Config &config) : link_(server, config), name_space_(config.name_space) {}

    const Server &server() const override { return link_.server(); }
    bool usable() const override { return link_.usable(); }
    std::int64_t quick_retry_at_ns() const override { return link_.quick_retry_at_ns(); }

    Result<Claim> look_up_and_claim(const KeySet &keys, const std::string &token, std::int64_t lease_ms,
                                    bool read_only) override;
    Result<HolderState> poll_holder(const KeySet &keys) override;
    Result<std::vector<Fetched>> fetch(const std::vector<std::string> &entry_keys) override;
    Result<Stored> put_if_absent(const std::string &entry_key, const std::string &value) override;
    Result<std::optional<Refusal>> put_failure(const std::string &failure_key, const std::string &text,
                                               int seconds) override;
    Status remove_if_same(const std::string &key, const std::string &value) override;
    Status leave_marker(const std::string &lease_key, const std::string &token, const std::string &marker,
                        std::int64_t marker_ms) override;
    Status renew(const std::vector<std::pair<std::string, std::string>> &leases, std::int64_t lease_ms) override;
    std::string describe() override;

private:
    // Runs `commands` in one pipeline, counting the link's failures (not an open breaker's).
    Result<std::vector<Reply>> round_trip(const std::vector<Command> &commands);
    // The claim's verdict from the lease script's reply (an array), or nullopt when the server
    // refused the script's allow-oom line (Redis 6): then ask again without it.
    std::optional<Claim> verdict_of(const redisReply &verdict);
    // What a read-only look-up's GETs of the lease and the failure say.
    static Claim read_only_claim(const redisReply &lease, const redisReply &failure);
    // `script` with the allow-oom flag, unless the server refused it.
    std::string flagged(std::string_view script) const {
        return plain_scripts_.load(std::memory_order_relaxed) ? std::string(script)
                                                              : std::string(kAllowOom) + std::string(script);
    }
    // Whether `reply`, the first of `command` that making room sends (INFO, SCAN, OBJECT
    // IDLETIME, MEMORY USAGE), is not an error. A refusal (an ACL, a renamed command) is said
    // once per process; one of the last three stops making room on this server.
    bool allowed(const char *command, const redisReply &reply);
    // How many bytes a store of `value_bytes` on this full server wants freed (INFO memory).
    std::uint64_t room_wanted(std::size_t value_bytes);
    // Deletes this namespace's least recently used entries until about `bytes` are free, a
    // sample at a time (as Redis's LRU): the bytes freed (0: none found).
    std::uint64_t make_room(std::uint64_t bytes);
    // One sample's worth of that: the idlest of a sample, deleted until `bytes` or the sample
    // runs out: the bytes freed.
    std::uint64_t remove_idlest(std::uint64_t bytes);
    // The count of this namespace's entries, as describe's line.
    std::string count_entries();

    ServerLink link_;
    std::string name_space_;
    std::atomic<bool> plain_scripts_{false};     // the server refused kAllowOom (Redis 6): scripts go without it
    std::atomic<std::uint64_t> scan_cursor_{0};  // where make_room's sampling goes on
    // The server refused a command that making room needs (SCAN, OBJECT or MEMORY: an ACL or a
    // renamed command, as managed servers have): a full server's store is not retried.
    std::atomic<bool> room_making_refused_{false};
};

Result<std::vector<Reply>> RedisBackend::round_trip(const std::vector<Command> &commands) {
    LinkFailure failure = LinkFailure::broken;
    auto replies = link_.run(commands, &failure);
    if (!replies && failure != LinkFailure::open_breaker && failure != LinkFailure::cancelled) {
        counters().errors.fetch_add(1, std::memory_order_relaxed);
        if (failure == LinkFailure::timeout) counters().timeouts.fetch_add(1, std::memory_order_relaxed);
    }
    return replies;
}

Result<Claim> RedisBackend::look_up_and_claim(const KeySet &keys, const std::string &token, std::int64_t lease_ms,
                                              bool read_only) {
    const std::string ms = std::to_string(lease_ms);
    for (;;) {
        // The entry, and in the same round trip the claim (or, read-only, what a claim would see).
        const std::string claim_script = flagged(kClaimScript);
        std::vector<Command> first{{"GET", keys.entry}};
        if (read_only) {
            first.push_back({"GET", keys.lease});
            first.push_back({"GET", keys.failure});
        } else {
            first.push_back({"EVAL", claim_script, "3", keys.entry, keys.lease, keys.failure, token, ms});
        }
        KJIT_TRY_ASSIGN(auto replies, round_trip(first));
        const redisReply &value = *replies[0];
        Claim claim;
        if (value.type == REDIS_REPLY_STRING) {
            claim.kind = Claim::Kind::entry;
            claim.value = std::string(text_of(value));
            return claim;
        }
        if (is_error(value)) {
            claim.kind = Claim::Kind::refused;
            claim.refusal = refusal_of("GET", text_of(value));
            return claim;
        }
        if (read_only) return read_only_claim(*replies[1], *replies[2]);
        if (auto verdict = verdict_of(*replies[1])) return std::move(*verdict);
    }
}

Claim RedisBackend::read_only_claim(const redisReply &lease, const redisReply &failure) {
    Claim claim;
    if (const auto text = string_of(failure)) {
        claim.kind = Claim::Kind::failed;
        claim.value = *text;
    } else if (const auto held = string_of(lease)) {
        claim.kind = held->rfind("unstored:", 0) == 0 ? Claim::Kind::unstored : Claim::Kind::held;
        claim.value = *held;
    }
    return claim;  // Kind::free unless said above
}

std::optional<Claim> RedisBackend::verdict_of(const redisReply &reply) {
    if (refused_shebang(reply) && !plain_scripts_.exchange(true)) {
        log().debug("remote cache {}: no script flags (before Redis 7): leases are refused when it is full",
                    display(link_.server()));
        return std::nullopt;
    }
    Claim claim;
    if (is_error(reply) || reply.type != REDIS_REPLY_ARRAY || reply.elements == 0) {
        claim.kind = Claim::Kind::refused;
        claim.refusal = refusal_of("the lease script", is_error(reply) ? text_of(reply) : "an unexpected reply");
        return claim;
    }
    const std::string_view verdict = text_of(*reply.element[0]);
    const bool detailed = reply.elements >= 2;
    if (detailed) claim.value = std::string(text_of(*reply.element[1]));
    if (verdict == "owner") {
        claim.kind = Claim::Kind::owner;
    } else if (verdict == "failed" && detailed) {
        claim.kind = Claim::Kind::failed;
    } else if (verdict == "unstored" && detailed) {
        claim.kind = Claim::Kind::unstored;
    } else if (verdict == "hit") {
        claim.kind = Claim::Kind::appeared;  // put between the GET and the script: read it again
    } else {
        claim.kind = Claim::Kind::held;
    }
    return claim;
}

Result<HolderState> RedisBackend::poll_holder(const KeySet &keys) {
    KJIT_TRY_ASSIGN(auto replies,
                    round_trip(
                        {{"EXISTS", keys.entry}, {"GET", keys.lease}, {"GET", keys.failure}, {"PTTL", keys.lease}}));
    const redisReply &has_entry = *replies[0];
    const redisReply &lease = *replies[1];
    const redisReply &ttl = *replies[3];
    HolderState state;
    state.entry_there = has_entry.type == REDIS_REPLY_INTEGER && has_entry.integer == 1;
    state.failure = string_of(*replies[2]);
    state.lease = string_of(lease);
    state.lease_left_ms = ttl.type == REDIS_REPLY_INTEGER && ttl.integer >= 0 ? ttl.integer : -1;
    if (is_error(has_entry) || is_error(lease)) {
        state.refusal = refusal_of("EXISTS", text_of(is_error(has_entry) ? has_entry : lease));
    }
    return state;
}

Result<std::vector<Fetched>> RedisBackend::fetch(const std::vector<std::string> &entry_keys) {
    std::vector<Command> gets;
    gets.reserve(entry_keys.size());
    for (const std::string &key : entry_keys) gets.push_back({"GET", key});
    KJIT_TRY_ASSIGN(auto replies, round_trip(gets));
    std::vector<Fetched> fetched(replies.size());
    for (std::size_t i = 0; i < replies.size(); ++i) {
        fetched[i].value = string_of(*replies[i]);
        if (is_error(*replies[i])) fetched[i].refusal = refusal_of("GET", text_of(*replies[i]));
    }
    return fetched;
}

Result<Stored> RedisBackend::put_if_absent(const std::string &entry_key, const std::string &value) {
    for (int attempt = 0;; ++attempt) {
        KJIT_TRY_ASSIGN(auto replies, round_trip({{"SET", entry_key, value, "NX"}}));
        const redisReply &reply = *replies[0];
        if (is_out_of_memory(reply) && attempt + 1 < kStoreAttempts &&
            !room_making_refused_.load(std::memory_order_relaxed)) {
            static std::atomic<bool> said{false};
            if (!said.exchange(true)) {
                log().warn("remote cache {}: the server is full and refused an entry ({}): libkjit now removes the "
                           "least recently used entries of its namespace '{}' there to make room. Set "
                           "maxmemory-policy allkeys-lru on the server (Redis then evicts by itself), or give "
                           "libkjit more maxmemory or a server of its own (said once per process)",
                           display(link_.server()), text_of(reply), name_space_);
            }
            if (make_room(room_wanted(value.size())) != 0) continue;
        }
        Stored stored;
        if (is_error(reply)) stored.refusal = refusal_of("SET", text_of(reply));
        stored.added = reply.type == REDIS_REPLY_STATUS;
        return stored;
    }
}

Result<std::optional<Refusal>> RedisBackend::put_failure(const std::string &failure_key, const std::string &text,
                                                         int seconds) {
    KJIT_TRY_ASSIGN(auto replies, round_trip({{"SET", failure_key, text, "EX", std::to_string(seconds)}}));
    if (is_error(*replies[0])) return std::optional<Refusal>(refusal_of("SET", text_of(*replies[0])));
    return std::optional<Refusal>();
}

Status RedisBackend::remove_if_same(const std::string &key, const std::string &value) {
    KJIT_TRY(round_trip({{"EVAL", kRemoveIfSameScript, "1", key, value}}));
    return Ok{};
}

Status RedisBackend::leave_marker(const std::string &lease_key, const std::string &token, const std::string &marker,
                                  std::int64_t marker_ms) {
    const std::string script = flagged(kLeaveMarkerScript);
    KJIT_TRY(round_trip({{"EVAL", script, "1", lease_key, token, marker, std::to_string(marker_ms)}}));
    return Ok{};
}

Status RedisBackend::renew(const std::vector<std::pair<std::string, std::string>> &leases, std::int64_t lease_ms) {
    const std::string ms = std::to_string(lease_ms);
    std::vector<Command> renewals;
    renewals.reserve(leases.size());
    for (const auto &[key, token] : leases) renewals.push_back({"EVAL", kRenewScript, "1", key, token, ms});
    KJIT_TRY(round_trip(renewals));
    return Ok{};
}

bool RedisBackend::allowed(const char *command, const redisReply &reply) {
    if (!is_error(reply)) return true;
    if (std::strcmp(command, "INFO") != 0) room_making_refused_.store(true, std::memory_order_relaxed);
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
        log().warn("remote cache {}: {} refused ({}): the server's ACL or a renamed command, as managed servers have. "
                   "libkjit cannot choose the entries to remove when the server is full: entries are stored while "
                   "there is room. Set maxmemory-policy allkeys-lru on the server, or allow INFO, SCAN, OBJECT and "
                   "MEMORY to libkjit's user (docs/remote.md, \"Commands and ACLs\"; said once per process)",
                   display(link_.server()), command, text_of(reply));
    }
    return false;
}

std::uint64_t RedisBackend::room_wanted(std::size_t value_bytes) {
    // What the server is over its maxmemory (its clients' buffers count too: the connections of
    // many nodes), then room for the value twice (it sits in the request's buffer as it is
    // stored) and for what other nodes store meanwhile.
    std::uint64_t over = 0;
    if (auto info = round_trip({{"INFO", "memory"}}); info && allowed("INFO", *(*info)[0])) {
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

std::uint64_t RedisBackend::make_room(std::uint64_t bytes) {
    std::uint64_t freed = 0;
    for (int round = 0; round < kMostRemovalRounds && freed < bytes; ++round) {
        const std::uint64_t now = remove_idlest(bytes - freed);
        if (now == 0) break;
        freed += now;
    }
    if (freed != 0) {
        log().debug("remote cache {}: full: removed {} bytes of namespace {}'s least recently used entries",
                    display(link_.server()), freed, name_space_);
    }
    return freed;
}

std::uint64_t RedisBackend::remove_idlest(std::uint64_t bytes) {
    // A sample of this namespace's entries, from where the last sampling stopped (a clock hand
    // over the key space), as Redis's own LRU samples: then the longest idle go first.
    const std::string pattern = key_layout::entries_pattern(name_space_);
    std::vector<std::string> sample;
    std::uint64_t cursor = scan_cursor_.load(std::memory_order_relaxed);
    for (int page = 0; page < kMostScanPages && sample.size() < kEnoughCandidates; ++page) {
        const std::string from = std::to_string(cursor);
        auto scan = round_trip({{"SCAN", from, "MATCH", pattern, "COUNT", kScanPage}});
        if (!scan) return 0;
        const redisReply &r = *(*scan)[0];
        if (!allowed("SCAN", r)) return 0;
        if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) break;
        cursor = std::strtoull(std::string(text_of(*r.element[0])).c_str(), nullptr, 10);
        for (std::size_t i = 0; i < r.element[1]->elements; ++i) {
            const std::string_view key = text_of(*r.element[1]->element[i]);
            if (key_layout::is_entry_of(key, name_space_)) sample.emplace_back(key);
        }
        if (cursor == 0 && page > 0) break;  // once round the key space
    }
    scan_cursor_.store(cursor, std::memory_order_relaxed);
    if (sample.empty()) return 0;
    // Idle time and size of each (neither touches the key: the sampling leaves the LRU as it is).
    std::vector<Command> ask;
    for (const std::string &key : sample) {
        ask.push_back({"OBJECT", "IDLETIME", key});
        ask.push_back({"MEMORY", "USAGE", key});
    }
    auto facts = round_trip(ask);
    if (!facts || !allowed("OBJECT IDLETIME", *(*facts)[0]) || !allowed("MEMORY USAGE", *(*facts)[1])) return 0;
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
    if (removals.empty() || !round_trip(removals)) return 0;
    return freed;
}

std::string RedisBackend::count_entries() {
    // libkjit's entries in this namespace, counted by SCAN (bounded: an operator's view).
    const std::string pattern = key_layout::entries_pattern(name_space_);
    std::string cursor = "0";
    std::uint64_t entries = 0;
    bool complete = false;
    for (int rounds = 0; rounds < 1000; ++rounds) {
        auto scan = round_trip({{"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}});
        if (!scan) break;
        const redisReply &r = *(*scan)[0];
        if (is_error(r)) return refusal_line(link_.server(), "SCAN", r, "libkjit's entries are not counted");
        if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) break;
        cursor = std::string(text_of(*r.element[0]));
        entries += r.element[1]->elements;
        if (cursor == "0") {
            complete = true;
            break;
        }
    }
    return "  libkjit entries (namespace " + name_space_ + "): " + std::to_string(entries) +
           (complete ? "" : " (at least; the count stopped early)") + "\n";
}

std::string RedisBackend::describe() {
    auto info = round_trip({{"INFO", "server"}, {"INFO", "memory"}, {"INFO", "stats"}, {"DBSIZE"}});
    if (!info) return "  unreachable: " + info.error().message + "\n";
    std::string out;
    const redisReply &first = *(*info)[0];
    if (is_error(first)) {
        out += refusal_line(link_.server(), "INFO", first, "the server's figures are not shown");
        if (text_of(first).rfind("NOAUTH", 0) == 0) return out;
    } else {
        out += info_lines(*info);
    }
    const redisReply &dbsize = *(*info)[3];
    if (dbsize.type == REDIS_REPLY_INTEGER) out += "  keys: " + std::to_string(dbsize.integer) + "\n";
    return out + count_entries();
}

}  // namespace

Result<std::unique_ptr<Backend>> make(const Server &server, const Config &config) {
    return std::unique_ptr<Backend>(std::make_unique<RedisBackend>(server, config));
}

}  // namespace kjit::storage::remote::redis_backend
