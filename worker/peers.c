/*
** worker/peers.c - chunks pushed to other workers (SEND, and replicas of
** what a task makes) and their confirmations.
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

/* The index of a DEALER socket to peer ep, opened on first use; -1 on
** failure. */
static int s_peer(wi_worker *w, const char *ep, tr_err *err) {
  for (int i = 0; i < w->npeers; i++)
    if (!strcmp(w->peer_ep[i], ep)) return i;
  if (w->npeers >= S_MAX_PEERS) {
    tr_seterr(err, TR_EINVAL, "too many peers");
    return -1;
  }
  void *s = zmq_socket(w->ctx, ZMQ_DEALER);
  int linger = 0, hwm = 0, tmo = 30000;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
  if (tn_secure_client(s, &w->keys, err) || zmq_connect(s, ep) != 0) {
    if (!err->code) tr_seterr(err, TR_EIO, "cannot connect to %s: %s", ep, zmq_strerror(errno));
    zmq_close(s);
    return -1;
  }
  snprintf(w->peer_ep[w->npeers], TC_ENDPOINT_MAX, "%s", ep);
  w->peer[w->npeers] = s;
  return w->npeers++;
}

/* PUT chunk c of database db to peer socket `peer` as request my_req, to
** be kept as keep says; the reference b is handed over, dropped once sent
** or at once on failure. */
static int s_send_put(wi_worker *w, int peer, uint64_t my_req, uint64_t db, const tn_chunk *c,
                      tr_blob *b, int keep, tr_err *err) {
  tn_wbuf body = {0};
  tn_put_u32(&body, 1);
  tn_put_chunk(&body, c);
  tn_put_u8(&body, (uint8_t)keep);
  int rc = tn_send_blobs(w->peer[peer], NULL, 0, TN_PUT, my_req, db, &body, 1, &b, err);
  tn_wbuf_free(&body);
  if (!rc) w->bytes_sent += c->nbytes;
  return rc;
}

/* Chunks smaller than this go as PUTs: a pull saves copies, which for a
** small chunk cost less than the pull's bookkeeping. */
#define S_PULL_MIN ((uint64_t)64 << 10)

/* ---- requests in flight ---------------------------------------------------- */

static size_t s_slot_of(const wi_worker *w, uint64_t my_req) {
  return (size_t)((my_req * 0x9E3779B97F4A7C15ull) >> 32) & (w->pend_cap - 1);
}

/* Put pd in the list and the index (grown to keep it at most half full);
** TR_ENOMEM if it cannot grow. */
static int s_pend_add(wi_worker *w, wi_pending *pd) {
  if (2 * (w->npend + 1) > w->pend_cap) {
    size_t cap = w->pend_cap ? 2 * w->pend_cap : 64;
    wi_pending **old = w->pend_slot, **v = calloc(cap, sizeof *v);
    if (!v) return TR_ENOMEM;
    size_t oldcap = w->pend_cap;
    w->pend_slot = v;
    w->pend_cap = cap;
    for (size_t i = 0; i < oldcap; i++) {
      if (!old[i]) continue;
      size_t k = s_slot_of(w, old[i]->my_req);
      while (v[k]) k = (k + 1) & (cap - 1);
      v[k] = old[i];
    }
    free(old);
  }
  size_t k = s_slot_of(w, pd->my_req);
  while (w->pend_slot[k]) k = (k + 1) & (w->pend_cap - 1);
  w->pend_slot[k] = pd;
  w->npend++;
  pd->pulls_end = &pd->pulls;
  pd->prev = NULL;
  pd->next = w->pending;
  if (w->pending) w->pending->prev = pd;
  w->pending = pd;
  return TR_OK;
}

static wi_pending *s_pend_find(const wi_worker *w, uint64_t my_req) {
  if (!w->pend_cap) return NULL;
  for (size_t k = s_slot_of(w, my_req); w->pend_slot[k]; k = (k + 1) & (w->pend_cap - 1))
    if (w->pend_slot[k]->my_req == my_req) return w->pend_slot[k];
  return NULL;
}

/* Release the chunks peers were to copy for pd (its request is settled):
** a peer still copying one then fails the checksum or the copy, and says
** so to a request that is gone. */
static void s_free_pulls(wi_pending *pd) {
  while (pd->pulls) {
    wi_pull *p = pd->pulls;
    pd->pulls = p->next;
    tr_blob_unref(&p->data);
    free(p);
  }
  pd->pulls_end = &pd->pulls;
}

/* Take pd out of the list and the index, and free it. */
static void s_pend_free(wi_worker *w, wi_pending *pd) {
  size_t k = s_slot_of(w, pd->my_req);
  while (w->pend_slot[k] != pd) k = (k + 1) & (w->pend_cap - 1);
  /* backward-shift deletion: every entry after the hole stays reachable */
  for (size_t j = (k + 1) & (w->pend_cap - 1); w->pend_slot[j]; j = (j + 1) & (w->pend_cap - 1)) {
    size_t home = s_slot_of(w, w->pend_slot[j]->my_req);
    /* j's entry may fill the hole at k unless its home lies in (k, j] */
    if (((j - home) & (w->pend_cap - 1)) >= ((j - k) & (w->pend_cap - 1))) {
      w->pend_slot[k] = w->pend_slot[j];
      k = j;
    }
  }
  w->pend_slot[k] = NULL;
  w->npend--;
  if (pd->prev) pd->prev->next = pd->next;
  else w->pending = pd->next;
  if (pd->next) pd->next->prev = pd->prev;
  s_free_pulls(pd);
  free(pd);
}

/* pd has its answer (every confirmation, a failure, or its deadline):
** wi_settle answers it. */
static void s_ready(wi_worker *w, wi_pending *pd) {
  if (pd->ready) return;
  pd->ready = 1;
  pd->ready_next = w->ready;
  w->ready = pd;
}

void wi_pending_free_all(wi_worker *w) {
  while (w->pending) s_pend_free(w, w->pending);
  free(w->pend_slot);
  w->pend_slot = NULL;
  w->pend_cap = 0;
  w->ready = NULL;
}

/* Send chunk c to peer socket `peer` for pd, as s_send_put says.  A peer on
** this machine (both listening on ipc://) is told to take it out of this
** process's memory instead (TN_PULL): to map it when it is in shared memory
** (tr_blob_share; no copy at all, measured here at 0.05 ms a MiB), else to
** copy it, one copy by the kernel from process to process (0.25 ms a MiB),
** where a PUT over the socket costs two (into the socket's buffers and out
** of them) and the kernel's buffers besides.  b is then kept, unchanged,
** until the peer answers (wi_on_peer_reply). */
static int s_put_peer(wi_worker *w, int peer, wi_pending *pd, uint64_t db, const tn_chunk *c,
                      tr_blob *b, int keep, tr_err *err) {
  uint64_t my_req = pd->my_req;
  if (!w->pull_local || w->put_only[peer] || c->nbytes < S_PULL_MIN ||
      strncmp(w->peer_ep[peer], "ipc://", 6) != 0)
    return s_send_put(w, peer, my_req, db, c, b, keep, err);
  wi_pull *p = malloc(sizeof *p);
  if (!p) {
    tr_blob_unref(&b);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  tn_wbuf body = {0};
  tn_put_chunk(&body, c);
  tn_put_u8(&body, (uint8_t)keep);
  tn_put_u32(&body, (uint32_t)getpid());
  tn_put_u64(&body, (uint64_t)(uintptr_t)tr_blob_data(b));
  uint64_t ino;
  int fd = tr_blob_shared_fd(b, &ino);
  if (fd >= 0) { /* in shared memory: the peer maps it instead */
    tn_put_u32(&body, (uint32_t)fd);
    tn_put_u64(&body, ino);
  }
  int rc = tn_send(w->peer[peer], NULL, 0, TN_PULL, my_req, db, &body, 0, NULL, NULL, NULL, NULL, err);
  tn_wbuf_free(&body);
  if (rc) {
    tr_blob_unref(&b);
    free(p);
    return rc;
  }
  *p = (wi_pull){peer, db, *c, b, keep, NULL};
  *pd->pulls_end = p;
  pd->pulls_end = &p->next;
  w->bytes_sent += c->nbytes;
  return TR_OK;
}

/* Remove and return pd's pull of chunk id by peer; NULL if none.  Peers
** answer about in the order asked: the search ends near the front. */
static wi_pull *s_pull_take(wi_pending *pd, int peer, uint64_t id) {
  for (wi_pull **pp = &pd->pulls; *pp; pp = &(*pp)->next)
    if ((*pp)->peer == peer && (*pp)->c.id == id) {
      wi_pull *p = *pp;
      *pp = p->next;
      if (!*pp) pd->pulls_end = pp;
      return p;
    }
  return NULL;
}

/* SEND, second half (main loop): PUT each chunk the store thread read to
** its peer; the SEND is answered (wi_settle) once every peer confirmed. */
void wi_send_out(wi_worker *w, wi_job *j) {
  wi_pending *pd = calloc(1, sizeof *pd);
  if (!pd) {
    tn_send_error(w->router, j->route, j->route_len, j->req, j->db, TR_ENOMEM, 0, "out of memory");
    return;
  }
  pd->my_req = ++w->next_req;
  memcpy(pd->route, j->route, j->route_len);
  pd->route_len = j->route_len;
  pd->req = j->req;
  pd->db = j->db;
  pd->deadline = tr_now() + S_SEND_TIMEOUT_S;
  if (s_pend_add(w, pd)) {
    free(pd);
    tn_send_error(w->router, j->route, j->route_len, j->req, j->db, TR_ENOMEM, 0, "out of memory");
    return;
  }
  for (uint32_t i = 0; i < j->nout; i++) {
    wi_out_chunk *o = &j->out[i];
    tr_err err;
    tr_clearerr(&err);
    int peer = s_peer(w, o->ep, &err);
    if (peer < 0) {
      pd->failed = 1;
      snprintf(pd->why, sizeof pd->why, "%s", err.msg);
      break;
    }
    tr_blob *buf = o->data;
    o->data = NULL; /* s_put_peer drops it, sent or not */
    if (s_put_peer(w, peer, pd, pd->db, &o->c, buf, j->keep, &err)) {
      pd->failed = 1;
      snprintf(pd->why, sizeof pd->why, "send to %s failed: %s", o->ep, err.msg);
      break;
    }
    pd->waiting++;
    pd->peer_waiting[peer]++;
    pd->bytes += o->c.nbytes;
  }
  if (pd->failed || !pd->waiting) s_ready(w, pd);
}

/* pd->why: `what`, and the peers whose confirmations are missing (the
** coordinator names them, so the user sees which worker went away). */
static void s_silent_peers(wi_worker *w, wi_pending *pd, const char *what) {
  size_t len = (size_t)snprintf(pd->why, sizeof pd->why, "%s:", what);
  for (int i = 0; i < w->npeers && len < sizeof pd->why; i++)
    if (pd->peer_waiting[i])
      len += (size_t)snprintf(pd->why + len, sizeof pd->why - len, " %s (%d chunk(s))", w->peer_ep[i],
                              pd->peer_waiting[i]);
}

/* How often wi_settle looks for requests past their deadline. */
#define S_LATE_CHECK_S 0.1

/* Answer SENDs whose peers all confirmed (or failed, or timed out). */
void wi_settle(wi_worker *w) {
  double now = tr_now();
  if (now >= w->late_check) {
    for (wi_pending *pd = w->pending; pd; pd = pd->next)
      if (now >= pd->deadline) s_ready(w, pd);
    w->late_check = now + S_LATE_CHECK_S;
  }
  while (w->ready) {
    wi_pending *pd = w->ready;
    w->ready = pd->ready_next;
    if (pd->job) {
      if (pd->failed || pd->waiting > 0) {
        if (!pd->failed) s_silent_peers(w, pd, "replica peers did not confirm in time");
        pd->job->push_failed = 1;
        snprintf(pd->job->push_why, sizeof pd->job->push_why, "%s", pd->why);
        pd->job->pushing -= pd->waiting;
      }
    } else if (pd->failed || pd->waiting > 0) {
      /* Late confirmations find no pending entry and are ignored. */
      if (!pd->failed) s_silent_peers(w, pd, "peers did not confirm chunks in time");
      tn_send_error(w->router, pd->route, pd->route_len, pd->req, pd->db, TR_EIO, 0, pd->why);
    } else {
      tn_wbuf b = {0};
      tn_put_u64(&b, pd->bytes);
      wi_reply(w, pd->route, pd->route_len, TN_SEND_OK, pd->req, pd->db, &b, 0, NULL, NULL, NULL);
      tn_wbuf_free(&b);
    }
    s_pend_free(w, pd);
  }
}

/* Send the queued replica pushes: one PUT per chunk and peer, each
** sending the bytes the task's store keeps (a blob reference per peer,
** dropped once sent), kept by each peer as the task says for it. */
void wi_send_pushes(wi_worker *w) {
  char c[64];
  while (read(w->wake[0], c, sizeof c) > 0) {
  }
  pthread_mutex_lock(&w->mu);
  wi_push *q = w->pushq;
  w->pushq = NULL;
  pthread_mutex_unlock(&w->mu);
  while (q) {
    wi_push *p = q;
    q = q->next;
    /* a scratch chunk is never replicated: it is a partial for its owner */
    const char *verb = p->keep[0] == TC_KEEP_SCRATCH ? "send a partial" : "replicate";
    wi_pending *pd = calloc(1, sizeof *pd);
    tr_err err;
    tr_clearerr(&err);
    if (pd) pd->my_req = ++w->next_req;
    if (!pd || s_pend_add(w, pd)) {
      free(pd);
      pthread_mutex_lock(&w->mu);
      p->job->push_failed = 1;
      p->job->pushing -= p->nrep;
      snprintf(p->job->push_why, sizeof p->job->push_why, "cannot %s (chunk %016llx): out of memory", verb,
               (unsigned long long)p->c.id);
      pthread_mutex_unlock(&w->mu);
      tr_blob_unref(&p->data);
      free(p);
      continue;
    }
    pd->job = p->job;
    pd->deadline = tr_now() + S_SEND_TIMEOUT_S;
    pd->waiting = p->nrep;
    for (int k = p->nrep - 1; k >= 0; k--) {
      int peer = s_peer(w, p->rep[k], &err);
      if (peer < 0) {
        pd->failed = 1;
        snprintf(pd->why, sizeof pd->why, "cannot %s to %s: %s", verb, p->rep[k], err.msg);
        break;
      }
      /* every peer is sent the bytes the store holds: a reference each */
      if (s_put_peer(w, peer, pd, p->job->db, &p->c, tr_blob_ref(p->data), p->keep[k], &err)) {
        pd->failed = 1;
        snprintf(pd->why, sizeof pd->why, "cannot %s to %s: %s", verb, p->rep[k], err.msg);
        break;
      }
      pd->peer_waiting[peer]++;
    }
    tr_blob_unref(&p->data);
    if (pd->failed) s_ready(w, pd);
    free(p);
  }
}

/* A reply from peer socket `peer` (to one of our PUTs or PULLs). */
void wi_on_peer_reply(wi_worker *w, int peer, tn_in *in) {
  wi_pending *pd = s_pend_find(w, in->req);
  if (!pd) return; /* late: its request is settled */
  if (in->type == TN_PULL_OK) {
    size_t n;
    const void *body = tn_in_body(in, &n);
    tn_rbuf r;
    tn_rbuf_init(&r, body, n);
    wi_pull *p = s_pull_take(pd, peer, tn_get_u64(&r));
    if (!p) return; /* not a pull we asked for: it confirms nothing */
    tr_blob_unref(&p->data);
    free(p);
  }
  if (in->type == TN_PUT_OK || in->type == TN_PULL_OK) {
    pd->waiting--;
    if (pd->peer_waiting[peer]) pd->peer_waiting[peer]--;
    if (pd->job) pd->job->pushing--;
    if (pd->waiting <= 0) s_ready(w, pd);
  } else if (in->type == TN_ERROR) {
    char msg[200];
    int code;
    uint64_t chunk;
    tr_err err;
    tr_clearerr(&err);
    tn_get_error(in, &code, &chunk, msg, sizeof msg);
    wi_pull *p = s_pull_take(pd, peer, chunk);
    if (!p) {
      pd->failed = 1;
      snprintf(pd->why, sizeof pd->why, "peer refused a chunk: %s", msg);
      s_ready(w, pd);
      return;
    }
    /* The peer could not copy it out of this process (not allowed to read
    ** it, say): send the bytes, to that peer from now on. */
    if (!w->put_only[peer])
      wi_log("peer %s cannot copy chunks out of this worker (%s): sending them instead",
             w->peer_ep[peer], msg);
    w->put_only[peer] = 1;
    if (s_send_put(w, peer, pd->my_req, p->db, &p->c, p->data, p->keep, &err)) {
      pd->failed = 1;
      snprintf(pd->why, sizeof pd->why, "cannot send a chunk to %s: %s", w->peer_ep[peer], err.msg);
      s_ready(w, pd);
    }
    free(p);
  }
}
