/*
** shell/print.c - results on stdout: tables, CSV, tensors.
**
** Output formats (stdout):
**   ROWS, table mode:  a header line, a line of dashes under each header,
**     then one line per row; columns left-aligned, two spaces apart, the
**     last column not padded.  No rows: nothing is printed (as sqlite3).
**   ROWS, csv mode:  the header line, then one line per row; cells holding
**     ',', '"', CR or LF are quoted with '"' (inner quotes doubled).
**   TEXT:  printed as is.
**   TENSOR:  values are formatted with "%.6g" (f32) or "%.15g" (f64);
**     -0 prints as 0, any NaN as nan.
**     table mode:  a title line "NAME[lo:hi, lo:hi] (f32)" giving the global
**       range shown in each dimension (rank 0: "NAME[] (f32)"), then
**       rank 0: the value;  rank 1: one line;  rank 2: one line per row;
**       rank > 2: for each combination of the leading rank-2 indices, in
**       row-major order, a line "[i0, i1, :, :]" (global indices) and that
**       2-D slice.  Values are right-aligned to one width (the widest value
**       in the result), two spaces apart.  An empty slice prints the title.
**     csv mode:  no title; rank 0: the value;  rank 1: one line;  rank 2: one
**       line per row;  rank > 2: one line per row of each 2-D slice, led by
**       the slice's leading rank-2 global indices as extra columns.
*/
#include "config.h"
#include "shell/shell_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Print an error for input line `line` of src and count the failure. */
int si_report(ts_shell *sh, const si_source *src, long line,
                    const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  if (!src->in)
    fputs("Error: ", stderr);
  else if (src->name)
    fprintf(stderr, "%s:%ld: ", src->name, line);
  else
    fprintf(stderr, "line %ld: ", line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  sh->nfail++;
  return SI_FAIL;
}

/* Print a result's warnings (one per line) on stderr, placed as errors
** are ("Warning: ..." on a terminal, "line N: warning: ..." in batch); they
** do not count as failures. */
void si_warn(const si_source *src, long line, const char *notice) {
  fflush(stdout);
  for (const char *p = notice; p && *p;) {
    size_t n = strcspn(p, "\n");
    if (!src->in)
      fputs("Warning: ", stderr);
    else if (src->name)
      fprintf(stderr, "%s:%ld: warning: ", src->name, line);
    else
      fprintf(stderr, "line %ld: warning: ", line);
    fprintf(stderr, "%.*s\n", (int)n, p);
    p += n + (p[n] == '\n');
  }
}

/* Display width of UTF-8 text (code points; good enough for alignment). */
static size_t s_width(const char *s) {
  size_t w = 0;
  for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
  return w;
}

/* Print s then spaces up to width w. */
static void s_put_padded(const char *s, size_t w) {
  size_t n = s_width(s);
  fputs(s, stdout);
  for (; n < w; n++) fputc(' ', stdout);
}

/* ---- results ------------------------------------------------------------ */

/* Format one tensor value into buf (see the header comment). */
static void s_fmt_value(char *buf, size_t size, double v, tr_dtype dt) {
  if (isnan(v))
    snprintf(buf, size, "nan");
  else if (v == 0)
    snprintf(buf, size, "0");
  else if (dt == TR_F64)
    snprintf(buf, size, "%.15g", v);
  else
    snprintf(buf, size, "%.6g", v);
}

/* Print a CSV cell, quoted if needed. */
static void s_csv_cell(const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, stdout);
    return;
  }
  fputc('"', stdout);
  for (; *s; s++) {
    if (*s == '"') fputc('"', stdout);
    fputc(*s, stdout);
  }
  fputc('"', stdout);
}

/* Cell (row, col) of a ROWS result; row -1 is the header. */
const char *si_cell(const te_result *r, int row, int col) {
  const char *s = row < 0 ? r->colnames[col]
                          : r->cells[(size_t)row * (size_t)r->ncols + (size_t)col];
  return s ? s : "";
}

/* ROWS in table mode, or in csv mode (also if the widths cannot be had). */
static void s_print_rows(const ts_shell *sh, const te_result *r) {
  size_t *w = NULL; /* column widths */
  int i, j;
  if (r->nrows <= 0 || r->ncols <= 0) return;
  if (sh->csv || !(w = calloc((size_t)r->ncols, sizeof *w))) {
    for (i = -1; i < r->nrows; i++)
      for (j = 0; j < r->ncols; j++) {
        s_csv_cell(si_cell(r, i, j));
        fputc(j + 1 < r->ncols ? ',' : '\n', stdout);
      }
    return;
  }
  for (i = -1; i < r->nrows; i++)
    for (j = 0; j < r->ncols; j++)
      if (s_width(si_cell(r, i, j)) > w[j]) w[j] = s_width(si_cell(r, i, j));
  for (i = -2; i < r->nrows; i++) /* -2: header, -1: dashes */
    for (j = 0; j < r->ncols; j++) {
      int last = j + 1 == r->ncols;
      size_t k;
      if (i == -1)
        for (k = 0; k < w[j]; k++) fputc('-', stdout);
      else if (last)
        fputs(si_cell(r, i < 0 ? -1 : i, j), stdout);
      else
        s_put_padded(si_cell(r, i < 0 ? -1 : i, j), w[j]);
      fputs(last ? "\n" : "  ", stdout);
    }
  free(w);
}

/* TENSOR in the current mode (see the header comment). */
static void s_print_tensor(const ts_shell *sh, const te_result *r) {
  char buf[64];
  int rank = r->rank < 0 ? 0 : r->rank > TR_MAX_RANK ? TR_MAX_RANK : r->rank;
  int64_t total = 1, ncol, nrow, nblock, b, i, j;
  size_t w = 0;
  int d;

  for (d = 0; d < rank; d++) total *= r->shape[d] > 0 ? r->shape[d] : 0;
  if (!sh->csv) {
    printf("%s[", r->name);
    for (d = 0; d < rank; d++)
      printf("%s%lld:%lld", d ? ", " : "", (long long)r->origin[d],
             (long long)(r->origin[d] + r->shape[d]));
    printf("] (%s)\n", tr_dtype_name(r->dtype));
  }
  if (total == 0 || !r->values) return;
  for (i = 0; i < total; i++) {
    s_fmt_value(buf, sizeof buf, r->values[i], r->dtype);
    if (strlen(buf) > w) w = strlen(buf);
  }
  ncol = rank >= 1 ? r->shape[rank - 1] : 1;
  nrow = rank >= 2 ? r->shape[rank - 2] : 1;
  nblock = total / (ncol * nrow);
  for (b = 0; b < nblock; b++) {
    int64_t lead[TR_MAX_RANK], rest = b; /* global leading indices */
    for (d = rank - 3; d >= 0; d--) {
      lead[d] = r->origin[d] + rest % r->shape[d];
      rest /= r->shape[d];
    }
    if (rank > 2 && !sh->csv) {
      fputc('[', stdout);
      for (d = 0; d < rank - 2; d++)
        printf("%lld, ", (long long)lead[d]);
      printf(":, :]\n");
    }
    for (i = 0; i < nrow; i++) {
      const double *row = r->values + (b * nrow + i) * ncol;
      if (sh->csv)
        for (d = 0; d < rank - 2; d++) printf("%lld,", (long long)lead[d]);
      for (j = 0; j < ncol; j++) {
        s_fmt_value(buf, sizeof buf, row[j], r->dtype);
        if (sh->csv)
          printf("%s%s", j ? "," : "", buf);
        else
          printf("%s%*s", j ? "  " : "", (int)w, buf);
      }
      fputc('\n', stdout);
    }
  }
}

/* Print a statement's result. */
void si_print_result(const ts_shell *sh, const te_result *r) {
  if (!r) return;
  switch (r->kind) {
  case TE_RES_NONE:
    break;
  case TE_RES_ROWS:
    s_print_rows(sh, r);
    break;
  case TE_RES_TENSOR:
    s_print_tensor(sh, r);
    break;
  case TE_RES_TEXT:
    if (r->text) fputs(r->text, stdout);
    break;
  }
}
