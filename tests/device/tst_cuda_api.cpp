// core/device/cuda_api.h declares the Driver API entry points the CUDA engine binds with dlsym,
// without the toolkit. Compiled against the toolkit's own cuda.h, this checks that every symbol
// name is the one cuda.h's macros resolve the plain name to, that every signature has the same
// shape (arity, and each parameter's and the result's size and kind), and that the error numbers and
// flags match. It fails to compile when they drift; the test body only reports what was compared.
#include "device/cuda_api.h"

#include <QTest>

#include <cuda.h>
#include <string_view>
#include <type_traits>

namespace {

template <class A, class B> constexpr bool sameKind()
{
    return sizeof(A) == sizeof(B) && std::is_pointer_v<A> == std::is_pointer_v<B> &&
           (std::is_integral_v<A> || std::is_enum_v<A>) == (std::is_integral_v<B> || std::is_enum_v<B>);
}

template <class F, class G> struct SameShape : std::false_type {
};
template <class R1, class... A1, class R2, class... A2> struct SameShape<R1 (*)(A1...), R2 (*)(A2...)> {
    static constexpr bool value = sizeof...(A1) == sizeof...(A2) && sameKind<R1, R2>() && (sameKind<A1, A2>() && ...);
};

#define CKPTSCOPE_STR2(x) #x
#define CKPTSCOPE_STR(x) CKPTSCOPE_STR2(x)

// cuda.h maps cuMemAlloc to cuMemAlloc_v2 and so on: the name stringised after that expansion is
// the symbol the driver exports for this toolkit's headers.
#define CKPTSCOPE_CHECK(member, symbol, type)                                                                          \
    static_assert(std::string_view(symbol) == std::string_view(CKPTSCOPE_STR(member)),                                 \
                  "symbol of " #member " differs from cuda.h's");                                                      \
    static_assert(SameShape<type, decltype(&::member)>::value, "signature of " #member " differs from cuda.h's");
CKPTSCOPE_CUDA_FUNCTIONS(CKPTSCOPE_CHECK)
#undef CKPTSCOPE_CHECK

static_assert(ckpt::cuda::kSuccess == CUDA_SUCCESS);
static_assert(ckpt::cuda::kErrorInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(ckpt::cuda::kErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(ckpt::cuda::kErrorNotInitialized == CUDA_ERROR_NOT_INITIALIZED);
static_assert(ckpt::cuda::kErrorNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(ckpt::cuda::kErrorInvalidDevice == CUDA_ERROR_INVALID_DEVICE);
static_assert(ckpt::cuda::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(ckpt::cuda::kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(ckpt::cuda::kHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(std::is_same_v<ckpt::cuda::Context, CUcontext> && std::is_same_v<ckpt::cuda::Stream, CUstream> &&
              std::is_same_v<ckpt::cuda::Event, CUevent> && std::is_same_v<ckpt::cuda::DevicePtr, CUdeviceptr>);
static_assert(sizeof(ckpt::cuda::Uuid) == sizeof(CUuuid));

}  // namespace

class TestCudaApi : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void declarationsMatchTheToolkit()
    {
        int n = 0;
#define CKPTSCOPE_COUNT(member, symbol, type) ++n;
        CKPTSCOPE_CUDA_FUNCTIONS(CKPTSCOPE_COUNT)
#undef CKPTSCOPE_COUNT
        qInfo("%d entry points checked against cuda.h of CUDA %d.%d", n, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
        QVERIFY(n >= 20);
    }
};

QTEST_GUILESS_MAIN(TestCudaApi)
#include "tst_cuda_api.moc"
