/*
** catalog/catalog.h - where tensors live: the SQLite catalog of a
** database, the workers' chunk stores, and the dense array files users
** load and save (.npy, .csv).
**
** A database is a directory holding DBPATH/catalog.db (SQLite): the schema
** version, settings, the sites (workers), the tensors, and for every chunk
** of a tensor its cluster-wide chunk id, size, checksum and the sites that
** hold a replica.  Chunk bytes are not in the database directory: they
** live in the workers' chunk stores (tc_store below).
**
** Durability: the chunks of a new version are written to the workers'
** stores and synced (tc_store_sync) first; then tc_commit_placed() makes
** the new version visible and forgets the old one in one SQLite
** transaction, and only then are the old version's chunks dropped from the
** stores (after a commit left unsynced, tc_commit_placed_unsynced, only
** once tc_sync has made it durable).  A process killed at any point leaves
** either the old or the new version; chunks no row refers to are removed later, when the
** coordinator compares what each worker holds (tc_store_list) with what
** tc_site_chunks() lists for it and drops the leftovers by id.
**
** Threads: a tc_db is used from one thread; a tc_store from many.
*/
#ifndef TRADB_CATALOG_H
#define TRADB_CATALOG_H

#include <stddef.h>
#include <stdint.h>
#include "util/util.h"
#include "util/grid.h"

#define TC_SCHEMA_VERSION 1

typedef struct tc_db tc_db;

/* A tensor's catalog entry is a tr_tensor (util/grid.h). */

/* Open (creating if needed) the database in directory `dir`.  If dir is
** NULL a transient database is made in a fresh temporary directory and
** removed, with everything in it, by tc_close().  Another process holding
** the database is TR_EIO "... in use by another process".  Returns TR_OK
** and *out, or an error (and *out = NULL). */
int tc_open(const char *dir, tc_db **out, tr_err *err);
/* Close; safe on NULL and twice (sets *db to NULL). */
void tc_close(tc_db **db);
/* The database directory (borrowed). */
const char *tc_dir(const tc_db *db);
/* Whether writing over path (a shell's .output) would destroy a database's
** data: path is in database directory dir (NULL: no database), which holds
** its catalog, the catalog's journal and its local workers' chunk files,
** or is an existing catalog (an SQLite file) or chunk file of any
** database.  1, with the reason in why (n bytes), or 0. */
int tc_holds_data(const char *dir, const char *path, char *why, size_t n);
/* The database id: 64 random bits made with the catalog and kept in it.
** Every message to a worker carries it, and a worker keeps each
** database's chunks apart by it. */
uint64_t tc_db_id(const tc_db *db);

/* Where local workers keep their stores and logs, under the database
** directory.  tc_open refuses to make a new catalog where this holds chunk
** files: a catalog that is missing or empty over existing data is an
** error, never a fresh start that would orphan the data. */
#define TC_LOCAL_WORKERS_DIR "workers"

/* Look a tensor up by name: TR_OK, or TR_ENOTFOUND with the message
** "no such tensor: NAME". */
int tc_tensor_get(tc_db *db, const char *name, tr_tensor *out, tr_err *err);
/* All tensors ordered by name; *out is the caller's (free()). */
int tc_tensor_list(tc_db *db, tr_tensor **out, int *n, tr_err *err);
/* Declare a new tensor with no content (version 0).  TR_ENAME if the name
** exists.  t->id and t->format are filled in. */
int tc_tensor_create(tc_db *db, tr_tensor *t, tr_err *err);
/* Total bytes of a tensor's stored chunks. */
int tc_tensor_bytes(tc_db *db, const tr_tensor *t, int64_t *bytes, tr_err *err);

/*
** Sites (workers) and chunk placement: for every chunk the catalog records
** a cluster-wide chunk id, its size and checksum, and the sites holding a
** replica (table chunk_replicas); the bytes are in those workers' stores.
*/
#define TC_MAX_REPLICAS 8
#define TC_ENDPOINT_MAX 256

typedef struct tc_site {
  int64_t id;                       /* row id (> 0) */
  char endpoint[TC_ENDPOINT_MAX];   /* ZeroMQ endpoint */
} tc_site;

/* Workers recorded in the catalog, in id order; *out is the caller's. */
int tc_site_list(tc_db *db, tc_site **out, int *n, tr_err *err);
/* Record a worker (or find it): *id receives its row id. */
int tc_site_add(tc_db *db, const char *endpoint, int64_t *id, tr_err *err);
/* Forget a worker: TR_ENOTFOUND if not recorded.  Its replica rows go;
** chunks left with no replica keep their rows (reads fail clearly). */
int tc_site_remove(tc_db *db, const char *endpoint, tr_err *err);

/* The checksum of a chunk's payload, everywhere one is kept or checked:
** XXH3_64bits, with AVX2 where the CPU has it (checksum.c). */
uint64_t tc_checksum(const void *data, size_t nbytes);

/* Where one chunk is. */
typedef struct tc_chunkloc {
  int64_t lin;                      /* chunk number */
  uint64_t chunk_id;                /* cluster-wide id */
  uint64_t nbytes;                  /* payload bytes */
  uint64_t checksum;                /* XXH3_64bits of the payload */
  int nsites;                       /* replicas */
  int64_t site[TC_MAX_REPLICAS];    /* site ids holding it */
} tc_chunkloc;

/* All chunks of t ordered by lin (*n = 0 for a tensor at version 0);
** *out is the caller's. */
int tc_chunk_locations(tc_db *db, const tr_tensor *t, tc_chunkloc **out, int64_t *n,
                       tr_err *err);
/* Make a new version of tensor meta->name visible in one transaction:
** every chunk of the grid must be in locs (n == tr_nchunks), each with at
** least one site.  The previous version's chunk ids are returned in
** *old_ids (caller frees; may be NULL if not wanted) so the coordinator can
** tell the workers to drop them.  *result (may be NULL) gets the entry. */
int tc_commit_placed(tc_db *db, const tr_tensor *meta, const tc_chunkloc *locs, int64_t n,
                     tr_tensor *result, uint64_t **old_ids, int64_t *nold, tr_err *err);
/* As tc_commit_placed, but the commit is not synced to disk (SQLite's
** synchronous = NORMAL for this one transaction): it survives the process
** being killed, while a crash of the machine before tc_sync may undo it.
** For a version whose chunks are themselves in workers' memory only (SET
** synchronous = normal): the catalog entry need not outlast them.  Until
** tc_sync, the old version's chunks must stay on the workers, since the
** catalog may yet come back to them.  *old_bytes gets their size. */
int tc_commit_placed_unsynced(tc_db *db, const tr_tensor *meta, const tc_chunkloc *locs, int64_t n,
                              uint64_t **old_ids, int64_t *nold, uint64_t *old_bytes, tr_err *err);
/* Make every commit so far durable (fdatasync of the write-ahead log);
** nothing to do when none is pending.  Every ordinary commit syncs. */
int tc_sync(tc_db *db, tr_err *err);
/* When the oldest commit not yet synced was made (tr_now()), 0 if none. */
double tc_unsynced_since(const tc_db *db);
/* Drop a tensor, returning its chunk ids (caller frees). */
int tc_tensor_drop_placed(tc_db *db, const char *name, uint64_t **old_ids, int64_t *nold,
                          tr_err *err);
/* Every chunk id the catalog refers to on site `site` (for a rejoining
** worker's clean-up); caller frees. */
int tc_site_chunks(tc_db *db, int64_t site, uint64_t **ids, int64_t *n, tr_err *err);
/* Forget that site holds these chunks (it reported them lost). */
int tc_replica_remove(tc_db *db, int64_t site, const uint64_t *ids, int64_t n, tr_err *err);
/* Record that site holds these chunks too (a copy made by a repair, or one
** a worker turned out to hold), in one transaction: every chunk row with
** such an id gets a replica row for site.  Ids no chunk row refers to are
** skipped. */
int tc_replica_add(tc_db *db, int64_t site, const uint64_t *ids, int64_t n, tr_err *err);
/* The sites holding chunk id (at most TC_MAX_REPLICAS, in site[]); *n = 0
** for an id no chunk row refers to. */
int tc_chunk_sites(tc_db *db, uint64_t id, int64_t *site, int *n, tr_err *err);
/* Which of chunks ids[0..n) (with the sizes and checksums a worker
** reported) the catalog refers to: known[i] = 1 when a chunk row has that
** id, size and checksum, else 0. */
int tc_chunks_known(tc_db *db, const uint64_t *ids, const uint64_t *nbytes, const uint64_t *sums,
                    int64_t n, int *known, tr_err *err);

/* A chunk with the name of a tensor it belongs to. */
typedef struct tc_chunkref {
  char tensor[TR_NAME_MAX]; /* tensor name */
  tc_chunkloc loc;          /* the chunk (lin within that tensor) and its holders */
} tc_chunkref;
/* Chunks with a replica on `site` (site > 0), or with fewer than `below`
** replicas (site 0), ordered by tensor name and chunk; *out is the
** caller's. */
int tc_chunks_select(tc_db *db, int64_t site, int below, tc_chunkref **out, int64_t *n,
                     tr_err *err);
/* Of tensor t's chunks: the fewest replicas any has, and how many have
** fewer than `target` (both 0 for a tensor with no chunks stored). */
int tc_tensor_replicas(tc_db *db, const tr_tensor *t, int target, int *fewest, int64_t *under,
                       tr_err *err);
/* A fresh cluster-wide chunk id (random 64-bit, never 0). */
uint64_t tc_new_chunk_id(void);

/* The chunk shape the user declared for the tensor called name (CREATE
** TENSOR .. CHUNK, LOAD .. CHUNK), kept by name so that an assignment
** that replaces the tensor keeps it: *declared = 1 and chunk[0..rank)
** filled when one of that rank was declared.  Set with rank >= 0; rank <
** 0 forgets it (a tensor declared without CHUNK, or dropped). */
int tc_declared_chunk_get(tc_db *db, const char *name, int rank, int64_t *chunk, int *declared,
                          tr_err *err);
int tc_declared_chunk_set(tc_db *db, const char *name, int rank, const int64_t *chunk,
                          tr_err *err);

/* Settings that persist with the database (SET name = value). */
int tc_setting_get(tc_db *db, const char *name, char *value, size_t cap, tr_err *err);
int tc_setting_set(tc_db *db, const char *name, const char *value, tr_err *err);

/*
** A worker's chunk store: chunks by id, each in a checksummed file, in
** memory, or both, with an in-memory index rebuilt on open from the files
** (those that do not verify are set aside, never served; a file unchanged
** since the store was last closed cleanly is not read again, see
** storefiles.c).  Chunks held in
** memory stay within a byte budget, and those held there only are written
** to their files by a background writer (catalog/storemem.c).  Used by
** `tradb --worker`.  Thread-safe: every function may be called from many
** threads at once.
*/
typedef struct tc_store tc_store;
int tc_store_open(const char *dir, tc_store **out, tr_err *err);
/* Close, first writing what is held in memory only into its files.
** Safe on NULL and twice. */
void tc_store_close(tc_store **s);

/* How a put keeps a chunk. */
typedef enum tc_keep {
  TC_KEEP_FILE = 0,      /* written to its file now (durable after
                            tc_store_sync), its bytes also kept in memory
                            for reads while the budget allows */
  TC_KEEP_SCRATCH = 1,   /* kept in memory and never written: a statement's
                            intermediates, dropped before anything commits
                            them; tc_store_sync refuses them */
  TC_KEEP_BACKGROUND = 2 /* kept in memory and written to its file in the
                            background a delay after the put (2 s by
                            default, see tc_store_set_writeback) once no
                            task has used the store for 0.25 s, at the
                            latest 30 s after the put, unless dropped
                            before; tc_store_sync writes it at once if it
                            is not yet.  Written at once, as FILE, when
                            the disk lacks room for it (see
                            tc_store_set_disk_reserve) */
} tc_keep;

/* Store chunk id from blob b, which the store keeps a reference to (its
** bytes must not change after).  A chunk that does not fit the memory
** budget is written to its file at once, whatever keep says.  If checksum
** != 0 the payload must match it (else TR_ECORRUPT); *sum (may be NULL)
** receives the payload checksum.  Re-putting an existing id replaces it. */
int tc_store_put_blob(tc_store *s, uint64_t id, tr_dtype dt, tr_blob *b, tc_keep keep,
                      uint64_t checksum, uint64_t *sum, tr_err *err);
/* As tc_store_put_blob, with the payload's checksum known and not computed
** again: for bytes that are the very pages another process hashed (a
** chunk mapped from a local worker's memory, tr_blob_map). */
int tc_store_put_summed(tc_store *s, uint64_t id, tr_dtype dt, tr_blob *b, tc_keep keep,
                        uint64_t sum, tr_err *err);
/* Size and checksum of a chunk: TR_ENOTFOUND if absent. */
int tc_store_stat(tc_store *s, uint64_t id, tr_dtype *dt, uint64_t *nbytes, uint64_t *sum);
/* Chunk id, of exactly nbytes, as a blob (*out: a reference the caller
** drops): the bytes held in memory if they are, else its file read and
** checked in full (then kept in memory while the budget allows).  A file
** that fails its checksum is set aside (renamed *.bad, forgotten) and the
** read fails with TR_ECORRUPT saying so. */
int tc_store_get_blob(tc_store *s, uint64_t id, size_t nbytes, tr_blob **out, tr_err *err);
/* Make chunks durable: written to their files if they are not yet, then
** fdatasync each, then the directory. */
int tc_store_sync(tc_store *s, const uint64_t *ids, int64_t n, tr_err *err);
/* The same for every chunk held in memory only (not scratch): after it
** the store's files hold all it holds that a commit may list. */
int tc_store_sync_unwritten(tc_store *s, tr_err *err);
/* Forget chunks; unknown ids are ignored.  Files of 256 KiB or more are
** kept for later puts to overwrite (see storefiles.c), up to a budget of
** disk bytes: 1/16 of memory, at most 1 GiB, unless set. */
int tc_store_drop(tc_store *s, const uint64_t *ids, int64_t n, tr_err *err);
/* What the store holds: id, size, checksum and type of every chunk;
** *out is the caller's. */
typedef struct tc_stored {
  uint64_t id;     /* chunk id */
  uint64_t nbytes; /* payload bytes */
  uint64_t sum;    /* payload checksum */
  tr_dtype dtype;  /* element type */
} tc_stored;
int tc_store_list(tc_store *s, tc_stored **out, int64_t *n, tr_err *err);
/* Move chunk id's file from store src to store dst (same file system):
** how a worker hands chunks kept in the layout before per-database stores
** to the database that lists them. */
int tc_store_move(tc_store *dst, tc_store *src, uint64_t id, tr_err *err);
/* The budget for chunks held in memory (default 1/8 of memory), for
** later puts; for a store sharing a pool, the pool's. */
void tc_store_set_memory(tc_store *s, int64_t bytes);
/* One budget for the chunks several stores hold in memory (a worker's
** databases): a put that does not fit makes room from the least recently
** used copies that are also in their files, its own store's first, then
** the other stores' (those not busy at that moment), and is otherwise
** written to its file at once.  Freed after every store in it is closed. */
typedef struct tc_mem_pool tc_mem_pool;
tc_mem_pool *tc_mem_pool_new(int64_t bytes);
void tc_mem_pool_free(tc_mem_pool **p);
/* Store s (just opened, holding nothing in memory yet) keeps its chunks
** in memory within pool p from now on, until it is closed. */
int tc_store_share_memory(tc_store *s, tc_mem_pool *p, tr_err *err);
/* The budget for kept files (0: keep none); files beyond it go. */
void tc_store_set_recycle(tc_store *s, int64_t bytes);
/* When chunks held in memory only are written: delay seconds after their
** put (default 2); delay < 0: only when synced or when the store closes. */
void tc_store_set_writeback(tc_store *s, double delay);
/* The disk bytes a chunk held in memory only must leave free beyond its
** file and the files of the others held so (default 64 MiB): a put for
** the background that would leave less is written at once, as
** TC_KEEP_FILE, and fails where the disk is full; so is every put for
** the background after a background write failed, until one succeeds. */
void tc_store_set_disk_reserve(tc_store *s, int64_t bytes);
/* A task starts (on 1) or ends (on 0) using the store: chunks held in
** memory only are written once it has been idle for a moment (or at the
** latest 30 s after their put), so the writer does not take memory
** bandwidth from the statements running. */
void tc_store_busy(tc_store *s, int on);
/* The budgets for chunks in memory and for kept files. */
void tc_store_budgets(tc_store *s, int64_t *memory, int64_t *recycle);
/* Chunks held and their total bytes. */
void tc_store_usage(tc_store *s, int64_t *chunks, int64_t *bytes);
/* What a store did with its files: at open, the chunk files it indexed
** from the memo its last clean close left (unchanged since, not read) and
** the payload bytes of the others, each read and verified in full; since,
** the chunk files it wrote, the syncs of the whole file system that
** made a batch of them durable at once, and the background writes that
** failed (each followed by a pause of the writer, up to 30 s). */
typedef struct tc_store_files {
  int64_t vouched;
  int64_t verified_bytes;
  int64_t written;
  int64_t fs_syncs;
  int64_t write_failures;
} tc_store_files;
void tc_store_file_counts(tc_store *s, tc_store_files *out);
/* Bytes held in memory, and of them not yet in their files. */
void tc_store_memory(tc_store *s, int64_t *held, int64_t *unwritten);
/* 1 while the background writer's last write failed (a full disk, most
** likely: chunks held in memory only are not reaching their files), with
** that write's error in why; else 0 and why empty. */
int tc_store_write_trouble(tc_store *s, char *why, size_t n);

/*
** Dense arrays in user files, .npy (NumPy format 1.0/2.0/3.0, C or Fortran
** order; '<f4' and '<f8' as they are, and bool, int8..int64,
** uint8..uint64 and float16 converted) and .csv (one row per line, rank 1
** or 2).  An opened array exposes data with element strides, so loading a
** chunk is one strided copy whatever the file's order.
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
  int dfd_;                    /* the same, O_DIRECT (a large npy written), or -1 */
  void *map_;                  /* mapping (npy) or heap buffer (csv) */
  size_t maplen_;              /* bytes mapped */
  char *path_;                 /* destination path (write) */
  char *tmp_;                  /* temporary path until commit (write) */
} tc_array;

/* How a CSV file is read (catalog/csv.c); zeros mean "tell from the
** file". */
typedef struct tc_csv_opts {
  int header;        /* 0: the first line is a header if no field of it is
                        a number; 1: it is one; -1: it is not */
  char delim;        /* field separator; 0: ',', ';' or tab, the one that
                        cuts the first lines evenly */
  int has_null;      /* empty fields read as null_value (else an error) */
  double null_value; /* (NaN for NULL nan) */
} tc_csv_opts;

/* Open `path` for reading; the format is chosen by extension (.npy, .csv or .tsv;
** otherwise by the NumPy magic).  A CSV (read as csv says; NULL: the
** defaults) and a .npy of integers, booleans or float16 are converted to
** element type dtype, a value that the type cannot hold exactly being an
** error naming it and its index.  Errors name the path: missing,
** unreadable, truncated, not a .npy file, unsupported dtype, ragged CSV,
** bad number at line L... */
int tc_array_open(const char *path, tr_dtype dtype, const tc_csv_opts *csv, tc_array *a,
                  tr_err *err);
/* Create `path` (by extension .npy or .csv) for writing, C order; the data
** goes to a temporary file until tc_array_commit(). */
int tc_array_create(const char *path, tr_dtype dtype, int rank,
                    const int64_t *shape, tc_array *a, tr_err *err);
/* Store n elements (a's type) at element first of created array a, in C
** order: a .npy's go to its file with one write (past the page cache
** where the run and buf are on TR_PAGE boundaries), where storing through
** data would fault each page of the file in, zeroed, first; a CSV's into
** its buffer.  Errors name the file. */
int tc_array_write(tc_array *a, int64_t first, const void *buf, int64_t n, tr_err *err);
/* Write a created array out durably and rename it into place. */
int tc_array_commit(tc_array *a, tr_err *err);
/* Release; an uncommitted created array leaves nothing behind. */
void tc_array_close(tc_array *a);

#endif /* TRADB_CATALOG_H */
