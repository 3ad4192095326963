// kjit_compile_batch for tests that go through libkjit.so: sources in, per-item results out.
// Header-only and free of GoogleTest, so the stress and fault tests' own mains can use it.
#pragma once

#include "kjit/kjit.h"

#include <string>
#include <vector>

namespace kjit_test {

struct BatchOutcome {
    kjit_status overall = KJIT_OK;  // what kjit_compile_batch returned
    bool has_result = false;        // whether it handed out a result
    std::vector<kjit_status> statuses;
    std::vector<std::string> cubin_paths;  // "" unless the item succeeded
    std::vector<std::string> errors;
};

// kjit_compile_batch of every source with `keyword` and `options`, under `batch` (NULL: defaults).
inline BatchOutcome compile_batch(const std::vector<std::string> &sources, const char *keyword,
                                  const kjit_compile_options &options, const kjit_batch_options *batch) {
    std::vector<kjit_compile_request> requests(sources.size(), kjit_compile_request KJIT_COMPILE_REQUEST_INIT);
    std::vector<const kjit_compile_request *> items;
    for (std::size_t i = 0; i < sources.size(); ++i) {
        requests[i].source = sources[i].c_str();
        requests[i].keyword = keyword;
        requests[i].options = &options;
        items.push_back(&requests[i]);
    }
    kjit_batch_result *result = nullptr;
    BatchOutcome out;
    out.overall = kjit_compile_batch(items.data(), items.size(), batch, &result);
    out.has_result = result != nullptr;
    for (std::size_t i = 0; result && i < items.size(); ++i) {
        out.statuses.push_back(kjit_batch_result_status(result, i));
        const char *path = kjit_batch_result_cubin_path(result, i);
        out.cubin_paths.emplace_back(path ? path : "");
        out.errors.emplace_back(kjit_batch_result_error(result, i));
    }
    kjit_batch_result_release(result);
    return out;
}

}  // namespace kjit_test
