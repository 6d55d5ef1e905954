/*
** util/util.h - the few things every stage of tradb shares: the status
** convention, the error buffer that carries a message with a status, the
** element types, invariant checks, clocks, the cancel token and a small
** thread pool.
**
** Status convention (whole project): functions return int, 0 (TR_OK) on
** success and a negative TR_E* code on failure.  When a function takes a
** tr_err *, it fills in a one-line message on failure; only shell/ prints.
*/
#ifndef TRADB_UTIL_H
#define TRADB_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define TR_VERSION_STRING PACKAGE_VERSION

enum {
  TR_OK = 0,
  TR_ERR = -1,      /* generic failure */
  TR_ENOMEM = -2,   /* allocation failed */
  TR_EIO = -3,      /* file or OS error */
  TR_ESYNTAX = -4,  /* statement does not parse */
  TR_ENAME = -5,    /* unknown or duplicate name */
  TR_ESHAPE = -6,   /* shapes, ranks or labels do not agree */
  TR_ETYPE = -7,    /* unsupported or mismatched element type */
  TR_ECORRUPT = -8, /* stored data failed a checksum or is malformed */
  TR_EINTR = -9,    /* cancelled by the user (Ctrl-C) */
  TR_EINVAL = -10,  /* bad argument */
  TR_ENOTFOUND = -11 /* lookup found nothing (not always an error) */
};
#define TR_E_LOWEST TR_ENOTFOUND /* the lowest code: a new code goes below */

/* The message that travels with a failing status. */
typedef struct tr_err {
  int code;       /* the TR_E* code of the last failure, TR_OK if none */
  char msg[1024]; /* one line, no trailing newline, no "error:" prefix */
  int at;         /* 1 + the byte offset, in the statement's text, of the
                     token the message is about (parse/, compile/ and the
                     engine set it, so the shell can point at it); 0:
                     unknown.  tr_seterr resets it to 0. */
} tr_err;

/* Record code and a printf-style message in err (which may be NULL);
** returns code so callers can write `return tr_seterr(err, TR_EIO, ...)`. */
int tr_seterr(tr_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Put a printf-style prefix before err's message, keeping the cause:
** "prefix: old message" (the old text is copied first, so it is never
** formatted into itself), and set code.  Returns code; err may be NULL. */
int tr_prefix(tr_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Reset err to TR_OK with an empty message. */
void tr_clearerr(tr_err *err);
/* Say where in the statement the failure code of err is (at as in tr_err,
** 0: unknown); returns code, so `return tr_at(err, pos, tr_seterr(...))`
** reports and places an error in one step. */
static inline int tr_at(tr_err *err, int at, int code) {
  if (err) err->at = at;
  return code;
}

/* The candidate closest to word, for "did you mean" hints: one that
** differs only in letter case, else the nearest by edits (insert, delete,
** change or swap two neighbours; none for a word of one letter, at most 1
** up to 4 letters, 2 up to 8, 3 beyond).  Its index in cands[0, n), or -1
** when none is near or word itself is a candidate. */
int tr_closest(const char *word, const char *const *cands, int n);

/*
** Invariants, as SQLite writes them (sqliteInt.h).  tr_assert(x) states
** what must hold at a point; ALWAYS(x) and NEVER(x) wrap a condition the
** code still tests although it is believed always true (always false), so
** that a release build stays safe if the belief is wrong:
**
**   if (NEVER(e == NULL)) return TR_EINVAL;
**
** With TRADB_DEBUG defined (configure --enable-debug, and the copy of the
** library that make check's programs link) a broken invariant reports
** where it broke on stderr and aborts.  Without it tr_assert compiles to
** nothing (x is not evaluated) and ALWAYS(x), NEVER(x) are just (x).
*/
#ifdef TRADB_DEBUG
#define tr_assert(x) ((x) ? (void)0 : tr_assert_fail(#x, __FILE__, __LINE__, __func__))
#define ALWAYS(x) ((x) ? 1 : (tr_assert_fail(#x, __FILE__, __LINE__, __func__), 0))
#define NEVER(x) ((x) ? (tr_assert_fail(#x, __FILE__, __LINE__, __func__), 1) : 0)
#else
#define tr_assert(x) ((void)sizeof(!(x))) /* type-checked, not run */
#define ALWAYS(x) (x)
#define NEVER(x) (x)
#endif
/* Report a broken invariant ("tradb: FILE:LINE: FUNC: invariant 'X'
** broken") and abort.  The one place outside shell/ that prints: there is
** no caller left to hand a message to. */
void tr_assert_fail(const char *expr, const char *file, int line, const char *func)
    __attribute__((noreturn));

/* Element types of tensors. */
typedef enum tr_dtype { TR_F32 = 0, TR_F64 = 1 } tr_dtype;
#define TR_MAX_RANK 8
size_t tr_dtype_size(tr_dtype t);
const char *tr_dtype_name(tr_dtype t);           /* "f32" / "f64" */
int tr_dtype_parse(const char *s, tr_dtype *out); /* TR_OK or TR_ETYPE */

/* Memory: buffers for chunks (freed with tr_free_aligned), 64-byte aligned
** below TR_ALIGN_BIG and 16-byte aligned (malloc's) from it up.  Big
** buffers are the chunks statements make and drop by the hundred MB;
** posix_memalign splits the heap around each of them, so that the next
** statement's buffers no longer fit where the last one's were and the heap
** grows, faulting in fresh pages (measured on nn-large and mm-two-large:
** two local workers growing 50-180 MB a statement, where with malloc's
** buffers they settle).  The kernels read unaligned vectors anyway. */
#define TR_ALIGN_BIG ((size_t)1 << 20)
void *tr_alloc_aligned(size_t bytes);
void tr_free_aligned(void *p);

/*
** Shared chunk bytes: a buffer with a reference count, so that the store
** keeping a chunk in memory, the tasks reading it and the socket sending
** it to a replica hold one copy between them instead of one each.
** tr_blob_new makes its bytes with tr_alloc_aligned; tr_blob_adopt
** wraps bytes someone else owns (a received ZeroMQ frame), handed back
** through fn(data, hint) with the last reference.  The bytes must not
** change once a second reference exists.  References may be taken and
** dropped from any thread.
**
** A blob of TR_BLOB_ROOM_MIN bytes or more from tr_blob_new has room: the
** TR_BLOB_ROOM bytes right before its data start on a TR_PAGE boundary,
** and the pages from there to past its last byte are all the blob's (the
** part after the data zero).  tr_blob_room returns the room (NULL for a
** blob without), and in *span those pages' length.  The room is scratch
** for whoever writes the blob to a file with its header in front
** (catalog/'s O_DIRECT chunk files); two writers at once must write the
** same bytes there.
*/
typedef struct tr_blob tr_blob;
#define TR_PAGE ((size_t)4096)              /* O_DIRECT's alignment, safe on any disk */
#define TR_BLOB_ROOM ((size_t)64)           /* = a chunk file's header */
#define TR_BLOB_ROOM_MIN ((size_t)256 << 10) /* smaller chunks go through the page cache */
tr_blob *tr_blob_new(size_t bytes); /* refs 1; NULL if out of memory */
void *tr_blob_room(const tr_blob *b, size_t *span);
tr_blob *tr_blob_adopt(void *data, size_t bytes, void (*fn)(void *data, void *hint), void *hint);
void *tr_blob_data(const tr_blob *b);
size_t tr_blob_size(const tr_blob *b);
tr_blob *tr_blob_ref(tr_blob *b);    /* b, with one more reference */
void tr_blob_unref(tr_blob **b);     /* drops *b's reference, sets *b NULL; NULL-safe */
/* For tn_send and the like, whose free function takes (data, hint): drops
** the reference hint (a tr_blob *) that the sent bytes came with. */
void tr_blob_release(void *data, void *hint);

/*
** Blobs shared between the tradb processes of one machine (util/blob.c).
** Once tr_blob_share is called, tr_blob_new makes each blob with room in
** shared memory of its own (a memfd), which another process of the same
** user maps with tr_blob_map instead of copying it: a chunk moved to a
** local worker, or replicated to one, is then the same pages in both.  The
** process that made a blob must keep a reference to it until the mapper
** has it.  Memory nobody else maps any longer goes to its maker's pool, of
** at most pool_max bytes, for the next blobs, so they need no fresh pages.
*/
/* Turn sharing on for this process (once, at start); TR_EIO where the
** system has no memfd. */
int tr_blob_share(size_t pool_max);
int tr_blob_sharing(void); /* whether it is on */
/* The memfd holding b's bytes, and its inode in *ino (the mapper checks
** it); -1 for a blob not in shared memory. */
int tr_blob_shared_fd(const tr_blob *b, uint64_t *ino);
/* Map chunk bytes another process holds as descriptor fd (a blob of
** `bytes` bytes it made, inode ino), through /proc/PID/fd: a blob whose data
** this process may read and not write, and whose room is its own.  NULL
** with err set when it cannot (sharing off here, another user's process,
** a descriptor that is not chunk memory or holds another one now). */
tr_blob *tr_blob_map(uint32_t pid, int fd, uint64_t ino, size_t bytes, tr_err *err);
/* The bytes are final: a blob in shared memory becomes read-only past its
** first page, so that a stray write faults instead of changing what other
** processes map (the store seals what it keeps).  No-op for others. */
void tr_blob_seal(tr_blob *b);
/* Warming the pool while the machine is idle, as a heap is warmed: the
** size of the next memory to fault in for it, that of blobs this process
** made lately of which the pool holds fewer than one burst of work (the
** blobs made between two calls) made (0: none, or no room); and that
** memory made, faulted in a MiB at a time while go_on(arg) says to go on,
** and pooled.  1 if it was.  Call the first only while no tradb process
** works: its calls mark where bursts end. */
size_t tr_blob_pool_wanted(void);
int tr_blob_pool_warm(size_t span, int (*go_on)(void *arg), void *arg);
/* Close pooled memory until the pool holds at most keep bytes. */
void tr_blob_pool_trim(size_t keep);
size_t tr_blob_pool_bytes(void); /* what the pool holds now */
/* Bytes of shared blobs made so far in new memory, and in pooled memory. */
void tr_blob_pool_stats(size_t *fresh, size_t *reused);

/* File I/O that retries on EINTR and short transfers.  tr_write_all writes
** all n bytes (tr_pwrite_all at off); tr_pread_all reads up to n bytes at
** off, stopping at end of file, and sets *got.  All return 0 or an errno
** value. */
int tr_write_all(int fd, const void *buf, size_t n);
int tr_pwrite_all(int fd, const void *buf, size_t n, int64_t off);
int tr_pread_all(int fd, void *buf, size_t n, int64_t off, size_t *got);

/* A growing text: tr_text_put appends printf-style, tr_text_json appends a
** string escaped for JSON, tr_text_done hands the text over (NUL
** terminated, the caller's to free; "" if nothing was put; NULL if an
** allocation failed, after which every put is a no-op). */
typedef struct tr_text {
  char *s;    /* text */
  size_t n;   /* length */
  size_t cap; /* allocated */
  int oom;    /* an allocation failed */
} tr_text;
void tr_text_put(tr_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tr_text_json(tr_text *t, const char *s);
char *tr_text_done(tr_text *t);

/* splitmix64's finalizer, a bijective 64-bit mix: the random fills'
** streams are pure functions of (seed, position) built on it, so any
** chunk makes its own values in any order. */
static inline uint64_t tr_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15u;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

/* Seconds on a monotonic clock. */
double tr_now(void);
/* A condition variable whose timed waits run on tr_now()'s clock, and the
** deadline of such a wait at tr_now() time t (a deadline that steps of
** the wall clock cannot move). */
void tr_cond_init(pthread_cond_t *cv);
void tr_deadline(double t, struct timespec *ts);

/*
** Cancel token: how work that may run long learns that nobody wants its
** result any more (Ctrl-C in the shell, a CANCEL from the coordinator, a
** lost coordinator, a worker told to stop).  Whoever starts the work owns
** the token and hands a pointer to everything that works for it; long
** loops poll it every so often and stop with TR_EINTR.  One token per
** piece of work, never one for the process: a cancel meant for one task
** cannot stop, or be cleared by, another.
**
** The flag is read and written with GCC/Clang atomic built-ins rather than
** <stdatomic.h> because this header is also compiled as C++ (nvcc), where
** that header does not exist before C++23.  An int's atomics are lock-free,
** so tr_cancel_set is safe in a signal handler.  A NULL token is never
** cancelled.
*/
typedef struct tr_cancel {
  int flag; /* 1 once cancelled; touch only through the functions below */
} tr_cancel;

static inline void tr_cancel_set(tr_cancel *c) {
  __atomic_store_n(&c->flag, 1, __ATOMIC_SEQ_CST);
}
static inline void tr_cancel_clear(tr_cancel *c) {
  __atomic_store_n(&c->flag, 0, __ATOMIC_SEQ_CST);
}
/* Relaxed: the flag guards no data, and a poll in a kernel loop must be as
** cheap as a plain load. */
static inline int tr_cancelled(const tr_cancel *c) {
  return c && __atomic_load_n(&c->flag, __ATOMIC_RELAXED);
}

/* Number of online cores (at least 1). */
int tr_ncores(void);
/* Bytes of physical memory; 0 if the system does not say. */
int64_t tr_phys_memory(void);
/* The process's peak resident memory in bytes (VmHWM; 0 if the system
** does not say); with reset, the peak starts again from what is resident
** now, so the next call tells the peak since this one. */
int64_t tr_peak_rss(int reset);
/* This process's resident memory now, in bytes (0 if unknown). */
int64_t tr_rss(void);
/* Free heap a process told it may use `memory` bytes (0: not told) keeps
** for its next buffers: half of it, at most 1 GiB. */
int64_t tr_heap_reserve(int64_t memory);

/*
** Work on this machine.  Background chores (a worker faulting in its heap)
** must not run beside a statement: a page fault holds its core whatever
** the faulting thread's priority.  Every tradb process of this user on
** this machine marks the work it does (a shell's statement, a worker's
** task) in one table in shared memory, /dev/shm/tradb-busy-UID; a chore
** asks whether any of them worked since it last asked.  Best effort:
** without the table (no /dev/shm), only this process's own work counts.
*/
/* This process starts (1) or ends (0) a piece of work; from one thread,
** and not nested. */
void tr_work(int on);
/* Whether some tradb process of this user on this machine (this one
** included) works now, or started work since the call that set *seen
** (start with 0); a slot a killed process left is cleared. */
int tr_host_working(uint32_t *seen);

/*
** Thread pool: run fn(arg, i) for i in [0, n) on up to nthreads threads
** (the caller's thread included; the others are helpers kept between
** calls, or threads of the call's own while another call has them).
** Tasks are handed out in index order.
** Returns TR_OK, or the first non-zero status a task returned; once a task
** fails or cancel (may be NULL) is set, tasks not yet started are skipped
** (TR_EINTR if cancelled).  The tasks themselves should poll cancel too.
*/
typedef int (*tr_task_fn)(void *arg, int64_t i);
int tr_parallel_for(int nthreads, int64_t n, tr_task_fn fn, void *arg, const tr_cancel *cancel);

#endif /* TRADB_UTIL_H */
