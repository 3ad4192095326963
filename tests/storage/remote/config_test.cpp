// The cluster tier's settings (remote/config), without a server: KJIT_REMOTE_STORAGE's syntax,
// its options and defaults, what a bad setting says (never a password), the password file. The
// TLS options: tls_test.cpp.
#include "storage/remote/config.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

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

}  // namespace
