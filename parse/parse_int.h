/*
** parse/parse_int.h - private to parse/: tokens and the parser state its
** files share.  The parser is a lexer (lex.c) and a recursive-descent
** parser (expr.c: expressions; parse.c: statements) from tradb's extended
** Einstein notation to the syntax tree of parse.h.
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
**     expr    := sum (cmp sum)?               cmp: < <= > >= == != (they do
**                                              not chain: a < b < c is an
**                                              error)
**     sum     := term (('+' | '-') term)*
**     term    := unary (('*' | '/') unary)*
**     unary   := ('-' | '+') unary | power
**     power   := primary ('^' unary)?         right associative; -a^2 is
**                                              -(a^2); a^-2 is a^(-2)
**     primary := number | name '[' labels ']' | '(' expr ')'
**              | fn '(' expr ')' | where '(' expr ',' expr ',' expr ')'
**              | (SUM|MAX|MIN|MEAN|ARGMAX|ARGMIN) '(' expr ')'
** Unary plus is accepted and ignored; unary minus applied directly to a
** number literal folds into the literal.  Nesting (and the height of the
** tree) is limited to S_DEPTH_MAX so that the recursion of this parser and
** of the stages after it stays bounded.
**
** Nothing here prints; errors come back as TR_ESYNTAX (TR_ENOMEM when an
** allocation fails) with a one-line message in the tr_err, whose `at`
** points at the token blamed.
*/
#ifndef TRADB_PARSE_PARSE_INT_H
#define TRADB_PARSE_PARSE_INT_H

#include <stdint.h>
#include "parse/parse.h"

#define S_DEPTH_MAX 200            /* expression nesting / tree height */
#define S_DIM_MAX (INT64_C(1) << 62) /* largest dimension or index */
#define S_NUM_MAXLEN 300           /* longest number literal */
#define S_SHOW_MAX 32              /* token text shown in a message */

typedef enum pi_toktype {
  S_EOF,   /* end of input */
  S_IDENT, /* [A-Za-z_][A-Za-z0-9_]* */
  S_NUM,   /* number literal */
  S_STR,   /* 'string' (span includes the quotes) */
  S_PUNCT, /* one of [ ] ( ) , : ; = + - * / ^ < > (ch), or a comparison
              of two characters (ch a TP_OP_*) */
  S_ERR    /* lexical error (errmsg) */
} pi_toktype;

typedef struct pi_tok {
  pi_toktype type;
  int ch;             /* S_PUNCT: the character */
  const char *p;      /* text of the token */
  size_t n;           /* its length */
  int line;           /* 1-based line of its first character */
  double num;         /* S_NUM: value */
  int is_int;         /* S_NUM: digits only */
  uint64_t ival;      /* S_NUM, is_int: value (saturated) */
  int ovf;            /* S_NUM, is_int: ival overflowed uint64 */
  const char *errmsg; /* S_ERR: what is wrong */
} pi_tok;

typedef struct pi_parser {
  const char *text; /* statement text */
  size_t len;       /* its length */
  pi_tok *toks;      /* tokens; the last is S_EOF or S_ERR */
  size_t ntok, cap;
  size_t pos;       /* next token */
  int depth;        /* current expression nesting */
  tr_err *err;
} pi_parser;

/* ---- lex.c ---------------------------------------------------------------- */

/* Cut the whole text into tokens.  Stops after the first error token. */
int pi_lex(pi_parser *p);

/* ---- expr.c --------------------------------------------------------------- */

const pi_tok *pi_peek(const pi_parser *p, size_t k);
const pi_tok *pi_next(pi_parser *p);
int pi_is_punct(const pi_tok *t, int ch);
int pi_is_kw(const pi_tok *t, const char *kw);
/* Printable, one-line, bounded form of a token for a message. */
void pi_show(const pi_tok *t, char *buf, size_t size);
int pi_fail(pi_parser *p, const pi_tok *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fail with "syntax error near 'TOK': <message>".  When t is a lexical
** error token, its own message is reported instead. */
int pi_fail(pi_parser *p, const pi_tok *t, const char *fmt, ...);
int pi_fail2(pi_parser *p, const pi_tok *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fail with "syntax error: <message>" (for messages naming the culprit). */
int pi_fail2(pi_parser *p, const pi_tok *t, const char *fmt, ...);
int pi_expect(pi_parser *p, int ch);
int pi_expect_kw(pi_parser *p, const char *kw);
/* Copy an identifier into dst[TP_NAME_MAX]; what says what it names. */
int pi_ident(pi_parser *p, char *dst, const char *what);
/* String token t's text into dst[cap], quotes removed, '' unescaped: its
** length, or -1 when it does not fit. */
long pi_unquote(const pi_tok *t, char *dst, size_t cap);
/* A quoted file name into dst[TP_PATH_MAX], quotes removed, '' unescaped. */
int pi_path(pi_parser *p, char *dst);
/* A positive integer (dimension or chunk extent). */
int pi_dim(pi_parser *p, int64_t *out, const char *what);
/* 1 + the byte offset of token t in the statement text (tr_err.at). */
int pi_pos(const pi_parser *p, const pi_tok *t);
/* '[' positive integers ']' into v (at most TR_MAX_RANK). */
int pi_dim_list(pi_parser *p, int64_t *v, int *n, const char *what);
/* Labels after '[' through ']'; tensor names the tensor for messages. */
int pi_label_list(pi_parser *p, char (*labels)[TP_NAME_MAX], int *n,
                        const char *tensor);
/* An optionally signed number (FILL parameters). */
int pi_signed(pi_parser *p, double *out);
/* A new expression node of kind and op placed at token t. */
tp_expr *pi_node(pi_parser *p, tp_expr_kind kind, int op, const pi_tok *t);
int pi_expr(pi_parser *p, tp_expr **out, int *h);

#endif /* TRADB_PARSE_PARSE_INT_H */
