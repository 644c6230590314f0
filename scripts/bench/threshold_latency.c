/* The kernel alone: how soon a cgroup v1 memory threshold's eventfd wakes a thread polling
 * it after the process touches the page that crosses it (scripts/bench/reaction.sh measures
 * the same through the watchdog). Joins the v1 memory cgroup DIR, touches BASE MiB (env
 * BASE, default 64), registers a threshold ABOVE_MIB above the usage (and with env HIGH a
 * second one 64 KiB above it, as the watchdog's line and high), then touches JUMP_MIB more
 * in 64 KiB chunks; a thread polls the eventfds. Prints when the chunk crossing the
 * threshold was touched and when the thread woke (CLOCK_MONOTONIC, ms from the jump).
 *
 * Build: cc -O2 -pthread -o thr scripts/bench/threshold_latency.c
 * Usage (root, cgroup v1): mkdir /sys/fs/cgroup/memory/thr; echo $((430<<20)) >
 *   /sys/fs/cgroup/memory/thr/memory.limit_in_bytes; HIGH=1 BASE=400 ./thr
 *   /sys/fs/cgroup/memory/thr 8 16   (one run per process: it stays in the cgroup) */
#define _GNU_SOURCE
#include <pthread.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
static int64_t now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000LL+t.tv_nsec;}
static int efd, efd2; static volatile int64_t woke, woke2;
static void *waiter(void*a){struct pollfd p[2]={{efd,POLLIN,0},{efd2,POLLIN,0}};uint64_t x;
 for(;;){ if(poll(p,2,5000)<=0) return 0; int64_t t=now();
   if(p[1].revents){read(efd2,&x,8); if(!woke2) woke2=t;}
   if(p[0].revents){read(efd,&x,8); woke=t; return 0;} }}
static long rd(const char*dir,const char*f){char p[512];snprintf(p,512,"%s/%s",dir,f);FILE*x=fopen(p,"r");long v=-1;fscanf(x,"%ld",&v);fclose(x);return v;}
int main(int c,char**v){
  const char*dir=v[1]; long above=atol(v[2])<<20; long jump=atol(v[3])<<20;
  char p[512]; snprintf(p,512,"%s/cgroup.procs",dir); FILE*f=fopen(p,"w"); fprintf(f,"%d\n",getpid()); fclose(f);
  long base=(getenv("BASE")?atol(getenv("BASE")):64)<<20; char *warm=malloc(base); memset(warm,1,base);
  long usage=rd(dir,"memory.usage_in_bytes");
  efd=eventfd(0,EFD_NONBLOCK); snprintf(p,512,"%s/memory.usage_in_bytes",dir); int ufd=open(p,O_RDONLY);
  snprintf(p,512,"%s/cgroup.event_control",dir); int cfd=open(p,O_WRONLY);
  char line[128]; long thr=usage+above; int n=snprintf(line,128,"%d %d %ld",efd,ufd,thr); write(cfd,line,n);
  efd2=eventfd(0,EFD_NONBLOCK); n=snprintf(line,128,"%d %d %ld",efd2,ufd,usage+(64<<10)); if(getenv("HIGH")) write(cfd,line,n);
  pthread_t t; pthread_create(&t,0,waiter,0); usleep(20000);
  char *m=mmap(0,jump,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  if(getenv("NOHUGE")) madvise(m,jump,MADV_NOHUGEPAGE);
  long chunk=64<<10; int64_t t0=now(), cross=0;
  for(long o=0;o<jump;o+=chunk){ memset(m+o,1,chunk); if(!cross && o+chunk>=above) cross=now(); }
  int64_t done=now();
  long after=rd(dir,"memory.usage_in_bytes");
  pthread_join(t,0);
  printf("usage0 %ld thr %ld after %ld  cross %.3f ms  done %.3f ms  woke %.3f ms  woke-cross %.3f ms high %.3f\n",usage,thr,after,(cross-t0)/1e6,(done-t0)/1e6,(woke-t0)/1e6,(woke-cross)/1e6,woke2?(woke2-t0)/1e6:-1.0);
  return 0;}
