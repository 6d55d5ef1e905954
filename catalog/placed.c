/*
** catalog/placed.c - the catalog side of distributed storage: the sites
** (workers) a database knows, where each chunk of a placed tensor lives
** (chunk ids, sizes, checksums and replica sites), and persistent settings.
**
** A chunk is a row of `chunks` with a cluster-wide chunk_id (stored in
** SQLite's signed 64-bit INTEGER, cast back to unsigned), plus one
** chunk_replicas row per site that holds it.  A chunk id handed back for
** dropping is one no chunk row refers to any more, so a coordinator that
** shares a chunk between versions or tensors never drops one still in use.
*/
#include "config.h"
#include "catalog/catalog.h"
#include "catalog/catalog_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

/* Step st (prepared and bound by the caller) and collect its first column
** as chunk ids into a malloc'd array. */
static int s_collect_ids(tc_db *db, sqlite3_stmt *st, uint64_t **ids,
                         int64_t *n, tr_err *err) {
  uint64_t *v = NULL;
  int64_t cnt = 0, cap = 0;
  int rc = TR_OK, s;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    if ((rc = ci_grow(&v, cnt, &cap, sizeof *v, err))) goto done;
    v[cnt++] = (uint64_t)sqlite3_column_int64(st, 0);
  }
  if (s != SQLITE_DONE) rc = ci_sqlfail(db, err, "listing chunk ids");
done:
  if (rc) {
    free(v);
    v = NULL;
    cnt = 0;
  }
  *ids = v;
  *n = cnt;
  return rc;
}

/* The distinct chunk ids of tensor `name`'s current version. */
static int s_tensor_ids(tc_db *db, const char *name, uint64_t **ids,
                        int64_t *n, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc = ci_prepare(db, "SELECT DISTINCT c.chunk_id FROM chunks c JOIN "
                      "tensors t ON t.id = c.tensor_id WHERE t.name = ?1",
                      &st, err);
  if (rc) {
    *ids = NULL;
    *n = 0;
    return rc;
  }
  sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
  rc = s_collect_ids(db, st, ids, n, err);
  ci_finish(db, st);
  return rc;
}

/* Keep in ids[0..*n) only the ids no chunk row refers to (run after the
** rows that dropped them are gone, inside the same transaction). */
static int s_unreferenced(tc_db *db, uint64_t *ids, int64_t *n, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int64_t kept = 0;
  int rc = ci_prepare(db, "SELECT 1 FROM chunks WHERE chunk_id = ?1 LIMIT 1",
                      &st, err);
  if (rc) return rc;
  for (int64_t i = 0; i < *n; i++) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, (int64_t)ids[i]);
    int s = sqlite3_step(st);
    if (s == SQLITE_DONE) {
      ids[kept++] = ids[i];
    } else if (s != SQLITE_ROW) {
      rc = ci_sqlfail(db, err, "checking chunk ids");
      break;
    }
  }
  ci_finish(db, st);
  if (rc == TR_OK) *n = kept;
  return rc;
}

/* Check a new version's chunk locations against its normalized meta:
** every lin of the grid exactly once, the right payload size, a non-zero
** chunk id, and 1..TC_MAX_REPLICAS distinct sites. */
static int s_check_locs(const tr_tensor *m, const tc_chunkloc *locs,
                        int64_t n, tr_err *err) {
  int64_t nchunks = tr_nchunks(m);
  unsigned char *seen = NULL;
  int rc = TR_OK;
  if (nchunks < 0)
    return tr_seterr(err, TR_ESHAPE, "tensor %s has too many chunks",
                     m->name);
  if (n != nchunks || (n > 0 && !locs))
    return tr_seterr(err, TR_EINVAL, "tensor %s: %" PRId64 " chunk locations "
                     "for a grid of %" PRId64 " chunks", m->name, n, nchunks);
  if (!(seen = calloc(nchunks > 0 ? (size_t)nchunks : 1, 1)))
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int64_t i = 0; i < n && rc == TR_OK; i++) {
    const tc_chunkloc *c = &locs[i];
    int64_t key[TR_MAX_RANK];
    if (c->lin < 0 || c->lin >= nchunks || seen[c->lin]) {
      rc = tr_seterr(err, TR_EINVAL, "tensor %s: chunk %" PRId64 " is %s",
                     m->name, c->lin,
                     c->lin < 0 || c->lin >= nchunks ? "outside the grid"
                                                     : "given twice");
      break;
    }
    seen[c->lin] = 1;
    tr_key_from_linear(m, c->lin, key);
    uint64_t want = (uint64_t)tr_chunk_extent(m, key, NULL) *
                    tr_dtype_size(m->dtype);
    if (c->nbytes != want)
      rc = tr_seterr(err, TR_EINVAL, "tensor %s chunk %" PRId64 ": %" PRIu64
                     " bytes, expected %" PRIu64, m->name, c->lin, c->nbytes,
                     want);
    else if (c->chunk_id == 0)
      rc = tr_seterr(err, TR_EINVAL, "tensor %s chunk %" PRId64 ": no chunk "
                     "id", m->name, c->lin);
    else if (c->nsites < 1 || c->nsites > TC_MAX_REPLICAS)
      rc = tr_seterr(err, TR_EINVAL, "tensor %s chunk %" PRId64 ": %d "
                     "replicas (1 to %d allowed)", m->name, c->lin, c->nsites,
                     TC_MAX_REPLICAS);
    for (int a = 0; a < c->nsites && rc == TR_OK; a++)
      for (int b = 0; b < a && rc == TR_OK; b++)
        if (c->site[a] == c->site[b])
          rc = tr_seterr(err, TR_EINVAL, "tensor %s chunk %" PRId64 ": site "
                         "%" PRId64 " given twice", m->name, c->lin,
                         c->site[a]);
  }
  free(seen);
  return rc;
}

/* Insert the chunk and replica rows of a placed version of tensor id. */
static int s_insert_locs(tc_db *db, const tr_tensor *m, int64_t id,
                         const tc_chunkloc *locs, int64_t n, tr_err *err) {
  sqlite3_stmt *ins = NULL, *rep = NULL;
  int rc;
  if ((rc = ci_prepare(db, "INSERT INTO chunks(tensor_id, key, lin, nbytes, "
                       "checksum, chunk_id) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                       &ins, err)) ||
      (rc = ci_prepare(db, "INSERT INTO chunk_replicas(tensor_id, lin, "
                       "site_id) VALUES(?1, ?2, ?3)", &rep, err)))
    goto done;
  for (int64_t i = 0; i < n; i++) {
    const tc_chunkloc *c = &locs[i];
    int64_t key[TR_MAX_RANK];
    char ks[CI_KEYSTR], sum[17];
    tr_key_from_linear(m, c->lin, key);
    ci_dims_str(ks, sizeof ks, m->rank, key);
    snprintf(sum, sizeof sum, "%016" PRIx64, c->checksum);
    sqlite3_reset(ins);
    sqlite3_bind_int64(ins, 1, id);
    sqlite3_bind_text(ins, 2, ks, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 3, c->lin);
    sqlite3_bind_int64(ins, 4, (int64_t)c->nbytes);
    sqlite3_bind_text(ins, 5, sum, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 6, (int64_t)c->chunk_id);
    if (sqlite3_step(ins) != SQLITE_DONE) {
      rc = ci_sqlfail(db, err, "recording chunks");
      goto done;
    }
    for (int k = 0; k < c->nsites; k++) {
      sqlite3_reset(rep);
      sqlite3_bind_int64(rep, 1, id);
      sqlite3_bind_int64(rep, 2, c->lin);
      sqlite3_bind_int64(rep, 3, c->site[k]);
      if (sqlite3_step(rep) == SQLITE_DONE) continue;
      if (sqlite3_extended_errcode(db->sql) == SQLITE_CONSTRAINT_FOREIGNKEY)
        rc = tr_seterr(err, TR_EINVAL, "tensor %s chunk %" PRId64 ": no site "
                       "%" PRId64, m->name, c->lin, c->site[k]);
      else
        rc = ci_sqlfail(db, err, "recording chunk replicas");
      goto done;
    }
  }
done:
  ci_finish(db, ins);
  ci_finish(db, rep);
  return rc;
}

/* Hand ids to the caller's optional out-parameters, or free them. */
static void s_give_ids(uint64_t *ids, int64_t n, uint64_t **out,
                       int64_t *nout) {
  if (out)
    *out = ids;
  else
    free(ids);
  if (nout) *nout = n;
}

/* End a transaction that forgot chunk ids: on failure (rc != TR_OK) roll
** it back and free ids, else hand them out.  Returns rc. */
static int s_end(tc_db *db, int rc, uint64_t *ids, int64_t n, uint64_t **out,
                 int64_t *nout) {
  if (rc) {
    ci_rollback(db);
    free(ids);
  } else {
    s_give_ids(ids, n, out, nout);
  }
  return rc;
}

/* ---- sites --------------------------------------------------------------- */

/* An endpoint fit for the sites table: non-empty and short enough. */
static int s_endpoint_ok(const char *endpoint, tr_err *err) {
  size_t len = endpoint ? strnlen(endpoint, TC_ENDPOINT_MAX) : 0;
  if (len == 0 || len >= TC_ENDPOINT_MAX)
    return tr_seterr(err, TR_EINVAL, "bad site endpoint '%.200s' (1 to %d "
                     "characters)", endpoint ? endpoint : "",
                     TC_ENDPOINT_MAX - 1);
  return TR_OK;
}

int tc_site_list(tc_db *db, tc_site **out, int *n, tr_err *err) {
  sqlite3_stmt *st = NULL;
  tc_site *v = NULL;
  int64_t cnt = 0, cap = 0;
  int rc, s;
  if (!db || !out || !n)
    return tr_seterr(err, TR_EINVAL, "tc_site_list: bad argument");
  *out = NULL;
  *n = 0;
  if ((rc = ci_prepare(db, "SELECT id, endpoint FROM sites ORDER BY id",
                       &st, err)))
    return rc;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    const char *ep = (const char *)sqlite3_column_text(st, 1);
    if ((rc = ci_grow(&v, cnt, &cap, sizeof *v, err))) goto done;
    v[cnt].id = sqlite3_column_int64(st, 0);
    if (!ep || strlen(ep) >= TC_ENDPOINT_MAX) {
      rc = tr_seterr(err, TR_ECORRUPT, "catalog %s/catalog.db: malformed "
                     "site %" PRId64, db->dir, v[cnt].id);
      goto done;
    }
    snprintf(v[cnt].endpoint, sizeof v[cnt].endpoint, "%s", ep);
    cnt++;
  }
  if (s != SQLITE_DONE) rc = ci_sqlfail(db, err, "listing sites");
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

int tc_site_add(tc_db *db, const char *endpoint, int64_t *id, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc;
  if (!db || !id)
    return tr_seterr(err, TR_EINVAL, "tc_site_add: bad argument");
  *id = 0;
  if ((rc = s_endpoint_ok(endpoint, err))) return rc;
  if ((rc = ci_prepare(db, "INSERT INTO sites(endpoint, state) VALUES(?1, "
                       "'up') ON CONFLICT(endpoint) DO NOTHING", &st, err)))
    goto done;
  sqlite3_bind_text(st, 1, endpoint, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = ci_sqlfail(db, err, "recording a site");
    goto done;
  }
  ci_finish(db, st);
  if ((rc = ci_prepare(db, "SELECT id FROM sites WHERE endpoint = ?1", &st,
                       err)))
    goto done;
  sqlite3_bind_text(st, 1, endpoint, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_ROW) {
    rc = ci_sqlfail(db, err, "looking up a site");
    goto done;
  }
  *id = sqlite3_column_int64(st, 0);
done:
  ci_finish(db, st);
  return rc;
}

int tc_site_remove(tc_db *db, const char *endpoint, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int64_t id = 0;
  int rc, s;
  if (!db || !endpoint)
    return tr_seterr(err, TR_EINVAL, "tc_site_remove: bad argument");
  if ((rc = ci_exec(db, "BEGIN IMMEDIATE", err))) return rc;
  if ((rc = ci_prepare(db, "SELECT id FROM sites WHERE endpoint = ?1", &st,
                       err)))
    goto done;
  sqlite3_bind_text(st, 1, endpoint, -1, SQLITE_TRANSIENT);
  s = sqlite3_step(st);
  if (s == SQLITE_DONE) {
    rc = tr_seterr(err, TR_ENOTFOUND, "no such site: %.200s", endpoint);
    goto done;
  }
  if (s != SQLITE_ROW) {
    rc = ci_sqlfail(db, err, "looking up a site");
    goto done;
  }
  id = sqlite3_column_int64(st, 0);
  static const char *const del[] = {
      "DELETE FROM chunk_replicas WHERE site_id = ?1",
      "DELETE FROM sites WHERE id = ?1"};
  for (size_t i = 0; i < sizeof del / sizeof del[0]; i++) {
    ci_finish(db, st);
    if ((rc = ci_prepare(db, del[i], &st, err))) goto done;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_DONE) {
      rc = ci_sqlfail(db, err, "removing a site");
      goto done;
    }
  }
  rc = ci_exec(db, "COMMIT", err);
done:
  ci_finish(db, st);
  if (rc) ci_rollback(db);
  return rc;
}

/* ---- chunk placement ----------------------------------------------------- */

int tc_chunk_locations(tc_db *db, const tr_tensor *t, tc_chunkloc **out,
                       int64_t *n, tr_err *err) {
  sqlite3_stmt *st = NULL;
  tc_chunkloc *v = NULL;
  int64_t nchunks, cnt = 0;
  int rc, s;
  if (!out || !n)
    return tr_seterr(err, TR_EINVAL, "tc_chunk_locations: bad argument");
  *out = NULL;
  *n = 0;
  if (!db || !t)
    return tr_seterr(err, TR_EINVAL, "tc_chunk_locations: bad argument");
  if ((rc = ci_check_meta(t, err))) return rc;
  if (t->id == 0) {
    /* Never stored: only a bare declaration (version 0) makes sense. */
    if (t->version != 0)
      return tr_seterr(err, TR_EINVAL, "tensor %s: version %" PRId64
                       " without a catalog id", t->name, t->version);
    return TR_OK;
  }
  if ((rc = ci_tensor_current(db, t, err)) || t->version == 0) return rc;
  nchunks = tr_nchunks(t);
  if (nchunks < 0 || (uint64_t)nchunks > SIZE_MAX / sizeof *v)
    return tr_seterr(err, TR_ESHAPE, "tensor %s has too many chunks",
                     t->name);
  if (!(v = calloc(nchunks > 0 ? (size_t)nchunks : 1, sizeof *v)))
    return tr_seterr(err, TR_ENOMEM, "out of memory for the chunk locations "
                     "of tensor %s", t->name);
  /* One row per replica (or one with a NULL site for a chunk without any),
  ** grouped by lin. */
  if ((rc = ci_prepare(db, "SELECT c.lin, c.chunk_id, c.nbytes, c.checksum, "
                       "r.site_id FROM chunks c LEFT JOIN chunk_replicas r "
                       "ON r.tensor_id = c.tensor_id AND r.lin = c.lin WHERE"
                       " c.tensor_id = ?1 ORDER BY c.lin, r.site_id", &st,
                       err)))
    goto done;
  sqlite3_bind_int64(st, 1, t->id);
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t lin = sqlite3_column_int64(st, 0);
    if (cnt == 0 || lin != v[cnt - 1].lin) {
      tc_chunkloc *c = &v[cnt];
      /* Ordered by lin, so a complete grid reads 0, 1, 2, ... */
      if (lin != cnt || cnt >= nchunks ||
          ci_sum_parse((const char *)sqlite3_column_text(st, 3),
                       &c->checksum) != 0 ||
          sqlite3_column_int64(st, 2) < 0) {
        rc = tr_seterr(err, TR_ECORRUPT, "catalog %s/catalog.db: malformed "
                       "chunk entry %" PRId64 " of tensor %s", db->dir, lin,
                       t->name);
        goto done;
      }
      c->lin = lin;
      c->chunk_id = (uint64_t)sqlite3_column_int64(st, 1);
      c->nbytes = (uint64_t)sqlite3_column_int64(st, 2);
      cnt++;
    }
    if (sqlite3_column_type(st, 4) == SQLITE_NULL) continue;
    tc_chunkloc *c = &v[cnt - 1];
    if (c->nsites == TC_MAX_REPLICAS) {
      rc = tr_seterr(err, TR_ECORRUPT, "catalog %s/catalog.db: chunk %"
                     PRId64 " of tensor %s has more than %d replicas",
                     db->dir, lin, t->name, TC_MAX_REPLICAS);
      goto done;
    }
    c->site[c->nsites++] = sqlite3_column_int64(st, 4);
  }
  if (s != SQLITE_DONE) {
    rc = ci_sqlfail(db, err, "reading chunk locations");
    goto done;
  }
  if (cnt != nchunks)
    rc = tr_seterr(err, TR_ECORRUPT, "catalog %s/catalog.db: chunk %" PRId64
                   " of tensor %s is missing", db->dir, cnt, t->name);
done:
  ci_finish(db, st);
  if (rc) {
    free(v);
    return rc;
  }
  *out = v;
  *n = cnt;
  return TR_OK;
}

/* The bytes of tensor name's current version (0: none). */
static int s_tensor_bytes(tc_db *db, const char *name, uint64_t *bytes, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc = ci_prepare(db, "SELECT COALESCE(SUM(c.nbytes), 0) FROM chunks c JOIN tensors t"
                      " ON t.id = c.tensor_id WHERE t.name = ?1", &st, err);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) == SQLITE_ROW)
    *bytes = (uint64_t)sqlite3_column_int64(st, 0);
  else
    rc = ci_sqlfail(db, err, "sizing a version");
  ci_finish(db, st);
  return rc;
}

/* tc_commit_placed, synced or not (old_bytes: NULL unless unsynced). */
static int s_commit_placed(tc_db *db, const tr_tensor *meta, const tc_chunkloc *locs, int64_t n,
                           tr_tensor *result, uint64_t **old_ids, int64_t *nold,
                           uint64_t *old_bytes, tr_err *err) {
  tr_tensor m;
  uint64_t *ids = NULL;
  int64_t nids = 0, id = 0, version = 0;
  int rc, lazy = old_bytes != NULL;
  s_give_ids(NULL, 0, old_ids, nold);
  if (!db || !meta)
    return tr_seterr(err, TR_EINVAL, "tc_commit_placed: bad argument");
  if ((rc = ci_check_meta(meta, err))) return rc;
  m = *meta;
  ci_meta_normal(&m);
  if ((rc = s_check_locs(&m, locs, n, err))) return rc;
  /* The level applies to the commits made while it is set: this
  ** transaction's only, FULL again straight after (also on failure). */
  if (lazy && (rc = ci_exec(db, "PRAGMA synchronous = NORMAL", err))) return rc;
  if ((rc = ci_exec(db, "BEGIN IMMEDIATE", err)) ||
      (lazy && (rc = s_tensor_bytes(db, m.name, old_bytes, err))) ||
      (rc = s_tensor_ids(db, m.name, &ids, &nids, err)) ||
      (rc = ci_tensor_replace(db, &m, &id, &version, err)) ||
      (rc = s_insert_locs(db, &m, id, locs, n, err)) ||
      (rc = s_unreferenced(db, ids, &nids, err)) ||
      (rc = ci_exec(db, "COMMIT", err)))
    goto done;
  if (lazy && !db->unsynced) db->unsynced = tr_now();
  if (!lazy) db->unsynced = 0; /* a FULL commit syncs the whole log */
  if (result) {
    *result = m;
    result->id = id;
    result->version = version;
  }
done:
  rc = s_end(db, rc, ids, nids, old_ids, nold);
  if (lazy) {
    tr_err e2;
    int r2 = ci_exec(db, "PRAGMA synchronous = FULL", &e2);
    tr_assert(r2 == TR_OK); /* sets a flag of the connection: no I/O */
  }
  return rc;
}

int tc_commit_placed(tc_db *db, const tr_tensor *meta, const tc_chunkloc *locs,
                     int64_t n, tr_tensor *result, uint64_t **old_ids,
                     int64_t *nold, tr_err *err) {
  return s_commit_placed(db, meta, locs, n, result, old_ids, nold, NULL, err);
}

int tc_commit_placed_unsynced(tc_db *db, const tr_tensor *meta, const tc_chunkloc *locs, int64_t n,
                              uint64_t **old_ids, int64_t *nold, uint64_t *old_bytes, tr_err *err) {
  uint64_t ignore = 0;
  return s_commit_placed(db, meta, locs, n, NULL, old_ids, nold, old_bytes ? old_bytes : &ignore,
                         err);
}

int tc_tensor_drop_placed(tc_db *db, const char *name, uint64_t **old_ids,
                          int64_t *nold, tr_err *err) {
  uint64_t *ids = NULL;
  int64_t nids = 0;
  tr_tensor t;
  int rc;
  s_give_ids(NULL, 0, old_ids, nold);
  if (!db || !name)
    return tr_seterr(err, TR_EINVAL, "tc_tensor_drop_placed: bad argument");
  if ((rc = ci_exec(db, "BEGIN IMMEDIATE", err))) return rc;
  rc = tc_tensor_get(db, name, &t, err);
  if (rc == TR_OK) rc = s_tensor_ids(db, name, &ids, &nids, err);
  if (rc == TR_OK) rc = ci_tensor_delete(db, t.id, err);
  if (rc == TR_OK) rc = s_unreferenced(db, ids, &nids, err);
  if (rc == TR_OK) rc = ci_exec(db, "COMMIT", err);
  return s_end(db, rc, ids, nids, old_ids, nold);
}

int tc_site_chunks(tc_db *db, int64_t site, uint64_t **ids, int64_t *n,
                   tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc;
  if (!ids || !n)
    return tr_seterr(err, TR_EINVAL, "tc_site_chunks: bad argument");
  *ids = NULL;
  *n = 0;
  if (!db) return tr_seterr(err, TR_EINVAL, "tc_site_chunks: bad argument");
  if ((rc = ci_prepare(db, "SELECT DISTINCT c.chunk_id FROM chunk_replicas r "
                       "JOIN chunks c ON c.tensor_id = r.tensor_id AND c.lin "
                       "= r.lin WHERE r.site_id = ?1 ORDER BY c.chunk_id", &st,
                       err)))
    return rc;
  sqlite3_bind_int64(st, 1, site);
  rc = s_collect_ids(db, st, ids, n, err);
  ci_finish(db, st);
  return rc;
}

/* Run sql (binding ?1 = site, ?2 = each of ids) once per id, in one
** transaction: how replica rows are added and removed by chunk id. */
static int s_replicas_by_id(tc_db *db, int64_t site, const uint64_t *ids, int64_t n,
                            const char *sql, const char *what, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc;
  if (!db || (n && !ids)) return tr_seterr(err, TR_EINVAL, "%s: bad argument", what);
  if (!n) return TR_OK;
  if ((rc = ci_exec(db, "BEGIN IMMEDIATE", err))) return rc;
  rc = ci_prepare(db, sql, &st, err);
  for (int64_t i = 0; !rc && i < n; i++) {
    sqlite3_bind_int64(st, 1, site);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)ids[i]);
    if (sqlite3_step(st) != SQLITE_DONE) rc = ci_sqlfail(db, err, what);
    sqlite3_reset(st);
  }
  ci_finish(db, st);
  if (!rc) rc = ci_exec(db, "COMMIT", err);
  else ci_rollback(db);
  return rc;
}

int tc_replica_remove(tc_db *db, int64_t site, const uint64_t *ids, int64_t n, tr_err *err) {
  return s_replicas_by_id(db, site, ids, n,
                          "DELETE FROM chunk_replicas WHERE site_id = ?1 AND (tensor_id, lin) IN "
                          "(SELECT tensor_id, lin FROM chunks WHERE chunk_id = ?2)",
                          "forgetting replicas", err);
}

int tc_replica_add(tc_db *db, int64_t site, const uint64_t *ids, int64_t n, tr_err *err) {
  return s_replicas_by_id(db, site, ids, n,
                          "INSERT OR IGNORE INTO chunk_replicas(tensor_id, lin, site_id) "
                          "SELECT tensor_id, lin, ?1 FROM chunks WHERE chunk_id = ?2",
                          "recording replicas", err);
}

int tc_chunk_sites(tc_db *db, uint64_t id, int64_t *site, int *n, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc, s;
  *n = 0;
  if (!db || !site) return tr_seterr(err, TR_EINVAL, "tc_chunk_sites: bad argument");
  if ((rc = ci_prepare(db, "SELECT DISTINCT r.site_id FROM chunks c JOIN chunk_replicas r ON "
                       "r.tensor_id = c.tensor_id AND r.lin = c.lin WHERE c.chunk_id = ?1 "
                       "ORDER BY r.site_id", &st, err)))
    return rc;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
  while ((s = sqlite3_step(st)) == SQLITE_ROW)
    if (*n < TC_MAX_REPLICAS) site[(*n)++] = sqlite3_column_int64(st, 0);
  if (s != SQLITE_DONE) rc = ci_sqlfail(db, err, "looking up a chunk's replicas");
  ci_finish(db, st);
  return rc;
}

int tc_chunks_known(tc_db *db, const uint64_t *ids, const uint64_t *nbytes, const uint64_t *sums,
                    int64_t n, int *known, tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc;
  if (!db || (n && (!ids || !nbytes || !sums || !known)))
    return tr_seterr(err, TR_EINVAL, "tc_chunks_known: bad argument");
  if ((rc = ci_prepare(db, "SELECT nbytes, checksum FROM chunks WHERE chunk_id = ?1", &st, err)))
    return rc;
  for (int64_t i = 0; !rc && i < n; i++) {
    int s;
    known[i] = 0;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ids[i]);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
      uint64_t sum;
      if ((uint64_t)sqlite3_column_int64(st, 0) == nbytes[i] &&
          ci_sum_parse((const char *)sqlite3_column_text(st, 1), &sum) == 0 && sum == sums[i])
        known[i] = 1;
    }
    if (s != SQLITE_DONE) rc = ci_sqlfail(db, err, "looking chunks up");
    sqlite3_reset(st);
  }
  ci_finish(db, st);
  return rc;
}

int tc_chunks_select(tc_db *db, int64_t site, int below, tc_chunkref **out, int64_t *n,
                     tr_err *err) {
  sqlite3_stmt *st = NULL;
  tc_chunkref *v = NULL;
  int64_t cnt = 0, cap = 0, last_tid = -1, last_lin = -1;
  int rc, s;
  if (!out || !n) return tr_seterr(err, TR_EINVAL, "tc_chunks_select: bad argument");
  *out = NULL;
  *n = 0;
  if (!db) return tr_seterr(err, TR_EINVAL, "tc_chunks_select: bad argument");
  /* One row per replica (a NULL site for a chunk with none), grouped by
  ** chunk. */
  if ((rc = ci_prepare(db, "SELECT t.name, c.tensor_id, c.lin, c.chunk_id, c.nbytes, c.checksum, "
                       "r.site_id FROM chunks c JOIN tensors t ON t.id = c.tensor_id LEFT JOIN "
                       "chunk_replicas r ON r.tensor_id = c.tensor_id AND r.lin = c.lin WHERE "
                       "CASE WHEN ?1 > 0 THEN EXISTS (SELECT 1 FROM chunk_replicas q WHERE "
                       "q.tensor_id = c.tensor_id AND q.lin = c.lin AND q.site_id = ?1) ELSE "
                       "(SELECT count(*) FROM chunk_replicas q WHERE q.tensor_id = c.tensor_id "
                       "AND q.lin = c.lin) < ?2 END ORDER BY t.name, c.lin, r.site_id",
                       &st, err)))
    return rc;
  sqlite3_bind_int64(st, 1, site);
  sqlite3_bind_int(st, 2, below);
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t tid = sqlite3_column_int64(st, 1), lin = sqlite3_column_int64(st, 2);
    const char *name = (const char *)sqlite3_column_text(st, 0);
    if (tid != last_tid || lin != last_lin) {
      if ((rc = ci_grow(&v, cnt, &cap, sizeof *v, err))) goto done;
      tc_chunkref *c = &v[cnt++];
      memset(c, 0, sizeof *c);
      snprintf(c->tensor, sizeof c->tensor, "%s", name ? name : "?");
      c->loc.lin = lin;
      c->loc.chunk_id = (uint64_t)sqlite3_column_int64(st, 3);
      c->loc.nbytes = (uint64_t)sqlite3_column_int64(st, 4);
      if (ci_sum_parse((const char *)sqlite3_column_text(st, 5), &c->loc.checksum) != 0) {
        rc = tr_seterr(err, TR_ECORRUPT, "catalog %s/catalog.db: malformed chunk entry %" PRId64
                       " of tensor %s", db->dir, lin, c->tensor);
        goto done;
      }
      last_tid = tid;
      last_lin = lin;
    }
    tc_chunkloc *c = &v[cnt - 1].loc;
    if (sqlite3_column_type(st, 6) != SQLITE_NULL && c->nsites < TC_MAX_REPLICAS)
      c->site[c->nsites++] = sqlite3_column_int64(st, 6);
  }
  if (s != SQLITE_DONE) rc = ci_sqlfail(db, err, "listing chunks");
done:
  ci_finish(db, st);
  if (rc) {
    free(v);
    return rc;
  }
  *out = v;
  *n = cnt;
  return TR_OK;
}

int tc_tensor_replicas(tc_db *db, const tr_tensor *t, int target, int *fewest, int64_t *under,
                       tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc;
  *fewest = 0;
  *under = 0;
  if (!db || !t) return tr_seterr(err, TR_EINVAL, "tc_tensor_replicas: bad argument");
  if (t->id == 0) return TR_OK;
  if ((rc = ci_prepare(db, "SELECT min(k), sum(k < ?2) FROM (SELECT count(r.site_id) AS k FROM "
                       "chunks c LEFT JOIN chunk_replicas r ON r.tensor_id = c.tensor_id AND "
                       "r.lin = c.lin WHERE c.tensor_id = ?1 GROUP BY c.lin)", &st, err)))
    return rc;
  sqlite3_bind_int64(st, 1, t->id);
  sqlite3_bind_int(st, 2, target);
  if (sqlite3_step(st) == SQLITE_ROW) {
    *fewest = sqlite3_column_int(st, 0);
    *under = sqlite3_column_int64(st, 1);
  } else {
    rc = ci_sqlfail(db, err, "counting replicas");
  }
  ci_finish(db, st);
  return rc;
}

uint64_t tc_new_chunk_id(void) {
  uint64_t id;
  do id = ci_random64();
  while (id == 0);
  return id;
}

/* ---- settings ------------------------------------------------------------ */

int tc_setting_get(tc_db *db, const char *name, char *value, size_t cap,
                   tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc, s;
  if (!db || !name || !*name || !value || cap == 0)
    return tr_seterr(err, TR_EINVAL, "tc_setting_get: bad argument");
  if ((rc = ci_prepare(db, "SELECT value FROM settings WHERE name = ?1", &st,
                       err)))
    return rc;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
  s = sqlite3_step(st);
  if (s == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(st, 0);
    size_t len = v ? strlen(v) : 0;
    if (len >= cap)
      rc = tr_seterr(err, TR_EINVAL, "setting %.200s: value of %zu bytes does"
                     " not fit in %zu", name, len, cap - 1);
    else
      snprintf(value, cap, "%s", v ? v : "");
  } else if (s == SQLITE_DONE) {
    rc = tr_seterr(err, TR_ENOTFOUND, "no such setting: %.200s", name);
  } else {
    rc = ci_sqlfail(db, err, "reading a setting");
  }
  ci_finish(db, st);
  return rc;
}

int tc_setting_set(tc_db *db, const char *name, const char *value,
                   tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc;
  if (!db || !name || !*name || !value)
    return tr_seterr(err, TR_EINVAL, "tc_setting_set: bad argument");
  if ((rc = ci_prepare(db, "INSERT INTO settings(name, value) VALUES(?1, ?2) "
                       "ON CONFLICT(name) DO UPDATE SET value = "
                       "excluded.value", &st, err)))
    return rc;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE)
    rc = ci_sqlfail(db, err, "saving a setting");
  ci_finish(db, st);
  return rc;
}

int tc_declared_chunk_get(tc_db *db, const char *name, int rank, int64_t *chunk, int *declared,
                          tr_err *err) {
  sqlite3_stmt *st = NULL;
  int rc, s;
  *declared = 0;
  if ((rc = ci_prepare(db, "SELECT chunk FROM declared_chunks WHERE name = ?1", &st, err))) return rc;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
  s = sqlite3_step(st);
  if (s == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(st, 0);
    int n = 0;
    while (v && *v && n < TR_MAX_RANK) {
      char *end;
      long long x = strtoll(v, &end, 10);
      if (end == v || x < 1) break;
      chunk[n++] = x;
      v = *end == ',' ? end + 1 : end;
    }
    /* a shape of another rank belongs to an earlier tensor of the name */
    *declared = v && !*v && n == rank;
  } else if (s != SQLITE_DONE) {
    rc = ci_sqlfail(db, err, "reading a declared chunk shape");
  }
  ci_finish(db, st);
  return rc;
}

int tc_declared_chunk_set(tc_db *db, const char *name, int rank, const int64_t *chunk,
                          tr_err *err) {
  sqlite3_stmt *st = NULL;
  char v[TR_MAX_RANK * 24 + 1] = "";
  size_t o = 0;
  int rc;
  for (int d = 0; d < rank; d++)
    o += (size_t)snprintf(v + o, sizeof v - o, "%s%lld", d ? "," : "", (long long)chunk[d]);
  if ((rc = ci_prepare(db, rank < 0 ? "DELETE FROM declared_chunks WHERE name = ?1"
                                    : "INSERT INTO declared_chunks(name, chunk) VALUES(?1, ?2) "
                                      "ON CONFLICT(name) DO UPDATE SET chunk = excluded.chunk",
                       &st, err)))
    return rc;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
  if (rank >= 0) sqlite3_bind_text(st, 2, v, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_DONE) rc = ci_sqlfail(db, err, "saving a declared chunk shape");
  ci_finish(db, st);
  return rc;
}
