/* A stand-in libnvidia-ml for tests on machines without a GPU. Either two GPUs whose used memory
 * (and one compute process) are read on every call from the file named by FAKE_NVML_STATE:
 *     "<used0> <used1> <pid> <gpu> <bytes>"     (pid 0: no process)
 * or, when FAKE_GPU_STATE is set, the devices the fake libcuda allocates on (fake_gpu_state.h), each
 * live process's memory listed as NVML lists compute processes. Also:
 *   FAKE_NVML_PID_OFFSET  added to every PID it reports: NVML in a container's PID namespace reports
 *                         host PIDs, which are not the ones the processes see
 *   FAKE_MIG_GPU=k        GPU k is in MIG mode with one MIG device (index 0); processes on it and on
 *                         GPU k report no per-process memory, as NVML does for unprivileged users
 * GPU i sits on PCI bus 0x10+i. Only the symbols ckptscope's loader binds are provided, with NVML's
 * ABI. */
#include "fake_gpu_state.h"

#include <limits.h>
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
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

#define TOTAL (16ULL << 30)
#define NOT_FOUND 6
static int devices[FAKE_GPU_MAX_DEVICES];
static int migDevice; /* the one MIG device's handle */

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

static unsigned pidOffset(void)
{
    const char* v = getenv("FAKE_NVML_PID_OFFSET");
    return v ? (unsigned)strtoul(v, NULL, 10) : 0;
}

nvmlReturn_t nvmlInit_v2(void)
{
    return 0;
}
nvmlReturn_t nvmlShutdown(void)
{
    return 0;
}
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
/* The state slot of a handle: GPU i is slot i, the MIG device the slot after the last GPU. */
static int slotOf(void* dev)
{
    const struct FakeGpuState* s = fakeGpuState();
    return dev == &migDevice ? (s ? fakeMigSlot(s) : 0) : (int)((int*)dev - devices);
}
static int physicalOf(void* dev)
{
    return dev == &migDevice ? fakeMigGpu() : (int)((int*)dev - devices);
}
nvmlReturn_t nvmlDeviceGetName(void* dev, char* name, unsigned len)
{
    if (dev == &migDevice) {
        snprintf(name, len, "Fake GPU %d MIG 1g", physicalOf(dev));
    } else {
        snprintf(name, len, "Fake GPU %d", physicalOf(dev));
    }
    return 0;
}
nvmlReturn_t nvmlDeviceGetUUID(void* dev, char* uuid, unsigned len)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (dev == &migDevice && s) {
        snprintf(uuid, len, "MIG-11111111-0000-0000-0000-00000000000%d", fakeMigGpu());
    } else {
        snprintf(uuid, len, "GPU-00000000-0000-0000-0000-00000000000%d", physicalOf(dev));
    }
    return 0;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(void* dev, nvmlPciInfo_t* pci)
{
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x10u + (unsigned)physicalOf(dev);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02x:00.0", pci->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02x:00.0", pci->bus);
    return 0;
}
nvmlReturn_t nvmlDeviceGetMigMode(void* dev, unsigned* current, unsigned* pending)
{
    *current = *pending = (fakeGpuState() && dev != &migDevice && physicalOf(dev) == fakeMigGpu()) ? 1 : 0;
    return 0;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void* dev, unsigned* count)
{
    (void)dev;
    *count = 7;
    return 0;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void* dev, unsigned index, void** mig)
{
    unsigned current = 0, pending = 0;
    nvmlDeviceGetMigMode(dev, &current, &pending);
    if (!current || index != 0) {
        return NOT_FOUND; /* empty slots, as on a real GPU with one instance */
    }
    *mig = &migDevice;
    return 0;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(void* dev, nvmlMemory_t* m)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (s) {
        const int slot = slotOf(dev);
        m->total = s->total[slot];
        m->used = fakeGpuUsed(s, slot, 0);
        if (dev != &migDevice && physicalOf(dev) == fakeMigGpu()) {
            m->used += fakeGpuUsed(s, fakeMigSlot(s), 0); /* the GPU holds its instances' memory */
        }
        m->free = m->total - m->used;
        return 0;
    }
    unsigned long long used[2], bytes;
    unsigned pid, gpu;
    readState(used, &pid, &gpu, &bytes);
    m->total = TOTAL;
    m->used = used[slotOf(dev)];
    m->free = TOTAL - m->used;
    return 0;
}
/* The live processes with memory on a slot, one entry each, as the driver lists them. */
static unsigned sharedProcesses(const struct FakeGpuState* s, int slot, int hideMemory, nvmlProcessInfo_t* out,
                                unsigned room)
{
    unsigned n = 0;
    for (int i = 0; i < FAKE_GPU_MAX_ROWS; ++i) {
        int pid = s->rows[i].pid;
        if (pid == 0 || s->rows[i].device != slot || !fakeGpuAlive(pid) || s->rows[i].bytes == 0) {
            continue;
        }
        if (out && n < room) {
            memset(&out[n], 0, sizeof out[n]);
            out[n].pid = (unsigned)pid + pidOffset();
            out[n].usedGpuMemory = hideMemory ? ULLONG_MAX : fakeGpuUsed(s, slot, pid);
        }
        ++n;
    }
    return n;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* dev, unsigned* count, nvmlProcessInfo_t* infos)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (s) {
        const int mig = dev == &migDevice || physicalOf(dev) == fakeMigGpu();
        const int slot = dev == &migDevice || !mig ? slotOf(dev) : fakeMigSlot(s);
        unsigned n = sharedProcesses(s, slot, mig, infos, infos ? *count : 0);
        unsigned had = *count;
        *count = n;
        return (infos == NULL || had < n) ? (n == 0 ? 0 : 7) : 0; /* 7: NVML_ERROR_INSUFFICIENT_SIZE */
    }
    unsigned long long used[2], bytes;
    unsigned pid, gpu;
    readState(used, &pid, &gpu, &bytes);
    unsigned n = (pid != 0 && (int)gpu == slotOf(dev)) ? 1 : 0;
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
const char* nvmlErrorString(nvmlReturn_t r)
{
    return r == 0 ? "Success" : "Fake error";
}
nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned len)
{
    snprintf(v, len, "999.99-fake");
    return 0;
}
