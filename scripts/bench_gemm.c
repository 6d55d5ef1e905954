/*
** scripts/bench_gemm.c - the OpenBLAS peer of the benchmark suite
** (scripts/bench.py): one direct cblas_sgemm call, the limit on one machine.
**
**   bench_gemm A.npy B.npy C.npy REPS
**
** A (I x K) and B (K x J) are the f32 inputs that tradb saved; C = A * B is
** written to C.npy for the suite to check against NumPy.  One untimed call
** warms up OpenBLAS (thread pool start, page faults on C); then each of the
** REPS timed calls prints one line "gemm SECONDS" (CLOCK_MONOTONIC).
** OpenBLAS uses every core unless OPENBLAS_NUM_THREADS says otherwise.
**
** Not built by automake; bench.py builds it with
**   gcc -O2 scripts/bench_gemm.c $(pkg-config --cflags --libs openblas)
*/
#include <cblas.h>
#include <time.h>

#include "bench_npy.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc != 5 || atol(argv[4]) <= 0) {
    fprintf(stderr, "usage: bench_gemm A.npy B.npy C.npy REPS\n");
    return 2;
  }
  npy_mat a = npy_map(argv[1]), b = npy_map(argv[2]);
  long reps = atol(argv[4]);
  if (a.cols != b.rows) {
    fprintf(stderr, "bench_gemm: A is %ld x %ld but B is %ld x %ld\n", a.rows, a.cols,
            b.rows, b.cols);
    return 1;
  }
  npy_mat c = npy_create(argv[3], a.rows, b.cols, 1);
  int m = (int)a.rows, n = (int)b.cols, k = (int)a.cols;
  for (long r = 0; r <= reps; r++) { /* r == 0: the warm-up */
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data, k,
                b.data, n, 0.0f, c.data, n);
    double t = now() - t0;
    if (r > 0) {
      printf("gemm %.6f\n", t);
      fflush(stdout);
    }
  }
  npy_close(&c);
  npy_close(&a);
  npy_close(&b);
  return 0;
}
