/* A stand-in libnvidia-ml for tests on machines without a GPU. Either two GPUs whose used memory
 * (and one compute process) are read on every call from the file named by FAKE_NVML_STATE:
 *     "<used0> <used1> <pid> <gpu> <bytes>"     (pid 0: no process)
 * or, when FAKE_GPU_STATE is set, the devices the fake libcuda allocates on (fake_gpu_state.h), each
 * live process's memory listed as NVML lists compute processes.
 * Only the symbols ckptscope's loader binds are provided, with NVML's ABI. */
#include "fake_gpu_state.h"

#include <stdio.h>

typedef int nvmlReturn_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

#define TOTAL (16ULL << 30)
static int devices[FAKE_GPU_MAX_DEVICES];

static void readState(unsigned long long used[2], unsigned* pid, unsigned* gpu, unsigned long long* bytes)
{
    used[0] = used[1] = 0;
    *pid = *gpu = 0;
    *bytes = 0;
    const char* path = getenv("FAKE_NVML_STATE");
    FILE* f = path ? fopen(path, "r") : NULL;
    if (!f) {
        return;
    }
    if (fscanf(f, "%llu %llu %u %u %llu", &used[0], &used[1], pid, gpu, bytes) < 2) {
        used[0] = used[1] = 0;
    }
    fclose(f);
}

nvmlReturn_t nvmlInit_v2(void) { return 0; }
nvmlReturn_t nvmlShutdown(void) { return 0; }
static unsigned deviceCount(void)
{
    const struct FakeGpuState* s = fakeGpuState();
    return s ? s->devices : 2;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n)
{
    *n = deviceCount();
    return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, void** dev)
{
    if (i >= deviceCount()) {
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    }
    *dev = &devices[i];
    return 0;
}
static int indexOf(void* dev) { return (int)((int*)dev - devices); }
nvmlReturn_t nvmlDeviceGetName(void* dev, char* name, unsigned len)
{
    snprintf(name, len, "Fake GPU %d", indexOf(dev));
    return 0;
}
nvmlReturn_t nvmlDeviceGetUUID(void* dev, char* uuid, unsigned len)
{
    snprintf(uuid, len, "GPU-00000000-0000-0000-0000-00000000000%d", indexOf(dev));
    return 0;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(void* dev, nvmlMemory_t* m)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (s) {
        m->total = s->total[indexOf(dev)];
        m->used = fakeGpuUsed(s, indexOf(dev), 0);
        m->free = m->total - m->used;
        return 0;
    }
    unsigned long long used[2], bytes;
    unsigned pid, gpu;
    readState(used, &pid, &gpu, &bytes);
    m->total = TOTAL;
    m->used = used[indexOf(dev)];
    m->free = TOTAL - m->used;
    return 0;
}
/* The live processes with memory on a device, one entry each, as the driver lists them. */
static unsigned sharedProcesses(const struct FakeGpuState* s, int device, nvmlProcessInfo_t* out, unsigned room)
{
    unsigned n = 0;
    for (int i = 0; i < FAKE_GPU_MAX_ROWS; ++i) {
        int pid = s->rows[i].pid;
        if (pid == 0 || s->rows[i].device != device || !fakeGpuAlive(pid) || s->rows[i].bytes == 0) {
            continue;
        }
        if (out && n < room) {
            memset(&out[n], 0, sizeof out[n]);
            out[n].pid = (unsigned)pid;
            out[n].usedGpuMemory = fakeGpuUsed(s, device, pid);
        }
        ++n;
    }
    return n;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* dev, unsigned* count, nvmlProcessInfo_t* infos)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (s) {
        unsigned n = sharedProcesses(s, indexOf(dev), infos, infos ? *count : 0);
        unsigned had = *count;
        *count = n;
        return (infos == NULL || had < n) ? (n == 0 ? 0 : 7) : 0; /* 7: NVML_ERROR_INSUFFICIENT_SIZE */
    }
    unsigned long long used[2], bytes;
    unsigned pid, gpu;
    readState(used, &pid, &gpu, &bytes);
    unsigned n = (pid != 0 && (int)gpu == indexOf(dev)) ? 1 : 0;
    if (infos == NULL || *count < n) {
        unsigned had = *count;
        *count = n;
        return (n == 0 && infos == NULL) ? 0 : (had < n ? 7 : 0); /* 7: NVML_ERROR_INSUFFICIENT_SIZE */
    }
    *count = n;
    if (n == 1) {
        memset(infos, 0, sizeof *infos);
        infos[0].pid = pid;
        infos[0].usedGpuMemory = bytes;
    }
    return 0;
}
const char* nvmlErrorString(nvmlReturn_t r) { return r == 0 ? "Success" : "Fake error"; }
nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned len)
{
    snprintf(v, len, "999.99-fake");
    return 0;
}
