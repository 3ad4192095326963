#include "storage/remote/entry.hpp"

#include "cubin/name_matcher.hpp"
#include "cubin/symbol_scanner.hpp"
#include "resolve/name_resolver.hpp"
#include "util/hashing.hpp"

#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <charconv>
#include <ctime>

namespace kjit::storage::remote {

namespace {

constexpr std::string_view kMagic = "KJITRMT\n";
constexpr std::size_t kChecksumHex = 32;
constexpr std::uint32_t kUncompressedVersion = 1;
// Chosen by measurement (the bench's sweep and CUB kernels, NVRTC cubins of 11 KB to 1.1 MB):
// level 7 makes entries 6-13% smaller than zstd's default (3) for 0.15 ms (a 13 KB cubin) to
// 12 ms (1.1 MB) of compression, paid once by the node that compiled it, in a compile of 0.3 s
// to 10 s; every node that fetches it gets the fewer bytes, and unpacking costs the same at
// any level (0.02 ms to 0.6 ms). Above 9 compression grows to seconds for 1-2% fewer bytes.
constexpr int kZstdLevel = 7;

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

// The envelope's fields, as views into the value (or, version 2's last two, into its unpacked
// payload).
struct Fields {
    std::uint32_t version = 0;
    std::string_view key, format, nvrtc, arch, host, created, manifest_text, cubin;
    std::uint32_t unpacked_bytes = 0;  // version 2: what `packed` says it unpacks to
    std::string_view packed;           // version 2: the zstd frame
};

// The envelope's fields after its version: the header, then version 1's manifest and cubin or
// version 2's unpacked size and zstd frame. Whether every length stays within the value.
bool read_fields(Reader &r, Fields &f) {
    if (!r.field(f.key) || !r.field(f.format) || !r.field(f.nvrtc) || !r.field(f.arch) || !r.field(f.host) ||
        !r.field(f.created)) {
        return false;
    }
    if (f.version == kUncompressedVersion) return r.field(f.manifest_text) && r.field(f.cubin);
    return r.u32(f.unpacked_bytes) && r.field(f.packed);
}

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
    if (!r.u32(f.version)) return "cut short";
    if (f.version < kUncompressedVersion || f.version > kEnvelopeVersion) {
        return "envelope version " + std::to_string(f.version) + ", this libkjit reads " +
               std::to_string(kUncompressedVersion) + " to " + std::to_string(kEnvelopeVersion);
    }
    if (!read_fields(r, f)) return "a field runs past the end";
    if (r.position() != body.size() - kMagic.size()) return "bytes after the last field";
    return {};
}

// Version 2's payload unpacked into `storage`, and f.manifest_text and f.cubin pointed into it.
// The size the envelope records is checked against the bound before anything is allocated,
// then against the frame's own record of it; the frame unpacks into exactly that many bytes (a
// frame that would give more fails, whatever it records). What is wrong, or "".
std::string unpack(Fields &f, std::uint64_t max_entry_bytes, std::string &storage) {
    const std::uint64_t limit = max_entry_bytes + kUnpackedMarginBytes;
    if (f.unpacked_bytes > limit) {
        return "says it unpacks to " + std::to_string(f.unpacked_bytes) + " bytes, over max-entry-size (" +
               std::to_string(max_entry_bytes) + " bytes) and its margin";
    }
    const unsigned long long framed = ZSTD_getFrameContentSize(f.packed.data(), f.packed.size());
    if (framed == ZSTD_CONTENTSIZE_ERROR) return "its payload is not a zstd frame";
    if (framed != ZSTD_CONTENTSIZE_UNKNOWN && framed != f.unpacked_bytes) {
        return "its zstd frame unpacks to " + std::to_string(framed) + " bytes, its header says " +
               std::to_string(f.unpacked_bytes) + " bytes";
    }
    const std::size_t frame_bytes = ZSTD_findFrameCompressedSize(f.packed.data(), f.packed.size());
    if (ZSTD_isError(frame_bytes))
        return std::string("its zstd frame is damaged (") + ZSTD_getErrorName(frame_bytes) + ")";
    if (frame_bytes != f.packed.size()) return "bytes after its zstd frame";
    storage.resize(f.unpacked_bytes);
    const std::size_t got = ZSTD_decompress(storage.data(), storage.size(), f.packed.data(), f.packed.size());
    if (ZSTD_isError(got)) {
        return std::string("its zstd frame does not unpack to the ") + std::to_string(f.unpacked_bytes) +
               " bytes its header says (" + ZSTD_getErrorName(got) + ")";
    }
    if (got != storage.size()) {
        return "its zstd frame unpacks to " + std::to_string(got) + " bytes, its header says " +
               std::to_string(f.unpacked_bytes) + " bytes";
    }
    Reader r(storage);
    if (!r.field(f.manifest_text) || !r.field(f.cubin)) return "an unpacked field runs past the end";
    if (r.position() != storage.size()) return "bytes after the last unpacked field";
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
    std::string payload;  // version 1's last two fields, which version 2 compresses
    const std::string manifest_text = store::cache_entry::format_manifest(manifest);
    payload.reserve(cubin.size() + manifest_text.size() + 8);
    put_field(payload, manifest_text);
    put_field(payload, cubin);
    std::string packed(ZSTD_compressBound(payload.size()), '\0');
    const std::size_t packed_bytes =
        ZSTD_compress(packed.data(), packed.size(), payload.data(), payload.size(), kZstdLevel);
    // Only out of memory fails with a bound-sized buffer: then the value is sent uncompressed,
    // which every libkjit reads.
    const bool compressed = !ZSTD_isError(packed_bytes);
    std::string out;
    out.reserve((compressed ? packed_bytes : payload.size()) + 256);
    out.append(kMagic);
    put_u32(out, compressed ? kEnvelopeVersion : kUncompressedVersion);
    put_field(out, manifest.key);
    put_field(out, std::to_string(format));
    put_field(out, manifest.nvrtc);
    put_field(out, manifest.arch);
    put_field(out, host);
    put_field(out, std::to_string(static_cast<long long>(std::time(nullptr))));
    if (compressed) {
        put_u32(out, static_cast<std::uint32_t>(payload.size()));
        put_field(out, std::string_view(packed).substr(0, packed_bytes));
    } else {
        out += payload;
    }
    out += hash128_hex(out);
    return out;
}

Result<Entry> decode(std::string_view value, const Expected &expected, const std::string &where,
                     std::uint64_t max_entry_bytes) {
    auto bad = [&](const std::string &what) { return Error{Errc::bad_cubin, "remote entry " + where + ": " + what}; };
    Fields f;
    if (std::string why = read_envelope(value, f); !why.empty()) return bad(why);
    if (std::string why = header_mismatch(f, expected); !why.empty()) return bad(why);
    std::string unpacked;  // version 2's manifest and cubin, which f's views then point into
    if (f.version != kUncompressedVersion) {
        if (std::string why = unpack(f, max_entry_bytes, unpacked); !why.empty()) return bad(why);
    }
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

}  // namespace kjit::storage::remote
