/*
** tests/unit/test_cuda.c - the cuda backend against the reference.  Every
** comparison of test_kernels.c (gemm in f32 and f64: plain, transposed,
** batched, padded, k = 0; contractions with SUM, MAX and MIN, broadcasts
** (stride 0), diagonals, transposes, ragged and empty extents, random
** einsums; combine, map, copy; fill_random, which cuda leaves to the
** reference) runs here with the cuda backend as the one under test and
** every call sent to the device.  Then what only a GPU backend has: kept
** copies that spare later copies, the memory budget with its fallbacks,
** the row panels of a large product, stale copies after a host write.
**
** Without a usable GPU (or without CUDA compiled in) every test reports
** SKIPPED and the program exits 77, which `make check` shows as SKIP.
*/
#include "config.h"

#include <criterion/criterion.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kernels.h"

static const tk_backend *s_blas(void);
#define S_UNDER_TEST 1
#include "tests/unit/test_kernels.c"

/* The backend under test: cuda, sending every call to the device; the
** test is skipped without one. */
static const tk_backend *s_blas(void) {
  const tk_backend *b = tk_backend_get("cuda");
  char why[320] = "built without CUDA";
  if (!b || !tk_device_info(why, sizeof why)) cr_skip_test("no CUDA device: %s", why);
  tk_device_set_offload(0);
  return b;
}

/* C = A B (m x k times k x n, f32) by the reference, to compare with. */
static void *s_ref_product(const void *a, const void *b, int64_t m, int64_t n, int64_t k) {
  void *c = s_buf(TR_F32, m * n, 0, 0);
  cr_assert_eq(s_ref()->gemm(TR_F32, 0, 0, m, n, k, 1, a, k, 0, b, n, 0, 0, c, n, 0, 1), TR_OK);
  return c;
}

Test(cuda, kept_operands_are_copied_once) {
  const tk_backend *g = s_blas();
  enum { M = 300, N = 200, K = 250 };
  tk_device_stats s0, s1, s2;
  s_seed(21);
  float *a = s_buf(TR_F32, M * K, -1, 1), *b = s_buf(TR_F32, K * N, -1, 1);
  float *c = s_buf(TR_F32, M * N, 0, 0), *want = s_ref_product(a, b, M, N, K);
  g->keep(a, sizeof(float) * M * K);
  g->keep(b, sizeof(float) * K * N);
  g->keep(c, sizeof(float) * M * N);
  cr_assert_eq(g->gemm(TR_F32, 0, 0, M, N, K, 1, a, K, 0, b, N, 0, 0, c, N, 0, 1), TR_OK);
  s_expect_close(TR_F32, c, want, M * N, "first product");
  tk_device_stats_get(&s0);
  cr_assert_eq(g->gemm(TR_F32, 0, 0, M, N, K, 1, a, K, 0, b, N, 0, 0, c, N, 0, 1), TR_OK);
  tk_device_stats_get(&s1);
  s_expect_close(TR_F32, c, want, M * N, "second product");
  cr_expect_eq(s1.h2d_bytes, s0.h2d_bytes, "kept operands copied again: %llu bytes",
               (unsigned long long)(s1.h2d_bytes - s0.h2d_bytes));
  cr_expect_eq(s1.d2h_bytes - s0.d2h_bytes, sizeof(float) * M * N, "C comes back once");
  cr_expect_gt(s1.copy_s, 0);
  /* Once released, A is copied again. */
  g->release(a);
  cr_assert_eq(g->gemm(TR_F32, 0, 0, M, N, K, 1, a, K, 0, b, N, 0, 0, c, N, 0, 1), TR_OK);
  tk_device_stats_get(&s2);
  cr_expect_eq(s2.h2d_bytes - s1.h2d_bytes, sizeof(float) * M * K);
  s_expect_close(TR_F32, c, want, M * N, "after release");
  g->release(NULL);
  tr_free_aligned(a);
  tr_free_aligned(b);
  tr_free_aligned(c);
  tr_free_aligned(want);
}

/* A kept buffer written on the host side (a call the backend ran on the
** host) must not be read back from its stale device copy. */
Test(cuda, host_writes_make_kept_copies_stale) {
  const tk_backend *g = s_blas();
  enum { N = 4096 };
  float x[N], y[N], want[N];
  s_seed(22);
  for (int i = 0; i < N; i++) x[i] = y[i] = want[i] = (float)s_rand();
  g->keep(x, sizeof x);
  tk_prog twice = s_prog("0 #2 *");
  cr_assert_eq(g->map(TR_F32, &twice, x, N, NULL), TR_OK); /* on the device: copy kept */
  tk_device_set_offload((int64_t)1 << 40);           /* now everything on the host */
  cr_assert_eq(g->combine(TR_F32, TK_AGG_SUM, x, y, N, NULL), TR_OK);
  tk_device_set_offload(0);
  cr_assert_eq(g->combine(TR_F32, TK_AGG_SUM, x, y, N, NULL), TR_OK); /* device again */
  for (int i = 0; i < N; i++) want[i] = 2 * want[i] + y[i] + y[i];
  s_expect_close(TR_F32, x, want, N, "map, host combine, device combine");
  g->release(NULL);
}

/* With a budget too small for the operands the calls still succeed: the
** product runs in pieces, the rest on the host. */
Test(cuda, tiny_budget_falls_back) {
  const tk_backend *g = s_blas();
  enum { M = 700, N = 300, K = 500 };
  tk_device_stats s0, s1;
  s_seed(23);
  tk_device_set_memory(1 << 20); /* 1 MiB: A alone is 1.4 MB */
  tk_device_stats_get(&s0);
  float *a = s_buf(TR_F32, M * K, -1, 1), *b = s_buf(TR_F32, K * N, -1, 1);
  float *c = s_buf(TR_F32, M * N, 0, 0), *want = s_ref_product(a, b, M, N, K);
  g->keep(a, sizeof(float) * M * K);
  cr_assert_eq(g->gemm(TR_F32, 0, 0, M, N, K, 1, a, K, 0, b, N, 0, 0, c, N, 0, 1), TR_OK);
  s_expect_close(TR_F32, c, want, M * N, "product under a 1 MiB budget");
  tk_device_stats_get(&s1);
  cr_expect_gt(s1.cpu_calls + s1.gpu_calls, s0.cpu_calls + s0.gpu_calls + 1,
               "the product should have run in pieces");
  /* A reduction too large for the budget runs on the host. */
  int64_t sz[] = {M, K};
  s_case cs = s_einsum(TR_F32, "ij->i", "ij", sz, "0 0 *", TK_AGG_MAX, 0);
  s_run_case(&cs, "row MAX of squares under a 1 MiB budget");
  g->release(NULL);
  tr_free_aligned(a);
  tr_free_aligned(b);
  tr_free_aligned(c);
  tr_free_aligned(want);
}

/* tk_device_set_memory(0) goes back to the default budget: a product that
** ran in pieces under 1 MiB runs as one device call again. */
Test(cuda, budget_back_to_default) {
  const tk_backend *g = s_blas();
  enum { M = 700, N = 300, K = 500 };
  tk_device_stats s0, s1, s2;
  s_seed(25);
  float *a = s_buf(TR_F32, M * K, -1, 1), *b = s_buf(TR_F32, K * N, -1, 1);
  float *c = s_buf(TR_F32, M * N, 0, 0), *want = s_ref_product(a, b, M, N, K);
  tk_device_set_memory(1 << 20);
  tk_device_stats_get(&s0);
  cr_assert_eq(g->gemm(TR_F32, 0, 0, M, N, K, 1, a, K, 0, b, N, 0, 0, c, N, 0, 1), TR_OK);
  tk_device_stats_get(&s1);
  tk_device_set_memory(0);
  cr_assert_eq(g->gemm(TR_F32, 0, 0, M, N, K, 1, a, K, 0, b, N, 0, 0, c, N, 0, 1), TR_OK);
  tk_device_stats_get(&s2);
  s_expect_close(TR_F32, c, want, M * N, "product with the default budget");
  cr_expect_gt(s1.cpu_calls + s1.gpu_calls, s0.cpu_calls + s0.gpu_calls + 1, "1 MiB: in pieces");
  cr_expect_eq(s2.gpu_calls - s1.gpu_calls, 1, "default budget: one device call");
  cr_expect_eq(s2.cpu_calls, s1.cpu_calls, "default budget: nothing on the host");
  g->release(NULL);
  tr_free_aligned(a);
  tr_free_aligned(b);
  tr_free_aligned(c);
  tr_free_aligned(want);
}

/* Products large enough to run in row panels (C copied back while later
** panels compute), with padded rows whose gaps must survive, beta != 0,
** both dtypes and a transposed operand. */
Test(cuda, large_products_in_panels) {
  s_blas();
  s_seed(24);
  s_gemm_case(TR_F32, 0, 0, 2100, 520, 1000, 1, 0, 1, 3);
  s_gemm_case(TR_F64, 1, 0, 1500, 700, 1000, -0.5, 2, 1, 1);
  s_gemm_case(TR_F32, 0, 1, 1030, 1100, 900, 1, 1, 1, 0);
}

/* Ragged edge chunks of a chunked product, as the engine runs them: the
** same kept buffers reused for chunks of different shapes. */
Test(cuda, ragged_edge_chunks) {
  const tk_backend *g = s_blas();
  static const int64_t ext[][3] = {{64, 64, 64}, {64, 17, 64}, {5, 64, 33}, {1, 1, 64}, {64, 64, 1}};
  s_seed(25);
  float *a = s_buf(TR_F32, 64 * 64, -1, 1), *b = s_buf(TR_F32, 64 * 64, -1, 1);
  float *c1 = s_buf(TR_F32, 64 * 64, 0, 0), *c2 = s_buf(TR_F32, 64 * 64, 0, 0);
  for (int t = 0; t < 5; t++) {
    int64_t m = ext[t][0], n = ext[t][1], k = ext[t][2];
    g->keep(a, sizeof(float) * (size_t)(m * k));
    g->keep(c1, sizeof(float) * (size_t)(m * n));
    cr_assert_eq(s_ref()->gemm(TR_F32, 0, 0, m, n, k, 1, a, k, 0, b, n, 0, 0, c2, n, 0, 1), TR_OK);
    cr_assert_eq(g->gemm(TR_F32, 0, 0, m, n, k, 1, a, k, 0, b, n, 0, 0, c1, n, 0, 1), TR_OK);
    s_expect_close(TR_F32, c1, c2, m * n, "ragged chunk");
    g->release(a);
    g->release(c1);
  }
  g->release(NULL);
  tr_free_aligned(a);
  tr_free_aligned(b);
  tr_free_aligned(c1);
  tr_free_aligned(c2);
}

/* Is a device there?  Asked in a child process: this one forks the tests
** and must not have CUDA initialized when it does. */
static int s_device_present(void) {
  int st = 0;
  pid_t pid = fork();
  if (pid == 0) _exit(tk_device_info(NULL, 0) ? 0 : 1);
  return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
  int present = s_device_present(), result = 0;
  struct criterion_test_set *tests = criterion_initialize();
  if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
  criterion_finalize(tests);
  /* 77: skipped, for the automake test driver. */
  return result ? result : present ? 0 : 77;
}
