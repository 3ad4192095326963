#include "util/environment.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using kjit::environment::Snapshot;
using kjit::environment::Variable;
namespace environment = kjit::environment;

namespace {

const std::vector<Variable> kAll = [] {
    std::vector<Variable> all;
    for (std::size_t i = 0; i < static_cast<std::size_t>(Variable::count); ++i) all.push_back(static_cast<Variable>(i));
    return all;
}();

std::string value_of(Variable v) {
    const char *value = environment::get(v);
    return value ? value : "<unset>";
}

}  // namespace

// get() answers as getenv does, for every variable, set or not, with or without a Snapshot.
TEST(Environment, ASnapshotAnswersWhatGetenvAnswers) {
    const kjit_test::ScopedEnv arch("KJIT_ARCH", "sm_90");
    const kjit_test::ScopedEnv empty("KJIT_DURABILITY", "");
    const kjit_test::ScopedEnv base_dirs("KJIT_BASE_DIRS", "x");  // restored after the test
    ::unsetenv("KJIT_BASE_DIRS");
    for (int with_snapshot = 0; with_snapshot < 2; ++with_snapshot) {
        std::optional<Snapshot> snapshot;
        if (with_snapshot) snapshot.emplace(kAll.data(), kAll.size());
        for (std::size_t i = 0; i < static_cast<std::size_t>(Variable::count); ++i) {
            const Variable v = static_cast<Variable>(i);
            const char *expected = std::getenv(environment::name(v));
            EXPECT_EQ(value_of(v), expected ? expected : "<unset>") << environment::name(v);
        }
        EXPECT_EQ(value_of(Variable::arch), "sm_90");
        EXPECT_EQ(value_of(Variable::durability), "");
        EXPECT_EQ(value_of(Variable::base_dirs), "<unset>");
    }
}

// A Snapshot is its variables' values of one moment, on its thread only, until it ends (others
// are read as they are now); nested, the innermost that took a variable answers, and the outer
// again once it ends.
TEST(Environment, ASnapshotIsOneMomentOnItsThread) {
    const kjit_test::ScopedEnv arch("KJIT_ARCH", "sm_80");
    const kjit_test::ScopedEnv jobs("KJIT_JOBS", "3");
    {
        const Variable arch_only[] = {Variable::arch};
        const Snapshot outer(arch_only, 1);
        ::setenv("KJIT_ARCH", "sm_90", 1);
        ::setenv("KJIT_JOBS", "4", 1);
        EXPECT_EQ(value_of(Variable::jobs), "4");  // not taken: read now
        EXPECT_EQ(value_of(Variable::arch), "sm_80");
        std::string other_thread;
        std::thread([&] { other_thread = value_of(Variable::arch); }).join();
        EXPECT_EQ(other_thread, "sm_90");
        {
            const Variable jobs_only[] = {Variable::jobs};
            const Snapshot inner_jobs(jobs_only, 1);
            const Snapshot inner(kAll.data(), kAll.size());
            ::setenv("KJIT_ARCH", "sm_100", 1);
            ::setenv("KJIT_JOBS", "5", 1);
            EXPECT_EQ(value_of(Variable::arch), "sm_90");
            EXPECT_EQ(value_of(Variable::jobs), "4");
        }
        EXPECT_EQ(value_of(Variable::jobs), "5");
        EXPECT_EQ(value_of(Variable::arch), "sm_80");
    }
    EXPECT_EQ(value_of(Variable::arch), "sm_100");
}
