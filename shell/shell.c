/*
** shell/shell.c - the tradb shell: input (terminal, file, string), statement
** splitting, errors, Ctrl-C, progress, and the free heap it gives back when
** idle (s_trimmer).  Dot-commands are in dot.c, result
** printing in print.c, the terminal (readline, history, completion) in
** terminal.c.
**
** Input.  Lines are accumulated until te_statement_end() finds a complete
** statement; every complete statement is run (several may share a line, one
** may span lines).  A line starting with '.' while no statement is pending
** is a dot-command.  A NUL byte ends a line's content.  Statements that
** hold nothing but blanks and comments before their ';' are skipped.
**
** Errors.  Terminal: "Error: MSG" on stderr, and when the engine says which
** token it is about, the line holding it with a caret under it.  Batch
** input (stdin, -c): "line L:C: MSG", L and C the line and column of that
** token, or "line N: MSG", N the input line where the statement starts (its
** first character that is not a blank or in a comment) or of the
** dot-command.  Files run by .read: "FILE:L:C: MSG".  A failed statement or
** dot-command counts as a failure (batch exit status 1); with bail on,
** batch input stops at the first failure; an interrupted statement
** (Ctrl-C) always stops batch input ("line N: interrupted").  On the
** terminal neither ends the session: the rest of the line is dropped and
** the prompt comes back.  Ctrl-C at the prompt drops the line and any
** pending statement.
**
** .timer on:  after each statement "Run Time: real R user U sys S"
** (seconds, 3 decimals; real from a monotonic clock, user and sys from
** getrusage and what the workers' task replies say they spent).
**
** .progress on (the default on a terminal):  a statement running longer
** than a second shows one line on stderr, redrawn as it goes (tasks done
** of the total known, percent, elapsed, an estimate of what is left), and
** cleared when it ends; where stderr is not a terminal, a line a second.
*/
#include "config.h"
#include "shell/shell_int.h"

#define S_READ_DEPTH 16 /* .read nesting limit */

#include <ctype.h>
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The engine whose statements a Ctrl-C interrupts (te_interrupt). */
static _Atomic(te_engine *) s_sigint_engine; /* ts_install_sigint's; NULL once closed */


/* ---- small helpers --------------------------------------------------- */

/* Append n bytes of s to b; TR_OK or TR_ENOMEM. */
static int s_buf_add(si_buf *b, const char *s, size_t n) {
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

/* Seconds of a timeval. */
static double s_secs(struct timeval tv) {
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* ---- progress ------------------------------------------------------------ */

/* The engine's progress callback: the line on stderr (see the top). */
static void s_progress(void *ctx, int64_t done, int64_t total) {
  ts_shell *sh = ctx;
  double now = tr_now(), el = now - sh->run_t0;
  int tty = isatty(STDERR_FILENO);
  char left[64] = "";
  /* only for a statement (or the close's writing): the phases of idle
  ** maintenance at the prompt are none of the user's, and with no
  ** statement begun the elapsed time would count from the machine's boot */
  if (!sh->busy || !sh->progress || el < 1.0 || total <= 0 || now - sh->prog_last < (tty ? 0.1 : 1.0))
    return;
  sh->prog_last = now;
  if (done > 0 && done < total) snprintf(left, sizeof left, ", about %.0f s left", el * (double)(total - done) / (double)done);
  fprintf(stderr, "%s%lld/%lld tasks  %3d%%  %.1f s%s%s", tty ? "\r" : "", (long long)done,
          (long long)total, (int)(100 * done / total), el, left, tty ? "\033[K" : "\n");
  fflush(stderr);
}

/* A statement ended: clear its progress line. */
static void s_progress_end(ts_shell *sh) {
  if (sh->prog_last > 0 && isatty(STDERR_FILENO)) fputs("\r\033[K", stderr);
  sh->prog_last = 0;
}

/* ---- statements ---------------------------------------------------------- */

/* Where a statement's text is: the input line and column (1-based) of its
** first byte. */
typedef struct s_place {
  long line;
  long col;
} s_place;

/* Columns of text[0, n): characters, not the bytes UTF-8 continues with. */
static long s_cols(const char *text, size_t n) {
  long c = 0;
  for (size_t i = 0; i < n; i++) c += ((unsigned char)text[i] & 0xC0) != 0x80;
  return c;
}

/* Report a failed statement text[0, len) of src that starts at `at`: at
** the token err says, or at the statement's first line. */
static int s_fail(ts_shell *sh, const si_source *src, const char *text, size_t len, s_place at,
                  long first, const tr_err *err) {
  const char *msg = err->msg[0] ? err->msg : "statement failed";
  if (err->at <= 0 || (size_t)err->at > len + 1) return si_report(sh, src, first, "%s", msg);
  size_t off = (size_t)err->at - 1, bol = 0, eol;
  long line = at.line, col;
  for (size_t i = 0; i < off; i++)
    if (text[i] == '\n') {
      line++;
      bol = i + 1;
    }
  col = s_cols(text + bol, off - bol) + (bol ? 1 : at.col);
  for (eol = off; eol < len && text[eol] != '\n'; eol++) continue;
  return si_report_at(sh, src, line, col, text + bol, eol - bol, msg);
}

/* CPU seconds of this process and of the workers, user and system. */
static void s_cpu(ts_shell *sh, double *user, double *sys) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  te_worker_cpu(sh->eng, user, sys);
  *user += s_secs(ru.ru_utime);
  *sys += s_secs(ru.ru_stime);
}

/*
** The idle trimmer.  While statements run, the shell keeps as much free
** heap as a worker does (shell/main.c), so a SAVE after a SAVE reuses warm
** pages: measured, 0.17-0.21 s for each later SAVE of a 164 MB tensor,
** against 0.24-0.29 s when the shell kept only 32 MiB.  But a shell
** waiting for its user should not hold what its last SAVE or LOAD passed
** through (170 MB resident after one such SAVE and LOAD, 268 MB after a
** SAVE of 256 MB): S_IDLE_S after a statement ends with none running, a
** thread gives the free heap back to the system, beyond S_KEEP, as a
** worker does when it goes idle.  Best effort: without the thread the
** shell only keeps more memory.
*/
#define S_IDLE_S 2.0         /* idle this long before the free heap goes back */
#define S_KEEP (32 << 20)    /* free heap an idle shell may keep, bytes */

static void *s_trimmer(void *arg) {
  ts_shell *sh = arg;
  pthread_mutex_lock(&sh->trim_mu);
  while (!sh->trim_quit) {
    if (sh->busy || sh->trimmed) {
      pthread_cond_wait(&sh->trim_cv, &sh->trim_mu);
      continue;
    }
    double due = sh->idle_since + S_IDLE_S;
    if (tr_now() < due) {
      struct timespec ts;
      tr_deadline(due + 1e-3, &ts);
      pthread_cond_timedwait(&sh->trim_cv, &sh->trim_mu, &ts);
      continue;
    }
    sh->trimmed = 1;
    pthread_mutex_unlock(&sh->trim_mu);
    if (mallinfo2().fordblks > (size_t)S_KEEP) malloc_trim(S_KEEP);
    pthread_mutex_lock(&sh->trim_mu);
  }
  pthread_mutex_unlock(&sh->trim_mu);
  return NULL;
}

static void s_trimmer_start(ts_shell *sh) {
  pthread_mutex_init(&sh->trim_mu, NULL);
  tr_cond_init(&sh->trim_cv);
  sh->idle_since = tr_now();
  sh->trimmed = 1; /* nothing to give back before a statement has run */
  sh->trimming = pthread_create(&sh->trimmer, NULL, s_trimmer, sh) == 0;
}

static void s_trimmer_stop(ts_shell *sh) {
  if (sh->trimming) {
    pthread_mutex_lock(&sh->trim_mu);
    sh->trim_quit = 1;
    pthread_cond_signal(&sh->trim_cv);
    pthread_mutex_unlock(&sh->trim_mu);
    pthread_join(sh->trimmer, NULL);
  }
  pthread_cond_destroy(&sh->trim_cv);
  pthread_mutex_destroy(&sh->trim_mu);
}

/* A statement starts (busy 1) or has ended (busy 0). */
static void s_busy(ts_shell *sh, int busy) {
  pthread_mutex_lock(&sh->trim_mu);
  sh->busy = busy;
  if (!busy) {
    sh->idle_since = tr_now();
    sh->trimmed = 0;
  }
  pthread_cond_signal(&sh->trim_cv);
  pthread_mutex_unlock(&sh->trim_mu);
}

/* Other shells' words for leaving and for help (Python's exit() and
** quit(), psql's \q and \?), as their dot commands here. */
static const struct {
  const char *word, *dot;
} s_habits[] = {
    {"exit", ".quit"}, {"quit", ".quit"}, {"exit()", ".quit"}, {"quit()", ".quit"},
    {"\\q", ".quit"}, {"help", ".help"}, {"\\?", ".help"},
};

/* The dot command p[0, n) stands for, written alone (spaces and a ';'
** around it allowed), or NULL. */
static const char *s_habit(const char *p, size_t n) {
  while (n && isspace((unsigned char)*p)) p++, n--;
  while (n && (isspace((unsigned char)p[n - 1]) || p[n - 1] == ';')) n--;
  for (size_t i = 0; i < sizeof s_habits / sizeof *s_habits; i++)
    if (strlen(s_habits[i].word) == n && !strncasecmp(p, s_habits[i].word, n)) return s_habits[i].dot;
  return NULL;
}

/* Run text[0, len) (its ';' included), which starts at input line `first`
** (its first byte: at). */
static int s_exec(ts_shell *sh, const si_source *src, char *text, size_t len, long first,
                  s_place at) {
  char saved = text[len], saved_end = text[len - 1];
  te_result *res = NULL;
  double u0 = 0, s0 = 0, u1, s1;
  tr_err err;
  int rc, flow = SI_OK;
  size_t a = 0, z = len;
  const char *habit;

  text[len] = '\0'; /* the engine sees exactly the statement */
  text[len - 1] = '\0';
  rc = te_is_blank(text); /* nothing before the ';' */
  text[len - 1] = saved_end;
  if (rc) goto done;
  if (sh->echo) {
    while (a < z && isspace((unsigned char)text[a])) a++;
    while (z > a && isspace((unsigned char)text[z - 1])) z--;
    fprintf(sh->out, "%.*s\n", (int)(z - a), text + a);
  }
  tr_clearerr(&err);
  s_busy(sh, 1);
  /* From here a Ctrl-C cancels this statement: the engine's request is
  ** cleared first, so one that lands between the two is not lost. */
  te_interrupt_clear(sh->eng);
  si_sigint = 0;
  sh->run_t0 = tr_now();
  if (sh->timer) s_cpu(sh, &u0, &s0);
  te_set_print(sh->eng, sh->mode == SI_TABLE || sh->mode == SI_MARKDOWN, si_width(sh));
  rc = te_exec(sh->eng, text, len, &res, &err);
  s_progress_end(sh);
  if (rc == TR_OK) {
    si_print_result(sh, res);
    if (res) si_warn(src, first, res->notice);
  } else if (rc == TR_EINTR) {
    si_report(sh, src, first, "interrupted");
    flow = SI_STOP;
  } else if (rc == TR_ENOTFOUND && (habit = s_habit(text, len))) {
    /* `exit;` or `help;`: a statement (a tensor of that name), and none */
    flow = si_report(sh, src, first, "%s (%s%s)", err.msg, habit,
                     !strcmp(habit, ".quit") ? " or Ctrl-D leaves the shell" : " lists the statements and settings");
  } else {
    flow = s_fail(sh, src, text, len, at, first, &err);
  }
  if (sh->timer) {
    s_cpu(sh, &u1, &s1);
    fprintf(sh->out, "Run Time: real %.3f user %.3f sys %.3f\n", tr_now() - sh->run_t0, u1 - u0,
            s1 - s0);
  }
  fflush(sh->out);
  te_result_free(&res);
  si_output_done(sh);
  /* Between statements of a script there is no idle time: restoring
  ** replicas (if any are missing) gets a short slice here instead. */
  if (src->in && flow == SI_OK) te_maintain(sh->eng, SI_MAINTAIN_S, &err);
  s_busy(sh, 0);
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

/* The text read but not yet run. */
typedef struct s_pending {
  si_buf buf;   /* pending statement text; empty or not blank */
  long start;   /* input line where the statement starts (0: none) */
  int nul;      /* it holds a NUL byte */
  s_place at;   /* where buf.p[0] is in the input */
} s_pending;

/* Move pl past text[0, n). */
static void s_advance(s_place *pl, const char *text, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (text[i] == '\n') {
      pl->line++;
      pl->col = 1;
    } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
      pl->col++;
    }
}

/* Add line[0, len) to the pending text and run every statement it
** completes.  A statement with a NUL byte is dropped, not run (the caller
** reported the line): C strings end there, so what runs would not be what
** the input says. */
static int s_feed(ts_shell *sh, const si_source *src, s_pending *pd, const char *line,
                  size_t len) {
  si_buf *pend = &pd->buf;
  size_t n;
  long at = (long)pend->len; /* where line starts in pend->p */
  int flow = SI_OK;

  if (!pend->len) pd->at = (s_place){src->lineno, 1};
  if (s_buf_add(pend, line, len) || s_buf_add(pend, "\n", 1)) {
    pend->len = 0;
    pd->start = 0;
    pd->nul = 0;
    return si_report(sh, src, src->lineno, "out of memory");
  }
  for (char *z = pend->p + at; (z = memchr(z, '\0', pend->len - (size_t)(z - pend->p)));)
    *z = ' '; /* keeps the statements around it whole */
  if (!pd->start && !te_is_blank(pend->p)) pd->start = src->lineno;
  while (pd->start && (n = te_statement_end(pend->p)) > 0) {
    int held = pd->nul || s_has_nul(line, len, -at, (long)n - at);
    int f = held ? SI_OK : s_exec(sh, src, pend->p, n, pd->start, pd->at);
    s_advance(&pd->at, pend->p, n);
    memmove(pend->p, pend->p + n, pend->len - n + 1);
    pend->len -= n;
    at -= (long)n;
    pd->nul = 0;
    pd->start = te_is_blank(pend->p) ? 0 : src->lineno;
    if (f == SI_FAIL && sh->bail) f = SI_STOP;
    if (f == SI_STOP) { /* the rest of the line is dropped */
      pd->start = 0;
      flow = SI_STOP;
      break;
    }
    if (f == SI_FAIL) flow = SI_FAIL;
  }
  if (!pd->start) pend->len = 0; /* only blanks and comments left */
  pd->nul = pd->start && (pd->nul || s_has_nul(line, len, -at, (long)len));
  return flow;
}

/* ---- reading and running input ------------------------------------------ */

/* Next line of src into *line (getline-style buffer), without its end of
** line, and its length into *len (batch input may hold NUL bytes);
** `pending`, the text read before it, picks the prompt: the continuation
** prompt, which inside a string says so (a quote never closed otherwise
** takes every statement typed after it, silently).  An S_* read status. */
static int s_next_line(si_source *src, char **line, size_t *cap, size_t *len, const si_buf *pending) {
  ssize_t n = 0;
  if (!src->in) {
    char *l;
    const char *prompt = !pending->len                     ? "tradb> "
                         : te_open_quote(pending->p) >= 0 ? "  '...> "
                                                          : "   ...> ";
    int rc = si_readline(prompt, &l);
    if (rc != SI_LINE) return rc;
    free(*line);
    *line = l;
    *cap = strlen(l) + 1;
    n = (ssize_t)strlen(l);
  } else {
    for (;;) {
      if (si_sigint) return SI_INTR;
      errno = 0;
      if ((n = getline(line, cap, src->in)) >= 0) break;
      if (!ferror(src->in)) return SI_EOF;
      if (errno != EINTR) return SI_RDERR;
      clearerr(src->in);
    }
  }
  while (n && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
    (*line)[--n] = '\0';
  *len = (size_t)n;
  src->lineno++;
  return SI_LINE;
}

/* Run the statements in the file at path (.read), nested in src. */
static int s_read_file(ts_shell *sh, const si_source *src, const char *path) {
  si_source sub = {NULL, path, 0};
  int flow;
  if (sh->depth >= S_READ_DEPTH)
    return si_report(sh, src, src->lineno, ".read: files nested too deeply (limit %d)", S_READ_DEPTH);
  if (!(sub.in = fopen(path, "r")))
    return si_report(sh, src, src->lineno, "cannot open '%s': %s", path, strerror(errno));
  sh->depth++;
  flow = si_run_source(sh, &sub);
  sh->depth--;
  fclose(sub.in);
  return flow;
}

/* On the terminal, a statement's lines go to the history as one entry once
** it is complete (and a dot-command alone). */
static void s_history(ts_shell *sh, const si_source *src, si_buf *hist, const char *line,
                      size_t len, int complete) {
  if (src->in) return;
  if (hist->len && s_buf_add(hist, "\n", 1)) hist->len = 0;
  if (s_buf_add(hist, line, len)) hist->len = 0;
  if (complete && hist->len) {
    si_remember(hist->p, sh->histfile);
    hist->len = 0;
  }
}

/* Whether reading src's next line may wait: a prompt, or input that has
** none ready (a pipe whose writer is slow).  A buffered or regular file
** never waits. */
static int s_input_waits(const si_source *src) {
  if (!src->in) return 1;
  if (src->in->_IO_read_ptr < src->in->_IO_read_end) return 0; /* in stdio's buffer */
  struct pollfd p = {fileno(src->in), POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

/* Read src to its end (or .quit, or a stop); SI_OK, SI_FAIL, SI_STOP, SI_QUIT. */
int si_run_source(ts_shell *sh, si_source *src) {
  s_pending pd = {{NULL, 0, 0}, 0, 0, {0, 1}}; /* text read, not yet run */
  si_buf hist = {NULL, 0, 0};                   /* the lines of a statement */
  char *line = NULL;
  size_t cap = 0, len = 0;
  int flow = SI_OK;

  for (;;) {
    /* what ran is made durable before a wait of unknown length */
    if (s_input_waits(src)) te_sync(sh->eng);
    int got = s_next_line(src, &line, &cap, &len, &pd.buf);
    if (got == SI_EOF) break;
    if (got == SI_CANCEL) { /* Ctrl-C at the prompt */
      pd.buf.len = hist.len = 0;
      pd.start = 0;
      pd.nul = 0;
      continue;
    }
    if (got == SI_INTR) {
      si_report(sh, src, src->lineno ? src->lineno : 1, "interrupted");
      flow = SI_STOP;
      goto done;
    }
    if (got == SI_RDERR) {
      flow = si_report(sh, src, src->lineno + 1, "read error: %s",
                      strerror(errno));
      goto done;
    }
    /* A NUL byte is an error of its line; what holds it does not run. */
    flow = memchr(line, '\0', len) ? si_report(sh, src, src->lineno, "NUL byte in input")
                                   : SI_OK;
    /* exit, help and the like alone on a line, not begun a statement */
    const char *habit = pd.buf.len || line[0] == '.' || memchr(line, ';', len) ? NULL : s_habit(line, len);
    if (flow == SI_FAIL && sh->bail)
      ; /* stop here */
    else if (!pd.buf.len && (line[0] == '.' || habit)) {
      char dot[16]; /* si_dot cuts its line in words where it is */
      if (habit) snprintf(dot, sizeof dot, "%s", habit);
      s_history(sh, src, &hist, line, len, 1);
      if (flow == SI_OK) flow = si_dot(sh, src, habit ? dot : line);
      if (flow == SI_READ) flow = s_read_file(sh, src, sh->read_path);
    } else {
      int f = s_feed(sh, src, &pd, line, len);
      s_history(sh, src, &hist, line, len, !pd.buf.len);
      if (f != SI_OK) flow = f;
    }
    if (flow == SI_FAIL && sh->bail) flow = SI_STOP;
    if (flow == SI_QUIT || (flow == SI_STOP && src->in)) goto done;
    flow = SI_OK;
  }
  if (pd.buf.len) {
    long q = te_open_quote(pd.buf.p);
    if (q >= 0) { /* at the quote: what follows it was read as the string */
      tr_err err;
      tr_at(&err, (int)q + 1,
            tr_seterr(&err, TR_ESYNTAX,
                      "unterminated string: this quote is never closed (a quote inside a string is written '')"));
      flow = s_fail(sh, src, pd.buf.p, pd.buf.len, pd.at, pd.start, &err);
    } else {
      flow = si_report(sh, src, pd.start, "incomplete statement at end of input (missing ';'?)");
    }
  }
done:
  free(line);
  free(pd.buf.p);
  free(hist.p);
  return flow;
}

/* ---- the interface -------------------------------------------------------- */

/* SIGINT handler: ask the running statement (or the prompt) to stop. */
static void s_on_sigint(int sig) {
  (void)sig;
  si_sigint = 1;
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
  sh->out = stdout;
  te_set_progress(sh->eng, s_progress, sh);
  s_trimmer_start(sh);
  *out = sh;
  return TR_OK;
}

/* The end of a session: what the local workers hold in memory only is
** written before they stop.  When a worker answers that it cannot (a disk
** full since the chunks were held: workers sharing a disk each count only
** their own, and other programs write too), what it cannot write is lost
** with it: at a terminal (ask) the user may free room and try again as
** often as needed; in batch the warning says it is lost, and the session
** fails (sh->held -1).  A worker that does not answer (stopped, or gone)
** is only warned of: one stopped writes what it holds when it runs again
** and is told to stop. */
static void s_write_held(ts_shell *sh, int ask) {
  tr_err err;
  int refused;
  if (sh->held || !sh->eng) return;
  sh->held = 1;
  te_interrupt_clear(sh->eng); /* a Ctrl-C that cancelled the last statement */
  while (te_write_held(sh->eng, &refused, &err)) {
    si_source none = {NULL, NULL, 0};
    char why[sizeof err.msg + 160];
    snprintf(why, sizeof why, "the local workers did not write all they hold in memory only: %s%s", err.msg,
             refused && !ask ? "\nwhat they could not write is lost" : "");
    si_warn(&none, 0, why);
    if (!refused) return;
    sh->held = -1;
    if (!ask) return;
    fputs("Free room and press Enter to try again, or type 'quit' to exit and lose what is not "
          "written: ", stderr);
    fflush(stderr);
    char line[64];
    /* Ctrl-D or Ctrl-C (no SA_RESTART: fgets returns) quits too */
    if (!fgets(line, sizeof line, stdin) || !strncmp(line, "quit", 4)) {
      if (feof(stdin) || ferror(stdin)) fputc('\n', stderr);
      return;
    }
    te_interrupt_clear(sh->eng);
    sh->held = 1;
  }
}

int ts_close(ts_shell **sh) {
  if (!sh || !*sh) return 0;
  s_trimmer_stop(*sh);
  /* the close's repair and writing report progress as a statement does */
  (*sh)->busy = 1;
  (*sh)->run_t0 = tr_now();
  if ((*sh)->out != stdout) fclose((*sh)->out);
  /* Replicas still missing are made before the session ends: a script's
  ** statements give that work a short slice each, so a session of a
  ** statement or two after a worker came back would leave chunks with
  ** fewer copies than the setting until some later session.  Within
  ** SI_CLOSE_REPAIR_S; Ctrl-C leaves the rest to the next session. */
  tr_err err;
  /* A Ctrl-C that cancelled the last statement is not one for the close:
  ** left standing it cut both steps short ("did not write all they hold
  ** in memory only: interrupted" after every interrupted statement) */
  if ((*sh)->eng) te_interrupt_clear((*sh)->eng);
  if ((*sh)->eng) te_maintain((*sh)->eng, SI_CLOSE_REPAIR_S, &err);
  /* (the engine's close would wait without Ctrl-C) */
  s_write_held(*sh, 0);
  int lost = (*sh)->held < 0;
  s_progress_end(*sh);
  atomic_store(&s_sigint_engine, NULL); /* before it goes away */
  te_close(&(*sh)->eng);
  free((*sh)->histfile);
  free(*sh);
  *sh = NULL;
  return lost;
}

int ts_interactive(ts_shell *sh) {
  si_source src = {NULL, NULL, 0};
  printf("tradb %s \xe2\x80\x94 enter \".help\" for usage hints.\n",
         TR_VERSION_STRING);
  if (sh->dbpath)
    printf("Database: %s\n", sh->dbpath);
  else
    printf("Connected to a transient database.\n");
  fflush(stdout);
  sh->progress = isatty(STDERR_FILENO);
  si_terminal_open(sh);
  si_run_source(sh, &src);
  si_terminal_close(sh);
  s_write_held(sh, 1);
  return 0;
}

int ts_batch(ts_shell *sh, FILE *in) {
  si_source src = {in, NULL, 0};
  si_run_source(sh, &src);
  return sh->nfail ? 1 : 0;
}

/* Whether text ends in a statement without its ';' (after the complete
** ones, something not blank that is not a dot-command line). */
static int s_lacks_semicolon(const char *text) {
  size_t n;
  const char *last;
  while ((n = te_statement_end(text)) > 0) text += n;
  if (te_is_blank(text)) return 0;
  for (last = text + strlen(text); last > text && isspace((unsigned char)last[-1]); last--) continue;
  while (last > text && last[-1] != '\n') last--;
  while (*last == ' ' || *last == '\t') last++;
  return *last != '.';
}

int ts_batch_string(ts_shell *sh, const char *text) {
  FILE *in;
  char *copy = NULL;
  int status;
  if (!*text) return 0;
  /* -c 'PRINT A' runs like -c 'PRINT A;', as sqlite3 -cmd does */
  if (s_lacks_semicolon(text) && asprintf(&copy, "%s\n;", text) > 0) text = copy;
  if (!(in = fmemopen((void *)text, strlen(text), "r"))) {
    fprintf(stderr, "Error: %s\n", strerror(errno));
    free(copy);
    return 1;
  }
  status = ts_batch(sh, in);
  fclose(in);
  free(copy);
  return status;
}
