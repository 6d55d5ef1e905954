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

/* The statement's tensor name, and where it is. */
static int s_name(pi_parser *p, tp_stmt *st) {
  st->name_pos = pi_pos(p, pi_peek(p, 0));
  return pi_ident(p, st->name, "tensor name");
}

/* out '[' labels ']' '=' expr */
static int s_assign(pi_parser *p, tp_stmt *st) {
  int rc, i, j, h = 0;
  if ((rc = s_name(p, st)) != TR_OK ||
      (rc = pi_expect(p, '[')) != TR_OK ||
      (rc = pi_label_list(p, st->out_labels, &st->nout, st->name)) != TR_OK)
    return rc;
  for (i = 0; i < st->nout; i++)
    for (j = 0; j < i; j++)
      if (!strcmp(st->out_labels[i], st->out_labels[j]))
        return pi_fail2(p, pi_peek(p, 0), "output label '%s' repeated",
                       st->out_labels[i]);
  const pi_tok *t = pi_peek(p, 0);
  if (t->type == S_EOF || pi_is_punct(t, ';')) { /* labels where ranges were meant? */
    char eg[3 * TR_MAX_RANK + 4] = "0:2";
    for (i = 1; i < st->nout; i++) strcat(eg, ", :");
    return pi_fail2(p, t, "expected '=' and the right side of an assignment to %s (a slice of it "
                          "is shown with numbers: %s[%s])", st->name, st->name, st->nout ? eg : "");
  }
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
  if ((rc = pi_expect_kw(p, "TENSOR")) != TR_OK || (rc = s_name(p, st)) != TR_OK ||
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

/* ---- LOAD options ---------------------------------------------------------- */

/* HEADER [true|false|on|off]: whether the CSV's first line names the
** columns (without the option, tradb tells from the line itself). */
static int s_opt_header(pi_parser *p, tp_stmt *st) {
  const pi_tok *v = pi_peek(p, 0);
  st->header = 1;
  if (pi_is_kw(v, "true") || pi_is_kw(v, "on")) {
    pi_next(p);
  } else if (pi_is_kw(v, "false") || pi_is_kw(v, "off")) {
    st->header = -1;
    pi_next(p);
  }
  return TR_OK;
}

/* DELIMITER 'c': one character (a tab as '\t' or a tab itself); not a
** quote, a digit or anything a number is written with. */
static int s_opt_delimiter(pi_parser *p, tp_stmt *st) {
  const pi_tok *v = pi_peek(p, 0);
  char c;
  if (v->type != S_STR) return pi_fail(p, v, "expected a quoted character after DELIMITER, such as ';'");
  if (v->n == 3 && v->p[1] != '\'') c = v->p[1];
  else if (v->n == 4 && v->p[1] == '\\' && v->p[2] == 't') c = '\t';
  else return pi_fail(p, v, "DELIMITER is one character, such as ',' ';' '|' or '\\t'");
  if (strchr("0123456789.+-eE\"\n\r", c) || (unsigned char)c < 0x09)
    return pi_fail(p, v, "DELIMITER cannot be a character numbers are written with");
  st->delim = c;
  pi_next(p);
  return TR_OK;
}

/* NULL nan | NULL number: what an empty field reads as (without it, an
** empty field is an error). */
static int s_opt_null(pi_parser *p, tp_stmt *st) {
  const pi_tok *v = pi_peek(p, 0);
  if (pi_is_kw(v, "nan")) {
    st->null_value = NAN;
    pi_next(p);
  } else if (pi_signed(p, &st->null_value) != TR_OK) {
    return pi_fail(p, v, "expected nan or a number after NULL");
  }
  st->has_null = 1;
  return TR_OK;
}

/* An option list: its names, each with the parser of its value (which
** consumes the value and sets the statement's fields): a new option is
** one entry and one such function. */
typedef struct s_option {
  const char *name;
  int (*value)(pi_parser *p, tp_stmt *st);
} s_option;

static const s_option s_load_opts[] = {
    {"HEADER", s_opt_header}, {"DELIMITER", s_opt_delimiter}, {"NULL", s_opt_null}};
const char *const tp_load_words[] = {"HEADER", "DELIMITER", "NULL", NULL};

static int s_options_list(pi_parser *p, tp_stmt *st, const char *what, const s_option *opts,
                          size_t nopts);

static int s_load(pi_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_LOAD;
  if ((rc = s_name(p, st)) != TR_OK ||
      (rc = pi_expect_kw(p, "FROM")) != TR_OK ||
      (rc = pi_path(p, st->path)) != TR_OK)
    return rc;
  if (pi_is_punct(pi_peek(p, 0), '(') &&
      (rc = s_options_list(p, st, "LOAD", s_load_opts,
                           sizeof s_load_opts / sizeof s_load_opts[0])) != TR_OK)
    return rc;
  return s_options(p, st);
}

static int s_ranges(pi_parser *p, tp_stmt *st);

/* SAVE name [ranges] TO 'path' */
static int s_save(pi_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_SAVE;
  if ((rc = s_name(p, st)) != TR_OK) return rc;
  if (pi_is_punct(pi_peek(p, 0), '[') && (rc = s_ranges(p, st)) != TR_OK) return rc;
  if ((rc = pi_expect_kw(p, "TO")) != TR_OK) return rc;
  return pi_path(p, st->path);
}

static int s_fill(pi_parser *p, tp_stmt *st) {
  int rc, params = 0;
  const pi_tok *t;
  st->kind = TP_ST_FILL;
  if ((rc = s_name(p, st)) != TR_OK) return rc;
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
  } else if (pi_is_kw(t, "PERMUTATION")) {
    st->fill = TP_FILL_PERMUTATION;
  } else {
    return pi_fail(p, t, "expected ZEROS, ONES, IDENTITY, UNIFORM, NORMAL or PERMUTATION");
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
    if (!params && st->fill != TP_FILL_PERMUTATION)
      return pi_fail(p, t, "SEED is only allowed after UNIFORM, NORMAL or PERMUTATION");
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
  return s_name(p, st);
}

/* An index of a slice, negative counting from the end. */
static int s_index(pi_parser *p, int64_t *out) {
  const pi_tok *t = pi_peek(p, 0);
  int neg = 0;
  if (pi_is_punct(t, '-')) {
    neg = 1;
    pi_next(p);
    t = pi_peek(p, 0);
  }
  if (t->type != S_NUM || !t->is_int) return pi_fail(p, t, "index must be an integer");
  if (t->ovf || t->ival >= (uint64_t)S_DIM_MAX) return pi_fail(p, t, "index too large");
  *out = neg ? -(int64_t)t->ival : (int64_t)t->ival;
  pi_next(p);
  return TR_OK;
}

/* Whether token t starts an index (a number, or '-' and a number). */
static int s_is_index(pi_parser *p, size_t k) {
  const pi_tok *t = pi_peek(p, k);
  return t->type == S_NUM || (pi_is_punct(t, '-') && pi_peek(p, k + 1)->type == S_NUM);
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

/* One range: lo:hi, lo:, :hi, :, or one index. */
static int s_range(pi_parser *p, tp_range *r) {
  const pi_tok *t = pi_peek(p, 0);
  int rc;
  memset(r, 0, sizeof *r);
  if (s_is_index(p, 0)) {
    if ((rc = s_index(p, &r->lo)) != TR_OK) return rc;
    r->has_lo = 1;
    if (!pi_is_punct(pi_peek(p, 0), ':')) {
      r->single = 1;
      return TR_OK;
    }
  } else if (!pi_is_punct(t, ':')) {
    return pi_fail(p, t, "expected an index or a range such as 0:4");
  }
  pi_next(p); /* ':' */
  if (s_is_index(p, 0)) {
    if ((rc = s_index(p, &r->hi)) != TR_OK) return rc;
    r->has_hi = 1;
  }
  /* bounds of one sign can be checked now; mixed ones need the size */
  if (r->has_lo && r->has_hi && (r->lo < 0) == (r->hi < 0) && r->hi <= r->lo)
    return pi_fail2(p, t, "empty range %lld:%lld", (long long)r->lo, (long long)r->hi);
  return TR_OK;
}

/* '[' range (',' range)* ']' or '[]'; p is at the '['. */
static int s_ranges(pi_parser *p, tp_stmt *st) {
  int rc;
  st->ranges_pos = pi_pos(p, pi_peek(p, 0));
  pi_next(p);
  if (pi_is_punct(pi_peek(p, 0), ']')) {
    pi_next(p);
    return TR_OK;
  }
  for (;;) {
    if (st->nranges == TR_MAX_RANK)
      return pi_fail(p, pi_peek(p, 0), "too many ranges (at most %d)", TR_MAX_RANK);
    if ((rc = s_range(p, &st->range[st->nranges])) != TR_OK) return rc;
    st->nranges++;
    if ((rc = s_list_next(p, ']')) != 1) return rc;
  }
}

static int s_print(pi_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_PRINT;
  if ((rc = s_name(p, st)) != TR_OK) return rc;
  if (!pi_is_punct(pi_peek(p, 0), '[')) return TR_OK;
  return s_ranges(p, st);
}

/* name = src [ranges]: p is at name, which '=' follows.  A label (an
** identifier) inside the brackets means an assignment missing its output
** labels. */
static int s_slice(pi_parser *p, tp_stmt *st) {
  const pi_tok *src;
  char tok[64];
  int rc;
  st->kind = TP_ST_SLICE;
  if ((rc = s_name(p, st)) != TR_OK) return rc;
  pi_next(p); /* '=' */
  src = pi_peek(p, 0);
  if (src->type != S_IDENT || pi_is_punct(pi_peek(p, 1), '(') ||
      (pi_is_punct(pi_peek(p, 1), '[') && pi_peek(p, 2)->type == S_IDENT)) {
    const pi_tok *t = &p->toks[0];
    pi_show(t, tok, sizeof tok);
    return pi_fail2(p, t,
                    "expected '[' after tensor name '%s' (an assignment labels its output, "
                    "e.g. %s[i,j] = ...; %s = X[0:4, :] copies a slice of X)",
                    tok, tok, tok);
  }
  st->src_pos = pi_pos(p, src);
  if ((rc = pi_ident(p, st->src, "tensor name")) != TR_OK) return rc;
  int sliced = pi_is_punct(pi_peek(p, 0), '[');
  if (sliced && (rc = s_ranges(p, st)) != TR_OK) return rc;
  /* NumPy's A2 = A * 2: an operator after the copy */
  const pi_tok *op = pi_peek(p, 0);
  if (op->type == S_PUNCT && !strchr("[](),:;", op->ch)) {
    pi_show(op, tok, sizeof tok);
    return pi_fail2(p, op,
                    "unexpected '%s': '%s = %s%s' copies %s%s; arithmetic labels each tensor, "
                    "e.g. %s[i,j] = %s[i,j] * 2; for matrices",
                    tok, st->name, st->src, sliced ? "[..]" : "", sliced ? "a slice of " : "", st->src,
                    st->name, st->src);
  }
  return TR_OK;
}

int tp_range_resolve(const tp_range *r, int64_t n, int d, const char *name, int64_t *lo,
                     int64_t *hi, tr_err *err) {
  int64_t a = r->has_lo ? r->lo : 0, b = r->has_hi ? r->hi : n;
  if (a < 0) a += n;
  if (b < 0) b += n;
  if (r->single) b = a + 1;
  if (a < 0 || b > n || a >= b) {
    char lo_t[32] = "", hi_t[32] = "";
    if (r->has_lo) snprintf(lo_t, sizeof lo_t, "%lld", (long long)r->lo);
    if (r->has_hi) snprintf(hi_t, sizeof hi_t, "%lld", (long long)r->hi);
    if (r->single)
      return tr_seterr(err, TR_ESHAPE, "index %s out of bounds for dimension %d of %s (size %lld)",
                       lo_t, d, name, (long long)n);
    return tr_seterr(err, TR_ESHAPE, "range %s:%s %s for dimension %d of %s (size %lld)", lo_t,
                     hi_t, a >= b && a >= 0 && b <= n ? "is empty" : "out of bounds", d, name,
                     (long long)n);
  }
  *lo = a;
  *hi = b;
  return TR_OK;
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
  /* ANALYZE comes before the options: refuse here, at the word PLAN */
  if (!st->analyze) return pi_fail(p, &p->toks[p->pos - 1], "PLAN needs EXPLAIN ANALYZE (it runs that plan)");
  if (v->type != S_STR) return pi_fail(p, v, "expected a quoted plan name after PLAN");
  long o = pi_unquote(v, st->plan, sizeof st->plan);
  if (o < 0) return pi_fail(p, v, "plan name too long");
  if (!o) return pi_fail(p, v, "empty plan name");
  pi_next(p);
  return TR_OK;
}

/* The options EXPLAIN knows. */
static const s_option s_explain_opts[] = {{"FORMAT", s_opt_format}, {"PLAN", s_opt_plan}};
const char *const tp_explain_words[] = {"FORMAT", "PLAN", NULL};

/* '(' NAME value [, NAME value]... ')' after what (EXPLAIN [ANALYZE], LOAD
** .. FROM 'f'); p is at the '('.  Each option may be given once. */
static int s_options_list(pi_parser *p, tp_stmt *st, const char *what, const s_option *opts,
                          size_t nopts) {
  int seen[8] = {0}, rc;
  char tok[64];
  tr_assert(nopts <= sizeof seen / sizeof seen[0]);
  pi_next(p); /* '(' */
  for (;;) {
    const pi_tok *t = pi_peek(p, 0);
    size_t i;
    if (t->type != S_IDENT) return pi_fail(p, t, "expected %s %s option", strchr("AEIOU", what[0]) ? "an" : "a", what);
    for (i = 0; i < nopts && !pi_is_kw(t, opts[i].name); i++) continue;
    if (i == nopts) {
      const char *names[8];
      int k;
      for (i = 0; i < nopts; i++) names[i] = opts[i].name;
      pi_show(t, tok, sizeof tok);
      k = tr_closest(tok, names, (int)nopts);
      if (k >= 0) return pi_fail2(p, t, "unknown %s option '%s' (did you mean %s?)", what, tok, names[k]);
      return pi_fail2(p, t, "unknown %s option '%s'", what, tok);
    }
    if (seen[i]) return pi_fail(p, t, "%s option %s given twice", what, opts[i].name);
    seen[i] = 1;
    pi_next(p);
    if ((rc = opts[i].value(p, st)) != TR_OK) return rc;
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
      (rc = s_options_list(p, st, "EXPLAIN", s_explain_opts,
                           sizeof s_explain_opts / sizeof s_explain_opts[0])) != TR_OK)
    return rc;
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
  st->name_pos = pi_pos(p, pi_peek(p, 0));
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
  } else if (v->type == S_STR) { /* SET layout = 'auto', as PostgreSQL takes it */
    if (pi_unquote(v, st->value, sizeof st->value) < 0)
      return pi_fail(p, v, "value too long (at most %d characters)", (int)sizeof st->value - 1);
    st->value_pos = pi_pos(p, v);
    pi_next(p);
    return TR_OK;
  } else if (v->type != S_NUM && v->type != S_IDENT) {
    return pi_fail(p, v, "expected a value (a number, a name or a quoted string)");
  }
  n = (sign ? 1 : 0) + v->n;
  if (n >= TP_NAME_MAX)
    return pi_fail(p, v, "value too long (at most %d characters)",
                  TP_NAME_MAX - 1);
  st->value_pos = pi_pos(p, sign ? sign : v);
  if (sign) st->value[0] = (char)sign->ch;
  memcpy(st->value + (sign ? 1 : 0), v->p, v->n);
  st->value[n] = '\0';
  pi_next(p);
  return TR_OK;
}

/* CALIBRATE: fit the cost model's weights on the current workers. */
static int s_calibrate(pi_parser *p, tp_stmt *st) {
  (void)p;
  st->kind = TP_ST_CALIBRATE;
  return TR_OK;
}

/* SHOW TENSORS | SHOW SETTINGS */
static int s_show(pi_parser *p, tp_stmt *st) {
  const pi_tok *t = pi_peek(p, 0);
  st->kind = TP_ST_SHOW;
  if (pi_is_kw(t, "SETTINGS")) st->kind = TP_ST_SETTINGS;
  else if (!pi_is_kw(t, "TENSORS")) return pi_fail(p, t, "expected TENSORS or SETTINGS");
  pi_next(p);
  return TR_OK;
}

static int s_describe(pi_parser *p, tp_stmt *st) {
  st->kind = TP_ST_DESCRIBE;
  return s_name(p, st);
}

/* Statements by their first keyword; each parser starts after it.  One
** list makes both the parser's table and the words completion, .help and
** "did you mean" offer. */
#define S_STATEMENTS(X)                                                                  \
  X("CREATE", s_create) X("LOAD", s_load) X("SAVE", s_save) X("FILL", s_fill)            \
  X("SHOW", s_show) X("DESCRIBE", s_describe) X("DROP", s_drop) X("PRINT", s_print)      \
  X("EXPLAIN", s_explain) X("SET", s_set) X("BEGIN", s_begin) X("COMMIT", s_commit)      \
  X("END", s_commit) X("ROLLBACK", s_rollback) X("CALIBRATE", s_calibrate)
#define S_ENTRY(kw, fn) {kw, fn},
#define S_WORD(kw, fn) kw,
static const struct {
  const char *kw;
  int (*parse)(pi_parser *p, tp_stmt *st);
} s_statements[] = {S_STATEMENTS(S_ENTRY)};
#define S_NSTATEMENTS (sizeof s_statements / sizeof s_statements[0])

const char *const tp_statement_words[] = {S_STATEMENTS(S_WORD) NULL};
#undef S_ENTRY
#undef S_WORD

/* The index in s_statements of the keyword t is, or -1. */
static int s_keyword(const pi_tok *t) {
  for (size_t i = 0; i < S_NSTATEMENTS; i++)
    if (pi_is_kw(t, s_statements[i].kw)) return (int)i;
  return -1;
}

/* Whether the statement at p is a name alone, or a name and ranges (no
** label inside its brackets): `X;` or `X[0:3, :];` shows X, as PRINT does,
** the way a REPL shows a variable typed alone.  A statement's keyword
** alone (`COMMIT;`) stays that statement. */
static int s_names_a_tensor(const pi_parser *p) {
  size_t k = 1;
  if (s_keyword(pi_peek(p, 0)) >= 0) return 0;
  if (pi_is_punct(pi_peek(p, 1), '[')) {
    for (k = 2; !pi_is_punct(pi_peek(p, k), ']'); k++) {
      const pi_tok *t = pi_peek(p, k); /* what ranges hold, else not shown */
      if (t->type != S_NUM && !pi_is_punct(t, ':') && !pi_is_punct(t, ',') && !pi_is_punct(t, '-'))
        return 0;
    }
    k++;
  }
  return pi_peek(p, k)->type == S_EOF || pi_is_punct(pi_peek(p, k), ';');
}

/* SQL's words for what tradb does otherwise, and how to say it here:
** the first word of a database user's habit gets its answer. */
static const struct {
  const char *word, *instead;
} s_sql_words[] = {
    {"SELECT", "a tensor's name shows it: A; or A[0:5, :];"},
    {"UPDATE", "assign its new values: A[i,j] = A[i,j] * 2;"},
    {"INSERT", "LOAD, FILL or an assignment makes a tensor's values"},
    {"DELETE", "DROP TENSOR A; removes a tensor"},
};

/* One statement of any kind; p is at its first token. */
static int s_statement(pi_parser *p, tp_stmt *st) {
  const pi_tok *t = pi_peek(p, 0), *t1 = pi_peek(p, 1);
  char tok[64];
  int k;
  if (t->type == S_EOF || pi_is_punct(t, ';'))
    return tr_at(p->err, pi_pos(p, t), tr_seterr(p->err, TR_ESYNTAX, "empty statement"));
  if (t->type != S_IDENT) return pi_fail(p, t, "expected a statement");
  if (s_names_a_tensor(p)) {
    st->bare = 1;
    return s_print(p, st);
  }
  if (pi_is_punct(t1, '[')) {
    st->kind = TP_ST_ASSIGN;
    return s_assign(p, st);
  }
  if ((k = s_keyword(t)) >= 0) {
    pi_next(p);
    return s_statements[k].parse(p, st);
  }
  if (pi_is_punct(t1, '=')) return s_slice(p, st);
  pi_show(t, tok, sizeof tok);
  for (size_t i = 0; i < sizeof s_sql_words / sizeof *s_sql_words; i++)
    if (!strcasecmp(tok, s_sql_words[i].word))
      return pi_fail2(p, t, "unknown statement '%s': tradb has no %s; %s", tok, s_sql_words[i].word,
                      s_sql_words[i].instead);
  if ((k = tr_closest(tok, tp_statement_words, (int)S_NSTATEMENTS)) >= 0)
    return pi_fail2(p, t, "unknown statement '%s' (did you mean %s?)", tok, tp_statement_words[k]);
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
