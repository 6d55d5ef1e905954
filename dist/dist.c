/*
** engine/dist.c - the coordinator: workers, chunk placement, and plans run
** as implementation-algebra (IA) operators on the workers.
**
** Workers are the sites of the IA.  Every stored chunk has a cluster-wide
** id and lives on `replication` workers (catalog table chunk_replicas).
** A node of a plan (TRA join + aggregation) runs as the optimizer chose
** (optimize.c): each operand stays, is broadcast or is shuffled to the
** sites its join tuples run on, exactly the moves to_moves_compute
** counted; then one fused local join + aggregation + map task per site
** (exec.c on the worker); when an output chunk's tuples ran on several
** sites, its partials are shuffled to the owner and combined there.
** Chunks move worker to worker (SEND); the coordinator only ships what it
** reads from or writes to user files.
**
** Requests are pipelined: a phase sends all its requests, then waits for
** every reply while heartbeating.  A worker silent for TN_LIVENESS
** heartbeat intervals is marked down and the statement fails naming it;
** the catalog only ever lists chunks the workers confirmed durable (SYNC
** before commit), so a failed statement leaves the previous state.
*/
#include "config.h"
#include "dist/dist_int.h"

#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#define S_HELLO_TIMEOUT_S 10.0   /* workers must answer HELLO by then */
#define S_CALL_TIMEOUT_S 600.0   /* longest wait for one phase */
#define S_INFLIGHT_BYTES (256u << 20) /* PUT data in flight before waiting */
#define S_REJOIN_GRACE_S 0.03  /* a ping waits this long for workers believed down */
#define S_IDLE_PING_S 1.0      /* te_maintain pings at most this often */

/* ---- Requests ------------------------------------------------------------ */

/* One outstanding request of a phase. */
typedef struct s_out {
  int site;      /* site index */
  int type;      /* request type */
  int done;      /* reply received */
  tn_in reply;   /* the reply (when done) */
} s_out;

/* A phase: requests sent, replies awaited together. */
typedef struct s_phase {
  td_cluster *c;  /* engine */
  uint64_t base; /* request id of out[0] */
  int n, cap;    /* requests */
  s_out *out;    /* them */
} s_phase;

static void s_phase_init(s_phase *ph, td_cluster *c) {
  memset(ph, 0, sizeof *ph);
  ph->c = c;
  ph->base = c->next_req + 1;
}

static void s_phase_free(s_phase *ph) {
  for (int i = 0; i < ph->n; i++)
    if (ph->out[i].done == 1) tn_in_close(&ph->out[i].reply);
  free(ph->out);
  ph->c->next_req = ph->base + (uint64_t)ph->n;
  memset(ph, 0, sizeof *ph);
}

/* Send a request to site s as part of the phase. */
static int s_request(s_phase *ph, int s, int type, const tn_wbuf *body, int ndata,
                     void *const *data, const size_t *len, tn_free_fn *fr, tr_err *err) {
  td_cluster *c = ph->c;
  if (ph->n == ph->cap) {
    int cap = ph->cap ? ph->cap * 2 : 16;
    s_out *o = realloc(ph->out, sizeof *o * (size_t)cap);
    if (!o) {
      for (int i = 0; fr && i < ndata; i++) fr(data[i], NULL);
      return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
    ph->out = o;
    ph->cap = cap;
  }
  s_out *o = &ph->out[ph->n];
  memset(o, 0, sizeof *o);
  o->site = s;
  o->type = type;
  int rc = tn_send(c->sites[s].sock, NULL, 0, type, ph->base + (uint64_t)ph->n, c->db_id, body,
                   ndata, data, len, fr, NULL, err);
  if (rc) return tr_seterr(err, rc, "cannot send to worker %s: %s", c->sites[s].ep, err->msg);
  ph->n++;
  return TR_OK;
}

static void s_heartbeat_all(td_cluster *c) {
  tr_err err;
  for (int s = 0; s < c->nsites; s++)
    tn_send(c->sites[s].sock, NULL, 0, TN_HEARTBEAT, 0, c->db_id, NULL, 0, NULL, NULL, NULL, NULL,
            &err);
}

/* Note the worker process a HEARTBEAT or HELLO_OK came from: another one
** than before means the worker restarted, and requests the old one held
** will never be answered. */
static void s_incarnation(td_site *st, tn_in *in) {
  size_t n;
  const void *b = tn_in_body(in, &n);
  tn_rbuf r;
  uint64_t inc;
  if (in->type != TN_HEARTBEAT && in->type != TN_HELLO_OK) return;
  tn_rbuf_init(&r, b, n);
  if (in->type == TN_HELLO_OK) {
    char skip[TC_ENDPOINT_MAX];
    tn_get_str(&r, skip, sizeof skip);
    (void)tn_get_u32(&r);
    tn_get_str(&r, skip, sizeof skip);
  }
  inc = tn_get_u64(&r);
  if (tn_rbuf_ok(&r) != TR_OK || !inc) return;
  if (st->incarnation && inc != st->incarnation) st->restarted = 1;
  st->incarnation = inc;
}

/* Read what the sites sent; replies of ph (may be NULL) are stored. */
static void s_drain(td_cluster *c, s_phase *ph, int timeout_ms) {
  zmq_pollitem_t items[256];
  int n = c->nsites < 256 ? c->nsites : 256;
  for (int s = 0; s < n; s++) items[s] = (zmq_pollitem_t){c->sites[s].sock, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(items, n, timeout_ms) <= 0) return;
  for (int s = 0; s < n; s++) {
    if (!(items[s].revents & ZMQ_POLLIN)) continue;
    for (;;) {
      tn_in in;
      tr_err err;
      int rc = tn_recv(c->sites[s].sock, 0, ZMQ_DONTWAIT, &in, &err);
      if (rc == TR_ENOTFOUND || rc == TR_EINTR || rc == TR_EIO) break;
      if (rc) continue; /* malformed: dropped */
      c->sites[s].last_seen = tr_now();
      s_incarnation(&c->sites[s], &in);
      if (ph && in.req >= ph->base && in.req < ph->base + (uint64_t)ph->n) {
        s_out *o = &ph->out[in.req - ph->base];
        /* a heartbeat answers only a ping (the worker's own carry id 0) */
        if (!o->done && o->site == s && (in.type != TN_HEARTBEAT || o->type == TN_HEARTBEAT)) {
          o->done = 1;
          o->reply = in;
          continue;
        }
      }
      tn_in_close(&in);
    }
  }
}

/* Wait for every reply of the phase; fails if a site is silent too long
** or restarted, replies with an error (unless tolerant: then the caller
** looks at each reply), or the user interrupts; on failure the sites still
** busy with the phase are told to cancel.  With tolerant set, a silent
** site's requests are marked done with no reply instead of failing. */
static int s_wait_ex(s_phase *ph, int tolerant, tr_err *err);
static int s_wait(s_phase *ph, tr_err *err) { return s_wait_ex(ph, 0, err); }

/* Tell the workers still busy with requests of ph to stop: the phase
** failed, so their work for this statement is of no use. */
static void s_cancel_busy(s_phase *ph) {
  td_cluster *c = ph->c;
  tr_err ignore;
  for (int s = 0; s < c->nsites; s++) {
    int busy = 0;
    for (int i = 0; i < ph->n && !busy; i++) busy = !ph->out[i].done && ph->out[i].site == s;
    if (busy && c->sites[s].up)
      tn_send(c->sites[s].sock, NULL, 0, TN_CANCEL, 0, c->db_id, NULL, 0, NULL, NULL, NULL, NULL, &ignore);
  }
}

static int s_wait_loop(s_phase *ph, int tolerant, tr_err *err);

static int s_wait_ex(s_phase *ph, int tolerant, tr_err *err) {
  int rc = s_wait_loop(ph, tolerant, err);
  if (rc) s_cancel_busy(ph);
  return rc;
}

static int s_wait_loop(s_phase *ph, int tolerant, tr_err *err) {
  td_cluster *c = ph->c;
  double start = tr_now(), next_beat = 0;
  for (;;) {
    int pending = 0;
    for (int i = 0; i < ph->n; i++) {
      s_out *o = &ph->out[i];
      if (!o->done) {
        pending++;
        continue;
      }
      if (o->reply.type == TN_ERROR && !tolerant) {
        char msg[600];
        int code;
        uint64_t chunk;
        tn_get_error(&o->reply, &code, &chunk, msg, sizeof msg);
        if (code == TR_ECORRUPT && chunk) {
          c->bad_site = o->site;
          c->bad_chunk = chunk;
        }
        return tr_seterr(err, code, "worker %s: %s", c->sites[o->site].ep, msg);
      }
    }
    if (!pending) return TR_OK;
    double now = tr_now();
    if (tr_cancelled(c->interrupt)) return tr_seterr(err, TR_EINTR, "interrupted");
    if (now - start > S_CALL_TIMEOUT_S) {
      int i = 0;
      while (ph->out[i].done) i++; /* pending > 0: one is not done */
      return tr_seterr(err, TR_EIO, "workers did not answer within %.0f s (%d requests, first %s to %s)",
                       S_CALL_TIMEOUT_S, pending, tn_type_name(ph->out[i].type), c->sites[ph->out[i].site].ep);
    }
    if (now >= next_beat) {
      s_heartbeat_all(c);
      next_beat = now + TN_HEARTBEAT_MS / 1000.0;
    }
    for (int i = 0; i < ph->n; i++) {
      td_site *st = &c->sites[ph->out[i].site];
      int silent = now - st->last_seen > TN_LIVENESS * TN_HEARTBEAT_MS / 1000.0;
      if (!ph->out[i].done && (silent || st->restarted)) {
        st->up = 0;
        if (tolerant) {
          ph->out[i].done = 2; /* no reply */
          continue;
        }
        if (st->restarted)
          return tr_seterr(err, TR_EIO, "worker %s restarted while it worked for this statement", st->ep);
        return tr_seterr(err, TR_EIO, "worker %s is down (silent for %.1f s)", st->ep,
                         now - st->last_seen);
      }
    }
    s_drain(c, ph, TN_HEARTBEAT_MS / 5);
  }
}

/* Reply i's body as a read cursor. */
static void s_reply_body(s_phase *ph, int i, tn_rbuf *r) {
  size_t n;
  const void *b = tn_in_body(&ph->out[i].reply, &n);
  tn_rbuf_init(r, b, n);
}

/* Tell site `only` (-1: every live site) to drop ids (best effort:
** cleanup never fails a statement). */
static void s_drop_ids(td_cluster *c, int only, const uint64_t *ids, int64_t n) {
  if (!n) return;
  s_phase ph;
  tr_err err;
  s_phase_init(&ph, c);
  tn_wbuf b = {0};
  tn_put_u32(&b, (uint32_t)n);
  for (int64_t i = 0; i < n; i++) tn_put_u64(&b, ids[i]);
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].up && (only < 0 || s == only)) s_request(&ph, s, TN_DROP, &b, 0, NULL, NULL, NULL, &err);
  tn_wbuf_free(&b);
  s_wait(&ph, &err);
  s_phase_free(&ph);
}

/* Remember that site id lost its copy of chunk (for s_repair). */
static void s_note_lost(td_cluster *c, int64_t site, uint64_t chunk) {
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

static int s_inventory(td_cluster *c, int only, tr_err *err);

/* Before a statement: which workers are alive now?  Ping every worker and
** wait (at most the liveness window) for the ones believed up; heartbeats
** queued while the shell was idle prove nothing, an echoed ping does.  A
** worker that answers after being down has rejoined: its inventory is
** reconciled with the catalog, and the replicas chunks lack may now be
** made (te_maintain). */
static void s_ping(td_cluster *c) {
  s_phase ph;
  tr_err err;
  int rejoined = 0;
  s_drain(c, NULL, 0);
  s_phase_init(&ph, c);
  for (int s = 0; s < c->nsites; s++) s_request(&ph, s, TN_HEARTBEAT, NULL, 0, NULL, NULL, NULL, &err);
  /* A worker believed down gets a short grace too: one that came back
  ** answers within it, and is seen rejoining now rather than by chance. */
  double t0 = tr_now(), end = t0 + TN_LIVENESS * TN_HEARTBEAT_MS / 1000.0;
  for (;;) {
    int waiting = 0, grace = tr_now() < t0 + S_REJOIN_GRACE_S;
    for (int i = 0; i < ph.n; i++)
      waiting += !ph.out[i].done && (grace || c->sites[ph.out[i].site].up);
    if (!waiting || tr_now() >= end) break;
    s_drain(c, &ph, 5);
  }
  c->last_ping = tr_now();
  for (int i = 0; i < ph.n; i++) {
    td_site *st = &c->sites[ph.out[i].site];
    /* Back after being down, or a new process in its place: either way
    ** what it holds is reconciled anew. */
    if (ph.out[i].done && (!st->up || st->restarted)) rejoined = 1;
    st->up = ph.out[i].done;
    st->restarted = 0;
  }
  s_phase_free(&ph);
  if (rejoined) {
    s_inventory(c, -1, &err);
    c->repair = 1;
  }
}

/* ---- Workers ------------------------------------------------------------- */

static int s_site_open(td_cluster *c, td_site *st, tr_err *err) {
  st->sock = zmq_socket(c->zctx, ZMQ_DEALER);
  if (!st->sock) return tr_seterr(err, TR_EIO, "cannot make a socket: %s", zmq_strerror(errno));
  int linger = 0, hwm = 0, tmo = 30000, ivl = 100;
  zmq_setsockopt(st->sock, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(st->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(st->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(st->sock, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(st->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
  /* Watch its handshakes: a worker that refuses our CURVE key (or our
  ** lack of one) is otherwise just silence until a timeout. */
  static unsigned seq;
  char mon[64];
  snprintf(mon, sizeof mon, "inproc://tradb-monitor-%u", ++seq);
  if (zmq_socket_monitor(st->sock, mon, ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                            ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) == 0 &&
      (st->mon = zmq_socket(c->zctx, ZMQ_PAIR)) != NULL) {
    zmq_setsockopt(st->mon, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(st->mon, mon) != 0) {
      zmq_close(st->mon);
      st->mon = NULL;
    }
  }
  int rc = tn_secure_client(st->sock, &c->keys, err);
  if (!rc && zmq_connect(st->sock, st->ep) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot connect to worker %s: %s", st->ep, zmq_strerror(errno));
  return rc;
}

/* Read site st's handshake failures (its socket monitor's events): a
** refusal is kept in st->refused.  Returns 1 if it was refused. */
static int s_refused(td_site *st, const tn_keys *keys) {
  for (;;) {
    zmq_msg_t m;
    uint16_t ev = 0;
    uint32_t val = 0;
    int more;
    if (!st->mon) break;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, st->mon, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      break;
    }
    if (zmq_msg_size(&m) >= 6) {
      memcpy(&ev, zmq_msg_data(&m), 2);
      memcpy(&val, (const char *)zmq_msg_data(&m) + 2, 4);
    }
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    while (more) { /* the endpoint frame */
      zmq_msg_init(&m);
      more = zmq_msg_recv(&m, st->mon, 0) >= 0 && zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      snprintf(st->refused, sizeof st->refused, "it refused this shell's CURVE key (status %u): "
               "--keys must name the cluster's key pair", val);
    else if (ev)
      snprintf(st->refused, sizeof st->refused, "%s", keys->on
               ? "the CURVE handshake failed: does it use the same cluster keys (--keys)?"
               : "the handshake failed: it may require CURVE keys (give --keys)");
  }
  return st->refused[0] != 0;
}

/* Say HELLO to every site and wait for the answers (sites that do not
** answer in time stay down; it is an error only if none answers).  A site
** that refuses our credentials is known at once, not at the timeout. */
static int s_hello_all(td_cluster *c, double timeout_s, tr_err *err) {
  s_phase ph;
  s_phase_init(&ph, c);
  tn_wbuf b = {0};
  tn_put_str(&b, "tradb shell");
  int rc = TR_OK;
  for (int s = 0; s < c->nsites && !rc; s++) rc = s_request(&ph, s, TN_HELLO, &b, 0, NULL, NULL, NULL, err);
  tn_wbuf_free(&b);
  double end = tr_now() + timeout_s, resend = tr_now() + TN_HEARTBEAT_MS / 1000.0;
  while (!rc && tr_now() < end && !tr_cancelled(c->interrupt)) {
    int pending = 0;
    for (int i = 0; i < ph.n; i++)
      pending += !ph.out[i].done && !s_refused(&c->sites[ph.out[i].site], &c->keys);
    if (!pending) break;
    s_drain(c, &ph, 50);
    /* A HELLO can be lost with a connection that closes under it (a local
    ** worker of a killed shell still stopping on the same socket path):
    ** say it again, with the same request id, until answered. */
    if (tr_now() >= resend) {
      tn_wbuf hb = {0};
      tr_err ignore;
      tn_put_str(&hb, "tradb shell");
      for (int i = 0; i < ph.n; i++)
        if (!ph.out[i].done)
          tn_send(c->sites[ph.out[i].site].sock, NULL, 0, TN_HELLO, ph.base + (uint64_t)i, c->db_id, &hb, 0,
                  NULL, NULL, NULL, NULL, &ignore);
      tn_wbuf_free(&hb);
      resend = tr_now() + TN_HEARTBEAT_MS / 1000.0;
    }
    /* A local worker that exited will never answer: say why now. */
    for (int i = 0; !rc && i < ph.n; i++) {
      td_site *st = &c->sites[ph.out[i].site];
      int wst;
      if (!ph.out[i].done && st->pid > 0 && waitpid(st->pid, &wst, WNOHANG) == st->pid) {
        st->pid = 0;
        rc = tr_seterr(err, TR_EIO, "local worker %s exited (see %s/w%d.log)", st->ep, c->workdir,
                       ph.out[i].site);
      }
    }
  }
  int up = 0;
  for (int i = 0; i < ph.n; i++) {
    c->sites[ph.out[i].site].up = ph.out[i].done && ph.out[i].reply.type == TN_HELLO_OK;
    c->sites[ph.out[i].site].restarted = 0; /* the process that said HELLO_OK is the one we know */
    up += c->sites[ph.out[i].site].up;
  }
  s_phase_free(&ph);
  /* Ctrl-C while waiting is the answer, not a silent cluster. */
  if (!rc && !up && c->nsites && tr_cancelled(c->interrupt))
    rc = tr_seterr(err, TR_EINTR, "interrupted");
  for (int s = 0; !rc && !up && s < c->nsites; s++)
    if (c->sites[s].refused[0])
      rc = tr_seterr(err, TR_EIO, "cannot use worker %s: %s", c->sites[s].ep, c->sites[s].refused);
  if (!rc && !up && c->nsites)
    rc = tr_seterr(err, TR_EIO, "no worker answered within %.0f s (first: %s)", timeout_s,
                   c->sites[0].ep);
  return rc;
}

/* A new zeroed site at the end of c->sites for endpoint ep, or NULL. */
static td_site *s_site_new(td_cluster *c, const char *ep, tr_err *err) {
  td_site *ns = realloc(c->sites, sizeof *ns * (size_t)(c->nsites + 1));
  if (!ns) {
    tr_seterr(err, TR_ENOMEM, "out of memory");
    return NULL;
  }
  c->sites = ns;
  td_site *st = &c->sites[c->nsites];
  memset(st, 0, sizeof *st);
  if (snprintf(st->ep, sizeof st->ep, "%s", ep) >= (int)sizeof st->ep) {
    tr_seterr(err, TR_EINVAL, "endpoint too long: %s", ep);
    return NULL;
  }
  return st;
}

/* Wait for local worker pid, told to stop: it stops within a poll
** interval, but is not waited for forever. */
static void s_reap(pid_t pid) {
  int st;
  double end = tr_now() + 5;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (tr_now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      break;
    }
    usleep(10000);
  }
}

/* Disconnect site index k (stopping it if it is a local worker) and take
** it out of c->sites, keeping the others in order. */
static void s_site_drop(td_cluster *c, int k) {
  td_site *st = &c->sites[k];
  zmq_close(st->sock);
  if (st->mon) zmq_close(st->mon);
  if (st->pid > 0) {
    kill(st->pid, SIGTERM);
    s_reap(st->pid);
  }
  memmove(st, st + 1, sizeof *st * (size_t)(c->nsites - k - 1));
  c->nsites--;
}

/* Record site st (made by s_site_new) and connect to it. */
static int s_site_join(td_cluster *c, td_site *st, tr_err *err) {
  int rc = tc_site_add(c->db, st->ep, &st->id, err);
  if (!rc) rc = s_site_open(c, st, err);
  if (!rc || st->sock) c->nsites++;
  return rc;
}

/* Start local worker number idx, one of `of` sharing this machine: its
** endpoint is an ipc socket under workdir, its store workdir/w<idx>, its
** log workdir/w<idx>.log. */
static int s_spawn_local(td_cluster *c, const td_config *cfg, int idx, int of, tr_err *err) {
  char exe[4096], ep[TC_ENDPOINT_MAX];
  const char *self = cfg->self_exe;
  if (!self) {
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return tr_seterr(err, TR_EIO, "cannot find the tradb binary to start workers");
    exe[k] = '\0';
    self = exe;
  }
  if (mkdir(c->workdir, 0700) != 0 && errno != EEXIST)
    return tr_seterr(err, TR_EIO, "cannot create '%s': %s", c->workdir, strerror(errno));
  int per = tr_ncores() / of;
  if (cfg->threads > 0) per = cfg->threads;
  if (per < 1) per = 1;
  /* A worker holds scratch chunks in up to 1/8 of the machine's memory by
  ** default; local workers share one machine, so they share that. */
  char memory[32];
  int64_t share = tr_phys_memory() / 8 / of;
  snprintf(memory, sizeof memory, "%lld", (long long)(share > (1 << 20) ? share : 1 << 20));
  if (snprintf(ep, sizeof ep, "ipc://%s/w%d.ipc", c->workdir, idx) >= (int)sizeof ep ||
      strlen(c->workdir) > 90)
    return tr_seterr(err, TR_EINVAL, "database path too long for local worker sockets: %s",
                     c->workdir);
  td_site *st = s_site_new(c, ep, err);
  if (!st) return err->code;
  /* A local worker of a killed shell can still be bound to this socket
  ** while it stops: we must not reach it (it would answer, then vanish
  ** with our requests).  Only this database's shell uses the path (the
  ** catalog is locked), and the new worker binds it afresh. */
  unlink(ep + 6);
  char data[4200], logf[4200], threads[16];
  snprintf(data, sizeof data, "%s/w%d", c->workdir, idx);
  snprintf(logf, sizeof logf, "%s/w%d.log", c->workdir, idx);
  snprintf(threads, sizeof threads, "%d", per);
  pid_t pid = fork();
  if (pid < 0) return tr_seterr(err, TR_EIO, "cannot start a worker: %s", strerror(errno));
  if (pid == 0) {
    /* A local worker lives and dies with its shell, even a killed one,
    ** but the terminal's signals are the shell's: Ctrl-C cancels a
    ** statement, it must not stop the workers.  Hence its own session. */
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int fd = open(logf, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) dup2(fd, 2);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    const char *argv[24];
    int a = 0;
    argv[a++] = self;
    argv[a++] = "--worker";
    argv[a++] = "--listen";
    argv[a++] = st->ep;
    argv[a++] = "--data";
    argv[a++] = data;
    argv[a++] = "--threads";
    argv[a++] = threads;
    if (cfg->backend) {
      argv[a++] = "--backend";
      argv[a++] = cfg->backend;
    }
    if (cfg->keys) {
      argv[a++] = "--keys";
      argv[a++] = cfg->keys;
    }
    if (cfg->device) {
      argv[a++] = "--device";
      argv[a++] = cfg->device;
    }
    if (cfg->gpu_memory) {
      argv[a++] = "--gpu-memory";
      argv[a++] = cfg->gpu_memory;
    }
    argv[a++] = "--memory";
    argv[a++] = memory;
    argv[a] = NULL;
    execv(self, (char *const *)argv);
    _exit(127);
  }
  st->pid = pid;
  return s_site_join(c, st, err);
}

/* Is endpoint one of this database's local workers? */
static int s_is_local_ep(const td_cluster *c, const char *ep) {
  size_t n = strlen(c->workdir);
  return !strncmp(ep, "ipc://", 6) && !strncmp(ep + 6, c->workdir, n) && ep[6 + n] == '/';
}

static int s_add_site(td_cluster *c, const char *ep, tr_err *err) {
  for (int s = 0; s < c->nsites; s++)
    if (!strcmp(c->sites[s].ep, ep)) return TR_OK;
  td_site *st = s_site_new(c, ep, err);
  return st ? s_site_join(c, st, err) : err->code;
}

/* Reconcile what live workers hold (site `only`, or all with -1) with
** the catalog: each is sent the chunk ids the catalog lists on it and
** answers with the ones it lacks (lost, or set aside as damaged: the
** catalog forgets those replicas) and the chunks of this database it holds
** that are not listed there.  Of those, a chunk the catalog knows (same
** id, size and checksum) is a good copy and is recorded as a replica (a
** worker removed while down and added back, a copy made before a failure
** was recorded); anything else is what a killed or failed statement left,
** and is dropped.  A worker never drops a chunk on its own. */
static int s_inventory(td_cluster *c, int only, tr_err *err) {
  s_phase ph;
  uint64_t **drop = calloc((size_t)c->nsites + 1, sizeof *drop); /* per site: to drop */
  int64_t *ndrop = calloc((size_t)c->nsites + 1, sizeof *ndrop);
  int rc = drop && ndrop ? TR_OK : tr_seterr(err, TR_ENOMEM, "out of memory");
  s_phase_init(&ph, c);
  for (int s = 0; s < c->nsites && !rc; s++) {
    uint64_t *ids = NULL;
    int64_t n = 0;
    if (!c->sites[s].up || (only >= 0 && s != only)) continue;
    if ((rc = tc_site_chunks(c->db, c->sites[s].id, &ids, &n, err))) break;
    tn_wbuf b = {0};
    tn_put_u32(&b, (uint32_t)n);
    for (int64_t i = 0; i < n; i++) tn_put_u64(&b, ids[i]);
    free(ids);
    rc = s_request(&ph, s, TN_INVENTORY, &b, 0, NULL, NULL, NULL, err);
    tn_wbuf_free(&b);
  }
  if (!rc) rc = s_wait(&ph, err);
  for (int i = 0; !rc && i < ph.n; i++) {
    int s = ph.out[i].site;
    tn_rbuf r;
    s_reply_body(&ph, i, &r);
    uint32_t nmiss = tn_get_count(&r, 8);
    uint64_t *miss = calloc(nmiss + 1, sizeof *miss);
    for (uint32_t k = 0; miss && k < nmiss; k++) miss[k] = tn_get_u64(&r);
    uint32_t nx = tn_get_count(&r, 25);
    uint64_t *xid = calloc(nx + 1, sizeof *xid), *xlen = calloc(nx + 1, sizeof *xlen),
             *xsum = calloc(nx + 1, sizeof *xsum);
    int *known = calloc(nx + 1, sizeof *known);
    int64_t nadopt = 0;
    drop[s] = calloc(nx + 1, sizeof *drop[s]);
    if (!miss || !xid || !xlen || !xsum || !known || !drop[s])
      rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    for (uint32_t k = 0; !rc && k < nx; k++) {
      tn_chunk ck;
      tn_get_chunk(&r, &ck);
      xid[k] = ck.id;
      xlen[k] = ck.nbytes;
      xsum[k] = ck.checksum;
    }
    if (!rc && tn_rbuf_ok(&r) != TR_OK)
      rc = tr_seterr(err, TR_EINVAL, "worker %s: malformed INVENTORY reply", c->sites[s].ep);
    if (!rc && nmiss) rc = tc_replica_remove(c->db, c->sites[s].id, miss, nmiss, err);
    for (uint32_t k = 0; !rc && k < nmiss; k++) s_note_lost(c, c->sites[s].id, miss[k]);
    if (!rc) rc = tc_chunks_known(c->db, xid, xlen, xsum, nx, known, err);
    for (uint32_t k = 0; !rc && k < nx; k++)
      if (known[k])
        xid[nadopt++] = xid[k];
      else
        drop[s][ndrop[s]++] = xid[k];
    if (!rc) rc = tc_replica_add(c->db, c->sites[s].id, xid, nadopt, err);
    free(miss);
    free(xid);
    free(xlen);
    free(xsum);
    free(known);
  }
  s_phase_free(&ph);
  for (int s = 0; !rc && s < c->nsites; s++)
    if (ndrop[s]) s_drop_ids(c, s, drop[s], ndrop[s]);
  for (int s = 0; drop && s < c->nsites; s++) free(drop[s]);
  free(drop);
  free(ndrop);
  return rc;
}

/* The number of local worker endpoint ep (ipc://WORKDIR/w<idx>.ipc), or
** -1 for another endpoint. */
static int s_local_index(const td_cluster *c, const char *ep) {
  int idx, end = 0;
  if (!s_is_local_ep(c, ep) ||
      sscanf(ep + 6 + strlen(c->workdir), "/w%d.ipc%n", &idx, &end) != 1 || !end ||
      ep[6 + strlen(c->workdir) + (size_t)end] || idx < 0 || idx >= 4096)
    return -1;
  return idx;
}

/* Does the catalog list chunks on site id? */
static int s_site_holds(td_cluster *c, int64_t id) {
  uint64_t *ids = NULL;
  int64_t n = 0;
  tr_err ignore;
  tc_site_chunks(c->db, id, &ids, &n, &ignore);
  free(ids);
  return n > 0;
}

/* Connect the workers: those of --workers, or else the remote workers
** recorded in the catalog; recorded workers that hold chunks in any case,
** so every stored chunk stays reachable however the workers were named;
** local workers when there is no other, and those holding chunks. */
/* td_cluster_open, once c exists. */
static int s_open(td_cluster *c, const td_config *cfg, tr_err *err) {
  tc_site *rec = NULL;
  int nrec = 0, rc;
  c->zctx = zmq_ctx_new();
  if (!c->zctx) return tr_seterr(err, TR_EIO, "cannot start ZeroMQ");
  if ((rc = tn_load_keys(cfg->keys, &c->keys, err))) return rc;
  /* Absolute, so the endpoints recorded in the catalog do not depend on
  ** the directory the shell was started from. */
  char absdir[4096];
  if (!realpath(tc_dir(c->db), absdir)) snprintf(absdir, sizeof absdir, "%s", tc_dir(c->db));
  snprintf(c->workdir, sizeof c->workdir, "%s/" TC_LOCAL_WORKERS_DIR, absdir);
  if ((rc = tc_site_list(c->db, &rec, &nrec, err))) return rc;
  if (cfg->workers && *cfg->workers) {
    char *list = strdup(cfg->workers), *save = NULL;
    if (!list) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    for (char *ep = list ? strtok_r(list, ",", &save) : NULL; ep && !rc; ep = strtok_r(NULL, ",", &save))
      if (*ep) rc = s_add_site(c, ep, err);
    free(list);
  }
  for (int i = 0; i < nrec && !rc; i++)
    if (!s_is_local_ep(c, rec[i].endpoint) && (!cfg->workers || !*cfg->workers || s_site_holds(c, rec[i].id)))
      rc = s_add_site(c, rec[i].endpoint, err);
  /* Local workers: w0..w<n-1> when no other worker is configured, and any
  ** recorded one that holds chunks. */
  int nlocal = c->nsites || rc ? 0 : cfg->local_workers > 0 ? cfg->local_workers : tr_ncores();
  int top = nlocal, *want = NULL;
  for (int i = 0; i < nrec; i++) {
    int idx = s_local_index(c, rec[i].endpoint);
    if (idx + 1 > top && s_site_holds(c, rec[i].id)) top = idx + 1;
  }
  if (!rc && top && !(want = calloc((size_t)top, sizeof *want))) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int i = 0; want && i < top; i++) want[i] = i < nlocal;
  for (int i = 0; want && i < nrec; i++) {
    int idx = s_local_index(c, rec[i].endpoint);
    if (idx >= 0 && idx < top && s_site_holds(c, rec[i].id)) want[idx] = 1;
  }
  int of = 0;
  for (int i = 0; want && i < top; i++) of += want[i];
  for (int i = 0; want && i < top && !rc; i++)
    if (want[i]) rc = s_spawn_local(c, cfg, i, of, err);
  free(want);
  free(rec);
  if (rc) return rc;
  if ((rc = s_hello_all(c, S_HELLO_TIMEOUT_S, err))) return rc;
  c->repair = 1; /* td_maintain checks once after opening */
  return s_inventory(c, -1, err);
}

int td_cluster_open(tc_db *db, const td_config *cfg, const tr_cancel *interrupt,
                    td_cluster **out, tr_err *err) {
  td_cluster *c = calloc(1, sizeof *c);
  *out = NULL;
  if (!c) return tr_seterr(err, TR_ENOMEM, "out of memory");
  c->db = db;
  c->db_id = tc_db_id(db);
  c->interrupt = interrupt;
  int rc = s_open(c, cfg, err);
  if (rc) td_cluster_close(&c);
  *out = c;
  return rc;
}

void td_cluster_close(td_cluster **pc) {
  td_cluster *c = pc ? *pc : NULL;
  if (!c) return;
  *pc = NULL;
  for (int s = 0; s < c->nsites; s++) {
    if (c->sites[s].sock) zmq_close(c->sites[s].sock);
    if (c->sites[s].mon) zmq_close(c->sites[s].mon);
    if (c->sites[s].pid > 0) kill(c->sites[s].pid, SIGTERM);
  }
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].pid > 0) s_reap(c->sites[s].pid);
  free(c->sites);
  c->sites = NULL;
  c->nsites = 0;
  if (c->zctx) zmq_ctx_term(c->zctx);
  c->zctx = NULL;
  if (c->keys.on) tn_zap_stop();
  free(c->lost);
  free(c->notice);
  free(c);
}

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

int td_workers(td_cluster *c, td_worker_stat **out, int *n, tr_err *err) {
  s_phase ph;
  *out = NULL;
  *n = 0;
  s_ping(c);
  s_phase_init(&ph, c);
  int rc = TR_OK;
  for (int s = 0; s < c->nsites && !rc; s++)
    if (c->sites[s].up) rc = s_request(&ph, s, TN_STATS, NULL, 0, NULL, NULL, NULL, err);
  double end = tr_now() + 2.0;
  while (!rc && tr_now() < end) {
    int pending = 0;
    for (int i = 0; i < ph.n; i++) pending += !ph.out[i].done;
    if (!pending) break;
    s_drain(c, &ph, 50);
  }
  td_worker_stat *v = rc ? NULL : calloc((size_t)c->nsites + 1, sizeof *v);
  if (!rc && !v) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int s = 0; !rc && s < c->nsites; s++) {
    td_worker_stat *w = &v[s];
    snprintf(w->endpoint, sizeof w->endpoint, "%s", c->sites[s].ep);
    snprintf(w->kernels, sizeof w->kernels, "-");
    for (int i = 0; i < ph.n; i++)
      if (ph.out[i].site == s && ph.out[i].done && ph.out[i].reply.type == TN_STATS_OK) {
        tn_rbuf b;
        s_reply_body(&ph, i, &b);
        w->tasks = tn_get_u64(&b);
        w->chunks = tn_get_u64(&b);
        w->bytes_held = tn_get_u64(&b);
        w->bytes_sent = tn_get_u64(&b);
        w->bytes_received = tn_get_u64(&b);
        tn_get_str(&b, w->kernels, sizeof w->kernels);
        w->up = tn_rbuf_ok(&b) == TR_OK;
      }
  }
  s_phase_free(&ph);
  if (rc) return rc;
  *out = v;
  *n = c->nsites;
  return TR_OK;
}

/* ---- Placement ------------------------------------------------------------- */

/* Live sites, in index order; returns how many. */
static int s_up_sites(const td_cluster *c, int *up) {
  int m = 0;
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].up) up[m++] = s;
  return m;
}

static int s_site_index(const td_cluster *c, int64_t id) {
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].id == id) return s;
  return -1;
}

/* Does loc list site_id as a holder? */
static int s_has(const tc_chunkloc *loc, int64_t site_id) {
  for (int k = 0; k < loc->nsites; k++)
    if (loc->site[k] == site_id) return 1;
  return 0;
}

/* Replication factor in effect: the setting (default 2), at most m. */
static int s_replication(td_cluster *c, int m) {
  char v[64];
  int r = 2;
  if (tc_setting_get(c->db, "replication", v, sizeof v, NULL) == TR_OK) r = atoi(v);
  if (r < 1) r = 1;
  return r < m ? r : m;
}

int td_target(td_cluster *c) { return s_replication(c, c->nsites); }

int td_set(td_cluster *c, const char *name, const char *value, tr_err *err) {
  if (strcmp(name, "replication"))
    return tr_seterr(err, TR_ENAME, "unknown setting '%s' (settings: replication)", name);
  char *end;
  long k = strtol(value, &end, 10);
  if (*end || k < 1 || k > TC_MAX_REPLICAS)
    return tr_seterr(err, TR_EINVAL, "replication must be an integer from 1 to %d", TC_MAX_REPLICAS);
  int rc = tc_setting_set(c->db, name, value, err);
  if (rc) return rc;
  /* Chunks stored before may now have too few: te_maintain copies them. */
  c->repair = 1;
  if (k > c->nsites)
    td_notice(c, "replication = %ld is kept, but this database has %d worker%s: each chunk gets "
              "%d replica%s until more workers join", k, c->nsites, c->nsites == 1 ? "" : "s",
              c->nsites, c->nsites == 1 ? "" : "s");
  return TR_OK;
}

/* The live site that serves chunk loc of t (reads it for others, and
** drives the joins that keep t in place), or -1.  The catalog lists a
** chunk's holders by site id, so taking the first would put every chunk
** of a tensor held everywhere (replication = sites, the embedded
** default) on the lowest site, and every plan driven by it would run on
** one worker.  The holders take turns by the chunk's row of the grid
** instead: such a tensor is served row-block partitioned, the
** partitioning under which a product needs no partial sums. */
static int s_holder(const td_cluster *c, const tr_tensor *t, const tc_chunkloc *loc) {
  if (!loc->nsites) return -1;
  int64_t g0 = tr_grid(t, 0), per_row = g0 > 0 ? tr_nchunks(t) / g0 : 1;
  int64_t row = loc->lin / (per_row > 0 ? per_row : 1);
  for (int k = 0; k < loc->nsites; k++) {
    int s = s_site_index(c, loc->site[(row + k) % loc->nsites]);
    if (s >= 0 && c->sites[s].up) return s;
  }
  return -1;
}

/* The error for a chunk no live site holds: names tensor and chunk key. */
static int s_unreadable(const tr_tensor *t, const tc_chunkloc *loc, const char *why, tr_err *err) {
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


/* SYNC every chunk of locs on the sites holding it. */
static int s_sync(td_cluster *c, const tc_chunkloc *locs, int64_t n, tr_err *err) {
  s_phase ph;
  s_phase_init(&ph, c);
  int rc = TR_OK;
  for (int s = 0; s < c->nsites && !rc; s++) {
    tn_wbuf b = {0};
    uint32_t k = 0;
    for (int64_t i = 0; i < n; i++)
      for (int j = 0; j < locs[i].nsites; j++) k += locs[i].site[j] == c->sites[s].id;
    if (!k) continue;
    tn_put_u32(&b, k);
    for (int64_t i = 0; i < n; i++)
      for (int j = 0; j < locs[i].nsites; j++)
        if (locs[i].site[j] == c->sites[s].id) tn_put_u64(&b, locs[i].chunk_id);
    rc = s_request(&ph, s, TN_SYNC, &b, 0, NULL, NULL, NULL, err);
    tn_wbuf_free(&b);
  }
  if (!rc) rc = s_wait(&ph, err);
  s_phase_free(&ph);
  return rc;
}

/* After a commit: say when its chunks got fewer replicas than wanted
** (workers were down), and mark them for repair. */
static void s_note_replicas(td_cluster *c, const tr_tensor *meta, const tc_chunkloc *locs, int64_t n) {
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

/* Make a written version visible: sync, commit, drop the old version. */
static int s_commit(td_cluster *c, const tr_tensor *meta, tc_chunkloc *locs, int64_t n, tr_err *err) {
  uint64_t *old = NULL;
  int64_t nold = 0;
  int rc = s_sync(c, locs, n, err);
  if (!rc) rc = tc_commit_placed(c->db, meta, locs, n, NULL, &old, &nold, err);
  if (!rc) s_note_replicas(c, meta, locs, n);
  if (!rc) s_drop_ids(c, -1, old, nold);
  free(old);
  return rc;
}

/* ---- Replicas ----------------------------------------------------------- */

static int s_flush_sends(td_cluster *c, tn_wbuf *sends, uint32_t *nsend, int rc, tr_err *err);

/* A copy to make: chunk id from site index src to site index dst. */
typedef struct s_copy {
  uint64_t id;     /* chunk */
  uint64_t bytes;  /* its size */
  int src, dst;    /* site indexes */
} s_copy;

/* Forget site s's copy of chunk id: it failed its checksum there (the
** worker has set it aside).  The chunk then lacks a replica, which
** te_maintain restores, on s again if it can. */
static void s_forget_bad(td_cluster *c, int s, uint64_t id) {
  tr_err ignore;
  tc_replica_remove(c->db, c->sites[s].id, &id, 1, &ignore);
  s_note_lost(c, c->sites[s].id, id);
}

/* Make copies c[0..n): each source pushes its chunks to their
** destinations (SEND), the destinations make them durable (SYNC), and
** only then does the catalog record the new replicas.  A source whose
** copy turns out damaged is forgotten as a holder (the failure is
** returned; a later round copies from another). */
static int s_copy_chunks(td_cluster *c, const s_copy *cp, int64_t n, tr_err *err) {
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
    rc = s_flush_sends(c, sends, nsend, rc, err); /* frees sends, nsend */
  }
  if (rc == TR_ECORRUPT && c->bad_chunk) s_forget_bad(c, c->bad_site, c->bad_chunk);
  if (!rc) rc = s_sync(c, locs, n, err);
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
static int s_fix_bad(td_cluster *c, int s, uint64_t id, tr_err *err) {
  int64_t site[TC_MAX_REPLICAS];
  int n = 0, src = -1;
  s_forget_bad(c, s, id);
  int rc = tc_chunk_sites(c->db, id, site, &n, err);
  for (int k = 0; !rc && k < n && src < 0; k++) {
    int h = s_site_index(c, site[k]);
    if (h >= 0 && h != s && c->sites[h].up) src = h;
  }
  if (rc) return rc;
  if (src < 0)
    return tr_seterr(err, TR_ECORRUPT, "chunk %016llx: no other live worker holds a copy",
                     (unsigned long long)id);
  s_copy cp = {id, 0, src, s};
  return s_copy_chunks(c, &cp, 1, err);
}

#define S_REPAIR_BYTES ((uint64_t)256 << 20) /* copied per round of repair */

/* One round of restoring replication: chunks with fewer replicas than
** the setting (at most the live workers) get copies from a live holder on
** the live workers that lack them, spread by chunk.  Returns 1 if chunks
** are left for another round, 0 if none (chunks no live worker holds wait
** for a holder to return), or a TR_E* code. */
static int s_repair(td_cluster *c, tr_err *err) {
  int up[256], m = s_up_sites(c, up);
  tc_chunkref *refs = NULL;
  int64_t n = 0, nc = 0, i;
  if (m == 0) return 0;
  int target = s_replication(c, m), rc = tc_chunks_select(c->db, 0, target, &refs, &n, err);
  s_copy *cp = rc ? NULL : malloc(((size_t)n * TC_MAX_REPLICAS + 1) * sizeof *cp);
  uint64_t bytes = 0;
  if (!rc && !cp) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  if (c->nlost) qsort(c->lost, (size_t)c->nlost, sizeof *c->lost, s_cmp_lost);
  for (i = 0; !rc && i < n && bytes < S_REPAIR_BYTES; i++) {
    const tc_chunkloc *l = &refs[i].loc;
    int src = -1;
    for (int k = 0; k < l->nsites && src < 0; k++) {
      int h = s_site_index(c, l->site[(i + k) % l->nsites]);
      if (h >= 0 && c->sites[h].up) src = h;
    }
    /* The worker that lost a copy gets it back first; then by chunk. */
    int back = src >= 0 ? s_site_index(c, s_lost_on(c, l->chunk_id)) : -1;
    for (int u = -1, need = target - l->nsites; src >= 0 && u < m && need > 0; u++) {
      int d = u < 0 ? back : up[(i + u) % m];
      if (d < 0 || !c->sites[d].up || s_has(l, c->sites[d].id) || (u >= 0 && d == back)) continue;
      cp[nc++] = (s_copy){l->chunk_id, l->nbytes, src, d};
      bytes += l->nbytes;
      need--;
    }
  }
  if (!rc && nc) rc = s_copy_chunks(c, cp, nc, err);
  if (!rc && i == n) c->nlost = 0; /* every chunk looked at: the hints are spent */
  free(cp);
  free(refs);
  return rc ? rc : i < n;
}

int td_maintain(td_cluster *c, double budget_s, tr_err *err) {
  double end = tr_now() + budget_s;
  /* A returning worker is noticed by a ping (which then reconciles it);
  ** right after a statement, its own ping is recent enough. */
  if (tr_now() - c->last_ping >= S_IDLE_PING_S) s_ping(c);
  while (c->repair) {
    int rc = s_repair(c, err);
    if (rc < 0) return rc; /* stays set: tried again later */
    if (rc == 0) c->repair = 0;
    if (tr_now() >= end) break;
  }
  return c->repair;
}


/* ---- Adding and removing workers --------------------------------------- */

int td_worker_add(td_cluster *c, const char *ep, tr_err *err) {
  int rc = s_add_site(c, ep, err), s = -1;
  if (!rc) rc = s_hello_all(c, 5.0, err);
  for (int k = 0; k < c->nsites; k++)
    if (!strcmp(c->sites[k].ep, ep)) s = k;
  if (!rc && s >= 0 && !c->sites[s].up)
    td_notice(c, "worker %s is recorded but does not answer: it joins when it does", ep);
  /* What it holds of this database counts again (s_inventory adopts it). */
  if (!rc && s >= 0 && c->sites[s].up && !(rc = s_inventory(c, s, err))) {
    uint64_t *ids = NULL;
    int64_t n = 0;
    if (!tc_site_chunks(c->db, c->sites[s].id, &ids, &n, err) && n)
      td_notice(c, "worker %s holds %lld chunks of this database: they are kept as replicas", ep,
                (long long)n);
    free(ids);
  }
  /* Local workers are the default for a database with no other worker:
  ** once one is added, those holding nothing stop (the next open would
  ** not start them), and those holding chunks stay, and say so. */
  int nlocal = 0;
  for (int k = c->nsites - 1; !rc && s >= 0 && c->sites[s].pid <= 0 && k >= 0; k--) {
    if (c->sites[k].pid <= 0) continue;
    if (s_site_holds(c, c->sites[k].id)) {
      nlocal++;
      continue;
    }
    tr_err ignore;
    tc_site_remove(c->db, c->sites[k].ep, &ignore);
    s_site_drop(c, k);
    if (k < s) s--;
  }
  if (nlocal)
    td_notice(c, "the %d local workers keep their chunks and start with this database while "
              "they hold any; `.worker remove` of a local worker moves its chunks to the others",
              nlocal);
  c->repair = 1; /* chunks may now get the replicas they lack */
  return rc;
}

/* Plan the copies that removing site `gone` (index, or -1 if not
** connected) with catalog id `sid` needs: every chunk it holds gets, on the
** live workers left, the replicas it would lack (up to the setting, at
** least one).  A chunk whose only copies are on `gone` and cannot be read
** from it (it is down) or go nowhere (no other worker is up) is lost:
** *lost counts them and names their tensors. */
static int s_removal_copies(td_cluster *c, int gone, int64_t sid, s_copy **out, int64_t *nout,
                            int64_t *lost, char *names, size_t cap, tr_err *err) {
  int up[256], m = 0;
  tc_chunkref *refs = NULL;
  int64_t n = 0, nc = 0;
  *out = NULL;
  *nout = *lost = 0;
  names[0] = '\0';
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].up && s != gone && m < 256) up[m++] = s;
  int target = m ? s_replication(c, m) : 0, rc = tc_chunks_select(c->db, sid, 0, &refs, &n, err);
  s_copy *cp = rc ? NULL : malloc(((size_t)n * TC_MAX_REPLICAS + 1) * sizeof *cp);
  if (!rc && !cp) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int64_t i = 0; !rc && i < n; i++) {
    const tc_chunkloc *l = &refs[i].loc;
    int others = l->nsites - 1, src = gone >= 0 && c->sites[gone].up ? gone : -1;
    for (int k = 0; k < l->nsites; k++) {
      int h = s_site_index(c, l->site[k]);
      if (h >= 0 && h != gone && c->sites[h].up) src = h;
    }
    if (others == 0 && (src < 0 || !m)) {
      if (!strstr(names, refs[i].tensor) && strlen(names) + strlen(refs[i].tensor) + 3 < cap)
        snprintf(names + strlen(names), cap - strlen(names), "%s%s", names[0] ? ", " : "", refs[i].tensor);
      (*lost)++;
      continue;
    }
    for (int u = 0, need = target - others; src >= 0 && u < m && need > 0; u++) {
      int d = up[(i + u) % m];
      if (s_has(l, c->sites[d].id)) continue;
      cp[nc++] = (s_copy){l->chunk_id, l->nbytes, src, d};
      need--;
    }
  }
  free(refs);
  if (rc) {
    free(cp);
    return rc;
  }
  *out = cp;
  *nout = nc;
  return TR_OK;
}

int td_worker_remove(td_cluster *c, const char *ep, tr_err *err) {
  tc_site *rec = NULL;
  int nrec = 0, gone = -1, rc = tc_site_list(c->db, &rec, &nrec, err);
  int64_t sid = 0, lost = 0, nc = 0;
  s_copy *cp = NULL;
  char names[400];
  for (int i = 0; !rc && i < nrec; i++)
    if (!strcmp(rec[i].endpoint, ep)) sid = rec[i].id;
  free(rec);
  if (rc) return rc;
  if (!sid) return tr_seterr(err, TR_ENOTFOUND, "no such worker: %s", ep);
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].id == sid) gone = s;
  s_ping(c);
  if ((rc = s_removal_copies(c, gone, sid, &cp, &nc, &lost, names, sizeof names, err))) return rc;
  if (lost) {
    free(cp);
    return tr_seterr(err, TR_EINVAL,
                     "cannot remove worker %s: it holds the only copy of %lld chunks (of %s) and %s; "
                     "nothing was changed (start it again%s, or DROP those tensors first)",
                     ep, (long long)lost, names,
                     gone >= 0 && c->sites[gone].up ? "no other worker is up" : "it is down",
                     gone >= 0 && c->sites[gone].up ? " with another worker" : "");
  }
  if (nc && (rc = s_copy_chunks(c, cp, nc, err))) {
    free(cp);
    return tr_seterr(err, rc, "cannot remove worker %s: copying its chunks to the other workers "
                     "failed, and it stays: %.600s", ep, err->msg);
  }
  free(cp);
  /* Its copies of this database's chunks go from the catalog, then from it. */
  uint64_t *ids = NULL;
  int64_t nids = 0;
  if ((rc = tc_site_chunks(c->db, sid, &ids, &nids, err)) || (rc = tc_site_remove(c->db, ep, err))) {
    free(ids);
    return rc;
  }
  if (gone >= 0) {
    s_drop_ids(c, gone, ids, nids);
    s_site_drop(c, gone);
  }
  free(ids);
  td_notice(c, "worker %s removed; %lld cop%s of its chunks made on the other workers first", ep,
            (long long)nc, nc == 1 ? "y" : "ies");
  return TR_OK;
}

/* ---- Writing chunks from the coordinator (LOAD) ---------------------------- */

struct td_pwrite {
  td_cluster *c;         /* engine */
  tr_tensor meta;       /* the new version */
  tc_chunkloc *locs;    /* where each chunk goes */
  int up[256], m;       /* live sites */
  int r;                /* replication */
  s_phase ph;           /* PUTs in flight */
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
  s_ping(c);
  w->m = s_up_sites(c, w->up);
  if (!w->m) {
    free(w->locs);
    free(w);
    return tr_seterr(err, TR_EIO, "no worker is up");
  }
  w->r = s_replication(c, w->m);
  s_phase_init(&w->ph, c);
  *out = w;
  return TR_OK;
}

/* Store chunk lin (buf is copied) on its `replication` sites. */
int td_pwrite_chunk(td_pwrite *w, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
  tc_chunkloc *loc = &w->locs[lin];
  loc->lin = lin;
  loc->chunk_id = tc_new_chunk_id();
  loc->nbytes = bytes;
  loc->checksum = XXH3_64bits(buf, bytes); /* verified by the worker on arrival */
  loc->nsites = w->r;
  tn_wbuf b = {0};
  tn_put_u32(&b, 1);
  tn_chunk c = {loc->chunk_id, (uint8_t)w->meta.dtype, bytes, loc->checksum};
  tn_put_chunk(&b, &c);
  int rc = TR_OK;
  for (int k = 0; k < w->r && !rc; k++) {
    int s = w->up[(lin + k) % w->m];
    loc->site[k] = w->c->sites[s].id;
    void *data = (void *)buf;
    rc = s_request(&w->ph, s, TN_PUT, &b, 1, &data, &bytes, NULL, err);
    w->c->sites[s].floats_in += (int64_t)(bytes / tr_dtype_size(w->meta.dtype));
  }
  tn_wbuf_free(&b);
  w->inflight += bytes * (size_t)w->r;
  if (!rc && w->inflight > S_INFLIGHT_BYTES) {
    rc = s_wait(&w->ph, err);
    s_phase_free(&w->ph);
    s_phase_init(&w->ph, w->c);
    w->inflight = 0;
  }
  return rc;
}

int td_pwrite_commit(td_pwrite *w, tr_err *err) {
  int rc = s_wait(&w->ph, err);
  s_phase_free(&w->ph);
  s_phase_init(&w->ph, w->c);
  if (!rc) rc = s_commit(w->c, &w->meta, w->locs, tr_nchunks(&w->meta), err);
  return rc;
}

void td_pwrite_free(td_pwrite **pw) {
  if (!pw || !*pw) return;
  s_phase_free(&(*pw)->ph);
  free((*pw)->locs);
  free(*pw);
  *pw = NULL;
}

/* ---- Reading chunks to the coordinator (SAVE, PRINT) ---------------------- */

/* Check reply k of ph as chunk loc of t; TR_OK and data/len if good. */
static int s_check_data(td_cluster *c, s_phase *ph, int k, const tr_tensor *t, const tc_chunkloc *loc,
                        const void **data, size_t *len, char *why, size_t cap) {
  s_out *o = &ph->out[k];
  if (o->done != 1) {
    snprintf(why, cap, "worker %s is down", c->sites[o->site].ep);
    return TR_EIO;
  }
  tn_rbuf r;
  s_reply_body(ph, k, &r);
  if (o->reply.type == TN_ERROR) {
    char msg[512];
    int code;
    uint64_t chunk;
    tn_get_error(&o->reply, &code, &chunk, msg, sizeof msg);
    snprintf(why, cap, "worker %s: %s", c->sites[o->site].ep, msg);
    if (code == TR_ECORRUPT && chunk == loc->chunk_id) return TR_ECORRUPT;
    return TR_EIO;
  }
  tn_chunk ck;
  (void)tn_get_u32(&r);
  tn_get_chunk(&r, &ck);
  *data = tn_in_data(&o->reply, 0, len);
  if (o->reply.type != TN_DATA || tn_rbuf_ok(&r) || !*data || *len != loc->nbytes ||
      ck.id != loc->chunk_id || ck.checksum != loc->checksum || XXH3_64bits(*data, *len) != ck.checksum) {
    snprintf(why, cap, "worker %s sent a copy that does not match its checksum", c->sites[o->site].ep);
    return TR_ECORRUPT;
  }
  (void)t;
  return TR_OK;
}

int td_pread(td_cluster *c, const tr_tensor *t, const int64_t *lins, int64_t n,
             int (*fn)(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err),
             void *ctx, tr_err *err) {
  tc_chunkloc *locs = NULL;
  int64_t nl = 0;
  int rc = tc_chunk_locations(c->db, t, &locs, &nl, err);
  if (rc) return rc;
  s_ping(c);
  for (int64_t i0 = 0; i0 < n && !rc; i0 += 64) {
    int64_t i1 = i0 + 64 < n ? i0 + 64 : n;
    /* try[i]: replicas of chunk lins[i] tried so far */
    int tried[64] = {0}, ok[64] = {0};
    char why[64][TC_ENDPOINT_MAX + 900]; /* per chunk: why its last try failed */
    for (int k = 0; k < 64; k++) why[k][0] = '\0';
    for (int round = 0; !rc && round < TC_MAX_REPLICAS; round++) {
      s_phase ph;
      int64_t which[64];
      int nreq = 0;
      s_phase_init(&ph, c);
      for (int64_t i = i0; i < i1 && !rc; i++) {
        int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
        if (ok[i - i0]) continue;
        tr_key_from_linear(t, lins[i], key);
        size_t bytes = (size_t)tr_chunk_extent(t, key, ext) * tr_dtype_size(t->dtype);
        if (!nl) { /* declared, never filled: zeros */
          void *z = calloc(1, bytes ? bytes : 1);
          rc = z ? fn(ctx, lins[i], z, bytes, err) : tr_seterr(err, TR_ENOMEM, "out of memory");
          free(z);
          ok[i - i0] = 1;
          continue;
        }
        const tc_chunkloc *loc = &locs[lins[i]];
        int s = -1;
        while (tried[i - i0] < loc->nsites && s < 0) {
          int cand = s_site_index(c, loc->site[tried[i - i0]++]);
          if (cand >= 0 && c->sites[cand].up) s = cand;
        }
        if (s < 0) {
          rc = s_unreadable(t, loc, tried[i - i0] && why[i - i0][0] ? why[i - i0] : NULL, err);
          break;
        }
        tn_wbuf b = {0};
        tn_put_u32(&b, 1);
        tn_put_u64(&b, loc->chunk_id);
        rc = s_request(&ph, s, TN_GET, &b, 0, NULL, NULL, NULL, err);
        tn_wbuf_free(&b);
        which[nreq++] = i;
      }
      if (!rc && nreq) rc = s_wait_ex(&ph, 1, err);
      int nbad = 0, bad_site[64];
      uint64_t bad_id[64];
      for (int k = 0; !rc && k < nreq; k++) {
        int64_t i = which[k], lin = lins[i];
        const void *data;
        size_t len;
        int why_rc = s_check_data(c, &ph, k, t, &locs[lin], &data, &len, why[i - i0], sizeof why[i - i0]);
        if (why_rc == TR_ECORRUPT && ph.out[k].done == 1 && ph.out[k].reply.type == TN_ERROR) {
          bad_site[nbad] = ph.out[k].site;
          bad_id[nbad++] = locs[lin].chunk_id;
        }
        if (why_rc) continue; /* next round tries the next replica */
        c->sites[ph.out[k].site].floats_out += (int64_t)(len / tr_dtype_size(t->dtype));
        ok[i - i0] = 1;
        rc = fn(ctx, lin, data, len, err);
      }
      s_phase_free(&ph);
      /* A copy the worker found damaged: repaired from a good one now
      ** (after the phase: phases do not nest). */
      for (int k = 0; k < nbad; k++) {
        tr_err ignore;
        s_fix_bad(c, bad_site[k], bad_id[k], &ignore);
      }
      if (!nreq) break;
    }
  }
  free(locs);
  return rc;
}

/* ---- Running plans ---------------------------------------------------------- */

/* Where the chunks of one plan relation are during a run. */
typedef struct s_prel {
  tc_chunkloc *locs;   /* per chunk: id, size, checksum, sites (catalog ids) */
  int64_t n;           /* chunks */
  uint8_t *copy;       /* [site * n + lin]: a transient copy was sent there */
  int made;            /* chunks made by this run (temporaries, output) */
  int committed;       /* an output already made visible */
} s_prel;

/* One IA operator as measured, for EXPLAIN ANALYZE. */
#define S_OP_SITES 64 /* sites broken down per operator */
typedef struct s_opstat {
  char op[16];          /* bcast, shuffle, local_filter, local_map, local_join,
                           local_agg, replicate, commit */
  char what[96];        /* relation, and for fused steps what they do */
  int fused;            /* runs inside the local_join task: not timed apart */
  int64_t floats;       /* moved */
  int64_t tasks;        /* tasks run */
  double seconds;       /* wall time of the phase */
  int64_t site_in[S_OP_SITES], site_out[S_OP_SITES]; /* floats per site */
  int64_t site_tasks[S_OP_SITES];                    /* tasks per site */
  double site_s[S_OP_SITES];                         /* task time per site */
} s_opstat;

struct td_run {
  td_cluster *c;                /* the coordinator */
  ta_plan *p;                   /* plan */
  int run;                      /* 0: only explained, nothing runs */
  int cleaned;                  /* temporaries dropped (td_run_exec ran) */
  double t0, t1;                /* when td_run_begin started, when the run ended */
  s_prel rel[TA_MAX_RELS];      /* placement of every relation */
  to_placed pl[TA_MAX_RELS];    /* the same as site-position masks */
  int up[256], m;               /* live sites */
  s_opstat ops[TA_MAX_NODES * (3 * TK_MAX_INPUTS + 4) + 2]; /* measured operators */
  int nops;                     /* used */
  uint64_t *drop;               /* ids to drop at the end (per site in drop_site) */
  int *drop_site;               /* site of each (-1: every site) */
  int64_t ndrop, capdrop;       /* count, allocated */
};
typedef struct td_run s_run;

static s_opstat *s_op(s_run *R, const char *op, const char *what, int fused) {
  s_opstat *os = &R->ops[R->nops++];
  memset(os, 0, sizeof *os);
  snprintf(os->op, sizeof os->op, "%s", op);
  snprintf(os->what, sizeof os->what, "%s", what);
  os->fused = fused;
  return os;
}

/* Count floats moved from site src to site dst by operator os. */
static void s_moved(s_run *R, s_opstat *os, int src, int dst, int64_t fl) {
  R->c->sites[src].floats_out += fl;
  R->c->sites[dst].floats_in += fl;
  if (!os) return;
  os->floats += fl;
  if (src < S_OP_SITES) os->site_out[src] += fl;
  if (dst < S_OP_SITES) os->site_in[dst] += fl;
}

static int s_note_drop(s_run *R, int site, uint64_t id) {
  if (R->ndrop == R->capdrop) {
    int64_t cap = R->capdrop ? R->capdrop * 2 : 256;
    uint64_t *d = realloc(R->drop, sizeof *d * (size_t)cap);
    int *ds = d ? realloc(R->drop_site, sizeof *ds * (size_t)cap) : NULL;
    if (d) R->drop = d;
    if (!ds) return TR_ENOMEM;
    R->drop_site = ds;
    R->capdrop = cap;
  }
  R->drop[R->ndrop] = id;
  R->drop_site[R->ndrop++] = site;
  return TR_OK;
}


/* Replicas of what site position u makes: the next r-1 live sites.  The
** worker pushes each output chunk to them as soon as it is made, so
** replication overlaps the computation. */
static void s_task_reps(s_run *R, int u, tx_task *task) {
  int r = s_replication(R->c, R->m);
  task->nrep = r - 1;
  for (int j = 1; j < r; j++)
    snprintf(task->rep[j - 1], sizeof task->rep[j - 1], "%s", R->c->sites[R->up[(u + j) % R->m]].ep);
}

/* Record the replicas a task's pushes made, and count their transfer. */
static void s_note_reps(s_run *R, int u, tc_chunkloc *loc, tr_dtype dt, s_opstat *os) {
  td_cluster *c = R->c;
  int r = s_replication(c, R->m);
  int64_t fl = (int64_t)(loc->nbytes / tr_dtype_size(dt));
  for (int j = 1; j < r; j++) {
    int dst = R->up[(u + j) % R->m];
    loc->site[loc->nsites++] = c->sites[dst].id;
    s_moved(R, os, R->up[u], dst, fl);
  }
}

/* Apply the TASK_OK replies of ph to the chunks of pr: sizes, checksums,
** and with `replicate` the replicas each worker pushed (counted in rs). */
static void s_task_results(s_run *R, s_phase *ph, s_prel *pr, tr_dtype dt, int replicate,
                           s_opstat *rs, s_opstat *js) {
  td_cluster *c = R->c;
  for (int i = 0; i < ph->n; i++) {
    tn_rbuf r;
    int u = 0;
    while (R->up[u] != ph->out[i].site) u++;
    s_reply_body(ph, i, &r);
    uint32_t cnt = tn_get_count(&r, 25);
    int64_t hint = 0;
    for (uint32_t j = 0; j < cnt; j++) {
      tn_chunk ck;
      tn_get_chunk(&r, &ck);
      /* replies list chunks in task order: search on from the last one */
      for (int64_t k = 0; pr && k < pr->n; k++) {
        tc_chunkloc *loc = &pr->locs[(hint + k) % pr->n];
        if (loc->chunk_id != ck.id) continue;
        loc->nbytes = ck.nbytes;
        loc->checksum = ck.checksum;
        if (replicate) s_note_reps(R, u, loc, dt, rs);
        hint = (hint + k + 1) % pr->n;
        break;
      }
    }
    double secs = tn_get_f64(&r);
    int st = ph->out[i].site;
    tn_get_str(&r, c->sites[st].kernels, sizeof c->sites[st].kernels);
    c->sites[st].h2d += tn_get_u64(&r);
    c->sites[st].d2h += tn_get_u64(&r);
    c->sites[st].copy_s += tn_get_f64(&r);
    c->sites[st].busy_s += secs;
    c->sites[st].tasks++;
    if (js) {
      js->tasks++;
      if (st < S_OP_SITES) {
        js->site_tasks[st]++;
        js->site_s[st] += secs;
      }
    }
  }
}

/* Room in task t for nin input and nout output chunk entries. */
static int s_task_lists(tx_task *t, int64_t nin, int64_t nout, tr_err *err) {
  t->in_op = calloc((size_t)nin + 1, sizeof *t->in_op);
  t->in_lin = calloc((size_t)nin + 1, sizeof *t->in_lin);
  t->in_id = calloc((size_t)nin + 1, sizeof *t->in_id);
  t->out_lin = calloc((size_t)nout + 1, sizeof *t->out_lin);
  t->out_id = calloc((size_t)nout + 1, sizeof *t->out_id);
  if (t->in_op && t->in_lin && t->in_id && t->out_lin && t->out_id) return TR_OK;
  tx_task_free(t);
  return tr_seterr(err, TR_ENOMEM, "out of memory");
}

/* Send task t to site position u if it makes anything (with `reps`, its
** outputs are also pushed to the replica sites); frees t's lists. */
static int s_task_submit(s_run *R, s_phase *ph, tx_task *t, int reps, int u, tr_err *err) {
  int rc = TR_OK;
  /* What is not replicated is not committed either: partials, a plan's
  ** intermediates, zeros standing in for declared-only tensors. */
  if (reps)
    s_task_reps(R, u, t);
  else
    t->scratch = 1;
  if (t->nout) {
    tn_wbuf b = {0};
    tx_task_encode(t, &b);
    rc = s_request(ph, R->up[u], TN_TASK, &b, 0, NULL, NULL, NULL, err);
    tn_wbuf_free(&b);
  }
  tx_task_free(t);
  return rc;
}

/* Run FILL tasks: chunk lin of t on site up[lin % m]. */
static int s_fill_tasks(s_run *R, const tr_tensor *t, const tx_fill *f, s_prel *pr, int replicate,
                        tr_err *err) {
  td_cluster *c = R->c;
  int64_t n = tr_nchunks(t);
  s_phase ph;
  int rc = TR_OK;
  pr->n = n;
  pr->made = 1;
  if (!(pr->locs = calloc((size_t)n + 1, sizeof *pr->locs))) return tr_seterr(err, TR_ENOMEM, "out of memory");
  s_phase_init(&ph, c);
  for (int k = 0; k < R->m && !rc; k++) {
    tx_task task;
    memset(&task, 0, sizeof task);
    task.kind = TX_TASK_FILL;
    task.f = *f;
    task.out_meta = *t;
    if ((rc = s_task_lists(&task, 0, n / R->m + 1, err))) break;
    for (int64_t lin = k; lin < n; lin += R->m) {
      pr->locs[lin].lin = lin;
      pr->locs[lin].chunk_id = tc_new_chunk_id();
      pr->locs[lin].nsites = 1;
      pr->locs[lin].site[0] = c->sites[R->up[k]].id;
      task.out_lin[task.nout] = lin;
      task.out_id[task.nout++] = pr->locs[lin].chunk_id;
    }
    rc = s_task_submit(R, &ph, &task, replicate, k, err);
  }
  if (!rc) rc = s_wait(&ph, err);
  if (!rc) s_task_results(R, &ph, pr, t->dtype, replicate, NULL, NULL);
  s_phase_free(&ph);
  return rc;
}

/* Send the SEND batches (entries {u64 id, str peer} per source site) and
** wait for all of them; frees the batches. */
static int s_flush_sends(td_cluster *c, tn_wbuf *sends, uint32_t *nsend, int rc, tr_err *err) {
  s_phase ph;
  s_phase_init(&ph, c);
  for (int s = 0; !rc && s < c->nsites; s++)
    if (nsend[s]) {
      tn_wbuf b = {0};
      tn_put_u32(&b, nsend[s]);
      if (sends[s].n && !b.oom) {
        uint8_t *np = realloc(b.p, b.n + sends[s].n);
        if (np) {
          memcpy(np + b.n, sends[s].p, sends[s].n);
          b.p = np;
          b.n += sends[s].n;
          b.cap = b.n;
        } else {
          b.oom = 1;
        }
      }
      rc = s_request(&ph, s, TN_SEND, &b, 0, NULL, NULL, NULL, err);
      tn_wbuf_free(&b);
    }
  if (!rc) rc = s_wait(&ph, err);
  s_phase_free(&ph);
  for (int s = 0; sends && s < c->nsites; s++) tn_wbuf_free(&sends[s]);
  free(sends);
  free(nsend);
  return rc;
}

/* Send the chunks of pr that `need` says must reach sites not holding
** them (from a live holder); each send counted in os. */
static int s_plan_sends(s_run *R, s_prel *pr, const tr_tensor *t, const uint64_t *need,
                        s_opstat *os, tn_wbuf *sends, uint32_t *nsend, tr_err *err) {
  td_cluster *c = R->c;
  if (!pr->copy && !(pr->copy = calloc((size_t)c->nsites * (size_t)pr->n + 1, 1)))
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int u = 0; u < R->m; u++) {
    int su = R->up[u];
    for (int64_t lin = 0; lin < pr->n; lin++) {
      if (!(need[lin] & (1ull << u))) continue;
      tc_chunkloc *loc = &pr->locs[lin];
      if (s_has(loc, c->sites[su].id) || pr->copy[(size_t)su * (size_t)pr->n + (size_t)lin]) continue;
      int src = s_holder(c, t, loc);
      if (src < 0) return s_unreadable(t, loc, NULL, err);
      pr->copy[(size_t)su * (size_t)pr->n + (size_t)lin] = 1;
      tn_put_u64(&sends[src], loc->chunk_id);
      tn_put_str(&sends[src], c->sites[su].ep);
      nsend[src]++;
      s_moved(R, os, src, su, (int64_t)(loc->nbytes / tr_dtype_size(t->dtype)));
      if (s_note_drop(R, su, loc->chunk_id)) return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
  }
  return TR_OK;
}

/* A node task for site position u: node n over the
** chunks of each operand that `need` sends to u, making the output chunks
** `mine` selects with ids ids[lin]. */
static int s_send_task(s_run *R, s_phase *ph, const ta_node *n, const tr_tensor *const *in_meta,
                       s_prel *const *in, uint64_t *const *need, const tr_tensor *om, int64_t nout,
                       const uint8_t *mine, const uint64_t *ids, int reps, int u, tr_err *err) {
  tx_task task;
  int rc;
  memset(&task, 0, sizeof task);
  task.kind = TX_TASK_NODE;
  task.node = *n;
  task.out_meta = *om;
  int64_t cap_in = 0;
  for (int i = 0; i < n->ninputs; i++) {
    task.in_meta[i] = *in_meta[i];
    cap_in += in[i]->n;
  }
  if ((rc = s_task_lists(&task, cap_in, nout, err))) return rc;
  for (int i = 0; i < n->ninputs; i++)
    for (int64_t lin = 0; lin < in[i]->n; lin++)
      if (need[i][lin] & (1ull << u)) {
        task.in_op[task.nin] = i;
        task.in_lin[task.nin] = lin;
        task.in_id[task.nin++] = in[i]->locs[lin].chunk_id;
      }
  for (int64_t lin = 0; lin < nout; lin++)
    if (mine[lin]) {
      task.out_lin[task.nout] = lin;
      task.out_id[task.nout++] = ids[lin];
    }
  return s_task_submit(R, ph, &task, reps, u, err);
}

/* The second phase of a two-phase aggregation: each partial (pids, one
** per output chunk and site that made one) goes to its chunk's owner, and
** combine tasks there fold them (and apply the node's transform). */
static int s_run_combine(s_run *R, int k, const to_moves *mv, const uint64_t *pids, int final, tr_err *err) {
  td_cluster *c = R->c;
  const ta_node *n = &R->p->nodes[k];
  const tr_tensor *om = &R->p->rels[n->out].meta;
  s_prel *po = &R->rel[n->out];
  int64_t nout = tr_nchunks(om);
  int m = R->m, rc = TR_OK;
  tn_wbuf *sends = calloc((size_t)c->nsites, sizeof *sends);
  uint32_t *nsend = calloc((size_t)c->nsites, sizeof *nsend);
  if (!sends || !nsend) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  double t0 = tr_now();
  s_opstat *ss = rc ? NULL : s_op(R, "shuffle", "partials", 0);
  if (ss) snprintf(ss->what, sizeof ss->what, "%s (partials)", om->name);
  for (int64_t lin = 0; !rc && lin < nout; lin++) {
    int own = R->up[mv->owner[lin]];
    for (int u = 0; u < m; u++) {
      if (!((mv->osites[lin] >> u) & 1)) continue;
      uint64_t id = pids[(size_t)lin * (size_t)m + (size_t)u];
      if (R->up[u] == own) continue;
      tn_put_u64(&sends[R->up[u]], id);
      tn_put_str(&sends[R->up[u]], c->sites[own].ep);
      nsend[R->up[u]]++;
      int64_t kk[TR_MAX_RANK], ext[TR_MAX_RANK];
      tr_key_from_linear(om, lin, kk);
      s_moved(R, ss, R->up[u], own, tr_chunk_extent(om, kk, ext));
    }
  }
  rc = s_flush_sends(c, sends, nsend, rc, err); /* frees sends, nsend */
  if (ss) ss->seconds = tr_now() - t0;
  /* Combine tasks: operand 0 is the partials relation, one entry per
  ** partial (several per output chunk). */
  t0 = tr_now();
  s_opstat *cs = rc ? NULL : s_op(R, "local_agg", om->name, 0);
  if (cs) snprintf(cs->what, sizeof cs->what, "%s (combine partials%s)", om->name, n->post.n ? ", transform" : "");
  s_opstat *rs = !rc && final && s_replication(c, m) > 1 ? s_op(R, "replicate", om->name, 0) : NULL;
  s_phase ph;
  s_phase_init(&ph, c);
  for (int u = 0; !rc && u < m; u++) {
    tx_task task;
    memset(&task, 0, sizeof task);
    task.kind = TX_TASK_COMBINE;
    task.node = *n;
    task.node.drive = -1;
    task.node.ninputs = 1;
    task.node.in[0].rel = n->out;
    task.node.in[0].rank = om->rank;
    for (int d = 0; d < om->rank; d++) task.node.in[0].label[d] = d;
    task.node.nlabels = task.node.nout = om->rank;
    task.node.gemm = 0;
    task.node.prog.n = 1;
    task.node.prog.code[0].op = TK_OP_INPUT;
    task.node.prog.code[0].arg = 0;
    task.in_meta[0] = *om;
    task.out_meta = *om;
    if ((rc = s_task_lists(&task, nout * m, nout, err))) break;
    for (int64_t lin = 0; lin < nout; lin++) {
      if (mv->owner[lin] != u) continue;
      for (int v = 0; v < m; v++)
        if ((mv->osites[lin] >> v) & 1) {
          task.in_op[task.nin] = 0;
          task.in_lin[task.nin] = lin;
          task.in_id[task.nin++] = pids[(size_t)lin * (size_t)m + (size_t)v];
        }
      task.out_lin[task.nout] = lin;
      task.out_id[task.nout++] = po->locs[lin].chunk_id;
    }
    rc = s_task_submit(R, &ph, &task, final, u, err);
  }
  if (!rc) rc = s_wait(&ph, err);
  if (!rc) s_task_results(R, &ph, po, om->dtype, final, rs, cs);
  s_phase_free(&ph);
  if (cs) cs->seconds = tr_now() - t0;
  if (rs) rs->seconds = cs ? cs->seconds : 0;
  return rc;
}

/* Run node k as the optimizer chose: move operand chunks where the
** choice needs them (BCAST, SHUF), one fused join/aggregate/map task per
** site, and for a two-phase aggregation a shuffle of the partials to
** their owners and a combine task there. */
static int s_run_node(s_run *R, int k, const to_choice *ch, const to_moves *moves, tr_err *err) {
  td_cluster *c = R->c;
  ta_plan *p = R->p;
  ta_node *n = &p->nodes[k];
  const tr_tensor *om = &p->rels[n->out].meta;
  s_prel *po = &R->rel[n->out];
  int final = p->rels[n->out].kind == TA_REL_OUTPUT;
  int64_t nout = tr_nchunks(om);
  int m = R->m, rc = TR_OK;
  po->n = nout;
  po->made = 1;
  uint64_t *pids = calloc((size_t)nout * (size_t)m + 1, sizeof *pids); /* partial ids */
  uint8_t *mine = calloc((size_t)nout + 1, 1);
  uint64_t *ids = calloc((size_t)nout + 1, sizeof *ids);
  tn_wbuf *sends = calloc((size_t)c->nsites, sizeof *sends);
  uint32_t *nsend = calloc((size_t)c->nsites, sizeof *nsend);
  if (!(po->locs = calloc((size_t)nout + 1, sizeof *po->locs)) || !pids || !mine || !ids || !sends || !nsend) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int64_t lin = 0; lin < nout; lin++) {
    po->locs[lin].lin = lin;
    po->locs[lin].chunk_id = tc_new_chunk_id();
    po->locs[lin].nsites = 1;
    po->locs[lin].site[0] = c->sites[R->up[moves->owner[lin]]].id;
  }
  /* The moves of the operands. */
  double t0 = tr_now();
  int opbase = R->nops;
  const tr_tensor *in_meta[TK_MAX_INPUTS];
  s_prel *in[TK_MAX_INPUTS];
  for (int i = 0; !rc && i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    const tr_tensor *it = &p->rels[o->rel].meta;
    int diag = 0, rechunk = 0;
    in_meta[i] = it;
    in[i] = &R->rel[o->rel];
    for (int d = 0; d < o->rank; d++) {
      rechunk |= it->chunk[d] != n->chunk[o->label[d]];
      for (int d2 = d + 1; d2 < o->rank; d2++) diag |= o->label[d] == o->label[d2];
    }
    char what[96];
    s_opstat *os = NULL;
    if (ch->mv[i] != TO_MV_KEEP) os = s_op(R, ch->mv[i] == TO_MV_BCAST ? "bcast" : "shuffle", it->name, 0);
    snprintf(what, sizeof what, "%s (diagonal keys)", it->name);
    if (diag) s_op(R, "local_filter", what, 1);
    snprintf(what, sizeof what, "%s (re-chunk: tile + concat)", it->name);
    if (rechunk) s_op(R, "local_map", what, 1);
    rc = s_plan_sends(R, in[i], it, moves->need[i], os, sends, nsend, err);
  }
  rc = s_flush_sends(c, sends, nsend, rc, err);
  sends = NULL;
  nsend = NULL;
  for (int i = opbase; i < R->nops; i++)
    if (!R->ops[i].fused) R->ops[i].seconds = tr_now() - t0;
  /* The fused local join + aggregation + map: one task per site. */
  t0 = tr_now();
  s_opstat *js = s_op(R, "local_join", om->name, 0);
  char what[96];
  snprintf(what, sizeof what, "%s (%s%s)", om->name,
           n->agg == TK_AGG_MAX ? "MAX" : n->agg == TK_AGG_MIN ? "MIN" : "SUM",
           ch->twophase ? ", partial" : "");
  if (n->agg != TK_AGG_NONE) s_op(R, "local_agg", what, 1);
  snprintf(what, sizeof what, "%s (fused transform)", om->name);
  if (n->post.n && !ch->twophase) s_op(R, "local_map", what, 1);
  s_opstat *rs = final && !ch->twophase && s_replication(c, m) > 1 ? s_op(R, "replicate", om->name, 0) : NULL;
  ta_node tn = *n;
  tn.drive = ch->drive;
  if (ch->twophase) tn.post.n = 0;
  s_phase ph;
  s_phase_init(&ph, c);
  for (int u = 0; !rc && u < m; u++) {
    for (int64_t lin = 0; lin < nout; lin++) {
      mine[lin] = (moves->osites[lin] >> u) & 1;
      ids[lin] = ch->twophase ? (pids[(size_t)lin * (size_t)m + (size_t)u] = tc_new_chunk_id())
                             : po->locs[lin].chunk_id;
      /* partials go when the run ends, even if it fails before combining */
      if (ch->twophase && mine[lin] && s_note_drop(R, -1, ids[lin]))
        rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    }
    if (!rc)
      rc = s_send_task(R, &ph, &tn, in_meta, in, moves->need, om, nout, mine, ids,
                       final && !ch->twophase, u, err);
  }
  if (!rc) rc = s_wait(&ph, err);
  if (!rc && !ch->twophase) s_task_results(R, &ph, po, om->dtype, final, rs, js);
  if (!rc && ch->twophase) s_task_results(R, &ph, NULL, om->dtype, 0, NULL, js);
  s_phase_free(&ph);
  js->seconds = tr_now() - t0;
  if (rs) rs->seconds = js->seconds; /* overlapped with the join */
  if (!rc && ch->twophase) rc = s_run_combine(R, k, moves, pids, final, err);
done:
  if (sends)
    for (int s2 = 0; s2 < c->nsites; s2++) tn_wbuf_free(&sends[s2]);
  free(sends);
  free(nsend);
  free(pids);
  free(mine);
  free(ids);
  return rc;
}

/* The error for damaged chunk id that could not be repaired: names the
** tensor and chunk it belongs to, keeping the worker's message. */
static int s_name_bad(s_run *R, uint64_t id, tr_err *err) {
  for (int r = 0; r < R->p->nrels; r++)
    for (int64_t lin = 0; R->rel[r].locs && lin < R->rel[r].n; lin++)
      if (R->rel[r].locs[lin].chunk_id == id) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        s_unreadable(&R->p->rels[r].meta, &R->rel[r].locs[lin], why, err);
        return TR_ECORRUPT;
      }
  return TR_ECORRUPT;
}

/* Run node k; when a task or a move meets a damaged copy of a stored
** chunk (a checksum failure that names it), that copy is repaired from a
** good replica and the node runs again: what the failed attempt made is
** dropped, and the copies it sent are sent again.  Each attempt repairs
** one more copy, so at most one per input chunk is needed. */
static int s_run_node_safe(s_run *R, int k, const to_choice *ch, const to_moves *moves, tr_err *err) {
  td_cluster *c = R->c;
  const ta_node *n = &R->p->nodes[k];
  int64_t attempts = 1;
  for (int i = 0; i < n->ninputs; i++) attempts += R->rel[n->in[i].rel].n;
  for (int64_t attempt = 1;; attempt++) {
    c->bad_chunk = 0;
    int rc = s_run_node(R, k, ch, moves, err);
    if (rc != TR_ECORRUPT || !c->bad_chunk || attempt >= attempts) return rc;
    int site = c->bad_site;
    uint64_t id = c->bad_chunk;
    s_prel *po = &R->rel[n->out];
    for (int64_t lin = 0; po->locs && lin < po->n; lin++)
      if (po->locs[lin].chunk_id) s_note_drop(R, -1, po->locs[lin].chunk_id);
    free(po->locs);
    po->locs = NULL;
    for (int i = 0; i < n->ninputs; i++) {
      free(R->rel[n->in[i].rel].copy);
      R->rel[n->in[i].rel].copy = NULL;
    }
    tr_err ferr;
    if (s_fix_bad(c, site, id, &ferr)) return s_name_bad(R, id, err);
  }
}

/* EXPLAIN ANALYZE output, text or JSON. */
static char *s_analyze_text(const s_run *R, const char *tra, double elapsed, int json) {
  const td_cluster *c = R->c;
  size_t cap = 8192 + (size_t)R->nops * (512 + (size_t)c->nsites * 200) + (size_t)c->nsites * 512 +
               (tra ? strlen(tra) * 2 : 0);
  char *out = malloc(cap);
  size_t o = 0;
  int64_t total = 0;
  int ns = c->nsites < S_OP_SITES ? c->nsites : S_OP_SITES;
  if (!out) return NULL;
  for (int i = 0; i < R->nops; i++) total += R->ops[i].floats;
#define PUT(...) o += (size_t)snprintf(out + o, o < cap ? cap - o : 0, __VA_ARGS__)
  if (json) {
    PUT("\"elapsed_s\": %.6f, \"measured_transfer_floats\": %lld, \"operators\": [", elapsed,
        (long long)total);
    for (int i = 0; i < R->nops; i++) {
      const s_opstat *op = &R->ops[i];
      PUT("%s{\"op\": \"%s\", \"relation\": \"%s\", \"fused\": %s, \"floats\": %lld, "
          "\"tasks\": %lld, \"time_s\": %.6f, \"per_site\": [",
          i ? ", " : "", op->op, op->what, op->fused ? "true" : "false", (long long)op->floats,
          (long long)op->tasks, op->seconds);
      for (int s = 0; s < ns; s++)
        PUT("%s{\"site\": %d, \"floats_in\": %lld, \"floats_out\": %lld, \"tasks\": %lld, "
            "\"time_s\": %.6f}",
            s ? ", " : "", s, (long long)op->site_in[s], (long long)op->site_out[s],
            (long long)op->site_tasks[s], op->site_s[s]);
      PUT("]}");
    }
    PUT("], \"per_site\": [");
    for (int s = 0; s < c->nsites; s++)
      PUT("%s{\"site\": %d, \"endpoint\": \"%s\", \"state\": \"%s\", \"tasks\": %lld, \"floats_in\": %lld, "
          "\"floats_out\": %lld, \"task_s\": %.6f, \"kernels\": \"%s\", \"gpu_h2d_bytes\": %llu, "
          "\"gpu_d2h_bytes\": %llu, \"gpu_copy_s\": %.6f}",
          s ? ", " : "", s, c->sites[s].ep, c->sites[s].up ? "up" : "down", (long long)c->sites[s].tasks,
          (long long)c->sites[s].floats_in, (long long)c->sites[s].floats_out, c->sites[s].busy_s,
          c->sites[s].kernels, (unsigned long long)c->sites[s].h2d,
          (unsigned long long)c->sites[s].d2h, c->sites[s].copy_s);
    PUT("]");
  } else {
    PUT("%s", tra ? tra : "");
    PUT("IA operators run (fused ones run inside the local_join task):\n");
    for (int i = 0; i < R->nops; i++) {
      const s_opstat *op = &R->ops[i];
      PUT("  %-12s %-34s", op->op, op->what);
      if (op->fused) {
        PUT(" fused\n");
        continue;
      }
      PUT(" floats moved %12lld  tasks %4lld  time %.3f s\n", (long long)op->floats,
          (long long)op->tasks, op->seconds);
      for (int s = 0; s < ns; s++)
        if (op->site_in[s] || op->site_out[s] || op->site_tasks[s])
          PUT("      site %d: floats in %12lld  out %12lld  tasks %4lld  task time %.3f s\n", s,
              (long long)op->site_in[s], (long long)op->site_out[s], (long long)op->site_tasks[s],
              op->site_s[s]);
    }
    PUT("Sites:\n");
    for (int s = 0; s < c->nsites; s++) {
      PUT("  %d %-40s %-4s tasks %4lld  floats in %12lld  out %12lld  task time %.3f s  kernels %s\n",
          s, c->sites[s].ep, c->sites[s].up ? "up" : "down", (long long)c->sites[s].tasks,
          (long long)c->sites[s].floats_in, (long long)c->sites[s].floats_out, c->sites[s].busy_s,
          c->sites[s].kernels[0] ? c->sites[s].kernels : "-");
      if (c->sites[s].h2d || c->sites[s].d2h)
        PUT("    gpu copies: %llu bytes in, %llu bytes out, %.3f s\n", (unsigned long long)c->sites[s].h2d,
            (unsigned long long)c->sites[s].d2h, c->sites[s].copy_s);
    }
    PUT("Elapsed: %.3f s, measured transfer: %lld floats\n", elapsed, (long long)total);
  }
#undef PUT
  return out;
}

static void s_run_free(s_run *R) {
  for (int i = 0; i < TA_MAX_RELS; i++) {
    free(R->rel[i].locs);
    free(R->rel[i].copy);
  }
  free(R->drop);
  free(R->drop_site);
}

/* Drop transient copies and temporaries; on failure also the output. */
static void s_cleanup(s_run *R, int failed) {
  td_cluster *c = R->c;
  for (int i = 0; i < R->p->nrels; i++) {
    s_prel *pr = &R->rel[i];
    if (!pr->made || !pr->locs || (R->p->rels[i].kind == TA_REL_OUTPUT && (!failed || pr->committed)))
      continue;
    for (int64_t lin = 0; lin < pr->n; lin++)
      if (pr->locs[lin].chunk_id) s_note_drop(R, -1, pr->locs[lin].chunk_id);
  }
  for (int s = 0; s < c->nsites; s++) {
    int64_t k = 0;
    uint64_t *ids = malloc(sizeof *ids * (size_t)(R->ndrop + 1));
    if (!ids) return;
    for (int64_t i = 0; i < R->ndrop; i++)
      if (R->drop_site[i] == s || R->drop_site[i] == -1) ids[k++] = R->drop[i];
    s_drop_ids(c, s, ids, k);
    free(ids);
  }
}

/* R->pl[rel] from the chunk locations of rel (site ids to positions in
** R->up; the primary is the replica reads come from). */
static int s_placed_from_locs(s_run *R, int rel, tr_err *err) {
  to_placed *pl = &R->pl[rel];
  const s_prel *pr = &R->rel[rel];
  to_placed_free(pl);
  pl->has = calloc((size_t)pr->n + 1, sizeof *pl->has);
  pl->prim = calloc((size_t)pr->n + 1, 1);
  if (!pl->has || !pl->prim) return tr_seterr(err, TR_ENOMEM, "out of memory");
  pl->n = pr->n;
  for (int64_t lin = 0; lin < pr->n; lin++) {
    const tc_chunkloc *loc = &pr->locs[lin];
    int h = s_holder(R->c, &R->p->rels[rel].meta, loc);
    pl->prim[lin] = -1;
    for (int u = 0; u < R->m; u++) {
      if (s_has(loc, R->c->sites[R->up[u]].id)) pl->has[lin] |= 1ull << u;
      if (R->up[u] == h) pl->prim[lin] = (int8_t)u;
    }
  }
  return TR_OK;
}

/* A declared-only tensor as FILL would place its zeros (EXPLAIN only). */
static int s_placed_zeros(s_run *R, int rel, tr_err *err) {
  to_placed *pl = &R->pl[rel];
  int64_t n = tr_nchunks(&R->p->rels[rel].meta);
  to_placed_free(pl);
  pl->has = calloc((size_t)n + 1, sizeof *pl->has);
  pl->prim = calloc((size_t)n + 1, 1);
  if (!pl->has || !pl->prim) return tr_seterr(err, TR_ENOMEM, "out of memory");
  pl->n = n;
  for (int64_t lin = 0; lin < n; lin++) {
    pl->prim[lin] = (int8_t)(lin % R->m);
    pl->has[lin] = 1ull << (lin % R->m);
  }
  return TR_OK;
}

int td_run_begin(td_cluster *c, ta_plan *p, int run, td_run **out, int *m, int *repl,
                 to_placed **pl, tr_err *err) {
  s_run *R = calloc(1, sizeof *R);
  int rc = TR_OK;
  *out = NULL;
  if (!R) return tr_seterr(err, TR_ENOMEM, "out of memory");
  R->c = c;
  R->p = p;
  R->run = run;
  R->t0 = tr_now();
  s_ping(c);
  for (int s = 0; s < c->nsites; s++) {
    c->sites[s].tasks = c->sites[s].floats_in = c->sites[s].floats_out = 0;
    c->sites[s].busy_s = c->sites[s].copy_s = 0;
    c->sites[s].h2d = c->sites[s].d2h = 0;
  }
  R->m = s_up_sites(c, R->up);
  if (!R->m) rc = tr_seterr(err, TR_EIO, "no worker is up");
  /* Where the stored inputs are; declared-only tensors become zeros. */
  for (int i = 0; !rc && i < p->nrels; i++) {
    ta_rel *r = &p->rels[i];
    if (r->kind != TA_REL_STORED || r->pending) continue;
    if (r->meta.version == 0 && !run) {
      rc = s_placed_zeros(R, i, err);
      continue;
    }
    if (r->meta.version == 0) {
      tx_fill zeros = {TP_FILL_ZEROS, 0, 0, 0};
      rc = s_fill_tasks(R, &r->meta, &zeros, &R->rel[i], 0, err);
    } else {
      rc = tc_chunk_locations(c->db, &r->meta, &R->rel[i].locs, &R->rel[i].n, err);
    }
    if (!rc) rc = s_placed_from_locs(R, i, err);
  }
  if (rc) {
    td_run_end(&R);
    return rc;
  }
  *m = R->m;
  *repl = s_replication(c, R->m);
  *pl = R->pl;
  *out = R;
  return TR_OK;
}

int td_run_exec(td_run *R, const to_opt *opt, tr_err *err) {
  td_cluster *c = R->c;
  ta_plan *p = R->p;
  int rc = TR_OK;
  for (int k = 0; !rc && k < p->nnodes; k++) {
    int out = p->nodes[k].out;
    rc = s_run_node_safe(R, k, &opt->choice[k], &opt->moves[k], err);
    if (rc || p->rels[out].kind != TA_REL_OUTPUT) continue;
    double tc0 = tr_now();
    rc = s_commit(c, &p->rels[out].meta, R->rel[out].locs, R->rel[out].n, err);
    if (!rc) {
      R->rel[out].committed = 1;
      /* Not an IA operator, but where durability costs show: fdatasync
      ** on the workers and the catalog transaction. */
      s_op(R, "commit", p->rels[out].meta.name, 0)->seconds = tr_now() - tc0;
    }
  }
  s_cleanup(R, rc != TR_OK);
  R->cleaned = 1;
  R->t1 = tr_now();
  return rc;
}

char *td_run_analysis(const td_run *R, int json) {
  return s_analyze_text(R, NULL, R->t1 - R->t0, json);
}

void td_run_end(td_run **pr) {
  s_run *R = pr ? *pr : NULL;
  if (!R) return;
  *pr = NULL;
  /* Never executed (only explained, or the optimizer failed): what
  ** td_run_begin made (zeros for declared-only inputs) goes. */
  if (!R->cleaned) s_cleanup(R, 1);
  for (int i = 0; i < TA_MAX_RELS; i++) to_placed_free(&R->pl[i]);
  s_run_free(R);
  free(R);
}

int td_fill(td_cluster *c, const tr_tensor *t, const tx_fill *f, tr_err *err) {
  s_run *R = calloc(1, sizeof *R);
  ta_plan *p = calloc(1, sizeof *p);
  int rc = TR_OK;
  if (!R || !p) {
    free(R);
    free(p);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  /* A one-relation plan: the output, made by FILL tasks. */
  p->nrels = 1;
  p->rels[0].kind = TA_REL_OUTPUT;
  p->rels[0].meta = *t;
  R->c = c;
  R->p = p;
  s_ping(c);
  R->m = s_up_sites(c, R->up);
  if (!R->m) rc = tr_seterr(err, TR_EIO, "no worker is up");
  if (!rc) rc = s_fill_tasks(R, t, f, &R->rel[0], 1, err);
  if (!rc) rc = s_commit(c, t, R->rel[0].locs, R->rel[0].n, err);
  s_cleanup(R, rc != TR_OK);
  s_run_free(R);
  free(R);
  free(p);
  return rc;
}

int td_drop(td_cluster *c, const char *name, tr_err *err) {
  uint64_t *ids = NULL;
  int64_t n = 0;
  int rc = tc_tensor_drop_placed(c->db, name, &ids, &n, err);
  if (!rc) s_drop_ids(c, -1, ids, n);
  free(ids);
  return rc;
}
