/*
** shell/terminal.c - the terminal: readline with a prompt that polls Ctrl-C and
** idle repair, history (a statement of several lines is one entry),
** completion of keywords, tensor names, file names, dot-commands and their
** arguments, by what comes before the word.
*/
#include "config.h"
#include "shell/shell_int.h"

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

#define S_HISTORY_LINES 1000 /* lines kept in the history file */

/* ---- the terminal: readline, history, completion ------------------------- */

volatile sig_atomic_t si_sigint; /* shell_int.h */

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
** Read a line on the terminal with the prompt.  SI_LINE (*out is the line,
** the caller's to free), SI_EOF (Ctrl-D) or SI_CANCEL (Ctrl-C).  SIGINT is
** blocked except inside ppoll(), so a Ctrl-C is never lost between the
** check of si_sigint and the wait.
*/
int si_readline(const char *prompt, char **out) {
  struct pollfd pfd;
  sigset_t sigint, orig;
  int rc = SI_LINE;

  si_sigint = 0;
  s_rl_line = NULL;
  s_rl_got = 0;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  sigprocmask(SIG_BLOCK, &sigint, &orig);
  rl_callback_handler_install(prompt, s_rl_take);
  pfd.fd = fileno(rl_instream ? rl_instream : stdin);
  pfd.events = POLLIN;
  while (!s_rl_got && !si_sigint) {
    /* Idle at the prompt: the engine restores missing replicas meanwhile. */
    struct timespec idle = {1, 0};
    int n = ppoll(&pfd, 1, &idle, &orig);
    if (n > 0) {
      rl_callback_read_char();
    } else if (n == 0 && s_rl_shell) {
      tr_err ignore;
      te_maintain(s_rl_shell->eng, SI_MAINTAIN_S, &ignore);
    } else if (n < 0 && errno != EINTR) {
      break;
    }
  }
  if (!s_rl_got) { /* Ctrl-C, or the terminal failed */
    rc = si_sigint ? SI_CANCEL : SI_EOF;
    if (si_sigint) rl_echo_signal_char(SIGINT);
    rl_free_line_state();
    rl_callback_sigcleanup();
    rl_replace_line("", 0);
    rl_callback_handler_remove();
    si_sigint = 0;
  } else if (!s_rl_line) {
    rc = SI_EOF;
  }
  if (rc != SI_LINE) fputc('\n', stdout);
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

/* Add an entry to the history (and its file): a statement of several
** lines stays one entry, its lines kept (a '--' comment ends at its line),
** which the file keeps apart with timestamps (history_multiline_entries). */
void si_remember(const char *entry, const char *path) {
  HIST_ENTRY *last = history_length ? history_get(history_base + history_length - 1) : NULL;
  const char *p = entry;
  while (isspace((unsigned char)*p)) p++;
  if (!*p || (last && !strcmp(last->line, entry))) return;
  add_history(entry);
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
      const char *ep = si_cell(res, i, 0); /* column "endpoint" */
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
static int s_complete_arg(const si_dotcmd *c, int k, const char *text) {
  char spec[64], first[64];
  size_t len = strlen(text);
  const char *p;
  s_word(c->args, k - 1, spec, sizeof spec);
  if (!strcmp(spec, "FILE") || !strcmp(spec, "[FILE]")) return 0;
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

/* The word before position `at` of the line (upper-cased into buf, "" if
** none); *quoted says whether `at` is inside a '...' string. */
static void s_prev_word(int at, char *buf, size_t size, int *quoted, char *before, size_t bsize) {
  const char *l = rl_line_buffer;
  int q = 0, i, e;
  for (i = 0; i < at; i++) q ^= l[i] == '\'';
  *quoted = q;
  buf[0] = before[0] = '\0';
  for (int k = 0; k < 2; k++) {
    char *dst = k ? before : buf;
    size_t cap = k ? bsize : size;
    e = at;
    while (e > 0 && (isspace((unsigned char)l[e - 1]) || l[e - 1] == '\'')) e--;
    for (i = e; i > 0 && (isalnum((unsigned char)l[i - 1]) || l[i - 1] == '_'); i--) continue;
    snprintf(dst, cap, "%.*s", e - i, l + i);
    for (char *c = dst; *c; c++) *c = (char)toupper((unsigned char)*c);
    at = i;
  }
}

/* Completions by what comes before the word: file names after FROM and TO
** (in quotes: readline's, closing the quote), tensor names after the
** words that name one, TENSOR after DROP.  Returns 0 when the context says
** nothing (keywords and tensor names then). */
static int s_complete_context(const char *text, int start) {
  char prev[32], before[32];
  int quoted;
  s_prev_word(start, prev, sizeof prev, &quoted, before, sizeof before);
  if (quoted || !strcmp(prev, "FROM") || !strcmp(prev, "TO")) {
    char *f;
    for (int st = 0; (f = rl_filename_completion_function(text, st)); st++) {
      char q[4200];
      snprintf(q, sizeof q, "%s%s", quoted ? "" : "'", f);
      s_cand_add(q, 0);
      free(f);
    }
    rl_filename_completion_desired = 1; /* directories get a '/' */
    rl_completion_append_character = '\'';
    return 1;
  }
  if (!strcmp(prev, "DROP")) {
    if (!strncasecmp("TENSOR", text, strlen(text))) s_cand_add("TENSOR", islower((unsigned char)*text));
    return 1;
  }
  if (!strcmp(prev, "DESCRIBE") || !strcmp(prev, "PRINT") || !strcmp(prev, "SAVE") ||
      !strcmp(prev, "FILL") || !strcmp(prev, "EXISTS") ||
      (!strcmp(prev, "TENSOR") && !strcmp(before, "DROP"))) {
    s_cand_tensors(text);
    return 1;
  }
  return 0;
}

/* readline completion: dot-command names at the start of a line, their
** arguments after them; in statements, by context (s_complete_context),
** else keywords and tensor names. */
static char **s_complete(const char *text, int start, int end) {
  size_t len = strlen(text);
  const char *p;
  (void)end;
  s_ncand = 0;
  rl_attempted_completion_over = 1;
  if (rl_line_buffer[0] == '.') {
    size_t cmdlen = strcspn(rl_line_buffer, " \t");
    const si_dotcmd *c;
    int k = 0; /* the argument being completed: words before it */
    for (p = rl_line_buffer; p < rl_line_buffer + start; p++)
      if (!isspace((unsigned char)*p) &&
          (p == rl_line_buffer || isspace((unsigned char)p[-1])))
        k++;
    for (c = si_dots; c->name; c++) {
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
  } else if (s_complete_context(text, start)) {
    return s_ncand ? rl_completion_matches(text, s_cand_next) : NULL;
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

void si_terminal_open(ts_shell *sh) {
  s_rl_shell = sh;
  rl_readline_name = "tradb";
  rl_catch_signals = 0;
  rl_attempted_completion_function = s_complete;
  rl_completion_word_break_hook = s_word_breaks;
  history_write_timestamps = 1; /* what keeps a multi-line entry one */
  history_multiline_entries = 1;
  stifle_history(S_HISTORY_LINES);
  if ((sh->histfile = s_history_path())) read_history(sh->histfile);
}

void si_terminal_close(ts_shell *sh) {
  if (sh->histfile) history_truncate_file(sh->histfile, S_HISTORY_LINES);
}
