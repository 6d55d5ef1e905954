/*
** kernels/reference.c - the reference backend: every kernel as plain scalar
** loops in double, written to be obviously correct rather than fast.  Other
** backends are tested against it, and every table starts as a copy of it
** (kernels/table.c).  Its calls check their arguments as every backend's
** do (kernels/adapt.c).
*/
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/kernels_int.h"

static double s_get(tr_dtype dt, const void *p, int64_t i) {
  return dt == TR_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void s_put(tr_dtype dt, void *p, int64_t i, double v) {
  if (dt == TR_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}

static int s_dtype_ok(tr_dtype dt) { return dt == TR_F32 || dt == TR_F64; }

/* Loops poll their cancel token once every S_POLL steps (a step here is
** tens of nanoseconds: a poll every 0.1-0.5 ms, a load each time). */
#define S_POLL 4096

/* Count a step; true once every S_POLL steps if cancel is set. */
static inline int s_stopped(const tr_cancel *cancel, int64_t *steps) {
  return __builtin_expect((++*steps & (S_POLL - 1)) == 0, 0) && tr_cancelled(cancel);
}

/* agg(a, b); TK_AGG_NONE keeps the newer value b. */
static double s_agg(tk_agg agg, double a, double b) {
  switch (agg) {
  case TK_AGG_SUM: return a + b;
  case TK_AGG_MAX: return b > a ? b : a;
  case TK_AGG_MIN: return b < a ? b : a;
  default: return b;
  }
}

/* Advance the row-major odometer idx[lo..hi) within ext; 0 once it wraps
** (all of idx[lo..hi) back at 0), so a do-while visits every index once,
** and a rank-0 range exactly once. */
static int s_next(int64_t *idx, const int64_t *ext, int lo, int hi) {
  for (int d = hi - 1; d >= lo; d--) {
    if (++idx[d] < ext[d]) return 1;
    idx[d] = 0;
  }
  return 0;
}

static int s_contract(const tk_contract *op) {
  int rc = tk_contract_check(op), nl = op->nlabels, no = op->nout;
  int used[TK_MAX_INPUTS] = {0}, empty_agg = 0;
  int64_t idx[TK_MAX_LABELS] = {0}, steps = 0;
  if (rc != TR_OK) return rc;
  for (int l = 0; l < nl; l++) {
    if (op->extent[l] == 0 && l < no) return TR_OK; /* no output element */
    if (op->extent[l] == 0) empty_agg = 1;
  }
  for (int i = 0; i < op->prog.n; i++)
    if (op->prog.code[i].op == TK_OP_INPUT) used[op->prog.code[i].arg] = 1;
  do {
    /* The identity of agg, so an empty aggregation yields it. */
    double acc = op->agg == TK_AGG_MAX   ? -INFINITY
                 : op->agg == TK_AGG_MIN ? INFINITY
                                         : 0;
    int64_t o = 0;
    for (int l = 0; l < no; l++) o += idx[l] * op->out_stride[l];
    if (!empty_agg) {
      do {
        double v[TK_MAX_INPUTS];
        if (s_stopped(op->cancel, &steps)) return TR_EINTR;
        for (int k = 0; k < op->ninputs; k++) {
          int64_t off = 0;
          if (!used[k]) continue;
          for (int l = 0; l < nl; l++) off += idx[l] * op->in_stride[k][l];
          v[k] = s_get(op->dtype, op->in[k], off);
        }
        acc = s_agg(op->agg, acc, tk_prog_eval(&op->prog, v));
      } while (s_next(idx, op->extent, no, nl));
    }
    if (op->accumulate) acc = s_agg(op->agg, s_get(op->dtype, op->out, o), acc);
    s_put(op->dtype, op->out, o, acc);
  } while (s_next(idx, op->extent, 0, no));
  return TR_OK;
}

static int s_gemm(tr_dtype dt, int transa, int transb, int64_t m, int64_t n,
                  int64_t k, double alpha, const void *a, int64_t lda,
                  int64_t stride_a, const void *b, int64_t ldb,
                  int64_t stride_b, double beta, void *c, int64_t ldc,
                  int64_t stride_c, int64_t batch) {
  if (!s_dtype_ok(dt)) return TR_ETYPE;
  /* The leading-dimension rules of BLAS, so both backends reject alike. */
  if (m < 0 || n < 0 || k < 0 || batch < 0 ||
      lda < (transa ? m : k) || ldb < (transb ? k : n) || ldc < n ||
      lda < 1 || ldb < 1 || ldc < 1)
    return TR_EINVAL;
  for (int64_t q = 0; q < batch; q++) {
    int64_t oa = q * stride_a, ob = q * stride_b, oc = q * stride_c;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, cv;
        for (int64_t p = 0; p < k; p++)
          s += s_get(dt, a, oa + (transa ? p * lda + i : i * lda + p)) *
               s_get(dt, b, ob + (transb ? j * ldb + p : p * ldb + j));
        /* As in BLAS, beta == 0 does not read C (it may hold NaN). */
        cv = alpha * s;
        if (beta != 0) cv += beta * s_get(dt, c, oc + i * ldc + j);
        s_put(dt, c, oc + i * ldc + j, cv);
      }
  }
  return TR_OK;
}

/* The upper triangle term by term, as BLAS's syrk. */
static int s_syrk(tr_dtype dt, int trans, int64_t n, int64_t k, double alpha, const void *a,
                  int64_t lda, double beta, void *c, int64_t ldc) {
  if (!s_dtype_ok(dt)) return TR_ETYPE;
  if (n < 0 || k < 0 || lda < (trans ? n : k) || lda < 1 || ldc < n || ldc < 1) return TR_EINVAL;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i; j < n; j++) {
      double s = 0, cv;
      for (int64_t p = 0; p < k; p++)
        s += s_get(dt, a, trans ? p * lda + i : i * lda + p) *
             s_get(dt, a, trans ? p * lda + j : j * lda + p);
      cv = alpha * s;
      if (beta != 0) cv += beta * s_get(dt, c, i * ldc + j);
      s_put(dt, c, i * ldc + j, cv);
    }
  return TR_OK;
}

static int s_combine(tr_dtype dt, tk_agg agg, void *dst, const void *src,
                     int64_t n, const tr_cancel *cancel) {
  int64_t steps = 0;
  tk_contract op; /* unused: the reference runs its own loop */
  int rc = tk_combine_contract(dt, agg, dst, src, n, cancel, &op);
  if (rc <= 0) return rc;
  for (int64_t i = 0; i < n; i++) {
    if (s_stopped(cancel, &steps)) return TR_EINTR;
    s_put(dt, dst, i, s_agg(agg, s_get(dt, dst, i), s_get(dt, src, i)));
  }
  return TR_OK;
}

static int s_map(tr_dtype dt, const tk_prog *prog, void *x, int64_t n,
                 const tr_cancel *cancel) {
  int64_t steps = 0;
  tk_contract op; /* unused: the reference runs its own loop */
  int rc = tk_map_contract(dt, prog, x, n, cancel, &op);
  if (rc <= 0) return rc;
  for (int64_t i = 0; i < n; i++) {
    double v = s_get(dt, x, i);
    if (s_stopped(cancel, &steps)) return TR_EINTR;
    s_put(dt, x, i, tk_prog_eval(prog, &v));
  }
  return TR_OK;
}

static int s_copy(tr_dtype dt, int rank, const int64_t *extent, void *dst,
                  const int64_t *dst_stride, const void *src,
                  const int64_t *src_stride, const tr_cancel *cancel) {
  int64_t idx[TK_MAX_LABELS] = {0}, steps = 0;
  size_t es = tr_dtype_size(dt);
  tk_contract op; /* unused: the reference runs its own loop */
  int rc = tk_copy_contract(dt, rank, extent, dst, dst_stride, src, src_stride, cancel, &op);
  if (rc <= 0) return rc;
  do {
    int64_t od = 0, os = 0;
    if (s_stopped(cancel, &steps)) return TR_EINTR;
    for (int d = 0; d < rank; d++) {
      od += idx[d] * dst_stride[d];
      os += idx[d] * src_stride[d];
    }
    memcpy((char *)dst + od * (int64_t)es, (const char *)src + os * (int64_t)es,
           es);
  } while (s_next(idx, extent, 0, rank));
  return TR_OK;
}

/* Counter-based uniform in [0, 1): a pure function of (seed, ctr), so any
** element can be generated on its own, by any chunk, in any order. */
static double s_unit(uint64_t seed, uint64_t ctr) {
  return (double)(tr_mix64(seed ^ tr_mix64(ctr)) >> 11) * 0x1p-53;
}

static int s_fill_random(tr_dtype dt, tk_dist dist, double p0, double p1,
                         uint64_t seed, int rank, const int64_t *shape,
                         const int64_t *origin, const int64_t *extent,
                         void *out, const tr_cancel *cancel) {
  int64_t idx[TR_MAX_RANK] = {0}, n = 0, steps = 0;
  if (!s_dtype_ok(dt)) return TR_ETYPE;
  if (rank < 0 || rank > TR_MAX_RANK || !isfinite(p0) || !isfinite(p1) ||
      (dist == TK_FILL_UNIFORM && p0 > p1) ||
      (dist == TK_FILL_NORMAL && p1 < 0) ||
      (dist != TK_FILL_UNIFORM && dist != TK_FILL_NORMAL))
    return TR_EINVAL;
  for (int d = 0; d < rank; d++) {
    if (origin[d] < 0 || extent[d] < 0 || origin[d] + extent[d] > shape[d])
      return TR_EINVAL;
    if (extent[d] == 0) return TR_OK;
  }
  do {
    uint64_t g = 0; /* row-major linear index of the element in shape */
    double v;
    if (s_stopped(cancel, &steps)) return TR_EINTR;
    for (int d = 0; d < rank; d++)
      g = g * (uint64_t)shape[d] + (uint64_t)(origin[d] + idx[d]);
    if (dist == TK_FILL_UNIFORM) {
      v = p0 + (p1 - p0) * s_unit(seed, g);
    } else { /* Box-Muller on the streams 2g and 2g+1; 1 - u is in (0, 1] */
      double r = sqrt(-2 * log(1 - s_unit(seed, 2 * g)));
      v = p0 + p1 * r * cos(2 * M_PI * s_unit(seed, 2 * g + 1));
    }
    if (dt == TR_F32) {
      float f = (float)v;
      /* Rounding to float (or p0 + (p1-p0)*u in double) can land on hi;
      ** the neighbour of the nearest float lies back inside [lo, hi). */
      if (dist == TK_FILL_UNIFORM && p0 < p1 && f >= p1) f = nextafterf(f, -INFINITY);
      if (dist == TK_FILL_UNIFORM && p0 < p1 && f < p0) f = nextafterf(f, INFINITY);
      ((float *)out)[n++] = f;
    } else {
      if (dist == TK_FILL_UNIFORM && p0 < p1 && v >= p1) v = nextafter(p1, -INFINITY);
      ((double *)out)[n++] = v;
    }
  } while (s_next(idx, extent, 0, rank));
  return TR_OK;
}

/* Host memory is the only memory here: nothing to keep. */
static void s_keep(const void *p, size_t bytes) {
  (void)p;
  (void)bytes;
}

static void s_release(const void *p) { (void)p; }

static const tk_backend s_reference = {
    .name = "reference",
    .gemm = s_gemm,
    .gemm_panel = (int64_t)1 << 26, /* about 1e9 multiply-adds a second */
    .syrk = s_syrk,
    .contract = s_contract,
    .combine = s_combine,
    .map = s_map,
    .copy = s_copy,
    .fill_random = s_fill_random,
    .keep = s_keep,
    .release = s_release,
};

const tk_backend *tk_reference(void) { return &s_reference; }
