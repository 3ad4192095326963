#include "compile/pch_folders.hpp"

#include "util/environment.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

namespace kjit::compile::pch_folders {

namespace {

struct Root {
    std::mutex mutex;
    pid_t pid = 0;               // the process that made `path` (a forked child makes its own)
    std::string path;            // "" until first use
    std::set<std::string> made;  // identities whose folder exists
};

std::atomic<Root *> root_slot{nullptr};

Root &root() {
    // Leaked: used by the exit handler. No once-guard (fork_guard.hpp).
    return fork_guard::lazy(root_slot, [] { return new Root(); });
}

// A forked child makes a root of its own on first use (its pid differs); its lock, and what a
// thread of the parent may have been changing under it, are made anew. The exit handler stays
// registered (the child inherits it), and removes only the root of the process that made it.
void renew_in_forked_child() {
    Root *r = root_slot.load(std::memory_order_relaxed);
    if (!r) return;
    fork_guard::renew(r->mutex);
    fork_guard::renew(r->path);
    fork_guard::renew(r->made);
    r->pid = 0;
}
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::pch_root, renew_in_forked_child);

// Roots of processes that are gone (killed, or ended by _exit) and untouched for kStaleTempNs:
// removed when this process makes its own. A pid that is alive again (reused) keeps its
// folder; the age check keeps a live process's folder even if its pid looks free here (another
// pid namespace).
void sweep_stale_roots(const std::string &base) {
    auto dir = FolderReader::open(base);
    if (!dir) return;
    std::vector<std::string> stale;
    const std::int64_t now = realtime_ns();
    for (auto e = dir->next(); e && *e; e = dir->next()) {
        const char *name = (*e)->d_name;
        if (std::strncmp(name, "kjit-pch-", 9) != 0) continue;
        char *end = nullptr;
        const long pid = std::strtol(name + 9, &end, 10);
        if (pid <= 0 || *end != '-' || pid == ::getpid()) continue;
        if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
        struct stat st {};
        const std::string path = base + "/" + name;
        if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
        if (now - mtime_ns(st) > kStaleTempNs) stale.push_back(path);
    }
    for (const std::string &path : stale) remove_tree(path);
}

void remove_root_at_exit() {
    Root *r = root_slot.load(std::memory_order_acquire);
    if (!r) return;
    std::lock_guard<std::mutex> lock(r->mutex);
    if (!r->path.empty() && r->pid == ::getpid()) remove_tree(r->path);
}

// Registered while libkjit loads, not at the first PCH: atexit takes a lock of its own (the C
// library's; ThreadSanitizer's interceptor's), and a child forked while a batch thread of the
// parent was inside it waited for ever at its own first PCH (Fork.ChildBatchWorksAfterAForkDuring
// AParentBatch, under TSan). A child inherits the registration.
[[maybe_unused]] const bool exit_handler_registered = std::atexit(remove_root_at_exit) == 0;

}  // namespace

Result<std::string> folder_for(const std::string &identity, bool *made_now) {
    Root &r = root();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (made_now) *made_now = false;
    if (r.path.empty() || r.pid != ::getpid()) {
        const char *tmp = environment::get(environment::Variable::tmpdir);
        std::string base = tmp && *tmp ? tmp : "/tmp";
        std::string templ = base + "/kjit-pch-" + std::to_string(::getpid()) + "-XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        if (!::mkdtemp(buf.data())) {
            return Error{Errc::io, "cannot create a folder for NVRTC's precompiled headers under '" + base +
                                       "': " + errno_text(errno)};
        }
        sweep_stale_roots(base);
        r.path = buf.data();
        r.pid = ::getpid();
        r.made.clear();
    }
    const std::string folder = r.path + "/" + identity;
    if (r.made.count(identity) == 0) {
        if (::mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
            return io_error("cannot create the PCH folder", folder, errno);
        }
        r.made.insert(identity);
        if (made_now) *made_now = true;
    }
    return folder;
}

}  // namespace kjit::compile::pch_folders
