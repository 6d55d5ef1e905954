/*
** layout/format.c - chunk formats for every tensor of a graph and the
** transformation on every edge, chosen by cost (Luo's matrix format
** exploration: chapters 4-7 for the search, 10 for the cost), with the
** candidates drawn from EinDecomp's partition vectors.
**
** The thesis's vocabulary, and how it maps onto tradb's tensors:
**  - physical matrix implementation p with feasibility p.f(m): a chunk
**    shape (one chunk: single tuple; one dimension cut: row or column
**    strips; several: tiles), feasible iff a chunk fits the per-chunk
**    byte limit.  The thesis draws them from a fixed list P (strips of
**    10, tiles of 1000 x 1000, ..); here they come from the partition
**    vectors of the vertices (EinDecomp section 6): every vector d whose
**    entries multiply to 1, 2, 4, .. p pieces of work gives a chunking of
**    a vertex's labels, ext[l] = ceil(size[l] / d[l]), hence chunk shapes
**    for its output and every operand, sized to the cluster.
**  - atomic computation implementation i with type function i.f: tradb
**    runs every EinSum as one TRA join of chunks, which accepts operands
**    co-partitioned on their shared labels and yields the output chunking
**    those extents give.  So the implementation of a vertex is a
**    chunking of its labels; i.f maps the operand formats that chunking
**    reads to the output format it makes.  How the operands then meet
**    (hashed, broadcast, kept in place: the IA plans of the TRA paper) is
**    inside i.c, the cheapest of them.
**  - transformation t on an edge (identity always available): identity,
**    re-chunk (each new chunk lies in one old chunk: local copies, the
**    thesis's column-strip -> tile), repartition (new chunks gather
**    pieces of several old ones: shipped, the thesis's tile -> single).
**  - costs: chapter 10's components (layout/cost.c) weighted into
**    seconds; the caller may supply its own (the engine costs a vertex by
**    the IA plans its optimizer would run), else the formulas below.
**
** This file builds what the searches (tree.c, dag.c) share: the
** candidates of every tensor, the chunkings of every vertex with the
** candidates they read and make, and the costs, transformations costed
** when a search first asks for them.
*/
#include "config.h"
#include "layout/layout_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_LOG2P 15 /* pieces of work a chunking may have: 2^15 */

/* Shape of vertex v's output. */
void li_shape(const tl_graph *g, int v, int64_t *shape) {
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

static int s_same(int rank, const int64_t *a, const int64_t *b) {
  for (int k = 0; k < rank; k++)
    if (a[k] != b[k]) return 0;
  return 1;
}

/* Operand j's chunk shape under label extents ext. */
void li_operand_chunk(const tl_einsum *e, int j, const int64_t *ext, int64_t *ch) {
  for (int k = 0; k < e->rank[j]; k++) ch[k] = ext[e->in[j][k]];
}

void li_out_chunk(const tl_einsum *e, const int64_t *ext, int64_t *ch) {
  for (int k = 0; k < e->nout; k++) ch[k] = ext[e->out[k]];
}

/* Spread: a total over `ways`, not below one unit of work. */
static double s_per(double total, double ways) { return total / (ways < 1 ? 1 : ways); }

tl_tkind tl_transform_kind(int rank, const int64_t *shape, const int64_t *from, const int64_t *to) {
  if (s_same(rank, from, to)) return TL_T_IDENTITY;
  for (int k = 0; k < rank; k++)
    if (from[k] < shape[k] && from[k] % to[k]) return TL_T_REPART;
  return TL_T_RECHUNK;
}

/* ---- The built-in costs (chapter 10) -------------------------------------- */

int tl_transform_cost(const tl_fproblem *pb, int rank, const int64_t *shape, const int64_t *from,
                      const int64_t *to, tl_tkind kind, tl_cost *c) {
  memset(c, 0, sizeof *c);
  tl_tkind k = tl_transform_kind(rank, shape, from, to);
  if (kind == TL_T_IDENTITY) return k == TL_T_IDENTITY ? TR_OK : TR_EINVAL;
  if (k == TL_T_IDENTITY || (kind == TL_T_RECHUNK && k != TL_T_RECHUNK)) return TR_EINVAL;
  /* Chapter 10.2: copying every element (compute), the input chunks as
  ** tuples, the chunks made, and for a repartition the data itself
  ** crossing the network ((n-1)/n of it leaves its site).  A re-chunk
  ** ships nothing: tradb cuts the new chunks where the old ones are (the
  ** thesis's ID table has no counterpart). */
  double N = s_prod(rank, shape), in = s_nchunks(rank, shape, from);
  double n = pb->sites, cores = (double)pb->sites * pb->threads;
  c->c[TL_C_ELEMWISE] = s_per(N, in < cores ? in : cores);
  c->c[TL_C_TASKS] = ceil(s_per(in, n));
  c->c[TL_C_CHUNKS] = ceil(s_per(s_nchunks(rank, shape, to), n));
  if (kind == TL_T_REPART) c->c[TL_C_NET] = s_per(N * (n - 1) / n, n);
  return TR_OK;
}

/* Components of one implementation: every operand hashed on the join
** labels (impl -1), or operand impl kept where it is, the others
** broadcast. */
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
    if (impl < 0 && e->nin > 1) moved += sz * (n - 1) / n; /* shuffled on the keys */
    if (impl >= 0 && j != impl) moved += sz * (n - 1);     /* broadcast to all */
  }
  double partials = g > 1 ? g * out : 0; /* join results the aggregation combines */
  /* each output chunk's partials are combined on one site (EinDecomp,
  ** section 7): the busiest takes in the partials of ceil(groups / n)
  ** of the groups, and combines them on as many threads */
  double groups = tuples / g, mine = ceil(s_per(groups, n));
  double comb = partials * mine / groups, cwidth = mine < pb->threads ? mine : pb->threads;
  memset(c, 0, sizeof *c);
  double width = tuples < cores ? tuples : cores;
  if (x->kernel == TL_K_ELEMWISE)
    c->c[TL_C_ELEMWISE] = s_per(all * (e->nin > 1 ? e->nin - 1 : 1), width);
  else
    c->c[x->kernel == TL_K_GEMM ? TL_C_GEMM : TL_C_CONTRACT] = s_per(2 * all, width);
  if (x->kernel == TL_K_GEMM) /* each tuple's call packs its operand blocks */
    for (int j = 0; j < e->nin; j++) {
      double blk = 1;
      for (int k = 0; k < e->rank[j]; k++) blk *= (double)ext[e->in[j][k]];
      c->c[TL_C_PACK] += s_per(tuples * blk, width);
    }
  c->c[TL_C_ELEMWISE] += s_per(comb, cwidth);
  c->c[TL_C_NET] = s_per(moved, n) + comb;
  c->c[TL_C_TASKS] = ceil(s_per(tuples, n));
  c->c[TL_C_CHUNKS] = ceil(s_per(groups + (partials > 0 ? tuples : 0), n)); /* outputs, partials */
  c->c[TL_C_WRITE] = s_per((partials + out) * elem, n);
  c->c[TL_C_PHASES] = 1 + (moved > 0) + 2 * (partials > 0);
}

void tl_vertex_cost(const tl_fproblem *pb, int v, const int64_t *ext, tl_cost *c) {
  const tl_vertex *x = &pb->g->v[v];
  double best = INFINITY;
  for (int i = -1; i < (x->e.nin > 1 ? x->e.nin : 0); i++) {
    tl_cost k;
    s_impl_cost(pb, x, i, ext, &k);
    double s = tl_seconds(&pb->w, &k);
    if (s < best) {
      best = s;
      *c = k;
    }
  }
}

/* Seconds of vertex v on ext, and of an edge, as the problem costs them. */
double li_vcost(const tl_fproblem *pb, int v, const int64_t *ext) {
  if (pb->vertex_cost) return pb->vertex_cost(pb->ctx, v, ext);
  tl_cost c;
  tl_vertex_cost(pb, v, ext, &c);
  return tl_seconds(&pb->w, &c);
}

double li_ecost(const tl_fproblem *pb, int u, const int64_t *from, const int64_t *to) {
  const tl_einsum *e = &pb->g->v[u].e;
  int64_t shape[TR_MAX_RANK];
  for (int k = 0; k < e->nout; k++) shape[k] = e->size[e->out[k]];
  tl_tkind kind = tl_transform_kind(e->nout, shape, from, to);
  if (kind == TL_T_IDENTITY) return 0;
  if (pb->edge_cost) return pb->edge_cost(pb->ctx, u, from, to);
  tl_cost c;
  tl_transform_cost(pb, e->nout, shape, from, to, kind, &c);
  return tl_seconds(&pb->w, &c);
}

/* ---- Candidates --------------------------------------------------------------- */

static int s_feasible(const tl_fproblem *pb, int rank, const int64_t *chunk) {
  return s_prod(rank, chunk) * (double)tr_dtype_size(pb->dtype) <= (double)pb->chunk_limit;
}

/* Is chunking ext of v feasible: every chunk it makes fits, and the
** output has the shape v's tensor requires? */
int li_chunking_ok(const tl_fproblem *pb, int v, const int64_t *ext) {
  const tl_vertex *x = &pb->g->v[v];
  const tl_einsum *e = &x->e;
  int64_t ch[TR_MAX_RANK];
  for (int l = 0; l < e->nlabels; l++)
    if (ext[l] < 1 || ext[l] > e->size[l]) return 0;
  li_out_chunk(e, ext, ch);
  if (!s_feasible(pb, e->nout, ch)) return 0;
  if (x->chunk[0] && !s_same(e->nout, ch, x->chunk)) return 0;
  for (int j = 0; j < e->nin; j++) {
    li_operand_chunk(e, j, ext, ch);
    if (!s_feasible(pb, e->rank[j], ch)) return 0;
  }
  return 1;
}

typedef struct s_exts {
  int n, cap;
  int64_t (*x)[TL_MAX_LABELS];
} s_exts;

/* Add chunking ext of v unless it is there already or not feasible. */
static int s_exts_add(const tl_fproblem *pb, int v, s_exts *a, const int64_t *ext) {
  int nl = pb->g->v[v].e.nlabels;
  if (!li_chunking_ok(pb, v, ext)) return TR_OK;
  for (int i = 0; i < a->n; i++)
    if (s_same(nl, a->x[i], ext)) return TR_OK;
  if (a->n == a->cap) {
    int nc = a->cap ? 2 * a->cap : 32;
    int64_t (*nx)[TL_MAX_LABELS] = realloc(a->x, sizeof *nx * (size_t)nc);
    if (!nx) return TR_ENOMEM;
    a->x = nx;
    a->cap = nc;
  }
  memset(a->x[a->n], 0, sizeof a->x[a->n]);
  memcpy(a->x[a->n++], ext, sizeof(int64_t) * (size_t)nl);
  return TR_OK;
}

/* The chunkings of vector d (and, for a vertex whose output shape is
** required, d with that shape on the output labels). */
static int s_add_vector(const tl_fproblem *pb, int v, s_exts *a, const int *d) {
  const tl_vertex *x = &pb->g->v[v];
  const tl_einsum *e = &x->e;
  int64_t ext[TL_MAX_LABELS];
  for (int l = 0; l < e->nlabels; l++) ext[l] = (e->size[l] + d[l] - 1) / d[l];
  if (!x->chunk[0]) return s_exts_add(pb, v, a, ext);
  for (int k = 0; k < e->nout; k++) ext[e->out[k]] = x->chunk[k];
  return s_exts_add(pb, v, a, ext);
}

/*
** The combine spread over the cluster.  EinDecomp sends each group of
** partials to one processor (section 7, "transferring into the
** aggregation"), so a chunking that cuts a summed label into g pieces
** but its output labels into fewer than p has each combine's g partials
** received and added on one site: with the output in one chunk, one
** worker takes in every partial while the others wait.  The aggregation
** is a second EinSum over the output labels alone, whose partition need
** not be the join's: for each chunking ext that cuts a summed label and
** gives fewer than p output pieces, also every chunking that keeps ext on
** the summed labels and cuts the output labels by a vector of p pieces
** over them (section 8.1's enumeration for the aggregation), so that the
** join runs in g x p pieces and every site combines 1/p of the output.
** The summed extents are kept, so stored operands cut on the summed
** label stay re-chunks of what is stored (local copies), not
** repartitions.
*/
static int s_add_spread(const tl_fproblem *pb, int v, s_exts *a, const int64_t *from) {
  const tl_einsum *e = &pb->g->v[v].e;
  int64_t ext[TL_MAX_LABELS]; /* a copy: adding may move *from */
  memcpy(ext, from, sizeof ext);
  double g = 1, o = 1;
  uint64_t outm = 0;
  for (int k = 0; k < e->nout; k++) {
    outm |= 1ull << e->out[k];
    o *= (double)((e->size[e->out[k]] + ext[e->out[k]] - 1) / ext[e->out[k]]);
  }
  for (int l = 0; l < e->nlabels; l++)
    if (!(outm >> l & 1)) g *= (double)((e->size[l] + ext[l] - 1) / ext[l]);
  if (g <= 1 || o >= pb->p || !e->nout || pb->g->v[v].chunk[0]) return TR_OK;
  tl_einsum agg; /* the aggregation: one operand, the output labels */
  memset(&agg, 0, sizeof agg);
  agg.nlabels = agg.nout = agg.rank[0] = e->nout;
  agg.nin = 1;
  for (int k = 0; k < e->nout; k++) {
    agg.size[k] = e->size[e->out[k]];
    agg.in[0][k] = agg.out[k] = k;
  }
  int *vec = NULL, nv = 0, rc;
  tr_err err;
  if ((rc = tl_decomp_vectors(&agg, pb->p, &vec, &nv, &err)))
    return rc == TR_ENOMEM ? rc : TR_OK; /* too many: the join's vectors only */
  int64_t x[TL_MAX_LABELS];
  for (int i = 0; i < nv && !rc; i++) {
    memcpy(x, ext, sizeof x);
    for (int k = 0; k < e->nout; k++)
      x[e->out[k]] = (agg.size[k] + vec[i * e->nout + k] - 1) / vec[i * e->nout + k];
    rc = s_exts_add(pb, v, a, x);
  }
  free(vec);
  return rc;
}

int tl_chunkings(const tl_fproblem *pb, int v, int64_t (**out)[TL_MAX_LABELS], int *n,
                 tr_err *err) {
  const tl_vertex *x = &pb->g->v[v];
  const tl_einsum *e = &x->e;
  s_exts a = {0, 0, NULL};
  int rc = TR_OK, P = 0;
  *out = NULL;
  *n = 0;
  while ((1 << P) < pb->p && P < S_MAX_LOG2P) P++;
  if (x->ext0[0]) rc = s_exts_add(pb, v, &a, x->ext0);
  /* vectors of 1, 2, 4, .. p pieces; more only while none is feasible */
  for (int k = 0; !rc && k <= S_MAX_LOG2P && (k <= P || !a.n); k++) {
    int *vec = NULL, nv = 0;
    if ((rc = tl_decomp_vectors(e, 1 << k, &vec, &nv, err))) break;
    for (int i = 0; i < nv && !rc; i++) rc = s_add_vector(pb, v, &a, &vec[i * e->nlabels]);
    free(vec);
  }
  for (int i = 0, base = a.n; i < base && !rc; i++) rc = s_add_spread(pb, v, &a, a.x[i]);
  if (rc == TR_ENOMEM) tr_seterr(err, rc, "out of memory choosing chunkings of vertex %d", v);
  if (!rc && !a.n)
    rc = tr_seterr(err, TR_ESHAPE,
                   "vertex %d: no chunking of its labels keeps every chunk within %lld bytes", v,
                   (long long)pb->chunk_limit);
  if (rc) {
    free(a.x);
    return rc;
  }
  *out = a.x;
  *n = a.n;
  return TR_OK;
}

/* Index of shape ch among u's candidates, added if new; -1 out of memory. */
static int s_cand_index(li_cands *k, int rank, const int64_t *ch) {
  for (int i = 0; i < k->n; i++)
    if (s_same(rank, k->c[i], ch)) return i;
  if (k->n == k->cap) {
    int nc = k->cap ? 2 * k->cap : 16;
    int64_t (*c)[TR_MAX_RANK] = realloc(k->c, sizeof *c * (size_t)nc);
    if (!c) return -1;
    k->c = c;
    k->cap = nc;
  }
  memset(k->c[k->n], 0, sizeof k->c[k->n]);
  memcpy(k->c[k->n], ch, sizeof(int64_t) * (size_t)rank);
  return k->n++;
}

void li_fctx_free(li_fctx *c) {
  for (int v = 0; c->cand && v < c->g->n; v++) {
    free(c->cand[v].c);
    free(c->cand[v].tr);
  }
  for (int v = 0; c->combo && v < c->g->n; v++) {
    free(c->combo[v].ext);
    free(c->combo[v].pout);
    free(c->combo[v].out);
    free(c->combo[v].cost);
    free(c->combo[v].floor);
  }
  free(c->cand);
  free(c->combo);
  free(c->nread);
}

/* The combos of non-source vertex v: its chunkings, the candidates they
** read and make (added to the candidate lists), and their costs. */
static int s_combos_build(li_fctx *c, int v) {
  const tl_einsum *e = &c->g->v[v].e;
  li_combos *cb = &c->combo[v];
  int rc = tl_chunkings(c->pb, v, &cb->ext, &cb->n, c->err);
  if (rc) return rc;
  cb->nin = e->nin;
  cb->pout = malloc(sizeof *cb->pout * (size_t)(cb->n * (e->nin ? e->nin : 1)));
  cb->out = malloc(sizeof *cb->out * (size_t)cb->n);
  cb->cost = malloc(sizeof *cb->cost * (size_t)cb->n);
  cb->floor = calloc((size_t)cb->n + 1, 1);
  if (!cb->pout || !cb->out || !cb->cost || !cb->floor) return tr_seterr(c->err, TR_ENOMEM, "out of memory");
  for (int i = 0; i < cb->n; i++) {
    int64_t ch[TR_MAX_RANK];
    for (int j = 0; j < e->nin; j++) {
      int u = c->g->v[v].src[j];
      li_operand_chunk(e, j, cb->ext[i], ch);
      if ((cb->pout[i * e->nin + j] = s_cand_index(&c->cand[u], e->rank[j], ch)) < 0)
        return tr_seterr(c->err, TR_ENOMEM, "out of memory");
    }
    li_out_chunk(e, cb->ext[i], ch);
    if ((cb->out[i] = s_cand_index(&c->cand[v], e->nout, ch)) < 0)
      return tr_seterr(c->err, TR_ENOMEM, "out of memory");
    double f = c->pb->vertex_floor ? c->pb->vertex_floor(c->pb->ctx, v, cb->ext[i]) : NAN;
    cb->floor[i] = !isnan(f);
    cb->cost[i] = cb->floor[i] ? f : li_vcost(c->pb, v, cb->ext[i]);
  }
  return TR_OK;
}

int li_settle(li_fctx *c, const int *cpick) {
  int n = 0;
  for (int v = 0; v < c->g->n; v++) {
    li_combos *cb = &c->combo[v];
    int i = cpick[v];
    if (!c->g->v[v].e.nin || i < 0 || !cb->floor[i]) continue;
    cb->cost[i] = li_vcost(c->pb, v, cb->ext[i]);
    cb->floor[i] = 0;
    n++;
  }
  return n;
}

int li_fctx_init(li_fctx *c, const tl_fproblem *pb, tr_err *err) {
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
    const tl_vertex *x = &g->v[v];
    for (int j = 0; j < x->e.nin; j++) c->nread[x->src[j]]++;
    if (x->e.nin) continue;
    int64_t shape[TR_MAX_RANK], ch[TR_MAX_RANK];
    li_shape(g, v, shape);
    for (int k = 0; k < x->e.nout; k++) {
      ch[k] = x->chunk[k] > 0 && x->chunk[k] < shape[k] ? x->chunk[k] : shape[k];
      if (x->chunk[k] <= 0)
        return tr_seterr(err, TR_EINVAL, "source %d: no stored chunk shape for dimension %d", v, k);
    }
    if (s_cand_index(&c->cand[v], x->e.nout, ch) != 0)
      return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  for (int v = 0; v < g->n; v++) {
    if (!g->v[v].e.nin) continue;
    int rc = s_combos_build(c, v);
    if (rc) return rc;
  }
  for (int v = 0; v < g->n; v++) { /* transformations, costed when first asked for */
    li_cands *k = &c->cand[v];
    if (!(k->tr = malloc(sizeof *k->tr * (size_t)(k->n * k->n + 1))))
      return tr_seterr(err, TR_ENOMEM, "out of memory");
    for (int i = 0; i < k->n * k->n; i++) k->tr[i] = NAN;
  }
  return TR_OK;
}

double li_tr(li_fctx *c, int u, int a, int b) {
  li_cands *k = &c->cand[u];
  double *t = &k->tr[a * k->n + b];
  if (isnan(*t)) *t = a == b ? 0 : li_ecost(c->pb, u, k->c[a], k->c[b]);
  return *t;
}

double li_feed(li_fctx *c, const double *Fu, int u, int b, int *arg) {
  const li_cands *k = &c->cand[u];
  double best = INFINITY;
  *arg = 0;
  if (!Fu) { /* a source: only its stored shape */
    return li_tr(c, u, 0, b);
  }
  for (int a = 0; a < k->n; a++) {
    if (isinf(Fu[a])) continue;
    double s = Fu[a] + li_tr(c, u, a, b);
    if (s < best) {
      best = s;
      *arg = a;
    }
  }
  return best;
}

void li_vertex_table(li_fctx *c, int v, double *const *F, const int *skip, double *Fv, int *back) {
  const tl_vertex *x = &c->g->v[v];
  const li_combos *cb = &c->combo[v];
  for (int r = 0; r < c->cand[v].n; r++) {
    Fv[r] = INFINITY;
    back[r] = -1;
  }
  for (int i = 0; i < cb->n; i++) {
    double s = cb->cost[i];
    for (int j = 0; j < cb->nin && !isinf(s); j++) {
      int a, u = x->src[j];
      if (skip && skip[j]) continue;
      s += li_feed(c, c->g->v[u].e.nin ? F[u] : NULL, u, cb->pout[i * cb->nin + j], &a);
    }
    if (s < Fv[cb->out[i]]) {
      Fv[cb->out[i]] = s;
      back[cb->out[i]] = i;
    }
  }
}

