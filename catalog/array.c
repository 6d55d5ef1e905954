/*
** catalog/array.c - dense arrays in user files: the tc_array entry points,
** which hand CSV files to csv.c, and NumPy .npy reading (strict header
** parser, mmap) and writing (temporary file, mmap, atomic rename).
**
** Everything read from a file is untrusted: header lengths, shapes and
** sizes are checked for overflow and against the file size before any
** byte of data is touched, so a bad file is an error message, never a
** crash (tests/fuzz/fuzz_array.c keeps it that way).
*/
#include "config.h"
#include "catalog/array_int.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_HEADER_MAX (1 << 20) /* longest .npy header we accept */
static const char s_npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

/* Case-insensitive "does path end in ext". */
static int s_has_ext(const char *path, const char *ext) {
  size_t n = strlen(path), m = strlen(ext);
  return n > m && strcasecmp(path + n - m, ext) == 0;
}

/* Element count and bytes of a shape, refusing anything that overflows
** (counting zero extents as 1 too, so strides cannot overflow either). */
static int s_shape_bytes(int rank, const int64_t *shape, size_t item,
                         size_t *bytes) {
  int64_t n = 1, m = 1;
  for (int d = 0; d < rank; d++) {
    if (shape[d] < 0) return -1;
    if (__builtin_mul_overflow(n, shape[d], &n) ||
        __builtin_mul_overflow(m, shape[d] > 0 ? shape[d] : 1, &m))
      return -1;
  }
  if (__builtin_mul_overflow(m, (int64_t)item, &m) ||
      __builtin_mul_overflow(n, (int64_t)item, &n) ||
      (uint64_t)m > (uint64_t)(SIZE_MAX / 2))
    return -1;
  *bytes = (size_t)n;
  return 0;
}

/* ---- .npy header parser -------------------------------------------------- */

/* What the header dict says. */
typedef struct s_npyhdr {
  char descr[24];              /* dtype string as written, e.g. "<f4" */
  int fortran;                 /* fortran_order */
  int rank;                    /* length of the shape tuple */
  int64_t shape[TR_MAX_RANK];  /* its values (first TR_MAX_RANK) */
  int seen;                    /* bit 0 descr, 1 fortran_order, 2 shape */
} s_npyhdr;

/* Cursor over the header text; msg receives the first problem. */
typedef struct s_cur {
  const char *p;   /* next character */
  const char *end; /* one past the last */
  char msg[160];   /* what went wrong, for "bad .npy header in F: msg" */
} s_cur;

static void s_ws(s_cur *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' ||
                           *c->p == '\r'))
    c->p++;
}

/* Copy s into out (size n) with anything unprintable replaced by '?'. */
static void s_clean(char *out, size_t n, const char *s, size_t len) {
  size_t i = 0;
  for (; i < len && i + 1 < n; i++)
    out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  out[i] = '\0';
}

static int s_fail(s_cur *c, const char *what) {
  snprintf(c->msg, sizeof c->msg, "%s", what);
  return -1;
}

/* A quoted Python string without escapes, into out (size n). */
static int s_pystr(s_cur *c, char *out, size_t n) {
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
    return s_fail(c, "expected a quoted string");
  char q = *c->p++;
  const char *s = c->p;
  while (c->p < c->end && *c->p != q) {
    if (*c->p == '\\' || *c->p == '\n' || *c->p == '\0')
      return s_fail(c, "unsupported character in a string");
    c->p++;
  }
  if (c->p >= c->end) return s_fail(c, "unterminated string");
  size_t len = (size_t)(c->p - s);
  c->p++;
  if (len + 1 > n) return s_fail(c, "string too long");
  memcpy(out, s, len);
  out[len] = '\0';
  return 0;
}

/* A non-negative decimal integer (Python 2 headers may add 'L'). */
static int s_pyint(s_cur *c, int64_t *out) {
  int64_t v = 0;
  if (c->p < c->end && *c->p == '-')
    return s_fail(c, "negative dimension in shape");
  if (c->p >= c->end || *c->p < '0' || *c->p > '9')
    return s_fail(c, "expected an integer in shape");
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    if (__builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, *c->p - '0', &v))
      return s_fail(c, "dimension too large in shape");
    c->p++;
  }
  if (c->p < c->end && (*c->p == 'L' || *c->p == 'l')) c->p++;
  *out = v;
  return 0;
}

/* (d0, d1, ...) with an optional trailing comma; () is rank 0. */
static int s_pyshape(s_cur *c, s_npyhdr *h) {
  if (c->p >= c->end || *c->p != '(') return s_fail(c, "shape is not a tuple");
  c->p++;
  h->rank = 0;
  s_ws(c);
  if (c->p < c->end && *c->p == ')') {
    c->p++;
    return 0;
  }
  for (;;) {
    int64_t v = 0;
    s_ws(c);
    if (s_pyint(c, &v)) return -1;
    if (h->rank >= TR_MAX_RANK) {
      snprintf(c->msg, sizeof c->msg, "rank greater than %d", TR_MAX_RANK);
      return -2;
    }
    h->shape[h->rank++] = v;
    s_ws(c);
    if (c->p < c->end && *c->p == ',') {
      c->p++;
      s_ws(c);
      if (c->p < c->end && *c->p == ')') break;
      continue;
    }
    if (c->p < c->end && *c->p == ')') break;
    return s_fail(c, "expected ',' or ')' in shape");
  }
  c->p++;
  return 0;
}

/* The whole dict: exactly the keys descr, fortran_order and shape, in any
** order, with optional trailing comma, followed only by whitespace.
** Returns 0, -1 (malformed: c->msg) or -2 (rank too large: c->msg). */
static int s_parse_header(s_cur *c, s_npyhdr *h) {
  int r;
  memset(h, 0, sizeof *h);
  s_ws(c);
  if (c->p >= c->end || *c->p != '{') return s_fail(c, "not a dict");
  c->p++;
  for (;;) {
    char key[32];
    s_ws(c);
    if (c->p < c->end && *c->p == '}') break;
    if (s_pystr(c, key, sizeof key)) return s_fail(c, "expected a key");
    s_ws(c);
    if (c->p >= c->end || *c->p != ':') return s_fail(c, "expected ':'");
    c->p++;
    s_ws(c);
    if (!strcmp(key, "descr")) {
      if (h->seen & 1) return s_fail(c, "duplicate key 'descr'");
      if (c->p < c->end && *c->p == '[')
        return s_fail(c, "structured dtype (tradb reads arrays of numbers)");
      if (s_pystr(c, h->descr, sizeof h->descr)) return -1;
      h->seen |= 1;
    } else if (!strcmp(key, "fortran_order")) {
      if (h->seen & 2) return s_fail(c, "duplicate key 'fortran_order'");
      if (c->end - c->p >= 4 && !memcmp(c->p, "True", 4)) {
        h->fortran = 1;
        c->p += 4;
      } else if (c->end - c->p >= 5 && !memcmp(c->p, "False", 5)) {
        h->fortran = 0;
        c->p += 5;
      } else {
        return s_fail(c, "fortran_order is not True or False");
      }
      h->seen |= 2;
    } else if (!strcmp(key, "shape")) {
      if (h->seen & 4) return s_fail(c, "duplicate key 'shape'");
      if ((r = s_pyshape(c, h))) return r;
      h->seen |= 4;
    } else {
      char k[40];
      s_clean(k, sizeof k, key, strlen(key));
      snprintf(c->msg, sizeof c->msg, "unknown key '%s'", k);
      return -1;
    }
    s_ws(c);
    if (c->p < c->end && *c->p == ',') {
      c->p++;
      continue;
    }
    if (c->p < c->end && *c->p == '}') break;
    return s_fail(c, "expected ',' or '}'");
  }
  c->p++;
  s_ws(c);
  if (c->p != c->end) return s_fail(c, "unexpected text after the dict");
  if (h->seen != 7)
    return s_fail(c, !(h->seen & 1)   ? "missing 'descr'"
                     : !(h->seen & 2) ? "missing 'fortran_order'"
                                      : "missing 'shape'");
  return 0;
}

/* What a .npy's elements are: f4 and f8 are read in place, the others
** converted (s_npy_convert). */
typedef enum s_elt {
  S_F4, S_F8, S_F2, S_BOOL, S_I1, S_I2, S_I4, S_I8, S_U1, S_U2, S_U4, S_U8
} s_elt;

static const struct {
  char type;   /* the descr's type letter */
  int size;    /* bytes */
  s_elt elt;   /* what it is */
} s_elts[] = {{'f', 4, S_F4}, {'f', 8, S_F8}, {'f', 2, S_F2}, {'b', 1, S_BOOL},
              {'i', 1, S_I1}, {'i', 2, S_I2}, {'i', 4, S_I4}, {'i', 8, S_I8},
              {'u', 1, S_U1}, {'u', 2, S_U2}, {'u', 4, S_U4}, {'u', 8, S_U8}};

/* Map a descr string to an element kind and its size, or explain why
** not; *swap: whether its multi-byte elements are in the other byte order
** (big-endian, as FITS data and some older tools leave them). */
static int s_descr(const char *descr, const char *path, s_elt *elt, size_t *size, int *swap,
                   tr_err *err) {
  int little = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
  char d[32];
  s_clean(d, sizeof d, descr, strlen(descr));
  if (strchr("<>|=", descr[0]) && descr[0] && descr[1] && descr[2] >= '1' && descr[2] <= '8' &&
      !descr[3])
    for (size_t i = 0; i < sizeof s_elts / sizeof s_elts[0]; i++) {
      if (s_elts[i].type != descr[1] || s_elts[i].size != descr[2] - '0') continue;
      *swap = s_elts[i].size > 1 && ((descr[0] == '>' && little) || (descr[0] == '<' && !little));
      *elt = s_elts[i].elt;
      *size = (size_t)s_elts[i].size;
      return TR_OK;
    }
  return tr_seterr(err, TR_ETYPE,
                   "unsupported dtype '%s' in %s (tradb reads bool, int8..int64, "
                   "uint8..uint64 and float16..float64)", d, path);
}

/* An IEEE half as a float (every half is one exactly). */
static float s_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
  float f;
  if (e == 31) bits = sign | 0x7f800000u | m << 13;          /* inf, nan */
  else if (e) bits = sign | (e + 112) << 23 | m << 13;        /* normal */
  else {                                                     /* zero, subnormal */
    f = (float)m * 0x1p-24f;
    return sign ? -f : f;
  }
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Element i of raw data of kind elt as an integer (*iv, *neg for the
** unsigned 64-bit ones above INT64_MAX: *uv) or, for float16, *fv. */
static void s_elt_get(const void *data, size_t i, s_elt elt, int64_t *iv, uint64_t *uv, double *fv,
                      int *is_u) {
  const char *p = (const char *)data + i * (elt == S_I8 || elt == S_U8 ? 8 : elt == S_I4 || elt == S_U4 ? 4
                                             : elt == S_I2 || elt == S_U2 || elt == S_F2 ? 2 : 1);
  *is_u = 0;
  switch (elt) {
  case S_BOOL: *iv = *(const uint8_t *)p != 0; break;
  case S_I1: *iv = *(const int8_t *)p; break;
  case S_U1: *iv = *(const uint8_t *)p; break;
  case S_I2: { int16_t v; memcpy(&v, p, 2); *iv = v; break; }
  case S_U2: { uint16_t v; memcpy(&v, p, 2); *iv = v; break; }
  case S_I4: { int32_t v; memcpy(&v, p, 4); *iv = v; break; }
  case S_U4: { uint32_t v; memcpy(&v, p, 4); *iv = v; break; }
  case S_I8: memcpy(iv, p, 8); break;
  case S_U8: memcpy(uv, p, 8); *is_u = 1; break;
  case S_F2: { uint16_t v; memcpy(&v, p, 2); *fv = s_half(v); break; }
  default: break;
  }
}

/* The index, "2, 0", of the element at memory position pos of a (C or
** Fortran order: dimensions taken by decreasing stride). */
static void s_index_text(const tc_array *a, int64_t pos, char *buf, size_t n) {
  int64_t idx[TR_MAX_RANK] = {0};
  int used[TR_MAX_RANK] = {0};
  size_t o = 0;
  buf[0] = '\0';
  for (int k = 0; k < a->rank; k++) {
    int big = -1;
    for (int d = 0; d < a->rank; d++)
      if (!used[d] && a->shape[d] > 1 && (big < 0 || a->stride[d] > a->stride[big])) big = d;
    if (big < 0) break;
    used[big] = 1;
    idx[big] = pos / a->stride[big];
    pos %= a->stride[big];
  }
  for (int d = 0; d < a->rank && o < n; d++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)idx[d]);
}

/* Convert a's n elements of kind elt (read from the file, in a->data) to
** dtype, in a buffer that replaces the file's data; the first value that
** dtype cannot hold exactly is an error naming it and its index. */
static int s_npy_convert(tc_array *a, s_elt elt, size_t n, tr_dtype dtype, const char *path,
                         tr_err *err) {
  void *out = tr_alloc_aligned(n ? n * tr_dtype_size(dtype) : 1);
  if (!out) return tr_seterr(err, TR_ENOMEM, "out of memory reading '%s'", path);
  for (size_t i = 0; i < n; i++) {
    int64_t iv = 0;
    uint64_t uv = 0;
    double fv = 0, v;
    int is_u, exact;
    s_elt_get(a->data, i, elt, &iv, &uv, &fv, &is_u);
    if (elt == S_F2) {
      v = fv;
      exact = 1;
    } else if (is_u) {
      v = (double)uv;
      exact = v < 0x1p64 && (uint64_t)v == uv;
    } else {
      v = (double)iv;
      exact = v < 0x1p63 && (int64_t)v == iv;
    }
    if (dtype == TR_F32) {
      float f = (float)v;
      exact = exact && ((double)f == v || v != v);
      ((float *)out)[i] = f;
    } else {
      ((double *)out)[i] = v;
    }
    if (!exact) {
      char where[256];
      s_index_text(a, (int64_t)i, where, sizeof where);
      tr_free_aligned(out);
      if (is_u)
        return tr_seterr(err, TR_ETYPE, "value %llu at [%s] of %s is not exactly a %s%s",
                         (unsigned long long)uv, where, path, tr_dtype_name(dtype),
                         dtype == TR_F32 ? " (load it with TYPE f64)" : "");
      return tr_seterr(err, TR_ETYPE, "value %lld at [%s] of %s is not exactly a %s%s",
                       (long long)iv, where, path, tr_dtype_name(dtype),
                       dtype == TR_F32 ? " (load it with TYPE f64)" : "");
    }
  }
  tc_array tmp = *a;
  tmp.fd_ = -1;
  tc_array_close(&tmp); /* the file's data */
  a->kind_ = TA_NPY_HEAP;
  a->map_ = out;
  a->maplen_ = n * tr_dtype_size(dtype);
  a->data = out;
  a->dtype = dtype;
  return TR_OK;
}

/* ---- .npy read ----------------------------------------------------------- */

/* The preamble (magic, version, header length) of the .npy file on fd of
** st_size bytes: *prelen is its length, *hlen the header's. */
static int s_npy_preamble(int fd, const char *path, uint64_t st_size, size_t *prelen, size_t *hlen,
                          tr_err *err) {
  unsigned char pre[12];
  size_t got = 0;
  int e;
  if ((e = tr_pread_all(fd, pre, sizeof pre, 0, &got)) != 0)
    return tr_seterr(err, TR_EIO, "cannot read '%s': %s", path, strerror(e));
  if (got < 6 || memcmp(pre, s_npy_magic, 6) != 0)
    return tr_seterr(err, TR_ECORRUPT, "not a .npy file: %s (bad magic)", path);
  if (got < 10) return tr_seterr(err, TR_ECORRUPT, "truncated .npy file %s: no header", path);
  if (pre[6] == 1 && pre[7] == 0) {
    *prelen = 10;
    *hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
  } else if ((pre[6] == 2 || pre[6] == 3) && pre[7] == 0) {
    if (got < 12) return tr_seterr(err, TR_ECORRUPT, "truncated .npy file %s: no header", path);
    *prelen = 12;
    *hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  } else {
    return tr_seterr(err, TR_ECORRUPT,
                     "unsupported .npy format version %u.%u in %s (tradb reads 1.0, 2.0 and 3.0)", pre[6],
                     pre[7], path);
  }
  if (*hlen > S_HEADER_MAX)
    return tr_seterr(err, TR_ECORRUPT, "bad .npy header in %s: header length %zu is too large", path, *hlen);
  if (st_size < *prelen + *hlen)
    return tr_seterr(err, TR_ECORRUPT, "truncated .npy file %s: header of %zu bytes, file has %llu", path,
                     *hlen, (unsigned long long)st_size);
  return TR_OK;
}

/* Read and parse the header (hlen bytes at prelen) into *h. */
static int s_npy_header(int fd, const char *path, size_t prelen, size_t hlen, s_npyhdr *h, tr_err *err) {
  s_cur cur;
  size_t got = 0;
  int e, rc = TR_OK;
  char *hdr = malloc(hlen + 1);
  if (!hdr) return tr_seterr(err, TR_ENOMEM, "out of memory");
  if ((e = tr_pread_all(fd, hdr, hlen, (off_t)prelen, &got)) != 0 || got != hlen) {
    rc = tr_seterr(err, TR_EIO, "cannot read '%s': %s", path, e ? strerror(e) : "file shrank while reading");
  } else {
    hdr[hlen] = '\0';
    cur.p = hdr;
    cur.end = hdr + hlen;
    cur.msg[0] = '\0';
    if ((e = s_parse_header(&cur, h)) == -2)
      rc = tr_seterr(err, TR_ESHAPE, "%s in %s (tradb's maximum rank is %d)", cur.msg, path, TR_MAX_RANK);
    else if (e)
      rc = tr_seterr(err, TR_ECORRUPT, "bad .npy header in %s: %s", path, cur.msg);
  }
  free(hdr);
  return rc;
}

/* Map (or, if unaligned, read) the nbytes of data at off into a. */
static int s_npy_data(int fd, const char *path, size_t off, size_t nbytes, size_t item, tc_array *a,
                      tr_err *err) {
  size_t got = 0;
  int e;
  if (nbytes == 0) {
    a->kind_ = TA_NPY_MAP; /* nothing to map */
  } else if (off % item == 0) {
    void *m = mmap(NULL, off + nbytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return tr_seterr(err, TR_EIO, "cannot map '%s': %s", path, strerror(errno));
    a->kind_ = TA_NPY_MAP;
    a->map_ = m;
    a->maplen_ = off + nbytes;
    a->data = (char *)m + off;
  } else {
    /* Old writers did not align the data; copy it so that element loads
    ** stay aligned. */
    void *buf = tr_alloc_aligned(nbytes);
    if (!buf) return tr_seterr(err, TR_ENOMEM, "out of memory reading '%s'", path);
    if ((e = tr_pread_all(fd, buf, nbytes, (off_t)off, &got)) != 0 || got != nbytes) {
      tr_free_aligned(buf);
      return tr_seterr(err, TR_EIO, "cannot read '%s': %s", path, e ? strerror(e) : "file shrank while reading");
    }
    a->kind_ = TA_NPY_HEAP;
    a->map_ = buf;
    a->maplen_ = nbytes;
    a->data = buf;
  }
  return TR_OK;
}

/* nbytes of elements of type T from src to dst, each byte-swapped by
** SWAP a word at a time: 256 MiB of f4 took 0.056 s so, against 0.26 s
** a byte at a time (the .npy LOAD of it 0.81 s against 0.96; one of the
** same file in this machine's order 0.47). */
#define S_SWAP_LOOP(dst, src, nbytes, T, SWAP)              \
  for (size_t at = 0; at < (nbytes); at += sizeof(T)) {     \
    T v;                                                    \
    memcpy(&v, (src) + at, sizeof v);                       \
    v = SWAP(v);                                            \
    memcpy((dst) + at, &v, sizeof v);                       \
  }

/* a's nbytes of data, elements of item (2, 4 or 8) bytes in the other
** byte order, swapped into a buffer that replaces them. */
static int s_npy_swap(tc_array *a, size_t item, size_t nbytes, const char *path, tr_err *err) {
  char *buf = tr_alloc_aligned(nbytes ? nbytes : 1);
  if (!buf) return tr_seterr(err, TR_ENOMEM, "out of memory reading '%s'", path);
  const char *src = a->data;
  if (item == 2) S_SWAP_LOOP(buf, src, nbytes, uint16_t, __builtin_bswap16)
  else if (item == 4) S_SWAP_LOOP(buf, src, nbytes, uint32_t, __builtin_bswap32)
  else S_SWAP_LOOP(buf, src, nbytes, uint64_t, __builtin_bswap64)
  if (a->kind_ == TA_NPY_HEAP) tr_free_aligned(a->map_);
  else if (a->map_) munmap(a->map_, a->maplen_);
  a->kind_ = TA_NPY_HEAP;
  a->map_ = buf;
  a->maplen_ = nbytes;
  a->data = buf;
  return TR_OK;
}

static int s_npy_open(const char *path, tr_dtype dtype, tc_array *a, tr_err *err) {
  struct stat st;
  s_npyhdr h;
  s_elt elt = S_F4;
  size_t prelen = 0, hlen = 0, nbytes = 0, item = 4;
  int rc = TR_OK, swap = 0;
  /* O_NONBLOCK so that a FIFO cannot hang the open (it is then refused as
  ** not a regular file); regular files ignore the flag. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return tr_seterr(err, TR_EIO, "cannot open '%s': %s", path, strerror(errno));
  if (fstat(fd, &st) != 0)
    rc = tr_seterr(err, TR_EIO, "cannot open '%s': %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    rc = tr_seterr(err, TR_EIO, "cannot read '%s': not a regular file", path);
  if (!rc) rc = s_npy_preamble(fd, path, (uint64_t)st.st_size, &prelen, &hlen, err);
  if (!rc) rc = s_npy_header(fd, path, prelen, hlen, &h, err);
  if (!rc) rc = s_descr(h.descr, path, &elt, &item, &swap, err);
  size_t off = prelen + hlen;
  if (!rc) {
    a->dtype = elt == S_F8 ? TR_F64 : TR_F32;
    if (s_shape_bytes(h.rank, h.shape, item, &nbytes) != 0)
      rc = tr_seterr(err, TR_ESHAPE, "bad .npy header in %s: shape too large", path);
    else if ((uint64_t)st.st_size - off < nbytes)
      rc = tr_seterr(err, TR_ECORRUPT, "truncated .npy file %s: expected %zu bytes of data, found %llu", path,
                     nbytes, (unsigned long long)((uint64_t)st.st_size - off));
  }
  if (!rc) {
    a->rank = h.rank;
    memcpy(a->shape, h.shape, sizeof h.shape);
    if (h.fortran) {
      int64_t s = 1;
      for (int d = 0; d < h.rank; d++) {
        a->stride[d] = s;
        s *= h.shape[d] > 0 ? h.shape[d] : 1;
      }
    } else {
      ta_c_strides(h.rank, h.shape, a->stride);
    }
    rc = s_npy_data(fd, path, off, nbytes, item, a, err);
  }
  if (!rc && swap) rc = s_npy_swap(a, item, nbytes, path, err);
  if (!rc && elt != S_F4 && elt != S_F8) rc = s_npy_convert(a, elt, nbytes / item, dtype, path, err);
  close(fd); /* a mapping outlives its descriptor */
  if (rc) {
    tc_array_close(a); /* the data read before a value failed to convert */
    ta_reset(a);
  }
  return rc;
}

/* ---- .npy create --------------------------------------------------------- */

/* An array this large is written past the page cache: its pages cost
** 2-5 ms of CPU a MiB to fill on the development machine. */
#define S_DIRECT_MIN ((size_t)4 << 20)

static int s_npy_create(const char *path, tr_dtype dtype, int rank,
                        const int64_t *shape, size_t nbytes, tc_array *a,
                        tr_err *err) {
  char dict[512];
  char *hdr = NULL, *tmp = NULL;
  int fd = -1, rc = TR_OK, e;
  size_t len = 0;
  len += (size_t)snprintf(dict, sizeof dict,
                          "{'descr': '<%s', 'fortran_order': False, "
                          "'shape': (",
                          dtype == TR_F64 ? "f8" : "f4");
  for (int d = 0; d < rank; d++)
    len += (size_t)snprintf(dict + len, sizeof dict - len, "%s%lld",
                            d ? ", " : "", (long long)shape[d]);
  len += (size_t)snprintf(dict + len, sizeof dict - len, "%s), }",
                          rank == 1 ? "," : "");
  /* Pad with spaces and end in '\n' so the data starts at a multiple of
  ** 64 bytes (as NumPy does); of a page for a large array, which is then
  ** written past the page cache where it can be (tc_array_write). */
  size_t align = nbytes >= S_DIRECT_MIN ? TR_PAGE : 64;
  size_t total = (10 + len + 1 + align - 1) / align * align, hlen = total - 10;
  if (!(hdr = malloc(total))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  memcpy(hdr, s_npy_magic, 6);
  hdr[6] = 1;
  hdr[7] = 0;
  hdr[8] = (char)(hlen & 0xff);
  hdr[9] = (char)(hlen >> 8);
  memcpy(hdr + 10, dict, len);
  memset(hdr + 10 + len, ' ', hlen - len - 1);
  hdr[total - 1] = '\n';
  if ((rc = ta_tmpfile(path, &tmp, &fd, err))) goto done;
  if ((e = tr_write_all(fd, hdr, total)) != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot write '%s': %s", path, strerror(e));
    goto done;
  }
  /* Reserve the blocks now: running out of space later, while storing
  ** through the mapping, would be SIGBUS instead of an error. */
  e = posix_fallocate(fd, 0, (off_t)(total + nbytes));
  if (e == EINVAL || e == EOPNOTSUPP || e == ENOSYS) e = 0;
  if (e == 0 && ftruncate(fd, (off_t)(total + nbytes)) != 0) e = errno;
  if (e != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot write '%s': %s", path, strerror(e));
    goto done;
  }
  if (nbytes > 0) {
    void *m = mmap(NULL, total + nbytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    if (m == MAP_FAILED) {
      rc = tr_seterr(err, TR_EIO, "cannot map '%s': %s", tmp,
                     strerror(errno));
      goto done;
    }
    a->map_ = m;
    a->maplen_ = total + nbytes;
    a->data = (char *)m + total;
  }
  if (!(a->path_ = strdup(path))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  a->kind_ = TA_NPY_WRITE;
  a->dtype = dtype;
  a->rank = rank;
  for (int d = 0; d < rank; d++) a->shape[d] = shape[d];
  ta_c_strides(rank, shape, a->stride);
  a->fd_ = fd;
  /* no O_DIRECT here (tmpfs): every write through the page cache */
  a->dfd_ = align == TR_PAGE ? open(tmp, O_WRONLY | O_CLOEXEC | O_DIRECT) : -1;
  a->tmp_ = tmp;
  fd = -1;
  tmp = NULL;
done:
  free(hdr);
  if (fd >= 0) close(fd);
  if (tmp) {
    unlink(tmp);
    free(tmp);
  }
  if (rc) {
    if (a->map_) munmap(a->map_, a->maplen_);
    free(a->path_);
    ta_reset(a);
  }
  return rc;
}

/* ---- entry points -------------------------------------------------------- */

int tc_array_open(const char *path, tr_dtype dtype, const tc_csv_opts *csv, tc_array *a,
                  tr_err *err) {
  if (!a) return tr_seterr(err, TR_EINVAL, "tc_array_open: no array");
  ta_reset(a);
  if (!path || !*path) return tr_seterr(err, TR_EINVAL, "no file name given");
  if (dtype != TR_F32 && dtype != TR_F64)
    return tr_seterr(err, TR_ETYPE, "bad element type for '%s'", path);
  if (s_has_ext(path, ".csv") || s_has_ext(path, ".tsv")) return ta_csv_open(path, dtype, csv, a, err);
  /* Options that would be ignored are refused: the user meant a CSV. */
  if (csv && (csv->header || csv->delim || csv->has_null))
    return tr_seterr(err, TR_EINVAL, "HEADER, DELIMITER and NULL apply to CSV files (*.csv, *.tsv) only, not '%s'",
                     path);
  if (s_has_ext(path, ".npy")) return s_npy_open(path, dtype, a, err);
  /* No known extension: a NumPy file is recognised by its magic. */
  unsigned char m[6];
  size_t got = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return tr_seterr(err, TR_EIO, "cannot open '%s': %s", path,
                     strerror(errno));
  int e = tr_pread_all(fd, m, sizeof m, 0, &got);
  close(fd);
  if (e == 0 && got == sizeof m && memcmp(m, s_npy_magic, 6) == 0)
    return s_npy_open(path, dtype, a, err);
  if (e != 0)
    return tr_seterr(err, TR_EIO, "cannot read '%s': %s", path, strerror(e));
  return tr_seterr(err, TR_EINVAL, "cannot tell the format of '%s' (not a "
                   ".npy file; name CSV files *.csv or *.tsv)", path);
}

int tc_array_create(const char *path, tr_dtype dtype, int rank,
                    const int64_t *shape, tc_array *a, tr_err *err) {
  size_t nbytes;
  if (!a) return tr_seterr(err, TR_EINVAL, "tc_array_create: no array");
  ta_reset(a);
  if (!path || !*path) return tr_seterr(err, TR_EINVAL, "no file name given");
  if (dtype != TR_F32 && dtype != TR_F64)
    return tr_seterr(err, TR_ETYPE, "cannot create '%s': bad element type",
                     path);
  if (rank < 0 || rank > TR_MAX_RANK || (rank > 0 && !shape))
    return tr_seterr(err, TR_ESHAPE, "cannot create '%s': bad rank %d", path,
                     rank);
  if (s_shape_bytes(rank, shape, tr_dtype_size(dtype), &nbytes) != 0)
    return tr_seterr(err, TR_ESHAPE, "cannot create '%s': bad or too large "
                     "shape", path);
  if (s_has_ext(path, ".csv"))
    return ta_csv_create(path, dtype, rank, shape, a, err);
  if (s_has_ext(path, ".npy"))
    return s_npy_create(path, dtype, rank, shape, nbytes, a, err);
  return tr_seterr(err, TR_EINVAL, "cannot create '%s': unknown file type "
                   "(use .npy or .csv)", path);
}

int tc_array_write(tc_array *a, int64_t first, const void *buf, int64_t n, tr_err *err) {
  if (!a || (a->kind_ != TA_NPY_WRITE && a->kind_ != TA_CSV_WRITE))
    return tr_seterr(err, TR_EINVAL, "tc_array_write: not a created array");
  size_t esz = tr_dtype_size(a->dtype), off = (size_t)first * esz, len = (size_t)n * esz;
  if (n <= 0) return TR_OK;
  size_t head = a->data ? (size_t)((char *)a->data - (char *)a->map_) : 0; /* the .npy header */
  if (first < 0 || !a->data || off + len > a->maplen_ - head)
    return tr_seterr(err, TR_EINVAL, "tc_array_write: elements %" PRId64 "..%" PRId64 " outside '%s'",
                     first, first + n, a->path_);
  if (a->kind_ == TA_CSV_WRITE) {
    memcpy((char *)a->data + off, buf, len);
    return TR_OK;
  }
  off += head;
  int e = -1;
  if (a->dfd_ >= 0 && off % TR_PAGE == 0 && len % TR_PAGE == 0 && (uintptr_t)buf % TR_PAGE == 0) {
    e = tr_pwrite_all(a->dfd_, buf, len, (int64_t)off);
    if (e == EINVAL) e = -1; /* refused after all: through the page cache */
  }
  if (e < 0) e = tr_pwrite_all(a->fd_, buf, len, (int64_t)off);
  return e ? tr_seterr(err, TR_EIO, "cannot write '%s': %s", a->path_, strerror(e)) : TR_OK;
}

int tc_array_commit(tc_array *a, tr_err *err) {
  if (!a || (a->kind_ != TA_NPY_WRITE && a->kind_ != TA_CSV_WRITE))
    return tr_seterr(err, TR_EINVAL, "tc_array_commit: not a created array");
  if (!a->tmp_)
    return tr_seterr(err, TR_EINVAL, "'%s' was already committed", a->path_);
  if (a->kind_ == TA_CSV_WRITE) return ta_csv_commit(a, err);
  if (a->map_ && msync(a->map_, a->maplen_, MS_SYNC) != 0)
    return tr_seterr(err, TR_EIO, "cannot write '%s': %s", a->path_,
                     strerror(errno));
  int rc = ta_publish(a->fd_, a->tmp_, a->path_, err);
  if (rc == TR_OK) {
    free(a->tmp_);
    a->tmp_ = NULL;
  }
  return rc;
}

void tc_array_close(tc_array *a) {
  if (!a || a->kind_ == TA_NONE) return;
  switch (a->kind_) {
  case TA_NPY_MAP:
  case TA_NPY_WRITE:
    if (a->map_) munmap(a->map_, a->maplen_);
    break;
  case TA_NPY_HEAP:
    tr_free_aligned(a->map_);
    break;
  case TA_CSV_READ:
  case TA_CSV_WRITE:
    free(a->map_);
    break;
  default:
    break;
  }
  if (a->fd_ >= 0) close(a->fd_);
  if (a->dfd_ >= 0) close(a->dfd_);
  if (a->tmp_) unlink(a->tmp_);
  free(a->tmp_);
  free(a->path_);
  ta_reset(a);
}
