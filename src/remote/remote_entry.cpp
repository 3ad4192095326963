#include "remote/remote_entry.hpp"

#include "cubin/name_matcher.hpp"
#include "cubin/symbol_scanner.hpp"
#include "resolve/name_resolver.hpp"
#include "util/hashing.hpp"

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

// The envelope's fields, as views into the value.
struct Fields {
    std::string_view key, format, nvrtc, arch, host, created, manifest_text, cubin;
};

// The envelope read into `f`: magic, checksum, version and fields, nothing after the last.
// What is wrong, or "" (no allocation when nothing is).
std::string read_envelope(std::string_view value, Fields &f) {
    if (value.size() < kMagic.size() + 4 + kChecksumHex)
        return "cut short (" + std::to_string(value.size()) + " bytes)";
    if (value.substr(0, kMagic.size()) != kMagic) return "not a libkjit entry (no magic)";
    const std::string_view body = value.substr(0, value.size() - kChecksumHex);
    // The checksum first: a value cut short or with a flipped byte anywhere fails here, whatever
    // its lengths now say.
    if (hash128_hex(body) != value.substr(body.size())) return "checksum mismatch (damaged or cut short)";
    Reader r(body.substr(kMagic.size()));
    std::uint32_t version = 0;
    if (!r.u32(version)) return "cut short";
    if (version != kEnvelopeVersion) {
        return "envelope version " + std::to_string(version) + ", this libkjit reads " +
               std::to_string(kEnvelopeVersion);
    }
    if (!r.field(f.key) || !r.field(f.format) || !r.field(f.nvrtc) || !r.field(f.arch) || !r.field(f.host) ||
        !r.field(f.created) || !r.field(f.manifest_text) || !r.field(f.cubin)) {
        return "a field runs past the end";
    }
    if (r.position() != body.size() - kMagic.size()) return "bytes after the last field";
    return {};
}

// Whether the envelope was made for this request (key, cache format, NVRTC, architecture):
// what differs, or "".
std::string header_mismatch(const Fields &f, const Expected &expected) {
    if (f.key != expected.key) return "made for key " + std::string(f.key) + " (a value copied under another key)";
    if (f.format != std::to_string(expected.format)) return "cache format " + std::string(f.format);
    if (f.nvrtc != expected.nvrtc_identity) return "made by NVRTC " + std::string(f.nvrtc);
    if (f.arch != expected.arch) return "made for " + std::string(f.arch);
    return {};
}

// Whether the manifest describes this request and the cubin beside it is the one it records
// (size and hash) and an ELF file: what is wrong, or "".
std::string manifest_mismatch(const store::cache_entry::Manifest &m, std::string_view cubin, const Expected &expected) {
    if (m.key != expected.key || m.arch != expected.arch || m.nvrtc != expected.nvrtc_identity ||
        m.keyword != expected.keyword || m.name_expression != expected.name_expression) {
        return "its manifest does not describe this request";
    }
    if (cubin.size() != m.cubin_bytes || hash128_hex(cubin) != m.cubin_hash) {
        return "the cubin is not the one its manifest records";
    }
    if (cubin.size() < 4 || cubin.substr(0, 4) != std::string_view("\x7f"
                                                                   "ELF",
                                                                   4))
        return "the cubin is not an ELF file";
    return {};
}

// Whether the manifest's name is the one a fresh compile would choose: why not, or "".
std::string name_mismatch(const store::cache_entry::Manifest &m, std::string_view cubin, const std::string &where) {
    return resolve::recorded_name_problem(m, cubin, "remote entry " + where);
}

}  // namespace

std::string host_name() {
    // Asked each time (a miss's lease or put, never a hit): no once-guard that a thread of a
    // forking parent could hold (fork_guard.hpp), and a renamed host says its new name.
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "unknown";
    return host;
}

std::string encode(const store::cache_entry::Manifest &manifest, std::string_view cubin, int format,
                   const std::string &host) {
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
    Fields f;
    if (std::string why = read_envelope(value, f); !why.empty()) return bad(why);
    if (std::string why = header_mismatch(f, expected); !why.empty()) return bad(why);
    auto manifest = store::cache_entry::parse_manifest(f.manifest_text, where + " (manifest)");
    if (!manifest) return bad(manifest.error().message);
    if (std::string why = manifest_mismatch(*manifest, f.cubin, expected); !why.empty()) return bad(why);
    if (std::string why = name_mismatch(*manifest, f.cubin, where); !why.empty()) return bad(why);
    Entry e;
    e.manifest = std::move(*manifest);
    e.cubin = std::string(f.cubin);
    e.producer = std::string(f.host);
    std::from_chars(f.created.data(), f.created.data() + f.created.size(), e.created);
    return e;
}

}  // namespace kjit::remote
