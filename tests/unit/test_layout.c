/*
** tests/unit/test_layout.c - layout/: contraction orders against brute
** force over every pairwise order, EinDecomp's DP against brute force over
** every partition vector (and the paper's worked numbers), the format DPs
** against brute force over every annotation, and the least-squares fit of
** the cost weights.
*/
#include "config.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "layout/layout.h"

/* ---- Shared helpers ------------------------------------------------------ */

/* splitmix64: deterministic random numbers per test. */
static uint64_t s_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int s_rand(uint64_t *s, int lo, int hi) { /* in [lo, hi] */
  return lo + (int)(s_next(s) % (uint64_t)(hi - lo + 1));
}

static double s_unif(uint64_t *s) { return (double)(s_next(s) >> 11) / 9007199254740992.0; }

static int s_close(double a, double b) {
  return fabs(a - b) <= 1e-9 * fmax(1.0, fmax(fabs(a), fabs(b)));
}

/* ---- 1. Contraction order -------------------------------------------------- */

/* A random EinSum as opt_einsum's tests make them: every label in two
** operands (some in three), a few of them in the output. */
static void s_rand_einsum(uint64_t *rs, tl_einsum *e, int nin, int nlabels, int smin, int smax,
                          int nout) {
  memset(e, 0, sizeof *e);
  e->nlabels = nlabels;
  e->nin = nin;
  for (int l = 0; l < nlabels; l++) e->size[l] = s_rand(rs, smin, smax);
  for (int l = 0; l < nlabels; l++) {
    int uses = s_rand(rs, 0, 3) ? 2 : 3;
    for (int u = 0; u < uses; u++) {
      int j = s_rand(rs, 0, nin - 1), tries = 0;
      while (e->rank[j] >= TR_MAX_RANK && tries++ < 100) j = s_rand(rs, 0, nin - 1);
      if (e->rank[j] < TR_MAX_RANK) e->in[j][e->rank[j]++] = l;
    }
  }
  for (int j = 0; j < nin; j++) /* no operand without a label */
    if (!e->rank[j]) e->in[j][e->rank[j]++] = s_rand(rs, 0, nlabels - 1);
  uint64_t bound = 0;
  for (int j = 0; j < nin; j++)
    for (int k = 0; k < e->rank[j]; k++) bound |= 1ull << e->in[j][k];
  for (int l = 0; l < nlabels && e->nout < nout; l++)
    if ((bound >> l) & 1 && s_rand(rs, 0, 2) == 0) e->out[e->nout++] = l;
}

static double s_prodm(const tl_einsum *e, uint64_t m) {
  double p = 1;
  for (int l = 0; l < e->nlabels; l++)
    if ((m >> l) & 1) p *= (double)e->size[l];
  return p;
}

/* Brute force over every sequence of pairwise joins of the tensors left. */
static double s_brute_order(const tl_einsum *e, uint64_t *mask, int n, uint64_t outm, int mj,
                            int mk) {
  if (n == 1) return 0;
  double best = INFINITY;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      uint64_t rest = outm;
      for (int k = 0; k < n; k++)
        if (k != i && k != j) rest |= mask[k];
      uint64_t join = mask[i] | mask[j], keep = join & rest;
      if (__builtin_popcountll(join) > mj) continue;
      if (n > 2 && __builtin_popcountll(keep) > mk) continue;
      double f = s_prodm(e, join) * ((join & ~keep) ? 2 : 1);
      uint64_t next[TL_MAX_OPERANDS];
      int m = 0;
      for (int k = 0; k < n; k++)
        if (k != i && k != j) next[m++] = mask[k];
      next[m++] = keep;
      double s = f + s_brute_order(e, next, m, outm, mj, mk);
      if (s < best) best = s;
    }
  return best;
}

static uint64_t s_lmask(const int *l, int n) {
  uint64_t m = 0;
  for (int k = 0; k < n; k++) m |= 1ull << l[k];
  return m;
}

Test(order, dp_equals_brute_force_on_random_einsums) {
  uint64_t rs = 11;
  int checked = 0;
  for (int t = 0; t < 300; t++) {
    tl_einsum e;
    int nin = s_rand(&rs, 3, 6);
    s_rand_einsum(&rs, &e, nin, s_rand(&rs, 3, 9), 2, 9, s_rand(&rs, 0, 3));
    int limits[3] = {3, 4, TK_MAX_LABELS};
    int keeps[3] = {2, 3, 0};
    tl_order_opts o = {limits[s_rand(&rs, 0, 2)], keeps[s_rand(&rs, 0, 2)], 0};
    uint64_t mask[TL_MAX_OPERANDS];
    for (int j = 0; j < nin; j++) mask[j] = s_lmask(e.in[j], e.rank[j]);
    double brute = s_brute_order(&e, mask, nin, s_lmask(e.out, e.nout), o.max_join,
                                 o.max_keep ? o.max_keep : TL_MAX_LABELS);
    tl_order ord;
    tr_err err;
    int rc = tl_order_find(&e, &o, &ord, &err);
    if (isinf(brute)) {
      cr_assert_eq(rc, TR_ESHAPE, "case %d: brute force found no order, the DP did", t);
      continue;
    }
    cr_assert_eq(rc, TR_OK, "case %d: %s", t, err.msg);
    cr_assert(ord.exact);
    cr_assert(s_close(ord.flops, brute), "case %d: DP %g, brute force %g", t, ord.flops, brute);
    cr_assert(tl_order_fits(&ord, &o));
    checked++;
  }
  cr_assert_gt(checked, 150);
}

/* A chain of n matrices with dims d[0..n]: operand j is [l_j, l_j+1]. */
static void s_chain(tl_einsum *e, int n, const int64_t *d) {
  memset(e, 0, sizeof *e);
  e->nlabels = n + 1;
  e->nin = n;
  for (int l = 0; l <= n; l++) e->size[l] = d[l];
  for (int j = 0; j < n; j++) {
    e->rank[j] = 2;
    e->in[j][0] = j;
    e->in[j][1] = j + 1;
  }
  e->nout = 2;
  e->out[0] = 0;
  e->out[1] = n;
}

Test(order, chain_contracts_b_and_c_first) {
  tl_einsum e;
  int64_t d[4] = {1024, 1024, 1024, 64};
  s_chain(&e, 3, d);
  tl_order o;
  tr_err err;
  cr_assert_eq(tl_order_find(&e, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(o.nsteps, 2);
  cr_assert_eq(o.step[0].a, 1);
  cr_assert_eq(o.step[0].b, 2);
  cr_assert_eq(o.step[0].keep, (1ull << 1) | (1ull << 3)); /* (BC)[j,l] */
  cr_assert_eq(o.step[1].a, 0);
  cr_assert_eq(o.step[1].b, 3);
  cr_assert(s_close(o.flops, 2.0 * 2 * 1024 * 1024 * 64));
}

Test(order, greedy_is_valid_and_never_worse_than_left_to_right_on_chains) {
  uint64_t rs = 5;
  for (int t = 0; t < 200; t++) {
    int n = s_rand(&rs, 3, 16);
    int64_t d[TL_MAX_OPERANDS + 1];
    for (int l = 0; l <= n; l++) d[l] = s_rand(&rs, 2, 1000);
    tl_einsum e;
    s_chain(&e, n, d);
    tl_order g, lr;
    tr_err err;
    tl_order_opts greedy = {0, 0, 1};
    cr_assert_eq(tl_order_find(&e, &greedy, &g, &err), TR_OK, "%s", err.msg);
    cr_assert_not(g.exact);
    int pair[TL_MAX_OPERANDS][2];
    for (int k = 0; k < n - 1; k++) {
      pair[k][0] = g.step[k].a;
      pair[k][1] = g.step[k].b;
    }
    tl_order again; /* the steps are a valid order that costs what it says */
    cr_assert_eq(tl_order_eval(&e, (const int(*)[2])pair, &again, &err), TR_OK, "%s", err.msg);
    cr_assert(s_close(again.flops, g.flops));
    cr_assert_eq(g.step[n - 2].keep, s_lmask(e.out, e.nout));
    cr_assert(tl_order_fits(&g, NULL));
    for (int k = 0; k < n - 1; k++) {
      pair[k][0] = k ? n + k - 1 : 0;
      pair[k][1] = k + 1;
    }
    cr_assert_eq(tl_order_eval(&e, (const int(*)[2])pair, &lr, &err), TR_OK);
    cr_assert_leq(g.flops, lr.flops, "chain %d: greedy %g > left-to-right %g", t, g.flops, lr.flops);
    if (n <= TL_ORDER_DP_MAX) { /* and the DP is never worse than greedy */
      tl_order best;
      cr_assert_eq(tl_order_find(&e, NULL, &best, &err), TR_OK);
      cr_assert_leq(best.flops, g.flops * (1 + 1e-12));
    }
  }
}

Test(order, ten_operands_twenty_labels_stay_within_kernel_limits) {
  uint64_t rs = 99;
  for (int t = 0; t < 20; t++) {
    tl_einsum e;
    s_rand_einsum(&rs, &e, 10, s_rand(&rs, 20, 26), 2, 6, 4);
    uint64_t all = 0;
    for (int j = 0; j < e.nin; j++) all |= s_lmask(e.in[j], e.rank[j]);
    cr_assert_geq(__builtin_popcountll(all), 20);
    for (int greedy = 0; greedy < 2; greedy++) {
      tl_order_opts o = {0, 0, greedy ? 1 : 0};
      tl_order ord;
      tr_err err;
      cr_assert_eq(tl_order_find(&e, &o, &ord, &err), TR_OK, "case %d: %s", t, err.msg);
      cr_assert_eq(ord.exact, !greedy);
      cr_assert_eq(ord.nsteps, 9);
      for (int k = 0; k < ord.nsteps; k++)
        cr_assert_leq(__builtin_popcountll(ord.step[k].join), TK_MAX_LABELS);
    }
  }
}

Test(order, no_order_within_limits_is_an_error) {
  tl_einsum e; /* one operand of five labels cannot join within three */
  memset(&e, 0, sizeof e);
  e.nlabels = 6;
  for (int l = 0; l < 6; l++) e.size[l] = 4;
  e.nin = 3;
  e.rank[0] = 5;
  for (int k = 0; k < 5; k++) e.in[0][k] = k;
  e.rank[1] = 2;
  e.in[1][0] = 0;
  e.in[1][1] = 5;
  e.rank[2] = 1;
  e.in[2][0] = 5;
  tl_order_opts o = {3, 0, 0};
  tl_order ord;
  tr_err err;
  cr_assert_eq(tl_order_find(&e, &o, &ord, &err), TR_ESHAPE);
  cr_assert(strstr(err.msg, "within 3 labels"), "%s", err.msg);
  o.dp_max = 1;
  cr_assert_eq(tl_order_find(&e, &o, &ord, &err), TR_ESHAPE);
  e.out[0] = 7; /* and a malformed EinSum is refused before any search */
  e.nout = 1;
  cr_assert_eq(tl_order_find(&e, NULL, &ord, &err), TR_EINVAL);
}

/* ---- Random graphs of matrices (EinDecomp and formats) --------------------- */

enum { G_MATMUL, G_ADD, G_MAP, G_TRANSPOSE, G_ROWSUM };

typedef struct s_gen {
  tl_vertex v[24];
  int n;
  int avail[24], navail; /* rank-2 vertices an operation may read */
  int used[24];          /* times read */
} s_gen;

static int s_source(s_gen *g, int64_t r, int64_t c, const tl_format *fmt) {
  tl_vertex *x = &g->v[g->n];
  memset(x, 0, sizeof *x);
  x->e.nlabels = 2;
  x->e.size[0] = r;
  x->e.size[1] = c;
  x->e.nout = 2;
  x->e.out[0] = 0;
  x->e.out[1] = 1;
  if (fmt) x->fmt = *fmt;
  g->avail[g->navail++] = g->n;
  return g->n++;
}

static int64_t s_rows(const s_gen *g, int v) { return g->v[v].e.size[g->v[v].e.out[0]]; }
static int64_t s_cols(const s_gen *g, int v) { return g->v[v].e.size[g->v[v].e.out[1]]; }

/* An operand to read: a source, or an unread vertex (reread allowed when
** `share`); -1 if none. */
static int s_pick(uint64_t *rs, s_gen *g, int share, int64_t rows, int64_t cols) {
  int cand[24], n = 0;
  for (int i = 0; i < g->navail; i++) {
    int v = g->avail[i];
    if (g->v[v].e.nin && g->used[v] && !share) continue;
    if (rows && s_rows(g, v) != rows) continue;
    if (cols && s_cols(g, v) != cols) continue;
    cand[n++] = v;
  }
  return n ? cand[s_rand(rs, 0, n - 1)] : -1;
}

/* A random graph of nops operations on matrices with sizes from sz[];
** share: intermediates may be read twice; fmts: formats for new sources. */
static void s_rand_graph(uint64_t *rs, s_gen *g, int nops, const int64_t *sz, int nsz, int share,
                         const tl_format *fmts, int nfmts) {
  memset(g, 0, sizeof *g);
#define S_SZ sz[s_rand(rs, 0, nsz - 1)]
#define S_FMT (fmts ? &fmts[s_rand(rs, 0, nfmts - 1)] : NULL)
  s_source(g, S_SZ, S_SZ, S_FMT);
  for (int k = 0; k < nops; k++) {
    int op = s_rand(rs, 0, 9);
    op = op < 4 ? G_MATMUL : op < 6 ? G_ADD : op < 7 ? G_MAP : op < 9 ? G_TRANSPOSE : G_ROWSUM;
    int x = s_pick(rs, g, share, 0, 0);
    if (x < 0 || (s_rand(rs, 0, 3) == 0 && g->n < 20)) x = s_source(g, S_SZ, S_SZ, S_FMT);
    int y = -1;
    if (op == G_MATMUL) {
      y = s_pick(rs, g, share, s_cols(g, x), 0);
      if (y < 0 || y == x) y = s_source(g, s_cols(g, x), S_SZ, S_FMT);
    } else if (op == G_ADD) {
      y = s_pick(rs, g, share, s_rows(g, x), s_cols(g, x));
      if (y < 0 || y == x) y = s_source(g, s_rows(g, x), s_cols(g, x), S_FMT);
    }
    tl_vertex *v = &g->v[g->n];
    memset(v, 0, sizeof *v);
    tl_einsum *e = &v->e;
    e->size[0] = s_rows(g, x);
    e->size[1] = s_cols(g, x);
    e->rank[0] = 2;
    e->in[0][0] = 0;
    e->in[0][1] = 1;
    v->src[0] = x;
    v->kernel = TL_K_ELEMWISE;
    e->nlabels = 2;
    e->nin = 1;
    e->nout = 2;
    e->out[0] = 0;
    e->out[1] = 1;
    if (op == G_MATMUL) {
      e->nlabels = 3;
      e->size[2] = s_cols(g, y);
      e->nin = 2;
      e->rank[1] = 2;
      e->in[1][0] = 1;
      e->in[1][1] = 2;
      v->src[1] = y;
      e->out[1] = 2;
      v->kernel = TL_K_GEMM;
    } else if (op == G_ADD) {
      e->nin = 2;
      e->rank[1] = 2;
      e->in[1][0] = 0;
      e->in[1][1] = 1;
      v->src[1] = y;
    } else if (op == G_TRANSPOSE) {
      e->out[0] = 1;
      e->out[1] = 0;
    } else if (op == G_ROWSUM) {
      e->nout = 1;
      v->kernel = TL_K_CONTRACT;
    }
    for (int j = 0; j < e->nin; j++) g->used[v->src[j]]++;
    if (e->nout == 2) g->avail[g->navail++] = g->n;
    g->n++;
  }
#undef S_SZ
#undef S_FMT
}

/* Does some non-source vertex have two readers? */
static int s_shared(const s_gen *g) {
  for (int v = 0; v < g->n; v++)
    if (g->v[v].e.nin && g->used[v] > 1) return 1;
  return 0;
}

/* ---- 2. EinDecomp ----------------------------------------------------------------- */

Test(decomp, figure4_repartition_costs_320) {
  int64_t shape[2] = {8, 8};
  int from[2] = {1, 8}, to[2] = {2, 2}; /* 8 columns of 8 -> 4 tiles of 16 */
  cr_assert_eq(tl_decomp_repart(2, shape, from, to), 320.0);
  /* its two parts: the producer pieces sent twice (128), the consumer
  ** pieces moved three times (192) */
  int halves[2] = {2, 8}; /* producer pieces already halved: only the 192 */
  cr_assert_eq(tl_decomp_repart(2, shape, halves, to), 192.0);
  int whole[2] = {1, 1}; /* one piece read as 4 tiles: sent to 4 places */
  cr_assert_eq(tl_decomp_repart(2, shape, whole, to), 4 * 64.0);
  cr_assert_eq(tl_decomp_repart(2, shape, to, to), 0.0);
}

/* A matmul vertex [i,j] x [j,k] with these sizes. */
static void s_matmul(tl_einsum *e, int64_t i, int64_t j, int64_t k) {
  memset(e, 0, sizeof *e);
  e->nlabels = 3;
  e->size[0] = i;
  e->size[1] = j;
  e->size[2] = k;
  e->nin = 2;
  e->rank[0] = e->rank[1] = 2;
  e->in[0][0] = 0;
  e->in[0][1] = 1;
  e->in[1][0] = 1;
  e->in[1][1] = 2;
  e->nout = 2;
  e->out[0] = 0;
  e->out[1] = 2;
}

Test(decomp, vertex_costs_and_counts) {
  tl_einsum e;
  s_matmul(&e, 8, 8, 8);
  double j, a;
  int one[3] = {1, 1, 1}, cube[3] = {2, 2, 2}, cols[3] = {1, 1, 8}, inner[3] = {1, 8, 1};
  tl_decomp_vertex(&e, one, &j, &a);
  cr_assert_eq(j, 128.0); /* one call receives both matrices */
  cr_assert_eq(a, 0.0);
  tl_decomp_vertex(&e, cols, &j, &a); /* 8 calls, each all of X and a column */
  cr_assert_eq(j, 8 * (64.0 + 8));
  cr_assert_eq(a, 0.0); /* no aggregation: the text's top-left case */
  tl_decomp_vertex(&e, cube, &j, &a); /* 8 calls on 4x4 tiles, j split in 2 */
  cr_assert_eq(j, 8 * (16.0 + 16));
  cr_assert_eq(a, 4 * 1 * 16.0); /* p/g = 4 groups, g - 1 = 1 moved, 16 floats */
  tl_decomp_vertex(&e, inner, &j, &a); /* all on j: 8 partial 8x8 results */
  cr_assert_eq(a, 7 * 64.0);
  /* section 8.2: eight kernel calls of a matmul, ten vectors; section 8.1's
  ** balls in buckets, C(log2 p + u - 1, u - 1): 6 labels and p = 1024 give
  ** the text's 3003 */
  cr_assert_eq(tl_decomp_count(&e, 8), 10);
  tl_einsum six;
  memset(&six, 0, sizeof six);
  six.nlabels = 6;
  for (int l = 0; l < 6; l++) six.size[l] = 4096;
  cr_assert_eq(tl_decomp_count(&six, 1024), 3003);
  six.size[0] = 2; /* a label of size 2 takes at most 2 pieces */
  cr_assert_lt(tl_decomp_count(&six, 1024), 3003);
  cr_assert_eq(tl_decomp_count(&e, 6), 10); /* 6 rounds up to 8 */
}

/* Every partition vector of e with p pieces, as this test reads section 6:
** powers of two, each at most its label's size, product p (or the most
** the sizes allow). */
static int s_vectors(const tl_einsum *e, int p, int (*out)[TK_MAX_LABELS], int max) {
  int cap[TL_MAX_LABELS], tot = 0, P = 0, n = 0;
  while ((1 << P) < p) P++;
  for (int l = 0; l < e->nlabels; l++) {
    cap[l] = 0;
    while ((2ll << cap[l]) <= e->size[l] && cap[l] < P) cap[l]++;
    tot += cap[l];
  }
  int S = tot < P ? tot : P, x[TL_MAX_LABELS] = {0};
  for (;;) { /* odometer over exponents */
    int s = 0;
    for (int l = 0; l < e->nlabels; l++) s += x[l];
    if (s == S) {
      cr_assert_lt(n, max);
      for (int l = 0; l < TK_MAX_LABELS; l++) out[n][l] = l < e->nlabels ? 1 << x[l] : 1;
      n++;
    }
    int l = 0;
    while (l < e->nlabels && x[l] == cap[l]) x[l++] = 0;
    if (l == e->nlabels) break;
    x[l]++;
  }
  return n;
}

/* What a brute-force search over partition vectors minimises. */
typedef double (*s_objective)(const tl_graph *g, const tl_dpart *d, const int *which, int nw);

static double s_whole_graph(const tl_graph *g, const tl_dpart *d, const int *which, int nw) {
  return tl_decomp_cost(g, d);
}

/* Least objective over every combination of vectors of the vertices
** which[depth..nw) (the others keep d[]). */
static double s_brute_vectors(const tl_graph *g, tl_dpart *d, const int *which, int nw, int depth,
                              int p, s_objective cost) {
  if (depth == nw) return cost(g, d, which, nw);
  static int vec[8][4096][TK_MAX_LABELS];
  int v = which[depth], n = s_vectors(&g->v[v].e, p, vec[depth], 4096);
  double best = INFINITY;
  tl_dpart keep = d[v];
  for (int i = 0; i < n; i++) {
    memcpy(d[v].d, vec[depth][i], sizeof d[v].d);
    double s = s_brute_vectors(g, d, which, nw, depth + 1, p, cost);
    if (s < best) best = s;
  }
  d[v] = keep;
  return best;
}

Test(decomp, dp_equals_brute_force_on_random_trees_and_dags_with_shared_inputs) {
  uint64_t rs = 7;
  int64_t sz[3] = {4, 8, 16};
  for (int t = 0; t < 60; t++) {
    s_gen gen;
    s_rand_graph(&rs, &gen, s_rand(&rs, 1, 4), sz, 3, 0, NULL, 0);
    tl_graph g = {gen.n, gen.v};
    int p = 1 << s_rand(&rs, 0, 3), which[8], nw = 0;
    for (int v = 0; v < g.n; v++)
      if (g.v[v].e.nin) which[nw++] = v;
    tl_dplan *plan;
    tr_err err;
    cr_assert_eq(tl_decomp(&g, p, &plan, &err), TR_OK, "%s", err.msg);
    cr_assert_not(plan->linearised);
    tl_dpart d[24];
    memcpy(d, plan->v, sizeof d[0] * (size_t)g.n);
    double brute = s_brute_vectors(&g, d, which, nw, 0, p, s_whole_graph);
    cr_assert(s_close(plan->floats, brute), "graph %d: DP %g, brute force %g", t, plan->floats,
              brute);
    cr_assert(s_close(plan->floats, tl_decomp_cost(&g, plan->v)));
    double sum = 0;
    for (int v = 0; v < g.n; v++) sum += plan->v[v].floats;
    cr_assert(s_close(sum, plan->floats));
    for (int i = 0; i < nw; i++) { /* p pieces of work where the sizes allow */
      int prod = 1, v = which[i];
      for (int l = 0; l < g.v[v].e.nlabels; l++) prod *= plan->v[v].d[l];
      cr_assert_leq(prod, p);
    }
    tl_dplan_destroy(&plan);
    tl_dplan_destroy(&plan); /* safe twice */
  }
}

/* A path's own objective under d (section 8.4): its vertices' joins and
** aggregations and the repartitions along it, nothing from off the path. */
static double s_path_cost(const tl_graph *g, const tl_dpart *d, const int *path, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) {
    double jn, ag;
    tl_decomp_vertex(&g->v[path[i]].e, d[path[i]].d, &jn, &ag);
    s += jn + ag;
    if (!i) continue;
    const tl_einsum *pe = &g->v[path[i - 1]].e, *e = &g->v[path[i]].e;
    int64_t shape[TR_MAX_RANK];
    int from[TR_MAX_RANK], to[TR_MAX_RANK];
    for (int k = 0; k < pe->nout; k++) {
      shape[k] = pe->size[pe->out[k]];
      from[k] = d[path[i - 1]].d[pe->out[k]];
    }
    for (int j = 0; j < e->nin; j++) {
      if (g->v[path[i]].src[j] != path[i - 1]) continue;
      for (int k = 0; k < e->rank[j]; k++) to[k] = d[path[i]].d[e->in[j][k]];
      s += tl_decomp_repart(pe->nout, shape, from, to);
    }
  }
  return s;
}

Test(decomp, shared_intermediates_linearise_into_paths_each_optimal) {
  uint64_t rs = 3;
  int64_t sz[3] = {4, 8, 16};
  int dags = 0;
  for (int t = 0; t < 200 && dags < 25; t++) {
    s_gen gen;
    s_rand_graph(&rs, &gen, s_rand(&rs, 3, 5), sz, 3, 1, NULL, 0);
    if (!s_shared(&gen)) continue;
    dags++;
    tl_graph g = {gen.n, gen.v};
    int p = 1 << s_rand(&rs, 1, 3);
    tl_dplan *plan;
    tr_err err;
    cr_assert_eq(tl_decomp(&g, p, &plan, &err), TR_OK, "%s", err.msg);
    cr_assert(plan->linearised);
    int npath = 0, seen_len = 1 << 30;
    for (int v = 0; v < g.n; v++) {
      cr_assert_eq(plan->v[v].path > 0, g.v[v].e.nin > 0);
      if (plan->v[v].path > npath) npath = plan->v[v].path;
    }
    tl_dpart d[24];
    memcpy(d, plan->v, sizeof d[0] * (size_t)g.n);
    for (int k = 1; k <= npath; k++) {
      int path[24], n = 0;
      for (int v = 0; v < g.n; v++)
        if (plan->v[v].path == k) path[n++] = v;
      cr_assert_leq(n, seen_len, "paths come longest first");
      seen_len = n;
      /* and it is a longest path of the vertices no earlier path took */
      int len[24] = {0}, longest = 0;
      for (int v = g.n - 1; v >= 0; v--) {
        if (!g.v[v].e.nin || plan->v[v].path < k) continue;
        len[v] = 1;
        for (int r = v + 1; r < g.n; r++)
          for (int j = 0; j < g.v[r].e.nin; j++)
            if (g.v[r].src[j] == v && len[r] + 1 > len[v]) len[v] = len[r] + 1;
        if (len[v] > longest) longest = len[v];
      }
      cr_assert_eq(n, longest, "graph %d path %d has %d vertices, not %d", t, k, n, longest);
      for (int i = 1; i < n; i++) { /* consecutive vertices are linked */
        int linked = 0;
        for (int j = 0; j < g.v[path[i]].e.nin; j++) linked |= g.v[path[i]].src[j] == path[i - 1];
        cr_assert(linked, "graph %d path %d is not a path", t, k);
      }
      double got = s_path_cost(&g, d, path, n);
      double best = s_brute_vectors(&g, d, path, n, 0, p, s_path_cost);
      cr_assert(s_close(got, best), "graph %d path %d: DP %g, brute force %g", t, k, got, best);
    }
    /* the plan's cost counts every edge, and no labelling beats the optimum */
    cr_assert(s_close(plan->floats, tl_decomp_cost(&g, plan->v)));
    int which[8], nw = 0;
    for (int v = 0; v < g.n && nw < 5; v++)
      if (g.v[v].e.nin) which[nw++] = v;
    if (nw < 5) cr_assert_geq(plan->floats * (1 + 1e-12), s_brute_vectors(&g, d, which, nw, 0, p, s_whole_graph));
    tl_dplan_destroy(&plan);
  }
  cr_assert_geq(dags, 10);
}

Test(decomp, a_chain_of_matmuls_matches_exhaustive_search) {
  /* Experiment 1's chain A B C D E, skewed sizes, on 8 pieces */
  tl_vertex v[9];
  memset(v, 0, sizeof v);
  int64_t dims[6] = {64, 8, 64, 16, 64, 8};
  for (int s = 0; s < 5; s++) {
    v[s].e.nlabels = 2;
    v[s].e.size[0] = dims[s];
    v[s].e.size[1] = dims[s + 1];
    v[s].e.nout = 2;
    v[s].e.out[1] = 1;
  }
  int prev = 0;
  for (int k = 0; k < 4; k++) {
    tl_vertex *x = &v[5 + k];
    s_matmul(&x->e, dims[0], dims[k + 1], dims[k + 2]);
    x->src[0] = prev;
    x->src[1] = k + 1;
    x->kernel = TL_K_GEMM;
    prev = 5 + k;
  }
  tl_graph g = {9, v};
  tl_dplan *plan;
  tr_err err;
  cr_assert_eq(tl_decomp(&g, 8, &plan, &err), TR_OK, "%s", err.msg);
  tl_dpart d[9];
  memcpy(d, plan->v, sizeof d);
  int which[4] = {5, 6, 7, 8};
  cr_assert(s_close(plan->floats, s_brute_vectors(&g, d, which, 4, 0, 8, s_whole_graph)));
  tl_dplan_destroy(&plan);
  cr_assert_null(plan);
}

Test(decomp, bad_input_is_refused) {
  tl_vertex v[2];
  memset(v, 0, sizeof v);
  v[0].e.nlabels = 1;
  v[0].e.size[0] = 4;
  v[0].e.nout = 1;
  v[1] = v[0];
  v[1].e.nin = 1;
  v[1].e.rank[0] = 1;
  v[1].src[0] = 1; /* reads itself */
  tl_graph g = {2, v};
  tl_dplan *plan = NULL;
  tr_err err;
  cr_assert_eq(tl_decomp(&g, 4, &plan, &err), TR_EINVAL);
  cr_assert_null(plan);
  v[1].src[0] = 0;
  v[1].e.size[0] = 8; /* not its producer's shape */
  cr_assert_eq(tl_decomp(&g, 4, &plan, &err), TR_ESHAPE);
  v[1].e.size[0] = 4;
  cr_assert_eq(tl_decomp(&g, 1 << 20, &plan, &err), TR_EINVAL);
  cr_assert_eq(tl_decomp(&g, 4, &plan, &err), TR_OK);
  tl_dplan_destroy(&plan);
}

/* ---- 3. Formats ---------------------------------------------------------------------- */

static tl_format s_fmt(tl_fkind kind, int axis, int64_t k0, int64_t k1) {
  tl_format f;
  memset(&f, 0, sizeof f);
  f.kind = kind;
  f.axis = axis;
  f.k[0] = k0;
  f.k[1] = k1;
  return f;
}

static void s_problem(tl_fproblem *pb, const tl_graph *g, const tl_format *f, int nf,
                      int64_t limit) {
  memset(pb, 0, sizeof *pb);
  pb->g = g;
  pb->nf = nf;
  pb->f = f;
  pb->chunk_limit = limit;
  pb->dtype = TR_F32;
  pb->sites = 4;
  pb->threads = 2;
  tl_weights_default(&pb->w);
}

/* Least tl_formats_cost over every implementation and operand format of
** every non-source vertex from v on. */
static double s_brute_formats(const tl_fproblem *pb, tl_fchoice *ch, int v) {
  const tl_graph *g = pb->g;
  while (v < g->n && !g->v[v].e.nin) v++;
  if (v == g->n) return tl_formats_cost(pb, ch);
  const tl_einsum *e = &g->v[v].e;
  int nimpl = e->nin > 1 ? e->nin + 1 : 1, per = pb->nf + 1, combos = 1;
  for (int j = 0; j < e->nin; j++) combos *= per;
  double best = INFINITY;
  for (int i = 0; i < nimpl; i++)
    for (int c = 0; c < combos; c++) {
      ch[v].impl = i - 1;
      for (int j = 0, r = c; j < e->nin; j++, r /= per) ch[v].in_fmt[j] = r % per - 1;
      double s = s_brute_formats(pb, ch, v + 1);
      if (s < best) best = s;
    }
  return best;
}

/* Every chosen format and transformation target is feasible. */
static void s_check_feasible(const tl_fproblem *pb, const tl_fplan *plan) {
  const tl_graph *g = pb->g;
  for (int v = 0; v < g->n; v++) {
    const tl_vertex *x = &g->v[v];
    if (!x->e.nin) continue;
    double bytes = 4;
    for (int k = 0; k < x->e.nout; k++) bytes *= (double)plan->v[v].chunk[k];
    cr_assert_leq(bytes, (double)pb->chunk_limit, "vertex %d got an infeasible format", v);
    cr_assert_geq(plan->v[v].fmt, 0);
    for (int j = 0; j < x->e.nin; j++) {
      int f = plan->v[v].in_fmt[j], u = x->src[j];
      if (f < 0) continue;
      int64_t shape[TR_MAX_RANK], c[TR_MAX_RANK];
      for (int k = 0; k < g->v[u].e.nout; k++) shape[k] = g->v[u].e.size[g->v[u].e.out[k]];
      cr_assert_eq(tl_format_chunk(&pb->f[f], g->v[u].e.nout, shape, c, NULL), TR_OK);
      bytes = 4;
      for (int k = 0; k < g->v[u].e.nout; k++) bytes *= (double)c[k];
      cr_assert_leq(bytes, (double)pb->chunk_limit);
    }
  }
}

/* Random graphs against brute force; share: DAGs with shared intermediates. */
static void s_formats_vs_brute(uint64_t seed, int share, int want) {
  uint64_t rs = seed;
  int64_t sz[3] = {64, 128, 256};
  tl_format P[4] = {s_fmt(TL_F_SINGLE, 0, 0, 0), s_fmt(TL_F_STRIP, 0, 32, 0),
                    s_fmt(TL_F_STRIP, 1, 64, 0), s_fmt(TL_F_TILE, 0, 64, 64)};
  int done = 0;
  for (int t = 0; t < 400 && done < want; t++) {
    s_gen gen;
    s_rand_graph(&rs, &gen, s_rand(&rs, 2, 3), sz, 3, share, P, 4);
    if (s_shared(&gen) != share) continue;
    int nonsrc = 0;
    for (int v = 0; v < gen.n; v++) nonsrc += gen.v[v].e.nin > 0;
    if (nonsrc > 3) continue;
    tl_graph g = {gen.n, gen.v};
    tl_fproblem pb;
    /* 64 KiB chunks: single is infeasible for 256 x 128 and larger */
    s_problem(&pb, &g, P, 4, s_rand(&rs, 0, 1) ? 64 << 10 : 1 << 30);
    pb.sites = s_rand(&rs, 1, 8);
    tl_fplan *plan;
    tr_err err;
    int rc = tl_formats(&pb, share ? TL_FMODE_AUTO : TL_FMODE_TREE, &plan, &err);
    tl_fchoice ch[24];
    memset(ch, 0, sizeof ch);
    double brute = s_brute_formats(&pb, ch, 0);
    if (isinf(brute)) {
      cr_assert_eq(rc, TR_ESHAPE, "graph %d: brute force found nothing, the DP did", t);
      continue;
    }
    cr_assert_eq(rc, TR_OK, "graph %d: %s", t, err.msg);
    cr_assert_eq(plan->dag, share);
    cr_assert(s_close(plan->seconds, brute), "graph %d: DP %.12g, brute force %.12g", t,
              plan->seconds, brute);
    double sum = 0;
    for (int v = 0; v < g.n; v++) sum += plan->v[v].seconds;
    cr_assert(s_close(sum, plan->seconds));
    s_check_feasible(&pb, plan);
    tl_fplan *other; /* the frontier DP is exact on trees too */
    cr_assert_eq(tl_formats(&pb, TL_FMODE_DAG, &other, &err), TR_OK, "%s", err.msg);
    cr_assert(s_close(other->seconds, plan->seconds));
    tl_fplan_destroy(&other);
    tl_fplan_destroy(&plan);
    done++;
  }
  cr_assert_eq(done, want);
}

Test(formats, tree_dp_equals_brute_force, .timeout = 120) { s_formats_vs_brute(21, 0, 12); }

Test(formats, dag_dp_equals_brute_force, .timeout = 120) { s_formats_vs_brute(22, 1, 12); }

Test(formats, only_tiles_are_feasible_so_tiles_are_picked) {
  /* 4096 x 4096 f32 is 64 MiB: with 8 MiB chunks a single chunk or a strip
  ** of 1024 (16 MiB) is infeasible, a 1024 x 1024 tile (4 MiB) is not */
  tl_format P[4] = {s_fmt(TL_F_SINGLE, 0, 0, 0), s_fmt(TL_F_STRIP, 0, 1024, 0),
                    s_fmt(TL_F_STRIP, 1, 1024, 0), s_fmt(TL_F_TILE, 0, 1024, 1024)};
  tl_vertex v[4];
  memset(v, 0, sizeof v);
  for (int s = 0; s < 2; s++) {
    v[s].e.nlabels = 2;
    v[s].e.size[0] = v[s].e.size[1] = 4096;
    v[s].e.nout = 2;
    v[s].e.out[1] = 1;
    v[s].fmt = s_fmt(TL_F_TILE, 0, 2048, 2048);
  }
  s_matmul(&v[2].e, 4096, 4096, 4096);
  v[2].src[1] = 1;
  v[2].kernel = TL_K_GEMM;
  v[3].e = v[0].e; /* relu(C) */
  v[3].e.nin = 1;
  v[3].e.rank[0] = 2;
  v[3].e.in[0][1] = 1;
  v[3].src[0] = 2;
  v[3].kernel = TL_K_ELEMWISE;
  tl_graph g = {4, v};
  tl_fproblem pb;
  s_problem(&pb, &g, P, 4, 8 << 20);
  tl_fplan *plan;
  tr_err err;
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_OK, "%s", err.msg);
  for (int x = 2; x < 4; x++) {
    cr_assert_eq(plan->v[x].fmt, 3, "vertex %d: format %d", x, plan->v[x].fmt);
    cr_assert_eq(plan->v[x].chunk[0], 1024);
    cr_assert_eq(plan->v[x].chunk[1], 1024);
  }
  cr_assert_eq(plan->v[2].in_fmt[0], 3); /* the 2048 tiles are re-chunked */
  cr_assert_eq(plan->v[2].tf[0], TL_T_RECHUNK);
  tl_fplan_destroy(&plan);
  pb.chunk_limit = 1 << 20; /* nothing fits: an error, not a plan */
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_ESHAPE);
  cr_assert_null(plan);
}

Test(formats, motivating_chain_broadcasts_a_single_ab) {
  /* Chapter 3: A 100 x 10^4 in 10 row strips, B 10^4 x 100 in 10 column
  ** strips, C 100 x 10^6 in 100 column strips; A x B x C.  The thesis's
  ** fast plan multiplies row strips by column strips (no aggregation),
  ** makes AB a single tuple and broadcasts it against C's strips. */
  tl_format P[5] = {s_fmt(TL_F_SINGLE, 0, 0, 0), s_fmt(TL_F_STRIP, 0, 10, 0),
                    s_fmt(TL_F_STRIP, 1, 10, 0), s_fmt(TL_F_STRIP, 1, 10000, 0),
                    s_fmt(TL_F_TILE, 0, 10, 10)};
  tl_vertex v[5];
  memset(v, 0, sizeof v);
  int64_t sh[3][2] = {{100, 10000}, {10000, 100}, {100, 1000000}};
  tl_format st[3] = {P[1], P[2], P[3]};
  for (int s = 0; s < 3; s++) {
    v[s].e.nlabels = 2;
    v[s].e.size[0] = sh[s][0];
    v[s].e.size[1] = sh[s][1];
    v[s].e.nout = 2;
    v[s].e.out[1] = 1;
    v[s].fmt = st[s];
  }
  s_matmul(&v[3].e, 100, 10000, 100);
  v[3].src[1] = 1;
  v[3].kernel = TL_K_GEMM;
  s_matmul(&v[4].e, 100, 100, 1000000);
  v[4].src[0] = 3;
  v[4].src[1] = 2;
  v[4].kernel = TL_K_GEMM;
  tl_graph g = {5, v};
  tl_fproblem pb;
  s_problem(&pb, &g, P, 5, 64 << 20);
  pb.sites = 5;
  pb.threads = 8;
  tl_fplan *plan;
  tr_err err;
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(plan->v[3].in_fmt[0], -1); /* A's row strips as stored */
  cr_assert_eq(plan->v[4].in_fmt[0], 0);  /* AB: a single chunk */
  cr_assert_eq(plan->v[4].in_fmt[1], -1); /* C's strips as stored */
  cr_assert_eq(plan->v[4].impl, 1);       /* C stays, AB is broadcast */
  /* and the all-tile plan the thesis compares with costs more */
  tl_fchoice tiles[5];
  memset(tiles, 0, sizeof tiles);
  for (int x = 3; x < 5; x++) {
    tiles[x].impl = TL_IMPL_HASH;
    tiles[x].in_fmt[0] = tiles[x].in_fmt[1] = 4;
  }
  cr_assert_gt(tl_formats_cost(&pb, tiles), 5 * plan->seconds);
  tl_fplan_destroy(&plan);
}

Test(formats, tree_mode_refuses_a_dag_and_classes_exclude_sources) {
  /* an FFNN-like DAG: every layer reads the same weight matrix W, and each
  ** hidden layer is read twice (forward and a residual add) */
  tl_format P[3] = {s_fmt(TL_F_SINGLE, 0, 0, 0), s_fmt(TL_F_STRIP, 0, 32, 0),
                    s_fmt(TL_F_TILE, 0, 32, 32)};
  tl_vertex v[12];
  memset(v, 0, sizeof v);
  for (int s = 0; s < 2; s++) { /* X and W, 128 x 128 */
    v[s].e.nlabels = 2;
    v[s].e.size[0] = v[s].e.size[1] = 128;
    v[s].e.nout = 2;
    v[s].e.out[1] = 1;
    v[s].fmt = P[2];
  }
  int h = 0, n = 2;
  for (int layer = 0; layer < 5; layer++) {
    s_matmul(&v[n].e, 128, 128, 128); /* H W */
    v[n].src[0] = h;
    v[n].src[1] = 1;
    v[n].kernel = TL_K_GEMM;
    n++;
    v[n].e = v[0].e; /* + H */
    v[n].e.nin = 2;
    v[n].e.rank[0] = v[n].e.rank[1] = 2;
    v[n].e.in[0][1] = v[n].e.in[1][1] = 1;
    v[n].src[0] = n - 1;
    v[n].src[1] = h;
    v[n].kernel = TL_K_ELEMWISE;
    h = n++;
  }
  tl_graph g = {n, v};
  tl_fproblem pb;
  s_problem(&pb, &g, P, 3, 1 << 30);
  tl_fplan *plan;
  tr_err err;
  cr_assert_eq(tl_formats(&pb, TL_FMODE_TREE, &plan, &err), TR_EINVAL);
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_OK, "%s", err.msg);
  cr_assert(plan->dag);
  cr_assert_leq(plan->max_class, 3, "classes grew to %d: W joined them", plan->max_class);
  tl_fplan_destroy(&plan);
}

Test(formats, chunks_and_transformations) {
  int64_t shape[2] = {100, 60}, c[2];
  tl_format f = s_fmt(TL_F_STRIP, 1, 25, 0);
  cr_assert_eq(tl_format_chunk(&f, 2, shape, c, NULL), TR_OK);
  cr_assert_eq(c[0], 100);
  cr_assert_eq(c[1], 25);
  f.axis = 2;
  cr_assert_eq(tl_format_chunk(&f, 2, shape, c, NULL), TR_EINVAL);
  f = s_fmt(TL_F_TILE, 0, 1000, 7);
  cr_assert_eq(tl_format_chunk(&f, 2, shape, c, NULL), TR_OK);
  cr_assert_eq(c[0], 100);
  cr_assert_eq(c[1], 7);
  tl_fproblem pb;
  s_problem(&pb, NULL, NULL, 0, 1 << 30);
  int64_t strip[2] = {100, 20}, tile[2] = {50, 10}, other[2] = {30, 60};
  tl_cost k;
  cr_assert_eq(tl_transform_cost(&pb, 2, shape, strip, tile, TL_T_RECHUNK, &k), TR_OK);
  cr_assert_eq(k.c[TL_C_NET], 0);
  cr_assert_gt(k.c[TL_C_ELEMWISE], 0);
  cr_assert_eq(tl_transform_cost(&pb, 2, shape, tile, strip, TL_T_RECHUNK, &k), TR_EINVAL);
  cr_assert_eq(tl_transform_cost(&pb, 2, shape, strip, other, TL_T_REPART, &k), TR_OK);
  cr_assert_gt(k.c[TL_C_NET], 0);
  cr_assert_eq(tl_transform_cost(&pb, 2, shape, strip, strip, TL_T_IDENTITY, &k), TR_OK);
  cr_assert_eq(tl_transform_cost(&pb, 2, shape, strip, tile, TL_T_IDENTITY, &k), TR_EINVAL);
}

/* ---- 4. Least squares ------------------------------------------------------------------ */

Test(cost, fit_recovers_known_weights_from_noisy_runs) {
  uint64_t rs = 17;
  tl_weights truth, fit;
  tl_weights_default(&truth);
  for (int k = 0; k < TL_NCOST; k++) truth.w[k] *= 0.5 + s_unif(&rs);
  enum { N = 60 };
  tl_cost c[N];
  double t[N];
  /* amounts of the size a probe run has, each varying over two decades */
  const double scale[TL_NCOST] = {1e10, 1e8, 1e8, 1e7, 1e3, 1e8};
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < TL_NCOST; k++) c[i].c[k] = scale[k] * pow(10, 2 * s_unif(&rs) - 1);
    t[i] = tl_seconds(&truth, &c[i]) * (1 + 0.02 * (2 * s_unif(&rs) - 1));
  }
  tr_err err;
  cr_assert_eq(tl_weights_fit(N, c, t, &fit, &err), TR_OK, "%s", err.msg);
  for (int k = 0; k < TL_NCOST; k++)
    cr_assert(fabs(fit.w[k] / truth.w[k] - 1) < 0.05, "%s: fitted %g, true %g", tl_cost_name(k),
              fit.w[k], truth.w[k]);
  for (int i = 0; i < N; i++) t[i] = tl_seconds(&truth, &c[i]); /* exact without noise */
  cr_assert_eq(tl_weights_fit(N, c, t, &fit, &err), TR_OK);
  for (int k = 0; k < TL_NCOST; k++) cr_assert(fabs(fit.w[k] / truth.w[k] - 1) < 1e-9);
}

Test(cost, degenerate_probe_sets_are_errors) {
  uint64_t rs = 4;
  enum { N = 20 };
  tl_cost c[N];
  double t[N];
  tl_weights w, before;
  tl_weights_default(&w);
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < TL_NCOST; k++) c[i].c[k] = 1 + s_unif(&rs);
    t[i] = tl_seconds(&w, &c[i]);
  }
  tr_err err;
  cr_assert_eq(tl_weights_fit(TL_NCOST - 1, c, t, &w, &err), TR_EINVAL); /* too few runs */
  for (int i = 0; i < N; i++) c[i].c[TL_C_TASKS] = 0; /* nothing exercises tasks */
  before = w;
  cr_assert_eq(tl_weights_fit(N, c, t, &w, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "'tasks'"), "%s", err.msg);
  cr_assert_eq(memcmp(&w, &before, sizeof w), 0, "weights changed on an error");
  for (int i = 0; i < N; i++) c[i].c[TL_C_TASKS] = 3 * c[i].c[TL_C_NET]; /* in step with net */
  cr_assert_eq(tl_weights_fit(N, c, t, &w, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "'tasks'"), "%s", err.msg);
  for (int i = 0; i < N; i++) { /* runs whose times fall as they write more */
    c[i].c[TL_C_TASKS] = 1 + s_unif(&rs);
    t[i] = tl_seconds(&w, &c[i]) - 2 * w.w[TL_C_WRITE] * c[i].c[TL_C_WRITE];
  }
  cr_assert_eq(tl_weights_fit(N, c, t, &w, &err), TR_EINVAL);
}

Test(cost, probes_cover_every_component) {
  int n, count[TL_NCOST] = {0};
  const tl_probe *p = tl_probes(&n);
  cr_assert_geq(n, 2 * TL_NCOST);
  for (int i = 0; i < n; i++) {
    cr_assert(p[i].name && p[i].setup && p[i].run);
    cr_assert(strstr(p[i].setup, "CREATE TENSOR"));
    cr_assert(strchr(p[i].run, '='));
    cr_assert(p[i].varies >= 0 && p[i].varies < TL_NCOST);
    count[p[i].varies]++;
    for (int j = 0; j < i; j++) cr_assert_str_neq(p[i].name, p[j].name);
  }
  for (int k = 0; k < TL_NCOST; k++) cr_assert_geq(count[k], 2, "%s", tl_cost_name(k));
  tl_weights w;
  tl_weights_default(&w);
  tl_cost one = {{1, 1, 1, 1, 1, 1}};
  cr_assert_gt(tl_seconds(&w, &one), 0);
}
