/*
** parse/expr.c - the parser's token cursor and error helpers, and the
** expression grammar (see parse_int.h).
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

/* ---- Parser helpers ---------------------------------------------------- */

const pi_tok *pi_peek(const pi_parser *p, size_t k) {
  size_t i = p->pos + k;
  return &p->toks[i < p->ntok ? i : p->ntok - 1];
}

const pi_tok *pi_next(pi_parser *p) {
  const pi_tok *t = pi_peek(p, 0);
  if (p->pos < p->ntok - 1) p->pos++;
  return t;
}

int pi_is_punct(const pi_tok *t, int ch) {
  return t->type == S_PUNCT && t->ch == ch;
}

int pi_is_kw(const pi_tok *t, const char *kw) {
  size_t n = strlen(kw);
  return t->type == S_IDENT && t->n == n && strncasecmp(t->p, kw, n) == 0;
}

/* Printable, one-line, bounded form of a token for a message. */
void pi_show(const pi_tok *t, char *buf, size_t size) {
  size_t o = 0, i;
  for (i = 0; i < t->n && o + 8 < size; i++) {
    unsigned char c = (unsigned char)t->p[i];
    if (i >= S_SHOW_MAX || c == '\n') {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    if (c >= 0x20 && c < 0x7f) {
      buf[o++] = (char)c;
    } else {
      snprintf(buf + o, size - o, "\\x%02x", c);
      o += 4;
    }
  }
  buf[o] = '\0';
}

/* Fail with "syntax error near 'TOK': <message>".  When t is a lexical
** error token, its own message is reported instead. */
int pi_pos(const pi_parser *p, const pi_tok *t) {
  return (int)(t->p - p->text) + 1;
}

int pi_fail(pi_parser *p, const pi_tok *t, const char *fmt, ...) {
  char msg[512], tok[64];
  int at = pi_pos(p, t);
  if (t->type == S_ERR) {
    pi_show(t, tok, sizeof tok);
    return tr_at(p->err, at, tr_seterr(p->err, TR_ESYNTAX, "syntax error near '%s': %s", tok,
                                       t->errmsg));
  }
  {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
  }
  if (t->type == S_EOF)
    return tr_at(p->err, at,
                 tr_seterr(p->err, TR_ESYNTAX, "syntax error near end of input: %s", msg));
  pi_show(t, tok, sizeof tok);
  return tr_at(p->err, at, tr_seterr(p->err, TR_ESYNTAX, "syntax error near '%s': %s", tok, msg));
}

/* Fail with "syntax error: <message>" (for messages naming the culprit). */
int pi_fail2(pi_parser *p, const pi_tok *t, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  if (t->type == S_ERR) return pi_fail(p, t, "%s", t->errmsg);
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return tr_at(p->err, pi_pos(p, t), tr_seterr(p->err, TR_ESYNTAX, "syntax error: %s", msg));
}

int pi_expect(pi_parser *p, int ch) {
  const pi_tok *t = pi_peek(p, 0);
  if (!pi_is_punct(t, ch)) return pi_fail(p, t, "expected '%c'", ch);
  pi_next(p);
  return TR_OK;
}

int pi_expect_kw(pi_parser *p, const char *kw) {
  const pi_tok *t = pi_peek(p, 0);
  if (!pi_is_kw(t, kw)) return pi_fail(p, t, "expected %s", kw);
  pi_next(p);
  return TR_OK;
}

/* Copy an identifier into dst[TP_NAME_MAX]; what says what it names. */
int pi_ident(pi_parser *p, char *dst, const char *what) {
  const pi_tok *t = pi_peek(p, 0);
  char tok[64];
  if (t->type != S_IDENT) return pi_fail(p, t, "expected %s", what);
  if (t->n >= TP_NAME_MAX) {
    pi_show(t, tok, sizeof tok);
    return pi_fail2(p, t, "%s '%s' too long (at most %d characters)", what, tok,
                   TP_NAME_MAX - 1);
  }
  memcpy(dst, t->p, t->n);
  dst[t->n] = '\0';
  pi_next(p);
  return TR_OK;
}

/* The text of string token t, its quotes removed and '' made one quote,
** into dst[cap]: its length, or -1 when it does not fit. */
long pi_unquote(const pi_tok *t, char *dst, size_t cap) {
  size_t o = 0;
  for (size_t i = 1; i + 1 < t->n; i++) {
    char c = t->p[i];
    if (c == '\'') i++; /* '' inside: keep one */
    if (o + 1 >= cap) return -1;
    dst[o++] = c;
  }
  dst[o] = '\0';
  return (long)o;
}

/* A quoted string into dst[TP_PATH_MAX], quotes removed, '' unescaped. */
int pi_path(pi_parser *p, char *dst) {
  const pi_tok *t = pi_peek(p, 0);
  if (t->type != S_STR) return pi_fail(p, t, "expected a quoted file name");
  long n = pi_unquote(t, dst, TP_PATH_MAX);
  if (n < 0) return pi_fail(p, t, "file name too long (at most %d bytes)", TP_PATH_MAX - 1);
  if (strlen(dst) != (size_t)n) return pi_fail(p, t, "file name contains a NUL character");
  if (n == 0) return pi_fail(p, t, "empty file name");
  pi_next(p);
  return TR_OK;
}

/* A positive integer (dimension or chunk extent). */
int pi_dim(pi_parser *p, int64_t *out, const char *what) {
  const pi_tok *t = pi_peek(p, 0);
  if (t->type != S_NUM || !t->is_int || (!t->ovf && t->ival == 0))
    return pi_fail(p, t, "%s must be a positive integer", what);
  if (t->ovf || t->ival > (uint64_t)S_DIM_MAX)
    return pi_fail(p, t, "%s too large (at most 2^62)", what);
  *out = (int64_t)t->ival;
  pi_next(p);
  return TR_OK;
}

/* '[' positive integers ']' into v (at most TR_MAX_RANK). */
int pi_dim_list(pi_parser *p, int64_t *v, int *n, const char *what) {
  int rc;
  *n = 0;
  if ((rc = pi_expect(p, '[')) != TR_OK) return rc;
  if (pi_is_punct(pi_peek(p, 0), ']')) {
    pi_next(p);
    return TR_OK;
  }
  for (;;) {
    if (*n == TR_MAX_RANK)
      return pi_fail(p, pi_peek(p, 0), "too many %ss (at most %d)", what,
                    TR_MAX_RANK);
    if ((rc = pi_dim(p, &v[*n], what)) != TR_OK) return rc;
    (*n)++;
    if (pi_is_punct(pi_peek(p, 0), ']')) {
      pi_next(p);
      return TR_OK;
    }
    if (!pi_is_punct(pi_peek(p, 0), ','))
      return pi_fail(p, pi_peek(p, 0), "expected ',' or ']'");
    pi_next(p);
  }
}

/* Labels after '[' through ']'; tensor names the tensor for messages. */
int pi_label_list(pi_parser *p, char (*labels)[TP_NAME_MAX], int *n,
                        const char *tensor) {
  int rc;
  *n = 0;
  if (pi_is_punct(pi_peek(p, 0), ']')) {
    pi_next(p);
    return TR_OK;
  }
  for (;;) {
    if (*n == TR_MAX_RANK)
      return pi_fail(p, pi_peek(p, 0), "too many labels for '%s' (at most %d)",
                    tensor, TR_MAX_RANK);
    if ((rc = pi_ident(p, labels[*n], "label")) != TR_OK) return rc;
    (*n)++;
    if (pi_is_punct(pi_peek(p, 0), ']')) {
      pi_next(p);
      return TR_OK;
    }
    if (!pi_is_punct(pi_peek(p, 0), ','))
      return pi_fail(p, pi_peek(p, 0), "expected ',' or ']'");
    pi_next(p);
  }
}

/* An optionally signed number (FILL parameters). */
int pi_signed(pi_parser *p, double *out) {
  const pi_tok *t = pi_peek(p, 0);
  double sign = 1.0;
  if (pi_is_punct(t, '-') || pi_is_punct(t, '+')) {
    if (t->ch == '-') sign = -1.0;
    pi_next(p);
    t = pi_peek(p, 0);
  }
  if (t->type != S_NUM) return pi_fail(p, t, "expected a number");
  *out = sign * t->num;
  pi_next(p);
  return TR_OK;
}

/* The aggregations a statement can write: the kernels' and the ones the
** compiler builds from them (parse.h). */
static const struct {
  const char *name;
  int agg;
} s_aggs[] = {{"SUM", TK_AGG_SUM},          {"MAX", TK_AGG_MAX},
              {"MIN", TK_AGG_MIN},          {"MEAN", TP_AGG_MEAN},
              {"ARGMAX", TP_AGG_ARGMAX},    {"ARGMIN", TP_AGG_ARGMIN}};
#define S_NAGGS (sizeof s_aggs / sizeof s_aggs[0])

const char *const tp_aggregate_words[] = {"SUM", "MAX", "MIN", "MEAN", "ARGMAX", "ARGMIN", NULL};

/* ---- Expressions ------------------------------------------------------- */

void tp_expr_free(tp_expr *e) {
  if (!e) return;
  tp_expr_free(e->a);
  tp_expr_free(e->b);
  tp_expr_free(e->c);
  free(e);
}

tp_expr *pi_node(pi_parser *p, tp_expr_kind kind, int op, const pi_tok *t) {
  tp_expr *e = calloc(1, sizeof *e);
  if (!e) {
    tr_seterr(p->err, TR_ENOMEM, "out of memory");
    return NULL;
  }
  e->kind = kind;
  e->op = op;
  e->line = t->line;
  e->pos = pi_pos(p, t);
  return e;
}

static int s_unary(pi_parser *p, tp_expr **out, int *h);

/* Make a node of kind/op at token `at` over a, b and c whose subtree
** height is h; frees a, b and c on failure (also blaming `at` when the
** tree gets too high). */
static int s_wrap(pi_parser *p, const pi_tok *at, tp_expr_kind kind, int op, tp_expr *a,
                  tp_expr *b, tp_expr *c, int h, tp_expr **out) {
  tp_expr *e = NULL;
  if (h > S_DEPTH_MAX || !(e = pi_node(p, kind, op, at))) {
    tp_expr_free(a);
    tp_expr_free(b);
    tp_expr_free(c);
    return h > S_DEPTH_MAX
               ? pi_fail(p, at, "expression nested too deeply (at most %d levels)", S_DEPTH_MAX)
               : TR_ENOMEM;
  }
  e->a = a;
  e->b = b;
  e->c = c;
  if (kind == TP_EXPR_BIN) e->line = a->line; /* the line it starts on */
  *out = e;
  return TR_OK;
}

static int s_max(int a, int b) { return a > b ? a : b; }

/* "unknown function 'NAME'", with the nearest function or aggregation
** when one is near. */
static int s_unknown_function(pi_parser *p, const pi_tok *name) {
  const char *cands[TK_NOPCODES + S_NAGGS];
  char tok[64];
  int n = 0, k;
  for (int op = 0; op < TK_NOPCODES; op++)
    if (tk_opcode_function(tk_opcode_name(op)) == op) cands[n++] = tk_opcode_name(op);
  for (size_t i = 0; i < S_NAGGS; i++) cands[n++] = s_aggs[i].name;
  pi_show(name, tok, sizeof tok);
  k = tr_closest(tok, cands, n);
  if (k >= 0) return pi_fail2(p, name, "unknown function '%s' (did you mean %s?)", tok, cands[k]);
  return pi_fail2(p, name, "unknown function '%s'", tok);
}

/* name '(' expr [',' expr ',' expr] ')' for a function (one argument, or
** three for where) or an aggregate (one). */
static int s_call(pi_parser *p, tp_expr **out, int *h) {
  const pi_tok *name = pi_next(p);
  tp_expr *arg[3] = {NULL, NULL, NULL};
  tp_expr_kind kind = TP_EXPR_FN;
  int op = -1, nargs = 1, rc = TR_OK;
  char tok[64];
  /* the functions are the kernels' (kernels/opcodes.h) */
  if (name->type == S_IDENT && name->n < sizeof tok) {
    memcpy(tok, name->p, name->n);
    tok[name->n] = '\0';
    if ((op = tk_opcode_function(tok)) >= 0) nargs = tk_opcode_pops(op);
  }
  for (size_t i = 0; i < S_NAGGS && op < 0; i++)
    if (pi_is_kw(name, s_aggs[i].name)) {
      op = s_aggs[i].agg;
      kind = TP_EXPR_AGG;
    }
  if (op < 0) return s_unknown_function(p, name);
  pi_next(p); /* '(' */
  for (int i = 0; i < nargs && !rc; i++) {
    int ha = 0;
    if (i && (rc = pi_expect(p, ',')) != TR_OK) break;
    if ((rc = pi_expr(p, &arg[i], &ha)) == TR_OK) *h = s_max(*h, ha);
  }
  if (!rc && !pi_is_punct(pi_peek(p, 0), ')') && nargs == 1 && pi_is_punct(pi_peek(p, 0), ','))
    rc = pi_fail(p, pi_peek(p, 0), "%.*s takes one argument", (int)name->n, name->p);
  if (!rc) rc = pi_expect(p, ')');
  if (rc) {
    for (int i = 0; i < 3; i++) tp_expr_free(arg[i]);
    return rc;
  }
  *h += 1;
  return s_wrap(p, name, kind, op, arg[0], arg[1], arg[2], *h, out);
}

/* name '[' labels ']' */
static int s_ref(pi_parser *p, tp_expr **out, int *h) {
  const pi_tok *name = pi_peek(p, 0);
  tp_expr *e = pi_node(p, TP_EXPR_REF, 0, name);
  int rc;
  if (!e) return TR_ENOMEM;
  if ((rc = pi_ident(p, e->name, "tensor name")) != TR_OK ||
      (rc = pi_expect(p, '[')) != TR_OK ||
      (rc = pi_label_list(p, e->labels, &e->nlabels, e->name)) != TR_OK) {
    tp_expr_free(e);
    return rc;
  }
  *h = 1;
  *out = e;
  return TR_OK;
}

static int s_primary(pi_parser *p, tp_expr **out, int *h) {
  const pi_tok *t = pi_peek(p, 0);
  int rc;
  char tok[64];
  if (t->type == S_NUM) {
    tp_expr *e = pi_node(p, TP_EXPR_NUM, 0, t);
    if (!e) return TR_ENOMEM;
    e->num = t->num;
    pi_next(p);
    *h = 1;
    *out = e;
    return TR_OK;
  }
  if (pi_is_punct(t, '(')) {
    tp_expr *e = NULL;
    pi_next(p);
    if ((rc = pi_expr(p, &e, h)) != TR_OK) return rc;
    if ((rc = pi_expect(p, ')')) != TR_OK) {
      tp_expr_free(e);
      return rc;
    }
    *out = e;
    return TR_OK;
  }
  if (t->type == S_IDENT) {
    const pi_tok *t1 = pi_peek(p, 1);
    if (pi_is_punct(t1, '(')) return s_call(p, out, h);
    if (pi_is_punct(t1, '[')) return s_ref(p, out, h);
    pi_show(t, tok, sizeof tok);
    return pi_fail2(p, t, "expected '[' after tensor name '%s'", tok);
  }
  return pi_fail(p, t, "expected an expression");
}

static int s_power(pi_parser *p, tp_expr **out, int *h) {
  tp_expr *a = NULL, *b = NULL;
  int ha = 0, hb = 0, rc;
  const pi_tok *op;
  if ((rc = s_primary(p, &a, &ha)) != TR_OK) return rc;
  op = pi_peek(p, 0);
  if (!pi_is_punct(op, '^')) {
    *h = ha;
    *out = a;
    return TR_OK;
  }
  pi_next(p);
  if ((rc = s_unary(p, &b, &hb)) != TR_OK) {
    tp_expr_free(a);
    return rc;
  }
  *h = s_max(ha, hb) + 1;
  return s_wrap(p, op, TP_EXPR_BIN, '^', a, b, NULL, *h, out);
}

static int s_unary(pi_parser *p, tp_expr **out, int *h) {
  const pi_tok *t = pi_peek(p, 0);
  int rc;
  if (p->depth >= S_DEPTH_MAX)
    return pi_fail(p, t, "expression nested too deeply (at most %d levels)",
                  S_DEPTH_MAX);
  p->depth++;
  if (pi_is_punct(t, '-')) {
    tp_expr *a = NULL;
    pi_next(p);
    rc = s_unary(p, &a, h);
    if (rc == TR_OK && a->kind == TP_EXPR_NUM) {
      a->num = -a->num; /* fold a negative literal */
      a->line = t->line;
      a->pos = pi_pos(p, t);
      *out = a;
    } else if (rc == TR_OK) {
      *h += 1;
      rc = s_wrap(p, t, TP_EXPR_FN, TK_OP_NEG, a, NULL, NULL, *h, out);
    }
  } else if (pi_is_punct(t, '+')) {
    pi_next(p); /* unary plus: no-op */
    rc = s_unary(p, out, h);
  } else {
    rc = s_power(p, out, h);
  }
  p->depth--;
  return rc;
}

/* A left-associative chain of operands parsed by `sub`, joined by the
** operators ops[0, nops). */
static int s_chain(pi_parser *p, tp_expr **out, int *h,
                   int (*sub)(pi_parser *, tp_expr **, int *), const int *ops, int nops) {
  tp_expr *a = NULL;
  int rc;
  if ((rc = sub(p, &a, h)) != TR_OK) return rc;
  for (;;) {
    const pi_tok *op = pi_peek(p, 0);
    tp_expr *b = NULL;
    int hb = 0, k = 0;
    while (k < nops && !pi_is_punct(op, ops[k])) k++;
    if (k == nops) break;
    pi_next(p);
    if ((rc = sub(p, &b, &hb)) != TR_OK) {
      tp_expr_free(a);
      return rc;
    }
    *h = s_max(*h, hb) + 1;
    if ((rc = s_wrap(p, op, TP_EXPR_BIN, op->ch, a, b, NULL, *h, &a)) != TR_OK) return rc;
  }
  *out = a;
  return TR_OK;
}

static int s_term(pi_parser *p, tp_expr **out, int *h) {
  static const int ops[] = {'*', '/'};
  return s_chain(p, out, h, s_unary, ops, 2);
}

static int s_sum(pi_parser *p, tp_expr **out, int *h) {
  static const int ops[] = {'+', '-'};
  return s_chain(p, out, h, s_term, ops, 2);
}

/* The comparison operator token t is, or 0. */
static int s_cmp(const pi_tok *t) {
  static const int ops[] = {'<', TP_OP_LE, '>', TP_OP_GE, TP_OP_EQ, TP_OP_NE};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    if (pi_is_punct(t, ops[k])) return ops[k];
  return 0;
}

/* sum (cmp sum)?: a comparison gives 1 or 0.  One per expression: in
** a < b < c the second would compare a truth value with c. */
int pi_expr(pi_parser *p, tp_expr **out, int *h) {
  tp_expr *a = NULL, *b = NULL;
  int hb = 0, rc;
  const pi_tok *op;
  if ((rc = s_sum(p, &a, h)) != TR_OK) return rc;
  op = pi_peek(p, 0);
  if (!s_cmp(op)) {
    *out = a;
    return TR_OK;
  }
  pi_next(p);
  if ((rc = s_sum(p, &b, &hb)) != TR_OK) {
    tp_expr_free(a);
    return rc;
  }
  if (s_cmp(pi_peek(p, 0))) {
    tp_expr_free(a);
    tp_expr_free(b);
    return pi_fail(p, pi_peek(p, 0), "comparisons do not chain: write (a < b) * (b < c)");
  }
  *h = s_max(*h, hb) + 1;
  return s_wrap(p, op, TP_EXPR_BIN, op->ch, a, b, NULL, *h, out);
}
