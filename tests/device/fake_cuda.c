/* A stand-in libcuda.so.1 for tests on machines without a GPU: the Driver API entry points the
 * test-load engine binds (core/device/cuda_api.h), with the driver's ABI. Devices and their sizes
 * are shared with the fake NVML through FAKE_GPU_STATE (fake_gpu_state.h); device memory is host
 * memory, so copies really copy and can be read back. A host-to-device copy is asynchronous as the
 * real one is: it is queued on its stream and reads its source only when something waits for it (an
 * event recorded after it, the stream, a synchronous copy, a free), so an engine that refills a
 * staging buffer before its copy left loads the wrong bytes and --verify says so. Environment:
 *   FAKE_CUDA_DEVICES       "16384,8192": devices and their MiB (the first process decides)
 *   FAKE_CUDA_CONTEXT_MIB   what a primary context costs on its device (default 300)
 *   FAKE_CUDA_NO_DEVICE     cuInit answers CUDA_ERROR_NO_DEVICE
 *   FAKE_CUDA_DELAY_US      a sleep in every host-to-device copy, to cancel a load mid-way
 *   FAKE_CUDA_DTOH_DELAY_US a sleep in every device-to-host copy: a slow --verify
 *   FAKE_CUDA_HOST_OOM      cuMemHostAlloc answers CUDA_ERROR_OUT_OF_MEMORY (no pinnable host memory)
 *   FAKE_CUDA_LOG           a file each call of interest appends a line to ("ctx 1", "alloc 0 4096")
 *   FAKE_CUDA_ORDER         "1,0": the physical GPUs in CUDA's enumeration order (its default order,
 *                           FASTEST_FIRST, need not be NVML's PCI order)
 *   CUDA_VISIBLE_DEVICES    as the driver reads it: indices into that order or UUID prefixes (GPU-...,
 *                           MIG-...), up to the first that names nothing; empty hides every GPU
 *   FAKE_MIG_GPU            that GPU is in MIG mode: CUDA enumerates its instance in its place
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

static int initialised;
static __thread int current = -1; /* the device of the current context */
static int retained[FAKE_GPU_MAX_DEVICES];
static int visible[FAKE_GPU_MAX_DEVICES]; /* device handle -> state slot */
static int visibleCount;

static void uuidText(const struct FakeGpuState* s, int slot, char* out, size_t len)
{
    unsigned char b[16];
    fakeUuidBytes(s, slot, b);
    snprintf(out, len, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             slot == fakeMigSlot(s) ? "MIG" : "GPU", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
             b[11], b[12], b[13], b[14], b[15]);
}

/* CUDA's view: the enumeration order, then CUDA_VISIBLE_DEVICES applied as the driver applies it. */
static void enumerate(const struct FakeGpuState* s)
{
    int order[FAKE_GPU_MAX_DEVICES];
    int n = 0;
    const char* spec = getenv("FAKE_CUDA_ORDER");
    if (spec && *spec) {
        char list[128] = {0};
        strncpy(list, spec, sizeof list - 1);
        for (char* t = strtok(list, ","); t && n < (int)s->devices; t = strtok(NULL, ",")) {
            order[n++] = atoi(t);
        }
    } else {
        for (n = 0; n < (int)s->devices; ++n) {
            order[n] = n;
        }
    }
    for (int i = 0; i < n; ++i) {
        if (order[i] == fakeMigGpu()) {
            order[i] = fakeMigSlot(s); /* a GPU in MIG mode runs work only in its instances */
        }
    }
    visibleCount = 0;
    const char* cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd) {
        for (int i = 0; i < n; ++i) {
            visible[visibleCount++] = order[i];
        }
        return;
    }
    char list[512] = {0};
    strncpy(list, cvd, sizeof list - 1);
    for (char* t = strtok(list, ","); t && visibleCount < FAKE_GPU_MAX_DEVICES; t = strtok(NULL, ",")) {
        int slot = -1;
        if (t[0] >= '0' && t[0] <= '9') {
            const int i = atoi(t);
            slot = i < n ? order[i] : -1;
        } else {
            for (int i = 0; i < n && slot < 0; ++i) {
                char u[64];
                uuidText(s, order[i], u, sizeof u);
                if (strncmp(u, t, strlen(t)) == 0) {
                    slot = order[i];
                }
            }
        }
        if (slot < 0) {
            break; /* the driver ignores the rest of the list after an entry that names nothing */
        }
        visible[visibleCount++] = slot;
    }
}

struct Allocation {
    void* ptr;
    unsigned long long bytes;
    int device;
    struct Allocation* next;
};
static struct Allocation* allocations;

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
CUresult cuDeviceGetName(char* name, int len, int dev)
{
    const struct FakeGpuState* s = fakeGpuState();
    if (visible[dev] == fakeMigSlot(s)) {
        snprintf(name, (size_t)len, "Fake GPU %d MIG 1g", fakeMigGpu());
    } else {
        snprintf(name, (size_t)len, "Fake GPU %d", visible[dev]);
    }
    return OK;
}
CUresult cuDeviceGetUuid_v2(unsigned char* uuid, int dev)
{
    fakeUuidBytes(fakeGpuState(), visible[dev], uuid); /* the bytes the fake NVML prints */
    return OK;
}
CUresult cuDeviceGetPCIBusId(char* bus, int len, int dev)
{
    const struct FakeGpuState* s = fakeGpuState();
    const int physical = visible[dev] == fakeMigSlot(s) ? fakeMigGpu() : visible[dev];
    snprintf(bus, (size_t)len, "0000:%02x:00.0", 0x10 + physical);
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
    /* The check and the charge are one step (fakeGpuLock): three ranks each seeing the same last
     * 8 MiB free would otherwise all get it, more often the slower malloc is (under ASan). */
    fakeGpuLock(s);
    struct FakeGpuRow* mine = row(slot);
    if (!mine || fakeGpuUsed(s, slot, 0) + bytes > s->total[slot]) {
        fakeGpuUnlock(s);
        return OUT_OF_MEMORY;
    }
    __atomic_add_fetch(&mine->bytes, (unsigned long long)bytes, __ATOMIC_SEQ_CST);
    fakeGpuUnlock(s);
    struct Allocation* a = malloc(sizeof *a);
    void* host = a ? malloc(bytes) : NULL;
    if (!host) {
        free(a);
        __atomic_sub_fetch(&mine->bytes, (unsigned long long)bytes, __ATOMIC_SEQ_CST);
        return OUT_OF_MEMORY;
    }
    a->ptr = host;
    a->bytes = bytes;
    a->device = slot;
    a->next = allocations;
    allocations = a;
    logLine("alloc %d %llu", slot, (unsigned long long)bytes);
    *p = (CUdeviceptr)(size_t)a->ptr;
    return OK;
}
static void drainAll(void);
CUresult cuMemFree_v2(CUdeviceptr p)
{
    drainAll(); /* cuMemFree waits for the device's work, as the driver's does */
    for (struct Allocation** at = &allocations; *at; at = &(*at)->next) {
        if ((CUdeviceptr)(size_t)(*at)->ptr == p) {
            struct Allocation* a = *at;
            *at = a->next;
            __atomic_sub_fetch(&row(a->device)->bytes, a->bytes, __ATOMIC_SEQ_CST);
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
    *p = malloc(bytes);
    return *p ? OK : OUT_OF_MEMORY;
}
CUresult cuMemFreeHost(void* p)
{
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
