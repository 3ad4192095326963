// kjit-bench: libkjit warm against cold, side by side with the lookup it replaces, in one run.
//
// Scenarios (all by default; --only picks some):
//   sweep    a tuning sweep of N GEMM-like kernels: cold kjit_compile into an empty cache with 1
//            and 2 threads, raw NVRTC beside the 1-thread compiles (the compile comparison), then
//            warm rounds of kjit_compile hits, kjit_resolve_name and kjit_load_cached
//            (sweep_scenario.cpp)
//   resolve  kjit_resolve_name on a 12,000-symbol cubin: sidecar hit, scan, the file floor, and
//            the pyelftools loop in a child process (resolve_scenario.cpp)
//   startup  a fresh process that gets the N cached kernels ready, against one that compiles
//            them (startup_scenario.cpp; needs the sweep)
//   cub      a cold sweep of header-heavy CUB kernels: sequential plain NVRTC against
//            kjit_compile_batch with 1 and 2 worker threads, with and without NVRTC's
//            precompiled header, and 2 worker processes with it, each in a fresh process; the
//            price of a PCH's creation (cub_scenario.cpp)
//   trust    the price of the trust checks on hits and loads, against 0.3.0's libkjit in the
//            same run when --baseline-lib names it (trust_scenario.cpp)
//   headers  header-heavy kernels over a CuTe/CUTLASS-shaped tree the bench writes itself: hits
//            against header-free kernels, a warm start of all of them in a fresh process, cold
//            batches with and without PCH beside humming-style kernels, and the edit cycle
//            (edit, revert, touch, an edit nothing sees) (header_scenario.cpp, header_tree.cpp)
//   node     8 processes start at once and ask for the same 20 missing kernels: with the
//            compile lock against KJIT_COMPILE_WAIT=0, NVRTC runs and wall time (node_scenario.cpp)
//   cluster  the Redis cluster tier, against a redis-server on 127.0.0.1 it starts itself: 8 node
//            processes, each with a cache of its own, ask for the same 24 kernels at once, with
//            the tier and without; a new node joining warm; a warm local hit sends no command
//            (cluster_scenario.cpp)
//   fleet    4 nodes ask for the same 20 kernels under each server condition (full, a shard
//            down, a restart, a Redis Cluster endpoint, a killed lease holder) and a new node
//            warm from a seed, against 0.8.0 with --fleet-before-lib (fleet_scenario.cpp)
//   real-clients  kernels real clients generate (DeepGEMM sm90, humming, Warp), from
//            bench/real_clients/prepare.py's manifests in --clients: sequential plain NVRTC
//            against kjit_compile_batch with its defaults, PCH on and PCH off, each in a fresh
//            process; skipped, and said, without them (real_clients_scenario.cpp)
//   link     link-time kernels (issue 37): 8 variants of a tile kernel that call a 36-function
//            device library the bench compiles to LTO-IR, cold kjit_compile with link_inputs
//            against raw NVRTC to LTO-IR + nvJitLink, interleaved over 3 rounds, and hits in
//            fresh processes (kjit-link-child): first hit, memo hit (link_scenario.cpp)
//   relocation  caches that move with the install (issue 47): a cache built under one install
//            prefix and exported, and a fresh node (an empty cache, the export as its seed) under
//            another prefix with the same files: NVRTC runs and time to ready, for the headers
//            scenario's tree (32 kernels, no base folders) against a cold node, and for the
//            real clients' DeepGEMM set from --clients without and with base_dirs (skipped, and
//            said, without it), against 0.10.0 with --relocation-before-lib (relocation_scenario.cpp)
//   scaling  not by default: the CUB sweep with PCH on 1, 2, 4, 8, 16 workers, threads against
//            worker processes, for machines with many cores (cub_scenario.cpp)
// Prints a progress line for long phases (on a terminal), a summary table at the end, and with
// --json the results as JSON plus a PNG chart beside it (gnuplot).
#include "kjit/kjit.h"

#include "cub_kernels.hpp"
#include "header_tree.hpp"
#include "link_kernels.hpp"
#include "raw_nvrtc.hpp"
#include "report.hpp"
#include "scenarios.hpp"
#include "support.hpp"
#include "sweep_kernels.hpp"

#include <CLI/CLI.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#ifndef KJIT_BENCH_SOURCE_DIR
#define KJIT_BENCH_SOURCE_DIR "."
#endif

namespace {

using namespace kjit_bench;

std::string utc_now() {
    char buf[64];
    const std::time_t t = std::time(nullptr);
    struct tm tm {};
    gmtime_r(&t, &tm);
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string png_beside(const std::string &json) {
    const std::size_t slash = json.rfind('/');
    const std::size_t dot = json.rfind('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return json + ".png";
    return json.substr(0, dot) + ".png";
}

int run(const BenchOptions &o, const std::string &json_path, std::string chart_path, bool chart) {
    Report report;
    const MachineInfo machine = machine_info();
    const char *libcuda = std::getenv("KJIT_LIBCUDA");
    const std::string driver = libcuda && *libcuda ? std::string(libcuda) : std::string("libcuda.so.1");
    report.meta["libkjit_version"] = kjit_version_string();
    report.meta["nvrtc_version"] = nvrtc_version();
    report.meta["machine"] = machine.describe();
    report.meta["cpus"] = machine.cpus;
    report.meta["date"] = utc_now();
    report.meta["driver"] = driver;
    report.meta["work_dir"] = o.work_dir;
    report.meta["work_dir_filesystem"] = filesystem_name(o.work_dir);

    std::printf("kjit-bench: libkjit %s, NVRTC %s, arch %s\n", kjit_version_string(), nvrtc_version().c_str(),
                o.arch.c_str());
    std::printf("machine:    %s\n", machine.describe().c_str());
    std::printf("work dir:   %s (on %s)\n", o.work_dir.c_str(), filesystem_name(o.work_dir).c_str());
    std::printf("driver:     %s (for the load rows)\n", driver.c_str());
    std::fflush(stdout);

    SweepOutcome sweep;
    if (o.wants("sweep")) sweep = run_sweep(o, report);
    if (o.wants("resolve")) run_resolve(o, report);
    if (o.wants("startup")) run_startup(o, sweep, report);
    if (o.wants("cub")) run_cub(o, report);
    if (o.wants("scaling")) run_scaling(o, report);
    if (o.wants("trust")) run_trust(o, report);
    if (o.wants("peers")) run_peers(o, report);
    if (o.wants("headers")) run_headers(o, report);
    if (o.wants("node")) run_node(o, report);
    if (o.wants("cluster")) run_cluster(o, report);
    if (o.wants("fleet")) run_fleet(o, report);
    if (o.wants("real-clients")) run_real_clients(o, report);
    if (o.wants("link")) run_link(o, report);
    if (o.wants("relocation")) run_relocation(o, report);
    if (o.wants("serving")) run_serving(o, report);

    report.print_summary(stdout);
    if (!json_path.empty()) {
        report.write_json(json_path);
        std::printf("\nwrote %s\n", json_path.c_str());
        if (chart) {
            if (chart_path.empty()) chart_path = png_beside(json_path);
            const std::string why = report.write_chart(chart_path);
            if (why.empty()) std::printf("wrote %s\n", chart_path.c_str());
            else std::printf("no chart: %s\n", why.c_str());
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    // The start-up scenario spawns this program again; that child takes no other options.
    if (argc == 6 && std::strcmp(argv[1], "--startup-child") == 0) {
        return startup_child_main(argv[2], argv[3], std::atoi(argv[4]), argv[5]);
    }
    if (argc == 6 && std::strcmp(argv[1], "--cub-child") == 0) {
        return cub_child_main(argv[2], argv[3], std::atoi(argv[4]), argv[5]);
    }
    if (argc == 6 && std::strcmp(argv[1], "--trust-child") == 0) {
        return trust_child_main(argv[2], argv[3], std::atol(argv[4]), std::atol(argv[5]));
    }
    if (argc == 6 && std::strcmp(argv[1], "--node-child") == 0) {
        return node_child_main(argv[2], std::atoi(argv[3]), argv[4], argv[5]);
    }
    if (argc == 6 && std::strcmp(argv[1], "--cluster-child") == 0) {
        return cluster_child_main(argv[2], std::atoi(argv[3]), argv[4], argv[5]);
    }
    if (argc == 6 && std::strcmp(argv[1], "--clients-child") == 0) {
        return clients_child_main(argv[2], argv[3], argv[4], argv[5]);
    }
    if (argc == 7 && std::strcmp(argv[1], "--headers-child") == 0) {
        return headers_child_main(argv[2], argv[3], argv[4], std::atoi(argv[5]), argv[6]);
    }

    BenchOptions o;
    o.pyelftools_script = KJIT_BENCH_SOURCE_DIR "/pyelftools_lookup.py";
    o.peers_script = KJIT_BENCH_SOURCE_DIR "/peers_python.py";
    o.python_module_dir = KJIT_BENCH_SOURCE_DIR "/../python";
    o.work_dir = "kjit-bench-data";
    o.clients_dir = KJIT_BENCH_SOURCE_DIR "/../build/bench/real-clients";
    std::string json_path, chart_path;
    bool no_chart = false;
    CLI::App app{"kjit-bench: libkjit warm vs cold, side by side with the pyelftools lookup it replaces", "kjit-bench"};
    app.add_option("--only", o.scenarios, "Scenarios to run (default: all)")
        ->delimiter(',')
        ->check(CLI::IsMember({"sweep", "resolve", "startup", "cub", "trust", "peers", "headers", "node", "cluster",
                               "fleet", "scaling", "real-clients", "link", "relocation", "serving"}));
    app.add_option("--work-dir", o.work_dir, "Folder for the caches (the warm one is kept as WORK_DIR/sweep-cache)")
        ->capture_default_str();
    app.add_option("--arch", o.arch, "GPU architecture to compile for")->capture_default_str();
    app.add_option("--kernels", o.kernels, "Kernels in the tuning sweep")
        ->check(CLI::Range(1, sweep_size()))
        ->capture_default_str();
    app.add_option("--rounds", o.rounds, "Warm rounds for each thread count")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    app.add_option("--cubin", o.cubin,
                   "Cubin for the resolve scenario (default: WORK_DIR/big.cubin, from kjit-make-bigcubin)");
    app.add_option("--keyword", o.keyword, "Keyword looked up in --cubin")->capture_default_str();
    app.add_option("--iterations", o.iterations, "Timed sidecar hits and floor calls")
        ->check(CLI::Range(1L, 100'000'000L))
        ->capture_default_str();
    app.add_option("--scan-iterations", o.scan_iterations, "Timed scans")
        ->check(CLI::Range(1L, 1'000'000L))
        ->capture_default_str();
    app.add_option("--pyelftools-repeats", o.pyelftools_repeats, "Timed pyelftools lookups")
        ->check(CLI::Range(1L, 1000L))
        ->capture_default_str();
    app.add_option("--python", o.python, "Python interpreter with elftools")->capture_default_str();
    app.add_option("--pyelftools-script", o.pyelftools_script, "The pyelftools lookup script")->capture_default_str();
    app.add_option("--startup-repeats", o.startup_repeats, "Warm start-up processes timed")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    app.add_option("--cub-kernels", o.cub_kernels, "Kernels in the CUB sweep")
        ->check(CLI::Range(1, cub_size()))
        ->capture_default_str();
    app.add_option("--scaling-kernels", o.scaling_kernels, "Kernels in the scaling scenario (--only scaling)")
        ->check(CLI::Range(1, 1000));
    app.add_option("--scaling-workers", o.scaling_workers, "Worker counts of the scaling scenario, e.g. 1,2,4")
        ->delimiter(',');
    app.add_option("--split-rounds", o.split_rounds, "Rounds of the --split-compile comparison (cub scenario)")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    app.add_option(
        "--baseline-lib", o.baseline_lib,
        "Folder with 0.3.0's libkjit.so.0, timed beside this one in the trust scenario (bench/run.sh builds it)");
    app.add_option("--trust-rounds", o.trust_rounds, "Child processes per build in the trust scenario")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    app.add_option("--trust-calls", o.trust_calls, "Timed hits per child and path (trust scenario)")
        ->check(CLI::Range(1L, 10'000'000L))
        ->capture_default_str();
    app.add_option("--trust-loads", o.trust_loads, "Timed loads per child and kernel (trust scenario)")
        ->check(CLI::Range(1L, 100'000L))
        ->capture_default_str();
    app.add_option(
        "--before-lib", o.before_lib,
        "Folder with an earlier libkjit.so.0 (bench/run.sh: 0.7.0), timed beside this one in the peers scenario "
        "(bench/run.sh builds it)");
    app.add_option("--before-python", o.before_python_dir, "That build's python/ folder (its kjit package)");
    app.add_option("--peers-rounds", o.peers_rounds, "Fresh processes per build, language and kernel (peers scenario)")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    app.add_option("--peers-repeats", o.peers_repeats,
                   "Timed repeats per C child (a quarter in Python; peers scenario)")
        ->check(CLI::Range(4L, 10'000'000L))
        ->capture_default_str();
    app.add_option("--header-kernels", o.header_kernels,
                   "Tree kernels in the headers scenario (cold fill, warm starts)")
        ->check(CLI::Range(1, tree_kernel_count()))
        ->capture_default_str();
    app.add_option("--header-batch", o.header_batch,
                   "Kernels in each cold batch of the headers scenario's PCH comparison")
        ->check(CLI::Range(1, tree_kernel_count()))
        ->capture_default_str();
    app.add_option("--header-repeats", o.header_repeats,
                   "Warm starts per way and PCH comparison rounds (headers scenario)")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    app.add_option("--header-hit-rounds", o.header_hit_rounds, "Rounds of timed hits (headers scenario)")
        ->check(CLI::Range(1, 10000))
        ->capture_default_str();
    app.add_option("--node-processes", o.node_processes, "Processes started at once in the node scenario")
        ->check(CLI::Range(2, 64))
        ->capture_default_str();
    app.add_option("--node-kernels", o.node_kernels, "The same missing kernels each node process asks for")
        ->check(CLI::Range(1, 300))
        ->capture_default_str();
    app.add_option("--node-repeats", o.node_repeats, "Rounds of each way in the node scenario")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    app.add_option("--cluster-nodes", o.cluster_nodes, "Node processes started at once in the cluster scenario")
        ->check(CLI::Range(2, 64))
        ->capture_default_str();
    app.add_option("--cluster-kernels", o.cluster_kernels, "The same kernels each node asks for (cluster scenario)")
        ->check(CLI::Range(1, sweep_size()))
        ->capture_default_str();
    app.add_option("--cluster-rounds", o.cluster_rounds, "Rounds of each way in the cluster scenario")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    app.add_option("--fleet-nodes", o.fleet_nodes, "Node processes started at once in the fleet scenario")
        ->check(CLI::Range(2, 64))
        ->capture_default_str();
    app.add_option("--fleet-kernels", o.fleet_kernels, "The same kernels each node asks for (fleet scenario)")
        ->check(CLI::Range(1, sweep_size() / 2))
        ->capture_default_str();
    app.add_option("--fleet-before-lib", o.fleet_before_lib,
                   "Folder of an earlier libkjit.so.0 (0.8.0) for the fleet scenario's before figures");
    app.add_option("--clients-rounds", o.clients_rounds, "Rounds of each way (real-clients scenario; median)")
        ->check(CLI::Range(1, 20))
        ->capture_default_str();
    app.add_option("--clients", o.clients_dir,
                   "Folder of the real clients' kernels (bench/real_clients/prepare.py --out)")
        ->capture_default_str();
    app.add_option("--link-kernels", o.link_kernels, "Kernels linked with the device library (link scenario)")
        ->check(CLI::Range(1, link_kernel_variants()))
        ->capture_default_str();
    app.add_option("--link-rounds", o.link_rounds,
                   "Rounds of raw and cold compiles, and hit-only processes (link scenario; median)")
        ->check(CLI::Range(1, 20))
        ->capture_default_str();
    app.add_option("--link-repeats", o.link_repeats, "Memo-hit rounds per hit-only process (link scenario)")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    app.add_option("--relocation-kernels", o.relocation_kernels,
                   "Header-only tree kernels built under one prefix and ready under another (relocation scenario)")
        ->check(CLI::Range(1, tree_kernel_count()))
        ->capture_default_str();
    app.add_option("--relocation-before-lib", o.relocation_before_lib,
                   "Folder of an earlier libkjit.so.0 (0.10.0) whose relocated node runs beside this one (relocation "
                   "scenario; bench/run.sh builds it)");
    app.add_option("--serving-kernels", o.serving_kernels,
                   "Header-tree kernels recorded when --clients has no manifests (serving scenario)")
        ->check(CLI::Range(1, tree_kernel_count()))
        ->capture_default_str();
    app.add_option("--serving-rounds", o.serving_rounds,
                   "Rounds of kjit warm against kjit_compile_batch, each on empty caches (serving scenario)")
        ->check(CLI::Range(1, 20))
        ->capture_default_str();
    app.add_option("--serving-misses", o.serving_misses,
                   "Strict misses timed in one process, and as many hits memo off and on (serving scenario)")
        ->check(CLI::Range(1L, 1'000'000L))
        ->capture_default_str();
    app.add_option("--json", json_path, "Also write the results as JSON to FILE, and a chart beside it");
    app.add_option("--chart", chart_path, "Where the PNG chart goes (default: the JSON's name with .png)");
    app.add_flag("--no-chart", no_chart, "Do not draw the chart");
    CLI11_PARSE(app, argc, argv);

    if (o.scenarios.empty()) {
        o.scenarios = {"sweep",   "resolve", "startup",      "cub",  "trust",      "peers",
                       "headers", "node",    "real-clients", "link", "relocation", "serving"};
#if KJIT_BENCH_CLUSTER
        o.scenarios.push_back("cluster");
        o.scenarios.push_back("fleet");
#endif
    }
    if (o.wants("startup") && !o.wants("sweep")) {
        std::fprintf(stderr,
                     "kjit-bench: the startup scenario needs the sweep (its warm cache): add sweep to --only\n");
        return 2;
    }
    try {
        if (::mkdir(o.work_dir.c_str(), 0700) != 0 && errno != EEXIST) {
            fail("cannot create the work dir '" + o.work_dir + "': " + std::strerror(errno));
        }
        struct stat st {};
        if (::stat(o.work_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail("'" + o.work_dir + "' is not a folder");
        // Absolute, as the paths kjit_compile returns are: the sweep compares them by prefix.
        char resolved[PATH_MAX];
        if (!::realpath(o.work_dir.c_str(), resolved))
            fail("cannot resolve '" + o.work_dir + "': " + std::strerror(errno));
        o.work_dir = resolved;
        if (o.cubin.empty()) o.cubin = o.work_dir + "/big.cubin";
        if (o.wants("resolve") && ::access(o.cubin.c_str(), R_OK) != 0) {
            fail("cannot read the cubin '" + o.cubin + "' (" + std::strerror(errno) +
                 "): make it with kjit-make-bigcubin, or pass --cubin, or leave resolve out of --only");
        }
        return run(o, json_path, chart_path, !no_chart);
    } catch (const BenchError &e) {
        std::fflush(stdout);
        std::fprintf(stderr, "kjit-bench: error: %s\n", e.what());
        return 1;
    }
}
