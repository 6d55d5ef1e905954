/*
** catalog/catalog_int.h - private to catalog/: the tc_db structure and the
** helpers that catalog.c (open, schema, tensor entries) shares with
** placed.c (sites, chunk placement, settings) and store.c (a worker's
** chunk store).  All are defined in catalog.c.
*/
#ifndef TRADB_CATALOG_CATALOG_INT_H
#define TRADB_CATALOG_CATALOG_INT_H

#include <sqlite3.h>
#include "catalog/catalog.h"

#define CI_PATH 4096  /* longest path we build */
#define CI_KEYSTR 200 /* "k0,...,k7": a stored shape or chunk key */

/* Prepared statements a connection keeps for reuse: the catalog runs the
** same few dozen statements over and over, and preparing them anew took
** a tenth of the shell's time on a 10 ms statement. */
#define CI_STMT_CACHE 48

struct tc_db {
  sqlite3 *sql;   /* catalog connection, EXCLUSIVE locking mode */
  struct {
    sqlite3_stmt *st; /* prepared (NULL: free slot) */
    int busy;         /* handed out by ci_prepare, not yet ci_finish'ed */
  } stmt[CI_STMT_CACHE];
  char *dir;      /* database directory as given (or the temporary one) */
  int transient;  /* remove dir recursively on close */
  uint64_t id;    /* the database id (meta 'db_id'), never 0 */
  double unsynced; /* when the oldest commit not yet on disk was made
                      (tc_commit_placed_unsynced), 0: none */
};

/* snprintf into a path buffer; TR_EINVAL if it does not fit. */
int ci_path(char *buf, size_t size, tr_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* fsync a directory so that renames and unlinks in it are durable; returns
** 0 or an errno value. */
int ci_fsync_dir(const char *dir);
/* 64 random bits (kernel randomness, or a time/pid/counter mix without). */
uint64_t ci_random64(void);

/* "4096,4096" ("" for rank 0): how shapes and chunk keys are stored. */
void ci_dims_str(char *buf, size_t size, int rank, const int64_t *v);
/* Parse a stored checksum (16 lowercase hex digits): 0, or -1 if bad. */
int ci_sum_parse(const char *s, uint64_t *out);
/* Check a tensor description (name, type, rank, extents, sizes). */
int ci_check_meta(const tr_tensor *t, tr_err *err);

/* SQLite: turn the connection's last error into a tr_err (what names the
** operation); run a statement list; prepare one statement (*st = NULL on
** failure); roll back the open transaction, if any. */
int ci_sqlfail(tc_db *db, tr_err *err, const char *what);
int ci_exec(tc_db *db, const char *sql, tr_err *err);
/* Make room at index cnt of the heap array *pv (*cap elements of elem
** bytes), doubling it when full; TR_OK or TR_ENOMEM. */
int ci_grow(void *pv, int64_t cnt, int64_t *cap, size_t elem, tr_err *err);
int ci_prepare(tc_db *db, const char *sql, sqlite3_stmt **st, tr_err *err);
/* Done with a statement of ci_prepare (NULL: nothing): reset for reuse,
** its bindings cleared, or finalized if it is not one the connection
** keeps. */
void ci_finish(tc_db *db, sqlite3_stmt *st);
void ci_rollback(tc_db *db);

/* Normalize a new version's description: id and version 0, extents past
** the rank zeroed, format from tr_format_name(). */
void ci_meta_normal(tr_tensor *m);
/* Inside an open transaction: make meta (normalized) the new version of
** the tensor of that name.  Looks it up, forgets the old version's chunk
** and replica rows and updates the tensors row, or inserts one.  *id and
** *version receive the entry's. */
int ci_tensor_replace(tc_db *db, const tr_tensor *meta, int64_t *id,
                      int64_t *version, tr_err *err);
/* Inside an open transaction: delete tensor `id` with its chunk and
** replica rows. */
int ci_tensor_delete(tc_db *db, int64_t id, tr_err *err);

/* TR_OK if t (with t->id != 0) is the catalog's current description of
** the tensor (version, shape, chunk shape and type), else TR_ENOTFOUND
** "tensor NAME changed or was dropped since it was looked up". */
int ci_tensor_current(tc_db *db, const tr_tensor *t, tr_err *err);

#endif /* TRADB_CATALOG_CATALOG_INT_H */
