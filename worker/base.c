/*
** worker/base.c - what every part of a worker uses: its log (with
** malformed messages counted, not each logged), replies, the job queue.
*/
#include "config.h"
#include "worker/worker_int.h"

#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static const char *s_ep = ""; /* who the log lines are from */

/* Log lines say they come from worker ep. */
void wi_log_as(const char *ep) { s_ep = ep; }

void wi_log(const char *fmt, ...) {
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

/* A fatal signal (a fault in a kernel, an abort) is the last thing a
** worker can say: one log line naming it, and the stack, before the
** signal takes its default action again (a core dump where enabled).
** Without it the log ended on the last statement and the shell only saw
** the worker go silent.  The handler uses write() alone: each signal's
** line is made at start, as is backtrace()'s first call (which loads
** libgcc). */
static const int s_fatal_sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
#define S_NFATAL (sizeof s_fatal_sigs / sizeof s_fatal_sigs[0])
static char s_fatal_line[S_NFATAL][320];

static void s_on_fatal(int sig) {
  int e = errno;
  for (size_t i = 0; i < S_NFATAL; i++)
    if (s_fatal_sigs[i] == sig) {
      ssize_t ignore = write(STDERR_FILENO, s_fatal_line[i], strlen(s_fatal_line[i]));
      (void)ignore;
    }
  void *frames[48];
  backtrace_symbols_fd(frames, backtrace(frames, 48), STDERR_FILENO);
  errno = e;
  raise(sig); /* SA_RESETHAND: the default action now */
}

void wi_log_fatal_signals(void) {
  void *frames[1];
  (void)backtrace(frames, 1);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = s_on_fatal;
  sa.sa_flags = (int)SA_RESETHAND;
  for (size_t i = 0; i < S_NFATAL; i++) {
    snprintf(s_fatal_line[i], sizeof s_fatal_line[i], "tradb worker %s: fatal signal %d (SIG%s); its stack:\n",
             s_ep, s_fatal_sigs[i], sigabbrev_np(s_fatal_sigs[i]));
    sigaction(s_fatal_sigs[i], &sa, NULL);
  }
}

/* The routing id in hex (a ZeroMQ one is 5 bytes), at most 16 bytes shown. */
static const char *s_drop_peer(const wi_drop *d, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < d->route_len && i < 16 && o + 3 < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%02x", d->route[i]);
  if (d->route_len > 16 && o + 4 < n) snprintf(buf + o, n - o, "...");
  return d->route_len ? buf : "?";
}

/* Log the count of d (if any) and start a new interval at now. */
static void s_drop_flush(wi_drop *d, double now) {
  char peer[40];
  if (d->count)
    wi_log("dropped %lld more malformed message%s from peer %s since the last report (last: %s)",
          (long long)d->count, d->count == 1 ? "" : "s", s_drop_peer(d, peer, sizeof peer), d->why);
  d->count = 0;
  d->since = now;
}

/* One malformed message from in's sender (tn_recv leaves in->route). */
void wi_drop_note(wi_drops *D, const tn_in *in, const char *why, double now) {
  wi_drop *d = NULL, *stalest = &D->d[0];
  char peer[40];
  for (int i = 0; i < S_DROP_PEERS && !d; i++) {
    wi_drop *e = &D->d[i];
    if (e->used && e->route_len == in->route_len && !memcmp(e->route, in->route, in->route_len))
      d = e;
    else if (!e->used || (stalest->used && e->since < stalest->since))
      stalest = e;
  }
  if (d) {
    d->count++;
    snprintf(d->why, sizeof d->why, "%.*s", (int)sizeof d->why - 1, why);
    if (now - d->since >= D->every) s_drop_flush(d, now);
    return;
  }
  d = stalest;
  if (d->used) s_drop_flush(d, now);
  memcpy(d->route, in->route, in->route_len);
  d->route_len = in->route_len;
  d->used = 1;
  d->count = 0;
  d->since = now;
  wi_log("dropped malformed message from peer %s: %s (more from this peer: a count every %g s)",
        s_drop_peer(d, peer, sizeof peer), why, D->every);
}

/* Log the counts whose interval has passed (all of them when all != 0), and
** forget the peers quiet for a whole interval. */
void wi_drop_tick(wi_drops *D, double now, int all) {
  for (int i = 0; i < S_DROP_PEERS; i++) {
    wi_drop *d = &D->d[i];
    if (!d->used || (!all && now - d->since < D->every)) continue;
    if (!d->count) d->used = 0;
    s_drop_flush(d, now);
  }
}

/* Note activity: the worker is not idle. */
void wi_busy(wi_worker *w) {
  w->last_busy = tr_now();
  w->trimmed = 0;
}

/* Give free memory back to the system once the worker has been idle for
** S_TRIM_IDLE_S, when it holds more of it than the heap keeps at its top
** anyway (M_TRIM_THRESHOLD, set to the same reserve): a worker left idle
** after a big statement should not hold its peak.  What stays: the
** stores' chunks in memory (their budget bounds them), and free heap up to
** the reserve, since a user's next statement comes a few seconds later and
** reads those chunks and reuses that heap.  Measured on
** nn-large's four statements with a 2.6 s pause before each, on two local
** workers: 0.78 s a pass when an idle worker let go of both, against
** 0.50-0.60 s keeping them (and 0.48 s back to back). */
void wi_trim_when_idle(wi_worker *w) {
  if (w->trimmed || tr_now() - w->last_busy < S_TRIM_IDLE_S) return;
  if ((int64_t)mallinfo2().fordblks > tr_heap_reserve(w->cfg->memory)) malloc_trim(0);
  w->trimmed = 1;
}

/* Fault in, once, the free heap a worker keeps between statements anyway
** (tr_heap_reserve, the trim threshold): a user's first statements then
** reuse warm pages as the later ones do, where they faulted in and zeroed
** every new chunk buffer (attention's ten statements, 2 local workers:
** the first pass 0.42-0.45 s and the second 0.31-0.32 s, against
** 0.26-0.28 s once warm).  Only while no tradb process on this machine
** has worked for S_WARM_QUIET_S (tr_host_working: a shell's statement,
** any worker's task), a mebibyte at a time: a page the kernel zeroes, or
** a virtual machine's host backs, holds the core for its whole fault
** whatever the thread's priority.  So a session typed by hand warms while
** its user types, and a piped script, whose statements come back to back,
** is not slowed: warming beside them, attention's first pass took
** 0.63-0.74 s against 0.53-0.58 s with no warm heap, and a dense layer's
** first statement on 4 workers 0.09-0.16 s against 0.03-0.04 s, even with
** each heap waiting for its own worker's tasks. */
#define S_WARM_QUIET_S 0.05

/* Bumped when a worker stops serving: its warm heap stops too.  A heap
** warmed then is for no later statement, and it faulted beside the
** worker writing its chunks at close (measured: two local workers'
** warm heaps faulted in 1.1 GB as their shell closed, a session of four
** 8192 x 1024 by 1024 x 8192 products). */
static atomic_uint s_warm_gen;
static atomic_size_t s_warm_done, s_warm_size; /* bytes faulted in; the heap's size */

typedef struct s_warm {
  size_t n;      /* heap: bytes to fault in */
  unsigned gen;  /* s_warm_gen when it started */
  uint32_t seen; /* tr_host_working's cursor */
  double quiet;  /* since when no tradb process has worked */
} s_warm;

/* Wait until no tradb process on this machine has worked for
** S_WARM_QUIET_S; 0 once the worker stops serving instead. */
static int s_warm_wait(void *arg) {
  s_warm *a = arg;
  for (;;) {
    if (atomic_load(&s_warm_gen) != a->gen) return 0;
    if (tr_host_working(&a->seen)) a->quiet = tr_now();
    else if (tr_now() - a->quiet >= S_WARM_QUIET_S) return 1;
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
}

/* The heap: one buffer of a.n bytes faulted in and freed, kept below the
** trim threshold. */
static void s_warm_the_heap(s_warm *a) {
  volatile char *p = malloc(a->n);
  atomic_store(&s_warm_size, p ? a->n : 0);
  for (size_t i = 0; p && i < a->n; i += 4096) {
    if (!(i & ((1u << 20) - 1)) && !s_warm_wait(a)) break;
    p[i] = 0;
    atomic_store(&s_warm_done, i + 4096);
  }
  free((void *)p);
}

/* Shared memory: the pool gets memory of the sizes the worker made
** lately (tr_blob_pool_wanted), as long as the worker serves. */
static void s_warm_the_pool(s_warm *a) {
  while (s_warm_wait(a)) {
    size_t span = tr_blob_pool_wanted();
    if (!span) { /* nothing wanted until the worker makes more chunks */
      struct timespec ts = {0, 50000000};
      nanosleep(&ts, NULL);
    } else if (tr_blob_pool_warm(span, s_warm_wait, a)) {
      atomic_fetch_add(&s_warm_done, span);
    }
  }
}

static void *s_warm_heap(void *arg) {
  s_warm *a = arg;
  struct sched_param sp = {0};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp); /* best effort */
  a->quiet = tr_now();
  if (tr_blob_sharing()) s_warm_the_pool(a);
  else s_warm_the_heap(a);
  free(a);
  return NULL;
}

void wi_warm_heap(wi_worker *w) {
  int64_t keep = tr_heap_reserve(w->cfg->memory), mine = tr_heap_reserve(wi_memory(w));
  /* below the trim threshold, or freeing it would give it straight back */
  int64_t n = (mine < keep ? mine : keep) - ((int64_t)16 << 20);
  pthread_t t;
  pthread_attr_t at;
  s_warm *a;
  if ((n <= 0 && !tr_blob_sharing()) || !(a = malloc(sizeof *a))) return;
  *a = (s_warm){.n = n > 0 ? (size_t)n : 0, .gen = atomic_load(&s_warm_gen)};
  if (pthread_attr_init(&at)) {
    free(a);
    return;
  }
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &at, s_warm_heap, a)) free(a); /* best effort */
  pthread_attr_destroy(&at);
}

void wi_warm_heap_stop(void) {
  atomic_fetch_add(&s_warm_gen, 1);
}

void wi_warm_heap_report(void) {
  size_t fresh, reused;
  if (tr_blob_sharing()) {
    tr_blob_pool_stats(&fresh, &reused);
    wi_log("warm pool: %zu MiB of shared memory faulted in; chunks made in %zu MiB of new shared "
           "memory and %zu MiB from the pool",
           atomic_load(&s_warm_done) >> 20, fresh >> 20, reused >> 20);
  } else
    wi_log("warm heap: %zu of %zu MiB faulted in", atomic_load(&s_warm_done) >> 20,
           atomic_load(&s_warm_size) >> 20);
}

int wi_reply(wi_worker *w, const uint8_t *route, size_t rl, int type, uint64_t req,
                   uint64_t db, const tn_wbuf *body, int ndata, void *const *data,
                   const size_t *len, tn_free_fn *fr) {
  tr_err err;
  int rc = tn_send(w->router, route, rl, type, req, db, body, ndata, data, len, fr, NULL, &err);
  if (rc) wi_log("cannot reply %s: %s", tn_type_name(type), err.msg);
  return rc;
}


void wi_fail_job(wi_job *j, int code, const char *msg) {
  j->rtype = TN_ERROR;
  j->code = code;
  /* a job stopped by a cancel says why it was cancelled, whichever
  ** kernel or wait noticed it */
  if (code == TR_EINTR && j->why[0]) snprintf(j->msg, sizeof j->msg, "task stopped: %s", j->why);
  else snprintf(j->msg, sizeof j->msg, "%s", msg);
}

int64_t wi_memory(wi_worker *w) {
  int64_t m = w->cfg->memory;
  if (m <= 0) tc_store_budgets(w->root, &m, NULL);
  return m;
}

uint64_t wi_disk_free(const wi_worker *w) {
  struct statvfs vf;
  if (statvfs(w->cfg->data, &vf) != 0) return UINT64_MAX;
  return (uint64_t)vf.f_bavail * (uint64_t)vf.f_frsize;
}

void wi_job_free(wi_job *j) {
  if (j->store) { /* lets go of the store it held (wi_job_store): under
                     heard_mu only, as the main loop frees jobs and must
                     not wait while a store is opened */
    pthread_mutex_lock(&j->w->heard_mu);
    tr_assert(j->w->dbs[j->slot].store == j->store);
    j->w->dbs[j->slot].users--;
    pthread_mutex_unlock(&j->w->heard_mu);
  }
  tn_wbuf_free(&j->reply);
  tn_in_close(&j->in); /* jobs are zeroed: closes nothing if not moved in */
  for (uint32_t i = 0; i < j->nout; i++) tr_blob_unref(&j->out[i].data);
  free(j->out);
  free(j->body);
  free(j->waits);
  free(j);
}

/* A zeroed job answering request in (its type, route and request id), or
** NULL after answering ENOMEM. */
wi_job *wi_job_for(wi_worker *w, const tn_in *in) {
  wi_job *j = calloc(1, sizeof *j);
  if (!j) {
    tn_send_error(w->router, in->route, in->route_len, in->req, in->db, TR_ENOMEM, 0, "out of memory");
    return NULL;
  }
  j->type = in->type;
  memcpy(j->route, in->route, in->route_len);
  j->route_len = in->route_len;
  j->req = in->req;
  j->db = in->db;
  j->w = w;
  return j;
}

/* Append j to the queue (*head, *tail) and wake the thread waiting on cv. */
void wi_enqueue(wi_worker *w, wi_job **head, wi_job **tail, pthread_cond_t *cv, wi_job *j) {
  pthread_mutex_lock(&w->mu);
  if (*tail) (*tail)->next = j;
  else *head = j;
  *tail = j;
  pthread_cond_signal(cv);
  pthread_mutex_unlock(&w->mu);
}

/* A request's body as a read cursor, and a clear error buffer. */
void wi_request_body(tn_in *in, tn_rbuf *r, tr_err *err) {
  size_t n;
  const void *body = tn_in_body(in, &n);
  tn_rbuf_init(r, body, n);
  tr_clearerr(err);
}
