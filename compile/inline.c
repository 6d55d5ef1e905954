/*
** compile/inline.c - a block's products read through the products that
** made them (ta_inline, compile_int.h): the statement rewritten before
** compile.c binds it.
**
** Inside BEGIN .. COMMIT the optimizer sees how the block's earlier
** outputs were made.  A product reading one, T, that a product made may be
** cheaper through T's own factors.  With T2[k,j] = C[k,m] * D[m,j] of
** inner size 1 (an outer product), U2[i,j] = T1[i,k] * T2[k,j] takes
** I K J multiply-adds, (T1[i,k] * C[k,m]) * D[m,j] I K + I J: the
** pairwise order that TA_SPLIT finds for the product with T replaced by
** its factors.  T is still made, as the block's output it is; only its
** reader reads through it.  A factor is replaced when
**  - the statement's right-hand side is a chain of '*' of references, or
**    SUM of one (summed implicitly or not; the SUM may be under unary
**    functions, relu(SUM(X[n,d] * W[d,h]))), and so is T's definition,
**    the block's latest assignment to T (with no function there: T's
**    values are the sums), its left-hand labels distinct and read alike
**    here (no label twice on T's reference);
**  - none of the definition's tensors was assigned since (they bind to
**    what T read), and all are of T's type;
** and the least flops of the product fall to at most half (S_INLINE_GAIN)
** with it, by at least S_INLINE_MIN_FLOPS: its new step costs a node's
** round trips, some ms on local workers, which fewer flops do not repay.
** That is repeated while it pays, within TL_ORDER_DP_MAX factors (the
** order stays exact).  The sums round in another order, as NumPy's
** einsum(optimize=True) rounds them differently from its product as
** written.  The engine compiles a block that would then be too large as
** written.
*/
#include "config.h"
#include "compile/compile_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"

void ta_ref_text(const tp_expr *r, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "%s[", r->name);
  for (int i = 0; i < r->nlabels && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? "," : "", r->labels[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

#define S_INLINE_GAIN 0.5
#define S_INLINE_MIN_FLOPS 1e8

/* e's factors appended to f[*n..max) if e is a chain of '*' of references:
** 1, else 0. */
static int s_chain_refs(const tp_expr *e, const tp_expr **f, int *n, int max) {
  if (e->kind == TP_EXPR_BIN && e->op == '*')
    return s_chain_refs(e->a, f, n, max) && s_chain_refs(e->b, f, n, max);
  if (e->kind != TP_EXPR_REF || *n >= max) return 0;
  f[(*n)++] = e;
  return 1;
}

/* The product assignment s computes: the node holding it (its SUM, or
** the chain itself when summed implicitly), its factors in f (*n of
** them); NULL when s computes no such product.  fns: the SUM may sit
** under unary functions, relu(SUM(X[n,d] * W[d,h])), which apply to its
** sums however they are computed (a chain under one is elementwise). */
static const tp_expr *s_product_of(const tp_stmt *s, int fns, const tp_expr **f, int *n) {
  const tp_expr *e = s->rhs;
  while (fns && e->kind == TP_EXPR_FN && e->a && !e->b && !e->c) e = e->a;
  if (e != s->rhs && e->kind != TP_EXPR_AGG) return NULL;
  const tp_expr *c = e->kind != TP_EXPR_AGG ? e : e->op == TK_AGG_SUM ? e->a : NULL;
  *n = 0;
  return c && s_chain_refs(c, f, n, TL_ORDER_DP_MAX) ? e : NULL;
}

/* A copy of e's nodes down to at (the functions over it), at replaced by
** by; NULL, by freed, when memory runs out. */
static tp_expr *s_wrap(const tp_expr *e, const tp_expr *at, tp_expr *by) {
  if (e == at) return by;
  tp_expr *c = malloc(sizeof *c);
  if (c) {
    *c = *e;
    c->b = c->c = NULL;
    if ((c->a = s_wrap(e->a, at, by))) return c;
    free(c);
    return NULL;
  }
  tp_expr_free(by);
  return NULL;
}

int ta_bound_meta(tc_db *db, const tr_tensor *pend, int npend, const char *name, tr_tensor *t,
                  int *at, tr_err *err) {
  for (*at = npend - 1; *at >= 0; (*at)--)
    if (!strcmp(pend[*at].name, name)) return *t = pend[*at], TR_OK;
  return tc_tensor_get(db, name, t, err);
}

/* ta_bound_meta, a tensor not found (nor any other failure) reported:
** 0, or -1 when it fails. */
static int s_meta_of(tc_db *db, const tr_tensor *pend, int npend, const char *name, tr_tensor *t,
                     int *at) {
  tr_err ignore;
  return ta_bound_meta(db, pend, npend, name, t, at, &ignore) == TR_OK ? 0 : -1;
}

/* A product being rewritten: its factors (owned copies), its statement,
** and what was read through a definition (for EXPLAIN). */
typedef struct s_inl {
  int n;
  tp_expr *f[TL_ORDER_DP_MAX];
  const tp_stmt *s;   /* the statement */
  char text[256];     /* "T2 as C[k,m'] * D[m',j]; ..." */
} s_inl;

/* Whether label name is on a factor of x or x's left-hand side. */
static int s_inl_has_label(const s_inl *x, const char *name) {
  for (int k = 0; k < x->s->nout; k++)
    if (!strcmp(x->s->out_labels[k], name)) return 1;
  for (int j = 0; j < x->n; j++)
    for (int d = 0; d < x->f[j]->nlabels; d++)
      if (!strcmp(x->f[j]->labels[d], name)) return 1;
  return 0;
}

/* The least flops of x's product (TA_SPLIT's pairwise order), or -1
** when a tensor is not found or no order fits the kernels' limits. */
static double s_inl_flops(const s_inl *x, tc_db *db, const tr_tensor *pend, int npend) {
  tl_einsum *es = calloc(1, sizeof *es);
  tl_order *ord = calloc(1, sizeof *ord);
  char (*lab)[TP_NAME_MAX] = calloc(TL_MAX_LABELS, sizeof *lab);
  double flops = -1;
  if (!es || !ord || !lab) goto done;
  es->nin = x->n;
  for (int j = 0; j < x->n; j++) {
    tr_tensor t;
    int at;
    if (s_meta_of(db, pend, npend, x->f[j]->name, &t, &at) || t.rank != x->f[j]->nlabels) goto done;
    es->rank[j] = t.rank;
    for (int d = 0; d < t.rank; d++) {
      int l = 0;
      while (l < es->nlabels && strcmp(lab[l], x->f[j]->labels[d])) l++;
      if (l == es->nlabels) {
        if (l == TL_MAX_LABELS) goto done;
        snprintf(lab[l], TP_NAME_MAX, "%s", x->f[j]->labels[d]);
        es->size[es->nlabels++] = t.shape[d];
      } else if (es->size[l] != t.shape[d]) {
        goto done;
      }
      es->in[j][d] = l;
    }
  }
  for (int k = 0; k < x->s->nout; k++) {
    int l = 0;
    while (l < es->nlabels && strcmp(lab[l], x->s->out_labels[k])) l++;
    if (l == es->nlabels) goto done;
    es->out[es->nout++] = l;
  }
  tl_order_opts oo = {TK_MAX_LABELS, TR_MAX_RANK, 0};
  tr_err ignore;
  if (x->n >= 2 && tl_order_find(es, &oo, ord, &ignore) == TR_OK) flops = ord->flops;
done:
  free(es);
  free(ord);
  free(lab);
  return flops;
}

/* a, b and c appended to the text in buf (n bytes), cut at its end. */
static void s_append(char *buf, size_t n, const char *a, const char *b, const char *c) {
  const char *part[] = {a, b, c};
  size_t o = strlen(buf);
  for (int i = 0; i < 3; i++)
    for (const char *p = part[i]; *p && o + 1 < n; p++) buf[o++] = *p;
  buf[o] = 0;
}

/* A copy of reference r, its labels renamed by map (from[i] -> to[i]). */
static tp_expr *s_ref_copy(const tp_expr *r, int nmap, char (*from)[TP_NAME_MAX],
                           char (*to)[TP_NAME_MAX], int pos) {
  tp_expr *c = malloc(sizeof *c);
  if (!c) return NULL;
  *c = *r;
  c->a = c->b = c->c = NULL;
  c->pos = pos;
  for (int d = 0; d < c->nlabels; d++)
    for (int i = 0; i < nmap; i++)
      if (!strcmp(r->labels[d], from[i])) {
        snprintf(c->labels[d], TP_NAME_MAX, "%s", to[i]);
        break;
      }
  return c;
}

/* x with factor j read through the definition def, the block's k-th
** statement (pend[k] its output), into y (its factors new copies), or
** 0 when that is not allowed (see above) or memory runs out. */
static int s_inl_expand(const s_inl *x, int j, const tp_stmt *const *defs, const tr_tensor *pend,
                        int npend, int k, tc_db *db, s_inl *y) {
  const tp_stmt *def = defs[k];
  const tp_expr *t = x->f[j], *g[TL_ORDER_DP_MAX];
  int ng;
  if (!def || (def->kind != TP_ST_ASSIGN && def->kind != TP_ST_EXPLAIN) || !def->rhs ||
      !s_product_of(def, 0, g, &ng) || def->nout != t->nlabels || x->n - 1 + ng > TL_ORDER_DP_MAX)
    return 0;
  for (int d = 0; d < t->nlabels; d++)
    for (int e = 0; e < d; e++)
      if (!strcmp(t->labels[d], t->labels[e]) || !strcmp(def->out_labels[d], def->out_labels[e]))
        return 0;
  for (int i = 0; i < ng; i++) {
    tr_tensor m;
    int at;
    for (int later = k; later < npend; later++)
      if (!strcmp(pend[later].name, g[i]->name)) return 0; /* assigned since */
    if (s_meta_of(db, pend, k, g[i]->name, &m, &at) || m.dtype != pend[k].dtype) return 0;
  }
  /* T's labels become the reference's; its summed ones new names */
  char (*from)[TP_NAME_MAX] = calloc(2 * TL_MAX_LABELS, sizeof *from), (*to)[TP_NAME_MAX] = from + TL_MAX_LABELS;
  int nmap = 0, ok = from != NULL;
  for (int d = 0; ok && d < def->nout; d++, nmap++) {
    snprintf(from[nmap], TP_NAME_MAX, "%s", def->out_labels[d]);
    snprintf(to[nmap], TP_NAME_MAX, "%s", t->labels[d]);
  }
  *y = *x;
  y->n = 0;
  for (int i = 0; ok && i < ng; i++)
    for (int d = 0; ok && d < g[i]->nlabels; d++) {
      int seen = 0;
      for (int q = 0; q < nmap && !seen; q++) seen = !strcmp(from[q], g[i]->labels[d]);
      if (seen) continue;
      if (nmap == TL_MAX_LABELS) {
        ok = 0;
        break;
      }
      snprintf(from[nmap], TP_NAME_MAX, "%s", g[i]->labels[d]);
      char name[TP_NAME_MAX];
      snprintf(name, sizeof name, "%s", g[i]->labels[d]);
      for (;;) { /* primed until no label of x or of the map has it */
        int taken = s_inl_has_label(x, name);
        for (int q = 0; q < nmap && !taken; q++) taken = !strcmp(to[q], name);
        size_t len = strlen(name);
        if (!taken) break;
        if (len + 1 >= TP_NAME_MAX) {
          ok = 0;
          break;
        }
        name[len] = '\'';
        name[len + 1] = 0;
      }
      snprintf(to[nmap++], TP_NAME_MAX, "%s", name);
    }
  for (int i = 0; ok && i < x->n; i++) {
    if (i != j) {
      ok = (y->f[y->n++] = s_ref_copy(x->f[i], 0, NULL, NULL, x->f[i]->pos)) != NULL;
      continue;
    }
    s_append(y->text, sizeof y->text, y->text[0] ? "; " : "", t->name, " as ");
    for (int q = 0; q < ng && ok; q++) {
      tp_expr *c = s_ref_copy(g[q], nmap, from, to, t->pos);
      ok = (y->f[y->n++] = c) != NULL;
      if (!ok) break;
      char r[TP_NAME_MAX * (TR_MAX_RANK + 2)];
      ta_ref_text(c, r, sizeof r);
      s_append(y->text, sizeof y->text, q ? " * " : "", r, "");
    }
  }
  free(from);
  if (!ok)
    for (int i = 0; i < y->n; i++) free(y->f[i]);
  return ok;
}

int ta_inline(tc_db *db, const tr_tensor *pend, const tp_stmt *const *defs, int npend,
              const tp_stmt *s, tp_stmt **out, char *text, size_t ntext) {
  const tp_expr *f[TL_ORDER_DP_MAX], *at;
  int n, changed = 0;
  *out = NULL;
  if (!s->rhs || !(at = s_product_of(s, 1, f, &n)) || n < 2) return 0;
  s_inl x = {.n = n, .s = s};
  for (int j = 0; j < n; j++)
    if (!(x.f[j] = s_ref_copy(f[j], 0, NULL, NULL, f[j]->pos))) goto done;
  double cost = s_inl_flops(&x, db, pend, npend);
  while (cost > 0) {
    s_inl best = {0}, y;
    double best_cost = cost * S_INLINE_GAIN;
    for (int j = 0; j < x.n; j++) {
      tr_tensor m;
      int k;
      if (s_meta_of(db, pend, npend, x.f[j]->name, &m, &k) || k < 0 ||
          !s_inl_expand(&x, j, defs, pend, npend, k, db, &y))
        continue;
      double c = s_inl_flops(&y, db, pend, npend);
      if (c >= 0 && c <= best_cost && cost - c >= S_INLINE_MIN_FLOPS) {
        for (int i = 0; i < best.n; i++) free(best.f[i]);
        best = y;
        best_cost = c;
      } else {
        for (int i = 0; i < y.n; i++) free(y.f[i]);
      }
    }
    if (!best.n) break;
    for (int i = 0; i < x.n; i++) free(x.f[i]);
    x = best;
    cost = best_cost;
    changed = 1;
  }
  if (!changed) goto done;
  /* the chain of x's factors, under the statement's SUM and functions */
  tp_stmt *r = malloc(sizeof *r);
  tp_expr *e = x.f[0];
  for (int j = 1; e && j < x.n; j++) {
    tp_expr *m = calloc(1, sizeof *m);
    if (!m) {
      tp_expr_free(e);
      for (int i = j; i < x.n; i++) free(x.f[i]);
      e = NULL;
      break;
    }
    m->kind = TP_EXPR_BIN;
    m->op = '*';
    m->a = e;
    m->b = x.f[j];
    m->pos = x.f[j]->pos;
    e = m;
  }
  x.n = 0; /* e owns them */
  if (e && at->kind == TP_EXPR_AGG) {
    tp_expr *a = malloc(sizeof *a);
    if (a) {
      *a = *at;
      a->a = e;
      a->b = a->c = NULL;
    } else {
      tp_expr_free(e);
    }
    e = a ? s_wrap(s->rhs, at, a) : NULL;
  }
  if (!r || !e) {
    free(r);
    tp_expr_free(e);
    goto done;
  }
  *r = *s;
  r->rhs = e;
  *out = r;
  snprintf(text, ntext, "%s", x.text);
done:
  for (int i = 0; i < x.n; i++) free(x.f[i]);
  return *out != NULL;
}

void ta_inline_free(tp_stmt **s) {
  if (!*s) return;
  tp_expr_free((*s)->rhs);
  free(*s);
  *s = NULL;
}

