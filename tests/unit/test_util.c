/*
** tests/unit/test_util.c - the status convention, element types, the
** invariant checks and the thread pool.
*/
#include "config.h"
#ifndef TRADB_DEBUG
#define TRADB_DEBUG 1 /* the invariant checks as make check's library has them */
#endif
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdatomic.h>
#include <string.h>
#include "util/util.h"

Test(util, seterr_formats_and_returns_code) {
  tr_err e;
  tr_clearerr(&e);
  cr_assert_eq(e.code, TR_OK);
  int rc = tr_seterr(&e, TR_EIO, "cannot open '%s': %s", "x.npy", "No such file");
  cr_assert_eq(rc, TR_EIO);
  cr_assert_eq(e.code, TR_EIO);
  cr_assert_str_eq(e.msg, "cannot open 'x.npy': No such file");
  cr_assert_eq(tr_seterr(NULL, TR_ENAME, "ignored"), TR_ENAME);
}

Test(util, always_and_never_pass_their_condition_on) {
  int calls = 0;
  cr_assert_eq(ALWAYS(++calls == 1), 1);
  cr_assert_eq(NEVER(++calls == 3), 0);
  cr_assert_eq(calls, 2, "each condition is evaluated once");
  tr_assert(calls == 2);
}

Test(util, broken_invariant_aborts, .signal = SIGABRT) {
  int x = 1;
  tr_assert(x == 2);
}

Test(util, seterr_truncates_long_messages) {
  tr_err e;
  char big[4000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  tr_seterr(&e, TR_ERR, "%s", big);
  cr_assert_eq(strlen(e.msg), sizeof e.msg - 1);
}

/* Big blobs in this process's heap, or in shared memory (recycled too:
** the pool's memory is zeroed past the data again). */
static void s_blobs_have_room(void) {
  size_t span, sizes[] = {TR_BLOB_ROOM_MIN, TR_BLOB_ROOM_MIN + 5, ((size_t)3 << 20) + 4032,
                          ((size_t)3 << 20) + 4000};
  for (int i = 0; i < 4; i++) {
    tr_blob *b = tr_blob_new(sizes[i]);
    cr_assert_not_null(b);
    char *room = tr_blob_room(b, &span), *data = tr_blob_data(b);
    cr_assert_not_null(room, "%zu bytes", sizes[i]);
    cr_assert_eq((uintptr_t)room % TR_PAGE, 0);
    cr_assert_eq(data, room + TR_BLOB_ROOM);
    cr_assert_eq(span % TR_PAGE, 0);
    cr_assert(span >= TR_BLOB_ROOM + sizes[i] && span < TR_BLOB_ROOM + sizes[i] + TR_PAGE);
    /* the whole span is the blob's: writable, and zero past the data */
    memset(room, 0x5a, TR_BLOB_ROOM);
    memset(data, 0x7f, sizes[i]);
    for (size_t k = TR_BLOB_ROOM + sizes[i]; k < span; k++) cr_assert_eq(room[k], 0, "byte %zu", k);
    tr_blob_unref(&b);
  }
  tr_blob *small = tr_blob_new(TR_BLOB_ROOM_MIN - 1);
  cr_assert_null(tr_blob_room(small, &span));
  cr_assert_eq(span, 0);
  cr_assert_eq(tr_blob_shared_fd(small, NULL), -1, "a small blob is never shared");
  tr_blob_unref(&small);
}

Test(util, a_big_blob_has_room_for_a_header_on_a_page_boundary) {
  s_blobs_have_room();
}

Test(shared, a_shared_blob_has_room_and_its_memory_is_reused) {
  cr_assert_eq(tr_blob_share((size_t)64 << 20), TR_OK);
  s_blobs_have_room();
  cr_assert_gt(tr_blob_pool_bytes(), 0, "memory nobody maps was not kept");
}

/* A blob of n bytes filled with a pattern, in shared memory; its memfd's
** descriptor and inode. */
static tr_blob *s_shared_blob(size_t n, int *fd, uint64_t *ino) {
  tr_blob *b = tr_blob_new(n);
  cr_assert_not_null(b);
  for (size_t i = 0; i < n / sizeof(float); i++) ((float *)tr_blob_data(b))[i] = (float)i;
  *fd = tr_blob_shared_fd(b, ino);
  cr_assert_geq(*fd, 0, "a big blob is not in shared memory");
  return b;
}

/* Sharing on, a shared blob of n bytes, and its mapping (as another
** process maps it, here through /proc/self). */
static tr_blob *s_mapped_pair(size_t n, tr_blob **b) {
  int fd;
  uint64_t ino;
  tr_err err;
  cr_assert_eq(tr_blob_share((size_t)64 << 20), TR_OK);
  *b = s_shared_blob(n, &fd, &ino);
  tr_blob *m = tr_blob_map((uint32_t)getpid(), fd, ino, n, &err);
  cr_assert_not_null(m, "%s", err.msg);
  return m;
}

Test(shared, a_mapped_blob_is_the_same_pages_and_its_room_its_own) {
  size_t n = (size_t)1 << 20;
  tr_blob *b, *m = s_mapped_pair(n, &b);
  cr_assert_eq(tr_blob_size(m), n);
  cr_assert_neq(tr_blob_data(m), tr_blob_data(b));
  cr_assert_eq(memcmp(tr_blob_data(m), tr_blob_data(b), n), 0);
  /* the same pages: a write by the maker shows (it never writes a blob
  ** once shared; this only proves nothing was copied) */
  ((float *)tr_blob_data(b))[n / 8] = -1.5f;
  cr_assert_eq(((float *)tr_blob_data(m))[n / 8], -1.5f);
  /* the mapper's room is its own: writing it leaves the maker's alone */
  size_t span;
  char *room = tr_blob_room(m, &span), *mine = tr_blob_room(b, NULL);
  cr_assert_eq((uintptr_t)room % TR_PAGE, 0);
  cr_assert_eq(span, (TR_BLOB_ROOM + n + TR_PAGE - 1) / TR_PAGE * TR_PAGE);
  memset(mine, 0x11, TR_BLOB_ROOM);
  memset(room, 0x22, TR_BLOB_ROOM);
  cr_assert_eq(mine[0], 0x11);
  cr_assert_eq(memcmp(tr_blob_data(m), tr_blob_data(b), n), 0);
  tr_blob_unref(&b);
  tr_blob_unref(&m);
}

Test(shared, a_mapped_blob_cannot_be_written, .signal = SIGSEGV) {
  size_t n = (size_t)1 << 20;
  tr_blob *b, *m = s_mapped_pair(n, &b);
  ((volatile float *)tr_blob_data(m))[n / 8] = 2.0f; /* past the first page */
  tr_blob_unref(&b); /* not reached */
}

Test(shared, a_sealed_blob_cannot_be_written, .signal = SIGSEGV) {
  size_t n = (size_t)1 << 20;
  int fd;
  uint64_t ino;
  cr_assert_eq(tr_blob_share((size_t)64 << 20), TR_OK);
  tr_blob *b = s_shared_blob(n, &fd, &ino);
  tr_blob_seal(b);
  memset(tr_blob_room(b, NULL), 0, TR_BLOB_ROOM); /* its room stays writable */
  cr_assert_eq(((float *)tr_blob_data(b))[n / 8], (float)(n / 8)); /* and readable */
  ((volatile float *)tr_blob_data(b))[n / 8] = 2.0f;
  tr_blob_unref(&b); /* not reached */
}

Test(shared, a_sealed_blob_is_writable_again_once_reused) {
  size_t n = (size_t)1 << 20;
  int fd;
  uint64_t ino, ino2;
  cr_assert_eq(tr_blob_share((size_t)64 << 20), TR_OK);
  tr_blob *b = s_shared_blob(n, &fd, &ino);
  tr_blob_seal(b);
  tr_blob_unref(&b);
  b = s_shared_blob(n, &fd, &ino2); /* writes all of it */
  cr_assert_eq(ino2, ino, "the pooled memory was not reused");
  tr_blob_unref(&b);
}

Test(shared, memory_is_reused_only_once_nobody_else_maps_it) {
  size_t n = (size_t)2 << 20;
  int fd, fd2;
  uint64_t ino, ino2;
  tr_err err;
  cr_assert_eq(tr_blob_share((size_t)64 << 20), TR_OK);
  tr_blob *b = s_shared_blob(n, &fd, &ino);
  tr_blob *m = tr_blob_map((uint32_t)getpid(), fd, ino, n, &err);
  cr_assert_not_null(m, "%s", err.msg);
  /* the maker lets go first: the mapper still maps it, so it is not kept */
  tr_blob_unref(&b);
  cr_assert_eq(tr_blob_pool_bytes(), 0, "memory another holder maps was pooled");
  tr_blob *c = s_shared_blob(n, &fd2, &ino2);
  cr_assert_neq(ino2, ino, "a new blob got memory another holder maps");
  for (size_t i = 0; i < n / sizeof(float); i++)
    cr_assert_eq(((float *)tr_blob_data(m))[i], (float)i, "float %zu changed under its mapper", i);
  /* the mapper lets go last: it keeps nothing, and the maker's next blob
  ** of its size gets the memory back */
  tr_blob_unref(&m);
  cr_assert_eq(tr_blob_pool_bytes(), 0, "a mapper pooled memory it did not make");
  tr_blob *d = s_shared_blob(n - 100, &fd, &ino2);
  cr_assert_eq(ino2, ino, "the maker did not get its memory back");
  cr_assert_eq(tr_blob_pool_bytes(), 0);
  /* reused, it can be mapped again */
  tr_blob *m2 = tr_blob_map((uint32_t)getpid(), fd, ino, n - 100, &err);
  cr_assert_not_null(m2, "%s", err.msg);
  cr_assert_eq(memcmp(tr_blob_data(m2), tr_blob_data(d), n - 100), 0);
  tr_blob_unref(&m2);
  tr_blob_unref(&d);
  tr_blob_unref(&c);
  tr_blob_pool_trim(0);
  cr_assert_eq(tr_blob_pool_bytes(), 0);
}

/* Of three blobs of n bytes let go (inodes ino, oldest first), with room
** kept for two: the next three blobs of n bytes, into c, get the newer
** two's memory, the oldest first, and then new memory. */
static void s_the_newer_two_come_back(size_t n, const uint64_t ino[3], tr_blob *c[3]) {
  int fd;
  uint64_t got[3];
  for (int i = 0; i < 3; i++) c[i] = s_shared_blob(n, &fd, &got[i]);
  cr_assert_eq(got[0], ino[1], "the newer two were not kept, the oldest first");
  cr_assert_eq(got[1], ino[2]);
  cr_assert(got[2] != ino[0] && got[2] != ino[1] && got[2] != ino[2], "memory let go came back");
}

Test(shared, memory_still_mapped_elsewhere_waits_within_the_pools_size) {
  size_t n = (size_t)1 << 20, span = n + TR_PAGE;
  int fd;
  uint64_t ino[3];
  tr_err err;
  cr_assert_eq(tr_blob_share(2 * span + span / 2), TR_OK); /* room for two */
  tr_blob *b[3], *m[3], *c[3];
  for (int i = 0; i < 3; i++) {
    b[i] = s_shared_blob(n, &fd, &ino[i]);
    m[i] = tr_blob_map((uint32_t)getpid(), fd, ino[i], n, &err);
    cr_assert_not_null(m[i], "%s", err.msg);
  }
  /* the makers let go first: the third to wait closes the first */
  for (int i = 0; i < 3; i++) tr_blob_unref(&b[i]);
  for (int i = 0; i < 3; i++) tr_blob_unref(&m[i]);
  cr_assert_eq(tr_blob_pool_bytes(), 0);
  s_the_newer_two_come_back(n, ino, c);
  for (int i = 0; i < 3; i++) tr_blob_unref(&c[i]);
  cr_assert_eq(tr_blob_pool_bytes(), 2 * span);
}

Test(shared, memory_a_peer_lets_go_while_all_is_idle_comes_back) {
  size_t n = (size_t)1 << 20;
  uint64_t ino, got;
  int fd, calls = 0;
  tr_blob *b, *m = s_mapped_pair(n, &b);
  tr_blob_shared_fd(b, &ino);
  tr_blob_unref(&b); /* pending: the peer maps it */
  tr_blob_pool_wanted(); /* the burst that made it ends */
  tr_blob_unref(&m); /* the peer lets go later, nothing made since */
  while (tr_blob_pool_bytes() == 0 && calls < 100) {
    tr_blob_pool_wanted();
    calls++;
  }
  cr_assert_gt(tr_blob_pool_bytes(), 0, "idle calls never took back memory nobody maps");
  b = s_shared_blob(n, &fd, &got);
  cr_assert_eq(got, ino);
  tr_blob_unref(&b);
}

Test(shared, a_full_pool_lets_its_oldest_memory_go) {
  size_t n = (size_t)1 << 20, span = n + TR_PAGE;
  int fd;
  uint64_t ino[3], got;
  cr_assert_eq(tr_blob_share(2 * span + span / 2), TR_OK); /* room for two */
  tr_blob *b[3];
  for (int i = 0; i < 3; i++) b[i] = s_shared_blob(n, &fd, &ino[i]);
  for (int i = 0; i < 3; i++) tr_blob_unref(&b[i]); /* the third evicts the first */
  cr_assert_eq(tr_blob_pool_bytes(), 2 * span);
  tr_blob *c[3];
  s_the_newer_two_come_back(n, ino, c);
  cr_assert_eq(tr_blob_pool_bytes(), 0);
  /* bigger than the whole pool: never kept */
  tr_blob *f = s_shared_blob(3 * n, &fd, &got);
  tr_blob_unref(&f);
  cr_assert_eq(tr_blob_pool_bytes(), 0);
  for (int i = 0; i < 3; i++) tr_blob_unref(&c[i]);
  cr_assert_eq(tr_blob_pool_bytes(), 2 * span);
  tr_blob_pool_trim(span);
  cr_assert_eq(tr_blob_pool_bytes(), span);
}

static int s_go_on(void *arg) { return --*(int *)arg >= 0; }

Test(shared, the_pool_is_warmed_with_the_sizes_made_lately) {
  size_t n = (size_t)1 << 20, span = n + TR_PAGE;
  int fd, budget = 100;
  uint64_t ino;
  cr_assert_eq(tr_blob_share(3 * span), TR_OK);
  cr_assert_eq(tr_blob_pool_wanted(), 0, "nothing made yet, yet a size wanted");
  tr_blob *b[2];
  for (int i = 0; i < 2; i++) b[i] = s_shared_blob(n, &fd, &ino); /* held: nothing pooled */
  cr_assert_eq(tr_blob_pool_wanted(), span);
  /* stopped after its first MiB: nothing pooled */
  int stop = 1;
  cr_assert_eq(tr_blob_pool_warm(span, s_go_on, &stop), 0);
  cr_assert_eq(tr_blob_pool_bytes(), 0);
  /* two made, two warmed, then none wanted */
  cr_assert_eq(tr_blob_pool_warm(span, s_go_on, &budget), 1);
  cr_assert_eq(tr_blob_pool_wanted(), span);
  cr_assert_eq(tr_blob_pool_warm(span, s_go_on, &budget), 1);
  cr_assert_eq(tr_blob_pool_bytes(), 2 * span);
  cr_assert_eq(tr_blob_pool_wanted(), 0, "more wanted than was made");
  /* the next blobs of that size take it */
  tr_blob *c = s_shared_blob(n, &fd, &ino);
  cr_assert_eq(tr_blob_pool_bytes(), span);
  /* a blob of another size is wanted first, within the room left */
  tr_blob *d = s_shared_blob(n / 2, &fd, &ino);
  cr_assert_eq(tr_blob_pool_wanted(), n / 2 + TR_PAGE);
  tr_blob_unref(&b[0]);
  tr_blob_unref(&b[1]);
  tr_blob_unref(&c);
  tr_blob_unref(&d);
}

Test(shared, the_pool_is_warmed_for_one_burst_of_work_not_for_every_one) {
  size_t n = (size_t)1 << 20, span = n + TR_PAGE;
  int fd, budget = 100;
  uint64_t ino;
  cr_assert_eq(tr_blob_share(8 * span), TR_OK);
  /* two bursts (each ended by a call, as the idle worker calls), each
  ** making two blobs of one size: a third burst like them needs two */
  tr_blob *b[4];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 2; i++) b[2 * k + i] = s_shared_blob(n, &fd, &ino);
    cr_assert_eq(tr_blob_pool_wanted(), span);
  }
  cr_assert_eq(tr_blob_pool_warm(span, s_go_on, &budget), 1);
  cr_assert_eq(tr_blob_pool_warm(span, s_go_on, &budget), 1);
  cr_assert_eq(tr_blob_pool_wanted(), 0, "warmed for every blob made, not for one burst");
  cr_assert_eq(tr_blob_pool_bytes(), 2 * span);
  for (int i = 0; i < 4; i++) tr_blob_unref(&b[i]);
}

Test(shared, what_is_not_that_chunk_memory_is_not_mapped) {
  size_t n = (size_t)1 << 20;
  int fd;
  uint64_t ino;
  tr_err err;
  uint32_t me = (uint32_t)getpid();
  /* sharing off: refused */
  cr_assert_null(tr_blob_map(me, 0, 0, n, &err));
  cr_assert(strstr(err.msg, "maps no chunks"), "%s", err.msg);
  cr_assert_eq(tr_blob_share((size_t)64 << 20), TR_OK);
  tr_blob *b = s_shared_blob(n, &fd, &ino);
  /* another inode, more bytes than it holds, a file that is not a memfd,
  ** a descriptor that is not open */
  cr_assert_null(tr_blob_map(me, fd, ino + 1, n, &err));
  cr_assert(strstr(err.msg, "holds another chunk"), "%s", err.msg);
  cr_assert_null(tr_blob_map(me, fd, ino, 2 * n, &err));
  cr_assert(strstr(err.msg, "holds another chunk"), "%s", err.msg);
  int null = open("/dev/null", O_RDONLY);
  cr_assert_null(tr_blob_map(me, null, ino, n, &err));
  cr_assert(strstr(err.msg, "is no chunk memory"), "%s", err.msg);
  close(null);
  cr_assert_null(tr_blob_map(me, 9999, ino, n, &err));
  cr_assert(strstr(err.msg, "cannot see descriptor"), "%s", err.msg);
  tr_blob_unref(&b);
}

Test(util, a_hint_is_a_name_near_the_word_not_any_name_of_its_length) {
  const char *names[] = {"A", "H", "W1", "hidden", "m"};
  cr_expect_eq(tr_closest("B", names, 5), -1, "B is no nearer A or H than any letter");
  cr_expect_eq(tr_closest("X", names, 5), -1);
  cr_expect_eq(tr_closest("M", names, 5), 4, "the other letter case is a hint");
  cr_expect_eq(tr_closest("a", names, 5), 0);
  cr_expect_eq(tr_closest("W2", names, 5), 2);
  cr_expect_eq(tr_closest("hiden", names, 5), 3);
  cr_expect_eq(tr_closest("A", names, 5), -1, "the word itself is a name");
}

Test(util, dtypes) {
  tr_dtype t;
  cr_assert_eq(tr_dtype_size(TR_F32), 4);
  cr_assert_eq(tr_dtype_size(TR_F64), 8);
  cr_assert_str_eq(tr_dtype_name(TR_F64), "f64");
  cr_assert_eq(tr_dtype_parse("f64", &t), TR_OK);
  cr_assert_eq(t, TR_F64);
  cr_assert_eq(tr_dtype_parse("float32", &t), TR_OK);
  cr_assert_eq(t, TR_F32);
  cr_assert_eq(tr_dtype_parse("i32", &t), TR_ETYPE);
}

Test(util, aligned_alloc_is_aligned) {
  for (size_t n = 0; n < 300; n += 37) {
    void *p = tr_alloc_aligned(n);
    cr_assert_not_null(p);
    cr_assert_eq((uintptr_t)p % 64, 0);
    tr_free_aligned(p);
  }
}

static atomic_int s_hits[1000];

static int s_mark(void *arg, int64_t i) {
  (void)arg;
  atomic_fetch_add(&s_hits[i], 1);
  return TR_OK;
}

Test(util, parallel_for_runs_every_task_once) {
  for (int i = 0; i < 1000; i++) atomic_store(&s_hits[i], 0);
  cr_assert_eq(tr_parallel_for(4, 1000, s_mark, NULL, NULL), TR_OK);
  for (int i = 0; i < 1000; i++) cr_assert_eq(atomic_load(&s_hits[i]), 1, "task %d", i);
}

static atomic_int s_ran;

static int s_fail_at_10(void *arg, int64_t i) {
  (void)arg;
  atomic_fetch_add(&s_ran, 1);
  return i == 10 ? TR_EIO : TR_OK;
}

Test(util, parallel_for_reports_failure_and_stops_early) {
  atomic_store(&s_ran, 0);
  cr_assert_eq(tr_parallel_for(1, 100000, s_fail_at_10, NULL, NULL), TR_EIO);
  cr_assert_lt(atomic_load(&s_ran), 100000);
}

/* Task 5 cancels the token it is given. */
static int s_cancel_at_5(void *arg, int64_t i) {
  atomic_fetch_add(&s_ran, 1);
  if (i == 5) tr_cancel_set(arg);
  return TR_OK;
}

Test(util, cancel_token_stops_parallel_for) {
  tr_cancel c = {0};
  atomic_store(&s_ran, 0);
  cr_assert_eq(tr_parallel_for(1, 1000, s_cancel_at_5, &c, &c), TR_EINTR);
  cr_assert_eq(atomic_load(&s_ran), 6, "tasks after the cancel were skipped");
  /* Set before the call: no task starts, on any thread. */
  atomic_store(&s_ran, 0);
  cr_assert_eq(tr_parallel_for(4, 1000, s_cancel_at_5, &c, &c), TR_EINTR);
  cr_assert_eq(atomic_load(&s_ran), 0);
  /* Another token, or a cleared one, stops nothing. */
  tr_cancel other = {0};
  tr_cancel_clear(&c);
  atomic_store(&s_ran, 0);
  cr_assert_eq(tr_parallel_for(4, 1000, s_cancel_at_5, &other, &c), TR_OK);
  cr_assert_eq(atomic_load(&s_ran), 1000);
  cr_assert(tr_cancelled(&other));
  cr_assert(!tr_cancelled(&c));
  cr_assert(!tr_cancelled(NULL), "a NULL token is never cancelled");
}

/* Tasks that wait for each other: each of s_meet_n tasks runs on a thread
** of its own, and notes the thread it ran on. */
static atomic_int s_met;
static int s_meet_n;
static pid_t s_meet_on[8]; /* kernel thread ids: glibc reuses a pthread_t */

static int s_meet(void *arg, int64_t i) {
  (void)arg;
  atomic_fetch_add(&s_met, 1);
  double end = tr_now() + 10;
  while (atomic_load(&s_met) < s_meet_n)
    if (tr_now() > end) return TR_ERR; /* the threads never met */
  s_meet_on[i] = gettid();
  return TR_OK;
}

/* Run s_meet on n threads; the thread other than this one that ran a task. */
static int s_meet_helper(int n, pid_t *helper) {
  s_meet_n = n;
  atomic_store(&s_met, 0);
  int rc = tr_parallel_for(n, n, s_meet, NULL, NULL);
  for (int i = 0; i < n; i++)
    if (s_meet_on[i] != gettid()) *helper = s_meet_on[i];
  return rc;
}

/* A statement's chunk tasks start no thread of their own: the helpers of
** one call are the next call's. */
Test(util, parallel_for_keeps_its_threads) {
  pid_t first = 0, again = 0;
  cr_assert_eq(s_meet_helper(2, &first), TR_OK);
  for (int k = 0; k < 5; k++) {
    cr_assert_eq(s_meet_helper(2, &again), TR_OK);
    cr_assert_eq(first, again, "call %d ran on a new thread", k);
  }
  /* more threads than before: the pool grows */
  cr_assert_eq(s_meet_helper(4, &again), TR_OK);
}

static void *s_concurrent_call(void *arg) {
  int *rc = arg;
  *rc = tr_parallel_for(3, 1000, s_mark, NULL, NULL);
  return NULL;
}

/* Calls from two threads at once: one has the helpers, the other starts
** threads of its own; every task runs once. */
Test(util, parallel_for_from_two_threads_at_once) {
  for (int round = 0; round < 50; round++) {
    for (int i = 0; i < 1000; i++) atomic_store(&s_hits[i], 0);
    pthread_t t[2];
    int rc[2] = {-1, -1};
    for (int k = 0; k < 2; k++) cr_assert_eq(pthread_create(&t[k], NULL, s_concurrent_call, &rc[k]), 0);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    cr_assert_eq(rc[0], TR_OK);
    cr_assert_eq(rc[1], TR_OK);
    for (int i = 0; i < 1000; i++) cr_assert_eq(atomic_load(&s_hits[i]), 2, "round %d task %d", round, i);
  }
}

/* A fork's child has none of its parent's helpers, and must not wait for
** them. */
Test(util, parallel_for_in_a_forked_child) {
  pid_t h = 0;
  cr_assert_eq(s_meet_helper(2, &h), TR_OK); /* the parent has a helper */
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    alarm(20); /* a child waiting for helpers it lacks is killed, not hung */
    _exit(s_meet_helper(2, &h) == TR_OK && s_meet_helper(3, &h) == TR_OK ? 0 : 1);
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
}

Test(util, clock_is_monotonic) {
  double a = tr_now(), b = tr_now();
  cr_assert_geq(b, a);
  cr_assert_geq(tr_ncores(), 1);
}

/* A prefix keeps the cause: the old message is copied before the new one
** is formatted (formatting err->msg into itself once doubled the prefix). */
Test(util, prefix_keeps_the_cause) {
  tr_err err;
  tr_seterr(&err, TR_EIO, "Host unreachable");
  cr_assert_eq(tr_prefix(&err, TR_EIO, "cannot send to worker %s", "tcp://h:1"), TR_EIO);
  cr_assert_str_eq(err.msg, "cannot send to worker tcp://h:1: Host unreachable");
  cr_assert_eq(err.code, TR_EIO);
  tr_prefix(&err, TR_ENOMEM, "again");
  cr_assert_str_eq(err.msg, "again: cannot send to worker tcp://h:1: Host unreachable");
  cr_assert_eq(err.code, TR_ENOMEM);
  /* a message that fills the buffer is cut, never overrun */
  memset(err.msg, 'x', sizeof err.msg - 1);
  err.msg[sizeof err.msg - 1] = '\0';
  tr_prefix(&err, TR_EIO, "p");
  cr_assert_eq(strlen(err.msg), sizeof err.msg - 1);
  cr_assert_eq(strncmp(err.msg, "p: xxx", 6), 0);
  cr_assert_eq(tr_prefix(NULL, TR_EIO, "nothing"), TR_EIO);
}

/* A text grows past any first guess, escapes JSON strings, and hands over
** "" when nothing was put. */
Test(util, text_grows_and_escapes) {
  tr_text t = {0};
  char *s = tr_text_done(&t);
  cr_assert_str_eq(s, "");
  free(s);
  for (int i = 0; i < 1000; i++) tr_text_put(&t, "%d,", i);
  tr_text_put(&t, "%s", "");
  tr_text_json(&t, "a\"b\\c\nd\x01");
  s = tr_text_done(&t);
  cr_assert_not_null(s);
  cr_assert_eq(strncmp(s, "0,1,2,", 6), 0);
  const char *tail = strstr(s, "999,");
  cr_assert_not_null(tail);
  cr_assert_str_eq(tail + 4, "a\\\"b\\\\c\\nd\\u0001");
  cr_assert_eq(t.s, NULL, "done leaves the text empty for reuse");
  free(s);
}

/* The work table background chores wait on (a worker's warm heap): work
** of this process and of another one shows, a start seen only after it
** ended still shows once, and a killed process's slot is cleared. */
Test(util, work_on_this_machine_is_seen_and_a_dead_workers_slot_cleared) {
  char name[64];
  snprintf(name, sizeof name, "/tradb-test-work-%d", (int)getpid());
  setenv("TRADB_TEST_WORK_TABLE", name, 1);
  uint32_t seen = 0;
  tr_host_working(&seen);
  cr_assert_not(tr_host_working(&seen), "nothing works yet");
  tr_work(1);
  cr_assert(tr_host_working(&seen), "this process works");
  tr_work(0);
  cr_assert_not(tr_host_working(&seen));
  tr_work(1);
  tr_work(0);
  cr_assert(tr_host_working(&seen), "work started and ended since the last call");
  cr_assert_not(tr_host_working(&seen));

  int up[2], down[2];
  cr_assert_eq(pipe(up), 0);
  cr_assert_eq(pipe(down), 0);
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (!child) {
    char c = 0;
    tr_work(1);
    if (write(up[1], &c, 1) != 1) _exit(1);
    if (read(down[0], &c, 1) != 1) _exit(1); /* works until killed */
    _exit(0);
  }
  char c;
  cr_assert_eq(read(up[0], &c, 1), 1);
  cr_assert(tr_host_working(&seen), "another process works");
  cr_assert(tr_host_working(&seen), "and still does: its slot holds its pid");
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  cr_assert_not(tr_host_working(&seen), "a killed process's slot counts no more");
  shm_unlink(name);
}
