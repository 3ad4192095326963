#include "compile/nvrtc_probe.hpp"

#include "compile/library_probe.hpp"
#include "compile/nvrtc_library.hpp"
#include "store/cache_layout.hpp"
#include "util/fork_guard.hpp"

namespace kjit::compile::nvrtc_probe {

namespace {

using Adapter = library_probe::Adapter<nvrtc_library::Api, nvrtc_library::opened, nvrtc_library::api,
                                       &nvrtc_library::Api::nvrtcVersion>;

// 2: every link on the way to each path is recorded too (a record of 1 could prove an NVRTC
// reached through a link re-pointed behind another link): a record of 1 is another context.
const library_probe::Library kNvrtc{"NVRTC",
                                    "nvrtc",
                                    "compile",
                                    "kjit-nvrtc-record 2",
                                    store::cache_layout::kNvrtcRecordPrefix,
                                    Errc::nvrtc,
                                    nvrtc_library::candidates,
                                    nvrtc_library::library_name,
                                    Adapter::opened,
                                    Adapter::load};

// The identity a record gave this process (kept in a forked child: same files) and the folders
// record() has handled (emptied in a child).
library_probe::Probe probe(kNvrtc);
void renew_in_forked_child() { probe.renew_in_forked_child(); }
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::nvrtc_records, renew_in_forked_child);

}  // namespace

Result<std::string> identity(const std::string &cache_dir) { return probe.identity(cache_dir); }

void record(const std::string &cache_dir) { probe.record(cache_dir); }

Status confirm(const std::string &keyed_identity, const std::string &cache_dir) {
    return probe.confirm(keyed_identity, cache_dir);
}

bool nvrtc_loaded() { return nvrtc_library::opened() != nullptr; }

}  // namespace kjit::compile::nvrtc_probe
