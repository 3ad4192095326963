#include "compile/job.hpp"

#include "compile/pch_folders.hpp"
#include "util/log.hpp"

namespace kjit::compile {

JobOutcome run_here(const Job &job) {
    if (job.pch_identity.empty()) return JobOutcome{compile::compiler::compile(job.request)};
    // NVRTC's automatic PCH, in a folder of this header identity's own (pch_folders.hpp says
    // why); its notes ("creating/using precompiled header ...") stay out of the log, so a
    // compile error reads as without it.
    bool first_of_identity = false;
    auto pch_folder = compile::pch_folders::folder_for(job.pch_identity, &first_of_identity);
    if (!pch_folder) {
        log().debug("compiling without a PCH: {}", pch_folder.error().message);
        return JobOutcome{compile::compiler::compile(job.request)};
    }
    compile::compiler::Program with_pch = job.request;
    with_pch.options.insert(with_pch.options.end(),
                            {"-pch", "-pch-dir=" + *pch_folder, "-pch-messages=false", "-pch-verbose=false"});
    with_pch.options.insert(with_pch.options.end(), job.pch_options.begin(), job.pch_options.end());
    return JobOutcome{compile::compiler::compile(with_pch), true, first_of_identity};
}

}  // namespace kjit::compile
