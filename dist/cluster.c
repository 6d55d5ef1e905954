/*
** dist/cluster.c - membership: the workers of a database found, started
** (local ones), greeted and watched (pings, rejoins, restarts, refused
** keys), what each holds reconciled with the catalog, workers added and
** removed without losing a chunk.
*/
#include "config.h"
#include "dist/dist_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_HELLO_TIMEOUT_S 10.0   /* workers must answer HELLO by then */
/* A site's socket tries again to connect after S_RECONNECT_MS, then twice
** as long each time up to S_RECONNECT_MAX_MS (libzmq adds up to
** S_RECONNECT_MS at random to each wait).  A local worker binds its socket
** some 40-50 ms after the shell starts it, after the shell's first try:
** with a fixed 100 ms (the wait was 100-200 ms) a session's workers
** answered HELLO 0.27-0.32 s after it started, its cores idle meanwhile. */
#define S_RECONNECT_MS 5
#define S_RECONNECT_MAX_MS 100

#define S_REJOIN_GRACE_S 0.03  /* a ping waits this long for workers believed down */

#define S_RESTARTS 3           /* a local worker that dies is started again at most this often */

#define S_IDLE_PING_S 1.0      /* te_maintain pings at most this often */
#define S_REAP_S 120.0         /* a stopping local worker is killed after this long
                                  (it has written what it held in memory only
                                  before it is told to stop: td_cluster_close) */

static int s_site_reopen(td_cluster *c, td_site *st, tr_err *err);
static int s_exec_local(td_cluster *c, td_site *st, tr_err *err);
static int s_inventory(td_cluster *c, int only, tr_err *err);

/* Is st a local worker started again that has not answered yet? */
static int s_starting(const td_site *st) { return st->local && st->pid > 0 && !st->answered && !st->up; }

/* Before a statement: which workers are alive now?  Ping every worker and
** wait (at most the liveness window) for the ones believed up; heartbeats
** queued while the shell was idle prove nothing, an echoed ping does.  A
** worker that answers after being down has rejoined: its inventory is
** reconciled with the catalog, and the replicas chunks lack may now be
** made (te_maintain). */
void di_ping(td_cluster *c) {
  di_phase ph;
  tr_err err;
  int rejoined = 0;
  di_drain(c, NULL, 0);
  /* A local worker that exited since the last statement is known at once
  ** and said how, where its silence was waited out (the liveness window)
  ** and the next statement warned only of replicas missing.  One that had
  ** answered before is started again (S_RESTARTS times at most), as one
  ** that died in a statement is: until it is back, the chunks it held
  ** have a replica fewer, and with as many local workers as replicas
  ** nothing could put them back this session.  It rejoins as a restarted
  ** worker does, below. */
  for (int s = 0; s < c->nsites; s++) {
    td_site *st = &c->sites[s];
    tr_err died, why;
    if (st->up) di_local_exited(c, s, &died);
    /* died[] is set until said here, though the death was found in a wait
    ** that did not say it (the shell's maintenance while idle) */
    if (!st->local || st->pid > 0 || !st->died[0]) continue;
    di_local_died(c, s, &died);
    st->died[0] = '\0';
    int again = st->answered && st->restarts < S_RESTARTS;
    if (again && s_exec_local(c, st, &why)) {
      td_notice(c, "cannot start local worker %s again: %s", st->ep, why.msg);
      again = 0;
    }
    if (again) {
      st->restarts++;
      st->answered = 0;
    }
    td_notice(c, "%s; %s", died.msg, again ? "started it again" : "this session goes on without it");
  }
  /* A site down gets a fresh socket before it is pinged (the zguide's
  ** Paranoid Pirate): whatever its old one still queued for it (requests
  ** of statements long failed) must not reach the worker when it is back. */
  for (int s = 0; s < c->nsites; s++)
    if (!c->sites[s].up) s_site_reopen(c, &c->sites[s], &err);
  di_phase_init(&ph, c);
  for (int s = 0; s < c->nsites; s++) di_request(&ph, s, TN_HEARTBEAT, NULL, 0, NULL, NULL, NULL, &err);
  int nbeat = ph.n; /* then what the last statements left to drop */
  di_pending_requests(&ph);
  /* A worker believed down gets a short grace too: one that came back
  ** answers within it, and is seen rejoining now rather than by chance.
  ** One just started again is waited for (as long as the liveness
  ** window), unless it exits first. */
  double t0 = tr_now(), end = t0 + c->live_s;
  for (;;) {
    int waiting = 0, grace = tr_now() < t0 + S_REJOIN_GRACE_S;
    for (int i = 0; i < ph.n; i++) {
      const td_site *st = &c->sites[ph.out[i].site];
      waiting += !ph.out[i].done && (grace || st->up || s_starting(st));
    }
    if (!waiting || tr_now() >= end) break;
    di_drain(c, &ph, 5);
    for (int s = 0; s < c->nsites; s++) {
      td_site *st = &c->sites[s];
      tr_err gone;
      if (s_starting(st) && di_local_exited(c, s, &gone)) {
        td_notice(c, "%s before it answered; this session goes on without it", gone.msg);
        st->died[0] = '\0';
      }
    }
  }
  c->last_ping = tr_now();
  for (int i = 0; i < nbeat; i++) {
    td_site *st = &c->sites[ph.out[i].site];
    /* Back after being down, or a new process in its place: either way
    ** what it holds is reconciled anew. */
    if (ph.out[i].done && (!st->up || st->restarted)) rejoined = 1;
    st->up = ph.out[i].done;
    st->answered |= st->up;
    st->restarted = 0;
  }
  di_phase_free(&ph);
  if (rejoined) {
    s_inventory(c, -1, &err);
    c->repair = 1;
  }
}

static int s_site_open(td_cluster *c, td_site *st, tr_err *err) {
  st->sock = zmq_socket(c->zctx, ZMQ_DEALER);
  if (!st->sock) return tr_seterr(err, TR_EIO, "cannot make a socket: %s", zmq_strerror(errno));
  int linger = 0, hwm = 0, tmo = 30000, ivl = S_RECONNECT_MS, ivl_max = S_RECONNECT_MAX_MS;
  zmq_setsockopt(st->sock, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(st->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(st->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(st->sock, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(st->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
  zmq_setsockopt(st->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
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
  if (!rc && zmq_connect(st->sock, st->ep) != 0) {
    int e = errno; /* EINVAL: not an endpoint at all, such as a bare host name */
    rc = tr_seterr(err, TR_EIO, "cannot connect to worker %s: %s%s", st->ep, zmq_strerror(e),
                   e == EINVAL || e == EPROTONOSUPPORT ? " (an endpoint is written tcp://HOST:PORT)" : "");
  }
  return rc;
}

/* A new socket (and monitor) for site st in place of its old ones; on
** failure the old ones stay. */
static int s_site_reopen(td_cluster *c, td_site *st, tr_err *err) {
  td_site fresh = *st;
  fresh.sock = fresh.mon = NULL;
  int rc = s_site_open(c, &fresh, err);
  if (rc) {
    if (fresh.sock) zmq_close(fresh.sock);
    if (fresh.mon) zmq_close(fresh.mon);
    return rc;
  }
  zmq_close(st->sock);
  if (st->mon) zmq_close(st->mon);
  st->sock = fresh.sock;
  st->mon = fresh.mon;
  return TR_OK;
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

/* What a worker's HELLO_OK says beyond its process: the memory it keeps
** within (--memory), for the scheduler, the file system its data is on,
** for which copies are synced (di_keep_at; "" if unknown), and the bytes
** free there (di_disk_room). */
static void s_hello_said(td_site *st, di_phase *ph, int i) {
  tn_rbuf r;
  char skip[TC_ENDPOINT_MAX];
  di_reply_body(ph, i, &r);
  tn_get_str(&r, skip, sizeof skip);
  tn_get_u32(&r);
  tn_get_str(&r, skip, sizeof skip);
  tn_get_u64(&r);
  int64_t mem = (int64_t)tn_get_u64(&r);
  tn_get_str(&r, st->fs, sizeof st->fs);
  uint64_t room = tn_get_u64(&r);
  int ok = tn_rbuf_ok(&r) == TR_OK;
  st->memory = ok ? mem : 0;
  if (!ok) st->fs[0] = '\0';
  di_disk_said(st, ok ? room : UINT64_MAX);
}

/* Say HELLO to every site and wait for the answers (sites that do not
** answer in time stay down; it is an error only if none answers).  A site
** that refuses our credentials is known at once, not at the timeout. */
static int s_hello_all(td_cluster *c, double timeout_s, tr_err *err) {
  di_phase ph;
  di_phase_init(&ph, c);
  tn_wbuf b = {0};
  tn_put_str(&b, "tradb shell");
  int rc = TR_OK, ndied = 0;
  tr_err died; /* the first local worker that exited before it answered */
  char *gone = calloc((size_t)c->nsites + 1, 1); /* [i]: request i's local worker exited */
  if (!gone) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int s = 0; s < c->nsites && !rc; s++) rc = di_request(&ph, s, TN_HELLO, &b, 0, NULL, NULL, NULL, err);
  tn_wbuf_free(&b);
  double end = tr_now() + timeout_s, resend = tr_now() + TN_HEARTBEAT_MS / 1000.0;
  while (!rc && tr_now() < end && !tr_cancelled(c->interrupt)) {
    int pending = 0;
    for (int i = 0; i < ph.n; i++)
      pending += !ph.out[i].done && !gone[i] && !s_refused(&c->sites[ph.out[i].site], &c->keys);
    if (!pending) break;
    di_drain(c, &ph, 50);
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
    /* A local worker that exited will never answer: the others may, and
    ** the replicas do without it; why it exited is said below. */
    for (int i = 0; i < ph.n; i++) {
      tr_err e;
      if (!ph.out[i].done && !gone[i] && di_local_exited(c, ph.out[i].site, &e)) {
        gone[i] = 1;
        if (!ndied++) died = e;
      }
    }
  }
  int up = 0;
  for (int i = 0; i < ph.n; i++) {
    c->sites[ph.out[i].site].up = ph.out[i].done && ph.out[i].reply.type == TN_HELLO_OK;
    c->sites[ph.out[i].site].answered |= c->sites[ph.out[i].site].up;
    c->sites[ph.out[i].site].restarted = 0; /* the process that said HELLO_OK is the one we know */
    up += c->sites[ph.out[i].site].up;
    if (c->sites[ph.out[i].site].up) s_hello_said(&c->sites[ph.out[i].site], &ph, i);
  }
  di_phase_free(&ph);
  free(gone);
  if (!rc && ndied && !up) { /* every one gone: why the first went */
    *err = died;
    rc = died.code;
  } else if (!rc && ndied) {
    td_notice(c, "%s; this session goes on without %s", died.msg, ndied == 1 ? "it" : "them");
  }
  for (int s = 0; s < c->nsites; s++) c->sites[s].died[0] = '\0'; /* said: not started again */
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

/* A new zeroed site at the end of c->sites for endpoint ep, or NULL.
** The optimizer places on at most TO_MAX_SITES (a site set is a 64-bit
** mask): a larger cluster is refused here, where 99 local workers used to
** start and their first statement overran the layout search's arrays. */
static td_site *s_site_new(td_cluster *c, const char *ep, tr_err *err) {
  if (c->nsites >= TO_MAX_SITES) {
    tr_seterr(err, TR_EINVAL, "a cluster has at most %d workers: %s would be worker %d", TO_MAX_SITES, ep,
              c->nsites + 1);
    return NULL;
  }
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

/* Tell local worker pid to stop.  A worker stopped by a signal
** (SIGSTOP, a job-control stop) keeps SIGTERM pending until it is
** continued, and the shell would wait S_REAP_S for it, then kill it with
** what it holds in memory only: it is continued, to stop as asked. */
static void s_stop_local(pid_t pid) {
  kill(pid, SIGTERM);
  kill(pid, SIGCONT);
}

/* Wait for local worker pid, told to stop: it stops within a poll
** interval once it has written to disk the chunks it held in memory only
** (SET synchronous = normal), but is not waited for forever.  Its pidfd
** wakes us as it exits (a 10 ms sleep between looks made every session's
** close wait 10-20 ms longer than its workers took); without one, we look
** every 10 ms. */
static void s_reap(td_cluster *c, pid_t pid) {
  int st;
  double end = tr_now() + c->reap_s;
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  while (waitpid(pid, &st, WNOHANG) == 0) {
    double left = end - tr_now();
    if (left <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      break;
    }
    if (fd >= 0) {
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      poll(&pf, 1, left < 1.0 ? (int)(left * 1000) + 1 : 1000);
    } else {
      usleep(10000);
    }
  }
  if (fd >= 0) close(fd);
}

/* Disconnect site index k (stopping it if it is a local worker) and take
** it out of c->sites, keeping the others in order. */
static void s_site_drop(td_cluster *c, int k) {
  td_site *st = &c->sites[k];
  zmq_close(st->sock);
  if (st->mon) zmq_close(st->mon);
  if (st->pid > 0) {
    s_stop_local(st->pid);
    s_reap(c, st->pid);
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

/* Start the process of local worker st (number st->local - 1, one of
** c->local_of sharing this machine), as c->local_cfg says: its endpoint
** an ipc socket under workdir, its store workdir/w<idx>, its log
** workdir/w<idx>.log. */
static int s_exec_local(td_cluster *c, td_site *st, tr_err *err) {
  const td_config *cfg = &c->local_cfg;
  int idx = st->local - 1, of = c->local_of;
  char exe[4096];
  const char *self = cfg->self_exe;
  if (!self) {
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return tr_seterr(err, TR_EIO, "cannot find the tradb binary to start workers");
    exe[k] = '\0';
    self = exe;
  }
  /* Two kernel threads a core among the local workers, so that a core
  ** one worker leaves idle is taken by another's thread: while it waits
  ** on its store or a peer between chunk tasks, at its phase's end, or
  ** when the host slows its core.  With one thread a core, each worker's
  ** share of a phase is fixed to its core.  On 2 cores, 2 workers, in
  ** sessions alternating pass by pass with PyTorch, 12 of the 13 timed
  ** suite workloads ran faster (chain3-mixed 1.11x PyTorch -> 1.03x,
  ** mm-two-large 1.07x -> 0.97x).  Four threads a core (4 workers x 2)
  ** widened bench-opt's spread over declared chunkings from 1.16-1.47x
  ** to 1.41-2.69x (the dense layer's slowest chunking 0.016 s -> 0.039 s)
  ** and put fewer predictions within 2x (106 of 134 against 136 of 143). */
  int per = 2 * tr_ncores() / of;
  if (cfg->threads > 0) per = cfg->threads;
  if (per < 1) per = 1;
  /* A worker holds scratch chunks in up to 1/8 of the machine's memory by
  ** default; local workers share one machine, so they share that. */
  char memory[32];
  int64_t share = tr_phys_memory() / 8 / of;
  snprintf(memory, sizeof memory, "%lld", (long long)(share > (1 << 20) ? share : 1 << 20));
  /* A local worker of a killed shell can still be bound to this socket
  ** while it stops: we must not reach it (it would answer, then vanish
  ** with our requests).  Only this database's shell uses the path (the
  ** catalog is locked), and the new worker binds it afresh. */
  unlink(st->ep + 6);
  char data[sizeof c->workdir + 24], logf[sizeof c->workdir + 24], threads[16];
  snprintf(data, sizeof data, "%s/w%d", c->workdir, idx);
  snprintf(logf, sizeof logf, "%s/w%d.log", c->workdir, idx);
  snprintf(threads, sizeof threads, "%d", per);
  pid_t shell = getpid(), pid = fork();
  if (pid < 0) return tr_seterr(err, TR_EIO, "cannot start a worker: %s", strerror(errno));
  if (pid == 0) {
    /* A local worker lives and dies with its shell, even a killed one,
    ** but the terminal's signals are the shell's: Ctrl-C cancels a
    ** statement, it must not stop the workers.  Hence its own session.
    ** A shell killed before the death signal was asked for sends none:
    ** then the worker is an orphan already, and stops here (one started
    ** as its shell was killed lived on, holding the shell's stdout open,
    ** so that whoever read the shell's output never saw its end). */
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != shell) _exit(0);
    int fd = open(logf, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) dup2(fd, 2);
    /* its log is its stderr; nothing of it goes to the shell's stdout,
    ** whose readers wait for every holder to close it */
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
      dup2(nul, 0);
      dup2(nul, 1);
      if (nul > 1) close(nul);
    }
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
  return TR_OK;
}

/* c->local_cfg's strings, in one list for s_keep_local_cfg and
** s_free_local_cfg */
#define S_LOCAL_CFG_STRS(k) {&(k)->backend, &(k)->keys, &(k)->self_exe, &(k)->device, &(k)->gpu_memory}

/* Keep cfg's settings for local workers in c->local_cfg, its strings
** copied (the caller's may not outlive the open). */
static int s_keep_local_cfg(td_cluster *c, const td_config *cfg, tr_err *err) {
  const char **to[] = S_LOCAL_CFG_STRS(&c->local_cfg), *const *from[] = S_LOCAL_CFG_STRS(cfg);
  c->local_cfg.threads = cfg->threads;
  for (size_t i = 0; i < sizeof to / sizeof *to; i++)
    if (*from[i] && !(*to[i] = strdup(*from[i]))) return tr_seterr(err, TR_ENOMEM, "out of memory");
  return TR_OK;
}

static void s_free_local_cfg(td_cluster *c) {
  const char **k[] = S_LOCAL_CFG_STRS(&c->local_cfg);
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) free((char *)*k[i]);
}

/* Start local worker number idx (s_exec_local) as a new site. */
static int s_spawn_local(td_cluster *c, int idx, tr_err *err) {
  char ep[TC_ENDPOINT_MAX];
  if (mkdir(c->workdir, 0700) != 0 && errno != EEXIST)
    return tr_seterr(err, TR_EIO, "cannot create '%s': %s", c->workdir, strerror(errno));
  if (snprintf(ep, sizeof ep, "ipc://%s/w%d.ipc", c->workdir, idx) >= (int)sizeof ep ||
      strlen(c->workdir) > 90)
    return tr_seterr(err, TR_EINVAL, "database path too long for local worker sockets: %s",
                     c->workdir);
  td_site *st = s_site_new(c, ep, err);
  if (!st) return err->code;
  st->local = idx + 1;
  int rc = s_exec_local(c, st, err);
  return rc ? rc : s_site_join(c, st, err);
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
** and is dropped.  A worker never drops a chunk on its own.  One that
** dies meanwhile is down: the others are reconciled, and it is when it
** rejoins (di_ping), as a shell opening the database must not fail for a
** worker that the replicas can do without. */
static int s_inventory(td_cluster *c, int only, tr_err *err) {
  di_phase ph;
  uint64_t **drop = calloc((size_t)c->nsites + 1, sizeof *drop); /* per site: to drop */
  int64_t *ndrop = calloc((size_t)c->nsites + 1, sizeof *ndrop);
  int rc = drop && ndrop ? TR_OK : tr_seterr(err, TR_ENOMEM, "out of memory");
  di_phase_init(&ph, c);
  for (int s = 0; s < c->nsites && !rc; s++) {
    uint64_t *ids = NULL;
    int64_t n = 0;
    if (!c->sites[s].up || (only >= 0 && s != only)) continue;
    if ((rc = tc_site_chunks(c->db, c->sites[s].id, &ids, &n, err))) break;
    tn_wbuf b = {0};
    tn_put_u32(&b, (uint32_t)n);
    for (int64_t i = 0; i < n; i++) tn_put_u64(&b, ids[i]);
    free(ids);
    rc = di_request(&ph, s, TN_INVENTORY, &b, 0, NULL, NULL, NULL, err);
    tn_wbuf_free(&b);
  }
  if (!rc) rc = di_wait_ex(&ph, 1, err);
  for (int i = 0; !rc && i < ph.n; i++) {
    int s = ph.out[i].site;
    tn_rbuf r;
    if (ph.out[i].done != 1) continue; /* no reply: down now */
    uint64_t chunk;
    if (ph.out[i].reply.type == TN_ERROR) {
      rc = di_reply_error(&ph, i, &chunk, err);
      break;
    }
    di_reply_body(&ph, i, &r);
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
    for (uint32_t k = 0; !rc && k < nmiss; k++) di_note_lost(c, c->sites[s].id, miss[k]);
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
  di_phase_free(&ph);
  if (!rc) di_drop_each(c, -1, NULL, 0, drop, ndrop, c->nsites, 1);
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
  ** recorded one that holds chunks; by default one a core, up to as many
  ** as the optimizer places on. */
  int nlocal = c->nsites || rc ? 0 : cfg->local_workers > 0 ? cfg->local_workers : tr_ncores();
  if (cfg->local_workers <= 0 && nlocal > TO_MAX_SITES) nlocal = TO_MAX_SITES;
  if (nlocal > TO_MAX_SITES)
    rc = tr_seterr(err, TR_EINVAL, "%d local workers asked for: a cluster has at most %d", nlocal, TO_MAX_SITES);
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
  for (int i = 0; want && i < top; i++) c->local_of += want[i];
  if (!rc && c->local_of) rc = s_keep_local_cfg(c, cfg, err);
  for (int i = 0; want && i < top && !rc; i++)
    if (want[i]) rc = s_spawn_local(c, i, err);
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
  /* TRADB_TEST_FORGOT_S: another DI_FORGOT_S (tests: 0 syncs after every
  ** statement, a large one only when the shell waits or closes) */
  const char *forgot_s = getenv("TRADB_TEST_FORGOT_S");
  c->forgot_s = forgot_s ? atof(forgot_s) : DI_FORGOT_S;
  /* TRADB_TEST_REAP_S: another S_REAP_S (tests: a worker killed at once
  ** when it has not stopped) */
  const char *reap_s = getenv("TRADB_TEST_REAP_S");
  c->reap_s = reap_s ? atof(reap_s) : S_REAP_S;
  /* TRADB_TEST_LIVENESS_S: another liveness window (tests: a worker
  ** killed and started again within it on a loaded machine) */
  const char *live_s = getenv("TRADB_TEST_LIVENESS_S");
  c->live_s = live_s && atof(live_s) > 0 ? atof(live_s) : TN_LIVENESS_S;
  /* TRADB_TEST_REPAIR_BYTES: another DI_REPAIR_BYTES (tests: a repair of
  ** small chunks that takes many rounds) */
  const char *repair_bytes = getenv("TRADB_TEST_REPAIR_BYTES");
  c->repair_bytes = repair_bytes && atoll(repair_bytes) > 0 ? (uint64_t)atoll(repair_bytes) : DI_REPAIR_BYTES;
  int rc = s_open(c, cfg, err);
  if (rc) td_cluster_close(&c);
  *out = c;
  return rc;
}

void td_cluster_close(td_cluster **pc) {
  td_cluster *c = pc ? *pc : NULL;
  if (!c) return;
  *pc = NULL;
  /* Local workers are stopped below, and one still writing when it is
  ** killed (S_REAP_S) loses what it held in memory only, every replica of
  ** a chunk when they all were: so they write and sync it first, while
  ** they answer, however long that takes (250,000 chunks made by a FILL
  ** took two workers 170 s, and the one killed at 120 s lost 81,612 of
  ** its copies).  The catalog is synced and what it forgot dropped before
  ** (s_sync_all), or they would write that too.  The shell does it before
  ** (te_write_held), where it says why it failed; this one finds nothing
  ** left then. */
  tr_err err;
  td_sync_local(c, NULL, &err);
  for (int s = 0; s < c->nsites; s++) {
    if (c->sites[s].sock) zmq_close(c->sites[s].sock);
    if (c->sites[s].mon) zmq_close(c->sites[s].mon);
    if (c->sites[s].pid > 0) s_stop_local(c->sites[s].pid);
  }
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].pid > 0) s_reap(c, c->sites[s].pid);
  free(c->sites);
  c->sites = NULL;
  c->nsites = 0;
  if (c->zctx) zmq_ctx_term(c->zctx);
  c->zctx = NULL;
  if (c->keys.on) tn_zap_stop();
  free(c->lost);
  free(c->forgot);
  free(c->pend);
  free(c->pend_site);
  free(c->notice);
  s_free_local_cfg(c);
  free(c);
}

int td_workers(td_cluster *c, td_worker_stat **out, int *n, tr_err *err) {
  di_phase ph;
  *out = NULL;
  *n = 0;
  di_ping(c);
  di_phase_init(&ph, c);
  int rc = TR_OK;
  for (int s = 0; s < c->nsites && !rc; s++)
    if (c->sites[s].up) rc = di_request(&ph, s, TN_STATS, NULL, 0, NULL, NULL, NULL, err);
  double end = tr_now() + 2.0;
  while (!rc && tr_now() < end) {
    int pending = 0;
    for (int i = 0; i < ph.n; i++) pending += !ph.out[i].done;
    if (!pending) break;
    di_drain(c, &ph, 50);
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
        di_reply_body(&ph, i, &b);
        w->tasks = tn_get_u64(&b);
        w->chunks = tn_get_u64(&b);
        w->bytes_held = tn_get_u64(&b);
        w->bytes_sent = tn_get_u64(&b);
        w->bytes_received = tn_get_u64(&b);
        tn_get_str(&b, w->kernels, sizeof w->kernels);
        uint64_t room = tn_get_u64(&b);
        w->up = tn_rbuf_ok(&b) == TR_OK;
        if (w->up) di_disk_said(&c->sites[s], room);
      }
  }
  di_phase_free(&ph);
  if (rc) return rc;
  *out = v;
  *n = c->nsites;
  return TR_OK;
}

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

int td_maintain(td_cluster *c, double budget_s, tr_err *err) {
  double end = tr_now() + budget_s;
  di_flush(c, 0);
  /* A returning worker is noticed by a ping (which then reconciles it);
  ** right after a statement, its own ping is recent enough. */
  if (tr_now() - c->last_ping >= S_IDLE_PING_S) di_ping(c);
  while (c->repair) {
    int rc = di_repair(c, err);
    if (rc < 0) return rc; /* stays set: tried again later */
    if (rc == 0) c->repair = 0;
    if (tr_now() >= end) break;
  }
  return c->repair;
}

void td_sync(td_cluster *c) { di_flush(c, 1); }

int td_worker_add(td_cluster *c, const char *ep, tr_err *err) {
  di_drop_pending(c); /* local workers holding nothing may stop below */
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
static int s_removal_copies(td_cluster *c, int gone, int64_t sid, di_copy **out, int64_t *nout,
                            int64_t *lost, char *names, size_t cap, tr_err *err) {
  int up[256], m = 0;
  tc_chunkref *refs = NULL;
  int64_t n = 0, nc = 0;
  *out = NULL;
  *nout = *lost = 0;
  names[0] = '\0';
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].up && s != gone && m < 256) up[m++] = s;
  int target = m ? di_replication(c, m) : 0, rc = tc_chunks_select(c->db, sid, 0, &refs, &n, err);
  di_copy *cp = rc ? NULL : malloc(((size_t)n * TC_MAX_REPLICAS + 1) * sizeof *cp);
  if (!rc && !cp) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int64_t i = 0; !rc && i < n; i++) {
    const tc_chunkloc *l = &refs[i].loc;
    int others = l->nsites - 1, src = gone >= 0 && c->sites[gone].up ? gone : -1;
    for (int k = 0; k < l->nsites; k++) {
      int h = di_site_index(c, l->site[k]);
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
      if (di_has(l, c->sites[d].id)) continue;
      cp[nc++] = (di_copy){l->chunk_id, l->nbytes, src, d};
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
  di_copy *cp = NULL;
  char names[400];
  for (int i = 0; !rc && i < nrec; i++)
    if (!strcmp(rec[i].endpoint, ep)) sid = rec[i].id;
  free(rec);
  if (rc) return rc;
  if (!sid) return tr_seterr(err, TR_ENOTFOUND, "no such worker: %s", ep);
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].id == sid) gone = s;
  di_ping(c);
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
  if (nc && (rc = di_copy_chunks(c, cp, nc, err))) {
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
    di_drop_ids(c, gone, ids, nids);
    s_site_drop(c, gone);
  }
  free(ids);
  td_notice(c, "worker %s removed; %lld cop%s of its chunks made on the other workers first", ep,
            (long long)nc, nc == 1 ? "y" : "ies");
  return TR_OK;
}
