/*
** catalog/csv.c - CSV arrays: reading a text file of numbers into a heap
** buffer (rank 1 for one value per line, otherwise rank 2 lines x fields)
** and writing rank 0..2 tensors as text that reads back bit-exactly.
**
** Numbers are parsed and printed in the "C" locale whatever the process
** locale is, so a shell that called setlocale() still reads "1.5".
**
** Fields are separated by ',', ';' or a tab (the one that cuts the first
** lines evenly, unless DELIMITER names one), and quoted as RFC 4180 quotes
** them: a field in double quotes may hold the separator, a line break and
** doubled quotes ("1","2" is two numbers; "weight, kg" one name, which R's
** write.csv and spreadsheets write).  The first line may name the
** columns: it is taken as a header when no field of it is a number (or
** with HEADER; never with HEADER false).  An empty field is an error
** naming its line and field (and the header's name for it), unless NULL
** gives its value.
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

#include <ctype.h>
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

/* The text of a CSV file being read, and what it is read as. */
typedef struct s_csv {
  const char *path;   /* for messages */
  const char *p, *end;/* the rest of the text */
  char delim;         /* the field separator */
  tr_dtype dtype;     /* what fields are read into */
  const tc_csv_opts *o; /* the options (not NULL) */
  int64_t line;       /* lines read so far: the current record's first */
  int64_t more;       /* line breaks inside the current record's quotes */
  const char *hb, *he;/* the header line, or NULL: names fields in messages */
} s_csv;

/* The first `stop` in [p, e) outside double quotes, or e; *open (may be
** NULL) says whether a quote was left open at e, *breaks counts the line
** breaks passed inside quotes. */
static const char *s_unquoted(const char *p, const char *e, char stop, int *open,
                              int64_t *breaks) {
  int in = 0;
  for (; p < e && (in || *p != stop); p++) {
    in ^= *p == '"'; /* a doubled quote inside closes and reopens */
    if (breaks) *breaks += in && *p == '\n';
  }
  if (open) *open = in;
  return p;
}

/* The next non-blank line of c: [*b, *e) without its end of line (and
** CR), one record (a quoted field may hold line breaks); 0 at the end of
** the text.  A blank line before a later non-blank one is an error (*rc),
** and so is a quote left open; blank lines at the end are fine. */
static int s_line(s_csv *c, const char **b, const char **e, int *rc, tr_err *err) {
  int64_t blank = 0, breaks = 0;
  int open;
  c->line += c->more; /* the last record's later lines */
  c->more = 0;
  while (c->p < c->end) {
    const char *eol = s_unquoted(c->p, c->end, '\n', &open, &breaks), *q = c->p;
    const char *next = eol < c->end ? eol + 1 : c->end;
    if (open) {
      *rc = tr_seterr(err, TR_ESYNTAX, "a quoted field on line %lld of CSV %s is never closed",
                      (long long)c->line + 1, c->path);
      return 0;
    }
    if (eol > c->p && eol[-1] == '\r') eol--;
    c->line++;
    while (q < eol && (*q == ' ' || *q == '\t')) q++;
    if (q == eol) {
      if (!blank) blank = c->line;
      c->p = next;
      continue;
    }
    if (blank) {
      *rc = tr_seterr(err, TR_ESYNTAX, "empty line %lld in CSV %s", (long long)blank, c->path);
      return 0;
    }
    *b = c->p;
    *e = eol;
    c->p = next;
    c->more = breaks;
    return 1;
  }
  return 0;
}

/* Field k's bounds in line [b, e) cut at delim, blanks around it trimmed
** (but not a tab that separates fields), and then its quotes; the start of
** the next field or NULL after the last. */
static const char *s_field(const char *b, const char *e, char delim, const char **fs,
                           const char **fe) {
  const char *f = s_unquoted(b, e, delim, NULL, NULL), *s = b, *t = f;
  while (s < t && (*s == ' ' || (*s == '\t' && delim != '\t'))) s++;
  while (t > s && (t[-1] == ' ' || (t[-1] == '\t' && delim != '\t'))) t--;
  if (t - s >= 2 && *s == '"' && t[-1] == '"') s++, t--; /* a number needs no doubled quote */
  *fs = s;
  *fe = t;
  return f == e ? NULL : f + 1;
}

/* Fields in line [b, e). */
static int64_t s_count(const char *b, const char *e, char delim) {
  int64_t n = 1;
  while ((b = s_unquoted(b, e, delim, NULL, NULL)) < e) n++, b++;
  return n;
}

/* The separator of text when none was given: of ',' ';' and tab, the one
** that cuts the first few lines into the same number of fields (more than
** one), the most fields first; if none does, the most frequent in the
** first line; ',' for one column. */
static char s_guess_delim(const char *p, const char *end) {
  static const char cand[] = {',', ';', '\t'};
  int64_t first[3] = {0, 0, 0};
  int same[3] = {1, 1, 1}, best = -1, lines = 0;
  while (p < end && lines < 8) {
    const char *eol = s_unquoted(p, end, '\n', NULL, NULL), *q = p;
    while (q < eol && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
    if (q < eol) {
      for (int k = 0; k < 3; k++) {
        int64_t n = s_count(p, eol, cand[k]);
        if (!lines) first[k] = n;
        else if (n != first[k]) same[k] = 0;
      }
      lines++;
    }
    p = eol + (eol < end);
  }
  for (int k = 0; k < 3; k++)
    if (same[k] && first[k] > 1 && (best < 0 || first[k] > first[best])) best = k;
  for (int k = 0; k < 3 && best < 0; k++)
    if (first[k] > 1 && (best < 0 || first[k] > first[best])) best = k;
  return best < 0 ? ',' : cand[best];
}

/* Whether line [b, e) is a header: no field of it is a number (so a line
** of data with one bad field is an error, not a header). */
static int s_is_header(const char *b, const char *e, char delim) {
  const char *fs, *fe, *next = b;
  int names = 0;
  while (next) {
    char num[S_NUM_MAX + 1];
    size_t n;
    next = s_field(next, e, delim, &fs, &fe);
    n = (size_t)(fe - fs);
    if (n == 0) continue;
    names++;
    if (memchr(fs, '\0', n)) return 0; /* not a name: data, to be refused */
    if (n > S_NUM_MAX) {            /* a name, unless it is all number */
      if (strspn(fs, "0123456789.eE+-") >= n) return 0;
      continue;
    }
    memcpy(num, fs, n);
    num[n] = '\0';
    if (s_number_kind(num) != S_NUM_BAD) return 0;
  }
  return names > 0;
}

/* Where field k (from 1) of the current record is, for a message: "PATH
** line L field K", with the header's name for it when there is one. */
static void s_where(const s_csv *c, long long k, char *out, size_t n) {
  int w = snprintf(out, n, "%s line %lld field %lld", c->path, (long long)c->line, k);
  const char *f = c->hb, *fs = NULL, *fe = NULL;
  long long i = 0;
  while (f && i < k) f = s_field(f, c->he, c->delim, &fs, &fe), i++;
  if (c->hb && i == k && fe > fs && w > 0 && (size_t)w < n) {
    char name[48];
    s_show(name, sizeof name, fs, (size_t)(fe - fs));
    snprintf(out + w, n - (size_t)w, " ('%s')", name);
  }
}

/* Field k (from 1) [s, s+n) of the current record as a value of c->dtype
** into out; an error names what is wrong and where. */
static int s_value(const s_csv *c, const char *s, size_t n, long long k, void *out,
                   tr_err *err) {
  char num[S_NUM_MAX + 1], show[48], where[1024];
  int kind = S_NUM_BAD, inf;
  if (n == 0 && c->o->has_null) {
    if (c->dtype == TR_F32) *(float *)out = (float)c->o->null_value;
    else *(double *)out = c->o->null_value;
    return TR_OK;
  }
  if (n > 0 && n <= S_NUM_MAX) {
    memcpy(num, s, n);
    num[n] = '\0';
    if (strlen(num) == n) kind = s_number_kind(num); /* no NUL inside */
  }
  if (kind == S_NUM_BAD) {
    s_show(show, sizeof show, s, n);
    s_where(c, k, where, sizeof where);
    if (!n)
      return tr_seterr(err, TR_ESYNTAX,
                       "empty field in %s (LOAD .. (NULL nan) reads empty fields as NaN)", where);
    return tr_seterr(err, TR_ESYNTAX, "bad number '%s' in %s%s", show, where,
                     c->line == 1 && c->o->header == 0 && (isalpha((unsigned char)*s) || *s == '_')
                         ? " (if the first line names the columns: LOAD .. (HEADER))"
                         : "");
  }
  /* strtof for f32: rounding once from text is what makes "%.9g"
  ** round-trip exactly. */
  if (c->dtype == TR_F32) {
    float v = strtof(num, NULL);
    inf = isinf(v);
    memcpy(out, &v, sizeof v);
  } else {
    double v = strtod(num, NULL);
    inf = isinf(v);
    memcpy(out, &v, sizeof v);
  }
  if (inf && kind == S_NUM_DECIMAL) {
    s_show(show, sizeof show, s, n);
    s_where(c, k, where, sizeof where);
    return tr_seterr(err, TR_ESYNTAX, "number '%s' is too large for %s in %s", show,
                     tr_dtype_name(c->dtype), where);
  }
  return TR_OK;
}

/* Grow *vals (item bytes each, *cap of them) to hold one more. */
static int s_grow(char **vals, size_t *cap, size_t nvals, size_t item) {
  if (nvals < *cap) return 0;
  size_t ncap = *cap ? *cap * 2 : 1024;
  char *nv = ncap < SIZE_MAX / 16 ? realloc(*vals, ncap * item) : NULL;
  if (!nv) return -1;
  *vals = nv;
  *cap = ncap;
  return 0;
}

int ta_csv_open(const char *path, tr_dtype dtype, const tc_csv_opts *opts, tc_array *a,
                tr_err *err) {
  static const tc_csv_opts defaults = {0, 0, 0, 0};
  char *text = NULL, *vals = NULL;
  size_t len, item = tr_dtype_size(dtype), nvals = 0, cap = 0;
  int64_t rows = 0, fields = -1, header_line = 0;
  const char *b, *e;
  s_cloc loc;
  int rc = TR_OK;
  ta_reset(a);
  if ((rc = s_slurp(path, &text, &len, err))) return rc;
  s_locale_push(&loc);
  s_csv c = {path, text, text + len, 0, dtype, opts ? opts : &defaults, 0, 0, NULL, NULL};
  if (len >= 3 && !memcmp(c.p, "\xEF\xBB\xBF", 3)) c.p += 3; /* UTF-8 BOM */
  c.delim = c.o->delim ? c.o->delim : s_guess_delim(c.p, c.end);
  while (s_line(&c, &b, &e, &rc, err)) {
    int64_t nf = 0;
    if (!rows && !header_line && c.o->header >= 0 && (c.o->header > 0 || s_is_header(b, e, c.delim))) {
      header_line = c.line; /* names the columns: its count is checked below */
      fields = s_count(b, e, c.delim);
      c.hb = b;
      c.he = e;
      continue;
    }
    for (const char *f = b; f;) {
      const char *fs, *fe;
      f = s_field(f, e, c.delim, &fs, &fe);
      if (s_grow(&vals, &cap, nvals, item)) {
        rc = tr_seterr(err, TR_ENOMEM, "out of memory reading '%s'", path);
        goto done;
      }
      if ((rc = s_value(&c, fs, (size_t)(fe - fs), (long long)nf + 1, vals + nvals * item, err)))
        goto done;
      nvals++;
      nf++;
    }
    if (fields < 0) {
      fields = nf;
    } else if (nf != fields) {
      rc = tr_seterr(err, TR_ESHAPE, "ragged CSV %s: line %lld has %lld fields, expected %lld%s", path,
                     (long long)c.line, (long long)nf, (long long)fields,
                     header_line && !rows ? " (as many as the header line names)" : "");
      goto done;
    }
    rows++;
  }
  if (rc) goto done;
  if (rows == 0 && header_line && c.o->header == 0) {
    /* one line that looked like names: more likely bad data, said so */
    tc_csv_opts data = *c.o;
    data.header = -1;
    s_locale_pop(&loc);
    free(text);
    free(vals);
    return ta_csv_open(path, dtype, &data, a, err);
  }
  if (rows == 0) {
    rc = header_line ? tr_seterr(err, TR_ESYNTAX, "CSV %s has a header line but no data", path)
                     : tr_seterr(err, TR_ESYNTAX, "empty CSV file %s", path);
    goto done;
  }
  a->kind_ = TA_CSV_READ;
  a->dtype = dtype;
  a->rank = fields == 1 ? 1 : 2;
  a->shape[0] = rows;
  a->shape[1] = fields;
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
    double v;
    if (a->dtype == TR_F32) {
      float f;
      memcpy(&f, elt, sizeof f);
      v = f;
    } else {
      memcpy(&v, elt, sizeof v);
    }
    /* a NaN's sign means nothing; printf would write "-nan" for some */
    if (isnan(v))
      used += (size_t)snprintf(buf + used, BUF - used, "nan%c", sep);
    else
      used += (size_t)snprintf(buf + used, BUF - used, a->dtype == TR_F32 ? "%.9g%c" : "%.17g%c", v, sep);
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
