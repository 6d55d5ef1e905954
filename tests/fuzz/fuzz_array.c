/*
** tests/fuzz/fuzz_array.c - libFuzzer target for the user-file readers
** (catalog/array.c, catalog/csv.c): any bytes must give either an error
** message or an array whose every element, reached through its strides,
** lies inside the data it was read from.
**
** Input: the first byte chooses how the rest is opened:
**   bit 0   0: a .npy file, 1: a .csv file
**   bit 1   element type (CSV, converted .npy): 0 f32, 1 f64
**   bit 2   (.npy only) no extension, so the format comes from the magic
**   bits 3-4 (CSV) header: 0 told from the file, 1 HEADER, 2 no header
**   bits 5-6 (CSV) delimiter: 0 told from the file, 1 ',', 2 ';', 3 tab
**   bit 7   (CSV) NULL nan: empty fields read as NaN
** The remaining bytes are the file's content.
*/
#include "config.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/catalog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Sink for the sums, so the element reads cannot be optimised away. */
static volatile double s_sink;

/* Write the content to a fixed per-process file; 0 on success. */
static int s_put(const char *path, const uint8_t *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k <= 0) {
      close(fd);
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return close(fd);
}

/* Visit every element through the strides and sum it; abort if an element
** would lie outside the mapping or buffer the reader says it made. */
static void s_sum(const tc_array *a) {
  int64_t n = 1, maxoff = 0, idx[TR_MAX_RANK] = {0};
  size_t item = tr_dtype_size(a->dtype);
  for (int d = 0; d < a->rank; d++) {
    if (a->shape[d] < 0 || a->stride[d] < 0) abort();
    n *= a->shape[d];
    if (a->shape[d] > 0) maxoff += (a->shape[d] - 1) * a->stride[d];
  }
  if (n == 0) return;
  if (!a->data) abort();
  if (a->map_) {
    const char *lo = a->map_, *hi = lo + a->maplen_;
    const char *first = a->data, *last = first + (size_t)maxoff * item;
    if (first < lo || last + item > hi) abort();
  }
  double sum = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < a->rank; d++) off += idx[d] * a->stride[d];
    if (a->dtype == TR_F64) {
      double v;
      memcpy(&v, (const char *)a->data + (size_t)off * item, sizeof v);
      sum += v;
    } else {
      float v;
      memcpy(&v, (const char *)a->data + (size_t)off * item, sizeof v);
      sum += v;
    }
    for (int d = a->rank - 1; d >= 0; d--) {
      if (++idx[d] < a->shape[d]) break;
      idx[d] = 0;
    }
  }
  s_sink = sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[96];
  tc_array a;
  tr_err err;
  if (size < 1) return 0;
  int mode = data[0];
  const char *ext = (mode & 1) ? ".csv" : (mode & 4) ? "" : ".npy";
  snprintf(path, sizeof path, "/tmp/fuzz_array_%ld%s", (long)getpid(), ext);
  if (s_put(path, data + 1, size - 1) != 0) return 0;
  static const char delims[4] = {0, ',', ';', '\t'};
  tc_csv_opts csv = {0};
  csv.header = ((mode >> 3) & 3) == 1 ? 1 : ((mode >> 3) & 3) == 2 ? -1 : 0;
  csv.delim = delims[(mode >> 5) & 3];
  csv.has_null = (mode >> 7) & 1;
  csv.null_value = (double)NAN;
  tr_clearerr(&err);
  int rc = tc_array_open(path, (mode & 2) ? TR_F64 : TR_F32, (mode & 1) ? &csv : NULL, &a, &err);
  if (rc == TR_OK) {
    if (a.rank < 0 || a.rank > TR_MAX_RANK) abort();
    s_sum(&a);
  } else {
    /* a failure always explains itself and leaves nothing open */
    if (err.code != rc || err.msg[0] == '\0' || a.data || a.map_) abort();
  }
  tc_array_close(&a);
  tc_array_close(&a);
  unlink(path);
  return 0;
}
