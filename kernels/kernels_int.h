/*
** kernels/kernels_int.h - private to kernels/: how the backends' tables
** are built (kernels/table.c), and the argument checks and contractions
** that every backend shares (kernels/adapt.c).
*/
#ifndef TRADB_KERNELS_INT_H
#define TRADB_KERNELS_INT_H

#include "kernels/kernels.h"

/*
** A table is built as BLIS builds a context: it starts as a copy of the
** reference (every entry, portable C) and each backend's init overrides
** the entries it serves, in order:
**   tk_fast_init      contract, combine, map, copy (kernels/fast.c)
**   tk_openblas_init  gemm through cblas (kernels/blas.c)
**   tk_cuda_init      gemm, contract, combine, map, copy, keep, release
**                     (kernels/cuda.c)
** so "openblas" is reference + fast + openblas and "cuda" is that + cuda.
** tk_cuda_init receives the completed host table in t and keeps a copy:
** its calls that run on the host (small, not worth a copy, no fit, no
** device) go to those entries.
*/
void tk_fast_init(tk_backend *t);
void tk_openblas_init(tk_backend *t);
/* The OpenBLAS core to name over core, the one OpenBLAS chose, on a CPU
** of the given level (3: AVX2 and FMA, 4: AVX-512 F, BW, DQ and VL; 0:
** neither): "SkylakeX" or "Haswell" over a generic core below it, else
** NULL (tk_blas_core_wanted). */
const char *tk_blas_core_over(const char *core, int level);
void tk_cuda_init(tk_backend *t); /* only where compiled in */

/*
** combine, map and copy as contractions (for backends that serve them
** through their contract), with the checks of their arguments that every
** backend makes, the reference too: TR_ETYPE for an element type that is
** not f32 or f64, TR_EINVAL for a bad agg, program, rank or a negative
** size.  Each returns that error, 0 if there is nothing to do (an empty
** range), or 1 with *op the contraction that does the call.
*/
int tk_combine_contract(tr_dtype dt, tk_agg agg, void *dst, const void *src, int64_t n,
                        const tr_cancel *cancel, tk_contract *op);
int tk_map_contract(tr_dtype dt, const tk_prog *prog, void *x, int64_t n,
                    const tr_cancel *cancel, tk_contract *op);
int tk_copy_contract(tr_dtype dt, int rank, const int64_t *extent, void *dst,
                     const int64_t *dst_stride, const void *src, const int64_t *src_stride,
                     const tr_cancel *cancel, tk_contract *op);

/* Define the static entries s_combine, s_map and s_copy of a backend that
** runs them as contractions through CONTRACT, its contract entry. */
#define TK_CONTRACT_ADAPTERS(CONTRACT)                                        \
  static int s_combine(tr_dtype dt, tk_agg agg, void *dst, const void *src,   \
                       int64_t n, const tr_cancel *cancel) {                  \
    tk_contract op;                                                           \
    int rc = tk_combine_contract(dt, agg, dst, src, n, cancel, &op);          \
    return rc > 0 ? CONTRACT(&op) : rc;                                       \
  }                                                                           \
  static int s_map(tr_dtype dt, const tk_prog *prog, void *x, int64_t n,      \
                   const tr_cancel *cancel) {                                 \
    tk_contract op;                                                           \
    int rc = tk_map_contract(dt, prog, x, n, cancel, &op);                    \
    return rc > 0 ? CONTRACT(&op) : rc;                                       \
  }                                                                           \
  static int s_copy(tr_dtype dt, int rank, const int64_t *extent, void *dst,  \
                    const int64_t *dst_stride, const void *src,               \
                    const int64_t *src_stride, const tr_cancel *cancel) {     \
    tk_contract op;                                                           \
    int rc = tk_copy_contract(dt, rank, extent, dst, dst_stride, src,         \
                              src_stride, cancel, &op);                       \
    return rc > 0 ? CONTRACT(&op) : rc;                                       \
  }

#endif /* TRADB_KERNELS_INT_H */
