/*
** layout/layout_int.h - private to layout/: what the format search's
** files share (format.c builds the candidates and costs them, tree.c is
** the entry point and the tree DP, dag.c the searches over DAGs).
*/
#ifndef TRADB_LAYOUT_INT_H
#define TRADB_LAYOUT_INT_H

#include "layout/layout.h"

/* The chunk shapes a vertex's tensor may take: for a source its stored
** one first (index 0); for any vertex the outputs of its own chunkings
** and the shapes its readers' chunkings give the operands it feeds. */
typedef struct li_cands {
  int n, cap;
  int64_t (*c)[TR_MAX_RANK]; /* chunk shapes */
  double *tr;                /* n x n, seconds of the transformation a -> b,
                                NAN until asked for (li_tr) */
} li_cands;

/* The chunkings of one non-source vertex, and what each implies. */
typedef struct li_combos {
  int n, nin;
  int64_t (*ext)[TL_MAX_LABELS]; /* label extents of each */
  int *pout;                     /* n x nin: candidate of each operand's
                                    producer it reads */
  int *out;                      /* its output candidate */
  double *cost;                  /* the vertex's seconds under it */
  char *floor;                   /* 1: cost is vertex_floor's bound, not
                                    yet computed (li_settle) */
} li_combos;

typedef struct li_fctx {
  const tl_fproblem *pb;
  const tl_graph *g;
  li_cands *cand;   /* per vertex */
  li_combos *combo; /* per non-source vertex */
  int *nread;       /* operand edges reading each vertex */
  tr_err *err;
} li_fctx;

/* Build the candidates and chunkings of pb's graph (format.c); free them. */
int li_fctx_init(li_fctx *c, const tl_fproblem *pb, tr_err *err);
void li_fctx_free(li_fctx *c);

/* Is chunking ext of v feasible (every chunk fits, the output has the
** shape required)?  Seconds of v under ext and of an edge, as the problem
** costs them (an identity edge costs 0). */
int li_chunking_ok(const tl_fproblem *pb, int v, const int64_t *ext);
double li_vcost(const tl_fproblem *pb, int v, const int64_t *ext);
double li_ecost(const tl_fproblem *pb, int u, const int64_t *from, const int64_t *to);

/* Chunk shapes under label extents ext: operand j's, the output's; the
** shape of vertex v's tensor. */
void li_operand_chunk(const tl_einsum *e, int j, const int64_t *ext, int64_t *ch);
void li_out_chunk(const tl_einsum *e, const int64_t *ext, int64_t *ch);
void li_shape(const tl_graph *g, int v, int64_t *shape);

/* Compute the cost of every chunking cpick holds that is still a
** bound; the number computed (0: cpick's costs are all exact). */
int li_settle(li_fctx *c, const int *cpick);

/* Seconds of u's tensor transformed from candidate a to candidate b. */
double li_tr(li_fctx *c, int u, int a, int b);

/* The searches over DAGs (dag.c): pick[v] gets v's candidate, cpick[v] the
** chunking (combo) of a non-source vertex.  The frontier DP of chapter 7
** (TR_ENOMEM, *too_big set, when a class's table would grow too large)
** and the DP along the longest paths (EinDecomp 8.4). */
int li_frontier_dp(li_fctx *c, int *pick, int *cpick, int *max_class, int *too_big);
int li_paths_dp(li_fctx *c, int *pick, int *cpick);

/* Least F(u, a) + t(a -> b) over u's candidates a (F NULL: u is a
** source, F = 0 at its stored shape); the a in *arg. */
double li_feed(li_fctx *c, const double *Fu, int u, int b, int *arg);

/* F of non-source vertex v per candidate, from its producers' tables
** F[u] (NULL for a source; skip[j]: operand j's producer is not counted,
** its transformation neither); back[r] gets the combo reaching r. */
void li_vertex_table(li_fctx *c, int v, double *const *F, const int *skip, double *Fv, int *back);

#endif /* TRADB_LAYOUT_INT_H */
