// Compiler: one NVRTC program -> cubin bytes, the compile log and lowered names; with link
// inputs, NVRTC's LTO-IR linked with them by the linker (nvJitLink). Knows NVRTC (reached
// through nvrtc_library, which dlopens it on first need) and the linker: no files, no cache.
#pragma once

#include "compile/linker.hpp"
#include "util/status.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kjit::compile::compiler {

// One NVRTC program: what one compile (and, with link inputs, its link) runs on. Not the cache's
// request (key::Request), which says what is asked; the cache makes one of these of it.
struct Program {
    std::string source;
    std::string program_name = "kjit_program.cu";              // shown in NVRTC's diagnostics
    std::vector<std::string> options;                          // e.g. "-arch=sm_90", "-std=c++17"
    std::vector<std::pair<std::string, std::string>> headers;  // (include name, source)
    std::vector<std::string> name_expressions;                 // e.g. "gemm<128, 64>"
    // With link inputs: `options` ask NVRTC for LTO-IR (-dlto), which is linked with these, in
    // order, for `link_arch` with `link_options` (linker::link); the linked cubin is the output.
    std::vector<linker::Input> link_inputs;
    std::vector<std::string> link_options;
    std::string link_arch;  // e.g. "sm_90"
};

// The archs this NVRTC compiles for ("sm_75", ...), for messages; empty when it cannot say.
std::vector<std::string> supported_archs();

struct Output {
    std::string cubin;
    std::string log;
    std::vector<std::pair<std::string, std::string>> lowered_names;  // (expression, mangled name)
    std::int64_t link_nanoseconds = -1;                              // the link's wall time; -1: no link
};

// Compiles `request` (and links it, with link inputs: Errc::link with nvJitLink's log naming
// the input, linker::link). Errc::compile with the whole NVRTC log when the source does not compile;
// Errc::nvrtc with NVRTC's text for other NVRTC failures (unknown option, no cubin for a
// virtual arch, ...), when NVRTC cannot be loaded (compile::nvrtc_library::api()'s message: what was
// tried, what to do), and in a child forked while NVRTC was busy (below). Thread safe: NVRTC
// programs are independent.
//
// fork(): NVRTC holds a process-wide lock of its own inside a compile. A child forked while
// another thread held it would wait for it for ever at its first compile, and that lock is not
// libkjit's to renew (fork_guard.hpp). So compiles (and their links: nvJitLink runs NVVM and
// ptxas) pass a gate, and fork() waits there: a
// prepare handler closes the gate (compiles that start meanwhile wait in front of it), waits
// until the compiles inside have left, at most fork_wait(), and the parent's handler opens it
// again. A fork therefore takes up to one compile longer while this process compiles. A child
// forked when the wait ran out may not call NVRTC: its compiles fail at once with Errc::nvrtc,
// saying why, never hang.
Result<Output> compile(const Program &request);

// NVRTC's precompiled-header options (CUDA 12.8+: -pch, -create-pch, -use-pch, -pch-dir,
// -pch-verbose, -pch-messages, -instantiate-templates-in-pch; one or two dashes; a value after
// '=' or as the next option), taken out of a caller's option list. NVRTC reuses a PCH without
// checking the headers it was made from, so none of them reaches NVRTC as given: the cache maps
// the automatic PCH onto a folder per header identity (pch_folders.hpp) and refuses the ones
// that name the caller's own PCH files or folders.
struct PchOptions {
    bool automatic = false;          // -pch / --pch: the caller asks for the automatic PCH
    std::vector<std::string> shape;  // "--instantiate-templates-in-pch=<v>": passed with libkjit's PCH
    std::vector<std::string> rest;   // every other option, in order
};
// Errc::invalid_argument naming the option for -create-pch, -use-pch and -pch-dir (in any
// spelling), a value on -pch, a value other than true/false where NVRTC wants one, a value
// missing at the end, or a blank between a PCH option and its value in one string. The notes
// options (-pch-messages, -pch-verbose) are dropped: libkjit keeps NVRTC's PCH notes out of the
// log. The values of other options that take one as a separate string (-D, -I, -std, ...) are
// never read as options.
Result<PchOptions> take_pch_options(const std::vector<std::string> &options);
// NVRTC options that only name a file NVRTC writes (measured with NVRTC 13): -time=FILE and
// --time=FILE (phase times as CSV rows, appended; "-": standard output) and
// -fdevice-time-trace=FILE and --fdevice-time-trace=FILE (a Chrome trace written to FILE.json;
// "-": <program name>.json). The path does not change the cubin: a per-process file must not
// split the key. `option` as the key (and the manifest) sees it: such an option with its path
// left out, either spelling as one ("-time=<file>"); any other option as given.
std::string keyed_option(const std::string &option);

// Before a compile: each file those options in `options` name (as NVRTC will: "-" of a trace is
// `program_name`.json) can be opened for writing, so NVRTC never meets one it cannot: NVRTC 13
// aborts the process when it cannot open a trace's file (SIGABRT, "Could not open <file>.json")
// and fails a compile on a CSV's. Errors: io naming the option, the file and why (its folder
// missing, a folder in its place, no permission). Creates nothing. Thread safe.
Status check_output_files(const std::vector<std::string> &options, const std::string &program_name);

// After a hit, which ran no NVRTC: each file those options in `options` name that does not exist
// yet is created as NVRTC starts it (the CSV's header line; a trace without events), so that
// what reads it finds it; an existing file is left as it is (NVRTC appends to the CSV).
// `program_name`: the program's name ("" for the default), which names the trace of "-". Best
// effort: a file that cannot be written is said in the debug log. Thread safe.
void create_output_files_of_hit(const std::vector<std::string> &options, const std::string &program_name);

// How long fork() waits for compiles in flight: 120 s unless set (for tests).
std::chrono::milliseconds fork_wait();
void set_fork_wait(std::chrono::milliseconds wait);

// NVRTC's version as "major.minor"; loads NVRTC if it is not yet (Errc::nvrtc when it cannot).
Result<std::string> nvrtc_version();

// What identifies the NVRTC build in use beyond major.minor (patch releases change code
// generation): "major.minor libnvrtc.so.X.Y.Z <file size>", from the loaded library's file.
// The folder is left out, so the same toolkit installed elsewhere gives the same identity.
// Part of every cache key, so a lookup needs NVRTC loaded too; Errc::nvrtc when it cannot be.
Result<std::string> nvrtc_identity();

}  // namespace kjit::compile::compiler
