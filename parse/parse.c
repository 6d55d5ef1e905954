/*
** parse/parse.c - the statements: each keyword's parser in one table, and
** tp_parse, which lexes a statement and parses it to a syntax tree.
*/
#include "config.h"
#include "parse/parse_int.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- Statements -------------------------------------------------------- */

/* out '[' labels ']' '=' expr */
static int s_assign(pi_parser *p, tp_stmt *st) {
  int rc, i, j, h = 0;
  if ((rc = pi_ident(p, st->name, "tensor name")) != TR_OK ||
      (rc = pi_expect(p, '[')) != TR_OK ||
      (rc = pi_label_list(p, st->out_labels, &st->nout, st->name)) != TR_OK)
    return rc;
  for (i = 0; i < st->nout; i++)
    for (j = 0; j < i; j++)
      if (!strcmp(st->out_labels[i], st->out_labels[j]))
        return pi_fail2(p, pi_peek(p, 0), "output label '%s' repeated",
                       st->out_labels[i]);
  if ((rc = pi_expect(p, '=')) != TR_OK) return rc;
  return pi_expr(p, &st->rhs, &h);
}

/* [CHUNK [..]] [TYPE t], in either order, at most once each. */
static int s_options(pi_parser *p, tp_stmt *st) {
  int rc;
  for (;;) {
    const pi_tok *t = pi_peek(p, 0);
    if (pi_is_kw(t, "CHUNK")) {
      if (st->has_chunk) return pi_fail(p, t, "CHUNK given twice");
      pi_next(p);
      if ((rc = pi_dim_list(p, st->chunk, &st->chunk_rank, "chunk extent")) !=
          TR_OK)
        return rc;
      st->has_chunk = 1;
    } else if (pi_is_kw(t, "TYPE")) {
      const pi_tok *ty;
      if (st->has_type) return pi_fail(p, t, "TYPE given twice");
      pi_next(p);
      ty = pi_peek(p, 0);
      if (pi_is_kw(ty, "f32") || pi_is_kw(ty, "float32")) {
        st->dtype = TR_F32;
      } else if (pi_is_kw(ty, "f64") || pi_is_kw(ty, "float64")) {
        st->dtype = TR_F64;
      } else {
        return pi_fail(p, ty, "expected a type (f32 or f64)");
      }
      pi_next(p);
      st->has_type = 1;
    } else {
      return TR_OK;
    }
  }
}

static int s_create(pi_parser *p, tp_stmt *st) {
  int rc;
  const pi_tok *t;
  st->kind = TP_ST_CREATE;
  if ((rc = pi_expect_kw(p, "TENSOR")) != TR_OK ||
      (rc = pi_ident(p, st->name, "tensor name")) != TR_OK ||
      (rc = pi_dim_list(p, st->shape, &st->rank, "dimension")) != TR_OK)
    return rc;
  t = pi_peek(p, 0);
  if ((rc = s_options(p, st)) != TR_OK) return rc;
  if (st->has_chunk && st->chunk_rank != st->rank)
    return pi_fail2(p, t,
                   "CHUNK has %d entr%s but tensor '%s' has rank %d",
                   st->chunk_rank, st->chunk_rank == 1 ? "y" : "ies", st->name,
                   st->rank);
  return TR_OK;
}

static int s_load(pi_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_LOAD;
  if ((rc = pi_ident(p, st->name, "tensor name")) != TR_OK ||
      (rc = pi_expect_kw(p, "FROM")) != TR_OK ||
      (rc = pi_path(p, st->path)) != TR_OK)
    return rc;
  return s_options(p, st);
}

static int s_save(pi_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_SAVE;
  if ((rc = pi_ident(p, st->name, "tensor name")) != TR_OK ||
      (rc = pi_expect_kw(p, "TO")) != TR_OK)
    return rc;
  return pi_path(p, st->path);
}

static int s_fill(pi_parser *p, tp_stmt *st) {
  int rc, params = 0;
  const pi_tok *t;
  st->kind = TP_ST_FILL;
  if ((rc = pi_ident(p, st->name, "tensor name")) != TR_OK) return rc;
  t = pi_peek(p, 0);
  if (pi_is_kw(t, "ZEROS")) {
    st->fill = TP_FILL_ZEROS;
  } else if (pi_is_kw(t, "ONES")) {
    st->fill = TP_FILL_ONES;
  } else if (pi_is_kw(t, "IDENTITY")) {
    st->fill = TP_FILL_IDENTITY;
  } else if (pi_is_kw(t, "UNIFORM")) {
    st->fill = TP_FILL_UNIFORM;
    params = 1;
  } else if (pi_is_kw(t, "NORMAL")) {
    st->fill = TP_FILL_NORMAL;
    params = 1;
  } else {
    return pi_fail(p, t, "expected ZEROS, ONES, IDENTITY, UNIFORM or NORMAL");
  }
  pi_next(p);
  if (params) {
    if ((rc = pi_expect(p, '(')) != TR_OK ||
        (rc = pi_signed(p, &st->p0)) != TR_OK ||
        (rc = pi_expect(p, ',')) != TR_OK ||
        (rc = pi_signed(p, &st->p1)) != TR_OK ||
        (rc = pi_expect(p, ')')) != TR_OK)
      return rc;
  }
  t = pi_peek(p, 0);
  if (pi_is_kw(t, "SEED")) {
    const pi_tok *n;
    if (!params)
      return pi_fail(p, t, "SEED is only allowed after UNIFORM or NORMAL");
    pi_next(p);
    n = pi_peek(p, 0);
    if (n->type != S_NUM || !n->is_int || n->ovf)
      return pi_fail(p, n, "SEED must be a non-negative integer (below 2^64)");
    st->seed = n->ival;
    st->has_seed = 1;
    pi_next(p);
  }
  return TR_OK;
}

static int s_drop(pi_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_DROP;
  if ((rc = pi_expect_kw(p, "TENSOR")) != TR_OK) return rc;
  if (pi_is_kw(pi_peek(p, 0), "IF") && pi_is_kw(pi_peek(p, 1), "EXISTS")) {
    pi_next(p);
    pi_next(p);
    st->if_exists = 1;
  }
  return pi_ident(p, st->name, "tensor name");
}

/* A non-negative index for PRINT ranges. */
static int s_index(pi_parser *p, int64_t *out) {
  const pi_tok *t = pi_peek(p, 0);
  if (t->type != S_NUM || !t->is_int)
    return pi_fail(p, t, "index must be a non-negative integer");
  if (t->ovf || t->ival >= (uint64_t)S_DIM_MAX)
    return pi_fail(p, t, "index too large");
  *out = (int64_t)t->ival;
  pi_next(p);
  return TR_OK;
}

/* After an item of a list closed by `closer`: consume ',' (returns 1: more
** items follow) or the closer (returns TR_OK: the list is done); anything
** else is a syntax error. */
static int s_list_next(pi_parser *p, int closer) {
  const pi_tok *t = pi_peek(p, 0);
  if (pi_is_punct(t, closer)) {
    pi_next(p);
    return TR_OK;
  }
  if (!pi_is_punct(t, ','))
    return pi_fail(p, t, closer == ']' ? "expected ',' or ']'" : "expected ',' or ')'");
  pi_next(p);
  return 1;
}

static int s_print(pi_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_PRINT;
  if ((rc = pi_ident(p, st->name, "tensor name")) != TR_OK) return rc;
  if (!pi_is_punct(pi_peek(p, 0), '[')) return TR_OK;
  pi_next(p);
  if (pi_is_punct(pi_peek(p, 0), ']')) {
    pi_next(p);
    return TR_OK;
  }
  for (;;) {
    const pi_tok *t = pi_peek(p, 0);
    int64_t lo = 0, hi = -1;
    if (st->nranges == TR_MAX_RANK)
      return pi_fail(p, t, "too many ranges (at most %d)", TR_MAX_RANK);
    if (pi_is_punct(t, ':')) {
      pi_next(p);
      if (pi_peek(p, 0)->type == S_NUM && (rc = s_index(p, &hi)) != TR_OK)
        return rc;
    } else if (t->type == S_NUM) {
      if ((rc = s_index(p, &lo)) != TR_OK) return rc;
      if (pi_is_punct(pi_peek(p, 0), ':')) {
        pi_next(p);
        if (pi_peek(p, 0)->type == S_NUM && (rc = s_index(p, &hi)) != TR_OK)
          return rc;
      } else {
        hi = lo + 1;
      }
    } else if (pi_is_punct(t, '-')) {
      return pi_fail(p, t, "index must be a non-negative integer");
    } else {
      return pi_fail(p, t, "expected an index or a range such as 0:4");
    }
    if (hi >= 0 && hi <= lo)
      return pi_fail2(p, t, "empty range %lld:%lld", (long long)lo,
                     (long long)hi);
    st->lo[st->nranges] = lo;
    st->hi[st->nranges] = hi;
    st->nranges++;
    if ((rc = s_list_next(p, ']')) != 1) return rc;
  }
}

/* ---- EXPLAIN options ----------------------------------------------------- */

/* FORMAT TEXT | JSON | DOT | TRACE */
static int s_opt_format(pi_parser *p, tp_stmt *st) {
  const pi_tok *v = pi_peek(p, 0);
  st->json = st->dot = st->trace = 0;
  if (pi_is_kw(v, "TEXT")) {
  } else if (pi_is_kw(v, "JSON")) {
    st->json = 1;
  } else if (pi_is_kw(v, "DOT")) {
    st->dot = 1;
  } else if (pi_is_kw(v, "TRACE")) {
    st->trace = 1;
  } else {
    return pi_fail(p, v, "expected TEXT, JSON, DOT or TRACE after FORMAT");
  }
  pi_next(p);
  return TR_OK;
}

/* PLAN 'name': run the named alternative (EXPLAIN ANALYZE only). */
static int s_opt_plan(pi_parser *p, tp_stmt *st) {
  const pi_tok *v = pi_peek(p, 0);
  size_t o = 0;
  if (v->type != S_STR) return pi_fail(p, v, "expected a quoted plan name after PLAN");
  for (size_t i = 1; i + 1 < v->n; i++) {
    char c = v->p[i];
    if (c == '\'') i++;
    if (o + 1 >= sizeof st->plan) return pi_fail(p, v, "plan name too long");
    st->plan[o++] = c;
  }
  st->plan[o] = '\0';
  if (!o) return pi_fail(p, v, "empty plan name");
  pi_next(p);
  return TR_OK;
}

/* The options EXPLAIN knows, each with the parser of its value (which
** consumes the value and sets the statement's fields): a new option is
** one entry here and one such function. */
static const struct {
  const char *name;
  int (*value)(pi_parser *p, tp_stmt *st);
} s_explain_opts[] = {{"FORMAT", s_opt_format}, {"PLAN", s_opt_plan}};

#define S_NEXPLAIN_OPTS (sizeof s_explain_opts / sizeof s_explain_opts[0])

/* '(' NAME value [, NAME value]... ')' after EXPLAIN [ANALYZE]; p is at
** the '('.  Each option may be given once. */
static int s_explain_options(pi_parser *p, tp_stmt *st) {
  int seen[S_NEXPLAIN_OPTS] = {0}, rc;
  char tok[64];
  pi_next(p); /* '(' */
  for (;;) {
    const pi_tok *t = pi_peek(p, 0);
    size_t i;
    if (t->type != S_IDENT) return pi_fail(p, t, "expected an EXPLAIN option");
    for (i = 0; i < S_NEXPLAIN_OPTS && !pi_is_kw(t, s_explain_opts[i].name); i++)
      continue;
    if (i == S_NEXPLAIN_OPTS) {
      pi_show(t, tok, sizeof tok);
      return pi_fail2(p, t, "unknown EXPLAIN option '%s'", tok);
    }
    if (seen[i])
      return pi_fail(p, t, "EXPLAIN option %s given twice",
                    s_explain_opts[i].name);
    seen[i] = 1;
    pi_next(p);
    if ((rc = s_explain_opts[i].value(p, st)) != TR_OK) return rc;
    if ((rc = s_list_next(p, ')')) != 1) return rc;
  }
}

/* EXPLAIN [ANALYZE] [(options)] assignment; p is after EXPLAIN.  Keywords
** are not reserved, so ANALYZE followed by '[' is the assignment's tensor. */
static int s_explain(pi_parser *p, tp_stmt *st) {
  const pi_tok *a;
  int rc;
  st->kind = TP_ST_EXPLAIN;
  if (pi_is_kw(pi_peek(p, 0), "ANALYZE") && !pi_is_punct(pi_peek(p, 1), '[')) {
    pi_next(p);
    st->analyze = 1;
  }
  if (pi_is_punct(pi_peek(p, 0), '(') &&
      (rc = s_explain_options(p, st)) != TR_OK)
    return rc;
  if (st->plan[0] && !st->analyze)
    return pi_fail(p, pi_peek(p, 0), "PLAN needs EXPLAIN ANALYZE (it runs that plan)");
  a = pi_peek(p, 0);
  if (pi_is_kw(a, "COMMIT") && !pi_is_punct(pi_peek(p, 1), '[')) {
    pi_next(p);
    st->block = 1;
    return TR_OK;
  }
  if (a->type != S_IDENT || !pi_is_punct(pi_peek(p, 1), '['))
    return pi_fail(p, a, "expected an assignment or COMMIT after EXPLAIN");
  return s_assign(p, st);
}

/* BEGIN [TRANSACTION|WORK] / COMMIT / ROLLBACK. */
static int s_block_kw(pi_parser *p) {
  const pi_tok *t = pi_peek(p, 0);
  if (pi_is_kw(t, "TRANSACTION") || pi_is_kw(t, "WORK")) pi_next(p);
  return TR_OK;
}
static int s_begin(pi_parser *p, tp_stmt *st) {
  st->kind = TP_ST_BEGIN;
  return s_block_kw(p);
}
static int s_commit(pi_parser *p, tp_stmt *st) {
  st->kind = TP_ST_COMMIT;
  return s_block_kw(p);
}
static int s_rollback(pi_parser *p, tp_stmt *st) {
  st->kind = TP_ST_ROLLBACK;
  return s_block_kw(p);
}

/* SET name = value; p is after SET.  The name is lower-cased (settings
** are case-insensitive); the value, a number with an optional sign or a
** name, is kept as written (the sign joined to the number) for the
** engine to interpret. */
static int s_set(pi_parser *p, tp_stmt *st) {
  const pi_tok *v, *sign = NULL;
  char *c;
  size_t n;
  int rc;
  st->kind = TP_ST_SET;
  if ((rc = pi_ident(p, st->setting, "setting name")) != TR_OK ||
      (rc = pi_expect(p, '=')) != TR_OK)
    return rc;
  for (c = st->setting; *c; c++) *c = (char)tolower((unsigned char)*c);
  v = pi_peek(p, 0);
  if (pi_is_punct(v, '-') || pi_is_punct(v, '+')) {
    sign = v;
    pi_next(p);
    v = pi_peek(p, 0);
    if (v->type != S_NUM) return pi_fail(p, v, "expected a number");
  } else if (v->type != S_NUM && v->type != S_IDENT) {
    return pi_fail(p, v, "expected a value (a number or a name)");
  }
  n = (sign ? 1 : 0) + v->n;
  if (n >= TP_NAME_MAX)
    return pi_fail(p, v, "value too long (at most %d characters)",
                  TP_NAME_MAX - 1);
  if (sign) st->value[0] = (char)sign->ch;
  memcpy(st->value + (sign ? 1 : 0), v->p, v->n);
  st->value[n] = '\0';
  pi_next(p);
  return TR_OK;
}

/* One statement of any kind; p is at its first token. */
static int s_show_tensors(pi_parser *p, tp_stmt *st) {
  st->kind = TP_ST_SHOW;
  return pi_expect_kw(p, "TENSORS");
}

static int s_describe(pi_parser *p, tp_stmt *st) {
  st->kind = TP_ST_DESCRIBE;
  return pi_ident(p, st->name, "tensor name");
}

/* Statements by their first keyword; each parser starts after it. */
static const struct {
  const char *kw;
  int (*parse)(pi_parser *p, tp_stmt *st);
} s_statements[] = {
  {"CREATE", s_create}, {"LOAD", s_load},          {"SAVE", s_save},
  {"FILL", s_fill},     {"SHOW", s_show_tensors},  {"DESCRIBE", s_describe},
  {"DROP", s_drop},     {"PRINT", s_print},        {"EXPLAIN", s_explain},
  {"SET", s_set},       {"BEGIN", s_begin},        {"COMMIT", s_commit},
  {"END", s_commit},    {"ROLLBACK", s_rollback}};

static int s_statement(pi_parser *p, tp_stmt *st) {
  const pi_tok *t = pi_peek(p, 0), *t1 = pi_peek(p, 1);
  char tok[64];
  if (t->type == S_EOF || pi_is_punct(t, ';'))
    return tr_seterr(p->err, TR_ESYNTAX, "empty statement");
  if (t->type != S_IDENT) return pi_fail(p, t, "expected a statement");
  if (pi_is_punct(t1, '[')) {
    st->kind = TP_ST_ASSIGN;
    return s_assign(p, st);
  }
  for (size_t i = 0; i < sizeof s_statements / sizeof s_statements[0]; i++)
    if (pi_is_kw(t, s_statements[i].kw)) {
      pi_next(p);
      return s_statements[i].parse(p, st);
    }
  pi_show(t, tok, sizeof tok);
  if (pi_is_punct(t1, '='))
    return pi_fail2(p, t, "expected '[' after tensor name '%s'", tok);
  return pi_fail2(p, t, "unknown statement '%s'", tok);
}

int tp_parse(const char *text, size_t len, tp_stmt **out, tr_err *err) {
  pi_parser p;
  tp_stmt *st = NULL;
  const pi_tok *t;
  char tok[64];
  int rc;
  if (!out) return tr_seterr(err, TR_EINVAL, "tp_parse: no output");
  *out = NULL;
  if (!text) len = 0;
  memset(&p, 0, sizeof p);
  p.text = text ? text : "";
  p.len = len;
  p.err = err;
  if ((rc = pi_lex(&p)) != TR_OK) goto done;
  if (!(st = calloc(1, sizeof *st))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  if ((rc = s_statement(&p, st)) != TR_OK) goto done;
  if (pi_is_punct(pi_peek(&p, 0), ';')) pi_next(&p);
  t = pi_peek(&p, 0);
  if (t->type != S_EOF) {
    pi_show(t, tok, sizeof tok);
    rc = pi_fail2(&p, t, "unexpected '%s' after end of statement", tok);
    goto done;
  }
  *out = st;
  st = NULL;
done:
  tp_stmt_free(&st);
  free(p.toks);
  return rc;
}

void tp_stmt_free(tp_stmt **s) {
  if (!s || !*s) return;
  tp_expr_free((*s)->rhs);
  free(*s);
  *s = NULL;
}
