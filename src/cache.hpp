// Cache: kjit_compile's content-addressed cubin cache. Computes the key, looks entries up,
// compiles misses (once per key per process at a time) and publishes each entry atomically:
// the entry is built in a temp folder beside its final place and renamed into place, so an
// entry either is complete or does not exist. Layout (docs/cache-layout.md):
//
//   <cache>/<k0k1>/<key>/kernel.cubin        the cubin
//                        kernel.cubin.name   its sidecar, written at publish: the first load is warm
//                        source.cu           the source, for people debugging a failure
//                        manifest.txt        options, arch, NVRTC version, name, the cubin's size and
//                                            XXH3-128, creation time; a check line (cache_entry.hpp)
//                        deps.txt            the files the compile may read (when it may read any)
//
// Knows the compiler, the name resolver (for the entry's sidecar check and the name rule) and
// the include scanner.
#pragma once

#include "include_scanner.hpp"
#include "status.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kjit::folder_trust {
struct CacheFolder;
}

namespace kjit::cache {

// Bumped whenever the entry layout or the key encoding changes: old entries then miss.
// 2: the working directory in the key when files may be looked up relative to it, and deps.txt
// for every compile that may read a file (version 1 recorded headers under include_paths only);
// the manifest records the cubin's XXH3-128 and ends in a check line, which loads and rescans of
// an entry's cubin confirm (format-1 entries have neither, so they are rebuilt).
constexpr int kFormatVersion = 2;

struct Request {
    std::string source;
    std::string keyword;
    std::string cache_dir;  // resolved (see default_cache_dir)
    std::string arch;       // resolved, e.g. "sm_90a" (see default_arch)
    std::vector<std::string> nvrtc_options;
    std::vector<std::string> include_paths;
    std::vector<std::pair<std::string, std::string>> headers;
    std::optional<std::string> name_expression;
    // The cache's size limit in bytes (see cache_maintenance::after_publish); none: unbounded.
    std::optional<std::uint64_t> max_cache_bytes;
    // Set by Cache::prepare, from the texts and options: how the compile looks files up (its
    // working directory only when something may be looked up relative to it; it is then in
    // the key), and whether it may read any file (then the entry records deps.txt and every
    // hit checks it).
    include_scanner::Search search;
    bool reads_files = false;
    // Set by Cache::prepare: the NVRTC build that compiles it (compiler::nvrtc_identity()), in
    // the key and the manifest. Taking it loads NVRTC, so even a hit needs NVRTC: an entry made
    // by another NVRTC build must not be served.
    std::string nvrtc_identity;
    // How to compile, not what: NVRTC's automatic precompiled headers (-pch), in a folder per
    // header identity (pch_folders.hpp). Not in the key, since the cubin does the same either
    // way (NVRTC's cubins are not byte-reproducible anyway: internal-linkage names carry a
    // per-compile id). Set by prepare when the NVRTC options ask for it (`--pch`), and by
    // batches (docs/batch.md).
    bool use_pch = false;
    // Set by prepare, which takes NVRTC's PCH options out of nvrtc_options (they are not in the
    // key either; compiler::take_pch_options): whether they asked for the automatic PCH, and
    // those passed on with libkjit's PCH (--instantiate-templates-in-pch=...).
    bool pch_requested = false;
    std::vector<std::string> pch_options;
};

// $KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else $HOME/.cache/kjit.
Result<std::string> default_cache_dir();
// $KJIT_ARCH, else the current GPU's (driver), else Errc::invalid_argument saying how to set it.
Result<std::string> default_arch();
// invalid_argument unless `arch` is a real target (sm_XX with an optional a/f suffix).
Status check_arch(const std::string &arch);

// The 32-hex-digit key: XXH3-128 of a labelled, length-prefixed encoding of every input that
// changes the cubin (but not the content of files read from disk: see deps.txt). Reads
// `request.search.working_dir` and `request.nvrtc_identity`, which prepare() sets.
std::string key_of(const Request &request);

// The header identity of a PCH made while compiling `request` (prepared), less the content of
// the files it reads: arch, options, include paths, working directory (when names are looked up
// relative to it), in-memory headers, and the source up to the end of its last line with
// "#include" (anything before an include can change what it declares: a #define, another
// include). What follows, typically the instantiations a sweep varies, is left out so those
// share the PCH. Requests with the same one read the same files, so they share a PCH unless one
// of those files is edited in between (the PCH folder adds their content: pch_folders.hpp).
std::string pch_texts(const Request &request);

class Cache {
public:
    struct Counters {
        std::atomic<std::uint64_t> hits{0};
        std::atomic<std::uint64_t> misses{0};
        std::atomic<std::uint64_t> nvrtc_runs{0};
        std::atomic<std::uint64_t> nvrtc_nanoseconds{0};  // wall time inside compiler::compile
        std::atomic<std::uint64_t> published_entries{0};
        std::atomic<std::uint64_t> shared_waits{0};   // callers that waited for another's compile
        std::atomic<std::uint64_t> rebuilt_entries{0};  // damaged or stale entries replaced
        // Files of deps.txt whose content a lookup read and hashed (their size or mtime differed
        // from the record, or they were young when recorded): a steady-state hit hashes none.
        std::atomic<std::uint64_t> dependency_hashes{0};
        // Files of deps.txt that a lookup stat'ed (a batch's FileMemo answers each file once).
        std::atomic<std::uint64_t> dependency_stats{0};
        // Lookups that skipped deps.txt: checked before in this process and nothing changed
        // since, as the header watch proved (dependency_watch.hpp).
        std::atomic<std::uint64_t> dependency_proofs{0};
        // Compiles that passed NVRTC a PCH folder, and how many of those were the first of their
        // header identity in this process (NVRTC makes the PCH there; later ones use it).
        std::atomic<std::uint64_t> pch_compiles{0};
        std::atomic<std::uint64_t> pch_identities{0};
        std::atomic<int> compiles_in_flight{0};
        std::atomic<int> max_compiles_in_flight{0};
    };

    // A request checked (keyword, arch, options) with its folders made absolute, and its key
    // and entry: what the steps below work from.
    struct Prepared {
        Request request;
        std::string key;
        std::string entry;  // <cache>/<k0k1>/<key>
        std::string cubin;  // <entry>/kernel.cubin
    };

    // The cache kjit_compile uses; one per process. In a forked child its in-flight table is
    // empty (fork_guard.hpp): a compile the parent had in flight has no thread in the child.
    static Cache &instance();

    // The cached cubin's absolute path for `request` (taken by value: its folders are made
    // absolute in place), compiling it on a miss: prepare, find, then build. Thread safe.
    Result<std::string> compile(Request request);

    // The steps of compile(), for callers that look many requests up before compiling any
    // (batch_compiler). Each is thread safe.
    Result<Prepared> prepare(Request request) const;
    // The cubin path when the entry answers the request (counted as a hit), else nothing
    // (counted as a miss). Errors: the cache folder is unusable (world-writable, not a folder).
    // A request that reads files is looked up through its variants file (cache_entry.hpp), and
    // its answer may lie in another entry than `prepared.entry`. `memo`: a FileMemo for every
    // lookup of one call (a batch), so each dependency file is stat'ed once per call; or null.
    Result<std::optional<std::string>> find(const Prepared &prepared, include_scanner::FileMemo *memo = nullptr);
    // Compiles and publishes the entry; concurrent builds of one entry (cache folder and key)
    // in this process run NVRTC once and share the result.
    Result<std::string> build(const Prepared &prepared);
    // Counts `n` more lookups as hits or misses: requests a batch merged with an identical one
    // (its misses also count as shared waits).
    void count_merged(bool hit, std::uint64_t n);

    const Counters &counters() const { return counters_; }

private:
    struct Flight {
        std::mutex mutex;
        std::condition_variable done_cv;
        bool done = false;
        std::optional<Result<std::string>> result;
    };

    // Sets *published_bytes to the entry's size when this call published it (0 when another
    // process's entry serves). A request that reads files is published under the key of the
    // files' state (its variant key) and listed in the variants file of its source key `key`;
    // `entry` (the source key's folder) serves as the single-flight key only.
    Result<std::string> compile_and_publish(const Request &request, const std::string &key,
                                            const std::string &entry, std::uint64_t *published_bytes);
    // Writes the entry `key` for `cubin` (compiled from `request`, its kernel `name`; a variant of
    // `source_key` when not empty) in a temp folder and renames it into place; `folder` is the cache folder as checked (rechecked
    // when this creates it). Errors: io, with the errno in Error::sys_errno.
    Result<std::string> publish(const Request &request, const std::string &key, const std::string &source_key,
                                const std::string &entry,
                                folder_trust::CacheFolder &folder, const std::string &cubin, const std::string &name,
                                double seconds, const std::vector<include_scanner::Dependency> &deps,
                                std::uint64_t *published_bytes);

    // In a forked child: the instance's in-flight table and its lock made anew (the parent's
    // flights, and any thread that held the lock, are not in the child), no compile in flight.
    static void renew_in_forked_child();
    static const bool fork_handler_registered_;

    Counters counters_;
    std::mutex flights_mutex_;
    std::map<std::string, std::shared_ptr<Flight>> flights_;  // by entry folder
};

}  // namespace kjit::cache
