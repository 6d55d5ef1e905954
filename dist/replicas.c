/*
** dist/replicas.c - keeping every chunk at its replication: copies made
** worker to worker and recorded once durable, a damaged copy repaired from
** a good one, missing replicas restored round by round.
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

/* Remember that site id lost its copy of chunk (for di_repair). */
void di_note_lost(td_cluster *c, int64_t site, uint64_t chunk) {
  if (c->nlost == c->caplost) {
    int64_t cap = c->caplost ? 2 * c->caplost : 64;
    struct td_lost *l = realloc(c->lost, sizeof *l * (size_t)cap);
    if (!l) return; /* only a hint */
    c->lost = l;
    c->caplost = cap;
  }
  c->lost[c->nlost++] = (struct td_lost){chunk, site};
  c->repair = 1;
}

static int s_cmp_lost(const void *a, const void *b) {
  uint64_t x = ((const struct td_lost *)a)->chunk, y = ((const struct td_lost *)b)->chunk;
  return (x > y) - (x < y);
}

/* The site that lost its copy of chunk (0: none known); c->lost sorted
** by s_cmp_lost. */
static int64_t s_lost_on(const td_cluster *c, uint64_t chunk) {
  struct td_lost key = {chunk, 0};
  const struct td_lost *l = c->nlost ? bsearch(&key, c->lost, (size_t)c->nlost, sizeof key, s_cmp_lost) : NULL;
  return l ? l->site : 0;
}

int td_set_replication(td_cluster *c, int k, tr_err *err) {
  char value[16];
  snprintf(value, sizeof value, "%d", k);
  int rc = tc_setting_set(c->db, "replication", value, err);
  if (rc) return rc;
  /* Chunks stored before may now have too few: te_maintain copies them. */
  c->repair = 1;
  if (k > c->nsites)
    td_notice(c, "replication = %d is kept, but this database has %d worker%s: each chunk gets "
              "%d replica%s until more workers join", k, c->nsites, c->nsites == 1 ? "" : "s",
              c->nsites, c->nsites == 1 ? "" : "s");
  return TR_OK;
}

/* After a commit: say when its chunks got fewer replicas than wanted
** (workers were down), and mark them for repair. */
void di_note_replicas(td_cluster *c, const tr_tensor *meta, const tc_chunkloc *locs, int64_t n) {
  int want = td_target(c), fewest = want, up = 0;
  int64_t under = 0;
  for (int64_t i = 0; i < n; i++) {
    under += locs[i].nsites < want;
    if (locs[i].nsites < fewest) fewest = locs[i].nsites;
  }
  for (int s = 0; s < c->nsites; s++) up += c->sites[s].up;
  if (!under) return;
  c->repair = 1;
  td_notice(c, "%s: %lld of its %lld chunks have %d replica%s, fewer than the %d wanted (%d of %d "
            "workers up); the missing replicas are made when workers return",
            meta->name, (long long)under, (long long)n, fewest, fewest == 1 ? "" : "s", want, up,
            c->nsites);
}

/* Forget site s's copy of chunk id: it failed its checksum there (the
** worker has set it aside).  The chunk then lacks a replica, which
** te_maintain restores, on s again if it can. */
static void s_forget_bad(td_cluster *c, int s, uint64_t id) {
  tr_err ignore;
  tc_replica_remove(c->db, c->sites[s].id, &id, 1, &ignore);
  di_note_lost(c, c->sites[s].id, id);
}

/* Make copies c[0..n): each source pushes its chunks to their
** destinations (SEND), the destinations make them durable (SYNC), and
** only then does the catalog record the new replicas.  A source whose
** copy turns out damaged is forgotten as a holder (the failure is
** returned; a later round copies from another). */
int di_copy_chunks(td_cluster *c, const di_copy *cp, int64_t n, tr_err *err) {
  tn_wbuf *sends = calloc((size_t)c->nsites + 1, sizeof *sends);
  uint32_t *nsend = calloc((size_t)c->nsites + 1, sizeof *nsend);
  tc_chunkloc *locs = calloc((size_t)n + 1, sizeof *locs);
  int rc = sends && nsend && locs ? TR_OK : tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int64_t i = 0; !rc && i < n; i++) {
    tn_put_u64(&sends[cp[i].src], cp[i].id);
    tn_put_str(&sends[cp[i].src], c->sites[cp[i].dst].ep);
    nsend[cp[i].src]++;
    locs[i] = (tc_chunkloc){.chunk_id = cp[i].id, .nbytes = cp[i].bytes, .nsites = 1};
    locs[i].site[0] = c->sites[cp[i].dst].id;
  }
  c->bad_chunk = 0;
  if (!sends || !nsend) {
    free(sends);
    free(nsend);
  } else {
    rc = di_flush_sends(c, sends, nsend, TC_KEEP_BACKGROUND, rc, err); /* frees sends, nsend; synced below */
  }
  if (rc == TR_ECORRUPT && c->bad_chunk) s_forget_bad(c, c->bad_site, c->bad_chunk);
  if (!rc) rc = di_sync(c, locs, n, err);
  uint64_t *ids = rc ? NULL : malloc(((size_t)n + 1) * sizeof *ids);
  if (!rc && !ids) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int s = 0; !rc && s < c->nsites; s++) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
      if (cp[i].dst == s) ids[k++] = cp[i].id;
    rc = tc_replica_add(c->db, c->sites[s].id, ids, k, err);
  }
  free(ids);
  free(locs);
  return rc;
}

/* Repair site s's copy of chunk id, which failed its checksum there: the
** catalog forgets it, and a live holder copies a good one back. */
int di_fix_bad(td_cluster *c, int s, uint64_t id, tr_err *err) {
  int64_t site[TC_MAX_REPLICAS];
  int n = 0, src = -1;
  s_forget_bad(c, s, id);
  int rc = tc_chunk_sites(c->db, id, site, &n, err);
  for (int k = 0; !rc && k < n && src < 0; k++) {
    int h = di_site_index(c, site[k]);
    if (h >= 0 && h != s && c->sites[h].up) src = h;
  }
  if (rc) return rc;
  if (src < 0)
    return tr_seterr(err, TR_ECORRUPT, "chunk %016llx: no other live worker holds a copy",
                     (unsigned long long)id);
  di_copy cp = {id, 0, src, s};
  return di_copy_chunks(c, &cp, 1, err);
}

/* One round of restoring replication: chunks with fewer replicas than
** the setting (at most the live workers) get copies from a live holder on
** the live workers that lack them, spread by chunk.  Returns 1 if chunks
** are left for another round, 0 if none (chunks no live worker holds wait
** for a holder to return), or a TR_E* code. */
int di_repair(td_cluster *c, tr_err *err) {
  int up[256], m = di_up_sites(c, up);
  tc_chunkref *refs = NULL;
  int64_t n = 0, nc = 0, i;
  if (m == 0) return 0;
  int target = di_replication(c, m), rc = tc_chunks_select(c->db, 0, target, &refs, &n, err);
  di_copy *cp = rc ? NULL : malloc(((size_t)n * TC_MAX_REPLICAS + 1) * sizeof *cp);
  uint64_t bytes = 0;
  if (!rc && !cp) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  if (c->nlost) qsort(c->lost, (size_t)c->nlost, sizeof *c->lost, s_cmp_lost);
  for (i = 0; !rc && i < n && bytes < c->repair_bytes; i++) {
    const tc_chunkloc *l = &refs[i].loc;
    int src = -1;
    for (int k = 0; k < l->nsites && src < 0; k++) {
      int h = di_site_index(c, l->site[(i + k) % l->nsites]);
      if (h >= 0 && c->sites[h].up) src = h;
    }
    /* The worker that lost a copy gets it back first; then by chunk. */
    int back = src >= 0 ? di_site_index(c, s_lost_on(c, l->chunk_id)) : -1;
    for (int u = -1, need = target - l->nsites; src >= 0 && u < m && need > 0; u++) {
      int d = u < 0 ? back : up[(i + u) % m];
      if (d < 0 || !c->sites[d].up || di_has(l, c->sites[d].id) || (u >= 0 && d == back)) continue;
      cp[nc++] = (di_copy){l->chunk_id, l->nbytes, src, d};
      bytes += l->nbytes;
      need--;
    }
  }
  if (!rc && nc) rc = di_copy_chunks(c, cp, nc, err);
  if (!rc && i == n) c->nlost = 0; /* every chunk looked at: the hints are spent */
  free(cp);
  free(refs);
  return rc ? rc : i < n;
}
