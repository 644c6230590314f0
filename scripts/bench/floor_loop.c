/* The floor for scripts/bench/overhead.sh: a minimal C loop that makes the same system calls
 * per tick as `watchdog --pid PID --disk A --disk B` (pread of /proc/meminfo, the cgroup's
 * usage and memory.stat, /proc/loadavg and each tree process's statm from kept-open
 * descriptors; fstatvfs of two kept-open O_PATH descriptors; a ppoll on the target's pidfd
 * until the next deadline), and nothing else: no parsing, no prediction. The tree is found
 * once at start and again every second by walking /proc/PID/task/TID/children.
 *
 * Usage: floor_loop PID HZ DISK_A DISK_B      (exits when the target exits) */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAXP 256
static int statm_fd[MAXP], npids;
static int pids[MAXP];

static void walk(int pid) {
    if (npids >= MAXP) return;
    pids[npids++] = pid;
    char path[128];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char cpath[320], buf[4096], *save = NULL;
        snprintf(cpath, sizeof cpath, "/proc/%d/task/%s/children", pid, e->d_name);
        int fd = open(cpath, O_RDONLY);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = 0;
        for (char *s = strtok_r(buf, " \n", &save); s; s = strtok_r(NULL, " \n", &save)) walk(atoi(s));
    }
    closedir(d);
}

static void find_tree(int target) {
    for (int i = 0; i < npids; i++) close(statm_fd[i]);
    npids = 0;
    walk(target);
    for (int i = 0; i < npids; i++) {
        char p[64];
        snprintf(p, sizeof p, "/proc/%d/statm", pids[i]);
        statm_fd[i] = open(p, O_RDONLY);
    }
}

static int cgroup_files(int pid, int *usage, int *stat) {
    char p[64], line[1024];
    snprintf(p, sizeof p, "/proc/%d/cgroup", pid);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        char *path = c2 + 1;
        path[strcspn(path, "\n")] = 0;
        char u[1200], s[1200];
        if (strstr(c1 + 1, "memory")) {
            snprintf(u, sizeof u, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", path);
            snprintf(s, sizeof s, "/sys/fs/cgroup/memory%s/memory.stat", path);
        } else if (c1[1] == 0) {
            snprintf(u, sizeof u, "/sys/fs/cgroup%s/memory.current", path);
            snprintf(s, sizeof s, "/sys/fs/cgroup%s/memory.stat", path);
        } else continue;
        *usage = open(u, O_RDONLY);
        *stat = open(s, O_RDONLY);
        if (*usage >= 0) break;
    }
    fclose(f);
    return 0;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s PID HZ DISK_A DISK_B\n", argv[0]); return 2; }
    int target = atoi(argv[1]);
    long long period = (long long)(1e9 / atof(argv[2]));
    int pidfd = (int)syscall(SYS_pidfd_open, target, 0);
    if (pidfd < 0) { perror("pidfd_open"); return 2; }
    int meminfo = open("/proc/meminfo", O_RDONLY), loadavg = open("/proc/loadavg", O_RDONLY);
    int usage = -1, stat = -1;
    cgroup_files(target, &usage, &stat);
    int disk[2] = {open(argv[3], O_PATH), open(argv[4], O_PATH)};
    static char buf[16384];
    long long deadline = now_ns(), next_walk = deadline;
    unsigned long ticks = 0, late = 0;
    for (;;) {
        long long t = now_ns();
        if (t >= next_walk) { find_tree(target); next_walk = t + 1000000000LL; }
        pread(meminfo, buf, sizeof buf, 0);
        if (usage >= 0) pread(usage, buf, sizeof buf, 0);
        if (stat >= 0) pread(stat, buf, sizeof buf, 0);
        pread(loadavg, buf, sizeof buf, 0);
        for (int i = 0; i < npids; i++) if (statm_fd[i] >= 0) pread(statm_fd[i], buf, sizeof buf, 0);
        struct statvfs sv;
        for (int i = 0; i < 2; i++) if (disk[i] >= 0) fstatvfs(disk[i], &sv);
        ticks++;
        deadline += period;
        long long after = now_ns();
        if (deadline < after) { late += 1 + (after - deadline) / period; deadline = after; }
        long long left = deadline - after;
        struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
        struct pollfd pfd = {pidfd, POLLIN, 0};
        if (ppoll(&pfd, 1, &ts, NULL) > 0) break;
    }
    fprintf(stderr, "floor_loop: ticks %lu late %lu\n", ticks, late);
    return 0;
}
