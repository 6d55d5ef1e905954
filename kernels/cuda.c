/*
** kernels/cuda.c - the "cuda" backend: gemm through cuBLAS, and contract,
** combine, map and copy through the CUDA kernel of cuda_kernels.cu (the
** last three as contractions, kernels/adapt.c).  Like every backend it takes host pointers
** and leaves its results in host memory; what makes it fast is what it
** keeps on the device between calls.
**
** Device memory.  One budget per process (tk_device_set_memory; by default
** 85% of what is free when the device is first used) covers three kinds of
** blocks:
**   kept     copies of host buffers the engine declared with keep(): the
**            operand chunks of a plan and the chunk a task computes.  A
**            kept copy is made on first use and serves later calls with no
**            copy; release(p) (a chunk leaves the engine's cache) and
**            release(NULL) (the plan ends) give it up.
**   scratch  operands of one call that are not kept, partial results.
**   pooled   blocks no call uses, left allocated for reuse (cudaMalloc and
**            cudaFree synchronize the whole device).
** A block is found by taking a pooled one of about the right size, else by
** freeing pooled blocks and then the least recently used kept copies until
** the budget has room.  When even that fails the call does not fail: a
** gemm runs in halves (each staging its part through the host), and what
** still does not fit runs on the host kernels.
**
** Copies.  Host buffers are pageable, so copies go through pinned staging
** slots, two per context: the host fills or drains one slot while the DMA
** engine moves the other.  A large gemm is computed in row panels on one
** stream while finished panels go back to the host on another, so the copy
** of C overlaps the product.  Calls from several engine threads use
** separate contexts (cuBLAS handle, streams, slots; at most S_NCTX), so one
** thread's copies overlap another's kernels.
**
** Small calls, and contractions that do little work per element copied
** (elementwise maps, copies), run on the host kernels: there the PCIe copy
** costs more than the work.  Without a device every call runs there.
**
** cuBLAS is not linked but loaded when the first context is made: its
** libraries would cost every tradb process (the shell, each worker, with a
** GPU or not) about 0.1 s and 200 MB at start.
*/
#include "config.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda_kernels.h"
#include "kernels/kernels_int.h"

#define S_NCTX 4                      /* contexts: calls on the device at once */
#define S_NSLOT 2                     /* pinned staging slots per context */
#define S_SLOT ((size_t)32 << 20)     /* bytes per slot */
#define S_NPANEL 8                    /* row panels of a large gemm at most */
#define S_PANEL_MIN 512               /* rows per panel at least */
#define S_MIN_SPLIT 64                /* a gemm that does not fit is halved down to this */
#define S_PAR_COPY ((size_t)8 << 20)  /* host staging copies this large use threads */
#define S_COPY_THREADS 4              /* ... this many */
#define S_MIN_INNER 16                /* aggregated tuples per output element worth a copy */

/* The host kernels (the "openblas" table, kernels/table.c): calls that do
** not run on the device run there.  Set once by tk_cuda_init. */
static tk_backend s_cpu;

/* Outcomes of the device paths besides TR_OK (TR_E* codes are negative). */
#define S_HOST 1  /* better run on the host */
#define S_NOFIT 2 /* the device memory budget has no room */
#define S_EDEV 3  /* a CUDA or cuBLAS call failed */

/* ---- The device ------------------------------------------------------------ */

static pthread_once_t s_probe_once = PTHREAD_ONCE_INIT;
static int s_have;       /* a device can be used */
static char s_desc[320]; /* tk_device_info's text */

static void s_probe(void) {
  struct cudaDeviceProp p;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) e = cudaGetDeviceProperties(&p, 0);
  if (e != cudaSuccess || n < 1) {
    /* Without the NVIDIA driver (no GPU), the runtime calls the missing
    ** driver "insufficient": say plainly that there is none, the
    ** runtime's words after. */
    int driver = access("/proc/driver/nvidia/version", F_OK) == 0;
    const char *why = e == cudaSuccess || e == cudaErrorNoDevice ? "no CUDA-capable GPU"
                      : !driver ? "no NVIDIA driver is loaded"
                      : e == cudaErrorInsufficientDriver ? "the NVIDIA driver is older than this build's CUDA"
                                                         : "the GPU cannot be used";
    snprintf(s_desc, sizeof s_desc, "none (%s; CUDA: %s)", why,
             e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
    (void)cudaGetLastError();
    return;
  }
  snprintf(s_desc, sizeof s_desc, "%.256s, %.1f GiB, compute capability %d.%d", p.name,
           (double)p.totalGlobalMem / (1 << 30), p.major, p.minor);
  s_have = 1;
}

int tk_device_info(char *buf, size_t size) {
  pthread_once(&s_probe_once, s_probe);
  if (buf && size) snprintf(buf, size, "%s", s_desc);
  return s_have;
}

/* Counters (tk_device_stats_get). */
static _Atomic uint64_t s_h2d, s_d2h, s_copy_ns, s_gpu_calls, s_cpu_calls;

void tk_device_stats_get(tk_device_stats *out) {
  out->h2d_bytes = s_h2d;
  out->d2h_bytes = s_d2h;
  out->copy_s = (double)s_copy_ns * 1e-9;
  out->gpu_calls = s_gpu_calls;
  out->cpu_calls = s_cpu_calls;
}

static _Atomic int64_t s_min_work = (int64_t)1 << 24; /* tk_device_set_offload */
static _Atomic size_t s_min_keep = (size_t)1 << 20;

void tk_device_set_offload(int64_t min_work) {
  s_min_work = min_work > 0 ? min_work : 0;
  s_min_keep = min_work > 0 ? (size_t)1 << 20 : 0;
}

/* ---- Device memory ------------------------------------------------------------ */

struct s_keep;

/* One device allocation. */
typedef struct s_mem {
  char *dev;             /* device memory */
  size_t cap;            /* its bytes */
  struct s_keep *owner;  /* the kept buffer it mirrors, or NULL */
  int busy;              /* scratch of a running call */
  uint64_t tick;         /* last use, for LRU */
  struct s_mem *next;    /* all blocks */
} s_mem;

/* A host buffer declared with keep(). */
typedef struct s_keep {
  const char *host; /* the host buffer */
  size_t bytes;     /* its size */
  s_mem *mem;       /* its device copy, or NULL */
  int valid;        /* mem holds what host holds */
  int loading;      /* a call is copying it up */
  int refs;         /* calls using mem */
  int dead;         /* released while in use: freed by the last user */
} s_keep;

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER; /* guards all below */
static pthread_cond_t s_loaded = PTHREAD_COND_INITIALIZER; /* a kept copy is up */
static size_t s_want;    /* tk_device_set_memory; 0 = default */
static size_t s_budget;  /* bytes this process may hold; 0 until first use */
static size_t s_used;    /* bytes allocated, pooled ones included */
static uint64_t s_tick;  /* use counter */
static s_mem *s_mems;    /* every allocation */
static s_keep **s_keeps; /* the kept buffers */
static int s_nkeeps, s_capkeeps;

void tk_device_set_memory(size_t bytes) {
  pthread_mutex_lock(&s_mu);
  s_want = bytes;
  s_budget = bytes; /* 0: s_ready works the default out again */
  pthread_mutex_unlock(&s_mu);
}

/* A device is present and the budget set (s_mu not held). */
static int s_ready(void) {
  if (!tk_device_info(NULL, 0)) return 0;
  pthread_mutex_lock(&s_mu);
  if (!s_budget) {
    size_t avail = 0, total = 0;
    if (cudaMemGetInfo(&avail, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      avail = (size_t)1 << 30;
    }
    s_budget = s_want ? s_want : avail / 100 * 85;
  }
  pthread_mutex_unlock(&s_mu);
  return 1;
}

static void s_mem_free(s_mem *m) {
  int listed = 0;
  for (s_mem **pp = &s_mems; *pp; pp = &(*pp)->next)
    if (*pp == m) {
      *pp = m->next;
      listed = 1;
      break;
    }
  tr_assert(listed && s_used >= m->cap); /* every block is listed and counted */
  if (m->owner) {
    m->owner->mem = NULL;
    m->owner->valid = 0;
  }
  cudaFree(m->dev);
  s_used -= m->cap;
  free(m);
}

/* Free pooled blocks, then kept copies no call uses, least recently used
** first, until bytes more fit the budget; 0 if they cannot. */
static int s_make_room(size_t bytes) {
  while (s_used + bytes > s_budget) {
    s_mem *victim = NULL;
    int pooled = 0;
    for (s_mem *m = s_mems; m; m = m->next) {
      int idle = !m->owner && !m->busy;
      int evictable = m->owner && !m->owner->refs && !m->owner->loading;
      if (!idle && !evictable) continue;
      if (!victim || idle > pooled || (idle == pooled && m->tick < victim->tick)) {
        victim = m;
        pooled = idle;
      }
    }
    if (!victim) return 0;
    s_mem_free(victim);
  }
  return 1;
}

/* A block of at least bytes, marked busy; NULL if the budget has no room. */
static s_mem *s_alloc(size_t bytes) {
  s_mem *best = NULL;
  void *d = NULL;
  bytes = (bytes + 4095) & ~(size_t)4095;
  for (s_mem *m = s_mems; m; m = m->next)
    if (!m->owner && !m->busy && m->cap >= bytes && m->cap - bytes <= bytes / 4 &&
        (!best || m->cap < best->cap))
      best = m;
  if (!best) {
    s_mem *m = calloc(1, sizeof *m);
    if (!m || bytes > s_budget || !s_make_room(bytes)) {
      free(m);
      return NULL;
    }
    if (cudaMalloc(&d, bytes) != cudaSuccess) {
      /* Others share the device: give back every pooled block and try
      ** once more. */
      (void)cudaGetLastError();
      size_t keep_budget = s_budget;
      s_budget = s_used > bytes ? s_used - bytes : 0;
      s_make_room(0);
      s_budget = keep_budget;
      if (cudaMalloc(&d, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        free(m);
        return NULL;
      }
    }
    m->dev = d;
    m->cap = bytes;
    m->next = s_mems;
    s_mems = m;
    s_used += bytes;
    best = m;
  }
  best->busy = 1;
  best->tick = ++s_tick;
  return best;
}

/* Scratch back to the pool. */
static void s_put(s_mem *m) {
  if (!m) return;
  pthread_mutex_lock(&s_mu);
  m->busy = 0;
  m->tick = ++s_tick;
  pthread_mutex_unlock(&s_mu);
}

static void s_keep_free(s_keep *k) {
  tr_assert(k->refs == 0); /* no call uses it */
  if (k->mem) {
    k->mem->owner = NULL;
    k->mem->tick = ++s_tick;
  }
  free(k);
}

/* A call is done with k. */
static void s_unref(s_keep *k) {
  if (!k) return;
  pthread_mutex_lock(&s_mu);
  tr_assert(k->refs > 0);
  if (--k->refs == 0 && k->dead) s_keep_free(k);
  pthread_mutex_unlock(&s_mu);
}

static void s_keep_host(const void *p, size_t bytes) {
  if (!p || bytes < s_min_keep || !tk_device_info(NULL, 0)) return;
  pthread_mutex_lock(&s_mu);
  for (int i = 0; i < s_nkeeps; i++)
    if (s_keeps[i]->host == p) { /* kept again: maybe another size */
      if (s_keeps[i]->bytes != bytes) {
        s_keeps[i]->bytes = bytes;
        s_keeps[i]->valid = 0;
        if (s_keeps[i]->mem && s_keeps[i]->mem->cap < bytes && !s_keeps[i]->refs)
          s_mem_free(s_keeps[i]->mem);
      }
      pthread_mutex_unlock(&s_mu);
      return;
    }
  s_keep *k = calloc(1, sizeof *k);
  if (k && s_nkeeps == s_capkeeps) {
    int cap = s_capkeeps ? 2 * s_capkeeps : 64;
    s_keep **nk = realloc(s_keeps, sizeof *nk * (size_t)cap);
    if (nk) {
      s_keeps = nk;
      s_capkeeps = cap;
    }
  }
  if (k && s_nkeeps < s_capkeeps) {
    k->host = p;
    k->bytes = bytes;
    s_keeps[s_nkeeps++] = k;
  } else {
    free(k); /* not kept: calls simply copy it */
  }
  pthread_mutex_unlock(&s_mu);
}

static void s_release_host(const void *p) {
  pthread_mutex_lock(&s_mu);
  for (int i = s_nkeeps - 1; i >= 0; i--) {
    s_keep *k = s_keeps[i];
    if (p && k->host != p) continue;
    s_keeps[i] = s_keeps[--s_nkeeps];
    if (k->refs) k->dead = 1;
    else s_keep_free(k);
  }
  pthread_mutex_unlock(&s_mu);
}

/* The host bytes [p, p+bytes) were written elsewhere than in their kept
** copies: those copies are stale. */
static void s_invalidate(const void *p, size_t bytes) {
  const char *a = p;
  pthread_mutex_lock(&s_mu);
  for (int i = 0; i < s_nkeeps; i++)
    if (s_keeps[i]->host < a + bytes && a < s_keeps[i]->host + s_keeps[i]->bytes)
      s_keeps[i]->valid = 0;
  pthread_mutex_unlock(&s_mu);
}

/* ---- cuBLAS, loaded on first use ------------------------------------------------ */

static struct {
  __typeof__(cublasCreate_v2) *create;
  __typeof__(cublasDestroy_v2) *destroy;
  __typeof__(cublasSetStream_v2) *set_stream;
  __typeof__(cublasSgemmStridedBatched) *sgemm;
  __typeof__(cublasDgemmStridedBatched) *dgemm;
} s_cublas;
static pthread_once_t s_cublas_once = PTHREAD_ONCE_INIT;

static void s_cublas_load(void) {
  void *h = dlopen(TR_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen(TR_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
#define S_SYM(f, name) (s_cublas.f = (__typeof__(s_cublas.f))dlsym(h, name))
  S_SYM(create, "cublasCreate_v2");
  S_SYM(destroy, "cublasDestroy_v2");
  S_SYM(set_stream, "cublasSetStream_v2");
  S_SYM(sgemm, "cublasSgemmStridedBatched");
  S_SYM(dgemm, "cublasDgemmStridedBatched");
#undef S_SYM
  if (!s_cublas.destroy || !s_cublas.set_stream || !s_cublas.sgemm || !s_cublas.dgemm)
    s_cublas.create = NULL; /* unusable: no context is made */
}

/* ---- Contexts and copies ------------------------------------------------------- */

/* What one call on the device uses. */
typedef struct s_ctx {
  cublasHandle_t blas;              /* on st[0] */
  cudaStream_t st[2];               /* 0: uploads and kernels; 1: downloads */
  char *slot[S_NSLOT];              /* pinned staging */
  cudaEvent_t t0[S_NSLOT], t1[S_NSLOT]; /* around the slot's last copy */
  int pending[S_NSLOT];             /* that copy is not yet waited for */
  cudaEvent_t panel[S_NPANEL];      /* a gemm panel is computed */
  struct s_ctx *next;               /* free list */
} s_ctx;

static pthread_mutex_t s_cmu = PTHREAD_MUTEX_INITIALIZER; /* guards the two below */
static pthread_cond_t s_ccv = PTHREAD_COND_INITIALIZER;
static s_ctx *s_free_ctx; /* contexts not in use */
static int s_nctx;        /* contexts made */

static void s_ctx_destroy(s_ctx *c) {
  for (int i = 0; i < S_NSLOT; i++) {
    if (c->slot[i]) cudaFreeHost(c->slot[i]);
    if (c->t0[i]) cudaEventDestroy(c->t0[i]);
    if (c->t1[i]) cudaEventDestroy(c->t1[i]);
  }
  for (int i = 0; i < S_NPANEL; i++)
    if (c->panel[i]) cudaEventDestroy(c->panel[i]);
  if (c->blas) s_cublas.destroy(c->blas);
  for (int i = 0; i < 2; i++)
    if (c->st[i]) cudaStreamDestroy(c->st[i]);
  free(c);
}

static s_ctx *s_ctx_new(void) {
  pthread_once(&s_cublas_once, s_cublas_load);
  s_ctx *c = s_cublas.create ? calloc(1, sizeof *c) : NULL;
  int ok = c != NULL;
  for (int i = 0; ok && i < 2; i++)
    ok = cudaStreamCreateWithFlags(&c->st[i], cudaStreamNonBlocking) == cudaSuccess;
  ok = ok && s_cublas.create(&c->blas) == CUBLAS_STATUS_SUCCESS &&
       s_cublas.set_stream(c->blas, c->st[0]) == CUBLAS_STATUS_SUCCESS;
  for (int i = 0; ok && i < S_NSLOT; i++)
    ok = cudaHostAlloc((void **)&c->slot[i], S_SLOT, cudaHostAllocDefault) == cudaSuccess &&
         cudaEventCreate(&c->t0[i]) == cudaSuccess && cudaEventCreate(&c->t1[i]) == cudaSuccess;
  for (int i = 0; ok && i < S_NPANEL; i++)
    ok = cudaEventCreateWithFlags(&c->panel[i], cudaEventDisableTiming) == cudaSuccess;
  if (!ok && c) {
    (void)cudaGetLastError();
    s_ctx_destroy(c);
    c = NULL;
  }
  return c;
}

/* A context for one call, waiting while S_NCTX are busy; NULL on failure. */
static s_ctx *s_ctx_get(void) {
  s_ctx *c = NULL;
  pthread_mutex_lock(&s_cmu);
  while (!s_free_ctx && s_nctx >= S_NCTX) pthread_cond_wait(&s_ccv, &s_cmu);
  if (s_free_ctx) {
    c = s_free_ctx;
    s_free_ctx = c->next;
    pthread_mutex_unlock(&s_cmu);
    return c;
  }
  s_nctx++;
  pthread_mutex_unlock(&s_cmu);
  if (!(c = s_ctx_new())) {
    pthread_mutex_lock(&s_cmu);
    s_nctx--;
    pthread_cond_signal(&s_ccv);
    pthread_mutex_unlock(&s_cmu);
  }
  return c;
}

/* Wait for slot i's copy and count its time; S_EDEV if it failed. */
static int s_slot_wait(s_ctx *c, int i) {
  float ms = 0;
  if (!c->pending[i]) return TR_OK;
  c->pending[i] = 0;
  if (cudaEventSynchronize(c->t1[i]) != cudaSuccess) return S_EDEV;
  if (cudaEventElapsedTime(&ms, c->t0[i], c->t1[i]) == cudaSuccess)
    s_copy_ns += (uint64_t)(ms * 1e6);
  return TR_OK;
}

/* Wait for everything the call queued, then hand the context back;
** returns rc.  (A call that got this far with TR_OK has its results on
** the host: every download was waited for.) */
static int s_ctx_put(s_ctx *c, int rc) {
  int bad = 0;
  for (int i = 0; i < 2; i++) bad |= cudaStreamSynchronize(c->st[i]) != cudaSuccess;
  for (int i = 0; i < S_NSLOT; i++) bad |= s_slot_wait(c, i) != TR_OK;
  if (bad || rc) (void)cudaGetLastError();
  pthread_mutex_lock(&s_cmu);
  c->next = s_free_ctx;
  s_free_ctx = c;
  pthread_cond_signal(&s_ccv);
  pthread_mutex_unlock(&s_cmu);
  return rc;
}

/* Host copy of rows: len bytes each, dst rows dp apart, src rows sp apart;
** part `part` of `parts` (by rows, or by bytes of a single row). */
typedef struct s_rows {
  char *dst;
  size_t dp;
  const char *src;
  size_t sp, len, rows;
  int part, parts;
} s_rows;

static void *s_rows_copy(void *arg) {
  const s_rows *r = arg;
  if (r->rows == 1) {
    size_t a = r->len * (size_t)r->part / (size_t)r->parts;
    size_t b = r->len * (size_t)(r->part + 1) / (size_t)r->parts;
    memcpy(r->dst + a, r->src + a, b - a);
  } else {
    size_t a = r->rows * (size_t)r->part / (size_t)r->parts;
    size_t b = r->rows * (size_t)(r->part + 1) / (size_t)r->parts;
    for (size_t i = a; i < b; i++) memcpy(r->dst + i * r->dp, r->src + i * r->sp, r->len);
  }
  return NULL;
}

/* The staging copy between host rows and a slot, on a few threads when
** large: one thread's memcpy is slower than the DMA engine. */
static void s_host_copy(char *dst, size_t dp, const char *src, size_t sp, size_t len, size_t rows) {
  s_rows part[S_COPY_THREADS];
  pthread_t tid[S_COPY_THREADS];
  int parts = len * rows >= S_PAR_COPY ? S_COPY_THREADS : 1, started[S_COPY_THREADS] = {0};
  for (int i = 0; i < parts; i++)
    part[i] = (s_rows){dst, dp, src, sp, len, rows, i, parts};
  for (int i = 1; i < parts; i++)
    started[i] = pthread_create(&tid[i], NULL, s_rows_copy, &part[i]) == 0;
  s_rows_copy(&part[0]);
  for (int i = 1; i < parts; i++) {
    if (started[i]) pthread_join(tid[i], NULL);
    else s_rows_copy(&part[i]);
  }
}

/* A strided block between host and device: rows of len bytes, host rows
** hp bytes apart, device rows dp apart (both at least len). */
typedef struct s_xfer {
  char *host;
  size_t hp;
  char *dev;
  size_t dp, len, rows;
} s_xfer;

/* Pieces of x that fit a slot: *r0, *nr rows from byte *off, *l bytes each. */
static size_t s_pieces(s_xfer *x) {
  if (x->rows > 1 && x->hp == x->len && x->dp == x->len) { /* contiguous */
    x->len *= x->rows;
    x->hp = x->dp = x->len;
    x->rows = 1;
  }
  if (x->len <= S_SLOT) {
    size_t per = S_SLOT / x->len;
    return (x->rows + per - 1) / per;
  }
  return x->rows * ((x->len + S_SLOT - 1) / S_SLOT);
}

static void s_piece(const s_xfer *x, size_t i, size_t *r0, size_t *nr, size_t *off, size_t *l) {
  if (x->len <= S_SLOT) {
    size_t per = S_SLOT / x->len;
    *r0 = i * per;
    *nr = x->rows - *r0 < per ? x->rows - *r0 : per;
    *off = 0;
    *l = x->len;
  } else {
    size_t segs = (x->len + S_SLOT - 1) / S_SLOT;
    *r0 = i / segs;
    *nr = 1;
    *off = i % segs * S_SLOT;
    *l = x->len - *off < S_SLOT ? x->len - *off : S_SLOT;
  }
}

/* Queue one piece's DMA between slot s and the device on stream st. */
static int s_dma(s_ctx *c, int s, cudaStream_t st, const s_xfer *x, size_t r0, size_t nr,
                 size_t off, size_t l, int up) {
  char *dev = x->dev + r0 * x->dp + off;
  cudaError_t e = cudaEventRecord(c->t0[s], st);
  if (e == cudaSuccess) {
    if (nr == 1)
      e = up ? cudaMemcpyAsync(dev, c->slot[s], l, cudaMemcpyHostToDevice, st)
             : cudaMemcpyAsync(c->slot[s], dev, l, cudaMemcpyDeviceToHost, st);
    else
      e = up ? cudaMemcpy2DAsync(dev, x->dp, c->slot[s], l, l, nr, cudaMemcpyHostToDevice, st)
             : cudaMemcpy2DAsync(c->slot[s], l, dev, x->dp, l, nr, cudaMemcpyDeviceToHost, st);
  }
  if (e == cudaSuccess) e = cudaEventRecord(c->t1[s], st);
  if (e != cudaSuccess) return S_EDEV;
  c->pending[s] = 1;
  if (up) s_h2d += nr * l;
  else s_d2h += nr * l;
  return TR_OK;
}

/* Host to device, queued on st: the host fills one slot while the other
** is on its way. */
static int s_up(s_ctx *c, cudaStream_t st, s_xfer x) {
  size_t n = s_pieces(&x);
  for (size_t i = 0; i < n; i++) {
    size_t r0, nr, off, l;
    int s = (int)(i % S_NSLOT), rc;
    if ((rc = s_slot_wait(c, s))) return rc;
    s_piece(&x, i, &r0, &nr, &off, &l);
    s_host_copy(c->slot[s], l, x.host + r0 * x.hp + off, x.hp, l, nr);
    if ((rc = s_dma(c, s, st, &x, r0, nr, off, l, 1))) return rc;
  }
  return TR_OK;
}

/* Device to host after what is queued on st; returns once the host has
** every byte.  Piece i+1 is on its way while the host drains piece i. */
static int s_down(s_ctx *c, cudaStream_t st, s_xfer x) {
  size_t n = s_pieces(&x);
  for (size_t i = 0; i <= n; i++) {
    size_t r0, nr, off, l;
    int rc;
    if (i < n) {
      int s = (int)(i % S_NSLOT);
      if ((rc = s_slot_wait(c, s))) return rc;
      s_piece(&x, i, &r0, &nr, &off, &l);
      if ((rc = s_dma(c, s, st, &x, r0, nr, off, l, 0))) return rc;
    }
    if (i > 0) {
      int s = (int)((i - 1) % S_NSLOT);
      if ((rc = s_slot_wait(c, s))) return rc;
      s_piece(&x, i - 1, &r0, &nr, &off, &l);
      s_host_copy(x.host + r0 * x.hp + off, x.hp, c->slot[s], l, l, nr);
    }
  }
  return TR_OK;
}

/* ---- Operands on the device ---------------------------------------------------- */

/* Host bytes [p, p+bytes) on the device, for one call. */
typedef struct s_buf {
  char *dev;    /* device address of p */
  s_keep *keep; /* the kept buffer it lies in, or NULL */
  s_mem *mem;   /* else the scratch holding it */
} s_buf;

/*
** The device copy of the kept buffer holding [p, p+bytes), if p lies in
** one and its copy fits: made on first use, copied up unless the call
** writes every byte of the kept buffer without reading (write_all).  Sets
** b->dev and b->keep (referenced) and returns 1; 0 if not kept or no room.
*/
static int s_kept(s_ctx *c, const char *p, size_t bytes, int write_all, s_buf *b) {
  s_keep *k = NULL;
  pthread_mutex_lock(&s_mu);
  for (int i = 0; i < s_nkeeps && !k; i++)
    if (s_keeps[i]->host <= p && p + bytes <= s_keeps[i]->host + s_keeps[i]->bytes) k = s_keeps[i];
  if (!k) {
    pthread_mutex_unlock(&s_mu);
    return 0;
  }
  k->refs++;
  while (k->loading) pthread_cond_wait(&s_loaded, &s_mu);
  /* Kept again with a larger size while a call used it: the block is too
  ** small.  Replace it if no other call holds it, else go without. */
  if (k->mem && k->mem->cap < k->bytes) {
    if (k->refs > 1) {
      k->refs--;
      pthread_mutex_unlock(&s_mu);
      return 0;
    }
    s_mem_free(k->mem);
  }
  size_t kbytes = k->bytes; /* keep() may change it once s_mu is let go */
  if (!k->mem) {
    s_mem *m = s_alloc(k->bytes);
    if (!m) {
      if (--k->refs == 0 && k->dead) s_keep_free(k);
      pthread_mutex_unlock(&s_mu);
      return 0;
    }
    m->busy = 0;
    m->owner = k;
    k->mem = m;
    k->valid = 0;
  }
  k->mem->tick = ++s_tick;
  b->keep = k;
  b->dev = k->mem->dev + (p - k->host);
  if (k->valid || (write_all && p == k->host && bytes == k->bytes)) {
    pthread_mutex_unlock(&s_mu);
    return 1;
  }
  k->loading = 1;
  pthread_mutex_unlock(&s_mu);
  /* Copied up once for every call that will use it: the others wait. */
  int rc = s_up(c, c->st[0], (s_xfer){(char *)k->host, kbytes, k->mem->dev, kbytes, kbytes, 1});
  if (!rc && cudaStreamSynchronize(c->st[0]) != cudaSuccess) rc = S_EDEV;
  pthread_mutex_lock(&s_mu);
  k->loading = 0;
  k->valid = rc == TR_OK;
  pthread_cond_broadcast(&s_loaded);
  pthread_mutex_unlock(&s_mu);
  if (rc) {
    s_unref(k);
    b->keep = NULL;
    return 0;
  }
  return 1;
}

/* Scratch of bytes for b; S_NOFIT if the budget has no room. */
static int s_scratch(size_t bytes, s_buf *b) {
  pthread_mutex_lock(&s_mu);
  b->mem = s_alloc(bytes ? bytes : 1);
  pthread_mutex_unlock(&s_mu);
  if (!b->mem) return S_NOFIT;
  b->dev = b->mem->dev;
  return TR_OK;
}

/* Done with b.  wrote: the call wrote host [p, p+bytes) from it, so the
** kept copy is now whole (kept) or other kept copies of it are stale. */
static void s_buf_done(s_buf *b, int wrote, int ok, const void *p, size_t bytes) {
  if (b->keep) {
    pthread_mutex_lock(&s_mu);
    if (wrote) b->keep->valid = ok;
    pthread_mutex_unlock(&s_mu);
    s_unref(b->keep);
  } else if (wrote) {
    s_invalidate(p, bytes);
  }
  s_put(b->mem);
  memset(b, 0, sizeof *b);
}

/* ---- gemm ------------------------------------------------------------------------- */

/* One gemm operand: a batch of rows x cols row-major matrices on the host,
** and where it is on the device. */
typedef struct s_mat {
  char *host;             /* first element */
  int64_t ld, stride;     /* host layout, elements */
  int64_t rows, cols;     /* each matrix */
  char *dev;              /* device copy of the first element */
  int64_t dld, dstride;   /* its layout */
  s_buf buf;              /* what holds it */
} s_mat;

static size_t s_mat_span(const s_mat *x, int64_t batch, size_t esz) {
  return (size_t)((batch - 1) * x->stride + (x->rows - 1) * x->ld + x->cols) * esz;
}

/* Rows [r0, r1) of every matrix as a transfer (the batch as more rows
** when matrices follow each other at the same pitch), for batch b. */
static s_xfer s_mat_rows(const s_mat *x, int64_t b, int64_t r0, int64_t r1, size_t esz) {
  return (s_xfer){x->host + (size_t)(b * x->stride + r0 * x->ld) * esz, (size_t)x->ld * esz,
                  x->dev + (size_t)(b * x->dstride + r0 * x->dld) * esz, (size_t)x->dld * esz,
                  (size_t)x->cols * esz, (size_t)(r1 - r0)};
}

/* Copy the matrices between host and device, in as few transfers as the
** layouts allow. */
static int s_mat_move(s_ctx *c, const s_mat *x, int64_t batch, size_t esz, int up) {
  int uniform = x->stride == x->rows * x->ld && x->dstride == x->rows * x->dld;
  int rc = TR_OK;
  for (int64_t b = 0; !rc && b < (uniform ? 1 : batch); b++) {
    s_xfer t = s_mat_rows(x, b, 0, uniform ? batch * x->rows : x->rows, esz);
    rc = up ? s_up(c, c->st[0], t) : s_down(c, c->st[1], t);
  }
  return rc;
}

/* Put operand x on the device: its kept copy, else packed scratch, copied
** up when read (or when written only in part: gaps must survive). */
static int s_mat_get(s_ctx *c, s_mat *x, int64_t batch, size_t esz, int read, int write) {
  size_t span = s_mat_span(x, batch, esz);
  int dense = x->ld == x->cols && (batch == 1 || x->stride == x->rows * x->cols);
  memset(&x->buf, 0, sizeof x->buf);
  if (s_kept(c, x->host, span, write && !read && dense, &x->buf)) {
    x->dev = x->buf.dev;
    x->dld = x->ld;
    x->dstride = x->stride;
    return TR_OK;
  }
  int64_t nb = x->stride == 0 ? 1 : batch; /* one matrix serves every batch */
  int rc = s_scratch((size_t)(nb * x->rows * x->cols) * esz, &x->buf);
  if (rc) return rc;
  x->dev = x->buf.dev;
  x->dld = x->cols;
  x->dstride = x->stride == 0 ? 0 : x->rows * x->cols;
  return read ? s_mat_move(c, x, nb, esz, 1) : TR_OK;
}

static cublasOperation_t s_op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* Rows [r0, r1) of C (all batches) by cuBLAS on st[0].  Row-major C =
** op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same buffers with
** the operands swapped. */
static int s_blas(s_ctx *c, tr_dtype dt, int ta, int tb, int64_t r0, int64_t r1, int64_t n,
                  int64_t k, double alpha, const s_mat *A, const s_mat *B, double beta,
                  const s_mat *C, int64_t batch, size_t esz) {
  const char *a = A->dev + (size_t)(ta ? r0 : r0 * A->dld) * esz;
  char *cc = C->dev + (size_t)(r0 * C->dld) * esz;
  cublasStatus_t st;
  if (dt == TR_F32) {
    float al = (float)alpha, be = (float)beta;
    st = s_cublas.sgemm(c->blas, s_op(tb), s_op(ta), (int)n, (int)(r1 - r0), (int)k, &al,
                        (const float *)B->dev, (int)B->dld, B->dstride, (const float *)a,
                        (int)A->dld, A->dstride, &be, (float *)cc, (int)C->dld, C->dstride,
                        (int)batch);
  } else {
    st = s_cublas.dgemm(c->blas, s_op(tb), s_op(ta), (int)n, (int)(r1 - r0), (int)k, &alpha,
                        (const double *)B->dev, (int)B->dld, B->dstride, (const double *)a,
                        (int)A->dld, A->dstride, &beta, (double *)cc, (int)C->dld, C->dstride,
                        (int)batch);
  }
  return st == CUBLAS_STATUS_SUCCESS ? TR_OK : S_EDEV;
}

/* The gemm on the device; S_HOST, S_NOFIT or S_EDEV where it cannot run. */
static int s_gemm_dev(tr_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb,
                      int64_t sb, double beta, void *cp, int64_t ldc, int64_t sc, int64_t batch) {
  size_t esz = tr_dtype_size(dt);
  if (k == 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX || batch > INT_MAX || lda > INT_MAX ||
      ldb > INT_MAX || ldc > INT_MAX || sa < 0 || sb < 0 || sc < 0 || (sc == 0 && batch > 1) ||
      (double)m * (double)n * (double)k * (double)batch < (double)s_min_work || !s_ready())
    return S_HOST;
  s_ctx *c = s_ctx_get();
  if (!c) return S_EDEV;
  s_mat A = {(char *)a, lda, sa, ta ? k : m, ta ? m : k, NULL, 0, 0, {0}};
  s_mat B = {(char *)b, ldb, sb, tb ? n : k, tb ? k : n, NULL, 0, 0, {0}};
  s_mat C = {(char *)cp, ldc, sc, m, n, NULL, 0, 0, {0}};
  int rc = s_mat_get(c, &A, batch, esz, 1, 0);
  if (!rc) rc = s_mat_get(c, &B, batch, esz, 1, 0);
  if (!rc) rc = s_mat_get(c, &C, batch, esz, beta != 0, 1);
  /* Large single products in row panels: panel p goes back to the host
  ** on st[1] while panel p+1 is computed on st[0]. */
  int64_t np = batch == 1 && m >= 2 * S_PANEL_MIN && (double)m * n * k >= 1e9 ? m / S_PANEL_MIN : 1;
  if (np > S_NPANEL) np = S_NPANEL;
  for (int64_t p = 0; !rc && p < np; p++) {
    rc = s_blas(c, dt, ta, tb, m * p / np, m * (p + 1) / np, n, k, alpha, &A, &B, beta, &C, batch,
                esz);
    if (!rc && cudaEventRecord(c->panel[p], c->st[0]) != cudaSuccess) rc = S_EDEV;
  }
  /* A failure once C is partly back on the host is final: the host
  ** kernels cannot redo a product that reads C. */
  for (int64_t p = 0; !rc && p < np; p++) {
    if (cudaStreamWaitEvent(c->st[1], c->panel[p], 0) != cudaSuccess) rc = S_EDEV;
    else if (np > 1) rc = s_down(c, c->st[1], s_mat_rows(&C, 0, m * p / np, m * (p + 1) / np, esz));
    else rc = s_mat_move(c, &C, batch, esz, 0);
    if (rc) rc = TR_EIO;
  }
  rc = s_ctx_put(c, rc);
  s_buf_done(&A.buf, 0, 0, NULL, 0);
  s_buf_done(&B.buf, 0, 0, NULL, 0);
  s_buf_done(&C.buf, 1, rc == TR_OK, cp, s_mat_span(&C, batch, esz));
  return rc;
}

static int s_gemm(tr_dtype dt, int transa, int transb, int64_t m, int64_t n, int64_t k,
                  double alpha, const void *a, int64_t lda, int64_t stride_a, const void *b,
                  int64_t ldb, int64_t stride_b, double beta, void *c, int64_t ldc,
                  int64_t stride_c, int64_t batch) {
  size_t esz = tr_dtype_size(dt);
  if (dt != TR_F32 && dt != TR_F64) return TR_ETYPE;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < (transa ? m : k) || ldb < (transb ? k : n) ||
      ldc < n || lda < 1 || ldb < 1 || ldc < 1)
    return TR_EINVAL;
  if (m == 0 || n == 0 || batch == 0) return TR_OK;
  int rc = s_gemm_dev(dt, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta,
                      c, ldc, stride_c, batch);
  if (rc <= 0) {
    s_gpu_calls += rc == TR_OK;
    return rc;
  }
  if (rc == S_NOFIT && batch > 1) { /* halves of the batch */
    int64_t h = batch / 2;
    rc = s_gemm(dt, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                ldc, stride_c, h);
    return rc ? rc
              : s_gemm(dt, transa, transb, m, n, k, alpha, (const char *)a + h * stride_a * esz,
                       lda, stride_a, (const char *)b + h * stride_b * esz, ldb, stride_b, beta,
                       (char *)c + h * stride_c * esz, ldc, stride_c, batch - h);
  }
  if (rc == S_NOFIT && m >= 2 * S_MIN_SPLIT) { /* halves of the rows of C */
    int64_t h = m / 2;
    rc = s_gemm(dt, transa, transb, h, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                ldc, stride_c, 1);
    return rc ? rc
              : s_gemm(dt, transa, transb, m - h, n, k, alpha,
                       (const char *)a + (transa ? h : h * lda) * esz, lda, stride_a, b, ldb,
                       stride_b, beta, (char *)c + h * ldc * esz, ldc, stride_c, 1);
  }
  if (rc == S_NOFIT && n >= 2 * S_MIN_SPLIT) { /* halves of the columns */
    int64_t h = n / 2;
    rc = s_gemm(dt, transa, transb, m, h, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                ldc, stride_c, 1);
    return rc ? rc
              : s_gemm(dt, transa, transb, m, n - h, k, alpha, a, lda, stride_a,
                       (const char *)b + (transb ? h * ldb : h) * esz, ldb, stride_b, beta,
                       (char *)c + h * esz, ldc, stride_c, 1);
  }
  /* On the host; the kept copies of C are stale then. */
  s_cpu_calls++;
  rc = s_cpu.gemm(dt, transa, transb, m, n, k, alpha, a, lda, stride_a, b,
                                        ldb, stride_b, beta, c, ldc, stride_c, batch);
  s_invalidate(c, (size_t)((batch - 1) * stride_c + (m - 1) * ldc + n) * esz);
  return rc;
}

/* ---- contract, and combine, map and copy through it ------------------------------- */

/* Lowest and highest element offset [*lo, *hi] of an operand with strides
** st over labels [0, nl). */
static void s_span(const int64_t *ext, const int64_t *st, int nl, int64_t *lo, int64_t *hi) {
  *lo = *hi = 0;
  for (int l = 0; l < nl; l++) {
    int64_t d = (ext[l] - 1) * st[l];
    if (d < 0) *lo += d;
    else *hi += d;
  }
}

/* Does out's box [lo, hi] hold exactly one output element per slot? */
static int s_dense(const tk_contract *op, int64_t lo, int64_t hi) {
  int64_t want = 1, n = 1;
  int done[TK_MAX_LABELS] = {0};
  for (int l = 0; l < op->nout; l++) n *= op->extent[l];
  if (lo != 0 || hi + 1 != n) return 0;
  for (;;) { /* the labels by increasing stride, each the product before it */
    int best = -1;
    for (int l = 0; l < op->nout; l++)
      if (!done[l] && op->extent[l] > 1 && (best < 0 || op->out_stride[l] < op->out_stride[best]))
        best = l;
    if (best < 0) return 1;
    if (op->out_stride[best] != want) return 0;
    want *= op->extent[best];
    done[best] = 1;
  }
}

/* The contraction on the device; S_HOST, S_NOFIT or S_EDEV where it
** cannot run. */
static int s_contract_dev(const tk_contract *op, int64_t nouter, int64_t ninner) {
  size_t esz = tr_dtype_size(op->dtype);
  int64_t lo, hi, min = s_min_work;
  if ((min > 0 && (ninner < S_MIN_INNER ||
                   (double)nouter * (double)ninner * op->prog.n < (double)min)) ||
      !s_ready())
    return S_HOST;
  s_ctx *c = s_ctx_get();
  if (!c) return S_EDEV;
  tk_contract d = *op;
  s_buf in[TK_MAX_INPUTS], out, part;
  int used[TK_MAX_INPUTS] = {0}, rc = TR_OK;
  memset(in, 0, sizeof in);
  memset(&out, 0, sizeof out);
  memset(&part, 0, sizeof part);
  for (int i = 0; i < op->prog.n; i++)
    if (op->prog.code[i].op == TK_OP_INPUT) used[op->prog.code[i].arg] = 1;
  for (int k = 0; !rc && k < op->ninputs; k++) {
    if (!used[k] || ninner == 0) continue; /* never read */
    s_span(op->extent, op->in_stride[k], op->nlabels, &lo, &hi);
    const char *p = (const char *)op->in[k] + lo * (int64_t)esz;
    size_t bytes = (size_t)(hi - lo + 1) * esz;
    if (!s_kept(c, p, bytes, 0, &in[k]) && !(rc = s_scratch(bytes, &in[k])))
      rc = s_up(c, c->st[0], (s_xfer){(char *)p, bytes, in[k].dev, bytes, bytes, 1});
    if (!rc) d.in[k] = in[k].dev - lo * (int64_t)esz;
  }
  s_span(op->extent, op->out_stride, op->nout, &lo, &hi);
  char *op_out = (char *)op->out + lo * (int64_t)esz;
  size_t obytes = (size_t)(hi - lo + 1) * esz;
  int read = op->accumulate || !s_dense(op, lo, hi);
  if (!rc && !s_kept(c, op_out, obytes, !read, &out) && !(rc = s_scratch(obytes, &out)) && read)
    rc = s_up(c, c->st[0], (s_xfer){op_out, obytes, out.dev, obytes, obytes, 1});
  if (!rc) d.out = out.dev - lo * (int64_t)esz;
  int64_t nparts = tk_cu_parts(nouter, ninner);
  if (!rc && nparts > 1 && s_scratch((size_t)(nouter * nparts) * esz, &part)) nparts = 1;
  if (!rc && tk_cu_contract(&d, nouter, ninner, nparts, part.dev, c->st[0]) != cudaSuccess)
    rc = S_EDEV;
  if (!rc && s_down(c, c->st[0], (s_xfer){op_out, obytes, out.dev, obytes, obytes, 1}))
    rc = TR_EIO; /* out is partly written: final, as in s_gemm_dev */
  rc = s_ctx_put(c, rc);
  for (int k = 0; k < op->ninputs; k++) s_buf_done(&in[k], 0, 0, NULL, 0);
  s_buf_done(&part, 0, 0, NULL, 0);
  s_buf_done(&out, out.dev != NULL, rc == TR_OK, op_out, obytes);
  return rc;
}

static int s_contract(const tk_contract *op) {
  int rc = tk_contract_check(op);
  int64_t nouter = 1, ninner = 1;
  if (rc) return rc;
  for (int l = 0; l < op->nlabels; l++) {
    if (l < op->nout) nouter *= op->extent[l];
    else ninner *= op->extent[l];
  }
  if (nouter == 0) return TR_OK; /* no output element */
  rc = s_contract_dev(op, nouter, ninner);
  if (rc <= 0) {
    s_gpu_calls += rc == TR_OK;
    return rc;
  }
  s_cpu_calls++;
  rc = s_cpu.contract(op);
  int64_t lo, hi;
  s_span(op->extent, op->out_stride, op->nout, &lo, &hi);
  s_invalidate((const char *)op->out + lo * (int64_t)tr_dtype_size(op->dtype),
               (size_t)(hi - lo + 1) * tr_dtype_size(op->dtype));
  return rc;
}

TK_CONTRACT_ADAPTERS(s_contract)

void tk_cuda_init(tk_backend *t) {
  s_cpu = *t;
  t->name = "cuda";
  t->gemm = s_gemm;
  /* 2^36: 3 ms of an H100 in f32, a few tens of ms on small GPUs; a
  ** 4096^3 chunk product (bench-gpu's) stays one call. */
  t->gemm_panel = (int64_t)1 << 36;
  t->syrk = NULL; /* the CPU's would write C behind the device's copy: gemm */
  t->contract = s_contract;
  t->combine = s_combine;
  t->map = s_map;
  t->copy = s_copy;
  t->keep = s_keep_host;
  t->release = s_release_host;
}
