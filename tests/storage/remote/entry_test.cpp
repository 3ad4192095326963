// The cluster tier's settings (remote/config) and values (remote/entry), without a server.
#include "storage/remote/entry.hpp"
#include "storage/remote/config.hpp"

#include "key/cache_key.hpp"
#include "sample_entry.hpp"
#include "test_support.hpp"
#include "util/hashing.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#if KJIT_TEST_REMOTE_VALUES
#include <zstd.h>

#include <cstdint>
#endif

namespace {

using kjit::storage::remote::parse;

TEST(RemoteConfig, ServersAndOptions) {
    auto c = parse("redis://cache-a:7000/2  redis://u:p%40ss@[::1] redis+unix:/run/r.sock?db=3|read-only=true "
                   "namespace=llm lease=5s wait-timeout=2m connect-timeout=50ms operation-timeout=3s max-entry-size=8M",
                   "KJIT_REMOTE_STORAGE");
    ASSERT_TRUE(c) << c.error().message;
    ASSERT_TRUE(*c);
    const auto &cfg = **c;
    ASSERT_EQ(cfg.servers.size(), 3u);
    EXPECT_EQ(cfg.servers[0].host, "cache-a");
    EXPECT_EQ(cfg.servers[0].port, 7000);
    EXPECT_EQ(cfg.servers[0].db, 2);
    EXPECT_EQ(cfg.servers[1].host, "::1");
    EXPECT_EQ(cfg.servers[1].user, "u");
    EXPECT_EQ(cfg.servers[1].password, "p@ss");
    EXPECT_EQ(kjit::storage::remote::display(cfg.servers[1]), "redis://u:***@[::1]:6379/0");
    EXPECT_EQ(cfg.servers[2].path, "/run/r.sock");
    EXPECT_EQ(cfg.servers[2].db, 3);
    EXPECT_TRUE(cfg.read_only);
    EXPECT_EQ(cfg.name_space, "llm");
    EXPECT_EQ(cfg.lease.count(), 5000);
    EXPECT_EQ(cfg.wait_timeout.count(), 120000);
    EXPECT_EQ(cfg.connect_timeout.count(), 50);
    EXPECT_EQ(cfg.operation_timeout.count(), 3000);
    EXPECT_EQ(cfg.max_entry_bytes, 8u << 20);
    EXPECT_EQ(cfg.canonical.find("p@ss"), std::string::npos);
}

TEST(RemoteConfig, OffAndDefaults) {
    for (const char *off : {"", "  ", "none"}) {
        auto c = parse(off, "x");
        ASSERT_TRUE(c);
        EXPECT_FALSE(*c) << off;
    }
    auto c = parse("redis://h", "x");
    ASSERT_TRUE(c && *c);
    EXPECT_EQ((*c)->servers[0].port, 6379);
    EXPECT_EQ((*c)->connect_timeout.count(), 100);
    EXPECT_EQ((*c)->operation_timeout.count(), 10000);
    EXPECT_EQ((*c)->lease.count(), 10000);
    EXPECT_EQ((*c)->breaker.count(), 250);
    EXPECT_EQ((*c)->wait_timeout.count(), 600000);
    EXPECT_FALSE((*c)->read_only);
}

TEST(RemoteConfig, BadSettingsNameWhatIsWrongAndNeverThePassword) {
    const char *bad[] = {"redis://admin:hunter2@h:99999",
                         "redis://admin:hunter2@:1",
                         "redis://h/x",
                         "lease=5s",
                         "redis://h lease=forever",
                         "redis://h colour=blue",
                         "redis://h namespace=a:b",
                         "redis+unix:relative.sock",
                         "redis://h none",
                         "redis://h redis://h",
                         "memcached://h",
                         "redis://h max-entry-size=1G"};
    for (const char *spec : bad) {
        auto c = parse(spec, "KJIT_REMOTE_STORAGE");
        ASSERT_FALSE(c) << spec;
        EXPECT_EQ(c.error().code, kjit::Errc::invalid_argument);
        EXPECT_EQ(c.error().message.rfind("KJIT_REMOTE_STORAGE: ", 0), 0u) << c.error().message;
        EXPECT_EQ(c.error().message.find("hunter2"), std::string::npos) << c.error().message;
    }
    auto c = parse("redis://admin:hunter2@h:99999", "KJIT_REMOTE_STORAGE");
    EXPECT_NE(c.error().message.find("admin:***@h:99999"), std::string::npos) << c.error().message;
}

// A password that holds a blank or '|' (generated passwords often do) is cut by the separators
// before any URL is parsed; no piece of it may reach a message, wherever it was cut and
// whatever the piece looks like (no '@', an option's '=', a port's place). 0.6 said
// "server 'redis://:Hunter2': no host".
TEST(RemoteConfig, PasswordCutByABlankOrBarIsNeverShown) {
    const std::vector<std::string> cut = {
        "redis://:Hunter2 X9@cache-host",       "redis://:Hunter2|X9@cache-host",
        "redis://admin:Hunter2 X9@cache-host",  "redis://admin:Hunter2|X9@cache-host:6380/2",
        "redis://Hunter2 X9@cache-host",        "redis://:Hunter2 mid3 X9@cache-host",
        "redis://:Hunter2|lease=X9@cache-host", "redis://Hunter2 lease=X9@cache-host",
        "redis://Hunter2|max=X9@cache-host",    "redis://admin:Hunter2 X9@cache-host redis://other",
        "redis://a:Hunter2\tX9@cache-host",     "redis://:p@Hunter2 X9@cache-host",
    };
    for (const std::string &spec : cut) {
        auto c = parse(spec, "KJIT_REMOTE_STORAGE");
        ASSERT_FALSE(c) << spec;
        const std::string &m = c.error().message;
        EXPECT_EQ(c.error().code, kjit::Errc::invalid_argument) << m;
        for (const char *secret : {"Hunter2", "X9", "mid3", "unter", "admin:H"}) {
            EXPECT_EQ(m.find(secret), std::string::npos) << spec << " -> " << m;
        }
        EXPECT_NE(m.find("percent-encoded"), std::string::npos) << m;
        EXPECT_NE(m.find("password-file="), std::string::npos) << m;
        EXPECT_TRUE(kjit::storage::remote::names_a_password(spec)) << spec;
    }
    // Percent-encoded, the same password works.
    auto encoded = parse("redis://admin:Hunter2%20X9%7Cz@cache-host", "x");
    ASSERT_TRUE(encoded && *encoded) << (encoded ? "" : encoded.error().message);
    EXPECT_EQ((*encoded)->servers[0].password, "Hunter2 X9|z");
    // A piece after the last '@' is a host, not a secret; other settings keep their messages.
    auto after = parse("redis://:pw@cache-host colour=blue", "x");
    ASSERT_FALSE(after);
    EXPECT_NE(after.error().message.find("unknown option 'colour'"), std::string::npos) << after.error().message;
    // What names a password, for `kjit compile --remote-storage`.
    EXPECT_TRUE(kjit::storage::remote::names_a_password("redis://:pw@h"));
    EXPECT_TRUE(kjit::storage::remote::names_a_password("redis://h1 redis://user:pw@h2|read-only=true"));
    EXPECT_FALSE(kjit::storage::remote::names_a_password("redis://h1:6379/2 redis+unix:/run/r.sock namespace=a"));
    EXPECT_FALSE(kjit::storage::remote::names_a_password("redis://h password-file=/run/secrets/a@b"));
    EXPECT_FALSE(kjit::storage::remote::names_a_password(""));
    // A password-file path with an '@' is no password, and parses.
    kjit_test::TempDir dir;
    const std::string file = dir.file("p@ss");
    kjit_test::write_file(file, "s3cret\n");
    ::chmod(file.c_str(), 0600);
    auto with_at = parse("redis://h|password-file=" + file, "x");
    ASSERT_TRUE(with_at && *with_at) << (with_at ? "" : with_at.error().message);
    EXPECT_EQ((*with_at)->servers[0].password, "s3cret");
}

// A server was shown two ways: "redis://u:***@h:6379/0" in warnings and messages, but
// "redis://u@h:6379/0" (its id: user, no password) in the debug line naming the setting. One
// function forms every display of a server, and every line and message uses it.
TEST(RemoteConfig, EveryLineNamesAServerTheSameWay) {
    kjit_test::TempDir dir;
    const std::string file = dir.file("pw");
    kjit_test::write_file(file, "s3cret\n");
    ::chmod(file.c_str(), 0600);
    auto c = parse("redis://u:p%40ss@cache-a:7000/2 redis://:pw@cache-b redis://cache-c redis://[::1] "
                   "redis+unix:/run/r.sock?db=3 redis://cache-d password-file=" +
                       file,
                   "x");
    ASSERT_TRUE(c && *c) << (c ? "" : c.error().message);
    const auto &servers = (*c)->servers;
    const std::vector<std::string> shown = {"redis://u:***@cache-a:7000/2", "redis://***@cache-b:6379/0",
                                            "redis://***@cache-c:6379/0",   "redis://***@[::1]:6379/0",
                                            "redis+unix:/run/r.sock?db=3",  "redis://***@cache-d:6379/0"};
    ASSERT_EQ(servers.size(), shown.size());
    for (std::size_t i = 0; i < shown.size(); ++i) {
        EXPECT_EQ(kjit::storage::remote::display(servers[i]), shown[i]);
        // The setting as the debug log names it ("remote cache: <canonical>").
        EXPECT_NE((*c)->canonical.find(shown[i] + " "), std::string::npos) << (*c)->canonical;
    }
    for (const char *secret : {"p@ss", "p%40ss", ":pw@", "s3cret", "u@cache-a"}) {
        EXPECT_EQ((*c)->canonical.find(secret), std::string::npos) << secret << " in " << (*c)->canonical;
    }
    // Errors name it the same way.
    auto twice = parse("redis://u:pw@cache-a:7000/2 redis://u:other@cache-a:7000/2", "x");
    ASSERT_FALSE(twice);
    EXPECT_NE(twice.error().message.find("server 'redis://u:***@cache-a:7000/2' is named twice"), std::string::npos)
        << twice.error().message;
    // (A server that cannot be reached: remote_test, RemoteFailOpen.DescribeNamesTheServerAsMessagesDo.)
}

TEST(RemoteConfig, PasswordFileMustBePrivate) {
    kjit_test::TempDir dir;
    const std::string file = dir.file("pw");
    kjit_test::write_file(file, "s3cret\n");
    ::chmod(file.c_str(), 0600);
    auto c = parse("redis://h password-file=" + file, "x");
    ASSERT_TRUE(c && *c) << (c ? "" : c.error().message);
    EXPECT_EQ((*c)->servers[0].password, "s3cret");
    EXPECT_EQ(kjit::storage::remote::display((*c)->servers[0]).find("s3cret"), std::string::npos);
    ::chmod(file.c_str(), 0644);
    auto open = parse("redis://h password-file=" + file, "x");
    ASSERT_FALSE(open);
    EXPECT_NE(open.error().message.find("readable by every user"), std::string::npos) << open.error().message;
}

// ---------------------------------------------------------------------------------------------
// Values exist where the tier is built (KJIT_REMOTE: hiredis and zstd).
#if KJIT_TEST_REMOTE_VALUES

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

#endif  // KJIT_TEST_REMOTE_VALUES

}  // namespace
