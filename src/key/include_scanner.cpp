#include "key/include_scanner.hpp"

#include "key/include_macros.hpp"
#include "util/filesystem.hpp"
#include "util/hashing.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <optional>
#include <set>
#include <unordered_map>

namespace kjit::key::include_scanner {

namespace {

constexpr std::string_view kHeader = "kjit-deps 1\n";
// origin(): this, then 16 hex digits and a newline.
constexpr std::string_view kOriginHeader = "kjit-origin 1 ";

// How the scanner reached a folder (Scanner::Folder::origin), besides an anchor's number (0, 1,
// ...): through the working directory (the value Search::include_dir_anchor gives a folder
// given relative to it), or by an absolute name.
constexpr int kWorkingDir = -1;
constexpr int kAbsolute = -2;
constexpr std::size_t kMaxFilesUnderIncludePaths = 100000;

struct Directive {
    std::string name;  // for a computed one: the operand as written, to expand
    bool quoted = false;
    bool computed = false;  // #include MACRO
    // #include_next / __has_include_next: NVRTC continues after the folder the includer was
    // found in, which the scanner does not track, so every candidate counts (a superset).
    bool next = false;
};

bool is_space(char c) { return c == ' ' || c == '\t'; }

// The name of an include or __has_include operand starting at line[i] ('"' or '<'); false for
// anything else (a macro: computed) or an unterminated name (malformed; NVRTC will say so).
bool operand_at(std::string_view line, std::size_t i, Directive &d, bool &malformed) {
    malformed = false;
    if (i >= line.size() || (line[i] != '"' && line[i] != '<')) return false;
    const char close = line[i] == '"' ? '"' : '>';
    const std::size_t stop = line.find(close, i + 1);
    if (stop == std::string_view::npos) {
        malformed = true;
        return false;
    }
    d.name.assign(line.substr(i + 1, stop - i - 1));
    d.quoted = close == '"';
    return true;
}

// Whether `line` ends inside a /* comment (one that a later line closes; the preprocessor
// removes comments before it reads directives, so the directive goes on after it).
bool in_block_comment(std::string_view line) {
    bool open = false;
    char quote = 0;
    for (std::size_t k = 0; k < line.size(); ++k) {
        const char c = line[k];
        if (open) {
            if (c == '*' && k + 1 < line.size() && line[k + 1] == '/') {
                open = false;
                ++k;
            }
        } else if (quote) {
            if (c == '\\') {
                ++k;
            } else if (c == quote) {
                quote = 0;
            }
        } else if (c == '"' || c == '\'') {
            quote = c;
        } else if (c == '/' && k + 1 < line.size() && line[k + 1] == '/') {
            return false;
        } else if (c == '/' && k + 1 < line.size() && line[k + 1] == '*') {
            open = true;
            ++k;
        }
    }
    return open;
}

// The operand of a __has_include whose '(' ends before `j`: up to its matching ')'.
std::string_view parenthesized(std::string_view line, std::size_t j) {
    int depth = 0;
    for (std::size_t k = j; k < line.size(); ++k) {
        if (line[k] == '(') ++depth;
        if (line[k] == ')' && depth-- == 0) return line.substr(j, k - j);
    }
    return line.substr(j);
}

// A directive is one logical line: a backslash before the newline joins the next one.
bool continues(std::string_view l) {
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    return !l.empty() && l.back() == '\\';
}

// Joins into `logical` a directive's first line and the lines it goes on to (continuations and
// a /* comment left open), moving `pos` past them.
void join_lines(std::string_view text, std::size_t &pos, std::string_view first, std::string &logical) {
    logical.assign(first);
    while (pos < text.size()) {
        std::size_t next_end = std::string_view::npos;
        if (continues(logical)) {
            if (logical.back() == '\r') logical.pop_back();
            logical.pop_back();
            next_end = text.find('\n', pos);
        } else if (in_block_comment(logical)) {
            // Up to the end of the line that closes it (the whole text if none does).
            logical += ' ';
            const std::size_t close = text.find("*/", pos);
            next_end = close == std::string_view::npos ? close : text.find('\n', close + 2);
        } else {
            break;
        }
        if (next_end == std::string_view::npos) next_end = text.size();
        logical.append(text.substr(pos, next_end - pos));
        pos = next_end + 1;
    }
}

// Adds to `out` the operand of each __has_include / __has_include_next in an #if or #elif
// `line` (its directive name starting at `i`).
void add_has_includes(std::string_view line, std::size_t i, std::vector<Directive> &out) {
    for (std::size_t at = line.find("__has_include", i); at != std::string_view::npos;
         at = line.find("__has_include", at + 1)) {
        std::size_t j = at + 13;
        const bool next = line.compare(j, 5, "_next") == 0;
        if (next) j += 5;
        while (j < line.size() && is_space(line[j])) ++j;
        if (j >= line.size() || line[j] != '(') continue;
        ++j;
        while (j < line.size() && is_space(line[j])) ++j;
        Directive d;
        d.next = next;
        bool malformed = false;
        if (!operand_at(line, j, d, malformed)) {
            if (malformed) continue;
            d.computed = true;
            d.name.assign(parenthesized(line, j));
        }
        out.push_back(std::move(d));
    }
}

// Adds to `out` the operand of an #include / #include_next `line` (its directive name starting
// at `i`); nothing for another directive or a malformed operand.
void add_include(std::string_view line, std::size_t i, std::vector<Directive> &out) {
    if (line.compare(i, 7, "include") != 0) return;
    i += 7;
    const bool next = line.compare(i, 5, "_next") == 0;
    if (next) i += 5;
    if (i < line.size() && !is_space(line[i]) && line[i] != '"' && line[i] != '<') return;  // #includex
    while (i < line.size() && is_space(line[i])) ++i;
    if (i >= line.size()) return;
    Directive d;
    d.next = next;
    bool malformed = false;
    if (!operand_at(line, i, d, malformed)) {
        if (malformed) return;
        d.computed = true;
        d.name.assign(line.substr(i));
    }
    out.push_back(std::move(d));
}

// The files `text` names for the preprocessor, in order (conditionals ignored: a superset):
// each #include / #include_next, and each __has_include / __has_include_next in an #if or
// #elif (a file that appears later changes what such a test answers). With `defines`, also
// adds every #define to it (continuation lines joined), for computed includes.
std::vector<Directive> directives(std::string_view text, key::include_macros::Table *defines = nullptr) {
    std::vector<Directive> out;
    std::size_t pos = 0;
    std::string logical;
    while (pos < text.size()) {
        // The next line whose first character other than blanks is '#': found from the '#'
        // (memchr), not line by line, as most lines of a header are not directives.
        const auto *hash = static_cast<const char *>(std::memchr(text.data() + pos, '#', text.size() - pos));
        if (!hash) break;
        const auto at = static_cast<std::size_t>(hash - text.data());
        std::size_t start = at;
        while (start > pos && is_space(text[start - 1])) --start;
        std::size_t end = text.find('\n', at);
        if (end == std::string_view::npos) end = text.size();
        // `pos` is always where a line starts: a '#' after something else is no directive, and
        // neither is the rest of its line.
        if (start > pos && text[start - 1] != '\n') {
            pos = end + 1;
            continue;
        }
        std::string_view line = text.substr(start, end - start);
        pos = end + 1;
        std::size_t i = at - start;
        // A directive is one logical line (continues()); so is a /* comment that goes on to later
        // lines: what follows it belongs to the directive (a comment stands for one blank).
        if (continues(line) || in_block_comment(line)) {
            join_lines(text, pos, line, logical);
            line = logical;
        }
        ++i;
        while (i < line.size() && is_space(line[i])) ++i;
        if (defines && line.compare(i, 6, "define") == 0 && (i + 6 == line.size() || is_space(line[i + 6]))) {
            defines->add_directive(line.substr(i + 6));
            continue;
        }
        if (line.compare(i, 2, "if") == 0 || line.compare(i, 4, "elif") == 0) {
            add_has_includes(line, i, out);
            continue;
        }
        add_include(line, i, out);
    }
    return out;
}

// Stats, reads (when `content` is wanted) and hashes one header, from one open descriptor.
Result<Dependency> describe(const std::string &path, std::string *content) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
        return io_error("cannot read header", path, errno);
    }
    std::string local;
    std::string &text = content ? *content : local;
    text.clear();
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io_error("cannot read header", path, errno);
        if (n == 0) break;
        text.append(buf, static_cast<std::size_t>(n));
    }
    Dependency d;
    d.path = path;
    const FileIdentity id = FileIdentity::from_stat(st);
    d.size = id.size;
    d.mtime_sec = id.mtime_sec;
    d.mtime_nsec = id.mtime_nsec;
    d.content_hash = hash64(text);
    return d;
}

bool is_regular(const std::string &path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// `path` (absolute) with "." components and empty ones dropped, and "X/.." folded where X is a
// real folder (lstat: a folder, not a link). Either spelling opens the same file, so a header
// is recorded, and scanned, once: headers that include each other with "../" would otherwise
// give each file more spellings from header to header (the bench's first tree had 16,596 lines
// for 505 files). Through a link, ".." is its target's parent, which the text does not say: kept
// as written, as is a ".." after a missing name (the candidate does not exist however the rest
// is spelled). `real_folders` caches the lstats for one scan.
std::string fold_dots(const std::string &path, std::unordered_map<std::string, bool> &real_folders) {
    if (path.empty() || path[0] != '/' ||
        (path.find("/.") == std::string::npos && path.find("//") == std::string::npos)) {
        return path;
    }
    std::string out;
    std::vector<std::pair<std::size_t, bool>> parts;  // where each kept component starts; foldable
    std::size_t pos = 1;
    while (pos <= path.size()) {
        std::size_t end = path.find('/', pos);
        if (end == std::string::npos) end = path.size();
        const std::string_view part(path.data() + pos, end - pos);
        pos = end + 1;
        if (part.empty() || part == ".") continue;
        if (part == "..") {
            if (parts.empty()) continue;  // "/.." is "/"
            if (parts.back().second) {
                out.resize(parts.back().first);
                parts.pop_back();
                continue;
            }
        }
        const std::size_t start = out.size();
        out += '/';
        out.append(part);
        bool foldable = false;
        if (part != ".." && pos <= path.size()) {  // a folder on the way (not the last name)
            auto [it, fresh] = real_folders.try_emplace(out, false);
            if (fresh) {
                struct stat st {};
                it->second = ::lstat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
            }
            foldable = it->second;
        }
        parts.emplace_back(start, foldable);
    }
    return out.empty() ? std::string("/") : out;
}

std::string folder_of(const std::string &path) {
    const std::size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

Error unclear_value(const std::string &option, const char *why) {
    return Error{Errc::invalid_argument,
                 "NVRTC option '" + option + "': " + why +
                     ", so libkjit cannot tell which file NVRTC reads; write the path without surrounding blanks"};
}

// An include folder's value as NVRTC 13 takes it: spaces around it are dropped (measured for
// "-I dir", "-I dir ", "--include-path=dir " and " dir" as a separate option), except right after
// an '=' ("-I= dir" and "--include-path= dir" do not find dir). Other blanks (tabs, newlines) at
// either end: refused, as is an empty value (NVRTC then searches the working directory).
Result<std::string> include_dir_value(const std::string &option, std::string_view value, bool after_equals) {
    if (after_equals && !value.empty() && is_blank(value.front())) {
        return unclear_value(option, "it has blanks right after '='");
    }
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
    if (value.empty()) return Error{Errc::invalid_argument, "NVRTC option '" + option + "' names no folder"};
    if (is_blank(value.front()) || is_blank(value.back()))
        return unclear_value(option, "its folder has blanks around it");
    return std::string(value);
}

// A pre-included file's value: NVRTC trims it in some spellings and not in others, so any
// blank at either end is refused.
Result<std::string> pre_include_value(const std::string &option, std::string_view value) {
    if (value.empty()) return Error{Errc::invalid_argument, "NVRTC option '" + option + "' names no file"};
    if (is_blank(value.front()) || is_blank(value.back()))
        return unclear_value(option, "its file has blanks around it");
    return std::string(value);
}

bool names_memory_header(const std::string &name, const MemoryHeaders &memory_headers) {
    for (const auto &h : memory_headers) {
        if (h.first == name) return true;
    }
    return false;
}

// One scan's state: the dependencies found so far, the texts still to read and the computed
// includes that wait for their macros. scan() runs its steps in order.
class Scanner {
public:
    Scanner(const MemoryHeaders &memory_headers, const Search &search);
    Status queue_inputs(std::string_view source);
    Status follow_includes();
    bool every_file() const { return every_file_; }
    Status record_every_file();
    std::vector<Dependency> take_deps() { return std::move(deps_); }

private:
    // A folder searched first for quoted names, absolute ("" for none), and how NVRTC got
    // there (`origin`): through the working directory or one of the request's anchors (what is
    // found there is recorded relative to it), or by an absolute name.
    struct Folder {
        std::string path;
        int origin = kAbsolute;
    };
    struct Pending {
        std::string text;
        Folder folder;
    };
    // Computed includes wait until every text reachable without them has been read, so that
    // the macros they use are defined (in any order: the scan does not follow #if either).
    struct Computed {
        std::string operand;
        Folder folder;
        bool next = false;
    };
    struct Candidate {
        std::string path;
        int origin = kAbsolute;
    };

    void mark_young(Dependency &d) const;
    void make_relative(Dependency &d, int origin) const;
    Status look_up(const std::string &name, bool quoted, const Folder &folder, bool every);
    Status look_up_candidates(const std::string &name, const std::vector<Candidate> &candidates, bool every);
    Status read_pending();
    Status expand_computed();

    const MemoryHeaders &memory_headers_;
    const Search &search_;
    std::vector<Dependency> deps_;
    const std::int64_t scan_started_ = realtime_ns();
    std::deque<Pending> work_;
    std::set<std::string> seen_files_, seen_missing_;
    std::unordered_map<std::string, bool> real_folders_;  // fold_dots' lstats
    // Each candidate's stat, once per scan: a header such as <cuda/std/detail/__config> is
    // included from hundreds of files, each of them looking it up in every include folder (a
    // humming kernel: 3,000 stats of 150 paths). The scan takes one answer per path, as it
    // records one dependency per path.
    std::unordered_map<std::string, bool> regular_files_;
    bool regular_file(const std::string &path);
    std::vector<Computed> computed_includes_;
    key::include_macros::Table macros_;
    bool every_file_ = false;  // a computed include that cannot be followed

    FileNaming naming_;  // what the texts read say that may name their own files

public:
    // Whether a text read may name its own file (its folder then in the cubin): __FILE__ and
    // the like, or NVRTC's built-in assert (whose definition, in NVRTC, names __FILE__) unless
    // the options define NDEBUG (Search::quiet_assert; NVRTC defines its assert before reading
    // the source, so a later #undef NDEBUG does not bring it back: measured).
    bool names_own_file() const { return naming_.own_file || (naming_.uses_assert && !search_.quiet_assert); }
    bool names_program() const { return naming_.program; }
};

// Starts a scan with the macros of the -D options defined.
Scanner::Scanner(const MemoryHeaders &memory_headers, const Search &search)
    : memory_headers_(memory_headers), search_(search) {
    for (const std::string &def : search_.defines) macros_.add_option(def);
}

// Whether `path` is a regular file, asked of the file system once per scan.
bool Scanner::regular_file(const std::string &path) {
    const auto known = regular_files_.find(path);
    if (known != regular_files_.end()) return known->second;
    const bool regular = is_regular(path);
    regular_files_.emplace(path, regular);
    return regular;
}

// Marks a header read by this scan as young when it was modified just before the scan began.
void Scanner::mark_young(Dependency &d) const { d.verify_content = young_at(d.mtime_sec, d.mtime_nsec, scan_started_); }

// Looks `name` up as NVRTC does: the candidates in order, recording each absent one before
// the first found (creating it later would shadow the found one), then the found one by
// content, whose own includes are followed from its folder. `every`: all candidates, found
// or not (for #include_next, whose starting point is not tracked).
Status Scanner::look_up(const std::string &name, bool quoted, const Folder &folder, bool every) {
    std::vector<Candidate> candidates;
    if (name[0] == '/') {
        candidates.push_back({fold_dots(name, real_folders_), kAbsolute});
    } else {
        if (quoted && !folder.path.empty()) {
            candidates.push_back({fold_dots(folder.path + "/" + name, real_folders_), folder.origin});
        }
        for (std::size_t i = 0; i < search_.include_dirs.size(); ++i) {
            // An anchor's number, or kWorkingDir for a folder given relative to it.
            const int origin = i < search_.include_dir_anchor.size() ? search_.include_dir_anchor[i] : kAbsolute;
            candidates.push_back({fold_dots(search_.include_dirs[i] + "/" + name, real_folders_), origin});
        }
    }
    return look_up_candidates(name, candidates, every);
}

// Looks `candidates` up in order (look_up): each absent one before the first found recorded,
// the found one by content and queued; `every`: all of them.
Status Scanner::look_up_candidates(const std::string &name, const std::vector<Candidate> &candidates, bool every) {
    // A bound on what one compile may read, whatever the spellings (a header tree whose
    // "../" includes go through links can still give a file several): an error, not the
    // whole memory.
    if (deps_.size() > kMaxFilesUnderIncludePaths) {
        return Error{Errc::io, "the includes reach more than " + std::to_string(kMaxFilesUnderIncludePaths) +
                                   " files and candidates (the last: '" + name + "'): libkjit cannot track them"};
    }
    for (const Candidate &candidate : candidates) {
        // A file reached both through a folder and not is recorded both ways: from another
        // folder, only one of the spellings may lead to it.
        const std::string seen = std::to_string(candidate.origin) + ":" + candidate.path;
        if (!regular_file(candidate.path)) {
            if (seen_missing_.insert(seen).second) {
                Dependency absent;
                absent.path = candidate.path;
                make_relative(absent, candidate.origin);
                absent.exists = false;
                deps_.push_back(std::move(absent));
            }
            continue;
        }
        if (seen_files_.insert(seen).second) {
            std::string content;
            KJIT_TRY_ASSIGN(auto dep, describe(candidate.path, &content));
            mark_young(dep);
            make_relative(dep, candidate.origin);
            deps_.push_back(std::move(dep));
            work_.push_back({std::move(content), Folder{folder_of(candidate.path), candidate.origin}});
        }
        if (!every) break;
    }
    return Ok{};
}

// Records `d` (absolute path) relative to the folder it was reached through (`origin`: the
// working directory or an anchor), as deps.txt records it and the variant key hashes it: the
// rest of its path when it lies under it, else with ".." steps ("../x.h": the folder is taken
// as a real path, so its ".." is its parent wherever it is checked). An absolute name stays so.
void Scanner::make_relative(Dependency &d, int origin) const {
    if (origin == kAbsolute) return;
    const std::string &folder =
        origin == kWorkingDir ? search_.working_dir : search_.anchors[static_cast<std::size_t>(origin)];
    d.anchor = origin == kWorkingDir ? -1 : origin;
    if (folder == "/") {
        d.relative = d.path.substr(1);
    } else if (d.path.size() > folder.size() && d.path.compare(0, folder.size(), folder) == 0 &&
               d.path[folder.size()] == '/') {
        d.relative = d.path.substr(folder.size() + 1);
    } else {
        d.relative = std::filesystem::path(d.path).lexically_relative(folder).string();
    }
    // The folder itself (never a file in practice): "." keeps the record relative.
    if (d.relative.empty()) d.relative = ".";
}

// Queues what the compile starts from: the pre-included files (looked up), the source, and
// every in-memory header.
Status Scanner::queue_inputs(std::string_view source) {
    // Pre-included files first, as NVRTC reads them: the working directory, then the include
    // folders (a pre-include is looked up like a quoted name of the source). An absolute one is
    // that file only, recorded relative to its folder (an anchor).
    const Folder working_dir{search_.working_dir, search_.working_dir.empty() ? kAbsolute : kWorkingDir};
    for (std::size_t i = 0; i < search_.pre_includes.size(); ++i) {
        const std::string &file = search_.pre_includes[i];
        if (file[0] == '/') {
            const int anchor = i < search_.pre_include_anchor.size() ? search_.pre_include_anchor[i] : kAbsolute;
            const Candidate candidate{fold_dots(file, real_folders_), anchor >= 0 ? anchor : kAbsolute};
            if (auto st = look_up_candidates(file, {candidate}, false); !st) return std::move(st).error();
        } else if (auto st = look_up(file, true, working_dir, false); !st) {
            return std::move(st).error();
        }
    }
    if (search_.source_folder.empty()) {
        work_.push_back({std::string(source), working_dir});
    } else {
        const int anchor = search_.source_folder_anchor >= 0 ? search_.source_folder_anchor : kAbsolute;
        work_.push_back({std::string(source),
                         Folder{search_.source_folder, search_.source_folder_absolute ? anchor : kWorkingDir}});
    }
    // Every in-memory header, included or not (a superset): its quoted names are looked up in
    // the working directory joined with the folder part of its own name.
    for (const auto &h : memory_headers_) {
        const std::string folder = folder_of_name(h.first, search_.working_dir);
        work_.push_back({h.second, Folder{folder, h.first[0] != '/' && !folder.empty() ? kWorkingDir : kAbsolute}});
    }
    return Ok{};
}

// Rounds: read every text reachable by plain names, then expand every computed include with
// the macros defined so far and look up what they name; the files found may define more
// macros or hold more computed includes, so repeat until a round finds nothing new.
Status Scanner::follow_includes() {
    std::size_t expanded_with = 0, expanded_count = 0;
    for (bool first_round = true;; first_round = false) {
        KJIT_TRY(read_pending());
        if (every_file_ || computed_includes_.empty()) break;
        if (!first_round && macros_.size() == expanded_with && computed_includes_.size() == expanded_count) break;
        expanded_with = macros_.size();
        expanded_count = computed_includes_.size();
        KJIT_TRY(expand_computed());
    }
    return Ok{};
}

// Reads every queued text: looks up the files its plain names give (queueing those found) and
// keeps its computed includes for expand_computed().
Status Scanner::read_pending() {
    while (!work_.empty()) {
        Pending item = std::move(work_.front());
        work_.pop_front();
        naming_ |= file_naming(item.text);
        for (Directive &d : directives(item.text, &macros_)) {
            if (d.computed) {
                computed_includes_.push_back(Computed{std::move(d.name), item.folder, d.next});
                continue;
            }
            // An in-memory header of that name wins over any file (measured, quoted and angle).
            if (d.name.empty() || names_memory_header(d.name, memory_headers_)) continue;
            KJIT_TRY(look_up(d.name, d.quoted, item.folder, d.next));
        }
    }
    return Ok{};
}

// Expands every computed include with the macros defined so far and looks up what it names;
// at the first that cannot be followed, sets every_file_ instead.
Status Scanner::expand_computed() {
    for (const Computed &c : computed_includes_) {
        const key::include_macros::Expansion e = key::include_macros::header_names(c.operand, macros_);
        if (!e.followed) {
            every_file_ = true;
            break;
        }
        for (const key::include_macros::HeaderName &h : e.names) {
            if (h.name.empty() || names_memory_header(h.name, memory_headers_)) continue;
            KJIT_TRY(look_up(h.name, h.quoted, c.folder, c.next));
        }
    }
    return Ok{};
}

// A computed include could name any file: record every file under the include folders.
Status Scanner::record_every_file() {
    std::error_code ec;
    for (const std::string &dir : search_.include_dirs) {
        for (auto it = std::filesystem::recursive_directory_iterator(
                 dir, std::filesystem::directory_options::skip_permission_denied, ec);
             !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
            if (!it->is_regular_file(ec)) continue;
            const std::string path = it->path().string();
            if (!seen_files_.insert("a" + path).second) continue;
            if (seen_files_.size() > kMaxFilesUnderIncludePaths) {
                return Error{Errc::io, "a computed #include makes every file under the include folders a "
                                       "dependency, and there are over " +
                                           std::to_string(kMaxFilesUnderIncludePaths)};
            }
            KJIT_TRY_ASSIGN(auto dep, describe(path, nullptr));
            mark_young(dep);
            deps_.push_back(std::move(dep));
        }
        ec.clear();
    }
    return Ok{};
}

}  // namespace

namespace {

// The NVRTC options, read in order: `i` is the one being read.
struct OptionList {
    const std::vector<std::string> &all;
    std::size_t i = 0;

    const std::string &current() const { return all[i]; }
    // The next option, taken as the current one's value ("-I dir"); then it is the current one.
    Result<std::string> next_value() {
        if (i + 1 >= all.size()) {
            return Error{Errc::invalid_argument, "NVRTC option '" + all[i] +
                                                     "' has no value after it (it would take the next option "
                                                     "libkjit passes as its value)"};
        }
        return all[++i];
    }
};

// An option's value when it is of the kind asked for, checked; nothing for another option.
using Taken = std::optional<Result<std::string>>;

// The folder of an include-folder option: -I dir, --include-path dir, --include-path=dir,
// -Idir or -I=dir.
Taken include_dir_option(OptionList &options) {
    const std::string &o = options.current();
    if (o == "-I" || o == "--include-path") {
        KJIT_TRY_ASSIGN(auto value, options.next_value());
        return include_dir_value(o + " " + value, value, false);
    }
    if (o.compare(0, 15, "--include-path=") == 0) return include_dir_value(o, std::string_view(o).substr(15), true);
    if (o.compare(0, 2, "-I") != 0) return std::nullopt;
    std::string_view value = std::string_view(o).substr(2);
    const bool equals = !value.empty() && value.front() == '=';
    if (equals) value.remove_prefix(1);
    return include_dir_value(o, value, equals);
}

// The file of a pre-include option: -include file, --pre-include file, -include=file or
// --pre-include=file.
Taken pre_include_option(OptionList &options) {
    const std::string &o = options.current();
    if (o == "-include" || o == "--pre-include") {
        KJIT_TRY_ASSIGN(auto value, options.next_value());
        return pre_include_value(o + " " + value, value);
    }
    if (o.compare(0, 9, "-include=") == 0 || o.compare(0, 14, "--pre-include=") == 0) {
        return pre_include_value(o, std::string_view(o).substr(o.find('=') + 1));
    }
    return std::nullopt;
}

// The definition of a macro option: -D def, --define-macro def, --define-macro=def, -Ddef or
// -D=def. Blanks before it are dropped, except after "--define-macro=".
Taken define_option(OptionList &options) {
    const std::string &o = options.current();
    std::string_view def;
    if (o == "-D" || o == "--define-macro") {
        KJIT_TRY_ASSIGN(auto value, options.next_value());
        def = value;
        while (!def.empty() && is_blank(def.front())) def.remove_prefix(1);
        return std::string(def);
    }
    if (o.compare(0, 15, "--define-macro=") == 0) return o.substr(15);
    if (o.compare(0, 2, "-D") != 0) return std::nullopt;
    def = std::string_view(o).substr(2);
    if (!def.empty() && def.front() == '=') def.remove_prefix(1);
    while (!def.empty() && is_blank(def.front())) def.remove_prefix(1);
    return std::string(def);
}

// Adds the value of an option of the kind `read` takes to `list`; true when the option was of
// that kind (and `status` then says whether its value was good).
// With `places`, notes where the value was given (FileOptions::Place).
bool take_option(Taken (*read)(OptionList &), OptionList &options, std::vector<std::string> &list, Status &status,
                 std::vector<FileOptions::Place> *places = nullptr, bool pre_include = false) {
    Taken value = read(options);
    if (!value) return false;
    if (!*value) {
        status = std::move(*value).error();
        return true;
    }
    if (places) places->push_back(FileOptions::Place{options.i, pre_include, **value});
    list.push_back(std::move(**value));
    return true;
}

}  // namespace

Result<FileOptions> file_options(const std::vector<std::string> &nvrtc_options) {
    FileOptions out;
    Status status = Ok{};
    for (OptionList options{nvrtc_options}; options.i < nvrtc_options.size() && status; ++options.i) {
        // The three kinds are told apart by their spellings: the order they are tried in does
        // not matter. Other options do not name files.
        if (take_option(include_dir_option, options, out.include_dirs, status, &out.places, false)) continue;
        if (take_option(pre_include_option, options, out.pre_includes, status, &out.places, true)) continue;
        take_option(define_option, options, out.defines, status);
    }
    if (!status) return std::move(status).error();
    return out;
}

std::string folder_of_name(const std::string &name, const std::string &working_dir) {
    const std::size_t slash = name.rfind('/');
    if (slash == std::string::npos) return working_dir;
    if (name[0] == '/') return slash == 0 ? std::string("/") : name.substr(0, slash);
    return working_dir.empty() ? std::string() : working_dir + "/" + name.substr(0, slash);
}

Reach reach(std::string_view source, const std::string &program_name, const MemoryHeaders &memory_headers,
            const FileOptions &options) {
    Reach r;
    // A quoted relative name is looked up in the includer's folder first: for the source, the
    // folder of the program's name, the working directory unless that name is absolute; for
    // the in-memory headers, the working directory joined with their names' folders. A
    // computed name may be such a name.
    auto visit = [&](std::string_view text, bool folder_is_absolute) {
        for (const Directive &d : directives(text)) {
            r.reads_files = true;
            if (d.computed) {
                r.uses_working_dir = true;
            } else if (d.quoted && !folder_is_absolute && !d.name.empty() && d.name[0] != '/' &&
                       !names_memory_header(d.name, memory_headers)) {
                r.uses_working_dir = true;
            }
        }
    };
    visit(source, !program_name.empty() && program_name[0] == '/');
    for (const auto &h : memory_headers) visit(h.second, false);
    for (const std::string &dir : options.include_dirs) {
        if (dir[0] != '/') r.uses_working_dir = true;
    }
    for (const std::string &file : options.pre_includes) {
        r.reads_files = true;
        if (file[0] != '/') r.uses_working_dir = true;
    }
    return r;
}

Result<std::vector<Dependency>> scan(std::string_view source, const MemoryHeaders &memory_headers, const Search &search,
                                     bool *names_program) {
    Scanner scanner(memory_headers, search);
    KJIT_TRY(scanner.queue_inputs(source));
    KJIT_TRY(scanner.follow_includes());
    const bool every_file = scanner.every_file();
    // The files a computed include may read are recorded, not read: any of them may name it.
    if (names_program) *names_program = every_file || scanner.names_program();
    if (every_file) {
        KJIT_TRY(scanner.record_every_file());
    }
    std::vector<Dependency> deps = scanner.take_deps();
    // What the computed include reads through the working directory cannot be listed: the
    // entry serves this folder only.
    if (every_file && !search.working_dir.empty()) {
        Dependency pin;
        pin.path = search.working_dir;
        pin.pins_working_dir = true;
        deps.push_back(std::move(pin));
    }
    // A text that names its own file may put the folder it was read from in the cubin (an
    // assert's message, a __FILE__ in a macro expanded in another header): the entry serves
    // these folders only (as located under the base folders). Files found through the working
    // directory are named relative to it by NVRTC, so it is not pinned.
    if (scanner.names_own_file()) {
        for (std::size_t i = 0; i < search.anchors.size(); ++i) {
            Dependency pin;
            pin.pins_anchor = true;
            pin.anchor = static_cast<int>(i);
            pin.relative = location(search.anchors[i], search.base_dirs);
            pin.path = pin.relative;
            deps.push_back(std::move(pin));
        }
    }
    return deps;
}

std::string location(const std::string &folder, const std::vector<std::string> &base_dirs) {
    for (std::size_t i = 0; i < base_dirs.size(); ++i) {
        const std::string &base = base_dirs[i];
        const std::string label = "{base " + std::to_string(i) + "}";
        if (folder == base) return label;
        if (base == "/") return label + folder;
        if (folder.size() > base.size() && folder.compare(0, base.size(), base) == 0 && folder[base.size()] == '/') {
            return label + folder.substr(base.size());
        }
    }
    return folder;
}

namespace {

bool identifier_char(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// Whether `text` has the identifier `name` (not as part of a longer one). memmem, not
// string_view::find: find looks for the first character (memchr) and compares at each, and
// headers are full of '_' and 'a' (4x the time on CCCL's headers).
bool has_identifier(std::string_view text, std::string_view name) {
    const char *const begin = text.data();
    const char *const end = begin + text.size();
    for (const char *from = begin; from < end;) {
        const auto *at =
            static_cast<const char *>(::memmem(from, static_cast<std::size_t>(end - from), name.data(), name.size()));
        if (!at) return false;
        const char *const after = at + name.size();
        if ((at == begin || !identifier_char(at[-1])) && (after == end || !identifier_char(*after))) return true;
        from = at + 1;
    }
    return false;
}

}  // namespace

FileNaming file_naming(std::string_view text) {
    FileNaming n;
    n.program = has_identifier(text, "__BASE_FILE__");
    n.own_file = n.program || has_identifier(text, "__FILE__") || has_identifier(text, "__FILE_NAME__");
    n.uses_assert = has_identifier(text, "assert");
    return n;
}

namespace {

// A file as one stat sees it (FileMemo::Seen, not hashed yet).
FileMemo::Seen observe(const std::string &path) {
    FileMemo::Seen s;
    struct stat st {};
    s.present = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    if (s.present) {
        s.size = static_cast<std::uint64_t>(st.st_size);
        s.mtime_sec = st.st_mtim.tv_sec;
        s.mtime_nsec = static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
    }
    return s;
}

}  // namespace

FileMemo::Seen &FileMemo::look(const std::string &path, std::size_t *stated) {
    auto [it, fresh] = seen_.try_emplace(path);
    if (fresh) {
        ++*stated;
        it->second = observe(path);
    }
    return it->second;
}

Check check(std::vector<Dependency> &deps, FileMemo *memo, bool at_origin, const std::vector<bool> *proven) {
    Check out;
    std::int64_t now = 0;
    for (std::size_t i = 0; i < deps.size(); ++i) {
        Dependency &d = deps[i];
        if (proven && i < proven->size() && (*proven)[i]) continue;  // the header watch's proof
        if (d.pins_working_dir) {
            if (current_working_dir() != d.path) return out;
            continue;
        }
        if (d.pins_anchor) {
            if (d.path != d.relative) return out;  // the folder is elsewhere now (parse)
            continue;
        }
        FileMemo::Seen here;
        if (!memo) {
            ++out.stated;
            here = observe(d.path);
        }
        FileMemo::Seen &seen = memo ? memo->look(d.path, &out.stated) : here;
        if (seen.present != d.exists) return out;
        if (!seen.present) continue;
        // Size and mtime stand for the content only for the file the record was made from. A
        // record relative to an anchor or the working directory may be checked against another
        // file (another install prefix, another working directory): one of the same size and
        // mtime (written in the same timestamp tick, or extracted with the same date) may hold
        // other text, so its content is compared (once per file per call: the memo), unless
        // the folders are where the records were proven (`at_origin`).
        if (!d.verify_content && (d.relative.empty() || at_origin) && seen.size == d.size &&
            seen.mtime_sec == d.mtime_sec && seen.mtime_nsec == d.mtime_nsec) {
            continue;
        }
        if (!seen.hashed) {
            ++out.hashed;
            FileIdentity id;
            auto h = hash_file64(d.path, &id);
            if (!h) return out;
            // Remembered under the identity it was hashed under (the file may have changed since
            // the stat): a later dependency on it in this call compares with that.
            seen.size = id.size;
            seen.mtime_sec = id.mtime_sec;
            seen.mtime_nsec = id.mtime_nsec;
            seen.hashed = true;
            seen.content_hash = *h;
        }
        if (seen.content_hash != d.content_hash) return out;
        // The same text under another size or mtime (a touch, a reinstall, a checkout): record
        // the identity it was hashed under, so later lookups stat it only. Young, it stays
        // marked (an edit within its timestamp tick would keep that identity) until settle().
        if (seen.size != d.size || seen.mtime_sec != d.mtime_sec || seen.mtime_nsec != d.mtime_nsec) {
            if (now == 0) now = realtime_ns();
            d.size = seen.size;
            d.mtime_sec = seen.mtime_sec;
            d.mtime_nsec = seen.mtime_nsec;
            d.verify_content = young_at(d.mtime_sec, d.mtime_nsec, now);
            out.refreshed = true;
        }
    }
    out.current = true;
    return out;
}

bool still_current(const std::vector<Dependency> &deps) {
    std::vector<Dependency> copy = deps;
    return check(copy).current;
}

bool settle(std::vector<Dependency> &deps) {
    const std::int64_t now = realtime_ns();
    bool changed = false;
    for (Dependency &d : deps) {
        if (d.verify_content && !young_at(d.mtime_sec, d.mtime_nsec, now)) {
            d.verify_content = false;
            changed = true;
        }
    }
    return changed;
}

namespace {

// A record's path as deps.txt writes it: absolute; relative to the working directory (one
// starting with ':' after "./", so that it is not taken for the next form); or ":N:" and the
// path relative to anchor N (for a pin, the anchor's location).
std::string recorded_path(const Dependency &d) {
    if (d.pins_working_dir) return d.path;
    if (d.pins_anchor || d.anchor >= 0) return ":" + std::to_string(d.anchor) + ":" + d.relative;
    if (d.relative.empty()) return d.path;
    return d.relative[0] == ':' ? "./" + d.relative : d.relative;
}

}  // namespace

std::string format(const std::vector<Dependency> &deps) {
    std::string out(kHeader);
    for (const Dependency &d : deps) {
        char fields[128];
        // A relative record is written relative (its path here is the one it had where it was
        // read); the working directory or an anchor's location that pins an entry as "@".
        const std::string path = recorded_path(d);
        if (d.pins_working_dir || d.pins_anchor) {
            std::snprintf(fields, sizeof fields, "@ %zu ", path.size());
        } else if (d.exists) {
            // '*' marks a young header, whose content is checked on every lookup.
            std::snprintf(fields, sizeof fields, "%c %" PRIu64 " %" PRId64 ".%09" PRIu32 " %016" PRIx64 " %zu ",
                          d.verify_content ? '*' : '+', d.size, d.mtime_sec, d.mtime_nsec, d.content_hash, path.size());
        } else {
            std::snprintf(fields, sizeof fields, "- %zu ", path.size());
        }
        out += fields;
        out += path;  // length-prefixed: any byte may appear in a path
        out += '\n';
    }
    return out;
}

namespace {

// Reads the number at the front of `text` (base 10 or 16, at most `max_digits` digits, no sign
// unless T is signed) and the one separator after it; false when either is not there. Exactly
// what format() writes: a hit parses 700 lines for a CUTLASS kernel, so no sscanf.
// take() of a hexadecimal number of 1 to 16 digits (either case), as std::from_chars reads it in
// base 16, in a few instructions a digit: a CUB kernel's list has 700 content hashes, and
// from_chars' general path cost 300 instructions each.
bool take_hex64(std::string_view &text, std::uint64_t &value, char separator) {
    std::uint64_t v = 0;
    std::size_t i = 0;
    for (; i < text.size() && i <= 16; ++i) {
        const char c = text[i];
        unsigned digit = 0;
        if (c >= '0' && c <= '9') {
            digit = static_cast<unsigned>(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            digit = static_cast<unsigned>(c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            digit = static_cast<unsigned>(c - 'A' + 10);
        } else {
            break;
        }
        v = v << 4 | digit;
    }
    if (i == 0 || i > 16 || i == text.size() || text[i] != separator) return false;
    value = v;
    text.remove_prefix(i + 1);
    return true;
}

template <typename T>
bool take(std::string_view &text, T &value, char separator, int base = 10, std::size_t max_digits = 20) {
    const char *first = text.data();
    const char *last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(first, last, value, base);
    if (ec != std::errc() || end == last || *end != separator) return false;
    const std::size_t digits = static_cast<std::size_t>(end - first) - (first[0] == '-' ? 1 : 0);
    if (digits == 0 || digits > max_digits) return false;
    text.remove_prefix(static_cast<std::size_t>(end - first) + 1);
    return true;
}

}  // namespace

namespace {

// `relative` in `folder`, into `path` (one allocation: a CUB kernel's list has 700 records).
void join(std::string &path, const std::string &folder, std::string_view relative) {
    const bool root = folder == "/";
    path.clear();
    path.reserve((root ? 0 : folder.size()) + 1 + relative.size());
    if (!root) path.append(folder);
    path.push_back('/');
    path.append(relative);
}

// Gives a record read back (`recorded`, its path as recorded_path wrote it) its place in the
// current request's folders (`search`), into d.path and d.relative: a relative path taken
// against the working directory or its anchor, a pin's current location.
Status place(Dependency &d, std::string_view recorded, const Search &search) {
    if (recorded[0] == '/') {
        if (d.pins_anchor) return Error{Errc::io, "malformed dependency list"};
        d.path.assign(recorded);
        return Ok{};
    }
    if (recorded[0] == ':' && !d.pins_working_dir) {
        std::string_view rest = recorded;
        rest.remove_prefix(1);
        std::size_t anchor = 0;
        if (!take(rest, anchor, ':') || rest.empty()) return Error{Errc::io, "malformed dependency list"};
        if (anchor >= search.anchors.size()) {
            return Error{Errc::io, "the dependency list names a folder (number " + std::to_string(anchor) +
                                       ") this request does not have"};
        }
        d.anchor = static_cast<int>(anchor);
        d.relative.assign(rest);
        const std::string &folder = search.anchors[anchor];
        if (d.pins_anchor) {
            d.path = location(folder, search.base_dirs);
        } else {
            join(d.path, folder, rest);
        }
        return Ok{};
    }
    // Relative to the working directory: checked in the current one.
    if (d.pins_working_dir || d.pins_anchor) return Error{Errc::io, "malformed dependency list"};
    if (search.working_dir.empty()) {
        return Error{Errc::io, "the dependency list names files relative to the working directory, "
                               "which cannot be told"};
    }
    d.relative.assign(recorded.compare(0, 3, "./:") == 0 ? recorded.substr(2) : recorded);
    join(d.path, search.working_dir, d.relative);
    return Ok{};
}

}  // namespace

Result<std::vector<Dependency>> parse(std::string_view text, const Search &search) {
    const Error bad{Errc::io, "malformed dependency list"};
    if (text.compare(0, kHeader.size(), kHeader) != 0) return bad;
    text.remove_prefix(kHeader.size());
    std::vector<Dependency> deps;
    deps.reserve(text.size() / 64 + 1);  // a record is 60 to 130 bytes: one growth at most, mostly none
    while (!text.empty()) {
        Dependency &d = deps.emplace_back();  // on an error the whole list is dropped
        std::size_t len = 0;
        if (text.size() < 2 || text[1] != ' ') return bad;
        const char flag = text[0];
        text.remove_prefix(2);
        if (flag == '+' || flag == '*') {
            std::uint32_t nsec = 0;
            if (!take(text, d.size, ' ') || !take(text, d.mtime_sec, '.') || !take(text, nsec, ' ', 10, 9) ||
                !take_hex64(text, d.content_hash, ' ') || !take(text, len, ' ')) {
                return bad;
            }
            d.verify_content = flag == '*';
            d.mtime_nsec = nsec;
        } else if (flag == '-') {
            if (!take(text, len, ' ')) return bad;
            d.exists = false;
        } else if (flag == '@') {
            if (!take(text, len, ' ')) return bad;
            // The working directory (absolute), or an anchor's location (":N:...").
            d.pins_working_dir = len > 0 && len < text.size() && text[0] == '/';
            d.pins_anchor = !d.pins_working_dir;
        } else {
            return bad;
        }
        // Exactly one space separated the length from the path (which may start with spaces).
        if (len == 0 || len >= text.size() || text[len] != '\n') return bad;
        KJIT_TRY(place(d, text.substr(0, len), search));
        text.remove_prefix(len + 1);
    }
    return deps;
}

std::string origin(std::string_view deps_text, const std::vector<Dependency> &deps, const Search &search) {
    // The folders the relative records are relative to, each once: -1 the working directory.
    std::set<int> folders;
    for (const Dependency &d : deps) {
        if (!d.is_pin() && !d.relative.empty()) folders.insert(d.anchor);
    }
    if (folders.empty()) return {};
    // Length-prefixed, so no two sets of locations encode alike; then the list itself.
    std::string encoded;
    for (const int n : folders) {
        if (n >= 0 && static_cast<std::size_t>(n) >= search.anchors.size()) return {};  // not this request's list
        const std::string &folder = n < 0 ? search.working_dir : search.anchors[static_cast<std::size_t>(n)];
        encoded += std::to_string(n) + " " + std::to_string(folder.size()) + " " + folder + "\n";
    }
    // The folders, then the list (tens of KiB for a CUB kernel): hashed as one, without a copy.
    char line[64];
    std::snprintf(line, sizeof line, "%s%016" PRIx64 "\n", kOriginHeader.data(), hash64(encoded, deps_text));
    return line;
}

std::string current_working_dir() {
    char buf[PATH_MAX];
    return ::getcwd(buf, sizeof buf) && buf[0] == '/' ? std::string(buf) : std::string();
}

}  // namespace kjit::key::include_scanner
