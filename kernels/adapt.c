/*
** kernels/adapt.c - what every backend shares: the check of a contraction
** (tk_contract_check) and of the arguments of combine, map and copy, and
** those three written as contractions (kernels/kernels_int.h), so that a
** backend with a contract serves them through it and all backends accept
** and refuse the same calls.
*/
#include "config.h"

#include <string.h>

#include "kernels/kernels_int.h"

static int s_dtype_ok(tr_dtype dt) { return dt == TR_F32 || dt == TR_F64; }

int tk_contract_check(const tk_contract *op) {
  if (!s_dtype_ok(op->dtype)) return TR_ETYPE;
  if (op->nlabels < 0 || op->nlabels > TK_MAX_LABELS || op->nout < 0 ||
      op->nout > op->nlabels || op->ninputs < 0 ||
      op->ninputs > TK_MAX_INPUTS || (unsigned)op->agg > TK_AGG_MIN ||
      (op->agg == TK_AGG_NONE && op->nout != op->nlabels) || !op->out ||
      tk_prog_depth(&op->prog) < 0)
    return TR_EINVAL;
  for (int l = 0; l < op->nlabels; l++)
    if (op->extent[l] < 0) return TR_EINVAL;
  for (int i = 0; i < op->prog.n; i++) {
    const tk_insn *in = &op->prog.code[i];
    if (in->op == TK_OP_INPUT && (in->arg >= op->ninputs || !op->in[in->arg]))
      return TR_EINVAL;
  }
  return TR_OK;
}

/* out[l] (agg)= in[l] over a box of rank labels with the given strides:
** the contraction that combine, map and copy each specialize. */
static void s_box(tk_contract *op, tr_dtype dt, int rank, const int64_t *extent, void *out,
                  const int64_t *out_stride, const void *in, const int64_t *in_stride,
                  const tr_cancel *cancel) {
  memset(op, 0, sizeof *op);
  op->dtype = dt;
  op->nlabels = op->nout = rank;
  for (int l = 0; l < rank; l++) {
    op->extent[l] = extent[l];
    op->in_stride[0][l] = in_stride[l];
    op->out_stride[l] = out_stride[l];
  }
  op->ninputs = 1;
  op->in[0] = in;
  op->out = out;
  op->prog.n = 1;
  op->prog.code[0].op = TK_OP_INPUT; /* input 0 as it is */
  op->cancel = cancel;               /* polled where the call runs on the host */
}

int tk_combine_contract(tr_dtype dt, tk_agg agg, void *dst, const void *src, int64_t n,
                        const tr_cancel *cancel, tk_contract *op) {
  static const int64_t one = 1;
  if (!s_dtype_ok(dt)) return TR_ETYPE;
  if ((unsigned)agg > TK_AGG_MIN || n < 0) return TR_EINVAL;
  if (n == 0) return 0;
  s_box(op, dt, 1, &n, dst, &one, src, &one, cancel);
  op->agg = agg; /* dst = agg(dst, src); NONE: src */
  op->accumulate = 1;
  return 1;
}

int tk_map_contract(tr_dtype dt, const tk_prog *prog, void *x, int64_t n,
                    const tr_cancel *cancel, tk_contract *op) {
  static const int64_t one = 1;
  if (!s_dtype_ok(dt)) return TR_ETYPE;
  if (n < 0 || tk_prog_depth(prog) < 0) return TR_EINVAL;
  for (int i = 0; i < prog->n; i++)
    if (prog->code[i].op == TK_OP_INPUT && prog->code[i].arg != 0) return TR_EINVAL;
  if (n == 0) return 0;
  s_box(op, dt, 1, &n, x, &one, x, &one, cancel);
  op->prog = *prog;
  return 1;
}

int tk_copy_contract(tr_dtype dt, int rank, const int64_t *extent, void *dst,
                     const int64_t *dst_stride, const void *src, const int64_t *src_stride,
                     const tr_cancel *cancel, tk_contract *op) {
  if (!s_dtype_ok(dt)) return TR_ETYPE;
  if (rank < 0 || rank > TK_MAX_LABELS) return TR_EINVAL;
  for (int d = 0; d < rank; d++) {
    if (extent[d] < 0) return TR_EINVAL;
    if (extent[d] == 0) return 0;
  }
  s_box(op, dt, rank, extent, dst, dst_stride, src, src_stride, cancel);
  return 1;
}
