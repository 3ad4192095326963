// Scenario 2: what one kjit_resolve_name costs on the 12,000-symbol cubin, next to what it
// replaces. Rows, each timed per call (steady_clock) after a warm-up:
//   hit          kjit_resolve_name with a settled sidecar next to the cubin, repeated in one
//                thread: proven unchanged by a stat of the cubin and an lstat of the sidecar
//   hit, read    (information) the same hit as a resolver's first in the thread (a
//                NameResolver made untimed before each call): stat of the cubin, then open,
//                fstat, read and close of the sidecar, its line checked
//   scan+write   kjit_resolve_name with the sidecar removed before each call (the unlink is not
//                timed): libelf scan, keyword rule, sidecar publish
//   scan         kjit::cubin::SymbolTable::open_symbols (what kjit_resolve_name reads of a loose
//                cubin: ELF header, section headers, .symtab, its string table) +
//                kjit::cubin::name_matcher::select, no sidecar I/O
//   scan, whole  the same through SymbolTable::open_file, which reads the whole file through
//                libelf (the loader's and a cache entry's scan)
//   memory speed (information) memcpy of as many bytes as open_symbols reads, from memory: how
//                far the scan is from reading its input at memory speed
//   floor        open + read + close of a file as large as the sidecar, in the cubin's folder:
//                what any file-based answer must pay
//   syscalls     (information) the system calls a first hit makes (stat the cubin; open,
//                fstat, one read and close of the sidecar) without its user-space work: hit,
//                read - syscalls is what libkjit's own code costs there
//   repeat syscalls (information) a repeat's: stat of the cubin, lstat of the sidecar
//   pyelftools   the pure-Python lookup libkjit replaces (bench/pyelftools_lookup.py), run as a
//                child process on the same cubin; its own timing of each whole lookup
#include "scenarios.hpp"

#include "progress.hpp"
#include "support.hpp"

#include "cubin/name_matcher.hpp"
#include "cubin/symbol_scanner.hpp"
#include "kjit/kjit.h"
#include "resolve/name_resolver.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <thread>
#include <vector>

namespace kjit_bench {

namespace {

// libkjit's racy window is 2 s (kRacyWindowNs): until the cubin is older than that, a hit also
// hashes the cubin. Wait it out, so the hit row is the steady state.
constexpr double kSettleAgeSeconds = 2.5;

// Runs `body` `warmup` times untimed, then `n` times timed; `before` runs untimed before each
// call. Returns microseconds per call.
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
        us.push_back(time_once(body));
    }
    return us;
}

// stat (or, for a file libkjit opens without following a link, lstat) of `path`.
struct stat stat_or_fail(const std::string &path, bool follow_link) {
    struct stat st {};
    if ((follow_link ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0)
        fail("cannot stat '" + path + "': " + std::strerror(errno));
    return st;
}

// Waits until the file time `t` (the cubin's mtime, the sidecar's ctime: when it was
// published) of `path` is kSettleAgeSeconds old, saying `until` while it waits: before then a
// hit hashes the cubin, or reads the sidecar every time. `which` names the time in the error
// for a time in the future (a clock set back), which is refused rather than waited out.
void wait_until_old(const std::string &path, const char *which, const struct timespec &t, const char *until) {
    struct timespec now {};
    clock_gettime(CLOCK_REALTIME, &now);
    const double age = static_cast<double>(now.tv_sec - t.tv_sec) + static_cast<double>(now.tv_nsec - t.tv_nsec) * 1e-9;
    if (age >= kSettleAgeSeconds) return;
    const double wait = kSettleAgeSeconds - age;
    if (wait > 60) fail(std::string("the ") + which + " of '" + path + "' is in the future; touch it and retry");
    std::fprintf(stderr, "resolve: waiting %.1f s until %s\n", wait, until);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait + 0.05));
}

// The steady-state sidecar line carries no content hash: "<keyword> <size> <mtime> - <name> <check>".
bool sidecar_settled(const std::string &text, const std::string &keyword) {
    std::size_t pos = text.find('\n');
    while (pos != std::string::npos && pos + 1 < text.size()) {
        const std::size_t start = pos + 1;
        const std::size_t end = text.find('\n', start);
        const std::string line = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
        std::vector<std::string> fields;
        std::size_t a = 0;
        for (;;) {
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

std::string resolve_or_fail(const std::string &cubin, const std::string &keyword) {
    char name[1024];
    size_t len = 0;
    const kjit_status s = kjit_resolve_name(cubin.c_str(), keyword.c_str(), name, sizeof name, &len);
    if (s != KJIT_OK) fail_kjit("kjit_resolve_name on '" + cubin + "'", s);
    return std::string(name, len);
}

std::string last_line(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    const std::size_t nl = s.rfind('\n');
    return nl == std::string::npos ? s : s.substr(nl + 1);
}

// The pyelftools child. Its script prints one JSON line with its own timings.
Row run_pyelftools(const BenchOptions &o, const std::string &expected, Report &report) {
    const char *id = "resolve.pyelftools";
    const char *label = "pyelftools loop over .symtab (pure Python, child process)";
    if (::access(o.python.c_str(), X_OK) != 0)
        return skipped_row(id, label, o.python + " is not an executable interpreter");
    if (::access(o.pyelftools_script.c_str(), R_OK) != 0)
        return skipped_row(id, label, "cannot read " + o.pyelftools_script);
    const ChildResult probe = run_child({o.python, "-c", "import elftools"});
    if (!probe.started) return skipped_row(id, label, "cannot start " + o.python + ": " + probe.err);
    if (probe.exit_status != 0) {
        return skipped_row(id, label,
                           "elftools is not importable by " + o.python + " (" + last_line(probe.err) +
                               "; Debian: apt-get install python3-pyelftools)");
    }
    Progress progress("resolve: " + std::to_string(o.pyelftools_repeats + 1) +
                          " pyelftools lookups (1 untimed) in a child process, about a second each",
                      1, "runs");
    const ChildResult run =
        run_child({o.python, o.pyelftools_script, o.cubin, o.keyword, std::to_string(o.pyelftools_repeats)});
    progress.tick();
    progress.finish();
    if (!run.started || run.exit_status != 0) {
        fail("the pyelftools lookup failed (exit " + std::to_string(run.exit_status) + "): " + last_line(run.err));
    }
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(run.out);
    } catch (const nlohmann::json::exception &e) {
        fail(std::string("cannot read the pyelftools script's output (") + e.what() + "): " + run.out);
    }
    const std::string name = json_string(j, "name", "");
    if (name != expected) fail("pyelftools found '" + name + "', libkjit '" + expected + "': " + run.out);
    report.meta["pyelftools"] = {{"elftools_version", json_string(j, "elftools_version", "unknown")},
                                 {"python", json_string(j, "python", "unknown")},
                                 {"symbols", json_number(j, "symbols", 0)}};
    Row r;
    r.id = id;
    r.label = label;
    r.samples = o.pyelftools_repeats;
    r.median_us = json_number(j, "median_s", std::nan("")) * 1e6;
    r.p10_us = json_number(j, "p10_s", std::nan("")) * 1e6;
    r.p90_us = json_number(j, "p90_s", std::nan("")) * 1e6;
    return r;
}

}  // namespace

namespace {

// How many bytes SymbolTable::open_symbols reads of `cubin`: its section headers, .symtab and
// the string table that links to (the ELF header aside).
std::size_t symbol_parts_bytes(const std::string &cubin) {
    const std::string image = read_file(cubin);
    Elf64_Ehdr ehdr;
    if (image.size() < sizeof ehdr) fail("'" + cubin + "' is too short for an ELF header");
    std::memcpy(&ehdr, image.data(), sizeof ehdr);
    std::size_t bytes = std::size_t{ehdr.e_shnum} * sizeof(Elf64_Shdr);
    for (std::size_t i = 0; i < ehdr.e_shnum; ++i) {
        Elf64_Shdr sh;
        std::memcpy(&sh, image.data() + ehdr.e_shoff + i * sizeof sh, sizeof sh);
        if (sh.sh_type != SHT_SYMTAB) continue;
        Elf64_Shdr strs;
        std::memcpy(&strs, image.data() + ehdr.e_shoff + std::size_t{sh.sh_link} * sizeof strs, sizeof strs);
        return bytes + sh.sh_size + strs.sh_size;
    }
    fail("'" + cubin + "' has no .symtab");
}

}  // namespace

void run_resolve(const BenchOptions &o, Report &report) {
    struct stat st = stat_or_fail(o.cubin, true);
    const std::string folder = folder_of(o.cubin);
    const std::string sidecar = o.cubin + ".name";

    std::size_t function_symbols = 0;
    {
        auto table = kjit::cubin::SymbolTable::open_file(o.cubin);
        if (!table) fail(table.error().message);
        function_symbols = table->functions().size();
    }
    wait_until_old(o.cubin, "mtime", st.st_mtim, "the cubin is 2 s old, so hits are the steady state");
    st = stat_or_fail(o.cubin, true);

    // Settle the sidecar: the first call may scan (or rewrite a racy line); the second is a hit.
    const std::string name = resolve_or_fail(o.cubin, o.keyword);
    if (resolve_or_fail(o.cubin, o.keyword) != name) fail("two calls on '" + o.cubin + "' gave different names");
    const std::string sidecar_text = read_file(sidecar);
    if (sidecar_text.empty()) fail("no sidecar at '" + sidecar + "' after resolving (is the folder writable?)");
    if (!sidecar_settled(sidecar_text, o.keyword))
        fail("the sidecar line still carries a content hash:\n" + sidecar_text);
    wait_until_old(sidecar, "ctime", stat_or_fail(sidecar, false).st_ctim,
                   "the sidecar is 2 s old, so repeats are the steady state");
    report.meta["resolve"] = {{"cubin", o.cubin},
                              {"cubin_bytes", static_cast<long long>(st.st_size)},
                              {"function_symbols", function_symbols},
                              {"keyword", o.keyword},
                              {"name", name},
                              {"sidecar_bytes", sidecar_text.size()},
                              {"filesystem", filesystem_name(folder)}};

    char buf[1024];
    size_t len = 0;
    auto nothing = [] {};
    auto resolve_call = [&] {
        const kjit_status s = kjit_resolve_name(o.cubin.c_str(), o.keyword.c_str(), buf, sizeof buf, &len);
        if (s != KJIT_OK) fail_kjit("kjit_resolve_name", s);
    };
    const long warm_fast = std::max(1L, std::min(o.iterations / 10, 2000L));
    const long warm_scan = std::max(1L, std::min(o.scan_iterations / 10, 20L));

    // hit, floor and syscalls in alternating blocks, so drift on a busy machine (frequency,
    // noisy neighbours) hits all three alike.
    const std::string probe = folder + "/kjit-bench-floor-probe.txt";
    write_file(probe, sidecar_text);
    char probe_buf[4096];
    std::size_t probe_bytes = 0;
    auto floor_call = [&] {
        const int fd = ::open(probe.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail("cannot open '" + probe + "': " + std::strerror(errno));
        const ssize_t n = ::read(fd, probe_buf, sizeof probe_buf);
        ::close(fd);
        if (n < 0) fail("cannot read '" + probe + "': " + std::strerror(errno));
        probe_bytes = static_cast<std::size_t>(n);
    };
    auto syscalls_call = [&] {
        struct stat cst {};
        if (::stat(o.cubin.c_str(), &cst) != 0) fail("cannot stat '" + o.cubin + "'");
        const int fd = ::open(sidecar.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) fail("cannot open '" + sidecar + "': " + std::strerror(errno));
        if (::fstat(fd, &cst) != 0) fail("cannot stat '" + sidecar + "'");
        if (::read(fd, probe_buf, sizeof probe_buf) < 0) fail("cannot read '" + sidecar + "': " + std::strerror(errno));
        ::close(fd);
    };
    auto repeat_syscalls_call = [&] {
        struct stat cst {};
        if (::stat(o.cubin.c_str(), &cst) != 0) fail("cannot stat '" + o.cubin + "'");
        if (::lstat(sidecar.c_str(), &cst) != 0) fail("cannot stat '" + sidecar + "'");
    };
    // A first hit: a resolver that has read nothing in this thread, made before each call.
    std::unique_ptr<kjit::resolve::NameResolver> fresh;
    std::string read_name;
    auto new_resolver = [&] {
        fresh.reset();
        fresh = std::make_unique<kjit::resolve::NameResolver>();
    };
    auto read_hit_call = [&] {
        auto resolved = fresh->resolve(o.cubin, o.keyword);
        if (!resolved) fail(resolved.error().message);
        read_name = std::move(*resolved);
    };
    std::vector<double> hit_us, read_us, floor_us, syscalls_us, repeat_syscalls_us;
    {
        constexpr long kBlocks = 10;
        Progress progress("resolve: sidecar hits, floor and syscalls", kBlocks, "blocks");
        time_calls(warm_fast, 0, nothing, resolve_call);
        time_calls(warm_fast, 0, new_resolver, read_hit_call);
        time_calls(warm_fast, 0, nothing, floor_call);
        time_calls(warm_fast, 0, nothing, syscalls_call);
        time_calls(warm_fast, 0, nothing, repeat_syscalls_call);
        for (long b = 0; b < kBlocks; ++b) {
            const long n = o.iterations / kBlocks + (b < o.iterations % kBlocks ? 1 : 0);
            for (double v : time_calls(0, n, nothing, resolve_call)) hit_us.push_back(v);
            for (double v : time_calls(0, n, new_resolver, read_hit_call)) read_us.push_back(v);
            for (double v : time_calls(0, n, nothing, floor_call)) floor_us.push_back(v);
            for (double v : time_calls(0, n, nothing, syscalls_call)) syscalls_us.push_back(v);
            for (double v : time_calls(0, n, nothing, repeat_syscalls_call)) repeat_syscalls_us.push_back(v);
            progress.tick();
        }
    }
    if (read_name != name) fail("a first hit returned '" + read_name + "'");
    if (fresh->counters().sidecar_hits != 1 || fresh->counters().settled_repeats != 0)
        fail("the first-hit row did not read the sidecar");
    ::unlink(probe.c_str());
    if (std::string(buf, len) != name) fail("a hit returned '" + std::string(buf, len) + "'");
    if (probe_bytes != sidecar_text.size()) fail("the floor probe read a short file");

    std::string scanned;
    bool whole = false;
    auto scan_call = [&] {
        auto table =
            whole ? kjit::cubin::SymbolTable::open_file(o.cubin) : kjit::cubin::SymbolTable::open_symbols(o.cubin);
        if (!table) fail(table.error().message);
        std::vector<kjit::cubin::name_matcher::Candidate> candidates;
        candidates.reserve(table->functions().size());
        for (const kjit::cubin::FunctionSymbol &f : table->functions()) candidates.push_back({f.name, f.is_entry});
        auto chosen = kjit::cubin::name_matcher::select(candidates, o.keyword);
        if (!chosen) fail(chosen.error().message);
        scanned.assign(*chosen);
    };
    auto remove_sidecar = [&] {
        if (::unlink(sidecar.c_str()) != 0 && errno != ENOENT)
            fail("cannot remove '" + sidecar + "': " + std::strerror(errno));
    };
    std::vector<double> scan_us, whole_us, memcpy_us, rewrite_us;
    const std::size_t read_bytes = symbol_parts_bytes(o.cubin);
    {
        Progress progress("resolve: scans", 3 * (o.scan_iterations + warm_scan), "scans");
        scan_us = time_calls(
            warm_scan, o.scan_iterations, [&] { progress.tick(); }, scan_call);
        if (scanned != name) fail("the scan found '" + scanned + "'");
        whole = true;
        whole_us = time_calls(
            warm_scan, o.scan_iterations, [&] { progress.tick(); }, scan_call);
        if (scanned != name) fail("the whole scan found '" + scanned + "'");
        std::vector<char> from(read_bytes, 1), to(read_bytes);
        memcpy_us = time_calls(
            warm_scan, o.scan_iterations, [] {},
            [&] {
                std::memcpy(to.data(), from.data(), read_bytes);
                from[0] = to[read_bytes / 2];  // the copy is used
            });
        rewrite_us = time_calls(
            warm_scan, o.scan_iterations,
            [&] {
                remove_sidecar();
                progress.tick();
            },
            resolve_call);
        if (std::string(buf, len) != name) fail("a scan returned '" + std::string(buf, len) + "'");
        if (!sidecar_settled(read_file(sidecar), o.keyword)) fail("the rewritten sidecar is not settled");
    }

    Section &s =
        report.section("resolve", "resolve: one kernel name in a " + std::to_string(function_symbols) +
                                      "-function cubin (" + std::to_string(st.st_size / 1024) + " KiB), per lookup");
    s.rows.push_back(summarize("resolve.hit", "sidecar hit, repeated (kjit_resolve_name)", std::move(hit_us)));
    s.rows.push_back(summarize("resolve.hit_read", "(info) sidecar hit, a resolver's first in the thread (reads it)",
                               std::move(read_us)));
    s.rows.push_back(
        summarize("resolve.floor", "floor: open+read+close of a file of the sidecar's size", std::move(floor_us)));
    s.rows.push_back(summarize("resolve.syscalls", "(info) a first hit's system calls (stat+open+fstat+read+close)",
                               std::move(syscalls_us)));
    s.rows.push_back(summarize("resolve.repeat_syscalls", "(info) a repeat's system calls (stat+lstat)",
                               std::move(repeat_syscalls_us)));
    s.rows.push_back(
        summarize("resolve.scan", "scan only (section headers, .symtab, names + keyword rule)", std::move(scan_us)));
    s.rows.push_back(summarize("resolve.scan_whole", "(info) scan of the whole file through libelf (open_file)",
                               std::move(whole_us)));
    s.rows.push_back(summarize("resolve.memory_speed",
                               "(info) memcpy of the " + std::to_string(read_bytes / 1024) + " KiB the scan reads",
                               std::move(memcpy_us)));
    s.rows.push_back(summarize("resolve.scan_rewrite", "no sidecar: scan + sidecar publish (kjit_resolve_name)",
                               std::move(rewrite_us)));
    s.rows.push_back(run_pyelftools(o, name, report));

    const Row &hit = *s.find("resolve.hit");
    const Row &floor_row = *s.find("resolve.floor");
    const Row &scan = *s.find("resolve.scan");
    const Row &py = *s.find("resolve.pyelftools");
    const Row &read_hit = *s.find("resolve.hit_read");
    const Row &syscalls = *s.find("resolve.syscalls");
    const Row &repeat_syscalls = *s.find("resolve.repeat_syscalls");
    char note[512];
    std::snprintf(note, sizeof note,
                  "repeat: %s of libkjit code beside its system calls, which are %.2fx the floor; first hit in a "
                  "thread: %.2fx the floor, %s of code, its system calls %.2fx the floor",
                  format_us(hit.median_us - repeat_syscalls.median_us).c_str(),
                  repeat_syscalls.median_us / floor_row.median_us, read_hit.median_us / floor_row.median_us,
                  format_us(read_hit.median_us - syscalls.median_us).c_str(), syscalls.median_us / floor_row.median_us);
    s.notes.push_back(note);
    std::snprintf(note, sizeof note, "scan / memcpy of the bytes it reads: %.1fx; whole-file scan / scan: %.2fx",
                  scan.median_us / s.find("resolve.memory_speed")->median_us,
                  s.find("resolve.scan_whole")->median_us / scan.median_us);
    s.notes.push_back(note);

    Target over_py{"pyelftools_over_hit", "sidecar hit vs the pyelftools loop (pyelftools / hit)", 30000};
    Target over_floor{"hit_over_floor", "sidecar hit vs the open+read+close floor (hit / floor)", 1.5, true};
    Target scan_py{"pyelftools_over_scan", "scan vs the pyelftools loop (pyelftools / scan)", 500};
    over_floor.value = hit.median_us / floor_row.median_us;
    for (Target *t : {&over_py, &scan_py}) {
        t->available = !py.skipped;
        t->why_unavailable = py.reason;
    }
    over_py.value = py.median_us / hit.median_us;
    scan_py.value = py.median_us / scan.median_us;
    report.add_target(over_py);
    report.add_target(over_floor);
    report.add_target(scan_py);
}

}  // namespace kjit_bench
