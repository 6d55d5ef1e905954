/*
** catalog/catalog.h - where tensors live: the SQLite catalog, checksummed
** chunk files, and the dense array files users load and save (.npy, .csv).
**
** A database is a directory:
**     DBPATH/catalog.db     SQLite: schema version, tensors, chunks,
**                           chunk replicas (chunk -> site), sites
**     DBPATH/chunks/        one file per stored chunk (header + payload)
**
** Durability: chunk files of a write are written and fsync'd first; then
** one SQLite transaction makes the new version of the tensor visible and
** forgets the old one; only then are the old files unlinked.  A process
** killed at any point leaves either the old or the new version, and files
** no row refers to are removed by the next tc_open.
**
** Threads: a tc_db is used from one thread, except tc_reader_read() and
** tc_write_chunk(), which may be called from many threads at once.
*/
#ifndef TRADB_CATALOG_H
#define TRADB_CATALOG_H

#include <stddef.h>
#include <stdint.h>
#include "util/util.h"

#define TC_NAME_MAX 64     /* tensor names: [A-Za-z_][A-Za-z0-9_]*, < 64 */
#define TC_SCHEMA_VERSION 1
#define TC_SITE_LOCAL 0    /* site id of the coordinator's own store */

typedef struct tc_db tc_db;

/* A tensor's catalog entry. */
typedef struct tc_tensor {
  int64_t id;                  /* catalog row id (0 before first commit) */
  char name[TC_NAME_MAX];      /* unique name */
  tr_dtype dtype;              /* element type */
  int rank;                    /* 0..TR_MAX_RANK */
  int64_t shape[TR_MAX_RANK];  /* extent of each dimension */
  int64_t chunk[TR_MAX_RANK];  /* chunk shape; edge chunks may be smaller */
  char format[16];             /* physical format, see tc_format_name() */
  int64_t version;             /* content version; 0 = declared, no chunks
                                  stored yet (reads as zeros) */
} tc_tensor;

/* Number of chunks along dimension d, and in total. */
int64_t tc_grid(const tc_tensor *t, int d);
int64_t tc_nchunks(const tc_tensor *t);
/* Extent of the chunk with key `key` along each dimension (edge chunks are
** smaller) written to ext; returns the number of elements. */
int64_t tc_chunk_extent(const tc_tensor *t, const int64_t *key, int64_t *ext);
/* Row-major linear number of a chunk key in the chunk grid, and back. */
int64_t tc_key_linear(const tc_tensor *t, const int64_t *key);
void tc_key_from_linear(const tc_tensor *t, int64_t lin, int64_t *key);
/* Physical format implied by shape and chunk shape: "single" (one chunk),
** "row_strip", "col_strip" (rank 2), or "tile". Returns a static string. */
const char *tc_format_name(const tc_tensor *t);

/* Open (creating if needed) the database in directory `dir`.  If dir is
** NULL a transient database is made in a fresh temporary directory and
** removed by tc_close().  Leftover chunk files are cleaned up.  Returns
** TR_OK and *out, or an error (and *out = NULL). */
int tc_open(const char *dir, tc_db **out, tr_err *err);
/* Close; safe on NULL and twice (sets *db to NULL). */
void tc_close(tc_db **db);
/* The database directory (borrowed). */
const char *tc_dir(const tc_db *db);

/* Look a tensor up by name: TR_OK, or TR_ENOTFOUND with the message
** "no such tensor: NAME". */
int tc_tensor_get(tc_db *db, const char *name, tc_tensor *out, tr_err *err);
/* All tensors ordered by name; *out is the caller's (free()). */
int tc_tensor_list(tc_db *db, tc_tensor **out, int *n, tr_err *err);
/* Declare a new tensor with no content (version 0).  TR_ENAME if the name
** exists.  t->id and t->format are filled in. */
int tc_tensor_create(tc_db *db, tc_tensor *t, tr_err *err);
/* Remove a tensor and its chunks (files unlinked after the commit). */
int tc_tensor_drop(tc_db *db, const char *name, tr_err *err);
/* Total bytes of a tensor's stored chunks. */
int tc_tensor_bytes(tc_db *db, const tc_tensor *t, int64_t *bytes, tr_err *err);

/*
** Writing a new version of a tensor.  tc_write_begin() takes the complete
** new description (name, dtype, rank, shape, chunk); the tensor is created
** at commit if absent and replaced (shape and chunking too) if present.
** Every chunk of the new version must be written before commit.
** A write that is never committed can serve as a temporary relation:
** tc_write_read() reads its chunks back.  tc_write_abort() removes its files.
*/
typedef struct tc_write tc_write;
int tc_write_begin(tc_db *db, const tc_tensor *meta, tc_write **out, tr_err *err);
/* Store one chunk: its file is written now (write-back started) and made
** durable by tc_write_commit() before the catalog refers to it.  Thread-safe. */
int tc_write_chunk(tc_write *w, const int64_t *key, const void *data,
                   size_t nbytes, tr_err *err);
/* Read back a chunk of this write (checksum verified).  Thread-safe. */
int tc_write_read(tc_write *w, const int64_t *key, void *buf, size_t nbytes,
                  tr_err *err);
/* Make the write visible atomically; *result (may be NULL) receives the new
** catalog entry.  Fails with TR_ERR if a chunk is missing.  *w is freed
** and set to NULL whatever the outcome (on failure the files are removed). */
int tc_write_commit(tc_write **w, tc_tensor *result, tr_err *err);
/* Discard; safe on NULL and twice. */
void tc_write_abort(tc_write **w);

/*
** Reading a tensor's chunks.  tc_reader_open() snapshots the chunk index
** (main thread); tc_reader_read() is thread-safe and verifies each chunk's
** checksum against the catalog: a mismatch is TR_ECORRUPT with a message
** naming the tensor and chunk key.  A tensor at version 0 has no chunks:
** tc_reader_read() fills zeros.
*/
typedef struct tc_reader tc_reader;
int tc_reader_open(tc_db *db, const tc_tensor *t, tc_reader **out, tr_err *err);
int tc_reader_read(tc_reader *r, const int64_t *key, void *buf, size_t nbytes,
                   tr_err *err);
void tc_reader_close(tc_reader **r);

/*
** Dense arrays in user files, .npy (NumPy format 1.0/2.0/3.0, '<f4' and
** '<f8', C or Fortran order) and .csv (one row per line, rank 1 or 2).
** An opened array exposes data with element strides, so loading a chunk is
** one strided copy whatever the file's order.
*/
typedef struct tc_array {
  tr_dtype dtype;              /* element type */
  int rank;                    /* 0..TR_MAX_RANK */
  int64_t shape[TR_MAX_RANK];  /* extents */
  int64_t stride[TR_MAX_RANK]; /* element strides (C or Fortran order) */
  void *data;                  /* first element */
  /* private to catalog/: */
  int kind_;                   /* npy or csv, read or write */
  int fd_;                     /* open file for mapped npy */
  void *map_;                  /* mapping (npy) or heap buffer (csv) */
  size_t maplen_;              /* bytes mapped */
  char *path_;                 /* destination path (write) */
  char *tmp_;                  /* temporary path until commit (write) */
} tc_array;

/* Open `path` for reading; the format is chosen by extension (.npy, .csv;
** otherwise by the NumPy magic).  A CSV is parsed into element type
** csv_dtype.  Errors name the path: missing, unreadable, truncated, not a
** .npy file, unsupported dtype, ragged CSV, bad number at line L... */
int tc_array_open(const char *path, tr_dtype csv_dtype, tc_array *a, tr_err *err);
/* Create `path` (by extension .npy or .csv) for writing, C order; the data
** goes to a temporary file until tc_array_commit(). */
int tc_array_create(const char *path, tr_dtype dtype, int rank,
                    const int64_t *shape, tc_array *a, tr_err *err);
/* Write a created array out durably and rename it into place. */
int tc_array_commit(tc_array *a, tr_err *err);
/* Release; an uncommitted created array leaves nothing behind. */
void tc_array_close(tc_array *a);

#endif /* TRADB_CATALOG_H */
