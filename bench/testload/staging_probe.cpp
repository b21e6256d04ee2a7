// The CUDA engine's copy path stripped to its bones, to see what the host side can feed the PCIe
// link on a GPU machine without building ckptscope there: FILE mapped, read in BUFFER_MIB pieces
// by THREADS threads (each a page-aligned slice of the piece, memcpy, or streaming stores with
// NT=1) into BUFFERS pinned buffers, each buffer handed to cuMemcpyHtoDAsync on one of two streams
// once full. Prints the end-to-end GB/s (from the first byte read to the last one on the GPU).
// Not built by CMake; on the GPU machine (only the driver is needed):
//
//   g++ -std=c++20 -O2 -pthread staging_probe.cpp -o staging_probe -l:libcuda.so.1
//   ./staging_probe FILE THREADS [NT=0] [BUFFER_MIB=64] [BUFFERS=3]
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <emmintrin.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern "C" {
int cuInit(unsigned);
int cuDevicePrimaryCtxRetain(void**, int);
int cuCtxSetCurrent(void*);
int cuCtxSynchronize();
int cuMemAlloc_v2(unsigned long long*, size_t);
int cuMemHostAlloc(void**, size_t, unsigned);
int cuMemcpyHtoDAsync_v2(unsigned long long, const void*, size_t, void*);
int cuStreamCreate(void**, unsigned);
int cuEventCreate(void**, unsigned);
int cuEventRecord(void*, void*);
int cuEventSynchronize(void*);
}

static void streamingCopy(char* d, const char* s, size_t n)  // d 16-byte aligned
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int j = 0; j < 4; ++j) {
            _mm_stream_si128(reinterpret_cast<__m128i*>(d + i) + j,
                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i) + j));
        }
    }
    std::memcpy(d + i, s + i, n - i);
    _mm_sfence();
}

int main(int argc, char** argv)
{
    if (argc < 3) {
        std::fprintf(stderr, "usage: staging_probe FILE THREADS [NT=0] [BUFFER_MIB=64] [BUFFERS=3]\n");
        return 2;
    }
    const int threads = std::max(1, std::atoi(argv[2]));
    const bool nt = argc > 3 && std::atoi(argv[3]) != 0;
    const size_t bufferBytes = (argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 64) << 20;
    const int buffers = std::clamp(argc > 5 ? std::atoi(argv[5]) : 3, 1, 16);
    const int fd = open(argv[1], O_RDONLY);
    const off_t end = fd < 0 ? -1 : lseek(fd, 0, SEEK_END);
    if (end <= 0) {
        std::perror(argv[1]);
        return 1;
    }
    const auto n = static_cast<size_t>(end);
    void* ctx = nullptr;
    unsigned long long dst = 0;
    void* streams[2] = {};
    std::vector<char*> staging(buffers);
    std::vector<void*> events(buffers);
    if (cuInit(0) != 0 || cuDevicePrimaryCtxRetain(&ctx, 0) != 0 || cuCtxSetCurrent(ctx) != 0 ||
        cuMemAlloc_v2(&dst, n) != 0 || cuStreamCreate(&streams[0], 1) != 0 || cuStreamCreate(&streams[1], 1) != 0) {
        std::fprintf(stderr, "CUDA setup failed\n");
        return 1;
    }
    for (int i = 0; i < buffers; ++i) {
        if (cuMemHostAlloc(reinterpret_cast<void**>(&staging[i]), bufferBytes, 1) != 0 ||
            cuEventCreate(&events[i], 2) != 0) {
            std::fprintf(stderr, "CUDA setup failed\n");
            return 1;
        }
    }
    const auto* map = static_cast<const char*>(mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0));
    size_t at = 0, piece = 0, slice = 0;
    int b = 0;
    bool done = false;
    auto fillSlice = [&](int t) {
        const size_t from = t * slice;
        if (from < piece) {
            const size_t len = std::min(slice, piece - from);
            nt ? streamingCopy(staging[b] + from, map + at + from, len)
               : (void)std::memcpy(staging[b] + from, map + at + from, len);
        }
    };
    std::barrier sync(threads);
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) {
        pool.emplace_back([&, t] {
            for (;;) {
                sync.arrive_and_wait();
                if (done) {
                    return;
                }
                fillSlice(t);
                sync.arrive_and_wait();
            }
        });
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; at < n; ++i, at += piece) {
        b = static_cast<int>(i % buffers);
        cuEventSynchronize(events[b]);
        piece = std::min(bufferBytes, n - at);
        slice = ((piece + threads - 1) / threads + 4095) / 4096 * 4096;
        sync.arrive_and_wait();
        fillSlice(0);
        sync.arrive_and_wait();
        cuMemcpyHtoDAsync_v2(dst + at, staging[b], piece, streams[b % 2]);
        cuEventRecord(events[b], streams[b % 2]);
    }
    cuCtxSynchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("threads %d %s, %d x %zu MiB: %.1f GB/s (%.3f s)\n", threads, nt ? "streaming stores" : "memcpy",
                buffers, bufferBytes >> 20, static_cast<double>(n) / s / 1e9, s);
    done = true;
    sync.arrive_and_wait();
    for (auto& t : pool) {
        t.join();
    }
}
