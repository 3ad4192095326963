#include "remote/remote_entry.hpp"

#include "util/hashing.hpp"
#include "cubin/name_matcher.hpp"
#include "resolve/name_resolver.hpp"
#include "cubin/symbol_scanner.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <ctime>

namespace kjit::remote {

namespace {

constexpr std::string_view kMagic = "KJITRMT\n";
constexpr std::size_t kChecksumHex = 32;

void put_u32(std::string &out, std::uint32_t v) {
    for (unsigned i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_field(std::string &out, std::string_view field) {
    put_u32(out, static_cast<std::uint32_t>(field.size()));
    out.append(field);
}

// Reads fields from a value, refusing any length that runs past its end.
class Reader {
public:
    explicit Reader(std::string_view bytes) : bytes_(bytes) {}
    bool u32(std::uint32_t &v) {
        if (bytes_.size() - pos_ < 4) return false;
        v = 0;
        for (std::size_t i = 0; i < 4; ++i) {
            v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i);
        }
        pos_ += 4;
        return true;
    }
    bool field(std::string_view &out) {
        std::uint32_t n = 0;
        if (!u32(n) || bytes_.size() - pos_ < n) return false;
        out = bytes_.substr(pos_, n);
        pos_ += n;
        return true;
    }
    std::size_t position() const { return pos_; }

private:
    std::string_view bytes_;
    std::size_t pos_ = 0;
};

}  // namespace

std::string host_name() {
    // Asked each time (a miss's lease or put, never a hit): no once-guard that a thread of a
    // forking parent could hold (fork_guard.hpp), and a renamed host says its new name.
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "unknown";
    return host;
}

std::string encode(const store::cache_entry::Manifest &manifest, std::string_view cubin, int format, const std::string &host) {
    const std::string manifest_text = store::cache_entry::format_manifest(manifest);
    std::string out;
    out.reserve(cubin.size() + manifest_text.size() + 256);
    out.append(kMagic);
    put_u32(out, kEnvelopeVersion);
    put_field(out, manifest.key);
    put_field(out, std::to_string(format));
    put_field(out, manifest.nvrtc);
    put_field(out, manifest.arch);
    put_field(out, host);
    put_field(out, std::to_string(static_cast<long long>(std::time(nullptr))));
    put_field(out, manifest_text);
    put_field(out, cubin);
    out += hash128_hex(out);
    return out;
}

Result<Entry> decode(std::string_view value, const Expected &expected, const std::string &where) {
    auto bad = [&](const std::string &what) { return Error{Errc::bad_cubin, "remote entry " + where + ": " + what}; };
    if (value.size() < kMagic.size() + 4 + kChecksumHex) return bad("cut short (" + std::to_string(value.size()) + " bytes)");
    if (value.substr(0, kMagic.size()) != kMagic) return bad("not a libkjit entry (no magic)");
    const std::string_view body = value.substr(0, value.size() - kChecksumHex);
    // The checksum first: a value cut short or with a flipped byte anywhere fails here, whatever
    // its lengths now say.
    if (hash128_hex(body) != value.substr(body.size())) return bad("checksum mismatch (damaged or cut short)");
    Reader r(body.substr(kMagic.size()));
    std::uint32_t version = 0;
    if (!r.u32(version)) return bad("cut short");
    if (version != kEnvelopeVersion) {
        return bad("envelope version " + std::to_string(version) + ", this libkjit reads " + std::to_string(kEnvelopeVersion));
    }
    std::string_view key, format, nvrtc, arch, host, created, manifest_text, cubin;
    if (!r.field(key) || !r.field(format) || !r.field(nvrtc) || !r.field(arch) || !r.field(host) || !r.field(created) ||
        !r.field(manifest_text) || !r.field(cubin)) {
        return bad("a field runs past the end");
    }
    if (r.position() != body.size() - kMagic.size()) return bad("bytes after the last field");
    if (key != expected.key) return bad("made for key " + std::string(key) + " (a value copied under another key)");
    if (format != std::to_string(expected.format)) return bad("cache format " + std::string(format));
    if (nvrtc != expected.nvrtc_identity) return bad("made by NVRTC " + std::string(nvrtc));
    if (arch != expected.arch) return bad("made for " + std::string(arch));
    auto manifest = store::cache_entry::parse_manifest(manifest_text, where + " (manifest)");
    if (!manifest) return bad(manifest.error().message);
    const store::cache_entry::Manifest &m = *manifest;
    if (m.key != expected.key || m.arch != expected.arch || m.nvrtc != expected.nvrtc_identity ||
        m.keyword != expected.keyword || m.name_expression != expected.name_expression) {
        return bad("its manifest does not describe this request");
    }
    if (cubin.size() != m.cubin_bytes || hash128_hex(cubin) != m.cubin_hash) {
        return bad("the cubin is not the one its manifest records");
    }
    if (cubin.size() < 4 || cubin.substr(0, 4) != std::string_view("\x7f" "ELF", 4)) return bad("the cubin is not an ELF file");
    // The name, as a fresh compile would choose it (the lowered name is NVRTC's: it must be a
    // function of this cubin and pass the keyword rule).
    const std::string what = "remote entry " + where;
    if (m.name_expression) {
        if (!cubin::name_matcher::matches(m.name, m.keyword)) return bad("name '" + m.name + "' does not match its keyword");
        auto table = cubin::SymbolTable::from_view(cubin, what);
        if (!table) return bad(table.error().message);
        const auto &fns = table->functions();
        if (std::none_of(fns.begin(), fns.end(), [&](const cubin::FunctionSymbol &f) { return f.name == m.name; })) {
            return bad("name '" + m.name + "' is not a function of its cubin");
        }
    } else {
        auto name = resolve::name_for_new_cubin(cubin, what, m.keyword, std::nullopt, std::string());
        if (!name) return bad(name.error().message);
        if (*name != m.name) return bad("names '" + m.name + "' where the keyword rule chooses '" + *name + "'");
    }
    Entry e;
    e.manifest = std::move(*manifest);
    e.cubin = std::string(cubin);
    e.producer = std::string(host);
    std::from_chars(created.data(), created.data() + created.size(), e.created);
    return e;
}

}  // namespace kjit::remote
