/*
** exec/exec.h - what runs a node's kernel calls on one site, shared by the
** coordinator and the workers: the node runner over a chunk source and
** sink, FILL, the tasks shipped to workers and their wire encoding, and
** the chunk helpers (default chunking, element conversion).
*/
#ifndef TRADB_EXEC_EXEC_H
#define TRADB_EXEC_EXEC_H

#include "compile/compile.h"
#include "net/net.h"

/* Where a node's operand chunks come from and its output chunks go:
** read(ctx, operand, lin, bytes, &b, err) gives chunk lin of operand's
** relation (bytes long) as a blob reference the caller drops, so a chunk
** the store holds in memory is read without a copy; write(ctx, lin, b,
** err) takes output chunk lin, keeping references to b as it needs (its
** bytes do not change after).  Both are called from many threads at once. */
typedef struct tx_chunk_io {
  void *ctx;
  int (*read)(void *ctx, int operand, int64_t lin, size_t bytes, tr_blob **out, tr_err *err);
  int (*write)(void *ctx, int64_t lin, tr_blob *b, tr_err *err);
  /* With a node whose drive >= 0: is chunk lin of that operand here (so
  ** its join tuples run here)?  NULL: every chunk is. */
  int (*has)(void *ctx, int operand, int64_t lin);
} tx_chunk_io;

/* Run node n for output chunks lins[0..nlins) (lins NULL: all of them) on
** `threads` threads: one task per output chunk walks its join tuples, calls
** the kernels of kt and folds the results with the node's aggregation
** (exec.c).  in_meta[i] describes operand i's relation.  Every kernel call
** polls cancel (may be NULL): once it is set the node stops with TR_EINTR.
** threads 0: on the calling thread, inside another node's run (a fused
** consumer, tx_task.then), leaving the BLAS threads and the device's
** chunks as that run set them. */
int tx_node_run(const tk_backend *kt, int threads, size_t cache_budget, const ta_node *n,
                const tr_tensor *const *in_meta, const tr_tensor *out_meta,
                const tx_chunk_io *io, const int64_t *lins, int64_t nlins,
                const tr_cancel *cancel, tr_err *err);

/*
** kt->gemm (same arguments) as calls of at most kt->gemm_panel
** multiply-adds, polling cancel before each (TR_EINTR once it is set): a
** BLAS call cannot be stopped, and one product of large chunks runs for
** seconds.  A larger product is halved, recursively: its batch first, then
** K (the second half adding to the first), then the longer of M and N,
** never below 256 rows, columns or depth, because every call packs its
** operands afresh and thin panels would pack more than they compute.  The
** halves depend only on the shape, so a product always sums in the same
** order; one of at most a panel (the usual chunk sizes) is a single call.
*/
int tx_gemm_panels(const tk_backend *kt, const tr_cancel *cancel, tr_dtype dt, int ta, int tb,
                   int64_t M, int64_t N, int64_t K, double alpha, const void *a, int64_t lda,
                   int64_t sa, const void *b, int64_t ldb, int64_t sb, double beta, void *c,
                   int64_t ldc, int64_t sc, int64_t B);

/* ---- Tasks shipped to workers (worker.c) ----------------------------- */

/* Fill parameters of FILL. */
typedef struct tx_fill {
  tp_fill_kind kind;  /* what to fill with */
  double p0, p1;      /* UNIFORM(lo, hi) / NORMAL(mu, sd) */
  uint64_t seed;      /* seed in effect */
} tx_fill;

/* Generate chunk lin of tensor t into buf (its extent, row-major). */
int tx_fill_chunk(const tk_backend *kt, const tr_tensor *t, const tx_fill *f, int64_t lin,
                  void *buf, const tr_cancel *cancel);

/* One worker's share of a node or a FILL: what it computes from which
** chunk ids it holds, and the ids its output chunks get. */
typedef enum tx_task_kind {
  TX_TASK_NODE,    /* a node's join + aggregation + map on listed chunks */
  TX_TASK_FILL,    /* FILL chunks */
  TX_TASK_COMBINE  /* fold the listed partials of each output chunk with
                      the node's aggregation, then its transform */
} tx_task_kind;

typedef struct tx_task {
  int kind;                           /* a tx_task_kind */
  tx_fill f;                          /* FILL parameters */
  ta_node node;                       /* node (kernel spec, labels) */
  tr_tensor in_meta[TK_MAX_INPUTS];   /* each operand's relation */
  tr_tensor out_meta;                 /* output relation (FILL: tensor) */
  int64_t nin;                        /* input chunks listed */
  int *in_op;                         /* operand of each */
  int64_t *in_lin;                    /* its chunk number */
  uint64_t *in_id;                    /* its chunk id */
  uint8_t *in_wait;                   /* 1: a copy sent to this worker in
                                         the task's own phase, which may
                                         arrive after the task starts: a
                                         read waits for it (until the task
                                         is cancelled) instead of failing.
                                         A combine task with partials on
                                         their way is set aside until they
                                         are all there, never waited for
                                         (worker/jobs.c says why) */
  int64_t *in_by;                     /* [nin] the inputs' indices by
                                         operand, then chunk number
                                         (tx_task_input; decoded tasks) */
  int64_t nout;                       /* output chunks to make here */
  int64_t *out_lin;                   /* their chunk numbers */
  uint64_t *out_id;                   /* their chunk ids */
  int nrep;                           /* workers each output chunk is also
                                         pushed to as soon as it is made */
  char rep[TC_MAX_REPLICAS][TC_ENDPOINT_MAX]; /* their endpoints */
  int rep_keep[TC_MAX_REPLICAS];      /* how each keeps them (a tc_keep, not
                                         scratch): under synchronous = full
                                         a replica on a file system that
                                         an earlier holder's copy is made
                                         durable on keeps it in the
                                         background (dist/sites.c) */
  char (*out_to)[TC_ENDPOINT_MAX];    /* NULL, or for each output chunk the
                                         worker it is pushed to as soon as
                                         it is made ("": none), kept there
                                         as this task keeps it: a partial
                                         for the combine task of its chunk's
                                         owner, sent once this task is done */
  int keep;                           /* how the outputs are stored and
                                         pushed (a tc_keep): TC_KEEP_SCRATCH
                                         for what is dropped before anything
                                         commits it (intermediates,
                                         partials), else as the durability
                                         setting asks */
  /* An elementwise node run inside this task (optimize's
  ** to_group_fusion), or NULL: each output chunk this task makes is, as
  ** soon as it is made, operand then_from of then's output chunk of the
  ** same number, computed on the same thread before the task goes on.
  ** then is a node task of its own (never with a then): the other
  ** operands' chunks, its output ids in the order of this task's out_lin,
  ** its replicas and keep.  then_store: this task's own chunks are stored
  ** too (0: a temporary only then reads, never stored).  tx_task_free
  ** frees then. */
  struct tx_task *then;
  int then_from;
  int then_store;
} tx_task;

void tx_task_encode(const tx_task *t, tn_wbuf *b);
/* Decode and validate (labels, ranks, programs, chunk numbers in range);
** TR_EINVAL with a message for anything malformed. */
int tx_task_decode(const void *p, size_t n, tx_task *t, tr_err *err);
void tx_task_free(tx_task *t);
/* The index in decoded task t's input lists of operand's chunk lin, -1 if
** it lists none: a binary search, where a scan of the list for every read
** made a task reading 80,000 chunks take 1.5 s more. */
int64_t tx_task_input(const tx_task *t, int operand, int64_t lin);

/* Default chunk shape for a tensor of this shape and type: chunks of at
** most about 4 MiB, splitting the largest dimension first. */
void tx_default_chunk(int rank, const int64_t *shape, tr_dtype dt, int64_t *chunk);

/* Convert n elements between element types (same type: copy). */
void tx_convert(void *dst, tr_dtype dt_dst, const void *src, tr_dtype dt_src, int64_t n);

/* Row-major element strides of a box of extent ext. */
void tx_row_major(int rank, const int64_t *ext, int64_t *stride);

#endif /* TRADB_EXEC_EXEC_H */
