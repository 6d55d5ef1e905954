/*
** optimize/layout.c - auto layout: the chunking every node of a plan
** computes in, chosen by layout/'s format search over the plan's graph,
** with the optimizer's own costs.
**
** The graph: a vertex per stored relation the plan reads (a source, in
** its stored chunk shape) and one per node (its EinSum: the node's labels
** and operands), so a statement's nested aggregations, the pairwise steps
** of a multi-operand product and the statements of a block are one
** graph; an output whose chunks the user declared keeps them (a sink of
** fixed format), every other tensor's format is free.  Each node's
** candidates are EinDecomp partition vectors for 1, 2, 4, .. sites x
** threads pieces of work, plus the chunking its stored operands imply
** (what `declared` layout runs).
**
** The costs are the optimizer's, in seconds, so the search and the
** final plan agree:
**  - a vertex under a chunking: the cheapest IA plan the rewrite rules
**    reach for the node with its operands already in that chunking, its
**    moves computed exactly (moves.c) on a canonical placement (chunk lin
**    on site lin mod m, as FILL and the hash of a full output key place
**    them); a stored operand whose chunking is kept sits where the
**    catalog says;
**  - an edge: re-chunking the tensor from the producer's chunk shape to
**    the consumer's, each new chunk assembled on its canonical site from
**    the old chunks overlapping it (sent whole, once per site, as the
**    executor sends them), copying every element.
** The IA plans of a node are enumerated once, on its first chunking:
** which plans the rules reach depends on its labels and operands, not on
** chunk sizes.
*/
#include "config.h"
#include "optimize/optimize_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The graph of a plan and what the cost callbacks need. */
typedef struct s_lay {
  const ta_plan *p;
  const to_env *env;
  const to_placed *pl;            /* stored placements, by relation */
  tl_vertex v[TA_MAX_RELS + TA_MAX_NODES];
  int nv;
  int vrel[TA_MAX_RELS + TA_MAX_NODES];  /* relation of each vertex (its output) */
  int vnode[TA_MAX_RELS + TA_MAX_NODES]; /* node of each vertex, -1: a source */
  int relv[TA_MAX_RELS];          /* vertex producing each relation, -1 */
  oi_cands *cands[TA_MAX_NODES];  /* IA plans per node, made on first use */
  ta_plan *mini;                  /* scratch: one node in one chunking */
  int cut;                        /* stored operands read in finer chunks
                                     are cut where they are (s_cut_stored) */
  int failed;                     /* out of memory in a callback */
} s_lay;

/* Chunk lin of a tensor with n chunks on site lin mod m. */
static int s_canonical(int64_t n, int m, to_placed *out) {
  memset(out, 0, sizeof *out);
  out->has = malloc(sizeof *out->has * (size_t)(n + 1));
  out->prim = malloc((size_t)n + 1);
  if (!out->has || !out->prim) {
    to_placed_free(out);
    return TR_ENOMEM;
  }
  out->n = n;
  for (int64_t l = 0; l < n; l++) {
    out->prim[l] = (int8_t)(l % m);
    out->has[l] = 1ull << (l % m);
  }
  return TR_OK;
}

static int s_same(int rank, const int64_t *a, const int64_t *b) {
  for (int d = 0; d < rank; d++)
    if (a[d] != b[d]) return 0;
  return 1;
}

/* Where stored tensor t (its chunks placed as pl) is assembled when read
** in chunk shape `to`: each new chunk on the site that already holds the
** most of the stored chunks its box overlaps (counted in floats; a tie
** goes to the primary holder of the first of them, then to the canonical
** site), so that replicas which happen to sit together are read where
** they are (a row block and its neighbour's replica make one chunk of
** twice the rows with nothing moved).  The executor moves exactly what
** this placement needs; before, the search assumed every re-chunked
** chunk was made on site lin mod m.  The search with cuts places its
** operands so; without them, a node reads the stored chunks themselves
** (s_in_flight). */
static int s_assembled(const tr_tensor *t, const to_placed *pl, const int64_t *to, int m, to_placed *out) {
  tr_tensor b = *t;
  memcpy(b.chunk, to, sizeof(int64_t) * (size_t)b.rank);
  int64_t nb = tr_nchunks(&b);
  if (s_canonical(nb, m, out)) return TR_ENOMEM;
  for (int64_t c = 0; c < nb; c++) {
    int64_t key[TR_MAX_RANK], lo[TR_MAX_RANK], ext[TR_MAX_RANK], first[TR_MAX_RANK], last[TR_MAX_RANK],
        k[TR_MAX_RANK];
    double held[TO_MAX_SITES] = {0};
    int lead = -1;
    tr_key_from_linear(&b, c, key);
    tr_chunk_extent(&b, key, ext);
    for (int d = 0; d < b.rank; d++) lo[d] = key[d] * b.chunk[d];
    tr_chunks_under(t, lo, ext, first, last);
    memcpy(k, first, sizeof k);
    for (;;) {
      int64_t o = tr_key_linear(t, k), ok[TR_MAX_RANK], oext[TR_MAX_RANK];
      tr_key_from_linear(t, o, ok);
      double fl = (double)tr_chunk_extent(t, ok, oext);
      if (lead < 0) lead = pl->prim[o];
      for (int u = 0; u < m; u++)
        if (pl->has[o] >> u & 1) held[u] += fl;
      if (!tr_key_next(t->rank, k, first, last)) break;
    }
    int best = (int)(c % m);
    if (lead >= 0 && lead < m && held[lead] >= held[best]) best = lead;
    for (int u = 0; u < m; u++)
      if (held[u] > held[best]) best = u;
    out->prim[c] = (int8_t)best;
    out->has[c] = 1ull << best;
  }
  return TR_OK;
}

/* ---- The graph -------------------------------------------------------------- */

static int s_source(s_lay *L, int rel) {
  const tr_tensor *t = &L->p->rels[rel].meta;
  tl_vertex *x = &L->v[L->nv];
  memset(x, 0, sizeof *x);
  x->e.nlabels = x->e.nout = t->rank;
  for (int d = 0; d < t->rank; d++) {
    x->e.size[d] = t->shape[d];
    x->e.out[d] = d;
    x->chunk[d] = t->chunk[d];
  }
  L->vrel[L->nv] = rel;
  L->vnode[L->nv] = -1;
  L->relv[rel] = L->nv;
  return L->nv++;
}

static void s_graph(s_lay *L) {
  const ta_plan *p = L->p;
  for (int r = 0; r < TA_MAX_RELS; r++) L->relv[r] = -1;
  for (int k = 0; k < p->nnodes; k++) {
    const ta_node *n = &p->nodes[k];
    for (int i = 0; i < n->ninputs; i++)
      if (L->relv[n->in[i].rel] < 0) s_source(L, n->in[i].rel);
    tl_vertex *x = &L->v[L->nv];
    memset(x, 0, sizeof *x);
    tl_einsum *e = &x->e;
    e->nlabels = n->nlabels;
    for (int l = 0; l < n->nlabels; l++) {
      e->size[l] = n->size[l];
      x->ext0[l] = n->chunk[l];
    }
    e->nin = n->ninputs;
    for (int i = 0; i < n->ninputs; i++) {
      e->rank[i] = n->in[i].rank;
      for (int d = 0; d < n->in[i].rank; d++) e->in[i][d] = n->in[i].label[d];
      x->src[i] = L->relv[n->in[i].rel];
    }
    e->nout = n->nout;
    for (int d = 0; d < n->nout; d++) e->out[d] = d;
    x->kernel = n->gemm ? TL_K_GEMM : n->agg == TK_AGG_NONE ? TL_K_ELEMWISE : TL_K_CONTRACT;
    const ta_rel *o = &p->rels[n->out];
    if (o->kind == TA_REL_OUTPUT && o->declared)
      for (int d = 0; d < n->nout; d++)
        x->chunk[d] = o->dchunk[d] < n->size[d] ? o->dchunk[d] : n->size[d];
    L->vrel[L->nv] = n->out;
    L->vnode[L->nv] = k;
    L->relv[n->out] = L->nv++;
  }
}

/* ---- The costs ------------------------------------------------------------------ */

/* The seconds of the busiest site among per-site components c[0..m). */
static double s_busiest(const to_env *env, const tl_cost *c) {
  double best = 0;
  for (int u = 0; u < env->m; u++) {
    double t = tl_seconds(&env->w, &c[u]);
    if (t > best) best = t;
  }
  return best;
}

/* Is stored relation rel read in another chunking as the join reads it
** (re-chunked in flight, the search without cuts), rather than made in
** that chunking first (a cut, or a tensor without a placement)?  Then its
** vertex reads it as stored, so that the moves, the boxes copied together
** (for each join tuple) and the pieces read where they are, on whichever
** replica holds them, are costed exactly as the final plan will be:
** costed on pieces assumed made on one holder, a dense layer's 512 x
** 16384 input in one chunk was split on the other operand's 64 columns
** instead of its own rows, each task then packing all of the input (a
** 0.012 s gemm where a row half takes 0.010 s). */
static int s_in_flight(const s_lay *L, int rel) {
  const ta_rel *r = &L->p->rels[rel];
  return !L->cut && r->kind == TA_REL_STORED && !r->pending && !r->iota &&
         L->pl[rel].n == tr_nchunks(&r->meta);
}

/* Vertex v (a node) with its operands already in chunking ext. */
static double s_vertex(void *ctx, int v, const int64_t *ext) {
  s_lay *L = ctx;
  const ta_plan *p = L->p;
  int k = L->vnode[v], nin = p->nodes[k].ninputs;
  ta_plan *q = L->mini;
  to_placed mpl[TK_MAX_INPUTS + 1];
  int own[TK_MAX_INPUTS + 1] = {0};
  double best = INFINITY;
  memset(mpl, 0, sizeof mpl);
  q->nnodes = 1;
  q->nrels = nin + 1;
  ta_node *n = &q->nodes[0];
  *n = p->nodes[k];
  for (int l = 0; l < n->nlabels; l++) n->chunk[l] = ext[l];
  for (int i = 0; i <= nin && !L->failed; i++) {
    int rel = i < nin ? p->nodes[k].in[i].rel : p->nodes[k].out;
    ta_rel *r = &q->rels[i];
    *r = p->rels[rel];
    if (i < nin) {
      r->kind = TA_REL_STORED;
      r->meta.version = 1;
      for (int d = 0; d < r->meta.rank; d++) r->meta.chunk[d] = ext[n->in[i].label[d]];
      n->in[i].rel = i;
      const ta_rel *orig = &p->rels[rel];
      if (orig->kind == TA_REL_STORED && L->pl[rel].n &&
          (s_same(r->meta.rank, r->meta.chunk, orig->meta.chunk) || s_in_flight(L, rel))) {
        /* borrowed: where the catalog says it is, in its stored chunks,
        ** read in the node's as the join will read it (s_in_flight) */
        memcpy(r->meta.chunk, orig->meta.chunk, sizeof r->meta.chunk);
        mpl[i] = L->pl[rel];
      } else {
        own[i] = 1;
        int stored = orig->kind == TA_REL_STORED && L->pl[rel].n == tr_nchunks(&orig->meta);
        if (stored ? s_assembled(&orig->meta, &L->pl[rel], r->meta.chunk, L->env->m, &mpl[i])
                   : s_canonical(tr_nchunks(&r->meta), L->env->m, &mpl[i]))
          L->failed = 1;
      }
    } else {
      for (int d = 0; d < n->nout; d++) r->meta.chunk[d] = ext[d];
      n->out = i;
    }
  }
  if (!L->failed && !L->cands[k]) {
    int ntrees = 0, fired[TO_MAX_RULES] = {0};
    if (!(L->cands[k] = calloc(1, sizeof *L->cands[k])) ||
        oi_enumerate(q, 0, L->cands[k], &ntrees, fired))
      L->failed = 1;
  }
  for (int c = 0; !L->failed && c < L->cands[k]->n; c++) {
    to_moves mv;
    tr_err e2;
    if (to_moves_compute(q, 0, &L->cands[k]->c[c], L->env, mpl, &mv, 0, &e2)) {
      if (e2.code == TR_ENOMEM) L->failed = 1;
      continue;
    }
    if (mv.seconds < best) best = mv.seconds;
    to_moves_free(&mv);
  }
  for (int i = 0; i < nin; i++)
    if (own[i]) to_placed_free(&mpl[i]);
  return best;
}

/* The operand chunk shapes node n's walk reads: a stored operand's as
** stored (read in flight), any other in the node's chunking (NULL). */
static void s_in_chunks(const ta_plan *p, const ta_node *n, const to_placed *pl, const int64_t **in_chunk) {
  for (int i = 0; i < n->ninputs; i++) {
    const ta_rel *r = &p->rels[n->in[i].rel];
    in_chunk[i] = r->kind == TA_REL_STORED && pl[n->in[i].rel].n ? r->meta.chunk : NULL;
  }
}

/* A bound on s_vertex's seconds where walking the node's plans in
** chunking ext would be dear (oi_moves_floor), else NAN: the search costs
** that chunking only if it would choose it on the bound.  A 400 x 400
** product stored in 2 x 2 chunks: 8 million join tuples in the stored
** chunking, walked for each of its plans, took the search 25 s. */
static double s_vertex_floor(void *ctx, int v, const int64_t *ext) {
  s_lay *L = ctx;
  const ta_node *n = &L->p->nodes[L->vnode[v]];
  const int64_t *in_chunk[TK_MAX_INPUTS];
  double walk;
  s_in_chunks(L->p, n, L->pl, in_chunk);
  double floor = oi_moves_floor(n, ext, in_chunk, L->env, &walk);
  return walk > OI_WALK_MAX ? floor : NAN;
}

/* Re-chunking u's tensor from chunk shape `from` to `to`. */
static double s_edge(void *ctx, int u, const int64_t *from, const int64_t *to) {
  s_lay *L = ctx;
  const ta_rel *r = &L->p->rels[L->vrel[u]];
  tr_tensor a = r->meta, b = r->meta;
  int m = L->env->m;
  to_placed canon, *src = &canon;
  tl_cost c[TO_MAX_SITES];
  double out = INFINITY;
  memcpy(a.chunk, from, sizeof(int64_t) * (size_t)a.rank);
  memcpy(b.chunk, to, sizeof(int64_t) * (size_t)b.rank);
  memset(c, 0, sizeof c);
  memset(&canon, 0, sizeof canon);
  /* a stored relation in its stored chunks */
  int stored = L->vnode[u] < 0 && s_same(a.rank, from, r->meta.chunk);
  if (stored && s_in_flight(L, L->vrel[u]))
    return 0; /* the vertices reading it cost its re-chunking (s_in_flight) */
  int64_t na = tr_nchunks(&a), nb = tr_nchunks(&b);
  uint64_t *sent = calloc((size_t)na + 1, sizeof *sent);
  if (stored && L->pl[L->vrel[u]].n == na)
    src = (to_placed *)&L->pl[L->vrel[u]];
  else if (s_canonical(na, m, &canon))
    L->failed = 1;
  if (!sent) L->failed = 1;
  /* a stored tensor cut into finer chunks, when the plan cuts it where
  ** it is (s_cut_stored): each piece copied on its chunk's holder */
  int nested = L->cut && src != &canon && r->kind == TA_REL_STORED && !r->pending && !r->iota &&
               tr_chunk_nests(a.rank, to, from);
  /* a stored tensor's new chunks are made where s_vertex assumes them */
  to_placed at;
  memset(&at, 0, sizeof at);
  if (src != &canon && !nested && s_assembled(&a, src, to, m, &at)) L->failed = 1;
  for (int64_t t = 0; t < nb && !L->failed; t++) {
    int64_t key[TR_MAX_RANK], lo[TR_MAX_RANK], ext[TR_MAX_RANK], first[TR_MAX_RANK], last[TR_MAX_RANK],
        k[TR_MAX_RANK];
    int s = at.n ? at.prim[t] : (int)(t % m);
    tr_key_from_linear(&b, t, key);
    if (nested) {
      int64_t hk[TR_MAX_RANK];
      for (int d = 0; d < a.rank; d++) hk[d] = key[d] * b.chunk[d] / a.chunk[d];
      int h = src->prim[tr_key_linear(&a, hk)];
      c[h < 0 ? s : h].c[TL_C_ELEMWISE] += (double)tr_chunk_extent(&b, key, ext);
      continue;
    }
    c[s].c[TL_C_ELEMWISE] += (double)tr_chunk_extent(&b, key, ext); /* the copy into it */
    for (int d = 0; d < a.rank; d++) lo[d] = key[d] * b.chunk[d];
    tr_chunks_under(&a, lo, ext, first, last);
    memcpy(k, first, sizeof k);
    for (;;) { /* the old chunks its box overlaps, each sent to s once */
      int64_t o = tr_key_linear(&a, k), oext[TR_MAX_RANK];
      if (!(src->has[o] >> s & 1) && !(sent[o] >> s & 1)) {
        int64_t ok[TR_MAX_RANK];
        tr_key_from_linear(&a, o, ok);
        double fl = (double)tr_chunk_extent(&a, ok, oext);
        sent[o] |= 1ull << s;
        c[s].c[TL_C_NET] += fl;
        if (src->prim[o] >= 0) c[src->prim[o]].c[TL_C_NET] += fl;
      }
      if (!tr_key_next(a.rank, k, first, last)) break;
    }
  }
  if (!L->failed) out = s_busiest(L->env, c);
  free(sent);
  to_placed_free(&canon);
  to_placed_free(&at);
  return out;
}

/* ---- The search ---------------------------------------------------------------- */

int oi_layout(ta_plan *p, const to_env *env, const to_placed *pl, int cut, to_layout_info *info,
              tr_err *err) {
  double t0 = tr_now();
  s_lay *L = calloc(1, sizeof *L);
  tl_fplan *plan = NULL;
  int rc = TR_OK;
  memset(info, 0, sizeof *info);
  info->ran = 1;
  if (!L || !(L->mini = calloc(1, sizeof *L->mini))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  L->p = p;
  L->env = env;
  L->pl = pl;
  L->cut = cut;
  s_graph(L);
  tr_dtype dt = TR_F32;
  for (int i = 0; i < p->nrels; i++)
    if (p->rels[i].meta.dtype == TR_F64) dt = TR_F64;
  tl_graph g = {L->nv, L->v};
  int64_t limit = env->chunk_limit < env->chunk_max ? env->chunk_limit : env->chunk_max;
  tl_fproblem pb = {&g, env->m * (env->threads > 0 ? env->threads : 1), limit, dt,
                    env->m, env->threads > 0 ? env->threads : 1, env->w, s_vertex, s_edge, s_vertex_floor, L};
  info->pieces = pb.p;
  rc = tl_formats(&pb, TL_FMODE_AUTO, &plan, err);
  if (!rc && L->failed) rc = tr_seterr(err, TR_ENOMEM, "out of memory choosing the layout");
  if (rc) goto done;
  for (int k = 0; k < p->nnodes; k++) {
    ta_node *n = &p->nodes[k];
    const tl_fchoice *ch = &plan->v[L->relv[n->out]];
    for (int l = 0; l < n->nlabels; l++) n->chunk[l] = ch->ext[l];
    for (int d = 0; d < n->nout; d++) p->rels[n->out].meta.chunk[d] = ch->ext[d];
  }
  info->search_s = plan->seconds;
  info->candidates = plan->candidates;
  info->dag = plan->dag;
  info->linearised = plan->linearised;
  info->max_class = plan->max_class;
done:
  if (L) {
    for (int k = 0; k < TA_MAX_NODES; k++) free(L->cands[k]);
    free(L->mini);
  }
  free(L);
  tl_fplan_destroy(&plan);
  info->ms = (tr_now() - t0) * 1e3;
  return rc;
}

/* ---- Cutting stored operands where they are --------------------------------- */

/* Is node c a cut (s_cut_stored): a temporary that copies its one
** operand? */
static int s_is_cut(const ta_plan *p, const ta_node *c) {
  return c->ninputs == 1 && p->rels[c->out].kind == TA_REL_TEMP && c->agg == TK_AGG_NONE &&
         c->prog.n == 1 && c->prog.code[0].op == TK_OP_INPUT && !c->post.n;
}

/* p with every stored operand that a node reads in finer chunks cut into
** them first, by a node of its own that runs where the stored chunks are
** (a copy, no transfer): the reading node then moves only the pieces it
** needs, where re-chunking in flight sends it whole stored chunks.  On a
** common large dimension stored in row blocks, a product partitioned on
** that dimension needs a quarter of each block on each of 4 sites.
** Returns the cuts made (0: none applies, or no room). */
static int s_cut_stored(ta_plan *p) {
  int cuts = 0;
  for (int k = 0; k < p->nnodes; k++) {
    ta_node *n = &p->nodes[k];
    for (int i = 0; i < n->ninputs; i++) {
      ta_operand *o = &n->in[i];
      const ta_rel *src = &p->rels[o->rel];
      int64_t chunk[TR_MAX_RANK];
      int diag = 0;
      for (int d = 0; d < o->rank; d++) {
        chunk[d] = n->chunk[o->label[d]];
        for (int d2 = d + 1; d2 < o->rank; d2++) diag |= o->label[d] == o->label[d2];
      }
      /* a diagonal is filtered, not cut */
      if (src->kind != TA_REL_STORED || src->pending || src->iota || diag ||
          !tr_chunk_nests(o->rank, chunk, src->meta.chunk) || s_same(o->rank, chunk, src->meta.chunk))
        continue;
      /* the same pieces for another reader: cut once */
      int t = -1;
      for (int j = 0; j < k && t < 0; j++) {
        const ta_node *c = &p->nodes[j];
        if (s_is_cut(p, c) && c->in[0].rel == o->rel && s_same(o->rank, p->rels[c->out].meta.chunk, chunk))
          t = c->out;
      }
      if (t < 0) {
        if (p->nnodes >= TA_MAX_NODES || p->nrels >= TA_MAX_RELS) return cuts;
        ta_rel *r = &p->rels[p->nrels];
        *r = *src;
        r->kind = TA_REL_TEMP;
        snprintf(r->meta.name, TR_NAME_MAX, "_cut%d", ++cuts);
        memcpy(r->meta.chunk, chunk, sizeof chunk);
        ta_node c;
        memset(&c, 0, sizeof c);
        c.nlabels = c.nout = o->rank;
        for (int d = 0; d < o->rank; d++) {
          snprintf(c.lname[d], sizeof c.lname[d], "%s", n->lname[o->label[d]]);
          c.size[d] = src->meta.shape[d];
          c.chunk[d] = chunk[d];
          c.in[0].label[d] = d;
        }
        c.ninputs = 1;
        c.in[0].rel = o->rel;
        c.in[0].rank = o->rank;
        c.prog.n = 1;
        c.prog.code[0].op = TK_OP_INPUT;
        c.prog.code[0].arg = 0;
        c.out = t = p->nrels++;
        c.drive = -1;
        memmove(&p->nodes[k + 1], &p->nodes[k], sizeof *p->nodes * (size_t)(p->nnodes - k));
        p->nodes[k] = c;
        p->nnodes++;
        for (int s = 0; s < p->nsplits; s++) {
          if (p->splits[s].first >= k) p->splits[s].first++;
          if (p->splits[s].last >= k) p->splits[s].last++;
        }
        n = &p->nodes[++k];
        o = &n->in[i];
      }
      o->rel = t;
    }
  }
  return cuts;
}

/* Does every relation p writes have chunks a worker accepts? */
static int s_writable(const ta_plan *p, int64_t max) {
  for (int k = 0; k < p->nnodes; k++) {
    const tr_tensor *t = &p->rels[p->nodes[k].out].meta;
    double bytes = (double)tr_dtype_size(t->dtype);
    for (int d = 0; d < t->rank; d++) bytes *= (double)t->chunk[d];
    if (bytes > (double)max) return 0;
  }
  return 1;
}

/* Outputs the user declared chunks for get them, whichever chunking runs:
** the node making one computes in them on its output labels. */
static void s_declared(ta_plan *p) {
  for (int k = 0; k < p->nnodes; k++) {
    ta_node *n = &p->nodes[k];
    ta_rel *o = &p->rels[n->out];
    if (o->kind != TA_REL_OUTPUT || !o->declared) continue;
    for (int d = 0; d < n->nout; d++)
      n->chunk[d] = o->meta.chunk[d] = o->dchunk[d] < n->size[d] ? o->dchunk[d] : n->size[d];
  }
}

/* What a new chunking must win by against a plan of `s` seconds: more
** than the model resolves, 5%, and at least a round trip's time (below
** that, tiny tensors would be cut up for microseconds the model cannot
** see). */
static double s_margin(const to_env *env, double s) {
  return fmax(TO_LAYOUT_MARGIN * s, env->w.w[TL_C_PHASES]);
}

/* to_optimize in auto layout: the chunking searched for, with and
** without cuts, against the declared one. */
static int s_optimize_auto(ta_plan *p, const to_env *env, to_placed *pl, const char *force, to_opt *o,
                           tr_err *err) {
  s_declared(p);
  ta_plan *q = malloc(sizeof *q);
  to_layout_info info;
  to_opt od, oa;
  tr_err aerr;
  if (!q) return tr_seterr(err, TR_ENOMEM, "out of memory");
  *q = *p;
  int rl = oi_layout(q, env, pl, 0, &info, &aerr);
  int ra = rl ? rl : oi_optimize_plan(q, env, pl, force, NULL, &oa, &aerr);
  /* The declared chunking, unless it makes a chunk no worker accepts, or
  ** unless its walk would be dear and its join tuples' calls alone
  ** (oi_moves_floor) take longer than the chunking found, by more than
  ** that must win by: it cannot run then, and its plans are not walked
  ** (the 400 x 400 product in 2 x 2 chunks: 45 s more of search). */
  double floor = 0, walk = 0;
  for (int k = 0; k < p->nnodes; k++) {
    const int64_t *in_chunk[TK_MAX_INPUTS];
    double wk;
    s_in_chunks(p, &p->nodes[k], pl, in_chunk);
    floor += oi_moves_floor(&p->nodes[k], p->nodes[k].chunk, in_chunk, env, &wk);
    walk += wk;
  }
  int past = !ra && !force && walk > OI_WALK_MAX && oa.seconds < floor - s_margin(env, floor);
  int rd = past ? TR_ENOTFOUND
           : s_writable(p, env->chunk_max) ? oi_optimize_plan(p, env, pl, force, NULL, &od, err)
                                           : tr_seterr(err, TR_ESHAPE, "too large a chunk");
  /* and searched again with stored operands read in finer chunks cut
  ** where they are first: taken when cheaper than both (or the plan named
  ** is one of its).  Measured on 4 local workers (make bench-opt): a common
  ** large dimension stored in row or column blocks, 0.113-0.118 s in RMM,
  ** 0.102 s cut and in CMM; a tensor stored as one chunk cut on its only
  ** holder took 0.104 s against 0.094 s re-chunked in flight, when the
  ** model saw 2% in the cut's favour.  Against what would run without
  ** it, not only the other search's chunking: that one may come within
  ** the margin of the declared chunking and lose to it below, while the
  ** cut beats the declared by more (the common large dimension in row
  ** blocks: 0.104 s cut, 0.110 s re-chunked in flight, 0.115 s declared,
  ** predicted). */
  ta_plan *qc = malloc(sizeof *qc);
  to_layout_info cinfo;
  if (qc) {
    to_opt oc;
    tr_err cerr;
    *qc = *p;
    if (!oi_layout(qc, env, pl, 1, &cinfo, &cerr) && s_cut_stored(qc) &&
        !oi_optimize_plan(qc, env, pl, force, NULL, &oc, &cerr)) {
      /* by more than the model resolves, as a new chunking must (below),
      ** against what would run without it */
      double ref = !ra && (rd || oa.seconds < od.seconds - s_margin(env, od.seconds)) ? oa.seconds
                   : !rd ? od.seconds : INFINITY;
      if (isinf(ref) || oc.seconds < ref - s_margin(env, ref)) {
        if (!ra) to_opt_free(&oa);
        oa = oc;
        *q = *qc;
        info = cinfo;
        info.cut = 1;
        ra = 0;
      } else {
        to_opt_free(&oc);
      }
    }
    free(qc);
  }
  info.auto_s = ra ? NAN : oa.seconds;
  if (ra) { /* its first clause: a forced plan's error goes on to list them all */
    snprintf(info.why, sizeof info.why, "%.150s", aerr.msg);
    info.why[strcspn(info.why, ";")] = '\0';
  }
  info.declared_s = past ? floor : rd ? NAN : od.seconds;
  info.declared_floor = past;
  /* a new chunking must win by the margin */
  if (!ra && (rd || oa.seconds < od.seconds - s_margin(env, od.seconds))) {
    if (!rd) to_opt_free(&od);
    *p = *q;
    *o = oa;
    info.used = 1;
  } else if (!rd) {
    if (!ra) to_opt_free(&oa);
    *o = od;
  } else {
    /* neither: the error that says most (a forced plan's names, an
    ** unreadable chunk) is the declared chunking's, unless that one
    ** could not run at all */
    if (rd == TR_ESHAPE) *err = aerr;
    free(q);
    return rd == TR_ESHAPE ? ra : rd;
  }
  o->layout = info;
  free(q);
  return TR_OK;
}

int to_optimize(ta_plan *p, const to_env *env, to_placed *pl, const char *force, to_opt *o,
                tr_err *err) {
  /* before the layout search, whose per-site arrays hold TO_MAX_SITES */
  if (env->m < 1 || env->m > TO_MAX_SITES)
    return tr_seterr(err, TR_EINVAL, "the optimizer places on 1 to %d sites, not %d", TO_MAX_SITES, env->m);
  if (env->layout != TO_LAYOUT_AUTO || !p->nnodes)
    return oi_optimize_plan(p, env, pl, force, NULL, o, err);
  /* A plan named (EXPLAIN ANALYZE ... PLAN) is remembered under its name:
  ** its chunkings are those searched for with that plan, which may not be
  ** the ones the search keeps for the statement alone.  bench-opt runs
  ** each alternative again and again: searched afresh each time, a dense
  ** layer's forced plan took 18.1 ms against 15.2 ms for the same plan
  ** chosen and remembered (medians of 20 each, the same makespan). */
  oi_memokey key = {0};
  if (!env->memo || oi_memo_key(p, env, pl, force, &key)) return s_optimize_auto(p, env, pl, force, o, err);
  to_layout_info info;
  int rc;
  if (oi_memo_find(env->memo, &key, p, &info)) {
    /* and the IA plan chosen then, costed alone: the rewrite search is
    ** what is left of the optimizer's time on a short statement (6-8 ms
    ** of a 3-product chain's 0.1 s, 4 local workers); all of them again
    ** for EXPLAIN, or when that plan no longer runs on this placement */
    int narrow = !env->alternatives && info.plan[0];
    rc = oi_optimize_plan(p, env, pl, narrow ? NULL : force, narrow ? info.plan : NULL, o, err);
    if (rc && narrow) {
      narrow = 0;
      rc = oi_optimize_plan(p, env, pl, force, NULL, o, err);
    }
    if (!rc) {
      o->layout = info;
      o->layout.remembered = 1;
      o->layout.narrowed = narrow;
    }
  } else if (!(rc = s_optimize_auto(p, env, pl, force, o, err))) {
    snprintf(o->layout.plan, sizeof o->layout.plan, "%s", o->alt[o->chosen].name);
    oi_memo_keep(env->memo, &key, p, &o->layout);
  }
  free(key.key);
  return rc;
}
