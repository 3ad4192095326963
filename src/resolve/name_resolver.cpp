#include "resolve/name_resolver.hpp"

#include "cubin/name_matcher.hpp"
#include "cubin/sidecar.hpp"
#include "cubin/symbol_scanner.hpp"
#include "store/cache_entry.hpp"
#include "util/folder_trust.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"
#include "util/log.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <functional>
#include <vector>

namespace kjit::resolve {

namespace {

Error with_path(const std::string &cubin_path, Error e);

// Whether `line` may have been written for the cubin version `id`. Size and mtime decide,
// except for a current mtime of whole seconds (0 ns: a `tar` copy, a `tar --mtime=@T` release,
// a filesystem that keeps no nanoseconds): two different cubins of one size often share such an
// mtime, so only a line that carries a content hash can match it, whatever nanoseconds the line
// recorded, and the caller then checks that hash against the content.
template <typename LineT>
bool same_version(const LineT &line, const FileIdentity &id) {
    if (line.cubin_size != id.size || line.mtime_sec != id.mtime_sec) return false;
    if (id.mtime_nsec == 0) return line.content_hash.has_value();
    return line.mtime_nsec == id.mtime_nsec;
}

// Whether a line for version `id` must carry a content hash: while the cubin is young (an edit
// within the same timestamp tick keeps size and mtime), and for good when its mtime has whole
// seconds (see same_version).
bool needs_content_hash(const FileIdentity &id, std::int64_t when_ns) {
    return id.mtime_nsec == 0 || young_at(id.mtime_sec, id.mtime_nsec, when_ns);
}

// The keyword rule's choice among the function symbols of `table` (cubin::name_matcher::select).
Result<std::string> choose_by_rule(const cubin::SymbolTable &table, std::string_view keyword) {
    std::vector<cubin::name_matcher::Candidate> candidates;
    candidates.reserve(table.functions().size());
    for (const cubin::FunctionSymbol &f : table.functions()) candidates.push_back({f.name, f.is_entry});
    KJIT_TRY_ASSIGN(auto chosen, cubin::name_matcher::select(candidates, keyword));
    // The rule takes the keyword as the start of the name after _Z<len>: `gem` finds `gemm`.
    // Legitimate (a family's common prefix), but a typo would pass unseen: the debug log says.
    if (!cubin::name_matcher::is_exact_identifier(chosen, keyword)) {
        log().debug("keyword '{}' chose '{}', whose identifier only starts with it", keyword, chosen);
    }
    return std::string(chosen);
}

// The name a scan gives for `keyword` in the cubin `table` holds. For the cubin of a cache entry
// the entry's manifest decides, not the keyword rule: its bytes must be those published (so a
// damaged cubin is bad_cubin, never rescanned into a sidecar), and for the entry's own keyword
// the name is the one recorded at compile time (a name expression may have chosen a kernel the
// rule alone would not), confirmed to be a function symbol of this cubin that passes the rule.
// The name `keyword` denotes in a scanned cubin. For a cache entry's cubin, `published` is its
// manifest, confirmed against the scanned bytes (null for a loose cubin): its recorded name
// answers its own keyword, never a fresh choice.
Result<std::string> name_from_scan(const std::string &cubin_path, const cubin::SymbolTable &table,
                                   std::string_view keyword, const store::cache_entry::Manifest *published) {
    std::optional<store::cache_entry::Manifest> manifest;
    if (published) manifest = *published;
    if (manifest && manifest->keyword == keyword) {
        const bool present = std::any_of(table.functions().begin(), table.functions().end(),
                                         [&](const cubin::FunctionSymbol &f) { return f.name == manifest->name; });
        if (!present || !cubin::name_matcher::matches(manifest->name, keyword)) {
            return Error{Errc::bad_cubin, "cubin '" + cubin_path + "' holds no kernel '" + manifest->name +
                                              "' for keyword '" + std::string(keyword) +
                                              "', the name its cache entry recorded; run `kjit cache verify --fix` "
                                              "to remove the entry (the next kjit_compile rebuilds it)"};
        }
        return std::move(manifest->name);
    }
    auto chosen = choose_by_rule(table, keyword);
    if (!chosen) return with_path(cubin_path, std::move(chosen).error());
    return chosen;
}

// Hashes the cubin and checks it is still the version `expected` with content `hash`.
bool content_verified(const std::string &cubin_path, const FileIdentity &expected, std::uint64_t hash) {
    FileIdentity hashed;
    auto h = hash_file64(cubin_path, &hashed);
    return h && *h == hash && hashed.size == expected.size && hashed.mtime_sec == expected.mtime_sec &&
           hashed.mtime_nsec == expected.mtime_nsec;
}

NameResolver::Rejection rejection_of(cubin::sidecar::FileProblem problem) {
    switch (problem) {
        case cubin::sidecar::FileProblem::unreadable: return NameResolver::Rejection::unreadable;
        case cubin::sidecar::FileProblem::too_large: return NameResolver::Rejection::too_large;
        case cubin::sidecar::FileProblem::empty: return NameResolver::Rejection::empty;
        case cubin::sidecar::FileProblem::bare_name: return NameResolver::Rejection::bare_name;
        case cubin::sidecar::FileProblem::bad_header: return NameResolver::Rejection::bad_header;
        case cubin::sidecar::FileProblem::none:
        case cubin::sidecar::FileProblem::missing: break;
    }
    return NameResolver::Rejection::unreadable;  // not reached: missing and none are no rejection
}

Error with_path(const std::string &cubin_path, Error e) {
    if (e.code == Errc::not_found || e.code == Errc::ambiguous) {
        e.message = "in cubin '" + cubin_path + "': " + e.message;
    }
    return e;
}

// Publishes the sidecar; a failure is logged and counted, never returned as an error.
bool write_quietly(const std::string &sidecar_path, const std::vector<cubin::sidecar::Line> &lines,
                   NameResolver::Counters &counters) {
    if (auto st = cubin::sidecar::write(sidecar_path, lines); !st) {
        counters.sidecar_write_failures.fetch_add(1, std::memory_order_relaxed);
        log().debug("sidecar write failed, continuing without it: {}", st.error().message);
        return false;
    }
    counters.sidecar_writes.fetch_add(1, std::memory_order_relaxed);
    log().debug("sidecar rewritten: {}", sidecar_path);
    return true;
}

// Reads the sidecar at `sidecar_path` into `buffer`: what is wrong with it as a whole (none for
// one of the right form that this user may trust), with `detail` saying more.
cubin::sidecar::FileProblem read_sidecar(const std::string &sidecar_path, cubin::sidecar::FileBuffer &buffer,
                                         std::string &detail) {
    cubin::sidecar::read_into(sidecar_path, buffer);
    detail = std::move(buffer.detail);
    cubin::sidecar::FileProblem problem = buffer.problem;
    // A sidecar another user wrote (beside a cubin in /tmp, say) names whatever kernel they like
    // that passes the keyword rule: the line's check is a hash anyone can compute. Ignore it,
    // as an unreadable one (kjit_stats has no slot of its own for it): scan, and rewrite it
    // where we may, else answer from the memo.
    if (problem == cubin::sidecar::FileProblem::none &&
        !folder_trust::trusted_file(sidecar_path, buffer.owner_uid, buffer.owner_gid)) {
        problem = cubin::sidecar::FileProblem::unreadable;
        detail = "owned by " + folder_trust::user_text(buffer.owner_uid) +
                 ", not by you or root (nor by a fellow member of a team folder's group): another user could "
                 "have planted it";
    }
    if (problem == cubin::sidecar::FileProblem::none) problem = cubin::sidecar::classify(buffer.text(), &detail);
    return problem;
}

// What check_line found: why the sidecar cannot answer (`reason` for the log, `why` for the
// counters), or else the line that may.
struct LineCheck {
    const char *reason = nullptr;
    NameResolver::Rejection why = NameResolver::Rejection::count;
    std::optional<cubin::sidecar::LineView> line;  // set only when no reason was found
};

// Checks the sidecar bytes `sidecar_text` (whose whole-file problem is `problem`) for a line
// that may answer `keyword` for the cubin version `current`: one that passes the keyword rule
// and matches the version's size and mtime (one with a content hash still needs it checked).
LineCheck check_line(std::string_view sidecar_text, cubin::sidecar::FileProblem problem, bool trust_sidecar,
                     std::string_view keyword, const FileIdentity &current) {
    LineCheck out;
    if (!trust_sidecar) {
        out.reason = "distrusted (the driver found no symbol of the name it gave)";
        out.why = NameResolver::Rejection::distrusted;
    } else if (problem != cubin::sidecar::FileProblem::none) {
        out.reason = cubin::sidecar::to_string(problem);
        out.why = rejection_of(problem);
    } else {
        const std::optional<cubin::sidecar::LineView> line = cubin::sidecar::find_line(sidecar_text, keyword);
        if (!line) {
            out.reason = "no valid line for this keyword";
            out.why = NameResolver::Rejection::no_line;
        } else if (!same_version(*line, current)) {
            out.reason =
                current.mtime_nsec == 0 && line->cubin_size == current.size && line->mtime_sec == current.mtime_sec
                    ? "stale (the cubin's mtime has whole seconds and the line no content hash to tell versions apart)"
                    : "stale (the cubin's size or mtime changed)";
            out.why = NameResolver::Rejection::stale;
        } else if (!cubin::name_matcher::matches(line->name, keyword)) {
            out.reason = "its name does not pass the keyword rule";
            out.why = NameResolver::Rejection::fails_rule;
        } else {
            out.line = line;
        }
    }
    return out;
}

// The symbol table of the cubin version to scan: the caller's `image` when given, else the file.
// A cache entry's cubin is scanned with its manifest read from the same open folder (a
// rebuild may swap a whole new entry in at the path meanwhile), and confirmed against it into
// `confirmed`: a damaged cubin is never given a name.
Result<cubin::SymbolTable> scan_table(const std::string &cubin_path, const std::string_view *image,
                                      const store::cache_entry::Manifest *published,
                                      std::optional<store::cache_entry::Manifest> &confirmed,
                                      NameResolver::Counters &counters) {
    const std::string entry(store::cache_entry::entry_of_cubin(cubin_path));
    UniqueFd entry_fd;
    if (!entry.empty() && !(image && published)) {
        KJIT_TRY_ASSIGN(auto opened, store::cache_entry::open_entry(entry));
        entry_fd = std::move(opened);
    }
    // A loose cubin: its symbols alone are read (a content hash, where its version needs one,
    // reads the rest: scanned_line). An entry's is read whole: its manifest's hash covers it.
    auto table = image ? cubin::SymbolTable::from_view(*image, cubin_path)
                 : entry_fd.valid()
                     ? cubin::SymbolTable::open_file_at(entry_fd.get(), store::cache_entry::kCubinFile, cubin_path)
                     : cubin::SymbolTable::open_symbols(cubin_path);
    if (!table) return std::move(table).error();
    counters.scans.fetch_add(1, std::memory_order_relaxed);
    if (entry_fd.valid()) {
        KJIT_TRY_ASSIGN(auto manifest,
                        store::cache_entry::confirm_published(entry, entry_fd.get(), cubin_path, table->image()));
        confirmed = std::move(manifest);
    }
    return table;
}

// The content hash of the version `scanned` of the cubin at `cubin_path` whose symbols `table`
// holds: of its image when whole, else of the file, read now, when it is still that version;
// nothing when it is not (it changed since the scan).
std::optional<std::uint64_t> scanned_content_hash(const std::string &cubin_path, const FileIdentity &scanned,
                                                  const cubin::SymbolTable &table) {
    if (table.whole_image()) return hash64(table.image());
    FileIdentity hashed;
    auto h = hash_file64(cubin_path, &hashed);
    if (!h || !(hashed == scanned)) return std::nullopt;
    return *h;
}

// The sidecar line a scan writes: `keyword` -> `name` for the version `scanned` of the cubin in
// `table`, with a content hash while that version needs one (young, or a whole-second mtime);
// nothing when that hash cannot be taken of that version (the cubin changed since the scan).
std::optional<cubin::sidecar::Line> scanned_line(std::string_view keyword, const std::string &name,
                                                 const std::string &cubin_path, const FileIdentity &scanned,
                                                 const cubin::SymbolTable &table, std::int64_t scan_started) {
    cubin::sidecar::Line line;
    line.keyword.assign(keyword);
    line.name = name;
    line.cubin_size = scanned.size;
    line.mtime_sec = scanned.mtime_sec;
    line.mtime_nsec = scanned.mtime_nsec;
    if (needs_content_hash(scanned, scan_started)) {
        line.content_hash = scanned_content_hash(cubin_path, scanned, table);
        if (!line.content_hash) return std::nullopt;
    }
    return line;
}

}  // namespace

bool NameResolver::MemoKey::operator==(const MemoKey &o) const {
    return keyword == o.keyword && identity == o.identity;
}

std::size_t NameResolver::MemoKeyHash::operator()(const MemoKey &k) const {
    const std::size_t h = std::hash<std::string>{}(k.keyword);
    return h ^ (FileIdentityHash{}(k.identity) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

namespace {
std::atomic<NameResolver *> instance_slot{nullptr};
std::atomic<std::uint64_t> next_resolver_id{1};

// A settled sidecar hit this thread made (NameResolver's "Repeats"). Per thread, so a repeat
// takes no lock and threads never wait on each other; each thread reads a sidecar once.
struct SettledHit {
    std::uint64_t resolver = 0;  // the id_ of the resolver that read it
    std::string cubin_path;
    std::string keyword;
    std::string sidecar_path;
    std::string name;
    FileIdentity cubin;    // the cubin version the line was checked against
    FileIdentity sidecar;  // the sidecar version read
    uid_t owner = 0;
};

// At most this many per thread; cleared when full (a repeat then reads its sidecar once more).
constexpr std::size_t kSettledHitsPerThread = 1024;
using ThreadHits = std::unordered_map<std::uint64_t, SettledHit>;  // by hash64(cubin path, keyword)

// The map is reached through a trivially destructible pointer, so a call made while the thread
// exits, after its thread_local destructors ran, finds nothing rather than a destroyed map.
thread_local ThreadHits *thread_hits = nullptr;
thread_local bool thread_hits_gone = false;
struct ThreadHitsOwner {
    bool armed = false;
    ~ThreadHitsOwner() {
        delete thread_hits;
        thread_hits = nullptr;
        thread_hits_gone = true;
    }
};
thread_local ThreadHitsOwner thread_hits_owner;

ThreadHits *thread_hits_to_fill() {
    if (thread_hits_gone) return nullptr;
    if (!thread_hits) {
        thread_hits_owner.armed = true;  // its first use registers the destructor above
        thread_hits = new ThreadHits();
    }
    if (thread_hits->size() >= kSettledHitsPerThread) thread_hits->clear();
    return thread_hits;
}
}  // namespace

NameResolver::NameResolver() : id_(next_resolver_id.fetch_add(1, std::memory_order_relaxed)) {}

NameResolver &NameResolver::instance() {
    // Leaked: usable during exit. No once-guard (fork_guard.hpp).
    return fork_guard::lazy(instance_slot, [] { return new NameResolver(); });
}

const bool NameResolver::fork_handler_registered_ =
    fork_guard::at_fork_child(fork_guard::State::resolver_memo, &NameResolver::renew_in_forked_child);

void NameResolver::renew_in_forked_child() {
    NameResolver *resolver = instance_slot.load(std::memory_order_relaxed);
    if (!resolver) return;
    fork_guard::renew(resolver->memo_mutex_);
    fork_guard::renew(resolver->memo_);
}

bool NameResolver::Version::has_content(std::uint64_t hash) const {
    if (image) return hash64(*image) == hash;
    return content_verified(path, identity, hash);
}

Result<std::string> NameResolver::resolve(const std::string &cubin_path, std::string_view keyword, FileIdentity *proven,
                                          Repeats repeats) {
    if (auto st = cubin::name_matcher::check_keyword(keyword); !st) return st.error();

    KJIT_TRY_ASSIGN(auto current, cubin::stat_cubin(cubin_path));
    if (auto repeat = settled_repeat(cubin_path, keyword, current)) {
        if (proven) *proven = current;
        return std::move(*repeat);
    }
    const bool remembered = repeats == Repeats::remembered;
    const std::int64_t read_started = remembered ? realtime_ns() : 0;
    SidecarRead read;
    auto resolved = resolve_version(Version{cubin_path, current, nullptr}, keyword, true, remembered ? &read : nullptr);
    if (!resolved) return std::move(resolved).error();
    if (read.settled_hit) remember_settled(cubin_path, keyword, current, std::move(read), resolved->name, read_started);
    if (proven) *proven = current;
    return std::move(resolved->name);
}

std::optional<std::string> NameResolver::settled_repeat(const std::string &cubin_path, std::string_view keyword,
                                                        const FileIdentity &cubin) {
    const ThreadHits *hits = thread_hits;
    if (!hits || hits->empty()) return std::nullopt;
    const auto it = hits->find(hash64(cubin_path, keyword));
    if (it == hits->end()) return std::nullopt;
    const SettledHit &hit = it->second;
    if (hit.resolver != id_ || hit.cubin != cubin || hit.cubin_path != cubin_path || hit.keyword != keyword) {
        return std::nullopt;
    }
    // lstat, as the read never follows a link: a link put in the sidecar's place is not it.
    struct stat st {};
    if (::lstat(hit.sidecar_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != hit.owner ||
        FileIdentity::from_stat(st) != hit.sidecar) {
        return std::nullopt;
    }
    if (hit.owner != 0 && hit.owner != ::geteuid()) return std::nullopt;  // trusted_file's rule, for this euid
    counters_.sidecar_hits.fetch_add(1, std::memory_order_relaxed);
    counters_.settled_repeats.fetch_add(1, std::memory_order_relaxed);
    log().debug("sidecar hit, unchanged since this thread read it: {} [{}] -> {}", cubin_path, keyword, hit.name);
    return hit.name;
}

void NameResolver::remember_settled(const std::string &cubin_path, std::string_view keyword, const FileIdentity &cubin,
                                    SidecarRead &&read, const std::string &name, std::int64_t read_started) {
    // A sidecar changed within the window may yet be rewritten in place within the same
    // timestamp tick, which no stat would show; and only the plain owner rule is remembered
    // (a team folder's depends on the folder, which a repeat does not look at).
    if (!read.regular || young_at(read.identity.ctime_sec, read.identity.ctime_nsec, read_started)) return;
    if (read.owner != 0 && read.owner != ::geteuid()) return;
    ThreadHits *hits = thread_hits_to_fill();
    if (!hits) return;
    SettledHit &hit = (*hits)[hash64(cubin_path, keyword)];
    hit.resolver = id_;
    hit.cubin_path = cubin_path;
    hit.keyword.assign(keyword);
    hit.sidecar_path = std::move(read.path);
    hit.name = name;
    hit.cubin = cubin;
    hit.sidecar = read.identity;
    hit.owner = read.owner;
}

Result<NameResolver::Resolution> NameResolver::resolve_image(const std::string &cubin_path, std::string_view keyword,
                                                             const FileIdentity &identity, std::string_view image,
                                                             bool trust_sidecar,
                                                             const store::cache_entry::Manifest *published) {
    if (auto st = cubin::name_matcher::check_keyword(keyword); !st) return st.error();
    return resolve_version(Version{cubin_path, identity, &image, published}, keyword, trust_sidecar);
}

Result<NameResolver::Resolution> NameResolver::resolve_version(const Version &version, std::string_view keyword,
                                                               bool trust_sidecar, SidecarRead *read) {
    const std::string &cubin_path = version.path;
    const FileIdentity &current = version.identity;
    std::string sidecar_path = cubin::sidecar::path_for(cubin_path);
    cubin::sidecar::FileBuffer buffer;
    std::string detail;
    const cubin::sidecar::FileProblem problem = read_sidecar(sidecar_path, buffer, detail);
    LineCheck check = check_line(buffer.text(), problem, trust_sidecar, keyword, current);
    if (check.line && !check.line->content_hash) {
        counters_.sidecar_hits.fetch_add(1, std::memory_order_relaxed);
        log().debug("sidecar hit: {} [{}] -> {}", cubin_path, keyword, check.line->name);
        if (read) *read = SidecarRead{std::move(sidecar_path), buffer.identity, buffer.owner_uid, buffer.regular, true};
        return Resolution{std::string(check.line->name), true};
    }
    if (check.line) {
        // Written while the cubin was young, or for a whole-second mtime: only its content
        // can prove it current.
        if (auto hit = racy_line_hit(version, keyword, check.line->name, *check.line->content_hash, buffer.text(),
                                     sidecar_path)) {
            return std::move(*hit);
        }
        check.reason = "stale (the cubin's content changed)";
        check.why = Rejection::stale;
    }
    if (problem == cubin::sidecar::FileProblem::missing && trust_sidecar) {
        counters_.sidecar_missing.fetch_add(1, std::memory_order_relaxed);
    } else {
        counters_.sidecar_rejections.fetch_add(1, std::memory_order_relaxed);
        counters_.rejections[static_cast<std::size_t>(check.why)].fetch_add(1, std::memory_order_relaxed);
    }
    log().debug("sidecar not used for {} [{}]: {}{}{}", cubin_path, keyword, check.reason, detail.empty() ? "" : ": ",
                detail);
    if (trust_sidecar) {
        if (auto memo = memo_lookup(version, MemoKey{std::string(keyword), current})) {
            return Resolution{std::move(*memo), true};
        }
    }
    return scan_version(version, keyword, problem, buffer.text(), sidecar_path);
}

// The answer of a sidecar line with a content hash, once the memo or the cubin's content confirms it.
std::optional<NameResolver::Resolution> NameResolver::racy_line_hit(const Version &version, std::string_view keyword,
                                                                    std::string_view line_name,
                                                                    std::uint64_t content_hash,
                                                                    std::string_view sidecar_text,
                                                                    const std::string &sidecar_path) {
    const FileIdentity &current = version.identity;
    if (auto memo = memo_lookup(version, MemoKey{std::string(keyword), current})) {
        return Resolution{std::move(*memo), true};
    }
    if (!version.has_content(content_hash)) return std::nullopt;
    counters_.sidecar_content_checks.fetch_add(1, std::memory_order_relaxed);
    counters_.racy_sidecar_hits.fetch_add(1, std::memory_order_relaxed);
    std::string name(line_name);
    log().debug("sidecar hit after content check (young or whole-second cubin): {} [{}] -> {}", version.path, keyword,
                name);
    if (!needs_content_hash(current, realtime_ns())) {
        std::vector<cubin::sidecar::Line> lines;
        for (cubin::sidecar::Line &l : cubin::sidecar::parse(sidecar_text).lines) {
            if (!same_version(l, current)) continue;
            if (l.keyword == keyword) l.content_hash.reset();
            lines.push_back(std::move(l));
        }
        if (!write_quietly(sidecar_path, lines, counters_)) {
            memo_store(MemoKey{std::string(keyword), current}, MemoValue{name, std::nullopt});
        }
    }
    return Resolution{std::move(name), true};
}

// Scans the cubin version for `keyword` and rewrites its sidecar line (else memoizes the answer).
Result<NameResolver::Resolution> NameResolver::scan_version(const Version &version, std::string_view keyword,
                                                            cubin::sidecar::FileProblem problem,
                                                            std::string_view sidecar_text,
                                                            const std::string &sidecar_path) {
    const std::string &cubin_path = version.path;
    // Scan. Lines for other keywords that belong to this cubin version are kept.
    const std::int64_t scan_started = realtime_ns();
    std::optional<store::cache_entry::Manifest> confirmed;
    KJIT_TRY_ASSIGN(auto table, scan_table(cubin_path, version.image, version.published, confirmed, counters_));
    KJIT_TRY_ASSIGN(auto scanned_name, name_from_scan(cubin_path, table, keyword,
                                                      version.published ? version.published
                                                      : confirmed       ? &*confirmed
                                                                        : nullptr));
    std::string name = std::move(scanned_name);

    // The version scanned: the caller's bytes, or the fstat of the file as mapped.
    const FileIdentity &scanned = version.image ? version.identity : table.identity();
    std::optional<cubin::sidecar::Line> scanned_version =
        scanned_line(keyword, name, cubin_path, scanned, table, scan_started);
    if (!scanned_version) {  // a loose cubin rewritten since it was scanned: its line cannot be vouched for
        log().debug("scanned {} [{}] -> {}, but it changed before its content hash was taken: no sidecar line",
                    cubin_path, keyword, name);
        return Resolution{std::move(name), false};
    }
    cubin::sidecar::Line &line = *scanned_version;
    log().debug("scanned {} [{}] -> {} ({} function symbols{})", cubin_path, keyword, name, table.functions().size(),
                line.content_hash ? ", young or whole-second mtime: content hash kept" : "");

    std::vector<cubin::sidecar::Line> lines;
    if (problem == cubin::sidecar::FileProblem::none) {
        for (cubin::sidecar::Line &l : cubin::sidecar::parse(sidecar_text).lines) {
            if (l.keyword != keyword && same_version(l, scanned)) lines.push_back(std::move(l));
        }
    }
    const std::optional<std::uint64_t> content_hash = line.content_hash;
    lines.push_back(std::move(line));
    if (!write_quietly(sidecar_path, lines, counters_)) {
        memo_store(MemoKey{std::string(keyword), scanned}, MemoValue{name, content_hash});
    }
    return Resolution{std::move(name), false};
}

std::optional<std::string> NameResolver::memo_lookup(const Version &version, const MemoKey &key) {
    MemoValue value;
    {
        std::lock_guard<std::mutex> lock(memo_mutex_);
        if (memo_.empty()) return std::nullopt;
        auto it = memo_.find(key);
        if (it == memo_.end()) return std::nullopt;
        value = it->second;
    }
    if (value.content_hash) {
        if (!version.has_content(*value.content_hash)) return std::nullopt;
        counters_.sidecar_content_checks.fetch_add(1, std::memory_order_relaxed);
        if (!needs_content_hash(key.identity, realtime_ns())) {
            std::lock_guard<std::mutex> lock(memo_mutex_);
            auto it = memo_.find(key);
            if (it != memo_.end()) it->second.content_hash.reset();
        }
    }
    counters_.memo_hits.fetch_add(1, std::memory_order_relaxed);
    log().debug("memo hit (sidecar not writable): {} [{}] -> {}", version.path, key.keyword, value.name);
    return std::move(value.name);
}

void NameResolver::memo_store(MemoKey key, MemoValue value) {
    std::lock_guard<std::mutex> lock(memo_mutex_);
    if (memo_.size() >= kMemoCapacity) memo_.clear();
    memo_[std::move(key)] = std::move(value);
}

Result<std::string> name_for_new_cubin(std::string_view cubin, const std::string &what, std::string_view keyword,
                                       const std::optional<std::string> &name_expression, const std::string &lowered) {
    if (name_expression) {
        if (!cubin::name_matcher::matches(lowered, keyword)) {
            return Error{Errc::invalid_argument, "name expression '" + *name_expression + "' lowers to '" + lowered +
                                                     "', which does not match keyword '" + std::string(keyword) + "'"};
        }
        return lowered;
    }
    KJIT_TRY_ASSIGN(auto table, cubin::SymbolTable::from_bytes(std::string(cubin), what));
    auto chosen = choose_by_rule(table, keyword);
    if (!chosen) {
        Error e = std::move(chosen).error();
        e.message = "in the compiled source: " + e.message;
        return e;
    }
    return chosen;
}

std::string recorded_name_problem(const store::cache_entry::Manifest &m, std::string_view cubin,
                                  const std::string &what) {
    if (m.name_expression) {
        if (!cubin::name_matcher::matches(m.name, m.keyword)) return "name '" + m.name + "' does not match its keyword";
        auto table = cubin::SymbolTable::from_view(cubin, what);
        if (!table) return table.error().message;
        const auto &fns = table->functions();
        if (std::none_of(fns.begin(), fns.end(), [&](const cubin::FunctionSymbol &f) { return f.name == m.name; })) {
            return "name '" + m.name + "' is not a function of its cubin";
        }
        return {};
    }
    auto name = name_for_new_cubin(cubin, what, m.keyword, std::nullopt, std::string());
    if (!name) return name.error().message;
    if (*name != m.name) return "names '" + m.name + "' where the keyword rule chooses '" + *name + "'";
    return {};
}

}  // namespace kjit::resolve
