/*
** layout/decomp.c - EinDecomp (Bourgeois et al., sections 6-8): a
** partition vector for every EinSum of a graph, chosen by a dynamic
** program over the graph so that the floats moved are fewest while every
** EinSum is cut into p pieces of work.
**
** Partition vectors (section 6).  d has one entry per label of the join, a
** power of two; labels shared by operands are one entry, so shared labels
** are co-partitioned.  The join then has prod(d) tuples, one kernel call
** each, and d is chosen with prod(d) = p (p = sites x threads, rounded up
** to a power of two).  An entry cannot exceed its label's size; where the
** sizes cannot reach p, the largest product they allow is taken.  There
** are C(log2 p + u - 1, u - 1) vectors for u labels of large size
** (section 8.1: log2 p "balls" in u "buckets").
**
** Costs (section 7).  This copy of the paper lost its formulas; they are
** rebuilt here from its prose and its worked examples:
**
**  - into the join: the text says each of the p kernel calls receives one
**    sub-tensor of each operand, a sub-tensor of X having
**    n_X = prod(b_X / d_X) floats, so  J = prod(d) * sum_j n_j.
**
**  - into the aggregation: n_O = prod(b_O / d_O) floats per kernel result,
**    g = prod of d over the aggregated labels results per group, p / g
**    groups, and per group (g - 1) * n_O moved, because the site chosen to
**    aggregate already holds one of them ("if a processor that already
**    has such a tuple is chosen ... no transfer happens").  So
**    A = (p / g) * (g - 1) * n_O, which is (g - 1) * |O|; with g = 1 (no
**    aggregated label split) it is 0, as the text's top-left example says.
**
**  - repartition (Figure 4): a producer of 8 sub-tensors of 8 floats
**    (an 8 x 8 matrix cut into 8 x 1 columns) feeds a consumer reading
**    4 x 4 tiles of 16 floats.  The text: each producer sub-tensor goes to
**    two places (its top and bottom halves are used in different tiles):
**    8 * 8 * 2 = 128; each consumer sub-tensor, after taking its first
**    piece, moves to three more places to collect the other three:
**    4 * 16 * 3 = 192; total 320.  With P floats per producer piece, C per
**    consumer piece, O = prod(min(b/d_P, b/d_C)) floats that one producer
**    piece gives one consumer piece, and N floats in all (P = 8, C = 16,
**    O = 4, N = 64 here), that is
**        R = N * (C / O - 1)  +  [P > O] * N * P / O
**    (N/C consumer pieces, each moved C/O - 1 times, C floats a move; N/P
**    producer pieces, each sent to the P/O places that extract a part of
**    it, the "additional transfer ... if the entire producer sub-tensor
**    is not used").  192 + 128 = 320, and equal partitionings cost 0.
**
** Dynamic program (8.2-8.3).  Vertices in topological order; the table
** maps (vertex, partitioning of its output) to the least cost of the
** subgraph up to it.  For each d of v: J(d) + A(d) plus, per operand from a
** non-source producer u, min over u's entries of cost(u, d_u) +
** R(d_u -> the partitioning d gives that operand).  Sources cost nothing
** in any partitioning.  Back-tracking from the cheapest entry of each sink
** labels the graph.  An operand read twice from one producer (X * X) is
** costed jointly against that producer's entries, so the DP stays exact as
** long as no non-source vertex is read by two vertices.
**
** DAGs (8.4).  When a non-source vertex has two consumers the table cannot
** describe the subgraph, and the paper linearises: take the longest path
** (most vertices) of vertices not yet labelled, run the DP along it only
** (inputs from off the path cost nothing, neither their subgraph nor their
** repartition), back-track from the cheapest entry of its last vertex,
** label the path, repeat with the next longest.  Repartitions across
** paths are ignored by the search; the plan's reported cost counts them.
*/
#include "config.h"
#include "layout/layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_LOG2P 15         /* exponents are packed 4 bits per label */
#define S_MAX_VECTORS (1 << 20) /* partition vectors one vertex may enumerate */

/* A partitioning as exponents of two, 4 bits per label (or dimension). */
typedef uint64_t s_key;

static int s_get(s_key k, int i) { return (int)((k >> (4 * i)) & 15); }
static s_key s_put(s_key k, int i, int x) {
  return (k & ~(15ull << (4 * i))) | ((uint64_t)x << (4 * i));
}

/* Nibble mask of the labels in bit mask m. */
static s_key s_nibbles(uint64_t m) {
  s_key k = 0;
  for (; m; m &= m - 1) k |= 15ull << (4 * __builtin_ctzll(m));
  return k;
}

static int s_floor_log2(int64_t x) { return 63 - __builtin_clzll((uint64_t)x); }

/* ---- Section 7's formulas ------------------------------------------------- */

void tl_decomp_vertex(const tl_einsum *e, const int *d, double *join, double *agg) {
  double tuples = 1, pieces = 0, g = 1, nout = 1;
  uint64_t outm = 0;
  for (int k = 0; k < e->nout; k++) {
    outm |= 1ull << e->out[k];
    nout *= (double)e->size[e->out[k]];
  }
  for (int l = 0; l < e->nlabels; l++) {
    tuples *= d[l];
    if (!(outm & (1ull << l))) g *= d[l];
  }
  for (int j = 0; j < e->nin; j++) {
    double n = 1;
    for (int k = 0; k < e->rank[j]; k++) n *= (double)e->size[e->in[j][k]] / d[e->in[j][k]];
    pieces += n;
  }
  *join = tuples * pieces;
  *agg = (g - 1) * nout;
}

double tl_decomp_repart(int rank, const int64_t *shape, const int *from, const int *to) {
  double N = 1, P = 1, C = 1, O = 1;
  for (int k = 0; k < rank; k++) {
    double b = (double)shape[k];
    N *= b;
    P *= b / from[k];
    C *= b / to[k];
    O *= b / (from[k] > to[k] ? from[k] : to[k]);
  }
  return N * (C / O - 1) + (P > O ? N * P / O : 0);
}

/* Pieces per dimension of operand j of e under label exponents k. */
static void s_operand_parts(const tl_einsum *e, int j, s_key k, int *parts) {
  for (int x = 0; x < e->rank[j]; x++) parts[x] = 1 << s_get(k, e->in[j][x]);
}

/* Shape of e's output. */
static void s_out_shape(const tl_einsum *e, int64_t *shape) {
  for (int x = 0; x < e->nout; x++) shape[x] = e->size[e->out[x]];
}

/* Labels of operand j of e, a bit each. */
static uint64_t s_mask_operand(const tl_einsum *e, int j) {
  uint64_t m = 0;
  for (int k = 0; k < e->rank[j]; k++) m |= 1ull << e->in[j][k];
  return m;
}


/* Vertex v's share of the graph's cost: its join and aggregation and the
** repartitions into its operands from non-source producers. */
static double s_vertex_cost(const tl_graph *g, const tl_dpart *d, int v) {
  const tl_einsum *e = &g->v[v].e;
  double j, a;
  tl_decomp_vertex(e, d[v].d, &j, &a);
  double total = j + a;
  for (int o = 0; o < e->nin; o++) {
    int u = g->v[v].src[o];
    const tl_einsum *pe = &g->v[u].e;
    if (!pe->nin) continue;
    int from[TR_MAX_RANK], to[TR_MAX_RANK];
    int64_t shape[TR_MAX_RANK];
    for (int k = 0; k < pe->nout; k++) {
      from[k] = d[u].d[pe->out[k]];
      to[k] = d[v].d[e->in[o][k]];
    }
    s_out_shape(pe, shape);
    total += tl_decomp_repart(pe->nout, shape, from, to);
  }
  return total;
}

double tl_decomp_cost(const tl_graph *g, const tl_dpart *d) {
  double total = 0;
  for (int v = 0; v < g->n; v++)
    if (g->v[v].e.nin) total += s_vertex_cost(g, d, v);
  return total;
}

/* ---- Enumerating partition vectors ---------------------------------------- */

/* Largest exponent per label and the total the vector reaches. */
static int s_caps(const tl_einsum *e, int P, int *cap) {
  int sum = 0;
  for (int l = 0; l < e->nlabels; l++) {
    cap[l] = s_floor_log2(e->size[l]);
    if (cap[l] > P) cap[l] = P;
    sum += cap[l];
  }
  return sum < P ? sum : P;
}

typedef struct s_keys {
  int n, cap;
  s_key *k;
} s_keys;

static int s_keys_add(s_keys *a, s_key k) {
  if (a->n == a->cap) {
    int nc = a->cap ? a->cap * 2 : 64;
    s_key *nk = realloc(a->k, sizeof *nk * (size_t)nc);
    if (!nk) return TR_ENOMEM;
    a->k = nk;
    a->cap = nc;
  }
  a->k[a->n++] = k;
  return TR_OK;
}

/* All vectors with exponents summing to `left` over labels l.., within cap,
** those cutting label l most first.  Candidates that cost the same go to
** the first, so a result is cut on its leading dimensions, where a
** row-major chunk is one slab and where the next statement of a chain
** usually keeps its cut: `T[i,k] = A[i,j] * B[j,k]` in row halves lets
** `O[i,l] = T[i,k] * C[k,l]` run where T is, where column halves made it
** sum partials across the workers. */
static int s_enum(int l, int nl, int left, const int *cap, s_key k, s_keys *out) {
  if (l == nl) return left ? TR_OK : s_keys_add(out, k);
  int hi = left < cap[l] ? left : cap[l];
  for (int x = hi; x >= 0; x--) {
    int rc = s_enum(l + 1, nl, left - x, cap, s_put(k, l, x), out);
    if (rc) return rc;
  }
  return TR_OK;
}

static int s_log2p(int p) {
  int P = 0;
  while ((1 << P) < p && P <= S_MAX_LOG2P) P++;
  return P;
}

int64_t tl_decomp_count(const tl_einsum *e, int p) {
  int cap[TL_MAX_LABELS], P = s_log2p(p < 1 ? 1 : p);
  if (P > S_MAX_LOG2P || e->nlabels > TK_MAX_LABELS) return 0;
  int S = s_caps(e, P, cap);
  int64_t ways[S_MAX_LOG2P + 1] = {1}; /* ways[s]: vectors of the labels so far summing to s */
  for (int l = 0; l < e->nlabels; l++) {
    int64_t nw[S_MAX_LOG2P + 1] = {0};
    for (int s = 0; s <= S; s++)
      for (int x = 0; x <= cap[l] && s + x <= S; x++) nw[s + x] += ways[s];
    memcpy(ways, nw, sizeof ways);
  }
  return ways[S];
}

int tl_decomp_vectors(const tl_einsum *e, int p, int **out, int *n, tr_err *err) {
  int cap[TL_MAX_LABELS], P = s_log2p(p < 1 ? 1 : p), rc;
  s_keys ks = {0};
  *out = NULL;
  *n = 0;
  if (P > S_MAX_LOG2P || e->nlabels > TK_MAX_LABELS)
    return tr_seterr(err, TR_EINVAL, "%d pieces over %d labels: at most %d pieces, %d labels", p,
                     e->nlabels, 1 << S_MAX_LOG2P, TK_MAX_LABELS);
  if (tl_decomp_count(e, 1 << P) > S_MAX_VECTORS)
    return tr_seterr(err, TR_EINVAL, "more than %d partition vectors for %d pieces", S_MAX_VECTORS,
                     1 << P);
  if ((rc = s_enum(0, e->nlabels, s_caps(e, P, cap), cap, 0, &ks)))
    return tr_seterr(err, rc, "out of memory enumerating partition vectors");
  int *v = malloc(sizeof *v * (size_t)(ks.n * (e->nlabels ? e->nlabels : 1) + 1));
  if (!v) {
    free(ks.k);
    return tr_seterr(err, TR_ENOMEM, "out of memory enumerating partition vectors");
  }
  for (int i = 0; i < ks.n; i++)
    for (int l = 0; l < e->nlabels; l++) v[i * e->nlabels + l] = 1 << s_get(ks.k[i], l);
  *out = v;
  *n = ks.n;
  free(ks.k);
  return TR_OK;
}

/* ---- The dynamic program -------------------------------------------------- */

/* One table entry: the least cost with this output partitioning. */
typedef struct s_entry {
  s_key out;   /* exponents per output dimension */
  s_key d;     /* the vector that reaches it */
  double cost; /* subgraph up to the vertex */
  int order;   /* enumeration order: ties go to the first */
} s_entry;

typedef struct s_table {
  int n;
  s_entry *e; /* sorted by out, one per out */
} s_table;

/* Which producers a vertex's table counts. */
enum { S_ALL = -2, S_NONE = -1 };

typedef struct s_ctx {
  const tl_graph *g;
  int P;           /* log2 of the pieces of work */
  s_table *t;      /* per vertex */
  int *only;       /* per vertex: S_ALL, S_NONE or the one producer counted */
  tl_dplan *plan;  /* being filled */
  tr_err *err;
} s_ctx;

static int s_counted(const s_ctx *c, int v, int u) {
  if (!c->g->v[u].e.nin) return 0; /* sources are free */
  return c->only[v] == S_ALL || c->only[v] == u;
}

/* Cost of producer u's entry x feeding every operand of v it produces,
** when v's labels take exponents dk. */
static double s_feed(const s_ctx *c, int v, int u, const s_entry *x, s_key dk) {
  const tl_vertex *vx = &c->g->v[v];
  const tl_einsum *pe = &c->g->v[u].e;
  int from[TR_MAX_RANK], to[TR_MAX_RANK];
  int64_t shape[TR_MAX_RANK];
  s_out_shape(pe, shape);
  for (int k = 0; k < pe->nout; k++) from[k] = 1 << s_get(x->out, k);
  double r = x->cost;
  for (int j = 0; j < vx->e.nin; j++) {
    if (vx->src[j] != u) continue;
    s_operand_parts(&vx->e, j, dk, to);
    r += tl_decomp_repart(pe->nout, shape, from, to);
  }
  return r;
}

/* The entry of u that feeds v best under dk (first on ties). */
static const s_entry *s_best_feed(const s_ctx *c, int v, int u, s_key dk, double *cost) {
  const s_table *t = &c->t[u];
  const s_entry *best = NULL;
  *cost = INFINITY;
  for (int i = 0; i < t->n; i++) {
    double x = s_feed(c, v, u, &t->e[i], dk);
    if (x < *cost) {
      *cost = x;
      best = &t->e[i];
    }
  }
  return best;
}

static int s_cmp_key(const void *a, const void *b) {
  s_key x = *(const s_key *)a, y = *(const s_key *)b;
  return x < y ? -1 : x > y;
}

static int s_cmp_entry(const void *a, const void *b) {
  const s_entry *x = a, *y = b;
  if (x->out != y->out) return x->out < y->out ? -1 : 1;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  return x->order - y->order;
}

/* Memo of one counted producer: its least feeding cost per restriction of
** v's vector to the labels of the operands it produces. */
typedef struct s_memo {
  int u;        /* the producer */
  s_key mask;   /* nibbles of those labels */
  s_keys keys;  /* restrictions seen, sorted */
  double *val;  /* least cost for each */
} s_memo;

/* Build v's table (c->only[v] says which producers count). */
static int s_vertex_table(s_ctx *c, int v) {
  const tl_vertex *vx = &c->g->v[v];
  const tl_einsum *e = &vx->e;
  int cap[TL_MAX_LABELS], rc = TR_OK, nm = 0;
  s_keys ds = {0};
  s_memo memo[TL_MAX_OPERANDS];
  s_entry *ent = NULL;
  memset(memo, 0, sizeof memo);
  rc = s_enum(0, e->nlabels, s_caps(e, c->P, cap), cap, 0, &ds);
  if (rc) goto done;
  for (int j = 0; j < e->nin; j++) {
    int u = vx->src[j], m = 0;
    if (!s_counted(c, v, u)) continue;
    while (m < nm && memo[m].u != u) m++;
    if (m == nm) memo[nm++].u = u;
    memo[m].mask |= s_nibbles(s_mask_operand(e, j));
  }
  for (int m = 0; m < nm; m++) {
    for (int i = 0; i < ds.n && !rc; i++) rc = s_keys_add(&memo[m].keys, ds.k[i] & memo[m].mask);
    if (rc) goto done;
    qsort(memo[m].keys.k, (size_t)memo[m].keys.n, sizeof(s_key), s_cmp_key);
    int w = 0;
    for (int i = 0; i < memo[m].keys.n; i++)
      if (!w || memo[m].keys.k[i] != memo[m].keys.k[w - 1]) memo[m].keys.k[w++] = memo[m].keys.k[i];
    memo[m].keys.n = w;
    memo[m].val = malloc(sizeof(double) * (size_t)(w ? w : 1));
    if (!memo[m].val) { rc = TR_ENOMEM; goto done; }
    for (int i = 0; i < w; i++) s_best_feed(c, v, memo[m].u, memo[m].keys.k[i], &memo[m].val[i]);
  }
  ent = malloc(sizeof *ent * (size_t)(ds.n ? ds.n : 1));
  if (!ent) { rc = TR_ENOMEM; goto done; }
  for (int i = 0; i < ds.n; i++) {
    int d[TL_MAX_LABELS];
    double jn, ag;
    for (int l = 0; l < e->nlabels; l++) d[l] = 1 << s_get(ds.k[i], l);
    tl_decomp_vertex(e, d, &jn, &ag);
    double cost = jn + ag;
    for (int m = 0; m < nm; m++) {
      s_key r = ds.k[i] & memo[m].mask;
      const s_key *hit = bsearch(&r, memo[m].keys.k, (size_t)memo[m].keys.n, sizeof r, s_cmp_key);
      cost += memo[m].val[hit - memo[m].keys.k];
    }
    s_key out = 0;
    for (int k = 0; k < e->nout; k++) out = s_put(out, k, s_get(ds.k[i], e->out[k]));
    ent[i] = (s_entry){out, ds.k[i], cost, i};
  }
  qsort(ent, (size_t)ds.n, sizeof *ent, s_cmp_entry);
  int w = 0;
  for (int i = 0; i < ds.n; i++)
    if (!w || ent[i].out != ent[w - 1].out) ent[w++] = ent[i];
  free(c->t[v].e);
  c->t[v].e = ent;
  c->t[v].n = w;
  ent = NULL;
done:
  if (rc) tr_seterr(c->err, rc, "out of memory partitioning vertex %d", v);
  free(ds.k);
  free(ent);
  for (int m = 0; m < nm; m++) {
    free(memo[m].keys.k);
    free(memo[m].val);
  }
  return rc;
}

/* Label v with vector dk and its counted producers with what fed it best. */
static void s_assign(s_ctx *c, int v, s_key dk) {
  const tl_vertex *vx = &c->g->v[v];
  tl_dpart *x = &c->plan->v[v];
  for (int l = 0; l < TK_MAX_LABELS; l++) x->d[l] = l < vx->e.nlabels ? 1 << s_get(dk, l) : 1;
  for (int j = 0; j < vx->e.nin; j++) {
    int u = vx->src[j], seen = 0;
    for (int i = 0; i < j; i++) seen |= vx->src[i] == u;
    if (seen || !s_counted(c, v, u)) continue;
    double cost;
    const s_entry *best = s_best_feed(c, v, u, dk, &cost);
    s_assign(c, u, best->d);
  }
}

/* The cheapest entry of v's table. */
static const s_entry *s_cheapest(const s_ctx *c, int v) {
  const s_entry *best = &c->t[v].e[0];
  for (int i = 1; i < c->t[v].n; i++)
    if (c->t[v].e[i].cost < best->cost) best = &c->t[v].e[i];
  return best;
}

/* 8.4: label the graph path by path; nread[v] counts v's readers. */
static int s_linearise(s_ctx *c, const int *nread, int **readers) {
  const tl_graph *g = c->g;
  int *len = calloc((size_t)g->n, sizeof *len), *path = malloc(sizeof *path * (size_t)g->n);
  char *done = calloc((size_t)g->n, 1);
  int rc = TR_OK, npath = 0;
  if (!len || !path || !done) {
    rc = tr_seterr(c->err, TR_ENOMEM, "out of memory linearising the graph");
    goto out;
  }
  for (int v = 0; v < g->n; v++) done[v] = !g->v[v].e.nin;
  for (;;) {
    int start = -1;
    for (int v = g->n - 1; v >= 0; v--) { /* longest path from v, in vertices */
      len[v] = 0;
      if (done[v]) continue;
      len[v] = 1;
      for (int i = 0; i < nread[v]; i++)
        if (!done[readers[v][i]] && len[readers[v][i]] + 1 > len[v]) len[v] = len[readers[v][i]] + 1;
    }
    for (int v = 0; v < g->n; v++)
      if (!done[v] && (start < 0 || len[v] > len[start])) start = v;
    if (start < 0) break;
    int n = 0;
    for (int v = start; v >= 0;) {
      path[n++] = v;
      int next = -1;
      for (int i = 0; i < nread[v]; i++) {
        int r = readers[v][i];
        if (!done[r] && len[r] == len[v] - 1 && (next < 0 || r < next)) next = r;
      }
      v = next;
    }
    npath++;
    for (int i = 0; i < n; i++) {
      c->only[path[i]] = i ? path[i - 1] : S_NONE;
      if ((rc = s_vertex_table(c, path[i]))) goto out;
    }
    s_assign(c, path[n - 1], s_cheapest(c, path[n - 1])->d);
    for (int i = 0; i < n; i++) {
      done[path[i]] = 1;
      c->plan->v[path[i]].path = npath;
    }
  }
out:
  free(len);
  free(path);
  free(done);
  return rc;
}

int tl_decomp(const tl_graph *g, int p, tl_dplan **out, tr_err *err) {
  *out = NULL;
  int rc = tl_graph_check(g, err);
  if (rc) return rc;
  int P = s_log2p(p < 1 ? 1 : p);
  if (P > S_MAX_LOG2P)
    return tr_seterr(err, TR_EINVAL, "%d pieces of work: at most %d", p, 1 << S_MAX_LOG2P);
  for (int v = 0; v < g->n; v++) {
    if (!g->v[v].e.nin) continue;
    if (g->v[v].e.nlabels > TK_MAX_LABELS)
      return tr_seterr(err, TR_EINVAL, "vertex %d has %d labels: a kernel takes at most %d", v,
                       g->v[v].e.nlabels, TK_MAX_LABELS);
    int64_t nvec = tl_decomp_count(&g->v[v].e, 1 << P);
    if (nvec > S_MAX_VECTORS)
      return tr_seterr(err, TR_EINVAL,
                       "vertex %d has %lld partition vectors for %d pieces: more than %d to search",
                       v, (long long)nvec, 1 << P, S_MAX_VECTORS);
  }
  s_ctx c = {g, P, calloc((size_t)g->n, sizeof(s_table)), calloc((size_t)g->n, sizeof(int)), NULL,
             err};
  int *nread = calloc((size_t)g->n, sizeof(int)), **readers = calloc((size_t)g->n, sizeof(int *));
  tl_dplan *plan = calloc(1, sizeof *plan);
  if (plan) plan->v = calloc((size_t)g->n, sizeof *plan->v);
  if (!c.t || !c.only || !nread || !readers || !plan || !plan->v) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory partitioning a graph of %d vertices", g->n);
    goto done;
  }
  c.plan = plan;
  plan->n = g->n;
  plan->p = 1 << P;
  /* readers of each vertex, once each however many operands they take */
  for (int v = 0; v < g->n; v++)
    for (int j = 0; j < g->v[v].e.nin; j++) {
      int u = g->v[v].src[j], seen = 0;
      for (int i = 0; i < j; i++) seen |= g->v[v].src[i] == u;
      if (seen) continue;
      int *r = realloc(readers[u], sizeof *r * (size_t)(nread[u] + 1));
      if (!r) {
        rc = tr_seterr(err, TR_ENOMEM, "out of memory partitioning a graph of %d vertices", g->n);
        goto done;
      }
      readers[u] = r;
      r[nread[u]++] = v;
    }
  for (int v = 0; v < g->n; v++) {
    for (int l = 0; l < TK_MAX_LABELS; l++) plan->v[v].d[l] = 1;
    if (g->v[v].e.nin && nread[v] > 1) plan->linearised = 1;
  }
  if (plan->linearised) {
    rc = s_linearise(&c, nread, readers);
  } else {
    for (int v = 0; v < g->n && !rc; v++) {
      c.only[v] = S_ALL;
      if (g->v[v].e.nin) rc = s_vertex_table(&c, v);
    }
    for (int v = 0; v < g->n && !rc; v++)
      if (g->v[v].e.nin && !nread[v]) s_assign(&c, v, s_cheapest(&c, v)->d);
  }
  if (rc) goto done;
  plan->floats = tl_decomp_cost(g, plan->v);
  for (int v = 0; v < g->n; v++)
    if (g->v[v].e.nin) plan->v[v].floats = s_vertex_cost(g, plan->v, v);
  *out = plan;
  plan = NULL;
done:
  if (c.t)
    for (int v = 0; v < g->n; v++) free(c.t[v].e);
  if (readers)
    for (int v = 0; v < g->n; v++) free(readers[v]);
  free(c.t);
  free(c.only);
  free(nread);
  free(readers);
  tl_dplan_destroy(&plan);
  return rc;
}

void tl_dplan_destroy(tl_dplan **p) {
  if (!p || !*p) return;
  free((*p)->v);
  free(*p);
  *p = NULL;
}
