/*
** layout/order.c - the order of pairwise contractions for a product of
** three or more operands inside one aggregation, such as
** D[i,l] = A[i,j] * B[j,k] * C[k,l].
**
** The cost of an order is opt_einsum's: a step that joins tensors with
** label sets Ta and Tb sees Ta | Tb and costs the product of those sizes,
** twice that when it sums a label out (a multiply and an add per term).
** A label is summed out by the first step after which no remaining
** tensor and not the output needs it, so the result of a step is fixed by
** the set S of operands it covers: it keeps L(S) & (L(rest) | out), where
** L is the union of labels.  Hence the exact search is a DP over operand
** subsets (opt_einsum's 'dp' without its heuristics, which finds the same
** optimum as its exhaustive 'optimal'):
**
**   cost(S) = min over splits S = A + B of cost(A) + cost(B) + step(A, B)
**
** in O(3^n), which is instant up to about a dozen operands.  Beyond
** dp_max operands it runs opt_einsum's greedy: among the pairs that share a
** label, join the one that removes the most memory (result size minus the
** sizes of the two it replaces), fewer flops breaking ties; outer products
** only when no connected pair is left.  Greedy can lose to the order the
** statement was written in, so that order is costed too and kept when it
** is cheaper: the engine would otherwise have run it.
**
** Limits: a step is one kernel task, which takes at most TK_MAX_LABELS
** labels, and a caller that stores intermediates as tensors bounds their
** rank (TR_MAX_RANK in tradb's catalog).  The DP skips splits beyond
** either, so it finds a valid order whenever one exists; greedy backtracks
** from a dead end to its next best pair, within a budget.
*/
#include "config.h"
#include "layout/layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_DP_CAP 16            /* the DP's memory is 2^n entries */
#define S_GREEDY_BUDGET 200000 /* partial orders greedy may visit */

/* Product of the sizes of the labels in m. */
static double s_prod(const tl_einsum *e, uint64_t m) {
  double p = 1;
  for (; m; m &= m - 1) p *= (double)e->size[__builtin_ctzll(m)];
  return p;
}

static uint64_t s_mask(const int *labels, int n) {
  uint64_t m = 0;
  for (int k = 0; k < n; k++) m |= 1ull << labels[k];
  return m;
}

/* The effective limits of opts. */
static void s_limits(const tl_order_opts *o, int *join, int *keep, int *dp) {
  *join = o && o->max_join > 0 ? o->max_join : TK_MAX_LABELS;
  *keep = o && o->max_keep > 0 ? o->max_keep : TL_MAX_LABELS;
  *dp = o && o->dp_max > 0 ? o->dp_max : TL_ORDER_DP_MAX;
  if (*dp > S_DP_CAP) *dp = S_DP_CAP;
}

/* flops of a step that sees `join` and keeps `keep`. */
static double s_flops(const tl_einsum *e, uint64_t join, uint64_t keep) {
  return s_prod(e, join) * ((join & ~keep) ? 2.0 : 1.0);
}

int tl_order_eval(const tl_einsum *e, const int (*pair)[2], tl_order *out, tr_err *err) {
  int n = e->nin;
  uint64_t mask[2 * TL_MAX_OPERANDS];
  char alive[2 * TL_MAX_OPERANDS] = {0};
  uint64_t outm = s_mask(e->out, e->nout);
  memset(out, 0, sizeof *out);
  for (int j = 0; j < n; j++) {
    mask[j] = s_mask(e->in[j], e->rank[j]);
    alive[j] = 1;
  }
  out->nsteps = n - 1;
  for (int k = 0; k < n - 1; k++) {
    int a = pair[k][0], b = pair[k][1];
    if (a > b) { int t = a; a = b; b = t; }
    if (a < 0 || b >= n + k || a == b || !alive[a] || !alive[b])
      return tr_seterr(err, TR_EINVAL, "step %d joins tensors %d and %d, not two of those left", k,
                       pair[k][0], pair[k][1]);
    uint64_t rest = outm;
    for (int j = 0; j < n + k; j++)
      if (alive[j] && j != a && j != b) rest |= mask[j];
    tl_step *s = &out->step[k];
    s->a = a;
    s->b = b;
    s->join = mask[a] | mask[b];
    s->keep = s->join & rest;
    s->flops = s_flops(e, s->join, s->keep);
    s->size = s_prod(e, s->keep);
    out->flops += s->flops;
    if (s->size > out->max_size) out->max_size = s->size;
    alive[a] = alive[b] = 0;
    alive[n + k] = 1;
    mask[n + k] = s->keep;
  }
  return TR_OK;
}

int tl_order_fits(const tl_order *o, const tl_order_opts *opts) {
  int mj, mk, dp;
  s_limits(opts, &mj, &mk, &dp);
  for (int k = 0; k < o->nsteps; k++) {
    if (__builtin_popcountll(o->step[k].join) > mj) return 0;
    if (k < o->nsteps - 1 && __builtin_popcountll(o->step[k].keep) > mk) return 0;
  }
  return 1;
}

/* ---- Exact: DP over operand subsets ------------------------------------ */

typedef struct s_dp {
  const tl_einsum *e;
  int n;
  double *cost;    /* per subset: least flops to contract it, INFINITY: none */
  uint32_t *split; /* per subset: the part A of its best split */
  int nsteps;      /* steps emitted by s_emit so far */
  int (*pair)[2];  /* the order being emitted */
} s_dp;

/* Emit the steps of subset S, children first; returns its tensor number. */
static int s_emit(s_dp *d, uint32_t S) {
  if (!(S & (S - 1))) return __builtin_ctz(S);
  int a = s_emit(d, d->split[S]);
  int b = s_emit(d, S ^ d->split[S]);
  d->pair[d->nsteps][0] = a;
  d->pair[d->nsteps][1] = b;
  return d->n + d->nsteps++;
}

static int s_order_dp(const tl_einsum *e, int mj, int mk, int (*pair)[2], tr_err *err) {
  int n = e->nin, rc = TR_OK;
  uint32_t full = (1u << n) - 1;
  uint64_t in[TL_MAX_OPERANDS], outm = s_mask(e->out, e->nout);
  for (int j = 0; j < n; j++) in[j] = s_mask(e->in[j], e->rank[j]);
  s_dp d = {e, n, malloc(sizeof(double) << n), malloc(sizeof(uint32_t) << n), 0, pair};
  uint64_t *lab = malloc(sizeof(uint64_t) << n); /* union of labels per subset */
  uint64_t *ten = malloc(sizeof(uint64_t) << n); /* labels of its result */
  if (!d.cost || !d.split || !lab || !ten) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory ordering %d operands", n);
    goto done;
  }
  lab[0] = 0;
  for (uint32_t S = 1; S <= full; S++) lab[S] = lab[S & (S - 1)] | in[__builtin_ctz(S)];
  for (uint32_t S = 1; S <= full; S++) {
    d.cost[S] = INFINITY;
    if (!(S & (S - 1))) { /* one operand: itself, nothing to pay */
      d.cost[S] = 0;
      ten[S] = lab[S];
      continue;
    }
    ten[S] = lab[S] & (lab[full ^ S] | outm);
    if (S != full && __builtin_popcountll(ten[S]) > mk) continue;
    uint32_t low = S & -S;
    for (uint32_t A = (S - 1) & S; A; A = (A - 1) & S) {
      if (!(A & low)) continue; /* each split once: A holds S's lowest operand */
      uint32_t B = S ^ A;
      if (isinf(d.cost[A]) || isinf(d.cost[B])) continue;
      uint64_t join = ten[A] | ten[B];
      if (__builtin_popcountll(join) > mj) continue;
      double c = d.cost[A] + d.cost[B] + s_flops(e, join, ten[S]);
      if (c < d.cost[S]) {
        d.cost[S] = c;
        d.split[S] = A;
      }
    }
  }
  if (isinf(d.cost[full]))
    rc = tr_seterr(err, TR_ESHAPE,
                   "no pairwise order of these %d operands keeps every step within %d labels and "
                   "every intermediate within %d",
                   n, mj, mk);
  else
    s_emit(&d, full);
done:
  free(d.cost);
  free(d.split);
  free(lab);
  free(ten);
  return rc;
}

/* ---- Greedy, with backtracking from dead ends ----------------------------- */

typedef struct s_cand {
  int i, j;        /* positions in the list of tensors left */
  int connected;   /* they share a label */
  double key;      /* connected: memory removed; else: result size */
  double flops;    /* tie-break */
} s_cand;

typedef struct s_greedy {
  const tl_einsum *e;
  int mj, mk;
  uint64_t outm;
  int nleft;                      /* tensors left */
  int id[TL_MAX_OPERANDS];        /* their numbers */
  uint64_t mask[TL_MAX_OPERANDS]; /* their labels */
  int nsteps;                     /* steps taken */
  int (*pair)[2];                 /* them */
  long budget;                    /* partial orders still allowed */
} s_greedy;

static int s_cand_cmp(const void *x, const void *y) {
  const s_cand *a = x, *b = y;
  if (a->connected != b->connected) return b->connected - a->connected;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  if (a->flops != b->flops) return a->flops < b->flops ? -1 : 1;
  if (a->i != b->i) return a->i - b->i;
  return a->j - b->j;
}

/* Depth first in greedy's order of preference: the first complete order
** found is plain greedy's unless it ran into a dead end. */
static int s_greedy_run(s_greedy *g) {
  if (g->nleft == 1) return 1;
  if (--g->budget < 0) return 0;
  const tl_einsum *e = g->e;
  int last = g->nleft == 2, nc = 0;
  s_cand *c = malloc(sizeof *c * (size_t)(g->nleft * (g->nleft - 1) / 2));
  if (!c) return 0;
  for (int i = 0; i < g->nleft; i++)
    for (int j = i + 1; j < g->nleft; j++) {
      uint64_t rest = g->outm;
      for (int k = 0; k < g->nleft; k++)
        if (k != i && k != j) rest |= g->mask[k];
      uint64_t join = g->mask[i] | g->mask[j], keep = join & rest;
      if (__builtin_popcountll(join) > g->mj) continue;
      if (!last && __builtin_popcountll(keep) > g->mk) continue;
      s_cand *x = &c[nc++];
      x->i = i;
      x->j = j;
      x->connected = (g->mask[i] & g->mask[j]) != 0;
      x->key = x->connected ? s_prod(e, keep) - s_prod(e, g->mask[i]) - s_prod(e, g->mask[j])
                            : s_prod(e, keep);
      x->flops = s_flops(e, join, keep);
    }
  qsort(c, (size_t)nc, sizeof *c, s_cand_cmp);
  int ok = 0;
  for (int t = 0; t < nc && !ok && g->budget >= 0; t++) {
    int i = c[t].i, j = c[t].j;
    /* take the pair: the result replaces i, the last tensor moves to j */
    int id_i = g->id[i], id_j = g->id[j];
    uint64_t m_i = g->mask[i], m_j = g->mask[j], rest = g->outm;
    for (int k = 0; k < g->nleft; k++)
      if (k != i && k != j) rest |= g->mask[k];
    g->pair[g->nsteps][0] = id_i;
    g->pair[g->nsteps][1] = id_j;
    g->id[i] = e->nin + g->nsteps++;
    g->mask[i] = (m_i | m_j) & rest;
    g->nleft--;
    g->id[j] = g->id[g->nleft];
    g->mask[j] = g->mask[g->nleft];
    ok = s_greedy_run(g);
    if (!ok) { /* undo */
      g->id[g->nleft] = g->id[j];
      g->mask[g->nleft] = g->mask[j];
      g->nleft++;
      g->id[i] = id_i;
      g->mask[i] = m_i;
      g->id[j] = id_j;
      g->mask[j] = m_j;
      g->nsteps--;
    }
  }
  free(c);
  return ok;
}

static int s_order_greedy(const tl_einsum *e, int mj, int mk, int (*pair)[2], tr_err *err) {
  s_greedy g = {.e = e, .mj = mj, .mk = mk, .outm = s_mask(e->out, e->nout), .nleft = e->nin,
                .pair = pair, .budget = S_GREEDY_BUDGET};
  for (int j = 0; j < e->nin; j++) {
    g.id[j] = j;
    g.mask[j] = s_mask(e->in[j], e->rank[j]);
  }
  if (s_greedy_run(&g)) return TR_OK;
  return tr_seterr(err, TR_ESHAPE,
                   "greedy found no pairwise order of these %d operands that keeps every step "
                   "within %d labels and every intermediate within %d",
                   e->nin, mj, mk);
}

int tl_order_find(const tl_einsum *e, const tl_order_opts *opts, tl_order *out, tr_err *err) {
  int rc = tl_einsum_check(e, err);
  if (rc) return rc;
  if (e->nin < 2) return tr_seterr(err, TR_EINVAL, "%d operand(s): nothing to order", e->nin);
  int mj, mk, dp, pair[TL_MAX_OPERANDS - 1][2];
  s_limits(opts, &mj, &mk, &dp);
  int exact = e->nin <= dp;
  rc = exact ? s_order_dp(e, mj, mk, pair, err) : s_order_greedy(e, mj, mk, pair, err);
  if (rc) return rc;
  rc = tl_order_eval(e, (const int(*)[2])pair, out, err);
  if (rc) return rc;
  out->exact = exact;
  if (!exact) { /* the written order, when it is cheaper and fits */
    tl_order lr;
    for (int k = 0; k < e->nin - 1; k++) {
      pair[k][0] = k == 0 ? 0 : e->nin + k - 1;
      pair[k][1] = k + 1;
    }
    if (!tl_order_eval(e, (const int(*)[2])pair, &lr, NULL) && tl_order_fits(&lr, opts) &&
        lr.flops < out->flops)
      *out = lr;
  }
  return TR_OK;
}
