#include "device/cuda_driver.h"

#include "device/dl_error.h"

#include <cstdlib>
#include <dlfcn.h>

namespace ckpt::device {

namespace {

Error unavailable(std::string message)
{
    return makeError(ErrorCode::DeviceUnavailable, std::move(message));
}

}  // namespace

Expected<std::shared_ptr<const CudaDriver>> CudaDriver::load()
{
    const char* env = std::getenv("CKPTSCOPE_CUDA_LIBRARY");
    const std::string path = env != nullptr && *env != '\0' ? env : "libcuda.so.1";
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const std::string why = takeDlError();
        return unavailable("no NVIDIA driver found (" + (why.empty() ? path : why) +
                           "); a GPU test-load needs the driver's libcuda.so.1");
    }
    std::shared_ptr<CudaDriver> d(new CudaDriver());
    d->handle_ = handle;
    d->path_ = path;
    // dlsym hands out untyped pointers
#define CKPTSCOPE_CUDA_BIND(member, symbol, type) d->member = reinterpret_cast<type>(::dlsym(handle, symbol));
    CKPTSCOPE_CUDA_FUNCTIONS(CKPTSCOPE_CUDA_BIND)
#undef CKPTSCOPE_CUDA_BIND
    if (d->cuDeviceGetUuid == nullptr) {  // drivers before CUDA 11.4 have only the first version
        d->cuDeviceGetUuid = reinterpret_cast<decltype(d->cuDeviceGetUuid)>(::dlsym(handle, "cuDeviceGetUuid"));
    }
    (void)takeDlError();  // a symbol an older driver lacks left an error record
    std::string missing;
#define CKPTSCOPE_CUDA_MISSING(member, symbol, type)                                                                   \
    if (d->member == nullptr) {                                                                                        \
        missing += std::string(missing.empty() ? "" : ", ") + (symbol);                                                \
    }
    CKPTSCOPE_CUDA_FUNCTIONS(CKPTSCOPE_CUDA_MISSING)
#undef CKPTSCOPE_CUDA_MISSING
    if (!missing.empty()) {
        return unavailable("the NVIDIA driver at " + path + " is too old: it lacks " + missing +
                           " (CUDA 11 or later is needed)");
    }
    if (auto ok = d->check(d->cuInit(0), "cuInit", ErrorCode::DeviceUnavailable); !ok) {
        // Slurm, container runtimes and users narrow what CUDA sees; an empty list hides every GPU.
        if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
            Error e = ok.error();
            e.message += std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')";
            return e;
        }
        return ok.error();
    }
    d->cuDriverGetVersion(&d->driverVersion_);
    if (auto ok = d->check(d->cuDeviceGetCount(&d->deviceCount_), "cuDeviceGetCount", ErrorCode::DeviceUnavailable);
        !ok) {
        return ok.error();
    }
    return std::shared_ptr<const CudaDriver>(std::move(d));
}

CudaDriver::~CudaDriver()
{
    if (handle_ != nullptr) {
        ::dlclose(handle_);
    }
}

std::string CudaDriver::errorText(cuda::Result r) const
{
    const char* s = nullptr;
    if (cuGetErrorString != nullptr && cuGetErrorString(r, &s) == cuda::kSuccess && s != nullptr) {
        return "CUDA error " + std::to_string(r) + ": " + s;
    }
    return "CUDA error " + std::to_string(r);
}

Expected<void> CudaDriver::check(cuda::Result r, std::string_view what, ErrorCode code) const
{
    if (r == cuda::kSuccess) {
        return {};
    }
    if (r == cuda::kErrorOutOfMemory) {
        code = ErrorCode::OutOfMemory;
    }
    return makeError(code, std::string(what) + ": " + errorText(r));
}

}  // namespace ckpt::device
