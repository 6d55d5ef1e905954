/*
** engine/worker.c - `tradb --worker`: a site of the implementation algebra.
**
** A worker holds chunks in its store (catalog/ tc_store: checksummed
** files, durable on SYNC), runs the kernel tasks it is sent (tx_node_run
** over its own chunks), and pushes chunks straight to other workers when
** told to (SEND): the coordinator never relays chunk data between workers.
**
** Threads: the main thread owns every ZeroMQ socket and never blocks on
** work and never touches the disk: it answers HELLO / HEARTBEAT / STATS
** itself, queues TASK and SYNC for the task thread, which posts the reply
** back through an inproc pair, and hands PUT, GET, SEND, DROP and INVENTORY
** (their frames moved, not copied) to the store thread, which writes,
** reads or removes their chunks and wakes the main loop through the push
** pipe to send what it read.  So a worker keeps heartbeating while it computes,
** and while its disk is slow: with hundreds of megabytes of dirty pages
** the kernel throttles a writer for seconds, longer than the
** coordinator's liveness window.  Peers are reached through one DEALER
** socket each, opened on first use; a SEND is answered once every peer
** confirmed its PUT.
**
** Databases: every request names its database (the id of its catalog),
** and each database's chunks live in a store of their own,
** DATA/db-<16 hex digits>, opened on first use: one worker serves several
** databases, and a coordinator sees and drops only its own database's
** chunks.  Chunk files in DATA itself (the layout before per-database
** stores) are served to no one until a database's INVENTORY lists them:
** they then move into that database's store.  The worker never drops a
** chunk on its own; the coordinator decides from what INVENTORY reports.
**
** Failures: a malformed message is logged and dropped; a coordinator that
** goes away is simply no longer answered, and a new one may say HELLO.
** A chunk that fails its checksum when read is set aside by the store
** and the error reply names it, so the coordinator can forget that
** replica, repair it from a good one and retry.
**
** Cancellation: a TASK carries a cancel token of its own, which its
** kernels poll.  A CANCEL stops the running task of the coordinator that
** sent it (through that token) and drops its queued TASKs and SYNCs; a
** coordinator silent for the liveness window (its shell was killed or cut
** off) gets the same, so no work outlives the statement it is for.
** SIGTERM and SIGINT cancel the running task and stop the worker.
*/
#include "config.h"
#include "worker/worker.h"
#include "exec/exec.h"
#include "catalog/catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_PEERS 64
#define S_MAX_DBS 64          /* databases one worker serves */
#define S_SEND_TIMEOUT_S 30.0 /* a peer that has not confirmed by then fails the SEND */
#define S_TRIM_IDLE_S 2.0     /* idle this long, a worker returns free memory */

static volatile sig_atomic_t s_stop = 0;

/* SIGTERM, SIGINT: the main loop notices at once or within a poll interval
** and cancels the running task (a handler cannot take the queue's lock). */
static void s_on_signal(int sig) {
  (void)sig;
  s_stop = 1;
}

static const char *s_ep = "";

static void s_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void s_log(const char *fmt, ...) {
  char ts[32];
  time_t now = time(NULL);
  struct tm tmv;
  strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", gmtime_r(&now, &tmv));
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s tradb worker %s: ", ts, s_ep);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- Malformed messages: one log line per peer per interval --------------- */

/* A peer sending garbage (a scanner, a tradb of another protocol version)
** must not fill the log at the rate it sends: a peer's first malformed
** message is logged with its reason, the ones after it are only counted,
** and the count is logged once the interval since that line has passed. */
#define S_DROP_PEERS 32 /* peers followed at once; a new one evicts the stalest */

typedef struct s_drop {
  uint8_t route[256]; /* the peer's routing id */
  size_t route_len;   /* its length */
  int used;           /* slot in use */
  double since;       /* when this peer's last line was logged */
  int64_t count;      /* dropped since then, not yet logged */
  char why[128];      /* the reason for the last of them */
} s_drop;

static s_drop s_drops[S_DROP_PEERS];
static double s_drop_every = 60.0; /* seconds; TRADB_TEST_DROP_LOG_S for tests */

/* The routing id in hex (a ZeroMQ one is 5 bytes), at most 16 bytes shown. */
static const char *s_drop_peer(const s_drop *d, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < d->route_len && i < 16 && o + 3 < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%02x", d->route[i]);
  if (d->route_len > 16 && o + 4 < n) snprintf(buf + o, n - o, "...");
  return d->route_len ? buf : "?";
}

/* Log the count of d (if any) and start a new interval at now. */
static void s_drop_flush(s_drop *d, double now) {
  char peer[40];
  if (d->count)
    s_log("dropped %lld more malformed message%s from peer %s since the last report (last: %s)",
          (long long)d->count, d->count == 1 ? "" : "s", s_drop_peer(d, peer, sizeof peer), d->why);
  d->count = 0;
  d->since = now;
}

/* One malformed message from in's sender (tn_recv leaves in->route). */
static void s_drop_note(const tn_in *in, const char *why, double now) {
  s_drop *d = NULL, *stalest = &s_drops[0];
  char peer[40];
  for (int i = 0; i < S_DROP_PEERS && !d; i++) {
    s_drop *e = &s_drops[i];
    if (e->used && e->route_len == in->route_len && !memcmp(e->route, in->route, in->route_len))
      d = e;
    else if (!e->used || (stalest->used && e->since < stalest->since))
      stalest = e;
  }
  if (d) {
    d->count++;
    snprintf(d->why, sizeof d->why, "%.*s", (int)sizeof d->why - 1, why);
    if (now - d->since >= s_drop_every) s_drop_flush(d, now);
    return;
  }
  d = stalest;
  if (d->used) s_drop_flush(d, now);
  memcpy(d->route, in->route, in->route_len);
  d->route_len = in->route_len;
  d->used = 1;
  d->count = 0;
  d->since = now;
  s_log("dropped malformed message from peer %s: %s (more from this peer: a count every %g s)",
        s_drop_peer(d, peer, sizeof peer), why, s_drop_every);
}

/* Log the counts whose interval has passed (all of them when all != 0), and
** forget the peers quiet for a whole interval. */
static void s_drop_tick(double now, int all) {
  for (int i = 0; i < S_DROP_PEERS; i++) {
    s_drop *d = &s_drops[i];
    if (!d->used || (!all && now - d->since < s_drop_every)) continue;
    if (!d->count) d->used = 0;
    s_drop_flush(d, now);
  }
}

/* ---- The worker ---------------------------------------------------------- */

struct s_job;

/* A SEND (or a task's replica push) waiting for its peers' confirmations. */
typedef struct s_pending {
  struct s_job *job;        /* replica push: the task it belongs to; NULL: a SEND */
  uint64_t my_req;          /* request id used towards the peers */
  uint8_t route[256];       /* who asked */
  size_t route_len;         /* its length */
  uint64_t req;             /* their request id */
  uint64_t db;              /* database the chunks belong to */
  int waiting;              /* confirmations still due */
  uint64_t bytes;           /* bytes sent */
  double deadline;          /* when to give up */
  int failed;               /* a peer answered with an error */
  char why[sizeof(((tr_err *)0)->msg) + 300]; /* that error */
  struct s_pending *next;   /* list */
} s_pending;

/* A chunk read from the store to be sent (GET, SEND). */
typedef struct s_out_chunk {
  tn_chunk c;               /* id, dtype, size, checksum */
  void *data;               /* its bytes (malloc), until handed to ZeroMQ */
  char ep[TC_ENDPOINT_MAX]; /* SEND: the peer it goes to */
} s_out_chunk;

/* A job for the task or store thread, and its reply. */
typedef struct s_job {
  int type;                 /* TN_TASK, TN_SYNC, or TN_PUT / TN_GET / TN_SEND */
  tn_in in;                 /* store jobs: the request's frames (moved) */
  uint64_t recv;            /* TN_PUT: bytes stored */
  s_out_chunk *out;         /* TN_GET, TN_SEND: the chunks read */
  uint32_t nout;            /* their number */
  uint8_t route[256];       /* requester */
  size_t route_len;         /* its length */
  uint64_t req;             /* request id */
  uint64_t db;              /* database (the request's) */
  tc_store *store;          /* its store (NULL: it has none here yet) */
  void *body;               /* request body (copied) */
  size_t body_len;          /* its length */
  int rtype;                /* reply type (TN_ERROR: code and msg) */
  tn_wbuf reply;            /* reply body */
  atomic_int pushing;       /* replica pushes not yet confirmed: raised by
                               kernel threads, lowered by the main loop */
  int push_failed;          /* a replica push failed */
  char push_why[sizeof(((tr_err *)0)->msg) + 300]; /* why */
  int code;                 /* TN_ERROR: status */
  char msg[sizeof(((tr_err *)0)->msg) + 300]; /* TN_ERROR: message */
  _Atomic uint64_t bad;     /* TN_ERROR: a chunk that failed its checksum */
  tr_cancel cancel;         /* TN_TASK: set to stop it (its kernels poll) */
  double heard;             /* TN_TASK, TN_SYNC: when its coordinator last
                               sent anything (under mu) */
  struct s_job *next;       /* queue */
} s_job;

typedef struct s_worker {
  const tw_config *cfg; /* options */
  const tk_backend *kt;        /* kernels */
  int threads;                 /* kernel threads */
  tc_store *root;              /* DATA itself: holds the directory lock, and
                                  chunk files of the layout before
                                  per-database stores */
  pthread_mutex_t db_mu;       /* guards the two below */
  int ndbs;                    /* databases seen */
  struct {
    uint64_t id;               /* database id */
    tc_store *store;           /* its store, DATA/db-<id> */
  } dbs[S_MAX_DBS];
  tn_keys keys;                /* CURVE keys */
  void *ctx;                   /* ZeroMQ context */
  void *router;                /* our endpoint */
  void *notify_rx;             /* task thread -> main: "a reply is ready" */
  int npeers;                  /* peer sockets */
  char peer_ep[S_MAX_PEERS][TC_ENDPOINT_MAX]; /* their endpoints */
  void *peer[S_MAX_PEERS];     /* DEALER sockets */
  s_pending *pending;          /* SENDs in flight */
  uint64_t next_req;           /* request ids towards peers */
  uint64_t incarnation;        /* random per process: in HELLO_OK and heartbeats */
  uint8_t coord[256];          /* last coordinator's route, for heartbeats */
  size_t coord_len;            /* its length (0: none yet) */
  /* counters (.workers) */
  uint64_t tasks, bytes_sent, bytes_recv;
  /* task thread */
  pthread_t tid;               /* the thread */
  pthread_mutex_t mu;          /* guards the queues */
  pthread_cond_t cv;           /* work arrived or stop */
  s_job *todo, *todo_tail;     /* jobs waiting */
  s_job *running;              /* the job the task thread runs, or NULL */
  s_job *done;                 /* replies ready */
  int quit;                    /* stop the task and store threads */
  /* store thread: PUT, GET, SEND, DROP and INVENTORY, so a slow disk does not
  ** stall the main loop */
  pthread_t io_tid;            /* the thread */
  int io_started;              /* it runs */
  pthread_cond_t io_cv;        /* a store job arrived, or stop */
  int slow_store_ms;           /* TRADB_TEST_SLOW_STORE_MS: a slow disk, for tests */
  s_job *io_todo, *io_tail;    /* store jobs waiting (under mu) */
  /* replica pushes: kernel threads queue output chunks, the main loop
  ** sends them (it owns the sockets); a pipe wakes it up */
  struct s_push *pushq;        /* queued pushes (under mu) */
  int wake[2];                 /* pipe: kernel threads -> main loop */
  s_job *held;                 /* finished tasks waiting for their pushes */
  double last_busy;            /* when the last request came or work ended */
  int trimmed;                 /* free memory given back since then */
} s_worker;

/* How s_store_for finds a database's store. */
enum {
  S_OPEN_NONE,   /* only one already open (the main thread: opening reads
                    every chunk file) */
  S_OPEN_EXISTS, /* open it if its directory exists */
  S_OPEN_CREATE  /* open or create it (a request that writes) */
};

/* The store of database db, DATA/db-<id>, found or opened as `how` says.
** NULL with err set when there is none or it cannot be opened.  Stores
** stay open until the worker stops, so the pointer may be kept. */
static tc_store *s_store_for(s_worker *w, uint64_t db, int how, tr_err *err) {
  char dir[4200];
  struct stat st;
  tc_store *found = NULL;
  if (!db) {
    tr_seterr(err, TR_EINVAL, "request names no database");
    return NULL;
  }
  pthread_mutex_lock(&w->db_mu);
  for (int i = 0; i < w->ndbs && !found; i++)
    if (w->dbs[i].id == db) found = w->dbs[i].store;
  snprintf(dir, sizeof dir, "%s/db-%016" PRIx64, w->cfg->data, db);
  if (found) {
  } else if (how == S_OPEN_NONE || (how == S_OPEN_EXISTS && stat(dir, &st) != 0)) {
    tr_seterr(err, TR_ENOTFOUND, "worker %s holds nothing of database %016" PRIx64, s_ep, db);
  } else if (w->ndbs == S_MAX_DBS) {
    tr_seterr(err, TR_EINVAL, "worker %s already serves %d databases", s_ep, S_MAX_DBS);
  } else if (tc_store_open(dir, &found, err) == TR_OK) {
    if (w->cfg->memory > 0) {
      /* the files kept for reuse follow the same share, as by default */
      int64_t m = w->cfg->memory;
      tc_store_set_scratch(found, m);
      tc_store_set_recycle(found, m / 2 < ((int64_t)1 << 30) ? m / 2 : (int64_t)1 << 30);
    }
    w->dbs[w->ndbs].id = db;
    w->dbs[w->ndbs++].store = found;
  }
  pthread_mutex_unlock(&w->db_mu);
  return found;
}

/* Note activity: the worker is not idle. */
static void s_busy(s_worker *w) {
  w->last_busy = tr_now();
  w->trimmed = 0;
}

/* Give free heap memory back to the system once the worker has been idle
** for S_TRIM_IDLE_S: between statements the heap is kept (the next one
** reuses it), but a worker left idle should not hold its peak. */
static void s_trim_when_idle(s_worker *w) {
  if (w->trimmed || tr_now() - w->last_busy < S_TRIM_IDLE_S) return;
  malloc_trim(0);
  w->trimmed = 1;
}

/* An output chunk to push to the task's replica workers. */
typedef struct s_push {
  tn_chunk c;                  /* the chunk: id, dtype, size, checksum */
  void *data;                  /* a copy of its bytes (malloc): the main
                                  loop sends it without reading the store */
  s_job *job;                  /* task it belongs to (and its database) */
  int nrep;                    /* peers */
  char rep[TC_MAX_REPLICAS][TC_ENDPOINT_MAX]; /* their endpoints */
  struct s_push *next;         /* queue */
} s_push;

static int s_reply(s_worker *w, const uint8_t *route, size_t rl, int type, uint64_t req,
                   uint64_t db, const tn_wbuf *body, int ndata, void *const *data,
                   const size_t *len, tn_free_fn *fr) {
  tr_err err;
  int rc = tn_send(w->router, route, rl, type, req, db, body, ndata, data, len, fr, NULL, &err);
  if (rc) s_log("cannot reply %s: %s", tn_type_name(type), err.msg);
  return rc;
}

static void s_free_buf(void *data, void *hint) {
  (void)hint;
  free(data);
}

/* Chunk source and sink of a node task over the store. */
typedef struct s_taskio {
  s_worker *w;        /* worker */
  s_job *job;         /* the TASK being run */
  const tx_task *t;   /* task */
  uint64_t *sum;      /* checksum of each output chunk made */
  uint64_t *bytes;    /* its size */
} s_taskio;

/* Read chunk id of the job's store; a checksum failure names the chunk in
** the job's error reply. */
static int s_job_get(s_job *j, uint64_t id, void *buf, size_t bytes, tr_err *err) {
  int rc = tc_store_get(j->store, id, buf, bytes, err);
  if (rc == TR_ECORRUPT) j->bad = id;
  return rc;
}

static int s_task_read(void *ctx, int operand, int64_t lin, void *buf, size_t bytes,
                       tr_err *err) {
  s_taskio *io = ctx;
  const tx_task *t = io->t;
  for (int64_t i = 0; i < t->nin; i++)
    if (t->in_op[i] == operand && t->in_lin[i] == lin)
      return s_job_get(io->job, t->in_id[i], buf, bytes, err);
  return tr_seterr(err, TR_ENOTFOUND, "chunk %lld of operand %d (%s) is not on this worker",
                   (long long)lin, operand, t->in_meta[operand].name);
}

static int s_task_has(void *ctx, int operand, int64_t lin) {
  const tx_task *t = ((s_taskio *)ctx)->t;
  for (int64_t i = 0; i < t->nin; i++)
    if (t->in_op[i] == operand && t->in_lin[i] == lin) return 1;
  return 0;
}

static int s_task_write(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
  s_taskio *io = ctx;
  const tx_task *t = io->t;
  for (int64_t i = 0; i < t->nout; i++)
    if (t->out_lin[i] == lin) {
      io->bytes[i] = bytes;
      int rc = (t->scratch ? tc_store_put_scratch : tc_store_put)(
          io->job->store, t->out_id[i], t->out_meta.dtype, buf, bytes, 0, &io->sum[i], err);
      if (!rc && t->nrep) {
        /* Replicate it now, while the other chunks are still computed. */
        s_push *p = malloc(sizeof *p);
        void *copy = p ? malloc(bytes ? bytes : 1) : NULL;
        if (!copy) {
          free(p);
          return tr_seterr(err, TR_ENOMEM, "out of memory");
        }
        memcpy(copy, buf, bytes);
        p->c = (tn_chunk){t->out_id[i], (uint8_t)t->out_meta.dtype, bytes, io->sum[i]};
        p->data = copy;
        p->job = io->job;
        p->nrep = t->nrep;
        memcpy(p->rep, t->rep, sizeof p->rep);
        pthread_mutex_lock(&io->w->mu);
        p->next = io->w->pushq;
        io->w->pushq = p;
        io->job->pushing += p->nrep;
        pthread_mutex_unlock(&io->w->mu);
        if (write(io->w->wake[1], "", 1) < 0) { /* full pipe: already awake */
        }
      }
      return rc;
    }
  return tr_seterr(err, TR_EINVAL, "output chunk %lld is not this worker's", (long long)lin);
}

/* A kernel of a FILL or combine task failed with rc. */
static void s_kernel_failed(tr_err *err, const char *what, int rc) {
  if (rc == TR_EINTR)
    tr_seterr(err, rc, "interrupted");
  else
    tr_seterr(err, rc, "%s kernel failed (status %d)", what, rc);
}

/* FILL and combine tasks: one output chunk of the list per index, on the
** thread pool. */
typedef struct s_fillrun {
  s_taskio *io;   /* task */
  tr_err err;     /* first failure */
  pthread_mutex_t mu; /* guards err */
} s_fillrun;

static int s_fill_one(void *arg, int64_t i) {
  s_fillrun *fr = arg;
  const tx_task *t = fr->io->t;
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
  tr_key_from_linear(&t->out_meta, t->out_lin[i], key);
  size_t bytes = (size_t)tr_chunk_extent(&t->out_meta, key, ext) * tr_dtype_size(t->out_meta.dtype);
  void *buf = tr_alloc_aligned(bytes);
  tr_err err;
  int rc = buf ? tx_fill_chunk(fr->io->w->kt, &t->out_meta, &t->f, t->out_lin[i], buf,
                               &fr->io->job->cancel)
               : tr_seterr(&err, TR_ENOMEM, "out of memory");
  if (buf && rc) s_kernel_failed(&err, "fill", rc);
  if (!rc) rc = s_task_write(fr->io, t->out_lin[i], buf, bytes, &err);
  tr_free_aligned(buf);
  if (rc) {
    pthread_mutex_lock(&fr->mu);
    if (!fr->err.code) fr->err = err;
    pthread_mutex_unlock(&fr->mu);
  }
  return rc;
}

/* Combine tasks: output chunk i from every listed partial of it. */
static int s_combine_one(void *arg, int64_t i) {
  s_fillrun *fr = arg;
  const tx_task *t = fr->io->t;
  const tk_backend *kt = fr->io->w->kt;
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK], lin = t->out_lin[i];
  tr_key_from_linear(&t->out_meta, lin, key);
  int64_t nel = tr_chunk_extent(&t->out_meta, key, ext);
  size_t bytes = (size_t)nel * tr_dtype_size(t->out_meta.dtype);
  void *acc = tr_alloc_aligned(bytes), *part = tr_alloc_aligned(bytes);
  tr_err err;
  int rc = acc && part ? TR_OK : tr_seterr(&err, TR_ENOMEM, "out of memory");
  int first = 1;
  for (int64_t k = 0; !rc && k < t->nin; k++) {
    if (t->in_lin[k] != lin) continue;
    rc = s_job_get(fr->io->job, t->in_id[k], first ? acc : part, bytes, &err);
    if (!rc && !first &&
        (rc = kt->combine(t->out_meta.dtype, t->node.agg, acc, part, nel, &fr->io->job->cancel)))
      s_kernel_failed(&err, "combine", rc);
    first = 0;
  }
  if (!rc && first) rc = tr_seterr(&err, TR_EINVAL, "no partial of output chunk %lld", (long long)lin);
  if (!rc && t->node.post.n &&
      (rc = kt->map(t->out_meta.dtype, &t->node.post, acc, nel, &fr->io->job->cancel)))
    s_kernel_failed(&err, "map", rc);
  if (!rc) rc = s_task_write(fr->io, lin, acc, bytes, &err);
  tr_free_aligned(acc);
  tr_free_aligned(part);
  if (rc) {
    pthread_mutex_lock(&fr->mu);
    if (!fr->err.code) fr->err = err;
    pthread_mutex_unlock(&fr->mu);
  }
  return rc;
}

static void s_fail_job(s_job *j, int code, const char *msg) {
  j->rtype = TN_ERROR;
  j->code = code;
  snprintf(j->msg, sizeof j->msg, "%s", msg);
}

static void s_job_free(s_job *j) {
  tn_wbuf_free(&j->reply);
  tn_in_close(&j->in); /* jobs are zeroed: closes nothing if not moved in */
  for (uint32_t i = 0; i < j->nout; i++) free(j->out[i].data);
  free(j->out);
  free(j->body);
  free(j);
}

/* Run one TASK; fills the reply: TASK_OK {u32 n, n x chunk meta, f64 s,
** str backend} or an error. */
static void s_run_task(s_worker *w, s_job *j) {
  tx_task t;
  tr_err err;
  tk_device_stats d0, d1;
  tr_clearerr(&err);
  tk_device_stats_get(&d0);
  double t0 = tr_now();
  int rc = tx_task_decode(j->body, j->body_len, &t, &err);
  if (rc) {
    s_fail_job(j, rc, err.msg);
    s_log("rejected task: %s", err.msg);
    return;
  }
  if (!(j->store = s_store_for(w, j->db, S_OPEN_CREATE, &err))) {
    s_fail_job(j, err.code, err.msg);
    tx_task_free(&t);
    return;
  }
  s_taskio io = {w, j, &t, calloc((size_t)t.nout + 1, 8), calloc((size_t)t.nout + 1, 8)};
  if (!io.sum || !io.bytes) {
    rc = tr_seterr(&err, TR_ENOMEM, "out of memory");
  } else if (t.kind == TX_TASK_FILL) {
    s_fillrun fr = {&io, {0, ""}, PTHREAD_MUTEX_INITIALIZER};
    rc = tr_parallel_for(w->threads, t.nout, s_fill_one, &fr, &j->cancel);
    if (rc) err = fr.err.code ? fr.err : err;
  } else if (t.kind == TX_TASK_COMBINE) {
    s_fillrun fr = {&io, {0, ""}, PTHREAD_MUTEX_INITIALIZER};
    rc = tr_parallel_for(w->threads, t.nout, s_combine_one, &fr, &j->cancel);
    if (rc) err = fr.err.code ? fr.err : err;
  } else {
    tx_chunk_io cio = {&io, s_task_read, s_task_write, s_task_has};
    const tr_tensor *in_meta[TK_MAX_INPUTS];
    for (int i = 0; i < t.node.ninputs; i++) in_meta[i] = &t.in_meta[i];
    rc = tx_node_run(w->kt, w->threads, (size_t)1 << 30, &t.node, in_meta, &t.out_meta, &cio,
                     t.out_lin, t.nout, &j->cancel, &err);
  }
  if (rc) {
    s_fail_job(j, rc, err.msg[0] ? err.msg : rc == TR_EINTR ? "interrupted" : "task failed");
  } else {
    j->rtype = TN_TASK_OK;
    tn_put_u32(&j->reply, (uint32_t)t.nout);
    for (int64_t i = 0; i < t.nout; i++) {
      tn_chunk c = {t.out_id[i], (uint8_t)t.out_meta.dtype, io.bytes[i], io.sum[i]};
      tn_put_chunk(&j->reply, &c);
    }
    tn_put_f64(&j->reply, tr_now() - t0);
    tn_put_str(&j->reply, w->kt->name);
    /* What the task copied to and from the GPU (one task at a time here). */
    tk_device_stats_get(&d1);
    tn_put_u64(&j->reply, d1.h2d_bytes - d0.h2d_bytes);
    tn_put_u64(&j->reply, d1.d2h_bytes - d0.d2h_bytes);
    tn_put_f64(&j->reply, d1.copy_s - d0.copy_s);
  }
  free(io.sum);
  free(io.bytes);
  tx_task_free(&t);
}

static void s_run_sync(s_worker *w, s_job *j) {
  tn_rbuf r;
  tr_err err;
  tn_rbuf_init(&r, j->body, j->body_len);
  uint32_t n = tn_get_count(&r, 8);
  uint64_t *ids = calloc(n + 1, sizeof *ids);
  int rc = TR_OK;
  for (uint32_t i = 0; ids && i < n; i++) ids[i] = tn_get_u64(&r);
  if (!ids)
    rc = tr_seterr(&err, TR_ENOMEM, "out of memory");
  else if (tn_rbuf_ok(&r) != TR_OK)
    rc = tr_seterr(&err, TR_EINVAL, "malformed SYNC");
  else if (n && !(j->store = s_store_for(w, j->db, S_OPEN_EXISTS, &err)))
    rc = err.code;
  else if (n)
    rc = tc_store_sync(j->store, ids, n, &err);
  if (rc) {
    s_fail_job(j, rc, err.msg);
  } else {
    j->rtype = TN_SYNC_OK;
    tn_put_u32(&j->reply, n);
  }
  free(ids);
}

static void *s_task_thread(void *arg) {
  s_worker *w = arg;
  void *tx = zmq_socket(w->ctx, ZMQ_PAIR);
  zmq_connect(tx, "inproc://tradb-worker-done");
  for (;;) {
    pthread_mutex_lock(&w->mu);
    while (!w->todo && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
    if (w->quit) {
      pthread_mutex_unlock(&w->mu);
      break;
    }
    s_job *j = w->todo;
    w->todo = j->next;
    if (!w->todo) w->todo_tail = NULL;
    w->running = j; /* from here a cancel reaches it through its token */
    pthread_mutex_unlock(&w->mu);
    if (j->type == TN_TASK) s_run_task(w, j);
    else s_run_sync(w, j);
    pthread_mutex_lock(&w->mu);
    w->running = NULL;
    j->next = w->done;
    w->done = j;
    pthread_mutex_unlock(&w->mu);
    zmq_send(tx, "", 0, 0);
  }
  zmq_close(tx);
  return NULL;
}

/* A zeroed job answering request in (its type, route and request id), or
** NULL after answering ENOMEM. */
static s_job *s_job_for(s_worker *w, const tn_in *in) {
  s_job *j = calloc(1, sizeof *j);
  if (!j) {
    tn_send_error(w->router, in->route, in->route_len, in->req, in->db, TR_ENOMEM, 0, "out of memory");
    return NULL;
  }
  j->type = in->type;
  memcpy(j->route, in->route, in->route_len);
  j->route_len = in->route_len;
  j->req = in->req;
  j->db = in->db;
  return j;
}

/* Append j to the queue (*head, *tail) and wake the thread waiting on cv. */
static void s_enqueue(s_worker *w, s_job **head, s_job **tail, pthread_cond_t *cv, s_job *j) {
  pthread_mutex_lock(&w->mu);
  if (*tail) (*tail)->next = j;
  else *head = j;
  *tail = j;
  pthread_cond_signal(cv);
  pthread_mutex_unlock(&w->mu);
}

/* Hand a TASK or SYNC to the task thread, its body copied. */
static void s_queue(s_worker *w, tn_in *in) {
  size_t n;
  const void *body = tn_in_body(in, &n);
  s_job *j = s_job_for(w, in);
  if (!j) return;
  if (!(j->body = malloc(n + 1))) {
    tn_send_error(w->router, in->route, in->route_len, in->req, in->db, TR_ENOMEM, 0, "out of memory");
    free(j);
    return;
  }
  memcpy(j->body, body, n);
  j->body_len = n;
  j->heard = tr_now();
  s_enqueue(w, &w->todo, &w->todo_tail, &w->cv, j);
}

/* Did job j come from route? */
static int s_from(const s_job *j, const uint8_t *route, size_t len) {
  return j->route_len == len && !memcmp(j->route, route, len);
}

/* Any message from route is a sign of life of the coordinator of the jobs
** it sent (heartbeats included). */
static void s_heard(s_worker *w, const uint8_t *route, size_t len) {
  double now = tr_now();
  pthread_mutex_lock(&w->mu);
  if (w->running && s_from(w->running, route, len)) w->running->heard = now;
  for (s_job *j = w->todo; j; j = j->next)
    if (s_from(j, route, len)) j->heard = now;
  pthread_mutex_unlock(&w->mu);
}

/* Cancel the task-thread jobs from route: the running one through its
** token (its kernels stop within a poll), the queued ones answered
** TR_EINTR and dropped.  Logs one line saying why; a no-op when there is
** nothing of route's to cancel and quiet is set. */
static void s_cancel_from(s_worker *w, const uint8_t *route, size_t len, int quiet,
                          const char *why) {
  s_job *drop = NULL, **pp;
  int running = 0, dropped = 0;
  pthread_mutex_lock(&w->mu);
  if (w->running && s_from(w->running, route, len) && !tr_cancelled(&w->running->cancel)) {
    tr_cancel_set(&w->running->cancel);
    running = 1;
  }
  w->todo_tail = NULL;
  for (pp = &w->todo; *pp;) {
    s_job *j = *pp;
    if (s_from(j, route, len)) {
      *pp = j->next;
      j->next = drop;
      drop = j;
      dropped++;
    } else {
      w->todo_tail = j;
      pp = &j->next;
    }
  }
  pthread_mutex_unlock(&w->mu);
  while (drop) {
    s_job *nx = drop->next;
    tn_send_error(w->router, drop->route, drop->route_len, drop->req, drop->db, TR_EINTR, 0, "cancelled");
    s_job_free(drop);
    drop = nx;
  }
  if (running || dropped || !quiet)
    s_log("%s: %s, %d queued dropped", why,
          running ? "stopping its running task" : "none of its tasks running", dropped);
}

/* Cancel the jobs of coordinators silent for the liveness window (their
** shell was killed or cut off): nobody will take the result.  The worker
** stays up for the next coordinator. */
static void s_cancel_lost(s_worker *w) {
  const double window = TN_LIVENESS * TN_HEARTBEAT_MS / 1000.0;
  for (;;) {
    uint8_t route[256];
    size_t len = 0;
    double silent = 0, now = tr_now();
    pthread_mutex_lock(&w->mu);
    s_job *lost = NULL;
    if (w->running && !tr_cancelled(&w->running->cancel) && now - w->running->heard > window)
      lost = w->running;
    for (s_job *j = w->todo; j && !lost; j = j->next)
      if (now - j->heard > window) lost = j;
    if (lost) {
      len = lost->route_len;
      memcpy(route, lost->route, len);
      silent = now - lost->heard;
    }
    pthread_mutex_unlock(&w->mu);
    if (!lost) return;
    char why[80];
    snprintf(why, sizeof why, "coordinator silent for %.1f s", silent);
    s_cancel_from(w, route, len, 1, why);
  }
}

/* GET, second half (main loop): the chunks the store thread read, as the
** reply's frames. */
static void s_reply_data(s_worker *w, s_job *j) {
  void **bufs = calloc(j->nout + 1, sizeof *bufs);
  size_t *lens = calloc(j->nout + 1, sizeof *lens);
  if (!bufs || !lens) {
    tn_send_error(w->router, j->route, j->route_len, j->req, j->db, TR_ENOMEM, 0, "out of memory");
  } else {
    for (uint32_t i = 0; i < j->nout; i++) {
      bufs[i] = j->out[i].data;
      lens[i] = j->out[i].c.nbytes;
      j->out[i].data = NULL; /* tn_send frees them, sent or not */
      w->bytes_sent += lens[i];
    }
    s_reply(w, j->route, j->route_len, TN_DATA, j->req, j->db, &j->reply, (int)j->nout, bufs, lens,
            s_free_buf);
  }
  free(bufs);
  free(lens);
}

static void s_send_out(s_worker *w, s_job *j);

static void s_flush_done(s_worker *w) {
  pthread_mutex_lock(&w->mu);
  s_job *j = w->done;
  w->done = NULL;
  pthread_mutex_unlock(&w->mu);
  while (j) {
    s_job *nx = j->next;
    if (j->pushing > 0) { /* answered once its replica pushes are confirmed */
      j->next = w->held;
      w->held = j;
      j = nx;
      continue;
    }
    if (j->push_failed) s_fail_job(j, TR_EIO, j->push_why);
    if (j->type == TN_TASK && j->rtype == TN_TASK_OK) w->tasks++;
    w->bytes_recv += j->recv;
    if (j->rtype == TN_ERROR) {
      tn_send_error(w->router, j->route, j->route_len, j->req, j->db, j->code, j->bad, j->msg);
    } else if (j->type == TN_SEND) {
      s_send_out(w, j);
    } else if (j->type == TN_GET) {
      s_reply_data(w, j);
    } else {
      s_reply(w, j->route, j->route_len, j->rtype, j->req, j->db, &j->reply, 0, NULL, NULL, NULL);
    }
    s_job_free(j);
    j = nx;
  }
}

/* A DEALER socket to peer ep, opened on first use. */
static void *s_peer(s_worker *w, const char *ep, tr_err *err) {
  for (int i = 0; i < w->npeers; i++)
    if (!strcmp(w->peer_ep[i], ep)) return w->peer[i];
  if (w->npeers >= S_MAX_PEERS) {
    tr_seterr(err, TR_EINVAL, "too many peers");
    return NULL;
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
    return NULL;
  }
  snprintf(w->peer_ep[w->npeers], TC_ENDPOINT_MAX, "%s", ep);
  w->peer[w->npeers++] = s;
  return s;
}

/* A request's body as a read cursor, and a clear error buffer. */
static void s_request_body(tn_in *in, tn_rbuf *r, tr_err *err) {
  size_t n;
  const void *body = tn_in_body(in, &n);
  tn_rbuf_init(r, body, n);
  tr_clearerr(err);
}

/* PUT chunk c of database db to peer as request my_req; buf (malloc) is
** handed over, freed once sent or at once on failure. */
static int s_put_peer(s_worker *w, void *peer, uint64_t my_req, uint64_t db, const tn_chunk *c,
                      void *buf, tr_err *err) {
  tn_wbuf b = {0};
  size_t len = c->nbytes;
  tn_put_u32(&b, 1);
  tn_put_chunk(&b, c);
  int rc = tn_send(peer, NULL, 0, TN_PUT, my_req, db, &b, 1, &buf, &len, s_free_buf, NULL, err);
  tn_wbuf_free(&b);
  if (!rc) w->bytes_sent += c->nbytes;
  return rc;
}

/* SEND, second half (main loop): PUT each chunk the store thread read to
** its peer; the SEND is answered (s_settle) once every peer confirmed. */
static void s_send_out(s_worker *w, s_job *j) {
  s_pending *pd = calloc(1, sizeof *pd);
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
    s_out_chunk *o = &j->out[i];
    tr_err err;
    tr_clearerr(&err);
    void *peer = s_peer(w, o->ep, &err);
    if (!peer) {
      pd->failed = 1;
      snprintf(pd->why, sizeof pd->why, "%s", err.msg);
      break;
    }
    void *buf = o->data;
    o->data = NULL; /* s_put_peer frees it, sent or not */
    if (s_put_peer(w, peer, pd->my_req, pd->db, &o->c, buf, &err)) {
      pd->failed = 1;
      snprintf(pd->why, sizeof pd->why, "send to %s failed: %s", o->ep, err.msg);
      break;
    }
    pd->waiting++;
    pd->bytes += o->c.nbytes;
  }
  pd->next = w->pending;
  w->pending = pd;
}

/* Answer SENDs whose peers all confirmed (or failed, or timed out). */
static void s_settle(s_worker *w) {
  double now = tr_now();
  for (s_pending **pp = &w->pending; *pp;) {
    s_pending *pd = *pp;
    if (pd->waiting > 0 && now < pd->deadline && !pd->failed) {
      pp = &pd->next;
      continue;
    }
    if (pd->job) {
      if (pd->failed || pd->waiting > 0) {
        if (!pd->failed) snprintf(pd->why, sizeof pd->why, "replica peers did not confirm in time");
        pd->job->push_failed = 1;
        snprintf(pd->job->push_why, sizeof pd->job->push_why, "%s", pd->why);
        pd->job->pushing -= pd->waiting;
      }
    } else if (pd->failed || pd->waiting > 0) {
      /* Late confirmations find no pending entry and are ignored. */
      if (!pd->failed) snprintf(pd->why, sizeof pd->why, "peers did not confirm %d chunk(s)", pd->waiting);
      tn_send_error(w->router, pd->route, pd->route_len, pd->req, pd->db, TR_EIO, 0, pd->why);
    } else {
      tn_wbuf b = {0};
      tn_put_u64(&b, pd->bytes);
      s_reply(w, pd->route, pd->route_len, TN_SEND_OK, pd->req, pd->db, &b, 0, NULL, NULL, NULL);
      tn_wbuf_free(&b);
    }
    *pp = pd->next;
    free(pd);
  }
}

/* Send the queued replica pushes: one PUT per chunk and peer, the copy the
** task made to the last peer and copies of it to the others (ZeroMQ frees
** a buffer once sent, so those are made first). */
static void s_send_pushes(s_worker *w) {
  char c[64];
  while (read(w->wake[0], c, sizeof c) > 0) {
  }
  pthread_mutex_lock(&w->mu);
  s_push *q = w->pushq;
  w->pushq = NULL;
  pthread_mutex_unlock(&w->mu);
  while (q) {
    s_push *p = q;
    q = q->next;
    s_pending *pd = calloc(1, sizeof *pd);
    tr_err err;
    tr_clearerr(&err);
    if (!pd) {
      pthread_mutex_lock(&w->mu);
      p->job->push_failed = 1;
      p->job->pushing -= p->nrep;
      snprintf(p->job->push_why, sizeof p->job->push_why, "cannot replicate chunk %016llx: out of memory",
               (unsigned long long)p->c.id);
      pthread_mutex_unlock(&w->mu);
      free(p->data);
      free(p);
      continue;
    }
    pd->job = p->job;
    pd->my_req = ++w->next_req;
    pd->deadline = tr_now() + S_SEND_TIMEOUT_S;
    pd->waiting = p->nrep;
    for (int k = p->nrep - 1; k >= 0; k--) {
      void *buf = k ? malloc(p->c.nbytes ? p->c.nbytes : 1) : p->data;
      if (!k) p->data = NULL; /* s_put_peer below frees it, sent or not */
      void *peer = buf ? s_peer(w, p->rep[k], &err) : NULL;
      if (!buf || !peer) {
        free(buf);
        pd->failed = 1;
        snprintf(pd->why, sizeof pd->why, "cannot replicate to %s: %s", p->rep[k],
                 buf ? err.msg : "out of memory");
        break;
      }
      if (k) memcpy(buf, p->data, p->c.nbytes);
      if (s_put_peer(w, peer, pd->my_req, p->job->db, &p->c, buf, &err)) {
        pd->failed = 1;
        snprintf(pd->why, sizeof pd->why, "cannot replicate to %s: %s", p->rep[k], err.msg);
        break;
      }
    }
    free(p->data); /* left when a copy or a peer failed */
    pd->next = w->pending;
    w->pending = pd;
    free(p);
  }
}

/* Answer the held tasks whose replica pushes are all confirmed. */
static void s_release_held(s_worker *w) {
  s_job *keep = NULL, *ready = NULL;
  for (s_job *j = w->held, *nx; j; j = nx) {
    nx = j->next;
    if (j->pushing > 0) {
      j->next = keep;
      keep = j;
    } else {
      j->next = ready;
      ready = j;
    }
  }
  w->held = keep;
  if (!ready) return;
  pthread_mutex_lock(&w->mu);
  s_job *tail = ready;
  while (tail->next) tail = tail->next;
  tail->next = w->done;
  w->done = ready;
  pthread_mutex_unlock(&w->mu);
  s_flush_done(w);
}

/* A reply from a peer (to one of our PUTs). */
static void s_on_peer_reply(s_worker *w, tn_in *in) {
  for (s_pending *pd = w->pending; pd; pd = pd->next)
    if (pd->my_req == in->req) {
      if (in->type == TN_PUT_OK) {
        pd->waiting--;
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

/* TRADB_TEST_SLOW_STORE_MS: every store access of the store thread takes
** that long (tests: a slow disk). */
static void s_slow_store(const s_worker *w) {
  if (w->slow_store_ms > 0)
    nanosleep(&(struct timespec){w->slow_store_ms / 1000, (w->slow_store_ms % 1000) * 1000000L}, NULL);
}

/* Read chunk id into o (store thread). */
static int s_read_out(s_worker *w, s_job *j, uint64_t id, s_out_chunk *o, tr_err *err) {
  tr_dtype dt;
  s_slow_store(w);
  o->c.id = id;
  if (tc_store_stat(j->store, id, &dt, &o->c.nbytes, &o->c.checksum))
    return tr_seterr(err, TR_ENOTFOUND, "chunk %016llx is not on worker %s", (unsigned long long)id, s_ep);
  o->c.dtype = (uint8_t)dt;
  if (!(o->data = malloc(o->c.nbytes ? o->c.nbytes : 1))) return tr_seterr(err, TR_ENOMEM, "out of memory");
  return s_job_get(j, id, o->data, o->c.nbytes, err);
}

/* GET {n x u64 id} -> DATA {n x chunk meta} + frames, and SEND {n x (u64
** id, str peer)}: the store thread reads the chunks, the main loop sends
** them (s_reply_data, s_send_out). */
static void s_run_read(s_worker *w, s_job *j) {
  int send = j->type == TN_SEND;
  tn_rbuf r;
  tr_err err;
  tr_clearerr(&err);
  s_request_body(&j->in, &r, &err);
  uint32_t n = tn_get_count(&r, send ? 12 : 8);
  int rc = (j->out = calloc(n + 1, sizeof *j->out)) ? TR_OK : tr_seterr(&err, TR_ENOMEM, "out of memory");
  if (!rc && n && !(j->store = s_store_for(w, j->db, S_OPEN_EXISTS, &err))) rc = err.code;
  for (uint32_t i = 0; i < n && !rc; i++) {
    uint64_t id = tn_get_u64(&r);
    if (send) tn_get_str(&r, j->out[i].ep, sizeof j->out[i].ep);
    if (r.bad) break;
    j->nout = i + 1;
    rc = s_read_out(w, j, id, &j->out[i], &err);
  }
  if (!rc && (r.bad || tn_rbuf_ok(&r) != TR_OK))
    rc = tr_seterr(&err, TR_EINVAL, send ? "malformed SEND" : "malformed GET");
  if (rc) {
    s_fail_job(j, rc, err.msg);
    return;
  }
  j->rtype = send ? TN_SEND_OK : TN_DATA;
  if (!send) {
    tn_put_u32(&j->reply, n);
    for (uint32_t i = 0; i < n; i++) tn_put_chunk(&j->reply, &j->out[i].c);
  }
}

/* PUT {n x chunk meta} + n frames -> PUT_OK {u32 n}: stores the chunks,
** on the store thread. */
static void s_run_put(s_worker *w, s_job *j) {
  tn_in *in = &j->in;
  tn_rbuf r;
  tr_err err;
  tr_clearerr(&err);
  s_slow_store(w);
  s_request_body(in, &r, &err);
  uint32_t n = tn_get_count(&r, 25);
  int rc = TR_OK;
  if (n != (uint32_t)in->ndata) rc = tr_seterr(&err, TR_EINVAL, "PUT lists %u chunks but carries %d", n, in->ndata);
  if (!rc && n && !(j->store = s_store_for(w, j->db, S_OPEN_CREATE, &err))) rc = err.code;
  for (uint32_t i = 0; i < n && !rc; i++) {
    tn_chunk c;
    size_t len;
    tn_get_chunk(&r, &c);
    const void *data = tn_in_data(in, (int)i, &len);
    if (r.bad || len != c.nbytes) {
      rc = tr_seterr(&err, TR_EINVAL, "malformed PUT");
      break;
    }
    rc = tc_store_put(j->store, c.id, (tr_dtype)c.dtype, data, len, c.checksum, NULL, &err);
    if (!rc) j->recv += len;
  }
  if (!rc && tn_rbuf_ok(&r) != TR_OK) rc = tr_seterr(&err, TR_EINVAL, "malformed PUT");
  if (rc) {
    s_log("PUT refused: %s", err.msg);
    s_fail_job(j, rc, err.msg);
    return;
  }
  j->rtype = TN_PUT_OK;
  tn_put_u32(&j->reply, n);
}

static int s_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* INVENTORY (second half of s_run_ids): the listed ids this worker does
** not hold, after moving any it holds in the old layout (DATA itself) into
** the database's store; then what the store holds that is not listed. */
static void s_inventory(s_worker *w, s_job *j, const uint64_t *ids, uint32_t n) {
  tn_wbuf *b = &j->reply;
  tc_stored *held = NULL;
  int64_t nheld = 0, moved = 0;
  uint32_t nmiss = 0, nextra = 0;
  tr_err err;
  for (uint32_t i = 0; i < n; i++)
    if ((!j->store || tc_store_stat(j->store, ids[i], NULL, NULL, NULL) != TR_OK) &&
        tc_store_stat(w->root, ids[i], NULL, NULL, NULL) == TR_OK &&
        (j->store || (j->store = s_store_for(w, j->db, S_OPEN_CREATE, &err))) &&
        tc_store_move(j->store, w->root, ids[i], &err) == TR_OK)
      moved++;
  for (uint32_t i = 0; i < n; i++)
    nmiss += !j->store || tc_store_stat(j->store, ids[i], NULL, NULL, NULL) != TR_OK;
  tn_put_u32(b, nmiss);
  for (uint32_t i = 0; i < n; i++)
    if (!j->store || tc_store_stat(j->store, ids[i], NULL, NULL, NULL) != TR_OK)
      tn_put_u64(b, ids[i]);
  if (j->store && tc_store_list(j->store, &held, &nheld, &err) != TR_OK) {
    s_fail_job(j, err.code, err.msg);
    return;
  }
  uint64_t *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
  if (!sorted) {
    free(held);
    s_fail_job(j, TR_ENOMEM, "out of memory");
    return;
  }
  memcpy(sorted, ids, (size_t)n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, s_cmp_u64);
  for (int64_t k = 0; k < nheld; k++)
    if (!bsearch(&held[k].id, sorted, n, sizeof *sorted, s_cmp_u64)) held[nextra++] = held[k];
  tn_put_u32(b, nextra);
  for (uint32_t k = 0; k < nextra; k++) {
    tn_chunk c = {held[k].id, (uint8_t)held[k].dtype, held[k].nbytes, held[k].sum};
    tn_put_chunk(b, &c);
  }
  free(sorted);
  free(held);
  if (moved) s_log("moved %lld chunk(s) of database %016" PRIx64 " into its own store", (long long)moved, j->db);
  if (nmiss) s_log("%u chunk(s) database %016" PRIx64 " lists here are missing", nmiss, j->db);
  j->rtype = TN_INVENTORY_OK;
}

/* DROP / INVENTORY {n x u64 id} (store thread: they unlink files, sync
** the directory, move files). */
static void s_run_ids(s_worker *w, s_job *j) {
  tn_in *in = &j->in;
  tn_rbuf r;
  tr_err err;
  s_slow_store(w);
  s_request_body(in, &r, &err);
  uint32_t n = tn_get_count(&r, 8);
  uint64_t *ids = calloc(n + 1, sizeof *ids);
  int rc = ids ? TR_OK : tr_seterr(&err, TR_ENOMEM, "out of memory");
  for (uint32_t i = 0; !rc && i < n; i++) ids[i] = tn_get_u64(&r);
  if (!rc && tn_rbuf_ok(&r) != TR_OK) rc = tr_seterr(&err, TR_EINVAL, "malformed %s", tn_type_name(in->type));
  if (!rc && !j->db) rc = tr_seterr(&err, TR_EINVAL, "%s names no database", tn_type_name(in->type));
  /* A database with no store here has nothing to drop or report; one
  ** whose store cannot be opened is an error, never "holds nothing". */
  if (!rc && !(j->store = s_store_for(w, j->db, S_OPEN_EXISTS, &err)) && err.code != TR_ENOTFOUND)
    rc = err.code;
  if (!rc && in->type == TN_DROP && j->store) rc = tc_store_drop(j->store, ids, n, &err);
  if (rc) {
    free(ids);
    s_fail_job(j, rc, err.msg);
    return;
  }
  if (in->type == TN_DROP) {
    tn_put_u32(&j->reply, n);
    j->rtype = TN_DROP_OK;
  } else {
    s_inventory(w, j, ids, n);
  }
  free(ids);
}

static void *s_store_thread(void *arg) {
  s_worker *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->io_todo && !w->quit) pthread_cond_wait(&w->io_cv, &w->mu);
    if (w->quit) break;
    s_job *j = w->io_todo;
    w->io_todo = j->next;
    if (!w->io_todo) w->io_tail = NULL;
    pthread_mutex_unlock(&w->mu);
    if (j->type == TN_PUT) s_run_put(w, j);
    else if (j->type == TN_GET || j->type == TN_SEND) s_run_read(w, j);
    else s_run_ids(w, j);
    pthread_mutex_lock(&w->mu);
    j->next = w->done;
    w->done = j;
    if (write(w->wake[1], "", 1) < 0) { /* full pipe: already awake */
    }
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Hand a store request (PUT, GET, SEND, DROP, INVENTORY) to the store thread,
** its frames moved, not copied. */
static void s_queue_store(s_worker *w, tn_in *in) {
  s_job *j = s_job_for(w, in);
  if (!j) return;
  tn_in_move(&j->in, in);
  s_enqueue(w, &w->io_todo, &w->io_tail, &w->io_cv, j);
}

static void s_on_request(s_worker *w, tn_in *in) {
  tn_wbuf b = {0};
  s_heard(w, in->route, in->route_len);
  if (in->type != TN_HEARTBEAT) s_busy(w);
  /* Remember who coordinates us, for heartbeats. */
  if (in->type == TN_HELLO || in->type == TN_HEARTBEAT || in->type == TN_TASK) {
    memcpy(w->coord, in->route, in->route_len);
    w->coord_len = in->route_len;
  }
  switch (in->type) {
  case TN_HELLO: {
    size_t n;
    const void *body = tn_in_body(in, &n);
    tn_rbuf r;
    char who[128];
    tn_rbuf_init(&r, body, n);
    tn_get_str(&r, who, sizeof who);
    s_log("hello from %s", tn_rbuf_ok(&r) == TR_OK ? who : "?");
    tn_put_str(&b, w->cfg->listen);
    tn_put_u32(&b, (uint32_t)w->threads);
    tn_put_str(&b, w->kt->name);
    tn_put_u64(&b, w->incarnation);
    s_reply(w, in->route, in->route_len, TN_HELLO_OK, in->req, in->db, &b, 0, NULL, NULL, NULL);
    break;
  }
  case TN_HEARTBEAT:
    /* A coordinator's ping (request id set) is echoed at once, so it can
    ** tell a live worker from heartbeats queued before one died. */
    tn_put_u64(&b, w->incarnation);
    if (in->req) s_reply(w, in->route, in->route_len, TN_HEARTBEAT, in->req, in->db, &b, 0, NULL, NULL, NULL);
    break;
  case TN_PUT:
  case TN_GET:
  case TN_SEND:
  case TN_DROP:
  case TN_INVENTORY: s_queue_store(w, in); break;
  case TN_TASK:
  case TN_SYNC: s_queue(w, in); break;
  case TN_CANCEL:
    /* Its statement is gone: stop its running task, fail its queued ones.
    ** Another coordinator's work goes on. */
    s_cancel_from(w, in->route, in->route_len, 0, "cancel");
    break;
  case TN_STATS: {
    /* The requesting database's chunks (none if its store is not open:
    ** every coordinator sends INVENTORY, which opens it, first). */
    int64_t chunks = 0, bytes = 0;
    tr_err err;
    tc_store_usage(s_store_for(w, in->db, S_OPEN_NONE, &err), &chunks, &bytes);
    tn_put_u64(&b, w->tasks);
    tn_put_u64(&b, (uint64_t)chunks);
    tn_put_u64(&b, (uint64_t)bytes);
    tn_put_u64(&b, w->bytes_sent);
    tn_put_u64(&b, w->bytes_recv);
    tn_put_str(&b, w->kt->name);
    s_reply(w, in->route, in->route_len, TN_STATS_OK, in->req, in->db, &b, 0, NULL, NULL, NULL);
    break;
  }
  default:
    s_log("dropped unexpected %s message", tn_type_name(in->type));
    tn_send_error(w->router, in->route, in->route_len, in->req, in->db, TR_EINVAL, 0,
                  "unexpected message");
  }
  tn_wbuf_free(&b);
}

int tw_main(const tw_config *cfg) {
  s_worker w;
  tr_err err;
  int status = 1;
  memset(&w, 0, sizeof w);
  w.cfg = cfg;
  while (getrandom(&w.incarnation, sizeof w.incarnation, 0) != sizeof w.incarnation || !w.incarnation)
    w.incarnation = (uint64_t)getpid() << 32 ^ (uint64_t)(tr_now() * 1e9);
  s_ep = cfg->listen;
  tr_clearerr(&err);
  w.kt = tk_backend_get(cfg->backend ? cfg->backend : "auto");
  w.threads = cfg->threads > 0 ? cfg->threads : tr_ncores();
  tx_reuse_chunk_buffers();
  /* Chunks of 32 MiB and more (the most glibc lets M_MMAP_THRESHOLD be)
  ** would still be fresh mappings, faulted in on every use: serve every
  ** block from the heap (measured on the large bench sizes, chunks of
  ** 48 MB: nn-large 3.2M page faults and 35-36 s of CPU, against 0.5M and
  ** 26-27 s).  What a big statement leaves free is given back once the
  ** worker is idle (s_trim_when_idle). */
  mallopt(M_MMAP_MAX, 0);
  if (!w.kt) {
    s_log("unknown kernel backend '%s'", cfg->backend);
    return 2;
  }
  if (tn_load_keys(cfg->keys, &w.keys, &err)) {
    s_log("%s", err.msg);
    return 2;
  }
  if (!w.keys.on && !tn_endpoint_is_local(cfg->listen)) {
    s_log("listening on %s needs --keys (CURVE): only loopback and ipc endpoints may be open",
          cfg->listen);
    return 2;
  }
  /* A predecessor on the same store may still be shutting down (its
  ** shell was killed): give it a few seconds to let go. */
  for (double end = tr_now() + 5.0;;) {
    if (tc_store_open(cfg->data, &w.root, &err) == TR_OK) break;
    if (tr_now() > end || !strstr(err.msg, "in use")) {
      s_log("%s", err.msg);
      return 1;
    }
    usleep(50000);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = s_on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (pipe2(w.wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    s_log("cannot make a pipe: %s", strerror(errno));
    tc_store_close(&w.root);
    return 1;
  }
  w.ctx = zmq_ctx_new();
  pthread_mutex_init(&w.mu, NULL);
  pthread_mutex_init(&w.db_mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  pthread_cond_init(&w.io_cv, NULL);
  const char *slow = getenv("TRADB_TEST_SLOW_STORE_MS");
  w.slow_store_ms = slow ? atoi(slow) : 0;
  const char *drop_every = getenv("TRADB_TEST_DROP_LOG_S");
  if (drop_every && atof(drop_every) > 0) s_drop_every = atof(drop_every);
  w.router = zmq_socket(w.ctx, ZMQ_ROUTER);
  w.notify_rx = zmq_socket(w.ctx, ZMQ_PAIR);
  int linger = 0, hwm = 0, tmo = 30000;
  zmq_setsockopt(w.router, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(w.router, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(w.router, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(w.router, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(w.notify_rx, ZMQ_LINGER, &linger, sizeof linger);
  if ((w.keys.on && (tn_zap_start(w.ctx, &w.keys, &err) || tn_secure_server(w.router, &w.keys, &err))) ||
      zmq_bind(w.notify_rx, "inproc://tradb-worker-done") != 0) {
    s_log("%s", err.msg[0] ? err.msg : zmq_strerror(errno));
    goto done;
  }
  /* An ipc endpoint is a socket file that anyone who may write it can
  ** connect to: create it owner-only (no chmod after, which leaves a
  ** window).  No other thread of ours creates files yet. */
  mode_t umask_was = umask(0177);
  int bound = zmq_bind(w.router, cfg->listen);
  umask(umask_was);
  if (bound != 0) {
    s_log("cannot listen on %s: %s", cfg->listen, zmq_strerror(errno));
    goto done;
  }
  if (pthread_create(&w.io_tid, NULL, s_store_thread, &w) != 0) {
    s_log("cannot start the store thread");
    goto done;
  }
  w.io_started = 1;
  if (pthread_create(&w.tid, NULL, s_task_thread, &w) != 0) {
    s_log("cannot start the task thread");
    goto done;
  }
  {
    /* Each database's store gets the budget (s_store_for); the default is
    ** a store's own, which the root store shows. */
    int64_t legacy, bytes, scratch = cfg->memory;
    tc_store_usage(w.root, &legacy, &bytes);
    if (scratch <= 0) tc_store_budgets(w.root, &scratch, NULL);
    int mib = scratch >= (1 << 20);
    s_log("listening (data %s, %d threads, kernels %s, memory %lld %s%s)", cfg->data, w.threads,
          w.kt->name, (long long)(scratch >> (mib ? 20 : 10)), mib ? "MiB" : "KiB",
          w.keys.on ? ", CURVE" : "");
    if (legacy)
      s_log("%lld chunk(s) in %s are kept for the database that lists them", (long long)legacy,
            cfg->data);
  }
  double next_beat = tr_now();
  while (!s_stop) {
    zmq_pollitem_t items[3 + S_MAX_PEERS];
    items[0] = (zmq_pollitem_t){w.router, 0, ZMQ_POLLIN, 0};
    items[1] = (zmq_pollitem_t){w.notify_rx, 0, ZMQ_POLLIN, 0};
    for (int i = 0; i < w.npeers; i++) items[2 + i] = (zmq_pollitem_t){w.peer[i], 0, ZMQ_POLLIN, 0};
    items[2 + w.npeers] = (zmq_pollitem_t){NULL, w.wake[0], ZMQ_POLLIN, 0};
    int rc = zmq_poll(items, 3 + w.npeers, TN_HEARTBEAT_MS / 2);
    if (rc > 0 && (items[2 + w.npeers].revents & ZMQ_POLLIN)) {
      s_busy(&w);
      s_send_pushes(&w);
      s_flush_done(&w); /* stored PUTs */
    }
    if (rc < 0 && errno != EINTR) {
      s_log("poll failed: %s", zmq_strerror(errno));
      break;
    }
    if (rc > 0 && (items[0].revents & ZMQ_POLLIN)) {
      for (int k = 0; k < 256; k++) { /* drain, bounded so replies keep flowing */
        tn_in in;
        int r = tn_recv(w.router, 1, ZMQ_DONTWAIT, &in, &err);
        if (r == TR_ENOTFOUND || r == TR_EINTR) break;
        if (r == TR_EINVAL) {
          s_drop_note(&in, err.msg, tr_now());
          continue;
        }
        if (r) {
          s_log("receive failed: %s", err.msg);
          break;
        }
        s_on_request(&w, &in);
        tn_in_close(&in);
      }
    }
    if (rc > 0 && (items[1].revents & ZMQ_POLLIN)) {
      char c;
      while (zmq_recv(w.notify_rx, &c, 1, ZMQ_DONTWAIT) >= 0) {
      }
      s_busy(&w);
      s_send_pushes(&w); /* a finished task's last pushes go out first */
      s_flush_done(&w);
    }
    for (int i = 0; rc > 0 && i < w.npeers; i++)
      if (items[2 + i].revents & ZMQ_POLLIN) {
        tn_in in;
        while (tn_recv(w.peer[i], 0, ZMQ_DONTWAIT, &in, &err) == TR_OK) {
          s_on_peer_reply(&w, &in);
          tn_in_close(&in);
        }
      }
    s_settle(&w);
    s_release_held(&w);
    s_cancel_lost(&w);
    s_trim_when_idle(&w);
    s_drop_tick(tr_now(), 0);
    if (tr_now() >= next_beat) {
      next_beat = tr_now() + TN_HEARTBEAT_MS / 1000.0;
      /* Best effort: a coordinator that went away is not an error (the
      ** ROUTER drops messages for routes it no longer knows). */
      if (w.coord_len) {
        tn_wbuf hb = {0};
        tn_put_u64(&hb, w.incarnation);
        tn_send(w.router, w.coord, w.coord_len, TN_HEARTBEAT, 0, 0, &hb, 0, NULL, NULL, NULL, NULL,
                &err);
        tn_wbuf_free(&hb);
      }
    }
  }
  s_drop_tick(tr_now(), 1);
  s_log("stopping");
  status = 0;
  pthread_mutex_lock(&w.mu);
  w.quit = 1; /* the task thread takes no further job */
  if (w.running) tr_cancel_set(&w.running->cancel);
  pthread_cond_broadcast(&w.cv);
  pthread_mutex_unlock(&w.mu);
  pthread_join(w.tid, NULL);
done:
  if (w.io_started) { /* after the task thread, or when it never started */
    pthread_mutex_lock(&w.mu);
    w.quit = 1;
    pthread_cond_broadcast(&w.io_cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(w.io_tid, NULL);
  }
  s_flush_done(&w);
  while (w.pending) {
    s_pending *nx = w.pending->next;
    free(w.pending);
    w.pending = nx;
  }
  for (s_job *j = w.todo, *nx; j; j = nx) {
    nx = j->next;
    s_job_free(j);
  }
  for (s_job *j = w.io_todo, *nx; j; j = nx) {
    nx = j->next;
    s_job_free(j);
  }
  for (int i = 0; i < w.npeers; i++) zmq_close(w.peer[i]);
  zmq_close(w.router);
  zmq_close(w.notify_rx);
  if (w.keys.on) tn_zap_stop();
  zmq_ctx_term(w.ctx);
  for (int i = 0; i < w.ndbs; i++) tc_store_close(&w.dbs[i].store);
  tc_store_close(&w.root);
  for (s_push *p = w.pushq, *nx; p; p = nx) {
    nx = p->next;
    free(p->data);
    free(p);
  }
  for (s_job *j = w.held, *nx; j; j = nx) {
    nx = j->next;
    s_job_free(j);
  }
  close(w.wake[0]);
  close(w.wake[1]);
  pthread_mutex_destroy(&w.mu);
  pthread_mutex_destroy(&w.db_mu);
  pthread_cond_destroy(&w.cv);
  pthread_cond_destroy(&w.io_cv);
  return status;
}
