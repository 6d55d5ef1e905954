/*
** tests/unit/test_fusion.c - elementwise factors fused into a product's
** gemm task: SUM((X[n,d] - q[d]) * M[d,e]) computes each X - q tile inside
** the product's task.  Each case checks that EXPLAIN (text and JSON) shows
** the fusion and that the values equal the unfused form (the elementwise
** statement stored first, then the plain product) under the declared and
** the chosen layout, ragged chunks, a forced two-phase plan and a block.
** And elementwise consumers run inside their producer's tasks: the
** statement SUM(A * B) * (1 - C * C) and a block's weight update
** W - 0.01 * G, shown in EXPLAIN, with the values of the two steps run
** one after the other; where a consumer cannot take the producer's chunks
** as they are made, it runs on its own.
*/
#include "config.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "exec/exec.h"
#include "tests/unit/engine_fixture.h"
#include "tests/unit/task_fixture.h"

TestSuite(fusion, .init = tf_engine_open, .fini = tf_engine_close);

/* Run one statement; its result, if it has one (caller frees). */
static te_result *s_run(const char *stmt) {
  te_result *r = NULL;
  tr_err err;
  cr_assert_eq(te_exec(tf_e, stmt, strlen(stmt), &r, &err), TR_OK, "%s -> %s", stmt, err.msg);
  return r;
}

static void s_ok(const char *stmt) {
  te_result *r = s_run(stmt);
  te_result_free(&r);
}

/* Tensors a and b hold the same values within a relative tol. */
static void s_same(const char *a, const char *b, double tol) {
  char q[64];
  snprintf(q, sizeof q, "PRINT %s;", a);
  te_result *x = s_run(q);
  snprintf(q, sizeof q, "PRINT %s;", b);
  te_result *y = s_run(q);
  cr_assert(x && y && x->kind == TE_RES_TENSOR && y->kind == TE_RES_TENSOR);
  int64_t n = 1;
  cr_assert_eq(x->rank, y->rank);
  for (int d = 0; d < x->rank; d++) {
    cr_assert_eq(x->shape[d], y->shape[d]);
    n *= x->shape[d];
  }
  for (int64_t i = 0; i < n; i++)
    cr_assert(fabs(x->values[i] - y->values[i]) <= tol * (1 + fabs(y->values[i])),
              "%s vs %s, element %lld: %.9g vs %.9g", a, b, (long long)i, x->values[i],
              y->values[i]);
  te_result_free(&x);
  te_result_free(&y);
}

/* Ragged chunks: X - q re-chunked to the product's chunking. */
static void s_inputs(void) {
  s_ok("CREATE TENSOR X[61, 45] CHUNK [16, 10];");
  s_ok("CREATE TENSOR q[45] CHUNK [7];");
  s_ok("CREATE TENSOR M[45, 23] CHUNK [12, 23];");
  s_ok("FILL X UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL q UNIFORM(-1, 1) SEED 2;");
  s_ok("FILL M UNIFORM(-1, 1) SEED 3;");
  /* the unfused reference: the elementwise result stored, then read */
  s_ok("Df[n,d] = X[n,d] - q[d];");
  s_ok("Ref[n,e] = Df[n,d] * M[d,e];");
}

static const char *const s_fused = "P[n,e] = SUM((X[n,d] - q[d]) * M[d,e]);";

Test(fusion, explain_shows_the_factor_fused_into_the_gemm) {
  s_inputs();
  char q[160];
  snprintf(q, sizeof q, "EXPLAIN %s", s_fused);
  te_result *r = s_run(q);
  cr_assert(r && r->kind == TE_RES_TEXT);
  cr_assert(strstr(r->text, "kernel gemm") &&
                strstr(r->text, "FUSED((X[n,d] - q[d]): elementwise, computed tile by tile"),
            "%s", r->text);
  te_result_free(&r);
  snprintf(q, sizeof q, "EXPLAIN (FORMAT JSON) %s", s_fused);
  r = s_run(q);
  cr_assert(strstr(r->text, "\"fused_into_product\": \"(X[n,d] - q[d])\""), "%s", r->text);
  te_result_free(&r);
  /* a plain product fuses nothing */
  r = s_run("EXPLAIN Ref[n,e] = Df[n,d] * M[d,e];");
  cr_assert(!strstr(r->text, "FUSED") && strstr(r->text, "kernel gemm"), "%s", r->text);
  te_result_free(&r);
}

Test(fusion, same_values_as_unfused_in_every_layout) {
  s_inputs();
  s_ok("SET layout = declared;");
  s_ok(s_fused);
  s_same("P", "Ref", 1e-5);
  s_ok("SET layout = auto;");
  s_ok(s_fused);
  s_same("P", "Ref", 1e-5);
}

/* The summed label split across sites: each site's partial is a gemm of
** fused tiles, the partials combined after; still the same values. */
Test(fusion, same_values_under_two_phase_aggregation) {
  s_inputs();
  s_ok("SET layout = declared;");
  char q[200];
  snprintf(q, sizeof q, "EXPLAIN ANALYZE (PLAN 'CMM[d]') %s", s_fused);
  te_result *r = s_run(q);
  cr_assert(strstr(r->text, "combining partials") && strstr(r->text, "FUSED"), "%s", r->text);
  te_result_free(&r);
  s_same("P", "Ref", 1e-5);
}

/* Unary maps and constants on either factor; and inside a block, reading
** an earlier statement's output.  (A constant factor of the product
** itself is no map of an operand: it scales the sums, test_engine's
** scaled products.) */
Test(fusion, unary_factors_and_a_block) {
  s_inputs();
  s_ok("Tx[n,d] = tanh(X[n,d]);");
  s_ok("Mh[d,e] = M[d,e] + 0.5;");
  s_ok("Ref2[n,e] = Tx[n,d] * Mh[d,e];");
  s_ok("BEGIN;");
  s_ok("Y[n,d] = X[n,d] * 1;");
  s_ok("P2[n,e] = SUM(tanh(Y[n,d]) * (M[d,e] + 0.5));");
  te_result *r = s_run("EXPLAIN COMMIT;");
  cr_assert(strstr(r->text, "FUSED(tanh(Y[n,d]) and (M[d,e] + 0.5)"), "%s", r->text);
  te_result_free(&r);
  s_ok("COMMIT;");
  s_same("P2", "Ref2", 1e-5);
}

/* The factors written the other way round: the gemm call takes as its
** left factor the one without the output's innermost label (C written in
** place), so these run with the operands swapped, fused factor included,
** batched, summed in one phase and in two: the same values. */
Test(fusion, factors_in_either_order_give_the_same_product) {
  s_inputs();
  s_ok("CREATE TENSOR W[3, 45, 23] CHUNK [2, 16, 23];");
  s_ok("CREATE TENSOR Z[3, 61, 45] CHUNK [3, 16, 45];");
  s_ok("FILL W UNIFORM(-1, 1) SEED 4;");
  s_ok("FILL Z UNIFORM(-1, 1) SEED 5;");
  s_ok("RefB[h,n,e] = Z[h,n,d] * W[h,d,e];");
  const char *layouts[2] = {"SET layout = declared;", "SET layout = auto;"};
  for (int l = 0; l < 2; l++) {
    s_ok(layouts[l]);
    s_ok("P1[n,e] = M[d,e] * Df[n,d];");
    s_same("P1", "Ref", 1e-5);
    s_ok("P2[n,e] = SUM(M[d,e] * (X[n,d] - q[d]));");
    s_same("P2", "Ref", 1e-5);
    s_ok("PB[h,n,e] = W[h,d,e] * Z[h,n,d];");
    s_same("PB", "RefB", 1e-5);
  }
  s_ok("SET layout = declared;");
  te_result *r = s_run("EXPLAIN ANALYZE (PLAN 'BMM[bcast Df; M in place] 2-phase[n,e]') "
                       "P3[n,e] = M[d,e] * Df[n,d];");
  cr_assert(strstr(r->text, "combining partials"), "%s", r->text);
  te_result_free(&r);
  s_same("P3", "Ref", 1e-5);
}

/* A factor that would make a tile larger than its operands (labels from
** two operands on one side) or a sum over a label on one side only stays
** on the general contraction: nothing fused. */
Test(fusion, not_fused_where_the_tile_would_grow) {
  s_inputs();
  s_ok("CREATE TENSOR u[61] CHUNK [16];");
  s_ok("FILL u UNIFORM(-1, 1) SEED 4;");
  te_result *r = s_run("EXPLAIN G[e] = SUM((u[n] + q[d]) * M[d,e]);");
  cr_assert(strstr(r->text, "kernel contract") && !strstr(r->text, "FUSED"), "%s", r->text);
  te_result_free(&r);
  s_ok("G[e] = SUM((u[n] + q[d]) * M[d,e]);");
  s_ok("Uq[n,d] = u[n] + q[d];");
  s_ok("G2[e] = Uq[n,d] * M[d,e];");
  s_same("G", "G2", 1e-4);
}

/* ---- a consumer inside its producer's tasks --------------------------------- */

/* A, B, C with ragged chunks (k split in ck), and the two steps of
** s_consumer one after the other. */
static void s_consumer_inputs(int ck) {
  char q[96];
  snprintf(q, sizeof q, "CREATE TENSOR A[61, 45] CHUNK [16, %d];", ck);
  s_ok(q);
  snprintf(q, sizeof q, "CREATE TENSOR B[45, 23] CHUNK [%d, 23];", ck);
  s_ok(q);
  s_ok("CREATE TENSOR C[61, 23] CHUNK [16, 23];");
  s_ok("FILL A UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL B UNIFORM(-1, 1) SEED 2;");
  s_ok("FILL C UNIFORM(-1, 1) SEED 3;");
  s_ok("T[i,j] = A[i,k] * B[k,j];");
  s_ok("Ref[i,j] = T[i,j] * (1 - C[i,j] * C[i,j]);");
}

/* Two nodes: the product into a temporary, then the elementwise step. */
static const char *const s_consumer = "D[i,j] = SUM(A[i,k] * B[k,j]) * (1 - C[i,j] * C[i,j]);";

/* Run EXPLAIN (opts) of stmt; its text (caller frees). */
static te_result *s_explain(const char *opts, const char *stmt) {
  char q[400];
  snprintf(q, sizeof q, "EXPLAIN %s%s", opts, stmt);
  te_result *r = s_run(q);
  cr_assert(r && r->kind == TE_RES_TEXT);
  return r;
}

Test(fusion, an_elementwise_step_runs_inside_the_product_task) {
  s_consumer_inputs(45);
  const char *layouts[2] = {"SET layout = declared;", "SET layout = auto;"};
  for (int l = 0; l < 2; l++) {
    s_ok(layouts[l]);
    te_result *r = s_explain("", s_consumer);
    cr_assert(strstr(r->text, "runs inside node 1's tasks: each chunk of _t1 as soon as it is made, "
                              "which is never stored"),
              "%s", r->text);
    te_result_free(&r);
    r = s_explain("(FORMAT JSON) ", s_consumer);
    cr_assert(strstr(r->text, "\"inside_tasks_of\": 1, \"producer_stored\": false"), "%s", r->text);
    te_result_free(&r);
    r = s_explain("ANALYZE ", s_consumer);
    cr_assert(strstr(r->text, "local_join   D (in _t1's tasks)") && strstr(r->text, "fused"), "%s", r->text);
    te_result_free(&r);
    s_same("D", "Ref", 1e-5);
  }
}

/* The first node of alternative names in JSON text whose first node
** (before " | ") holds what: copied into out. */
static int s_alt_with(const char *json, const char *what, char *out, size_t cap) {
  const char *p = strstr(json, "\"alternatives\"");
  cr_assert_not_null(p, "%s", json);
  while ((p = strstr(p, "\"name\": \""))) {
    p += strlen("\"name\": \"");
    const char *end = strchr(p, '"'), *bar = strstr(p, " | ");
    size_t n = (size_t)(end - p);
    if (bar && bar < end && memmem(p, (size_t)(bar - p), what, strlen(what)) && n < cap) {
      memcpy(out, p, n);
      out[n] = 0;
      return 1;
    }
  }
  return 0;
}

/* A product summed in two phases makes its chunks in the combine, after
** its tasks: the elementwise step then runs on its own, with the same
** values. */
Test(fusion, not_inside_a_two_phase_product) {
  s_consumer_inputs(15);
  s_ok("SET layout = declared;");
  te_result *r = s_explain("(FORMAT JSON) ", s_consumer);
  char name[400], q[600];
  cr_assert(s_alt_with(r->text, "2-phase", name, sizeof name) || s_alt_with(r->text, "CMM", name, sizeof name),
            "%s", r->text);
  te_result_free(&r);
  snprintf(q, sizeof q, "ANALYZE (PLAN '%s') ", name);
  r = s_explain(q, s_consumer);
  cr_assert(strstr(r->text, "combine partials") && !strstr(r->text, "runs inside") &&
                !strstr(r->text, "in _t1's tasks"),
            "%s", r->text);
  te_result_free(&r);
  s_same("D", "Ref", 1e-5);
}

/* An SGD step's weight update inside the gradient's task: the gradient is
** a result of the block, so it is stored too.  Both equal the statements
** run one at a time. */
Test(fusion, a_block_update_runs_inside_the_gradient_task) {
  s_ok("CREATE TENSOR X[50, 37] CHUNK [50, 10];");
  s_ok("CREATE TENSOR Y[50, 29] CHUNK [50, 29];");
  s_ok("CREATE TENSOR W[37, 29] CHUNK [10, 29];");
  s_ok("FILL X UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL Y UNIFORM(-1, 1) SEED 2;");
  s_ok("FILL W UNIFORM(-1, 1) SEED 3;");
  s_ok("G2[d,h] = SUM(X[n,d] * Y[n,h]);");
  s_ok("Wn2[d,h] = W[d,h] - 0.01 * G2[d,h];");
  s_ok("BEGIN;");
  s_ok("G[d,h] = SUM(X[n,d] * Y[n,h]);");
  s_ok("Wn[d,h] = W[d,h] - 0.01 * G[d,h];");
  te_result *r = s_run("EXPLAIN COMMIT;");
  cr_assert(strstr(r->text, "runs inside node 1's tasks: each chunk of G as soon as it is made, which is "
                            "stored too"),
            "%s", r->text);
  te_result_free(&r);
  r = s_run("EXPLAIN ANALYZE (FORMAT JSON) COMMIT;");
  cr_assert(strstr(r->text, "\"inside_tasks_of\": 1, \"producer_stored\": true") &&
                strstr(r->text, "\"node_groups\": [[1, 2]]"),
            "%s", r->text);
  te_result_free(&r);
  s_same("G", "G2", 1e-5);
  s_same("Wn", "Wn2", 1e-5);
}

/* Consumers that cannot take the producer's chunks as they are made: one
** that reads a square product's chunks transposed (same shape, same
** chunks, other chunk numbers), one that sums them.  EXPLAIN fuses
** neither; the values are right. */
Test(fusion, not_inside_where_chunks_do_not_match) {
  s_ok("CREATE TENSOR A[32, 20] CHUNK [16, 20];");
  s_ok("CREATE TENSOR B[20, 32] CHUNK [20, 16];");
  s_ok("FILL A UNIFORM(-1, 1) SEED 1;");
  s_ok("FILL B UNIFORM(-1, 1) SEED 2;");
  s_ok("T[i,j] = A[i,k] * B[k,j];");
  s_ok("BEGIN;");
  s_ok("P[i,j] = A[i,k] * B[k,j];");
  s_ok("Pt[j,i] = P[i,j] + 1;");
  s_ok("s[i] = SUM(P[i,j]);");
  te_result *r = s_run("EXPLAIN COMMIT;");
  cr_assert(!strstr(r->text, "runs inside"), "%s", r->text);
  te_result_free(&r);
  s_ok("COMMIT;");
  s_ok("Pt2[j,i] = T[i,j] + 1;");
  s_ok("s2[i] = SUM(T[i,j]);");
  s_same("Pt", "Pt2", 1e-5);
  s_same("s", "s2", 1e-5);
}

/* ---- the task message ---------------------------------------------------- */

/* A node task for P[n,e] = SUM(f(X[n,d], q[d]) * g(M[d,e])), labels n e d,
** whose scalar function is the given code; gemm set. */
static void s_node_task(tx_task *t, const tk_insn *code, int ncode) {
  static const int64_t shape[3][2] = {{4, 3}, {3, 0}, {3, 2}};
  static const int rank[3] = {2, 1, 2}, lab[3][2] = {{0, 2}, {2, 0}, {2, 1}};
  memset(t, 0, sizeof *t);
  t->kind = TX_TASK_NODE;
  ta_node *n = &t->node;
  n->nlabels = 3;
  n->nout = 2;
  const int64_t size[3] = {4, 2, 3};
  for (int l = 0; l < 3; l++) n->size[l] = n->chunk[l] = size[l];
  n->ninputs = 3;
  for (int i = 0; i < 3; i++) {
    n->in[i].rank = rank[i];
    tr_tensor *m = &t->in_meta[i];
    snprintf(m->name, sizeof m->name, "in%d", i);
    m->dtype = TR_F32;
    m->rank = rank[i];
    for (int d = 0; d < rank[i]; d++) {
      n->in[i].label[d] = lab[i][d];
      m->shape[d] = m->chunk[d] = shape[i][d];
    }
  }
  n->prog.n = ncode;
  memcpy(n->prog.code, code, sizeof *code * (size_t)ncode);
  n->agg = TK_AGG_SUM;
  n->gemm = 1;
  n->drive = -1;
  snprintf(t->out_meta.name, sizeof t->out_meta.name, "P");
  t->out_meta.dtype = TR_F32;
  t->out_meta.rank = 2;
  t->out_meta.shape[0] = t->out_meta.chunk[0] = 4;
  t->out_meta.shape[1] = t->out_meta.chunk[1] = 2;
}

/* A worker runs a gemm task only if its program is two factors on disjoint
** operands (the fused tile is made from them): a factor reading no operand,
** or both reading the same one, is refused as malformed. */
Test(task, gemm_task_programs_are_checked) {
  const tk_insn in0 = {TK_OP_INPUT, 0, 0}, in1 = {TK_OP_INPUT, 1, 0}, in2 = {TK_OP_INPUT, 2, 0},
                sub = {TK_OP_SUB, 0, 0}, mul = {TK_OP_MUL, 0, 0}, two = {TK_OP_CONST, 0, 2};
  const tk_insn fused[] = {in0, in1, sub, in2, mul}, constant[] = {in0, in1, sub, two, mul},
                shared[] = {in0, in1, sub, in1, mul};
  struct {
    const tk_insn *code;
    int n, ok;
  } cases[] = {{fused, 5, 1}, {constant, 5, 0}, {shared, 5, 0}};
  for (int c = 0; c < 3; c++) {
    tx_task t, got;
    tn_wbuf b = {0};
    tr_err err;
    s_node_task(&t, cases[c].code, cases[c].n);
    tx_task_encode(&t, &b);
    int rc = tx_task_decode(b.p, b.n, &got, &err);
    cr_assert_eq(rc, cases[c].ok ? TR_OK : TR_EINVAL, "case %d: %s", c, err.msg);
    if (rc == TR_OK) {
      cr_assert(got.node.gemm && got.node.prog.n == 5);
      tx_task_free(&got);
    }
    tn_wbuf_free(&b);
  }
}

/* A task with a consumer inside it round-trips; a worker refuses one
** whose consumer could not take the task's chunks as they are made: a
** consumer that aggregates, that reads another shape, that makes other
** chunk numbers, or that lists the chunks the task itself makes. */
Test(task, a_consumer_inside_round_trips_and_is_checked) {
  for (int c = 0; c < 5; c++) {
    tx_task t, got;
    tn_wbuf b = {0};
    tr_err err;
    tf_ew_task(&t, 0, 0x21, 0x31);
    t.then = calloc(1, sizeof *t.then);
    tf_ew_task(t.then, 1, 0x22, 0x32);
    t.then_from = 0;
    t.then_store = c == 0;
    if (c == 1) t.then->node.agg = TK_AGG_SUM;
    if (c == 2) t.then->in_meta[0].shape[0] = t.then->in_meta[0].chunk[0] = 3;
    if (c == 3) t.then->out_lin[0] = 1;
    if (c == 4) t.then->in_op[0] = 0;
    tx_task_encode(&t, &b);
    int rc = tx_task_decode(b.p, b.n, &got, &err);
    cr_assert_eq(rc, c == 0 ? TR_OK : TR_EINVAL, "case %d: %s", c, err.msg);
    if (rc == TR_OK) {
      cr_assert(got.then && got.then_store && got.then_from == 0 && got.then->node.ninputs == 2 &&
                got.then->out_id[0] == 0x32 && got.out_id[0] == 0x31);
      tx_task_free(&got);
      cr_assert_null(got.then);
    }
    tx_task_free(&t);
    tn_wbuf_free(&b);
  }
}

/* The two fields of a task whose moves travel in its own phase: an input
** that may still be arriving (in_wait) and an output pushed to another
** worker (out_to) round-trip, on a combine task too (partials on their
** way); out_to is refused on outputs that are not scratch (they would be
** replicated besides) and on a task with a consumer inside. */
Test(task, arriving_inputs_and_pushed_outputs_round_trip_and_are_checked) {
  for (int c = 0; c < 6; c++) {
    tx_task t, got;
    tn_wbuf b = {0};
    tr_err err;
    tf_ew_task(&t, 0, 0x41, 0x51);
    t.in_wait = calloc(1, sizeof *t.in_wait);
    t.in_wait[0] = 1;
    t.keep = TC_KEEP_SCRATCH;
    if (c < 3) {
      t.out_to = calloc(1, sizeof *t.out_to);
      snprintf(t.out_to[0], sizeof t.out_to[0], "ipc:///tmp/owner.ipc");
    }
    if (c == 1) t.keep = TC_KEEP_FILE;
    if (c == 2) {
      t.then = calloc(1, sizeof *t.then);
      tf_ew_task(t.then, 1, 0x42, 0x52);
    }
    if (c >= 4) {
      t.kind = TX_TASK_COMBINE;
      t.node.agg = TK_AGG_SUM;
      t.in_wait[0] = c == 4;
    }
    tx_task_encode(&t, &b);
    int rc = tx_task_decode(b.p, b.n, &got, &err);
    cr_assert_eq(rc, c == 0 || c >= 3 ? TR_OK : TR_EINVAL, "case %d: %s", c, err.msg);
    if (rc == TR_OK) {
      cr_assert(got.in_wait && got.in_wait[0] == (c != 5) && got.in_op[0] == 0, "case %d: in_wait", c);
      if (c == 0)
        cr_assert(got.out_to && strcmp(got.out_to[0], "ipc:///tmp/owner.ipc") == 0, "out_to");
      else
        cr_assert_null(got.out_to);
      tn_wbuf again = {0};
      tx_task_encode(&got, &again);
      cr_assert(again.n == b.n && memcmp(again.p, b.p, b.n) == 0, "case %d: encodes to other bytes", c);
      tn_wbuf_free(&again);
      tx_task_free(&got);
    }
    tx_task_free(&t);
    tn_wbuf_free(&b);
  }
}
