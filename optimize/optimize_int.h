/*
** optimize/optimize_int.h - private to optimize/: implementation-algebra
** (IA) plan trees, what the rewrite rules and the lowering need to know of
** a node, and what the optimizer's files share.
*/
#ifndef TRADB_OPTIMIZE_OPTIMIZE_INT_H
#define TRADB_OPTIMIZE_OPTIMIZE_INT_H

#include "optimize/optimize.h"

#define S_MAX_OPS 48      /* operators in one IA tree */

typedef enum oi_kind {
  IA_SCAN,    /* stored or earlier relation of operand `operand` */
  IA_FILTER,  /* diagonal-key filter of the operands in lab (bit mask) */
  IA_RECHUNK, /* tile + concat to the node's chunking (key map not id) */
  IA_MAP,     /* post transform, npost unary kernels (key map id) */
  IA_BCAST,   /* to every site */
  IA_SHUF,    /* on labels lab */
  IA_DUP,     /* insertDim + duplicate over labels lab (arity > 1) */
  IA_JOIN,    /* local join, npost composed maps */
  IA_PAGG,    /* local partial aggregation (first phase, R2-5) */
  IA_AGG      /* local aggregation by lab = G, npost composed maps,
                 fl composed filter (R1-5) */
} oi_kind;

typedef struct oi_op {
  int8_t kind, nk, operand, npost;
  int8_t kid[TK_MAX_INPUTS];
  unsigned lab, fl;
} oi_op;

typedef struct oi_tree {
  int n;
  oi_op op[S_MAX_OPS];
} oi_tree;

/* What the rules need to know of the node. */
typedef struct oi_ctx {
  const ta_plan *p;
  const ta_node *n;
  int nin;
  unsigned lab[TK_MAX_INPUTS];   /* labels of each operand */
  unsigned dlab[TK_MAX_INPUTS];  /* labels repeated in it (diagonal) */
  unsigned G, K;                 /* output labels, aggregated labels */
  unsigned diag, rechunk;        /* operands with a diagonal, re-chunked */
  int cut;                       /* oi_cut_node: its operand can drive */
} oi_ctx;

/* ---- trees.c ------------------------------------------------------------- */

int oi_pop(uint64_t x);
/* Is node n a map of one operand into finer chunks, each inside one of the
** operand's chunks (a stored operand cut where it is, layout.c)?  Its
** tuples then run where the operand's chunks are. */
int oi_cut_node(const ta_plan *p, const ta_node *n);
/* Wrap op `at` (in place) in a unary op of kind k: the op moves to a new
** slot and `at` becomes the wrapper, so parents need no update. */
int oi_wrap(oi_tree *t, int at, oi_kind k, unsigned lab);
/* Replace op `at` by its only child. */
void oi_lift(oi_tree *t, int at);
/* Swap the unary op `at` with its unary child (their kids stay put). */
void oi_swap(oi_tree *t, int at);
/* Rebuild from the root (op 0), dropping unreachable ops. */
void oi_normalize(oi_tree *t);
unsigned oi_labels_of(const oi_ctx *x, const oi_tree *t, int at);
unsigned oi_operands_of(const oi_tree *t, int at);
/* Partitioning of the relation op `at` makes: 'A' every site, 'H' hashed
** on *lab, 'S' stored (as the catalog placed it; checked when costed),
** 'N' none known (replicated or partial). */
int oi_part(const oi_tree *t, int at, unsigned *lab);
void oi_label_text(const oi_ctx *x, unsigned lab, char *buf, size_t n);
const char *oi_opname(const oi_ctx *x, int operand);
/* Canonical text of the tree below `at` (also what EXPLAIN shows). */
size_t oi_text(const oi_ctx *x, const oi_tree *t, int at, char *buf, size_t n);
/* A hash of that text, without formatting it: equal texts hash equal. */
uint64_t oi_hash(const oi_ctx *x, const oi_tree *t, int at);
/* Table 1: the initial IA plan of the node. */
void oi_initial(const oi_ctx *x, oi_tree *t);
/* Is the op a move (BCAST or SHUF)? */
int oi_move(const oi_op *o);
void oi_ctx_init(oi_ctx *x, const ta_plan *p, int k);

/* ---- rules.c ------------------------------------------------------------- */

/* Apply rule r at op `at` of t; each result goes to out[*nout]. */
void oi_apply(const oi_ctx *x, const oi_tree *t, int at, int r, oi_tree *out, int *nout, int max);

/* ---- search.c ------------------------------------------------------------ */

#define OI_MAX_CANDS 96 /* distinct lowered plans per node */

typedef struct oi_cands {
  int n;
  to_choice c[OI_MAX_CANDS];
} oi_cands;

/* All runnable plans the rules reach from the Table 1 plan of node k
** (*ntrees and fired[] count the IA trees visited and the rules fired). */
int oi_enumerate(const ta_plan *p, int k, oi_cands *out, int *ntrees, int *fired);
/* The optimizer for p in the chunking it has (to_optimize without the
** layout search).  With only (an alternative's name, as the search named
** it before), each node's plans are costed only if they have its name
** there: a remembered statement's plan, costed on today's placement. */
int oi_optimize_plan(const ta_plan *p, const to_env *env, to_placed *pl, const char *force,
                     const char *only, to_opt *o, tr_err *err);
int oi_placed_copy(to_placed *d, const to_placed *s);

/* ---- moves.c ------------------------------------------------------------- */

/* Steps of to_moves_compute's walk of node n with its labels in chunks
** chunk[] beyond which oi_moves_floor's bound stands in for the walk: the
** walk takes some 0.1 us a step, and the layout search walks each
** chunking once for each of the node's plans. */
#define OI_WALK_MAX 65536.0

/* A lower bound on to_moves_compute's seconds for node n with its labels
** in chunks chunk[], whatever the choice, and (*walk) the steps its walk
** takes: its join tuples and, in each, the operand chunks it reads
** (in_chunk[i]: operand i's chunk shape, NULL: chunk[]'s). */
double oi_moves_floor(const ta_node *n, const int64_t *chunk, const int64_t *const *in_chunk,
                      const to_env *env, double *walk);

/* ---- layout.c ------------------------------------------------------------ */

/* Choose the chunking of every node of p (see optimize.h) into p; *info
** says what the search did.  cut: cost reading a stored tensor in finer
** chunks as cutting it where it is (the plan then gets the cuts). */
int oi_layout(ta_plan *p, const to_env *env, const to_placed *pl, int cut, to_layout_info *info,
              tr_err *err);

/* ---- memo.c -------------------------------------------------------------- */

/* The key of to_optimize's inputs, the plan named (force, or NULL)
** among them (the caller frees key). */
typedef struct oi_memokey {
  uint8_t *key;
  size_t len;
  uint64_t hash;
} oi_memokey;
int oi_memo_key(const ta_plan *p, const to_env *env, const to_placed *pl, const char *force,
                oi_memokey *k);
/* 1 and p and *info as decided for key k, or 0 (p untouched). */
int oi_memo_find(to_memo *m, const oi_memokey *k, ta_plan *p, to_layout_info *info);
/* Remember the decision for key k (which it takes over: k->key NULL
** after), replacing the least recently used. */
void oi_memo_keep(to_memo *m, oi_memokey *k, const ta_plan *p, const to_layout_info *info);

/* ---- lower.c ------------------------------------------------------------- */

/* Lower tree t to a choice; 0 if the executor cannot run it as it is. */
int oi_lower(const oi_ctx *x, const oi_tree *t, to_choice *c);

/* The rules: how many, and rule r's name (EXPLAIN, to_opt.fired). */
int oi_rule_count(void);
const char *oi_rule_name(int r);

#endif /* TRADB_OPTIMIZE_OPTIMIZE_INT_H */
