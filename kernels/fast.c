/*
** kernels/fast.c - portable optimized kernels: contract, and combine, map
** and copy as contractions (kernels/adapt.c).  The OpenBLAS backend serves
** them beside its cblas gemm, for the EinSums that are not matrix products
** (elementwise, broadcasts, max-plus, distances, transposes, reductions).
**
** A contraction first drops labels of extent 1 and fuses labels that walk
** every operand as one (a contiguous elementwise op becomes one long loop),
** then picks an inner label and runs a block interpreter: for each index
** of the other labels (an odometer), the program runs on blocks of up to
** S_BLK elements along the inner label, one instruction over a whole block
** at a time, in the dtype itself, in loops simple enough for gcc -O2 to
** vectorize.  The block is then folded into out elementwise or, when the
** inner label is aggregated (row sums, distances), reduced to one value.
** Long inner labels are tiled with the next label where that reuses what
** is in cache (see s_run).  The interpreter and its folds are compiled for
** AVX-512 and AVX2 besides the baseline, the best chosen when the program
** loads (target_clones; flatten puts the block loops inside each clone).
**
** The typed half of the file is compiled twice, for float and for double:
** the file includes itself with S_T (the type) and S_SFX (name suffix) set.
*/
#ifndef S_T
#include "config.h"

#include <stdint.h>
#include <string.h>
#include <tgmath.h>

#include "kernels/kernels_int.h"

#define S_BLK 256 /* elements per block, a multiple of S_LANES */
#define S_TILE 16 /* rows of a tile, see s_run */
#define S_XTILE 64 /* rows and columns of a transposed operand's tile, see s_run */
#define S_POLL 65536 /* elements between polls of the cancel token: 0.1 ms or so */
/* gcc -O2 vectorizes a loop only if no scalar remainder loop is needed, so
** block loops run over lengths padded to a multiple of S_LANES, written as
** S_FOR: groups of S_LANES, the form it vectorizes for double too. */
#define S_LANES 8
#define S_PAD(n) (((n) + S_LANES - 1) & ~(int64_t)(S_LANES - 1))
#define S_FOR(i, m)                                                           \
  for (int64_t g_ = 0; g_ < (m); g_ += S_LANES)                               \
    for (int64_t i = g_; i < g_ + S_LANES; i++)

/* A contraction prepared to run.  Operand k < nops-1 is input k, operand
** nops-1 is out; st[k][l] is operand k's stride along plan label l. */
typedef struct s_plan {
  int nops, nlab;
  int inner;                   /* label run in blocks; -1: none (1 element) */
  tk_agg agg;                  /* how values fold into out; NONE stores */
  int used[TK_MAX_INPUTS + 1]; /* the program reads the operand (out: 1) */
  int isagg[TK_MAX_LABELS];
  int64_t ext[TK_MAX_LABELS];
  int64_t st[TK_MAX_INPUTS + 1][TK_MAX_LABELS];
} s_plan;

/* Memory ranges [a, a+bytes) and [b, b+bytes) do not overlap: the folds may
** then use restrict (a map writes out over its own input). */
static int s_disjoint(const void *a, const void *b, size_t bytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x + bytes <= y || y + bytes <= x;
}

/* Loop body with a, b the i-th elements of slots sa, sb (block or scalar),
** the names the expressions of kernels/opcodes.h use. */
#define S_BIN_LOOP(A, B, E)                                                   \
  S_FOR(i, m) {                                                               \
    S_T a = (A), b = (B);                                                     \
    (void)b;                                                                  \
    d[i] = (E);                                                               \
  }
#define S_BIN(E)                                                              \
  do {                                                                        \
    if (!bv)                                                                  \
      S_BIN_LOOP(av[i], sb->s, E)                                             \
    else if (!av)                                                             \
      S_BIN_LOOP(sa->s, bv[i], E)                                             \
    else                                                                      \
      S_BIN_LOOP(av[i], bv[i], E)                                             \
  } while (0)

/* Expansions of kernels/opcodes.h for the typed half: an operator's case
** over scalars, over blocks (binary: S_BIN; where and unary: plain loops),
** or a leaf's case that computes nothing (the interpreter pushes leaves). */
#define S_LEAF_CASE(NAME, name) case TK_OP_##NAME: break;
#define S_SKIP_CASE(NAME, name, expr) case TK_OP_##NAME: break;
#define S_SCALAR_CASE(NAME, name, expr) case TK_OP_##NAME: return (expr);
#define S_BIN_CASE(NAME, name, expr) case TK_OP_##NAME: S_BIN(expr); break;
#define S_SEL_CASE(NAME, name, expr)                                          \
  case TK_OP_##NAME:                                                          \
    S_FOR(i, m) {                                                             \
      S_T a = sa->v ? sa->v[i] : sa->s, b = sb->v ? sb->v[i] : sb->s;         \
      S_T c = sc->v ? sc->v[i] : sc->s;                                       \
      d[i] = (expr);                                                          \
    }                                                                         \
    break;
#define S_UN_CASE(NAME, name, expr)                                           \
  case TK_OP_##NAME:                                                          \
    S_FOR(i, m) {                                                             \
      S_T a = v[i];                                                           \
      d[i] = (expr);                                                          \
    }                                                                         \
    break;

/* exp, tanh and the sigmoid in f32 as loops gcc -O2 vectorizes: libm's
** expf/tanhf/expm1f are scalar calls, a quarter of the CPU of a network's
** training step.  exp is Cephes' expf (x = n ln2 + r, degree-6 polynomial,
** 2^n by exponent bits; <= 2 ulp), flushing results below 2^-126 to 0;
** tanh is Cephes' tanhf (odd polynomial below 0.625, 1 - 2 / (e^2x + 1)
** above; <= 3 ulp).  NaN stays NaN, +-inf give inf/0 and +-1.  Every step
** is a lane-wise operation without a branch, a division or a conversion
** the vector units lack: n is rounded by adding 1.5 * 2^23 (its low bits
** are then the integer), and 2^n is built as 2^h * 2^(n-h), h = n >> 1,
** since n reaches 128 just below the overflow bound.  Without trapping
** math gcc turns the selects into vector blends (with it, it keeps them
** as branches: a select could hide a trap), so these are compiled without
** it.  The loops are compiled for AVX-512 and AVX2 besides the baseline,
** the best chosen when the program loads: on this project's machine
** (AMD EPYC, 2 cores) exp takes 0.23 ns an element with AVX-512, 0.99
** with AVX2 and 2.6 with the baseline SSE2. */
#define S_NO_TRAPS __attribute__((optimize("no-trapping-math")))
/* The block loops' clones, each with the loops it calls inside it
** (flatten).  clang refuses flatten beside target_clones, so a clang build
** (make fuzz) gets the clones alone. */
#ifdef __clang__
#define S_CLONES_FLAT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define S_CLONES_FLAT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#endif
#define S_SHIFTER 12582912.0f /* 1.5 * 2^23 */
S_NO_TRAPS static inline float s_expf_v(float x) {
  const float hi = 88.7228317f, lo = -87.3365478f;
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  float t = xc * 1.44269504088896341f + S_SHIFTER;
  int32_t n;
  memcpy(&n, &t, sizeof n);
  n -= 0x4B400000; /* the bits of S_SHIFTER */
  float z = t - S_SHIFTER;
  float r = xc - z * 0.693359375f;
  r = r - z * -2.12194440e-4f;
  float r2 = r * r;
  float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
              4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
  float e = p * r2 + r + 1.0f;
  /* the scales' bits, shifted unsigned: for a NaN x, n is whatever bits t
  ** had, and a signed overflow there would be undefined (the result is x) */
  int32_t h = n >> 1;
  uint32_t b1 = (uint32_t)(h + 127) << 23, b2 = (uint32_t)(n - h + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  e = e * s1 * s2;
  e = x > hi ? __builtin_inff() : e;
  e = x < lo ? 0.0f : e;
  return x != x ? x : e;
}

S_NO_TRAPS static inline float s_tanhf_v(float x) {
  float a = x < 0 ? -x : x;
  float x2 = x * x;
  float small = ((((-5.70498872745e-3f * x2 + 2.06390887954e-2f) * x2 - 5.37397155531e-2f) * x2 +
                  1.33314422036e-1f) * x2 - 3.33332819422e-1f) * x2 * x + x;
  float big = 1.0f - 2.0f / (s_expf_v(2.0f * a) + 1.0f);
  big = x < 0 ? -big : big;
  return a > 0.625f ? big : small;
}

/* d[i] = F(a[i]) for i < m (a multiple of S_LANES): groups of 16 lanes,
** the width of an AVX-512 register of floats, then one of 8 if left. */
#define S_MAP16(m, F)                                                         \
  do {                                                                        \
    const int64_t m16_ = (m) & ~(int64_t)15;                                  \
    for (int64_t g_ = 0; g_ < m16_; g_ += 16)                                 \
      for (int64_t i = g_; i < g_ + 16; i++) d[i] = F(a[i]);                  \
    for (int64_t g_ = m16_; g_ < (m); g_ += S_LANES)                          \
      for (int64_t i = g_; i < g_ + S_LANES; i++) d[i] = F(a[i]);             \
  } while (0)
#define S_SIGMOIDF(x) (1.0f / (1.0f + s_expf_v(-(x))))

/* d = op(a) over a padded block, for the f32 ops above; 0 if op is not
** one of them. */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) S_NO_TRAPS
static int s_un_f32_fast(int op, float *restrict d, const float *restrict a, int64_t m) {
  switch (op) {
  case TK_OP_EXP: S_MAP16(m, s_expf_v); return 1;
  case TK_OP_TANH: S_MAP16(m, s_tanhf_v); return 1;
  case TK_OP_SIGMOID: S_MAP16(m, S_SIGMOIDF); return 1;
  default: return 0;
  }
}

/* A free scratch block for an instruction's result: there is always one,
** as s_contract allocates one per stack slot and one more. */
static int s_take(const int *freeb, int *nfree) {
  tr_assert(*nfree > 0);
  return freeb[--*nfree];
}

#define S_T float
#define S_SFX(name) name##_f32
#include "kernels/fast.c"
#undef S_T
#undef S_SFX
#define S_T double
#define S_SFX(name) name##_f64
#include "kernels/fast.c"
#undef S_T
#undef S_SFX

static void s_plan_drop(s_plan *p, int l) {
  p->nlab--;
  for (int j = l; j < p->nlab; j++) {
    p->ext[j] = p->ext[j + 1];
    p->isagg[j] = p->isagg[j + 1];
    for (int k = 0; k < p->nops; k++) p->st[k][j] = p->st[k][j + 1];
  }
}

/* Label b continues label a in every operand, so the two are one label. */
static int s_fusable(const s_plan *p, int a, int b) {
  if (p->isagg[a] != p->isagg[b]) return 0;
  for (int k = 0; k < p->nops; k++)
    if (p->st[k][b] != p->st[k][a] * p->ext[a]) return 0;
  return 1;
}

static void s_plan_build(const tk_contract *op, tk_agg agg, s_plan *p) {
  int64_t best = -1;
  p->nops = op->ninputs + 1;
  p->nlab = 0;
  p->inner = -1;
  p->agg = agg;
  memset(p->used, 0, sizeof p->used);
  p->used[op->ninputs] = 1;
  for (int i = 0; i < op->prog.n; i++)
    if (op->prog.code[i].op == TK_OP_INPUT) p->used[op->prog.code[i].arg] = 1;
  for (int l = 0; l < op->nlabels; l++) {
    int j = p->nlab;
    if (op->extent[l] == 1) continue; /* its index is always 0 */
    p->nlab++;
    p->ext[j] = op->extent[l];
    p->isagg[j] = l >= op->nout;
    for (int k = 0; k < op->ninputs; k++)
      p->st[k][j] = p->used[k] ? op->in_stride[k][l] : 0;
    p->st[op->ninputs][j] = l < op->nout ? op->out_stride[l] : 0;
  }
  for (int again = 1; again;) {
    again = 0;
    for (int a = 0; a < p->nlab && !again; a++)
      for (int b = 0; b < p->nlab && !again; b++)
        if (a != b && s_fusable(p, a, b)) {
          p->ext[a] *= p->ext[b];
          s_plan_drop(p, b);
          again = 1;
        }
  }
  /* Inner label: the one along which most operands are contiguous (stride
  ** 1, loaded in place) or constant (stride 0, a scalar), weighted by how
  ** much of a block it fills; ties go to the later label, usually the one
  ** contiguous in out. */
  for (int l = 0; l < p->nlab; l++) {
    int64_t score = 0;
    for (int k = 0; k < p->nops; k++) {
      int64_t s = p->st[k][l];
      if (p->used[k]) score += s == 0 ? 1 : s == 1 || s == -1 ? 2 : 0;
    }
    score *= p->ext[l] < S_BLK ? p->ext[l] : S_BLK;
    if (score >= best) {
      best = score;
      p->inner = l;
    }
  }
}

static int s_contract(const tk_contract *op) {
  int rc = tk_contract_check(op), nagg = 0, empty = 0, depth;
  tk_agg agg = op->agg;
  s_plan p;
  void *scratch;
  if (rc != TR_OK) return rc;
  for (int l = 0; l < op->nlabels; l++) {
    if (op->extent[l] == 0 && l < op->nout) return TR_OK; /* no output */
    if (l >= op->nout) nagg++;
    if (op->extent[l] == 0) empty = 1;
  }
  /* Without aggregated labels, the aggregate of the single value is it. */
  if (!op->accumulate && nagg == 0) agg = TK_AGG_NONE;
  /* Otherwise start out at the identity of agg and fold every value in. */
  if (!op->accumulate && agg != TK_AGG_NONE) {
    tk_contract id = *op;
    id.nlabels = op->nout;
    id.ninputs = 0;
    id.agg = TK_AGG_NONE;
    id.prog.n = 1;
    id.prog.code[0] = (tk_insn){.op = TK_OP_CONST,
                                .c = agg == TK_AGG_SUM   ? 0
                                     : agg == TK_AGG_MAX ? -INFINITY
                                                         : INFINITY};
    if ((rc = s_contract(&id)) != TR_OK) return rc;
  }
  if (empty) return TR_OK;
  s_plan_build(op, agg, &p);
  depth = tk_prog_depth(&op->prog);
  tr_assert(depth >= 1); /* tk_contract_check passed */
  /* One block per stack slot, plus the one an instruction writes into. */
  scratch = tr_alloc_aligned((size_t)(depth + 1) * S_BLK *
                             tr_dtype_size(op->dtype));
  if (!scratch) return TR_ENOMEM;
  if (op->dtype == TR_F32)
    rc = s_run_f32(op, &p, scratch, depth + 1);
  else
    rc = s_run_f64(op, &p, scratch, depth + 1);
  tr_free_aligned(scratch);
  return rc;
}

TK_CONTRACT_ADAPTERS(s_contract)

/* A copy whose rows are contiguous on both sides (the last dimension left
** after dropping extent-1 ones and fusing those that continue it has
** stride 1 in src and dst) runs as one memmove a row (memmove, so that
** a copy onto itself stays defined).  Re-chunking in
** flight assembles a chunk that way from pieces of narrow ones: run
** through the block interpreter, each 16-float row of a 4096 x 64 block
** cost a program evaluation and a fold, some 8% of a dense layer's tasks.
** Any other box (a transpose, a broadcast) is a contraction as before. */
static int s_copy_rows(tr_dtype dt, int rank, const int64_t *extent, void *dst,
                       const int64_t *dst_stride, const void *src,
                       const int64_t *src_stride, const tr_cancel *cancel) {
  int64_t ext[TK_MAX_LABELS], ds[TK_MAX_LABELS], ss[TK_MAX_LABELS], idx[TK_MAX_LABELS];
  int64_t row = 1, work = 0;
  const size_t esz = tr_dtype_size(dt);
  int n = 0, fused = 1;
  if ((dt != TR_F32 && dt != TR_F64) || rank < 0 || rank > TK_MAX_LABELS)
    return s_copy(dt, rank, extent, dst, dst_stride, src, src_stride, cancel);
  for (int d = 0; d < rank; d++) {
    if (extent[d] <= 0) return s_copy(dt, rank, extent, dst, dst_stride, src, src_stride, cancel);
    if (extent[d] == 1) continue;
    ext[n] = extent[d];
    ds[n] = dst_stride[d];
    ss[n++] = src_stride[d];
  }
  /* The row: the dimension of stride 1 on both sides, grown by every
  ** dimension whose strides are the row's length on both sides. */
  int r = -1;
  for (int d = 0; d < n; d++)
    if (ds[d] == 1 && ss[d] == 1) r = d;
  if (n > 0 && r < 0) return s_copy(dt, rank, extent, dst, dst_stride, src, src_stride, cancel);
  if (r >= 0) {
    row = ext[r];
    ext[r] = ext[--n], ds[r] = ds[n], ss[r] = ss[n];
  }
  while (fused) {
    fused = 0;
    for (int d = 0; d < n; d++)
      if (ds[d] == row && ss[d] == row) {
        row *= ext[d];
        ext[d] = ext[--n], ds[d] = ds[n], ss[d] = ss[n];
        fused = 1;
        break;
      }
  }
  /* The odometer moves fastest along the smallest destination stride. */
  for (int d = 1; d < n; d++)
    for (int e = d; e > 0 && ds[e] < ds[e - 1]; e--) {
      int64_t t;
      t = ext[e], ext[e] = ext[e - 1], ext[e - 1] = t;
      t = ds[e], ds[e] = ds[e - 1], ds[e - 1] = t;
      t = ss[e], ss[e] = ss[e - 1], ss[e - 1] = t;
    }
  memset(idx, 0, sizeof idx);
  char *dp = dst;
  const char *sp = src;
  for (;;) {
    for (int64_t a = 0; a < row; a += S_POLL) { /* a long row polls too */
      const int64_t m = row - a < S_POLL ? row - a : S_POLL;
      memmove(dp + a * (int64_t)esz, sp + a * (int64_t)esz, (size_t)m * esz);
      if ((work += m) >= S_POLL) {
        if (tr_cancelled(cancel)) return TR_EINTR;
        work = 0;
      }
    }
    int d = 0;
    for (; d < n; d++) {
      dp += ds[d] * (int64_t)esz;
      sp += ss[d] * (int64_t)esz;
      if (++idx[d] < ext[d]) break;
      dp -= ds[d] * ext[d] * (int64_t)esz;
      sp -= ss[d] * ext[d] * (int64_t)esz;
      idx[d] = 0;
    }
    if (d == n) return TR_OK;
  }
}

void tk_fast_init(tk_backend *t) {
  t->contract = s_contract;
  t->combine = s_combine;
  t->map = s_map;
  t->copy = s_copy_rows;
}

#else /* the typed half, S_T being float or double */

/* A value on the block interpreter's stack: a block or a scalar. */
typedef struct S_SFX(s_slot) {
  const S_T *v; /* n elements (readable up to S_PAD(n)); NULL: scalar s */
  S_T s;
  int blk; /* the scratch block v lives in, -1 if none */
} S_SFX(s_slot);

static S_T S_SFX(s_agg)(tk_agg agg, S_T a, S_T b) {
  switch (agg) {
  case TK_AGG_SUM: return a + b;
  case TK_AGG_MAX: return b > a ? b : a;
  case TK_AGG_MIN: return b < a ? b : a;
  default: return b;
  }
}

/* An operator on scalars: a op b, where(a, b, c), or op(a) (the others
** unused). */
static S_T S_SFX(s_scalar)(tk_opcode op, S_T a, S_T b, S_T c) {
  (void)c;
  switch (op) {
    TK_OPCODES(S_LEAF_CASE, S_SCALAR_CASE, S_SCALAR_CASE, S_SCALAR_CASE)
  }
  tr_assert(!"a leaf has no scalar value");
  return NAN;
}

/* d = a op b over a padded block; a or b may be a scalar. */
static void S_SFX(s_bin)(tk_opcode op, S_T *restrict d, const S_SFX(s_slot) *sa,
                         const S_SFX(s_slot) *sb, int64_t n) {
  const S_T *restrict av = sa->v, *restrict bv = sb->v;
  const int64_t m = S_PAD(n);
  if (op == TK_OP_POW && !bv && sb->s == 2) { /* squares (distances) need no pow() */
    S_BIN(a * a);
    return;
  }
  switch (op) {
    TK_OPCODES(S_LEAF_CASE, S_BIN_CASE, S_SKIP_CASE, S_SKIP_CASE)
  }
}

/* d = where(a, b, c) over a padded block; any of them may be a scalar.
** Rare enough (masks) that a plain loop with selects will do. */
static void S_SFX(s_sel)(tk_opcode op, S_T *restrict d, const S_SFX(s_slot) *sa,
                         const S_SFX(s_slot) *sb, const S_SFX(s_slot) *sc, int64_t n) {
  const int64_t m = S_PAD(n);
  switch (op) {
    TK_OPCODES(S_LEAF_CASE, S_SKIP_CASE, S_SEL_CASE, S_SKIP_CASE)
  }
}

/* d = op(v) over a padded block: loops simple enough for the vectorizer,
** and the vector polynomials for exp, tanh and the sigmoid in f32. */
static void S_SFX(s_un)(tk_opcode op, S_T *restrict d, const S_T *restrict v,
                        int64_t n) {
  const int64_t m = S_PAD(n);
  if (sizeof(S_T) == sizeof(float) && s_un_f32_fast(op, (float *)d, (const float *)v, m)) return;
  switch (op) {
    TK_OPCODES(S_LEAF_CASE, S_SKIP_CASE, S_SKIP_CASE, S_UN_CASE)
  }
}

/* Gather n elements at stride s into d, zeroing the padding so that every
** lane the block loops compute on holds a defined value. */
static void S_SFX(s_load)(S_T *restrict d, const S_T *restrict p, int64_t s,
                          int64_t n) {
  int64_t i;
  for (i = 0; i < n; i++) d[i] = p[i * s];
  for (; i < S_PAD(n); i++) d[i] = 0;
}

/* Run the program on one block of n elements along the inner label: in[k]
** is input k's first element, sin[k] its stride along the label.  Blocks
** come from a free list (nblk of them) so no loop writes over its own
** operand and restrict holds. */
S_CLONES_FLAT
static S_SFX(s_slot)
    S_SFX(s_eval)(const tk_prog *pr, const S_T *const *in,
                  const int64_t *sin, int64_t n, S_T *scratch, int nblk) {
  S_SFX(s_slot) st[TK_MAX_PROG];
  int freeb[TK_MAX_PROG + 1], nfree = 0, sp = 0;
  for (int i = nblk - 1; i >= 0; i--) freeb[nfree++] = i;
  for (int pc = 0; pc < pr->n; pc++) {
    const tk_insn *ins = &pr->code[pc];
    S_SFX(s_slot) r = {NULL, 0, -1}, *a, *b, *c;
    tr_assert(ins->op >= 0 && ins->op < TK_NOPCODES); /* checked before */
    switch ((tk_opcode)ins->op) {
    case TK_OP_INPUT: {
      const S_T *p = in[ins->arg];
      int64_t s = sin[ins->arg];
      if (s == 0) {
        r.s = *p;
      } else if (s == 1 && n % S_LANES == 0) {
        r.v = p; /* contiguous, no padding needed: use it in place */
      } else {
        S_T *d = scratch + (r.blk = s_take(freeb, &nfree)) * S_BLK;
        S_SFX(s_load)(d, p, s, n);
        r.v = d;
      }
      st[sp++] = r;
      break;
    }
    case TK_OP_CONST:
      r.s = (S_T)ins->c;
      st[sp++] = r;
      break;
    TK_OPCODES(TK_OPCODE_NONE, TK_OPCODE_CASE, TK_OPCODE_NONE, TK_OPCODE_NONE) /* binary */
      b = &st[--sp];
      a = &st[sp - 1];
      if (!a->v && !b->v) {
        r.s = S_SFX(s_scalar)(ins->op, a->s, b->s, 0);
      } else {
        S_T *d = scratch + (r.blk = s_take(freeb, &nfree)) * S_BLK;
        S_SFX(s_bin)(ins->op, d, a, b, n);
        r.v = d;
      }
      if (a->blk >= 0) freeb[nfree++] = a->blk;
      if (b->blk >= 0) freeb[nfree++] = b->blk;
      *a = r;
      break;
    TK_OPCODES(TK_OPCODE_NONE, TK_OPCODE_NONE, TK_OPCODE_CASE, TK_OPCODE_NONE) /* where */
      c = &st[--sp];
      b = &st[--sp];
      a = &st[sp - 1];
      if (!a->v && !b->v && !c->v) {
        r.s = S_SFX(s_scalar)(ins->op, a->s, b->s, c->s);
      } else {
        S_T *d = scratch + (r.blk = s_take(freeb, &nfree)) * S_BLK;
        S_SFX(s_sel)(ins->op, d, a, b, c, n);
        r.v = d;
      }
      if (a->blk >= 0) freeb[nfree++] = a->blk;
      if (b->blk >= 0) freeb[nfree++] = b->blk;
      if (c->blk >= 0) freeb[nfree++] = c->blk;
      *a = r;
      break;
    TK_OPCODES(TK_OPCODE_NONE, TK_OPCODE_NONE, TK_OPCODE_NONE, TK_OPCODE_CASE) /* unary */
      a = &st[sp - 1];
      if (!a->v) {
        r.s = S_SFX(s_scalar)(ins->op, a->s, 0, 0);
      } else {
        S_T *d = scratch + (r.blk = s_take(freeb, &nfree)) * S_BLK;
        S_SFX(s_un)(ins->op, d, a->v, n);
        r.v = d;
      }
      if (a->blk >= 0) freeb[nfree++] = a->blk;
      *a = r;
    }
  }
  return st[0];
}

/* o[i] = agg(o[i], v[i]) for i < n, contiguous and not overlapping. */
static void S_SFX(s_fold1)(tk_agg agg, S_T *restrict o, const S_T *restrict v,
                           int64_t n) {
  const int64_t m = n & ~(int64_t)(S_LANES - 1);
  switch (agg) {
  case TK_AGG_SUM:
    S_FOR(i, m) o[i] += v[i];
    break;
  case TK_AGG_MAX:
    S_FOR(i, m) o[i] = v[i] > o[i] ? v[i] : o[i];
    break;
  case TK_AGG_MIN:
    S_FOR(i, m) o[i] = v[i] < o[i] ? v[i] : o[i];
    break;
  default:
    S_FOR(i, m) o[i] = v[i];
  }
  for (int64_t i = m; i < n; i++) o[i] = S_SFX(s_agg)(agg, o[i], v[i]);
}

/* o[i*so] = agg(o[i*so], r[i]) for i < n. */
static void S_SFX(s_fold)(tk_agg agg, S_T *o, int64_t so,
                          const S_SFX(s_slot) *r, int64_t n) {
  const S_T *v = r->v, s = r->s;
  if (so == 1 && v && s_disjoint(o, v, (size_t)n * sizeof(S_T))) {
    S_SFX(s_fold1)(agg, o, v, n);
  } else if (agg == TK_AGG_NONE) { /* no reads of out: they would stall */
    for (int64_t i = 0; i < n; i++) o[i * so] = v ? v[i] : s;
  } else {
    for (int64_t i = 0; i < n; i++)
      o[i * so] = S_SFX(s_agg)(agg, o[i * so], v ? v[i] : s);
  }
}

/* agg over the n elements of r, in S_LANES partial results so that the
** loops vectorize without reassociating a single chain. */
static S_T S_SFX(s_reduce)(tk_agg agg, const S_SFX(s_slot) *r, int64_t n) {
  const S_T *restrict v = r->v;
  const int64_t m = n & ~(int64_t)(S_LANES - 1);
  S_T acc[S_LANES], t;
  if (!v) return agg == TK_AGG_SUM ? r->s * (S_T)n : r->s;
  for (int l = 0; l < S_LANES; l++)
    acc[l] = agg == TK_AGG_SUM ? 0 : agg == TK_AGG_MAX ? -INFINITY : INFINITY;
  switch (agg) {
  case TK_AGG_SUM:
    for (int64_t i = 0; i < m; i += S_LANES)
      for (int l = 0; l < S_LANES; l++) acc[l] += v[i + l];
    break;
  case TK_AGG_MAX:
    for (int64_t i = 0; i < m; i += S_LANES)
      for (int l = 0; l < S_LANES; l++)
        acc[l] = v[i + l] > acc[l] ? v[i + l] : acc[l];
    break;
  default: /* TK_AGG_MIN */
    for (int64_t i = 0; i < m; i += S_LANES)
      for (int l = 0; l < S_LANES; l++)
        acc[l] = v[i + l] < acc[l] ? v[i + l] : acc[l];
  }
  t = acc[0];
  for (int l = 1; l < S_LANES; l++) t = S_SFX(s_agg)(agg, t, acc[l]);
  for (int64_t i = m; i < n; i++) t = S_SFX(s_agg)(agg, t, v[i]);
  return t;
}

/* Copy the n x tm box at src (stride s along the n, ts along the tm) into
** the tile x, row t holding the box's t-th line, walking src along ts
** innermost; s_untile copies the tile back into the box. */
static void S_SFX(s_tile)(S_T *restrict x, const S_T *restrict src, int64_t s, int64_t ts,
                          int64_t n, int64_t tm) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t t = 0; t < tm; t++) x[t * S_XTILE + j] = src[j * s + t * ts];
}

static void S_SFX(s_untile)(const S_T *restrict x, S_T *restrict dst, int64_t s, int64_t ts,
                            int64_t n, int64_t tm) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t t = 0; t < tm; t++) dst[j * s + t * ts] = x[t * S_XTILE + j];
}

/* TR_OK, TR_ENOMEM, or TR_EINTR once op->cancel is set (polled every
** S_POLL elements).  scratch holds nblk blocks. */
S_CLONES_FLAT
static int S_SFX(s_run)(const tk_contract *op, const s_plan *p,
                        S_T *scratch, int nblk) {
  const int o = p->nops - 1, inner = p->inner;
  const int reduce = inner >= 0 && p->isagg[inner];
  const int64_t ext = inner >= 0 ? p->ext[inner] : 1;
  int64_t off[TK_MAX_INPUTS + 1] = {0}, sin[TK_MAX_INPUTS + 1], esin[TK_MAX_INPUTS + 1];
  int64_t idx[TK_MAX_LABELS] = {0}, tm, tst[TK_MAX_INPUTS + 1] = {0};
  int64_t blk = S_BLK;
  int oth[TK_MAX_LABELS], noth = 0, d, tile, strided = 0, xp[TK_MAX_INPUTS + 1] = {0};
  int64_t tmax = S_TILE, ntile = 0;
  const S_T *in[TK_MAX_INPUTS] = {NULL};
  S_T *out = op->out, *xt = NULL;
  const tr_cancel *cancel = op->cancel;
  int64_t work = 0; /* elements since the last poll */
  for (int l = 0; l < p->nlab; l++)
    if (l != inner) oth[noth++] = l;
  /* When the inner label spans several blocks, the last other label runs
  ** in tiles of S_TILE inside the block loop where that reuses what is in
  ** cache: out blocks that label aggregates into, and the lines of
  ** strided operands (blocks of strided operands are S_TILE long too,
  ** making square tiles: transposes).  Otherwise rows run one after the
  ** other: interleaving S_TILE rows of contiguous operands only splits
  ** each into S_TILE streams, and E[h,q,k] / Z[h,q] over 16.7M floats
  ** took 10-11 ms tiled against 4 ms (AVX2: 3.5 ms) row by row.
  ** An operand strided along the inner label but walked more closely by
  ** the tile's label (a transpose) is copied into an S_XTILE x S_XTILE
  ** tile first, along its short stride, and out the same way back, so
  ** that the program runs on contiguous rows of S_XTILE: gathered element
  ** by element into rows of S_TILE, a 16-element program evaluation at a
  ** time waiting on 16 cache lines, c[i,j] = a[i,j] + b[j,i] on 4096 x 128
  ** chunks took 6 ns an element; through 64 x 64 tiles 2 ns (16 x 16
  ** tiles 4-8 ns, 64 x 256 2.5 ns). */
  for (int k = 0; k < p->nops; k++) {
    sin[k] = inner >= 0 ? p->st[k][inner] : 0;
    tst[k] = noth > 0 ? p->st[k][oth[noth - 1]] : 0;
    if (p->used[k] && (sin[k] > 1 || sin[k] < -1)) strided = 1;
  }
  if (strided) blk = S_TILE;
  tile = noth > 0 && (strided || tst[o] == 0);
  for (int k = 0; k < p->nops; k++) {
    int64_t s = sin[k] < 0 ? -sin[k] : sin[k], ts = tst[k] < 0 ? -tst[k] : tst[k];
    xp[k] = tile && p->used[k] && s > 1 && ts > 0 && ts < s && !(k == o && reduce);
    esin[k] = xp[k] ? 1 : sin[k];
    if (xp[k]) blk = tmax = S_XTILE, ntile = p->nops;
  }
  if (ntile && !(xt = tr_alloc_aligned((size_t)ntile * S_XTILE * S_XTILE * sizeof(S_T))))
    return TR_ENOMEM;
  do {
    tm = tile && (strided || ext > blk) ? p->ext[oth[noth - 1]] - idx[noth - 1] : 1;
    if (tm > tmax) tm = tmax;
    for (int64_t b0 = 0; b0 < ext; b0 += blk) {
      const int64_t n = ext - b0 < blk ? ext - b0 : blk;
      if ((work += n * tm) >= S_POLL) {
        if (tr_cancelled(cancel)) {
          tr_free_aligned(xt);
          return TR_EINTR;
        }
        work = 0;
      }
      for (int k = 0; k < p->nops; k++)
        if (xp[k] && (k < o || p->agg != TK_AGG_NONE)) /* out: only if the fold reads it */
          S_SFX(s_tile)(xt + k * S_XTILE * S_XTILE,
                        (k < o ? (const S_T *)op->in[k] : out) + off[k] + b0 * sin[k], sin[k],
                        tst[k], n, tm);
      for (int64_t t = 0; t < tm; t++) {
        S_T *q = xp[o] ? xt + o * S_XTILE * S_XTILE + t * S_XTILE
                       : out + off[o] + t * tst[o] + b0 * sin[o];
        S_SFX(s_slot) r;
        for (int k = 0; k < o; k++)
          if (p->used[k])
            in[k] = xp[k] ? xt + k * S_XTILE * S_XTILE + t * S_XTILE
                          : (const S_T *)op->in[k] + off[k] + t * tst[k] + b0 * sin[k];
        r = S_SFX(s_eval)(&op->prog, in, esin, n, scratch, nblk);
        if (reduce)
          *q = S_SFX(s_agg)(p->agg, *q, S_SFX(s_reduce)(p->agg, &r, n));
        else
          S_SFX(s_fold)(p->agg, q, esin[o], &r, n);
      }
      if (xp[o])
        S_SFX(s_untile)(xt + o * S_XTILE * S_XTILE, out + off[o] + b0 * sin[o], sin[o], tst[o],
                        n, tm);
    }
    /* Advance the odometer over the other labels, last fastest (by tm). */
    for (d = noth - 1; d >= 0; d--) {
      const int l = oth[d];
      const int64_t step = d == noth - 1 ? tm : 1;
      for (int k = 0; k < p->nops; k++) off[k] += p->st[k][l] * step;
      if ((idx[d] += step) < p->ext[l]) break;
      for (int k = 0; k < p->nops; k++) off[k] -= p->st[k][l] * p->ext[l];
      idx[d] = 0;
    }
  } while (d >= 0);
  tr_free_aligned(xt);
  return TR_OK;
}

#endif /* S_T */
