#include "redis_server.hpp"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

namespace kjit_test {

// Bound to port 0, then released.
int RedisServer::free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
        ::close(fd);
        throw std::runtime_error("cannot find a free port: " + std::string(std::strerror(errno)));
    }
    ::close(fd);
    return ntohs(addr.sin_port);
}

namespace {

std::string server_binary() {
    if (const char *p = std::getenv("KJIT_TEST_REDIS_SERVER"); p && *p) return p;
    for (const char *candidate : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
        if (::access(candidate, X_OK) == 0) return candidate;
    }
    throw std::runtime_error("redis-server not found (apt-get install redis-server; tests/run.sh installs it)");
}

struct ContextFree {
    void operator()(redisContext *c) const { redisFree(c); }
};

std::string reply_text(const redisReply *r) {
    switch (r->type) {
        case REDIS_REPLY_STRING:
        case REDIS_REPLY_STATUS:
        case REDIS_REPLY_ERROR: return std::string(r->str, r->len);
        case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
        case REDIS_REPLY_NIL: return "(nil)";
        case REDIS_REPLY_ARRAY: {
            std::string out;
            for (std::size_t i = 0; i < r->elements; ++i) out += (i ? "\n" : "") + reply_text(r->element[i]);
            return out;
        }
        default: return "?";
    }
}

}  // namespace

RedisServer::RedisServer(std::vector<std::string> extra) : extra_(std::move(extra)) { launch(); }

RedisServer::RedisServer(const TlsFiles &tls, std::vector<std::string> extra) : extra_(std::move(extra)) {
    tls_args_ = {"--tls-cert-file",    tls.cert_file, "--tls-key-file",     tls.key_file,
                 "--tls-ca-cert-file", tls.ca_file,   "--tls-auth-clients", tls.auth_clients ? "yes" : "no"};
    launch();
}

void RedisServer::launch() {
    char tmpl[] = "/tmp/kjit-redis-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp: " + std::string(std::strerror(errno)));
    dir_ = tmpl;
    // Another process may take the free port before the server binds it: try a few.
    for (int attempt = 0;; ++attempt) {
        port_ = free_port();
        if (!tls_args_.empty()) {
            do tls_port_ = free_port();
            while (tls_port_ == port_);
        }
        try {
            start();
            return;
        } catch (const std::exception &) {
            kill();
            if (attempt == 4) throw;
        }
    }
}

RedisServer::~RedisServer() {
    resume();
    kill();
    std::system(("rm -rf '" + dir_ + "'").c_str());
}

std::string RedisServer::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

std::string RedisServer::tls_url(const std::string &host) const {
    return tls_port_ == 0 ? std::string() : "rediss://" + host + ":" + std::to_string(tls_port_);
}

void RedisServer::start() {
    const std::string binary = server_binary();
    std::vector<std::string> args = {binary,
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--dir",
                                     dir_,
                                     "--logfile",
                                     dir_ + "/redis.log",
                                     "--protected-mode",
                                     "no"};
    if (!tls_args_.empty()) {
        args.insert(args.end(), {"--tls-port", std::to_string(tls_port_)});
        args.insert(args.end(), tls_args_.begin(), tls_args_.end());
    }
    args.insert(args.end(), extra_.begin(), extra_.end());
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork: " + std::string(std::strerror(errno)));
    if (pid == 0) {
        std::vector<char *> argv;
        for (std::string &a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(binary.c_str(), argv.data());
        ::_exit(127);
    }
    pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        try {
            if (command({"PING"}) == "PONG") return;
        } catch (const std::exception &) {
        }
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            throw std::runtime_error("redis-server exited at start (port " + std::to_string(port_) + "; see " + dir_ +
                                     "/redis.log)");
        }
        if (std::chrono::steady_clock::now() > deadline) {
            throw std::runtime_error("redis-server did not answer PING within 10 s on port " + std::to_string(port_));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

void RedisServer::kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
}

void RedisServer::restart() {
    kill();
    start();
}

void RedisServer::pause() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisServer::resume() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
}

std::string RedisServer::command(const std::vector<std::string> &args) const {
    timeval tv{2, 0};
    std::unique_ptr<redisContext, ContextFree> c(redisConnectWithTimeout("127.0.0.1", port_, tv));
    if (!c || c->err) throw std::runtime_error("cannot reach the test's redis-server on port " + std::to_string(port_));
    redisSetTimeout(c.get(), tv);
    std::vector<const char *> argv;
    std::vector<std::size_t> lens;
    for (const std::string &a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    auto *reply =
        static_cast<redisReply *>(redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (!reply) throw std::runtime_error("no reply from the test's redis-server: " + std::string(c->errstr));
    std::string text = reply_text(reply);
    freeReplyObject(reply);
    return text;
}

long long RedisServer::calls_of(const std::string &name) const {
    const std::string info = command({"INFO", "commandstats"});
    const std::string tag = "cmdstat_" + name + ":calls=";
    const auto at = info.find(tag);
    return at == std::string::npos ? 0 : std::atoll(info.c_str() + at + tag.size());
}

long long RedisServer::calls_except_info() const {
    const std::string info = command({"INFO", "commandstats"});
    long long total = 0;
    for (std::size_t at = info.find("cmdstat_"); at != std::string::npos; at = info.find("cmdstat_", at + 1)) {
        const std::size_t colon = info.find(':', at);
        if (info.compare(at, colon - at, "cmdstat_info") == 0) continue;
        const std::size_t calls = info.find("calls=", colon);
        total += std::atoll(info.c_str() + calls + 6);
    }
    return total;
}

long long RedisServer::info_number(const std::string &section, const std::string &field) const {
    const std::string info = command({"INFO", section});
    const std::string tag = "\n" + field + ":";
    const auto at = info.find(tag);
    return at == std::string::npos ? -1 : std::atoll(info.c_str() + at + tag.size());
}

std::vector<std::string> RedisServer::keys(const std::string &pattern) const {
    const std::string text = command({"KEYS", pattern});
    std::vector<std::string> out;
    if (text.empty()) return out;
    for (std::size_t start = 0;;) {
        const auto nl = text.find('\n', start);
        out.push_back(text.substr(start, nl - start));
        if (nl == std::string::npos) break;
        start = nl + 1;
    }
    return out;
}

namespace {

std::string redis_cli() {
    const std::string server = server_binary();
    const std::string beside = server.substr(0, server.rfind('/') + 1) + "redis-cli";
    if (::access(beside.c_str(), X_OK) == 0) return beside;
    for (const char *candidate : {"/usr/bin/redis-cli", "/usr/local/bin/redis-cli"}) {
        if (::access(candidate, X_OK) == 0) return candidate;
    }
    throw std::runtime_error("redis-cli not found (apt-get install redis-tools; tests/run.sh installs it)");
}

}  // namespace

RedisCluster::RedisCluster(int primaries, int node_timeout_ms, const TlsFiles *tls) {
    // Bounded: redis-cli waits for ever for a cluster whose nodes cannot meet (a TLS bus refused).
    std::string create = "timeout 60 " + redis_cli() + " --cluster create";
    for (int i = 0; i < 2 * primaries; ++i) {
        std::vector<std::string> args = {"--cluster-enabled",      "yes",
                                         "--cluster-port",         std::to_string(RedisServer::free_port()),
                                         "--cluster-node-timeout", std::to_string(node_timeout_ms),
                                         "--appendonly",           "no"};
        if (tls) {
            args.insert(args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
            nodes_.push_back(std::make_unique<RedisServer>(*tls, args));
        } else {
            nodes_.push_back(std::make_unique<RedisServer>(args));
        }
        create += " 127.0.0.1:" + std::to_string(nodes_.back()->port());
    }
    create += " --cluster-replicas 1 --cluster-yes >/dev/null 2>&1";
    if (std::system(create.c_str()) != 0) throw std::runtime_error("redis-cli --cluster create failed: " + create);
    if (!wait_ok()) throw std::runtime_error("the cluster made by redis-cli never reached cluster_state:ok");
    // A replica that has not yet synchronised with its primary cannot replace it: ready when
    // every replica's link is up.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (auto &n : nodes_) {
        for (;;) {
            const std::string replication = n->command({"INFO", "replication"});
            if (replication.find("role:master") != std::string::npos ||
                replication.find("master_link_status:up") != std::string::npos) {
                break;
            }
            if (std::chrono::steady_clock::now() > deadline) {
                throw std::runtime_error("a replica of the cluster never synchronised with its primary");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
}

std::vector<RedisServer *> RedisCluster::nodes() {
    std::vector<RedisServer *> out;
    for (auto &n : nodes_) out.push_back(n.get());
    return out;
}

std::string RedisCluster::id_of(const RedisServer &node) { return node.command({"CLUSTER", "MYID"}); }

namespace {

// "CLUSTER NODES": one line per node, "<id> <ip:port@bus> <flags> <master> ... <slots...>", as
// each line's words.
std::vector<std::vector<std::string>> node_table(const std::string &table) {
    std::vector<std::vector<std::string>> lines;
    for (std::size_t at = 0; at < table.size();) {
        std::size_t end = table.find('\n', at);
        if (end == std::string::npos) end = table.size();
        std::vector<std::string> words;
        for (std::size_t w = at; w < end;) {
            std::size_t e = table.find(' ', w);
            if (e == std::string::npos || e > end) e = end;
            words.push_back(table.substr(w, e - w));
            w = e + 1;
        }
        if (words.size() >= 8) lines.push_back(std::move(words));
        at = end + 1;
    }
    return lines;
}

int port_of(const std::vector<std::string> &line) {
    const std::string &address = line[1];
    return std::stoi(address.substr(address.find(':') + 1));
}

}  // namespace

bool RedisCluster::wait_ok() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    const auto runs = [&](int port) {
        for (auto &n : nodes_) {
            if (n->port() == port) return n->running();
        }
        return false;
    };
    while (std::chrono::steady_clock::now() < deadline) {
        bool ok = true;
        for (auto &n : nodes_) {
            if (!n->running()) continue;
            try {
                ok = ok && n->command({"CLUSTER", "INFO"}).find("cluster_state:ok") != std::string::npos;
                // cluster_state:ok alone is also what a node says before it has noticed a killed
                // primary: ready only when, in every running node's view, each slot is on a node
                // that runs (after a failover, on the promoted replica).
                for (const auto &line : node_table(n->command({"CLUSTER", "NODES"}))) {
                    if (line.size() > 8 && !runs(port_of(line))) ok = false;
                }
            } catch (const std::exception &) {
                ok = false;
            }
        }
        if (ok) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

RedisServer &RedisCluster::primary_of(const std::string &key) {
    for (auto &asked : nodes_) {
        if (!asked->running()) continue;
        const std::string slot = asked->command({"CLUSTER", "KEYSLOT", key});
        const long wanted = std::stol(slot);
        for (const auto &words : node_table(asked->command({"CLUSTER", "NODES"}))) {
            if (words[2].find("master") == std::string::npos || words[2].find("fail") != std::string::npos) continue;
            for (std::size_t k = 8; k < words.size(); ++k) {
                const auto dash = words[k].find('-');
                if (words[k].empty() || words[k][0] == '[') continue;
                const long first = std::stol(words[k].substr(0, dash));
                const long last = dash == std::string::npos ? first : std::stol(words[k].substr(dash + 1));
                if (wanted < first || wanted > last) continue;
                for (auto &n : nodes_) {
                    if (n->port() == port_of(words)) return *n;
                }
            }
        }
    }
    throw std::runtime_error("no live primary serves the slot of " + key);
}

namespace {

// The openssl commands that make every certificate the tests use, in the current folder. The
// expired certificate comes from `openssl ca`, which takes dates in the past (OpenSSL 3.0's
// `x509 -req` has no -not_before).
const char *const kMakeCertificates = R"(set -e
cat > openssl.cnf <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
[other_name_ext]
basicConstraints = CA:FALSE
extendedKeyUsage = serverAuth
subjectAltName = DNS:other.example
[client_ext]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
[ca]
default_ca = test_ca
[test_ca]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any_name
unique_subject = no
[any_name]
commonName = supplied
EOF
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {  # ca NAME CN
  key "$1.key"
  openssl req -x509 -config openssl.cnf -extensions ca_ext -key "$1.key" -out "$1.pem" -days 30 -subj "/CN=$2"
}
signed() {  # signed NAME CA EXTENSIONS CN
  key "$1.key"
  openssl req -new -config openssl.cnf -key "$1.key" -out "$1.csr" -subj "/CN=$4"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 30 \
    -extfile openssl.cnf -extensions "$3" -out "$1.pem" 2>/dev/null
}
ca ca "kjit test CA"
ca other_ca "kjit other CA"
signed server ca server_ext "kjit test server"
signed other_name ca other_name_ext "other.example"
signed stranger other_ca server_ext "kjit test server"
signed client ca client_ext "kjit test client"
key expired.key
openssl req -new -config openssl.cnf -key expired.key -out expired.csr -subj "/CN=kjit expired server"
: > index.txt
echo 01 > serial
openssl ca -batch -config openssl.cnf -cert ca.pem -keyfile ca.key -in expired.csr -out expired.pem -notext \
  -startdate 20200101000000Z -enddate 20200201000000Z -extensions server_ext 2>/dev/null
mkdir hashed && cp ca.pem hashed/ && openssl rehash hashed
)";

std::string quoted(const std::string &script) {
    std::string out = "'";
    for (char c : script) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

}  // namespace

std::string make_test_certificates(const std::string &dir) {
    const std::string command = "cd '" + dir + "' && sh -c " + quoted(kMakeCertificates) + " > make.log 2>&1";
    if (std::system(command.c_str()) == 0) return "";
    std::string log;
    if (FILE *f = std::fopen((dir + "/make.log").c_str(), "r")) {
        char buf[4096];
        std::size_t n = 0;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) log.append(buf, n);
        std::fclose(f);
    }
    return "openssl could not make the test certificates in " + dir + ": " + log;
}

}  // namespace kjit_test
