/*
** tests/unit/test_catalog.c - the SQLite catalog: open and reopen, the
** schema, tensor entries, new versions committed with their chunk
** locations (persistence, replacing with another shape and type, stale
** descriptions, declared and empty tensors), locking against a second
** process, transient databases and the grid helpers.  Sites, replicas and
** dropping are in test_store.c (suite placed).
*/
#include "config.h"
#include <criterion/criterion.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "catalog/catalog.h"
#include "catalog/catalog_int.h"
#include "tests/unit/fixture.h"

/* ---- fixtures ------------------------------------------------------------ */

static char s_dbdir[300]; /* the database directory: nested, to be made */

static void s_setup(void) {
  tf_setup();
  snprintf(s_dbdir, sizeof s_dbdir, "%s", tf_path("db/nested"));
}

TestSuite(catalog, .init = s_setup, .fini = tf_teardown);

static tr_tensor s_meta(const char *name, tr_dtype dt, int rank,
                        const int64_t *shape, const int64_t *chunk) {
  tr_tensor t;
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

/* Number of entries in dir other than catalog.db with its SQLite
** companions (-wal, -shm, -journal). */
static int s_count_others(const char *dir) {
  return tf_count(dir, "", "") - tf_count(dir, "catalog.db", "");
}

/* got must be the entry want: every field, extents past the rank too. */
static void s_same_entry(const tr_tensor *got, const tr_tensor *want) {
  cr_assert_eq(got->id, want->id);
  cr_assert_str_eq(got->name, want->name);
  cr_assert_eq(got->dtype, want->dtype);
  cr_assert_eq(got->rank, want->rank);
  for (int d = 0; d < TR_MAX_RANK; d++) {
    cr_assert_eq(got->shape[d], want->shape[d], "dimension %d", d);
    cr_assert_eq(got->chunk[d], want->chunk[d], "dimension %d", d);
  }
  cr_assert_str_eq(got->format, want->format);
  cr_assert_eq(got->version, want->version);
}

/* Record a worker; returns its site id. */
static int64_t s_site(tc_db *db, const char *endpoint) {
  int64_t id = 0;
  tr_err err;
  cr_assert_eq(tc_site_add(db, endpoint, &id, &err), TR_OK, "%s", err.msg);
  cr_assert_gt(id, 0);
  return id;
}

/* Payload bytes of chunk lin of t. */
static uint64_t s_nbytes(const tr_tensor *t, int64_t lin) {
  int64_t key[TR_MAX_RANK];
  tr_key_from_linear(t, lin, key);
  return (uint64_t)tr_chunk_extent(t, key, NULL) * tr_dtype_size(t->dtype);
}

/* Commit a new version of t whose chunk lin has id base + lin, checksum
** ~(base + lin) and one replica on site; returns the committed entry and,
** if old is not NULL, the previous version's chunk ids (caller frees). */
/* The locations s_commit gives t's chunks (caller frees). */
static tc_chunkloc *s_locs(const tr_tensor *t, uint64_t base, int64_t site) {
  int64_t n = tr_nchunks(t);
  tc_chunkloc *l = calloc(n > 0 ? (size_t)n : 1, sizeof *l);
  cr_assert_not_null(l);
  for (int64_t lin = 0; lin < n; lin++) {
    l[lin].lin = lin;
    l[lin].chunk_id = base + (uint64_t)lin;
    l[lin].nbytes = s_nbytes(t, lin);
    l[lin].checksum = ~(base + (uint64_t)lin);
    l[lin].nsites = 1;
    l[lin].site[0] = site;
  }
  return l;
}

static tr_tensor s_commit(tc_db *db, const tr_tensor *t, uint64_t base,
                          int64_t site, uint64_t **old, int64_t *nold) {
  tc_chunkloc *l = s_locs(t, base, site);
  tr_tensor out;
  tr_err err;
  cr_assert_eq(tc_commit_placed(db, t, l, tr_nchunks(t), &out, old, nold, &err), TR_OK,
               "%s", err.msg);
  free(l);
  return out;
}

/* Commit t as s_commit does, unsynced; returns the old version's bytes. */
static uint64_t s_commit_unsynced(tc_db *db, const tr_tensor *t, uint64_t base, int64_t site,
                                  uint64_t **old, int64_t *nold) {
  tc_chunkloc *l = s_locs(t, base, site);
  uint64_t bytes = 0;
  tr_err err;
  cr_assert_eq(tc_commit_placed_unsynced(db, t, l, tr_nchunks(t), old, nold, &bytes, &err), TR_OK,
               "%s", err.msg);
  free(l);
  return bytes;
}

/* t must be the current description, with its chunks where s_commit(base,
** site) put them. */
static void s_check(tc_db *db, const tr_tensor *t, uint64_t base,
                    int64_t site) {
  tc_chunkloc *l = NULL;
  int64_t n = -1;
  tr_err err;
  cr_assert_eq(tc_chunk_locations(db, t, &l, &n, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(n, tr_nchunks(t));
  for (int64_t lin = 0; lin < n; lin++) {
    cr_assert_eq(l[lin].lin, lin);
    cr_assert_eq(l[lin].chunk_id, base + (uint64_t)lin, "chunk %lld",
                 (long long)lin);
    cr_assert_eq(l[lin].nbytes, s_nbytes(t, lin), "chunk %lld",
                 (long long)lin);
    cr_assert_eq(l[lin].checksum, ~(base + (uint64_t)lin));
    cr_assert_eq(l[lin].nsites, 1);
    cr_assert_eq(l[lin].site[0], site);
  }
  free(l);
}

static const int64_t s_sh[2] = {10, 7}, s_ch[2] = {4, 3};

/* ---- grid helpers -------------------------------------------------------- */

/* tr_key_next walks a box of keys in row-major order, the last dimension
** fastest, and ends with the key back at the box's low corner. */
Test(catalog, key_next_walks_a_box) {
  int64_t lo[3] = {1, 0, 2}, hi[3] = {2, 1, 3}, key[3] = {1, 0, 2};
  int64_t seen = 0;
  do {
    cr_assert(key[0] >= lo[0] && key[0] <= hi[0] && key[1] >= lo[1] && key[1] <= hi[1] && key[2] >= lo[2] &&
              key[2] <= hi[2]);
    /* the visit order is the box's own row-major order */
    cr_assert_eq(((key[0] - 1) * 2 + key[1]) * 2 + key[2] - 2, seen);
    seen++;
  } while (tr_key_next(3, key, lo, hi));
  cr_assert_eq(seen, 8);
  for (int d = 0; d < 3; d++) cr_assert_eq(key[d], lo[d]);
  int64_t one = 4, one_lo = 4;
  cr_assert(!tr_key_next(1, &one, &one_lo, &one_lo), "a box of one key");
  cr_assert_eq(one, 4);
}

/* A chunk shape nests in another when each extent divides the other's:
** then every box of the finer grid, the ragged last ones too, lies in one
** box of the coarser. */
Test(catalog, chunk_nests_when_each_extent_divides) {
  int64_t outer[2] = {128, 32768}, same[2] = {128, 32768}, quarter[2] = {64, 8192};
  int64_t wider[2] = {256, 8192}, odd[2] = {128, 3000};
  cr_assert(tr_chunk_nests(2, quarter, outer));
  cr_assert(tr_chunk_nests(2, same, outer));
  cr_assert(!tr_chunk_nests(2, wider, outer), "larger along the first dimension");
  cr_assert(!tr_chunk_nests(2, odd, outer), "3000 does not divide 32768");
  cr_assert(!tr_chunk_nests(2, outer, quarter), "coarser, not finer");
}

/* The chunks a box overlaps: a 10 x 7 tensor in 4 x 3 chunks (keys 0..2
** by 0..2); a box inside one chunk, one across chunk edges, and one
** reaching into the ragged last ones. */
Test(catalog, chunks_under_a_box) {
  tr_tensor t = s_meta("A", TR_F32, 2, s_sh, s_ch);
  int64_t first[2], last[2];
  tr_chunks_under(&t, (int64_t[]){4, 3}, (int64_t[]){4, 3}, first, last);
  cr_assert(first[0] == 1 && last[0] == 1 && first[1] == 1 && last[1] == 1, "one chunk");
  tr_chunks_under(&t, (int64_t[]){3, 2}, (int64_t[]){2, 2}, first, last);
  cr_assert(first[0] == 0 && last[0] == 1 && first[1] == 0 && last[1] == 1, "four chunks");
  tr_chunks_under(&t, (int64_t[]){0, 0}, (int64_t[]){10, 7}, first, last);
  cr_assert(first[0] == 0 && last[0] == 2 && first[1] == 0 && last[1] == 2, "the whole tensor");
}

Test(catalog, grid_ragged_edges) {
  tr_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  int64_t key[2], ext[2];
  cr_assert_eq(tr_grid(&t, 0), 3);
  cr_assert_eq(tr_grid(&t, 1), 3);
  cr_assert_eq(tr_nchunks(&t), 9);
  key[0] = 2;
  key[1] = 2;
  cr_assert_eq(tr_chunk_extent(&t, key, ext), 2);
  cr_assert_eq(ext[0], 2);
  cr_assert_eq(ext[1], 1);
  key[0] = 0;
  key[1] = 1;
  cr_assert_eq(tr_chunk_extent(&t, key, ext), 12);
  key[0] = 1;
  key[1] = 2;
  cr_assert_eq(tr_key_linear(&t, key), 5);
  for (int64_t lin = 0; lin < 9; lin++) {
    tr_key_from_linear(&t, lin, key);
    cr_assert_eq(tr_key_linear(&t, key), lin);
  }
  tr_key_from_linear(&t, 5, key);
  cr_assert_eq(key[0], 1);
  cr_assert_eq(key[1], 2);
  cr_assert_str_eq(tr_format_name(&t), "tile");
  t.chunk[1] = 7;
  cr_assert_str_eq(tr_format_name(&t), "row_strip");
  t.chunk[0] = 10;
  t.chunk[1] = 3;
  cr_assert_str_eq(tr_format_name(&t), "col_strip");
  t.chunk[1] = 100;
  cr_assert_str_eq(tr_format_name(&t), "single");
  /* rank 0: one chunk of one element */
  tr_tensor s = s_meta("S", TR_F32, 0, NULL, NULL);
  cr_assert_eq(tr_nchunks(&s), 1);
  cr_assert_eq(tr_chunk_extent(&s, key, ext), 1);
  cr_assert_str_eq(tr_format_name(&s), "single");
  /* an empty extent has no chunks */
  int64_t z[2] = {0, 5};
  tr_tensor e = s_meta("E", TR_F32, 2, z, s_ch);
  cr_assert_eq(tr_nchunks(&e), 0);
  /* bytes: shape times element size (s_sh is 10 x 7), as a double past 2^63 */
  cr_assert_eq(tr_tensor_bytes(&t), 10 * 7 * 8.0);
  cr_assert_eq(tr_tensor_bytes(&s), 4.0);
  cr_assert_eq(tr_tensor_bytes(&e), 0.0);
  int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  tr_tensor h = s_meta("H", TR_F32, 2, huge, s_ch);
  cr_assert_eq(tr_tensor_bytes(&h), 4.0 * 1099511627776.0 * 1099511627776.0);
}

/* ---- open / persistence -------------------------------------------------- */

Test(catalog, open_create_close_reopen) {
  tc_db *db = NULL;
  tr_err err;
  tr_tensor t = s_meta("B_1", TR_F32, 2, s_sh, s_ch), got, *list = NULL;
  int n = -1;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  cr_assert_str_eq(tc_dir(db), s_dbdir);
  cr_assert_eq(tc_tensor_create(db, &t, &err), TR_OK, "%s", err.msg);
  cr_assert_gt(t.id, 0);
  cr_assert_eq(t.version, 0);
  cr_assert_str_eq(t.format, "tile");
  tr_tensor a = s_meta("A", TR_F64, 0, NULL, NULL);
  cr_assert_eq(tc_tensor_create(db, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_tensor_create(db, &a, &err), TR_ENAME);
  cr_assert_str_eq(err.msg, "tensor already exists: A");
  /* the directory holds the catalog and nothing else (no chunk files) */
  cr_assert_eq(s_count_others(s_dbdir), 0);
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

/* The connection keeps its prepared statements: the same text prepared
** again after ci_finish is the same statement, reset with its bindings
** cleared; one still in use is never handed out twice (a nested caller
** gets a statement of its own); statements past the room it has are
** finalized when done; and a kept statement left half-stepped does not
** hold a transaction open. */
Test(catalog, prepared_statements_are_kept_and_reused, .timeout = 60) {
  tc_db *db = NULL;
  tr_err err;
  sqlite3_stmt *a, *b, *c;
  const char *sql = "SELECT ?1 + 1";
  char copy[32];
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(ci_prepare(db, sql, &a, &err), TR_OK, "%s", err.msg);
  sqlite3_bind_int(a, 1, 41);
  cr_assert_eq(sqlite3_step(a), SQLITE_ROW);
  cr_assert_eq(sqlite3_column_int(a, 0), 42);
  /* in use: a nested prepare of the same text gets another statement */
  cr_assert_eq(ci_prepare(db, sql, &b, &err), TR_OK, "%s", err.msg);
  cr_assert_neq(a, b);
  ci_finish(db, b);
  ci_finish(db, a);
  /* the same text, from another buffer: the kept one, reset, unbound */
  snprintf(copy, sizeof copy, "%s", sql);
  cr_assert_eq(ci_prepare(db, copy, &c, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(c, a);
  cr_assert_eq(sqlite3_step(c), SQLITE_ROW);
  cr_assert_eq(sqlite3_column_type(c, 0), SQLITE_NULL, "bindings are cleared");
  ci_finish(db, c);
  /* more statements than the connection keeps: the ones past its room
  ** work and are finalized when done */
  sqlite3_stmt *many[CI_STMT_CACHE + 8];
  char text[CI_STMT_CACHE + 8][32];
  for (int i = 0; i < CI_STMT_CACHE + 8; i++) {
    snprintf(text[i], sizeof text[i], "SELECT %d", i);
    cr_assert_eq(ci_prepare(db, text[i], &many[i], &err), TR_OK, "%s", err.msg);
    cr_assert_eq(sqlite3_step(many[i]), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(many[i], 0), i);
  }
  for (int i = 0; i < CI_STMT_CACHE + 8; i++) ci_finish(db, many[i]);
  /* a write after it commits: nothing kept is still stepping */
  cr_assert_eq(ci_exec(db, "BEGIN IMMEDIATE", &err), TR_OK, "%s", err.msg);
  cr_assert_eq(ci_exec(db, "CREATE TABLE kept(x)", &err), TR_OK, "%s", err.msg);
  cr_assert_eq(ci_exec(db, "COMMIT", &err), TR_OK, "%s", err.msg);
  tc_close(&db);
}

/* Tensors the catalog refuses, and why. */
Test(catalog, bad_names_and_shapes) {
  static const struct {
    const char *name;
    int rank;
    int64_t shape[2], chunk[2];
    int code;
  } cases[] = {
      {"", 2, {10, 7}, {4, 3}, TR_ENAME},
      {"1abc", 2, {10, 7}, {4, 3}, TR_ENAME},
      {"a-b", 2, {10, 7}, {4, 3}, TR_ENAME},
      {"a b", 2, {10, 7}, {4, 3}, TR_ENAME},
      {"drop;table", 2, {10, 7}, {4, 3}, TR_ENAME},
      {"A", 2, {10, 7}, {4, 0}, TR_ESHAPE},                         /* chunk 0 */
      {"A", 2, {-1, 7}, {4, 3}, TR_ESHAPE},                         /* negative */
      {"A", 2, {INT64_MAX / 2, INT64_MAX / 2}, {4, 3}, TR_ESHAPE},  /* too large */
      {"A", 9, {10, 7}, {4, 3}, TR_ESHAPE},                         /* rank 9 */
      {"A", 2, {4097, 4096}, {1, 1}, TR_ESHAPE},   /* one chunk over TR_MAX_CHUNKS */
  };
  tc_db *db = tf_db(s_dbdir);
  tr_err err;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tr_tensor t = s_meta(cases[i].name, TR_F32, 2, cases[i].shape, cases[i].chunk);
    t.rank = cases[i].rank;
    cr_assert_eq(tc_tensor_create(db, &t, &err), cases[i].code, "case %zu '%s'", i,
                 cases[i].name);
    if (i == 7) cr_assert(strstr(err.msg, "too large: more than 2^63 elements"), "the limit named: %s", err.msg);
    if (i == 9) cr_assert(strstr(err.msg, "more than 16777216 chunks"), "the limit named: %s", err.msg);
  }
  /* the limit itself is allowed */
  int64_t shape[2] = {4096, 4096}, one[2] = {1, 1};
  tr_tensor t = s_meta("A", TR_F32, 2, shape, one);
  cr_assert_eq(tc_tensor_create(db, &t, &err), TR_OK, "%s", err.msg);
  tc_close(&db);
}

Test(catalog, not_a_database) {
  tc_db *db = NULL;
  tr_err err;
  char junk[5000];
  /* a regular file where the directory should be */
  const char *p = tf_path("file");
  tf_write(p, "hello\n", 6);
  cr_assert_neq(tc_open(p, &db, &err), TR_OK);
  cr_assert_null(db);
  cr_assert(strstr(err.msg, "not a directory"), "%s", err.msg);
  /* a catalog.db that is not SQLite */
  mkdir(tf_path("junk"), 0755);
  junk[0] = '\0';
  for (int i = 0; i < 200; i++) strcat(junk, "this is not a database\n");
  tf_write(tf_path("junk/catalog.db"), junk, strlen(junk));
  cr_assert_eq(tc_open(tf_path("junk"), &db, &err), TR_ECORRUPT, "%s", err.msg);
  cr_assert(strstr(err.msg, "not a tradb catalog"), "%s", err.msg);
  /* an SQLite file of something else */
  mkdir(tf_path("other"), 0755);
  sqlite3 *s;
  cr_assert_eq(sqlite3_open(tf_path("other/catalog.db"), &s), SQLITE_OK);
  cr_assert_eq(sqlite3_exec(s, "CREATE TABLE x(a)", NULL, NULL, NULL),
               SQLITE_OK);
  sqlite3_close(s);
  cr_assert_neq(tc_open(tf_path("other"), &db, &err), TR_OK);
  cr_assert(strstr(err.msg, "not a tradb catalog"), "%s", err.msg);
  /* a directory with unrelated content is fine */
  mkdir(tf_path("plain"), 0755);
  tf_write(tf_path("plain/readme.txt"), "", 0);
  db = tf_db(tf_path("plain"));
  tc_close(&db);
  cr_assert_eq(access(tf_path("plain/readme.txt"), F_OK), 0);
}

/* What a shell's .output must not cut: any file in the open database's
** directory (by any path to it: a name not there yet, "..", a symbolic
** link), and any database's catalog or chunk file wherever it is; other
** files are the user's to overwrite. */
Test(catalog, files_holding_a_databases_data_are_named) {
  char why[256] = "", link[TF_PATH], other[TF_PATH], chunk[TF_PATH];
  tc_db *db = tf_db(s_dbdir);
  tc_close(&db);
  snprintf(other, sizeof other, "%s", tf_path("elsewhere"));
  mkdir(other, 0755);
  cr_assert_eq(tc_holds_data(s_dbdir, tf_path("db/nested/catalog.db"), why, sizeof why), 1);
  cr_assert(strstr(why, "in the database directory"), "%s", why);
  cr_assert_eq(tc_holds_data(s_dbdir, tf_path("db/nested/catalog.db-journal"), why, sizeof why), 1);
  mkdir(tf_path("db/nested/workers"), 0755); /* where local workers keep their chunks */
  cr_assert_eq(tc_holds_data(s_dbdir, tf_path("db/nested/workers/new.txt"), why, sizeof why), 1);
  cr_assert_eq(tc_holds_data(s_dbdir, tf_path("elsewhere/../db/nested/x"), why, sizeof why), 1);
  snprintf(link, sizeof link, "%s", tf_path("elsewhere/link"));
  cr_assert_eq(symlink(tf_path("db/nested/catalog.db"), link), 0);
  cr_assert_eq(tc_holds_data(s_dbdir, link, why, sizeof why), 1);
  /* another database's catalog, seen with no database open */
  cr_assert_eq(tc_holds_data(NULL, tf_path("db/nested/catalog.db"), why, sizeof why), 1);
  cr_assert(strstr(why, "SQLite"), "%s", why);
  /* a chunk file (its header: catalog/chunkfile.h) */
  snprintf(chunk, sizeof chunk, "%s", tf_path("elsewhere/0123.chk"));
  char head[64] = "TRADBCHK";
  tf_write(chunk, head, sizeof head);
  cr_assert_eq(tc_holds_data(s_dbdir, chunk, why, sizeof why), 1);
  cr_assert(strstr(why, "chunk file"), "%s", why);
  /* the user's own files, and names not there yet, outside the database */
  tf_write(tf_path("elsewhere/results.csv"), "1,2\n", 4);
  cr_assert_eq(tc_holds_data(s_dbdir, tf_path("elsewhere/results.csv"), why, sizeof why), 0);
  cr_assert_eq(tc_holds_data(s_dbdir, tf_path("elsewhere/new.txt"), why, sizeof why), 0);
  cr_assert_eq(tc_holds_data(s_dbdir, tf_path("db/nestedness.txt"), why, sizeof why), 0);
  cr_assert_eq(tc_holds_data(s_dbdir, "/dev/null", why, sizeof why), 0);
  cr_assert_eq(tc_holds_data(NULL, tf_path("no/such/dir/x.txt"), why, sizeof why), 0);
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
  int64_t a = s_site(db, "tcp://a");
  tr_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tr_tensor c = s_commit(db, &t, 100, a, NULL, NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    tc_db *other = NULL;
    tr_err e2;
    int rc = tc_open(s_dbdir, &other, &e2);
    _exit(rc == TR_EIO && other == NULL && strstr(e2.msg, "in use") ? 0 : 1);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  s_check(db, &c, 100, a); /* the holder is unaffected */
  tc_close(&db);
  /* released on close */
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tc_close(&db);
}

/* ---- committed versions -------------------------------------------------- */

Test(catalog, catalog_rows) {
  tc_db *db = NULL;
  tr_err err;
  char p[512];
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  int64_t a = s_site(db, "tcp://a");
  tr_tensor t = s_meta("A", TR_F32, 2, s_sh, s_ch);
  s_commit(db, &t, 100, a, NULL, NULL);
  tc_close(&db);
  snprintf(p, sizeof p, "%s/catalog.db", s_dbdir);
  sqlite3 *s;
  sqlite3_stmt *st;
  cr_assert_eq(sqlite3_open(p, &s), SQLITE_OK);
  cr_assert_eq(sqlite3_prepare_v2(s, "SELECT (SELECT count(*) FROM "
               "chunk_replicas WHERE site_id = ?1), (SELECT count(*) FROM "
               "sites), (SELECT shape || '/' || chunk || '/' || dtype FROM "
               "tensors), (SELECT key || '/' || chunk_id || '/' || nbytes "
               "FROM chunks WHERE lin = 5), (SELECT count(*) FROM "
               "pragma_table_info('chunks') WHERE name = 'file')",
               -1, &st, NULL), SQLITE_OK);
  sqlite3_bind_int64(st, 1, a);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  cr_assert_eq(sqlite3_column_int(st, 0), 9);
  cr_assert_eq(sqlite3_column_int(st, 1), 1); /* only the worker */
  cr_assert_str_eq((const char *)sqlite3_column_text(st, 2), "10,7/4,3/f32");
  cr_assert_str_eq((const char *)sqlite3_column_text(st, 3), "1,2/105/16");
  cr_assert_eq(sqlite3_column_int(st, 4), 0); /* no local chunk files */
  sqlite3_finalize(st);
  /* every chunk row has a chunk id */
  cr_assert_eq(sqlite3_exec(s, "INSERT INTO chunks(tensor_id, key, lin, "
                            "nbytes, checksum) VALUES(1, '', 99, 0, "
                            "'0000000000000000')", NULL, NULL, NULL),
               SQLITE_CONSTRAINT);
  sqlite3_close(s);
}

Test(catalog, replace_with_different_shape) {
  tc_db *db = NULL;
  tr_err err;
  uint64_t *old = NULL;
  int64_t nold = -1, bytes = -1;
  tc_chunkloc *l = NULL;
  int64_t n = -1;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  int64_t a = s_site(db, "tcp://a");
  tr_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tr_tensor c1 = s_commit(db, &t, 100, a, NULL, NULL);
  cr_assert_gt(c1.id, 0);
  cr_assert_eq(c1.version, 1);
  cr_assert_str_eq(c1.format, "tile");
  cr_assert_eq(tc_tensor_bytes(db, &c1, &bytes, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(bytes, 10 * 7 * 8);
  int64_t sh[1] = {6}, ch[1] = {4};
  tr_tensor u = s_meta("A", TR_F32, 1, sh, ch);
  u.shape[1] = u.chunk[1] = 99; /* past the rank: ignored and cleared */
  u.id = 12345;
  u.version = 77;
  tr_tensor c2 = s_commit(db, &u, 200, a, &old, &nold);
  tr_tensor want = s_meta("A", TR_F32, 1, sh, ch);
  want.id = c1.id;
  want.version = 2;
  snprintf(want.format, sizeof want.format, "%s", tr_format_name(&want));
  s_same_entry(&c2, &want);
  /* the whole old version is handed back for dropping */
  cr_assert_eq(nold, 9);
  for (int64_t i = 0; i < nold; i++)
    cr_assert(old[i] >= 100 && old[i] < 109, "%llu",
              (unsigned long long)old[i]);
  free(old);
  s_check(db, &c2, 200, a);
  cr_assert_eq(tc_tensor_bytes(db, &c2, &bytes, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(bytes, 24);
  /* stale descriptions are refused: the old version, and the current
  ** version with another type, shape or chunk shape */
  cr_assert_eq(tc_chunk_locations(db, &c1, &l, &n, &err), TR_ENOTFOUND);
  cr_assert_str_eq(err.msg, "tensor A changed or was dropped since it was "
                   "looked up");
  cr_assert_null(l);
  cr_assert_eq(n, 0);
  tr_tensor bad = c2;
  bad.dtype = TR_F64;
  cr_assert_eq(tc_chunk_locations(db, &bad, &l, &n, &err), TR_ENOTFOUND);
  bad = c2;
  bad.shape[0] = 8;
  cr_assert_eq(tc_chunk_locations(db, &bad, &l, &n, &err), TR_ENOTFOUND);
  bad = c2;
  bad.chunk[0] = 3;
  cr_assert_eq(tc_chunk_locations(db, &bad, &l, &n, &err), TR_ENOTFOUND);
  tc_close(&db);
  /* persists */
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  tr_tensor g;
  cr_assert_eq(tc_tensor_get(db, "A", &g, &err), TR_OK, "%s", err.msg);
  s_same_entry(&g, &want);
  s_check(db, &g, 200, a);
  tc_close(&db);
}

/* A commit left unsynced (for a version held in workers' memory only)
** hands back the old version and its size like any, says it is not yet
** durable until tc_sync or an ordinary commit, and survives the process
** that made it being killed before either. */
Test(catalog, unsynced_commit_until_synced_and_after_a_kill) {
  tc_db *db = NULL;
  tr_err err;
  uint64_t *old = NULL;
  int64_t nold = -1;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  int64_t a = s_site(db, "tcp://a");
  tr_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tr_tensor c1 = s_commit(db, &t, 100, a, NULL, NULL);
  cr_assert_eq(tc_unsynced_since(db), 0);
  cr_assert_eq(s_commit_unsynced(db, &c1, 200, a, &old, &nold), 10 * 7 * 8);
  cr_assert_eq(nold, 9);
  for (int64_t i = 0; i < nold; i++) cr_assert(old[i] >= 100 && old[i] < 109);
  free(old);
  double since = tc_unsynced_since(db);
  cr_assert_gt(since, 0);
  /* a second one keeps the time of the first */
  cr_assert_eq(s_commit_unsynced(db, &c1, 300, a, NULL, NULL), 10 * 7 * 8);
  cr_assert_eq(tc_unsynced_since(db), since);
  cr_assert_eq(tc_sync(db, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_unsynced_since(db), 0);
  cr_assert_eq(tc_sync(db, &err), TR_OK, "%s", err.msg); /* nothing to do */
  s_commit_unsynced(db, &c1, 400, a, NULL, NULL);
  cr_assert_gt(tc_unsynced_since(db), 0);
  /* an ordinary commit syncs the log, and the unsynced ones before it */
  s_commit(db, &c1, 500, a, NULL, NULL);
  cr_assert_eq(tc_unsynced_since(db), 0);
  tr_tensor g;
  cr_assert_eq(tc_tensor_get(db, "A", &g, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(g.version, 5);
  s_check(db, &g, 500, a);
  tc_close(&db);
  /* killed right after an unsynced commit: the next open has it */
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    tc_db *d = NULL;
    tr_tensor m;
    if (tc_open(s_dbdir, &d, &err) || tc_tensor_get(d, "A", &m, &err)) _exit(2);
    tc_chunkloc *l = s_locs(&m, 600, a);
    uint64_t bytes;
    if (tc_commit_placed_unsynced(d, &m, l, tr_nchunks(&m), NULL, NULL, &bytes, &err)) _exit(3);
    _exit(tc_unsynced_since(d) > 0 ? 0 : 4); /* no close, no sync */
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed: %d", status);
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_unsynced_since(db), 0);
  cr_assert_eq(tc_tensor_get(db, "A", &g, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(g.version, 6);
  s_check(db, &g, 600, a);
  tc_close(&db);
}

Test(catalog, version0_tensors) {
  tc_db *db = NULL;
  tr_err err;
  tc_chunkloc *l = NULL;
  int64_t n = -1, bytes = -1;
  uint64_t *old = NULL;
  int64_t nold = -1;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  int64_t a = s_site(db, "tcp://a");
  tr_tensor t = s_meta("Z", TR_F32, 2, s_sh, s_ch);
  cr_assert_eq(tc_tensor_create(db, &t, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(t.version, 0);
  /* declared only: no chunks */
  cr_assert_eq(tc_chunk_locations(db, &t, &l, &n, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(n, 0);
  free(l);
  cr_assert_eq(tc_tensor_bytes(db, &t, &bytes, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(bytes, 0);
  /* a declared tensor can then be written: same entry, version 1 */
  tr_tensor c = s_commit(db, &t, 300, a, &old, &nold);
  cr_assert_eq(nold, 0);
  free(old);
  cr_assert_eq(c.id, t.id);
  cr_assert_eq(c.version, 1);
  s_check(db, &c, 300, a);
  /* the stale version-0 description no longer reads as empty */
  l = NULL;
  cr_assert_eq(tc_chunk_locations(db, &t, &l, &n, &err), TR_ENOTFOUND);
  cr_assert_null(l);
  /* a description never stored has no chunks; with a version it is bad */
  tr_tensor u = s_meta("U", TR_F32, 2, s_sh, s_ch);
  n = -1;
  cr_assert_eq(tc_chunk_locations(db, &u, &l, &n, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(n, 0);
  free(l);
  u.version = 3;
  cr_assert_eq(tc_chunk_locations(db, &u, &l, &n, &err), TR_EINVAL);
  tc_close(&db);
}

Test(catalog, rank0_and_empty_tensors) {
  tc_db *db = NULL;
  tr_err err;
  tc_chunkloc *l = NULL;
  int64_t n = -1, bytes = -1;
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  int64_t a = s_site(db, "tcp://a");
  tr_tensor s = s_meta("S", TR_F64, 0, NULL, NULL);
  tr_tensor cs = s_commit(db, &s, 500, a, NULL, NULL);
  cr_assert_eq(cs.version, 1);
  cr_assert_str_eq(cs.format, "single");
  s_check(db, &cs, 500, a);
  cr_assert_eq(tc_tensor_bytes(db, &cs, &bytes, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(bytes, 8);
  int64_t sh[2] = {0, 5};
  tr_tensor e = s_meta("E", TR_F32, 2, sh, s_ch);
  tr_tensor ce = s_commit(db, &e, 600, a, NULL, NULL);
  cr_assert_eq(ce.version, 1);
  cr_assert_eq(tc_tensor_bytes(db, &ce, &bytes, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(bytes, 0);
  tc_close(&db);
  cr_assert_eq(tc_open(s_dbdir, &db, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_tensor_get(db, "S", &s, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s.rank, 0);
  cr_assert_eq(s.version, 1);
  s_check(db, &s, 500, a);
  cr_assert_eq(tc_tensor_get(db, "E", &e, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(e.version, 1);
  cr_assert_eq(tc_chunk_locations(db, &e, &l, &n, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(n, 0);
  free(l);
  tc_close(&db);
}

Test(catalog, transient_database_removed_on_close) {
  tc_db *db = NULL;
  tr_err err;
  char dir[512];
  setenv("TMPDIR", tf_dir, 1);
  cr_assert_eq(tc_open(NULL, &db, &err), TR_OK, "%s", err.msg);
  snprintf(dir, sizeof dir, "%s", tc_dir(db));
  cr_assert_eq(strncmp(dir, tf_dir, strlen(tf_dir)), 0, "%s", dir);
  cr_assert(strstr(dir, "/tradb-"), "%s", dir);
  int64_t a = s_site(db, "tcp://a");
  tr_tensor t = s_meta("A", TR_F64, 2, s_sh, s_ch);
  tr_tensor c = s_commit(db, &t, 100, a, NULL, NULL);
  s_check(db, &c, 100, a);
  cr_assert_eq(access(dir, F_OK), 0);
  tc_close(&db);
  cr_assert_neq(access(dir, F_OK), 0);
  cr_assert_eq(errno, ENOENT);
}
