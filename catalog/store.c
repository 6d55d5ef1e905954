/*
** catalog/store.c - a worker's chunk store (see catalog.h): an in-memory
** index id -> {type, size, checksum, where the bytes are}, chunk files
** DIR/<16 hex digits>.chk in the chunkfile.h format (storefiles.c), and
** chunks held in memory (storemem.c).
**
** Where a chunk's bytes are follows how it was put (tc_keep): in its file
** (TC_KEEP_FILE), in memory until a background writer puts them in the
** file (TC_KEEP_BACKGROUND), or in memory only (TC_KEEP_SCRATCH, a
** statement's intermediates, gone after a crash as the statement that
** made them is).  A chunk in memory is read from there, without its file
** and without checking its checksum again: the bytes were checked when
** they arrived or computed here.  A chunk read from its file is checked
** in full, and a copy is kept in memory while the budget allows.
**
** Threads: the index and the files under final names change together
** under the write lock (rename + index update, unlink + index removal);
** reads and syncs of a file hold the read lock, so a concurrent re-put or
** drop of the same id never makes a good chunk look missing or damaged.
** Writing a file's bytes, the slow part of a put, takes no lock.
*/
#include "config.h"
#include "catalog/catalog.h"
#include "catalog/store_int.h"
#include "catalog/chunkfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_NAME_MAX 48 /* longest name we build in DIR, '/' included */
#define S_RECYCLE_MAX ((int64_t)1 << 30) /* recycled files' bytes at most, by default */
#define S_DELAY_S 2.0 /* a dirty chunk reaches its file at the latest this long after its put */

/* Recycle or unlink id's file and forget it (write lock held): 1 if it was
** indexed, 0 if not, or TR_EIO (still indexed, file kept). */
static int s_forget(tc_store *s, uint64_t id, tr_err *err) {
  char path[CI_PATH];
  ci_entry *e = ci_find(s, id);
  if (!e) return 0;
  if (e->file) {
    ci_chunk_path(s, id, path);
    if (!ci_recycle(s, path, (int64_t)e->nbytes + CF_HEADER_SIZE) && unlink(path) != 0 &&
        errno != ENOENT)
      return tr_seterr(err, TR_EIO, "cannot remove chunk file '%s': %s", path, strerror(errno));
  }
  ci_mem_drop(s, e);
  ci_remove(s, id);
  return 1;
}

/* ---- open and close ------------------------------------------------------ */

int tc_store_open(const char *dir, tc_store **out, tr_err *err) {
  tc_store *s = NULL;
  pthread_rwlockattr_t attr;
  char path[CI_PATH];
  struct stat st;
  int rc = TR_OK;
  if (!out) return tr_seterr(err, TR_EINVAL, "tc_store_open: bad argument");
  *out = NULL;
  if (!dir || !*dir) return tr_seterr(err, TR_EINVAL, "tc_store_open: no directory");
  if (strlen(dir) + S_NAME_MAX >= CI_PATH)
    return tr_seterr(err, TR_EINVAL, "chunk store path too long: %.200s...", dir);
  if (!(s = calloc(1, sizeof *s))) return tr_seterr(err, TR_ENOMEM, "out of memory");
  s->lockfd = -1;
  atomic_init(&s->clock, 1);
  pthread_mutex_init(&s->free_mu, NULL);
  pthread_mutex_init(&s->wmu, NULL);
  s->wnext = INFINITY; /* the writer has not looked yet: a put wakes it */
  tr_cond_init(&s->wcv); /* the writer's deadlines */
  int64_t mem = tr_phys_memory();
  s->free_max = mem / 16 < S_RECYCLE_MAX ? mem / 16 : S_RECYCLE_MAX;
  s->delay = S_DELAY_S;
  s->disk_reserve = CI_DISK_RESERVE;
  /* Writers first: a stream of gets must not starve a put's rename. */
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  int e = pthread_rwlock_init(&s->lock, &attr);
  pthread_rwlockattr_destroy(&attr);
  if (e != 0) {
    free(s);
    return tr_seterr(err, TR_ENOMEM, "cannot create a lock: %s", strerror(e));
  }
  if (!(s->dir = strdup(dir)) || !(s->own = s->pool = ci_pool_own(s, mem / 8))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  if (mkdir(dir, 0700) == 0) { /* chunks are the user's data: owner only */
    snprintf(path, sizeof path, "%s/..", dir); /* make the new dir durable */
    ci_fsync_dir(path);
  } else if (errno != EEXIST) {
    rc = tr_seterr(err, TR_EIO, "cannot create chunk store '%s': %s", dir, strerror(errno));
    goto done;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    rc = tr_seterr(err, TR_EINVAL, "chunk store '%s' is not a directory", dir);
    goto done;
  }
  snprintf(path, sizeof path, "%s/LOCK", dir);
  if ((s->lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
    rc = tr_seterr(err, TR_EIO, "cannot open '%s': %s", path, strerror(errno));
    goto done;
  }
  if (flock(s->lockfd, LOCK_EX | LOCK_NB) != 0) {
    rc = tr_seterr(err, TR_EIO, errno == EWOULDBLOCK ? "chunk store '%s' is in use by another process"
                                                    : "cannot lock chunk store '%s'", dir);
    goto done;
  }
  if (!(rc = ci_scan(s, err))) {
    s->indexed = 1;
    ci_writer_start(s);
  }
done:
  if (rc)
    tc_store_close(&s);
  else
    *out = s;
  return rc;
}

void tc_store_close(tc_store **ps) {
  tc_store *s = ps ? *ps : NULL;
  if (!s) return;
  *ps = NULL;
  ci_pool_leave(s); /* no other store in its pool makes room from it now */
  ci_writer_stop(s); /* writes what is only in memory */
  /* the next open reads none of these files (a store whose open failed,
  ** perhaps locked by another process, has nothing to vouch for) */
  if (s->indexed) ci_memo_save(s);
  ci_recycle_limit(s, 0); /* no one else uses the store now */
  for (size_t i = 0; i < s->cap; i++)
    if (s->tab[i].id) ci_mem_drop(s, &s->tab[i]);
  if (s->lockfd >= 0) close(s->lockfd);
  pthread_mutex_destroy(&s->free_mu);
  pthread_mutex_destroy(&s->wmu);
  pthread_cond_destroy(&s->wcv);
  pthread_rwlock_destroy(&s->lock);
  free(s->tab);
  free(s->dir);
  tc_mem_pool_free(&s->own);
  free(s);
}

/* ---- put ------------------------------------------------------------------- */

/* Index e (write lock held, after s_reserve), replacing an earlier put of
** its id: that one's bytes in memory go, and so does its file unless e's
** file just took its name. */
static void s_install(tc_store *s, ci_entry *e) {
  char path[CI_PATH];
  ci_entry *old = ci_find(s, e->id);
  if (old) {
    ci_mem_drop(s, old);
    if (old->file && !e->file) {
      ci_chunk_path(s, e->id, path);
      unlink(path);
    }
  }
  ci_set(s, e);
}

/* Store b as chunk id whose payload checksum is sum. */
static int s_put(tc_store *s, uint64_t id, tr_dtype dt, tr_blob *b, tc_keep keep, uint64_t sum,
                 tr_err *err) {
  char tmp[CI_PATH], path[CI_PATH];
  size_t n = tr_blob_size(b);
  ci_entry e = {.id = id, .nbytes = n, .dtype = dt, .sum = sum};
  tr_blob_seal(b); /* kept: its bytes must not change */
  e.seq = e.used = (uint64_t)atomic_fetch_add(&s->clock, 1);
  int rc = TR_OK, inmem = 0;
  /* A chunk for the background is held in memory only while the disk has
  ** room for its file beyond the others held so: else it is written now,
  ** so that a full disk fails the statement making it, which then leaves
  ** the version before, instead of a commit whose chunks never reach
  ** the disk.  (The disk asked before the lock: statvfs may block.) */
  int64_t avail = keep == TC_KEEP_BACKGROUND ? ci_disk_avail(s) : 0;
  pthread_rwlock_wrlock(&s->lock);
  if (ci_reserve(s) != TR_OK) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  } else if (keep != TC_KEEP_FILE && (keep == TC_KEEP_SCRATCH || ci_disk_room(s, avail, n)) &&
             (inmem = ci_mem_admit(s, n))) {
    e.mem = tr_blob_ref(b);
    e.scratch = keep == TC_KEEP_SCRATCH;
    if (!e.scratch) {
      e.due = tr_now() + s->delay;
      e.last = e.due > tr_now() + CI_DEFER_MAX_S ? e.due : tr_now() + CI_DEFER_MAX_S;
      s->dirty_bytes += (int64_t)n;
      s->dirty_chunks++;
    }
    s_install(s, &e);
  }
  pthread_rwlock_unlock(&s->lock);
  if (inmem && !e.scratch) ci_writer_put(s);
  if (rc || inmem) return rc;
  /* Into its file now: asked for, or over the budget. */
  ci_tmp_path(s, id, tmp);
  if ((rc = ci_write_tmp(s, tmp, dt, b, e.sum, err))) return rc;
  ci_chunk_path(s, id, path);
  e.file = 1;
  pthread_rwlock_wrlock(&s->lock);
  if (ci_reserve(s) != TR_OK)
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  else if (rename(tmp, path) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot rename chunk file '%s': %s", tmp, strerror(errno));
  if (!rc) {
    /* a copy for reads, while it fits */
    if (ci_mem_admit(s, n)) e.mem = tr_blob_ref(b);
    s_install(s, &e);
    atomic_fetch_add(&s->written, 1);
  }
  pthread_rwlock_unlock(&s->lock);
  if (rc) unlink(tmp);
  return rc;
}

/* A put's arguments are sane. */
static int s_put_ok(tc_store *s, uint64_t id, tr_dtype dt, tr_blob *b, tr_err *err) {
  size_t n = b ? tr_blob_size(b) : 0;
  if (!s || id == 0 || !b || (dt != TR_F32 && dt != TR_F64) || n % tr_dtype_size(dt) != 0)
    return tr_seterr(err, TR_EINVAL, "tc_store_put_blob: bad argument");
  return TR_OK;
}

int tc_store_put_blob(tc_store *s, uint64_t id, tr_dtype dt, tr_blob *b, tc_keep keep,
                      uint64_t checksum, uint64_t *sum, tr_err *err) {
  int rc = s_put_ok(s, id, dt, b, err);
  if (rc) return rc;
  uint64_t got = tc_checksum(tr_blob_data(b), tr_blob_size(b));
  if (checksum != 0 && got != checksum)
    return tr_seterr(err, TR_ECORRUPT, "chunk %016" PRIx64 ": checksum mismatch", id);
  if ((rc = s_put(s, id, dt, b, keep, got, err)) == TR_OK && sum) *sum = got;
  return rc;
}

int tc_store_put_summed(tc_store *s, uint64_t id, tr_dtype dt, tr_blob *b, tc_keep keep,
                        uint64_t sum, tr_err *err) {
  int rc = s_put_ok(s, id, dt, b, err);
  return rc ? rc : s_put(s, id, dt, b, keep, sum, err);
}

/* ---- get, stat, sync, drop ------------------------------------------------- */

int tc_store_stat(tc_store *s, uint64_t id, tr_dtype *dt, uint64_t *nbytes, uint64_t *sum) {
  int rc = TR_ENOTFOUND;
  if (!s) return TR_EINVAL;
  pthread_rwlock_rdlock(&s->lock);
  const ci_entry *e = ci_find(s, id);
  if (e) {
    if (dt) *dt = e->dtype;
    if (nbytes) *nbytes = e->nbytes;
    if (sum) *sum = e->sum;
    rc = TR_OK;
  }
  pthread_rwlock_unlock(&s->lock);
  return rc;
}

/* Set aside id's file, which failed its checksum on a read: renamed to
** *.bad (never served, kept for inspection) and forgotten, so the worker
** reports it missing and a good replica can take its place.  Only if the
** entry is still the version that was read (a re-put may have replaced it). */
static void s_set_aside(tc_store *s, uint64_t id, uint64_t seq) {
  char path[CI_PATH], bad[CI_PATH + 8];
  pthread_rwlock_wrlock(&s->lock);
  const ci_entry *e = ci_find(s, id);
  if (e && e->file && !e->mem && e->seq == seq) {
    ci_chunk_path(s, id, path);
    snprintf(bad, sizeof bad, "%s.bad", path);
    if (rename(path, bad) != 0) unlink(path);
    ci_remove(s, id);
    s->nbad++;
  }
  pthread_rwlock_unlock(&s->lock);
  ci_fsync_dir(s->dir);
}

/* Read id's file into a new blob, checked in full (read lock held). */
static int s_read_file(tc_store *s, const ci_entry *e, const char *what, tr_blob **out, tr_err *err) {
  char path[CI_PATH];
  tr_blob *b = tr_blob_new(e->nbytes);
  if (!b) return tr_seterr(err, TR_ENOMEM, "out of memory");
  ci_chunk_path(s, e->id, path);
  int rc = cf_read(path, e->dtype, tr_blob_data(b), e->nbytes, e->sum, what, err);
  if (rc) tr_blob_unref(&b);
  else tr_blob_seal(b);
  *out = b;
  return rc;
}

int tc_store_get_blob(tc_store *s, uint64_t id, size_t nbytes, tr_blob **out, tr_err *err) {
  char what[40];
  uint64_t seq = 0;
  int rc = TR_OK, fromfile = 0;
  *out = NULL;
  if (!s) return tr_seterr(err, TR_EINVAL, "tc_store_get: bad argument");
  snprintf(what, sizeof what, "chunk %016" PRIx64, id);
  pthread_rwlock_rdlock(&s->lock);
  ci_entry *e = ci_find(s, id);
  if (!e) {
    rc = tr_seterr(err, TR_ENOTFOUND, "%s is not in chunk store '%s'", what, s->dir);
  } else if (e->nbytes != nbytes) {
    rc = tr_seterr(err, TR_EINVAL, "%s holds %" PRIu64 " bytes, not %zu", what, e->nbytes, nbytes);
  } else if (e->mem) {
    *out = tr_blob_ref(e->mem);
    __atomic_store_n(&e->used, (uint64_t)atomic_fetch_add(&s->clock, 1), __ATOMIC_RELAXED);
  } else {
    seq = e->seq;
    fromfile = 1;
    rc = s_read_file(s, e, what, out, err);
  }
  pthread_rwlock_unlock(&s->lock);
  if (rc == TR_ECORRUPT) {
    s_set_aside(s, id, seq);
    if (err) {
      char why[sizeof err->msg];
      snprintf(why, sizeof why, "%s", err->msg);
      tr_seterr(err, TR_ECORRUPT, "%s (set aside as damaged)", why);
    }
  }
  if (rc || !fromfile) return rc;
  /* Read from the file: keep a copy for the next read while it fits. */
  pthread_rwlock_wrlock(&s->lock);
  e = ci_find(s, id);
  if (e && e->seq == seq && !e->mem && ci_mem_admit(s, e->nbytes)) {
    e->mem = tr_blob_ref(*out);
    e->used = (uint64_t)atomic_fetch_add(&s->clock, 1);
  }
  pthread_rwlock_unlock(&s->lock);
  return TR_OK;
}

/* tc_store_sync; with gone set, an id the store no longer holds is
** skipped rather than an error. */
static int s_sync(tc_store *s, const uint64_t *ids, int64_t n, int gone, tr_err *err) {
  char path[CI_PATH];
  int rc = TR_OK, e;
  if (!s || n < 0 || (!ids && n > 0)) return tr_seterr(err, TR_EINVAL, "tc_store_sync: bad argument");
  /* the chunks still only in memory, made durable as they are written;
  ** the others' files are synced one by one (a put into its file is not) */
  uint8_t *durable = calloc((size_t)n + 1, 1);
  rc = durable ? ci_write_dirty(s, ids, n, durable, err) : tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int64_t i = 0; i < n && rc == TR_OK; i++) {
    if (durable[i]) continue;
    ci_chunk_path(s, ids[i], path);
    pthread_rwlock_rdlock(&s->lock);
    ci_entry *en = ci_find(s, ids[i]);
    if (rc || (!en && gone)) {
    } else if (!en) {
      rc = tr_seterr(err, TR_ENOTFOUND, "chunk %016" PRIx64 " is not in chunk store '%s'", ids[i], s->dir);
    } else if (!en->file) {
      rc = tr_seterr(err, TR_EINVAL, "chunk %016" PRIx64 " is scratch, held in memory only: it cannot be "
                     "made durable", ids[i]);
    } else if ((rc = cf_sync(path, err)) == TR_OK) {
      /* under the read lock: other syncs may mark it too */
      __atomic_store_n(&en->synced, 1, __ATOMIC_RELAXED);
    }
    pthread_rwlock_unlock(&s->lock);
  }
  free(durable);
  /* The renames into final names are durable once the directory is. */
  if (rc == TR_OK && (e = ci_fsync_dir(s->dir)) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot sync '%s': %s", s->dir, strerror(e));
  return rc;
}

int tc_store_sync(tc_store *s, const uint64_t *ids, int64_t n, tr_err *err) {
  return s_sync(s, ids, n, 0, err);
}

int tc_store_sync_unwritten(tc_store *s, tr_err *err) {
  if (!s) return tr_seterr(err, TR_EINVAL, "tc_store_sync_unwritten: bad argument");
  int64_t n;
  uint64_t *ids = ci_dirty_ids(s, &n);
  /* one dropped meanwhile is not lost data: it is skipped */
  int rc = ids ? s_sync(s, ids, n, 1, err) : tr_seterr(err, TR_ENOMEM, "out of memory");
  free(ids);
  return rc;
}

/* A drop is not synced: a dropped chunk that comes back after a crash is
** one the catalog does not list, which the coordinator drops again when it
** next compares what the worker holds. */
int tc_store_drop(tc_store *s, const uint64_t *ids, int64_t n, tr_err *err) {
  int rc = TR_OK;
  if (!s || n < 0 || (!ids && n > 0)) return tr_seterr(err, TR_EINVAL, "tc_store_drop: bad argument");
  pthread_rwlock_wrlock(&s->lock);
  for (int64_t i = 0; i < n; i++) {
    int r = s_forget(s, ids[i], rc ? NULL : err);
    if (r < 0 && rc == TR_OK) rc = r;
  }
  pthread_rwlock_unlock(&s->lock);
  return rc;
}

/* ---- what the store holds ------------------------------------------------- */

int tc_store_list(tc_store *s, tc_stored **out, int64_t *n, tr_err *err) {
  tc_stored *v = NULL;
  int64_t k = 0;
  *out = NULL;
  *n = 0;
  if (!s) return tr_seterr(err, TR_EINVAL, "tc_store_list: bad argument");
  pthread_rwlock_rdlock(&s->lock);
  if ((v = malloc(((size_t)s->count + 1) * sizeof *v))) {
    for (size_t i = 0; i < s->cap; i++)
      if (s->tab[i].id != 0)
        v[k++] = (tc_stored){s->tab[i].id, s->tab[i].nbytes, s->tab[i].sum, s->tab[i].dtype};
    tr_assert(k == s->count); /* count is the number of full slots */
  }
  pthread_rwlock_unlock(&s->lock);
  if (!v) return tr_seterr(err, TR_ENOMEM, "out of memory");
  *out = v;
  *n = k;
  return TR_OK;
}

int tc_store_move(tc_store *dst, tc_store *src, uint64_t id, tr_err *err) {
  char from[CI_PATH], to[CI_PATH];
  int rc = TR_OK;
  if (!dst || !src || dst == src) return tr_seterr(err, TR_EINVAL, "tc_store_move: bad argument");
  ci_chunk_path(src, id, from);
  ci_chunk_path(dst, id, to);
  pthread_rwlock_wrlock(&src->lock);
  pthread_rwlock_wrlock(&dst->lock);
  ci_entry *e = ci_find(src, id);
  ci_entry moved;
  if (!e)
    rc = tr_seterr(err, TR_ENOTFOUND, "chunk %016" PRIx64 " is not in chunk store '%s'", id, src->dir);
  else if (!e->file)
    rc = tr_seterr(err, TR_EINVAL, "chunk %016" PRIx64 " is held in memory only: it does not move", id);
  else if (ci_reserve(dst) != TR_OK)
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  else if (rename(from, to) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot move chunk file '%s' to '%s': %s", from, to, strerror(errno));
  if (rc == TR_OK) {
    ci_mem_drop(src, e);
    moved = *e;
    ci_remove(src, id);
    ci_set(dst, &moved);
  }
  pthread_rwlock_unlock(&dst->lock);
  pthread_rwlock_unlock(&src->lock);
  if (rc == TR_OK) {
    ci_fsync_dir(dst->dir);
    ci_fsync_dir(src->dir);
  }
  return rc;
}

void tc_store_set_recycle(tc_store *s, int64_t bytes) {
  if (s) ci_recycle_limit(s, bytes);
}

void tc_store_busy(tc_store *s, int on) {
  if (!s) return;
  pthread_mutex_lock(&s->wmu);
  s->busy += on ? 1 : -1;
  tr_assert(s->busy >= 0);
  if (!s->busy) { /* chunks may now be due sooner: the writer looks again */
    s->idle_since = tr_now();
    s->wgen++;
    pthread_cond_broadcast(&s->wcv);
  }
  pthread_mutex_unlock(&s->wmu);
}

void tc_store_set_writeback(tc_store *s, double delay) {
  if (!s) return;
  pthread_rwlock_wrlock(&s->lock);
  s->delay = delay;
  pthread_rwlock_unlock(&s->lock);
  ci_writer_wake(s);
}

void tc_store_set_disk_reserve(tc_store *s, int64_t bytes) {
  if (!s) return;
  pthread_rwlock_wrlock(&s->lock);
  s->disk_reserve = bytes > 0 ? bytes : 0;
  pthread_rwlock_unlock(&s->lock);
}

void tc_store_budgets(tc_store *s, int64_t *memory, int64_t *recycle) {
  int64_t m = 0, r = 0;
  if (s) {
    m = ci_mem_max(s);
    pthread_mutex_lock(&s->free_mu);
    r = s->free_max;
    pthread_mutex_unlock(&s->free_mu);
  }
  if (memory) *memory = m;
  if (recycle) *recycle = r;
}

void tc_store_usage(tc_store *s, int64_t *chunks, int64_t *bytes) {
  int64_t c = 0, b = 0;
  if (s) {
    pthread_rwlock_rdlock(&s->lock);
    c = s->count;
    b = s->bytes;
    pthread_rwlock_unlock(&s->lock);
  }
  if (chunks) *chunks = c;
  if (bytes) *bytes = b;
}

void tc_store_file_counts(tc_store *s, tc_store_files *out) {
  *out = (tc_store_files){0};
  if (!s) return;
  out->vouched = s->vouched;
  out->verified_bytes = s->verified_bytes;
  out->written = atomic_load(&s->written);
  out->fs_syncs = atomic_load(&s->fs_syncs);
  out->write_failures = atomic_load(&s->write_failures);
}

int tc_store_write_trouble(tc_store *s, char *why, size_t n) {
  int bad = 0;
  if (n) why[0] = '\0';
  if (!s) return 0;
  pthread_mutex_lock(&s->wmu);
  if (atomic_load(&s->write_failing)) {
    bad = 1;
    if (n) snprintf(why, n, "%s", s->write_why);
  }
  pthread_mutex_unlock(&s->wmu);
  return bad;
}

void tc_store_memory(tc_store *s, int64_t *held, int64_t *unwritten) {
  int64_t h = 0, u = 0;
  if (s) {
    pthread_rwlock_rdlock(&s->lock);
    h = s->mem_bytes;
    u = s->dirty_bytes;
    pthread_rwlock_unlock(&s->lock);
  }
  if (held) *held = h;
  if (unwritten) *unwritten = u;
}
