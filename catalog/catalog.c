/*
** catalog/catalog.c - the SQLite catalog of a tradb database: opening and
** locking the database directory, the schema, tensor entries (declaring,
** looking up, replacing and deleting them), and the chunk-grid helpers.
** Chunk placement (sites, replicas, commits of new versions) is placed.c.
**
** One process holds a database at a time: the connection runs in SQLite's
** EXCLUSIVE locking mode, so a second process gets "in use" after the busy
** timeout.
*/
#include "config.h"
#include "catalog/catalog.h"
#include "catalog/catalog_int.h"
#include "catalog/chunkfile.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define S_BUSY_MS 2000     /* how long to wait for another process's lock */

/* ---- small helpers ------------------------------------------------------- */

/* snprintf into a path buffer; TR_EINVAL if it does not fit. */
int ci_path(char *buf, size_t size, tr_err *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= size)
    return tr_seterr(err, TR_EINVAL, "path too long: %.200s...", buf);
  return TR_OK;
}

/* "4096,4096" ("" for rank 0): how shapes are stored. */
void ci_dims_str(char *buf, size_t size, int rank, const int64_t *v) {
  size_t len = 0;
  buf[0] = '\0';
  for (int d = 0; d < rank && len < size; d++)
    len += (size_t)snprintf(buf + len, size - len, d ? ",%" PRId64 : "%" PRId64,
                            v[d]);
}

/* Parse exactly `rank` comma-separated non-negative integers. */
static int s_dims_parse(const char *s, int rank, int64_t *out) {
  if (!s) return rank == 0 ? 0 : -1;
  if (rank == 0) return *s == '\0' ? 0 : -1;
  for (int d = 0; d < rank; d++) {
    char *end;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || v < 0) return -1;
    out[d] = v;
    s = end;
    if (d + 1 < rank) {
      if (*s != ',') return -1;
      s++;
    }
  }
  return *s == '\0' ? 0 : -1;
}

static int s_is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}


static int s_name_ok(const char *name) {
  size_t n = strnlen(name, TR_NAME_MAX);
  if (n == 0 || n >= TR_NAME_MAX) return 0;
  if (!(name[0] == '_' || (name[0] >= 'A' && name[0] <= 'Z') ||
        (name[0] >= 'a' && name[0] <= 'z')))
    return 0;
  for (size_t i = 1; i < n; i++) {
    char c = name[i];
    if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
          (c >= '0' && c <= '9')))
      return 0;
  }
  return 1;
}

/* Check a tensor description before it reaches the catalog or the disk:
** name, type, rank, non-negative shape, positive chunk shape, and sizes
** that fit in 64 bits (the whole tensor and one chunk, in bytes). */
int ci_check_meta(const tr_tensor *t, tr_err *err) {
  int64_t n = (int64_t)tr_dtype_size(t->dtype), c = n;
  if (!s_name_ok(t->name))
    return tr_seterr(err, TR_ENAME,
                     "invalid tensor name '%.*s' (letters, digits and _, not "
                     "starting with a digit, at most %d characters)",
                     TR_NAME_MAX, t->name, TR_NAME_MAX - 1);
  if (t->dtype != TR_F32 && t->dtype != TR_F64)
    return tr_seterr(err, TR_ETYPE, "tensor %s: unknown element type %d",
                     t->name, (int)t->dtype);
  if (t->rank < 0 || t->rank > TR_MAX_RANK)
    return tr_seterr(err, TR_ESHAPE, "tensor %s: rank %d is not in 0..%d",
                     t->name, t->rank, TR_MAX_RANK);
  for (int d = 0; d < t->rank; d++) {
    if (t->shape[d] < 0)
      return tr_seterr(err, TR_ESHAPE, "tensor %s: negative extent %" PRId64
                       " in dimension %d", t->name, t->shape[d], d);
    if (t->chunk[d] < 1)
      return tr_seterr(err, TR_ESHAPE, "tensor %s: chunk extent %" PRId64
                       " in dimension %d must be at least 1", t->name,
                       t->chunk[d], d);
    int64_t ce = t->chunk[d] < t->shape[d] ? t->chunk[d] : t->shape[d];
    if (__builtin_mul_overflow(n, t->shape[d], &n) || __builtin_mul_overflow(c, ce, &c))
      return tr_seterr(err, TR_ESHAPE, "tensor %s is too large: more than 2^63 elements", t->name);
  }
  if ((uint64_t)c > (uint64_t)SIZE_MAX)
    return tr_seterr(err, TR_ESHAPE, "tensor %s: chunks are too large",
                     t->name);
  return TR_OK;
}

/* fsync a directory so that renames and unlinks in it are durable. */
int ci_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int e = fsync(fd) != 0 ? errno : 0;
  close(fd);
  return e;
}

/* mkdir -p: the parents with mode 0755 (less the umask), as mkdir -p
** makes them; dir itself 0700 (see s_owner_only). */
static int s_mkdir_p(const char *dir, tr_err *err) {
  char buf[CI_PATH];
  struct stat st;
  int rc = ci_path(buf, sizeof buf, err, "%s", dir);
  if (rc) return rc;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return tr_seterr(err, TR_EIO, "cannot create database directory '%s': "
                       "%s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0700) != 0 && errno != EEXIST)
    return tr_seterr(err, TR_EIO, "cannot create database directory '%s': %s",
                     dir, strerror(errno));
  if (stat(dir, &st) != 0)
    return tr_seterr(err, TR_EIO, "cannot open database '%s': %s", dir,
                     strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return tr_seterr(err, TR_EINVAL,
                     "cannot open database '%s': not a directory", dir);
  return TR_OK;
}

/* A database is its owner's alone (a 0700 directory, 0600 files) whatever
** the umask, as ssh's keys and sqlite3 under a strict umask are: its
** chunks are the user's data.  The directory is made 0700; catalog.db is
** created 0600 here, before SQLite opens it, and SQLite gives the -wal and
** -shm files it creates the mode of the database file.  A directory that
** already holds a catalog (made by an older tradb, 0755) is tightened if
** it is ours, which takes its old files out of others' reach too; a
** directory of the user's without a catalog is left as it is. */
static int s_owner_only(const char *dir, const char *catalog, tr_err *err) {
  struct stat st;
  if (stat(catalog, &st) == 0) {
    if (stat(dir, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 077))
      (void)chmod(dir, st.st_mode & 07700); /* best effort: it still opens */
    return TR_OK;
  }
  int fd = open(catalog, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST)
    return tr_seterr(err, TR_EIO, "cannot create catalog '%s': %s", catalog,
                     strerror(errno));
  if (fd >= 0) close(fd);
  return TR_OK;
}

static int s_rm_entry(const char *path, const struct stat *st, int flag,
                      struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

/* 64 random bits: cluster-wide chunk ids. */
uint64_t ci_random64(void) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static uint64_t counter;
  uint64_t v = 0;
  ssize_t got = -1;
  do got = getrandom(&v, sizeof v, 0);
  while (got < 0 && errno == EINTR);
  if (got != (ssize_t)sizeof v) {
    /* No kernel randomness: time, pid and a counter still make
    ** collisions unlikely. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&mu);
    uint64_t c = ++counter;
    pthread_mutex_unlock(&mu);
    v = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^
        ((uint64_t)getpid() << 40) ^ (c * 0x9E3779B97F4A7C15ull);
  }
  return v;
}

/* ---- SQLite helpers ------------------------------------------------------ */

/* Turn the connection's last error into a tr_err: BUSY/LOCKED means
** another process has the database; CORRUPT/NOTADB means a damaged file. */
int ci_sqlfail(tc_db *db, tr_err *err, const char *what) {
  int ec = sqlite3_errcode(db->sql) & 0xff;
  const char *msg = sqlite3_errmsg(db->sql);
  if (ec == SQLITE_BUSY || ec == SQLITE_LOCKED)
    return tr_seterr(err, TR_EIO,
                     "database '%s' is in use by another process (%s)",
                     db->dir, msg);
  if (ec == SQLITE_CORRUPT || ec == SQLITE_NOTADB)
    return tr_seterr(err, TR_ECORRUPT, "catalog %s/catalog.db is damaged or "
                     "not a tradb catalog: %s (%s)", db->dir, msg, what);
  return tr_seterr(err, ec == SQLITE_NOMEM ? TR_ENOMEM : TR_EIO,
                   "catalog %s: %s (database '%s')", what, msg, db->dir);
}

int ci_grow(void *pv, int64_t cnt, int64_t *cap, size_t elem, tr_err *err) {
  void **v = pv;
  if (cnt < *cap) return TR_OK;
  int64_t ncap = *cap ? *cap * 2 : 16;
  void *p = realloc(*v, (size_t)ncap * elem);
  if (!p) return tr_seterr(err, TR_ENOMEM, "out of memory");
  *v = p;
  *cap = ncap;
  return TR_OK;
}

int ci_exec(tc_db *db, const char *sql, tr_err *err) {
  if (sqlite3_exec(db->sql, sql, NULL, NULL, NULL) != SQLITE_OK)
    return ci_sqlfail(db, err, sql);
  return TR_OK;
}

/* A kept statement of the same text when one is free (the text, not its
** address, decides: callers may build SQL anywhere); else a new one,
** kept while there is room. */
int ci_prepare(tc_db *db, const char *sql, sqlite3_stmt **st,
               tr_err *err) {
  int slot = -1;
  for (int i = 0; i < CI_STMT_CACHE; i++) {
    if (!db->stmt[i].st) {
      if (slot < 0) slot = i;
    } else if (!db->stmt[i].busy && !strcmp(sqlite3_sql(db->stmt[i].st), sql)) {
      db->stmt[i].busy = 1;
      *st = db->stmt[i].st;
      return TR_OK;
    }
  }
  if (sqlite3_prepare_v2(db->sql, sql, -1, st, NULL) != SQLITE_OK) {
    *st = NULL;
    return ci_sqlfail(db, err, "prepare");
  }
  if (slot >= 0 && *st) {
    db->stmt[slot].st = *st;
    db->stmt[slot].busy = 1;
  }
  return TR_OK;
}

void ci_finish(tc_db *db, sqlite3_stmt *st) {
  if (!st) return;
  for (int i = 0; i < CI_STMT_CACHE; i++)
    if (db->stmt[i].st == st) {
      sqlite3_reset(st);
      sqlite3_clear_bindings(st);
      db->stmt[i].busy = 0;
      return;
    }
  sqlite3_finalize(st);
}

/* Roll back whatever transaction is open; used on failure paths. */
void ci_rollback(tc_db *db) {
  if (!sqlite3_get_autocommit(db->sql))
    sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
}

/* Columns id,name,dtype,rank,shape,chunk,format,version of a tensors row. */
#define S_TCOLS "id, name, dtype, rank, shape, chunk, format, version"

static int s_row_tensor(tc_db *db, sqlite3_stmt *st, tr_tensor *t,
                        tr_err *err) {
  const char *name = (const char *)sqlite3_column_text(st, 1);
  const char *dtype = (const char *)sqlite3_column_text(st, 2);
  const char *format = (const char *)sqlite3_column_text(st, 6);
  memset(t, 0, sizeof *t);
  t->id = sqlite3_column_int64(st, 0);
  t->rank = sqlite3_column_int(st, 3);
  t->version = sqlite3_column_int64(st, 7);
  if (!name || !s_name_ok(name) || !dtype ||
      tr_dtype_parse(dtype, &t->dtype) != TR_OK || t->rank < 0 ||
      t->rank > TR_MAX_RANK || t->version < 0 ||
      s_dims_parse((const char *)sqlite3_column_text(st, 4), t->rank,
                   t->shape) != 0 ||
      s_dims_parse((const char *)sqlite3_column_text(st, 5), t->rank,
                   t->chunk) != 0)
    return tr_seterr(err, TR_ECORRUPT,
                     "catalog %s/catalog.db: malformed entry for tensor "
                     "'%.64s'", db->dir, name ? name : "?");
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->format, sizeof t->format, "%s", format ? format : "");
  if (ci_check_meta(t, NULL) != TR_OK)
    return tr_seterr(err, TR_ECORRUPT,
                     "catalog %s/catalog.db: malformed entry for tensor %s",
                     db->dir, t->name);
  return TR_OK;
}

/* Parse a stored checksum (16 hex digits). */
int ci_sum_parse(const char *s, uint64_t *out) {
  uint64_t v = 0;
  if (!s || strlen(s) != 16) return -1;
  for (int i = 0; i < 16; i++) {
    char c = s[i];
    if (!s_is_hex(c)) return -1;
    v = (v << 4) | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  *out = v;
  return 0;
}

/* ---- open / close -------------------------------------------------------- */

static const char *const s_schema_sql =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE tensors(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
    " dtype TEXT, rank INT, shape TEXT, chunk TEXT, format TEXT,"
    " version INT);"
    "CREATE TABLE chunks(tensor_id INT REFERENCES tensors(id) ON DELETE"
    " CASCADE, key TEXT, lin INT, nbytes INT, checksum TEXT,"
    " chunk_id INTEGER NOT NULL, PRIMARY KEY(tensor_id, lin));"
    "CREATE INDEX chunks_by_id ON chunks(chunk_id);"
    "CREATE TABLE sites(id INTEGER PRIMARY KEY, endpoint TEXT UNIQUE,"
    " state TEXT);"
    "CREATE TABLE chunk_replicas(tensor_id INT, lin INT,"
    " site_id INT REFERENCES sites(id),"
    " PRIMARY KEY(tensor_id, lin, site_id),"
    " FOREIGN KEY(tensor_id, lin) REFERENCES chunks(tensor_id, lin)"
    " ON DELETE CASCADE);"
    "CREATE INDEX replicas_by_site ON chunk_replicas(site_id);"
    "CREATE TABLE settings(name TEXT PRIMARY KEY, value TEXT);";

/* Read the database id into db->id, making one for a new catalog (and
** for one made before databases had ids).  Inside s_schema's transaction. */
static int s_db_id(tc_db *db, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc = ci_prepare(db, "SELECT value FROM meta WHERE key = 'db_id'", &st, err);
  if (rc) return rc;
  int s = sqlite3_step(st);
  const char *v = s == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
  if (v && (ci_sum_parse(v, &db->id) != 0 || db->id == 0))
    rc = tr_seterr(err, TR_ECORRUPT, "'%s/catalog.db' has a malformed database id '%.40s'",
                   db->dir, v);
  else if (s != SQLITE_ROW && s != SQLITE_DONE)
    rc = ci_sqlfail(db, err, "reading the database id");
  ci_finish(db, st);
  if (rc || v) return rc;
  char sql[128];
  do db->id = ci_random64();
  while (db->id == 0);
  snprintf(sql, sizeof sql, "INSERT INTO meta(key, value) VALUES('db_id', '%016" PRIx64 "')",
           db->id);
  return ci_exec(db, sql, err);
}

/* Create the schema in an empty catalog, or check the version of an
** existing one.  Runs in one write transaction, which also takes the
** exclusive lock that keeps other processes out until tc_close(). */
static int s_schema(tc_db *db, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc, s;
  if ((rc = ci_exec(db, "BEGIN IMMEDIATE", err))) return rc;
  if ((rc = ci_prepare(db,
                       "SELECT (SELECT count(*) FROM sqlite_master WHERE "
                       "type = 'table' AND name = 'meta'), "
                       "(SELECT count(*) FROM sqlite_master)",
                       &st, err)))
    goto done;
  if ((s = sqlite3_step(st)) != SQLITE_ROW) {
    rc = ci_sqlfail(db, err, "reading the schema");
    goto done;
  }
  int has_meta = sqlite3_column_int(st, 0) > 0;
  int nobjects = sqlite3_column_int(st, 1);
  ci_finish(db, st);
  st = NULL;
  if (!has_meta) {
    if (nobjects > 0) {
      rc = tr_seterr(err, TR_EINVAL, "'%s/catalog.db' is not a tradb catalog "
                     "(it holds other tables)", db->dir);
      goto done;
    }
    char sql[128];
    if ((rc = ci_exec(db, s_schema_sql, err))) goto done;
    snprintf(sql, sizeof sql,
             "INSERT INTO meta(key, value) VALUES('schema_version', '%d')",
             TC_SCHEMA_VERSION);
    if ((rc = ci_exec(db, sql, err))) goto done;
  } else {
    if ((rc = ci_prepare(db, "SELECT value FROM meta WHERE key = "
                         "'schema_version'", &st, err)))
      goto done;
    s = sqlite3_step(st);
    if (s != SQLITE_ROW && s != SQLITE_DONE) {
      rc = ci_sqlfail(db, err, "reading the schema version");
      goto done;
    }
    const char *v = s == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0)
                                    : NULL;
    char *end = NULL;
    long ver = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end != '\0' || ver < 1) {
      rc = tr_seterr(err, TR_ECORRUPT,
                     "'%s/catalog.db' has an unknown schema version '%.40s'",
                     db->dir, v ? v : "(none)");
      goto done;
    }
    if (ver > TC_SCHEMA_VERSION) {
      rc = tr_seterr(err, TR_EINVAL,
                     "database '%s' has schema version %ld, newer than this "
                     "tradb supports (%d); use a newer tradb",
                     db->dir, ver, TC_SCHEMA_VERSION);
      goto done;
    }
    ci_finish(db, st);
    st = NULL;
    /* A version-1 catalog must have every table; catch a damaged one now
    ** rather than on the first query. */
    if ((rc = ci_prepare(db, "SELECT t.id, c.lin, c.chunk_id, s.id, "
                         "r.site_id, g.value FROM tensors t, chunks c, sites s,"
                         " chunk_replicas r, settings g LIMIT 0", &st, err))) {
      tr_seterr(err, TR_ECORRUPT, "'%s/catalog.db' is damaged: %s", db->dir,
                sqlite3_errmsg(db->sql));
      rc = TR_ECORRUPT;
      goto done;
    }
  }
  ci_finish(db, st);
  st = NULL;
  if ((rc = s_db_id(db, err))) goto done;
  /* Added after version 1 without a new version: a catalog made before
  ** simply has no declared chunk shapes yet. */
  if ((rc = ci_exec(db, "CREATE TABLE IF NOT EXISTS declared_chunks(name TEXT PRIMARY KEY,"
                    " chunk TEXT)", err)))
    goto done;
  rc = ci_exec(db, "COMMIT", err);
done:
  ci_finish(db, st);
  if (rc) ci_rollback(db);
  return rc;
}

/* Is there a chunk file anywhere below DIR/workers (nftw callback)? */
static int s_chunk_file(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  size_t n = strlen(path);
  (void)ftw;
  return flag == FTW_F && S_ISREG(st->st_mode) && n > 4 && !strcmp(path + n - 4, ".chk");
}

/* A catalog that is missing or empty is made afresh, unless the local
** workers' stores under dir hold chunks: then they are this database's
** data, and a new catalog would make every one of them a leftover. */
static int s_check_fresh(const char *dir, const char *catalog, tr_err *err) {
  char wdir[CI_PATH];
  struct stat st;
  int exists = stat(catalog, &st) == 0;
  if (exists && st.st_size > 0) return TR_OK;
  if (ci_path(wdir, sizeof wdir, NULL, "%s/" TC_LOCAL_WORKERS_DIR, dir) ||
      nftw(wdir, s_chunk_file, 16, FTW_PHYS) != 1)
    return TR_OK;
  return tr_seterr(err, TR_ECORRUPT,
                   "database '%s': its catalog (catalog.db) is %s, but its local workers hold "
                   "chunk files in '%s'; tradb will not start a new catalog over them (put "
                   "catalog.db back, or move '%s' away to start an empty database)",
                   dir, exists ? "empty" : "missing", wdir, wdir);
}

int tc_open(const char *dir, tc_db **out, tr_err *err) {
  tc_db *db = NULL;
  char path[CI_PATH];
  struct stat st;
  int rc = TR_OK;
  if (!out) return tr_seterr(err, TR_EINVAL, "tc_open: no result pointer");
  *out = NULL;
  if (dir && !*dir)
    return tr_seterr(err, TR_EINVAL, "empty database directory name");
  if (!(db = calloc(1, sizeof *db)))
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  if (!dir) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    if ((rc = ci_path(path, sizeof path, err, "%s/tradb-XXXXXX", tmp)))
      goto fail;
    if (!mkdtemp(path)) {
      rc = tr_seterr(err, TR_EIO, "cannot create a temporary database in "
                     "'%s': %s", tmp, strerror(errno));
      goto fail;
    }
    db->transient = 1;
    dir = path;
  } else if ((rc = s_mkdir_p(dir, err))) {
    goto fail;
  }
  if (!(db->dir = strdup(dir))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto fail;
  }
  /* dir may point into path (transient database): use the copy. */
  if ((rc = ci_path(path, sizeof path, err, "%s/catalog.db", db->dir)))
    goto fail;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    rc = tr_seterr(err, TR_EINVAL, "'%s' is not a tradb database ('%s' is "
                   "not a file)", db->dir, path);
    goto fail;
  }
  if (!db->transient && (rc = s_check_fresh(db->dir, path, err))) goto fail;
  if ((rc = s_owner_only(db->dir, path, err))) goto fail;
  if (sqlite3_open_v2(path, &db->sql,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                          SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK) {
    rc = tr_seterr(err, TR_EIO, "cannot open catalog '%s': %s", path,
                   db->sql ? sqlite3_errmsg(db->sql) : "out of memory");
    goto fail;
  }
  sqlite3_extended_result_codes(db->sql, 1);
  if (sqlite3_busy_timeout(db->sql, S_BUSY_MS) != SQLITE_OK) {
    rc = ci_sqlfail(db, err, "busy timeout");
    goto fail;
  }
  /* EXCLUSIVE before WAL: SQLite then keeps the WAL index in heap memory
  ** and holds the file lock until close (see the top of this file). */
  if ((rc = ci_exec(db, "PRAGMA locking_mode = EXCLUSIVE", err)) ||
      (rc = ci_exec(db, "PRAGMA journal_mode = WAL", err)) ||
      (rc = ci_exec(db, "PRAGMA synchronous = FULL", err)) ||
      (rc = ci_exec(db, "PRAGMA foreign_keys = ON", err)) ||
      (rc = s_schema(db, err)))
    goto fail;
  *out = db;
  return TR_OK;
fail:
  tc_close(&db);
  return rc;
}

void tc_close(tc_db **pdb) {
  tc_db *db = pdb ? *pdb : NULL;
  if (!db) return;
  *pdb = NULL;
  for (int i = 0; i < CI_STMT_CACHE; i++) sqlite3_finalize(db->stmt[i].st);
  if (db->sql) sqlite3_close_v2(db->sql);
  if (db->transient && db->dir)
    nftw(db->dir, s_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(db->dir);
  free(db);
}

const char *tc_dir(const tc_db *db) { return db ? db->dir : NULL; }

/* path with symbolic links and dot parts resolved, whether it exists or
** only its directory does (caller frees); NULL when neither resolves. */
static char *s_resolved(const char *path) {
  char *r = realpath(path, NULL), *dir, *slash;
  if (r || errno != ENOENT || !(dir = strdup(path))) return r;
  slash = strrchr(dir, '/');
  const char *base = slash ? slash + 1 : path;
  if (slash) *slash = 0;
  char *rdir = realpath(slash ? (*dir ? dir : "/") : ".", NULL);
  if (rdir && *base && (r = malloc(strlen(rdir) + strlen(base) + 2)))
    sprintf(r, "%s/%s", strcmp(rdir, "/") ? rdir : "", base);
  free(rdir);
  free(dir);
  return r;
}

int tc_holds_data(const char *dir, const char *path, char *why, size_t n) {
  char *rdir = dir ? realpath(dir, NULL) : NULL, *rpath = s_resolved(path);
  size_t len = rdir ? strlen(rdir) : 0;
  int in = rdir && rpath && !strncmp(rpath, rdir, len) && (rpath[len] == '/' || !rpath[len]);
  if (in) snprintf(why, n, "it is in the database directory '%s'", dir);
  free(rdir);
  free(rpath);
  if (in) return 1;
  static const char sqlite_magic[16] = "SQLite format 3";
  unsigned char head[16];
  size_t got = 0;
  struct stat st;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0; /* nothing there to destroy, or nothing readable */
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) tr_pread_all(fd, head, sizeof head, 0, &got);
  close(fd);
  if (got == sizeof head && !memcmp(head, sqlite_magic, sizeof head)) {
    snprintf(why, n, "it is an SQLite database (a tradb database's catalog is one)");
    return 1;
  }
  if (cf_is_chunk_file(head, got)) {
    snprintf(why, n, "it is a tradb chunk file");
    return 1;
  }
  return 0;
}

uint64_t tc_db_id(const tc_db *db) { return db ? db->id : 0; }

int tc_sync(tc_db *db, tr_err *err) {
  if (!db || !db->unsynced) return TR_OK;
  /* The write-ahead log holds every commit since the last checkpoint, and
  ** a checkpoint syncs it first: syncing it makes them all durable. */
  sqlite3_file *log = NULL;
  int s = sqlite3_file_control(db->sql, "main", SQLITE_FCNTL_JOURNAL_POINTER, &log);
  if (s != SQLITE_OK || !log || !log->pMethods) {
    int rc = ci_exec(db, "PRAGMA wal_checkpoint(FULL)", err);
    if (!rc) db->unsynced = 0;
    return rc;
  }
  if (log->pMethods->xSync(log, SQLITE_SYNC_NORMAL) != SQLITE_OK)
    return tr_seterr(err, TR_EIO, "cannot sync the catalog of '%s' to disk", db->dir);
  db->unsynced = 0;
  return TR_OK;
}

double tc_unsynced_since(const tc_db *db) { return db ? db->unsynced : 0; }

/* ---- tensors ------------------------------------------------------------- */

int tc_tensor_get(tc_db *db, const char *name, tr_tensor *out, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc, s;
  if (!db || !name || !out)
    return tr_seterr(err, TR_EINVAL, "tc_tensor_get: bad argument");
  if ((rc = ci_prepare(db, "SELECT " S_TCOLS " FROM tensors WHERE name = ?1",
                       &st, err)))
    return rc;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
  s = sqlite3_step(st);
  if (s == SQLITE_ROW)
    rc = s_row_tensor(db, st, out, err);
  else if (s == SQLITE_DONE)
    rc = tr_seterr(err, TR_ENOTFOUND, "no such tensor: %.200s", name);
  else
    rc = ci_sqlfail(db, err, "looking up a tensor");
  ci_finish(db, st);
  return rc;
}

int tc_tensor_list(tc_db *db, tr_tensor **out, int *n, tr_err *err) {
  sqlite3_stmt *st = NULL;
  tr_tensor *v = NULL;
  int64_t cnt = 0, cap = 0;
  int rc, s;
  if (!db || !out || !n)
    return tr_seterr(err, TR_EINVAL, "tc_tensor_list: bad argument");
  *out = NULL;
  *n = 0;
  if ((rc = ci_prepare(db, "SELECT " S_TCOLS " FROM tensors ORDER BY name",
                       &st, err)))
    return rc;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    if ((rc = ci_grow(&v, cnt, &cap, sizeof *v, err)) ||
        (rc = s_row_tensor(db, st, &v[cnt], err)))
      goto done;
    cnt++;
  }
  if (s != SQLITE_DONE) rc = ci_sqlfail(db, err, "listing tensors");
done:
  ci_finish(db, st);
  if (rc) {
    free(v);
    return rc;
  }
  *out = v;
  *n = (int)cnt;
  return TR_OK;
}

int tc_tensor_create(tc_db *db, tr_tensor *t, tr_err *err) {
  sqlite3_stmt *st = NULL;
  char shape[CI_KEYSTR * 2], chunk[CI_KEYSTR * 2];
  tr_tensor probe;
  int rc;
  if (!db || !t)
    return tr_seterr(err, TR_EINVAL, "tc_tensor_create: bad argument");
  if ((rc = ci_check_meta(t, err))) return rc;
  int64_t nc = tr_nchunks(t);
  if (nc < 0 || nc > TR_MAX_CHUNKS)
    return tr_seterr(err, TR_ESHAPE, "tensor %s: more than %" PRId64 " chunks", t->name, TR_MAX_CHUNKS);
  rc = tc_tensor_get(db, t->name, &probe, err);
  if (rc == TR_OK)
    return tr_seterr(err, TR_ENAME, "tensor already exists: %s", t->name);
  if (rc != TR_ENOTFOUND) return rc;
  tr_clearerr(err);
  rc = TR_OK;
  ci_dims_str(shape, sizeof shape, t->rank, t->shape);
  ci_dims_str(chunk, sizeof chunk, t->rank, t->chunk);
  const char *format = tr_format_name(t);
  if ((rc = ci_prepare(db, "INSERT INTO tensors(name, dtype, rank, shape, "
                       "chunk, format, version) VALUES(?1, ?2, ?3, ?4, ?5, "
                       "?6, 0)", &st, err)))
    return rc;
  sqlite3_bind_text(st, 1, t->name, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, tr_dtype_name(t->dtype), -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 3, t->rank);
  sqlite3_bind_text(st, 4, shape, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 5, chunk, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 6, format, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = ci_sqlfail(db, err, "creating a tensor");
  } else {
    t->id = sqlite3_last_insert_rowid(db->sql);
    t->version = 0;
    snprintf(t->format, sizeof t->format, "%s", format);
  }
  ci_finish(db, st);
  return rc;
}

/* Delete the replica and chunk rows of tensor id and, if also_entry, its
** tensors row: explicit deletes, children first, rather than relying on
** cascades. */
static int s_delete_rows(tc_db *db, int64_t id, int also_entry,
                         const char *what, tr_err *err) {
  static const char *const del[] = {
      "DELETE FROM chunk_replicas WHERE tensor_id = ?1",
      "DELETE FROM chunks WHERE tensor_id = ?1",
      "DELETE FROM tensors WHERE id = ?1"};
  int rc = TR_OK;
  for (size_t i = 0; i < (also_entry ? 3u : 2u) && rc == TR_OK; i++) {
    sqlite3_stmt *st;
    if ((rc = ci_prepare(db, del[i], &st, err))) break;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_DONE) rc = ci_sqlfail(db, err, what);
    ci_finish(db, st);
  }
  return rc;
}

int ci_tensor_delete(tc_db *db, int64_t id, tr_err *err) {
  return s_delete_rows(db, id, 1, "dropping a tensor", err);
}

int tc_tensor_bytes(tc_db *db, const tr_tensor *t, int64_t *bytes,
                    tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc;
  if (!db || !t || !bytes)
    return tr_seterr(err, TR_EINVAL, "tc_tensor_bytes: bad argument");
  *bytes = 0;
  if ((rc = ci_prepare(db, "SELECT coalesce(sum(nbytes), 0) FROM chunks "
                       "WHERE tensor_id = ?1", &st, err)))
    return rc;
  sqlite3_bind_int64(st, 1, t->id);
  if (sqlite3_step(st) == SQLITE_ROW)
    *bytes = sqlite3_column_int64(st, 0);
  else
    rc = ci_sqlfail(db, err, "summing chunk sizes");
  ci_finish(db, st);
  return rc;
}

int ci_tensor_replace(tc_db *db, const tr_tensor *meta, int64_t *id,
                      int64_t *version, tr_err *err) {
  sqlite3_stmt *st = NULL;
  char shape[CI_KEYSTR * 2], chunk[CI_KEYSTR * 2];
  int rc, s;
  *id = 0;
  *version = 1;
  ci_dims_str(shape, sizeof shape, meta->rank, meta->shape);
  ci_dims_str(chunk, sizeof chunk, meta->rank, meta->chunk);
  if ((rc = ci_prepare(db, "SELECT id, version FROM tensors WHERE name = ?1",
                       &st, err)))
    goto done;
  sqlite3_bind_text(st, 1, meta->name, -1, SQLITE_TRANSIENT);
  s = sqlite3_step(st);
  if (s == SQLITE_ROW) {
    *id = sqlite3_column_int64(st, 0);
    *version = sqlite3_column_int64(st, 1) + 1;
  } else if (s != SQLITE_DONE) {
    rc = ci_sqlfail(db, err, "looking up a tensor");
    goto done;
  }
  ci_finish(db, st);
  st = NULL;
  if (*id) {
    if ((rc = s_delete_rows(db, *id, 0, "replacing a tensor", err)))
      goto done;
    rc = ci_prepare(db, "UPDATE tensors SET dtype = ?2, rank = ?3, shape = ?4,"
                    " chunk = ?5, format = ?6, version = ?7 WHERE id = ?1",
                    &st, err);
  } else {
    rc = ci_prepare(db, "INSERT INTO tensors(id, dtype, rank, shape, chunk, "
                    "format, version, name) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7,"
                    " ?8)", &st, err);
  }
  if (rc) goto done;
  if (*id)
    sqlite3_bind_int64(st, 1, *id);
  else
    sqlite3_bind_null(st, 1);
  sqlite3_bind_text(st, 2, tr_dtype_name(meta->dtype), -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 3, meta->rank);
  sqlite3_bind_text(st, 4, shape, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 5, chunk, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 6, meta->format, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 7, *version);
  if (!*id) sqlite3_bind_text(st, 8, meta->name, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = ci_sqlfail(db, err, "writing a tensor entry");
    goto done;
  }
  if (!*id) *id = sqlite3_last_insert_rowid(db->sql);
done:
  ci_finish(db, st);
  return rc;
}

void ci_meta_normal(tr_tensor *m) {
  m->id = 0;
  m->version = 0;
  for (int d = m->rank; d < TR_MAX_RANK; d++) m->shape[d] = m->chunk[d] = 0;
  snprintf(m->format, sizeof m->format, "%s", tr_format_name(m));
}

int ci_tensor_current(tc_db *db, const tr_tensor *t, tr_err *err) {
  sqlite3_stmt *st = NULL;
  char shape[CI_KEYSTR * 2], chunk[CI_KEYSTR * 2];
  int rc, s;
  /* A stale tr_tensor would pair the wrong grid with the stored chunks, or
  ** read zeros for data. */
  if ((rc = ci_prepare(db, "SELECT version, shape, chunk, dtype FROM tensors "
                       "WHERE id = ?1", &st, err)))
    return rc;
  sqlite3_bind_int64(st, 1, t->id);
  s = sqlite3_step(st);
  if (s != SQLITE_ROW && s != SQLITE_DONE) {
    rc = ci_sqlfail(db, err, "looking up a tensor");
    goto done;
  }
  ci_dims_str(shape, sizeof shape, t->rank, t->shape);
  ci_dims_str(chunk, sizeof chunk, t->rank, t->chunk);
  const char *cs = s == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 1)
                                   : NULL;
  const char *cc = s == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 2)
                                   : NULL;
  const char *cd = s == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 3)
                                   : NULL;
  if (s != SQLITE_ROW || sqlite3_column_int64(st, 0) != t->version || !cs ||
      !cc || !cd || strcmp(cs, shape) || strcmp(cc, chunk) ||
      strcmp(cd, tr_dtype_name(t->dtype)))
    rc = tr_seterr(err, TR_ENOTFOUND, "tensor %s changed or was dropped "
                   "since it was looked up", t->name);
done:
  ci_finish(db, st);
  return rc;
}
