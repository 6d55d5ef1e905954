/*
** scripts/bench_psgemm.c - the ScaLAPACK peer of the benchmark suite
** (scripts/bench.py): PBLAS psgemm (SUMMA on a 2-D block-cyclic layout),
** f32 like tradb's tensors, one MPI rank per tradb worker.
**
**   mpirun -np P bench_psgemm REPS NB PROGRAM OUT.npy NAME=IN.npy ...
**
** PROGRAM is a list of products such as "C=A*B" or "T=B*C;O=A*T" (as for
** bench_gemm.c): each step multiplies two f32 matrices, inputs (the
** row-major NAME=IN.npy files that tradb saved) or the results of earlier
** steps, with one psgemm call; the last step's result is written to
** OUT.npy.  ScaLAPACK is column-major, so the ranks compute X^T = Z^T Y^T
** for a step X = Y Z, which is the row-major X = Y Z with no copy: a
** row-major M x N buffer is the column-major N x M transpose.  The P ranks
** form a pr x pc grid (pr * pc = P, pr <= pc, as square as P allows) with
** NB x NB blocks; each rank copies its blocks of the inputs out of the
** mapped files and allocates its blocks of every step's result (untimed).
** REPS > 0: one untimed run of the program warms up; then per rep:
** barrier, the steps, barrier, and rank 0 prints "psgemm SECONDS"
** (MPI_Wtime, the slowest rank's end).  REPS = 0: a cold run, the first
** run of the program is timed the same way.  Finally every rank writes its
** blocks of the result into OUT.npy (made by rank 0), which the suite
** checks against NumPy.  Each rank's BLAS should run one thread
** (OPENBLAS_NUM_THREADS=1): the ranks are the parallelism.
**
** Not built by automake; bench.py builds it with
**   mpicc -O2 scripts/bench_psgemm.c -lscalapack-openmpi
*/
#include <mpi.h>

#include "bench_npy.h"

/* BLACS, PBLAS and ScaLAPACK tools (no headers ship in Debian). */
void Cblacs_pinfo(int *me, int *nprocs);
void Cblacs_get(int ctxt, int what, int *val);
void Cblacs_gridinit(int *ctxt, const char *order, int nprow, int npcol);
void Cblacs_gridinfo(int ctxt, int *nprow, int *npcol, int *myrow, int *mycol);
void Cblacs_gridexit(int ctxt);
int numroc_(const int *n, const int *nb, const int *iproc, const int *isrc, const int *nprocs);
void descinit_(int *desc, const int *m, const int *n, const int *mb, const int *nb,
               const int *irsrc, const int *icsrc, const int *ctxt, const int *lld, int *info);
void psgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
             const float *alpha, const float *a, const int *ia, const int *ja, const int *desca,
             const float *b, const int *ib, const int *jb, const int *descb, const float *beta,
             float *c, const int *ic, const int *jc, const int *descc);

typedef struct {
  int m, n;       /* global column-major shape */
  int mloc, nloc; /* this rank's share */
  int desc[9];
  float *loc;
} dist_mat;

static int g_nb, g_pr, g_pc, g_myrow, g_mycol, g_ctxt;

/* The global row (or column) of local index l in a block-cyclic layout. */
static long global_index(int l, int p, int np) {
  return ((long)(l / g_nb) * np + p) * g_nb + l % g_nb;
}

static void dist_init(dist_mat *d, int m, int n) {
  int zero = 0, info;
  d->m = m;
  d->n = n;
  d->mloc = numroc_(&m, &g_nb, &g_myrow, &zero, &g_pr);
  d->nloc = numroc_(&n, &g_nb, &g_mycol, &zero, &g_pc);
  int lld = d->mloc > 1 ? d->mloc : 1;
  descinit_(d->desc, &m, &n, &g_nb, &g_nb, &zero, &zero, &g_ctxt, &lld, &info);
  if (info != 0) {
    fprintf(stderr, "bench_psgemm: descinit failed (%d)\n", info);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  d->loc = calloc((size_t)lld * (size_t)(d->nloc > 0 ? d->nloc : 1), sizeof(float));
  if (!d->loc) {
    fprintf(stderr, "bench_psgemm: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Copy between the local blocks and the global column-major matrix G
** (TO_GLOBAL: local -> G, else G -> local), one contiguous run per block
** column segment. */
static void dist_copy(dist_mat *d, float *g, int to_global) {
  int lld = d->mloc > 1 ? d->mloc : 1;
  for (int lj = 0; lj < d->nloc; lj++) {
    long gj = global_index(lj, g_mycol, g_pc);
    for (int li = 0; li < d->mloc; li += g_nb) {
      long gi = global_index(li, g_myrow, g_pr);
      int run = d->mloc - li < g_nb ? d->mloc - li : g_nb;
      float *gp = g + gi + gj * (long)d->m, *lp = d->loc + li + (long)lj * lld;
      if (to_global)
        memcpy(gp, lp, (size_t)run * sizeof(float));
      else
        memcpy(lp, gp, (size_t)run * sizeof(float));
    }
  }
}

#define MAX_MATS 32
#define MAX_STEPS 16

typedef struct {
  char name[16];
  dist_mat d; /* column-major: the transpose of the row-major matrix */
} mat;

static mat g_mats[MAX_MATS];
static int g_nmats;

static void die(int me, const char *msg, const char *arg) {
  if (me == 0) fprintf(stderr, "bench_psgemm: %s%s\n", msg, arg);
  MPI_Finalize();
  exit(2);
}

static int find(const char *name, size_t len) {
  for (int i = 0; i < g_nmats; i++)
    if (strlen(g_mats[i].name) == len && !strncmp(g_mats[i].name, name, len)) return i;
  return -1;
}

static int add(int me, const char *name, size_t len) {
  if (g_nmats == MAX_MATS || len == 0 || len >= sizeof g_mats[0].name)
    die(me, "too many matrices or a bad name near ", name);
  if (find(name, len) >= 0) die(me, "name given twice: ", name);
  memcpy(g_mats[g_nmats].name, name, len);
  return g_nmats++;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, np;
  Cblacs_pinfo(&me, &np);
  if (argc < 6 || atol(argv[1]) < 0 || atoi(argv[2]) <= 0)
    die(me, "usage: bench_psgemm REPS NB PROGRAM OUT.npy NAME=IN.npy ...", "");
  long reps = atol(argv[1]);
  g_nb = atoi(argv[2]);
  g_pr = 1;
  for (int r = 1; r * r <= np; r++)
    if (np % r == 0) g_pr = r;
  g_pc = np / g_pr;
  Cblacs_get(-1, 0, &g_ctxt);
  Cblacs_gridinit(&g_ctxt, "Row", g_pr, g_pc);
  Cblacs_gridinfo(g_ctxt, &g_pr, &g_pc, &g_myrow, &g_mycol);

  for (int a = 5; a < argc; a++) {
    const char *eq = strchr(argv[a], '=');
    if (!eq) die(me, "expected NAME=FILE.npy, got ", argv[a]);
    mat *m = &g_mats[add(me, argv[a], (size_t)(eq - argv[a]))];
    npy_mat f = npy_map(eq + 1);
    dist_init(&m->d, (int)f.cols, (int)f.rows);
    dist_copy(&m->d, f.data, 0);
    npy_close(&f);
  }
  int step[MAX_STEPS][3], nsteps = 0;
  for (const char *p = argv[3]; *p;) {
    const char *end = p + strcspn(p, ";");
    const char *eq = memchr(p, '=', (size_t)(end - p));
    const char *star = eq ? memchr(eq, '*', (size_t)(end - eq)) : NULL;
    if (!star || nsteps == MAX_STEPS) die(me, "bad program: ", argv[3]);
    int x = find(eq + 1, (size_t)(star - eq - 1)), y = find(star + 1, (size_t)(end - star - 1));
    if (x < 0 || y < 0) die(me, "a step names an unknown matrix: ", p);
    /* row-major shapes: X is d.n x d.m */
    if (g_mats[x].d.m != g_mats[y].d.n) die(me, "shapes do not match in step ", p);
    int o = add(me, p, (size_t)(eq - p));
    dist_init(&g_mats[o].d, g_mats[y].d.m, g_mats[x].d.n);
    step[nsteps][0] = o;
    step[nsteps][1] = x;
    step[nsteps][2] = y;
    nsteps++;
    p = *end ? end + 1 : end;
  }
  if (!nsteps) die(me, "empty program", "");

  const float one = 1.0f, zero = 0.0f;
  const int i1 = 1;
  for (long r = reps ? 0 : 1; r <= (reps ? reps : 1); r++) { /* r == 0: the warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int s = 0; s < nsteps; s++) {
      /* row-major O = X Y, I x J with K: column-major O^T = Y^T X^T */
      dist_mat *o = &g_mats[step[s][0]].d, *x = &g_mats[step[s][1]].d, *y = &g_mats[step[s][2]].d;
      int I = x->n, K = x->m, J = y->m;
      psgemm_("N", "N", &J, &I, &K, &one, y->loc, &i1, &i1, y->desc, x->loc, &i1, &i1, x->desc,
              &zero, o->loc, &i1, &i1, o->desc);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    if (me == 0 && r > 0) {
      printf("psgemm %.6f\n", t);
      fflush(stdout);
    }
  }

  dist_mat *last = &g_mats[step[nsteps - 1][0]].d;
  if (me == 0) {
    npy_mat c = npy_create(argv[4], last->n, last->m, 1);
    npy_close(&c);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  npy_mat c = npy_create(argv[4], last->n, last->m, 0);
  dist_copy(last, c.data, 1);
  npy_close(&c);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) fprintf(stderr, "bench_psgemm: %d x %d grid, %d x %d blocks\n", g_pr, g_pc, g_nb, g_nb);
  for (int i = 0; i < g_nmats; i++) free(g_mats[i].d.loc);
  Cblacs_gridexit(g_ctxt);
  MPI_Finalize();
  return 0;
}
