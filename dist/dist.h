/*
** dist/dist.h - the coordinator: the workers of a database (membership,
** heartbeats, rejoins, replica repair), reading and writing chunks from
** the shell, and running an optimized plan on the workers.
*/
#ifndef TRADB_DIST_DIST_H
#define TRADB_DIST_DIST_H

#include "optimize/optimize.h"
#include "exec/exec.h"
#include "engine/engine_int.h"

/* ---- The coordinator (dist.c) ------------------------------------------ */

/* Connect to the configured workers, or start local ones; HELLO them. */
int td_cluster_open(te_engine *e, const te_config *cfg, tr_err *err);
/* Disconnect; stop local workers. */
void td_cluster_close(te_engine *e);
/* Optimize a compiled plan (to_optimize) and run it on the workers,
** committing each output as it is made.  x: the EXPLAIN statement (NULL
** for a plain run): without ANALYZE only the plan is shown, with it the
** plan runs and *res gets plan and measurements (text after `tra`, JSON
** or DOT). */
int td_run(te_engine *e, ta_plan *p, const tp_stmt *x, const char *tra, te_result **res,
                tr_err *err);
/* FILL t on the workers. */
int td_fill(te_engine *e, const tr_tensor *t, const tx_fill *f, tr_err *err);
/* DROP TENSOR, telling the workers to drop its chunks. */
int td_drop(te_engine *e, const char *name, tr_err *err);
/* SET name = value (replication). */
int td_set(te_engine *e, const char *name, const char *value, tr_err *err);
/* The replicas each chunk should have now: the setting, at most the
** number of workers recorded. */
int td_target(te_engine *e);
/* Write a new version of a tensor from the coordinator (LOAD). */
typedef struct td_pwrite td_pwrite;
int td_pwrite_begin(te_engine *e, const tr_tensor *meta, td_pwrite **out, tr_err *err);
int td_pwrite_chunk(td_pwrite *w, int64_t lin, const void *buf, size_t bytes, tr_err *err);
int td_pwrite_commit(td_pwrite *w, tr_err *err);
void td_pwrite_free(td_pwrite **w);
/* Read chunks lins[0..n) of t from the workers, calling fn for each. */
int td_pread(te_engine *e, const tr_tensor *t, const int64_t *lins, int64_t n,
             int (*fn)(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err),
             void *ctx, tr_err *err);

#endif /* TRADB_DIST_DIST_H */
