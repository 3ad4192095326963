#include "compile/compiler.hpp"

#include "compile/nvrtc_library.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>

namespace kjit::compile::compiler {

namespace {

using compile::nvrtc_library::Api;

// Owns an nvrtcProgram (destroyed with it).
class ProgramHandle {
public:
    explicit ProgramHandle(const Api &api) : api_(api) {}
    ProgramHandle(const ProgramHandle &) = delete;
    ProgramHandle &operator=(const ProgramHandle &) = delete;
    ~ProgramHandle() {
        if (prog_) api_.nvrtcDestroyProgram(&prog_);
    }
    nvrtcProgram *out() { return &prog_; }
    nvrtcProgram get() const { return prog_; }

private:
    const Api &api_;
    nvrtcProgram prog_ = nullptr;
};

// Errc::nvrtc saying that `what` failed with NVRTC's result `r`, or Ok on success.
Status check(const Api &api, nvrtcResult r, const char *what) {
    if (r == NVRTC_SUCCESS) return Ok{};
    return Error{Errc::nvrtc, std::string(what) + " failed: " + api.nvrtcGetErrorString(r)};
}

// The gate compiles pass (compiler.hpp): fork() waits here for the NVRTC calls in flight.
struct Gate {
    std::mutex mutex;
    std::condition_variable changed;
    int inside = 0;             // compiles that passed in and have not left (Passage)
    bool fork_pending = false;  // a prepare handler closed the gate
    bool unusable = false;      // a forked child whose fork did not wait until the gate was empty
};
Gate gate;
std::atomic<std::int64_t> fork_wait_ms{120'000};

void close_gate_and_wait() {
    std::unique_lock<std::mutex> lock(gate.mutex);
    gate.fork_pending = true;
    gate.changed.wait_for(lock, std::chrono::milliseconds(fork_wait_ms.load()), [] { return gate.inside == 0; });
}

void open_gate_in_parent() {
    {
        std::lock_guard<std::mutex> lock(gate.mutex);
        gate.fork_pending = false;
    }
    gate.changed.notify_all();
}

// In the child, `inside` is what it was at the fork: nobody could enter after the prepare
// handler's wait, so anything left inside is a compile the wait gave up on, maybe holding
// NVRTC's lock. (A thread of the parent may hold the gate's own lock: it is made anew.)
void renew_gate_in_forked_child() {
    const bool busy = gate.inside != 0;
    fork_guard::renew(gate.mutex);
    fork_guard::renew(gate.changed);
    gate.inside = 0;
    gate.fork_pending = false;
    if (busy) gate.unusable = true;
}
[[maybe_unused]] const bool fork_handlers_registered =
    fork_guard::at_fork(fork_guard::State::nvrtc_gate, close_gate_and_wait, open_gate_in_parent,
                        renew_gate_in_forked_child);

// One compile inside the gate.
class Passage {
public:
    Passage() {
        std::unique_lock<std::mutex> lock(gate.mutex);
        gate.changed.wait(lock, [] { return !gate.fork_pending; });
        if (gate.unusable) return;
        ++gate.inside;
        entered_ = true;
    }
    Passage(const Passage &) = delete;
    Passage &operator=(const Passage &) = delete;
    ~Passage() {
        if (!entered_) return;
        {
            std::lock_guard<std::mutex> lock(gate.mutex);
            --gate.inside;
        }
        gate.changed.notify_all();
    }
    bool entered() const { return entered_; }

private:
    bool entered_ = false;
};

std::string program_log(const Api &api, nvrtcProgram prog) {
    size_t size = 0;
    if (api.nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return {};
    std::string log(size, '\0');
    if (api.nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return {};
    log.resize(size - 1);  // drop the NUL
    return log;
}

// NVRTC options that take a value (nvrtc.h, "Supported Compile Options"), which may come as the
// next option: that string is a value, never an option. Single-letter ones (-D, -U, -I) also
// take it joined ("-DX"), which the prefix test below does not confuse with these names.
bool takes_separate_value(std::string_view name) {
    // A list of names reads best packed (clang-format 14 would put one per line).
    // clang-format off
    static const char *const kNames[] = {
        "gpu-architecture", "arch", "relocatable-device-code", "rdc", "dopt", "Ofast-compile", "Ofc",
        "ptxas-options", "Xptxas", "maxrregcount", "ftz", "prec-sqrt", "prec-div", "fmad", "modify-stack-limit",
        "jump-table-density", "jtd", "device-stack-protector", "frandom-seed", "define-macro", "D",
        "undefine-macro", "U", "include-path", "I", "pre-include", "include", "std", "builtin-move-forward",
        "builtin-initializer-list", "optimization-info", "opt-info", "diag-error", "diag-suppress", "diag-warn",
        "brief-diagnostics", "brief-diag", "time", "split-compile", "fdevice-time-trace"};
    // clang-format on
    if (name.compare(0, 1, "-") != 0) return false;
    name.remove_prefix(name.compare(0, 2, "--") == 0 ? 2 : 1);
    for (const char *n : kNames) {
        if (name == n) return true;
    }
    return false;
}

enum class PchKind { automatic, notes, shape, user_files };

// The PCH option `o` names (one or two dashes), if any, and where its name ends.
std::optional<std::pair<PchKind, std::size_t>> pch_option(const std::string &o) {
    static const std::pair<const char *, PchKind> kNames[] = {
        {"pch", PchKind::automatic},         {"pch-messages", PchKind::notes},
        {"pch-verbose", PchKind::notes},     {"instantiate-templates-in-pch", PchKind::shape},
        {"create-pch", PchKind::user_files}, {"use-pch", PchKind::user_files},
        {"pch-dir", PchKind::user_files},
    };
    if (o.compare(0, 1, "-") != 0) return std::nullopt;
    const std::size_t start = o.compare(0, 2, "--") == 0 ? 2 : 1;
    for (const auto &[name, kind] : kNames) {
        const std::size_t len = std::strlen(name);
        if (o.compare(start, len, name) != 0) continue;
        const std::size_t end = start + len;
        // The name alone, "=value", or a value after blanks in the same string.
        if (end == o.size() || o[end] == '=' || o[end] == ' ' || o[end] == '\t') return std::make_pair(kind, end);
    }
    return std::nullopt;
}

}  // namespace

namespace {

// The spellings of the options that only name an output file, and what NVRTC writes there.
struct OutputFileOption {
    std::string_view prefix;
    std::string_view keyed;  // both spellings key alike
    bool trace;              // a JSON trace in <value>.json; else a CSV appended to <value>
};
constexpr OutputFileOption kOutputFileOptions[] = {{"-time=", "-time=<file>", false},
                                                   {"--time=", "-time=<file>", false},
                                                   {"-fdevice-time-trace=", "-fdevice-time-trace=<file>", true},
                                                   {"--fdevice-time-trace=", "-fdevice-time-trace=<file>", true}};

const OutputFileOption *output_file_option(const std::string &option) {
    for (const OutputFileOption &o : kOutputFileOptions) {
        if (option.size() > o.prefix.size() && option.compare(0, o.prefix.size(), o.prefix) == 0) return &o;
    }
    return nullptr;
}

// The file NVRTC writes for the output-file option `o` whose value is `value`: the CSV itself,
// or the trace's "<value>.json" ("-": "<program name>.json"); "" for "-time=-" (standard output).
std::string output_file_of(const OutputFileOption &o, const std::string &value, const std::string &program_name) {
    if (!o.trace) return value == "-" ? std::string() : value;
    return (value == "-" ? (program_name.empty() ? std::string("source.cu") : program_name) : value) + ".json";
}

// Why the file `path` cannot be opened for writing, as NVRTC will open it (created when
// missing): "" when it can. Creates nothing: an empty file would change what NVRTC writes
// (the CSV's header line), and one removed again could be another process's trace.
std::string cannot_write(const std::string &path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) return "it is a folder";
        // Opened, never truncated or written: a FIFO without a reader fails here too (ENXIO),
        // where NVRTC would wait for one.
        const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) return std::string("it cannot be opened for writing: ") + std::strerror(errno);
        ::close(fd);
        return {};
    }
    if (errno != ENOENT) return std::string("it cannot be reached: ") + std::strerror(errno);
    const std::size_t slash = path.find_last_of('/');
    const std::string folder = slash == std::string::npos ? std::string(".")
                               : slash == 0               ? std::string("/")
                                                          : path.substr(0, slash);
    if (::stat(folder.c_str(), &st) != 0) {
        return "its folder '" + folder + "' " + (errno == ENOENT ? "does not exist" : std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return "'" + folder + "' is not a folder";
    if (::faccessat(AT_FDCWD, folder.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
        return "no file can be created in its folder '" + folder + "': " + std::strerror(errno);
    }
    return {};
}

}  // namespace

std::string keyed_option(const std::string &option) {
    const OutputFileOption *o = output_file_option(option);
    return o ? std::string(o->keyed) : option;
}

Status check_output_files(const std::vector<std::string> &options, const std::string &program_name) {
    for (const std::string &option : options) {
        const OutputFileOption *o = output_file_option(option);
        if (!o) continue;
        const std::string path = output_file_of(*o, option.substr(o->prefix.size()), program_name);
        if (path.empty()) continue;
        if (const std::string why = cannot_write(path); !why.empty()) {
            return Error{Errc::io, "NVRTC option '" + option + "' names the file '" + path +
                                       "' for its output, which cannot be written: " + why +
                                       (o->trace ? " (NVRTC would abort the whole process on it)" : "") +
                                       "; create the folder, or name a file that can be written"};
        }
    }
    return Ok{};
}

void create_output_files_of_hit(const std::vector<std::string> &options, const std::string &program_name) {
    for (const std::string &option : options) {
        const OutputFileOption *o = output_file_option(option);
        if (!o) continue;
        const std::string path = output_file_of(*o, option.substr(o->prefix.size()), program_name);
        if (path.empty()) continue;  // standard output: nothing was timed
        // O_EXCL: created here or left alone, never truncated (a compile's rows stay).
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            if (errno != EEXIST)
                log().debug("cannot create '{}' named by NVRTC option '{}': {}", path, option, std::strerror(errno));
            continue;
        }
        const std::string_view start = o->trace ? std::string_view("{\"traceEvents\":[]}\n")
                                                : std::string_view("File name, phase name, metric, unit\n");
        if (::write(fd, start.data(), start.size()) != static_cast<ssize_t>(start.size())) {
            log().debug("cannot write '{}' named by NVRTC option '{}': {}", path, option, std::strerror(errno));
        }
        ::close(fd);
    }
}

Result<PchOptions> take_pch_options(const std::vector<std::string> &options) {
    PchOptions out;
    const std::size_t n = options.size();
    for (std::size_t i = 0; i < n; ++i) {
        const std::string &o = options[i];
        const auto pch = pch_option(o);
        if (!pch) {
            out.rest.push_back(o);
            if (takes_separate_value(o) && i + 1 < n) out.rest.push_back(options[++i]);
            continue;
        }
        const auto [kind, name_end] = *pch;
        const std::string name = o.substr(0, name_end);
        std::string given = o;  // as the caller wrote it, for messages
        std::optional<std::string> value;
        if (name_end < o.size() && o[name_end] != '=') {
            return Error{Errc::invalid_argument, "NVRTC option '" + o + "': write its value after '=' (" + name +
                                                     "=<value>), not after a blank"};
        }
        if (name_end < o.size()) {
            value = o.substr(name_end + 1);
        } else if (kind != PchKind::automatic) {
            if (i + 1 >= n) {
                return Error{Errc::invalid_argument, "NVRTC option '" + o +
                                                         "' has no value after it (it would take the next option "
                                                         "libkjit passes as its value)"};
            }
            value = options[++i];
            given += " " + *value;
        }
        switch (kind) {
            case PchKind::automatic:
                if (value) {
                    return Error{Errc::invalid_argument, "NVRTC option '" + given + "': " + name + " takes no value"};
                }
                out.automatic = true;
                break;
            case PchKind::notes:
            case PchKind::shape:
                if (*value != "true" && *value != "false") {
                    return Error{Errc::invalid_argument,
                                 "NVRTC option '" + given + "': " + name + " takes true or false"};
                }
                if (kind == PchKind::shape) out.shape.push_back("--instantiate-templates-in-pch=" + *value);
                break;  // notes: libkjit keeps NVRTC's PCH notes out of the log anyway
            case PchKind::user_files:
                return Error{Errc::invalid_argument,
                             "NVRTC option '" + given +
                                 "' names a precompiled header file or folder of the caller's, which NVRTC would "
                                 "use without checking that it was made from the headers this compile reads (a "
                                 "stale kernel under a new key); pass '--pch' instead: libkjit keeps NVRTC's "
                                 "automatic PCHs in a folder per header identity (docs/batch.md)"};
        }
    }
    return out;
}

namespace {

// What a compile that failed was most likely missing, from NVRTC's log: a line to put before
// the log (empty when nothing is recognised).
std::string hint_for(const Program &request, const std::string &log) {
    if (log.find("__nv_name_map") != std::string::npos && !request.name_expressions.empty()) {
        std::string names;
        for (const std::string &e : request.name_expressions) names += (names.empty() ? "'" : ", '") + e + "'";
        return "the name expression " + names +
               " names no instantiation of a template in the source (check the template's name and arguments: "
               "NVRTC reads it as C++ in a file of its own, __nv_name_map below)";
    }
    if (log.find("cannot open source file") != std::string::npos) {
        std::string searched;
        for (const std::string &o : request.options) {
            if (o.compare(0, 2, "-I") == 0 && o.size() > 2) searched += (searched.empty() ? "" : ", ") + o.substr(2);
        }
        return "a header was not found; folders searched for includes: " +
               (searched.empty() ? std::string("none besides NVRTC's own") : searched) +
               "; add the header's folder to the include paths, or pass the header in memory";
    }
    return {};
}

}  // namespace

std::vector<std::string> supported_archs() {
    auto loaded = compile::nvrtc_library::api();
    std::vector<std::string> out;
    if (!loaded || !(*loaded)->nvrtcGetNumSupportedArchs || !(*loaded)->nvrtcGetSupportedArchs) return out;
    int n = 0;
    if ((*loaded)->nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 1024) return out;
    std::vector<int> archs(static_cast<std::size_t>(n));
    if ((*loaded)->nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return out;
    for (int a : archs) out.push_back("sm_" + std::to_string(a));
    return out;
}

namespace {

// The compiled program's cubin, or its LTO-IR when the request links, into `out`.
Status take_output(const Api &api, nvrtcProgram prog, const Program &request, std::string &out) {
    const bool lto = !request.link_inputs.empty();
    size_t size = 0;
    if (lto) {
        if (!api.nvrtcGetLTOIRSize || !api.nvrtcGetLTOIR) {
            return Error{Errc::nvrtc, "this NVRTC cannot give LTO-IR (no nvrtcGetLTOIR), which a link needs"};
        }
        KJIT_TRY(check(api, api.nvrtcGetLTOIRSize(prog, &size), "nvrtcGetLTOIRSize"));
    } else if (auto st = check(api, api.nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize"); !st) {
        return st;
    }
    if (size == 0) {
        return Error{Errc::nvrtc, lto ? "NVRTC produced no LTO-IR for '" + request.program_name + "'"
                                      : "NVRTC produced no cubin for '" + request.program_name +
                                            "' (a virtual compute_XX target gives PTX only; use -arch=sm_XX)"};
    }
    out.resize(size);
    if (lto) return check(api, api.nvrtcGetLTOIR(prog, out.data()), "nvrtcGetLTOIR");
    return check(api, api.nvrtcGetCUBIN(prog, out.data()), "nvrtcGetCUBIN");
}

// NVRTC's part of compile(), inside the gate: the cubin, or with link inputs the LTO-IR (in
// Output::cubin).
Result<Output> run_nvrtc(const Api &api, const Program &request) {
    std::vector<const char *> header_sources, header_names, options;
    for (const auto &h : request.headers) {
        header_names.push_back(h.first.c_str());
        header_sources.push_back(h.second.c_str());
    }
    for (const auto &o : request.options) options.push_back(o.c_str());

    ProgramHandle prog(api);
    KJIT_TRY(
        check(api,
              api.nvrtcCreateProgram(prog.out(), request.source.c_str(), request.program_name.c_str(),
                                     static_cast<int>(header_names.size()), header_sources.data(), header_names.data()),
              "nvrtcCreateProgram"));
    for (const auto &e : request.name_expressions) {
        KJIT_TRY(check(api, api.nvrtcAddNameExpression(prog.get(), e.c_str()), "nvrtcAddNameExpression"));
    }
    const nvrtcResult compiled = api.nvrtcCompileProgram(prog.get(), static_cast<int>(options.size()), options.data());
    Output out;
    out.log = program_log(api, prog.get());
    if (compiled == NVRTC_ERROR_COMPILATION) {
        const std::string hint = hint_for(request, out.log);
        return Error{Errc::compile, "NVRTC could not compile '" + request.program_name + "'" +
                                        (hint.empty() ? "" : ": " + hint) + ":\n" + out.log};
    }
    if (compiled != NVRTC_SUCCESS) {
        std::string msg = std::string("nvrtcCompileProgram failed for '") + request.program_name +
                          "': " + api.nvrtcGetErrorString(compiled);
        if (!out.log.empty()) msg += "\n" + out.log;
        return Error{Errc::nvrtc, std::move(msg)};
    }
    KJIT_TRY(take_output(api, prog.get(), request, out.cubin));
    for (const auto &e : request.name_expressions) {
        const char *lowered = nullptr;
        KJIT_TRY(check(api, api.nvrtcGetLoweredName(prog.get(), e.c_str(), &lowered), "nvrtcGetLoweredName"));
        out.lowered_names.emplace_back(e, lowered ? lowered : "");
    }
    return out;
}

}  // namespace

Result<Output> compile(const Program &request) {
    // Before NVRTC: an output file it cannot open makes NVRTC 13 abort the process
    // (-fdevice-time-trace), here or in a worker process alike.
    KJIT_TRY(check_output_files(request.options, request.program_name));
    // Loaded before the gate: opening NVRTC takes none of its locks, and a process without it
    // gets the error without waiting for a fork.
    KJIT_TRY_ASSIGN(auto loaded, compile::nvrtc_library::api());
    // The link passes the gate too: nvJitLink runs NVVM and ptxas, whose locks a child forked
    // mid-link would find held for ever, as NVRTC's.
    const Passage passage;
    if (!passage.entered()) {
        const std::int64_t ms = fork_wait_ms.load();
        return Error{Errc::nvrtc, "NVRTC cannot be used in this process: it was forked while another thread of its "
                                  "parent was compiling for longer than fork waits for a compile (" +
                                      (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms") +
                                      "), and NVRTC may hold a lock of its own that no thread here will let go; "
                                      "compile in the parent, or in a process started afresh (spawn, not fork)"};
    }
    auto out = run_nvrtc(*loaded, request);
    if (!out || request.link_inputs.empty()) return out;
    const auto start = std::chrono::steady_clock::now();
    std::string info;
    KJIT_TRY_ASSIGN(auto linked, linker::link(out->cubin, request.program_name, request.link_arch, request.link_inputs,
                                              request.link_options, &info));
    out->link_nanoseconds =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    out->cubin = std::move(linked);
    if (!info.empty()) out->log += (out->log.empty() ? "" : "\n") + info;
    return out;
}

std::chrono::milliseconds fork_wait() { return std::chrono::milliseconds(fork_wait_ms.load()); }

void set_fork_wait(std::chrono::milliseconds wait) { fork_wait_ms.store(wait.count()); }

Result<std::string> nvrtc_version() {
    KJIT_TRY_ASSIGN(auto loaded, compile::nvrtc_library::api());
    return (loaded)->version;
}

Result<std::string> nvrtc_identity() {
    KJIT_TRY_ASSIGN(auto loaded, compile::nvrtc_library::api());
    return (loaded)->identity;
}

}  // namespace kjit::compile::compiler
