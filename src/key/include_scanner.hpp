// Include scanner: which files on disk can a compile read, however NVRTC reaches them? NVRTC
// reports no dependencies, so this follows `#include` directives (and `__has_include`) itself,
// from the source, the in-memory headers and the pre-included files through every header found,
// without evaluating conditionals: the result is a superset of what NVRTC reads, which can only
// cost a needless miss, never a stale hit. It searches as NVRTC 13 does (measured; see
// docs/cache-layout.md): an in-memory header of that name first; an absolute name as is; a
// quoted name in the including file's folder (the working directory for the source, whose
// program is named "source.cu", and for an in-memory header the working directory joined with
// the folder part of its name), then the include folders (-I among the NVRTC options, then
// include_paths, in that order); an angle name in the include folders only. A pre-included
// file: the working directory, then the include folders. It also records the candidates probed
// before the one found (they did not exist): creating one later would shadow the header, so it
// must give a miss too. A computed `#include MACRO` is followed through every definition of its
// macros in the scanned texts and the -D options (include_macros.hpp); only when that cannot
// tell what it names is every file under the include folders recorded. Knows the filesystem.
#pragma once

#include "util/filesystem.hpp"
#include "util/hashing.hpp"
#include "util/status.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kjit::key::include_scanner {

struct Dependency {
    std::string path;  // absolute (for a relative record: taken against the working directory)
    // Non-empty when NVRTC reached it through the working directory (the source's or an
    // in-memory header's folder, a relative -I or -include, or the folder of a file found that
    // way): `path` relative to the working directory, as deps.txt records it and the variant key
    // hashes it. The same request from another folder then checks the files there, not here:
    // the entry is shared when they are the same and missed when they are not (ccache's
    // manifests record what was read, not where the process stood).
    std::string relative;
    // With `relative`: what it is relative to. -1: the working directory; else the request's
    // folder Search::anchors[anchor] (an include folder, the folder of an absolute program name
    // or pre-included file), through which NVRTC found it. Another install with the same files
    // under another folder then shares the entry, unless it is pinned (below).
    int anchor = -1;
    // Not a file: the working directory the compile ran in (`path`), which must be the current
    // one. Recorded when what was read through it cannot be listed (a computed include that
    // could name any file): the entry then serves that folder only.
    bool pins_working_dir = false;
    // Not a file: the location of Search::anchors[anchor] (absolute, or relative to a base
    // folder: location()), recorded in `relative`, that the request must have for the entry to
    // serve it; `path` is the location the current request has (parse()). Recorded when a text
    // the compile reads may name its own file (file_naming: __FILE__, NVRTC's assert): the
    // cubin may then name the folder a file was read from, so an entry serves that folder only.
    bool pins_anchor = false;
    // A pin (either kind), not a file.
    bool is_pin() const { return pins_working_dir || pins_anchor; }
    bool exists = true;  // false: a probed candidate that must stay absent
    std::uint64_t size = 0;
    std::int64_t mtime_sec = 0;
    std::uint32_t mtime_nsec = 0;
    std::uint64_t content_hash = 0;  // XXH3-64 of the file as read
    // Modified less than kRacyWindowNs before it was read: size and mtime cannot prove it
    // unchanged (an edit within the same timestamp tick keeps both), so every check hashes it.
    bool verify_content = false;
};

using MemoryHeaders = std::vector<std::pair<std::string, std::string>>;

// The NVRTC options that make it read files: include folders and pre-included files, as given
// (relative ones are relative to the working directory), in order; and the macros defined on
// the command line, which a computed include may expand.
struct FileOptions {
    std::vector<std::string> include_dirs;
    std::vector<std::string> pre_includes;
    std::vector<std::string> defines;  // "NAME", "NAME=VALUE", "NAME(a)=VALUE"
    // Where each include folder and pre-included file was given, in option order: the option
    // holding the value (the second of "-I", "dir") and the value as taken from it.
    struct Place {
        std::size_t option = 0;
        bool pre_include = false;
        std::string value;
    };
    std::vector<Place> places;
};

// The file options among `nvrtc_options`, in every spelling NVRTC 13 accepts: -I<dir>, -I=<dir>,
// -I <dir> (one option), -I and <dir> as two, --include-path=<dir>, --include-path and <dir>;
// -include <file>, -include=<file>, --pre-include=<file>, --pre-include <file> (two options);
// -D<def>, -D=<def>, -D <def>, -D and <def>, --define-macro=<def>, --define-macro and <def>.
// Errc::invalid_argument, naming the option, for one without its value (it would take the next
// option, one libkjit adds, as its value) and for values whose surrounding blanks NVRTC treats
// in ways libkjit cannot tell apart (e.g. "-I= dir", which NVRTC does not trim).
Result<FileOptions> file_options(const std::vector<std::string> &nvrtc_options);

// What a compile may look up, decided from the texts and options alone (no file system access),
// so that a lookup can put it in the key.
struct Reach {
    bool reads_files = false;       // any #include, __has_include or pre-included file
    bool uses_working_dir = false;  // something may be looked up relative to the working directory
};
// `program_name`: the NVRTC program's name (empty: a name without a folder), whose folder the
// source's quoted names are looked up in first.
Reach reach(std::string_view source, const std::string &program_name, const MemoryHeaders &memory_headers,
            const FileOptions &options);

// How a compile looks files up.
struct Search {
    // Absolute; empty when nothing is looked up relative to it (Reach::uses_working_dir false).
    std::string working_dir;
    // Absolute: where the source's quoted names are looked up first, as NVRTC does, the folder
    // of the program's name (folder_of_name()); empty: working_dir.
    std::string source_folder;
    // The program's name is absolute: source_folder is not reached through the working directory.
    bool source_folder_absolute = false;
    // Absolute, in NVRTC's order: those among the NVRTC options, then include_paths.
    std::vector<std::string> include_dirs;
    // As given to -include / --pre-include.
    std::vector<std::string> pre_includes;
    // As given to -D / --define-macro (FileOptions::defines).
    std::vector<std::string> defines;
    // The absolute folders the request names, each once, in the order first named: the include
    // folders not given relative to the working directory, the folder of an absolute program
    // name, the folder of each absolute pre-included file. What is found through one is
    // recorded relative to it (Dependency::anchor), and the key names it by its number
    // (key::key_of), so the same files under another install prefix give the same keys.
    std::vector<std::string> anchors;
    // Parallel to include_dirs: the anchor of each (-1: one given relative to the working
    // directory). source_folder_anchor likewise for source_folder when absolute.
    std::vector<int> include_dir_anchor;
    int source_folder_anchor = -1;
    // Parallel to pre_includes likewise: the anchor of an absolute pre-included file's folder
    // (missing entries, or -2: recorded by its path).
    std::vector<int> pre_include_anchor;
    // Base folders (key::Request::base_dirs): absolute, normalised. See location().
    std::vector<std::string> base_dirs;
    // The NVRTC options define NDEBUG (and undefine it nowhere): NVRTC's built-in assert is
    // then empty and names no file (file_naming).
    bool quiet_assert = false;
};

// Where `folder` (absolute) is, as the key and a pin record it: relative to the first of
// `base_dirs` it lies in ("{base N}" or "{base N}/rest"), else the folder itself.
std::string location(const std::string &folder, const std::vector<std::string> &base_dirs);

// What a text says that may put its own file's name in the cubin, by identifiers anywhere in it
// (in a comment too: a superset).
struct FileNaming {
    bool own_file = false;     // __FILE__, __BASE_FILE__ or __FILE_NAME__
    bool program = false;      // __BASE_FILE__: the program's name, in whichever file expands it
    bool uses_assert = false;  // assert: NVRTC's own expands to __FILE__ unless NDEBUG is defined
    FileNaming &operator|=(const FileNaming &o) {
        own_file = own_file || o.own_file;
        program = program || o.program;
        uses_assert = uses_assert || o.uses_assert;
        return *this;
    }
};
FileNaming file_naming(std::string_view text);

// Files that compiling `source` may read from disk. Errc::io when a found header cannot be read.
// A computed include is looked up as every header name its macros may expand to (as a quoted or
// angle name, from the including file's folder); what cannot be followed records every file
// under the include folders (over 100,000: Errc::io).
// The folder where a text named `name` (the program, or an in-memory header) has its quoted names
// looked up first, as NVRTC does, compiled in `working_dir`: its name's folder, taken against
// `working_dir` when relative; `working_dir` for a name without a folder. Empty when it is
// relative and `working_dir` is empty (nothing is looked up relative to it).
std::string folder_of_name(const std::string &name, const std::string &working_dir);

// `names_program` (when not null) is set to whether a text read (the source, an in-memory header,
// a file) may expand __BASE_FILE__ (FileNaming::program): the program's name then reaches
// whatever that text declares, a PCH of the headers too (key::pch_identity).
Result<std::vector<Dependency>> scan(std::string_view source, const MemoryHeaders &memory_headers, const Search &search,
                                     bool *names_program = nullptr);

// What check() found.
struct Check {
    bool current = false;    // every dependency is as recorded
    bool refreshed = false;  // a record was brought up to date: store the list again
    std::size_t hashed = 0;  // files whose content was read and hashed
    std::size_t stated = 0;  // files stat'ed (not answered by a FileMemo)
};

// What one call (a kjit_compile_batch) saw of the files it checked, so that each file is
// stat'ed, and hashed, at most once per call however many of its items depend on it: 300
// kernels over one header tree share their 700 headers. A file edited during the call may be
// seen as it was when the call first looked, as if the call had looked at it a moment earlier.
// One thread at a time.
class FileMemo {
public:
    struct Seen {
        bool present = false;  // a regular file
        std::uint64_t size = 0;
        std::int64_t mtime_sec = 0;
        std::uint32_t mtime_nsec = 0;
        bool hashed = false;  // content_hash holds its XXH3-64 at this size and mtime
        std::uint64_t content_hash = 0;
    };
    // The file as first seen in this call, stat'ed now when not seen yet (*stated counts it).
    Seen &look(const std::string &path, std::size_t *stated);

private:
    std::unordered_map<std::string, Seen, PathHash> seen_;
};

// Whether every dependency is as recorded: absent ones still absent; present ones of the same
// size and mtime (and, for young ones, content), or else of the same content (a `touch` alone
// is not a change). Stops at the first that is not. A file found with the same content under
// another size or mtime gets that identity in `deps` (young again if it is), and `refreshed`
// says to store the list: later lookups then stat it only, instead of hashing it forever.
// With `memo`, each file is stat'ed and hashed at most once per memo (FileMemo). With `proven`
// (one flag per record: key::dependency_watch::arm's), a flagged record is as recorded: the
// header watch proves it, and it is neither stat'ed nor looked up.
// A relative record (Dependency::relative) may be checked against another file than the one it
// was made from (another install, another working directory), which may have the same size and
// mtime and other text: its content is compared, unless `at_origin` says the list's relative
// records were proven where the request's folders are now (origin()).
Check check(std::vector<Dependency> &deps, FileMemo *memo = nullptr, bool at_origin = false,
            const std::vector<bool> *proven = nullptr);
// check() of a copy: whether every dependency is as recorded.
bool still_current(const std::vector<Dependency> &deps);

// After still_current() passed: clears verify_content on the headers that are no longer young
// (their content was just checked and their mtime is now outside the window). True if any
// changed, so the caller can store the list again and later hits stat only.
bool settle(std::vector<Dependency> &deps);

// Text form kept in a cache entry (`deps.txt`), and back; a malformed text is Errc::io. A
// relative record is written relative and parsed against the current request's folders
// (`search`: its working directory, absolute, or the anchor it names): Errc::io when the request
// has no such folder (another request's list). A pinned anchor's current location is taken from
// `search` (Dependency::pins_anchor).
std::string format(const std::vector<Dependency> &deps);
Result<std::vector<Dependency>> parse(std::string_view text, const Search &search);

// Where a list's relative records were proven (origin.txt beside deps.txt): one line naming
// `deps_text` (the list as stored) and the current locations of the folders its relative
// records are relative to (`search`: the working directory, the anchors). Written by whoever
// made the list there or compared its files' content there; a later check that computes the
// same text stands where the records were made, so size and mtime stand for the content as for
// an absolute record (check()'s `at_origin`). Tied to the list's text, so a list rewritten by
// anyone (an older libkjit, which knows no origin file, or a check elsewhere) is compared by
// content again. Empty when no record is relative (nothing to prove).
std::string origin(std::string_view deps_text, const std::vector<Dependency> &deps, const Search &search);

// The working directory, absolute (getcwd); empty when it cannot be told.
std::string current_working_dir();

}  // namespace kjit::key::include_scanner
