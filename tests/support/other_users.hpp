// Tests between Unix users (docs/hardening.md, "Other users"): as root, a group and three users
// made once per test binary (alice and bob in the group, carol not), each user's part run in a
// child forked from the binary that drops its privileges (setgroups, setgid, setuid). Their
// folders live under /tmp, and what they load or run from the build tree (the driver test
// double, the kjit command and its libkjit, the sanitizers' suppressions) is copied into one
// there first (Stage): the clone may lie in a folder they cannot search, as root's home (0700).
// Not root: the tests that need them are skipped, saying why (REQUIRE_USERS).
//
// Header-only: a test binary that includes it defines KJIT_CLI and KJIT_SHARED_LIBRARY (the
// build's kjit command and libkjit.so) and links kjit and kjit_test_support.
#pragma once

#include "kjit/kjit.h"

#include "test_support.hpp"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#ifndef KJIT_CLI
#error "define KJIT_CLI (the kjit command) and KJIT_SHARED_LIBRARY (libkjit.so) to include other_users.hpp"
#endif

namespace kjit_test::other_users {

inline const std::string kSource = sources::numbered_gemm(126);  // gemm<127>
inline const std::string kName = sources::numbered_gemm_name(126);
inline const std::string kOtherSource = sources::numbered_gemm(125);
inline const std::string kOtherName = sources::numbered_gemm_name(125);

struct User {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
};

inline bool run_quietly(const std::string &command) {
    return std::system(("(" + command + ") >/dev/null 2>&1").c_str()) == 0;
}

// The users and the team group, made once for the binary and removed at its end.
struct Users {
    bool ready = false;
    std::string why_not;
    std::string team;  // group name
    gid_t team_gid = 0;
    User alice, bob, carol;  // alice and bob are in the team, carol is not

    Users() {
        if (::geteuid() != 0) {
            why_not = "not root: cannot create the Unix users these tests need";
            return;
        }
        if (!run_quietly("command -v useradd && command -v groupadd")) {
            why_not = "useradd/groupadd not found";
            return;
        }
        const std::string tag = std::to_string(::getpid());
        team = "kjteam" + tag;
        alice = {"kjalice" + tag};
        bob = {"kjbob" + tag};
        carol = {"kjcarol" + tag};
        if (!run_quietly("groupadd " + team)) {
            why_not = "groupadd " + team + " failed";
            return;
        }
        for (User *u : {&alice, &bob, &carol}) {
            const std::string groups = u == &carol ? "" : " -G " + team;
            if (!run_quietly("useradd -M -N -g users -s /usr/sbin/nologin" + groups + " " + u->name) &&
                !run_quietly("useradd -M -s /usr/sbin/nologin" + groups + " " + u->name)) {
                why_not = "useradd " + u->name + " failed";
                return;
            }
            const struct passwd *pw = ::getpwnam(u->name.c_str());
            if (!pw) {
                why_not = "getpwnam " + u->name + " failed";
                return;
            }
            u->uid = pw->pw_uid;
            u->gid = pw->pw_gid;
        }
        const struct group *gr = ::getgrnam(team.c_str());
        if (!gr) {
            why_not = "getgrnam " + team + " failed";
            return;
        }
        team_gid = gr->gr_gid;
        ready = true;
    }
    ~Users() {
        for (User *u : {&alice, &bob, &carol}) {
            if (u->uid != 0) run_quietly("userdel " + u->name);
        }
        if (!team.empty()) run_quietly("groupdel " + team);
    }
};

inline Users &users() {
    static Users u;
    return u;
}

// A folder that every test user can reach: under /tmp itself, not $TMPDIR (which may be a
// private folder), mode 0755 unless told; removed with its contents on destruction.
class SharedDir {
public:
    explicit SharedDir(mode_t mode = 0755) {
        std::string templ = "/tmp/kjit-trust-XXXXXX";
        if (!::mkdtemp(templ.data())) {
            std::perror("mkdtemp");
            std::abort();
        }
        path_ = templ;
        ::chmod(path_.c_str(), mode);
    }
    SharedDir(const SharedDir &) = delete;
    SharedDir &operator=(const SharedDir &) = delete;
    ~SharedDir() {
        if (std::system(("rm -rf '" + path_ + "'").c_str()) != 0) {
            std::fprintf(stderr, "could not remove %s\n", path_.c_str());
        }
    }
    std::string file(const std::string &n) const { return path_ + "/" + n; }
    const std::string &path() const { return path_; }

private:
    std::string path_;
};

// Copies `from` to `to` with `mode`; "" when done, else what failed.
inline std::string copy_with_mode(const std::string &from, const std::string &to, mode_t mode) {
    std::error_code ec;
    std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return "cannot copy " + from + " to " + to + ": " + ec.message();
    if (::chmod(to.c_str(), mode) != 0) return "cannot chmod " + to + ": " + std::strerror(errno);
    return "";
}

// A sanitizer's options (as ASAN_OPTIONS: name=value items split by ':', ',' or blanks) with its
// suppressions file copied to `copy` and named there: a sanitized program that cannot read the
// file (tests/run.sh names tests/tsan.supp in the clone) stops at start-up. Sets `error` if the
// copy failed.
inline std::string stage_suppressions(const std::string &options, const std::string &copy, std::string &error) {
    static const std::string kKey = "suppressions=";
    std::string out;
    for (std::size_t start = 0; start <= options.size();) {
        const std::size_t end = std::min(options.find_first_of(":, \t\n", start), options.size());
        std::string item = options.substr(start, end - start);
        if (item.rfind(kKey, 0) == 0 && item.size() > kKey.size()) {
            if (error.empty()) error = copy_with_mode(item.substr(kKey.size()), copy, 0644);
            item = kKey + copy;
        }
        if (!item.empty()) out += (out.empty() ? "" : ":") + item;
        start = end + 1;
    }
    return out;
}

inline std::string base_name(const std::string &path) { return path.substr(path.rfind('/') + 1); }

// What the test users load or run from the build tree, copied into a folder under /tmp that they
// can reach: the clone, and so the build tree, may lie under a folder they cannot search (root's
// home is 0700, and so is a `mktemp -d` folder), and where it lies must not decide whether these
// tests pass. Made by root in the parent before a child needs it (a child cannot read the
// originals); removed, with its folder, when the binary ends.
class Stage {
public:
    // The driver test double that KJIT_LIBCUDA names (ctest sets it; unset, the children load the
    // system's driver) and the sanitizers' suppressions files.
    Stage() {
        if (const char *driver = std::getenv("KJIT_LIBCUDA"); driver && *driver) {
            libcuda_ = dir_.file(base_name(driver));
            note(copy_with_mode(driver, libcuda_, 0755));
        }
        for (const char *name : {"ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"}) {
            const char *options = std::getenv(name);
            if (!options || !std::strstr(options, "suppressions=")) continue;
            env_.emplace_back(name, stage_suppressions(options, dir_.file(std::string(name) + ".supp"), error_));
        }
    }
    Stage(const Stage &) = delete;
    Stage &operator=(const Stage &) = delete;

    // "" when everything asked for so far is staged, else the first failure.
    const std::string &error() const { return error_; }

    // The kjit command, with the libkjit it links beside it (its RUNPATH names the build tree):
    // staged on first call, in the parent; "" if that failed (error() says why).
    std::string cli() {
        if (cli_.empty() && error_.empty()) {
            note(copy_with_mode(KJIT_SHARED_LIBRARY, dir_.file(base_name(KJIT_SHARED_LIBRARY)), 0755));
            note(copy_with_mode(KJIT_CLI, dir_.file("kjit"), 0755));
            if (error_.empty()) cli_ = dir_.file("kjit");
        }
        return cli_;
    }

    // In a child that has become a test user: the environment in which it, and what it runs,
    // use the staged copies.
    void enter() const {
        if (!libcuda_.empty()) ::setenv("KJIT_LIBCUDA", libcuda_.c_str(), 1);
        if (!cli_.empty()) {
            const char *old = std::getenv("LD_LIBRARY_PATH");
            const std::string path = dir_.path() + (old && *old ? ":" + std::string(old) : "");
            ::setenv("LD_LIBRARY_PATH", path.c_str(), 1);
        }
        for (const auto &[name, value] : env_) ::setenv(name.c_str(), value.c_str(), 1);
    }

private:
    void note(const std::string &failure) {
        if (error_.empty()) error_ = failure;
    }

    SharedDir dir_{0755};
    std::string error_, libcuda_, cli_;
    std::vector<std::pair<std::string, std::string>> env_;
};

inline Stage &stage() {
    static Stage s;
    return s;
}

// Skips the test when there are no test users; fails it when what they need could not be staged.
#define REQUIRE_USERS()                                                      \
    do {                                                                     \
        if (!users().ready) {                                                \
            std::printf("skipped: %s\n", users().why_not.c_str());           \
            GTEST_SKIP() << users().why_not;                                 \
        }                                                                    \
        ASSERT_EQ(stage().error(), "") << "staging what the test users run"; \
    } while (0)

// What a child reported: its exit code and what it wrote.
struct Outcome {
    int code = -1;
    std::string out;
};

// Runs `body` in a child that is `user` (its groups from the group database), with umask 022;
// `body` writes what the parent should see to its string and returns the exit code.
inline Outcome run_as(const User &user, const std::function<int(std::string &)> &body) {
    const Stage &staged = stage();  // made here, by root, at the first child
    int fds[2];
    if (::pipe(fds) != 0) return {};
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        std::string out;
        int code = 99;
        if (::initgroups(user.name.c_str(), user.gid) != 0 || ::setgid(user.gid) != 0 || ::setuid(user.uid) != 0) {
            out = "cannot become " + user.name;
        } else {
            ::umask(022);
            staged.enter();
            code = body(out);
        }
        (void)!::write(fds[1], out.data(), out.size());
        ::_exit(code);
    }
    ::close(fds[1]);
    Outcome o;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) o.out.append(buf, static_cast<std::size_t>(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return o;
}

inline kjit_status compile(const std::string &cache, const std::string &source, std::string *path_out,
                           std::uint64_t max_size = 0) {
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.max_cache_size = max_size;
    char path[PATH_MAX + 64];
    const kjit_status st = kjit_compile(source.c_str(), "gemm", &o, path, sizeof path, nullptr);
    if (path_out) *path_out = st == KJIT_OK ? std::string(path) : std::string(kjit_last_error());
    return st;
}

// A child's body: compile `source` into `cache`; writes "status=<kjit_status> nvrtc=<NVRTC runs>
// <path or error>".
inline std::function<int(std::string &)> compiling(const std::string &cache, const std::string &source) {
    return [cache, source](std::string &out) {
        std::string text;
        kjit_stats before = KJIT_STATS_INIT;  // counters forked from the parent: count from here
        kjit_get_stats(&before);
        const kjit_status st = compile(cache, source, &text);
        kjit_stats s = KJIT_STATS_INIT;
        kjit_get_stats(&s);
        out = "status=" + std::to_string(static_cast<int>(st)) +
              " nvrtc=" + std::to_string(s.nvrtc_compiles - before.nvrtc_compiles) + " " + text;
        return st == KJIT_OK ? 0 : 1;
    };
}

inline std::string resolve(const std::string &cubin, const char *keyword = "gemm") {
    char name[256];
    const kjit_status st = kjit_resolve_name(cubin.c_str(), keyword, name, sizeof name, nullptr);
    return st == KJIT_OK ? std::string(name) : std::string(kjit_status_string(st)) + ": " + kjit_last_error();
}

inline bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

// `user` fills `cache` (which it creates 0755) with an entry for `source` and opens it to
// everyone, as someone planting a kernel for others would.
inline void plant_entry_as(const User &user, const std::string &cache, const std::string &source) {
    const Outcome o = run_as(user, [&](std::string &out) {
        if (::mkdir(cache.c_str(), 0755) != 0 && errno != EEXIST) return 2;
        std::string path;
        const kjit_status st = compile(cache, source, &path);
        out = path;
        if (st != KJIT_OK) return 1;
        return std::system(("chmod -R a+rX '" + cache + "'").c_str()) == 0 ? 0 : 3;
    });
    ASSERT_EQ(o.code, 0) << o.out;
}

// Runs the kjit command (the build's, or `cli`); returns its exit code and output.
inline Outcome run_cli(const std::vector<std::string> &args, const std::string &cli = KJIT_CLI) {
    std::string command = "'" + cli + "'";
    for (const std::string &a : args) command += " '" + a + "'";
    command += " 2>&1";
    Outcome o;
    FILE *p = ::popen(command.c_str(), "r");
    if (!p) return o;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) o.out.append(buf, n);
    const int status = ::pclose(p);
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return o;
}

}  // namespace kjit_test::other_users
