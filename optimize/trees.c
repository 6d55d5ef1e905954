/*
** optimize/trees.c - implementation-algebra plan trees: making and
** editing them, what an operator's relation holds and how it is
** partitioned, their canonical text, and the TRA paper's Table 1 plan of a
** node.
*/
#include "config.h"
#include "optimize/optimize_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int oi_pop(uint64_t x) { return __builtin_popcountll(x); }

static int s_new(oi_tree *t, oi_kind k) {
  if (t->n >= S_MAX_OPS) return -1;
  oi_op *o = &t->op[t->n];
  memset(o, 0, sizeof *o);
  o->kind = (int8_t)k;
  o->operand = -1;
  return t->n++;
}

/* Wrap op `at` (in place) in a unary op of kind k: the op moves to a new
** slot and `at` becomes the wrapper, so parents need no update. */
int oi_wrap(oi_tree *t, int at, oi_kind k, unsigned lab) {
  tr_assert(at >= 0 && at < t->n);
  int c = s_new(t, IA_SCAN);
  if (c < 0) return -1;
  t->op[c] = t->op[at];
  memset(&t->op[at], 0, sizeof t->op[at]);
  t->op[at].kind = (int8_t)k;
  t->op[at].operand = -1;
  t->op[at].nk = 1;
  t->op[at].kid[0] = (int8_t)c;
  t->op[at].lab = lab;
  return at;
}

/* Replace op `at` by its only child. */
void oi_lift(oi_tree *t, int at) {
  tr_assert(at >= 0 && at < t->n && t->op[at].nk == 1);
  tr_assert(t->op[at].kid[0] >= 0 && t->op[at].kid[0] < t->n);
  t->op[at] = t->op[t->op[at].kid[0]];
}

/* Swap the unary op `at` with its unary child (their kids stay put). */
void oi_swap(oi_tree *t, int at) {
  tr_assert(at >= 0 && at < t->n && t->op[at].nk == 1);
  int c = t->op[at].kid[0];
  tr_assert(c > 0 && c < t->n && c != at && t->op[c].nk <= 1);
  oi_op a = t->op[at], b = t->op[c];
  t->op[at] = b;
  t->op[c] = a;
  t->op[at].kid[0] = (int8_t)c;
  t->op[at].nk = 1;
  t->op[c].kid[0] = b.kid[0];
  t->op[c].nk = b.nk;
}

static int s_copy(const oi_tree *src, int at, oi_tree *dst) {
  /* a tree, not a graph: each op is reached once, so the copy never holds
  ** more ops than the source */
  tr_assert(at >= 0 && at < src->n && dst->n < src->n);
  int me = dst->n++;
  dst->op[me] = src->op[at];
  for (int i = 0; i < src->op[at].nk; i++) dst->op[me].kid[i] = (int8_t)s_copy(src, src->op[at].kid[i], dst);
  return me;
}

/* Rebuild from the root (op 0), dropping unreachable ops. */
void oi_normalize(oi_tree *t) {
  oi_tree c;
  c.n = 0;
  s_copy(t, 0, &c);
  tr_assert(c.op[0].kind == t->op[0].kind);
  *t = c;
}

unsigned oi_labels_of(const oi_ctx *x, const oi_tree *t, int at) {
  const oi_op *o = &t->op[at];
  if (o->kind == IA_SCAN) return x->lab[o->operand];
  unsigned m = 0;
  for (int i = 0; i < o->nk; i++) m |= oi_labels_of(x, t, o->kid[i]);
  if (o->kind == IA_AGG || o->kind == IA_PAGG) m &= o->lab;
  return m;
}

unsigned oi_operands_of(const oi_tree *t, int at) {
  const oi_op *o = &t->op[at];
  if (o->kind == IA_SCAN) return 1u << o->operand;
  unsigned m = 0;
  for (int i = 0; i < o->nk; i++) m |= oi_operands_of(t, o->kid[i]);
  return m;
}

/* Partitioning of the relation op `at` makes: 'A' every site, 'H' hashed
** on *lab, 'S' stored (as the catalog placed it; checked when costed),
** 'N' none known (replicated or partial). */
int oi_part(const oi_tree *t, int at, unsigned *lab) {
  const oi_op *o = &t->op[at];
  switch (o->kind) {
  case IA_SCAN: return 'S';
  case IA_BCAST: return 'A';
  case IA_SHUF: *lab = o->lab; return 'H';
  case IA_DUP: case IA_RECHUNK: return 'N';
  case IA_JOIN: {
    int kind = 'A';
    unsigned l = 0;
    for (int i = 0; i < o->nk; i++) {
      unsigned li = 0;
      int ki = oi_part(t, o->kid[i], &li);
      if (ki == 'A') continue;
      if (kind == 'A') {
        kind = ki;
        l = li;
      } else if (ki != kind || li != l) {
        return 'N';
      }
    }
    *lab = l;
    return kind;
  }
  default: return o->nk ? oi_part(t, o->kid[0], lab) : 'N';
  }
}

void oi_label_text(const oi_ctx *x, unsigned lab, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = '\0';
  for (int l = 0; l < x->n->nlabels && o < n; l++)
    if (lab & (1u << l)) o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? "," : "", x->n->lname[l]);
}

const char *oi_opname(const oi_ctx *x, int operand) {
  return x->p->rels[x->n->in[operand].rel].meta.name;
}

/* Canonical text of the tree below `at` (also what EXPLAIN shows). */
size_t oi_text(const oi_ctx *x, const oi_tree *t, int at, char *buf, size_t n) {
  const oi_op *o = &t->op[at];
  char l[160];
  size_t w = 0;
#define W(...) w += (size_t)snprintf(buf + w, w < n ? n - w : 0, __VA_ARGS__)
  switch (o->kind) {
  case IA_SCAN: W("%s", oi_opname(x, o->operand)); return w;
  case IA_FILTER: W("filter("); break;
  case IA_RECHUNK: W("rechunk("); break;
  case IA_MAP: W("map%d(", o->npost); break;
  case IA_BCAST: W("bcast("); break;
  case IA_SHUF: oi_label_text(x, o->lab, l, sizeof l); W("shuf[%s](", l); break;
  case IA_DUP: oi_label_text(x, o->lab, l, sizeof l); W("dup[%s](", l); break;
  case IA_JOIN: W("join%s(", o->npost ? "+map" : ""); break;
  case IA_PAGG: W("pagg("); break;
  case IA_AGG: W("agg%s%s(", o->npost ? "+map" : "", o->fl ? "+filter" : ""); break;
  }
  for (int i = 0; i < o->nk; i++) {
    if (i) W(", ");
    w += oi_text(x, t, o->kid[i], w < n ? buf + w : NULL, w < n ? n - w : 0);
  }
  W(")");
#undef W
  return w;
}

/* A hash of oi_text's text of the tree below `at`, from what that text
** shows and without writing it: trees of equal text hash equal.  The
** rewrite search dedupes the trees it reaches by it; formatting every
** tree's text there took a quarter of the shell's time on a 10 ms
** statement. */
uint64_t oi_hash(const oi_ctx *x, const oi_tree *t, int at) {
  const oi_op *o = &t->op[at];
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
  MIX(o->kind);
  switch (o->kind) {
  case IA_SCAN: MIX(x->n->in[o->operand].rel); return h; /* the text: its name */
  case IA_MAP: MIX(o->npost); break;
  case IA_SHUF: case IA_DUP: MIX(o->lab); break;
  case IA_JOIN: MIX(o->npost != 0); break;
  case IA_AGG: MIX(o->npost != 0); MIX(o->fl != 0); break;
  default: break;
  }
  MIX(o->nk);
  for (int i = 0; i < o->nk; i++) MIX(oi_hash(x, t, o->kid[i]));
#undef MIX
  return h;
}

/* A fresh child of unary op `at` (the initial plan has a handful of ops,
** far below S_MAX_OPS). */
static int s_child(oi_tree *t, int at) {
  int c = s_new(t, IA_SCAN);
  if (c < 0) c = 0;
  t->op[at].nk = 1;
  t->op[at].kid[0] = (int8_t)c;
  return c;
}

/* Table 1: the initial IA plan of the node. */
void oi_initial(const oi_ctx *x, oi_tree *t) {
  const ta_node *n = x->n;
  int npost = 0;
  for (int i = 0; i < n->post.n; i++) npost += tk_opcode_pops(n->post.code[i].op) == 1;
  t->n = 0;
  int top = s_new(t, IA_SCAN), at = top;
  /* map(agg(shuf(filter(join(...))))) from the top down */
  if (npost) {
    t->op[at].kind = IA_MAP;
    t->op[at].npost = (int8_t)npost;
    at = s_child(t, at);
  }
  if (x->K) {
    t->op[at].kind = IA_AGG;
    t->op[at].lab = x->G;
    at = s_child(t, at);
    t->op[at].kind = IA_SHUF;
    t->op[at].lab = x->G;
    at = s_child(t, at);
  }
  if (x->diag) {
    t->op[at].kind = IA_FILTER;
    t->op[at].lab = x->diag;
    at = s_child(t, at);
  }
  if (x->nin > 1) {
    t->op[at].kind = IA_JOIN;
    t->op[at].nk = (int8_t)x->nin;
    int kids[TK_MAX_INPUTS];
    for (int i = 0; i < x->nin; i++) kids[i] = s_new(t, IA_SCAN);
    for (int i = 0; i < x->nin; i++) {
      int c = kids[i];
      t->op[at].kid[i] = (int8_t)c;
      t->op[c].operand = (int8_t)i;
      if (x->rechunk & (1u << i)) oi_wrap(t, c, IA_RECHUNK, 0);
      if (i < x->nin - 1) oi_wrap(t, c, IA_BCAST, 0);
    }
  } else {
    t->op[at].operand = 0;
    if (x->rechunk & 1u) oi_wrap(t, at, IA_RECHUNK, 0);
  }
}

/* Is the op a move (BCAST or SHUF)? */
int oi_move(const oi_op *o) { return o->kind == IA_BCAST || o->kind == IA_SHUF; }

void oi_ctx_init(oi_ctx *x, const ta_plan *p, int k) {
  memset(x, 0, sizeof *x);
  x->p = p;
  x->n = &p->nodes[k];
  x->nin = x->n->ninputs;
  for (int l = 0; l < x->n->nlabels; l++) {
    if (l < x->n->nout) x->G |= 1u << l;
    else x->K |= 1u << l;
  }
  for (int i = 0; i < x->nin; i++) {
    const ta_operand *o = &x->n->in[i];
    const tr_tensor *it = &p->rels[o->rel].meta;
    for (int d = 0; d < o->rank; d++) {
      unsigned b = 1u << o->label[d];
      if (x->lab[i] & b) x->dlab[i] |= b;
      x->lab[i] |= b;
      if (it->chunk[d] != x->n->chunk[o->label[d]]) x->rechunk |= 1u << i;
    }
    if (x->dlab[i]) x->diag |= 1u << i;
  }
  x->cut = oi_cut_node(p, x->n);
}

int oi_cut_node(const ta_plan *p, const ta_node *n) {
  if (n->ninputs != 1 || n->agg != TK_AGG_NONE || n->nout != n->nlabels) return 0;
  const ta_operand *o = &n->in[0];
  int64_t chunk[TR_MAX_RANK];
  for (int d = 0; d < o->rank; d++) chunk[d] = n->chunk[o->label[d]];
  return tr_chunk_nests(o->rank, chunk, p->rels[o->rel].meta.chunk);
}
