/*
** dist/io.c - chunks between the shell and the workers: LOAD writes a
** version chunk by chunk, SAVE and PRINT read chunks with fall-over to
** other replicas; a version is committed once durable.
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

#define S_INFLIGHT_BYTES (256u << 20) /* PUT data in flight before waiting; GET data asked for at once */
#define S_READ_BATCH 64 /* chunks a read asks for at once, at most */

/* The copies of locs that must be durable before their version commits,
** those kept in their files (di_keep_at): under synchronous = full the
** first on each file system, under normal only a chunk's one copy (the
** others are in memory on two workers or more, and reach their disks in
** the background).  Returns how many chunks have such copies, copied to
** out with those holders only. */
static int64_t s_to_sync(td_cluster *c, const tc_chunkloc *locs, int64_t n, tc_chunkloc *out) {
  int full = di_sync_full(c);
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) {
    tc_chunkloc l = locs[i];
    l.nsites = 0;
    for (int j = 0; j < locs[i].nsites; j++)
      if (di_keep_at(c, full, locs[i].site, locs[i].nsites, j) == TC_KEEP_FILE) l.site[l.nsites++] = locs[i].site[j];
    if (l.nsites) out[k++] = l;
  }
  return k;
}

int di_commit(td_cluster *c, const tr_tensor *meta, tc_chunkloc *locs, int64_t n, uint64_t **keep,
              int64_t *nkeep, tr_err *err) {
  uint64_t *old = NULL, old_bytes = 0;
  int64_t nold = 0, nsync = 0;
  tc_chunkloc *sync = malloc(((size_t)n + 1) * sizeof *sync);
  int rc = sync ? di_sync(c, sync, nsync = s_to_sync(c, locs, n, sync), err)
                : tr_seterr(err, TR_ENOMEM, "out of memory");
  free(sync);
  if (keep) {
    *keep = NULL;
    *nkeep = 0;
  }
  /* A version whose every chunk is in workers' memory only needs no
  ** catalog entry that outlasts them: its commit is not synced, and the
  ** chunks it replaces wait for the catalog to be (di_forget_later). */
  if (!rc && n > 0 && nsync == 0) {
    rc = tc_commit_placed_unsynced(c->db, meta, locs, n, &old, &nold, &old_bytes, err);
    if (!rc) {
      di_note_replicas(c, meta, locs, n);
      di_forget_later(c, old, nold, old_bytes);
    }
    return rc;
  }
  if (!rc) rc = tc_commit_placed(c->db, meta, locs, n, NULL, &old, &nold, err);
  if (!rc) di_note_replicas(c, meta, locs, n);
  if (!rc && keep) {
    *keep = old;
    *nkeep = nold;
    return TR_OK;
  }
  if (!rc) di_drop_ids(c, -1, old, nold);
  free(old);
  return rc;
}

struct td_pwrite {
  td_cluster *c;         /* engine */
  tr_tensor meta;       /* the new version */
  tc_chunkloc *locs;    /* where each chunk goes */
  int up[256], m;       /* live sites */
  int r;                /* replication */
  int full;             /* synchronous = full (di_keep_at) */
  di_phase ph;           /* PUTs in flight */
  int ph_open;          /* ph is open (until commit: one phase at a time) */
  size_t inflight;      /* their bytes */
};

int td_pwrite_begin(td_cluster *c, const tr_tensor *meta, td_pwrite **out, tr_err *err) {
  td_pwrite *w = calloc(1, sizeof *w);
  int64_t n = tr_nchunks(meta);
  if (!w || !(w->locs = calloc((size_t)n + 1, sizeof *w->locs))) {
    free(w);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  w->c = c;
  w->meta = *meta;
  di_ping(c);
  w->m = di_up_sites(c, w->up);
  int rc = w->m ? di_disk_room(c, tr_tensor_bytes(meta), meta->name, err) : tr_seterr(err, TR_EIO, "no worker is up");
  if (rc) {
    free(w->locs);
    free(w);
    return rc;
  }
  w->r = di_replication(c, w->m);
  w->full = di_sync_full(c);
  di_phase_init(&w->ph, c);
  w->ph_open = 1;
  *out = w;
  return TR_OK;
}

/* Store chunk lin (buf is copied) on its `replication` sites. */
int td_pwrite_chunk(td_pwrite *w, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
  tr_assert(w->ph_open); /* not after the commit */
  tc_chunkloc *loc = &w->locs[lin];
  loc->lin = lin;
  loc->chunk_id = tc_new_chunk_id();
  loc->nbytes = bytes;
  loc->checksum = tc_checksum(buf, bytes); /* verified by the worker on arrival */
  loc->nsites = w->r;
  tn_chunk c = {loc->chunk_id, (uint8_t)w->meta.dtype, bytes, loc->checksum};
  int rc = TR_OK;
  for (int k = 0; k < w->r; k++) loc->site[k] = w->c->sites[w->up[(lin + k) % w->m]].id;
  for (int k = 0; k < w->r && !rc; k++) {
    int s = w->up[(lin + k) % w->m];
    tn_wbuf b = {0};
    tn_put_u32(&b, 1);
    tn_put_chunk(&b, &c);
    tn_put_u8(&b, (uint8_t)di_keep_at(w->c, w->full, loc->site, w->r, k));
    void *data = (void *)buf;
    rc = di_request(&w->ph, s, TN_PUT, &b, 1, &data, &bytes, NULL, err);
    tn_wbuf_free(&b);
    w->c->sites[s].floats_in += (int64_t)(bytes / tr_dtype_size(w->meta.dtype));
  }
  w->inflight += bytes * (size_t)w->r;
  if (!rc && w->inflight > S_INFLIGHT_BYTES) {
    rc = di_wait(&w->ph, err);
    di_phase_free(&w->ph);
    di_phase_init(&w->ph, w->c);
    w->inflight = 0;
  }
  return rc;
}

int td_pwrite_commit(td_pwrite *w, tr_err *err) {
  int rc = di_wait(&w->ph, err);
  di_phase_free(&w->ph);
  w->ph_open = 0; /* the commit's own phases follow */
  if (!rc) rc = di_commit(w->c, &w->meta, w->locs, tr_nchunks(&w->meta), NULL, NULL, err);
  return rc;
}

void td_pwrite_free(td_pwrite **pw) {
  if (!pw || !*pw) return;
  if ((*pw)->ph_open) di_phase_free(&(*pw)->ph);
  free((*pw)->locs);
  free(*pw);
  *pw = NULL;
}

/* Check reply k of ph as chunk loc of t: TR_OK and *blob (its bytes) if
** good, TR_ENOMEM if its bytes could not be taken, else why it is not. */
static int s_check_data(td_cluster *c, di_phase *ph, int k, const tr_tensor *t, const tc_chunkloc *loc,
                        tr_blob **blob, char *why, size_t cap) {
  di_out *o = &ph->out[k];
  if (o->done != 1) {
    snprintf(why, cap, "worker %s is down", c->sites[o->site].ep);
    return TR_EIO;
  }
  tn_rbuf r;
  di_reply_body(ph, k, &r);
  if (o->reply.type == TN_ERROR) {
    tr_err e;
    uint64_t chunk;
    int code = di_reply_error(ph, k, &chunk, &e);
    snprintf(why, cap, "%s", e.msg);
    if (code == TR_ECORRUPT && chunk == loc->chunk_id) return TR_ECORRUPT;
    return TR_EIO;
  }
  tn_chunk ck;
  (void)tn_get_u32(&r);
  tn_get_chunk(&r, &ck);
  int framed = o->reply.type == TN_DATA && !tn_rbuf_ok(&r) && o->reply.ndata >= 1;
  /* the frame taken aligned, for the element reads of SAVE and PRINT */
  if (framed && !(*blob = tn_in_take_data(&o->reply, 0))) return TR_ENOMEM;
  size_t len = framed ? tr_blob_size(*blob) : 0;
  if (!framed || len != loc->nbytes || ck.id != loc->chunk_id || ck.checksum != loc->checksum ||
      tc_checksum(tr_blob_data(*blob), len) != ck.checksum) {
    tr_blob_unref(blob);
    snprintf(why, cap, "worker %s sent a copy that does not match its checksum", c->sites[o->site].ep);
    return TR_ECORRUPT;
  }
  (void)t;
  return TR_OK;
}

/* A batch of td_pread: its chunks (lins[i0..i1)) and how each fares. */
typedef struct s_pread {
  td_cluster *c;
  const tr_tensor *t;
  const tc_chunkloc *locs;
  const int64_t *lins;
  int64_t i0;
  int64_t which[S_READ_BATCH];     /* request k: chunk lins[which[k]] */
  int ok[S_READ_BATCH];            /* [i - i0]: chunk lins[i] handed to fn */
  char (*why)[TC_ENDPOINT_MAX + 900]; /* [i - i0]: why its last try failed */
  int nbad, bad_site[S_READ_BATCH];/* copies a worker found damaged, to repair */
  uint64_t bad_id[S_READ_BATCH];
  int (*fn)(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err);
  void *ctx;
} s_pread;

/* Reply k of a batch, as it arrives (di_phase's on_reply) or once the
** wait is over: a good copy goes to fn, a bad one is noted for the next
** round (another replica). */
static int s_pread_take(di_phase *ph, int k, void *vp, tr_err *err) {
  s_pread *p = vp;
  int64_t i = p->which[k], lin = p->lins[i];
  tr_blob *data = NULL;
  int why_rc = s_check_data(p->c, ph, k, p->t, &p->locs[lin], &data, p->why[i - p->i0], sizeof p->why[0]);
  if (why_rc == TR_ENOMEM) return tr_seterr(err, TR_ENOMEM, "out of memory reading %s", p->t->name);
  if (why_rc == TR_ECORRUPT && ph->out[k].done == 1 && ph->out[k].reply.type == TN_ERROR) {
    p->bad_site[p->nbad] = ph->out[k].site;
    p->bad_id[p->nbad++] = p->locs[lin].chunk_id;
  }
  if (why_rc) return TR_OK; /* next round tries the next replica */
  size_t len = tr_blob_size(data);
  p->c->sites[ph->out[k].site].floats_out += (int64_t)(len / tr_dtype_size(p->t->dtype));
  p->ok[i - p->i0] = 1;
  int rc = p->fn(p->ctx, lin, tr_blob_data(data), len, err);
  tr_blob_unref(&data);
  return rc;
}

int td_pread(td_cluster *c, const tr_tensor *t, const int64_t *lins, int64_t n,
             int (*fn)(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err),
             void *ctx, tr_err *err) {
  tc_chunkloc *locs = NULL;
  int64_t nl = 0;
  int rc = tc_chunk_locations(c->db, t, &locs, &nl, err);
  if (rc) return rc;
  di_ping(c);
  char why[S_READ_BATCH][TC_ENDPOINT_MAX + 900];
  for (int64_t i0 = 0, i1; i0 < n && !rc; i0 = i1) {
    /* at most S_READ_BATCH chunks and S_INFLIGHT_BYTES in flight (one chunk at
    ** least): chunks of up to 1 GiB each would otherwise arrive together */
    size_t inflight = 0, bytes[S_READ_BATCH]; /* bytes[i - i0]: chunk lins[i]'s */
    for (i1 = i0; i1 < n && i1 - i0 < S_READ_BATCH; i1++) {
      int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
      tr_key_from_linear(t, lins[i1], key);
      bytes[i1 - i0] = (size_t)tr_chunk_extent(t, key, ext) * tr_dtype_size(t->dtype);
      if (i1 > i0 && inflight + bytes[i1 - i0] > S_INFLIGHT_BYTES) break;
      inflight += bytes[i1 - i0];
    }
    s_pread p = {c, t, locs, lins, i0, {0}, {0}, why, 0, {0}, {0}, fn, ctx};
    int tried[S_READ_BATCH] = {0}; /* [i - i0]: replicas of chunk lins[i] tried so far */
    for (int k = 0; k < S_READ_BATCH; k++) why[k][0] = '\0';
    for (int round = 0; !rc && round < TC_MAX_REPLICAS; round++) {
      di_phase ph;
      int nreq = 0;
      di_phase_init(&ph, c);
      ph.on_reply = s_pread_take;
      ph.on_reply_ctx = &p;
      for (int64_t i = i0; i < i1 && !rc; i++) {
        if (p.ok[i - i0]) continue;
        if (!nl) { /* declared, never filled: zeros */
          void *z = calloc(1, bytes[i - i0] ? bytes[i - i0] : 1);
          rc = z ? fn(ctx, lins[i], z, bytes[i - i0], err)
                 : tr_seterr(err, TR_ENOMEM, "out of memory");
          free(z);
          p.ok[i - i0] = 1;
          continue;
        }
        const tc_chunkloc *loc = &locs[lins[i]];
        int s = -1;
        while (tried[i - i0] < loc->nsites && s < 0) {
          int cand = di_site_index(c, loc->site[tried[i - i0]++]);
          if (cand >= 0 && c->sites[cand].up) s = cand;
        }
        if (s < 0) {
          rc = di_unreadable(t, loc, tried[i - i0] && why[i - i0][0] ? why[i - i0] : NULL, err);
          break;
        }
        tn_wbuf b = {0};
        tn_put_u32(&b, 1);
        tn_put_u64(&b, loc->chunk_id);
        rc = di_request(&ph, s, TN_GET, &b, 0, NULL, NULL, NULL, err);
        tn_wbuf_free(&b);
        if (!rc) ph.out[ph.n - 1].expect = bytes[i - i0];
        p.which[nreq++] = i;
      }
      if (!rc && nreq) rc = di_wait_ex(&ph, 1, err);
      for (int k = 0; !rc && k < nreq; k++) /* those with no reply (their worker down) */
        if (!ph.out[k].taken) rc = s_pread_take(&ph, k, &p, err);
      di_phase_free(&ph);
      /* A copy the worker found damaged: repaired from a good one now
      ** (after the phase: phases do not nest). */
      for (int k = 0; k < p.nbad; k++) {
        tr_err ignore;
        di_fix_bad(c, p.bad_site[k], p.bad_id[k], &ignore);
      }
      p.nbad = 0;
      if (!nreq) break;
    }
  }
  free(locs);
  return rc;
}

int td_drop(td_cluster *c, const char *name, tr_err *err) {
  uint64_t *ids = NULL;
  int64_t n = 0;
  int rc = tc_tensor_drop_placed(c->db, name, &ids, &n, err);
  if (!rc) di_drop_ids(c, -1, ids, n);
  free(ids);
  return rc;
}
