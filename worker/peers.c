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

/* PUT chunk c of database db to peer as request my_req, to be kept as
** keep says; the reference b is handed over, dropped once sent or at once
** on failure. */
static int s_put_peer(wi_worker *w, void *peer, uint64_t my_req, uint64_t db, const tn_chunk *c,
                      tr_blob *b, int keep, tr_err *err) {
  tn_wbuf body = {0};
  tn_put_u32(&body, 1);
  tn_put_chunk(&body, c);
  tn_put_u8(&body, (uint8_t)keep);
  int rc = tn_send_blobs(peer, NULL, 0, TN_PUT, my_req, db, &body, 1, &b, err);
  tn_wbuf_free(&body);
  if (!rc) w->bytes_sent += c->nbytes;
  return rc;
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
    if (s_put_peer(w, w->peer[peer], pd->my_req, pd->db, &o->c, buf, j->keep, &err)) {
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
    wi_pending *pd = calloc(1, sizeof *pd);
    tr_err err;
    tr_clearerr(&err);
    if (!pd) {
      pthread_mutex_lock(&w->mu);
      p->job->push_failed = 1;
      p->job->pushing -= p->nrep;
      snprintf(p->job->push_why, sizeof p->job->push_why, "cannot replicate chunk %016llx: out of memory",
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
        snprintf(pd->why, sizeof pd->why, "cannot replicate to %s: %s", p->rep[k], err.msg);
        break;
      }
      /* every peer is sent the bytes the store holds: a reference each */
      if (s_put_peer(w, w->peer[peer], pd->my_req, p->job->db, &p->c, tr_blob_ref(p->data), p->keep,
                     &err)) {
        pd->failed = 1;
        snprintf(pd->why, sizeof pd->why, "cannot replicate to %s: %s", p->rep[k], err.msg);
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

/* A reply from peer socket `peer` (to one of our PUTs). */
void wi_on_peer_reply(wi_worker *w, int peer, tn_in *in) {
  for (wi_pending *pd = w->pending; pd; pd = pd->next)
    if (pd->my_req == in->req) {
      if (in->type == TN_PUT_OK) {
        pd->waiting--;
        if (pd->peer_waiting[peer]) pd->peer_waiting[peer]--;
        if (pd->job) pd->job->pushing--;
      } else if (in->type == TN_ERROR) {
        char msg[200];
        int code;
        uint64_t chunk;
        tn_get_error(in, &code, &chunk, msg, sizeof msg);
        pd->failed = 1;
        snprintf(pd->why, sizeof pd->why, "peer refused a chunk: %s", msg);
      }
      return;
    }
}
