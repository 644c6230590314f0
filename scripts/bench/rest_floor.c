/*
 * The floor of one wake at rest: what the watchdog's reads cost with nothing else, a loop
 * in C that waits, then reads what a watchdog at rest reads each wake, from descriptors
 * opened once. The comparison it makes possible (scripts/bench/rest_floor.sh): the
 * watchdog, this loop doing the watchdog's reads, this loop reading /proc/meminfo alone,
 * and earlyoom, in the same windows, so a wake's price on this machine is the same for all.
 *
 * Usage: rest_floor CGROUP_DIR PID MODE
 *   MODE: the letters of what a wake does besides reading /proc/meminfo
 *     p  poll 4 descriptors (a pidfd, two eventfds, a Unix socket) for up to 940 ms
 *        (the watchdog's wait at rest: lead 30 s / 32) instead of sleeping 1 s
 *     u  CGROUP_DIR/memory.usage_in_bytes      s  CGROUP_DIR/memory.stat (v1)
 *     l  /proc/loadavg                         m  /proc/PID/statm
 *     f  fstatfs of /tmp and /dev/shm
 *   "-" reads /proc/meminfo alone after sleeping 1 s, as earlyoom at rest does.
 *
 * Build: gcc -O2 -o rest_floor scripts/bench/rest_floor.c
 * With -DPHASES it also writes, after every wake, the thread's CPU time so far in the wait
 * and in the reads (`phases WAKES WAIT_NS READ_NS`, stderr; scripts/bench/wake_phases.sh);
 * the write itself falls in neither.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char buf[8192];

static int open_or_die(const char *path, int flags) {
    int fd = open(path, flags);
    if (fd < 0) {
        perror(path);
        exit(2);
    }
    return fd;
}

static void read_whole(int fd) {
    if (pread(fd, buf, sizeof buf, 0) < 0)
        perror("pread");
}

#ifdef PHASES
static unsigned long long cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}
#endif

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: rest_floor CGROUP_DIR PID MODE\n");
        return 2;
    }
    const char *cg = argv[1], *mode = argv[3];
    int pid = atoi(argv[2]);
#define HAS(c) (strchr(mode, (c)) != NULL)
    char path[512];
    int meminfo = open_or_die("/proc/meminfo", O_RDONLY);
    snprintf(path, sizeof path, "%s/memory.usage_in_bytes", cg);
    int usage = open_or_die(path, O_RDONLY);
    snprintf(path, sizeof path, "%s/memory.stat", cg);
    int stat = open_or_die(path, O_RDONLY);
    int loadavg = open_or_die("/proc/loadavg", O_RDONLY);
    snprintf(path, sizeof path, "/proc/%d/statm", pid);
    int statm = open_or_die(path, O_RDONLY);
    int tmp = open_or_die("/tmp", O_RDONLY | O_DIRECTORY);
    int shm = open_or_die("/dev/shm", O_RDONLY | O_DIRECTORY);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int line = eventfd(0, 0), high = eventfd(0, 0);
    int pair[2];
    if (pidfd < 0 || line < 0 || high < 0 || socketpair(AF_UNIX, SOCK_DGRAM, 0, pair) < 0) {
        perror("rest_floor: descriptors");
        return 2;
    }
    struct pollfd fds[4] = {{pidfd, POLLIN, 0}, {line, POLLIN, 0}, {high, POLLIN, 0}, {pair[0], POLLIN, 0}};
    struct statfs fs;
#ifdef PHASES
    unsigned long long waited = 0, read = 0, wakes = 0, t0, t1;
#endif
    for (;;) {
#ifdef PHASES
        t0 = cpu_ns();
#endif
        if (HAS('p')) {
            if (poll(fds, 4, 940) > 0 && (fds[0].revents & POLLIN))
                return 0; /* the target exited */
        } else {
            usleep(1000000);
        }
#ifdef PHASES
        t1 = cpu_ns();
#endif
        read_whole(meminfo);
        if (HAS('u')) read_whole(usage);
        if (HAS('s')) read_whole(stat);
        if (HAS('l')) read_whole(loadavg);
        if (HAS('m')) read_whole(statm);
        if (HAS('f')) {
            fstatfs(tmp, &fs);
            fstatfs(shm, &fs);
        }
#ifdef PHASES
        read += cpu_ns() - t1;
        waited += t1 - t0;
        fprintf(stderr, "phases %llu %llu %llu\n", ++wakes, waited, read);
#endif
    }
}
