// The cluster tier over TLS (rediss://, docs/remote.md), against a real redis-server with TLS
// that each test starts on 127.0.0.1 and free ports (RedisServer in TLS mode: a server that
// cannot start fails the test). The certificates are made once per run with the openssl command:
// a CA, a server certificate for 127.0.0.1 and localhost, one for another name, an expired one,
// one signed by another CA, and a client certificate. Nodes are kjit_remote_node processes (their
// counters and their log, KJIT_LOG_LEVEL=warn, on stderr), or calls of this process.
#include "redis_server.hpp"
#include "storage/remote/tls_session.hpp"
#include "test_support.hpp"

#include <kjit/kjit.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char **environ;

// RemoteTls.ForkedChild... forks while the parent's lease renewer and connections live, and the
// child starts threads of its own (its lease's renewer): TSan allows that only with
// die_after_fork=0, as tests/api/fork_test.cpp sets it (the child's only use of the parent's
// state is libkjit's, renewed or abandoned by its fork handlers).
extern "C" const char *__tsan_default_options() { return "die_after_fork=0"; }

namespace {

using kjit_test::RedisServer;
using kjit_test::ScopedEnv;
using kjit_test::TempDir;
using kjit_test::TlsFiles;
namespace tls = kjit::storage::remote::tls;

// The certificates of this run (made at first use), in a folder of their own.
class Certificates {
public:
    Certificates() : error_(kjit_test::make_test_certificates(dir_.path())) {}
    const std::string &error() const { return error_; }
    std::string file(const std::string &name) const { return dir_.file(name); }
    // The files of a server whose certificate is `name` (server, other_name, stranger, expired).
    TlsFiles server(const std::string &name,
                    kjit_test::ClientCertificates clients = kjit_test::ClientCertificates::not_asked) const {
        return TlsFiles(file(name + ".pem"), file(name + ".key"), file("ca.pem"), clients);
    }

private:
    TempDir dir_;
    std::string error_;
};

// Removed with its folder when the test process exits (the servers, each a test's own, are
// gone by then): the folder holds private keys, which no run may leave in TMPDIR.
const Certificates &certificates() {
    static const Certificates made;
    return made;
}

#define REQUIRE_CERTIFICATES() ASSERT_EQ(certificates().error(), "")

const char *node_binary() {
    const char *p = std::getenv("KJIT_REMOTE_NODE");
    return p ? p : "kjit_remote_node";
}

// What a kjit_remote_node said: its exit status, counters and log.
struct NodeRun {
    int status = -1;
    std::map<std::string, long long> counters;
    std::string log;
    long long operator[](const std::string &counter) const {
        auto it = counters.find(counter);
        return it == counters.end() ? -1 : it->second;
    }
};

// Runs a node on kernels [first, first + count) with `spec` and cache folder `cache_dir`, its
// log at warn, and waits for it.
NodeRun run_node(const std::string &cache_dir, int first, int count, const std::string &spec) {
    ScopedEnv remote("KJIT_REMOTE_STORAGE", spec.c_str());
    ScopedEnv level("KJIT_LOG_LEVEL", "warn");
    const std::string out = cache_dir + ".out", err = cache_dir + ".err";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> args = {node_binary(), cache_dir, std::to_string(first), std::to_string(count), "single"};
    std::vector<char *> argv;
    for (std::string &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, node_binary(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    NodeRun run;
    if (rc != 0) return run;
    int status = 0;
    ::waitpid(pid, &status, 0);
    run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(out);
    std::string word;
    while (in >> word) {
        const auto eq = word.find('=');
        if (eq != std::string::npos) run.counters[word.substr(0, eq)] = std::stoll(word.substr(eq + 1));
    }
    run.log = kjit_test::read_file(err);
    return run;
}

std::size_t occurrences(const std::string &text, const std::string &what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

std::string ca_option() { return " ca-file=" + certificates().file("ca.pem"); }

// A node whose TLS link is refused: every kernel compiled there, nothing sent to the server, and
// one warning naming the server and `reason`. Returns the node's log.
std::string expect_refused(const RedisServer &server, const std::string &url, const std::string &options,
                           const std::string &reason) {
    TempDir root;
    const long long commands = server.calls_except_info();
    const NodeRun node = run_node(root.file("node"), 0, 3, url + " breaker=100ms " + options);
    EXPECT_EQ(node.status, 0) << node.log;
    EXPECT_EQ(node["nvrtc"], 3) << "a refused server fails open: every request is compiled here";
    EXPECT_EQ(node["remote_puts"], 0);
    EXPECT_EQ(node["remote_hits"], 0);
    EXPECT_GE(node["remote_errors"], 1);
    EXPECT_EQ(server.calls_except_info(), commands) << "a command reached a server that was not trusted";
    EXPECT_EQ(occurrences(node.log, reason), 1u) << "one warning, naming why:\n" << node.log;
    EXPECT_NE(node.log.find("remote cache " + url + "/0: TLS: "), std::string::npos) << node.log;
    return node.log;
}

// In-process calls: kjit_compile of kernel `i` into `cache_dir` with `spec`, expecting success.
void compile_kernel(const std::string &cache_dir, int i, const std::string &spec) {
    const std::string keyword = "tls_kernel_" + std::to_string(i);
    const std::string source = "__global__ void " + keyword + "(float *x) { x[0] = " + std::to_string(i) + "; }\n";
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache_dir.c_str();
    o.arch = "sm_80";
    o.remote_storage = spec.c_str();
    char cubin[1024];
    EXPECT_EQ(kjit_compile(source.c_str(), keyword.c_str(), &o, cubin, sizeof cubin, nullptr), KJIT_OK)
        << kjit_last_error();
}

kjit_stats stats() {
    kjit_stats s = KJIT_STATS_INIT;
    kjit_get_stats(&s);
    return s;
}

// ---------------------------------------------------------------------------------------------

TEST(RemoteTls, GoodCaAndNameStoreOnOneNodeAndHitOnTheOthers) {
    REQUIRE_CERTIFICATES();
    RedisServer server(certificates().server("server"));
    TempDir root;
    const std::string options = " breaker=100ms operation-timeout=5s";
    const NodeRun first = run_node(root.file("a"), 0, 2, server.tls_url() + ca_option() + options);
    EXPECT_EQ(first.status, 0) << first.log;
    EXPECT_EQ(first["nvrtc"], 2);
    EXPECT_EQ(first["remote_puts"], 2);
    EXPECT_EQ(first["remote_errors"], 0) << first.log;
    EXPECT_EQ(server.keys("kjit:*:b:*").size(), 2u);

    // Another node by address, one by host name (SNI and the name checked), one with the CA
    // in a hashed folder: every kernel from the server, none compiled.
    int index = 0;
    for (const std::string &spec : {server.tls_url() + ca_option(), server.tls_url("localhost") + ca_option(),
                                    server.tls_url() + " ca-dir=" + certificates().file("hashed")}) {
        const NodeRun next = run_node(root.file("node" + std::to_string(index++)), 0, 2, spec + options);
        EXPECT_EQ(next.status, 0) << spec << ": " << next.log;
        EXPECT_EQ(next["remote_hits"], 2) << spec << ": " << next.log;
        EXPECT_EQ(next["nvrtc"], 0) << spec;
        EXPECT_EQ(next.log.find("remote cache"), std::string::npos) << spec << ": " << next.log;
    }
}

// A Redis Cluster whose nodes speak TLS (tls-cluster): named by one node's TLS port, the cluster
// tells a TLS client the others' TLS ports, and every node is spoken to over TLS, with the
// named node's settings (its CA file; each checked as 127.0.0.1).
TEST(RemoteTls, NodesOfATlsClusterAreSpokenToOverTls) {
    REQUIRE_CERTIFICATES();
    const kjit_test::TlsFiles files = certificates().server("server");
    kjit_test::RedisCluster cluster(3, 1000, &files);
    TempDir root;
    const std::string spec = cluster.nodes()[0]->tls_url() + ca_option() + " breaker=100ms operation-timeout=5s";
    constexpr int kKernels = 12;
    const NodeRun first = run_node(root.file("a"), 0, kKernels, spec);
    EXPECT_EQ(first.status, 0) << first.log;
    EXPECT_EQ(first["remote_puts"], kKernels) << first.log;
    EXPECT_EQ(first["remote_errors"], 0) << first.log;
    std::size_t stored = 0;
    for (kjit_test::RedisServer *n : cluster.nodes()) {
        if (n->command({"ROLE"}).rfind("master", 0) != 0) continue;
        const std::size_t here = n->keys("kjit:*:b:*").size();
        EXPECT_GT(here, 0u) << "the primary on port " << n->port() << " holds no entry of " << kKernels;
        stored += here;
    }
    EXPECT_EQ(stored, static_cast<std::size_t>(kKernels));
    const NodeRun second = run_node(root.file("b"), 0, kKernels, spec);
    EXPECT_EQ(second.status, 0) << second.log;
    EXPECT_EQ(second["remote_hits"], kKernels) << second.log;
    EXPECT_EQ(second["nvrtc"], 0) << second.log;
}

TEST(RemoteTls, CertificateOfAnotherCaFailsOpenWithOneClearMessage) {
    REQUIRE_CERTIFICATES();
    RedisServer server(certificates().server("stranger"));
    const std::string log = expect_refused(server, server.tls_url(), ca_option(),
                                           "the server's certificate is refused: unable to get local issuer "
                                           "certificate (checked against ca-file=" +
                                               certificates().file("ca.pem") + ", for 127.0.0.1)");
    // The system CA store knows no test CA either (the server sends its CA with its certificate).
    RedisServer good(certificates().server("server"));
    expect_refused(good, good.tls_url(), "",
                   "the server's certificate is refused: self-signed certificate in certificate chain (checked "
                   "against the system CA store, for 127.0.0.1)");
}

TEST(RemoteTls, CertificateForAnotherNameIsRefusedByAddressAndByHostName) {
    REQUIRE_CERTIFICATES();
    RedisServer server(certificates().server("other_name"));
    expect_refused(server, server.tls_url(), ca_option(), "the server's certificate is refused: IP address mismatch");
    expect_refused(server, server.tls_url("localhost"), ca_option(),
                   "the server's certificate is refused: hostname mismatch");
}

TEST(RemoteTls, ExpiredCertificateIsRefused) {
    REQUIRE_CERTIFICATES();
    RedisServer server(certificates().server("expired"));
    expect_refused(server, server.tls_url(), ca_option(),
                   "the server's certificate is refused: certificate has expired");
}

TEST(RemoteTls, MutualTlsFailsOpenWithoutTheClientCertificateAndWorksWithIt) {
    REQUIRE_CERTIFICATES();
    RedisServer server(certificates().server("server", kjit_test::ClientCertificates::required));
    TempDir root;
    const std::string spec = server.tls_url() + ca_option() + " breaker=100ms";
    const NodeRun without = run_node(root.file("without"), 0, 2, spec);
    EXPECT_EQ(without.status, 0) << without.log;
    EXPECT_EQ(without["nvrtc"], 2);
    EXPECT_EQ(without["remote_puts"], 0);
    // Said once: the server's alert ("certificate required"), or the reset that overtook it
    // (TLS 1.3 refuses the client after its handshake), each naming what to give.
    EXPECT_EQ(occurrences(without.log, "cert-file= and key-file="), 1u) << without.log;
    EXPECT_NE(without.log.find("remote cache " + server.tls_url() + "/0: "), std::string::npos) << without.log;

    const NodeRun with = run_node(root.file("with"), 0, 2,
                                  spec + " cert-file=" + certificates().file("client.pem") +
                                      " key-file=" + certificates().file("client.key"));
    EXPECT_EQ(with.status, 0) << with.log;
    EXPECT_EQ(with["remote_puts"], 2) << with.log;
    EXPECT_EQ(with["remote_errors"], 0) << with.log;
}

TEST(RemoteTls, InsecureSkipVerifyTakesAnUnknownCaAndWarnsOnce) {
    REQUIRE_CERTIFICATES();
    RedisServer server(certificates().server("stranger"));
    TempDir root;
    const NodeRun node = run_node(root.file("node"), 0, 3, server.tls_url() + " insecure-skip-verify=true");
    EXPECT_EQ(node.status, 0) << node.log;
    EXPECT_EQ(node["remote_puts"], 3) << node.log;
    EXPECT_EQ(node["remote_errors"], 0) << node.log;
    EXPECT_EQ(occurrences(node.log, "insecure-skip-verify=true"), 1u) << node.log;
}

// Redis takes a TLS hello on its plain port as the start of an inline command and waits for its
// end: a timeout, which says what may be wrong.
TEST(RemoteTls, PlainServerNamedAsRedissFailsOpen) {
    REQUIRE_CERTIFICATES();
    RedisServer server;
    const std::string url = "rediss://127.0.0.1:" + std::to_string(server.port());
    TempDir root;
    const NodeRun node = run_node(root.file("node"), 0, 2, url + " breaker=100ms operation-timeout=300ms");
    EXPECT_EQ(node.status, 0) << node.log;
    EXPECT_EQ(node["nvrtc"], 2);
    EXPECT_EQ(node["remote_puts"], 0);
    EXPECT_NE(node.log.find("remote cache " + url + "/0: "), std::string::npos) << node.log;
    EXPECT_NE(node.log.find("does the server speak TLS on that port?"), std::string::npos) << node.log;
}

// A server that takes the connection and never answers the handshake: a timeout at the
// operation timeout, the request compiled here. Never a hang.
TEST(RemoteTls, SilentServerEndsAtTheOperationTimeout) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(fd, 16), 0);  // the kernel completes connects; nobody reads
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length), 0);
    const std::string spec =
        "rediss://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + " operation-timeout=300ms breaker=10s";
    TempDir cache;
    const kjit_stats before = stats();
    compile_kernel(cache.path(), 50, spec);
    const kjit_stats after = stats();
    EXPECT_EQ(after.nvrtc_compiles - before.nvrtc_compiles, 1u);
    EXPECT_GE(after.remote_timeouts - before.remote_timeouts, 1u);
    ::close(fd);
}

// The ids of the clients connected to `server`'s TLS port (CLIENT LIST, on its plain port).
std::set<std::string> tls_clients(const RedisServer &server) {
    std::set<std::string> ids;
    std::istringstream lines(server.command({"CLIENT", "LIST"}));
    const std::string port = ":" + std::to_string(server.tls_port()) + " ";
    for (std::string line; std::getline(lines, line);) {
        if (line.find("laddr=") == std::string::npos || line.find(port, line.find("laddr=")) == std::string::npos)
            continue;
        ids.insert(line.substr(0, line.find(' ')));
    }
    return ids;
}

// A forked child never uses its parent's TLS session (its socket is the parent's): it makes its
// own, and leaves the parent's alone (a goodbye sent on it would end the parent's connection),
// which the parent goes on using.
TEST(RemoteTls, ForkedChildMakesItsOwnSessionAndLeavesTheParentsAlone) {
    REQUIRE_CERTIFICATES();
    RedisServer server(certificates().server("server"));
    TempDir root;
    const std::string spec = server.tls_url() + ca_option() + " breaker=100ms operation-timeout=5s";
    compile_kernel(root.file("parent"), 60, spec);  // a connection kept by this thread
    const std::set<std::string> parents = tls_clients(server);
    ASSERT_FALSE(parents.empty());
    const kjit_stats before = stats();
    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child == 0) {
        compile_kernel(root.file("child"), 61, spec);
        const kjit_stats now = stats();
        ::_exit(now.remote_puts == before.remote_puts + 1 && now.remote_errors == before.remote_errors ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not store over TLS: " << status;
    compile_kernel(root.file("parent"), 62, spec);
    const kjit_stats after = stats();
    EXPECT_EQ(after.remote_puts - before.remote_puts, 1u);
    EXPECT_EQ(after.remote_errors, before.remote_errors);
    const std::set<std::string> now = tls_clients(server);
    for (const std::string &id : parents) {
        EXPECT_EQ(now.count(id), 1u) << "the parent's connection " << id << " ended: the child touched its session";
    }
}

// ---------------------------------------------------------------------------------------------
// Settings: checked at parse, without a server.

std::string check_error(const std::string &spec, kjit_status expected) {
    EXPECT_EQ(kjit_remote_check(spec.c_str(), 0), expected) << spec;
    return kjit_last_error();
}

TEST(RemoteTlsSettings, FilesAreCheckedAtParseAndNamed) {
    REQUIRE_CERTIFICATES();
    const std::string ca = certificates().file("ca.pem");
    EXPECT_EQ(kjit_remote_check(("rediss://127.0.0.1:1 ca-file=" + ca).c_str(), 0), KJIT_OK) << kjit_last_error();
    std::string e = check_error("rediss://127.0.0.1:1 ca-file=/nonexistent/kjit-ca.pem", KJIT_ERROR_IO);
    EXPECT_NE(e.find("ca-file '/nonexistent/kjit-ca.pem': No such file or directory"), std::string::npos) << e;
    e = check_error("rediss://127.0.0.1:1 ca-dir=" + ca, KJIT_ERROR_IO);
    EXPECT_NE(e.find("ca-dir '" + ca + "': Not a directory"), std::string::npos) << e;
    e = check_error("rediss://127.0.0.1:1 ca-file=" + certificates().file("hashed"), KJIT_ERROR_IO);
    EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
    e = check_error("rediss://127.0.0.1:1 cert-file=" + certificates().file("client.pem") +
                        " key-file=/nonexistent/client.key",
                    KJIT_ERROR_IO);
    EXPECT_NE(e.find("key-file '/nonexistent/client.key'"), std::string::npos) << e;
    e = check_error("rediss://127.0.0.1:1 ca-file=ca.pem", KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(e.find("an absolute path"), std::string::npos) << e;
}

TEST(RemoteTlsSettings, ClientCertificateAndKeyGoTogether) {
    REQUIRE_CERTIFICATES();
    std::string e =
        check_error("rediss://127.0.0.1:1 cert-file=" + certificates().file("client.pem"), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(e.find("cert-file= without key-file="), std::string::npos) << e;
    e = check_error("rediss://127.0.0.1:1|key-file=" + certificates().file("client.key"), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(e.find("key-file= without cert-file="), std::string::npos) << e;
}

TEST(RemoteTlsSettings, TlsOptionWithoutARedissServerIsRefused) {
    REQUIRE_CERTIFICATES();
    const std::string e = check_error("redis://127.0.0.1:1 redis+unix:/run/r.sock insecure-skip-verify=true ca-file=" +
                                          certificates().file("ca.pem"),
                                      KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(e.find("option insecure-skip-verify= applies to rediss:// servers"), std::string::npos) << e;
    const std::string bad = check_error("rediss://127.0.0.1:1 insecure-skip-verify=maybe", KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(bad.find("true or false"), std::string::npos) << bad;
}

TEST(RemoteTlsSettings, RedissIsShownAsSuchAndIsAnotherServerThanRedis) {
    char text[4096];
    size_t len = 0;
    ASSERT_EQ(kjit_remote_describe("rediss://u:Pw0rd@127.0.0.1:1/2 connect-timeout=100ms", text, sizeof text, &len),
              KJIT_OK)
        << kjit_last_error();
    const std::string described(text, len);
    EXPECT_NE(described.find("server rediss://u:***@127.0.0.1:1/2\n"), std::string::npos) << described;
    EXPECT_EQ(described.find("Pw0rd"), std::string::npos) << described;
    // The same host and port with and without TLS: two servers, not one named twice.
    EXPECT_EQ(kjit_remote_check("redis://127.0.0.1:1 rediss://127.0.0.1:1", 0), KJIT_OK) << kjit_last_error();
    const std::string twice = check_error("rediss://127.0.0.1:1 rediss://127.0.0.1:1/0", KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(twice.find("'rediss://127.0.0.1:1/0' is named twice"), std::string::npos) << twice;
    // A password in a rediss:// URL is one too (the kjit command refuses it on its command line).
    EXPECT_EQ(kjit_remote_check("rediss://:Pw0rd@127.0.0.1:1", KJIT_REMOTE_CHECK_NO_PASSWORD),
              KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(kjit_last_error()).find("Pw0rd"), std::string::npos) << kjit_last_error();
    const std::string cut = check_error("rediss://u:Pw0rd with Sec8et@127.0.0.1:1", KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(cut.find("Pw0rd"), std::string::npos) << cut;
    EXPECT_EQ(cut.find("Sec8et"), std::string::npos) << cut;
}

// ---------------------------------------------------------------------------------------------
// The TLS session itself (tls_session.hpp), over a socket of the test's.

// A session's step driven until it is done, with poll() for the way it asks, up to 5 s.
template <typename Step>
tls::Io drive(int fd, Step &&step) {
    for (int i = 0; i < 5000; ++i) {
        const tls::Io io = step();
        if (io.kind != tls::Io::Kind::want_read && io.kind != tls::Io::Kind::want_write) return io;
        pollfd p{fd, static_cast<short>(io.kind == tls::Io::Kind::want_read ? POLLIN : POLLOUT), 0};
        ::poll(&p, 1, 1);
    }
    tls::Io timed_out;
    timed_out.kind = tls::Io::Kind::failed;
    timed_out.error = "the test's 5 s ran out";
    return timed_out;
}

// Connects, shakes hands and PINGs; whether the session was resumed (throws on a failure).
bool ping_over_tls(int port, tls::Context &context) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof address) != 0) throw std::runtime_error("connect");
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    bool resumed = false;
    {
        auto session = tls::Session::start(context, fd, "127.0.0.1");
        if (!session) throw std::runtime_error(session.error().message);
        tls::Session &s = **session;
        tls::Io io = drive(fd, [&] { return s.handshake(); });
        if (io.kind != tls::Io::Kind::done) throw std::runtime_error("handshake: " + io.error);
        io = drive(fd, [&] { return s.write("PING\r\n", 6); });
        if (io.kind != tls::Io::Kind::done || io.bytes != 6) throw std::runtime_error("write: " + io.error);
        std::string reply;
        while (reply.size() < 7) {
            char buffer[64];
            io = drive(fd, [&] { return s.read(buffer, sizeof buffer); });
            if (io.kind != tls::Io::Kind::done) throw std::runtime_error("read: " + io.error);
            reply.append(buffer, io.bytes);
        }
        if (reply != "+PONG\r\n") throw std::runtime_error("reply: " + reply);
        resumed = s.resumed();
    }
    ::close(fd);
    return resumed;
}

TEST(RemoteTlsSession, ReconnectResumesTheSession) {
    REQUIRE_CERTIFICATES();
    RedisServer server(certificates().server("server"));
    kjit::storage::remote::TlsSettings settings;
    settings.ca_file = certificates().file("ca.pem");
    auto context = tls::context_for("resumption test " + server.tls_url(), settings);
    ASSERT_TRUE(context) << context.error().message;
    EXPECT_FALSE(ping_over_tls(server.tls_port(), **context)) << "a first connection has nothing to resume";
    EXPECT_TRUE(ping_over_tls(server.tls_port(), **context)) << "a reconnect did the whole handshake again";
    EXPECT_TRUE(ping_over_tls(server.tls_port(), **context));
}

TEST(RemoteTlsSession, LibsslThatCannotBeOpenedIsOneErrorNamingWhatWasLookedFor) {
    EXPECT_EQ(tls::open_error(tls::default_libraries()), "") << "this machine has libssl.so.3";
    const std::string e = tls::open_error(
        {{"libssl.so.0-kjit-missing", "libcrypto.so.0-kjit-missing"}, {"libssl.so.3", "libcrypto.so.0-kjit-missing"}});
    EXPECT_NE(e.find("rediss:// needs OpenSSL's libssl"), std::string::npos) << e;
    EXPECT_NE(e.find("dlopen(\"libssl.so.0-kjit-missing\") failed"), std::string::npos) << e;
    EXPECT_NE(e.find("dlopen(\"libcrypto.so.0-kjit-missing\") failed"), std::string::npos) << e;
    EXPECT_NE(e.find("apt-get install libssl3"), std::string::npos) << e;
}

}  // namespace
