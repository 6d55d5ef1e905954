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

/* Send chunk c to peer socket `peer`, as s_send_put says.  A peer on this
** machine (both listening on ipc://) is told to copy it out of this
** process's memory instead (TN_PULL): one copy by the kernel from process
** to process, where a PUT over the socket costs two (into the socket's
** buffers and out of them) and the kernel's buffers besides; measured on
** two local workers, 64 MiB took 8 ms this way.  b is then kept, unchanged,
** until the peer answers (wi_on_peer_reply). */
static int s_put_peer(wi_worker *w, int peer, uint64_t my_req, uint64_t db, const tn_chunk *c,
                      tr_blob *b, int keep, tr_err *err) {
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
  int rc = tn_send(w->peer[peer], NULL, 0, TN_PULL, my_req, db, &body, 0, NULL, NULL, NULL, NULL, err);
  tn_wbuf_free(&body);
  if (rc) {
    tr_blob_unref(&b);
    free(p);
    return rc;
  }
  *p = (wi_pull){peer, my_req, db, *c, b, keep, w->pulls};
  w->pulls = p;
  w->bytes_sent += c->nbytes;
  return TR_OK;
}

/* Remove and return the pull of chunk id by peer for my_req; NULL if none. */
static wi_pull *s_pull_take(wi_worker *w, int peer, uint64_t my_req, uint64_t id) {
  for (wi_pull **pp = &w->pulls; *pp; pp = &(*pp)->next)
    if ((*pp)->peer == peer && (*pp)->my_req == my_req && (*pp)->c.id == id) {
      wi_pull *p = *pp;
      *pp = p->next;
      return p;
    }
  return NULL;
}

/* Forget the pulls of request my_req (its SEND or push is settled), or
** all of them (my_req 0, at exit): their bytes are released.  A peer
** still copying them then fails the checksum or the copy, and says so to a
** request that is gone. */
void wi_drop_pulls(wi_worker *w, uint64_t my_req) {
  for (wi_pull **pp = &w->pulls; *pp;) {
    wi_pull *p = *pp;
    if (my_req && p->my_req != my_req) {
      pp = &p->next;
      continue;
    }
    *pp = p->next;
    tr_blob_unref(&p->data);
    free(p);
  }
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
    if (s_put_peer(w, peer, pd->my_req, pd->db, &o->c, buf, j->keep, &err)) {
      pd->failed = 1;
      snprintf(pd->why, sizeof pd->why, "send to %s failed: %s", o->ep, err.msg);
      break;
    }
    pd->waiting++;
    pd->peer_waiting[peer]++;
    pd->bytes += o->c.nbytes;
  }
  pd->next = w->pending;
  w->pending = pd;
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

/* Answer SENDs whose peers all confirmed (or failed, or timed out). */
void wi_settle(wi_worker *w) {
  double now = tr_now();
  for (wi_pending **pp = &w->pending; *pp;) {
    wi_pending *pd = *pp;
    if (pd->waiting > 0 && now < pd->deadline && !pd->failed) {
      pp = &pd->next;
      continue;
    }
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
    *pp = pd->next;
    wi_drop_pulls(w, pd->my_req);
    free(pd);
  }
}

/* Send the queued replica pushes: one PUT per chunk and peer, each
** sending the bytes the task's store keeps (a blob reference per peer,
** dropped once sent), kept by the peers as the task's outputs are. */
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
    const char *verb = p->keep == TC_KEEP_SCRATCH ? "send a partial" : "replicate";
    wi_pending *pd = calloc(1, sizeof *pd);
    tr_err err;
    tr_clearerr(&err);
    if (!pd) {
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
    pd->my_req = ++w->next_req;
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
      if (s_put_peer(w, peer, pd->my_req, p->job->db, &p->c, tr_blob_ref(p->data), p->keep, &err)) {
        pd->failed = 1;
        snprintf(pd->why, sizeof pd->why, "cannot %s to %s: %s", verb, p->rep[k], err.msg);
        break;
      }
      pd->peer_waiting[peer]++;
    }
    tr_blob_unref(&p->data);
    pd->next = w->pending;
    w->pending = pd;
    free(p);
  }
}

/* A reply from peer socket `peer` (to one of our PUTs or PULLs). */
void wi_on_peer_reply(wi_worker *w, int peer, tn_in *in) {
  wi_pending *pd = w->pending;
  while (pd && pd->my_req != in->req) pd = pd->next;
  if (!pd) return; /* late: its request is settled */
  if (in->type == TN_PULL_OK) {
    size_t n;
    const void *body = tn_in_body(in, &n);
    tn_rbuf r;
    tn_rbuf_init(&r, body, n);
    wi_pull *p = s_pull_take(w, peer, in->req, tn_get_u64(&r));
    if (!p) return; /* not a pull we asked for: it confirms nothing */
    tr_blob_unref(&p->data);
    free(p);
  }
  if (in->type == TN_PUT_OK || in->type == TN_PULL_OK) {
    pd->waiting--;
    if (pd->peer_waiting[peer]) pd->peer_waiting[peer]--;
    if (pd->job) pd->job->pushing--;
  } else if (in->type == TN_ERROR) {
    char msg[200];
    int code;
    uint64_t chunk;
    tr_err err;
    tr_clearerr(&err);
    tn_get_error(in, &code, &chunk, msg, sizeof msg);
    wi_pull *p = s_pull_take(w, peer, in->req, chunk);
    if (!p) {
      pd->failed = 1;
      snprintf(pd->why, sizeof pd->why, "peer refused a chunk: %s", msg);
      return;
    }
    /* The peer could not copy it out of this process (not allowed to read
    ** it, say): send the bytes, to that peer from now on. */
    if (!w->put_only[peer])
      wi_log("peer %s cannot copy chunks out of this worker (%s): sending them instead",
             w->peer_ep[peer], msg);
    w->put_only[peer] = 1;
    if (s_send_put(w, peer, p->my_req, p->db, &p->c, p->data, p->keep, &err)) {
      pd->failed = 1;
      snprintf(pd->why, sizeof pd->why, "cannot send a chunk to %s: %s", w->peer_ep[peer], err.msg);
    }
    free(p);
  }
}
