/*
** tests/unit/test_storemem.c - the chunks a worker's store holds in
** memory (catalog/storemem.c): chunks put to be written in the background
** (TC_KEEP_BACKGROUND) are in no file until they are due, synced, or the
** store closes, and none is lost on the way; copies in memory serve reads
** without the file, stay within the byte budget, and go when trimmed.
*/
#include "config.h"
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "catalog/catalog.h"
#include "catalog/store_int.h"
#include <time.h>
#include "tests/unit/fixture.h"

static char s_dir[300];

static void s_setup(void) {
  tf_setup();
  snprintf(s_dir, sizeof s_dir, "%s", tf_path("d"));
}

TestSuite(storemem, .init = s_setup, .fini = tf_teardown);

/* n floats of seed as a new blob. */
static tr_blob *s_blob(size_t n, unsigned seed) {
  tr_blob *b = tr_blob_new(n * 4);
  cr_assert_not_null(b);
  float *v = tr_blob_data(b);
  for (size_t i = 0; i < n; i++) v[i] = (float)(seed * 1000u + i) * 0.5f;
  return b;
}

/* Put n floats of seed under id, kept as keep says. */
static void s_put(tc_store *s, uint64_t id, size_t n, unsigned seed, tc_keep keep) {
  tr_err err;
  tr_blob *b = s_blob(n, seed);
  cr_assert_eq(tc_store_put_blob(s, id, TR_F32, b, keep, 0, NULL, &err), TR_OK, "%s", err.msg);
  tr_blob_unref(&b);
}

/* Chunk id must hold n floats of seed. */
static void s_expect(tc_store *s, uint64_t id, size_t n, unsigned seed) {
  tr_err err;
  tr_blob *want = s_blob(n, seed), *got = NULL;
  cr_assert_eq(tc_store_get_blob(s, id, n * 4, &got, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(memcmp(tr_blob_data(got), tr_blob_data(want), n * 4), 0, "chunk %llu differs",
               (unsigned long long)id);
  tr_blob_unref(&got);
  tr_blob_unref(&want);
}

static int s_files(void) { return tf_count(s_dir, "", ".chk"); }

/* Close *s, then chunks first..last (n floats, seeded by id) must be in
** the store reopened from its files. */
static void s_reopened_holds(tc_store **s, uint64_t first, uint64_t last, size_t n) {
  tc_store_close(s);
  *s = tf_store(s_dir);
  for (uint64_t id = first; id <= last; id++) s_expect(*s, id, n, (unsigned)id);
  tc_store_close(s);
}

static int64_t s_unwritten(tc_store *s) {
  int64_t u;
  tc_store_memory(s, NULL, &u);
  return u;
}

/* Flip a payload byte of chunk id's file. */
static void s_damage(uint64_t id) {
  unsigned char c;
  int fd = open(tf_path("d/%016llx.chk", (unsigned long long)id), O_RDWR);
  cr_assert(fd >= 0);
  cr_assert_eq(pread(fd, &c, 1, 70), 1);
  c ^= 0x40;
  cr_assert_eq(pwrite(fd, &c, 1, 70), 1);
  close(fd);
}

/* Held in memory until synced: no file before, the right bytes after, and
** the sync is what wrote them (the writer waits for a sync only). */
Test(storemem, background_chunk_is_written_by_sync) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  tc_store_set_writeback(s, -1);
  s_put(s, 5, 64, 5, TC_KEEP_BACKGROUND);
  cr_assert_eq(s_files(), 0);
  cr_assert_eq(s_unwritten(s), 256);
  s_expect(s, 5, 64, 5);
  uint64_t id = 5;
  cr_assert_eq(tc_store_sync(s, &id, 1, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_files(), 1);
  cr_assert_eq(s_unwritten(s), 0);
  s_reopened_holds(&s, 5, 5, 64);
}

/* What the store did with its files (tc_store_file_counts). */
static tc_store_files s_counts(tc_store *s) {
  tc_store_files f;
  tc_store_file_counts(s, &f);
  return f;
}

/* A sync of chunks already in their files (every output under synchronous
** = full) syncs those files alone, and one of a few chunks held in memory
** only syncs each file it writes: a sync of the whole file system waits
** behind every other process's writes to the disk.  Many are made durable
** by one, as a batch. */
Test(storemem, a_few_chunks_synced_without_syncing_the_file_system) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  tc_store_set_writeback(s, -1);
  s_put(s, 1, 64, 1, TC_KEEP_FILE);
  s_put(s, 2, 64, 2, TC_KEEP_FILE);
  uint64_t files[] = {1, 2};
  cr_assert_eq(tc_store_sync(s, files, 2, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_counts(s).fs_syncs, 0);
  s_put(s, 3, 64, 3, TC_KEEP_BACKGROUND);
  s_put(s, 4, 64, 4, TC_KEEP_BACKGROUND);
  uint64_t few[] = {1, 2, 3, 4};
  cr_assert_eq(tc_store_sync(s, few, 4, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_counts(s).fs_syncs, 0);
  cr_assert_eq(s_files(), 4);
  for (uint64_t id = 5; id <= 20; id++) s_put(s, id, 64, (unsigned)id, TC_KEEP_BACKGROUND);
  cr_assert_eq(tc_store_sync_unwritten(s, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_counts(s).fs_syncs, 1, "16 chunks, one sync of the file system");
  cr_assert_eq(s_files(), 20);
  cr_assert_eq(s_unwritten(s), 0);
  cr_assert_eq(tc_store_sync_unwritten(s, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_counts(s).fs_syncs, 1, "nothing was left in memory only");
  s_reopened_holds(&s, 1, 20, 64);
}

/* What a worker does before a statement runs again without a lost one:
** every chunk held in memory only gets its file, scratch stays in memory,
** a chunk dropped before is no error, and the files alone give them back
** (the store is then abandoned, as a killed worker leaves it). */
Test(storemem, sync_unwritten_writes_every_chunk_held_in_memory_only) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  tc_store_set_writeback(s, -1);
  for (uint64_t id = 1; id <= 4; id++) s_put(s, id, 100, (unsigned)id, TC_KEEP_BACKGROUND);
  s_put(s, 9, 100, 9, TC_KEEP_SCRATCH);
  s_put(s, 10, 100, 10, TC_KEEP_FILE);
  uint64_t gone = 3;
  cr_assert_eq(tc_store_drop(s, &gone, 1, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_files(), 1);
  cr_assert_eq(tc_store_sync_unwritten(s, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_files(), 4, "files: %d", s_files());
  cr_assert_eq(s_unwritten(s), 0);
  cr_assert_eq(tc_store_sync_unwritten(s, &err), TR_OK, "%s", err.msg); /* nothing left: no-op */
  /* read back from the files, as a fresh process would, with this store
  ** still open: a copy of the directory */
  char copy[400];
  snprintf(copy, sizeof copy, "%s", tf_path("copy"));
  char cmd[1600];
  snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && rm -f '%s/LOCK'", s_dir, copy, copy);
  cr_assert_eq(system(cmd), 0);
  tc_store *t = tf_store(copy);
  for (uint64_t id = 1; id <= 4; id++)
    if (id != gone) s_expect(t, id, 100, (unsigned)id);
  s_expect(t, 10, 100, 10);
  uint64_t scratch = 9;
  tr_dtype dt;
  uint64_t nb, sum;
  cr_assert_neq(tc_store_stat(t, scratch, &dt, &nb, &sum), TR_OK, "scratch chunk 9 was written");
  tc_store_close(&t);
  tc_store_close(&s);
}

/* Closing the store (a worker told to stop) writes every chunk held in
** memory only: a reopened store finds them all. */
Test(storemem, close_writes_what_is_in_memory_only) {
  tc_store *s = tf_store(s_dir);
  tc_store_set_writeback(s, -1);
  for (uint64_t id = 1; id <= 3; id++) s_put(s, id, 100, (unsigned)id, TC_KEEP_BACKGROUND);
  cr_assert_eq(s_files(), 0);
  tc_store_close(&s);
  cr_assert_eq(s_files(), 3);
  s_reopened_holds(&s, 1, 3, 100);
}

/* The writer writes a chunk once its delay has passed, with no sync and
** no close.  Polled with a deadline. */
Test(storemem, writer_writes_due_chunks) {
  tc_store *s = tf_store(s_dir);
  tc_store_set_writeback(s, 0);
  s_put(s, 9, 32, 9, TC_KEEP_BACKGROUND);
  double end = tr_now() + 30;
  while (s_unwritten(s) > 0 && tr_now() < end) usleep(10000);
  cr_assert_eq(s_unwritten(s), 0, "the writer did not write the chunk within 30 s");
  cr_assert_eq(s_files(), 1);
  s_reopened_holds(&s, 9, 9, 32);
}

/* A chunk for the background is held in memory only while the disk has
** room for its file and the other files held so, beyond the reserve:
** otherwise it is written at once, where a full disk fails the put (and
** the statement making it) instead of a commit whose chunk never reaches
** the disk.  A reserve larger than any disk stands for a full one. */
Test(storemem, a_chunk_for_the_background_is_written_at_once_without_disk_room) {
  tc_store *s = tf_store(s_dir);
  tc_store_set_writeback(s, -1);
  tc_store_set_disk_reserve(s, 0);
  s_put(s, 1, 64, 1, TC_KEEP_BACKGROUND);
  cr_assert_eq(s_files(), 0, "held in memory with room on the disk");
  cr_assert_eq(s_unwritten(s), 256);
  tc_store_set_disk_reserve(s, INT64_MAX / 4);
  s_put(s, 2, 64, 2, TC_KEEP_BACKGROUND);
  cr_assert_eq(s_files(), 1, "not written at once without room on the disk");
  cr_assert_eq(s_unwritten(s), 256);
  s_put(s, 3, 64, 3, TC_KEEP_SCRATCH); /* never written: needs no room */
  cr_assert_eq(s_files(), 1);
  tc_store_drop(s, (uint64_t[]){3}, 1, NULL);
  s_reopened_holds(&s, 1, 2, 64);
}

/* A background write that fails leaves its chunk in memory, and the
** writer pauses before it tries again: it used to try again at once, a
** core spinning for as long as the disk stayed full.  Meanwhile puts are
** written at once.  Files over 16 KiB fail here (RLIMIT_FSIZE, this
** test's process alone), as a full disk would; once they may be larger,
** the writer's next try writes the chunk, and puts are held again. */
Test(storemem, a_failed_background_write_is_tried_again_after_a_pause) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  struct rlimit was;
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
  signal(SIGXFSZ, SIG_IGN); /* the write fails with EFBIG instead */
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &(struct rlimit){16384, was.rlim_max}), 0);
  tc_store_set_disk_reserve(s, 0);
  tc_store_set_writeback(s, 0);
  s_put(s, 7, 16384, 7, TC_KEEP_BACKGROUND);
  double end = tr_now() + 30;
  while (s_counts(s).write_failures == 0 && tr_now() < end) usleep(10000);
  cr_assert_geq(s_counts(s).write_failures, 1, "the writer did not try within 30 s");
  usleep(300000); /* within the first pause (CI_RETRY_MIN_S) */
  cr_assert_leq(s_counts(s).write_failures, 2, "%lld failed writes in 0.3 s: the writer spins",
                (long long)s_counts(s).write_failures);
  cr_assert_eq(s_unwritten(s), 65536, "the chunk left memory");
  s_expect(s, 7, 16384, 7);
  /* and it says why, for the shell's warning */
  char why[256];
  cr_assert_eq(tc_store_write_trouble(s, why, sizeof why), 1);
  cr_assert(strstr(why, "cannot write chunk file") && strstr(why, strerror(EFBIG)), "%s", why);
  /* while its writes fail, the next put is written at once (a small one
  ** fits), so a statement meets the full disk itself */
  s_put(s, 8, 64, 8, TC_KEEP_BACKGROUND);
  cr_assert_eq(s_files(), 1, "held in memory only while the writes fail");
  cr_assert_eq(s_unwritten(s), 65536);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
  end = tr_now() + 60; /* the writer's next try, after its pause */
  while (s_unwritten(s) > 0 && tr_now() < end) usleep(10000);
  cr_assert_eq(s_unwritten(s), 0, "the writer did not try again once the write could succeed");
  cr_assert_eq(tc_store_write_trouble(s, why, sizeof why), 0, "trouble still said: %s", why);
  cr_assert_str_empty(why);
  s_put(s, 9, 64, 9, TC_KEEP_BACKGROUND);
  cr_assert_eq(s_unwritten(s), 256, "written at once after the writes succeeded again");
  uint64_t id = 9;
  cr_assert_eq(tc_store_sync(s, &id, 1, &err), TR_OK, "%s", err.msg);
  tc_store_close(&s);
  s = tf_store(s_dir);
  s_expect(s, 7, 16384, 7);
  s_expect(s, 8, 64, 8);
  s_expect(s, 9, 64, 9);
  tc_store_close(&s);
}

/* A due chunk waits while hold(s, 1) is in force, and is written once
** hold(s, 0) lifts it (what: what lifting it made idle).  Polled with a
** deadline. */
static void s_waits_while_held(void (*hold)(tc_store *, int), uint64_t id, const char *what) {
  tc_store *s = tf_store(s_dir);
  tc_store_set_writeback(s, 0);
  hold(s, 1);
  s_put(s, id, 32, id, TC_KEEP_BACKGROUND);
  usleep(300000); /* the writer had time to start: it must not have */
  cr_assert_eq(s_unwritten(s), 128);
  cr_assert_eq(s_files(), 0);
  hold(s, 0);
  double end = tr_now() + 30;
  while (s_unwritten(s) > 0 && tr_now() < end) usleep(10000);
  cr_assert_eq(s_unwritten(s), 0, "the writer did not write the chunk once %s was idle", what);
  s_reopened_holds(&s, id, id, 32);
}

/* While a task uses the store, a due chunk waits (up to 30 s). */
Test(storemem, writer_waits_for_an_idle_store) {
  s_waits_while_held(tc_store_busy, 6, "the store");
}

/* Another tradb process on this machine at work (here this one, as
** tr_work marks it). */
static void s_machine_works(tc_store *s, int on) {
  (void)s;
  tr_work(on);
}

/* While another tradb process on this machine works, a due chunk waits
** though its own store is idle. */
Test(storemem, writer_waits_while_this_machine_works) {
  s_waits_while_held(s_machine_works, 5, "the machine");
}

/* Another process's work holds a due chunk back for CI_HOST_DEFER_S at
** most: it is written while that work goes on. */
Test(storemem, writer_waits_for_this_machine_a_while_only) {
  tc_store *s = tf_store(s_dir);
  tc_store_set_writeback(s, 0);
  tr_work(1);
  double t0 = tr_now();
  s_put(s, 4, 32, 4, TC_KEEP_BACKGROUND);
  double end = t0 + 30;
  while (s_unwritten(s) > 0 && tr_now() < end) usleep(10000);
  double took = tr_now() - t0;
  tr_work(0);
  cr_assert_eq(s_unwritten(s), 0, "the chunk was not written while the machine worked");
  cr_assert_geq(took, CI_HOST_DEFER_S - 0.5, "written after %.2f s, before its wait was up", took);
  s_reopened_holds(&s, 4, 4, 32);
}

/* A chunk dropped (or replaced) before it was due is never written. */
Test(storemem, dropped_before_due_is_never_written) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  tc_store_set_writeback(s, -1);
  s_put(s, 4, 64, 4, TC_KEEP_BACKGROUND);
  s_put(s, 4, 64, 44, TC_KEEP_BACKGROUND); /* replaces it */
  cr_assert_eq(s_unwritten(s), 256);
  uint64_t id = 4;
  cr_assert_eq(tc_store_drop(s, &id, 1, &err), TR_OK);
  cr_assert_eq(s_unwritten(s), 0);
  tc_store_close(&s);
  cr_assert_eq(s_files(), 0);
}

/* A copy in memory serves reads without the file (a damaged file is not
** met), idle or not; once another chunk's copy takes its room, reads go to
** the file and its checksum catches the damage. */
Test(storemem, copy_in_memory_serves_reads_until_evicted) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  tr_blob *b = NULL;
  tc_store_set_memory(s, 300);
  s_put(s, 7, 64, 7, TC_KEEP_FILE); /* 256 bytes: file, copy in memory */
  cr_assert_eq(s_files(), 1);
  s_damage(7);
  s_expect(s, 7, 64, 7);
  s_put(s, 8, 64, 8, TC_KEEP_FILE); /* its copy takes 7's room */
  int64_t held;
  tc_store_memory(s, &held, NULL);
  cr_assert_eq(held, 256);
  cr_assert_eq(tc_store_get_blob(s, 7, 256, &b, &err), TR_ECORRUPT);
  cr_assert_null(b);
  s_expect(s, 8, 64, 8);
  tc_store_close(&s);
}

/* The budget holds: a chunk that does not fit is written at once however
** it was put, and copies also in files make room, least recently used
** first; chunks in memory only are never let go to make room. */
Test(storemem, budget_holds) {
  tc_store *s = tf_store(s_dir);
  int64_t held;
  tc_store_set_writeback(s, -1);
  tc_store_set_memory(s, 1000);
  s_put(s, 1, 100, 1, TC_KEEP_BACKGROUND); /* 400 bytes: memory only */
  s_put(s, 2, 100, 2, TC_KEEP_FILE);       /* 400: file, copy in memory */
  cr_assert_eq(s_files(), 1);
  tc_store_memory(s, &held, NULL);
  cr_assert_eq(held, 800);
  s_put(s, 3, 100, 3, TC_KEEP_BACKGROUND); /* 2's copy makes room */
  tc_store_memory(s, &held, NULL);
  cr_assert_eq(held, 800);
  cr_assert_eq(s_unwritten(s), 800);
  s_put(s, 4, 100, 4, TC_KEEP_BACKGROUND); /* no room: its file at once */
  cr_assert_eq(s_files(), 2);
  cr_assert_eq(s_unwritten(s), 800);
  for (uint64_t id = 1; id <= 4; id++) s_expect(s, id, 100, (unsigned)id);
  tc_store_close(&s);
  cr_assert_eq(s_files(), 4);
}

static int64_t s_held(tc_store *s) {
  int64_t held;
  tc_store_memory(s, &held, NULL);
  return held;
}

/* Two new stores, *a in the test's directory and *b in dir2 (320 bytes),
** sharing the new pool *p of budget bytes; neither writes in the
** background until synced. */
static void s_pool_of_two(int64_t budget, tc_mem_pool **p, tc_store **a, tc_store **b, char *dir2) {
  tr_err err;
  snprintf(dir2, 320, "%s2", s_dir);
  cr_assert_not_null(*p = tc_mem_pool_new(budget));
  *a = tf_store(s_dir);
  *b = tf_store(dir2);
  cr_assert_eq(tc_store_share_memory(*a, *p, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_store_share_memory(*b, *p, &err), TR_OK, "%s", err.msg);
  tc_store_set_writeback(*a, -1);
  tc_store_set_writeback(*b, -1);
}

/* Stores sharing a pool (a worker's databases) keep their chunks in
** memory within its one budget, not one budget each: a put to one store
** makes room from the other's copies that are also in files once its own
** are gone; chunks held in memory only are never let go, and a put that
** still does not fit goes to its file at once.  Each store's chunks read
** back, and the pool outlives its stores. */
Test(storemem, stores_sharing_a_pool_keep_to_its_one_budget) {
  char dir2[320];
  tc_mem_pool *p;
  tc_store *a, *b;
  s_pool_of_two(1000, &p, &a, &b, dir2);
  int64_t budget;
  tc_store_budgets(b, &budget, NULL);
  cr_assert_eq(budget, 1000, "a store in a pool has the pool's budget");
  s_put(a, 1, 100, 1, TC_KEEP_FILE); /* 400 bytes each: files, copies in memory */
  s_put(a, 2, 100, 2, TC_KEEP_FILE);
  cr_assert_eq(s_held(a), 800);
  s_put(b, 3, 100, 3, TC_KEEP_BACKGROUND); /* b has no copy to let go: a's oldest goes */
  cr_assert_eq(s_held(a), 400);
  cr_assert_eq(s_held(b), 400);
  s_put(b, 4, 100, 4, TC_KEEP_BACKGROUND); /* and a's last */
  cr_assert_eq(s_held(a), 0);
  cr_assert_eq(s_held(b), 800);
  s_put(a, 5, 100, 5, TC_KEEP_BACKGROUND); /* only b's unwritten chunks left: a's file at once */
  cr_assert_eq(s_held(a) + s_held(b), 800);
  cr_assert_eq(s_unwritten(b), 800);
  cr_assert_eq(s_unwritten(a), 0);
  for (uint64_t id = 1; id <= 5; id++) s_expect(id == 3 || id == 4 ? b : a, id, 100, (unsigned)id);
  cr_assert_leq(s_held(a) + s_held(b), 1000);
  /* A store closed gives its share back: the other one's next put fits
  ** in memory. */
  tc_store_close(&b);
  s_put(a, 6, 100, 6, TC_KEEP_BACKGROUND);
  cr_assert_eq(s_unwritten(a), 400);
  tc_store_close(&a);
  tc_mem_pool_free(&p);
  cr_assert_null(p);
  a = tf_store(s_dir);
  b = tf_store(dir2);
  for (uint64_t id = 1; id <= 6; id++) s_expect(id == 3 || id == 4 ? b : a, id, 100, (unsigned)id);
  tc_store_close(&a);
  tc_store_close(&b);
}

/* Holds another store's lock to read, 0.3 ms at a time with short gaps,
** until told to stop: a store busy the way its writer makes it, which
** takes its lock for a look at its table on every put. */
static atomic_int s_stop, s_holding;
static void *s_reader(void *arg) {
  tc_store *o = arg;
  struct timespec hold = {0, 300000}, gap = {0, 100000};
  while (!atomic_load(&s_stop)) {
    pthread_rwlock_rdlock(&o->lock);
    atomic_store(&s_holding, 1);
    nanosleep(&hold, NULL);
    pthread_rwlock_unlock(&o->lock);
    nanosleep(&gap, NULL);
  }
  return NULL;
}

/* A put that makes room from another store in the pool gets it while
** that store is busy being read: the other's copies also in files are
** let go, and the new chunk is held in memory, not sent to its file
** because its lock was held at the moment it looked.  (This was how the
** pool test above failed now and then.) */
Test(storemem, room_is_made_from_a_store_being_read) {
  char dir2[320];
  tc_mem_pool *p;
  tc_store *a, *b;
  s_pool_of_two(4000, &p, &a, &b, dir2);
  for (uint64_t id = 1; id <= 10; id++) s_put(a, id, 100, (unsigned)id, TC_KEEP_FILE);
  cr_assert_eq(s_held(a), 4000);
  pthread_t t;
  atomic_store(&s_stop, 0);
  atomic_store(&s_holding, 0);
  cr_assert_eq(pthread_create(&t, NULL, s_reader, a), 0);
  while (!atomic_load(&s_holding)) sched_yield();
  for (uint64_t id = 11; id <= 20; id++) {
    s_put(b, id, 100, (unsigned)id, TC_KEEP_BACKGROUND);
    cr_assert_eq(s_unwritten(b), (int64_t)(id - 10) * 400, "chunk %llu went to its file",
                 (unsigned long long)id);
  }
  atomic_store(&s_stop, 1);
  pthread_join(t, NULL);
  cr_assert_eq(s_held(a), 0);
  cr_assert_eq(s_held(b), 4000);
  for (uint64_t id = 1; id <= 20; id++) s_expect(id > 10 ? b : a, id, 100, (unsigned)id);
  tc_store_close(&a);
  tc_store_close(&b);
  tc_mem_pool_free(&p);
}
