/*
** layout/layout.h - how the EinSums of a statement are laid out before they
** run, chosen by cost over the statement graph:
**
**   1. the order in which a product of three or more operands inside one
**      aggregation is contracted pairwise (exact DP over operand subsets,
**      opt_einsum's 'optimal'/'dp'; greedy beyond a few operands);
**   2. partition vectors of an EinSum over p = sites x threads pieces of
**      work (EinDecomp, Bourgeois et al., sections 6 and 8.1): 3's
**      candidates, searched by 3's DPs (by EinDecomp's path-by-path DP,
**      section 8.4, where a DAG's frontier table would be too large);
**   3. the chunk format of every tensor and the transformation on every
**      edge (Luo's matrix format exploration, chapters 4-7, generalised
**      from matrices to tensors), candidates drawn from 2's vectors;
**   4. the cost in seconds that 3 compares by: a weighted sum of compute,
**      network, tasks, bytes written and round trips, with weights fitted
**      by least squares from probe runs (the same thesis, chapter 10).
**
** A pure library: it takes its own descriptions of EinSums and graphs
** (label ids, label sizes, operand label lists), never the engine's plans,
** so the compiler (1) and the optimizer (2-4) build them from whatever
** form their nodes have; it sits below both.  Calls keep no state, print
** nothing, and allocate only what they return (freed by the matching
** _destroy or free) and scratch they free.  Status: TR_OK or a negative
** TR_E* code with a message in err (util/util.h).
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

/* ---- 2. EinDecomp: partition vectors over p pieces of work ----------- */

/*
** A graph of EinSums, what the format search (3) lays out.  Sources
** (nin == 0) are the inputs, stored in `chunk`.
*/
typedef enum tl_kernel {
  TL_K_GEMM,     /* SUM of a product of two operands: the BLAS path */
  TL_K_CONTRACT, /* any other join with an aggregation */
  TL_K_ELEMWISE  /* no aggregated label: a map */
} tl_kernel;

typedef struct tl_vertex {
  tl_einsum e;                  /* the EinSum; nin == 0: a source tensor */
  int src[TL_MAX_OPERANDS];     /* vertex producing each operand */
  tl_kernel kernel;             /* its join kernel, for the compute cost */
  int64_t chunk[TR_MAX_RANK];   /* sources: the chunk shape it is stored in;
                                   others: all 0 (the search chooses), or the
                                   chunk shape its result must have (a
                                   tensor whose chunks the user declared) */
  int64_t ext0[TL_MAX_LABELS];  /* non-sources: a chunking of its labels to
                                   consider besides EinDecomp's vectors (the
                                   one the statement's storage implies); all
                                   0: none */
} tl_vertex;

typedef struct tl_graph {
  int n;              /* vertices, producers before their consumers */
  const tl_vertex *v; /* them */
} tl_graph;

/* TR_OK if every vertex is well formed, producers come first and each
** operand has its producer's shape. */
int tl_graph_check(const tl_graph *g, tr_err *err);

/* Section 8.1's enumeration: every partition vector of e whose entries
** multiply to p (a power of two; entries within their labels' sizes, the
** largest product they allow when that is less than p), label by label
** in e's label order, those cutting the first labels most first.  *out
** (caller frees) gets *n vectors of e->nlabels entries each.  TR_EINVAL
** beyond 2^20 vectors. */
int tl_decomp_vectors(const tl_einsum *e, int p, int **out, int *n, tr_err *err);

/* ---- 4. Cost in seconds (thesis chapter 10) ---------------------------- */

/* What an operation does on its busiest site: the components of the
** thesis's cost, with compute split by kernel kind. */
enum {
  TL_C_GEMM,     /* gemm flops per core */
  TL_C_PACK,     /* floats of gemm calls' two factors, per core: BLAS
                    copies each factor into its own layout once a call,
                    which a product thin in M or N is bound by */
  TL_C_CONTRACT, /* flops of other joins with an aggregation, per core */
  TL_C_ELEMWISE, /* elements of maps, combines, re-chunking copies and gemm
                    calls' output blocks, per core */
  TL_C_NET,      /* floats sent and received over the network */
  TL_C_TASKS,    /* kernel calls (one chunk tuple each) */
  TL_C_CHUNKS,   /* chunks made and kept: each of an output's chunks at
                    each of its replicas, each partial made to be combined */
  TL_C_WRITE,    /* bytes written (intermediates, outputs, replicas) */
  TL_C_PHASES,   /* round trips to the workers: sending operands, the join
                    tasks, combining partials, committing an output */
  TL_NCOST
};

typedef struct tl_cost {
  double c[TL_NCOST]; /* amount of each component */
} tl_cost;

typedef struct tl_weights {
  double w[TL_NCOST]; /* seconds per unit of each component */
  int fitted;         /* 1: fitted from probe runs on this cluster (CALIBRATE) */
} tl_weights;

/* Weights for a cluster nobody has calibrated (see cost.c for why these). */
void tl_weights_default(tl_weights *w);
/* Predicted seconds: w . c. */
double tl_seconds(const tl_weights *w, const tl_cost *c);
/* Name of component k ("gemm", "net", ...), and the component of a name
** (-1 if none). */
const char *tl_cost_name(int k);
int tl_cost_index(const char *name);
/* Weights as text ("gemm=2e-11 contract=..."), and back: TR_EINVAL naming
** what is wrong (an unknown or missing component, a negative weight); *w
** is unchanged then.  Text written before a component existed (a catalog
** calibrated by an older tradb) may lack it: it keeps its weight in *w. */
void tl_weights_text(const tl_weights *w, char *buf, size_t n);
int tl_weights_parse(const char *text, tl_weights *w, tr_err *err);

/* Least-squares weights from n measured runs: c[i] what run i did,
** seconds[i] how long it took.  Each run's equation is divided by its
** time, so the fit minimises relative errors: a 10 ms statement counts
** as much as a 10 s one.  Weights are kept non-negative (the exact
** non-negative optimum: every support tried): a component whose
** unconstrained weight would be negative gets 0.  The weights in *w on
** entry are the prior: each fitted weight also pays for the square of
** its logarithm's distance from its prior (in units of ln 3), weighed by
** the runs' scatter about the plain fit, so exact runs are fitted exactly
** and noisy ones cannot drop a weight they hardly determine to 0 (a prior
** of 0 constrains nothing).  A component that moves in step with the ones
** before it in the runs (on two workers that hold every chunk, each
** output's writes and its replicas' floats sent) keeps its weight from
** *w, and its bit is set in info->kept; info->plain has the fit without
** the prior, to show what it held (info NULL: not asked).  Each run counts
** once: pass a repeated probe's median, not its repeats.  TR_EINVAL,
** naming the component, when no run exercises one; *w is unchanged then. */
typedef struct tl_fit_info {
  unsigned kept;          /* the components that kept their weight, a bit each */
  double plain[TL_NCOST]; /* each weight as the runs alone, without the prior, fit it */
} tl_fit_info;
int tl_weights_fit(int n, const tl_cost *c, const double *seconds, tl_weights *w, tl_fit_info *info,
                   tr_err *err);

/* A probe run for calibration: statements in tradb's language, on
** tensors named _cal_* (the engine refuses to calibrate while a tensor
** of such a name exists).  The engine runs `setup`, then times `run`
** several times, takes the components of the plan it ran, and fits the
** weights to each probe's median time with tl_weights_fit.  Each probe mostly
** exercises the component `varies`; together they determine every
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

/*
** A format is a chunk shape: the thesis's single tuple (one chunk), row or
** column strips (one dimension cut) and tiles (both cut), for tensors of
** any rank.  Every non-source vertex's candidates come from EinDecomp
** partition vectors over its labels: each vector d with prod(d) = 1, 2,
** 4, .. p (p = sites x threads) gives a chunking of the labels, ext[l] =
** ceil(size[l] / d[l]), hence a chunk shape for the output and one for
** every operand.  A chunking is feasible when every chunk it makes fits
** the per-chunk byte limit (the thesis's p.f(m): a single tuple cannot
** hold a 40 GB matrix); when none with up to p pieces is, vectors with
** more pieces are added until one is.  A chunking that cuts a summed
** label into g pieces but the output into fewer than p is also offered
** with the output cut by each vector of p pieces over the output labels
** (the aggregation partitioned on its own, g x p pieces in all), so that
** a combine can spread over the sites.
*/
typedef struct tl_fproblem {
  const tl_graph *g;   /* vertices; sources carry their stored chunk shape */
  int p;               /* pieces of work: sites x threads */
  int64_t chunk_limit; /* bytes one chunk may hold */
  tr_dtype dtype;      /* element type of every tensor */
  int sites;           /* workers */
  int threads;         /* kernel threads per worker */
  tl_weights w;        /* seconds per unit of each cost component */
  /* The costs the search compares, in seconds: the caller's (ctx passed
  ** back), or tl_vertex_cost and tl_transform_cost when NULL.  vertex:
  ** v run on label extents ext with its operands already in the chunk
  ** shapes ext gives them; edge: u's tensor taken from chunk shape `from`
  ** to `to` (never called with equal shapes: identity costs nothing). */
  double (*vertex_cost)(void *ctx, int v, const int64_t *ext);
  double (*edge_cost)(void *ctx, int u, const int64_t *from, const int64_t *to);
  /* Optional: a lower bound on vertex_cost, for a chunking whose cost is
  ** dear to compute (a walk of millions of join tuples), else NAN.  The
  ** search takes the bound and computes the cost only when its choice
  ** holds that chunking, then searches again: the same choice as with
  ** every cost computed, as a bound can only flatter what it stands for. */
  double (*vertex_floor)(void *ctx, int v, const int64_t *ext);
  void *ctx;
} tl_fproblem;

/* What an edge does to its tensor: the thesis's transformations. */
typedef enum tl_tkind {
  TL_T_IDENTITY, /* same chunk shape */
  TL_T_RECHUNK,  /* every new chunk lies in one old chunk: local copies */
  TL_T_REPART    /* new chunks gather pieces of several old ones: shipped */
} tl_tkind;

/* The kind of transformation from one chunk shape to another. */
tl_tkind tl_transform_kind(int rank, const int64_t *shape, const int64_t *from, const int64_t *to);

/* The annotation of one vertex. */
typedef struct tl_fchoice {
  int64_t ext[TL_MAX_LABELS]; /* chunk extent of each label (non-sources) */
  int64_t chunk[TR_MAX_RANK]; /* its output chunk shape */
  int tf[TL_MAX_OPERANDS];    /* tl_tkind of each operand's edge */
  double seconds;             /* the vertex plus its operand edges */
} tl_fchoice;

typedef struct tl_fplan {
  int n;            /* vertices */
  tl_fchoice *v;    /* per vertex */
  double seconds;   /* the whole graph */
  int dag;          /* 1: a DAG search ran (frontier, or by paths) */
  int linearised;   /* 1: a frontier table grew too large, and the DAG was
                       searched path by path instead (EinDecomp 8.4) */
  int max_class;    /* largest equivalence class the frontier DP kept */
  int candidates;   /* chunkings considered, over all vertices */
} tl_fplan;

/* Which DP: the tree DP needs every vertex to have at most one consumer
** (TR_EINVAL otherwise); AUTO takes it when it applies, else the frontier
** DP, and if one of its equivalence classes would need too large a table,
** the DP along paths. */
typedef enum tl_fmode { TL_FMODE_AUTO, TL_FMODE_TREE, TL_FMODE_DAG, TL_FMODE_PATHS } tl_fmode;

/* The cheapest feasible annotation of pb->g: sources as stored, sinks as
** required (or free).  TR_ESHAPE if none exists; TR_ENOMEM also when the
** frontier DP (mode DAG) would need too large a table.  Caller frees
** *out with tl_fplan_destroy. */
int tl_formats(const tl_fproblem *pb, tl_fmode mode, tl_fplan **out, tr_err *err);
void tl_fplan_destroy(tl_fplan **p);

/* The candidate chunkings of non-source vertex v, as the search takes
** them: ext (caller frees) gets *n label-extent vectors of TL_MAX_LABELS
** entries.  TR_ESHAPE if none is feasible. */
int tl_chunkings(const tl_fproblem *pb, int v, int64_t (**ext)[TL_MAX_LABELS], int *n,
                 tr_err *err);

/* Seconds of a full annotation: ch[v].ext of every non-source vertex (the
** rest is derived and filled in: chunk, tf, seconds); INFINITY when a
** chunking is not feasible or a required output shape is not met.  The
** plan tl_formats returns costs the same. */
double tl_formats_cost(const tl_fproblem *pb, tl_fchoice *ch);

/* The built-in costs, as components: vertex v on label extents ext, its
** operands already so chunked, the cheaper of hashing every operand on
** the join labels and keeping one in place while the others are
** broadcast; an edge's transformation (TR_EINVAL if that kind does not
** apply to the two chunk shapes). */
void tl_vertex_cost(const tl_fproblem *pb, int v, const int64_t *ext, tl_cost *c);
int tl_transform_cost(const tl_fproblem *pb, int rank, const int64_t *shape, const int64_t *from,
                      const int64_t *to, tl_tkind kind, tl_cost *c);

#endif /* TRADB_LAYOUT_H */
