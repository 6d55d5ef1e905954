/*
** kernels/blas.c - the OpenBLAS entries of the "openblas" backend: gemm
** through cblas, and the BLAS thread count.  kernels/table.c sets them over
** the reference and the portable fast kernels (fast.c).
*/
#include "config.h"

#include <cblas.h>
#include <limits.h>

#include "kernels/kernels_int.h"

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

/* A panel of 2^32 multiply-adds: 0.07 s in f32 (0.14 s in f64) on one core
** of the 2-core development machine (65e9 a second), and at least 256 rows
** when the engine splits 4096^3 (the packing of B that every call repeats
** then costs 3%, measured). */
void tk_openblas_init(tk_backend *t) {
  t->name = "openblas";
  t->gemm = s_gemm;
  t->gemm_panel = (int64_t)1 << 32;
}

void tk_set_blas_threads(int nthreads) {
  openblas_set_num_threads(nthreads < 1 ? 1 : nthreads);
}
