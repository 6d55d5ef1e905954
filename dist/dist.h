/*
** dist/dist.h - the coordinator: the workers of a database (membership,
** heartbeats, rejoins, replica repair), reading and writing chunks for the
** shell, and running an optimized plan on the workers.
**
** The engine drives a statement through three calls in order: it compiles
** the plan (compile/), asks td_run_begin where the plan's inputs are,
** optimizes with that placement (optimize/), and hands the chosen plan to
** td_run_exec.  The coordinator never optimizes and never prints; what it
** has to say beside a result (fewer replicas than wanted, a worker that
** does not answer) it keeps as notices the engine collects.
*/
#ifndef TRADB_DIST_DIST_H
#define TRADB_DIST_DIST_H

#include "optimize/optimize.h"
#include "exec/exec.h"

typedef struct td_cluster td_cluster;

/* How to find or start the workers. */
typedef struct td_config {
  const char *workers;    /* comma-separated endpoints (--workers); NULL =
                             those recorded in the catalog, and if there
                             are none, local workers */
  int local_workers;      /* local workers to start (0: one per core) */
  int threads;            /* kernel threads per local worker (0: 2 x cores / workers) */
  const char *backend;    /* --backend for local workers (NULL: auto) */
  const char *keys;       /* CURVE key directory, NULL = none */
  const char *self_exe;   /* the tradb binary for local workers (NULL:
                             /proc/self/exe) */
  const char *device;     /* --device for local workers (NULL: auto) */
  const char *gpu_memory; /* --gpu-memory for local workers (NULL: default) */
} td_config;

/* Connect to the workers of database db (keeping db for the catalog),
** starting local ones as needed; HELLO them and reconcile what they hold.
** interrupt: the engine's cancel token, polled while waiting.  *out is
** NULL on failure. */
int td_cluster_open(tc_db *db, const td_config *cfg, const tr_cancel *interrupt,
                    td_cluster **out, tr_err *err);
/* Disconnect; stop local workers.  Safe on NULL and twice. */
void td_cluster_close(td_cluster **c);

/* The warnings collected since the last call, one per line, or NULL;
** the caller frees. */
char *td_take_notice(td_cluster *c);

/* ---- Workers ---------------------------------------------------------- */

/* One worker as .workers lists it. */
typedef struct td_worker_stat {
  char endpoint[TC_ENDPOINT_MAX]; /* its endpoint */
  int up;                         /* answered now */
  uint64_t tasks, chunks, bytes_held, bytes_sent, bytes_received; /* its counters */
  char kernels[64];               /* its kernel backend ("-" if down) */
} td_worker_stat;

/* Every worker, pinged now; *out is the caller's. */
int td_workers(td_cluster *c, td_worker_stat **out, int *n, tr_err *err);
/* .worker add / .worker remove (see te_worker_add in engine.h). */
int td_worker_add(td_cluster *c, const char *endpoint, tr_err *err);
int td_worker_remove(td_cluster *c, const char *endpoint, tr_err *err);
/* Restore missing replicas for about budget_s (see te_maintain). */
int td_maintain(td_cluster *c, double budget_s, tr_err *err);
/* Sync the catalog's commits to disk, and drop the chunks they forgot
** (see te_sync). */
void td_sync(td_cluster *c);
/* Workers taken for down while the coordinator waited on them since it
** opened, and (*faults) how many of those were local workers that died of
** a fault of their own (a signal such as SIGSEGV, or a failing exit):
** the engine compares them across a statement that failed. */
uint64_t td_losses(const td_cluster *c, uint64_t *faults);
/* Every live worker writes what it holds of this database in memory only
** (SET synchronous = normal's outputs not yet written) to its files and
** syncs them: after it, losing workers costs no committed data while one
** holding each chunk comes back. */
int td_sync_held(td_cluster *c, tr_err *err);
/* The live local workers write and sync all they hold in memory only,
** waited for however long that takes while they answer, until the
** interrupt is set: a local worker is killed when it has not stopped
** S_REAP_S after it is told to, and what it held in memory only is lost
** with it.  td_cluster_close does it first.  On failure *refused (may be
** NULL) tells a worker that answered it could not write (a full disk:
** what it holds is lost when it stops) from one that did not answer (it
** may still write as it stops, once it runs). */
int td_sync_local(td_cluster *c, int *refused, tr_err *err);

/* ---- Settings ----------------------------------------------------------- */

/* SET replication = k (1 <= k <= TC_MAX_REPLICAS, checked by the caller):
** kept with the database; chunks stored before get their new replicas in
** the background (td_maintain). */
int td_set_replication(td_cluster *c, int k, tr_err *err);
/* The replicas each chunk should have now: the setting, at most the
** number of workers. */
int td_target(td_cluster *c);
/* Kernel threads of the live worker that has fewest (at least 1): what
** the optimizer sizes pieces of work for. */
int td_threads(td_cluster *c);
/* Cores the live workers compute on: their threads, local workers (which
** share this machine) counted at most as its cores. */
int td_cores(td_cluster *c);
/* The smallest --memory a live worker said it keeps within (0: none said). */
int64_t td_memory(td_cluster *c);

/* ---- Chunks for the shell ------------------------------------------------ */

/* FILL t on the workers and commit it. */
int td_fill(td_cluster *c, const tr_tensor *t, const tx_fill *f, tr_err *err);
/* DROP TENSOR, telling the workers to drop its chunks. */
int td_drop(td_cluster *c, const char *name, tr_err *err);
/* Write a new version of a tensor from the coordinator (LOAD). */
typedef struct td_pwrite td_pwrite;
int td_pwrite_begin(td_cluster *c, const tr_tensor *meta, td_pwrite **out, tr_err *err);
int td_pwrite_chunk(td_pwrite *w, int64_t lin, const void *buf, size_t bytes, tr_err *err);
int td_pwrite_commit(td_pwrite *w, tr_err *err);
void td_pwrite_free(td_pwrite **w);
/* Read chunks lins[0..n) of t from the workers, calling fn for each. */
int td_pread(td_cluster *c, const tr_tensor *t, const int64_t *lins, int64_t n,
             int (*fn)(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err),
             void *ctx, tr_err *err);

/* ---- Progress and cost ---------------------------------------------------- */

/* Called while the coordinator waits on workers, about ten times a second:
** units of work done so far of those known (a task's unit is one output
** chunk, which its worker reports as it makes them; any other request is
** one unit).  The total grows as a statement sends more requests. */
typedef void td_progress_fn(void *ctx, int64_t done, int64_t total);
/* Report the progress of statements to fn (NULL: to no one). */
void td_set_progress(td_cluster *c, td_progress_fn *fn, void *ctx);
/* A statement starts: its progress counts from zero. */
void td_progress_start(td_cluster *c);
/* CPU seconds (user, system) the workers spent in this coordinator's
** tasks, as their replies say, since it opened. */
void td_worker_cpu(const td_cluster *c, double *user, double *sys);

/* ---- Running plans ----------------------------------------------------- */

typedef struct td_run td_run;

/* Start running plan p (or only explaining it, run 0): ping the workers,
** find where every stored input is (declared-only inputs become zeros,
** made by FILL tasks when running, placed as FILL would when explaining),
** and give the optimizer's inputs: *m live sites, *repl the replication of
** outputs, and pl[rel] for every relation (the stored ones filled in;
** pl is the run's, valid until td_run_end).  On failure *out is NULL. */
int td_run_begin(td_cluster *c, ta_plan *p, int run, td_run **out, int *m, int *repl,
                 to_placed **pl, tr_err *err);
/* SET scheduler, in the order engine/settings.c names them: statement at a
** time as the optimizer placed it, or its chunk tasks placed by m-SCT,
** m-ETF or m-TOPO when the optimizer's plan does not fit a worker's
** --memory. */
enum { TD_SCHED_STATEMENT, TD_SCHED_MSCT, TD_SCHED_METF, TD_SCHED_MTOPO };
/* Their names, as SET scheduler takes them and EXPLAIN shows them (NULL-ended). */
extern const char *const td_sched_names[];
/* After optimizing (opt, in env): the optimizer's plan's working set on
** each worker is compared with its --memory.  When it fits, or `which` is
** TD_SCHED_STATEMENT, the plan runs as chosen.  Otherwise (or with
** `trace`, for EXPLAIN (FORMAT TRACE)) the plan's chunk tasks, in the
** chunkings the optimizer chose, are placed by that scheduler (m-SCT's LP
** within lp_seconds) and td_run_exec sends each output chunk's task to the
** worker it was placed on.  EXPLAIN shows which and why. */
int td_run_schedule(td_run *r, const to_opt *opt, const to_env *env, int which, double lp_seconds, int trace,
                    tr_err *err);
/* The placement per worker for EXPLAIN: text, or a JSON field
** ("schedule": {..}).  Caller frees; NULL if out of memory. */
char *td_run_schedule_text(const td_run *r, int json);
/* The placement as Chrome trace JSON (EXPLAIN (FORMAT TRACE)); *out is
** the caller's.  TR_EINVAL when the run has no task graph. */
int td_run_trace(const td_run *r, char **out, tr_err *err);
/* Run every node as opt chose (opt's moves), or where td_run_schedule
** placed its tasks, committing each output as
** it is made; temporaries are dropped at the end, and on failure the
** outputs not yet committed too. */
int td_run_exec(td_run *r, const to_opt *opt, tr_err *err);
/* The outputs td_run_exec committed (0 when it has not run). */
int td_run_committed(const td_run *r);
/* What td_run_exec measured, for EXPLAIN ANALYZE: text (operators, sites,
** elapsed) or JSON fields without braces.  Caller frees; NULL if out of
** memory. */
char *td_run_analysis(const td_run *r, int json);
/* Release the run; safe on NULL and twice. */
void td_run_end(td_run **r);

#endif /* TRADB_DIST_DIST_H */
