/*
** tests/fuzz/fuzz_memo.c - libFuzzer target for the decoder of a chunk
** store's memo (catalog/storefiles.c, ci_memo_decode): a file in the
** store's directory that anything may have written or cut short.  Any
** bytes must give either -1 and no entries, or entries that are exactly
** what the bytes hold: strictly increasing ids, each a chunk file's size
** (at least its header) and a known type.
**
** Input: the first byte's bit 0 set: the last 8 bytes of the rest are
** replaced by the checksum of the bytes before them, as a memo written by
** tradb has, so that mutated entries reach the checks past the checksum.
** The remaining bytes are the file's content.
*/
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"
#include "catalog/chunkfile.h"
#include "catalog/store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t n = size - 1;
  unsigned char *p = malloc(n + 1);
  if (!p) return 0;
  memcpy(p, data + 1, n);
  if ((data[0] & 1) && n >= 8) {
    uint64_t sum = tc_checksum(p, n - 8);
    for (int i = 0; i < 8; i++) p[n - 8 + (size_t)i] = (unsigned char)(sum >> (8 * i));
  }
  ci_memo *m = (ci_memo *)1;
  int64_t count = ci_memo_decode(p, n, &m);
  if (count < 0) {
    if (m) abort();
  } else {
    if ((uint64_t)count * 56 + 32 != n || (count > 0 && !m)) abort();
    for (int64_t i = 0; i < count; i++)
      if ((i && m[i].id <= m[i - 1].id) || m[i].size < CF_HEADER_SIZE ||
          (m[i].dtype != TR_F32 && m[i].dtype != TR_F64))
        abort();
  }
  free(m);
  free(p);
  return 0;
}
