/* The fastest rate a resource can fill, for the `fill_rate` defaults (docs/prediction.md,
 * "Fill rates"): W writer threads each fill BYTES as fast as they can while a sampler thread
 * reads the resource as the watchdog does, every 10 ms, and prints the fastest rise over any
 * 100 ms and any 1 s window, and the whole run's average.
 *
 *   fill_rate mem W BYTES                host memory: each writer mmaps BYTES and writes one
 *                                        byte a 4 KiB page (page faults, as a leaking
 *                                        process); sampled: MemTotal - MemAvailable
 *   fill_rate cgroup W BYTES DIR         the same in cgroup v1 memory cgroup DIR (this process
 *                                        joins it first); sampled: DIR/memory.usage_in_bytes
 *   fill_rate file W BYTES DIR           each writer write(2)s BYTES in 1 MiB blocks to a new
 *                                        file in DIR (a checkpoint writer; page cache, no
 *                                        fsync); sampled: statvfs(DIR) used blocks
 *
 * Build: cc -O2 -pthread -o fill_rate scripts/bench/fill_rate.c   (scripts/bench/fill_rate.sh) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 100000
static const char *mode, *dir;
static unsigned long long bytes_each;
static atomic_int running;
static double ts[MAX_SAMPLES];
static double used[MAX_SAMPLES];
static int nsamples;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double read_used(void) {
    if (strcmp(mode, "file") == 0) {
        struct statvfs s;
        if (statvfs(dir, &s) != 0) return 0;
        return (double)(s.f_blocks - s.f_bfree) * s.f_frsize;
    }
    char path[4096], buf[4096];
    if (strcmp(mode, "cgroup") == 0) {
        snprintf(path, sizeof path, "%s/memory.usage_in_bytes", dir);
    } else {
        snprintf(path, sizeof path, "/proc/meminfo");
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    if (strcmp(mode, "cgroup") == 0) return strtod(buf, NULL);
    double total = 0, avail = 0;
    char *p = strstr(buf, "MemTotal:");
    if (p) total = strtod(p + 9, NULL) * 1024;
    p = strstr(buf, "MemAvailable:");
    if (p) avail = strtod(p + 13, NULL) * 1024;
    return total - avail;
}

static void *sampler(void *arg) {
    (void)arg;
    while (atomic_load(&running) && nsamples < MAX_SAMPLES) {
        ts[nsamples] = now();
        used[nsamples] = read_used();
        nsamples++;
        usleep(10000);
    }
    return NULL;
}

static void *writer(void *arg) {
    long id = (long)arg;
    if (strcmp(mode, "file") == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/fill_rate.%d.%ld", dir, getpid(), id);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) { perror(path); return NULL; }
        unlink(path); /* freed when the writer closes it */
        size_t block = 1 << 20;
        char *buf = malloc(block);
        if (!buf) { close(fd); return NULL; }
        memset(buf, 0x5a, block);
        for (unsigned long long done = 0; done < bytes_each; done += block) {
            if (write(fd, buf, block) != (ssize_t)block) { perror("write"); break; }
        }
        usleep(300000); /* let the sampler see the end before the space is freed */
        close(fd);
        free(buf);
        return NULL;
    }
    char *p = mmap(NULL, bytes_each, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return NULL; }
    for (unsigned long long off = 0; off < bytes_each; off += 4096) p[off] = 1;
    usleep(300000);
    munmap(p, bytes_each);
    return NULL;
}

/* The fastest rise of `used` over any window of `w` seconds, bytes a second. */
static double fastest(double w) {
    double best = 0;
    int j = 0;
    for (int i = 0; i < nsamples; i++) {
        while (j < i && ts[i] - ts[j] > w) j++;
        /* the window (j-1 .. i] spans at least w when j > 0 */
        int k = j > 0 ? j - 1 : j;
        double span = ts[i] - ts[k];
        if (span >= w * 0.9 && span > 0) {
            double r = (used[i] - used[k]) / span;
            if (r > best) best = r;
        }
    }
    return best;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: fill_rate mem|cgroup|file WRITERS BYTES [DIR]\n");
        return 2;
    }
    mode = argv[1];
    int writers = atoi(argv[2]);
    bytes_each = strtoull(argv[3], NULL, 10);
    dir = argc > 4 ? argv[4] : "/";
    if (strcmp(mode, "cgroup") == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/cgroup.procs", dir);
        FILE *f = fopen(path, "w");
        if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0) { perror(path); return 1; }
    }
    atomic_store(&running, 1);
    pthread_t s, w[64];
    if (writers < 1 || writers > 64) return 2;
    pthread_create(&s, NULL, sampler, NULL);
    usleep(50000);
    double t0 = now();
    for (long i = 0; i < writers; i++) pthread_create(&w[i], NULL, writer, (void *)i);
    for (int i = 0; i < writers; i++) pthread_join(w[i], NULL);
    double t1 = now() - 0.3; /* the writers' last 300 ms are a pause */
    atomic_store(&running, 0);
    pthread_join(s, NULL);
    double total = (double)bytes_each * writers;
    printf("%s writers=%d bytes=%.0f MiB: average %.0f MiB/s, fastest 100 ms %.0f MiB/s, fastest 1 s %.0f MiB/s\n",
           mode, writers, total / 1048576, total / (t1 - t0) / 1048576, fastest(0.1) / 1048576,
           fastest(1.0) / 1048576);
    return 0;
}
