/*
** catalog/chunkfile.c - the chunk file format (see chunkfile.h): writing a
** checksummed chunk durably and reading one back with every check that can
** tell a damaged or foreign file from a good one.
*/
#include "config.h"
#include "catalog/chunkfile.h"
#include "catalog/catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static const char s_magic[8] = {'T', 'R', 'A', 'D', 'B', 'C', 'H', 'K'};

int cf_is_chunk_file(const void *head, size_t n) {
  return n >= sizeof s_magic && memcmp(head, s_magic, sizeof s_magic) == 0;
}


/* Write h then data at the file offset, retrying short writes: one writev
** so the first page is filled in one go (a recycled file's page that is no
** longer cached is then not read back from disk just to be overwritten). */
static int s_write2(int fd, const void *h, size_t hn, const void *data,
                    size_t n) {
  struct iovec iov[2] = {{(void *)h, hn}, {(void *)data, n}};
  int i = 0;
  while (i < 2) {
    ssize_t k = writev(fd, iov + i, 2 - i);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (k == 0) return EIO;
    size_t left = (size_t)k;
    while (i < 2 && left >= iov[i].iov_len) left -= iov[i++].iov_len;
    if (i < 2) {
      iov[i].iov_base = (char *)iov[i].iov_base + left;
      iov[i].iov_len -= left;
    }
  }
  return 0;
}

/* The header of a chunk of nbytes of dtype, payload checksum sum, into h. */
static void s_header(unsigned char *h, tr_dtype dtype, size_t nbytes, uint64_t sum) {
  memset(h, 0, CF_HEADER_SIZE);
  memcpy(h, s_magic, 8);
  cf_put_le(h + 8, CF_VERSION, 4);
  cf_put_le(h + 12, (uint32_t)dtype, 4);
  cf_put_le(h + 16, (uint64_t)nbytes, 8);
  cf_put_le(h + 24, sum, 8);
  cf_put_le(h + 56, tc_checksum(h, 56), 8);
}

/* Write the header (in room) and payload with O_DIRECT: the disk reads
** them from the caller's pages, with no copy into the page cache, which
** cost 2-5 ms of CPU a MiB on the development machine (a worker writing
** its chunks competed with the statements for the cores).  The pages past
** the payload go too, then the file is cut to len.  Returns 0, or -1 where
** the file system or the pages do not take O_DIRECT (the caller then
** writes through the page cache), or an errno value. */
static int s_write_direct(const char *path, void *room, size_t span, off_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
  if (fd < 0) return errno == EINVAL ? -1 : errno;
  size_t done = 0;
  int e = 0;
  while (done < span) {
    ssize_t k = pwrite(fd, (char *)room + done, span - done, (off_t)done);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      e = done == 0 && errno == EINVAL ? -1 : errno;
      break;
    }
    if (k == 0 || (size_t)k % TR_PAGE) { /* a short write leaves an unaligned rest */
      e = -1;
      break;
    }
    done += (size_t)k;
  }
  if (e == 0 && ftruncate(fd, len) != 0) e = errno;
  if (close(fd) != 0 && e == 0) e = errno;
  return e;
}

int cf_write(const char *path, tr_dtype dtype, const void *data, size_t nbytes, uint64_t s,
             void *room, size_t span, tr_err *err) {
  unsigned char h[CF_HEADER_SIZE];
  struct stat st;
  int rc = TR_OK, e;
  off_t len = (off_t)(sizeof h + nbytes);
  if (room) {
    s_header(room, dtype, nbytes, s);
    e = s_write_direct(path, room, span, len);
    if (e > 0) {
      unlink(path);
      return tr_seterr(err, TR_EIO, "cannot write chunk file '%s': %s", path, strerror(e));
    }
    if (e == 0) return TR_OK;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600); /* the owner's only */
  if (fd < 0)
    return tr_seterr(err, TR_EIO, "cannot create chunk file '%s': %s", path,
                     strerror(errno));
  s_header(h, dtype, nbytes, s);
  e = s_write2(fd, h, sizeof h, data, nbytes);
  if (e == 0 && fstat(fd, &st) == 0 && st.st_size > len &&
      ftruncate(fd, len) != 0)
    e = errno;
  if (e != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot write chunk file '%s': %s", path,
                   strerror(e));
    goto done;
  }
  /* Start write-back now but do not wait for it: the caller makes the
  ** file durable with cf_sync() before anything refers to it, by which time
  ** the disk has mostly caught up.  Waiting here would idle a compute
  ** thread for every chunk (measured: ~80 ms of a 4096^3 product). */
  (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
done:
  /* close() can report a delayed write error; it counts as a failure. */
  if (close(fd) != 0 && rc == TR_OK)
    rc = tr_seterr(err, TR_EIO, "cannot write chunk file '%s': %s", path,
                   strerror(errno));
  if (rc != TR_OK) unlink(path);
  return rc;
}

int cf_sync(const char *path, tr_err *err) {
  int rc = TR_OK;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fdatasync(fd) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot sync chunk file '%s': %s", path,
                   strerror(errno));
  if (fd >= 0) close(fd);
  return rc;
}

int cf_read(const char *path, tr_dtype dtype, void *buf, size_t nbytes,
            uint64_t sum, const char *what, tr_err *err) {
  unsigned char h[CF_HEADER_SIZE];
  struct stat st;
  size_t got = 0;
  int rc = TR_OK, e;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return tr_seterr(err, TR_ECORRUPT, "chunk file missing for %s: %s",
                       what, path);
    return tr_seterr(err, TR_EIO, "cannot open chunk file of %s '%s': %s",
                     what, path, strerror(errno));
  }
  if (fstat(fd, &st) != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot stat chunk file of %s '%s': %s",
                   what, path, strerror(errno));
    goto done;
  }
  if ((e = tr_pread_all(fd, h, sizeof h, 0, &got)) != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot read chunk file of %s '%s': %s",
                   what, path, strerror(e));
    goto done;
  }
  if (got < sizeof h || memcmp(h, s_magic, 8) != 0 ||
      cf_get_le(h + 56, 8) != tc_checksum(h, 56)) {
    rc = tr_seterr(err, TR_ECORRUPT, "bad chunk file header for %s: %s",
                   what, path);
    goto done;
  }
  if (cf_get_le(h + 8, 4) != CF_VERSION) {
    rc = tr_seterr(err, TR_ECORRUPT,
                   "chunk file of %s has unknown format version %u: %s", what,
                   (unsigned)cf_get_le(h + 8, 4), path);
    goto done;
  }
  if (cf_get_le(h + 12, 4) != (uint32_t)dtype || cf_get_le(h + 16, 8) != nbytes ||
      (uint64_t)st.st_size != (uint64_t)CF_HEADER_SIZE + nbytes) {
    rc = tr_seterr(err, TR_ECORRUPT,
                   "chunk file of %s does not match the catalog (type or "
                   "size): %s",
                   what, path);
    goto done;
  }
  if ((e = tr_pread_all(fd, buf, nbytes, CF_HEADER_SIZE, &got)) != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot read chunk file of %s '%s': %s",
                   what, path, strerror(e));
    goto done;
  }
  if (got != nbytes) {
    rc = tr_seterr(err, TR_ECORRUPT, "chunk file of %s is truncated: %s",
                   what, path);
    goto done;
  }
  {
    uint64_t s = tc_checksum(buf, nbytes);
    if (s != cf_get_le(h + 24, 8) || s != sum)
      rc = tr_seterr(err, TR_ECORRUPT, "checksum mismatch in %s (%s)", what,
                   path);
  }
done:
  close(fd);
  return rc;
}
