// Crafted cubins for the tests of hostile ELF input: real cubins (from NVRTC) edited the way an
// attacker would, keeping everything else valid so that only the edit is under test.
// Header-only; no GoogleTest.
#pragma once

#include <elf.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kjit_test::crafted {

inline Elf64_Ehdr header_of(const std::string &image) {
    if (image.size() < sizeof(Elf64_Ehdr)) throw std::runtime_error("crafted: image shorter than an ELF header");
    Elf64_Ehdr ehdr;
    std::memcpy(&ehdr, image.data(), sizeof ehdr);
    return ehdr;
}

inline Elf64_Shdr section(const std::string &image, std::size_t index) {
    const Elf64_Ehdr ehdr = header_of(image);
    Elf64_Shdr shdr;
    std::memcpy(&shdr, image.data() + ehdr.e_shoff + index * sizeof(Elf64_Shdr), sizeof shdr);
    return shdr;
}

inline void put_section(std::string &image, std::size_t index, const Elf64_Shdr &shdr) {
    const Elf64_Ehdr ehdr = header_of(image);
    std::memcpy(&image[ehdr.e_shoff + index * sizeof(Elf64_Shdr)], &shdr, sizeof shdr);
}

// The index of the first section of `type`; throws when there is none.
inline std::size_t find_section(const std::string &image, Elf64_Word type) {
    const Elf64_Ehdr ehdr = header_of(image);
    for (std::size_t i = 0; i < ehdr.e_shnum; ++i) {
        if (section(image, i).sh_type == type) return i;
    }
    throw std::runtime_error("crafted: no section of the asked type");
}

inline void pad_to_8(std::string &image) {
    while (image.size() % 8 != 0) image.push_back('\0');
}

// The image with its section header table moved to the end and one more entry appended: a
// copy of section `index` (e.g. a second SHT_SYMTAB over the same symbols).
inline std::string with_section_copied(const std::string &image, std::size_t index) {
    Elf64_Ehdr ehdr = header_of(image);
    std::string out = image;
    pad_to_8(out);
    const std::size_t table = out.size();
    out.append(image, ehdr.e_shoff, std::size_t{ehdr.e_shnum} * sizeof(Elf64_Shdr));
    Elf64_Shdr copy = section(image, index);
    out.append(reinterpret_cast<const char *>(&copy), sizeof copy);
    ehdr.e_shoff = table;
    ehdr.e_shnum = static_cast<Elf64_Half>(ehdr.e_shnum + 1);
    std::memcpy(&out[0], &ehdr, sizeof ehdr);
    return out;
}

// Symbol `i` of the (first) .symtab.
inline Elf64_Sym symbol(const std::string &image, std::size_t i) {
    const Elf64_Shdr symtab = section(image, find_section(image, SHT_SYMTAB));
    Elf64_Sym sym;
    std::memcpy(&sym, image.data() + symtab.sh_offset + i * sizeof(Elf64_Sym), sizeof sym);
    return sym;
}

inline void put_symbol(std::string &image, std::size_t i, const Elf64_Sym &sym) {
    const Elf64_Shdr symtab = section(image, find_section(image, SHT_SYMTAB));
    std::memcpy(&image[symtab.sh_offset + i * sizeof(Elf64_Sym)], &sym, sizeof sym);
}

inline std::size_t symbol_count(const std::string &image) {
    return section(image, find_section(image, SHT_SYMTAB)).sh_size / sizeof(Elf64_Sym);
}

// The name of symbol `sym` in the .symtab's string table.
inline std::string_view symbol_name(const std::string &image, const Elf64_Sym &sym) {
    const Elf64_Shdr symtab = section(image, find_section(image, SHT_SYMTAB));
    const Elf64_Shdr strtab = section(image, symtab.sh_link);
    return std::string_view(image.data() + strtab.sh_offset + sym.st_name);
}

// The index of the symbol named `name`; throws when there is none.
inline std::size_t find_symbol(const std::string &image, std::string_view name) {
    for (std::size_t i = 0; i < symbol_count(image); ++i) {
        if (symbol_name(image, symbol(image, i)) == name) return i;
    }
    throw std::runtime_error("crafted: no symbol of that name");
}

// The image with every symbol named `old_name` renamed to `new_name` (any bytes but NUL): the
// .symtab's string table is copied to the end of the file with the new name appended.
inline std::string with_symbol_renamed(const std::string &image, std::string_view old_name,
                                       const std::string &new_name) {
    std::string out = image;
    const std::size_t symtab_index = find_section(out, SHT_SYMTAB);
    const Elf64_Shdr symtab = section(out, symtab_index);
    Elf64_Shdr strtab = section(out, symtab.sh_link);
    const std::string strings = out.substr(strtab.sh_offset, strtab.sh_size);
    std::vector<std::size_t> renamed;
    for (std::size_t i = 0; i < symbol_count(out); ++i) {
        if (symbol_name(out, symbol(out, i)) == old_name) renamed.push_back(i);
    }
    if (renamed.empty()) throw std::runtime_error("crafted: no symbol to rename");
    pad_to_8(out);
    strtab.sh_offset = out.size();
    out += strings;
    const std::size_t new_offset = strings.size();
    out += new_name;
    out.push_back('\0');
    strtab.sh_size = strings.size() + new_name.size() + 1;
    put_section(out, symtab.sh_link, strtab);
    for (std::size_t i : renamed) {
        Elf64_Sym sym = symbol(out, i);
        sym.st_name = static_cast<Elf64_Word>(new_offset);
        put_symbol(out, i, sym);
    }
    return out;
}

}  // namespace kjit_test::crafted
