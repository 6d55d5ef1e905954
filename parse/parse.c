/*
** engine/parse.c - the statement parser: a lexer and a recursive-descent
** parser from tradb's extended Einstein notation to the syntax tree of
** engine/engine_int.h, plus tp_statement_end() / tp_is_blank(), which the
** shell uses to split its input into statements.
**
** Lexing.  A statement is first cut into tokens (identifiers, numbers,
** single-quoted strings with '' as an escaped quote, punctuation).  Blanks
** and `--` comments (to end of line) separate tokens; `--` always starts a
** comment, so `a--b` is `a` followed by a comment (write `a - -b`).  A
** lexical error (unterminated string, stray character, malformed number)
** becomes an error token, so errors are reported in the order they occur.
**
** Keywords are case-insensitive and not reserved: a statement that begins
** with a name followed by '[' is an assignment whatever the name
** (`print[i] = ...` assigns to a tensor called print), a name followed by
** '(' in an expression is a function or aggregate, a name followed by '['
** is a tensor reference (`sum[i]` is a tensor called sum).
**
** Expressions, lowest to highest precedence:
**     expr    := term (('+' | '-') term)*
**     term    := unary (('*' | '/') unary)*
**     unary   := ('-' | '+') unary | power
**     power   := primary ('^' unary)?         right associative; -a^2 is
**                                              -(a^2); a^-2 is a^(-2)
**     primary := number | name '[' labels ']' | '(' expr ')'
**              | fn '(' expr ')' | (SUM|MAX|MIN) '(' expr ')'
** Unary plus is accepted and ignored; unary minus applied directly to a
** number literal folds into the literal.  Nesting (and the height of the
** tree) is limited to S_DEPTH_MAX so that the recursion of this parser and
** of the stages after it stays bounded.
**
** Nothing here prints; errors come back as TR_ESYNTAX (TR_ENOMEM when an
** allocation fails) with a one-line message in the tr_err.
*/
#include "config.h"
#include "parse/parse.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_DEPTH_MAX 200            /* expression nesting / tree height */
#define S_DIM_MAX (INT64_C(1) << 62) /* largest dimension or index */
#define S_NUM_MAXLEN 300           /* longest number literal */
#define S_SHOW_MAX 32              /* token text shown in a message */

/* ---- Keywords ----------------------------------------------------------- */

const char *const tp_keyword_list[] = {
    "CREATE", "TENSOR", "CHUNK", "TYPE", "LOAD", "FROM", "SAVE", "TO",
    "FILL", "ZEROS", "ONES", "IDENTITY", "UNIFORM", "NORMAL", "SEED",
    "SHOW", "TENSORS", "DESCRIBE", "DROP", "IF", "EXISTS", "PRINT",
    "EXPLAIN", "ANALYZE", "FORMAT", "JSON", "TEXT", "DOT", "PLAN", "SET",
    "BEGIN", "COMMIT", "ROLLBACK",
    "SUM", "MAX", "MIN",
    "relu", "exp", "log", "sqrt", "abs", "tanh", "sigmoid", "neg",
    "f32", "f64", NULL};

const char *const *tp_keywords(void) { return tp_keyword_list; }

/* Unary functions by name (case-insensitive). */
static const struct {
  const char *name;
  int op;
} s_funcs[] = {{"relu", TK_OP_RELU}, {"exp", TK_OP_EXP},
               {"log", TK_OP_LOG},   {"sqrt", TK_OP_SQRT},
               {"abs", TK_OP_ABS},   {"tanh", TK_OP_TANH},
               {"sigmoid", TK_OP_SIGMOID}, {"neg", TK_OP_NEG}};

static const struct {
  const char *name;
  int agg;
} s_aggs[] = {{"sum", TK_AGG_SUM}, {"max", TK_AGG_MAX}, {"min", TK_AGG_MIN}};

/* ---- Statement boundaries ---------------------------------------------- */

size_t tp_statement_end(const char *text) {
  size_t i = 0;
  if (!text) return 0;
  while (text[i]) {
    char c = text[i];
    if (c == ';') return i + 1;
    if (c == '-' && text[i + 1] == '-') {
      while (text[i] && text[i] != '\n') i++;
      continue;
    }
    if (c == '\'') {
      i++;
      for (;;) {
        if (!text[i]) return 0; /* unterminated string: not complete */
        if (text[i] == '\'') {
          if (text[i + 1] == '\'') {
            i += 2;
            continue;
          }
          i++;
          break;
        }
        i++;
      }
      continue;
    }
    i++;
  }
  return 0;
}

int tp_is_blank(const char *text) {
  size_t i = 0;
  if (!text) return 1;
  while (text[i]) {
    if (isspace((unsigned char)text[i])) {
      i++;
    } else if (text[i] == '-' && text[i + 1] == '-') {
      while (text[i] && text[i] != '\n') i++;
    } else {
      return 0;
    }
  }
  return 1;
}

/* ---- Lexer ------------------------------------------------------------- */

typedef enum s_toktype {
  S_EOF,   /* end of input */
  S_IDENT, /* [A-Za-z_][A-Za-z0-9_]* */
  S_NUM,   /* number literal */
  S_STR,   /* 'string' (span includes the quotes) */
  S_PUNCT, /* one of [ ] ( ) , : ; = + - * / ^ (ch) */
  S_ERR    /* lexical error (errmsg) */
} s_toktype;

typedef struct s_tok {
  s_toktype type;
  int ch;             /* S_PUNCT: the character */
  const char *p;      /* text of the token */
  size_t n;           /* its length */
  int line;           /* 1-based line of its first character */
  double num;         /* S_NUM: value */
  int is_int;         /* S_NUM: digits only */
  uint64_t ival;      /* S_NUM, is_int: value (saturated) */
  int ovf;            /* S_NUM, is_int: ival overflowed uint64 */
  const char *errmsg; /* S_ERR: what is wrong */
} s_tok;

typedef struct s_parser {
  const char *text; /* statement text */
  size_t len;       /* its length */
  s_tok *toks;      /* tokens; the last is S_EOF or S_ERR */
  size_t ntok, cap;
  size_t pos;       /* next token */
  int depth;        /* current expression nesting */
  tr_err *err;
} s_parser;

static int s_isident0(int c) { return isalpha(c) || c == '_'; }
static int s_isident(int c) { return isalnum(c) || c == '_'; }

/* Append a token; returns TR_OK or TR_ENOMEM. */
static int s_push(s_parser *p, const s_tok *t) {
  if (p->ntok == p->cap) {
    size_t ncap = p->cap ? p->cap * 2 : 32;
    s_tok *nt = realloc(p->toks, ncap * sizeof *nt);
    if (!nt) return tr_seterr(p->err, TR_ENOMEM, "out of memory");
    p->toks = nt;
    p->cap = ncap;
  }
  p->toks[p->ntok++] = *t;
  return TR_OK;
}

/* Scan a number starting at i; fills t (S_NUM or S_ERR), returns its end. */
static size_t s_lex_number(const char *s, size_t len, size_t i, s_tok *t) {
  size_t start = i;
  char buf[S_NUM_MAXLEN + 1];
  t->type = S_NUM;
  t->is_int = 1;
  t->ival = 0;
  t->ovf = 0;
  while (i < len && isdigit((unsigned char)s[i])) {
    unsigned d = (unsigned)(s[i] - '0');
    if (t->ival > (UINT64_MAX - d) / 10) t->ovf = 1;
    else t->ival = t->ival * 10 + d;
    i++;
  }
  if (i < len && s[i] == '.') {
    t->is_int = 0;
    i++;
    while (i < len && isdigit((unsigned char)s[i])) i++;
  }
  if (i < len && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < len && (s[j] == '+' || s[j] == '-')) j++;
    if (j < len && isdigit((unsigned char)s[j])) {
      t->is_int = 0;
      i = j;
      while (i < len && isdigit((unsigned char)s[i])) i++;
    }
  }
  t->p = s + start;
  t->n = i - start;
  if (i < len && (s_isident((unsigned char)s[i]) || s[i] == '.')) {
    while (i < len && (s_isident((unsigned char)s[i]) || s[i] == '.')) i++;
    t->type = S_ERR;
    t->n = i - start;
    t->errmsg = "malformed number";
    return i;
  }
  if (t->n > S_NUM_MAXLEN) {
    t->type = S_ERR;
    t->errmsg = "number too long";
    return i;
  }
  memcpy(buf, t->p, t->n);
  buf[t->n] = '\0';
  t->num = strtod(buf, NULL);
  if (!isfinite(t->num)) {
    t->type = S_ERR;
    t->errmsg = "number out of range";
  }
  return i;
}

/* Cut the whole text into tokens.  Stops after the first error token. */
static int s_lex(s_parser *p) {
  const char *s = p->text;
  size_t len = p->len, i = 0;
  int line = 1, rc;
  for (;;) {
    s_tok t;
    unsigned char c;
    /* blanks and comments */
    while (i < len) {
      if (s[i] == '\n') {
        line++;
        i++;
      } else if (isspace((unsigned char)s[i])) {
        i++;
      } else if (s[i] == '-' && i + 1 < len && s[i + 1] == '-') {
        while (i < len && s[i] != '\n') i++;
      } else {
        break;
      }
    }
    memset(&t, 0, sizeof t);
    t.p = s + i;
    t.line = line;
    if (i >= len) {
      t.type = S_EOF;
      return s_push(p, &t);
    }
    c = (unsigned char)s[i];
    if (s_isident0(c)) {
      size_t st = i;
      while (i < len && s_isident((unsigned char)s[i])) i++;
      t.type = S_IDENT;
      t.n = i - st;
    } else if (isdigit(c) ||
               (c == '.' && i + 1 < len && isdigit((unsigned char)s[i + 1]))) {
      i = s_lex_number(s, len, i, &t);
    } else if (c == '\'') {
      size_t st = i++;
      int nl = 0;
      t.type = S_ERR;
      t.errmsg = "unterminated string";
      while (i < len) {
        if (s[i] == '\'') {
          if (i + 1 < len && s[i + 1] == '\'') {
            i += 2;
            continue;
          }
          i++;
          t.type = S_STR;
          t.errmsg = NULL;
          break;
        }
        if (s[i] == '\n') nl++;
        i++;
      }
      t.n = i - st;
      line += nl;
    } else if (strchr("[](),:;=+-*/^", (int)c) && c != '\0') {
      t.type = S_PUNCT;
      t.ch = c;
      t.n = 1;
      i++;
    } else {
      t.type = S_ERR;
      t.n = 1;
      t.errmsg = "unexpected character";
    }
    if ((rc = s_push(p, &t)) != TR_OK) return rc;
    if (t.type == S_ERR) return TR_OK;
  }
}

/* ---- Parser helpers ---------------------------------------------------- */

static const s_tok *s_peek(const s_parser *p, size_t k) {
  size_t i = p->pos + k;
  return &p->toks[i < p->ntok ? i : p->ntok - 1];
}

static const s_tok *s_next(s_parser *p) {
  const s_tok *t = s_peek(p, 0);
  if (p->pos < p->ntok - 1) p->pos++;
  return t;
}

static int s_is_punct(const s_tok *t, int ch) {
  return t->type == S_PUNCT && t->ch == ch;
}

static int s_is_kw(const s_tok *t, const char *kw) {
  size_t n = strlen(kw);
  return t->type == S_IDENT && t->n == n && strncasecmp(t->p, kw, n) == 0;
}

/* Printable, one-line, bounded form of a token for a message. */
static void s_show(const s_tok *t, char *buf, size_t size) {
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
static int s_fail(s_parser *p, const s_tok *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int s_fail(s_parser *p, const s_tok *t, const char *fmt, ...) {
  char msg[512], tok[64];
  if (t->type == S_ERR) {
    s_show(t, tok, sizeof tok);
    return tr_seterr(p->err, TR_ESYNTAX, "syntax error near '%s': %s", tok,
                     t->errmsg);
  }
  {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
  }
  if (t->type == S_EOF)
    return tr_seterr(p->err, TR_ESYNTAX, "syntax error near end of input: %s",
                     msg);
  s_show(t, tok, sizeof tok);
  return tr_seterr(p->err, TR_ESYNTAX, "syntax error near '%s': %s", tok, msg);
}

/* Fail with "syntax error: <message>" (for messages naming the culprit). */
static int s_fail2(s_parser *p, const s_tok *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int s_fail2(s_parser *p, const s_tok *t, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  if (t->type == S_ERR) return s_fail(p, t, "%s", t->errmsg);
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return tr_seterr(p->err, TR_ESYNTAX, "syntax error: %s", msg);
}

static int s_expect(s_parser *p, int ch) {
  const s_tok *t = s_peek(p, 0);
  if (!s_is_punct(t, ch)) return s_fail(p, t, "expected '%c'", ch);
  s_next(p);
  return TR_OK;
}

static int s_expect_kw(s_parser *p, const char *kw) {
  const s_tok *t = s_peek(p, 0);
  if (!s_is_kw(t, kw)) return s_fail(p, t, "expected %s", kw);
  s_next(p);
  return TR_OK;
}

/* Copy an identifier into dst[TP_NAME_MAX]; what says what it names. */
static int s_ident(s_parser *p, char *dst, const char *what) {
  const s_tok *t = s_peek(p, 0);
  char tok[64];
  if (t->type != S_IDENT) return s_fail(p, t, "expected %s", what);
  if (t->n >= TP_NAME_MAX) {
    s_show(t, tok, sizeof tok);
    return s_fail2(p, t, "%s '%s' too long (at most %d characters)", what, tok,
                   TP_NAME_MAX - 1);
  }
  memcpy(dst, t->p, t->n);
  dst[t->n] = '\0';
  s_next(p);
  return TR_OK;
}

/* A quoted string into dst[TP_PATH_MAX], quotes removed, '' unescaped. */
static int s_path(s_parser *p, char *dst) {
  const s_tok *t = s_peek(p, 0);
  size_t i, o = 0;
  if (t->type != S_STR) return s_fail(p, t, "expected a quoted file name");
  for (i = 1; i + 1 < t->n; i++) {
    char c = t->p[i];
    if (c == '\'') i++; /* '' inside: keep one */
    if (c == '\0') return s_fail(p, t, "file name contains a NUL character");
    if (o + 1 >= TP_PATH_MAX)
      return s_fail(p, t, "file name too long (at most %d bytes)",
                    TP_PATH_MAX - 1);
    dst[o++] = c;
  }
  dst[o] = '\0';
  if (o == 0) return s_fail(p, t, "empty file name");
  s_next(p);
  return TR_OK;
}

/* A positive integer (dimension or chunk extent). */
static int s_dim(s_parser *p, int64_t *out, const char *what) {
  const s_tok *t = s_peek(p, 0);
  if (t->type != S_NUM || !t->is_int || (!t->ovf && t->ival == 0))
    return s_fail(p, t, "%s must be a positive integer", what);
  if (t->ovf || t->ival > (uint64_t)S_DIM_MAX)
    return s_fail(p, t, "%s too large (at most 2^62)", what);
  *out = (int64_t)t->ival;
  s_next(p);
  return TR_OK;
}

/* '[' positive integers ']' into v (at most TR_MAX_RANK). */
static int s_dim_list(s_parser *p, int64_t *v, int *n, const char *what) {
  int rc;
  *n = 0;
  if ((rc = s_expect(p, '[')) != TR_OK) return rc;
  if (s_is_punct(s_peek(p, 0), ']')) {
    s_next(p);
    return TR_OK;
  }
  for (;;) {
    if (*n == TR_MAX_RANK)
      return s_fail(p, s_peek(p, 0), "too many %ss (at most %d)", what,
                    TR_MAX_RANK);
    if ((rc = s_dim(p, &v[*n], what)) != TR_OK) return rc;
    (*n)++;
    if (s_is_punct(s_peek(p, 0), ']')) {
      s_next(p);
      return TR_OK;
    }
    if (!s_is_punct(s_peek(p, 0), ','))
      return s_fail(p, s_peek(p, 0), "expected ',' or ']'");
    s_next(p);
  }
}

/* Labels after '[' through ']'; tensor names the tensor for messages. */
static int s_label_list(s_parser *p, char (*labels)[TP_NAME_MAX], int *n,
                        const char *tensor) {
  int rc;
  *n = 0;
  if (s_is_punct(s_peek(p, 0), ']')) {
    s_next(p);
    return TR_OK;
  }
  for (;;) {
    if (*n == TR_MAX_RANK)
      return s_fail(p, s_peek(p, 0), "too many labels for '%s' (at most %d)",
                    tensor, TR_MAX_RANK);
    if ((rc = s_ident(p, labels[*n], "label")) != TR_OK) return rc;
    (*n)++;
    if (s_is_punct(s_peek(p, 0), ']')) {
      s_next(p);
      return TR_OK;
    }
    if (!s_is_punct(s_peek(p, 0), ','))
      return s_fail(p, s_peek(p, 0), "expected ',' or ']'");
    s_next(p);
  }
}

/* An optionally signed number (FILL parameters). */
static int s_signed(s_parser *p, double *out) {
  const s_tok *t = s_peek(p, 0);
  double sign = 1.0;
  if (s_is_punct(t, '-') || s_is_punct(t, '+')) {
    if (t->ch == '-') sign = -1.0;
    s_next(p);
    t = s_peek(p, 0);
  }
  if (t->type != S_NUM) return s_fail(p, t, "expected a number");
  *out = sign * t->num;
  s_next(p);
  return TR_OK;
}

/* ---- Expressions ------------------------------------------------------- */

void tp_expr_free(tp_expr *e) {
  if (!e) return;
  tp_expr_free(e->a);
  tp_expr_free(e->b);
  free(e);
}

static tp_expr *s_node(s_parser *p, tp_expr_kind kind, int op, int line) {
  tp_expr *e = calloc(1, sizeof *e);
  if (!e) {
    tr_seterr(p->err, TR_ENOMEM, "out of memory");
    return NULL;
  }
  e->kind = kind;
  e->op = op;
  e->line = line;
  return e;
}

static int s_expr(s_parser *p, tp_expr **out, int *h);
static int s_unary(s_parser *p, tp_expr **out, int *h);

/* Make a node of kind/op over a and b whose subtree height is h; frees a
** and b on failure.  at is the token blamed if the tree gets too high. */
static int s_wrap(s_parser *p, const s_tok *at, tp_expr_kind kind, int op,
                  int line, tp_expr *a, tp_expr *b, int h, tp_expr **out) {
  tp_expr *e = NULL;
  if (h > S_DEPTH_MAX) {
    tp_expr_free(a);
    tp_expr_free(b);
    return s_fail(p, at, "expression nested too deeply (at most %d levels)",
                  S_DEPTH_MAX);
  }
  if (!(e = s_node(p, kind, op, line))) {
    tp_expr_free(a);
    tp_expr_free(b);
    return TR_ENOMEM;
  }
  e->a = a;
  e->b = b;
  *out = e;
  return TR_OK;
}

static int s_max(int a, int b) { return a > b ? a : b; }

/* name '(' expr ')' for a function or an aggregate. */
static int s_call(s_parser *p, tp_expr **out, int *h) {
  const s_tok *name = s_next(p);
  tp_expr *a = NULL;
  tp_expr_kind kind = TP_EXPR_FN;
  int op = -1, rc;
  size_t i;
  char tok[64];
  for (i = 0; i < sizeof s_funcs / sizeof s_funcs[0] && op < 0; i++)
    if (s_is_kw(name, s_funcs[i].name)) op = s_funcs[i].op;
  for (i = 0; i < sizeof s_aggs / sizeof s_aggs[0] && op < 0; i++)
    if (s_is_kw(name, s_aggs[i].name)) {
      op = s_aggs[i].agg;
      kind = TP_EXPR_AGG;
    }
  if (op < 0) {
    s_show(name, tok, sizeof tok);
    return s_fail2(p, name, "unknown function '%s'", tok);
  }
  s_next(p); /* '(' */
  if ((rc = s_expr(p, &a, h)) != TR_OK) return rc;
  if ((rc = s_expect(p, ')')) != TR_OK) {
    tp_expr_free(a);
    return rc;
  }
  *h += 1;
  return s_wrap(p, name, kind, op, name->line, a, NULL, *h, out);
}

/* name '[' labels ']' */
static int s_ref(s_parser *p, tp_expr **out, int *h) {
  const s_tok *name = s_peek(p, 0);
  tp_expr *e = s_node(p, TP_EXPR_REF, 0, name->line);
  int rc;
  if (!e) return TR_ENOMEM;
  if ((rc = s_ident(p, e->name, "tensor name")) != TR_OK ||
      (rc = s_expect(p, '[')) != TR_OK ||
      (rc = s_label_list(p, e->labels, &e->nlabels, e->name)) != TR_OK) {
    tp_expr_free(e);
    return rc;
  }
  *h = 1;
  *out = e;
  return TR_OK;
}

static int s_primary(s_parser *p, tp_expr **out, int *h) {
  const s_tok *t = s_peek(p, 0);
  int rc;
  char tok[64];
  if (t->type == S_NUM) {
    tp_expr *e = s_node(p, TP_EXPR_NUM, 0, t->line);
    if (!e) return TR_ENOMEM;
    e->num = t->num;
    s_next(p);
    *h = 1;
    *out = e;
    return TR_OK;
  }
  if (s_is_punct(t, '(')) {
    tp_expr *e = NULL;
    s_next(p);
    if ((rc = s_expr(p, &e, h)) != TR_OK) return rc;
    if ((rc = s_expect(p, ')')) != TR_OK) {
      tp_expr_free(e);
      return rc;
    }
    *out = e;
    return TR_OK;
  }
  if (t->type == S_IDENT) {
    const s_tok *t1 = s_peek(p, 1);
    if (s_is_punct(t1, '(')) return s_call(p, out, h);
    if (s_is_punct(t1, '[')) return s_ref(p, out, h);
    s_show(t, tok, sizeof tok);
    return s_fail2(p, t, "expected '[' after tensor name '%s'", tok);
  }
  return s_fail(p, t, "expected an expression");
}

static int s_power(s_parser *p, tp_expr **out, int *h) {
  tp_expr *a = NULL, *b = NULL;
  int ha = 0, hb = 0, rc;
  const s_tok *op;
  if ((rc = s_primary(p, &a, &ha)) != TR_OK) return rc;
  op = s_peek(p, 0);
  if (!s_is_punct(op, '^')) {
    *h = ha;
    *out = a;
    return TR_OK;
  }
  s_next(p);
  if ((rc = s_unary(p, &b, &hb)) != TR_OK) {
    tp_expr_free(a);
    return rc;
  }
  *h = s_max(ha, hb) + 1;
  return s_wrap(p, op, TP_EXPR_BIN, '^', a->line, a, b, *h, out);
}

static int s_unary(s_parser *p, tp_expr **out, int *h) {
  const s_tok *t = s_peek(p, 0);
  int rc;
  if (p->depth >= S_DEPTH_MAX)
    return s_fail(p, t, "expression nested too deeply (at most %d levels)",
                  S_DEPTH_MAX);
  p->depth++;
  if (s_is_punct(t, '-')) {
    tp_expr *a = NULL;
    s_next(p);
    rc = s_unary(p, &a, h);
    if (rc == TR_OK && a->kind == TP_EXPR_NUM) {
      a->num = -a->num; /* fold a negative literal */
      a->line = t->line;
      *out = a;
    } else if (rc == TR_OK) {
      *h += 1;
      rc = s_wrap(p, t, TP_EXPR_FN, TK_OP_NEG, t->line, a, NULL, *h, out);
    }
  } else if (s_is_punct(t, '+')) {
    s_next(p); /* unary plus: no-op */
    rc = s_unary(p, out, h);
  } else {
    rc = s_power(p, out, h);
  }
  p->depth--;
  return rc;
}

/* A left-associative chain of operands parsed by `sub`, joined by the
** operators op1 or op2. */
static int s_chain(s_parser *p, tp_expr **out, int *h,
                   int (*sub)(s_parser *, tp_expr **, int *), int op1, int op2) {
  tp_expr *a = NULL;
  int rc;
  if ((rc = sub(p, &a, h)) != TR_OK) return rc;
  for (;;) {
    const s_tok *op = s_peek(p, 0);
    tp_expr *b = NULL;
    int hb = 0;
    if (!s_is_punct(op, op1) && !s_is_punct(op, op2)) break;
    s_next(p);
    if ((rc = sub(p, &b, &hb)) != TR_OK) {
      tp_expr_free(a);
      return rc;
    }
    *h = s_max(*h, hb) + 1;
    if ((rc = s_wrap(p, op, TP_EXPR_BIN, op->ch, a->line, a, b, *h, &a)) !=
        TR_OK)
      return rc;
  }
  *out = a;
  return TR_OK;
}

static int s_term(s_parser *p, tp_expr **out, int *h) {
  return s_chain(p, out, h, s_unary, '*', '/');
}

static int s_expr(s_parser *p, tp_expr **out, int *h) {
  return s_chain(p, out, h, s_term, '+', '-');
}

/* ---- Statements -------------------------------------------------------- */

/* out '[' labels ']' '=' expr */
static int s_assign(s_parser *p, tp_stmt *st) {
  int rc, i, j, h = 0;
  if ((rc = s_ident(p, st->name, "tensor name")) != TR_OK ||
      (rc = s_expect(p, '[')) != TR_OK ||
      (rc = s_label_list(p, st->out_labels, &st->nout, st->name)) != TR_OK)
    return rc;
  for (i = 0; i < st->nout; i++)
    for (j = 0; j < i; j++)
      if (!strcmp(st->out_labels[i], st->out_labels[j]))
        return s_fail2(p, s_peek(p, 0), "output label '%s' repeated",
                       st->out_labels[i]);
  if ((rc = s_expect(p, '=')) != TR_OK) return rc;
  return s_expr(p, &st->rhs, &h);
}

/* [CHUNK [..]] [TYPE t], in either order, at most once each. */
static int s_options(s_parser *p, tp_stmt *st) {
  int rc;
  for (;;) {
    const s_tok *t = s_peek(p, 0);
    if (s_is_kw(t, "CHUNK")) {
      if (st->has_chunk) return s_fail(p, t, "CHUNK given twice");
      s_next(p);
      if ((rc = s_dim_list(p, st->chunk, &st->chunk_rank, "chunk extent")) !=
          TR_OK)
        return rc;
      st->has_chunk = 1;
    } else if (s_is_kw(t, "TYPE")) {
      const s_tok *ty;
      if (st->has_type) return s_fail(p, t, "TYPE given twice");
      s_next(p);
      ty = s_peek(p, 0);
      if (s_is_kw(ty, "f32") || s_is_kw(ty, "float32")) {
        st->dtype = TR_F32;
      } else if (s_is_kw(ty, "f64") || s_is_kw(ty, "float64")) {
        st->dtype = TR_F64;
      } else {
        return s_fail(p, ty, "expected a type (f32 or f64)");
      }
      s_next(p);
      st->has_type = 1;
    } else {
      return TR_OK;
    }
  }
}

static int s_create(s_parser *p, tp_stmt *st) {
  int rc;
  const s_tok *t;
  st->kind = TP_ST_CREATE;
  if ((rc = s_expect_kw(p, "TENSOR")) != TR_OK ||
      (rc = s_ident(p, st->name, "tensor name")) != TR_OK ||
      (rc = s_dim_list(p, st->shape, &st->rank, "dimension")) != TR_OK)
    return rc;
  t = s_peek(p, 0);
  if ((rc = s_options(p, st)) != TR_OK) return rc;
  if (st->has_chunk && st->chunk_rank != st->rank)
    return s_fail2(p, t,
                   "CHUNK has %d entr%s but tensor '%s' has rank %d",
                   st->chunk_rank, st->chunk_rank == 1 ? "y" : "ies", st->name,
                   st->rank);
  return TR_OK;
}

static int s_load(s_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_LOAD;
  if ((rc = s_ident(p, st->name, "tensor name")) != TR_OK ||
      (rc = s_expect_kw(p, "FROM")) != TR_OK ||
      (rc = s_path(p, st->path)) != TR_OK)
    return rc;
  return s_options(p, st);
}

static int s_save(s_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_SAVE;
  if ((rc = s_ident(p, st->name, "tensor name")) != TR_OK ||
      (rc = s_expect_kw(p, "TO")) != TR_OK)
    return rc;
  return s_path(p, st->path);
}

static int s_fill(s_parser *p, tp_stmt *st) {
  int rc, params = 0;
  const s_tok *t;
  st->kind = TP_ST_FILL;
  if ((rc = s_ident(p, st->name, "tensor name")) != TR_OK) return rc;
  t = s_peek(p, 0);
  if (s_is_kw(t, "ZEROS")) {
    st->fill = TP_FILL_ZEROS;
  } else if (s_is_kw(t, "ONES")) {
    st->fill = TP_FILL_ONES;
  } else if (s_is_kw(t, "IDENTITY")) {
    st->fill = TP_FILL_IDENTITY;
  } else if (s_is_kw(t, "UNIFORM")) {
    st->fill = TP_FILL_UNIFORM;
    params = 1;
  } else if (s_is_kw(t, "NORMAL")) {
    st->fill = TP_FILL_NORMAL;
    params = 1;
  } else {
    return s_fail(p, t, "expected ZEROS, ONES, IDENTITY, UNIFORM or NORMAL");
  }
  s_next(p);
  if (params) {
    if ((rc = s_expect(p, '(')) != TR_OK ||
        (rc = s_signed(p, &st->p0)) != TR_OK ||
        (rc = s_expect(p, ',')) != TR_OK ||
        (rc = s_signed(p, &st->p1)) != TR_OK ||
        (rc = s_expect(p, ')')) != TR_OK)
      return rc;
  }
  t = s_peek(p, 0);
  if (s_is_kw(t, "SEED")) {
    const s_tok *n;
    if (!params)
      return s_fail(p, t, "SEED is only allowed after UNIFORM or NORMAL");
    s_next(p);
    n = s_peek(p, 0);
    if (n->type != S_NUM || !n->is_int || n->ovf)
      return s_fail(p, n, "SEED must be a non-negative integer (below 2^64)");
    st->seed = n->ival;
    st->has_seed = 1;
    s_next(p);
  }
  return TR_OK;
}

static int s_drop(s_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_DROP;
  if ((rc = s_expect_kw(p, "TENSOR")) != TR_OK) return rc;
  if (s_is_kw(s_peek(p, 0), "IF") && s_is_kw(s_peek(p, 1), "EXISTS")) {
    s_next(p);
    s_next(p);
    st->if_exists = 1;
  }
  return s_ident(p, st->name, "tensor name");
}

/* A non-negative index for PRINT ranges. */
static int s_index(s_parser *p, int64_t *out) {
  const s_tok *t = s_peek(p, 0);
  if (t->type != S_NUM || !t->is_int)
    return s_fail(p, t, "index must be a non-negative integer");
  if (t->ovf || t->ival >= (uint64_t)S_DIM_MAX)
    return s_fail(p, t, "index too large");
  *out = (int64_t)t->ival;
  s_next(p);
  return TR_OK;
}

/* After an item of a list closed by `closer`: consume ',' (returns 1: more
** items follow) or the closer (returns TR_OK: the list is done); anything
** else is a syntax error. */
static int s_list_next(s_parser *p, int closer) {
  const s_tok *t = s_peek(p, 0);
  if (s_is_punct(t, closer)) {
    s_next(p);
    return TR_OK;
  }
  if (!s_is_punct(t, ','))
    return s_fail(p, t, closer == ']' ? "expected ',' or ']'" : "expected ',' or ')'");
  s_next(p);
  return 1;
}

static int s_print(s_parser *p, tp_stmt *st) {
  int rc;
  st->kind = TP_ST_PRINT;
  if ((rc = s_ident(p, st->name, "tensor name")) != TR_OK) return rc;
  if (!s_is_punct(s_peek(p, 0), '[')) return TR_OK;
  s_next(p);
  if (s_is_punct(s_peek(p, 0), ']')) {
    s_next(p);
    return TR_OK;
  }
  for (;;) {
    const s_tok *t = s_peek(p, 0);
    int64_t lo = 0, hi = -1;
    if (st->nranges == TR_MAX_RANK)
      return s_fail(p, t, "too many ranges (at most %d)", TR_MAX_RANK);
    if (s_is_punct(t, ':')) {
      s_next(p);
      if (s_peek(p, 0)->type == S_NUM && (rc = s_index(p, &hi)) != TR_OK)
        return rc;
    } else if (t->type == S_NUM) {
      if ((rc = s_index(p, &lo)) != TR_OK) return rc;
      if (s_is_punct(s_peek(p, 0), ':')) {
        s_next(p);
        if (s_peek(p, 0)->type == S_NUM && (rc = s_index(p, &hi)) != TR_OK)
          return rc;
      } else {
        hi = lo + 1;
      }
    } else if (s_is_punct(t, '-')) {
      return s_fail(p, t, "index must be a non-negative integer");
    } else {
      return s_fail(p, t, "expected an index or a range such as 0:4");
    }
    if (hi >= 0 && hi <= lo)
      return s_fail2(p, t, "empty range %lld:%lld", (long long)lo,
                     (long long)hi);
    st->lo[st->nranges] = lo;
    st->hi[st->nranges] = hi;
    st->nranges++;
    if ((rc = s_list_next(p, ']')) != 1) return rc;
  }
}

/* ---- EXPLAIN options ----------------------------------------------------- */

/* FORMAT TEXT | JSON */
static int s_opt_format(s_parser *p, tp_stmt *st) {
  const s_tok *v = s_peek(p, 0);
  st->json = st->dot = 0;
  if (s_is_kw(v, "TEXT")) {
  } else if (s_is_kw(v, "JSON")) {
    st->json = 1;
  } else if (s_is_kw(v, "DOT")) {
    st->dot = 1;
  } else {
    return s_fail(p, v, "expected TEXT, JSON or DOT after FORMAT");
  }
  s_next(p);
  return TR_OK;
}

/* PLAN 'name': run the named alternative (EXPLAIN ANALYZE only). */
static int s_opt_plan(s_parser *p, tp_stmt *st) {
  const s_tok *v = s_peek(p, 0);
  size_t o = 0;
  if (v->type != S_STR) return s_fail(p, v, "expected a quoted plan name after PLAN");
  for (size_t i = 1; i + 1 < v->n; i++) {
    char c = v->p[i];
    if (c == '\'') i++;
    if (o + 1 >= sizeof st->plan) return s_fail(p, v, "plan name too long");
    st->plan[o++] = c;
  }
  st->plan[o] = '\0';
  if (!o) return s_fail(p, v, "empty plan name");
  s_next(p);
  return TR_OK;
}

/* The options EXPLAIN knows, each with the parser of its value (which
** consumes the value and sets the statement's fields): a new option is
** one entry here and one such function. */
static const struct {
  const char *name;
  int (*value)(s_parser *p, tp_stmt *st);
} s_explain_opts[] = {{"FORMAT", s_opt_format}, {"PLAN", s_opt_plan}};

#define S_NEXPLAIN_OPTS (sizeof s_explain_opts / sizeof s_explain_opts[0])

/* '(' NAME value [, NAME value]... ')' after EXPLAIN [ANALYZE]; p is at
** the '('.  Each option may be given once. */
static int s_explain_options(s_parser *p, tp_stmt *st) {
  int seen[S_NEXPLAIN_OPTS] = {0}, rc;
  char tok[64];
  s_next(p); /* '(' */
  for (;;) {
    const s_tok *t = s_peek(p, 0);
    size_t i;
    if (t->type != S_IDENT) return s_fail(p, t, "expected an EXPLAIN option");
    for (i = 0; i < S_NEXPLAIN_OPTS && !s_is_kw(t, s_explain_opts[i].name); i++)
      continue;
    if (i == S_NEXPLAIN_OPTS) {
      s_show(t, tok, sizeof tok);
      return s_fail2(p, t, "unknown EXPLAIN option '%s'", tok);
    }
    if (seen[i])
      return s_fail(p, t, "EXPLAIN option %s given twice",
                    s_explain_opts[i].name);
    seen[i] = 1;
    s_next(p);
    if ((rc = s_explain_opts[i].value(p, st)) != TR_OK) return rc;
    if ((rc = s_list_next(p, ')')) != 1) return rc;
  }
}

/* EXPLAIN [ANALYZE] [(options)] assignment; p is after EXPLAIN.  Keywords
** are not reserved, so ANALYZE followed by '[' is the assignment's tensor. */
static int s_explain(s_parser *p, tp_stmt *st) {
  const s_tok *a;
  int rc;
  st->kind = TP_ST_EXPLAIN;
  if (s_is_kw(s_peek(p, 0), "ANALYZE") && !s_is_punct(s_peek(p, 1), '[')) {
    s_next(p);
    st->analyze = 1;
  }
  if (s_is_punct(s_peek(p, 0), '(') &&
      (rc = s_explain_options(p, st)) != TR_OK)
    return rc;
  if (st->plan[0] && !st->analyze)
    return s_fail(p, s_peek(p, 0), "PLAN needs EXPLAIN ANALYZE (it runs that plan)");
  a = s_peek(p, 0);
  if (s_is_kw(a, "COMMIT") && !s_is_punct(s_peek(p, 1), '[')) {
    s_next(p);
    st->block = 1;
    return TR_OK;
  }
  if (a->type != S_IDENT || !s_is_punct(s_peek(p, 1), '['))
    return s_fail(p, a, "expected an assignment or COMMIT after EXPLAIN");
  return s_assign(p, st);
}

/* BEGIN [TRANSACTION|WORK] / COMMIT / ROLLBACK. */
static int s_block_kw(s_parser *p) {
  const s_tok *t = s_peek(p, 0);
  if (s_is_kw(t, "TRANSACTION") || s_is_kw(t, "WORK")) s_next(p);
  return TR_OK;
}
static int s_begin(s_parser *p, tp_stmt *st) {
  st->kind = TP_ST_BEGIN;
  return s_block_kw(p);
}
static int s_commit(s_parser *p, tp_stmt *st) {
  st->kind = TP_ST_COMMIT;
  return s_block_kw(p);
}
static int s_rollback(s_parser *p, tp_stmt *st) {
  st->kind = TP_ST_ROLLBACK;
  return s_block_kw(p);
}

/* SET name = value; p is after SET.  The name is lower-cased (settings
** are case-insensitive); the value, a number with an optional sign or a
** name, is kept as written (the sign joined to the number) for the
** engine to interpret. */
static int s_set(s_parser *p, tp_stmt *st) {
  const s_tok *v, *sign = NULL;
  char *c;
  size_t n;
  int rc;
  st->kind = TP_ST_SET;
  if ((rc = s_ident(p, st->setting, "setting name")) != TR_OK ||
      (rc = s_expect(p, '=')) != TR_OK)
    return rc;
  for (c = st->setting; *c; c++) *c = (char)tolower((unsigned char)*c);
  v = s_peek(p, 0);
  if (s_is_punct(v, '-') || s_is_punct(v, '+')) {
    sign = v;
    s_next(p);
    v = s_peek(p, 0);
    if (v->type != S_NUM) return s_fail(p, v, "expected a number");
  } else if (v->type != S_NUM && v->type != S_IDENT) {
    return s_fail(p, v, "expected a value (a number or a name)");
  }
  n = (sign ? 1 : 0) + v->n;
  if (n >= TP_NAME_MAX)
    return s_fail(p, v, "value too long (at most %d characters)",
                  TP_NAME_MAX - 1);
  if (sign) st->value[0] = (char)sign->ch;
  memcpy(st->value + (sign ? 1 : 0), v->p, v->n);
  st->value[n] = '\0';
  s_next(p);
  return TR_OK;
}

/* One statement of any kind; p is at its first token. */
static int s_show_tensors(s_parser *p, tp_stmt *st) {
  st->kind = TP_ST_SHOW;
  return s_expect_kw(p, "TENSORS");
}

static int s_describe(s_parser *p, tp_stmt *st) {
  st->kind = TP_ST_DESCRIBE;
  return s_ident(p, st->name, "tensor name");
}

/* Statements by their first keyword; each parser starts after it. */
static const struct {
  const char *kw;
  int (*parse)(s_parser *p, tp_stmt *st);
} s_statements[] = {
  {"CREATE", s_create}, {"LOAD", s_load},          {"SAVE", s_save},
  {"FILL", s_fill},     {"SHOW", s_show_tensors},  {"DESCRIBE", s_describe},
  {"DROP", s_drop},     {"PRINT", s_print},        {"EXPLAIN", s_explain},
  {"SET", s_set},       {"BEGIN", s_begin},        {"COMMIT", s_commit},
  {"END", s_commit},    {"ROLLBACK", s_rollback}};

static int s_statement(s_parser *p, tp_stmt *st) {
  const s_tok *t = s_peek(p, 0), *t1 = s_peek(p, 1);
  char tok[64];
  if (t->type == S_EOF || s_is_punct(t, ';'))
    return tr_seterr(p->err, TR_ESYNTAX, "empty statement");
  if (t->type != S_IDENT) return s_fail(p, t, "expected a statement");
  if (s_is_punct(t1, '[')) {
    st->kind = TP_ST_ASSIGN;
    return s_assign(p, st);
  }
  for (size_t i = 0; i < sizeof s_statements / sizeof s_statements[0]; i++)
    if (s_is_kw(t, s_statements[i].kw)) {
      s_next(p);
      return s_statements[i].parse(p, st);
    }
  s_show(t, tok, sizeof tok);
  if (s_is_punct(t1, '='))
    return s_fail2(p, t, "expected '[' after tensor name '%s'", tok);
  return s_fail2(p, t, "unknown statement '%s'", tok);
}

int tp_parse(const char *text, size_t len, tp_stmt **out, tr_err *err) {
  s_parser p;
  tp_stmt *st = NULL;
  const s_tok *t;
  char tok[64];
  int rc;
  if (!out) return tr_seterr(err, TR_EINVAL, "tp_parse: no output");
  *out = NULL;
  if (!text) len = 0;
  memset(&p, 0, sizeof p);
  p.text = text ? text : "";
  p.len = len;
  p.err = err;
  if ((rc = s_lex(&p)) != TR_OK) goto done;
  if (!(st = calloc(1, sizeof *st))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  if ((rc = s_statement(&p, st)) != TR_OK) goto done;
  if (s_is_punct(s_peek(&p, 0), ';')) s_next(&p);
  t = s_peek(&p, 0);
  if (t->type != S_EOF) {
    s_show(t, tok, sizeof tok);
    rc = s_fail2(&p, t, "unexpected '%s' after end of statement", tok);
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
