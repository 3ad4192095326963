// Scenario 11: a fleet under every server condition (issue 36; docs/remote.md, "When a server
// is not well"). N (--fleet-nodes, 4) node processes (kjit-fleet-node, bench/fleet_node.cpp), each
// on an empty cache folder of its own, start at once and ask for the same K (--fleet-kernels, 20)
// sweep kernels through the cluster tier, against redis-servers the scenario starts on 127.0.0.1
// (one that cannot start fails the scenario, never skips it), under each condition:
//   healthy      one server: the reference (NVRTC runs, the worst call), and the bytes each entry
//                takes in Redis (STRLEN of its value) against its cubin's size
//   full         one server at maxmemory with noeviction, full of the namespace's own entries (a
//                node asked for 3 K other kernels (at least 60) first, then maxmemory was set to
//                what the server used)
//   shard down   three servers named, one of them killed before the start
//   restart      one server, saved, killed and started again 0.3 s later, a third of the way into
//                the healthy run's time (it comes back with its data, as from a restart)
//   cluster      a Redis Cluster endpoint: two cluster-mode servers, every slot on the second,
//                the nodes naming the first (which answers each key's command with MOVED: the
//                nodes follow it to the second, src/storage/remote/cluster_router.hpp)
//   killed holder  one node takes the lease of a kernel that compiles for about a second and is
//                killed (SIGKILL) while it compiles; a second node then asks for that kernel: its
//                call's time less its own compile (NVRTC's time) is what the dead holder costs
//   seed         a new node with an empty cache, no server, and KJIT_CACHE_SEED on an export of a
//                healthy node's cache (kjit cache export): its NVRTC runs and time, against the
//                same node without the seed
// each with this libkjit and, when --fleet-before-lib names one (bash bench/run.sh builds 0.8.0,
// the release before issue 36), the earlier one (LD_LIBRARY_PATH), in the same run: NVRTC runs
// summed over the nodes and the worst single call of any node. One round: a condition's figure
// is a count, and its time is dominated by what the condition costs (a lease, a breaker).
#include "scenarios.hpp"

#include "progress.hpp"
#include "stats.hpp"
#include "support.hpp"
#include "sweep_kernels.hpp"

#if KJIT_BENCH_CLUSTER
#include "redis_server.hpp"
#endif

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <thread>

extern char **environ;

namespace kjit_bench {

#if KJIT_BENCH_CLUSTER

namespace {

using Counts = std::map<std::string, double>;
using kjit_test::RedisServer;

const char *const kNodeCounts[] = {"nvrtc",           "local_hits", "remote_hits", "remote_errors", "remote_timeouts",
                                   "remote_puts",     "bytes_in",   "bytes_out",   "leases_owned",  "lease_waits",
                                   "lease_takeovers", "loop_us",    "first_us",    "worst_us"};

Counts parse_node(const std::string &out) {
    return parse_counts(out, {std::begin(kNodeCounts), std::end(kNodeCounts)}, "a fleet node");
}

// What one condition cost, over its nodes.
struct Outcome {
    double nvrtc = 0;     // NVRTC runs, summed
    double worst_us = 0;  // the slowest single kjit_compile call of any node
    double wall_us = 0;   // first spawn to last exit
    Counts sums;
};

struct Fleet {
    const BenchOptions &o;
    std::string node;  // kjit-fleet-node's path

    std::string sweep(int first, int count) const {
        return "sweep:" + std::to_string(first) + ":" + std::to_string(count);
    }
    std::string kernels() const { return sweep(0, o.fleet_kernels); }

    Counts run_one(const std::string &cache, const std::string &remote, const std::string &kernels) const {
        const ChildResult r = run_child({node, cache, o.arch, remote, kernels});
        if (!r.started || r.exit_status != 0) {
            fail("a fleet node failed, exit " + std::to_string(r.exit_status) + ": " + r.err);
        }
        return parse_node(r.out);
    }

    // `nodes` nodes at once, each on an empty cache folder of its own; `meanwhile` runs on this
    // thread after the spawns (a fault to inject). `keep_cache`, when given, gets node 0's folder.
    Outcome run_nodes(int nodes, const std::string &remote, const std::function<void()> &meanwhile = {},
                      std::string *keep_cache = nullptr) const {
        std::vector<std::unique_ptr<TempDir>> caches;
        for (int i = 0; i < nodes; ++i) caches.push_back(std::make_unique<TempDir>(o.work_dir, "fleet-node-"));
        std::vector<ChildResult> results(caches.size());
        std::vector<std::thread> threads;
        const auto started = Clock::now();
        for (std::size_t i = 0; i < results.size(); ++i) {
            threads.emplace_back([&, i] {
                results[i] = run_child({node, caches[i]->path(), o.arch, remote, kernels()});
            });
        }
        if (meanwhile) meanwhile();
        for (std::thread &t : threads) t.join();
        Outcome out;
        out.wall_us = elapsed_us(started, Clock::now());
        for (const ChildResult &r : results) {
            if (!r.started || r.exit_status != 0) {
                fail("a fleet node failed, exit " + std::to_string(r.exit_status) + ": " + r.err);
            }
            const Counts c = parse_node(r.out);
            for (const auto &[name, value] : c) out.sums[name] += value;
            out.worst_us = std::max(out.worst_us, c.at("worst_us"));
        }
        out.nvrtc = out.sums.at("nvrtc");
        if (keep_cache) *keep_cache = caches[0]->release();
        return out;
    }
};

std::unique_ptr<RedisServer> start_server(std::vector<std::string> extra = {}) {
    try {
        return std::make_unique<RedisServer>(std::move(extra));
    } catch (const std::exception &e) {
        fail(std::string("the fleet scenario cannot start redis-server: ") + e.what());
    }
}

// Bytes of the tier's entries in Redis (their values' lengths), per entry.
double bytes_per_entry(const RedisServer &server) {
    const std::vector<std::string> keys = server.keys("kjit:*:b:*");
    if (keys.empty()) return 0;
    double total = 0;
    for (const std::string &k : keys) total += std::atof(server.command({"STRLEN", k}).c_str());
    return total / static_cast<double>(keys.size());
}

// The mean size of the cubins in a cache folder.
double cubin_bytes(const std::string &cache) {
    double total = 0;
    int count = 0;
    for (const auto &e : std::filesystem::recursive_directory_iterator(cache)) {
        if (e.is_regular_file() && e.path().extension() == ".cubin") {
            total += static_cast<double>(e.file_size());
            ++count;
        }
    }
    return count ? total / count : 0;
}

void require_ok(const std::string &reply, const std::string &what) {
    if (reply != "OK") fail("redis-server: " + what + " answered '" + reply + "'");
}

// A Redis Cluster endpoint: `a` and `b` in cluster mode, met, every slot on `b`; returns once
// `a` answers a key's command with MOVED.
void make_cluster(RedisServer &a, RedisServer &b) {
    require_ok(a.command({"CLUSTER", "MEET", "127.0.0.1", std::to_string(b.port())}), "CLUSTER MEET");
    require_ok(b.command({"CLUSTER", "ADDSLOTSRANGE", "0", "16383"}), "CLUSTER ADDSLOTSRANGE");
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (a.command({"GET", "kjit-bench-probe"}).find("MOVED") == std::string::npos) {
        if (Clock::now() > deadline) fail("the cluster-mode redis-server never answered MOVED");
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

// The killed holder: a node takes the slow kernel's lease and is killed while it compiles; the
// time of a second node's call for that kernel, and its NVRTC runs.
Outcome killed_holder(const Fleet &f, RedisServer &server) {
    TempDir holder_cache(f.o.work_dir, "fleet-holder-"), waiter_cache(f.o.work_dir, "fleet-waiter-");
    std::vector<std::string> args = {f.node, holder_cache.path(), f.o.arch, server.url(), "slow"};
    std::vector<char *> argv;
    for (std::string &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    const int spawned = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) fail("cannot start the lease holder " + f.node);
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (server.keys("kjit:*:l:*").empty()) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) fail("the lease holder exited before it took the lease");
        if (Clock::now() > deadline) fail("the lease holder took no lease within 60 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const Counts c = f.run_one(waiter_cache.path(), server.url(), "slow");
    Outcome out;
    out.sums = c;
    out.nvrtc = c.at("nvrtc") + 1;  // the holder's, lost
    out.worst_us = c.at("worst_us");
    out.wall_us = c.at("loop_us");
    return out;
}

// What the killed holder cost the next node: its call less its own compile (NVRTC's time).
double holder_cost_us(const Outcome &o) { return o.worst_us - o.sums.at("nvrtc_us"); }

// One condition done: a tick, and where the output is not a terminal (a log), its figures.
void said(Progress &progress, const char *label, const char *id, const std::map<std::string, Outcome> &out) {
    progress.tick();
    if (::isatty(STDOUT_FILENO)) return;
    const Outcome &o = out.at(id);
    auto sum = [&](const char *name) { return o.sums.count(name) ? o.sums.at(name) : 0.0; };
    std::printf("fleet (%s): %s: %.0f NVRTC runs, worst call %s, %.0f remote errors, %.0f lease waits, %.0f "
                "takeovers\n",
                label, id, o.nvrtc, format_us(o.worst_us).c_str(), sum("remote_errors"), sum("lease_waits"),
                sum("lease_takeovers"));
    std::fflush(stdout);
}

// Every condition for the libkjit that LD_LIBRARY_PATH now gives the nodes.
std::map<std::string, Outcome> run_conditions(const Fleet &f, const char *label, bool seeds, Progress &progress,
                                              std::map<std::string, double> &facts) {
    const int n = f.o.fleet_nodes, k = f.o.fleet_kernels;
    std::map<std::string, Outcome> out;
    std::string node0;
    {
        auto server = start_server();
        out["healthy"] = f.run_nodes(n, server->url(), {}, &node0);
        facts["value_bytes"] = bytes_per_entry(*server);
        facts["cubin_bytes"] = cubin_bytes(node0);
    }
    said(progress, label, "healthy", out);
    {
        auto server = start_server();
        // Enough of the namespace's entries that removing them makes room for the run's (with
        // the nodes' connections, whose buffers Redis counts too): 3 K of them, at least 60.
        TempDir prefill(f.o.work_dir, "fleet-prefill-");
        f.run_one(prefill.path(), server->url(), f.sweep(k, std::min(std::max(3 * k, 60), sweep_size() - k)));
        const long long used = server->info_number("memory", "used_memory");
        if (used < 0) fail("redis-server's INFO memory has no used_memory");
        require_ok(server->command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}), "CONFIG SET");
        require_ok(server->command({"CONFIG", "SET", "maxmemory", std::to_string(used)}), "CONFIG SET");
        out["full"] = f.run_nodes(n, server->url());
    }
    said(progress, label, "full", out);
    {
        std::vector<std::unique_ptr<RedisServer>> shards;
        std::string spec;
        for (int i = 0; i < 3; ++i) {
            shards.push_back(start_server());
            spec += (i ? " " : "") + shards.back()->url();
        }
        shards[1]->kill();
        out["shard_down"] = f.run_nodes(n, spec);
    }
    said(progress, label, "shard_down", out);
    {
        auto server = start_server();
        const auto at = std::chrono::microseconds(static_cast<long long>(out["healthy"].wall_us / 3));
        out["restart"] = f.run_nodes(n, server->url(), [&] {
            std::this_thread::sleep_for(at);
            server->command({"SAVE"});
            server->kill();
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            server->restart();
        });
    }
    said(progress, label, "restart", out);
    {
        const std::vector<std::string> cluster_mode = {"--cluster-enabled", "yes"};
        auto a = start_server(cluster_mode), b = start_server(cluster_mode);
        make_cluster(*a, *b);
        out["cluster"] = f.run_nodes(n, a->url());
    }
    said(progress, label, "cluster", out);
    {
        auto server = start_server();
        out["killed_holder"] = killed_holder(f, *server);
        facts["holder_cost_us"] = holder_cost_us(out["killed_holder"]);
    }
    said(progress, label, "killed_holder", out);
    {
        // The seed: node 0's healthy cache, exported; a node with no server, with and without it.
        TempDir seed(f.o.work_dir, "fleet-seed-"), with(f.o.work_dir, "fleet-seeded-"),
            without(f.o.work_dir, "fleet-unseeded-");
        const std::string kjit = folder_of(folder_of(f.node)) + "/bin/kjit";
        if (seeds) {
            const ChildResult e = run_child({kjit, "cache", "export", seed.path() + "/cache", "--cache-dir", node0});
            if (!e.started || e.exit_status != 0) fail("kjit cache export failed: " + e.err + e.out);
        }
        ::setenv("KJIT_CACHE_SEED", (seed.path() + "/cache").c_str(), 1);
        const Counts c = f.run_one(with.path(), "none", f.kernels());
        ::unsetenv("KJIT_CACHE_SEED");
        const Counts none = f.run_one(without.path(), "none", f.kernels());
        Outcome s;
        s.sums = c;
        s.nvrtc = c.at("nvrtc");
        s.worst_us = c.at("worst_us");
        s.wall_us = c.at("loop_us");
        out["seed"] = s;
        facts["unseeded_loop_us"] = none.at("loop_us");
        facts["unseeded_nvrtc"] = none.at("nvrtc");
    }
    std::filesystem::remove_all(node0);
    said(progress, label, "seed", out);
    return out;
}

}  // namespace

void run_fleet(const BenchOptions &o, Report &report) {
    const std::string self = self_executable();
    const Fleet f{o, self.substr(0, self.rfind('/')) + "/kjit-fleet-node"};
    const int n = o.fleet_nodes, k = o.fleet_kernels;
    const bool before = !o.fleet_before_lib.empty();
    std::map<std::string, Outcome> now, then;
    std::map<std::string, double> now_facts, then_facts;
    {
        Progress progress("fleet: " + std::to_string(n) + " nodes, " + std::to_string(k) +
                              " kernels, under seven server conditions" + (before ? ", this libkjit and 0.8.0" : ""),
                          before ? 14 : 7, "conditions");
        LibraryPathSwitch library;
        if (before) {
            library.use(o.fleet_before_lib);
            then = run_conditions(f, "0.8.0", false, progress, then_facts);
            library.use("");
        }
        now = run_conditions(f, "now", true, progress, now_facts);
    }

    Section &s =
        report.section("fleet", std::to_string(n) + " nodes start at once on empty caches and ask for the same " +
                                    std::to_string(k) +
                                    " kernels through the cluster tier, under each server condition; "
                                    "NVRTC runs over all nodes and the worst single call");
    struct Condition {
        const char *id, *text;
    };
    const Condition conditions[] = {
        {"healthy", "healthy server"},
        {"full", "server full (noeviction at maxmemory, full of the namespace's entries)"},
        {"shard_down", "1 of 3 sharded servers down"},
        {"restart", "server restarted (0.3 s, a third of the way in)"},
        {"cluster", "a Redis Cluster endpoint (MOVED followed)"},
        {"killed_holder", "lease holder killed while it compiles: the next node's call"},
        {"seed", "new node, no server, KJIT_CACHE_SEED on an exported warm cache"},
    };
    char line[512];
    for (const Condition &c : conditions) {
        const Outcome &a = now.at(c.id);
        if (before) {
            const Outcome &b = then.at(c.id);
            std::snprintf(line, sizeof line, "%s: NVRTC runs %.0f (0.8.0: %.0f), worst call %s (0.8.0: %s)", c.text,
                          a.nvrtc, b.nvrtc, format_us(a.worst_us).c_str(), format_us(b.worst_us).c_str());
        } else {
            std::snprintf(line, sizeof line, "%s: NVRTC runs %.0f, worst call %s", c.text, a.nvrtc,
                          format_us(a.worst_us).c_str());
        }
        s.notes.push_back(line);
        s.rows.push_back(
            summarize("fleet." + std::string(c.id) + ".worst", std::string(c.text) + ": worst call", {a.worst_us}));
    }
    std::snprintf(line, sizeof line,
                  "seed: %s for %d kernels with %.0f NVRTC runs, against %s and %.0f runs without the seed (%.1fx)",
                  format_us(now.at("seed").wall_us).c_str(), k, now.at("seed").nvrtc,
                  format_us(now_facts.at("unseeded_loop_us")).c_str(), now_facts.at("unseeded_nvrtc"),
                  now_facts.at("unseeded_loop_us") / std::max(1.0, now.at("seed").wall_us));
    s.notes.push_back(line);
    std::snprintf(
        line, sizeof line, "bytes per entry in Redis: %.0f B for a %.0f B cubin%s", now_facts["value_bytes"],
        now_facts["cubin_bytes"],
        before ? (" (0.8.0: " + std::to_string(static_cast<long long>(then_facts["value_bytes"])) + " B)").c_str()
               : "");
    s.notes.push_back(line);
    std::snprintf(line, sizeof line, "killed holder: the next node's call less its own compile: %s%s",
                  format_us(now_facts.at("holder_cost_us")).c_str(),
                  before ? (" (0.8.0: " + format_us(then_facts.at("holder_cost_us")) + ")").c_str() : "");
    s.notes.push_back(line);

    nlohmann::json meta = {{"nodes", n}, {"kernels", k}, {"arch", o.arch}};
    for (const auto &[label, outcomes, facts] :
         {std::tuple{"now", &now, &now_facts}, std::tuple{"0.8.0", &then, &then_facts}}) {
        for (const auto &[id, out] : *outcomes) {
            meta[label][id] = {{"nvrtc_runs", out.nvrtc}, {"worst_us", out.worst_us}, {"wall_us", out.wall_us}};
        }
        for (const auto &[name, value] : *facts) meta[label][name] = value;
    }
    report.meta["fleet"] = meta;

    Target full{"fleet_full_server_nvrtc_runs", "fleet: NVRTC runs with a full server, over keys + nodes", 1.0, true,
                TargetUnit::ratio};
    full.value = now.at("full").nvrtc / (k + n);
    report.add_target(full);
    Target shard{"fleet_shard_down_nvrtc_runs", "fleet: NVRTC runs with 1 of 3 servers down, over keys", 1.1, true};
    shard.value = now.at("shard_down").nvrtc / k;
    report.add_target(shard);
    Target restart{"fleet_restart_extra_compiles", "fleet: extra compiles after a 0.3 s restart, over keys", 0.1, true};
    restart.value = (now.at("restart").nvrtc - now.at("healthy").nvrtc) / k;
    report.add_target(restart);
    Target holder{"fleet_killed_holder_wait",
                  "fleet: a killed lease holder costs the next node beyond its own compile (s): the 10 s lease and "
                  "a poll",
                  10.05, true, TargetUnit::seconds};
    holder.value = now_facts.at("holder_cost_us") / 1e6;
    report.add_target(holder);
    Target seed{"fleet_seed_nvrtc_runs", "fleet: NVRTC runs of a new node warm from a seed", 0.0, true,
                TargetUnit::count};
    seed.value = now.at("seed").nvrtc;
    report.add_target(seed);
    if (before && now_facts["value_bytes"] > 0) {
        Target bytes{"fleet_value_bytes_0_8_over_now", "fleet: bytes per entry in Redis, 0.8.0 over now", 2.0};
        bytes.value = then_facts["value_bytes"] / now_facts["value_bytes"];
        report.add_target(bytes);
    }
}

#else  // libkjit built without the cluster tier (KJIT_REMOTE=OFF)

void run_fleet(const BenchOptions &, Report &) {
    fail("the fleet scenario needs libkjit's cluster tier, which this build leaves out (KJIT_REMOTE=OFF: no hiredis)");
}

#endif  // KJIT_BENCH_CLUSTER

}  // namespace kjit_bench
