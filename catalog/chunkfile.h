/*
** catalog/chunkfile.h - private to catalog/: the on-disk format of one
** stored chunk and its I/O.  catalog.c names files and keeps the index;
** chunkfile.c knows the bytes.
**
** A chunk file is a fixed 64-byte header followed by the payload:
**     0  8  magic "TRADBCHK"
**     8  4  format version (CF_VERSION), little-endian
**    12  4  dtype (tr_dtype value), little-endian
**    16  8  payload bytes, little-endian
**    24  8  XXH3_64bits of the payload, little-endian
**    32 24  reserved, zero
**    56  8  XXH3_64bits of bytes 0..55, little-endian
*/
#ifndef TRADB_CATALOG_CHUNKFILE_H
#define TRADB_CATALOG_CHUNKFILE_H

#include <stddef.h>
#include <stdint.h>
#include "util/util.h"

/* Little-endian fields of the store's files (chunk files, storefiles.c's
** memo), so they move between hosts: n bytes at p. */
static inline void cf_put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint64_t cf_get_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

#define CF_HEADER_SIZE 64
_Static_assert(CF_HEADER_SIZE == TR_BLOB_ROOM, "a blob's room holds a chunk file's header");
#define CF_VERSION 1

/* Write header and payload to `path`, start its write-back and close it;
** it is durable only after cf_sync().  A file already at `path` (a
** recycled chunk file) is overwritten in place and cut to the new length:
** rewriting pages the page cache still holds is a copy, where a new file
** needs fresh pages and blocks.  sum is the payload's checksum
** (tc_checksum), which the caller has already computed.  room, when not
** NULL, is the blob's room right before data (tr_blob_room, span its
** pages): the header is put there and the file written from it with
** O_DIRECT, past the page cache; a file system that refuses O_DIRECT
** gets the same file through the page cache.  On failure nothing is left
** at `path` and err says why. */
int cf_write(const char *path, tr_dtype dtype, const void *data,
             size_t nbytes, uint64_t sum, void *room, size_t span,
             tr_err *err);

/* Wait until the file `path` is on disk (fdatasync). */
int cf_sync(const char *path, tr_err *err);

/* Whether the n bytes at head begin a chunk file (its magic). */
int cf_is_chunk_file(const void *head, size_t n);

/* Read the chunk file `path` into buf (nbytes, as recorded in the catalog)
** and verify magic, header checksum, dtype, size and that the payload's
** checksum equals both the header's and `sum`.  Failures are TR_ECORRUPT
** (TR_EIO for OS errors other than a missing file), with messages naming
** `what` (e.g. "tensor A chunk [0,1]") and the path. */
int cf_read(const char *path, tr_dtype dtype, void *buf, size_t nbytes,
            uint64_t sum, const char *what, tr_err *err);

#endif /* TRADB_CATALOG_CHUNKFILE_H */
