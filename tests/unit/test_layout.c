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

/* A source r x c stored in chunks of 1/1, 1/2 or 1/4 of each dimension
** (rs NULL: one chunk). */
static int s_source(s_gen *g, int64_t r, int64_t c, uint64_t *rs) {
  tl_vertex *x = &g->v[g->n];
  memset(x, 0, sizeof *x);
  x->e.nlabels = 2;
  x->e.size[0] = r;
  x->e.size[1] = c;
  x->e.nout = 2;
  x->e.out[0] = 0;
  x->e.out[1] = 1;
  x->chunk[0] = rs ? r >> s_rand(rs, 0, 2) : r;
  x->chunk[1] = rs ? c >> s_rand(rs, 0, 2) : c;
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
** share: intermediates may be read twice; stored: sources in random
** chunkings (else one chunk each). */
static void s_rand_graph(uint64_t *rs, s_gen *g, int nops, const int64_t *sz, int nsz, int share,
                         int stored) {
  memset(g, 0, sizeof *g);
#define S_SZ sz[s_rand(rs, 0, nsz - 1)]
#define S_FMT (stored ? rs : NULL)
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

/* Vectors of e with p pieces (freeing them). */
static int s_nvectors(const tl_einsum *e, int p) {
  int *v = NULL, n = -1;
  tr_err err;
  cr_assert_eq(tl_decomp_vectors(e, p, &v, &n, &err), TR_OK, "%s", err.msg);
  free(v);
  return n;
}

Test(decomp, vector_counts) {
  tl_einsum e;
  s_matmul(&e, 8, 8, 8);
  /* section 8.2: eight kernel calls of a matmul, ten vectors; section 8.1's
  ** balls in buckets, C(log2 p + u - 1, u - 1): 6 labels and p = 1024 give
  ** the text's 3003 */
  cr_assert_eq(s_nvectors(&e, 8), 10);
  tl_einsum six;
  memset(&six, 0, sizeof six);
  six.nlabels = 6;
  for (int l = 0; l < 6; l++) six.size[l] = 4096;
  cr_assert_eq(s_nvectors(&six, 1024), 3003);
  six.size[0] = 2; /* a label of size 2 takes at most 2 pieces */
  cr_assert_lt(s_nvectors(&six, 1024), 3003);
  cr_assert_eq(s_nvectors(&e, 6), 10); /* 6 rounds up to 8 */
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

static int s_cmp_vec(const void *a, const void *b) { return memcmp(a, b, sizeof(int) * TK_MAX_LABELS); }

Test(decomp, vectors_are_section_6s_on_random_einsums) {
  uint64_t rs = 7;
  int64_t sz[4] = {1, 4, 8, 16};
  static int want[4096][TK_MAX_LABELS], got[4096][TK_MAX_LABELS];
  int vertices = 0;
  for (int t = 0; t < 60; t++) {
    s_gen gen;
    s_rand_graph(&rs, &gen, s_rand(&rs, 1, 4), sz, 4, t % 2, 0);
    for (int v = 0; v < gen.n; v++) {
      const tl_einsum *e = &gen.v[v].e;
      if (!e->nin) continue;
      vertices++;
      int p = 1 << s_rand(&rs, 0, 4), nw = s_vectors(e, p, want, 4096), ng = 0, *vec = NULL;
      tr_err err;
      cr_assert_eq(tl_decomp_vectors(e, p, &vec, &ng, &err), TR_OK, "%s", err.msg);
      cr_assert_eq(ng, nw, "graph %d vertex %d, %d pieces: %d vectors, not %d", t, v, p, ng, nw);
      for (int i = 0; i < ng; i++)
        for (int l = 0; l < TK_MAX_LABELS; l++) got[i][l] = l < e->nlabels ? vec[i * e->nlabels + l] : 1;
      /* the first cuts the leading labels most: its exponents are the
      ** greatest in label order */
      for (int i = 1; i < ng; i++) {
        int l = 0;
        while (l < e->nlabels && got[0][l] == got[i][l]) l++;
        cr_assert(l == e->nlabels || got[0][l] > got[i][l], "graph %d vertex %d: vector %d first", t, v, i);
      }
      free(vec);
      qsort(want, (size_t)nw, sizeof want[0], s_cmp_vec);
      qsort(got, (size_t)ng, sizeof got[0], s_cmp_vec);
      cr_assert(!memcmp(want, got, sizeof want[0] * (size_t)nw), "graph %d vertex %d: other vectors", t, v);
    }
  }
  cr_assert_geq(vertices, 60);
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
  tr_err err;
  cr_assert_eq(tl_graph_check(&g, &err), TR_EINVAL);
  v[1].src[0] = 0;
  v[1].e.size[0] = 8; /* not its producer's shape */
  cr_assert_eq(tl_graph_check(&g, &err), TR_ESHAPE);
  v[1].e.size[0] = 4;
  cr_assert_eq(tl_graph_check(&g, &err), TR_OK);
  int *vec = NULL, n = -1;
  cr_assert_eq(tl_decomp_vectors(&v[1].e, 1 << 20, &vec, &n, &err), TR_EINVAL); /* past 2^15 pieces */
  cr_assert_null(vec);
  cr_assert_eq(n, 0);
  tl_einsum many;
  memset(&many, 0, sizeof many);
  many.nlabels = 16;
  for (int l = 0; l < 16; l++) many.size[l] = 1 << 15;
  cr_assert_eq(tl_decomp_vectors(&many, 1 << 15, &vec, &n, &err), TR_EINVAL); /* 2^20 vectors and more */
  cr_assert(strstr(err.msg, "partition vectors"), "%s", err.msg);
  cr_assert_null(vec);
}

/* ---- 3. Formats ---------------------------------------------------------------------- */

static void s_problem(tl_fproblem *pb, const tl_graph *g, int64_t limit) {
  memset(pb, 0, sizeof *pb);
  pb->g = g;
  pb->p = 8;
  pb->chunk_limit = limit;
  pb->dtype = TR_F32;
  pb->sites = 4;
  pb->threads = 2;
  tl_weights_default(&pb->w);
}

/* Costs from a table instead of formulas: any numbers, so that the DP is
** checked as a search, whatever the cost model says. */
static double s_hash_cost(const int64_t *x, int n, uint64_t salt) {
  uint64_t h = salt * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < n; i++) h = (h ^ (uint64_t)x[i]) * 0x100000001B3ull;
  return (double)(h >> 40) / (double)(1 << 24);
}
static double s_table_vertex(void *ctx, int v, const int64_t *ext) {
  const tl_graph *g = ctx;
  return s_hash_cost(ext, g->v[v].e.nlabels, (uint64_t)v + 7);
}
/* Half the chunkings (by their hash) offered first as a bound, from a
** tenth of their cost to all of it; the costs computed for those counted. */
static int s_floors_costed;
static double s_table_floor(void *ctx, int v, const int64_t *ext) {
  const tl_graph *g = ctx;
  double f = s_hash_cost(ext, g->v[v].e.nlabels, (uint64_t)v + 99);
  return f < 0.5 ? NAN : s_table_vertex(ctx, v, ext) * (0.1 + 0.9 * (f - 0.5) * 2);
}
static double s_table_vertex_counted(void *ctx, int v, const int64_t *ext) {
  const tl_graph *g = ctx;
  if (!isnan(s_table_floor(ctx, v, ext))) s_floors_costed++;
  return s_hash_cost(ext, g->v[v].e.nlabels, (uint64_t)v + 7);
}
static double s_table_edge(void *ctx, int u, const int64_t *from, const int64_t *to) {
  const tl_graph *g = ctx;
  int64_t x[2 * TR_MAX_RANK];
  int r = g->v[u].e.nout;
  memcpy(x, from, sizeof *x * (size_t)r);
  memcpy(x + r, to, sizeof *x * (size_t)r);
  return s_hash_cost(x, 2 * r, (uint64_t)u + 1000);
}

/* Least tl_formats_cost over every chunking of every non-source vertex
** from v on (cand[v]: its chunkings). */
static double s_brute_formats(const tl_fproblem *pb, tl_fchoice *ch, int64_t (**cand)[TL_MAX_LABELS],
                              const int *ncand, int v) {
  const tl_graph *g = pb->g;
  while (v < g->n && !g->v[v].e.nin) v++;
  if (v == g->n) return tl_formats_cost(pb, ch);
  double best = INFINITY;
  for (int i = 0; i < ncand[v]; i++) {
    memcpy(ch[v].ext, cand[v][i], sizeof ch[v].ext);
    double s = s_brute_formats(pb, ch, cand, ncand, v + 1);
    if (s < best) best = s;
  }
  return best;
}

/* Every chosen chunk fits the limit, and the chunkings are candidates. */
static void s_check_feasible(const tl_fproblem *pb, const tl_fplan *plan) {
  const tl_graph *g = pb->g;
  for (int v = 0; v < g->n; v++) {
    const tl_vertex *x = &g->v[v];
    if (!x->e.nin) continue;
    double bytes = 4;
    for (int k = 0; k < x->e.nout; k++) bytes *= (double)plan->v[v].chunk[k];
    cr_assert_leq(bytes, (double)pb->chunk_limit, "vertex %d got an infeasible format", v);
    for (int j = 0; j < x->e.nin; j++) {
      bytes = 4;
      for (int k = 0; k < x->e.rank[j]; k++) bytes *= (double)plan->v[v].ext[x->e.in[j][k]];
      cr_assert_leq(bytes, (double)pb->chunk_limit);
    }
  }
}

/* Random graphs against brute force; share: DAGs with shared
** intermediates; table: arbitrary costs instead of the formulas (2: half
** the chunkings offered first as bounds, tl_fproblem.vertex_floor). */
static void s_formats_vs_brute(uint64_t seed, int share, int table, int want) {
  uint64_t rs = seed;
  int64_t sz[3] = {64, 128, 256};
  int done = 0;
  for (int t = 0; t < 400 && done < want; t++) {
    s_gen gen;
    s_rand_graph(&rs, &gen, s_rand(&rs, 2, 3), sz, 3, share, 1);
    if (s_shared(&gen) != share) continue;
    int nonsrc = 0;
    for (int v = 0; v < gen.n; v++) nonsrc += gen.v[v].e.nin > 0;
    if (nonsrc > 3) continue;
    tl_graph g = {gen.n, gen.v};
    tl_fproblem pb;
    /* 32 KiB chunks: a single chunk is infeasible for 128 x 128 and larger */
    s_problem(&pb, &g, s_rand(&rs, 0, 1) ? 32 << 10 : 1 << 30);
    pb.sites = s_rand(&rs, 1, 8);
    pb.p = 1 << s_rand(&rs, 1, 3);
    if (table) {
      pb.vertex_cost = table == 2 ? s_table_vertex_counted : s_table_vertex;
      pb.vertex_floor = table == 2 ? s_table_floor : NULL;
      pb.edge_cost = s_table_edge;
      pb.ctx = &g;
    }
    tl_fplan *plan;
    tr_err err;
    int rc = tl_formats(&pb, share ? TL_FMODE_AUTO : TL_FMODE_TREE, &plan, &err);
    tl_fchoice ch[24];
    int64_t (*cand[24])[TL_MAX_LABELS];
    int ncand[24] = {0}, none = 0;
    memset(ch, 0, sizeof ch);
    memset(cand, 0, sizeof cand);
    for (int v = 0; v < g.n; v++)
      if (g.v[v].e.nin && tl_chunkings(&pb, v, &cand[v], &ncand[v], &err)) none = 1;
    double brute = none ? INFINITY : s_brute_formats(&pb, ch, cand, ncand, 0);
    for (int v = 0; v < g.n; v++) free(cand[v]);
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
    /* the DP along paths is a heuristic: feasible, never below the optimum */
    cr_assert_eq(tl_formats(&pb, TL_FMODE_PATHS, &other, &err), TR_OK, "%s", err.msg);
    cr_assert(other->linearised);
    cr_assert_geq(other->seconds, plan->seconds * (1 - 1e-9));
    s_check_feasible(&pb, other);
    tl_fplan_destroy(&other);
    tl_fplan_destroy(&plan);
    done++;
  }
  cr_assert_eq(done, want);
}

Test(formats, tree_dp_equals_brute_force, .timeout = 120) { s_formats_vs_brute(21, 0, 0, 12); }

Test(formats, dag_dp_equals_brute_force, .timeout = 120) { s_formats_vs_brute(22, 1, 0, 12); }

Test(formats, dps_equal_brute_force_under_arbitrary_costs, .timeout = 120) {
  s_formats_vs_brute(23, 0, 1, 10);
  s_formats_vs_brute(24, 1, 1, 10);
}

/* A chunking whose cost is dear to compute is offered as a bound first:
** the choice is still the optimum, and only some of those costs are
** computed (the brute force's own calls count too: it costs them all, so
** fewer than it means the search left some as bounds). */
Test(formats, dps_equal_brute_force_with_costs_bounded_first, .timeout = 120) {
  for (int share = 0; share < 2; share++) {
    s_floors_costed = 0;
    s_formats_vs_brute(25 + (uint64_t)share, share, 2, 10);
    cr_assert_gt(s_floors_costed, 0, "no bounded chunking was ever costed");
  }
}

/* v[0], v[1]: sources of n x n stored in c x c chunks; v[2]: their product. */
static void s_product(tl_vertex *v, int64_t n, int64_t c) {
  memset(v, 0, 3 * sizeof *v);
  for (int s = 0; s < 2; s++) {
    v[s].e.nlabels = 2;
    v[s].e.size[0] = v[s].e.size[1] = n;
    v[s].e.nout = 2;
    v[s].e.out[1] = 1;
    v[s].chunk[0] = v[s].chunk[1] = c;
  }
  s_matmul(&v[2].e, n, n, n);
  v[2].src[1] = 1;
  v[2].kernel = TL_K_GEMM;
}

Test(formats, only_tiles_are_feasible_so_tiles_are_picked) {
  /* 4096 x 4096 f32 is 64 MiB: with 8 MiB chunks a single chunk or a strip
  ** is infeasible, for the operands too; no vector of up to p = 8 pieces
  ** is feasible, so the search goes beyond p until one is */
  tl_vertex v[4];
  s_product(v, 4096, 2048);
  v[3].e = v[0].e; /* relu(C) */
  v[3].e.nin = 1;
  v[3].e.rank[0] = 2;
  v[3].e.in[0][1] = 1;
  v[3].src[0] = 2;
  v[3].kernel = TL_K_ELEMWISE;
  tl_graph g = {4, v};
  tl_fproblem pb;
  s_problem(&pb, &g, 8 << 20);
  tl_fplan *plan;
  tr_err err;
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_OK, "%s", err.msg);
  s_check_feasible(&pb, plan);
  for (int x = 2; x < 4; x++)
    cr_assert(plan->v[x].chunk[0] < 4096 || plan->v[x].chunk[1] < 4096, "vertex %d: %lld x %lld", x,
              (long long)plan->v[x].chunk[0], (long long)plan->v[x].chunk[1]);
  cr_assert_neq(plan->v[2].tf[0], TL_T_IDENTITY, "the 2048 tiles cannot be read as stored");
  tl_fplan_destroy(&plan);
  pb.chunk_limit = 1 << 10; /* nothing fits: an error, not a plan */
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_ESHAPE);
  cr_assert_null(plan);
}

Test(formats, candidates_are_eindecomp_vectors_and_the_declared_chunking) {
  tl_vertex v[3];
  s_product(v, 256, 256);
  v[2].ext0[0] = 100; /* a chunking no vector gives (labels i, k, j: k summed) */
  v[2].ext0[1] = 256;
  v[2].ext0[2] = 256;
  tl_graph g = {3, v};
  tl_fproblem pb;
  s_problem(&pb, &g, 1 << 30);
  pb.p = 4;
  int64_t (*c)[TL_MAX_LABELS];
  int n;
  tr_err err;
  cr_assert_eq(tl_chunkings(&pb, 2, &c, &n, &err), TR_OK, "%s", err.msg);
  /* 1 + 3 + 6 vectors of 1, 2 and 4 pieces over i, j, k, and ext0; and
  ** for k cut in 2 or 4 with fewer than 4 output pieces, the output cut
  ** in 4 as (4, 1), (2, 2) or (1, 4): 6 more */
  cr_assert_eq(n, 17);
  cr_assert_eq(c[0][0], 100);
  int seen_cmm = 0, spread = 0;
  for (int i = 0; i < n; i++) {
    int64_t pieces = 1, out = (256 + c[i][0] - 1) / c[i][0] * ((256 + c[i][2] - 1) / c[i][2]);
    for (int l = 0; l < 3; l++) pieces *= (256 + c[i][l] - 1) / c[i][l];
    if (pieces > 4) {
      cr_assert(c[i][1] < 256 && out == 4, "beyond p: the combine spread over p");
      spread++;
    } else
      cr_assert(i == 0 || pieces == 1 || pieces == 2 || pieces == 4);
    seen_cmm |= c[i][0] == 256 && c[i][1] == 64 && c[i][2] == 256;
  }
  cr_assert_eq(spread, 6);
  cr_assert(seen_cmm, "k cut in 4: the chunking CMM runs in");
  free(c);
  /* a declared output shape: every candidate makes it */
  v[2].chunk[0] = 32;
  v[2].chunk[1] = 256;
  cr_assert_eq(tl_chunkings(&pb, 2, &c, &n, &err), TR_OK, "%s", err.msg);
  for (int i = 0; i < n; i++) cr_assert(c[i][0] == 32 && c[i][2] == 256);
  free(c);
  tl_fplan *plan;
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_OK, "%s", err.msg);
  cr_assert(plan->v[2].chunk[0] == 32 && plan->v[2].chunk[1] == 256);
  tl_fplan_destroy(&plan);
}

/* Both operands stored cut on the summed label k, four pieces: as
** stored, the join is four partial products of the whole output, all
** combined on the one site that owns its single chunk.  The aggregation
** is partitioned on its own: the candidates keep k's cut and cut the
** output in p, and the cost charges the combine to the site it runs on,
** so the search does not leave every partial to one site. */
Test(formats, a_summed_cut_spreads_its_combine) {
  tl_vertex v[3];
  s_product(v, 2048, 2048);
  v[0].chunk[1] = 512; /* A[i,k]: k in 4 */
  v[1].chunk[0] = 512; /* B[k,j]: k in 4 */
  tl_graph g = {3, v};
  tl_fproblem pb;
  s_problem(&pb, &g, 1 << 30);
  pb.p = 4;
  pb.threads = 1;
  v[2].ext0[0] = v[2].ext0[2] = 2048; /* as stored: i, j whole, k in 4 */
  v[2].ext0[1] = 512;
  int64_t (*c)[TL_MAX_LABELS];
  int n, seen = 0;
  tr_err err;
  cr_assert_eq(tl_chunkings(&pb, 2, &c, &n, &err), TR_OK, "%s", err.msg);
  for (int i = 0; i < n; i++)
    seen += c[i][1] == 512 && (2048 / c[i][0]) * (2048 / c[i][2]) == 4;
  cr_assert_eq(seen, 3, "k as stored, the output in (4, 1), (2, 2) and (1, 4)");
  free(c);
  /* the built-in cost: one output chunk puts every partial on one site */
  tl_cost one, four;
  int64_t stored[3] = {2048, 512, 2048}, rows[3] = {512, 512, 2048};
  tl_vertex_cost(&pb, 2, stored, &one);
  tl_vertex_cost(&pb, 2, rows, &four);
  cr_assert_gt(one.c[TL_C_NET], 2 * four.c[TL_C_NET], "the combine's floats on its one site");
  tl_fplan *plan;
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_OK, "%s", err.msg);
  int64_t out = (2048 / plan->v[2].chunk[0]) * (2048 / plan->v[2].chunk[1]);
  cr_assert(plan->v[2].ext[1] == 2048 || out > 1, "k cut (ext %lld) with the output in %lld chunk",
            (long long)plan->v[2].ext[1], (long long)out);
  tl_fplan_destroy(&plan);
}

Test(formats, motivating_chain_broadcasts_a_single_ab) {
  /* Chapter 3: A 100 x 10^4 in 10 row strips, B 10^4 x 100 in 10 column
  ** strips, C 100 x 10^6 in 100 column strips; A x B x C.  The thesis's
  ** fast plan makes AB a single tuple and broadcasts it against C's
  ** strips, which stay as stored. */
  tl_vertex v[5];
  memset(v, 0, sizeof v);
  int64_t sh[3][2] = {{100, 10000}, {10000, 100}, {100, 1000000}};
  int64_t st[3][2] = {{10, 10000}, {10000, 10}, {100, 10000}};
  for (int s = 0; s < 3; s++) {
    v[s].e.nlabels = 2;
    v[s].e.size[0] = sh[s][0];
    v[s].e.size[1] = sh[s][1];
    v[s].e.nout = 2;
    v[s].e.out[1] = 1;
    v[s].chunk[0] = st[s][0];
    v[s].chunk[1] = st[s][1];
  }
  s_matmul(&v[3].e, 100, 10000, 100);
  v[3].src[1] = 1;
  v[3].kernel = TL_K_GEMM;
  s_matmul(&v[4].e, 100, 100, 1000000);
  v[4].src[0] = 3;
  v[4].src[1] = 2;
  v[4].kernel = TL_K_GEMM;
  v[4].ext0[0] = v[4].ext0[1] = 100; /* C's stored strips (labels i, k, j) */
  v[4].ext0[2] = 10000;
  tl_graph g = {5, v};
  tl_fproblem pb;
  s_problem(&pb, &g, 64 << 20);
  pb.sites = 5;
  pb.threads = 8;
  pb.p = 40;
  tl_fplan *plan;
  tr_err err;
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(plan->v[4].tf[1], TL_T_IDENTITY, "C's strips as stored");
  cr_assert(plan->v[4].ext[0] == 100 && plan->v[4].ext[1] == 100, "AB read whole: broadcast");
  /* and the all-tile plan the thesis compares with (100 x 100 tiles) costs more */
  tl_fchoice tiles[5];
  memset(tiles, 0, sizeof tiles);
  for (int x = 3; x < 5; x++)
    for (int l = 0; l < 3; l++) tiles[x].ext[l] = 100;
  double tl = tl_formats_cost(&pb, tiles);
  cr_assert_gt(tl, 1.5 * plan->seconds, "tiles %g, chosen %g", tl, plan->seconds);
  tl_fplan_destroy(&plan);
}

Test(formats, tree_mode_refuses_a_dag_and_classes_exclude_sources) {
  /* an FFNN-like DAG: every layer reads the same weight matrix W, and each
  ** hidden layer is read twice (forward and a residual add) */
  tl_vertex v[12];
  memset(v, 0, sizeof v);
  for (int s = 0; s < 2; s++) { /* X and W, 128 x 128 in 32 x 32 tiles */
    v[s].e.nlabels = 2;
    v[s].e.size[0] = v[s].e.size[1] = 128;
    v[s].e.nout = 2;
    v[s].e.out[1] = 1;
    v[s].chunk[0] = v[s].chunk[1] = 32;
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
  s_problem(&pb, &g, 1 << 30);
  tl_fplan *plan;
  tr_err err;
  cr_assert_eq(tl_formats(&pb, TL_FMODE_TREE, &plan, &err), TR_EINVAL);
  cr_assert_eq(tl_formats(&pb, TL_FMODE_AUTO, &plan, &err), TR_OK, "%s", err.msg);
  cr_assert(plan->dag);
  cr_assert(!plan->linearised);
  cr_assert_leq(plan->max_class, 3, "classes grew to %d: W joined them", plan->max_class);
  tl_fplan_destroy(&plan);
}

Test(formats, chunks_and_transformations) {
  int64_t shape[2] = {100, 60};
  tl_fproblem pb;
  s_problem(&pb, NULL, 1 << 30);
  int64_t strip[2] = {100, 20}, tile[2] = {50, 10}, other[2] = {30, 60};
  cr_assert_eq(tl_transform_kind(2, shape, strip, tile), TL_T_RECHUNK);
  cr_assert_eq(tl_transform_kind(2, shape, tile, strip), TL_T_REPART);
  cr_assert_eq(tl_transform_kind(2, shape, strip, strip), TL_T_IDENTITY);
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

/* Weights to recover, every one positive (a default may be 0). */
static void s_truth(tl_weights *w) {
  static const double d[TL_NCOST] = {1e-11, 8e-10, 6e-11, 8.5e-10, 2.5e-9, 5.5e-4, 7e-5, 2e-9, 6e-4};
  memcpy(w->w, d, sizeof d);
  w->fitted = 0;
}

Test(cost, fit_recovers_known_weights_from_noisy_runs) {
  uint64_t rs = 17;
  tl_weights truth, fit;
  s_truth(&truth);
  for (int k = 0; k < TL_NCOST; k++) truth.w[k] *= 0.5 + s_unif(&rs);
  tl_weights_default(&fit); /* the prior: up to 40 times off the truth */
  enum { N = 150 };
  tl_cost c[N];
  double t[N];
  /* amounts of the size a probe run has, each varying over two decades */
  const double scale[TL_NCOST] = {1e10, 1e8, 1e9, 1e8, 1e7, 1e3, 1e3, 1e8, 100};
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < TL_NCOST; k++) c[i].c[k] = scale[k] * pow(10, 2 * s_unif(&rs) - 1);
    t[i] = tl_seconds(&truth, &c[i]) * (1 + 0.02 * (2 * s_unif(&rs) - 1));
  }
  tr_err err;
  cr_assert_eq(tl_weights_fit(N, c, t, &fit, NULL, &err), TR_OK, "%s", err.msg);
  for (int k = 0; k < TL_NCOST; k++)
    cr_assert(fabs(fit.w[k] / truth.w[k] - 1) < 0.05, "%s: fitted %g, true %g", tl_cost_name(k),
              fit.w[k], truth.w[k]);
  for (int i = 0; i < N; i++) t[i] = tl_seconds(&truth, &c[i]); /* exact without noise */
  cr_assert_eq(tl_weights_fit(N, c, t, &fit, NULL, &err), TR_OK);
  for (int k = 0; k < TL_NCOST; k++) cr_assert(fabs(fit.w[k] / truth.w[k] - 1) < 1e-9);
}

/* Noisy runs (each off by up to 40%) that hardly tell two components
** apart (an output's replica floats sent and its bytes written, nearly in
** step, as on 4 local workers): the weights in force hold both within 3x
** of where they were.  The plain fit, without them (which the fit reports,
** and which a prior of zeros gives), put one of the two at 0 or more than
** 3x off in every one of these 24 sets of runs. */
Test(cost, weights_the_runs_hardly_tell_apart_stay_near_their_prior) {
  const double scale[TL_NCOST] = {1e10, 1e8, 1e9, 1e8, 1e7, 1e3, 1e3, 1e8, 100};
  tl_weights truth;
  s_truth(&truth);
  for (uint64_t seed = 1; seed <= 24; seed++) {
    uint64_t rs = seed;
    enum { N = 20 };
    tl_cost c[N];
    double t[N];
    for (int i = 0; i < N; i++) {
      for (int k = 0; k < TL_NCOST; k++) c[i].c[k] = scale[k] * pow(10, 2 * s_unif(&rs) - 1);
      c[i].c[TL_C_WRITE] = 4 * c[i].c[TL_C_NET] * (1 + 0.3 * s_unif(&rs));
      t[i] = tl_seconds(&truth, &c[i]) * (1 + 0.4 * (2 * s_unif(&rs) - 1));
    }
    tl_weights w = truth, none;
    memset(&none, 0, sizeof none);
    tl_fit_info fit;
    tr_err err;
    cr_assert_eq(tl_weights_fit(N, c, t, &w, &fit, &err), TR_OK, "%s", err.msg);
    int off = 0;
    for (int k = 0; k < TL_NCOST; k++)
      if (k == TL_C_NET || k == TL_C_WRITE) {
        cr_assert(w.w[k] > truth.w[k] / 3 && w.w[k] < truth.w[k] * 3,
                  "seed %d: %s fitted %g, in force %g", (int)seed, tl_cost_name(k), w.w[k],
                  truth.w[k]);
        off |= !(fit.plain[k] > truth.w[k] / 3 && fit.plain[k] < truth.w[k] * 3);
      }
    cr_assert(off, "seed %d: the plain fit held both", (int)seed);
    /* what the fit reports as plain is the fit a prior of zeros (none) gives */
    cr_assert_eq(tl_weights_fit(N, c, t, &none, NULL, &err), TR_OK, "%s", err.msg);
    for (int k = 0; k < TL_NCOST; k++)
      cr_assert(fabs(fit.plain[k] - none.w[k]) <= 1e-9 * fmax(fabs(none.w[k]), 1e-30),
                "seed %d: %s plain %g, without a prior %g", (int)seed, tl_cost_name(k),
                fit.plain[k], none.w[k]);
  }
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
  cr_assert_eq(tl_weights_fit(TL_NCOST - 1, c, t, &w, NULL, &err), TR_EINVAL); /* too few runs */
  for (int i = 0; i < N; i++) c[i].c[TL_C_TASKS] = 0; /* nothing exercises tasks */
  before = w;
  cr_assert_eq(tl_weights_fit(N, c, t, &w, NULL, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "'tasks'"), "%s", err.msg);
  cr_assert_eq(memcmp(&w, &before, sizeof w), 0, "weights changed on an error");
  for (int i = 0; i < N; i++) c[i].c[TL_C_TASKS] = 1 + s_unif(&rs);
  t[0] = 0; /* a run that took no time */
  cr_assert_eq(tl_weights_fit(N, c, t, &w, NULL, &err), TR_EINVAL);
}

/* A component in step with one before it (on two workers holding every
** chunk, an output's writes and its replicas' floats sent) keeps the
** weight it had, says so, and the others fit the runs with it. */
Test(cost, a_component_in_step_keeps_its_weight) {
  uint64_t rs = 6;
  enum { N = 30 };
  tl_cost c[N];
  double t[N];
  tl_weights truth, w;
  s_truth(&truth);
  const double scale[TL_NCOST] = {1e10, 1e8, 1e9, 1e8, 1e7, 1e3, 1e3, 1e8, 100};
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < TL_NCOST; k++) c[i].c[k] = scale[k] * pow(10, 2 * s_unif(&rs) - 1);
    c[i].c[TL_C_WRITE] = 4 * c[i].c[TL_C_NET] * (1 + 1e-9 * s_unif(&rs)); /* all but in step */
    t[i] = tl_seconds(&truth, &c[i]);
  }
  tr_err err;
  tl_fit_info fit;
  for (int pass = 0; pass < 2; pass++) {
    /* the weight it had: the true one, then half of it */
    w = truth;
    w.w[TL_C_WRITE] = truth.w[TL_C_WRITE] / (1 + pass);
    double had = w.w[TL_C_WRITE];
    cr_assert_eq(tl_weights_fit(N, c, t, &w, &fit, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(fit.kept, 1u << TL_C_WRITE, "kept %#x", fit.kept);
    cr_assert_eq(w.w[TL_C_WRITE], had);
    for (int k = 0; k < TL_NCOST; k++)
      if (k != TL_C_NET && k != TL_C_WRITE)
        cr_assert(fabs(w.w[k] / truth.w[k] - 1) < 1e-6, "%s: fitted %g, true %g",
                  tl_cost_name(k), w.w[k], truth.w[k]);
    /* net takes up what write's kept weight leaves: the runs are fitted */
    for (int i = 0; i < N; i++)
      cr_assert(fabs(tl_seconds(&w, &c[i]) / t[i] - 1) < 1e-6, "run %d", i);
  }
}

Test(cost, weights_stay_non_negative) {
  uint64_t rs = 5;
  enum { N = 40 };
  tl_cost c[N];
  double t[N];
  tl_weights truth, w;
  s_truth(&truth);
  for (int i = 0; i < N; i++) { /* runs whose times fall as they write more */
    for (int k = 0; k < TL_NCOST; k++) c[i].c[k] = (1 + s_unif(&rs)) / truth.w[k];
    t[i] = tl_seconds(&truth, &c[i]) - 2 * truth.w[TL_C_WRITE] * c[i].c[TL_C_WRITE];
  }
  tr_err err;
  cr_assert_eq(tl_weights_fit(N, c, t, &w, NULL, &err), TR_OK, "%s", err.msg);
  cr_assert(w.fitted);
  for (int k = 0; k < TL_NCOST; k++) cr_assert_geq(w.w[k], 0, "%s", tl_cost_name(k));
  cr_assert_eq(w.w[TL_C_WRITE], 0, "the write weight an unconstrained fit makes negative");
}

Test(cost, weights_as_text_and_back) {
  tl_weights w, x;
  tl_weights_default(&w);
  w.w[TL_C_NET] = 1.5e-9;
  char buf[512];
  tl_weights_text(&w, buf, sizeof buf);
  cr_assert(strstr(buf, "net=1.5e-09"), "%s", buf);
  tl_weights_default(&x);
  tr_err err;
  cr_assert_eq(tl_weights_parse(buf, &x, &err), TR_OK, "%s", err.msg);
  for (int k = 0; k < TL_NCOST; k++) cr_assert(s_close(x.w[k], w.w[k]));
  cr_assert_eq(tl_weights_parse("gemm=1 nosuch=2", &x, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "nosuch"), "%s", err.msg);
  cr_assert_eq(tl_weights_parse("gemm=-1", &x, &err), TR_EINVAL);
  cr_assert_eq(tl_weights_parse("gemm=1", &x, &err), TR_EINVAL); /* the others missing */
  cr_assert(s_close(x.w[TL_C_NET], w.w[TL_C_NET]), "a failed parse changes nothing");
}

/* A catalog calibrated before 'chunks' was a component keeps its fitted
** weights, and 'chunks' its default: not "damaged, run CALIBRATE". */
Test(cost, weights_kept_before_chunks_and_packing_were_counted_still_load) {
  tl_weights x, d;
  tl_weights_default(&d);
  tl_weights_default(&x);
  tr_err err;
  const char *old =
      "gemm=1e-11 contract=5e-11 elemwise=3e-10 net=6e-10 tasks=2e-05 write=0 phases=0.0005";
  cr_assert_eq(tl_weights_parse(old, &x, &err), TR_OK, "%s", err.msg);
  cr_assert(s_close(x.w[TL_C_TASKS], 2e-5));
  cr_assert(s_close(x.w[TL_C_PHASES], 5e-4));
  cr_assert(s_close(x.w[TL_C_CHUNKS], d.w[TL_C_CHUNKS]), "chunks=%g", x.w[TL_C_CHUNKS]);
  cr_assert_gt(x.w[TL_C_CHUNKS], 0);
  cr_assert(s_close(x.w[TL_C_PACK], d.w[TL_C_PACK]), "pack=%g", x.w[TL_C_PACK]);
  /* kept after chunks were counted, before packing was */
  const char *mid = "gemm=1e-11 contract=5e-11 elemwise=3e-10 net=6e-10 tasks=2e-05 "
                    "chunks=6e-05 write=0 phases=0.0005";
  cr_assert_eq(tl_weights_parse(mid, &x, &err), TR_OK, "%s", err.msg);
  cr_assert(s_close(x.w[TL_C_CHUNKS], 6e-5));
  cr_assert(s_close(x.w[TL_C_PACK], d.w[TL_C_PACK]), "pack=%g", x.w[TL_C_PACK]);
  /* but not one of the components those catalogs had */
  cr_assert_eq(tl_weights_parse("gemm=1e-11 contract=5e-11 elemwise=3e-10 net=6e-10 write=0 "
                                "phases=0.0005",
                                &x, &err),
               TR_EINVAL);
  cr_assert(strstr(err.msg, "tasks"), "%s", err.msg);
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
