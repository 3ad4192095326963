// A kjit-worker that misbehaves on request, for worker_process_test (pointed at by
// $KJIT_WORKER). $KJIT_TEST_WORKER_MODE says how:
//   crash:<marker>          aborts on every job whose source holds <marker>
//   crash-once:<marker>:<f> aborts on the first such job, creating file <f> (a fresh worker,
//                           finding it, compiles)
//   hang:<marker>           sleeps for ever on such a job (the parent's death must end it:
//                           batch::worker_protocol::serve's PR_SET_PDEATHSIG, as in kjit-worker)
//   exit-on-job             exits at its first job without answering
//   garbage                 answers its first job with a frame that is not the protocol
//   wrong-nvrtc             says hello with an NVRTC that is not the parent's
//   old-protocol            says hello with protocol version 0
// Anything else (or unset): a faithful worker, as kjit-worker.
#include "batch/worker_protocol.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace {

std::string mode() {
    const char *m = std::getenv("KJIT_TEST_WORKER_MODE");
    return m ? m : "";
}

bool starts_with(const std::string &s, const char *prefix) { return s.rfind(prefix, 0) == 0; }

void before_job(const kjit::compile::Job &job) {
    const std::string m = mode();
    if (starts_with(m, "crash:") && job.request.source.find(m.substr(6)) != std::string::npos) std::abort();
    if (starts_with(m, "crash-once:")) {
        const std::string rest = m.substr(11);
        const std::string marker = rest.substr(0, rest.find(':'));
        const std::string flag = rest.substr(rest.find(':') + 1);
        if (job.request.source.find(marker) != std::string::npos && ::access(flag.c_str(), F_OK) != 0) {
            std::ofstream(flag) << "crashed once\n";
            std::abort();
        }
    }
    if (starts_with(m, "hang:") && job.request.source.find(m.substr(5)) != std::string::npos) {
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    if (m == "exit-on-job") std::_Exit(3);
}

// Says a hello of its own making, then answers jobs as `mode` says.
int lie(int fd, const std::string &m) {
    kjit::batch::worker_protocol::Hello hello;
    hello.nvrtc_identity = std::string("0.0 libnvrtc.so.0.0.0 1");
    if (m == "old-protocol") {
        hello.version = 0;
        hello.nvrtc_identity = kjit::compile::compiler::nvrtc_identity();
    }
    if (!kjit::batch::worker_protocol::send_frame(fd, kjit::batch::worker_protocol::Type::hello,
                                                  kjit::batch::worker_protocol::encode_hello(hello), "parent")) {
        return 1;
    }
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    const int fd = 3;
    pid_t parent = 0;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--parent=", 9) == 0) parent = static_cast<pid_t>(std::atol(argv[i] + 9));
    }
    const std::string m = mode();
    if (m == "wrong-nvrtc" || m == "old-protocol") return lie(fd, m);
    if (m == "garbage") {
        kjit::batch::worker_protocol::Hello hello;
        hello.nvrtc_identity = kjit::compile::compiler::nvrtc_identity();
        (void)kjit::batch::worker_protocol::send_frame(fd, kjit::batch::worker_protocol::Type::hello,
                                                       kjit::batch::worker_protocol::encode_hello(hello), "parent");
        char buf[65536];
        (void)::read(fd, buf, sizeof buf);
        const char junk[] = "this is not a KJW1 frame at all....";
        (void)::write(fd, junk, sizeof junk);
        return 0;
    }
    return kjit::batch::worker_protocol::serve(fd, parent, &before_job);
}
