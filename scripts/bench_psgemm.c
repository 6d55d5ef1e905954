/*
** scripts/bench_psgemm.c - the ScaLAPACK peer of the benchmark suite
** (scripts/bench.py): PBLAS psgemm (SUMMA on a 2-D block-cyclic layout),
** f32 like tradb's tensors, one MPI rank per tradb worker.
**
**   mpirun -np P bench_psgemm A.npy B.npy C.npy REPS NB
**
** A (I x K) and B (K x J) are the row-major f32 inputs that tradb saved.
** ScaLAPACK is column-major, so the ranks compute C^T = B^T A^T, which is
** the row-major C = A B with no copy: a row-major M x N buffer is the
** column-major N x M transpose.  The P ranks form a pr x pc grid (pr * pc
** = P, pr <= pc, as square as P allows) with NB x NB blocks; each rank
** copies its blocks of A and B out of the mapped input files (untimed).
** One untimed psgemm warms up; then per rep: barrier, psgemm, barrier,
** and rank 0 prints "psgemm SECONDS" (MPI_Wtime, the slowest rank's end).
** Finally every rank writes its blocks of C into C.npy (made by rank 0),
** which the suite checks against NumPy.  Each rank's BLAS should run one
** thread (OPENBLAS_NUM_THREADS=1): the ranks are the parallelism.
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

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, np;
  Cblacs_pinfo(&me, &np);
  if (argc != 6 || atol(argv[4]) <= 0 || atoi(argv[5]) <= 0) {
    if (me == 0) fprintf(stderr, "usage: bench_psgemm A.npy B.npy C.npy REPS NB\n");
    MPI_Finalize();
    return 2;
  }
  long reps = atol(argv[4]);
  g_nb = atoi(argv[5]);
  g_pr = 1;
  for (int r = 1; r * r <= np; r++)
    if (np % r == 0) g_pr = r;
  g_pc = np / g_pr;
  Cblacs_get(-1, 0, &g_ctxt);
  Cblacs_gridinit(&g_ctxt, "Row", g_pr, g_pc);
  Cblacs_gridinfo(g_ctxt, &g_pr, &g_pc, &g_myrow, &g_mycol);

  npy_mat a = npy_map(argv[1]), b = npy_map(argv[2]);
  if (a.cols != b.rows) {
    if (me == 0) fprintf(stderr, "bench_psgemm: A is %ld x %ld, B %ld x %ld\n", a.rows,
                         a.cols, b.rows, b.cols);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int I = (int)a.rows, K = (int)a.cols, J = (int)b.cols;
  dist_mat At, Bt, Ct; /* column-major K x I, J x K, J x I */
  dist_init(&At, K, I);
  dist_init(&Bt, J, K);
  dist_init(&Ct, J, I);
  dist_copy(&At, a.data, 0);
  dist_copy(&Bt, b.data, 0);
  npy_close(&a);
  npy_close(&b);

  const float one = 1.0f, zero = 0.0f;
  const int i1 = 1;
  for (long r = 0; r <= reps; r++) { /* r == 0: the warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    psgemm_("N", "N", &J, &I, &K, &one, Bt.loc, &i1, &i1, Bt.desc, At.loc, &i1, &i1, At.desc,
            &zero, Ct.loc, &i1, &i1, Ct.desc);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    if (me == 0 && r > 0) {
      printf("psgemm %.6f\n", t);
      fflush(stdout);
    }
  }

  if (me == 0) {
    npy_mat c = npy_create(argv[3], I, J, 1);
    npy_close(&c);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  npy_mat c = npy_create(argv[3], I, J, 0);
  dist_copy(&Ct, c.data, 1);
  npy_close(&c);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) fprintf(stderr, "bench_psgemm: %d x %d grid, %d x %d blocks\n", g_pr, g_pc, g_nb, g_nb);
  Cblacs_gridexit(g_ctxt);
  MPI_Finalize();
  return 0;
}
