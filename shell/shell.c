/*
** shell/shell.c - the tradb shell: input (terminal, file, string), statement
** splitting, dot-commands, result printing, Ctrl-C, history, completion.
**
** Input.  Lines are accumulated until te_statement_end() finds a complete
** statement; every complete statement is run (several may share a line, one
** may span lines).  A line starting with '.' while no statement is pending
** is a dot-command.  A NUL byte ends a line's content.  Statements that
** hold nothing but blanks and comments before their ';' are skipped.
**
** Errors.  Terminal: "Error: MSG" on stderr.  Batch input (stdin, -c):
** "line N: MSG", N the input line where the statement starts (its first
** character that is not a blank or in a comment) or of the dot-command.
** Files run by .read: "FILE:N: MSG".  A failed statement or dot-command
** counts as a failure (batch exit status 1); with bail on, batch input
** stops at the first failure; an interrupted statement (Ctrl-C) always
** stops batch input ("line N: interrupted").  On the terminal neither
** ends the session: the rest of the line is dropped and the prompt comes
** back.  Ctrl-C at the prompt drops the line and any pending statement.
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
**   .timer on:  after each statement "Run Time: real R user U sys S"
**     (seconds, 3 decimals; real from a monotonic clock, user and sys from
**     getrusage).
*/
#include "config.h"
#include "shell/shell.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/time.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "engine/engine.h"

#define S_READ_DEPTH 16     /* .read nesting limit */
#define S_MAX_ARGS 8        /* words in a dot-command */
#define S_HISTORY_LINES 1000 /* lines kept in the history file */
#define S_MAINTAIN_S 0.2    /* seconds of replica repair per idle tick or statement */

/* What to do after a line, statement or dot-command. */
enum {
  S_OK,   /* go on */
  S_FAIL, /* it failed (already reported); go on unless bail is on */
  S_STOP, /* stop this input (bail, Ctrl-C); the terminal goes on */
  S_QUIT  /* leave the shell */
};

/* What reading a line gave. */
enum {
  S_LINE,   /* a line */
  S_EOF,    /* end of input */
  S_CANCEL, /* Ctrl-C at the prompt */
  S_INTR,   /* Ctrl-C while reading batch input */
  S_RDERR   /* read error (errno) */
};

/* Ctrl-C as the shell's own reading sees it: the prompt and batch input
** poll it, each statement clears it.  The SIGINT handler sets it and
** interrupts s_sigint_engine, where statements poll the engine's own
** request (te_interrupt). */
static volatile sig_atomic_t s_sigint;
static _Atomic(te_engine *) s_sigint_engine; /* ts_install_sigint's; NULL once closed */

struct ts_shell {
  te_engine *eng;     /* the engine statements go to */
  const char *dbpath; /* database directory; NULL = transient */
  int csv;            /* .mode csv (else table) */
  int timer;          /* .timer on */
  int bail;           /* .bail on */
  int echo;           /* .echo on */
  int depth;          /* .read files open */
  long nfail;         /* failed statements and dot-commands so far */
  char *histfile;     /* history file (terminal); NULL = none */
};

/* Where lines come from. */
typedef struct s_source {
  FILE *in;         /* batch input; NULL = the terminal (readline) */
  const char *name; /* file name for messages; NULL = "line N" */
  long lineno;      /* lines read so far */
} s_source;

/* A growable string, always NUL-terminated once allocated. */
typedef struct s_buf {
  char *p;    /* text */
  size_t len; /* bytes used, NUL excluded */
  size_t cap; /* bytes allocated */
} s_buf;

/* ---- small helpers --------------------------------------------------- */

/* Append n bytes of s to b; TR_OK or TR_ENOMEM. */
static int s_buf_add(s_buf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    char *p;
    while (cap < b->len + n + 1) cap *= 2;
    if (!(p = realloc(b->p, cap))) return TR_ENOMEM;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
  return TR_OK;
}

/* Print an error for input line `line` of src and count the failure. */
static int s_report(ts_shell *sh, const s_source *src, long line,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int s_report(ts_shell *sh, const s_source *src, long line,
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
  return S_FAIL;
}

/* Print a result's warnings (one per line) on stderr, placed as errors
** are ("Warning: ..." on a terminal, "line N: warning: ..." in batch); they
** do not count as failures. */
static void s_warn(const s_source *src, long line, const char *notice) {
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

/* Seconds of a timeval. */
static double s_secs(struct timeval tv) {
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
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
static const char *s_cell(const te_result *r, int row, int col) {
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
        s_csv_cell(s_cell(r, i, j));
        fputc(j + 1 < r->ncols ? ',' : '\n', stdout);
      }
    return;
  }
  for (i = -1; i < r->nrows; i++)
    for (j = 0; j < r->ncols; j++)
      if (s_width(s_cell(r, i, j)) > w[j]) w[j] = s_width(s_cell(r, i, j));
  for (i = -2; i < r->nrows; i++) /* -2: header, -1: dashes */
    for (j = 0; j < r->ncols; j++) {
      int last = j + 1 == r->ncols;
      size_t k;
      if (i == -1)
        for (k = 0; k < w[j]; k++) fputc('-', stdout);
      else if (last)
        fputs(s_cell(r, i < 0 ? -1 : i, j), stdout);
      else
        s_put_padded(s_cell(r, i < 0 ? -1 : i, j), w[j]);
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
static void s_print_result(const ts_shell *sh, const te_result *r) {
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

/* ---- statements ---------------------------------------------------------- */

/* Run text[0, len) (its ';' included), which starts at input line `line`. */
static int s_exec(ts_shell *sh, const s_source *src, char *text, size_t len,
                  long line) {
  char saved = text[len], saved_end = text[len - 1];
  te_result *res = NULL;
  struct rusage ru0, ru1;
  double t0 = 0;
  tr_err err;
  int rc, flow = S_OK;
  size_t a = 0, z = len;

  text[len] = '\0'; /* the engine sees exactly the statement */
  text[len - 1] = '\0';
  rc = te_is_blank(text); /* nothing before the ';' */
  text[len - 1] = saved_end;
  if (rc) goto done;
  if (sh->echo) {
    while (a < z && isspace((unsigned char)text[a])) a++;
    while (z > a && isspace((unsigned char)text[z - 1])) z--;
    printf("%.*s\n", (int)(z - a), text + a);
  }
  tr_clearerr(&err);
  /* From here a Ctrl-C cancels this statement: the engine's request is
  ** cleared first, so one that lands between the two is not lost. */
  te_interrupt_clear(sh->eng);
  s_sigint = 0;
  if (sh->timer) {
    t0 = tr_now();
    getrusage(RUSAGE_SELF, &ru0);
  }
  rc = te_exec(sh->eng, text, len, &res, &err);
  if (rc == TR_OK) {
    s_print_result(sh, res);
    if (res) s_warn(src, line, res->notice);
  } else if (rc == TR_EINTR) {
    s_report(sh, src, line, "interrupted");
    flow = S_STOP;
  } else {
    flow = s_report(sh, src, line, "%s",
                    err.msg[0] ? err.msg : "statement failed");
  }
  if (sh->timer) {
    getrusage(RUSAGE_SELF, &ru1);
    printf("Run Time: real %.3f user %.3f sys %.3f\n", tr_now() - t0,
           s_secs(ru1.ru_utime) - s_secs(ru0.ru_utime),
           s_secs(ru1.ru_stime) - s_secs(ru0.ru_stime));
  }
  fflush(stdout);
  te_result_free(&res);
  /* Between statements of a script there is no idle time: restoring
  ** replicas (if any are missing) gets a short slice here instead. */
  if (src->in && flow == S_OK) te_maintain(sh->eng, S_MAINTAIN_S, &err);
done:
  text[len] = saved;
  return flow;
}

/* Whether line[from, to) (clamped to [0, len)) holds a NUL byte. */
static int s_has_nul(const char *line, size_t len, long from, long to) {
  if (from < 0) from = 0;
  if (to > (long)len) to = (long)len;
  return from < to && memchr(line + from, '\0', (size_t)(to - from));
}

/* Add line[0, len) to the pending text and run every statement it
** completes.  *start is the input line where the pending statement starts
** (0: none); *nul says that statement holds a NUL byte.  A statement with
** a NUL byte is dropped, not run (the caller reported the line): C strings
** end there, so what runs would not be what the input says. */
static int s_feed(ts_shell *sh, const s_source *src, s_buf *pend, long *start,
                  int *nul, const char *line, size_t len) {
  size_t n;
  long at = (long)pend->len; /* where line starts in pend->p */
  int flow = S_OK;

  if (s_buf_add(pend, line, len) || s_buf_add(pend, "\n", 1)) {
    pend->len = 0;
    *start = 0;
    *nul = 0;
    return s_report(sh, src, src->lineno, "out of memory");
  }
  for (char *z = pend->p + at; (z = memchr(z, '\0', pend->len - (size_t)(z - pend->p)));)
    *z = ' '; /* keeps the statements around it whole */
  if (!*start && !te_is_blank(pend->p)) *start = src->lineno;
  while (*start && (n = te_statement_end(pend->p)) > 0) {
    int held = *nul || s_has_nul(line, len, -at, (long)n - at);
    int f = held ? S_OK : s_exec(sh, src, pend->p, n, *start);
    memmove(pend->p, pend->p + n, pend->len - n + 1);
    pend->len -= n;
    at -= (long)n;
    *nul = 0;
    *start = te_is_blank(pend->p) ? 0 : src->lineno;
    if (f == S_FAIL && sh->bail) f = S_STOP;
    if (f == S_STOP) { /* the rest of the line is dropped */
      *start = 0;
      flow = S_STOP;
      break;
    }
    if (f == S_FAIL) flow = S_FAIL;
  }
  if (!*start) pend->len = 0; /* only blanks and comments left */
  *nul = *start && (*nul || s_has_nul(line, len, -at, (long)len));
  return flow;
}

/* ---- dot-commands -------------------------------------------------------- */

typedef struct s_dotcmd s_dotcmd;

/* Run dot-command c with its argc words argv (argv[0] is its name, the
** arity is checked); returns S_OK, S_FAIL (reported), S_STOP or S_QUIT. */
typedef int s_dotfn(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                    char **argv);

/* A dot-command: its name, arguments, help line and handler (as Lua's
** luaL_Reg and Redis's command table carry theirs). */
struct s_dotcmd {
  const char *name; /* ".read" */
  const char *args; /* usage of the arguments, one word each; "a|b" lists
                       the choices, FILE completes file names, NAME tensor
                       names, ENDPOINT the workers' endpoints */
  int minargs;      /* fewest arguments */
  int maxargs;      /* most arguments */
  const char *help; /* one-line description */
  s_dotfn *run;     /* what it does */
};

static s_dotfn s_dot_bail, s_dot_echo, s_dot_quit, s_dot_help, s_dot_mode, s_dot_read,
    s_dot_schema, s_dot_show, s_dot_tables, s_dot_timer, s_dot_worker, s_dot_workers;

static const s_dotcmd s_dots[] = {
    {".bail", "on|off", 1, 1, "stop batch input at the first error", s_dot_bail},
    {".echo", "on|off", 1, 1, "print each statement before running it", s_dot_echo},
    {".exit", "", 0, 0, "leave the shell (also Ctrl-D)", s_dot_quit},
    {".help", "", 0, 0, "show this message", s_dot_help},
    {".mode", "table|csv", 0, 1, "how results are printed", s_dot_mode},
    {".quit", "", 0, 0, "leave the shell (also Ctrl-D)", s_dot_quit},
    {".read", "FILE", 1, 1, "run the statements in FILE", s_dot_read},
    {".schema", "[NAME]", 0, 1, "CREATE TENSOR statements of all tensors or NAME",
     s_dot_schema},
    {".show", "", 0, 0, "show the current settings", s_dot_show},
    {".tables", "", 0, 0, "list the tensors", s_dot_tables},
    {".timer", "on|off", 1, 1, "print the run time of each statement", s_dot_timer},
    {".worker", "add|remove ENDPOINT", 2, 2,
     "record and connect a worker, or forget it", s_dot_worker},
    {".workers", "", 0, 0, "list the workers, their state and counters", s_dot_workers},
    {NULL, NULL, 0, 0, NULL, NULL}};

static const char s_statement_help[] =
    "\n"
    "Statements end with ';' and may span lines; '--' starts a comment.\n"
    "  CREATE TENSOR A[1000, 1000] [CHUNK [250, 250]] [TYPE f64];\n"
    "  LOAD A FROM 'a.npy' [CHUNK [..]] [TYPE f32];   SAVE A TO 'a.csv';\n"
    "  FILL A ZEROS|ONES|IDENTITY|UNIFORM(lo, hi)|NORMAL(mu, sd) [SEED n];\n"
    "  C[i, j] = SUM(A[i, k] * B[k, j]);\n"
    "  EXPLAIN [ANALYZE] [(FORMAT TEXT|JSON)] C[i, j] = ...;   SET name = value;\n"
    "  PRINT A;   PRINT A[0:4, 0:4];   SHOW TENSORS;   DESCRIBE A;\n"
    "  DROP TENSOR [IF EXISTS] A;\n"
    "Ctrl-C cancels the running statement.\n";

/* Split line in place into words: blanks separate them, '...' or "..."
** quote one.  Returns the number of words, -1 for an unterminated quote,
** -2 for too many words. */
static int s_split(char *line, char **argv) {
  int argc = 0;
  char *p = line;
  for (;;) {
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return argc;
    if (argc == S_MAX_ARGS + 1) return -2;
    if (*p == '\'' || *p == '"') {
      char *q = strchr(p + 1, *p);
      if (!q) return -1;
      argv[argc++] = p + 1;
      *q = '\0';
      p = q + 1;
    } else {
      argv[argc++] = p;
      while (*p && !isspace((unsigned char)*p)) p++;
      if (*p) *p++ = '\0';
    }
  }
}

/* on/off, yes/no, true/false, 1/0; TR_OK or TR_EINVAL. */
static int s_parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"on", "yes", "true", "1"};
  static const char *const no[] = {"off", "no", "false", "0"};
  size_t i;
  for (i = 0; i < sizeof yes / sizeof *yes; i++) {
    if (!strcasecmp(s, yes[i])) return *out = 1, TR_OK;
    if (!strcasecmp(s, no[i])) return *out = 0, TR_OK;
  }
  return TR_EINVAL;
}

/* .bail, .echo and .timer: set *flag from the on|off argument. */
static int s_set_flag(ts_shell *sh, const s_source *src, const s_dotcmd *c, const char *arg,
                      int *flag) {
  if (s_parse_bool(arg, flag))
    return s_report(sh, src, src->lineno, "%s: expected on or off, not '%s'", c->name, arg);
  return S_OK;
}

static int s_dot_bail(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                      char **argv) {
  return s_set_flag(sh, src, c, argv[1], &sh->bail);
}

static int s_dot_echo(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                      char **argv) {
  return s_set_flag(sh, src, c, argv[1], &sh->echo);
}

static int s_dot_timer(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                       char **argv) {
  return s_set_flag(sh, src, c, argv[1], &sh->timer);
}

/* .quit and .exit */
static int s_dot_quit(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                      char **argv) {
  return S_QUIT;
}

/* .mode [table|csv] */
static int s_dot_mode(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                      char **argv) {
  if (argc == 1)
    printf("current output mode: %s\n", sh->csv ? "csv" : "table");
  else if (!strcmp(argv[1], "table") || !strcmp(argv[1], "csv"))
    sh->csv = !strcmp(argv[1], "csv");
  else
    return s_report(sh, src, src->lineno, ".mode: unknown mode '%s' (table or csv)", argv[1]);
  return S_OK;
}

/* .show */
static int s_dot_show(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                      char **argv) {
  printf("%8s: %s\n", "mode", sh->csv ? "csv" : "table");
  printf("%8s: %s\n", "timer", sh->timer ? "on" : "off");
  printf("%8s: %s\n", "bail", sh->bail ? "on" : "off");
  printf("%8s: %s\n", "echo", sh->echo ? "on" : "off");
  printf("%8s: %s\n", "database", sh->dbpath ? sh->dbpath : "(transient)");
  printf("%8s: %s\n", "backend", te_backend_name(sh->eng));
  return S_OK;
}

static int s_run_source(ts_shell *sh, s_source *src);

/* .read FILE */
static int s_dot_read(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                      char **argv) {
  const char *path = argv[1];
  s_source sub = {NULL, path, 0};
  int flow;
  if (sh->depth >= S_READ_DEPTH)
    return s_report(sh, src, src->lineno,
                    ".read: files nested too deeply (limit %d)", S_READ_DEPTH);
  if (!(sub.in = fopen(path, "r")))
    return s_report(sh, src, src->lineno, "cannot open '%s': %s", path,
                    strerror(errno));
  sh->depth++;
  flow = s_run_source(sh, &sub);
  sh->depth--;
  fclose(sub.in);
  return flow;
}

/* .tables */
static int s_dot_tables(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                        char **argv) {
  char **names = NULL;
  tr_err err;
  size_t i;
  if (te_tensor_names(sh->eng, &names, &err))
    return s_report(sh, src, src->lineno, "%s", err.msg);
  for (i = 0; names[i]; i++) printf("%s%s", i ? " " : "", names[i]);
  if (i) fputc('\n', stdout);
  te_free_names(names);
  return S_OK;
}

/* .schema [NAME] */
static int s_dot_schema(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                        char **argv) {
  char *text = NULL;
  tr_err err;
  size_t n;
  if (te_schema(sh->eng, argc > 1 ? argv[1] : NULL, &text, &err))
    return s_report(sh, src, src->lineno, "%s", err.msg);
  n = text ? strlen(text) : 0;
  if (n) fputs(text, stdout);
  if (n && text[n - 1] != '\n') fputc('\n', stdout);
  free(text);
  return S_OK;
}

/* .workers */
static int s_dot_workers(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                         char **argv) {
  te_result *res = NULL;
  tr_err err;
  if (te_workers(sh->eng, &res, &err))
    return s_report(sh, src, src->lineno, "%s", err.msg);
  s_print_result(sh, res);
  te_result_free(&res);
  return S_OK;
}

/* .worker add|remove ENDPOINT */
static int s_dot_worker(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                        char **argv) {
  te_result *res = NULL;
  tr_err err;
  int rc;
  if (!strcmp(argv[1], "add"))
    rc = te_worker_add(sh->eng, argv[2], &res, &err);
  else if (!strcmp(argv[1], "remove"))
    rc = te_worker_remove(sh->eng, argv[2], &res, &err);
  else
    return s_report(sh, src, src->lineno, "usage: %s %s", c->name, c->args);
  if (rc) return s_report(sh, src, src->lineno, "%s", err.msg);
  if (res) s_warn(src, src->lineno, res->notice);
  te_result_free(&res);
  return S_OK;
}

/* .help: the dot-commands, their usage aligned, then the statements. */
static int s_dot_help(ts_shell *sh, const s_source *src, const s_dotcmd *c, int argc,
                      char **argv) {
  const s_dotcmd *h;
  int w = 0;
  for (h = s_dots; h->name; h++) {
    int n = (int)(strlen(h->name) + 1 + strlen(h->args));
    if (n > w) w = n;
  }
  for (h = s_dots; h->name; h++) {
    char usage[64];
    snprintf(usage, sizeof usage, "%s %s", h->name, h->args);
    printf("%-*s %s\n", w, usage, h->help);
  }
  fputs(s_statement_help, stdout);
  return S_OK;
}

/* Run the dot-command on line (which starts with '.'). */
static int s_dot(ts_shell *sh, const s_source *src, char *line) {
  char *argv[S_MAX_ARGS + 1];
  const s_dotcmd *c;
  int argc, flow;

  if (sh->echo) printf("%s\n", line);
  argc = s_split(line, argv);
  if (argc < 0)
    return s_report(sh, src, src->lineno, "%s",
                    argc == -1 ? "unterminated quote" : "too many arguments");
  for (c = s_dots; c->name && strcmp(c->name, argv[0]); c++) continue;
  if (!c->name)
    return s_report(sh, src, src->lineno,
                    "unknown command: %s (enter \".help\" for a list)", argv[0]);
  if (argc - 1 < c->minargs || argc - 1 > c->maxargs)
    return s_report(sh, src, src->lineno, "usage: %s%s%s", c->name,
                    *c->args ? " " : "", c->args);
  /* An engine call here (.worker add waits for the worker) may be cut
  ** short by a Ctrl-C from now on, not by one left from the prompt. */
  te_interrupt_clear(sh->eng);
  flow = c->run(sh, src, c, argc, argv);
  fflush(stdout);
  return flow;
}

/* ---- the terminal: readline, history, completion ------------------------- */

static ts_shell *s_rl_shell; /* shell whose tensor names are completed */
static char *s_rl_line;      /* line handed over by s_rl_take() */
static int s_rl_got;         /* s_rl_take() ran (line or EOF) */
static char **s_cand;        /* completions of the word being completed */
static size_t s_ncand;       /* completions in s_cand */
static size_t s_icand;       /* completions handed to readline so far */
static size_t s_capcand;     /* room in s_cand */

/* Word separators for statements and for dot-command lines. */
static char s_breaks_stmt[] = " \t\n\"'`=;,()[]+-*/^<>:";
static char s_breaks_dot[] = " \t\n";

/* readline's line callback: take the line (NULL at EOF), stop reading. */
static void s_rl_take(char *line) {
  s_rl_line = line;
  s_rl_got = 1;
  rl_callback_handler_remove();
}

/*
** Read a line on the terminal with the prompt.  S_LINE (*out is the line,
** the caller's to free), S_EOF (Ctrl-D) or S_CANCEL (Ctrl-C).  SIGINT is
** blocked except inside ppoll(), so a Ctrl-C is never lost between the
** check of s_sigint and the wait.
*/
static int s_readline(const char *prompt, char **out) {
  struct pollfd pfd;
  sigset_t sigint, orig;
  int rc = S_LINE;

  s_sigint = 0;
  s_rl_line = NULL;
  s_rl_got = 0;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  sigprocmask(SIG_BLOCK, &sigint, &orig);
  rl_callback_handler_install(prompt, s_rl_take);
  pfd.fd = fileno(rl_instream ? rl_instream : stdin);
  pfd.events = POLLIN;
  while (!s_rl_got && !s_sigint) {
    /* Idle at the prompt: the engine restores missing replicas meanwhile. */
    struct timespec idle = {1, 0};
    int n = ppoll(&pfd, 1, &idle, &orig);
    if (n > 0) {
      rl_callback_read_char();
    } else if (n == 0 && s_rl_shell) {
      tr_err ignore;
      te_maintain(s_rl_shell->eng, S_MAINTAIN_S, &ignore);
    } else if (n < 0 && errno != EINTR) {
      break;
    }
  }
  if (!s_rl_got) { /* Ctrl-C, or the terminal failed */
    rc = s_sigint ? S_CANCEL : S_EOF;
    if (s_sigint) rl_echo_signal_char(SIGINT);
    rl_free_line_state();
    rl_callback_sigcleanup();
    rl_replace_line("", 0);
    rl_callback_handler_remove();
    s_sigint = 0;
  } else if (!s_rl_line) {
    rc = S_EOF;
  }
  if (rc != S_LINE) fputc('\n', stdout);
  sigprocmask(SIG_SETMASK, &orig, NULL);
  *out = s_rl_line;
  return rc;
}

/* History file: $TRADB_HISTORY, else $HOME/.tradb_history, else none. */
static char *s_history_path(void) {
  const char *env = getenv("TRADB_HISTORY");
  char *path = NULL;
  if (env && *env) return strdup(env);
  if ((env = getenv("HOME")) && *env &&
      asprintf(&path, "%s/.tradb_history", env) < 0)
    path = NULL;
  return path;
}

/* Add a terminal line to the history (and its file). */
static void s_remember(const char *line, const char *path) {
  HIST_ENTRY *last = history_length ? history_get(history_base + history_length - 1) : NULL;
  const char *p = line;
  while (isspace((unsigned char)*p)) p++;
  if (!*p || (last && !strcmp(last->line, line))) return;
  add_history(line);
  if (path && append_history(1, path)) write_history(path);
}

/* Add s (lowercased if lower) to the completions. */
static void s_cand_add(const char *s, int lower) {
  char *c, *q, **p;
  if (s_ncand == s_capcand) {
    size_t cap = s_capcand ? 2 * s_capcand : 64;
    if (!(p = realloc(s_cand, cap * sizeof *p))) return;
    s_cand = p;
    s_capcand = cap;
  }
  if (!(c = strdup(s))) return;
  for (q = c; lower && *q; q++) *q = (char)tolower((unsigned char)*q);
  s_cand[s_ncand++] = c;
}

/* Tensor names starting with text (case-sensitive) to the completions. */
static void s_cand_tensors(const char *text) {
  char **names = NULL;
  tr_err err;
  size_t i;
  if (te_tensor_names(s_rl_shell->eng, &names, &err)) return;
  for (i = 0; names[i]; i++)
    if (!strncmp(names[i], text, strlen(text))) s_cand_add(names[i], 0);
  te_free_names(names);
}

/* readline generator: hand over the completions one by one. */
static char *s_cand_next(const char *text, int state) {
  (void)text;
  if (!state) s_icand = 0;
  return s_icand < s_ncand ? s_cand[s_icand++] : NULL;
}

/* Word separators: dot-command lines split on blanks only (file names). */
static char *s_word_breaks(void) {
  return rl_line_buffer[0] == '.' ? s_breaks_dot : s_breaks_stmt;
}

/* Endpoints of the workers starting with text to the completions. */
static void s_cand_endpoints(const char *text) {
  te_result *res = NULL;
  tr_err err;
  int i;
  if (te_workers(s_rl_shell->eng, &res, &err)) return;
  if (res && res->kind == TE_RES_ROWS && res->ncols > 0)
    for (i = 0; i < res->nrows; i++) {
      const char *ep = s_cell(res, i, 0); /* column "endpoint" */
      if (!strncmp(ep, text, strlen(text))) s_cand_add(ep, 0);
    }
  te_result_free(&res);
}

/* Word k (0-based) of the blank-separated s into buf ("" if none). */
static void s_word(const char *s, int k, char *buf, size_t size) {
  size_t n;
  for (;;) {
    s += strspn(s, " \t");
    n = strcspn(s, " \t");
    if (!k-- || !n) break;
    s += n;
  }
  snprintf(buf, size, "%.*s", (int)n, s);
}

/* Completions of argument k (1-based) of dot-command c, as its usage word
** for that argument says: the choices a|b, FILE, [NAME] or ENDPOINT.
** Returns 0 to let readline complete file names instead. */
static int s_complete_arg(const s_dotcmd *c, int k, const char *text) {
  char spec[64], first[64];
  size_t len = strlen(text);
  const char *p;
  s_word(c->args, k - 1, spec, sizeof spec);
  if (!strcmp(spec, "FILE")) return 0;
  if (!strcmp(spec, "[NAME]")) s_cand_tensors(text);
  if (!strcmp(spec, "ENDPOINT")) {
    /* only a worker that is known can be removed; a new one is typed */
    s_word(rl_line_buffer, 1, first, sizeof first);
    if (!strcmp(first, "remove")) s_cand_endpoints(text);
  }
  if (strchr(spec, '|'))
    for (p = spec; *p; p += *p == '|') { /* the choices a|b */
      size_t n = strcspn(p, "|");
      if (n >= len && !strncmp(p, text, len)) {
        char word[64];
        snprintf(word, sizeof word, "%.*s", (int)n, p);
        s_cand_add(word, 0);
      }
      p += n;
    }
  return 1;
}

/* readline completion: dot-command names at the start of a line, their
** arguments after them, keywords and tensor names in statements. */
static char **s_complete(const char *text, int start, int end) {
  size_t len = strlen(text);
  const char *p;
  (void)end;
  s_ncand = 0;
  rl_attempted_completion_over = 1;
  if (rl_line_buffer[0] == '.') {
    size_t cmdlen = strcspn(rl_line_buffer, " \t");
    const s_dotcmd *c;
    int k = 0; /* the argument being completed: words before it */
    for (p = rl_line_buffer; p < rl_line_buffer + start; p++)
      if (!isspace((unsigned char)*p) &&
          (p == rl_line_buffer || isspace((unsigned char)p[-1])))
        k++;
    for (c = s_dots; c->name; c++) {
      if (start == 0) {
        if (!strncmp(c->name, text, len)) s_cand_add(c->name, 0);
        continue;
      }
      if (strlen(c->name) != cmdlen || strncmp(c->name, rl_line_buffer, cmdlen))
        continue;
      if (!s_complete_arg(c, k, text)) {
        rl_attempted_completion_over = 0; /* readline completes files */
        return NULL;
      }
    }
  } else {
    const char *const *kw = te_keywords();
    int lower = 0;
    for (p = text; *p && !isalpha((unsigned char)*p); p++) continue;
    lower = islower((unsigned char)*p);
    for (; kw && *kw; kw++)
      if (!strncasecmp(*kw, text, len)) s_cand_add(*kw, lower);
    s_cand_tensors(text);
  }
  return s_ncand ? rl_completion_matches(text, s_cand_next) : NULL;
}

/* ---- reading and running input ------------------------------------------ */

/* Next line of src into *line (getline-style buffer), without its end of
** line, and its length into *len (batch input may hold NUL bytes);
** `pending` picks the continuation prompt.  An S_* read status. */
static int s_next_line(const ts_shell *sh, s_source *src, char **line,
                       size_t *cap, size_t *len, int pending) {
  ssize_t n = 0;
  if (!src->in) {
    char *l;
    int rc = s_readline(pending ? "   ...> " : "tradb> ", &l);
    if (rc != S_LINE) return rc;
    free(*line);
    *line = l;
    *cap = strlen(l) + 1;
    n = (ssize_t)strlen(l);
    s_remember(l, sh->histfile);
  } else {
    for (;;) {
      if (s_sigint) return S_INTR;
      errno = 0;
      if ((n = getline(line, cap, src->in)) >= 0) break;
      if (!ferror(src->in)) return S_EOF;
      if (errno != EINTR) return S_RDERR;
      clearerr(src->in);
    }
  }
  while (n && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
    (*line)[--n] = '\0';
  *len = (size_t)n;
  src->lineno++;
  return S_LINE;
}

/* Read src to its end (or .quit, or a stop); S_OK, S_FAIL, S_STOP, S_QUIT. */
static int s_run_source(ts_shell *sh, s_source *src) {
  s_buf pend = {NULL, 0, 0}; /* pending statement text; empty or not blank */
  long start = 0;            /* input line where it starts */
  int nul = 0;               /* it holds a NUL byte */
  char *line = NULL;
  size_t cap = 0, len = 0;
  int flow = S_OK;

  for (;;) {
    int got = s_next_line(sh, src, &line, &cap, &len, pend.len > 0);
    if (got == S_EOF) break;
    if (got == S_CANCEL) { /* Ctrl-C at the prompt */
      pend.len = 0;
      start = 0;
      nul = 0;
      continue;
    }
    if (got == S_INTR) {
      s_report(sh, src, src->lineno ? src->lineno : 1, "interrupted");
      flow = S_STOP;
      goto done;
    }
    if (got == S_RDERR) {
      flow = s_report(sh, src, src->lineno + 1, "read error: %s",
                      strerror(errno));
      goto done;
    }
    /* A NUL byte is an error of its line; what holds it does not run. */
    flow = memchr(line, '\0', len) ? s_report(sh, src, src->lineno, "NUL byte in input")
                                   : S_OK;
    if (flow == S_FAIL && sh->bail)
      ; /* stop here */
    else if (!pend.len && line[0] == '.') {
      if (flow == S_OK) flow = s_dot(sh, src, line);
    } else {
      int f = s_feed(sh, src, &pend, &start, &nul, line, len);
      if (f != S_OK) flow = f;
    }
    if (flow == S_FAIL && sh->bail) flow = S_STOP;
    if (flow == S_QUIT || (flow == S_STOP && src->in)) goto done;
    flow = S_OK;
  }
  if (pend.len)
    flow = s_report(sh, src, start,
                    "incomplete statement at end of input (missing ';'?)");
done:
  free(line);
  free(pend.p);
  return flow;
}

/* ---- the interface -------------------------------------------------------- */

/* SIGINT handler: ask the running statement (or the prompt) to stop. */
static void s_on_sigint(int sig) {
  (void)sig;
  s_sigint = 1;
  te_engine *e = atomic_load(&s_sigint_engine);
  if (e) te_interrupt(e);
}

void ts_install_sigint(ts_shell *sh) {
  struct sigaction sa;
  atomic_store(&s_sigint_engine, sh->eng);
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = s_on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
}

int ts_open(const ts_options *opt, ts_shell **out, tr_err *err) {
  te_config cfg = {.dbpath = opt->dbpath,
                   .threads = opt->threads,
                   .backend = opt->backend,
                   .workers = opt->workers,
                   .local_workers = opt->local_workers,
                   .keys = opt->keys,
                   .self_exe = opt->self_exe,
                   .device = opt->device,
                   .gpu_memory = opt->gpu_memory};
  ts_shell *sh = calloc(1, sizeof *sh);
  int rc;
  *out = NULL;
  if (!sh) return tr_seterr(err, TR_ENOMEM, "out of memory");
  if ((rc = te_open(&cfg, &sh->eng, err))) {
    free(sh);
    return rc;
  }
  sh->dbpath = opt->dbpath;
  sh->bail = opt->bail;
  sh->echo = opt->echo;
  *out = sh;
  return TR_OK;
}

void ts_close(ts_shell **sh) {
  if (!sh || !*sh) return;
  atomic_store(&s_sigint_engine, NULL); /* before it goes away */
  te_close(&(*sh)->eng);
  free((*sh)->histfile);
  free(*sh);
  *sh = NULL;
}

int ts_interactive(ts_shell *sh) {
  s_source src = {NULL, NULL, 0};
  printf("tradb %s \xe2\x80\x94 enter \".help\" for usage hints.\n",
         TR_VERSION_STRING);
  if (sh->dbpath)
    printf("Database: %s\n", sh->dbpath);
  else
    printf("Connected to a transient database.\n");
  fflush(stdout);
  s_rl_shell = sh;
  rl_readline_name = "tradb";
  rl_catch_signals = 0;
  rl_attempted_completion_function = s_complete;
  rl_completion_word_break_hook = s_word_breaks;
  stifle_history(S_HISTORY_LINES);
  if ((sh->histfile = s_history_path())) read_history(sh->histfile);
  s_run_source(sh, &src);
  if (sh->histfile) history_truncate_file(sh->histfile, S_HISTORY_LINES);
  return 0;
}

int ts_batch(ts_shell *sh, FILE *in) {
  s_source src = {in, NULL, 0};
  s_run_source(sh, &src);
  return sh->nfail ? 1 : 0;
}

int ts_batch_string(ts_shell *sh, const char *text) {
  FILE *in;
  int status;
  if (!*text) return 0;
  if (!(in = fmemopen((void *)text, strlen(text), "r"))) {
    fprintf(stderr, "Error: %s\n", strerror(errno));
    return 1;
  }
  status = ts_batch(sh, in);
  fclose(in);
  return status;
}
