#include "storage/remote/cluster_router.hpp"

#include "util/filesystem.hpp"
#include "util/log.hpp"

#include <hiredis/hiredis.h>

#include <charconv>
#include <map>
#include <utility>

namespace kjit::storage::remote {

namespace {

// Redirects of one command followed before the round trip is given up (a reshard under way
// moves a slot once; a map read in the middle of a failover may be one step behind).
constexpr int kMostRedirects = 5;
// How long after a node's failure a caller is told to try again soon rather than compile on its
// own (a failover: cluster-node-timeout, often 1 to 15 s, then an election), and how soon.
constexpr std::int64_t kFailoverWatchNs = 15'000'000'000;
constexpr std::int64_t kFailoverPollNs = 100'000'000;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the one Redis Cluster hashes keys with.
std::uint16_t crc16(std::string_view bytes) {
    std::uint16_t crc = 0;
    for (const char c : bytes) {
        crc = static_cast<std::uint16_t>(crc ^ (static_cast<std::uint16_t>(static_cast<unsigned char>(c)) << 8));
        for (int bit = 0; bit < 8; ++bit) {
            crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
        }
    }
    return crc;
}

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

// "MOVED 3999 10.0.0.5:6379" or "ASK ...": the slot and where; false when malformed. The host
// may be an IPv6 address (the port follows its last ':') or empty (the node that answered).
bool parse_redirect(std::string_view text, std::uint16_t &slot, std::string_view &host, int &port) {
    const auto first = text.find(' ');
    const auto second = text.find(' ', first + 1);
    if (first == std::string_view::npos || second == std::string_view::npos) return false;
    const std::string_view slot_text = text.substr(first + 1, second - first - 1);
    const std::string_view place = text.substr(second + 1);
    const auto colon = place.rfind(':');
    if (colon == std::string_view::npos) return false;
    unsigned slot_number = 0;
    auto [slot_end, slot_ec] = std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot_number);
    auto [port_end, port_ec] = std::from_chars(place.data() + colon + 1, place.data() + place.size(), port);
    if (slot_ec != std::errc() || port_ec != std::errc() || slot_end != slot_text.data() + slot_text.size() ||
        port_end != place.data() + place.size() || slot_number >= 16384 || port <= 0 || port > 65535) {
        return false;
    }
    slot = static_cast<std::uint16_t>(slot_number);
    host = place.substr(0, colon);
    return true;
}

Error cluster_error(LinkFailure *failure, const Server &seed, std::string text) {
    *failure = LinkFailure::broken;
    return Error{Errc::io, "remote cache " + display(seed) + " (Redis Cluster): " + std::move(text)};
}

}  // namespace

std::uint16_t slot_of(std::string_view key) {
    const auto open = key.find('{');
    if (open != std::string_view::npos) {
        const auto close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
    }
    return static_cast<std::uint16_t>(crc16(key) % 16384);
}

std::string_view key_of(const Command &command) {
    if (command.empty()) return {};
    const std::string_view name = command[0];
    auto is = [&](const char *n) {
        if (name.size() != std::char_traits<char>::length(n)) return false;
        for (std::size_t i = 0; i < name.size(); ++i) {
            if ((name[i] | 0x20) != (n[i] | 0x20)) return false;
        }
        return true;
    };
    if (is("GET") || is("SET") || is("EXISTS") || is("PTTL") || is("PEXPIRE") || is("DEL")) {
        return command.size() > 1 ? command[1] : std::string_view();
    }
    if (is("EVAL") || is("EVALSHA")) return command.size() > 3 && command[2] != "0" ? command[3] : std::string_view();
    if (is("OBJECT") || is("MEMORY")) return command.size() > 2 ? command[2] : std::string_view();
    return {};
}

ClusterRouter::ClusterRouter(const Server &seed, const Config &config) : seed_(seed), config_(config) {
    config_.servers.clear();
    (void)node(seed_.host, seed_.port);  // node 0: asked first for the map
}

std::uint16_t ClusterRouter::node_number(std::string_view host, int port) {
    if (host.empty()) host = seed_.host;
    const std::size_t known = std::min(node_count_.load(std::memory_order_acquire), kMostNodes);
    for (std::size_t i = 0; i < known; ++i) {
        ServerLink *link = nodes_[i].load(std::memory_order_acquire);
        if (link && link->server().host == host && link->server().port == port) {
            return static_cast<std::uint16_t>(i + 1);
        }
    }
    const std::size_t index = node_count_.fetch_add(1, std::memory_order_acq_rel);
    if (index >= kMostNodes) return 0;
    Server server = seed_;
    server.kind = Server::Kind::tcp;
    server.host = std::string(host);
    server.port = port;
    server.db = 0;
    name_server(server);
    // Two threads naming a new node at once may both make one: the second is a spare link to
    // the same node (its own breaker), harmless. Links live as long as the process.
    nodes_[index].store(new ServerLink(std::move(server), config_, ServerLink::Role::cluster_node),
                        std::memory_order_release);
    return static_cast<std::uint16_t>(index + 1);
}

ServerLink *ClusterRouter::node_at(std::uint16_t number) const {
    return number == 0 ? nullptr : nodes_[number - 1].load(std::memory_order_acquire);
}

ServerLink *ClusterRouter::node(std::string_view host, int port) { return node_at(node_number(host, port)); }

bool ClusterRouter::refresh(int cancel_fd) {
    stale_.store(false, std::memory_order_release);
    const std::size_t known = std::min(node_count_.load(std::memory_order_acquire), kMostNodes);
    for (std::size_t i = 0; i < known; ++i) {
        ServerLink *asked = nodes_[i].load(std::memory_order_acquire);
        if (!asked || !asked->usable()) continue;
        LinkFailure failure = LinkFailure::broken;
        auto replies = asked->run({{"CLUSTER", "SLOTS"}}, &failure, cancel_fd);
        if (!replies || (*replies)[0]->type != REDIS_REPLY_ARRAY) continue;
        const redisReply &map = *(*replies)[0];
        for (std::size_t r = 0; r < map.elements; ++r) {
            const redisReply &range = *map.element[r];
            if (range.type != REDIS_REPLY_ARRAY || range.elements < 3) continue;
            const long long first = range.element[0]->integer, last = range.element[1]->integer;
            std::uint16_t primary = 0;
            for (std::size_t n = 2; n < range.elements; ++n) {  // the primary, then its replicas
                const redisReply &place = *range.element[n];
                if (place.type != REDIS_REPLY_ARRAY || place.elements < 2) continue;
                const std::string_view host = text_of(*place.element[0]);
                const std::uint16_t number = node_number(host.empty() ? asked->server().host : host,
                                                         static_cast<int>(place.element[1]->integer));
                if (n == 2) primary = number;
            }
            if (primary == 0 || first < 0 || last >= static_cast<long long>(kSlots) || first > last) continue;
            for (long long s = first; s <= last; ++s) {
                slot_node_[static_cast<std::size_t>(s)].store(primary, std::memory_order_release);
            }
        }
        return true;
    }
    stale_.store(true, std::memory_order_release);
    return false;
}

Result<bool> ClusterRouter::send(const std::vector<Command> &commands, const std::vector<std::size_t> &pending,
                                 std::vector<Reply> &out, LinkFailure *failure, int cancel_fd) {
    std::vector<std::pair<ServerLink *, std::vector<std::size_t>>> groups;
    for (const std::size_t i : pending) {
        const std::string_view key = key_of(commands[i]);
        ServerLink *link = key.empty() ? node(seed_.host, seed_.port)
                                       : node_at(slot_node_[slot_of(key)].load(std::memory_order_acquire));
        if (!link) link = node(seed_.host, seed_.port);  // a slot no node serves: the seed says where
        if (!link) return cluster_error(failure, seed_, "more than 256 nodes named");
        auto group = std::find_if(groups.begin(), groups.end(), [&](const auto &g) { return g.first == link; });
        if (group == groups.end()) group = groups.insert(groups.end(), {link, {}});
        group->second.push_back(i);
    }
    for (auto &[link, indices] : groups) {
        std::vector<Command> sub;
        for (const std::size_t i : indices) sub.push_back(commands[i]);
        auto replies = link->run(sub, failure, cancel_fd);
        if (!replies) {
            stale_.store(true, std::memory_order_release);  // a node down: its replica may take over
            if (*failure != LinkFailure::cancelled) node_failed_ns_.store(steady_ns(), std::memory_order_relaxed);
            return std::move(replies).error();
        }
        for (std::size_t k = 0; k < indices.size(); ++k) out[indices[k]] = std::move((*replies)[k]);
    }
    return true;
}

Result<bool> ClusterRouter::follow(const std::vector<Command> &commands, std::vector<Reply> &out,
                                   std::vector<std::size_t> &pending, LinkFailure *failure, int cancel_fd) {
    pending.clear();
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (!out[i] || !is_error(*out[i])) continue;
        const std::string_view text = text_of(*out[i]);
        std::uint16_t slot = 0;
        std::string_view host;
        int port = 0;
        if (starts_with(text, "CLUSTERDOWN") || starts_with(text, "TRYAGAIN")) {
            stale_.store(true, std::memory_order_release);
            return cluster_error(failure, seed_, "the cluster cannot answer now: " + std::string(text));
        }
        const bool moved = starts_with(text, "MOVED ");
        if (!moved && !starts_with(text, "ASK ")) continue;  // a refusal of the command itself (NOPERM, OOM)
        if (!parse_redirect(text, slot, host, port)) {
            return cluster_error(failure, seed_, "a redirect libkjit cannot read: " + std::string(text));
        }
        const std::uint16_t number = node_number(host, port);
        ServerLink *there = node_at(number);
        if (!there) return cluster_error(failure, seed_, "more than 256 nodes named");
        if (moved) {
            // The slot is there for good: learnt at once; the rest of the map is read again, as a
            // reshard moves slots by ranges.
            slot_node_[slot].store(number, std::memory_order_release);
            stale_.store(true, std::memory_order_release);
            pending.push_back(i);
            continue;
        }
        // ASK: this one command, there, once, after ASKING; the map stays as it is.
        auto replies = there->run({{"ASKING"}, commands[i]}, failure, cancel_fd);
        if (!replies) return std::move(replies).error();
        out[i] = std::move((*replies)[1]);
        if (is_error(*out[i]) && (starts_with(text_of(*out[i]), "MOVED ") || starts_with(text_of(*out[i]), "ASK "))) {
            pending.push_back(i);
        }
    }
    return true;
}

std::int64_t ClusterRouter::quick_retry_at_ns() const {
    const std::int64_t failed = node_failed_ns_.load(std::memory_order_relaxed);
    const std::int64_t now = steady_ns();
    return failed != 0 && now - failed < kFailoverWatchNs ? now + kFailoverPollNs : 0;
}

Result<std::vector<Reply>> ClusterRouter::run(const std::vector<Command> &commands, std::vector<Reply> *seed_replies,
                                              LinkFailure *failure, int cancel_fd) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
        log().info("remote cache {}: a node of a Redis Cluster: keys go to their slots' primaries", display(seed_));
    }
    std::vector<Reply> out(commands.size());
    std::vector<std::size_t> pending;
    if (seed_replies) {
        out = std::move(*seed_replies);
    } else {
        for (std::size_t i = 0; i < commands.size(); ++i) pending.push_back(i);
    }
    for (int round = 0; round <= kMostRedirects; ++round) {
        if (stale_.load(std::memory_order_acquire)) (void)refresh(cancel_fd);
        if (!pending.empty()) {
            KJIT_TRY(send(commands, pending, out, failure, cancel_fd));
        }
        KJIT_TRY(follow(commands, out, pending, failure, cancel_fd));
        if (pending.empty()) return out;
    }
    return cluster_error(failure, seed_, "a command redirected more than " + std::to_string(kMostRedirects) + " times");
}

}  // namespace kjit::storage::remote
