/*
** kernels/cuda_kernels.cu - the general chunk contraction (tk_contract) on
** a CUDA device; combine, map and copy run through it too (kernels/cuda.c).
**
** One thread per output element walks the aggregated labels with an
** odometer of per-operand offsets, evaluates the scalar program on a small
** stack in the element type (the evaluator of kernels/opcodes.h, as the
** reference's) and folds the values with the aggregation, as the reference
** does.  When there are few output elements and many
** aggregated tuples (a full reduction, row sums of a wide chunk), the
** tuples are split into nparts slices: a first kernel leaves one partial
** result per (slice, element), a second folds them into out.  The task
** itself travels as the kernel's parameter (about 3.5 KB), so a launch
** needs no copy of its own.
*/
#include "config.h"

#include <cuda_runtime.h>
#include <math.h>

#include "kernels/cuda_kernels.h"

#define S_THREADS 256           /* threads per block */
#define S_WANT_THREADS 131072   /* enough threads to fill a large GPU */
#define S_MIN_SLICE 64          /* aggregated tuples per slice at least */

template <typename T> __device__ T s_identity(int agg) {
  switch (agg) {
  case TK_AGG_MAX: return -INFINITY;
  case TK_AGG_MIN: return INFINITY;
  default: return 0;
  }
}

/* agg(a, b) exactly as the reference: NONE keeps b, NaN b leaves MAX/MIN. */
template <typename T> __device__ T s_agg(int agg, T a, T b) {
  switch (agg) {
  case TK_AGG_SUM: return a + b;
  case TK_AGG_MAX: return b > a ? b : a;
  case TK_AGG_MIN: return b < a ? b : a;
  default: return b;
  }
}

/* The scalar program on one tuple's inputs (kernels/opcodes.h). */
template <typename T> __device__ T s_eval(const tk_prog &p, const T *in) {
  TK_PROG_EVAL_BODY(T, p, in)
}

/* Thread gid handles output element o = gid % nouter, slice gid / nouter
** (tuples [slice * len, slice * len + len) of the aggregated labels). */
template <typename T>
__global__ void k_contract(const tk_contract op, int64_t nouter, int64_t ninner, int64_t nparts,
                           int64_t len, T *partial) {
  int64_t gid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (gid >= nouter * nparts) return;
  const int nl = op.nlabels, no = op.nout, ni = op.ninputs;
  int64_t o = gid % nouter, slice = gid / nouter;
  int64_t off[TK_MAX_INPUTS], idx[TK_MAX_LABELS], oo = 0;
  unsigned used = 0;
  for (int i = 0; i < op.prog.n; i++)
    if (op.prog.code[i].op == TK_OP_INPUT) used |= 1u << op.prog.code[i].arg;
  for (int k = 0; k < ni; k++) off[k] = 0;
  /* Output index, then the first tuple of the slice. */
  int64_t r = o;
  for (int l = no - 1; l >= 0; l--) {
    int64_t x = r % op.extent[l];
    r /= op.extent[l];
    oo += x * op.out_stride[l];
    for (int k = 0; k < ni; k++) off[k] += x * op.in_stride[k][l];
  }
  int64_t t0 = slice * len, t1 = t0 + len < ninner ? t0 + len : ninner;
  r = t0;
  for (int l = nl - 1; l >= no && t0 < t1; l--) { /* t0 < t1: no extent is 0 */
    idx[l] = r % op.extent[l];
    r /= op.extent[l];
    for (int k = 0; k < ni; k++) off[k] += idx[l] * op.in_stride[k][l];
  }
  T acc = s_identity<T>(op.agg), v[TK_MAX_INPUTS];
  for (int64_t t = t0; t < t1; t++) {
    for (int k = 0; k < ni; k++)
      if (used >> k & 1) v[k] = ((const T *)op.in[k])[off[k]];
    acc = s_agg<T>(op.agg, acc, s_eval<T>(op.prog, v));
    for (int l = nl - 1; l >= no; l--) { /* next tuple */
      for (int k = 0; k < ni; k++) off[k] += op.in_stride[k][l];
      if (++idx[l] < op.extent[l]) break;
      for (int k = 0; k < ni; k++) off[k] -= op.extent[l] * op.in_stride[k][l];
      idx[l] = 0;
    }
  }
  if (nparts > 1) {
    partial[slice * nouter + o] = acc;
    return;
  }
  T *out = (T *)op.out;
  if (op.accumulate) acc = s_agg<T>(op.agg, out[oo], acc);
  out[oo] = acc;
}

/* Fold the slices' partial results into out. */
template <typename T>
__global__ void k_fold(const tk_contract op, int64_t nouter, int64_t nparts, const T *partial) {
  int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (o >= nouter) return;
  int64_t r = o, oo = 0;
  for (int l = op.nout - 1; l >= 0; l--) {
    oo += r % op.extent[l] * op.out_stride[l];
    r /= op.extent[l];
  }
  T acc = s_identity<T>(op.agg);
  for (int64_t p = 0; p < nparts; p++) acc = s_agg<T>(op.agg, acc, partial[p * nouter + o]);
  T *out = (T *)op.out;
  if (op.accumulate) acc = s_agg<T>(op.agg, out[oo], acc);
  out[oo] = acc;
}

template <typename T>
static cudaError_t s_launch(const tk_contract *op, int64_t nouter, int64_t ninner, int64_t nparts,
                            void *partial, cudaStream_t st) {
  int64_t len = nparts > 1 ? (ninner + nparts - 1) / nparts : ninner;
  int64_t n = nouter * nparts;
  k_contract<T><<<(unsigned)((n + S_THREADS - 1) / S_THREADS), S_THREADS, 0, st>>>(
      *op, nouter, ninner, nparts, len, (T *)partial);
  if (nparts > 1)
    k_fold<T><<<(unsigned)((nouter + S_THREADS - 1) / S_THREADS), S_THREADS, 0, st>>>(
        *op, nouter, nparts, (const T *)partial);
  return cudaGetLastError();
}

extern "C" int64_t tk_cu_parts(int64_t nouter, int64_t ninner) {
  if (nouter >= S_WANT_THREADS || ninner < 2 * S_MIN_SLICE) return 1;
  int64_t p = (S_WANT_THREADS + nouter - 1) / nouter, most = ninner / S_MIN_SLICE;
  p = p < most ? p : most;
  /* Slices of equal length; the count that length really needs. */
  int64_t len = (ninner + p - 1) / p;
  return (ninner + len - 1) / len;
}

extern "C" cudaError_t tk_cu_contract(const tk_contract *op, int64_t nouter, int64_t ninner,
                                      int64_t nparts, void *partial, cudaStream_t st) {
  if (nouter <= 0) return cudaSuccess;
  return op->dtype == TR_F32 ? s_launch<float>(op, nouter, ninner, nparts, partial, st)
                             : s_launch<double>(op, nouter, ninner, nparts, partial, st);
}
