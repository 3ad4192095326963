#include "batch/compiler.hpp"

#include "batch/worker_pool.hpp"
#include "cache/pch_price.hpp"
#include "store/cache_entry.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace kjit::batch::compiler {

namespace {

// The misses of one distinct request, and the batch items that asked for it.
struct Job {
    key::KeyedRequest keyed;
    std::vector<std::size_t> items;
    std::optional<Result<storage::Found>> result;
};

// The fewest misses of one header identity that one process must compile for NVRTC's PCH to
// pay for itself, where the cache folder's prices record (cache::pch_price) knows nothing of the
// identity: n compiles with a PCH save n - 1 uses' savings and pay its making once. Measured
// 2026-12-07 (docs/batch.md), DeepGEMM's CUTLASS kernels (10.5 MB of headers) in a batch's
// worker process: plain 0.9-1.2 s, the making 1.2-1.5 s, a use 0.3-0.6 s; CUB and humming's
// likewise about one use's saving: every set gains from a group's second miss. (An earlier
// measurement, making 2.9-3.3 s in a worker process, no longer reproduced; the heavier rule it
// led to, four misses over 6 MiB of headers, left DeepGEMM's groups of two and three at 0.80x
// the batch with a PCH for each.) Where the record has the identity's prices, they decide
// (min_pch_uses), so a machine where a PCH costs more, or saves nothing, is planned by its own.
constexpr std::size_t kMinPchUses = 2;

// The fewest misses of `r`'s header identity for its PCH to pay: from the prices recorded in
// its cache folder (pch_price::fewest_misses_that_pay: pch_price::kNeverPays where using one
// was slower), else kMinPchUses. Costs a scan of its includes (milliseconds, against the
// seconds of the compiles it decides about; the compile scans again) and a read of the record;
// a scan that fails gets kMinPchUses, and its compile says what is wrong.
std::size_t min_pch_uses(const key::Request &r) {
    bool names_program = false;
    auto deps = key::include_scanner::scan(r.source, r.headers, r.search, &names_program);
    if (!deps) return kMinPchUses;
    const std::size_t priced = cache::pch_price::fewest_misses_that_pay(
        cache::pch_price::recorded(r.cache_dir, key::pch_identity(r, *deps, names_program)));
    return priced == 0 ? kMinPchUses : priced;
}

Error cancelled_error() {
    return Error{Errc::cancelled, "not compiled: the progress callback cancelled the batch before this item started"};
}

// `build()` (a call of cache.build or cache.build_unless_busy for `keyed`) with exceptions as
// errors, so a worker thread never lets one escape.
template <typename Build>
auto guarded(const key::KeyedRequest &keyed, Build &&build) -> decltype(build()) {
    try {
        return build();
    } catch (const std::bad_alloc &) {
        return Result<storage::Found>(Error{Errc::out_of_memory, "out of memory while compiling " + keyed.key});
    } catch (const std::exception &e) {
        return Result<storage::Found>(
            Error{Errc::internal, std::string("internal error while compiling ") + keyed.key + ": " + e.what()});
    }
}

// cache.build() guarded; NVRTC runs on `runner` (a worker process), or on this thread when it
// is null.
Result<storage::Found> build_guarded(cache::Cache &cache, const key::KeyedRequest &keyed,
                                     compile::JobRunner *runner = nullptr) {
    return guarded(keyed, [&] { return cache.build(keyed, runner); });
}

// cache.build_unless_busy() guarded: nullopt when the cluster tier says another node compiles
// the entry now.
std::optional<Result<storage::Found>> build_unless_busy_guarded(cache::Cache &cache, const key::KeyedRequest &keyed,
                                                                compile::JobRunner *runner) {
    return guarded(keyed, [&] { return cache.build_unless_busy(keyed, runner); });
}

// The worker pool of one batch. Workers take jobs in order until there are none or the batch
// is stopped; the calling thread collects what they finish. A job whose entry another node of
// the cluster is compiling is put off, once, behind the others (the cluster tier: nodes that
// run the same sweep then share it out instead of waiting for each other key by key), and
// built after them, waiting for that node if it still compiles it. With a helper, each worker thread
// runs NVRTC in a worker process of its own, started at its first job and ended when the
// thread ends. The destructor stops and joins them, so an exception on the calling thread (a
// throwing progress callback) never leaves a thread or a worker process running.
class Pool {
public:
    // `units`: the jobs (indices into `jobs`), each unit compiled in order by one worker (the
    // misses that share a PCH, where it lives); every job in one unit. `helper`: the worker
    // helper's path when the compiles run in worker processes, else empty.
    Pool(cache::Cache &cache, std::vector<Job> &jobs, const std::vector<std::vector<std::size_t>> &units,
         std::string helper)
        : cache_(cache), jobs_(jobs), units_(units), helper_(std::move(helper)), untaken_(jobs.size()) {}
    Pool(const Pool &) = delete;
    Pool &operator=(const Pool &) = delete;
    ~Pool() {
        stop();
        for (std::thread &t : threads_) t.join();
    }

    // Starts up to `count` workers; returns how many started (thread creation can fail).
    unsigned start(unsigned count) {
        for (unsigned i = 0; i < count; ++i) {
            try {
                threads_.emplace_back([this] { work(); });
            } catch (const std::system_error &e) {
                log().warn("batch: started {} of {} worker threads: {}", i, count, e.what());
                break;
            }
        }
        return static_cast<unsigned>(threads_.size());
    }

    // In a child forked from the progress callback (on the calling thread, the only one the
    // child has): the workers are the parent's threads, not here, and one may have held the
    // lock at the fork. The lock and the condition variable are made anew and the workers
    // forgotten: never joined (nothing would end them) nor detached (glibc recycles their
    // descriptors for the child's new threads), their std::thread objects leaked. The caller
    // then finishes the batch on its own thread.
    void forget_workers_in_forked_child() {
        fork_guard::renew(mutex_);
        fork_guard::renew(finished_cv_);
        new std::vector<std::thread>(std::move(threads_));  // leaked on purpose
        threads_.clear();
        stopped_ = true;
    }

    // No job starts after this.
    void stop() {
        std::lock_guard<std::mutex> lock(mutex_);
        stopped_ = true;
    }

    // The next finished job, waiting for one; nothing once every job taken has been collected
    // and no more will be taken. While it waits, calls `idle` (with no lock held) at least
    // every `idle_every`.
    template <typename Idle>
    std::optional<std::size_t> next_finished(std::chrono::nanoseconds idle_every, Idle &&idle) {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            if (!finished_.empty()) {
                const std::size_t j = finished_.front();
                finished_.pop_front();
                ++collected_;
                return j;
            }
            if ((stopped_ || (untaken_ == 0 && put_off_.empty())) && collected_ == handed_) return std::nullopt;
            if (finished_cv_.wait_for(lock, idle_every) == std::cv_status::timeout) {
                lock.unlock();
                idle();
                lock.lock();
            }
        }
    }

private:
    // The next job for a worker whose unit is `*unit` (null before its first), of which it
    // took `*taken`: the rest of its unit, else the next unit's first, else one put off
    // (`*again`); nothing once none is left or the pool is stopped. Under the lock.
    std::optional<std::size_t> take(const std::vector<std::size_t> **unit, std::size_t *taken, bool *again) {
        if (stopped_) return std::nullopt;
        if ((!*unit || *taken == (*unit)->size()) && next_unit_ < units_.size()) {
            *unit = &units_[next_unit_++];
            *taken = 0;
        }
        if (*unit && *taken < (*unit)->size()) {
            --untaken_;
            return (**unit)[(*taken)++];
        }
        if (put_off_.empty()) return std::nullopt;
        const std::size_t j = put_off_.front();
        put_off_.pop_front();
        *again = true;
        return j;
    }

    void work() {
        pthread_setname_np(pthread_self(), "kjit-batch");
        std::optional<batch::worker_pool::WorkerProcess> process;
        if (!helper_.empty()) process.emplace(helper_);
        const std::vector<std::size_t> *unit = nullptr;
        std::size_t taken = 0;
        for (;;) {
            std::size_t j = 0;
            bool again = false;  // put off once already
            {
                std::lock_guard<std::mutex> lock(mutex_);
                const std::optional<std::size_t> next = take(&unit, &taken, &again);
                if (!next) break;
                j = *next;
                ++handed_;
            }
            compile::JobRunner *runner = process ? &*process : nullptr;
            std::optional<Result<storage::Found>> built =
                again ? std::optional<Result<storage::Found>>(build_guarded(cache_, jobs_[j].keyed, runner))
                      : build_unless_busy_guarded(cache_, jobs_[j].keyed, runner);
            if (!built) {
                {
                    std::lock_guard<std::mutex> lock(mutex_);
                    --handed_;
                    put_off_.push_back(j);
                }
                finished_cv_.notify_one();  // the end condition may have changed (a stop)
                continue;
            }
            Result<storage::Found> result = std::move(*built);
            {
                std::lock_guard<std::mutex> lock(mutex_);
                jobs_[j].result = std::move(result);
                finished_.push_back(j);
            }
            finished_cv_.notify_one();
        }
        // Wakes the collector for the end condition once this worker takes no more.
        std::lock_guard<std::mutex> lock(mutex_);
        finished_cv_.notify_one();
    }

    cache::Cache &cache_;
    std::vector<Job> &jobs_;
    const std::vector<std::vector<std::size_t>> &units_;
    const std::string helper_;
    std::vector<std::thread> threads_;
    std::mutex mutex_;
    std::condition_variable finished_cv_;
    std::deque<std::size_t> finished_;
    std::deque<std::size_t> put_off_;  // jobs busy on another node when first taken
    std::size_t next_unit_ = 0;        // the next unit no worker has taken yet
    std::size_t untaken_;              // jobs not taken from their unit yet
    std::size_t handed_ = 0;           // jobs taken and not put off: each will be collected
    std::size_t collected_ = 0;
    bool stopped_ = false;
};

// Keeps what a batch hands out in use until it returns (docs/cache-layout.md, "Size limit and
// eviction"): every entry it looks up is pinned in this process (eviction here never removes
// it, whatever its record says), and the use of every entry it reported OK is recorded again
// at most every `refresh_ns` while it runs (for other processes, which see only the records)
// and once more just before it returns. Calling thread only.
class HandedOut {
public:
    explicit HandedOut(std::int64_t refresh_ns) : refresh_ns_(refresh_ns), last_refresh_ns_(realtime_ns()) {}
    HandedOut(const HandedOut &) = delete;
    HandedOut &operator=(const HandedOut &) = delete;
    ~HandedOut() {
        for (const std::string &key : pinned_) store::cache_entry::unpin(key);
    }

    void pin(const std::string &key) {
        pinned_.push_back(key);
        try {
            store::cache_entry::pin(key);
        } catch (...) {
            pinned_.pop_back();
            throw;
        }
        pinned_keys_.insert(key);
    }
    // An entry handed out; pinned too when it is not the one its request's key named (a
    // variant of a request that reads files, cache.hpp).
    void add(const std::string &cubin) {
        if (!cubins_.insert(cubin).second) return;
        order_.push_back(cubin);
        const std::string_view entry = store::cache_entry::entry_of_cubin(cubin);
        if (entry.size() >= 32) {
            const std::string key(entry.substr(entry.size() - 32));
            if (!pinned_keys_.count(key)) pin(key);
        }
    }
    // Records the uses again when `refresh_ns` has passed since the last time.
    void refresh_when_due() {
        if (realtime_ns() - last_refresh_ns_ >= refresh_ns_) refresh();
    }
    // Records the use of every entry handed out (a stat each; a utimensat for those whose
    // record is over a minute old).
    void refresh() {
        for (const std::string &cubin : order_) store::cache_entry::note_use_of_cubin(cubin);
        last_refresh_ns_ = realtime_ns();
    }
    std::chrono::nanoseconds refresh_every() const {
        return std::chrono::nanoseconds(std::max<std::int64_t>(refresh_ns_, 10'000'000));
    }

private:
    std::int64_t refresh_ns_;
    std::int64_t last_refresh_ns_;
    std::vector<std::string> pinned_;              // in pinning order, once per pin (unpinned as many times)
    std::unordered_set<std::string> pinned_keys_;  // the same keys, to look one up
    std::unordered_set<std::string> cubins_;
    std::vector<std::string> order_;
};

// One kjit_compile_batch call, on the calling thread: its items' results as they come, the
// jobs its misses became, and what it handed out. Its steps run in order: look_up_all,
// fetch_from_cluster, compile_misses (which plans the PCHs first), then results().
class Batch {
public:
    Batch(const Options &options, std::size_t total)
        : cache_(cache::Cache::instance()), options_(options), total_(total), results_(total),
          handed_out_(options.recency_refresh_ns) {}

    // 1. Looks every request up before compiling any: hits are answered at once, and identical
    //    requests (same entry: same cache folder and key) become one job.
    void look_up_all(std::vector<Result<key::Request>> &items);
    // 2. The misses the cluster tier already holds: fetched together, in pipelined round trips
    //    (cache.hpp's fetch_from_cluster); what is left is compiled (build() settles each with
    //    the cluster).
    void fetch_from_cluster();
    // 3. Compiles the misses on the workers (plan_units first), reporting each as it finishes.
    void compile_misses();
    // 5. and 6.: every entry handed out stays in use for the in-use window after the batch
    //    returns; whatever did not start (after a cancel) has no result.
    std::vector<Result<storage::Found>> results();

private:
    // Records an item's result and reports it; on the calling thread only.
    void finish(std::size_t item, Result<storage::Found> result);
    // Looks item `i` up: answered (finish) or made a job, or merged with one.
    void look_up(std::size_t i, key::KeyedRequest keyed, key::include_scanner::FileMemo &files_seen);
    // The worker helper's path when the misses compile in worker processes, empty for threads;
    // an error when they should and cannot (explicit processes, no helper).
    Result<std::string> worker_helper(unsigned wanted) const;
    // Splits the jobs into units_, each compiled in order by one worker, and decides which use
    // NVRTC's PCH (see the definition). `workers`: how many; `processes`: worker processes.
    void plan_units(unsigned workers, bool processes);
    // Compiles the jobs not reported yet on this thread, in order, until cancelled.
    void finish_here(std::vector<bool> &reported);
    // Collects what the pool's workers finish; a child forked by the progress callback
    // finishes on this thread.
    void collect(Pool &pool, std::vector<bool> &reported);

    cache::Cache &cache_;
    const Options &options_;
    const std::size_t total_;
    std::vector<std::optional<Result<storage::Found>>> results_;
    std::size_t done_ = 0;
    bool cancelled_ = false;
    HandedOut handed_out_;
    std::vector<Job> jobs_;
    std::vector<std::vector<std::size_t>> units_;  // plan_units
    std::unordered_map<std::string, std::size_t> job_of_entry_;
    std::unordered_map<std::string, storage::Found> hit_of_entry_;
};

void Batch::finish(std::size_t item, Result<storage::Found> result) {
    if (result) handed_out_.add(result->cubin);
    handed_out_.refresh_when_due();
    results_[item] = std::move(result);
    ++done_;
    // After a cancel, items that were already compiling are still reported; what the
    // callback returns for them no longer matters.
    if (options_.progress && options_.progress(done_, total_, item, *results_[item]) && !cancelled_) {
        cancelled_ = true;
        log().debug("batch: cancelled by the progress callback after {} of {} items", done_, total_);
    }
}

void Batch::look_up_all(std::vector<Result<key::Request>> &items) {
    // Items over one header tree check each of its files once (a stat, maybe a hash) per call.
    key::include_scanner::FileMemo files_seen;
    for (std::size_t i = 0; i < total_ && !cancelled_; ++i) {
        if (!items[i]) {
            finish(i, std::move(items[i]).error());
            continue;
        }
        auto keyed = key::key_request(std::move(*items[i]));
        if (!keyed) {
            finish(i, std::move(keyed).error());
            continue;
        }
        look_up(i, std::move(*keyed), files_seen);
    }
}

void Batch::look_up(std::size_t i, key::KeyedRequest keyed, key::include_scanner::FileMemo &files_seen) {
    // From its lookup on, eviction in this process leaves the entry alone.
    if (!job_of_entry_.count(keyed.entry) && !hit_of_entry_.count(keyed.entry)) handed_out_.pin(keyed.key);
    if (auto job = job_of_entry_.find(keyed.entry); job != job_of_entry_.end()) {
        cache_.count_merged(false, 1);
        jobs_[job->second].items.push_back(i);
        return;
    }
    if (auto hit = hit_of_entry_.find(keyed.entry); hit != hit_of_entry_.end()) {
        cache_.count_merged(true, 1);
        finish(i, hit->second);
        return;
    }
    auto found = cache_.find(keyed, &files_seen);
    if (!found) {
        finish(i, std::move(found).error());
    } else if (*found) {
        hit_of_entry_.emplace(keyed.entry, **found);
        finish(i, std::move(**found));
    } else {
        job_of_entry_.emplace(keyed.entry, jobs_.size());
        jobs_.push_back(Job{std::move(keyed), {i}, std::nullopt});
    }
}

void Batch::fetch_from_cluster() {
    if (cancelled_ || jobs_.empty()) return;
    std::vector<const key::KeyedRequest *> misses;
    for (const Job &job : jobs_) misses.push_back(&job.keyed);
    auto fetched = cache_.fetch_from_cluster(misses);
    std::vector<Job> left;
    for (std::size_t j = 0; j < jobs_.size(); ++j) {
        if (!fetched[j]) {
            left.push_back(std::move(jobs_[j]));
            continue;
        }
        for (std::size_t item : jobs_[j].items) finish(item, *fetched[j]);
    }
    jobs_ = std::move(left);
}

// The misses of one header identity (pch_texts) share a PCH only within the process that made
// it, and only from its second compile on: the one that makes it costs about what one later
// one saves (kMinPchUses), or what the prices recorded for it say (min_pch_uses). So, by
// default, a PCH is made where at
// least that many misses of one identity will compile in one process, and those misses go to one worker, in order, as
// one unit: on threads, a whole group (one process, whose compiles of headers NVRTC runs one
// at a time anyway); on worker processes, a group split into up to one share per worker, each
// of at least that many (a group spread over the workers made a PCH in each, used by one
// compile or none). Every other miss is a unit of its own and gets no PCH: one alone in its
// header identity (humming's kernels, each configuration before the #include or a header of
// its own; most of DeepGEMM's), a source without #include (nothing to precompile; -pch cost
// the header-free sweep 10-15%). No worker waits for another's PCH: each unit's first compile
// makes it while the other workers compile other units. `--pch` among an item's options
// (key_request took it out), which DeepGEMM passes on every compile, changes nothing: the
// batch decides for every item (as KJIT_PCH_ON, it made a PCH for each of DeepGEMM's). KJIT_PCH_ON: every miss uses it,
// the groups split the same way, so each process makes one per identity; KJIT_PCH_OFF: none, every miss a unit of its
// own. Units that share a PCH go first (the longest), the rest in request order.
void Batch::plan_units(unsigned workers, bool processes) {
    std::vector<std::vector<std::size_t>> groups;
    std::unordered_map<std::string, std::size_t> group_of;
    for (std::size_t j = 0; j < jobs_.size(); ++j) {
        const key::Request &r = jobs_[j].keyed.request;
        if (options_.pch == Pch::off || !key::includes_headers(r)) {
            groups.push_back({j});
            continue;
        }
        const auto added = group_of.emplace(key::pch_texts(r), groups.size());
        if (added.second) groups.emplace_back();
        groups[added.first->second].push_back(j);
    }
    units_.clear();
    std::vector<std::vector<std::size_t>> alone;
    for (const std::vector<std::size_t> &group : groups) {
        const std::size_t n = group.size();
        // Only a group that may get a PCH by default is priced (KJIT_PCH_ON splits by the rule).
        const std::size_t min_uses = options_.pch == Pch::automatic && n >= kMinPchUses
                                         ? min_pch_uses(jobs_[group.front()].keyed.request)
                                         : kMinPchUses;
        const std::size_t shares = processes && min_uses != cache::pch_price::kNeverPays
                                       ? std::clamp<std::size_t>(n / min_uses, 1, workers)
                                       : 1;
        for (std::size_t share = 0, begin = 0; share < shares; ++share) {
            const std::size_t end = begin + (n - begin) / (shares - share);
            const bool pch = options_.pch == Pch::on || (options_.pch == Pch::automatic && end - begin >= min_uses);
            for (std::size_t k = begin; k < end; ++k) {
                jobs_[group[k]].keyed.request.use_pch = pch;
                jobs_[group[k]].keyed.request.pch_planned = true;
            }
            if (pch && end - begin > 1) {
                units_.emplace_back(group.begin() + static_cast<std::ptrdiff_t>(begin),
                                    group.begin() + static_cast<std::ptrdiff_t>(end));
            } else {
                for (std::size_t k = begin; k < end; ++k) alone.push_back({group[k]});
            }
            begin = end;
        }
    }
    std::stable_sort(units_.begin(), units_.end(), [](const auto &a, const auto &b) { return a.size() > b.size(); });
    std::sort(alone.begin(), alone.end());
    units_.insert(units_.end(), alone.begin(), alone.end());
}

void Batch::finish_here(std::vector<bool> &reported) {
    for (std::size_t j = 0; j < jobs_.size() && !cancelled_; ++j) {
        if (reported[j]) continue;
        const Result<storage::Found> result = build_guarded(cache_, jobs_[j].keyed);
        reported[j] = true;
        for (std::size_t item : jobs_[j].items) finish(item, result);
    }
}

// The progress callback may fork: a child then returns into this loop without the parent's
// workers (fork_guard.hpp) and compiles what was not reported yet itself, on this thread
// (`reported` is this thread's own record, never written by a worker).
void Batch::collect(Pool &pool, std::vector<bool> &reported) {
    const std::uint64_t generation = fork_guard::generation();
    while (auto j = pool.next_finished(handed_out_.refresh_every(), [&] { handed_out_.refresh_when_due(); })) {
        reported[*j] = true;
        for (std::size_t item : jobs_[*j].items) finish(item, *jobs_[*j].result);
        if (fork_guard::generation() != generation) {  // this is a child forked by the callback
            log().debug("batch: forked from the progress callback; finishing {} jobs on the calling thread",
                        std::count(reported.begin(), reported.end(), false));
            pool.forget_workers_in_forked_child();
            finish_here(reported);
            return;
        }
        if (cancelled_) pool.stop();
    }
}

Result<std::string> Batch::worker_helper(unsigned wanted) const {
    if (options_.kind == WorkerKind::threads) return std::string();
    if (options_.kind == WorkerKind::automatic) {
        // NVRTC compiles header-heavy sources one at a time within a process (docs/batch.md:
        // 2 threads 0.86x, 2 processes 1.70x); header-free ones scale on threads, which cost
        // no process start.
        const bool any_headers = std::any_of(jobs_.begin(), jobs_.end(), [](const Job &job) {
            const key::Request &r = job.keyed.request;
            return !r.headers.empty() || key::includes_headers(r);
        });
        if (wanted < 2 || !any_headers) return std::string();
    }
    auto helper = batch::worker_pool::helper_path();
    if (helper || options_.kind == WorkerKind::processes) return helper;
    log().info("batch: compiling on threads, not worker processes: {}", helper.error().message);
    return std::string();
}

void Batch::compile_misses() {
    if (cancelled_ || jobs_.empty()) return;
    std::vector<bool> reported(jobs_.size(), false);
    const unsigned wanted = static_cast<unsigned>(
        std::min<std::size_t>({jobs_.size(), static_cast<std::size_t>(std::max(1u, options_.workers)), kMaxWorkers}));
    auto helper = worker_helper(wanted);
    if (!helper) {
        for (std::size_t j = 0; j < jobs_.size() && !cancelled_; ++j) {
            for (std::size_t item : jobs_[j].items) finish(item, helper.error());
        }
        return;
    }
    plan_units(wanted, !helper->empty());
    const std::size_t with_pch = static_cast<std::size_t>(
        std::count_if(jobs_.begin(), jobs_.end(), [](const Job &job) { return job.keyed.request.use_pch; }));
    log().debug("batch: {} items, {} to compile on {} {}, {} with a PCH, {} units ({})", total_, jobs_.size(), wanted,
                helper->empty() ? "threads" : "worker processes", with_pch, units_.size(),
                options_.pch == Pch::on    ? "on"
                : options_.pch == Pch::off ? "off"
                                           : "for misses that share their headers");
    Pool pool(cache_, jobs_, units_, *helper);
    // Every worker at once: misses that share a PCH are one unit, on one worker, so none waits
    // for another's PCH (the first compile used to run alone when it made one, and held them all).
    if (pool.start(static_cast<unsigned>(std::min<std::size_t>(wanted, units_.size()))) == 0) {
        finish_here(reported);  // no thread could be started: compile on this one
    } else {
        collect(pool, reported);
    }
}

std::vector<Result<storage::Found>> Batch::results() {
    handed_out_.refresh();
    std::vector<Result<storage::Found>> out;
    out.reserve(total_);
    for (std::size_t i = 0; i < total_; ++i) out.push_back(results_[i] ? std::move(*results_[i]) : cancelled_error());
    return out;
}

}  // namespace

std::vector<Result<storage::Found>> compile(std::vector<Result<key::Request>> items, const Options &options) {
    Batch batch(options, items.size());
    batch.look_up_all(items);
    batch.fetch_from_cluster();
    batch.compile_misses();
    return batch.results();
}

}  // namespace kjit::batch::compiler
