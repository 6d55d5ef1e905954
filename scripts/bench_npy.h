/*
** scripts/bench_npy.h - the little .npy I/O that the benchmark's C peers
** (bench_gemm.c, bench_psgemm.c) share: map a C-order little-endian f32
** matrix read-only, and create an f32 matrix file of a given shape mapped
** read-write.  Header-only (static functions); not built by automake.
*/
#ifndef BENCH_NPY_H
#define BENCH_NPY_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  long rows, cols;
  float *data;  /* rows x cols, row-major */
  void *map;
  size_t maplen;
} npy_mat;

static void npy_die(const char *path, const char *why) {
  fprintf(stderr, "bench: %s: %s\n", path, why);
  exit(1);
}

/* Map PATH, a rank-2 '<f4' C-order .npy file, read-only. */
static npy_mat npy_map(const char *path) {
  npy_mat m = {0};
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) npy_die(path, "cannot open");
  m.maplen = (size_t)st.st_size;
  m.map = mmap(NULL, m.maplen, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m.map == MAP_FAILED) npy_die(path, "cannot map");
  const unsigned char *p = m.map;
  if (m.maplen < 10 || memcmp(p, "\x93NUMPY", 6) != 0) npy_die(path, "not a .npy file");
  size_t hlen, off;
  if (p[6] == 1) {
    hlen = p[8] | (size_t)p[9] << 8;
    off = 10;
  } else {
    if (m.maplen < 12) npy_die(path, "truncated header");
    hlen = p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
    off = 12;
  }
  if (off + hlen > m.maplen) npy_die(path, "truncated header");
  char hdr[4096];
  size_t n = hlen < sizeof hdr - 1 ? hlen : sizeof hdr - 1;
  memcpy(hdr, p + off, n);
  hdr[n] = 0;
  if (!strstr(hdr, "'descr': '<f4'")) npy_die(path, "not little-endian f32");
  if (!strstr(hdr, "'fortran_order': False")) npy_die(path, "not C order");
  const char *s = strstr(hdr, "'shape': (");
  if (!s || sscanf(s + 10, "%ld, %ld)", &m.rows, &m.cols) != 2) npy_die(path, "not a matrix");
  if (off + hlen + (size_t)m.rows * (size_t)m.cols * 4 > m.maplen) npy_die(path, "truncated data");
  m.data = (float *)(void *)(p + off + hlen);
  return m;
}

/* Create PATH as a rows x cols '<f4' .npy file (when CREATE is set; else it
** must exist already, made by another process) and map it read-write. */
static npy_mat npy_create(const char *path, long rows, long cols, int create) {
  npy_mat m = {.rows = rows, .cols = cols};
  char hdr[128];
  int n = snprintf(hdr, sizeof hdr,
                   "{'descr': '<f4', 'fortran_order': False, 'shape': (%ld, %ld), }", rows, cols);
  size_t total = 10 + (size_t)n + 1, pad = (64 - total % 64) % 64;
  size_t hlen = (size_t)n + pad + 1;
  m.maplen = 10 + hlen + (size_t)rows * (size_t)cols * 4;
  int fd = open(path, create ? O_RDWR | O_CREAT | O_TRUNC : O_RDWR, 0644);
  if (fd < 0) npy_die(path, "cannot create");
  if (create && ftruncate(fd, (off_t)m.maplen) != 0) npy_die(path, "cannot size");
  m.map = mmap(NULL, m.maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m.map == MAP_FAILED) npy_die(path, "cannot map");
  unsigned char *p = m.map;
  if (create) {
    memcpy(p, "\x93NUMPY\x01\x00", 8);
    p[8] = (unsigned char)(hlen & 0xff);
    p[9] = (unsigned char)(hlen >> 8);
    memcpy(p + 10, hdr, (size_t)n);
    memset(p + 10 + n, ' ', pad);
    p[10 + hlen - 1] = '\n';
  }
  m.data = (float *)(void *)(p + 10 + hlen);
  return m;
}

static void npy_close(npy_mat *m) {
  munmap(m->map, m->maplen);
  m->map = NULL;
  m->data = NULL;
}

#endif
