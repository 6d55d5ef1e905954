/*
** shell/main.c - `tradb [options] [DBPATH]`: parse the command line, open
** the shell and run it interactively (stdin is a terminal), on batch input
** (stdin is not a terminal) or on the statements given with -c.  The same
** binary is also a worker (`tradb --worker`, started by hand on another
** machine or by the engine as a local worker) and makes cluster keys
** (`tradb --gen-keys DIR`).
*/
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "worker/worker.h"
#include "kernels/kernels.h"
#include "net/net.h"
#include "shell/shell.h"

#define S_MAX_COUNT 4096 /* largest --threads / --local-workers */

#define S_SEE_HELP "Try 'tradb --help' for the options.\n"

/* Print the usage text on f. */
static void s_usage(FILE *f) {
  fputs("Usage: tradb [options] [DBPATH]\n"
        "       tradb --worker --listen ENDPOINT --data DIR [worker options]\n"
        "       tradb --gen-keys DIR\n"
        "\n"
        "DBPATH is a database directory (created if absent); without it the\n"
        "database is transient and removed at exit.  Statements are read from\n"
        "the terminal (interactive) or from standard input (batch).\n"
        "\n"
        "Options:\n"
        "  -c 'STATEMENTS'   run STATEMENTS as batch input and exit\n"
        "  --bail            stop at the first error (like .bail on)\n"
        "  --echo            print each statement before running it\n"
        "  --threads N       threads per local worker (0 = twice the cores /\n"
        "                    workers, the default)\n"
        "  --backend NAME    kernel backend: reference, openblas, cuda (where\n"
        "                    built with CUDA) or auto, the default: cuda on a\n"
        "                    GPU, else openblas\n"
        "  --device WHERE    gpu, cpu or auto (the default): where auto runs\n"
        "                    kernels, here and in local workers; gpu fails\n"
        "                    without a usable GPU\n"
        "  --gpu-memory SIZE device memory each worker may use for chunks, in\n"
        "                    bytes or with K, M, G (default: most of what is\n"
        "                    free); chunks that do not fit go through the host\n"
        "  --workers EPS     comma-separated worker endpoints, such as\n"
        "                    tcp://host1:5555,tcp://host2:5555 (default: the\n"
        "                    workers recorded in the database, else local ones)\n"
        "  --local-workers N local workers to start when none are configured\n"
        "                    (1 to 64; default: one per core, at most 64)\n"
        "  --keys DIR        cluster key directory: secure every connection\n"
        "  --gen-keys DIR    write a new cluster key pair into DIR and exit\n"
        "  --version         print the version, kernel backends, BLAS kernels and GPU\n"
        "  -h, --help        print this help\n"
        "\n"
        "Worker options (tradb --worker):\n"
        "  --listen ENDPOINT endpoint to bind, such as tcp://*:5555 (required)\n"
        "  --data DIR        chunk store directory, created if absent (required)\n"
        "  --keys DIR        cluster key directory (as the shell's)\n"
        "  --threads N       kernel threads (0 = all cores, the default)\n"
        "  --backend NAME    kernel backend (as the shell's)\n"
        "  --device WHERE    gpu, cpu or auto (as the shell's)\n"
        "  --gpu-memory SIZE device memory this worker may use (as the shell's)\n"
        "  --memory SIZE     memory for the chunks this worker holds and the tasks\n"
        "                    it runs, at least 64K (default: 1/8 of the machine's;\n"
        "                    a shell's N local workers get 1/N of that each)\n",
        f);
}

/* Report a command-line error on stderr, and where the usage is (the
** usage itself, 60 lines, scrolled the error out of sight); returns exit
** status 2. */
static int s_usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int s_usage_error(const char *fmt, ...) {
  va_list ap;
  fputs("tradb: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fputs(S_SEE_HELP, stderr);
  return 2;
}

/* Parse an int in [min, S_MAX_COUNT]; TR_OK or TR_EINVAL. */
static int s_parse_count(const char *s, int min, int *out) {
  char *end;
  long v;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < min || v > S_MAX_COUNT)
    return TR_EINVAL;
  *out = (int)v;
  return TR_OK;
}

/* Parse a byte count with an optional K, M, G or T suffix (powers of
** 1024, "KiB" and "KB" alike); TR_OK or TR_EINVAL. */
static int s_parse_size(const char *s, size_t *out) {
  static const char units[] = "KMGT";
  char *end;
  double v;
  errno = 0;
  v = strtod(s, &end);
  if (errno || end == s || v < 0) return TR_EINVAL;
  const char *u = *end ? strchr(units, *end & ~0x20) : NULL;
  if (u) {
    for (const char *k = units; k <= u; k++) v *= 1024;
    end++;
    if (*end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
  } else if (*end == 'B' || *end == 'b') {
    end++;
  }
  if (*end || v >= 0x1p63) return TR_EINVAL;
  *out = (size_t)v;
  return TR_OK;
}

/* Where kernels run (--device) and how much GPU memory they may take
** (--gpu-memory); 0 or an exit status. */
static int s_device(const char *device, const char *gpu_memory) {
  size_t bytes = 0;
  char what[320];
  if (gpu_memory && (s_parse_size(gpu_memory, &bytes) || bytes == 0))
    return s_usage_error("--gpu-memory: '%s' is not a size such as 8G", gpu_memory);
  tk_device_set_memory(bytes);
  int rc = device ? tk_device_select(device) : TR_OK;
  if (rc == TR_EINVAL) return s_usage_error("--device: '%s' is not gpu, cpu or auto", device);
  if (rc == TR_ENOTFOUND) {
    tk_device_info(what, sizeof what);
    fprintf(stderr, "tradb: --device gpu: no usable GPU: %s\n", what);
    return 1;
  }
  return 0;
}

/* The running binary's path in buf (size bytes), for the engine to start
** local workers with the same binary even when argv[0] is not a path;
** NULL if it cannot be had (the engine then uses /proc/self/exe). */
static const char *s_self_exe(char *buf, size_t size) {
  ssize_t n = readlink("/proc/self/exe", buf, size);
  if (n <= 0 || (size_t)n >= size) return NULL;
  buf[n] = '\0';
  return buf;
}

/* tradb --worker: run a worker until SIGTERM or SIGINT. */
static int s_worker(const tw_config *wc, const char *shell_only,
                    int extra_args) {
  if (shell_only)
    return s_usage_error("%s is not a --worker option", shell_only);
  if (extra_args) return s_usage_error("--worker takes no DBPATH");
  if (!wc->listen || !wc->data)
    return s_usage_error("--worker needs --listen ENDPOINT and --data DIR");
  return tw_main(wc);
}

/*
** Settings of the whole process, made here before the engine or a worker
** starts a thread, as SQLite keeps its own in sqlite3_config(): code below
** main() does not change them.
**
** Memory.  Chunk buffers are a few MiB each and every statement allocates
** and frees many of them.  glibc would serve each from a fresh mmap, so
** every statement would fault in and zero its buffers again (measured:
** about 5% of a 4096^3 product): such blocks are kept in the heap for
** reuse.  One arena: chunk buffers are allocated on task threads, and a
** thread's own arena lives in 64 MiB heaps that glibc unmaps as soon as
** they empty, so with per-thread arenas a worker still faulted in most of
** its buffers (nn-large's statements: 0.8-0.9M page faults and 12.6 s of
** CPU, against 0.2M and 11.0 s with one arena).  Big buffers are few per
** task, so sharing one lock costs nothing measurable.  In a worker, chunks
** of 32 MiB and more (the most glibc lets M_MMAP_THRESHOLD be) would still
** be fresh mappings, faulted in on every use, so every block comes from
** the heap (measured on the large bench sizes, chunks of 48 MB: nn-large
** 3.2M page faults and 35-36 s of CPU, against 0.5M and 26-27 s); what a
** big statement leaves free is given back once the worker is idle, or at
** once beyond half of a worker's --memory (at most 1 GiB), the heap a
** worker faults in once the machine is quiet (worker/base.c, wi_warm_heap).
**
** BLAS threads.  One: the engine runs many chunk tasks at once, and gives
** BLAS more threads only for the length of a run with fewer chunks than
** threads.
*/
static void s_process_settings(int worker, int64_t memory) {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  /* a worker told its --memory keeps no more than half of it free at the
  ** top of its heap between tasks' buffers (a shell, the most a worker
  ** keeps, and less once it is idle: shell.c, s_trimmer) */
  mallopt(M_TRIM_THRESHOLD, (int)tr_heap_reserve(memory));
  mallopt(M_ARENA_MAX, 1);
  if (worker) mallopt(M_MMAP_MAX, 0);
  tk_set_blas_threads(1);
}

/* tradb --gen-keys DIR: make the cluster key pair. */
static int s_gen_keys(const char *dir) {
  tr_err err;
  tr_clearerr(&err);
  if (tn_gen_keys(dir, &err)) {
    fprintf(stderr, "Error: %s\n", err.msg);
    return 1;
  }
  printf("cluster keys written to %s\n", dir);
  return 0;
}

int main(int argc, char **argv) {
  enum {
    OPT_VERSION = 256, OPT_THREADS, OPT_BACKEND, OPT_BAIL, OPT_ECHO,
    OPT_WORKER, OPT_LISTEN, OPT_DATA, OPT_WORKERS, OPT_LOCAL_WORKERS,
    OPT_KEYS, OPT_GEN_KEYS, OPT_DEVICE, OPT_GPU_MEMORY, OPT_MEMORY
  };
  static const struct option longopts[] = {
      {"version", no_argument, NULL, OPT_VERSION},
      {"help", no_argument, NULL, 'h'},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"backend", required_argument, NULL, OPT_BACKEND},
      {"bail", no_argument, NULL, OPT_BAIL},
      {"echo", no_argument, NULL, OPT_ECHO},
      {"worker", no_argument, NULL, OPT_WORKER},
      {"listen", required_argument, NULL, OPT_LISTEN},
      {"data", required_argument, NULL, OPT_DATA},
      {"workers", required_argument, NULL, OPT_WORKERS},
      {"local-workers", required_argument, NULL, OPT_LOCAL_WORKERS},
      {"keys", required_argument, NULL, OPT_KEYS},
      {"gen-keys", required_argument, NULL, OPT_GEN_KEYS},
      {"device", required_argument, NULL, OPT_DEVICE},
      {"gpu-memory", required_argument, NULL, OPT_GPU_MEMORY},
      {"memory", required_argument, NULL, OPT_MEMORY},
      {NULL, 0, NULL, 0}};
  ts_options opt = {0};
  tw_config wc = {0};
  char exe[PATH_MAX], gpu[320];
  const char *command = NULL, *gen_keys = NULL;
  /* The first option given that only the shell takes, and the first that
  ** only a worker takes, to refuse them in the other mode. */
  const char *shell_only = NULL, *worker_only = NULL;
  int worker = 0, others = 0; /* others: options besides --gen-keys */
  ts_shell *sh = NULL;
  struct stat st;
  tr_err err;
  int c, status;

  /* OpenBLAS read its settings as it loaded.  Those the processes that run
  ** BLAS should have (tk_blas_setenv) are set now: a worker runs itself
  ** again (below), and local workers inherit them from their shell, which
  ** runs no BLAS itself and so is not started again. */
  int blas_again = tk_blas_setenv();

  while ((c = getopt_long(argc, argv, "hc:", longopts, NULL)) != -1) {
    if (c != OPT_GEN_KEYS) others++;
    switch (c) {
    case 'h':
      s_usage(stdout);
      return 0;
    case 'c':
      command = optarg;
      if (!shell_only) shell_only = "-c";
      break;
    case OPT_VERSION:
      tk_device_info(gpu, sizeof gpu);
      printf("tradb %s\nkernels: %s\nOpenBLAS kernels: %s\ncuda device: %s\n", TR_VERSION_STRING,
             tk_backends_compiled(), /* the workers' kernels, named or chosen */
             getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : tk_blas_core(), gpu);
      return 0;
    case OPT_THREADS:
      if (s_parse_count(optarg, 0, &opt.threads))
        return s_usage_error("--threads: '%s' is not a thread count", optarg);
      break;
    case OPT_BACKEND:
      if (strcmp(optarg, "auto") && !tk_backend_get(optarg))
        return s_usage_error("--backend: unknown backend '%s' (compiled in: %s)",
                             optarg, tk_backends_compiled());
      opt.backend = optarg;
      break;
    case OPT_BAIL:
      opt.bail = 1;
      if (!shell_only) shell_only = "--bail";
      break;
    case OPT_ECHO:
      opt.echo = 1;
      if (!shell_only) shell_only = "--echo";
      break;
    case OPT_WORKER:
      worker = 1;
      break;
    case OPT_LISTEN:
      wc.listen = optarg;
      if (!worker_only) worker_only = "--listen";
      break;
    case OPT_DATA:
      wc.data = optarg;
      if (!worker_only) worker_only = "--data";
      break;
    case OPT_WORKERS:
      if (!*optarg) return s_usage_error("--workers: no endpoint given");
      opt.workers = optarg;
      if (!shell_only) shell_only = "--workers";
      break;
    case OPT_LOCAL_WORKERS:
      if (s_parse_count(optarg, 1, &opt.local_workers))
        return s_usage_error("--local-workers: '%s' is not a count of at "
                             "least 1",
                             optarg);
      if (!shell_only) shell_only = "--local-workers";
      break;
    case OPT_KEYS:
      opt.keys = optarg;
      break;
    case OPT_GEN_KEYS:
      gen_keys = optarg;
      break;
    case OPT_DEVICE:
      opt.device = optarg;
      break;
    case OPT_GPU_MEMORY:
      opt.gpu_memory = optarg;
      break;
    case OPT_MEMORY: {
      size_t bytes;
      if (s_parse_size(optarg, &bytes) || bytes == 0)
        return s_usage_error("--memory: '%s' is not a size such as 2G", optarg);
      /* A task holds its output chunk and a chunk of each operand, each
      ** within a quarter of --memory (the layout search keeps them so):
      ** below 64 KiB those are 16 KiB, and a task's fixed cost (its
      ** message, its kernel call) outweighs what it computes. */
      if (bytes < ((size_t)64 << 10))
        return s_usage_error("--memory: '%s' is less than one task needs: at least 64K", optarg);
      wc.memory = (int64_t)bytes;
      if (!worker_only) worker_only = "--memory";
      break;
    }
    default: /* getopt said which option */
      fputs(S_SEE_HELP, stderr);
      return 2;
    }
  }
  if (gen_keys) {
    if (others || optind < argc)
      return s_usage_error("--gen-keys takes no other option or DBPATH");
    return s_gen_keys(gen_keys);
  }
  /* (should the exec fail, the worker runs on the kernels it has) */
  if (worker && blas_again && s_self_exe(exe, sizeof exe)) execv(exe, argv);
  s_process_settings(worker, worker ? wc.memory : 0);
  if ((status = s_device(opt.device, opt.gpu_memory))) return status;
  if (worker) {
    wc.keys = opt.keys;
    wc.threads = opt.threads;
    wc.backend = opt.backend;
    return s_worker(&wc, shell_only, argc - optind);
  }
  if (worker_only) return s_usage_error("%s needs --worker", worker_only);
  if (argc - optind > 1) return s_usage_error("more than one DBPATH given");
  opt.dbpath = optind < argc ? argv[optind] : NULL;
  if (opt.dbpath && stat(opt.dbpath, &st) == 0 && S_ISREG(st.st_mode)) {
    /* tradb script.tql would make a database called script.tql */
    fprintf(stderr,
            "tradb: '%s' is a file, not a database directory; to run the statements in it: "
            "tradb DBPATH < %s (or tradb < %s for a transient database)\n",
            opt.dbpath, opt.dbpath, opt.dbpath);
    return 2;
  }
  opt.self_exe = s_self_exe(exe, sizeof exe);

  if (ts_open(&opt, &sh, &err)) {
    fprintf(stderr, "Error: %s\n", err.msg);
    return 1;
  }
  ts_install_sigint(sh);
  if (command)
    status = ts_batch_string(sh, command);
  else if (isatty(STDIN_FILENO))
    status = ts_interactive(sh);
  else
    status = ts_batch(sh, stdin);
  if (ts_close(&sh) && !status) status = 1;
  return status;
}
