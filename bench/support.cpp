#include "support.hpp"

#include "kjit/kjit.h"
#include "stats.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

extern char **environ;

namespace kjit_bench {

void fail(const std::string &message) { throw BenchError(message); }

void fail_kjit(const std::string &what, int status) {
    fail(what + " failed: " + kjit_status_string(static_cast<kjit_status>(status)) + ": " + kjit_last_error());
}

TempDir::TempDir(const std::string &parent, const std::string &prefix) {
    std::string pattern = parent + "/" + prefix + "XXXXXX";
    if (!::mkdtemp(pattern.data())) fail("cannot make a temp folder in '" + parent + "': " + std::strerror(errno));
    path_ = pattern;
}

LibraryPathSwitch::LibraryPathSwitch() {
    const char *path = std::getenv("LD_LIBRARY_PATH");
    had_ = path != nullptr;
    saved_ = path ? path : "";
}

void LibraryPathSwitch::use(const std::string &lib_dir) {
    if (!lib_dir.empty()) {
        ::setenv("LD_LIBRARY_PATH", (lib_dir + (saved_.empty() ? "" : ":" + saved_)).c_str(), 1);
    } else if (had_) {
        ::setenv("LD_LIBRARY_PATH", saved_.c_str(), 1);
    } else {
        ::unsetenv("LD_LIBRARY_PATH");
    }
}

TempDir::~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (ec) std::fprintf(stderr, "kjit-bench: could not remove '%s': %s\n", path_.c_str(), ec.message().c_str());
}

std::string TempDir::release() {
    std::string kept;
    kept.swap(path_);
    return kept;
}

std::string folder_of(const std::string &path) {
    const std::size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

std::string read_file(const std::string &path) {
    std::string out;
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f) return out;
    char buf[65536];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
    return out;
}

void write_file(const std::string &path, const std::string &bytes) {
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot create '" + path + "': " + std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (std::fclose(f) != 0 || !ok) fail("cannot write '" + path + "'");
}

std::string filesystem_name(const std::string &folder) {
    struct statfs sf {};
    if (::statfs(folder.c_str(), &sf) != 0) return "unknown";
    switch (static_cast<unsigned long>(sf.f_type)) {
        case 0xEF53UL: return "ext2/3/4";
        case 0x01021994UL: return "tmpfs";
        case 0x794C7630UL: return "overlayfs";
        case 0x58465342UL: return "xfs";
        case 0x9123683EUL: return "btrfs";
        case 0x6969UL: return "nfs";
        case 0x65735546UL: return "fuse";
        case 0x2FC12FC1UL: return "zfs";
        default: break;
    }
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(sf.f_type));
    return hex;
}

std::string self_executable() {
    char self[4096];
    const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) fail(std::string("cannot read /proc/self/exe: ") + std::strerror(errno));
    return std::string(self, static_cast<std::size_t>(len));
}

std::string find_on_path(const std::string &name) {
    const char *path = std::getenv("PATH");
    std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
    std::size_t start = 0;
    while (start <= dirs.size()) {
        const std::size_t colon = dirs.find(':', start);
        const std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
        const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        if (colon == std::string::npos) break;
        start = colon + 1;
    }
    return "";
}

namespace {

// Reads all of fd into `out`, retrying on EINTR.
void drain(int fd, std::string &out) {
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
}

}  // namespace

std::map<std::string, double> parse_counts(const std::string &out, const std::vector<std::string> &required,
                                           const std::string &who) {
    std::map<std::string, double> c;
    std::size_t at = 0;
    while (at < out.size()) {
        const std::size_t end = out.find_first_of(" \n", at);
        const std::string word = out.substr(at, end == std::string::npos ? std::string::npos : end - at);
        const std::size_t eq = word.find('=');
        if (eq != std::string::npos) c[word.substr(0, eq)] = std::strtod(word.c_str() + eq + 1, nullptr);
        if (end == std::string::npos) break;
        at = end + 1;
    }
    for (const std::string &name : required) {
        if (!c.count(name)) fail(who + " printed no '" + name + "=': '" + out + "'");
    }
    return c;
}

ChildResult run_child(const std::vector<std::string> &args) {
    ChildResult r;
    // stdout through a pipe, stderr through an unlinked temp file: the two can never deadlock
    // each other, whatever the child writes.
    int out_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) return r;
    char err_template[] = "/tmp/kjit-bench-stderr-XXXXXX";
    const int err_fd = ::mkostemp(err_template, O_CLOEXEC);
    if (err_fd < 0) {
        ::close(out_pipe[0]);
        ::close(out_pipe[1]);
        return r;
    }
    ::unlink(err_template);
    std::vector<char *> argv;
    for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
    std::fflush(nullptr);
    pid_t pid = 0;
    const auto started = Clock::now();
    const int spawned = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out_pipe[1]);
    if (spawned != 0) {
        ::close(out_pipe[0]);
        ::close(err_fd);
        r.err = "cannot run " + args[0] + ": " + std::strerror(spawned);
        return r;
    }
    r.started = true;
    drain(out_pipe[0], r.out);
    ::close(out_pipe[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.wall_seconds = elapsed_us(started, Clock::now()) / 1e6;
    r.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    ::lseek(err_fd, 0, SEEK_SET);
    drain(err_fd, r.err);
    ::close(err_fd);
    return r;
}

MachineInfo machine_info() {
    MachineInfo m;
    m.cpus = std::thread::hardware_concurrency();
    const std::string cpuinfo = read_file("/proc/cpuinfo");
    const std::size_t at = cpuinfo.find("model name");
    if (at != std::string::npos) {
        const std::size_t colon = cpuinfo.find(':', at);
        const std::size_t end = cpuinfo.find('\n', at);
        if (colon != std::string::npos && colon < end) m.cpu_model = cpuinfo.substr(colon + 2, end - colon - 2);
    }
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        m.memory_gib = static_cast<double>(pages) * static_cast<double>(page) / (1024.0 * 1024 * 1024);
    struct utsname u {};
    if (::uname(&u) == 0) m.kernel = std::string(u.sysname) + " " + u.release;
    const std::string os = read_file("/etc/os-release");
    const std::size_t pretty = os.find("PRETTY_NAME=\"");
    if (pretty != std::string::npos) {
        const std::size_t start = pretty + 13;
        m.os = os.substr(start, os.find('"', start) - start);
    }
    return m;
}

std::string MachineInfo::describe() const {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s, %u CPUs, %.0f GiB, %s, %s",
                  cpu_model.empty() ? "unknown CPU" : cpu_model.c_str(), cpus, memory_gib, os.c_str(), kernel.c_str());
    return buf;
}

}  // namespace kjit_bench
