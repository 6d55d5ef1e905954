/*
** exec/chunk.c - chunk helpers both roles use: the default chunk shape,
** element conversion, FILL's generator and row-major strides.
*/
#include "config.h"
#include "exec/exec.h"

#include <string.h>

void tx_default_chunk(int rank, const int64_t *shape, tr_dtype dt, int64_t *chunk) {
  const int64_t limit = ((int64_t)4 << 20) / (int64_t)tr_dtype_size(dt);
  int64_t n = 1;
  for (int d = 0; d < rank; d++) {
    chunk[d] = shape[d];
    n *= chunk[d];
  }
  while (n > limit) {
    int big = 0;
    for (int d = 1; d < rank; d++)
      if (chunk[d] > chunk[big]) big = d;
    n /= chunk[big];
    chunk[big] = (chunk[big] + 1) / 2;
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
  int64_t idx[TR_MAX_RANK] = {0};
  for (int64_t i = 0; i < n; i++) {
    double v = one;
    if (i % 65536 == 0 && tr_cancelled(cancel)) return TR_EINTR;
    if (f->kind == TP_FILL_IDENTITY) {
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
  return TR_OK;
}
