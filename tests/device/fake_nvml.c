/* A stand-in libnvidia-ml for tests on machines without a GPU: two GPUs whose used memory (and one
 * compute process) are read on every call from the file named by FAKE_NVML_STATE:
 *     "<used0> <used1> <pid> <gpu> <bytes>"     (pid 0: no process)
 * Only the symbols ckptscope's loader binds are provided, with NVML's ABI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
static int devices[2];

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
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n)
{
    *n = 2;
    return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, void** dev)
{
    if (i >= 2) {
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
    unsigned long long used[2], bytes;
    unsigned pid, gpu;
    readState(used, &pid, &gpu, &bytes);
    m->total = TOTAL;
    m->used = used[indexOf(dev)];
    m->free = TOTAL - m->used;
    return 0;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* dev, unsigned* count, nvmlProcessInfo_t* infos)
{
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
