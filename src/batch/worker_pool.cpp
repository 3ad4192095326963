#include "batch/worker_pool.hpp"

#include "batch/worker_protocol.hpp"
#include "compile/compiler.hpp"
#include "util/environment.hpp"
#include "util/log.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

extern char **environ;

namespace kjit::batch::worker_pool {

namespace {

std::atomic<std::uint64_t> started_count{0};

// How long a fresh worker may take to say hello (it loads NVRTC first), and how long one that
// was told to end may take to exit before it is killed.
constexpr auto kHelloWait = std::chrono::seconds(30);
constexpr auto kExitWait = std::chrono::seconds(5);

bool is_executable_file(const std::string &path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The folder of the file that holds this code, made absolute: libkjit.so, else (linked
// statically) the executable.
std::string own_folder() {
    const auto folder_of_real = [](const char *path) -> std::optional<std::string> {
        std::unique_ptr<char, decltype(&std::free)> real(::realpath(path, nullptr), &std::free);
        if (!real) return std::nullopt;
        const std::string p(real.get());
        return p.substr(0, p.rfind('/'));
    };
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void *>(&helper_path), &info) && info.dli_fname && *info.dli_fname) {
        if (auto folder = folder_of_real(info.dli_fname)) return *folder;
    }
    return folder_of_real("/proc/self/exe").value_or(".");
}

// How a reaped worker ended, from its wait status.
std::string ending_of(int status) {
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char *name = sig == SIGSEGV   ? " (SIGSEGV)"
                           : sig == SIGABRT ? " (SIGABRT)"
                           : sig == SIGKILL ? " (SIGKILL)"
                           : sig == SIGBUS  ? " (SIGBUS)"
                           : sig == SIGILL  ? " (SIGILL)"
                           : sig == SIGFPE  ? " (SIGFPE)"
                           : sig == SIGTERM ? " (SIGTERM)"
                                            : "";
        return "was killed by signal " + std::to_string(sig) + name;
    }
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    return "ended";
}

// Waits up to `wait` for `pid` to end; its wait status, or nothing when it still runs (or
// was already reaped by someone else: ECHILD, then -1).
std::optional<int> reap_within(pid_t pid, std::chrono::milliseconds wait) {
    const auto until = std::chrono::steady_clock::now() + wait;
    for (;;) {
        int status = 0;
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;  // not our child any more (SIGCHLD ignored, or reaped elsewhere)
        if (std::chrono::steady_clock::now() >= until) return std::nullopt;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

}  // namespace

Result<std::string> helper_path() {
    if (const char *env = environment::get(environment::Variable::worker); env && *env) {
        if (!is_executable_file(env)) {
            return Error{Errc::not_found, std::string("$KJIT_WORKER is '") + env +
                                              "', which is not an executable file: point it at libkjit's kjit-worker, "
                                              "or unset it to use the one beside libkjit.so"};
        }
        return std::string(env);
    }
    std::string path = own_folder() + "/" + kHelperName;
    if (!is_executable_file(path)) {
        return Error{Errc::not_found, "no worker helper at " + path +
                                          " (kjit-worker is installed beside libkjit.so): reinstall libkjit, set "
                                          "$KJIT_WORKER to its path, or compile on threads (KJIT_WORKER_KIND=threads)"};
    }
    return path;
}

std::uint64_t workers_started() { return started_count.load(std::memory_order_relaxed); }

WorkerProcess::WorkerProcess(std::string helper) : helper_(std::move(helper)) {}

WorkerProcess::~WorkerProcess() {
    if (pid_ > 0) stop();
}

Status WorkerProcess::start() {
    int sv[2] = {-1, -1};
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        const int err = errno;
        return Error{Errc::io, "cannot start a worker process: socketpair: " + errno_text(err), err};
    }
    // The worker's end becomes its descriptor 3. Taken above 3 first: a dup2 onto itself would
    // keep close-on-exec, and the worker would start without it.
    const int child_end = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    const int dup_err = errno;
    ::close(sv[1]);
    if (child_end < 0) {
        ::close(sv[0]);
        return Error{Errc::io, "cannot start a worker process: fcntl: " + errno_text(dup_err), dup_err};
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawnattr_init(&attr);
    ::posix_spawn_file_actions_adddup2(&actions, child_end, 3);
    ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_adddup2(&actions, 2, 1);  // anything printed goes to stderr, not the socket
    // Default signal handling and an empty mask, whatever the host set; and a process group of
    // its own, so a Ctrl-C reaches the host, which decides, and not the workers mid-compile.
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    ::posix_spawnattr_setsigmask(&attr, &none);
    ::posix_spawnattr_setsigdefault(&attr, &all);
    ::posix_spawnattr_setpgroup(&attr, 0);
    ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    const std::string parent = "--parent=" + std::to_string(::getpid());
    std::vector<char *> argv{const_cast<char *>(helper_.c_str()), const_cast<char *>("--serve-fd=3"),
                             const_cast<char *>(parent.c_str()), nullptr};
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, helper_.c_str(), &actions, &attr, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    ::posix_spawnattr_destroy(&attr);
    ::close(child_end);
    if (rc != 0) {
        ::close(sv[0]);
        return Error{Errc::io, "cannot start the worker process " + helper_ + ": " + errno_text(rc), rc};
    }
    started_count.fetch_add(1, std::memory_order_relaxed);
    pid_ = pid;
    fd_ = sv[0];
    peer_ = std::string(kHelperName) + " (pid " + std::to_string(pid) + ", " + helper_ + ")";

    // Its hello: the protocol version and its NVRTC, which must be this process's.
    pollfd p{fd_, POLLIN, 0};
    int ready = 0;
    do {
        ready = ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kHelloWait).count()));
    } while (ready < 0 && errno == EINTR);
    if (ready == 0) {
        const std::string how = stop();
        return Error{Errc::io, peer_ + " did not say hello within 30 s and " + how};
    }
    auto frame = batch::worker_protocol::read_frame(fd_, batch::worker_protocol::Type::hello, peer_);
    Result<batch::worker_protocol::Hello> hello = !frame
                                                      ? Result<batch::worker_protocol::Hello>(std::move(frame).error())
                                                  : !*frame ? Error{Errc::io, "it closed the connection first"}
                                                            : batch::worker_protocol::decode_hello(**frame);
    std::string problem;
    if (!hello) {
        problem = "did not start: " + hello.error().message;
    } else if (hello->version != batch::worker_protocol::kVersion) {
        problem = "speaks protocol version " + std::to_string(hello->version) + ", not this libkjit's " +
                  std::to_string(batch::worker_protocol::kVersion) + ": it belongs to another libkjit release";
    } else if (!hello->nvrtc_identity) {
        problem = "cannot compile: " + hello->nvrtc_identity.error().message;
    } else if (auto mine = compile::compiler::nvrtc_identity(); !mine || *mine != *hello->nvrtc_identity) {
        problem = "loaded NVRTC '" + *hello->nvrtc_identity + "', not this process's '" + (mine ? *mine : "") +
                  "' (its cubins would be cached under this NVRTC's keys): make both find the same libnvrtc "
                  "($KJIT_LIBNVRTC)";
    }
    if (!problem.empty()) {
        const std::string how = stop();
        return Error{hello ? Errc::nvrtc : Errc::io, peer_ + " " + problem + "; it then " + how};
    }
    log().debug("batch: started {}", peer_);
    return Ok{};
}

std::string WorkerProcess::stop() {
    // shutdown, not only close: a child the host forked meanwhile holds a copy of this
    // descriptor, and the worker must see the end of its input all the same.
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    fd_ = -1;
    const pid_t pid = pid_;
    pid_ = 0;
    std::optional<int> status = reap_within(pid, std::chrono::duration_cast<std::chrono::milliseconds>(kExitWait));
    if (!status) {
        ::kill(pid, SIGKILL);
        status = reap_within(pid, std::chrono::milliseconds(INT_MAX));
        if (status && *status != -1) return "did not exit within 5 s of its end and was killed";
    }
    return *status == -1 ? "ended" : ending_of(*status);
}

Result<compile::JobOutcome> WorkerProcess::exchange(const compile::Job &job) {
    KJIT_TRY(batch::worker_protocol::send_frame(fd_, batch::worker_protocol::Type::job,
                                                batch::worker_protocol::encode_job(job), peer_));
    KJIT_TRY_ASSIGN(auto frame, batch::worker_protocol::read_frame(fd_, batch::worker_protocol::Type::outcome, peer_));
    if (!frame) return Error{Errc::io, peer_ + " closed the connection during the compile"};
    return batch::worker_protocol::decode_outcome(*frame);
}

compile::JobOutcome WorkerProcess::run(const compile::Job &job) {
    std::string first_failure;
    for (int attempt = 0; attempt < 2; ++attempt) {
        if (pid_ == 0) {
            if (auto st = start(); !st) return compile::JobOutcome{std::move(st).error()};
        }
        auto outcome = exchange(job);
        if (outcome) return std::move(*outcome);
        const std::string who = peer_;
        const std::string how = stop();
        const std::string failure =
            who + " " + how + " while compiling " + job.label + " (" + outcome.error().message + ")";
        if (attempt == 0) {
            log().warn("batch: {}; compiling it again on a fresh worker", failure);
            first_failure = failure;
            continue;
        }
        return compile::JobOutcome{
            Error{Errc::nvrtc, "compiling in a worker process failed twice: " + first_failure +
                                   "; then, on a fresh worker, " + failure +
                                   ". Nothing was cached for it; KJIT_WORKER_KIND=threads compiles in this process"}};
    }
    return compile::JobOutcome{Error{Errc::internal, "unreachable"}};
}

}  // namespace kjit::batch::worker_pool
