/*
** util/blob.c - shared chunk bytes (tr_blob), and the shared memory that
** lets tradb processes on one machine hold the same chunk's pages.
**
** A process that turned sharing on (tr_blob_share) makes each blob of
** TR_BLOB_ROOM_MIN bytes or more in a memfd of its own, mapped shared:
** the room on its first page, the data right after.  Another process of
** the same user maps that memfd through /proc/PID/fd/FD (tr_blob_map), so
** a chunk moved between local workers, or replicated to one, is never
** copied: both hold the same pages, the mapper's read-only but for its
** first page, which it maps private (its room is its own to write).
**
** Who holds the pages: every process that maps a memfd holds a shared
** flock on its own open file.  A mapper only lets go of its mapping.  The
** maker, at its last reference, asks for an exclusive lock: granted, no
** other process maps the memfd any longer and its pages go to its pool,
** written again by the next blob made here; refused, it keeps the memfd
** pending and asks again when it next finds no memory in its pool, and
** now and then while idle.  So the pages come back to the process that
** makes blobs of their size.  (Pooled by whichever process let go last,
** a worker whose outputs a peer replicated made them all in fresh pages,
** while the peer pooled memory it did not need.)  Nobody maps a memfd
** after its maker's last reference (see below), so a memfd is reused by
** at most one process and only once nobody else maps it.  The pool keeps
** the pages faulted in: a statement's outputs reuse its last pass's memory
** as malloc's heap would, where fresh shared memory costs a fault and a
** zeroed page each.  A peer maps a memfd only while the
** process that sent it keeps the blob (a PULL holds its reference until
** answered), so the descriptor it names still holds that blob.
*/
#include "config.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

struct tr_blob {
  int refs;                          /* references (atomic built-ins) */
  void *data;                        /* the bytes */
  size_t bytes;                      /* their number */
  void (*fn)(void *data, void *hint); /* adopted: how to hand them back */
  void *hint;                        /* fn's second argument */
  void *base;                        /* what tr_blob_new allocated */
  void *room;                        /* its room (tr_blob_room), or NULL */
  int fd;                            /* shared: its memfd, else -1 */
  size_t span;                       /* shared: the bytes mapped at base */
  int mapped;                        /* shared: mapped from another process
                                        (first page private, the rest
                                        read-only) */
};

#define S_MEMFD_NAME "tradb-chunk"

/* A memfd kept for the next blob: its pages faulted in, mapped shared and
** writable at base. */
typedef struct s_pooled {
  int fd;
  void *base;
  size_t span;
} s_pooled;

#define S_POOL_MAX 256 /* memfds kept at most, pooled and pending each */

/* Memfds kept (the pool, or those pending), oldest first. */
typedef struct s_list {
  s_pooled e[S_POOL_MAX];
  int n;
  size_t bytes; /* their spans' sum */
} s_list;
#define S_RECENT 64    /* blob sizes remembered for warming the pool */
#define S_SWEEP_CALLS 20 /* idle calls of tr_blob_pool_wanted between
                            sweeps (worker/base.c: 50 ms apart, so 1 s) */

static struct {
  atomic_int on;           /* tr_blob_share turned it on */
  atomic_int live;         /* memfds this process holds, pooled ones included */
  int most;                /* at most this many (descriptors, mappings) */
  pthread_mutex_t mu;      /* guards the pool */
  s_list pool;              /* faulted in, ours alone, our shared lock on each */
  s_list pending;           /* made here, let go, mapped elsewhere when last
                               asked; no lock held */
  size_t pool_max;          /* bytes each list holds at most */
  size_t recent[S_RECENT];  /* the sizes of the last blobs made here */
  unsigned recent_burst[S_RECENT]; /* the burst each was made in */
  int nrecent;              /* made so far, up to S_RECENT */
  int recent_at;            /* where the next one goes */
  unsigned burst;           /* bursts of work seen by tr_blob_pool_wanted */
  int made_in_burst;        /* a blob was made since it last looked */
  unsigned idle_calls;      /* its calls with pending memory */
  atomic_size_t fresh, reused; /* bytes of blobs made in new memfds, and
                                  in pooled ones */
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

static size_t s_page_up(size_t n) { return (n + TR_PAGE - 1) & ~(TR_PAGE - 1); }

int tr_blob_share(size_t pool_max) {
  struct rlimit rl;
  int most = 1024;
  /* Each shared blob holds a descriptor: take the hard limit, and leave
  ** half of it (and the mappings' default limit, 65530, two each for a
  ** mapped blob) to everything else. */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
      getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY) most = (int)(rl.rlim_cur / 2 < 16384 ? rl.rlim_cur / 2 : 16384);
    else most = 16384;
  }
  int fd = memfd_create(S_MEMFD_NAME, MFD_CLOEXEC);
  if (fd < 0) return TR_EIO;
  close(fd);
  pthread_mutex_lock(&S.mu);
  S.most = most;
  S.pool_max = pool_max;
  pthread_mutex_unlock(&S.mu);
  atomic_store(&S.on, 1);
  return TR_OK;
}

int tr_blob_sharing(void) { return atomic_load(&S.on); }

/* Unmap and close memfds no longer pooled or held. */
static void s_close_all(const s_pooled *p, int n) {
  for (int i = 0; i < n; i++) {
    munmap(p[i].base, p[i].span);
    close(p[i].fd);
    atomic_fetch_sub(&S.live, 1);
  }
}

/* Take entry i out of l, the others keeping their order; under S.mu. */
static s_pooled s_list_take(s_list *l, int i) {
  s_pooled p = l->e[i];
  l->bytes -= p.span;
  memmove(&l->e[i], &l->e[i + 1], (size_t)(--l->n - i) * sizeof *l->e);
  return p;
}

/* Whether l has room for span bytes more: S_POOL_MAX entries and
** S.pool_max bytes at most.  Under S.mu. */
static int s_list_room(const s_list *l, size_t span) {
  return l->n < S_POOL_MAX && l->bytes + span <= S.pool_max;
}

/* Append p to l (the newest), first taking the oldest entries out into out
** until it has room (the sizes a session made last are the ones its next
** statement makes); how many went out.  Under S.mu. */
static int s_list_push(s_list *l, s_pooled p, s_pooled *out) {
  int nout = 0;
  while (l->n > 0 && !s_list_room(l, p.span)) out[nout++] = s_list_take(l, 0);
  l->e[l->n++] = p;
  l->bytes += p.span;
  return nout;
}

/* Count one more memfd held, if this process may hold another (S.most:
** its descriptors and mappings); 0 if not. */
static int s_hold_one(void) {
  if (atomic_fetch_add(&S.live, 1) < S.most) return 1;
  atomic_fetch_sub(&S.live, 1);
  return 0;
}

/* A new memfd of span bytes, mapped shared and writable, our shared lock
** on it; 0 if none can be had. */
static int s_memfd_new(size_t span, int *fd, void **base) {
  if (!s_hold_one()) return 0;
  int f = memfd_create(S_MEMFD_NAME, MFD_CLOEXEC);
  void *p = MAP_FAILED;
  if (f >= 0 && ftruncate(f, (off_t)span) == 0 && flock(f, LOCK_SH | LOCK_NB) == 0)
    p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  if (p == MAP_FAILED) {
    if (f >= 0) close(f);
    atomic_fetch_sub(&S.live, 1);
    return 0;
  }
  *fd = f;
  *base = p;
  return 1;
}

/* Pooled memory of span bytes serves a blob needing need: it wastes at
** most a quarter. */
static int s_fits(size_t span, size_t need) { return span >= need && span - need <= need / 4; }

static void s_pending_sweep(void);

static int s_pool_best(size_t need) {
  int best = -1;
  for (int i = 0; i < S.pool.n; i++)
    if (s_fits(S.pool.e[i].span, need) && (best < 0 || S.pool.e[i].span < S.pool.e[best].span)) best = i;
  return best;
}

/* A memfd of at least need bytes, mapped shared and writable, from the
** pool (the smallest that fits, if it wastes at most a quarter) or new;
** 0 if none can be had (the caller takes the heap). */
static int s_shared_get(size_t need, int *fd, void **base, size_t *span) {
  pthread_mutex_lock(&S.mu);
  S.recent[S.recent_at] = need;
  S.recent_burst[S.recent_at] = S.burst;
  S.recent_at = (S.recent_at + 1) % S_RECENT;
  if (S.nrecent < S_RECENT) S.nrecent++;
  S.made_in_burst = 1;
  int best = s_pool_best(need);
  if (best < 0 && S.pending.n > 0) { /* memory let go since may be ours now */
    pthread_mutex_unlock(&S.mu);
    s_pending_sweep();
    pthread_mutex_lock(&S.mu);
    best = s_pool_best(need);
  }
  if (best >= 0) {
    s_pooled p = s_list_take(&S.pool, best);
    *fd = p.fd;
    *base = p.base;
    *span = p.span;
  }
  pthread_mutex_unlock(&S.mu);
  if (best >= 0) {
    atomic_fetch_add(&S.reused, *span);
    return 1;
  }
  atomic_fetch_add(&S.fresh, need);
  *span = need;
  return s_memfd_new(need, fd, base);
}

/* Pool p, ours alone now (its exclusive lock granted): writable again (a
** sealed one), our shared lock back for the next process to map it, the
** oldest entries let go to make room.  Closed if it cannot be. */
static void s_pool_keep(s_pooled p) {
  s_pooled out[S_POOL_MAX];
  int nout = 0;
  if (p.span <= S.pool_max && mprotect(p.base, p.span, PROT_READ | PROT_WRITE) == 0 &&
      flock(p.fd, LOCK_SH | LOCK_NB) == 0) {
    pthread_mutex_lock(&S.mu);
    nout = s_list_push(&S.pool, p, out);
    pthread_mutex_unlock(&S.mu);
  } else {
    out[nout++] = p;
  }
  s_close_all(out, nout);
}

/* Pool the pending memfds no other process maps any longer. */
static void s_pending_sweep(void) {
  s_pooled mine[S_POOL_MAX];
  int n = 0;
  pthread_mutex_lock(&S.mu);
  for (int i = 0; i < S.pending.n;)
    if (flock(S.pending.e[i].fd, LOCK_EX | LOCK_NB) == 0) mine[n++] = s_list_take(&S.pending, i);
    else i++;
  pthread_mutex_unlock(&S.mu);
  for (int i = 0; i < n; i++) s_pool_keep(mine[i]);
}

/* Let go of a shared blob's memfd.  A mapper closes it.  Its maker pools it
** if no other process maps it, else keeps it pending until none does:
** the oldest pending one is closed to make room, its pages then the
** mappers' alone. */
static void s_shared_put(tr_blob *b) {
  s_pooled p = {b->fd, b->base, b->span};
  if (b->mapped || b->span > S.pool_max) {
    s_close_all(&p, 1);
  } else if (flock(b->fd, LOCK_EX | LOCK_NB) == 0) {
    s_pool_keep(p);
  } else { /* the refused request left us no lock: nothing to undo */
    s_pooled out[S_POOL_MAX];
    pthread_mutex_lock(&S.mu);
    int nout = s_list_push(&S.pending, p, out);
    pthread_mutex_unlock(&S.mu);
    s_close_all(out, nout);
  }
}

/* The most blobs of span bytes made in one burst among the recent ones
** (a burst's are consecutive); under S.mu. */
static int s_made_in_a_burst(size_t span) {
  int most = 0, run = 0;
  for (int k = 0; k < S.nrecent; k++) { /* the oldest first */
    int at = (S.recent_at - S.nrecent + k + S_RECENT) % S_RECENT;
    if (k > 0 && S.recent_burst[at] != S.recent_burst[(at + S_RECENT - 1) % S_RECENT]) run = 0;
    if (S.recent[at] == span && ++run > most) most = run;
  }
  return most;
}

size_t tr_blob_pool_wanted(void) {
  size_t want = 0;
  /* called while no tradb process works: the blobs made since the last
  ** call were a burst of work (a statement, a block, a piped script) */
  pthread_mutex_lock(&S.mu);
  int ended = S.made_in_burst;
  S.burst += (unsigned)ended;
  S.made_in_burst = 0;
  /* what that burst let go; and now and then while idle, what peers let
  ** go since (a chunk moved to a peer for good, dropped there later),
  ** so that pending memory is held no longer than pooled memory would be */
  int sweep = ended || (S.pending.n > 0 && ++S.idle_calls % S_SWEEP_CALLS == 0);
  pthread_mutex_unlock(&S.mu);
  if (sweep) s_pending_sweep();
  pthread_mutex_lock(&S.mu);
  /* The newest size first: a size made k times in one burst lately wants
  ** k entries.  Not k for every time it was made: a session repeating a
  ** statement needs one pass's worth, its last pass's outputs coming back
  ** to the pool as the next pass replaces them.  (Counted over all of the
  ** last 64 blobs, the pools of 4 local workers running nn's block 6
  ** times, 2 s apart, warmed 480 MiB, more than all its outputs, and held
  ** it unused; 96 MiB now.) */
  for (int r = 1; r <= S.nrecent && !want; r++) {
    size_t span = S.recent[(S.recent_at - r + S_RECENT) % S_RECENT];
    int have = 0;
    for (int i = 0; i < S.pool.n; i++) have += s_fits(S.pool.e[i].span, span);
    if (have < s_made_in_a_burst(span) && s_list_room(&S.pool, span)) want = span;
  }
  pthread_mutex_unlock(&S.mu);
  return want;
}

int tr_blob_pool_warm(size_t span, int (*go_on)(void *arg), void *arg) {
  int fd;
  void *base;
  span = s_page_up(span);
  if (!atomic_load(&S.on) || !s_memfd_new(span, &fd, &base)) return 0;
  s_pooled p = {fd, base, span};
  for (size_t off = 0; off < span; off += TR_PAGE) {
    if (!(off & (((size_t)1 << 20) - 1)) && !go_on(arg)) {
      s_close_all(&p, 1);
      return 0;
    }
    ((volatile char *)base)[off] = 0;
  }
  s_pooled out[S_POOL_MAX];
  pthread_mutex_lock(&S.mu);
  int room = s_list_room(&S.pool, span);
  if (room) s_list_push(&S.pool, p, out); /* with room: nothing goes out */
  pthread_mutex_unlock(&S.mu);
  if (!room) s_close_all(&p, 1);
  return room;
}

void tr_blob_pool_trim(size_t keep) {
  s_pending_sweep(); /* memory nobody else maps now is the pool's to let go */
  for (;;) { /* the oldest first */
    pthread_mutex_lock(&S.mu);
    int any = S.pool.n > 0 && S.pool.bytes > keep;
    s_pooled p = any ? s_list_take(&S.pool, 0) : (s_pooled){-1, NULL, 0};
    pthread_mutex_unlock(&S.mu);
    if (!any) return;
    s_close_all(&p, 1);
  }
}

void tr_blob_pool_stats(size_t *fresh, size_t *reused) {
  *fresh = atomic_load(&S.fresh);
  *reused = atomic_load(&S.reused);
}

size_t tr_blob_pool_bytes(void) {
  pthread_mutex_lock(&S.mu);
  size_t n = S.pool.bytes;
  pthread_mutex_unlock(&S.mu);
  return n;
}

tr_blob *tr_blob_new(size_t bytes) {
  tr_blob *b = malloc(sizeof *b);
  if (!b) return NULL;
  *b = (tr_blob){.refs = 1, .bytes = bytes, .fd = -1};
  if (bytes >= TR_BLOB_ROOM_MIN && bytes <= SIZE_MAX / 2) {
    size_t need = s_page_up(TR_BLOB_ROOM + bytes);
    if (atomic_load(&S.on) && s_shared_get(need, &b->fd, &b->base, &b->span)) {
      b->room = b->base;
    } else {
      /* from malloc, not posix_memalign (see TR_ALIGN_BIG): two pages
      ** more, the room placed on the first page boundary in them */
      char *raw = malloc(bytes + TR_BLOB_ROOM + 2 * TR_PAGE);
      if (raw) {
        b->base = raw;
        b->room = (char *)(((uintptr_t)raw + TR_PAGE - 1) & ~(uintptr_t)(TR_PAGE - 1));
      }
    }
    if (b->room) {
      b->data = (char *)b->room + TR_BLOB_ROOM;
      memset((char *)b->data + bytes, 0, need - TR_BLOB_ROOM - bytes);
    }
  } else {
    b->base = b->data = tr_alloc_aligned(bytes);
  }
  if (!b->data) {
    free(b);
    return NULL;
  }
  return b;
}

void tr_blob_seal(tr_blob *b) {
  /* past the first page: that one holds the room, written as files are */
  if (b->fd >= 0 && !b->mapped && b->span > TR_PAGE)
    mprotect((char *)b->base + TR_PAGE, b->span - TR_PAGE, PROT_READ);
}

int tr_blob_shared_fd(const tr_blob *b, uint64_t *ino) {
  struct stat st;
  if (b->fd < 0 || fstat(b->fd, &st) != 0) return -1;
  if (ino) *ino = (uint64_t)st.st_ino;
  return b->fd;
}

tr_blob *tr_blob_map(uint32_t pid, int fd, uint64_t ino, size_t bytes, tr_err *err) {
  char path[64], target[64];
  struct stat st;
  size_t need = s_page_up(TR_BLOB_ROOM + bytes);
  if (!atomic_load(&S.on) || bytes < TR_BLOB_ROOM_MIN) {
    tr_seterr(err, TR_EINVAL, "this process maps no chunks of others");
    return NULL;
  }
  snprintf(path, sizeof path, "/proc/%u/fd/%d", pid, fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n < 0) {
    tr_seterr(err, TR_EIO, "cannot see descriptor %d of process %u: %s", fd, pid, strerror(errno));
    return NULL;
  }
  target[n] = '\0';
  if (strncmp(target, "/memfd:" S_MEMFD_NAME " ", sizeof "/memfd:" S_MEMFD_NAME) != 0) {
    tr_seterr(err, TR_EINVAL, "descriptor %d of process %u is no chunk memory (%s)", fd, pid, target);
    return NULL;
  }
  if (!s_hold_one()) {
    tr_seterr(err, TR_ENOMEM, "this process maps as many chunks as it may");
    return NULL;
  }
  tr_blob *b = malloc(sizeof *b);
  int f = open(path, O_RDWR | O_CLOEXEC);
  void *p = MAP_FAILED;
  const char *why = NULL;
  if (!b) why = "out of memory";
  else if (f < 0 || fstat(f, &st) != 0) why = strerror(errno);
  else if ((uint64_t)st.st_ino != ino || (size_t)st.st_size < need) why = "it holds another chunk now";
  else if (flock(f, LOCK_SH | LOCK_NB) != 0) why = "it is being reused";
  else if ((p = mmap(NULL, need, PROT_READ, MAP_SHARED, f, 0)) == MAP_FAILED ||
           mmap(p, TR_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, f, 0) == MAP_FAILED)
    why = strerror(errno);
  if (why) {
    if (p != MAP_FAILED) munmap(p, need);
    if (f >= 0) close(f);
    free(b);
    atomic_fetch_sub(&S.live, 1);
    tr_seterr(err, TR_EIO, "cannot map the chunk memory of process %u: %s", pid, why);
    return NULL;
  }
  *b = (tr_blob){.refs = 1, .bytes = bytes, .base = p, .room = p, .fd = f, .span = need, .mapped = 1};
  b->data = (char *)p + TR_BLOB_ROOM;
  return b;
}

void *tr_blob_room(const tr_blob *b, size_t *span) {
  if (span) *span = b->room ? s_page_up(TR_BLOB_ROOM + b->bytes) : 0;
  return b->room;
}

tr_blob *tr_blob_adopt(void *data, size_t bytes, void (*fn)(void *data, void *hint), void *hint) {
  tr_blob *b = malloc(sizeof *b);
  if (b) *b = (tr_blob){.refs = 1, .data = data, .bytes = bytes, .fn = fn, .hint = hint, .fd = -1};
  return b;
}

void *tr_blob_data(const tr_blob *b) { return b->data; }

size_t tr_blob_size(const tr_blob *b) { return b->bytes; }

tr_blob *tr_blob_ref(tr_blob *b) {
  __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
  return b;
}

void tr_blob_unref(tr_blob **pb) {
  tr_blob *b = pb ? *pb : NULL;
  if (!b) return;
  *pb = NULL;
  /* acquire-release: the last owner sees every write made before the
  ** other owners let go */
  int left = __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL);
  tr_assert(left >= 0);
  if (left > 0) return;
  if (b->fn) b->fn(b->data, b->hint);
  else if (b->fd >= 0) s_shared_put(b);
  else if (b->room) free(b->base);
  else tr_free_aligned(b->base);
  free(b);
}

void tr_blob_release(void *data, void *hint) {
  tr_blob *b = hint;
  (void)data;
  tr_blob_unref(&b);
}
