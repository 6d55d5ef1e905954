/*
** layout/format.c - chunk formats for every tensor of a graph and the
** transformation on every edge, chosen by cost (Luo's matrix format
** exploration: chapters 4-7 for the search, 10 for the cost).
**
** The thesis's vocabulary, and how it maps onto tradb's tensors:
**  - physical matrix implementation p with feasibility p.f(m): a tl_format
**    (single, row/column strip k, tile k1 x k2; for a tensor, strips
**    across any one dimension and tiles over all), which gives a tensor
**    type (its shape) a chunk shape.  Feasible iff that chunk fits the
**    per-chunk byte limit (the thesis's "a single tuple cannot hold a 40 GB
**    matrix") and the format applies to the rank.  Formats that give one
**    tensor the same chunk shape are one implementation of it.
**  - atomic computation implementation i with type function i.f and cost
**    i.c: the thesis has a list per operation (13 matrix multiplies:
**    single x column strip, tile x tile, ...).  tradb runs every EinSum as
**    one TRA join of chunks, which accepts any input chunk shapes that are
**    co-partitioned (a label shared by two operands, or repeated in one,
**    has one chunk extent) and yields the output chunk shape those
**    extents give; i.f is that, or bottom when the inputs are not
**    co-partitioned or the output chunking is not a feasible format.  What
**    differs between implementations is how the operands meet: all
**    shuffled on the join labels (TL_IMPL_HASH), or one operand left in
**    place and the others broadcast (the thesis's broadcast join, which
**    made its motivating chain 20 times faster).  So the implementations
**    of a vertex are {hash} + {keep operand j} and i.f depends only on the
**    input formats.
**  - transformation t on an edge (identity always available): identity,
**    re-chunk (each new chunk lies in one old chunk: local strided
**    copies, the thesis's column-strip -> tile), repartition (new chunks
**    gather pieces of several old ones: shipped over the network, the
**    thesis's tile -> single by ROWMATRIX/COLMATRIX).
**  - costs: chapter 10's components (layout/cost.c) weighted into seconds.
**
** Search.  Sources keep their stored format (F = 0 there, infinity for any
** other), sinks are free.  A tree-shaped graph (no non-source vertex read
** twice) runs the DP of chapter 6:
**
**   F(v, rho) = min over i, pin, t of  i.c(pout)
**               + sum_j F(v_j, pin_j) + t_j.c(pin_j),  t_j(pin_j) = pout_j,
**               i.f(pout) = rho
**
** then traces back from the cheapest F of each sink.  A DAG runs chapter
** 7's frontier DP: vertices move one at a time (in the graph's order) from
** the unoptimised to the optimised side; the optimised vertices still read
** by an unoptimised one, and the sinks, form the frontier, partitioned into
** equivalence classes of vertices that share an ancestor (a vertex counting
** as its own ancestor), and F is kept per class over the joint formats of
** its members (equation 7.1).  Source matrices are excluded from "shared
** ancestor": their formats are fixed, so sharing one couples nothing, and
** counting them would put every vertex of a network that reads one weight
** matrix into one class.  Adding v merges the classes holding its
** arguments with v; members that no unoptimised vertex reads any more are
** minimised out.  Every other class stays as it was: a frontier vertex that
** shares an ancestor with v shares one with an argument of v, so it is in
** an argument's class already.
*/
#include "config.h"
#include "layout/layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_TABLE (1 << 20) /* entries one equivalence class may need */

int tl_format_chunk(const tl_format *f, int rank, const int64_t *shape, int64_t *chunk,
                    tr_err *err) {
  if (f->kind == TL_F_STRIP && (f->axis < 0 || f->axis >= rank))
    return tr_seterr(err, TR_EINVAL, "a strip across dimension %d of a rank %d tensor", f->axis,
                     rank);
  for (int d = 0; d < rank; d++) {
    int64_t k = f->kind == TL_F_TILE ? f->k[d]
                : f->kind == TL_F_STRIP && d == f->axis ? f->k[0]
                                                        : 0;
    chunk[d] = k > 0 && k < shape[d] ? k : shape[d];
  }
  return TR_OK;
}

/* Shape of vertex v's output. */
static void s_shape(const tl_graph *g, int v, int64_t *shape) {
  const tl_einsum *e = &g->v[v].e;
  for (int k = 0; k < e->nout; k++) shape[k] = e->size[e->out[k]];
}

static double s_prod(int rank, const int64_t *x) {
  double p = 1;
  for (int k = 0; k < rank; k++) p *= (double)x[k];
  return p;
}

/* Chunks a tensor of this shape has in this chunk shape. */
static double s_nchunks(int rank, const int64_t *shape, const int64_t *chunk) {
  double n = 1;
  for (int k = 0; k < rank; k++) n *= (double)((shape[k] + chunk[k] - 1) / chunk[k]);
  return n;
}

static int s_feasible(const tl_fproblem *pb, int rank, const int64_t *chunk) {
  return s_prod(rank, chunk) * (double)tr_dtype_size(pb->dtype) <= (double)pb->chunk_limit;
}

/* Does every chunk of `to` lie inside one chunk of `from`? */
static int s_refines(int rank, const int64_t *shape, const int64_t *from, const int64_t *to) {
  for (int k = 0; k < rank; k++)
    if (from[k] < shape[k] && from[k] % to[k]) return 0;
  return 1;
}

static int s_same(int rank, const int64_t *a, const int64_t *b) {
  for (int k = 0; k < rank; k++)
    if (a[k] != b[k]) return 0;
  return 1;
}

/* Spread per-site: a total over the sites, not below one unit of work. */
static double s_per(double total, double ways) { return total / (ways < 1 ? 1 : ways); }

int tl_transform_cost(const tl_fproblem *pb, int rank, const int64_t *shape, const int64_t *from,
                      const int64_t *to, tl_tkind kind, tl_cost *c) {
  memset(c, 0, sizeof *c);
  int same = s_same(rank, from, to);
  if (kind == TL_T_IDENTITY) return same ? TR_OK : TR_EINVAL;
  if (same) return TR_EINVAL; /* nothing to transform */
  if (kind == TL_T_RECHUNK && !s_refines(rank, shape, from, to)) return TR_EINVAL;
  /* Chapter 10.2: copying every element (compute), the input chunks as
  ** tuples, and for a repartition the data itself crossing the network
  ** ((n-1)/n of it leaves its site).  A re-chunk ships nothing: tradb cuts
  ** the new chunks where the old ones are (the thesis's ID table has no
  ** counterpart). */
  double N = s_prod(rank, shape), in = s_nchunks(rank, shape, from);
  double n = pb->sites, cores = (double)pb->sites * pb->threads;
  c->c[TL_C_ELEMWISE] = s_per(N, in < cores ? in : cores);
  c->c[TL_C_TASKS] = ceil(s_per(in, n));
  if (kind == TL_T_REPART) c->c[TL_C_NET] = s_per(N * (n - 1) / n, n);
  return TR_OK;
}

/* The cheapest transformation of this edge: its kind and seconds. */
static double s_transform(const tl_fproblem *pb, int rank, const int64_t *shape,
                          const int64_t *from, const int64_t *to, int *kind) {
  double best = INFINITY;
  for (int k = TL_T_IDENTITY; k <= TL_T_REPART; k++) {
    tl_cost c;
    if (tl_transform_cost(pb, rank, shape, from, to, k, &c)) continue;
    double s = tl_seconds(&pb->w, &c);
    if (s < best) {
      best = s;
      *kind = k;
    }
  }
  return best;
}

/* Chunk extent of every label of v under operand chunk shapes in_chunk;
** TR_ESHAPE unless co-partitioned. */
static int s_extents(const tl_einsum *e, const int64_t (*in_chunk)[TR_MAX_RANK], int64_t *ext) {
  for (int l = 0; l < e->nlabels; l++) ext[l] = 0;
  for (int j = 0; j < e->nin; j++)
    for (int k = 0; k < e->rank[j]; k++) {
      int l = e->in[j][k];
      if (ext[l] && ext[l] != in_chunk[j][k]) return TR_ESHAPE;
      ext[l] = in_chunk[j][k];
    }
  return TR_OK;
}

/* Components of running e on co-partitioned chunks of label extents ext. */
static void s_impl_cost(const tl_fproblem *pb, const tl_vertex *x, int impl, const int64_t *ext,
                        tl_cost *c) {
  const tl_einsum *e = &x->e;
  double n = pb->sites, cores = (double)pb->sites * pb->threads, elem = (double)tr_dtype_size(pb->dtype);
  double tuples = 1, g = 1, all = 1, out = 1, moved = 0;
  uint64_t outm = 0;
  for (int k = 0; k < e->nout; k++) {
    outm |= 1ull << e->out[k];
    out *= (double)e->size[e->out[k]];
  }
  for (int l = 0; l < e->nlabels; l++) {
    double q = (double)((e->size[l] + ext[l] - 1) / ext[l]);
    tuples *= q;
    all *= (double)e->size[l];
    if (!(outm & (1ull << l))) g *= q;
  }
  for (int j = 0; j < e->nin; j++) {
    double sz = 1;
    for (int k = 0; k < e->rank[j]; k++) sz *= (double)e->size[e->in[j][k]];
    if (impl == TL_IMPL_HASH && e->nin > 1) moved += sz * (n - 1) / n; /* shuffled on the keys */
    if (impl >= 0 && j != impl) moved += sz * (n - 1);                 /* broadcast to all */
  }
  double partials = g > 1 ? g * out : 0; /* join results the aggregation combines */
  memset(c, 0, sizeof *c);
  double width = tuples < cores ? tuples : cores;
  if (x->kernel == TL_K_ELEMWISE)
    c->c[TL_C_ELEMWISE] = s_per(all * (e->nin > 1 ? e->nin - 1 : 1), width);
  else
    c->c[x->kernel == TL_K_GEMM ? TL_C_GEMM : TL_C_CONTRACT] = s_per(2 * all, width);
  c->c[TL_C_ELEMWISE] += s_per(partials, width);
  c->c[TL_C_NET] = s_per(moved + partials, n);
  c->c[TL_C_TASKS] = ceil(s_per(tuples, n));
  c->c[TL_C_WRITE] = s_per((partials + out) * elem, n);
}

int tl_impl_cost(const tl_fproblem *pb, int v, int impl, const int64_t (*in_chunk)[TR_MAX_RANK],
                 tl_cost *c, tr_err *err) {
  const tl_vertex *x = &pb->g->v[v];
  int64_t ext[TL_MAX_LABELS];
  if (!x->e.nin) return tr_seterr(err, TR_EINVAL, "vertex %d is a source", v);
  if (impl < TL_IMPL_HASH || impl >= x->e.nin || (impl >= 0 && x->e.nin < 2))
    return tr_seterr(err, TR_EINVAL, "vertex %d has no implementation %d", v, impl);
  if (s_extents(&x->e, in_chunk, ext))
    return tr_seterr(err, TR_ESHAPE, "vertex %d: operands are not co-partitioned", v);
  s_impl_cost(pb, x, impl, ext, c);
  return TR_OK;
}

/* The cheapest implementation of vertex x on extents ext. */
static double s_best_impl(const tl_fproblem *pb, const tl_vertex *x, const int64_t *ext,
                          int *impl) {
  double best = INFINITY;
  for (int i = TL_IMPL_HASH; i < (x->e.nin > 1 ? x->e.nin : 0); i++) {
    tl_cost c;
    s_impl_cost(pb, x, i, ext, &c);
    double s = tl_seconds(&pb->w, &c);
    if (s < best) {
      best = s;
      *impl = i;
    }
  }
  return best;
}

/* The first format of P that gives vertex v's tensor chunk shape `chunk`
** and is feasible; -1 if none. */
static int s_find_format(const tl_fproblem *pb, int v, const int64_t *chunk) {
  int rank = pb->g->v[v].e.nout;
  int64_t shape[TR_MAX_RANK], c[TR_MAX_RANK];
  s_shape(pb->g, v, shape);
  if (!s_feasible(pb, rank, chunk)) return -1;
  for (int f = 0; f < pb->nf; f++)
    if (!tl_format_chunk(&pb->f[f], rank, shape, c, NULL) && s_same(rank, c, chunk)) return f;
  return -1;
}

double tl_formats_cost(const tl_fproblem *pb, tl_fchoice *ch) {
  const tl_graph *g = pb->g;
  double total = 0;
  for (int v = 0; v < g->n; v++) {
    const tl_vertex *x = &g->v[v];
    int64_t shape[TR_MAX_RANK];
    s_shape(g, v, shape);
    ch[v].seconds = 0;
    if (!x->e.nin) {
      ch[v].fmt = -1;
      if (tl_format_chunk(&x->fmt, x->e.nout, shape, ch[v].chunk, NULL)) return INFINITY;
      continue;
    }
    int64_t in[TL_MAX_OPERANDS][TR_MAX_RANK], ext[TL_MAX_LABELS];
    double s = 0;
    for (int j = 0; j < x->e.nin; j++) {
      int u = x->src[j], f = ch[v].in_fmt[j], rank = x->e.rank[j];
      int64_t ushape[TR_MAX_RANK];
      s_shape(g, u, ushape);
      if (f < 0)
        memcpy(in[j], ch[u].chunk, sizeof in[j]);
      else if (f >= pb->nf || tl_format_chunk(&pb->f[f], rank, ushape, in[j], NULL) ||
               !s_feasible(pb, rank, in[j]))
        return INFINITY;
      s += s_transform(pb, rank, ushape, ch[u].chunk, in[j], &ch[v].tf[j]);
    }
    if (ch[v].impl < TL_IMPL_HASH || ch[v].impl >= x->e.nin || (ch[v].impl >= 0 && x->e.nin < 2) ||
        s_extents(&x->e, (const int64_t(*)[TR_MAX_RANK])in, ext))
      return INFINITY;
    for (int k = 0; k < x->e.nout; k++) ch[v].chunk[k] = ext[x->e.out[k]];
    ch[v].fmt = s_find_format(pb, v, ch[v].chunk);
    if (ch[v].fmt < 0) return INFINITY;
    tl_cost c;
    s_impl_cost(pb, x, ch[v].impl, ext, &c);
    ch[v].seconds = s + tl_seconds(&pb->w, &c);
    total += ch[v].seconds;
  }
  return total;
}

/* ---- What both searches share ---------------------------------------------- */

/* The chunk shapes a vertex's tensor may take: for a source its stored one
** first (index 0), then every distinct feasible shape of P. */
typedef struct s_cands {
  int n;
  int64_t (*c)[TR_MAX_RANK]; /* chunk shapes */
  int *fmt;                  /* index into P; -1: the source's own */
  double *tr;                /* n x n: seconds of the cheapest transformation */
} s_cands;

/* Every co-partitioned choice of operand formats of one vertex whose output
** is a candidate: pout[j] indexes the candidates of operand j's producer. */
typedef struct s_combos {
  int n, cap, nin;
  int *pout;    /* n x nin */
  int *out;     /* output candidate */
  int *impl;    /* cheapest implementation */
  double *cost; /* its seconds */
} s_combos;

typedef struct s_fctx {
  const tl_fproblem *pb;
  const tl_graph *g;
  s_cands *cand;    /* per vertex */
  s_combos *combo;  /* per non-source vertex */
  int *nread;       /* operand edges reading each vertex */
  tr_err *err;
} s_fctx;

static int s_cands_build(s_fctx *c, int v) {
  const tl_fproblem *pb = c->pb;
  const tl_vertex *x = &c->g->v[v];
  s_cands *k = &c->cand[v];
  int rank = x->e.nout, cap = pb->nf + 1;
  int64_t shape[TR_MAX_RANK], ch[TR_MAX_RANK];
  s_shape(c->g, v, shape);
  k->c = malloc(sizeof *k->c * (size_t)cap);
  k->fmt = malloc(sizeof *k->fmt * (size_t)cap);
  if (!k->c || !k->fmt) return tr_seterr(c->err, TR_ENOMEM, "out of memory");
  if (!x->e.nin) {
    if (tl_format_chunk(&x->fmt, rank, shape, ch, c->err))
      return tr_seterr(c->err, TR_EINVAL, "source %d: its stored format does not apply", v);
    memcpy(k->c[0], ch, sizeof ch);
    k->fmt[k->n++] = -1;
  }
  for (int f = 0; f < pb->nf; f++) {
    if (tl_format_chunk(&pb->f[f], rank, shape, ch, NULL) || !s_feasible(pb, rank, ch)) continue;
    int dup = 0;
    for (int i = 0; i < k->n && !dup; i++) dup = s_same(rank, k->c[i], ch);
    if (dup) continue;
    memcpy(k->c[k->n], ch, sizeof ch);
    k->fmt[k->n++] = f;
  }
  if (!k->n)
    return tr_seterr(c->err, TR_ESHAPE,
                     "vertex %d has no feasible format: every candidate's chunk exceeds %lld bytes",
                     v, (long long)pb->chunk_limit);
  k->tr = malloc(sizeof *k->tr * (size_t)(k->n * k->n));
  if (!k->tr) return tr_seterr(c->err, TR_ENOMEM, "out of memory");
  for (int a = 0; a < k->n; a++)
    for (int b = 0; b < k->n; b++) {
      int kind;
      k->tr[a * k->n + b] = s_transform(pb, rank, shape, k->c[a], k->c[b], &kind);
    }
  return TR_OK;
}

static int s_combo_add(s_combos *cb, const int *pout, int out, int impl, double cost) {
  if (cb->n == cb->cap) {
    int nc = cb->cap ? 2 * cb->cap : 64;
    int *p = realloc(cb->pout, sizeof *p * (size_t)(nc * (cb->nin ? cb->nin : 1)));
    if (p) cb->pout = p;
    int *o = realloc(cb->out, sizeof *o * (size_t)nc);
    if (o) cb->out = o;
    int *i = realloc(cb->impl, sizeof *i * (size_t)nc);
    if (i) cb->impl = i;
    double *s = realloc(cb->cost, sizeof *s * (size_t)nc);
    if (s) cb->cost = s;
    if (!p || !o || !i || !s) return TR_ENOMEM;
    cb->cap = nc;
  }
  memcpy(&cb->pout[cb->n * cb->nin], pout, sizeof *pout * (size_t)cb->nin);
  cb->out[cb->n] = out;
  cb->impl[cb->n] = impl;
  cb->cost[cb->n++] = cost;
  return TR_OK;
}

/* Operand j onwards of vertex v, label extents so far in ext. */
static int s_combo_enum(s_fctx *c, int v, int j, int *pout, int64_t *ext) {
  const tl_vertex *x = &c->g->v[v];
  const tl_einsum *e = &x->e;
  if (j == e->nin) {
    int64_t ch[TR_MAX_RANK];
    const s_cands *k = &c->cand[v];
    for (int d = 0; d < e->nout; d++) ch[d] = ext[e->out[d]];
    for (int o = 0; o < k->n; o++)
      if (s_same(e->nout, k->c[o], ch)) {
        int impl = TL_IMPL_HASH;
        double s = s_best_impl(c->pb, x, ext, &impl);
        return s_combo_add(&c->combo[v], pout, o, impl, s);
      }
    return TR_OK; /* the output chunking is no feasible format */
  }
  const s_cands *k = &c->cand[x->src[j]];
  int64_t saved[TL_MAX_LABELS];
  memcpy(saved, ext, sizeof saved);
  for (int b = 0; b < k->n; b++) {
    int ok = 1;
    for (int d = 0; d < e->rank[j] && ok; d++) {
      int l = e->in[j][d];
      if (ext[l] && ext[l] != k->c[b][d]) ok = 0;
      ext[l] = k->c[b][d];
    }
    if (ok) {
      pout[j] = b;
      int rc = s_combo_enum(c, v, j + 1, pout, ext);
      if (rc) return rc;
    }
    memcpy(ext, saved, sizeof saved);
  }
  return TR_OK;
}

static void s_fctx_free(s_fctx *c) {
  for (int v = 0; c->cand && v < c->g->n; v++) {
    free(c->cand[v].c);
    free(c->cand[v].fmt);
    free(c->cand[v].tr);
  }
  for (int v = 0; c->combo && v < c->g->n; v++) {
    free(c->combo[v].pout);
    free(c->combo[v].out);
    free(c->combo[v].impl);
    free(c->combo[v].cost);
  }
  free(c->cand);
  free(c->combo);
  free(c->nread);
}

static int s_fctx_init(s_fctx *c, const tl_fproblem *pb, tr_err *err) {
  const tl_graph *g = pb->g;
  memset(c, 0, sizeof *c);
  c->pb = pb;
  c->g = g;
  c->err = err;
  c->cand = calloc((size_t)g->n, sizeof *c->cand);
  c->combo = calloc((size_t)g->n, sizeof *c->combo);
  c->nread = calloc((size_t)g->n, sizeof *c->nread);
  if (!c->cand || !c->combo || !c->nread) return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int v = 0; v < g->n; v++) {
    int rc = s_cands_build(c, v);
    if (rc) return rc;
    for (int j = 0; j < g->v[v].e.nin; j++) c->nread[g->v[v].src[j]]++;
  }
  for (int v = 0; v < g->n; v++) {
    if (!g->v[v].e.nin) continue;
    int pout[TL_MAX_OPERANDS];
    int64_t ext[TL_MAX_LABELS] = {0};
    c->combo[v].nin = g->v[v].e.nin;
    int rc = s_combo_enum(c, v, 0, pout, ext);
    if (rc) return tr_seterr(err, rc, "out of memory");
    if (!c->combo[v].n)
      return tr_seterr(err, TR_ESHAPE,
                       "vertex %d: no co-partitioned choice of operand formats gives a feasible "
                       "output format",
                       v);
  }
  return TR_OK;
}

/* ---- Chapter 6: trees ---------------------------------------------------------- */

typedef struct s_tree {
  double **F; /* per vertex, per candidate */
  int **back; /* per non-source vertex, per candidate: the combo reaching it */
} s_tree;

/* Least F(u, a) + t(a -> b) over u's candidates a; the a in *arg. */
static double s_feed(const s_fctx *c, const double *Fu, int u, int b, int *arg) {
  const s_cands *k = &c->cand[u];
  double best = INFINITY;
  *arg = 0;
  for (int a = 0; a < k->n; a++) {
    double s = Fu[a] + k->tr[a * k->n + b];
    if (s < best) {
      best = s;
      *arg = a;
    }
  }
  return best;
}

/* Label v with candidate rho and trace back into its operands. */
static void s_tree_trace(const s_fctx *c, const s_tree *t, int v, int rho, int *pick) {
  pick[v] = rho;
  const tl_vertex *x = &c->g->v[v];
  if (!x->e.nin) return;
  const s_combos *cb = &c->combo[v];
  int i = t->back[v][rho];
  for (int j = 0; j < x->e.nin; j++) {
    int u = x->src[j], a;
    s_feed(c, t->F[u], u, cb->pout[i * cb->nin + j], &a);
    s_tree_trace(c, t, u, a, pick);
  }
}

/* pick[v]: v's candidate; chosen combo per vertex in cpick[v]. */
static int s_tree_dp(s_fctx *c, int *pick, int *cpick) {
  const tl_graph *g = c->g;
  s_tree t = {calloc((size_t)g->n, sizeof(double *)), calloc((size_t)g->n, sizeof(int *))};
  int rc = TR_OK;
  if (!t.F || !t.back) {
    rc = tr_seterr(c->err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int v = 0; v < g->n; v++) {
    const s_cands *k = &c->cand[v];
    t.F[v] = malloc(sizeof(double) * (size_t)k->n);
    t.back[v] = malloc(sizeof(int) * (size_t)k->n);
    if (!t.F[v] || !t.back[v]) {
      rc = tr_seterr(c->err, TR_ENOMEM, "out of memory");
      goto done;
    }
    for (int r = 0; r < k->n; r++) {
      t.F[v][r] = !g->v[v].e.nin && r == 0 ? 0 : INFINITY;
      t.back[v][r] = -1;
    }
    if (!g->v[v].e.nin) continue;
    const s_combos *cb = &c->combo[v];
    for (int i = 0; i < cb->n; i++) {
      double s = cb->cost[i];
      for (int j = 0; j < cb->nin; j++) {
        int a;
        s += s_feed(c, t.F[g->v[v].src[j]], g->v[v].src[j], cb->pout[i * cb->nin + j], &a);
      }
      if (s < t.F[v][cb->out[i]]) {
        t.F[v][cb->out[i]] = s;
        t.back[v][cb->out[i]] = i;
      }
    }
  }
  for (int v = 0; v < g->n; v++) {
    if (c->nread[v] || !g->v[v].e.nin) continue;
    int best = 0;
    for (int r = 1; r < c->cand[v].n; r++)
      if (t.F[v][r] < t.F[v][best]) best = r;
    if (isinf(t.F[v][best])) {
      rc = tr_seterr(c->err, TR_ESHAPE, "no type-correct choice of formats reaches vertex %d", v);
      goto done;
    }
    s_tree_trace(c, &t, v, best, pick);
  }
  for (int v = 0; v < g->n; v++) cpick[v] = g->v[v].e.nin ? t.back[v][pick[v]] : -1;
done:
  for (int v = 0; v < g->n; v++) {
    if (t.F) free(t.F[v]);
    if (t.back) free(t.back[v]);
  }
  free(t.F);
  free(t.back);
  return rc;
}

/* ---- Chapter 7: DAGs -------------------------------------------------------------- */

/* F over one equivalence class: a dense table over its members' joint
** candidates (mixed radix, member 0 fastest), made when `vertex` moved. */
typedef struct s_class {
  int vertex;      /* the vertex whose move made it (-1: never) */
  int nmem;        /* members */
  int *mem;        /* them; mem[0] == vertex */
  int *dim;        /* candidates of each */
  int64_t size;    /* entries */
  double *F;       /* least cost per joint choice */
  int *combo;      /* the vertex's combo reaching each entry */
  int ninv;        /* classes merged into it */
  int *inv;        /* them (indices into the class list) */
  int64_t *sub;    /* size x ninv: entry of each merged class */
} s_class;

typedef struct s_dag {
  int ncls, capcls;
  s_class *cls;  /* every class ever made, for the trace back */
  int *cur;      /* per vertex on the frontier: its class; -1 otherwise */
  int *left;     /* per vertex: operand edges from vertices not yet moved */
  int max_class; /* largest class made */
} s_dag;

static void s_dag_free(s_dag *d) {
  for (int i = 0; i < d->ncls; i++) {
    s_class *k = &d->cls[i];
    free(k->mem);
    free(k->dim);
    free(k->F);
    free(k->combo);
    free(k->inv);
    free(k->sub);
  }
  free(d->cls);
  free(d->cur);
  free(d->left);
}

/* Does u stay on the frontier: is it read by a vertex not yet moved?  A
** sink is minimised out as soon as its class is merged: no later vertex
** reads it, so its format changes no later cost, and this is the thesis's
** final F over all sinks taken early, with tables that do not grow with
** every output of a block. */
static int s_stays(const s_dag *d, int u) { return d->left[u] > 0; }

/* Candidate of member m in entry e of class k. */
static int s_digit(const s_class *k, int64_t e, int m) {
  for (int i = 0; i < m; i++) e /= k->dim[i];
  return (int)(e % k->dim[m]);
}

/* Move vertex v to the optimised side (equation 7.1). */
static int s_dag_move(s_fctx *c, s_dag *d, int v) {
  const tl_vertex *x = &c->g->v[v];
  const s_combos *cb = &c->combo[v];
  int inv[TL_MAX_OPERANDS], ninv = 0, rc = TR_OK;
  for (int j = 0; j < x->e.nin; j++) { /* classes holding v's arguments */
    int u = x->src[j], cl = d->cur[u], seen = 0;
    d->left[u]--;
    if (!c->g->v[u].e.nin) continue; /* a source: fixed, in no class */
    if (cl < 0) /* cannot happen: a vertex leaves the frontier after its last reader moved */
      return tr_seterr(c->err, TR_ERR, "vertex %d reads vertex %d, which left the frontier", v, u);
    for (int i = 0; i < ninv; i++) seen |= inv[i] == cl;
    if (!seen) inv[ninv++] = cl;
  }
  if (d->ncls == d->capcls) {
    int nc = d->capcls ? 2 * d->capcls : 16;
    s_class *n = realloc(d->cls, sizeof *n * (size_t)nc);
    if (!n) return tr_seterr(c->err, TR_ENOMEM, "out of memory");
    d->cls = n;
    d->capcls = nc;
  }
  int me = d->ncls++;
  s_class *k = &d->cls[me];
  memset(k, 0, sizeof *k);
  k->vertex = v;
  /* members: v, then the members of merged classes still read later */
  int nmem = 1;
  for (int i = 0; i < ninv; i++) nmem += d->cls[inv[i]].nmem;
  k->mem = malloc(sizeof *k->mem * (size_t)nmem);
  k->dim = malloc(sizeof *k->dim * (size_t)nmem);
  k->inv = malloc(sizeof *k->inv * (size_t)(ninv ? ninv : 1));
  /* per merged class member: its position in the new class, or -1 */
  int *pos = malloc(sizeof *pos * (size_t)nmem);
  double *best = NULL;
  int64_t *arg = NULL, *rsize = NULL;
  if (!k->mem || !k->dim || !k->inv || !pos) {
    rc = tr_seterr(c->err, TR_ENOMEM, "out of memory");
    goto done;
  }
  k->mem[0] = v;
  k->dim[0] = c->cand[v].n;
  k->nmem = 1;
  k->ninv = ninv;
  memcpy(k->inv, inv, sizeof *inv * (size_t)ninv);
  int p = 0;
  for (int i = 0; i < ninv; i++) {
    const s_class *o = &d->cls[inv[i]];
    for (int m = 0; m < o->nmem; m++, p++) {
      pos[p] = -1;
      if (s_stays(d, o->mem[m])) {
        pos[p] = k->nmem;
        k->mem[k->nmem] = o->mem[m];
        k->dim[k->nmem++] = o->dim[m];
      }
    }
  }
  k->size = 1;
  for (int m = 0; m < k->nmem; m++) {
    k->size *= k->dim[m];
    if (k->size > S_MAX_TABLE) {
      rc = tr_seterr(c->err, TR_ENOMEM,
                     "an equivalence class of %d vertices at vertex %d needs more than %d entries",
                     k->nmem, v, S_MAX_TABLE);
      goto done;
    }
  }
  if (k->nmem > d->max_class) d->max_class = k->nmem;
  k->F = malloc(sizeof *k->F * (size_t)k->size);
  k->combo = malloc(sizeof *k->combo * (size_t)k->size);
  k->sub = malloc(sizeof *k->sub * (size_t)(k->size * (ninv ? ninv : 1)));
  /* per merged class: least cost and its entry per joint choice of the
  ** members it keeps (rsize[i] of them, mixed radix in member order) */
  int64_t rtotal = 0, roff[TL_MAX_OPERANDS];
  rsize = malloc(sizeof *rsize * (size_t)(ninv ? ninv : 1));
  for (int i = 0; i < ninv && rsize; i++) {
    const s_class *o = &d->cls[inv[i]];
    rsize[i] = 1;
    for (int m = 0; m < o->nmem; m++)
      if (s_stays(d, o->mem[m])) rsize[i] *= o->dim[m];
    roff[i] = rtotal;
    rtotal += rsize[i];
  }
  best = malloc(sizeof *best * (size_t)(rtotal ? rtotal : 1));
  arg = malloc(sizeof *arg * (size_t)(rtotal ? rtotal : 1));
  if (!k->F || !k->combo || !k->sub || !rsize || !best || !arg) {
    rc = tr_seterr(c->err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int64_t e = 0; e < k->size; e++) k->F[e] = INFINITY;
  for (int ci = 0; ci < cb->n; ci++) {
    const int *pout = &cb->pout[ci * cb->nin];
    double base = cb->cost[ci];
    for (int j = 0; j < x->e.nin; j++) /* transformations out of sources */
      if (!c->g->v[x->src[j]].e.nin) base += c->cand[x->src[j]].tr[pout[j]];
    for (int i = 0; i < ninv; i++) {
      const s_class *o = &d->cls[inv[i]];
      for (int64_t r = 0; r < rsize[i]; r++) best[roff[i] + r] = INFINITY;
      for (int64_t e = 0; e < o->size; e++) {
        if (isinf(o->F[e])) continue;
        double s = o->F[e];
        int64_t r = 0, rmul = 1, rest = e;
        for (int m = 0; m < o->nmem; m++) {
          int a = (int)(rest % o->dim[m]), u = o->mem[m];
          rest /= o->dim[m];
          for (int j = 0; j < x->e.nin; j++) /* transformations of its edges into v */
            if (x->src[j] == u) s += c->cand[u].tr[a * c->cand[u].n + pout[j]];
          if (s_stays(d, u)) {
            r += a * rmul;
            rmul *= o->dim[m];
          }
        }
        if (s < best[roff[i] + r]) {
          best[roff[i] + r] = s;
          arg[roff[i] + r] = e;
        }
      }
    }
    /* every joint choice of the kept members, v's output fixed by the combo */
    int64_t nkeep = k->size / k->dim[0];
    for (int64_t q = 0; q < nkeep; q++) {
      double s = base;
      int64_t rest = q, ent = cb->out[ci];
      int64_t sub[TL_MAX_OPERANDS];
      /* q runs over members 1.. of the new class, which are the merged
      ** classes' kept members in order, so it splits into one r per class */
      for (int i = 0; i < ninv && !isinf(s); i++) {
        int64_t r = rest % rsize[i];
        rest /= rsize[i];
        s += best[roff[i] + r];
        sub[i] = arg[roff[i] + r];
      }
      ent += q * k->dim[0];
      if (s < k->F[ent]) {
        k->F[ent] = s;
        k->combo[ent] = ci;
        memcpy(&k->sub[ent * ninv], sub, sizeof *sub * (size_t)ninv);
      }
    }
  }
  for (int m = 0; m < k->nmem; m++) d->cur[k->mem[m]] = me;
  p = 0;
  for (int i = 0; i < ninv; i++) /* members that left the frontier */
    for (int m = 0; m < d->cls[inv[i]].nmem; m++, p++)
      if (pos[p] < 0) d->cur[d->cls[inv[i]].mem[m]] = -1;
done:
  free(pos);
  free(best);
  free(arg);
  free(rsize);
  return rc;
}

/* Trace entry e of class k back: each merged class's entry, recursively. */
static void s_dag_trace(const s_dag *d, int k, int64_t e, int *pick, int *cpick) {
  const s_class *o = &d->cls[k];
  pick[o->vertex] = s_digit(o, e, 0);
  cpick[o->vertex] = o->combo[e];
  for (int i = 0; i < o->ninv; i++) s_dag_trace(d, o->inv[i], o->sub[e * o->ninv + i], pick, cpick);
}

static int s_dag_dp(s_fctx *c, int *pick, int *cpick, int *max_class) {
  const tl_graph *g = c->g;
  s_dag d = {0};
  int rc = TR_OK;
  d.cur = malloc(sizeof *d.cur * (size_t)g->n);
  d.left = malloc(sizeof *d.left * (size_t)g->n);
  if (!d.cur || !d.left) {
    rc = tr_seterr(c->err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int v = 0; v < g->n; v++) {
    d.cur[v] = -1;
    d.left[v] = c->nread[v];
    pick[v] = 0; /* sources: their stored format */
    cpick[v] = -1;
  }
  for (int v = 0; v < g->n && !rc; v++)
    if (g->v[v].e.nin) rc = s_dag_move(c, &d, v);
  if (rc) goto done;
  /* the frontier is now the sinks; each final class's cheapest entry */
  for (int k = 0; k < d.ncls; k++) {
    const s_class *o = &d.cls[k];
    int live = 0;
    for (int m = 0; m < o->nmem; m++) live |= d.cur[o->mem[m]] == k;
    if (!live) continue;
    int64_t best = 0;
    for (int64_t e = 1; e < o->size; e++)
      if (o->F[e] < o->F[best]) best = e;
    if (isinf(o->F[best])) {
      rc = tr_seterr(c->err, TR_ESHAPE, "no type-correct choice of formats reaches vertex %d",
                     o->vertex);
      goto done;
    }
    s_dag_trace(&d, k, best, pick, cpick);
  }
  *max_class = d.max_class;
done:
  s_dag_free(&d);
  return rc;
}

/* ---- Entry point ------------------------------------------------------------------ */

int tl_formats(const tl_fproblem *pb, tl_fmode mode, tl_fplan **out, tr_err *err) {
  *out = NULL;
  int rc = tl_graph_check(pb->g, err);
  if (rc) return rc;
  if (pb->nf < 0 || (pb->nf && !pb->f) || pb->sites < 1 || pb->threads < 1 || pb->chunk_limit < 1)
    return tr_seterr(err, TR_EINVAL, "bad problem: %d formats, %d sites, %d threads", pb->nf,
                     pb->sites, pb->threads);
  const tl_graph *g = pb->g;
  s_fctx c;
  tl_fplan *plan = calloc(1, sizeof *plan);
  int *pick = malloc(sizeof *pick * (size_t)g->n), *cpick = malloc(sizeof *cpick * (size_t)g->n);
  if (plan) plan->v = calloc((size_t)g->n, sizeof *plan->v);
  rc = s_fctx_init(&c, pb, err);
  if (!rc && (!plan || !plan->v || !pick || !cpick))
    rc = tr_seterr(err, TR_ENOMEM, "out of memory choosing formats");
  if (rc) goto done;
  for (int v = 0; v < g->n; v++) pick[v] = cpick[v] = 0;
  int tree = 1;
  for (int v = 0; v < g->n; v++)
    if (g->v[v].e.nin && c.nread[v] > 1) tree = 0;
  if (mode == TL_FMODE_TREE && !tree) {
    rc = tr_seterr(err, TR_EINVAL, "the graph is not a tree: a vertex is read twice");
    goto done;
  }
  plan->n = g->n;
  plan->dag = mode == TL_FMODE_DAG || (mode == TL_FMODE_AUTO && !tree);
  rc = plan->dag ? s_dag_dp(&c, pick, cpick, &plan->max_class) : s_tree_dp(&c, pick, cpick);
  if (rc) goto done;
  for (int v = 0; v < g->n; v++) {
    tl_fchoice *ch = &plan->v[v];
    ch->impl = TL_IMPL_HASH;
    if (cpick[v] < 0) continue;
    const s_combos *cb = &c.combo[v];
    ch->impl = cb->impl[cpick[v]];
    for (int j = 0; j < cb->nin; j++)
      ch->in_fmt[j] = c.cand[g->v[v].src[j]].fmt[cb->pout[cpick[v] * cb->nin + j]];
  }
  plan->seconds = tl_formats_cost(pb, plan->v);
  *out = plan;
  plan = NULL;
done:
  s_fctx_free(&c);
  free(pick);
  free(cpick);
  tl_fplan_destroy(&plan);
  return rc;
}

void tl_fplan_destroy(tl_fplan **p) {
  if (!p || !*p) return;
  free((*p)->v);
  free(*p);
  *p = NULL;
}
