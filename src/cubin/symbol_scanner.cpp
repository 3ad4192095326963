#include "cubin/symbol_scanner.hpp"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#ifndef EM_CUDA
#define EM_CUDA 190
#endif

namespace kjit::cubin {

namespace {

constexpr unsigned char kStoCudaEntry = 0x10;

// libelf's per-thread error text, read at once on the failing thread.
Error elf_error(const std::string &label, const char *what) {
    const char *detail = elf_errmsg(-1);
    return Error{Errc::bad_cubin, "'" + label + "' is not a valid cubin: " + what +
                                      " (libelf: " + (detail ? detail : "no detail") + ")"};
}

Error bad(const std::string &label, const std::string &what) {
    return Error{Errc::bad_cubin, "'" + label + "' is not a valid cubin: " + what};
}

// What a file that is not an ELF cubin looks like, when it is one of the things people pass
// instead (and what to do), else "".
std::string what_it_looks_like(std::string_view image) {
    // A fatbinary (nvcc -fatbin, or a cubin's container in an executable): magic 0xBA55ED50.
    static constexpr unsigned char kFatbinMagic[4] = {0x50, 0xED, 0x55, 0xBA};
    if (image.size() >= 4 && std::memcmp(image.data(), kFatbinMagic, 4) == 0) {
        return "it is a fatbin (nvcc -fatbin), which holds cubins and PTX for several archs: take the cubin "
               "for your GPU out of it (cuobjdump -xelf all FILE) and pass that";
    }
    const std::string_view head = image.substr(0, 4096);
    if (head.find('\0') != std::string_view::npos) return "";  // binary, and not one we know
    if (head.find(".version") != std::string_view::npos && head.find(".target") != std::string_view::npos) {
        return "it is PTX text (the .version and .target of a PTX module), not a cubin: assemble it for your "
               "GPU (ptxas -arch=sm_XX FILE -o FILE.cubin), or compile the CUDA source with kjit_compile";
    }
    if (head.find("__global__") != std::string_view::npos || head.find("#include") != std::string_view::npos) {
        return "it is CUDA C++ source text, not a cubin: compile it first (kjit_compile, or `kjit compile FILE`), "
               "which gives the cubin's path";
    }
    return "";
}

// Refuses an image that is not an ELF file: `what`, or what it looks like instead.
Error not_elf(std::string_view image, const std::string &label, const std::string &what) {
    const std::string looks = what_it_looks_like(image);
    return bad(label, looks.empty() ? what : looks);
}

// Set while libkjit loads: no once-guard a thread could hold at a fork (fork_guard.hpp).
const bool libelf_ready = elf_version(EV_CURRENT) != EV_NONE;

bool init_libelf() { return libelf_ready; }

}  // namespace

// libelf descriptor plus what backs it (owned bytes, or none for a view).
struct SymbolTable::Handle {
    std::string bytes;
    std::unique_ptr<char[]> parts;  // open_symbols' string table (no ELF descriptor)
    Elf *elf = nullptr;

    Handle() = default;
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    ~Handle() {
        if (elf) elf_end(elf);
    }
};

SymbolTable::SymbolTable(std::unique_ptr<Handle> handle) : handle_(std::move(handle)) {}
SymbolTable::SymbolTable(SymbolTable &&) noexcept = default;
SymbolTable &SymbolTable::operator=(SymbolTable &&) noexcept = default;
SymbolTable::~SymbolTable() = default;

std::string_view SymbolTable::image() const {
    std::size_t size = 0;
    const char *raw = elf_rawfile(handle_->elf, &size);
    return raw ? std::string_view(raw, size) : std::string_view{};
}

Result<SymbolTable> SymbolTable::open_file(const std::string &path) { return open_file_at(AT_FDCWD, path, path); }

Result<SymbolTable> SymbolTable::open_file_at(int dir_fd, const std::string &name, const std::string &path) {
    FileIdentity identity;
    KJIT_TRY_ASSIGN(auto bytes, read_cubin_at(dir_fd, name, path, identity));
    auto table = from_bytes(std::move(bytes), path);
    if (table) table->identity_ = identity;
    return table;
}

Result<std::string> read_cubin_at(int dir_fd, const std::string &name, const std::string &path,
                                  FileIdentity &identity) {
    // O_NONBLOCK: a FIFO put in the cubin's place must not block the open.
    UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd.valid()) {
        const int err = errno;
        return io_error("cannot open cubin", path, err);
    }
    return read_whole_file(
        fd.get(), path, "cubin",
        [&](const struct stat &st) -> Status {
            if (auto file = check_cubin_file(st, path); !file) return file.error();
            const auto size = static_cast<std::uint64_t>(st.st_size);
            if (size == 0) return bad(path, "the file is empty (0 bytes)");
            if (size > kMaxCubinBytes) {
                return Error{Errc::bad_cubin, "'" + path + "' is " + std::to_string(size) +
                                                  " bytes, larger than the 1 GiB libkjit reads"};
            }
            return Ok{};
        },
        identity);
}

Result<SymbolTable> SymbolTable::from_bytes(std::string bytes, const std::string &label) {
    if (!init_libelf()) return Error{Errc::internal, "libelf: elf_version(EV_CURRENT) failed"};
    if (bytes.empty()) return bad(label, "the image is empty (0 bytes)");
    auto handle = std::make_unique<Handle>();
    handle->bytes = std::move(bytes);
    handle->elf = elf_memory(handle->bytes.data(), handle->bytes.size());
    if (!handle->elf) return elf_error(label, "cannot open as ELF");
    return parse(std::move(handle), label);
}

Result<SymbolTable> SymbolTable::from_view(std::string_view bytes, const std::string &label) {
    if (!init_libelf()) return Error{Errc::internal, "libelf: elf_version(EV_CURRENT) failed"};
    if (bytes.empty()) return bad(label, "the image is empty (0 bytes)");
    // elf_memory() may convert a foreign-endian or other-class image in place; only a native
    // ELF64 little-endian image (the only kind a cubin is) is handed to it, so the caller's
    // bytes are never written.
    if (bytes.size() < EI_NIDENT || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0) {
        return not_elf(bytes, label, "not an ELF file (no ELF magic)");
    }
    if (static_cast<unsigned char>(bytes[EI_CLASS]) != ELFCLASS64 ||
        static_cast<unsigned char>(bytes[EI_DATA]) != ELFDATA2LSB) {
        return bad(label, "not a 64-bit little-endian ELF file");
    }
    auto handle = std::make_unique<Handle>();
    handle->elf = elf_memory(const_cast<char *>(bytes.data()), bytes.size());
    if (!handle->elf) return elf_error(label, "cannot open as ELF");
    return parse(std::move(handle), label);
}

Status check_cubin_file(const struct stat &st, const std::string &path) {
    if (S_ISDIR(st.st_mode)) return Error{Errc::io, "cubin path '" + path + "' is a directory"};
    if (!S_ISREG(st.st_mode)) return Error{Errc::io, "cubin path '" + path + "' is not a regular file"};
    return Ok{};
}

Result<FileIdentity> stat_cubin(const std::string &path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int err = errno;
        return io_error("cannot open cubin", path, err);
    }
    if (auto file = check_cubin_file(st, path); !file) return file.error();
    return FileIdentity::from_stat(st);
}

Status check_image_extent(std::string_view image, const std::string &label) {
    if (image.size() < sizeof(Elf64_Ehdr)) {
        return not_elf(image, label, "it is " + std::to_string(image.size()) + " bytes, shorter than an ELF header");
    }
    if (std::memcmp(image.data(), ELFMAG, SELFMAG) != 0) return not_elf(image, label, "not an ELF file (no ELF magic)");
    if (static_cast<unsigned char>(image[EI_CLASS]) != ELFCLASS64 ||
        static_cast<unsigned char>(image[EI_DATA]) != ELFDATA2LSB) {
        return bad(label, "not a 64-bit little-endian ELF file");
    }
    Elf64_Ehdr ehdr;
    std::memcpy(&ehdr, image.data(), sizeof ehdr);
    const std::uint64_t size = image.size();
    if (ehdr.e_shnum == 0) return Ok{};
    if (ehdr.e_shentsize != sizeof(Elf64_Shdr)) {
        return bad(label, "section header size is " + std::to_string(ehdr.e_shentsize) + ", expected " +
                              std::to_string(sizeof(Elf64_Shdr)));
    }
    const std::uint64_t table_bytes = std::uint64_t{ehdr.e_shnum} * sizeof(Elf64_Shdr);
    if (ehdr.e_shoff > size || table_bytes > size - ehdr.e_shoff) {
        return bad(label, "the section header table lies outside the file");
    }
    for (unsigned i = 0; i < ehdr.e_shnum; ++i) {
        Elf64_Shdr shdr;
        std::memcpy(&shdr, image.data() + ehdr.e_shoff + std::uint64_t{i} * sizeof(Elf64_Shdr), sizeof shdr);
        if (shdr.sh_type == SHT_NOBITS || shdr.sh_type == SHT_NULL) continue;
        if (shdr.sh_offset > size || shdr.sh_size > size - shdr.sh_offset) {
            return bad(label, "section " + std::to_string(i) + " lies outside the file");
        }
    }
    if (ehdr.e_phnum != 0) {
        const std::uint64_t ph_bytes = std::uint64_t{ehdr.e_phnum} * ehdr.e_phentsize;
        if (ehdr.e_phoff > size || ph_bytes > size - ehdr.e_phoff) {
            return bad(label, "the program header table lies outside the file");
        }
    }
    return Ok{};
}

unsigned cubin_sm_version(std::string_view image) {
    if (image.size() < sizeof(Elf64_Ehdr)) return 0;
    Elf64_Ehdr ehdr;
    std::memcpy(&ehdr, image.data(), sizeof ehdr);
    // CUDA ELF ABI version 8 (what CUDA 13's compilers write) keeps the SM in bits 8-15 of
    // e_flags; earlier versions keep it in bits 0-7.
    const unsigned abi = ehdr.e_ident[EI_ABIVERSION];
    return abi >= 8 ? (ehdr.e_flags >> 8) & 0xffu : ehdr.e_flags & 0xffu;
}

namespace {

// Refuses an ELF file that is not a cubin: not ELF64 little-endian, or not for EM_CUDA.
Status check_elf_header(Elf *elf, const std::string &label) {
    if (elf_kind(elf) != ELF_K_ELF) {
        std::size_t size = 0;
        const char *raw = elf_rawfile(elf, &size);
        return not_elf(raw ? std::string_view(raw, size) : std::string_view{}, label, "not an ELF file (no ELF magic)");
    }
    GElf_Ehdr ehdr;
    if (!gelf_getehdr(elf, &ehdr)) return elf_error(label, "cannot read the ELF header");
    // A cubin is always ELF64 little-endian; the fast loop of add_functions relies on that.
    if (ehdr.e_ident[EI_CLASS] != ELFCLASS64 || ehdr.e_ident[EI_DATA] != ELFDATA2LSB) {
        return bad(label, "not a 64-bit little-endian ELF file");
    }
    if (ehdr.e_machine != EM_CUDA) {
        return bad(label, "ELF machine is " + std::to_string(ehdr.e_machine) + ", not EM_CUDA (190)");
    }
    return Ok{};
}

// The one SHT_SYMTAB section (its header into `symtab_hdr`), its entries checked to be Elf64_Sym.
Result<Elf_Scn *> find_symtab(Elf *elf, const std::string &label, GElf_Shdr &symtab_hdr) {
    // The ELF spec allows one SHT_SYMTAB per object file. A crafted cubin with two could show
    // the driver one kernel and libkjit another: refused rather than read from the first.
    Elf_Scn *symtab = nullptr;
    for (Elf_Scn *scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
        GElf_Shdr hdr;
        if (!gelf_getshdr(scn, &hdr)) return elf_error(label, "cannot read a section header");
        if (hdr.sh_type == SHT_SYMTAB) {
            if (symtab) return bad(label, "it has more than one SHT_SYMTAB section (the ELF spec allows one)");
            symtab = scn;
            symtab_hdr = hdr;
        }
    }
    if (const int err = elf_errno(); err != 0) {
        return bad(label, std::string("cannot read the section headers (libelf: ") + elf_errmsg(err) + ")");
    }
    if (!symtab) return bad(label, "it has no .symtab section");
    if (symtab_hdr.sh_entsize != sizeof(Elf64_Sym)) {
        return bad(label, ".symtab entry size is " + std::to_string(symtab_hdr.sh_entsize) + ", expected " +
                              std::to_string(sizeof(Elf64_Sym)));
    }
    return symtab;
}

// The data of .symtab, checked to be a whole number of symbols.
Result<Elf_Data *> symbol_data(Elf_Scn *symtab, const std::string &label) {
    Elf_Data *sym_data = elf_getdata(symtab, nullptr);
    if (!sym_data) return elf_error(label, "cannot read .symtab");
    if (sym_data->d_type != ELF_T_SYM || (sym_data->d_size && !sym_data->d_buf) ||
        sym_data->d_size % sizeof(Elf64_Sym) != 0) {
        return bad(label, ".symtab has a malformed size or type");
    }
    return sym_data;
}

// The string table .symtab links to, as `strings` and `strings_size` (0 when it holds no data).
Status string_table(Elf *elf, const GElf_Shdr &symtab_hdr, const std::string &label, const char *&strings,
                    std::size_t &strings_size) {
    Elf_Scn *strtab = elf_getscn(elf, symtab_hdr.sh_link);
    if (!strtab) return elf_error(label, ".symtab links to a missing string table");
    GElf_Shdr strtab_hdr;
    if (!gelf_getshdr(strtab, &strtab_hdr)) return elf_error(label, "cannot read the string table header");
    if (strtab_hdr.sh_type != SHT_STRTAB) return bad(label, ".symtab links to a section that is not a string table");
    Elf_Data *str_data = elf_getdata(strtab, nullptr);
    if (!str_data) return elf_error(label, "cannot read the string table");
    strings = static_cast<const char *>(str_data->d_buf);
    strings_size = strings ? str_data->d_size : 0;
    return Ok{};
}

// Adds to `functions` each named function symbol among the `count` symbols `syms`, whose names
// lie in `strings`.
Status add_functions(const Elf64_Sym *syms, std::size_t count, const char *strings, std::size_t strings_size,
                     const std::string &label, std::vector<FunctionSymbol> &functions) {
    // Symbol 0 (STN_UNDEF) is reserved and all zeros by the ELF spec. One that is not (a named
    // function, say) is refused, not skipped: another reader might take it.
    if (count > 0) {
        static const Elf64_Sym kNullSymbol{};
        if (std::memcmp(&syms[0], &kNullSymbol, sizeof kNullSymbol) != 0) {
            return bad(label, "symbol 0 (the reserved STN_UNDEF entry) is not all zeros");
        }
    }
    for (std::size_t i = 1; i < count; ++i) {
        const Elf64_Sym &sym = syms[i];
        if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC) continue;
        const std::size_t off = sym.st_name;
        if (off >= strings_size) {
            return bad(label, "symbol " + std::to_string(i) + " has a name offset outside the string table");
        }
        const void *nul = std::memchr(strings + off, '\0', strings_size - off);
        if (!nul) return bad(label, "symbol " + std::to_string(i) + " has an unterminated name");
        const std::size_t len = static_cast<std::size_t>(static_cast<const char *>(nul) - (strings + off));
        if (len == 0) continue;
        const unsigned bind = ELF64_ST_BIND(sym.st_info);
        functions.push_back(FunctionSymbol{std::string_view(strings + off, len), bind == STB_GLOBAL || bind == STB_WEAK,
                                           (sym.st_other & kStoCudaEntry) != 0});
    }
    return Ok{};
}

}  // namespace

Result<SymbolTable> SymbolTable::parse(std::unique_ptr<Handle> handle, const std::string &label) {
    Elf *elf = handle->elf;
    (void)elf_errno();  // clear any earlier error on this thread, so find_symtab's check is ours
    KJIT_TRY(check_elf_header(elf, label));
    GElf_Shdr symtab_hdr{};
    KJIT_TRY_ASSIGN(auto symtab, find_symtab(elf, label, symtab_hdr));
    KJIT_TRY_ASSIGN(auto sym_data, symbol_data(symtab, label));
    const char *strings = nullptr;
    std::size_t strings_size = 0;
    KJIT_TRY(string_table(elf, symtab_hdr, label, strings, strings_size));

    SymbolTable table(std::move(handle));
    const auto *syms = static_cast<const Elf64_Sym *>((sym_data)->d_buf);
    const std::size_t count = (sym_data)->d_size / sizeof(Elf64_Sym);
    table.functions_.reserve(count / 2);
    KJIT_TRY(add_functions(syms, count, strings, strings_size, label, table.functions_));
    return table;
}

namespace {

// pread of exactly `size` bytes at `offset`; false on an error or a short read.
bool read_exactly(int fd, char *into, std::size_t size, std::uint64_t offset) {
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(fd, into + done, size - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<std::size_t>(n);
    }
    return true;
}

// What open_symbols reads of a cubin: .symtab (into the thread's buffer, reused: a big cubin's
// is hundreds of KB, faulted in anew at every scan otherwise) and its string table (left
// uninitialized before the read: nothing zeroed in vain).
struct SymbolParts {
    const Elf64_Sym *symbols = nullptr;
    std::size_t symbol_count = 0;
    std::unique_ptr<char[]> strings;
    std::size_t strings_size = 0;
};

// The section headers of `fd`, `count` from `offset`, looked through a chunk at a time (a
// 3,000-kernel cubin has 15,000 of them: 960 KB never held at once): the index of its one
// SHT_SYMTAB into `symtab` and its header into `header`; false on a read error or a second one.
bool find_symtab_header(int fd, std::uint64_t offset, std::size_t count, std::size_t &symtab, Elf64_Shdr &header) {
    constexpr std::size_t kChunk = 256;
    Elf64_Shdr chunk[kChunk];
    symtab = 0;
    for (std::size_t first = 0; first < count; first += kChunk) {
        const std::size_t n = std::min(kChunk, count - first);
        if (!read_exactly(fd, reinterpret_cast<char *>(chunk), n * sizeof(Elf64_Shdr),
                          offset + first * sizeof(Elf64_Shdr))) {
            return false;
        }
        for (std::size_t i = 0; i < n; ++i) {
            if (chunk[i].sh_type != SHT_SYMTAB) continue;
            if (symtab != 0 || first + i == 0) return false;  // two, or section 0
            symtab = first + i;
            header = chunk[i];
        }
    }
    return symtab != 0;
}

// The checks parse() makes through libelf (check_elf_header, find_symtab, symbol_data,
// string_table), made on the `file_size`-byte cubin `fd` by reading its ELF header, its section
// headers and those two sections alone; nothing where one fails or the layout is not the
// plain one (extended section numbering, a section outside the file): open_file then reads it
// whole, and says what is wrong in its words. libelf is not used here: it sets up every
// section of the file (a 3,000-kernel cubin has 15,000), which costs more than reading them.
std::optional<SymbolParts> read_symbol_parts(int fd, std::uint64_t file_size) {
    Elf64_Ehdr ehdr;
    if (file_size < sizeof ehdr || !read_exactly(fd, reinterpret_cast<char *>(&ehdr), sizeof ehdr, 0)) return {};
    if (std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0 || ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
        ehdr.e_ident[EI_DATA] != ELFDATA2LSB || ehdr.e_ident[EI_VERSION] != EV_CURRENT || ehdr.e_machine != EM_CUDA ||
        ehdr.e_shentsize != sizeof(Elf64_Shdr) || ehdr.e_shnum == 0 || ehdr.e_shnum >= SHN_LORESERVE ||
        ehdr.e_shstrndx == SHN_XINDEX) {
        return {};
    }
    const std::uint64_t table_bytes = std::uint64_t{ehdr.e_shnum} * sizeof(Elf64_Shdr);
    if (ehdr.e_shoff > file_size || table_bytes > file_size - ehdr.e_shoff) return {};
    std::size_t symtab = 0;
    Elf64_Shdr syms{};
    if (!find_symtab_header(fd, ehdr.e_shoff, ehdr.e_shnum, symtab, syms)) return {};
    if (syms.sh_entsize != sizeof(Elf64_Sym) || syms.sh_size % sizeof(Elf64_Sym) != 0 || syms.sh_link == 0 ||
        syms.sh_link >= ehdr.e_shnum || syms.sh_link == symtab) {
        return {};
    }
    Elf64_Shdr strs{};
    if (!read_exactly(fd, reinterpret_cast<char *>(&strs), sizeof strs,
                      ehdr.e_shoff + std::uint64_t{syms.sh_link} * sizeof(Elf64_Shdr)) ||
        strs.sh_type != SHT_STRTAB) {
        return {};
    }
    for (const Elf64_Shdr *s : {&syms, &strs}) {
        if (s->sh_offset > file_size || s->sh_size > file_size - s->sh_offset) return {};
    }
    SymbolParts parts;
    parts.symbol_count = static_cast<std::size_t>(syms.sh_size / sizeof(Elf64_Sym));
    parts.strings_size = static_cast<std::size_t>(strs.sh_size);
    thread_local std::vector<Elf64_Sym> symbols;
    if (symbols.size() < parts.symbol_count) symbols.resize(parts.symbol_count);
    parts.symbols = symbols.data();
    parts.strings.reset(new char[parts.strings_size + 1]);
    if (!read_exactly(fd, reinterpret_cast<char *>(symbols.data()), syms.sh_size, syms.sh_offset) ||
        !read_exactly(fd, parts.strings.get(), parts.strings_size, strs.sh_offset)) {
        return {};
    }
    return parts;
}

}  // namespace

Result<SymbolTable> SymbolTable::open_symbols(const std::string &path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    struct stat before {};
    if (!fd.valid() || ::fstat(fd.get(), &before) != 0 || !S_ISREG(before.st_mode) || before.st_size <= 0 ||
        static_cast<std::uint64_t>(before.st_size) > kMaxCubinBytes) {
        return open_file(path);  // its error, in its words
    }
    auto parts = read_symbol_parts(fd.get(), static_cast<std::uint64_t>(before.st_size));
    struct stat after {};
    if (!parts || ::fstat(fd.get(), &after) != 0 ||
        !(FileIdentity::from_stat(after) == FileIdentity::from_stat(before))) {
        return open_file(path);
    }
    auto handle = std::make_unique<Handle>();
    handle->parts = std::move(parts->strings);  // the names are views into it
    SymbolTable table(std::move(handle));
    table.functions_.reserve(parts->symbol_count / 2);
    if (auto st = add_functions(parts->symbols, parts->symbol_count, table.handle_->parts.get(), parts->strings_size,
                                path, table.functions_);
        !st) {
        return open_file(path);  // a malformed table: said as open_file says it
    }
    table.identity_ = FileIdentity::from_stat(before);
    table.whole_image_ = false;
    return table;
}

}  // namespace kjit::cubin
