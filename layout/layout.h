/*
** layout/layout.h - how the EinSums of a statement are laid out before they
** run, chosen by cost over the statement graph:
**
**   1. the order in which a product of three or more operands inside one
**      aggregation is contracted pairwise (exact DP over operand subsets,
**      opt_einsum's 'optimal'/'dp'; greedy beyond a few operands);
**   2. the partitioning of every EinSum of a graph over p = sites x
**      threads pieces of work (EinDecomp, Bourgeois et al., sections 6-8);
**   3. the chunk format of every tensor and the transformation on every
**      edge (Luo's matrix format exploration, chapters 4-7, generalised
**      from matrices to tensors);
**   4. the cost in seconds that 3 compares by: a weighted sum of compute,
**      network, tasks and bytes written, with weights fitted by least
**      squares from probe runs (the same thesis, chapter 10).
**
** A pure module: it takes its own descriptions of EinSums and graphs
** (label ids, label sizes, operand label lists), never the engine's plans,
** so the engine can build them from whatever form its nodes have.  Calls
** keep no state, print nothing, and allocate only what they return (freed
** by the matching _destroy) and scratch they free.  Status: TR_OK or a
** negative TR_E* code with a message in err (util/util.h).
**
** Contract for callers:
**  - labels of an EinSum are numbered 0 .. nlabels-1, each with one size;
**  - a graph lists its vertices in dependency order (every operand's
**    producer has a lower index) and operand j of a vertex has exactly the
**    shape of its producer's output, dimension by dimension;
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
** f(in_0[labels], in_1[labels], ...).  In a graph, a vertex with nin == 0
** is a source tensor whose dimensions are out[] (sizes from size[]). */
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
                                           distinct, each read by an operand
                                           (sources: any labels) */
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

/* ---- 2. EinDecomp: partitioning over p pieces of work ----------------- */

/*
** A graph of EinSums.  Sources (nin == 0) are the inputs; EinDecomp
** treats them as free to partition any way (the paper: inputs are
** pre-partitioned offline), the format search as stored in `fmt`.
*/
typedef enum tl_kernel {
  TL_K_GEMM,     /* SUM of a product of two operands: the BLAS path */
  TL_K_CONTRACT, /* any other join with an aggregation */
  TL_K_ELEMWISE  /* no aggregated label: a map */
} tl_kernel;

/*
** A chunk format (the thesis's physical matrix implementation), for a
** tensor of any rank.  Every kind is a chunk extent per dimension, k[d],
** where 0 (or more than the extent) means the whole dimension:
**   SINGLE: one chunk (all k[d] ignored);
**   STRIP:  strips of width k[0] across dimension `axis` (axis 0 of a
**           matrix: row strips; axis 1: column strips), whole elsewhere;
**   TILE:   chunks of k[0] x k[1] x ... (a matrix's tile k1 x k2).
** Two formats that give a tensor the same chunk shape are one physical
** implementation of it.
*/
typedef enum tl_fkind { TL_F_SINGLE, TL_F_STRIP, TL_F_TILE } tl_fkind;

typedef struct tl_format {
  tl_fkind kind;          /* see above */
  int axis;               /* STRIP: the dimension cut */
  int64_t k[TR_MAX_RANK]; /* STRIP: k[0] the width; TILE: extent per dim */
} tl_format;

typedef struct tl_vertex {
  tl_einsum e;              /* the EinSum; nin == 0: a source tensor */
  int src[TL_MAX_OPERANDS]; /* vertex producing each operand */
  tl_kernel kernel;         /* its join kernel, for the compute cost */
  tl_format fmt;            /* sources: the format it is stored in */
} tl_vertex;

typedef struct tl_graph {
  int n;              /* vertices, producers before their consumers */
  const tl_vertex *v; /* them */
} tl_graph;

/* TR_OK if every vertex is well formed, producers come first and each
** operand has its producer's shape. */
int tl_graph_check(const tl_graph *g, tr_err *err);

/* A partition vector: pieces per label of a vertex's join, powers of two. */
typedef struct tl_dpart {
  int d[TK_MAX_LABELS]; /* pieces of each label (1 for labels beyond nlabels) */
  int path;             /* 0: chosen by the exact DP; k > 0: by the DP along
                           the k-th longest path of the linearised DAG */
  double floats;        /* its cost: into the join, into the aggregation and
                           repartitioning its operands from their producers */
} tl_dpart;

typedef struct tl_dplan {
  int n;            /* vertices of the graph */
  int p;            /* pieces of work per vertex: a power of two */
  tl_dpart *v;      /* per vertex (sources: all 1, cost 0) */
  double floats;    /* the whole graph under these vectors, every edge
                       counted (tl_decomp_cost) */
  int linearised;   /* 1: some non-source vertex had two consumers, so the
                       graph was optimised path by path (section 8.4) */
} tl_dplan;

/* EinDecomp over g for p pieces of work (sites x threads; rounded up to a
** power of two, at most 2^15).  TR_EINVAL for a vertex of more than
** TK_MAX_LABELS labels or of more than 2^20 partition vectors (too many to
** enumerate).  Caller frees *out with tl_dplan_destroy. */
int tl_decomp(const tl_graph *g, int p, tl_dplan **out, tr_err *err);
void tl_dplan_destroy(tl_dplan **p);

/* Section 7's costs, in floats.  Join and aggregation of one EinSum under
** partition vector d (pieces per label): */
void tl_decomp_vertex(const tl_einsum *e, const int *d, double *join, double *agg);
/* Repartitioning a tensor of this shape from `from` pieces per dimension
** (the producer's) to `to` (what the consumer reads). */
double tl_decomp_repart(int rank, const int64_t *shape, const int *from, const int *to);
/* The graph's cost under one vector per vertex (d[v].d; sources ignored,
** they take whatever their consumers read): every vertex's join and
** aggregation plus every repartition between non-source vertices. */
double tl_decomp_cost(const tl_graph *g, const tl_dpart *d);
/* Partition vectors of e with p pieces of work (section 8.1's count). */
int64_t tl_decomp_count(const tl_einsum *e, int p);

/* ---- 4. Cost in seconds (thesis chapter 10) ---------------------------- */

/* What an operation does on the busiest site: the components of the
** thesis's cost, with compute split by kernel kind. */
enum {
  TL_C_GEMM,     /* gemm flops per core */
  TL_C_CONTRACT, /* flops of other joins with an aggregation, per core */
  TL_C_ELEMWISE, /* flops of maps, combines and copies, per core */
  TL_C_NET,      /* floats received over the network */
  TL_C_TASKS,    /* tasks run (one kernel call on one chunk tuple each) */
  TL_C_WRITE,    /* bytes written (intermediates and outputs) */
  TL_NCOST
};

typedef struct tl_cost {
  double c[TL_NCOST]; /* amount of each component */
} tl_cost;

typedef struct tl_weights {
  double w[TL_NCOST]; /* seconds per unit of each component */
} tl_weights;

/* Weights for a cluster nobody has calibrated (see cost.c for why these). */
void tl_weights_default(tl_weights *w);
/* Predicted seconds: w . c. */
double tl_seconds(const tl_weights *w, const tl_cost *c);
/* Name of component k ("gemm", "net", ...). */
const char *tl_cost_name(int k);

/* Least-squares weights from n measured runs: c[i] what run i did,
** seconds[i] how long it took.  TR_EINVAL, naming the component, when the
** runs do not determine a weight (no run exercises it, or it moves in
** step with others) or the fit makes one negative. */
int tl_weights_fit(int n, const tl_cost *c, const double *seconds, tl_weights *w, tr_err *err);

/* A probe run for calibration: statements in tradb's language.  The engine
** runs `setup` in a scratch database (probes reuse tensor names), then
** times `run` (EXPLAIN ANALYZE gives its floats moved and tasks per site),
** fills a tl_cost with the busiest site's amounts from its plan and
** measurements, and calls tl_weights_fit on all of them.  Each probe
** mostly exercises the component `varies`; together they determine every
** weight. */
typedef struct tl_probe {
  const char *name;  /* short name, e.g. "gemm-1024" */
  const char *setup; /* CREATE/FILL statements for its inputs */
  const char *run;   /* the statement timed */
  int varies;        /* the TL_C_* component it mostly exercises */
} tl_probe;

/* The probe table (static, read-only); *n gets its length. */
const tl_probe *tl_probes(int *n);

/* ---- 3. Chunk formats (thesis chapters 4-7) ---------------------------- */

/* The chunk shape format f gives a tensor of this rank and shape; TR_EINVAL
** if f does not apply (a strip across a dimension the tensor lacks). */
int tl_format_chunk(const tl_format *f, int rank, const int64_t *shape, int64_t *chunk,
                    tr_err *err);

/* The problem: the graph, the formats a non-source tensor may take (the
** thesis's P), and what makes a format feasible and costs it. */
typedef struct tl_fproblem {
  const tl_graph *g;   /* vertices; sources carry their stored format */
  int nf;              /* candidate formats */
  const tl_format *f;  /* them */
  int64_t chunk_limit; /* bytes one chunk may hold: a format whose chunk is
                          larger is infeasible for that tensor */
  tr_dtype dtype;      /* element type of every tensor */
  int sites;           /* workers */
  int threads;         /* kernel threads per worker */
  tl_weights w;        /* seconds per unit of each cost component */
} tl_fproblem;

/* How an EinSum runs on its (transformed) inputs: the thesis's atomic
** computation implementations, for tradb's joins. */
enum {
  TL_IMPL_HASH = -1 /* every operand shuffled on the join labels; impl j >= 0:
                       operand j stays where it is, the others are broadcast */
};

/* What an edge does to its tensor: the thesis's transformations. */
typedef enum tl_tkind {
  TL_T_IDENTITY, /* same chunk shape */
  TL_T_RECHUNK,  /* every new chunk lies in one old chunk: local copies */
  TL_T_REPART    /* new chunks gather pieces of several old ones: shipped */
} tl_tkind;

/* The annotation of one vertex. */
typedef struct tl_fchoice {
  int impl;                   /* TL_IMPL_HASH or the operand that stays */
  int fmt;                    /* its output format: index into P (the first
                                 giving that chunk shape); -1 for a source */
  int64_t chunk[TR_MAX_RANK]; /* its output chunk shape */
  int in_fmt[TL_MAX_OPERANDS];/* format each operand is transformed to:
                                 index into P, or -1 for the producer's own
                                 (a source's stored format) */
  int tf[TL_MAX_OPERANDS];    /* tl_tkind of each operand's edge */
  double seconds;             /* the vertex plus its operand edges */
} tl_fchoice;

typedef struct tl_fplan {
  int n;            /* vertices */
  tl_fchoice *v;    /* per vertex */
  double seconds;   /* the whole graph */
  int dag;          /* 1: the frontier DP ran */
  int max_class;    /* largest equivalence class it kept (DAG) */
} tl_fplan;

/* Which DP: the tree DP needs every vertex to have at most one consumer
** (TR_EINVAL otherwise); AUTO takes it when it applies, else the DAG DP. */
typedef enum tl_fmode { TL_FMODE_AUTO, TL_FMODE_TREE, TL_FMODE_DAG } tl_fmode;

/* The cheapest type-correct annotation of pb->g: sources as stored, sinks
** free.  TR_ESHAPE if none exists (some tensor has no feasible format);
** TR_ENOMEM also when an equivalence class would need too large a table.
** Caller frees *out with tl_fplan_destroy. */
int tl_formats(const tl_fproblem *pb, tl_fmode mode, tl_fplan **out, tr_err *err);
void tl_fplan_destroy(tl_fplan **p);

/* Seconds of a full annotation: ch[v].impl and ch[v].in_fmt of every
** non-source vertex (the rest is derived); INFINITY when it is not
** type-correct.  Also fills the derived fields of ch (fmt, chunk, tf,
** seconds).  The plan tl_formats returns costs the same. */
double tl_formats_cost(const tl_fproblem *pb, tl_fchoice *ch);

/* What a vertex costs under one implementation with operand chunk shapes
** in_chunk[j] (TR_ESHAPE unless co-partitioned), and what an edge's
** transformation costs (TR_EINVAL if that kind does not apply to the two
** chunk shapes), as cost components: the pieces tl_formats weighs, exposed
** for EXPLAIN and calibration. */
int tl_impl_cost(const tl_fproblem *pb, int v, int impl, const int64_t (*in_chunk)[TR_MAX_RANK],
                 tl_cost *c, tr_err *err);
int tl_transform_cost(const tl_fproblem *pb, int rank, const int64_t *shape, const int64_t *from,
                      const int64_t *to, tl_tkind kind, tl_cost *c);

#endif /* TRADB_LAYOUT_H */
