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


static si_dotfn s_dot_bail, s_dot_echo, s_dot_quit, s_dot_help, s_dot_mode, s_dot_read,
    s_dot_schema, s_dot_show, s_dot_tables, s_dot_timer, s_dot_worker, s_dot_workers;

const si_dotcmd si_dots[] = {
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

/* .mode [table|csv] */
static int s_dot_mode(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  if (argc == 1)
    printf("current output mode: %s\n", sh->csv ? "csv" : "table");
  else if (!strcmp(argv[1], "table") || !strcmp(argv[1], "csv"))
    sh->csv = !strcmp(argv[1], "csv");
  else
    return si_report(sh, src, src->lineno, ".mode: unknown mode '%s' (table or csv)", argv[1]);
  return SI_OK;
}

/* .show */
static int s_dot_show(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  printf("%8s: %s\n", "mode", sh->csv ? "csv" : "table");
  printf("%8s: %s\n", "timer", sh->timer ? "on" : "off");
  printf("%8s: %s\n", "bail", sh->bail ? "on" : "off");
  printf("%8s: %s\n", "echo", sh->echo ? "on" : "off");
  printf("%8s: %s\n", "database", sh->dbpath ? sh->dbpath : "(transient)");
  printf("%8s: %s\n", "backend", te_backend_name(sh->eng));
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
  for (i = 0; names[i]; i++) printf("%s%s", i ? " " : "", names[i]);
  if (i) fputc('\n', stdout);
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
  if (n) fputs(text, stdout);
  if (n && text[n - 1] != '\n') fputc('\n', stdout);
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

/* .help: the dot-commands, their usage aligned, then the statements. */
static int s_dot_help(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                      char **argv) {
  const si_dotcmd *h;
  int w = 0;
  for (h = si_dots; h->name; h++) {
    int n = (int)(strlen(h->name) + 1 + strlen(h->args));
    if (n > w) w = n;
  }
  for (h = si_dots; h->name; h++) {
    char usage[64];
    snprintf(usage, sizeof usage, "%s %s", h->name, h->args);
    printf("%-*s %s\n", w, usage, h->help);
  }
  fputs(s_statement_help, stdout);
  return SI_OK;
}

/* Run the dot-command on line (which starts with '.'). */
int si_dot(ts_shell *sh, const si_source *src, char *line) {
  char *argv[S_MAX_ARGS + 1];
  const si_dotcmd *c;
  int argc, flow;

  if (sh->echo) printf("%s\n", line);
  argc = s_split(line, argv);
  if (argc < 0)
    return si_report(sh, src, src->lineno, "%s",
                    argc == -1 ? "unterminated quote" : "too many arguments");
  for (c = si_dots; c->name && strcmp(c->name, argv[0]); c++) continue;
  if (!c->name)
    return si_report(sh, src, src->lineno,
                    "unknown command: %s (enter \".help\" for a list)", argv[0]);
  if (argc - 1 < c->minargs || argc - 1 > c->maxargs)
    return si_report(sh, src, src->lineno, "usage: %s%s%s", c->name,
                    *c->args ? " " : "", c->args);
  /* An engine call here (.worker add waits for the worker) may be cut
  ** short by a Ctrl-C from now on, not by one left from the prompt. */
  te_interrupt_clear(sh->eng);
  flow = c->run(sh, src, c, argc, argv);
  fflush(stdout);
  return flow;
}
