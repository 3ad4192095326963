#include "compile/nvjitlink_probe.hpp"

#include "compile/library_probe.hpp"
#include "compile/nvjitlink_library.hpp"
#include "store/cache_layout.hpp"
#include "util/fork_guard.hpp"

namespace kjit::compile::nvjitlink_probe {

namespace {

using Adapter = library_probe::Adapter<nvjitlink_library::Api, nvjitlink_library::opened, nvjitlink_library::api,
                                       &nvjitlink_library::Api::version_of>;

const library_probe::Library kNvJitLink{"nvJitLink",
                                        "nvjitlink",
                                        "link",
                                        "kjit-nvjitlink-record 1",
                                        store::cache_layout::kNvJitLinkRecordPrefix,
                                        Errc::link,
                                        nvjitlink_library::candidates,
                                        nvjitlink_library::library_name,
                                        Adapter::opened,
                                        Adapter::load};

// The identity a record gave this process (kept in a forked child: same files) and the folders
// record() has handled (emptied in a child).
library_probe::Probe probe(kNvJitLink);
void renew_in_forked_child() { probe.renew_in_forked_child(); }
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::nvjitlink_records, renew_in_forked_child);

}  // namespace

Result<std::string> identity(const std::string &cache_dir) { return probe.identity(cache_dir); }

void record(const std::string &cache_dir) { probe.record(cache_dir); }

Status confirm(const std::string &keyed_identity, const std::string &cache_dir) {
    return probe.confirm(keyed_identity, cache_dir);
}

bool nvjitlink_loaded() { return nvjitlink_library::opened() != nullptr; }

}  // namespace kjit::compile::nvjitlink_probe
