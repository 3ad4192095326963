// Cache key: what a kjit_compile request is, checked and keyed. A request becomes a
// KeyedRequest (its options checked, its folders absolute, how its compile looks files up, and
// its key); the key is an XXH3-128 of a labelled, length-prefixed encoding of every input that
// changes the cubin. A request that reads files from disk also has one key per state of those
// files (its variant key: the key plus each file's content as deps.txt, the include manifest,
// lists it). Knows the include scanner (how a compile reaches files), the name matcher (the
// keyword rule) and the compiler (NVRTC's identity and PCH options); nothing on disk.
#pragma once

#include "compile/linker.hpp"
#include "key/include_scanner.hpp"
#include "util/status.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::key {

// Bumped whenever the entry layout or the key encoding changes: old entries then miss.
// 2: the working directory in the key when files may be looked up relative to it (since 0.8,
// only with line information: deps.txt records what was looked up through it relative to it), and deps.txt
// for every compile that may read a file (version 1 recorded headers under include_paths only);
// the manifest records the cubin's XXH3-128 and ends in a check line, which loads and rescans of
// an entry's cubin confirm (format-1 entries have neither, so they are rebuilt).
// 3 (0.12): folders keyed by number, not path (KeyedFolders), files found through them by
// paths relative to them (deps.txt's ":N:" records) and pins where a text names its own file.
// Format-2 entries miss once and are rebuilt beside them (prune takes the old ones).
constexpr int kFormatVersion = 3;

// The NVRTC program's name when the caller gives none: the name every program had before
// kjit_compile_options::program_name, so that their keys and cubins stay what they were.
constexpr const char *kDefaultProgramName = "source.cu";

// Whether a miss may compile (kjit_compile_options::compile_mode, $KJIT_NO_COMPILE): always;
// warn (compile, and say so once per kernel); never (a miss is Errc::not_cached: a serving
// process that must not stall on NVRTC). Not in the key: a hit is the same in every mode.
enum class CompileMode { always, warn, never };

// What a caller asks of the cache (kjit_compile's arguments, defaults settled): every field can
// change the cubin, so each is in the key (key_of; the link inputs by the content key_request
// reads into link_files, not by path) and both hit-memo digests (HitMemo::digest,
// api/memo_digest.cpp; tests/api/compile_options_test.cpp holds them to each other).
struct RequestInputs {
    std::string source;
    std::string keyword;
    std::string arch;  // resolved, e.g. "sm_90a" (see api::defaults::arch)
    std::vector<std::string> nvrtc_options;
    std::vector<std::string> include_paths;
    std::vector<std::pair<std::string, std::string>> headers;
    std::optional<std::string> name_expression;
    // The NVRTC program's name; empty: kDefaultProgramName. In the key when not the default
    // (key_request clears a name equal to it), so entries of before the option keep their keys.
    std::string program_name;
    // Link-time inputs (kjit_compile_options::link_inputs) as the caller named them, and the
    // nvJitLink options. With any input, the source is compiled to LTO-IR and linked with them.
    std::vector<std::string> link_inputs;
    std::vector<std::string> link_options;
};

// Where to look and how to compile, never which kernel: none of these is in the key (the cache
// folder and the base folders are in the hit memo's digests: another folder is another answer).
struct RequestSettings {
    std::string cache_dir;  // resolved (see api::defaults::cache_dir)
    // Where a default `cache_dir` came from ("$HOME", ...), for messages; null: the caller named
    // it. Not in the key.
    const char *cache_dir_origin = nullptr;
    std::string arch_origin;  // where `arch` came from, for messages ("KJIT_ARCH", ...); not in the key
    // The cache's size limit in bytes (see store::cache_eviction::after_publish); none: unbounded.
    std::optional<std::uint64_t> max_cache_bytes;
    // How long a miss waits for another process compiling the same key (compile_lock.hpp).
    std::chrono::milliseconds compile_wait{600'000};
    // Whether a miss's publish fsyncs its cubin and entry folder first (KJIT_DURABILITY=entry,
    // store::cache_entry::NewEntry::durable); off, no fsync is on the miss path. Not in the key:
    // an entry is the same either way, and a torn one is refused by every read.
    bool durable = false;
    // The cluster tier a miss consults (tier.hpp), in KJIT_REMOTE_STORAGE's syntax
    // (config.hpp), and where it came from, for messages; empty or "none": none. Parsed on a miss
    // only, so a hit costs nothing for it. Not in the key: where an entry came from does not
    // change it.
    std::string remote_spec;
    const char *remote_origin = "KJIT_REMOTE_STORAGE";
    // The seed caches a local miss looks in before the cluster tier (storage/seed_store.hpp), in
    // order; made absolute by key_request. Not in the key either.
    std::vector<std::string> seed_dirs;
    // Base folders (kjit_compile_options::base_dirs, else $KJIT_BASE_DIRS), as ccache's
    // base_dir: where the cubin may name a folder (line information, __FILE__), a folder under
    // one of them is keyed by its path relative to it, so an install moved under another base
    // folder still hits. key_request checks that each is absolute and normalises it. Not in the
    // key themselves: only the relative locations they give are.
    std::vector<std::string> base_dirs;
    // Whether a miss may compile, and where that came from ("KJIT_NO_COMPILE", "the compile_mode
    // option"), for the message of a refused one. Not in the key.
    CompileMode compile_mode = CompileMode::always;
    const char *compile_mode_origin = "KJIT_NO_COMPILE";
    // How to compile, not what: NVRTC's automatic precompiled headers (-pch), in a folder per
    // header identity (pch_folders.hpp). Not in the key, since the cubin does the same either
    // way (NVRTC's cubins are not byte-reproducible anyway: internal-linkage names carry a
    // per-compile id). Set by key_request when the NVRTC options ask for it (`--pch`), and by
    // batches (docs/batch.md).
    bool use_pch = false;
    // Set by batches, which decide use_pch for each miss (docs/batch.md). A miss compiled alone
    // (false) with use_pch unset asks the measured prices (cache/pch_price.hpp).
    bool pch_planned = false;
};

// What key_request derives from the inputs and settings: checked, read and resolved once, for
// the key, the compile and the hit memo.
struct RequestDerived {
    // Set by key_request: each link input read once (absolute path, kind, content, fstat), in
    // order. In the key by content, never by path; the compile links these very bytes.
    std::vector<compile::linker::Input> link_files;
    // Set by key_request when there are link inputs: nvJitLink's build (nvjitlink_probe.hpp),
    // in the key, so an entry linked by another nvJitLink is not served.
    std::string nvjitlink_identity;
    // Set by key_request, from the texts and options: how the compile looks files up (its
    // working directory only when something may be looked up relative to it; what is found
    // through it is then recorded relative to it), and whether it may read any file (then the
    // entry records deps.txt and every hit checks it).
    key::include_scanner::Search search;
    bool reads_files = false;
    // Set by key_request: the working directory when it is in the key, else empty. Files looked
    // up through it are keyed by content under paths relative to it (deps.txt, variant_key), so
    // the same request from another folder over the same files shares the entry; only when the
    // cubin itself names it (line information: -lineinfo, -G) does the key hold it.
    std::string keyed_working_dir;
    // Set by key_request, only with line information: the location of each anchor
    // (KeyedFolders::anchors; include_scanner::location: relative to a base folder where one
    // holds it), in the key, since the cubin names the files read through them.
    std::vector<std::string> keyed_locations;
    // Set by key_request: the NVRTC build that compiles it (compile::compiler::nvrtc_identity()), in
    // the key and the manifest. Taking it loads NVRTC, so even a hit needs NVRTC: an entry made
    // by another NVRTC build must not be served.
    std::string nvrtc_identity;
    // Set by key_request, which takes NVRTC's PCH options out of nvrtc_options (they are not in
    // the key either; compile::compiler::take_pch_options): whether they asked for the automatic PCH, and
    // those passed on with libkjit's PCH (--instantiate-templates-in-pch=...).
    bool pch_requested = false;
    std::vector<std::string> pch_options;
};

// A request: what was asked, the settings, and what key_request derived, as one object whose
// fields are read by name (request.source, request.cache_dir, request.search). A new field goes
// into the one of the three it belongs to; the static_assert below refuses one added here.
struct Request : RequestInputs, RequestSettings, RequestDerived {};
static_assert(sizeof(Request) == sizeof(RequestInputs) + sizeof(RequestSettings) + sizeof(RequestDerived),
              "key::Request holds a field of its own: put it in RequestInputs (keyed: key_of and both memo "
              "digests), RequestSettings (never keyed) or RequestDerived (set by key_request)");

// A request checked (keyword, arch, options) with its folders made absolute, and its key and
// entry: what the cache's steps (find, build) work from.
struct KeyedRequest {
    Request request;
    // The request's key. For a request that reads files, its *source key*: its results lie
    // under variant keys (variant_key) that its variants file lists (cache_entry.hpp).
    std::string key;
    std::string entry;  // <cache>/<k0k1>/<key>
    std::string cubin;  // <entry>/kernel.cubin
    // Whether the answer depends on the working directory: the request named a relative cache
    // folder or include path (made absolute against it), or NVRTC may look files up in it.
    bool uses_working_dir = false;
};

// Reads the request's link inputs into `request.link_files` (paths made absolute against the
// working directory) and checks its link options. Errors: io for a file that cannot be read,
// invalid_argument for an empty name, a file of no kind nvJitLink links, or an -arch among the
// link options. Called by key_request.
Status read_link_inputs(Request &request);

// Checks `request` and keys it: NVRTC's PCH options taken out (compile::compiler::take_pch_options), no
// target among the NVRTC options, the cache folder and include paths made absolute, how the
// compile looks files up (the working directory enters the key only with line information:
// keyed_working_dir). Errors: invalid_argument (keyword, arch, options), io (no working
// directory, a folder that cannot be made absolute), nvrtc (no usable NVRTC: its build is in the
// key, so a lookup needs it too; checked last, so a bad request is told what is wrong first).
Result<KeyedRequest> key_request(Request request);

// invalid_argument unless `arch` is a real target (sm_XX with an optional a/f suffix).
Status check_arch(const std::string &arch);

// invalid_argument when an NVRTC option sets the target (-arch, --gpu-architecture): the arch
// has a field of its own, which keys and checks it. Checked before a default arch is looked
// for, so that the option is named, not the missing GPU.
Status check_no_target_option(const std::vector<std::string> &nvrtc_options);

// A base folder (Request::base_dirs) as key_request leaves it and the request record reads it:
// lexically normal, without a trailing '/' (but "/" itself).
std::string normal_base_folder(const std::string &folder);

// A request's folder-naming inputs as the key holds them: each absolute folder the request names
// (an include folder, among the NVRTC options or in include_paths; the folder of an absolute
// pre-included file or program name) is an *anchor*, numbered in that order, and keyed by its
// number ("{anchor N}"), not its path: what is found through it is keyed by content under paths
// relative to it (variant_key), so the same files under another install prefix give the same
// keys. Where the cubin may name such a folder, the anchors' locations are keyed too (line
// information: key_of) or pin the entry (__FILE__: include_scanner::scan).
struct KeyedFolders {
    std::vector<std::string> options;        // the NVRTC options as keyed (keyed_option too)
    std::vector<std::string> include_paths;  // "{anchor N}", or as given when relative
    std::string program_name;                // "{anchor N}/name" when absolute
    std::vector<std::string> anchors;        // absolute, by number
    // The anchor of each folder, as include_scanner::Search takes them: of each include folder
    // among the options, of each include path, of each pre-included file among the options
    // (FileOptions order), and of the program's folder. A relative one is kRelative (looked up
    // through the working directory); an absolute one the key could not name by number,
    // kUnanchored (recorded by its path).
    static constexpr int kRelative = -1;
    static constexpr int kUnanchored = -2;
    std::vector<int> include_dir_anchors, include_path_anchors, pre_include_anchors;
    int program_anchor = kUnanchored;
};
// The options' file spellings as read by include_scanner::file_options (`files`); the first
// form reads them itself, and keys an option it cannot read as given (key_request refuses it).
KeyedFolders keyed_folders(const Request &request, const key::include_scanner::FileOptions &files);
KeyedFolders keyed_folders(const Request &request);

// The 32-hex-digit key: XXH3-128 of a labelled, length-prefixed encoding of every input that
// changes the cubin (but not the content of files read from disk: see variant_key). Reads
// `request.search.working_dir` and `request.nvrtc_identity`, which key_request sets.
std::string key_of(const Request &request);
// The same, with the request's folders as keyed already (keyed_folders), as key_request has them.
std::string key_of(const Request &request, const KeyedFolders &folders);

// The key of one result of a request that reads files (a variant, cache_entry.hpp): its source
// key and the content of every file its compile may read (path, and XXH3-64 or absent, in the
// order deps.txt lists them; not their sizes or mtimes, which a touch changes). The same request
// over the same files gets the same key in every process, so builds of one state meet in one
// entry; and an entry's deps.txt gives its key back, which a lookup checks: a variants file can
// only lead to entries of its own request and of the files as they are.
std::string variant_key(std::string_view source_key, const std::vector<key::include_scanner::Dependency> &deps);

// What the header watch proves a variant of `request` under (key::dependency_watch::remember,
// proven): `source_key`, the working directory when the request has one and its anchors, since
// deps.txt may name files relative to them, which another folder must check for itself; and its
// base folders, which give the locations a pin compares.
std::string proof_context(const Request &request, std::string_view source_key);

// The header identity of a PCH made while compiling `request` (keyed), less the content of
// the files it reads: arch, options, include paths, working directory (when names are looked up
// relative to it), in-memory headers, and the source up to the end of its last line with
// "#include" (anything before an include can change what it declares: a #define, another
// include). What follows, typically the instantiations a sweep varies, is left out so those
// share the PCH. Requests with the same one read the same files, so they share a PCH unless one
// of those files is edited in between (pch_identity adds their content).
// The program's name is in it only where the source or an in-memory header may expand
// __BASE_FILE__ (pch_identity: where a file may). Elsewhere programs of other names share their
// headers' PCH (Warp names each module's program after the module, over the same headers);
// their quoted includes, looked up in the name's folder first, are in pch_identity's `deps`
// (the absent candidates as well as the files found).
std::string pch_texts(const Request &request);

// Whether a request's source includes anything (a `#include` in it): what NVRTC's PCH could
// precompile (a source without one gains nothing: -pch cost a header-free sweep 10-15%), and
// what makes NVRTC compile one at a time within a process.
bool includes_headers(const Request &request);

// What a PCH made while compiling `request` was made from: its header identity (pch_texts) and
// every file the compile may read, by content (`deps`, the same list the entry records),
// however it was reached; and the program's name where a text read may expand __BASE_FILE__
// (`names_program`, from include_scanner::scan): that names the program in whichever file expands
// it, so a PCH made by one program would give another its name (NVRTC 13.0's own -pch does:
// a.cu's PCH used by b.cu gave b.cu's cubin "a.cu"). Names the PCH's folder (pch_folders.hpp).
std::string pch_identity(const Request &request, const std::vector<key::include_scanner::Dependency> &deps,
                         bool names_program);

}  // namespace kjit::key
