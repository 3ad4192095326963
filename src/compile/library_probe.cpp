#include "compile/library_probe.hpp"

#include "store/cache_layout.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"
#include "util/log.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace kjit::compile::library_probe {

namespace {

constexpr std::size_t kMaxRecordBytes = 64 * 1024;
// ldconfig's cache: the dynamic linker consults it between RUNPATH and the system folders.
constexpr const char *kLdCache = "/etc/ld.so.cache";

// One place the dynamic linker looks at for a candidate, in its order. The record watches each
// (its stat, and every link on its path); found_file() runs the search over the same places.
struct Place {
    enum class Kind {
        folder,    // a folder: a name added, removed or re-pointed in it shows in its mtime
        hwcaps,    // <folder>/glibc-hwcaps/<level>/<name>: opened, when there, before <folder>/<name>
        library,   // opened when it is there: a path candidate, <folder>/<name>
        ld_cache,  // ldconfig's cache, asked for the name after RPATH, LD_LIBRARY_PATH and
                   // RUNPATH's folders and before the system folders
    };
    Kind kind;
    std::string path;
};

// One candidate as api() hands it to dlopen (a path, or a name the dynamic linker searches
// for) and the places that decide what it opens.
struct Search {
    std::string candidate;
    std::vector<Place> places;
};

// What decides which file the library's api() opens, as text lines, and the paths whose state must not change.
struct Context {
    std::string lines;             // "context ..." lines, in order
    std::vector<Search> searches;  // one per candidate, in api()'s order
    std::string record_name;       // Library::record_prefix + euid + "-" + hash of `lines`
};

// A path's state as the record keeps it: "absent" for a missing one, else device, inode, mode,
// size, mtime and ctime (ns), links followed (a link re-pointed changes its folder's mtime).
// nullopt when stat fails otherwise: nothing can be proven about it.
std::optional<std::string> state_of(const std::string &path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return std::string("absent");
        return std::nullopt;
    }
    char text[192];
    std::snprintf(text, sizeof text, "%" PRIu64 ":%" PRIu64 ":%o:%" PRId64 ":%" PRId64 ":%" PRId64,
                  static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                  static_cast<unsigned>(st.st_mode), static_cast<std::int64_t>(st.st_size), mtime_ns(st),
                  static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec);
    return std::string(text);
}

constexpr std::string_view kLinkState = "link:";

// A link's state as the record keeps it: "link:" and a hash of its text, "absent", or
// "not-link" (something else is there now); nullopt when lstat or readlink fails otherwise.
std::optional<std::string> link_state_of(const std::string &path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return std::string("absent");
        return std::nullopt;
    }
    if (!S_ISLNK(st.st_mode)) return std::string("not-link");
    auto text = link_text(path, st);
    if (!text) return std::nullopt;
    return std::string(kLinkState) + hash128_hex(*text);
}

void anchor() {}

// The folders the dynamic linker searches for a bare name dlopened from libkjit, in order
// (RPATH, LD_LIBRARY_PATH, RUNPATH, the system folders), from dlinfo. nullopt when it cannot say.
std::optional<std::vector<std::string>> search_folders() {
    Dl_info info{};
    void *handle = nullptr;
    if (::dladdr(reinterpret_cast<void *>(&anchor), &info) != 0 && info.dli_fname) {
        handle = ::dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    }
    if (!handle) handle = ::dlopen(nullptr, RTLD_LAZY);  // linked into the program itself
    if (!handle) return std::nullopt;
    std::optional<std::vector<std::string>> folders;
    Dl_serinfo size{};
    if (::dlinfo(handle, RTLD_DI_SERINFOSIZE, &size) == 0 && size.dls_size >= sizeof(Dl_serinfo)) {
        // Dl_serinfo holds an array of Dl_serpath and the strings they point to: aligned storage.
        std::vector<Dl_serinfo> storage(size.dls_size / sizeof(Dl_serinfo) + 1);
        Dl_serinfo *info_out = storage.data();
        *info_out = size;
        if (::dlinfo(handle, RTLD_DI_SERINFOSIZE, info_out) == 0 && ::dlinfo(handle, RTLD_DI_SERINFO, info_out) == 0) {
            folders.emplace();
            for (unsigned i = 0; i < info_out->dls_cnt; ++i) folders->emplace_back(info_out->dls_serpath[i].dls_name);
        }
    }
    ::dlclose(handle);
    return folders;
}

std::string folder_of(const std::string &path) {
    const std::size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

// The places a search for the bare `name` looks at, in the dynamic linker's order, through
// `folders` (search_folders()); false when a glibc-hwcaps folder cannot be read.
bool search_places(const std::vector<std::string> &folders, const std::string &name, std::vector<Place> &places) {
    for (const std::string &folder : folders) {
        places.push_back({Place::Kind::folder, folder});
        // glibc (2.33 on) looks in <folder>/glibc-hwcaps/<level>/ first.
        const std::string hwcaps = folder + "/glibc-hwcaps";
        places.push_back({Place::Kind::folder, hwcaps});
        struct stat st {};
        if (::stat(hwcaps.c_str(), &st) == 0) {
            auto reader = FolderReader::open(hwcaps);
            if (!reader) return false;
            for (;;) {
                auto entry = reader->next();
                if (!entry) return false;
                if (!*entry) break;
                places.push_back({Place::Kind::folder, hwcaps + "/" + (*entry)->d_name});
                places.push_back({Place::Kind::hwcaps, hwcaps + "/" + (*entry)->d_name + "/" + name});
            }
        }
        places.push_back({Place::Kind::library, folder + "/" + name});
    }
    places.push_back({Place::Kind::ld_cache, kLdCache});
    return true;
}

std::optional<Context> context(const Library &lib) {
    Context c;
    char host[HOST_NAME_MAX + 1] = {};
    if (::gethostname(host, sizeof host - 1) != 0) return std::nullopt;
    const std::vector<std::string> candidates = lib.candidates();
    c.lines = std::string(lib.header) + "\ncontext library " + lib.library_name() + "\ncontext host " + host +
              "\ncontext euid " + std::to_string(::geteuid()) + "\n";
    std::optional<std::vector<std::string>> folders;
    for (const std::string &candidate : candidates) {
        c.lines += "context candidate " + candidate + "\n";
        Search search{candidate, {}};
        if (candidate.find('/') != std::string::npos) {
            // Its folder: the name re-pointed or replaced shows in its mtime; the path itself,
            // which leads to another file when a link on the way (behind another link, in a
            // folder that is on no path as spelled) is re-pointed.
            search.places = {{Place::Kind::folder, folder_of(candidate)}, {Place::Kind::library, candidate}};
        } else {
            if (!folders && !(folders = search_folders())) return std::nullopt;
            if (!search_places(*folders, candidate, search.places)) return std::nullopt;
        }
        c.searches.push_back(std::move(search));
    }
    if (folders) {
        for (const std::string &folder : *folders) c.lines += "context search " + folder + "\n";
    }
    c.record_name = std::string(lib.record_prefix) + std::to_string(::geteuid()) + "-" + hash128_hex(c.lines);
    return c;
}

// Whether `a` and `b` lead to the same file (device and inode, links followed).
bool same_file(const std::string &a, const std::string &b) {
    struct stat sa {};
    struct stat sb {};
    return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

// ldconfig's cache as glibc 2.32 on writes it (and reads only it, unless told otherwise): a
// header, then entries of flags, the name's offset, the file's offset (offsets from the start),
// an unused word and the glibc-hwcaps word.
constexpr std::string_view kLdCacheMagic = "glibc-ld.so.cache1.1";
constexpr std::size_t kLdCacheHeader = 48, kLdCacheEntry = 24, kLdCacheCount = 20;
constexpr std::size_t kMaxLdCacheBytes = 64 * 1024 * 1024;

// The file ldconfig's cache gives for `name`: "" when it has none (or there is no cache), or
// nullopt when that cannot be told from here: a cache that cannot be read or is of another
// format, or entries for `name` that lead to different files or to none (another architecture's,
// a glibc-hwcaps level's, a stale one: the dynamic linker's choice among them depends on more).
std::optional<std::string> ld_cache_file(const std::string &name) {
    struct stat st {};
    if (::stat(kLdCache, &st) != 0) return errno == ENOENT ? std::optional<std::string>("") : std::nullopt;
    const std::optional<std::string> bytes = read_small_file(kLdCache, kMaxLdCacheBytes);
    if (!bytes || bytes->size() < kLdCacheHeader || bytes->compare(0, kLdCacheMagic.size(), kLdCacheMagic) != 0) {
        return std::nullopt;
    }
    const std::string_view all(*bytes);
    const auto word = [&](std::size_t at) {
        std::uint32_t value = 0;
        std::memcpy(&value, all.data() + at, sizeof value);
        return value;
    };
    const auto text_at = [&](std::uint32_t offset) -> std::optional<std::string_view> {
        const std::size_t end = offset < all.size() ? all.find('\0', offset) : std::string_view::npos;
        if (end == std::string_view::npos) return std::nullopt;
        return all.substr(offset, end - offset);
    };
    const std::size_t count = word(kLdCacheCount);
    if (count > (all.size() - kLdCacheHeader) / kLdCacheEntry) return std::nullopt;
    std::string file;
    for (std::size_t i = 0; i < count; ++i) {
        const std::size_t entry = kLdCacheHeader + i * kLdCacheEntry;
        const std::optional<std::string_view> key = text_at(word(entry + 4));
        if (!key) return std::nullopt;
        if (*key != name) continue;
        const std::optional<std::string_view> value = text_at(word(entry + 8));
        if (!value || value->empty() || (*value)[0] != '/') return std::nullopt;
        if (file.empty()) {
            file = std::string(*value);
            if (::stat(file.c_str(), &st) != 0) return std::nullopt;
        } else if (!same_file(file, std::string(*value))) {
            return std::nullopt;
        }
    }
    return file;
}

// The path the dynamic linker opens for `search`'s candidate (links kept), "" when it finds
// none, nullopt when that cannot be told (`why` says why). A path is opened as it is. A bare
// name is looked for in the folders in order, each one's glibc-hwcaps levels first, and in
// ldconfig's cache, which is asked after the folders of RPATH, LD_LIBRARY_PATH and RUNPATH and
// before the system folders; dlinfo lists them all with no mark between them, so where the first
// folder that has the name and the cache name different files, which one wins cannot be told.
std::optional<std::string> searched_file(const Search &search, std::string &why) {
    std::string first;  // the first <folder>/<name> there
    for (const Place &place : search.places) {
        if (place.kind == Place::Kind::folder || (!first.empty() && place.kind != Place::Kind::ld_cache)) continue;
        if (place.kind == Place::Kind::ld_cache) {
            const std::optional<std::string> cached = ld_cache_file(search.candidate);
            if (!cached) {
                why = std::string("what ") + kLdCache + " names for " + search.candidate + " cannot be told";
                return std::nullopt;
            }
            if (first.empty() || cached->empty() || same_file(first, *cached)) return first.empty() ? *cached : first;
            why = first + " and " + kLdCache + "'s " + *cached + " are different files, either of which may be found";
            return std::nullopt;
        }
        struct stat st {};
        if (::stat(place.path.c_str(), &st) != 0) {
            if (errno == ENOENT || errno == ENOTDIR) continue;
            why = "'" + place.path + "' cannot be looked up";
            return std::nullopt;
        }
        if (place.kind == Place::Kind::hwcaps) {
            why = "'" + place.path + "' is in a glibc-hwcaps folder, taken or not as the CPU decides";
            return std::nullopt;
        }
        first = place.path;
    }
    return first;
}

// The path of the file api() would open in a fresh process with context `c` (links kept): that
// of the first candidate that finds one, a path candidate as it is, a bare name through the
// search; nullopt when none does or which cannot be told (`why` says why). For where libkjit's
// own dlopen cannot tell: the library was mapped already, and a bare name then answers with it
// by its soname, whatever file the search finds. It runs over the places the record watches;
// like dlopen, it takes a file that is there to be the one opened.
std::optional<std::string> found_file(const Context &c, std::string &why) {
    for (const Search &search : c.searches) {
        const std::optional<std::string> found = searched_file(search, why);
        if (!found) return std::nullopt;
        if (!found->empty()) return found;
    }
    why = "no candidate finds a file";
    return std::nullopt;
}

// The record's text for `identity` found at `file` (links resolved) after dlopen opened it as
// `opened_as` (the path the search found, links kept; may be empty), or nullopt when a path's
// state is unknown. Each path's stat follows its links, so it proves where the path leads now;
// every link on each path is recorded as well (kjit::walk_links, one link at a time), so that a
// link re-pointed at any level, behind another link (`/usr/local/cuda -> /etc/alternatives/cuda
// -> cuda-13.0`, whose middle folder no path names), is a difference even where a stat would not
// show it. A path whose links cannot be walked (a loop, a relative path) gives no record.
std::optional<std::string> record_text(const Context &c, const std::string &opened_as, const std::string &file,
                                       const std::string &identity) {
    std::string text = c.lines;
    std::vector<std::string> watch;
    for (const Search &search : c.searches) {
        for (const Place &place : search.places) watch.push_back(place.path);
    }
    if (!opened_as.empty()) watch.push_back(opened_as);
    std::vector<std::string> links;
    for (const std::string &path : watch) {
        auto walk = walk_links(path);
        if (!walk) return std::nullopt;
        for (const LinkWalk::Link &link : walk->links) {
            if (std::find(links.begin(), links.end(), link.path) == links.end()) links.push_back(link.path);
        }
    }
    for (const std::string &path : watch) {
        auto state = state_of(path);
        if (!state) return std::nullopt;
        text += "watch " + *state + " " + path + "\n";
    }
    for (const std::string &link : links) {
        auto state = link_state_of(link);
        if (!state) return std::nullopt;
        text += "watch " + *state + " " + link + "\n";
    }
    // The library file last (proven_identity: it must exist).
    auto state = state_of(file);
    if (!state) return std::nullopt;
    text += "watch " + *state + " " + file + "\n";
    return text + "identity " + identity + "\nend\n";
}

// The path dlopen opened the library `opened` by, links kept (the dynamic linker's name for it);
// empty when dladdr cannot tell.
std::string opened_as(const Opened &opened) {
    Dl_info info{};
    if (::dladdr(opened.symbol, &info) == 0 || !info.dli_fname) return std::string();
    return info.dli_fname[0] == '/' ? std::string(info.dli_fname) : std::string();
}

// The identity a record in `cache_dir` proves for context `c`: the file is a regular file of
// this user's, its context is `c`'s, every path it watches is in the state it says, and it
// names a library file. nullopt otherwise (why: logged at debug).
std::optional<std::string> proven_identity(const Library &lib, const std::string &cache_dir, const Context &c) {
    const std::string path = cache_dir + "/" + c.record_name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return std::nullopt;
    const UniqueFd owned(fd);
    FileIdentity read_as;
    const std::string what = std::string(lib.name) + " record";
    auto text = read_whole_file(
        fd, path, what.c_str(),
        [&](const struct stat &st) -> Status {
            if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
                static_cast<std::uint64_t>(st.st_size) > kMaxRecordBytes) {
                return Error{Errc::io, "not a record of this user's"};
            }
            return Ok{};
        },
        read_as);
    if (!text) {
        log().debug("{} probe: '{}': {}; {} is loaded", lib.tag, path, text.error().message, lib.name);
        return std::nullopt;
    }
    const auto rejected = [&](const char *why) -> std::optional<std::string> {
        log().debug("{} probe: record '{}' {}; {} is loaded", lib.tag, path, why, lib.name);
        return std::nullopt;
    };
    if (text->compare(0, c.lines.size(), c.lines) != 0) return rejected("is of another context");
    std::size_t at = c.lines.size();
    bool watched_file = false;
    std::string identity;
    while (at < text->size()) {
        const std::size_t end = text->find('\n', at);
        if (end == std::string::npos) return rejected("is cut short");
        const std::string_view line(text->data() + at, end - at);
        at = end + 1;
        if (line.compare(0, 6, "watch ") == 0) {
            const std::size_t space = line.find(' ', 6);
            if (space == std::string_view::npos) return rejected("has a damaged watch line");
            const std::string_view state = line.substr(6, space - 6);
            const std::string watched(line.substr(space + 1));
            if (watched.empty() || watched[0] != '/') return rejected("watches a relative path");
            const auto now =
                state.compare(0, kLinkState.size(), kLinkState) == 0 ? link_state_of(watched) : state_of(watched);
            if (!now || *now != state) {
                log().debug("{} probe: '{}' changed since the record '{}' was written; {} is loaded", lib.tag, watched,
                            path, lib.name);
                return std::nullopt;
            }
            watched_file = state != "absent";
        } else if (line.compare(0, 9, "identity ") == 0) {
            identity = std::string(line.substr(9));
        } else if (line == "end") {
            if (at != text->size()) return rejected("has text after its end");
            // The last watch line is the library file itself, which must exist.
            if (identity.empty() || !watched_file) return rejected("names no library");
            return identity;
        } else {
            return rejected("has an unknown line");
        }
    }
    return rejected("has no end line");
}

// Whether dlopen of a candidate would return a library something else already mapped: then
// the probe cannot tell which file it is, but api() is cheap.
bool already_mapped(const Library &lib) {
    for (const std::string &candidate : lib.candidates()) {
        if (void *handle = ::dlopen(candidate.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
            ::dlclose(handle);
            return true;
        }
    }
    return false;
}

// The path the search opens the library `opened` by (links kept, "" when dladdr cannot tell),
// for its record under context `c`; nullopt when that is not the file loaded (why: at debug).
std::optional<std::string> opened_by_search(const Library &lib, const Context &c, const Opened &opened) {
    // dlopen ran the search and opened what it found.
    if (!opened.preexisting) return opened_as(opened);
    // Something else (numba-cuda, cuda.core, CuPy, torch) had mapped the library first, by a
    // path of its own choosing, and dlopen answered with that one: the search is run here, and
    // must find that very file, or the record would key later processes with another build.
    std::string why;
    const std::optional<std::string> found = found_file(c, why);
    if (found && same_file(*found, *opened.file)) return found;
    if (found) why = "it finds " + *found;
    log().debug("{} probe: no record: {} was loaded from '{}' by something else before libkjit, and the search "
                "cannot be proven to find it: {}",
                lib.tag, lib.name, *opened.file, why);
    return std::nullopt;
}

}  // namespace

Result<std::string> Probe::identity(const std::string &cache_dir) {
    if (const std::optional<Opened> opened = library_.opened()) return *opened->identity;
    if (const std::string *probed = probed_.load(std::memory_order_acquire)) return *probed;
    if (!already_mapped(library_)) {
        if (auto c = context(library_)) {
            if (auto proven = proven_identity(library_, cache_dir, *c)) {
                log().debug("{} probe: {} {} proven by the record in '{}', not loaded", library_.tag, library_.name,
                            *proven, cache_dir);
                return fork_guard::lazy(probed_, [&] { return new std::string(*proven); });
            }
        }
    }
    KJIT_TRY_ASSIGN(auto loaded, library_.load());
    return *loaded.identity;
}

void Probe::record(const std::string &cache_dir) {
    const std::optional<Opened> opened = library_.opened();
    if (!opened || opened->file->empty()) return;
    {
        std::lock_guard<std::mutex> lock(recorded_mutex_);
        if (!recorded_.insert(cache_dir).second) return;
    }
    auto c = context(library_);
    if (!c) return;
    // The library must be what api() would open now (its variable may have changed since).
    const std::vector<std::string> now = library_.candidates();
    if (std::find(now.begin(), now.end(), *opened->library) == now.end()) return;
    if (auto proven = proven_identity(library_, cache_dir, *c); proven && *proven == *opened->identity) return;
    auto found = opened_by_search(library_, *c, *opened);
    if (!found) return;
    auto text = record_text(*c, *found, *opened->file, *opened->identity);
    if (!text) return;
    const std::string path = cache_dir + "/" + c->record_name;
    if (auto st = replace_file(path, path + std::string(store::cache_layout::kRecordTempInfix), {}, *text); !st) {
        log().debug("{} probe: no record written: {}", library_.tag, st.error().message);
    }
}

Status Probe::confirm(const std::string &keyed_identity, const std::string &cache_dir) const {
    KJIT_TRY_ASSIGN(auto loaded, library_.load());
    if (*loaded.identity == keyed_identity) return Ok{};
    std::string record = "a record";
    if (auto c = context(library_)) {
        record = "the record '" + cache_dir + "/" + c->record_name + "'";
        (void)::unlink((cache_dir + "/" + c->record_name).c_str());
    }
    const std::string name = library_.name;
    return Error{library_.errc, name + " " + *loaded.identity + " (" + *loaded.file + "), loaded for this " +
                                    library_.use + ", is not the " + name + " " + keyed_identity + " that " + record +
                                    " said this process would load, which keyed the request; the record is removed "
                                    "and this process keys with the " +
                                    name + " it loaded from now on: retry the compile"};
}

void Probe::renew_in_forked_child() noexcept {
    fork_guard::renew(recorded_mutex_);
    fork_guard::renew(recorded_);
}

}  // namespace kjit::compile::library_probe
