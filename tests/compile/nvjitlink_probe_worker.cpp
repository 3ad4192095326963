// Child process for the nvJitLink probe tests (nvjitlink_probe_test.cpp), run as the cache runs
// the probe (until the linker calls it, no public call does): nvjitlink_probe_worker CACHE STEP...
// runs each step in order and prints what the test checks:
//   identity   nvjitlink_probe::identity(CACHE), as a look-up keys a request with link inputs:
//              "identity <text>" or "identity-error <Errc number> <message>"
//   load       nvjitlink_library::api(), as a link loads it: "load ok" or "load-error <n> <message>"
//   confirm    nvjitlink_probe::confirm(<the identity step's text>, CACHE), as before a link:
//              "confirm ok" or "confirm-error <Errc number> <message>"
//   record     nvjitlink_probe::record(CACHE), as after a hit or a link
//   preload:FILE[,FILE...]  dlopens the first FILE that opens, as a host that loads nvJitLink
//              for its own use first (numba-cuda): "preloaded <file>" (as /proc/self/maps names
//              it) or "preloaded none"
// and at the end "nvjitlink mapped|absent" (whether any libnvJitLink is in /proc/self/maps),
// "nvjitlink-file <file>" when mapped, and "loaded yes|no" (nvjitlink_probe::nvjitlink_loaded()).
// Exit 0 whenever it ran; 2 on bad usage.
#include "compile/nvjitlink_library.hpp"
#include "compile/nvjitlink_probe.hpp"
#include "host_preload.hpp"

#include <cstdio>
#include <string>

namespace probe = kjit::compile::nvjitlink_probe;

namespace {

// The first libnvJitLink file mapped into this process, as /proc/self/maps names it; "" when none.
std::string nvjitlink_file() { return kjit_test::mapped_file("/libnvJitLink."); }

// One line for the test: newlines in a message would split it.
void say(const std::string &key, const std::string &value) {
    std::string text = value;
    for (char &c : text) c = c == '\n' ? ' ' : c;
    std::printf("%s %s\n", key.c_str(), text.c_str());
}

void say_error(const std::string &step, const kjit::Error &e) {
    say(step + "-error", std::to_string(static_cast<int>(e.code)) + " " + e.message);
}

// dlopens the first of `files` that opens, as a host that loads nvJitLink first would, and says which.
void preload(const std::string &files) {
    say("preloaded", kjit_test::preload_first(files) ? nvjitlink_file() : "none");
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s CACHE identity|load|confirm|record|preload:FILE[,FILE...]...\n", argv[0]);
        return 2;
    }
    const std::string cache = argv[1];
    std::string keyed;
    for (int i = 2; i < argc; ++i) {
        const std::string step = argv[i];
        if (step == "identity") {
            auto id = probe::identity(cache);
            if (id) {
                keyed = *id;
                say("identity", *id);
            } else {
                say_error(step, id.error());
            }
        } else if (step == "load") {
            auto api = kjit::compile::nvjitlink_library::api();
            if (api) {
                say("load", "ok");
            } else {
                say_error(step, api.error());
            }
        } else if (step == "confirm") {
            auto st = probe::confirm(keyed, cache);
            if (st) {
                say("confirm", "ok");
            } else {
                say_error(step, st.error());
            }
        } else if (step == "record") {
            probe::record(cache);
        } else if (step.rfind("preload:", 0) == 0) {
            preload(step.substr(8));
        } else {
            std::fprintf(stderr, "unknown step '%s'\n", step.c_str());
            return 2;
        }
    }
    const std::string file = nvjitlink_file();
    say("nvjitlink", file.empty() ? "absent" : "mapped");
    if (!file.empty()) say("nvjitlink-file", file);
    say("loaded", probe::nvjitlink_loaded() ? "yes" : "no");
    return 0;
}
