/*
** layout/dag.c - the format search over DAGs, where a vertex's result is
** read by several others and the tree DP (format.c) would compute it once
** per reader.
**
** Chapter 7's frontier DP: vertices move one at a time (in the graph's
** order) from the unoptimised to the optimised side; the optimised
** vertices still read by an unoptimised one form the frontier,
** partitioned into equivalence classes of vertices that share an ancestor
** (a vertex counting as its own ancestor), and F is kept per class over
** the joint formats of its members (equation 7.1).  Source matrices are
** excluded from "shared ancestor": their formats are fixed, so sharing one
** couples nothing, and counting them would put every vertex of a network
** that reads one weight matrix into one class.  Adding v merges the
** classes holding its arguments with v; members that no unoptimised
** vertex reads any more are minimised out.  Every other class stays as it
** was: a frontier vertex that shares an ancestor with v shares one with an
** argument of v, so it is in an argument's class already.  Exact, but a
** class's table is the product of its members' candidate counts.
**
** When a table would exceed S_MAX_TABLE entries, EinDecomp's linearisation
** (section 8.4) takes over: the longest path (in vertices) of vertices not
** yet labelled is optimised by the tree DP along it alone, its last vertex
** takes its cheapest entry and the path is labelled by tracing back; then
** the next longest path.  An operand from off the path is costed from
** what is already fixed (a source, or a vertex labelled on an earlier
** path: its transformation counts) or, from a vertex still unlabelled,
** not at all (the paper ignores both its subgraph and its repartition).
*/
#include "config.h"
#include "layout/layout_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_TABLE (1 << 20) /* entries one equivalence class may need */

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
  int too_big;   /* a class's table would exceed S_MAX_TABLE entries */
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
static int s_dag_move(li_fctx *c, s_dag *d, int v) {
  const tl_vertex *x = &c->g->v[v];
  const li_combos *cb = &c->combo[v];
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
      d->too_big = 1;
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
      if (!c->g->v[x->src[j]].e.nin) base += li_tr(c, x->src[j], 0, pout[j]);
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
            if (x->src[j] == u) s += li_tr(c, u, a, pout[j]);
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

int li_frontier_dp(li_fctx *c, int *pick, int *cpick, int *max_class, int *too_big) {
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
  *too_big = d.too_big;
  s_dag_free(&d);
  return rc;
}


/* ---- EinDecomp 8.4: path by path ------------------------------------------------ */

/* The longest path (in vertices) of unlabelled non-source vertices,
** producer first, into path[]; its length (0: all labelled). */
static int s_longest_path(const li_fctx *c, const int *cpick, int *len, int *path) {
  const tl_graph *g = c->g;
  int start = -1, n = 0;
  for (int v = g->n - 1; v >= 0; v--) {
    len[v] = 0;
    if (!g->v[v].e.nin || cpick[v] >= 0) continue;
    len[v] = 1;
    for (int r = v + 1; r < g->n; r++) /* readers come after their producers */
      for (int j = 0; j < g->v[r].e.nin; j++)
        if (g->v[r].src[j] == v && len[r] + 1 > len[v]) len[v] = len[r] + 1;
  }
  for (int v = 0; v < g->n; v++)
    if (len[v] && (start < 0 || len[v] > len[start])) start = v;
  for (int v = start; v >= 0; n++) {
    path[n] = v;
    int next = -1;
    for (int r = v + 1; r < g->n && next < 0; r++)
      for (int j = 0; j < g->v[r].e.nin; j++)
        if (g->v[r].src[j] == v && len[r] == len[v] - 1) next = r;
    v = next;
  }
  return n;
}

int li_paths_dp(li_fctx *c, int *pick, int *cpick) {
  const tl_graph *g = c->g;
  int rc = TR_OK, n;
  int *len = malloc(sizeof *len * (size_t)g->n), *path = malloc(sizeof *path * (size_t)g->n);
  double **F = calloc((size_t)g->n, sizeof *F);
  int **back = calloc((size_t)g->n, sizeof *back);
  if (!len || !path || !F || !back) {
    rc = tr_seterr(c->err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int v = 0; v < g->n; v++) {
    pick[v] = g->v[v].e.nin ? -1 : 0;
    cpick[v] = -1;
    if (!g->v[v].e.nin) continue;
    F[v] = malloc(sizeof **F * (size_t)c->cand[v].n);
    back[v] = malloc(sizeof **back * (size_t)c->cand[v].n);
    if (!F[v] || !back[v]) {
      rc = tr_seterr(c->err, TR_ENOMEM, "out of memory");
      goto done;
    }
  }
  while ((n = s_longest_path(c, cpick, len, path)) > 0) {
    for (int i = 0; i < n; i++) {
      int v = path[i], skip[TL_MAX_OPERANDS] = {0};
      for (int j = 0; j < g->v[v].e.nin; j++) {
        int u = g->v[v].src[j];
        if (!g->v[u].e.nin || (i && u == path[i - 1])) continue; /* source, or on the path */
        if (cpick[u] < 0) { /* unlabelled, off the path: not counted */
          skip[j] = 1;
          continue;
        }
        for (int a = 0; a < c->cand[u].n; a++) F[u][a] = a == pick[u] ? 0 : INFINITY;
      }
      li_vertex_table(c, v, F, skip, F[v], back[v]);
    }
    /* the cheapest entry of the path's last vertex, traced back along it */
    int last = path[n - 1], r = 0;
    for (int a = 1; a < c->cand[last].n; a++)
      if (F[last][a] < F[last][r]) r = a;
    if (isinf(F[last][r])) {
      rc = tr_seterr(c->err, TR_ESHAPE, "no feasible choice of formats reaches vertex %d", last);
      goto done;
    }
    for (int i = n - 1; i >= 0; i--) {
      int v = path[i];
      pick[v] = r;
      cpick[v] = back[v][r];
      if (!i) break;
      const li_combos *cb = &c->combo[v];
      for (int j = 0; j < g->v[v].e.nin; j++)
        if (g->v[v].src[j] == path[i - 1]) {
          li_feed(c, F[path[i - 1]], path[i - 1], cb->pout[cpick[v] * cb->nin + j], &r);
          break;
        }
    }
  }
done:
  for (int v = 0; v < g->n; v++) {
    if (F) free(F[v]);
    if (back) free(back[v]);
  }
  free(F);
  free(back);
  free(len);
  free(path);
  return rc;
}
