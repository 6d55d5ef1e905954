/*
** engine/engine_int.h - what the files of engine/ share and nothing outside
** engine/ may include: the statement syntax tree the parser produces, and
** the internal entry points of the compile and execute stages.
*/
#ifndef TRADB_ENGINE_INT_H
#define TRADB_ENGINE_INT_H

#include "engine/engine.h"
#include "catalog/catalog.h"
#include "kernels/kernels.h"
#include "net/net.h"

#define TE_NAME_MAX 64   /* identifiers (tensor names, labels) */
#define TE_PATH_MAX 4096 /* file names in LOAD / SAVE */

/* ---- Syntax tree ------------------------------------------------------ */

typedef enum te_expr_kind {
  TE_EXPR_NUM, /* number literal: num */
  TE_EXPR_REF, /* tensor reference name[labels] */
  TE_EXPR_BIN, /* a op b, op one of + - * / ^ */
  TE_EXPR_FN,  /* unary function fn(a) (a TK_OP_* code), or unary minus */
  TE_EXPR_AGG  /* SUM(a) / MAX(a) / MIN(a): agg is a tk_agg */
} te_expr_kind;

typedef struct te_expr {
  te_expr_kind kind;
  int op;                               /* BIN: '+','-','*','/','^';
                                           FN: TK_OP_RELU .. (TK_OP_NEG for
                                           unary minus); AGG: tk_agg */
  double num;                           /* NUM */
  char name[TE_NAME_MAX];               /* REF: tensor name */
  int nlabels;                          /* REF: number of labels */
  char labels[TR_MAX_RANK][TE_NAME_MAX];/* REF: label names */
  struct te_expr *a, *b;                /* operands (b only for BIN) */
  int line;                             /* line of the token, 1-based,
                                           relative to the statement text */
} te_expr;

typedef enum te_stmt_kind {
  TE_ST_CREATE,   /* CREATE TENSOR name[shape] [CHUNK [..]] [TYPE t] */
  TE_ST_LOAD,     /* LOAD name FROM 'path' [CHUNK [..]] [TYPE t] */
  TE_ST_SAVE,     /* SAVE name TO 'path' */
  TE_ST_FILL,     /* FILL name ZEROS|ONES|IDENTITY|UNIFORM(a,b)|NORMAL(m,s) [SEED n] */
  TE_ST_ASSIGN,   /* out[labels] = expr */
  TE_ST_SHOW,     /* SHOW TENSORS */
  TE_ST_DESCRIBE, /* DESCRIBE name */
  TE_ST_DROP,     /* DROP TENSOR [IF EXISTS] name */
  TE_ST_PRINT,    /* PRINT name [ranges] */
  TE_ST_EXPLAIN,  /* EXPLAIN [ANALYZE] [(FORMAT TEXT|JSON)] assignment */
  TE_ST_SET,      /* SET name = value */
  TE_ST_BEGIN,    /* BEGIN: statements until COMMIT are one block */
  TE_ST_COMMIT,   /* COMMIT (EXPLAIN [..] COMMIT: explain the block) */
  TE_ST_ROLLBACK  /* ROLLBACK: forget the block's statements */
} te_stmt_kind;

typedef enum te_fill_kind {
  TE_FILL_ZEROS, TE_FILL_ONES, TE_FILL_IDENTITY, TE_FILL_UNIFORM, TE_FILL_NORMAL
} te_fill_kind;

typedef struct te_stmt {
  te_stmt_kind kind;
  char name[TE_NAME_MAX];        /* target tensor (all but SHOW) */
  /* CREATE */
  int rank;                      /* number of dimensions given */
  int64_t shape[TR_MAX_RANK];    /* dimensions */
  /* CREATE, LOAD */
  int has_chunk;                 /* CHUNK [...] given */
  int chunk_rank;                /* number of chunk entries given */
  int64_t chunk[TR_MAX_RANK];    /* chunk shape */
  int has_type;                  /* TYPE given */
  tr_dtype dtype;                /* TYPE value */
  /* LOAD, SAVE */
  char path[TE_PATH_MAX];        /* file name (quotes removed) */
  /* FILL */
  te_fill_kind fill;             /* what to fill with */
  double p0, p1;                 /* UNIFORM(lo, hi) / NORMAL(mu, sd) */
  int has_seed;                  /* SEED given */
  uint64_t seed;                 /* SEED value */
  /* DROP */
  int if_exists;                 /* DROP TENSOR IF EXISTS */
  /* ASSIGN (and EXPLAIN, whose statement is the assignment) */
  int nout;                      /* output labels */
  char out_labels[TR_MAX_RANK][TE_NAME_MAX];
  te_expr *rhs;                  /* right-hand side */
  /* EXPLAIN */
  int analyze;                   /* EXPLAIN ANALYZE: run and measure */
  int json;                      /* (FORMAT JSON) */
  int dot;                       /* (FORMAT DOT) */
  char plan[TE_NAME_MAX * 4];    /* (PLAN 'name'): run that alternative */
  int block;                     /* EXPLAIN .. COMMIT: of the open block */
  /* SET */
  char setting[TE_NAME_MAX];     /* name, lower-cased */
  char value[TE_NAME_MAX];       /* value as written (number or name) */
  /* PRINT */
  int nranges;                   /* 0 = whole tensor */
  int64_t lo[TR_MAX_RANK];       /* range starts (inclusive) */
  int64_t hi[TR_MAX_RANK];       /* range ends (exclusive); -1 = to end */
} te_stmt;

/*
** Parse one statement (text, len bytes; a trailing ';' is optional).
** On failure returns TR_ESYNTAX with a message such as
**   "syntax error near 'foo': expected ']'"
** and *out = NULL.  Numbers in shapes must be positive integers; ranks
** above TR_MAX_RANK, over-long names and paths are syntax errors.
** Keywords are case-insensitive; names are case-sensitive.
*/
int te_parse(const char *text, size_t len, te_stmt **out, tr_err *err);
void te_stmt_free(te_stmt **s);
void te_expr_free(te_expr *e);

/* Keyword list for completion (NULL-terminated). */
extern const char *const te_keyword_list[];

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
#define TE_MAX_RELS 64  /* relations in one plan */
#define TE_MAX_NODES 32 /* EinSum nodes in one plan */

typedef enum te_rel_kind {
  TE_REL_STORED, /* a tensor in the catalog */
  TE_REL_TEMP,   /* an intermediate, made on the workers, then dropped */
  TE_REL_OUTPUT  /* the statement's result, committed at the end */
} te_rel_kind;

typedef struct te_rel {
  te_rel_kind kind;   /* where its chunks come from */
  tr_tensor meta;     /* name, dtype, shape and chunk shape */
  int pending;        /* STORED: the output of an earlier statement of the
                         same block, not yet in the catalog */
} te_rel;

typedef struct te_operand {
  int rel;                   /* index into te_plan.rels */
  int rank;                  /* rank of the relation */
  int label[TR_MAX_RANK];    /* node label index of each dimension */
} te_operand;

typedef struct te_node {
  int nlabels;                           /* labels of the join */
  int nout;                              /* leading labels that are kept */
  char lname[TK_MAX_LABELS][TE_NAME_MAX];/* label names (for EXPLAIN) */
  int64_t size[TK_MAX_LABELS];           /* extent of each label */
  int64_t chunk[TK_MAX_LABELS];          /* chunk size of each label */
  int ninputs;                           /* operands */
  te_operand in[TK_MAX_INPUTS];          /* operands, as prog numbers them */
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
} te_node;

typedef struct te_plan {
  int nrels;                      /* relations used */
  te_rel rels[TE_MAX_RELS];       /* stored inputs, temps, the output */
  int nnodes;                     /* EinSum nodes */
  te_node nodes[TE_MAX_NODES];    /* in the order they run */
} te_plan;

/* A worker as the coordinator sees it (dist.c). */
typedef struct te_site {
  int64_t id;                    /* catalog site id */
  char ep[TC_ENDPOINT_MAX];      /* endpoint */
  void *sock;                    /* DEALER socket to it */
  int up;                        /* answered within the liveness window */
  double last_seen;              /* last message from it (tr_now) */
  int pid;                       /* local worker process, 0 if remote */
  void *mon;                     /* PAIR socket reading its socket's
                                    handshake failures (CURVE refused) */
  char refused[160];             /* why its handshake failed ("" if not) */
  uint64_t incarnation;          /* its process, as HELLO_OK and heartbeats say */
  int restarted;                 /* a new incarnation answered: what the old one
                                    held for us (requests, scratch) is lost */
  /* measured by the coordinator, reset per statement (EXPLAIN ANALYZE) */
  int64_t tasks;                 /* tasks run */
  int64_t floats_in, floats_out; /* floats received / sent */
  double busy_s;                 /* time in its tasks */
  char kernels[16];              /* backend its last task ran on */
  uint64_t h2d, d2h;             /* bytes its tasks copied to / from a GPU */
  double copy_s;                 /* time of those copies */
} te_site;

/* The engine handle. */
struct te_engine {
  tc_db *db;              /* catalog */
  uint64_t db_id;         /* tc_db_id(db): every message carries it */
  const tk_backend *kt;   /* kernel table (coordinator-side work) */
  int threads;            /* threads for local chunk loops */
  size_t cache_budget;    /* bytes of chunks kept in memory per plan */
  void *zctx;             /* ZeroMQ context */
  tn_keys keys;           /* CURVE keys */
  int nsites;             /* workers */
  te_site *sites;         /* them */
  uint64_t next_req;      /* request ids */
  tr_cancel interrupt;    /* set by te_interrupt (Ctrl-C): the running
                             statement stops, its workers are told to */
  char workdir[4200];     /* where local workers keep data and logs */
  /* An open block (BEGIN .. COMMIT): its assignments, optimized and run
  ** together at COMMIT; pend[] are their outputs so far, which later
  ** statements of the block read (the compiler consults them first). */
  int in_block;
  int nblock;
  te_stmt *block[TE_MAX_NODES];
  int npend;
  tr_tensor pend[TE_MAX_NODES];
  /* Replicas: a chunk a worker reported damaged in the last failed phase
  ** (site index and chunk id, for the retry), and whether some chunks may
  ** have fewer replicas than the setting (te_maintain's work). */
  int bad_site;
  uint64_t bad_chunk;
  int repair;
  /* Copies workers lost (damaged, missing): a repair puts the chunk back
  ** on the same worker when it can, so placement stays as it was. */
  struct te_lost { uint64_t chunk; int64_t site; } *lost;
  int64_t nlost, caplost;
  double last_ping;       /* when s_ping last asked who is alive (tr_now) */
  /* Warnings for the running statement's result (te_result.notice),
  ** collected by te_notice; heap text, one per line. */
  char *notice;
};

/* Add a line to the running statement's warnings. */
void te_notice(te_engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the warnings collected so far to result r (a TE_RES_NONE result is
** made when r is NULL and there are any); returns r. */
te_result *te_take_notice(te_engine *e, te_result *r);

/* Bind an assignment (TE_ST_ASSIGN or TE_ST_EXPLAIN) to the catalog and
** build its plan (compile.c). */
int te_compile(te_engine *e, const te_stmt *s, te_plan *plan, tr_err *err);
/* Append plan src (a later statement of a block) to dst: relations it
** reads that earlier statements write become those outputs. */
int te_plan_append(te_plan *dst, const te_plan *src, tr_err *err);
/* The TRA expression of a plan as text (caller frees). */
char *te_plan_explain(const te_plan *plan);
/* Where a node's operand chunks come from and its output chunks go:
** read(ctx, operand, lin, ...) fills buf with chunk lin of operand's
** relation; write(ctx, lin, ...) takes output chunk lin.  Both are called
** from many threads at once. */
typedef struct te_chunk_io {
  void *ctx;
  int (*read)(void *ctx, int operand, int64_t lin, void *buf, size_t bytes, tr_err *err);
  int (*write)(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err);
  /* With a node whose drive >= 0: is chunk lin of that operand here (so
  ** its join tuples run here)?  NULL: every chunk is. */
  int (*has)(void *ctx, int operand, int64_t lin);
} te_chunk_io;

/* Run node n for output chunks lins[0..nlins) (lins NULL: all of them) on
** `threads` threads: one task per output chunk walks its join tuples, calls
** the kernels of kt and folds the results with the node's aggregation
** (exec.c).  in_meta[i] describes operand i's relation.  Every kernel call
** polls cancel (may be NULL): once it is set the node stops with TR_EINTR. */
int te_node_run(const tk_backend *kt, int threads, size_t cache_budget, const te_node *n,
                const tr_tensor *const *in_meta, const tr_tensor *out_meta,
                const te_chunk_io *io, const int64_t *lins, int64_t nlins,
                const tr_cancel *cancel, tr_err *err);

/*
** kt->gemm (same arguments) as calls of at most kt->gemm_panel
** multiply-adds, polling cancel before each (TR_EINTR once it is set): a
** BLAS call cannot be stopped, and one product of large chunks runs for
** seconds.  A larger product is halved, recursively: its batch first, then
** the longer of M and N, then K (the second half adding to the first),
** never below 256 rows, columns or depth, because every call packs its
** operands afresh and thin panels would pack more than they compute.  The
** halves depend only on the shape, so a product always sums in the same
** order; one of at most a panel (the usual chunk sizes) is a single call.
*/
int te_gemm_panels(const tk_backend *kt, const tr_cancel *cancel, tr_dtype dt, int ta, int tb,
                   int64_t M, int64_t N, int64_t K, double alpha, const void *a, int64_t lda,
                   int64_t sa, const void *b, int64_t ldb, int64_t sb, double beta, void *c,
                   int64_t ldc, int64_t sc, int64_t B);


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
#define TE_MAX_SITES 64  /* sites the optimizer places on (bit masks) */
#define TE_MAX_ALTS 64   /* alternatives kept for EXPLAIN */

typedef enum te_move { TE_MV_KEEP, TE_MV_BCAST, TE_MV_SHUF, TE_MV_DUP } te_move;

typedef struct te_choice {
  int drive;                  /* operand the tuples follow, -1: by output */
  unsigned part;              /* node-label mask hashed (see above) */
  unsigned agg_part;          /* two-phase: output labels partials go by */
  int twophase;               /* partial aggregation, shuffle, combine */
  int mv[TK_MAX_INPUTS];      /* te_move of each operand */
  int late[TK_MAX_INPUTS];    /* diagonal filter after the move (R2-2 not
                                 applied): every chunk moves */
  char name[96];              /* e.g. "CMM[k]", "BMM[bcast B; A by i]" */
  char ia[640];               /* the IA expression it came from */
  char rules[160];            /* rules applied to reach it */
} te_choice;

/* Placement of a relation: per chunk, the sites (bit per live-site
** position) holding it, and the one reads come from. */
typedef struct te_placed {
  int64_t n;         /* chunks; 0: not placed yet */
  uint64_t *has;     /* holders */
  int8_t *prim;      /* primary holder */
} te_placed;

/* The exact moves of one node under a choice. */
typedef struct te_moves {
  uint64_t *need[TK_MAX_INPUTS]; /* per operand chunk: sites it must reach */
  uint64_t *osites;              /* per output chunk: sites computing it */
  int8_t *owner;                 /* per output chunk: site of the result */
  int64_t in_floats[TK_MAX_INPUTS]; /* floats each operand moves */
  int64_t partial_floats;        /* floats of partials shuffled */
  int64_t total;                 /* all of it */
  double work_total, work_max;   /* join multiply-adds: all, busiest site */
} te_moves;

/* Plans that move the same floats can still differ in the work of their
** busiest site (a plan on 3 of 4 sites, or all on one, moves little and
** runs long).  The optimizer ranks by floats moved plus the idle
** capacity m * max - total expressed in floats at this many multiply-adds
** per float moved (about what one core does while a float crosses a
** local socket). */
#define TE_WORK_PER_FLOAT 64.0

/* What the optimizer decided for a plan. */
typedef struct te_opt {
  int m;                              /* sites */
  int repl;                           /* replication of outputs */
  te_choice choice[TE_MAX_NODES];     /* per node */
  int64_t node_floats[TE_MAX_NODES];  /* predicted, per node */
  int64_t in_floats[TE_MAX_NODES][TK_MAX_INPUTS]; /* per operand move */
  int64_t partial_floats[TE_MAX_NODES];           /* partials shuffled */
  int64_t repl_floats;                /* replicating the outputs */
  int64_t total;                      /* predicted transfer in floats */
  double imbalance;                   /* idle capacity, in floats (above) */
  int nalt;                           /* alternatives considered */
  struct te_alt {
    char name[400];                   /* per node names joined by " | " */
    int64_t floats;                   /* predicted transfer */
    double cost;                      /* floats + imbalance: the rank */
    te_choice choice[TE_MAX_NODES];   /* the plan */
  } *alt;                             /* cheapest first; alt[0] = chosen
                                         unless PLAN forced another */
  int chosen;                         /* index into alt */
  int ntrees;                         /* IA plans the rewrites reached */
  int fired[24];                      /* times each rule applied */
  double ms;                          /* optimization time */
} te_opt;

/* Choose how every node of p runs on m sites with outputs replicated
** `repl` times, from the placement of the stored inputs (pl[rel] for
** TE_REL_STORED relations; others are filled in).  force: the name of an
** alternative to run instead of the cheapest (EXPLAIN ... PLAN 'name'),
** NULL for none; TR_ENOTFOUND with the names if none matches.  Caller
** frees o->alt with te_opt_free. */
int te_optimize(const te_plan *p, int m, int repl, te_placed *pl, const char *force, te_opt *o,
                tr_err *err);
void te_opt_free(te_opt *o);
/* The moves of node k under c (pl: placement of every relation read);
** TR_EINVAL if c is not valid for that placement (a local join that
** would miss pairs).  Fills pl[node out] when out_pl is non-zero. */
int te_moves_compute(const te_plan *p, int k, const te_choice *c, int m, int repl, te_placed *pl,
                     te_moves *mv, int out_pl, tr_err *err);
void te_moves_free(te_moves *mv);
void te_placed_free(te_placed *pl);
/* Hash site of a key (node-label keys) on label mask `labels`. */
int te_hash_site(const te_node *n, unsigned labels, const int64_t *lkey, int m);
/* EXPLAIN of an optimized plan: text (with the TRA expression tra), JSON
** fields (no braces: "sites": .., "chosen": .., "alternatives": ..) or a
** Graphviz graph.  Caller frees. */
char *te_opt_text(const te_plan *p, const te_opt *o, const char *tra);
char *te_opt_json(const te_plan *p, const te_opt *o, const char *tra);
char *te_opt_dot(const te_plan *p, const te_opt *o);

/* ---- Tasks shipped to workers (worker.c) ----------------------------- */

/* Fill parameters of FILL. */
typedef struct te_fill {
  te_fill_kind kind;  /* what to fill with */
  double p0, p1;      /* UNIFORM(lo, hi) / NORMAL(mu, sd) */
  uint64_t seed;      /* seed in effect */
} te_fill;

/* Generate chunk lin of tensor t into buf (its extent, row-major). */
int te_fill_chunk(const tk_backend *kt, const tr_tensor *t, const te_fill *f, int64_t lin,
                  void *buf, const tr_cancel *cancel);

/* One worker's share of a node or a FILL: what it computes from which
** chunk ids it holds, and the ids its output chunks get. */
typedef enum te_task_kind {
  TE_TASK_NODE,    /* a node's join + aggregation + map on listed chunks */
  TE_TASK_FILL,    /* FILL chunks */
  TE_TASK_COMBINE  /* fold the listed partials of each output chunk with
                      the node's aggregation, then its transform */
} te_task_kind;

typedef struct te_task {
  int kind;                           /* a te_task_kind */
  te_fill f;                          /* FILL parameters */
  te_node node;                       /* node (kernel spec, labels) */
  tr_tensor in_meta[TK_MAX_INPUTS];   /* each operand's relation */
  tr_tensor out_meta;                 /* output relation (FILL: tensor) */
  int64_t nin;                        /* input chunks listed */
  int *in_op;                         /* operand of each */
  int64_t *in_lin;                    /* its chunk number */
  uint64_t *in_id;                    /* its chunk id */
  int64_t nout;                       /* output chunks to make here */
  int64_t *out_lin;                   /* their chunk numbers */
  uint64_t *out_id;                   /* their chunk ids */
  int nrep;                           /* workers each output chunk is also
                                         pushed to as soon as it is made */
  char rep[TC_MAX_REPLICAS][TC_ENDPOINT_MAX]; /* their endpoints */
  int scratch;                        /* outputs are dropped before anything
                                         commits them (intermediates,
                                         partials): tc_store_put_scratch */
} te_task;

void te_task_encode(const te_task *t, tn_wbuf *b);
/* Decode and validate (labels, ranks, programs, chunk numbers in range);
** TR_EINVAL with a message for anything malformed. */
int te_task_decode(const void *p, size_t n, te_task *t, tr_err *err);
void te_task_free(te_task *t);

/* ---- The coordinator (dist.c) ------------------------------------------ */

/* Connect to the configured workers, or start local ones; HELLO them. */
int te_cluster_open(te_engine *e, const te_config *cfg, tr_err *err);
/* Disconnect; stop local workers. */
void te_cluster_close(te_engine *e);
/* Optimize a compiled plan (te_optimize) and run it on the workers,
** committing each output as it is made.  x: the EXPLAIN statement (NULL
** for a plain run): without ANALYZE only the plan is shown, with it the
** plan runs and *res gets plan and measurements (text after `tra`, JSON
** or DOT). */
int te_dist_run(te_engine *e, te_plan *p, const te_stmt *x, const char *tra, te_result **res,
                tr_err *err);
/* FILL t on the workers. */
int te_dist_fill(te_engine *e, const tr_tensor *t, const te_fill *f, tr_err *err);
/* DROP TENSOR, telling the workers to drop its chunks. */
int te_dist_drop(te_engine *e, const char *name, tr_err *err);
/* SET name = value (replication). */
int te_dist_set(te_engine *e, const char *name, const char *value, tr_err *err);
/* The replicas each chunk should have now: the setting, at most the
** number of workers recorded. */
int te_dist_target(te_engine *e);
/* Write a new version of a tensor from the coordinator (LOAD). */
typedef struct te_pwrite te_pwrite;
int te_pwrite_begin(te_engine *e, const tr_tensor *meta, te_pwrite **out, tr_err *err);
int te_pwrite_chunk(te_pwrite *w, int64_t lin, const void *buf, size_t bytes, tr_err *err);
int te_pwrite_commit(te_pwrite *w, tr_err *err);
void te_pwrite_free(te_pwrite **w);
/* Read chunks lins[0..n) of t from the workers, calling fn for each. */
int te_pread(te_engine *e, const tr_tensor *t, const int64_t *lins, int64_t n,
             int (*fn)(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err),
             void *ctx, tr_err *err);

/* Let freed chunk-sized buffers be reused instead of returned to the
** system (process-wide; the shell and every worker call it). */
void te_reuse_chunk_buffers(void);

/* Default chunk shape for a tensor of this shape and type: chunks of at
** most about 4 MiB, splitting the largest dimension first. */
void te_default_chunk(int rank, const int64_t *shape, tr_dtype dt, int64_t *chunk);

/* Convert n elements between element types (same type: copy). */
void te_convert(void *dst, tr_dtype dt_dst, const void *src, tr_dtype dt_src, int64_t n);

#endif /* TRADB_ENGINE_INT_H */
