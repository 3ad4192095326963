// Name resolver: answers "which mangled name does keyword K denote in this cubin?" on the
// sidecar fast path, falling back to a scan. It composes the sidecar module, the symbol scanner
// and the name matcher, and owns the trust rules of DESIGN.md: a sidecar line is used only if
// it was written for this keyword, its name passes the keyword rule, and it belongs to the
// cubin as it is now.
//
// Cubin identity: a line records the cubin's size and mtime (both survive `cp -a`). Size and
// mtime cannot tell apart two versions written within one filesystem timestamp tick, so a line
// written while the cubin was younger than kRacyWindow also records a hash of the cubin's
// content, and a hit on such a line hashes the cubin before it trusts the line (git's "racy
// clean" rule); the first such hit after the window has passed rewrites the line without the
// hash, so steady-state hits read no cubin. Nor can they when the cubin's mtime has whole
// seconds (0 ns: `tar` copies, `tar --mtime=@T` releases, coarse filesystems), where two cubins
// of one size often share the mtime: such a line keeps its content hash for good, every hit
// checks it, and a line without one never matches a whole-second mtime.
//
// Repeats: a thread that was answered by a settled line (no content hash) of a sidecar whose
// last status change was already older than kRacyWindow when it was read remembers what it
// read. Its next call for the same cubin and keyword is answered from that, without opening
// the sidecar, when the cubin's stat is still the version the line was checked against and
// the sidecar's lstat is still the one read: same inode, size, mtime and ctime (any write,
// rename, chmod or chown changes the ctime, which no user can set back), still a regular file
// owned by this user or root. The stat proves exactly what the read proved; the age rule rules
// out a rewrite in place within the timestamp tick of the version read.
//
// Cache entries: a rescan of an entry's cubin first confirms the bytes against the XXH3-128 its
// manifest recorded (a damaged cubin is bad_cubin, and no sidecar line is written for it), and
// for the entry's own keyword answers the name the manifest recorded (confirmed present and
// passing the keyword rule) instead of choosing by the rule.
#pragma once

#include "store/cache_entry.hpp"
#include "util/filesystem.hpp"
#include "util/status.hpp"

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kjit::cubin::sidecar {
enum class FileProblem;  // cubin/sidecar.hpp
}

namespace kjit::resolve {

class NameResolver {
public:
    // A cubin modified less than this long before it was scanned gets a content hash in its
    // sidecar line (the shared young-file rule of filesystem.hpp).
    static constexpr std::int64_t kRacyWindowNs = kjit::kRacyWindowNs;
    // The in-process memo (used when a sidecar cannot be written) holds at most this many
    // answers; it is cleared when full.
    static constexpr std::size_t kMemoCapacity = 4096;

    // Why a sidecar was not used: the index of Counters::rejections (and, in this order, of
    // kjit_stats.sidecar_rejections: api/c_api_cache.cpp checks they agree).
    enum class Rejection : unsigned {
        unreadable,  // a symlink, a folder, no permission, an I/O error
        too_large,
        empty,
        bare_name,   // a bare name as older tools wrote it
        bad_header,  // not a kjit sidecar, or another format version
        no_line,     // no valid line for the keyword
        stale,       // the cubin's size, mtime or content changed
        fails_rule,  // its name does not pass the keyword rule
        distrusted,  // the driver found no symbol of the name it gave
        count
    };

    // Counters for tests, the log and kjit_get_stats. Relaxed atomics: cheap, no lock.
    struct Counters {
        std::atomic<std::uint64_t> sidecar_hits{0};
        std::atomic<std::uint64_t> settled_repeats{0};         // of which answered by stat alone (Repeats above)
        std::atomic<std::uint64_t> sidecar_content_checks{0};  // hits that hashed the cubin
        std::atomic<std::uint64_t> racy_sidecar_hits{0};       // of which sidecar (not memo) hits
        std::atomic<std::uint64_t> memo_hits{0};
        std::atomic<std::uint64_t> scans{0};
        std::atomic<std::uint64_t> sidecar_rejections{0};  // all reasons
        std::atomic<std::uint64_t> sidecar_missing{0};     // no sidecar at all (not a rejection)
        std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(Rejection::count)> rejections{};
        std::atomic<std::uint64_t> sidecar_writes{0};
        std::atomic<std::uint64_t> sidecar_write_failures{0};
    };

    // The resolver kjit_resolve_name and kjit_load_cached use; one per process. A forked child's
    // starts with an empty memo (fork_guard.hpp).
    static NameResolver &instance();

    // Whether resolve() keeps a settled sidecar hit for the thread's repeats (Repeats above):
    // kjit_resolve_name's callers repeat; the cache's look-up does not reach the resolver again
    // for a request its hit memo answers.
    enum class Repeats { remembered, not_expected };

    // Resolves `keyword` in the cubin at `cubin_path`. Errors: invalid_argument (bad keyword),
    // io (cubin missing or unreadable), bad_cubin, not_found, ambiguous. Messages name the file.
    // Thread safe; the hit path takes no lock. `proven` (when given) receives the identity of the
    // cubin file the name was resolved for (its stat, taken before the sidecar was checked
    // against it): what a caller remembering the answer compares later.
    Result<std::string> resolve(const std::string &cubin_path, std::string_view keyword, FileIdentity *proven = nullptr,
                                Repeats repeats = Repeats::remembered);

    struct Resolution {
        std::string name;
        bool from_sidecar = false;  // taken from a sidecar line or the memo, not from a scan
    };

    // Resolves `keyword` for one cubin version whose bytes the caller holds: `image`, read
    // from `cubin_path`, which fstat described as `identity`. A sidecar line is trusted only
    // for that identity, a racy line is checked against `image`, and a scan scans `image`, so
    // the answer belongs to exactly these bytes whatever happens to the file meanwhile (the
    // loader hands the same bytes to the driver). With `trust_sidecar` false the sidecar and
    // the memo are skipped and this keyword's line is rewritten from a scan: the self-heal
    // path, when the driver finds no symbol of the name a sidecar gave. Same errors as
    // resolve() except io. `image` is only read during the call. For a cache entry's cubin,
    // `published` is its manifest, already confirmed against `image` by the caller (read from
    // the same open folder: KernelLoader::prepare); a rescan answers its name for its keyword.
    Result<Resolution> resolve_image(const std::string &cubin_path, std::string_view keyword,
                                     const FileIdentity &identity, std::string_view image, bool trust_sidecar = true,
                                     const store::cache_entry::Manifest *published = nullptr);

    NameResolver();
    NameResolver(const NameResolver &) = delete;
    NameResolver &operator=(const NameResolver &) = delete;

    const Counters &counters() const { return counters_; }

private:
    struct MemoKey {
        std::string keyword;
        FileIdentity identity;
        bool operator==(const MemoKey &o) const;
    };
    struct MemoKeyHash {
        std::size_t operator()(const MemoKey &k) const;
    };
    struct MemoValue {
        std::string name;
        std::optional<std::uint64_t> content_hash;  // racy: verify before use
    };

    // One cubin version: the file at `path` as `identity` describes it and, when the caller
    // holds them, its bytes (which then answer content checks and scans instead of the file).
    struct Version {
        const std::string &path;
        const FileIdentity &identity;
        const std::string_view *image;                            // nullptr: read the file
        const store::cache_entry::Manifest *published = nullptr;  // confirmed against `image` (entries)
        bool has_content(std::uint64_t hash) const;
    };

    // The sidecar a hit read, as read_into saw it: what a repeat compares (Repeats above).
    struct SidecarRead {
        std::string path;
        FileIdentity identity;
        uid_t owner = 0;
        bool regular = false;
        bool settled_hit = false;  // a line without a content hash answered
    };

    // `read` (when given) receives the sidecar read, on a hit by a settled line.
    Result<Resolution> resolve_version(const Version &version, std::string_view keyword, bool trust_sidecar,
                                       SidecarRead *read = nullptr);
    // The answer this thread remembers for `keyword` in the cubin at `cubin_path`, whose stat
    // is `cubin`, when both files are provably unchanged since it read them; else nullopt.
    std::optional<std::string> settled_repeat(const std::string &cubin_path, std::string_view keyword,
                                              const FileIdentity &cubin);
    // Remembers a settled hit for this thread's repeats, when the sidecar was settled (its
    // ctime older than kRacyWindow at `read_started`) and owned by this user or root.
    void remember_settled(const std::string &cubin_path, std::string_view keyword, const FileIdentity &cubin,
                          SidecarRead &&read, const std::string &name, std::int64_t read_started);
    // resolve_version's hit on a sidecar line that carries a content hash (`line_name`,
    // `content_hash`), once the memo or the cubin's content confirms it; nullopt when the
    // content changed. `sidecar_text`: the sidecar as read, rewritten once the cubin has aged.
    std::optional<Resolution> racy_line_hit(const Version &version, std::string_view keyword,
                                            std::string_view line_name, std::uint64_t content_hash,
                                            std::string_view sidecar_text, const std::string &sidecar_path);
    // resolve_version's scan: names `keyword` in the cubin version and writes its sidecar line,
    // keeping the other keywords' lines of this version from the sidecar as read (`problem`,
    // `sidecar_text`); the memo keeps the answer where the sidecar cannot be written.
    Result<Resolution> scan_version(const Version &version, std::string_view keyword,
                                    cubin::sidecar::FileProblem problem, std::string_view sidecar_text,
                                    const std::string &sidecar_path);
    std::optional<std::string> memo_lookup(const Version &version, const MemoKey &key);
    void memo_store(MemoKey key, MemoValue value);
    // In a forked child: the instance's memo and its lock made anew (a thread of the parent may
    // have held the lock, or been changing the memo, at the fork).
    static void renew_in_forked_child();
    static const bool fork_handler_registered_;

    const std::uint64_t id_;  // tells this resolver's remembered hits from another's in a thread
    Counters counters_;
    std::mutex memo_mutex_;
    std::unordered_map<MemoKey, MemoValue, MemoKeyHash> memo_;
};

// The name of the kernel `keyword` denotes in a freshly compiled cubin (`cubin`; `what` names it
// in messages): the lowered name of the request's name expression when it has one (`lowered`,
// NVRTC's answer; it must pass the keyword rule), else the keyword rule's choice among the
// cubin's function symbols, as a scan of it would choose. Errors: invalid_argument (a name
// expression lowering to a name the rule refuses), bad_cubin, not_found, ambiguous.
Result<std::string> name_for_new_cubin(std::string_view cubin, const std::string &what, std::string_view keyword,
                                       const std::optional<std::string> &name_expression, const std::string &lowered);

// Why the name `m` (a manifest) records for its keyword is not the one a compile of `cubin`
// gives: with a name expression, the lowered name must pass the keyword rule and be a function
// of the cubin (the lowering is NVRTC's, which cannot be asked again); else the keyword rule's
// choice among the cubin's symbols must be it. "" when it is. `what` names the cubin in
// messages. An entry that did not come from this process's compile (a downloaded one, a seed's)
// is checked with it.
std::string recorded_name_problem(const store::cache_entry::Manifest &m, std::string_view cubin,
                                  const std::string &what);

}  // namespace kjit::resolve
