/*
** scripts/bench_sgemm.c - the OpenBLAS peer of the foundation benchmark
** (scripts/bench.sh): `bench_sgemm N REPS` times C = A * B for N x N f32
** matrices with one cblas_sgemm call per rep.
**
** A and B hold deterministic pseudo-random values in [-1, 1) (a fixed
** xorshift generator), so every run does the same work.  One untimed call
** warms up OpenBLAS (thread pool start, page faults on C); then each of the
** REPS timed calls prints one line "sgemm N SECONDS" (CLOCK_MONOTONIC).
** OpenBLAS picks its thread count as usual: all cores unless
** OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS) says otherwise.
**
** Not built by automake; bench.sh builds it with
**   gcc -O2 scripts/bench_sgemm.c $(pkg-config --cflags --libs openblas)
*/
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fill p[0..n) with values in [-1, 1) from a xorshift64 stream. */
static void fill(float *p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (float)((double)(x >> 40) / (double)(1u << 23) - 1.0);
  }
}

static long parse_pos(const char *s, const char *what) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v <= 0) {
    fprintf(stderr, "bench_sgemm: %s must be a positive integer, not '%s'\n",
            what, s);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: bench_sgemm N REPS\n");
    return 2;
  }
  long n = parse_pos(argv[1], "N");
  long reps = parse_pos(argv[2], "REPS");
  size_t nn = (size_t)n * (size_t)n;
  float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b),
        *c = malloc(nn * sizeof *c);
  if (!a || !b || !c) {
    fprintf(stderr, "bench_sgemm: out of memory for N = %ld\n", n);
    return 1;
  }
  fill(a, nn, 1);
  fill(b, nn, 2);
  memset(c, 0, nn * sizeof *c);

  /* warm-up, untimed */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n,
              (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f, c, (int)n);
  for (long r = 0; r < reps; r++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n,
                (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f, c, (int)n);
    double t = now() - t0;
    printf("sgemm %ld %.6f\n", n, t);
    fflush(stdout);
  }
  /* keep the result live so the calls cannot be dropped */
  double s = 0;
  for (size_t i = 0; i < nn; i += (size_t)n + 1) s += c[i];
  fprintf(stderr, "bench_sgemm: checksum %.6g (threads %d)\n", s,
          openblas_get_num_threads());
  free(a);
  free(b);
  free(c);
  return 0;
}
