/* A pass-through libnvidia-ml for a real GPU box that reports every process under a PID that is not
 * its own (PID + 1000000), as NVML does for a process inside a container's PID namespace when the
 * driver does not translate PIDs. With CKPTSCOPE_NVML_LIBRARY pointing here, the CUDA engine's
 * fallbacks (context from the device's rise, peak from the driver's free memory) run against the
 * real driver's figures. scripts/gpu-proof.sh builds it on the GPU box with cc and uses it in step 2.
 * Only the symbols ckptscope's loader binds are forwarded. */
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

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} ProcessInfo;

R nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned* count, ProcessInfo* infos)
{
    R (*f)(void*, unsigned*, ProcessInfo*) = (R(*)(void*, unsigned*, ProcessInfo*))real(
        "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!f) {
        return 999;
    }
    const R r = f(d, count, infos);
    if (r == 0 && infos) {
        for (unsigned i = 0; i < *count; ++i) {
            infos[i].pid += 1000000;
        }
    }
    return r;
}
