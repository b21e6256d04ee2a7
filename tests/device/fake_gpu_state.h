/* The state a fake NVIDIA driver keeps for tests on machines without a GPU, shared by the fake
 * libcuda (tests/device/fake_cuda.c), which allocates, and the fake NVML (fake_nvml.c), which
 * reports: a file named by FAKE_GPU_STATE, mapped MAP_SHARED by every process using either, so a
 * test-load's helper and the client's memory sampler see the same devices. Each process's memory on
 * each device is one row; a row whose process is gone counts for nothing, as the real driver frees
 * a dead process's memory. */
#ifndef CKPTSCOPE_FAKE_GPU_STATE_H
#define CKPTSCOPE_FAKE_GPU_STATE_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAKE_GPU_MAX_DEVICES 16
#define FAKE_GPU_MAX_ROWS 256
#define FAKE_GPU_MAGIC 0x46474155u

struct FakeGpuRow {
    int pid; /* 0: free row */
    int device;
    unsigned long long bytes;
};

struct FakeGpuState {
    unsigned magic;
    unsigned devices;      /* physical GPUs: state slots 0 .. devices-1 */
    unsigned migInstances; /* MIG instances of GPU fakeMigGpu(): slots devices .. devices+migInstances-1 */
    int allocLock;         /* pid of the process between its check and its charge (fakeGpuLock), or 0 */
    unsigned long long total[FAKE_GPU_MAX_DEVICES];
    struct FakeGpuRow rows[FAKE_GPU_MAX_ROWS];
};

/* Devices and their sizes come from FAKE_CUDA_DEVICES ("16384,8192": MiB each; default two of 16
 * GiB), fixed by the first process that creates the file. With FAKE_MIG_GPU=k, physical GPU k is in
 * MIG mode with FAKE_MIG_INSTANCES (default 1) instances of FAKE_MIG_MIB (default 4096) MiB each,
 * kept in the slots after the last physical device (fakeMigSlot). NULL when FAKE_GPU_STATE is unset.
 * A test process that moves to a new state file (a fresh fake machine) gets it: the mapping is kept
 * per path. */
static inline struct FakeGpuState* fakeGpuState(void)
{
    static struct FakeGpuState* state;
    static char statePath[512];
    const char* path = getenv("FAKE_GPU_STATE");
    if (!path || !*path) {
        return NULL;
    }
    if (state && strcmp(path, statePath) == 0) {
        return state;
    }
    strncpy(statePath, path, sizeof statePath - 1);
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) {
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 ||
        (st.st_size < (off_t)sizeof(struct FakeGpuState) && ftruncate(fd, sizeof(struct FakeGpuState)) != 0)) {
        close(fd);
        return NULL;
    }
    void* p = mmap(NULL, sizeof(struct FakeGpuState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        return NULL;
    }
    struct FakeGpuState* s = (struct FakeGpuState*)p;
    unsigned expected = 0;
    if (__atomic_compare_exchange_n(&s->magic, &expected, 1u, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        const char* spec = getenv("FAKE_CUDA_DEVICES");
        char list[256] = {0};
        strncpy(list, spec && *spec ? spec : "16384,16384", sizeof list - 1);
        unsigned n = 0;
        for (char* mib = strtok(list, ","); mib && n < FAKE_GPU_MAX_DEVICES; mib = strtok(NULL, ",")) {
            s->total[n++] = strtoull(mib, NULL, 10) << 20;
        }
        s->devices = n;
        const char* mig = getenv("FAKE_MIG_GPU");
        if (mig && *mig) {
            const char* count = getenv("FAKE_MIG_INSTANCES");
            const char* mib = getenv("FAKE_MIG_MIB");
            unsigned instances = count && *count ? (unsigned)atoi(count) : 1;
            for (unsigned j = 0; j < instances && n + j < FAKE_GPU_MAX_DEVICES; ++j) {
                s->total[n + j] = strtoull(mib && *mib ? mib : "4096", NULL, 10) << 20;
                s->migInstances = j + 1;
            }
        }
        __atomic_store_n(&s->magic, FAKE_GPU_MAGIC, __ATOMIC_SEQ_CST);
    }
    while (__atomic_load_n(&s->magic, __ATOMIC_SEQ_CST) != FAKE_GPU_MAGIC) {
        usleep(100);
    }
    state = s;
    return state;
}

/* The physical GPU in MIG mode (FAKE_MIG_GPU), or -1; the slot of its instance j; which instance a
 * slot is (-1 for a physical GPU). */
static inline int fakeMigGpu(void)
{
    const char* mig = getenv("FAKE_MIG_GPU");
    return mig && *mig ? atoi(mig) : -1;
}
static inline int fakeMigSlot(const struct FakeGpuState* s, unsigned j)
{
    return (int)(s->devices + j);
}
static inline int fakeMigOfSlot(const struct FakeGpuState* s, int slot)
{
    return slot >= (int)s->devices && slot < (int)(s->devices + s->migInstances) ? slot - (int)s->devices : -1;
}

/* A physical GPU this job cannot open (FAKE_GPU_NO_ACCESS="1,3"): Slurm's cgroups deny its device
 * node, so NVML counts it but cannot open a handle to it, and CUDA does not enumerate it. */
static inline int fakeNoAccess(int gpu)
{
    const char* list = getenv("FAKE_GPU_NO_ACCESS");
    for (const char* p = list; p && *p;) {
        char* end = NULL;
        const long v = strtol(p, &end, 10);
        if (end == p) {
            break;
        }
        if (v == gpu) {
            return 1;
        }
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* The UUID bytes of a physical GPU i: byte 15 is i, byte 0 is i ^ 1 (0 for GPU 1, whose UUID
 * GPU-00000000-0000-0000-0000-000000000001 the window's tests name in full), so a short prefix, as
 * CUDA_VISIBLE_DEVICES takes one, names one GPU. */
static inline void fakeGpuUuidBytes(int gpu, unsigned char out[16])
{
    memset(out, 0, 16);
    out[0] = (unsigned char)(gpu ^ 1);
    out[15] = (unsigned char)gpu;
}

/* The UUID bytes of a slot: a physical GPU's, or MIG instance j of GPU k's: MIG-11111111-...-0000jjkk,
 * as both fakes print them. */
static inline void fakeUuidBytes(const struct FakeGpuState* s, int slot, unsigned char out[16])
{
    const int j = fakeMigOfSlot(s, slot);
    if (j < 0) {
        fakeGpuUuidBytes(slot, out);
        return;
    }
    memset(out, 0, 16);
    memset(out, 0x11, 4);
    out[14] = (unsigned char)j;
    out[15] = (unsigned char)fakeMigGpu();
}

/* "GPU-01000000-0000-0000-0000-000000000000" from 16 bytes and a prefix. */
static inline void fakeUuidText(const char* prefix, const unsigned char b[16], char* out, size_t len)
{
    snprintf(out, len, "%s%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static inline int fakeGpuAlive(int pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/* Bytes on a device: every live process's row, or one process's (pid > 0). */
static inline unsigned long long fakeGpuUsed(const struct FakeGpuState* s, int device, int pid)
{
    unsigned long long sum = 0;
    for (int i = 0; i < FAKE_GPU_MAX_ROWS; ++i) {
        int p = __atomic_load_n(&s->rows[i].pid, __ATOMIC_SEQ_CST);
        if (p != 0 && s->rows[i].device == device && (pid == 0 ? fakeGpuAlive(p) : p == pid)) {
            sum += __atomic_load_n(&s->rows[i].bytes, __ATOMIC_SEQ_CST);
        }
    }
    return sum;
}

/* Held across an allocation's "does it fit" and its charge, so ranks allocating at once cannot all
 * pass the check on the same free bytes (the real driver's allocator is one arbiter). A holder that
 * died is overtaken, as the driver frees a dead process's memory. */
static inline void fakeGpuLock(struct FakeGpuState* s)
{
    const int pid = getpid();
    for (;;) {
        int owner = 0;
        if (__atomic_compare_exchange_n(&s->allocLock, &owner, pid, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            return;
        }
        if (!fakeGpuAlive(owner) &&
            __atomic_compare_exchange_n(&s->allocLock, &owner, pid, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            return;
        }
        usleep(50);
    }
}
static inline void fakeGpuUnlock(struct FakeGpuState* s)
{
    __atomic_store_n(&s->allocLock, 0, __ATOMIC_SEQ_CST);
}

#endif
