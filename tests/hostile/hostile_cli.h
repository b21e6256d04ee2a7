// The binary the hostile suites run (tst_hostile, tst_hostile_sets, tst_hostile_remote): the one
// this build makes, or CKPTSCOPE_HOSTILE_CLI's, to see each case fail on an older build.
#pragma once

#include <cstdlib>
#include <string>

namespace ckpt::test {

inline std::string cli()
{
    const char* env = std::getenv("CKPTSCOPE_HOSTILE_CLI");  // NOLINT(concurrency-mt-unsafe): read by the test thread
    return env != nullptr && *env != '\0' ? env : CKPTSCOPE_TEST_CLI;
}

}  // namespace ckpt::test
