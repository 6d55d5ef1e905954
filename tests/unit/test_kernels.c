/*
** tests/unit/test_kernels.c - the chunk kernels.  The openblas backend
** (cblas gemm, the fast kernels of kernels/fast.c) is compared with the
** reference on random chunks of ragged sizes, both dtypes; the reference is
** checked against hand-computed values; fill_random against its contract
** (determinism, independence from chunking, distribution).
**
** tests/unit/test_cuda.c includes this file with S_UNDER_TEST defined and
** its own s_blas(), the cuda backend: every comparison with the reference
** then runs on the GPU.  The tests of this file that do not depend on the
** backend under test run here only.
*/
#include "config.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/kernels_int.h"

/* ---- helpers -------------------------------------------------------------- */

static uint64_t s_state;

static void s_seed(uint64_t seed) { s_state = seed * 2654435761u + 1; }

/* xorshift64*: test data, independent of the generator under test. */
static double s_rand(void) {
  s_state ^= s_state >> 12;
  s_state ^= s_state << 25;
  s_state ^= s_state >> 27;
  return (double)((s_state * 2685821657736338717u) >> 11) * 0x1p-53;
}

static int s_irand(int n) { return (int)(s_rand() * n); }

static double s_get(tr_dtype dt, const void *p, int64_t i) {
  return dt == TR_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}

static void s_put(tr_dtype dt, void *p, int64_t i, double v) {
  if (dt == TR_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}

/* n elements (at least one) uniform in [lo, hi). */
static void *s_buf(tr_dtype dt, int64_t n, double lo, double hi) {
  void *p = tr_alloc_aligned((size_t)(n > 0 ? n : 1) * tr_dtype_size(dt));
  cr_assert_not_null(p);
  for (int64_t i = 0; i < (n > 0 ? n : 1); i++)
    s_put(dt, p, i, lo + (hi - lo) * s_rand());
  return p;
}

static void *s_dup(tr_dtype dt, const void *p, int64_t n) {
  void *q = tr_alloc_aligned((size_t)(n > 0 ? n : 1) * tr_dtype_size(dt));
  cr_assert_not_null(q);
  memcpy(q, p, (size_t)(n > 0 ? n : 1) * tr_dtype_size(dt));
  return q;
}

static double s_tol(tr_dtype dt) { return dt == TR_F32 ? 1e-4 : 1e-10; }

/* Equal within the dtype's tolerance relative to mag, the magnitude of
** the terms that made want; NaN equals NaN, infinities match exactly. */
static int s_near(tr_dtype dt, double got, double want, double mag) {
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want);
  if (isinf(got) || isinf(want)) return got == want;
  return fabs(got - want) <= s_tol(dt) * (1 + mag);
}

static int s_same(tr_dtype dt, double got, double want) {
  return s_near(dt, got, want, fabs(want));
}

/* got[i] close to want[i] for i < n; mag (or NULL: |want|) as in s_near. */
static void s_expect_near(tr_dtype dt, const void *got, const void *want,
                          const void *mag, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double g = s_get(dt, got, i), w = s_get(dt, want, i);
    double m = mag ? s_get(dt, mag, i) : fabs(w);
    cr_assert(s_near(dt, g, w, m), "%s (%s): element %lld: got %.9g, want %.9g",
              what, tr_dtype_name(dt), (long long)i, g, w);
  }
}

static void s_expect_close(tr_dtype dt, const void *got, const void *want,
                           int64_t n, const char *what) {
  s_expect_near(dt, got, want, NULL, n, what);
}

static const tk_backend *s_ref(void) { return tk_backend_get("reference"); }
#ifndef S_UNDER_TEST
/* The backend compared with the reference. */
static const tk_backend *s_blas(void) { return tk_backend_get("openblas"); }
#endif

/* A program from postfix text: digits are inputs, #c a constant, and the
** operators by their names (+ - * / ^ neg relu exp ... sigmoid: those of
** kernels/opcodes.h). */
static tk_prog s_prog(const char *src) {
  tk_prog p = {0};
  char buf[512], *save = NULL;
  cr_assert_lt(strlen(src), sizeof buf);
  strcpy(buf, src);
  for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
    tk_insn *in = &p.code[p.n++];
    if (isdigit((unsigned char)t[0])) {
      in->op = TK_OP_INPUT;
      in->arg = atoi(t);
    } else if (t[0] == '#') {
      in->op = TK_OP_CONST;
      in->c = atof(t + 1);
    } else {
      in->op = -1;
      for (int op = 0; op < TK_NOPCODES; op++)
        if (tk_opcode_pops(op) > 0 && !strcmp(t, tk_opcode_name(op))) in->op = op;
      cr_assert_geq(in->op, 0, "bad token %s", t);
    }
  }
  return p;
}

/*
** One contraction to test, in einsum terms: input k has axes lab[k][0..
** rank[k]) (a label twice is a diagonal), out has axes olab[0..orank).
** Labels 0..no-1 are the output labels.  Tensors are dense row-major,
** except that an input axis may run backwards (flip) and out may leave a
** gap after each element of its last axis (ogap), which must stay intact.
*/
typedef struct s_case {
  tr_dtype dt;
  int nl, no, nin;
  int64_t ext[TK_MAX_LABELS];
  int rank[TK_MAX_INPUTS], lab[TK_MAX_INPUTS][TK_MAX_LABELS];
  int flip[TK_MAX_INPUTS][TK_MAX_LABELS];
  int orank, olab[TK_MAX_LABELS], ogap;
  tk_prog prog;
  tk_agg agg;
  int acc;
  double lo, hi; /* range of input values */
} s_case;

/* Lay out a tensor with axes lab[0..rank): strides per label into st,
** returns its element count and the offset of its first element. */
static int64_t s_layout(const s_case *c, int rank, const int *lab,
                        const int *flip, int gap, int64_t *st,
                        int64_t *base) {
  int64_t size = 1;
  *base = 0;
  for (int a = rank - 1; a >= 0; a--) {
    int64_t as = size * (a == rank - 1 ? 1 + gap : 1);
    int64_t e = c->ext[lab[a]];
    if (flip && flip[a]) {
      st[lab[a]] -= as;
      *base += (e > 0 ? e - 1 : 0) * as;
    } else {
      st[lab[a]] += as;
    }
    size = as * e;
  }
  return size;
}

static void s_run_case(const s_case *c, const char *what) {
  tk_contract op = {.dtype = c->dt, .nlabels = c->nl, .nout = c->no,
                    .ninputs = c->nin, .prog = c->prog, .agg = c->agg,
                    .accumulate = c->acc};
  void *in[TK_MAX_INPUTS], *o1, *o2, *mag = NULL;
  int64_t base, nout;
  memcpy(op.extent, c->ext, sizeof op.extent);
  for (int k = 0; k < c->nin; k++) {
    int64_t n = s_layout(c, c->rank[k], c->lab[k], c->flip[k], 0,
                         op.in_stride[k], &base);
    in[k] = s_buf(c->dt, n, c->lo, c->hi);
    op.in[k] = (char *)in[k] + base * (int64_t)tr_dtype_size(c->dt);
  }
  nout = s_layout(c, c->orank, c->olab, NULL, c->ogap, op.out_stride, &base);
  o1 = s_buf(c->dt, nout, -1, 1);
  o2 = s_dup(c->dt, o1, nout);
  op.out = o1;
  cr_assert_eq(s_ref()->contract(&op), TR_OK, "%s: reference", what);
  op.out = o2;
  cr_assert_eq(s_blas()->contract(&op), TR_OK, "%s: openblas", what);
  if (c->agg == TK_AGG_SUM && c->prog.n < TK_MAX_PROG) {
    /* Sums may cancel: measure error against the sum of |terms|. */
    mag = s_buf(c->dt, nout, 0, 0);
    for (int64_t i = 0; i < nout; i++)
      s_put(c->dt, mag, i, fabs(s_get(c->dt, o1, i)) + 1);
    op.prog.code[op.prog.n++] = (tk_insn){.op = TK_OP_ABS};
    op.out = mag;
    cr_assert_eq(s_ref()->contract(&op), TR_OK, "%s: magnitude", what);
  }
  s_expect_near(c->dt, o2, o1, mag, nout, what);
  tr_free_aligned(mag);
  for (int k = 0; k < c->nin; k++) tr_free_aligned(in[k]);
  tr_free_aligned(o1);
  tr_free_aligned(o2);
}

/* A case from einsum text ("ik,kj->ij"); sizes gives the extent of each
** letter of `letters`.  Output letters become labels 0..no-1, the others
** follow in order of appearance. */
static s_case s_einsum(tr_dtype dt, const char *spec, const char *letters,
                       const int64_t *sizes, const char *prog, tk_agg agg,
                       int acc) {
  s_case c = {.dt = dt, .prog = s_prog(prog), .agg = agg, .acc = acc,
              .lo = -1, .hi = 1};
  char order[TK_MAX_LABELS + 1] = "";
  const char *arrow = strstr(spec, "->");
  cr_assert_not_null(arrow);
  for (const char *s = arrow + 2; *s; s++) order[c.no++] = *s;
  c.nl = c.no;
  for (const char *s = spec; s < arrow; s++)
    if (*s != ',' && !strchr(order, *s)) order[c.nl++] = *s;
  for (int l = 0; l < c.nl; l++)
    c.ext[l] = sizes[strchr(letters, order[l]) - letters];
  for (const char *s = spec; s < arrow; s++) {
    if (*s == ',') {
      c.nin++;
      continue;
    }
    c.lab[c.nin][c.rank[c.nin]++] = (int)(strchr(order, *s) - order);
  }
  c.nin++;
  for (int l = 0; l < c.no; l++) c.olab[c.orank++] = l;
  return c;
}

static const int64_t s_sizes[] = {1, 7, 33, 129};
#define S_NSIZES 4
static const tr_dtype s_dtypes[] = {TR_F32, TR_F64};

/* ---- programs --------------------------------------------------------------- */

#ifndef S_UNDER_TEST
Test(prog, depth_of_valid_programs) {
  tk_prog p = s_prog("0 1 + 2 * #3 ^");
  cr_expect_eq(tk_prog_depth(&p), 2);
  p = s_prog("0 1 2 3 + + +");
  cr_expect_eq(tk_prog_depth(&p), 4);
  p = s_prog("#1");
  cr_expect_eq(tk_prog_depth(&p), 1);
  p = s_prog("15 neg");
  cr_expect_eq(tk_prog_depth(&p), 1);
}

Test(prog, depth_rejects_invalid_programs) {
  tk_prog p = {0};
  cr_expect_eq(tk_prog_depth(&p), -1, "empty");
  p = s_prog("0 +");
  cr_expect_eq(tk_prog_depth(&p), -1, "underflow");
  p = s_prog("neg");
  cr_expect_eq(tk_prog_depth(&p), -1, "unary underflow");
  p = s_prog("0 1");
  cr_expect_eq(tk_prog_depth(&p), -1, "two values left");
  p = s_prog("0 1 + +");
  cr_expect_eq(tk_prog_depth(&p), -1, "underflow at the end");
  p = s_prog("16");
  cr_expect_eq(tk_prog_depth(&p), -1, "input index too large");
  p = s_prog("0");
  p.code[0].arg = -1;
  cr_expect_eq(tk_prog_depth(&p), -1, "negative input index");
  p = s_prog("0");
  p.code[0].op = TK_NOPCODES;
  cr_expect_eq(tk_prog_depth(&p), -1, "unknown opcode");
  p.code[0].op = -1;
  cr_expect_eq(tk_prog_depth(&p), -1, "negative opcode");
  p = s_prog("0");
  p.n = TK_MAX_PROG + 1;
  cr_expect_eq(tk_prog_depth(&p), -1, "too long");
  p.n = -1;
  cr_expect_eq(tk_prog_depth(&p), -1, "negative length");
}

/* The one list of kernels/opcodes.h: every opcode has a name and a stack
** effect, the unary ones are found by name, nothing else is an opcode. */
Test(prog, opcode_list) {
  for (int op = 0; op < TK_NOPCODES; op++) {
    const char *name = tk_opcode_name(op);
    int pops = tk_opcode_pops(op);
    char upper[32];
    cr_assert_not_null(name, "opcode %d", op);
    cr_assert(pops >= 0 && pops <= 3, "%s pops %d", name, pops);
    cr_assert_eq(pops == 2, op >= TK_OP_ADD && op <= TK_OP_NE, "%s", name);
    cr_assert_eq(pops == 3, op == TK_OP_WHERE, "%s", name);
    cr_assert_eq(pops == 1, op >= TK_OP_NEG, "%s", name);
    for (size_t i = 0; i <= strlen(name) && i < sizeof upper; i++)
      upper[i] = (char)toupper((unsigned char)name[i]);
    cr_assert_eq(tk_opcode_function(upper), pops == 1 || pops == 3 ? op : -1, "%s", upper);
  }
  cr_assert_str_eq(tk_opcode_name(TK_OP_SIGMOID), "sigmoid");
  cr_assert_str_eq(tk_opcode_name(TK_OP_STEP), "step");
  cr_assert_str_eq(tk_opcode_name(TK_OP_WHERE), "where");
  cr_assert_str_eq(tk_opcode_name(TK_OP_NE), "!=");
  cr_assert_str_eq(tk_opcode_name(TK_OP_POW), "^");
  cr_assert_null(tk_opcode_name(TK_NOPCODES));
  cr_assert_null(tk_opcode_name(-1));
  cr_assert_eq(tk_opcode_pops(TK_NOPCODES), -1);
  cr_assert_eq(tk_opcode_function("sig"), -1);
  cr_assert_eq(tk_opcode_function(""), -1);
}

/* An opcode outside the list never evaluates to a value. */
Test(prog, eval_of_an_unknown_opcode_is_nan) {
  tk_prog p = s_prog("0 neg");
  double in = 2;
  p.code[1].op = TK_NOPCODES;
  cr_assert(isnan(tk_prog_eval(&p, &in)));
}

Test(prog, eval_every_operator) {
  double in[2] = {0.7, -1.3};
  struct {
    const char *src;
    double want;
  } t[] = {
      {"0 1 +", 0.7 - 1.3},       {"0 1 -", 0.7 + 1.3},
      {"0 1 *", 0.7 * -1.3},      {"0 1 /", 0.7 / -1.3},
      {"0 #2.5 ^", pow(0.7, 2.5)}, {"1 neg", 1.3},
      {"1 relu", 0},              {"0 relu", 0.7},
      {"1 exp", exp(-1.3)},       {"0 log", log(0.7)},
      {"0 sqrt", sqrt(0.7)},      {"1 abs", 1.3},
      {"1 tanh", tanh(-1.3)},     {"1 sigmoid", 1 / (1 + exp(1.3))},
      {"#2 #3 #4 * -", -10},
      {"0 1 <", 0},               {"1 0 <", 1},
      {"0 0 <=", 1},              {"0 1 <=", 0},
      {"0 1 >", 1},               {"1 1 >", 0},
      {"1 1 >=", 1},              {"1 0 >=", 0},
      {"0 0 ==", 1},              {"0 1 ==", 0},
      {"0 1 !=", 1},              {"1 1 !=", 0},
      {"#0 0 1 where", -1.3},     {"#2 0 1 where", 0.7},
      {"1 #0 < 0 1 where", 0.7},  {"0 step", 1},
      {"1 step", 0},              {"#0 step", 0},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    tk_prog p = s_prog(t[i].src);
    cr_expect_float_eq(tk_prog_eval(&p, in), t[i].want, 1e-15, "%s",
                       t[i].src);
  }
}

/* ---- backends --------------------------------------------------------------- */

Test(backend, lookup_and_completion) {
  const tk_backend *names[] = {s_ref(), s_blas(), tk_backend_get("auto")};
  cr_assert_null(tk_backend_get("nope"));
  cr_assert_str_eq(s_ref()->name, "reference");
  cr_assert_str_eq(s_blas()->name, "openblas");
  /* auto is cuda where a GPU can be used, else openblas. */
  cr_assert_eq(tk_backend_get("auto"),
               tk_device_info(NULL, 0) ? tk_backend_get("cuda") : s_blas());
  cr_assert_eq(s_ref(), tk_reference());
#ifdef HAVE_CUDA
  cr_assert_str_eq(tk_backends_compiled(), "reference openblas cuda");
  cr_assert_str_eq(tk_backend_get("cuda")->name, "cuda");
#else
  cr_assert_str_eq(tk_backends_compiled(), "reference openblas");
  cr_assert_null(tk_backend_get("cuda"));
#endif
  for (int i = 0; i < 3; i++) {
    const tk_backend *b = names[i];
    cr_assert(b->gemm && b->contract && b->combine && b->map && b->copy &&
              b->fill_random && b->keep && b->release);
  }
  /* openblas serves gemm itself and the rest from fast.c. */
  cr_assert_neq(s_blas()->gemm, s_ref()->gemm);
  cr_assert_neq(s_blas()->contract, s_ref()->contract);
  cr_assert_eq(s_blas()->fill_random, s_ref()->fill_random);
}
#endif /* S_UNDER_TEST */

/* ---- contract: hand-computed values ----------------------------------------- */

Test(contract, reference_known_values) {
  const tk_backend *bs[] = {s_ref(), s_blas()};
  for (int b = 0; b < 2; b++) {
    double A[6] = {1, 5, 2, 4, 3, 6}, B[3] = {10, 20, 30}, o[6] = {0};
    /* A is 2x3; row maxima of A+B[j], then accumulated with MIN. */
    tk_contract op = {.dtype = TR_F64, .nlabels = 2, .nout = 1, .ninputs = 2,
                      .extent = {2, 3}, .in = {A, B}, .out = o,
                      .in_stride = {{3, 1}, {0, 1}}, .out_stride = {1},
                      .prog = s_prog("0 1 +"), .agg = TK_AGG_MAX};
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(o[0] == 32 && o[1] == 36, "%s max: %g %g", bs[b]->name, o[0],
              o[1]);
    op.agg = TK_AGG_MIN;
    op.accumulate = 1;
    o[0] = 5;
    o[1] = 100;
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(o[0] == 5 && o[1] == 14, "%s min acc: %g %g", bs[b]->name, o[0],
              o[1]);
    op.agg = TK_AGG_SUM;
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(o[0] == 5 + 68 && o[1] == 14 + 73, "%s sum acc", bs[b]->name);
    /* Transpose: T[j,i] = 2*A[i,j]. */
    op.nout = 2;
    op.agg = TK_AGG_NONE;
    op.accumulate = 0;
    op.extent[0] = 3; /* labels j, i */
    op.extent[1] = 2;
    op.ninputs = 1;
    op.in_stride[0][0] = 1;
    op.in_stride[0][1] = 3;
    op.out_stride[0] = 2;
    op.out_stride[1] = 1;
    op.prog = s_prog("0 #2 *");
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    double t[6] = {2, 8, 10, 6, 4, 12};
    cr_expect_arr_eq(o, t, sizeof t, "%s transpose", bs[b]->name);
  }
}

Test(contract, empty_ranges_and_rank0) {
  const tk_backend *bs[] = {s_ref(), s_blas()};
  for (int b = 0; b < 2; b++) {
    float A[4] = {1, 2, 3, 4}, B[1] = {0.5f}, o[2] = {7, 7};
    /* An empty aggregation gives the identity of agg... */
    tk_contract op = {.dtype = TR_F32, .nlabels = 2, .nout = 1, .ninputs = 1,
                      .extent = {2, 0}, .in = {A}, .out = o,
                      .in_stride = {{2, 1}}, .out_stride = {1},
                      .prog = s_prog("0"), .agg = TK_AGG_SUM};
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(o[0] == 0 && o[1] == 0, "%s sum", bs[b]->name);
    op.agg = TK_AGG_MAX;
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(isinf(o[0]) && o[0] < 0 && isinf(o[1]), "%s max", bs[b]->name);
    op.agg = TK_AGG_MIN;
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(isinf(o[0]) && o[0] > 0, "%s min", bs[b]->name);
    /* ...and leaves out alone when accumulating. */
    o[0] = o[1] = 7;
    op.accumulate = 1;
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(o[0] == 7 && o[1] == 7, "%s acc", bs[b]->name);
    /* No output element: nothing is written. */
    op.accumulate = 0;
    op.extent[0] = 0;
    op.extent[1] = 2;
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(o[0] == 7 && o[1] == 7, "%s empty out", bs[b]->name);
    /* Rank 0: o = A * B. */
    op.nlabels = op.nout = 0;
    op.agg = TK_AGG_NONE;
    op.ninputs = 2;
    op.in[1] = B;
    op.prog = s_prog("0 1 * #1 +");
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(o[0] == 1.5f && o[1] == 7, "%s rank 0: %g", bs[b]->name, o[0]);
    /* Rank 0 accumulated with SUM: o += A * B + 1. */
    op.agg = TK_AGG_SUM;
    op.accumulate = 1;
    cr_assert_eq(bs[b]->contract(&op), TR_OK);
    cr_expect(o[0] == 3.0f, "%s rank 0 acc: %g", bs[b]->name, o[0]);
  }
}

Test(contract, rejects_malformed_tasks) {
  const tk_backend *bs[] = {s_ref(), s_blas()};
  float A[4] = {0}, o[4] = {0};
  tk_contract good = {.dtype = TR_F32, .nlabels = 2, .nout = 1, .ninputs = 1,
                      .extent = {2, 2}, .in = {A}, .out = o,
                      .in_stride = {{2, 1}}, .out_stride = {1},
                      .prog = s_prog("0"), .agg = TK_AGG_SUM};
  for (int b = 0; b < 2; b++) {
    tk_contract op = good;
    cr_expect_eq(bs[b]->contract(&op), TR_OK);
    op.agg = TK_AGG_NONE; /* aggregated label without agg */
    cr_expect_eq(bs[b]->contract(&op), TR_EINVAL, "%s none", bs[b]->name);
    op = good;
    op.prog = s_prog("1"); /* input 1 of 1 */
    cr_expect_eq(bs[b]->contract(&op), TR_EINVAL, "%s input", bs[b]->name);
    op = good;
    op.prog = s_prog("0 +");
    cr_expect_eq(bs[b]->contract(&op), TR_EINVAL, "%s prog", bs[b]->name);
    op = good;
    op.extent[1] = -1;
    cr_expect_eq(bs[b]->contract(&op), TR_EINVAL, "%s extent", bs[b]->name);
    op = good;
    op.nlabels = TK_MAX_LABELS + 1;
    cr_expect_eq(bs[b]->contract(&op), TR_EINVAL, "%s labels", bs[b]->name);
    op = good;
    op.nout = 3;
    cr_expect_eq(bs[b]->contract(&op), TR_EINVAL, "%s nout", bs[b]->name);
    op = good;
    op.in[0] = NULL;
    cr_expect_eq(bs[b]->contract(&op), TR_EINVAL, "%s null", bs[b]->name);
    op = good;
    op.agg = (tk_agg)7;
    cr_expect_eq(bs[b]->contract(&op), TR_EINVAL, "%s agg", bs[b]->name);
    op = good;
    op.dtype = (tr_dtype)5;
    cr_expect_eq(bs[b]->contract(&op), TR_ETYPE, "%s dtype", bs[b]->name);
  }
}

/* ---- contract: openblas against the reference ------------------------------- */

Test(contract, elementwise_and_broadcast) {
  s_seed(1);
  for (int d = 0; d < 2; d++)
    for (int a = 0; a < S_NSIZES; a++)
      for (int b = 0; b < S_NSIZES; b++)
        for (int acc = 0; acc < 2; acc++) {
          int64_t sz[] = {s_sizes[a], s_sizes[b]};
          s_case c = s_einsum(s_dtypes[d], "ij,j->ij", "ij", sz, "0 1 +",
                              TK_AGG_NONE, acc);
          s_run_case(&c, "C[i,j] = A[i,j] + B[j]");
          c = s_einsum(s_dtypes[d], "j,i->ij", "ij", sz, "0 1 * #0.5 -",
                       TK_AGG_NONE, acc);
          s_run_case(&c, "C[i,j] = A[j] * B[i] - 0.5");
          c = s_einsum(s_dtypes[d], "ij,ij->ij", "ij", sz, "0 1 - 0 *",
                       acc ? TK_AGG_MAX : TK_AGG_SUM, acc);
          s_run_case(&c, "C[i,j] (agg)= (A-B)*A");
        }
}

/* Matrix-product shapes with every agg, accumulate 0 and 1. */
Test(contract, maxplus_and_friends) {
  static const char *const progs[] = {"0 1 +", "0 1 *", "0 1 - abs"};
  s_seed(2);
  for (int d = 0; d < 2; d++)
    for (int agg = TK_AGG_SUM; agg <= TK_AGG_MIN; agg++)
      for (int acc = 0; acc < 2; acc++)
        for (int t = 0; t < 6; t++) {
          int64_t sz[] = {s_sizes[t % 4], s_sizes[(t + 1) % 4],
                          s_sizes[(t + 2) % 4]};
          s_case c = s_einsum(s_dtypes[d], "ik,kj->ij", "ijk", sz,
                              progs[t % 3], (tk_agg)agg, acc);
          s_run_case(&c, "D[i,j] = AGG_k f(A[i,k], B[k,j])");
        }
}

Test(contract, squared_distances_and_pow) {
  s_seed(3);
  for (int d = 0; d < 2; d++)
    for (int t = 0; t < 8; t++) {
      int64_t sz[] = {s_sizes[t % 4], s_sizes[(t / 2) % 4],
                      t < 4 ? 300 : s_sizes[(t + 1) % 4]};
      s_case c = s_einsum(s_dtypes[d], "ik,jk->ij", "ijk", sz, "0 1 - #2 ^",
                          TK_AGG_SUM, t & 1);
      s_run_case(&c, "E[i,j] = SUM_k (X[i,k]-Y[j,k])^2");
      c = s_einsum(s_dtypes[d], "ik,jk->ij", "ijk", sz, "0 1 - abs #3 ^",
                   TK_AGG_SUM, t & 1);
      s_run_case(&c, "SUM |X-Y|^3");
      c = s_einsum(s_dtypes[d], "ik,jk->ij", "ijk", sz, "0 1 ^", TK_AGG_MAX,
                   t & 1);
      c.lo = 0.1;
      s_run_case(&c, "MAX X^Y");
      c = s_einsum(s_dtypes[d], "ik,jk->ij", "ijk", sz, "#2 #3 ^ 0 1 ^ *",
                   TK_AGG_MIN, t & 1);
      c.lo = 0.1;
      s_run_case(&c, "MIN 8 * X^Y");
    }
}

Test(contract, transposes_and_permutations) {
  s_seed(4);
  for (int d = 0; d < 2; d++)
    for (int a = 0; a < S_NSIZES; a++)
      for (int b = 0; b < S_NSIZES; b++) {
        int64_t sz[] = {s_sizes[a], s_sizes[b], 3};
        s_case c = s_einsum(s_dtypes[d], "ij->ji", "ij", sz, "0", TK_AGG_NONE,
                            0);
        s_run_case(&c, "T[j,i] = A[i,j]");
        c = s_einsum(s_dtypes[d], "ijk->kij", "ijk", sz, "0 neg", TK_AGG_NONE,
                     0);
        s_run_case(&c, "T[k,i,j] = -A[i,j,k]");
        c = s_einsum(s_dtypes[d], "ij,ji->ij", "ij", sz, "0 1 +", TK_AGG_NONE,
                     1);
        s_run_case(&c, "A + B^T");
      }
}

Test(contract, diagonals) {
  s_seed(5);
  for (int d = 0; d < 2; d++)
    for (int a = 0; a < S_NSIZES; a++) {
      int64_t sz[] = {s_sizes[a], 5};
      s_case c = s_einsum(s_dtypes[d], "ii->i", "ij", sz, "0", TK_AGG_NONE, 0);
      s_run_case(&c, "d[i] = A[i,i]");
      for (int agg = TK_AGG_SUM; agg <= TK_AGG_MIN; agg++) {
        c = s_einsum(s_dtypes[d], "ii->", "ij", sz, "0", (tk_agg)agg, 0);
        s_run_case(&c, "trace");
        c = s_einsum(s_dtypes[d], "iji->j", "ij", sz, "0 #2 *", (tk_agg)agg,
                     1);
        s_run_case(&c, "batched trace");
      }
    }
}

Test(contract, reductions) {
  s_seed(6);
  static const int64_t big[] = {1, 7, 33, 129, 256, 257, 1000};
  for (int d = 0; d < 2; d++)
    for (int agg = TK_AGG_SUM; agg <= TK_AGG_MIN; agg++)
      for (int acc = 0; acc < 2; acc++)
        for (int a = 0; a < 7; a++) {
          int64_t sz[] = {big[a], big[(a + 3) % 7]};
          s_case c = s_einsum(s_dtypes[d], "ij->", "ij", sz, "0", (tk_agg)agg,
                              acc);
          s_run_case(&c, "s = AGG A[i,j]");
          c = s_einsum(s_dtypes[d], "ij->i", "ij", sz, "0", (tk_agg)agg, acc);
          s_run_case(&c, "row AGG");
          c = s_einsum(s_dtypes[d], "ij->j", "ij", sz, "0 #2 ^", (tk_agg)agg,
                       acc);
          s_run_case(&c, "column AGG of squares");
          c = s_einsum(s_dtypes[d], "i->i", "ij", sz, "0", (tk_agg)agg, acc);
          c.nl = 2; /* j is aggregated but no operand uses it */
          c.ext[1] = sz[1];
          s_run_case(&c, "AGG over an unused label");
          c = s_einsum(s_dtypes[d], "j->", "ij", sz, "#0.25", (tk_agg)agg, acc);
          s_run_case(&c, "AGG of a constant");
        }
}

/* Every unary opcode of kernels/opcodes.h, new ones included. */
Test(contract, unary_operators) {
  char prog[64];
  s_seed(7);
  for (int d = 0; d < 2; d++)
    for (int u = 0; u < TK_NOPCODES; u++)
      for (int a = 0; a < S_NSIZES && tk_opcode_pops(u) == 1; a++) {
        int64_t sz[] = {s_sizes[a], s_sizes[(a + 2) % 4]};
        const char *name = tk_opcode_name(u);
        /* log and sqrt want positive operands; the others get both signs. */
        double lo = u == TK_OP_LOG || u == TK_OP_SQRT ? 0.01 : -2;
        s_case c;
        snprintf(prog, sizeof prog, "0 %s", name);
        c = s_einsum(s_dtypes[d], "ij->ij", "ij", sz, prog, TK_AGG_NONE, 0);
        c.lo = lo;
        s_run_case(&c, name);
        /* The operand is a broadcast scalar along the inner label. */
        snprintf(prog, sizeof prog, "0 %s 1 *", name);
        c = s_einsum(s_dtypes[d], "i,ij->ij", "ij", sz, prog, TK_AGG_NONE, 0);
        c.lo = lo;
        s_run_case(&c, name);
        /* Constant folding: op of a constant. */
        snprintf(prog, sizeof prog, "#0.3 %s 0 +", name);
        c = s_einsum(s_dtypes[d], "ij->i", "ij", sz, prog, TK_AGG_SUM, 1);
        s_run_case(&c, name);
      }
}

Test(contract, binary_operators_with_scalars) {
  static const char *const progs[] = {
      "0 #2 +",  "#2 0 -", "0 #3 *", "#1 0 /",   "0 abs #0.5 ^",
      "0 #2 ^",  "0 1 /",  "1 0 -",  "#2 #3 ^ 0 *", "#6 #3 / 1 -",
  };
  s_seed(8);
  for (int d = 0; d < 2; d++)
    for (int p = 0; p < 10; p++)
      for (int a = 0; a < S_NSIZES; a++) {
        int64_t sz[] = {s_sizes[a], s_sizes[(a + 1) % 4]};
        s_case c = s_einsum(s_dtypes[d], "ij,i->ij", "ij", sz, progs[p],
                            TK_AGG_NONE, 0);
        c.lo = 0.1;
        s_run_case(&c, progs[p]);
        c = s_einsum(s_dtypes[d], "ij,j->ij", "ij", sz, progs[p], TK_AGG_NONE,
                     0);
        c.lo = 0.1;
        s_run_case(&c, progs[p]);
      }
}

/* Shapes the fast kernels simplify: labels of extent 1, contiguous labels
** fused into one, long inner labels split into several blocks. */
Test(contract, fusion_and_blocks) {
  s_seed(9);
  for (int d = 0; d < 2; d++) {
    int64_t sz[] = {3, 1, 7, 5};
    s_case c = s_einsum(s_dtypes[d], "ijkl,l->ijkl", "ijkl", sz, "0 1 *",
                        TK_AGG_NONE, 0);
    s_run_case(&c, "4-d broadcast");
    c = s_einsum(s_dtypes[d], "ijkl->ij", "ijkl", sz, "0", TK_AGG_SUM, 0);
    s_run_case(&c, "two aggregated labels");
    c = s_einsum(s_dtypes[d], "ijkl->il", "ijkl", sz, "0", TK_AGG_MAX, 1);
    s_run_case(&c, "aggregated labels between output labels");
    int64_t lg[] = {1200, 2, 520, 1};
    c = s_einsum(s_dtypes[d], "ij,ij->ij", "ijkl", lg, "0 1 +", TK_AGG_NONE,
                 0);
    s_run_case(&c, "contiguous, fused");
    c = s_einsum(s_dtypes[d], "k->", "ijkl", lg, "0", TK_AGG_SUM, 0);
    s_run_case(&c, "long sum");
    c = s_einsum(s_dtypes[d], "ik->k", "ijkl", lg, "0", TK_AGG_MIN, 0);
    s_run_case(&c, "long columns");
    /* Rows of several blocks with every operand contiguous or constant
    ** along them run row by row; with an aggregated or a strided operand
    ** they run in tiles of rows.  Each way, with a ragged last block. */
    int64_t rw[] = {37, 1000, 3, 1};
    c = s_einsum(s_dtypes[d], "ij,i->ij", "ijkl", rw, "0 1 *", TK_AGG_NONE, 0);
    s_run_case(&c, "long rows times a value per row");
    c = s_einsum(s_dtypes[d], "ij,j->ij", "ijkl", rw, "0 1 -", TK_AGG_NONE, 0);
    s_run_case(&c, "long rows minus a row vector");
    c = s_einsum(s_dtypes[d], "kij,i->kij", "ijkl", rw, "0 1 +", TK_AGG_NONE, 1);
    s_run_case(&c, "long rows in blocks of rows, accumulated");
    c = s_einsum(s_dtypes[d], "ij->j", "ijkl", rw, "0", TK_AGG_SUM, 0);
    s_run_case(&c, "long rows summed over the rows (tiles)");
    c = s_einsum(s_dtypes[d], "ji->ij", "ijkl", rw, "0 #2 *", TK_AGG_NONE, 0);
    s_run_case(&c, "long rows from a transpose (tiles)");
    /* Operands read across the inner label go through 64 x 64 tiles: an
    ** input, out (read into its tile first when accumulated), out and an
    ** input at once, with ragged last tiles on each side and a batch label
    ** outside. */
    int64_t tt[] = {130, 67, 3};
    c = s_einsum(s_dtypes[d], "ij,ji->ij", "ijk", tt, "0 1 +", TK_AGG_NONE, 0);
    s_run_case(&c, "A + B^T (an input tile)");
    c = s_einsum(s_dtypes[d], "ij,ji->ji", "ijk", tt, "0 1 *", TK_AGG_SUM, 1);
    s_run_case(&c, "A^T * B accumulated into out (an input tile)");
    c = s_einsum(s_dtypes[d], "kji->kij", "ijk", tt, "0 exp", TK_AGG_MAX, 1);
    s_run_case(&c, "batched transpose, MAX into out (out's tile read and written back)");
    c = s_einsum(s_dtypes[d], "ijk,kji->ijk", "ijk", tt, "0 1 -", TK_AGG_NONE, 0);
    s_run_case(&c, "3-d against its reverse");
    int64_t tb[] = {130, 131, 1};
    c = s_einsum(s_dtypes[d], "ji,ji,ji,ij->ij", "ijk", tb, "0 1 * 2 + 3 -", TK_AGG_NONE, 0);
    s_run_case(&c, "three operands across out's rows, one along them (out's and an input's tiles)");
  }
}

/* Random einsums: random labels, extents, layouts (permuted, reversed,
** diagonal, gapped), programs, aggs. */
static void s_gen_expr(tk_insn *code, int *n, int nin, int depth) {
  int r = depth > 0 ? s_irand(14) : s_irand(2);
#define S_EMIT(o, a, cst) (code[(*n)++] = (tk_insn){.op = (o), .arg = (a), .c = (cst)})
#define S_PLUS1() (S_EMIT(TK_OP_ABS, 0, 0), S_EMIT(TK_OP_CONST, 0, 1), S_EMIT(TK_OP_ADD, 0, 0))
  switch (r) {
  case 0:
    S_EMIT(TK_OP_INPUT, s_irand(nin), 0);
    break;
  case 1:
    S_EMIT(TK_OP_CONST, 0, s_irand(3) ? 2 : s_rand() * 4 - 2);
    break;
  case 2: case 3: case 4: /* + - * */
    s_gen_expr(code, n, nin, depth - 1);
    s_gen_expr(code, n, nin, depth - 1);
    S_EMIT(TK_OP_ADD + r - 2, 0, 0);
    break;
  case 5: /* a / (|b| + 1) */
    s_gen_expr(code, n, nin, depth - 1);
    s_gen_expr(code, n, nin, depth - 1);
    S_PLUS1();
    S_EMIT(TK_OP_DIV, 0, 0);
    break;
  case 6: /* (|a| + 1) ^ (2 or tanh b) */
    s_gen_expr(code, n, nin, depth - 1);
    S_PLUS1();
    if (s_irand(2)) {
      S_EMIT(TK_OP_CONST, 0, 2);
    } else {
      s_gen_expr(code, n, nin, depth - 1);
      S_EMIT(TK_OP_TANH, 0, 0);
    }
    S_EMIT(TK_OP_POW, 0, 0);
    break;
  case 7: /* log or sqrt of |a| + 1 */
    s_gen_expr(code, n, nin, depth - 1);
    S_PLUS1();
    S_EMIT(s_irand(2) ? TK_OP_LOG : TK_OP_SQRT, 0, 0);
    break;
  case 8: /* exp of tanh a */
    s_gen_expr(code, n, nin, depth - 1);
    S_EMIT(TK_OP_TANH, 0, 0);
    S_EMIT(TK_OP_EXP, 0, 0);
    break;
  case 9: /* a comparison: 1 or 0 */
    s_gen_expr(code, n, nin, depth - 1);
    s_gen_expr(code, n, nin, depth - 1);
    S_EMIT(TK_OP_LT + s_irand(TK_OP_NE - TK_OP_LT + 1), 0, 0);
    break;
  case 10: /* where(a < b, c, d) or where(a, c, d) */
    s_gen_expr(code, n, nin, depth - 1);
    if (s_irand(2)) {
      s_gen_expr(code, n, nin, depth - 1);
      S_EMIT(TK_OP_LT, 0, 0);
    }
    s_gen_expr(code, n, nin, depth - 1);
    s_gen_expr(code, n, nin, depth - 1);
    S_EMIT(TK_OP_WHERE, 0, 0);
    break;
  default: {
    static const int un[] = {TK_OP_NEG, TK_OP_RELU, TK_OP_ABS, TK_OP_TANH,
                             TK_OP_SIGMOID, TK_OP_STEP};
    s_gen_expr(code, n, nin, depth - 1);
    S_EMIT(un[s_irand(6)], 0, 0);
  }
  }
#undef S_EMIT
#undef S_PLUS1
}

static s_case s_random_case(tr_dtype dt) {
  static const int64_t menu[] = {1, 2, 3, 5, 7, 8, 9, 16, 17, 33, 64, 129, 257};
  s_case c = {.dt = dt, .lo = -1, .hi = 1};
  int64_t total = 1;
  tk_insn code[1024];
  c.nl = s_irand(5);
  c.no = s_irand(c.nl + 1);
  c.agg = c.no == c.nl ? (tk_agg)s_irand(4) : (tk_agg)(1 + s_irand(3));
  c.acc = s_irand(2);
  for (int l = 0; l < c.nl; l++) {
    do c.ext[l] = menu[s_irand(13)];
    while (total * c.ext[l] > 40000);
    if (s_irand(30) == 0) c.ext[l] = 0;
    total *= c.ext[l] > 0 ? c.ext[l] : 1;
  }
  c.nin = 1 + s_irand(3);
  for (int k = 0; k < c.nin; k++) {
    for (int l = 0; l < c.nl; l++)
      if (s_irand(10) < 6) c.lab[k][c.rank[k]++] = l;
    if (c.rank[k] > 0 && s_irand(8) == 0) { /* a diagonal */
      int dup = c.lab[k][s_irand(c.rank[k])];
      c.lab[k][c.rank[k]++] = dup;
    }
    for (int a = c.rank[k] - 1; a > 0; a--) { /* shuffle the axes */
      int b = s_irand(a + 1), t = c.lab[k][a];
      c.lab[k][a] = c.lab[k][b];
      c.lab[k][b] = t;
    }
    for (int a = 0; a < c.rank[k]; a++) c.flip[k][a] = s_irand(10) == 0;
  }
  for (int l = 0; l < c.no; l++) c.olab[c.orank++] = l;
  for (int a = c.orank - 1; a > 0; a--) {
    int b = s_irand(a + 1), t = c.olab[a];
    c.olab[a] = c.olab[b];
    c.olab[b] = t;
  }
  c.ogap = s_irand(5) == 0;
  do {
    c.prog.n = 0;
    s_gen_expr(code, &c.prog.n, c.nin, s_irand(4));
  } while (c.prog.n >= TK_MAX_PROG); /* room for s_run_case's ABS */
  memcpy(c.prog.code, code, (size_t)c.prog.n * sizeof code[0]);
  return c;
}

Test(contract, random_einsums) {
  char what[64];
  s_seed(10);
  for (int i = 0; i < 600; i++) {
    s_case c = s_random_case(s_dtypes[i & 1]);
    snprintf(what, sizeof what, "random case %d", i);
    s_run_case(&c, what);
  }
}

/* ---- gemm ------------------------------------------------------------------- */

static void s_gemm_case(tr_dtype dt, int ta, int tb, int64_t m, int64_t n,
                        int64_t k, double alpha, double beta, int64_t batch,
                        int64_t pad) {
  int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  int64_t sa = (ta ? k : m) * lda + pad, sb = (tb ? n : k) * ldb + pad;
  int64_t sc = m * ldc + pad;
  void *a = s_buf(dt, sa * batch, -1, 1), *b = s_buf(dt, sb * batch, -1, 1);
  void *c1 = s_buf(dt, sc * batch, -1, 1), *c2 = s_dup(dt, c1, sc * batch);
  char what[128];
  snprintf(what, sizeof what, "gemm ta=%d tb=%d %lldx%lldx%lld batch %lld",
           ta, tb, (long long)m, (long long)n, (long long)k, (long long)batch);
  cr_assert_eq(s_ref()->gemm(dt, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb,
                             beta, c1, ldc, sc, batch),
               TR_OK, "%s", what);
  cr_assert_eq(s_blas()->gemm(dt, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb,
                              sb, beta, c2, ldc, sc, batch),
               TR_OK, "%s", what);
  s_expect_close(dt, c2, c1, sc * batch, what);
  tr_free_aligned(a);
  tr_free_aligned(b);
  tr_free_aligned(c1);
  tr_free_aligned(c2);
}

Test(gemm, against_reference) {
  s_seed(11);
  tk_set_blas_threads(1);
  for (int d = 0; d < 2; d++)
    for (int t = 0; t < 4; t++)
      for (int i = 0; i < S_NSIZES; i++) {
        s_gemm_case(s_dtypes[d], t & 1, t >> 1, s_sizes[i],
                    s_sizes[(i + 1) % 4], s_sizes[(i + 2) % 4], 1, 0, 1, 0);
        s_gemm_case(s_dtypes[d], t & 1, t >> 1, s_sizes[(i + 3) % 4],
                    s_sizes[i], s_sizes[(i + 1) % 4], -0.5, 2, 3, 2);
      }
  s_gemm_case(TR_F32, 0, 0, 33, 7, 0, 1, 0.5, 2, 1); /* k = 0: C = beta C */
  s_gemm_case(TR_F64, 1, 1, 0, 7, 3, 1, 0.5, 2, 1);
  tk_set_blas_threads(2);
  s_gemm_case(TR_F32, 0, 1, 200, 150, 100, 1, 1, 2, 0);
}

/* Products of one row or one column (the openblas backend computes them
** as dot and matrix-vector products), every transpose, strided, batched,
** with and without beta; with beta 0 a C holding NaN is overwritten. */
Test(gemm, one_row_or_one_column) {
  static const int64_t mn[][2] = {{1, 1}, {1, 2}, {1, 77}, {2, 1}, {77, 1}};
  static const int64_t ks[] = {1, 5, 300};
  s_seed(12);
  tk_set_blas_threads(1);
  for (int d = 0; d < 2; d++)
    for (int t = 0; t < 4; t++)
      for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) {
          s_gemm_case(s_dtypes[d], t & 1, t >> 1, mn[i][0], mn[i][1], ks[j], 1, 0, 1, 0);
          s_gemm_case(s_dtypes[d], t & 1, t >> 1, mn[i][0], mn[i][1], ks[j], -0.5, 2, 3, 2);
        }
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, -1, 2, 0, 1}, c[2] = {NAN, NAN};
  /* two rows of 3 dotted with two columns of 3, as a batch of 2 */
  cr_assert_eq(s_blas()->gemm(TR_F32, 0, 0, 1, 1, 3, 1, a, 3, 3, b, 1, 3, 0, c, 1, 1, 2), TR_OK);
  cr_expect_float_eq(c[0], -2.0f, 1e-6);
  cr_expect_float_eq(c[1], 14.0f, 1e-6);
  c[0] = c[1] = NAN;
  /* A (2 x 3) times a column of 3 read with stride 2 (1, -1, 0) */
  cr_assert_eq(s_blas()->gemm(TR_F32, 0, 0, 2, 1, 3, 1, a, 3, 0, b, 2, 0, 0, c, 1, 0, 1), TR_OK);
  cr_expect_float_eq(c[0], 1 * 1 + 2 * (-1) + 3 * 0, 1e-6);
  cr_expect_float_eq(c[1], 4 * 1 + 5 * (-1) + 6 * 0, 1e-6);
}

Test(gemm, known_values_and_beta_zero) {
  const tk_backend *bs[] = {s_ref(), s_blas()};
  for (int b = 0; b < 2; b++) {
    double A[4] = {1, 2, 3, 4}, B[4] = {5, 6, 7, 8};
    double C[4] = {NAN, NAN, NAN, NAN}, want[4] = {19, 22, 43, 50};
    double wantt[4] = {2 * 26 + 1, 2 * 30 + 1, 2 * 38 + 1, 2 * 44 + 1};
    /* beta == 0 does not read C, so NaN there does not propagate. */
    cr_assert_eq(bs[b]->gemm(TR_F64, 0, 0, 2, 2, 2, 1, A, 2, 0, B, 2, 0, 0, C,
                             2, 0, 1),
                 TR_OK);
    cr_expect_arr_eq(C, want, sizeof C, "%s", bs[b]->name);
    for (int i = 0; i < 4; i++) C[i] = 1;
    cr_assert_eq(bs[b]->gemm(TR_F64, 1, 0, 2, 2, 2, 2, A, 2, 0, B, 2, 0, 1, C,
                             2, 0, 1),
                 TR_OK);
    cr_expect_arr_eq(C, wantt, sizeof C, "%s A^T B", bs[b]->name);
    cr_expect_eq(bs[b]->gemm(TR_F64, 0, 0, 2, 2, 3, 1, A, 2, 0, B, 2, 0, 0, C,
                             2, 0, 1),
                 TR_EINVAL, "%s lda < k", bs[b]->name);
    cr_expect_eq(bs[b]->gemm(TR_F64, 0, 0, 2, 2, 2, 1, A, 2, 0, B, 2, 0, 0, C,
                             1, 0, 1),
                 TR_EINVAL, "%s ldc < n", bs[b]->name);
    cr_expect_eq(bs[b]->gemm(TR_F64, 0, 0, -1, 2, 2, 1, A, 2, 0, B, 2, 0, 0, C,
                             2, 0, 1),
                 TR_EINVAL, "%s m < 0", bs[b]->name);
    cr_expect_eq(bs[b]->gemm((tr_dtype)9, 0, 0, 2, 2, 2, 1, A, 2, 0, B, 2, 0,
                             0, C, 2, 0, 1),
                 TR_ETYPE, "%s dtype", bs[b]->name);
  }
}

/* syrk: the upper triangle of alpha op(A) op(A)^T + beta C, as gemm of
** A with itself gives it, in both backends and both transposes; the
** strictly lower triangle is left as it was; bad arguments refused.  (A
** backend may have none: cuda's Gram products run as its gemm.) */
Test(syrk, upper_triangle_of_gemm_with_itself) {
  const tk_backend *bs[] = {s_ref(), s_blas()};
  enum { N = 37, K = 53, LD = 60 };
  static double a[K * LD], c[N * N], want[N * N];
  s_seed(13);
  tk_set_blas_threads(1);
  cr_assert_not_null(s_ref()->syrk);
  for (int i = 0; i < K * LD; i++) a[i] = (double)rand() / RAND_MAX - 0.5;
  for (int b = 0; b < 2 && bs[b]->syrk; b++)
    for (int t = 0; t < 2; t++)
      for (int beta = 0; beta < 2; beta++) {
        /* trans: A is K x N (lda LD), op(A) = A^T; else A is N x K */
        for (int i = 0; i < N * N; i++) c[i] = want[i] = i % 7 - 3.0;
        cr_assert_eq(s_ref()->gemm(TR_F64, t, !t, N, N, K, -1.5, a, LD, 0, a, LD, 0, beta, want, N,
                                   0, 1),
                     TR_OK);
        cr_assert_eq(bs[b]->syrk(TR_F64, t, N, K, -1.5, a, LD, beta, c, N), TR_OK);
        for (int i = 0; i < N; i++)
          for (int j = 0; j < N; j++)
            if (j >= i)
              cr_assert_float_eq(c[i * N + j], want[i * N + j], 1e-12, "%s t%d beta%d [%d,%d]",
                                 bs[b]->name, t, beta, i, j);
            else
              cr_assert_eq(c[i * N + j], (i * N + j) % 7 - 3.0, "%s: lower [%d,%d] written",
                           bs[b]->name, i, j);
      }
  float af[6] = {1, 2, 3, 4, 5, 6}, cf[4] = {NAN, NAN, NAN, NAN};
  for (int b = 0; b < 2 && bs[b]->syrk; b++) {
    /* A 2 x 3, A A^T: [[14, 32], [., 77]]; beta 0 does not read C's NaN */
    cr_assert_eq(bs[b]->syrk(TR_F32, 0, 2, 3, 1, af, 3, 0, cf, 2), TR_OK);
    cr_expect(cf[0] == 14 && cf[1] == 32 && cf[3] == 77, "%s", bs[b]->name);
    cr_expect_eq(bs[b]->syrk(TR_F32, 0, 2, 3, 1, af, 2, 0, cf, 2), TR_EINVAL, "%s lda < k",
                 bs[b]->name);
    cr_expect_eq(bs[b]->syrk(TR_F32, 1, 2, 3, 1, af, 1, 0, cf, 2), TR_EINVAL, "%s lda < n",
                 bs[b]->name);
    cr_expect_eq(bs[b]->syrk(TR_F32, 0, 2, 3, 1, af, 3, 0, cf, 1), TR_EINVAL, "%s ldc < n",
                 bs[b]->name);
    cr_expect_eq(bs[b]->syrk((tr_dtype)9, 0, 2, 3, 1, af, 3, 0, cf, 2), TR_ETYPE, "%s dtype",
                 bs[b]->name);
  }
}

/* ---- combine, map, copy ----------------------------------------------------- */

Test(combine, every_agg) {
  static const int64_t ns[] = {0, 1, 7, 33, 129, 1000};
  s_seed(12);
  for (int d = 0; d < 2; d++)
    for (int agg = TK_AGG_NONE; agg <= TK_AGG_MIN; agg++)
      for (int i = 0; i < 6; i++) {
        tr_dtype dt = s_dtypes[d];
        int64_t n = ns[i];
        void *src = s_buf(dt, n, -1, 1), *d1 = s_buf(dt, n + 1, -1, 1);
        void *d2 = s_dup(dt, d1, n + 1);
        cr_assert_eq(s_ref()->combine(dt, (tk_agg)agg, d1, src, n, NULL), TR_OK);
        cr_assert_eq(s_blas()->combine(dt, (tk_agg)agg, d2, src, n, NULL), TR_OK);
        s_expect_close(dt, d2, d1, n + 1, "combine");
        for (int64_t j = 0; j < n; j++) { /* against the definition */
          double s = s_get(dt, src, j), o = s_get(dt, d2, j);
          if (agg == TK_AGG_NONE || agg == TK_AGG_MAX) cr_assert_geq(o, s);
          if (agg == TK_AGG_NONE || agg == TK_AGG_MIN) cr_assert_leq(o, s);
        }
        tr_free_aligned(src);
        tr_free_aligned(d1);
        tr_free_aligned(d2);
      }
  cr_expect_eq(s_blas()->combine(TR_F32, (tk_agg)9, NULL, NULL, 0, NULL), TR_EINVAL);
  cr_expect_eq(s_ref()->combine(TR_F32, (tk_agg)9, NULL, NULL, 0, NULL), TR_EINVAL);
}

/* exp, tanh and the sigmoid in f32 (vector polynomials in the fast
** kernels) against double-precision libm over their whole range: within 4
** ulp where the result is a normal float, 0 or inf where it under- or
** overflows, NaN for NaN, and the limits at the infinities. */
Test(map, f32_exp_tanh_sigmoid_over_their_range) {
  static const char *const progs[] = {"0 exp", "0 tanh", "0 sigmoid"};
  enum { N = 20000 };
  float *x = tr_alloc_aligned(N * sizeof *x), *y = tr_alloc_aligned(N * sizeof *y);
  cr_assert(x && y);
  static const float special[] = {0.0f, -0.0f, 1e-6f, -1e-6f, 0.625f, -0.625f, 0.6251f, 88.5f, 88.72f,
                                  88.73f, -87.3f, -87.4f, -103.0f, 200.0f, -200.0f};
  const int ns = (int)(sizeof special / sizeof *special);
  for (int p = 0; p < 3; p++) {
    for (int i = 0; i < N; i++) x[i] = i < ns ? special[i] : -110.0f + 220.0f * (float)(i - ns) / (N - ns);
    x[N - 3] = NAN;
    x[N - 2] = INFINITY;
    x[N - 1] = -INFINITY;
    memcpy(y, x, N * sizeof *x);
    tk_prog prog = s_prog(progs[p]);
    cr_assert_eq(s_blas()->map(TR_F32, &prog, y, N, NULL), TR_OK);
    for (int i = 0; i < N; i++) {
      double v = x[i], want = p == 0 ? exp(v) : p == 1 ? tanh(v) : 1 / (1 + exp(-v));
      if (isnan(v)) {
        cr_assert(isnan(y[i]), "%s(nan) = %g", progs[p], y[i]);
      } else if (want > FLT_MAX) {
        cr_assert(isinf(y[i]) && y[i] > 0, "%s(%g) = %g, want inf", progs[p], v, y[i]);
      } else if (fabs(want) < FLT_MIN) {
        cr_assert(fabs(y[i]) < FLT_MIN, "%s(%g) = %g, want ~%g", progs[p], v, y[i], want);
      } else {
        cr_assert(fabs(y[i] - want) <= 4 * FLT_EPSILON * fabs(want), "%s(%.9g) = %.9g, want %.9g",
                  progs[p], v, y[i], want);
      }
    }
  }
  tr_free_aligned(x);
  tr_free_aligned(y);
}

Test(map, every_operator) {
  static const char *const progs[] = {
      "0 neg", "0 relu", "0 exp",  "0 log",         "0 sqrt", "0 abs",
      "0 tanh", "0 sigmoid", "0 #2 ^", "0 0 * #1 + log", "0",      "#3 0 /"};
  static const int64_t ns[] = {0, 1, 7, 33, 129, 1000};
  s_seed(13);
  for (int d = 0; d < 2; d++)
    for (int p = 0; p < 12; p++)
      for (int i = 0; i < 6; i++) {
        tr_dtype dt = s_dtypes[d];
        tk_prog prog = s_prog(progs[p]);
        int64_t n = ns[i];
        double lo = p == 3 || p == 4 ? 0.01 : -3;
        void *x1 = s_buf(dt, n + 1, lo, 3), *x2 = s_dup(dt, x1, n + 1);
        void *x0 = s_dup(dt, x1, n + 1);
        cr_assert_eq(s_ref()->map(dt, &prog, x1, n, NULL), TR_OK);
        cr_assert_eq(s_blas()->map(dt, &prog, x2, n, NULL), TR_OK);
        s_expect_close(dt, x2, x1, n + 1, progs[p]);
        for (int64_t j = 0; j < n; j++) { /* against the scalar evaluator */
          double v = s_get(dt, x0, j), w = tk_prog_eval(&prog, &v);
          cr_assert(s_same(dt, s_get(dt, x1, j), w), "%s", progs[p]);
        }
        cr_assert_eq(s_get(dt, x1, n), s_get(dt, x0, n), "wrote past n");
        tr_free_aligned(x0);
        tr_free_aligned(x1);
        tr_free_aligned(x2);
      }
  tk_prog bad = s_prog("0 1 +");
  float x = 1;
  cr_expect_eq(s_ref()->map(TR_F32, &bad, &x, 1, NULL), TR_EINVAL);
  cr_expect_eq(s_blas()->map(TR_F32, &bad, &x, 1, NULL), TR_EINVAL);
}

static void s_copy_case(tr_dtype dt, int rank, const int64_t *ext,
                        const int *perm) {
  int64_t sst[TK_MAX_LABELS], dst_st[TK_MAX_LABELS], n = 1, size = 1;
  for (int d = rank - 1; d >= 0; d--) {
    sst[d] = n;
    n *= ext[d];
  }
  /* dst holds the box with its axes permuted (a transposed copy), with a
  ** gap of one element after each row. */
  for (int d = rank - 1; d >= 0; d--) {
    dst_st[perm[d]] = size * (d == rank - 1 ? 2 : 1);
    size = dst_st[perm[d]] * ext[perm[d]];
  }
  void *src = s_buf(dt, n, -1, 1), *d1 = s_buf(dt, size, -1, 1);
  void *d2 = s_dup(dt, d1, size);
  cr_assert_eq(s_ref()->copy(dt, rank, ext, d1, dst_st, src, sst, NULL), TR_OK);
  cr_assert_eq(s_blas()->copy(dt, rank, ext, d2, dst_st, src, sst, NULL), TR_OK);
  s_expect_close(dt, d2, d1, size, "copy");
  if (rank == 2) /* against the definition */
    for (int64_t i = 0; i < ext[0]; i++)
      for (int64_t j = 0; j < ext[1]; j++)
        cr_assert_eq(s_get(dt, d2, i * dst_st[0] + j * dst_st[1]),
                     s_get(dt, src, i * sst[0] + j * sst[1]));
  tr_free_aligned(src);
  tr_free_aligned(d1);
  tr_free_aligned(d2);
}

Test(copy, strided_and_transposed) {
  static const int id[] = {0, 1, 2}, tr[] = {1, 0}, rot[] = {2, 0, 1};
  s_seed(14);
  for (int d = 0; d < 2; d++) {
    for (int a = 0; a < S_NSIZES; a++)
      for (int b = 0; b < S_NSIZES; b++) {
        int64_t ext[] = {s_sizes[a], s_sizes[b], 5};
        s_copy_case(s_dtypes[d], 2, ext, id);
        s_copy_case(s_dtypes[d], 2, ext, tr);
        s_copy_case(s_dtypes[d], 3, ext, rot);
      }
    int64_t e0[] = {3, 0};
    s_copy_case(s_dtypes[d], 2, e0, tr);
    s_copy_case(s_dtypes[d], 0, e0, id);
  }
  int64_t e[] = {1};
  cr_expect_eq(s_ref()->copy(TR_F32, -1, e, e, e, e, e, NULL), TR_EINVAL);
  cr_expect_eq(s_blas()->copy(TR_F32, TK_MAX_LABELS + 1, e, e, e, e, e, NULL),
               TR_EINVAL);
}

/* A chunk assembled from narrow pieces, as re-chunking in flight does: each
** piece's rows are contiguous in it and in the chunk (the backend copies
** them row by row), with dimensions of extent 1 between them and, in the
** whole-chunk case, dimensions that continue the row.  Checked against
** the reference backend and against the definition. */
Test(copy, rows_contiguous_on_both_sides) {
  s_seed(15);
  for (int d = 0; d < 2; d++) {
    const tr_dtype dt = s_dtypes[d];
    /* src: 64 x 1 x 16 pieces, each rows of 16; dst: 64 x 64, pieces side
    ** by side (row length 16 in a row of 64). */
    const int64_t rows = 64, w = 16, nw = 4;
    void *src = s_buf(dt, rows * w * nw, -1, 1);
    void *d1 = s_buf(dt, rows * w * nw, -1, 1), *d2 = s_dup(dt, d1, rows * w * nw);
    const size_t esz = tr_dtype_size(dt);
    for (int64_t p = 0; p < nw; p++) {
      int64_t ext[] = {rows, 1, w}, sst[] = {w, 7, 1}, dst_st[] = {w * nw, 3, 1};
      const char *sp = (const char *)src + (size_t)(p * rows * w) * esz;
      cr_assert_eq(s_ref()->copy(dt, 3, ext, (char *)d1 + (size_t)(p * w) * esz, dst_st, sp,
                                 sst, NULL), TR_OK);
      cr_assert_eq(s_blas()->copy(dt, 3, ext, (char *)d2 + (size_t)(p * w) * esz, dst_st, sp,
                                  sst, NULL), TR_OK);
    }
    s_expect_close(dt, d2, d1, rows * w * nw, "copy of pieces");
    for (int64_t p = 0; p < nw; p++)
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < w; j++)
          cr_assert_eq(s_get(dt, d2, i * w * nw + p * w + j), s_get(dt, src, (p * rows + i) * w + j));
    /* A whole 4 x 5 x 6 box into a buffer laid out alike but with the
    ** outer dimension's stride wider: the inner two fuse into one row. */
    int64_t ext[] = {4, 5, 6}, sst[] = {30, 6, 1}, dst_st[] = {37, 6, 1};
    void *e1 = s_buf(dt, 4 * 37, -1, 1), *e2 = s_dup(dt, e1, 4 * 37);
    cr_assert_eq(s_ref()->copy(dt, 3, ext, e1, dst_st, src, sst, NULL), TR_OK);
    cr_assert_eq(s_blas()->copy(dt, 3, ext, e2, dst_st, src, sst, NULL), TR_OK);
    s_expect_close(dt, e2, e1, 4 * 37, "copy of fused rows");
    tr_free_aligned(e1);
    tr_free_aligned(e2);
    tr_free_aligned(src);
    tr_free_aligned(d1);
    tr_free_aligned(d2);
  }
}

/* combine, map and copy accept and refuse the same calls in every backend:
** one check (kernels/adapt.c), whatever runs them. */
Test(copy, every_backend_checks_arguments_alike) {
  tk_prog bad = s_prog("0 neg"), two = s_prog("0 1 +"), neg = s_prog("0 neg");
  int64_t one = 1, minus = -1, z0[] = {0, -1}, big = TK_MAX_LABELS + 1, st[] = {1, 1};
  float x[2] = {1, 2}, y[2] = {3, 4};
  const tr_dtype odd = (tr_dtype)7;
  bad.code[1].op = TK_NOPCODES;
  const tk_backend *bs[] = {s_ref(), s_blas()};
  for (int b = 0; b < 2; b++) {
    const tk_backend *k = bs[b];
    const struct {
      int got, want;
      const char *what;
    } cases[] = {
        {k->combine(odd, TK_AGG_SUM, x, y, 2, NULL), TR_ETYPE, "combine: type"},
        {k->combine(TR_F32, (tk_agg)9, x, y, 2, NULL), TR_EINVAL, "combine: agg"},
        {k->combine(TR_F32, TK_AGG_SUM, x, y, -1, NULL), TR_EINVAL, "combine: n < 0"},
        {k->combine(TR_F32, TK_AGG_SUM, NULL, NULL, 0, NULL), TR_OK, "combine: nothing"},
        {k->map(odd, &neg, x, 2, NULL), TR_ETYPE, "map: type"},
        {k->map(TR_F32, &bad, x, 2, NULL), TR_EINVAL, "map: unknown opcode"},
        {k->map(TR_F32, &two, x, 2, NULL), TR_EINVAL, "map: input 1"},
        {k->map(TR_F32, &neg, x, -1, NULL), TR_EINVAL, "map: n < 0"},
        {k->map(TR_F32, &neg, NULL, 0, NULL), TR_OK, "map: nothing"},
        {k->copy(odd, 1, &one, x, &one, y, &one, NULL), TR_ETYPE, "copy: type"},
        {k->copy(TR_F32, -1, &one, x, &one, y, &one, NULL), TR_EINVAL, "copy: rank < 0"},
        {k->copy(TR_F32, (int)big, &one, x, &one, y, &one, NULL), TR_EINVAL, "copy: rank"},
        {k->copy(TR_F32, 1, &minus, x, &one, y, &one, NULL), TR_EINVAL, "copy: extent < 0"},
        {k->copy(TR_F32, 2, z0, NULL, st, NULL, st, NULL), TR_OK, "copy: empty box first"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      cr_expect_eq(cases[i].got, cases[i].want, "%s %s: %d", k->name, cases[i].what,
                   cases[i].got);
  }
  cr_expect_eq(x[0], 1);
  cr_expect_eq(x[1], 2);
}

/* ---- fill_random ------------------------------------------------------------ */

static void *s_fill(tr_dtype dt, tk_dist dist, double p0, double p1,
                    uint64_t seed, int rank, const int64_t *shape,
                    const int64_t *origin, const int64_t *extent) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= extent[d];
  void *p = s_buf(dt, n, 0, 0);
  cr_assert_eq(s_blas()->fill_random(dt, dist, p0, p1, seed, rank, shape,
                                     origin, extent, p, NULL),
               TR_OK);
  return p;
}

Test(fill_random, deterministic_and_seeded) {
  int64_t shape[] = {10, 13}, origin[] = {0, 0};
  for (int d = 0; d < 2; d++)
    for (int dist = 0; dist < 2; dist++) {
      tr_dtype dt = s_dtypes[d];
      void *a = s_fill(dt, dist, 0, 1, 42, 2, shape, origin, shape);
      void *b = s_fill(dt, dist, 0, 1, 42, 2, shape, origin, shape);
      void *c = s_fill(dt, dist, 0, 1, 43, 2, shape, origin, shape);
      int differ = 0;
      cr_expect_arr_eq(a, b, 130 * tr_dtype_size(dt), "same seed");
      for (int i = 0; i < 130; i++) differ += s_get(dt, a, i) != s_get(dt, c, i);
      cr_expect_gt(differ, 120, "different seeds: only %d differ", differ);
      for (int i = 1; i < 130; i++) /* not one value repeated */
        cr_assert_neq(s_get(dt, a, i), s_get(dt, a, 0));
      tr_free_aligned(a);
      tr_free_aligned(b);
      tr_free_aligned(c);
    }
}

Test(fill_random, independent_of_chunking) {
  int64_t shape[] = {10, 13}, zero[] = {0, 0};
  /* Four ragged chunks: rows 0..3 | 4..9, columns 0..5 | 6..12. */
  int64_t org[4][2] = {{0, 0}, {0, 6}, {4, 0}, {4, 6}};
  int64_t ext[4][2] = {{4, 6}, {4, 7}, {6, 6}, {6, 7}};
  for (int d = 0; d < 2; d++)
    for (int dist = 0; dist < 2; dist++) {
      tr_dtype dt = s_dtypes[d];
      void *whole = s_fill(dt, dist, -2, 3, 7, 2, shape, zero, shape);
      for (int c = 0; c < 4; c++) {
        void *part = s_fill(dt, dist, -2, 3, 7, 2, shape, org[c], ext[c]);
        for (int64_t i = 0; i < ext[c][0]; i++)
          for (int64_t j = 0; j < ext[c][1]; j++)
            cr_assert_eq(s_get(dt, part, i * ext[c][1] + j),
                         s_get(dt, whole, (org[c][0] + i) * 13 + org[c][1] + j),
                         "chunk %d (%lld,%lld)", c, (long long)i, (long long)j);
        tr_free_aligned(part);
      }
      /* Rank 1 and rank 0: the same linear index gives the same value. */
      int64_t flat = 130, o1 = 27, e1 = 1;
      void *one = s_fill(dt, dist, -2, 3, 7, 1, &flat, &o1, &e1);
      cr_expect_eq(s_get(dt, one, 0), s_get(dt, whole, 27));
      tr_free_aligned(one);
      one = s_fill(dt, dist, -2, 3, 7, 0, NULL, NULL, NULL);
      cr_expect_eq(s_get(dt, one, 0), s_get(dt, whole, 0));
      tr_free_aligned(one);
      tr_free_aligned(whole);
    }
}

Test(fill_random, distributions) {
  enum { N = 200000 };
  int64_t shape = N, zero = 0;
  for (int d = 0; d < 2; d++) {
    tr_dtype dt = s_dtypes[d];
    double sum = 0, sq = 0, lo = 1e9, hi = -1e9;
    void *u = s_fill(dt, TK_FILL_UNIFORM, -2, 3, 5, 1, &shape, &zero, &shape);
    for (int i = 0; i < N; i++) {
      double v = s_get(dt, u, i);
      cr_assert(v >= -2 && v < 3, "uniform value %g", v);
      sum += v;
      lo = fmin(lo, v);
      hi = fmax(hi, v);
    }
    /* mean 0.5, sd 5/sqrt(12): 5 sigma of the mean is 0.016 */
    cr_expect_float_eq(sum / N, 0.5, 0.016, "uniform mean %g", sum / N);
    cr_expect(lo < -1.99 && hi > 2.99, "uniform range %g %g", lo, hi);
    tr_free_aligned(u);
    u = s_fill(dt, TK_FILL_UNIFORM, 0, 1, 5, 1, &shape, &zero, &shape);
    for (int i = 0; i < N; i++) cr_assert_lt(s_get(dt, u, i), 1.0);
    tr_free_aligned(u);
    void *z = s_fill(dt, TK_FILL_NORMAL, 10, 2, 6, 1, &shape, &zero, &shape);
    sum = 0;
    for (int i = 0; i < N; i++) {
      double v = s_get(dt, z, i);
      sum += v;
      sq += (v - 10) * (v - 10);
    }
    /* 5 sigma of the mean: 5 * 2 / sqrt(N) = 0.022 */
    cr_expect_float_eq(sum / N, 10, 0.022, "normal mean %g", sum / N);
    cr_expect_float_eq(sqrt(sq / N), 2, 0.02, "normal sd %g", sqrt(sq / N));
    tr_free_aligned(z);
    z = s_fill(dt, TK_FILL_NORMAL, 0, 1, 6, 1, &shape, &zero, &shape);
    int tail = 0;
    for (int i = 0; i < N; i++) tail += fabs(s_get(dt, z, i)) > 1.96;
    /* 5% beyond 1.96 sigma, give or take 5 sigma (0.24%) */
    cr_expect_float_eq(tail / (double)N, 0.05, 0.0025, "normal tail %d", tail);
    tr_free_aligned(z);
  }
}

Test(fill_random, rejects_bad_arguments) {
  int64_t shape[] = {4, 4}, origin[] = {2, 0}, ext[] = {3, 4};
  float out[16];
  const tk_backend *b = s_blas();
  cr_expect_eq(b->fill_random(TR_F32, TK_FILL_UNIFORM, 0, 1, 1, 2, shape,
                              origin, ext, out, NULL),
               TR_EINVAL, "chunk beyond the shape");
  origin[0] = 0;
  cr_expect_eq(b->fill_random(TR_F32, TK_FILL_UNIFORM, 1, 0, 1, 2, shape,
                              origin, ext, out, NULL),
               TR_EINVAL, "lo > hi");
  cr_expect_eq(b->fill_random(TR_F32, TK_FILL_NORMAL, 0, -1, 1, 2, shape,
                              origin, ext, out, NULL),
               TR_EINVAL, "negative sd");
  cr_expect_eq(b->fill_random(TR_F32, TK_FILL_UNIFORM, 0, 1, 1, 2, shape,
                              origin, ext, out, NULL),
               TR_OK);
}

#ifndef S_UNDER_TEST
/* ---- cancellation ------------------------------------------------------------ */

/* A token set from another thread after a delay, as a CANCEL, a lost
** coordinator or a signal sets it while a kernel runs. */
typedef struct s_canceller {
  tr_cancel *token; /* what to set */
  double delay_s;   /* after how long */
  double set_at;    /* when it was set (tr_now) */
  pthread_t tid;    /* the thread */
} s_canceller;

static void *s_cancel_later(void *p) {
  s_canceller *c = p;
  double end = tr_now() + c->delay_s;
  while (tr_now() < end) nanosleep(&(struct timespec){0, 1000000}, NULL);
  c->set_at = tr_now();
  tr_cancel_set(c->token);
  return NULL;
}

/* out[i,j] = SUM over k, l of A[i,k] * B[k,l] * C[l,j], all 512 x 512: 7e10
** steps, minutes even for the fast kernels, in one call. */
static tk_contract s_endless(tr_dtype dt, void *out, const void *in, const tr_cancel *token) {
  const int64_t n = 512;
  tk_contract op = {.dtype = dt, .nlabels = 4, .nout = 2, .ninputs = 3, .agg = TK_AGG_SUM,
                    .cancel = token};
  for (int l = 0; l < 4; l++) op.extent[l] = n;
  for (int k = 0; k < 3; k++) op.in[k] = in;
  /* labels i j k l: A[i,k], B[k,l], C[l,j] */
  op.in_stride[0][0] = n, op.in_stride[0][2] = 1;
  op.in_stride[1][2] = n, op.in_stride[1][3] = 1;
  op.in_stride[2][3] = n, op.in_stride[2][1] = 1;
  op.out = out;
  op.out_stride[0] = n, op.out_stride[1] = 1;
  op.prog = s_prog("0 1 * 2 *");
  return op;
}

/* A contraction stops within a fraction of a second of its token being
** set, whatever its shape: the poll is inside the kernel's loops, not
** between calls. */
Test(cancel, contract_stops_mid_call, .timeout = 60) {
  const tk_backend *bs[] = {s_ref(), s_blas()};
  s_seed(41);
  for (int b = 0; b < 2; b++)
    for (int dt = TR_F32; dt <= TR_F64; dt++) {
      void *in = s_buf(dt, 512 * 512, -1, 1), *out = s_buf(dt, 512 * 512, 0, 0);
      tr_cancel token = {0};
      s_canceller c = {.token = &token, .delay_s = 0.1};
      tk_contract op = s_endless(dt, out, in, &token);
      cr_assert_eq(pthread_create(&c.tid, NULL, s_cancel_later, &c), 0);
      double t0 = tr_now();
      int rc = bs[b]->contract(&op);
      double t1 = tr_now();
      pthread_join(c.tid, NULL);
      cr_assert_eq(rc, TR_EINTR, "%s %s: %d", bs[b]->name, tr_dtype_name(dt), rc);
      cr_expect_geq(c.set_at - t0, 0.09, "it ran until cancelled");
      cr_expect_lt(t1 - c.set_at, 0.25, "%s %s stopped %.3f s after the cancel", bs[b]->name,
                   tr_dtype_name(dt), t1 - c.set_at);
      /* A token set before the call: it does (next to) nothing. */
      t0 = tr_now();
      cr_assert_eq(bs[b]->contract(&op), TR_EINTR);
      cr_expect_lt(tr_now() - t0, 0.05);
      tr_free_aligned(in);
      tr_free_aligned(out);
    }
}

/* combine, map, copy and fill_random over a large chunk stop too; a NULL or
** clear token changes nothing. */
Test(cancel, elementwise_kernels_stop) {
  const tk_backend *bs[] = {s_ref(), s_blas()};
  const int64_t n = (int64_t)1 << 22;
  tr_cancel set = {0}, clear = {0};
  tr_cancel_set(&set);
  tk_prog twice = s_prog("0 #2 *");
  int64_t one = 1, zero = 0, len = n;
  for (int b = 0; b < 2; b++) {
    const tk_backend *k = bs[b];
    float *x = s_buf(TR_F32, n, -1, 1), *y = s_buf(TR_F32, n, -1, 1);
    cr_expect_eq(k->combine(TR_F32, TK_AGG_SUM, x, y, n, &set), TR_EINTR, "%s combine", k->name);
    cr_expect_eq(k->map(TR_F32, &twice, x, n, &set), TR_EINTR, "%s map", k->name);
    cr_expect_eq(k->copy(TR_F32, 1, &len, x, &one, y, &one, &set), TR_EINTR, "%s copy", k->name);
    cr_expect_eq(k->fill_random(TR_F32, TK_FILL_NORMAL, 0, 1, 7, 1, &len, &zero, &len, x, &set),
                 TR_EINTR, "%s fill_random", k->name);
    cr_expect_eq(k->copy(TR_F32, 1, &len, x, &one, y, &one, &clear), TR_OK);
    cr_expect_eq(memcmp(x, y, (size_t)n * sizeof *x), 0);
    cr_expect_eq(k->map(TR_F32, &twice, x, n, NULL), TR_OK);
    cr_expect_eq(x[n - 1], 2 * y[n - 1]);
    tr_free_aligned(x);
    tr_free_aligned(y);
  }
}
/* OpenBLAS's choice of kernels is overridden only where it fell back to a
** generic core below what the CPU runs, never over a core the table does
** not know (a newer OpenBLAS's, another vendor's). */
Test(blas_core, only_a_generic_fallback_is_overridden) {
  static const struct {
    const char *core;
    int level;
    const char *want;
  } cases[] = {{"Prescott", 4, "SkylakeX"}, {"Prescott", 3, "Haswell"}, {"prescott", 4, "SkylakeX"},
               {"Core2", 3, "Haswell"},     {"Nehalem", 4, "SkylakeX"}, {"Sandybridge", 3, "Haswell"},
               {"Haswell", 4, "SkylakeX"},  {"Haswell", 3, NULL},       {"SkylakeX", 4, NULL},
               {"Cooperlake", 4, NULL},     {"SapphireRapids", 4, NULL}, {"Zen", 3, NULL},
               {"Prescott", 0, NULL},       {"Sandybridge", 2, NULL},   {NULL, 4, NULL}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *got = tk_blas_core_over(cases[i].core, cases[i].level);
    if (cases[i].want)
      cr_assert(got && !strcmp(got, cases[i].want), "%s at level %d: %s, want %s", cases[i].core,
                cases[i].level, got ? got : "(kept)", cases[i].want);
    else
      cr_assert_null(got, "%s at level %d: %s, want it kept", cases[i].core ? cases[i].core : "(none)",
                     cases[i].level, got);
  }
}

/* What BLAS should load with is set unless set already, and 1 says the
** process's OpenBLAS loaded without it; a user's value stands. */
Test(blas_core, thread_timeout_set_unless_the_user_set_one) {
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1); /* so only the timeout is in play */
  unsetenv("OPENBLAS_THREAD_TIMEOUT");
  unsetenv("GOTO_THREAD_TIMEOUT");
  cr_assert_eq(tk_blas_setenv(), 1);
  cr_assert_str_eq(getenv("OPENBLAS_THREAD_TIMEOUT"), "18");
  cr_assert_eq(tk_blas_setenv(), 0, "set once, the process started again has it");
  setenv("OPENBLAS_THREAD_TIMEOUT", "25", 1);
  cr_assert_eq(tk_blas_setenv(), 0);
  cr_assert_str_eq(getenv("OPENBLAS_THREAD_TIMEOUT"), "25");
  unsetenv("OPENBLAS_THREAD_TIMEOUT");
  setenv("GOTO_THREAD_TIMEOUT", "20", 1);
  cr_assert_eq(tk_blas_setenv(), 0);
  cr_assert_null(getenv("OPENBLAS_THREAD_TIMEOUT"));
  unsetenv("GOTO_THREAD_TIMEOUT");
  unsetenv("OPENBLAS_CORETYPE");
}

/* A user's OPENBLAS_CORETYPE stands. */
Test(blas_core, a_set_coretype_is_kept) {
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  cr_assert_null(tk_blas_core_wanted());
  unsetenv("OPENBLAS_CORETYPE");
}

#endif /* S_UNDER_TEST */
