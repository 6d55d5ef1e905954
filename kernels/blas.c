/*
** kernels/blas.c - the OpenBLAS entries of the "openblas" backend: gemm
** through cblas, and the BLAS thread count.  kernels/table.c sets them over
** the reference and the portable fast kernels (fast.c).
*/
#include "config.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/kernels_int.h"

/* A product with one row or one column (m or n 1): a dot product or a
** matrix-vector product each, through ?dot and ?gemv.  ?gemm packs its
** operands on every call, so a batch of small ones is mostly that
** overhead: a row-wise dot product (dist[n] = SUM(P[n,e] * Df[n,e]), 2500
** rows of 1024 a call) took 3.3 ms by ?gemm and 0.3-0.4 ms by ?dot.  With
** beta 0, C is not read (it may hold anything): zeroed, then added to. */
static int s_thin(tr_dtype dt, int transa, int transb, int64_t m, int64_t n, int64_t k,
                  double alpha, const void *a, int64_t lda, int64_t stride_a, const void *b,
                  int64_t ldb, int64_t stride_b, double beta, void *c, int64_t ldc,
                  int64_t stride_c, int64_t batch) {
  size_t esz = dt == TR_F32 ? 4 : 8;
  /* the vector's stride: A's one row, or B's one column */
  blasint incx = m == 1 ? (transa ? (blasint)lda : 1) : (transb ? 1 : (blasint)ldb);
  /* C's stride along its longer side: a row (n) is contiguous, a column
  ** (m) steps by ldc */
  int64_t incy = m == 1 ? 1 : ldc, len = m == 1 ? n : m;
  for (int64_t q = 0; q < batch; q++) {
    const char *aq = (const char *)a + (size_t)(q * stride_a) * esz;
    const char *bq = (const char *)b + (size_t)(q * stride_b) * esz;
    char *cq = (char *)c + (size_t)(q * stride_c) * esz;
    if (beta == 0)
      for (int64_t i = 0; i < len; i++) memset(cq + (size_t)(i * incy) * esz, 0, esz);
    if (m == 1 && n == 1) {
      /* A's row by B's column */
      blasint incb = transb ? 1 : (blasint)ldb;
      if (dt == TR_F32) {
        float *y = (float *)cq;
        double dot = cblas_sdot((blasint)k, (const float *)aq, incx, (const float *)bq, incb);
        *y = (float)(alpha * dot + (beta == 0 ? 0 : beta * *y));
      } else {
        double *y = (double *)cq;
        *y = alpha * cblas_ddot((blasint)k, (const double *)aq, incx, (const double *)bq, incb) +
             (beta == 0 ? 0 : beta * *y);
      }
      continue;
    }
    /* the matrix and whether gemv reads it transposed: C's row is B^T
    ** times A's row; C's column is A times B's column */
    const void *mat = m == 1 ? (const void *)bq : (const void *)aq;
    const void *vec = m == 1 ? (const void *)aq : (const void *)bq;
    int tr = m == 1 ? !transb : transa;
    blasint rows = m == 1 ? (transb ? (blasint)n : (blasint)k) : (transa ? (blasint)k : (blasint)m);
    blasint cols = m == 1 ? (transb ? (blasint)k : (blasint)n) : (transa ? (blasint)m : (blasint)k);
    blasint ld = m == 1 ? (blasint)ldb : (blasint)lda;
    enum CBLAS_TRANSPOSE t = tr ? CblasTrans : CblasNoTrans;
    if (dt == TR_F32)
      cblas_sgemv(CblasRowMajor, t, rows, cols, (float)alpha, (const float *)mat, ld,
                  (const float *)vec, incx, beta == 0 ? 0.0f : (float)beta, (float *)cq,
                  (blasint)incy);
    else
      cblas_dgemv(CblasRowMajor, t, rows, cols, alpha, (const double *)mat, ld,
                  (const double *)vec, incx, beta == 0 ? 0.0 : beta, (double *)cq,
                  (blasint)incy);
  }
  return TR_OK;
}

static int s_gemm(tr_dtype dt, int transa, int transb, int64_t m, int64_t n,
                  int64_t k, double alpha, const void *a, int64_t lda,
                  int64_t stride_a, const void *b, int64_t ldb,
                  int64_t stride_b, double beta, void *c, int64_t ldc,
                  int64_t stride_c, int64_t batch) {
  const enum CBLAS_TRANSPOSE ta = transa ? CblasTrans : CblasNoTrans;
  const enum CBLAS_TRANSPOSE tb = transb ? CblasTrans : CblasNoTrans;
  if (dt != TR_F32 && dt != TR_F64) return TR_ETYPE;
  /* Reject what cblas would report through xerbla, which prints, and
  ** sizes beyond its int arguments. */
  if (m < 0 || n < 0 || k < 0 || batch < 0 ||
      lda < (transa ? m : k) || ldb < (transb ? k : n) || ldc < n ||
      lda < 1 || ldb < 1 || ldc < 1 || m > INT_MAX || n > INT_MAX ||
      k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
    return TR_EINVAL;
  if (m == 0 || n == 0) return TR_OK;
  if ((m == 1 || n == 1) && k > 0)
    return s_thin(dt, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                  ldc, stride_c, batch);
  /* Debian's OpenBLAS 0.3.21 has no cblas_?gemm_batch: one call each. */
  for (int64_t q = 0; q < batch; q++) {
    if (dt == TR_F32)
      cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k,
                  (float)alpha, (const float *)a + q * stride_a, (blasint)lda,
                  (const float *)b + q * stride_b, (blasint)ldb, (float)beta,
                  (float *)c + q * stride_c, (blasint)ldc);
    else
      cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k,
                  alpha, (const double *)a + q * stride_a, (blasint)lda,
                  (const double *)b + q * stride_b, (blasint)ldb, beta,
                  (double *)c + q * stride_c, (blasint)ldc);
  }
  return TR_OK;
}

/* X^T X by ?syrk: with the copy of its triangle, 1.6-1.9x faster than
** ?gemm of the same matrix twice (1024 x 1024 over 20000 in f32, one
** thread: 0.165 s against 0.31 s). */
static int s_syrk(tr_dtype dt, int trans, int64_t n, int64_t k, double alpha, const void *a,
                  int64_t lda, double beta, void *c, int64_t ldc) {
  const enum CBLAS_TRANSPOSE t = trans ? CblasTrans : CblasNoTrans;
  if (dt != TR_F32 && dt != TR_F64) return TR_ETYPE;
  if (n < 0 || k < 0 || lda < (trans ? n : k) || lda < 1 || ldc < n || ldc < 1 || n > INT_MAX ||
      k > INT_MAX || lda > INT_MAX || ldc > INT_MAX)
    return TR_EINVAL;
  if (n == 0) return TR_OK;
  if (dt == TR_F32)
    cblas_ssyrk(CblasRowMajor, CblasUpper, t, (blasint)n, (blasint)k, (float)alpha,
                (const float *)a, (blasint)lda, (float)beta, (float *)c, (blasint)ldc);
  else
    cblas_dsyrk(CblasRowMajor, CblasUpper, t, (blasint)n, (blasint)k, alpha, (const double *)a,
                (blasint)lda, beta, (double *)c, (blasint)ldc);
  return TR_OK;
}

/* A panel of 2^32 multiply-adds: 0.07 s in f32 (0.14 s in f64) on one core
** of the 2-core development machine (65e9 a second); the engine splits a
** larger product along its depth first, which packs nothing twice
** (tx_gemm_panels). */
void tk_openblas_init(tk_backend *t) {
  t->name = "openblas";
  t->gemm = s_gemm;
  t->gemm_panel = (int64_t)1 << 32;
  t->syrk = s_syrk;
}

/* OpenBLAS built for many CPUs (Debian's: DYNAMIC_ARCH) picks its kernels
** by CPU model as it loads, and a model newer than the library falls back
** to its generic SSE3 kernels ("Prescott").  Debian 12's 0.3.21 does that
** on an Emerald Rapids (family 6, model 207): a 4096^3 sgemm took 2.8 s
** on 2 cores there, against 0.46-0.59 s on its SkylakeX kernels.  The
** CPU's features (as the compiler's runtime reads them, the OS's support
** included) name the kernels it can run; they are wanted only over one of
** those generic choices, never over a name this table does not know (a
** newer library's own, or another vendor's). */
static const struct {
  const char *name; /* openblas_get_corename(), lower case */
  int level;        /* 1 SSE, 2 AVX, 3 AVX2 and FMA, 4 AVX-512 */
} s_generic[] = {{"prescott", 1}, {"core2", 1},       {"penryn", 1},  {"dunnington", 1},
                 {"nehalem", 1},  {"atom", 1},        {"sandybridge", 2}, {"haswell", 3}};

const char *tk_blas_core(void) { return openblas_get_corename(); }

const char *tk_blas_core_over(const char *core, int level) {
  for (size_t i = 0; level && core && i < sizeof s_generic / sizeof s_generic[0]; i++)
    if (!strcasecmp(core, s_generic[i].name))
      return s_generic[i].level >= level ? NULL : level >= 4 ? "SkylakeX" : level == 3 ? "Haswell" : NULL;
  return NULL;
}

const char *tk_blas_core_wanted(void) {
  if (getenv("OPENBLAS_CORETYPE")) return NULL; /* the user's choice */
  int level = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  level = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
              ? 4
          : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 3
                                                                            : 0;
#endif
  return tk_blas_core_over(openblas_get_corename(), level);
}

/* OpenBLAS's idle pool threads spin (sched_yield) for 2^28 cycles, about
** 0.1 s here, after each call before they sleep.  Workers share their
** machine's cores (local ones always): a worker whose call ended spins on
** a core another worker's call needs.  Measured on 2 cores, 2 local
** workers: a worker's thread took 110 ms of a core in the 0.5 s after a
** statement, and a product on one worker right after a statement on both
** took 0.11-0.15 s against 0.065 s a second later.  2^18 cycles (about
** 0.1 ms) still spans the gap between a task's consecutive calls. */
#define S_THREAD_TIMEOUT "18"

int tk_blas_setenv(void) {
  /* only what was set: a process started again must not find it unset */
  const char *core = tk_blas_core_wanted();
  int again = core && !setenv("OPENBLAS_CORETYPE", core, 1);
  if (!getenv("OPENBLAS_THREAD_TIMEOUT") && !getenv("GOTO_THREAD_TIMEOUT"))
    again |= !setenv("OPENBLAS_THREAD_TIMEOUT", S_THREAD_TIMEOUT, 1);
  return again;
}

void tk_set_blas_threads(int nthreads) {
  openblas_set_num_threads(nthreads < 1 ? 1 : nthreads);
}
