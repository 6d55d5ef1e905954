/*
** engine/engine.h - statements in, results out.
**
** The shell hands the engine one statement at a time (te_statement_end()
** finds where a statement stops); the engine parses it, binds it to the
** catalog, compiles assignments to the tensor relational algebra (TRA),
** runs the plan on the chunk kernels and commits the result.  The engine
** never prints: what a statement shows comes back as a te_result.
*/
#ifndef TRADB_ENGINE_H
#define TRADB_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include "util/util.h"

typedef struct te_engine te_engine;

/* How to open an engine. */
typedef struct te_config {
  const char *dbpath;  /* database directory; NULL = transient */
  int threads;         /* threads per local worker; 0 = cores / workers */
  const char *backend; /* kernel backend name; NULL = "auto" */
  const char *workers; /* comma-separated worker endpoints (--workers);
                          NULL = those recorded in the catalog, and if
                          there are none, local workers */
  int local_workers;   /* local workers to start when none are configured
                          (--local-workers); 0 = number of cores */
  const char *keys;    /* CURVE key directory (--keys), NULL = none */
  const char *self_exe;/* path of the tradb binary, to start local workers
                          (NULL: /proc/self/exe) */
  const char *device;  /* --device for local workers ("gpu", "cpu",
                          "auto"); NULL = auto */
  const char *gpu_memory; /* --gpu-memory for each local worker, as given;
                             NULL = the worker's default */
} te_config;



int te_open(const te_config *cfg, te_engine **out, tr_err *err);
/* Close; safe on NULL and twice; a transient database is removed. */
void te_close(te_engine **e);

/* What a statement returns for display. */
typedef enum te_result_kind {
  TE_RES_NONE,   /* nothing to show */
  TE_RES_ROWS,   /* a small table: SHOW TENSORS, DESCRIBE */
  TE_RES_TENSOR, /* values of a tensor or a slice of it: PRINT */
  TE_RES_TEXT    /* preformatted text: EXPLAIN */
} te_result_kind;

typedef struct te_result {
  te_result_kind kind;
  /* TE_RES_ROWS */
  int ncols;                   /* columns */
  int nrows;                   /* rows */
  char **colnames;             /* ncols names */
  char **cells;                /* nrows * ncols strings, row-major */
  /* TE_RES_TENSOR */
  char name[64];               /* tensor printed */
  tr_dtype dtype;              /* its element type (for formatting) */
  int rank;                    /* rank of the values (the slice keeps the
                                  tensor's rank) */
  int64_t shape[TR_MAX_RANK];  /* extent of the values */
  int64_t origin[TR_MAX_RANK]; /* global index of values[0] */
  int64_t gap[TR_MAX_RANK];    /* summarised (te_set_print): values along
                                  dimension d at positions gap[d] and after
                                  are skip[d] indices further on (the
                                  middle was left out); -1: none */
  int64_t skip[TR_MAX_RANK];   /* indices left out at gap[d] */
  int64_t full[TR_MAX_RANK];   /* extent of the slice asked for */
  double *values;              /* row-major, prod(shape) values */
  /* TE_RES_TEXT */
  char *text;                  /* NUL-terminated, ends with a newline */
  /* any kind */
  char *notice;                /* warnings about what the statement did
                                  (it succeeded), one per line ending in a
                                  newline; NULL: none */
} te_result;

/* Free a result; safe on NULL and twice. */
void te_result_free(te_result **r);

/* Workers: record and connect (.worker add EP), forget (.worker remove
** EP), and list them with state and counters (.workers): a TE_RES_ROWS
** result with columns endpoint, state, tasks, chunks, bytes_sent,
** bytes_received, kernels.  Adding a worker that holds chunks of this
** database keeps them (they count as replicas).  Removing one first copies
** what it holds to the other workers, up to the replication setting, and
** is refused (nothing changes) when that would lose a chunk: the worker
** is down and holds the only copy, or no other worker is up.  *res (may
** be NULL) gets a TE_RES_NONE result whose notice says what was done. */
int te_worker_add(te_engine *e, const char *endpoint, te_result **res, tr_err *err);
int te_worker_remove(te_engine *e, const char *endpoint, te_result **res, tr_err *err);
int te_workers(te_engine *e, te_result **res, tr_err *err);

/* Work the engine does between statements: copying the replicas that
** chunks lack (after a worker came back or joined, a damaged copy, or a
** higher replication setting), for about budget_s seconds.  Returns 1 if
** work is left, 0 if none, a TR_E* code on failure.  The shell calls it
** while it waits for input; the engine also does some before each
** statement that finds a worker returned. */
int te_maintain(te_engine *e, double budget_s, tr_err *err);
/* Make every statement so far durable as its `SET synchronous` promised:
** under normal, statements commit without syncing the catalog to disk
** (their outputs are in workers' memory only), and the catalog is synced
** within DI_FORGOT_S while statements run; the shell calls this before it
** waits for input, so that an idle session owes nothing. */
void te_sync(te_engine *e);
/* Before a session ends: the local workers write and sync what they hold
** in memory only, however long that takes (they are stopped after, and
** one killed while it writes loses it); te_interrupt ends the wait.  On
** failure *refused says a worker answered that it could not write
** (td_sync_local). */
int te_write_held(te_engine *e, int *refused, tr_err *err);

/*
** Length of the first complete statement in text (through its ';',
** skipping '--' comments and quoted strings), or 0 if text holds no
** complete statement yet.  Leading blanks and comments count in the
** length.  Used by the shell to know when to stop reading lines.
*/
size_t te_statement_end(const char *text);

/* The offset of the quote opening a string that text ends inside (a
** statement that cannot complete: its string is never closed), or -1. */
long te_open_quote(const char *text);

/* True if text holds only blanks and comments. */
int te_is_blank(const char *text);

/*
** Run one statement (text, len bytes, ';' included or not).  On success
** *res (which may be NULL if the caller does not want it) receives the
** result.  On failure: a TR_E* code and a one-line message in err; stored
** data is unchanged.  te_interrupt() cancels it with TR_EINTR.
*/
int te_exec(te_engine *e, const char *text, size_t len, te_result **res,
            tr_err *err);

/*
** Interrupt: make the statement running on e (from another thread, or a
** signal handler: this is async-signal-safe) stop as soon as it can with
** TR_EINTR; its workers are told to stop its tasks.  Like sqlite3_interrupt
** the request stays until cleared: te_interrupt_clear() before a statement
** lets it run (the shell clears it before each one).
*/
void te_interrupt(te_engine *e);
void te_interrupt_clear(te_engine *e);

/* Keywords of the language (NULL-terminated, static), for completion. */
const char *const *te_keywords(void);

/* Words of the language for help and completion (NULL-terminated,
** static): the first words of statements, EXPLAIN's options, LOAD's
** options, the aggregations and the functions. */
typedef enum te_words_kind {
  TE_WORDS_STATEMENTS, TE_WORDS_EXPLAIN, TE_WORDS_LOAD, TE_WORDS_AGGREGATES, TE_WORDS_FUNCTIONS
} te_words_kind;
const char *const *te_words(te_words_kind kind);

/* Setting i (0, 1, ... until it returns 0) of those SET changes: its
** name, what it is for, the values it allows and its default (as text). */
int te_settings_list(int i, const char **name, const char **help, char *allowed, size_t na,
                     char *dflt, size_t nd);
/* The value of setting name (one te_settings_list gives): its default
** until SET.  A setting of named values gives the index of its name. */
long te_setting(te_engine *e, const char *name);
/* The same as text (a number, or the value's name), into buf. */
void te_setting_text(te_engine *e, const char *name, char *buf, size_t n);

/* Progress of the running statement (called on the thread running it,
** about ten times a second while it waits on workers): units of work
** done of those known so far (see td_set_progress). */
typedef void te_progress_fn(void *ctx, int64_t done, int64_t total);
void te_set_progress(te_engine *e, te_progress_fn *fn, void *ctx);

/* CPU seconds, user and system, the workers spent in this engine's
** tasks since it opened (the shell's .timer adds its own). */
void te_worker_cpu(te_engine *e, double *user, double *sys);

/* How PRINT returns values: summarise (1: at most the print_lines
** setting's lines, columns for a screen `width` characters wide, the
** rest left out in the middle of each dimension as NumPy does; 0: every
** value). */
void te_set_print(te_engine *e, int summarise, int width);

/* Names of all tensors; *names is a NULL-terminated array the caller frees
** with te_free_names(). */
int te_tensor_names(te_engine *e, char ***names, tr_err *err);
void te_free_names(char **names);

/* CREATE TENSOR statements describing one tensor (name) or all (NULL),
** one per line; *text is the caller's (free()). */
int te_schema(te_engine *e, const char *name, char **text, tr_err *err);

/* TR_OK if the shell may write its results over path (.output, .once);
** TR_EINVAL, saying why, if that would destroy a database's data: a file
** in this database's directory, or any database's catalog or chunk file
** (tc_holds_data). */
int te_check_output_path(const te_engine *e, const char *path, tr_err *err);

/* The kernel backend in use (for --version and .show). */
const char *te_backend_name(const te_engine *e);

#endif /* TRADB_ENGINE_H */
