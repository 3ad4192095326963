// Scenario 10: the cluster tier (kjit_compile_options::remote_storage, src/storage/remote/tier.hpp):
// one compile per kernel across the nodes that share a Redis server, and a new node that starts
// warm. The scenario starts its own redis-server on 127.0.0.1 and a free port (no persistence,
// its folder under the work dir); one that cannot start fails the scenario, never skips it.
// Every node is a fresh process (this program again, --cluster-child) with a cache folder of its
// own, asking for the same K sweep kernels with kjit_compile, one thread, and printing its
// kjit_get_stats. In each of --cluster-rounds (2) rounds, the order of the two ways alternating:
//   1. cold cluster start: N (8) nodes at once on empty caches and an emptied server (FLUSHALL),
//      with the tier and with remote_storage "none" (every node compiles everything): NVRTC
//      runs summed over the nodes, and wall time from the first spawn to the last exit;
//   2. a new node joining warm, after the tier's cold start: one more fresh process on an empty
//      cache: its remote hits and NVRTC runs, the time of its K calls (timed in the child,
//      around the loop only) per kernel and per MB fetched; against a fresh node without the
//      tier (after the cold start without it), which compiles all K;
//   3. warm local: that new node once more (its cache now warm): the commands that reached the
//      server (INFO commandstats before and after, every command but INFO): a local hit sends
//      none.
//   4. TLS: on a server listening both plain and TLS (certificates made with openssl), after one
//      cold start, a new node joining over each, alternating: per kernel (a remote hit), and
//      TLS / plain (goal: at most 1.5x);
//   5. Redis Cluster: 3 primaries and 3 replicas (redis-cli --cluster create), named by one
//      node: the N nodes' cold start, healthy and with a primary SIGKILLed 300 ms in (its
//      replica promoted after cluster-node-timeout, 500 ms): NVRTC runs, the worst call of any
//      node, wall time (goal: NVRTC runs at most kernels + nodes).
#include "scenarios.hpp"

#include "progress.hpp"
#include "support.hpp"
#include "sweep_kernels.hpp"

#include "kjit/kjit.h"
#if KJIT_BENCH_CLUSTER
#include "redis_server.hpp"
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>

namespace kjit_bench {

#if KJIT_BENCH_CLUSTER

int cluster_child_main(const std::string &cache, int n, const std::string &arch, const std::string &remote) {
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    opts.cache_dir = cache.c_str();
    opts.arch = arch.c_str();
    opts.remote_storage = remote.c_str();
    std::vector<std::string> sources;
    for (const GemmConfig &c : sweep_configs(n)) sources.push_back(sweep_source(c));
    double first_us = 0, max_us = 0;
    const auto started = Clock::now();
    for (std::size_t i = 0; i < sources.size(); ++i) {
        char path[4096];
        const auto call = Clock::now();
        const kjit_status s = kjit_compile(sources[i].c_str(), kSweepKeyword, &opts, path, sizeof path, nullptr);
        max_us = std::max(max_us, elapsed_us(call, Clock::now()));
        if (s != KJIT_OK) {
            std::fprintf(stderr, "kjit-bench --cluster-child: kernel %zu: %s: %s\n", i, kjit_status_string(s),
                         kjit_last_error());
            return 1;
        }
        if (i == 0) first_us = elapsed_us(started, Clock::now());
    }
    const double loop_us = elapsed_us(started, Clock::now());
    kjit_stats st = KJIT_STATS_INIT;
    if (kjit_get_stats(&st) != KJIT_OK) {
        std::fprintf(stderr, "kjit-bench --cluster-child: kjit_get_stats: %s\n", kjit_last_error());
        return 1;
    }
    using ull = unsigned long long;
    std::printf(
        "nvrtc=%llu local_hits=%llu remote_hits=%llu remote_misses=%llu remote_errors=%llu remote_timeouts=%llu "
        "remote_corrupt=%llu remote_puts=%llu bytes_in=%llu bytes_out=%llu leases_owned=%llu lease_waits=%llu "
        "lease_takeovers=%llu shared_failures=%llu loop_us=%.1f first_us=%.1f max_us=%.1f\n",
        static_cast<ull>(st.nvrtc_compiles), static_cast<ull>(st.compile_hits), static_cast<ull>(st.remote_hits),
        static_cast<ull>(st.remote_misses), static_cast<ull>(st.remote_errors), static_cast<ull>(st.remote_timeouts),
        static_cast<ull>(st.remote_corrupt), static_cast<ull>(st.remote_puts), static_cast<ull>(st.remote_bytes_in),
        static_cast<ull>(st.remote_bytes_out), static_cast<ull>(st.remote_leases_owned),
        static_cast<ull>(st.remote_lease_waits), static_cast<ull>(st.remote_lease_takeovers),
        static_cast<ull>(st.remote_shared_failures), loop_us, first_us, max_us);
    return 0;
}

namespace {

// The counters a child printed ("name=value" words), summed over children.
using Counts = std::map<std::string, double>;

const char *const kCountNames[] = {"nvrtc",           "local_hits",      "remote_hits",    "remote_misses",
                                   "remote_errors",   "remote_timeouts", "remote_corrupt", "remote_puts",
                                   "bytes_in",        "bytes_out",       "leases_owned",   "lease_waits",
                                   "lease_takeovers", "shared_failures", "loop_us",        "first_us",
                                   "max_us"};

Counts parse_child(const std::string &out) {
    return parse_counts(out, {std::begin(kCountNames), std::end(kCountNames)}, "a cluster child");
}

// A redis-server of the scenario's own on 127.0.0.1 and a free port, in a folder under the work
// dir, with no persistence; SIGKILLed when this object goes (and by the kernel if the bench dies
// first: PR_SET_PDEATHSIG). Commands go over a plain socket in RESP: the bench does not need
// hiredis for the few it sends.
// The scenario's redis-server: the one the tests start (tests/support/redis/redis_server.hpp), on
// 127.0.0.1 and a free port, with no persistence; one that cannot start fails the scenario.
std::unique_ptr<kjit_test::RedisServer> start_redis() {
    try {
        return std::make_unique<kjit_test::RedisServer>();
    } catch (const std::exception &e) {
        fail(std::string("the cluster scenario cannot start redis-server: ") + e.what());
    }
}

Counts run_one(const BenchOptions &o, const std::string &cache, const std::string &remote) {
    const ChildResult r =
        run_child({self_executable(), "--cluster-child", cache, std::to_string(o.cluster_kernels), o.arch, remote});
    if (!r.started || r.exit_status != 0) {
        fail("a cluster child failed, exit " + std::to_string(r.exit_status) + ": " + r.err);
    }
    return parse_child(r.out);
}

struct ClusterStart {
    double wall_us = 0;
    Counts sums;  // over the nodes
};

// N nodes at once, each on an empty cache folder of its own, with `remote` as remote_storage.
ClusterStart run_nodes(const BenchOptions &o, const std::string &remote) {
    std::vector<std::unique_ptr<TempDir>> caches;
    for (int i = 0; i < o.cluster_nodes; ++i) caches.push_back(std::make_unique<TempDir>(o.work_dir, "cluster-node-"));
    const std::string self = self_executable();
    std::vector<ChildResult> results(caches.size());
    std::vector<std::thread> threads;
    const auto started = Clock::now();
    for (std::size_t i = 0; i < results.size(); ++i) {
        threads.emplace_back([&, i] {
            results[i] = run_child(
                {self, "--cluster-child", caches[i]->path(), std::to_string(o.cluster_kernels), o.arch, remote});
        });
    }
    for (std::thread &t : threads) t.join();
    ClusterStart run;
    run.wall_us = elapsed_us(started, Clock::now());
    for (const ChildResult &r : results) {
        if (!r.started || r.exit_status != 0) {
            fail("a cluster node failed, exit " + std::to_string(r.exit_status) + ": " + r.err);
        }
        for (const auto &[name, value] : parse_child(r.out)) {
            if (name == "max_us") run.sums[name] = std::max(run.sums[name], value);  // the worst call of any node
            else run.sums[name] += value;
        }
    }
    return run;
}

std::vector<double> get(const std::vector<Counts> &v, const std::string &name) {
    std::vector<double> out;
    for (const Counts &c : v) out.push_back(c.at(name));
    return out;
}

// TLS against plain on one server (its plain port and its TLS port, certificates made with the
// openssl command): after one cold start fills it, a new node joins warm over each, alternating,
// --cluster-rounds times each; per kernel (a remote hit), and the ratio of the medians.
void add_tls_rows(const BenchOptions &o, Section &s, Report &report) {
    TempDir certificates(o.work_dir, "cluster-tls-");
    if (const std::string why = kjit_test::make_test_certificates(certificates.path()); !why.empty()) fail(why);
    const std::string ca = certificates.path() + "/ca.pem";
    std::unique_ptr<kjit_test::RedisServer> server;
    try {
        server = std::make_unique<kjit_test::RedisServer>(
            kjit_test::TlsFiles(certificates.path() + "/server.pem", certificates.path() + "/server.key", ca,
                                kjit_test::ClientCertificates::not_asked));
    } catch (const std::exception &e) {
        fail(std::string("the cluster scenario cannot start a TLS redis-server: ") + e.what());
    }
    const std::string plain = server->url(), tls = server->tls_url() + " ca-file=" + ca;
    (void)run_nodes(o, plain);
    std::vector<double> plain_us, tls_us;
    Progress progress("cluster: a new node joining over TLS and over plain TCP", o.cluster_rounds * 2, "runs");
    for (int round = 0; round < o.cluster_rounds; ++round) {
        for (int way = 0; way < 2; ++way) {
            const bool over_tls = (way + round) % 2 == 0;
            TempDir fresh(o.work_dir, "cluster-new-");
            const Counts c = run_one(o, fresh.path(), over_tls ? tls : plain);
            if (c.at("remote_hits") != o.cluster_kernels || c.at("remote_errors") != 0) {
                fail("a node joining over " + std::string(over_tls ? "TLS" : "plain TCP") + " got " +
                     std::to_string(c.at("remote_hits")) + " remote hits and " + std::to_string(c.at("remote_errors")) +
                     " remote errors for " + std::to_string(o.cluster_kernels) + " kernels");
            }
            (over_tls ? tls_us : plain_us).push_back(c.at("loop_us") / o.cluster_kernels);
            progress.tick();
        }
    }
    s.rows.push_back(
        summarize("cluster.join_hit_plain", "new node, plain TCP: kjit_compile per kernel (remote hit)", plain_us));
    s.rows.push_back(summarize("cluster.join_hit_tls",
                               "new node, rediss:// (TLS 1.3): kjit_compile per kernel (remote hit)", tls_us));
    Target t{"cluster_tls_hit_over_plain", "remote hit over TLS / over plain TCP", 1.5, true};
    t.value = median(tls_us) / median(plain_us);
    report.add_target(t);
    report.meta["cluster_tls"] = {{"join_us_per_hit_plain", plain_us}, {"join_us_per_hit_tls", tls_us}};
}

// A Redis Cluster of 3 primaries and 3 replicas (redis-cli --cluster create,
// cluster-node-timeout 500 ms), named by one node: the nodes' cold start, healthy and with a
// primary (not the named node) SIGKILLed 300 ms in; NVRTC runs and the worst call of any node.
void add_redis_cluster_rows(const BenchOptions &o, Section &s, Report &report) {
    std::vector<double> healthy_runs, healthy_worst, killed_runs, killed_worst, healthy_wall, killed_wall;
    Progress progress("cluster: a Redis Cluster of 3 primaries, healthy and with a primary killed mid-run",
                      o.cluster_rounds * 2, "runs");
    for (int round = 0; round < o.cluster_rounds; ++round) {
        for (const bool kill : {false, true}) {
            std::unique_ptr<kjit_test::RedisCluster> cluster;
            try {
                cluster = std::make_unique<kjit_test::RedisCluster>(3, 500);
            } catch (const std::exception &e) {
                fail(std::string("the cluster scenario cannot make a Redis Cluster: ") + e.what());
            }
            const std::vector<kjit_test::RedisServer *> nodes = cluster->nodes();
            kjit_test::RedisServer *victim = nullptr;
            for (kjit_test::RedisServer *n : nodes) {
                if (n != nodes[0] && n->command({"ROLE"}).rfind("master", 0) == 0) victim = n;
            }
            std::thread killer;
            if (kill && victim) {
                killer = std::thread([victim] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(300));
                    victim->kill();
                });
            }
            const ClusterStart run = run_nodes(o, nodes[0]->url());
            if (killer.joinable()) killer.join();
            (kill ? killed_runs : healthy_runs).push_back(run.sums.at("nvrtc"));
            (kill ? killed_worst : healthy_worst).push_back(run.sums.at("max_us"));
            (kill ? killed_wall : healthy_wall).push_back(run.wall_us);
            progress.tick();
        }
    }
    s.rows.push_back(summarize("cluster.redis_cluster_cold",
                               "Redis Cluster (3 primaries): cold start, first spawn to last exit", healthy_wall));
    s.rows.push_back(summarize("cluster.redis_cluster_killed",
                               "Redis Cluster, a primary killed 300 ms in: cold start, first spawn to last exit",
                               killed_wall));
    char note[512];
    std::snprintf(note, sizeof note,
                  "Redis Cluster (3 primaries, 3 replicas, cluster-node-timeout 500 ms), %d nodes, %d kernels "
                  "(median): %.0f NVRTC runs healthy, worst call %s; a primary killed 300 ms in: %.0f NVRTC runs "
                  "(goal: at most %d, kernels + nodes), worst call %s",
                  o.cluster_nodes, o.cluster_kernels, median(healthy_runs), format_us(median(healthy_worst)).c_str(),
                  median(killed_runs), o.cluster_kernels + o.cluster_nodes, format_us(median(killed_worst)).c_str());
    s.notes.push_back(note);
    Target t{"cluster_redis_cluster_killed_runs_per_kernel", "Redis Cluster, a primary killed: NVRTC runs per kernel",
             1.0 + double(o.cluster_nodes) / o.cluster_kernels, true, TargetUnit::count};
    t.value = median(killed_runs) / o.cluster_kernels;
    report.add_target(t);
    report.meta["cluster_redis_cluster"] = {
        {"nvrtc_runs_healthy", healthy_runs}, {"worst_call_us_healthy", healthy_worst},
        {"nvrtc_runs_killed", killed_runs},   {"worst_call_us_killed", killed_worst},
        {"wall_us_healthy", healthy_wall},    {"wall_us_killed", killed_wall}};
}

}  // namespace

void run_cluster(const BenchOptions &o, Report &report) {
    const int n = o.cluster_nodes, k = o.cluster_kernels;
    const std::unique_ptr<kjit_test::RedisServer> started = start_redis();
    kjit_test::RedisServer &server = *started;
    const std::string spec = server.url();

    std::vector<double> tier_wall, none_wall, tier_runs, none_runs;
    std::vector<Counts> tier_sums, none_sums, joined, compiled, warm;
    std::vector<double> warm_commands, none_commands, join_commands;
    {
        Progress progress("cluster: " + std::to_string(n) + " nodes, the same " + std::to_string(k) +
                              " kernels, with and without the tier (redis-server on 127.0.0.1:" +
                              std::to_string(server.port()) + ")",
                          o.cluster_rounds * 2, "runs");
        for (int round = 0; round < o.cluster_rounds; ++round) {
            for (int way = 0; way < 2; ++way) {
                const bool with_tier = (way + round) % 2 == 0;  // which way goes first alternates
                if (server.command({"FLUSHALL"}) != "OK") fail("FLUSHALL did not answer OK");
                if (with_tier) {
                    // 1a, then 2 and 3 on the server it leaves.
                    const ClusterStart cold = run_nodes(o, spec);
                    TempDir fresh(o.work_dir, "cluster-new-");
                    const long long before_join = server.calls_except_info();
                    joined.push_back(run_one(o, fresh.path(), spec));
                    join_commands.push_back(static_cast<double>(server.calls_except_info() - before_join));
                    const long long before = server.calls_except_info();
                    warm.push_back(run_one(o, fresh.path(), spec));
                    warm_commands.push_back(static_cast<double>(server.calls_except_info() - before));
                    tier_wall.push_back(cold.wall_us);
                    tier_runs.push_back(cold.sums.at("nvrtc"));
                    tier_sums.push_back(cold.sums);
                } else {
                    // 1b, and the fresh node without the tier beside 2.
                    const long long before = server.calls_except_info();
                    const ClusterStart cold = run_nodes(o, "none");
                    TempDir fresh(o.work_dir, "cluster-new-");
                    compiled.push_back(run_one(o, fresh.path(), "none"));
                    none_commands.push_back(static_cast<double>(server.calls_except_info() - before));
                    none_wall.push_back(cold.wall_us);
                    none_runs.push_back(cold.sums.at("nvrtc"));
                    none_sums.push_back(cold.sums);
                }
                progress.tick();
            }
        }
    }

    // Per kernel and per MB of the new node, per round.
    std::vector<double> hit_us, compile_us, warm_us, per_mb_us, hits_per_kernel, joined_runs, mb_in;
    for (const Counts &c : joined) {
        hit_us.push_back(c.at("loop_us") / k);
        hits_per_kernel.push_back(c.at("remote_hits") / k);
        joined_runs.push_back(c.at("nvrtc"));
        const double mb = c.at("bytes_in") / 1e6;
        mb_in.push_back(mb);
        if (mb > 0) per_mb_us.push_back(c.at("loop_us") / mb);
    }
    for (const Counts &c : compiled) compile_us.push_back(c.at("loop_us") / k);
    for (const Counts &c : warm) warm_us.push_back(c.at("loop_us") / k);

    const std::string nodes = std::to_string(n) + " nodes";
    Section &s =
        report.section("cluster", nodes + " start at once, each on an empty cache of its own, and ask for the same " +
                                      std::to_string(k) + " kernels (kjit_compile, 1 thread each)" +
                                      "; redis-server on 127.0.0.1");
    s.rows.push_back(
        summarize("cluster.cold_tier", "cold cluster start with the tier: first spawn to last exit", tier_wall));
    s.rows.push_back(summarize("cluster.cold_none",
                               "cold cluster start without it (\"none\"): first spawn to last exit", none_wall));
    s.rows.push_back(
        summarize("cluster.join_hit", "new node, with the tier: kjit_compile per kernel (remote hit)", hit_us));
    s.rows.push_back(
        summarize("cluster.join_compile", "new node, without the tier: kjit_compile per kernel (NVRTC)", compile_us));
    if (per_mb_us.empty()) {
        s.rows.push_back(skipped_row("cluster.join_per_mb", "new node, with the tier: per MB fetched (remote_bytes_in)",
                                     "no bytes fetched"));
    } else {
        s.rows.push_back(
            summarize("cluster.join_per_mb", "new node, with the tier: per MB fetched (remote_bytes_in)", per_mb_us));
    }
    s.rows.push_back(
        summarize("cluster.warm_local", "that node again, warm: kjit_compile per kernel (local hit)", warm_us));

    const double wall_ratio = median(tier_wall) / median(none_wall);
    char note[512];
    std::snprintf(note, sizeof note,
                  "NVRTC runs over all nodes (median): %.0f with the tier (goal %d), %.0f without (%d x %d = %d); wall "
                  "with / without: %.2fx (%.2f s vs %.2f s)",
                  median(tier_runs), k, median(none_runs), n, k, n * k, wall_ratio, median(tier_wall) / 1e6,
                  median(none_wall) / 1e6);
    s.notes.push_back(note);
    std::snprintf(
        note, sizeof note,
        "with the tier, over all nodes (median): %.0f puts, %.0f leases owned, %.0f lease waits, %.0f takeovers, "
        "%.0f remote hits, %.0f remote errors (%.0f timeouts), %.0f corrupt",
        median(get(tier_sums, "remote_puts")), median(get(tier_sums, "leases_owned")),
        median(get(tier_sums, "lease_waits")), median(get(tier_sums, "lease_takeovers")),
        median(get(tier_sums, "remote_hits")), median(get(tier_sums, "remote_errors")),
        median(get(tier_sums, "remote_timeouts")), median(get(tier_sums, "remote_corrupt")));
    s.notes.push_back(note);
    std::snprintf(note, sizeof note,
                  "new node: %.2f remote hits per kernel, %.0f NVRTC runs, %.2f MB fetched (%.1f KB per kernel), "
                  "%s per remote hit, %s per MB, %.1f commands per kernel; its first call %s; without the tier / with: "
                  "%.1fx per kernel",
                  median(hits_per_kernel), median(joined_runs), median(mb_in), median(mb_in) * 1e3 / k,
                  format_us(median(hit_us)).c_str(), per_mb_us.empty() ? "-" : format_us(median(per_mb_us)).c_str(),
                  median(join_commands) / k, format_us(median(get(joined, "first_us"))).c_str(),
                  median(compile_us) / median(hit_us));
    s.notes.push_back(note);
    std::snprintf(
        note, sizeof note,
        "warm local: %.0f commands reached the server (INFO commandstats, all but INFO), %.0f local hits of %d, "
        "%.0f NVRTC runs; \"none\": %.0f commands for the whole cold start",
        median(warm_commands), median(get(warm, "local_hits")), k, median(get(warm, "nvrtc")), median(none_commands));
    s.notes.push_back(note);

    report.meta["cluster"] = {
        {"nodes", n},
        {"kernels", k},
        {"rounds", o.cluster_rounds},
        {"arch", o.arch},
        {"nvrtc_runs_tier", tier_runs},
        {"nvrtc_runs_none", none_runs},
        {"wall_us_tier", tier_wall},
        {"wall_us_none", none_wall},
        {"wall_tier_over_none", wall_ratio},
        {"remote_puts_tier", get(tier_sums, "remote_puts")},
        {"remote_errors_tier", get(tier_sums, "remote_errors")},
        {"lease_waits_tier", get(tier_sums, "lease_waits")},
        {"join_remote_hits", get(joined, "remote_hits")},
        {"join_nvrtc_runs", joined_runs},
        {"join_bytes_in", get(joined, "bytes_in")},
        {"join_us_per_hit", hit_us},
        {"join_us_per_mb", per_mb_us},
        {"join_compile_us_per_kernel", compile_us},
        {"join_commands", join_commands},
        {"warm_local_commands", warm_commands},
        {"warm_local_nvrtc_runs", get(warm, "nvrtc")},
        {"none_commands", none_commands},
    };

    Target once{"cluster_nvrtc_runs_per_kernel", "cluster: NVRTC runs per kernel, " + nodes + " cold with the tier",
                1.0, true, TargetUnit::count};
    once.value = median(tier_runs) / k;
    report.add_target(once);
    Target join{"cluster_new_node_remote_hits_per_kernel", "new node: remote hits per kernel", 1.0, false,
                TargetUnit::count};
    join.value = median(hits_per_kernel);
    report.add_target(join);
    Target silent{"cluster_warm_local_commands", "warm local hit: commands to the server", 0.0, true,
                  TargetUnit::count};
    silent.value = median(warm_commands);
    report.add_target(silent);
    Target wall{"cluster_cold_wall_tier_over_none", "cold cluster start wall time: tier / no tier", 0.5, true};
    wall.value = wall_ratio;
    report.add_target(wall);
    add_tls_rows(o, s, report);
    add_redis_cluster_rows(o, s, report);
}

#else  // libkjit built without the cluster tier (KJIT_REMOTE=OFF)

int cluster_child_main(const std::string &, int, const std::string &, const std::string &) { return 2; }

void run_cluster(const BenchOptions &, Report &) {
    fail(
        "the cluster scenario needs libkjit's cluster tier, which this build leaves out (KJIT_REMOTE=OFF: no hiredis)");
}

#endif  // KJIT_BENCH_CLUSTER

}  // namespace kjit_bench
