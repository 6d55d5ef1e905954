/*
** tests/unit/test_catalog.c - the SQLite catalog and chunk store: open and
** reopen, write/commit/read, replacing, failed and aborted writes, damaged
** and leftover files, locking, transient databases and the grid helpers.
*/
#include "config.h"
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "catalog/catalog.h"

/* ---- fixtures ------------------------------------------------------------ */

static char s_tmp[256];   /* per-test scratch directory */
static char s_dbdir[300]; /* the database directory inside it */

static int s_rm(const char *p, const struct stat *st, int f, struct FTW *w) {
  (void)st;
  (void)f;
  (void)w;
  remove(p);
  return 0;
}

static void s_setup(void) {
  const char *t = getenv("TMPDIR");
  snprintf(s_tmp, sizeof s_tmp, "%s/tctest-XXXXXX", t && *t ? t : "/tmp");
  cr_assert_not_null(mkdtemp(s_tmp));
  snprintf(s_dbdir, sizeof s_dbdir, "%s/db/nested", s_tmp);
}

static void s_teardown(void) { nftw(s_tmp, s_rm, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(catalog, .init = s_setup, .fini = s_teardown);

/* Number of plain files in DB/chunks. */
static int s_count_chunks(const char *dir) {
  char p[512];
  int n = 0;
  snprintf(p, sizeof p, "%s/chunks", dir);
  DIR *d = opendir(p);
  cr_assert_not_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static tc_tensor s_meta(const char *name, tr_dtype dt, int rank,
                        const int64_t *shape, const int64_t *chunk) {
  tc_tensor t;
  memset(&t, 0, sizeof t);
  snprintf(t.name, sizeof t.name, "%s", name);
  t.dtype = dt;
  t.rank = rank;
  for (int d = 0; d < rank; d++) {
    t.shape[d] = shape[d];
    t.chunk[d] = chunk[d];
  }
  return t;
}

/* Value stored at global element index (row-major over the whole tensor),
** plus a per-version offset so replaced data is distinguishable. */
static double s_val(int64_t gidx, int ver) { return (double)gidx * 0.5 + ver * 1000.0; }

/* Fill chunk `key` of t (f32 or f64) with s_val of its elements. */
static size_t s_fill(const tc_tensor *t, const int64_t *key, void *buf,
                     int ver) {
  int64_t ext[TR_MAX_RANK], idx[TR_MAX_RANK] = {0};
  int64_t n = tc_chunk_extent(t, key, ext);
  for (int64_t i = 0; i < n; i++) {
    int64_t g = 0;
    for (int d = 0; d < t->rank; d++)
      g = g * t->shape[d] + key[d] * t->chunk[d] + idx[d];
    if (t->dtype == TR_F64)
      ((double *)buf)[i] = s_val(g, ver);
    else
      ((float *)buf)[i] = (float)s_val(g, ver);
    for (int d = t->rank - 1; d >= 0; d--) {
      if (++idx[d] < ext[d]) break;
      idx[d] = 0;
    }
  }
  return (size_t)n * tr_dtype_size(t->dtype);
}

/* Write every chunk of t and commit; returns the committed entry. */
static tc_tensor s_write_all(tc_db *db, const tc_tensor *t, int ver) {
  tc_write *w = NULL;
  tr_err err;
  tc_tensor out;
  static double buf[1 << 16];
  cr_assert_eq(tc_write_begin(db, t, &w, &err), TR_OK, "%s", err.msg);
  for (int64_t lin = 0; lin < tc_nchunks(t); lin++) {
    int64_t key[TR_MAX_RANK];
    tc_key_from_linear(t, lin, key);
    size_t nb = s_fill(t, key, buf, ver);
    cr_assert_eq(tc_write_chunk(w, key, buf, nb, &err), TR_OK, "%s", err.msg);
  }
  cr_assert_eq(tc_write_commit(&w, &out, &err), TR_OK, "%s", err.msg);
  cr_assert_null(w);
  return out;
}

/* Read every chunk of t and compare with s_val(., ver). */
static void s_check_all(tc_db *db, const tc_tensor *t, int ver) {
  tc_reader *r = NULL;
  tr_err err;
  static double got[1 << 16], want[1 << 16];
  cr_assert_eq(tc_reader_open(db, t, &r, &err), TR_OK, "%s", err.msg);
  for (int64_t lin = 0; lin < tc_nchunks(t); lin++) {
    int64_t key[TR_MAX_RANK];
    tc_key_from_linear(t, lin, key);
    size_t nb = s_fill(t, key, want, ver);
    cr_assert_eq(tc_reader_read(r, key, got, nb, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(memcmp(got, want, nb), 0, "chunk %lld differs",
                 (long long)lin);
  }
  tc_reader_close(&r);
  cr_assert_null(r);
  tc_reader_close(&r);
}

/* Path of the file of chunk `lin` of tensor `id`, from the catalog. */
static void s_chunk_path(const char *dir, int64_t id, int64_t lin, char *out,
                         size_t n) {
  char p[512];
  sqlite3 *s;
  sqlite3_stmt *st;
  snprintf(p, sizeof p, "%s/catalog.db", dir);
  cr_assert_eq(sqlite3_open(p, &s), SQLITE_OK);
  cr_assert_eq(sqlite3_prepare_v2(s, "SELECT file FROM chunks WHERE "
                                  "tensor_id = ?1 AND lin = ?2", -1, &st, NULL),
               SQLITE_OK);
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_int64(st, 2, lin);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  snprintf(out, n, "%s/chunks/%s", dir, sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(s);
}

static const int64_t s_sh[2] = {10, 7}, s_ch[2] = {4, 3};

/* ---- grid helpers -------------------------------------------------------- */

Test(catalog, grid_ragged_edges) {
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  int64_t key[2], ext[2];
  cr_assert_eq(tc_grid(&t, 0), 3);
  cr_assert_eq(tc_grid(&t, 1), 3);
  cr_assert_eq(tc_nchunks(&t), 9);
  key[0] = 2;
  key[1] = 2;
  cr_assert_eq(tc_chunk_extent(&t, key, ext), 2);
  cr_assert_eq(ext[0], 2);
  cr_assert_eq(ext[1], 1);
  key[0] = 0;
  key[1] = 1;
  cr_assert_eq(tc_chunk_extent(&t, key, ext), 12);
  key[0] = 1;
  key[1] = 2;
  cr_assert_eq(tc_key_linear(&t, key), 5);
  for (int64_t lin = 0; lin < 9; lin++) {
    tc_key_from_linear(&t, lin, key);
    cr_assert_eq(tc_key_linear(&t, key), lin);
  }
  tc_key_from_linear(&t, 5, key);
  cr_assert_eq(key[0], 1);
  cr_assert_eq(key[1], 2);
  cr_assert_str_eq(tc_format_name(&t), "tile");
  t.chunk[1] = 7;
  cr_assert_str_eq(tc_format_name(&t), "row_strip");
  t.chunk[0] = 10;
  t.chunk[1] = 3;
  cr_assert_str_eq(tc_format_name(&t), "col_strip");
  t.chunk[1] = 100;
  cr_assert_str_eq(tc_format_name(&t), "single");
  /* rank 0: one chunk of one element */
  tc_tensor s = s_meta("S", TR_F32, 0, NULL, NULL);
  cr_assert_eq(tc_nchunks(&s), 1);
  cr_assert_eq(tc_chunk_extent(&s, key, ext), 1);
  cr_assert_str_eq(tc_format_name(&s), "single");
  /* an empty extent has no chunks */
  int64_t z[2] = {0, 5};
  tc_tensor e = s_meta("E", TR_F32, 2, z, s_ch);
  cr_assert_eq(tc_nchunks(&e), 0);
}

/* ---- open / persistence -------------------------------------------------- */

Test(catalog, open_create_close_reopen) {
  tc_db *db = NULL;
  tr_err err;
  tc_tensor t = s_meta("B_1", TR_F32, 2, s_sh, s_ch), got, *list = NULL;
  int n = -1;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  cr_assert_str_eq(tc_dir(db), s_dbdir);
  cr_assert_eq(tc_tensor_create(db, &t, &err), TR_OK, "%s", err.msg);
  cr_assert_gt(t.id, 0);
  cr_assert_eq(t.version, 0);
  cr_assert_str_eq(t.format, "tile");
  tc_tensor a = s_meta("A", TR_F64, 0, NULL, NULL);
  cr_assert_eq(tc_tensor_create(db, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_tensor_create(db, &a, &err), TR_ENAME);
  cr_assert_str_eq(err.msg, "tensor already exists: A");
  tc_close(&db);
  cr_assert_null(db);
  tc_close(&db);

  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_tensor_get(db, "B_1", &got, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(got.id, t.id);
  cr_assert_eq(got.dtype, TR_F32);
  cr_assert_eq(got.rank, 2);
  cr_assert_eq(got.shape[0], 10);
  cr_assert_eq(got.shape[1], 7);
  cr_assert_eq(got.chunk[0], 4);
  cr_assert_eq(got.chunk[1], 3);
  cr_assert_eq(got.version, 0);
  cr_assert_eq(tc_tensor_get(db, "nope", &got, &err), TR_ENOTFOUND);
  cr_assert_str_eq(err.msg, "no such tensor: nope");
  cr_assert_eq(tc_tensor_list(db, &list, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, 2);
  cr_assert_str_eq(list[0].name, "A");
  cr_assert_eq(list[0].rank, 0);
  cr_assert_str_eq(list[1].name, "B_1");
  free(list);
  tc_close(&db);
}

Test(catalog, bad_names_and_shapes) {
  tc_db *db = NULL;
  tr_err err;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  const char *bad[] = {"", "1abc", "a-b", "a b", "drop;table"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tc_tensor t = s_meta(bad[i], TR_F32, 2, s_sh, s_ch);
    cr_assert_eq(tc_tensor_create(db, &t, &err), TR_ENAME, "%s", bad[i]);
  }
  tc_tensor t = s_meta("A", TR_F32, 2, s_sh, s_ch);
  t.chunk[1] = 0;
  cr_assert_eq(tc_tensor_create(db, &t, &err), TR_ESHAPE);
  t.chunk[1] = 3;
  t.shape[0] = -1;
  cr_assert_eq(tc_tensor_create(db, &t, &err), TR_ESHAPE);
  t.shape[0] = INT64_MAX / 2;
  t.shape[1] = INT64_MAX / 2;
  cr_assert_eq(tc_tensor_create(db, &t, &err), TR_ESHAPE);
  t = s_meta("A", TR_F32, 2, s_sh, s_ch);
  t.rank = 9;
  cr_assert_eq(tc_tensor_create(db, &t, &err), TR_ESHAPE);
  tc_close(&db);
}

Test(catalog, not_a_database) {
  tc_db *db = NULL;
  tr_err err;
  char p[512];
  /* a regular file where the directory should be */
  snprintf(p, sizeof p, "%s/file", s_tmp);
  FILE *f = fopen(p, "w");
  fputs("hello\n", f);
  fclose(f);
  cr_assert_neq(tc_open(p, &db, &err), TR_OK);
  cr_assert_null(db);
  cr_assert(strstr(err.msg, "not a directory"), "%s", err.msg);
  /* a catalog.db that is not SQLite */
  snprintf(p, sizeof p, "%s/junk", s_tmp);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/junk/catalog.db", s_tmp);
  f = fopen(p, "w");
  for (int i = 0; i < 200; i++) fputs("this is not a database\n", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/junk", s_tmp);
  cr_assert_eq(tc_open(p, &db, &err), TR_ECORRUPT, "%s", err.msg);
  cr_assert(strstr(err.msg, "not a tradb catalog"), "%s", err.msg);
  /* an SQLite file of something else */
  snprintf(p, sizeof p, "%s/other", s_tmp);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/other/catalog.db", s_tmp);
  sqlite3 *s;
  cr_assert_eq(sqlite3_open(p, &s), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(s, "CREATE TABLE x(a)", NULL, NULL, NULL),
               SQLITE_OK);
  sqlite3_close(s);
  snprintf(p, sizeof p, "%s/other", s_tmp);
  cr_assert_neq(tc_open(p, &db, &err), TR_OK);
  cr_assert(strstr(err.msg, "not a tradb catalog"), "%s", err.msg);
  /* a directory with unrelated content is fine */
  snprintf(p, sizeof p, "%s/plain/readme.txt", s_tmp);
  mkdir(s_tmp, 0755);
  snprintf(p, sizeof p, "%s/plain", s_tmp);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/plain/readme.txt", s_tmp);
  f = fopen(p, "w");
  fclose(f);
  snprintf(p, sizeof p, "%s/plain", s_tmp);
  cr_assert_eq(tc_open(p, &db, &err), TR_OK, "%s", err.msg);
  tc_close(&db);
  snprintf(p, sizeof p, "%s/plain/readme.txt", s_tmp);
  cr_assert_eq(access(p, F_OK), 0);
}

Test(catalog, newer_schema_refused) {
  tc_db *db = NULL;
  tr_err err;
  char p[512];
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_close(&db);
  snprintf(p, sizeof p, "%s/catalog.db", s_dbdir);
  sqlite3 *s;
  cr_assert_eq(sqlite3_open(p, &s), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(s, "UPDATE meta SET value = '7' WHERE key = "
                            "'schema_version'", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(s);
  cr_assert_neq(tc_open(s_dbdir, &db, &err), TR_OK);
  cr_assert_null(db);
  cr_assert(strstr(err.msg, "schema version 7, newer"), "%s", err.msg);
  cr_assert_eq(sqlite3_open(p, &s), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(s, "UPDATE meta SET value = 'banana' WHERE key = "
                            "'schema_version'", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(s);
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "unknown schema version 'banana'"), "%s", err.msg);
}

Test(catalog, second_process_is_locked_out) {
  tc_db *db = NULL;
  tr_err err;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tc_tensor c = s_write_all(db, &t, 1);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    tc_db *other = NULL;
    tr_err e2;
    int rc = tc_open(s_dbdir, &other, &e2);
    _exit(rc != TR_OK && other == NULL && strstr(e2.msg, "in use") ? 0 : 1);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  s_check_all(db, &c, 1); /* the holder is unaffected */
  tc_close(&db);
  /* released on close */
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_close(&db);
}

/* ---- write / read -------------------------------------------------------- */

Test(catalog, write_commit_read_back) {
  tc_db *db = NULL;
  tr_err err;
  int64_t bytes = 0;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tc_tensor c = s_write_all(db, &t, 1);
  cr_assert_gt(c.id, 0);
  cr_assert_eq(c.version, 1);
  cr_assert_str_eq(c.format, "tile");
  s_check_all(db, &c, 1);
  cr_assert_eq(tc_tensor_bytes(db, &c, &bytes, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(bytes, 10 * 7 * 8);
  cr_assert_eq(s_count_chunks(s_dbdir), 9);
  tc_close(&db);
  /* persists */
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor g;
  cr_assert_eq(tc_tensor_get(db, "A", &g, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(g.version, 1);
  s_check_all(db, &g, 1);
  cr_assert_eq(s_count_chunks(s_dbdir), 9);
  tc_close(&db);
}

Test(catalog, catalog_rows_and_replicas) {
  tc_db *db = NULL;
  tr_err err;
  char p[512];
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F32, 2, s_sh, s_ch);
  s_write_all(db, &t, 1);
  tc_close(&db);
  snprintf(p, sizeof p, "%s/catalog.db", s_dbdir);
  sqlite3 *s;
  sqlite3_stmt *st;
  cr_assert_eq(sqlite3_open(p, &s), SQLITE_OK);
  cr_assert_eq(sqlite3_prepare_v2(s, "SELECT (SELECT count(*) FROM "
               "chunk_replicas WHERE site_id = 0), (SELECT endpoint FROM sites "
               "WHERE id = 0), (SELECT shape || '/' || chunk || '/' || dtype "
               "FROM tensors), (SELECT key FROM chunks WHERE lin = 5)",
               -1, &st, NULL), SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  cr_assert_eq(sqlite3_column_int(st, 0), 9);
  cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), "local");
  cr_assert_str_eq((const char *)sqlite3_column_text(st, 2), "10,7/4,3/f32");
  cr_assert_str_eq((const char *)sqlite3_column_text(st, 3), "1,2");
  sqlite3_finalize(st);
  sqlite3_close(s);
}

Test(catalog, replace_with_different_shape) {
  tc_db *db = NULL;
  tr_err err;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tc_tensor c1 = s_write_all(db, &t, 1);
  int64_t sh[1] = {6}, ch[1] = {4};
  tc_tensor u = s_meta("A", TR_F32, 1, sh, ch);
  tc_tensor c2 = s_write_all(db, &u, 2);
  cr_assert_eq(c2.id, c1.id);
  cr_assert_eq(c2.version, 2);
  cr_assert_eq(c2.rank, 1);
  cr_assert_eq(c2.dtype, TR_F32);
  s_check_all(db, &c2, 2);
  cr_assert_eq(s_count_chunks(s_dbdir), 2); /* the old version's files went */
  /* a reader for the stale description is refused */
  tc_reader *r = NULL;
  cr_assert_eq(tc_reader_open(db, &c1, &r, &err), TR_ENOTFOUND);
  cr_assert_null(r);
  tc_close(&db);
}

Test(catalog, commit_with_missing_chunk_fails_and_keeps_old) {
  tc_db *db = NULL;
  tc_write *w = NULL;
  tr_err err;
  double buf[64];
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tc_tensor c = s_write_all(db, &t, 1);
  cr_assert_eq(tc_write_begin(db, &t, &w, &err), TR_OK, "%s", err.msg);
  for (int64_t lin = 0; lin < 9; lin++) {
    int64_t key[2];
    if (lin == 4) continue;
    tc_key_from_linear(&t, lin, key);
    size_t nb = s_fill(&t, key, buf, 2);
    cr_assert_eq(tc_write_chunk(w, key, buf, nb, &err), TR_OK, "%s", err.msg);
  }
  cr_assert_eq(s_count_chunks(s_dbdir), 17);
  cr_assert_eq(tc_write_commit(&w, NULL, &err), TR_ERR);
  cr_assert_null(w);
  cr_assert_str_eq(err.msg, "internal: chunk 4 of A missing");
  cr_assert_eq(s_count_chunks(s_dbdir), 9);
  tc_tensor g;
  cr_assert_eq(tc_tensor_get(db, "A", &g, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(g.version, 1);
  s_check_all(db, &c, 1);
  tc_close(&db);
}

Test(catalog, abort_leaves_nothing) {
  tc_db *db = NULL;
  tc_write *w = NULL;
  tr_err err;
  double buf[64];
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  cr_assert_eq(tc_write_begin(db, &t, &w, &err), TR_OK, "%s", err.msg);
  for (int64_t lin = 0; lin < 9; lin++) {
    int64_t key[2];
    tc_key_from_linear(&t, lin, key);
    size_t nb = s_fill(&t, key, buf, 1);
    cr_assert_eq(tc_write_chunk(w, key, buf, nb, &err), TR_OK, "%s", err.msg);
  }
  /* an uncommitted write reads back, checksum verified */
  int64_t key[2] = {2, 2};
  double got[64];
  size_t nb = s_fill(&t, key, buf, 1);
  cr_assert_eq(tc_write_read(w, key, got, nb, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(memcmp(got, buf, nb), 0);
  cr_assert_eq(s_count_chunks(s_dbdir), 9);
  tc_write_abort(&w);
  cr_assert_null(w);
  tc_write_abort(&w);
  cr_assert_eq(s_count_chunks(s_dbdir), 0);
  cr_assert_eq(tc_tensor_get(db, "A", &t, &err), TR_ENOTFOUND);
  tc_close(&db);
}

Test(catalog, bad_chunk_arguments) {
  tc_db *db = NULL;
  tc_write *w = NULL;
  tr_err err;
  double buf[64] = {0};
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  cr_assert_eq(tc_write_begin(db, &t, &w, &err), TR_OK, "%s", err.msg);
  int64_t out[2] = {3, 0}, edge[2] = {2, 2};
  cr_assert_eq(tc_write_chunk(w, out, buf, 96, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "[3,0]"), "%s", err.msg);
  cr_assert_eq(tc_write_chunk(w, edge, buf, 96, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "holds 16 bytes"), "%s", err.msg);
  cr_assert_eq(tc_write_read(w, edge, buf, 16, &err), TR_ERR);
  cr_assert_eq(tc_write_chunk(w, edge, buf, 16, &err), TR_OK, "%s", err.msg);
  /* writing the same chunk again replaces it */
  buf[0] = 42;
  cr_assert_eq(tc_write_chunk(w, edge, buf, 16, &err), TR_OK, "%s", err.msg);
  buf[0] = 0;
  cr_assert_eq(tc_write_read(w, edge, buf, 16, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(buf[0], 42);
  cr_assert_eq(s_count_chunks(s_dbdir), 1);
  tc_write_abort(&w);
  cr_assert_eq(s_count_chunks(s_dbdir), 0);
  t.rank = -1;
  cr_assert_neq(tc_write_begin(db, &t, &w, &err), TR_OK);
  cr_assert_null(w);
  tc_close(&db);
}

Test(catalog, corrupt_chunk_is_detected) {
  tc_db *db = NULL;
  tc_reader *r = NULL;
  tr_err err;
  char path[600];
  double buf[64];
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tc_tensor c = s_write_all(db, &t, 1);
  int64_t key[2] = {0, 1};
  /* the catalog is locked while open: look the file name up in between */
  tc_close(&db);
  s_chunk_path(s_dbdir, c.id, tc_key_linear(&c, key), path, sizeof path);
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  /* flip one payload byte */
  int fd = open(path, O_RDWR);
  cr_assert_geq(fd, 0);
  unsigned char b;
  cr_assert_eq(pread(fd, &b, 1, 64 + 17), 1);
  b ^= 0x10;
  cr_assert_eq(pwrite(fd, &b, 1, 64 + 17), 1);
  close(fd);
  cr_assert_eq(tc_reader_open(db, &c, &r, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_reader_read(r, key, buf, 96, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "checksum mismatch in tensor A chunk [0,1]"), "%s",
            err.msg);
  /* other chunks are fine; a wrong buffer size is the caller's error */
  int64_t k0[2] = {0, 0};
  cr_assert_eq(tc_reader_read(r, k0, buf, 96, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_reader_read(r, k0, buf, 95, &err), TR_EINVAL);
  /* a damaged header */
  fd = open(path, O_RDWR);
  cr_assert_eq(pwrite(fd, "X", 1, 0), 1);
  close(fd);
  cr_assert_eq(tc_reader_read(r, key, buf, 96, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "tensor A chunk [0,1]"), "%s", err.msg);
  /* a truncated file */
  cr_assert_eq(truncate(path, 100), 0);
  cr_assert_eq(tc_reader_read(r, key, buf, 96, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "tensor A chunk [0,1]"), "%s", err.msg);
  /* a missing file */
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(tc_reader_read(r, key, buf, 96, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "tensor A chunk [0,1]"), "%s", err.msg);
  cr_assert(strstr(err.msg, path), "%s", err.msg);
  tc_reader_close(&r);
  tc_close(&db);
}

Test(catalog, stray_files_removed_on_open) {
  tc_db *db = NULL;
  tr_err err;
  char p[600];
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tc_tensor c = s_write_all(db, &t, 1);
  tc_close(&db);
  const char *stray[] = {"0123456789abcdef-0.chk", "0123456789abcdef-3.7.tmp",
                         "fedcba9876543210-12.chk"};
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/chunks/%s", s_dbdir, stray[i]);
    FILE *f = fopen(p, "w");
    fputs("leftover", f);
    fclose(f);
  }
  /* not ours: left alone */
  snprintf(p, sizeof p, "%s/chunks/notes.txt", s_dbdir);
  FILE *f = fopen(p, "w");
  fclose(f);
  cr_assert_eq(s_count_chunks(s_dbdir), 13);
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_count_chunks(s_dbdir), 10);
  cr_assert_eq(access(p, F_OK), 0);
  s_check_all(db, &c, 1);
  tc_close(&db);
}

Test(catalog, killed_writer_leftovers_removed) {
  tc_db *db = NULL;
  tr_err err;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tc_tensor c = s_write_all(db, &t, 1);
  tc_close(&db);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    /* a process that writes a whole new version and dies before commit */
    tc_db *d2 = NULL;
    tc_write *w = NULL;
    tr_err e2;
    double buf[64];
    if (tc_open(s_dbdir, &d2, &e2) != TR_OK) _exit(1);
    if (tc_write_begin(d2, &t, &w, &e2) != TR_OK) _exit(1);
    for (int64_t lin = 0; lin < 9; lin++) {
      int64_t key[2];
      tc_key_from_linear(&t, lin, key);
      size_t nb = s_fill(&t, key, buf, 2);
      if (tc_write_chunk(w, key, buf, nb, &e2) != TR_OK) _exit(1);
    }
    kill(getpid(), SIGKILL);
    _exit(1);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  cr_assert_eq(s_count_chunks(s_dbdir), 18);
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_count_chunks(s_dbdir), 9);
  tc_tensor g;
  cr_assert_eq(tc_tensor_get(db, "A", &g, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(g.version, 1);
  s_check_all(db, &c, 1);
  tc_close(&db);
}

Test(catalog, drop) {
  tc_db *db = NULL;
  tr_err err;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  s_write_all(db, &t, 1);
  tc_tensor u = s_meta("B", TR_F32, 2, s_sh, s_ch);
  tc_tensor cu = s_write_all(db, &u, 3);
  cr_assert_eq(s_count_chunks(s_dbdir), 18);
  cr_assert_eq(tc_tensor_drop(db, "A", &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_count_chunks(s_dbdir), 9);
  cr_assert_eq(tc_tensor_get(db, "A", &t, &err), TR_ENOTFOUND);
  cr_assert_eq(tc_tensor_drop(db, "A", &err), TR_ENOTFOUND);
  cr_assert_str_eq(err.msg, "no such tensor: A");
  s_check_all(db, &cu, 3);
  tc_close(&db);
  /* the name can be used again */
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor c = s_write_all(db, &t, 4);
  cr_assert_eq(c.version, 1);
  s_check_all(db, &c, 4);
  tc_close(&db);
}

Test(catalog, version0_reads_zeros) {
  tc_db *db = NULL;
  tc_reader *r = NULL;
  tr_err err;
  float buf[12];
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("Z", TR_F32, 2, s_sh, s_ch);
  cr_assert_eq(tc_tensor_create(db, &t, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_reader_open(db, &t, &r, &err), TR_OK, "%s", err.msg);
  memset(buf, 0xff, sizeof buf);
  int64_t key[2] = {1, 1};
  cr_assert_eq(tc_reader_read(r, key, buf, sizeof buf, &err), TR_OK, "%s",
               err.msg);
  for (int i = 0; i < 12; i++) cr_assert_eq(buf[i], 0.0f);
  tc_reader_close(&r);
  /* a declared tensor can then be written */
  tc_tensor c = s_write_all(db, &t, 1);
  cr_assert_eq(c.id, t.id);
  cr_assert_eq(c.version, 1);
  s_check_all(db, &c, 1);
  /* the stale version-0 description no longer reads as zeros */
  cr_assert_eq(tc_reader_open(db, &t, &r, &err), TR_ENOTFOUND);
  cr_assert_null(r);
  /* a description never stored reads as zeros */
  tc_tensor u = s_meta("U", TR_F32, 2, s_sh, s_ch);
  cr_assert_eq(tc_reader_open(db, &u, &r, &err), TR_OK, "%s", err.msg);
  memset(buf, 0xff, sizeof buf);
  cr_assert_eq(tc_reader_read(r, key, buf, sizeof buf, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(buf[5], 0.0f);
  tc_reader_close(&r);
  tc_close(&db);
}

Test(catalog, rank0_and_empty_tensors) {
  tc_db *db = NULL;
  tr_err err;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor s = s_meta("S", TR_F64, 0, NULL, NULL);
  tc_tensor cs = s_write_all(db, &s, 5);
  cr_assert_eq(cs.version, 1);
  s_check_all(db, &cs, 5);
  int64_t sh[2] = {0, 5};
  tc_tensor e = s_meta("E", TR_F32, 2, sh, s_ch);
  tc_tensor ce = s_write_all(db, &e, 1);
  cr_assert_eq(ce.version, 1);
  int64_t bytes = -1;
  cr_assert_eq(tc_tensor_bytes(db, &ce, &bytes, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(bytes, 0);
  tc_close(&db);
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_tensor_get(db, "S", &s, &err), TR_OK, "%s", err.msg);
  s_check_all(db, &s, 5);
  tc_close(&db);
}

/* Shared by the threads of concurrent_writes. */
typedef struct s_job {
  tc_write *w;       /* the write all threads feed */
  const tc_tensor *t; /* its description */
} s_job;

static int s_write_task(void *arg, int64_t lin) {
  s_job *j = arg;
  int64_t key[TR_MAX_RANK];
  double buf[64];
  tr_err err;
  tc_key_from_linear(j->t, lin, key);
  size_t nb = s_fill(j->t, key, buf, 7);
  int rc = tc_write_chunk(j->w, key, buf, nb, &err);
  if (rc) return rc;
  double back[64];
  rc = tc_write_read(j->w, key, back, nb, &err);
  if (rc) return rc;
  return memcmp(back, buf, nb) ? TR_ERR : TR_OK;
}

Test(catalog, concurrent_writes) {
  tc_db *db = NULL;
  tc_write *w = NULL;
  tr_err err;
  int64_t sh[2] = {37, 29}, ch[2] = {4, 5};
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_tensor t = s_meta("P", TR_F64, 2, sh, ch);
  cr_assert_eq(tc_nchunks(&t), 60);
  cr_assert_eq(tc_write_begin(db, &t, &w, &err), TR_OK, "%s", err.msg);
  s_job job = {w, &t};
  cr_assert_eq(tr_parallel_for(6, tc_nchunks(&t), s_write_task, &job), TR_OK);
  tc_tensor c;
  cr_assert_eq(tc_write_commit(&w, &c, &err), TR_OK, "%s", err.msg);
  s_check_all(db, &c, 7);
  tc_close(&db);
}

Test(catalog, transient_database_removed_on_close) {
  tc_db *db = NULL;
  tr_err err;
  char dir[512];
  setenv("TMPDIR", s_tmp, 1);
  cr_assert_eq(tc_open(NULL, &db, &err), TR_OK, "%s", err.msg);
  snprintf(dir, sizeof dir, "%s", tc_dir(db));
  cr_assert_eq(strncmp(dir, s_tmp, strlen(s_tmp)), 0, "%s", dir);
  cr_assert(strstr(dir, "/tradb-"), "%s", dir);
  tc_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tc_tensor c = s_write_all(db, &t, 1);
  s_check_all(db, &c, 1);
  cr_assert_eq(access(dir, F_OK), 0);
  tc_close(&db);
  cr_assert_neq(access(dir, F_OK), 0);
  cr_assert_eq(errno, ENOENT);
}
