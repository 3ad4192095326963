// Library probe: the identity of a CUDA library libkjit dlopens on first need (NVRTC:
// nvrtc_probe.hpp, nvJitLink: nvjitlink_probe.hpp), which the cache key holds, proven without
// loading it, so that a process that only hits never pays for it (6 to 24 ms to map and relocate
// NVRTC's 100 MB, 8 to 13 ms for nvJitLink's 99 MB from a warm page cache, more from a cold disk;
// a record costs 0.2 to 0.4 ms). One probe serves both: each front end describes its library
// (Library) and owns one Probe.
//
// What the library's api() would open depends only on: the library's variable
// ($KJIT_LIBNVRTC, $KJIT_LIBNVJITLINK), the folders the dynamic linker searches for libkjit
// (LD_LIBRARY_PATH, RPATH/RUNPATH, the system folders: dlinfo's RTLD_DI_SERINFO lists them, in
// order) with their glibc-hwcaps subfolders, ldconfig's cache, the build's toolkit folder, the
// host, and the file found. A process that loads the library writes a record of all of them into
// each cache folder it uses (docs/cache-layout.md, "NVRTC's identity without loading NVRTC"):
// every folder's and file's stat (device, inode, mode, size, mtime and ctime to the nanosecond)
// and the identity. A later process whose context is the same and whose every stat still matches
// takes the identity from the record: a name added, removed or re-pointed in any of those
// folders changes that folder's mtime, a rewritten library its own. Every symbolic link on each
// of those paths, and on the path the library was opened by, is recorded too, one link at a time
// (its text): a link reached through another link (the variable or a search folder's library ->
// /etc/alternatives/... -> a toolkit) re-pointed at any level is a difference, though the folder
// it is in is on no path the record names. Anything else (no record, another user's, a damaged
// one, a single difference, the library already mapped into the process) loads it as before.
//
// Where something else (numba-cuda, cuda.core, CuPy, torch) had mapped the library before
// libkjit's first use, dlopen of the bare name answers with that one by its soname, whatever file
// the search finds: then the record is written only when the search, run here over the places
// the record watches (found_file() in the .cpp: the candidates in order, each folder's
// glibc-hwcaps levels, ldconfig's cache), finds that very file. A host that loaded another build
// (a pip wheel's, by its path) leaves no record: it would key later processes' hits with the
// host's build, not the one they would load.
//
// If a record was wrong all the same (a change no stat shows), the first use, which loads the
// library, finds the loaded identity differs (confirm()); it fails that request with the
// library's error code, removes the record and keys with the loaded library from then on, so no
// cubin is ever stored under another build's key.
#pragma once

#include "util/status.hpp"

#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::compile::library_probe {

// What the probe needs of a library its api() opened: pointers into that library's Api, which
// lives for the process.
struct Opened {
    const std::string *library = nullptr;   // what dlopen was given
    const std::string *file = nullptr;      // the file it opened, links resolved (may be empty)
    const std::string *identity = nullptr;  // what the key holds
    bool preexisting = false;               // something else had mapped it first: dlopen did not search
    const void *symbol = nullptr;           // one of its functions: dladdr names the path it was opened by
};

// A library the probe proves, as its front end describes it.
struct Library {
    const char *name;                          // "NVRTC": in messages
    const char *tag;                           // "nvrtc": the probe's log lines begin "<tag> probe:"
    const char *use;                           // "compile": what the library is loaded for, in confirm's message
    std::string_view header;                   // the record's first line; another is another context
    std::string_view record_prefix;            // the record's file name, from store/cache_layout.hpp
    Errc errc;                                 // confirm's code
    std::vector<std::string> (*candidates)();  // what api() hands dlopen, in order
    std::string (*library_name)();             // the bare name the dynamic linker searches for
    std::optional<Opened> (*opened)();         // the library api() opened, if any; opens nothing
    Result<Opened> (*load)();                  // api(): opens it on first need
};

// Library::opened and Library::load for a library whose Api (nvrtc_library::Api,
// nvjitlink_library::Api) has `library`, `file`, `identity` and `preexisting`, opened by
// `OpenedFn` (its opened()) and `ApiFn` (its api()); `Symbol` is one of its entry points.
template <typename Api, const Api *(*OpenedFn)(), Result<const Api *> (*ApiFn)(), auto Symbol>
struct Adapter {
    static Opened facts(const Api &api) {
        return {&api.library, &api.file, &api.identity, api.preexisting, reinterpret_cast<const void *>(api.*Symbol)};
    }
    static std::optional<Opened> opened() {
        const Api *api = OpenedFn();
        if (!api) return std::nullopt;
        return facts(*api);
    }
    static Result<Opened> load() {
        KJIT_TRY_ASSIGN(auto api, ApiFn());
        return facts(*api);
    }
};

// One library's probe and what it keeps for the process. Thread safe.
class Probe {
public:
    explicit Probe(const Library &library) : library_(library) {}

    // The identity of the library this process uses or would load: from the loaded library when
    // there is one, else from a valid record in `cache_dir` (an absolute folder), else by
    // loading it (its error when there is none). The answer a record gave is kept for the process.
    Result<std::string> identity(const std::string &cache_dir);

    // Where this process has loaded the library and found no valid record of it in `cache_dir`
    // (a folder that passed the trust checks), writes one (best effort: a read-only cache gets
    // none; failures are logged at debug). A library something else had mapped first is recorded
    // only if the search finds that file (else why not is logged at debug). At most once per
    // folder and process.
    void record(const std::string &cache_dir);

    // Before the library serves a request keyed with `keyed_identity`: library.errc when the one
    // loaded is another (the record of `cache_dir` that said so is removed; retrying keys with the
    // loaded one), or when none loads.
    Status confirm(const std::string &keyed_identity, const std::string &cache_dir) const;

    // In a forked child (its front end's fork_guard handler): the folders recorded and their lock
    // made anew. The identity a record gave is kept: the same files.
    void renew_in_forked_child() noexcept;

private:
    const Library &library_;
    std::atomic<const std::string *> probed_{nullptr};  // never freed
    std::mutex recorded_mutex_;
    std::set<std::string> recorded_;  // the folders record() has handled
};

}  // namespace kjit::compile::library_probe
