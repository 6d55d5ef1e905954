/*
** shell/shell_int.h - what the shell's files share: the shell itself, where
** input comes from, the flow codes, Ctrl-C, and the dot-command table.
*/
#ifndef TRADB_SHELL_INT_H
#define TRADB_SHELL_INT_H

#include "shell/shell.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "engine/engine.h"

#define SI_MAINTAIN_S 0.2 /* seconds of replica repair per idle tick or statement */
#define SI_CLOSE_REPAIR_S 60.0 /* at most this long, replica repair as the shell closes */

/* What to do after a line, statement or dot-command. */
enum {
  SI_OK,   /* go on */
  SI_FAIL, /* it failed (already reported); go on unless bail is on */
  SI_STOP, /* stop this input (bail, Ctrl-C); the terminal goes on */
  SI_QUIT, /* leave the shell */
  SI_READ  /* a dot-command: run the file sh->read_path (.read), then go on */
};

/* What reading a line gave. */
enum {
  SI_LINE,   /* a line */
  SI_EOF,    /* end of input */
  SI_CANCEL, /* Ctrl-C at the prompt */
  SI_INTR,   /* Ctrl-C while reading batch input */
  SI_RDERR   /* read error (errno) */
};

/* Ctrl-C as the shell's own reading sees it: the prompt and batch input
** poll it, each statement clears it (set by shell.c's SIGINT handler,
** defined in terminal.c). */
extern volatile sig_atomic_t si_sigint;

/* How results are printed (.mode). */
typedef enum si_mode { SI_TABLE, SI_CSV, SI_JSON, SI_MARKDOWN } si_mode;

struct ts_shell {
  te_engine *eng;     /* the engine statements go to */
  const char *dbpath; /* database directory; NULL = transient */
  si_mode mode;       /* .mode */
  int timer;          /* .timer on */
  int bail;           /* .bail on */
  int echo;           /* .echo on */
  int progress;       /* .progress on: a line on stderr while a statement
                         runs longer than a second */
  int depth;          /* .read files open */
  const char *read_path; /* SI_READ: the file .read names */
  long nfail;         /* failed statements and dot-commands so far */
  char *histfile;     /* history file (terminal); NULL = none */
  FILE *out;          /* where results go: stdout, or the file of .output
                         or .once */
  int once;           /* out is .once's: back to stdout after the next
                         statement or dot-command */
  /* the statement running, for its progress line */
  double run_t0;      /* when it started */
  double prog_last;   /* when the progress line was last drawn (0: never) */
  /* the idle trimmer (shell.c, s_trimmer), under trim_mu */
  pthread_t trimmer;
  int trimming;       /* the thread runs */
  pthread_mutex_t trim_mu;
  pthread_cond_t trim_cv;
  int busy;           /* a statement runs */
  int trimmed;        /* given back since the last statement */
  int trim_quit;      /* ts_close: stop */
  double idle_since;  /* when the last statement ended */
  int held;           /* what the local workers hold in memory only:
                         0 not yet written at the end, 1 written, -1 some
                         could not be (the session then exits with 1) */
};

/* Where lines come from. */
typedef struct si_source {
  FILE *in;         /* batch input; NULL = the terminal (readline) */
  const char *name; /* file name for messages; NULL = "line N" */
  long lineno;      /* lines read so far */
} si_source;

/* A growable string, always NUL-terminated once allocated. */
typedef struct si_buf {
  char *p;    /* text */
  size_t len; /* bytes used, NUL excluded */
  size_t cap; /* bytes allocated */
} si_buf;

/* ---- dot.c -------------------------------------------------------------- */

typedef struct si_dotcmd si_dotcmd;

/* Run dot-command c with its argc words argv (argv[0] is its name, the
** arity is checked); returns SI_OK, SI_FAIL (reported), SI_STOP, SI_QUIT
** or SI_READ. */
typedef int si_dotfn(ts_shell *sh, const si_source *src, const si_dotcmd *c, int argc,
                    char **argv);

/* A dot-command: its name, arguments, help line and handler (as Lua's
** luaL_Reg and Redis's command table carry theirs). */
struct si_dotcmd {
  const char *name; /* ".read" */
  const char *args; /* usage of the arguments, one word each; "a|b" lists
                       the choices, FILE completes file names, NAME tensor
                       names, ENDPOINT the workers' endpoints */
  int minargs;      /* fewest arguments */
  int maxargs;      /* most arguments */
  const char *help; /* one-line description */
  si_dotfn *run;     /* what it does */
};

/* The dot-commands, ended by a NULL name. */
extern const si_dotcmd si_dots[];
/* Run the dot-command line (it starts with '.'); SI_OK, SI_FAIL (reported),
** SI_STOP, SI_QUIT or SI_READ. */
int si_dot(ts_shell *sh, const si_source *src, char *line);

/* ---- shell.c ------------------------------------------------------------ */

/* Read src to its end (or .quit, or a stop); SI_OK, SI_FAIL, SI_STOP, SI_QUIT. */
int si_run_source(ts_shell *sh, si_source *src);

/* ---- print.c ------------------------------------------------------------ */

/* Print an error for input line `line` of src and count the failure. */
int si_report(ts_shell *sh, const si_source *src, long line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same for the token at column col (1-based) of line `line`, whose
** text is text[0, len): batch input gets "line L:C: msg", the terminal
** the line with a caret under the token. */
int si_report_at(ts_shell *sh, const si_source *src, long line, long col, const char *text,
                 size_t len, const char *msg);
/* Back to stdout after the statement or dot-command .once was for. */
void si_output_done(ts_shell *sh);
/* Print a result's warnings (one per line) on stderr, placed as errors are;
** they do not count as failures. */
void si_warn(const si_source *src, long line, const char *notice);
/* Print a statement's result on sh->out in the shell's mode. */
void si_print_result(const ts_shell *sh, const te_result *r);
/* The width of the screen PRINT summarises for: the terminal's, $COLUMNS,
** or 80. */
int si_width(const ts_shell *sh);
/* Cell (row, col) of a ROWS result; row -1 is the header. */
const char *si_cell(const te_result *r, int row, int col);

/* ---- terminal.c --------------------------------------------------------- */

/* Set up readline (completion, history from the history file) for sh. */
void si_terminal_open(ts_shell *sh);
/* Trim the history file to its limit. */
void si_terminal_close(ts_shell *sh);
/* Read a line on the terminal with the prompt: SI_LINE (*out is the line,
** the caller's to free), SI_EOF (Ctrl-D) or SI_CANCEL (Ctrl-C). */
int si_readline(const char *prompt, char **out);
/* Add an entry (a statement's lines, or a dot-command) to the history and
** append it to the history file. */
void si_remember(const char *entry, const char *path);

#endif
