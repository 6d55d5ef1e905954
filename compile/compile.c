/*
** compile/compile.c - from an assignment's syntax tree to a plan.
**
** Binding: every tensor reference is looked up in the catalog, its rank
** checked against its labels, and every label bound to one size.  Errors
** point (tr_err.at) at the reference they are about.
**
** Aggregation rules (the language reference in README.md):
**  - SUM(e), MAX(e), MIN(e), MEAN(e) aggregate e over the labels occurring
**    in e but not on the left-hand side; the result carries the left-hand
**    labels that occur in e.  MEAN is a SUM whose result is divided by the
**    number of values summed.
**  - ARGMAX(e), ARGMIN(e) aggregate exactly one label.  Inside another
**    aggregation they take the last label of e that is not on the left
**    (in the order labels first occur in e) and keep the others, which
**    the enclosing aggregation then aggregates:
**    acc[] = MEAN(ARGMAX(P[n,l]) == ARGMAX(Y[n,l])) is, for each n, the
**    argmax over l, averaged over n.  Each becomes three EinSum nodes
**    (s_build_arg): the values (unless e is one reference), their maximum
**    M, and MIN over the label of where(e == M, index, inf), the index
**    being an operand made for the run (ta_rel.iota).
**  - Labels still unaggregated at the top get an implicit SUM around the
**    whole right-hand side only when it is a product (of references,
**    numbers and aggregations, with unary minus and quotients; an
**    expression without tensors is a number): classic Einstein notation.
**    A summed product's numbers and sign scale the sums (s_terms).
**    Elsewhere, A[i,j] + v[k] or log(A[i,j]) with the left S[i,j] or
**    X[i], such a label is an error that names it.
**
** Each aggregation becomes one EinSum node (TRA join + aggregation); the
** top, if it is not itself an aggregation, becomes an elementwise node
** (join, no aggregation).  A top that only applies unary functions and
** constants to one aggregation's result is fused into that node as its
** Transform, so relu(SUM(X*W)) runs as one pass.  A SUM of two factors
** each an elementwise function of its own operands keeps the gemm kernel
** (ta_gemm_ok): SUM((X[n,d] - q[d]) * M[d,e]) computes X - q tile by tile
** in the product's task and never stores it.
**
** Inside a block, a product may first be rewritten to read the block's
** earlier outputs through the products that made them (inline.c).
*/
#include "config.h"
#include "compile/compile.h"
#include "compile/compile_int.h"
#include "layout/layout.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_LABELS 64 /* distinct labels in one statement */

typedef uint64_t s_mask; /* set of statement label ids */

/* State of binding and building one statement. */
typedef struct s_binder {
  tc_db *db;                            /* catalog */
  const tr_tensor *pend;                /* outputs of a block's earlier
                                           statements, read first */
  int npend;                            /* their number */
  ta_plan *plan;                        /* plan being built */
  tr_err *err;                          /* where failures go */
  int nlab;                             /* labels bound so far */
  char lab[S_MAX_LABELS][TP_NAME_MAX];  /* label names */
  int64_t lsize[S_MAX_LABELS];          /* label sizes */
  char lwhere[S_MAX_LABELS][TP_NAME_MAX * 2]; /* first binding, e.g. "A[i,k]" */
  s_mask lhs;                           /* left-hand labels */
  int lhs_id[TR_MAX_RANK];              /* left-hand label ids in order */
  int nlhs;                             /* left-hand rank */
  int ntemps;                           /* temporaries made */
  int nnested;                          /* arg-forms inside another
                                           aggregation */
  const tp_expr *nested[TA_MAX_NODES];  /* them (s_find_nested) */
  unsigned flags;                       /* TA_SPLIT */
} s_binder;

/* A node under construction. */
typedef struct s_nodeb {
  ta_node n;              /* the node */
  int id[TK_MAX_LABELS];  /* statement label id of each node label */
} s_nodeb;

static int s_label_id(const s_binder *b, const char *name) {
  for (int i = 0; i < b->nlab; i++)
    if (!strcmp(b->lab[i], name)) return i;
  return -1;
}

/* Find or add the stored relation for tensor `name`. */
static int s_stored_rel(s_binder *b, const char *name, int *rel) {
  ta_plan *p = b->plan;
  for (int i = 0; i < p->nrels; i++)
    if (p->rels[i].kind == TA_REL_STORED && !strcmp(p->rels[i].meta.name, name)) {
      *rel = i;
      return TR_OK;
    }
  if (p->nrels >= TA_MAX_RELS)
    return tr_seterr(b->err, TR_EINVAL, "statement references too many tensors");
  ta_rel *r = &p->rels[p->nrels];
  memset(r, 0, sizeof *r);
  r->kind = TA_REL_STORED;
  int at, rc = ta_bound_meta(b->db, b->pend, b->npend, name, &r->meta, &at, b->err);
  if (rc == TR_ENOTFOUND) b->err->code = rc = TR_ENAME;
  if (rc != TR_OK) return rc;
  r->pending = at >= 0;
  *rel = p->nrels++;
  return TR_OK;
}

/* Bind every reference in e: tensors exist, ranks agree, labels have one
** size each. */
static int s_bind(s_binder *b, const tp_expr *e) {
  if (!e) return TR_OK;
  if (e->kind == TP_EXPR_REF) {
    int rel, rc = s_stored_rel(b, e->name, &rel);
    if (rc) return tr_at(b->err, e->pos, rc);
    const tr_tensor *t = &b->plan->rels[rel].meta;
    if (t->rank != e->nlabels)
      return tr_at(b->err, e->pos,
                   tr_seterr(b->err, TR_ESHAPE,
                             "rank mismatch: %s has rank %d but is indexed with %d label%s",
                             e->name, t->rank, e->nlabels, e->nlabels == 1 ? "" : "s"));
    for (int d = 0; d < e->nlabels; d++) {
      char where[TP_NAME_MAX * 2];
      ta_ref_text(e, where, sizeof where);
      int id = s_label_id(b, e->labels[d]);
      if (id < 0) {
        if (b->nlab >= S_MAX_LABELS)
          return tr_at(b->err, e->pos,
                       tr_seterr(b->err, TR_EINVAL, "too many labels in one statement"));
        id = b->nlab++;
        snprintf(b->lab[id], TP_NAME_MAX, "%s", e->labels[d]);
        b->lsize[id] = t->shape[d];
        snprintf(b->lwhere[id], sizeof b->lwhere[id], "%s", where);
      } else if (b->lsize[id] != t->shape[d]) {
        return tr_at(b->err, e->pos,
                     tr_seterr(b->err, TR_ESHAPE,
                               "label '%s' bound to sizes %lld (%s) and %lld (%s)",
                               e->labels[d], (long long)b->lsize[id], b->lwhere[id],
                               (long long)t->shape[d], where));
      }
    }
    return TR_OK;
  }
  int rc = s_bind(b, e->a);
  if (!rc) rc = s_bind(b, e->b);
  return rc ? rc : s_bind(b, e->c);
}

static int s_is_arg(const tp_expr *e) {
  return e->kind == TP_EXPR_AGG && (e->op == TP_AGG_ARGMAX || e->op == TP_AGG_ARGMIN);
}

/* Record the arg-forms of e that some aggregation encloses (inside: e is
** within one). */
static int s_find_nested(s_binder *b, const tp_expr *e, int inside) {
  if (!e) return TR_OK;
  if (inside && s_is_arg(e)) {
    if (b->nnested >= TA_MAX_NODES)
      return tr_at(b->err, e->pos, tr_seterr(b->err, TR_EINVAL, "expression has too many aggregations"));
    b->nested[b->nnested++] = e;
  }
  inside |= e->kind == TP_EXPR_AGG;
  int rc = s_find_nested(b, e->a, inside);
  if (!rc) rc = s_find_nested(b, e->b, inside);
  return rc ? rc : s_find_nested(b, e->c, inside);
}

/* The label of e, among those in m, that first occurs last in e; -1 if
** none.  *seen collects the labels met so far. */
static int s_last_label(const s_binder *b, const tp_expr *e, s_mask m, s_mask *seen) {
  int last = -1, k;
  if (!e) return -1;
  if (e->kind == TP_EXPR_REF) {
    for (int d = 0; d < e->nlabels; d++) {
      int id = s_label_id(b, e->labels[d]);
      if ((m >> id & 1) && !(*seen >> id & 1)) last = id;
      *seen |= (s_mask)1 << id;
    }
    return last;
  }
  if ((k = s_last_label(b, e->a, m, seen)) >= 0) last = k;
  if ((k = s_last_label(b, e->b, m, seen)) >= 0) last = k;
  if ((k = s_last_label(b, e->c, m, seen)) >= 0) last = k;
  return last;
}

/* Labels of e visible outside it: an aggregation keeps only left-hand
** labels. */
static s_mask s_labels(const s_binder *b, const tp_expr *e) {
  if (!e) return 0;
  switch (e->kind) {
  case TP_EXPR_REF: {
    s_mask m = 0;
    for (int d = 0; d < e->nlabels; d++) m |= (s_mask)1 << s_label_id(b, e->labels[d]);
    return m;
  }
  case TP_EXPR_AGG: {
    s_mask inner = s_labels(b, e->a), keep = inner & b->lhs, seen = 0;
    for (int i = 0; i < b->nnested; i++)
      if (b->nested[i] == e && (inner & ~keep)) { /* leaves all but one label outside */
        int last = s_last_label(b, e->a, inner & ~keep, &seen);
        keep = inner & ~((s_mask)1 << last);
      }
    return keep;
  }
  default:
    return s_labels(b, e->a) | s_labels(b, e->b) | s_labels(b, e->c);
  }
}

/* The statement label ids of mask m in a relation's order: left-hand
** labels in left-hand order, then the others by id; returns how many. */
static int s_keep_ids(const s_binder *b, s_mask m, int *ids) {
  int k = 0;
  for (int j = 0; j < b->nlhs; j++)
    if (m >> b->lhs_id[j] & 1) ids[k++] = b->lhs_id[j];
  for (int id = 0; id < b->nlab; id++)
    if ((m >> id & 1) && !(b->lhs >> id & 1)) ids[k++] = id;
  return k;
}

static int s_emit_to(s_binder *b, s_nodeb *nb, tk_prog *p, const tp_expr *e, int depth);
/* Emit the scalar program of e into node nb's join program. */
static int s_emit(s_binder *b, s_nodeb *nb, const tp_expr *e, int depth) {
  return s_emit_to(b, nb, &nb->n.prog, e, depth);
}

/* Add node label for statement label id; returns node label index. */
static int s_node_label(s_binder *b, s_nodeb *nb, int id) {
  for (int i = 0; i < nb->n.nlabels; i++)
    if (nb->id[i] == id) return i;
  if (nb->n.nlabels >= TK_MAX_LABELS) {
    tr_seterr(b->err, TR_EINVAL, "too many labels in one aggregation (at most %d)",
              TK_MAX_LABELS);
    return -1;
  }
  int i = nb->n.nlabels++;
  nb->id[i] = id;
  snprintf(nb->n.lname[i], TP_NAME_MAX, "%s", b->lab[id]);
  nb->n.size[i] = b->lsize[id];
  return i;
}

/* Find or add an operand (rel with statement label ids per dim). */
static int s_operand(s_binder *b, s_nodeb *nb, int rel, int rank, const int *ids) {
  ta_node *n = &nb->n;
  int lab[TR_MAX_RANK];
  for (int d = 0; d < rank; d++) {
    lab[d] = s_node_label(b, nb, ids[d]);
    if (lab[d] < 0) return -1;
  }
  for (int i = 0; i < n->ninputs; i++)
    if (n->in[i].rel == rel && n->in[i].rank == rank &&
        !memcmp(n->in[i].label, lab, sizeof(int) * (size_t)rank))
      return i;
  if (n->ninputs >= TK_MAX_INPUTS) {
    tr_seterr(b->err, TR_EINVAL, "too many tensor references in one expression (at most %d)",
              TK_MAX_INPUTS);
    return -1;
  }
  ta_operand *o = &n->in[n->ninputs];
  o->rel = rel;
  o->rank = rank;
  memcpy(o->label, lab, sizeof(int) * (size_t)rank);
  return n->ninputs++;
}

static int s_insn(s_binder *b, tk_prog *p, int op, int arg, double c) {
  if (p->n >= TK_MAX_PROG)
    return tr_seterr(b->err, TR_EINVAL, "expression too long (at most %d terms)", TK_MAX_PROG);
  p->code[p->n].op = op;
  p->code[p->n].arg = arg;
  p->code[p->n].c = c;
  p->n++;
  return TR_OK;
}

/* Start of the right factor of a program ending in a multiply: walking
** back from the multiply, the first pc where one whole value is made. */
int ta_gemm_split(const tk_prog *p) {
  if (p->n < 3 || p->code[p->n - 1].op != TK_OP_MUL) return -1;
  int need = 1;
  for (int pc = p->n - 2; pc >= 0; pc--) {
    need += tk_opcode_pops(p->code[pc].op) - 1;
    if (need == 0) return pc;
  }
  return -1;
}

/* Inputs read by code [from, to) of p, as a bit set. */
static unsigned s_prog_inputs(const tk_prog *p, int from, int to) {
  unsigned m = 0;
  for (int pc = from; pc < to; pc++)
    if (p->code[pc].op == TK_OP_INPUT) m |= 1u << p->code[pc].arg;
  return m;
}

double ta_gemm_packed(const ta_node *n, const int64_t *box, const int64_t *piece) {
  int split = ta_gemm_split(&n->prog);
  if (split < 0) return 0;
  unsigned left = s_prog_inputs(&n->prog, 0, split);
  double fl[2] = {0, 0};  /* floats of each factor's operand blocks */
  uint64_t on[2] = {0, 0}; /* labels each factor holds */
  for (int i = 0; i < n->ninputs; i++) {
    int s = !((left >> i) & 1);
    double el = 1;
    for (int d = 0; d < n->in[i].rank; d++) {
      el *= (double)box[n->in[i].label[d]];
      on[s] |= 1ull << n->in[i].label[d];
    }
    fl[s] += el;
  }
  double calls[2] = {1, 1}; /* times each factor is packed */
  for (int l = 0; piece && l < n->nout; l++) {
    int in0 = (on[0] >> l) & 1, in1 = (on[1] >> l) & 1;
    if (piece[l] > 0 && piece[l] < box[l] && in0 != in1) /* the other factor, again a piece */
      calls[in0] *= (double)((box[l] + piece[l] - 1) / piece[l]);
  }
  return fl[0] * calls[0] + fl[1] * calls[1];
}

/* Would gemm node n, run in pieces of `piece` (under TA_PIECE_KEPT) along
** kept label l, pack more than TA_PIECE_COPY times the floats again that
** copying the pieces together moves (the floats of the operands holding
** l)? */
static int s_repacks(const ta_node *n, int l, int64_t piece) {
  if (!n->gemm || l >= n->nout || piece >= TA_PIECE_KEPT) return 0;
  int64_t pc[TK_MAX_LABELS] = {0};
  double own = 0;
  pc[l] = piece;
  for (int i = 0; i < n->ninputs; i++) {
    double el = 1;
    int has = 0;
    for (int d = 0; d < n->in[i].rank; d++) {
      el *= (double)n->chunk[n->in[i].label[d]];
      has |= n->in[i].label[d] == l;
    }
    if (has) own += el;
  }
  return ta_gemm_packed(n, n->chunk, pc) - ta_gemm_packed(n, n->chunk, NULL) > TA_PIECE_COPY * own;
}

int64_t ta_label_piece(const ta_node *n, const tr_tensor *const *in, int l) {
  int64_t piece = 0;
  if (l < 0 || l >= n->nlabels) return 0;
  for (int i = 0; i < n->ninputs; i++)
    for (int d = 0; d < n->in[i].rank; d++)
      if (n->in[i].label[d] == l && (!piece || in[i]->chunk[d] < piece)) piece = in[i]->chunk[d];
  if (piece >= n->chunk[l] || piece < TA_PIECE_MIN || s_repacks(n, l, piece)) return 0;
  for (int i = 0; i < n->ninputs; i++) /* (one chunk along l has no boundary to meet) */
    for (int d = 0; d < n->in[i].rank; d++)
      if (n->in[i].label[d] == l && in[i]->chunk[d] < in[i]->shape[d] && in[i]->chunk[d] % piece) return 0;
  return piece;
}

int ta_gram_labels(const ta_node *n, int *li, int *lj) {
  int split = ta_gemm_split(&n->prog), map[TK_MAX_INPUTS];
  *li = *lj = -1;
  if (!n->gemm || split < 0 || 2 * split != n->prog.n - 1) return 0;
  for (int i = 0; i < TK_MAX_INPUTS; i++) map[i] = -1;
  for (int pc = 0; pc < split; pc++) {
    const tk_insn *a = &n->prog.code[pc], *b = &n->prog.code[split + pc];
    if (a->op != b->op || (a->op == TK_OP_CONST && memcmp(&a->c, &b->c, sizeof a->c))) return 0;
    if (a->op != TK_OP_INPUT) continue;
    if (map[a->arg] >= 0 && map[a->arg] != b->arg) return 0;
    map[a->arg] = b->arg;
  }
  for (int i = 0; i < n->ninputs; i++) {
    if (map[i] < 0) continue;
    const ta_operand *x = &n->in[i], *y = &n->in[map[i]];
    if (x->rel != y->rel || x->rank != y->rank) return 0;
    for (int d = 0; d < x->rank; d++) {
      if (x->label[d] == y->label[d]) {
        if (x->label[d] < n->nout) return 0; /* batched */
      } else if (x->label[d] < n->nout && y->label[d] < n->nout && (*li < 0 || (*li == x->label[d] && *lj == y->label[d]))) {
        *li = x->label[d];
        *lj = y->label[d];
      } else {
        return 0;
      }
    }
  }
  return *li >= 0 && n->nout == 2 && n->chunk[*li] == n->chunk[*lj];
}

void ta_next_tuple(const ta_node *n, int64_t *lkey) {
  int l = n->nlabels - 1;
  while (l >= n->nout) {
    if (++lkey[l] * n->chunk[l] < n->size[l]) break;
    lkey[l--] = 0;
  }
}

double ta_gemm_share(const ta_node *n, const int64_t *lkey) {
  int li, lj;
  return ta_gram_labels(n, &li, &lj) && lkey[li] == lkey[lj] ? 0.5 : 1;
}

int ta_gemm_mirror(const ta_node *n, const int64_t *lkey, int64_t *mkey) {
  int li, lj;
  if (!ta_gram_labels(n, &li, &lj) || lkey[li] <= lkey[lj]) return 0;
  if (mkey) {
    memcpy(mkey, lkey, sizeof *mkey * (size_t)n->nlabels);
    mkey[li] = lkey[lj];
    mkey[lj] = lkey[li];
  }
  return 1;
}

int ta_tail_pieces(const ta_node *n, int threads) {
  int li, lj;
  if (threads < 2 || n->nout < 1 || ta_gram_labels(n, &li, &lj)) return 0;
  int64_t rows = n->chunk[0] < n->size[0] ? n->chunk[0] : n->size[0];
  return rows / threads >= TA_PIECE_MIN ? threads : 0;
}

/*
** gemm: a SUM of a product of two factors, each an elementwise function
** of its own operands (an elementwise producer fused into the product:
** SUM((X[n,d] - q[d]) * M[d,e]) computes each X - q tile inside the
** product's task and never stores it).  The two factors read disjoint,
** non-empty sets of operands; no operand holds a label twice; the summed
** labels are on both factors.  Also what a decoded task is checked by
** (exec's s_factor relies on it).
*/
int ta_gemm_ok(const ta_node *n) {
  int split = ta_gemm_split(&n->prog);
  if (n->agg != TK_AGG_SUM || split < 0) return 0;
  unsigned side[2] = {s_prog_inputs(&n->prog, 0, split),
                      s_prog_inputs(&n->prog, split, n->prog.n - 1)};
  if (!side[0] || !side[1] || (side[0] & side[1])) return 0;
  int nl[2] = {0, 0};
  for (int l = 0; l < n->nlabels; l++) {
    int cnt[2] = {0, 0};
    for (int s = 0; s < 2; s++) {
      for (int i = 0; i < n->ninputs; i++) {
        int c = 0;
        for (int d = 0; d < n->in[i].rank; d++) c += n->in[i].label[d] == l;
        if (c > 1) return 0;                       /* diagonal */
        if ((side[s] >> i) & 1) cnt[s] |= c;
      }
      nl[s] += cnt[s];
    }
    if (l >= n->nout && (!cnt[0] || !cnt[1])) return 0; /* one-sided sum */
  }
  /* and a fused factor's tile is no larger than its largest operand's
  ** chunk: one operand holds all its labels, the others broadcast */
  for (int s = 0; s < 2; s++) {
    int whole = 0;
    for (int i = 0; i < n->ninputs && !whole; i++)
      whole = ((side[s] >> i) & 1) && n->in[i].rank == nl[s];
    if (!whole) return 0;
  }
  return 1;
}

/* Choose chunk sizes of the node's labels: the first operand holding a
** label decides; others are re-chunked to match at run time.  Then the
** element type and whether the BLAS path applies. */
static void s_finish_node(ta_plan *p, ta_node *n) {
  n->drive = -1; /* the optimizer decides */
  for (int l = 0; l < n->nlabels; l++) {
    n->chunk[l] = 0;
    for (int i = 0; i < n->ninputs && !n->chunk[l]; i++)
      for (int d = 0; d < n->in[i].rank; d++)
        if (n->in[i].label[d] == l) {
          n->chunk[l] = p->rels[n->in[i].rel].meta.chunk[d];
          break;
        }
    if (!n->chunk[l]) n->chunk[l] = n->size[l];
  }
  n->gemm = ta_gemm_ok(n);
}

/* A statement that reads an f64 tensor anywhere computes in f64, its
** temporaries included (a sum taken apart, a product's pairwise step);
** an index past 2^24 is f64 too, to hold it exactly. */
static tr_dtype s_node_dtype(const ta_plan *p, const ta_node *n) {
  for (int i = 0; i < p->nrels; i++)
    if (p->rels[i].kind == TA_REL_STORED && !p->rels[i].iota && p->rels[i].meta.dtype == TR_F64)
      return TR_F64;
  for (int i = 0; i < n->ninputs; i++)
    if (p->rels[n->in[i].rel].meta.dtype == TR_F64) return TR_F64;
  return TR_F32;
}

static int s_index_rel(s_binder *b, const s_nodeb *nb, int id, int *rel);

/* A node of numbers alone (lr[] = 0.01; or MAX(2)): its tasks are driven
** by their inputs' chunks, so it reads a one-element index over a label
** of its own, summed away, which its program never uses. */
static int s_drive_numbers(s_binder *b, s_nodeb *nb) {
  int rel, id = b->nlab;
  if (b->nlab >= S_MAX_LABELS)
    return tr_seterr(b->err, TR_EINVAL, "too many labels in one statement");
  b->nlab++;
  snprintf(b->lab[id], TP_NAME_MAX, "_");
  b->lsize[id] = 1;
  snprintf(b->lwhere[id], sizeof b->lwhere[id], "a number");
  int rc = s_index_rel(b, nb, id, &rel);
  if (rc) return rc;
  if (s_operand(b, nb, rel, 1, &id) < 0) return b->err->code;
  if (nb->n.agg == TK_AGG_NONE) nb->n.agg = TK_AGG_SUM;
  return TR_OK;
}

/* Append a finished node, creating its output relation (a temporary, or
** the statement's output when out_name is set). */
static int s_push_node(s_binder *b, s_nodeb *nb, const char *out_name) {
  ta_plan *p = b->plan;
  ta_node *n = &nb->n;
  if (p->nnodes >= TA_MAX_NODES)
    return tr_seterr(b->err, TR_EINVAL, "expression has too many aggregations");
  if (p->nrels >= TA_MAX_RELS)
    return tr_seterr(b->err, TR_EINVAL, "statement references too many tensors");
  int rc;
  if (n->ninputs == 0 && (rc = s_drive_numbers(b, nb))) return rc;
  s_finish_node(p, n);
  ta_rel *r = &p->rels[p->nrels];
  memset(r, 0, sizeof *r);
  r->kind = out_name ? TA_REL_OUTPUT : TA_REL_TEMP;
  if (out_name)
    snprintf(r->meta.name, TR_NAME_MAX, "%s", out_name);
  else
    snprintf(r->meta.name, TR_NAME_MAX, "_t%d", ++b->ntemps);
  r->meta.dtype = s_node_dtype(p, n);
  r->meta.rank = n->nout;
  for (int d = 0; d < n->nout; d++) {
    r->meta.shape[d] = n->size[d];
    r->meta.chunk[d] = n->chunk[d];
  }
  n->out = p->nrels++;
  p->nodes[p->nnodes++] = *n;
  return TR_OK;
}

/* ---- The terms of an aggregation's product --------------------------------- */

static int s_has_ref(const tp_expr *e) {
  return e && (e->kind == TP_EXPR_REF || e->kind == TP_EXPR_AGG || s_has_ref(e->a) ||
               s_has_ref(e->b) || s_has_ref(e->c));
}

/* The terms of an aggregation's argument: for SUM (and MEAN) the factors
** of its top chain of '*' and '/' under unary minus, each a divisor or
** not; for MAX and MIN the operands of its top chain of '+'.  Terms
** without a tensor are constants, applied to the aggregated value (the
** node's Transform; MAX and MIN only when split into steps):
** sum(c x) = c sum(x), max(x + c) = max(x) + c.  So the join stays a
** product of tensor factors, and A[i,k] * B[k,j] / 4,
** -(A[i,k] * B[k,j]) or a chain times 0.5 keep the gemm kernel instead of
** the general contraction (2000^3 in f32: 0.07 s against 1.9 s). */
typedef struct s_terms {
  int sum;                                  /* SUM or MEAN: factors; else addends */
  int n, nc;                                /* tensor terms, constant terms */
  const tp_expr *t[TL_MAX_OPERANDS];        /* the tensor terms */
  const tp_expr *c[TL_MAX_OPERANDS];        /* the constants */
  unsigned char inv[TL_MAX_OPERANDS];       /* t[j] is a divisor */
  unsigned char cinv[TL_MAX_OPERANDS];      /* c[j] is a divisor */
  int neg;                                  /* an odd number of unary minuses */
  int plain;                                /* a chain of '*' (or '+') alone */
  int pre[TL_MAX_OPERANDS];                 /* 1 + the temporary t[j] was summed
                                               into (s_presum_terms), 0: none */
  int pre_rank[TL_MAX_OPERANDS];            /* its rank */
  int pre_ids[TL_MAX_OPERANDS][TR_MAX_RANK];/* its labels */
} s_terms;

static int s_terms_add(s_terms *tm, const tp_expr *e, int inv) {
  if (e->kind == TP_EXPR_BIN && (tm->sum ? e->op == '*' || e->op == '/' : e->op == '+')) {
    tm->plain &= e->op != '/';
    return s_terms_add(tm, e->a, inv) && s_terms_add(tm, e->b, e->op == '/' ? !inv : inv);
  }
  if (tm->sum && e->kind == TP_EXPR_FN && e->op == TK_OP_NEG) {
    tm->neg ^= 1;
    tm->plain = 0;
    return s_terms_add(tm, e->a, inv);
  }
  int ref = s_has_ref(e);
  if ((ref ? tm->n : tm->nc) >= TL_MAX_OPERANDS) return 0;
  if (ref) {
    tm->inv[tm->n] = (unsigned char)inv;
    tm->t[tm->n++] = e;
  } else {
    tm->cinv[tm->nc] = (unsigned char)inv;
    tm->c[tm->nc++] = e;
    tm->plain = 0;
  }
  return 1;
}

/* The terms of aggregation e's argument; 0 if e is not a SUM, MEAN, MAX
** or MIN, or has more terms than fit. */
static int s_terms_of(const tp_expr *e, s_terms *tm) {
  memset(tm, 0, sizeof *tm);
  tm->sum = e->op == TK_AGG_SUM || e->op == TP_AGG_MEAN;
  tm->plain = 1;
  if (!tm->sum && e->op != TK_AGG_MAX && e->op != TK_AGG_MIN) return 0;
  return s_terms_add(tm, e->a, 0);
}

/* The labels of term j of tm as the product reads it. */
static s_mask s_term_labels(const s_binder *b, const s_terms *tm, int j) {
  s_mask m = 0;
  if (!tm->pre[j]) return s_labels(b, tm->t[j]);
  for (int d = 0; d < tm->pre_rank[j]; d++) m |= (s_mask)1 << tm->pre_ids[j][d];
  return m;
}

/* Term j of tm into nb's join program (a divisor as 1 / term; a term
** summed on its own first as the temporary holding it). */
static int s_emit_term(s_binder *b, s_nodeb *nb, const s_terms *tm, int j, int depth) {
  if (tm->pre[j]) {
    int o = s_operand(b, nb, tm->pre[j] - 1, tm->pre_rank[j], tm->pre_ids[j]);
    return o < 0 ? b->err->code : s_insn(b, &nb->n.prog, TK_OP_INPUT, o, 0);
  }
  int rc = tm->inv[j] ? s_insn(b, &nb->n.prog, TK_OP_CONST, 0, 1) : TR_OK;
  if (!rc) rc = s_emit(b, nb, tm->t[j], depth);
  return rc || !tm->inv[j] ? rc : s_insn(b, &nb->n.prog, TK_OP_DIV, 0, 0);
}

/* tm's constants and sign as nb's Transform of the aggregated value. */
static int s_emit_constants(s_binder *b, s_nodeb *nb, const s_terms *tm, int depth) {
  tk_prog *post = &nb->n.post;
  int rc = TR_OK;
  if (!tm->nc && !tm->neg) return TR_OK;
  post->n = 0;
  rc = s_insn(b, post, TK_OP_INPUT, 0, 0);
  for (int c = 0; c < tm->nc && !rc; c++) {
    rc = s_emit_to(b, nb, post, tm->c[c], depth);
    if (!rc) rc = s_insn(b, post, !tm->sum ? TK_OP_ADD : tm->cinv[c] ? TK_OP_DIV : TK_OP_MUL, 0, 0);
  }
  if (!rc && tm->neg) rc = s_insn(b, post, TK_OP_NEG, 0, 0);
  return rc;
}

/* A SUM's tensor factors as nb's join program, its constants and sign as
** the Transform. */
static int s_emit_product(s_binder *b, s_nodeb *nb, const s_terms *tm, int depth) {
  int rc = TR_OK;
  for (int j = 0; j < tm->n && !rc; j++) {
    rc = s_emit_term(b, nb, tm, j, depth);
    if (!rc && j) rc = s_insn(b, &nb->n.prog, TK_OP_MUL, 0, 0);
  }
  return rc ? rc : s_emit_constants(b, nb, tm, depth);
}

static int s_split_agg(s_binder *b, const tp_expr *e, const s_terms *tm, const char *out_name,
                       int *rel, int depth);

/* The terms of SUM e's product that alone hold some of its summed labels
** are summed over those first, each in a node of its own whose result,
** a temporary, the product then reads: SUM(A[i,k] * b[j]) is SUM over k
** of A, times b[j], an outer product, where the join would take I J K
** terms (2048^3 in f32: 0.77 s against 0.02 s). */
static int s_presum_terms(s_binder *b, const tp_expr *e, s_terms *tm, int depth) {
  s_mask summed = s_labels(b, e->a) & ~s_labels(b, e);
  int rc = TR_OK;
  for (int j = 0; j < tm->n && !rc; j++) {
    s_mask mine = s_labels(b, tm->t[j]), others = 0, own;
    for (int m = 0; m < tm->n; m++)
      if (m != j) others |= s_term_labels(b, tm, m);
    if (!(own = mine & summed & ~others) || __builtin_popcountll(mine & ~own) > TR_MAX_RANK)
      continue;
    s_nodeb *nb = calloc(1, sizeof *nb);
    int k = 0;
    if (!nb) return tr_seterr(b->err, TR_ENOMEM, "out of memory");
    for (int id = 0; id < b->nlab; id++) /* kept labels first: the output's */
      if ((mine & ~own) >> id & 1) {
        tm->pre_ids[j][k++] = id;
        if (s_node_label(b, nb, id) < 0) rc = b->err->code;
      }
    nb->n.nout = nb->n.nlabels;
    nb->n.agg = TK_AGG_SUM;
    if (!rc) rc = s_emit_term(b, nb, tm, j, depth);
    if (!rc) rc = s_push_node(b, nb, NULL);
    if (!rc) {
      tm->pre[j] = b->plan->nodes[b->plan->nnodes - 1].out + 1;
      tm->pre_rank[j] = k;
      tm->plain = 0;
    }
    free(nb);
  }
  return rc;
}

/* A node over the labels kept by aggregation e (in s_keep_ids order) as
** its output labels; *nkeep gets their number, ids their label ids. */
static int s_start_node(s_binder *b, s_nodeb *nb, const tp_expr *e, int *ids, int *nkeep) {
  int k = s_keep_ids(b, s_labels(b, e), ids);
  if (k > TR_MAX_RANK)
    return tr_at(b->err, e->pos,
                 tr_seterr(b->err, TR_ESHAPE, "an aggregation here keeps %d labels (at most %d)", k,
                           TR_MAX_RANK));
  for (int i = 0; i < k; i++)
    if (s_node_label(b, nb, ids[i]) < 0) return b->err->code;
  nb->n.nout = nb->n.nlabels;
  *nkeep = k;
  return TR_OK;
}

/* Build the node of aggregation e (kind AGG; MEAN builds its SUM); *rel
** receives the relation holding its result, whose labels are the ones e
** keeps (s_keep_ids order). */
static int s_build_agg(s_binder *b, const tp_expr *e, const char *out_name, int *rel,
                       int depth) {
  s_terms tm;
  int terms = s_terms_of(e, &tm);
  if (terms && tm.sum && tm.n >= 2) {
    int rc = s_presum_terms(b, e, &tm, depth + 1);
    if (rc) return rc;
  }
  /* only an aggregation that keeps left-hand labels alone: the last
  ** step's output labels are those, in left-hand order, as
  ** s_start_node's are */
  if (terms && (b->flags & TA_SPLIT) && tm.n >= 3 && !(s_labels(b, e) & ~b->lhs)) {
    int rc = s_split_agg(b, e, &tm, out_name, rel, depth);
    if (rc != TR_ENOTFOUND) return rc; /* split, or failed */
  }
  s_nodeb *nb = calloc(1, sizeof *nb);
  int ids[TK_MAX_LABELS], k, rc;
  if (!nb) return tr_seterr(b->err, TR_ENOMEM, "out of memory");
  rc = s_start_node(b, nb, e, ids, &k);
  nb->n.agg = e->op == TP_AGG_MEAN ? TK_AGG_SUM : (tk_agg)e->op;
  if (!rc && terms && tm.sum && tm.n && !tm.plain) rc = s_emit_product(b, nb, &tm, depth + 1);
  else if (!rc) rc = s_emit(b, nb, e->a, depth + 1);
  if (rc) goto done;
  if (nb->n.nlabels == nb->n.nout) nb->n.agg = TK_AGG_NONE; /* nothing to sum */
  rc = s_push_node(b, nb, out_name);
  if (!rc) *rel = b->plan->nodes[b->plan->nnodes - 1].out;
done:
  free(nb);
  return rc;
}

/* The number of values MEAN(e) sums: the product of the sizes of the
** labels it aggregates. */
static double s_mean_count(const s_binder *b, const tp_expr *e) {
  s_mask agg = s_labels(b, e->a) & ~s_labels(b, e);
  double n = 1;
  for (int id = 0; id < b->nlab; id++)
    if (agg >> id & 1) n *= (double)b->lsize[id];
  return n;
}

/* The index operand of label id for ARGMAX / ARGMIN: a relation made for
** the run holding 0 .. size-1 (ta_rel.iota), chunked like the label in
** the node nb it joins. */
static int s_index_rel(s_binder *b, const s_nodeb *nb, int id, int *rel) {
  ta_plan *p = b->plan;
  int64_t size = b->lsize[id], chunk = size;
  for (int i = 0; i < nb->n.ninputs && chunk == size; i++)
    for (int d = 0; d < nb->n.in[i].rank; d++)
      if (nb->id[nb->n.in[i].label[d]] == id) chunk = p->rels[nb->n.in[i].rel].meta.chunk[d];
  tr_dtype dt = size > (INT64_C(1) << 24) ? TR_F64 : TR_F32; /* exact in the type */
  char name[TR_NAME_MAX];
  snprintf(name, sizeof name, "_index%lldc%lld%s", (long long)size, (long long)chunk,
           dt == TR_F64 ? "d" : "");
  for (int i = 0; i < p->nrels; i++)
    if (p->rels[i].iota && !strcmp(p->rels[i].meta.name, name)) return *rel = i, TR_OK;
  if (p->nrels >= TA_MAX_RELS)
    return tr_seterr(b->err, TR_EINVAL, "statement references too many tensors");
  ta_rel *r = &p->rels[p->nrels];
  memset(r, 0, sizeof *r);
  r->kind = TA_REL_STORED;
  r->iota = 1;
  snprintf(r->meta.name, sizeof r->meta.name, "%s", name);
  r->meta.dtype = dt;
  r->meta.rank = 1;
  r->meta.shape[0] = size;
  r->meta.chunk[0] = chunk;
  *rel = p->nrels++;
  return TR_OK;
}

/* The values an arg-form compares: its argument when that is one
** reference, else the temporary holding them (rel, labelled ids). */
typedef struct s_values {
  const tp_expr *ref; /* the reference, or NULL */
  int rel;            /* else: the temporary */
  int rank;           /* its rank */
  int ids[TR_MAX_RANK]; /* its labels */
} s_values;

/* A node over e's kept labels and label `lab` of the values v, aggregated
** by agg; M (>= 0): the relation of their maximum (minimum), making the
** node MIN over lab of where(v == M, index, inf).  *rel gets its output. */
static int s_arg_node(s_binder *b, const tp_expr *e, const s_values *v, int lab, tk_agg agg,
                      int M, const char *out_name, int *rel, int depth) {
  s_nodeb *nb = calloc(1, sizeof *nb);
  int ids[TK_MAX_LABELS], k, rc, i, x = -1;
  if (!nb) return tr_seterr(b->err, TR_ENOMEM, "out of memory");
  rc = s_start_node(b, nb, e, ids, &k);
  if (!rc && s_node_label(b, nb, lab) < 0) rc = b->err->code;
  nb->n.agg = agg;
  if (!rc && v->ref) {
    rc = s_emit(b, nb, v->ref, depth + 1);
  } else if (!rc) {
    i = s_operand(b, nb, v->rel, v->rank, v->ids);
    rc = i < 0 ? b->err->code : s_insn(b, &nb->n.prog, TK_OP_INPUT, i, 0);
  }
  if (!rc && M >= 0) {
    tk_prog *p = &nb->n.prog, *post = &nb->n.post;
    if ((i = s_operand(b, nb, M, k, ids)) < 0 || s_index_rel(b, nb, lab, &x) ||
        (x = s_operand(b, nb, x, 1, &lab)) < 0) {
      rc = b->err->code;
      goto done;
    }
    s_insn(b, p, TK_OP_INPUT, i, 0);
    s_insn(b, p, TK_OP_EQ, 0, 0);
    s_insn(b, p, TK_OP_INPUT, x, 0);
    s_insn(b, p, TK_OP_CONST, 0, INFINITY);
    rc = s_insn(b, p, TK_OP_WHERE, 0, 0);
    /* no value equals the maximum only where every value is NaN */
    s_insn(b, post, TK_OP_INPUT, 0, 0);
    s_insn(b, post, TK_OP_CONST, 0, INFINITY);
    s_insn(b, post, TK_OP_EQ, 0, 0);
    s_insn(b, post, TK_OP_CONST, 0, NAN);
    s_insn(b, post, TK_OP_INPUT, 0, 0);
    s_insn(b, post, TK_OP_WHERE, 0, 0);
  }
  if (!rc) rc = s_push_node(b, nb, out_name);
  if (!rc) *rel = b->plan->nodes[b->plan->nnodes - 1].out;
done:
  free(nb);
  return rc;
}

/* ARGMAX(e) / ARGMIN(e) (see the top of this file): *rel gets the
** relation of its result, labelled as s_keep_ids orders what it keeps. */
static int s_build_arg(s_binder *b, const tp_expr *e, const char *out_name, int *rel, int depth) {
  const char *what = e->op == TP_AGG_ARGMAX ? "ARGMAX" : "ARGMIN";
  tk_agg agg = e->op == TP_AGG_ARGMAX ? TK_AGG_MAX : TK_AGG_MIN;
  s_mask keep = s_labels(b, e), over = s_labels(b, e->a) & ~keep;
  int lab = -1, n = 0, M, rc;
  s_values v = {e->a, -1, 0, {0}};
  char names[256] = "";
  for (int id = 0; id < b->nlab; id++)
    if (over >> id & 1) {
      size_t o = strlen(names);
      snprintf(names + o, sizeof names - o, "%s'%s'", n++ ? ", " : "", b->lab[id]);
      lab = id;
    }
  if (n != 1)
    return tr_at(b->err, e->pos,
                 tr_seterr(b->err, TR_ESHAPE,
                           n ? "%s aggregates exactly one label, but %s are not on the left: put all "
                               "but one on the left, or the %s inside an aggregation that takes the "
                               "others, e.g. MEAN(%s(...))"
                             : "%s aggregates exactly one label, but every label of its argument "
                               "is on the left",
                           what, names, what, what));
  /* The values, computed once, so that both nodes compare the same
  ** numbers (a function may round differently from one kernel path to
  ** another). */
  if (e->a->kind != TP_EXPR_REF) {
    s_nodeb *nb = calloc(1, sizeof *nb);
    if (!nb) return tr_seterr(b->err, TR_ENOMEM, "out of memory");
    rc = s_start_node(b, nb, e, v.ids, &v.rank);
    if (!rc && s_node_label(b, nb, lab) < 0) rc = b->err->code;
    nb->n.nout = nb->n.nlabels;
    nb->n.agg = TK_AGG_NONE;
    if (!rc) rc = s_emit(b, nb, e->a, depth + 1);
    if (!rc) rc = s_push_node(b, nb, NULL);
    free(nb);
    if (rc) return rc;
    v.ref = NULL;
    v.rel = b->plan->nodes[b->plan->nnodes - 1].out;
    v.ids[v.rank++] = lab;
  }
  if ((rc = s_arg_node(b, e, &v, lab, agg, -1, NULL, &M, depth))) return rc;
  return s_arg_node(b, e, &v, lab, TK_AGG_MIN, M, out_name, rel, depth);
}

/* Emit the scalar program of e into program p of node nb (the node's
** join program, or, for an expression without tensors, its Transform). */
static int s_emit_to(s_binder *b, s_nodeb *nb, tk_prog *p, const tp_expr *e, int depth) {
  int rc, ids[TK_MAX_LABELS];
  switch (e->kind) {
  case TP_EXPR_NUM:
    return s_insn(b, p, TK_OP_CONST, 0, e->num);
  case TP_EXPR_REF: {
    int rel;
    if ((rc = s_stored_rel(b, e->name, &rel))) return rc;
    for (int d = 0; d < e->nlabels; d++) ids[d] = s_label_id(b, e->labels[d]);
    int i = s_operand(b, nb, rel, e->nlabels, ids);
    return i < 0 ? b->err->code : s_insn(b, p, TK_OP_INPUT, i, 0);
  }
  case TP_EXPR_BIN: {
    static const struct { int ch, op; } ops[] = {
      {'+', TK_OP_ADD}, {'-', TK_OP_SUB}, {'*', TK_OP_MUL}, {'/', TK_OP_DIV}, {'^', TK_OP_POW},
      {'<', TK_OP_LT}, {TP_OP_LE, TK_OP_LE}, {'>', TK_OP_GT}, {TP_OP_GE, TK_OP_GE},
      {TP_OP_EQ, TK_OP_EQ}, {TP_OP_NE, TK_OP_NE}};
    if ((rc = s_emit_to(b, nb, p, e->a, depth)) || (rc = s_emit_to(b, nb, p, e->b, depth)))
      return rc;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
      if (ops[k].ch == e->op) return s_insn(b, p, ops[k].op, 0, 0);
    return tr_seterr(b->err, TR_ESYNTAX, "unknown operator '%c'", e->op);
  }
  case TP_EXPR_FN:
    if ((rc = s_emit_to(b, nb, p, e->a, depth))) return rc;
    if (e->b && (rc = s_emit_to(b, nb, p, e->b, depth))) return rc;
    if (e->c && (rc = s_emit_to(b, nb, p, e->c, depth))) return rc;
    return s_insn(b, p, e->op, 0, 0);
  case TP_EXPR_AGG: {
    int rel, k;
    if ((rc = s_is_arg(e) ? s_build_arg(b, e, NULL, &rel, depth) : s_build_agg(b, e, NULL, &rel, depth)))
      return rc;
    k = s_keep_ids(b, s_labels(b, e), ids);
    int i = s_operand(b, nb, rel, k, ids);
    if (i < 0 || (rc = s_insn(b, p, TK_OP_INPUT, i, 0))) return i < 0 ? b->err->code : rc;
    if (e->op != TP_AGG_MEAN) return TR_OK;
    if ((rc = s_insn(b, p, TK_OP_CONST, 0, s_mean_count(b, e)))) return rc;
    return s_insn(b, p, TK_OP_DIV, 0, 0);
  }
  }
  return tr_seterr(b->err, TR_EINVAL, "internal: bad expression node");
}

/* Whether e is a product of references, numbers and aggregations (with
** unary minus, and quotients: a divisor is a factor's reciprocal, as in
** A[i,k] * B[k,j] / 4), around which an implicit SUM is classic Einstein
** notation.  An expression of numbers alone is a number:
** Q[n,d] * K[m,d] / sqrt(64). */
static int s_is_product(const tp_expr *e) {
  if (!s_has_ref(e)) return 1;
  switch (e->kind) {
  case TP_EXPR_REF:
  case TP_EXPR_NUM:
  case TP_EXPR_AGG: return 1;
  case TP_EXPR_BIN: return (e->op == '*' || e->op == '/') && s_is_product(e->a) && s_is_product(e->b);
  case TP_EXPR_FN: return e->op == TK_OP_NEG && s_is_product(e->a);
  }
  return 0;
}

/* The first reference in e to label id (for where an error points). */
static const tp_expr *s_label_ref(const s_binder *b, const tp_expr *e, int id) {
  const tp_expr *r = NULL;
  if (!e) return NULL;
  if (e->kind == TP_EXPR_REF) {
    for (int d = 0; d < e->nlabels; d++)
      if (s_label_id(b, e->labels[d]) == id) return e;
    return NULL;
  }
  if (e->kind != TP_EXPR_AGG && !(r = s_label_ref(b, e->a, id)) && !(r = s_label_ref(b, e->b, id)))
    r = s_label_ref(b, e->c, id);
  return r;
}

/* Labels of rhs not on the left that no aggregation binds are summed
** implicitly only around a product; elsewhere the first is an error. */
static int s_implicit_sum(s_binder *b, const tp_expr *rhs) {
  s_mask free = s_labels(b, rhs) & ~b->lhs;
  if (!free || s_is_product(rhs)) return TR_OK;
  for (int id = 0; id < b->nlab; id++)
    if (free >> id & 1) {
      const tp_expr *r = s_label_ref(b, rhs, id);
      return tr_at(b->err, r ? r->pos : 0,
                   tr_seterr(b->err, TR_ESHAPE,
                             "label '%s' is not on the left and no aggregation takes it: an "
                             "implicit SUM is only taken around a product, so write one, e.g. "
                             "SUM(...) around the expression to sum over '%s'",
                             b->lab[id], b->lab[id]));
    }
  return TR_OK;
}

/* ---- Products of three or more operands: pairwise steps ---------------------- */

/* A factor as EXPLAIN shows it in an order. */
static void s_factor_text(const s_binder *b, const tp_expr *e, char *buf, size_t n) {
  if (e->kind == TP_EXPR_REF) ta_ref_text(e, buf, n);
  else if (e->kind == TP_EXPR_FN && e->a && e->a->kind == TP_EXPR_REF) {
    char r[TP_NAME_MAX * 2];
    ta_ref_text(e->a, r, sizeof r);
    snprintf(buf, n, "%s(%s)", tk_opcode_name(e->op), r);
  } else {
    size_t o = (size_t)snprintf(buf, n, "(expr over ");
    s_mask m = s_labels(b, e);
    for (int l = 0, first = 1; l < b->nlab && o < n; l++)
      if (m >> l & 1) o += (size_t)snprintf(buf + o, n - o, "%s%s", first ? "" : ",", b->lab[l]), first = 0;
    if (o < n) snprintf(buf + o, n - o, ")");
  }
}

/*
** SUM(f1 * f2 * .. * fn) (or MEAN) with n >= 3 factors that reference
** tensors, or MAX/MIN(f1 + .. + fn): the join function distributes over
** the aggregation, so the product is contracted two factors at a time,
** each step summing out the labels no later factor and not the output
** needs, in the order layout/'s tl_order_find gives (exact DP over factor
** subsets, greedy beyond).  Each step is a node; the results of all but
** the last are temporaries.  A divisor is the factor 1 / f; the constants
** and the sign (s_terms) are the last step's Transform.  TR_ENOTFOUND
** when a factor is too wide to be a tensor: the caller builds one node.
*/
static int s_split_agg(s_binder *b, const tp_expr *e, const s_terms *tm, const char *out_name,
                       int *rel, int depth) {
  int nfac = tm->n, rc = TR_OK, insn = tm->sum ? TK_OP_MUL : TK_OP_ADD;
  tk_agg agg = tm->sum ? TK_AGG_SUM : (tk_agg)e->op;
  /* The EinSum of the factors over the statement's labels. */
  tl_einsum *es = calloc(1, sizeof *es);
  tl_order *ord = calloc(1, sizeof *ord);
  ta_split *sp = &b->plan->splits[b->plan->nsplits];
  int lid[S_MAX_LABELS], sid[TL_MAX_LABELS], ne = 0;
  if (!es || !ord) {
    rc = tr_seterr(b->err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int l = 0; l < S_MAX_LABELS; l++) lid[l] = -1;
  s_mask inner = s_labels(b, e->a);
  for (int l = 0; l < b->nlab; l++)
    if (inner >> l & 1) {
      lid[l] = ne;
      sid[ne] = l;
      es->size[ne++] = b->lsize[l];
    }
  es->nlabels = ne;
  es->nin = nfac;
  for (int j = 0; j < nfac; j++) {
    s_mask m = s_term_labels(b, tm, j);
    if (__builtin_popcountll(m) > TR_MAX_RANK) {
      rc = TR_ENOTFOUND; /* a factor too wide to be a tensor: one node */
      goto done;
    }
    for (int l = 0; l < b->nlab; l++)
      if (m >> l & 1) es->in[j][es->rank[j]++] = lid[l];
  }
  for (int k = 0; k < b->nlhs; k++)
    if (inner >> b->lhs_id[k] & 1) es->out[es->nout++] = lid[b->lhs_id[k]];
  tl_order_opts oo = {TK_MAX_LABELS, TR_MAX_RANK, 0};
  tr_err oerr;
  if (tl_order_find(es, &oo, ord, &oerr)) {
    rc = tr_seterr(b->err, oerr.code == TR_ESHAPE ? TR_ESHAPE : TR_EINVAL,
                   "cannot split the product of %d factors into steps of at most %d labels: %s",
                   nfac, TK_MAX_LABELS, oerr.msg);
    goto done;
  }
  /* Emit the steps: tensor t < nfac is factor t, nfac + k step k's result. */
  int trel[2 * TL_MAX_OPERANDS], tn[2 * TL_MAX_OPERANDS], tid[2 * TL_MAX_OPERANDS][TR_MAX_RANK];
  char (*txt)[256] = calloc(2 * TL_MAX_OPERANDS, sizeof *txt);
  if (!txt) {
    rc = tr_seterr(b->err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int j = 0; j < nfac; j++) {
    size_t o = tm->pre[j] ? (size_t)snprintf(txt[j], sizeof txt[j], "SUM ")
               : tm->inv[j] ? (size_t)snprintf(txt[j], sizeof txt[j], "1/") : 0;
    s_factor_text(b, tm->t[j], txt[j] + o, sizeof txt[j] - o);
  }
  sp->first = b->plan->nnodes;
  for (int k = 0; k < ord->nsteps && !rc; k++) {
    const tl_step *st = &ord->step[k];
    int last = k == ord->nsteps - 1, t[2] = {st->a, st->b};
    s_nodeb *nb = calloc(1, sizeof *nb);
    if (!nb) {
      rc = tr_seterr(b->err, TR_ENOMEM, "out of memory");
      break;
    }
    /* kept labels lead: the output's in left-hand order, else by label */
    tn[nfac + k] = 0;
    for (int x = 0; x < (last ? es->nout : ne); x++) {
      int l = last ? es->out[x] : x;
      if (!(st->keep >> l & 1)) continue;
      tid[nfac + k][tn[nfac + k]++] = sid[l];
      if (s_node_label(b, nb, sid[l]) < 0) rc = b->err->code;
    }
    nb->n.nout = nb->n.nlabels;
    nb->n.agg = (st->join & ~st->keep) ? agg : TK_AGG_NONE;
    for (int i = 0; i < 2 && !rc; i++) {
      if (t[i] < nfac) {
        rc = s_emit_term(b, nb, tm, t[i], depth + 1);
      } else {
        int o = s_operand(b, nb, trel[t[i]], tn[t[i]], tid[t[i]]);
        rc = o < 0 ? b->err->code : s_insn(b, &nb->n.prog, TK_OP_INPUT, o, 0);
      }
    }
    if (!rc) rc = s_insn(b, &nb->n.prog, insn, 0, 0);
    if (!rc && last) rc = s_emit_constants(b, nb, tm, depth + 1);
    if (!rc) rc = s_push_node(b, nb, last ? out_name : NULL);
    if (!rc) trel[nfac + k] = b->plan->nodes[b->plan->nnodes - 1].out;
    char both[sizeof txt[0]];
    snprintf(both, sizeof both, "(%.120s %.120s)", txt[t[0]], txt[t[1]]);
    memcpy(txt[nfac + k], both, sizeof both);
    free(nb);
  }
  if (!rc) {
    *rel = trel[nfac + ord->nsteps - 1];
    sp->last = b->plan->nnodes - 1;
    sp->exact = ord->exact;
    sp->flops = ord->flops;
    snprintf(sp->order, sizeof sp->order, "%s", txt[nfac + ord->nsteps - 1]);
    b->plan->nsplits++;
  }
  free(txt);
done:
  free(es);
  free(ord);
  return rc;
}

/* A top node that only transforms the previous node's whole result: move
** its program into that node as a fused Transform, after the one it has
** (SUM(A[i,k] * B[k,j] / 2) scales its sums; relu(...) then applies to
** them). */
static void s_fuse_transform(ta_plan *p) {
  if (p->nnodes < 2) return;
  ta_node *top = &p->nodes[p->nnodes - 1], *prev = &p->nodes[p->nnodes - 2];
  if (top->ninputs != 1 || top->agg != TK_AGG_NONE) return;
  const ta_operand *o = &top->in[0];
  if (o->rel != prev->out || o->rank != top->nlabels) return;
  for (int d = 0; d < o->rank; d++)
    if (o->label[d] != d || top->chunk[d] != prev->chunk[d]) return;
  tk_prog post = {0}; /* top's program, its input the value prev's Transform makes */
  for (int pc = 0; pc < top->prog.n; pc++) {
    int input = top->prog.code[pc].op == TK_OP_INPUT && prev->post.n;
    int len = input ? prev->post.n : 1;
    if (post.n + len > TK_MAX_PROG) return; /* too long for one program: two nodes */
    memcpy(&post.code[post.n], input ? prev->post.code : &top->prog.code[pc],
           (size_t)len * sizeof post.code[0]);
    post.n += len;
  }
  int pure_input = top->prog.n == 1; /* B[i] = SUM(..): nothing to fuse */
  if (!pure_input) prev->post = post;
  p->rels[prev->out].kind = TA_REL_OUTPUT;
  memcpy(p->rels[prev->out].meta.name, p->rels[top->out].meta.name, TR_NAME_MAX);
  p->nnodes--;
  p->nrels--; /* the top's output relation was the last one added */
}

static int s_compile(tc_db *db, const tr_tensor *pend, int npend, const tp_stmt *s, unsigned flags,
                     ta_plan *plan, tr_err *err) {
  s_binder *b = calloc(1, sizeof *b);
  int rc;
  if (!b) return tr_seterr(err, TR_ENOMEM, "out of memory");
  memset(plan, 0, sizeof *plan);
  b->db = db;
  b->pend = pend;
  b->npend = npend;
  b->plan = plan;
  b->err = err;
  b->flags = flags;
  if ((rc = s_bind(b, s->rhs)) || (rc = s_find_nested(b, s->rhs, 0))) goto done;
  for (int k = 0; k < s->nout; k++) {
    int id = s_label_id(b, s->out_labels[k]);
    if (id < 0) {
      rc = tr_at(err, s->name_pos,
                 tr_seterr(err, TR_ESHAPE, "output label '%s' is not bound by any input",
                           s->out_labels[k]));
      goto done;
    }
    b->lhs |= (s_mask)1 << id;
    b->lhs_id[b->nlhs++] = id;
  }
  /* Implicit SUM around the whole right-hand side, if it is a product. */
  tp_expr wrap;
  const tp_expr *top = s->rhs;
  if ((rc = s_implicit_sum(b, s->rhs))) goto done;
  if (s_labels(b, s->rhs) & ~b->lhs) {
    memset(&wrap, 0, sizeof wrap);
    wrap.kind = TP_EXPR_AGG;
    wrap.op = TK_AGG_SUM;
    wrap.a = (tp_expr *)s->rhs;
    top = &wrap;
  }
  if (s_is_arg(top)) {
    int rel;
    if ((rc = s_build_arg(b, top, s->name, &rel, 0))) goto done;
  } else if (top->kind == TP_EXPR_AGG && top->op != TP_AGG_MEAN) {
    int rel;
    if ((rc = s_build_agg(b, top, s->name, &rel, 0))) goto done;
    /* Its output labels are the left-hand ones occurring in it, in order;
    ** all of them occur (checked above), so the shape is the left side. */
  } else {
    s_nodeb *nb = calloc(1, sizeof *nb);
    if (!nb) {
      rc = tr_seterr(err, TR_ENOMEM, "out of memory");
      goto done;
    }
    for (int k = 0; k < b->nlhs; k++) s_node_label(b, nb, b->lhs_id[k]);
    nb->n.nout = nb->n.nlabels;
    nb->n.agg = TK_AGG_NONE;
    rc = s_emit(b, nb, top, 0);
    if (!rc) rc = s_push_node(b, nb, s->name);
    free(nb);
    if (rc) goto done;
    s_fuse_transform(plan);
  }
done:
  free(b);
  return rc;
}

int ta_compile(tc_db *db, const tr_tensor *pend, const tp_stmt *const *defs, int npend,
               const tp_stmt *s, unsigned flags, ta_plan *plan, tr_err *err) {
  int rc = s_compile(db, pend, npend, s, flags, plan, err);
  tp_stmt *r = NULL;
  char text[sizeof plan->splits[0].inlined];
  if (rc || !(flags & TA_SPLIT) || !defs || !ta_inline(db, pend, defs, npend, s, &r, text, sizeof text))
    return rc;
  ta_plan *p = malloc(sizeof *p);
  tr_err e2;
  /* it compiled as written, so through the definitions it does too; if
  ** not, it runs as written */
  if (p && s_compile(db, pend, npend, r, flags, p, &e2) == TR_OK) {
    for (int k = 0; k < p->nsplits; k++)
      if (p->splits[k].last == p->nnodes - 1) snprintf(p->splits[k].inlined, sizeof text, "%s", text);
    *plan = *p;
  }
  free(p);
  ta_inline_free(&r);
  return TR_OK;
}

int ta_plan_append(ta_plan *dst, const ta_plan *src, tr_err *err) {
  int map[TA_MAX_RELS];
  if (dst->nnodes + src->nnodes > TA_MAX_NODES)
    return tr_seterr(err, TR_EINVAL, "block too large: at most %d aggregations in all", TA_MAX_NODES);
  for (int i = 0; i < src->nrels; i++) {
    const ta_rel *r = &src->rels[i];
    map[i] = -1;
    for (int j = dst->nrels - 1; j >= 0 && map[i] < 0 && r->kind == TA_REL_STORED; j--) {
      const ta_rel *d = &dst->rels[j];
      if (strcmp(d->meta.name, r->meta.name)) continue;
      if (r->pending ? d->kind == TA_REL_OUTPUT : d->kind == TA_REL_STORED && !d->pending) map[i] = j;
    }
    if (map[i] >= 0) continue;
    if (r->pending) return tr_seterr(err, TR_EINVAL, "block reads %s before writing it", r->meta.name);
    if (dst->nrels >= TA_MAX_RELS)
      return tr_seterr(err, TR_EINVAL, "block references too many tensors (at most %d)", TA_MAX_RELS);
    dst->rels[dst->nrels] = *r;
    map[i] = dst->nrels++;
  }
  for (int k = 0; k < src->nsplits; k++) {
    ta_split sp = src->splits[k];
    sp.first += dst->nnodes;
    sp.last += dst->nnodes;
    dst->splits[dst->nsplits++] = sp;
  }
  for (int k = 0; k < src->nnodes; k++) {
    ta_node n = src->nodes[k];
    for (int i = 0; i < n.ninputs; i++) n.in[i].rel = map[n.in[i].rel];
    n.out = map[n.out];
    dst->nodes[dst->nnodes++] = n;
  }
  return TR_OK;
}

/* ---- EXPLAIN ----------------------------------------------------------- */

static void s_put_dims(tr_text *b, int rank, const int64_t *v) {
  if (rank == 0) tr_text_put(b, "scalar");
  for (int d = 0; d < rank; d++) tr_text_put(b, "%s%lld", d ? " x " : "", (long long)v[d]);
}

/* Render a postfix program as infix text; operand i is named in[i]. */
static void s_prog_text(tr_text *b, const tk_prog *p, int pc_end, char names[][TP_NAME_MAX * 2]) {
  /* Evaluate the program on a stack of strings instead of numbers. */
  int sp = 0;
  char *txt[TK_MAX_PROG] = {0};
  for (int pc = 0; pc < pc_end; pc++) {
    const tk_insn *in = &p->code[pc];
    char tmp[1024];
    if (in->op == TK_OP_INPUT)
      snprintf(tmp, sizeof tmp, "%s", names[in->arg]);
    else if (in->op == TK_OP_CONST)
      snprintf(tmp, sizeof tmp, "%g", in->c);
    else if (tk_opcode_pops(in->op) == 3 && sp >= 3) {
      snprintf(tmp, sizeof tmp, "%s(%s, %s, %s)", tk_opcode_name(in->op), txt[sp - 3], txt[sp - 2],
               txt[sp - 1]);
      for (int k = 0; k < 3; k++) free(txt[--sp]);
    } else if (tk_opcode_pops(in->op) == 2 && sp >= 2) {
      snprintf(tmp, sizeof tmp, "(%s %s %s)", txt[sp - 2], tk_opcode_name(in->op), txt[sp - 1]);
      free(txt[--sp]);
      free(txt[--sp]);
    } else if (sp >= 1) {
      snprintf(tmp, sizeof tmp, "%s(%s)", tk_opcode_name(in->op), txt[sp - 1]);
      free(txt[--sp]);
    } else {
      snprintf(tmp, sizeof tmp, "?");
    }
    txt[sp++] = strdup(tmp);
  }
  tr_text_put(b, "%s", sp ? txt[sp - 1] : "");
  for (int i = 0; i < sp; i++) free(txt[i]);
}

static void s_label_list(tr_text *b, const ta_node *n, int from, int to) {
  tr_text_put(b, "<");
  for (int l = from; l < to; l++) tr_text_put(b, "%s%s", l > from ? "," : "", n->lname[l]);
  tr_text_put(b, ">");
}

/* Each operand of node n as the statement wrote it, e.g. "X[n,d]". */
static void s_operand_names(const ta_plan *p, const ta_node *n, char names[][TP_NAME_MAX * 2]) {
  for (int i = 0; i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    size_t sz = TP_NAME_MAX * 2;
    int w = snprintf(names[i], sz, "%s[", p->rels[o->rel].meta.name);
    for (int d = 0; d < o->rank && w < (int)sz; d++)
      w += snprintf(names[i] + w, sz - (size_t)w, "%s%s", d ? "," : "", n->lname[o->label[d]]);
    if (w < (int)sz) snprintf(names[i] + w, sz - (size_t)w, "]");
  }
}

char *ta_node_fused(const ta_plan *p, int k) {
  const ta_node *n = &p->nodes[k];
  int split = n->gemm ? ta_gemm_split(&n->prog) : -1;
  if (split < 0) return NULL;
  char names[TK_MAX_INPUTS][TP_NAME_MAX * 2];
  s_operand_names(p, n, names);
  tr_text b = {0};
  int nf = 0;
  for (int f = 0; f < 2; f++) {
    int from = f ? split : 0, to = f ? n->prog.n - 1 : split;
    if (to - from == 1) continue; /* one operand: nothing fused */
    tk_prog side = {.n = to - from};
    memcpy(side.code, n->prog.code + from, sizeof side.code[0] * (size_t)side.n);
    tr_text_put(&b, "%s", nf++ ? " and " : "");
    s_prog_text(&b, &side, side.n, names);
  }
  return nf ? tr_text_done(&b) : NULL; /* nothing was put: nothing to free */
}

char *ta_plan_explain(const ta_plan *p) {
  tr_text b = {0};
  static const char *const aggname[] = {"NONE", "SUM", "MAX", "MIN"};
  for (int k = 0; k < p->nnodes; k++) {
    const ta_node *n = &p->nodes[k];
    const ta_rel *out = &p->rels[n->out];
    char names[TK_MAX_INPUTS][TP_NAME_MAX * 2];
    for (int i = 0; i < p->nsplits; i++)
      if (p->splits[i].first == k)
        tr_text_put(&b, "product split into %d pairwise steps, in the order of least flops (%s, "
                        "%.4g flops): %s\n",
                    p->splits[i].last - p->splits[i].first + 1,
                    p->splits[i].exact ? "exact DP over factor subsets" : "greedy",
                    p->splits[i].flops, p->splits[i].order);
    for (int i = 0; i < p->nsplits; i++)
      if (p->splits[i].first == k && p->splits[i].inlined[0])
        tr_text_put(&b, "  reading the block's outputs through the products that made them: %s\n",
                    p->splits[i].inlined);
    s_operand_names(p, n, names);
    int64_t groups = 1, tuples = 1;
    for (int l = 0; l < n->nlabels; l++) {
      int64_t g = (n->size[l] + n->chunk[l] - 1) / n->chunk[l];
      tuples *= g;
      if (l < n->nout) groups *= g;
    }
    tr_text_put(&b, "%s%s ", out->kind == TA_REL_OUTPUT ? "" : "temporary ", out->meta.name);
    s_label_list(&b, n, 0, n->nout);
    tr_text_put(&b, ": ");
    s_put_dims(&b, out->meta.rank, out->meta.shape);
    tr_text_put(&b, " %s, chunk ", tr_dtype_name(out->meta.dtype));
    s_put_dims(&b, out->meta.rank, out->meta.chunk);
    tr_text_put(&b, "\n");
    int ind = 2;
    if (n->post.n) {
      char pn[1][TP_NAME_MAX * 2];
      snprintf(pn[0], sizeof pn[0], "x");
      tr_text_put(&b, "%*sTRANSFORM(x -> ", ind, "");
      s_prog_text(&b, &n->post, n->post.n, pn);
      tr_text_put(&b, ")  [fused into the aggregation's task]\n");
      ind += 2;
    }
    if (n->agg != TK_AGG_NONE) {
      tr_text_put(&b, "%*sAGGREGATE(group by ", ind, "");
      s_label_list(&b, n, 0, n->nout);
      tr_text_put(&b, ", %s)  [%lld groups]\n", aggname[n->agg], (long long)groups);
      ind += 2;
    }
    tr_text_put(&b, "%*sJOIN(on ", ind, "");
    s_label_list(&b, n, 0, n->nlabels);
    static const int64_t origin[TK_MAX_LABELS] = {0};
    tr_text_put(&b, ", kernel %s: ",
                !n->gemm                          ? "contract"
                : ta_gemm_share(n, origin) < 1 ? "gemm, syrk on the diagonal blocks"
                                                  : "gemm");
    s_prog_text(&b, &n->prog, n->prog.n, names);
    if (n->agg != TK_AGG_NONE) {
      tr_text_put(&b, " %s over ", aggname[n->agg]);
      s_label_list(&b, n, n->nout, n->nlabels);
    }
    tr_text_put(&b, ")  [%lld tuples]\n", (long long)tuples);
    ind += 2;
    char *fused = ta_node_fused(p, k);
    if (fused)
      tr_text_put(&b, "%*sFUSED(%s: elementwise, computed tile by tile in the product's task, "
                      "never stored)\n", ind, "", fused);
    free(fused);
    for (int i = 0; i < n->ninputs; i++) {
      const ta_operand *o = &n->in[i];
      const tr_tensor *t = &p->rels[o->rel].meta;
      int diag = 0, rechunk = 0;
      for (int d = 0; d < o->rank; d++) {
        for (int d2 = d + 1; d2 < o->rank; d2++) diag |= o->label[d] == o->label[d2];
        rechunk |= t->chunk[d] != n->chunk[o->label[d]];
      }
      tr_text_put(&b, "%*sREKEY(-> %s)", ind, "", names[i]);
      if (diag) tr_text_put(&b, " FILTER(diagonal keys)");
      if (rechunk) {
        tr_text_put(&b, " CONCAT/TILE(chunk ");
        s_put_dims(&b, t->rank, t->chunk);
        tr_text_put(&b, " -> ");
        for (int d = 0; d < o->rank; d++)
          tr_text_put(&b, "%s%lld", d ? " x " : "", (long long)n->chunk[o->label[d]]);
        tr_text_put(&b, ")");
      }
      tr_text_put(&b, " SCAN %s%s (", p->rels[o->rel].kind == TA_REL_STORED ? "" : "temporary ",
            t->name);
      s_put_dims(&b, t->rank, t->shape);
      tr_text_put(&b, " %s, chunk ", tr_dtype_name(t->dtype));
      s_put_dims(&b, t->rank, t->chunk);
      tr_text_put(&b, ")\n");
    }
  }
  return tr_text_done(&b);
}
