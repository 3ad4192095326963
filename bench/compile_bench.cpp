// kjit-bench-compile: what kjit_compile costs on a miss next to raw NVRTC, and on a hit.
//
// All rows run in one process, on a fresh cache folder (mkdtemp under /tmp, removed at the end),
// each call timed with std::chrono::steady_clock:
//   1) cold compile   --kernels small templated kernels `gemm<K>`, K = 1..N, each its own cache
//                     key. For each one, raw NVRTC (nvrtcCreateProgram, nvrtcCompileProgram with
//                     -arch=sm_90, nvrtcGetCUBINSize/nvrtcGetCUBIN, nvrtcDestroyProgram: no files,
//                     no cache) and a kjit_compile miss on the same source, alternating which goes
//                     first to cancel drift. One untimed warm-up of each first, so neither row
//                     carries NVRTC's or libkjit's one-time process setup. For information, each
//                     miss is split into libkjit's own NVRTC call (the compile_seconds its
//                     manifest.txt records, 1 ms resolution) and all the rest (1d: key, look-up,
//                     name scan, and publishing the entry with its mkdirs, creates and fsyncs).
//                     The kernels' compile time grows with K, so the ratio of the two medians
//                     compares a couple of mid-K kernels; the median of the per-kernel ratios and
//                     the ratio of the sums use every pair.
//   2) hit            kjit_compile on kernel 1 again, --hits times
//   3) include hit    the same on a kernel that includes a chain of 20 headers h0.h -> ... ->
//                     h19.h through include_paths; minus row 2 it is what checking the recorded
//                     headers costs per hit. 3r, for reference: 20 stat() calls on those headers.
//                     Rows 2, 3 and 3r are timed in alternating blocks.
//   4) resolve        kjit_resolve_name on a cubin kjit_compile has just published: the first
//                     call (a sidecar hit: the sidecar is not rewritten), then 1000 calls; and,
//                     for reference, the same with the sidecar removed before each call (scan)
//
// Usage: kjit-bench-compile [--kernels N] [--hits N] [--json FILE]
#include "kjit/kjit.h"

#include "bench_common.hpp"

#include <nvrtc.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using namespace kjit_bench;

constexpr int kWarmupK = 10000;     // the untimed warm-up kernel
constexpr int kResolveK = 20000;    // row 4's freshly compiled kernel
constexpr int kIncludeK = 30000;    // row 3's kernel
constexpr int kHeaderCount = 20;    // row 3's include chain
constexpr long kResolveCalls = 1000;
constexpr long kScanCalls = 100;
constexpr const char *kArch = "sm_90";

struct Options {
    long kernels = 20;
    long hits = 5000;
    std::string json;
};


std::string g_temp_root;  // removed on every exit path

void remove_temp_root() {
    if (g_temp_root.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(g_temp_root, ec);
    if (ec) std::fprintf(stderr, "kjit-bench-compile: could not remove '%s': %s\n", g_temp_root.c_str(), ec.message().c_str());
    g_temp_root.clear();
}

[[noreturn]] void die(const std::string &message) {
    std::fprintf(stderr, "kjit-bench-compile: %s\n", message.c_str());
    remove_temp_root();
    std::exit(1);
}

[[noreturn]] void die_kjit(const char *what, kjit_status s) {
    die(std::string(what) + " failed: " + kjit_status_string(s) + ": " + kjit_last_error());
}

void usage(const char *argv0) {
    std::fprintf(stderr,
                 "usage: %s [--kernels N] [--hits N] [--json FILE]\n"
                 "  --kernels N  cold compiles, each timed with raw NVRTC and kjit_compile (default 20, at most 1000)\n"
                 "  --hits N     timed kjit_compile hits per hit row (default 5000)\n"
                 "  --json FILE  also write the results as JSON\n",
                 argv0);
}

long parse_count(const char *flag, const char *text, long max) {
    char *end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno != 0 || !end || *end != '\0' || v < 1 || v > max) {
        die(std::string("bad value for ") + flag + ": '" + text + "' (an integer from 1 to " + std::to_string(max) + ")");
    }
    return v;
}

Options parse_args(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            usage(argv[0]);
            std::exit(0);
        }
        if (i + 1 >= argc) {
            usage(argv[0]);
            die("'" + arg + "' needs a value or is unknown");
        }
        const char *value = argv[++i];
        if (arg == "--kernels") o.kernels = parse_count("--kernels", value, 1000);
        else if (arg == "--hits") o.hits = parse_count("--hits", value, 100'000'000);
        else if (arg == "--json") o.json = value;
        else {
            usage(argv[0]);
            die("unknown option '" + arg + "'");
        }
    }
    return o;
}



double elapsed_us(Clock::time_point t0, Clock::time_point t1) {
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

// Times `body` once, in microseconds.
template <typename Body>
double time_once(Body &&body) {
    const auto t0 = Clock::now();
    body();
    const auto t1 = Clock::now();
    return elapsed_us(t0, t1);
}



void write_file(const std::string &path, const std::string &bytes) {
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) die("cannot create '" + path + "': " + std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (std::fclose(f) != 0 || !ok) die("cannot write '" + path + "'");
}

// Entries in a cache entry's deps.txt: the lines after the header line that start with '+'
// (a header read) or '-' (a probed candidate that must stay absent).
std::size_t count_deps(const std::string &path) {
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f) return 0;
    std::size_t n = 0;
    bool line_start = true, first_line = true;
    for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) {
        if (line_start && !first_line && (c == '+' || c == '-')) ++n;
        line_start = c == '\n';
        if (line_start) first_line = false;
    }
    std::fclose(f);
    return n;
}

// The `compile_seconds:` line of a cache entry's manifest.txt: how long libkjit's own NVRTC
// call took inside kjit_compile (millisecond resolution). NaN when it cannot be read.
double manifest_compile_us(const std::string &entry) {
    FILE *f = std::fopen((entry + "/manifest.txt").c_str(), "rb");
    if (!f) return std::nan("");
    char line[512];
    double seconds = std::nan("");
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "compile_seconds: ", 17) == 0) seconds = std::strtod(line + 17, nullptr);
    }
    std::fclose(f);
    return seconds * 1e6;
}


// ---- the kernels --------------------------------------------------------------------------

// A small templated kernel with an explicit instantiation for K: each K is its own source, so
// its own cache key.
std::string kernel_source(int k, const std::string &prelude = std::string(), const char *scale = "1.0f") {
    return prelude +
           "template <int N> __global__ void gemm(float *p, const float *a, const float *b, int n) {\n"
           "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i >= n) return;\n"
           "    float acc = 0.0f;\n"
           "    for (int k = 0; k < N; ++k) acc += a[(i + k) % n] * b[k % n];\n"
           "    p[i] = acc * " + scale + ";\n"
           "}\n"
           "template __global__ void gemm<" + std::to_string(k) + ">(float*, const float*, const float*, int);\n";
}

std::string mangled_name(int k) { return "_Z4gemmILi" + std::to_string(k) + "EEvPfPKfS2_i"; }

// ---- raw NVRTC, the baseline ----------------------------------------------------------------

void nvrtc_check(nvrtcResult r, const char *what) {
    if (r != NVRTC_SUCCESS) die(std::string(what) + " failed: " + nvrtcGetErrorString(r));
}

// Source -> cubin bytes with NVRTC alone: what kjit_compile adds its cache around.
std::size_t raw_nvrtc_compile(const std::string &source) {
    nvrtcProgram prog = nullptr;
    nvrtc_check(nvrtcCreateProgram(&prog, source.c_str(), "source.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
    const char *const options[] = {"-arch=sm_90"};
    const nvrtcResult compiled = nvrtcCompileProgram(prog, 1, options);
    if (compiled != NVRTC_SUCCESS) {
        std::size_t log_size = 0;
        std::string log;
        if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
            log.resize(log_size);
            if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) log.clear();
        }
        nvrtcDestroyProgram(&prog);
        die(std::string("nvrtcCompileProgram failed: ") + nvrtcGetErrorString(compiled) + "\n" + log);
    }
    std::size_t size = 0;
    nvrtc_check(nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
    if (size == 0) die("NVRTC produced no cubin");
    std::vector<char> cubin(size);
    nvrtc_check(nvrtcGetCUBIN(prog, cubin.data()), "nvrtcGetCUBIN");
    nvrtc_check(nvrtcDestroyProgram(&prog), "nvrtcDestroyProgram");
    return size;
}

// ---- kjit -------------------------------------------------------------------------------------

std::string kjit_compile_or_die(const std::string &source, const kjit_compile_options &opts) {
    char path[4096];
    size_t len = 0;
    const kjit_status s = kjit_compile(source.c_str(), "gemm", &opts, path, sizeof path, &len);
    if (s != KJIT_OK) die_kjit("kjit_compile", s);
    return std::string(path, len);
}

struct Ratio {
    const char *key;
    const char *text;
    double value;
    double target;
    bool at_most;  // target is an upper bound
    bool met() const { return at_most ? value <= target : value >= target; }
};

struct Info {
    const char *key;
    const char *text;
    double value;
    const char *unit;
};

void print_row(const Row &r, double scale, const char *unit) {
    std::printf("%-52s %11.2f %11.2f %11.2f %4s %8ld\n", (r.id + ") " + r.label).c_str(), r.median_us / scale,
                r.p10_us / scale, r.p90_us / scale, unit, r.samples);
}

}  // namespace

int main(int argc, char **argv) {
    const Options o = parse_args(argc, argv);

    char temp_template[] = "/tmp/kjit-bench-compile-XXXXXX";
    if (!::mkdtemp(temp_template)) die(std::string("mkdtemp failed: ") + std::strerror(errno));
    g_temp_root = temp_template;
    const std::string cache_dir = g_temp_root + "/cache";
    const std::string include_dir = g_temp_root + "/include";

    int nvrtc_major = 0, nvrtc_minor = 0;
    nvrtc_check(nvrtcVersion(&nvrtc_major, &nvrtc_minor), "nvrtcVersion");
    std::printf("kjit-bench-compile: libkjit %s, NVRTC %d.%d, arch %s\n", kjit_version_string(), nvrtc_major,
                nvrtc_minor, kArch);
    std::printf("cache:      %s (on %s, fresh)\n", cache_dir.c_str(), filesystem_name(g_temp_root).c_str());
    std::printf("kernels:    %ld cold compiles (gemm<1> ... gemm<%ld>), %ld hits per hit row\n\n", o.kernels,
                o.kernels, o.hits);
    std::fflush(stdout);

    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    opts.cache_dir = cache_dir.c_str();
    opts.arch = kArch;

    // Warm-up: NVRTC's first compile in a process loads its builtins, and kjit_compile's first
    // call sets up the library (logger, NVRTC version, ...). Neither belongs in the rows.
    const std::string warm_source = kernel_source(kWarmupK);
    const double warm_raw_us = time_once([&] { raw_nvrtc_compile(warm_source); });
    const double warm_kjit_us = time_once([&] { kjit_compile_or_die(warm_source, opts); });
    std::printf("warm-up (untimed in the rows): first raw NVRTC compile %.1f ms, first kjit_compile %.1f ms\n",
                warm_raw_us / 1000, warm_kjit_us / 1000);
    std::fflush(stdout);

    // 1) cold compiles, alternating which of the two goes first.
    std::vector<double> raw_us, kjit_us, paired_ratio, paired_extra_us;
    std::vector<std::string> cubin_paths;
    std::size_t cubin_bytes = 0;
    for (long i = 0; i < o.kernels; ++i) {
        const int k = static_cast<int>(i + 1);
        const std::string source = kernel_source(k);
        double raw = 0, kj = 0;
        std::string path;
        auto run_raw = [&] { raw = time_once([&] { cubin_bytes = raw_nvrtc_compile(source); }); };
        auto run_kjit = [&] { kj = time_once([&] { path = kjit_compile_or_die(source, opts); }); };
        if (i % 2 == 0) {
            run_raw();
            run_kjit();
        } else {
            run_kjit();
            run_raw();
        }
        raw_us.push_back(raw);
        kjit_us.push_back(kj);
        paired_ratio.push_back(kj / raw);
        paired_extra_us.push_back(kj - raw);
        cubin_paths.push_back(path);
    }
    // Where kjit's extra time goes: its NVRTC call (timed by libkjit itself, in the manifest)
    // and everything else (key, look-up, name scan, publish with its fsyncs).
    std::vector<double> inner_nvrtc_us, outside_nvrtc_us, inner_minus_raw_us;
    for (std::size_t i = 0; i < cubin_paths.size(); ++i) {
        const double inner = manifest_compile_us(folder_of(cubin_paths[i]));
        if (std::isnan(inner)) {
            inner_nvrtc_us.clear();
            break;
        }
        inner_nvrtc_us.push_back(inner);
        outside_nvrtc_us.push_back(kjit_us[i] - inner);
        inner_minus_raw_us.push_back(inner - raw_us[i]);
    }
    for (std::size_t i = 0; i < cubin_paths.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            if (cubin_paths[i] == cubin_paths[j]) die("two kernels share a cache entry: " + cubin_paths[i]);
        }
    }
    const std::string kernel1 = kernel_source(1);
    const std::string kernel1_path = cubin_paths.front();
    {
        char name[256];
        size_t len = 0;
        const kjit_status s = kjit_resolve_name(kernel1_path.c_str(), "gemm", name, sizeof name, &len);
        if (s != KJIT_OK) die_kjit("kjit_resolve_name", s);
        if (std::string(name, len) != mangled_name(1)) die("kernel 1 resolved to '" + std::string(name, len) + "'");
    }

    // 3's setup: h0.h includes h1.h ... includes h19.h, each a few #defines.
    std::error_code ec;
    std::filesystem::create_directories(include_dir, ec);
    if (ec) die("cannot create '" + include_dir + "': " + ec.message());
    for (int h = 0; h < kHeaderCount; ++h) {
        const std::string n = std::to_string(h);
        std::string text = "#pragma once\n";
        if (h + 1 < kHeaderCount) text += "#include \"h" + std::to_string(h + 1) + ".h\"\n";
        text += "#define H" + n + "_A " + n + "\n#define H" + n + "_B (H" + n + "_A + 1)\n#define H" + n +
                "_SCALE (H" + n + "_B * 0.5f)\n";
        const std::string header = include_dir + "/h" + n + ".h";
        write_file(header, text);
        // Aged an hour, as a library's installed headers are: a header edited in the last 2 s
        // is checked by content on every hit instead (see docs/cache-layout.md).
        struct timespec past[2];
        clock_gettime(CLOCK_REALTIME, &past[0]);
        past[0].tv_sec -= 3600;
        past[1] = past[0];
        if (::utimensat(AT_FDCWD, header.c_str(), past, 0) != 0) die("cannot set the mtime of '" + header + "'");
    }
    const char *include_paths[] = {include_dir.c_str()};
    kjit_compile_options inc_opts = opts;
    inc_opts.include_paths = include_paths;
    inc_opts.include_path_count = 1;
    const std::string inc_source = kernel_source(kIncludeK, "#include \"h0.h\"\n", "H19_SCALE");
    double inc_raw_us = 0;
    {
        // NVRTC alone on the include kernel, for the miss below (same -I as kjit passes).
        const std::string dash_i = "-I" + include_dir;
        const char *const options[] = {"-arch=sm_90", dash_i.c_str()};
        nvrtcProgram prog = nullptr;
        inc_raw_us = time_once([&] {
            nvrtc_check(nvrtcCreateProgram(&prog, inc_source.c_str(), "source.cu", 0, nullptr, nullptr),
                        "nvrtcCreateProgram");
            nvrtc_check(nvrtcCompileProgram(prog, 2, options), "nvrtcCompileProgram (include kernel)");
            std::size_t size = 0;
            nvrtc_check(nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
            std::vector<char> cubin(size);
            nvrtc_check(nvrtcGetCUBIN(prog, cubin.data()), "nvrtcGetCUBIN");
            nvrtc_check(nvrtcDestroyProgram(&prog), "nvrtcDestroyProgram");
        });
    }
    std::string inc_path;
    const double inc_miss_us = time_once([&] { inc_path = kjit_compile_or_die(inc_source, inc_opts); });
    const std::size_t recorded_deps = count_deps(folder_of(inc_path) + "/deps.txt");
    std::vector<std::string> header_paths;
    for (int h = 0; h < kHeaderCount; ++h) header_paths.push_back(include_dir + "/h" + std::to_string(h) + ".h");

    // 2) and 3): hits, in alternating blocks so drift hits both rows alike; with them, for
    // reference, 20 stat() calls on the headers (the least a check of 20 headers can cost).
    std::vector<double> hit_us, inc_hit_us, stat_us;
    hit_us.reserve(static_cast<std::size_t>(o.hits));
    inc_hit_us.reserve(static_cast<std::size_t>(o.hits));
    stat_us.reserve(static_cast<std::size_t>(o.hits));
    {
        char path[4096];
        size_t len = 0;
        // Only the call is timed; its answer is checked after.
        auto hit = [&](const std::string &source, const kjit_compile_options &with, const std::string &expected) {
            kjit_status s = KJIT_OK;
            const double us = time_once([&] { s = kjit_compile(source.c_str(), "gemm", &with, path, sizeof path, &len); });
            if (s != KJIT_OK) die_kjit("kjit_compile (hit)", s);
            if (len != expected.size() || std::memcmp(path, expected.data(), len) != 0) {
                die("a hit returned '" + std::string(path, len) + "', not '" + expected + "'");
            }
            return us;
        };
        int stat_failures = 0;
        auto stat_headers = [&] {
            struct stat st {};
            for (const std::string &h : header_paths) stat_failures += ::stat(h.c_str(), &st) != 0 ? 1 : 0;
        };
        const long warm = std::max(1L, std::min(o.hits / 10, 200L));
        for (long i = 0; i < warm; ++i) {
            hit(kernel1, opts, kernel1_path);
            hit(inc_source, inc_opts, inc_path);
            stat_headers();
        }
        constexpr long kBlocks = 10;
        for (long b = 0; b < kBlocks; ++b) {
            const long n = o.hits / kBlocks + (b < o.hits % kBlocks ? 1 : 0);
            for (long i = 0; i < n; ++i) hit_us.push_back(hit(kernel1, opts, kernel1_path));
            for (long i = 0; i < n; ++i) inc_hit_us.push_back(hit(inc_source, inc_opts, inc_path));
            for (long i = 0; i < n; ++i) stat_us.push_back(time_once(stat_headers));
        }
        if (stat_failures != 0) die("cannot stat the headers under '" + include_dir + "'");
    }

    // 4) resolve on a freshly published cubin: the first call, then steady calls, then scans.
    const std::string fresh_path = kjit_compile_or_die(kernel_source(kResolveK), opts);
    const std::string sidecar = fresh_path + ".name";
    struct stat before {}, after {};
    if (::stat(sidecar.c_str(), &before) != 0) die("kjit_compile left no sidecar at '" + sidecar + "'");
    char name[256];
    size_t name_len = 0;
    auto resolve = [&] {
        const kjit_status s = kjit_resolve_name(fresh_path.c_str(), "gemm", name, sizeof name, &name_len);
        if (s != KJIT_OK) die_kjit("kjit_resolve_name", s);
    };
    const double first_resolve_us = time_once(resolve);
    if (std::string(name, name_len) != mangled_name(kResolveK)) die("resolved '" + std::string(name, name_len) + "'");
    if (::stat(sidecar.c_str(), &after) != 0) die("the sidecar vanished: '" + sidecar + "'");
    const bool sidecar_untouched = before.st_ino == after.st_ino && before.st_size == after.st_size &&
                                   before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
                                   before.st_mtim.tv_nsec == after.st_mtim.tv_nsec;
    if (!sidecar_untouched) die("the first kjit_resolve_name after kjit_compile rewrote the sidecar (not a sidecar hit)");
    std::vector<double> resolve_us;
    for (long i = 0; i < kResolveCalls; ++i) resolve_us.push_back(time_once(resolve));
    std::vector<double> scan_us;
    for (long i = 0; i < kScanCalls; ++i) {
        if (::unlink(sidecar.c_str()) != 0) die("cannot remove '" + sidecar + "': " + std::strerror(errno));
        scan_us.push_back(time_once(resolve));
    }
    if (std::string(name, name_len) != mangled_name(kResolveK)) die("the scan resolved '" + std::string(name, name_len) + "'");

    // ---- results ----------------------------------------------------------------------------
    auto median_of = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return percentile(v, 0.5);
    };
    const double paired_median = median_of(paired_ratio);
    const double paired_extra_median_us = median_of(paired_extra_us);
    double raw_total_us = 0, kjit_total_us = 0;
    for (std::size_t i = 0; i < raw_us.size(); ++i) {
        raw_total_us += raw_us[i];
        kjit_total_us += kjit_us[i];
    }
    std::vector<Row> cold_rows, hit_rows;
    cold_rows.push_back(summarize("1a", "raw NVRTC (create+compile+cubin+destroy)", raw_us));
    cold_rows.push_back(summarize("1b", "kjit_compile, cold (miss + publish)", kjit_us));
    const bool have_breakdown = !inner_nvrtc_us.empty();
    if (have_breakdown) {
        cold_rows.push_back(summarize("1c", "(info) of 1b: its NVRTC call (manifest, 1 ms res.)", inner_nvrtc_us));
        cold_rows.push_back(summarize("1d", "(info) of 1b: all but NVRTC (key, scan, publish)", outside_nvrtc_us));
    }
    hit_rows.push_back(summarize("2", "kjit_compile hit (kernel 1)", std::move(hit_us)));
    hit_rows.push_back(summarize("3", "kjit_compile hit, 20 headers via include_paths", std::move(inc_hit_us)));
    hit_rows.push_back(summarize("3r", "(ref) 20 x stat() of those headers, alone", std::move(stat_us)));
    hit_rows.push_back(summarize("4b", "kjit_resolve_name, fresh cubin, 1000 calls", std::move(resolve_us)));
    hit_rows.push_back(summarize("4c", "(ref) kjit_resolve_name, sidecar removed (scan)", std::move(scan_us)));
    const Row &raw = cold_rows[0];
    const Row &cold = cold_rows[1];
    auto find = [&](const char *id) -> const Row & {
        for (const Row &r : hit_rows) {
            if (r.id == id) return r;
        }
        die(std::string("no row ") + id);
    };
    const Row &hit = find("2");
    const Row &inc_hit = find("3");
    const Row &stat_row = find("3r");
    const Row &resolve_row = find("4b");
    const double include_cost_us = inc_hit.median_us - hit.median_us;

    std::printf("\n%-52s %11s %11s %11s %4s %8s\n", "row (per call)", "median", "p10", "p90", "unit", "samples");
    for (const Row &r : cold_rows) print_row(r, 1000, "ms");
    for (const Row &r : hit_rows) {
        if (r.id == "4b") {
            std::printf("%-52s %11.2f %11s %11s %4s %8d\n", "4a) kjit_resolve_name, fresh cubin, first call",
                        first_resolve_us, "", "", "us", 1);
        }
        print_row(r, 1, "us");
    }

    const Ratio ratios[] = {
        {"kjit_cold_over_raw", "kjit cold / raw NVRTC", cold.median_us / raw.median_us, 1.05, true},
        {"cold_over_hit", "kjit cold / kjit hit", cold.median_us / hit.median_us, 1000, false},
    };
    const Info infos[] = {
        {"kjit_cold_over_raw_paired_median", "kjit cold / raw, median of per-kernel ratios", paired_median, "x"},
        {"kjit_cold_over_raw_totals", "kjit cold / raw, ratio of the sums", kjit_total_us / raw_total_us, "x"},
        {"kjit_cold_minus_raw_paired_median_ms", "kjit cold - raw, median per kernel", paired_extra_median_us / 1000, "ms"},
        {"kjit_nvrtc_minus_raw_paired_median_ms", "  of which kjit's NVRTC call - raw (1c - 1a)",
         have_breakdown ? median_of(inner_minus_raw_us) / 1000 : std::nan(""), "ms"},
        {"kjit_outside_nvrtc_median_ms", "  of which all but NVRTC (1d)",
         have_breakdown ? median_of(outside_nvrtc_us) / 1000 : std::nan(""), "ms"},
        {"include_check_us", "include-path check per hit (row 3 - row 2)", include_cost_us, "us"},
        {"include_check_per_header_us", "  per header (/ 20)", include_cost_us / kHeaderCount, "us"},
        {"include_check_minus_stats_us", "  of which beyond the 20 stat() calls (3 - 2 - 3r)",
         include_cost_us - stat_row.median_us, "us"},
        {"include_deps_recorded", "  dependencies recorded in deps.txt", static_cast<double>(recorded_deps), ""},
        {"include_miss_ms", "include kernel: kjit_compile miss", inc_miss_us / 1000, "ms"},
        {"include_raw_ms", "include kernel: raw NVRTC with -I", inc_raw_us / 1000, "ms"},
        {"resolve_first_over_median", "resolve first call / resolve median", first_resolve_us / resolve_row.median_us, "x"},
        {"warmup_raw_ms", "first-ever raw NVRTC compile (warm-up)", warm_raw_us / 1000, "ms"},
        {"warmup_kjit_ms", "first-ever kjit_compile (warm-up)", warm_kjit_us / 1000, "ms"},
    };
    std::printf("\nkey ratios (medians):\n");
    bool all_met = true;
    for (const Ratio &r : ratios) {
        all_met = all_met && r.met();
        std::printf("  %-50s %10.3f   target %s %g: %s\n", r.text, r.value, r.at_most ? "<=" : ">=", r.target,
                    r.met() ? "met" : "MISSED");
    }
    std::printf("\nother figures:\n");
    for (const Info &i : infos) {
        if (*i.unit) std::printf("  %-50s %10.3f %s\n", i.text, i.value, i.unit);
        else std::printf("  %-50s %10.0f\n", i.text, i.value);
    }
    std::printf("  %-50s %s\n", "first resolve after compile", "sidecar hit (sidecar not rewritten)");

    if (!o.json.empty()) {
        FILE *f = std::fopen(o.json.c_str(), "w");
        if (!f) die("cannot write '" + o.json + "': " + std::strerror(errno));
        std::fprintf(f, "{\n  \"libkjit_version\": \"%s\",\n", kjit_version_string());
        std::fprintf(f, "  \"nvrtc_version\": \"%d.%d\",\n  \"arch\": \"%s\",\n", nvrtc_major, nvrtc_minor, kArch);
        std::fprintf(f, "  \"filesystem\": \"%s\",\n", json_escape(filesystem_name(g_temp_root)).c_str());
        std::fprintf(f, "  \"kernels\": %ld,\n  \"hits\": %ld,\n  \"cubin_bytes\": %zu,\n", o.kernels, o.hits, cubin_bytes);
        std::fprintf(f, "  \"rows\": [\n");
        std::vector<const Row *> all;
        for (const Row &r : cold_rows) all.push_back(&r);
        for (const Row &r : hit_rows) all.push_back(&r);
        for (const Row *r : all) {
            std::fprintf(f,
                         "    {\"id\": \"%s\", \"label\": \"%s\", \"samples\": %ld, \"median_us\": %.3f, "
                         "\"p10_us\": %.3f, \"p90_us\": %.3f},\n",
                         r->id.c_str(), json_escape(r->label).c_str(), r->samples, r->median_us, r->p10_us, r->p90_us);
        }
        std::fprintf(f,
                     "    {\"id\": \"4a\", \"label\": \"kjit_resolve_name, fresh cubin, first call\", \"samples\": 1, "
                     "\"median_us\": %.3f, \"p10_us\": %.3f, \"p90_us\": %.3f, \"sidecar_hit\": %s}\n",
                     first_resolve_us, first_resolve_us, first_resolve_us, sidecar_untouched ? "true" : "false");
        std::fprintf(f, "  ],\n  \"per_kernel\": [\n");
        for (std::size_t i = 0; i < raw_us.size(); ++i) {
            std::fprintf(f, "    {\"k\": %zu, \"raw_us\": %.1f, \"kjit_us\": %.1f, \"kjit_first\": %s}%s\n", i + 1,
                         raw_us[i], kjit_us[i], i % 2 == 1 ? "true" : "false", i + 1 < raw_us.size() ? "," : "");
        }
        std::fprintf(f, "  ],\n  \"ratios\": {\n");
        for (const Ratio &r : ratios) {
            std::fprintf(f, "    \"%s\": {\"value\": %.4f, \"target\": %g, \"bound\": \"%s\", \"met\": %s},\n", r.key,
                         r.value, r.target, r.at_most ? "max" : "min", r.met() ? "true" : "false");
        }
        for (std::size_t i = 0; i < sizeof infos / sizeof infos[0]; ++i) {
            char value[64];
            if (std::isnan(infos[i].value)) std::snprintf(value, sizeof value, "null");
            else std::snprintf(value, sizeof value, "%.4f", infos[i].value);
            std::fprintf(f, "    \"%s\": {\"value\": %s, \"unit\": \"%s\"}%s\n", infos[i].key, value, infos[i].unit,
                         i + 1 < sizeof infos / sizeof infos[0] ? "," : "");
        }
        std::fprintf(f, "  },\n  \"all_targets_met\": %s\n}\n", all_met ? "true" : "false");
        if (std::fclose(f) != 0) die("cannot finish '" + o.json + "'");
        std::printf("\nwrote %s\n", o.json.c_str());
    }
    remove_temp_root();
    return 0;
}
