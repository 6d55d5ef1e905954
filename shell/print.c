/*
** shell/print.c - results on sh->out (stdout, or the file of .output /
** .once), errors and warnings on stderr.
**
** Output formats:
**   ROWS, table mode:  a header line, a line of dashes under each header,
**     then one line per row; columns left-aligned, two spaces apart, the
**     last column not padded.  No rows: nothing is printed (as sqlite3).
**   ROWS, csv mode:  the header line, then one line per row; cells holding
**     ',', '"', CR or LF are quoted with '"' (inner quotes doubled).
**   ROWS, json mode:  an array of one object per row, its keys the column
**     names, one row per line (as sqlite3's .mode json).
**   ROWS, markdown mode:  a Markdown table: | header |, |---|, | row |
**     ('|' in a cell escaped as '\|').
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
**       Summarised (the engine left out the middle of a dimension, past the
**       print_lines setting, or the columns are wider than the screen):
**       the first and last rows and columns, "..." where the rest is, and
**       the global index of every row (a column on the left) and column (a
**       line on top).
**     csv mode:  no title; rank 0: the value;  rank 1: one line;  rank 2: one
**       line per row;  rank > 2: one line per row of each 2-D slice, led by
**       the slice's leading rank-2 global indices as extra columns.
**     json mode:  one object: name, type, origin, shape and values, nested
**       lists of numbers (NaN and infinities as null).
**     markdown mode:  as table mode, each 2-D slice a Markdown table.
*/
#include "config.h"
#include "shell/shell_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Print an error for input line `line` of src and count the failure. */
int si_report(ts_shell *sh, const si_source *src, long line,
                    const char *fmt, ...) {
  va_list ap;
  fflush(sh->out);
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

int si_report_at(ts_shell *sh, const si_source *src, long line, long col, const char *text,
                 size_t len, const char *msg) {
  fflush(sh->out);
  if (src->in) {
    if (src->name) fprintf(stderr, "%s:%ld:%ld: %s\n", src->name, line, col, msg);
    else fprintf(stderr, "line %ld:%ld: %s\n", line, col, msg);
  } else {
    /* the line as typed, and a caret under the token (tabs kept, so the
    ** caret lines up whatever the tab stops) */
    long c = 1;
    size_t i;
    fprintf(stderr, "Error: %s\n  %.*s\n  ", msg, (int)len, text);
    for (i = 0; i < len && c < col; i++)
      if (((unsigned char)text[i] & 0xC0) != 0x80) {
        fputc(text[i] == '\t' ? '\t' : ' ', stderr);
        c++;
      }
    fputs("^\n", stderr);
  }
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

void si_output_done(ts_shell *sh) {
  if (!sh->once) return;
  if (sh->out != stdout) fclose(sh->out);
  sh->out = stdout;
  sh->once = 0;
}

int si_width(const ts_shell *sh) {
  struct winsize ws;
  const char *env = getenv("COLUMNS");
  if (isatty(fileno(sh->out)) && ioctl(fileno(sh->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  if (env && atoi(env) > 0) return atoi(env);
  return 80;
}

/* Display width of UTF-8 text (code points; good enough for alignment). */
static size_t s_width(const char *s) {
  size_t w = 0;
  for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
  return w;
}

/* Print s then spaces up to width w. */
static void s_put_padded(FILE *f, const char *s, size_t w) {
  size_t n = s_width(s);
  fputs(s, f);
  for (; n < w; n++) fputc(' ', f);
}

/* ---- rows ------------------------------------------------------------------ */

/* Print a CSV cell, quoted if needed. */
static void s_csv_cell(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

/* Print s as a JSON string. */
static void s_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* Print s as a Markdown table cell. */
static void s_md_cell(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '|') fputc('\\', f);
    fputc(*s == '\n' ? ' ' : *s, f);
  }
}

/* Cell (row, col) of a ROWS result; row -1 is the header. */
const char *si_cell(const te_result *r, int row, int col) {
  const char *s = row < 0 ? r->colnames[col]
                          : r->cells[(size_t)row * (size_t)r->ncols + (size_t)col];
  return s ? s : "";
}

static void s_rows_csv(FILE *f, const te_result *r) {
  for (int i = -1; i < r->nrows; i++)
    for (int j = 0; j < r->ncols; j++) {
      s_csv_cell(f, si_cell(r, i, j));
      fputc(j + 1 < r->ncols ? ',' : '\n', f);
    }
}

static void s_rows_json(FILE *f, const te_result *r) {
  for (int i = 0; i < r->nrows; i++) {
    fputs(i ? ",\n{" : "[{", f);
    for (int j = 0; j < r->ncols; j++) {
      if (j) fputc(',', f);
      s_json_str(f, si_cell(r, -1, j));
      fputc(':', f);
      s_json_str(f, si_cell(r, i, j));
    }
    fputc('}', f);
  }
  fputs("]\n", f);
}

static void s_rows_markdown(FILE *f, const te_result *r) {
  for (int i = -2; i < r->nrows; i++) { /* -2: header, -1: the rule */
    fputc('|', f);
    for (int j = 0; j < r->ncols; j++) {
      fputc(' ', f);
      if (i == -1) fputs("---", f);
      else s_md_cell(f, si_cell(r, i < 0 ? -1 : i, j));
      fputs(" |", f);
    }
    fputc('\n', f);
  }
}

/* ROWS in the shell's mode (csv also if the widths cannot be had). */
static void s_print_rows(const ts_shell *sh, const te_result *r) {
  FILE *f = sh->out;
  size_t *w = NULL; /* column widths */
  int i, j;
  if (r->nrows <= 0 || r->ncols <= 0) return;
  if (sh->mode == SI_JSON) return s_rows_json(f, r);
  if (sh->mode == SI_MARKDOWN) return s_rows_markdown(f, r);
  if (sh->mode == SI_CSV || !(w = calloc((size_t)r->ncols, sizeof *w))) return s_rows_csv(f, r);
  for (i = -1; i < r->nrows; i++)
    for (j = 0; j < r->ncols; j++)
      if (s_width(si_cell(r, i, j)) > w[j]) w[j] = s_width(si_cell(r, i, j));
  for (i = -2; i < r->nrows; i++) /* -2: header, -1: dashes */
    for (j = 0; j < r->ncols; j++) {
      int last = j + 1 == r->ncols;
      size_t k;
      if (i == -1)
        for (k = 0; k < w[j]; k++) fputc('-', f);
      else if (last)
        fputs(si_cell(r, i < 0 ? -1 : i, j), f);
      else
        s_put_padded(f, si_cell(r, i < 0 ? -1 : i, j), w[j]);
      fputs(last ? "\n" : "  ", f);
    }
  free(w);
}

/* ---- tensors --------------------------------------------------------------- */

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

/* The global index of position i of dimension d of r. */
static int64_t s_global(const te_result *r, int d, int64_t i) {
  return r->origin[d] + i + (r->gap[d] >= 0 && i >= r->gap[d] ? r->skip[d] : 0);
}

/* How a tensor is laid out on the page. */
typedef struct s_page {
  const te_result *r;
  int rank;
  int64_t ncol, nrow, nblock; /* values per row, rows per block, blocks */
  size_t w;                   /* width of a value (and column index) */
  size_t rw;                  /* width of a row index (0: no index column) */
  int summary;                /* show indices and "..." */
  int64_t lcols, rcols;       /* columns shown from the left and the right */
} s_page;

static int s_digits(int64_t v) {
  int n = 1;
  while (v >= 10) v /= 10, n++;
  return n;
}

/* Lay r out for a screen `width` wide: a summary when the engine left
** values out or the columns do not fit, keeping as many from both ends as
** fit. */
static void s_layout(s_page *pg, const te_result *r, int width) {
  char buf[64];
  int64_t total = 1;
  memset(pg, 0, sizeof *pg);
  pg->r = r;
  pg->rank = r->rank < 0 ? 0 : r->rank > TR_MAX_RANK ? TR_MAX_RANK : r->rank;
  for (int d = 0; d < pg->rank; d++) {
    total *= r->shape[d] > 0 ? r->shape[d] : 0;
    if (r->gap[d] >= 0) pg->summary = 1;
  }
  pg->ncol = pg->rank >= 1 ? r->shape[pg->rank - 1] : 1;
  pg->nrow = pg->rank >= 2 ? r->shape[pg->rank - 2] : 1;
  pg->nblock = pg->ncol > 0 && pg->nrow > 0 ? total / (pg->ncol * pg->nrow) : 0;
  for (int64_t i = 0; r->values && i < total; i++) {
    s_fmt_value(buf, sizeof buf, r->values[i], r->dtype);
    if (strlen(buf) > pg->w) pg->w = strlen(buf);
  }
  pg->lcols = pg->ncol;
  if (pg->rank >= 1 && (size_t)pg->ncol * (pg->w + 2) > (size_t)width) pg->summary = 1;
  if (!pg->summary || pg->rank == 0) return;
  int64_t last = s_global(r, pg->rank - 1, pg->ncol - 1);
  if ((size_t)s_digits(last) > pg->w) pg->w = (size_t)s_digits(last);
  if (pg->rank >= 2) pg->rw = (size_t)s_digits(s_global(r, pg->rank - 2, pg->nrow - 1)) < 3
                                  ? 3 : (size_t)s_digits(s_global(r, pg->rank - 2, pg->nrow - 1));
  /* columns: all if they fit, else from both ends around "..." */
  int64_t avail = width - (int64_t)(pg->rw ? pg->rw + 2 : 0), fit = avail / (int64_t)(pg->w + 2);
  int64_t gap = r->gap[pg->rank - 1];
  if (gap < 0 && fit >= pg->ncol) return;
  fit = (avail - 5) / (int64_t)(pg->w + 2);
  if (fit < 2) fit = 2;
  pg->lcols = (fit + 1) / 2;
  pg->rcols = fit / 2;
  if (gap >= 0 && pg->lcols > gap) pg->lcols = gap;
  if (gap >= 0 && pg->rcols > pg->ncol - gap) pg->rcols = pg->ncol - gap;
  if (pg->lcols + pg->rcols >= pg->ncol) { /* everything fits after all */
    pg->lcols = pg->ncol;
    pg->rcols = 0;
  }
}

/* Whether "..." goes before shown column j (of the row's values). */
static int s_col_gap(const s_page *pg, int64_t j) {
  int64_t gap = pg->r->gap[pg->rank - 1];
  if (pg->rcols) return j == pg->ncol - pg->rcols;
  return gap >= 0 && j == gap;
}

/* One line of the page: the column indices (row NULL) or row `row`'s
** values (the row index idx); markdown makes it a table row. */
static void s_line(FILE *f, const s_page *pg, const double *row, int64_t idx, int md) {
  char buf[64];
  const char *sep = md ? " | " : "  ";
  int first = 1, w = (int)pg->w;
  if (md) fputs("| ", f);
  if (pg->rw) {
    if (row) fprintf(f, "%*lld", (int)pg->rw, (long long)idx);
    else fprintf(f, "%*s", (int)pg->rw, "");
    first = 0;
  }
  for (int64_t j = 0; j < pg->ncol; j++) {
    if (j >= pg->lcols && j < pg->ncol - pg->rcols) continue;
    if (pg->summary && s_col_gap(pg, j)) {
      fprintf(f, "%s...", first ? "" : sep);
      first = 0;
    }
    if (row) s_fmt_value(buf, sizeof buf, row[j], pg->r->dtype);
    else snprintf(buf, sizeof buf, "%lld", (long long)s_global(pg->r, pg->rank - 1, j));
    fprintf(f, "%s%*s", first ? "" : sep, w, buf);
    first = 0;
  }
  fputs(md ? " |\n" : "\n", f);
}

/* A Markdown table's rule under the column indices. */
static void s_md_rule(FILE *f, const s_page *pg) {
  fputc('|', f);
  if (pg->rw) fputs("---:|", f);
  for (int64_t j = 0; j < pg->ncol; j++) {
    if (j >= pg->lcols && j < pg->ncol - pg->rcols) continue;
    if (pg->summary && s_col_gap(pg, j)) fputs(":---:|", f);
    fputs("---:|", f);
  }
  fputc('\n', f);
}

/* One block (a 2-D slice, or the whole of rank 0 and 1) in table or
** markdown mode. */
static void s_block(FILE *f, const s_page *pg, int64_t b, int md) {
  const te_result *r = pg->r;
  if (pg->summary || md) {
    s_line(f, pg, NULL, -1, md);
    if (md) s_md_rule(f, pg);
  }
  for (int64_t i = 0; i < pg->nrow; i++) {
    const double *row = r->values + (b * pg->nrow + i) * pg->ncol;
    if (pg->rank >= 2 && r->gap[pg->rank - 2] == i)
      fprintf(f, md ? "| %*s |\n" : "%*s\n", (int)(pg->rw ? pg->rw : 3), "...");
    if (pg->summary || md) {
      s_line(f, pg, row, pg->rank >= 2 ? s_global(r, pg->rank - 2, i) : -1, md);
      continue;
    }
    for (int64_t j = 0; j < pg->ncol; j++) {
      char buf[64];
      s_fmt_value(buf, sizeof buf, row[j], r->dtype);
      fprintf(f, "%s%*s", j ? "  " : "", (int)pg->w, buf);
    }
    fputc('\n', f);
  }
}

/* The positions, along the leading dimensions, of block b. */
static void s_block_pos(const te_result *r, int rank, int64_t b, int64_t *pos) {
  for (int d = rank - 3; d >= 0; d--) {
    pos[d] = b % r->shape[d];
    b /= r->shape[d];
  }
}

/* TENSOR in table or markdown mode (see the header comment). */
static void s_tensor_table(const ts_shell *sh, const te_result *r, int md) {
  FILE *f = sh->out;
  s_page pg;
  int d;
  /* print_lines = 0 asks for every value: no column left out either */
  s_layout(&pg, r, md || !te_setting(sh->eng, "print_lines") ? 1 << 30 : si_width(sh));
  if (md && pg.rank >= 2 && !pg.rw) pg.rw = (size_t)s_digits(s_global(r, pg.rank - 2, pg.nrow - 1));
  fprintf(f, "%s[", r->name);
  for (d = 0; d < pg.rank; d++)
    fprintf(f, "%s%lld:%lld", d ? ", " : "", (long long)r->origin[d],
            (long long)(r->origin[d] + (r->full[d] ? r->full[d] : r->shape[d])));
  fprintf(f, "] (%s)\n", tr_dtype_name(r->dtype));
  if (!r->values || !pg.nblock) return;
  if (pg.rank == 0) {
    char buf[64];
    s_fmt_value(buf, sizeof buf, r->values[0], r->dtype);
    fprintf(f, "%s\n", buf);
    return;
  }
  for (int64_t b = 0; b < pg.nblock; b++) {
    int64_t pos[TR_MAX_RANK], prev[TR_MAX_RANK];
    s_block_pos(r, pg.rank, b, pos);
    s_block_pos(r, pg.rank, b ? b - 1 : 0, prev);
    if (pg.rank > 2) {
      /* "..." before the first block past a leading dimension's gap: the
      ** outermost dimension that moved on from the block before */
      for (d = 0; d < pg.rank - 2 && b; d++)
        if (pos[d] != prev[d]) {
          if (r->gap[d] == pos[d]) fputs(md ? "\n...\n" : "...\n", f);
          break;
        }
      if (md && b) fputc('\n', f);
      fputc('[', f);
      for (d = 0; d < pg.rank - 2; d++) fprintf(f, "%lld, ", (long long)s_global(r, d, pos[d]));
      fprintf(f, ":, :]\n");
      if (md) fputc('\n', f);
    }
    s_block(f, &pg, b, md);
  }
}

/* TENSOR in csv mode. */
static void s_tensor_csv(const ts_shell *sh, const te_result *r) {
  FILE *f = sh->out;
  s_page pg;
  char buf[64];
  s_layout(&pg, r, 1 << 30);
  for (int64_t b = 0; r->values && b < pg.nblock; b++) {
    int64_t pos[TR_MAX_RANK];
    s_block_pos(r, pg.rank, b, pos);
    for (int64_t i = 0; i < pg.nrow; i++) {
      const double *row = r->values + (b * pg.nrow + i) * pg.ncol;
      for (int d = 0; d < pg.rank - 2; d++) fprintf(f, "%lld,", (long long)s_global(r, d, pos[d]));
      for (int64_t j = 0; j < pg.ncol; j++) {
        s_fmt_value(buf, sizeof buf, row[j], r->dtype);
        fprintf(f, "%s%s", j ? "," : "", buf);
      }
      fputc('\n', f);
    }
  }
}

/* The values of dimensions d.. from offset *i on, as nested JSON lists. */
static void s_json_values(FILE *f, const te_result *r, int d, int64_t *i) {
  if (d == r->rank) {
    double v = r->values[(*i)++];
    if (isfinite(v)) fprintf(f, r->dtype == TR_F64 ? "%.17g" : "%.9g", v);
    else fputs("null", f);
    return;
  }
  fputc('[', f);
  for (int64_t k = 0; k < r->shape[d]; k++) {
    if (k) fputs(", ", f);
    s_json_values(f, r, d + 1, i);
  }
  fputc(']', f);
}

/* TENSOR in json mode. */
static void s_tensor_json(const ts_shell *sh, const te_result *r) {
  FILE *f = sh->out;
  int64_t i = 0;
  fputs("{\"name\": ", f);
  s_json_str(f, r->name);
  fprintf(f, ", \"type\": \"%s\", \"origin\": [", tr_dtype_name(r->dtype));
  for (int d = 0; d < r->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)r->origin[d]);
  fputs("], \"shape\": [", f);
  for (int d = 0; d < r->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)r->shape[d]);
  fputs("], \"values\": ", f);
  if (r->values) s_json_values(f, r, 0, &i);
  else fputs("[]", f);
  fputs("}\n", f);
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
    if (sh->mode == SI_CSV) s_tensor_csv(sh, r);
    else if (sh->mode == SI_JSON) s_tensor_json(sh, r);
    else s_tensor_table(sh, r, sh->mode == SI_MARKDOWN);
    break;
  case TE_RES_TEXT:
    if (r->text) fputs(r->text, sh->out);
    break;
  }
}
