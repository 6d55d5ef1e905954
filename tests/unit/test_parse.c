/*
** tests/unit/test_parse.c - Criterion tests of the statement parser
** (engine/parse.c): every statement form (EXPLAIN options and SET
** included), expression precedence and associativity, comments, line
** numbers, error messages, statement boundaries and the keyword list.
*/
#include "config.h"
#include "parse/parse.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------- */

static tp_stmt *ok(const char *text) {
  tp_stmt *st = NULL;
  tr_err err;
  int rc;
  tr_clearerr(&err);
  rc = tp_parse(text, strlen(text), &st, &err);
  cr_assert_eq(rc, TR_OK, "parse of \"%s\" failed: %s", text, err.msg);
  cr_assert_not_null(st);
  return st;
}

/* Parse must fail with TR_ESYNTAX and a message containing each needle
** (a NULL-terminated list); returns nothing. */
static void bad_(const char *text, const char *const *needles) {
  tp_stmt *st = (tp_stmt *)1;
  tr_err err;
  int rc, i;
  tr_clearerr(&err);
  rc = tp_parse(text, strlen(text), &st, &err);
  cr_assert_eq(rc, TR_ESYNTAX, "parse of \"%s\": rc %d (%s)", text, rc,
               err.msg);
  cr_assert_null(st, "no tree on failure");
  cr_assert_eq(err.code, TR_ESYNTAX);
  cr_assert_null(strchr(err.msg, '\n'), "one-line message: %s", err.msg);
  cr_assert_null(strstr(err.msg, "line"), "no line in message: %s", err.msg);
  for (i = 0; needles[i]; i++)
    cr_assert_not_null(strstr(err.msg, needles[i]),
                       "message for \"%s\" is \"%s\", lacks \"%s\"", text,
                       err.msg, needles[i]);
}
#define bad(text, ...) bad_((text), (const char *const[]){__VA_ARGS__, NULL})

static const char *fn_name(int op) {
  switch (op) {
  case TK_OP_NEG: return "neg";
  case TK_OP_RELU: return "relu";
  case TK_OP_EXP: return "exp";
  case TK_OP_LOG: return "log";
  case TK_OP_SQRT: return "sqrt";
  case TK_OP_ABS: return "abs";
  case TK_OP_TANH: return "tanh";
  case TK_OP_SIGMOID: return "sigmoid";
  case TK_OP_STEP: return "step";
  default: return "?fn";
  }
}

static const char *agg_name(int op) {
  switch (op) {
  case TK_AGG_SUM: return "SUM";
  case TK_AGG_MAX: return "MAX";
  case TK_AGG_MIN: return "MIN";
  case TP_AGG_MEAN: return "MEAN";
  case TP_AGG_ARGMAX: return "ARGMAX";
  case TP_AGG_ARGMIN: return "ARGMIN";
  default: return "?agg";
  }
}

/* A binary operator as written. */
static const char *op_name(int op) {
  static char one[2];
  switch (op) {
  case TP_OP_LE: return "<=";
  case TP_OP_GE: return ">=";
  case TP_OP_EQ: return "==";
  case TP_OP_NE: return "!=";
  default: one[0] = (char)op; return one;
  }
}

/* Render an expression fully parenthesised into buf. */
static void render(const tp_expr *e, char *buf, size_t size) {
  char a[1024], b[1024];
  int i;
  size_t o;
  switch (e->kind) {
  case TP_EXPR_NUM:
    snprintf(buf, size, "%g", e->num);
    return;
  case TP_EXPR_REF:
    o = (size_t)snprintf(buf, size, "%s[", e->name);
    for (i = 0; i < e->nlabels && o < size; i++)
      o += (size_t)snprintf(buf + o, size - o, "%s%s", i ? "," : "",
                            e->labels[i]);
    if (o < size) snprintf(buf + o, size - o, "]");
    return;
  case TP_EXPR_BIN:
    cr_assert_not_null(e->a);
    cr_assert_not_null(e->b);
    render(e->a, a, sizeof a);
    render(e->b, b, sizeof b);
    /* Rendered trees in these tests are short; cut, never overflow. */
    if (snprintf(buf, size, "(%.500s %s %.500s)", a, op_name(e->op), b) < 0) buf[0] = '\0';
    return;
  case TP_EXPR_FN:
    cr_assert_not_null(e->a);
    render(e->a, a, sizeof a);
    if (e->op == TK_OP_WHERE) {
      char c[1024];
      cr_assert_not_null(e->b);
      cr_assert_not_null(e->c);
      render(e->b, b, sizeof b);
      render(e->c, c, sizeof c);
      if (snprintf(buf, size, "where(%.300s, %.300s, %.300s)", a, b, c) < 0) buf[0] = '\0';
      return;
    }
    cr_assert_null(e->b);
    snprintf(buf, size, "%s(%s)", fn_name(e->op), a);
    return;
  case TP_EXPR_AGG:
    cr_assert_not_null(e->a);
    cr_assert_null(e->b);
    render(e->a, a, sizeof a);
    snprintf(buf, size, "%s(%s)", agg_name(e->op), a);
    return;
  }
  cr_assert_fail("bad expression kind %d", (int)e->kind);
}

/* Parse an assignment and compare its right-hand side's rendering. */
static void rhs_is(const char *text, const char *want) {
  tp_stmt *st = ok(text);
  char buf[2048];
  cr_assert(st->kind == TP_ST_ASSIGN);
  cr_assert_not_null(st->rhs);
  render(st->rhs, buf, sizeof buf);
  cr_assert_str_eq(buf, want, "\"%s\" parsed as %s", text, buf);
  tp_stmt_free(&st);
}

/* ---- CREATE ------------------------------------------------------------ */

Test(create, full) {
  tp_stmt *st = ok("CREATE TENSOR A[100, 200] CHUNK [10, 20] TYPE f64;");
  cr_assert_eq(st->kind, TP_ST_CREATE);
  cr_assert_str_eq(st->name, "A");
  cr_assert_eq(st->rank, 2);
  cr_assert_eq(st->shape[0], 100);
  cr_assert_eq(st->shape[1], 200);
  cr_assert(st->has_chunk);
  cr_assert_eq(st->chunk_rank, 2);
  cr_assert_eq(st->chunk[0], 10);
  cr_assert_eq(st->chunk[1], 20);
  cr_assert(st->has_type);
  cr_assert_eq(st->dtype, TR_F64);
  cr_assert_null(st->rhs);
  tp_stmt_free(&st);
  cr_assert_null(st);
  tp_stmt_free(&st); /* twice is safe */
  tp_stmt_free(NULL);
}

Test(create, options_either_order_and_optional) {
  tp_stmt *st = ok("create tensor B[3] type F32 chunk [1]");
  cr_assert_eq(st->rank, 1);
  cr_assert(st->has_type && st->dtype == TR_F32);
  cr_assert(st->has_chunk && st->chunk_rank == 1 && st->chunk[0] == 1);
  tp_stmt_free(&st);
  st = ok("CREATE TENSOR B[3,4];");
  cr_assert(!st->has_type && !st->has_chunk);
  cr_assert_eq(st->rank, 2);
  tp_stmt_free(&st);
}

Test(create, rank0_and_rank8) {
  tp_stmt *st = ok("CREATE TENSOR s[];");
  cr_assert_eq(st->rank, 0);
  cr_assert_str_eq(st->name, "s");
  tp_stmt_free(&st);
  st = ok("CREATE TENSOR s[] CHUNK [];");
  cr_assert(st->has_chunk && st->chunk_rank == 0);
  tp_stmt_free(&st);
  st = ok("CREATE TENSOR r8[1,2,3,4,5,6,7,8] CHUNK [1,1,1,1,1,1,1,1];");
  cr_assert_eq(st->rank, 8);
  cr_assert_eq(st->shape[7], 8);
  tp_stmt_free(&st);
  st = ok("CREATE TENSOR big[4611686018427387904];"); /* 2^62 */
  cr_assert_eq(st->shape[0], INT64_C(4611686018427387904));
  tp_stmt_free(&st);
}

Test(create, errors) {
  bad("CREATE TENSOR A[0];", "positive integer", "'0'");
  bad("CREATE TENSOR A[-3];", "positive integer");
  bad("CREATE TENSOR A[2.5];", "positive integer", "'2.5'");
  bad("CREATE TENSOR A[1e3];", "positive integer");
  bad("CREATE TENSOR A[4611686018427387905];", "too large", "2^62");
  bad("CREATE TENSOR A[99999999999999999999999];", "too large");
  bad("CREATE TENSOR A[1,2,3,4,5,6,7,8,9];", "too many", "8");
  bad("CREATE TENSOR A[3] CHUNK [1,1];", "CHUNK", "rank 1");
  bad("CREATE TENSOR A[3,3] CHUNK [1];", "CHUNK", "rank 2");
  bad("CREATE TENSOR A[3] CHUNK [0];", "positive integer");
  bad("CREATE TENSOR A[3] CHUNK [1] CHUNK [1];", "CHUNK given twice");
  bad("CREATE TENSOR A[3] TYPE f32 TYPE f64;", "TYPE given twice");
  bad("CREATE TENSOR A[3] TYPE int8;", "near 'int8'", "f32 or f64");
  bad("CREATE TENSOR A[3;", "syntax error near ';'", "expected ',' or ']'");
  bad("CREATE TENSOR A[3", "near end of input", "expected ',' or ']'");
  bad("CREATE TENSOR A", "near end of input", "expected '['");
  bad("CREATE A[3];", "near 'A'", "expected TENSOR");
  bad("CREATE TENSOR [3];", "near '['", "expected tensor name");
  bad("CREATE TENSOR A[3] CHUNK 3;", "expected '['");
  bad("CREATE TENSOR A[3] foo;", "unexpected 'foo' after end of statement");
}

/* ---- LOAD / SAVE ------------------------------------------------------- */

Test(load, forms) {
  tp_stmt *st = ok("LOAD A FROM 'data/a.npy' CHUNK [10, 10] TYPE f32;");
  cr_assert_eq(st->kind, TP_ST_LOAD);
  cr_assert_str_eq(st->name, "A");
  cr_assert_str_eq(st->path, "data/a.npy");
  cr_assert(st->has_chunk && st->chunk_rank == 2 && st->chunk[1] == 10);
  cr_assert(st->has_type && st->dtype == TR_F32);
  tp_stmt_free(&st);
  st = ok("load B from 'it''s; -- here.csv'");
  cr_assert_str_eq(st->path, "it's; -- here.csv");
  cr_assert(!st->has_chunk && !st->has_type);
  tp_stmt_free(&st);
  st = ok("LOAD B FROM '''' TYPE f64 CHUNK [2];");
  cr_assert_str_eq(st->path, "'");
  cr_assert(st->has_chunk && st->has_type && st->dtype == TR_F64);
  tp_stmt_free(&st);
}

Test(load, errors) {
  bad("LOAD A FROM data.npy;", "near 'data'", "quoted file name");
  bad("LOAD A 'x.npy';", "expected FROM");
  bad("LOAD A FROM 'x.npy", "unterminated string");
  bad("LOAD A FROM '';", "empty file name");
  bad("LOAD A FROM 'x' CHUNK [1] CHUNK [2];", "CHUNK given twice");
  bad("LOAD A FROM 'x' CHUNK [1,1,1,1,1,1,1,1,1];", "too many");
}

Test(save, forms) {
  tp_stmt *st = ok("SAVE A TO '/tmp/out.npy';");
  cr_assert_eq(st->kind, TP_ST_SAVE);
  cr_assert_str_eq(st->name, "A");
  cr_assert_str_eq(st->path, "/tmp/out.npy");
  tp_stmt_free(&st);
  bad("SAVE A '/tmp/x';", "expected TO");
  bad("SAVE A TO '/tmp/x' CHUNK [1];", "unexpected 'CHUNK'");
}

Test(paths, length_limit) {
  static char text[TP_PATH_MAX + 64];
  static char path[TP_PATH_MAX + 1];
  tp_stmt *st;
  memset(path, 'p', TP_PATH_MAX - 1);
  path[TP_PATH_MAX - 1] = '\0';
  snprintf(text, sizeof text, "SAVE A TO '%s';", path);
  st = ok(text);
  cr_assert_eq(strlen(st->path), TP_PATH_MAX - 1);
  tp_stmt_free(&st);
  path[TP_PATH_MAX - 1] = 'p';
  path[TP_PATH_MAX] = '\0';
  snprintf(text, sizeof text, "SAVE A TO '%s';", path);
  bad(text, "file name too long");
}

/* ---- FILL -------------------------------------------------------------- */

Test(fill, forms) {
  tp_stmt *st = ok("FILL A ZEROS;");
  cr_assert_eq(st->kind, TP_ST_FILL);
  cr_assert_eq(st->fill, TP_FILL_ZEROS);
  cr_assert(!st->has_seed);
  tp_stmt_free(&st);
  st = ok("fill A ones");
  cr_assert_eq(st->fill, TP_FILL_ONES);
  tp_stmt_free(&st);
  st = ok("FILL A Identity;");
  cr_assert_eq(st->fill, TP_FILL_IDENTITY);
  tp_stmt_free(&st);
  st = ok("FILL A UNIFORM(-1, 2.5) SEED 42;");
  cr_assert_eq(st->fill, TP_FILL_UNIFORM);
  cr_assert_float_eq(st->p0, -1.0, 1e-15);
  cr_assert_float_eq(st->p1, 2.5, 1e-15);
  cr_assert(st->has_seed);
  cr_assert_eq(st->seed, 42);
  tp_stmt_free(&st);
  st = ok("FILL W NORMAL(+0, .5e-1);");
  cr_assert_eq(st->fill, TP_FILL_NORMAL);
  cr_assert_float_eq(st->p0, 0.0, 1e-15);
  cr_assert_float_eq(st->p1, 0.05, 1e-15);
  cr_assert(!st->has_seed);
  tp_stmt_free(&st);
  st = ok("FILL W NORMAL(0, 1) seed 18446744073709551615;");
  cr_assert_eq(st->seed, UINT64_MAX);
  tp_stmt_free(&st);
  st = ok("FILL P permutation SEED 9;");
  cr_assert_eq(st->fill, TP_FILL_PERMUTATION);
  cr_assert(st->has_seed);
  cr_assert_eq(st->seed, 9);
  tp_stmt_free(&st);
  st = ok("FILL P PERMUTATION;");
  cr_assert_eq(st->fill, TP_FILL_PERMUTATION);
  cr_assert(!st->has_seed);
  tp_stmt_free(&st);
}

Test(fill, errors) {
  bad("FILL A ZEROS SEED 3;", "SEED is only allowed after UNIFORM, NORMAL or PERMUTATION");
  bad("FILL A PERMUTATION(3);", "unexpected '('");
  bad("FILL A PERMUTATION SEED x;", "SEED must be a non-negative integer");
  bad("FILL A IDENTITY SEED 3;", "SEED is only allowed");
  bad("FILL A UNIFORM(0, 1) SEED -1;", "SEED must be a non-negative integer");
  bad("FILL A UNIFORM(0, 1) SEED 1.5;", "SEED must be a non-negative integer");
  bad("FILL A UNIFORM(0, 1) SEED 18446744073709551616;", "SEED must");
  bad("FILL A UNIFORM(0);", "near ')'", "expected ','");
  bad("FILL A UNIFORM 0, 1;", "expected '('");
  bad("FILL A NORMAL(a, 1);", "near 'a'", "expected a number");
  bad("FILL A RANDOM;", "near 'RANDOM'", "ZEROS, ONES, IDENTITY, UNIFORM, NORMAL or PERMUTATION");
  bad("FILL A UNIFORM(0, 1) SEED 1 SEED 2;", "unexpected 'SEED'");
}

/* ---- SHOW / DESCRIBE / DROP / PRINT ------------------------------------ */

Test(misc, show_describe_drop) {
  static const struct { const char *text; tp_stmt_kind kind; } shows[] = {
      {"SHOW TENSORS;", TP_ST_SHOW}, {"show tensors", TP_ST_SHOW},
      {"SHOW SETTINGS;", TP_ST_SETTINGS}, {"show Settings", TP_ST_SETTINGS}};
  tp_stmt *st;
  for (size_t i = 0; i < sizeof shows / sizeof shows[0]; i++) {
    st = ok(shows[i].text);
    cr_assert_eq(st->kind, shows[i].kind, "%s", shows[i].text);
    tp_stmt_free(&st);
  }
  st = ok("DESCRIBE Weights;");
  cr_assert_eq(st->kind, TP_ST_DESCRIBE);
  cr_assert_str_eq(st->name, "Weights");
  tp_stmt_free(&st);
  st = ok("DROP TENSOR A;");
  cr_assert_eq(st->kind, TP_ST_DROP);
  cr_assert_str_eq(st->name, "A");
  cr_assert(!st->if_exists);
  tp_stmt_free(&st);
  st = ok("drop tensor if exists A");
  cr_assert(st->if_exists);
  cr_assert_str_eq(st->name, "A");
  tp_stmt_free(&st);
  st = ok("DROP TENSOR IF;"); /* a tensor called IF */
  cr_assert(!st->if_exists);
  cr_assert_str_eq(st->name, "IF");
  tp_stmt_free(&st);
  bad("SHOW;", "near ';'", "expected TENSORS");
  bad("SHOW SETTING;", "expected TENSORS or SETTINGS");
  bad("SHOW TABLES;", "near 'TABLES'", "expected TENSORS");
  bad("DESCRIBE;", "expected tensor name");
  bad("DESCRIBE A B;", "unexpected 'B' after end of statement");
  bad("DROP A;", "expected TENSOR");
  bad("DROP TENSOR IF EXISTS;", "expected tensor name");
}

/* Range k of st: lo, hi as written and which of them were. */
static void range_is(const tp_stmt *st, int k, int has_lo, int64_t lo, int has_hi, int64_t hi,
                     int single) {
  const tp_range *r = &st->range[k];
  cr_assert_eq(r->has_lo, has_lo, "range %d", k);
  cr_assert_eq(r->has_hi, has_hi, "range %d", k);
  cr_assert_eq(r->single, single, "range %d", k);
  if (has_lo) cr_assert_eq(r->lo, lo, "range %d", k);
  if (has_hi) cr_assert_eq(r->hi, hi, "range %d", k);
}

Test(print, forms) {
  tp_stmt *st = ok("PRINT A;");
  cr_assert_eq(st->kind, TP_ST_PRINT);
  cr_assert_str_eq(st->name, "A");
  cr_assert_eq(st->nranges, 0);
  tp_stmt_free(&st);
  st = ok("PRINT A[0:4, 2:5];");
  cr_assert_eq(st->nranges, 2);
  range_is(st, 0, 1, 0, 1, 4, 0);
  range_is(st, 1, 1, 2, 1, 5, 0);
  tp_stmt_free(&st);
  st = ok("print A[3, :, :7, 1:, 9:10]");
  cr_assert_eq(st->nranges, 5);
  range_is(st, 0, 1, 3, 0, 0, 1);
  range_is(st, 1, 0, 0, 0, 0, 0);
  range_is(st, 2, 0, 0, 1, 7, 0);
  range_is(st, 3, 1, 1, 0, 0, 0);
  range_is(st, 4, 1, 9, 1, 10, 0);
  tp_stmt_free(&st);
  st = ok("PRINT A[-1, 0:3, -3:-1, :-2, 2:-1];"); /* from the end, as NumPy */
  range_is(st, 0, 1, -1, 0, 0, 1);
  range_is(st, 2, 1, -3, 1, -1, 0);
  range_is(st, 3, 0, 0, 1, -2, 0);
  range_is(st, 4, 1, 2, 1, -1, 0);
  tp_stmt_free(&st);
  st = ok("PRINT s[];");
  cr_assert_eq(st->nranges, 0);
  tp_stmt_free(&st);
}

/* A name alone, or with ranges, shows the tensor as PRINT does; a label
** inside the brackets makes it an assignment still, and a statement's
** keyword alone stays that statement. */
Test(print, name_alone) {
  tp_stmt *st = ok("A;");
  cr_assert_eq(st->kind, TP_ST_PRINT);
  cr_assert_str_eq(st->name, "A");
  cr_assert(st->bare);
  cr_assert_eq(st->nranges, 0);
  tp_stmt_free(&st);
  st = ok("A[0:4, -1]");
  cr_assert_eq(st->kind, TP_ST_PRINT);
  cr_assert(st->bare);
  cr_assert_eq(st->nranges, 2);
  range_is(st, 0, 1, 0, 1, 4, 0);
  range_is(st, 1, 1, -1, 0, 0, 1);
  tp_stmt_free(&st);
  st = ok("PRINT A;");
  cr_assert(!st->bare);
  tp_stmt_free(&st);
  st = ok("COMMIT;");
  cr_assert_eq(st->kind, TP_ST_COMMIT);
  tp_stmt_free(&st);
  bad("A[i];", "expected '='", "a slice of it is shown with numbers: A[0:2])");
  bad("A[i, j]", "A[0:2, :])");
  bad("A[0:2, i];", "expected label");
  bad("A[0:2;", "expected label");
  bad("A B;", "unknown statement 'A'");
}

Test(print, errors) {
  bad("PRINT A[4:2];", "empty range 4:2");
  bad("PRINT A[3:3];", "empty range");
  bad("PRINT A[-1:-2];", "empty range -1:-2");
  bad("PRINT A[1.5:3];", "index must be an integer");
  bad("PRINT A[- x];", "expected an index or a range");
  bad("PRINT A[i];", "near 'i'", "expected an index or a range");
  bad("PRINT A[0:1,0:1,0:1,0:1,0:1,0:1,0:1,0:1,0:1];", "too many ranges");
  bad("PRINT A[0:4 2:5];", "near '2'", "expected ',' or ']'");
  bad("PRINT A[0:4", "near end of input");
  bad("PRINT;", "expected tensor name");
}

/* Negative indices and ranges resolve against the size, and out of
** bounds they name the dimension and the tensor. */
Test(print, resolve) {
  static const struct {
    const char *text;
    int64_t n, lo, hi; /* hi < 0: an error */
    const char *msg;
  } cases[] = {
      {"PRINT A[-1];", 5, 4, 5, NULL},     {"PRINT A[-5];", 5, 0, 1, NULL},
      {"PRINT A[1:-1];", 5, 1, 4, NULL},   {"PRINT A[:-2];", 5, 0, 3, NULL},
      {"PRINT A[-2:];", 5, 3, 5, NULL},    {"PRINT A[:];", 5, 0, 5, NULL},
      {"PRINT A[-6];", 5, 0, -1, "index -6 out of bounds for dimension 0 of A (size 5)"},
      {"PRINT A[5];", 5, 0, -1, "index 5 out of bounds"},
      {"PRINT A[0:6];", 5, 0, -1, "range 0:6 out of bounds"},
      {"PRINT A[3:-3];", 5, 0, -1, "range 3:-3 is empty"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tp_stmt *st = ok(cases[i].text);
    int64_t lo = -7, hi = -7;
    tr_err err;
    tr_clearerr(&err);
    int rc = tp_range_resolve(&st->range[0], cases[i].n, 0, "A", &lo, &hi, &err);
    if (cases[i].hi >= 0) {
      cr_assert_eq(rc, TR_OK, "%s: %s", cases[i].text, err.msg);
      cr_assert(lo == cases[i].lo && hi == cases[i].hi, "%s: %lld:%lld", cases[i].text,
                (long long)lo, (long long)hi);
    } else {
      cr_assert_eq(rc, TR_ESHAPE, "%s", cases[i].text);
      cr_assert(strstr(err.msg, cases[i].msg), "%s: %s", cases[i].text, err.msg);
    }
    tp_stmt_free(&st);
  }
}

/* R = X[ranges] copies a slice; SAVE takes ranges too. */
Test(slice, forms) {
  tp_stmt *st = ok("R = X[3:10, 2:5];");
  cr_assert_eq(st->kind, TP_ST_SLICE);
  cr_assert_str_eq(st->name, "R");
  cr_assert_str_eq(st->src, "X");
  cr_assert_eq(st->nranges, 2);
  range_is(st, 1, 1, 2, 1, 5, 0);
  tp_stmt_free(&st);
  st = ok("R = X;");
  cr_assert_eq(st->kind, TP_ST_SLICE);
  cr_assert_eq(st->nranges, 0);
  tp_stmt_free(&st);
  st = ok("SAVE X[0:5, :] TO 'f.npy';");
  cr_assert_eq(st->kind, TP_ST_SAVE);
  cr_assert_eq(st->nranges, 2);
  cr_assert_str_eq(st->path, "f.npy");
  tp_stmt_free(&st);
  bad("R = X[i, j];", "expected '[' after tensor name 'R'", "R[i,j] = ...", "copies a slice");
  bad("R = 3;", "expected '[' after tensor name 'R'");
  bad("R = sum(X[i]);", "expected '[' after tensor name 'R'");
  /* NumPy's habit: arithmetic on a copy gets the labelled form */
  bad("R = X[0:2] + 1;", "unexpected '+': 'R = X[..]' copies a slice of X", "R[i,j] = X[i,j] * 2;");
  bad("R = X * 2;", "unexpected '*': 'R = X' copies X", "R[i,j] = X[i,j] * 2;");
  bad("R = X == 1;", "unexpected '==': 'R = X' copies X");
  bad("SAVE X[0:2 TO 'f.npy';", "expected ',' or ']'");
}

/* LOAD's options in parentheses, for CSV files. */
Test(load, csv_options) {
  tp_stmt *st = ok("LOAD T FROM 'f.csv' (HEADER, DELIMITER ';');");
  cr_assert_eq(st->header, 1);
  cr_assert_eq(st->delim, ';');
  cr_assert(!st->has_null);
  tp_stmt_free(&st);
  st = ok("load T from 'f.csv' (delimiter '\\t', null nan, header false) CHUNK [4] TYPE f64;");
  cr_assert_eq(st->header, -1);
  cr_assert_eq(st->delim, '\t');
  cr_assert(st->has_null && isnan(st->null_value));
  cr_assert(st->has_chunk && st->has_type);
  tp_stmt_free(&st);
  st = ok("LOAD T FROM 'f.csv' (NULL -1.5, DELIMITER '|');");
  cr_assert(st->has_null && st->null_value == -1.5);
  cr_assert_eq(st->header, 0, "no HEADER: told from the file");
  tp_stmt_free(&st);
  bad("LOAD T FROM 'f.csv' (HEADRE);", "unknown LOAD option 'HEADRE'", "did you mean HEADER?");
  bad("LOAD T FROM 'f.csv' (HEADER, HEADER);", "LOAD option HEADER given twice");
  bad("LOAD T FROM 'f.csv' (DELIMITER ';;');", "one character");
  bad("LOAD T FROM 'f.csv' (DELIMITER '.');", "numbers are written with");
  bad("LOAD T FROM 'f.csv' (DELIMITER ;);", "quoted character");
  bad("LOAD T FROM 'f.csv' (NULL zero);", "expected nan or a number");
  bad("LOAD T FROM 'f.csv' ();", "expected a LOAD option");
}

/* ---- Assignments ------------------------------------------------------- */

Test(assign, matmul) {
  tp_stmt *st = ok("C[i,j] = A[i,k] * B[k,j];");
  tp_expr *e;
  cr_assert_eq(st->kind, TP_ST_ASSIGN);
  cr_assert_str_eq(st->name, "C");
  cr_assert_eq(st->nout, 2);
  cr_assert_str_eq(st->out_labels[0], "i");
  cr_assert_str_eq(st->out_labels[1], "j");
  e = st->rhs;
  cr_assert_eq(e->kind, TP_EXPR_BIN);
  cr_assert_eq(e->op, '*');
  cr_assert_eq(e->a->kind, TP_EXPR_REF);
  cr_assert_str_eq(e->a->name, "A");
  cr_assert_eq(e->a->nlabels, 2);
  cr_assert_str_eq(e->a->labels[0], "i");
  cr_assert_str_eq(e->a->labels[1], "k");
  cr_assert_str_eq(e->b->name, "B");
  cr_assert_str_eq(e->b->labels[0], "k");
  cr_assert_str_eq(e->b->labels[1], "j");
  cr_assert_eq(e->line, 1);
  tp_stmt_free(&st);
}

Test(assign, examples) {
  tp_stmt *st;
  rhs_is("C[i,j] = A[i,k] * B[k,j];", "(A[i,k] * B[k,j])");
  rhs_is("D[i,j] = MAX(A[i,k] + B[k,j]);", "MAX((A[i,k] + B[k,j]))");
  rhs_is("E[i,j] = SUM((X[i,k] - Y[j,k]) ^ 2);",
         "SUM(((X[i,k] - Y[j,k]) ^ 2))");
  rhs_is("d[i] = A[i,i];", "A[i,i]");
  rhs_is("T[j,i] = A[i,j];", "A[i,j]");
  rhs_is("s[] = SUM(A[i,j]);", "SUM(A[i,j])");
  rhs_is("H[n,h] = relu(SUM(X[n,d] * W[d,h]));",
         "relu(SUM((X[n,d] * W[d,h])))");
  st = ok("s[] = SUM(A[i,j]);");
  cr_assert_eq(st->nout, 0);
  cr_assert_eq(st->rhs->kind, TP_EXPR_AGG);
  cr_assert_eq(st->rhs->op, TK_AGG_SUM);
  tp_stmt_free(&st);
  st = ok("T[j,i] = A[i,j];");
  cr_assert_str_eq(st->out_labels[0], "j");
  cr_assert_str_eq(st->out_labels[1], "i");
  tp_stmt_free(&st);
  st = ok("H[n,h] = relu(SUM(X[n,d] * W[d,h]));");
  cr_assert_eq(st->rhs->kind, TP_EXPR_FN);
  cr_assert_eq(st->rhs->op, TK_OP_RELU);
  cr_assert_eq(st->rhs->a->kind, TP_EXPR_AGG);
  tp_stmt_free(&st);
}

Test(expr, precedence_and_associativity) {
  rhs_is("x[] = a[] - b[] - c[];", "((a[] - b[]) - c[])");
  rhs_is("x[] = a[] / b[] / c[];", "((a[] / b[]) / c[])");
  rhs_is("x[] = a[] ^ b[] ^ c[];", "(a[] ^ (b[] ^ c[]))");
  rhs_is("x[] = -a[] ^ 2;", "neg((a[] ^ 2))");
  rhs_is("x[] = a[] + b[] * c[];", "(a[] + (b[] * c[]))");
  rhs_is("x[] = a[] * b[] + c[];", "((a[] * b[]) + c[])");
  rhs_is("x[] = (a[] + b[]) * c[];", "((a[] + b[]) * c[])");
  rhs_is("x[] = a[] - -b[];", "(a[] - neg(b[]))");
  rhs_is("x[] = -a[] * b[];", "(neg(a[]) * b[])");
  rhs_is("x[] = a[] ^ -2;", "(a[] ^ -2)");
  rhs_is("x[] = 2 ^ 3 ^ 2 * a[];", "((2 ^ (3 ^ 2)) * a[])");
  rhs_is("x[] = a[] * +b[];", "(a[] * b[])");
  rhs_is("x[] = - - a[];", "neg(neg(a[]))");
}

Test(expr, numbers) {
  tp_stmt *st;
  rhs_is("x[] = 1 + 2.5 + .5 + 1e-3 + 2E+2 + 7.;",
         "(((((1 + 2.5) + 0.5) + 0.001) + 200) + 7)");
  st = ok("x[] = -2;");
  cr_assert_eq(st->rhs->kind, TP_EXPR_NUM, "negative literal folds");
  cr_assert_float_eq(st->rhs->num, -2.0, 0);
  tp_stmt_free(&st);
  st = ok("x[] = -2 ^ 2;");
  cr_assert_eq(st->rhs->kind, TP_EXPR_FN, "-2^2 is -(2^2)");
  cr_assert_eq(st->rhs->op, TK_OP_NEG);
  tp_stmt_free(&st);
  bad("x[] = 1e999;", "number out of range");
  bad("x[] = 2abc;", "malformed number");
  bad("x[] = 1.2.3;", "malformed number");
  bad("x[] = 0x10;", "malformed number");
  bad("x[] = 1e;", "malformed number");
}

Test(expr, functions_case_insensitive) {
  static const struct { const char *fn; int op; } fns[] = {
      {"relu", TK_OP_RELU}, {"EXP", TK_OP_EXP}, {"Log", TK_OP_LOG},
      {"sqrt", TK_OP_SQRT}, {"abs", TK_OP_ABS}, {"TANH", TK_OP_TANH},
      {"sigmoid", TK_OP_SIGMOID}, {"neg", TK_OP_NEG}};
  static const struct { const char *fn; int op; } aggs[] = {
      {"SUM", TK_AGG_SUM}, {"max", TK_AGG_MAX}, {"Min", TK_AGG_MIN}};
  char text[128];
  size_t i;
  for (i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    tp_stmt *st;
    snprintf(text, sizeof text, "y[i] = %s(x[i]);", fns[i].fn);
    st = ok(text);
    cr_assert_eq(st->rhs->kind, TP_EXPR_FN);
    cr_assert_eq(st->rhs->op, fns[i].op, "%s", fns[i].fn);
    cr_assert_eq(st->rhs->a->kind, TP_EXPR_REF);
    tp_stmt_free(&st);
  }
  for (i = 0; i < sizeof aggs / sizeof aggs[0]; i++) {
    tp_stmt *st;
    snprintf(text, sizeof text, "y[i] = %s(x[i,j]);", aggs[i].fn);
    st = ok(text);
    cr_assert_eq(st->rhs->kind, TP_EXPR_AGG);
    cr_assert_eq(st->rhs->op, aggs[i].op, "%s", aggs[i].fn);
    tp_stmt_free(&st);
  }
}

Test(expr, names_are_case_sensitive_and_not_reserved) {
  tp_stmt *st = ok("sum[i] = Sum[i] + SUM(max[i,j]) + exp[i];");
  char buf[512];
  cr_assert_str_eq(st->name, "sum");
  render(st->rhs, buf, sizeof buf);
  cr_assert_str_eq(buf, "((Sum[i] + SUM(max[i,j])) + exp[i])");
  tp_stmt_free(&st);
  st = ok("print[i] = show[i];");
  cr_assert_eq(st->kind, TP_ST_ASSIGN);
  cr_assert_str_eq(st->name, "print");
  tp_stmt_free(&st);
}

Test(expr, errors) {
  bad("C[i,i] = A[i,j];", "output label 'i' repeated");
  bad("C[i,j,i] = A[i,j];", "output label 'i' repeated");
  bad("x[i] = foo(A[i]);", "unknown function 'foo'");
  bad("x[i] = A + 1;", "expected '[' after tensor name 'A'");
  bad("x[i] = A;", "expected '[' after tensor name 'A'");
  bad("x = A[i];", "expected '[' after tensor name 'x'");
  bad("x[i] = ;", "near ';'", "expected an expression");
  bad("x[i] = A[i] +", "near end of input", "expected an expression");
  bad("x[i] = (A[i] + 1;", "near ';'", "expected ')'");
  bad("x[i] = A[i] 2;", "unexpected '2' after end of statement");
  bad("x[i] = A[i]; y", "unexpected 'y' after end of statement");
  bad("x[i] = A[i] @ B[i];", "near '@'", "unexpected character");
  bad("x[i] A[i];", "near 'A'", "expected '='");
  bad("x[1] = A[i];", "near '1'", "expected label");
  bad("x[i] = A[1];", "expected label");
  bad("x[i] = A[i,j,k,l,m,n,o,p,q];", "too many labels for 'A'", "8");
  bad("x[a,b,c,d,e,f,g,h,q] = A[i];", "too many labels for 'x'");
  bad("x[i] = SUM A[i];", "expected '[' after tensor name 'SUM'");
  bad("x[i] = relu(A[i];", "expected ')'");
  bad("x[i] = relu();", "near ')'", "expected an expression");
  bad("x[i] = A[i] ^;", "expected an expression");
}

/* Comparisons: lowest precedence, two-character tokens, no chains. */
Test(expr, comparisons) {
  rhs_is("x[i] = A[i] < B[i];", "(A[i] < B[i])");
  rhs_is("x[i] = A[i] <= B[i] + 1;", "(A[i] <= (B[i] + 1))");
  rhs_is("x[i] = 2 * A[i] > -B[i];", "((2 * A[i]) > neg(B[i]))");
  rhs_is("x[i] = A[i]>=B[i];", "(A[i] >= B[i])");
  rhs_is("x[i] = A[i] == B[i] ^ 2;", "(A[i] == (B[i] ^ 2))");
  rhs_is("x[i] = (A[i] != B[i]) * (B[i] < 0);", "((A[i] != B[i]) * (B[i] < 0))");
  rhs_is("x[] = MEAN(ARGMAX(P[n,l]) == ARGMAX(Y[n,l]));",
         "MEAN((ARGMAX(P[n,l]) == ARGMAX(Y[n,l])))");
  bad("x[i] = A[i] < B[i] < C[i];", "comparisons do not chain");
  bad("x[i] = A[i] ! B[i];", "near '!'", "not equal is '!='");
  bad("x[i] = A[i] =< B[i];", "unexpected '='");
  bad("x[i] == A[i];", "expected '='");
}

/* where(c, a, b) takes three arguments, the other functions one; the
** aggregations MEAN, ARGMAX and ARGMIN parse as the others do. */
Test(expr, where_step_and_new_aggregations) {
  tp_stmt *st;
  rhs_is("x[i] = where(A[i] > 0, A[i], 0);", "where((A[i] > 0), A[i], 0)");
  rhs_is("x[i] = step(A[i]) * B[i];", "(step(A[i]) * B[i])");
  rhs_is("x[i] = WHERE(A[i], where(B[i], 1, 2), -C[i]);",
         "where(A[i], where(B[i], 1, 2), neg(C[i]))");
  st = ok("x[i] = Mean(A[i,j]) + argmin(A[i,j]) + ArgMax(A[i,j]);");
  cr_assert_eq(st->rhs->a->a->op, TP_AGG_MEAN);
  cr_assert_eq(st->rhs->a->b->op, TP_AGG_ARGMIN);
  cr_assert_eq(st->rhs->b->op, TP_AGG_ARGMAX);
  tp_stmt_free(&st);
  bad("x[i] = where(A[i], B[i]);", "near ')'", "expected ','");
  bad("x[i] = where(A[i]);", "expected ','");
  bad("x[i] = relu(A[i], B[i]);", "relu takes one argument");
  bad("x[i] = MEAN(A[i], B[i]);", "MEAN takes one argument");
}

/* An unknown function, statement or option names the nearest one. */
Test(expr, did_you_mean) {
  bad("x[i] = sqr(A[i]);", "unknown function 'sqr' (did you mean sqrt?)");
  bad("x[i] = sigmod(A[i]);", "did you mean sigmoid?");
  bad("x[i] = ARGMX(A[i,j]);", "did you mean ARGMAX?");
  bad("x[i] = frobnicate(A[i]);", "unknown function 'frobnicate'");
  bad("PRNT A;", "unknown statement 'PRNT' (did you mean PRINT?)");
  bad("describ A;", "did you mean DESCRIBE?");
  bad("EXPLAIN (FORMTA JSON) C[i] = A[i];", "did you mean FORMAT?");
}

/* tr_err.at points at the token an error is about (1 + its offset). */
Test(expr, error_positions) {
  static const struct {
    const char *text;
    const char *at; /* the text from the token on */
  } cases[] = {
      {"x[i] = A[i] +;", ";"},
      {"x[i] = foo(A[i]);", "foo(A[i]);"},
      {"CREATE TENSOR A[0];", "0];"},
      {"x[i] =\n  A[i] @ B[i];", "@ B[i];"},
      {"PRINT A[4:2];", "4:2];"},
      {"SELCT 1;", "SELCT 1;"},
      {"x[i] = A[i] < B[i] < C[i];", "< C[i];"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tp_stmt *st = NULL;
    tr_err err;
    tr_clearerr(&err);
    cr_assert_neq(tp_parse(cases[i].text, strlen(cases[i].text), &st, &err), TR_OK);
    cr_assert_gt(err.at, 0, "%s: no position", cases[i].text);
    cr_assert_str_eq(cases[i].text + err.at - 1, cases[i].at, "%s", cases[i].text);
  }
  {
    tp_stmt *st = ok("PRINT  Foo[1];");
    cr_assert_eq(st->name_pos, 8);
    cr_assert_eq(st->ranges_pos, 11);
    tp_stmt_free(&st);
    st = ok("y[i] =\n  A[i] + B[i];");
    cr_assert_eq(st->rhs->pos, 15, "a BIN node sits at its operator");
    cr_assert_eq(st->rhs->a->pos, 10);
    cr_assert_eq(st->rhs->b->line, 2);
    tp_stmt_free(&st);
  }
}

Test(expr, rank8_refs) {
  tp_stmt *st = ok("x[a,b,c,d,e,f,g,h] = A[a,b,c,d,e,f,g,h];");
  cr_assert_eq(st->nout, 8);
  cr_assert_eq(st->rhs->nlabels, 8);
  cr_assert_str_eq(st->rhs->labels[7], "h");
  tp_stmt_free(&st);
}

Test(expr, nesting_limit) {
  static char text[8192];
  size_t o = 0;
  int i;
  tp_stmt *st;
  /* 150 parentheses: fine */
  o = (size_t)snprintf(text, sizeof text, "x[] = ");
  for (i = 0; i < 150; i++) text[o++] = '(';
  o += (size_t)snprintf(text + o, sizeof text - o, "a[]");
  for (i = 0; i < 150; i++) text[o++] = ')';
  text[o++] = ';';
  text[o] = '\0';
  st = ok(text);
  cr_assert_eq(st->rhs->kind, TP_EXPR_REF);
  tp_stmt_free(&st);
  /* 1000 parentheses: too deep */
  o = (size_t)snprintf(text, sizeof text, "x[] = ");
  for (i = 0; i < 1000; i++) text[o++] = '(';
  o += (size_t)snprintf(text + o, sizeof text - o, "a[]");
  for (i = 0; i < 1000; i++) text[o++] = ')';
  text[o] = '\0';
  bad(text, "expression nested too deeply");
  /* 1000 unary minuses ("--" would start a comment: separate them) */
  o = (size_t)snprintf(text, sizeof text, "x[] = ");
  for (i = 0; i < 1000; i++) {
    text[o++] = '-';
    text[o++] = ' ';
  }
  o += (size_t)snprintf(text + o, sizeof text - o, "a[];");
  bad(text, "expression nested too deeply");
  /* a long flat sum makes a deep left-leaning tree */
  o = (size_t)snprintf(text, sizeof text, "x[] = a[]");
  for (i = 0; i < 1000; i++) o += (size_t)snprintf(text + o, sizeof text - o, "+a[]");
  bad(text, "expression nested too deeply");
  /* a long right-associative power chain */
  o = (size_t)snprintf(text, sizeof text, "x[] = 2");
  for (i = 0; i < 1000; i++) o += (size_t)snprintf(text + o, sizeof text - o, "^2");
  bad(text, "expression nested too deeply");
}

Test(expr, long_names) {
  char name[TP_NAME_MAX + 1], text[512];
  tp_stmt *st;
  memset(name, 'n', TP_NAME_MAX - 1);
  name[TP_NAME_MAX - 1] = '\0';
  snprintf(text, sizeof text, "%s[%s] = %s[%s];", name, name, name, name);
  st = ok(text);
  cr_assert_str_eq(st->name, name);
  cr_assert_str_eq(st->out_labels[0], name);
  cr_assert_str_eq(st->rhs->name, name);
  cr_assert_str_eq(st->rhs->labels[0], name);
  tp_stmt_free(&st);
  name[TP_NAME_MAX - 1] = 'n';
  name[TP_NAME_MAX] = '\0';
  snprintf(text, sizeof text, "CREATE TENSOR %s[3];", name);
  bad(text, "tensor name", "too long");
  snprintf(text, sizeof text, "x[%s] = a[i];", name);
  bad(text, "label", "too long");
  snprintf(text, sizeof text, "x[i] = %s[i];", name);
  bad(text, "too long");
  snprintf(text, sizeof text, "x[i] = a[%s];", name);
  bad(text, "too long");
}

/* ---- EXPLAIN ----------------------------------------------------------- */

Test(explain, assignment) {
  tp_stmt *st = ok("EXPLAIN C[i,j] = A[i,k] * B[k,j];");
  cr_assert_eq(st->kind, TP_ST_EXPLAIN);
  cr_assert_str_eq(st->name, "C");
  cr_assert_eq(st->nout, 2);
  cr_assert_eq(st->rhs->kind, TP_EXPR_BIN);
  tp_stmt_free(&st);
  st = ok("explain s[] = SUM(A[i,j])");
  cr_assert_eq(st->kind, TP_ST_EXPLAIN);
  cr_assert_eq(st->nout, 0);
  tp_stmt_free(&st);
  bad("EXPLAIN SHOW TENSORS;", "expected an assignment");
  bad("EXPLAIN;", "expected an assignment");
  bad("EXPLAIN C[i,i] = A[i,j];", "output label 'i' repeated");
}

Test(explain, analyze_and_format) {
  tp_stmt *st = ok("EXPLAIN C[i] = A[i];");
  cr_assert(!st->analyze && !st->json, "plain EXPLAIN: text, not run");
  tp_stmt_free(&st);
  st = ok("EXPLAIN ANALYZE C[i,j] = A[i,k] * B[k,j];");
  cr_assert_eq(st->kind, TP_ST_EXPLAIN);
  cr_assert(st->analyze && !st->json);
  cr_assert_str_eq(st->name, "C");
  cr_assert_eq(st->nout, 2);
  tp_stmt_free(&st);
  st = ok("EXPLAIN (FORMAT JSON) C[i] = A[i];");
  cr_assert(!st->analyze && st->json);
  tp_stmt_free(&st);
  st = ok("EXPLAIN ANALYZE (FORMAT JSON) C[i] = A[i];");
  cr_assert(st->analyze && st->json);
  tp_stmt_free(&st);
  st = ok("EXPLAIN (FORMAT TEXT) C[i] = A[i]");
  cr_assert(!st->analyze && !st->json);
  tp_stmt_free(&st);
  st = ok("explain analyze ( format json ) c[i] = a[i];");
  cr_assert(st->analyze && st->json, "keywords in any case");
  cr_assert_str_eq(st->name, "c");
  tp_stmt_free(&st);
  st = ok("ExPlAiN AnAlYzE (FoRmAt TeXt) c[i] = a[i];");
  cr_assert(st->analyze && !st->json);
  tp_stmt_free(&st);
  st = ok("EXPLAIN ANALYZE (FORMAT TRACE) C[i] = A[i];");
  cr_assert(st->analyze && st->trace && !st->json && !st->dot, "the schedule as a Chrome trace");
  tp_stmt_free(&st);
  st = ok("explain (format trace) C[i] = A[i];");
  cr_assert(!st->analyze && st->trace, "the predicted schedule only");
  tp_stmt_free(&st);
}

/* A block's plan name has a part per node: one of a block of split
** products runs past 256 characters, and still fits. */
Test(explain, long_plan_names) {
  char q[1024], name[700];
  memset(name, 'x', sizeof name);
  name[400] = '\0';
  snprintf(q, sizeof q, "EXPLAIN ANALYZE (PLAN '%s') C[i] = A[i];", name);
  tp_stmt *st = ok(q);
  cr_assert_str_eq(st->plan, name);
  tp_stmt_free(&st);
  name[400] = 'x';
  name[sizeof name - 1] = '\0';
  snprintf(q, sizeof q, "EXPLAIN ANALYZE (PLAN '%s') C[i] = A[i];", name);
  bad(q, "plan name too long");
}

Test(explain, keywords_not_reserved) {
  /* ANALYZE followed by '[' is the tensor assigned to */
  tp_stmt *st = ok("EXPLAIN ANALYZE[i] = A[i];");
  cr_assert(!st->analyze);
  cr_assert_str_eq(st->name, "ANALYZE");
  tp_stmt_free(&st);
  st = ok("EXPLAIN ANALYZE analyze[i] = json[i];");
  cr_assert(st->analyze);
  cr_assert_str_eq(st->name, "analyze");
  cr_assert_str_eq(st->rhs->name, "json");
  tp_stmt_free(&st);
  st = ok("EXPLAIN (FORMAT JSON) format[i] = text[i];");
  cr_assert(st->json);
  cr_assert_str_eq(st->name, "format");
  tp_stmt_free(&st);
}

Test(explain, option_errors) {
  bad("EXPLAIN (FOO 1) C[i] = A[i];", "unknown EXPLAIN option 'FOO'");
  bad("EXPLAIN (analyze) C[i] = A[i];", "unknown EXPLAIN option 'analyze'");
  bad("EXPLAIN (FORMAT XML) C[i] = A[i];", "near 'XML'",
      "expected TEXT, JSON, DOT or TRACE");
  bad("EXPLAIN (FORMAT) C[i] = A[i];", "expected TEXT, JSON, DOT or TRACE");
  bad("EXPLAIN (FORMAT 'json') C[i] = A[i];", "expected TEXT, JSON, DOT or TRACE");
  bad("EXPLAIN (FORMAT JSON C[i] = A[i];", "near 'C'", "expected ',' or ')'");
  bad("EXPLAIN (FORMAT JSON,) C[i] = A[i];", "near ')'",
      "expected an EXPLAIN option");
  bad("EXPLAIN () C[i] = A[i];", "expected an EXPLAIN option");
  bad("EXPLAIN (FORMAT JSON, format text) C[i] = A[i];",
      "EXPLAIN option FORMAT given twice");
  bad("EXPLAIN (FORMAT JSON)", "end of input", "expected an assignment");
  bad("EXPLAIN ANALYZE;", "expected an assignment or COMMIT after EXPLAIN");
  bad("EXPLAIN ANALYZE ANALYZE C[i] = A[i];", "near 'ANALYZE'",
      "expected an assignment");
  bad("EXPLAIN (FORMAT JSON) ANALYZE C[i] = A[i];", "near 'ANALYZE'",
      "expected an assignment");
  bad("EXPLAIN ANALYZE (FORMAT JSON) SHOW TENSORS;", "expected an assignment");
  bad("EXPLAIN (FORMAT JSON) (FORMAT TEXT) C[i] = A[i];",
      "expected an assignment");
}

/* ---- SET --------------------------------------------------------------- */

Test(set, values) {
  static const struct {
    const char *text, *setting, *value;
  } cases[] = {
      {"SET threads = 4;", "threads", "4"},
      {"set Cache_Budget = 1.5", "cache_budget", "1.5"},
      {"SET x = -3;", "x", "-3"},
      {"SET x = - 3;", "x", "-3"},
      {"SET x = +.25;", "x", "+.25"},
      {"SET x = 1e3;", "x", "1e3"},
      {"SET x = 18446744073709551616;", "x", "18446744073709551616"},
      {"SET Placement = RoundRobin;", "placement", "RoundRobin"},
      {"SET debug = on;", "debug", "on"},
      {"SET set = set;", "set", "set"},
      {"SET x = 7 -- a comment\n;", "x", "7"},
      /* quoted, as PostgreSQL takes a value */
      {"SET layout = 'declared';", "layout", "declared"},
      {"SET x = '2';", "x", "2"},
      {"SET x = 'it''s';", "x", "it's"},
      {"SET x = '';", "x", ""},
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tp_stmt *st = ok(cases[i].text);
    cr_assert_eq(st->kind, TP_ST_SET, "%s", cases[i].text);
    cr_assert_str_eq(st->setting, cases[i].setting, "%s", cases[i].text);
    cr_assert_str_eq(st->value, cases[i].value, "%s", cases[i].text);
    cr_assert_null(st->rhs);
    tp_stmt_free(&st);
  }
}

Test(set, not_reserved) {
  tp_stmt *st = ok("SET[i] = A[i];");
  cr_assert_eq(st->kind, TP_ST_ASSIGN, "SET followed by '[' is a tensor");
  cr_assert_str_eq(st->name, "SET");
  tp_stmt_free(&st);
}

Test(set, errors) {
  char text[200], name[TP_NAME_MAX + 1];
  bad("SET x = ;", "near ';'", "expected a value (a number, a name or a quoted string)");
  bad("SET x =", "end of input", "expected a value");
  bad("SET x = -;", "near ';'", "expected a number");
  bad("SET x = -on;", "near 'on'", "expected a number");
  bad("SET x = (1);", "expected a value");
  bad("SET x 4;", "near '4'", "expected '='");
  bad("SET = 4;", "expected setting name");
  bad("SET 4 = 4;", "expected setting name");
  bad("SET;", "expected setting name");
  bad("SET x = 4 5;", "unexpected '5' after end of statement");
  bad("SET x = 1.2.3;", "malformed number");
  bad("SET x = 1e999;", "number out of range");
  memset(name, 'v', TP_NAME_MAX);
  name[TP_NAME_MAX] = '\0';
  snprintf(text, sizeof text, "SET x = %s;", name);
  bad(text, "value too long");
  snprintf(text, sizeof text, "SET x = '%s';", name);
  bad(text, "value too long");
  snprintf(text, sizeof text, "SET x = -%.*s;", TP_NAME_MAX - 1,
           "123456789012345678901234567890123456789012345678901234567890123");
  bad(text, "value too long");
  snprintf(text, sizeof text, "SET %s = 1;", name);
  bad(text, "setting name", "too long");
  {
    tp_stmt *st;
    name[TP_NAME_MAX - 1] = '\0'; /* the longest that fits */
    snprintf(text, sizeof text, "SET %s = %s;", name, name);
    st = ok(text);
    cr_assert_str_eq(st->setting, name);
    cr_assert_str_eq(st->value, name);
    tp_stmt_free(&st);
  }
}

/* ---- Lexical matters --------------------------------------------------- */

Test(lex, comments_and_lines) {
  const char *text =
      "-- a leading comment; with 'quote\n"
      "C[i,j] = -- comment ; here\n"
      "  A[i,k]\n"
      "  * 2\n"
      "  + relu(\n"
      "  B[k,j]);  -- trailing\n";
  tp_stmt *st = ok(text);
  tp_expr *e = st->rhs;
  /* ((A * 2) + relu(B)) */
  cr_assert_eq(e->kind, TP_EXPR_BIN);
  cr_assert_eq(e->op, '+');
  cr_assert_eq(e->line, 3, "line of the first token of the sum");
  cr_assert_eq(e->a->line, 3);
  cr_assert_eq(e->a->a->line, 3);
  cr_assert_eq(e->a->b->line, 4);
  cr_assert_eq(e->b->kind, TP_EXPR_FN);
  cr_assert_eq(e->b->line, 5);
  cr_assert_eq(e->b->a->line, 6);
  tp_stmt_free(&st);
  st = ok("x[] =\n\n-a[];");
  cr_assert_eq(st->rhs->line, 3);
  cr_assert_eq(st->rhs->a->line, 3);
  tp_stmt_free(&st);
  st = ok("SAVE A TO 'two\nlines';\n");
  cr_assert_str_eq(st->path, "two\nlines");
  tp_stmt_free(&st);
  st = ok("SAVE A TO 'x'\n\n;");
  tp_stmt_free(&st);
}

Test(lex, lines_after_multiline_string) {
  tp_stmt *st = ok("FILL A\r\n UNIFORM(0, 1)\r\n SEED 7; -- tail");
  cr_assert_eq(st->seed, 7);
  tp_stmt_free(&st);
  /* a string spanning lines advances the line count */
  st = ok("LOAD A FROM 'a\nb\nc'; ");
  cr_assert_str_eq(st->path, "a\nb\nc");
  tp_stmt_free(&st);
}

Test(lex, double_dash_is_a_comment) {
  tp_stmt *st = ok("x[i] = a[i]--b[i];\n;");
  cr_assert_eq(st->rhs->kind, TP_EXPR_REF, "a--b is a then a comment");
  tp_stmt_free(&st);
}

Test(lex, keywords_any_case) {
  tp_stmt *st = ok("CrEaTe TeNsOr A[2] ChUnK [1] tYpE F64;");
  cr_assert_eq(st->kind, TP_ST_CREATE);
  cr_assert_str_eq(st->name, "A");
  tp_stmt_free(&st);
  st = ok("DeScRiBe abc");
  cr_assert_str_eq(st->name, "abc");
  tp_stmt_free(&st);
}

Test(lex, len_is_respected) {
  const char *text = "PRINT A; garbage @@@";
  tp_stmt *st = NULL;
  tr_err err;
  cr_assert_eq(tp_parse(text, 8, &st, &err), TR_OK);
  cr_assert_str_eq(st->name, "A");
  tp_stmt_free(&st);
  cr_assert_eq(tp_parse(text, 7, &st, &err), TR_OK, "';' optional");
  tp_stmt_free(&st);
  cr_assert_eq(tp_parse("PRINT A\0B", 9, &st, &err), TR_ESYNTAX);
  cr_assert_null(st);
  cr_assert_not_null(strstr(err.msg, "unexpected character"), "%s", err.msg);
}

Test(lex, empty_statements) {
  tp_stmt *st = (tp_stmt *)1;
  tr_err err;
  bad(";", "empty statement");
  bad("", "empty statement");
  bad("  -- only a comment\n ;", "empty statement");
  cr_assert_eq(tp_parse(NULL, 0, &st, &err), TR_ESYNTAX);
  cr_assert_null(st);
  cr_assert_eq(tp_parse("x", 1, NULL, &err), TR_EINVAL);
  cr_assert_eq(tp_parse("PRINT A;", 8, &st, NULL), TR_OK, "err may be NULL");
  tp_stmt_free(&st);
  cr_assert_eq(tp_parse("PRINT;", 6, &st, NULL), TR_ESYNTAX);
}

Test(lex, unknown_statement) {
  bad("SELECT * FROM A;", "unknown statement 'SELECT'", "A; or A[0:5, :];");
  bad("update A set x = 1;", "unknown statement 'update'", "tradb has no UPDATE", "A[i,j] = A[i,j] * 2;");
  bad("DELETE FROM A;", "DROP TENSOR A;");
  bad("INSERT INTO A VALUES (1);", "LOAD, FILL or an assignment");
  bad("42;", "near '42'", "expected a statement");
  bad("'abc", "unterminated string");
}

Test(lex, message_shows_long_token_truncated) {
  char text[300];
  tp_stmt *st = NULL;
  tr_err err;
  memset(text, 'z', 200);
  memcpy(text, "PRINT A ", 8);
  text[200] = '\0';
  cr_assert_eq(tp_parse(text, strlen(text), &st, &err), TR_ESYNTAX);
  cr_assert_not_null(strstr(err.msg, "..."), "%s", err.msg);
  cr_assert_lt(strlen(err.msg), 150);
}

/* ---- tp_statement_end / tp_is_blank ------------------------------------ */

Test(statement_end, tricky) {
  cr_assert_eq(tp_statement_end(""), 0);
  cr_assert_eq(tp_statement_end(NULL), 0);
  cr_assert_eq(tp_statement_end("PRINT A"), 0);
  cr_assert_eq(tp_statement_end("PRINT A;"), 8);
  cr_assert_eq(tp_statement_end("PRINT A; PRINT B;"), 8);
  cr_assert_eq(tp_statement_end(";"), 1);
  cr_assert_eq(tp_statement_end("  \n -- x;\n;"), 11);
  /* ';' and quote inside a comment */
  cr_assert_eq(tp_statement_end("x[] -- it's; here\n = a[];"), 25);
  cr_assert_eq(tp_statement_end("x[] -- it's; here"), 0);
  /* ';' and '--' inside a string */
  cr_assert_eq(tp_statement_end("SAVE A TO 'a;--b';"), 18);
  cr_assert_eq(tp_statement_end("SAVE A TO 'it''s;';"), 19);
  cr_assert_eq(tp_statement_end("SAVE A TO 'a;b"), 0, "unterminated");
  cr_assert_eq(tp_statement_end("SAVE A TO 'a'';"), 0, "'' escapes");
  cr_assert_eq(tp_statement_end("SAVE A TO ''; x"), 13);
  cr_assert_eq(tp_statement_end("a - -b;"), 7);
  cr_assert_eq(tp_statement_end("a --b;"), 0);
}

/* A statement that ends inside a string can never complete: the shell
** names the quote that opened it rather than a missing ';'. */
Test(statement_end, open_quote) {
  cr_assert_eq(tp_open_quote(NULL), -1);
  cr_assert_eq(tp_open_quote("SAVE A TO 'a.npy';"), -1);
  cr_assert_eq(tp_open_quote("PRINT A"), -1, "incomplete, but in no string");
  cr_assert_eq(tp_open_quote("SAVE A TO 'a;b"), 10);
  cr_assert_eq(tp_open_quote("SAVE A TO 'it''s"), 10, "'' inside the string");
  cr_assert_eq(tp_open_quote("E[n] = X[n,d'] * 2;\nPRINT E;"), 12);
  cr_assert_eq(tp_open_quote("x[] -- it's\n"), -1, "a quote in a comment");
  cr_assert_eq(tp_open_quote("SAVE A TO 'a'; SAVE B TO 'b"), -1, "the first statement completes");
}

Test(statement_end, splits_for_parse) {
  const char *text = "CREATE TENSOR A[2];\nFILL A ONES; -- c;\nPRINT A[0:1];";
  size_t off = 0, n;
  int count = 0;
  static const tp_stmt_kind kinds[] = {TP_ST_CREATE, TP_ST_FILL, TP_ST_PRINT};
  while ((n = tp_statement_end(text + off)) != 0) {
    tp_stmt *st = NULL;
    tr_err err;
    cr_assert_eq(tp_parse(text + off, n, &st, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(st->kind, kinds[count]);
    tp_stmt_free(&st);
    off += n;
    count++;
  }
  cr_assert_eq(count, 3);
}

Test(is_blank, forms) {
  cr_assert(tp_is_blank(""));
  cr_assert(tp_is_blank("  \t\r\n"));
  cr_assert(tp_is_blank("-- comment ; 'x\n  -- another"));
  cr_assert(!tp_is_blank(";"));
  cr_assert(!tp_is_blank("-- c\nx"));
  cr_assert(!tp_is_blank("- -"));
}

/* ---- keywords ---------------------------------------------------------- */

Test(keywords, list) {
  const char *const *kw = tp_keywords();
  static const char *const want[] = {"CREATE", "TENSOR", "CHUNK", "TYPE",
                                     "LOAD", "FROM", "SAVE", "TO", "FILL",
                                     "ZEROS", "ONES", "IDENTITY", "UNIFORM",
                                     "NORMAL", "SEED", "SHOW", "TENSORS",
                                     "DESCRIBE", "DROP", "IF", "EXISTS",
                                     "PRINT", "EXPLAIN", "ANALYZE", "FORMAT",
                                     "JSON", "TEXT", "SET", "SUM", "MAX", "MIN",
                                     "relu", "exp", "log", "sqrt", "abs",
                                     "tanh", "sigmoid", "neg"};
  size_t i, n = 0;
  cr_assert_eq(kw, tp_keyword_list);
  while (kw[n]) n++;
  cr_assert_gt(n, 30);
  for (i = 0; i < sizeof want / sizeof want[0]; i++) {
    size_t j;
    int found = 0;
    for (j = 0; j < n; j++)
      if (!strcmp(kw[j], want[i])) found = 1;
    cr_assert(found, "keyword %s missing", want[i]);
  }
}
