/*
** util/util.c - error buffers, "did you mean" hints, element types,
** invariant reports, clocks and the thread pool shared by every stage.
*/
#include "config.h"
#include "util/util.h"

#include <ctype.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <pthread.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

_Static_assert(__atomic_always_lock_free(sizeof(int), 0),
               "tr_cancel_set must be lock-free to be called from a signal handler");

int tr_seterr(tr_err *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    err->at = 0;
  }
  return code;
}

int tr_prefix(tr_err *err, int code, const char *fmt, ...) {
  if (err) {
    char cause[sizeof err->msg];
    va_list ap;
    memcpy(cause, err->msg, sizeof cause);
    cause[sizeof cause - 1] = '\0';
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof err->msg)
      snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", cause);
    err->code = code;
  }
  return code;
}

void tr_clearerr(tr_err *err) {
  if (err) {
    err->code = TR_OK;
    err->msg[0] = '\0';
    err->at = 0;
  }
}

/* Edits between a and b, letter case ignored (optimal string alignment:
** insert, delete, change, swap of neighbours), or limit + 1 when more. */
static int s_edits(const char *a, const char *b, int limit) {
  int n = (int)strlen(a), m = (int)strlen(b);
  if (n > 63 || m > 63 || abs(n - m) > limit) return limit + 1;
  int d[64][64];
  for (int i = 0; i <= n; i++) d[i][0] = i;
  for (int j = 0; j <= m; j++) d[0][j] = j;
  for (int i = 1; i <= n; i++)
    for (int j = 1; j <= m; j++) {
      int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
      int v = d[i - 1][j - 1] + (ca != cb);
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
          cb == tolower((unsigned char)a[i - 2]) && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[n][m];
}

int tr_closest(const char *word, const char *const *cands, int n) {
  size_t len = strlen(word);
  /* a one-letter word is one edit from every other one-letter name:
  ** only its other letter case is a hint (B is not "A?") */
  int limit = len <= 1 ? 0 : len <= 4 ? 1 : len <= 8 ? 2 : 3, best = -1, bestd = limit + 1;
  for (int i = 0; i < n; i++)
    if (!strcmp(cands[i], word)) return -1;
  for (int i = 0; i < n; i++) {
    if (!strcasecmp(cands[i], word)) return i;
    int e = s_edits(word, cands[i], limit);
    if (e < bestd) {
      bestd = e;
      best = i;
    }
  }
  return best;
}

void tr_assert_fail(const char *expr, const char *file, int line, const char *func) {
  fprintf(stderr, "tradb: %s:%d: %s: invariant '%s' broken\n", file, line, func, expr);
  abort();
}

size_t tr_dtype_size(tr_dtype t) { return t == TR_F64 ? 8 : 4; }

const char *tr_dtype_name(tr_dtype t) { return t == TR_F64 ? "f64" : "f32"; }

int tr_dtype_parse(const char *s, tr_dtype *out) {
  if (!strcmp(s, "f32") || !strcmp(s, "F32") || !strcmp(s, "float32")) {
    *out = TR_F32;
    return TR_OK;
  }
  if (!strcmp(s, "f64") || !strcmp(s, "F64") || !strcmp(s, "float64")) {
    *out = TR_F64;
    return TR_OK;
  }
  return TR_ETYPE;
}

void *tr_alloc_aligned(size_t bytes) {
  void *p = NULL;
  /* Round up so that vector loops may read whole cache lines. */
  size_t n = (bytes + 63) & ~(size_t)63;
  if (n == 0) n = 64;
  if (n >= TR_ALIGN_BIG) return malloc(n);
  if (posix_memalign(&p, 64, n) != 0) return NULL;
  return p;
}

void tr_free_aligned(void *p) { free(p); }

/* n bytes of buf to fd at off, or at its position where off < 0. */
static int s_write_loop(int fd, const void *buf, size_t n, int64_t off) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = off < 0 ? write(fd, p, n) : pwrite(fd, p, n, (off_t)off);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (k == 0) return EIO;
    p += k;
    if (off >= 0) off += k;
    n -= (size_t)k;
  }
  return 0;
}

int tr_write_all(int fd, const void *buf, size_t n) { return s_write_loop(fd, buf, n, -1); }

int tr_pwrite_all(int fd, const void *buf, size_t n, int64_t off) { return s_write_loop(fd, buf, n, off); }

int tr_pread_all(int fd, void *buf, size_t n, int64_t off, size_t *got) {
  char *p = buf;
  size_t done = 0;
  while (done < n) {
    ssize_t k = pread(fd, p + done, n - done, (off_t)off + (off_t)done);
    if (k < 0) {
      if (errno == EINTR) continue;
      *got = done;
      return errno;
    }
    if (k == 0) break;
    done += (size_t)k;
  }
  *got = done;
  return 0;
}

double tr_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tr_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

void tr_deadline(double t, struct timespec *ts) {
  ts->tv_sec = (time_t)t;
  ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
}

int tr_ncores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int64_t tr_phys_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  return pages > 0 && psize > 0 ? (int64_t)pages * psize : 0;
}

/* A "Vm...:" field of /proc/self/status in bytes (0 if unknown). */
static int64_t s_status_bytes(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t n = strlen(field);
  int64_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n)) kb = strtoll(line + n, NULL, 10);
  if (f) fclose(f);
  return kb * 1024;
}

int64_t tr_rss(void) { return s_status_bytes("VmRSS:"); }

int64_t tr_heap_reserve(int64_t memory) {
  int64_t most = (int64_t)1 << 30;
  return memory > 0 && memory / 2 < most ? memory / 2 : most;
}

int64_t tr_peak_rss(int reset) {
  int64_t peak = s_status_bytes("VmHWM:");
  FILE *f;
  /* "5" resets the high-water mark (Linux 4.0 and later); best effort */
  if (reset && (f = fopen("/proc/self/clear_refs", "w"))) {
    fputs("5", f);
    fclose(f);
  }
  return peak;
}

/* The work table (tr_work): the number of works started, then one slot
** per process working now, holding its pid. */
#define S_WORK_SLOTS 127
typedef struct s_work_tab {
  _Atomic uint32_t started;
  _Atomic int32_t pid[S_WORK_SLOTS];
} s_work_tab;

static s_work_tab *s_work;
static pthread_once_t s_work_once = PTHREAD_ONCE_INIT;
static _Atomic int s_working;   /* this process, with or without the table */
static _Atomic uint32_t s_own_started;
static int s_work_slot = -1;    /* this process's slot while it works */

static void s_work_open(void) {
  char name[64];
  struct stat st;
  const char *test = getenv("TRADB_TEST_WORK_TABLE"); /* a table of a test's own */
  if (test) snprintf(name, sizeof name, "%s", test);
  else snprintf(name, sizeof name, "/tradb-busy-%u", (unsigned)getuid());
  int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  /* several processes may size it at once: each to the same length */
  if (fstat(fd, &st) || ((size_t)st.st_size < sizeof(s_work_tab) &&
                         ftruncate(fd, (off_t)sizeof(s_work_tab)))) {
    close(fd);
    return;
  }
  void *p = mmap(NULL, sizeof(s_work_tab), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p != MAP_FAILED) s_work = p;
}

void tr_work(int on) {
  pthread_once(&s_work_once, s_work_open);
  atomic_store(&s_working, on);
  if (!on) {
    if (s_work && s_work_slot >= 0) atomic_store(&s_work->pid[s_work_slot], 0);
    s_work_slot = -1;
    return;
  }
  atomic_fetch_add(&s_own_started, 1);
  if (!s_work || s_work_slot >= 0) return;
  atomic_fetch_add(&s_work->started, 1);
  uint32_t me = (uint32_t)getpid();
  for (uint32_t i = 0; i < S_WORK_SLOTS && s_work_slot < 0; i++) {
    int k = (int)((me + i) % S_WORK_SLOTS);
    int32_t none = 0;
    if (atomic_compare_exchange_strong(&s_work->pid[k], &none, (int32_t)me)) s_work_slot = k;
  }
}

int tr_host_working(uint32_t *seen) {
  pthread_once(&s_work_once, s_work_open);
  uint32_t now = atomic_load(&s_own_started) + (s_work ? atomic_load(&s_work->started) : 0);
  int busy = atomic_load(&s_working) || now != *seen;
  *seen = now;
  for (int i = 0; s_work && !busy && i < S_WORK_SLOTS; i++) {
    int32_t pid = atomic_load(&s_work->pid[i]);
    if (!pid) continue;
    if (!kill(pid, 0) || errno != ESRCH) busy = 1;
    else atomic_compare_exchange_strong(&s_work->pid[i], &pid, 0); /* it is gone */
  }
  return busy;
}

/* Shared state of one tr_parallel_for call. */
typedef struct pool_job {
  pthread_mutex_t mu; /* guards next and status */
  int64_t next;       /* next task index to hand out */
  int64_t n;          /* number of tasks */
  int status;         /* first failing status, TR_OK so far */
  tr_task_fn fn;      /* the task body */
  void *arg;          /* its argument */
  const tr_cancel *cancel; /* stops handing out tasks once set; may be NULL */
} pool_job;

static void *s_pool_worker(void *p) {
  pool_job *job = p;
  for (;;) {
    int64_t i;
    pthread_mutex_lock(&job->mu);
    if (job->status == TR_OK && tr_cancelled(job->cancel)) job->status = TR_EINTR;
    if (job->status != TR_OK || job->next >= job->n) {
      pthread_mutex_unlock(&job->mu);
      return NULL;
    }
    i = job->next++;
    pthread_mutex_unlock(&job->mu);
    int rc = job->fn(job->arg, i);
    if (rc != TR_OK) {
      pthread_mutex_lock(&job->mu);
      if (job->status == TR_OK) job->status = rc;
      pthread_mutex_unlock(&job->mu);
    }
  }
}

/*
** The pool's helpers: started when first wanted and kept for the
** process's life, so that a statement's chunk tasks do not each pay for a
** thread's start and join (75-80 us a thread on the 2-core VM of
** BENCHMARKS.md, where a small statement's task takes a few hundred).  One
** tr_parallel_for at a time has them; a call made while another thread's
** holds them starts threads of its own, as every call did before.
** Helper k takes part in a job when k < want; it counts itself out in
** running, and the caller waits for that before the job (on its stack)
** goes away.  A fork's child has none of the parent's helpers: it starts
** with an empty pool (s_pool_child).
*/
#define S_POOL_MAX 255
static struct {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  int n;              /* helpers started */
  int busy;           /* a call has the helpers */
  uint64_t gen;       /* bumped for each job */
  int want, running;  /* this job's helpers, and how many are still in it */
  pool_job *job;
  uint64_t born[S_POOL_MAX]; /* gen when helper k was started */
} s_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};
static pthread_once_t s_pool_once = PTHREAD_ONCE_INIT;

static void s_pool_prepare(void) { pthread_mutex_lock(&s_pool.mu); }
static void s_pool_parent(void) { pthread_mutex_unlock(&s_pool.mu); }
static void s_pool_child(void) {
  pthread_mutex_init(&s_pool.mu, NULL);
  pthread_cond_init(&s_pool.go, NULL);
  pthread_cond_init(&s_pool.done, NULL);
  s_pool.n = s_pool.busy = s_pool.want = s_pool.running = 0;
  s_pool.job = NULL;
}
static void s_pool_init(void) { pthread_atfork(s_pool_prepare, s_pool_parent, s_pool_child); }

static void *s_pool_helper(void *p) {
  int me = (int)(intptr_t)p;
  pthread_mutex_lock(&s_pool.mu);
  uint64_t seen = s_pool.born[me];
  for (;;) {
    while (s_pool.gen == seen) pthread_cond_wait(&s_pool.go, &s_pool.mu);
    seen = s_pool.gen;
    if (me >= s_pool.want) continue;
    pool_job *job = s_pool.job;
    pthread_mutex_unlock(&s_pool.mu);
    s_pool_worker(job);
    pthread_mutex_lock(&s_pool.mu);
    if (--s_pool.running == 0) pthread_cond_signal(&s_pool.done);
  }
  return NULL;
}

/* Hand job to helpers (up to `helpers`); 0 if they are another call's. */
static int s_pool_start(pool_job *job, int helpers) {
  pthread_once(&s_pool_once, s_pool_init);
  pthread_mutex_lock(&s_pool.mu);
  if (s_pool.busy) {
    pthread_mutex_unlock(&s_pool.mu);
    return 0;
  }
  s_pool.busy = 1;
  while (s_pool.n < helpers) { /* one that fails to start is simply not there */
    pthread_t t;
    pthread_attr_t at;
    int ok = !pthread_attr_init(&at);
    s_pool.born[s_pool.n] = s_pool.gen;
    ok = ok && !pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) &&
         !pthread_create(&t, &at, s_pool_helper, (void *)(intptr_t)s_pool.n);
    pthread_attr_destroy(&at);
    if (!ok) break;
    s_pool.n++;
  }
  s_pool.want = s_pool.running = helpers < s_pool.n ? helpers : s_pool.n;
  s_pool.job = job;
  s_pool.gen++;
  pthread_cond_broadcast(&s_pool.go);
  pthread_mutex_unlock(&s_pool.mu);
  return 1;
}

static void s_pool_wait(void) {
  pthread_mutex_lock(&s_pool.mu);
  while (s_pool.running) pthread_cond_wait(&s_pool.done, &s_pool.mu);
  s_pool.busy = 0;
  s_pool.job = NULL;
  pthread_mutex_unlock(&s_pool.mu);
}

int tr_parallel_for(int nthreads, int64_t n, tr_task_fn fn, void *arg, const tr_cancel *cancel) {
  pool_job job;
  pthread_t tids[S_POOL_MAX];
  int started = 0, pooled = 0;
  if (n <= 0) return TR_OK;
  if (nthreads < 1) nthreads = 1;
  if (nthreads > S_POOL_MAX + 1) nthreads = S_POOL_MAX + 1;
  if (nthreads > n) nthreads = (int)n;
  pthread_mutex_init(&job.mu, NULL);
  job.next = 0;
  job.n = n;
  job.status = TR_OK;
  job.fn = fn;
  job.arg = arg;
  job.cancel = cancel;
  /* The calling thread works too; threads that fail to start are simply
  ** not there, the remaining ones take their share. */
  if (nthreads > 1 && !(pooled = s_pool_start(&job, nthreads - 1)))
    for (int t = 1; t < nthreads; t++)
      if (pthread_create(&tids[started], NULL, s_pool_worker, &job) == 0) started++;
  s_pool_worker(&job);
  if (pooled) s_pool_wait();
  for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
  pthread_mutex_destroy(&job.mu);
  return job.status;
}

void tr_text_put(tr_text *t, const char *fmt, ...) {
  va_list ap;
  while (!t->oom) {
    size_t room = t->cap - t->n;
    va_start(ap, fmt);
    int w = vsnprintf(t->s ? t->s + t->n : NULL, room, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    if ((size_t)w < room) {
      t->n += (size_t)w;
      return;
    }
    size_t cap = (t->cap + (size_t)w + 1) * 2;
    char *ns = realloc(t->s, cap);
    if (!ns) {
      t->oom = 1;
      return;
    }
    t->s = ns;
    t->cap = cap;
  }
}

void tr_text_json(tr_text *t, const char *s) {
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') tr_text_put(t, "\\%c", *c);
    else if (*c == '\n') tr_text_put(t, "\\n");
    else if (*c < 0x20) tr_text_put(t, "\\u%04x", *c);
    else tr_text_put(t, "%c", *c);
  }
}

char *tr_text_done(tr_text *t) {
  char *s = t->s;
  if (t->oom) {
    free(s);
    s = NULL;
  } else if (!s) {
    s = calloc(1, 1);
  }
  memset(t, 0, sizeof *t);
  return s;
}
