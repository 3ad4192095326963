#include "durability.hpp"

#include "progress.hpp"
#include "support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kjit_bench {

const char *const kDurabilityModes[2] = {"none", "entry"};
const char *const kDiskConditions[2] = {"quiet", "busy"};

namespace {

constexpr std::size_t kBlock = 4u << 20;  // each write, then an fdatasync
constexpr std::size_t kBlocks = 16;       // a 64 MiB file, rewritten in turn

// The child's loop: only system calls, as fork() in a process with threads allows.
[[noreturn]] void keep_disk_busy(int fd, int report, const char *block) {
    for (std::size_t i = 0;; i = (i + 1) % kBlocks) {
        if (::pwrite(fd, block, kBlock, static_cast<off_t>(i * kBlock)) < 0 && errno != EINTR) ::_exit(1);
        if (::fdatasync(fd) != 0 && errno != EINTR) ::_exit(1);
        const char one = 1;
        (void)!::write(report, &one, 1);  // non-blocking: a full pipe only undercounts
    }
}

}  // namespace

DiskBusy::DiskBusy(const std::string &folder) : file_(folder + "/disk-busy.dat") {
    // Random bytes, made before fork: a file system that compresses or skips zeros is still written.
    std::string block(kBlock, '\0');
    unsigned state = 12345;
    for (char &c : block) c = static_cast<char>((state = state * 1103515245u + 12345u) >> 24);
    const int fd = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) fail("cannot create the disk-busy file '" + file_ + "'");
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0 || ::fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0) {
        ::close(fd);
        fail("cannot make the disk-busy process's pipe");
    }
    pid_ = ::fork();
    if (pid_ == 0) {
        ::close(fds[0]);
        keep_disk_busy(fd, fds[1], block.data());
    }
    ::close(fd);
    ::close(fds[1]);
    pipe_ = fds[0];
    if (pid_ < 0) {
        ::close(pipe_);
        fail("cannot fork the disk-busy process");
    }
    // Let its queue fill before the first measured call.
    ::usleep(300'000);
}

long DiskBusy::stop() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
        char buf[4096];
        ssize_t n = 0;
        while ((n = ::read(pipe_, buf, sizeof buf)) > 0) rounds_ += n;
        ::close(pipe_);
        ::unlink(file_.c_str());
    }
    return rounds_;
}

DiskBusy::~DiskBusy() { stop(); }

namespace {

// KJIT_DURABILITY set to a mode for the scope; put back as it was after.
class DurabilitySetting {
public:
    explicit DurabilitySetting(const char *mode) {
        if (const char *v = std::getenv("KJIT_DURABILITY")) {
            had_ = true;
            saved_ = v;
        }
        ::setenv("KJIT_DURABILITY", mode, 1);
    }
    ~DurabilitySetting() {
        if (had_) ::setenv("KJIT_DURABILITY", saved_.c_str(), 1);
        else ::unsetenv("KJIT_DURABILITY");
    }
    DurabilitySetting(const DurabilitySetting &) = delete;
    DurabilitySetting &operator=(const DurabilitySetting &) = delete;

private:
    bool had_ = false;
    std::string saved_;
};

// One condition and mode: every kernel raw and cold, into a new cache under `folder`.
void run_one(const std::string &folder, int kernels, const DurabilityKernel &k, const std::string &key,
             DurabilityFigures &f, Progress &progress) {
    TempDir cache(folder, "cache-");
    for (int v = 0; v < kernels; ++v) {
        double raw = 0;
        ColdMiss cold;
        if (v % 2 == 0) {
            raw = k.raw_us(v);
            cold = k.cold(v, cache.path());
        } else {
            cold = k.cold(v, cache.path());
            raw = k.raw_us(v);
        }
        f.raw[key].push_back(raw);
        f.cold[key].push_back(cold.us);
        f.ratio[key].push_back(cold.us / raw);
        f.outside[key].push_back(cold.us - cold.compiler_us);
        progress.tick();
    }
}

}  // namespace

DurabilityFigures run_durability(const std::string &folder, int kernels, const DurabilityKernel &k,
                                 const std::string &what) {
    DurabilityFigures f;
    Progress progress(what + ": raw and cold, disk quiet and busy, KJIT_DURABILITY none and entry", 4L * kernels,
                      "kernels");
    for (const char *condition : kDiskConditions) {
        for (const char *mode : kDurabilityModes) {
            const std::string key = std::string(condition) + "." + mode;
            const DurabilitySetting setting(mode);
            if (std::string(condition) == "busy") {
                DiskBusy busy(folder);
                run_one(folder, kernels, k, key, f, progress);
                f.busy_rounds[mode] = busy.stop();
            } else {
                run_one(folder, kernels, k, key, f, progress);
            }
        }
    }
    return f;
}

namespace {

double sum(const std::vector<double> &v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
}

}  // namespace

void report_durability(Report &report, Section &s, const DurabilityFigures &f, const std::string &prefix,
                       const std::string &target_prefix, const std::string &what) {
    for (const char *condition : kDiskConditions) {
        const std::string c = condition;
        std::vector<double> raw;
        for (const char *mode : kDurabilityModes) {
            const auto &r = f.raw.at(c + "." + mode);
            raw.insert(raw.end(), r.begin(), r.end());
        }
        s.rows.push_back(summarize(prefix + "." + c + "_raw", "(durability) disk " + c + ": " + what + ", raw", raw));
        for (const char *mode : kDurabilityModes) {
            const std::string key = c + "." + mode;
            s.rows.push_back(summarize(prefix + "." + c + "_" + mode,
                                       "(durability) disk " + c + ": cold kjit_compile, KJIT_DURABILITY=" + mode,
                                       f.cold.at(key)));
            s.rows.push_back(
                summarize(prefix + "." + c + "_" + mode + "_outside",
                          "(durability) disk " + c + ": of which all but the compiler, KJIT_DURABILITY=" + mode,
                          f.outside.at(key)));
            const std::string beside = c == "busy" ? ", beside " + std::to_string(f.busy_rounds.at(mode)) +
                                                         " fdatasyncs of 4 MiB by the busy writer"
                                                   : std::string();
            char line[512];
            std::snprintf(line, sizeof line,
                          "disk %s, KJIT_DURABILITY=%s: cold / raw %.3fx by the median of per-kernel ratios, %.3fx "
                          "by the sums; outside the compiler %s a miss (median)%s",
                          condition, mode, median(f.ratio.at(key)), sum(f.cold.at(key)) / sum(f.raw.at(key)),
                          format_us(median(f.outside.at(key))).c_str(), beside.c_str());
            s.notes.push_back(line);
        }
    }
    Target none{target_prefix + "_busy_cold_over_raw",
                what + ": cold vs raw with the disk busy, KJIT_DURABILITY unset (none; median ratio)", 1.05, true};
    none.value = median(f.ratio.at("busy.none"));
    report.add_target(none);
    Target entry{target_prefix + "_busy_entry_cold_over_raw",
                 what + ": cold vs raw with the disk busy, KJIT_DURABILITY=entry (median ratio)", 1.05, true};
    entry.value = median(f.ratio.at("busy.entry"));
    report.add_target(entry);
}

}  // namespace kjit_bench
