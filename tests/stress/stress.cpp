// Concurrency stress: P processes x T threads compile (one by one and in small batches of
// kjit_compile_batch with duplicates, PCH on or off), resolve, load (through the driver test
// double) and replace cubins (in cache entries, with a new copy of the same kernel; in a folder
// of loose cubins, with other kernels'; in a third folder, rewritten in place as `cp` does,
// where a reader may get an error naming the file but never a signal or a wrong name) on one
// shared cache, at random, for a bounded time. A worker of each process also forks now and
// then (--forks): the child, forked while the other threads are inside libkjit, compiles,
// resolves and loads a few kernels and exits, and the worker checks that it exited 0 within a
// deadline (a child that hangs on state copied from its parent is killed and counted as a
// failure). Then the parent checks the result independently of libkjit's own paths:
// every name any thread got was the right one, every cache entry is complete with a sidecar that
// agrees with a fresh scan of its cubin, every sidecar is well-formed, and no temp file is left.
//
//   kjit_stress [--processes 4] [--threads 4] [--seconds 5] [--kernels 12] [--loose 4]
//               [--forks 2] [--work-dir DIR] [--seed N]
//
// Runs in ctest with a short budget (label `stress`) and by hand for longer. Needs $KJIT_LIBCUDA
// (the driver test double) for the loads. Exit 0 when every check passed.
#include "kjit/kjit.h"

#include "batch_support.hpp"
#include "cubin/name_matcher.hpp"
#include "cubin/sidecar.hpp"
#include "cubin/symbol_scanner.hpp"
#include "store/cache_entry.hpp"
#include "store/cache_verification.hpp"
#include "test_support.hpp"

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace {

namespace fs = std::filesystem;

struct Config {
    int processes = 4;
    int threads = 4;
    double seconds = 5;
    int kernels = 12;
    int loose = 4;
    int forks = 2;  // per process, by its first worker
    std::string work_dir;
    unsigned seed = 1;
    int child = -1;  // >= 0: this process is child number `child`
};

std::string source_of(int i) { return kjit_test::sources::numbered_gemm(i); }
std::string name_of(int i) { return kjit_test::sources::numbered_gemm_name(i); }

std::string read_file(const std::string &path) {
    return kjit::read_small_file(path, 64u << 20).value_or(std::string());
}

bool compile(const Config &c, const std::string &cache, int i, std::string &path, std::string &error) {
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    char buf[4096];
    const std::string src = source_of(i);
    const kjit_status st = kjit_compile(src.c_str(), "gemm", &o, buf, sizeof buf, nullptr);
    (void)c;
    if (st != KJIT_OK) {
        error =
            std::string("kjit_compile ") + std::to_string(i) + ": " + kjit_status_string(st) + ": " + kjit_last_error();
        return false;
    }
    path = buf;
    return true;
}

// What a child counts; printed as one line for the parent.
struct Counts {
    std::atomic<long> compiles{0}, resolves{0}, loads{0}, replaces{0}, sidecar_drops{0}, failures{0}, forks{0};
};

// How long a forked child may take for its few compiles (NVRTC on a busy machine, sanitizers).
constexpr int kForkDeadlineSeconds = 120;

// In a child forked from a stress worker while the other threads work: a few kernels compiled
// (the same keys as the parent's threads, so some are in flight there), resolved and loaded.
// The exit status: 0 when every answer was right.
int forked_child_main(const Config &c, const std::string &cache, unsigned seed) {
    ::alarm(kForkDeadlineSeconds + 30);  // a backstop, should the worker that waits for it die
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> kernel(0, c.kernels - 1);
    for (int n = 0; n < 3; ++n) {
        const int i = kernel(rng);
        std::string path, error;
        if (!compile(c, cache, i, path, error)) {
            std::fprintf(stderr, "stress child %d, forked child %d: %s\n", c.child, ::getpid(), error.c_str());
            return 1;
        }
        char name[512];
        const kjit_status st = kjit_resolve_name(path.c_str(), "gemm", name, sizeof name, nullptr);
        if (st != KJIT_OK || name != name_of(i)) {
            std::fprintf(stderr, "stress child %d, forked child %d: resolve of %s: %s\n", c.child, ::getpid(),
                         path.c_str(), st == KJIT_OK ? name : kjit_last_error());
            return 1;
        }
        kjit_kernel *k = nullptr;
        const kjit_status ls = kjit_load_cached(path.c_str(), "gemm", &k);
        if (ls != KJIT_OK || kjit_kernel_name(k) != name_of(i)) {
            std::fprintf(stderr, "stress child %d, forked child %d: load of %s: %s\n", c.child, ::getpid(),
                         path.c_str(), ls == KJIT_OK ? kjit_kernel_name(k) : kjit_last_error());
            return 1;
        }
        kjit_kernel_release(k);
    }
    return 0;
}

// Forks a child that runs forked_child_main and waits for it until the deadline (then kills it).
// An empty string when it exited 0, else what went wrong.
std::string fork_and_check(const Config &c, const std::string &cache, unsigned seed) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return std::string("fork: ") + std::strerror(errno);
    if (pid == 0) ::_exit(forked_child_main(c, cache, seed));
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(kForkDeadlineSeconds);
    int status = 0;
    for (;;) {
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0) return std::string("waitpid: ") + std::strerror(errno);
        if (std::chrono::steady_clock::now() > until) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return "forked child " + std::to_string(pid) + " hung (still running after " +
                   std::to_string(kForkDeadlineSeconds) + " s, killed)";
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
    return "forked child " + std::to_string(pid) + " failed (status " + std::to_string(status) + ")";
}

void child_main(const Config &c) {
    const std::string cache = c.work_dir + "/cache";
    const std::string loose = c.work_dir + "/loose";
    const std::string seeds = c.work_dir + "/seeds";
    const std::string inplace = c.work_dir + "/inplace";
    std::set<std::string> all_names;
    for (int i = 0; i < c.kernels; ++i) all_names.insert(name_of(i));
    Counts n;
    std::mutex report_mutex;
    auto failure = [&](const std::string &what) {
        if (n.failures.fetch_add(1) < 5) {
            std::lock_guard<std::mutex> lock(report_mutex);
            std::fprintf(stderr, "stress child %d: %s\n", c.child, what.c_str());
        }
    };
    const auto started = std::chrono::steady_clock::now();
    const auto until = started + std::chrono::duration<double>(c.seconds);
    auto worker = [&](int t) {
        std::mt19937 rng(c.seed * 7919u + static_cast<unsigned>(c.child) * 131u + static_cast<unsigned>(t));
        std::uniform_int_distribution<int> kernel(0, c.kernels - 1), file(0, c.loose - 1), op(0, 99);
        while (std::chrono::steady_clock::now() < until) {
            // The first worker forks --forks times, spread over the run, while the others work.
            if (t == 0 && n.forks < c.forks &&
                std::chrono::steady_clock::now() >=
                    started +
                        std::chrono::duration<double>(c.seconds * (static_cast<double>(n.forks) + 0.5) / c.forks)) {
                const std::string problem = fork_and_check(c, cache, static_cast<unsigned>(rng()));
                if (!problem.empty()) failure(problem);
                ++n.forks;
                continue;
            }
            const int o = op(rng);
            if (o < 5) {  // a batch of a few kernels, duplicates allowed, then each item's name
                std::uniform_int_distribution<int> size(2, 6);
                std::vector<int> which(static_cast<std::size_t>(size(rng)));
                for (int &i : which) i = kernel(rng);
                std::vector<std::string> srcs;
                for (int i : which) srcs.push_back(source_of(i));
                kjit_compile_options co = KJIT_COMPILE_OPTIONS_INIT;
                co.cache_dir = cache.c_str();
                co.arch = "sm_90";
                kjit_batch_options bo = KJIT_BATCH_OPTIONS_INIT;
                bo.workers = 2;
                bo.pch = o % 2 == 0 ? KJIT_PCH_ON : KJIT_PCH_OFF;
                const kjit_test::BatchOutcome r = kjit_test::compile_batch(srcs, "gemm", co, &bo);
                if (r.overall != KJIT_OK) {
                    failure(std::string("kjit_compile_batch: ") + kjit_status_string(r.overall) + ": " +
                            kjit_last_error());
                }
                for (std::size_t k = 0; r.overall == KJIT_OK && k < which.size(); ++k) {
                    char name[512];
                    const char *path = r.cubin_paths[k].c_str();
                    const kjit_status rs = kjit_resolve_name(path, "gemm", name, sizeof name, nullptr);
                    if (rs != KJIT_OK || name != name_of(which[k])) {
                        failure(std::string("resolve of batch item ") + path + ": " + kjit_status_string(rs) + " " +
                                (rs == KJIT_OK ? name : kjit_last_error()) + ", expected " + name_of(which[k]));
                    }
                    ++n.compiles;
                    ++n.resolves;
                }
            } else if (o < 35) {  // compile (a miss or a hit), then the name of the result
                const int i = kernel(rng);
                std::string path, error;
                if (!compile(c, cache, i, path, error)) {
                    failure(error);
                    continue;
                }
                ++n.compiles;
                char name[512];
                const kjit_status st = kjit_resolve_name(path.c_str(), "gemm", name, sizeof name, nullptr);
                if (st != KJIT_OK || name != name_of(i)) {
                    failure("resolve of " + path + ": " + kjit_status_string(st) + " " +
                            (st == KJIT_OK ? name : kjit_last_error()) + ", expected " + name_of(i));
                }
                ++n.resolves;
            } else if (o < 60) {  // load a cache entry (compiling first is a hit after the first time)
                const int i = kernel(rng);
                std::string path, error;
                if (!compile(c, cache, i, path, error)) {
                    failure(error);
                    continue;
                }
                kjit_kernel *k = nullptr;
                const kjit_status st = kjit_load_cached(path.c_str(), "gemm", &k);
                if (st != KJIT_OK || kjit_kernel_name(k) != name_of(i)) {
                    failure("load of " + path + ": " + kjit_status_string(st) + " " +
                            (st == KJIT_OK ? kjit_kernel_name(k) : kjit_last_error()));
                }
                kjit_kernel_release(k);
                ++n.loads;
            } else if (o < 80) {  // resolve or load a loose cubin that others replace meanwhile
                const std::string path = loose + "/f" + std::to_string(file(rng)) + ".cubin";
                if (o < 70) {
                    char name[512];
                    const kjit_status st = kjit_resolve_name(path.c_str(), "gemm", name, sizeof name, nullptr);
                    if (st != KJIT_OK || !all_names.count(name)) {
                        failure("resolve of " + path + ": " + kjit_status_string(st) + " " +
                                (st == KJIT_OK ? name : kjit_last_error()));
                    }
                    ++n.resolves;
                } else {
                    // The double finds the kernel only in the bytes loaded: a name from another
                    // version of the file would fail here.
                    kjit_kernel *k = nullptr;
                    const kjit_status st = kjit_load_cached(path.c_str(), "gemm", &k);
                    if (st != KJIT_OK || !all_names.count(kjit_kernel_name(k))) {
                        failure("load of " + path + ": " + kjit_status_string(st) + " " +
                                (st == KJIT_OK ? kjit_kernel_name(k) : kjit_last_error()));
                    }
                    kjit_kernel_release(k);
                    ++n.loads;
                }
            } else if (o < 85) {  // replace a cache entry's cubin with a new copy of its own bytes
                // New inode and mtime, same kernel: its sidecar goes stale and is rescanned.
                const int i = kernel(rng);
                std::string path, error;
                if (!compile(c, cache, i, path, error)) {
                    failure(error);
                    continue;
                }
                const std::string temp = path + ".w" + std::to_string(::getpid()) + "-" + std::to_string(t);
                {
                    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
                    out << read_file(seeds + "/" + std::to_string(i) + ".cubin");
                }
                if (std::rename(temp.c_str(), path.c_str()) != 0) failure("rename " + temp);
                ++n.replaces;
            } else if (o < 90) {  // replace a loose cubin atomically with another kernel's
                const int j = file(rng), i = kernel(rng);
                const std::string path = loose + "/f" + std::to_string(j) + ".cubin";
                const std::string temp =
                    loose + "/.f" + std::to_string(j) + ".w" + std::to_string(::getpid()) + "-" + std::to_string(t);
                const std::string bytes = read_file(seeds + "/" + std::to_string(i) + ".cubin");
                {
                    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
                    out << bytes;
                }
                if (std::rename(temp.c_str(), path.c_str()) != 0) failure("rename " + temp);
                ++n.replaces;
            } else if (o < 93) {  // rewrite a cubin in place, as `cp other.cubin g.cubin` does
                // The same inode is truncated and written again in small pieces: readers meet it
                // empty, short or whole, and must answer with a whole version or an error.
                const std::string path = inplace + "/g" + std::to_string(file(rng)) + ".cubin";
                const std::string bytes = read_file(seeds + "/" + std::to_string(kernel(rng)) + ".cubin");
                const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
                if (fd < 0) {
                    failure("open " + path + " to rewrite it: " + std::strerror(errno));
                    continue;
                }
                for (std::size_t done = 0; done < bytes.size();) {
                    const ssize_t w =
                        ::write(fd, bytes.data() + done, std::min<std::size_t>(1024, bytes.size() - done));
                    if (w <= 0) break;
                    done += static_cast<std::size_t>(w);
                }
                ::close(fd);
                ++n.replaces;
            } else if (o < 98) {  // resolve or load a cubin that is being rewritten in place
                const std::string path = inplace + "/g" + std::to_string(file(rng)) + ".cubin";
                kjit_status st = KJIT_OK;
                std::string got;
                if (o % 2 == 0) {
                    char name[512];
                    st = kjit_resolve_name(path.c_str(), "gemm", name, sizeof name, nullptr);
                    if (st == KJIT_OK) got = name;
                    ++n.resolves;
                } else {
                    kjit_kernel *k = nullptr;
                    st = kjit_load_cached(path.c_str(), "gemm", &k);
                    if (st == KJIT_OK) got = kjit_kernel_name(k);
                    kjit_kernel_release(k);
                    ++n.loads;
                }
                // A torn read is an error naming the file (never a signal, never a mixed answer).
                const bool torn = (st == KJIT_ERROR_BAD_CUBIN || st == KJIT_ERROR_IO) &&
                                  std::string(kjit_last_error()).find(path) != std::string::npos;
                if (st == KJIT_OK ? !all_names.count(got) : !torn) {
                    failure("in-place " + path + ": " + kjit_status_string(st) + " " +
                            (st == KJIT_OK ? got : kjit_last_error()));
                }
            } else {  // a lost sidecar
                const std::string path = loose + "/f" + std::to_string(file(rng)) + ".cubin.name";
                ::unlink(path.c_str());
                ++n.sidecar_drops;
            }
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < c.threads; ++t) threads.emplace_back(worker, t);
    for (auto &th : threads) th.join();
    std::printf("counts %ld %ld %ld %ld %ld %ld %ld\n", n.compiles.load(), n.resolves.load(), n.loads.load(),
                n.replaces.load(), n.sidecar_drops.load(), n.failures.load(), n.forks.load());
    std::fflush(stdout);
    std::_Exit(n.failures.load() == 0 ? 0 : 1);
}

// The kernel name of a cubin by a scan of its bytes (not libkjit's sidecar path).
std::string scanned_name(const std::string &cubin) {
    auto table = kjit::cubin::SymbolTable::open_file(cubin);
    if (!table) return "<" + table.error().message + ">";
    std::vector<kjit::cubin::name_matcher::Candidate> candidates;
    for (const auto &f : table->functions()) candidates.push_back({f.name, f.is_entry});
    auto chosen = kjit::cubin::name_matcher::select(candidates, "gemm");
    return chosen ? std::string(*chosen) : "<" + chosen.error().message + ">";
}

int parent_main(Config c, const std::string &self) {
    const bool own_dir = c.work_dir.empty();
    if (own_dir) {
        char tmpl[] = "/tmp/kjit-stress.XXXXXX";
        if (!::mkdtemp(tmpl)) {
            std::perror("mkdtemp");
            return 2;
        }
        c.work_dir = tmpl;
    }
    const std::string cache = c.work_dir + "/cache", loose = c.work_dir + "/loose", seeds = c.work_dir + "/seeds";
    const std::string inplace = c.work_dir + "/inplace";
    fs::create_directories(loose);
    fs::create_directories(inplace);
    fs::create_directories(seeds);
    // The children end with _Exit, which skips the exit handler that removes a process's PCH
    // folder (pch_folders.hpp): keep theirs inside the work dir.
    fs::create_directories(c.work_dir + "/tmp");
    ::setenv("TMPDIR", (c.work_dir + "/tmp").c_str(), 1);
    // Seed cubins for the replacements, compiled into a cache of their own.
    for (int i = 0; i < c.kernels; ++i) {
        std::string path, error;
        if (!compile(c, c.work_dir + "/seed-cache", i, path, error)) {
            std::fprintf(stderr, "stress: %s\n", error.c_str());
            return 2;
        }
        fs::copy_file(path, seeds + "/" + std::to_string(i) + ".cubin", fs::copy_options::overwrite_existing);
    }
    for (int j = 0; j < c.loose; ++j) {
        fs::copy_file(seeds + "/" + std::to_string(j % c.kernels) + ".cubin",
                      loose + "/f" + std::to_string(j) + ".cubin");
        fs::copy_file(seeds + "/" + std::to_string(j % c.kernels) + ".cubin",
                      inplace + "/g" + std::to_string(j) + ".cubin");
    }
    std::printf("stress: %d processes x %d threads for %.1f s on %d kernels and %d loose cubins in %s\n", c.processes,
                c.threads, c.seconds, c.kernels, c.loose, c.work_dir.c_str());
    std::fflush(stdout);

    std::vector<pid_t> pids;
    std::vector<std::string> outputs;
    for (int p = 0; p < c.processes; ++p) {
        const std::string out = c.work_dir + "/child" + std::to_string(p) + ".out";
        outputs.push_back(out);
        std::vector<std::string> args = {self,
                                         "--child",
                                         std::to_string(p),
                                         "--work-dir",
                                         c.work_dir,
                                         "--threads",
                                         std::to_string(c.threads),
                                         "--seconds",
                                         std::to_string(c.seconds),
                                         "--kernels",
                                         std::to_string(c.kernels),
                                         "--loose",
                                         std::to_string(c.loose),
                                         "--forks",
                                         std::to_string(c.forks),
                                         "--seed",
                                         std::to_string(c.seed)};
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        pid_t pid = 0;
        const int rc = ::posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        if (rc != 0) {
            std::fprintf(stderr, "stress: cannot start a child: %s\n", std::strerror(rc));
            return 2;
        }
        pids.push_back(pid);
    }
    int failures = 0;
    long totals[7] = {0, 0, 0, 0, 0, 0, 0};
    for (std::size_t p = 0; p < pids.size(); ++p) {
        int status = 0;
        ::waitpid(pids[p], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            std::fprintf(stderr, "stress: child %zu failed (status %d)\n", p, status);
            ++failures;
        }
        long v[7] = {0, 0, 0, 0, 0, 0, 0};
        const std::string text = read_file(outputs[p]);
        if (std::sscanf(text.c_str(), "counts %ld %ld %ld %ld %ld %ld %ld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                        &v[6]) != 7) {
            std::fprintf(stderr, "stress: child %zu reported nothing\n", p);
            ++failures;
        }
        for (int k = 0; k < 7; ++k) totals[k] += v[k];
    }
    // Every process forked as asked (a short run may end first: at least one each).
    if (c.forks > 0 && totals[6] < c.processes) {
        std::fprintf(stderr, "stress: only %ld forks in %d processes\n", totals[6], c.processes);
        ++failures;
    }

    // A replaced cubin's sidecar is stale until its next use: use each entry once, as the
    // next start-up would, then check independently.
    for (int i = 0; i < c.kernels; ++i) {
        std::string path, error;
        char name[512];
        if (!compile(c, cache, i, path, error) ||
            kjit_resolve_name(path.c_str(), "gemm", name, sizeof name, nullptr) != KJIT_OK || name != name_of(i)) {
            std::fprintf(stderr, "stress: kernel %d after the run: %s\n", i,
                         error.empty() ? kjit_last_error() : error.c_str());
            ++failures;
        }
    }
    auto verified = kjit::store::cache_verification::verify(cache, false);
    if (!verified || !verified->findings.empty()) {
        std::fprintf(stderr, "stress: kjit cache verify: %s\n",
                     verified ? (std::to_string(verified->findings.size()) + " findings, first: " +
                                 verified->findings[0].path + ": " + verified->findings[0].detail)
                                    .c_str()
                              : verified.error().message.c_str());
        ++failures;
    }
    std::size_t entries = 0, sidecars = 0, temps = 0;
    for (const auto &e : fs::recursive_directory_iterator(c.work_dir)) {
        const std::string name = e.path().filename().string();
        const std::string path = e.path().string();
        if (name.find(".tmp-") != std::string::npos || name.find(".trash-") != std::string::npos ||
            (name.size() > 3 && name[0] == '.' && name.find(".w") != std::string::npos)) {
            std::fprintf(stderr, "stress: temp file left behind: %s\n", path.c_str());
            ++temps;
            ++failures;
            continue;
        }
        if (path.compare(0, seeds.size(), seeds) == 0 || path.find("/seed-cache/") != std::string::npos) continue;
        if (name == "kernel.cubin" ||
            (e.path().extension() == ".cubin" &&
             (path.compare(0, loose.size(), loose) == 0 || path.compare(0, inplace.size(), inplace) == 0))) {
            const std::string expected = scanned_name(path);
            if (name == "kernel.cubin") {
                ++entries;
                const std::string src = read_file(e.path().parent_path().string() + "/source.cu");
                bool known = false;
                for (int i = 0; i < c.kernels; ++i) known |= src == source_of(i) && expected == name_of(i);
                if (!known) {
                    std::fprintf(stderr, "stress: %s holds %s, not its source's kernel\n", path.c_str(),
                                 expected.c_str());
                    ++failures;
                }
            }
            const auto sc = kjit::cubin::sidecar::read(kjit::cubin::sidecar::path_for(path));
            if (sc.problem == kjit::cubin::sidecar::FileProblem::missing) continue;  // a dropped loose sidecar
            ++sidecars;
            if (sc.problem != kjit::cubin::sidecar::FileProblem::none || sc.rejected_lines != 0) {
                std::fprintf(stderr, "stress: sidecar of %s is malformed: %s\n", path.c_str(),
                             kjit::cubin::sidecar::to_string(sc.problem));
                ++failures;
                continue;
            }
            struct stat st {};
            ::stat(path.c_str(), &st);
            for (const auto &line : sc.lines) {
                const bool current = line.cubin_size == static_cast<std::uint64_t>(st.st_size) &&
                                     line.mtime_sec == st.st_mtim.tv_sec &&
                                     line.mtime_nsec == static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
                if (current && !line.content_hash && line.name != expected) {
                    std::fprintf(stderr, "stress: sidecar of %s says %s; a scan says %s\n", path.c_str(),
                                 line.name.c_str(), expected.c_str());
                    ++failures;
                }
            }
        }
    }
    std::printf("stress: %ld operations: %ld compiles, %ld resolves, %ld loads, %ld cubin replacements, "
                "%ld sidecars dropped, %ld forked children checked; %ld wrong or failed\n",
                totals[0] + totals[1] + totals[2] + totals[3] + totals[4] + totals[6], totals[0], totals[1], totals[2],
                totals[3], totals[4], totals[6], totals[5]);
    std::printf("stress: checked %zu cache entries and %zu sidecars; %zu temp files left; %s\n", entries, sidecars,
                temps, failures == 0 ? "all checks passed" : "FAILED");
    if (own_dir && failures == 0) fs::remove_all(c.work_dir);
    return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"kjit concurrency stress"};
    Config c;
    app.add_option("--processes", c.processes)->check(CLI::Range(1, 64));
    app.add_option("--threads", c.threads)->check(CLI::Range(1, 64));
    app.add_option("--seconds", c.seconds)->check(CLI::Range(0.1, 86400.0));
    app.add_option("--kernels", c.kernels)->check(CLI::Range(1, 1000));
    app.add_option("--loose", c.loose)->check(CLI::Range(1, 100));
    app.add_option("--forks", c.forks)->check(CLI::Range(0, 1000));
    app.add_option("--work-dir", c.work_dir);
    app.add_option("--seed", c.seed);
    app.add_option("--child", c.child);
    CLI11_PARSE(app, argc, argv);
    if (!std::getenv("KJIT_LIBCUDA")) {
        std::fprintf(stderr,
                     "stress: set KJIT_LIBCUDA to the driver test double (build/tests/fake_driver/libcuda.so.1)\n");
        return 2;
    }
    if (c.child >= 0) {
        child_main(c);
        return 1;
    }
    return parent_main(c, fs::canonical("/proc/self/exe").string());
}
