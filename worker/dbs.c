/*
** worker/dbs.c - each database's chunk store on this worker, opened on
** first use and closed when idle and its slot is needed, and reads from
** it that name a chunk failing its checksum.
*/
#include "config.h"
#include "worker/worker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The slot of database db (0: a free slot), or -1 (db_mu or heard_mu
** held).  Slots do not move: a job keeps the index of the one it holds. */
static int s_slot(const wi_worker *w, uint64_t db) {
  for (int i = 0; i < w->max_dbs; i++)
    if (w->dbs[i].id == db) return i;
  return -1;
}

void wi_db_heard(wi_worker *w, uint64_t db) {
  pthread_mutex_lock(&w->heard_mu);
  int i = db ? s_slot(w, db) : -1;
  if (i >= 0) w->dbs[i].heard = tr_now();
  pthread_mutex_unlock(&w->heard_mu);
}

/* Take the store idle longest out of the table (db_mu held), for the
** caller to close: one no job holds and no request has named for
** w->db_idle_s.  NULL if there is none; *id and *idle say which and for
** how long. */
static tc_store *s_evict(wi_worker *w, uint64_t *id, double *idle) {
  double now = tr_now();
  int v = -1;
  pthread_mutex_lock(&w->heard_mu);
  for (int i = 0; i < w->max_dbs; i++)
    if (w->dbs[i].id && !w->dbs[i].users && now - w->dbs[i].heard > w->db_idle_s &&
        (v < 0 || w->dbs[i].heard < w->dbs[v].heard))
      v = i;
  tc_store *s = NULL;
  if (v >= 0) {
    s = w->dbs[v].store;
    *id = w->dbs[v].id;
    *idle = now - w->dbs[v].heard;
    memset(&w->dbs[v], 0, sizeof w->dbs[v]);
    w->ndbs--;
  }
  pthread_mutex_unlock(&w->heard_mu);
  return s;
}

void wi_store_close(uint64_t db, tc_store **s, const char *why) {
  tc_store_files f;
  if (!*s) return;
  tc_store_file_counts(*s, &f);
  wi_log("closing the store of database %016" PRIx64 "%s: %" PRId64
         " chunk files written since it opened, %" PRId64 " file-system syncs, %" PRId64
         " background writes failed", db, why, f.written, f.fs_syncs, f.write_failures);
  tc_store_close(s);
}

/* wi_store_for; with held, the store also counted as held by a job, and
** *held its slot. */
static tc_store *s_store_for(wi_worker *w, uint64_t db, wi_open how, int *held, tr_err *err) {
  char dir[4200];
  struct stat st;
  tc_store *found = NULL;
  if (!db) {
    tr_seterr(err, TR_EINVAL, "request names no database");
    return NULL;
  }
  snprintf(dir, sizeof dir, "%s/db-%016" PRIx64, w->cfg->data, db);
  pthread_mutex_lock(&w->db_mu);
  int i = s_slot(w, db);
  if (i < 0 && how != S_OPEN_NONE && w->ndbs == w->max_dbs && (how != S_OPEN_EXISTS || stat(dir, &st) == 0)) {
    /* Closed under the lock, as stores are opened: a request for the
    ** database closed must not open its directory while it is closing. */
    uint64_t old = 0;
    double idle = 0;
    tc_store *s = s_evict(w, &old, &idle);
    if (s) {
      char why[80];
      snprintf(why, sizeof why, " (idle %.0f s) for database %016" PRIx64, idle, db);
      wi_store_close(old, &s, why);
    }
  }
  if (i >= 0) {
    found = w->dbs[i].store;
  } else if (how == S_OPEN_NONE || (how == S_OPEN_EXISTS && stat(dir, &st) != 0)) {
    tr_seterr(err, TR_ENOTFOUND, "worker %s holds nothing of database %016" PRIx64, w->cfg->listen, db);
  } else if (w->ndbs == w->max_dbs) {
    tr_seterr(err, TR_EINVAL, "worker %s already serves %d database%s, %s in the last %g s or by a running job",
              w->cfg->listen, w->max_dbs, w->max_dbs == 1 ? "" : "s", w->max_dbs == 1 ? "used" : "each used",
              w->db_idle_s);
  } else if (tc_store_open(dir, &found, err) == TR_OK) {
    /* Chunks in memory within the worker's one budget (w->pool); the
    ** files kept for reuse within half of --memory, and 1 GiB. */
    int64_t m = w->cfg->memory;
    int64_t chunks;
    tc_store_files f;
    tc_store_usage(found, &chunks, NULL);
    tc_store_file_counts(found, &f);
    wi_log("opened the store of database %016" PRIx64 ": %" PRId64 " chunks, %" PRId64
           " vouched for by its last clean close, %.1f MiB read to verify the others",
           db, chunks, f.vouched, (double)f.verified_bytes / (1 << 20));
    if (tc_store_share_memory(found, w->pool, err) != TR_OK) {
      tc_store_close(&found);
    } else {
      if (m > 0) tc_store_set_recycle(found, m / 2 < ((int64_t)1 << 30) ? m / 2 : (int64_t)1 << 30);
      if (w->set_writeback) tc_store_set_writeback(found, w->writeback_s);
      i = s_slot(w, 0);
      pthread_mutex_lock(&w->heard_mu);
      w->dbs[i].id = db;
      w->dbs[i].store = found;
      w->dbs[i].users = 0;
      w->ndbs++;
      pthread_mutex_unlock(&w->heard_mu);
    }
  }
  if (found) {
    pthread_mutex_lock(&w->heard_mu); /* users: see wi_job_free */
    if (held) {
      w->dbs[i].users++;
      *held = i;
    }
    w->dbs[i].heard = tr_now();
    pthread_mutex_unlock(&w->heard_mu);
  }
  pthread_mutex_unlock(&w->db_mu);
  return found;
}

tc_store *wi_store_for(wi_worker *w, uint64_t db, wi_open how, tr_err *err) {
  return s_store_for(w, db, how, NULL, err);
}

tc_store *wi_job_store(wi_job *j, wi_open how, tr_err *err) {
  if (!j->store) j->store = s_store_for(j->w, j->db, how, &j->slot, err);
  return j->store;
}

/* Read chunk id of the job's store; a checksum failure names the chunk in
** the job's error reply. */
int wi_job_get(wi_job *j, uint64_t id, size_t bytes, tr_blob **out, tr_err *err) {
  int rc = tc_store_get_blob(j->store, id, bytes, out, err);
  if (rc == TR_ECORRUPT) j->bad = id;
  return rc;
}
