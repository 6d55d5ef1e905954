/*
** tests/unit/test_engine.c - statements through te_exec on a transient
** database, each result checked against a reference computed here in
** double precision from the inputs read back with PRINT.
*/
#include "config.h"
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "engine/engine.h"
#include "tests/unit/engine_fixture.h"
#include "exec/exec.h"
#include "engine/engine_int.h"
#include "dist/dist_int.h"

TestSuite(engine, .init = tf_engine_open, .fini = tf_engine_close);

/* Run statements (one per call), asserting success. */
static void s_ok(const char *stmt) {
  tr_err err;
  int rc = te_exec(tf_e, stmt, strlen(stmt), NULL, &err);
  cr_assert_eq(rc, TR_OK, "%s -> %s", stmt, err.msg);
}

/* Run a statement expected to fail; returns the message. */
static const char *s_fails(const char *stmt, int code) {
  static tr_err err;
  int rc = te_exec(tf_e, stmt, strlen(stmt), NULL, &err);
  cr_assert_eq(rc, code, "%s -> %d (%s), expected %d", stmt, rc, err.msg, code);
  return err.msg;
}

/* All values of tensor name (caller frees the result). */
static te_result *s_get(const char *name) {
  char stmt[128];
  te_result *r = NULL;
  tr_err err;
  snprintf(stmt, sizeof stmt, "PRINT %s;", name);
  cr_assert_eq(te_exec(tf_e, stmt, strlen(stmt), &r, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(r->kind, TE_RES_TENSOR);
  return r;
}

static void s_close_to(const te_result *r, const double *want, int64_t n, double tol) {
  int64_t have = 1;
  for (int d = 0; d < r->rank; d++) have *= r->shape[d];
  cr_assert_eq(have, n);
  for (int64_t i = 0; i < n; i++)
    cr_assert(fabs(r->values[i] - want[i]) <= tol * (1 + fabs(want[i])),
              "element %lld: got %.9g want %.9g", (long long)i, r->values[i], want[i]);
}

/* C[i,j] = A[i,k] * B[k,j] with ragged chunks and different chunk shapes
** (B is re-chunked through tile/concat). */
Test(engine, matmul_ragged_and_rechunked) {
  const int I = 37, K = 29, J = 41;
  s_ok("CREATE TENSOR A[37, 29] CHUNK [8, 8];");
  s_ok("CREATE TENSOR B[29, 41] CHUNK [5, 16] TYPE f32;");
  s_ok("FILL A UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL B NORMAL(0, 1) SEED 2;");
  s_ok("C[i,j] = A[i,k] * B[k,j];");
  te_result *a = s_get("A"), *b = s_get("B"), *c = s_get("C");
  double *want = calloc((size_t)(I * J), sizeof(double));
  for (int i = 0; i < I; i++)
    for (int j = 0; j < J; j++)
      for (int k = 0; k < K; k++) want[i * J + j] += a->values[i * K + k] * b->values[k * J + j];
  cr_assert_eq(c->rank, 2);
  cr_assert_eq(c->shape[0], I);
  cr_assert_eq(c->shape[1], J);
  s_close_to(c, want, I * J, 1e-4);
  free(want);
  te_result_free(&a);
  te_result_free(&b);
  te_result_free(&c);
}

/* Operands stored in finer chunks than the node runs in are read piece by
** piece where they are (ta_label_piece), not copied together: along a
** summed label (B's row blocks under a product and a MAX-plus whose k is
** whole, A read as boxes inside its chunks) and along an output label
** (Q's row blocks under a node in P's chunks: each piece writes its part
** of the output chunk, the first write of each not accumulated, for MAX
** too).  Ragged edges included; values against a reference. */
Test(engine, operands_read_in_place_piece_by_piece) {
  const int I = 310, K = 530, J = 70;
  s_ok("SET layout = declared;");
  s_ok("CREATE TENSOR A[310, 530] CHUNK [150, 530] TYPE f32;");
  s_ok("CREATE TENSOR B[530, 70] CHUNK [130, 70] TYPE f32;");
  s_ok("CREATE TENSOR P[310, 70] CHUNK [300, 70] TYPE f32;");
  s_ok("CREATE TENSOR Q[310, 70] CHUNK [150, 70] TYPE f32;");
  s_ok("FILL A UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL B UNIFORM(-1, 1) SEED 2;");
  s_ok("FILL P UNIFORM(-1, 1) SEED 3;");
  s_ok("FILL Q UNIFORM(-1, 1) SEED 4;");
  s_ok("C[i,j] = A[i,k] * B[k,j];");
  s_ok("M[i,j] = MAX(A[i,k] + B[k,j]);");
  s_ok("H[i,j] = P[i,j] * Q[i,j];");
  s_ok("m[i] = MAX(P[i,j] - Q[i,j] - 3);"); /* negative: a piece folded into zeros would show */
  te_result *a = s_get("A"), *b = s_get("B"), *p = s_get("P"), *q = s_get("Q");
  double *c = calloc((size_t)(I * J), sizeof *c), *mx = malloc(sizeof *mx * (size_t)(I * J));
  double *h = malloc(sizeof *h * (size_t)(I * J)), *mi = malloc(sizeof *mi * (size_t)I);
  for (int i = 0; i < I; i++) {
    mi[i] = -INFINITY;
    for (int j = 0; j < J; j++) {
      mx[i * J + j] = -INFINITY;
      for (int k = 0; k < K; k++) {
        c[i * J + j] += a->values[i * K + k] * b->values[k * J + j];
        mx[i * J + j] = fmax(mx[i * J + j], a->values[i * K + k] + b->values[k * J + j]);
      }
      h[i * J + j] = p->values[i * J + j] * q->values[i * J + j];
      mi[i] = fmax(mi[i], p->values[i * J + j] - q->values[i * J + j] - 3);
    }
  }
  const char *names[] = {"C", "M", "H", "m"};
  const double *want[] = {c, mx, h, mi};
  for (int t = 0; t < 4; t++) {
    te_result *r = s_get(names[t]);
    s_close_to(r, want[t], t == 3 ? I : I * J, 1e-4);
    te_result_free(&r);
  }
  free(c);
  free(mx);
  free(h);
  free(mi);
  te_result_free(&a);
  te_result_free(&b);
  te_result_free(&p);
  te_result_free(&q);
}

/* Products and MAX-plus over random shapes, chunkings and types, in both
** layouts, against a reference: the chunk sizes are drawn so that some
** operands are finer than the node along a label (read piece by piece),
** some not multiples of the finest (copied together), some boxes inside
** one chunk of an operand of another type (converted), ragged edges
** everywhere. */
Test(engine, random_chunkings_read_in_pieces_or_copied, .timeout = 120) {
  const int64_t sizes[] = {128, 130, 150, 256, 300, 97};
  unsigned seed = 12345;
  for (int t = 0; t < 12; t++) {
    int64_t I = 200 + rand_r(&seed) % 200, K = 200 + rand_r(&seed) % 400, J = 40 + rand_r(&seed) % 90;
    int64_t ai = sizes[rand_r(&seed) % 6], ak = sizes[rand_r(&seed) % 6], bk = sizes[rand_r(&seed) % 6];
    const char *ta = rand_r(&seed) % 3 ? "f32" : "f64", *layout = t % 2 ? "auto" : "declared";
    char q[256];
    snprintf(q, sizeof q, "SET layout = %s;", layout);
    s_ok(q);
    snprintf(q, sizeof q, "CREATE TENSOR A[%lld, %lld] CHUNK [%lld, %lld] TYPE %s;", (long long)I,
             (long long)K, (long long)ai, (long long)ak, ta);
    s_ok(q);
    snprintf(q, sizeof q, "CREATE TENSOR B[%lld, %lld] CHUNK [%lld, %lld] TYPE f32;", (long long)K,
             (long long)J, (long long)bk, (long long)J);
    s_ok(q);
    s_ok("FILL A UNIFORM(-1, 1) SEED 5;");
    s_ok("FILL B UNIFORM(-1, 1) SEED 6;");
    s_ok("C[i,j] = A[i,k] * B[k,j];");
    s_ok("M[i,j] = MAX(A[i,k] + B[k,j] - 3);"); /* negative: a piece folded into zeros would show */
    te_result *a = s_get("A"), *b = s_get("B");
    double *c = calloc((size_t)(I * J), sizeof *c), *mx = malloc(sizeof *mx * (size_t)(I * J));
    for (int64_t i = 0; i < I; i++)
      for (int64_t j = 0; j < J; j++) {
        mx[i * J + j] = -INFINITY;
        for (int64_t k = 0; k < K; k++) {
          c[i * J + j] += a->values[i * K + k] * b->values[k * J + j];
          mx[i * J + j] = fmax(mx[i * J + j], a->values[i * K + k] + b->values[k * J + j] - 3);
        }
      }
    te_result *rc = s_get("C"), *rm = s_get("M");
    s_close_to(rc, c, I * J, 1e-4);
    s_close_to(rm, mx, I * J, 1e-5);
    te_result_free(&rc);
    te_result_free(&rm);
    te_result_free(&a);
    te_result_free(&b);
    free(c);
    free(mx);
    s_ok("DROP TENSOR A;");
    s_ok("DROP TENSOR B;");
    s_ok("DROP TENSOR C;");
    s_ok("DROP TENSOR M;");
  }
}

/* Transposed layouts take the gemm path with transposes or copies. */
Test(engine, matmul_transposed_operands_and_output) {
  s_ok("CREATE TENSOR A[20, 13] CHUNK [7, 6] TYPE f64;");
  s_ok("CREATE TENSOR B[17, 20] CHUNK [6, 7] TYPE f64;");
  s_ok("FILL A UNIFORM(0, 1) SEED 3;");
  s_ok("FILL B UNIFORM(0, 1) SEED 4;");
  s_ok("C[j,i] = A[k,i] * B[j,k];"); /* C = (B A) laid out as [j, i] */
  te_result *a = s_get("A"), *b = s_get("B"), *c = s_get("C");
  double want[17 * 13] = {0};
  for (int j = 0; j < 17; j++)
    for (int i = 0; i < 13; i++)
      for (int k = 0; k < 20; k++) want[j * 13 + i] += a->values[k * 13 + i] * b->values[j * 20 + k];
  s_close_to(c, want, 17 * 13, 1e-12);
  te_result_free(&a);
  te_result_free(&b);
  te_result_free(&c);
}

Test(engine, batch_and_multi_label_contraction) {
  s_ok("CREATE TENSOR X[3, 5, 4, 2] CHUNK [2, 3, 4, 1];");
  s_ok("CREATE TENSOR Y[4, 2, 3, 6] CHUNK [3, 2, 2, 4];");
  s_ok("FILL X UNIFORM(-1, 1) SEED 5;");
  s_ok("FILL Y UNIFORM(-1, 1) SEED 6;");
  /* batch b, contraction over k and l */
  s_ok("Z[b,i,j] = X[b,i,k,l] * Y[k,l,b,j];");
  te_result *x = s_get("X"), *y = s_get("Y"), *z = s_get("Z");
  double want[3 * 5 * 6] = {0};
  for (int b = 0; b < 3; b++)
    for (int i = 0; i < 5; i++)
      for (int j = 0; j < 6; j++)
        for (int k = 0; k < 4; k++)
          for (int l = 0; l < 2; l++)
            want[(b * 5 + i) * 6 + j] +=
                x->values[((b * 5 + i) * 4 + k) * 2 + l] * y->values[((k * 2 + l) * 3 + b) * 6 + j];
  s_close_to(z, want, 3 * 5 * 6, 1e-4);
  te_result_free(&x);
  te_result_free(&y);
  te_result_free(&z);
}

Test(engine, max_plus_and_squared_distance) {
  s_ok("CREATE TENSOR A[9, 11] CHUNK [4, 5];");
  s_ok("CREATE TENSOR B[11, 7] CHUNK [3, 7];");
  s_ok("FILL A UNIFORM(-5, 5) SEED 7;");
  s_ok("FILL B UNIFORM(-5, 5) SEED 8;");
  s_ok("D[i,j] = MAX(A[i,k] + B[k,j]);");
  s_ok("N[i,j] = MIN(A[i,k] + B[k,j]);");
  s_ok("CREATE TENSOR Y[6, 11] CHUNK [4, 4];");
  s_ok("FILL Y NORMAL(0, 2) SEED 9;");
  s_ok("E[i,j] = SUM((A[i,k] - Y[j,k]) ^ 2);");
  te_result *a = s_get("A"), *b = s_get("B"), *y = s_get("Y");
  te_result *d = s_get("D"), *n = s_get("N"), *e = s_get("E");
  double wd[9 * 7], wn[9 * 7], we[9 * 6];
  for (int i = 0; i < 9; i++)
    for (int j = 0; j < 7; j++) {
      wd[i * 7 + j] = -INFINITY;
      wn[i * 7 + j] = INFINITY;
      for (int k = 0; k < 11; k++) {
        double v = a->values[i * 11 + k] + b->values[k * 7 + j];
        wd[i * 7 + j] = fmax(wd[i * 7 + j], v);
        wn[i * 7 + j] = fmin(wn[i * 7 + j], v);
      }
    }
  for (int i = 0; i < 9; i++)
    for (int j = 0; j < 6; j++) {
      we[i * 6 + j] = 0;
      for (int k = 0; k < 11; k++) {
        double t = a->values[i * 11 + k] - y->values[j * 11 + k];
        we[i * 6 + j] += t * t;
      }
    }
  s_close_to(d, wd, 63, 1e-5);
  s_close_to(n, wn, 63, 1e-5);
  s_close_to(e, we, 54, 1e-4);
  te_result *rs[] = {a, b, y, d, n, e};
  for (int i = 0; i < 6; i++) te_result_free(&rs[i]);
}

Test(engine, transpose_diagonal_broadcast_and_scalars) {
  s_ok("CREATE TENSOR A[6, 6] CHUNK [4, 3];"); /* diagonal needs equal chunks: re-chunked */
  s_ok("CREATE TENSOR v[6] CHUNK [4];");
  s_ok("FILL A UNIFORM(-1, 1) SEED 10;");
  s_ok("FILL v UNIFORM(-1, 1) SEED 11;");
  s_ok("T[j,i] = A[i,j];");
  s_ok("d[i] = A[i,i];");
  s_ok("S[i,j] = A[i,j] + v[j] * 2;");
  s_ok("s[] = SUM(A[i,j]);");
  s_ok("t[] = A[i,i];"); /* implicit SUM: the trace */
  s_ok("O[i,j] = v[i] * v[j];");
  te_result *a = s_get("A"), *v = s_get("v");
  te_result *t = s_get("T"), *d = s_get("d"), *s = s_get("S"), *sc = s_get("s"), *tr = s_get("t"),
            *o = s_get("O");
  double wt[36], wd[6], ws[36], wsum = 0, wtr = 0, wo[36];
  for (int i = 0; i < 6; i++) {
    wd[i] = a->values[i * 6 + i];
    wtr += wd[i];
    for (int j = 0; j < 6; j++) {
      wt[j * 6 + i] = a->values[i * 6 + j];
      ws[i * 6 + j] = a->values[i * 6 + j] + v->values[j] * 2;
      wsum += a->values[i * 6 + j];
      wo[i * 6 + j] = v->values[i] * v->values[j];
    }
  }
  s_close_to(t, wt, 36, 0);
  s_close_to(d, wd, 6, 0);
  s_close_to(s, ws, 36, 1e-6);
  cr_assert_eq(sc->rank, 0);
  s_close_to(sc, &wsum, 1, 1e-5);
  s_close_to(tr, &wtr, 1, 1e-5);
  s_close_to(o, wo, 36, 1e-6);
  te_result *rs[] = {a, v, t, d, s, sc, tr, o};
  for (int i = 0; i < 8; i++) te_result_free(&rs[i]);
}

Test(engine, fused_relu_nested_aggregation_and_mixed_types) {
  s_ok("CREATE TENSOR X[10, 8] CHUNK [3, 8];");
  s_ok("CREATE TENSOR W[8, 5] CHUNK [8, 2] TYPE f64;");
  s_ok("CREATE TENSOR b[5];");
  s_ok("FILL X NORMAL(0, 1) SEED 12;");
  s_ok("FILL W NORMAL(0, 1) SEED 13;");
  s_ok("FILL b UNIFORM(-1, 1) SEED 14;");
  s_ok("H[n,h] = relu(SUM(X[n,d] * W[d,h]));");
  s_ok("G[n,h] = SUM(X[n,d] * W[d,h]) + b[h];");
  s_ok("m[n] = MAX(exp(-X[n,d]));");
  te_result *x = s_get("X"), *w = s_get("W"), *b = s_get("b");
  te_result *h = s_get("H"), *g = s_get("G"), *m = s_get("m");
  cr_assert_eq(h->dtype, TR_F64); /* f32 x f64 promotes */
  double wh[50], wg[50], wm[10];
  for (int n = 0; n < 10; n++) {
    wm[n] = -INFINITY;
    for (int d = 0; d < 8; d++) wm[n] = fmax(wm[n], exp(-x->values[n * 8 + d]));
    for (int k = 0; k < 5; k++) {
      double acc = 0;
      for (int d = 0; d < 8; d++) acc += x->values[n * 8 + d] * w->values[d * 5 + k];
      wh[n * 5 + k] = acc > 0 ? acc : 0;
      wg[n * 5 + k] = acc + b->values[k];
    }
  }
  s_close_to(h, wh, 50, 1e-6);
  s_close_to(g, wg, 50, 1e-6);
  s_close_to(m, wm, 10, 1e-5);
  te_result *rs[] = {x, w, b, h, g, m};
  for (int i = 0; i < 6; i++) te_result_free(&rs[i]);
}

Test(engine, fill_is_deterministic_whatever_the_chunking) {
  s_ok("CREATE TENSOR P[13, 9] CHUNK [13, 9];");
  s_ok("CREATE TENSOR Q[13, 9] CHUNK [4, 2];");
  s_ok("FILL P NORMAL(1, 3) SEED 99;");
  s_ok("FILL Q NORMAL(1, 3) SEED 99;");
  te_result *p = s_get("P"), *q = s_get("Q");
  s_close_to(q, p->values, 13 * 9, 0);
  s_ok("FILL Q IDENTITY;");
  te_result *id = s_get("Q");
  for (int i = 0; i < 13; i++)
    for (int j = 0; j < 9; j++) cr_assert_eq(id->values[i * 9 + j], i == j ? 1.0 : 0.0);
  te_result_free(&p);
  te_result_free(&q);
  te_result_free(&id);
}

/* The default chunk: the longest side halved until a chunk is at most 4
** MiB, unless the grid would pass TR_MAX_CHUNKS; then chunks grow. */
Test(engine, default_chunk_is_4_mib_within_the_chunk_limit) {
  int64_t shape[2] = {4096, 4096}, chunk[2];
  tx_default_chunk(2, shape, TR_F32, chunk);
  cr_assert(chunk[0] == 1024 && chunk[1] == 1024, "%lld x %lld", (long long)chunk[0], (long long)chunk[1]);
  tx_default_chunk(2, shape, TR_F64, chunk);
  cr_assert(chunk[0] == 512 && chunk[1] == 1024, "%lld x %lld", (long long)chunk[0], (long long)chunk[1]);
  int64_t huge[2] = {10000000, 10000000};
  tx_default_chunk(2, huge, TR_F32, chunk);
  double grid = ceil(1e7 / (double)chunk[0]) * ceil(1e7 / (double)chunk[1]);
  cr_assert(grid <= (double)TR_MAX_CHUNKS, "%.0f chunks", grid);
  /* as small as the limit lets them be: halving either side passes it */
  cr_assert(ceil(1e7 / ceil(chunk[0] / 2.0)) * ceil(1e7 / (double)chunk[1]) > (double)TR_MAX_CHUNKS);
  cr_assert(ceil(1e7 / (double)chunk[0]) * ceil(1e7 / ceil(chunk[1] / 2.0)) > (double)TR_MAX_CHUNKS);
}

Test(engine, assignment_may_read_its_own_output) {
  s_ok("CREATE TENSOR A[5, 5] CHUNK [2, 2];");
  s_ok("FILL A ONES;");
  s_ok("A[i,j] = A[i,j] * 3 + A[j,i];");
  te_result *a = s_get("A");
  for (int i = 0; i < 25; i++) cr_assert_eq(a->values[i], 4.0);
  te_result_free(&a);
}

Test(engine, errors_name_the_problem_and_keep_data) {
  s_ok("CREATE TENSOR A[4, 3];");
  s_ok("CREATE TENSOR B[5, 2];");
  s_ok("FILL A ONES;");
  s_ok("FILL B ONES;");
  cr_assert(strstr(s_fails("C[i,j] = A[i,k] * B[k,j];", TR_ESHAPE), "label 'k' bound to sizes 3"));
  cr_assert(strstr(s_fails("C[i,z] = A[i,k];", TR_ESHAPE), "output label 'z' is not bound"));
  cr_assert(strstr(s_fails("C[i] = A[i];", TR_ESHAPE), "rank mismatch: A has rank 2"));
  cr_assert(strstr(s_fails("C[i] = Nope[i];", TR_ENAME), "Nope"));
  cr_assert(strstr(s_fails("CREATE TENSOR A[2];", TR_ENAME), "A"));
  cr_assert(strstr(s_fails("FILL Z ONES;", TR_ENAME), "no such tensor: Z"));
  cr_assert(strstr(s_fails("PRINT A[0:9, 0:1];", TR_ESHAPE), "out of bounds"));
  cr_assert(strstr(s_fails("LOAD A FROM 'does-not-exist.npy';", TR_EIO), "does-not-exist.npy"));
  s_fails("A[i,j] = A[i,j] +;", TR_ESYNTAX);
  /* A is untouched by the failures. */
  te_result *a = s_get("A");
  for (int i = 0; i < 12; i++) cr_assert_eq(a->values[i], 1.0);
  te_result_free(&a);
}

Test(engine, show_describe_drop_and_explain) {
  te_result *r = NULL;
  tr_err err;
  s_ok("CREATE TENSOR M[100, 50] CHUNK [30, 50] TYPE f64;");
  const char *q = "DESCRIBE M;";
  cr_assert_eq(te_exec(tf_e, q, strlen(q), &r, &err), TR_OK);
  cr_assert_eq(r->kind, TE_RES_ROWS);
  int found = 0;
  for (int i = 0; i < r->nrows; i++)
    if (!strcmp(r->cells[i * 2], "format")) found = !strcmp(r->cells[i * 2 + 1], "row_strip");
  cr_assert(found, "M is stored in row strips");
  te_result_free(&r);
  q = "EXPLAIN C[i,j] = relu(SUM(M[i,k] * M[j,k]));";
  cr_assert_eq(te_exec(tf_e, q, strlen(q), &r, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(r->kind, TE_RES_TEXT);
  cr_assert(strstr(r->text, "AGGREGATE(group by <i,j>, SUM)"), "%s", r->text);
  cr_assert(strstr(r->text, "JOIN(on <i,j,k>, kernel gemm"), "%s", r->text);
  cr_assert(strstr(r->text, "TRANSFORM"), "%s", r->text);
  te_result_free(&r);
  s_ok("DROP TENSOR M;");
  s_fails("DESCRIBE M;", TR_ENOTFOUND);
  s_ok("DROP TENSOR IF EXISTS M;");
}

/* K labels split around an M label: the operand cannot go to gemm as it
** is laid out and is copied into [M][K] order first. */
Test(engine, matmul_operand_needs_reordering) {
  s_ok("CREATE TENSOR P[3, 7, 2] CHUNK [2, 4, 2];");
  s_ok("CREATE TENSOR Q[2, 5, 3] CHUNK [1, 5, 3];");
  s_ok("FILL P UNIFORM(-1, 1) SEED 21;");
  s_ok("FILL Q UNIFORM(-1, 1) SEED 22;");
  s_ok("W[i,j] = P[k,i,l] * Q[l,j,k];");
  te_result *p = s_get("P"), *q = s_get("Q"), *w = s_get("W");
  double want[7 * 5] = {0};
  for (int i = 0; i < 7; i++)
    for (int j = 0; j < 5; j++)
      for (int k = 0; k < 3; k++)
        for (int l = 0; l < 2; l++)
          want[i * 5 + j] += p->values[(k * 7 + i) * 2 + l] * q->values[(l * 5 + j) * 3 + k];
  s_close_to(w, want, 35, 1e-5);
  te_result_free(&p);
  te_result_free(&q);
  te_result_free(&w);
}

/* With two workers and two replicas every chunk is on both, and both
** serve it in turn: a plan that keeps its driving operand in place runs
** on both workers, not all of it on the first.  In the declared layout:
** the chosen one runs a statement this small as one chunk. */
Test(engine, replicated_operand_drives_on_every_site) {
  te_result *r = NULL;
  tr_err err;
  s_ok("SET layout = declared;");
  s_ok("CREATE TENSOR X[64, 8] CHUNK [8, 8];");
  s_ok("CREATE TENSOR v[8] CHUNK [8];");
  s_ok("FILL X UNIFORM(-1, 1) SEED 3;");
  s_ok("FILL v UNIFORM(-1, 1) SEED 4;");
  const char *q = "EXPLAIN ANALYZE (FORMAT JSON) D[n,d] = X[n,d] - v[d];";
  cr_assert_eq(te_exec(tf_e, q, strlen(q), &r, &err), TR_OK, "%s", err.msg);
  const char *p = strstr(r->text, "\"per_site\": [");
  cr_assert_not_null(p, "%s", r->text);
  int busy = 0;
  for (const char *t = p; (t = strstr(t, "\"endpoint\": ")); t++) {
    const char *k = strstr(t, "\"tasks\": ");
    cr_assert_not_null(k, "%s", r->text);
    busy += atoi(k + strlen("\"tasks\": ")) > 0;
  }
  cr_assert_eq(busy, 2, "both sites should run tasks: %s", r->text);
  te_result_free(&r);
  /* and the result is right */
  te_result *x = s_get("X"), *v = s_get("v"), *d = s_get("D");
  double want[512];
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 8; j++) want[i * 8 + j] = x->values[i * 8 + j] - v->values[j];
  s_close_to(d, want, 512, 1e-6);
  te_result_free(&x);
  te_result_free(&v);
  te_result_free(&d);
}

/* EXPLAIN ANALYZE (FORMAT JSON) runs the statement and counts every float
** that crossed a process boundary.  With two workers and two replicas the
** inputs are on both, so what moves is the output's second replica. */
Test(engine, explain_analyze_counts_transfers) {
  te_result *r = NULL;
  tr_err err;
  s_ok("CREATE TENSOR A[16, 12] CHUNK [4, 12];");
  s_ok("FILL A ONES;");
  const char *q = "EXPLAIN ANALYZE (FORMAT JSON) G[i,j] = A[i,k] * A[j,k];";
  cr_assert_eq(te_exec(tf_e, q, strlen(q), &r, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(r->kind, TE_RES_TEXT);
  cr_assert(strstr(r->text, "\"elapsed_s\": "), "%s", r->text);
  cr_assert(strstr(r->text, "\"measured_transfer_floats\": 256,"), "%s", r->text);
  const char *p = strstr(r->text, "\"per_site\": [");
  cr_assert_not_null(p);
  int sites = 0;
  for (const char *q2 = p; (q2 = strstr(q2, "\"endpoint\": ")); q2++) sites++;
  cr_assert_eq(sites, 2, "%s", r->text);
  /* Each site says which kernels ran its tasks, and what its GPU copied. */
  const char *k = strstr(p, "\"kernels\": \"");
  cr_assert_not_null(k, "%s", r->text);
  k += strlen("\"kernels\": \"");
  cr_assert(!strncmp(k, "openblas\"", 9) || !strncmp(k, "cuda\"", 5), "%s", r->text);
  cr_assert(strstr(p, "\"gpu_copy_s\": "), "%s", r->text);
  cr_assert(strstr(r->text, "\"op\": \"replicate\", \"relation\": \"G\", \"fused\": false, \"floats\": 256"),
            "%s", r->text);
  cr_assert(strstr(r->text, "\"op\": \"local_agg\", \"relation\": \"G (SUM)\", \"fused\": true"), "%s", r->text);
  te_result_free(&r);
  te_result *g = s_get("G"); /* the statement ran: G = A A^T = 12 everywhere */
  for (int i = 0; i < 256; i++) cr_assert_eq(g->values[i], 12.0);
  te_result_free(&g);
}

/* A Gram product's operands are one relation: a chunk both read goes to a
** site once, and the prediction counted it once per operand (CMM[n] on X
** spread over 2 workers: 327680 floats predicted, 196608 moved, on a
** larger X).  Under every plan the prediction is what moves, and G the
** reference's. */
Test(engine, a_chunk_two_operands_read_is_predicted_sent_once) {
  s_ok("SET replication = 1;");
  s_ok("CREATE TENSOR X[64, 16] CHUNK [16, 4];");
  s_ok("FILL X UNIFORM(-1, 1) SEED 2;");
  s_ok("SET layout = declared;");
  static const char *plans[] = {"CMM[n]", "BMM[bcast X; X in place]", "BMM[bcast X; X in place] 2-phase[i,j]"};
  for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
    char q[200];
    snprintf(q, sizeof q, "EXPLAIN ANALYZE (FORMAT JSON, PLAN '%s') G[i,j] = X[n,i] * X[n,j];", plans[k]);
    te_result *r = NULL;
    tr_err err;
    cr_assert_eq(te_exec(tf_e, q, strlen(q), &r, &err), TR_OK, "%s: %s", plans[k], err.msg);
    const char *pr = strstr(r->text, "\"predicted_transfer_floats\": "), *me = strstr(r->text, "\"measured_transfer_floats\": ");
    cr_assert(pr && me, "%s", r->text);
    long long want = strtoll(pr + strlen("\"predicted_transfer_floats\": "), NULL, 10),
              got = strtoll(me + strlen("\"measured_transfer_floats\": "), NULL, 10);
    cr_assert_eq(got, want, "%s: %lld floats moved, %lld predicted", plans[k], got, want);
    cr_assert_gt(got, 0, "%s", plans[k]);
    /* CMM[n] sums a block and its mirror over the same rows on each site:
    ** each site's partial of a block below the diagonal is its mirror's
    ** transposed; a 1-phase plan mirrors whole blocks; a 2-phase one that
    ** follows X's columns computes every block */
    int mirrors = k != 2;
    cr_assert_eq(strstr(r->text, "\"blocks_from_mirrors\": true") != NULL, mirrors, "%s", r->text);
    te_result_free(&r);
    te_result *x = s_get("X"), *g = s_get("G");
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 16; j++) {
        double w = 0;
        for (int n = 0; n < 64; n++) w += x->values[n * 16 + i] * x->values[n * 16 + j];
        cr_assert(fabs(g->values[i * 16 + j] - w) < 1e-5, "%s: G[%d,%d]", plans[k], i, j);
        if (mirrors) cr_assert_eq(g->values[i * 16 + j], g->values[j * 16 + i]);
      }
    te_result_free(&x);
    te_result_free(&g);
  }
  s_ok("SET layout = auto;");
  s_ok("SET replication = 2;");
}

Test(engine, block_stays_open_after_explain_commit) {
  s_ok("CREATE TENSOR A[4, 3];");
  s_ok("FILL A ONES;");
  s_ok("BEGIN;");
  s_ok("C[i,j] = A[i,j] * 3;");
  te_result *x = NULL;
  tr_err err;
  cr_assert_eq(te_exec(tf_e, "EXPLAIN COMMIT;", 15, &x, &err), TR_OK, "%s", err.msg);
  cr_assert(x && x->kind == TE_RES_TEXT && strstr(x->text, "Predicted: "), "plan of the block");
  te_result_free(&x);
  /* still in the block: D reads C, which only exists as the block's output */
  s_ok("D[i,j] = C[i,j] + 1;");
  s_ok("COMMIT;");
  te_result *d = s_get("D");
  double want[12];
  for (int i = 0; i < 12; i++) want[i] = 4;
  s_close_to(d, want, 12, 0);
  te_result_free(&d);
}

/* ---- the task message ---------------------------------------------------- */

/* A FILL task for 2 chunks of a 4 x 3 tensor, kept as keep says. */
static void s_fill_task(tx_task *t, int keep, int nrep) {
  static int64_t lin[2] = {0, 1};
  static uint64_t ids[2] = {11, 12};
  memset(t, 0, sizeof *t);
  t->kind = TX_TASK_FILL;
  t->f = (tx_fill){TP_FILL_UNIFORM, -1, 1, 7};
  snprintf(t->out_meta.name, sizeof t->out_meta.name, "T");
  t->out_meta.dtype = TR_F32;
  t->out_meta.rank = 2;
  t->out_meta.shape[0] = 4;
  t->out_meta.shape[1] = 3;
  t->out_meta.chunk[0] = 2;
  t->out_meta.chunk[1] = 3;
  t->nout = 2;
  t->out_lin = lin;
  t->out_id = ids;
  t->nrep = nrep;
  if (nrep) snprintf(t->rep[0], sizeof t->rep[0], "ipc:///tmp/peer");
  t->keep = keep;
}

/* How the task's outputs are kept (in the file, in memory until written
** in the background, or scratch: in memory only, never committed) travels
** with it; a scratch task with replicas, or any other value, is refused
** as malformed. */
Test(task, keep_round_trips_and_is_checked) {
  static const int keeps[] = {TC_KEEP_FILE, TC_KEEP_SCRATCH, TC_KEEP_BACKGROUND};
  for (int k = 0; k < 3; k++) {
    tx_task t, got;
    tn_wbuf b = {0};
    tr_err err;
    int scratch = keeps[k] == TC_KEEP_SCRATCH;
    s_fill_task(&t, keeps[k], !scratch);
    tx_task_encode(&t, &b);
    cr_assert_eq(tx_task_decode(b.p, b.n, &got, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(got.keep, keeps[k]);
    cr_assert_eq(got.nrep, !scratch);
    cr_assert_eq(got.nout, 2);
    cr_assert_eq(got.out_id[1], 12);
    tx_task_free(&got);
    /* cut short: the field is the last byte */
    cr_assert_eq(tx_task_decode(b.p, b.n - 1, &got, &err), TR_EINVAL);
    tn_wbuf_free(&b);
  }
  tx_task t, got;
  tn_wbuf b = {0};
  tr_err err;
  s_fill_task(&t, TC_KEEP_SCRATCH, 1);
  tx_task_encode(&t, &b);
  cr_assert_eq(tx_task_decode(b.p, b.n, &got, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "malformed task") != NULL, "%s", err.msg);
  s_fill_task(&t, TC_KEEP_FILE, 0);
  tn_wbuf_free(&b);
  tx_task_encode(&t, &b);
  b.p[b.n - 1] = 3;
  cr_assert_eq(tx_task_decode(b.p, b.n, &got, &err), TR_EINVAL);
  tn_wbuf_free(&b);
}

/* Each replica's keep travels with its endpoint (under synchronous =
** full a second copy on one file system is kept in the background while
** the first is written); a replica kept as scratch, which nothing would
** commit, or an unknown keep is refused as malformed. */
Test(task, replica_keeps_round_trip_and_are_checked) {
  tx_task t, got;
  tn_wbuf b = {0};
  tr_err err;
  s_fill_task(&t, TC_KEEP_FILE, 2);
  snprintf(t.rep[1], sizeof t.rep[1], "ipc:///tmp/peer2");
  t.rep_keep[0] = TC_KEEP_BACKGROUND;
  t.rep_keep[1] = TC_KEEP_FILE;
  tx_task_encode(&t, &b);
  cr_assert_eq(tx_task_decode(b.p, b.n, &got, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(got.keep, TC_KEEP_FILE);
  cr_assert_eq(got.nrep, 2);
  cr_assert_str_eq(got.rep[1], "ipc:///tmp/peer2");
  cr_assert_eq(got.rep_keep[0], TC_KEEP_BACKGROUND);
  cr_assert_eq(got.rep_keep[1], TC_KEEP_FILE);
  tx_task_free(&got);
  tn_wbuf_free(&b);
  static const int bad[] = {TC_KEEP_SCRATCH, 3};
  for (int k = 0; k < 2; k++) {
    t.rep_keep[0] = bad[k];
    tx_task_encode(&t, &b);
    cr_assert_eq(tx_task_decode(b.p, b.n, &got, &err), TR_EINVAL, "replica keep %d", bad[k]);
    cr_assert(strstr(err.msg, "malformed task") != NULL, "%s", err.msg);
    tn_wbuf_free(&b);
  }
}

/* A FILL task's kind travels as a number: every kind round-trips, one
** past the last is refused as malformed. */
Test(task, fill_kind_round_trips_and_is_checked) {
  for (int kind = TP_FILL_ZEROS; kind <= TP_FILL_PERMUTATION + 1; kind++) {
    tx_task t, got;
    tn_wbuf b = {0};
    tr_err err;
    s_fill_task(&t, 0, 0);
    t.f.kind = (tp_fill_kind)kind;
    tx_task_encode(&t, &b);
    int rc = tx_task_decode(b.p, b.n, &got, &err);
    if (kind <= TP_FILL_PERMUTATION) {
      cr_assert_eq(rc, TR_OK, "kind %d: %s", kind, err.msg);
      cr_assert_eq(got.f.kind, kind);
      tx_task_free(&got);
    } else {
      cr_assert_eq(rc, TR_EINVAL, "kind %d", kind);
    }
    tn_wbuf_free(&b);
  }
}

/* te_interrupt stops the statement it finds running (here: about to start)
** with TR_EINTR and leaves the data as it was; the request stays until
** te_interrupt_clear, as sqlite3_interrupt's does. */
Test(engine, interrupt_cancels_until_cleared) {
  s_ok("CREATE TENSOR I[64, 64] CHUNK [32, 32];");
  s_ok("FILL I ONES;");
  te_interrupt(tf_e);
  cr_assert_str_eq(s_fails("J[i,j] = I[i,k] * I[k,j];", TR_EINTR), "interrupted");
  cr_assert_str_eq(s_fails("FILL I ZEROS;", TR_EINTR), "interrupted");
  te_interrupt_clear(tf_e);
  s_ok("J[i,j] = I[i,k] * I[k,j];");
  te_result *r = s_get("I");
  for (int i = 0; i < 64 * 64; i++) cr_assert_eq(r->values[i], 1.0);
  te_result_free(&r);
}

/* ---- layout: products split, chunkings chosen, weights calibrated -------------- */

/* The text of EXPLAIN [opts] stmt (caller frees). */
static te_result *s_explain(const char *stmt) {
  te_result *r = NULL;
  tr_err err;
  cr_assert_eq(te_exec(tf_e, stmt, strlen(stmt), &r, &err), TR_OK, "%s -> %s", stmt, err.msg);
  cr_assert(r && r->kind == TE_RES_TEXT);
  return r;
}

/* Four factors, mixed shapes: split into three steps, the same values
** as the one join the declared layout runs. */
Test(engine, product_of_four_split_into_pairwise_steps) {
  s_ok("CREATE TENSOR A[30, 20] CHUNK [16, 16];");
  s_ok("CREATE TENSOR B[20, 25];");
  s_ok("CREATE TENSOR C[25, 5];");
  s_ok("CREATE TENSOR D[5, 40] CHUNK [5, 8];");
  s_ok("FILL A UNIFORM(-1, 1) SEED 1; ");
  s_ok("FILL B UNIFORM(-1, 1) SEED 2;");
  s_ok("FILL C UNIFORM(-1, 1) SEED 3;");
  s_ok("FILL D UNIFORM(-1, 1) SEED 4;");
  const char *st = "E[i,m] = A[i,j] * B[j,k] * C[k,l] * D[l,m];";
  char x[128];
  snprintf(x, sizeof x, "EXPLAIN %s", st);
  te_result *r = s_explain(x);
  cr_assert(strstr(r->text, "product split into 3 pairwise steps") &&
                strstr(r->text, "exact DP over factor subsets") && strstr(r->text, "temporary _t2"),
            "%s", r->text);
  te_result_free(&r);
  s_ok(st);
  te_result *a = s_get("A"), *b = s_get("B"), *c = s_get("C"), *d = s_get("D"), *e = s_get("E");
  double want[30 * 40] = {0};
  for (int i = 0; i < 30; i++)
    for (int j = 0; j < 20; j++)
      for (int k = 0; k < 25; k++)
        for (int l = 0; l < 5; l++)
          for (int m = 0; m < 40; m++)
            want[i * 40 + m] += a->values[i * 20 + j] * b->values[j * 25 + k] *
                                c->values[k * 5 + l] * d->values[l * 40 + m];
  s_close_to(e, want, 30 * 40, 1e-4);
  te_result_free(&e);
  s_ok("SET layout = declared;");
  r = s_explain(x);
  cr_assert(!strstr(r->text, "split") && strstr(r->text, "JOIN(on <i,m,j,k,l>"), "%s", r->text);
  te_result_free(&r);
  s_ok(st);
  e = s_get("E");
  s_close_to(e, want, 30 * 40, 1e-4);
  te_result *all[] = {a, b, c, d, e};
  for (int i = 0; i < 5; i++) te_result_free(&all[i]);
}

/* A product scaled by a constant or negated, however written, sums with
** the gemm kernel and scales the sums (the constants and the sign are the
** node's Transform), where its whole scalar program ran as the general
** contraction before (2000^3 in f32: 1.9 s against 0.07 s); a divisor is
** the factor 1 / f; an expression of numbers alone is a number to the
** implicit SUM.  The values are the reference's in both layouts. */
Test(engine, scaled_products_keep_the_gemm_kernel) {
  s_ok("CREATE TENSOR A[30, 20] CHUNK [16, 16] TYPE f64;");
  s_ok("CREATE TENSOR B[20, 25] CHUNK [16, 25] TYPE f64;");
  s_ok("CREATE TENSOR C[25, 5] TYPE f64;");
  s_ok("FILL A UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL B UNIFORM(0.5, 1.5) SEED 2;");
  s_ok("FILL C UNIFORM(-1, 1) SEED 3;");
  te_result *a = s_get("A"), *b = s_get("B"), *c = s_get("C");
  static double ab[30 * 25], adivb[30 * 25], abc[30 * 5];
  for (int i = 0; i < 30; i++)
    for (int j = 0; j < 25; j++) {
      ab[i * 25 + j] = adivb[i * 25 + j] = 0;
      for (int k = 0; k < 20; k++) {
        ab[i * 25 + j] += a->values[i * 20 + k] * b->values[k * 25 + j];
        adivb[i * 25 + j] += a->values[i * 20 + k] / b->values[k * 25 + j];
      }
    }
  for (int i = 0; i < 30; i++)
    for (int l = 0; l < 5; l++) {
      abc[i * 5 + l] = 0;
      for (int j = 0; j < 25; j++) abc[i * 5 + l] += ab[i * 25 + j] * c->values[j * 5 + l];
    }
  static const struct {
    const char *st, *name, *has; /* has: in its EXPLAIN under layout auto */
    const double *ref;
    double scale; /* of ref */
    int relu;
    int n;
  } cases[] = {
      {"S[i,j] = A[i,k] * B[k,j] / 4;", "S", "TRANSFORM(x -> (x / 4))", ab, 0.25, 0, 750},
      {"S[i,j] = -(A[i,k] * B[k,j]) * 0.5;", "S", "TRANSFORM(x -> neg((x * 0.5)))", ab, -0.5, 0, 750},
      {"S[i,j] = 2 * A[i,k] * -B[k,j];", "S", "TRANSFORM(x -> neg((x * 2)))", ab, -2, 0, 750},
      {"S[i,j] = SUM(A[i,k] / B[k,j]);", "S", "kernel gemm: (A[i,k] * (1 / B[k,j]))", adivb, 1, 0, 750},
      {"S[i,j] = relu(SUM(A[i,k] * B[k,j] / 2));", "S", "TRANSFORM(x -> relu((x / 2)))", ab, 0.5, 1, 750},
      {"T[i,l] = A[i,k] * B[k,j] * C[j,l] / sqrt(4);", "T", "TRANSFORM(x -> (x / sqrt(4)))", abc, 0.5, 0, 150},
  };
  for (int layout = 0; layout < 2; layout++) {
    s_ok(layout ? "SET layout = declared;" : "SET layout = auto;");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      char x[160];
      snprintf(x, sizeof x, "EXPLAIN %s", cases[k].st);
      te_result *r = s_explain(x);
      /* declared: the three factors are one join, of the contraction kernel */
      if (!layout)
        cr_assert(strstr(r->text, cases[k].has) && strstr(r->text, "kernel gemm") &&
                      !strstr(r->text, "kernel contract"),
                  "%s: %s", cases[k].st, r->text);
      te_result_free(&r);
      s_ok(cases[k].st);
      double want[750];
      for (int i = 0; i < cases[k].n; i++) {
        want[i] = cases[k].ref[i] * cases[k].scale;
        if (cases[k].relu && want[i] < 0) want[i] = 0;
      }
      te_result *got = s_get(cases[k].name);
      s_close_to(got, want, cases[k].n, 1e-9);
      te_result_free(&got);
    }
  }
  te_result *all[] = {a, b, c};
  for (int i = 0; i < 3; i++) te_result_free(&all[i]);
}

/* A term of a summed product that alone holds a summed label is summed
** over it on its own first (a temporary), so the product runs as an outer
** product or a gemm instead of a join over every label: the same values
** as the reference in both layouts. */
Test(engine, terms_alone_with_a_summed_label_are_summed_first) {
  s_ok("CREATE TENSOR A[30, 20] CHUNK [16, 16] TYPE f64;");
  s_ok("CREATE TENSOR b[25] TYPE f64;");
  s_ok("CREATE TENSOR T[30, 20, 6] CHUNK [16, 20, 6] TYPE f64;");
  s_ok("CREATE TENSOR B[20, 25] TYPE f64;");
  s_ok("FILL A UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL b UNIFORM(-1, 1) SEED 2;");
  s_ok("FILL T UNIFORM(-1, 1) SEED 3;");
  s_ok("FILL B UNIFORM(-1, 1) SEED 4;");
  te_result *a = s_get("A"), *bv = s_get("b"), *t = s_get("T"), *bm = s_get("B");
  static double outer[30 * 25], tb[30 * 25];
  for (int i = 0; i < 30; i++)
    for (int j = 0; j < 25; j++) {
      double r = 0, v = 0;
      for (int k = 0; k < 20; k++) {
        r += a->values[i * 20 + k];
        for (int l = 0; l < 6; l++) v += t->values[(i * 20 + k) * 6 + l] * bm->values[k * 25 + j];
      }
      outer[i * 25 + j] = r * bv->values[j];
      tb[i * 25 + j] = v;
    }
  for (int layout = 0; layout < 2; layout++) {
    s_ok(layout ? "SET layout = declared;" : "SET layout = auto;");
    te_result *r = s_explain("EXPLAIN C[i,j] = A[i,k] * b[j];");
    cr_assert(strstr(r->text, "temporary _t1 <i>") && strstr(r->text, "A[i,k] SUM over <k>") &&
                  strstr(r->text, "(_t1[i] * b[j])"),
              "%s", r->text);
    te_result_free(&r);
    s_ok("C[i,j] = A[i,k] * b[j];");
    te_result *c = s_get("C");
    s_close_to(c, outer, 30 * 25, 1e-12);
    te_result_free(&c);
    r = s_explain("EXPLAIN D[i,j] = SUM(T[i,k,l] * B[k,j]);");
    cr_assert(strstr(r->text, "T[i,k,l] SUM over <l>") && strstr(r->text, "kernel gemm"), "%s",
              r->text);
    te_result_free(&r);
    s_ok("D[i,j] = SUM(T[i,k,l] * B[k,j]);");
    te_result *d = s_get("D");
    s_close_to(d, tb, 30 * 25, 1e-12);
    te_result_free(&d);
  }
  te_result *all[] = {a, bv, t, bm};
  for (int i = 0; i < 4; i++) te_result_free(&all[i]);
}

/* A Gram product, X^T X or X X^T, under chunkings that give its output
** one chunk or tiles: the values are the reference's, a Transform
** applied after the sums. */
Test(engine, gram_products_under_every_chunking) {
  enum { R = 300, C = 100 };
  static const char *chunks[] = {"CHUNK [300, 100]", "CHUNK [70, 100]", "CHUNK [300, 40]"};
  static double wg[C * C], wh[R * R];
  for (int c = 0; c < 3; c++) {
    char q[160];
    s_ok("DROP TENSOR IF EXISTS X;");
    snprintf(q, sizeof q, "CREATE TENSOR X[300, 100] %s TYPE f64;", chunks[c]);
    s_ok(q);
    s_ok("FILL X UNIFORM(-1, 1) SEED 9;");
    te_result *r = s_explain("EXPLAIN G[i,j] = X[n,i] * X[n,j];");
    cr_assert(strstr(r->text, "kernel gemm, syrk on the diagonal blocks"), "%s", r->text);
    te_result_free(&r);
    s_ok("G[i,j] = X[n,i] * X[n,j];");
    s_ok("H[n,m] = relu(SUM(X[n,d] * X[m,d]) - 0.5);");
    te_result *x = s_get("X"), *g = s_get("G"), *h = s_get("H");
    for (int i = 0; i < C; i++)
      for (int j = 0; j < C; j++) {
        wg[i * C + j] = 0;
        for (int n = 0; n < R; n++) wg[i * C + j] += x->values[n * C + i] * x->values[n * C + j];
      }
    for (int n = 0; n < R; n++)
      for (int m = 0; m < R; m++) {
        double v = 0;
        for (int d = 0; d < C; d++) v += x->values[n * C + d] * x->values[m * C + d];
        wh[n * R + m] = v - 0.5 > 0 ? v - 0.5 : 0;
      }
    s_close_to(g, wg, C * C, 1e-12);
    s_close_to(h, wh, R * R, 1e-12);
    te_result *all[] = {x, g, h};
    for (int i = 0; i < 3; i++) te_result_free(&all[i]);
  }
  /* G in 40 x 40 blocks as declared: those below the diagonal are made
  ** from their mirrors, and G is exactly symmetric */
  s_ok("SET layout = declared;");
  te_result *r = s_explain("EXPLAIN G[i,j] = X[n,i] * X[n,j];");
  cr_assert(strstr(r->text, "blocks below the diagonal transposed from their mirrors"), "%s", r->text);
  te_result_free(&r);
  r = s_explain("EXPLAIN (FORMAT JSON) G[i,j] = X[n,i] * X[n,j];");
  cr_assert(strstr(r->text, "\"blocks_from_mirrors\": true"), "%s", r->text);
  te_result_free(&r);
  s_ok("G[i,j] = X[n,i] * X[n,j];");
  te_result *g = s_get("G");
  for (int i = 0; i < C; i++)
    for (int j = 0; j < i; j++) cr_assert_eq(g->values[i * C + j], g->values[j * C + i], "G[%d,%d]", i, j);
  s_close_to(g, wg, C * C, 1e-12);
  te_result_free(&g);
  /* and a covariance's, its factors one function of X and mu */
  s_ok("mu[d] = MEAN(X[n,d]);");
  const char *cov = "V[i,j] = SUM((X[n,i] - mu[i]) * (X[n,j] - mu[j])) / 299;";
  char q[128];
  snprintf(q, sizeof q, "EXPLAIN %s", cov);
  r = s_explain(q);
  cr_assert(strstr(r->text, "blocks below the diagonal transposed from their mirrors"), "%s", r->text);
  te_result_free(&r);
  s_ok(cov);
  te_result *x = s_get("X"), *v = s_get("V");
  double mu[C];
  for (int d = 0; d < C; d++) {
    mu[d] = 0;
    for (int k = 0; k < R; k++) mu[d] += x->values[k * C + d] / R;
  }
  for (int i = 0; i < C; i++)
    for (int j = 0; j < C; j++) {
      double w = 0;
      for (int k = 0; k < R; k++) w += (x->values[k * C + i] - mu[i]) * (x->values[k * C + j] - mu[j]);
      wg[i * C + j] = w / 299;
      if (j < i) cr_assert_eq(v->values[i * C + j], v->values[j * C + i], "V[%d,%d]", i, j);
    }
  s_close_to(v, wg, C * C, 1e-12);
  te_result_free(&x);
  te_result_free(&v);
  s_ok("SET layout = auto;");
}

/* The executor on a Gram product G[i,j] = SUM(X[n,i] * X[n,j]), through a
** backend that counts its calls: a diagonal block goes to syrk (its upper
** triangle, copied across once the block is summed), an off-diagonal one
** to gemm, a deep block in slices of the panel, and so does a product of
** two fused factors whose tiles come out alike (a covariance,
** SUM((X[n,i] - mu[i]) * (X[n,j] - mu[j]))); the values are the
** reference's and the diagonal blocks exactly symmetric.  The cost model
** counts half a diagonal block's terms, a covariance's too. */
static int s_syrk_calls, s_gemm_calls;

static int s_count_syrk(tr_dtype dt, int trans, int64_t n, int64_t k, double alpha, const void *a,
                        int64_t lda, double beta, void *c, int64_t ldc) {
  s_syrk_calls++;
  return tk_backend_get("openblas")->syrk(dt, trans, n, k, alpha, a, lda, beta, c, ldc);
}

static int s_count_gemm(tr_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                        const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb,
                        int64_t sb, double beta, void *c, int64_t ldc, int64_t sc, int64_t batch) {
  s_gemm_calls++;
  return tk_backend_get("openblas")->gemm(dt, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta,
                                          c, ldc, sc, batch);
}

static int s_contract_calls;

static int s_count_contract(const tk_contract *op) {
  s_contract_calls++;
  return tk_backend_get("openblas")->contract(op);
}

enum { S_GR = 600, S_GC = 40 }; /* X is S_GR x S_GC */
typedef struct s_gram {
  tr_tensor x, mu, g;
  double xv[S_GR * S_GC], muv[S_GC], gv[S_GC * S_GC];
  tr_blob *held[64], *mheld[8]; /* X's and mu's chunks: both factors read
                                   the same one, as from a store */
  int fused;                    /* operands X, mu, X, mu: else X, X */
} s_gram;

/* A rank-2 f64 relation's description. */
static void s_gram_meta(tr_tensor *t, const char *name, const int64_t *shape, const int64_t *chunk) {
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->dtype = TR_F64;
  t->rank = 2;
  for (int d = 0; d < 2; d++) t->shape[d] = shape[d], t->chunk[d] = chunk[d];
}

/* Chunk lin of rank-2 f64 relation m between its row-major values `all`
** and the chunk's own row-major `chunk`: into the chunk (out) or back. */
static void s_chunk_copy(const tr_tensor *m, int64_t lin, double *all, double *chunk, int out) {
  int64_t key[2], ext[2];
  tr_key_from_linear(m, lin, key);
  tr_chunk_extent(m, key, ext);
  for (int64_t r = 0; r < ext[0]; r++)
    for (int64_t c = 0; c < ext[1]; c++) {
      double *v = &all[(key[0] * m->chunk[0] + r) * m->shape[1] + key[1] * m->chunk[1] + c];
      if (out) chunk[r * ext[1] + c] = *v;
      else *v = chunk[r * ext[1] + c];
    }
}

static int s_gram_read(void *ctx, int operand, int64_t lin, size_t bytes, tr_blob **out,
                       tr_err *err) {
  s_gram *t = ctx;
  int64_t key[2], ext[2];
  if (t->fused && operand % 2) { /* mu: one value a column */
    cr_assert_lt(lin, 8);
    if (!t->mheld[lin]) {
      int64_t e = t->mu.chunk[0] * (lin + 1) <= S_GC ? t->mu.chunk[0] : S_GC - t->mu.chunk[0] * lin;
      t->mheld[lin] = tr_blob_new((size_t)e * sizeof(double));
      memcpy(tr_blob_data(t->mheld[lin]), t->muv + lin * t->mu.chunk[0], (size_t)e * sizeof(double));
    }
    *out = tr_blob_ref(t->mheld[lin]);
    return TR_OK;
  }
  tr_key_from_linear(&t->x, lin, key);
  tr_chunk_extent(&t->x, key, ext);
  cr_assert_eq(bytes, (size_t)(ext[0] * ext[1]) * sizeof(double));
  cr_assert_lt(lin, 64);
  if (t->held[lin]) {
    *out = tr_blob_ref(t->held[lin]);
    return TR_OK;
  }
  *out = tr_blob_ref(t->held[lin] = tr_blob_new(bytes));
  s_chunk_copy(&t->x, lin, t->xv, tr_blob_data(*out), 1);
  (void)err;
  return TR_OK;
}

static int s_gram_write(void *ctx, int64_t lin, tr_blob *b, tr_err *err) {
  s_gram *t = ctx;
  s_chunk_copy(&t->g, lin, t->gv, tr_blob_data(b), 0);
  (void)err;
  return TR_OK;
}

/* G[i,j] = SUM(X[n,i] * X[n,j]), X S_GR x S_GC in cn x cd chunks: labels
** 0 i, 1 j (kept), 2 n (summed); gemm not yet set. */
static void s_gram_node(ta_node *n, int64_t cn, int64_t cd) {
  memset(n, 0, sizeof *n);
  n->nlabels = 3;
  n->nout = 2;
  n->size[0] = n->size[1] = S_GC;
  n->size[2] = S_GR;
  n->chunk[0] = n->chunk[1] = cd;
  n->chunk[2] = cn;
  n->ninputs = 2;
  n->in[0] = (ta_operand){0, 2, {2, 0}};
  n->in[1] = (ta_operand){0, 2, {2, 1}};
  n->prog.n = 3;
  n->prog.code[0] = (tk_insn){TK_OP_INPUT, 0, 0};
  n->prog.code[1] = (tk_insn){TK_OP_INPUT, 1, 0};
  n->prog.code[2] = (tk_insn){TK_OP_MUL, 0, 0};
  n->agg = TK_AGG_SUM;
  n->drive = -1;
}

/* s_gram_node's n made a covariance, SUM((X[n,i] - mu[i]) * (X[n,j] -
** mu[j])): operands X, mu, X, mu (mu relation 1). */
static void s_cov_node(ta_node *n) {
  static const tk_insn cov[] = {{TK_OP_INPUT, 0, 0}, {TK_OP_INPUT, 1, 0}, {TK_OP_SUB, 0, 0},
                                {TK_OP_INPUT, 2, 0}, {TK_OP_INPUT, 3, 0}, {TK_OP_SUB, 0, 0},
                                {TK_OP_MUL, 0, 0}};
  n->ninputs = 4;
  n->in[0] = (ta_operand){0, 2, {2, 0}};
  n->in[1] = (ta_operand){1, 1, {0}};
  n->in[2] = (ta_operand){0, 2, {2, 1}};
  n->in[3] = (ta_operand){1, 1, {1}};
  n->prog.n = 7;
  memcpy(n->prog.code, cov, sizeof cov);
}

Test(exec, gram_blocks_on_the_diagonal_go_to_syrk) {
  /* X's chunks; and the panel: with 40 x 40 blocks, 256 deep a call
  ** (S_PANEL_MIN), so the last chunking sums each block in 3 syrk calls */
  static const int64_t xchunk[][2] = {{S_GR, S_GC}, {125, S_GC}, {S_GR, 16}, {S_GR, S_GC}};
  static const int64_t panel[] = {0, 0, 0, 40 * 40 / 2 * 256}, calls[] = {1, 1, 1, 3};
  static s_gram t;
  tk_backend kt = *tk_backend_get("openblas");
  kt.syrk = s_count_syrk;
  kt.gemm = s_count_gemm;
  kt.contract = s_count_contract;
  tk_set_blas_threads(1);
  for (int i = 0; i < S_GR * S_GC; i++) t.xv[i] = sin(i * 0.37) + (i % 11) * 0.01;
  for (int i = 0; i < S_GC; i++) t.muv[i] = 0.25 * cos(i);
  for (size_t cf = 0; cf < 2 * sizeof xchunk / sizeof xchunk[0]; cf++) {
    size_t c = cf / 2;
    t.fused = cf % 2;
    const int64_t xs[2] = {S_GR, S_GC}, gs[2] = {S_GC, S_GC}, gch[2] = {xchunk[c][1], xchunk[c][1]};
    const int64_t ms[1] = {S_GC}, mch[1] = {xchunk[c][1]};
    memset(&t.mu, 0, sizeof t.mu);
    snprintf(t.mu.name, sizeof t.mu.name, "mu");
    t.mu.dtype = TR_F64;
    t.mu.rank = 1;
    t.mu.shape[0] = ms[0];
    t.mu.chunk[0] = mch[0];
    kt.gemm_panel = panel[c];
    s_gram_meta(&t.x, "X", xs, xchunk[c]);
    s_gram_meta(&t.g, "G", gs, gch);
    ta_node n;
    s_gram_node(&n, xchunk[c][0], xchunk[c][1]);
    if (t.fused) s_cov_node(&n); /* twin tiles */
    n.gemm = ta_gemm_ok(&n);
    cr_assert(n.gemm);
    const tr_tensor *in[4] = {&t.x, &t.x};
    if (t.fused) in[1] = &t.mu, in[2] = &t.x, in[3] = &t.mu;
    tx_chunk_io io = {&t, s_gram_read, s_gram_write, NULL};
    tr_err err;
    s_syrk_calls = s_gemm_calls = s_contract_calls = 0;
    cr_assert_eq(tx_node_run(&kt, 1, 1 << 24, &n, in, &t.g, &io, NULL, 0, NULL, &err), TR_OK, "%s",
                 err.msg);
    for (int b = 0; b < 64; b++) tr_blob_unref(&t.held[b]);
    for (int b = 0; b < 8; b++) tr_blob_unref(&t.mheld[b]);
    int64_t blocks = (S_GC + xchunk[c][1] - 1) / xchunk[c][1],
            tuples = (S_GR + xchunk[c][0] - 1) / xchunk[c][0];
    cr_assert_eq(s_syrk_calls, blocks * tuples * calls[c], "chunking %zu: %d syrk, %d gemm", c,
                 s_syrk_calls, s_gemm_calls);
    cr_assert_eq(s_gemm_calls, (blocks * blocks - blocks) * tuples, "chunking %zu", c);
    /* a fused factor's tile made for each factor, once on the diagonal */
    cr_assert_eq(s_contract_calls, t.fused ? (2 * blocks * blocks - blocks) * tuples : 0,
                 "chunking %zu: %d tiles made", c, s_contract_calls);
    for (int i = 0; i < S_GC; i++)
      for (int j = 0; j < S_GC; j++) {
        double w = 0, mi = t.fused ? t.muv[i] : 0, mj = t.fused ? t.muv[j] : 0;
        for (int r = 0; r < S_GR; r++) w += (t.xv[r * S_GC + i] - mi) * (t.xv[r * S_GC + j] - mj);
        cr_assert(fabs(t.gv[i * S_GC + j] - w) <= 1e-12 * (1 + fabs(w)), "chunking %zu G[%d,%d]", c,
                  i, j);
        if (i / xchunk[c][1] == j / xchunk[c][1])
          cr_assert_eq(t.gv[i * S_GC + j], t.gv[j * S_GC + i], "chunking %zu G[%d,%d]", c, i, j);
      }
    /* what the model counts: half of a diagonal tuple's terms (the
    ** covariance's factors are one function of X and mu, its i and j
    ** swapped: its twins too), and a block below the diagonal is its
    ** mirror's transpose */
    const int64_t diag[3] = {0, 0, 0}, off[3] = {0, 1, 0}, below[3] = {1, 0, 0};
    cr_assert_eq(ta_gemm_share(&n, diag), 0.5);
    if (blocks > 1) cr_assert(ta_gemm_share(&n, off) == 1 && ta_gemm_mirror(&n, below, NULL));
  }
}

/* With node.mirror a Gram product's blocks below the diagonal are the
** transposes of their mirrors, made in the same task: X 600 x 40 in
** 16-wide column strips makes 3 x 3 blocks of G (the last 8 wide, so
** mirrored blocks are 16 x 8 and 8 x 16), 3 on the diagonal (syrk), 3
** above it (gemm) and 3 below (copies); G is the reference's and exactly
** symmetric.  A block whose mirror is not among the chunks asked for is
** computed (its mirror is made on another site). */
Test(exec, gram_blocks_below_the_diagonal_are_their_mirrors_transposed) {
  static s_gram t;
  tk_backend kt = *tk_backend_get("openblas");
  kt.syrk = s_count_syrk;
  kt.gemm = s_count_gemm;
  kt.gemm_panel = 0;
  tk_set_blas_threads(1);
  for (int i = 0; i < S_GR * S_GC; i++) t.xv[i] = sin(i * 0.37) + (i % 11) * 0.01;
  const int64_t xs[2] = {S_GR, S_GC}, xch[2] = {S_GR, 16}, gs[2] = {S_GC, S_GC}, gch[2] = {16, 16};
  s_gram_meta(&t.x, "X", xs, xch);
  s_gram_meta(&t.g, "G", gs, gch);
  ta_node n;
  s_gram_node(&n, S_GR, 16);
  n.gemm = ta_gemm_ok(&n);
  n.mirror = 1;
  const int64_t below[3] = {1, 0, 0}, above[3] = {0, 1, 0}, diag[3] = {2, 2, 0};
  int64_t mk[3];
  cr_assert(ta_gemm_mirror(&n, below, mk) && mk[0] == 0 && mk[1] == 1);
  cr_assert(!ta_gemm_mirror(&n, above, NULL) && !ta_gemm_mirror(&n, diag, NULL));
  /* no mirror unless the factors are one function of the same relations,
  ** i and j swapped: (X[n,i] - mu[i]) * (X[n,j] + mu[j]), (X[n,i] - 1) *
  ** (X[n,j] - 2), X[n,i] * Y[n,j] */
  ta_node o = n;
  s_cov_node(&o);
  o.prog.code[5].op = TK_OP_ADD;
  cr_assert(ta_gemm_ok(&o) && !ta_gemm_mirror(&o, below, NULL));
  o.prog.code[5].op = TK_OP_SUB;
  cr_assert(ta_gemm_mirror(&o, below, NULL), "the covariance's factors");
  o.ninputs = 2;
  static const tk_insn consts[] = {{TK_OP_INPUT, 0, 0}, {TK_OP_CONST, 0, 1}, {TK_OP_SUB, 0, 0},
                                   {TK_OP_INPUT, 1, 0}, {TK_OP_CONST, 0, 2}, {TK_OP_SUB, 0, 0},
                                   {TK_OP_MUL, 0, 0}};
  o.in[1] = n.in[1];
  memcpy(o.prog.code, consts, sizeof consts);
  cr_assert(ta_gemm_ok(&o) && !ta_gemm_mirror(&o, below, NULL));
  o = n;
  o.in[1].rel = 1;
  cr_assert(!ta_gemm_mirror(&o, below, NULL));
  const tr_tensor *in[2] = {&t.x, &t.x};
  tx_chunk_io io = {&t, s_gram_read, s_gram_write, NULL};
  tr_err err;
  /* all nine blocks; then blocks (1,0), (2,0) and (0,2) alone: (1,0)'s
  ** mirror is not there, (2,0)'s is */
  static const int64_t some[] = {3, 6, 2};
  for (int run = 0; run < 2; run++) {
    for (int i = 0; i < S_GC * S_GC; i++) t.gv[i] = NAN;
    s_syrk_calls = s_gemm_calls = 0;
    cr_assert_eq(tx_node_run(&kt, 2, 1 << 24, &n, in, &t.g, &io, run ? some : NULL, run ? 3 : 0, NULL,
                             &err),
                 TR_OK, "%s", err.msg);
    cr_assert_eq(s_syrk_calls, run ? 0 : 3);
    cr_assert_eq(s_gemm_calls, run ? 2 : 3, "run %d: %d gemm calls", run, s_gemm_calls);
    for (int i = 0; i < S_GC; i++)
      for (int j = 0; j < S_GC; j++) {
        int64_t lin = i / 16 * 3 + j / 16;
        if (run && lin != 3 && lin != 6 && lin != 2) continue;
        double w = 0;
        for (int r = 0; r < S_GR; r++) w += t.xv[r * S_GC + i] * t.xv[r * S_GC + j];
        cr_assert(fabs(t.gv[i * S_GC + j] - w) <= 1e-12 * (1 + fabs(w)), "run %d G[%d,%d]", run, i, j);
        if (!run || lin != 3) cr_assert_eq(t.gv[i * S_GC + j], t.gv[j * S_GC + i], "G[%d,%d]", i, j);
      }
  }
  for (int b = 0; b < 64; b++) tr_blob_unref(&t.held[b]);
  /* the flag travels in the task, beside gemm; without gemm it is malformed */
  for (int gemm = 1; gemm >= 0; gemm--) {
    tx_task task, got;
    tn_wbuf b = {0};
    memset(&task, 0, sizeof task);
    task.kind = TX_TASK_NODE;
    task.node = n;
    task.node.gemm = gemm;
    task.in_meta[0] = task.in_meta[1] = t.x;
    task.out_meta = t.g;
    tx_task_encode(&task, &b);
    int rc = tx_task_decode(b.p, b.n, &got, &err), li, lj;
    cr_assert_eq(rc, gemm ? TR_OK : TR_EINVAL, "%s", err.msg);
    if (gemm) cr_assert(got.node.mirror && got.node.gemm);
    /* a worker knows the two operands read one relation (X) */
    if (gemm) cr_assert(ta_gram_labels(&got.node, &li, &lj) && li == 0 && lj == 1);
    if (!rc) tx_task_free(&got);
    tn_wbuf_free(&b);
  }
  /* and that two relations alike but for their names are two: the
  ** product of a 10-operand EinSum's step was taken for a Gram product */
  tx_task task, got;
  tn_wbuf b = {0};
  memset(&task, 0, sizeof task);
  task.kind = TX_TASK_NODE;
  task.node = n;
  task.node.mirror = 0;
  task.node.in[1].rel = 1;
  task.in_meta[0] = task.in_meta[1] = t.x;
  snprintf(task.in_meta[1].name, sizeof task.in_meta[1].name, "Y");
  task.out_meta = t.g;
  /* its input chunks listed out of order (both operands', last chunk
  ** first): a worker finds each one listed, and none that is not */
  int64_t nx = tr_nchunks(&t.x), ins_lin[16];
  int ins_op[16];
  uint64_t ins_id[16];
  cr_assert_leq(2 * nx, 16);
  for (int64_t q = 0; q < 2 * nx; q++) {
    ins_op[q] = (int)(q % 2);
    ins_lin[q] = nx - 1 - q / 2;
    ins_id[q] = 100 + (uint64_t)q;
  }
  task.nin = 2 * nx;
  task.in_op = ins_op;
  task.in_lin = ins_lin;
  task.in_id = ins_id;
  tx_task_encode(&task, &b);
  cr_assert_eq(tx_task_decode(b.p, b.n, &got, &err), TR_OK, "%s", err.msg);
  int li, lj;
  cr_assert(!ta_gram_labels(&got.node, &li, &lj));
  for (int64_t q = 0; q < 2 * nx; q++) {
    int64_t i = tx_task_input(&got, ins_op[q], ins_lin[q]);
    cr_assert(i >= 0 && got.in_id[i] == ins_id[q], "operand %d chunk %lld: input %lld", ins_op[q],
              (long long)ins_lin[q], (long long)i);
  }
  cr_assert_eq(tx_task_input(&got, 0, nx), -1);
  cr_assert_eq(tx_task_input(&got, 1, -1), -1);
  cr_assert_eq(tx_task_input(&got, 2, 0), -1);
  tx_task_free(&got);
  tn_wbuf_free(&b);
}

/* A site's last chunks, the ones that do not fill its threads evenly,
** are made in pieces of their rows, one a thread (ta_tail_pieces): C =
** relu(A B), A 700 x 64 in 256-row chunks (256, 256 and 188 rows), on 2
** threads, makes chunks 0 and 1 whole and chunk 2 in two pieces, 88 and
** 100 rows (at a multiple of 8); each chunk is stored once, fused
** transform included, with the reference's values.  A piece that fails
** fails the node and its chunk is not stored; on 3 threads nothing is
** left over and every chunk runs whole; in 200-row chunks on 3 threads
** (pieces under TA_PIECE_MIN) the tail runs whole. */
enum { S_TR = 700, S_TK = 64, S_TN = 48 };
typedef struct s_tail {
  tr_tensor a, b, c;
  double av[S_TR * S_TK], bv[S_TK * S_TN], cv[S_TR * S_TN];
  int stored[8];
  pthread_mutex_t mu;
  int64_t rows[16]; /* the m of each gemm call */
  int ncalls, fail_m;
} s_tail;
static s_tail s_tl;

static int s_tail_gemm(tr_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                       const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb,
                       int64_t sb, double beta, void *c, int64_t ldc, int64_t sc, int64_t batch) {
  pthread_mutex_lock(&s_tl.mu);
  if (s_tl.ncalls < 16) s_tl.rows[s_tl.ncalls] = m;
  s_tl.ncalls++;
  pthread_mutex_unlock(&s_tl.mu);
  if (m == s_tl.fail_m) return TR_ENOMEM;
  return tk_backend_get("openblas")->gemm(dt, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta,
                                          c, ldc, sc, batch);
}

static int s_tail_read(void *ctx, int operand, int64_t lin, size_t bytes, tr_blob **out, tr_err *err) {
  s_tail *t = ctx;
  const tr_tensor *m = operand ? &t->b : &t->a;
  int64_t key[2], ext[2];
  tr_key_from_linear(m, lin, key);
  tr_chunk_extent(m, key, ext);
  cr_assert_eq(bytes, (size_t)(ext[0] * ext[1]) * sizeof(double));
  *out = tr_blob_new(bytes);
  s_chunk_copy(m, lin, operand ? t->bv : t->av, tr_blob_data(*out), 1);
  (void)err;
  return TR_OK;
}

static int s_tail_write(void *ctx, int64_t lin, tr_blob *b, tr_err *err) {
  s_tail *t = ctx;
  pthread_mutex_lock(&t->mu);
  t->stored[lin]++;
  pthread_mutex_unlock(&t->mu);
  s_chunk_copy(&t->c, lin, t->cv, tr_blob_data(b), 0);
  (void)err;
  return TR_OK;
}

Test(exec, a_sites_last_chunks_are_made_in_pieces_by_every_thread) {
  s_tail *t = &s_tl;
  pthread_mutex_init(&t->mu, NULL);
  for (int i = 0; i < S_TR * S_TK; i++) t->av[i] = sin(i * 0.31);
  for (int i = 0; i < S_TK * S_TN; i++) t->bv[i] = cos(i * 0.17);
  tk_backend kt = *tk_backend_get("openblas");
  kt.gemm = s_tail_gemm;
  tk_set_blas_threads(1);
  struct {
    int threads, chunk, fail;
    int64_t want[4]; /* the calls' rows, in order of size */
  } cs[] = {{2, 256, 0, {88, 100, 256, 256}}, {2, 256, 1, {0}}, {3, 256, 0, {188, 256, 256}},
            {3, 200, 0, {100, 200, 200, 200}}};
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    int64_t ch = cs[c].chunk;
    const int64_t as[2] = {S_TR, S_TK}, ac[2] = {ch, S_TK}, bs[2] = {S_TK, S_TN}, cs2[2] = {S_TR, S_TN},
                  cc[2] = {ch, S_TN};
    s_gram_meta(&t->a, "A", as, ac);
    s_gram_meta(&t->b, "B", bs, bs);
    s_gram_meta(&t->c, "C", cs2, cc);
    ta_node n;
    memset(&n, 0, sizeof n);
    n.nlabels = 3; /* i, j kept; k summed */
    n.nout = 2;
    n.size[0] = S_TR, n.size[1] = S_TN, n.size[2] = S_TK;
    n.chunk[0] = ch, n.chunk[1] = S_TN, n.chunk[2] = S_TK;
    n.ninputs = 2;
    n.in[0] = (ta_operand){0, 2, {0, 2}};
    n.in[1] = (ta_operand){1, 2, {2, 1}};
    n.prog.n = 3;
    n.prog.code[0] = (tk_insn){TK_OP_INPUT, 0, 0};
    n.prog.code[1] = (tk_insn){TK_OP_INPUT, 1, 0};
    n.prog.code[2] = (tk_insn){TK_OP_MUL, 0, 0};
    n.post.n = 2;
    n.post.code[0] = (tk_insn){TK_OP_INPUT, 0, 0};
    n.post.code[1] = (tk_insn){TK_OP_RELU, 0, 0};
    n.agg = TK_AGG_SUM;
    n.drive = -1;
    n.gemm = ta_gemm_ok(&n);
    cr_assert(n.gemm);
    const tr_tensor *in[2] = {&t->a, &t->b};
    tx_chunk_io io = {t, s_tail_read, s_tail_write, NULL};
    memset(t->stored, 0, sizeof t->stored);
    memset(t->cv, 0, sizeof t->cv);
    t->ncalls = 0;
    t->fail_m = cs[c].fail ? 100 : -1;
    tr_err err;
    int rc = tx_node_run(&kt, cs[c].threads, 1 << 24, &n, in, &t->c, &io, NULL, 0, NULL, &err);
    int64_t nchunks = (S_TR + ch - 1) / ch;
    if (cs[c].fail) {
      cr_assert_eq(rc, TR_ENOMEM, "case %zu: %d", c, rc);
      cr_assert_eq(t->stored[nchunks - 1], 0, "the chunk of the failed piece is not stored");
      continue;
    }
    cr_assert_eq(rc, TR_OK, "case %zu: %s", c, err.msg);
    int64_t want = 0;
    while (want < 4 && cs[c].want[want]) want++;
    cr_assert_eq(t->ncalls, want, "case %zu: %d calls", c, t->ncalls);
    for (int a = 1; a < t->ncalls; a++) /* in order of size */
      for (int b = a; b > 0 && t->rows[b] < t->rows[b - 1]; b--) {
        int64_t x = t->rows[b];
        t->rows[b] = t->rows[b - 1];
        t->rows[b - 1] = x;
      }
    for (int a = 0; a < want; a++)
      cr_assert_eq(t->rows[a], cs[c].want[a], "case %zu: call %d of %lld rows", c, a, (long long)t->rows[a]);
    for (int64_t l = 0; l < nchunks; l++)
      cr_assert_eq(t->stored[l], 1, "case %zu: chunk %lld stored once", c, (long long)l);
    for (int i = 0; i < S_TR; i++)
      for (int j = 0; j < S_TN; j++) {
        double w = 0;
        for (int k = 0; k < S_TK; k++) w += t->av[i * S_TK + k] * t->bv[k * S_TN + j];
        w = w > 0 ? w : 0;
        cr_assert(fabs(t->cv[i * S_TN + j] - w) <= 1e-12 * (1 + fabs(w)), "case %zu C[%d,%d] %g, want %g",
                  c, i, j, t->cv[i * S_TN + j], w);
      }
  }
  pthread_mutex_destroy(&t->mu);
}

/* Ten factors over 17 labels: no kernel takes them in one join, the
** pairwise steps each fit.  Under the declared layout (no steps) the
** seven labels each read by one factor alone are summed in that factor
** first, which leaves 11 in the join; a product whose 17 labels are each
** on two factors is still too wide for one. */
Test(engine, product_of_ten_factors_beyond_sixteen_labels) {
  /* a ring of 10 matrices 2 x 2 (labels a..j) and 7 vectors on the
  ** labels k..q, each read by one matrix: 17 labels, all summed */
  const char *ring = "abcdefghij", *vec = "klmnopq";
  char st[1024];
  size_t o = (size_t)snprintf(st, sizeof st, "s[] = ");
  for (int f = 0; f < 10; f++) {
    char def[96];
    snprintf(def, sizeof def, "CREATE TENSOR M%d[2, 2, %d];", f, f < 7 ? 3 : 1);
    s_ok(def);
    snprintf(def, sizeof def, "FILL M%d UNIFORM(0, 1) SEED %d;", f, f + 1);
    s_ok(def);
    o += (size_t)snprintf(st + o, sizeof st - o, "%sM%d[%c,%c,%c]", f ? " * " : "", f, ring[f],
                          ring[(f + 1) % 10], f < 7 ? vec[f] : 'r');
  }
  snprintf(st + o, sizeof st - o, ";");
  /* r appears in three factors of size 1: with k..q, 18 labels */
  static const char *wide[] = {
      "CREATE TENSOR T1[1, 1, 1, 1, 1, 1, 1, 1];", "CREATE TENSOR T2[1, 1, 1, 1, 1, 1, 1, 1];",
      "CREATE TENSOR T3[1, 1, 1, 1, 1, 1, 1, 1];", "CREATE TENSOR T4[1, 1, 1, 1, 1, 1, 1, 1];",
      "CREATE TENSOR T5[2];", "FILL T1 ONES;", "FILL T2 ONES;", "FILL T3 ONES;", "FILL T4 ONES;",
      "FILL T5 ONES;"};
  for (size_t w = 0; w < sizeof wide / sizeof wide[0]; w++) s_ok(wide[w]);
  const char *shared = "w[] = T1[a,b,c,d,e,f,g,h] * T2[a,b,c,d,i,j,k,l] * T3[e,f,g,h,m,n,o,p] * "
                       "T4[i,j,k,l,m,n,o,p] * T5[q] * T5[q];";
  s_ok("SET layout = declared;");
  cr_assert(strstr(s_fails(shared, TR_EINVAL), "too many labels in one aggregation"));
  s_ok(st);
  te_result *first = s_get("s");
  s_ok("SET layout = auto;");
  s_ok(shared);
  te_result *wv = s_get("w");
  s_close_to(wv, (double[]){2}, 1, 1e-12);
  te_result_free(&wv);
  s_ok(st);
  /* the reference: the trace of the product of the 10 matrices, each
  ** summed over its own vector label */
  double m[10][2][2] = {{{0}}}, acc[2][2] = {{1, 0}, {0, 1}};
  for (int f = 0; f < 10; f++) {
    char name[8];
    snprintf(name, sizeof name, "M%d", f);
    te_result *r = s_get(name);
    int n3 = f < 7 ? 3 : 1;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++)
        for (int z = 0; z < n3; z++) m[f][i][j] += r->values[(i * 2 + j) * n3 + z];
    te_result_free(&r);
    double t[2][2] = {{0}};
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++)
        for (int k = 0; k < 2; k++) t[i][j] += acc[i][k] * m[f][k][j];
    memcpy(acc, t, sizeof t);
  }
  te_result *r = s_get("s");
  s_close_to(r, (double[]){acc[0][0] + acc[1][1]}, 1, 1e-4);
  s_close_to(first, (double[]){acc[0][0] + acc[1][1]}, 1, 1e-4); /* the declared layout's */
  te_result_free(&r);
  te_result_free(&first);
}

/* The plan marked chosen in EXPLAIN text: its name, in out. */
static void s_chosen(const char *text, char *out, size_t cap) {
  const char *end = strstr(text, "  <- chosen"), *start = end;
  cr_assert(end, "no plan marked chosen: %s", text);
  while (start > text && start[-1] != '\n') start--;
  const char *name = strstr(start, " s  ");
  cr_assert(name && name < end, "%s", text);
  name += 4;
  snprintf(out, cap, "%.*s", (int)(end - name), name);
}

/* A statement run again is optimized in its remembered chunkings for the
** IA plan chosen then alone (the rewrite search is most of a short
** statement's optimizing): EXPLAIN ANALYZE of it says so and lists that
** plan, the one the full search chose; EXPLAIN without ANALYZE still
** costs every alternative; the values stay the same. */
Test(engine, a_remembered_statement_costs_only_its_plan) {
  s_ok("CREATE TENSOR A[64, 48] CHUNK [64, 12];");
  s_ok("CREATE TENSOR B[48, 40] CHUNK [48, 10];");
  s_ok("CREATE TENSOR C[40, 32] CHUNK [40, 8];");
  s_ok("FILL A UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL B UNIFORM(-1, 1) SEED 2;");
  s_ok("FILL C UNIFORM(-1, 1) SEED 3;");
  const char *st = "D[i,l] = A[i,j] * B[j,k] * C[k,l];", *x = "EXPLAIN D[i,l] = A[i,j] * B[j,k] * C[k,l];",
             *xa = "EXPLAIN ANALYZE D[i,l] = A[i,j] * B[j,k] * C[k,l];";
  char first[400], again[400];
  te_result *r = s_explain(x);
  cr_assert(strstr(r->text, "distinct of"), "%s", r->text);
  s_chosen(r->text, first, sizeof first);
  te_result_free(&r);
  s_ok(st);
  te_result *d1 = s_get("D");
  r = s_explain(xa);
  cr_assert(strstr(r->text, "Alternatives: the IA plan remembered with the chunkings"), "%s", r->text);
  s_chosen(r->text, again, sizeof again);
  cr_assert_str_eq(again, first);
  te_result_free(&r);
  r = s_explain(x);
  cr_assert(strstr(r->text, "chunkings remembered") && strstr(r->text, "distinct of"), "%s", r->text);
  te_result_free(&r);
  s_ok(st);
  te_result *d2 = s_get("D");
  cr_assert_eq(memcmp(d1->values, d2->values, sizeof(double) * 64 * 32), 0, "the same values");
  te_result_free(&d1);
  te_result_free(&d2);
}

/* A statement run again takes the chunkings its first run's search chose
** (the session's memo) and computes the same values; stored in another
** chunking, its operand makes the search run again. */
Test(engine, a_repeated_statement_remembers_its_layout) {
  s_ok("CREATE TENSOR A[96, 80] CHUNK [96, 80];");
  s_ok("CREATE TENSOR B[80, 64] CHUNK [20, 64];");
  s_ok("FILL A UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL B UNIFORM(-1, 1) SEED 2;");
  const char *st = "C[i,j] = tanh(SUM(A[i,k] * B[k,j]));", *x = "EXPLAIN C[i,j] = tanh(SUM(A[i,k] * B[k,j]));";
  te_result *r = s_explain(x);
  cr_assert(strstr(r->text, "chunkings chosen by") && !strstr(r->text, "remembered"), "%s", r->text);
  te_result_free(&r);
  s_ok(st);
  te_result *c1 = s_get("C");
  r = s_explain(x);
  cr_assert(strstr(r->text, "chunkings remembered from an earlier statement"), "%s", r->text);
  te_result_free(&r);
  s_ok(st);
  te_result *c2 = s_get("C");
  cr_assert_eq(memcmp(c1->values, c2->values, sizeof(double) * 96 * 64), 0, "the same values");
  /* B stored anew in other chunks: a new key */
  s_ok("DROP TENSOR B;");
  s_ok("CREATE TENSOR B[80, 64] CHUNK [80, 16];");
  s_ok("FILL B UNIFORM(-1, 1) SEED 2;");
  r = s_explain(x);
  cr_assert(strstr(r->text, "chunkings chosen by") && !strstr(r->text, "remembered"), "%s", r->text);
  te_result_free(&r);
  s_ok(st);
  te_result *c3 = s_get("C");
  s_close_to(c3, c1->values, 96 * 64, 1e-5);
  te_result_free(&c1);
  te_result_free(&c2);
  te_result_free(&c3);
}

/* A product over a tensor declared in tiny chunks: its declared
** chunking's 32768 join tuples, a kernel call each, take longer than the
** chunking the search finds by far, so the declared plans are not walked
** (a 400 x 400 product in 2 x 2 chunks had the optimizer search for 69 s,
** its run taking 3 s); EXPLAIN says what the bound was.  The values are
** those of the declared layout, which still walks them. */
Test(engine, a_declared_chunking_too_fine_to_win_is_not_searched) {
  s_ok("CREATE TENSOR X[64, 64] CHUNK [2, 2];");
  s_ok("FILL X UNIFORM(-1, 1) SEED 3;");
  const char *st = "Y[i,j] = X[i,k] * X[k,j];";
  te_result *r = s_explain("EXPLAIN Y[i,j] = X[i,k] * X[k,j];");
  cr_assert(strstr(r->text, "the declared chunking over ") && strstr(r->text, "(its join tuples alone, not searched)"),
            "%s", r->text);
  te_result_free(&r);
  r = s_explain("EXPLAIN (FORMAT JSON) Y[i,j] = X[i,k] * X[k,j];");
  cr_assert(strstr(r->text, "\"declared_over_s\": ") && !strstr(r->text, "\"declared_s\""), "%s", r->text);
  te_result_free(&r);
  s_ok(st);
  te_result *a = s_get("Y");
  s_ok("SET layout = declared;");
  s_ok(st);
  te_result *d = s_get("Y");
  s_close_to(a, d->values, 64 * 64, 1e-4);
  te_result_free(&a);
  te_result_free(&d);
  s_ok("SET layout = auto;");
}

Test(engine, declared_output_chunks_are_kept_and_settings_checked) {
  s_ok("CREATE TENSOR A[64, 64] CHUNK [64, 64];");
  s_ok("FILL A ONES;");
  s_ok("CREATE TENSOR C[64, 64] CHUNK [16, 64];");
  s_ok("C[i,j] = A[i,k] * A[k,j];");
  te_result *r = NULL;
  tr_err err;
  cr_assert_eq(te_exec(tf_e, "DESCRIBE C;", 11, &r, &err), TR_OK, "%s", err.msg);
  int kept = 0;
  for (int i = 0; i < r->nrows; i++)
    if (!strcmp(r->cells[i * 2], "chunk")) kept = !strcmp(r->cells[i * 2 + 1], "16 x 64");
  cr_assert(kept, "C keeps the chunks it was declared with");
  te_result_free(&r);
  te_result *c = s_get("C");
  for (int i = 0; i < 64 * 64; i++) cr_assert_eq(c->values[i], 64.0);
  te_result_free(&c);
  cr_assert(strstr(s_fails("SET layout = sideways;", TR_EINVAL), "layout must be one of auto | declared, not 'sideways'"));
  cr_assert(strstr(s_fails("SET nosuch = 1;", TR_ENAME), "settings: layout, print_lines, replication, scheduler, scheduler_lp_seconds, synchronous)"));
  cr_assert(strstr(s_fails("SET scheduler = fastest;", TR_EINVAL), "scheduler must be one of statement | msct | metf | mtopo, not 'fastest'"));
}

/* CALIBRATE fails and keeps the weights when a probe's tensor name is a
** user's (whose data stays), or when interrupted (its tensors go). */
Test(engine, calibrate_failures_keep_the_weights) {
  const char *j = "EXPLAIN (FORMAT JSON) t[i] = _cal_a[i] + 1;";
  s_ok("CREATE TENSOR _cal_a[4];");
  s_ok("FILL _cal_a ONES;");
  cr_assert(strstr(s_fails("CALIBRATE;", TR_EINVAL), "_cal_a exists"));
  te_result *r = s_explain(j);
  cr_assert(strstr(r->text, "\"weights\": {\"fitted\": false"), "%s", r->text);
  te_result_free(&r);
  r = s_get("_cal_a");
  for (int i = 0; i < 4; i++) cr_assert_eq(r->values[i], 1.0);
  te_result_free(&r);
  s_ok("DROP TENSOR _cal_a;");
  te_interrupt(tf_e);
  cr_assert(strstr(s_fails("CALIBRATE;", TR_EINTR), "the previous weights stay"));
  te_interrupt_clear(tf_e);
  s_ok("CREATE TENSOR _cal_a[4];");
  r = s_explain(j);
  cr_assert(strstr(r->text, "\"weights\": {\"fitted\": false"), "%s", r->text);
  te_result_free(&r);
}

/* CALIBRATE on a database of its own: the fitted weights predict every
** probe, are kept in the catalog, and a new session uses them. */
Test(calibrate, fits_keeps_and_reloads_the_weights, .timeout = 300) {
  char dir[] = "/tmp/tradb-calib-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char db[64];
  snprintf(db, sizeof db, "%s/db", dir);
  te_config cfg = {.threads = 1, .local_workers = 2, .self_exe = getenv("TRADB"), .dbpath = db};
  te_engine *e;
  te_result *r = NULL;
  tr_err err;
  const char *j = "EXPLAIN (FORMAT JSON) t[i] = _x[i] + 1;";
  for (int session = 0; session < 2; session++) {
    cr_assert_eq(te_open(&cfg, &e, &err), TR_OK, "%s", err.msg);
    if (!session) {
      cr_assert_eq(te_exec(e, "CREATE TENSOR _x[4];", 20, NULL, &err), TR_OK, "%s", err.msg);
      cr_assert_eq(te_exec(e, "CALIBRATE;", 10, &r, &err), TR_OK, "%s", err.msg);
      cr_assert(r && strstr(r->text, "gemm-2048") && strstr(r->text, "weights (seconds per unit"),
                "%s", r ? r->text : "");
      te_result_free(&r);
    }
    cr_assert_eq(te_exec(e, j, strlen(j), &r, &err), TR_OK, "%s", err.msg);
    cr_assert(strstr(r->text, "\"weights\": {\"fitted\": true"), "session %d: %s", session, r->text);
    te_result_free(&r);
    cr_assert_eq(te_exec(e, "SHOW TENSORS;", 13, &r, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(r->nrows, 1, "the probes' tensors are gone, the user's stays");
    te_result_free(&r);
    te_close(&e);
  }
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  cr_assert_eq(system(rm), 0);
}

/* ---- gemm in panels ------------------------------------------------------------ */

/* The openblas table with a panel small enough that the products below are
** cut in every way: batches, rows, columns and depth. */
static tk_backend s_small_panels(int64_t panel) {
  tk_backend kt = *tk_backend_get("openblas");
  kt.gemm_panel = panel;
  return kt;
}

/* tx_gemm_panels gives what one gemm call gives, in both dtypes, with every
** transpose, alpha and an accumulating beta. */
Test(panels, same_result_as_one_call) {
  static const struct { int64_t B, M, N, K, panel; } shape[] = {
      {3, 64, 64, 64, 1 << 16},      /* batches */
      {1, 1024, 300, 300, 1 << 20},  /* rows, down to 256 */
      {1, 300, 1100, 300, 1 << 20},  /* columns */
      {1, 300, 300, 1500, 1 << 20},  /* depth: later halves add to earlier */
      {2, 600, 520, 700, 1 << 22},   /* all of them */
      {1, 1024, 1024, 64, 0},        /* 0: never cut */
  };
  uint64_t st = 7;
  for (size_t s = 0; s < sizeof shape / sizeof shape[0]; s++)
    for (int dt = TR_F32; dt <= TR_F64; dt++)
      for (int tr = 0; tr < 4; tr++) {
        int64_t B = shape[s].B, M = shape[s].M, N = shape[s].N, K = shape[s].K;
        int ta = tr & 1, tb = tr >> 1;
        size_t esz = tr_dtype_size(dt);
        int64_t na = B * M * K, nb = B * K * N, nc = B * M * N;
        char *a = tr_alloc_aligned((size_t)na * esz), *b = tr_alloc_aligned((size_t)nb * esz);
        char *c1 = tr_alloc_aligned((size_t)nc * esz), *c2 = tr_alloc_aligned((size_t)nc * esz);
        cr_assert(a && b && c1 && c2);
        for (int64_t i = 0; i < na + nb + nc; i++) {
          st = st * 6364136223846793005u + 1442695040888963407u;
          double v = (double)(st >> 11) * 0x1p-53 - 0.5;
          char *p = i < na        ? a + i * esz
                    : i < na + nb ? b + (i - na) * esz
                                  : c1 + (i - na - nb) * esz;
          if (dt == TR_F32) *(float *)p = (float)v;
          else *(double *)p = v;
        }
        memcpy(c2, c1, (size_t)nc * esz);
        tk_backend kt = s_small_panels(shape[s].panel);
        int64_t lda = ta ? M : K, ldb = tb ? K : N;
        cr_assert_eq(kt.gemm(dt, ta, tb, M, N, K, 1.5, a, lda, M * K, b, ldb, K * N, 0.5, c1, N,
                             M * N, B), TR_OK);
        cr_assert_eq(tx_gemm_panels(&kt, NULL, dt, ta, tb, M, N, K, 1.5, a, lda, M * K, b, ldb,
                                    K * N, 0.5, c2, N, M * N, B), TR_OK);
        double tol = dt == TR_F32 ? 1e-4 : 1e-12;
        for (int64_t i = 0; i < nc; i++) {
          double x = dt == TR_F32 ? ((float *)c1)[i] : ((double *)c1)[i];
          double y = dt == TR_F32 ? ((float *)c2)[i] : ((double *)c2)[i];
          cr_assert(fabs(x - y) <= tol * (1 + fabs(x)),
                    "shape %zu %s trans %d element %lld: %g vs %g", s, tr_dtype_name(dt), tr,
                    (long long)i, x, y);
        }
        tr_free_aligned(a);
        tr_free_aligned(b);
        tr_free_aligned(c1);
        tr_free_aligned(c2);
      }
}

/* The token is polled between panels: a cancel during the second panel
** stops the product after it, with TR_EINTR. */
static int s_panel_calls;
static tr_cancel s_panel_token;

static int s_gemm_cancel_at_2(tr_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k,
                              double alpha, const void *a, int64_t lda, int64_t sa, const void *b,
                              int64_t ldb, int64_t sb, double beta, void *c, int64_t ldc,
                              int64_t sc, int64_t batch) {
  if (++s_panel_calls == 2) tr_cancel_set(&s_panel_token);
  return tk_backend_get("openblas")->gemm(dt, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb,
                                          beta, c, ldc, sc, batch);
}

Test(panels, cancel_between_panels) {
  const int64_t n = 1024;
  float *a = tr_alloc_aligned(n * n * 4), *c = tr_alloc_aligned(n * n * 4);
  memset(a, 0, n * n * 4);
  tk_backend kt = s_small_panels(n * n * n / 16); /* 16 panels */
  kt.gemm = s_gemm_cancel_at_2;
  tr_cancel_clear(&s_panel_token);
  s_panel_calls = 0;
  cr_assert_eq(tx_gemm_panels(&kt, &s_panel_token, TR_F32, 0, 0, n, n, n, 1, a, n, 0, a, n, 0, 0,
                              c, n, 0, 1), TR_EINTR);
  cr_assert_eq(s_panel_calls, 2);
  /* set before the call: no panel runs */
  s_panel_calls = 0;
  cr_assert_eq(tx_gemm_panels(&kt, &s_panel_token, TR_F32, 0, 0, n, n, n, 1, a, n, 0, a, n, 0, 0,
                              c, n, 0, 1), TR_EINTR);
  cr_assert_eq(s_panel_calls, 0);
  /* below one panel, a single call */
  tr_cancel_clear(&s_panel_token);
  kt.gemm_panel = n * n * n;
  s_panel_calls = 0;
  cr_assert_eq(tx_gemm_panels(&kt, &s_panel_token, TR_F32, 0, 0, n, n, n, 1, a, n, 0, a, n, 0, 0,
                              c, n, 0, 1), TR_OK);
  cr_assert_eq(s_panel_calls, 1);
  tr_free_aligned(a);
  tr_free_aligned(c);
}

/* A product over a panel is cut along its depth first: calls along K pack
** each factor once, as one call does, where calls along M or N re-pack the
** other factor and leave each BLAS thread a thinner share (4096^3 on two
** threads: 16 calls of 1024 x 1024 outputs 8-10% slower than one call, 16
** of depth 256 as fast). */
static int64_t s_call_shape[64][3];
static int s_ncalls;

static int s_gemm_record(tr_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k,
                         double alpha, const void *a, int64_t lda, int64_t sa, const void *b,
                         int64_t ldb, int64_t sb, double beta, void *c, int64_t ldc, int64_t sc,
                         int64_t batch) {
  if (s_ncalls < 64) {
    s_call_shape[s_ncalls][0] = m;
    s_call_shape[s_ncalls][1] = n;
    s_call_shape[s_ncalls][2] = k;
  }
  s_ncalls++;
  return tk_backend_get("openblas")->gemm(dt, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb,
                                          beta, c, ldc, sc, batch);
}

Test(panels, depth_cut_first) {
  const int64_t m = 512, k = 4096;
  float *a = tr_alloc_aligned(m * k * 4), *b = tr_alloc_aligned(k * m * 4);
  float *c = tr_alloc_aligned(m * m * 4);
  cr_assert(a && b && c);
  for (int64_t i = 0; i < m * k; i++) a[i] = b[i] = (float)(i % 7) - 3;
  tk_backend kt = s_small_panels(m * m * k / 16);
  kt.gemm = s_gemm_record;
  s_ncalls = 0;
  cr_assert_eq(tx_gemm_panels(&kt, NULL, TR_F32, 0, 0, m, m, k, 1, a, k, 0, b, m, 0, 0, c, m, 0, 1),
               TR_OK);
  cr_assert_eq(s_ncalls, 16);
  for (int i = 0; i < s_ncalls; i++)
    cr_assert(s_call_shape[i][0] == m && s_call_shape[i][1] == m && s_call_shape[i][2] == k / 16,
              "call %d: %lld x %lld x %lld, expected %lld x %lld x %lld", i,
              (long long)s_call_shape[i][0], (long long)s_call_shape[i][1],
              (long long)s_call_shape[i][2], (long long)m, (long long)m, (long long)(k / 16));
  /* shallow products still cut their rows and columns */
  s_ncalls = 0;
  cr_assert_eq(tx_gemm_panels(&kt, NULL, TR_F32, 0, 0, m, m, 256, 1, a, k, 0, b, m, 0, 0, c, m, 0,
                              1), TR_OK);
  cr_assert_eq(s_ncalls, 1);
  kt.gemm_panel = m * m * 256 / 4;
  s_ncalls = 0;
  cr_assert_eq(tx_gemm_panels(&kt, NULL, TR_F32, 0, 0, m, m, 256, 1, a, k, 0, b, m, 0, 0, c, m, 0,
                              1), TR_OK);
  cr_assert_eq(s_ncalls, 4);
  cr_assert(s_call_shape[0][0] == m / 2 && s_call_shape[0][1] == m / 2 && s_call_shape[0][2] == 256);
  tr_free_aligned(a);
  tr_free_aligned(b);
  tr_free_aligned(c);
}

/* A block's statements that read nothing another makes run together (one
** phase of tasks); one that reads another's output waits for it.  The
** last statement replaces A, which E reads in the same group: E still
** sees the A the block started with, as it would one statement at a time. */
/* EXPLAIN ANALYZE (FORMAT JSON) COMMIT of the open block: its groups of
** nodes run together must be `groups` (JSON, as "[[1, 2], [3]]"). */
static void s_commit_groups(const char *groups) {
  te_result *r = NULL;
  tr_err err;
  char want[128];
  const char *q = "EXPLAIN ANALYZE (FORMAT JSON) COMMIT;";
  cr_assert_eq(te_exec(tf_e, q, strlen(q), &r, &err), TR_OK, "%s", err.msg);
  snprintf(want, sizeof want, "\"node_groups\": %s", groups);
  cr_assert(strstr(r->text, want), "%s", r->text);
  te_result_free(&r);
}

Test(engine, independent_statements_of_a_block_run_together) {
  s_ok("CREATE TENSOR A[64, 64] CHUNK [32, 64];");
  s_ok("FILL A ONES;");
  s_ok("BEGIN;");
  s_ok("B[i,j] = A[i,j] + 1;");
  s_ok("C[i,j] = A[i,j] * 3;");
  s_ok("D[i,j] = B[i,k] * C[k,j];");
  s_ok("E[i] = SUM(A[i,j]);");
  s_ok("A[i,j] = A[i,j] - 1;");
  s_commit_groups("[[1, 2], [3, 4, 5]]");
  te_result *d = s_get("D"), *e = s_get("E"), *a = s_get("A");
  for (int i = 0; i < 64 * 64; i++) {
    cr_assert_eq(d->values[i], 64.0 * 2 * 3);
    cr_assert_eq(a->values[i], 0.0, "A is replaced after E read it");
  }
  for (int i = 0; i < 64; i++) cr_assert_eq(e->values[i], 64.0);
  te_result_free(&d);
  te_result_free(&e);
  te_result_free(&a);
}

/* A statement that reads another's output where that output is made (an
** elementwise chain, a row sum of it) runs in the same group: its task
** queues behind the producer's on each worker.  Values as one at a time. */
Test(engine, a_chain_read_where_it_is_made_runs_together) {
  s_ok("CREATE TENSOR A[64, 64] CHUNK [32, 64];");
  s_ok("FILL A ONES;");
  s_ok("BEGIN;");
  s_ok("X[i,j] = A[i,j] + 1;");
  s_ok("Y[i,j] = X[i,j] * 3;");
  s_ok("y[i] = SUM(Y[i,j]);");
  s_commit_groups("[[1, 2, 3]]");
  te_result *y = s_get("y");
  for (int i = 0; i < 64; i++) cr_assert_eq(y->values[i], 64.0 * 6);
  te_result_free(&y);
}

/* An engine on 4 local workers of one kernel thread each, with A and B
** created as given and filled. */
static te_engine *s_four_workers(const char *create_a, const char *create_b) {
  te_config cfg = {.threads = 1, .local_workers = 4, .self_exe = getenv("TRADB")};
  te_engine *e;
  tr_err err;
  cr_assert_not_null(cfg.self_exe, "TRADB must name the tradb binary");
  cr_assert_eq(te_open(&cfg, &e, &err), TR_OK, "%s", err.msg);
  const char *setup[] = {create_a, create_b, "FILL A UNIFORM(-1, 1) SEED 1;", "FILL B UNIFORM(-1, 1) SEED 2;"};
  for (int i = 0; i < 4; i++)
    cr_assert_eq(te_exec(e, setup[i], strlen(setup[i]), NULL, &err), TR_OK, "%s", err.msg);
  return e;
}

/* Tensors a and b of e hold the same n values within tol (relative). */
static void s_same_values(te_engine *e, const char *a, const char *b, int n, double tol) {
  te_result *x = NULL, *y = NULL;
  tr_err err;
  char qa[64], qb[64];
  snprintf(qa, sizeof qa, "PRINT %s;", a);
  snprintf(qb, sizeof qb, "PRINT %s;", b);
  cr_assert_eq(te_exec(e, qa, strlen(qa), &x, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(te_exec(e, qb, strlen(qb), &y, &err), TR_OK, "%s", err.msg);
  for (int i = 0; i < n; i++)
    cr_assert(fabs(x->values[i] - y->values[i]) <= tol * (1 + fabs(y->values[i])),
              "element %d: %s %.9g, %s %.9g", i, a, x->values[i], b, y->values[i]);
  te_result_free(&x);
  te_result_free(&y);
}

/* EXPLAIN ANALYZE (FORMAT JSON) query q on e, its measured transfer equal
** to the predicted (caller frees). */
static te_result *s_analyzed_exactly(te_engine *e, const char *q) {
  te_result *r = NULL;
  tr_err err;
  cr_assert_eq(te_exec(e, q, strlen(q), &r, &err), TR_OK, "%s", err.msg);
  const char *pt = strstr(r->text, "\"predicted_transfer_floats\": "), *mt = strstr(r->text, "\"measured_transfer_floats\": ");
  cr_assert(pt && mt, "%s", r->text);
  cr_assert_eq(atoll(pt + strlen("\"predicted_transfer_floats\": ")),
               atoll(mt + strlen("\"measured_transfer_floats\": ")), "%s", r->text);
  return r;
}

/* Run stmt under SET layout = declared on e. */
static void s_declared_run(te_engine *e, const char *stmt) {
  tr_err err;
  const char *set = "SET layout = declared;";
  cr_assert_eq(te_exec(e, set, strlen(set), NULL, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(te_exec(e, stmt, strlen(stmt), NULL, &err), TR_OK, "%s", err.msg);
}

/* The tensors of the tests of products read through the products that
** made them: T1 = A B of rank 600, T2 = C D of rank 1, F and F2. */
static void s_inline_tensors(void) {
  const char *setup[] = {"CREATE TENSOR A[400, 600] CHUNK [128, 600] TYPE f64;", "CREATE TENSOR B[600, 500] TYPE f64;",
                         "CREATE TENSOR C[500, 1] TYPE f64;", "CREATE TENSOR D[1, 500] TYPE f64;",
                         "CREATE TENSOR F[500, 400] TYPE f64;", "CREATE TENSOR F2[500, 2] TYPE f64;",
                         "FILL F2 UNIFORM(-1, 1) SEED 6;", "FILL A UNIFORM(-1, 1) SEED 1;",
                         "FILL B UNIFORM(-1, 1) SEED 2;", "FILL C UNIFORM(-1, 1) SEED 3;",
                         "FILL D UNIFORM(-1, 1) SEED 4;", "FILL F UNIFORM(-1, 1) SEED 5;",
                         "C0[i,k] = C[i,k];"};
  for (size_t i = 0; i < sizeof setup / sizeof *setup; i++) s_ok(setup[i]);
}

/* In a block, a product reading an output that a product made reads it
** through that product's factors where that takes at most half the
** flops and saves 1e8 or more: with T2 = C D an outer product, U2 = T1 T2
** (2e8 flops) runs as (T1 C) D and U4 = T2 F as C (D F), EXPLAIN says so.
** Not where it does not pay (G = T1 T1': through A B it takes more), nor
** where it saves too little to pay for a step (Z = T2 F2, 1e6 flops), nor
** where a tensor of the definition was assigned since: V = T1 T2 after C
** was doubled must read T2 as made from C before.  Every value is the
** block's as written: the same block under the declared layout (no steps,
** nothing read through) on a copy of C. */
Test(engine, block_products_read_through_the_products_that_made_them) {
  s_inline_tensors();
  s_ok("SET layout = declared;");
  s_ok("BEGIN;");
  s_ok("T1d[i,j] = A[i,k] * B[k,j];");
  s_ok("T2d[i,j] = C0[i,k] * D[k,j];");
  s_ok("U2d[i,j] = T1d[i,k] * T2d[k,j];");
  s_ok("U4d[i,j] = T2d[i,k] * F[k,j];");
  s_ok("Gd[i,j] = T1d[i,k] * T1d[j,k];");
  s_ok("Zd[i,j] = T2d[i,k] * F2[k,j];");
  s_ok("C0[i,k] = C0[i,k] * 2;");
  s_ok("Vd[i,j] = T1d[i,k] * T2d[k,j];");
  s_ok("COMMIT;");
  s_ok("SET layout = auto;");
  s_ok("BEGIN;");
  s_ok("T1[i,j] = A[i,k] * B[k,j];");
  s_ok("T2[i,j] = C[i,k] * D[k,j];");
  s_ok("U2[i,j] = T1[i,k] * T2[k,j];");
  s_ok("U4[i,j] = T2[i,k] * F[k,j];");
  s_ok("G[i,j] = T1[i,k] * T1[j,k];");
  s_ok("Z[i,j] = T2[i,k] * F2[k,j];");
  s_ok("C[i,k] = C[i,k] * 2;");
  s_ok("V[i,j] = T1[i,k] * T2[k,j];");
  te_result *r = s_explain("EXPLAIN COMMIT;");
  const char *u2 = "reading the block's outputs through the products that made them: T2 as C[k,k'] * D[k',j]";
  const char *u4 = "reading the block's outputs through the products that made them: T2 as C[i,k'] * D[k',k]";
  cr_assert(strstr(r->text, u2) && strstr(r->text, u4), "%s", r->text);
  cr_assert(strstr(strstr(r->text, u2) + 1, u2) == NULL, "V read T2 through C, assigned since: %s", r->text);
  cr_assert(strstr(strstr(r->text, u4) + 1, u4) == NULL, "Z read T2 through C and D: %s", r->text);
  cr_assert(strstr(r->text, "T1 as") == NULL, "%s", r->text);
  te_result_free(&r);
  s_ok("COMMIT;");
  s_same_values(tf_e, "U2", "U2d", 400 * 500, 1e-12);
  s_same_values(tf_e, "U4", "U4d", 500 * 400, 1e-12);
  s_same_values(tf_e, "G", "Gd", 400 * 400, 1e-12);
  s_same_values(tf_e, "Z", "Zd", 500 * 2, 1e-12);
  s_same_values(tf_e, "V", "Vd", 400 * 500, 1e-12);
  s_same_values(tf_e, "C", "C0", 500, 0);
}

/* A SUM under functions reads through too: a dense layer over a weight
** the block made from low-rank factors, W = U V of rank 8, H =
** relu(SUM(X W)), runs as relu of (X U) V, N D 8 + N 8 H multiply-adds
** where X W takes N D H.  The values are the declared layout's. */
Test(engine, dense_layer_reads_a_weight_through_its_factors) {
  const char *setup[] = {"CREATE TENSOR X[400, 600] CHUNK [100, 600] TYPE f64;",
                         "CREATE TENSOR U[600, 8] TYPE f64;", "CREATE TENSOR V[8, 500] TYPE f64;",
                         "FILL X UNIFORM(-1, 1) SEED 1;",
                         "FILL U UNIFORM(-1, 1) SEED 2;", "FILL V UNIFORM(-1, 1) SEED 3;",
                         "SET layout = declared;", "BEGIN;",
                         "Wd[d,h] = U[d,r] * V[r,h];", "Hd[n,h] = relu(SUM(X[n,d] * Wd[d,h]));",
                         "COMMIT;", "SET layout = auto;", "BEGIN;",
                         "W[d,h] = U[d,r] * V[r,h];", "H[n,h] = relu(SUM(X[n,d] * W[d,h]));"};
  for (size_t i = 0; i < sizeof setup / sizeof *setup; i++) s_ok(setup[i]);
  te_result *r = s_explain("EXPLAIN COMMIT;");
  const char *w = "reading the block's outputs through the products that made them: W as U[d,r] * V[r,h]";
  cr_assert(strstr(r->text, w) && !strstr(strstr(r->text, w) + 1, w), "%s", r->text);
  te_result_free(&r);
  s_ok("COMMIT;");
  s_same_values(tf_e, "H", "Hd", 400 * 500, 1e-12);
}

/* A block of 32 statements, the most a block holds, each one node as
** written, commits: reading U2's T2 through C and D would make it 33
** nodes, one more than a block runs, so U2 runs as written.  (Before, the
** block failed as too large.) */
Test(engine, block_that_fits_as_written_runs_as_written) {
  s_inline_tensors();
  s_ok("U2d[i,j] = A[i,k] * B[k,l] * C[l,m] * D[m,j];");
  s_ok("BEGIN;");
  s_ok("T1[i,j] = A[i,k] * B[k,j];");
  s_ok("T2[i,j] = C[i,k] * D[k,j];");
  for (int i = 0; i < 29; i++) {
    char q[64];
    snprintf(q, sizeof q, "X%d[i,k] = C[i,k] * %d;", i, i);
    s_ok(q);
  }
  s_ok("U2[i,j] = T1[i,k] * T2[k,j];");
  te_result *r = s_explain("EXPLAIN COMMIT;");
  cr_assert(strstr(r->text, "reading the block's outputs") == NULL, "%s", r->text);
  te_result_free(&r);
  s_ok("COMMIT;");
  s_same_values(tf_e, "U2", "U2d", 400 * 500, 1e-12);
}

/* bench-opt's projection stored in row blocks on 4 workers, two replicas
** each (block l on workers l and l + 1): a worker holds two neighbouring
** blocks of X, so a chunking that reads them as one is assembled where
** they are.  The search sees that and runs a plan read in flight
** (measured 0.046-0.048 s) where it cut X first (0.052-0.054 s) while it
** assumed every re-chunked chunk was made on worker lin mod 4; what it
** moves is what it predicted. */
Test(cut, replicas_held_together_are_read_where_they_are, .timeout = 120) {
  te_engine *e = s_four_workers("CREATE TENSOR A[512, 4096] CHUNK [128, 4096] TYPE f32;",
                                "CREATE TENSOR B[4096, 2048] CHUNK [1024, 2048] TYPE f32;");
  te_result *r = s_analyzed_exactly(e, "EXPLAIN ANALYZE (FORMAT JSON) C[i,j] = A[i,k] * B[k,j];");
  const char *c = strstr(r->text, "\"chosen\": {\"name\": \"");
  cr_assert(c && strstr(r->text, "\"chosen_chunking_runs\": true") && !strstr(c, "_cut1"),
            "a chunking read in flight runs: %s", r->text);
  te_result_free(&r);
  te_close(&e);
}

/* bench-opt's dense layer stored in row blocks on 4 workers, two replicas
** each (block l on workers l and l + 1).  Where the 4 workers share at
** most 2 cores, the layer's tuples run on 2 workers that each hold two
** blocks, and B is sent to those 2 only (0.0095-0.0099 s, against
** 0.0109-0.0122 s on all 4 with B sent to each); with a core each, all 4
** join.  The values are the declared layout's, and the measured transfer
** the predicted. */
Test(cut, row_blocks_joined_where_two_are_held, .timeout = 120) {
  te_engine *e = s_four_workers("CREATE TENSOR A[512, 16384] CHUNK [128, 16384] TYPE f32;",
                                "CREATE TENSOR B[16384, 64] CHUNK [4096, 64] TYPE f32;");
  te_result *r = s_analyzed_exactly(e, "EXPLAIN ANALYZE (FORMAT JSON) C[i,j] = tanh(SUM(A[i,k] * B[k,j]));");
  int busy = 0, sites = 0;
  const char *key = "\"state\": \"up\", \"tasks\": ";
  for (const char *s = strstr(r->text, key); s; s = strstr(s + 1, key), sites++) busy += atoi(s + strlen(key)) > 0;
  cr_assert_eq(sites, 4, "%s", r->text);
  cr_assert_eq(busy, tr_ncores() <= 2 ? 2 : 4, "%d workers joined on %d cores: %s", busy, tr_ncores(), r->text);
  te_result_free(&r);
  s_declared_run(e, "D[i,j] = tanh(SUM(A[i,k] * B[k,j]));");
  s_same_values(e, "C", "D", 512 * 64, 1e-5);
  te_close(&e);
}

/* On 4 workers, a common large dimension stored in row blocks (one per
** worker, two replicas): the product partitioned on that dimension needs a
** quarter of every block on each worker.  A plan that cuts the blocks
** where they are first moves only those quarters; the result equals the
** declared layout's (which sends whole blocks), also when the scheduler
** places the tasks, and the measured transfer equals the predicted.  The
** weights are a cluster's whose network is dear (a float sent costs 4x
** the local default, as between machines), where the search takes the
** cut; on local workers it reads two of A's row blocks together instead
** (0.078-0.102 s, against 0.100-0.145 s for the cut, named). */
Test(cut, stored_blocks_cut_where_they_are, .timeout = 120) {
  te_engine *e = s_four_workers("CREATE TENSOR A[512, 32768] CHUNK [128, 32768] TYPE f32;",
                                "CREATE TENSOR B[32768, 512] CHUNK [8192, 512] TYPE f32;");
  e->w.w[TL_C_NET] = 2.5e-9;
  te_result *r = NULL;
  tr_err err;
  const char *q = "EXPLAIN ANALYZE (PLAN '_cut1: LOCAL | C: CMM[k]') C[i,j] = A[i,k] * B[k,j];";
  cr_assert_eq(te_exec(e, q, strlen(q), &r, &err), TR_OK, "%s", err.msg);
  cr_assert(strstr(r->text, "IA plan on 4 sites: _cut1: LOCAL | C: CMM[k]") &&
            strstr(r->text, "stored operands cut into its chunks where they are"), "%s", r->text);
  /* the cut moves nothing: its tasks run where A's blocks are */
  cr_assert(strstr(r->text, "local_join   _cut1                              floats moved            0"),
            "%s", r->text);
  const char *pt = strstr(r->text, "Predicted: "), *mt = strstr(r->text, "measured transfer: ");
  cr_assert(pt && mt, "%s", r->text);
  long long predicted = atoll(strstr(pt, "transfer ") + strlen("transfer "));
  cr_assert_eq(predicted, atoll(mt + strlen("measured transfer: ")), "%s", r->text);
  te_result_free(&r);
  /* placed task by task by the scheduler (FORMAT TRACE schedules; a plan
  ** named is not scheduled, so this is the chosen one): its tasks,
  ** wherever they go, read B's blocks piece by piece */
  const char *tq = "EXPLAIN ANALYZE (FORMAT TRACE) E[i,j] = A[i,k] * B[k,j];";
  cr_assert_eq(te_exec(e, tq, strlen(tq), &r, &err), TR_OK, "%s", err.msg);
  cr_assert(strstr(r->text, "\"name\":\"E#0\"") && strstr(r->text, "\"placed_by\":\"m-SCT\""), "%s", r->text);
  te_result_free(&r);
  s_declared_run(e, "D[i,j] = A[i,k] * B[k,j];");
  s_same_values(e, "C", "D", 512 * 512, 1e-4);
  s_same_values(e, "E", "D", 512 * 512, 1e-4);
  te_close(&e);
}

/* A reader whose callback holds the shell past the workers' liveness
** window (a SAVE writing its chunks out to a slow disk): the next batch's
** wait must not take workers for down that were silent only because
** nobody listened.  A 1.1 GB SAVE failed so, naming a worker that was up. */
static int s_slow_calls;

static int s_slow_chunk(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
  (void)ctx, (void)lin, (void)buf, (void)bytes, (void)err;
  if (s_slow_calls++ == 0) {
    struct timespec ts = {2, 0}; /* over TN_LIVENESS heartbeats */
    nanosleep(&ts, NULL);
  }
  return TR_OK;
}

Test(engine, a_slow_reader_keeps_its_workers) {
  tr_err err;
  tr_tensor t;
  int64_t lins[130];
  s_ok("CREATE TENSOR S[130, 64] CHUNK [1, 64];"); /* 130 chunks: three batches */
  s_ok("FILL S ONES;");
  cr_assert_eq(tc_tensor_get(tf_e->db, "S", &t, &err), TR_OK, "%s", err.msg);
  for (int i = 0; i < 130; i++) lins[i] = i;
  s_slow_calls = 0;
  cr_assert_eq(td_pread(tf_e->cluster, &t, lins, 130, s_slow_chunk, NULL, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(s_slow_calls, 130);
  for (int k = 0; k < tf_e->cluster->nsites; k++)
    cr_assert(tf_e->cluster->sites[k].up, "worker %d taken for down", k);
}

/* A reader is handed each chunk as it arrives, not once its whole batch
** is in, so that a SAVE writes chunks out while the workers still read the
** others.  The callback stops the second worker as the first batch (64
** chunks) ends; the second batch asks each worker for one chunk, and the
** running worker's must reach the callback, which lets the stopped one
** go on.  A reader that waited for both would take it for down. */
static pid_t s_stopped;
static int s_stream_calls;
static int64_t s_stream_lin; /* the chunk of the 65th call */

static int s_stream_chunk(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
  (void)ctx, (void)buf, (void)bytes, (void)err;
  if (++s_stream_calls == 64) kill(s_stopped, SIGSTOP);
  if (s_stream_calls == 65) {
    s_stream_lin = lin;
    kill(s_stopped, SIGCONT);
  }
  return TR_OK;
}

Test(engine, a_reader_takes_chunks_as_they_arrive) {
  tr_err err;
  tr_tensor t;
  tc_chunkloc *locs = NULL;
  int64_t nl = 0, lins[66], last[2] = {-1, -1}, n = 0;
  td_cluster *c = tf_e->cluster;
  s_ok("SET replication = 1;");
  s_ok("CREATE TENSOR P[80, 16] CHUNK [1, 16];");
  s_ok("FILL P ONES;");
  cr_assert_eq(tc_tensor_get(tf_e->db, "P", &t, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_chunk_locations(tf_e->db, &t, &locs, &nl, &err), TR_OK, "%s", err.msg);
  for (int64_t i = 0; i < nl; i++) { /* last[s]: a chunk on site index s */
    int s = di_site_index(c, locs[i].site[0]);
    if (s >= 0 && s < 2 && last[s] < 0) last[s] = locs[i].lin;
  }
  for (int64_t i = 0; i < nl && n < 64; i++)
    if (locs[i].lin != last[0] && locs[i].lin != last[1]) lins[n++] = locs[i].lin;
  free(locs);
  cr_assert(last[0] >= 0 && last[1] >= 0 && n == 64, "P's chunks are not on both workers");
  lins[64] = last[0]; /* the second batch */
  lins[65] = last[1];
  s_stopped = c->sites[1].pid;
  cr_assert(s_stopped > 0);
  s_stream_calls = 0;
  int rc = td_pread(c, &t, lins, 66, s_stream_chunk, NULL, &err);
  kill(s_stopped, SIGCONT); /* whatever happened */
  cr_assert_eq(rc, TR_OK, "%s", err.msg);
  cr_assert_eq(s_stream_calls, 66);
  cr_assert_eq(s_stream_lin, last[0], "the stopped worker's chunk came first");
  cr_assert(c->sites[1].up, "the stopped worker taken for down");
}

/* SAVE by bands and, where a band would be too large to hold, stored in
** place through a mapping of the file: the same bytes either way, for
** large f64 tensors (their data on a page; one's bands on pages too, so
** past the page cache), slices dropping a dimension, and a small f32 one. */
static void s_file_bytes(const char *path, char **buf, long *n) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "no %s", path);
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  rewind(f);
  *buf = malloc((size_t)*n + 1);
  cr_assert_eq(fread(*buf, 1, (size_t)*n, f), (size_t)*n);
  fclose(f);
}

Test(engine, save_by_bands_or_in_place_writes_the_same_file) {
  char dir[] = "/tmp/tradb-save-XXXXXX", q[512], pa[300], pb[300];
  cr_assert_not_null(mkdtemp(dir));
  s_ok("CREATE TENSOR W[700, 1030] CHUNK [128, 300] TYPE f64;");
  s_ok("FILL W NORMAL(0, 1) SEED 9;");
  s_ok("CREATE TENSOR U[700, 1024] CHUNK [128, 300] TYPE f64;"); /* bands on pages */
  s_ok("FILL U NORMAL(0, 1) SEED 8;");
  s_ok("CREATE TENSOR V[33, 7, 5] CHUNK [4, 3, 2];");
  s_ok("FILL V UNIFORM(-1, 1) SEED 2;");
  const char *what[] = {"W", "U", "W[3:650, 1]", "V", "V[-5:, 2, 1:]"};
  for (int i = 0; i < 5; i++) {
    snprintf(pa, sizeof pa, "%s/bands%d.npy", dir, i);
    snprintf(pb, sizeof pb, "%s/place%d.npy", dir, i);
    snprintf(q, sizeof q, "SAVE %s TO '%s';", what[i], pa);
    s_ok(q);
    setenv("TRADB_TEST_BAND_MAX", "1", 1);
    snprintf(q, sizeof q, "SAVE %s TO '%s';", what[i], pb);
    s_ok(q);
    unsetenv("TRADB_TEST_BAND_MAX");
    char *a, *b;
    long na, nb;
    s_file_bytes(pa, &a, &na);
    s_file_bytes(pb, &b, &nb);
    cr_assert_eq(na, nb, "%s: %ld and %ld bytes", what[i], na, nb);
    cr_assert(!memcmp(a, b, (size_t)na), "%s: the files differ", what[i]);
    free(a);
    free(b);
    unlink(pa);
    unlink(pb);
  }
  rmdir(dir);
}

/* When a site counts as down: silent for the liveness window (1.5 s) while
** the shell listened, and longer while a large reply is due from it (a
** 1 GiB chunk held its site silent past the window as it arrived); a
** cluster given another window (TRADB_TEST_LIVENESS_S) waits that long. */
Test(engine, silence_while_a_large_reply_arrives) {
  const size_t gib = (size_t)1 << 30;
  td_cluster c = {.live_s = TN_LIVENESS_S};
  cr_assert(di_silent(&c, 100.0, 98.0, 90.0, 0), "2 s of silence while listening");
  cr_assert(!di_silent(&c, 100.0, 99.0, 90.0, 0), "1 s is within the window");
  cr_assert(!di_silent(&c, 100.0, 90.0, 99.0, 0), "the wait began 1 s ago");
  cr_assert(!di_silent(&c, 100.0, 96.0, 90.0, gib), "4 s while 1 GiB arrives");
  cr_assert(di_silent(&c, 100.0, 85.0, 80.0, gib), "15 s while 1 GiB arrives");
  c.live_s = 6;
  cr_assert(!di_silent(&c, 100.0, 95.0, 90.0, 0), "5 s is within a window of 6");
  cr_assert(di_silent(&c, 100.0, 93.0, 90.0, 0), "7 s is not");
}
