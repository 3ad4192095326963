// A real redis-server for the cluster tier's tests: started by the test on 127.0.0.1 and a free
// port, in a folder of its own, with no persistence; killed (SIGKILL) when the object goes. A
// server that cannot start throws: the test fails, it never skips (.ci/run installs
// redis-server). Commands go through hiredis, as libkjit's own do. In TLS mode (Debian's
// redis-server 7.0 is built with TLS) it listens on a second free port with TLS (tls_url()),
// and keeps its plain port for the test's own commands (command(), INFO, KEYS).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kjit_test {

// Whether a TLS server asks its clients for a certificate (--tls-auth-clients).
enum class ClientCertificates { not_asked, required };

// A TLS server's files (PEM), as redis-server's --tls-* options take them. A constructor with an
// enum, not an aggregate: RedisServer({"--maxmemory", "1", ...}) stays a list of arguments.
struct TlsFiles {
    TlsFiles(std::string cert, std::string key, std::string ca, ClientCertificates clients)
        : cert_file(std::move(cert)), key_file(std::move(key)), ca_file(std::move(ca)),
          auth_clients(clients == ClientCertificates::required) {}
    std::string cert_file;  // the server's certificate
    std::string key_file;   // its key
    std::string ca_file;    // the CA that client certificates are checked against
    bool auth_clients;      // a client must show a certificate the CA signed (mutual TLS)
};

class RedisServer {
public:
    // Starts redis-server (with `extra` arguments, e.g. {"--maxmemory", "1mb"}) and waits until
    // it answers PING. Throws std::runtime_error saying why when it does not within 10 s.
    explicit RedisServer(std::vector<std::string> extra = {});
    // The same, with a TLS port too (tls_port(), tls_url()).
    explicit RedisServer(const TlsFiles &tls, std::vector<std::string> extra = {});
    ~RedisServer();
    RedisServer(const RedisServer &) = delete;
    RedisServer &operator=(const RedisServer &) = delete;

    int port() const { return port_; }
    bool running() const { return pid_ > 0; }
    // A TCP port on 127.0.0.1 that nothing listens on now (e.g. a cluster bus port to pass in
    // `extra`: --cluster-port).
    static int free_port();
    // A number of INFO `section`, e.g. info_number("stats", "total_connections_received"); -1
    // when INFO has no such field.
    long long info_number(const std::string &section, const std::string &field) const;
    // "redis://127.0.0.1:<port>"
    std::string url() const;
    // TLS mode: the TLS port, and "rediss://<host>:<TLS port>" (0 and "" otherwise).
    int tls_port() const { return tls_port_; }
    std::string tls_url(const std::string &host = "127.0.0.1") const;

    // SIGKILL and reap (a server that dies with its clients connected).
    void kill();
    // Starts it again on the same port (after kill()), empty.
    void restart();
    // SIGSTOP / SIGCONT: a server that accepts connections (the kernel does) but never answers.
    void pause();
    void resume();

    // Runs one command (as the default user) and returns its reply as text: a string or status
    // as is, an integer in decimal, nil as "(nil)", an error as "ERR ...", an array as its
    // elements' texts joined by '\n'. Throws when the server cannot be reached.
    std::string command(const std::vector<std::string> &args) const;
    // The calls `INFO commandstats` counts, for every command but INFO itself (which this helper
    // sends to ask): how many commands clients have sent.
    long long calls_except_info() const;
    // The calls of one command (e.g. "eval", "exists"), 0 when none.
    long long calls_of(const std::string &name) const;
    // Keys matching `pattern` (KEYS).
    std::vector<std::string> keys(const std::string &pattern) const;

private:
    void start();
    void launch();

    std::vector<std::string> extra_;
    std::vector<std::string> tls_args_;  // TLS mode: --tls-cert-file and the others
    std::string dir_;
    int port_ = 0;
    int tls_port_ = 0;
    pid_t pid_ = -1;
};

// A Redis Cluster of `primaries` primaries with one replica each, on 127.0.0.1 and free ports,
// made by `redis-cli --cluster create` (next to the server binary, else on PATH) with
// cluster-node-timeout `node_timeout_ms`; ready when every node says cluster_state:ok. With `tls`
// (not null), every node also listens with TLS (tls_url()) and the cluster's own links use it
// (tls-cluster, tls-replication): a client on a TLS port is told the nodes' TLS ports. Throws
// std::runtime_error saying why when it cannot be made.
class RedisCluster {
public:
    explicit RedisCluster(int primaries = 3, int node_timeout_ms = 1000, const TlsFiles *tls = nullptr);
    RedisCluster(const RedisCluster &) = delete;
    RedisCluster &operator=(const RedisCluster &) = delete;

    std::vector<RedisServer *> nodes();
    // The node serving `key`'s slot as its primary now (CLUSTER SLOTS of a live node).
    RedisServer &primary_of(const std::string &key);
    // A node's cluster id (CLUSTER MYID).
    static std::string id_of(const RedisServer &node);
    // Waits (up to 30 s) until every node that runs says cluster_state:ok and, in its CLUSTER
    // NODES, has every slot on a node that runs (so a killed primary's replica has taken over);
    // false if not.
    bool wait_ok();

private:
    std::vector<std::unique_ptr<RedisServer>> nodes_;
};

// Makes, with the openssl command, in `dir` (an empty folder): a CA (ca.pem, ca.key, and
// hashed/ for ca-dir=), a server certificate for 127.0.0.1 and localhost (server.pem, .key; good
// as a client certificate too, as a TLS cluster's nodes show theirs to each other), one for
// another name (other_name), one signed by another CA (stranger; other_ca.pem), an expired one
// (expired) and a client certificate (client). "" when made, else why not (openssl's log).
std::string make_test_certificates(const std::string &dir);

}  // namespace kjit_test
