// TLS settings: how a client checks a TLS server and proves itself to it (the options ca-file=,
// ca-dir=, cert-file=, key-file=, insecure-skip-verify= of a remote setting, config.hpp).
// A leaf: plain data, shared by the settings' parser and the TLS session (tls_session.hpp), so
// that neither depends on the other.
#pragma once

#include <string>

namespace kjit::storage::remote {

struct TlsSettings {
    // Where the server's certificate is checked: these (a PEM bundle, an OpenSSL hashed folder)
    // when either is set, else the system CA store (OpenSSL's default paths).
    std::string ca_file;
    std::string ca_dir;
    // The client's certificate (PEM, with its chain) and unencrypted key, for a server that asks
    // for one (mutual TLS): both or neither.
    std::string cert_file;
    std::string key_file;
    // Neither the certificate nor the name is checked: only by this explicit option.
    bool insecure_skip_verify = false;

    // The settings as text in a canonical order, "" when all are defaults; tells two sets apart.
    std::string canonical() const {
        std::string out;
        if (!ca_file.empty()) out += " ca-file=" + ca_file;
        if (!ca_dir.empty()) out += " ca-dir=" + ca_dir;
        if (!cert_file.empty()) out += " cert-file=" + cert_file;
        if (!key_file.empty()) out += " key-file=" + key_file;
        if (insecure_skip_verify) out += " insecure-skip-verify=true";
        return out.empty() ? out : out.substr(1);
    }
};

}  // namespace kjit::storage::remote
