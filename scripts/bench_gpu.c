/*
** scripts/bench_gpu.c - the C half of the GPU benchmark (scripts/bench_gpu.sh
** runs it beside tradb; `make bench-gpu` runs both).
**
**   bench_gpu table N REPS    C = A B for N x N f32 matrices through the
**                             kernel table (the "cuda" backend's gemm on
**                             host buffers, as the engine calls it) against
**                             a direct cublasSgemm on device buffers, in the
**                             same run, and the same two with host copies
**   bench_gpu direct N REPS   only the direct cuBLAS calls (the peer of a
**                             chunked tradb run)
**
** What is timed (median of REPS after one untimed warm-up each):
**   direct_sgemm    cublasSgemm on device-resident A, B, C, synchronized
**   direct_h2h      cudaMemcpy A and B up, cublasSgemm, cudaMemcpy C back
**                   (pageable host buffers, like the engine's)
**   table_kept      kt->gemm on host buffers that the engine would have
**                   declared with keep(): A and B stay on the device, C is
**                   copied back to the host in panels while the product
**                   runs (the steady state inside a plan)
**   table_cold      kt->gemm after release(NULL): A and B copied up too
** The requirement: table_kept at least 0.9x the throughput of
** direct_sgemm.  Each line of output is "name value [comment]".
** Results are checked against each other (max |difference| relative to
** max |C|); a mismatch fails the run.  Exits 77 without a GPU.
*/
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#ifndef HAVE_CUDA
int main(void) {
  fprintf(stderr, "bench_gpu: built without CUDA (configure --with-cuda)\n");
  return 77;
}
#else
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define S_MAX_REPS 100

/* Stop on a failed CUDA or cuBLAS call (both succeed with 0). */
#define S_CHECK(x)                                                             \
  do {                                                                         \
    if ((int)(x) != 0) {                                                       \
      fprintf(stderr, "bench_gpu: %s failed (line %d)\n", #x, __LINE__);       \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static int s_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double s_median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, s_cmp);
  return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* Deterministic values in [-1, 1) (the reference FILL UNIFORM). */
static void s_fill(float *p, int64_t n, uint64_t seed) {
  int64_t origin = 0;
  S_CHECK(tk_reference()->fill_random(TR_F32, TK_FILL_UNIFORM, -1, 1, seed, 1, &n, &origin, &n, p,
                                      NULL));
}

/* max |x - y| / max |y| over n elements. */
static double s_diff(const float *x, const float *y, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)x[i] - y[i]));
    m = fmax(m, fabs((double)y[i]));
  }
  return m > 0 ? d / m : d;
}

static void s_report(const char *name, double s, int64_t n, const char *note) {
  printf("%-14s %.6f s  %8.1f GFLOP/s%s%s\n", name, s, 2.0 * n * n * n / s * 1e-9,
         note ? "  " : "", note ? note : "");
}

/* The direct cuBLAS peers; C receives the product. */
static void s_direct(int64_t n, int reps, const float *a, const float *b, float *c, double *dev_s,
                     double *h2h_s) {
  size_t bytes = (size_t)(n * n) * sizeof(float);
  float *da, *db, *dc, one = 1, zero = 0;
  double t[S_MAX_REPS];
  cublasHandle_t h;
  S_CHECK(cublasCreate(&h));
  S_CHECK(cudaMalloc((void **)&da, bytes));
  S_CHECK(cudaMalloc((void **)&db, bytes));
  S_CHECK(cudaMalloc((void **)&dc, bytes));
  /* Row-major C = A B is column-major C^T = B^T A^T. */
#define S_SGEMM() S_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &one, db, \
                                      (int)n, da, (int)n, &zero, dc, (int)n))
  for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
    double t0 = tr_now();
    S_CHECK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    S_CHECK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
    S_SGEMM();
    S_CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    if (r >= 0) t[r] = tr_now() - t0;
  }
  *h2h_s = s_median(t, reps);
  for (int r = 0; r < reps; r++) {
    double t0 = tr_now();
    S_SGEMM();
    S_CHECK(cudaDeviceSynchronize());
    t[r] = tr_now() - t0;
  }
#undef S_SGEMM
  *dev_s = s_median(t, reps);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cublasDestroy(h);
}

/* The kernel table's gemm, kept (A, B on the device) or cold. */
static double s_table(const tk_backend *kt, int64_t n, int reps, const float *a, const float *b,
                      float *c, int kept, tk_device_stats *per_call) {
  size_t bytes = (size_t)(n * n) * sizeof(float);
  double t[S_MAX_REPS];
  tk_device_stats s0, s1;
  for (int r = -1; r < reps; r++) {
    if (!kept || r < 0) {
      kt->release(NULL);
      if (kept) {
        kt->keep(a, bytes);
        kt->keep(b, bytes);
        kt->keep(c, bytes);
      }
    }
    if (r == 0) tk_device_stats_get(&s0);
    double t0 = tr_now();
    S_CHECK(kt->gemm(TR_F32, 0, 0, n, n, n, 1, a, n, 0, b, n, 0, 0, c, n, 0, 1));
    if (r >= 0) t[r] = tr_now() - t0;
  }
  tk_device_stats_get(&s1);
  per_call->h2d_bytes = (s1.h2d_bytes - s0.h2d_bytes) / (uint64_t)reps;
  per_call->d2h_bytes = (s1.d2h_bytes - s0.d2h_bytes) / (uint64_t)reps;
  per_call->copy_s = (s1.copy_s - s0.copy_s) / reps;
  per_call->gpu_calls = s1.gpu_calls - s0.gpu_calls;
  per_call->cpu_calls = s1.cpu_calls - s0.cpu_calls;
  kt->release(NULL);
  return s_median(t, reps);
}

int main(int argc, char **argv) {
  char dev[320], note[256];
  if (argc != 4 || (strcmp(argv[1], "table") && strcmp(argv[1], "direct"))) {
    fprintf(stderr, "usage: bench_gpu table|direct N REPS\n");
    return 2;
  }
  int64_t n = atoll(argv[2]);
  int reps = atoi(argv[3]), table = !strcmp(argv[1], "table");
  if (n < 1 || n > 65536 || reps < 1 || reps > S_MAX_REPS) {
    fprintf(stderr, "bench_gpu: N must be 1..65536 and REPS 1..%d\n", S_MAX_REPS);
    return 2;
  }
  if (!tk_device_info(dev, sizeof dev)) {
    fprintf(stderr, "bench_gpu: no usable GPU: %s\n", dev);
    return 77;
  }
  printf("device         %s\n", dev);
  size_t bytes = (size_t)(n * n) * sizeof(float);
  float *a = tr_alloc_aligned(bytes), *b = tr_alloc_aligned(bytes);
  float *c0 = tr_alloc_aligned(bytes), *c1 = tr_alloc_aligned(bytes);
  if (!a || !b || !c0 || !c1) {
    fprintf(stderr, "bench_gpu: out of host memory\n");
    return 1;
  }
  s_fill(a, n * n, 1);
  s_fill(b, n * n, 2);
  memset(c1, 0, bytes);
  double dev_s, h2h_s;
  s_direct(n, reps, a, b, c0, &dev_s, &h2h_s);
  s_report("direct_sgemm", dev_s, n, "device-resident A, B, C");
  s_report("direct_h2h", h2h_s, n, "with cudaMemcpy of A, B up and C back");
  if (table) {
    const tk_backend *kt = tk_backend_get("cuda");
    tk_device_stats pc;
    double kept_s = s_table(kt, n, reps, a, b, c1, 1, &pc);
    snprintf(note, sizeof note, "ratio %.3f (needs >= 0.90: %s); per call %.1f MB up, %.1f MB down, copies %.4f s",
             dev_s / kept_s, dev_s / kept_s >= 0.9 ? "PASS" : "FAIL", pc.h2d_bytes / 1e6,
             pc.d2h_bytes / 1e6, pc.copy_s);
    s_report("table_kept", kept_s, n, note);
    if (pc.cpu_calls) printf("warning        %llu call(s) ran on the host\n", (unsigned long long)pc.cpu_calls);
    double cold_s = s_table(kt, n, reps, a, b, c1, 0, &pc);
    snprintf(note, sizeof note, "ratio to direct_h2h %.3f; per call %.1f MB up, %.1f MB down, copies %.4f s",
             h2h_s / cold_s, pc.h2d_bytes / 1e6, pc.d2h_bytes / 1e6, pc.copy_s);
    s_report("table_cold", cold_s, n, note);
    double d = s_diff(c1, c0, n * n);
    printf("max_rel_diff   %.3g\n", d);
    if (!(d <= 1e-3)) {
      fprintf(stderr, "bench_gpu: the kernel table's product differs from cuBLAS's\n");
      return 1;
    }
  }
  tr_free_aligned(a);
  tr_free_aligned(b);
  tr_free_aligned(c0);
  tr_free_aligned(c1);
  return 0;
}
#endif /* HAVE_CUDA */
