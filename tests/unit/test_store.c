/*
** tests/unit/test_store.c - distributed storage in catalog/: a worker's
** chunk store (put/get/stat/sync/drop/keep, index rebuilt on reopen,
** damaged and leftover files, locking, threads) and the catalog's placed
** tensors (sites, chunk locations, replacing and dropping, settings).
*/
#include "config.h"
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>
#include "catalog/catalog.h"
#include "catalog/chunkfile.h"
#include "catalog/store_int.h"
#include "tests/unit/fixture.h"

/* Puts from a copy of data (file or scratch) and gets into a buffer, over
** the store's blob calls, as the tests' shorthand. */
static int s_put_copy(tc_store *s, uint64_t id, tr_dtype dt, const void *data, size_t nbytes,
                      tc_keep keep, uint64_t checksum, uint64_t *sum, tr_err *err) {
  tr_blob *b = tr_blob_new(nbytes);
  if (!b) return tr_seterr(err, TR_ENOMEM, "out of memory");
  if (nbytes) memcpy(tr_blob_data(b), data, nbytes);
  int rc = tc_store_put_blob(s, id, dt, b, keep, checksum, sum, err);
  tr_blob_unref(&b);
  return rc;
}

static int st_put(tc_store *s, uint64_t id, tr_dtype dt, const void *data, size_t nbytes,
                  uint64_t checksum, uint64_t *sum, tr_err *err) {
  return s_put_copy(s, id, dt, data, nbytes, TC_KEEP_FILE, checksum, sum, err);
}

static int st_put_scratch(tc_store *s, uint64_t id, tr_dtype dt, const void *data, size_t nbytes,
                          uint64_t checksum, uint64_t *sum, tr_err *err) {
  return s_put_copy(s, id, dt, data, nbytes, TC_KEEP_SCRATCH, checksum, sum, err);
}

static int st_get(tc_store *s, uint64_t id, void *buf, size_t nbytes, tr_err *err) {
  tr_blob *b = NULL;
  int rc = tc_store_get_blob(s, id, nbytes, &b, err);
  if (!rc && nbytes) memcpy(buf, tr_blob_data(b), nbytes);
  tr_blob_unref(&b);
  return rc;
}

/* ---- fixtures ------------------------------------------------------------ */

static char s_dir[300]; /* the store or database directory, in the scratch one */

static void s_setup(void) {
  tf_setup();
  snprintf(s_dir, sizeof s_dir, "%s", tf_path("d"));
}

TestSuite(store, .init = s_setup, .fini = tf_teardown);
TestSuite(placed, .init = s_setup, .fini = tf_teardown);

/* ---- store helpers ------------------------------------------------------- */

/* n floats derived from seed. */
static void s_data(float *v, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) v[i] = (float)(seed * 1000u + i) * 0.25f;
}

/* Put n floats of seed under id; returns the checksum. */
static uint64_t s_put(tc_store *s, uint64_t id, size_t n, unsigned seed) {
  float v[256];
  uint64_t sum = 0;
  tr_err err;
  cr_assert(n <= 256);
  s_data(v, n, seed);
  cr_assert_eq(st_put(s, id, TR_F32, v, n * 4, 0, &sum, &err), TR_OK,
               "%s", err.msg);
  cr_assert_eq(sum, (uint64_t)XXH3_64bits(v, n * 4));
  return sum;
}

/* Get id and compare with n floats of seed. */
static void s_expect(tc_store *s, uint64_t id, size_t n, unsigned seed) {
  float want[256], got[256];
  tr_err err;
  s_data(want, n, seed);
  cr_assert_eq(st_get(s, id, got, n * 4, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(memcmp(got, want, n * 4), 0, "chunk %016llx differs",
               (unsigned long long)id);
}

/* Whether the store directory holds name. */
static int s_exists(const char *name) {
  struct stat st;
  return stat(tf_path("d/%s", name), &st) == 0;
}

/* Flip one byte of a file at offset off. */
static void s_flip(const char *name, off_t off) {
  unsigned char c;
  int fd = open(tf_path("d/%s", name), O_RDWR);
  cr_assert(fd >= 0);
  cr_assert_eq(pread(fd, &c, 1, off), 1);
  c ^= 0x40;
  cr_assert_eq(pwrite(fd, &c, 1, off), 1);
  close(fd);
}

/* ---- store --------------------------------------------------------------- */

Test(store, put_get_stat_usage) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  tr_dtype dt = TR_F64;
  uint64_t nb = 0, sum = 0;
  int64_t chunks = -1, bytes = -1;
  float buf[16];
  tc_store_usage(s, &chunks, &bytes);
  cr_assert_eq(chunks, 0);
  cr_assert_eq(bytes, 0);
  uint64_t s1 = s_put(s, 0x1234abcdull, 10, 1);
  s_put(s, 0xfedcba9876543210ull, 3, 2);
  cr_assert_eq(tc_store_stat(s, 0x1234abcdull, &dt, &nb, &sum), TR_OK);
  cr_assert_eq(dt, TR_F32);
  cr_assert_eq(nb, 40);
  cr_assert_eq(sum, s1);
  s_expect(s, 0x1234abcdull, 10, 1);
  s_expect(s, 0xfedcba9876543210ull, 3, 2);
  cr_assert(s_exists("000000001234abcd.chk"));
  cr_assert(s_exists("fedcba9876543210.chk"));
  cr_assert_eq(tf_count(s_dir, "", ".tmp"), 0);
  tc_store_usage(s, &chunks, &bytes);
  cr_assert_eq(chunks, 2);
  cr_assert_eq(bytes, 52);
  /* Absent ids, wrong sizes, id 0. */
  cr_assert_eq(tc_store_stat(s, 77, NULL, NULL, NULL), TR_ENOTFOUND);
  cr_assert_eq(st_get(s, 77, buf, 4, &err), TR_ENOTFOUND);
  cr_assert_eq(st_get(s, 0x1234abcdull, buf, 36, &err), TR_EINVAL);
  cr_assert_eq(st_put(s, 0, TR_F32, buf, 4, 0, NULL, &err), TR_EINVAL);
  cr_assert_eq(st_put(s, 5, TR_F64, buf, 12, 0, NULL, &err), TR_EINVAL);
  tc_store_close(&s);
  cr_assert_null(s);
  tc_store_close(&s);
}

Test(store, reput_replaces) {
  tc_store *s = tf_store(s_dir);
  int64_t chunks, bytes;
  s_put(s, 42, 8, 1);
  uint64_t s2 = s_put(s, 42, 4, 2);
  uint64_t sum = 0, nb = 0;
  cr_assert_eq(tc_store_stat(s, 42, NULL, &nb, &sum), TR_OK);
  cr_assert_eq(nb, 16);
  cr_assert_eq(sum, s2);
  s_expect(s, 42, 4, 2);
  tc_store_usage(s, &chunks, &bytes);
  cr_assert_eq(chunks, 1);
  cr_assert_eq(bytes, 16);
  tc_store_close(&s);
}

/* tc_checksum (AVX2 where the CPU has it) gives the library's XXH3_64bits
** for every length class XXH3 treats apart (0, 1-3, 4-8, 9-16, 17-128,
** 129-240, then stripes and blocks of 1 KiB) and any alignment, so chunk
** files and replicas made on machines with and without AVX2 agree. */
Test(store, checksum_is_the_library_xxh3_at_every_length) {
  enum { N = (1 << 20) + 64 };
  unsigned char *buf = malloc(N);
  cr_assert(buf);
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (size_t i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = (unsigned char)x;
  }
  static const size_t len[] = {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024,
                               1025, 4096 + 7, 65536, (1 << 20) - 1, 1 << 20};
  for (size_t a = 0; a < 8; a++)
    for (size_t i = 0; i < sizeof len / sizeof len[0]; i++)
      cr_assert_eq(tc_checksum(buf + a, len[i]), (uint64_t)XXH3_64bits(buf + a, len[i]),
                   "length %zu at offset %zu", len[i], a);
  free(buf);
}

Test(store, checksum_mismatch_on_put_is_rejected) {
  tc_store *s = tf_store(s_dir);
  float v[8];
  uint64_t sum = 0;
  tr_err err;
  s_data(v, 8, 3);
  uint64_t good = (uint64_t)XXH3_64bits(v, sizeof v);
  cr_assert_eq(st_put(s, 0xabcull, TR_F32, v, sizeof v, good ^ 1, &sum,
                            &err), TR_ECORRUPT);
  cr_assert_str_eq(err.msg, "chunk 0000000000000abc: checksum mismatch");
  cr_assert_eq(tc_store_stat(s, 0xabcull, NULL, NULL, NULL), TR_ENOTFOUND);
  cr_assert_eq(tf_count(s_dir, "", ".chk"), 0);
  cr_assert_eq(tf_count(s_dir, "", ".tmp"), 0);
  /* The right checksum is accepted. */
  cr_assert_eq(st_put(s, 0xabcull, TR_F32, v, sizeof v, good, &sum,
                            &err), TR_OK, "%s", err.msg);
  cr_assert_eq(sum, good);
  s_expect(s, 0xabcull, 8, 3);
  tc_store_close(&s);
}

Test(store, sync) {
  tc_store *s = tf_store(s_dir);
  uint64_t ids[] = {11, 12};
  tr_err err;
  s_put(s, 11, 4, 1);
  s_put(s, 12, 4, 2);
  cr_assert_eq(tc_store_sync(s, ids, 2, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_store_sync(s, NULL, 0, &err), TR_OK, "%s", err.msg);
  uint64_t missing[] = {11, 13};
  cr_assert_eq(tc_store_sync(s, missing, 2, &err), TR_ENOTFOUND);
  cr_assert(strstr(err.msg, "000000000000000d") != NULL, "%s", err.msg);
  tc_store_close(&s);
}

Test(store, drop_and_list) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  int64_t chunks, bytes, nheld = -1;
  tc_stored *held = NULL;
  for (uint64_t id = 1; id <= 6; id++) s_put(s, id, 2 * id, (unsigned)id);
  uint64_t drop[] = {2, 99};
  cr_assert_eq(tc_store_drop(s, drop, 2, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_store_stat(s, 2, NULL, NULL, NULL), TR_ENOTFOUND);
  cr_assert_not(s_exists("0000000000000002.chk"));
  tc_store_usage(s, &chunks, &bytes);
  cr_assert_eq(chunks, 5);
  cr_assert_eq(bytes, 4 * 2 * (1 + 3 + 4 + 5 + 6));
  /* The list says what is held: ids, sizes, checksums, types. */
  cr_assert_eq(tc_store_list(s, &held, &nheld, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(nheld, 5);
  for (int64_t i = 0; i < nheld; i++) {
    uint64_t nb, sum;
    tr_dtype dt;
    cr_assert(held[i].id >= 1 && held[i].id <= 6 && held[i].id != 2);
    cr_assert_eq(tc_store_stat(s, held[i].id, &dt, &nb, &sum), TR_OK);
    cr_assert_eq(held[i].nbytes, nb);
    cr_assert_eq(held[i].nbytes, 4 * 2 * held[i].id);
    cr_assert_eq(held[i].sum, sum);
    cr_assert_eq(held[i].dtype, dt);
  }
  free(held);
  uint64_t rest[] = {1, 3, 4, 5, 6};
  cr_assert_eq(tc_store_drop(s, rest, 5, &err), TR_OK);
  cr_assert_eq(tf_count(s_dir, "", ".chk"), 0);
  cr_assert_eq(tc_store_list(s, &held, &nheld, &err), TR_OK);
  cr_assert_eq(nheld, 0);
  free(held);
  tc_store_close(&s);
}

/* Id 0 marks an empty slot in the index: asking for it must not find one
** (a stat that succeeds, a drop that corrupts the count). */
Test(store, chunk_id_zero_is_never_held) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  int64_t chunks, bytes;
  float buf[4];
  for (uint64_t id = 1; id <= 3; id++) s_put(s, id, 2, (unsigned)id);
  cr_assert_eq(tc_store_stat(s, 0, NULL, NULL, NULL), TR_ENOTFOUND);
  cr_assert_eq(st_get(s, 0, buf, sizeof buf, &err), TR_ENOTFOUND);
  uint64_t zero[] = {0};
  cr_assert_eq(tc_store_drop(s, zero, 1, &err), TR_OK, "%s", err.msg);
  tc_store_usage(s, &chunks, &bytes);
  cr_assert_eq(chunks, 3);
  cr_assert_eq(bytes, 3 * 4 * 2);
  for (uint64_t id = 1; id <= 3; id++) cr_assert_eq(tc_store_stat(s, id, NULL, NULL, NULL), TR_OK);
  tc_store_close(&s);
}

/* A file that fails its checksum on a read is set aside at once: named
** *.bad, no longer listed or served, so the worker reports it missing.
** (No memory budget: every read is a read of the file.) */
Test(store, damaged_file_is_set_aside_on_read) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  float buf[16];
  tc_stored *held = NULL;
  int64_t nheld;
  tc_store_set_memory(s, 0);
  s_put(s, 7, 16, 1);
  s_put(s, 8, 16, 2);
  s_flip("0000000000000007.chk", 64 + 3);
  cr_assert_eq(st_get(s, 7, buf, sizeof buf, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "set aside") != NULL, "%s", err.msg);
  cr_assert(s_exists("0000000000000007.chk.bad"));
  cr_assert_not(s_exists("0000000000000007.chk"));
  cr_assert_eq(tc_store_stat(s, 7, NULL, NULL, NULL), TR_ENOTFOUND);
  cr_assert_eq(st_get(s, 7, buf, sizeof buf, &err), TR_ENOTFOUND);
  cr_assert_eq(tc_store_list(s, &held, &nheld, &err), TR_OK);
  cr_assert_eq(nheld, 1);
  cr_assert_eq(held[0].id, 8);
  free(held);
  /* A good copy put again takes its place. */
  s_put(s, 7, 16, 1);
  s_expect(s, 7, 16, 1);
  s_expect(s, 8, 16, 2);
  tc_store_close(&s);
}

/* Chunks move between stores (a worker hands files of the layout before
** per-database stores to the database that lists them). */
Test(store, move_between_stores) {
  tc_store *s = tf_store(s_dir), *t = NULL;
  tr_err err;
  char sub[400];
  int64_t chunks;
  s_put(s, 0x21, 16, 3);
  s_put(s, 0x22, 16, 4);
  snprintf(sub, sizeof sub, "%s/db-1", s_dir);
  cr_assert_eq(tc_store_open(sub, &t, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_store_move(t, s, 0x21, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_store_stat(s, 0x21, NULL, NULL, NULL), TR_ENOTFOUND);
  cr_assert_not(s_exists("0000000000000021.chk"));
  cr_assert_eq(tc_store_move(t, s, 0x21, &err), TR_ENOTFOUND);
  cr_assert_eq(tc_store_move(s, s, 0x22, &err), TR_EINVAL);
  float want[16], got[16];
  s_data(want, 16, 3);
  cr_assert_eq(st_get(t, 0x21, got, sizeof got, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(memcmp(want, got, sizeof got), 0);
  tc_store_usage(t, &chunks, NULL);
  cr_assert_eq(chunks, 1);
  tc_store_usage(s, &chunks, NULL);
  cr_assert_eq(chunks, 1);
  tc_store_close(&t);
  /* The outer store skips the inner one's directory when it reopens. */
  tc_store_close(&s);
  s = tf_store(s_dir);
  tc_store_usage(s, &chunks, NULL);
  cr_assert_eq(chunks, 1);
  cr_assert_eq(tc_store_open(sub, &t, &err), TR_OK, "%s", err.msg);
  tc_store_usage(t, &chunks, NULL);
  cr_assert_eq(chunks, 1);
  tc_store_close(&t);
  tc_store_close(&s);
}

/* Many random ids (as chunk ids are), every other one dropped: lookups of
** the rest must survive the removals shifting entries in the index. */
Test(store, index_survives_many_removals) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  float v[1] = {1.0f};
  enum { N = 2000 };
  static uint64_t ids[N], odd[N / 2];
  uint64_t x = 88172645463325252ull; /* xorshift64 */
  for (int i = 0; i < N; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ids[i] = x;
    cr_assert_eq(st_put(s, ids[i], TR_F32, v, 4, 0, NULL, &err), TR_OK,
                 "%s", err.msg);
    if (i % 2) odd[i / 2] = ids[i];
  }
  cr_assert_eq(tc_store_drop(s, odd, N / 2, &err), TR_OK, "%s", err.msg);
  for (int i = 0; i < N; i++)
    cr_assert_eq(tc_store_stat(s, ids[i], NULL, NULL, NULL),
                 i % 2 ? TR_ENOTFOUND : TR_OK, "id %d", i);
  int64_t chunks;
  tc_store_usage(s, &chunks, NULL);
  cr_assert_eq(chunks, N / 2);
  tc_store_close(&s);
}

/* ---- the memo of a clean close (storefiles.c) ----------------------------- */

static int64_t s_ns_of(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

/* Wait until the kernel's file clock has passed every change to the store
** directory's files (a file's times are a clock tick, not a nanosecond:
** the memo vouches only for files older than itself).  Polls a probe file,
** with a deadline. */
static void s_age_files(void) {
  int64_t newest = 0;
  DIR *d = opendir(s_dir);
  struct dirent *de;
  struct stat st;
  cr_assert(d);
  while ((de = readdir(d)) != NULL)
    if (fstatat(dirfd(d), de->d_name, &st, 0) == 0 && s_ns_of(st.st_ctim) > newest)
      newest = s_ns_of(st.st_ctim);
  closedir(d);
  for (double end = tr_now() + 5.0;;) {
    tf_write(tf_path("probe"), "x", 1);
    cr_assert_eq(stat(tf_path("probe"), &st), 0);
    if (s_ns_of(st.st_ctim) > newest) return;
    cr_assert(tr_now() < end, "the file clock did not move in 5 s");
    sched_yield();
  }
}

/* The store holds chunks 7 and 8 (16 floats of seeds 1 and 2), closed
** after they aged. */
static void s_closed_with_two(void) {
  tc_store *s = tf_store(s_dir);
  s_put(s, 7, 16, 1);
  s_put(s, 8, 16, 2);
  s_age_files();
  tc_store_close(&s);
}

static void s_open_reads(tc_store *s, int64_t vouched, int64_t verified) {
  tc_store_files f;
  tc_store_file_counts(s, &f);
  cr_assert_eq(f.vouched, vouched, "files indexed from the memo: %lld, want %lld",
               (long long)f.vouched, (long long)vouched);
  cr_assert_eq(f.verified_bytes, verified, "bytes verified at open: %lld, want %lld",
               (long long)f.verified_bytes, (long long)verified);
}

Test(store, reopen_rebuilds_index_and_removes_temporaries) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  double d[3] = {1.5, -2.5, 3.25}, got[3];
  uint64_t sums[4], sum;
  tr_dtype dt;
  uint64_t nb;
  for (unsigned i = 0; i < 4; i++) sums[i] = s_put(s, 100 + i, 5 + i, i);
  cr_assert_eq(st_put(s, 200, TR_F64, d, sizeof d, 0, &sum, &err),
               TR_OK, "%s", err.msg);
  tc_store_close(&s);
  /* Leftovers of a crash, and a file that is not ours. */
  tf_write(tf_path("d/0000000000000064.7.tmp"), "partial", 7);
  tf_write(tf_path("d/notes.txt"), "", 0);
  s = tf_store(s_dir);
  cr_assert_not(s_exists("0000000000000064.7.tmp"));
  cr_assert(s_exists("notes.txt"));
  int64_t chunks, bytes;
  tc_store_usage(s, &chunks, &bytes);
  cr_assert_eq(chunks, 5);
  cr_assert_eq(bytes, 4 * (5 + 6 + 7 + 8) + 24);
  for (unsigned i = 0; i < 4; i++) {
    cr_assert_eq(tc_store_stat(s, 100 + i, &dt, &nb, &sum), TR_OK);
    cr_assert_eq(dt, TR_F32);
    cr_assert_eq(nb, 4 * (5 + i));
    cr_assert_eq(sum, sums[i]);
    s_expect(s, 100 + i, 5 + i, i);
  }
  cr_assert_eq(tc_store_stat(s, 200, &dt, &nb, NULL), TR_OK);
  cr_assert_eq(dt, TR_F64);
  cr_assert_eq(nb, 24);
  cr_assert_eq(st_get(s, 200, got, sizeof got, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(memcmp(got, d, sizeof d), 0);
  tc_store_close(&s);
}

Test(store, corrupted_file_is_not_served_after_reopen) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  float buf[16];
  s_put(s, 7, 16, 1);
  s_put(s, 8, 16, 2);
  s_put(s, 9, 16, 3);
  s_put(s, 10, 16, 4);
  s_age_files(); /* the close's memo would vouch for them all, unchanged */
  tc_store_close(&s);
  s_flip("0000000000000007.chk", 64 + 10); /* payload */
  s_flip("0000000000000009.chk", 20);      /* header: size field */
  s_flip("000000000000000a.chk", 64 + 10); /* written twice: the same bytes, */
  s_flip("000000000000000a.chk", 64 + 10); /* but written */
  s = tf_store(s_dir);
  s_open_reads(s, 1, 16 * 4); /* 8 from the memo; 10 read and verified */
  s_expect(s, 10, 16, 4);
  cr_assert_eq(tc_store_stat(s, 7, NULL, NULL, NULL), TR_ENOTFOUND);
  cr_assert_eq(st_get(s, 7, buf, sizeof buf, &err), TR_ENOTFOUND);
  cr_assert_eq(tc_store_stat(s, 9, NULL, NULL, NULL), TR_ENOTFOUND);
  cr_assert(s_exists("0000000000000007.chk.bad"));
  cr_assert(s_exists("0000000000000009.chk.bad"));
  cr_assert_not(s_exists("0000000000000007.chk"));
  s_expect(s, 8, 16, 2);
  int64_t chunks;
  tc_store_usage(s, &chunks, NULL);
  cr_assert_eq(chunks, 2);
  tc_store_close(&s);
  /* Set aside for good: a further reopen does not bring them back. */
  s = tf_store(s_dir);
  cr_assert_eq(tc_store_stat(s, 7, NULL, NULL, NULL), TR_ENOTFOUND);
  tc_store_close(&s);
}

Test(store, reopen_after_a_clean_close_reads_no_file) {
  tc_store *s = tf_store(s_dir);
  s_open_reads(s, 0, 0);
  s_put(s, 7, 16, 1);
  s_put(s, 8, 32, 2);
  s_put(s, 9, 16, 3);
  tc_store_files f;
  tc_store_file_counts(s, &f);
  cr_assert_eq(f.written, 3);
  s_age_files();
  tc_store_close(&s);
  cr_assert(s_exists("VERIFIED"));
  s = tf_store(s_dir);
  s_open_reads(s, 3, 0);
  tc_store_file_counts(s, &f);
  cr_assert_eq(f.written, 0);
  s_expect(s, 7, 16, 1); /* each read still checks the file in full */
  s_expect(s, 8, 32, 2);
  s_expect(s, 9, 16, 3);
  tc_store_close(&s);
  s = tf_store(s_dir); /* vouched for again by the memo written over it */
  s_open_reads(s, 3, 0);
  tc_store_close(&s);
}

Test(store, without_an_intact_memo_every_file_is_verified) {
  tc_store *s;
  s_closed_with_two();
  /* the memo cut short by one byte, then one byte of it changed */
  static unsigned char memo[4096];
  int fd = open(tf_path("d/VERIFIED"), O_RDONLY);
  cr_assert(fd >= 0);
  ssize_t n = read(fd, memo, sizeof memo);
  close(fd);
  cr_assert(n > 8 && n < (ssize_t)sizeof memo);
  ci_memo *m;
  cr_assert_eq(ci_memo_decode(memo, (size_t)n, &m), 2);
  cr_assert(m[0].id == 7 && m[1].id == 8 && m[0].size == 64 + 16 * 4);
  free(m);
  for (int how = 0; how < 2; how++) {
    if (how) memo[30] ^= 1;
    size_t len = how ? (size_t)n : (size_t)n - 1;
    cr_assert_eq(ci_memo_decode(memo, len, &m), -1);
    cr_assert_null(m);
    tf_write(tf_path("d/VERIFIED"), memo, len);
    s_age_files();
    s = tf_store(s_dir);
    s_open_reads(s, 0, 2 * 16 * 4);
    s_expect(s, 7, 16, 1);
    s_expect(s, 8, 16, 2);
    cr_assert_eq(unlink(tf_path("d/VERIFIED")), 0); /* not the memo this close writes */
    s_age_files();
    tc_store_close(&s);
    s = tf_store(s_dir);
    s_open_reads(s, 2, 0);
    tc_store_close(&s);
    fd = open(tf_path("d/VERIFIED"), O_RDONLY);
    cr_assert(fd >= 0);
    cr_assert_eq(read(fd, memo, sizeof memo), n);
    close(fd);
  }
}

Test(store, a_store_never_closed_leaves_the_memo_of_its_last_close) {
  tc_store *s;
  s_closed_with_two();
  /* a worker that dies: 7 put again and 20 made, and no close */
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    tr_err err;
    tc_store *c = NULL;
    float v[16];
    uint64_t sum;
    int ok = tc_store_open(s_dir, &c, &err) == TR_OK;
    s_data(v, 16, 4);
    ok = ok && st_put(c, 7, TR_F32, v, sizeof v, 0, &sum, &err) == TR_OK;
    s_data(v, 16, 5);
    ok = ok && st_put(c, 20, TR_F32, v, sizeof v, 0, &sum, &err) == TR_OK;
    _exit(ok ? 0 : 1);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  s = tf_store(s_dir);
  s_open_reads(s, 1, 2 * 16 * 4); /* 8 as the memo saw it; 7 and 20 read */
  s_expect(s, 7, 16, 4);
  s_expect(s, 8, 16, 2);
  s_expect(s, 20, 16, 5);
  tc_store_close(&s);
}

Test(store, damage_while_open_fails_get) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  float buf[16];
  tc_store_set_memory(s, 0);
  s_put(s, 7, 16, 1);
  s_flip("0000000000000007.chk", 64 + 3);
  cr_assert_eq(st_get(s, 7, buf, sizeof buf, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "chunk 0000000000000007") != NULL, "%s", err.msg);
  tc_store_close(&s);
}

Test(store, second_open_is_locked_out) {
  tc_store *s = tf_store(s_dir), *t = NULL;
  tr_err err;
  s_put(s, 7, 16, 1);
  cr_assert_eq(tc_store_open(s_dir, &t, &err), TR_EIO);
  cr_assert_null(t);
  cr_assert(strstr(err.msg, "in use") != NULL, "%s", err.msg);
  /* nor did it write in the store that is not its own (a memo of none) */
  cr_assert_not(s_exists("VERIFIED"));
  tc_store_close(&s);
  cr_assert(s_exists("VERIFIED"));
  t = tf_store(s_dir);
  tc_store_close(&t);
}

/* ---- recycled chunk files ------------------------------------------------ */

static tc_store *s_shared; /* the store a test's threads share */

enum { S_BIG = 1 << 18 }; /* floats in a chunk big enough to be recycled */

/* Put n floats of seed under id (n up to S_BIG). */
static void s_put_big(tc_store *s, uint64_t id, size_t n, unsigned seed) {
  static float v[S_BIG];
  tr_err err;
  s_data(v, n, seed);
  cr_assert_eq(st_put(s, id, TR_F32, v, n * 4, 0, NULL, &err), TR_OK,
               "%s", err.msg);
}

static void s_expect_big(tc_store *s, uint64_t id, size_t n, unsigned seed) {
  static float want[S_BIG], got[S_BIG];
  tr_err err;
  s_data(want, n, seed);
  cr_assert_eq(st_get(s, id, got, n * 4, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(memcmp(got, want, n * 4), 0, "chunk %016llx differs",
               (unsigned long long)id);
}

/* Inode and length of a file in the store. */
static void s_inode(const char *name, ino_t *ino, off_t *size) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", s_dir, name);
  cr_assert_eq(stat(p, &st), 0, "%s", name);
  *ino = st.st_ino;
  *size = st.st_size;
}

Test(store, dropped_files_are_overwritten_by_later_puts) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  ino_t ino1, ino;
  off_t size;
  s_put_big(s, 1, S_BIG, 1);
  s_inode("0000000000000001.chk", &ino1, &size);
  cr_assert_eq(size, 64 + 4 * S_BIG);
  uint64_t id = 1;
  cr_assert_eq(tc_store_drop(s, &id, 1, &err), TR_OK, "%s", err.msg);
  cr_assert_not(s_exists("0000000000000001.chk"));
  cr_assert_eq(tf_count(s_dir, "", ".free"), 1);
  /* The next put of the same size takes that file. */
  s_put_big(s, 2, S_BIG, 2);
  s_inode("0000000000000002.chk", &ino, &size);
  cr_assert_eq(ino, ino1);
  cr_assert_eq(size, 64 + 4 * S_BIG);
  cr_assert_eq(tf_count(s_dir, "", ".free"), 0);
  s_expect_big(s, 2, S_BIG, 2);
  /* A smaller chunk in a recycled file: the file is cut to its length
  ** (else it would not verify on reopen). */
  id = 2;
  cr_assert_eq(tc_store_drop(s, &id, 1, &err), TR_OK);
  cr_assert_eq(tf_count(s_dir, "", ".free"), 1);
  /* Chunks much smaller than the file do not take it (they would throw
  ** its pages away), whatever their size, small or not. */
  s_put(s, 5, 16, 5);
  s_put_big(s, 6, S_BIG / 3, 6);
  cr_assert_eq(tf_count(s_dir, "", ".free"), 1);
  s_put_big(s, 3, S_BIG * 2 / 3, 3);
  s_inode("0000000000000003.chk", &ino, &size);
  cr_assert_eq(ino, ino1);
  cr_assert_eq(size, 64 + 4 * (S_BIG * 2 / 3));
  cr_assert_eq(tf_count(s_dir, "", ".free"), 0);
  /* A chunk with no recycled file left gets a new one. */
  s_put_big(s, 4, S_BIG, 4);
  s_inode("0000000000000004.chk", &ino, &size);
  cr_assert_neq(ino, ino1);
  tc_store_close(&s);
  s = tf_store(s_dir);
  s_expect_big(s, 3, S_BIG * 2 / 3, 3);
  s_expect_big(s, 4, S_BIG, 4);
  s_expect_big(s, 6, S_BIG / 3, 6);
  s_expect(s, 5, 16, 5);
  int64_t chunks;
  tc_store_usage(s, &chunks, NULL);
  cr_assert_eq(chunks, 4);
  tc_store_close(&s);
}

/* Whether the file system of the store directory takes O_DIRECT. */
static int s_direct_ok(void) {
  int fd = open(tf_path("d/probe"), O_WRONLY | O_CREAT | O_DIRECT, 0600);
  if (fd >= 0) close(fd);
  unlink(tf_path("d/probe"));
  return fd >= 0;
}

Test(store, big_chunks_are_written_past_the_page_cache) {
  tc_store *s = tf_store(s_dir);
  if (!s_direct_ok()) {
    tc_store_close(&s);
    cr_skip_test("the scratch directory's file system refuses O_DIRECT");
  }
  /* sizes that end inside a page, and a new file and a recycled one */
  s_put_big(s, 1, S_BIG - 3, 1);
  s_put_big(s, 2, S_BIG, 2);
  cr_assert_eq(tf_cached_pages(tf_path("d/0000000000000001.chk")), 0);
  cr_assert_eq(tf_cached_pages(tf_path("d/0000000000000002.chk")), 0);
  uint64_t id = 2;
  tr_err err;
  cr_assert_eq(tc_store_drop(s, &id, 1, &err), TR_OK, "%s", err.msg);
  s_put_big(s, 3, S_BIG * 2 / 3 + 1, 3);
  cr_assert_eq(tf_cached_pages(tf_path("d/0000000000000003.chk")), 0);
  ino_t ino;
  off_t size;
  s_inode("0000000000000001.chk", &ino, &size);
  cr_assert_eq(size, 64 + 4 * (S_BIG - 3));
  s_inode("0000000000000003.chk", &ino, &size);
  cr_assert_eq(size, 64 + 4 * (S_BIG * 2 / 3 + 1));
  /* small chunks still go through the page cache */
  s_put(s, 4, 16, 4);
  cr_assert_eq(tf_cached_pages(tf_path("d/0000000000000004.chk")), 1);
  tc_store_close(&s);
  s = tf_store(s_dir); /* read back from the files, every check made */
  s_expect_big(s, 1, S_BIG - 3, 1);
  s_expect_big(s, 3, S_BIG * 2 / 3 + 1, 3);
  s_expect(s, 4, 16, 4);
  tc_store_close(&s);
}

Test(store, a_chunk_file_o_direct_refuses_is_written_through_the_page_cache) {
  /* a room off the page boundary: O_DIRECT refuses the write (EINVAL), as
  ** a file system without it refuses the open; the same file results */
  enum { N = 1 << 16 };
  char *raw = malloc(2 * TR_PAGE + 64 + 4 * N), *room;
  float *want = malloc(4 * N), *got = malloc(4 * N);
  cr_assert(raw && want && got);
  room = (char *)(((uintptr_t)raw + TR_PAGE - 1) & ~(uintptr_t)(TR_PAGE - 1)) + 64;
  s_data(want, N, 9);
  memcpy(room + 64, want, 4 * N);
  uint64_t sum = tc_checksum(want, 4 * N);
  tr_err err;
  size_t span = (64 + 4 * (size_t)N + TR_PAGE - 1) / TR_PAGE * TR_PAGE;
  cr_assert_eq(mkdir(s_dir, 0700), 0);
  cr_assert_eq(cf_write(tf_path("d/x.chk"), TR_F32, room + 64, 4 * N, sum, room, span, &err), TR_OK,
               "%s", err.msg);
  struct stat st;
  cr_assert_eq(stat(tf_path("d/x.chk"), &st), 0);
  cr_assert_eq(st.st_size, 64 + 4 * N);
  cr_assert_eq(cf_read(tf_path("d/x.chk"), TR_F32, got, 4 * N, sum, "x", &err), TR_OK, "%s", err.msg);
  cr_assert_eq(memcmp(got, want, 4 * N), 0);
  free(raw);
  free(want);
  free(got);
}

Test(store, recycled_files_stay_within_budget_and_go_at_close) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  uint64_t ids[] = {1, 2, 3, 4, 5};
  tc_store_set_recycle(s, (int64_t)(2.5 * 4 * S_BIG));
  for (int i = 0; i < 4; i++) s_put_big(s, ids[i], S_BIG, (unsigned)i);
  s_put(s, 5, 16, 5); /* small files are unlinked, never recycled */
  cr_assert_eq(tc_store_drop(s, ids, 5, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tf_count(s_dir, "", ".chk"), 0);
  cr_assert_eq(tf_count(s_dir, "", ".free"), 2);
  tc_store_set_recycle(s, 0);
  cr_assert_eq(tf_count(s_dir, "", ".free"), 0);
  s_put_big(s, 6, S_BIG, 6);
  uint64_t six = 6;
  cr_assert_eq(tc_store_drop(s, &six, 1, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tf_count(s_dir, "", ".free"), 0);
  /* Kept files are removed when the store closes, and leftovers of a
  ** crash when it opens; neither is ever served. */
  tc_store_set_recycle(s, 1 << 30);
  s_put_big(s, 7, S_BIG, 7);
  uint64_t seven = 7;
  cr_assert_eq(tc_store_drop(s, &seven, 1, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tf_count(s_dir, "", ".free"), 1);
  tc_store_close(&s);
  cr_assert_eq(tf_count(s_dir, "", ".free"), 0);
  tf_write(tf_path("d/0000000000000007.free"), "left over", 9);
  s = tf_store(s_dir);
  cr_assert_eq(tf_count(s_dir, "", ".free"), 0);
  cr_assert_eq(tc_store_stat(s, 7, NULL, NULL, NULL), TR_ENOTFOUND);
  tc_store_close(&s);
}

/* ---- scratch chunks ------------------------------------------------------- */

static void s_put_scratch(tc_store *s, uint64_t id, size_t n, unsigned seed) {
  float v[256];
  uint64_t sum = 0;
  tr_err err;
  s_data(v, n, seed);
  cr_assert_eq(st_put_scratch(s, id, TR_F32, v, n * 4, 0, &sum, &err),
               TR_OK, "%s", err.msg);
  cr_assert_eq(sum, (uint64_t)XXH3_64bits(v, n * 4));
}

Test(store, scratch_chunks_are_held_in_memory) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  tr_dtype dt;
  uint64_t nb, sum;
  int64_t chunks, bytes;
  s_put_scratch(s, 1, 100, 1);
  s_put_scratch(s, 2, 50, 2);
  cr_assert_eq(tf_count(s_dir, "", ".chk"), 0);
  s_expect(s, 1, 100, 1);
  cr_assert_eq(tc_store_stat(s, 2, &dt, &nb, &sum), TR_OK);
  cr_assert_eq(nb, 200);
  tc_store_usage(s, &chunks, &bytes);
  cr_assert_eq(chunks, 2);
  cr_assert_eq(bytes, 600);
  /* Only committed chunks are made durable: asking for a scratch one is a
  ** coordinator's bug, reported rather than ignored. */
  uint64_t one = 1;
  cr_assert_eq(tc_store_sync(s, &one, 1, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "scratch") != NULL, "%s", err.msg);
  /* A checksum that does not match is refused, and nothing is kept. */
  float v[4] = {1, 2, 3, 4};
  cr_assert_eq(st_put_scratch(s, 3, TR_F32, v, sizeof v, 12345, NULL,
                                    &err), TR_ECORRUPT);
  cr_assert_eq(tc_store_stat(s, 3, NULL, NULL, NULL), TR_ENOTFOUND);
  /* Replacing: a file over a scratch chunk and a scratch chunk over a
  ** file each leave only the new one. */
  s_put(s, 1, 10, 11);
  cr_assert_eq(tf_count(s_dir, "", ".chk"), 1);
  s_expect(s, 1, 10, 11);
  cr_assert_eq(tc_store_sync(s, &one, 1, &err), TR_OK, "%s", err.msg);
  s_put_scratch(s, 1, 20, 12);
  cr_assert_eq(tf_count(s_dir, "", ".chk"), 0);
  s_expect(s, 1, 20, 12);
  /* DROP forgets them. */
  uint64_t both[] = {1, 2};
  cr_assert_eq(tc_store_drop(s, both, 2, &err), TR_OK);
  cr_assert_eq(tc_store_stat(s, 1, NULL, NULL, NULL), TR_ENOTFOUND);
  cr_assert_eq(tc_store_stat(s, 2, NULL, NULL, NULL), TR_ENOTFOUND);
  tc_store_usage(s, &chunks, &bytes);
  cr_assert_eq(chunks, 0);
  cr_assert_eq(bytes, 0);
  /* Past the budget they go to files, which a restart finds again; the
  ** ones in memory are gone with the process that held them. */
  tc_store_set_memory(s, 500);
  s_put_scratch(s, 4, 100, 4); /* 400 bytes: memory */
  s_put_scratch(s, 5, 100, 5); /* would pass 500: a file */
  cr_assert_eq(tf_count(s_dir, "", ".chk"), 1);
  cr_assert(s_exists("0000000000000005.chk"));
  uint64_t five = 5, four = 4;
  cr_assert_eq(tc_store_sync(s, &five, 1, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_store_drop(s, &four, 1, &err), TR_OK);
  s_put_scratch(s, 6, 100, 6); /* room again: memory */
  cr_assert_eq(tf_count(s_dir, "", ".chk"), 1);
  s_expect(s, 6, 100, 6);
  tc_store_close(&s);
  s = tf_store(s_dir);
  cr_assert_eq(tc_store_stat(s, 6, NULL, NULL, NULL), TR_ENOTFOUND);
  s_expect(s, 5, 100, 5);
  tc_store_close(&s);
}

/* A dropped scratch chunk's bytes are released once: not again when the
** store closes.  Many ids, so that removals shift entries of a probe run
** and leave holes where moved entries were. */
Test(store, dropped_scratch_chunks_are_freed_once) {
  tc_store *s = tf_store(s_dir);
  tr_err err;
  enum { N = 500 };
  static uint64_t ids[N];
  for (int i = 0; i < N; i++) {
    ids[i] = (uint64_t)i * 0x9e3779b97f4a7c15ull + 1;
    s_put_scratch(s, ids[i], 4, (unsigned)i);
  }
  cr_assert_eq(tc_store_drop(s, ids, N / 2, &err), TR_OK);
  for (int i = N / 2; i < N; i++) s_expect(s, ids[i], 4, (unsigned)i);
  cr_assert_eq(tc_store_drop(s, ids + N / 2, N - N / 2, &err), TR_OK);
  tc_store_close(&s);
}

/* Threads putting, reading and dropping big chunks: each put takes
** whichever file another thread dropped last, and must read back whole. */
static void *s_recycler(void *arg) {
  unsigned t = (unsigned)(uintptr_t)arg;
  enum { N = S_BIG / 2 };
  float *v = malloc(N * 4), *got = malloc(N * 4);
  tr_err err;
  void *bad = NULL;
  for (unsigned i = 0; i < 40 && !bad; i++) {
    uint64_t id = ((uint64_t)(t + 1) << 32) | (i + 1);
    size_t n = N - (size_t)(i % 3) * 1000; /* sizes differ a little */
    s_data(v, n, t * 100 + i);
    if (st_put(s_shared, id, TR_F32, v, n * 4, 0, NULL, &err))
      bad = (void *)1;
    else if (st_get(s_shared, id, got, n * 4, &err) ||
             memcmp(got, v, n * 4) != 0)
      bad = (void *)2;
    else if (tc_store_drop(s_shared, &id, 1, &err))
      bad = (void *)3;
  }
  free(v);
  free(got);
  return bad;
}

Test(store, concurrent_recycling) {
  pthread_t th[4];
  s_shared = tf_store(s_dir);
  for (unsigned t = 0; t < 4; t++)
    cr_assert_eq(pthread_create(&th[t], NULL, s_recycler,
                                (void *)(uintptr_t)t), 0);
  for (unsigned t = 0; t < 4; t++) {
    void *r;
    pthread_join(th[t], &r);
    cr_assert_null(r, "thread %u failed with %p", t, r);
  }
  int64_t chunks;
  tc_store_usage(s_shared, &chunks, NULL);
  cr_assert_eq(chunks, 0);
  cr_assert_leq(tf_count(s_dir, "", ".free"), 4);
  tc_store_close(&s_shared);
}

/* Threads putting distinct ids, all putting one shared id, and reading. */
enum { S_THREADS = 6, S_PER = 150 };

static void *s_worker(void *arg) {
  unsigned t = (unsigned)(uintptr_t)arg;
  float v[64], got[64];
  tr_err err;
  for (unsigned i = 0; i < S_PER; i++) {
    uint64_t id = ((uint64_t)(t + 1) << 32) | i;
    s_data(v, 64, t * S_PER + i);
    if (st_put(s_shared, id, TR_F32, v, sizeof v, 0, NULL, &err))
      return (void *)1;
    if (st_get(s_shared, id, got, sizeof got, &err) ||
        memcmp(got, v, sizeof v) != 0)
      return (void *)2;
    /* Everyone writes the same 64 values under id 1; any reader must see
    ** a whole, verified chunk. */
    s_data(v, 64, 9999);
    if (st_put(s_shared, 1, TR_F32, v, sizeof v, 0, NULL, &err) ||
        st_get(s_shared, 1, got, sizeof got, &err) ||
        memcmp(got, v, sizeof v) != 0)
      return (void *)3;
  }
  return NULL;
}

Test(store, concurrent_puts) {
  pthread_t th[S_THREADS];
  s_shared = tf_store(s_dir);
  for (unsigned t = 0; t < S_THREADS; t++)
    cr_assert_eq(pthread_create(&th[t], NULL, s_worker,
                                (void *)(uintptr_t)t), 0);
  for (unsigned t = 0; t < S_THREADS; t++) {
    void *r;
    pthread_join(th[t], &r);
    cr_assert_null(r, "thread %u failed with %p", t, r);
  }
  int64_t chunks, bytes;
  tc_store_usage(s_shared, &chunks, &bytes);
  cr_assert_eq(chunks, S_THREADS * S_PER + 1);
  cr_assert_eq(bytes, (S_THREADS * S_PER + 1) * 256);
  cr_assert_eq(tf_count(s_dir, "", ".tmp"), 0);
  tc_store_close(&s_shared);
  s_shared = tf_store(s_dir);
  tc_store_usage(s_shared, &chunks, NULL);
  cr_assert_eq(chunks, S_THREADS * S_PER + 1);
  for (unsigned t = 0; t < S_THREADS; t++)
    for (unsigned i = 0; i < S_PER; i += 37)
      s_expect(s_shared, ((uint64_t)(t + 1) << 32) | i, 64, t * S_PER + i);
  tc_store_close(&s_shared);
}

/* ---- placed tensors ------------------------------------------------------ */

/* A 5x6 f32 tensor in 2x4 chunks: a 3x2 grid whose chunk sizes in bytes
** are, by lin: 32, 16, 32, 16, 16, 8. */
static const uint64_t s_nb[6] = {32, 16, 32, 16, 16, 8};

static tr_tensor s_meta(const char *name) {
  tr_tensor t;
  memset(&t, 0, sizeof t);
  snprintf(t.name, sizeof t.name, "%s", name);
  t.dtype = TR_F32;
  t.rank = 2;
  t.shape[0] = 5;
  t.shape[1] = 6;
  t.chunk[0] = 2;
  t.chunk[1] = 4;
  return t;
}

/* Locations for s_meta: chunk lin has id base + lin, checksum ~id, and
** replicas on sites a and (if b >= 0) b, listed b first. */
static void s_locs(tc_chunkloc *l, uint64_t base, int64_t a, int64_t b) {
  for (int lin = 0; lin < 6; lin++) {
    memset(&l[lin], 0, sizeof l[lin]);
    l[lin].lin = lin;
    l[lin].chunk_id = base + (uint64_t)lin;
    l[lin].nbytes = s_nb[lin];
    l[lin].checksum = ~(base + (uint64_t)lin);
    l[lin].nsites = 0;
    if (b >= 0) l[lin].site[l[lin].nsites++] = b;
    l[lin].site[l[lin].nsites++] = a;
  }
}

/* Check what tc_chunk_locations says against s_locs(base, a, b), a < b. */
static void s_check_locs(tc_db *db, const char *name, uint64_t base,
                         int64_t a, int64_t b) {
  tr_tensor t;
  tc_chunkloc *l = NULL;
  int64_t n = -1;
  tr_err err;
  cr_assert_eq(tc_tensor_get(db, name, &t, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_chunk_locations(db, &t, &l, &n, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(n, 6);
  for (int lin = 0; lin < 6; lin++) {
    cr_assert_eq(l[lin].lin, lin);
    cr_assert_eq(l[lin].chunk_id, base + (uint64_t)lin);
    cr_assert_eq(l[lin].nbytes, s_nb[lin]);
    cr_assert_eq(l[lin].checksum, ~(base + (uint64_t)lin));
    cr_assert_eq(l[lin].nsites, b >= 0 ? 2 : 1);
    cr_assert_eq(l[lin].site[0], a);
    if (b >= 0) cr_assert_eq(l[lin].site[1], b);
  }
  free(l);
}

static int s_has(const uint64_t *v, int64_t n, uint64_t x) {
  for (int64_t i = 0; i < n; i++)
    if (v[i] == x) return 1;
  return 0;
}

Test(placed, sites_add_list_remove) {
  tc_db *db = tf_db(s_dir);
  tr_err err;
  int64_t a = 0, b = 0, again = 0;
  tc_site *v = NULL;
  int n = -1;
  char longep[TC_ENDPOINT_MAX + 1];
  cr_assert_eq(tc_site_list(db, &v, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 0);
  free(v);
  cr_assert_eq(tc_site_add(db, "tcp://w1:5555", &a, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(tc_site_add(db, "tcp://w2:5555", &b, &err), TR_OK, "%s",
               err.msg);
  cr_assert(a > 0 && b > 0 && a != b);
  cr_assert_eq(tc_site_add(db, "tcp://w1:5555", &again, &err), TR_OK);
  cr_assert_eq(again, a);
  cr_assert_eq(tc_site_add(db, "", &again, &err), TR_EINVAL);
  cr_assert_eq(tc_site_add(db, NULL, &again, &err), TR_EINVAL);
  memset(longep, 'x', TC_ENDPOINT_MAX);
  longep[TC_ENDPOINT_MAX] = '\0';
  cr_assert_eq(tc_site_add(db, longep, &again, &err), TR_EINVAL);
  longep[TC_ENDPOINT_MAX - 1] = '\0'; /* 255 characters: fits */
  cr_assert_eq(tc_site_add(db, longep, &again, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_site_remove(db, longep, &err), TR_OK, "%s", err.msg);
  tc_close(&db);
  db = tf_db(s_dir);
  cr_assert_eq(tc_site_list(db, &v, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 2);
  cr_assert_eq(v[0].id, a < b ? a : b);
  cr_assert_str_eq(v[0].endpoint, a < b ? "tcp://w1:5555" : "tcp://w2:5555");
  cr_assert_eq(v[1].id, a < b ? b : a);
  free(v);
  cr_assert_eq(tc_site_remove(db, "tcp://w1:5555", &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(tc_site_remove(db, "tcp://w1:5555", &err), TR_ENOTFOUND);
  cr_assert_eq(tc_site_list(db, &v, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 1);
  cr_assert_eq(v[0].id, b);
  cr_assert_str_eq(v[0].endpoint, "tcp://w2:5555");
  free(v);
  tc_close(&db);
}

Test(placed, commit_and_locations_round_trip) {
  tc_db *db = tf_db(s_dir);
  tr_err err;
  int64_t a, b, nold = -1, bytes = 0;
  tc_chunkloc l[6], shuffled[6];
  tr_tensor t = s_meta("P"), res, got;
  uint64_t *old = (uint64_t *)1;
  cr_assert_eq(tc_site_add(db, "tcp://a", &a, &err), TR_OK);
  cr_assert_eq(tc_site_add(db, "tcp://b", &b, &err), TR_OK);
  cr_assert(a < b);
  s_locs(l, 0x8000000000000100ull, a, b); /* ids above INT64_MAX */
  for (int i = 0; i < 6; i++) shuffled[i] = l[(i * 5 + 2) % 6];
  cr_assert_eq(tc_commit_placed(db, &t, shuffled, 6, &res, &old, &nold, &err),
               TR_OK, "%s", err.msg);
  cr_assert_eq(nold, 0);
  free(old);
  cr_assert(res.id > 0);
  cr_assert_eq(res.version, 1);
  cr_assert_str_eq(res.format, "tile");
  cr_assert_eq(tc_tensor_get(db, "P", &got, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(got.id, res.id);
  cr_assert_eq(got.version, 1);
  cr_assert_eq(got.shape[1], 6);
  cr_assert_eq(got.chunk[1], 4);
  cr_assert_eq(tc_tensor_bytes(db, &got, &bytes, &err), TR_OK);
  cr_assert_eq(bytes, 120);
  s_check_locs(db, "P", 0x8000000000000100ull, a, b);
  tc_close(&db);
  db = tf_db(s_dir);
  s_check_locs(db, "P", 0x8000000000000100ull, a, b);
  tr_tensor *list = NULL;
  int n = 0;
  cr_assert_eq(tc_tensor_list(db, &list, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 1);
  cr_assert_str_eq(list[0].name, "P");
  free(list);
  /* A stale description is refused; a declared tensor has no chunks. */
  tc_chunkloc *lv = NULL;
  int64_t nl = -1;
  got.version = 7;
  cr_assert_eq(tc_chunk_locations(db, &got, &lv, &nl, &err), TR_ENOTFOUND);
  tr_tensor d = s_meta("D");
  cr_assert_eq(tc_tensor_create(db, &d, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_chunk_locations(db, &d, &lv, &nl, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(nl, 0);
  free(lv);
  tc_close(&db);
}

Test(placed, bad_commit_changes_nothing) {
  tc_db *db = tf_db(s_dir);
  tr_err err;
  int64_t a, b;
  tc_chunkloc l[6], bad[6];
  tr_tensor t = s_meta("P");
  cr_assert_eq(tc_site_add(db, "tcp://a", &a, &err), TR_OK);
  cr_assert_eq(tc_site_add(db, "tcp://b", &b, &err), TR_OK);
  s_locs(l, 1000, a, b);
  cr_assert_eq(tc_commit_placed(db, &t, l, 6, NULL, NULL, NULL, &err), TR_OK,
               "%s", err.msg);
  s_locs(l, 2000, a, -1);
  /* Version 2's locations, each with one fault: the catalog refuses it. */
  enum { S_LIN_TWICE, S_TOO_FEW, S_NO_REPLICA, S_SITE_TWICE, S_WRONG_SIZE, S_ID_0, S_NO_SITE };
  static const struct {
    int fault;
    const char *what;
    const char *msg; /* part of the message, or NULL */
  } cases[] = {
      {S_LIN_TWICE, "a missing lin (5 given twice instead of 4)", NULL},
      {S_TOO_FEW, "too few locations", NULL},
      {S_NO_REPLICA, "no replica", NULL},
      {S_SITE_TWICE, "a site twice", NULL},
      {S_WRONG_SIZE, "a wrong size", NULL},
      {S_ID_0, "chunk id 0", NULL},
      {S_NO_SITE, "a site the catalog does not know (found inside the transaction)",
       "no site"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t n = 6;
    memcpy(bad, l, sizeof bad);
    switch (cases[i].fault) {
    case S_LIN_TWICE: bad[4] = l[5]; break;
    case S_TOO_FEW: n = 5; break;
    case S_NO_REPLICA: bad[2].nsites = 0; break;
    case S_SITE_TWICE: bad[2].nsites = 2; bad[2].site[1] = a; break;
    case S_WRONG_SIZE: bad[5].nbytes = 32; break;
    case S_ID_0: bad[0].chunk_id = 0; break;
    case S_NO_SITE: bad[5].site[0] = b + 100; break;
    }
    cr_assert_eq(tc_commit_placed(db, &t, bad, n, NULL, NULL, NULL, &err), TR_EINVAL, "%s",
                 cases[i].what);
    if (cases[i].msg) cr_assert(strstr(err.msg, cases[i].msg), "%s: %s", cases[i].what, err.msg);
  }
  /* Still version 1 with its locations. */
  tr_tensor got;
  cr_assert_eq(tc_tensor_get(db, "P", &got, &err), TR_OK);
  cr_assert_eq(got.version, 1);
  s_check_locs(db, "P", 1000, a, b);
  /* A bad first commit (a site it does not know) leaves no tensor behind. */
  tr_tensor q = s_meta("Q");
  cr_assert_eq(tc_commit_placed(db, &q, bad, 6, NULL, NULL, NULL, &err),
               TR_EINVAL);
  cr_assert_eq(tc_tensor_get(db, "Q", &got, &err), TR_ENOTFOUND);
  tc_close(&db);
}

Test(placed, replace_returns_old_ids) {
  tc_db *db = tf_db(s_dir);
  tr_err err;
  int64_t a, b, nold = -1;
  uint64_t *old = NULL;
  tc_chunkloc l[6];
  tr_tensor t = s_meta("P"), res;
  cr_assert_eq(tc_site_add(db, "tcp://a", &a, &err), TR_OK);
  cr_assert_eq(tc_site_add(db, "tcp://b", &b, &err), TR_OK);
  s_locs(l, 1000, a, b);
  cr_assert_eq(tc_commit_placed(db, &t, l, 6, NULL, NULL, NULL, &err), TR_OK,
               "%s", err.msg);
  /* Version 2 keeps chunk 3 (id 1003), the rest are new. */
  s_locs(l, 2000, b, -1);
  l[3].chunk_id = 1003;
  cr_assert_eq(tc_commit_placed(db, &t, l, 6, &res, &old, &nold, &err), TR_OK,
               "%s", err.msg);
  cr_assert_eq(res.version, 2);
  cr_assert_eq(nold, 5);
  for (uint64_t id = 1000; id < 1006; id++)
    cr_assert_eq(s_has(old, nold, id), id != 1003, "id %d", (int)id);
  free(old);
  /* A different shape replaces too. */
  tr_tensor one = s_meta("P");
  one.shape[0] = 2;
  one.shape[1] = 4;
  tc_chunkloc l1;
  memset(&l1, 0, sizeof l1);
  l1.chunk_id = 3000;
  l1.nbytes = 32;
  l1.nsites = 1;
  l1.site[0] = a;
  cr_assert_eq(tc_commit_placed(db, &one, &l1, 1, &res, &old, &nold, &err),
               TR_OK, "%s", err.msg);
  cr_assert_eq(res.version, 3);
  cr_assert_str_eq(res.format, "single");
  cr_assert_eq(nold, 6);
  cr_assert(s_has(old, nold, 1003));
  cr_assert(s_has(old, nold, 2005));
  free(old);
  tc_close(&db);
}

Test(placed, drop_placed_returns_ids) {
  tc_db *db = tf_db(s_dir);
  tr_err err;
  int64_t a, b, n = -1;
  uint64_t *ids = NULL;
  tc_chunkloc l[6];
  tr_tensor t = s_meta("P"), u = s_meta("U"), got;
  cr_assert_eq(tc_site_add(db, "tcp://a", &a, &err), TR_OK);
  cr_assert_eq(tc_site_add(db, "tcp://b", &b, &err), TR_OK);
  s_locs(l, 1000, a, b);
  cr_assert_eq(tc_commit_placed(db, &t, l, 6, NULL, NULL, NULL, &err), TR_OK,
               "%s", err.msg);
  /* U shares chunk 1002 with P. */
  s_locs(l, 5000, a, -1);
  l[2].chunk_id = 1002;
  cr_assert_eq(tc_commit_placed(db, &u, l, 6, NULL, NULL, NULL, &err), TR_OK,
               "%s", err.msg);
  cr_assert_eq(tc_tensor_drop_placed(db, "P", &ids, &n, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(n, 5);
  for (uint64_t id = 1000; id < 1006; id++)
    cr_assert_eq(s_has(ids, n, id), id != 1002, "id %d", (int)id);
  free(ids);
  cr_assert_eq(tc_tensor_get(db, "P", &got, &err), TR_ENOTFOUND);
  cr_assert_eq(tc_tensor_drop_placed(db, "P", &ids, &n, &err), TR_ENOTFOUND);
  cr_assert_eq(tc_site_chunks(db, b, &ids, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 0);
  free(ids);
  cr_assert_eq(tc_tensor_drop_placed(db, "U", &ids, &n, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(n, 6);
  cr_assert(s_has(ids, n, 1002));
  free(ids);
  /* The name can be used again: a new entry at version 1. */
  s_locs(l, 7000, a, -1);
  cr_assert_eq(tc_commit_placed(db, &t, l, 6, &got, &ids, &n, &err), TR_OK,
               "%s", err.msg);
  cr_assert_eq(n, 0);
  free(ids);
  cr_assert_eq(got.version, 1);
  tc_close(&db);
  db = tf_db(s_dir);
  s_check_locs(db, "P", 7000, a, -1);
  tc_close(&db);
}

Test(placed, site_chunks_and_site_removal) {
  tc_db *db = tf_db(s_dir);
  tr_err err;
  int64_t a, b, n = -1;
  uint64_t *ids = NULL;
  tc_chunkloc l[6];
  tr_tensor t = s_meta("P"), u = s_meta("U");
  cr_assert_eq(tc_site_add(db, "tcp://a", &a, &err), TR_OK);
  cr_assert_eq(tc_site_add(db, "tcp://b", &b, &err), TR_OK);
  s_locs(l, 1000, a, b);
  cr_assert_eq(tc_commit_placed(db, &t, l, 6, NULL, NULL, NULL, &err), TR_OK,
               "%s", err.msg);
  s_locs(l, 2000, b, -1);
  cr_assert_eq(tc_commit_placed(db, &u, l, 6, NULL, NULL, NULL, &err), TR_OK,
               "%s", err.msg);
  cr_assert_eq(tc_site_chunks(db, a, &ids, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 6);
  for (uint64_t id = 1000; id < 1006; id++) cr_assert(s_has(ids, n, id));
  free(ids);
  cr_assert_eq(tc_site_chunks(db, b, &ids, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 12);
  for (uint64_t id = 1000; id < 1006; id++) {
    cr_assert(s_has(ids, n, id));
    cr_assert(s_has(ids, n, id + 1000));
  }
  free(ids);
  /* Forgetting b leaves P on a alone and U's chunks without replicas. */
  cr_assert_eq(tc_site_remove(db, "tcp://b", &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_site_chunks(db, b, &ids, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 0);
  free(ids);
  s_check_locs(db, "P", 1000, a, -1);
  tr_tensor got;
  tc_chunkloc *lv = NULL;
  cr_assert_eq(tc_tensor_get(db, "U", &got, &err), TR_OK);
  cr_assert_eq(tc_chunk_locations(db, &got, &lv, &n, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(n, 6);
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(lv[i].nsites, 0);
    cr_assert_eq(lv[i].chunk_id, 2000 + (uint64_t)i);
  }
  free(lv);
  tc_close(&db);
}

/* Replicas recorded and forgotten by chunk id; the chunks that lack
** replicas, or sit on a site; which ids the catalog knows. */
Test(placed, replicas_by_chunk_id) {
  tc_db *db = tf_db(s_dir);
  tr_err err;
  int64_t a, b, c, n = -1, site[TC_MAX_REPLICAS], under;
  int ns, fewest;
  tc_chunkloc l[6];
  tc_chunkref *refs = NULL;
  tr_tensor t = s_meta("P"), got;
  cr_assert_eq(tc_site_add(db, "tcp://a", &a, &err), TR_OK);
  cr_assert_eq(tc_site_add(db, "tcp://b", &b, &err), TR_OK);
  cr_assert_eq(tc_site_add(db, "tcp://c", &c, &err), TR_OK);
  s_locs(l, 1000, a, -1);
  cr_assert_eq(tc_commit_placed(db, &t, l, 6, NULL, NULL, NULL, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_tensor_get(db, "P", &got, &err), TR_OK);
  cr_assert_eq(tc_tensor_replicas(db, &got, 2, &fewest, &under, &err), TR_OK);
  cr_assert_eq(fewest, 1);
  cr_assert_eq(under, 6);
  /* Every chunk lacks a second replica. */
  cr_assert_eq(tc_chunks_select(db, 0, 2, &refs, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 6);
  for (int i = 0; i < 6; i++) {
    cr_assert_str_eq(refs[i].tensor, "P");
    cr_assert_eq(refs[i].loc.lin, i);
    cr_assert_eq(refs[i].loc.chunk_id, 1000 + (uint64_t)i);
    cr_assert_eq(refs[i].loc.nbytes, s_nb[i]);
    cr_assert_eq(refs[i].loc.nsites, 1);
    cr_assert_eq(refs[i].loc.site[0], a);
  }
  free(refs);
  /* b gets copies of 1000..1002; c of 1001 and an unknown id (skipped). */
  uint64_t three[] = {1000, 1001, 1002}, two[] = {1001, 777};
  cr_assert_eq(tc_replica_add(db, b, three, 3, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_replica_add(db, c, two, 2, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_replica_add(db, c, two, 2, &err), TR_OK, "twice is once");
  cr_assert_eq(tc_chunk_sites(db, 1001, site, &ns, &err), TR_OK);
  cr_assert_eq(ns, 3);
  cr_assert_eq(tc_chunk_sites(db, 777, site, &ns, &err), TR_OK);
  cr_assert_eq(ns, 0);
  cr_assert_eq(tc_tensor_replicas(db, &got, 2, &fewest, &under, &err), TR_OK);
  cr_assert_eq(fewest, 1);
  cr_assert_eq(under, 3);
  cr_assert_eq(tc_chunks_select(db, 0, 2, &refs, &n, &err), TR_OK);
  cr_assert_eq(n, 3);
  cr_assert_eq(refs[0].loc.chunk_id, 1003);
  free(refs);
  /* On site c: chunk 1001 alone, with all three holders. */
  cr_assert_eq(tc_chunks_select(db, c, 0, &refs, &n, &err), TR_OK);
  cr_assert_eq(n, 1);
  cr_assert_eq(refs[0].loc.chunk_id, 1001);
  cr_assert_eq(refs[0].loc.nsites, 3);
  free(refs);
  /* Forgetting a replica by id. */
  cr_assert_eq(tc_replica_remove(db, b, three, 3, &err), TR_OK);
  cr_assert_eq(tc_chunk_sites(db, 1000, site, &ns, &err), TR_OK);
  cr_assert_eq(ns, 1);
  /* Known: same id, size and checksum. */
  uint64_t ids[] = {1000, 1001, 55}, nb[] = {s_nb[0], s_nb[1] + 4, 8}, sums[3];
  int known[3];
  sums[0] = l[0].checksum;
  sums[1] = l[1].checksum;
  sums[2] = 0;
  cr_assert_eq(tc_chunks_known(db, ids, nb, sums, 3, known, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(known[0], 1);
  cr_assert_eq(known[1], 0, "a different size is not the same chunk");
  cr_assert_eq(known[2], 0);
  tc_close(&db);
}

/* Every catalog has a database id of its own, kept across opens. */
Test(placed, database_id) {
  tc_db *db = tf_db(s_dir), *other = NULL;
  tr_err err;
  char dir2[400];
  uint64_t id = tc_db_id(db);
  cr_assert_neq(id, 0);
  tc_close(&db);
  db = tf_db(s_dir);
  cr_assert_eq(tc_db_id(db), id);
  snprintf(dir2, sizeof dir2, "%s", tf_path("other"));
  cr_assert_eq(tc_open(dir2, &other, &err), TR_OK, "%s", err.msg);
  cr_assert_neq(tc_db_id(other), id);
  tc_close(&other);
  tc_close(&db);
}

/* A missing or empty catalog over local workers' chunk files is an
** error, and makes nothing. */
Test(placed, no_fresh_catalog_over_worker_data) {
  tc_db *db = tf_db(s_dir);
  tr_err err;
  char path[600];
  tc_close(&db);
  snprintf(path, sizeof path, "%s/workers", s_dir);
  cr_assert_eq(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/workers/w0", s_dir);
  cr_assert_eq(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/workers/w0/00000000000000aa.chk", s_dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("x", f);
  fclose(f);
  db = tf_db(s_dir); /* an intact catalog opens */
  tc_close(&db);
  snprintf(path, sizeof path, "%s/catalog.db", s_dir);
  cr_assert_eq(truncate(path, 0), 0);
  cr_assert_eq(tc_open(s_dir, &db, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "empty") != NULL, "%s", err.msg);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_size, 0, "nothing was written over it");
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(tc_open(s_dir, &db, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "missing") != NULL, "%s", err.msg);
  cr_assert_neq(stat(path, &st), 0, "no new catalog was made");
}

Test(placed, settings_persist) {
  tc_db *db = tf_db(s_dir);
  tr_err err;
  char v[16];
  cr_assert_eq(tc_setting_get(db, "replicas", v, sizeof v, &err),
               TR_ENOTFOUND);
  cr_assert_eq(tc_setting_set(db, "replicas", "3", &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(tc_setting_set(db, "replicas", "2", &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(tc_setting_set(db, "workers", "tcp://a,tcp://b", &err), TR_OK,
               "%s", err.msg);
  tc_close(&db);
  db = tf_db(s_dir);
  cr_assert_eq(tc_setting_get(db, "replicas", v, sizeof v, &err), TR_OK, "%s",
               err.msg);
  cr_assert_str_eq(v, "2");
  cr_assert_eq(tc_setting_get(db, "workers", v, sizeof v, &err), TR_OK, "%s",
               err.msg);
  cr_assert_str_eq(v, "tcp://a,tcp://b");
  cr_assert_eq(tc_setting_get(db, "workers", v, 8, &err), TR_EINVAL);
  tc_close(&db);
}

Test(placed, new_chunk_ids_differ) {
  enum { N = 2000 };
  static uint64_t v[N];
  for (int i = 0; i < N; i++) {
    v[i] = tc_new_chunk_id();
    cr_assert_neq(v[i], 0);
    for (int j = 0; j < i; j++) cr_assert_neq(v[i], v[j]);
  }
}
