// The cluster tier's values (remote/entry), without a server; built with the tier (KJIT_REMOTE:
// hiredis and zstd). Its settings: config_test.cpp.
#include "storage/remote/entry.hpp"

#include "key/cache_key.hpp"
#include "sample_entry.hpp"
#include "test_support.hpp"
#include "util/hashing.hpp"

#include <gtest/gtest.h>
#include <zstd.h>

#include <cstdint>

namespace {

// The envelope as entry.hpp lays it out, written here independently of the library: a
// value as libkjit 0.6 made it (version 1), and version 2 values the library would never make
// (forged sizes, bombs, damaged frames) behind a valid checksum, so that the checks after the
// checksum are what refuses them.
namespace layout {

std::string u32(std::uint32_t v) {
    std::string out;
    for (unsigned i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
    return out;
}

std::string field(std::string_view bytes) { return u32(static_cast<std::uint32_t>(bytes.size())) + std::string(bytes); }

// Magic, version, and the header fields up to the creation time.
std::string header(std::uint32_t version, const kjit::store::cache_entry::Manifest &m, const std::string &host) {
    return "KJITRMT\n" + u32(version) + field(m.key) + field(std::to_string(kjit::key::kFormatVersion)) +
           field(m.nvrtc) + field(m.arch) + field(host) + field("1796342400");
}

std::string sealed(const std::string &body) { return body + kjit::hash128_hex(body); }

// What version 2 compresses, and version 1 sends as it is: the manifest and the cubin.
std::string payload(const kjit::store::cache_entry::Manifest &m, std::string_view cubin) {
    return field(kjit::store::cache_entry::format_manifest(m)) + field(cubin);
}

std::string v1(const kjit::store::cache_entry::Manifest &m, std::string_view cubin, const std::string &host) {
    return sealed(header(1, m, host) + payload(m, cubin));
}

// A zstd frame of `bytes`; without its content size when `record_size` is false (as a
// streaming compressor writes it).
std::string frame(std::string_view bytes, bool record_size = true) {
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, record_size ? 1 : 0);
    std::string out(ZSTD_compressBound(bytes.size()), '\0');
    ZSTD_outBuffer o{out.data(), out.size(), 0};
    ZSTD_inBuffer i{bytes.data(), bytes.size(), 0};
    // ZSTD_compressStream2 with ZSTD_e_end and no pledged size leaves the size unrecorded.
    const std::size_t left = ZSTD_compressStream2(cctx, &o, &i, ZSTD_e_end);
    ZSTD_freeCCtx(cctx);
    EXPECT_EQ(left, 0u);
    out.resize(o.pos);
    return out;
}

// A version 2 value whose header says `claimed` bytes, around `packed`.
std::string v2(const kjit::store::cache_entry::Manifest &m, const std::string &packed, std::uint32_t claimed) {
    return sealed(header(2, m, "forger") + u32(claimed) + field(packed));
}

}  // namespace layout

// The sample entry's cubin, manifest and expectation as the fixture's own members.
class RemoteEntryValue : public ::testing::Test, protected kjit_test::SampleEntry {
protected:
    RemoteEntryValue() : SampleEntry(kjit_test::sample_entry()) {}
    void SetUp() override {
        value = kjit::storage::remote::encode(manifest, cubin, kjit::key::kFormatVersion, "node-7");
    }
    kjit::Result<kjit::storage::remote::Entry> decode(const std::string &v, std::uint64_t max_entry_bytes = 64u << 20) {
        return kjit::storage::remote::decode(v, expected, "k", max_entry_bytes);
    }
    void expect_refused(const std::string &v, const char *why, std::uint64_t max_entry_bytes = 64u << 20) {
        auto e = decode(v, max_entry_bytes);
        ASSERT_FALSE(e) << why;
        EXPECT_EQ(e.error().code, kjit::Errc::bad_cubin);
        EXPECT_NE(e.error().message.find(why), std::string::npos) << e.error().message;
    }

    std::string value;
};

TEST_F(RemoteEntryValue, RoundTrip) {
    EXPECT_EQ(value.substr(8, 4), layout::u32(kjit::storage::remote::kEnvelopeVersion));
    EXPECT_EQ(kjit::storage::remote::kEnvelopeVersion, 2u);
    auto e = decode(value);
    ASSERT_TRUE(e) << e.error().message;
    EXPECT_EQ(e->cubin, cubin);
    EXPECT_EQ(e->manifest.name, manifest.name);
    EXPECT_EQ(e->producer, "node-7");
}

// Values stored by libkjit 0.6 (envelope version 1, uncompressed) are still read, and still
// checked.
TEST_F(RemoteEntryValue, VersionOneValuesAreStillRead) {
    const std::string old = layout::v1(manifest, cubin, "node-old");
    auto e = decode(old);
    ASSERT_TRUE(e) << e.error().message;
    EXPECT_EQ(e->cubin, cubin);
    EXPECT_EQ(e->manifest.name, manifest.name);
    EXPECT_EQ(e->producer, "node-old");
    EXPECT_EQ(e->created, 1796342400);
    std::string flipped = old;
    flipped[old.size() / 2] = static_cast<char>(flipped[old.size() / 2] ^ 1);
    expect_refused(flipped, "checksum mismatch");
    const std::string other = kjit_test::cubin_for(kjit_test::sources::numbered_gemm(5));
    expect_refused(layout::v1(manifest, other, "h"), "not the one its manifest");
    // A version this libkjit does not know.
    std::string future = layout::header(3, manifest, "h") + layout::payload(manifest, cubin);
    expect_refused(layout::sealed(future), "envelope version 3, this libkjit reads 1 to 2");
}

TEST_F(RemoteEntryValue, EveryFlippedByteIsRefused) {
    for (std::size_t i = 0; i < value.size(); i += 1 + value.size() / 200) {
        std::string v = value;
        v[i] = static_cast<char>(v[i] ^ 1);
        EXPECT_FALSE(decode(v)) << "byte " << i;
    }
}

// The checksum is over the bytes as sent: a flipped bit in the compressed frame is refused by
// it, before anything is unpacked; behind a recomputed checksum, by the frame or the manifest.
TEST_F(RemoteEntryValue, DamagedCompressedBytesAreRefused) {
    const std::size_t frame_start = layout::header(2, manifest, "node-7").size() + 8;
    const std::size_t frame_end = value.size() - 32;
    ASSERT_LT(frame_start, frame_end);
    for (std::size_t i = frame_start; i < frame_end; i += 1 + (frame_end - frame_start) / 50) {
        std::string v = value;
        v[i] = static_cast<char>(v[i] ^ 0x10);
        expect_refused(v, "checksum mismatch");
        auto resealed = decode(layout::sealed(v.substr(0, v.size() - 32)));
        EXPECT_FALSE(resealed) << "byte " << i;
    }
    const std::string packed = layout::frame(layout::payload(manifest, cubin));
    const auto size = static_cast<std::uint32_t>(layout::payload(manifest, cubin).size());
    ASSERT_TRUE(decode(layout::v2(manifest, packed, size))) << "the forger's layout is the library's";
    expect_refused(layout::v2(manifest, packed.substr(0, packed.size() - 3), size), "zstd frame");
    expect_refused(layout::v2(manifest, packed + "x", size), "bytes after its zstd frame");
    expect_refused(layout::v2(manifest, "not a frame at all", size), "not a zstd frame");
    // Whole frames whose content is not the two fields.
    const std::string extra = layout::payload(manifest, cubin) + "tail";
    expect_refused(layout::v2(manifest, layout::frame(extra), static_cast<std::uint32_t>(extra.size())),
                   "bytes after the last unpacked field");
    const std::string cut = layout::payload(manifest, cubin).substr(0, 40);
    expect_refused(layout::v2(manifest, layout::frame(cut), static_cast<std::uint32_t>(cut.size())),
                   "runs past the end");
}

// The size the header records must be the frame's: a value that says more or less is refused,
// whether the frame records its size or not.
TEST_F(RemoteEntryValue, ForgedUnpackedSizesAreRefused) {
    const std::string payload = layout::payload(manifest, cubin);
    const auto size = static_cast<std::uint32_t>(payload.size());
    for (bool recorded : {true, false}) {
        const std::string packed = layout::frame(payload, recorded);
        ASSERT_TRUE(decode(layout::v2(manifest, packed, size))) << recorded;
        for (std::uint32_t claimed : {size - 1, size + 1, size / 2, 0u}) {
            auto e = decode(layout::v2(manifest, packed, claimed));
            ASSERT_FALSE(e) << claimed;
            const std::string &m = e.error().message;
            EXPECT_NE(m.find(" " + std::to_string(claimed) + " bytes"), std::string::npos) << m;
            EXPECT_NE(m.find("header says"), std::string::npos) << m;
        }
    }
    // More than max-entry-size (and its margin for the manifest) allows: refused on the claim.
    const std::string packed = layout::frame(payload);
    expect_refused(layout::v2(manifest, packed, 0xffffffffu), "over max-entry-size");
    expect_refused(layout::v2(manifest, packed, (2u << 20) + 1), "over max-entry-size (1048576 bytes)", 1u << 20);
}

// A decompression bomb (a small value that unpacks to a lot) is refused before it is unpacked
// when it says how much it unpacks to, and by the bounded buffer when it lies about it.
TEST_F(RemoteEntryValue, BombsAreRefused) {
    const std::string zeros(16u << 20, '\0');
    const std::string bomb = layout::frame(zeros);
    ASSERT_LT(bomb.size(), 4096u);
    const auto big = static_cast<std::uint32_t>(zeros.size());
    expect_refused(layout::v2(manifest, bomb, big), "says it unpacks to 16777216 bytes, over max-entry-size", 1u << 20);
    expect_refused(layout::v2(manifest, bomb, 4096),
                   "its zstd frame unpacks to 16777216 bytes, its header says 4096 bytes");
    expect_refused(layout::v2(manifest, layout::frame(zeros, false), 4096),
                   "does not unpack to the 4096 bytes its header says");
    // Within the bound, unpacked and then refused as what it is: not the two fields.
    expect_refused(layout::v2(manifest, bomb, big), "bytes after the last unpacked field");
}

// The goal of compression, as a property of the format on a real NVRTC cubin: a version 2
// value is less than half the bytes of the version 1 value of the same entry.
TEST_F(RemoteEntryValue, CompressedValuesAreLessThanHalf) {
    const std::string old = layout::v1(manifest, cubin, "node-7");
    EXPECT_LT(2 * value.size(), old.size()) << "version 2: " << value.size() << " bytes, version 1: " << old.size();
}

TEST_F(RemoteEntryValue, CutShortOrExtended) {
    for (std::size_t keep : {std::size_t{0}, std::size_t{10}, value.size() / 2, value.size() - 1}) {
        EXPECT_FALSE(decode(value.substr(0, keep))) << keep;
    }
    expect_refused(value + "x", "checksum");
}

TEST_F(RemoteEntryValue, MadeForAnotherRequest) {
    expected.key = std::string(32, 'b');
    expect_refused(value, "made for key");
    expected.key = manifest.key;
    expected.arch = "sm_100";
    expect_refused(value, "made for sm_90");
    expected.arch = "sm_90";
    expected.nvrtc_identity = "13.1 other 2";
    expect_refused(value, "made by NVRTC");
    expected.nvrtc_identity = manifest.nvrtc;
    expected.keyword = "gemm_other";
    expect_refused(value, "does not describe this request");
}

TEST_F(RemoteEntryValue, WholeButLyingValuesAreRefused) {
    // Consistent checksums, wrong content: a name the keyword rule would not choose, a cubin that
    // is not the manifest's, a cubin that is not ELF.
    kjit::store::cache_entry::Manifest wrong_name = manifest;
    wrong_name.name = "_Z4gemmILi99EEvPf";
    expect_refused(kjit::storage::remote::encode(wrong_name, cubin, kjit::key::kFormatVersion, "h"),
                   "keyword rule chooses");
    const std::string other = kjit_test::cubin_for(kjit_test::sources::numbered_gemm(5));
    expect_refused(kjit::storage::remote::encode(manifest, other, kjit::key::kFormatVersion, "h"),
                   "not the one its manifest");
    kjit::store::cache_entry::Manifest text = manifest;
    text.cubin_bytes = 8;
    text.cubin_hash = kjit::hash128_hex("not elf!");
    expect_refused(kjit::storage::remote::encode(text, "not elf!", kjit::key::kFormatVersion, "h"), "not an ELF");
    kjit::store::cache_entry::Manifest lowered = manifest;
    lowered.name_expression = "gemm<99>";
    lowered.name = "_Z4gemmILi99EEvPf";  // matches the keyword, but is not in this cubin
    expected.name_expression = "gemm<99>";
    expect_refused(kjit::storage::remote::encode(lowered, cubin, kjit::key::kFormatVersion, "h"),
                   "not a function of its cubin");
}

}  // namespace
