// kjit-bench: what one kjit_resolve_name call costs, next to what it replaces.
//
// Rows, each timed per call (std::chrono::steady_clock, CLOCK_MONOTONIC) after a warm-up:
//   a) sidecar hit       kjit_resolve_name with a settled sidecar next to the cubin
//   b) scan + rewrite    kjit_resolve_name with the sidecar removed before each call (the
//                        unlink is not timed): libelf scan, keyword rule, sidecar publish
//   c) scan only         kjit::SymbolTable::open_file + kjit::name_matcher::select, no sidecar I/O
//   d) floor             open + read + close of a one-line file as large as the sidecar, in the
//                        cubin's folder: what any file-based answer must pay
//   d2) (information)    the system calls a hit makes (stat the cubin; open, read once and
//                        close the sidecar) without any of its user-space work; a - d2 is what
//                        libkjit's own code costs on a hit, d2 - d what its design asks of the kernel
//   e) pyelftools        the pure-Python lookup libkjit replaces (bench/pyelftools_lookup.py,
//                        run as a child process; its own timings of each whole lookup)
//
// Usage: kjit-bench --cubin PATH --keyword K [--iterations N] [--scan-iterations N]
//                   [--pyelftools-repeats N] [--pyelftools-python PATH]
//                   [--pyelftools-script PATH] [--json FILE]
#include "kjit/kjit.h"

#include "bench_common.hpp"

#include "name_matcher.hpp"
#include "symbol_scanner.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#ifndef KJIT_BENCH_SOURCE_DIR
#define KJIT_BENCH_SOURCE_DIR "."
#endif

namespace {

using namespace kjit_bench;

// libkjit's racy window is 2 s (NameResolver::kRacyWindowNs); wait until the cubin is older
// than this before timing hits, so hits are the steady-state kind that never read the cubin.
constexpr double kSettleAgeSeconds = 2.5;

struct Options {
    std::string cubin;
    std::string keyword;
    long iterations = 20000;       // rows a and d
    long scan_iterations = 200;    // rows b and c
    long pyelftools_repeats = 5;   // row e
    std::string python = "/usr/bin/python3";
    std::string script = KJIT_BENCH_SOURCE_DIR "/pyelftools_lookup.py";
    std::string json;
};


[[noreturn]] void die(const std::string &message) {
    std::fprintf(stderr, "kjit-bench: %s\n", message.c_str());
    std::exit(1);
}

void usage(const char *argv0) {
    std::fprintf(stderr,
                 "usage: %s --cubin PATH --keyword K [--iterations N] [--scan-iterations N]\n"
                 "          [--pyelftools-repeats N] [--pyelftools-python PATH] [--pyelftools-script PATH]\n"
                 "          [--json FILE]\n"
                 "  --iterations N          timed calls for the sidecar hit and the floor (default 20000)\n"
                 "  --scan-iterations N     timed calls for the two scan rows (default 200)\n"
                 "  --pyelftools-repeats N  timed pyelftools lookups (default 5)\n"
                 "  --pyelftools-python P   interpreter with elftools (default /usr/bin/python3)\n",
                 argv0);
}

long parse_count(const char *flag, const char *text) {
    char *end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno != 0 || !end || *end != '\0' || v < 1 || v > 100'000'000) {
        die(std::string("bad value for ") + flag + ": '" + text + "' (a positive integer)");
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
        if (arg == "--cubin") o.cubin = value;
        else if (arg == "--keyword") o.keyword = value;
        else if (arg == "--iterations") o.iterations = parse_count("--iterations", value);
        else if (arg == "--scan-iterations") o.scan_iterations = parse_count("--scan-iterations", value);
        else if (arg == "--pyelftools-repeats") o.pyelftools_repeats = parse_count("--pyelftools-repeats", value);
        else if (arg == "--pyelftools-python") o.python = value;
        else if (arg == "--pyelftools-script") o.script = value;
        else if (arg == "--json") o.json = value;
        else {
            usage(argv[0]);
            die("unknown option '" + arg + "'");
        }
    }
    if (o.cubin.empty() || o.keyword.empty()) {
        usage(argv[0]);
        die("--cubin and --keyword are required");
    }
    return o;
}



// Runs `body` `warmup` times untimed, then `n` times timed; `before` runs untimed before each
// call (both phases). Returns microseconds per call.
template <typename Before, typename Body>
std::vector<double> time_calls(long warmup, long n, Before &&before, Body &&body) {
    for (long i = 0; i < warmup; ++i) {
        before();
        body();
    }
    std::vector<double> us;
    us.reserve(static_cast<std::size_t>(n));
    for (long i = 0; i < n; ++i) {
        before();
        const auto t0 = Clock::now();
        body();
        const auto t1 = Clock::now();
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return us;
}

std::string resolve_or_die(const Options &o) {
    char name[1024];
    size_t len = 0;
    const kjit_status s = kjit_resolve_name(o.cubin.c_str(), o.keyword.c_str(), name, sizeof name, &len);
    if (s != KJIT_OK) {
        die(std::string("kjit_resolve_name failed: ") + kjit_status_string(s) + ": " + kjit_last_error());
    }
    return std::string(name, len);
}

std::string read_whole(const std::string &path) {
    std::string out;
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f) return out;
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
    return out;
}

void write_whole(const std::string &path, const std::string &bytes) {
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) die("cannot create '" + path + "': " + std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (std::fclose(f) != 0 || !ok) die("cannot write '" + path + "'");
}

double realtime_seconds() {
    struct timespec ts {};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double cubin_age_seconds(const std::string &path, struct stat &st) {
    if (::stat(path.c_str(), &st) != 0) die("cannot stat '" + path + "': " + std::strerror(errno));
    const double mtime = static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
    return realtime_seconds() - mtime;
}



// The sidecar hit path must be the steady-state kind: the line has no content hash ('-').
bool sidecar_settled(const std::string &text, const std::string &keyword) {
    std::size_t pos = text.find('\n');
    while (pos != std::string::npos && pos + 1 < text.size()) {
        const std::size_t start = pos + 1;
        const std::size_t end = text.find('\n', start);
        const std::string line = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
        // <keyword> <size> <mtime> <hash|-> <name> <check>
        std::vector<std::string> fields;
        std::size_t a = 0;
        while (a <= line.size()) {
            const std::size_t b = line.find(' ', a);
            fields.push_back(line.substr(a, b == std::string::npos ? std::string::npos : b - a));
            if (b == std::string::npos) break;
            a = b + 1;
        }
        if (fields.size() == 6 && fields[0] == keyword) return fields[3] == "-";
        pos = end;
    }
    return false;
}

// ---- row e: the pyelftools child --------------------------------------------------------

struct ChildResult {
    bool started = false;
    int exit_status = -1;  // exit code, or -1 when killed by a signal
    std::string out, err;
};

// Runs argv[0] with `args`, capturing stdout and stderr (stderr through a temp file, so the
// two pipes can never deadlock each other).
ChildResult run_child(const std::vector<std::string> &args) {
    ChildResult r;
    int out_pipe[2];
    if (::pipe(out_pipe) != 0) return r;
    char err_template[] = "/tmp/kjit-bench-stderr-XXXXXX";
    const int err_fd = ::mkstemp(err_template);
    if (err_fd < 0) {
        ::close(out_pipe[0]);
        ::close(out_pipe[1]);
        return r;
    }
    ::unlink(err_template);
    std::vector<char *> argv;
    for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(out_pipe[0]);
        ::close(out_pipe[1]);
        ::close(err_fd);
        return r;
    }
    if (pid == 0) {
        ::dup2(out_pipe[1], STDOUT_FILENO);
        ::dup2(err_fd, STDERR_FILENO);
        ::close(out_pipe[0]);
        ::close(out_pipe[1]);
        ::close(err_fd);
        ::execv(argv[0], argv.data());
        const std::string msg = std::string("cannot run ") + argv[0] + ": " + std::strerror(errno) + "\n";
        const ssize_t ignored = ::write(STDERR_FILENO, msg.data(), msg.size());
        (void)ignored;
        ::_exit(127);
    }
    r.started = true;
    ::close(out_pipe[1]);
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(out_pipe[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        r.out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(out_pipe[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    ::lseek(err_fd, 0, SEEK_SET);
    for (;;) {
        const ssize_t n = ::read(err_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        r.err.append(buf, static_cast<std::size_t>(n));
    }
    ::close(err_fd);
    return r;
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s;
}

// The number after "key": in a flat JSON object (enough for the script's own output).
bool json_number(const std::string &json, const std::string &key, double &out) {
    const std::size_t k = json.find("\"" + key + "\":");
    if (k == std::string::npos) return false;
    const char *p = json.c_str() + k + key.size() + 3;
    char *end = nullptr;
    out = std::strtod(p, &end);
    return end != p;
}

bool json_string(const std::string &json, const std::string &key, std::string &out) {
    const std::size_t k = json.find("\"" + key + "\": \"");
    if (k == std::string::npos) return false;
    const std::size_t start = k + key.size() + 5;
    const std::size_t end = json.find('"', start);
    if (end == std::string::npos) return false;
    out = json.substr(start, end - start);
    return true;
}

Row run_pyelftools(const Options &o, const std::string &expected_name, std::string &version) {
    Row r;
    r.id = "e";
    r.label = "pyelftools lookup (pure Python)";
    auto skip = [&](const std::string &why) {
        r.skipped = true;
        r.reason = why;
        return r;
    };
    if (::access(o.python.c_str(), X_OK) != 0) return skip(o.python + " is not an executable interpreter");
    if (::access(o.script.c_str(), R_OK) != 0) return skip("cannot read " + o.script);
    const ChildResult probe = run_child({o.python, "-c", "import elftools"});
    if (!probe.started) return skip("cannot start " + o.python);
    if (probe.exit_status != 0) {
        std::string why = trim(probe.err);
        const std::size_t nl = why.rfind('\n');
        if (nl != std::string::npos) why = why.substr(nl + 1);
        return skip("elftools is not importable by " + o.python + " (" + why +
                    "; Debian: apt-get install python3-pyelftools)");
    }
    std::printf("pyelftools: %ld timed lookups (+1 warm-up) with %s, about a second each...\n",
                o.pyelftools_repeats, o.python.c_str());
    std::fflush(stdout);
    const ChildResult run =
        run_child({o.python, o.script, o.cubin, o.keyword, std::to_string(o.pyelftools_repeats)});
    if (!run.started || run.exit_status != 0) {
        die("pyelftools lookup failed (exit " + std::to_string(run.exit_status) + "): " + trim(run.err));
    }
    double median = 0, p10 = 0, p90 = 0;
    std::string name;
    if (!json_number(run.out, "median_s", median) || !json_number(run.out, "p10_s", p10) ||
        !json_number(run.out, "p90_s", p90) || !json_string(run.out, "name", name)) {
        die("cannot read the pyelftools script's output: " + trim(run.out));
    }
    if (name != expected_name) {
        die("pyelftools found '" + name + "', libkjit '" + expected_name + "': " + trim(run.out));
    }
    json_string(run.out, "elftools_version", version);
    r.samples = o.pyelftools_repeats;
    r.median_us = median * 1e6;
    r.p10_us = p10 * 1e6;
    r.p90_us = p90 * 1e6;
    return r;
}

// ---- output -------------------------------------------------------------------------------


struct Ratio {
    const char *key;
    const char *text;
    double value;
    double target;
    bool at_most;  // target is an upper bound
    bool available;
    bool met() const { return available && (at_most ? value <= target : value >= target); }
};

void print_number(double us) {
    if (us >= 100000) std::printf(" %12.0f", us);
    else std::printf(" %12.2f", us);
}

}  // namespace

int main(int argc, char **argv) {
    const Options o = parse_args(argc, argv);

    struct stat st {};
    double age = cubin_age_seconds(o.cubin, st);
    const std::string folder = folder_of(o.cubin);
    const std::string sidecar = o.cubin + ".name";

    // Symbol counts, for the header (and a first check that the cubin scans).
    std::size_t function_symbols = 0;
    {
        auto table = kjit::SymbolTable::open_file(o.cubin);
        if (!table) die(table.error().message);
        function_symbols = table->functions().size();
    }

    std::printf("kjit-bench: libkjit %s\n", kjit_version_string());
    std::printf("cubin:      %s (%lld bytes, %zu function symbols, on %s)\n", o.cubin.c_str(),
                static_cast<long long>(st.st_size), function_symbols, filesystem_name(folder).c_str());
    std::printf("keyword:    %s\n", o.keyword.c_str());

    if (age < kSettleAgeSeconds) {
        const double wait = kSettleAgeSeconds - age;
        if (wait > 60) die("the cubin's mtime is " + std::to_string(-age) + " s in the future; touch it and retry");
        std::printf("waiting %.1f s: the cubin was modified %.1f s ago, and libkjit hashes the whole cubin on "
                    "each sidecar hit until it is 2 s old (racy-mtime rule); the hit row measures the steady state\n",
                    wait, std::max(age, 0.0));
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::duration<double>(wait + 0.05));
        age = cubin_age_seconds(o.cubin, st);
    }

    // Settle the sidecar: the first call may scan (or rewrite a racy line); the second is a hit.
    const std::string name = resolve_or_die(o);
    if (resolve_or_die(o) != name) die("two calls gave different names");
    const std::string sidecar_text = read_whole(sidecar);
    if (sidecar_text.empty()) die("no sidecar at '" + sidecar + "' after resolving (is the folder writable?)");
    if (!sidecar_settled(sidecar_text, o.keyword)) {
        die("the sidecar line still carries a content hash; the hit row would not be the steady state:\n" +
            sidecar_text);
    }
    std::printf("name:       %s\n", name.c_str());
    std::printf("sidecar:    %s (%zu bytes)\n\n", sidecar.c_str(), sidecar_text.size());
    std::fflush(stdout);

    std::vector<Row> rows;
    char buf[1024];
    size_t len = 0;
    auto nothing = [] {};
    auto resolve_call = [&] {
        if (kjit_resolve_name(o.cubin.c_str(), o.keyword.c_str(), buf, sizeof buf, &len) != KJIT_OK) {
            die(std::string("kjit_resolve_name failed: ") + kjit_last_error());
        }
    };
    const long warm_fast = std::max(1L, std::min(o.iterations / 10, 2000L));
    const long warm_scan = std::max(1L, std::min(o.scan_iterations / 10, 20L));

    // a) sidecar hit, d) the floor, and d2) the hit's own system calls without its user-space
    // work. The three are timed in alternating blocks, so drift on a busy machine (frequency,
    // noisy neighbours) hits all of them alike.
    const std::string probe = folder + "/kjit-bench-floor-probe.txt";
    write_whole(probe, sidecar_text);
    char probe_buf[4096];
    std::size_t probe_bytes = 0;
    auto floor_call = [&] {  // open + read + close: the least any file-based answer costs
        const int fd = ::open(probe.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) die("cannot open '" + probe + "': " + std::strerror(errno));
        const ssize_t n = ::read(fd, probe_buf, sizeof probe_buf);
        ::close(fd);
        if (n < 0) die("cannot read '" + probe + "': " + std::strerror(errno));
        probe_bytes = static_cast<std::size_t>(n);
    };
    auto syscalls_call = [&] {  // what a hit asks of the kernel: stat the cubin, one read of the sidecar
        struct stat cst {};
        if (::stat(o.cubin.c_str(), &cst) != 0) die("cannot stat '" + o.cubin + "'");
        const int fd = ::open(sidecar.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) die("cannot open '" + sidecar + "': " + std::strerror(errno));
        // One read: a short read is the end of a regular file, and libkjit stops there too.
        if (::read(fd, probe_buf, sizeof probe_buf) < 0) die("cannot read '" + sidecar + "': " + std::strerror(errno));
        ::close(fd);
    };
    std::vector<double> hit_us, floor_us, syscalls_us;
    {
        constexpr long kBlocks = 10;
        time_calls(warm_fast, 0, nothing, resolve_call);
        time_calls(warm_fast, 0, nothing, floor_call);
        time_calls(warm_fast, 0, nothing, syscalls_call);
        for (long b = 0; b < kBlocks; ++b) {
            const long n = o.iterations / kBlocks + (b < o.iterations % kBlocks ? 1 : 0);
            for (double v : time_calls(0, n, nothing, resolve_call)) hit_us.push_back(v);
            for (double v : time_calls(0, n, nothing, floor_call)) floor_us.push_back(v);
            for (double v : time_calls(0, n, nothing, syscalls_call)) syscalls_us.push_back(v);
        }
    }
    ::unlink(probe.c_str());
    if (std::string(buf, len) != name) die("the hit returned '" + std::string(buf, len) + "'");
    if (probe_bytes != sidecar_text.size()) die("the floor probe read a short file");
    rows.push_back(summarize("a", "sidecar hit (kjit_resolve_name)", std::move(hit_us)));
    rows.push_back(summarize("d", "floor: open+read+close, same size", std::move(floor_us)));
    rows.push_back(summarize("d2", "(info) a hit's syscalls alone", std::move(syscalls_us)));

    // c) scan only
    std::string scanned;
    auto scan_call = [&] {
        auto table = kjit::SymbolTable::open_file(o.cubin);
        if (!table) die(table.error().message);
        std::vector<kjit::name_matcher::Candidate> candidates;
        candidates.reserve(table->functions().size());
        for (const kjit::FunctionSymbol &f : table->functions()) candidates.push_back({f.name, f.is_entry});
        auto chosen = kjit::name_matcher::select(candidates, o.keyword);
        if (!chosen) die(chosen.error().message);
        scanned.assign(*chosen);
    };
    rows.push_back(summarize("c", "scan only (SymbolTable + select)", time_calls(warm_scan, o.scan_iterations, nothing, scan_call)));
    if (scanned != name) die("the scan found '" + scanned + "'");

    // b) scan + sidecar rewrite
    auto remove_sidecar = [&] {
        if (::unlink(sidecar.c_str()) != 0 && errno != ENOENT) die("cannot remove '" + sidecar + "': " + std::strerror(errno));
    };
    rows.push_back(summarize("b", "scan + sidecar rewrite (no sidecar)", time_calls(warm_scan, o.scan_iterations, remove_sidecar, resolve_call)));
    if (std::string(buf, len) != name) die("the scan returned '" + std::string(buf, len) + "'");
    if (!sidecar_settled(read_whole(sidecar), o.keyword)) die("the rewritten sidecar is not settled");

    // e) pyelftools
    std::string elftools_version;
    rows.push_back(run_pyelftools(o, name, elftools_version));

    // Order for display: a, b, c, d, d2, e.
    std::sort(rows.begin(), rows.end(), [](const Row &x, const Row &y) { return x.id < y.id; });
    auto find = [&](const char *id) -> const Row & {
        for (const Row &r : rows) {
            if (r.id == id) return r;
        }
        die(std::string("no row ") + id);
    };
    const Row &hit = find("a");
    const Row &scan = find("c");
    const Row &floor_row = find("d");
    const Row &py = find("e");

    std::printf("\n%-40s %12s %12s %12s %12s %9s\n", "row (per call)", "median us", "p10 us", "p90 us", "x hit", "samples");
    for (const Row &r : rows) {
        std::printf("%-40s", (r.id + ") " + r.label).c_str());
        if (r.skipped) {
            std::printf(" skipped: %s\n", r.reason.c_str());
            continue;
        }
        print_number(r.median_us);
        print_number(r.p10_us);
        print_number(r.p90_us);
        std::printf(" %12.1f %9ld\n", r.median_us / hit.median_us, r.samples);
    }

    const Ratio ratios[] = {
        {"hit_over_floor", "sidecar hit / floor", hit.median_us / floor_row.median_us, 1.5, true, true},
        {"pyelftools_over_hit", "pyelftools / sidecar hit", py.median_us / hit.median_us, 30000, false, !py.skipped},
        {"pyelftools_over_scan", "pyelftools / scan only", py.median_us / scan.median_us, 500, false, !py.skipped},
    };
    std::printf("\nkey ratios (medians):\n");
    bool all_met = true;
    for (const Ratio &r : ratios) {
        if (!r.available) {
            std::printf("  %-26s skipped (no pyelftools row)\n", r.text);
            continue;
        }
        all_met = all_met && r.met();
        std::printf("  %-26s %12.2f   target %s %g: %s\n", r.text, r.value, r.at_most ? "<=" : ">=", r.target,
                    r.met() ? "met" : "MISSED");
    }

    if (!o.json.empty()) {
        FILE *f = std::fopen(o.json.c_str(), "w");
        if (!f) die("cannot write '" + o.json + "': " + std::strerror(errno));
        std::fprintf(f, "{\n  \"libkjit_version\": \"%s\",\n", kjit_version_string());
        std::fprintf(f, "  \"cubin\": \"%s\",\n  \"cubin_bytes\": %lld,\n  \"function_symbols\": %zu,\n",
                     json_escape(o.cubin).c_str(), static_cast<long long>(st.st_size), function_symbols);
        std::fprintf(f, "  \"filesystem\": \"%s\",\n", json_escape(filesystem_name(folder)).c_str());
        std::fprintf(f, "  \"keyword\": \"%s\",\n  \"name\": \"%s\",\n  \"sidecar_bytes\": %zu,\n",
                     json_escape(o.keyword).c_str(), json_escape(name).c_str(), sidecar_text.size());
        std::fprintf(f, "  \"elftools_version\": \"%s\",\n", json_escape(elftools_version).c_str());
        std::fprintf(f, "  \"rows\": [\n");
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const Row &r = rows[i];
            std::fprintf(f, "    {\"id\": \"%s\", \"label\": \"%s\", ", r.id.c_str(), json_escape(r.label).c_str());
            if (r.skipped) {
                std::fprintf(f, "\"skipped\": true, \"reason\": \"%s\"}", json_escape(r.reason).c_str());
            } else {
                std::fprintf(f,
                             "\"skipped\": false, \"samples\": %ld, \"median_us\": %.3f, \"p10_us\": %.3f, "
                             "\"p90_us\": %.3f, \"ratio_to_hit\": %.3f}",
                             r.samples, r.median_us, r.p10_us, r.p90_us, r.median_us / hit.median_us);
            }
            std::fprintf(f, "%s\n", i + 1 < rows.size() ? "," : "");
        }
        std::fprintf(f, "  ],\n  \"ratios\": {\n");
        for (std::size_t i = 0; i < sizeof ratios / sizeof ratios[0]; ++i) {
            const Ratio &r = ratios[i];
            if (r.available) {
                std::fprintf(f, "    \"%s\": {\"value\": %.3f, \"target\": %g, \"bound\": \"%s\", \"met\": %s}", r.key,
                             r.value, r.target, r.at_most ? "max" : "min", r.met() ? "true" : "false");
            } else {
                std::fprintf(f, "    \"%s\": null", r.key);
            }
            std::fprintf(f, "%s\n", i + 1 < sizeof ratios / sizeof ratios[0] ? "," : "");
        }
        std::fprintf(f, "  },\n  \"all_targets_met\": %s\n}\n", all_met ? "true" : "false");
        if (std::fclose(f) != 0) die("cannot finish '" + o.json + "'");
        std::printf("\nwrote %s\n", o.json.c_str());
    }
    return 0;
}
