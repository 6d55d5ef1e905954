/*
** catalog/storefiles.c - the files of a worker's chunk store (see
** store.c): their names, the scan that rebuilds the index at open, and
** recycled files.
**
** A chunk is written to DIR/<id>.<n>.tmp and renamed to DIR/<id>.chk, so
** a crash never leaves a partial file under a final name; the scan at
** open removes leftover temporaries and rebuilds the index, verifying in
** full every chunk file the memo does not vouch for (below).  Files that
** do not verify are renamed to *.bad and never served.
**
** The memo: a store closed cleanly leaves DIR/VERIFIED, listing each of
** its chunk files (synced first) with its inode, size, modification and
** change times and its type and checksum.  At the next open a file whose
** stat still matches is indexed from the memo without being read.  Only
** the kernel sets a change time, so a file written to since, by tradb or
** anything else, never matches and is verified in full.  Verifying every
** file made each session's start read the whole store: an empty session
** on 1 GiB a worker took 0.30-0.37 s (1.4 s from a cold page cache), and
** 0.04 s with the memo, here (2 local workers).  What no stat
** shows, bits gone bad on the disk itself, open no longer finds; every
** read of a file still checks it in full, and a bad copy is set aside and
** made again from a good replica then (tc_store_get_blob).
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
  e->dtype = (tr_dtype)cf_get_le(h + 12, 4);
  e->nbytes = cf_get_le(h + 16, 8);
  e->sum = cf_get_le(h + 24, 8);
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

/* ---- the memo ---------------------------------------------------------------- */

#define S_MEMO "VERIFIED"
#define S_MEMO_TMP "VERIFIED.tmp"
#define S_MEMO_VERSION 1
#define S_MEMO_HEAD 24 /* magic, version u32, reserved u32, count u64 */
#define S_MEMO_ENT 56  /* id, inode, size, mtime ns, ctime ns, checksum, dtype: u64 each */
#define S_MEMO_MAX ((int64_t)1 << 30) /* a longer file is not a memo we wrote */
static const char s_memo_magic[8] = {'T', 'R', 'A', 'D', 'B', 'V', 'F', 'Y'};

static int64_t s_ns(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

static ci_memo s_memo_of(uint64_t id, const struct stat *sb, uint64_t sum, tr_dtype dt) {
  return (ci_memo){.id = id, .ino = (uint64_t)sb->st_ino, .size = (uint64_t)sb->st_size,
                  .sum = sum, .dtype = (uint64_t)dt, .mtime = s_ns(sb->st_mtim),
                  .ctime = s_ns(sb->st_ctim)};
}

int64_t ci_memo_decode(const unsigned char *p, size_t n, ci_memo **out) {
  *out = NULL;
  if (n < S_MEMO_HEAD + 8 || memcmp(p, s_memo_magic, 8) != 0 ||
      cf_get_le(p + 8, 4) != S_MEMO_VERSION)
    return -1;
  uint64_t count = cf_get_le(p + 16, 8);
  if (count > (n - S_MEMO_HEAD - 8) / S_MEMO_ENT || n != S_MEMO_HEAD + count * S_MEMO_ENT + 8 ||
      cf_get_le(p + n - 8, 8) != tc_checksum(p, n - 8))
    return -1;
  ci_memo *m = count ? malloc(count * sizeof *m) : NULL;
  if (count && !m) return -1;
  for (uint64_t i = 0; i < count; i++) {
    const unsigned char *q = p + S_MEMO_HEAD + i * S_MEMO_ENT;
    m[i] = (ci_memo){.id = cf_get_le(q, 8), .ino = cf_get_le(q + 8, 8),
                    .size = cf_get_le(q + 16, 8), .mtime = (int64_t)cf_get_le(q + 24, 8),
                    .ctime = (int64_t)cf_get_le(q + 32, 8), .sum = cf_get_le(q + 40, 8),
                    .dtype = cf_get_le(q + 48, 8)};
    if ((i && m[i].id <= m[i - 1].id) || m[i].size < CF_HEADER_SIZE ||
        (m[i].dtype != TR_F32 && m[i].dtype != TR_F64)) {
      free(m);
      return -1;
    }
  }
  *out = m;
  return (int64_t)count;
}

/* DIR's memo, decoded (see ci_memo_decode); 0 entries if there is none.
** *written: when the memo was written (its modification time, ns). */
static int64_t s_memo_load(const tc_store *s, ci_memo **out, int64_t *written) {
  char path[CI_PATH];
  struct stat st;
  size_t got = 0;
  int64_t n = -1;
  *out = NULL;
  snprintf(path, sizeof path, "%s/" S_MEMO, s->dir);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  unsigned char *p = NULL;
  if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size <= S_MEMO_MAX &&
      (p = malloc((size_t)st.st_size)) &&
      tr_pread_all(fd, p, (size_t)st.st_size, 0, &got) == 0 && got == (size_t)st.st_size) {
    n = ci_memo_decode(p, got, out);
    *written = s_ns(st.st_mtim);
  }
  free(p);
  close(fd);
  return n < 0 ? 0 : n;
}

static int s_memo_cmp(const void *a, const void *b) {
  uint64_t x = ((const ci_memo *)a)->id, y = ((const ci_memo *)b)->id;
  return (x > y) - (x < y);
}

/* Whether the memo m (n entries, written at `written`) vouches for file
** id as sb finds it.  A file's times are the kernel's clock tick, not a
** nanosecond: a file changed in the tick of the memo's write, or in the
** tick of its own last change that the memo recorded, shows the same
** times.  So a file whose times are not older than the memo is never
** vouched for (git's "racily clean" entries). */
static const ci_memo *s_memo_match(const ci_memo *m, int64_t n, int64_t written, uint64_t id,
                                   const struct stat *sb) {
  ci_memo key = {.id = id};
  const ci_memo *e = n ? bsearch(&key, m, (size_t)n, sizeof *m, s_memo_cmp) : NULL;
  if (!e || e->mtime >= written || e->ctime >= written) return NULL;
  ci_memo now = s_memo_of(id, sb, e->sum, (tr_dtype)e->dtype);
  return memcmp(&now, e, sizeof now) == 0 ? e : NULL;
}

void ci_memo_save(tc_store *s) {
  char path[CI_PATH], tmp[CI_PATH];
  ci_memo *m = malloc(((size_t)s->count + 1) * sizeof *m);
  int64_t n = 0;
  if (!m) return;
  for (size_t i = 0; i < s->cap; i++) {
    const ci_entry *e = &s->tab[i];
    struct stat sb;
    if (!e->id || !e->file) continue;
    ci_chunk_path(s, e->id, path);
    /* on the disk before the memo vouches for it */
    if ((!e->synced && cf_sync(path, NULL) != TR_OK) || stat(path, &sb) != 0) continue;
    m[n++] = s_memo_of(e->id, &sb, e->sum, e->dtype);
  }
  qsort(m, (size_t)n, sizeof *m, s_memo_cmp);
  size_t len = S_MEMO_HEAD + (size_t)n * S_MEMO_ENT + 8;
  unsigned char *p = calloc(1, len);
  if (p) {
    memcpy(p, s_memo_magic, 8);
    cf_put_le(p + 8, S_MEMO_VERSION, 8); /* (and the reserved word: 0) */
    cf_put_le(p + 16, (uint64_t)n, 8);
    for (int64_t i = 0; i < n; i++) {
      unsigned char *q = p + S_MEMO_HEAD + i * S_MEMO_ENT;
      uint64_t v[7] = {m[i].id, m[i].ino, m[i].size, (uint64_t)m[i].mtime, (uint64_t)m[i].ctime,
                       m[i].sum, m[i].dtype};
      for (int k = 0; k < 7; k++) cf_put_le(q + 8 * k, v[k], 8);
    }
    cf_put_le(p + len - 8, tc_checksum(p, len - 8), 8);
    /* whole or not at all: an older memo stays right for the files it
    ** still matches */
    snprintf(tmp, sizeof tmp, "%s/" S_MEMO_TMP, s->dir);
    snprintf(path, sizeof path, "%s/" S_MEMO, s->dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ok = fd >= 0 && tr_write_all(fd, p, len) == 0 && fdatasync(fd) == 0;
    if (fd >= 0 && close(fd) != 0) ok = 0;
    if (ok && rename(tmp, path) == 0)
      ci_fsync_dir(s->dir);
    else
      unlink(tmp);
  }
  free(p);
  free(m);
}

/* ---- the scan at open -------------------------------------------------------- */

int ci_scan(tc_store *s, tr_err *err) {
  char path[CI_PATH], bad[CI_PATH + 8];
  void *buf = NULL;
  size_t bufcap = 0;
  int rc = TR_OK, changed = 0;
  struct dirent *de;
  ci_memo *memo = NULL;
  int64_t written = 0, nmemo = s_memo_load(s, &memo, &written);
  snprintf(path, sizeof path, "%s/" S_MEMO_TMP, s->dir); /* a close cut short */
  unlink(path);
  DIR *d = opendir(s->dir);
  if (!d) {
    free(memo);
    return tr_seterr(err, TR_EIO, "cannot read chunk store '%s': %s", s->dir, strerror(errno));
  }
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
    const ci_memo *m = s_memo_match(memo, nmemo, written, e.id, &sb);
    if (m) {
      e.dtype = (tr_dtype)m->dtype;
      e.nbytes = m->size - CF_HEADER_SIZE;
      e.sum = m->sum;
      e.synced = 1;
      s->vouched++;
      rc = TR_OK;
    } else if ((rc = s_verify(path, &e, &buf, &bufcap)) == TR_OK) {
      s->verified_bytes += (int64_t)e.nbytes;
    }
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
  free(memo);
  if (rc == TR_OK && changed) ci_fsync_dir(s->dir);
  return rc;
}
