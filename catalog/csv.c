/*
** catalog/csv.c - CSV arrays: reading a text file of numbers into a heap
** buffer (rank 1 for one value per line, otherwise rank 2 lines x fields)
** and writing rank 0..2 tensors as text that reads back bit-exactly.
**
** Numbers are parsed and printed in the "C" locale whatever the process
** locale is, so a shell that called setlocale() still reads "1.5".
**
** A field is a decimal number (digits with an optional point and exponent)
** or inf, infinity or nan spelled out, signed or not, in any case: what
** this file and NumPy's savetxt write.  strtod alone would also take
** hexadecimal ("0x10" is 16) and turn a finite number too large for the
** type into inf; both are errors here, since neither is what a CSV of
** numbers means.  A number too small for the type rounds to the nearest
** one it holds (0 or a subnormal), as strtod and NumPy do.
*/
#include "config.h"
#include "catalog/array_int.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_NUM_MAX 64 /* longest number text we accept in one field */

/* Switch this thread to the "C" locale until s_locale_pop(). */
typedef struct s_cloc {
  locale_t c;   /* the "C" locale object, or 0 if it could not be made */
  locale_t old; /* the thread's previous locale */
} s_cloc;

static void s_locale_push(s_cloc *l) {
  l->c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  l->old = l->c ? uselocale(l->c) : (locale_t)0;
}

static void s_locale_pop(s_cloc *l) {
  if (l->c) {
    uselocale(l->old);
    freelocale(l->c);
  }
}

/* Read a whole regular file into a NUL-terminated heap buffer. */
static int s_slurp(const char *path, char **out, size_t *len, tr_err *err) {
  struct stat st;
  char *buf = NULL;
  size_t n = 0, cap;
  int rc = TR_OK;
  /* O_NONBLOCK: a FIFO must not hang the open (see array.c). */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  *out = NULL;
  *len = 0;
  if (fd < 0)
    return tr_seterr(err, TR_EIO, "cannot open '%s': %s", path,
                     strerror(errno));
  if (fstat(fd, &st) != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot read '%s': %s", path,
                   strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = tr_seterr(err, TR_EIO, "cannot read '%s': not a regular file", path);
    goto done;
  }
  cap = (size_t)st.st_size + 1;
  if (!(buf = malloc(cap))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory reading '%s'", path);
    goto done;
  }
  for (;;) {
    if (n + 1 >= cap) { /* the file grew since fstat */
      char *p = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
      if (!p) {
        rc = tr_seterr(err, TR_ENOMEM, "out of memory reading '%s'", path);
        goto done;
      }
      buf = p;
      cap *= 2;
    }
    ssize_t k = read(fd, buf + n, cap - 1 - n);
    if (k < 0) {
      if (errno == EINTR) continue;
      rc = tr_seterr(err, TR_EIO, "cannot read '%s': %s", path,
                     strerror(errno));
      goto done;
    }
    if (k == 0) break;
    n += (size_t)k;
  }
  buf[n] = '\0';
done:
  close(fd);
  if (rc) {
    free(buf);
    return rc;
  }
  *out = buf;
  *len = n;
  return TR_OK;
}

/* A field's text for an error message: printable, at most 40 chars. */
static void s_show(char *out, size_t n, const char *s, size_t len) {
  size_t i = 0, lim = len < 40 ? len : 40;
  for (; i < lim && i + 4 < n; i++)
    out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  if (lim < len && i + 4 < n) {
    memcpy(out + i, "...", 3);
    i += 3;
  }
  out[i] = '\0';
}

/* What a field's text is: S_NUM_BAD, a finite decimal number, or inf /
** infinity / nan spelled out (see the top of this file). */
enum { S_NUM_BAD, S_NUM_DECIMAL, S_NUM_WORD };
static int s_number_kind(const char *s) {
  int digits = 0;
  if (*s == '+' || *s == '-') s++;
  if (!strcasecmp(s, "inf") || !strcasecmp(s, "infinity") || !strcasecmp(s, "nan"))
    return S_NUM_WORD;
  for (; *s >= '0' && *s <= '9'; s++) digits++;
  if (*s == '.')
    for (s++; *s >= '0' && *s <= '9'; s++) digits++;
  if (!digits) return S_NUM_BAD;
  if (*s == 'e' || *s == 'E') {
    s++;
    if (*s == '+' || *s == '-') s++;
    if (*s < '0' || *s > '9') return S_NUM_BAD;
    while (*s >= '0' && *s <= '9') s++;
  }
  return *s ? S_NUM_BAD : S_NUM_DECIMAL;
}

int ta_csv_open(const char *path, tr_dtype dtype, tc_array *a, tr_err *err) {
  char *text = NULL;
  char *vals = NULL;
  size_t len, item = tr_dtype_size(dtype), nvals = 0, cap = 0;
  int64_t rows = 0, fields = -1, blank = 0, line = 0;
  s_cloc loc;
  int rc;
  ta_reset(a);
  if ((rc = s_slurp(path, &text, &len, err))) return rc;
  s_locale_push(&loc);
  const char *p = text, *end = text + len;
  if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3; /* UTF-8 BOM */
  while (p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *next = eol ? eol + 1 : end;
    if (!eol) eol = end;
    if (eol > p && eol[-1] == '\r') eol--;
    line++;
    const char *q = p;
    while (q < eol && (*q == ' ' || *q == '\t')) q++;
    if (q == eol) { /* blank: fine only at the end of the file */
      if (!blank) blank = line;
      p = next;
      continue;
    }
    if (blank) {
      rc = tr_seterr(err, TR_ESYNTAX, "empty line %lld in CSV %s",
                     (long long)blank, path);
      goto done;
    }
    int64_t nf = 0;
    const char *f = p;
    for (;;) {
      const char *fe = memchr(f, ',', (size_t)(eol - f));
      if (!fe) fe = eol;
      const char *s = f, *e = fe;
      while (s < e && (*s == ' ' || *s == '\t')) s++;
      while (e > s && (e[-1] == ' ' || e[-1] == '\t')) e--;
      char num[S_NUM_MAX + 1], show[48];
      size_t n = (size_t)(e - s);
      long long col = (long long)(s - p) + 1; /* the field's first byte */
      int kind = S_NUM_BAD, inf;
      if (n > 0 && n <= S_NUM_MAX) {
        memcpy(num, s, n);
        num[n] = '\0';
        if (strlen(num) == n) kind = s_number_kind(num); /* no NUL inside */
      }
      if (kind == S_NUM_BAD) {
        s_show(show, sizeof show, s, n);
        rc = tr_seterr(err, TR_ESYNTAX,
                       n ? "bad number '%s' in %s line %lld column %lld"
                         : "empty field%s in %s line %lld column %lld",
                       show, path, (long long)line, col);
        goto done;
      }
      if (cap == nvals) {
        size_t ncap = cap ? cap * 2 : 1024;
        char *nv = ncap < SIZE_MAX / 16 ? realloc(vals, ncap * item) : NULL;
        if (!nv) {
          rc = tr_seterr(err, TR_ENOMEM, "out of memory reading '%s'", path);
          goto done;
        }
        vals = nv;
        cap = ncap;
      }
      /* strtof for f32: rounding once from text is what makes "%.9g"
      ** round-trip exactly. */
      if (dtype == TR_F32) {
        float v = strtof(num, NULL);
        inf = isinf(v);
        memcpy(vals + nvals * item, &v, sizeof v);
      } else {
        double v = strtod(num, NULL);
        inf = isinf(v);
        memcpy(vals + nvals * item, &v, sizeof v);
      }
      if (inf && kind == S_NUM_DECIMAL) {
        s_show(show, sizeof show, s, n);
        rc = tr_seterr(err, TR_ESYNTAX,
                       "number '%s' is too large for %s in %s line %lld "
                       "column %lld", show, tr_dtype_name(dtype), path,
                       (long long)line, col);
        goto done;
      }
      nvals++;
      nf++;
      if (fe == eol) break;
      f = fe + 1;
    }
    if (fields < 0) {
      fields = nf;
    } else if (nf != fields) {
      rc = tr_seterr(err, TR_ESHAPE,
                     "ragged CSV %s: line %lld has %lld fields, expected %lld",
                     path, (long long)line, (long long)nf, (long long)fields);
      goto done;
    }
    rows++;
    p = next;
  }
  if (rows == 0) {
    rc = tr_seterr(err, TR_ESYNTAX, "empty CSV file %s", path);
    goto done;
  }
  a->kind_ = TA_CSV_READ;
  a->dtype = dtype;
  if (fields == 1) {
    a->rank = 1;
    a->shape[0] = rows;
  } else {
    a->rank = 2;
    a->shape[0] = rows;
    a->shape[1] = fields;
  }
  ta_c_strides(a->rank, a->shape, a->stride);
  a->map_ = vals;
  a->maplen_ = nvals * item;
  a->data = vals;
  vals = NULL;
done:
  s_locale_pop(&loc);
  free(text);
  free(vals);
  if (rc) ta_reset(a);
  return rc;
}

int ta_csv_create(const char *path, tr_dtype dtype, int rank,
                  const int64_t *shape, tc_array *a, tr_err *err) {
  int64_t n = 1;
  int rc;
  ta_reset(a);
  if (rank > 2)
    return tr_seterr(err, TR_ESHAPE, "cannot create '%s': CSV holds rank 1 "
                     "or 2 tensors (this one has rank %d)", path, rank);
  for (int d = 0; d < rank; d++) n *= shape[d]; /* checked by the caller */
  if (n == 0)
    return tr_seterr(err, TR_ESHAPE, "cannot create '%s': CSV cannot hold an "
                     "empty tensor", path);
  /* The temporary file is made now, so that an unwritable destination is
  ** reported before any work is done. */
  if ((rc = ta_tmpfile(path, &a->tmp_, &a->fd_, err))) goto done;
  if (!(a->map_ = calloc((size_t)n, tr_dtype_size(dtype))) ||
      !(a->path_ = strdup(path))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  a->kind_ = TA_CSV_WRITE;
  a->dtype = dtype;
  a->rank = rank;
  for (int d = 0; d < rank; d++) a->shape[d] = shape[d];
  ta_c_strides(rank, shape, a->stride);
  a->maplen_ = (size_t)n * tr_dtype_size(dtype);
  a->data = a->map_;
done:
  if (rc) {
    if (a->fd_ >= 0) close(a->fd_);
    if (a->tmp_) unlink(a->tmp_);
    free(a->tmp_);
    free(a->map_);
    free(a->path_);
    ta_reset(a);
  }
  return rc;
}

int ta_csv_commit(tc_array *a, tr_err *err) {
  enum { BUF = 1 << 16 };
  char *buf = malloc(BUF);
  size_t used = 0, item = tr_dtype_size(a->dtype);
  int64_t cols = a->rank == 2 ? a->shape[1] : 1;
  int64_t n = (int64_t)(a->maplen_ / item);
  s_cloc loc;
  int rc = TR_OK, e;
  if (!buf) return tr_seterr(err, TR_ENOMEM, "out of memory");
  /* Rewrite from the start: a failed earlier commit may have left text. */
  if (ftruncate(a->fd_, 0) != 0 || lseek(a->fd_, 0, SEEK_SET) != 0) {
    free(buf);
    return tr_seterr(err, TR_EIO, "cannot write '%s': %s", a->path_,
                     strerror(errno));
  }
  s_locale_push(&loc);
  for (int64_t i = 0; i < n; i++) {
    if (BUF - used < 64) {
      if ((e = tr_write_all(a->fd_, buf, used)) != 0) {
        rc = tr_seterr(err, TR_EIO, "cannot write '%s': %s", a->path_,
                       strerror(e));
        goto done;
      }
      used = 0;
    }
    const char *elt = (const char *)a->map_ + (size_t)i * item;
    char sep = (i + 1) % cols == 0 ? '\n' : ',';
    if (a->dtype == TR_F32) {
      float v;
      memcpy(&v, elt, sizeof v);
      used += (size_t)snprintf(buf + used, BUF - used, "%.9g%c", (double)v,
                               sep);
    } else {
      double v;
      memcpy(&v, elt, sizeof v);
      used += (size_t)snprintf(buf + used, BUF - used, "%.17g%c", v, sep);
    }
  }
  if ((e = tr_write_all(a->fd_, buf, used)) != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot write '%s': %s", a->path_,
                   strerror(e));
    goto done;
  }
  if ((rc = ta_publish(a->fd_, a->tmp_, a->path_, err))) goto done;
  free(a->tmp_);
  a->tmp_ = NULL;
done:
  s_locale_pop(&loc);
  free(buf);
  return rc;
}
