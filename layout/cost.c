/*
** layout/cost.c - the cost in seconds (Luo's thesis, chapter 10): a linear
** combination of what an operation does, with weights fitted by least
** squares from measured runs.
**
** The thesis's components are compute, network, the number of tuples and
** intermediate data; tradb's are the same with compute split by kernel
** kind, because a gemm on OpenBLAS or cuBLAS runs some fifty times more
** flops a second than the reference loops of a general contraction, and a
** map or combine is bound by memory, not by arithmetic.  Two departures:
**  - tuples count linearly as tasks, not as the thesis's log(tuples): in
**    SimSQL a tuple's overhead is amortised inside Hadoop's batches, in
**    tradb every task is a message, a queue entry and a kernel call, and
**    its overhead adds up one by one;
**  - every component is the busiest site's amount (compute per core), so a
**    weight is one site's (or core's) seconds per unit, as the thesis's
**    formulas divide by n (and n x p for compute);
**  - a seventh component counts round trips (phases of requests to the
**    workers, commits): on a statement of a few milliseconds they are
**    most of its time, and the thesis's Hadoop jobs had no such floor.
**
** Fit (section 10.3): t_i ~ C_i . w, w = argmin |C w - t|^2.  The thesis
** writes the normal equations, w = (C^T C)^-1 C^T t; here the same
** least-squares solution comes from a Householder QR of C with its columns
** scaled to unit length, which squares no condition number and shows a
** degenerate probe set as a vanishing diagonal of R instead of as a
** wildly wrong w.  Two departures, both for predictions that hold over
** four decades of run time: each run's row is divided by its time, so
** the fit minimises relative rather than absolute errors (the thesis's
** plain fit lets the longest runs decide every weight), and the weights
** are constrained to be non-negative (a component never makes a run
** faster), solved exactly over the supports of w.  A third, for
** components the probes hardly tell apart on a given cluster (on local
** workers an output's floats sent to its replica and its bytes written
** move almost together): the weights in force before the fit are a prior,
** a log-normal one of spread ln 3 about each, weighed against the runs by
** their own scatter about the plain fit (an empirical-Bayes ridge), and
** the fit is the posterior's mode, found by Gauss-Newton steps of the
** same non-negative least squares with one more row per weight.
*/
#include "config.h"
#include "layout/layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A column of the scaled fit whose part outside the span of the columns
** before it has a norm below this (of 1) is taken as moving in step with
** them: the probes cannot tell its weight from theirs.  On 2 workers
** holding every chunk twice, the probes' writes move in step with their
** floats sent (each output's replica is both) to 2.6e-7; on 4, 0.49. */
#define S_SEP_TOL 1e-3

/* The prior: each weight within about this factor of the one in force
** before the fit (one standard deviation of its logarithm, ln 3), weighed
** against the runs by their own scatter about the plain fit.  Without
** it, weights the probes hardly tell apart took turns at 0: eight
** CALIBRATEs in a row on 4 local workers fitted net at 0 in three and
** from 4e-12 to 5.3e-10 in the others, and the optimizer took moving
** floats between workers for free in those databases.  On a cluster far
** from the weights in force the data still decides what it determines:
** probe times made from this model with gemm 100x and packing 30x
** cheaper than the defaults (a GPU's), 20% noise, the 4-worker probes'
** amounts, five draws: gemm fitted at 1.0-2.3x its truth (the plain fit
** 0-1.6x), and at 0.7-2.2x by a second calibration starting there (gemm
** is then a small share of every probe's time, and poorly determined). */
#define S_PRIOR_SPREAD 1.0986122886681098
#define S_PRIOR_ITERS 50

static const char *const s_names[TL_NCOST] = {"gemm",  "pack",   "contract", "elemwise", "net",
                                              "tasks", "chunks", "write",    "phases"};

/* Components added after weights were first kept in catalogs: text
** without them is whole (tl_weights_parse). */
#define S_ADDED (1u << TL_C_CHUNKS | 1u << TL_C_PACK)

const char *tl_cost_name(int k) { return k >= 0 && k < TL_NCOST ? s_names[k] : "?"; }

int tl_cost_index(const char *name) {
  for (int k = 0; k < TL_NCOST; k++)
    if (!strcmp(name, s_names[k])) return k;
  return -1;
}

/*
** Defaults for an uncalibrated cluster, per unit on the busiest site: what
** CALIBRATE fitted (the median of five runs, rounded) on a 2-core x86-64
** with 4 local workers of one kernel thread each, OpenBLAS f32, chunks
** pulled between the workers, on the engine of 2026-11-24 (local pulls,
** AVX2 checksums, a warm heap):
**  gemm      9.5e-12 s/flop: one core of AVX-512 FMA, some 105 Gflop/s;
**  pack      5.5e-10 s/float of a gemm call's factors (BLAS copies each
**            into its blocked layout once a call): CALIBRATE on 4 local
**            workers fitted 5.3e-10 and 4.9e-10 beside gemm at 7.5e-12
**            and 8.6e-12 (the engine of 2026-11-30), and one core ran
**            C = A B at 6.5e-12 s/flop and 5e-10 s a float packed
**            (1024^3, 512 x 1024 x 4096, M x 2048 x 4096 for M = 64
**            and 128); before,
**            those floats counted as elemwise, at 40% of this, and
**            products thin in M or N looked as fast a flop as square ones;
**  contract  4e-11   s/flop-instruction: the contraction loops, per term
**            and instruction of the join's program;
**  elemwise  2.2e-10 s/element-instruction: maps, combines and copies;
**  net       5.9e-10 s/float sent or received: a copy on each end (a
**            pull between local workers), its checksum, and a share of
**            the cores the other workers compute on;
**  tasks     1.4e-5  s/kernel call: a chunk tuple fetched through the
**            chunk cache, re-chunked if need be, a kernel called;
**  chunks    5.4e-5  s/chunk made and kept (a blob, its checksum, a message
**            to a replica, a catalog row), the median of three fits on
**            the engine of 2026-11-30 (5.1e-5, 5.4e-5, 6.5e-5; tasks
**            1.5-1.7e-5 beside it): before, an output's chunks counted
**            as tasks, at a sixth of what each costs;
**  write     0       s/byte: the fit puts what replicating and storing an
**            output costs on its floats sent (they move together), and
**            writes land in memory or the page cache;
**  phases    4.3e-4  s/round trip: a phase of requests to the workers, a
**            commit.
** The weights fitted at 16:20 the same day (net 1.4e-9, elemwise 1.1e-10),
** before the warm heap at worker start and dot products for thin products
** (which the shuffle-dot probes run), ordered fewer of bench-opt's plans
** as they measured: in two runs each (`make bench-opt`, --reps 3), 33 and
** 36 of 46 cases ranked as measured, and 51 of 55 and 50 of 51 pairs that
** measured more than 1.10x apart ordered so, against 36 and 38, and 51 of
** 51 and 56 of 56, with these.  With 2 workers (one a core) the same fit
** gives net 3.7e-10, tasks 5.4e-6 and phases 3.3e-4, the compute weights
** alike.  Against the earlier weights, the embedded default's plans for
** `make bench` (2 workers) changed in the format DAG only, one product's
** implementation, its block as fast (0.695 s against 0.708 s a pass,
** medians of 12).
** They only need to order plans sensibly until CALIBRATE replaces them.
*/
void tl_weights_default(tl_weights *w) {
  static const double d[TL_NCOST] = {9.5e-12, 5.5e-10, 4e-11, 2.2e-10, 5.9e-10, 1.4e-5, 5.4e-5, 0, 4.3e-4};
  memcpy(w->w, d, sizeof d);
  w->fitted = 0;
}

double tl_seconds(const tl_weights *w, const tl_cost *c) {
  double s = 0;
  for (int k = 0; k < TL_NCOST; k++) s += w->w[k] * c->c[k];
  return s;
}

void tl_weights_text(const tl_weights *w, char *buf, size_t n) {
  size_t o = 0;
  if (n) buf[0] = '\0';
  for (int k = 0; k < TL_NCOST && o < n; k++)
    o += (size_t)snprintf(buf + o, n - o, "%s%s=%.6g", k ? " " : "", s_names[k], w->w[k]);
}

int tl_weights_parse(const char *text, tl_weights *w, tr_err *err) {
  tl_weights x = *w;
  int seen[TL_NCOST] = {0};
  const char *p = text;
  while (*p) {
    char name[32];
    int len = 0;
    while (*p == ' ') p++;
    if (!*p) break;
    while (*p && *p != '=' && *p != ' ' && len < (int)sizeof name - 1) name[len++] = *p++;
    name[len] = '\0';
    int k = tl_cost_index(name);
    if (k < 0 || *p != '=') return tr_seterr(err, TR_EINVAL, "unknown cost component '%s'", name);
    char *end;
    double v = strtod(p + 1, &end);
    if (end == p + 1 || !(v >= 0) || isinf(v))
      return tr_seterr(err, TR_EINVAL, "cost weight '%s' must be a number >= 0", name);
    x.w[k] = v;
    seen[k] = 1;
    p = end;
  }
  for (int k = 0; k < TL_NCOST; k++)
    if (!seen[k] && !(S_ADDED >> k & 1))
      return tr_seterr(err, TR_EINVAL, "no weight for '%s'", s_names[k]);
  *w = x;
  return TR_OK;
}

/* Least squares on the columns `use` (bit mask) of the n x K column-major
** matrix a (unit columns) against b, by Householder QR; x[k] = 0 off
** `use`.  Returns the residual's squared norm, or -1 if a column's part
** outside the span of the ones before it is shorter than S_SEP_TOL (its
** index in *dep). */
static double s_lsq(const double *a0, const double *b0, int n, unsigned use, double *x, int *dep) {
  enum { K = TL_NCOST };
  double *a = malloc(sizeof *a * (size_t)n * K), *b = malloc(sizeof *b * (size_t)n), res = 0;
  int col[K], nc = 0;
  if (!a || !b) {
    free(a);
    free(b);
    return -2;
  }
  for (int k = 0; k < K; k++) {
    x[k] = 0;
    if (use & (1u << k)) memcpy(&a[nc * n], &a0[k * n], sizeof *a * (size_t)n), col[nc++] = k;
  }
  memcpy(b, b0, sizeof *b * (size_t)n);
  for (int k = 0; k < nc; k++) {
    double *c = &a[k * n], norm = 0;
    for (int i = k; i < n; i++) norm += c[i] * c[i];
    norm = sqrt(norm);
    if (norm < S_SEP_TOL) {
      *dep = col[k];
      res = -1;
      goto done;
    }
    double alpha = c[k] > 0 ? -norm : norm; /* v = c - alpha e_k, no cancellation */
    c[k] -= alpha;
    double vv = 0;
    for (int i = k; i < n; i++) vv += c[i] * c[i];
    for (int j = k + 1; j <= nc; j++) { /* j == nc: b */
      double *y = j < nc ? &a[j * n] : b, dot = 0;
      for (int i = k; i < n; i++) dot += c[i] * y[i];
      double f = 2 * dot / vv;
      for (int i = k; i < n; i++) y[i] -= f * c[i];
    }
    c[k] = alpha; /* R's diagonal; the rest of the column is v, no longer needed */
  }
  for (int k = nc - 1; k >= 0; k--) {
    double s = b[k];
    for (int j = k + 1; j < nc; j++) s -= a[j * n + k] * x[col[j]];
    x[col[k]] = s / a[k * n + k];
  }
  for (int i = nc; i < n; i++) res += b[i] * b[i];
done:
  free(a);
  free(b);
  return res;
}

/* The exact non-negative least-squares optimum of the m x K system (a, b)
** on the columns `use`: the unconstrained fit on its own support, every
** support within `use` tried, the best whose weights are all >= 0 (all 0
** for the empty support).  Returns the residual's squared norm, or -2. */
static double s_nnls(const double *a, const double *b, int m, unsigned use, double *best) {
  enum { K = TL_NCOST };
  double x[K], best_res = INFINITY;
  int dep = 0;
  for (unsigned sub = use; sub; sub = (sub - 1) & use) {
    double res = s_lsq(a, b, m, sub, x, &dep);
    if (res == -2) return -2;
    int ok = res >= 0;
    for (int k = 0; k < K && ok; k++) ok = x[k] >= 0;
    if (ok && res < best_res) {
      best_res = res;
      memcpy(best, x, sizeof x);
    }
  }
  if (isinf(best_res)) { /* the empty support: every fitted weight 0 */
    memset(best, 0, sizeof x);
    best_res = 0;
    for (int i = 0; i < m; i++) best_res += b[i] * b[i];
  }
  return best_res;
}

int tl_weights_fit(int n, const tl_cost *c, const double *seconds, tl_weights *w, tl_fit_info *info,
                   tr_err *err) {
  enum { K = TL_NCOST };
  int rc = TR_OK, dep = 0, m = n + K; /* the runs' rows, then one row per weight's prior */
  if (n < K)
    return tr_seterr(err, TR_EINVAL, "%d runs cannot determine %d weights: need at least %d", n,
                     K, K);
  double *a = calloc((size_t)m * K, sizeof *a), *b = calloc((size_t)m, sizeof *b);
  double scale[K], x[K], best[K], prior[K];
  if (!a || !b) goto oom;
  /* Row i divided by its time (relative errors), columns scaled to unit
  ** length: a[k * m + i] = c_ik / t_i / scale_k, b_i = 1; the prior rows
  ** stay 0 until the fit's own scatter is known. */
  for (int i = 0; i < n; i++)
    if (!(seconds[i] > 0)) {
      rc = tr_seterr(err, TR_EINVAL, "run %d took %g s: times must be positive", i, seconds[i]);
      goto done;
    }
  for (int k = 0; k < K; k++) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (c[i].c[k] / seconds[i]) * (c[i].c[k] / seconds[i]);
    scale[k] = sqrt(s);
    if (!(scale[k] > 0)) {
      rc = tr_seterr(err, TR_EINVAL, "no run exercises '%s': its weight is undetermined",
                     s_names[k]);
      goto done;
    }
    for (int i = 0; i < n; i++) a[k * m + i] = c[i].c[k] / seconds[i] / scale[k];
    prior[k] = w->w[k];
  }
  for (int i = 0; i < n; i++) b[i] = 1;
  /* A component that moves in step with the ones before it keeps the
  ** weight it had: its share of each run's time comes off the right-hand
  ** side, and the others are fitted to the rest. */
  unsigned use = 0, keep = 0;
  for (int k = 0; k < K; k++) {
    double r = s_lsq(a, b, m, use | 1u << k, x, &dep);
    if (r == -2) goto oom;
    if (r == -1) {
      keep |= 1u << k;
      for (int i = 0; i < n; i++) b[i] -= a[k * m + i] * w->w[k] * scale[k];
    } else {
      use |= 1u << k;
    }
  }
  double res = s_nnls(a, b, m, use, best), plain[K];
  if (res == -2) goto oom;
  memcpy(plain, best, sizeof plain);
  /* The weights in force are the prior (S_PRIOR_SPREAD); it counts as
  ** much as the runs' scatter about this fit says they are worth. */
  int support = 0, np = 0;
  for (int k = 0; k < K; k++) support += best[k] > 0, np += (use >> k & 1) && prior[k] > 0;
  double lambda = n > support ? sqrt(res / (n - support)) / S_PRIOR_SPREAD : 0;
  for (int it = 0; np && lambda > 0 && it < S_PRIOR_ITERS; it++) {
    /* Gauss-Newton on log(w_k / p_k)^2: linear in w_k about the last fit
    ** w~_k (kept off 0, where the logarithm has no tangent). */
    double change = 0;
    for (int k = 0; k < K; k++) {
      if (!(use >> k & 1) || !(prior[k] > 0)) continue;
      double at = fmax(best[k] / scale[k], prior[k] * 1e-3);
      a[k * m + n + k] = lambda / (at * scale[k]);
      b[n + k] = lambda * (1 - log(at / prior[k]));
    }
    if (s_nnls(a, b, m, use, x) == -2) goto oom;
    for (int k = 0; k < K; k++)
      change = fmax(change, fabs(x[k] - best[k]) / fmax(fabs(best[k]), 1e-300));
    memcpy(best, x, sizeof x);
    if (change < 1e-9) break;
  }
  for (int k = 0; k < K; k++)
    if (keep >> k & 1) best[k] = plain[k] = w->w[k] * scale[k];
  if (info) {
    info->kept = keep;
    for (int k = 0; k < K; k++) info->plain[k] = plain[k] / scale[k];
  }
  for (int k = 0; k < K; k++) w->w[k] = best[k] / scale[k];
  w->fitted = 1;
  goto done;
oom:
  rc = tr_seterr(err, TR_ENOMEM, "out of memory fitting %d runs", n);
done:
  free(a);
  free(b);
  return rc;
}

/*
** The probe runs, on tensors named _cal_*.  Each varies one component much
** more than the others and the set spans all nine, at two sizes each, so
** the least-squares system is well determined: gemm products at 1024 and
** 2048; products of 32 and of 128 rows by 4096 x 4096 (mostly the wide
** factor packed); max-plus products (a contraction without BLAS); sums of four
** tensors (maps); transposed joins, whose operands are chunked across each
** other and shuffle, and row dot products of operands chunked across each
** other (one is shuffled, little is written); a small product cut into
** 16 x 16 chunks (thousands of kernel calls doing little, into a few
** hundred chunks); a map into a thousand small chunks (each made,
** checksummed, replicated and recorded: one kernel call each); outer
** products (large outputs from small inputs, mostly bytes written); tiny
** statements of one and two nodes (round trips and nothing else).
*/
#define S_MM(n, c)                                                                        \
  "CREATE TENSOR _cal_a[" #n "," #n "] CHUNK [" #c "," #c "]; CREATE TENSOR _cal_b[" #n  \
  "," #n "] CHUNK [" #c "," #c "]; FILL _cal_a UNIFORM(-1,1) SEED 1; FILL _cal_b UNIFORM(-1,1) SEED 2;"
#define S_THIN(m, n)                                                                      \
  "CREATE TENSOR _cal_a[" #m "," #n "] CHUNK [" #m "," #n "]; CREATE TENSOR _cal_b[" #n "," #n \
  "] CHUNK [" #n "," #n "]; FILL _cal_a UNIFORM(-1,1) SEED 1; FILL _cal_b UNIFORM(-1,1) SEED 2;"
#define S_SUM4(n)                                                                          \
  "CREATE TENSOR _cal_a[" #n "," #n "] CHUNK [1024,1024]; CREATE TENSOR _cal_b[" #n "," #n \
  "] CHUNK [1024,1024]; CREATE TENSOR _cal_d[" #n "," #n "] CHUNK [1024,1024]; CREATE TENSOR" \
  " _cal_e[" #n "," #n "] CHUNK [1024,1024]; FILL _cal_a UNIFORM(-1,1) SEED 1; FILL _cal_b"  \
  " UNIFORM(-1,1) SEED 2; FILL _cal_d UNIFORM(-1,1) SEED 3; FILL _cal_e UNIFORM(-1,1) SEED 4;"
#define S_TJ(n)                                                                             \
  "CREATE TENSOR _cal_a[" #n "," #n "] CHUNK [" #n ",128]; CREATE TENSOR _cal_b[" #n "," #n \
  "] CHUNK [128," #n "]; FILL _cal_a UNIFORM(-1,1) SEED 1; FILL _cal_b UNIFORM(-1,1) SEED 2;"
#define S_SHUF(n)                                                                           \
  "CREATE TENSOR _cal_a[" #n "," #n "] CHUNK [256," #n "]; CREATE TENSOR _cal_b[" #n "," #n \
  "] CHUNK [" #n ",256]; FILL _cal_a UNIFORM(-1,1) SEED 1; FILL _cal_b UNIFORM(-1,1) SEED 2;"
#define S_EW(n, c)                                                                        \
  "CREATE TENSOR _cal_a[" #n "," #n "] CHUNK [" #c "," #c "]; FILL _cal_a UNIFORM(-1,1) SEED 1;"
#define S_OUTER(n, c)                                                                     \
  "CREATE TENSOR _cal_u[" #n "] CHUNK [" #c "]; CREATE TENSOR _cal_v[" #n "] CHUNK [" #c \
  "]; FILL _cal_u UNIFORM(-1,1) SEED 1; FILL _cal_v UNIFORM(-1,1) SEED 2;"

static const tl_probe s_probes[] = {
    {"gemm-1024", S_MM(1024, 512), "_cal_c[i,j] = _cal_a[i,k] * _cal_b[k,j];", TL_C_GEMM},
    {"gemm-2048", S_MM(2048, 1024), "_cal_c[i,j] = _cal_a[i,k] * _cal_b[k,j];", TL_C_GEMM},
    {"thin-gemm-32", S_THIN(32, 4096), "_cal_c[i,j] = _cal_a[i,k] * _cal_b[k,j];", TL_C_PACK},
    {"thin-gemm-128", S_THIN(128, 4096), "_cal_c[i,j] = _cal_a[i,k] * _cal_b[k,j];", TL_C_PACK},
    {"maxplus-256", S_MM(256, 128), "_cal_c[i,j] = MAX(_cal_a[i,k] + _cal_b[k,j]);", TL_C_CONTRACT},
    {"maxplus-512", S_MM(512, 256), "_cal_c[i,j] = MAX(_cal_a[i,k] + _cal_b[k,j]);", TL_C_CONTRACT},
    {"sum4-2048", S_SUM4(2048),
     "_cal_c[i,j] = exp(_cal_a[i,j]) * _cal_b[i,j] + tanh(_cal_d[i,j]) - _cal_e[i,j];",
     TL_C_ELEMWISE},
    {"sum4-4096", S_SUM4(4096),
     "_cal_c[i,j] = exp(_cal_a[i,j]) * _cal_b[i,j] + tanh(_cal_d[i,j]) - _cal_e[i,j];",
     TL_C_ELEMWISE},
    {"transpose-join-2048", S_TJ(2048), "_cal_c[i,j] = _cal_a[i,j] + _cal_b[j,i];", TL_C_NET},
    {"transpose-join-4096", S_TJ(4096), "_cal_c[i,j] = _cal_a[i,j] + _cal_b[j,i];", TL_C_NET},
    {"shuffle-dot-2048", S_SHUF(2048), "_cal_c[i] = SUM(_cal_a[i,k] * _cal_b[i,k]);", TL_C_NET},
    {"shuffle-dot-4096", S_SHUF(4096), "_cal_c[i] = SUM(_cal_a[i,k] * _cal_b[i,k]);", TL_C_NET},
    {"tiny-chunks-128", S_MM(128, 16), "_cal_c[i,j] = _cal_a[i,k] * _cal_b[k,j];", TL_C_TASKS},
    {"tiny-chunks-256", S_MM(256, 16), "_cal_c[i,j] = _cal_a[i,k] * _cal_b[k,j];", TL_C_TASKS},
    {"many-chunks-512", S_EW(512, 16), "_cal_c[i,j] = _cal_a[i,j] + 1;", TL_C_CHUNKS},
    {"many-chunks-1024", S_EW(1024, 16), "_cal_c[i,j] = _cal_a[i,j] + 1;", TL_C_CHUNKS},
    {"outer-4096", S_OUTER(4096, 1024), "_cal_c[i,j] = _cal_u[i] * _cal_v[j];", TL_C_WRITE},
    {"outer-8192", S_OUTER(8192, 2048), "_cal_c[i,j] = _cal_u[i] * _cal_v[j];", TL_C_WRITE},
    {"one-node-16", S_OUTER(16, 16), "_cal_c[i] = _cal_u[i] + 1;", TL_C_PHASES},
    {"two-nodes-16", S_OUTER(16, 16), "_cal_c[i] = SUM(_cal_u[j]) * _cal_v[i];", TL_C_PHASES},
};

const tl_probe *tl_probes(int *n) {
  *n = (int)(sizeof s_probes / sizeof s_probes[0]);
  return s_probes;
}
