// The few CUDA Driver API entry points the test-load engine calls, declared here rather than taken
// from the toolkit's cuda.h: libcuda.so.1 is opened with dlopen at run time (it comes with the
// NVIDIA driver, not with ckptscope), so every build can drive a GPU and none needs the toolkit.
// tests/device/tst_cuda_api.cpp compiles this list against the toolkit's cuda.h where one is found
// and checks each symbol name, each signature's shape and each error number, so they cannot drift.
#pragma once

#include <cstddef>

// The handle types are pointers to the same incomplete structs cuda.h names.
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;

namespace ckpt::cuda {

using Result = int;  // cuda.h's CUresult enum, an int in the ABI
using Device = int;
using DevicePtr = unsigned long long;
using Context = CUctx_st*;
using Stream = CUstream_st*;
using Event = CUevent_st*;
struct Uuid {
    char bytes[16];  // cuda.h's CUuuid layout
};

inline constexpr Result kSuccess = 0;
inline constexpr Result kErrorInvalidValue = 1;
inline constexpr Result kErrorOutOfMemory = 2;
inline constexpr Result kErrorNotInitialized = 3;
inline constexpr Result kErrorNoDevice = 100;
inline constexpr Result kErrorInvalidDevice = 101;
inline constexpr unsigned kStreamNonBlocking = 0x1;
inline constexpr unsigned kEventDisableTiming = 0x2;
inline constexpr unsigned kHostAllocPortable = 0x1;

// X(member, "symbol in libcuda.so.1", signature): the versioned symbols cuda.h's macros map the
// plain names to (cuMemAlloc -> cuMemAlloc_v2), all present since CUDA 11.
#define CKPTSCOPE_CUDA_FUNCTIONS(X)                                                                                    \
    X(cuInit, "cuInit", ckpt::cuda::Result (*)(unsigned int))                                                          \
    X(cuDriverGetVersion, "cuDriverGetVersion", ckpt::cuda::Result (*)(int*))                                          \
    X(cuGetErrorString, "cuGetErrorString", ckpt::cuda::Result (*)(ckpt::cuda::Result, const char**))                  \
    X(cuDeviceGetCount, "cuDeviceGetCount", ckpt::cuda::Result (*)(int*))                                              \
    X(cuDeviceGet, "cuDeviceGet", ckpt::cuda::Result (*)(ckpt::cuda::Device*, int))                                    \
    X(cuDeviceGetName, "cuDeviceGetName", ckpt::cuda::Result (*)(char*, int, ckpt::cuda::Device))                      \
    X(cuDeviceGetUuid, "cuDeviceGetUuid_v2", ckpt::cuda::Result (*)(ckpt::cuda::Uuid*, ckpt::cuda::Device))            \
    X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", ckpt::cuda::Result (*)(char*, int, ckpt::cuda::Device))              \
    X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", ckpt::cuda::Result (*)(std::size_t*, ckpt::cuda::Device))               \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                                                            \
      ckpt::cuda::Result (*)(ckpt::cuda::Context*, ckpt::cuda::Device))                                                \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", ckpt::cuda::Result (*)(ckpt::cuda::Device))           \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", ckpt::cuda::Result (*)(ckpt::cuda::Context))                                 \
    X(cuMemGetInfo, "cuMemGetInfo_v2", ckpt::cuda::Result (*)(std::size_t*, std::size_t*))                             \
    X(cuMemAlloc, "cuMemAlloc_v2", ckpt::cuda::Result (*)(ckpt::cuda::DevicePtr*, std::size_t))                        \
    X(cuMemFree, "cuMemFree_v2", ckpt::cuda::Result (*)(ckpt::cuda::DevicePtr))                                        \
    X(cuMemHostAlloc, "cuMemHostAlloc", ckpt::cuda::Result (*)(void**, std::size_t, unsigned int))                     \
    X(cuMemFreeHost, "cuMemFreeHost", ckpt::cuda::Result (*)(void*))                                                   \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                                                       \
      ckpt::cuda::Result (*)(ckpt::cuda::DevicePtr, const void*, std::size_t, ckpt::cuda::Stream))                     \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", ckpt::cuda::Result (*)(void*, ckpt::cuda::DevicePtr, std::size_t))              \
    X(cuStreamCreate, "cuStreamCreate", ckpt::cuda::Result (*)(ckpt::cuda::Stream*, unsigned int))                     \
    X(cuStreamDestroy, "cuStreamDestroy_v2", ckpt::cuda::Result (*)(ckpt::cuda::Stream))                               \
    X(cuStreamSynchronize, "cuStreamSynchronize", ckpt::cuda::Result (*)(ckpt::cuda::Stream))                          \
    X(cuEventCreate, "cuEventCreate", ckpt::cuda::Result (*)(ckpt::cuda::Event*, unsigned int))                        \
    X(cuEventRecord, "cuEventRecord", ckpt::cuda::Result (*)(ckpt::cuda::Event, ckpt::cuda::Stream))                   \
    X(cuEventSynchronize, "cuEventSynchronize", ckpt::cuda::Result (*)(ckpt::cuda::Event))                             \
    X(cuEventDestroy, "cuEventDestroy_v2", ckpt::cuda::Result (*)(ckpt::cuda::Event))

}  // namespace ckpt::cuda
