// Cluster router: the Redis Cluster protocol behind one configured server. A server named in the
// setting that answers a command with MOVED, ASK or CLUSTERDOWN is a node of a Redis Cluster
// (AWS ElastiCache or MemoryDB in cluster mode, Azure's clustering, Memorystore Cluster, or
// `redis-cli --cluster create`): its ServerLink then hands every round trip to a router, which
// learns the cluster's slot map (CLUSTER SLOTS), sends each command to the primary of its key's
// slot (the CRC16 of the key's hash tag, as Redis computes it) in one pipeline per node, and
// follows the cluster's answers:
//   MOVED slot host:port   the slot lives there now: the map learns it at once, is read anew
//                          (a reshard moves ranges), and the command is sent again there
//   ASK slot host:port     the slot is being migrated and this key is already there: the
//                          command goes there once, after ASKING, and the map is left as is
//   CLUSTERDOWN, TRYAGAIN  the cluster cannot answer now (a primary lost and not yet replaced,
//                          a multi-key command during a migration): a failure of the round
//                          trip, as an outage is, and the map is read anew before the next
// A node that fails (refused, reset, timed out) has its own circuit breaker (a ServerLink per
// node) and marks the map stale: the next round trip asks another node, so a primary that dies
// is replaced by its promoted replica as soon as the cluster has promoted it
// (cluster-node-timeout). The three keys of an entry share a hash tag ("{key}"): a single
// flight's pipeline and its lease scripts stay on one node.
//
// Lock-free (atomics only: the slot table, an append-only table of nodes), so a forked child
// finds nothing held; a child makes its own connections, as every ServerLink does. Knows hiredis
// only through redis_client.hpp's Reply.
#pragma once

#include "storage/remote/config.hpp"
#include "storage/remote/redis_client.hpp"
#include "util/status.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::storage::remote {

// The cluster slot (0 to 16383) of `key`: CRC16 (XMODEM) of its hash tag (the text between its
// first '{' and the first '}' after it, when not empty), else of the whole key, modulo 16384.
std::uint16_t slot_of(std::string_view key);

// The key a command of the tier acts on (GET, SET, EXISTS, PTTL, PEXPIRE, DEL: the first
// argument; EVAL with keys: its first key; OBJECT and MEMORY subcommands: the third word), or
// empty for a command of the whole server (INFO, DBSIZE, SCAN, CLUSTER).
std::string_view key_of(const Command &command);

class ClusterRouter {
public:
    // `seed`: the server named in the setting, whose user, password and timeouts every node
    // gets (database 0: a cluster has no other).
    ClusterRouter(const Server &seed, const Config &config);
    ClusterRouter(const ClusterRouter &) = delete;
    ClusterRouter &operator=(const ClusterRouter &) = delete;

    // Runs `commands`, each on its slot's primary (a command without a key on the seed), and
    // returns one reply per command in order, as ServerLink::run does. `seed_replies` (may be
    // null): the seed's replies to these same commands, in which some told us of the cluster;
    // the others are kept (they ran). Errors: a node's link failed (*failure as ServerLink::run
    // says), the cluster is down (broken), or a command was redirected more than a few times.
    // Thread safe.
    Result<std::vector<Reply>> run(const std::vector<Command> &commands, std::vector<Reply> *seed_replies,
                                   LinkFailure *failure, int cancel_fd);

    // While a node failed in the last few seconds (a primary lost, its replica perhaps about to
    // be promoted: cluster-node-timeout and an election), the steady-clock time (ns) at which a
    // caller may try again, soon: the map is read anew then. 0 otherwise. As
    // ServerLink::quick_retry_at_ns, which the tier waits on before compiling without it.
    std::int64_t quick_retry_at_ns() const;

private:
    static constexpr std::size_t kSlots = 16384;
    static constexpr std::size_t kMostNodes = 256;

    // The number (its index in nodes_ + 1) of the node at host:port, made when first named; 0
    // when kMostNodes are known. slot_node_ holds these numbers.
    std::uint16_t node_number(std::string_view host, int port);
    // The node numbered `number` (nullptr for 0, or one another thread is still making).
    ServerLink *node_at(std::uint16_t number) const;
    ServerLink *node(std::string_view host, int port);
    // Reads the slot map from the first node that answers CLUSTER SLOTS (the seed first). False
    // when none did.
    bool refresh(int cancel_fd);
    // Sends commands[i] for each i of `pending`, grouped per node, into out[i].
    Result<bool> send(const std::vector<Command> &commands, const std::vector<std::size_t> &pending,
                      std::vector<Reply> &out, LinkFailure *failure, int cancel_fd);
    // The redirects and refusals of the cluster among out[]: MOVED ones go back to `pending`,
    // ASK ones are sent where they are told; CLUSTERDOWN and TRYAGAIN are an error.
    Result<bool> follow(const std::vector<Command> &commands, std::vector<Reply> &out,
                        std::vector<std::size_t> &pending, LinkFailure *failure, int cancel_fd);

    Server seed_;
    Config config_;  // the setting's timeouts and sizes; its servers unused
    std::array<std::atomic<ServerLink *>, kMostNodes> nodes_{};
    std::atomic<std::size_t> node_count_{0};
    std::array<std::atomic<std::uint16_t>, kSlots> slot_node_{};  // a node's index + 1; 0: not known
    std::atomic<bool> stale_{true};                               // the map must be read before the next use
    std::atomic<std::int64_t> node_failed_ns_{0};                 // steady clock: a node's last failure
};

}  // namespace kjit::storage::remote
