/*
 * A fake libnvidia-ml.so.1 for testing watchdog's GPU source without a GPU.
 *
 * It implements only the NVML entry points nvml-wrapper 0.13 calls for the
 * watchdog (init, shutdown, error strings, driver version, device count and
 * handles, name, UUID, index, memory info v1 and v2, and the v3 compute and
 * graphics process lists) and serves figures from a script, so tests run the
 * real nvml-wrapper code against scripted devices.
 *
 * Build:  cc -shared -fPIC -O2 -o DIR/libnvidia-ml.so.1 tests/fake-nvml/fake_nvml.c
 * (no -soname on purpose: copies at different paths load as separate
 * instances, so parallel tests in one process each get their own script).
 *
 * The script is read at the first nvmlInit: from the file named by the
 * environment variable FAKE_NVML_SCRIPT when set, else from the file
 * `fake-nvml.script` next to the loaded library. One directive per line,
 * `#` starts a comment, sizes in MiB, times in seconds (decimals allowed):
 *
 *   init_error <code>
 *       nvmlInit_v2 / nvmlInitWithFlags return <code> (9 = driver not loaded,
 *       4 = no permission, 18 = library/driver version mismatch, ...).
 *   device <name> <uuid> <total_mib> <used_start_mib> <growth_mib_per_s> [reserved_mib]
 *       A GPU. `_` in <name> stands for a space. Its used memory at t seconds
 *       after the first nvmlInit is used_start + growth * t plus the memory of
 *       its processes, capped at total - reserved.
 *   process <device_index> <pid> <used_mib> <growth_mib_per_s> [graphics]
 *       A process holding used + growth * t MiB on that device (compute unless
 *       `graphics`). <pid> may be `pidfile:/path`: the PID is read from that
 *       file at every query (the process is not listed until it exists), for
 *       end-to-end tests where the PID is not known in advance.
 *   vanish <device_index> <after_s>
 *       From after_s seconds on, every call on that device returns
 *       NVML_ERROR_GPU_IS_LOST (15), as when a GPU falls off the bus.
 *   stall <path> <max_s>
 *       While the file <path> exists, process-list calls hang until it is
 *       removed, holding the driver's lock as a real driver can: meanwhile
 *       every other call on a device waits for them. A hanging call first
 *       creates <path>.held, so a test knows NVML is stuck. max_s seconds after
 *       the first hang began, the stall is over for good even if the file stays.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_UNKNOWN = 999,
};

/* Layouts as in nvml.h and nvml-wrapper-sys 0.10's bindings. */
typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t; /* nvmlProcessInfo_v2_t, used by the _v3 process queries */

#define MAX_DEVICES 16
#define MAX_PROCESSES 64
#define MIB (1024.0 * 1024.0)

struct fake_device {
    unsigned int index;
    char name[96];
    char uuid[96];
    double total_mib, used_start_mib, growth_mib_per_s, reserved_mib;
    double vanish_after_s; /* < 0: never */
};

struct fake_process {
    unsigned int device;
    unsigned int pid; /* 0: read from pidfile */
    char pidfile[300];
    double used_mib, growth_mib_per_s;
    int graphics;
};

typedef struct fake_device *nvmlDevice_t;

static struct fake_device devices[MAX_DEVICES];
static unsigned int device_count;
static struct fake_process processes[MAX_PROCESSES];
static unsigned int process_count;
static int init_error;
static int loaded;
static int init_refs;
static struct timespec started;
static char stall_path[300];
static double stall_max_s;
static int stalling; /* process-list calls hanging now (__atomic builtins: any thread) */
static int stall_began;
static struct timespec stall_t0;

static void anchor(void) {}

static FILE *open_script(void) {
    const char *path = getenv("FAKE_NVML_SCRIPT");
    if (path && *path)
        return fopen(path, "r");
    Dl_info info;
    if (!dladdr((void *)anchor, &info) || !info.dli_fname)
        return NULL;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", info.dli_fname);
    char *slash = strrchr(buf, '/');
    if (slash)
        snprintf(slash + 1, sizeof buf - (size_t)(slash + 1 - buf), "fake-nvml.script");
    else
        snprintf(buf, sizeof buf, "fake-nvml.script");
    return fopen(buf, "r");
}

static void load_script(void) {
    if (loaded)
        return;
    loaded = 1;
    FILE *f = open_script();
    if (!f) {
        fprintf(stderr, "fake-nvml: no script (set FAKE_NVML_SCRIPT or put fake-nvml.script next to the library)\n");
        return;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char word[64] = "";
        if (sscanf(line, "%63s", word) != 1)
            continue;
        if (!strcmp(word, "init_error")) {
            sscanf(line, "%*s %d", &init_error);
        } else if (!strcmp(word, "device") && device_count < MAX_DEVICES) {
            struct fake_device *d = &devices[device_count];
            memset(d, 0, sizeof *d);
            d->vanish_after_s = -1;
            int n = sscanf(line, "%*s %95s %95s %lf %lf %lf %lf", d->name, d->uuid, &d->total_mib,
                           &d->used_start_mib, &d->growth_mib_per_s, &d->reserved_mib);
            if (n < 5) {
                fprintf(stderr, "fake-nvml: bad device line: %s", line);
                continue;
            }
            for (char *c = d->name; *c; c++)
                if (*c == '_')
                    *c = ' ';
            d->index = device_count++;
        } else if (!strcmp(word, "process") && process_count < MAX_PROCESSES) {
            struct fake_process *p = &processes[process_count];
            memset(p, 0, sizeof *p);
            char pid[300] = "", kind[32] = "";
            int n = sscanf(line, "%*s %u %299s %lf %lf %31s", &p->device, pid, &p->used_mib,
                           &p->growth_mib_per_s, kind);
            if (n < 4) {
                fprintf(stderr, "fake-nvml: bad process line: %s", line);
                continue;
            }
            if (!strncmp(pid, "pidfile:", 8))
                snprintf(p->pidfile, sizeof p->pidfile, "%s", pid + 8);
            else
                p->pid = (unsigned int)strtoul(pid, NULL, 10);
            p->graphics = !strcmp(kind, "graphics");
            process_count++;
        } else if (!strcmp(word, "vanish")) {
            unsigned int i;
            double after;
            if (sscanf(line, "%*s %u %lf", &i, &after) == 2 && i < MAX_DEVICES)
                devices[i].vanish_after_s = after;
        } else if (!strcmp(word, "stall")) {
            if (sscanf(line, "%*s %299s %lf", stall_path, &stall_max_s) != 2) {
                fprintf(stderr, "fake-nvml: bad stall line: %s", line);
                stall_path[0] = 0;
            }
        } else {
            fprintf(stderr, "fake-nvml: unknown directive: %s", line);
        }
    }
    fclose(f);
}

static double since_s(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

static double elapsed_s(void) { return since_s(&started); }

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The driver's lock: a device call waits while a process-list call hangs. */
static void wait_for_driver(void) {
    while (__atomic_load_n(&stalling, __ATOMIC_ACQUIRE))
        sleep_ms(1);
}

/* `stall`: hangs while the stall file exists, until stall_max_s after the first hang. */
static void maybe_stall(void) {
    if (!stall_path[0] || access(stall_path, F_OK))
        return;
    if (!__atomic_exchange_n(&stall_began, 1, __ATOMIC_ACQ_REL))
        clock_gettime(CLOCK_MONOTONIC, &stall_t0);
    if (since_s(&stall_t0) >= stall_max_s)
        return;
    __atomic_add_fetch(&stalling, 1, __ATOMIC_ACQ_REL);
    char held[320];
    snprintf(held, sizeof held, "%s.held", stall_path);
    FILE *f = fopen(held, "w");
    if (f)
        fclose(f);
    while (!access(stall_path, F_OK) && since_s(&stall_t0) < stall_max_s)
        sleep_ms(1);
    __atomic_sub_fetch(&stalling, 1, __ATOMIC_ACQ_REL);
}

static nvmlReturn_t check(nvmlDevice_t d) {
    wait_for_driver();
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (d < devices || d >= devices + device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->vanish_after_s >= 0 && elapsed_s() >= d->vanish_after_s)
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

static unsigned int process_pid(const struct fake_process *p) {
    if (p->pid)
        return p->pid;
    FILE *f = fopen(p->pidfile, "r");
    if (!f)
        return 0;
    unsigned int pid = 0;
    if (fscanf(f, "%u", &pid) != 1)
        pid = 0;
    fclose(f);
    return pid;
}

static double process_used_mib(const struct fake_process *p, double t) {
    double used = p->used_mib + p->growth_mib_per_s * t;
    return used < 0 ? 0 : used;
}

static double device_used_mib(const struct fake_device *d) {
    double t = elapsed_s();
    double used = d->used_start_mib + d->growth_mib_per_s * t;
    for (unsigned int i = 0; i < process_count; i++)
        if (processes[i].device == d->index && process_pid(&processes[i]))
            used += process_used_mib(&processes[i], t);
    double cap = d->total_mib - d->reserved_mib;
    if (used > cap)
        used = cap;
    return used < 0 ? 0 : used;
}

static nvmlReturn_t init(void) {
    load_script();
    if (init_error)
        return init_error;
    if (init_refs++ == 0)
        clock_gettime(CLOCK_MONOTONIC, &started);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return init(); }
nvmlReturn_t nvmlInit(void) { return init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return init();
}

nvmlReturn_t nvmlShutdown(void) {
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    init_refs--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (length < 16)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(version, length, "999.99.fake");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = device_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!init_refs)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = check(&devices[index]);
    if (r)
        return r;
    *device = &devices[index];
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(const char *s, char *out, unsigned int length) {
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    nvmlReturn_t r = check(d);
    return r ? r : copy_string(d->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    nvmlReturn_t r = check(d);
    return r ? r : copy_string(d->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    nvmlReturn_t r = check(d);
    if (r)
        return r;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = d->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    nvmlReturn_t r = check(d);
    if (r)
        return r;
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* v1 counts reserved memory as used. */
    m->total = (unsigned long long)(d->total_mib * MIB);
    m->used = (unsigned long long)((device_used_mib(d) + d->reserved_mib) * MIB);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    nvmlReturn_t r = check(d);
    if (r)
        return r;
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != NVML_MEMORY_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = (unsigned long long)(d->total_mib * MIB);
    m->reserved = (unsigned long long)(d->reserved_mib * MIB);
    m->used = (unsigned long long)(device_used_mib(d) * MIB);
    m->free = m->total - m->reserved - m->used;
    return NVML_SUCCESS;
}

/* The NVML contract: with *count too small (or infos NULL), set *count to the
 * number needed and return INSUFFICIENT_SIZE, or SUCCESS when there are none. */
static nvmlReturn_t list_processes(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos,
                                   int graphics) {
    nvmlReturn_t r = check(d);
    if (r)
        return r;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    maybe_stall();
    double t = elapsed_s();
    unsigned int n = 0;
    nvmlProcessInfo_t found[MAX_PROCESSES];
    for (unsigned int i = 0; i < process_count; i++) {
        const struct fake_process *p = &processes[i];
        unsigned int pid = process_pid(p);
        if (p->device != d->index || p->graphics != graphics || !pid)
            continue;
        found[n].pid = pid;
        found[n].usedGpuMemory = (unsigned long long)(process_used_mib(p, t) * MIB);
        found[n].gpuInstanceId = 0xFFFFFFFFu;
        found[n].computeInstanceId = 0xFFFFFFFFu;
        n++;
    }
    if (!infos || *count < n) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    memcpy(infos, found, n * sizeof *found);
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return list_processes(d, count, infos, 0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    return list_processes(d, count, infos, 1);
}
