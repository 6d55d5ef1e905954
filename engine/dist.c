/*
** engine/dist.c - the coordinator: workers, chunk placement, and plans run
** as implementation-algebra (IA) operators on the workers.
**
** Workers are the sites of the IA.  Every stored chunk has a cluster-wide
** id and lives on `replication` workers (catalog table chunk_replicas).
** A node of a plan (TRA join + aggregation) runs as the optimizer chose
** (optimize.c): each operand stays, is broadcast or is shuffled to the
** sites its join tuples run on, exactly the moves te_moves_compute
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
#include "engine/engine_int.h"

#include <errno.h>
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
  te_engine *e;  /* engine */
  uint64_t base; /* request id of out[0] */
  int n, cap;    /* requests */
  s_out *out;    /* them */
} s_phase;

static void s_phase_init(s_phase *ph, te_engine *e) {
  memset(ph, 0, sizeof *ph);
  ph->e = e;
  ph->base = e->next_req + 1;
}

static void s_phase_free(s_phase *ph) {
  for (int i = 0; i < ph->n; i++)
    if (ph->out[i].done == 1) tn_in_close(&ph->out[i].reply);
  free(ph->out);
  ph->e->next_req = ph->base + (uint64_t)ph->n;
  memset(ph, 0, sizeof *ph);
}

/* Send a request to site s as part of the phase. */
static int s_request(s_phase *ph, int s, int type, const tn_wbuf *body, int ndata,
                     void *const *data, const size_t *len, tn_free_fn *fr, tr_err *err) {
  te_engine *e = ph->e;
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
  int rc = tn_send(e->sites[s].sock, NULL, 0, type, ph->base + (uint64_t)ph->n, body, ndata,
                   data, len, fr, NULL, err);
  if (rc) return tr_seterr(err, rc, "cannot send to worker %s: %s", e->sites[s].ep, err->msg);
  ph->n++;
  return TR_OK;
}

static void s_heartbeat_all(te_engine *e) {
  tr_err err;
  for (int s = 0; s < e->nsites; s++)
    tn_send(e->sites[s].sock, NULL, 0, TN_HEARTBEAT, 0, NULL, 0, NULL, NULL, NULL, NULL, &err);
}

/* Read what the sites sent; replies of ph (may be NULL) are stored. */
static void s_drain(te_engine *e, s_phase *ph, int timeout_ms) {
  zmq_pollitem_t items[256];
  int n = e->nsites < 256 ? e->nsites : 256;
  for (int s = 0; s < n; s++) items[s] = (zmq_pollitem_t){e->sites[s].sock, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(items, n, timeout_ms) <= 0) return;
  for (int s = 0; s < n; s++) {
    if (!(items[s].revents & ZMQ_POLLIN)) continue;
    for (;;) {
      tn_in in;
      tr_err err;
      int rc = tn_recv(e->sites[s].sock, 0, ZMQ_DONTWAIT, &in, &err);
      if (rc == TR_ENOTFOUND || rc == TR_EINTR || rc == TR_EIO) break;
      if (rc) continue; /* malformed: dropped */
      e->sites[s].last_seen = tr_now();
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

/* Wait for every reply of the phase; fails if a site is silent too long,
** replies with an error (unless tolerant: then the caller looks at each
** reply), or the user interrupts.  With tolerant set, a silent site's
** requests are marked done with no reply instead of failing. */
static int s_wait_ex(s_phase *ph, int tolerant, tr_err *err);
static int s_wait(s_phase *ph, tr_err *err) { return s_wait_ex(ph, 0, err); }

static int s_wait_ex(s_phase *ph, int tolerant, tr_err *err) {
  te_engine *e = ph->e;
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
        size_t n;
        const void *b = tn_in_body(&o->reply, &n);
        tn_rbuf r;
        char msg[600];
        tn_rbuf_init(&r, b, n);
        int code = (int)(int64_t)tn_get_u64(&r);
        tn_get_str(&r, msg, sizeof msg);
        return tr_seterr(err, code < 0 ? code : TR_ERR, "worker %s: %s", e->sites[o->site].ep,
                         tn_rbuf_ok(&r) == TR_OK ? msg : "malformed error reply");
      }
    }
    if (!pending) return TR_OK;
    double now = tr_now();
    if (tr_cancelled(&e->interrupt)) {
      /* Tell the workers still busy for this statement to stop. */
      tr_err ignore;
      for (int s = 0; s < e->nsites; s++) {
        int busy = 0;
        for (int i = 0; i < ph->n && !busy; i++) busy = !ph->out[i].done && ph->out[i].site == s;
        if (busy) tn_send(e->sites[s].sock, NULL, 0, TN_CANCEL, 0, NULL, 0, NULL, NULL, NULL, NULL, &ignore);
      }
      return tr_seterr(err, TR_EINTR, "interrupted");
    }
    if (now - start > S_CALL_TIMEOUT_S)
      return tr_seterr(err, TR_EIO, "workers did not answer within %.0f s", S_CALL_TIMEOUT_S);
    if (now >= next_beat) {
      s_heartbeat_all(e);
      next_beat = now + TN_HEARTBEAT_MS / 1000.0;
    }
    for (int i = 0; i < ph->n; i++) {
      te_site *st = &e->sites[ph->out[i].site];
      if (!ph->out[i].done && now - st->last_seen > TN_LIVENESS * TN_HEARTBEAT_MS / 1000.0) {
        st->up = 0;
        if (tolerant) {
          ph->out[i].done = 2; /* no reply */
          continue;
        }
        return tr_seterr(err, TR_EIO, "worker %s is down (silent for %.1f s)", st->ep,
                         now - st->last_seen);
      }
    }
    s_drain(e, ph, TN_HEARTBEAT_MS / 5);
  }
}

/* Reply i's body as a read cursor. */
static void s_reply_body(s_phase *ph, int i, tn_rbuf *r) {
  size_t n;
  const void *b = tn_in_body(&ph->out[i].reply, &n);
  tn_rbuf_init(r, b, n);
}

static int s_keep_catalog(te_engine *e, tr_err *err);

/* Before a statement: which workers are alive now?  Ping every worker and
** wait (at most the liveness window) for the ones believed up; heartbeats
** queued while the shell was idle prove nothing, an echoed ping does.  A
** worker that answers after being down has rejoined: the catalog's view of
** its chunks is sent to it (KEEP). */
static void s_ping(te_engine *e) {
  s_phase ph;
  tr_err err;
  int rejoined = 0;
  s_drain(e, NULL, 0);
  s_phase_init(&ph, e);
  for (int s = 0; s < e->nsites; s++) s_request(&ph, s, TN_HEARTBEAT, NULL, 0, NULL, NULL, NULL, &err);
  double end = tr_now() + TN_LIVENESS * TN_HEARTBEAT_MS / 1000.0;
  for (;;) {
    int waiting = 0;
    for (int i = 0; i < ph.n; i++) waiting += !ph.out[i].done && e->sites[ph.out[i].site].up;
    if (!waiting || tr_now() >= end) break;
    s_drain(e, &ph, 20);
  }
  for (int i = 0; i < ph.n; i++) {
    te_site *st = &e->sites[ph.out[i].site];
    if (ph.out[i].done && !st->up) rejoined = 1;
    st->up = ph.out[i].done;
  }
  s_phase_free(&ph);
  if (rejoined) s_keep_catalog(e, &err);
}

/* ---- Workers ------------------------------------------------------------- */

static int s_site_open(te_engine *e, te_site *st, tr_err *err) {
  st->sock = zmq_socket(e->zctx, ZMQ_DEALER);
  if (!st->sock) return tr_seterr(err, TR_EIO, "cannot make a socket: %s", zmq_strerror(errno));
  int linger = 0, hwm = 0, tmo = 30000, ivl = 100;
  zmq_setsockopt(st->sock, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(st->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(st->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(st->sock, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(st->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
  int rc = tn_secure_client(st->sock, &e->keys, err);
  if (!rc && zmq_connect(st->sock, st->ep) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot connect to worker %s: %s", st->ep, zmq_strerror(errno));
  return rc;
}

/* Say HELLO to every site and wait for the answers (sites that do not
** answer in time stay down; it is an error only if none answers). */
static int s_hello_all(te_engine *e, double timeout_s, tr_err *err) {
  s_phase ph;
  s_phase_init(&ph, e);
  tn_wbuf b = {0};
  tn_put_str(&b, "tradb shell");
  int rc = TR_OK;
  for (int s = 0; s < e->nsites && !rc; s++) rc = s_request(&ph, s, TN_HELLO, &b, 0, NULL, NULL, NULL, err);
  tn_wbuf_free(&b);
  double end = tr_now() + timeout_s, resend = tr_now() + TN_HEARTBEAT_MS / 1000.0;
  while (!rc && tr_now() < end && !tr_cancelled(&e->interrupt)) {
    int pending = 0;
    for (int i = 0; i < ph.n; i++) pending += !ph.out[i].done;
    if (!pending) break;
    s_drain(e, &ph, 50);
    /* A HELLO can be lost with a connection that closes under it (a local
    ** worker of a killed shell still stopping on the same socket path):
    ** say it again, with the same request id, until answered. */
    if (tr_now() >= resend) {
      tn_wbuf hb = {0};
      tr_err ignore;
      tn_put_str(&hb, "tradb shell");
      for (int i = 0; i < ph.n; i++)
        if (!ph.out[i].done)
          tn_send(e->sites[ph.out[i].site].sock, NULL, 0, TN_HELLO, ph.base + (uint64_t)i, &hb, 0,
                  NULL, NULL, NULL, NULL, &ignore);
      tn_wbuf_free(&hb);
      resend = tr_now() + TN_HEARTBEAT_MS / 1000.0;
    }
    /* A local worker that exited will never answer: say why now. */
    for (int i = 0; !rc && i < ph.n; i++) {
      te_site *st = &e->sites[ph.out[i].site];
      int wst;
      if (!ph.out[i].done && st->pid > 0 && waitpid(st->pid, &wst, WNOHANG) == st->pid) {
        st->pid = 0;
        rc = tr_seterr(err, TR_EIO, "local worker %s exited (see %s/w%d.log)", st->ep, e->workdir,
                       ph.out[i].site);
      }
    }
  }
  int up = 0;
  for (int i = 0; i < ph.n; i++) {
    e->sites[ph.out[i].site].up = ph.out[i].done && ph.out[i].reply.type == TN_HELLO_OK;
    up += e->sites[ph.out[i].site].up;
  }
  s_phase_free(&ph);
  /* Ctrl-C while waiting is the answer, not a silent cluster. */
  if (!rc && !up && e->nsites && tr_cancelled(&e->interrupt))
    rc = tr_seterr(err, TR_EINTR, "interrupted");
  if (!rc && !up && e->nsites)
    rc = tr_seterr(err, TR_EIO, "no worker answered within %.0f s (first: %s)", timeout_s,
                   e->sites[0].ep);
  return rc;
}

/* Start n local workers under workdir; their endpoints are ipc sockets
** there and their logs go to workdir/wN.log. */
static int s_spawn_local(te_engine *e, const te_config *cfg, int n, tr_err *err) {
  char exe[4096];
  const char *self = cfg->self_exe;
  if (!self) {
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return tr_seterr(err, TR_EIO, "cannot find the tradb binary to start workers");
    exe[k] = '\0';
    self = exe;
  }
  if (mkdir(e->workdir, 0755) != 0 && errno != EEXIST)
    return tr_seterr(err, TR_EIO, "cannot create '%s': %s", e->workdir, strerror(errno));
  int per = tr_ncores() / n;
  if (cfg->threads > 0) per = cfg->threads;
  if (per < 1) per = 1;
  /* A worker holds scratch chunks in up to 1/8 of the machine's memory by
  ** default; local workers share one machine, so they share that. */
  char memory[32];
  int64_t share = tr_phys_memory() / 8 / n;
  snprintf(memory, sizeof memory, "%lld", (long long)(share > (1 << 20) ? share : 1 << 20));
  for (int i = 0; i < n; i++) {
    te_site *st = &e->sites[e->nsites];
    char data[4200], logf[4200], threads[16];
    memset(st, 0, sizeof *st);
    if (snprintf(st->ep, sizeof st->ep, "ipc://%s/w%d.ipc", e->workdir, i) >= (int)sizeof st->ep ||
        strlen(e->workdir) > 90)
      return tr_seterr(err, TR_EINVAL, "database path too long for local worker sockets: %s",
                       e->workdir);
    snprintf(data, sizeof data, "%s/w%d", e->workdir, i);
    snprintf(logf, sizeof logf, "%s/w%d.log", e->workdir, i);
    snprintf(threads, sizeof threads, "%d", per);
    pid_t pid = fork();
    if (pid < 0) return tr_seterr(err, TR_EIO, "cannot start a worker: %s", strerror(errno));
    if (pid == 0) {
      /* A local worker lives and dies with its shell, even a killed one,
      ** but the terminal's signals are the shell's: Ctrl-C cancels a
      ** statement, it must not stop the workers.  Hence its own session. */
      setsid();
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      int fd = open(logf, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
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
    int rc = tc_site_add(e->db, st->ep, &st->id, err);
    if (!rc) rc = s_site_open(e, st, err);
    e->nsites++;
    if (rc) return rc;
  }
  return TR_OK;
}

/* Is endpoint one of this database's local workers? */
static int s_is_local_ep(const te_engine *e, const char *ep) {
  size_t n = strlen(e->workdir);
  return !strncmp(ep, "ipc://", 6) && !strncmp(ep + 6, e->workdir, n) && ep[6 + n] == '/';
}

static int s_add_site(te_engine *e, const char *ep, tr_err *err) {
  for (int s = 0; s < e->nsites; s++)
    if (!strcmp(e->sites[s].ep, ep)) return TR_OK;
  te_site *ns = realloc(e->sites, sizeof *ns * (size_t)(e->nsites + 1));
  if (!ns) return tr_seterr(err, TR_ENOMEM, "out of memory");
  e->sites = ns;
  te_site *st = &e->sites[e->nsites];
  memset(st, 0, sizeof *st);
  if (snprintf(st->ep, sizeof st->ep, "%s", ep) >= (int)sizeof st->ep)
    return tr_seterr(err, TR_EINVAL, "endpoint too long: %s", ep);
  int rc = tc_site_add(e->db, ep, &st->id, err);
  if (!rc) rc = s_site_open(e, st, err);
  if (!rc || st->sock) e->nsites++;
  return rc;
}

/* Tell every live worker to drop the chunks the catalog does not list on
** it: what a killed or failed statement left behind. */
static int s_keep_catalog(te_engine *e, tr_err *err) {
  s_phase ph;
  s_phase_init(&ph, e);
  int rc = TR_OK;
  for (int s = 0; s < e->nsites && !rc; s++) {
    uint64_t *ids = NULL;
    int64_t n = 0;
    if (!e->sites[s].up) continue;
    if ((rc = tc_site_chunks(e->db, e->sites[s].id, &ids, &n, err))) break;
    tn_wbuf b = {0};
    tn_put_u32(&b, (uint32_t)n);
    for (int64_t i = 0; i < n; i++) tn_put_u64(&b, ids[i]);
    free(ids);
    rc = s_request(&ph, s, TN_KEEP, &b, 0, NULL, NULL, NULL, err);
    tn_wbuf_free(&b);
  }
  if (!rc) rc = s_wait(&ph, err);
  for (int i = 0; !rc && i < ph.n; i++) {
    tn_rbuf r;
    s_reply_body(&ph, i, &r);
    (void)tn_get_u32(&r);
    uint32_t nmiss = tn_get_count(&r, 8);
    uint64_t *miss = calloc(nmiss + 1, sizeof *miss);
    for (uint32_t k = 0; miss && k < nmiss; k++) miss[k] = tn_get_u64(&r);
    if (miss && tn_rbuf_ok(&r) == TR_OK)
      rc = tc_replica_remove(e->db, e->sites[ph.out[i].site].id, miss, nmiss, err);
    free(miss);
  }
  s_phase_free(&ph);
  return rc;
}

int te_cluster_open(te_engine *e, const te_config *cfg, tr_err *err) {
  int rc;
  e->zctx = zmq_ctx_new();
  if (!e->zctx) return tr_seterr(err, TR_EIO, "cannot start ZeroMQ");
  if ((rc = tn_load_keys(cfg->keys, &e->keys, err))) return rc;
  /* Absolute, so the endpoints recorded in the catalog do not depend on
  ** the directory the shell was started from. */
  char absdir[4096];
  if (!realpath(tc_dir(e->db), absdir)) snprintf(absdir, sizeof absdir, "%s", tc_dir(e->db));
  snprintf(e->workdir, sizeof e->workdir, "%s/workers", absdir);
  if (cfg->workers && *cfg->workers) {
    char *list = strdup(cfg->workers), *save = NULL;
    if (!list) return tr_seterr(err, TR_ENOMEM, "out of memory");
    rc = TR_OK;
    for (char *ep = strtok_r(list, ",", &save); ep && !rc; ep = strtok_r(NULL, ",", &save))
      if (*ep) rc = s_add_site(e, ep, err);
    free(list);
    if (rc) return rc;
  } else {
    tc_site *rec = NULL;
    int n = 0;
    if ((rc = tc_site_list(e->db, &rec, &n, err))) return rc;
    for (int i = 0; i < n && !rc; i++)
      if (!s_is_local_ep(e, rec[i].endpoint)) rc = s_add_site(e, rec[i].endpoint, err);
    free(rec);
    if (rc) return rc;
  }
  if (e->nsites == 0) {
    int n = cfg->local_workers > 0 ? cfg->local_workers : tr_ncores();
    e->sites = calloc((size_t)n, sizeof *e->sites);
    if (!e->sites) return tr_seterr(err, TR_ENOMEM, "out of memory");
    if ((rc = s_spawn_local(e, cfg, n, err))) return rc;
  }
  if ((rc = s_hello_all(e, S_HELLO_TIMEOUT_S, err))) return rc;
  return s_keep_catalog(e, err);
}

void te_cluster_close(te_engine *e) {
  for (int s = 0; s < e->nsites; s++) {
    if (e->sites[s].sock) zmq_close(e->sites[s].sock);
    if (e->sites[s].pid > 0) kill(e->sites[s].pid, SIGTERM);
  }
  for (int s = 0; s < e->nsites; s++)
    if (e->sites[s].pid > 0) {
      /* A worker stops within a poll interval; do not wait forever. */
      int st;
      double end = tr_now() + 5;
      while (waitpid(e->sites[s].pid, &st, WNOHANG) == 0) {
        if (tr_now() > end) {
          kill(e->sites[s].pid, SIGKILL);
          waitpid(e->sites[s].pid, &st, 0);
          break;
        }
        usleep(10000);
      }
    }
  free(e->sites);
  e->sites = NULL;
  e->nsites = 0;
  if (e->zctx) zmq_ctx_term(e->zctx);
  e->zctx = NULL;
  if (e->keys.on) tn_zap_stop();
}

int te_worker_add(te_engine *e, const char *ep, tr_err *err) {
  int rc = s_add_site(e, ep, err);
  return rc ? rc : s_hello_all(e, 5.0, err);
}

int te_worker_remove(te_engine *e, const char *ep, tr_err *err) {
  int rc = tc_site_remove(e->db, ep, err);
  if (rc) return rc;
  for (int s = 0; s < e->nsites; s++)
    if (!strcmp(e->sites[s].ep, ep)) {
      zmq_close(e->sites[s].sock);
      if (e->sites[s].pid > 0) kill(e->sites[s].pid, SIGTERM);
      e->sites[s] = e->sites[--e->nsites];
      break;
    }
  return TR_OK;
}

int te_workers(te_engine *e, te_result **res, tr_err *err) {
  static const char *const cols[] = {"endpoint", "state", "tasks", "chunks", "bytes_sent",
                                     "bytes_received", "kernels"};
  s_phase ph;
  s_ping(e);
  s_phase_init(&ph, e);
  int rc = TR_OK;
  for (int s = 0; s < e->nsites && !rc; s++)
    if (e->sites[s].up) rc = s_request(&ph, s, TN_STATS, NULL, 0, NULL, NULL, NULL, err);
  double end = tr_now() + 2.0;
  while (!rc && tr_now() < end) {
    int pending = 0;
    for (int i = 0; i < ph.n; i++) pending += !ph.out[i].done;
    if (!pending) break;
    s_drain(e, &ph, 50);
  }
  te_result *r = calloc(1, sizeof *r);
  if (!r) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  if (!rc) {
    r->kind = TE_RES_ROWS;
    r->ncols = 7;
    r->colnames = calloc(7, sizeof(char *));
    for (int i = 0; r->colnames && i < 7; i++) r->colnames[i] = strdup(cols[i]);
    r->cells = calloc((size_t)(e->nsites * 7 + 1), sizeof(char *));
    if (!r->colnames || !r->cells) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  for (int s = 0; !rc && s < e->nsites; s++) {
    char v[5][32] = {"-", "-", "-", "-", "-"};
    char kern[64] = "-";
    int up = 0;
    for (int i = 0; i < ph.n; i++)
      if (ph.out[i].site == s && ph.out[i].done && ph.out[i].reply.type == TN_STATS_OK) {
        tn_rbuf b;
        s_reply_body(&ph, i, &b);
        for (int k = 0; k < 5; k++) snprintf(v[k], sizeof v[k], "%llu", (unsigned long long)tn_get_u64(&b));
        tn_get_str(&b, kern, sizeof kern);
        up = tn_rbuf_ok(&b) == TR_OK;
      }
    const char *cells[7] = {e->sites[s].ep, up ? "up" : "down", v[0], v[1], v[3], v[4], kern};
    for (int k = 0; k < 7; k++) r->cells[r->nrows * 7 + k] = strdup(cells[k]);
    r->nrows++;
  }
  s_phase_free(&ph);
  if (rc) {
    te_result_free(&r);
    return rc;
  }
  *res = r;
  return TR_OK;
}

/* ---- Placement ------------------------------------------------------------- */

/* Live sites, in index order; returns how many. */
static int s_up_sites(const te_engine *e, int *up) {
  int m = 0;
  for (int s = 0; s < e->nsites; s++)
    if (e->sites[s].up) up[m++] = s;
  return m;
}

static int s_site_index(const te_engine *e, int64_t id) {
  for (int s = 0; s < e->nsites; s++)
    if (e->sites[s].id == id) return s;
  return -1;
}

/* Replication factor in effect: the setting (default 2), at most m. */
static int s_replication(te_engine *e, int m) {
  char v[64];
  int r = 2;
  if (tc_setting_get(e->db, "replication", v, sizeof v, NULL) == TR_OK) r = atoi(v);
  if (r < 1) r = 1;
  return r < m ? r : m;
}

int te_dist_set(te_engine *e, const char *name, const char *value, tr_err *err) {
  if (strcmp(name, "replication"))
    return tr_seterr(err, TR_ENAME, "unknown setting '%s' (settings: replication)", name);
  char *end;
  long k = strtol(value, &end, 10);
  if (*end || k < 1 || k > TC_MAX_REPLICAS)
    return tr_seterr(err, TR_EINVAL, "replication must be an integer from 1 to %d", TC_MAX_REPLICAS);
  return tc_setting_set(e->db, name, value, err);
}

/* The live site that serves chunk loc of t (reads it for others, and
** drives the joins that keep t in place), or -1.  The catalog lists a
** chunk's holders by site id, so taking the first would put every chunk
** of a tensor held everywhere (replication = sites, the embedded
** default) on the lowest site, and every plan driven by it would run on
** one worker.  The holders take turns by the chunk's row of the grid
** instead: such a tensor is served row-block partitioned, the
** partitioning under which a product needs no partial sums. */
static int s_holder(const te_engine *e, const tc_tensor *t, const tc_chunkloc *loc) {
  if (!loc->nsites) return -1;
  int64_t g0 = tc_grid(t, 0), per_row = g0 > 0 ? tc_nchunks(t) / g0 : 1;
  int64_t row = loc->lin / (per_row > 0 ? per_row : 1);
  for (int k = 0; k < loc->nsites; k++) {
    int s = s_site_index(e, loc->site[(row + k) % loc->nsites]);
    if (s >= 0 && e->sites[s].up) return s;
  }
  return -1;
}

/* The error for a chunk no live site holds: names tensor and chunk key. */
static int s_unreadable(const tc_tensor *t, const tc_chunkloc *loc, const char *why, tr_err *err) {
  int64_t key[TR_MAX_RANK];
  char ks[200];
  size_t o = 0;
  tc_key_from_linear(t, loc->lin, key);
  ks[0] = '\0';
  for (int d = 0; d < t->rank && o < sizeof ks; d++)
    o += (size_t)snprintf(ks + o, sizeof ks - o, "%s%lld", d ? "," : "", (long long)key[d]);
  if (!why)
    why = loc->nsites ? "every worker holding it is down" : "no replica is left (lost or damaged)";
  return tr_seterr(err, TR_ECORRUPT, "cannot read tensor %s chunk [%s]: %s", t->name, ks, why);
}

/* Tell sites to drop ids (best effort: cleanup never fails a statement). */
static void s_drop_ids(te_engine *e, const uint64_t *ids, int64_t n) {
  if (!n) return;
  s_phase ph;
  tr_err err;
  s_phase_init(&ph, e);
  tn_wbuf b = {0};
  tn_put_u32(&b, (uint32_t)n);
  for (int64_t i = 0; i < n; i++) tn_put_u64(&b, ids[i]);
  for (int s = 0; s < e->nsites; s++)
    if (e->sites[s].up) s_request(&ph, s, TN_DROP, &b, 0, NULL, NULL, NULL, &err);
  tn_wbuf_free(&b);
  s_wait(&ph, &err);
  s_phase_free(&ph);
}

/* SYNC every chunk of locs on the sites holding it. */
static int s_sync(te_engine *e, const tc_chunkloc *locs, int64_t n, tr_err *err) {
  s_phase ph;
  s_phase_init(&ph, e);
  int rc = TR_OK;
  for (int s = 0; s < e->nsites && !rc; s++) {
    tn_wbuf b = {0};
    uint32_t k = 0;
    for (int64_t i = 0; i < n; i++)
      for (int j = 0; j < locs[i].nsites; j++) k += locs[i].site[j] == e->sites[s].id;
    if (!k) continue;
    tn_put_u32(&b, k);
    for (int64_t i = 0; i < n; i++)
      for (int j = 0; j < locs[i].nsites; j++)
        if (locs[i].site[j] == e->sites[s].id) tn_put_u64(&b, locs[i].chunk_id);
    rc = s_request(&ph, s, TN_SYNC, &b, 0, NULL, NULL, NULL, err);
    tn_wbuf_free(&b);
  }
  if (!rc) rc = s_wait(&ph, err);
  s_phase_free(&ph);
  return rc;
}

/* Make a written version visible: sync, commit, drop the old version. */
static int s_commit(te_engine *e, const tc_tensor *meta, tc_chunkloc *locs, int64_t n, tr_err *err) {
  uint64_t *old = NULL;
  int64_t nold = 0;
  int rc = s_sync(e, locs, n, err);
  if (!rc) rc = tc_commit_placed(e->db, meta, locs, n, NULL, &old, &nold, err);
  if (!rc) s_drop_ids(e, old, nold);
  free(old);
  return rc;
}

/* ---- Writing chunks from the coordinator (LOAD) ---------------------------- */

struct te_pwrite {
  te_engine *e;         /* engine */
  tc_tensor meta;       /* the new version */
  tc_chunkloc *locs;    /* where each chunk goes */
  int up[256], m;       /* live sites */
  int r;                /* replication */
  s_phase ph;           /* PUTs in flight */
  size_t inflight;      /* their bytes */
};

int te_pwrite_begin(te_engine *e, const tc_tensor *meta, te_pwrite **out, tr_err *err) {
  te_pwrite *w = calloc(1, sizeof *w);
  int64_t n = tc_nchunks(meta);
  if (!w || !(w->locs = calloc((size_t)n + 1, sizeof *w->locs))) {
    free(w);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  w->e = e;
  w->meta = *meta;
  s_ping(e);
  w->m = s_up_sites(e, w->up);
  if (!w->m) {
    free(w->locs);
    free(w);
    return tr_seterr(err, TR_EIO, "no worker is up");
  }
  w->r = s_replication(e, w->m);
  s_phase_init(&w->ph, e);
  *out = w;
  return TR_OK;
}

/* Store chunk lin (buf is copied) on its `replication` sites. */
int te_pwrite_chunk(te_pwrite *w, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
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
    loc->site[k] = w->e->sites[s].id;
    void *data = (void *)buf;
    rc = s_request(&w->ph, s, TN_PUT, &b, 1, &data, &bytes, NULL, err);
    w->e->sites[s].floats_in += (int64_t)(bytes / tr_dtype_size(w->meta.dtype));
  }
  tn_wbuf_free(&b);
  w->inflight += bytes * (size_t)w->r;
  if (!rc && w->inflight > S_INFLIGHT_BYTES) {
    rc = s_wait(&w->ph, err);
    s_phase_free(&w->ph);
    s_phase_init(&w->ph, w->e);
    w->inflight = 0;
  }
  return rc;
}

int te_pwrite_commit(te_pwrite *w, tr_err *err) {
  int rc = s_wait(&w->ph, err);
  s_phase_free(&w->ph);
  s_phase_init(&w->ph, w->e);
  if (!rc) rc = s_commit(w->e, &w->meta, w->locs, tc_nchunks(&w->meta), err);
  return rc;
}

void te_pwrite_free(te_pwrite **pw) {
  if (!pw || !*pw) return;
  s_phase_free(&(*pw)->ph);
  free((*pw)->locs);
  free(*pw);
  *pw = NULL;
}

/* ---- Reading chunks to the coordinator (SAVE, PRINT) ---------------------- */

/* Check reply k of ph as chunk loc of t; TR_OK and data/len if good. */
static int s_check_data(te_engine *e, s_phase *ph, int k, const tc_tensor *t, const tc_chunkloc *loc,
                        const void **data, size_t *len, char *why, size_t cap) {
  s_out *o = &ph->out[k];
  if (o->done != 1) {
    snprintf(why, cap, "worker %s is down", e->sites[o->site].ep);
    return TR_EIO;
  }
  tn_rbuf r;
  s_reply_body(ph, k, &r);
  if (o->reply.type == TN_ERROR) {
    char msg[512];
    (void)tn_get_u64(&r);
    tn_get_str(&r, msg, sizeof msg);
    snprintf(why, cap, "worker %s: %s", e->sites[o->site].ep, msg);
    return TR_EIO;
  }
  tn_chunk c;
  (void)tn_get_u32(&r);
  tn_get_chunk(&r, &c);
  *data = tn_in_data(&o->reply, 0, len);
  if (o->reply.type != TN_DATA || tn_rbuf_ok(&r) || !*data || *len != loc->nbytes ||
      c.id != loc->chunk_id || c.checksum != loc->checksum || XXH3_64bits(*data, *len) != c.checksum) {
    snprintf(why, cap, "worker %s sent a copy that does not match its checksum", e->sites[o->site].ep);
    return TR_ECORRUPT;
  }
  (void)t;
  return TR_OK;
}

int te_pread(te_engine *e, const tc_tensor *t, const int64_t *lins, int64_t n,
             int (*fn)(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err),
             void *ctx, tr_err *err) {
  tc_chunkloc *locs = NULL;
  int64_t nl = 0;
  int rc = tc_chunk_locations(e->db, t, &locs, &nl, err);
  if (rc) return rc;
  s_ping(e);
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
      s_phase_init(&ph, e);
      for (int64_t i = i0; i < i1 && !rc; i++) {
        int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
        if (ok[i - i0]) continue;
        tc_key_from_linear(t, lins[i], key);
        size_t bytes = (size_t)tc_chunk_extent(t, key, ext) * tr_dtype_size(t->dtype);
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
          int cand = s_site_index(e, loc->site[tried[i - i0]++]);
          if (cand >= 0 && e->sites[cand].up) s = cand;
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
      for (int k = 0; !rc && k < nreq; k++) {
        int64_t i = which[k], lin = lins[i];
        const void *data;
        size_t len;
        if (s_check_data(e, &ph, k, t, &locs[lin], &data, &len, why[i - i0], sizeof why[i - i0]))
          continue; /* next round tries the next replica */
        e->sites[ph.out[k].site].floats_out += (int64_t)(len / tr_dtype_size(t->dtype));
        ok[i - i0] = 1;
        rc = fn(ctx, lin, data, len, err);
      }
      s_phase_free(&ph);
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

typedef struct s_run {
  te_engine *e;                 /* engine */
  te_plan *p;                   /* plan */
  s_prel rel[TE_MAX_RELS];      /* placement of every relation */
  te_placed pl[TE_MAX_RELS];    /* the same as site-position masks */
  int up[256], m;               /* live sites */
  s_opstat ops[TE_MAX_NODES * (3 * TK_MAX_INPUTS + 4) + 2]; /* measured operators */
  int nops;                     /* used */
  uint64_t *drop;               /* ids to drop at the end (per site in drop_site) */
  int *drop_site;               /* site of each (-1: every site) */
  int64_t ndrop, capdrop;       /* count, allocated */
} s_run;

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
  R->e->sites[src].floats_out += fl;
  R->e->sites[dst].floats_in += fl;
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

static int s_has(const tc_chunkloc *loc, int64_t site_id) {
  for (int k = 0; k < loc->nsites; k++)
    if (loc->site[k] == site_id) return 1;
  return 0;
}

/* Replicas of what site position u makes: the next r-1 live sites.  The
** worker pushes each output chunk to them as soon as it is made, so
** replication overlaps the computation. */
static void s_task_reps(s_run *R, int u, te_task *task) {
  int r = s_replication(R->e, R->m);
  task->nrep = r - 1;
  for (int j = 1; j < r; j++)
    snprintf(task->rep[j - 1], sizeof task->rep[j - 1], "%s", R->e->sites[R->up[(u + j) % R->m]].ep);
}

/* Record the replicas a task's pushes made, and count their transfer. */
static void s_note_reps(s_run *R, int u, tc_chunkloc *loc, tr_dtype dt, s_opstat *os) {
  te_engine *e = R->e;
  int r = s_replication(e, R->m);
  int64_t fl = (int64_t)(loc->nbytes / tr_dtype_size(dt));
  for (int j = 1; j < r; j++) {
    int dst = R->up[(u + j) % R->m];
    loc->site[loc->nsites++] = e->sites[dst].id;
    s_moved(R, os, R->up[u], dst, fl);
  }
}

/* Apply the TASK_OK replies of ph to the chunks of pr: sizes, checksums,
** and with `replicate` the replicas each worker pushed (counted in rs). */
static void s_task_results(s_run *R, s_phase *ph, s_prel *pr, tr_dtype dt, int replicate,
                           s_opstat *rs, s_opstat *js) {
  te_engine *e = R->e;
  for (int i = 0; i < ph->n; i++) {
    tn_rbuf r;
    int u = 0;
    while (R->up[u] != ph->out[i].site) u++;
    s_reply_body(ph, i, &r);
    uint32_t cnt = tn_get_count(&r, 25);
    int64_t hint = 0;
    for (uint32_t j = 0; j < cnt; j++) {
      tn_chunk c;
      tn_get_chunk(&r, &c);
      /* replies list chunks in task order: search on from the last one */
      for (int64_t k = 0; pr && k < pr->n; k++) {
        tc_chunkloc *loc = &pr->locs[(hint + k) % pr->n];
        if (loc->chunk_id != c.id) continue;
        loc->nbytes = c.nbytes;
        loc->checksum = c.checksum;
        if (replicate) s_note_reps(R, u, loc, dt, rs);
        hint = (hint + k + 1) % pr->n;
        break;
      }
    }
    double secs = tn_get_f64(&r);
    int st = ph->out[i].site;
    tn_get_str(&r, e->sites[st].kernels, sizeof e->sites[st].kernels);
    e->sites[st].h2d += tn_get_u64(&r);
    e->sites[st].d2h += tn_get_u64(&r);
    e->sites[st].copy_s += tn_get_f64(&r);
    e->sites[st].busy_s += secs;
    e->sites[st].tasks++;
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
static int s_task_lists(te_task *t, int64_t nin, int64_t nout, tr_err *err) {
  t->in_op = calloc((size_t)nin + 1, sizeof *t->in_op);
  t->in_lin = calloc((size_t)nin + 1, sizeof *t->in_lin);
  t->in_id = calloc((size_t)nin + 1, sizeof *t->in_id);
  t->out_lin = calloc((size_t)nout + 1, sizeof *t->out_lin);
  t->out_id = calloc((size_t)nout + 1, sizeof *t->out_id);
  if (t->in_op && t->in_lin && t->in_id && t->out_lin && t->out_id) return TR_OK;
  te_task_free(t);
  return tr_seterr(err, TR_ENOMEM, "out of memory");
}

/* Send task t to site position u if it makes anything (with `reps`, its
** outputs are also pushed to the replica sites); frees t's lists. */
static int s_task_submit(s_run *R, s_phase *ph, te_task *t, int reps, int u, tr_err *err) {
  int rc = TR_OK;
  /* What is not replicated is not committed either: partials, a plan's
  ** intermediates, zeros standing in for declared-only tensors. */
  if (reps)
    s_task_reps(R, u, t);
  else
    t->scratch = 1;
  if (t->nout) {
    tn_wbuf b = {0};
    te_task_encode(t, &b);
    rc = s_request(ph, R->up[u], TN_TASK, &b, 0, NULL, NULL, NULL, err);
    tn_wbuf_free(&b);
  }
  te_task_free(t);
  return rc;
}

/* Run FILL tasks: chunk lin of t on site up[lin % m]. */
static int s_fill_tasks(s_run *R, const tc_tensor *t, const te_fill *f, s_prel *pr, int replicate,
                        tr_err *err) {
  te_engine *e = R->e;
  int64_t n = tc_nchunks(t);
  s_phase ph;
  int rc = TR_OK;
  pr->n = n;
  pr->made = 1;
  if (!(pr->locs = calloc((size_t)n + 1, sizeof *pr->locs))) return tr_seterr(err, TR_ENOMEM, "out of memory");
  s_phase_init(&ph, e);
  for (int k = 0; k < R->m && !rc; k++) {
    te_task task;
    memset(&task, 0, sizeof task);
    task.kind = TE_TASK_FILL;
    task.f = *f;
    task.out_meta = *t;
    if ((rc = s_task_lists(&task, 0, n / R->m + 1, err))) break;
    for (int64_t lin = k; lin < n; lin += R->m) {
      pr->locs[lin].lin = lin;
      pr->locs[lin].chunk_id = tc_new_chunk_id();
      pr->locs[lin].nsites = 1;
      pr->locs[lin].site[0] = e->sites[R->up[k]].id;
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
static int s_flush_sends(te_engine *e, tn_wbuf *sends, uint32_t *nsend, int rc, tr_err *err) {
  s_phase ph;
  s_phase_init(&ph, e);
  for (int s = 0; !rc && s < e->nsites; s++)
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
  for (int s = 0; sends && s < e->nsites; s++) tn_wbuf_free(&sends[s]);
  free(sends);
  free(nsend);
  return rc;
}

/* Send the chunks of pr that `need` says must reach sites not holding
** them (from a live holder); each send counted in os. */
static int s_plan_sends(s_run *R, s_prel *pr, const tc_tensor *t, const uint64_t *need,
                        s_opstat *os, tn_wbuf *sends, uint32_t *nsend, tr_err *err) {
  te_engine *e = R->e;
  if (!pr->copy && !(pr->copy = calloc((size_t)e->nsites * (size_t)pr->n + 1, 1)))
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int u = 0; u < R->m; u++) {
    int su = R->up[u];
    for (int64_t lin = 0; lin < pr->n; lin++) {
      if (!(need[lin] & (1ull << u))) continue;
      tc_chunkloc *loc = &pr->locs[lin];
      if (s_has(loc, e->sites[su].id) || pr->copy[(size_t)su * (size_t)pr->n + (size_t)lin]) continue;
      int src = s_holder(e, t, loc);
      if (src < 0) return s_unreadable(t, loc, NULL, err);
      pr->copy[(size_t)su * (size_t)pr->n + (size_t)lin] = 1;
      tn_put_u64(&sends[src], loc->chunk_id);
      tn_put_str(&sends[src], e->sites[su].ep);
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
static int s_send_task(s_run *R, s_phase *ph, const te_node *n, const tc_tensor *const *in_meta,
                       s_prel *const *in, uint64_t *const *need, const tc_tensor *om, int64_t nout,
                       const uint8_t *mine, const uint64_t *ids, int reps, int u, tr_err *err) {
  te_task task;
  int rc;
  memset(&task, 0, sizeof task);
  task.kind = TE_TASK_NODE;
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
static int s_run_combine(s_run *R, int k, const te_moves *mv, const uint64_t *pids, int final, tr_err *err) {
  te_engine *e = R->e;
  const te_node *n = &R->p->nodes[k];
  const tc_tensor *om = &R->p->rels[n->out].meta;
  s_prel *po = &R->rel[n->out];
  int64_t nout = tc_nchunks(om);
  int m = R->m, rc = TR_OK;
  tn_wbuf *sends = calloc((size_t)e->nsites, sizeof *sends);
  uint32_t *nsend = calloc((size_t)e->nsites, sizeof *nsend);
  if (!sends || !nsend) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  double t0 = tr_now();
  s_opstat *ss = rc ? NULL : s_op(R, "shuffle", "partials", 0);
  if (ss) snprintf(ss->what, sizeof ss->what, "%s (partials)", om->name);
  for (int64_t lin = 0; !rc && lin < nout; lin++) {
    int own = R->up[mv->owner[lin]];
    for (int u = 0; u < m; u++) {
      if (!((mv->osites[lin] >> u) & 1)) continue;
      uint64_t id = pids[(size_t)lin * (size_t)m + (size_t)u];
      if (s_note_drop(R, -1, id)) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
      if (R->up[u] == own) continue;
      tn_put_u64(&sends[R->up[u]], id);
      tn_put_str(&sends[R->up[u]], e->sites[own].ep);
      nsend[R->up[u]]++;
      int64_t kk[TR_MAX_RANK], ext[TR_MAX_RANK];
      tc_key_from_linear(om, lin, kk);
      s_moved(R, ss, R->up[u], own, tc_chunk_extent(om, kk, ext));
    }
  }
  rc = s_flush_sends(e, sends, nsend, rc, err); /* frees sends, nsend */
  if (ss) ss->seconds = tr_now() - t0;
  /* Combine tasks: operand 0 is the partials relation, one entry per
  ** partial (several per output chunk). */
  t0 = tr_now();
  s_opstat *cs = rc ? NULL : s_op(R, "local_agg", om->name, 0);
  if (cs) snprintf(cs->what, sizeof cs->what, "%s (combine partials%s)", om->name, n->post.n ? ", transform" : "");
  s_opstat *rs = !rc && final && s_replication(e, m) > 1 ? s_op(R, "replicate", om->name, 0) : NULL;
  s_phase ph;
  s_phase_init(&ph, e);
  for (int u = 0; !rc && u < m; u++) {
    te_task task;
    memset(&task, 0, sizeof task);
    task.kind = TE_TASK_COMBINE;
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
static int s_run_node(s_run *R, int k, const te_choice *c, tr_err *err) {
  te_engine *e = R->e;
  te_plan *p = R->p;
  te_node *n = &p->nodes[k];
  const tc_tensor *om = &p->rels[n->out].meta;
  s_prel *po = &R->rel[n->out];
  int final = p->rels[n->out].kind == TE_REL_OUTPUT;
  int64_t nout = tc_nchunks(om);
  int m = R->m, rc;
  te_moves mv;
  rc = te_moves_compute(p, k, c, m, s_replication(e, m), R->pl, &mv, 1, err);
  if (rc) return rc;
  po->n = nout;
  po->made = 1;
  uint64_t *pids = calloc((size_t)nout * (size_t)m + 1, sizeof *pids); /* partial ids */
  uint8_t *mine = calloc((size_t)nout + 1, 1);
  uint64_t *ids = calloc((size_t)nout + 1, sizeof *ids);
  tn_wbuf *sends = calloc((size_t)e->nsites, sizeof *sends);
  uint32_t *nsend = calloc((size_t)e->nsites, sizeof *nsend);
  if (!(po->locs = calloc((size_t)nout + 1, sizeof *po->locs)) || !pids || !mine || !ids || !sends || !nsend) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int64_t lin = 0; lin < nout; lin++) {
    po->locs[lin].lin = lin;
    po->locs[lin].chunk_id = tc_new_chunk_id();
    po->locs[lin].nsites = 1;
    po->locs[lin].site[0] = e->sites[R->up[mv.owner[lin]]].id;
  }
  /* The moves of the operands. */
  double t0 = tr_now();
  int opbase = R->nops;
  const tc_tensor *in_meta[TK_MAX_INPUTS];
  s_prel *in[TK_MAX_INPUTS];
  for (int i = 0; !rc && i < n->ninputs; i++) {
    const te_operand *o = &n->in[i];
    const tc_tensor *it = &p->rels[o->rel].meta;
    int diag = 0, rechunk = 0;
    in_meta[i] = it;
    in[i] = &R->rel[o->rel];
    for (int d = 0; d < o->rank; d++) {
      rechunk |= it->chunk[d] != n->chunk[o->label[d]];
      for (int d2 = d + 1; d2 < o->rank; d2++) diag |= o->label[d] == o->label[d2];
    }
    char what[96];
    s_opstat *os = NULL;
    if (c->mv[i] != TE_MV_KEEP) os = s_op(R, c->mv[i] == TE_MV_BCAST ? "bcast" : "shuffle", it->name, 0);
    snprintf(what, sizeof what, "%s (diagonal keys)", it->name);
    if (diag) s_op(R, "local_filter", what, 1);
    snprintf(what, sizeof what, "%s (re-chunk: tile + concat)", it->name);
    if (rechunk) s_op(R, "local_map", what, 1);
    rc = s_plan_sends(R, in[i], it, mv.need[i], os, sends, nsend, err);
  }
  rc = s_flush_sends(e, sends, nsend, rc, err);
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
           c->twophase ? ", partial" : "");
  if (n->agg != TK_AGG_NONE) s_op(R, "local_agg", what, 1);
  snprintf(what, sizeof what, "%s (fused transform)", om->name);
  if (n->post.n && !c->twophase) s_op(R, "local_map", what, 1);
  s_opstat *rs = final && !c->twophase && s_replication(e, m) > 1 ? s_op(R, "replicate", om->name, 0) : NULL;
  te_node tn = *n;
  tn.drive = c->drive;
  if (c->twophase) tn.post.n = 0;
  s_phase ph;
  s_phase_init(&ph, e);
  for (int u = 0; !rc && u < m; u++) {
    for (int64_t lin = 0; lin < nout; lin++) {
      mine[lin] = (mv.osites[lin] >> u) & 1;
      ids[lin] = c->twophase ? (pids[(size_t)lin * (size_t)m + (size_t)u] = tc_new_chunk_id())
                             : po->locs[lin].chunk_id;
    }
    rc = s_send_task(R, &ph, &tn, in_meta, in, mv.need, om, nout, mine, ids,
                     final && !c->twophase, u, err);
  }
  if (!rc) rc = s_wait(&ph, err);
  if (!rc && !c->twophase) s_task_results(R, &ph, po, om->dtype, final, rs, js);
  if (!rc && c->twophase) s_task_results(R, &ph, NULL, om->dtype, 0, NULL, js);
  s_phase_free(&ph);
  js->seconds = tr_now() - t0;
  if (rs) rs->seconds = js->seconds; /* overlapped with the join */
  if (!rc && c->twophase) rc = s_run_combine(R, k, &mv, pids, final, err);
done:
  if (sends)
    for (int s2 = 0; s2 < e->nsites; s2++) tn_wbuf_free(&sends[s2]);
  free(sends);
  free(nsend);
  free(pids);
  free(mine);
  free(ids);
  te_moves_free(&mv);
  return rc;
}

/* EXPLAIN ANALYZE output, text or JSON. */
static char *s_analyze_text(const s_run *R, const char *tra, double elapsed, int json) {
  const te_engine *e = R->e;
  size_t cap = 8192 + (size_t)R->nops * (512 + (size_t)e->nsites * 200) + (size_t)e->nsites * 512 +
               (tra ? strlen(tra) * 2 : 0);
  char *out = malloc(cap);
  size_t o = 0;
  int64_t total = 0;
  int ns = e->nsites < S_OP_SITES ? e->nsites : S_OP_SITES;
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
    for (int s = 0; s < e->nsites; s++)
      PUT("%s{\"site\": %d, \"endpoint\": \"%s\", \"state\": \"%s\", \"tasks\": %lld, \"floats_in\": %lld, "
          "\"floats_out\": %lld, \"task_s\": %.6f, \"kernels\": \"%s\", \"gpu_h2d_bytes\": %llu, "
          "\"gpu_d2h_bytes\": %llu, \"gpu_copy_s\": %.6f}",
          s ? ", " : "", s, e->sites[s].ep, e->sites[s].up ? "up" : "down", (long long)e->sites[s].tasks,
          (long long)e->sites[s].floats_in, (long long)e->sites[s].floats_out, e->sites[s].busy_s,
          e->sites[s].kernels, (unsigned long long)e->sites[s].h2d,
          (unsigned long long)e->sites[s].d2h, e->sites[s].copy_s);
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
    for (int s = 0; s < e->nsites; s++) {
      PUT("  %d %-40s %-4s tasks %4lld  floats in %12lld  out %12lld  task time %.3f s  kernels %s\n",
          s, e->sites[s].ep, e->sites[s].up ? "up" : "down", (long long)e->sites[s].tasks,
          (long long)e->sites[s].floats_in, (long long)e->sites[s].floats_out, e->sites[s].busy_s,
          e->sites[s].kernels[0] ? e->sites[s].kernels : "-");
      if (e->sites[s].h2d || e->sites[s].d2h)
        PUT("    gpu copies: %llu bytes in, %llu bytes out, %.3f s\n", (unsigned long long)e->sites[s].h2d,
            (unsigned long long)e->sites[s].d2h, e->sites[s].copy_s);
    }
    PUT("Elapsed: %.3f s, measured transfer: %lld floats\n", elapsed, (long long)total);
  }
#undef PUT
  return out;
}

static void s_run_free(s_run *R) {
  for (int i = 0; i < TE_MAX_RELS; i++) {
    free(R->rel[i].locs);
    free(R->rel[i].copy);
  }
  free(R->drop);
  free(R->drop_site);
}

/* Drop transient copies and temporaries; on failure also the output. */
static void s_cleanup(s_run *R, int failed) {
  te_engine *e = R->e;
  for (int i = 0; i < R->p->nrels; i++) {
    s_prel *pr = &R->rel[i];
    if (!pr->made || (R->p->rels[i].kind == TE_REL_OUTPUT && (!failed || pr->committed))) continue;
    for (int64_t lin = 0; lin < pr->n; lin++)
      if (pr->locs[lin].chunk_id) s_note_drop(R, -1, pr->locs[lin].chunk_id);
  }
  for (int s = 0; s < e->nsites; s++) {
    int64_t k = 0;
    uint64_t *ids = malloc(sizeof *ids * (size_t)(R->ndrop + 1));
    if (!ids) return;
    for (int64_t i = 0; i < R->ndrop; i++)
      if (R->drop_site[i] == s || R->drop_site[i] == -1) ids[k++] = R->drop[i];
    if (k && e->sites[s].up) {
      s_phase ph;
      tr_err err;
      tn_wbuf b = {0};
      s_phase_init(&ph, e);
      tn_put_u32(&b, (uint32_t)k);
      for (int64_t i = 0; i < k; i++) tn_put_u64(&b, ids[i]);
      s_request(&ph, s, TN_DROP, &b, 0, NULL, NULL, NULL, &err);
      tn_wbuf_free(&b);
      s_wait(&ph, &err);
      s_phase_free(&ph);
    }
    free(ids);
  }
}

/* R->pl[rel] from the chunk locations of rel (site ids to positions in
** R->up; the primary is the replica reads come from). */
static int s_placed_from_locs(s_run *R, int rel, tr_err *err) {
  te_placed *pl = &R->pl[rel];
  const s_prel *pr = &R->rel[rel];
  te_placed_free(pl);
  pl->has = calloc((size_t)pr->n + 1, sizeof *pl->has);
  pl->prim = calloc((size_t)pr->n + 1, 1);
  if (!pl->has || !pl->prim) return tr_seterr(err, TR_ENOMEM, "out of memory");
  pl->n = pr->n;
  for (int64_t lin = 0; lin < pr->n; lin++) {
    const tc_chunkloc *loc = &pr->locs[lin];
    int h = s_holder(R->e, &R->p->rels[rel].meta, loc);
    pl->prim[lin] = -1;
    for (int u = 0; u < R->m; u++) {
      if (s_has(loc, R->e->sites[R->up[u]].id)) pl->has[lin] |= 1ull << u;
      if (R->up[u] == h) pl->prim[lin] = (int8_t)u;
    }
  }
  return TR_OK;
}

/* A declared-only tensor as FILL would place its zeros (EXPLAIN only). */
static int s_placed_zeros(s_run *R, int rel, tr_err *err) {
  te_placed *pl = &R->pl[rel];
  int64_t n = tc_nchunks(&R->p->rels[rel].meta);
  te_placed_free(pl);
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

static te_result *s_text_result(char *text) {
  te_result *r = text ? calloc(1, sizeof *r) : NULL;
  if (!r) {
    free(text);
    return NULL;
  }
  r->kind = TE_RES_TEXT;
  r->text = text;
  return r;
}

/* The EXPLAIN output of plan p as optimized (o), after a run when R ran. */
static te_result *s_explain_result(s_run *R, const te_opt *o, const te_stmt *x, const char *tra,
                                   double elapsed) {
  char *plan = x->dot ? te_opt_dot(R->p, o) : x->json ? te_opt_json(R->p, o, tra) : te_opt_text(R->p, o, tra);
  if (!plan || x->dot || !x->analyze) {
    if (plan && x->json) {
      char *j = malloc(strlen(plan) + 8);
      if (j) sprintf(j, "{%s}\n", plan);
      free(plan);
      plan = j;
    }
    return s_text_result(plan);
  }
  char *run = s_analyze_text(R, NULL, elapsed, x->json);
  char *all = run ? malloc(strlen(plan) + strlen(run) + 16) : NULL;
  if (all && x->json) sprintf(all, "{%s, %s}\n", plan, run);
  else if (all) sprintf(all, "%s%s", plan, run);
  free(plan);
  free(run);
  return s_text_result(all);
}

int te_dist_run(te_engine *e, te_plan *p, const te_stmt *x, const char *tra, te_result **res,
                tr_err *err) {
  s_run *R = calloc(1, sizeof *R);
  te_opt opt;
  int rc = TR_OK, run = !x || x->analyze;
  memset(&opt, 0, sizeof opt);
  if (!R) return tr_seterr(err, TR_ENOMEM, "out of memory");
  R->e = e;
  R->p = p;
  double t0 = tr_now();
  s_ping(e);
  for (int s = 0; s < e->nsites; s++) {
    e->sites[s].tasks = e->sites[s].floats_in = e->sites[s].floats_out = 0;
    e->sites[s].busy_s = e->sites[s].copy_s = 0;
    e->sites[s].h2d = e->sites[s].d2h = 0;
  }
  R->m = s_up_sites(e, R->up);
  if (!R->m) rc = tr_seterr(err, TR_EIO, "no worker is up");
  /* Where the stored inputs are; declared-only tensors become zeros. */
  for (int i = 0; !rc && i < p->nrels; i++) {
    te_rel *r = &p->rels[i];
    if (r->kind != TE_REL_STORED || r->pending) continue;
    if (r->meta.version == 0 && !run) {
      rc = s_placed_zeros(R, i, err);
      continue;
    }
    if (r->meta.version == 0) {
      te_fill zeros = {TE_FILL_ZEROS, 0, 0, 0};
      rc = s_fill_tasks(R, &r->meta, &zeros, &R->rel[i], 0, err);
    } else {
      rc = tc_chunk_locations(e->db, &r->meta, &R->rel[i].locs, &R->rel[i].n, err);
    }
    if (!rc) rc = s_placed_from_locs(R, i, err);
  }
  if (!rc) rc = te_optimize(p, R->m, s_replication(e, R->m), R->pl, x && x->plan[0] ? x->plan : NULL, &opt, err);
  if (!rc && !run) {
    if (res && !(*res = s_explain_result(R, &opt, x, tra, 0))) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int k = 0; !rc && k < p->nnodes; k++) {
    int out = p->nodes[k].out;
    rc = s_run_node(R, k, &opt.choice[k], err);
    if (rc || p->rels[out].kind != TE_REL_OUTPUT) continue;
    double tc0 = tr_now();
    rc = s_commit(e, &p->rels[out].meta, R->rel[out].locs, R->rel[out].n, err);
    if (!rc) {
      R->rel[out].committed = 1;
      /* Not an IA operator, but where durability costs show: fdatasync
      ** on the workers and the catalog transaction. */
      s_op(R, "commit", p->rels[out].meta.name, 0)->seconds = tr_now() - tc0;
    }
  }
  s_cleanup(R, rc != TR_OK);
  if (!rc && x && res && !(*res = s_explain_result(R, &opt, x, tra, tr_now() - t0)))
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
done:
  te_opt_free(&opt);
  for (int i = 0; i < TE_MAX_RELS; i++) te_placed_free(&R->pl[i]);
  s_run_free(R);
  free(R);
  return rc;
}

int te_dist_fill(te_engine *e, const tc_tensor *t, const te_fill *f, tr_err *err) {
  s_run *R = calloc(1, sizeof *R);
  te_plan *p = calloc(1, sizeof *p);
  int rc = TR_OK;
  if (!R || !p) {
    free(R);
    free(p);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  /* A one-relation plan: the output, made by FILL tasks. */
  p->nrels = 1;
  p->rels[0].kind = TE_REL_OUTPUT;
  p->rels[0].meta = *t;
  R->e = e;
  R->p = p;
  s_ping(e);
  R->m = s_up_sites(e, R->up);
  if (!R->m) rc = tr_seterr(err, TR_EIO, "no worker is up");
  if (!rc) rc = s_fill_tasks(R, t, f, &R->rel[0], 1, err);
  if (!rc) rc = s_commit(e, t, R->rel[0].locs, R->rel[0].n, err);
  s_cleanup(R, rc != TR_OK);
  s_run_free(R);
  free(R);
  free(p);
  return rc;
}

int te_dist_drop(te_engine *e, const char *name, tr_err *err) {
  uint64_t *ids = NULL;
  int64_t n = 0;
  int rc = tc_tensor_drop_placed(e->db, name, &ids, &n, err);
  if (!rc) s_drop_ids(e, ids, n);
  free(ids);
  return rc;
}
