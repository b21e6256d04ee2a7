// A time bound in a test catches a quadratic regression (seconds that became minutes); it is not a
// benchmark (those live in bench/ and print ratios). Under AddressSanitizer the same command takes
// two to four times as long, and CI's sanitizer run shares two cores with `ctest -j2`: a 10,000-shard
// convert that takes 9 s in release took 33 s there. Bounds are written for the release run and
// scaled here, once.
#pragma once

namespace ckpt::test {

// Tests themselves are compiled unoptimised (tests/CMakeLists.txt): what the bound times is the
// libraries, whose build CKPTSCOPE_LIBS_OPTIMIZED tells (0 in a Debug build).
#if defined(__SANITIZE_ADDRESS__) || (defined(CKPTSCOPE_LIBS_OPTIMIZED) && !CKPTSCOPE_LIBS_OPTIMIZED)
inline constexpr long long kTimeScale = 4;
#else
inline constexpr long long kTimeScale = 1;
#endif

// The bound for a check written as `releaseMs` in an optimised build without sanitizers.
constexpr long long timeBoundMs(long long releaseMs)
{
    return releaseMs * kTimeScale;
}

// Peak RSS under AddressSanitizer counts its shadow memory and its 64 MiB quarantine: the 5,000-rank
// DCP inspect that peaks at 24.5 MB in release peaks at 300 MB there. Memory bounds are held in the
// release run (scripts/test.sh); the sanitizer run checks the same commands for exit codes, messages
// and memory errors.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kRssIsTheProgramsOwn = false;
#else
inline constexpr bool kRssIsTheProgramsOwn = true;
#endif

}  // namespace ckpt::test
