/*
** scripts/bench_faults.c - what fresh memory costs on this machine: map
** MIB MiB of anonymous memory, write one byte a page, unmap; ROUNDS times
** in one process, each round's milliseconds a MiB printed.  The first
** round takes pages the process has never had; the later ones take back
** what the round before it freed.  With `huge`, the mapping is aligned to
** 2 MiB and advised MADV_HUGEPAGE first, as NumPy does for its large
** arrays.  BENCHMARKS.md (*Fresh memory on this machine*) uses it.
**
**   gcc -O2 -o /tmp/bench_faults scripts/bench_faults.c
**   /tmp/bench_faults 1024 [huge] [ROUNDS]
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define HUGE_PAGE ((size_t)2 << 20)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  long mib = argc > 1 ? atol(argv[1]) : 0;
  int huge = argc > 2 && strcmp(argv[2], "huge") == 0;
  int rounds = argc > 2 + huge ? atoi(argv[2 + huge]) : 4;
  if (mib <= 0 || rounds <= 0) {
    fprintf(stderr, "usage: %s MIB [huge] [ROUNDS]\n", argv[0]);
    return 2;
  }
  size_t n = (size_t)mib << 20;
  for (int r = 0; r < rounds; r++) {
    char *m = mmap(NULL, n + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      perror("mmap");
      return 1;
    }
    char *p = (char *)(((size_t)m + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
    if (huge && madvise(p, n, MADV_HUGEPAGE)) perror("madvise"); /* then 4 KiB pages */
    double t = now();
    for (size_t i = 0; i < n; i += 4096) p[i] = 1;
    double s = now() - t;
    printf("round %d: %ld MiB in %s pages, %.3f s, %.2f ms a MiB\n", r + 1, mib, huge ? "huge" : "4 KiB",
           s, s * 1e3 / (double)mib);
    munmap(m, n + HUGE_PAGE);
  }
  return 0;
}
