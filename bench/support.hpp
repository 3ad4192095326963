// What every scenario of kjit-bench needs: errors, files, temp folders, child processes, and a
// description of the machine the numbers were measured on.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kjit_bench {

// A scenario that cannot go on throws this; main() prints it and exits 1, and the TempDirs on
// the way out remove themselves.
struct BenchError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string &message);
// "<what> failed: <status name>: <kjit_last_error()>".
[[noreturn]] void fail_kjit(const std::string &what, int status);

// Which libkjit the children spawned next load: use(dir) puts `dir` first on LD_LIBRARY_PATH
// (libkjit.so.0 keeps its ABI, and the bench's RUNPATH yields to LD_LIBRARY_PATH), use("") puts
// the variable back as it was when this object was made (this build's libkjit), as does the
// destructor. For the scenarios that time earlier builds beside this one.
class LibraryPathSwitch {
public:
    LibraryPathSwitch();
    ~LibraryPathSwitch() { use(""); }
    LibraryPathSwitch(const LibraryPathSwitch &) = delete;
    LibraryPathSwitch &operator=(const LibraryPathSwitch &) = delete;
    void use(const std::string &lib_dir);

private:
    bool had_ = false;
    std::string saved_;
};

// A folder made with mkdtemp under `parent` and removed, with everything in it, when this
// object goes away (unless release()d).
class TempDir {
public:
    TempDir(const std::string &parent, const std::string &prefix);
    ~TempDir();
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    const std::string &path() const { return path_; }
    // Keeps the folder: the caller now owns it.
    std::string release();

private:
    std::string path_;
};

std::string folder_of(const std::string &path);
std::string read_file(const std::string &path);  // "" when it cannot be read
void write_file(const std::string &path, const std::string &bytes);
// The filesystem a folder is on (timings depend on it): "ext2/3/4", "tmpfs", ... or its magic.
std::string filesystem_name(const std::string &folder);
// The absolute path of this program (/proc/self/exe), to spawn it again.
std::string self_executable();
// Looks `name` up on PATH; "" when absent.
std::string find_on_path(const std::string &name);

struct ChildResult {
    bool started = false;
    int exit_status = -1;  // exit code, or -1 when killed by a signal
    std::string out, err;
    double wall_seconds = 0;  // from just before the spawn to the child's exit
};

// The "name=value" words a child printed (a node of the cluster or fleet scenario), as numbers.
// Fails, naming `who` and the output, when one of `required` is missing.
std::map<std::string, double> parse_counts(const std::string &out, const std::vector<std::string> &required,
                                           const std::string &who);

// Runs args[0] (a path, not searched on PATH) with args, stdout and stderr captured.
ChildResult run_child(const std::vector<std::string> &args);

// Where the numbers come from: CPU, cores, memory, kernel, OS.
struct MachineInfo {
    std::string cpu_model;
    unsigned cpus = 0;
    double memory_gib = 0;
    std::string kernel;  // uname -sr
    std::string os;      // /etc/os-release PRETTY_NAME
    std::string describe() const;
};
MachineInfo machine_info();

}  // namespace kjit_bench
