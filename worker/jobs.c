/*
** worker/jobs.c - the task thread: TASK (a node's share, FILL, combining
** partials) and SYNC, each with a cancel token; CANCEL and a coordinator
** gone silent stop its jobs.
**
** A combine task may come in the same round trip as the join tasks that
** make its partials (dist/run.c), its partials listed as on their way.
** It is set aside (parked) until they are all stored and the thread runs
** the jobs behind it meanwhile; it never waits on the thread.  Waiting
** there could deadlock: this worker's combine for one shell waiting on a
** join task another worker holds back behind its own waiting combine for
** another shell, whose partial is behind this worker's.  A join task may
** wait on the thread for a moved copy: store threads send those, never
** task threads, so that wait always ends.
*/
#include "config.h"
#include "worker/worker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Chunk source and sink of a node task over the store. */
typedef struct s_taskio {
  wi_worker *w;        /* worker */
  wi_job *job;         /* the TASK being run */
  const tx_task *t;   /* task */
  uint64_t *sum;      /* checksum of each output chunk made */
  uint64_t *bytes;    /* its size */
  struct s_taskio *then; /* t->then's, or NULL */
} s_taskio;

/* Chunk id for a task that says it may still be on its way from a peer
** (tx_task.in_wait): read it once it is stored.  The wait ends with the
** task: a move that fails fails the coordinator's phase, which cancels the
** tasks still running; a peer or coordinator that goes silent cancels them
** too.  It is timed so that a cancel is seen within 10 ms. */
static int s_wait_get(wi_worker *w, wi_job *j, uint64_t id, size_t bytes, tr_blob **out, tr_err *err) {
  for (;;) {
    pthread_mutex_lock(&w->mu);
    uint64_t seen = w->arrivals;
    pthread_mutex_unlock(&w->mu);
    int rc = wi_job_get(j, id, bytes, out, err);
    if (rc != TR_ENOTFOUND) return rc;
    if (tr_cancelled(&j->cancel)) return tr_seterr(err, TR_EINTR, "cancelled");
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 10 * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->mu);
    while (w->arrivals == seen && !tr_cancelled(&j->cancel))
      if (pthread_cond_timedwait(&w->arrived, &w->mu, &until) == ETIMEDOUT) break;
    pthread_mutex_unlock(&w->mu);
  }
}

static int s_task_read(void *ctx, int operand, int64_t lin, size_t bytes, tr_blob **out,
                       tr_err *err) {
  s_taskio *io = ctx;
  const tx_task *t = io->t;
  int64_t i = tx_task_input(t, operand, lin);
  if (i >= 0)
    return t->in_wait && t->in_wait[i] ? s_wait_get(io->w, io->job, t->in_id[i], bytes, out, err)
                                       : wi_job_get(io->job, t->in_id[i], bytes, out, err);
  return tr_seterr(err, TR_ENOTFOUND, "chunk %lld of operand %d (%s) is not on this worker",
                   (long long)lin, operand, t->in_meta[operand].name);
}

static int s_task_has(void *ctx, int operand, int64_t lin) {
  return tx_task_input(((s_taskio *)ctx)->t, operand, lin) >= 0;
}

/* Store output chunk i of the task's list as the task says, and queue its
** pushes to the replica workers, or to the worker it is for
** (tx_task.out_to): the push shares the bytes the store keeps. */
static int s_task_store(s_taskio *io, int64_t i, tr_blob *b, tr_err *err) {
  const tx_task *t = io->t;
  io->bytes[i] = tr_blob_size(b);
  int rc = tc_store_put_blob(io->job->store, t->out_id[i], t->out_meta.dtype, b, (tc_keep)t->keep, 0,
                             &io->sum[i], err);
  if (!rc) io->job->made++;
  int to = t->out_to && t->out_to[i][0];
  if (rc || (!t->nrep && !to)) return rc;
  /* Send it now, while the other chunks are still computed. */
  wi_push *p = malloc(sizeof *p);
  if (!p) return tr_seterr(err, TR_ENOMEM, "out of memory");
  p->c = (tn_chunk){t->out_id[i], (uint8_t)t->out_meta.dtype, io->bytes[i], io->sum[i]};
  p->data = tr_blob_ref(b);
  p->job = io->job;
  if (to) { /* a scratch chunk (decoding checks it): no replicas */
    p->nrep = 1;
    snprintf(p->rep[0], sizeof p->rep[0], "%s", t->out_to[i]);
    p->keep[0] = t->keep;
  } else {
    p->nrep = t->nrep;
    memcpy(p->rep, t->rep, sizeof p->rep);
    memcpy(p->keep, t->rep_keep, sizeof p->keep);
  }
  pthread_mutex_lock(&io->w->mu);
  p->next = io->w->pushq;
  io->w->pushq = p;
  io->job->pushing += p->nrep;
  pthread_mutex_unlock(&io->w->mu);
  if (write(io->w->wake[1], "", 1) < 0) { /* full pipe: already awake */
  }
  return TR_OK;
}

/* The operands of a fused consumer's run for one chunk: its operand from
** is the chunk its producer just made, the others come from the store. */
typedef struct s_thenio {
  s_taskio *io;  /* the consumer's task */
  int from;      /* that operand */
  tr_blob *made; /* the producer's chunk */
} s_thenio;

static int s_then_read(void *ctx, int operand, int64_t lin, size_t bytes, tr_blob **out, tr_err *err) {
  s_thenio *ti = ctx;
  if (operand != ti->from) return s_task_read(ti->io, operand, lin, bytes, out, err);
  if (tr_blob_size(ti->made) != bytes)
    return tr_seterr(err, TR_EINVAL, "chunk %lld of %s has %zu bytes, not %zu", (long long)lin,
                     ti->io->t->in_meta[operand].name, tr_blob_size(ti->made), bytes);
  *out = tr_blob_ref(ti->made);
  return TR_OK;
}

static int s_task_write(void *ctx, int64_t lin, tr_blob *b, tr_err *err);

static int s_then_write(void *ctx, int64_t lin, tr_blob *b, tr_err *err) {
  return s_task_write(((s_thenio *)ctx)->io, lin, b, err);
}

/* Output chunk lin of a task with a fused consumer (tx_task.then): stored
** if the task says so, then the consumer's chunk lin made from it, on this
** thread, before the task goes on to its next chunk. */
static int s_then_run(s_taskio *io, int64_t i, int64_t lin, tr_blob *b, tr_err *err) {
  const tx_task *t = io->t, *c = t->then;
  int rc = t->then_store ? s_task_store(io, i, b, err) : TR_OK;
  if (rc) return rc;
  s_thenio ti = {io->then, t->then_from, b};
  tx_chunk_io cio = {&ti, s_then_read, s_then_write, NULL};
  const tr_tensor *in_meta[TK_MAX_INPUTS];
  for (int k = 0; k < c->node.ninputs; k++) in_meta[k] = &c->in_meta[k];
  return tx_node_run(io->w->kt, 0, 0, &c->node, in_meta, &c->out_meta, &cio, &lin, 1, &io->job->cancel,
                     err);
}

/* Output chunk lin of the task: stored (s_task_store), or handed to its
** fused consumer (s_then_run). */
static int s_task_write(void *ctx, int64_t lin, tr_blob *b, tr_err *err) {
  s_taskio *io = ctx;
  const tx_task *t = io->t;
  for (int64_t i = 0; i < t->nout; i++)
    if (t->out_lin[i] == lin) return t->then ? s_then_run(io, i, lin, b, err) : s_task_store(io, i, b, err);
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
  tr_blob *b = tr_blob_new(bytes);
  tr_err err;
  int rc = b ? tx_fill_chunk(fr->io->w->kt, &t->out_meta, &t->f, t->out_lin[i], tr_blob_data(b),
                             &fr->io->job->cancel)
             : tr_seterr(&err, TR_ENOMEM, "out of memory");
  if (b && rc) s_kernel_failed(&err, "fill", rc);
  if (!rc) rc = s_task_write(fr->io, t->out_lin[i], b, &err);
  tr_blob_unref(&b);
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
  tr_blob *acc = tr_blob_new(bytes), *part = NULL;
  tr_err err;
  int rc = acc ? TR_OK : tr_seterr(&err, TR_ENOMEM, "out of memory");
  int first = 1;
  for (int64_t k = 0; !rc && k < t->nin; k++) {
    if (t->in_lin[k] != lin) continue;
    rc = wi_job_get(fr->io->job, t->in_id[k], bytes, &part, &err); /* all stored: run once they were */
    if (!rc && first) /* the store's bytes are shared: fold into a copy */
      memcpy(tr_blob_data(acc), tr_blob_data(part), bytes);
    else if (!rc && (rc = kt->combine(t->out_meta.dtype, t->node.agg, tr_blob_data(acc),
                                      tr_blob_data(part), nel, &fr->io->job->cancel)))
      s_kernel_failed(&err, "combine", rc);
    tr_blob_unref(&part);
    first = 0;
  }
  if (!rc && first) rc = tr_seterr(&err, TR_EINVAL, "no partial of output chunk %lld", (long long)lin);
  if (!rc && t->node.post.n &&
      (rc = kt->map(t->out_meta.dtype, &t->node.post, tr_blob_data(acc), nel, &fr->io->job->cancel)))
    s_kernel_failed(&err, "map", rc);
  if (!rc) rc = s_task_write(fr->io, lin, acc, &err);
  tr_blob_unref(&acc);
  if (rc) {
    pthread_mutex_lock(&fr->mu);
    if (!fr->err.code) fr->err = err;
    pthread_mutex_unlock(&fr->mu);
  }
  return rc;
}

/* CPU seconds this process has used, user and system. */
static void s_cpu(double *user, double *sys) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  *user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
  *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

#define S_RSS_SLACK ((int64_t)64 << 20)

/* Run one TASK; fills the reply: TASK_OK {u32 n, n x chunk meta, f64 s,
** str backend, u64 GPU bytes in, out, f64 their seconds, f64 CPU user,
** system, u64 peak resident bytes} or an error.  The CPU is the process's
** over the task: tasks run one at a time, on the kernel threads; so is
** the peak. */
static void s_run_task(wi_worker *w, wi_job *j) {
  tx_task t;
  tr_err err;
  tk_device_stats d0, d1;
  double u0, s0, u1, s1;
  tr_clearerr(&err);
  tk_device_stats_get(&d0);
  s_cpu(&u0, &s0);
  /* Well over its --memory before the task starts (the heap keeps what
  ** earlier tasks freed, between chunks still in use): give the free pages
  ** back.  The slack is what a worker holds besides chunks (code,
  ** libraries, BLAS buffers); trimming below it costs page faults in
  ** every task and keeps nothing more within the budget. */
  if (w->cfg->memory > 0 && tr_rss() > w->cfg->memory + S_RSS_SLACK) malloc_trim(0);
  tr_peak_rss(1); /* the reply tells this task's peak (one task at a time) */
  double t0 = tr_now();
  int rc = tx_task_decode(j->body, j->body_len, &t, &err);
  if (rc) {
    wi_fail_job(j, rc, err.msg);
    wi_log("rejected task: %s", err.msg);
    return;
  }
  if (!wi_job_store(j, S_OPEN_CREATE, &err)) {
    wi_fail_job(j, err.code, err.msg);
    tx_task_free(&t);
    return;
  }
  tc_store_busy(j->store, 1); /* its background writes wait for the task */
  s_taskio io = {w, j, &t, calloc((size_t)t.nout + 1, 8), calloc((size_t)t.nout + 1, 8), NULL};
  s_taskio then = {w, j, t.then, NULL, NULL, NULL};
  if (t.then) {
    then.sum = calloc((size_t)t.nout + 1, 8);
    then.bytes = calloc((size_t)t.nout + 1, 8);
    io.then = &then;
  }
  if (!io.sum || !io.bytes || (t.then && (!then.sum || !then.bytes))) {
    rc = tr_seterr(&err, TR_ENOMEM, "out of memory");
  } else if (t.kind == TX_TASK_FILL) {
    s_fillrun fr = {&io, {0, "", 0}, PTHREAD_MUTEX_INITIALIZER};
    rc = tr_parallel_for(w->threads, t.nout, s_fill_one, &fr, &j->cancel);
    if (rc) err = fr.err.code ? fr.err : err;
  } else if (t.kind == TX_TASK_COMBINE) {
    s_fillrun fr = {&io, {0, "", 0}, PTHREAD_MUTEX_INITIALIZER};
    rc = tr_parallel_for(w->threads, t.nout, s_combine_one, &fr, &j->cancel);
    if (rc) err = fr.err.code ? fr.err : err;
  } else {
    tx_chunk_io cio = {&io, s_task_read, s_task_write, s_task_has};
    const tr_tensor *in_meta[TK_MAX_INPUTS];
    for (int i = 0; i < t.node.ninputs; i++) in_meta[i] = &t.in_meta[i];
    /* operands cached within a quarter of --memory, at most 1 GiB */
    int64_t cache = wi_memory(w) / 4 < ((int64_t)1 << 30) ? wi_memory(w) / 4 : (int64_t)1 << 30;
    rc = tx_node_run(w->kt, w->threads, (size_t)cache, &t.node, in_meta, &t.out_meta, &cio,
                     t.out_lin, t.nout, &j->cancel, &err);
  }
  /* TASK_OK's body: {u32 n, n x chunk meta, f64 seconds, str backend, u64
  ** bytes to the GPU, u64 bytes from it, f64 copy seconds, f64 user CPU,
  ** f64 system CPU, u64 peak RSS, str write trouble, u64 disk free}; read
  ** by dist/run.c, s_task_results */
  if (rc) {
    wi_fail_job(j, rc, err.msg[0] ? err.msg : rc == TR_EINTR ? "interrupted" : "task failed");
  } else {
    j->rtype = TN_TASK_OK;
    /* the chunks stored: the task's own, then its fused consumer's */
    int64_t own = !t.then || t.then_store ? t.nout : 0;
    tn_put_u32(&j->reply, (uint32_t)(own + (t.then ? t.then->nout : 0)));
    for (int64_t i = 0; i < own; i++) {
      tn_chunk c = {t.out_id[i], (uint8_t)t.out_meta.dtype, io.bytes[i], io.sum[i]};
      tn_put_chunk(&j->reply, &c);
    }
    for (int64_t i = 0; t.then && i < t.then->nout; i++) {
      tn_chunk c = {t.then->out_id[i], (uint8_t)t.then->out_meta.dtype, then.bytes[i], then.sum[i]};
      tn_put_chunk(&j->reply, &c);
    }
    tn_put_f64(&j->reply, tr_now() - t0);
    tn_put_str(&j->reply, w->kt->name);
    /* What the task copied to and from the GPU (one task at a time here). */
    tk_device_stats_get(&d1);
    tn_put_u64(&j->reply, d1.h2d_bytes - d0.h2d_bytes);
    tn_put_u64(&j->reply, d1.d2h_bytes - d0.d2h_bytes);
    tn_put_f64(&j->reply, d1.copy_s - d0.copy_s);
    s_cpu(&u1, &s1);
    tn_put_f64(&j->reply, u1 - u0);
    tn_put_f64(&j->reply, s1 - s0);
    tn_put_u64(&j->reply, (uint64_t)tr_peak_rss(0));
    /* and why this database's background writes fail, "" while they do
    ** not: the shell warns at once, not only when its close cannot write
    ** what is held (dist/run.c, s_write_trouble) */
    char why[256];
    tc_store_write_trouble(j->store, why, sizeof why);
    tn_put_str(&j->reply, why);
    tn_put_u64(&j->reply, wi_disk_free(w));
  }
  tc_store_busy(j->store, 0);
  free(io.sum);
  free(io.bytes);
  free(then.sum);
  free(then.bytes);
  tx_task_free(&t);
}

/* The partials combine task j still waits for (tx_task.in_wait): 0 when it
** may run.  Read from its body the first time; a body that does not
** decode runs, to fail with its error. */
static uint32_t s_missing(wi_worker *w, wi_job *j) {
  tr_err err;
  if (j->type != TN_TASK) return 0;
  if (!j->waits_known) {
    tx_task t;
    j->waits_known = 1;
    if (tx_task_decode(j->body, j->body_len, &t, &err)) return 0;
    for (int64_t i = 0; t.kind == TX_TASK_COMBINE && i < t.nin; i++) j->nwaits += t.in_wait[i];
    if (j->nwaits && !(j->waits = malloc(sizeof *j->waits * j->nwaits))) j->nwaits = 0; /* it reads them */
    for (int64_t i = 0, k = 0; j->nwaits && i < t.nin; i++)
      if (t.in_wait[i]) j->waits[k++] = t.in_id[i];
    tx_task_free(&t);
  }
  tc_store *s = j->nwaits ? wi_store_for(w, j->db, S_OPEN_CREATE, &err) : NULL;
  if (!s) return 0;
  /* those stored are not looked for again */
  for (uint32_t i = 0; i < j->nwaits;) {
    tr_dtype dt;
    uint64_t nb, sum;
    if (tc_store_stat(s, j->waits[i], &dt, &nb, &sum) == TR_OK)
      j->waits[i] = j->waits[--j->nwaits];
    else
      i++;
  }
  return j->nwaits;
}

static void s_run_sync(wi_worker *w, wi_job *j) {
  tn_rbuf r;
  tr_err err;
  tn_rbuf_init(&r, j->body, j->body_len);
  uint32_t n = tn_get_count(&r, 8);
  uint64_t *ids = calloc(n + 1, sizeof *ids);
  int rc = TR_OK;
  for (uint32_t i = 0; ids && i < n; i++) ids[i] = tn_get_u64(&r);
  int all = r.off < r.n ? tn_get_u8(&r) : 0; /* and all it holds in memory only */
  if (!ids)
    rc = tr_seterr(&err, TR_ENOMEM, "out of memory");
  else if (tn_rbuf_ok(&r) != TR_OK || all > 1)
    rc = tr_seterr(&err, TR_EINVAL, "malformed SYNC");
  else if ((n || all) && !wi_job_store(j, S_OPEN_EXISTS, &err))
    rc = !n && err.code == TR_ENOTFOUND ? TR_OK : err.code; /* no store: nothing held */
  else if (n)
    rc = tc_store_sync(j->store, ids, n, &err);
  if (!rc && all && j->store) rc = tc_store_sync_unwritten(j->store, &err);
  if (w->trace && !rc) wi_log("SYNC of %u chunks%s", n, all ? " and all held in memory only" : "");
  if (rc) {
    wi_fail_job(j, rc, err.msg);
  } else {
    j->rtype = TN_SYNC_OK;
    tn_put_u32(&j->reply, n);
  }
  free(ids);
}

/* Job j (w->running) is over: its reply to the main loop.  What it
** stored may be a parked combine's partial. */
static void s_job_done(wi_worker *w, wi_job *j, void *tx) {
  pthread_mutex_lock(&w->mu);
  w->running = NULL;
  j->next = w->done;
  w->done = j;
  if (w->parked) w->recheck = 1;
  pthread_mutex_unlock(&w->mu);
  zmq_send(tx, "", 0, 0);
}

/* Run job j, w->running already (a cancel reaches it through its token). */
static void s_run_job(wi_worker *w, wi_job *j, void *tx) {
  tr_work(1); /* the warm heap waits (worker/base.c) */
  if (tr_cancelled(&j->cancel)) wi_fail_job(j, TR_EINTR, "cancelled");
  else if (j->type == TN_TASK) s_run_task(w, j);
  else s_run_sync(w, j);
  tr_work(0);
  s_job_done(w, j, tx);
}

/* Run the parked combines whose partials are all stored now, and answer
** the cancelled ones.  Only this thread takes jobs off w->parked, so it
** walks the list unlocked; it unlinks under mu, for the readers. */
static void s_run_parked(wi_worker *w, void *tx) {
  for (wi_job **pp = &w->parked; *pp;) {
    wi_job *j = *pp;
    if (!tr_cancelled(&j->cancel) && s_missing(w, j)) {
      pp = &j->next;
      continue;
    }
    pthread_mutex_lock(&w->mu);
    *pp = j->next;
    w->running = j;
    pthread_mutex_unlock(&w->mu);
    s_run_job(w, j, tx);
  }
}

void *wi_task_thread(void *arg) {
  wi_worker *w = arg;
  void *tx = zmq_socket(w->ctx, ZMQ_PAIR);
  zmq_connect(tx, "inproc://tradb-worker-done");
  for (;;) {
    pthread_mutex_lock(&w->mu);
    while (!w->todo && !(w->parked && w->recheck) && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
    if (w->quit) {
      pthread_mutex_unlock(&w->mu);
      break;
    }
    if (w->parked && w->recheck) {
      w->recheck = 0; /* what arrives from here on sets it again */
      pthread_mutex_unlock(&w->mu);
      s_run_parked(w, tx);
      continue;
    }
    wi_job *j = w->todo;
    w->todo = j->next;
    if (!w->todo) w->todo_tail = NULL;
    w->running = j; /* from here a cancel reaches it through its token */
    pthread_mutex_unlock(&w->mu);
    if (s_missing(w, j)) {
      pthread_mutex_lock(&w->mu);
      int cancelled = tr_cancelled(&j->cancel);
      if (!cancelled) { /* parked at the end, looked at again at once:
                           a partial may have come since s_missing */
        wi_job **pp = &w->parked;
        while (*pp) pp = &(*pp)->next;
        j->next = NULL;
        *pp = j;
        w->running = NULL;
        w->recheck = 1;
      }
      pthread_mutex_unlock(&w->mu);
      if (!cancelled) continue;
    }
    s_run_job(w, j, tx);
  }
  zmq_close(tx);
  return NULL;
}

/* Hand a TASK or SYNC to the task thread, its body copied. */
void wi_queue(wi_worker *w, tn_in *in) {
  size_t n;
  const void *body = tn_in_body(in, &n);
  wi_job *j = wi_job_for(w, in);
  if (!j) return;
  if (!(j->body = malloc(n + 1))) {
    tn_send_error(w->router, in->route, in->route_len, in->req, in->db, TR_ENOMEM, 0, "out of memory");
    free(j);
    return;
  }
  memcpy(j->body, body, n);
  j->body_len = n;
  j->heard = tr_now();
  wi_enqueue(w, &w->todo, &w->todo_tail, &w->cv, j);
}

/* Did job j come from route? */
static int s_from(const wi_job *j, const uint8_t *route, size_t len) {
  return j->route_len == len && !memcmp(j->route, route, len);
}

/* Any message from route is a sign of life of the coordinator of the jobs
** it sent (heartbeats included). */
void wi_heard(wi_worker *w, const uint8_t *route, size_t len) {
  double now = tr_now();
  pthread_mutex_lock(&w->mu);
  if (w->running && s_from(w->running, route, len)) w->running->heard = now;
  for (wi_job *j = w->todo; j; j = j->next)
    if (s_from(j, route, len)) j->heard = now;
  for (wi_job *j = w->parked; j; j = j->next)
    if (s_from(j, route, len)) j->heard = now;
  pthread_mutex_unlock(&w->mu);
}

void wi_task_progress(wi_worker *w, const uint8_t *route, size_t len, tn_wbuf *hb) {
  pthread_mutex_lock(&w->mu);
  if (w->running && w->running->type == TN_TASK && s_from(w->running, route, len)) {
    tn_put_u64(hb, w->running->req);
    tn_put_u64(hb, (uint64_t)w->running->made);
  }
  pthread_mutex_unlock(&w->mu);
}

/* Cancel the task-thread jobs from route: the running one through its
** token (its kernels stop within a poll), the queued ones answered
** TR_EINTR and dropped, the parked ones through their tokens (the task
** thread answers them).  Logs one line saying why; a no-op when there is
** nothing of route's to cancel and quiet is set. */
void wi_cancel_from(wi_worker *w, const uint8_t *route, size_t len, int quiet,
                          const char *why) {
  wi_job *drop = NULL, **pp;
  int running = 0, dropped = 0;
  pthread_mutex_lock(&w->mu);
  if (w->running && s_from(w->running, route, len) && !tr_cancelled(&w->running->cancel)) {
    snprintf(w->running->why, sizeof w->running->why, "%s", why);
    tr_cancel_set(&w->running->cancel);
    running = 1;
  }
  for (wi_job *j = w->parked; j; j = j->next)
    if (s_from(j, route, len) && !tr_cancelled(&j->cancel)) {
      snprintf(j->why, sizeof j->why, "%s", why);
      tr_cancel_set(&j->cancel);
      w->recheck = 1;
      pthread_cond_signal(&w->cv);
      dropped++;
    }
  w->todo_tail = NULL;
  for (pp = &w->todo; *pp;) {
    wi_job *j = *pp;
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
    wi_job *nx = drop->next;
    snprintf(drop->why, sizeof drop->why, "%s", why);
    wi_fail_job(drop, TR_EINTR, why);
    tn_send_error(w->router, drop->route, drop->route_len, drop->req, drop->db, TR_EINTR, 0, drop->msg);
    wi_job_free(drop);
    drop = nx;
  }
  if (running || dropped || !quiet)
    wi_log("%s: %s, %d queued dropped", why,
          running ? "stopping its running task" : "none of its tasks running", dropped);
}

/* The gap is not the coordinators' silence: each job heard from them that
** much later. */
void wi_paused(wi_worker *w, double gap) {
  pthread_mutex_lock(&w->mu);
  if (w->running) w->running->heard += gap;
  for (wi_job *j = w->todo; j; j = j->next) j->heard += gap;
  for (wi_job *j = w->parked; j; j = j->next) j->heard += gap;
  pthread_mutex_unlock(&w->mu);
}

/* Cancel the jobs of coordinators silent for the liveness window (their
** shell was killed or cut off): nobody will take the result.  The worker
** stays up for the next coordinator. */
void wi_cancel_lost(wi_worker *w) {
  const double window = TN_LIVENESS_S;
  for (;;) {
    uint8_t route[256];
    size_t len = 0;
    double silent = 0, now = tr_now();
    pthread_mutex_lock(&w->mu);
    wi_job *lost = NULL;
    if (w->running && !tr_cancelled(&w->running->cancel) && now - w->running->heard > window)
      lost = w->running;
    for (wi_job *j = w->todo; j && !lost; j = j->next)
      if (now - j->heard > window) lost = j;
    for (wi_job *j = w->parked; j && !lost; j = j->next)
      if (!tr_cancelled(&j->cancel) && now - j->heard > window) lost = j;
    if (lost) {
      len = lost->route_len;
      memcpy(route, lost->route, len);
      silent = now - lost->heard;
    }
    pthread_mutex_unlock(&w->mu);
    if (!lost) return;
    char why[80];
    snprintf(why, sizeof why, "coordinator silent for %.1f s", silent);
    wi_cancel_from(w, route, len, 1, why);
  }
}
