/* A stand-in libcuda.so.1 for tests on machines without a GPU: the Driver API entry points the
 * test-load engine binds (core/device/cuda_api.h), with the driver's ABI. Devices and their sizes
 * are shared with the fake NVML through FAKE_GPU_STATE (fake_gpu_state.h); device memory is host
 * memory, so copies really copy and can be read back. A host-to-device copy is asynchronous as the
 * real one is: it is queued on its stream and reads its source only when something waits for it (an
 * event recorded after it, the stream, a synchronous copy, a free), so an engine that refills a
 * staging buffer before its copy left loads the wrong bytes and --verify says so. What an
 * allocation costs is the driver's: an allocation of 2 MiB or more takes whole 2 MiB pages, smaller
 * ones are packed (512-byte aligned) into 2 MiB pages of their process and device, and a page goes
 * back when the last allocation in it is freed. Environment:
 *   FAKE_CUDA_DEVICES       "16384,8192": devices and their MiB (the first process decides)
 *   FAKE_CUDA_CONTEXT_MIB   what a primary context costs on its device (default 300)
 *   FAKE_CUDA_CONTEXT_DELAY_US  how long creating a context takes; its memory is set aside at the
 *                           start, so contexts created at once overlap as on a real GPU
 *   FAKE_CUDA_INIT_DELAY_US how long cuInit takes (seconds on a machine of many GPUs)
 *   FAKE_CUDA_NO_DEVICE     cuInit answers CUDA_ERROR_NO_DEVICE
 *   FAKE_CUDA_DELAY_US      a sleep in every host-to-device copy, to cancel a load mid-way
 *   FAKE_CUDA_DTOH_DELAY_US a sleep in every device-to-host copy: a slow --verify
 *   FAKE_CUDA_HOST_OOM      cuMemHostAlloc answers CUDA_ERROR_OUT_OF_MEMORY (no pinnable host memory)
 *   FAKE_CUDA_LOG           a file each call of interest appends a line to ("ctx 1", "alloc 0 4096"),
 *                           and "free-busy" / "freehost-busy" when memory is freed that a queued copy
 *                           still writes or reads (the copy is made first, as the driver orders it,
 *                           but an engine that frees pinned memory under a copy in flight has a race)
 *   FAKE_CUDA_ORDER         "1,0": the physical GPUs in CUDA's enumeration order (its default order,
 *                           FASTEST_FIRST, need not be NVML's PCI order)
 *   CUDA_VISIBLE_DEVICES    as the driver reads it: indices into that order or UUID prefixes (GPU-...,
 *                           MIG-..., and MIG-GPU-<uuid>/<gi>/<ci> as before R470), up to the first
 *                           that names nothing; empty hides every GPU
 *   FAKE_MIG_GPU            that GPU is in MIG mode (FAKE_MIG_INSTANCES instances). CUDA enumerates
 *                           MIG as it really does: one compute instance at most, and once a MIG
 *                           device is enumerated no other GPU at all
 *   FAKE_GPU_NO_ACCESS      GPUs whose device node this job may not open (Slurm's cgroups): CUDA
 *                           does not enumerate them
 * Built with FAKE_CUDA_PRE_R470 it is a driver before CUDA 11.4: no cuDeviceGetUuid_v2, and
 * cuDeviceGetUuid answers a MIG device with its GPU's UUID.
 * A device handle is the position in the visible list; what it allocates is kept in the state slot of
 * the physical GPU (or MIG instance) it is, so the fake NVML reports it there. */
#include "fake_gpu_state.h"

#include <stdio.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define OK 0
#define INVALID_VALUE 1
#define OUT_OF_MEMORY 2
#define NOT_INITIALIZED 3
#define NO_DEVICE 100
#define INVALID_DEVICE 101
#define INVALID_CONTEXT 201

#define PAGE (2ULL << 20)
#define SMALL_ALIGN 512ULL

static int initialised;
static __thread int current = -1; /* the device of the current context */
static int retained[FAKE_GPU_MAX_DEVICES];
static int visible[FAKE_GPU_MAX_DEVICES]; /* device handle -> state slot */
static int visibleCount;

static void sleepUs(const char* variable)
{
    const char* v = getenv(variable);
    if (v && *v) {
        usleep((useconds_t)atoi(v));
    }
}

/* The state slot a CUDA_VISIBLE_DEVICES entry names among the physical GPUs of `order`, or -1. A GPU
 * in MIG mode stands for its first instance. */
static int slotNamed(const struct FakeGpuState* s, const char* t, const int* order, int n)
{
    const int mig = fakeMigGpu();
    if (t[0] >= '0' && t[0] <= '9') {
        const int i = atoi(t);
        if (i >= n) {
            return -1;
        }
        return order[i] == mig && s->migInstances > 0 ? fakeMigSlot(s, 0) : order[i];
    }
    for (int i = 0; i < n; ++i) {
        unsigned char b[16];
        char u[96];
        if (order[i] == mig) {
            for (unsigned j = 0; j < s->migInstances; ++j) {
                fakeUuidBytes(s, fakeMigSlot(s, j), b);
                fakeUuidText("MIG-", b, u, sizeof u);
                if (strncmp(u, t, strlen(t)) == 0) {
                    return fakeMigSlot(s, j);
                }
                fakeGpuUuidBytes(mig, b); /* before R470: MIG-GPU-<its GPU's uuid>/<gi>/<ci> */
                char old[128];
                fakeUuidText("", b, u, sizeof u);
                snprintf(old, sizeof old, "MIG-GPU-%s/%u/0", u, j + 1);
                if (strcmp(old, t) == 0) {
                    return fakeMigSlot(s, j);
                }
            }
        }
        fakeGpuUuidBytes(order[i], b);
        fakeUuidText("GPU-", b, u, sizeof u);
        if (strncmp(u, t, strlen(t)) == 0) {
            return order[i] == mig && s->migInstances > 0 ? fakeMigSlot(s, 0) : order[i];
        }
    }
    return -1;
}

/* CUDA's view: the enumeration order of the GPUs this job may open, CUDA_VISIBLE_DEVICES applied as
 * the driver applies it, then MIG's rule: the first MIG device enumerated is the only device. */
static void enumerate(const struct FakeGpuState* s)
{
    int order[FAKE_GPU_MAX_DEVICES];
    int n = 0;
    const char* spec = getenv("FAKE_CUDA_ORDER");
    if (spec && *spec) {
        char list[128] = {0};
        strncpy(list, spec, sizeof list - 1);
        for (char* t = strtok(list, ","); t && n < (int)s->devices; t = strtok(NULL, ",")) {
            if (!fakeNoAccess(atoi(t))) {
                order[n++] = atoi(t);
            }
        }
    } else {
        for (int i = 0; i < (int)s->devices; ++i) {
            if (!fakeNoAccess(i)) {
                order[n++] = i;
            }
        }
    }
    int candidates[2 * FAKE_GPU_MAX_DEVICES];
    int count = 0;
    const char* cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd) {
        for (int i = 0; i < n; ++i) {
            if (order[i] == fakeMigGpu()) { /* a GPU in MIG mode runs work only in its instances */
                for (unsigned j = 0; j < s->migInstances; ++j) {
                    candidates[count++] = fakeMigSlot(s, j);
                }
            } else {
                candidates[count++] = order[i];
            }
        }
    } else {
        char list[512] = {0};
        strncpy(list, cvd, sizeof list - 1);
        for (char* t = strtok(list, ","); t && count < FAKE_GPU_MAX_DEVICES; t = strtok(NULL, ",")) {
            const int slot = slotNamed(s, t, order, n);
            if (slot < 0) {
                break; /* the driver ignores the rest of the list after an entry that names nothing */
            }
            candidates[count++] = slot;
        }
    }
    visibleCount = 0;
    for (int i = 0; i < count; ++i) {
        if (fakeMigOfSlot(s, candidates[i]) >= 0) {
            visible[0] = candidates[i];
            visibleCount = 1;
            return;
        }
    }
    for (int i = 0; i < count && visibleCount < FAKE_GPU_MAX_DEVICES; ++i) {
        visible[visibleCount++] = candidates[i];
    }
}

/* An allocation and, for a small one, the 2 MiB page of this process it was packed into. */
struct Page {
    int device;
    unsigned long long used; /* bytes handed out from it (the next offset) */
    int live;                /* allocations in it not yet freed */
    struct Page* next;
};
struct Allocation {
    void* ptr;
    unsigned long long bytes;
    int device;
    struct Page* page; /* NULL: whole pages of its own */
    struct Allocation* next;
};
static struct Allocation* allocations;
static struct Page* pages;
struct HostBlock {
    void* ptr;
    size_t bytes;
    struct HostBlock* next;
};
static struct HostBlock* hostBlocks;

static void logLine(const char* fmt, int a, unsigned long long b)
{
    const char* path = getenv("FAKE_CUDA_LOG");
    if (!path) {
        return;
    }
    FILE* f = fopen(path, "a");
    if (f) {
        fprintf(f, fmt, a, b);
        fputc('\n', f);
        fclose(f);
    }
}

/* This process's row for a device, created on first use. */
static struct FakeGpuRow* row(int device)
{
    struct FakeGpuState* s = fakeGpuState();
    const int pid = getpid();
    for (int i = 0; i < FAKE_GPU_MAX_ROWS; ++i) {
        if (s->rows[i].pid == pid && s->rows[i].device == device) {
            return &s->rows[i];
        }
    }
    for (int i = 0; i < FAKE_GPU_MAX_ROWS; ++i) {
        int p = __atomic_load_n(&s->rows[i].pid, __ATOMIC_SEQ_CST);
        /* Reuse a free row or one whose process died. */
        if ((p == 0 || !fakeGpuAlive(p)) &&
            __atomic_compare_exchange_n(&s->rows[i].pid, &p, pid, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            s->rows[i].device = device;
            __atomic_store_n(&s->rows[i].bytes, 0ULL, __ATOMIC_SEQ_CST);
            return &s->rows[i];
        }
    }
    return NULL;
}

static unsigned long long contextBytes(void)
{
    const char* v = getenv("FAKE_CUDA_CONTEXT_MIB");
    return (v ? strtoull(v, NULL, 10) : 300ULL) << 20;
}

CUresult cuInit(unsigned flags)
{
    (void)flags;
    sleepUs("FAKE_CUDA_INIT_DELAY_US");
    if (getenv("FAKE_CUDA_NO_DEVICE")) {
        return NO_DEVICE;
    }
    const struct FakeGpuState* s = fakeGpuState();
    if (!s) {
        return NOT_INITIALIZED;
    }
    enumerate(s);
    if (visibleCount == 0) {
        return NO_DEVICE;
    }
    initialised = 1;
    return OK;
}
CUresult cuDriverGetVersion(int* v)
{
    *v = 13000;
    return OK;
}
CUresult cuGetErrorString(CUresult r, const char** s)
{
    switch (r) {
    case OK:
        *s = "no error";
        return OK;
    case OUT_OF_MEMORY:
        *s = "out of memory";
        return OK;
    case NO_DEVICE:
        *s = "no CUDA-capable device is detected";
        return OK;
    case INVALID_DEVICE:
        *s = "invalid device ordinal";
        return OK;
    default:
        *s = "fake driver error";
        return OK;
    }
}
CUresult cuDeviceGetCount(int* n)
{
    if (!initialised) {
        return NOT_INITIALIZED;
    }
    *n = visibleCount;
    return OK;
}
CUresult cuDeviceGet(int* dev, int ordinal)
{
    if (!initialised) {
        return NOT_INITIALIZED;
    }
    if (ordinal < 0 || ordinal >= visibleCount) {
        return INVALID_DEVICE;
    }
    *dev = ordinal;
    return OK;
}
static int physicalOf(const struct FakeGpuState* s, int slot)
{
    return fakeMigOfSlot(s, slot) >= 0 ? fakeMigGpu() : slot;
}
CUresult cuDeviceGetName(char* name, int len, int dev)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (fakeMigOfSlot(s, visible[dev]) >= 0) {
        snprintf(name, (size_t)len, "Fake GPU %d MIG 1g", fakeMigGpu());
    } else {
        snprintf(name, (size_t)len, "Fake GPU %d", visible[dev]);
    }
    return OK;
}
#ifndef FAKE_CUDA_PRE_R470
CUresult cuDeviceGetUuid_v2(unsigned char* uuid, int dev)
{
    fakeUuidBytes(fakeGpuState(), visible[dev], uuid); /* the bytes the fake NVML prints */
    return OK;
}
#endif
CUresult cuDeviceGetUuid(unsigned char* uuid, int dev)
{
    const struct FakeGpuState* s = fakeGpuState();
    fakeGpuUuidBytes(physicalOf(s, visible[dev]), uuid); /* a MIG device answers with its GPU's */
    return OK;
}
CUresult cuDeviceGetPCIBusId(char* bus, int len, int dev)
{
    snprintf(bus, (size_t)len, "0000:%02x:00.0", 0x10 + physicalOf(fakeGpuState(), visible[dev]));
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev)
{
    *bytes = fakeGpuState()->total[visible[dev]];
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev)
{
    if (!initialised) {
        return NOT_INITIALIZED;
    }
    if (dev < 0 || dev >= visibleCount) {
        return INVALID_DEVICE;
    }
    if (retained[dev]++ == 0) {
        struct FakeGpuRow* r = row(visible[dev]);
        if (!r) {
            return OUT_OF_MEMORY;
        }
        __atomic_add_fetch(&r->bytes, contextBytes(), __ATOMIC_SEQ_CST);
        logLine("ctx %d %llu", visible[dev], contextBytes()); /* the physical GPU (state slot) */
        sleepUs("FAKE_CUDA_CONTEXT_DELAY_US");
    }
    *ctx = &retained[dev];
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
    if (dev < 0 || dev >= FAKE_GPU_MAX_DEVICES || retained[dev] == 0) {
        return INVALID_CONTEXT;
    }
    if (--retained[dev] == 0) {
        __atomic_sub_fetch(&row(visible[dev])->bytes, contextBytes(), __ATOMIC_SEQ_CST);
    }
    return OK;
}
CUresult cuCtxSetCurrent(void* ctx)
{
    current = ctx ? (int)((int*)ctx - retained) : -1;
    return OK;
}
CUresult cuMemGetInfo_v2(size_t* freeBytes, size_t* total)
{
    if (current < 0) {
        return INVALID_CONTEXT;
    }
    struct FakeGpuState* s = fakeGpuState();
    const int slot = visible[current];
    *total = s->total[slot];
    *freeBytes = s->total[slot] - fakeGpuUsed(s, slot, 0);
    return OK;
}

/* Where a small allocation goes: after what the device's last page of this process holds, else a
 * new page (`*charge` = 2 MiB); NULL with *charge set for a large one. */
static struct Page* placeSmall(int slot, unsigned long long bytes, unsigned long long* charge)
{
    *charge = 0;
    if (bytes >= PAGE) {
        *charge = (bytes + PAGE - 1) / PAGE * PAGE;
        return NULL;
    }
    const unsigned long long size = (bytes + SMALL_ALIGN - 1) / SMALL_ALIGN * SMALL_ALIGN;
    for (struct Page* p = pages; p; p = p->next) {
        if (p->device == slot && p->used + size <= PAGE) {
            return p;
        }
    }
    *charge = PAGE;
    return NULL;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes)
{
    if (current < 0) {
        return INVALID_CONTEXT;
    }
    struct FakeGpuState* s = fakeGpuState();
    if (bytes == 0) {
        return INVALID_VALUE;
    }
    const int slot = visible[current];
    unsigned long long charge = 0;
    struct Page* page = placeSmall(slot, bytes, &charge);
    const int small = bytes < PAGE;
    /* The check and the charge are one step (fakeGpuLock): three ranks each seeing the same last
     * 8 MiB free would otherwise all get it, more often the slower malloc is (under ASan). */
    fakeGpuLock(s);
    struct FakeGpuRow* mine = row(slot);
    if (!mine || fakeGpuUsed(s, slot, 0) + charge > s->total[slot]) {
        fakeGpuUnlock(s);
        return OUT_OF_MEMORY;
    }
    __atomic_add_fetch(&mine->bytes, charge, __ATOMIC_SEQ_CST);
    fakeGpuUnlock(s);
    struct Allocation* a = malloc(sizeof *a);
    void* host = a ? malloc(bytes) : NULL;
    if (small && !page && host) {
        page = calloc(1, sizeof *page);
        if (page) {
            page->device = slot;
            page->next = pages;
            pages = page;
        }
    }
    if (!host || (small && !page)) {
        free(host);
        free(a);
        __atomic_sub_fetch(&mine->bytes, charge, __ATOMIC_SEQ_CST);
        return OUT_OF_MEMORY;
    }
    if (page) {
        page->used += (bytes + SMALL_ALIGN - 1) / SMALL_ALIGN * SMALL_ALIGN;
        ++page->live;
    }
    a->ptr = host;
    a->bytes = bytes;
    a->device = slot;
    a->page = page;
    a->next = allocations;
    allocations = a;
    logLine("alloc %d %llu", slot, (unsigned long long)bytes);
    *p = (CUdeviceptr)(size_t)a->ptr;
    return OK;
}
/* What freeing an allocation gives back: its pages, or its small page once nothing is left in it. */
static unsigned long long releaseOf(struct Allocation* a)
{
    if (!a->page) {
        return (a->bytes + PAGE - 1) / PAGE * PAGE;
    }
    if (--a->page->live > 0) {
        return 0;
    }
    for (struct Page** at = &pages; *at; at = &(*at)->next) {
        if (*at == a->page) {
            *at = a->page->next;
            break;
        }
    }
    free(a->page);
    return PAGE;
}
static void drainAll(void);
static int queuedTouches(const void* begin, size_t bytes, int source);
CUresult cuMemFree_v2(CUdeviceptr p)
{
    for (struct Allocation** at = &allocations; *at; at = &(*at)->next) {
        if ((CUdeviceptr)(size_t)(*at)->ptr == p) {
            struct Allocation* a = *at;
            if (queuedTouches(a->ptr, a->bytes, 0)) {
                logLine("free-busy %d %llu", a->device, a->bytes);
            }
            drainAll(); /* cuMemFree waits for the device's work, as the driver's does */
            *at = a->next;
            __atomic_sub_fetch(&row(a->device)->bytes, releaseOf(a), __ATOMIC_SEQ_CST);
            logLine("free %d %llu", a->device, a->bytes);
            free(a->ptr);
            free(a);
            return OK;
        }
    }
    return INVALID_VALUE;
}
CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned flags)
{
    (void)flags;
    if (getenv("FAKE_CUDA_HOST_OOM")) {
        return OUT_OF_MEMORY; /* what the driver answers when it cannot pin host memory */
    }
    struct HostBlock* b = malloc(sizeof *b);
    *p = b ? malloc(bytes) : NULL;
    if (!*p) {
        free(b);
        return OUT_OF_MEMORY;
    }
    b->ptr = *p;
    b->bytes = bytes;
    b->next = hostBlocks;
    hostBlocks = b;
    return OK;
}
CUresult cuMemFreeHost(void* p)
{
    for (struct HostBlock** at = &hostBlocks; *at; at = &(*at)->next) {
        if ((*at)->ptr == p) {
            struct HostBlock* b = *at;
            if (queuedTouches(b->ptr, b->bytes, 1)) {
                logLine("freehost-busy %d %llu", 0, (unsigned long long)b->bytes);
            }
            *at = b->next;
            free(b);
            break;
        }
    }
    drainAll();
    free(p);
    return OK;
}
/* A stream's queue of host-to-device copies not yet made. */
struct Copy {
    CUdeviceptr dst;
    const void* src;
    size_t bytes;
};
struct Stream {
    struct Copy* queue;
    size_t queued, capacity;
    unsigned long long issued, done; /* copies ever queued / made on this stream */
    struct Stream* next;
};
struct Event {
    struct Stream* stream; /* NULL until recorded */
    unsigned long long upTo;
};
static struct Stream* streams;

/* A copy still queued that writes into (source 0) or reads from (source 1) [begin, begin+bytes). */
static int queuedTouches(const void* begin, size_t bytes, int source)
{
    const unsigned char* lo = begin;
    const unsigned char* hi = lo + bytes;
    for (struct Stream* s = streams; s; s = s->next) {
        for (size_t i = 0; i < s->queued; ++i) {
            const unsigned char* at =
                source ? (const unsigned char*)s->queue[i].src : (const unsigned char*)(size_t)s->queue[i].dst;
            if (at < hi && at + s->queue[i].bytes > lo) {
                return 1;
            }
        }
    }
    return 0;
}

/* Makes the stream's first `upTo - done` queued copies, in order. */
static void drain(struct Stream* s, unsigned long long upTo)
{
    size_t made = 0;
    while (s->done < upTo && made < s->queued) {
        const struct Copy* c = &s->queue[made++];
        memcpy((void*)(size_t)c->dst, c->src, c->bytes);
        ++s->done;
    }
    if (made > 0 && s->queued > made) { /* memmove of a never-allocated (NULL) queue is undefined */
        memmove(s->queue, s->queue + made, (s->queued - made) * sizeof *s->queue);
    }
    s->queued -= made;
}
static void drainAll(void)
{
    for (struct Stream* s = streams; s; s = s->next) {
        drain(s, s->issued);
    }
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, struct Stream* stream)
{
    const char* delay = getenv("FAKE_CUDA_DELAY_US");
    if (delay) {
        usleep((useconds_t)atoi(delay));
    }
    if (!stream) {
        return INVALID_VALUE; /* the engine always names its own stream */
    }
    if (stream->queued == stream->capacity) {
        stream->capacity = stream->capacity ? 2 * stream->capacity : 16;
        stream->queue = realloc(stream->queue, stream->capacity * sizeof *stream->queue);
    }
    stream->queue[stream->queued++] = (struct Copy){dst, src, bytes};
    ++stream->issued;
    return OK;
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes)
{
    const char* delay = getenv("FAKE_CUDA_DTOH_DELAY_US");
    if (delay) {
        usleep((useconds_t)atoi(delay));
    }
    drainAll(); /* the legacy default stream waits for the device's other work */
    memcpy(dst, (const void*)(size_t)src, bytes);
    return OK;
}
CUresult cuStreamCreate(struct Stream** stream, unsigned flags)
{
    (void)flags;
    struct Stream* s = calloc(1, sizeof *s);
    s->next = streams;
    streams = s;
    *stream = s;
    return OK;
}
CUresult cuStreamDestroy_v2(struct Stream* stream)
{
    drain(stream, stream->issued); /* queued work still completes, as the driver's does */
    for (struct Stream** at = &streams; *at; at = &(*at)->next) {
        if (*at == stream) {
            *at = stream->next;
            free(stream->queue);
            free(stream);
            return OK;
        }
    }
    return INVALID_VALUE;
}
CUresult cuStreamSynchronize(struct Stream* stream)
{
    drain(stream, stream->issued);
    return OK;
}
CUresult cuEventCreate(struct Event** event, unsigned flags)
{
    (void)flags;
    *event = calloc(1, sizeof **event);
    return OK;
}
CUresult cuEventRecord(struct Event* event, struct Stream* stream)
{
    event->stream = stream;
    event->upTo = stream->issued;
    return OK;
}
CUresult cuEventSynchronize(struct Event* event)
{
    if (event->stream) {
        drain(event->stream, event->upTo);
    }
    return OK;
}
CUresult cuEventDestroy_v2(struct Event* event)
{
    free(event);
    return OK;
}
