/*
** catalog/store_int.h - private to catalog/: a worker's chunk store as the
** four files that make it up share it.  store.c serves the API of
** catalog.h; storemem.c the chunks held in memory (the byte budget, which
** copies go when it is full, the background writer); storefiles.c the
** files (names, the scan at open, recycled files); storeindex.c the index.
** Calls go only in that order, so no two of them call each other.
**
** Locks: `lock` (a rwlock) guards the index, every entry's fields and the
** files under final names; `mem_bytes` and `dirty_bytes` change only with
** it held for writing.  `free_mu` guards the recycled files and is taken
** after `lock`.  `wmu` only pairs with `wcv`, on which the writer sleeps.
*/
#ifndef TRADB_CATALOG_STORE_INT_H
#define TRADB_CATALOG_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include "catalog/catalog_int.h"

#define CI_RECYCLE_MIN (256 << 10) /* smaller dropped files are simply unlinked */
#define CI_RECYCLE_FILES 64        /* recycled files kept at most */
#define CI_IDLE_S 0.25     /* the store is idle once no task has used it this long */
#define CI_DEFER_MAX_S 30.0 /* a dirty chunk waits for an idle store this long at most */
#define CI_HOST_DEFER_S 5.0 /* and past its due time for the work of other processes on
                               this machine (util.h, tr_host_working) this long at most */
#define CI_DISK_RESERVE ((int64_t)64 << 20) /* free disk bytes a chunk held in memory only
                                              leaves beyond those it and the others need */
#define CI_RETRY_MIN_S 1.0  /* the writer's pause after a failed write, */
#define CI_RETRY_MAX_S 30.0 /* doubled while they fail, up to this */

/* One indexed chunk.  Its bytes are in memory (mem), in its file (file),
** or both; one in memory only is dirty unless it is scratch. */
typedef struct ci_entry {
  uint64_t id;     /* chunk id; 0 marks an empty slot */
  uint64_t nbytes; /* payload bytes */
  uint64_t sum;    /* payload checksum */
  tr_dtype dtype;  /* element type */
  tr_blob *mem;    /* its bytes in memory (the store's reference), or NULL */
  uint64_t seq;    /* when it was put, in put order: tells this version of
                      the id from a later put of the same id */
  uint64_t used;   /* when it was last read (same clock): the least
                      recently used copy in memory goes first */
  double due;      /* dirty: when the writer may start on it (its put +
                      the delay), if the store is idle by then */
  double last;     /* dirty: when the writer starts on it, idle or not
                      (its put + CI_DEFER_MAX_S) */
  uint8_t file;    /* its file holds it, under its final name */
  uint8_t scratch; /* never written unless over budget: dropped before
                      anything commits it */
  uint8_t writing; /* a background writer is writing its file */
  uint8_t synced;  /* its file is known to be on the disk: synced since it
                      was written (the writer's, a tc_store_sync's) or
                      vouched for by the memo of the last clean close */
} ci_entry;

#define CI_DIRTY(e) ((e)->mem && !(e)->file && !(e)->scratch)

struct tc_store {
  char *dir;                 /* the store directory */
  int lockfd;                /* DIR/LOCK, flock'd until close; -1 if not */
  pthread_rwlock_t lock;     /* see above */
  ci_entry *tab;             /* open addressing with linear probing */
  size_t cap;                /* slots in tab: 0 or a power of two */
  int64_t count;             /* chunks indexed */
  int64_t bytes;             /* their payload bytes */
  int64_t nbad;              /* files set aside as *.bad by open */
  int indexed;               /* open locked DIR and indexed its files */
  int64_t vouched;           /* files open indexed from the memo, unread */
  int64_t verified_bytes;    /* payload bytes open read to verify files */
  atomic_int_fast64_t written; /* chunk files given their final name since open */
  atomic_int_fast64_t fs_syncs; /* syncs of the whole file system (ci_write_dirty) since open */
  atomic_uint_fast64_t clock; /* seq and used values, and temporary names */
  /* memory (storemem.c) */
  int64_t mem_bytes;         /* bytes of chunks held in memory */
  int64_t dirty_bytes;       /* of them, not yet written */
  int64_t dirty_chunks;      /* and their number */
  int64_t disk_reserve;      /* CI_DISK_RESERVE unless set (tc_store_set_disk_reserve) */
  atomic_int_fast64_t write_failures; /* background writes that failed since open */
  atomic_int write_failing;  /* the writer's last write failed: no chunk is
                                held in memory only until one succeeds */
  char write_why[256];       /* while write_failing: that write's error */
  tc_mem_pool *pool;         /* the budget they count against: own, or
                                one shared with other stores */
  tc_mem_pool *own;          /* the store's own (tc_store_open) */
  double delay;              /* a dirty chunk is written this long after
                                its put; < 0: only when asked */
  pthread_mutex_t wmu;       /* with wcv; guards write_why too */
  pthread_cond_t wcv;        /* the writer waits here for work */
  uint64_t wgen;             /* bumped (under wmu) when work may have come */
  double wnext;              /* when the sleeping writer looks again
                                (under wmu); INFINITY: only when woken */
  int wquit;                 /* the writer stops (under wmu) */
  int busy;                  /* tasks using the store now (under wmu) */
  double idle_since;         /* when the last of them ended (under wmu) */
  pthread_t writer;          /* the background writer */
  int writing;               /* it was started */
  int dir_unsynced;          /* a chunk file took its final name since the
                                directory was last synced (under lock) */
  /* recycled files (storefiles.c) */
  pthread_mutex_t free_mu;   /* guards the four below */
  struct {
    uint64_t seq;            /* the file is DIR/<seq>.free */
    int64_t size;            /* its length */
  } free[CI_RECYCLE_FILES];  /* oldest first */
  int nfree;
  int64_t free_bytes;        /* their total length */
  int64_t free_max;          /* the budget for free_bytes; 0: recycle none */
};

/* ---- storeindex.c: the index (lock held; for writing to change it) --------- */

ci_entry *ci_find(tc_store *s, uint64_t id);
/* Make room for one more entry: TR_OK or TR_ENOMEM. */
int ci_reserve(tc_store *s);
/* Insert or replace e (after ci_reserve; a replaced entry's memory was
** let go). */
void ci_set(tc_store *s, const ci_entry *e);
/* Remove id, which is indexed and holds no memory (ci_mem_drop first). */
void ci_remove(tc_store *s, uint64_t id);
/* Index a chunk file the scan at open verified (e gets its seq). */
int ci_index_file(tc_store *s, ci_entry *e);

/* ---- storefiles.c ----------------------------------------------------------- */

/* DIR/<id>.chk, and DIR/<id>.<n>.tmp for a new file being written. */
void ci_chunk_path(const tc_store *s, uint64_t id, char *buf);
void ci_tmp_path(tc_store *s, uint64_t id, char *buf);
/* Write a chunk's bytes b to the temporary file tmp (past the page cache
** when b has room, cf_write), overwriting a recycled file of about its
** size when there is one (see ci_recycle). */
int ci_write_tmp(tc_store *s, const char *tmp, tr_dtype dt, tr_blob *b, uint64_t sum, tr_err *err);
/* Keep the file at path (size bytes long) for a later write: 1 if it was
** renamed into the recycled files, 0 if the caller should unlink it. */
int ci_recycle(tc_store *s, const char *path, int64_t size);
/* Remove every recycled file beyond the budget bytes (0: all). */
void ci_recycle_limit(tc_store *s, int64_t bytes);
/* Rebuild the index from DIR at open. */
int ci_scan(tc_store *s, tr_err *err);
/* At a clean close, after every chunk is in its file: sync the files the
** memo does not vouch for and write the memo of them all (DIR/VERIFIED),
** best effort. */
void ci_memo_save(tc_store *s);
/* One file in the memo: what its stat and header said at the close. */
typedef struct ci_memo {
  uint64_t id, ino, size, sum, dtype;
  int64_t mtime, ctime; /* ns */
} ci_memo;
/* The memo in bytes p (n of them) as entries in increasing id order, in
** *out (the caller's; NULL if none): the count, or -1 for bytes that are
** not a whole, intact memo (open then verifies every file).  Fuzzed:
** tests/fuzz/fuzz_memo.c. */
int64_t ci_memo_decode(const unsigned char *p, size_t n, ci_memo **out);

/* ---- storemem.c ------------------------------------------------------------- */

/* Make room for n more bytes in memory (lock held for writing): drops the
** least recently used copies that are also in their files, s's own, then
** those of the other stores sharing its pool.  1 and counted in mem_bytes
** and the pool if they fit the budget, else 0 (nothing counted). */
int ci_mem_admit(tc_store *s, uint64_t n);
/* Whether chunk bytes n, held in memory only, leave its file room on the
** disk (write lock held; avail: ci_disk_avail's answer, taken before). */
int ci_disk_room(const tc_store *s, int64_t avail, uint64_t n);
/* Bytes free to this process on the store's file system; 0 if unknown. */
int64_t ci_disk_avail(const tc_store *s);
/* Let go of e's bytes in memory, if any (lock held for writing). */
void ci_mem_drop(tc_store *s, ci_entry *e);
/* A store's own pool of `bytes`, holding only it; and s leaving the pool
** it is in (at close, before its memory is let go). */
tc_mem_pool *ci_pool_own(tc_store *s, int64_t bytes);
void ci_pool_leave(tc_store *s);
/* The budget of s's pool. */
int64_t ci_mem_max(tc_store *s);
/* Start and stop the background writer; stopping writes every dirty
** chunk first. */
void ci_writer_start(tc_store *s);
void ci_writer_stop(tc_store *s);
/* Wake the writer: the delay changed. */
void ci_writer_wake(tc_store *s);
/* A dirty chunk was put: wake the writer only if it waits for no chunk.
** Otherwise it already looks again by when this one is due: a chunk put
** later is due no sooner than those put before it. */
void ci_writer_put(tc_store *s);
/* Write those of ids[0..n) still only in memory to their files (no lock
** held): a batch's files written, then one syncfs() makes them all
** durable before they take their names, where a sync of each made two
** workers take 170 s for the 250,000 chunks of 4 bytes a FILL left them
** (a shell closing waits for that); a batch of a few has each file
** synced, and one of none no sync.  durable (may be NULL): [n], set to
** 1 for each chunk written so. */
int ci_write_dirty(tc_store *s, const uint64_t *ids, int64_t n, uint8_t *durable, tr_err *err);
/* The ids of the chunks held in memory only, *n of them (caller frees;
** NULL when out of memory). */
uint64_t *ci_dirty_ids(tc_store *s, int64_t *n);

#endif /* TRADB_CATALOG_STORE_INT_H */
