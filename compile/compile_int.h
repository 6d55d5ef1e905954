/*
** compile/compile_int.h - what compile.c uses of the stage's other file.
*/
#ifndef TRADB_COMPILE_COMPILE_INT_H
#define TRADB_COMPILE_COMPILE_INT_H

#include "compile/compile.h"

/* Reference r as text, e.g. "A[i,k]", into buf (n bytes). */
void ta_ref_text(const tp_expr *r, char *buf, size_t n);

/* Tensor name as a statement after a block's earlier outputs
** pend[0..npend) binds it, into *t: the latest of those of that name
** (*at its index), else the catalog's (*at -1).  TR_OK, or the catalog's
** status (TR_ENOTFOUND: no such tensor). */
int ta_bound_meta(tc_db *db, const tr_tensor *pend, int npend, const char *name, tr_tensor *t,
                  int *at, tr_err *err);

/* Statement s of a block (defs[k] made pend[k], the block's earlier
** outputs) with the factors worth it read through the products that made
** them (inline.c): 1 and a new statement in *out (free with
** ta_inline_free) and what was read so in text (ntext bytes), e.g. "T2
** as C[k,k'] * D[k',j]"; 0 when none is worth it. */
int ta_inline(tc_db *db, const tr_tensor *pend, const tp_stmt *const *defs, int npend,
              const tp_stmt *s, tp_stmt **out, char *text, size_t ntext);
void ta_inline_free(tp_stmt **s);

#endif /* TRADB_COMPILE_COMPILE_INT_H */
