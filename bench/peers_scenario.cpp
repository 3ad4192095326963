// Scenario "peers": hits as a kernel library's code asks for them ("a loadable cubin and its
// kernel's name"), this libkjit against an earlier one (the commit bench/run.sh builds as
// --before-lib: 0.7.0, before issue 35's work on repeats), in one run, each in fresh processes chosen by
// LD_LIBRARY_PATH as in the trust scenario (libkjit.so.0 keeps its ABI):
//   - C, a small kernel and a CUB kernel: a process's first call (one-time set-up: NVRTC's
//     identity, the trust checks, the header watch), the kernel's first hit in that warm
//     process, and a repeat (mean over --peers-repeats);
//   - the same through each build's own Python module (python/);
//   - a fresh process that gets the 300 sweep kernels (--kernels) ready (path and name of
//     each), C and Python, from the start of main() or of the script (the import of kjit
//     included).
//   - beside them, jitify2's in-memory layer (NVIDIA/jitify, branch jitify2) on the same request,
//     small and CUB: a repeat of jitify2::ProgramCache::get_program with its lowered name, and of
//     get_kernel (bench/peers_jitify2_child.cpp, built only where jitify2.hpp was given: else
//     its rows say not run), against this libkjit's C repeat in the same rounds;
//   - this libkjit's prepared repeat (kjit_prepare once, then kjit_prepared_compile), small and
//     CUB, beside the floor of proving a repeat (a read() of an empty inotify descriptor), with
//     its ratio to jitify2's get_program.
// Each build uses the best call it has: kjit_compile_named (kjit.compile_named) where it
// exists, else kjit_compile + kjit_resolve_name. The caches are filled first (untimed), one
// per build. Rounds alternate the builds; each row is the median over rounds.
//
// The children: kjit-peers-child (bench/peers_child.cpp, which links libkjit.so alone) and
// bench/peers_python.py, each given MODE small | cub | sweep and the requests as JSON; they
// print "<metric> <value>" lines, said there.
#include "scenarios.hpp"

#include "cub_kernels.hpp"
#include "progress.hpp"
#include "support.hpp"
#include "sweep_kernels.hpp"

#include <nlohmann/json.hpp>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kjit_bench {

namespace {

const char *const kSmallKeyword = "peers_scale";

std::string small_source() {
    return "__global__ void peers_scale(float *p, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x) "
           "p[i] = p[i] * 2.0f + 1.0f; }\n";
}

// One request of the scenario: source, keyword, NVRTC options; for the measured kernels, the
// C++ name expression jitify2 is asked for (it takes no keyword).
struct Kernel {
    std::string source, keyword;
    std::vector<std::string> options;
    std::string expression;
};

// MODE small and cub: the measured kernel, then another of its kind (the child's first call, so
// that the measured kernel's first hit is that of a warm process); sweep: the sweep's first
// `sweep_kernels` kernels (--kernels, 300).
std::vector<Kernel> kernels_for(const std::string &mode, int sweep_kernels) {
    if (mode == "small") {
        return {{small_source(), kSmallKeyword, {}, kSmallKeyword},
                {"__global__ void peers_scale(float *p) { p[threadIdx.x] += 1.0f; }\n", kSmallKeyword, {}, ""}};
    }
    if (mode == "cub") {
        const std::vector<CubConfig> configs = cub_configs(2);
        const CubConfig &c = configs[0];
        const std::string expression = std::string(kCubKeyword) + "<" + c.type + ", " + std::to_string(c.block) + ", " +
                                       std::to_string(c.items) + ", cub::" + c.algorithm + ">";
        return {{cub_source(c), kCubKeyword, cub_nvrtc_options(), expression},
                {cub_source(configs[1]), kCubKeyword, cub_nvrtc_options(), ""}};
    }
    std::vector<Kernel> all;
    for (const GemmConfig &c : sweep_configs(sweep_kernels)) all.push_back({sweep_source(c), kSweepKeyword, {}, ""});
    return all;
}

// jitify2's side (bench/peers_jitify2_child.cpp): its child, and the LD_LIBRARY_PATH folder where
// libcuda.so (the name jitify2 opens) leads to $KJIT_LIBCUDA, the driver libkjit is given (the
// test double without a GPU); empty where none is given (the system's libcuda.so serves).
struct Jitify2 {
    std::string child;
    std::string why_not;  // not empty: not run, and why
    std::string driver_dir;
    std::map<std::string, std::vector<double>> us;  // "<mode>.repeat" / "<mode>.repeat_kernel" -> per round
};

Jitify2 jitify2_side(const std::string &bench_dir, const std::string &work_dir) {
    Jitify2 j;
#ifdef KJIT_BENCH_JITIFY2
    j.child = bench_dir + "/kjit-peers-jitify2-child";
    if (const char *libcuda = std::getenv("KJIT_LIBCUDA"); libcuda && *libcuda) {
        j.driver_dir = work_dir + "/jitify2-driver";
        ::mkdir(j.driver_dir.c_str(), 0755);
        const std::string link = j.driver_dir + "/libcuda.so";
        ::unlink(link.c_str());
        if (::symlink(libcuda, link.c_str()) != 0) j.why_not = "not run: cannot link " + link + " to $KJIT_LIBCUDA";
    }
#else
    (void)bench_dir;
    (void)work_dir;
    j.why_not = "not run: jitify2.hpp not found (configure with -DKJIT_BENCH_JITIFY2_DIR=FOLDER; bench/run.sh "
                "extracts it from $KJIT_BENCH_SOURCES, which scripts/get_bench_sources.sh DIR fills)";
#endif
    return j;
}

// jitify2's rows (or why not run), its ratio to this libkjit's C repeat, and issue 35's target: a
// C repeat proven unchanged costs no more than jitify2's in-memory repeat.
void add_jitify2_rows(Section &s, Report &report, const Jitify2 &jitify2,
                      const std::map<std::string, std::vector<double>> &now_us) {
    const std::vector<std::pair<std::string, std::string>> metrics = {
        {"repeat", "repeat of get_program + its lowered name"}, {"repeat_kernel", "repeat of get_kernel"}};
    for (const char *mode : {"small", "cub"}) {
        const std::string m = mode;
        for (const auto &[metric, label] : metrics) {
            const std::string id = "peers.jitify2." + m + "." + metric;
            const std::string text = "jitify2 in memory, " + m + " kernel: " + label;
            const auto it = jitify2.us.find(m + "." + metric);
            if (!jitify2.why_not.empty() || it == jitify2.us.end()) {
                Row skipped;
                skipped.id = id;
                skipped.label = text;
                skipped.skipped = true;
                skipped.reason = jitify2.why_not.empty() ? "not run" : jitify2.why_not;
                s.rows.push_back(skipped);
                continue;
            }
            s.rows.push_back(summarize(id, text, it->second));
        }
        Target target{"peers_c_" + m + "_repeat_over_jitify2",
                      "C, " + m + " kernel, path and name, repeat: kjit / jitify2's in-memory get_program", 1.0, true};
        const auto theirs = jitify2.us.find(m + ".repeat");
        const auto ours = now_us.find("c." + m + ".repeat");
        if (!jitify2.why_not.empty() || theirs == jitify2.us.end() || ours == now_us.end()) {
            target.available = false;
            target.why_unavailable = jitify2.why_not.empty() ? "not run" : jitify2.why_not;
        } else {
            target.value = median(ours->second) / median(theirs->second);
            char note[256];
            std::snprintf(note, sizeof note, "c.%s.repeat: kjit / jitify2 get_program = %.3fx (%s vs %s)", mode,
                          target.value, format_us(median(ours->second)).c_str(),
                          format_us(median(theirs->second)).c_str());
            s.notes.push_back(note);
        }
        report.add_target(target);
    }
}

// This libkjit's prepared requests (kjit_prepare, 0.14) beside its plain repeat, jitify2's
// get_program and the floor (a read() of an empty inotify descriptor: what proving a repeat
// costs at the least), and issue 51's target: a prepared repeat proven unchanged costs no more
// than jitify2's in-memory repeat, which proves nothing.
void add_prepared_rows(Section &s, Report &report, const Jitify2 &jitify2,
                       const std::map<std::string, std::vector<double>> &now_us) {
    for (const char *mode : {"small", "cub"}) {
        const std::string m = mode;
        const auto prepared = now_us.find("c." + m + ".prepared_repeat");
        const auto floor = now_us.find("c." + m + ".floor");
        const auto plain = now_us.find("c." + m + ".repeat");
        if (prepared == now_us.end() || floor == now_us.end() || plain == now_us.end()) continue;
        s.rows.push_back(summarize("peers.c." + m + ".prepared_repeat",
                                   "C, " + m + " kernel: prepared repeat (kjit_prepared_compile)", prepared->second));
        s.rows.push_back(summarize("peers.c." + m + ".floor",
                                   "C, " + m + " kernel's process: floor, read() of an empty inotify descriptor",
                                   floor->second));
        char note[256];
        std::snprintf(note, sizeof note,
                      "c.%s.prepared_repeat: %s = %.3fx the plain repeat (%s), %.2fx the floor (%s; %s above it)", mode,
                      format_us(median(prepared->second)).c_str(), median(prepared->second) / median(plain->second),
                      format_us(median(plain->second)).c_str(), median(prepared->second) / median(floor->second),
                      format_us(median(floor->second)).c_str(),
                      format_us(median(prepared->second) - median(floor->second)).c_str());
        s.notes.push_back(note);
        Target target{"peers_c_" + m + "_prepared_over_jitify2",
                      "C, " + m + " kernel, prepared repeat: kjit / jitify2's in-memory get_program", 1.0, true};
        const auto theirs = jitify2.us.find(m + ".repeat");
        if (!jitify2.why_not.empty() || theirs == jitify2.us.end()) {
            target.available = false;
            target.why_unavailable = jitify2.why_not.empty() ? "not run" : jitify2.why_not;
        } else {
            target.value = median(prepared->second) / median(theirs->second);
        }
        report.add_target(target);
    }
}

}  // namespace

// kjit/ of `python_dir` copied into `into` and byte-compiled, as a wheel installs it: a child
// importing the source tree where PYTHONDONTWRITEBYTECODE is set (as on this project's machines)
// compiled the package on every start, ~15 ms of the sweep's "ready" that no installed package pays.
std::string installed_python(const std::string &python, const std::string &python_dir, const std::string &into) {
    std::error_code ec;
    std::filesystem::create_directories(into, ec);
    std::filesystem::copy(python_dir + "/kjit", into + "/kjit",
                          std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing,
                          ec);
    if (ec) fail("peers: cannot copy " + python_dir + "/kjit to " + into + ": " + ec.message());
    const ChildResult r = run_child({python, "-m", "compileall", "-q", into + "/kjit"});
    if (!r.started || r.exit_status != 0) fail("peers: cannot byte-compile " + into + "/kjit: " + r.err + r.out);
    return into;
}

void run_peers(const BenchOptions &o, Report &report) {
    const std::string self = self_executable();
    struct Build {
        std::string label, lib_dir, python_dir, cache;
        std::map<std::string, std::vector<double>> us;  // "<lang>.<mode>.<metric>" -> per round
        std::map<std::string, std::string> facts;       // "<lang>.<mode>.api" / ".nvrtc"
    };
    TempDir caches(o.work_dir, "peers-");
    // Every kernel of the scenario for the children, with their NVRTC options; kept in the work
    // folder, to run a child by hand (bench/peers_child.cpp says how).
    const std::string requests = o.work_dir + "/requests-peers.json";
    {
        nlohmann::json j;
        for (const char *mode : {"small", "cub", "sweep"}) {
            for (const Kernel &k : kernels_for(mode, o.kernels)) {
                nlohmann::json r = {{"source", k.source}, {"keyword", k.keyword}, {"nvrtc_options", k.options}};
                if (!k.expression.empty()) r["name_expression"] = k.expression;
                j[mode].push_back(r);
            }
        }
        std::ofstream(requests) << j.dump();
    }
    std::vector<Build> builds;
    builds.push_back({"now",
                      "",
                      installed_python(o.python, o.python_module_dir, caches.path() + "/python-now"),
                      caches.path() + "/now",
                      {},
                      {}});
    if (!o.before_lib.empty()) {
        builds.push_back({"before",
                          o.before_lib,
                          installed_python(o.python, o.before_python_dir, caches.path() + "/python-before"),
                          caches.path() + "/before",
                          {},
                          {}});
    }
    LibraryPathSwitch library;
    const std::string script = o.peers_script;
    const std::string child = self.substr(0, self.rfind('/')) + "/kjit-peers-child";
    const std::string lib_name = "libkjit.so.0";
    auto run = [&](Build &b, const std::string &lang, const std::string &mode, bool record) {
        library.use(b.lib_dir);
        const std::string repeats = std::to_string(lang == "c" ? o.peers_repeats : o.peers_repeats / 4);
        const std::string lib =
            (b.lib_dir.empty() ? self.substr(0, self.rfind('/')) + "/../src" : b.lib_dir) + "/" + lib_name;
        const ChildResult r =
            lang == "c" ? run_child({child, mode, b.cache, o.arch, repeats, requests})
                        : run_child({o.python, script, b.python_dir, lib, b.cache, o.arch, mode, repeats, requests});
        if (!r.started || r.exit_status != 0) {
            fail("the peers child (" + b.label + ", " + lang + ", " + mode + ") failed, exit " +
                 std::to_string(r.exit_status) + ": " + r.err + r.out);
        }
        if (!record) return;
        std::istringstream lines(r.out);
        std::string metric, value;
        while (lines >> metric >> value) {
            const std::string key = lang + "." + mode + "." + metric;
            if (metric == "api" || metric == "nvrtc") b.facts[key] = value;
            else b.us[key].push_back(std::stod(value));
        }
    };
    Jitify2 jitify2 = jitify2_side(self.substr(0, self.rfind('/')), o.work_dir);
    // One jitify2 child: its repeats recorded, or, when it fails, its rows say why (the peers
    // rows of this libkjit do not depend on it).
    auto run_jitify2 = [&](const std::string &mode) {
        if (!jitify2.why_not.empty()) return;
        library.use(jitify2.driver_dir);
        const ChildResult r = run_child({jitify2.child, mode, o.arch, std::to_string(o.peers_repeats), requests});
        if (!r.started || r.exit_status != 0) {
            const std::string err = r.err.empty() ? r.out : r.err;
            jitify2.why_not = "not run: the jitify2 child failed (" + mode + ", exit " + std::to_string(r.exit_status) +
                              "): " + err.substr(0, err.find('\n'));
            return;
        }
        std::istringstream lines(r.out);
        std::string metric, value;
        while (lines >> metric >> value) {
            if (metric == "repeat" || metric == "repeat_kernel")
                jitify2.us[mode + "." + metric].push_back(std::stod(value));
        }
    };
    const std::vector<std::string> langs = {"c", "python"};
    const std::vector<std::string> modes = {"small", "cub", "sweep"};
    {
        Progress fill("peers: filling a cache per build (untimed)", static_cast<long>(builds.size() * modes.size()),
                      "caches");
        for (Build &b : builds) {
            for (const std::string &mode : modes) {
                run(b, "c", mode, false);  // compiles; this libkjit also leaves its NVRTC record
                fill.tick();
            }
        }
    }
    {
        Progress progress("peers: hits in fresh processes, C and Python, each build",
                          o.peers_rounds * static_cast<long>(builds.size() * langs.size() * modes.size()), "processes");
        for (int round = 0; round < o.peers_rounds; ++round) {
            for (std::size_t k = 0; k < builds.size(); ++k) {
                Build &b = builds[(k + static_cast<std::size_t>(round)) % builds.size()];
                for (const std::string &lang : langs) {
                    for (const std::string &mode : modes) {
                        run(b, lang, mode, true);
                        progress.tick();
                    }
                }
            }
            for (const char *mode : {"small", "cub"}) run_jitify2(mode);
        }
    }
    library.use("");

    Section &s = report.section("peers", "hits as kernel libraries ask for them (path and name), in fresh processes: "
                                         "this libkjit against an earlier one (--before-lib), in the same run");
    const std::vector<std::pair<std::string, std::string>> metrics = {
        {"c.small.process_first", "C, small kernel: a process's first call"},
        {"c.small.kernel_first", "C, small kernel: its first hit in a warm process"},
        {"c.small.repeat", "C, small kernel: repeat"},
        {"c.cub.process_first", "C, CUB kernel: a process's first call"},
        {"c.cub.kernel_first", "C, CUB kernel: its first hit in a warm process"},
        {"c.cub.repeat", "C, CUB kernel: repeat"},
        {"python.small.process_first", "Python, small kernel: a process's first call"},
        {"python.small.kernel_first", "Python, small kernel: its first hit in a warm process"},
        {"python.small.repeat", "Python, small kernel: repeat"},
        {"python.cub.process_first", "Python, CUB kernel: a process's first call"},
        {"python.cub.kernel_first", "Python, CUB kernel: its first hit in a warm process"},
        {"python.cub.repeat", "Python, CUB kernel: repeat"},
        {"c.sweep.ready", "C, fresh process: " + std::to_string(o.kernels) + " kernels ready (from main)"},
        {"python.sweep.ready",
         "Python, fresh process: " + std::to_string(o.kernels) + " kernels ready (from before import kjit)"}};
    auto med = [&](const Build &b, const std::string &m) { return b.us.count(m) ? median(b.us.at(m)) : 0.0; };
    for (const auto &[metric, label] : metrics) {
        for (const Build &b : builds) {
            const std::string mode_key = metric.substr(0, metric.rfind('.'));
            const auto api = b.facts.find(mode_key + ".api");
            const auto nvrtc = b.facts.find(mode_key + ".nvrtc");
            const std::string how =
                (api == b.facts.end()     ? ""
                 : api->second == "named" ? "one call"
                                          : "two calls") +
                std::string(nvrtc != b.facts.end() && nvrtc->second == "mapped" ? ", NVRTC loaded" : ", no NVRTC");
            s.rows.push_back(summarize("peers." + metric + "." + b.label, label + " [" + b.label + ": " + how + "]",
                                       b.us.at(metric)));
        }
        if (builds.size() > 1) {
            char note[256];
            std::snprintf(note, sizeof note, "%s: now / before = %.3fx (%s vs %s)", metric.c_str(),
                          med(builds[0], metric) / med(builds[1], metric), format_us(med(builds[0], metric)).c_str(),
                          format_us(med(builds[1], metric)).c_str());
            s.notes.push_back(note);
        }
    }
    add_jitify2_rows(s, report, jitify2, builds[0].us);
    add_prepared_rows(s, report, jitify2, builds[0].us);
    if (builds.size() == 1) {
        s.notes.push_back(
            "no 'before' build: bench/run.sh builds it from git history (none here), or pass --before-lib");
    }
    const Build &now = builds[0];
    for (const char *mode : {"small", "cub"}) {
        const std::string m = mode;
        // (Issue 24's goal for a kernel's first hit, a third of the code before it, was against
        // that code; the baseline is 0.7.0 now, so it is no longer reported.)
        Target repeat{"peers_c_" + m + "_repeat_us", "C, " + m + " kernel, path and name, repeat (us)", 1.0, true,
                      TargetUnit::microseconds};
        repeat.value = med(now, "c." + m + ".repeat");
        report.add_target(repeat);
        Target python{"peers_python_" + m + "_over_c_us",
                      "Python over C, " + m + " kernel, path and name, repeat (us more)", 3.0, true,
                      TargetUnit::microseconds};
        python.value = med(now, "python." + m + ".repeat") - med(now, "c." + m + ".repeat");
        report.add_target(python);
        // Issue 51 item 2: a request new to a warm process costs Python at most half again C's.
        Target first{"peers_python_" + m + "_first_over_c",
                     "Python over C, " + m + " kernel, its first hit in a warm process (Python / C)", 1.5, true};
        first.value = med(now, "python." + m + ".kernel_first") / med(now, "c." + m + ".kernel_first");
        report.add_target(first);
    }
}

}  // namespace kjit_bench
