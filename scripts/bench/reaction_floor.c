/* The floor of reaction.sh's MODE=cgroup figure, in C: what a v1 threshold crossing costs to
 * reach a signal handler with nothing of the watchdog in the way. A child joins the v1 memory
 * cgroup DIR and touches BASE MiB (env BASE, default 64); the parent (outside the cgroup)
 * registers a threshold ABOVE_MIB above the cgroup's usage, and the child touches JUMP_MIB
 * more in 64 KiB chunks (env NOHUGE: without transparent huge pages; env JUMP_KIB: the jump in
 * KiB instead, to stop just past the threshold). The parent polls the
 * eventfd and sends the child SIGUSR1 through a pidfd as soon as it wakes; the child's
 * handler stamps its arrival, as reaction_target.c's does. With env HIGH, a second threshold
 * 64 KiB above the usage, as the watchdog arms to see a rise begin: its wake reads the
 * cgroup's usage and memory.stat, as a watchdog's sample does, and the parent polls on.
 * Two scheduling delays lie between
 * the crossing and the stamp: the parent's wake, then the child's run of its handler.
 * Prints `woke-cross W ms  sig-cross S ms` (CLOCK_MONOTONIC), or `never` when no crossing
 * was reported within 3 s.
 *
 * Build: cc -O2 -Wall -o reaction_floor scripts/bench/reaction_floor.c
 * Usage (root, cgroup v1): reaction_floor /sys/fs/cgroup/memory/DIR 8 16 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup_bench.h"

static volatile int64_t sig_ns;

static void on_usr1(int sig) {
    (void)sig;
    if (!sig_ns) sig_ns = now_ns();
}

/* The child: joins the cgroup, touches the base, says so on `ready`, waits for `go`, jumps,
 * then waits up to 3 s for SIGUSR1 and writes `cross_ns sig_ns` on `ready`. */
static int child(const char *dir, long above, long jump, long base, int ready, int go) {
    char path[512];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *procs = fopen(path, "w");
    if (!procs) return 2;
    fprintf(procs, "%d\n", getpid());
    fclose(procs);
    signal(SIGUSR1, on_usr1);
    char *warm = malloc(base);
    char *m = mmap(NULL, jump, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!warm || m == MAP_FAILED) return 3;
    memset(warm, 1, base);
    if (getenv("NOHUGE")) madvise(m, jump, MADV_NOHUGEPAGE);
    char byte = 1;
    if (write(ready, &byte, 1) != 1 || read(go, &byte, 1) != 1) return 3;
    const long chunk = 64 << 10;
    int64_t cross = 0;
    for (long off = 0; off < jump; off += chunk) {
        memset(m + off, 1, chunk < jump - off ? chunk : jump - off);
        if (!cross && off + chunk >= above) cross = now_ns();
    }
    int64_t start = now_ns();
    while (!sig_ns && now_ns() - start < 3000000000LL) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    int64_t stamps[2] = {cross, sig_ns};
    return write(ready, stamps, sizeof stamps) == sizeof stamps ? 0 : 3;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s CGROUP_DIR ABOVE_MIB JUMP_MIB\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    long above = atol(argv[2]) << 20, jump = atol(argv[3]) << 20;
    long base = (getenv("BASE") ? atol(getenv("BASE")) : 64) << 20;
    if (getenv("JUMP_KIB")) jump = atol(getenv("JUMP_KIB")) << 10;
    int up[2], down[2];
    if (pipe(up) || pipe(down)) return 2;
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) _exit(child(dir, above, jump, base, up[1], down[0]));

    char byte, path[512];
    if (read(up[0], &byte, 1) != 1) return 3;
    long usage = read_number(dir, "memory.usage_in_bytes");
    snprintf(path, sizeof path, "%s/memory.usage_in_bytes", dir);
    int usage_fd = open(path, O_RDONLY);
    snprintf(path, sizeof path, "%s/cgroup.event_control", dir);
    int control = open(path, O_WRONLY);
    int efd = eventfd(0, EFD_NONBLOCK);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (usage < 0 || usage_fd < 0 || control < 0 || pidfd < 0 ||
        arm(control, efd, usage_fd, usage + above) != 0) {
        perror("arming the threshold");
        kill(pid, SIGKILL);
        return 2;
    }
    int high = eventfd(0, EFD_NONBLOCK);
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    int stat_fd = open(path, O_RDONLY);
    if (getenv("HIGH") && (stat_fd < 0 || arm(control, high, usage_fd, usage + (64 << 10)) != 0)) {
        perror("arming the high threshold");
        kill(pid, SIGKILL);
        return 2;
    }
    if (write(down[1], &byte, 1) != 1) return 3;
    struct pollfd p[2] = {{efd, POLLIN, 0}, {high, POLLIN, 0}};
    int64_t woke = 0, start = now_ns();
    while (!woke && now_ns() - start < 3000000000LL && poll(p, 2, 3000) > 0) {
        uint64_t count;
        if (p[0].revents) {
            woke = now_ns();
            syscall(SYS_pidfd_send_signal, pidfd, SIGUSR1, NULL, 0);
        } else if (p[1].revents && read(high, &count, 8) == 8) {
            char buf[8192];
            if (pread(usage_fd, buf, sizeof buf, 0) < 0 || pread(stat_fd, buf, sizeof buf, 0) < 0)
                return 3;
        }
    }
    int64_t stamps[2] = {0, 0};
    if (read(up[0], stamps, sizeof stamps) != sizeof stamps) return 3;
    waitpid(pid, NULL, 0);
    if (!woke || !stamps[1]) {
        printf("never\n");
        return 0;
    }
    printf("woke-cross %.3f ms  sig-cross %.3f ms\n", (woke - stamps[0]) / 1e6,
           (stamps[1] - stamps[0]) / 1e6);
    return 0;
}
