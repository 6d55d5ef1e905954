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
  TE_ST_SET       /* SET name = value */
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
  tc_tensor meta;     /* name, dtype, shape and chunk shape */
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
  const tk_backend *kt;   /* kernel table (coordinator-side work) */
  int threads;            /* threads for local chunk loops */
  size_t cache_budget;    /* bytes of chunks kept in memory per plan */
  void *zctx;             /* ZeroMQ context */
  tn_keys keys;           /* CURVE keys */
  int nsites;             /* workers */
  te_site *sites;         /* them */
  uint64_t next_req;      /* request ids */
  char workdir[4200];     /* where local workers keep data and logs */
};

/* Bind an assignment (TE_ST_ASSIGN or TE_ST_EXPLAIN) to the catalog and
** build its plan (compile.c). */
int te_compile(te_engine *e, const te_stmt *s, te_plan *plan, tr_err *err);
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
} te_chunk_io;

/* Run node n for output chunks lins[0..nlins) (lins NULL: all of them) on
** `threads` threads: one task per output chunk walks its join tuples, calls
** the kernels of kt and folds the results with the node's aggregation
** (exec.c).  in_meta[i] describes operand i's relation. */
int te_node_run(const tk_backend *kt, int threads, size_t cache_budget, const te_node *n,
                const tc_tensor *const *in_meta, const tc_tensor *out_meta,
                const te_chunk_io *io, const int64_t *lins, int64_t nlins, tr_err *err);


/* ---- Tasks shipped to workers (worker.c) ----------------------------- */

/* Fill parameters of FILL. */
typedef struct te_fill {
  te_fill_kind kind;  /* what to fill with */
  double p0, p1;      /* UNIFORM(lo, hi) / NORMAL(mu, sd) */
  uint64_t seed;      /* seed in effect */
} te_fill;

/* Generate chunk lin of tensor t into buf (its extent, row-major). */
int te_fill_chunk(const tk_backend *kt, const tc_tensor *t, const te_fill *f, int64_t lin,
                  void *buf);

/* One worker's share of a node or a FILL: what it computes from which
** chunk ids it holds, and the ids its output chunks get. */
typedef struct te_task {
  int fill;                           /* 1: FILL task; 0: node task */
  te_fill f;                          /* FILL parameters */
  te_node node;                       /* node (kernel spec, labels) */
  tc_tensor in_meta[TK_MAX_INPUTS];   /* each operand's relation */
  tc_tensor out_meta;                 /* output relation (FILL: tensor) */
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
/* Run a compiled plan on the workers and commit its output; with analyze,
** *res receives the measurements (text after `tra`, or JSON). */
int te_dist_run(te_engine *e, te_plan *p, int analyze, int json, const char *tra,
                te_result **res, tr_err *err);
/* FILL t on the workers. */
int te_dist_fill(te_engine *e, const tc_tensor *t, const te_fill *f, tr_err *err);
/* DROP TENSOR, telling the workers to drop its chunks. */
int te_dist_drop(te_engine *e, const char *name, tr_err *err);
/* SET name = value (replication). */
int te_dist_set(te_engine *e, const char *name, const char *value, tr_err *err);
/* Write a new version of a tensor from the coordinator (LOAD). */
typedef struct te_pwrite te_pwrite;
int te_pwrite_begin(te_engine *e, const tc_tensor *meta, te_pwrite **out, tr_err *err);
int te_pwrite_chunk(te_pwrite *w, int64_t lin, const void *buf, size_t bytes, tr_err *err);
int te_pwrite_commit(te_pwrite *w, tr_err *err);
void te_pwrite_free(te_pwrite **w);
/* Read chunks lins[0..n) of t from the workers, calling fn for each. */
int te_pread(te_engine *e, const tc_tensor *t, const int64_t *lins, int64_t n,
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
