#include "cache/cache.hpp"

#include "cache/pch_price.hpp"
#include "compile/compiler.hpp"
#include "compile/nvjitlink_probe.hpp"
#include "compile/nvrtc_probe.hpp"
#include "key/dependency_watch.hpp"
#include "key/include_scanner.hpp"
#include "resolve/name_resolver.hpp"
#include "storage/remote/tier.hpp"
#include "store/cache_entry.hpp"
#include "util/environment.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

namespace kjit::cache {

namespace {

std::atomic<Cache *> instance_slot{nullptr};

// NVRTC's request for `keyed`, without libkjit's PCH options.
compile::compiler::Program nvrtc_program(const key::Request &request) {
    compile::compiler::Program nvrtc;
    nvrtc.source = request.source;
    nvrtc.program_name = request.program_name.empty() ? key::kDefaultProgramName : request.program_name;
    nvrtc.options.push_back("-arch=" + request.arch);
    nvrtc.options.insert(nvrtc.options.end(), request.nvrtc_options.begin(), request.nvrtc_options.end());
    for (const std::string &p : request.include_paths) nvrtc.options.push_back("-I" + p);
    nvrtc.headers = request.headers;
    if (request.name_expression) nvrtc.name_expressions.push_back(*request.name_expression);
    if (!request.link_files.empty()) {
        // LTO-IR (relocatable device code) for nvJitLink, which links it with the inputs.
        nvrtc.options.push_back("-dlto");
        nvrtc.options.push_back("-rdc=true");
        nvrtc.link_inputs = request.link_files;
        nvrtc.link_options = request.link_options;
        nvrtc.link_arch = request.arch;
    }
    return nvrtc;
}

// The manifest of a new entry `key` (a variant of `source_key` when not empty) of `request`,
// its kernel `name`; publish fills in the cubin's size and hash and the time.
store::cache_entry::Manifest new_manifest(const key::Request &request, const std::string &key,
                                          const std::string &source_key, const std::string &name,
                                          double compile_seconds) {
    store::cache_entry::Manifest m;
    m.key = key;
    m.source_key = source_key;
    m.keyword = request.keyword;
    m.name = name;
    m.arch = request.arch;
    m.nvrtc = request.nvrtc_identity;
    // As keyed: a path that only names an output file is another process's as well.
    for (const std::string &o : request.nvrtc_options) m.options.push_back(compile::compiler::keyed_option(o));
    m.include_paths = request.include_paths;
    for (const auto &h : request.headers) m.headers.push_back(h.first);
    m.name_expression = request.name_expression;
    m.program_name = request.program_name;
    m.compile_seconds = compile_seconds;
    return m;
}

// The cluster tier `request` asks for (Request::remote_spec), or null for none. Errors: a bad
// setting (storage::remote::parse).
Result<storage::remote::Tier *> tier_for(const key::Request &request) {
    if (request.remote_spec.empty()) return static_cast<storage::remote::Tier *>(nullptr);
    return storage::remote::Tier::for_spec(request.remote_spec, request.remote_origin);
}

// What a value of the cluster tier must have been made for to be `keyed`'s entry `entry_key`.
storage::remote::Expected expected_for(const key::KeyedRequest &keyed, const std::string &entry_key) {
    const key::Request &r = keyed.request;
    return storage::remote::Expected{entry_key, key::kFormatVersion, r.nvrtc_identity,
                                     r.arch,    r.keyword,           r.name_expression};
}

// After a look-up or build in `request.cache_dir` that passed the folder's trust checks: where
// this process loaded NVRTC (and, for a request that links, nvJitLink), the record that spares
// the next processes loading it (once per folder).
void record_library_identities(const key::Request &request) {
    compile::nvrtc_probe::record(request.cache_dir);
    if (!request.link_files.empty()) compile::nvjitlink_probe::record(request.cache_dir);
}

// A linked cubin without the kernel: said as such (what a link keeps), nothing published.
Error linked_name_problem(const key::Request &request, Error e) {
    if (e.code != Errc::not_found || request.link_files.empty()) return e;
    e.message = "the cubin linked from '" +
                (request.program_name.empty() ? std::string(key::kDefaultProgramName) : request.program_name) +
                "' and its " + std::to_string(request.link_files.size()) + " link input(s) has no kernel '" +
                request.keyword +
                "' (a link keeps the source's __global__ functions and what they call; a link input's kernels are "
                "only kept when the source declares and launches them): " +
                e.message;
    return e;
}

}  // namespace

Cache::Cache() : local_(counters_), seeds_(local_, counters_), stores_{&local_, &seeds_} {}

Cache &Cache::instance() {
    return fork_guard::lazy(instance_slot, [] { return new Cache(); });  // leaked: usable during exit
}

const bool Cache::fork_handler_registered_ =
    fork_guard::at_fork_child(fork_guard::State::cache_flights, &Cache::renew_in_forked_child);

void Cache::renew_in_forked_child() {
    Cache *cache = instance_slot.load(std::memory_order_relaxed);
    if (!cache) return;
    fork_guard::renew(cache->flights_mutex_);
    fork_guard::renew(cache->flights_);
    fork_guard::renew(cache->warned_mutex_);
    fork_guard::renew(cache->warned_);
    cache->memo_.renew_in_forked_child();
    cache->seeds_.renew_in_forked_child();
    cache->counters_.compiles_in_flight.store(0, std::memory_order_relaxed);
}

Result<storage::Found> Cache::compile(key::Request request) {
    const bool memo_on = HitMemo::enabled();
    const HitMemo::Digest digest = memo_on ? HitMemo::digest(request) : HitMemo::Digest{};
    std::optional<storage::Found> remembered;
    if (memo_on && recall_with(digest, request.keyword, [&](const storage::Found &found) { remembered = found; })) {
        return std::move(*remembered);
    }
    return look_up(std::move(request), digest, memo_on);
}

Result<storage::Found> Cache::compile_after_recall(key::Request &&request, const HitMemo::Digest &digest) {
    return look_up(std::move(request), digest, /*remember=*/true);
}

void Cache::count_memo_answer(std::string_view keyword, const storage::Found &found, bool by_watch) {
    counters_.compile_hits.fetch_add(1, std::memory_order_relaxed);
    counters_.memo_answers.fetch_add(1, std::memory_order_relaxed);
    if (by_watch) counters_.dependency_proofs.fetch_add(1, std::memory_order_relaxed);
    log().debug("cache hit [{}] from the hit memo: {}", keyword, found.cubin);
}

Result<storage::Found> Cache::look_up(key::Request &&request, const HitMemo::Digest &digest, bool remember) {
    // A serving process asks again for what it was refused: refused again from memory while
    // nothing could make it a hit (hit_memo.hpp), without keying, looking or scanning.
    const bool strict = remember && request.compile_mode == key::CompileMode::never;
    const std::string context = strict ? refusal_context(request) : std::string();
    if (strict) {
        if (std::optional<Error> refused = memo_.recall_refusal(digest, context)) {
            counters_.compile_misses.fetch_add(1, std::memory_order_relaxed);
            counters_.memo_refusals.fetch_add(1, std::memory_order_relaxed);
            log().debug("cache miss [{}] refused from the hit memo", request.keyword);
            return std::move(*refused);
        }
    }
    const HitMemo::Proof proof = HitMemo::before_look_up();
    KJIT_TRY_ASSIGN(auto keyed, key::key_request(std::move(request)));
    storage::Call call;  // the look-up and the build check the cache folder once between them
    KJIT_TRY_ASSIGN(auto found, find(keyed, nullptr, &call));
    Result<storage::Found> answer = found ? Result<storage::Found>(std::move(*found)) : build(keyed, nullptr, &call);
    if (answer && remember) memo_.remember(digest, keyed, *answer, proof);
    if (!answer && strict && call.refusal && answer.error().code == Errc::not_cached) {
        memo_.remember_refusal(digest, keyed, answer.error(), context, *call.refusal, proof);
    }
    return answer;
}

void Cache::count_merged(bool hit, std::uint64_t n) {
    if (hit) {
        counters_.compile_hits.fetch_add(n, std::memory_order_relaxed);
    } else {
        counters_.compile_misses.fetch_add(n, std::memory_order_relaxed);
        counters_.compile_shared_waits.fetch_add(n, std::memory_order_relaxed);
    }
}

Result<std::optional<storage::Found>> Cache::find_in_stores(const key::KeyedRequest &keyed, storage::Call &call,
                                                            key::include_scanner::FileMemo *memo, std::string *why) {
    for (storage::EntryStore *store : stores_) {
        auto found = store->find(keyed, call, memo, why);
        if (!found || *found) return found;
    }
    return std::optional<storage::Found>();
}

Result<std::optional<storage::Found>> Cache::find(const key::KeyedRequest &keyed, key::include_scanner::FileMemo *memo,
                                                  storage::Call *call) {
    storage::Call own;
    std::string why;
    auto found = find_in_stores(keyed, call ? *call : own, memo, &why);
    if (!found) return found;
    if (*found) {
        counters_.compile_hits.fetch_add(1, std::memory_order_relaxed);
        log().debug("cache hit {} [{}]: {}", keyed.key, keyed.request.keyword, (*found)->cubin);
        record_library_identities(keyed.request);
        compile::compiler::create_output_files_of_hit(keyed.request.nvrtc_options, keyed.request.program_name);
        return found;
    }
    counters_.compile_misses.fetch_add(1, std::memory_order_relaxed);
    log().debug("cache miss {} [{}]: {}", keyed.key, keyed.request.keyword,
                why.empty() ? std::string("no entry") : "entry unusable: " + why);
    return found;
}

Result<storage::Found> Cache::build(const key::KeyedRequest &keyed, compile::JobRunner *runner, storage::Call *call) {
    return build_once(keyed, runner, nullptr, call);
}

std::optional<Result<storage::Found>> Cache::build_unless_busy(const key::KeyedRequest &keyed,
                                                               compile::JobRunner *runner) {
    bool busy = false;
    Result<storage::Found> result = build_once(keyed, runner, &busy, nullptr);
    if (busy) return std::nullopt;
    return result;
}

Result<storage::Found> Cache::build_once(const key::KeyedRequest &keyed, compile::JobRunner *runner, bool *busy,
                                         storage::Call *call) {
    // One compile per entry (cache folder and key) in this process; later callers wait for it
    // and share its result. Not per key alone: the result is a path in one cache folder, and a
    // caller of another folder would get that path while its own cache stayed empty.
    std::shared_ptr<Flight> flight;
    bool leader = false;
    {
        std::lock_guard<std::mutex> lock(flights_mutex_);
        auto &slot = flights_[keyed.entry];
        if (!slot) {
            slot = std::make_shared<Flight>();
            leader = true;
        }
        flight = slot;
    }
    if (!leader) {
        counters_.compile_shared_waits.fetch_add(1, std::memory_order_relaxed);
        std::unique_lock<std::mutex> lock(flight->mutex);
        flight->done_cv.wait(lock, [&] { return flight->done; });
        // The leader put it off (busy on another node): this caller builds it, waiting if asked to.
        if (flight->busy) {
            lock.unlock();
            return build_once(keyed, runner, busy, call);
        }
        return *flight->result;
    }
    Result<storage::Found> result = [&]() -> Result<storage::Found> {
        try {
            storage::Call own;
            return compile_and_publish(keyed, runner, busy, call ? *call : own);
        } catch (const std::bad_alloc &) {
            return Error{Errc::out_of_memory, "out of memory while compiling " + keyed.key};
        } catch (const std::exception &e) {
            return Error{Errc::internal, std::string("internal error while compiling: ") + e.what()};
        }
    }();
    const bool put_off = busy && *busy;
    if (result && !put_off) record_library_identities(keyed.request);  // as for a hit (find)
    {
        std::lock_guard<std::mutex> lock(flight->mutex);
        flight->result = result;
        flight->busy = put_off;
        flight->done = true;
    }
    flight->done_cv.notify_all();
    {
        std::lock_guard<std::mutex> lock(flights_mutex_);
        flights_.erase(keyed.entry);
    }
    return result;
}

Result<storage::Found> Cache::compile_and_publish(const key::KeyedRequest &keyed, compile::JobRunner *runner,
                                                  bool *busy, storage::Call &call) {
    const key::Request &request = keyed.request;
    // One compile of this key on the node: another process compiling it is waited for, and its
    // entry is then found below. Held until this compile is published.
    const auto node_lock = local_.lock_for_compile(keyed, call);
    // Another process may have published while this one waited or looked.
    std::string why;
    KJIT_TRY_ASSIGN(auto found, find_in_stores(keyed, call, nullptr, &why));
    if (found) return std::move(*found);

    // Files are recorded before the compile: one edited during it then misses next time. Their
    // content chooses the entry (variant_key): one per state of the files, so an edit and its
    // revert both hit.
    std::vector<key::include_scanner::Dependency> deps;
    bool names_program = false;  // a file read may expand __BASE_FILE__ (key::pch_identity)
    std::string entry_key = keyed.key;
    std::string source_key;
    if (request.reads_files) {
        KJIT_TRY_ASSIGN(auto scanned,
                        key::include_scanner::scan(request.source, request.headers, request.search, &names_program));
        deps = std::move(scanned);
        source_key = keyed.key;
        entry_key = key::variant_key(keyed.key, deps);
        // Built before, but no longer listed (fallen off the variants file, or the file was lost
        // or rewritten by another process at the same time): no compile, and listed again.
        for (storage::EntryStore *store : stores_) {
            KJIT_TRY_ASSIGN(auto there, store->find_variant(keyed, call, entry_key, &why));
            if (there) return std::move(*there);
        }
    }
    KJIT_TRY(local_.can_publish(keyed, call));

    // The cluster tier, when one is set: another node's entry, or this node compiles it for the
    // cluster (holding the lease), or another node's compile error; else a compile here.
    KJIT_TRY_ASSIGN(auto found_tier, tier_for(request));
    storage::remote::Tier *const tier = found_tier;
    const storage::remote::Expected expected = expected_for(keyed, entry_key);
    if (request.compile_mode == key::CompileMode::never) {
        return refuse_to_compile(keyed, call, tier, entry_key, source_key, deps);
    }
    if (request.compile_mode == key::CompileMode::warn) warn_of_compile(keyed, entry_key);
    std::optional<storage::remote::Settled> settled;
    if (tier) {
        settled = tier->settle(expected, busy != nullptr);
        if (settled->kind == storage::remote::Settled::Kind::busy) {
            *busy = true;
            return Error{Errc::internal, "put off: another node compiles " + entry_key};  // never returned to a caller
        }
        if (settled->kind == storage::remote::Settled::Kind::failed) return std::move(*settled->failure);
        if (settled->kind == storage::remote::Settled::Kind::fetched) {
            return publish_fetched(keyed, call, std::move(*settled->entry), source_key, deps);
        }
    }

    double seconds = 0;
    const bool shared = call.local_folder && *call.local_folder && folder_trust::shared(**call.local_folder);
    auto compiled = run_nvrtc(keyed, deps, names_program, runner, shared, &seconds);
    if (!compiled) {
        // A compile error is the source's: the other nodes waiting on this lease get it too.
        if (settled && settled->lease && compiled.error().code == Errc::compile) {
            tier->put_failure(expected, compiled.error(), *settled->lease);
        }
        return std::move(compiled).error();
    }
    const std::string lowered = request.name_expression ? compiled->lowered_names.at(0).second : std::string();
    auto name = resolve::name_for_new_cubin(compiled->cubin, "fresh cubin for " + keyed.key, request.keyword,
                                            request.name_expression, lowered);
    if (!name) return linked_name_problem(request, std::move(name).error());

    store::cache_entry::NewEntry entry;
    entry.cubin = compiled->cubin;
    entry.source = request.source;
    entry.manifest = new_manifest(request, entry_key, source_key, *name, seconds);
    if (request.reads_files) storage::record_dependencies(entry, request, deps);
    entry.durable = request.durable;
    // Here first, so that this node's other processes, waiting on the node lock, find it; then
    // for the cluster (the lease is released after, when `settled` goes).
    auto published = publish_everywhere(keyed, call, entry);
    if (published && tier) {
        tier->put(expected, store::cache_entry::complete_manifest(entry.manifest, entry.cubin), entry.cubin,
                  settled && settled->lease ? settled->lease.get() : nullptr);
    }
    return published;
}

namespace {

// The request a refused or warned miss names: its kernel, program, arch and key.
std::string request_text(const key::Request &request, const std::string &entry_key) {
    std::string text = "kernel '" + request.keyword + "'";
    if (request.name_expression) text += " (name expression '" + *request.name_expression + "')";
    text += " of program '" +
            (request.program_name.empty() ? std::string(key::kDefaultProgramName) : request.program_name) + "' for " +
            request.arch + ", key " + entry_key;
    return text;
}

// What set the compile mode, as the caller would write it.
std::string mode_origin(const key::Request &request) {
    if (std::string_view(request.compile_mode_origin) != "KJIT_NO_COMPILE") return request.compile_mode_origin;
    const char *v = environment::get(environment::Variable::no_compile);
    return std::string("$KJIT_NO_COMPILE=") + (v ? v : "");
}

// What a refused miss of `keyed` saw (RefusalProof), for the hit memo; none where an entry is
// there that could not serve (a damaged one may be mended in place), or where the header watch
// cannot vouch for the files `deps` the request reads (its entry `entry_key`).
std::optional<storage::RefusalProof> refusal_proof(const key::KeyedRequest &keyed, const std::string &entry_key,
                                                   const std::vector<key::include_scanner::Dependency> &deps) {
    const key::Request &request = keyed.request;
    storage::RefusalProof seen;
    if (request.reads_files) {
        // Watched first, then proven as the scan found them: a change after this is an event.
        seen.files_at = key::dependency_watch::arm(deps);
        if (!seen.files_at || !key::include_scanner::still_current(deps)) return std::nullopt;
    }
    std::vector<std::string> dirs{request.cache_dir};
    for (const std::string &seed : request.seed_dirs) {
        if (std::find(dirs.begin(), dirs.end(), seed) == dirs.end()) dirs.push_back(seed);
    }
    for (const std::string &dir : dirs) {
        const std::string entry = store::cache_entry::folder_for(dir, entry_key);
        struct stat st {};
        if (::lstat(entry.c_str(), &st) == 0) return std::nullopt;
        seen.places.emplace_back(entry, std::nullopt);
        if (!request.reads_files) continue;
        const std::string variants = store::cache_entry::variants_file_for(dir, keyed.key);
        std::optional<FileIdentity> listed;
        if (::lstat(variants.c_str(), &st) == 0) listed = FileIdentity::from_stat(st);
        seen.places.emplace_back(variants, listed);
    }
    return seen;
}

}  // namespace

std::string Cache::refusal_context(const key::Request &request) {
    std::string context = mode_origin(request);
    for (const std::string &seed : request.seed_dirs) context.append(1, '\0').append(seed);
    context.append(1, '\1').append(request.remote_spec);
    return context;
}

Result<storage::Found> Cache::refuse_to_compile(const key::KeyedRequest &keyed, storage::Call &call,
                                                storage::remote::Tier *tier, const std::string &entry_key,
                                                const std::string &source_key,
                                                const std::vector<key::include_scanner::Dependency> &deps) {
    const key::Request &request = keyed.request;
    if (tier) {
        auto fetched = tier->fetch_many({expected_for(keyed, entry_key)});
        if (fetched.front()) return publish_fetched(keyed, call, std::move(*fetched.front()), source_key, deps);
    }
    call.refusal = refusal_proof(keyed, entry_key, deps);
    std::string asked = "cache folder '" + request.cache_dir + "'";
    if (!request.seed_dirs.empty()) asked += ", " + std::to_string(request.seed_dirs.size()) + " seed folder(s)";
    if (tier) asked += ", the cluster tier";
    return Error{Errc::not_cached,
                 request_text(request, entry_key) + " is not cached, and compiling is refused (by " +
                     mode_origin(request) + "); asked: " + asked +
                     ". Warm it ahead of time: compile it once where compiling is allowed (a staging run, "
                     "`kjit compile`, a batch) into this cache, a seed it reads (`kjit cache export`) or its "
                     "cluster tier (docs/serving.md)"};
}

void Cache::warn_of_compile(const key::KeyedRequest &keyed, const std::string &entry_key) {
    {
        std::lock_guard<std::mutex> lock(warned_mutex_);
        if (!warned_.insert(keyed.entry).second) return;
    }
    // Said whatever KJIT_LOG_LEVEL is (the log is silent by default): saying it is the mode's job.
    const std::string text = "compiling " + request_text(keyed.request, entry_key) + ", which was not cached (" +
                             mode_origin(keyed.request) +
                             ": it is compiled, and said once per kernel; a serving run with compiling refused "
                             "would fail here: docs/serving.md)";
    if (log().should_log(spdlog::level::warn)) {
        log().warn("{}", text);
    } else {
        std::fprintf(stderr, "[kjit warning] %s\n", text.c_str());
        std::fflush(stderr);
    }
}

namespace {

// The header identity whose PCH prices a miss notes (pch_price.hpp), or "": one whose source
// includes something, planned by a batch (which read the prices to plan it) or compiled alone
// without asking for a PCH itself (`--pch`: its own choice). Only one compiled alone asks them.
std::string identity_to_price(const key::Request &request, const std::vector<key::include_scanner::Dependency> &deps,
                              bool names_program) {
    if ((request.use_pch && !request.pch_planned) || !key::includes_headers(request)) return {};
    return key::pch_identity(request, deps, names_program);
}

pch_price::Compile price_kind(const compile::JobOutcome &outcome) {
    if (!outcome.used_pch) return pch_price::Compile::plain;
    return outcome.made_pch ? pch_price::Compile::made_pch : pch_price::Compile::used_pch;
}

}  // namespace

Result<compile::compiler::Output> Cache::run_nvrtc(const key::KeyedRequest &keyed,
                                                   const std::vector<key::include_scanner::Dependency> &deps,
                                                   bool names_program, compile::JobRunner *runner, bool shared,
                                                   double *seconds) {
    const key::Request &request = keyed.request;
    // The key may hold the identity a record gave: the NVRTC that compiles must be that one.
    KJIT_TRY(compile::nvrtc_probe::confirm(request.nvrtc_identity, request.cache_dir));
    if (!request.link_files.empty()) {
        KJIT_TRY(compile::nvjitlink_probe::confirm(request.nvjitlink_identity, request.cache_dir));
    }
    compile::Job job{nvrtc_program(request), {}, {}, keyed.key};
    // Checked here too, before a worker is asked: an item that cannot run is no NVRTC run.
    KJIT_TRY(compile::compiler::check_output_files(job.request.options, job.request.program_name));
    const std::string priced = identity_to_price(request, deps, names_program);
    if (request.use_pch || (!priced.empty() && !request.pch_planned && pch_price::advise(request.cache_dir, priced))) {
        job.pch_identity = priced.empty() ? key::pch_identity(request, deps, names_program) : priced;
        job.pch_options = request.pch_options;
    }
    counters_.nvrtc_compiles.fetch_add(1, std::memory_order_relaxed);
    const int in_flight = counters_.compiles_in_flight.fetch_add(1) + 1;
    for (int seen = counters_.max_compiles_in_flight.load();
         in_flight > seen && !counters_.max_compiles_in_flight.compare_exchange_weak(seen, in_flight);) {
    }
    const auto started = std::chrono::steady_clock::now();
    compile::JobOutcome outcome = runner ? runner->run(job) : compile::run_here(job);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    counters_.compiles_in_flight.fetch_sub(1);
    counters_.nvrtc_nanoseconds.fetch_add(static_cast<std::uint64_t>(*seconds * 1e9), std::memory_order_relaxed);
    if (outcome.used_pch) counters_.pch_compiles.fetch_add(1, std::memory_order_relaxed);
    if (outcome.made_pch) counters_.pch_identities.fetch_add(1, std::memory_order_relaxed);
    if (!priced.empty() && outcome.output) {
        pch_price::note(request.cache_dir, priced, price_kind(outcome), *seconds, shared);
    }
    Result<compile::compiler::Output> compiled = std::move(outcome.output);
    if (compiled && compiled->link_nanoseconds >= 0) {
        counters_.nvjitlink_links.fetch_add(1, std::memory_order_relaxed);
        counters_.nvjitlink_nanoseconds.fetch_add(static_cast<std::uint64_t>(compiled->link_nanoseconds),
                                                  std::memory_order_relaxed);
    }
    if (!compiled && compiled.error().code == Errc::nvrtc &&
        compiled.error().message.find("--gpu-architecture") != std::string::npos) {
        // NVRTC's own words are "invalid value for --gpu-architecture (-arch)": say which value,
        // where it came from and what this NVRTC takes.
        std::string supported;
        for (const std::string &a : compile::compiler::supported_archs())
            supported += (supported.empty() ? "" : ", ") + a;
        Error e = compiled.error();
        e.message = "NVRTC " + request.nvrtc_identity.substr(0, request.nvrtc_identity.find(' ')) +
                    " does not compile for arch '" + request.arch + "'" +
                    (request.arch_origin.empty() ? "" : " (from " + request.arch_origin + ")") +
                    (supported.empty() ? "" : "; it compiles for " + supported) +
                    " (an 'a' or 'f' suffix, e.g. sm_90a, on an arch it lists): " + e.message;
        return e;
    }
    if (!compiled) return compiled;
    if (*seconds >= 1.0) log().info("slow compile: {} [{}] took {:.2f} s", keyed.key, request.keyword, *seconds);
    log().debug("compiled {} [{}] in {:.3f} s", keyed.key, request.keyword, *seconds);
    return compiled;
}

Result<storage::Found> Cache::publish_fetched(const key::KeyedRequest &keyed, storage::Call &call,
                                              storage::remote::Entry fetched, const std::string &source_key,
                                              const std::vector<key::include_scanner::Dependency> &deps) {
    store::cache_entry::NewEntry entry;
    entry.cubin = fetched.cubin;
    entry.source = keyed.request.source;
    entry.manifest = std::move(fetched.manifest);
    entry.manifest.source_key = source_key;  // this node's, as a compile here would record it
    // This node's files: the key says their content is the producer's.
    if (keyed.request.reads_files) storage::record_dependencies(entry, keyed.request, deps);
    entry.durable = keyed.request.durable;
    KJIT_TRY_ASSIGN(auto local, local_.publish(keyed, call, entry));
    return storage::Found{std::move(*local), entry.manifest.name};
}

std::vector<std::optional<storage::Found>> Cache::fetch_from_cluster(
    const std::vector<const key::KeyedRequest *> &misses) {
    std::vector<std::optional<storage::Found>> found(misses.size());
    std::vector<storage::Call> calls(misses.size());  // one per miss: its check of the cache folder
    // The misses of each setting (a batch's items normally share one).
    std::map<std::string, std::vector<std::size_t>> by_spec;
    for (std::size_t i = 0; i < misses.size(); ++i) {
        const key::Request &r = misses[i]->request;
        if (!r.remote_spec.empty() && !r.reads_files) by_spec[r.remote_spec].push_back(i);
    }
    for (const auto &[spec, indexes] : by_spec) {
        auto tier = tier_for(misses[indexes.front()]->request);
        if (!tier || !*tier) continue;  // build() says what is wrong
        std::vector<std::size_t> asked;
        std::vector<storage::remote::Expected> wanted;
        for (std::size_t i : indexes) {
            const key::KeyedRequest &keyed = *misses[i];
            if (!local_.can_publish(keyed, calls[i])) continue;
            asked.push_back(i);
            wanted.push_back(expected_for(keyed, keyed.key));
        }
        auto entries = (*tier)->fetch_many(wanted);
        for (std::size_t k = 0; k < asked.size(); ++k) {
            if (!entries[k]) continue;
            auto published =
                publish_fetched(*misses[asked[k]], calls[asked[k]], std::move(*entries[k]), std::string(), {});
            if (published) found[asked[k]] = std::move(*published);
        }
    }
    return found;
}

Result<storage::Found> Cache::publish_everywhere(const key::KeyedRequest &keyed, storage::Call &call,
                                                 const store::cache_entry::NewEntry &entry) {
    KJIT_TRY_ASSIGN(auto local, local_.publish(keyed, call, entry));
    for (storage::EntryStore *store : stores_) {
        if (store == &local_) continue;
        // Another tier missing the entry costs its users a compile, never this one its result.
        if (auto st = store->publish(keyed, call, entry); !st) {
            log().info("could not publish {} to the {} store: {}", entry.manifest.key, store->name(),
                       st.error().message);
        }
    }
    return storage::Found{std::move(*local), entry.manifest.name};
}

}  // namespace kjit::cache
