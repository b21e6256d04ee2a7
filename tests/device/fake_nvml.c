/* A stand-in libnvidia-ml for tests on machines without a GPU. Either two GPUs whose used memory
 * (and one compute process) are read on every call from the file named by FAKE_NVML_STATE:
 *     "<used0> <used1> <pid> <gpu> <bytes>"     (pid 0: no process)
 * or, when FAKE_GPU_STATE is set, the devices the fake libcuda allocates on (fake_gpu_state.h), each
 * live process's memory listed as NVML lists compute processes. Also:
 *   FAKE_NVML_PID_OFFSET  added to every PID it reports: NVML in a container's PID namespace reports
 *                         host PIDs, which are not the ones the processes see
 *   FAKE_NVML_MPS_SERVER  the PID of an MPS server: the compute list holds it alone and every other
 *                         process is an MPS client, listed by the MPS calls (and the detail list's
 *                         MPS mode), as under the Multi-Process Service
 *   FAKE_MIG_GPU=k        GPU k is in MIG mode with FAKE_MIG_INSTANCES MIG devices; processes on them
 *                         and on GPU k report no per-process memory, as NVML does for unprivileged
 *                         users
 *   FAKE_GPU_NO_ACCESS    GPUs counted but not openable (NO_PERMISSION), as under Slurm's cgroups
 * GPU i sits on PCI bus 0x10+i. Only the symbols ckptscope's loader binds are provided, with NVML's
 * ABI.
 *
 * Which driver it is, the thing NVML's clients have had to guess, is fixed when it is built
 * (tests/device/CMakeLists.txt builds one library per driver):
 *   FAKE_NVML_V3_STRIDE   the bytes each entry of the _v3 process calls takes: 24 (nvmlProcessInfo_t,
 *                         R510 on and 535.104 on), 32 (535.43-535.86, which wrote the later
 *                         nvmlProcessDetail_v1_t there under the same name), 16 (as reported on
 *                         550.127); 0: no _v3 symbols (drivers before R510)
 *   FAKE_NVML_DETAIL_LIST 1: nvmlDeviceGetRunningProcessDetailList, versioned, 32-byte entries;
 *                         2: the symbol is there and answers NOT_SUPPORTED; 0: no such symbol
 *   FAKE_NVML_OLD_MIG     MIG UUIDs as drivers before R470 wrote them: MIG-GPU-<uuid>/<gi>/<ci> */
#include "fake_gpu_state.h"

#include <limits.h>
#include <stdio.h>

#ifndef FAKE_NVML_V3_STRIDE
#define FAKE_NVML_V3_STRIDE 24
#endif
#ifndef FAKE_NVML_DETAIL_LIST
#define FAKE_NVML_DETAIL_LIST 1
#endif
#ifndef FAKE_NVML_DRIVER
#define FAKE_NVML_DRIVER "999.99-fake"
#endif

typedef int nvmlReturn_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

enum {
    SUCCESS = 0,
    INVALID_ARGUMENT = 2,
    NOT_SUPPORTED = 3,
    NO_PERMISSION = 4,
    NOT_FOUND = 6,
    INSUFFICIENT_SIZE = 7,
};
enum { MODE_COMPUTE = 0, MODE_GRAPHICS = 1, MODE_MPS = 2 };

#define TOTAL (16ULL << 30)
static int devices[FAKE_GPU_MAX_DEVICES];
static int migDevices[FAKE_GPU_MAX_DEVICES]; /* instance j's handle */

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

static unsigned envUnsigned(const char* name)
{
    const char* v = getenv(name);
    return v ? (unsigned)strtoul(v, NULL, 10) : 0;
}

nvmlReturn_t nvmlInit_v2(void)
{
    return SUCCESS;
}
nvmlReturn_t nvmlShutdown(void)
{
    return SUCCESS;
}
static unsigned deviceCount(void)
{
    const struct FakeGpuState* s = fakeGpuState();
    return s ? s->devices : 2;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n)
{
    *n = deviceCount(); /* every GPU of the machine, openable here or not */
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, void** dev)
{
    if (i >= deviceCount()) {
        return INVALID_ARGUMENT;
    }
    if (fakeNoAccess((int)i)) {
        return NO_PERMISSION;
    }
    *dev = &devices[i];
    return SUCCESS;
}
static int migOf(void* dev)
{
    const int* p = dev;
    return p >= migDevices && p < migDevices + FAKE_GPU_MAX_DEVICES ? (int)(p - migDevices) : -1;
}
/* The state slot of a handle: GPU i is slot i, MIG instance j its slot after the last GPU. */
static int slotOf(void* dev)
{
    const struct FakeGpuState* s = fakeGpuState();
    const int j = migOf(dev);
    return j >= 0 ? (s ? fakeMigSlot(s, (unsigned)j) : 0) : (int)((int*)dev - devices);
}
static int physicalOf(void* dev)
{
    return migOf(dev) >= 0 ? fakeMigGpu() : (int)((int*)dev - devices);
}
static int inMigMode(void* dev)
{
    return fakeGpuState() && migOf(dev) < 0 && physicalOf(dev) == fakeMigGpu();
}
nvmlReturn_t nvmlDeviceGetName(void* dev, char* name, unsigned len)
{
    if (migOf(dev) >= 0) {
        snprintf(name, len, "Fake GPU %d MIG 1g", physicalOf(dev));
    } else {
        snprintf(name, len, "Fake GPU %d", physicalOf(dev));
    }
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUUID(void* dev, char* uuid, unsigned len)
{
    const struct FakeGpuState* s = fakeGpuState();
    unsigned char b[16];
    const int j = migOf(dev);
    if (j >= 0 && s) {
#ifdef FAKE_NVML_OLD_MIG
        char parent[64];
        fakeGpuUuidBytes(fakeMigGpu(), b);
        fakeUuidText("", b, parent, sizeof parent);
        snprintf(uuid, len, "MIG-GPU-%s/%d/0", parent, j + 1); /* GPU instance j+1, compute instance 0 */
#else
        fakeUuidBytes(s, fakeMigSlot(s, (unsigned)j), b);
        fakeUuidText("MIG-", b, uuid, len);
#endif
        return SUCCESS;
    }
    fakeGpuUuidBytes(physicalOf(dev), b);
    fakeUuidText("GPU-", b, uuid, len);
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(void* dev, nvmlPciInfo_t* pci)
{
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x10u + (unsigned)physicalOf(dev);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02x:00.0", pci->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02x:00.0", pci->bus);
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigMode(void* dev, unsigned* current, unsigned* pending)
{
    *current = *pending = inMigMode(dev) ? 1 : 0;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void* dev, unsigned* count)
{
    (void)dev;
    *count = 7;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void* dev, unsigned index, void** mig)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (!inMigMode(dev) || index >= s->migInstances) {
        return NOT_FOUND; /* empty slots, as on a real GPU with fewer instances than slots */
    }
    *mig = &migDevices[index];
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(void* dev, nvmlMemory_t* m)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (s) {
        const int slot = slotOf(dev);
        m->total = s->total[slot];
        m->used = fakeGpuUsed(s, slot, 0);
        if (inMigMode(dev)) {
            for (unsigned j = 0; j < s->migInstances; ++j) { /* the GPU holds its instances' memory */
                m->used += fakeGpuUsed(s, fakeMigSlot(s, j), 0);
            }
        }
        m->free = m->total - m->used;
        return SUCCESS;
    }
    unsigned long long used[2], bytes;
    unsigned pid, gpu;
    readState(used, &pid, &gpu, &bytes);
    m->total = TOTAL;
    m->used = used[slotOf(dev)];
    m->free = TOTAL - m->used;
    return SUCCESS;
}

/* --- Process lists ------------------------------------------------------------------------------ */

struct Entry {
    unsigned pid;
    unsigned long long used;
    unsigned gpuInstance, computeInstance;
};
#define MAX_ENTRIES FAKE_GPU_MAX_ROWS

/* The live processes with memory on a slot that `mode` lists there (under MPS the server is the one
 * compute process and the others are its clients). */
static unsigned sharedProcesses(const struct FakeGpuState* s, int slot, int mode, int hideMemory, int gi,
                                struct Entry* out, unsigned n)
{
    const int server = (int)envUnsigned("FAKE_NVML_MPS_SERVER");
    for (int i = 0; i < FAKE_GPU_MAX_ROWS && n < MAX_ENTRIES; ++i) {
        const int pid = s->rows[i].pid;
        if (pid == 0 || s->rows[i].device != slot || !fakeGpuAlive(pid) || s->rows[i].bytes == 0) {
            continue;
        }
        const int client = server != 0 && pid != server;
        if (mode == MODE_GRAPHICS || (mode == MODE_MPS) != client) {
            continue;
        }
        out[n].pid = (unsigned)pid + envUnsigned("FAKE_NVML_PID_OFFSET");
        out[n].used = hideMemory ? ULLONG_MAX : fakeGpuUsed(s, slot, pid);
        out[n].gpuInstance = gi < 0 ? 0xffffffffu : (unsigned)gi;
        out[n].computeInstance = gi < 0 ? 0xffffffffu : 0;
        ++n;
    }
    return n;
}

static unsigned processesOf(void* dev, int mode, struct Entry* out)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (s) {
        const int j = migOf(dev);
        if (j >= 0) {
            return sharedProcesses(s, fakeMigSlot(s, (unsigned)j), mode, 1, j + 1, out, 0);
        }
        if (inMigMode(dev)) { /* the GPU's handle: every instance's processes, without their memory */
            unsigned n = 0;
            for (unsigned k = 0; k < s->migInstances; ++k) {
                n = sharedProcesses(s, fakeMigSlot(s, k), mode, 1, (int)k + 1, out, n);
            }
            return n;
        }
        return sharedProcesses(s, slotOf(dev), mode, 0, -1, out, 0);
    }
    unsigned long long used[2], bytes;
    unsigned pid, gpu;
    readState(used, &pid, &gpu, &bytes);
    if (mode != MODE_COMPUTE || pid == 0 || (int)gpu != slotOf(dev)) {
        return 0;
    }
    out[0] = (struct Entry){pid, bytes, 0xffffffffu, 0xffffffffu};
    return 1;
}

/* Entry i as a driver writes it, `stride` bytes: pid, 4 bytes of padding, usedGpuMemory, then (24 and
 * 32 bytes) gpuInstanceId and computeInstanceId, then (32 bytes) usedGpuCcProtectedMemory. */
static void writeEntry(void* base, unsigned i, unsigned stride, const struct Entry* e)
{
    unsigned char record[32] = {0};
    memcpy(record, &e->pid, 4);
    memcpy(record + 8, &e->used, 8);
    memcpy(record + 16, &e->gpuInstance, 4);
    memcpy(record + 20, &e->computeInstance, 4);
    memcpy((unsigned char*)base + (size_t)i * stride, record, stride);
}

/* The count-then-fill protocol of the nvmlDeviceGet*RunningProcesses calls: a count too small (0 with
 * a NULL array to ask) gets INSUFFICIENT_SIZE and the count, or SUCCESS when there is none. */
static nvmlReturn_t listCall(void* dev, int mode, unsigned* count, void* infos, unsigned stride)
{
    struct Entry e[MAX_ENTRIES];
    const unsigned n = processesOf(dev, mode, e);
    if (infos == NULL || *count < n) {
        *count = n;
        return n == 0 ? SUCCESS : INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; ++i) {
        writeEntry(infos, i, stride, &e[i]);
    }
    *count = n;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(void* dev, unsigned* count, void* infos)
{
    return listCall(dev, MODE_COMPUTE, count, infos, 16); /* nvmlProcessInfo_v1_t */
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(void* dev, unsigned* count, void* infos)
{
    return listCall(dev, MODE_COMPUTE, count, infos, 24); /* nvmlProcessInfo_v2_t */
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(void* dev, unsigned* count, void* infos)
{
    return listCall(dev, MODE_MPS, count, infos, 16);
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(void* dev, unsigned* count, void* infos)
{
    return listCall(dev, MODE_MPS, count, infos, 24);
}
#if FAKE_NVML_V3_STRIDE > 0
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* dev, unsigned* count, void* infos)
{
    return listCall(dev, MODE_COMPUTE, count, infos, FAKE_NVML_V3_STRIDE);
}
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(void* dev, unsigned* count, void* infos)
{
    return listCall(dev, MODE_MPS, count, infos, FAKE_NVML_V3_STRIDE);
}
#endif

#if FAKE_NVML_DETAIL_LIST > 0
typedef struct {
    unsigned version, mode, numProcArrayEntries;
    void* procArray; /* nvmlProcessDetail_v1_t: 32 bytes each */
} nvmlProcessDetailList_v1_t;

nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(void* dev, nvmlProcessDetailList_v1_t* list)
{
#if FAKE_NVML_DETAIL_LIST == 2
    (void)dev;
    (void)list;
    return NOT_SUPPORTED;
#else
    const unsigned v1 = (unsigned)sizeof(nvmlProcessDetailList_v1_t) | 1u << 24; /* NVML_STRUCT_VERSION */
    if (list == NULL || list->version != v1 || list->mode > MODE_MPS) {
        return INVALID_ARGUMENT;
    }
    return listCall(dev, (int)list->mode, &list->numProcArrayEntries, list->procArray, 32);
#endif
}
#endif

const char* nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case SUCCESS:
        return "Success";
    case INVALID_ARGUMENT:
        return "Invalid Argument";
    case NOT_SUPPORTED:
        return "Not Supported";
    case NO_PERMISSION:
        return "Insufficient Permissions";
    case NOT_FOUND:
        return "Not Found";
    case INSUFFICIENT_SIZE:
        return "Insufficient Size";
    default:
        return "Fake error";
    }
}
nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned len)
{
    snprintf(v, len, "%s", FAKE_NVML_DRIVER);
    return SUCCESS;
}
