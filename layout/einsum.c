/*
** layout/einsum.c - what every part of layout/ checks before it trusts
** its input: that an EinSum is well formed and that a graph's operands
** have their producers' shapes.  The searches index arrays by label and
** operand numbers taken from the caller, so they run only on input that
** passed here.
*/
#include "config.h"
#include "layout/layout.h"

int tl_einsum_check(const tl_einsum *e, tr_err *err) {
  if (e->nlabels < 0 || e->nlabels > TL_MAX_LABELS)
    return tr_seterr(err, TR_EINVAL, "%d labels: at most %d", e->nlabels, TL_MAX_LABELS);
  if (e->nin < 0 || e->nin > TL_MAX_OPERANDS)
    return tr_seterr(err, TR_EINVAL, "%d operands: at most %d", e->nin, TL_MAX_OPERANDS);
  if (e->nout < 0 || e->nout > TR_MAX_RANK)
    return tr_seterr(err, TR_EINVAL, "output rank %d: at most %d", e->nout, TR_MAX_RANK);
  for (int l = 0; l < e->nlabels; l++)
    if (e->size[l] <= 0)
      return tr_seterr(err, TR_ESHAPE, "label %d has size %lld", l, (long long)e->size[l]);
  uint64_t bound = 0;
  for (int j = 0; j < e->nin; j++) {
    if (e->rank[j] < 0 || e->rank[j] > TR_MAX_RANK)
      return tr_seterr(err, TR_EINVAL, "operand %d has rank %d", j, e->rank[j]);
    for (int k = 0; k < e->rank[j]; k++) {
      int l = e->in[j][k];
      if (l < 0 || l >= e->nlabels)
        return tr_seterr(err, TR_EINVAL, "operand %d dimension %d: no label %d", j, k, l);
      bound |= 1ull << l;
    }
  }
  uint64_t seen = 0;
  for (int k = 0; k < e->nout; k++) {
    int l = e->out[k];
    if (l < 0 || l >= e->nlabels)
      return tr_seterr(err, TR_EINVAL, "output dimension %d: no label %d", k, l);
    if (seen & (1ull << l))
      return tr_seterr(err, TR_ESHAPE, "output label %d appears twice", l);
    seen |= 1ull << l;
    if (e->nin > 0 && !(bound & (1ull << l)))
      return tr_seterr(err, TR_ESHAPE, "output label %d is read by no operand", l);
  }
  return TR_OK;
}

int tl_graph_check(const tl_graph *g, tr_err *err) {
  if (g->n <= 0 || !g->v) return tr_seterr(err, TR_EINVAL, "empty graph");
  for (int v = 0; v < g->n; v++) {
    const tl_vertex *x = &g->v[v];
    tr_err sub;
    int rc = tl_einsum_check(&x->e, &sub);
    if (rc) return tr_seterr(err, rc, "vertex %d: %s", v, sub.msg);
    for (int j = 0; j < x->e.nin; j++) {
      int u = x->src[j];
      if (u < 0 || u >= v)
        return tr_seterr(err, TR_EINVAL, "vertex %d operand %d: producer %d does not come before it",
                         v, j, u);
      const tl_einsum *pe = &g->v[u].e;
      if (pe->nout != x->e.rank[j])
        return tr_seterr(err, TR_ESHAPE, "vertex %d operand %d has rank %d, its producer %d %d", v, j,
                         x->e.rank[j], u, pe->nout);
      for (int k = 0; k < pe->nout; k++)
        if (pe->size[pe->out[k]] != x->e.size[x->e.in[j][k]])
          return tr_seterr(err, TR_ESHAPE,
                           "vertex %d operand %d dimension %d has size %lld, its producer %d %lld", v,
                           j, k, (long long)x->e.size[x->e.in[j][k]], u,
                           (long long)pe->size[pe->out[k]]);
    }
  }
  return TR_OK;
}
