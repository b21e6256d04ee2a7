/* A pass-through libnvidia-ml for a real GPU box that reports every process under a PID that is not
 * its own (PID + 1000000), as NVML does for a process inside a container's PID namespace when the
 * driver does not translate PIDs. With CKPTSCOPE_NVML_LIBRARY pointing here, the CUDA engine's
 * fallbacks (context from the device's rise, peak from the driver's free memory) run against the
 * real driver's figures. scripts/gpu-proof.sh builds it on the GPU box with cc and uses it in steps 2
 * and 11. Only the symbols ckptscope's loader binds are forwarded, and of the process lists only those
 * whose entry layout is fixed: the detail list (32-byte entries, versioned) and the _v2 calls (24
 * bytes), so the PIDs it rewrites are where it rewrites them; ckptscope falls back to _v2 where the
 * driver has no detail list. */
#include <dlfcn.h>
#include <stddef.h>

static void* real(const char* name)
{
    static void* lib;
    if (!lib) {
        lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    }
    return lib ? dlsym(lib, name) : NULL;
}

#define FORWARD(ret, name, params, args)                                                                               \
    ret name params                                                                                                    \
    {                                                                                                                  \
        ret(*f) params = (ret(*) params)real(#name);                                                                   \
        return f ? f args : (ret)999;                                                                                  \
    }

typedef int R;
FORWARD(R, nvmlInit_v2, (void), ())
FORWARD(R, nvmlShutdown, (void), ())
FORWARD(R, nvmlDeviceGetCount_v2, (unsigned* n), (n))
FORWARD(R, nvmlDeviceGetHandleByIndex_v2, (unsigned i, void** d), (i, d))
FORWARD(R, nvmlDeviceGetMemoryInfo, (void* d, void* m), (d, m))
FORWARD(R, nvmlDeviceGetName, (void* d, char* s, unsigned n), (d, s, n))
FORWARD(R, nvmlDeviceGetUUID, (void* d, char* s, unsigned n), (d, s, n))
FORWARD(R, nvmlSystemGetDriverVersion, (char* s, unsigned n), (s, n))
FORWARD(R, nvmlDeviceGetPciInfo_v3, (void* d, void* p), (d, p))
FORWARD(R, nvmlDeviceGetMigMode, (void* d, unsigned* c, unsigned* p), (d, c, p))
FORWARD(R, nvmlDeviceGetMaxMigDeviceCount, (void* d, unsigned* n), (d, n))
FORWARD(R, nvmlDeviceGetMigDeviceHandleByIndex, (void* d, unsigned i, void** m), (d, i, m))

const char* nvmlErrorString(int r)
{
    const char* (*f)(int) = (const char* (*)(int))real("nvmlErrorString");
    return f ? f(r) : "NVML error";
}

#define FUNCTION_NOT_FOUND 13

/* Adds the offset to the pid of each of `count` entries of `stride` bytes (the pid comes first). */
static void shift(void* entries, unsigned count, unsigned stride)
{
    for (unsigned i = 0; i < count; ++i) {
        unsigned* pid = (unsigned*)((char*)entries + (size_t)i * stride);
        *pid += 1000000;
    }
}

#define FORWARD_LIST(name)                                                                                             \
    R name(void* d, unsigned* count, void* infos)                                                                      \
    {                                                                                                                  \
        R (*f)(void*, unsigned*, void*) = (R(*)(void*, unsigned*, void*))real(#name);                                  \
        if (!f) {                                                                                                      \
            return FUNCTION_NOT_FOUND;                                                                                 \
        }                                                                                                              \
        const R r = f(d, count, infos);                                                                                \
        if (r == 0 && infos) {                                                                                         \
            shift(infos, *count, 24);                                                                                  \
        }                                                                                                              \
        return r;                                                                                                      \
    }
FORWARD_LIST(nvmlDeviceGetComputeRunningProcesses_v2)
FORWARD_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2)

typedef struct {
    unsigned version, mode, numProcArrayEntries;
    void* procArray;
} DetailList;

R nvmlDeviceGetRunningProcessDetailList(void* d, DetailList* list)
{
    R (*f)(void*, DetailList*) = (R(*)(void*, DetailList*))real("nvmlDeviceGetRunningProcessDetailList");
    if (!f) {
        return FUNCTION_NOT_FOUND;
    }
    const R r = f(d, list);
    if (r == 0 && list && list->procArray) {
        shift(list->procArray, list->numProcArrayEntries, 32);
    }
    return r;
}
