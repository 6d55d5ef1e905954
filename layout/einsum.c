/*
** layout/einsum.c - what every part of layout/ checks before it trusts
** its input: that an EinSum is well formed.  The searches index arrays by
** label and operand numbers taken from the caller, so they run only on
** input that passed here.
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
