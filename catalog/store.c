/*
** catalog/store.c - a worker's chunk store (see catalog.h): one chunk file
** per chunk id, DIR/<16 hex digits>.chk, in the chunkfile.h format, and an
** in-memory index id -> {type, size, checksum}.
**
** A chunk is written to DIR/<id>.<seq>.tmp and renamed to its final name,
** so a crash never leaves a partial file under a final name; tc_store_open
** removes leftover temporaries and rebuilds the index by verifying every
** chunk file in full.  Files that do not verify are renamed to *.bad and
** never served.  DIR/LOCK is flock'd while the store is open, so a second
** process (or a second open) cannot remove this one's temporaries.
**
** Recycling: a dropped chunk file of S_RECYCLE_MIN bytes or more is not
** unlinked but renamed to DIR/<seq>.free, and the next put takes such a
** file (the closest in size) and overwrites it in place.  Statements that
** replace tensors of the same shape, as a workload's steps do, then write
** into pages the page cache already holds instead of allocating fresh
** pages and disk blocks for every chunk (a fresh file was written at
** 0.3-2.6 GB/s here, a recycled one at 4.3-5.1 GB/s).  The files kept
** stay under a budget (tc_store_set_recycle); open and close remove them.
**
** Scratch chunks (tc_store_put_scratch): a statement's intermediates and
** partial results, dropped when it ends, are held in memory instead of a
** file, up to a budget (1/8 of memory; beyond it they go to files as any
** chunk).  They are served as others are, never synced (asking is an
** error: only committed chunks are made durable), and gone after a crash,
** as the statement that made them is.
**
** Threads: the index and the files under final names change together
** under the write lock (rename + index update, unlink + index removal);
** reads and syncs of a file hold the read lock, so a concurrent re-put or
** drop of the same id never makes a good chunk look missing or damaged.
** Writing a file's bytes, the slow part of a put, takes no lock.
*/
#include "config.h"
#include "catalog/catalog.h"
#include "catalog/catalog_int.h"
#include "catalog/chunkfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_NAME_MAX 48 /* longest name we build in DIR, '/' included */
#define S_RECYCLE_MIN (256 << 10) /* smaller files are simply unlinked */
#define S_RECYCLE_FILES 64        /* recycled files kept at most */
#define S_RECYCLE_MAX ((int64_t)1 << 30) /* their bytes at most, by default */

/* One indexed chunk. */
typedef struct s_entry {
  uint64_t id;     /* chunk id; 0 marks an empty slot */
  uint64_t nbytes; /* payload bytes */
  uint64_t sum;    /* payload checksum */
  tr_dtype dtype;  /* element type */
  void *mem;       /* a scratch chunk's bytes (malloc); NULL: in its file */
} s_entry;

struct tc_store {
  char *dir;                 /* the store directory */
  int lockfd;                /* DIR/LOCK, flock'd until close; -1 if not */
  pthread_rwlock_t lock;     /* guards the fields below and the files under
                                final names */
  s_entry *tab;              /* open addressing with linear probing */
  size_t cap;                /* slots in tab: 0 or a power of two */
  int64_t count;             /* chunks indexed */
  int64_t bytes;             /* their payload bytes */
  int64_t nbad;              /* files set aside as *.bad by open */
  atomic_int_fast64_t mem_bytes; /* bytes of scratch chunks held */
  atomic_int_fast64_t mem_max; /* their budget */
  atomic_uint_fast64_t seq;  /* makes temporary names unique (no lock) */
  pthread_mutex_t free_mu;   /* guards the four below; taken after lock */
  struct {
    uint64_t seq;            /* the file is DIR/<seq>.free */
    int64_t size;            /* its length */
  } free[S_RECYCLE_FILES];   /* recycled files, oldest first */
  int nfree;
  int64_t free_bytes;        /* their total length */
  int64_t free_max;          /* the budget for free_bytes; 0: recycle none */
};

/* ---- the index (callers hold the lock) ----------------------------------- */

/* Chunk ids are random, but a stored id could be chosen by anyone: mix. */
static size_t s_hash(uint64_t id) {
  id ^= id >> 33;
  id *= 0xff51afd7ed558ccdull;
  id ^= id >> 33;
  return (size_t)id;
}

/* The slot holding id, or the empty slot where it would go (cap > 0).  The
** probe ends because the table is never more than half full. */
static size_t s_slot(const tc_store *s, uint64_t id) {
  size_t mask = s->cap - 1, i = s_hash(id) & mask;
  tr_assert(s->cap > 0 && (s->cap & mask) == 0);
  tr_assert((size_t)s->count * 2 <= s->cap);
  while (s->tab[i].id != 0 && s->tab[i].id != id) i = (i + 1) & mask;
  return i;
}

static s_entry *s_find(tc_store *s, uint64_t id) {
  if (s->cap == 0 || id == 0) return NULL; /* 0 marks empty slots: never stored */
  s_entry *e = &s->tab[s_slot(s, id)];
  return e->id == id ? e : NULL;
}

/* Make room for one more entry (load factor at most 1/2). */
static int s_reserve(tc_store *s) {
  if ((size_t)(s->count + 1) * 2 <= s->cap) return TR_OK;
  size_t ncap = s->cap ? s->cap * 2 : 64;
  s_entry *old = s->tab, *nt = calloc(ncap, sizeof *nt);
  size_t ocap = s->cap;
  if (!nt) return TR_ENOMEM;
  s->tab = nt;
  s->cap = ncap;
  for (size_t i = 0; i < ocap; i++)
    if (old[i].id != 0) {
      size_t j = s_slot(s, old[i].id);
      tr_assert(s->tab[j].id == 0); /* ids are unique */
      s->tab[j] = old[i];
    }
  free(old);
  return TR_OK;
}

/* Release a scratch chunk's bytes (lock held). */
static void s_free_mem(tc_store *s, s_entry *e) {
  if (!e->mem) return;
  free(e->mem);
  e->mem = NULL;
  int_fast64_t was = atomic_fetch_sub(&s->mem_bytes, (int_fast64_t)e->nbytes);
  tr_assert(was >= (int_fast64_t)e->nbytes);
}

/* Insert or replace (after s_reserve). */
static void s_set(tc_store *s, const s_entry *e) {
  s_entry *slot = &s->tab[s_slot(s, e->id)];
  if (slot->id == 0) {
    tr_assert((size_t)(s->count + 1) * 2 <= s->cap); /* s_reserve made room */
    s->count++;
  } else {
    s->bytes -= (int64_t)slot->nbytes;
  }
  *slot = *e;
  s->bytes += (int64_t)e->nbytes;
}

/* Remove id, shifting later entries of its probe run back so lookups
** never stop early at the hole. */
static void s_remove(tc_store *s, uint64_t id) {
  if (NEVER(s_find(s, id) == NULL)) return; /* callers remove what they found */
  size_t mask = s->cap - 1, i = s_slot(s, id), j = i;
  s->count--;
  s->bytes -= (int64_t)s->tab[i].nbytes;
  tr_assert(s->count >= 0 && s->bytes >= 0);
  s_free_mem(s, &s->tab[i]);
  for (;;) {
    j = (j + 1) & mask;
    if (s->tab[j].id == 0) break;
    size_t home = s_hash(s->tab[j].id) & mask;
    /* The entry at j may fill the hole at i unless its home lies in the
    ** cyclic range (i, j]. */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      s->tab[i] = s->tab[j];
      i = j;
    }
  }
  memset(&s->tab[i], 0, sizeof s->tab[i]);
}

/* ---- files --------------------------------------------------------------- */

/* DIR/<id>.chk (the length of dir was checked by tc_store_open). */
static void s_chunk_path(const tc_store *s, uint64_t id, char *buf) {
  snprintf(buf, CI_PATH, "%s/%016" PRIx64 ".chk", s->dir, id);
}

/* DIR/<seq>.free */
static void s_free_path(const tc_store *s, uint64_t seq, char *buf) {
  snprintf(buf, CI_PATH, "%s/%016" PRIx64 ".free", s->dir, seq);
}

/* Take entry i out of the recycled files (free_mu held); the path of its
** file goes to path, which the caller unlinks or renames. */
static void s_free_take(tc_store *s, int i, char *path) {
  tr_assert(i >= 0 && i < s->nfree);
  s_free_path(s, s->free[i].seq, path);
  s->free_bytes -= s->free[i].size;
  s->nfree--;
  memmove(s->free + i, s->free + i + 1,
          (size_t)(s->nfree - i) * sizeof s->free[0]);
  tr_assert(s->free_bytes >= 0);
}

/* Keep the chunk file at path, size bytes long, for a later put: 1 if it
** was renamed into the recycled files, 0 if the caller should unlink it.
** The oldest go first when the budget is full. */
static int s_recycle(tc_store *s, const char *path, int64_t size) {
  char dst[CI_PATH];
  int kept = 0;
  if (size < S_RECYCLE_MIN) return 0;
  pthread_mutex_lock(&s->free_mu);
  if (size <= s->free_max) {
    while (s->nfree > 0 && (s->nfree == S_RECYCLE_FILES ||
                            s->free_bytes + size > s->free_max)) {
      s_free_take(s, 0, dst);
      unlink(dst);
    }
    uint64_t seq = (uint64_t)atomic_fetch_add(&s->seq, 1) + 1;
    s_free_path(s, seq, dst);
    tr_assert(s->nfree < S_RECYCLE_FILES); /* the loop above made room */
    if (rename(path, dst) == 0) {
      s->free[s->nfree].seq = seq;
      s->free[s->nfree++].size = size;
      s->free_bytes += size;
      kept = 1;
    }
  }
  pthread_mutex_unlock(&s->free_mu);
  return kept;
}

/* Is a recycled file of a bytes a better home for size bytes than one of
** b?  One that holds them beats one that must grow; then the closer. */
static int s_fits_better(int64_t a, int64_t b, int64_t size) {
  if ((a >= size) != (b >= size)) return a >= size;
  return a >= size ? a < b : a > b;
}

/* Move the recycled file that best fits size bytes, newest first among
** equals (its pages are the likeliest to be cached), to tmp for cf_write
** to overwrite.  Only files within a factor of 2 of size are taken: a
** small chunk would throw most of a big file's pages away, and a big one
** in a small file would need mostly fresh pages anyway.  With none, or if
** the rename fails, cf_write creates tmp. */
static void s_reuse(tc_store *s, int64_t size, const char *tmp) {
  char path[CI_PATH];
  int best = -1;
  if (size < S_RECYCLE_MIN) return;
  pthread_mutex_lock(&s->free_mu);
  for (int i = s->nfree - 1; i >= 0; i--) {
    int64_t z = s->free[i].size;
    if (z <= 2 * size && 2 * z >= size &&
        (best < 0 || s_fits_better(z, s->free[best].size, size)))
      best = i;
  }
  if (best >= 0) {
    s_free_take(s, best, path);
    rename(path, tmp);
  }
  pthread_mutex_unlock(&s->free_mu);
}

/* Recycle or unlink id's file and forget it (write lock held): 1 if it was
** indexed, 0 if not, or TR_EIO (still indexed, file kept). */
static int s_forget(tc_store *s, uint64_t id, tr_err *err) {
  char path[CI_PATH];
  const s_entry *e = s_find(s, id);
  if (!e) return 0;
  if (e->mem) {
    s_remove(s, id);
    return 1;
  }
  s_chunk_path(s, id, path);
  if (s_recycle(s, path, (int64_t)e->nbytes + CF_HEADER_SIZE)) {
    s_remove(s, id);
    return 1;
  }
  if (unlink(path) != 0 && errno != ENOENT)
    return tr_seterr(err, TR_EIO, "cannot remove chunk file '%s': %s", path,
                     strerror(errno));
  s_remove(s, id);
  return 1;
}

/* Parse "<16 lowercase hex>" at the start of name into *id (non-zero);
** returns the rest of the name, or NULL. */
static const char *s_parse_id(const char *name, uint64_t *id) {
  uint64_t v = 0;
  for (int i = 0; i < 16; i++) {
    char c = name[i];
    if (c >= '0' && c <= '9')
      v = (v << 4) | (uint64_t)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v = (v << 4) | (uint64_t)(c - 'a' + 10);
    else
      return NULL;
  }
  *id = v;
  return v ? name + 16 : NULL;
}

/* Is rest ".<digits>.tmp", the tail of a temporary name? */
static int s_is_tmp(const char *rest) {
  if (*rest++ != '.' || *rest < '0' || *rest > '9') return 0;
  while (*rest >= '0' && *rest <= '9') rest++;
  return strcmp(rest, ".tmp") == 0;
}

static uint64_t s_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* Verify chunk file `path` in full and fill e from its header (chunkfile.h:
** dtype at 12, payload bytes at 16, payload checksum at 24; cf_read checks
** the rest).  *buf (*bufcap bytes) is a scratch buffer grown as needed.
** Returns TR_OK, TR_ECORRUPT for a file to set aside, or TR_ENOMEM. */
static int s_verify(const char *path, s_entry *e, void **buf, size_t *bufcap) {
  unsigned char h[CF_HEADER_SIZE];
  struct stat st;
  size_t got = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return TR_ECORRUPT;
  int bad = fstat(fd, &st) != 0 ||
            tr_pread_all(fd, h, sizeof h, 0, &got) != 0 || got != sizeof h;
  close(fd);
  if (bad) return TR_ECORRUPT;
  e->dtype = (tr_dtype)s_le(h + 12, 4);
  e->nbytes = s_le(h + 16, 8);
  e->sum = s_le(h + 24, 8);
  if ((e->dtype != TR_F32 && e->dtype != TR_F64) ||
      (uint64_t)st.st_size != CF_HEADER_SIZE + e->nbytes ||
      e->nbytes > SIZE_MAX)
    return TR_ECORRUPT;
  if (e->nbytes > *bufcap) {
    void *p = realloc(*buf, (size_t)e->nbytes);
    if (!p) return TR_ENOMEM;
    *buf = p;
    *bufcap = (size_t)e->nbytes;
  }
  return cf_read(path, e->dtype, *buf, (size_t)e->nbytes, e->sum, "chunk",
                 NULL) == TR_OK ? TR_OK : TR_ECORRUPT;
}

/* Rebuild the index from DIR: remove temporaries and recycled files,
** verify each chunk file, set aside those that fail. */
static int s_scan(tc_store *s, tr_err *err) {
  char path[CI_PATH], bad[CI_PATH + 8];
  void *buf = NULL;
  size_t bufcap = 0;
  int rc = TR_OK, changed = 0;
  struct dirent *de;
  DIR *d = opendir(s->dir);
  if (!d)
    return tr_seterr(err, TR_EIO, "cannot read chunk store '%s': %s", s->dir,
                     strerror(errno));
  while ((de = readdir(d)) != NULL) {
    struct stat sb;
    s_entry e = {0};
    const char *rest = s_parse_id(de->d_name, &e.id);
    if (!rest ||
        fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(sb.st_mode))
      continue;
    if (s_is_tmp(rest) || strcmp(rest, ".free") == 0) {
      if (unlinkat(dirfd(d), de->d_name, 0) == 0) changed = 1;
      continue;
    }
    if (strcmp(rest, ".chk") != 0) continue;
    s_chunk_path(s, e.id, path);
    rc = s_verify(path, &e, &buf, &bufcap);
    if (rc == TR_ECORRUPT) {
      snprintf(bad, sizeof bad, "%s.bad", path);
      rename(path, bad);
      s->nbad++;
      changed = 1;
      rc = TR_OK;
    } else if (rc == TR_OK && (rc = s_reserve(s)) == TR_OK) {
      s_set(s, &e);
    }
    if (rc) {
      rc = tr_seterr(err, rc, "out of memory indexing chunk store '%s'",
                     s->dir);
      break;
    }
  }
  closedir(d);
  free(buf);
  if (rc == TR_OK && changed) ci_fsync_dir(s->dir);
  return rc;
}

/* ---- the API ------------------------------------------------------------- */

int tc_store_open(const char *dir, tc_store **out, tr_err *err) {
  tc_store *s = NULL;
  pthread_rwlockattr_t attr;
  char path[CI_PATH];
  struct stat st;
  int rc = TR_OK;
  if (!out) return tr_seterr(err, TR_EINVAL, "tc_store_open: bad argument");
  *out = NULL;
  if (!dir || !*dir)
    return tr_seterr(err, TR_EINVAL, "tc_store_open: no directory");
  if (strlen(dir) + S_NAME_MAX >= CI_PATH)
    return tr_seterr(err, TR_EINVAL, "chunk store path too long: %.200s...",
                     dir);
  if (!(s = calloc(1, sizeof *s)))
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  s->lockfd = -1;
  atomic_init(&s->seq, 0);
  pthread_mutex_init(&s->free_mu, NULL);
  int64_t mem = tr_phys_memory();
  s->free_max = mem / 16 < S_RECYCLE_MAX ? mem / 16 : S_RECYCLE_MAX;
  atomic_init(&s->mem_max, mem / 8);
  atomic_init(&s->mem_bytes, 0);
  /* Writers first: a stream of gets must not starve a put's rename. */
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr,
                                PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  int e = pthread_rwlock_init(&s->lock, &attr);
  pthread_rwlockattr_destroy(&attr);
  if (e != 0) {
    free(s);
    return tr_seterr(err, TR_ENOMEM, "cannot create a lock: %s", strerror(e));
  }
  if (!(s->dir = strdup(dir))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  if (mkdir(dir, 0700) == 0) { /* chunks are the user's data: owner only */
    snprintf(path, sizeof path, "%s/..", dir); /* make the new dir durable */
    ci_fsync_dir(path);
  } else if (errno != EEXIST) {
    rc = tr_seterr(err, TR_EIO, "cannot create chunk store '%s': %s", dir,
                   strerror(errno));
    goto done;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    rc = tr_seterr(err, TR_EINVAL, "chunk store '%s' is not a directory",
                   dir);
    goto done;
  }
  snprintf(path, sizeof path, "%s/LOCK", dir);
  if ((s->lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
    rc = tr_seterr(err, TR_EIO, "cannot open '%s': %s", path,
                   strerror(errno));
    goto done;
  }
  if (flock(s->lockfd, LOCK_EX | LOCK_NB) != 0) {
    rc = tr_seterr(err, TR_EIO, errno == EWOULDBLOCK
                   ? "chunk store '%s' is in use by another process"
                   : "cannot lock chunk store '%s'", dir);
    goto done;
  }
  rc = s_scan(s, err);
done:
  if (rc)
    tc_store_close(&s);
  else
    *out = s;
  return rc;
}

void tc_store_close(tc_store **ps) {
  tc_store *s = ps ? *ps : NULL;
  if (!s) return;
  *ps = NULL;
  tc_store_set_recycle(s, 0); /* no one else uses the store now */
  for (size_t i = 0; i < s->cap; i++)
    if (s->tab[i].id) s_free_mem(s, &s->tab[i]);
  if (s->lockfd >= 0) close(s->lockfd);
  pthread_mutex_destroy(&s->free_mu);
  pthread_rwlock_destroy(&s->lock);
  free(s->tab);
  free(s->dir);
  free(s);
}

/* Count n more bytes of scratch chunks: 0 (nothing counted) if that
** would pass the budget. */
static int s_take_mem(tc_store *s, size_t n) {
  int_fast64_t was = atomic_fetch_add(&s->mem_bytes, (int_fast64_t)n);
  if (was + (int_fast64_t)n <= atomic_load(&s->mem_max)) return 1;
  atomic_fetch_sub(&s->mem_bytes, (int_fast64_t)n);
  return 0;
}

/* tc_store_put and tc_store_put_scratch. */
static int s_put(tc_store *s, uint64_t id, tr_dtype dt, const void *data,
                 size_t nbytes, uint64_t checksum, uint64_t *sum, int scratch,
                 tr_err *err) {
  char tmp[CI_PATH], path[CI_PATH];
  s_entry e;
  int rc = TR_OK;
  if (!s || id == 0 || (dt != TR_F32 && dt != TR_F64) ||
      (!data && nbytes > 0) || nbytes % tr_dtype_size(dt) != 0)
    return tr_seterr(err, TR_EINVAL, "tc_store_put: bad argument");
  memset(&e, 0, sizeof e);
  if (!data) data = "";
  s_chunk_path(s, id, path);
  if (scratch && s_take_mem(s, nbytes)) {
    if (!(e.mem = malloc(nbytes ? nbytes : 1))) {
      atomic_fetch_sub(&s->mem_bytes, (int_fast64_t)nbytes);
      return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
    memcpy(e.mem, data, nbytes);
    e.sum = cf_checksum(data, nbytes);
  } else {
    snprintf(tmp, sizeof tmp, "%s/%016" PRIx64 ".%" PRIu64 ".tmp", s->dir,
             id, (uint64_t)atomic_fetch_add(&s->seq, 1));
    s_reuse(s, (int64_t)nbytes + CF_HEADER_SIZE, tmp);
    if ((rc = cf_write(tmp, dt, data, nbytes, &e.sum, err))) return rc;
  }
  e.id = id;
  e.dtype = dt;
  e.nbytes = nbytes;
  if (checksum != 0 && e.sum != checksum)
    rc = tr_seterr(err, TR_ECORRUPT, "chunk %016" PRIx64 ": checksum "
                   "mismatch", id);
  /* Rename and index together, so the index describes the file that won
  ** when the same id is put twice at once. */
  pthread_rwlock_wrlock(&s->lock);
  if (rc == TR_OK && s_reserve(s) != TR_OK)
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  if (rc == TR_OK && !e.mem && rename(tmp, path) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot rename chunk file '%s': %s", tmp,
                   strerror(errno));
  if (rc == TR_OK) {
    s_entry *old = s_find(s, id);
    if (old && old->mem)
      s_free_mem(s, old);
    else if (old && e.mem)
      unlink(path); /* the file the scratch copy replaces */
    s_set(s, &e);
  }
  pthread_rwlock_unlock(&s->lock);
  if (rc == TR_OK) {
    if (sum) *sum = e.sum;
  } else if (e.mem) {
    s_free_mem(s, &e);
  } else {
    unlink(tmp);
  }
  return rc;
}

int tc_store_put(tc_store *s, uint64_t id, tr_dtype dt, const void *data,
                 size_t nbytes, uint64_t checksum, uint64_t *sum,
                 tr_err *err) {
  return s_put(s, id, dt, data, nbytes, checksum, sum, 0, err);
}

int tc_store_put_scratch(tc_store *s, uint64_t id, tr_dtype dt,
                         const void *data, size_t nbytes, uint64_t checksum,
                         uint64_t *sum, tr_err *err) {
  return s_put(s, id, dt, data, nbytes, checksum, sum, 1, err);
}

int tc_store_stat(tc_store *s, uint64_t id, tr_dtype *dt, uint64_t *nbytes,
                  uint64_t *sum) {
  int rc = TR_ENOTFOUND;
  if (!s) return TR_EINVAL;
  pthread_rwlock_rdlock(&s->lock);
  const s_entry *e = s_find(s, id);
  if (e) {
    if (dt) *dt = e->dtype;
    if (nbytes) *nbytes = e->nbytes;
    if (sum) *sum = e->sum;
    rc = TR_OK;
  }
  pthread_rwlock_unlock(&s->lock);
  return rc;
}

/* Set aside id's file, which failed its checksum on a read: renamed to
** *.bad (never served, kept for inspection) and forgotten, so the worker
** reports it missing and a good replica can take its place.  Only if the
** entry is still the file that was read (a re-put may have replaced it). */
static void s_set_aside(tc_store *s, uint64_t id, uint64_t sum) {
  char path[CI_PATH], bad[CI_PATH + 8];
  pthread_rwlock_wrlock(&s->lock);
  const s_entry *e = s_find(s, id);
  if (e && !e->mem && e->sum == sum) {
    s_chunk_path(s, id, path);
    snprintf(bad, sizeof bad, "%s.bad", path);
    if (rename(path, bad) != 0) unlink(path);
    s_remove(s, id);
    s->nbad++;
  }
  pthread_rwlock_unlock(&s->lock);
  ci_fsync_dir(s->dir);
}

int tc_store_get(tc_store *s, uint64_t id, void *buf, size_t nbytes,
                 tr_err *err) {
  char path[CI_PATH], what[40];
  uint64_t sum = 0;
  int rc;
  if (!s || (!buf && nbytes > 0))
    return tr_seterr(err, TR_EINVAL, "tc_store_get: bad argument");
  snprintf(what, sizeof what, "chunk %016" PRIx64, id);
  s_chunk_path(s, id, path);
  pthread_rwlock_rdlock(&s->lock);
  const s_entry *e = s_find(s, id);
  if (!e)
    rc = tr_seterr(err, TR_ENOTFOUND, "%s is not in chunk store '%s'", what,
                   s->dir);
  else if (e->nbytes != nbytes)
    rc = tr_seterr(err, TR_EINVAL, "%s holds %" PRIu64 " bytes, not %zu",
                   what, e->nbytes, nbytes);
  else if (e->mem) {
    memcpy(buf, e->mem, nbytes);
    rc = TR_OK;
  } else {
    sum = e->sum;
    rc = cf_read(path, e->dtype, buf, nbytes, e->sum, what, err);
  }
  pthread_rwlock_unlock(&s->lock);
  if (rc == TR_ECORRUPT) {
    s_set_aside(s, id, sum);
    if (err) {
      char why[sizeof err->msg];
      snprintf(why, sizeof why, "%s", err->msg);
      tr_seterr(err, TR_ECORRUPT, "%s (set aside as damaged)", why);
    }
  }
  return rc;
}

int tc_store_sync(tc_store *s, const uint64_t *ids, int64_t n, tr_err *err) {
  char path[CI_PATH];
  int rc = TR_OK, e;
  if (!s || n < 0 || (!ids && n > 0))
    return tr_seterr(err, TR_EINVAL, "tc_store_sync: bad argument");
  for (int64_t i = 0; i < n && rc == TR_OK; i++) {
    s_chunk_path(s, ids[i], path);
    pthread_rwlock_rdlock(&s->lock);
    const s_entry *en = s_find(s, ids[i]);
    if (!en)
      rc = tr_seterr(err, TR_ENOTFOUND, "chunk %016" PRIx64 " is not in "
                     "chunk store '%s'", ids[i], s->dir);
    else if (en->mem)
      rc = tr_seterr(err, TR_EINVAL, "chunk %016" PRIx64 " is scratch, held "
                     "in memory only: it cannot be made durable", ids[i]);
    else
      rc = cf_sync(path, err);
    pthread_rwlock_unlock(&s->lock);
  }
  /* The renames into final names are durable once the directory is. */
  if (rc == TR_OK && (e = ci_fsync_dir(s->dir)) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot sync '%s': %s", s->dir, strerror(e));
  return rc;
}

int tc_store_drop(tc_store *s, const uint64_t *ids, int64_t n, tr_err *err) {
  int rc = TR_OK, dropped = 0;
  if (!s || n < 0 || (!ids && n > 0))
    return tr_seterr(err, TR_EINVAL, "tc_store_drop: bad argument");
  pthread_rwlock_wrlock(&s->lock);
  for (int64_t i = 0; i < n; i++) {
    int r = s_forget(s, ids[i], rc ? NULL : err);
    if (r > 0)
      dropped = 1;
    else if (r < 0 && rc == TR_OK)
      rc = r;
  }
  pthread_rwlock_unlock(&s->lock);
  if (dropped) ci_fsync_dir(s->dir);
  return rc;
}

int tc_store_list(tc_store *s, tc_stored **out, int64_t *n, tr_err *err) {
  tc_stored *v = NULL;
  int64_t k = 0;
  *out = NULL;
  *n = 0;
  if (!s) return tr_seterr(err, TR_EINVAL, "tc_store_list: bad argument");
  pthread_rwlock_rdlock(&s->lock);
  if ((v = malloc(((size_t)s->count + 1) * sizeof *v))) {
    for (size_t i = 0; i < s->cap; i++)
      if (s->tab[i].id != 0)
        v[k++] = (tc_stored){s->tab[i].id, s->tab[i].nbytes, s->tab[i].sum, s->tab[i].dtype};
    tr_assert(k == s->count); /* count is the number of full slots */
  }
  pthread_rwlock_unlock(&s->lock);
  if (!v) return tr_seterr(err, TR_ENOMEM, "out of memory");
  *out = v;
  *n = k;
  return TR_OK;
}

int tc_store_move(tc_store *dst, tc_store *src, uint64_t id, tr_err *err) {
  char from[CI_PATH], to[CI_PATH];
  int rc = TR_OK;
  if (!dst || !src || dst == src) return tr_seterr(err, TR_EINVAL, "tc_store_move: bad argument");
  s_chunk_path(src, id, from);
  s_chunk_path(dst, id, to);
  pthread_rwlock_wrlock(&src->lock);
  pthread_rwlock_wrlock(&dst->lock);
  const s_entry *e = s_find(src, id);
  s_entry moved;
  if (!e)
    rc = tr_seterr(err, TR_ENOTFOUND, "chunk %016" PRIx64 " is not in chunk store '%s'", id,
                   src->dir);
  else if (e->mem)
    rc = tr_seterr(err, TR_EINVAL, "chunk %016" PRIx64 " is scratch: it does not move", id);
  else if (s_reserve(dst) != TR_OK)
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  else if (rename(from, to) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot move chunk file '%s' to '%s': %s", from, to,
                   strerror(errno));
  if (rc == TR_OK) {
    moved = *e;
    s_remove(src, id);
    s_set(dst, &moved);
  }
  pthread_rwlock_unlock(&dst->lock);
  pthread_rwlock_unlock(&src->lock);
  if (rc == TR_OK) {
    ci_fsync_dir(dst->dir);
    ci_fsync_dir(src->dir);
  }
  return rc;
}

void tc_store_set_recycle(tc_store *s, int64_t bytes) {
  char path[CI_PATH];
  if (!s) return;
  pthread_mutex_lock(&s->free_mu);
  s->free_max = bytes > 0 ? bytes : 0;
  while (s->free_bytes > s->free_max) {
    s_free_take(s, 0, path);
    unlink(path);
  }
  pthread_mutex_unlock(&s->free_mu);
}

void tc_store_set_scratch(tc_store *s, int64_t bytes) {
  if (s) atomic_store(&s->mem_max, bytes > 0 ? bytes : 0);
}

void tc_store_budgets(tc_store *s, int64_t *scratch, int64_t *recycle) {
  int64_t m = 0, r = 0;
  if (s) {
    m = atomic_load(&s->mem_max);
    pthread_mutex_lock(&s->free_mu);
    r = s->free_max;
    pthread_mutex_unlock(&s->free_mu);
  }
  if (scratch) *scratch = m;
  if (recycle) *recycle = r;
}

void tc_store_usage(tc_store *s, int64_t *chunks, int64_t *bytes) {
  int64_t c = 0, b = 0;
  if (s) {
    pthread_rwlock_rdlock(&s->lock);
    c = s->count;
    b = s->bytes;
    pthread_rwlock_unlock(&s->lock);
  }
  if (chunks) *chunks = c;
  if (bytes) *bytes = b;
}
