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
#include <sys/statvfs.h>
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

/* bytes as text, in the largest binary unit that leaves a number >= 1 */
static const char *s_size(char *buf, size_t n, double bytes) {
  static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    u++;
  }
  snprintf(buf, n, u ? "%.3g %s" : "%.0f %s", bytes, unit[u]);
  return buf;
}

void di_disk_said(td_site *st, uint64_t room) {
  st->disk_said = room != UINT64_MAX;
  st->disk_free = room;
}

/* The bytes free to the workers up, each file system once, in *avail,
** and how many copies of an output they keep in *reps: 0, or -1 when a
** worker up never said (then nothing can be told); *reported set when a
** remote worker's last word counted. */
static int s_disk_avail(td_cluster *c, double *avail, int *reps, int *reported) {
  const char *fs[TO_MAX_SITES];
  int nfs = 0, up = 0;
  *avail = 0;
  *reported = 0;
  for (int s = 0; s < c->nsites; s++) {
    td_site *st = &c->sites[s];
    if (!st->up) continue;
    up++;
    double room;
    struct statvfs vf;
    char dir[sizeof c->workdir + 24];
    if (st->local) {
      snprintf(dir, sizeof dir, "%s/w%d", c->workdir, st->local - 1);
      if (statvfs(dir, &vf) != 0) return -1;
      room = (double)vf.f_bavail * (double)vf.f_frsize;
    } else {
      if (!st->disk_said) return -1;
      room = (double)st->disk_free;
      *reported = 1;
    }
    int seen = 0; /* a file system counted already ("": its own) */
    for (int k = 0; k < nfs && !seen; k++) seen = st->fs[0] && !strcmp(fs[k], st->fs);
    if (seen) continue;
    if (nfs < TO_MAX_SITES) fs[nfs++] = st->fs;
    *avail += room;
  }
  *reps = di_replication(c, up);
  return up ? 0 : -1;
}

int di_disk_room(td_cluster *c, double bytes, const char *what, tr_err *err) {
  double avail;
  int reps, reported;
  if (s_disk_avail(c, &avail, &reps, &reported) || bytes * reps <= avail) return TR_OK;
  /* a remote worker's word may be old (room freed since): asked again */
  if (reported) {
    td_worker_stat *v = NULL;
    int n = 0;
    tr_err e2;
    if (td_workers(c, &v, &n, &e2) == TR_OK) free(v);
    if (s_disk_avail(c, &avail, &reps, &reported) || bytes * reps <= avail) return TR_OK;
  }
  char need[32], one[32], have[32];
  return tr_seterr(err, TR_EIO,
                   "%s would take %s on the workers' disks (%d cop%s of %s), more than the %s free "
                   "there: free room%s", what, s_size(need, sizeof need, bytes * reps), reps,
                   reps == 1 ? "y" : "ies", s_size(one, sizeof one, bytes), s_size(have, sizeof have, avail),
                   reps > 1 ? ", or lower replication (SET replication)" : "");
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
