#include "load/kernel_loader.hpp"

#include "cubin/name_matcher.hpp"
#include "cubin/symbol_scanner.hpp"
#include "store/cache_entry.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>

namespace kjit::load {

// One kernel of a loaded library, for one keyword. Never changes once added.
struct LoadedKernel {
    std::string keyword;
    std::string name;
    CUkernel kernel = nullptr;
};

// One cubin version loaded in the driver, shared by every handle on it.
struct LoadedLibrary {
    FileIdentity identity;
    unsigned shard = 0;
    std::uint64_t generation = 0;  // fork_guard::generation() of the process that loaded it
    CUlibrary library = nullptr;
    bool ready = false;    // false while the first loader is in cuLibraryLoadData
    std::size_t refs = 0;  // handles (and loads in progress) on it; guarded by the shard mutex

    std::mutex kernels_mutex;
    std::deque<LoadedKernel> kernels;  // a deque: handles keep pointers to its elements

    const LoadedKernel *find(std::string_view keyword) {
        std::lock_guard<std::mutex> lock(kernels_mutex);
        for (const LoadedKernel &k : kernels) {
            if (k.keyword == keyword) return &k;
        }
        return nullptr;
    }
};

namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point start) {
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Whether the driver's refusal of an image may be about its target: then the message gives the
// cubin's SM against the device's.
bool about_the_target(CUresult r) {
    return r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX ||
           r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || r == CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
}

std::string sm_text(unsigned sm) { return sm == 0 ? std::string("unknown") : "sm_" + std::to_string(sm); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// KernelHandle

KernelHandle::KernelHandle(LoadedLibrary *library, const LoadedKernel *kernel, std::string cubin_path)
    : library_(library), kernel_(kernel), cubin_path_(std::move(cubin_path)) {}

KernelHandle::KernelHandle(KernelHandle &&other) noexcept
    : library_(other.library_), kernel_(other.kernel_), cubin_path_(std::move(other.cubin_path_)) {
    other.library_ = nullptr;
    other.kernel_ = nullptr;
}

KernelHandle &KernelHandle::operator=(KernelHandle &&other) noexcept {
    if (this != &other) {
        if (library_) KernelLoader::instance().release(library_);
        library_ = other.library_;
        kernel_ = other.kernel_;
        cubin_path_ = std::move(other.cubin_path_);
        other.library_ = nullptr;
        other.kernel_ = nullptr;
    }
    return *this;
}

KernelHandle::~KernelHandle() {
    if (library_) KernelLoader::instance().release(library_);
}

const std::string &KernelHandle::name() const { return kernel_->name; }
bool KernelHandle::loaded_here() const { return library_->generation == fork_guard::generation(); }
CUkernel KernelHandle::kernel() const { return loaded_here() ? kernel_->kernel : nullptr; }
CUlibrary KernelHandle::library() const { return loaded_here() ? library_->library : nullptr; }
Result<CUfunction> KernelHandle::function() const {
    if (!loaded_here()) {
        return Error{Errc::driver, "the kernel '" + kernel_->name + "' of '" + cubin_path_ +
                                       "' was loaded before this process was forked, by its parent: its CUDA library "
                                       "belongs to the parent's driver state, which a forked child does not have; load "
                                       "it again in this process"};
    }
    return load::driver::function_in_current_context(kernel_->kernel);
}

// ---------------------------------------------------------------------------------------------
// KernelLoader

namespace {
std::atomic<KernelLoader *> instance_slot{nullptr};
}  // namespace

KernelLoader &KernelLoader::instance() {
    // Leaked: handles may outlive statics. No once-guard (fork_guard.hpp).
    return fork_guard::lazy(instance_slot, [] { return new KernelLoader(); });
}

const bool KernelLoader::fork_handler_registered_ =
    fork_guard::at_fork_child(fork_guard::State::loaded_libraries, &KernelLoader::renew_in_forked_child);

void KernelLoader::renew_in_forked_child() {
    KernelLoader *loader = instance_slot.load(std::memory_order_relaxed);
    if (!loader) return;
    // The parent's libraries (and their LoadedLibrary records, which its handles in the child's
    // memory still point to) are leaked, never unloaded: release() tells them by generation.
    for (Shard &shard : loader->shards_) fork_guard::renew(shard);
}

KernelLoader::Shard &KernelLoader::shard_for(const FileIdentity &identity) {
    return shards_[FileIdentityHash{}(identity) % kShards];
}

std::size_t KernelLoader::live_libraries() {
    std::size_t n = 0;
    for (Shard &s : shards_) {
        std::lock_guard<std::mutex> lock(s.mutex);
        n += s.libraries.size();
    }
    return n;
}

Result<KernelLoader::ResolvedCubin> KernelLoader::read_and_resolve(const std::string &cubin_path,
                                                                   std::string_view keyword) {
    // The cache entry layer reads it: a cubin of a cache entry has its use recorded and its bytes
    // confirmed against the entry's manifest (store::cache_entry::read_cubin); a loose cubin is read.
    KJIT_TRY_ASSIGN(auto read, store::cache_entry::read_cubin(cubin_path));
    ResolvedCubin p;
    p.bytes = std::move(read.bytes);
    p.identity = read.identity;
    p.published = std::move(read.published);
    counters_.cubin_reads.fetch_add(1, std::memory_order_relaxed);
    if (p.published) counters_.content_checks.fetch_add(1, std::memory_order_relaxed);
    // cuLibraryLoadData takes no size: make sure the headers keep the driver inside the bytes.
    if (auto st = cubin::check_image_extent(p.bytes, cubin_path); !st) return st.error();
    KJIT_TRY_ASSIGN(auto resolved,
                    resolve::NameResolver::instance().resolve_image(cubin_path, keyword, p.identity, p.bytes, true,
                                                                    p.published ? &*p.published : nullptr));
    p.resolution = std::move(resolved);
    return p;
}

LoadedLibrary *KernelLoader::acquire_ready(Shard &shard, std::unique_lock<std::mutex> &lock,
                                           const FileIdentity &identity) {
    for (;;) {
        auto it = shard.libraries.find(identity);
        if (it == shard.libraries.end()) return nullptr;
        LoadedLibrary *lib = it->second;
        if (lib->ready) {
            ++lib->refs;
            return lib;
        }
        shard.load_finished.wait(lock);  // a failed load erases its entry, a good one is ready
    }
}

LoadedLibrary *KernelLoader::acquire_loaded(const FileIdentity &identity) {
    Shard &shard = shard_for(identity);
    std::unique_lock<std::mutex> lock(shard.mutex);
    return acquire_ready(shard, lock, identity);
}

Result<LoadedLibrary *> KernelLoader::acquire_or_load(const ResolvedCubin &resolved_cubin,
                                                      const std::string &cubin_path) {
    Shard &shard = shard_for(resolved_cubin.identity);
    LoadedLibrary *lib = nullptr;
    {
        std::unique_lock<std::mutex> lock(shard.mutex);
        if (LoadedLibrary *ready = acquire_ready(shard, lock, resolved_cubin.identity)) return ready;
        // This thread loads it; others that come meanwhile wait on load_finished.
        lib = new LoadedLibrary();
        lib->identity = resolved_cubin.identity;
        lib->generation = fork_guard::generation();
        lib->shard = static_cast<unsigned>(&shard - shards_.data());
        lib->refs = 1;
        shard.libraries.emplace(resolved_cubin.identity, lib);
    }

    CUresult result = CUDA_SUCCESS;
    const auto started = Clock::now();
    auto loaded = load::driver::load_library(resolved_cubin.bytes, cubin_path, &result);
    const double micros = micros_since(started);

    std::lock_guard<std::mutex> lock(shard.mutex);
    if (!loaded) {
        shard.libraries.erase(resolved_cubin.identity);
        delete lib;
        shard.load_finished.notify_all();
        Error e = std::move(loaded).error();
        if (e.code == Errc::driver && about_the_target(result)) {
            e.message += ": the cubin targets " + sm_text(cubin::cubin_sm_version(resolved_cubin.bytes)) +
                         ", the device is " + sm_text(load::driver::device_sm_version());
        }
        return e;
    }
    lib->library = *loaded;
    lib->ready = true;
    counters_.driver_loads.fetch_add(1, std::memory_order_relaxed);
    shard.load_finished.notify_all();
    log().debug("driver loaded {} ({} bytes) in {:.1f} us", cubin_path, resolved_cubin.bytes.size(), micros);
    return lib;
}

Result<const LoadedKernel *> KernelLoader::kernel_in(LoadedLibrary &library, std::string_view keyword,
                                                     const ResolvedCubin &resolved_cubin,
                                                     const std::string &cubin_path) {
    std::lock_guard<std::mutex> lock(library.kernels_mutex);
    for (const LoadedKernel &k : library.kernels) {
        if (k.keyword == keyword) return &k;  // another thread added it meanwhile
    }
    std::string name = resolved_cubin.resolution.name;
    auto kernel = load::driver::get_kernel(library.library, name, cubin_path);
    if (!kernel && kernel.error().code == Errc::not_found && resolved_cubin.resolution.from_sidecar) {
        // The sidecar named a symbol the image lacks: rescan these bytes, rewrite, retry once.
        counters_.load_self_heals.fetch_add(1, std::memory_order_relaxed);
        log().warn("the driver finds no '{}' in {}: its sidecar line is wrong; rescanning", name, cubin_path);
        KJIT_TRY_ASSIGN(auto rescanned,
                        resolve::NameResolver::instance().resolve_image(
                            cubin_path, keyword, resolved_cubin.identity, resolved_cubin.bytes, /*trust_sidecar=*/false,
                            resolved_cubin.published ? &*resolved_cubin.published : nullptr));
        name = std::move(rescanned.name);
        kernel = load::driver::get_kernel(library.library, name, cubin_path);
    }
    if (!kernel) return std::move(kernel).error();
    library.kernels.push_back(LoadedKernel{std::string(keyword), std::move(name), *kernel});
    return &library.kernels.back();
}

Result<KernelHandle> KernelLoader::load(const std::string &cubin_path, std::string_view keyword) {
    const auto started = Clock::now();
    if (auto st = cubin::name_matcher::check_keyword(keyword); !st) return st.error();
    if (auto st = load::driver::available(); !st) return st.error();

    KJIT_TRY_ASSIGN(auto current, cubin::stat_cubin(cubin_path));

    // Reuse: this version is loaded and already has the kernel. No read, no resolve.
    LoadedLibrary *lib = acquire_loaded(current);
    if (lib) {
        if (const LoadedKernel *k = lib->find(keyword)) {
            counters_.load_reuses.fetch_add(1, std::memory_order_relaxed);
            log().debug("reuse hit: {} [{}] -> {} ({:.1f} us)", cubin_path, keyword, k->name, micros_since(started));
            return KernelHandle(lib, k, cubin_path);
        }
    }

    auto resolved_cubin = read_and_resolve(cubin_path, keyword);
    if (!resolved_cubin) {
        if (lib) release(lib);
        return std::move(resolved_cubin).error();
    }
    if (lib && lib->identity != resolved_cubin->identity) {  // replaced between the stat and the read
        release(lib);
        lib = nullptr;
    }
    if (!lib) {
        KJIT_TRY_ASSIGN(auto acquired, acquire_or_load(*resolved_cubin, cubin_path));
        lib = acquired;
    }
    auto kernel = kernel_in(*lib, keyword, *resolved_cubin, cubin_path);
    if (!kernel) {
        release(lib);
        return std::move(kernel).error();
    }
    log().debug("loaded {} [{}] -> {} ({} bytes, name from {}) in {:.1f} us", cubin_path, keyword, (*kernel)->name,
                resolved_cubin->bytes.size(), resolved_cubin->resolution.from_sidecar ? "the sidecar" : "a scan",
                micros_since(started));
    return KernelHandle(lib, *kernel, cubin_path);
}

void KernelLoader::release(LoadedLibrary *library) {
    // A library the parent loaded, released in a forked child: forget it. It is in no shard of
    // the child's registry, its CUlibrary means nothing to the child's driver, and the parent
    // still owns it (its reference count is the parent's too).
    if (library->generation != fork_guard::generation()) return;
    Shard &shard = shards_[library->shard];
    {
        std::lock_guard<std::mutex> lock(shard.mutex);
        if (--library->refs > 0) return;
        shard.libraries.erase(library->identity);
    }
    // Last reference: no other thread can reach it any more.
    load::driver::unload_library(library->library);
    counters_.library_unloads.fetch_add(1, std::memory_order_relaxed);
    log().debug("driver unloaded a library (last handle released)");
    delete library;
}

}  // namespace kjit::load
