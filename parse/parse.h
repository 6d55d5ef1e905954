/*
** parse/parse.h - statements in text to syntax trees: the lexer (where a
** statement ends, keywords) and the parser.  Knows nothing of the catalog,
** the plans or the workers.
*/
#ifndef TRADB_PARSE_PARSE_H
#define TRADB_PARSE_PARSE_H

#include <stddef.h>
#include <stdint.h>
#include "util/util.h"
#include "kernels/kernels.h" /* the tree names functions and aggregations by kernel opcode */

#define TP_NAME_MAX 64   /* identifiers (tensor names, labels) */
#define TP_PATH_MAX 4096 /* file names in LOAD / SAVE */

/* ---- Syntax tree ------------------------------------------------------ */

typedef enum tp_expr_kind {
  TP_EXPR_NUM, /* number literal: num */
  TP_EXPR_REF, /* tensor reference name[labels] */
  TP_EXPR_BIN, /* a op b, op one of + - * / ^ */
  TP_EXPR_FN,  /* unary function fn(a) (a TK_OP_* code), or unary minus */
  TP_EXPR_AGG  /* SUM(a) / MAX(a) / MIN(a): agg is a tk_agg */
} tp_expr_kind;

typedef struct tp_expr {
  tp_expr_kind kind;
  int op;                               /* BIN: '+','-','*','/','^';
                                           FN: TK_OP_RELU .. (TK_OP_NEG for
                                           unary minus); AGG: tk_agg */
  double num;                           /* NUM */
  char name[TP_NAME_MAX];               /* REF: tensor name */
  int nlabels;                          /* REF: number of labels */
  char labels[TR_MAX_RANK][TP_NAME_MAX];/* REF: label names */
  struct tp_expr *a, *b;                /* operands (b only for BIN) */
  int line;                             /* line of the token, 1-based,
                                           relative to the statement text */
} tp_expr;

typedef enum tp_stmt_kind {
  TP_ST_CREATE,   /* CREATE TENSOR name[shape] [CHUNK [..]] [TYPE t] */
  TP_ST_LOAD,     /* LOAD name FROM 'path' [CHUNK [..]] [TYPE t] */
  TP_ST_SAVE,     /* SAVE name TO 'path' */
  TP_ST_FILL,     /* FILL name ZEROS|ONES|IDENTITY|UNIFORM(a,b)|NORMAL(m,s) [SEED n] */
  TP_ST_ASSIGN,   /* out[labels] = expr */
  TP_ST_SHOW,     /* SHOW TENSORS */
  TP_ST_DESCRIBE, /* DESCRIBE name */
  TP_ST_DROP,     /* DROP TENSOR [IF EXISTS] name */
  TP_ST_PRINT,    /* PRINT name [ranges] */
  TP_ST_EXPLAIN,  /* EXPLAIN [ANALYZE] [(FORMAT TEXT|JSON)] assignment */
  TP_ST_SET,      /* SET name = value */
  TP_ST_BEGIN,    /* BEGIN: statements until COMMIT are one block */
  TP_ST_COMMIT,   /* COMMIT (EXPLAIN [..] COMMIT: explain the block) */
  TP_ST_ROLLBACK  /* ROLLBACK: forget the block's statements */
} tp_stmt_kind;

typedef enum tp_fill_kind {
  TP_FILL_ZEROS, TP_FILL_ONES, TP_FILL_IDENTITY, TP_FILL_UNIFORM, TP_FILL_NORMAL
} tp_fill_kind;

typedef struct tp_stmt {
  tp_stmt_kind kind;
  char name[TP_NAME_MAX];        /* target tensor (all but SHOW) */
  /* CREATE */
  int rank;                      /* number of dimensions given */
  int64_t shape[TR_MAX_RANK];    /* dimensions */
  /* CREATE, LOAD */
  int has_chunk;                 /* CHUNK [...] given */
  int chunk_rank;                /* number of chunk entries given */
  int64_t chunk[TR_MAX_RANK];    /* chunk shape */
  int has_type;                  /* TYPE given */
  tr_dtype dtype;                /* TYPE value */
  /* LOAD, SAVE */
  char path[TP_PATH_MAX];        /* file name (quotes removed) */
  /* FILL */
  tp_fill_kind fill;             /* what to fill with */
  double p0, p1;                 /* UNIFORM(lo, hi) / NORMAL(mu, sd) */
  int has_seed;                  /* SEED given */
  uint64_t seed;                 /* SEED value */
  /* DROP */
  int if_exists;                 /* DROP TENSOR IF EXISTS */
  /* ASSIGN (and EXPLAIN, whose statement is the assignment) */
  int nout;                      /* output labels */
  char out_labels[TR_MAX_RANK][TP_NAME_MAX];
  tp_expr *rhs;                  /* right-hand side */
  /* EXPLAIN */
  int analyze;                   /* EXPLAIN ANALYZE: run and measure */
  int json;                      /* (FORMAT JSON) */
  int dot;                       /* (FORMAT DOT) */
  int trace;                     /* (FORMAT TRACE): the schedule, Chrome trace JSON */
  char plan[TP_NAME_MAX * 4];    /* (PLAN 'name'): run that alternative */
  int block;                     /* EXPLAIN .. COMMIT: of the open block */
  /* SET */
  char setting[TP_NAME_MAX];     /* name, lower-cased */
  char value[TP_NAME_MAX];       /* value as written (number or name) */
  /* PRINT */
  int nranges;                   /* 0 = whole tensor */
  int64_t lo[TR_MAX_RANK];       /* range starts (inclusive) */
  int64_t hi[TR_MAX_RANK];       /* range ends (exclusive); -1 = to end */
} tp_stmt;

/*
** Parse one statement (text, len bytes; a trailing ';' is optional).
** On failure returns TR_ESYNTAX with a message such as
**   "syntax error near 'foo': expected ']'"
** and *out = NULL.  Numbers in shapes must be positive integers; ranks
** above TR_MAX_RANK, over-long names and paths are syntax errors.
** Keywords are case-insensitive; names are case-sensitive.
*/
int tp_parse(const char *text, size_t len, tp_stmt **out, tr_err *err);
void tp_stmt_free(tp_stmt **s);
void tp_expr_free(tp_expr *e);

/* Keyword list for completion (NULL-terminated). */
extern const char *const tp_keyword_list[];

/*
** Length of the first complete statement in text (through its ';',
** skipping '--' comments and quoted strings), or 0 if text holds no
** complete statement yet.  Leading blanks and comments count in the
** length.
*/
size_t tp_statement_end(const char *text);
/* True if text holds only blanks and comments. */
int tp_is_blank(const char *text);
/* The keyword list (tp_keyword_list). */
const char *const *tp_keywords(void);

#endif /* TRADB_PARSE_PARSE_H */
