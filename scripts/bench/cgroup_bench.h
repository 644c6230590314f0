/* What the C benchmarks of a v1 memory threshold share (threshold_latency.c,
 * reaction_floor.c, reaction_target.c): the clock they stamp with, a number read from a
 * cgroup file, and a threshold registered through cgroup.event_control. Included by path
 * beside them, so each still builds with one `cc FILE.c`. */
#ifndef CGROUP_BENCH_H
#define CGROUP_BENCH_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_MONOTONIC in ns (async-signal-safe: a handler may stamp with it). */
static inline int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The number at the start of DIR/FILE, or -1. */
static inline long read_number(const char *dir, const char *file) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

/* Registers `level` on eventfd `efd` through the cgroup's cgroup.event_control: 0, or -1. */
static inline int arm(int control, int efd, int usage_fd, long level) {
    char text[128];
    int n = snprintf(text, sizeof text, "%d %d %ld", efd, usage_fd, level);
    return write(control, text, n) == n ? 0 : -1;
}

#endif
