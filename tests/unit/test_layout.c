/*
** tests/unit/test_layout.c - layout/: contraction orders against brute
** force over every pairwise order.
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

