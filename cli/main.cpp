// The `kjit` command (docs/cli.md): resolve, compile and the cache's upkeep (stats, verify,
// prune, clear, export, import), all through libkjit.so's public C ABI, as any program linking
// it would. It links nothing else of libkjit: a second copy of the library's internals in the process would keep
// state of its own (the cache lock's registry, the eviction throttle, the logger). Only the
// size and age units ("5G", "30d") are compiled in from src/util/size_units.cpp, the same source the
// library parses $KJIT_CACHE_MAX_SIZE with.
//
// Exit status: 0 success; 1-14 the kjit_status of the failure (of the first failed file) (2 not found, 3 ambiguous, 5
// I/O error, ...); 20 `cache verify` found damage it did not repair, or `cache export`/`import`
// refused damaged entries; 64 a usage error.
#include "kjit/kjit.h"
#include "warm.hpp"

#include "util/size_units.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace units = kjit::size_units;
using nlohmann::json;

constexpr int kExitDamage = 20;
constexpr int kExitUsage = 64;

struct Global {
    bool json = false;
    std::string cache_dir;
};

// Every `from` in `text` replaced by `to` (what was put in is not looked at again).
void replace_all(std::string &text, const std::string &from, const std::string &to) {
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
        text.replace(at, from.size(), to);
    }
}

// libkjit's message with the C fields it names as this command's options: a user of `kjit`
// set no kjit_compile_options.arch, but --arch.
std::string in_command_terms(std::string message) {
    static const std::pair<const char *, const char *> kFields[] = {
        {"kjit_compile_options.arch", "--arch"},
        {"kjit_compile_options.cache_dir", "--cache-dir"},
        {"kjit_compile_options.name_expression", "--name-expr"},
        {"kjit_compile_options.program_name", "--program-name"},
        {"the compile_mode option", "--compile-mode"},
        {"the remote_storage option", "--remote-storage"},
        {"options.seed_dirs", "--seed"},
        {"options.base_dirs", "--base-dir"},
        {"options.link_inputs", "--link"},
        {"options.link_options", "--link-option"},
        {"kjit_compile_options.include_paths", "-I"},
        {"kjit_compile_options.nvrtc_options", "the options after --"},
    };
    for (const auto &[field, option] : kFields) replace_all(message, field, option);
    return message;
}

// Prints a failure and returns its exit status: the status number.
int report_failure(const Global &g, int status, const std::string &status_text, const std::string &raw_message) {
    const std::string message = in_command_terms(raw_message);
    if (g.json) {
        std::cout << json{{"status", status_text}, {"code", status}, {"error", message}}.dump(2) << "\n";
    }
    std::cerr << "kjit: " << status_text << ": " << message << "\n";
    return status;
}

int fail_with(const Global &g, kjit_status s) { return report_failure(g, s, kjit_status_string(s), kjit_last_error()); }

// A compile's message with the name NVRTC knew the source by (the cache's `source.cu`: every
// entry's source has that name) replaced by the file the user gave, where NVRTC's log names it
// ('source.cu', "source.cu", source.cu(12)), so that "k.cu(12): error" points at their file.
std::string with_file_name(std::string message, const std::string &file) {
    replace_all(message, "'source.cu'", "'" + file + "'");
    replace_all(message, "\"source.cu\"", "\"" + file + "\"");
    replace_all(message, "source.cu(", file + "(");
    return message;
}

std::string utc_text(std::int64_t ns) {
    if (ns == 0) return "";
    const std::time_t t = static_cast<std::time_t>(ns / 1'000'000'000);
    struct tm utc {};
    gmtime_r(&t, &utc);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return buf;
}

// Calls `fn(buf, size, &len)` twice at most: once with a stack buffer, once with the length.
template <typename Fn>
kjit_status with_out_string(std::string &out, Fn &&fn) {
    char small[512];
    size_t len = 0;
    kjit_status s = fn(small, sizeof small, &len);
    if (s == KJIT_OK) {
        out.assign(small, len);
        return s;
    }
    if (s != KJIT_ERROR_BUFFER_TOO_SMALL) return s;
    std::vector<char> big(len + 1);
    s = fn(big.data(), big.size(), &len);
    if (s == KJIT_OK) out.assign(big.data(), len);
    return s;
}

int run_resolve(const Global &g, const std::string &cubin, const std::string &keyword) {
    std::string name;
    const kjit_status s = with_out_string(name, [&](char *buf, size_t size, size_t *len) {
        return kjit_resolve_name(cubin.c_str(), keyword.c_str(), buf, size, len);
    });
    if (s != KJIT_OK) return fail_with(g, s);
    if (g.json) {
        std::cout << json{{"cubin", cubin}, {"keyword", keyword}, {"name", name}}.dump(2) << "\n";
    } else {
        std::cout << name << "\n";
    }
    return 0;
}

// Reads a source file whole (links followed, as any compiler does); an error text, or "".
std::string read_source(const std::string &path, std::string &out) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "cannot open source '" + path + "': " + std::strerror(errno);
    struct stat st {};
    std::string error;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        error = "source '" + path + "' is not a regular file";
    } else {
        char buf[65536];
        for (;;) {
            const ssize_t n = ::read(fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                error = "cannot read source '" + path + "': " + std::strerror(errno);
                break;
            }
            if (n == 0) break;
            out.append(buf, static_cast<std::size_t>(n));
        }
    }
    ::close(fd);
    return error;
}

struct CompileArgs {
    std::vector<std::string> files;
    unsigned jobs = 0;    // several files: kjit_compile_batch's workers (0: its default)
    bool no_pch = false;  // several files: plain compiles
    std::string workers;  // several files: "threads", "processes" or "auto" ("": $KJIT_WORKER_KIND)
    std::string keyword;
    std::string arch;
    std::string name_expression;
    std::string remote_storage;  // "": $KJIT_REMOTE_STORAGE
    std::string program_name;    // "": each file's path as given
    std::string compile_mode;    // "always", "warn" or "never" ("": $KJIT_NO_COMPILE)
    std::vector<std::string> include_paths;
    std::vector<std::string> nvrtc_options;
    std::vector<std::string> seed_dirs;       // --seed, in order ("none": none; empty: $KJIT_CACHE_SEED)
    std::vector<const char *> seed_pointers;  // seed_dirs as the C option takes them
    std::vector<std::string> base_dirs;       // --base-dir, in order ("none": none; empty: $KJIT_BASE_DIRS)
    std::vector<const char *> base_pointers;  // base_dirs as the C option takes them
    std::vector<std::string> link_inputs;     // --link, in order: files nvJitLink links the kernel with
    std::vector<std::string> link_options;    // --link-option, in order
    std::vector<const char *> link_pointers, link_option_pointers;  // the two as the C options take them
};

// The options of `file` of `kjit compile`; `options` and `includes` hold what they point at.
// The NVRTC program is named after the file as given (or --program-name): NVRTC then searches
// the file's folder for its quoted includes first, from any working directory, as nvcc does,
// and its log and device asserts name the file.
kjit_compile_options compile_options_of(const Global &g, const CompileArgs &a, const std::string &file,
                                        std::vector<const char *> &options, std::vector<const char *> &includes) {
    for (const std::string &o : a.nvrtc_options) options.push_back(o.c_str());
    for (const std::string &p : a.include_paths) includes.push_back(p.c_str());
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    opts.cache_dir = g.cache_dir.empty() ? nullptr : g.cache_dir.c_str();
    opts.arch = a.arch.empty() ? nullptr : a.arch.c_str();
    opts.nvrtc_options = options.data();
    opts.nvrtc_option_count = options.size();
    opts.include_paths = includes.data();
    opts.include_path_count = includes.size();
    opts.name_expression = a.name_expression.empty() ? nullptr : a.name_expression.c_str();
    opts.remote_storage = a.remote_storage.empty() ? nullptr : a.remote_storage.c_str();
    opts.program_name = a.program_name.empty() ? file.c_str() : a.program_name.c_str();
    opts.seed_dirs = a.seed_pointers.data();
    opts.seed_dir_count = a.seed_pointers.size();
    opts.base_dirs = a.base_pointers.data();
    opts.base_dir_count = a.base_pointers.size();
    opts.link_inputs = a.link_pointers.data();
    opts.link_input_count = a.link_pointers.size();
    opts.link_options = a.link_option_pointers.data();
    opts.link_option_count = a.link_option_pointers.size();
    opts.compile_mode = a.compile_mode == "always"  ? KJIT_COMPILE_ALWAYS
                        : a.compile_mode == "warn"  ? KJIT_COMPILE_WARN
                        : a.compile_mode == "never" ? KJIT_COMPILE_NEVER
                                                    : KJIT_COMPILE_DEFAULT;
    return opts;
}

kjit_status resolve_into(const std::string &cubin, const std::string &keyword, std::string &name) {
    return with_out_string(name, [&](char *buf, size_t size, size_t *len) {
        return kjit_resolve_name(cubin.c_str(), keyword.c_str(), buf, size, len);
    });
}

int run_compile_one(const Global &g, const CompileArgs &a) {
    std::string source;
    if (auto st = read_source(a.files.front(), source); !st.empty()) {
        return report_failure(g, KJIT_ERROR_IO, kjit_status_string(KJIT_ERROR_IO), st);
    }
    std::vector<const char *> options, includes;
    const kjit_compile_options opts = compile_options_of(g, a, a.files.front(), options, includes);
    std::string cubin;
    kjit_status s = with_out_string(cubin, [&](char *buf, size_t size, size_t *len) {
        return kjit_compile(source.c_str(), a.keyword.c_str(), &opts, buf, size, len);
    });
    if (s != KJIT_OK)
        return report_failure(g, s, kjit_status_string(s), with_file_name(kjit_last_error(), a.files.front()));
    std::string name;
    s = resolve_into(cubin, a.keyword, name);
    if (s != KJIT_OK) return fail_with(g, s);
    if (g.json) {
        std::cout << json{{"cubin", cubin}, {"keyword", a.keyword}, {"name", name}}.dump(2) << "\n";
    } else {
        std::cout << cubin << "\n" << name << "\n";
    }
    return 0;
}

// Ctrl-C during a batch (docs/cli.md): the first asks the batch to stop once the compiles
// under way finish (NVRTC cannot be interrupted) and what finished is printed; a second one
// ends the process at once.
volatile std::sig_atomic_t interrupted = 0;

extern "C" void on_interrupt(int sig) {
    if (interrupted) {
        std::signal(sig, SIG_DFL);
        std::raise(sig);
        return;
    }
    interrupted = 1;
    static const char kNotice[] =
        "\nkjit: interrupted: stopping once the compiles under way finish (Ctrl-C again to quit now)\n";
    const ssize_t ignored = ::write(STDERR_FILENO, kNotice, sizeof kNotice - 1);
    (void)ignored;
}

// Installs on_interrupt for SIGINT for the life of the object, unless SIGINT was ignored (a
// command started with nohup, or in the background of a script, keeps ignoring it).
class InterruptHandler {
public:
    InterruptHandler() {
        struct sigaction want {};
        want.sa_handler = on_interrupt;
        want.sa_flags = SA_RESTART;
        sigemptyset(&want.sa_mask);
        if (::sigaction(SIGINT, nullptr, &old_) == 0 && old_.sa_handler != SIG_IGN) {
            installed_ = ::sigaction(SIGINT, &want, nullptr) == 0;
        }
    }
    ~InterruptHandler() {
        if (installed_) ::sigaction(SIGINT, &old_, nullptr);
    }
    InterruptHandler(const InterruptHandler &) = delete;
    InterruptHandler &operator=(const InterruptHandler &) = delete;

private:
    struct sigaction old_ {};
    bool installed_ = false;
};

// The files of a several-file `kjit compile` and what became of each, printed as they finish:
// a file's two lines as soon as it and every file before it are done (the output stays in file
// order), failures with their detail once the batch ends (the detail is known then).
class CompileStream {
public:
    static constexpr int kPending = -1;

    CompileStream(const Global &g, const CompileArgs &a)
        : g_(g), a_(a), code_(a.files.size(), kPending), cubin_(a.files.size()), name_(a.files.size()),
          error_(a.files.size()), tty_(::isatty(STDERR_FILENO) == 1) {}

    std::size_t size() const { return code_.size(); }
    void failed(std::size_t file, int code, std::string error) {
        code_[file] = code;
        error_[file] = std::move(error);
    }
    // A file finished: its cubin (resolved to its name here), or its status.
    void finished(std::size_t file, int code, const char *cubin, std::size_t done, std::size_t total);
    // At the end: what the progress callback did not see (cancelled items), and the details.
    void settle(std::size_t file, int code, const std::string &cubin, const std::string &error);
    // After the batch: the files not printed yet, the failures, the JSON array; the exit status.
    int conclude();

private:
    void record(std::size_t file, int code, const char *cubin);
    void print_ready();
    void clear_progress();
    int summary() const;

    const Global &g_;
    const CompileArgs &a_;
    std::vector<int> code_;
    std::vector<std::string> cubin_, name_, error_;
    std::size_t printed_ = 0;  // the files before this one are printed
    bool tty_;
    bool progress_shown_ = false;
};

void CompileStream::record(std::size_t file, int code, const char *cubin) {
    code_[file] = code;
    if (code == KJIT_OK && cubin) {
        cubin_[file] = cubin;
        if (const kjit_status s = resolve_into(cubin_[file], a_.keyword, name_[file]); s != KJIT_OK) {
            code_[file] = s;
            error_[file] = kjit_last_error();
        }
    }
}

void CompileStream::finished(std::size_t file, int code, const char *cubin, std::size_t done, std::size_t total) {
    record(file, code, cubin);
    print_ready();
    if (tty_) {
        std::fprintf(stderr, "\rkjit: %zu/%zu compiled or found", done, total);
        progress_shown_ = true;
    }
}

void CompileStream::settle(std::size_t file, int code, const std::string &cubin, const std::string &error) {
    if (code == KJIT_OK && cubin_[file].empty()) {
        record(file, code, cubin.c_str());
        return;
    }
    if (code_[file] == kPending || code != KJIT_OK) code_[file] = code;
    if (code != KJIT_OK) error_[file] = with_file_name(error, a_.files[file]);
}

void CompileStream::clear_progress() {
    if (!progress_shown_) return;
    std::fputs("\r\033[K", stderr);
    progress_shown_ = false;
}

void CompileStream::print_ready() {
    bool printed_any = false;
    for (; printed_ < code_.size() && code_[printed_] != kPending; ++printed_) {
        if (code_[printed_] != KJIT_OK || g_.json) continue;
        if (!printed_any) clear_progress();
        std::printf("%s\n%s\n", cubin_[printed_].c_str(), name_[printed_].c_str());
        printed_any = true;
    }
    if (printed_any) std::fflush(stdout);  // each file's lines when they are known, also into a pipe
}

int CompileStream::conclude() {
    print_ready();
    clear_progress();
    int exit_status = 0;
    json out = json::array();
    for (std::size_t i = 0; i < code_.size(); ++i) {
        const bool ok = code_[i] == KJIT_OK;
        const char *text = kjit_status_string(static_cast<kjit_status>(code_[i]));
        if (!ok && !(interrupted && code_[i] == KJIT_ERROR_CANCELLED)) {
            std::cerr << "kjit: " << a_.files[i] << ": " << text << ": " << error_[i] << "\n";
            if (exit_status == 0) exit_status = code_[i];
        }
        if (!g_.json) continue;
        if (ok) {
            out.push_back({{"file", a_.files[i]}, {"cubin", cubin_[i]}, {"keyword", a_.keyword}, {"name", name_[i]}});
        } else {
            out.push_back({{"file", a_.files[i]}, {"status", text}, {"code", code_[i]}, {"error", error_[i]}});
        }
    }
    if (g_.json) std::cout << out.dump(2) << std::endl;
    return interrupted ? summary() : exit_status;
}

// After Ctrl-C: how many files finished, how, and which were not compiled; exit status 130
// (128 + SIGINT, as a shell reports a command it interrupted).
int CompileStream::summary() const {
    std::size_t ok = 0, failed = 0;
    std::vector<std::string> not_compiled;
    for (std::size_t i = 0; i < code_.size(); ++i) {
        if (code_[i] == KJIT_OK) ++ok;
        else if (code_[i] == KJIT_ERROR_CANCELLED || code_[i] == kPending) not_compiled.push_back(a_.files[i]);
        else ++failed;
    }
    std::string names;
    for (std::size_t i = 0; i < not_compiled.size() && i < 10; ++i) names += (i ? ", " : "") + not_compiled[i];
    if (not_compiled.size() > 10) names += " and " + std::to_string(not_compiled.size() - 10) + " more";
    std::cerr << "kjit: interrupted: " << ok + failed << " of " << code_.size() << " files finished (" << ok
              << " compiled or found, " << failed << " failed)";
    if (!not_compiled.empty()) std::cerr << "; not compiled: " << names;
    std::cerr << "\n";
    return 128 + SIGINT;
}

// One request per file that could be read (each its own NVRTC program, named after the file);
// `items` and `file_of_item` list them in file order.
struct BatchRequests {
    std::vector<std::string> sources;
    std::vector<std::vector<const char *>> options, includes;
    std::vector<kjit_compile_options> opts;
    std::vector<kjit_compile_request> requests;
    std::vector<const kjit_compile_request *> items;
    std::vector<std::size_t> file_of_item;
};

void make_requests(const Global &g, const CompileArgs &a, CompileStream &stream, BatchRequests &b) {
    const std::size_t n = a.files.size();
    b.sources.resize(n);
    b.options.resize(n);
    b.includes.resize(n);
    b.opts.resize(n);
    b.requests.assign(n, kjit_compile_request KJIT_COMPILE_REQUEST_INIT);
    for (std::size_t i = 0; i < n; ++i) {
        if (std::string error = read_source(a.files[i], b.sources[i]); !error.empty()) {
            stream.failed(i, KJIT_ERROR_IO, std::move(error));
            continue;
        }
        b.opts[i] = compile_options_of(g, a, a.files[i], b.options[i], b.includes[i]);
        b.requests[i].source = b.sources[i].c_str();
        b.requests[i].keyword = a.keyword.c_str();
        b.requests[i].options = &b.opts[i];
        b.items.push_back(&b.requests[i]);
        b.file_of_item.push_back(i);
    }
}

struct ProgressContext {
    CompileStream *stream;
    const std::vector<std::size_t> *file_of_item;
};

// The batch's progress callback: prints what became printable; after Ctrl-C, stops the batch.
int on_progress(void *user, size_t done, size_t total, size_t index, kjit_status status, const char *cubin) {
    const auto *c = static_cast<ProgressContext *>(user);
    c->stream->finished((*c->file_of_item)[index], status, cubin, done, total);
    return interrupted ? 1 : 0;
}

// Several files: one kjit_compile_batch (docs/batch.md), each file's result printed as it
// finishes; Ctrl-C stops it, printing what finished and a summary (exit 130).
int run_compile_many(const Global &g, const CompileArgs &a) {
    CompileStream stream(g, a);
    BatchRequests b;
    make_requests(g, a, stream, b);
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    batch.workers = a.jobs;
    batch.pch = a.no_pch ? KJIT_PCH_OFF : KJIT_PCH_DEFAULT;
    batch.worker_kind = a.workers == "threads"     ? KJIT_WORKERS_THREADS
                        : a.workers == "processes" ? KJIT_WORKERS_PROCESSES
                        : a.workers == "auto"      ? KJIT_WORKERS_AUTOMATIC
                                                   : KJIT_WORKERS_DEFAULT;
    ProgressContext context{&stream, &b.file_of_item};
    batch.progress = on_progress;
    batch.progress_user_data = &context;
    kjit_batch_result *raw = nullptr;
    kjit_status overall = KJIT_OK;
    {
        const InterruptHandler handler;
        overall = kjit_compile_batch(b.items.data(), b.items.size(), &batch, &raw);
    }
    if (!raw) return fail_with(g, overall);
    std::unique_ptr<kjit_batch_result, decltype(&kjit_batch_result_release)> result(raw, &kjit_batch_result_release);
    for (std::size_t k = 0; k < b.file_of_item.size(); ++k) {
        const int code = kjit_batch_result_status(result.get(), k);
        const char *cubin = code == KJIT_OK ? kjit_batch_result_cubin_path(result.get(), k) : nullptr;
        const char *error = code == KJIT_OK ? nullptr : kjit_batch_result_error(result.get(), k);
        stream.settle(b.file_of_item[k], code, cubin ? cubin : "", error ? error : "");
    }
    return stream.conclude();
}

int run_compile(const Global &g, const CompileArgs &a) {
    return a.files.size() == 1 ? run_compile_one(g, a) : run_compile_many(g, a);
}

// The cache folder the command works on, absolute: --cache-dir, else the library's default, as
// kjit_cache_dir resolves it for every kjit_cache_* call.
kjit_status cache_dir_of(const Global &g, std::string &dir) {
    return with_out_string(dir, [&](char *buf, size_t size, size_t *len) {
        return kjit_cache_dir(g.cache_dir.empty() ? nullptr : g.cache_dir.c_str(), buf, size, len);
    });
}

using Arches = std::unique_ptr<kjit_cache_arches, decltype(&kjit_cache_arches_release)>;

void print_stats(const std::string &dir, const kjit_cache_summary &s, const kjit_cache_arches *arches) {
    std::printf("cache folder   %s\n", dir.c_str());
    std::printf("entries        %llu\n", static_cast<unsigned long long>(s.entries));
    std::printf("size           %s (%llu bytes)\n", units::format_size(s.bytes).c_str(),
                static_cast<unsigned long long>(s.bytes));
    std::printf("size limit     %s\n",
                s.max_size ? (units::format_size(s.max_size) + " ($KJIT_CACHE_MAX_SIZE)").c_str() : "none");
    if (s.entries > 0) {
        std::printf("created        %s .. %s\n", utc_text(s.oldest_created_ns).c_str(),
                    utc_text(s.newest_created_ns).c_str());
        std::printf("last used      %s .. %s\n", utc_text(s.least_recent_use_ns).c_str(),
                    utc_text(s.most_recent_use_ns).c_str());
    }
    for (size_t i = 0; i < kjit_cache_arches_count(arches); ++i) {
        std::printf("  %-12s %llu entries, %s\n", kjit_cache_arches_name(arches, i),
                    static_cast<unsigned long long>(kjit_cache_arches_entries(arches, i)),
                    units::format_size(kjit_cache_arches_bytes(arches, i)).c_str());
    }
    std::printf("in transit     %llu folders, %s (entries being written or removed)\n",
                static_cast<unsigned long long>(s.in_transit), units::format_size(s.in_transit_bytes).c_str());
    if (s.foreign > 0) {
        std::printf("other files    %llu (not the cache's; left alone)\n", static_cast<unsigned long long>(s.foreign));
    }
}

std::uint64_t remote_errors_so_far() {
    kjit_stats s = KJIT_STATS_INIT;
    return kjit_get_stats(&s) == KJIT_OK ? s.remote_errors : 0;
}

// What the cluster tier's servers say of themselves (kjit_remote_describe) into `text`, and
// whether every one of them answered: one that could not be reached, or refused us (a wrong or
// missing password), is said in the text and counted in kjit_stats::remote_errors.
kjit_status describe_remote(const std::string &setting, std::string &text, bool &all_answered) {
    const std::uint64_t errors_before = remote_errors_so_far();
    // A buffer large enough at once: each call asks the servers again.
    std::vector<char> buf(1 << 20);
    size_t len = 0;
    const kjit_status st = kjit_remote_describe(setting.c_str(), buf.data(), buf.size(), &len);
    if (st == KJIT_OK) text.assign(buf.data(), len);
    all_answered = remote_errors_so_far() == errors_before;
    return st;
}

// After the stats are printed: what a server only let us see in part (its "  limited: " lines:
// an ACL or a renamed command of a managed server), on stderr as warnings; when one failed
// (`all_answered` false), its lines of the text, which name each server with its password
// hidden, and the exit status, 5 (I/O error). 0 otherwise.
int report_remote_conditions(const std::string &servers, bool all_answered) {
    bool named = false;
    std::size_t pos = 0;
    while (pos < servers.size()) {
        std::size_t end = servers.find('\n', pos);
        if (end == std::string::npos) end = servers.size();
        const std::string line = servers.substr(pos, end - pos);
        for (const char *mark : {"  unreachable: ", "  refused: ", "  limited: "}) {
            if (line.rfind(mark, 0) != 0) continue;
            const bool failed = std::strcmp(mark, "  limited: ") != 0;
            std::cerr << "kjit: " << (failed ? kjit_status_string(KJIT_ERROR_IO) : "warning") << ": "
                      << line.substr(std::strlen(mark)) << "\n";
            named = named || failed;
        }
        pos = end + 1;
    }
    if (all_answered) return 0;
    if (!named)
        std::cerr << "kjit: " << kjit_status_string(KJIT_ERROR_IO) << ": a remote cache server failed while asked\n";
    return KJIT_ERROR_IO;
}

// `kjit cache stats`; with `remote` (not null: --remote, its setting or "" for the
// environment's), the cluster tier's servers too: exit status 5 when one did not answer.
int run_stats(const Global &g, const std::string *remote) {
    std::string dir;
    if (const kjit_status st = cache_dir_of(g, dir); st != KJIT_OK) return fail_with(g, st);
    kjit_cache_summary s = KJIT_CACHE_SUMMARY_INIT;
    kjit_cache_arches *raw = nullptr;
    if (const kjit_status st = kjit_cache_summarize(dir.c_str(), &s, &raw); st != KJIT_OK) return fail_with(g, st);
    const Arches arches(raw, &kjit_cache_arches_release);
    std::string servers;
    bool all_answered = true;
    if (remote) {
        if (const kjit_status st = describe_remote(*remote, servers, all_answered); st != KJIT_OK) {
            return fail_with(g, st);
        }
    }
    if (!g.json) {
        print_stats(dir, s, arches.get());
        if (remote) std::printf("remote cache\n%s", servers.c_str());
        std::fflush(stdout);
        return report_remote_conditions(servers, all_answered);
    }
    json by_arch = json::object();
    for (size_t i = 0; i < kjit_cache_arches_count(arches.get()); ++i) {
        by_arch[kjit_cache_arches_name(arches.get(), i)] = {{"entries", kjit_cache_arches_entries(arches.get(), i)},
                                                            {"bytes", kjit_cache_arches_bytes(arches.get(), i)}};
    }
    json out = {{"cache_dir", dir},
                {"entries", s.entries},
                {"bytes", s.bytes},
                {"max_size", s.max_size ? json(s.max_size) : json(nullptr)},
                {"oldest_created", utc_text(s.oldest_created_ns)},
                {"newest_created", utc_text(s.newest_created_ns)},
                {"least_recent_use", utc_text(s.least_recent_use_ns)},
                {"most_recent_use", utc_text(s.most_recent_use_ns)},
                {"by_arch", by_arch},
                {"in_transit", {{"folders", s.in_transit}, {"bytes", s.in_transit_bytes}}},
                {"foreign", s.foreign}};
    if (remote) out["remote"] = servers;
    std::cout << out.dump(2) << std::endl;
    return report_remote_conditions(servers, all_answered);
}

// The refused entries of an export or import, as verify prints its findings.
json print_refused(const Global &g, const kjit_verify_report *r) {
    json refused = json::array();
    for (size_t i = 0; i < kjit_verify_report_count(r); ++i) {
        const char *problem = kjit_cache_problem_string(kjit_verify_report_kind(r, i));
        if (g.json) {
            refused.push_back({{"path", kjit_verify_report_path(r, i)},
                               {"damage", problem},
                               {"detail", kjit_verify_report_detail(r, i)}});
        } else {
            std::printf("%-18s %s: %s -> not copied\n", problem, kjit_verify_report_path(r, i),
                        kjit_verify_report_detail(r, i));
        }
    }
    return refused;
}

// `kjit cache export DIR` (export) and `kjit cache import DIR`: exit status 0, or kExitDamage
// when entries were refused (each printed, as verify prints them).
int run_copy(const Global &g, bool is_export, const std::string &other, const std::string &arch) {
    std::string dir;
    if (const kjit_status st = cache_dir_of(g, dir); st != KJIT_OK) return fail_with(g, st);
    kjit_copy_report c = KJIT_COPY_REPORT_INIT;
    kjit_verify_report *raw = nullptr;
    const kjit_status st =
        is_export ? kjit_cache_export(dir.c_str(), other.c_str(), arch.empty() ? nullptr : arch.c_str(), &c, &raw)
                  : kjit_cache_import(other.c_str(), dir.c_str(), &c, &raw);
    if (st != KJIT_OK) return fail_with(g, st);
    const std::unique_ptr<kjit_verify_report, decltype(&kjit_verify_report_release)> r(raw,
                                                                                       &kjit_verify_report_release);
    const json refused = print_refused(g, r.get());
    auto n = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    if (g.json) {
        std::cout << json{{"cache_dir", dir},
                          {is_export ? "export_dir" : "import_dir", other},
                          {"copied_entries", c.copied_entries},
                          {"copied_bytes", c.copied_bytes},
                          {"present_entries", c.present_entries},
                          {"skipped_entries", c.skipped_entries},
                          {"refused_entries", c.refused_entries},
                          {"refused", refused}}
                         .dump(2)
                  << "\n";
    } else {
        std::printf("%s %llu entries (%s) %s %s; %llu there already", is_export ? "exported" : "imported",
                    n(c.copied_entries), units::format_size(c.copied_bytes).c_str(), is_export ? "to" : "from",
                    other.c_str(), n(c.present_entries));
        if (c.skipped_entries > 0) std::printf(", %llu of other archs skipped", n(c.skipped_entries));
        if (c.refused_entries > 0) std::printf(", %llu refused (listed above)", n(c.refused_entries));
        std::printf("\n");
    }
    return c.refused_entries > 0 ? kExitDamage : 0;
}

int run_verify(const Global &g, bool fix) {
    std::string dir;
    if (const kjit_status st = cache_dir_of(g, dir); st != KJIT_OK) return fail_with(g, st);
    kjit_verify_report *raw = nullptr;
    if (const kjit_status st = kjit_cache_verify(dir.c_str(), fix ? 1 : 0, &raw); st != KJIT_OK)
        return fail_with(g, st);
    const std::unique_ptr<kjit_verify_report, decltype(&kjit_verify_report_release)> r(raw,
                                                                                       &kjit_verify_report_release);
    const size_t count = kjit_verify_report_count(r.get());
    std::size_t fixed = 0;
    for (size_t i = 0; i < count; ++i) fixed += kjit_verify_report_fixed(r.get(), i) == 1 ? 1u : 0u;
    const bool clean = fixed == count;  // nothing found, or everything found fixed
    if (g.json) {
        json findings = json::array();
        for (size_t i = 0; i < count; ++i) {
            findings.push_back({{"path", kjit_verify_report_path(r.get(), i)},
                                {"damage", kjit_cache_problem_string(kjit_verify_report_kind(r.get(), i))},
                                {"detail", kjit_verify_report_detail(r.get(), i)},
                                {"fixed", kjit_verify_report_fixed(r.get(), i) == 1},
                                {"action", kjit_verify_report_action(r.get(), i)}});
        }
        std::cout << json{{"cache_dir", dir},
                          {"entries_checked", kjit_verify_report_entries_checked(r.get())},
                          {"entries_ok", kjit_verify_report_entries_ok(r.get())},
                          {"findings", findings},
                          {"fixed", fixed},
                          {"clean", clean}}
                         .dump(2)
                  << "\n";
    } else {
        for (size_t i = 0; i < count; ++i) {
            const std::string action = kjit_verify_report_action(r.get(), i);
            std::printf("%-18s %s: %s%s%s\n", kjit_cache_problem_string(kjit_verify_report_kind(r.get(), i)),
                        kjit_verify_report_path(r.get(), i), kjit_verify_report_detail(r.get(), i),
                        action.empty() ? "" : " -> ", action.c_str());
        }
        std::printf("%s: %zu entries checked, %zu ok, %zu problems found, %zu fixed\n", dir.c_str(),
                    kjit_verify_report_entries_checked(r.get()), kjit_verify_report_entries_ok(r.get()), count, fixed);
        if (!clean && !fix) std::printf("run 'kjit cache verify --fix' to repair them\n");
    }
    return clean ? 0 : kExitDamage;
}

int print_prune(const Global &g, const std::string &dir, const kjit_prune_report &r) {
    if (g.json) {
        std::cout << json{{"cache_dir", dir},
                          {"removed_entries", r.removed_entries},
                          {"removed_bytes", r.removed_bytes},
                          {"spared_in_use", r.spared_in_use},
                          {"removed_in_transit", r.removed_in_transit},
                          {"removed_variants_files", r.removed_variants_files},
                          {"kept_entries", r.kept_entries},
                          {"kept_bytes", r.kept_bytes}}
                         .dump(2)
                  << "\n";
        return 0;
    }
    auto n = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    std::printf("%s: removed %llu entries (%s), kept %llu (%s)", dir.c_str(), n(r.removed_entries),
                units::format_size(r.removed_bytes).c_str(), n(r.kept_entries),
                units::format_size(r.kept_bytes).c_str());
    if (r.spared_in_use > 0) std::printf(", %llu spared because in use", n(r.spared_in_use));
    if (r.removed_in_transit > 0) std::printf(", %llu stale temp folders swept", n(r.removed_in_transit));
    if (r.removed_variants_files > 0)
        std::printf(", %llu variants files of removed entries", n(r.removed_variants_files));
    std::printf("\n");
    return 0;
}

int run_prune(const Global &g, const std::string &max_size, const std::string &older_than) {
    kjit_prune_options options = KJIT_PRUNE_OPTIONS_INIT;
    if (!max_size.empty()) {
        auto size = units::parse_size(max_size);
        if (!size) return report_failure(g, kExitUsage, "usage", "--max-size: " + size.error().message);
        options.max_size = *size;
    }
    if (!older_than.empty()) {
        auto age = units::parse_age(older_than);
        if (!age) return report_failure(g, kExitUsage, "usage", "--older-than: " + age.error().message);
        options.older_than_s = static_cast<std::uint64_t>(*age / 1'000'000'000);  // whole seconds: s is the least unit
    }
    std::string dir;
    if (const kjit_status st = cache_dir_of(g, dir); st != KJIT_OK) return fail_with(g, st);
    kjit_prune_report report = KJIT_PRUNE_REPORT_INIT;
    if (const kjit_status st = kjit_cache_prune(dir.c_str(), &options, &report); st != KJIT_OK) return fail_with(g, st);
    return print_prune(g, dir, report);
}

int run_clear(const Global &g) {
    std::string dir;
    if (const kjit_status st = cache_dir_of(g, dir); st != KJIT_OK) return fail_with(g, st);
    kjit_prune_report report = KJIT_PRUNE_REPORT_INIT;
    if (const kjit_status st = kjit_cache_clear(dir.c_str(), &report); st != KJIT_OK) return fail_with(g, st);
    return print_prune(g, dir, report);
}

// The names of `cmd`'s subcommands, each followed by its own in parentheses:
// "resolve, compile, warm, cache (stats, verify, prune, clear)".
std::string command_list(const CLI::App &cmd) {
    std::string out;
    for (const CLI::App *sub : cmd.get_subcommands({})) {
        if (!out.empty()) out += ", ";
        out += sub->get_name();
        if (!sub->get_subcommands({}).empty()) out += " (" + command_list(*sub) + ")";
    }
    return out;
}

// What is wrong with the command line's command, if that is what CLI11 refused: an unknown one
// (CLI11 said only "A subcommand is required") or none, said with the commands there are; ""
// when the command is fine and CLI11's own message says what is wrong.
std::string command_problem(const CLI::App &app, int argc, char **argv) {
    const CLI::App *at = &app;
    std::string path;  // the commands given so far, "cache "
    for (int i = 1; i < argc && !at->get_subcommands({}).empty(); ++i) {
        const std::string arg = argv[i];
        if (arg.empty() || arg[0] == '-') continue;  // no option before a command takes a value
        const CLI::App *next = nullptr;
        for (const CLI::App *sub : at->get_subcommands({})) {
            if (sub->get_name() == arg) next = sub;
        }
        if (!next) {
            return "unknown command '" + path + arg + "'; the " + path + "commands are: " + command_list(*at) +
                   "; see kjit " + path + "--help";
        }
        path += arg + " ";
        at = next;
    }
    if (at->get_subcommands({}).empty()) return "";
    return "kjit " + path + "needs a command: " + command_list(*at) + "; see kjit " + path + "--help";
}

// The command `argv` names (its deepest subcommand), with its path ("compile ", "cache export ").
const CLI::App *command_of(const CLI::App &app, int argc, char **argv, std::string &path) {
    const CLI::App *at = &app;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--") break;
        if (arg.empty() || arg[0] == '-') continue;
        for (const CLI::App *sub : at->get_subcommands({})) {
            if (sub->get_name() == arg) {
                at = sub;
                path += arg + " ";
            }
        }
    }
    return at;
}

// Levenshtein distance, bounded: enough to tell a typo of an option's name.
std::size_t edit_distance(const std::string &a, const std::string &b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// What an option the command does not know most likely is, said where CLI11 says only what it
// missed ("--keyword is required" for --keywrd) or "not expected": a typo of one of its options
// (named), or an NVRTC option given before "--". "" when none of the arguments is such.
std::string option_problem(const CLI::App &app, int argc, char **argv) {
    std::string path;
    const CLI::App *command = command_of(app, argc, argv, path);
    std::vector<std::string> known;
    for (const CLI::App *at : {command, &app}) {
        for (const CLI::Option *o : at->get_options()) {
            for (const std::string &n : o->get_lnames()) known.push_back("--" + n);
            for (const std::string &n : o->get_snames()) known.push_back("-" + n);
        }
    }
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--") break;
        if (arg.size() < 2 || arg[0] != '-') continue;
        const std::string name = arg.substr(0, arg.find('='));
        if (std::find(known.begin(), known.end(), name) != known.end()) continue;
        std::string best;
        std::size_t best_distance = 3;  // at most two edits away
        for (const std::string &k : known) {
            if (k.size() < 3) continue;  // -k, -j, -I: too short to guess from
            const std::size_t d = edit_distance(name, k);
            if (d < best_distance) {
                best_distance = d;
                best = k;
            }
        }
        if (!best.empty()) {
            return "unknown option '" + name + "' of kjit " + path + "(did you mean " + best + "?); see kjit " + path +
                   "--help";
        }
        if (path == "compile ") {
            return "'" + arg + "' is not an option of kjit compile: NVRTC options go after --, e.g. kjit compile " +
                   "FILE -k KEYWORD -- " + arg + "; see kjit compile --help";
        }
        return "unknown option '" + name + "' of kjit " + path + "; see kjit " + path + "--help";
    }
    return "";
}

// Parses the command line into `app`'s variables: -1 to go on, else the exit status (help and
// version printed, or a usage error said).
int parse_command_line(CLI::App &app, const Global &g, int argc, char **argv) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion &e) {
        return app.exit(e);
    } catch (const CLI::ParseError &e) {
        if (const std::string problem = command_problem(app, argc, argv); !problem.empty()) {
            return report_failure(g, kExitUsage, "usage", problem);
        }
        if (const std::string problem = option_problem(app, argc, argv); !problem.empty()) {
            return report_failure(g, kExitUsage, "usage", problem);
        }
        app.exit(e);
        return kExitUsage;
    }
    return -1;
}

// The help says what a user needs without the project's documentation, which an installed kjit
// (or the one in the Python wheel) may not have beside it.
constexpr const char *kDescription =
    "kjit: compile CUDA C++ with NVRTC into libkjit's on-disk cubin cache, find kernels' mangled names, and look "
    "after cache folders (libkjit's C ABI, as a program linking libkjit.so would)";

constexpr const char *kFooter = R"(Exit status:
  0     success (cache verify: nothing wrong, or everything found repaired)
  1-15  libkjit's status of the failure (several files: the first failed file's): 1 invalid argument
        (also a --link file of no kind nvJitLink takes), 2 not found, 3 ambiguous, 4 bad cubin, 5 I/O
        error (also a missing --link file, a remote cache server that did not answer), 6 compile error
        (NVRTC's log on stderr), 7 NVRTC error, 8 no driver, 9 driver error, 14 link failed
        (nvJitLink's log on stderr: an unresolved function, an input for another arch), 15 not
        cached and compiling refused (--compile-mode never, KJIT_NO_COMPILE=1)
  20    cache verify found damage it did not repair (run it with --fix); cache export or import
        refused entries (damaged or someone else's: listed; the others were copied)
  64    usage error: unknown command or option, missing argument, bad --max-size or --older-than
  130   interrupted (Ctrl-C) during a compile of several files

Environment (an option given on the command line wins):
  KJIT_CACHE_DIR       the cache folder; else $XDG_CACHE_HOME/kjit, else $HOME/.cache/kjit
  KJIT_ARCH            the target of a compile without --arch, e.g. sm_90a; else the GPU's
  KJIT_CACHE_MAX_SIZE  the cache's size limit, e.g. 5G (K, M, G, T); least recently used entries
                       are evicted after a compile; 0 or unset: no limit
  KJIT_REMOTE_STORAGE  the cluster tier (Redis) behind the cache; kjit compile --help has its syntax
  KJIT_CACHE_SEED      read-only seed caches looked in after the cache (DIR[:DIR...]); kjit cache export
  KJIT_BASE_DIRS       base folders (DIR[:DIR...]): a header folder under one is keyed relative to it
  KJIT_JOBS            a batch's workers (else one per CPU); KJIT_WORKER_KIND: threads, processes, auto
  KJIT_NO_COMPILE      1: a miss fails (exit 15) instead of compiling; warn: it compiles and says so
  KJIT_DURABILITY      entry: a compile fsyncs its entry before publishing it; none (default): it
                       does not (an entry a power cut tore is rebuilt by the next compile)
  KJIT_LOG_LEVEL       debug, info or warning: libkjit says what it does, on stderr
  KJIT_LIBNVRTC        the NVRTC library to load (else libnvrtc.so.<major>, then the toolkit's)
  KJIT_LIBNVJITLINK    the nvJitLink library a --link compile loads (else libnvJitLink.so.<major>, then
                       the toolkit's)

Examples:
  kjit compile gemm.cu -k gemm --arch sm_90a --name-expr 'gemm<128, 64>' -- -std=c++17
  kjit compile kernels/*.cu -k gemm -j 8      (several files: one batch, pre-warms a cache)
  kjit compile tile.cu -k tile --arch sm_90a --link cublasdx.fatbin --link-option=-O3
  kjit resolve ~/.cache/kjit/5c/5c0e.../kernel.cubin gemm
  kjit cache stats;  kjit cache prune --max-size 5G;  kjit cache verify --fix
  kjit cache export /image/kjit-seed --arch sm_90a;  KJIT_CACHE_SEED=/image/kjit-seed python serve.py)";

constexpr const char *kRemoteStorageHelp =
    "The cluster tier (default: $KJIT_REMOTE_STORAGE; none: off): servers redis://HOST[:PORT][/DB], "
    "rediss://HOST[:PORT][/DB] (TLS) or redis+unix:PATH[?db=N], separated by blanks, then options such as "
    "namespace=NAME, read-only=true, connect-timeout=100ms, operation-timeout=10s, password-file=PATH (a file only "
    "its owner can read: a password on the command line is refused, as every user can read it), ca-file=PATH; e.g. "
    "'redis://cache-host:6379 namespace=llm'";

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{kDescription, "kjit"};
    app.footer(kFooter);
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("kjit ") + kjit_version_string());
    Global g;
    auto add_common = [&](CLI::App *cmd) {
        cmd->add_flag("--json", g.json, "Print the result as JSON (errors too, as {status, code, error})");
        cmd->add_option("--cache-dir", g.cache_dir,
                        "Cache folder (default: $KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else ~/.cache/kjit)");
    };

    std::string cubin, keyword;
    CLI::App *resolve = app.add_subcommand("resolve", "Print the mangled name of KEYWORD's kernel in CUBIN");
    resolve->add_option("cubin", cubin, "The cubin file")->required();
    resolve->add_option("keyword", keyword, "The kernel's name as written in the source, e.g. gemm_tile")->required();
    add_common(resolve);

    CompileArgs compile_args;
    CLI::App *compile = app.add_subcommand(
        "compile", "Compile FILE.cu into the cache (or find it there); print the cubin's path and the kernel's name. "
                   "Several files compile as one batch: two lines each, in file order, printed as they finish (Ctrl-C: "
                   "what finished, a summary, exit status 130)");
    compile->add_option("files", compile_args.files, "CUDA C++ source files")->required();
    compile->add_option("-j,--jobs", compile_args.jobs,
                        "Several files: workers (default: $KJIT_JOBS, else one per CPU)");
    compile
        ->add_option("--workers", compile_args.workers,
                     "Several files: compile on threads, worker processes, or auto: processes for files with "
                     "#include on more than one worker (default: $KJIT_WORKER_KIND, else auto)")
        ->check(CLI::IsMember({"threads", "processes", "auto"}));
    compile->add_flag("--no-pch", compile_args.no_pch, "Several files: no NVRTC precompiled header");
    compile->add_option("--keyword,-k", compile_args.keyword, "The kernel's name as written in the source")->required();
    compile->add_option("--arch", compile_args.arch, "Target such as sm_90a (default: $KJIT_ARCH, else the GPU's)");
    compile->add_option("--name-expr", compile_args.name_expression, "C++ name expression, e.g. 'gemm<128, 64>'");
    compile->add_option("--program-name", compile_args.program_name,
                        "The NVRTC program's name, in its log, device asserts and the key (default: the file as "
                        "given; its folder is searched first for the file's quoted includes)");
    compile
        ->add_option("--compile-mode", compile_args.compile_mode,
                     "Whether a miss may compile: always; warn (compile, and say so once per kernel); never (a "
                     "miss fails with exit status 15 at once, NVRTC not run: a serving process). "
                     "Default: $KJIT_NO_COMPILE (1: never, warn), else always")
        ->check(CLI::IsMember({"always", "warn", "never"}));
    compile->add_option("--remote-storage", compile_args.remote_storage, kRemoteStorageHelp);
    compile->add_option("-I,--include-path", compile_args.include_paths, "Folder searched for #include (repeatable)")
        ->allow_extra_args(false);
    compile
        ->add_option("--seed", compile_args.seed_dirs,
                     "Seed cache: a read-only cache folder looked in after the cache, never written (repeatable, in "
                     "order; default: $KJIT_CACHE_SEED, folders separated by ':'; none: no seed)")
        ->allow_extra_args(false);
    compile
        ->add_option("--base-dir", compile_args.base_dirs,
                     "Base folder, as ccache's base_dir: a header folder under it is keyed by its path relative to "
                     "it, so a cache built under one install prefix hits under another (absolute; repeatable, in "
                     "order; default: $KJIT_BASE_DIRS, folders separated by ':'; none: none)")
        ->allow_extra_args(false);
    compile
        ->add_option("--link", compile_args.link_inputs,
                     "Link the kernel with this file through nvJitLink: LTO-IR, a cubin, fatbin, PTX, a relocatable "
                     "object or a library of them (repeatable, in order); its content is in the key")
        ->allow_extra_args(false);
    compile
        ->add_option("--link-option", compile_args.link_options,
                     "An nvJitLink option for --link, e.g. --link-option=-O3 (repeatable, in order; not -arch)")
        ->allow_extra_args(false);
    compile->footer("NVRTC options go after --, e.g. kjit compile k.cu -k gemm -- -std=c++17 -DTILE=128");
    add_common(compile);

    kjit_cli::WarmArgs warm_args;
    CLI::App *warm = app.add_subcommand(
        "warm", "Compile every request of request records (KJIT_RECORD=FILE, kjit_record_start) ahead of time, as "
                "one batch, into the cache: what a serving process with KJIT_NO_COMPILE=1 will ask for");
    warm->add_option("records", warm_args.records, "Record files (JSON lines), in order")->required();
    warm->add_option("--arch", warm_args.archs, "Each request for this arch (repeatable; default: as recorded)");
    warm->add_option("-j,--jobs", warm_args.jobs, "Workers (default: $KJIT_JOBS, else one per CPU)");
    warm->add_option("--workers", warm_args.workers, "Compile on threads, worker processes, or auto")
        ->check(CLI::IsMember({"threads", "processes", "auto"}));
    warm->add_option("--seed", warm_args.seed_dirs, "A seed cache asked before compiling (repeatable)");
    warm->add_option("--base-dir", warm_args.base_dirs,
                     "A base folder, as kjit compile --base-dir (repeatable, in order; default: $KJIT_BASE_DIRS)");
    warm->add_option("--remote-storage", warm_args.remote_storage, kRemoteStorageHelp);
    add_common(warm);

    CLI::App *cache = app.add_subcommand("cache", "Look after a cache folder");
    cache->require_subcommand(1);
    CLI::App *stats = cache->add_subcommand("stats", "Entries, bytes, oldest and newest, by arch");
    bool remote = false;
    std::string remote_storage;
    stats->add_flag("--remote", remote,
                    "Also what the cluster tier's Redis servers say of themselves (memory, eviction, libkjit entries)");
    stats->add_option("--remote-storage", remote_storage, std::string("For --remote: ") + kRemoteStorageHelp);
    add_common(stats);
    bool fix = false;
    CLI::App *verify = cache->add_subcommand("verify", "Check every entry; --fix repairs what it finds");
    verify->add_flag("--fix", fix, "Rebuild damaged sidecars, remove broken entries and stale temp folders");
    add_common(verify);
    std::string max_size, older_than;
    CLI::App *prune = cache->add_subcommand("prune", "Remove least recently used entries");
    prune->add_option("--max-size", max_size, "Keep the cache within this size, e.g. 2G");
    prune->add_option("--older-than", older_than, "Remove entries not used for this long, e.g. 30d, 12h");
    add_common(prune);
    CLI::App *clear = cache->add_subcommand("clear", "Remove every entry");
    add_common(clear);
    std::string copy_dir, export_arch;
    CLI::App *export_cmd = cache->add_subcommand(
        "export", "Write the cache's sound entries into DIR as a seed cache (entries only: no usage record, lock or "
                  "temp folder), for a container image or a read-only share; damaged ones are refused and listed");
    export_cmd->add_option("dir", copy_dir, "The seed folder to write (created when missing)")->required();
    export_cmd->add_option("--arch", export_arch, "Only the entries of this arch, e.g. sm_90a");
    add_common(export_cmd);
    CLI::App *import_cmd = cache->add_subcommand(
        "import", "Copy the sound entries of DIR (a seed cache, an export) into the cache; damaged ones are refused "
                  "and listed");
    import_cmd->add_option("dir", copy_dir, "The folder to copy from")->required();
    add_common(import_cmd);

    // Everything after "--" is NVRTC options (CLI11 would give them to the file list).
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--") {
            compile_args.nvrtc_options.assign(argv + i + 1, argv + argc);
            argc = i;
            break;
        }
    }
    if (const int status = parse_command_line(app, g, argc, argv); status >= 0) return status;
    // A password given here would be in /proc/PID/cmdline, which every user of the machine reads;
    // and a malformed setting is said before any work starts.
    for (const std::string *spec : {&compile_args.remote_storage, &remote_storage, &warm_args.remote_storage}) {
        if (spec->empty()) continue;
        if (const kjit_status st = kjit_remote_check(spec->c_str(), KJIT_REMOTE_CHECK_NO_PASSWORD); st != KJIT_OK) {
            return report_failure(g, st, kjit_status_string(st), std::string("--remote-storage: ") + kjit_last_error());
        }
    }
    for (const std::string &dir : compile_args.seed_dirs) compile_args.seed_pointers.push_back(dir.c_str());
    for (const std::string &dir : compile_args.base_dirs) compile_args.base_pointers.push_back(dir.c_str());
    for (const std::string &f : compile_args.link_inputs) compile_args.link_pointers.push_back(f.c_str());
    for (const std::string &o : compile_args.link_options) compile_args.link_option_pointers.push_back(o.c_str());
    try {
        if (*resolve) return run_resolve(g, cubin, keyword);
        if (*compile) return run_compile(g, compile_args);
        if (*warm) {
            warm_args.cache_dir = g.cache_dir;
            warm_args.json = g.json;
            return kjit_cli::run_warm(warm_args);
        }
        if (*stats) return run_stats(g, remote || !remote_storage.empty() ? &remote_storage : nullptr);
        if (*verify) return run_verify(g, fix);
        if (*prune) {
            if (max_size.empty() && older_than.empty()) {
                return report_failure(g, kExitUsage, "usage", "cache prune needs --max-size or --older-than (or both)");
            }
            return run_prune(g, max_size, older_than);
        }
        if (*clear) return run_clear(g);
        if (*export_cmd) return run_copy(g, true, copy_dir, export_arch);
        if (*import_cmd) return run_copy(g, false, copy_dir, std::string());
    } catch (const std::exception &e) {
        return report_failure(g, KJIT_ERROR_INTERNAL, kjit_status_string(KJIT_ERROR_INTERNAL), e.what());
    }
    return kExitUsage;
}
