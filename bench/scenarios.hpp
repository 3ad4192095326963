// The scenarios of kjit-bench, run in one process (one run, so ratios compare like with
// like). Each adds its rows, notes and targets to the Report; each throws BenchError when it
// cannot go on.
#pragma once

#include "report.hpp"

#include <string>
#include <vector>

namespace kjit_bench {

struct BenchOptions {
    std::vector<std::string> scenarios;  // of "sweep", "resolve", "startup", "cub", "trust", "peers", "headers",
                                         // "node", "scaling", "real-clients", "link", "relocation",
                                         // "serving"
    std::string work_dir;                // caches and temp folders go here
    std::string arch = "sm_90";
    // sweep (and compile vs raw NVRTC, which it carries)
    int kernels = 300;
    int rounds = 20;  // warm rounds, for each thread count (a round of 300 loads is ~5 ms: many are cheap)
    // resolve
    std::string cubin;
    std::string keyword = "gemm_fp8_kernel";
    long iterations = 20000;     // sidecar hit and floor
    long scan_iterations = 200;  // scans
    long pyelftools_repeats = 5;
    std::string python = "/usr/bin/python3";
    std::string pyelftools_script;
    // startup
    int startup_repeats = 5;
    // cub
    int cub_kernels = 50;
    int split_rounds = 3;  // the --split-compile comparison on one large program
    // scaling (not by default)
    int scaling_kernels = 48;
    std::vector<int> scaling_workers = {1, 2, 4, 8, 16};
    // trust
    std::string baseline_lib;  // a folder with 0.3.0's libkjit.so.0 (bench/run.sh builds it); "" for none
    int trust_rounds = 5;
    long trust_calls = 20000;  // hits per child and path
    long trust_loads = 300;    // loads per child and kernel
    // peers
    std::string before_lib;         // a folder with the libkjit.so.0 of before issue 24 (bench/run.sh builds it)
    std::string before_python_dir;  // that build's python/ folder (its kjit.py)
    std::string python_module_dir;  // this build's python/ folder
    std::string peers_script;       // bench/peers_python.py
    int peers_rounds = 5;           // fresh processes per build, language and kernel
    long peers_repeats = 20000;     // timed repeats in each C child (a quarter in Python)
    // headers
    int header_kernels = 300;    // tree kernels: the cold fill and the warm starts
    int header_batch = 32;       // kernels in each cold batch of the PCH comparison
    int header_repeats = 2;      // warm starts per way, and rounds of the PCH comparison
    int header_hit_rounds = 20;  // rounds of hits (16 tree kernels, as many header-free hits)
    // node
    int node_processes = 8;  // processes started at once
    int node_kernels = 20;   // the same missing kernels each asks for
    int node_repeats = 2;    // rounds of each way
    // cluster
    int cluster_nodes = 8;     // node processes started at once, each with a cache of its own
    int cluster_kernels = 24;  // the same kernels each asks for
    int cluster_rounds = 2;    // rounds of each way (with the tier, without it)
    // fleet
    int fleet_nodes = 4;           // node processes started at once under each server condition
    int fleet_kernels = 20;        // the same kernels each asks for
    std::string fleet_before_lib;  // an earlier libkjit.so.0's folder (0.8.0), timed beside this one
    // link
    int link_kernels = 8;    // kernels linked with the library (variants of one tile kernel)
    int link_rounds = 3;     // rounds of raw and cold (each on an empty cache), and hit-only processes
    int link_repeats = 200;  // memo-hit rounds over all kernels in each hit-only process
    // real-clients: the folder bench/real_clients/prepare.py wrote (deepgemm.json, humming.json)
    std::string clients_dir;
    int clients_rounds = 3;  // rounds of the real-clients scenario's ways, interleaved (median)
    // relocation (and the DeepGEMM manifest of clients_dir)
    int relocation_kernels = 32;        // header-only tree kernels built under one prefix, ready under another
    std::string relocation_before_lib;  // an earlier libkjit.so.0's folder (0.10.0), its relocated node beside this one
    // serving (and the real clients' manifests of clients_dir)
    int serving_kernels = 24;    // header-tree kernels recorded when clients_dir has no manifests
    int serving_rounds = 2;      // rounds of `kjit warm` against the batch, each on empty caches
    long serving_misses = 2000;  // strict misses timed in one process (and as many hits, memo off and on)

    bool wants(const std::string &scenario) const {
        for (const std::string &s : scenarios) {
            if (s == scenario) return true;
        }
        return false;
    }
};

// What the sweep leaves for the start-up scenario: the warm cache of all its kernels.
struct SweepOutcome {
    std::string warm_cache;  // "" when the sweep did not run
    bool driver_usable = false;
    std::string driver_problem;  // kjit_last_error() of the probe when not usable
};

// 1 (and 3): the tuning sweep, cold then warm, with 1 and 2 threads; raw NVRTC beside the cold
// 1-thread compiles.
SweepOutcome run_sweep(const BenchOptions &o, Report &report);
// 2: resolve on the big cubin, with the pyelftools child.
void run_resolve(const BenchOptions &o, Report &report);
// 4: start-up of a fresh process, warm against cold.
void run_startup(const BenchOptions &o, const SweepOutcome &sweep, Report &report);

// The spawned start-up process (kjit-bench --startup-child MODE CACHE N ARCH): gets kernels
// 0..N-1 of the sweep ready to launch (kjit_compile, then kjit_load_cached), or with MODE
// "nothing" only starts and exits. Returns the exit code.
int startup_child_main(const std::string &mode, const std::string &cache, int n, const std::string &arch);

// 5: the cold CUB sweep, sequential plain NVRTC against kjit_compile_batch with 1 and 2
// workers, with and without PCH, each in a fresh process.
void run_cub(const BenchOptions &o, Report &report);
// The CUB sweep with PCH on 1, 2, 4, ... workers, threads against worker processes (not by
// default: for machines with many cores).
void run_scaling(const BenchOptions &o, Report &report);
// The spawned CUB process (kjit-bench --cub-child MODE CACHE N ARCH): compiles the first N CUB
// kernels the way MODE says and prints "wall_us <time>". Returns the exit code.
int cub_child_main(const std::string &mode, const std::string &cache, int n, const std::string &arch);

// 6: the price of the trust checks on hits and loads, against the 0.3.0 baseline when given.
void run_trust(const BenchOptions &o, Report &report);
// The spawned trust process (kjit-bench --trust-child CACHE ARCH CALLS LOADS): prints
// "<metric> <us per call>" lines (trust_scenario.cpp). Returns the exit code.
int trust_child_main(const std::string &cache, const std::string &arch, long calls, long loads);

// 8: hits as kernel libraries ask for them (path and name), C and Python, first and repeat, and
// 300 kernels ready in a fresh process, against the code before issue 24 when given.
void run_peers(const BenchOptions &o, Report &report);

// 7: header-heavy kernels over a generated CuTe/CUTLASS-shaped tree: hits against header-free
// ones, a warm start of all of them, cold batches with and without PCH (beside humming-style
// kernels), and the edit cycle (header_scenario.cpp).
void run_headers(const BenchOptions &o, Report &report);
// 8: one compile per key on the node (node_scenario.cpp).
void run_node(const BenchOptions &o, Report &report);
// The spawned node process (kjit-bench --node-child CACHE N ARCH WAIT_S): kjit_compile of the
// first N sweep kernels with KJIT_COMPILE_WAIT=WAIT_S; prints its NVRTC runs.
int node_child_main(const std::string &cache, int n, const std::string &arch, const std::string &wait_s);
// 10: the cluster tier against a loopback redis-server the scenario starts: N nodes cold with
// and without it, a new node joining warm, a warm local hit (cluster_scenario.cpp).
void run_cluster(const BenchOptions &o, Report &report);
// The spawned cluster node (kjit-bench --cluster-child CACHE N ARCH REMOTE): kjit_compile of the
// first N sweep kernels with remote_storage REMOTE ("none": off); prints one line of
// "name=value" counters (kjit_get_stats, and loop_us: its N calls). Returns the exit code.
int cluster_child_main(const std::string &cache, int n, const std::string &arch, const std::string &remote);
// 11: a fleet under each server condition (full, a shard down, a restart, a cluster endpoint, a
// killed lease holder) and a node warm from a seed, against 0.8.0 when given (fleet_scenario.cpp).
void run_fleet(const BenchOptions &o, Report &report);
// 12: link-time kernels (issue 37): kernels that call an LTO-IR device-function library the
// scenario builds, cold kjit_compile with link_inputs against raw NVRTC + nvJitLink, and hits
// in fresh processes (link_scenario.cpp).
void run_link(const BenchOptions &o, Report &report);
// The spawned headers process (kjit-bench --headers-child MODE CACHE TREE_ROOT N ARCH): gets the
// first N tree (or humming-style) kernels the way MODE says and prints "call_us <time>", then
// the hits, misses and NVRTC runs its calls counted. Returns the exit code.
int headers_child_main(const std::string &mode, const std::string &cache, const std::string &tree_root, int n,
                       const std::string &arch);

// 11: real clients' kernels (DeepGEMM, humming; bench/real_clients/prepare.py), sequential plain
// NVRTC against kjit_compile_batch with its defaults, PCH on and PCH off, each in a fresh
// process (real_clients_scenario.cpp). Skipped, and said, without the manifests.
void run_real_clients(const BenchOptions &o, Report &report);
// The spawned real-clients process (kjit-bench --clients-child MODE CACHE CLIENTS_DIR SET):
// compiles SET (deepgemm, humming or both) the way MODE says (raw, default, pch_on, pch_off)
// and prints "wall_us <time>". Returns the exit code.
int clients_child_main(const std::string &mode, const std::string &cache, const std::string &clients,
                       const std::string &set);

// 13: caches that move with the install (issue 47): a cache built under one install prefix and
// exported, and a fresh node under another prefix with the export as its seed, for the
// header-only tree and DeepGEMM (without and with base_dirs), against an earlier libkjit when
// given (relocation_scenario.cpp, kjit-relocation-node). DeepGEMM's part is skipped, and said,
// without its manifest.
void run_relocation(const BenchOptions &o, Report &report);

// 14: serving without JIT (issue 48): the real clients' kernels (else, and said, header-tree
// kernels) recorded in a staging run (KJIT_RECORD), `kjit warm` of the record on an empty cache
// against kjit_compile_batch of the same requests, a strict run (KJIT_NO_COMPILE=1) over the
// warmed cache, and a strict miss's cost beside a hit's (serving_scenario.cpp, kjit-serving-node).
void run_serving(const BenchOptions &o, Report &report);

}  // namespace kjit_bench
