/*
** parse/lex.c - tokens: the keyword list, where a statement ends, and the
** lexer that cuts a statement into tokens (see parse_int.h for the
** language's lexical rules).
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

/* ---- Keywords ----------------------------------------------------------- */

const char *const tp_keyword_list[] = {
    "CREATE", "TENSOR", "CHUNK", "TYPE", "LOAD", "FROM", "SAVE", "TO",
    "FILL", "ZEROS", "ONES", "IDENTITY", "UNIFORM", "NORMAL", "PERMUTATION", "SEED",
    "SHOW", "TENSORS", "SETTINGS", "DESCRIBE", "DROP", "IF", "EXISTS", "PRINT",
    "EXPLAIN", "ANALYZE", "FORMAT", "JSON", "TEXT", "DOT", "PLAN", "SET",
    "BEGIN", "COMMIT", "ROLLBACK", "CALIBRATE", "HEADER", "DELIMITER", "NULL",
    "SUM", "MAX", "MIN", "MEAN", "ARGMAX", "ARGMIN",
/* the functions, as kernels/opcodes.h names them */
#define S_FN(NAME, name, ...) name,
    TK_OPCODES(TK_OPCODE_NONE, TK_OPCODE_NONE, S_FN, S_FN)
#undef S_FN
    "f32", "f64", NULL};

const char *const *tp_keywords(void) { return tp_keyword_list; }

const char *const tp_function_words[] = {
#define S_FN(NAME, name, ...) name,
    TK_OPCODES(TK_OPCODE_NONE, TK_OPCODE_NONE, S_FN, S_FN)
#undef S_FN
    NULL};


/* ---- Statement boundaries ---------------------------------------------- */

/* tp_statement_end; text ending inside a quoted string sets *open to its
** opening quote's offset (else -1). */
static size_t s_statement_scan(const char *text, long *open) {
  size_t i = 0;
  *open = -1;
  if (!text) return 0;
  while (text[i]) {
    char c = text[i];
    if (c == ';') return i + 1;
    if (c == '-' && text[i + 1] == '-') {
      while (text[i] && text[i] != '\n') i++;
      continue;
    }
    if (c == '\'') {
      size_t q = i++;
      for (;;) {
        if (!text[i]) { /* unterminated string: not complete */
          *open = (long)q;
          return 0;
        }
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

size_t tp_statement_end(const char *text) {
  long open;
  return s_statement_scan(text, &open);
}

long tp_open_quote(const char *text) {
  long open;
  s_statement_scan(text, &open);
  return open;
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


static int s_isident0(int c) { return isalpha(c) || c == '_'; }
static int s_isident(int c) { return isalnum(c) || c == '_'; }

/* Append a token; returns TR_OK or TR_ENOMEM. */
static int s_push(pi_parser *p, const pi_tok *t) {
  if (p->ntok == p->cap) {
    size_t ncap = p->cap ? p->cap * 2 : 32;
    pi_tok *nt = realloc(p->toks, ncap * sizeof *nt);
    if (!nt) return tr_seterr(p->err, TR_ENOMEM, "out of memory");
    p->toks = nt;
    p->cap = ncap;
  }
  p->toks[p->ntok++] = *t;
  return TR_OK;
}

/* Scan a number starting at i; fills t (S_NUM or S_ERR), returns its end. */
static size_t s_lex_number(const char *s, size_t len, size_t i, pi_tok *t) {
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
int pi_lex(pi_parser *p) {
  const char *s = p->text;
  size_t len = p->len, i = 0;
  int line = 1, rc;
  for (;;) {
    pi_tok t;
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
    } else if (strchr("[](),:;=+-*/^<>!", (int)c) && c != '\0') {
      /* comparisons of two characters: <= >= == != */
      static const struct { char c; int ch; } two[] = {
          {'<', TP_OP_LE}, {'>', TP_OP_GE}, {'=', TP_OP_EQ}, {'!', TP_OP_NE}};
      t.type = S_PUNCT;
      t.ch = c;
      t.n = 1;
      for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
        if (c == two[k].c && i + 1 < len && s[i + 1] == '=') {
          t.ch = two[k].ch;
          t.n = 2;
        }
      if (t.ch == '!') {
        t.type = S_ERR;
        t.errmsg = "unexpected character (not equal is '!=')";
      }
      i += t.n;
    } else {
      t.type = S_ERR;
      t.n = 1;
      t.errmsg = "unexpected character";
    }
    if ((rc = s_push(p, &t)) != TR_OK) return rc;
    if (t.type == S_ERR) return TR_OK;
  }
}

