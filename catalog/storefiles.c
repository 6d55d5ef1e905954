/*
** catalog/storefiles.c - the files of a worker's chunk store (see
** store.c): their names, the scan that rebuilds the index at open, and
** recycled files.
**
** A chunk is written to DIR/<id>.<n>.tmp and renamed to DIR/<id>.chk, so
** a crash never leaves a partial file under a final name; the scan at
** open removes leftover temporaries and rebuilds the index by verifying
** every chunk file in full.  Files that do not verify are renamed to
** *.bad and never served.
**
** Recycling: a dropped chunk file of CI_RECYCLE_MIN bytes or more is not
** unlinked but renamed to DIR/<n>.free, and the next write takes such a
** file (the closest in size) and overwrites it in place.  Statements that
** replace tensors of the same shape, as a workload's steps do, then write
** into disk blocks already allocated, and a chunk written through the
** page cache (one whose bytes have no room for O_DIRECT, cf_write) into
** pages the page cache already holds, instead of fresh pages and blocks
** for every chunk (through the page cache, a fresh file was written at
** 0.3-2.6 GB/s here, a recycled one at 4.3-5.1 GB/s).  The files kept
** stay under a budget (tc_store_set_recycle); open and close remove them.
*/
#include "config.h"
#include "catalog/store_int.h"
#include "catalog/chunkfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ci_chunk_path(const tc_store *s, uint64_t id, char *buf) {
  snprintf(buf, CI_PATH, "%s/%016" PRIx64 ".chk", s->dir, id);
}

void ci_tmp_path(tc_store *s, uint64_t id, char *buf) {
  snprintf(buf, CI_PATH, "%s/%016" PRIx64 ".%" PRIu64 ".tmp", s->dir, id,
           (uint64_t)atomic_fetch_add(&s->clock, 1));
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
  memmove(s->free + i, s->free + i + 1, (size_t)(s->nfree - i) * sizeof s->free[0]);
  tr_assert(s->free_bytes >= 0);
}

/* The oldest go first when the budget is full. */
int ci_recycle(tc_store *s, const char *path, int64_t size) {
  char dst[CI_PATH];
  int kept = 0;
  if (size < CI_RECYCLE_MIN) return 0;
  pthread_mutex_lock(&s->free_mu);
  if (size <= s->free_max) {
    while (s->nfree > 0 && (s->nfree == CI_RECYCLE_FILES || s->free_bytes + size > s->free_max)) {
      s_free_take(s, 0, dst);
      unlink(dst);
    }
    uint64_t seq = (uint64_t)atomic_fetch_add(&s->clock, 1) + 1;
    s_free_path(s, seq, dst);
    tr_assert(s->nfree < CI_RECYCLE_FILES); /* the loop above made room */
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

void ci_recycle_limit(tc_store *s, int64_t bytes) {
  char path[CI_PATH];
  pthread_mutex_lock(&s->free_mu);
  s->free_max = bytes > 0 ? bytes : 0;
  while (s->free_bytes > s->free_max) {
    s_free_take(s, 0, path);
    unlink(path);
  }
  pthread_mutex_unlock(&s->free_mu);
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
  if (size < CI_RECYCLE_MIN) return;
  pthread_mutex_lock(&s->free_mu);
  for (int i = s->nfree - 1; i >= 0; i--) {
    int64_t z = s->free[i].size;
    if (z <= 2 * size && 2 * z >= size && (best < 0 || s_fits_better(z, s->free[best].size, size)))
      best = i;
  }
  if (best >= 0) {
    s_free_take(s, best, path);
    rename(path, tmp);
  }
  pthread_mutex_unlock(&s->free_mu);
}

int ci_write_tmp(tc_store *s, const char *tmp, tr_dtype dt, tr_blob *b, uint64_t sum, tr_err *err) {
  size_t n = tr_blob_size(b), span;
  tr_blob *copy = NULL;
  void *room = tr_blob_room(b, &span);
  /* bytes with no room (a received frame's) are copied into a blob with
  ** room: a copy within the heap costs less than one into fresh page
  ** cache pages */
  if (!room && n >= TR_BLOB_ROOM_MIN && (copy = tr_blob_new(n))) {
    memcpy(tr_blob_data(copy), tr_blob_data(b), n);
    room = tr_blob_room(copy, &span);
  }
  s_reuse(s, (int64_t)n + CF_HEADER_SIZE, tmp);
  int rc = cf_write(tmp, dt, tr_blob_data(copy ? copy : b), n, sum, room, span, err);
  tr_blob_unref(&copy);
  return rc;
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
static int s_verify(const char *path, ci_entry *e, void **buf, size_t *bufcap) {
  unsigned char h[CF_HEADER_SIZE];
  struct stat st;
  size_t got = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return TR_ECORRUPT;
  int bad = fstat(fd, &st) != 0 || tr_pread_all(fd, h, sizeof h, 0, &got) != 0 || got != sizeof h;
  close(fd);
  if (bad) return TR_ECORRUPT;
  e->dtype = (tr_dtype)s_le(h + 12, 4);
  e->nbytes = s_le(h + 16, 8);
  e->sum = s_le(h + 24, 8);
  if ((e->dtype != TR_F32 && e->dtype != TR_F64) ||
      (uint64_t)st.st_size != CF_HEADER_SIZE + e->nbytes || e->nbytes > SIZE_MAX)
    return TR_ECORRUPT;
  if (e->nbytes > *bufcap) {
    void *p = realloc(*buf, (size_t)e->nbytes);
    if (!p) return TR_ENOMEM;
    *buf = p;
    *bufcap = (size_t)e->nbytes;
  }
  return cf_read(path, e->dtype, *buf, (size_t)e->nbytes, e->sum, "chunk", NULL) == TR_OK
             ? TR_OK
             : TR_ECORRUPT;
}

int ci_scan(tc_store *s, tr_err *err) {
  char path[CI_PATH], bad[CI_PATH + 8];
  void *buf = NULL;
  size_t bufcap = 0;
  int rc = TR_OK, changed = 0;
  struct dirent *de;
  DIR *d = opendir(s->dir);
  if (!d) return tr_seterr(err, TR_EIO, "cannot read chunk store '%s': %s", s->dir, strerror(errno));
  while ((de = readdir(d)) != NULL) {
    struct stat sb;
    ci_entry e = {0};
    const char *rest = s_parse_id(de->d_name, &e.id);
    if (!rest || fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
      continue;
    if (s_is_tmp(rest) || strcmp(rest, ".free") == 0) {
      if (unlinkat(dirfd(d), de->d_name, 0) == 0) changed = 1;
      continue;
    }
    if (strcmp(rest, ".chk") != 0) continue;
    ci_chunk_path(s, e.id, path);
    rc = s_verify(path, &e, &buf, &bufcap);
    if (rc == TR_ECORRUPT) {
      snprintf(bad, sizeof bad, "%s.bad", path);
      rename(path, bad);
      s->nbad++;
      changed = 1;
      rc = TR_OK;
    } else if (rc == TR_OK) {
      e.file = 1;
      rc = ci_index_file(s, &e);
    }
    if (rc) {
      rc = tr_seterr(err, rc, "out of memory indexing chunk store '%s'", s->dir);
      break;
    }
  }
  closedir(d);
  free(buf);
  if (rc == TR_OK && changed) ci_fsync_dir(s->dir);
  return rc;
}
