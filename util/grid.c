/*
** util/grid.c - chunk-grid arithmetic (see grid.h).
*/
#include "config.h"
#include "util/grid.h"

int64_t tr_grid(const tr_tensor *t, int d) {
  if (d < 0 || d >= t->rank) return 1;
  if (t->shape[d] <= 0) return 0;
  int64_t c = t->chunk[d] > 0 ? t->chunk[d] : 1;
  return t->shape[d] / c + (t->shape[d] % c != 0);
}

double tr_tensor_bytes(const tr_tensor *t) {
  double b = (double)tr_dtype_size(t->dtype);
  for (int d = 0; d < t->rank; d++) b *= (double)t->shape[d];
  return b;
}

int64_t tr_nchunks(const tr_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    if (__builtin_mul_overflow(n, tr_grid(t, d), &n)) return -1;
  return n;
}

int64_t tr_chunk_extent(const tr_tensor *t, const int64_t *key, int64_t *ext) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) {
    int64_t c = t->chunk[d] > 0 ? t->chunk[d] : 1;
    int64_t lo = key[d] * c;
    int64_t e = t->shape[d] - lo < c ? t->shape[d] - lo : c;
    if (e < 0) e = 0;
    if (ext) ext[d] = e;
    n *= e;
  }
  return n;
}

int64_t tr_key_linear(const tr_tensor *t, const int64_t *key) {
  int64_t lin = 0;
  for (int d = 0; d < t->rank; d++) lin = lin * tr_grid(t, d) + key[d];
  return lin;
}

void tr_key_from_linear(const tr_tensor *t, int64_t lin, int64_t *key) {
  for (int d = t->rank - 1; d >= 0; d--) {
    int64_t g = tr_grid(t, d);
    if (g <= 0) {
      key[d] = 0;
      continue;
    }
    key[d] = lin % g;
    lin /= g;
  }
}

int tr_key_next(int rank, int64_t *key, const int64_t *lo, const int64_t *hi) {
  int d = rank - 1;
  while (d >= 0 && ++key[d] > hi[d]) {
    key[d] = lo[d];
    d--;
  }
  return d >= 0;
}

int tr_chunk_nests(int rank, const int64_t *inner, const int64_t *outer) {
  for (int d = 0; d < rank; d++)
    if (inner[d] > outer[d] || outer[d] % inner[d]) return 0;
  return 1;
}

void tr_chunks_under(const tr_tensor *t, const int64_t *lo, const int64_t *ext, int64_t *first, int64_t *last) {
  for (int d = 0; d < t->rank; d++) {
    first[d] = lo[d] / t->chunk[d];
    last[d] = (lo[d] + ext[d] - 1) / t->chunk[d];
  }
}

const char *tr_format_name(const tr_tensor *t) {
  if (tr_nchunks(t) <= 1) return "single";
  if (t->rank == 2) {
    if (tr_grid(t, 1) == 1) return "row_strip";
    if (tr_grid(t, 0) == 1) return "col_strip";
  }
  return "tile";
}

