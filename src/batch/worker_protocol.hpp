// Worker protocol: what a batch's worker process (kjit-worker, worker/main.cpp) and the process
// that started it (worker_pool.hpp) say to each other over a Unix stream socket. Frames, each
// a 16-byte header (magic "KJW1", message type, payload length, little-endian) and a payload
// of length-prefixed fields:
//
//   worker -> parent   Hello    protocol version, the worker's NVRTC identity (or why it has none)
//   parent -> worker   Job      compile::Job: source, program name, options, in-memory
//                               headers, name expressions, PCH identity and options
//   worker -> parent   Outcome  compile::JobOutcome: status (code, message) or cubin, log and
//                               lowered names; whether it used and made a PCH
//
// The worker says Hello once, then answers each Job with one Outcome, and exits when the
// parent closes its side. Decoding checks every length against what is left, so a truncated or
// garbled frame is an error, never a read out of bounds. Knows the compile job (compile/job.hpp) only.
#pragma once

#include "compile/job.hpp"
#include "util/status.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::batch::worker_protocol {

// Raised whenever a message's layout changes; the parent refuses a worker of another version.
constexpr std::uint32_t kVersion = 2;  // 2: link inputs in jobs, the link time in outcomes
// The largest payload either side accepts (a cubin is well below).
constexpr std::uint64_t kMaxPayload = std::uint64_t{1} << 32;

enum class Type : std::uint32_t { hello = 1, job = 2, outcome = 3 };

struct Hello {
    std::uint32_t version = kVersion;
    Result<std::string> nvrtc_identity = std::string();  // compile::compiler::nvrtc_identity() in the worker
};

std::string encode_hello(const Hello &hello);
std::string encode_job(const compile::Job &job);
std::string encode_outcome(const compile::JobOutcome &outcome);
// Errc::internal naming the message and the field when `payload` is not a well-formed message.
Result<Hello> decode_hello(std::string_view payload);
Result<compile::Job> decode_job(std::string_view payload);
Result<compile::JobOutcome> decode_outcome(std::string_view payload);

// Writes one frame (without SIGPIPE: a peer gone is an error, not a signal). Errc::io with the
// errno when the write fails. `peer` names the other side in messages.
Status send_frame(int fd, Type type, std::string_view payload, const std::string &peer);
// Reads one frame of type `expected`: its payload, or nothing when the peer closed its side
// between frames. Errors: Errc::io when the peer closed inside a frame or the read failed;
// Errc::internal for a bad magic, another type or a payload over kMaxPayload.
Result<std::optional<std::string>> read_frame(int fd, Type expected, const std::string &peer);

// The worker's side, in kjit-worker: first ties the worker's life to `parent` (PR_SET_PDEATHSIG:
// killed when the parent dies; returns 1 at once if it already has), then Hello, then one
// Outcome per Job (compile::run_here), until the parent closes the socket (returns 0) or it
// breaks (returns 1, said on stderr). `before_job` (may be null) is called before each job
// runs: tests use it to crash or hang a worker.
int serve(int fd, pid_t parent, void (*before_job)(const compile::Job &) = nullptr);

}  // namespace kjit::batch::worker_protocol
