/*
** dist/sites.c - the workers as sites: which are up, which holds and
** serves a chunk, the replication in effect, and the notices the
** coordinator keeps for the engine.
*/
#include "config.h"
#include "dist/dist_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void td_notice(td_cluster *c, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  size_t old = c->notice ? strlen(c->notice) : 0;
  char *n = realloc(c->notice, old + strlen(line) + 2);
  if (!n) return; /* a warning lost to a failed allocation is no error */
  sprintf(n + old, "%s\n", line);
  c->notice = n;
}

char *td_take_notice(td_cluster *c) {
  char *n = c->notice;
  c->notice = NULL;
  return n;
}

void di_site_lost(td_cluster *c, int s, int fault) {
  if (!c->sites[s].up) return;
  c->sites[s].up = 0;
  c->losses++;
  c->faults += fault != 0;
}

uint64_t td_losses(const td_cluster *c, uint64_t *faults) {
  if (faults) *faults = c->faults;
  return c->losses;
}

/* Live sites, in index order; returns how many. */
int di_up_sites(const td_cluster *c, int *up) {
  int m = 0;
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].up) up[m++] = s;
  return m;
}

int di_site_index(const td_cluster *c, int64_t id) {
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].id == id) return s;
  return -1;
}

/* Does loc list site_id as a holder? */
int di_has(const tc_chunkloc *loc, int64_t site_id) {
  for (int k = 0; k < loc->nsites; k++)
    if (loc->site[k] == site_id) return 1;
  return 0;
}

/* Replication factor in effect: the setting (default 2), at most m. */
int di_replication(td_cluster *c, int m) {
  char v[64];
  int r = 2;
  if (tc_setting_get(c->db, "replication", v, sizeof v, NULL) == TR_OK) r = atoi(v);
  if (r < 1) r = 1;
  return r < m ? r : m;
}

int td_target(td_cluster *c) { return di_replication(c, c->nsites); }

void di_disk_said(td_site *st, uint64_t room) {
  st->disk_said = room != UINT64_MAX;
  st->disk_free = room;
}

int di_sync_full(td_cluster *c) {
  char v[64];
  return tc_setting_get(c->db, "synchronous", v, sizeof v, NULL) == TR_OK && !strcmp(v, "full");
}

int di_keep_at(const td_cluster *c, int full, const int64_t *ids, int n, int k) {
  if (n < 2) return TC_KEEP_FILE;
  if (!full) return TC_KEEP_BACKGROUND;
  int s = di_site_index(c, ids[k]);
  const char *fs = s >= 0 ? c->sites[s].fs : "";
  for (int j = 0; j < k && fs[0]; j++) {
    int o = di_site_index(c, ids[j]);
    if (o >= 0 && !strcmp(c->sites[o].fs, fs)) return TC_KEEP_BACKGROUND;
  }
  return TC_KEEP_FILE;
}

/* The live site that serves chunk loc of t (reads it for others, and
** drives the joins that keep t in place), or -1.  The catalog lists a
** chunk's holders by site id, so taking the first would put every chunk
** of a tensor held everywhere (replication = sites, the embedded
** default) on the lowest site, and every plan driven by it would run on
** one worker.  The holders take turns by the chunk's row of the grid
** instead: such a tensor is served row-block partitioned, the
** partitioning under which a product needs no partial sums. */
int di_holder(const td_cluster *c, const tr_tensor *t, const tc_chunkloc *loc) {
  if (!loc->nsites) return -1;
  int64_t g0 = tr_grid(t, 0), per_row = g0 > 0 ? tr_nchunks(t) / g0 : 1;
  int64_t row = loc->lin / (per_row > 0 ? per_row : 1);
  for (int k = 0; k < loc->nsites; k++) {
    int s = di_site_index(c, loc->site[(row + k) % loc->nsites]);
    if (s >= 0 && c->sites[s].up) return s;
  }
  return -1;
}

/* The error for a chunk no live site holds: names tensor and chunk key. */
int di_unreadable(const tr_tensor *t, const tc_chunkloc *loc, const char *why, tr_err *err) {
  int64_t key[TR_MAX_RANK];
  char ks[200];
  size_t o = 0;
  tr_key_from_linear(t, loc->lin, key);
  ks[0] = '\0';
  for (int d = 0; d < t->rank && o < sizeof ks; d++)
    o += (size_t)snprintf(ks + o, sizeof ks - o, "%s%lld", d ? "," : "", (long long)key[d]);
  if (!why)
    why = loc->nsites ? "every worker holding it is down" : "no replica is left (lost or damaged)";
  return tr_seterr(err, TR_ECORRUPT, "cannot read tensor %s chunk [%s]: %s", t->name, ks, why);
}

int td_threads(td_cluster *c) {
  int t = 0;
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].up && c->sites[s].threads > 0 && (!t || c->sites[s].threads < t))
      t = c->sites[s].threads;
  return t ? t : 1;
}

int64_t td_memory(td_cluster *c) {
  int64_t m = 0;
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].up && c->sites[s].memory > 0 && (!m || c->sites[s].memory < m)) m = c->sites[s].memory;
  return m;
}

int td_cores(td_cluster *c) {
  int local = 0, remote = 0;
  for (int s = 0; s < c->nsites; s++) {
    if (!c->sites[s].up) continue;
    int t = c->sites[s].threads > 0 ? c->sites[s].threads : 1;
    if (c->sites[s].pid) local += t;
    else remote += t;
  }
  /* local workers share this machine; remote ones count as their own */
  if (local > tr_ncores()) local = tr_ncores();
  return local + remote;
}
