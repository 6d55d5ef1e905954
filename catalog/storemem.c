/*
** catalog/storemem.c - the chunks a store holds in memory (see store.c):
** the byte budget, which copies make room when it is full, and the
** background writer that puts chunks held only in memory into their
** files.
**
** The budget covers every chunk the store holds in memory: dirty ones
** (not yet in their files), scratch ones (never written) and clean copies
** of chunks that are in their files too, kept so that reading them again
** needs neither the file nor its checksum.  Only clean copies make room,
** least recently used first; a put that still does not fit is written to
** its file at once instead (store.c), so the budget holds.
**
** A writer thread writes dirty chunks, oldest first, once each has waited
** `delay` seconds (2 by default) and no task has used the store for
** CI_IDLE_S, or at the latest CI_DEFER_MAX_S after its put: the bound on
** how long a chunk is held in memory only.  Measured on mm-general
** (4096^2 products back to back, the inputs FILLed just before), writing
** the inputs while the products ran took a pass from 0.7 s to 1.6-1.9 s.
** Nor does it write while another tradb process on this machine works (a
** shell's statement, another worker's task: tr_host_working), for up to
** CI_HOST_DEFER_S past the chunk's due time: local workers share the
** cores, and a product that ran on one of two local workers (1024 x 65536
** by 65536 x 1024, the inputs FILLed just before) took 1.01-1.21 s
** instead of 0.77-0.83 s in the pass the other wrote its replicas of the
** inputs beside it.  That wait has its own, shorter bound: a worker
** cannot see the end of another process's work.  Each file is synced
** (fdatasync) before it takes its final name, and the directory before
** the writer sleeps, so a chunk the writer has written survives a crash
** of the machine too; closing the store writes and syncs every dirty
** chunk the same way.  A chunk dropped before then is never written, as
** a statement's result that the next statement replaces.  The writer does
** not start earlier when cores are idle: measured on the development
** machine, a writer at idle priority (SCHED_IDLE) still cost a third of
** the attention workload's time (0.73 s a pass against 0.50 s without
** it): writing into the page cache takes memory bandwidth and page
** allocation and starts the kernel's write-back, whatever the thread's
** priority.
*/
#include "config.h"
#include "catalog/store_int.h"
#include "catalog/chunkfile.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* A budget and the stores counting against it.  Lock order: a store's
** lock, then its pool's mu; another store's lock only by trylock under
** mu, so two stores making room at once never wait on each other. */
struct tc_mem_pool {
  pthread_mutex_t mu; /* guards the rest */
  int64_t max;        /* the budget */
  int64_t used;       /* the stores' mem_bytes, summed */
  tc_store **stores;  /* those in it */
  int n, cap;
};

tc_mem_pool *tc_mem_pool_new(int64_t bytes) {
  tc_mem_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  p->max = bytes > 0 ? bytes : 0;
  return p;
}

void tc_mem_pool_free(tc_mem_pool **pp) {
  tc_mem_pool *p = pp ? *pp : NULL;
  if (!p) return;
  *pp = NULL;
  tr_assert(p->n == 0 && p->used == 0); /* every store in it closed */
  pthread_mutex_destroy(&p->mu);
  free(p->stores);
  free(p);
}

/* s joins p (its accounting is the caller's): 0, or -1 out of memory. */
static int s_join(tc_mem_pool *p, tc_store *s) {
  pthread_mutex_lock(&p->mu);
  int ok = p->n < p->cap;
  if (!ok) {
    int cap = p->cap ? 2 * p->cap : 4;
    tc_store **a = realloc(p->stores, sizeof *a * (size_t)cap);
    if ((ok = a != NULL)) {
      p->stores = a;
      p->cap = cap;
    }
  }
  if (ok) p->stores[p->n++] = s;
  pthread_mutex_unlock(&p->mu);
  return ok ? 0 : -1;
}

/* s leaves p's list (mu held); its bytes stay counted. */
static void s_leave(tc_mem_pool *p, tc_store *s) {
  for (int i = 0; i < p->n; i++)
    if (p->stores[i] == s) {
      p->stores[i] = p->stores[--p->n];
      break;
    }
}

tc_mem_pool *ci_pool_own(tc_store *s, int64_t bytes) {
  tc_mem_pool *p = tc_mem_pool_new(bytes);
  if (p && s_join(p, s)) tc_mem_pool_free(&p);
  return p;
}

void ci_pool_leave(tc_store *s) {
  if (!s->pool) return;
  pthread_mutex_lock(&s->pool->mu);
  s_leave(s->pool, s); /* its bytes go as close lets them go */
  pthread_mutex_unlock(&s->pool->mu);
}

int tc_store_share_memory(tc_store *s, tc_mem_pool *p, tr_err *err) {
  if (!s || !p) return tr_seterr(err, TR_EINVAL, "tc_store_share_memory: bad argument");
  if (s_join(p, s)) return tr_seterr(err, TR_ENOMEM, "out of memory");
  pthread_rwlock_wrlock(&s->lock);
  pthread_mutex_lock(&s->pool->mu);
  s_leave(s->pool, s);
  s->pool->used -= s->mem_bytes;
  pthread_mutex_unlock(&s->pool->mu);
  s->pool = p;
  pthread_mutex_lock(&p->mu);
  p->used += s->mem_bytes;
  pthread_mutex_unlock(&p->mu);
  pthread_rwlock_unlock(&s->lock);
  return TR_OK;
}

void tc_store_set_memory(tc_store *s, int64_t bytes) {
  if (!s) return;
  pthread_mutex_lock(&s->pool->mu);
  s->pool->max = bytes > 0 ? bytes : 0;
  pthread_mutex_unlock(&s->pool->mu);
}

int64_t ci_mem_max(tc_store *s) {
  pthread_mutex_lock(&s->pool->mu);
  int64_t m = s->pool->max;
  pthread_mutex_unlock(&s->pool->mu);
  return m;
}

/* Let go of e's bytes (s's lock held for writing, and its pool's mu). */
static void s_drop(tc_store *s, ci_entry *e) {
  if (!e->mem) return;
  if (CI_DIRTY(e)) {
    s->dirty_bytes -= (int64_t)e->nbytes;
    s->dirty_chunks--;
  }
  s->mem_bytes -= (int64_t)e->nbytes;
  s->pool->used -= (int64_t)e->nbytes;
  tr_assert(s->mem_bytes >= 0 && s->dirty_bytes >= 0 && s->pool->used >= 0);
  tr_blob_unref(&e->mem);
}

/* s's least recently used copy that is also in its file, or NULL. */
static ci_entry *s_clean_lru(tc_store *s) {
  ci_entry *victim = NULL;
  for (size_t i = 0; i < s->cap; i++) {
    ci_entry *e = &s->tab[i];
    if (e->id && e->mem && e->file && (!victim || e->used < victim->used)) victim = e;
  }
  return victim;
}

/* One such copy of another store in p let go (mu held): 1; 0 if none is
** held; -1 if none was let go but a store holding its lock might have
** one (its writer or a reader, for a moment). */
static int s_reclaim(tc_mem_pool *p, tc_store *s) {
  int busy = 0;
  for (int i = 0; i < p->n; i++) {
    tc_store *o = p->stores[i];
    if (o == s) continue;
    if (pthread_rwlock_trywrlock(&o->lock) != 0) {
      busy = 1;
      continue;
    }
    ci_entry *victim = s_clean_lru(o);
    if (victim) s_drop(o, victim);
    pthread_rwlock_unlock(&o->lock);
    if (victim) return 1;
  }
  return busy ? -1 : 0;
}

/* How long a put waits for busy stores to make room before its chunk goes
** to its file: a store's lock is held for a look at its table, so this is
** many looks even with their holder descheduled for a slice or two, and a
** file written and synced needlessly costs as much.  (Two stores making
** room from each other at once both wait this long, then both write.) */
#define S_RECLAIM_WAIT_S 0.02

int ci_mem_admit(tc_store *s, uint64_t n) {
  tc_mem_pool *p = s->pool;
  double give_up = 0;
  pthread_mutex_lock(&p->mu);
  while (p->used + (int64_t)n > p->max) {
    ci_entry *victim = s_clean_lru(s);
    if (victim) {
      s_drop(s, victim);
      continue;
    }
    int got = s_reclaim(p, s);
    if (got > 0) continue;
    if (got == 0) break;
    /* never wait on another store's lock (see the lock order above): let
    ** the pool go so its holder can finish, and look again */
    double now = tr_now();
    if (give_up == 0) give_up = now + S_RECLAIM_WAIT_S;
    if (now >= give_up) break;
    pthread_mutex_unlock(&p->mu);
    sched_yield();
    pthread_mutex_lock(&p->mu);
  }
  int ok = p->used + (int64_t)n <= p->max;
  if (ok) {
    p->used += (int64_t)n;
    s->mem_bytes += (int64_t)n;
  }
  pthread_mutex_unlock(&p->mu);
  return ok;
}

/* A chunk's file on the disk: its payload, its header, and a block more at
** most where the file system rounds it up. */
static int64_t s_file_bytes(int64_t payload, int64_t chunks) { return payload + chunks * (CF_HEADER_SIZE + 4096); }

int ci_disk_room(const tc_store *s, int64_t avail, uint64_t n) {
  /* The disk filled after the chunks held were counted (workers sharing
  ** it, another program): the next statements fail at once, naming it,
  ** while the user can still free room for those held. */
  if (atomic_load(&s->write_failing)) return 0;
  int64_t need = s_file_bytes(s->dirty_bytes + (int64_t)n, s->dirty_chunks + 1);
  return avail - need >= s->disk_reserve;
}

int64_t ci_disk_avail(const tc_store *s) {
  struct statvfs v;
  if (statvfs(s->dir, &v) != 0) return 0;
  return (int64_t)v.f_bavail * (int64_t)v.f_frsize;
}

void ci_mem_drop(tc_store *s, ci_entry *e) {
  if (!e->mem) return;
  pthread_mutex_lock(&s->pool->mu);
  s_drop(s, e);
  pthread_mutex_unlock(&s->pool->mu);
}

/* Give chunk id's durable temporary file tmp (n payload bytes) its final
** name if version seq is still indexed and not in its file yet (else the
** file is recycled: the chunk was dropped or written by another
** meanwhile); tmp NULL: its write failed, nothing to name.  claimed: the
** caller set e->writing, cleared here. */
static int s_take_name(tc_store *s, uint64_t id, uint64_t seq, const char *tmp, size_t n, int claimed,
                       tr_err *err) {
  char path[CI_PATH];
  int rc = TR_OK, kept = 0;
  pthread_rwlock_wrlock(&s->lock);
  ci_entry *e = ci_find(s, id);
  int mine = e && e->seq == seq;
  if (mine && claimed) e->writing = 0;
  if (tmp && mine && !e->file) {
    ci_chunk_path(s, id, path);
    if (rename(tmp, path) != 0) {
      rc = tr_seterr(err, TR_EIO, "cannot rename chunk file '%s': %s", tmp, strerror(errno));
    } else {
      kept = 1;
      if (CI_DIRTY(e)) {
        s->dirty_bytes -= (int64_t)e->nbytes;
        s->dirty_chunks--;
      }
      e->file = 1;
      e->synced = 1; /* before it took its name */
      s->dir_unsynced = 1;
      atomic_fetch_add(&s->written, 1);
    }
  }
  pthread_rwlock_unlock(&s->lock);
  if (tmp && !rc && !kept && !ci_recycle(s, tmp, (int64_t)n + CF_HEADER_SIZE)) unlink(tmp);
  return rc;
}

/* Write bytes b of chunk id, put as version seq, to its file (s_take_name
** says when it keeps it). */
static int s_write(tc_store *s, uint64_t id, uint64_t seq, tr_blob *b, tr_dtype dt, uint64_t sum,
                   int claimed, tr_err *err) {
  char tmp[CI_PATH];
  ci_tmp_path(s, id, tmp);
  int rc = ci_write_tmp(s, tmp, dt, b, sum, err);
  /* on the disk before it takes its final name: what the writer has
  ** written survives a machine crash once the directory is synced too */
  if (!rc && (rc = cf_sync(tmp, err))) unlink(tmp);
  if (rc) { /* claimed: it may be written again */
    tr_err ignore;
    s_take_name(s, id, seq, NULL, 0, claimed, &ignore);
    return rc;
  }
  return s_take_name(s, id, seq, tmp, tr_blob_size(b), claimed, err);
}

/* Chunks ci_write_dirty writes between two syncs of the file system. */
#define S_WRITE_BATCH 1024
/* A batch of at most this many has each file synced instead, as the
** writer syncs each: a sync of the whole file system also waits for every
** other process's writes to the disk (0.1-1 s behind another process
** writing 256 MiB at a time), and a file's sync costs 0.1-0.3 ms here
** (eight 16 KiB files 1-3 ms, one syncfs 1-2 ms on a quiet disk; sixteen
** 5-9 ms). */
#define S_FILE_SYNCS 8

int ci_write_dirty(tc_store *s, const uint64_t *ids, int64_t n, uint8_t *durable, tr_err *err) {
  typedef struct {
    int64_t at;
    uint64_t id, seq, sum;
    tr_dtype dt;
    tr_blob *b;
    int written;
    char tmp[CI_PATH];
  } item;
  item *v = malloc(sizeof *v * S_WRITE_BATCH);
  int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = TR_OK;
  if (!v) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  else if (dfd < 0) rc = tr_seterr(err, TR_EIO, "cannot open '%s': %s", s->dir, strerror(errno));
  for (int64_t at = 0; !rc && at < n; at += S_WRITE_BATCH) {
    int k = 0;
    pthread_rwlock_rdlock(&s->lock);
    for (int64_t i = at; i < n && i < at + S_WRITE_BATCH; i++) {
      ci_entry *e = ci_find(s, ids[i]);
      if (e && CI_DIRTY(e))
        v[k++] = (item){.at = i, .id = ids[i], .seq = e->seq, .sum = e->sum, .dt = e->dtype,
                        .b = tr_blob_ref(e->mem)};
    }
    pthread_rwlock_unlock(&s->lock);
    /* one that cannot be written is the error; the others are written
    ** all the same (a store closing keeps what it can) */
    for (int j = 0; j < k; j++) {
      tr_err e1;
      ci_tmp_path(s, v[j].id, v[j].tmp);
      v[j].written = ci_write_tmp(s, v[j].tmp, v[j].dt, v[j].b, v[j].sum, &e1) == TR_OK;
      if (!v[j].written && !rc) rc = (*err = e1).code;
    }
    /* On the disk, all of them, before any takes its final name.  Chunks
    ** already in their files (a put into its file, one the writer wrote)
    ** are synced by the caller, each on its own: a file-system sync for
    ** none of them cost 0.12 s after each statement of 3072^2 products
    ** under synchronous = full, another process writing meanwhile. */
    int synced = 1;
    if (k > S_FILE_SYNCS) {
      synced = syncfs(dfd) == 0;
      atomic_fetch_add(&s->fs_syncs, 1);
      if (!synced && !rc) rc = tr_seterr(err, TR_EIO, "cannot sync '%s': %s", s->dir, strerror(errno));
    } else {
      for (int j = 0; j < k && synced; j++) {
        tr_err e1;
        if (v[j].written && cf_sync(v[j].tmp, &e1) != TR_OK) {
          synced = 0;
          if (!rc) rc = (*err = e1).code;
        }
      }
    }
    for (int j = 0; j < k; j++) {
      tr_err e1;
      if (v[j].written && !synced)
        unlink(v[j].tmp);
      else if (v[j].written && s_take_name(s, v[j].id, v[j].seq, v[j].tmp, tr_blob_size(v[j].b), 0, &e1) && !rc)
        rc = (*err = e1).code;
      else if (v[j].written && durable)
        durable[v[j].at] = 1;
      tr_blob_unref(&v[j].b);
    }
    if (!synced) break;
  }
  if (dfd >= 0) close(dfd);
  free(v);
  return rc;
}

uint64_t *ci_dirty_ids(tc_store *s, int64_t *n) {
  pthread_rwlock_rdlock(&s->lock);
  int64_t k = 0;
  for (size_t i = 0; i < s->cap; i++) k += s->tab[i].id && CI_DIRTY(&s->tab[i]);
  uint64_t *ids = malloc(((size_t)k + 1) * sizeof *ids);
  k = 0;
  for (size_t i = 0; ids && i < s->cap; i++)
    if (s->tab[i].id && CI_DIRTY(&s->tab[i])) ids[k++] = s->tab[i].id;
  pthread_rwlock_unlock(&s->lock);
  *n = k;
  return ids;
}

/* Sync the store's directory if a chunk took its final name since the
** last time. */
static void s_sync_dir(tc_store *s) {
  pthread_rwlock_wrlock(&s->lock);
  int need = s->dir_unsynced;
  s->dir_unsynced = 0;
  pthread_rwlock_unlock(&s->lock);
  if (need) ci_fsync_dir(s->dir);
}

/* When the writer may start on dirty chunk e: its due time once the store
** has been idle CI_IDLE_S (busy: tasks are using it now; idle_since: when
** the last ended) and this machine too (host_seen: when some tradb process
** on it was last seen working), the latter for at most CI_HOST_DEFER_S,
** and its last moment whatever the store does. */
static double s_start_at(const ci_entry *e, int busy, double idle_since, double host_seen) {
  double idle = busy ? INFINITY : idle_since + CI_IDLE_S;
  double host = fmin(host_seen + CI_IDLE_S, e->due + CI_HOST_DEFER_S);
  double at = fmax(e->due, fmax(idle, host));
  return at < e->last ? at : e->last;
}

/* A dirty chunk the writer may start on: its id and put number. */
typedef struct s_due {
  uint64_t seq, id;
} s_due;

static int s_by_seq(const void *x, const void *y) {
  uint64_t a = ((const s_due *)x)->seq, b = ((const s_due *)y)->seq;
  return a < b ? -1 : a > b;
}

/* The dirty chunks the writer may start on now, oldest first, in *due
** (the caller frees; grown as needed), and in *next when it next may
** start on another (INFINITY: none).  One look at the whole table for
** them all: one per chunk would cost the square of their number. */
static size_t s_due_now(tc_store *s, double host_seen, s_due **due, size_t *cap, double *next) {
  double now = tr_now();
  size_t n = 0;
  *next = INFINITY;
  pthread_mutex_lock(&s->wmu);
  int busy = s->busy;
  double idle_since = s->idle_since;
  pthread_mutex_unlock(&s->wmu);
  pthread_rwlock_rdlock(&s->lock);
  for (size_t i = 0; s->delay >= 0 && i < s->cap; i++) {
    ci_entry *e = &s->tab[i];
    if (!e->id || !CI_DIRTY(e) || e->writing) continue;
    double at = s_start_at(e, busy, idle_since, host_seen);
    if (at > now) {
      if (at < *next) *next = at;
      continue;
    }
    if (n == *cap) {
      size_t c = *cap ? 2 * *cap : 256;
      s_due *v = realloc(*due, c * sizeof *v);
      if (!v) { /* these for now, the rest on the next look */
        *next = now;
        break;
      }
      *due = v;
      *cap = c;
    }
    (*due)[n++] = (s_due){e->seq, e->id};
  }
  pthread_rwlock_unlock(&s->lock);
  if (n > 1) qsort(*due, n, sizeof **due, s_by_seq); /* *due may be NULL when n is 0 */
  return n;
}

/* Claim dirty chunk d for writing, unless it was written, dropped or put
** again since it was found; returns 1 and its bytes if claimed. */
static int s_claim(tc_store *s, const s_due *d, tr_blob **b, tr_dtype *dt, uint64_t *sum) {
  int got = 0;
  pthread_rwlock_wrlock(&s->lock);
  ci_entry *e = ci_find(s, d->id);
  if (e && CI_DIRTY(e) && !e->writing && e->seq == d->seq) {
    e->writing = 1;
    *b = tr_blob_ref(e->mem);
    *dt = e->dtype;
    *sum = e->sum;
    got = 1;
  }
  pthread_rwlock_unlock(&s->lock);
  return got;
}

/* The writer: find what is due, write it, and sleep until woken or
** something is due.  A failed write leaves the chunk dirty; its sync
** reports the error, and the writer pauses (CI_RETRY_MIN_S, doubling). */
static void *s_writer(void *arg) {
  tc_store *s = arg;
  s_due *due = NULL;
  size_t cap = 0;
  uint32_t seen = 0;    /* tr_host_working's cursor */
  double host_seen = 0; /* when this machine was last seen working */
  double pause = 0, resume = 0; /* after a failed write: how long, and until when */
  for (;;) {
    pthread_mutex_lock(&s->wmu);
    uint64_t gen = s->wgen;
    int quit = s->wquit;
    s->wnext = INFINITY; /* puts wake it while it looks */
    pthread_mutex_unlock(&s->wmu);
    if (quit) break;
    double next = resume;
    size_t n = 0;
    int failed = 0;
    if (tr_now() >= resume) {
      if (tr_host_working(&seen)) host_seen = tr_now();
      n = s_due_now(s, host_seen, &due, &cap, &next);
    }
    tr_err err;
    for (size_t i = 0; i < n && !failed; i++) {
      tr_blob *b = NULL;
      tr_dtype dt = TR_F32;
      uint64_t sum = 0;
      if (s_claim(s, &due[i], &b, &dt, &sum)) failed = s_write(s, due[i].id, due[i].seq, b, dt, sum, 1, &err) != TR_OK;
      tr_blob_unref(&b);
    }
    /* A write that failed (a full disk, most likely) leaves its chunk
    ** dirty and due: tried again at once, it spun a core for as long as
    ** the disk stayed full.  The writer pauses instead, longer while the
    ** writes keep failing; a sync or the close writes them meanwhile, and
    ** reports the error. */
    if (failed) {
      atomic_fetch_add(&s->write_failures, 1);
      pthread_mutex_lock(&s->wmu);
      snprintf(s->write_why, sizeof s->write_why, "%.255s", err.msg);
      atomic_store(&s->write_failing, 1);
      pthread_mutex_unlock(&s->wmu);
      pause = pause > 0 ? fmin(2 * pause, CI_RETRY_MAX_S) : CI_RETRY_MIN_S;
      resume = tr_now() + pause;
      continue;
    }
    if (n) {
      pause = 0;
      atomic_store(&s->write_failing, 0);
      continue;
    }
    s_sync_dir(s); /* the renames of what it wrote, before it sleeps */
    pthread_mutex_lock(&s->wmu);
    if (s->wgen == gen && !s->wquit) {
      s->wnext = next;
      if (isinf(next)) {
        pthread_cond_wait(&s->wcv, &s->wmu);
      } else {
        struct timespec ts;
        tr_deadline(next + 1e-3, &ts);
        pthread_cond_timedwait(&s->wcv, &s->wmu, &ts);
      }
    }
    pthread_mutex_unlock(&s->wmu);
  }
  free(due);
  return NULL;
}

void ci_writer_start(tc_store *s) {
  s->writing = pthread_create(&s->writer, NULL, s_writer, s) == 0;
}

void ci_writer_wake(tc_store *s) {
  pthread_mutex_lock(&s->wmu);
  s->wgen++;
  pthread_cond_broadcast(&s->wcv);
  pthread_mutex_unlock(&s->wmu);
}

void ci_writer_put(tc_store *s) {
  pthread_mutex_lock(&s->wmu);
  if (isinf(s->wnext)) {
    s->wgen++;
    pthread_cond_broadcast(&s->wcv);
  }
  pthread_mutex_unlock(&s->wmu);
}

void ci_writer_stop(tc_store *s) {
  pthread_mutex_lock(&s->wmu);
  s->wquit = 1;
  pthread_cond_broadcast(&s->wcv);
  pthread_mutex_unlock(&s->wmu);
  if (s->writing) pthread_join(s->writer, NULL);
  s->writing = 0;
  /* What is held in memory only reaches its file before the store closes
  ** (a worker stopping, as when its shell went away). */
  tr_err err;
  int64_t n;
  uint64_t *ids = ci_dirty_ids(s, &n);
  if (ids) ci_write_dirty(s, ids, n, NULL, &err);
  free(ids);
  s_sync_dir(s);
}
