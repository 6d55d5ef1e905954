/*
** scripts/bench_gemm.c - the OpenBLAS peer of the benchmark suite
** (scripts/bench.py): direct cblas_sgemm calls, the limit on one machine.
**
**   bench_gemm REPS PROGRAM OUT.npy NAME=IN.npy ...
**
** PROGRAM is a list of products such as "C=A*B" or "T=B*C;O=A*T": each
** step multiplies two f32 matrices, inputs (the NAME=IN.npy files that
** tradb saved) or the results of earlier steps, with one cblas_sgemm call;
** the last step's result is written to OUT.npy for the suite to check
** against NumPy.  The intermediates are allocated before the first run.
**
** REPS > 0: one untimed run of the whole program warms up OpenBLAS (thread
** pool start, page faults on the results); then each of the REPS timed
** runs prints one line "gemm SECONDS" (CLOCK_MONOTONIC, all steps).
** REPS = 0: a cold run: the first run of the program in this new process
** is timed (thread pool start and first page faults included) and prints
** one "gemm SECONDS" line.  Either way the inputs' pages are touched
** first, untimed: they are in memory, as tradb's are after FILL.
** OpenBLAS uses every core unless OPENBLAS_NUM_THREADS says otherwise.
**
** Not built by automake; bench.py builds it with
**   gcc -O2 scripts/bench_gemm.c $(pkg-config --cflags --libs openblas)
*/
#include <cblas.h>
#include <time.h>

#include "bench_npy.h"

#define MAX_MATS 32
#define MAX_STEPS 16

typedef struct {
  char name[16];
  long rows, cols;
  float *data;
  npy_mat file; /* an input: its mapping */
  int is_input;
} mat;

static mat g_mats[MAX_MATS];
static int g_nmats;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *msg, const char *arg) {
  fprintf(stderr, "bench_gemm: %s%s\n", msg, arg);
  exit(2);
}

static int find(const char *name, size_t len) {
  for (int i = 0; i < g_nmats; i++)
    if (strlen(g_mats[i].name) == len && !strncmp(g_mats[i].name, name, len)) return i;
  return -1;
}

static int add(const char *name, size_t len) {
  if (g_nmats == MAX_MATS || len == 0 || len >= sizeof g_mats[0].name)
    die("too many matrices or a bad name near ", name);
  if (find(name, len) >= 0) die("name given twice: ", name);
  memcpy(g_mats[g_nmats].name, name, len);
  return g_nmats++;
}

int main(int argc, char **argv) {
  if (argc < 5 || atol(argv[1]) < 0) {
    fprintf(stderr, "usage: bench_gemm REPS PROGRAM OUT.npy NAME=IN.npy ...\n");
    return 2;
  }
  long reps = atol(argv[1]);
  for (int a = 4; a < argc; a++) {
    const char *eq = strchr(argv[a], '=');
    if (!eq) die("expected NAME=FILE.npy, got ", argv[a]);
    mat *m = &g_mats[add(argv[a], (size_t)(eq - argv[a]))];
    m->file = npy_map(eq + 1);
    m->rows = m->file.rows;
    m->cols = m->file.cols;
    m->data = m->file.data;
    m->is_input = 1;
  }
  /* The steps: OUT=X*Y separated by ';'. */
  int step[MAX_STEPS][3], nsteps = 0;
  for (const char *p = argv[2]; *p;) {
    const char *end = p + strcspn(p, ";");
    const char *eq = memchr(p, '=', (size_t)(end - p));
    const char *star = eq ? memchr(eq, '*', (size_t)(end - eq)) : NULL;
    if (!star || nsteps == MAX_STEPS) die("bad program: ", argv[2]);
    int x = find(eq + 1, (size_t)(star - eq - 1)), y = find(star + 1, (size_t)(end - star - 1));
    if (x < 0 || y < 0) die("a step names an unknown matrix: ", p);
    if (g_mats[x].cols != g_mats[y].rows) die("shapes do not match in step ", p);
    int o = add(p, (size_t)(eq - p));
    g_mats[o].rows = g_mats[x].rows;
    g_mats[o].cols = g_mats[y].cols;
    g_mats[o].data = malloc((size_t)g_mats[o].rows * (size_t)g_mats[o].cols * sizeof(float));
    if (!g_mats[o].data) die("out of memory for ", g_mats[o].name);
    step[nsteps][0] = o;
    step[nsteps][1] = x;
    step[nsteps][2] = y;
    nsteps++;
    p = *end ? end + 1 : end;
  }
  if (!nsteps) die("empty program", "");
  /* The inputs in memory (untimed), as tradb's are after FILL. */
  volatile float sink = 0;
  for (int i = 0; i < g_nmats; i++)
    if (g_mats[i].is_input)
      for (long e = 0; e < g_mats[i].rows * g_mats[i].cols; e += 1024) sink += g_mats[i].data[e];
  (void)sink;
  for (long r = reps ? 0 : 1; r <= (reps ? reps : 1); r++) { /* r == 0: the warm-up */
    double t0 = now();
    for (int s = 0; s < nsteps; s++) {
      mat *o = &g_mats[step[s][0]], *x = &g_mats[step[s][1]], *y = &g_mats[step[s][2]];
      int m = (int)x->rows, n = (int)y->cols, k = (int)x->cols;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, x->data, k, y->data,
                  n, 0.0f, o->data, n);
    }
    double t = now() - t0;
    if (r > 0) {
      printf("gemm %.6f\n", t);
      fflush(stdout);
    }
  }
  mat *last = &g_mats[step[nsteps - 1][0]];
  npy_mat c = npy_create(argv[3], last->rows, last->cols, 1);
  memcpy(c.data, last->data, (size_t)last->rows * (size_t)last->cols * sizeof(float));
  npy_close(&c);
  for (int i = 0; i < g_nmats; i++) {
    if (g_mats[i].is_input)
      npy_close(&g_mats[i].file);
    else
      free(g_mats[i].data);
  }
  return 0;
}
