// Symbol scanner: a cubin (file or bytes) -> its STT_FUNC symbols, through libelf. Files are
// read into memory with pread, never mapped: another process rewriting a cubin in place while
// it is scanned must give an error or a retry, not SIGBUS in the host program. The string
// table is never copied: names are views into the bytes, valid while the SymbolTable lives. Anything malformed is an
// Errc::bad_cubin carrying libelf's message and the path; libelf bounds-checks every section against the file size, and
// every name offset is checked against the string table here.
#pragma once

#include "util/filesystem.hpp"
#include "util/status.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cubin {

struct FunctionSymbol {
    std::string_view name;   // view into the string table of the scanned bytes
    bool is_global = false;  // STB_GLOBAL or STB_WEAK
    bool is_entry = false;   // st_other & STO_CUDA_ENTRY (0x10): a __global__ kernel
};

class SymbolTable {
public:
    // Reads `path` (read_cubin_at) and its .symtab. Errc::io when it cannot be opened or read,
    // is not a regular file or kept changing while read; Errc::bad_cubin when it is empty, over
    // kMaxCubinBytes, or not a 64-bit little-endian CUDA ELF with a well-formed .symtab.
    static Result<SymbolTable> open_file(const std::string &path);
    // Reads only what names the cubin's functions: its ELF header, section headers, .symtab and
    // the string table that links to (under a fifth of a multi-MB cubin: every kernel's code and
    // constants are left unread), with pread, as open_file reads it, and checked as open_file
    // checks it; identity() is the fstat the file kept while read. image() is then empty
    // (whole_image() is false): for callers that use nothing else (kjit_resolve_name's scan of
    // a loose cubin). A file open_file would refuse, or
    // whose layout is not a plain one (extended section numbering, the symbols outside the
    // file), or that changed while read, is read by open_file instead, whose answer and errors
    // it gives.
    static Result<SymbolTable> open_symbols(const std::string &path);
    // The same for `name` in the open folder `dir_fd` (openat), e.g. a cache entry's cubin read
    // with its manifest from one folder; `label` (its path) names it in errors.
    static Result<SymbolTable> open_file_at(int dir_fd, const std::string &name, const std::string &label);

    // The same over bytes already in memory (taken over by the table). `label` names the
    // bytes in error messages.
    static Result<SymbolTable> from_bytes(std::string bytes, const std::string &label);

    // The same over bytes the caller keeps alive (and unchanged) for the table's life: the
    // loader scans the very bytes it hands to the driver, without a copy.
    static Result<SymbolTable> from_view(std::string_view bytes, const std::string &label);

    SymbolTable(SymbolTable &&) noexcept;
    SymbolTable &operator=(SymbolTable &&) noexcept;
    ~SymbolTable();

    const std::vector<FunctionSymbol> &functions() const { return functions_; }
    // The whole image as scanned (the bytes read, owned or viewed); empty for open_symbols
    // (whole_image() false).
    std::string_view image() const;
    // Whether image() is the whole file (every constructor but open_symbols).
    bool whole_image() const { return whole_image_; }
    // fstat of the file as opened (zeroes for from_bytes).
    const FileIdentity &identity() const { return identity_; }

private:
    struct Handle;
    explicit SymbolTable(std::unique_ptr<Handle> handle);
    static Result<SymbolTable> parse(std::unique_ptr<Handle> handle, const std::string &label);

    std::unique_ptr<Handle> handle_;
    std::vector<FunctionSymbol> functions_;
    FileIdentity identity_;
    bool whole_image_ = true;
};

// The largest cubin libkjit reads: larger files are refused (Errc::bad_cubin) before reading.
constexpr std::uint64_t kMaxCubinBytes = std::uint64_t{1} << 30;

// Reads the whole cubin `name` in the open folder `dir_fd` (AT_FDCWD: `name` is a path) with
// read_whole_file, and sets `identity` to the fstat of what was read. `path` names it in
// errors: Errc::io when it cannot be opened or read, is not a regular file (check_cubin_file)
// or kept changing while read; Errc::bad_cubin when it is empty or larger than kMaxCubinBytes.
// The one reader of cubin files: the scanner and the loader share it. Thread safe.
Result<std::string> read_cubin_at(int dir_fd, const std::string &name, const std::string &path, FileIdentity &identity);

// Errc::io unless `st` (of the cubin at `path`) is a regular file: "is a directory", "is not
// a regular file". Shared by every reader of cubins, so they all say the same.
Status check_cubin_file(const struct stat &st, const std::string &path);

// stat(2) of a cubin path (following links) checked by check_cubin_file: its identity, or
// Errc::io "cannot open cubin '<path>': <errno text>".
Result<FileIdentity> stat_cubin(const std::string &path);

// Checks that a cubin image is an ELF64 little-endian file whose ELF header, section header
// table and every section's bytes lie inside `image`. cuLibraryLoadData takes no size and
// trusts the headers, so the loader checks this before handing bytes to the driver.
// Errc::bad_cubin naming `label` otherwise.
Status check_image_extent(std::string_view image, const std::string &label);

// The SM version a cubin targets, as its ELF header records it (90 for sm_90 and sm_90a,
// 100 for sm_100...), or 0 when `image` is too short to say. For error messages only.
unsigned cubin_sm_version(std::string_view image);

}  // namespace kjit::cubin
