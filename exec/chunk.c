/*
** exec/chunk.c - chunk helpers both roles use: the default chunk shape,
** element conversion, FILL's generator and row-major strides.
*/
#include "config.h"
#include "exec/exec.h"

#include <stdlib.h>
#include <string.h>

void tx_default_chunk(int rank, const int64_t *shape, tr_dtype dt, int64_t *chunk) {
  const int64_t limit = ((int64_t)4 << 20) / (int64_t)tr_dtype_size(dt);
  int64_t n = 1, count = 1;
  for (int d = 0; d < rank; d++) {
    chunk[d] = shape[d];
    n *= chunk[d];
  }
  /* halve the longest side while a chunk is over 4 MiB, and while the
  ** grid stays within TR_MAX_CHUNKS (a huge tensor gets larger chunks) */
  while (n > limit) {
    int big = 0;
    for (int d = 1; d < rank; d++)
      if (chunk[d] > chunk[big]) big = d;
    int64_t half = (chunk[big] + 1) / 2, grid = (shape[big] + half - 1) / half,
            was = (shape[big] + chunk[big] - 1) / chunk[big];
    if ((double)count / (double)was * (double)grid > (double)TR_MAX_CHUNKS) break;
    count = count / was * grid;
    n /= chunk[big];
    chunk[big] = half;
    n *= chunk[big];
  }
}

void tx_convert(void *dst, tr_dtype dt_dst, const void *src, tr_dtype dt_src, int64_t n) {
  if (dt_dst == dt_src) {
    memcpy(dst, src, (size_t)n * tr_dtype_size(dt_dst));
  } else if (dt_dst == TR_F64) {
    const float *s = src;
    double *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = s[i];
  } else {
    const double *s = src;
    float *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
  }
}

void tx_row_major(int rank, const int64_t *ext, int64_t *stride) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= ext[d];
  }
}

/* The permutation of 0..n-1 that FILL PERMUTATION SEED seed stands for:
** Fisher-Yates from the last position down, position i swapped with one
** drawn uniformly from 0..i (multiply-high, not a biased modulo).  Every
** chunk computes the whole permutation, so the values never depend on
** the chunking.  NULL when out of memory; the caller frees. */
static int64_t *s_permutation(uint64_t seed, int64_t n) {
  int64_t *perm = malloc((size_t)(n > 0 ? n : 1) * sizeof *perm);
  if (!perm) return NULL;
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    uint64_t r = tr_mix64(seed ^ tr_mix64((uint64_t)i));
    int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
    int64_t tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  return perm;
}

int tx_fill_chunk(const tk_backend *kt, const tr_tensor *t, const tx_fill *f, int64_t lin,
                  void *buf, const tr_cancel *cancel) {
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK], origin[TR_MAX_RANK];
  tr_key_from_linear(t, lin, key);
  int64_t n = tr_chunk_extent(t, key, ext);
  for (int d = 0; d < t->rank; d++) origin[d] = key[d] * t->chunk[d];
  if (f->kind == TP_FILL_UNIFORM || f->kind == TP_FILL_NORMAL)
    return kt->fill_random(t->dtype, f->kind == TP_FILL_UNIFORM ? TK_FILL_UNIFORM : TK_FILL_NORMAL,
                           f->p0, f->p1, f->seed, t->rank, t->shape, origin, ext, buf, cancel);
  double one = f->kind == TP_FILL_ONES ? 1.0 : 0.0;
  int64_t idx[TR_MAX_RANK] = {0}, *perm = NULL;
  if (f->kind == TP_FILL_PERMUTATION) {
    /* te_fill checked rank >= 2 and that the leading dimensions number as
    ** many rows as the last dimension has entries */
    if (!ALWAYS(t->rank >= 2)) return TR_EINVAL;
    if (!(perm = s_permutation(f->seed, t->shape[t->rank - 1]))) return TR_ENOMEM;
  }
  for (int64_t i = 0; i < n; i++) {
    double v = one;
    if (i % 65536 == 0 && tr_cancelled(cancel)) {
      free(perm);
      return TR_EINTR;
    }
    if (f->kind == TP_FILL_PERMUTATION) {
      int64_t row = 0; /* row-major number of the leading indices */
      for (int d = 0; d < t->rank - 1; d++) row = row * t->shape[d] + origin[d] + idx[d];
      v = perm[row] == origin[t->rank - 1] + idx[t->rank - 1] ? 1.0 : 0.0;
    } else if (f->kind == TP_FILL_IDENTITY) {
      v = 1.0;
      for (int d = 1; d < t->rank; d++)
        if (origin[d] + idx[d] != origin[0] + idx[0]) v = 0.0;
    } else if (f->kind == TP_FILL_INDEX && t->rank > 0) {
      v = (double)(origin[t->rank - 1] + idx[t->rank - 1]);
    }
    if (t->dtype == TR_F64) ((double *)buf)[i] = v;
    else ((float *)buf)[i] = (float)v;
    for (int d = t->rank - 1; d >= 0 && ++idx[d] == ext[d]; d--) idx[d] = 0;
  }
  free(perm);
  return TR_OK;
}
