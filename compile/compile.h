/*
** compile/compile.h - a statement's syntax tree bound to the catalog and
** compiled to the tensor relational algebra (TRA): the plan, a list of
** EinSum nodes over relations, that the optimizer and the executor take.
*/
#ifndef TRADB_COMPILE_COMPILE_H
#define TRADB_COMPILE_COMPILE_H

#include "util/util.h"
#include "util/grid.h"
#include "kernels/kernels.h"
#include "catalog/catalog.h"
#include "parse/parse.h"

/* ---- Plans ------------------------------------------------------------ */

/*
** A statement compiles to a plan: the relations it reads and writes, and a
** list of EinSum nodes in dependency order.  Each node is one TRA
** join followed by one TRA aggregation (EinDecomp section 4):
**
**   out = AGG_(groupBy out labels)( JOIN_(shared labels, kernel)(in_0, ...) )
**
** where every operand's key is mapped onto the node's labels (ReKey; a
** label repeated within one operand keeps only the diagonal keys, a
** Filter), an operand whose chunking differs from the node's is re-chunked
** first (Tile + Concat), and unary work on the result is fused as a
** Transform applied before the chunk is stored.
*/
#define TA_MAX_RELS 64  /* relations in one plan */
#define TA_MAX_NODES 32 /* EinSum nodes in one plan */

typedef enum ta_rel_kind {
  TA_REL_STORED, /* a tensor in the catalog */
  TA_REL_TEMP,   /* an intermediate, made on the workers, then dropped */
  TA_REL_OUTPUT  /* the statement's result, committed at the end */
} ta_rel_kind;

typedef struct ta_rel {
  ta_rel_kind kind;   /* where its chunks come from */
  tr_tensor meta;     /* name, dtype, shape and chunk shape */
  int pending;        /* STORED: the output of an earlier statement of the
                         same block, not yet in the catalog */
  int iota;           /* STORED, not in the catalog: made for the run, each
                         element its index (rank 1: 0 .. n-1), the index
                         operand of ARGMAX / ARGMIN */
  int declared;       /* OUTPUT: the user declared the tensor's chunks
                         (CREATE TENSOR .. CHUNK): dchunk, which the
                         layout search keeps */
  int64_t dchunk[TR_MAX_RANK]; /* that chunk shape */
} ta_rel;

typedef struct ta_operand {
  int rel;                   /* index into ta_plan.rels */
  int rank;                  /* rank of the relation */
  int label[TR_MAX_RANK];    /* node label index of each dimension */
} ta_operand;

typedef struct ta_node {
  int nlabels;                           /* labels of the join */
  int nout;                              /* leading labels that are kept */
  char lname[TK_MAX_LABELS][TP_NAME_MAX];/* label names (for EXPLAIN) */
  int64_t size[TK_MAX_LABELS];           /* extent of each label */
  int64_t chunk[TK_MAX_LABELS];          /* chunk size of each label */
  int ninputs;                           /* operands */
  ta_operand in[TK_MAX_INPUTS];          /* operands, as prog numbers them */
  tk_prog prog;                          /* join kernel's scalar function */
  tk_agg agg;                            /* aggregation over the rest */
  tk_prog post;                          /* fused transform (n == 0: none) */
  int out;                               /* relation written */
  int gemm;                              /* SUM of in0 * in1: BLAS path */
  int drive;                             /* -1: a task computes whole output
                                            chunks; else a join tuple is
                                            computed only where this
                                            operand's chunk was sent (its
                                            chunk ids are in the task), and
                                            output chunks may be partial */
  int mirror;                            /* a Gram product's output blocks
                                            below the diagonal are made as
                                            the transposes of their mirrors
                                            above it, on the same site
                                            (set per run: optimize's moves,
                                            ta_gemm_mirror) */
} ta_node;

/* A product of three or more operands inside one aggregation, compiled
** to pairwise steps (nodes first .. last) in the order of least flops. */
typedef struct ta_split {
  int first, last;   /* its nodes */
  int exact;         /* 1: the order is the DP's optimum; 0: greedy's */
  double flops;      /* of all its steps (opt_einsum's count) */
  char order[256];   /* e.g. "(A[i,j] (B[j,k] C[k,l]))" */
  char inlined[256]; /* the block's outputs read through the products that
                        made them, e.g. "T2 as C[k,m'] * D[m',j]" (ta_compile) */
} ta_split;

typedef struct ta_plan {
  int nrels;                      /* relations used */
  ta_rel rels[TA_MAX_RELS];       /* stored inputs, temps, the output */
  int nnodes;                     /* EinSum nodes */
  ta_node nodes[TA_MAX_NODES];    /* in the order they run */
  int nsplits;                    /* products split into steps */
  ta_split splits[TA_MAX_NODES];  /* them (EXPLAIN) */
} ta_plan;

/* Compile flags. */
#define TA_SPLIT 1u /* split products of three or more operands inside an
                       aggregation (SUM of a product, MAX or MIN of a sum)
                       into pairwise steps, in the order of least cost
                       (layout/'s tl_order_find) */

/* Bind an assignment (TP_ST_ASSIGN or TP_ST_EXPLAIN) to the catalog db
** and build its plan.  pend[0..npend) are the outputs of earlier
** statements of an open block, not yet in the catalog: a name found there
** is bound to them first; defs[k] (or defs NULL) is the statement that
** made pend[k].  flags: TA_SPLIT or 0.  With TA_SPLIT and defs, a product
** reading a block's output made by a product may read it through that
** product's factors, where that takes at most half the flops (inline.c;
** EXPLAIN says so). */
int ta_compile(tc_db *db, const tr_tensor *pend, const tp_stmt *const *defs, int npend,
               const tp_stmt *s, unsigned flags, ta_plan *plan, tr_err *err);
/* Append plan src (a later statement of a block) to dst: relations it
** reads that earlier statements write become those outputs. */
int ta_plan_append(ta_plan *dst, const ta_plan *src, tr_err *err);
/* A gemm node's scalar function is  left right MUL : the pc where the
** right factor starts, or -1 when the program does not end in a multiply
** of two factors.  A factor that is not one INPUT is an elementwise
** producer fused into the product. */
int ta_gemm_split(const tk_prog *p);
/* Floats BLAS packs for gemm node n running a join tuple of extents box
** (per label), in pieces of piece[l] along label l (0: whole; NULL: no
** pieces): each factor's operand blocks once a call, so once for every
** piece along a label kept on the other factor only.  0 when n's program
** is not a product of two factors. */
double ta_gemm_packed(const ta_node *n, const int64_t *box, const int64_t *piece);
/* The share of a full gemm's terms that gemm node n does on its join
** tuple at keys lkey (per label; output labels alone are read): 1/2 for a
** Gram product's diagonal block, X[k,i] * X[k,j] where i and j have the
** same key and chunk, since the executor gives it to the backend's syrk
** (kernels.h: the same matrix read both ways); else 1. */
double ta_gemm_share(const ta_node *n, const int64_t *lkey);
/* The next join tuple of an output chunk after keys lkey (per label):
** an odometer over the summed labels, nout.. nlabels - 1. */
void ta_next_tuple(const ta_node *n, int64_t *lkey);
/* Gram product n's two kept labels, *li read by the left factor and *lj
** at the same places by the right, or 0 when n is none: a product of
** two factors that are one function (the same program, constants alike)
** of the same relations, read alike but for those two labels, in chunks
** alike along them; no other output label.  X[k,i] * X[k,j], or a
** covariance's (X[n,i] - mu[i]) * (X[n,j] - mu[j]): G[i,j] = G[j,i], and
** on a block where i and j have the same keys the factors are alike. */
int ta_gram_labels(const ta_node *n, int *li, int *lj);
/* Whether the output block at keys lkey (per label; output labels alone
** are read) of Gram product n, X[k,i] * X[k,j] with i and j in chunks
** alike, lies below the diagonal (i's key above j's): the transpose of
** its mirror, the block at the keys swapped, which *mkey gets (may be
** NULL).  Such a block costs a copy, not a gemm, where its mirror is
** made on the same site (the executor, exec.c, with node.mirror). */
int ta_gemm_mirror(const ta_node *n, const int64_t *lkey, int64_t *mkey);
/* Into how many pieces along its first output label node n cuts each of
** its last output chunks on a site of `threads` threads, when the site's
** chunks do not fill its threads evenly: the n mod threads chunks left
** after the full rounds, each run by all the threads in pieces of its
** rows, in place of one thread each (0: not cut).  On 2 local workers of
** 2 threads on 2 cores, a 3072^3 product in 9 tiles placed 5 and 4 took
** 0.36 s on the site of 5 and 0.25 s on the other: after the 4 tiles of
** each the fifth ran alone on one core.  Not for a Gram product (its
** diagonal blocks go to syrk whole, and blocks below it are their
** mirrors' transposes), nor where a piece would be under TA_PIECE_MIN
** rows (each piece packs the factor without that label again).  The
** executor (exec.c) runs the pieces; the cost model (optimize/moves.c)
** spreads that tail over the site's threads. */
int ta_tail_pieces(const ta_node *n, int threads);
/* Can node n run on the gemm path: a SUM of two factors reading disjoint,
** non-empty sets of operands, no label twice on one factor, every summed
** label on both, a fused factor's labels all on one of its operands. */
int ta_gemm_ok(const ta_node *n);
/* Label l of node n, its operands stored as in[0..ninputs): the stride
** at which a join tuple is run piece by piece along l, so that each
** piece reads one stored chunk of every operand along l (where it is, not
** copied together with its neighbours; along an output label each piece
** writes its part of the output chunk), or 0 when the tuple runs whole:
** no operand is stored in chunks finer than the node's along l, their
** chunk sizes along l are not multiples of the finest, or the finest is
** under TA_PIECE_MIN (many small kernel calls would cost more than the
** copy they save).  The executor runs the pieces and the cost model
** counts no copy for them.
**
** A gemm node's pieces along a label kept on one factor only are also
** copied together when they are under TA_PIECE_KEPT and packing the other
** factor once a piece would handle more than TA_PIECE_COPY times the
** floats the copy moves.  BLAS packs each factor once a call: pieces along
** a summed label pack each factor once, as one call would, but pieces
** along a kept label pack the other factor again for each.  One core,
** C = A B with M = N = 1024, K = 4096: A in 128-row pieces ran at 121
** GFLOP/s against 144 with the pieces copied together first, 512-row
** pieces at 139 against 147; K in 128-long pieces at 148 against 134
** copied.  A copy lands in fresh memory and is packed too: as make bench
** runs them, chain3-square's 3072^3 products copied from 1024-row tiles
** into 1536-row strips ran 5% slower, and nn-wide's projection copied
** from 512-row blocks 4-8% slower, than in pieces. */
#define TA_PIECE_MIN 128
#define TA_PIECE_COPY 4   /* a float copied together, in floats packed again */
#define TA_PIECE_KEPT 512 /* pieces this long along a kept label always run */
int64_t ta_label_piece(const ta_node *n, const tr_tensor *const *in, int l);
/* The elementwise factors fused into node k's product, as text, e.g.
** "(X[n,d] - q[d])" (two joined by " and "), or NULL when none is
** (caller frees). */
char *ta_node_fused(const ta_plan *p, int k);
/* The TRA expression of a plan as text (caller frees). */
char *ta_plan_explain(const ta_plan *plan);

#endif /* TRADB_COMPILE_COMPILE_H */
