#include "cubin/symbol_scanner.hpp"

#include "crafted_elf.hpp"
#include "test_support.hpp"

#include <elf.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

using kjit::Errc;
using kjit::cubin::SymbolTable;
using namespace kjit_test;

namespace {

std::set<std::string> names_of(const SymbolTable &t) {
    std::set<std::string> out;
    for (const auto &f : t.functions()) out.emplace(f.name);
    return out;
}

// The ELF64 section header table of a cubin, for targeted damage.
Elf64_Shdr *section_headers(std::string &image, Elf64_Half *count) {
    auto *ehdr = reinterpret_cast<Elf64_Ehdr *>(image.data());
    *count = ehdr->e_shnum;
    return reinterpret_cast<Elf64_Shdr *>(image.data() + ehdr->e_shoff);
}

}  // namespace

TEST(SymbolScanner, ReadsFunctionSymbolsWithEntryFlags) {
    TempDir dir;
    write_file(dir.file("k.cubin"), cubin_for(sources::kDeviceFunction, {"-rdc=true"}));
    auto t = SymbolTable::open_file(dir.file("k.cubin"));
    ASSERT_TRUE(t.ok()) << t.error().message;
    bool saw_kernel = false, saw_device = false;
    for (const auto &f : t->functions()) {
        if (f.name == "_Z5scalePf") {
            saw_kernel = true;
            EXPECT_TRUE(f.is_entry);
            EXPECT_TRUE(f.is_global);
        }
        if (f.name == "_Z11scale_valuef") {
            saw_device = true;
            EXPECT_FALSE(f.is_entry);
        }
    }
    EXPECT_TRUE(saw_kernel);
    EXPECT_TRUE(saw_device);
    // Names are views into the read-only mapping: the string table is not copied.
    for (const auto &f : t->functions()) {
        EXPECT_GE(f.name.data(), t->image().data());
        EXPECT_LE(f.name.data() + f.name.size(), t->image().data() + t->image().size());
    }
    EXPECT_EQ(t->image(), cubin_for(sources::kDeviceFunction, {"-rdc=true"}));
    struct stat st {};
    ASSERT_EQ(::stat(dir.file("k.cubin").c_str(), &st), 0);
    EXPECT_EQ(t->identity().size, static_cast<std::uint64_t>(st.st_size));
    EXPECT_EQ(t->identity().ino, st.st_ino);
}

TEST(SymbolScanner, FileAndBytesAgree) {
    TempDir dir;
    const std::string &cubin = cubin_for(sources::kTemplateSeveral);
    write_file(dir.file("t.cubin"), cubin);
    auto from_file = SymbolTable::open_file(dir.file("t.cubin"));
    auto from_bytes = SymbolTable::from_bytes(cubin, "bytes");
    ASSERT_TRUE(from_file.ok() && from_bytes.ok());
    EXPECT_EQ(names_of(*from_file), names_of(*from_bytes));
    EXPECT_EQ(names_of(*from_file),
              (std::set<std::string>{"_Z4tmplILi1EEvPf", "_Z4tmplILi2EEvPf", "_Z4tmplILi3EEvPf"}));
}

TEST(SymbolScanner, ManyInstantiations) {
    std::string src = "template <int N> __global__ void many(float *p) { p[threadIdx.x] = N; }\n";
    for (int i = 0; i < 400; ++i) src += "template __global__ void many<" + std::to_string(i) + ">(float *);\n";
    auto t = SymbolTable::from_bytes(cubin_for(src), "many");
    ASSERT_TRUE(t.ok()) << t.error().message;
    const auto names = names_of(*t);
    EXPECT_EQ(names.size(), 400u);
    EXPECT_TRUE(names.count("_Z4manyILi399EEvPf"));
}

TEST(SymbolScanner, MissingFileIsIoError) {
    TempDir dir;
    auto t = SymbolTable::open_file(dir.file("absent.cubin"));
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, Errc::io);
    EXPECT_NE(t.error().message.find(dir.file("absent.cubin")), std::string::npos);
    EXPECT_NE(t.error().message.find("No such file"), std::string::npos);
}

TEST(SymbolScanner, DirectoryIsIoError) {
    TempDir dir;
    auto t = SymbolTable::open_file(dir.path());
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, Errc::io);
    EXPECT_NE(t.error().message.find("directory"), std::string::npos);
}

TEST(SymbolScanner, EmptyAndNonElfAreBadCubin) {
    TempDir dir;
    write_file(dir.file("empty.cubin"), "");
    write_file(dir.file("text.cubin"), "this is not an ELF file at all\n");
    for (const char *name : {"empty.cubin", "text.cubin"}) {
        auto t = SymbolTable::open_file(dir.file(name));
        ASSERT_FALSE(t.ok()) << name;
        EXPECT_EQ(t.error().code, Errc::bad_cubin);
        EXPECT_NE(t.error().message.find(dir.file(name)), std::string::npos) << t.error().message;
    }
}

TEST(SymbolScanner, HostElfIsRejected) {
    // /proc/self/exe is an x86-64 ELF, not EM_CUDA.
    auto t = SymbolTable::from_bytes(read_file("/proc/self/exe"), "host-elf");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, Errc::bad_cubin);
    EXPECT_NE(t.error().message.find("EM_CUDA"), std::string::npos) << t.error().message;
}

TEST(SymbolScanner, TruncatedAtManyLengthsNeverCrashes) {
    TempDir dir;
    const std::string &cubin = cubin_for(sources::kPrefixCollision);
    std::size_t failures = 0;
    for (std::size_t len = 1; len < cubin.size(); len += (len < 256 ? 1 : 37)) {
        const std::string path = dir.file("trunc.cubin");
        write_file(path, cubin.substr(0, len));
        auto t = SymbolTable::open_file(path);
        if (!t.ok()) {
            ++failures;
            EXPECT_EQ(t.error().code, Errc::bad_cubin) << "length " << len << ": " << t.error().message;
            EXPECT_NE(t.error().message.find(path), std::string::npos);
        } else {
            // Whatever survived a cut must still be names inside the file.
            for (const auto &f : t->functions()) {
                EXPECT_GE(f.name.data(), t->image().data());
                EXPECT_LE(f.name.data() + f.name.size(), t->image().data() + t->image().size());
            }
        }
        auto b = SymbolTable::from_bytes(cubin.substr(0, len), "trunc");
        EXPECT_EQ(b.ok(), t.ok()) << "length " << len;
    }
    EXPECT_GT(failures, 100u);
}

TEST(SymbolScanner, NoSymtabIsBadCubin) {
    std::string image = cubin_for(sources::kPlain);
    Elf64_Half count = 0;
    Elf64_Shdr *sh = section_headers(image, &count);
    for (Elf64_Half i = 0; i < count; ++i) {
        if (sh[i].sh_type == SHT_SYMTAB) sh[i].sh_type = SHT_PROGBITS;
    }
    auto t = SymbolTable::from_bytes(image, "stripped.cubin");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, Errc::bad_cubin);
    EXPECT_NE(t.error().message.find("no .symtab"), std::string::npos) << t.error().message;
    EXPECT_NE(t.error().message.find("stripped.cubin"), std::string::npos);
}

// The ELF spec allows one SHT_SYMTAB per object file. With two, the driver and libkjit could
// each read another: refused, not resolved from the first.
TEST(SymbolScanner, SecondSymtabIsBadCubin) {
    const std::string &cubin = cubin_for(sources::kPlain);
    const std::string image = crafted::with_section_copied(cubin, crafted::find_section(cubin, SHT_SYMTAB));
    auto t = SymbolTable::from_bytes(image, "two-symtabs.cubin");
    ASSERT_FALSE(t.ok()) << "a second .symtab was ignored";
    EXPECT_EQ(t.error().code, Errc::bad_cubin);
    EXPECT_NE(t.error().message.find("two-symtabs.cubin"), std::string::npos) << t.error().message;
    EXPECT_NE(t.error().message.find("SHT_SYMTAB"), std::string::npos) << t.error().message;
    // The untouched cubin, with its table moved the same way, still scans: only the copy counts.
    const std::string moved = crafted::with_section_copied(cubin, 0);  // a second SHT_NULL header
    EXPECT_TRUE(SymbolTable::from_bytes(moved, "moved.cubin").ok());
}

// The ELF spec reserves symbol 0 (STN_UNDEF) and makes it all zeros. A named function there is
// not skipped quietly (some reader could take it): the cubin is refused.
TEST(SymbolScanner, NonZeroReservedSymbolIsBadCubin) {
    const std::string &cubin = cubin_for(sources::kPlain);
    const Elf64_Sym zero = crafted::symbol(cubin, 0);
    const unsigned char *bytes = reinterpret_cast<const unsigned char *>(&zero);
    ASSERT_TRUE(std::all_of(bytes, bytes + sizeof zero, [](unsigned char b) { return b == 0; }))
        << "NVRTC's own cubin has a non-zero symbol 0";
    std::string image = cubin;
    crafted::put_symbol(image, 0, crafted::symbol(cubin, crafted::find_symbol(cubin, "_Z12plain_kernelPf")));
    auto t = SymbolTable::from_bytes(image, "symbol0.cubin");
    ASSERT_FALSE(t.ok()) << "a named STT_FUNC at index 0 was skipped";
    EXPECT_EQ(t.error().code, Errc::bad_cubin);
    EXPECT_NE(t.error().message.find("symbol 0"), std::string::npos) << t.error().message;
}

TEST(SymbolScanner, NameOffsetOutsideStringTable) {
    std::string image = cubin_for(sources::kPlain);
    Elf64_Half count = 0;
    Elf64_Shdr *sh = section_headers(image, &count);
    for (Elf64_Half i = 0; i < count; ++i) {
        if (sh[i].sh_type != SHT_SYMTAB) continue;
        auto *syms = reinterpret_cast<Elf64_Sym *>(image.data() + sh[i].sh_offset);
        for (std::size_t s = 1; s < sh[i].sh_size / sizeof(Elf64_Sym); ++s) {
            if (ELF64_ST_TYPE(syms[s].st_info) == STT_FUNC) syms[s].st_name = 0x7fffffff;
        }
    }
    auto t = SymbolTable::from_bytes(image, "bad-names.cubin");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, Errc::bad_cubin);
    EXPECT_NE(t.error().message.find("outside the string table"), std::string::npos) << t.error().message;
}

TEST(SymbolScanner, SectionPastEndOfFile) {
    std::string image = cubin_for(sources::kPlain);
    Elf64_Half count = 0;
    Elf64_Shdr *sh = section_headers(image, &count);
    for (Elf64_Half i = 0; i < count; ++i) {
        if (sh[i].sh_type == SHT_SYMTAB) sh[i].sh_size = 1ull << 40;
    }
    auto t = SymbolTable::from_bytes(image, "huge-symtab.cubin");
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, Errc::bad_cubin);
}

TEST(SymbolScanner, RandomCorruptionGivesNameOrBadCubin) {
    const std::string &cubin = cubin_for(sources::kNamespaces);
    std::mt19937 rng(7);
    int rejected = 0;
    for (int round = 0; round < 3000; ++round) {
        std::string image = cubin;
        const int flips = 1 + static_cast<int>(rng() % 16);
        for (int i = 0; i < flips; ++i) image[rng() % image.size()] = static_cast<char>(rng());
        auto t = SymbolTable::from_bytes(image, "fuzzed");
        if (!t.ok()) {
            ++rejected;
            EXPECT_EQ(t.error().code, Errc::bad_cubin) << t.error().message;
            continue;
        }
        // libelf may copy a damaged section; names must still be whole strings from it.
        for (const auto &f : t->functions()) {
            ASSERT_LT(f.name.size(), image.size());
            ASSERT_EQ(std::memchr(f.name.data(), '\0', f.name.size()), nullptr);
        }
    }
    EXPECT_GT(rejected, 0);
}

// open_symbols reads the ELF header, the section headers, .symtab and its string table alone;
// it must give what open_file gives, whole or damaged: the same functions with the same flags,
// or a refusal with open_file's code and message, for real cubins, every truncation and random
// damage (the parts it does not read included: a section header pointing past the end).
TEST(SymbolScanner, OpenSymbolsGivesWhatOpenFileGives) {
    TempDir dir;
    const std::string path = dir.file("k.cubin");
    const auto agree = [&](const std::string &image, const std::string &what) {
        write_file(path, image);
        auto whole = SymbolTable::open_file(path);
        auto parts = SymbolTable::open_symbols(path);
        ASSERT_EQ(parts.ok(), whole.ok())
            << what << ": " << (whole.ok() ? parts.error().message : whole.error().message);
        if (!whole.ok()) {
            EXPECT_EQ(parts.error().code, whole.error().code) << what;
            EXPECT_EQ(parts.error().message, whole.error().message) << what;
            return;
        }
        ASSERT_EQ(parts->functions().size(), whole->functions().size()) << what;
        for (std::size_t i = 0; i < whole->functions().size(); ++i) {
            EXPECT_EQ(parts->functions()[i].name, whole->functions()[i].name) << what;
            EXPECT_EQ(parts->functions()[i].is_entry, whole->functions()[i].is_entry) << what;
            EXPECT_EQ(parts->functions()[i].is_global, whole->functions()[i].is_global) << what;
        }
        EXPECT_TRUE(parts->identity() == whole->identity()) << what;
    };
    std::string many = "template <int N> __global__ void many(float *p) { p[threadIdx.x] = N; }\n";
    for (int i = 0; i < 64; ++i) many += "template __global__ void many<" + std::to_string(i) + ">(float *);\n";
    const std::string &big = cubin_for(many);
    agree(big, "64 kernels");
    {
        write_file(path, big);
        auto parts = SymbolTable::open_symbols(path);
        ASSERT_TRUE(parts.ok()) << parts.error().message;
        EXPECT_FALSE(parts->whole_image());
        EXPECT_TRUE(parts->image().empty());
        EXPECT_TRUE(SymbolTable::open_file(path)->whole_image());
    }
    for (const char *source : {sources::kPlain, sources::kTemplateSeveral, sources::kNamespaces}) {
        agree(cubin_for(source), source);
    }
    const std::string &cubin = cubin_for(sources::kNamespaces);
    for (std::size_t len = 1; len < cubin.size(); len += (len < 256 ? 3 : 97)) {
        agree(cubin.substr(0, len), "cut at " + std::to_string(len));
    }
    agree(crafted::with_section_copied(cubin, crafted::find_section(cubin, SHT_SYMTAB)), "two symtabs");
    std::string far = cubin;
    Elf64_Half count = 0;
    Elf64_Shdr *sh = section_headers(far, &count);
    for (Elf64_Half i = 0; i < count; ++i) {
        if (sh[i].sh_type == SHT_PROGBITS) sh[i].sh_offset = 1ull << 40;  // code past the end
    }
    agree(far, "a code section past the end");
    std::mt19937 rng(11);
    for (int round = 0; round < 400; ++round) {
        std::string image = cubin;
        const int flips = 1 + static_cast<int>(rng() % 8);
        for (int i = 0; i < flips; ++i) image[rng() % image.size()] = static_cast<char>(rng());
        agree(image, "damage round " + std::to_string(round));
    }
    // Damage where open_symbols reads without libelf: the ELF header, the section headers, the
    // symbols and their names.
    const auto *ehdr = reinterpret_cast<const Elf64_Ehdr *>(cubin.data());
    const std::size_t symtab = crafted::find_section(cubin, SHT_SYMTAB);
    const auto *headers = reinterpret_cast<const Elf64_Shdr *>(cubin.data() + ehdr->e_shoff);
    const std::pair<std::size_t, std::size_t> regions[] = {
        {0, sizeof(Elf64_Ehdr)},
        {ehdr->e_shoff, std::size_t{ehdr->e_shnum} * sizeof(Elf64_Shdr)},
        {headers[symtab].sh_offset, headers[symtab].sh_size},
        {headers[headers[symtab].sh_link].sh_offset, headers[headers[symtab].sh_link].sh_size}};
    for (int round = 0; round < 1200; ++round) {
        std::string image = cubin;
        const auto &[at, size] = regions[static_cast<std::size_t>(round) % 4];
        const int flips = 1 + static_cast<int>(rng() % 3);
        for (int i = 0; i < flips; ++i) image[at + rng() % size] = static_cast<char>(rng());
        agree(image, "region " + std::to_string(round % 4) + " round " + std::to_string(round));
    }
    agree("", "empty");
    agree("not an ELF file\n", "text");
}
