#include "batch_run.hpp"

#include "progress.hpp"
#include "stats.hpp"
#include "support.hpp"

#include <nvrtc.h>

#include <memory>

namespace kjit_bench {

namespace {

struct Callback {
    Progress *progress;
    Clock::time_point started;
    double first_us = 0;
    static int on_item(void *user, size_t done, size_t, size_t, kjit_status, const char *) {
        auto *self = static_cast<Callback *>(user);
        if (done == 1) self->first_us = elapsed_us(self->started, Clock::now());
        self->progress->tick();
        return 0;
    }
};

}  // namespace

BatchRun run_batch(const std::vector<std::string> &sources, const char *keyword, const kjit_compile_options &options,
                   unsigned workers, int pch, const std::string &phase, int worker_kind) {
    return run_batch(sources, keyword, std::vector<kjit_compile_options>(sources.size(), options), workers, pch, phase,
                     worker_kind);
}

BatchRun run_batch(const std::vector<std::string> &sources, const char *keyword,
                   const std::vector<kjit_compile_options> &options, unsigned workers, int pch,
                   const std::string &phase, int worker_kind) {
    if (options.size() != sources.size())
        fail("run_batch: " + std::to_string(options.size()) + " options for " + std::to_string(sources.size()) +
             " sources");
    std::vector<kjit_compile_request> requests(sources.size(), kjit_compile_request KJIT_COMPILE_REQUEST_INIT);
    std::vector<const kjit_compile_request *> pointers;
    for (std::size_t i = 0; i < sources.size(); ++i) {
        requests[i].source = sources[i].c_str();
        requests[i].keyword = keyword;
        requests[i].options = &options[i];
        pointers.push_back(&requests[i]);
    }
    Progress progress(phase, static_cast<long>(sources.size()), "kernels");
    Callback callback{&progress, Clock::now()};
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    batch.workers = workers;
    batch.pch = pch;
    batch.worker_kind = worker_kind;
    batch.progress = &Callback::on_item;
    batch.progress_user_data = &callback;
    kjit_batch_result *raw = nullptr;
    callback.started = Clock::now();
    const kjit_status status = kjit_compile_batch(pointers.data(), pointers.size(), &batch, &raw);
    BatchRun run;
    run.wall_us = elapsed_us(callback.started, Clock::now());
    run.first_us = callback.first_us;
    progress.finish();
    std::unique_ptr<kjit_batch_result, decltype(&kjit_batch_result_release)> result(raw, &kjit_batch_result_release);
    if (status != KJIT_OK) fail_kjit("kjit_compile_batch (" + phase + ")", status);
    for (std::size_t i = 0; i < sources.size(); ++i)
        run.paths.emplace_back(kjit_batch_result_cubin_path(result.get(), i));
    return run;
}

void forget_nvrtc_pch() {
    std::size_t size = 0;
    if (nvrtcGetPCHHeapSize(&size) != NVRTC_SUCCESS || nvrtcSetPCHHeapSize(size) != NVRTC_SUCCESS) {
        fail("cannot reset NVRTC's PCH heap");
    }
}

}  // namespace kjit_bench
