/* Target for scripts/bench/reaction.sh: holds its memory steady, then at a known instant jumps
 * it across the watchdog's headroom floor, and records when the watchdog's signal arrives.
 *
 * Usage: reaction_target HOLD_MS JUMP_MIB LIMIT_BYTES FLOOR_PERCENT BASE_MIB
 *   Touches BASE_MIB, installs a SIGUSR1 handler, sleeps HOLD_MS, reads its own RSS from
 *   /proc/self/statm (the figure the watchdog reads), then touches JUMP_MIB more in 64 KiB
 *   chunks. The floor is crossed when RSS exceeds LIMIT_BYTES * (1 - FLOOR_PERCENT/100): the
 *   instant the chunk that carries it past that line is touched is "cross".
 * With LIMIT_BYTES 0 it only prints its RSS in bytes after the hold (to calibrate the limit).
 * With a sixth argument, a cgroup v1 memory directory the target runs in, the figure is that
 * cgroup's `cgroup_memory` instead (memory.usage_in_bytes less the file cache of memory.stat),
 * read once after the hold; the jump's bytes are counted on top of it.
 * Prints one line: `jump_ns cross_ns done_ns sig_ns` (CLOCK_MONOTONIC; sig_ns is 0 when no
 * signal came within 3 s of the jump), or `error ...` with exit status 3. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cgroup_bench.h"

static volatile sig_atomic_t got;
static volatile int64_t sig_ns;

static void on_usr1(int sig) {
    (void)sig;
    if (!got) {
        sig_ns = now_ns(); /* clock_gettime is async-signal-safe */
        got = 1;
    }
}

static long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* The cgroup_memory figure of the v1 memory cgroup `dir`: usage less file cache, or -1. */
static long cgroup_used(const char *dir) {
    char path[4096], key[64];
    long usage = read_number(dir, "memory.usage_in_bytes"), value, cache = 0;
    if (usage < 0) return -1;
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (fscanf(f, "%63s %ld", key, &value) == 2)
        if (!strcmp(key, "total_active_file") || !strcmp(key, "total_inactive_file")) cache += value;
    fclose(f);
    return usage < 0 ? -1 : usage - cache;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s HOLD_MS JUMP_MIB LIMIT_BYTES FLOOR_PERCENT BASE_MIB [CGROUP_DIR]\n", argv[0]);
        return 2;
    }
    long hold_ms = atol(argv[1]);
    size_t jump = (size_t)atol(argv[2]) << 20;
    double limit = atof(argv[3]), floor_pct = atof(argv[4]);
    size_t base = (size_t)atol(argv[5]) << 20;

    char *b = malloc(base);
    char *j = malloc(jump);
    if (!b || !j) { printf("error malloc\n"); return 3; }
    memset(b, 1, base);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);

    struct timespec hold = {hold_ms / 1000, (hold_ms % 1000) * 1000000};
    while (nanosleep(&hold, &hold) != 0) {}

    long rss0 = argc == 7 ? cgroup_used(argv[6]) : rss_bytes();
    if (limit == 0) {
        printf("%ld\n", rss0);
        return 0;
    }
    double line = limit * (1.0 - floor_pct / 100.0);
    if (rss0 < 0 || (double)rss0 >= line || (double)rss0 + (double)jump <= line + 65536) {
        printf("error rss %ld line %.0f jump %zu: the jump must start below the floor and cross it\n",
               rss0, line, jump);
        return 3;
    }
    if (got) { printf("error signalled before the jump\n"); return 3; }
    size_t need = (size_t)(line - (double)rss0) + 1;
    const size_t chunk = 64 << 10;
    int64_t jump_ns = now_ns(), cross_ns = 0;
    for (size_t off = 0; off < jump; off += chunk) {
        memset(j + off, 1, chunk < jump - off ? chunk : jump - off);
        if (!cross_ns && off + chunk >= need) cross_ns = now_ns();
    }
    int64_t done_ns = now_ns();
    while (!got && now_ns() - jump_ns < 3000000000LL) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    printf("%lld %lld %lld %lld\n", (long long)jump_ns, (long long)cross_ns, (long long)done_ns,
           (long long)(got ? sig_ns : 0));
    return 0;
}
