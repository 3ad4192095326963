// Helpers shared by the tests: cubins made with NVRTC at test time (no binary fixtures),
// temporary folders, and small file utilities.
#pragma once

#include "fake_cuda.h"

#include <functional>
#include <string>
#include <vector>

namespace kjit_test {

// Kernels the tests compile; each names the symbols it yields in a comment.
namespace sources {
// _Z12plain_kernelPf
extern const char *const kPlain;
// _Z4tmplILi4EEvPf
extern const char *const kTemplateOne;
// _Z4tmplILi1EEvPf, _Z4tmplILi2EEvPf, _Z4tmplILi3EEvPf
extern const char *const kTemplateSeveral;
// _Z4gemmPf and _Z9gemm_fp16Pf
extern const char *const kPrefixCollision;
// kernel _Z5scalePf and __device__ __noinline__ _Z11scale_valuef (the device function keeps
// its own symbol only with -rdc=true; whole-program mode names its clone $_Z5scalePf$...)
extern const char *const kDeviceFunction;
// extern "C" c_kernel
extern const char *const kExternC;
// _ZN3ops4normEPf and _ZN4ops24normEPf
extern const char *const kNamespaces;

// Kernel number `i` of a family of distinct entries: gemm<i + 1>, named _Z4gemmILi<i+1>EEvPf.
std::string numbered_gemm(int i);
std::string numbered_gemm_name(int i);
}  // namespace sources

// Compiles `source` with NVRTC for sm_90 (plus `extra_options`) and returns the cubin. Results
// are cached within the process. Aborts the test binary (with NVRTC's log) if NVRTC fails.
const std::string &cubin_for(const std::string &source, const std::vector<std::string> &extra_options = {});

// `source` compiled with NVRTC (-rdc=true) for `arch` ("sm_90") as a device library ships:
// LTO-IR (-dlto) or a relocatable cubin. Aborts the test binary (with NVRTC's log) if NVRTC fails.
enum class DeviceCode { ltoir, relocatable_cubin };
std::string device_code_for(const std::string &source, const std::string &arch, DeviceCode kind);

// The CUDA driver test double (tests/fake_cuda), reached by dlopen()ing $KJIT_LIBCUDA: the same
// library libkjit loads, so its counters see libkjit's calls. Aborts if KJIT_LIBCUDA is unset or
// names something else.
struct FakeCuda {
    void (*get_counters)(fake_cuda_counters *) = nullptr;
    fake_cuda_counters counters() const {
        fake_cuda_counters c{};
        get_counters(&c);
        return c;
    }
    void (*set_device_sm)(unsigned) = nullptr;
    void (*set_child_init_result)(int) = nullptr;
    void (*set_init_delay_ms)(unsigned) = nullptr;
    const char *(*kernel_name)(const void *) = nullptr;
    const char *(*function_name)(const void *) = nullptr;
    // Makes the double's primary context current on the calling thread (nullptr: none).
    void make_context_current(bool current) const;

    int (*ctx_retain)(void **, int) = nullptr;
    int (*ctx_set_current)(void *) = nullptr;
};
const FakeCuda &fake_cuda();

// A fresh folder under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
public:
    TempDir();
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    ~TempDir();
    const std::string &path() const { return path_; }
    std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

// An environment variable set for one scope, then put back as it was (unset if it was).
class ScopedEnv {
public:
    ScopedEnv(const char *name, const char *value);
    ScopedEnv(const ScopedEnv &) = delete;
    ScopedEnv &operator=(const ScopedEnv &) = delete;
    ~ScopedEnv();

private:
    std::string name_;
    bool had_ = false;
    std::string old_;
};

// A cubin compiled by cubin_for() and written as `k.cubin` in a fresh folder of its own.
struct Cubin {
    TempDir dir;
    std::string path;
    explicit Cubin(const std::string &source, const std::vector<std::string> &options = {});
};

// dlsym(lib, symbol) as the function pointer type `Fn`; aborts, naming `what` and the symbol,
// if it is missing (a test set-up that cannot go on).
void *dlsym_or_abort(void *lib, const char *symbol, const char *what);
template <typename Fn>
void take_symbol(void *lib, Fn &fn, const char *symbol, const char *what) {
    fn = reinterpret_cast<Fn>(dlsym_or_abort(lib, symbol, what));
}

// Writes `bytes` to `path` (replacing it through a rename, as a cache publish does).
void write_file(const std::string &path, const std::string &bytes);
// The whole file, or "" if it cannot be read.
std::string read_file(const std::string &path);
bool exists(const std::string &path);
// Runs `body` in a forked child and returns its exit code, or 128 + the signal that killed it:
// for code that may abort the whole process, or a check of what a fresh process maps.
int in_child(const std::function<int()> &body);
// Entry names in `dir`, sorted, without "." and "..".
std::vector<std::string> list_dir(const std::string &dir);
// Entry names in `dir` that are sidecar temp files (nothing should ever leave one behind).
std::vector<std::string> temp_files_in(const std::string &dir);
// A library probe's record (src/compile/library_probe.hpp) spoiled each way a reader must
// refuse: cut short, an unknown line, a relative watched path, no identity, text after the end.
std::vector<std::string> damaged_probe_records(const std::string &text);

// Runs `command` through the shell and returns what it printed, line by line (newlines taken
// off); `*exit_status` receives pclose's status (-1 when it could not be run).
std::vector<std::string> output_lines_of(const std::string &command, int *exit_status);

// A dup() of a descriptor this process has open on `path` (found in /proc/self/fd), as a child
// forked at the wrong instant would hold one; -1 when none is open.
int dup_of_descriptor_on(const std::string &path);

}  // namespace kjit_test
