#include "cache/hit_memo.hpp"

#include "key/dependency_watch.hpp"
#include "key/include_scanner.hpp"
#include "store/cache_entry.hpp"
#include "util/environment.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"

#include <unistd.h>
#include <xxhash.h>

#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kjit::cache {

namespace {

// The monotonic clock at the kernel's tick (a few ms): read from the vDSO's page without a
// system call and a fifth of CLOCK_MONOTONIC's price, and a second's revalidation interval does
// not need more.
std::int64_t coarse_ns() {
    struct timespec ts {};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The fields are laid end to end in a buffer of the thread's and hashed in one call: XXH3's
// streaming interface costs more per field than these few bytes do.
HitMemo::Fields::Buffer &fields_buffer() {
    thread_local HitMemo::Fields::Buffer buffer;
    return buffer;
}
constexpr std::size_t kKeptCapacity = 1 << 20;

}  // namespace

HitMemo::Fields::Fields() : b_(fields_buffer()) { b_.size = 0; }

void HitMemo::Fields::grow(std::size_t n) {
    const std::size_t capacity = std::max<std::size_t>({4096, b_.size + n, 2 * b_.capacity});
    std::unique_ptr<char[]> data(new char[capacity]);
    if (b_.size) std::memcpy(data.get(), b_.data.get(), b_.size);
    b_.data = std::move(data);
    b_.capacity = capacity;
}

HitMemo::Digest HitMemo::Fields::digest() {
    const XXH128_hash_t h = XXH3_128bits(b_.data.get(), b_.size);
    if (b_.capacity > kKeptCapacity) b_ = Buffer{};  // a huge source's buffer is not kept
    return Digest{h.low64, h.high64};
}

namespace {

// digest_fields' reader of a key::Request: its fields as they are.
struct RequestReader {
    const key::Request &r;
    const std::string &source() const { return r.source; }
    const std::string &keyword() const { return r.keyword; }
    const std::string &cache_dir() const { return r.cache_dir; }
    const std::string &arch() const { return r.arch; }
    const std::vector<std::string> &nvrtc_options() const { return r.nvrtc_options; }
    const std::vector<std::string> &include_paths() const { return r.include_paths; }
    const std::vector<std::pair<std::string, std::string>> &headers() const { return r.headers; }
    const std::optional<std::string> &name_expression() const { return r.name_expression; }
    const std::string &program_name() const { return r.program_name; }
    const std::vector<std::string> &link_inputs() const { return r.link_inputs; }
    const std::vector<std::string> &link_options() const { return r.link_options; }
    // They change the key where a folder is pinned or keyed by location (key::key_folders).
    const std::vector<std::string> &base_dirs() const { return r.base_dirs; }
};

}  // namespace

HitMemo::Digest HitMemo::digest(const key::Request &request) {
    Fields f;
    (void)digest_fields(RequestReader{request}, f);  // a Request holds no null
    return f.digest();
}

HitMemo::Proof HitMemo::before_look_up() { return Proof{store::cache_entry::retirements()}; }

bool HitMemo::enabled() {
    const char *v = environment::get(environment::Variable::hit_memo);
    return !(v && std::strcmp(v, "0") == 0);
}

std::optional<storage::Found> HitMemo::recall(const Digest &digest, bool *by_watch) const {
    std::optional<storage::Found> out;
    recall_with(digest, by_watch, [&](const storage::Found &found) { out = found; });
    return out;
}

const HitMemo::Answer *HitMemo::serving(const Digest &digest, bool *by_watch) const {
    *by_watch = false;
    const auto it = answers_.find(digest);
    if (it == answers_.end()) return nullptr;
    const Answer &a = it->second;
    if (!a.conditions.hold(revalidate_ns_)) return nullptr;
    // One look at the watch's queue proves the cubin and, for a request that reads files, its
    // files too: they were proven at the generation the cubin's watch was armed at (below).
    const std::uint64_t watched = a.cubin_watched.generation.load(std::memory_order_acquire);
    if (watched != 0 && key::dependency_watch::still_at(watched)) {
        *by_watch = a.reads_files;
        answers_by_watch_.fetch_add(1, std::memory_order_relaxed);
        return &a;
    }
    std::optional<std::uint64_t> files_at;
    if (a.reads_files) {
        files_at = key::dependency_watch::proven_at(a.entry, a.entry_st, a.source_key);
        if (!files_at) return nullptr;
        *by_watch = true;
    }
    const auto unchanged = [&] {
        struct stat now {};
        return ::lstat(a.found.cubin.c_str(), &now) == 0 && S_ISREG(now.st_mode) &&
               FileIdentity::from_stat(now) == a.cubin;
    };
    if (!unchanged()) return nullptr;
    // Proven by the lstat: watch the cubin for the next repeats. The watch goes first and the
    // file is proven again after it, so no change slips between the two. Its generation proves
    // the files as well only when nothing that matters came between their proof and it.
    if (const std::optional<std::uint64_t> armed = key::dependency_watch::arm_file(a.found.cubin);
        armed && unchanged() && (!files_at || *files_at == *armed)) {
        a.cubin_watched.generation.store(*armed, std::memory_order_release);
    }
    return &a;
}

bool HitMemo::Conditions::hold(std::int64_t revalidate_ns) const {
    if (coarse_ns() - proven_ns >= revalidate_ns) return false;
    if (store::cache_entry::retirements() != retirements) return false;
    if (!working_dir.empty() && key::include_scanner::current_working_dir() != working_dir) return false;
    // Link inputs are in the key by content: each must still be the file that was read (a stat
    // each; no watch covers them).
    for (const auto &[path, identity] : link_files) {
        struct stat now {};
        if (::stat(path.c_str(), &now) != 0 || FileIdentity::from_stat(now) != identity) return false;
    }
    return true;
}

bool HitMemo::Conditions::take(const key::KeyedRequest &keyed, const Proof &proof) {
    for (const compile::linker::Input &in : keyed.request.link_files) {
        if (in.identity.mtime_nsec == 0) return false;  // whole-second times: an edit may not show
        link_files.emplace_back(in.path, in.identity);
    }
    if (keyed.uses_working_dir) {
        // "" when it cannot be told: then nothing that depends on it is served from memory.
        working_dir = key::include_scanner::current_working_dir();
        if (working_dir.empty()) return false;
    }
    proven_ns = coarse_ns();
    retirements = proof.retirements_before;
    return true;
}

std::optional<Error> HitMemo::recall_refusal(const Digest &digest, std::string_view context) const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const auto it = refusals_.find(digest);
    if (it == refusals_.end()) return std::nullopt;
    const Refusal &r = it->second;
    if (r.context != context || !r.conditions.hold(revalidate_ns_)) return std::nullopt;
    // The files it reads: as the refusal read them, while no event that matters came since.
    if (r.seen.files_at && !key::dependency_watch::still_at(*r.seen.files_at)) return std::nullopt;
    // No entry appeared (a warm by another process, a seed replaced) and no variants file changed.
    for (const auto &[path, was] : r.seen.places) {
        struct stat now {};
        const bool there = ::lstat(path.c_str(), &now) == 0;
        if (there != was.has_value() || (there && FileIdentity::from_stat(now) != *was)) return std::nullopt;
    }
    return r.error;
}

void HitMemo::remember_refusal(const Digest &digest, const key::KeyedRequest &keyed, const Error &refusal,
                               std::string context, const storage::RefusalProof &seen, const Proof &proof) {
    if (keyed.request.reads_files && !seen.files_at) return;
    Refusal r{refusal, std::move(context), seen, {}};
    if (!r.conditions.take(keyed, proof)) return;
    std::unique_lock<std::shared_mutex> lock(mutex_);
    if (refusals_.size() >= kMaxAnswers && !refusals_.count(digest)) refusals_.clear();
    refusals_[digest] = std::move(r);
}

void HitMemo::remember(const Digest &digest, const key::KeyedRequest &keyed, const storage::Found &found,
                       const Proof &proof) {
    Answer a;
    a.found = found;
    // The very file the look-up proved the name for; an answer from a compile (no identity)
    // is remembered from its next look-up on.
    a.cubin = found.cubin_identity;
    if (a.cubin == FileIdentity{}) return;
    if (a.cubin.mtime_nsec == 0) return;  // whole-second times: an edit may not show
    a.entry = found.cubin.substr(0, found.cubin.find_last_of('/'));
    a.reads_files = keyed.request.reads_files;
    if (a.reads_files) {
        // Served again only while the header watch proves the files unchanged, which it does
        // for an entry it remembered at this look-up (by the folder's identity).
        if (::lstat(a.entry.c_str(), &a.entry_st) != 0) return;
        a.source_key = key::proof_context(keyed.request, keyed.key);
        if (!key::dependency_watch::proven(a.entry, a.entry_st, a.source_key)) return;
    }
    if (!a.conditions.take(keyed, proof)) return;
    std::unique_lock<std::shared_mutex> lock(mutex_);
    if (answers_.size() >= kMaxAnswers && !answers_.count(digest)) answers_.clear();
    answers_[digest] = std::move(a);
    refusals_.erase(digest);  // answered now
}

void HitMemo::clear() {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    answers_.clear();
    refusals_.clear();
}

void HitMemo::renew_in_forked_child() { fork_guard::renew(mutex_); }

std::size_t HitMemo::size() const {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return answers_.size();
}

}  // namespace kjit::cache
