// A test double of the CUDA driver (see fake_cuda.h): only the entry points libkjit uses,
// answered the way the real driver answers them. Deliberately small; it reads cubins with its
// own ELF code (not libelf, not libkjit's scanner), so the two readings check each other.
#include "fake_cuda.h"

#include <cuda.h>
#include <elf.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

// The driver's handle types are opaque in cuda.h; the double gives them bodies.
struct CUctx_st {
    CUdevice device = 0;
};
struct CUfunc_st {
    struct CUkern_st *kernel = nullptr;
};
struct CUkern_st {
    std::string name;
    CUfunc_st function;
};
struct CUlib_st {
    std::vector<std::unique_ptr<CUkern_st>> kernels;  // the image's kernel entries
};

namespace {

struct State {
    std::mutex mutex;
    std::set<const CUlib_st *> live;
    std::set<const CUkern_st *> kernels;  // of live libraries
    std::set<const CUfunc_st *> functions;
    fake_cuda_counters counters{};
    fake_cuda_launch last_launch{};
    unsigned long long stream_syncs = 0;  // cuStreamSynchronize calls that succeeded
    CUstream last_synchronized = nullptr;
    bool initialised = false;
    CUresult init_result = CUDA_SUCCESS;
    int child_init_result = -1;  // >= 0: cuInit's answer in forked children
    int driver_version = 13000;
    std::atomic<unsigned> device_sm{90};
    std::atomic<unsigned> init_delay_ms{0};
    CUctx_st primary;
    std::map<std::uintptr_t, std::size_t> allocations;  // "device" memory: host memory, by address
};

unsigned env_number(const char *name, unsigned fallback) {
    const char *v = std::getenv(name);
    return v && *v ? static_cast<unsigned>(std::strtoul(v, nullptr, 10)) : fallback;
}

State &state() {
    static State *const s = [] {  // leaked: callable during exit
        auto *fresh = new State();
        fresh->init_result = static_cast<CUresult>(env_number("FAKE_CUDA_INIT_RESULT", 0));
        fresh->driver_version = static_cast<int>(env_number("FAKE_CUDA_DRIVER_VERSION", 13000));
        fresh->device_sm = env_number("FAKE_CUDA_DEVICE_SM", 90);
        return fresh;
    }();
    return *s;
}

thread_local CUctx_st *t_current = nullptr;

// In a forked child (its only thread, before fork returns there): the driver state of the parent
// is gone, as CUDA's is. The containers and the mutex are made anew in place, without reading
// them: another thread of the parent may have been changing them. What they held is leaked.
void forget_the_parent_after_fork() {
    State &s = state();
    new (&s.mutex) std::mutex();
    new (&s.live) std::set<const CUlib_st *>();
    new (&s.kernels) std::set<const CUkern_st *>();
    new (&s.functions) std::set<const CUfunc_st *>();
    new (&s.allocations) std::map<std::uintptr_t, std::size_t>();
    s.counters.live_libraries = 0;
    s.initialised = false;
    if (s.child_init_result >= 0) s.init_result = static_cast<CUresult>(s.child_init_result);
    t_current = nullptr;
}

// Registered when the double is loaded, before any thread can use it.
[[maybe_unused]] const bool registered_fork_handler = [] {
    state();
    return pthread_atfork(nullptr, nullptr, forget_the_parent_after_fork) == 0;
}();

// Every kernel entry (STT_FUNC with STO_CUDA_ENTRY) of a cubin, and the SM it targets. The
// real driver takes no size either: extents come from the ELF headers.
CUresult parse_image(const unsigned char *p, std::vector<std::string> &entries, unsigned &sm) {
    if (std::memcmp(p, ELFMAG, SELFMAG) != 0) return CUDA_ERROR_INVALID_IMAGE;
    if (p[EI_CLASS] != ELFCLASS64 || p[EI_DATA] != ELFDATA2LSB) return CUDA_ERROR_INVALID_IMAGE;
    Elf64_Ehdr eh;
    std::memcpy(&eh, p, sizeof eh);
    if (eh.e_machine != 190 /* EM_CUDA */ || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0) {
        return CUDA_ERROR_INVALID_IMAGE;
    }
    sm = p[EI_ABIVERSION] >= 8 ? (eh.e_flags >> 8) & 0xffu : eh.e_flags & 0xffu;
    auto section = [&](unsigned i) {
        Elf64_Shdr sh;
        std::memcpy(&sh, p + eh.e_shoff + std::uint64_t{i} * sizeof(Elf64_Shdr), sizeof sh);
        return sh;
    };
    for (unsigned i = 0; i < eh.e_shnum; ++i) {
        const Elf64_Shdr symtab = section(i);
        if (symtab.sh_type != SHT_SYMTAB) continue;
        if (symtab.sh_entsize != sizeof(Elf64_Sym) || symtab.sh_link >= eh.e_shnum) return CUDA_ERROR_INVALID_IMAGE;
        const Elf64_Shdr strtab = section(symtab.sh_link);
        const char *strings = reinterpret_cast<const char *>(p + strtab.sh_offset);
        for (std::uint64_t off = sizeof(Elf64_Sym); off + sizeof(Elf64_Sym) <= symtab.sh_size;
             off += sizeof(Elf64_Sym)) {
            Elf64_Sym sym;
            std::memcpy(&sym, p + symtab.sh_offset + off, sizeof sym);
            if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || !(sym.st_other & 0x10)) continue;
            if (sym.st_name >= strtab.sh_size) return CUDA_ERROR_INVALID_IMAGE;
            const std::size_t max = static_cast<std::size_t>(strtab.sh_size - sym.st_name);
            entries.emplace_back(strings + sym.st_name, strnlen(strings + sym.st_name, max));
        }
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_IMAGE;  // no symbol table
}

// SASS runs on the same major version with an equal or newer minor one.
bool runs_on(unsigned cubin_sm, unsigned device_sm) {
    return cubin_sm / 10 == device_sm / 10 && cubin_sm % 10 <= device_sm % 10;
}

struct ErrorText {
    CUresult code;
    const char *name;
    const char *text;
};
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
};

const ErrorText *find_error(CUresult r) {
    for (const ErrorText &e : kErrors) {
        if (e.code == r) return &e;
    }
    return nullptr;
}

bool ready() {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.initialised && s.init_result == CUDA_SUCCESS;
}

// Whether [address, address + bytes) lies within one allocation of cuMemAlloc's.
bool allocated(CUdeviceptr address, std::size_t bytes) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.allocations.upper_bound(static_cast<std::uintptr_t>(address));
    if (it == s.allocations.begin()) return false;
    --it;
    return address >= it->first && address - it->first + bytes <= it->second;
}

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult error, const char **pStr) {
    const ErrorText *e = find_error(error);
    if (!e || !pStr) return CUDA_ERROR_INVALID_VALUE;
    *pStr = e->name;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
    const ErrorText *e = find_error(error);
    if (!e || !pStr) return CUDA_ERROR_INVALID_VALUE;
    *pStr = e->text;
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int Flags) {
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    State &s = state();
    {
        std::lock_guard<std::mutex> lock(s.mutex);
        ++s.counters.init_calls;
    }
    if (const unsigned ms = s.init_delay_ms.load()) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    std::lock_guard<std::mutex> lock(s.mutex);
    s.initialised = true;
    return s.init_result;
}

// NVRTC 13 looks for libcuda.so.1 among the loaded libraries and, when it finds one, asks it
// for an internal export table (for NVRTC's own compile cache). Without this entry point in the
// double, NVRTC calls a missing function and crashes inside nvrtcCompileProgram in any process
// that loaded the double before its first compile. "Not supported" makes NVRTC disable that
// cache, as it does with drivers that lack the table.
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId) {
    (void)pExportTableId;
    if (ppExportTable) *ppExportTable = nullptr;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    *driverVersion = s.driver_version;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device || ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pi || dev != 0) return CUDA_ERROR_INVALID_VALUE;
    const unsigned sm = state().device_sm.load();
    if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) {
        *pi = static_cast<int>(sm / 10);
    } else if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) {
        *pi = static_cast<int>(sm % 10);
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx || dev != 0) return CUDA_ERROR_INVALID_VALUE;
    *pctx = &state().primary;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    t_current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = t_current;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    *device = t_current->device;
    return CUDA_SUCCESS;
}

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *, void **, unsigned int,
                           CUlibraryOption *, void **, unsigned int) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
    State &s = state();
    std::vector<std::string> entries;
    unsigned sm = 0;
    CUresult r = parse_image(static_cast<const unsigned char *>(code), entries, sm);
    if (r == CUDA_SUCCESS && !runs_on(sm, s.device_sm.load())) r = CUDA_ERROR_NO_BINARY_FOR_GPU;
    std::lock_guard<std::mutex> lock(s.mutex);
    if (r != CUDA_SUCCESS) {
        ++s.counters.rejected_images;
        return r;
    }
    auto *lib = new CUlib_st();
    for (std::string &name : entries) {
        auto k = std::make_unique<CUkern_st>();
        k->name = std::move(name);
        k->function.kernel = k.get();
        s.kernels.insert(k.get());
        s.functions.insert(&k->function);
        lib->kernels.push_back(std::move(k));
    }
    s.live.insert(lib);
    ++s.counters.library_loads;
    ++s.counters.live_libraries;
    *library = lib;
    return CUDA_SUCCESS;
}

CUresult cuLibraryUnload(CUlibrary library) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.live.erase(library)) {
        ++s.counters.bad_handles;
        return CUDA_ERROR_INVALID_HANDLE;
    }
    for (const auto &k : library->kernels) {
        s.kernels.erase(k.get());
        s.functions.erase(&k->function);
    }
    ++s.counters.library_unloads;
    --s.counters.live_libraries;
    delete library;
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
    if (!pKernel || !name) return CUDA_ERROR_INVALID_VALUE;
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.counters.get_kernel_calls;
    if (!s.live.count(library)) {
        ++s.counters.bad_handles;
        return CUDA_ERROR_INVALID_HANDLE;
    }
    for (const auto &k : library->kernels) {
        if (k->name == name) {
            *pKernel = k.get();
            return CUDA_SUCCESS;
        }
    }
    ++s.counters.kernels_not_found;
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
    if (!pFunc) return CUDA_ERROR_INVALID_VALUE;
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.kernels.count(kernel)) {
        ++s.counters.bad_handles;
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *pFunc = &kernel->function;
    return CUDA_SUCCESS;
}

// Launches nothing: checks the handle (a CUfunction, or a CUkernel used as one, as CUDA 12+
// allows) and the context, and records what it was asked (fake_cuda_last_launch).
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void **params,
                        void **extra) {
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || (params && extra)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    const auto *as_function = reinterpret_cast<const CUfunc_st *>(f);
    const auto *as_kernel = reinterpret_cast<const CUkern_st *>(f);
    const char *name = s.functions.count(as_function) ? as_function->kernel->name.c_str()
                       : s.kernels.count(as_kernel)   ? as_kernel->name.c_str()
                                                      : nullptr;
    if (!name) {
        ++s.counters.bad_handles;
        return CUDA_ERROR_INVALID_HANDLE;
    }
    fake_cuda_launch &l = s.last_launch;
    l.kernel = name;
    l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
    l.block[0] = bx, l.block[1] = by, l.block[2] = bz;
    l.shared_mem = shared;
    l.stream = stream;
    l.first_param = 0;
    if (params && params[0]) std::memcpy(&l.first_param, params[0], sizeof l.first_param);
    ++l.launches;
    return CUDA_SUCCESS;
}

// Waits for nothing (nothing runs): checks the context and records the stream
// (fake_cuda_stream_syncs), for tests of callers that must synchronize a stream first.
CUresult cuStreamSynchronize(CUstream stream) {
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.last_synchronized = stream;
    ++s.stream_syncs;
    return CUDA_SUCCESS;
}

// Device memory is host memory here, so that what a program copies in comes back out; kernels
// run nothing. For the programs of the docs (tests/doc_examples_test.sh), which call these.
CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytes) {
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    void *p = std::malloc(bytes);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.allocations[reinterpret_cast<std::uintptr_t>(p)] = bytes;
    *dptr = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr dptr) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.allocations.erase(static_cast<std::uintptr_t>(dptr)) == 0) return CUDA_ERROR_INVALID_VALUE;
    std::free(reinterpret_cast<void *>(dptr));
    return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    if (!src || !allocated(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    if (!dst || !allocated(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return t_current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
    return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// The double knows no register counts: 0 registers, for a function it handed out.
CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.functions.count(reinterpret_cast<const CUfunc_st *>(hfunc))) {
        ++s.counters.bad_handles;
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (!pi || attrib != CU_FUNC_ATTRIBUTE_NUM_REGS) return CUDA_ERROR_INVALID_VALUE;
    *pi = 0;
    return CUDA_SUCCESS;
}

// What cuGetProcAddress hands out: each entry point with the CUDA version its ABI came in.
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult *symbolStatus) {
    struct Entry {
        const char *name;
        int since;
        void *fn;
    };
    static const Entry kEntries[] = {
        {"cuGetErrorName", 6000, reinterpret_cast<void *>(&cuGetErrorName)},
        {"cuGetErrorString", 6000, reinterpret_cast<void *>(&cuGetErrorString)},
        {"cuInit", 2000, reinterpret_cast<void *>(&cuInit)},
        {"cuDriverGetVersion", 2020, reinterpret_cast<void *>(&cuDriverGetVersion)},
        {"cuDeviceGet", 2000, reinterpret_cast<void *>(&cuDeviceGet)},
        {"cuDeviceGetAttribute", 2000, reinterpret_cast<void *>(&cuDeviceGetAttribute)},
        {"cuDevicePrimaryCtxRetain", 7000, reinterpret_cast<void *>(&cuDevicePrimaryCtxRetain)},
        {"cuCtxSetCurrent", 4000, reinterpret_cast<void *>(&cuCtxSetCurrent)},
        {"cuCtxGetCurrent", 4000, reinterpret_cast<void *>(&cuCtxGetCurrent)},
        {"cuCtxGetDevice", 2000, reinterpret_cast<void *>(&cuCtxGetDevice)},
        {"cuLibraryLoadData", 12000, reinterpret_cast<void *>(&cuLibraryLoadData)},
        {"cuLibraryUnload", 12000, reinterpret_cast<void *>(&cuLibraryUnload)},
        {"cuLibraryGetKernel", 12000, reinterpret_cast<void *>(&cuLibraryGetKernel)},
        {"cuKernelGetFunction", 12000, reinterpret_cast<void *>(&cuKernelGetFunction)},
        {"cuLaunchKernel", 4000, reinterpret_cast<void *>(&cuLaunchKernel)},
        {"cuMemAlloc", 3020, reinterpret_cast<void *>(&cuMemAlloc)},
        {"cuMemFree", 3020, reinterpret_cast<void *>(&cuMemFree)},
        {"cuMemcpyHtoD", 3020, reinterpret_cast<void *>(&cuMemcpyHtoD)},
        {"cuMemcpyDtoH", 3020, reinterpret_cast<void *>(&cuMemcpyDtoH)},
        {"cuCtxSynchronize", 2000, reinterpret_cast<void *>(&cuCtxSynchronize)},
        {"cuDevicePrimaryCtxRelease", 11000, reinterpret_cast<void *>(&cuDevicePrimaryCtxRelease)},
        {"cuFuncGetAttribute", 2020, reinterpret_cast<void *>(&cuFuncGetAttribute)},
    };
    if (!symbol || !pfn || flags != CU_GET_PROC_ADDRESS_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
    *pfn = nullptr;
    for (const Entry &e : kEntries) {
        if (std::strcmp(e.name, symbol) != 0) continue;
        // cuCtxGetDevice changed its ABI in 13.0, and this double only has the 2.0 one.
        const bool too_new = std::strcmp(symbol, "cuCtxGetDevice") == 0 && cudaVersion >= 13000;
        if (cudaVersion < e.since || too_new) {
            if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return CUDA_ERROR_NOT_FOUND;
        }
        *pfn = e.fn;
        if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

// ---- test controls (fake_cuda.h) ----

void fake_cuda_get_counters(fake_cuda_counters *out) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    *out = s.counters;
}

int fake_cuda_last_launch(fake_cuda_launch *out) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    *out = s.last_launch;
    return s.last_launch.launches > 0;
}

unsigned long long fake_cuda_stream_syncs(void **last_stream) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (last_stream) *last_stream = s.last_synchronized;
    return s.stream_syncs;
}

void fake_cuda_set_device_sm(unsigned sm) { state().device_sm = sm; }

void fake_cuda_set_init_delay_ms(unsigned ms) { state().init_delay_ms = ms; }

void fake_cuda_set_child_init_result(int result) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.child_init_result = result;
}

const char *fake_cuda_kernel_name(const void *cu_kernel) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    const auto *k = static_cast<const CUkern_st *>(cu_kernel);
    return s.kernels.count(k) ? k->name.c_str() : nullptr;
}

const char *fake_cuda_function_name(const void *cu_function) {
    State &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    const auto *f = static_cast<const CUfunc_st *>(cu_function);
    return s.functions.count(f) ? f->kernel->name.c_str() : nullptr;
}

}  // extern "C"
