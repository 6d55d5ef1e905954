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
  TP_EXPR_BIN, /* a op b, op one of + - * / ^ < > or a TP_OP_* below */
  TP_EXPR_FN,  /* function fn(a) (a TK_OP_* code: the unary ones, or
                  TK_OP_WHERE: where(a, b, c)), or unary minus */
  TP_EXPR_AGG  /* SUM(a) / MAX(a) / MIN(a) (agg a tk_agg), or MEAN(a),
                  ARGMAX(a), ARGMIN(a) (a TP_AGG_* below) */
} tp_expr_kind;

/* The comparisons written with two characters (BIN op; '<' and '>' are
** themselves). */
enum { TP_OP_LE = 256, TP_OP_GE, TP_OP_EQ, TP_OP_NE };

/* The aggregations the compiler builds from the kernels' (AGG op, beside
** the tk_agg values): MEAN(e) is SUM(e) divided by the number of values
** summed; ARGMAX(e) and ARGMIN(e) aggregate exactly one label and give
** the index, along it, of the first largest (smallest) value. */
enum { TP_AGG_MEAN = 16, TP_AGG_ARGMAX, TP_AGG_ARGMIN };

typedef struct tp_expr {
  tp_expr_kind kind;
  int op;                               /* BIN: '+','-','*','/','^','<','>',
                                           TP_OP_LE..TP_OP_NE; FN: TK_OP_*
                                           (TK_OP_NEG for unary minus);
                                           AGG: tk_agg or TP_AGG_* */
  double num;                           /* NUM */
  char name[TP_NAME_MAX];               /* REF: tensor name */
  int nlabels;                          /* REF: number of labels */
  char labels[TR_MAX_RANK][TP_NAME_MAX];/* REF: label names */
  struct tp_expr *a, *b, *c;            /* operands (b for BIN and where,
                                           c for where only) */
  int line;                             /* line of the token, 1-based,
                                           relative to the statement text */
  int pos;                              /* 1 + byte offset of the token in
                                           the statement text (a REF's or
                                           function's name, an operator):
                                           what an error points at */
} tp_expr;

/* One dimension of a slice: PRINT A[...], SAVE A[...] TO, R = A[...].  An
** index may be negative, counting from the end as in NumPy (-1 is the
** last); tp_range_resolve turns it into bounds. */
typedef struct tp_range {
  int64_t lo, hi;  /* as written (hi exclusive) */
  int has_lo;      /* lo written (else 0) */
  int has_hi;      /* hi written (else the end) */
  int single;      /* one index, no ':' (a slice copy drops the dimension) */
} tp_range;

typedef enum tp_stmt_kind {
  TP_ST_CREATE,   /* CREATE TENSOR name[shape] [CHUNK [..]] [TYPE t] */
  TP_ST_LOAD,     /* LOAD name FROM 'path' [(options)] [CHUNK [..]] [TYPE t] */
  TP_ST_SAVE,     /* SAVE name[ranges] TO 'path' */
  TP_ST_FILL,     /* FILL name ZEROS|ONES|IDENTITY|UNIFORM(a,b)|NORMAL(m,s)|PERMUTATION [SEED n] */
  TP_ST_ASSIGN,   /* out[labels] = expr */
  TP_ST_SLICE,    /* name = src[ranges]: a copy of a slice */
  TP_ST_SHOW,     /* SHOW TENSORS */
  TP_ST_SETTINGS, /* SHOW SETTINGS */
  TP_ST_DESCRIBE, /* DESCRIBE name */
  TP_ST_DROP,     /* DROP TENSOR [IF EXISTS] name */
  TP_ST_PRINT,    /* PRINT name [ranges], or name [ranges] alone */
  TP_ST_EXPLAIN,  /* EXPLAIN [ANALYZE] [(FORMAT TEXT|JSON|DOT, PLAN 'p')] assignment */
  TP_ST_SET,      /* SET name = value */
  TP_ST_BEGIN,    /* BEGIN: statements until COMMIT are one block */
  TP_ST_COMMIT,   /* COMMIT (EXPLAIN [..] COMMIT: explain the block) */
  TP_ST_ROLLBACK, /* ROLLBACK: forget the block's statements */
  TP_ST_CALIBRATE /* CALIBRATE: fit the cost weights on the workers */
} tp_stmt_kind;

typedef enum tp_fill_kind {
  TP_FILL_ZEROS, TP_FILL_ONES, TP_FILL_IDENTITY, TP_FILL_UNIFORM, TP_FILL_NORMAL,
  TP_FILL_INDEX, /* no statement names it: each element's index along the
                    last dimension (the index operand of ARGMAX / ARGMIN) */
  TP_FILL_PERMUTATION /* one-hot rows of a random permutation of the last
                         dimension: P[k..., h] = 1 where h is the image of
                         the leading indices' row-major number k (the last
                         kind: fill tasks carry the number, so new kinds go
                         after it and a worker refuses one it does not know) */
} tp_fill_kind;

typedef struct tp_stmt {
  tp_stmt_kind kind;
  char name[TP_NAME_MAX];        /* target tensor (all but SHOW) */
  int name_pos;                  /* 1 + byte offset of name in the text */
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
  /* LOAD options, for CSV files */
  int header;                    /* 0: tell from the first line, 1: it is a
                                    header (HEADER), -1: it is not
                                    (HEADER false) */
  char delim;                    /* DELIMITER 'c'; 0: tell from the file */
  int has_null;                  /* NULL v given: empty fields read as v */
  double null_value;             /* v (NaN for NULL nan) */
  /* FILL */
  tp_fill_kind fill;             /* what to fill with */
  double p0, p1;                 /* UNIFORM(lo, hi) / NORMAL(mu, sd) */
  int has_seed;                  /* SEED given */
  uint64_t seed;                 /* SEED value */
  /* DROP */
  int if_exists;                 /* DROP TENSOR IF EXISTS */
  /* PRINT */
  int bare;                      /* written as the name alone: `X;` */
  /* ASSIGN (and EXPLAIN, whose statement is the assignment) */
  int nout;                      /* output labels */
  char out_labels[TR_MAX_RANK][TP_NAME_MAX];
  tp_expr *rhs;                  /* right-hand side */
  /* EXPLAIN */
  int analyze;                   /* EXPLAIN ANALYZE: run and measure */
  int json;                      /* (FORMAT JSON) */
  int dot;                       /* (FORMAT DOT) */
  int trace;                     /* (FORMAT TRACE): the schedule, Chrome trace JSON */
  /* (PLAN 'name'): run that alternative; a block's plan names one plan
  ** per node (products split into steps make many), joined by " | " */
  char plan[TP_NAME_MAX * 8];
  int block;                     /* EXPLAIN .. COMMIT: of the open block */
  /* SET */
  char setting[TP_NAME_MAX];     /* name, lower-cased */
  char value[TP_NAME_MAX];       /* value as written (number or name) */
  int value_pos;                 /* 1 + byte offset of the value */
  /* PRINT, SAVE, SLICE */
  int nranges;                   /* 0 = whole tensor */
  tp_range range[TR_MAX_RANK];   /* the slice of each dimension */
  int ranges_pos;                /* 1 + byte offset of the '[' */
  /* SLICE */
  char src[TP_NAME_MAX];         /* the tensor sliced */
  int src_pos;                   /* 1 + byte offset of src */
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

/* Resolve range r of a dimension of size n into bounds 0 <= *lo < *hi <=
** n (negative indices count from the end); TR_ESHAPE with a message
** naming dimension d of tensor name when they fall outside. */
int tp_range_resolve(const tp_range *r, int64_t n, int d, const char *name, int64_t *lo,
                     int64_t *hi, tr_err *err);

/* Keyword list for completion (NULL-terminated). */
extern const char *const tp_keyword_list[];

/* The first keywords of statements, the options of EXPLAIN and of LOAD,
** the aggregations and the functions (each NULL-terminated), for help and
** completion. */
extern const char *const tp_statement_words[];
extern const char *const tp_explain_words[];
extern const char *const tp_load_words[];
extern const char *const tp_aggregate_words[];
extern const char *const tp_function_words[];

/*
** Length of the first complete statement in text (through its ';',
** skipping '--' comments and quoted strings), or 0 if text holds no
** complete statement yet.  Leading blanks and comments count in the
** length.
*/
size_t tp_statement_end(const char *text);
/* The offset of the quote that opens the string text ends inside (the
** first statement of text never completes), or -1 when text does not
** end inside a string. */
long tp_open_quote(const char *text);
/* True if text holds only blanks and comments. */
int tp_is_blank(const char *text);
/* The keyword list (tp_keyword_list). */
const char *const *tp_keywords(void);

#endif /* TRADB_PARSE_PARSE_H */
