/*
** layout/tree.c - the format search's entry point and the DP of the
** thesis's chapter 6 for tree-shaped graphs.
**
** Sources keep their stored format (F = 0 there, infinity for any other;
** they may be transformed on their edges), a sink takes the shape its
** tensor was declared with or is free.  A tree-shaped graph (no
** non-source vertex read twice) runs
**
**   F(v, rho) = min over chunkings i of v with output rho of  i.c
**               + sum_j min over a of F(v_j, a) + t.c(a -> i's operand j)
**
** then traces back from the cheapest F of each sink.  DAGs run chapter
** 7's frontier DP, or EinDecomp's DP along paths when a frontier table
** would be too large (dag.c).
*/
#include "config.h"
#include "layout/layout_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Chapter 6: trees ---------------------------------------------------------- */

typedef struct s_tree {
  double **F; /* per vertex, per candidate (sources: NULL) */
  int **back; /* per non-source vertex, per candidate: the combo reaching it */
} s_tree;

/* Label v with candidate rho and trace back into its operands. */
static void s_tree_trace(li_fctx *c, const s_tree *t, int v, int rho, int *pick, int *cpick) {
  pick[v] = rho;
  const tl_vertex *x = &c->g->v[v];
  if (!x->e.nin) return;
  const li_combos *cb = &c->combo[v];
  int i = t->back[v][rho];
  cpick[v] = i;
  for (int j = 0; j < x->e.nin; j++) {
    int u = x->src[j], a;
    li_feed(c, t->F[u], u, cb->pout[i * cb->nin + j], &a);
    s_tree_trace(c, t, u, a, pick, cpick);
  }
}

static int s_tree_dp(li_fctx *c, int *pick, int *cpick) {
  const tl_graph *g = c->g;
  s_tree t = {calloc((size_t)g->n, sizeof(double *)), calloc((size_t)g->n, sizeof(int *))};
  int rc = TR_OK;
  if (!t.F || !t.back) {
    rc = tr_seterr(c->err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int v = 0; v < g->n; v++) {
    if (!g->v[v].e.nin) continue;
    int n = c->cand[v].n;
    t.F[v] = malloc(sizeof(double) * (size_t)n);
    t.back[v] = malloc(sizeof(int) * (size_t)n);
    if (!t.F[v] || !t.back[v]) {
      rc = tr_seterr(c->err, TR_ENOMEM, "out of memory");
      goto done;
    }
    li_vertex_table(c, v, t.F, NULL, t.F[v], t.back[v]);
  }
  for (int v = 0; v < g->n; v++) {
    if (c->nread[v] || !g->v[v].e.nin) continue;
    int best = 0;
    for (int r = 1; r < c->cand[v].n; r++)
      if (t.F[v][r] < t.F[v][best]) best = r;
    if (isinf(t.F[v][best])) {
      rc = tr_seterr(c->err, TR_ESHAPE, "no feasible choice of formats reaches vertex %d", v);
      goto done;
    }
    s_tree_trace(c, &t, v, best, pick, cpick);
  }
done:
  for (int v = 0; v < g->n; v++) {
    if (t.F) free(t.F[v]);
    if (t.back) free(t.back[v]);
  }
  free(t.F);
  free(t.back);
  return rc;
}

/* ---- Entry point ------------------------------------------------------------------ */

double tl_formats_cost(const tl_fproblem *pb, tl_fchoice *ch) {
  const tl_graph *g = pb->g;
  double total = 0;
  for (int v = 0; v < g->n; v++) {
    const tl_vertex *x = &g->v[v];
    ch[v].seconds = 0;
    if (!x->e.nin) {
      int64_t shape[TR_MAX_RANK];
      li_shape(g, v, shape);
      for (int k = 0; k < x->e.nout; k++)
        ch[v].chunk[k] = x->chunk[k] > 0 && x->chunk[k] < shape[k] ? x->chunk[k] : shape[k];
      continue;
    }
    if (!li_chunking_ok(pb, v, ch[v].ext)) return INFINITY;
    li_out_chunk(&x->e, ch[v].ext, ch[v].chunk);
    double s = li_vcost(pb, v, ch[v].ext);
    for (int j = 0; j < x->e.nin; j++) {
      int u = x->src[j];
      int64_t to[TR_MAX_RANK], shape[TR_MAX_RANK];
      li_shape(g, u, shape);
      li_operand_chunk(&x->e, j, ch[v].ext, to);
      ch[v].tf[j] = tl_transform_kind(x->e.rank[j], shape, ch[u].chunk, to);
      s += li_ecost(pb, u, ch[u].chunk, to);
    }
    ch[v].seconds = s;
    total += s;
  }
  return total;
}

int tl_formats(const tl_fproblem *pb, tl_fmode mode, tl_fplan **out, tr_err *err) {
  *out = NULL;
  int rc = tl_graph_check(pb->g, err);
  if (rc) return rc;
  if (pb->p < 1 || pb->sites < 1 || pb->threads < 1 || pb->chunk_limit < 1)
    return tr_seterr(err, TR_EINVAL, "bad problem: %d pieces, %d sites, %d threads", pb->p,
                     pb->sites, pb->threads);
  const tl_graph *g = pb->g;
  li_fctx c;
  tl_fplan *plan = calloc(1, sizeof *plan);
  int *pick = malloc(sizeof *pick * (size_t)g->n), *cpick = malloc(sizeof *cpick * (size_t)g->n);
  if (plan) plan->v = calloc((size_t)g->n, sizeof *plan->v);
  rc = li_fctx_init(&c, pb, err);
  if (!rc && (!plan || !plan->v || !pick || !cpick))
    rc = tr_seterr(err, TR_ENOMEM, "out of memory choosing formats");
  if (rc) goto done;
  for (int v = 0; v < g->n; v++) pick[v] = cpick[v] = -1;
  int tree = 1;
  for (int v = 0; v < g->n; v++)
    if (g->v[v].e.nin && c.nread[v] > 1) tree = 0;
  if (mode == TL_FMODE_TREE && !tree) {
    rc = tr_seterr(err, TR_EINVAL, "the graph is not a tree: a vertex is read twice");
    goto done;
  }
  plan->n = g->n;
  plan->dag = mode == TL_FMODE_DAG || mode == TL_FMODE_PATHS || (mode == TL_FMODE_AUTO && !tree);
  /* Searched again whenever the choice holds a chunking costed by its
  ** bound alone, that chunking now costed: each round computes one more
  ** cost, and the last chose on exact costs only. */
  do {
    for (int v = 0; v < g->n; v++) pick[v] = cpick[v] = -1;
    if (!plan->dag) {
      rc = s_tree_dp(&c, pick, cpick);
    } else if (mode == TL_FMODE_PATHS || plan->linearised) {
      plan->linearised = 1;
      rc = li_paths_dp(&c, pick, cpick);
    } else {
      int too_big = 0;
      rc = li_frontier_dp(&c, pick, cpick, &plan->max_class, &too_big);
      if (rc && too_big && mode == TL_FMODE_AUTO) {
        tr_clearerr(err);
        plan->linearised = 1;
        for (int v = 0; v < g->n; v++) pick[v] = cpick[v] = -1;
        rc = li_paths_dp(&c, pick, cpick);
      }
    }
  } while (!rc && li_settle(&c, cpick));
  if (rc) goto done;
  for (int v = 0; v < g->n; v++) {
    if (!g->v[v].e.nin) continue;
    plan->candidates += c.combo[v].n;
    tr_assert(cpick[v] >= 0);
    memcpy(plan->v[v].ext, c.combo[v].ext[cpick[v]], sizeof plan->v[v].ext);
  }
  plan->seconds = tl_formats_cost(pb, plan->v);
  *out = plan;
  plan = NULL;
done:
  li_fctx_free(&c);
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
