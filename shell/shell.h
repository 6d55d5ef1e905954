/*
** shell/shell.h - the tradb command-line shell: reads statements and
** dot-commands from a terminal (GNU readline), a file or a string, hands
** statements to the engine and prints what they return.  The shell is the
** only part of tradb that prints.
*/
#ifndef TRADB_SHELL_H
#define TRADB_SHELL_H

#include <stdio.h>
#include "util/util.h"

/* How to start a shell (from the command line). */
typedef struct ts_options {
  const char *dbpath;  /* database directory; NULL = transient */
  int threads;         /* threads per local worker; 0 = cores / workers */
  const char *backend; /* kernel backend name; NULL = "auto" */
  const char *workers; /* comma-separated worker endpoints; NULL = those
                          in the catalog, else local workers */
  int local_workers;   /* local workers to start; 0 = number of cores */
  const char *keys;    /* CURVE key directory; NULL = none */
  const char *self_exe;/* the tradb binary, for local workers; NULL =
                          /proc/self/exe */
  const char *device;  /* --device for local workers; NULL = auto */
  const char *gpu_memory; /* --gpu-memory for each local worker; NULL =
                             the default */
  int bail;            /* stop at the first error (.bail on) */
  int echo;            /* print each statement before running it */
} ts_options;

typedef struct ts_shell ts_shell;

/* Open the engine and a shell on it. */
int ts_open(const ts_options *opt, ts_shell **out, tr_err *err);
/* Close the engine (a transient database is removed); safe on NULL.
** Returns 0, or 1 when the local workers could not write all they held in
** memory only (a full disk): that part of what committed is lost, and the
** process should exit with a failure. */
int ts_close(ts_shell **sh);

/* Make SIGINT (Ctrl-C) interrupt the statement running on sh's engine, or
** drop the line at the prompt (no SA_RESTART).  Until then SIGINT keeps
** its default action: a Ctrl-C while the shell starts ends it. */
void ts_install_sigint(ts_shell *sh);

/* Interactive session on the terminal: banner, prompts, history and
** completion, until .quit or Ctrl-D.  Returns the exit status (0). */
int ts_interactive(ts_shell *sh);
/* Batch input from `in` (errors as "line N: msg").  Returns the exit
** status: 0 if everything succeeded, 1 otherwise. */
int ts_batch(ts_shell *sh, FILE *in);
/* Batch input from a string (the -c option); same exit status. */
int ts_batch_string(ts_shell *sh, const char *text);

#endif /* TRADB_SHELL_H */
