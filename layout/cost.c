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
**    formulas divide by n (and n x p for compute).
**
** Fit (section 10.3): t_i ~ C_i . w, w = argmin |C w - t|^2.  The thesis
** writes the normal equations, w = (C^T C)^-1 C^T t; here the same
** least-squares solution comes from a Householder QR of C with its columns
** scaled to unit length, which squares no condition number and shows a
** degenerate probe set as a vanishing diagonal of R instead of as a
** wildly wrong w.
*/
#include "config.h"
#include "layout/layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Columns whose scaled R diagonal falls below this are taken as dependent
** on the ones before them. */
#define S_RANK_TOL 1e-8

static const char *const s_names[TL_NCOST] = {"gemm", "contract", "elemwise",
                                              "net",  "tasks",    "write"};

const char *tl_cost_name(int k) { return k >= 0 && k < TL_NCOST ? s_names[k] : "?"; }

/*
** Defaults for an uncalibrated cluster, per unit on the busiest site:
**  gemm      2e-11 s/flop: OpenBLAS f32 on one AVX2 core, about 50 Gflop/s;
**  contract  5e-10 s/flop: the general contraction loops, about 2 Gflop/s;
**  elemwise  1e-9  s/flop: maps and combines stream memory, ~1 G elements/s;
**  net       4e-9  s/float: ~1 GB/s through ZeroMQ over TCP (10 GbE or
**            loopback with copies);
**  tasks     5e-5  s/task: a task message, queueing and a kernel call;
**  write     1e-9  s/byte: chunks written to a worker's store, ~1 GB/s.
** They only need to order plans sensibly until tl_weights_fit replaces them.
*/
void tl_weights_default(tl_weights *w) {
  static const double d[TL_NCOST] = {2e-11, 5e-10, 1e-9, 4e-9, 5e-5, 1e-9};
  memcpy(w->w, d, sizeof d);
}

double tl_seconds(const tl_weights *w, const tl_cost *c) {
  double s = 0;
  for (int k = 0; k < TL_NCOST; k++) s += w->w[k] * c->c[k];
  return s;
}

int tl_weights_fit(int n, const tl_cost *c, const double *seconds, tl_weights *w, tr_err *err) {
  enum { K = TL_NCOST };
  int rc = TR_OK;
  if (n < K)
    return tr_seterr(err, TR_EINVAL, "%d runs cannot determine %d weights: need at least %d", n,
                     K, K);
  double *a = malloc(sizeof *a * (size_t)n * K), *b = malloc(sizeof *b * (size_t)n);
  double scale[K], x[K];
  if (!a || !b) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory fitting %d runs", n);
    goto done;
  }
  /* a is column major: a[k * n + i] = component k of run i, scaled */
  for (int k = 0; k < K; k++) {
    double s = 0;
    for (int i = 0; i < n; i++) s += c[i].c[k] * c[i].c[k];
    scale[k] = sqrt(s);
    if (!(scale[k] > 0)) {
      rc = tr_seterr(err, TR_EINVAL, "no run exercises '%s': its weight is undetermined",
                     s_names[k]);
      goto done;
    }
    for (int i = 0; i < n; i++) a[k * n + i] = c[i].c[k] / scale[k];
  }
  for (int i = 0; i < n; i++) b[i] = seconds[i];
  /* Householder QR, applying each reflection to b as well */
  for (int k = 0; k < K; k++) {
    double *col = &a[k * n], norm = 0;
    for (int i = k; i < n; i++) norm += col[i] * col[i];
    norm = sqrt(norm);
    if (norm < S_RANK_TOL) {
      rc = tr_seterr(err, TR_EINVAL,
                     "the runs do not separate '%s' from the components before it: it moves in "
                     "step with them",
                     s_names[k]);
      goto done;
    }
    double alpha = col[k] > 0 ? -norm : norm; /* v = col - alpha e_k, no cancellation */
    col[k] -= alpha;
    double vv = 0;
    for (int i = k; i < n; i++) vv += col[i] * col[i];
    for (int j = k + 1; j <= K; j++) { /* j == K: b */
      double *y = j < K ? &a[j * n] : b, dot = 0;
      for (int i = k; i < n; i++) dot += col[i] * y[i];
      double f = 2 * dot / vv;
      for (int i = k; i < n; i++) y[i] -= f * col[i];
    }
    col[k] = alpha; /* R's diagonal; the rest of the column is v, no longer needed */
  }
  for (int k = K - 1; k >= 0; k--) {
    double s = b[k];
    for (int j = k + 1; j < K; j++) s -= a[j * n + k] * x[j];
    x[k] = s / a[k * n + k];
  }
  for (int k = 0; k < K; k++) {
    double wk = x[k] / scale[k];
    if (!(wk >= 0)) {
      rc = tr_seterr(err, TR_EINVAL,
                     "the fitted weight of '%s' is %g: the runs do not determine it (measure "
                     "shapes that vary it more)",
                     s_names[k], wk);
      goto done;
    }
    w->w[k] = wk;
  }
done:
  free(a);
  free(b);
  return rc;
}

/*
** The probe runs.  Each varies one component much more than the others
** and the set spans all six, at two sizes each, so the least-squares
** system is well determined: gemm products at 1024 and 2048; max-plus
** products (a contraction without BLAS); sums of four tensors (maps);
** transposed joins, whose operands are chunked across each other and
** shuffle; a small product cut into 16 x 16 chunks (thousands of tasks
** doing little); outer products (large outputs from small inputs, mostly
** bytes written).
*/
static const tl_probe s_probes[] = {
    {"gemm-1024",
     "CREATE TENSOR pa[1024,1024] CHUNK [512,512]; CREATE TENSOR pb[1024,1024] CHUNK [512,512];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = pa[i,k] * pb[k,j];", TL_C_GEMM},
    {"gemm-2048",
     "CREATE TENSOR pa[2048,2048] CHUNK [1024,1024]; CREATE TENSOR pb[2048,2048] CHUNK [1024,1024];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = pa[i,k] * pb[k,j];", TL_C_GEMM},
    {"maxplus-256",
     "CREATE TENSOR pa[256,256] CHUNK [128,128]; CREATE TENSOR pb[256,256] CHUNK [128,128];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = MAX(pa[i,k] + pb[k,j]);", TL_C_CONTRACT},
    {"maxplus-512",
     "CREATE TENSOR pa[512,512] CHUNK [256,256]; CREATE TENSOR pb[512,512] CHUNK [256,256];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = MAX(pa[i,k] + pb[k,j]);", TL_C_CONTRACT},
    {"sum4-2048",
     "CREATE TENSOR pa[2048,2048] CHUNK [1024,1024]; CREATE TENSOR pb[2048,2048] CHUNK [1024,1024];"
     " CREATE TENSOR pd[2048,2048] CHUNK [1024,1024]; CREATE TENSOR pe[2048,2048] CHUNK [1024,1024];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;"
     " FILL pd UNIFORM(-1,1) SEED 3; FILL pe UNIFORM(-1,1) SEED 4;",
     "pc[i,j] = exp(pa[i,j]) * pb[i,j] + tanh(pd[i,j]) - pe[i,j];", TL_C_ELEMWISE},
    {"sum4-4096",
     "CREATE TENSOR pa[4096,4096] CHUNK [1024,1024]; CREATE TENSOR pb[4096,4096] CHUNK [1024,1024];"
     " CREATE TENSOR pd[4096,4096] CHUNK [1024,1024]; CREATE TENSOR pe[4096,4096] CHUNK [1024,1024];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;"
     " FILL pd UNIFORM(-1,1) SEED 3; FILL pe UNIFORM(-1,1) SEED 4;",
     "pc[i,j] = exp(pa[i,j]) * pb[i,j] + tanh(pd[i,j]) - pe[i,j];", TL_C_ELEMWISE},
    {"transpose-join-2048",
     "CREATE TENSOR pa[2048,2048] CHUNK [2048,128]; CREATE TENSOR pb[2048,2048] CHUNK [128,2048];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = pa[i,j] + pb[j,i];", TL_C_NET},
    {"transpose-join-4096",
     "CREATE TENSOR pa[4096,4096] CHUNK [4096,128]; CREATE TENSOR pb[4096,4096] CHUNK [128,4096];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = pa[i,j] + pb[j,i];", TL_C_NET},
    {"tiny-chunks-128",
     "CREATE TENSOR pa[128,128] CHUNK [16,16]; CREATE TENSOR pb[128,128] CHUNK [16,16];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = pa[i,k] * pb[k,j];", TL_C_TASKS},
    {"tiny-chunks-256",
     "CREATE TENSOR pa[256,256] CHUNK [16,16]; CREATE TENSOR pb[256,256] CHUNK [16,16];"
     " FILL pa UNIFORM(-1,1) SEED 1; FILL pb UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = pa[i,k] * pb[k,j];", TL_C_TASKS},
    {"outer-4096",
     "CREATE TENSOR pu[4096] CHUNK [1024]; CREATE TENSOR pv[4096] CHUNK [1024];"
     " FILL pu UNIFORM(-1,1) SEED 1; FILL pv UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = pu[i] * pv[j];", TL_C_WRITE},
    {"outer-8192",
     "CREATE TENSOR pu[8192] CHUNK [2048]; CREATE TENSOR pv[8192] CHUNK [2048];"
     " FILL pu UNIFORM(-1,1) SEED 1; FILL pv UNIFORM(-1,1) SEED 2;",
     "pc[i,j] = pu[i] * pv[j];", TL_C_WRITE},
};

const tl_probe *tl_probes(int *n) {
  *n = (int)(sizeof s_probes / sizeof s_probes[0]);
  return s_probes;
}
