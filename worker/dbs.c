/*
** worker/dbs.c - each database's chunk store on this worker, opened on
** first use, and reads from it that name a chunk failing its checksum.
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

/* The store of database db, DATA/db-<id>, found or opened as `how` says.
** NULL with err set when there is none or it cannot be opened.  Stores
** stay open until the worker stops, so the pointer may be kept. */
tc_store *wi_store_for(wi_worker *w, uint64_t db, wi_open how, tr_err *err) {
  char dir[4200];
  struct stat st;
  tc_store *found = NULL;
  if (!db) {
    tr_seterr(err, TR_EINVAL, "request names no database");
    return NULL;
  }
  pthread_mutex_lock(&w->db_mu);
  for (int i = 0; i < w->ndbs && !found; i++)
    if (w->dbs[i].id == db) found = w->dbs[i].store;
  snprintf(dir, sizeof dir, "%s/db-%016" PRIx64, w->cfg->data, db);
  if (found) {
  } else if (how == S_OPEN_NONE || (how == S_OPEN_EXISTS && stat(dir, &st) != 0)) {
    tr_seterr(err, TR_ENOTFOUND, "worker %s holds nothing of database %016" PRIx64, w->cfg->listen, db);
  } else if (w->ndbs == S_MAX_DBS) {
    tr_seterr(err, TR_EINVAL, "worker %s already serves %d databases", w->cfg->listen, S_MAX_DBS);
  } else if (tc_store_open(dir, &found, err) == TR_OK) {
    if (w->cfg->memory > 0) {
      /* The store holds chunks in memory within --memory less what a
      ** task works in: its chunks (within a quarter of the smallest
      ** worker's memory, and 256 MiB) and the operand cache.  Half of it
      ** for a small worker, all but 256 MiB for a large one.  The files
      ** kept for reuse follow the same share, as by default. */
      int64_t m = w->cfg->memory, task = m / 2 < ((int64_t)256 << 20) ? m / 2 : (int64_t)256 << 20;
      tc_store_set_memory(found, m - task);
      tc_store_set_recycle(found, m / 2 < ((int64_t)1 << 30) ? m / 2 : (int64_t)1 << 30);
    }
    w->dbs[w->ndbs].id = db;
    w->dbs[w->ndbs++].store = found;
  }
  pthread_mutex_unlock(&w->db_mu);
  return found;
}

/* Read chunk id of the job's store; a checksum failure names the chunk in
** the job's error reply. */
int wi_job_get(wi_job *j, uint64_t id, size_t bytes, tr_blob **out, tr_err *err) {
  int rc = tc_store_get_blob(j->store, id, bytes, out, err);
  if (rc == TR_ECORRUPT) j->bad = id;
  return rc;
}

int64_t wi_memory(wi_worker *w) {
  int64_t m = w->cfg->memory;
  if (m <= 0) tc_store_budgets(w->root, &m, NULL);
  return m;
}
