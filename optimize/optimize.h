/*
** optimize/optimize.h - the cost-based optimizer: IA plans by rewrite
** rules, costed exactly in floats moved, the cheapest one run; and the
** EXPLAIN of the result (text, JSON, Graphviz).
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
** Cost (section 5.3): floats moved between sites, computed exactly.  A
** tensor relation has no holes and unique keys, so every chunk's size is
** known from the frontier; to_moves_compute walks the join tuples of the
** node, puts each on its site, and counts every chunk sent to a site that
** does not hold it (inputs costed from where the catalog says they are),
** every partial result shuffled to its owner, and the output's replicas.
** The executor runs exactly these moves (to_opt.moves, the chosen plan's),
** so the measured transfer equals the prediction.  Plans that move the
** same floats are ordered by the extra floating-point work they do
** (combining partials).
**
** Files: trees.c (IA plan trees, the Table 1 plan), rules.c (the rewrite
** rules, a table of one function each), lower.c (an IA tree to what the
** executor runs), moves.c (exact moves and their floats), search.c (the
** rewrites' closure per node, the beam over nodes), explain.c.
**
** A plan of several nodes (nested aggregations, or a block of statements)
** is searched node by node keeping the cheapest TO_BEAM partial plans
** (the placement each leaves behind is part of its state), so a node's
** choice is costed together with what it does to its consumers.
*/
#ifndef TRADB_OPTIMIZE_OPTIMIZE_H
#define TRADB_OPTIMIZE_OPTIMIZE_H

#include "compile/compile.h"

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
  double work_total, work_max;   /* join multiply-adds: all, busiest site */
} to_moves;

/* Plans that move the same floats can still differ in the work of their
** busiest site (a plan on 3 of 4 sites, or all on one, moves little and
** runs long).  The optimizer ranks by floats moved plus the idle
** capacity m * max - total expressed in floats at this many multiply-adds
** per float moved (about what one core does while a float crosses a
** local socket). */
#define TO_WORK_PER_FLOAT 64.0

/* What the optimizer decided for a plan. */
typedef struct to_opt {
  int m;                              /* sites */
  int repl;                           /* replication of outputs */
  to_choice choice[TA_MAX_NODES];     /* per node */
  int64_t node_floats[TA_MAX_NODES];  /* predicted, per node */
  int64_t in_floats[TA_MAX_NODES][TK_MAX_INPUTS]; /* per operand move */
  int64_t partial_floats[TA_MAX_NODES];           /* partials shuffled */
  int64_t repl_floats;                /* replicating the outputs */
  int64_t total;                      /* predicted transfer in floats */
  double imbalance;                   /* idle capacity, in floats (above) */
  int nalt;                           /* alternatives considered */
  struct to_alt {
    char name[400];                   /* per node names joined by " | " */
    int64_t floats;                   /* predicted transfer */
    double cost;                      /* floats + imbalance: the rank */
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

/* Choose how every node of p runs on m sites with outputs replicated
** `repl` times, from the placement of the stored inputs (pl[rel] for
** TA_REL_STORED relations; others are filled in).  force: the name of an
** alternative to run instead of the cheapest (EXPLAIN ... PLAN 'name'),
** NULL for none; TR_ENOTFOUND with the names if none matches.  Caller
** frees o->alt with to_opt_free. */
int to_optimize(const ta_plan *p, int m, int repl, to_placed *pl, const char *force, to_opt *o,
                tr_err *err);
void to_opt_free(to_opt *o);
/* The moves of node k under c (pl: placement of every relation read);
** TR_EINVAL if c is not valid for that placement (a local join that
** would miss pairs).  Fills pl[node out] when out_pl is non-zero. */
int to_moves_compute(const ta_plan *p, int k, const to_choice *c, int m, int repl, to_placed *pl,
                     to_moves *mv, int out_pl, tr_err *err);
/* The moves of node k when every tuple of output chunk lin runs on site
** site_of[lin] (a scheduler's placement): no operand stays, each chunk
** goes to the sites whose tuples read it, nothing is two-phase.  *c is set
** to the choice that describes it (what the executor runs); pl[node out]
** is filled. */
int to_moves_assigned(const ta_plan *p, int k, const int8_t *site_of, int m, int repl, to_placed *pl,
                      to_choice *c, to_moves *mv, tr_err *err);
void to_moves_free(to_moves *mv);
void to_placed_free(to_placed *pl);
/* Hash site of a key (node-label keys) on label mask `labels`. */
int to_hash_site(const ta_node *n, unsigned labels, const int64_t *lkey, int m);
/* EXPLAIN of an optimized plan: text (with the TRA expression tra), JSON
** fields (no braces: "sites": .., "chosen": .., "alternatives": ..) or a
** Graphviz graph.  Caller frees. */
char *to_opt_text(const ta_plan *p, const to_opt *o, const char *tra);
char *to_opt_json(const ta_plan *p, const to_opt *o, const char *tra);
char *to_opt_dot(const ta_plan *p, const to_opt *o);

#endif /* TRADB_OPTIMIZE_OPTIMIZE_H */
