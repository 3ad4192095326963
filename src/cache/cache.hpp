// Cache: kjit_compile's content-addressed cubin cache, as an orchestrator of its parts. A
// request is keyed (cache_key.hpp), looked up in the entry stores in order
// (storage/entry_store.hpp: the local cache folder, storage/local_store.hpp, then the request's
// read-only seed caches, storage/seed_store.hpp), and on a miss compiled once per entry per
// process at a time (single flight), named (name_resolver.hpp) and published to the stores
// (store::cache_entry::publish writes the entry atomically). Layout: docs/cache-layout.md.
//
//   <cache>/<k0k1>/<key>/kernel.cubin        the cubin
//                        kernel.cubin.name   its sidecar, written at publish: the first load is warm
//                        source.cu           the source, for people debugging a failure
//                        manifest.txt        options, arch, NVRTC version, name, the cubin's size and
//                                            XXH3-128, creation time; a check line (cache_entry.hpp)
//                        deps.txt            the files the compile may read (when it may read any)
//
// Knows the key, the stores, the include scanner (a miss's files), the compiler, the PCH
// folders and the name resolver (the name of a fresh cubin).
#pragma once

#include "cache/cache_counters.hpp"
#include "cache/hit_memo.hpp"
#include "compile/job.hpp"
#include "key/cache_key.hpp"
#include "key/include_scanner.hpp"
#include "storage/local_store.hpp"
#include "storage/remote/entry.hpp"
#include "storage/seed_store.hpp"
#include "util/status.hpp"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::storage::remote {
class Tier;
}  // namespace kjit::storage::remote

namespace kjit::cache {

class Cache {
public:
    // The cache kjit_compile uses; one per process. In a forked child its in-flight table is
    // empty (fork_guard.hpp): a compile the parent had in flight has no thread in the child.
    static Cache &instance();

    // A cache of its own (own counters and single-flight table) over the same folders: tests.
    Cache();
    Cache(const Cache &) = delete;
    Cache &operator=(const Cache &) = delete;

    // The cached cubin's absolute path for `request` and the kernel's name in it (taken by
    // value: its folders are made absolute in place), compiling it on a miss: key_request, find,
    // then build. A repeat of a request this cache answered is answered by its hit memo when
    // nothing can have changed the answer (hit_memo.hpp), counted as a hit. Thread safe.
    Result<storage::Found> compile(key::Request request);
    // compile() for a caller that tried the hit memo itself (recall_with) under `digest`, its
    // request's (HitMemo::digest or the same fields through HitMemo::Fields): looks it up in
    // full and remembers the answer under `digest`. `request` is taken over (moved from, not
    // copied: a first hit in a process pays each copy of its many fields).
    Result<storage::Found> compile_after_recall(key::Request &&request, const HitMemo::Digest &digest);
    // A repeat answered by the hit memo without a Request built: calls `use(const Found &)` with
    // the answer remembered under `digest` (under the memo's lock: `use` must not call into the
    // cache), counted as compile() counts it, and returns true; false when the memo cannot
    // serve (then compile_after_recall). `keyword` is for the log. Thread safe.
    template <typename Use>
    bool recall_with(const HitMemo::Digest &digest, std::string_view keyword, Use &&use) {
        bool by_watch = false;
        return memo_.recall_with(digest, &by_watch, [&](const storage::Found &found) {
            count_memo_answer(keyword, found, by_watch);
            use(found);
        });
    }

    // The steps of compile(), for callers that look many requests up before compiling any
    // (batch/compiler.hpp); the first is key_request. Each is thread safe.
    //
    // The entry (cubin path and name) when a store has one that answers the request (counted as a hit), else
    // nothing (counted as a miss). Errors: the cache folder is unusable (world-writable, not a
    // folder) or an entry is someone else's. `memo`: a FileMemo for every lookup of one call (a
    // batch), so each dependency file is stat'ed once per call; or null.
    // `call`: the Call (entry_store.hpp) of the call this look-up is a step of, handed on to
    // its build(); null for one of its own.
    Result<std::optional<storage::Found>> find(const key::KeyedRequest &keyed,
                                               key::include_scanner::FileMemo *memo = nullptr,
                                               storage::Call *call = nullptr);
    // Compiles and publishes the entry; concurrent builds of one entry (cache folder and key)
    // in this process run NVRTC once and share the result. NVRTC runs on `runner` (a worker
    // process of a batch, worker_pool.hpp), or in this process when it is null; everything
    // else (locks, looking again, naming, publishing, counting) happens here either way.
    // `call`: as find()'s (the leader of a single flight uses it; a follower shares the leader's
    // result).
    Result<storage::Found> build(const key::KeyedRequest &keyed, compile::JobRunner *runner = nullptr,
                                 storage::Call *call = nullptr);
    // build() for a batch that has other work: nullopt, with nothing done, when the cluster tier
    // says another node is compiling the entry now (the batch builds it again later, then
    // waiting for that node if it still is); otherwise build()'s result. Thread safe.
    std::optional<Result<storage::Found>> build_unless_busy(const key::KeyedRequest &keyed, compile::JobRunner *runner);
    // For a batch, after its look-ups and before it compiles: the entries the cluster tier
    // (Request::remote_spec) already holds for `misses` (requests find() missed), fetched in
    // pipelined round trips without any lease and published here; nullopt for each that must
    // still be built (build() then settles it with the cluster). Requests that read files are
    // left to build(): their key needs their files scanned first. Never fails: a problem leaves
    // the request to build(), which reports it. Thread safe.
    std::vector<std::optional<storage::Found>> fetch_from_cluster(const std::vector<const key::KeyedRequest *> &misses);
    // Counts `n` more lookups as hits or misses: requests a batch merged with an identical one
    // (its misses also count as shared waits).
    void count_merged(bool hit, std::uint64_t n);

    const Counters &counters() const { return counters_; }
    HitMemo &hit_memo() { return memo_; }

    // Adds a tier after the stores already there (the local one first): looked up when they
    // miss, and offered every entry this cache compiles. `store` must outlive the cache. Not
    // thread safe: add stores before the cache is used.
    void add_store(storage::EntryStore &store) { stores_.push_back(&store); }

private:
    void count_memo_answer(std::string_view keyword, const storage::Found &found, bool by_watch);
    // compile()'s full look-up, remembering its answer under `digest` when `remember`; takes
    // `request` over.
    Result<storage::Found> look_up(key::Request &&request, const HitMemo::Digest &digest, bool remember);

    struct Flight {
        std::mutex mutex;
        std::condition_variable done_cv;
        bool done = false;
        bool busy = false;  // the leader found the entry busy on another node: no result
        std::optional<Result<storage::Found>> result;
    };

    // The stores, in lookup order; the local one first.
    Result<std::optional<storage::Found>> find_in_stores(const key::KeyedRequest &keyed, storage::Call &call,
                                                         key::include_scanner::FileMemo *memo, std::string *why);
    // build() without the single flight: looks again (another process may have published
    // meanwhile), then compiles, names and publishes.
    // `busy` (when not null): return at once, setting it, if another node compiles the entry now.
    // Every step checks the cache folder through `call`, once.
    Result<storage::Found> compile_and_publish(const key::KeyedRequest &keyed, compile::JobRunner *runner, bool *busy,
                                               storage::Call &call);
    // build() and build_unless_busy(): `busy` as compile_and_publish's.
    Result<storage::Found> build_once(const key::KeyedRequest &keyed, compile::JobRunner *runner, bool *busy,
                                      storage::Call *call);
    // NVRTC over `keyed` (with libkjit's PCH when it asks for one, or, for a miss compiled
    // alone, when its measured price says it pays (pch_price.hpp, recorded in the cache folder,
    // group writable when `shared`): its header identity from `deps` and `names_program`, as
    // include_scanner::scan gave them) on `runner` (null: here), counted and timed into *seconds.
    Result<compile::compiler::Output> run_nvrtc(const key::KeyedRequest &keyed,
                                                const std::vector<key::include_scanner::Dependency> &deps,
                                                bool names_program, compile::JobRunner *runner, bool shared,
                                                double *seconds);
    // Publishes an entry fetched from the cluster tier in the local store (only: it is the
    // cluster's already), as this node's entry `entry_key` of `keyed` (its variant of
    // `source_key` with `deps`, for a request that reads files).
    Result<storage::Found> publish_fetched(const key::KeyedRequest &keyed, storage::Call &call,
                                           storage::remote::Entry fetched, const std::string &source_key,
                                           const std::vector<key::include_scanner::Dependency> &deps);
    // A miss where compiling is refused (key::CompileMode::never): the cluster tier's entry when
    // `tier` holds one (a fetch, never a lease: this node will not compile it), published here
    // as this node's entry `entry_key` (a variant of `source_key` with `deps`); else
    // Errc::not_cached naming the request and how to warm it. NVRTC is neither loaded nor run.
    Result<storage::Found> refuse_to_compile(const key::KeyedRequest &keyed, storage::Call &call,
                                             storage::remote::Tier *tier, const std::string &entry_key,
                                             const std::string &source_key,
                                             const std::vector<key::include_scanner::Dependency> &deps);
    // What a refusal of `request` depends on besides the request (never mode): where the mode
    // came from (as the message says it), the seeds and the cluster tier; the hit memo refuses a
    // repeat from memory only under the same.
    static std::string refusal_context(const key::Request &request);
    // Warn mode (key::CompileMode::warn): one warning per entry and process, naming the request,
    // on stderr whatever KJIT_LOG_LEVEL says (through the log when it shows warnings).
    void warn_of_compile(const key::KeyedRequest &keyed, const std::string &entry_key);

    // Publishes `entry` to every store; the local store's path is the answer.
    Result<storage::Found> publish_everywhere(const key::KeyedRequest &keyed, storage::Call &call,
                                              const store::cache_entry::NewEntry &entry);

    // In a forked child: the instance's in-flight table and its lock made anew (the parent's
    // flights, and any thread that held the lock, are not in the child), no compile in flight.
    static void renew_in_forked_child();
    static const bool fork_handler_registered_;

    Counters counters_;
    HitMemo memo_;
    storage::LocalStore local_;
    storage::SeedStore seeds_;                   // the request's seed caches, read-only, after the local one
    std::vector<storage::EntryStore *> stores_;  // lookup order; &local_ first, then &seeds_
    std::mutex flights_mutex_;
    std::map<std::string, std::shared_ptr<Flight>> flights_;  // by entry folder
    std::mutex warned_mutex_;
    std::set<std::string> warned_;  // entry folders warn mode has said compile (warn_of_compile)
};

}  // namespace kjit::cache
