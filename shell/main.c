/*
** shell/main.c - `tradb [options] [DBPATH]`: parse the command line, open
** the shell and run it interactively (stdin is a terminal), on batch input
** (stdin is not a terminal) or on the statements given with -c.
*/
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "shell/shell.h"

/* Print the usage text on f. */
static void s_usage(FILE *f) {
  fputs("Usage: tradb [options] [DBPATH]\n"
        "\n"
        "DBPATH is a database directory (created if absent); without it the\n"
        "database is transient and removed at exit.  Statements are read from\n"
        "the terminal (interactive) or from standard input (batch).\n"
        "\n"
        "Options:\n"
        "  -c 'STATEMENTS'   run STATEMENTS as batch input and exit\n"
        "  --bail            stop at the first error (like .bail on)\n"
        "  --echo            print each statement before running it\n"
        "  --threads N       worker threads (0 = all cores, the default)\n"
        "  --backend NAME    kernel backend: reference, openblas or auto\n"
        "  --version         print the version and the kernel backends\n"
        "  -h, --help        print this help\n",
        f);
}

/* Parse a non-negative int; TR_OK or TR_EINVAL. */
static int s_parse_threads(const char *s, int *out) {
  char *end;
  long v;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 0 || v > 4096) return TR_EINVAL;
  *out = (int)v;
  return TR_OK;
}

int main(int argc, char **argv) {
  enum { OPT_VERSION = 256, OPT_THREADS, OPT_BACKEND, OPT_BAIL, OPT_ECHO };
  static const struct option longopts[] = {
      {"version", no_argument, NULL, OPT_VERSION},
      {"help", no_argument, NULL, 'h'},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"backend", required_argument, NULL, OPT_BACKEND},
      {"bail", no_argument, NULL, OPT_BAIL},
      {"echo", no_argument, NULL, OPT_ECHO},
      {NULL, 0, NULL, 0}};
  ts_options opt = {0};
  const char *command = NULL;
  ts_shell *sh = NULL;
  tr_err err;
  int c, status;

  while ((c = getopt_long(argc, argv, "hc:", longopts, NULL)) != -1) {
    switch (c) {
    case 'h':
      s_usage(stdout);
      return 0;
    case 'c':
      command = optarg;
      break;
    case OPT_VERSION:
      printf("tradb %s\nkernels: %s\n", TR_VERSION_STRING,
             tk_backends_compiled());
      return 0;
    case OPT_THREADS:
      if (s_parse_threads(optarg, &opt.threads)) {
        fprintf(stderr, "tradb: --threads: '%s' is not a thread count\n",
                optarg);
        s_usage(stderr);
        return 2;
      }
      break;
    case OPT_BACKEND:
      if (strcmp(optarg, "reference") && strcmp(optarg, "openblas") &&
          strcmp(optarg, "auto")) {
        fprintf(stderr, "tradb: --backend: unknown backend '%s'\n", optarg);
        s_usage(stderr);
        return 2;
      }
      opt.backend = optarg;
      break;
    case OPT_BAIL:
      opt.bail = 1;
      break;
    case OPT_ECHO:
      opt.echo = 1;
      break;
    default:
      s_usage(stderr);
      return 2;
    }
  }
  if (argc - optind > 1) {
    fprintf(stderr, "tradb: more than one DBPATH given\n");
    s_usage(stderr);
    return 2;
  }
  opt.dbpath = optind < argc ? argv[optind] : NULL;

  ts_install_sigint();
  if (ts_open(&opt, &sh, &err)) {
    fprintf(stderr, "Error: %s\n", err.msg);
    return 1;
  }
  if (command)
    status = ts_batch_string(sh, command);
  else if (isatty(STDIN_FILENO))
    status = ts_interactive(sh);
  else
    status = ts_batch(sh, stdin);
  ts_close(&sh);
  return status;
}
