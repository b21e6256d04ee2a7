// libcuda.so.1, opened at run time. The NVIDIA driver ships it; ckptscope does not, so a package
// built anywhere drives whatever GPU the machine it is installed on has, and says so in one line
// when it has none.
//
// Which library: env CKPTSCOPE_CUDA_LIBRARY if set (tests point it at a fake driver or a missing
// file), else "libcuda.so.1".
#pragma once

#include "device/cuda_api.h"
#include "util/error.h"

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

namespace ckpt::device {

class CudaDriver {
public:
    // dlopen, every entry point bound, cuInit(0). Errors (DeviceUnavailable): "no NVIDIA driver
    // found (libcuda.so.1: cannot open shared object file ...)", a driver older than the entry
    // points, or cuInit's own complaint (no device, driver/kernel module mismatch).
    static Expected<std::shared_ptr<const CudaDriver>> load();

    CudaDriver(const CudaDriver&) = delete;
    CudaDriver& operator=(const CudaDriver&) = delete;
    ~CudaDriver();

    // "CUDA_ERROR_OUT_OF_MEMORY: out of memory", as the driver words it.
    [[nodiscard]] std::string errorText(cuda::Result r) const;
    // An error (code `code`) "<what>: <errorText>" unless r is success.
    [[nodiscard]] Expected<void> check(cuda::Result r, std::string_view what,
                                       ErrorCode code = ErrorCode::LoadFailed) const;
    [[nodiscard]] int deviceCount() const { return deviceCount_; }
    [[nodiscard]] int driverVersion() const { return driverVersion_; }  // 13000 for CUDA 13.0
    [[nodiscard]] const std::string& libraryPath() const { return path_; }

    // The entry points, bound by load().
#define CKPTSCOPE_CUDA_MEMBER(member, symbol, type) std::type_identity_t<type> member = nullptr;
    CKPTSCOPE_CUDA_FUNCTIONS(CKPTSCOPE_CUDA_MEMBER)
#undef CKPTSCOPE_CUDA_MEMBER

private:
    CudaDriver() = default;
    void* handle_ = nullptr;
    std::string path_;
    int deviceCount_ = 0;
    int driverVersion_ = 0;
};

}  // namespace ckpt::device
