/*
** optimize/optimize.h - the cost-based optimizer: the layout of a plan
** (which chunking each node computes in), IA plans by rewrite rules, each
** costed exactly in floats moved and predicted in seconds, the cheapest
** one run; and the EXPLAIN of the result (text, JSON, Graphviz).
**
** Each node of a plan (TRA join + aggregation, see compile/compile.h) is first
** compiled to IA by the TRA paper's Table 1:
**
**   MAP(post) AGG_G( SHUF_G( FILTER( JOIN( BCAST(X0), .., Xn ) ) ) )
**
** and the rewrite rules of its Table 2 (R1-1..R1-7 kernel composition,
** R2-1..R2-7 re-partitioning) and two domain rules (RMM: replicate each
** input over the output labels it lacks, then shuffle on them; LOCAL: a
** join of inputs already co-partitioned needs no move) are applied to
** every operator of every plan reached, breadth first, with duplicates
** removed by their canonical text, until no rule applies or a bound is hit.
** Each plan reached that the executor can run is lowered to a to_choice
** (which operand stays, moves, or drives the join; whether the aggregation
** is local or two-phase).  BMM and CMM are among them: BMM is the Table 1
** plan itself, CMM comes from R2-6 then R2-5 (the paper says the simple
** rules reach it), and R2-7 with R2-4 gives the broadcast plans whose
** aggregation stays local.
**
** Transfer (section 5.3): floats moved between sites, computed exactly.
** A tensor relation has no holes and unique keys, so every chunk's size
** is known from the frontier; to_moves_compute walks the join tuples of
** the node, puts each on its site, and counts every chunk sent to a site
** that does not hold it (inputs costed from where the catalog says they
** are), every partial result shuffled to its owner, and the output's
** replicas.  The executor runs exactly these moves (to_opt.moves, the
** chosen plan's), so the measured transfer equals the prediction.
**
** Cost: seconds (layout/layout.h, the thesis's chapter 10), from the same
** walk: per site the flops of the node's kernel, the floats it sends and
** receives, the kernel calls, the bytes it writes, and the node's round
** trips, weighted by the cluster's fitted weights; each phase of a node
** (the join; for a 2-phase aggregation, then the partials' shuffle and
** combine) takes as long as its busiest site, a node the sum of its
** phases, a plan the sum of its nodes.  Plans are ranked by predicted
** seconds.
**
** Layout (layout.c): with `auto` layout, the chunking of every node is
** chosen first, by the format search of layout/ over the plan's graph
** (candidates from EinDecomp partition vectors for sites x threads pieces
** of work; each node costed as the seconds of its cheapest IA plan, each
** edge as the re-chunking it needs), and the plan is optimized in both
** the chosen and the declared chunking: the chosen one runs if it is
** predicted faster by a margin (TO_LAYOUT_MARGIN).
**
** Files: trees.c (IA plan trees, the Table 1 plan), rules.c (the rewrite
** rules, a table of one function each), lower.c (an IA tree to what the
** executor runs), moves.c (exact moves, their floats and seconds),
** search.c (the rewrites' closure per node, the beam over nodes),
** layout.c (the chunking search), explain.c.
**
** A plan of several nodes (nested aggregations, or a block of statements)
** is searched node by node keeping the cheapest TO_BEAM partial plans
** (the placement each leaves behind is part of its state), so a node's
** choice is costed together with what it does to its consumers.
*/
#ifndef TRADB_OPTIMIZE_OPTIMIZE_H
#define TRADB_OPTIMIZE_OPTIMIZE_H

#include "compile/compile.h"
#include "layout/layout.h"

/* ---- The optimizer (optimize.c) ---------------------------------------- */

/*
** How a node runs on the sites, as the optimizer chose it (the lowered
** form of an IA plan): each operand stays where it is (KEEP), is
** broadcast to every site (BCAST), shuffled on some of its labels (SHUF)
** or replicated over the labels it lacks and shuffled (DUP, the RMM
** pattern).  The join tuples run where the drive operand's chunks are
** (drive >= 0) or where the output chunk is hashed on `part` (drive -1);
** the other operands go where the tuples need them.  When one output
** chunk's tuples run on several sites, each computes a partial result
** and the partials are shuffled on `part` (output labels) and combined:
** the two-phase aggregation of rule R2-5.
*/
#define TO_MAX_SITES 64  /* sites the optimizer places on (bit masks) */
#define TO_MAX_ALTS 64   /* alternatives kept for EXPLAIN */
#define TO_MAX_RULES 24  /* rewrite rules the optimizer may have */

typedef enum to_move { TO_MV_KEEP, TO_MV_BCAST, TO_MV_SHUF, TO_MV_DUP } to_move;

typedef struct to_choice {
  int drive;                  /* operand the tuples follow, -1: by output */
  unsigned part;              /* node-label mask hashed (see above) */
  unsigned agg_part;          /* two-phase: output labels partials go by */
  int twophase;               /* partial aggregation, shuffle, combine */
  int mv[TK_MAX_INPUTS];      /* to_move of each operand */
  int late[TK_MAX_INPUTS];    /* diagonal filter after the move (R2-2 not
                                 applied): every chunk moves */
  char name[96];              /* e.g. "CMM[k]", "BMM[bcast B; A by i]" */
  char ia[640];               /* the IA expression it came from */
  char rules[160];            /* rules applied to reach it */
} to_choice;

/* Placement of a relation: per chunk, the sites (bit per live-site
** position) holding it, and the one reads come from. */
typedef struct to_placed {
  int64_t n;         /* chunks; 0: not placed yet */
  uint64_t *has;     /* holders */
  int8_t *prim;      /* primary holder */
} to_placed;

/* The exact moves of one node under a choice. */
typedef struct to_moves {
  uint64_t *need[TK_MAX_INPUTS]; /* per operand chunk: sites it must reach */
  uint64_t *osites;              /* per output chunk: sites computing it */
  int8_t *owner;                 /* per output chunk: site of the result */
  int64_t in_floats[TK_MAX_INPUTS]; /* floats each operand moves */
  int64_t partial_floats;        /* floats of partials shuffled */
  int64_t total;                 /* all of it */
  tl_cost cost;                  /* what the busiest site of each phase
                                    does, summed, and the node's round
                                    trips */
  double seconds;                /* predicted: the weights times cost */
  int busiest;                   /* that site */
  int mirror;                    /* 1: a Gram product's blocks below the
                                    diagonal are made as transposes of
                                    their mirrors, each on its mirror's
                                    site (ta_gemm_mirror; the node's
                                    mirror in its tasks) */
} to_moves;

/* Where a plan runs and how its time is predicted. */
typedef enum to_layout_mode {
  TO_LAYOUT_AUTO,    /* chunkings chosen by the format search */
  TO_LAYOUT_DECLARED /* each node in its operands' stored chunking */
} to_layout_mode;

/* Layout decisions a session remembers (memo.c): one per engine. */
typedef struct to_memo to_memo;
to_memo *to_memo_new(void);
void to_memo_free(to_memo **m);

typedef struct to_env {
  int m;              /* live sites */
  int repl;           /* replicas of every output chunk */
  int threads;        /* kernel threads per site */
  int cores;          /* cores all sites share (0: as many as their
                         threads): local workers on one machine compete
                         for its cores */
  tl_weights w;       /* seconds per unit of each cost component */
  to_layout_mode layout; /* see above */
  int64_t chunk_limit;   /* bytes the layout search keeps a chunk within */
  int64_t chunk_max;     /* bytes any chunk may hold (what a worker takes):
                            a declared chunking beyond it does not run */
  to_memo *memo;         /* the session's remembered layout decisions
                            (NULL: search every time) */
  int alternatives;      /* 1: search every IA plan even for a statement
                            the memo remembers (EXPLAIN lists them) */
} to_env;

/* The chosen chunking runs instead of the declared one only when it is
** predicted faster by this fraction (and by a round trip's time). */
#define TO_LAYOUT_MARGIN 0.05

/* What the layout search decided (EXPLAIN). */
typedef struct to_layout_info {
  int ran;              /* 1: the search ran (layout auto) */
  int used;             /* 1: its chunking runs (it predicted faster than
                           the declared one) */
  double auto_s;        /* predicted seconds in the chosen chunking */
  double declared_s;    /* predicted seconds in the declared chunking */
  int declared_floor;   /* 1: declared_s is a bound (its join tuples' calls
                           alone), its plans not walked: more than the
                           chosen chunking's by the margin */
  double search_s;      /* the format search's own estimate */
  int candidates;       /* chunkings it considered */
  int dag;              /* 1: DAG search (frontier or paths) */
  int linearised;       /* 1: by paths */
  int max_class;        /* largest equivalence class (frontier DP) */
  int pieces;           /* pieces of work it sized chunks for */
  int cut;              /* 1: stored operands read in finer chunks are cut
                           where they are first (layout.c) */
  double ms;            /* its time */
  int remembered;       /* 1: the decision an earlier statement with the
                           same plan, settings and placement took (the
                           other fields are that search's) */
  int narrowed;         /* 1: remembered, and only the IA plan chosen then
                           was costed again (the alternatives are not) */
  char plan[400];       /* the IA plan chosen in those chunkings (its
                           to_opt alternative's name) */
  char why[160];        /* auto_s NaN: why no plan runs in its chunking
                           (the start of the optimizer's error) */
} to_layout_info;

/* What the optimizer decided for a plan. */
typedef struct to_opt {
  int m;                              /* sites */
  int repl;                           /* replication of outputs */
  tl_weights w;                       /* the weights the seconds came from */
  to_choice choice[TA_MAX_NODES];     /* per node */
  int64_t node_floats[TA_MAX_NODES];  /* predicted, per node */
  double node_s[TA_MAX_NODES];        /* predicted seconds, per node */
  tl_cost node_cost[TA_MAX_NODES];    /* their components */
  int64_t in_floats[TA_MAX_NODES][TK_MAX_INPUTS]; /* per operand move */
  int64_t partial_floats[TA_MAX_NODES];           /* partials shuffled */
  int64_t repl_floats;                /* replicating the outputs */
  int64_t total;                      /* predicted transfer in floats */
  double seconds;                     /* predicted seconds, all nodes */
  tl_cost cost;                       /* their components, summed */
  to_layout_info layout;              /* the layout search */
  int nalt;                           /* alternatives considered */
  struct to_alt {
    char name[400];                   /* per node names joined by " | " */
    int64_t floats;                   /* predicted transfer */
    double cost;                      /* predicted seconds: the rank */
    to_choice choice[TA_MAX_NODES];   /* the plan */
  } *alt;                             /* cheapest first; alt[0] = chosen
                                         unless PLAN forced another */
  int chosen;                         /* index into alt */
  to_moves moves[TA_MAX_NODES];       /* the chosen plan's moves, node by
                                         node: what the executor runs */
  int ntrees;                         /* IA plans the rewrites reached */
  int fired[TO_MAX_RULES];            /* times each rule applied */
  double ms;                          /* optimization time */
} to_opt;

/* Choose how every node of p runs on env->m sites, from the placement of
** the stored inputs (pl[rel] for TA_REL_STORED relations; others are
** filled in).  With env->layout auto, the chunking of the nodes is chosen
** too and written into p (node chunks, and the chunk shapes of the
** temporaries and outputs; an output the user declared chunks for,
** ta_rel.declared, keeps them); with env->memo, a decision taken before
** for the same inputs is taken again without searching.  force: the name
** of an alternative to run instead of the cheapest (EXPLAIN ... PLAN
** 'name'), NULL for none; TR_ENOTFOUND with the names if none matches.
** Caller frees o->alt with to_opt_free. */
int to_optimize(ta_plan *p, const to_env *env, to_placed *pl, const char *force, to_opt *o,
                tr_err *err);
void to_opt_free(to_opt *o);
/* The moves of node k under c (pl: placement of every relation read);
** TR_EINVAL if c is not valid for that placement (a local join that
** would miss pairs).  Fills pl[node out] when out_pl is non-zero. */
int to_moves_compute(const ta_plan *p, int k, const to_choice *c, const to_env *env,
                     to_placed *pl, to_moves *mv, int out_pl, tr_err *err);
/* The moves of node k when every tuple of output chunk lin runs on site
** site_of[lin] (a scheduler's placement): no operand stays, each chunk
** goes to the sites whose tuples read it, nothing is two-phase.  *c is set
** to the choice that describes it (what the executor runs); pl[node out]
** is filled. */
int to_moves_assigned(const ta_plan *p, int k, const int8_t *site_of, const to_env *env, to_placed *pl,
                      to_choice *c, to_moves *mv, tr_err *err);
void to_moves_free(to_moves *mv);
void to_placed_free(to_placed *pl);
/* How a plan's nodes run together (dist/run.c).  to_group_end: the end
** of the group of nodes that starts at k: the nodes after k, in order,
** that read nothing an earlier node of the group makes, or read it on the
** worker whose task of the group made it and move nothing else (their
** tasks then queue behind those), and write a tensor no other node of it
** writes.  A block's independent statements (an SGD step's weight
** updates), and a statement over another's output chunk by chunk (a row
** sum of a product), run together.  opt NULL (tasks placed by a
** scheduler): only independent nodes go together.
** to_group_fusion: for each node e of the group k..end-1, into[e] = the
** node of the group inside whose tasks e runs, or -1: an elementwise node
** that reads a producer's output chunk by chunk, where it is made, is
** computed from each chunk as soon as the producer's task has made it,
** in that task (at most one consumer per producer, none of them a
** producer itself).  to_fused_stored: whether producer j's chunks are
** still stored when e runs inside its tasks (an output, or a temporary
** another node reads); a temporary only e reads is never stored. */
int to_group_end(const ta_plan *p, const to_opt *opt, int k);
void to_group_fusion(const ta_plan *p, const to_opt *opt, int k, int end, int *into);
int to_fused_stored(const ta_plan *p, int j, int e);
/* Hash site of a key (node-label keys) on label mask `labels`. */
int to_hash_site(const ta_node *n, unsigned labels, const int64_t *lkey, int m);
/* EXPLAIN of an optimized plan: text (with the TRA expression tra), JSON
** fields (no braces: "sites": .., "chosen": .., "alternatives": ..) or a
** Graphviz graph.  Caller frees. */
char *to_opt_text(const ta_plan *p, const to_opt *o, const char *tra);
char *to_opt_json(const ta_plan *p, const to_opt *o, const char *tra);
char *to_opt_dot(const ta_plan *p, const to_opt *o);

#endif /* TRADB_OPTIMIZE_OPTIMIZE_H */
