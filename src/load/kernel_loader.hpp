// Kernel loader: kjit_load_cached's logic. Reads a cubin once, resolves the kernel name for
// exactly those bytes (sidecar fast path, through the name resolver), hands the same bytes to
// the driver (cuLibraryLoadData, context-free) and gets the kernel (cuLibraryGetKernel).
//
// In-process reuse: loaded libraries are kept in a registry keyed by the cubin's file identity
// (dev, inode, size, mtime, ctime). Loading a cubin whose identity is already loaded hands out
// a handle on that library without reading the file; a cubin replaced on disk has a new
// identity and is loaded anew (handles on the old version stay valid). A library is unloaded
// when its last handle is released. Concurrent first loads of one version load it once.
//
// Self-heal: when a name taken from the sidecar is not in the image (CUDA_ERROR_NOT_FOUND), the
// sidecar line is distrusted, the bytes are rescanned, the line is rewritten and the kernel is
// asked for once more.
//
// fork(): a forked child starts with an empty registry (fork_guard.hpp), so its loads go to its
// own driver: the parent's libraries belong to CUDA state the child does not have. Handles the
// parent held are still in the child's memory; there they keep their name and path, hand out no
// driver handle, and releasing them only forgets them: the child never unloads (nor otherwise
// passes to its driver) a library of the parent's.
#pragma once

#include "load/driver.hpp"
#include "resolve/name_resolver.hpp"
#include "store/cache_entry.hpp"
#include "util/filesystem.hpp"
#include "util/status.hpp"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kjit::load {

class KernelLoader;
struct LoadedLibrary;
struct LoadedKernel;

// One caller's reference on a loaded kernel; releases it on destruction. Move-only. Every
// accessor is safe from any thread while the handle lives.
class KernelHandle {
public:
    KernelHandle(KernelHandle &&other) noexcept;
    KernelHandle &operator=(KernelHandle &&other) noexcept;
    KernelHandle(const KernelHandle &) = delete;
    KernelHandle &operator=(const KernelHandle &) = delete;
    ~KernelHandle();

    const std::string &name() const;
    // Null for a handle loaded before a fork, in the child (see above).
    CUkernel kernel() const;
    CUlibrary library() const;
    // The path the handle was loaded from (libraries are shared by identity, so two handles on
    // one library may carry different paths, e.g. hard links).
    const std::string &cubin_path() const { return cubin_path_; }
    // The kernel's CUfunction in the calling thread's current context. Errc::driver for a
    // handle loaded before a fork, in the child.
    Result<CUfunction> function() const;
    // Whether the handle was loaded by this process (not before a fork, by its parent).
    bool loaded_here() const;

private:
    friend class KernelLoader;
    KernelHandle(LoadedLibrary *library, const LoadedKernel *kernel, std::string cubin_path);

    LoadedLibrary *library_ = nullptr;
    const LoadedKernel *kernel_ = nullptr;
    std::string cubin_path_;
};

class KernelLoader {
public:
    // Counters for tests, the log and kjit_get_stats (named as its fields where they feed one).
    // Relaxed atomics.
    struct Counters {
        std::atomic<std::uint64_t> cubin_reads{0};     // cubins read into memory
        std::atomic<std::uint64_t> content_checks{0};  // cache entries' cubins checked against their manifest
        std::atomic<std::uint64_t> driver_loads{0};    // successful cuLibraryLoadData calls
        std::atomic<std::uint64_t> library_unloads{0};
        std::atomic<std::uint64_t> load_reuses{0};      // handles served without reading the file
        std::atomic<std::uint64_t> load_self_heals{0};  // sidecar names the driver did not find
    };

    // A cubin read once, with the kernel name resolved for exactly those bytes: everything
    // kjit_load_cached does before it calls the driver.
    struct ResolvedCubin {
        std::string bytes;
        FileIdentity identity;  // fstat of the file the bytes were read from
        resolve::NameResolver::Resolution resolution;
        // A cache entry's manifest, read from the same folder as the bytes and confirmed
        // against them (none for a loose cubin).
        std::optional<store::cache_entry::Manifest> published;
    };

    // The loader kjit_load_cached uses; one per process (a forked child's starts empty).
    static KernelLoader &instance();

    // Loads `keyword` from the cubin at `cubin_path`. Errors: invalid_argument (bad keyword),
    // driver_unavailable, io, bad_cubin, not_found, ambiguous, driver (the image rejected: the
    // driver's error name, and the cubin's target against the device's where that applies).
    // Thread safe.
    Result<KernelHandle> load(const std::string &cubin_path, std::string_view keyword);

    // Reads the cubin and resolves the name (no driver involved). Errors as load() except the
    // driver ones. Thread safe.
    Result<ResolvedCubin> read_and_resolve(const std::string &cubin_path, std::string_view keyword);

    const Counters &counters() const { return counters_; }
    // Libraries loaded now (each counted once, however many handles share it).
    std::size_t live_libraries();

private:
    friend class KernelHandle;
    static constexpr std::size_t kShards = 16;  // no global lock on the load path

    struct Shard {
        std::mutex mutex;
        std::condition_variable load_finished;
        std::unordered_map<FileIdentity, LoadedLibrary *, FileIdentityHash> libraries;
    };

    Shard &shard_for(const FileIdentity &identity);
    // A reference on the ready library of `identity`, waiting out a load in flight; or null.
    LoadedLibrary *acquire_loaded(const FileIdentity &identity);
    LoadedLibrary *acquire_ready(Shard &shard, std::unique_lock<std::mutex> &lock, const FileIdentity &identity);
    // A reference on the library of `resolved_cubin`, loading it when no thread has.
    Result<LoadedLibrary *> acquire_or_load(const ResolvedCubin &resolved_cubin, const std::string &cubin_path);
    // The kernel for `keyword` in `library`, asking the driver (and self-healing) if new.
    Result<const LoadedKernel *> kernel_in(LoadedLibrary &library, std::string_view keyword,
                                           const ResolvedCubin &resolved_cubin, const std::string &cubin_path);
    void release(LoadedLibrary *library);
    // In a forked child: the instance's registry made anew, empty (see above).
    static void renew_in_forked_child();
    static const bool fork_handler_registered_;

    Counters counters_;
    std::array<Shard, kShards> shards_;
};

}  // namespace kjit::load
