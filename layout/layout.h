/*
** layout/layout.h - how the EinSums of a statement are laid out before they
** run, chosen by cost:
**
**   1. the order in which a product of three or more operands inside one
**      aggregation is contracted pairwise (exact DP over operand subsets,
**      opt_einsum's 'optimal'/'dp'; greedy beyond a few operands);
**
** A pure module: it takes its own descriptions of EinSums (label ids,
** label sizes, operand label lists), never the engine's plans,
** so the engine can build them from whatever form its nodes have.  Calls
** keep no state, print nothing, and allocate only scratch they free.
** Status: TR_OK or a negative TR_E* code with a message in err
** (util/util.h).
**
** Contract for callers:
**  - labels of an EinSum are numbered 0 .. nlabels-1, each with one size;
**  - the ordering of (1) is valid only where the join function distributes
**    over the aggregation (SUM of products, MAX/MIN of sums); the caller
**    decides that, this module only costs the orders.
*/
#ifndef TRADB_LAYOUT_H
#define TRADB_LAYOUT_H

#include <stdint.h>
#include "util/util.h"
#include "kernels/kernels.h"

#define TL_MAX_LABELS 64   /* distinct labels of one EinSum: one bit each */
#define TL_MAX_OPERANDS 32 /* operands of one EinSum */
#define TL_ORDER_DP_MAX 10 /* operands up to which the ordering is exact */

/* One EinSum: out[out labels] = AGG over the other labels of
** f(in_0[labels], in_1[labels], ...). */
typedef struct tl_einsum {
  int nlabels;                          /* labels, numbered 0 .. nlabels-1 */
  int64_t size[TL_MAX_LABELS];          /* extent of each label (> 0) */
  int nin;                              /* operands */
  int rank[TL_MAX_OPERANDS];            /* dimensions of each operand */
  int in[TL_MAX_OPERANDS][TR_MAX_RANK]; /* label of each operand dimension; a
                                           label repeated within one operand
                                           reads its diagonal */
  int nout;                             /* dimensions of the output */
  int out[TR_MAX_RANK];                 /* label of each output dimension,
                                           distinct, each read by an operand */
} tl_einsum;

/* TR_OK if e is well formed (labels in range, sizes positive, output
** labels distinct and bound by an operand); else TR_EINVAL/TR_ESHAPE. */
int tl_einsum_check(const tl_einsum *e, tr_err *err);

/* ---- 1. Contraction order -------------------------------------------- */

/* One pairwise contraction.  Tensors are numbered 0 .. nin-1 for the
** operands and nin + k for the result of step k. */
typedef struct tl_step {
  int a, b;       /* the two tensors joined, a < b */
  uint64_t join;  /* labels the step's join sees (bit per label) */
  uint64_t keep;  /* labels its result keeps: those a later operand or the
                     output needs; the rest are summed out here.  The last
                     step keeps the output labels, in e->out's order */
  double flops;   /* opt_einsum's count: product of the join label sizes,
                     twice that when a label is summed out */
  double size;    /* elements of the result */
} tl_step;

typedef struct tl_order {
  int nsteps;                          /* nin - 1 */
  tl_step step[TL_MAX_OPERANDS - 1];   /* in the order they run */
  double flops;                        /* all steps */
  double max_size;                     /* largest result of a step */
  int exact;                           /* 1: the DP's optimum; 0: greedy */
} tl_order;

/* Limits a search keeps every step within (0: the default). */
typedef struct tl_order_opts {
  int max_join;  /* labels one step may see (default TK_MAX_LABELS, what
                    one kernel task takes) */
  int max_keep;  /* labels an intermediate may keep (default: no bound but
                    max_join; TR_MAX_RANK where intermediates are stored as
                    tensors); the output is exempt */
  int dp_max;    /* operands up to which the DP runs (default
                    TL_ORDER_DP_MAX; 1: always greedy) */
} tl_order_opts;

/* The pairwise order of least flops for e's product (nin >= 2), within
** the limits of opts (NULL: defaults).  Up to dp_max operands: exact, by
** DP over operand subsets.  Beyond: greedy, then the written left-to-right
** order if that is cheaper.  TR_ESHAPE if no order found keeps every step
** within the limits. */
int tl_order_find(const tl_einsum *e, const tl_order_opts *opts, tl_order *out, tr_err *err);

/* Cost a given order: pair[k] = the two tensors step k joins (numbered as
** in tl_step); steps beyond the limits are allowed here (see tl_order_fits).
** TR_EINVAL if the pairs are not a valid order of nin - 1 steps. */
int tl_order_eval(const tl_einsum *e, const int (*pair)[2], tl_order *out, tr_err *err);
/* 1 if every step of o is within the limits of opts (NULL: defaults). */
int tl_order_fits(const tl_order *o, const tl_order_opts *opts);

#endif /* TRADB_LAYOUT_H */
