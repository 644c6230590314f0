/* The kernel alone: how soon a cgroup v1 memory threshold's eventfd wakes a thread polling
 * it after the process touches the page that crosses it (scripts/bench/reaction.sh measures
 * the same through the watchdog). Joins the v1 memory cgroup DIR, touches BASE MiB (env
 * BASE, default 64), registers a threshold ABOVE_MIB above the usage (and with env HIGH a
 * second one 64 KiB above it, as the watchdog's line and high), then touches JUMP_MIB more
 * in 64 KiB chunks (env NOHUGE: without transparent huge pages; env HOLD_MS: after
 * holding that long, so that a watchdog can be attached to the PID it prints on stderr);
 * a thread polls the eventfds. Prints when the chunk crossing the threshold was touched and when the thread
 * woke, in ms from the jump (CLOCK_MONOTONIC).
 *
 * Build: cc -O2 -Wall -pthread -o thr scripts/bench/threshold_latency.c
 * Usage (root, cgroup v1): mkdir /sys/fs/cgroup/memory/thr
 *        echo $((430 << 20)) > /sys/fs/cgroup/memory/thr/memory.limit_in_bytes
 *        HIGH=1 BASE=400 ./thr /sys/fs/cgroup/memory/thr 8 16   (one run a process) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cgroup_bench.h"

static int line_fd, high_fd;
static volatile int64_t line_woke, high_woke;

/* Polls both eventfds until the line's is signalled (or 5 s pass). */
static void *waiter(void *unused) {
    (void)unused;
    struct pollfd p[2] = {{line_fd, POLLIN, 0}, {high_fd, POLLIN, 0}};
    uint64_t count;
    for (;;) {
        if (poll(p, 2, 5000) <= 0) return NULL;
        int64_t t = now_ns();
        if (p[1].revents && read(high_fd, &count, 8) == 8 && !high_woke) high_woke = t;
        if (p[0].revents && read(line_fd, &count, 8) == 8) {
            line_woke = t;
            return NULL;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s CGROUP_DIR ABOVE_MIB JUMP_MIB\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    long above = atol(argv[2]) << 20, jump = atol(argv[3]) << 20;
    long base = (getenv("BASE") ? atol(getenv("BASE")) : 64) << 20;
    char path[512];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *procs = fopen(path, "w");
    if (!procs) { perror(path); return 2; }
    fprintf(procs, "%d\n", getpid());
    fclose(procs);

    char *warm = malloc(base);
    if (!warm) return 3;
    memset(warm, 1, base);
    long usage = read_number(dir, "memory.usage_in_bytes");
    snprintf(path, sizeof path, "%s/memory.usage_in_bytes", dir);
    int usage_fd = open(path, O_RDONLY);
    snprintf(path, sizeof path, "%s/cgroup.event_control", dir);
    int control = open(path, O_WRONLY);
    line_fd = eventfd(0, EFD_NONBLOCK);
    high_fd = eventfd(0, EFD_NONBLOCK);
    long level = usage + above;
    if (usage < 0 || usage_fd < 0 || control < 0 || arm(control, line_fd, usage_fd, level) != 0 ||
        (getenv("HIGH") && arm(control, high_fd, usage_fd, usage + (64 << 10)) != 0)) {
        perror("arming the thresholds");
        return 2;
    }
    pthread_t thread;
    pthread_create(&thread, NULL, waiter, NULL);
    fprintf(stderr, "%d\n", getpid());
    usleep(getenv("HOLD_MS") ? atol(getenv("HOLD_MS")) * 1000 : 20000);

    char *m = mmap(NULL, jump, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 3;
    if (getenv("NOHUGE")) madvise(m, jump, MADV_NOHUGEPAGE);
    const long chunk = 64 << 10;
    int64_t start = now_ns(), cross = 0;
    for (long off = 0; off < jump; off += chunk) {
        memset(m + off, 1, chunk);
        if (!cross && off + chunk >= above) cross = now_ns();
    }
    int64_t done = now_ns();
    long after = read_number(dir, "memory.usage_in_bytes");
    pthread_join(thread, NULL);
    printf("usage0 %ld level %ld after %ld  cross %.3f ms  done %.3f ms  woke %.3f ms  "
           "woke-cross %.3f ms  high woke %.3f ms\n",
           usage, level, after, (cross - start) / 1e6, (done - start) / 1e6,
           (line_woke - start) / 1e6, (line_woke - cross) / 1e6,
           high_woke ? (high_woke - start) / 1e6 : -1.0);
    return 0;
}
