#include "test_support.hpp"

#include "compile/compiler.hpp"
#include "compile/nvrtc_library.hpp"
#include "cubin/sidecar.hpp"
#include "fake_cuda.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace kjit_test {

namespace sources {
const char *const kPlain = R"(
__global__ void plain_kernel(float *p) { p[threadIdx.x] = 1.0f; }
)";
const char *const kTemplateOne = R"(
template <int N> __global__ void tmpl(float *p) { p[threadIdx.x] = N; }
template __global__ void tmpl<4>(float *);
)";
const char *const kTemplateSeveral = R"(
template <int N> __global__ void tmpl(float *p) { p[threadIdx.x] = N; }
template __global__ void tmpl<1>(float *);
template __global__ void tmpl<2>(float *);
template __global__ void tmpl<3>(float *);
)";
const char *const kPrefixCollision = R"(
__global__ void gemm(float *p) { p[threadIdx.x] = 1.0f; }
__global__ void gemm_fp16(float *p) { p[threadIdx.x] = 2.0f; }
)";
const char *const kDeviceFunction = R"(
__device__ __noinline__ float scale_value(float x) { return x * 3.0f + 1.0f; }
__global__ void scale(float *p) { p[threadIdx.x] = scale_value(p[threadIdx.x]); }
)";
const char *const kExternC = R"(
extern "C" __global__ void c_kernel(float *p) { p[threadIdx.x] = 1.0f; }
)";
const char *const kNamespaces = R"(
namespace ops { __global__ void norm(float *p) { p[threadIdx.x] = 1.0f; } }
namespace ops2 { __global__ void norm(float *p) { p[threadIdx.x] = 2.0f; } }
)";

std::string numbered_gemm(int i) {
    return "template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N; }\n"
           "template __global__ void gemm<" +
           std::to_string(i + 1) + ">(float *);\n";
}

std::string numbered_gemm_name(int i) { return "_Z4gemmILi" + std::to_string(i + 1) + "EEvPf"; }

}  // namespace sources

const std::string &cubin_for(const std::string &source, const std::vector<std::string> &extra_options) {
    static std::mutex mutex;
    static std::map<std::pair<std::string, std::vector<std::string>>, std::string> cache;
    std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_pair(source, extra_options);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    kjit::compile::compiler::Program request;
    request.source = source;
    request.options = {"-arch=sm_90"};
    request.options.insert(request.options.end(), extra_options.begin(), extra_options.end());
    auto out = kjit::compile::compiler::compile(request);
    if (!out) {
        std::fprintf(stderr, "test cubin failed to compile: %s\n", out.error().message.c_str());
        std::abort();
    }
    return cache.emplace(key, std::move(out->cubin)).first->second;
}

std::string device_code_for(const std::string &source, const std::string &arch, DeviceCode kind) {
    auto api = kjit::compile::nvrtc_library::api();
    if (!api) {
        std::fprintf(stderr, "test device code: %s\n", api.error().message.c_str());
        std::abort();
    }
    const auto &a = **api;
    const bool lto = kind == DeviceCode::ltoir;
    nvrtcProgram prog = nullptr;
    const std::string arch_option = "-arch=" + arch;
    std::vector<const char *> options = {arch_option.c_str(), "-rdc=true"};
    if (lto) options.push_back("-dlto");
    std::size_t size = 0;
    if (a.nvrtcCreateProgram(&prog, source.c_str(), "library.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS ||
        a.nvrtcCompileProgram(prog, static_cast<int>(options.size()), options.data()) != NVRTC_SUCCESS ||
        (lto ? a.nvrtcGetLTOIRSize(prog, &size) : a.nvrtcGetCUBINSize(prog, &size)) != NVRTC_SUCCESS) {
        std::string log;
        if (prog && a.nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS) {
            log.resize(size);
            a.nvrtcGetProgramLog(prog, &log[0]);
        }
        std::fprintf(stderr, "test device code failed to compile: %s\n", log.c_str());
        std::abort();
    }
    std::string out(size, '\0');
    const nvrtcResult got = lto ? a.nvrtcGetLTOIR(prog, &out[0]) : a.nvrtcGetCUBIN(prog, &out[0]);
    a.nvrtcDestroyProgram(&prog);
    if (got != NVRTC_SUCCESS) std::abort();
    return out;
}

void *dlsym_or_abort(void *lib, const char *symbol, const char *what) {
    void *fn = ::dlsym(lib, symbol);
    if (!fn) {
        std::fprintf(stderr, "%s has no %s\n", what, symbol);
        std::abort();
    }
    return fn;
}

Cubin::Cubin(const std::string &source, const std::vector<std::string> &options) : path(dir.file("k.cubin")) {
    write_file(path, cubin_for(source, options));
}

const FakeCuda &fake_cuda() {
    static const FakeCuda fake = [] {
        const char *path = std::getenv("KJIT_LIBCUDA");
        void *lib = path ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
        if (!lib) {
            std::fprintf(stderr, "KJIT_LIBCUDA does not name the driver test double: %s\n",
                         path ? ::dlerror() : "unset");
            std::abort();
        }
        FakeCuda f;
        take_symbol(lib, f.get_counters, "fake_cuda_get_counters", "the driver test double");
        take_symbol(lib, f.set_device_sm, "fake_cuda_set_device_sm", "the driver test double");
        take_symbol(lib, f.set_child_init_result, "fake_cuda_set_child_init_result", "the driver test double");
        take_symbol(lib, f.set_init_delay_ms, "fake_cuda_set_init_delay_ms", "the driver test double");
        take_symbol(lib, f.kernel_name, "fake_cuda_kernel_name", "the driver test double");
        take_symbol(lib, f.function_name, "fake_cuda_function_name", "the driver test double");
        take_symbol(lib, f.ctx_retain, "cuDevicePrimaryCtxRetain", "the driver test double");
        take_symbol(lib, f.ctx_set_current, "cuCtxSetCurrent", "the driver test double");
        return f;
    }();
    return fake;
}

void FakeCuda::make_context_current(bool current) const {
    void *ctx = nullptr;
    if (current && ctx_retain(&ctx, 0) != 0) {
        std::fprintf(stderr, "cuDevicePrimaryCtxRetain failed in the driver test double (is cuInit done?)\n");
        std::abort();
    }
    ctx_set_current(ctx);
}

TempDir::TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/kjit-test-XXXXXX";
    if (!mkdtemp(templ.data())) {
        std::perror("mkdtemp");
        std::abort();
    }
    path_ = templ;
}

TempDir::~TempDir() {
    // Restore write permission first in case a test made something read-only.
    const std::string cmd = "chmod -R u+rwx '" + path_ + "' 2>/dev/null; rm -rf '" + path_ + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", path_.c_str());
}

ScopedEnv::ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) {
        had_ = true;
        old_ = old;
    }
    ::setenv(name, value, 1);
}

ScopedEnv::~ScopedEnv() {
    if (had_) {
        ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
        ::unsetenv(name_.c_str());
    }
}

void write_file(const std::string &path, const std::string &bytes) {
    const std::string temp = path + ".test-writing";
    {
        std::ofstream out(temp, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        if (!out) {
            std::fprintf(stderr, "cannot write %s\n", temp.c_str());
            std::abort();
        }
    }
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
        std::perror("rename");
        std::abort();
    }
}

std::string read_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool exists(const std::string &path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
}

int in_child(const std::function<int()> &body) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body());
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<std::string> list_dir(const std::string &dir) {
    std::vector<std::string> names;
    if (DIR *d = ::opendir(dir.c_str())) {
        while (const dirent *e = ::readdir(d)) {
            const std::string n = e->d_name;
            if (n != "." && n != "..") names.push_back(n);
        }
        ::closedir(d);
    }
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<std::string> temp_files_in(const std::string &dir) {
    std::vector<std::string> temps;
    for (const std::string &n : list_dir(dir)) {
        if (kjit::cubin::sidecar::is_temp_file_name(n)) temps.push_back(n);
    }
    return temps;
}

std::vector<std::string> damaged_probe_records(const std::string &text) {
    return {
        text.substr(0, text.size() / 2),
        text + "extra\n",
        text.substr(0, text.find("\nwatch ") + 1) + "watch absent relative/path\n" +
            text.substr(text.find("\nwatch ") + 1),
        text.substr(0, text.find("\nidentity ") + 1) + "end\n",
        text + "end\n",
    };
}

std::vector<std::string> output_lines_of(const std::string &command, int *exit_status) {
    std::vector<std::string> lines;
    FILE *out = ::popen(command.c_str(), "r");
    if (!out) {
        *exit_status = -1;
        return lines;
    }
    char buffer[8192];
    std::string line;
    while (std::fgets(buffer, sizeof buffer, out)) {
        line += buffer;
        if (line.back() != '\n') continue;  // a line longer than the buffer: read on
        line.pop_back();
        lines.push_back(std::move(line));
        line.clear();
    }
    if (!line.empty()) lines.push_back(std::move(line));
    *exit_status = ::pclose(out);
    return lines;
}

int dup_of_descriptor_on(const std::string &path) {
    for (const std::string &name : list_dir("/proc/self/fd")) {
        char target[4096] = {};
        const ssize_t n = ::readlink(("/proc/self/fd/" + name).c_str(), target, sizeof target - 1);
        if (n > 0 && std::string(target, static_cast<std::size_t>(n)) == path) return ::dup(std::stoi(name));
    }
    return -1;
}

}  // namespace kjit_test
