/*
** engine/engine_int.h - private to engine/: the engine handle, and the
** helpers its files share (results and notices).
*/
#ifndef TRADB_ENGINE_INT_H
#define TRADB_ENGINE_INT_H

#include "engine/engine.h"
#include "parse/parse.h"
#include "compile/compile.h"
#include "optimize/optimize.h"
#include "exec/exec.h"
#include "catalog/catalog.h"
#include "dist/dist.h"

/* Bytes the layout search keeps a chunk within: large enough that a
** kernel call amortises its overhead, small enough that a task's operand
** chunks fit a worker's memory many times over.  Declared chunkings may
** go up to what a worker accepts (TN_MAX_DATA). */
#define TE_CHUNK_LIMIT ((int64_t)256 << 20)

/* The engine handle. */
struct te_engine {
  tc_db *db;              /* catalog */
  const tk_backend *kt;   /* kernel table (coordinator-side work) */
  int threads;            /* threads for local chunk loops */
  size_t cache_budget;    /* bytes of chunks kept in memory per plan */
  td_cluster *cluster;    /* the workers */
  tl_weights w;           /* the cost model's weights: fitted by CALIBRATE
                             (kept in the catalog) or the defaults */
  to_layout_mode layout;  /* SET layout: auto (the default) or declared */
  to_memo *memo;          /* layout decisions remembered for the session */
  tr_cancel interrupt;    /* set by te_interrupt (Ctrl-C): the running
                             statement stops, its workers are told to */
  /* An open block (BEGIN .. COMMIT): its assignments, optimized and run
  ** together at COMMIT; pend[] are their outputs so far, which later
  ** statements of the block read (the compiler consults them first). */
  int in_block;
  int nblock;
  tp_stmt *block[TA_MAX_NODES];
  int npend;
  tr_tensor pend[TA_MAX_NODES];
  int print_summary;      /* te_set_print */
  int print_width;
  /* The running statement: outputs it committed so far (te_run_plan), and
  ** why it ran again if it did (a worker lost: s_again in engine.c), the
  ** warning its result carries. */
  int committed;
  char *again;
};

/* ---- results (result.c) ---------------------------------------------------- */

/* A result with a table of ncols named columns, and a row added to it
** (cells copied); NULL / TR_ENOMEM when out of memory. */
te_result *te_rows_new(int ncols, const char *const *names);
int te_rows_add(te_result *r, const char *const *cells);
/* A TE_RES_TEXT result taking text (NULL stays NULL, text freed). */
te_result *te_text_result(char *text);
/* Hand the coordinator's warnings to result r (a TE_RES_NONE result is
** made when r is NULL and there are any); returns r. */
te_result *te_take_notice(te_engine *e, te_result *r);
/* "4 x 6" from dimensions, with sep between them. */
void te_dims_text(char *buf, size_t n, int rank, const int64_t *v, const char *sep);

/* ---- settings (settings.c) ---------------------------------------------------- */

/* SET name = value; SHOW SETTINGS. */
int te_set(te_engine *e, const tp_stmt *s, tr_err *err);
int te_show_settings(te_engine *e, te_result **res, tr_err *err);

/* ---- slices (slice.c) ------------------------------------------------------------ */

/* The part of a tensor a statement names: each dimension's first global
** index and extent, and whether it stays a dimension of what is made (a
** single index of a slice drops it). */
typedef struct te_box {
  int rank;                 /* the tensor's */
  int64_t lo[TR_MAX_RANK];  /* first index */
  int64_t ext[TR_MAX_RANK]; /* extent */
  int keep[TR_MAX_RANK];    /* a dimension of the array (else extent 1) */
} te_box;

/* The box of s's ranges of t (all of it without ranges). */
int te_box_of(const tp_stmt *s, const tr_tensor *t, te_box *box, tr_err *err);
/* Copy between chunk lin of t (row-major, type t->dtype) and the user's
** array a, which holds box (a's dimensions are the box's kept ones), in
** either direction, with e's kernels: to the array the part of the chunk
** inside the box, from it a whole chunk (which must lie inside).
** TR_EINTR once e is interrupted. */
int te_box_copy(te_engine *e, const tr_tensor *t, const te_box *box, tc_array *a, int64_t lin,
                void *chunk, int to_array);
/* Chunks of t into created array a (holding box) by bands: the array's
** rows that a row of chunks covers (all of every other dimension), each
** written to the file with one tc_array_write once complete, its buffer
** then used again.  te_bands_begin sets *w NULL where a band would be
** too large to hold (the caller copies into a->data, as te_box_copy). */
typedef struct te_bands te_bands;
int te_bands_begin(te_engine *e, const tr_tensor *t, const te_box *box, tc_array *a, te_bands **w,
                   tr_err *err);
int te_bands_put(te_bands *w, int64_t lin, void *chunk, tr_err *err);
int te_bands_end(te_bands *w, tr_err *err); /* every band written? */
void te_bands_free(te_bands **w);
/* Write t (a new version, or a new tensor) from array a, chunk by chunk. */
int te_write_array(te_engine *e, const tr_tensor *t, tc_array *a, const char *what, tr_err *err);
/* name = src[ranges] */
int te_slice(te_engine *e, const tp_stmt *s, tr_err *err);
/* PRINT name[ranges] */
int te_print(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err);

/* ---- statements (statements.c) ---------------------------------------------- */

int te_create(te_engine *e, const tp_stmt *s, tr_err *err);
int te_load(te_engine *e, const tp_stmt *s, tr_err *err);
int te_save(te_engine *e, const tp_stmt *s, tr_err *err);
int te_fill(te_engine *e, const tp_stmt *s, tr_err *err);
int te_show(te_engine *e, te_result **res, tr_err *err);
int te_describe(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err);
/* An assignment, or EXPLAIN [ANALYZE] of one. */
int te_assign(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err);
/* Compile flags for the current layout setting (TA_SPLIT under auto). */
unsigned te_compile_flags(const te_engine *e);
/* The statements of e's open block, as ta_compile takes them: block[k]
** made pend[k]. */
static inline const tp_stmt *const *te_block_defs(const te_engine *e) {
  return (const tp_stmt *const *)e->block;
}

/* What te_run_plan predicted and measured (CALIBRATE). */
typedef struct te_measure {
  tl_cost cost;       /* the chosen plan's components, summed over nodes */
  double predicted_s; /* its predicted seconds */
  double elapsed_s;   /* from finding the inputs to the last commit */
} te_measure;

/* Run a compiled plan: where its inputs are (dist), optimized with that
** placement (optimize: its layout, then its IA plans), run (dist).  x:
** the EXPLAIN statement (NULL for a plain run): *res then gets the TRA
** plan as optimized and the IA plan, and with ANALYZE what the run
** measured.  meas (may be NULL): filled for a run. */
int te_run_plan(te_engine *e, ta_plan *p, const tp_stmt *x, te_result **res, te_measure *meas,
                tr_err *err);

/* ---- the cost model's weights (calibrate.c) ---------------------------------------- */

/* The settings kept in the catalog that the engine holds, read at open (settings.c). */
int te_settings_load(te_engine *e, tr_err *err);
/* The fitted weights kept in the catalog, or the defaults: into e->w. */
int te_weights_load(te_engine *e, tr_err *err);
/* CALIBRATE: run the probes, fit the weights, keep them. */
int te_calibrate(te_engine *e, te_result **res, tr_err *err);

#endif /* TRADB_ENGINE_INT_H */
