/*
** shell/dot.c - dot-commands: the table (name, arguments, help, handler) and
** the handlers.
*/
#include "config.h"
#include "shell/shell_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_ARGS 8    /* words in a dot-command */

/* ---- dot-commands -------------------------------------------------------- */


static si_dotfn s_dot_bail, s_dot_echo, s_dot_quit, s_dot_help, s_dot_mode, s_dot_once,
    s_dot_output, s_dot_progress, s_dot_read, s_dot_schema, s_dot_show, s_dot_tables, s_dot_timer,
    s_dot_worker, s_dot_workers;

const si_dotcmd si_dots[] = {
    {".bail", "on|off", 1, 1, "stop batch input at the first error", s_dot_bail},
    {".echo", "on|off", 1, 1, "print each statement before running it", s_dot_echo},
    {".exit", "", 0, 0, "leave the shell (also Ctrl-D, or exit or quit alone)", s_dot_quit},
    {".help", "", 0, 0, "show this message", s_dot_help},
    {".mode", "table|csv|json|markdown", 0, 1, "how results are printed", s_dot_mode},
    {".once", "FILE", 1, 1, "send the next statement's results to FILE", s_dot_once},
    {".output", "[FILE]", 0, 1, "send results to FILE (no FILE: back to the screen)",
     s_dot_output},
    {".progress", "on|off", 1, 1, "show the progress of statements that run over a second",
     s_dot_progress},
    {".quit", "", 0, 0, "leave the shell (also Ctrl-D, or exit or quit alone)", s_dot_quit},
    {".read", "FILE", 1, 1, "run the statements in FILE", s_dot_read},
    {".schema", "[NAME]", 0, 1, "CREATE TENSOR statements of all tensors or NAME",
     s_dot_schema},
    {".show", "", 0, 0, "show every setting: the shell's and the database's", s_dot_show},
    {".tables", "", 0, 0, "list the tensors", s_dot_tables},
    {".timer", "on|off", 1, 1, "print the run time of each statement (workers' CPU included)",
     s_dot_timer},
    {".worker", "add|remove ENDPOINT", 2, 2,
     "record and connect a worker, or forget it", s_dot_worker},
    {".workers", "", 0, 0, "list the workers, their state and counters", s_dot_workers},
    {NULL, NULL, 0, 0, NULL, NULL}};

/* The modes of .mode, as si_mode numbers them. */
static const char *const s_modes[] = {"table", "csv", "json", "markdown"};

static const char s_statement_help[] =
    "\n"
    "Statements end with ';' and may span lines; '--' starts a comment.\n"
    "  CREATE TENSOR A[1000, 1000] [CHUNK [250, 250]] [TYPE f32|f64];\n"
    "  LOAD A FROM 'a.npy' [CHUNK [..]] [TYPE f32|f64];   (bool, int, float16 and big-endian .npy converted)\n"
    "  LOAD A FROM 'a.csv' [(HEADER [false], DELIMITER ';', NULL nan)] [CHUNK [..]] [TYPE ..];\n"
    "  SAVE A TO 'a.npy';   SAVE A[0:5, :] TO 'a.csv';\n"
    "  FILL A ZEROS|ONES|IDENTITY|UNIFORM(lo, hi)|NORMAL(mu, sd)|PERMUTATION [SEED n];\n"
    "  C[i, j] = A[i, k] * B[k, j];           (an implicit SUM only around a product)\n"
    "  H[n, h] = relu(SUM(X[n, d] * W[d, h]));\n"
    "  acc[] = MEAN(ARGMAX(P[n, l]) == ARGMAX(Y[n, l]));\n"
    "  R = X[3:10, 2:5];   PRINT A;   PRINT A[-1, 0:3];   (a copy; ranges lo:hi, -1 the last)\n"
    "  A;   A[0:5, :];                        (a name alone shows it, as PRINT)\n"
    "  SHOW TENSORS;   SHOW SETTINGS;   DESCRIBE A;   DROP TENSOR [IF EXISTS] A;\n"
    "  SET name = value;   CALIBRATE;         (fit the optimizer's cost weights to the workers)\n"
    "  EXPLAIN [ANALYZE] [(FORMAT TEXT|JSON|DOT|TRACE, PLAN 'name')] C[i, j] = ...;\n"
    "  BEGIN; ...assignments...; COMMIT;   (or ROLLBACK; EXPLAIN [ANALYZE] COMMIT)\n";

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
static int s_set_flag(ts_shell *sh, const si_source *src, const si_dotcmd *c, const char *arg,
                      int *flag) {
  if (s_parse_bool(arg, flag))
    return si_report(sh, src, src->lineno, "%s: expected on or off, not '%s'", c->name, arg);
  return SI_OK;
}

static int s_dot_bail(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  return s_set_flag(sh, src, c, argv[1], &sh->bail);
}

static int s_dot_echo(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  return s_set_flag(sh, src, c, argv[1], &sh->echo);
}

static int s_dot_timer(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                       char **argv) {
  return s_set_flag(sh, src, c, argv[1], &sh->timer);
}

/* .quit and .exit */
static int s_dot_quit(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  return SI_QUIT;
}

/* .mode [table|csv|json|markdown] */
static int s_dot_mode(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  if (argc == 1) {
    fprintf(sh->out, "current output mode: %s\n", s_modes[sh->mode]);
    return SI_OK;
  }
  for (size_t i = 0; i < sizeof s_modes / sizeof s_modes[0]; i++)
    if (!strcmp(argv[1], s_modes[i])) {
      sh->mode = (si_mode)i;
      return SI_OK;
    }
  return si_report(sh, src, src->lineno, ".mode: unknown mode '%s' (table, csv, json or markdown)",
                   argv[1]);
}

/* Send results to path from now on (once: for the next statement or
** dot-command only); NULL: to stdout. */
static int s_redirect(ts_shell *sh, const si_source *src, const char *path, int once) {
  FILE *f = stdout;
  tr_err err;
  /* fopen "w" cuts the file: never a database's */
  if (path && te_check_output_path(sh->eng, path, &err))
    return si_report(sh, src, src->lineno, "%s: %s", once ? ".once" : ".output", err.msg);
  if (path && !(f = fopen(path, "w")))
    return si_report(sh, src, src->lineno, "cannot write '%s': %s", path, strerror(errno));
  fflush(sh->out);
  if (sh->out != stdout) fclose(sh->out);
  sh->out = f;
  sh->once = once && path;
  return SI_OK;
}

/* .output [FILE] */
static int s_dot_output(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                        char **argv) {
  return s_redirect(sh, src, argc > 1 ? argv[1] : NULL, 0);
}

/* .once FILE */
static int s_dot_once(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  return s_redirect(sh, src, argv[1], 1);
}

/* .progress on|off */
static int s_dot_progress(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                          char **argv) {
  return s_set_flag(sh, src, c, argv[1], &sh->progress);
}

/* .show: the shell's settings, then the database's (SHOW SETTINGS). */
static int s_dot_show(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  const char *name, *help;
  char allowed[128], dflt[32], value[32];
  FILE *f = sh->out;
  int w = 12; /* the names right-aligned to the longest ("scheduler_lp_seconds") */
  for (int i = 0; te_settings_list(i, &name, &help, allowed, sizeof allowed, dflt, sizeof dflt); i++)
    if ((int)strlen(name) > w) w = (int)strlen(name);
  fprintf(f, "%*s: %s\n", w, "mode", s_modes[sh->mode]);
  fprintf(f, "%*s: %s\n", w, "timer", sh->timer ? "on" : "off");
  fprintf(f, "%*s: %s\n", w, "bail", sh->bail ? "on" : "off");
  fprintf(f, "%*s: %s\n", w, "echo", sh->echo ? "on" : "off");
  fprintf(f, "%*s: %s\n", w, "progress", sh->progress ? "on" : "off");
  fprintf(f, "%*s: %s\n", w, "output", sh->out == stdout ? "stdout" : sh->once ? "file (once)" : "file");
  fprintf(f, "%*s: %s\n", w, "database", sh->dbpath ? sh->dbpath : "(transient)");
  fprintf(f, "%*s: %s\n", w, "backend", te_backend_name(sh->eng));
  for (int i = 0; te_settings_list(i, &name, &help, allowed, sizeof allowed, dflt, sizeof dflt); i++) {
    te_setting_text(sh->eng, name, value, sizeof value);
    fprintf(f, "%*s: %s\n", w, name, value);
  }
  return SI_OK;
}

/* .read FILE */
static int s_dot_read(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  sh->read_path = argv[1]; /* shell.c runs it: it is what reads input */
  return SI_READ;
}

/* .tables */
static int s_dot_tables(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                        char **argv) {
  char **names = NULL;
  tr_err err;
  size_t i;
  if (te_tensor_names(sh->eng, &names, &err))
    return si_report(sh, src, src->lineno, "%s", err.msg);
  for (i = 0; names[i]; i++) fprintf(sh->out, "%s%s", i ? " " : "", names[i]);
  if (i) fputc('\n', sh->out);
  te_free_names(names);
  return SI_OK;
}

/* .schema [NAME] */
static int s_dot_schema(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                        char **argv) {
  char *text = NULL;
  tr_err err;
  size_t n;
  if (te_schema(sh->eng, argc > 1 ? argv[1] : NULL, &text, &err))
    return si_report(sh, src, src->lineno, "%s", err.msg);
  n = text ? strlen(text) : 0;
  if (n) fputs(text, sh->out);
  if (n && text[n - 1] != '\n') fputc('\n', sh->out);
  free(text);
  return SI_OK;
}

/* .workers */
static int s_dot_workers(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                         char **argv) {
  te_result *res = NULL;
  tr_err err;
  if (te_workers(sh->eng, &res, &err))
    return si_report(sh, src, src->lineno, "%s", err.msg);
  si_print_result(sh, res);
  te_result_free(&res);
  return SI_OK;
}

/* .worker add|remove ENDPOINT */
static int s_dot_worker(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                        char **argv) {
  te_result *res = NULL;
  tr_err err;
  int rc;
  if (!strcmp(argv[1], "add"))
    rc = te_worker_add(sh->eng, argv[2], &res, &err);
  else if (!strcmp(argv[1], "remove"))
    rc = te_worker_remove(sh->eng, argv[2], &res, &err);
  else
    return si_report(sh, src, src->lineno, "usage: %s %s", c->name, c->args);
  if (rc) return si_report(sh, src, src->lineno, "%s", err.msg);
  if (res) si_warn(src, src->lineno, res->notice);
  te_result_free(&res);
  return SI_OK;
}

/* Print words, a NULL-terminated list, after title, wrapped at 78. */
static void s_help_words(FILE *f, const char *title, const char *const *words, const char *sep) {
  size_t col = (size_t)fprintf(f, "%s", title);
  for (const char *const *w = words; *w; w++) {
    size_t n = strlen(*w) + (w[1] ? strlen(sep) : 0);
    if (col + n > 78) col = (size_t)fprintf(f, "\n    ");
    col += (size_t)fprintf(f, "%s%s", *w, w[1] ? sep : "");
  }
  fputc('\n', f);
}

/* .help: the dot-commands, their usage aligned, then the statements, the
** functions, aggregations and options of the language, and the settings
** (the lists from the engine, so they cannot fall behind it). */
static int s_dot_help(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  const si_dotcmd *h;
  FILE *f = sh->out;
  const char *name, *help;
  char allowed[128], dflt[32];
  int w = 0;
  for (h = si_dots; h->name; h++) {
    int n = (int)(strlen(h->name) + 1 + strlen(h->args));
    if (n > w) w = n;
  }
  for (h = si_dots; h->name; h++) {
    char usage[64];
    snprintf(usage, sizeof usage, "%s %s", h->name, h->args);
    fprintf(f, "%-*s %s\n", w, usage, h->help);
  }
  fputs(s_statement_help, f);
  s_help_words(f, "Functions: ", te_words(TE_WORDS_FUNCTIONS), ", ");
  fputs("  where(c, a, b) is a where c is not 0, else b; step(x) is 1 where x > 0, else 0\n", f);
  fputs("Operators: + - * / ^ and the comparisons < <= > >= == != (1 or 0)\n", f);
  s_help_words(f, "Aggregations: ", te_words(TE_WORDS_AGGREGATES), ", ");
  fputs("  ARGMAX and ARGMIN aggregate one label and give the index of the first largest\n"
        "  (smallest) value; inside another aggregation they take the last label\n",
        f);
  s_help_words(f, "EXPLAIN options: ", te_words(TE_WORDS_EXPLAIN), ", ");
  s_help_words(f, "LOAD options (CSV): ", te_words(TE_WORDS_LOAD), ", ");
  fputs("Settings (SET name = value; SHOW SETTINGS):\n", f);
  for (int i = 0; te_settings_list(i, &name, &help, allowed, sizeof allowed, dflt, sizeof dflt); i++)
    fprintf(f, "  %-12s %s, default %s: %s\n", name, allowed, dflt, help);
  fputs("Ctrl-C cancels the running statement.\n", f);
  return SI_OK;
}

/* Run the dot-command on line (which starts with '.'). */
int si_dot(ts_shell *sh, const si_source *src, char *line) {
  char *argv[S_MAX_ARGS + 1];
  const si_dotcmd *c;
  int argc, flow;

  if (sh->echo) fprintf(sh->out, "%s\n", line);
  argc = s_split(line, argv);
  if (argc < 0)
    return si_report(sh, src, src->lineno, "%s",
                    argc == -1 ? "unterminated quote" : "too many arguments");
  for (c = si_dots; c->name && strcmp(c->name, argv[0]); c++) continue;
  if (!c->name) {
    const char *names[64];
    int n = 0, k;
    for (c = si_dots; c->name && n < 64; c++) names[n++] = c->name;
    if ((k = tr_closest(argv[0], names, n)) >= 0)
      return si_report(sh, src, src->lineno, "unknown command: %s (did you mean %s?)", argv[0],
                       names[k]);
    return si_report(sh, src, src->lineno,
                    "unknown command: %s (enter \".help\" for a list)", argv[0]);
  }
  if (argc - 1 < c->minargs || argc - 1 > c->maxargs)
    return si_report(sh, src, src->lineno, "usage: %s%s%s", c->name,
                    *c->args ? " " : "", c->args);
  /* An engine call here (.worker add waits for the worker) may be cut
  ** short by a Ctrl-C from now on, not by one left from the prompt. */
  te_interrupt_clear(sh->eng);
  flow = c->run(sh, src, c, argc, argv);
  fflush(sh->out);
  if (c->run != s_dot_once) si_output_done(sh);
  return flow;
}
