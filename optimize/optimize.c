/*
** engine/optimize.c - the cost-based optimizer: IA plans by rewrite rules,
** costed exactly in floats moved, the cheapest one run.
**
** Each node of a plan (TRA join + aggregation, see engine_int.h) is first
** compiled to IA by the TRA paper's Table 1:
**
**   MAP(post) AGG_G( SHUF_G( FILTER( JOIN( BCAST(X0), .., Xn ) ) ) )
**
** and the rewrite rules of its Table 2 (R1-1..R1-7 kernel composition,
** R2-1..R2-7 re-partitioning) and two domain rules (RMM: replicate each
** input over the output labels it lacks, then shuffle on them; LOCAL: a
** join of inputs already co-partitioned needs no move) are applied to
** every operator of every plan reached, breadth first, with duplicates
** removed by their canonical text, until no rule applies or a bound is hit.
** Each plan reached that the executor can run is lowered to a to_choice
** (which operand stays, moves, or drives the join; whether the aggregation
** is local or two-phase).  BMM and CMM are among them: BMM is the Table 1
** plan itself, CMM comes from R2-6 then R2-5 (the paper says the simple
** rules reach it), and R2-7 with R2-4 gives the broadcast plans whose
** aggregation stays local.
**
** Cost (section 5.3): floats moved between sites, computed exactly.  A
** tensor relation has no holes and unique keys, so every chunk's size is
** known from the frontier; to_moves_compute walks the join tuples of the
** node, puts each on its site, and counts every chunk sent to a site that
** does not hold it (inputs costed from where the catalog says they are),
** every partial result shuffled to its owner, and the output's replicas.
** The executor runs exactly these moves (dist.c calls the same function),
** so the measured transfer equals the prediction.  Plans that move the
** same floats are ordered by the extra floating-point work they do
** (combining partials).
**
** A plan of several nodes (nested aggregations, or a block of statements)
** is searched node by node keeping the cheapest TO_BEAM partial plans
** (the placement each leaves behind is part of its state), so a node's
** choice is costed together with what it does to its consumers.
*/
#include "config.h"
#include "optimize/optimize.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_MAX_OPS 48      /* operators in one IA tree */
#define S_MAX_TREES 4000  /* IA plans visited per node */
#define S_MAX_CANDS 96    /* distinct lowered plans per node */
#define S_BEAM 16         /* partial plans kept between nodes */

/* ---- Rules ---------------------------------------------------------------- */

enum {
  R1_1, R1_2, R1_3, R1_4, R1_5, R1_6, R1_7,
  R2_1, R2_2, R2_3, R2_4, R2_5, R2_6, R2_7,
  R_RMM, R_LOCAL, S_NRULES
};

static const char *const s_rule_name[S_NRULES] = {
  "R1-1", "R1-2", "R1-3", "R1-4", "R1-5", "R1-6", "R1-7",
  "R2-1", "R2-2", "R2-3", "R2-4", "R2-5", "R2-6", "R2-7",
  "RMM", "LOCAL"};

/* ---- IA trees --------------------------------------------------------------- */

typedef enum s_kind {
  IA_SCAN,    /* stored or earlier relation of operand `operand` */
  IA_FILTER,  /* diagonal-key filter of the operands in lab (bit mask) */
  IA_RECHUNK, /* tile + concat to the node's chunking (key map not id) */
  IA_MAP,     /* post transform, npost unary kernels (key map id) */
  IA_BCAST,   /* to every site */
  IA_SHUF,    /* on labels lab */
  IA_DUP,     /* insertDim + duplicate over labels lab (arity > 1) */
  IA_JOIN,    /* local join, npost composed maps */
  IA_PAGG,    /* local partial aggregation (first phase, R2-5) */
  IA_AGG      /* local aggregation by lab = G, npost composed maps,
                 fl composed filter (R1-5) */
} s_kind;

typedef struct s_op {
  int8_t kind, nk, operand, npost;
  int8_t kid[TK_MAX_INPUTS];
  unsigned lab, fl;
} s_op;

typedef struct s_tree {
  int n;
  s_op op[S_MAX_OPS];
} s_tree;

/* What the rules need to know of the node. */
typedef struct s_ctx {
  const ta_plan *p;
  const ta_node *n;
  int nin;
  unsigned lab[TK_MAX_INPUTS];   /* labels of each operand */
  unsigned dlab[TK_MAX_INPUTS];  /* labels repeated in it (diagonal) */
  unsigned G, K;                 /* output labels, aggregated labels */
  unsigned diag, rechunk;        /* operands with a diagonal, re-chunked */
} s_ctx;

static int s_pop(uint64_t x) { return __builtin_popcountll(x); }

static int s_new(s_tree *t, s_kind k) {
  if (t->n >= S_MAX_OPS) return -1;
  s_op *o = &t->op[t->n];
  memset(o, 0, sizeof *o);
  o->kind = (int8_t)k;
  o->operand = -1;
  return t->n++;
}

/* Wrap op `at` (in place) in a unary op of kind k: the op moves to a new
** slot and `at` becomes the wrapper, so parents need no update. */
static int s_wrap(s_tree *t, int at, s_kind k, unsigned lab) {
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
static void s_lift(s_tree *t, int at) { t->op[at] = t->op[t->op[at].kid[0]]; }

/* Swap the unary op `at` with its unary child (their kids stay put). */
static void s_swap(s_tree *t, int at) {
  int c = t->op[at].kid[0];
  s_op a = t->op[at], b = t->op[c];
  t->op[at] = b;
  t->op[c] = a;
  t->op[at].kid[0] = (int8_t)c;
  t->op[at].nk = 1;
  t->op[c].kid[0] = b.kid[0];
  t->op[c].nk = b.nk;
}

static int s_copy(const s_tree *src, int at, s_tree *dst) {
  int me = dst->n++;
  dst->op[me] = src->op[at];
  for (int i = 0; i < src->op[at].nk; i++) dst->op[me].kid[i] = (int8_t)s_copy(src, src->op[at].kid[i], dst);
  return me;
}

/* Rebuild from the root (op 0), dropping unreachable ops. */
static void s_normalize(s_tree *t) {
  s_tree c;
  c.n = 0;
  s_copy(t, 0, &c);
  *t = c;
}

static unsigned s_labels_of(const s_ctx *x, const s_tree *t, int at) {
  const s_op *o = &t->op[at];
  if (o->kind == IA_SCAN) return x->lab[o->operand];
  unsigned m = 0;
  for (int i = 0; i < o->nk; i++) m |= s_labels_of(x, t, o->kid[i]);
  if (o->kind == IA_AGG || o->kind == IA_PAGG) m &= o->lab;
  return m;
}

static unsigned s_operands_of(const s_tree *t, int at) {
  const s_op *o = &t->op[at];
  if (o->kind == IA_SCAN) return 1u << o->operand;
  unsigned m = 0;
  for (int i = 0; i < o->nk; i++) m |= s_operands_of(t, o->kid[i]);
  return m;
}

/* Partitioning of the relation op `at` makes: 'A' every site, 'H' hashed
** on *lab, 'S' stored (as the catalog placed it; checked when costed),
** 'N' none known (replicated or partial). */
static int s_part(const s_tree *t, int at, unsigned *lab) {
  const s_op *o = &t->op[at];
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
      int ki = s_part(t, o->kid[i], &li);
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
  default: return o->nk ? s_part(t, o->kid[0], lab) : 'N';
  }
}

static void s_label_text(const s_ctx *x, unsigned lab, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = '\0';
  for (int l = 0; l < x->n->nlabels && o < n; l++)
    if (lab & (1u << l)) o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? "," : "", x->n->lname[l]);
}

static const char *s_opname(const s_ctx *x, int operand) {
  return x->p->rels[x->n->in[operand].rel].meta.name;
}

/* Canonical text of the tree below `at` (also what EXPLAIN shows). */
static size_t s_text(const s_ctx *x, const s_tree *t, int at, char *buf, size_t n) {
  const s_op *o = &t->op[at];
  char l[160];
  size_t w = 0;
#define W(...) w += (size_t)snprintf(buf + w, w < n ? n - w : 0, __VA_ARGS__)
  switch (o->kind) {
  case IA_SCAN: W("%s", s_opname(x, o->operand)); return w;
  case IA_FILTER: W("filter("); break;
  case IA_RECHUNK: W("rechunk("); break;
  case IA_MAP: W("map%d(", o->npost); break;
  case IA_BCAST: W("bcast("); break;
  case IA_SHUF: s_label_text(x, o->lab, l, sizeof l); W("shuf[%s](", l); break;
  case IA_DUP: s_label_text(x, o->lab, l, sizeof l); W("dup[%s](", l); break;
  case IA_JOIN: W("join%s(", o->npost ? "+map" : ""); break;
  case IA_PAGG: W("pagg("); break;
  case IA_AGG: W("agg%s%s(", o->npost ? "+map" : "", o->fl ? "+filter" : ""); break;
  }
  for (int i = 0; i < o->nk; i++) {
    if (i) W(", ");
    w += s_text(x, t, o->kid[i], w < n ? buf + w : NULL, w < n ? n - w : 0);
  }
  W(")");
#undef W
  return w;
}

/* A fresh child of unary op `at` (the initial plan has a handful of ops,
** far below S_MAX_OPS). */
static int s_child(s_tree *t, int at) {
  int c = s_new(t, IA_SCAN);
  if (c < 0) c = 0;
  t->op[at].nk = 1;
  t->op[at].kid[0] = (int8_t)c;
  return c;
}

/* Table 1: the initial IA plan of the node. */
static void s_initial(const s_ctx *x, s_tree *t) {
  const ta_node *n = x->n;
  int npost = 0;
  for (int i = 0; i < n->post.n; i++) npost += n->post.code[i].op >= TK_OP_NEG;
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
      if (x->rechunk & (1u << i)) s_wrap(t, c, IA_RECHUNK, 0);
      if (i < x->nin - 1) s_wrap(t, c, IA_BCAST, 0);
    }
  } else {
    t->op[at].operand = 0;
    if (x->rechunk & 1u) s_wrap(t, at, IA_RECHUNK, 0);
  }
}

/* Is the op a move (BCAST or SHUF)? */
static int s_move(const s_op *o) { return o->kind == IA_BCAST || o->kind == IA_SHUF; }

/* Apply rule r at op `at` of t; each result goes to out[*nout]. */
static void s_apply(const s_ctx *x, const s_tree *t, int at, int r, s_tree *out, int *nout, int max) {
  const s_op *o = &t->op[at];
  if (!o->nk) return; /* a scan: no rule rewrites it alone */
  const s_op *c = &t->op[o->kid[0]];
#define EMIT_BEGIN() if (*nout >= max) break; s_tree *u = &out[*nout]; *u = *t
#define EMIT_END() do { s_normalize(u); (*nout)++; } while (0)
  switch (r) {
  case R1_1: /* filter(f1, filter(f2, R)) = filter(f1 and f2, R) */
    if (o->kind == IA_FILTER && c->kind == IA_FILTER) {
      EMIT_BEGIN();
      u->op[at].lab |= c->lab;
      u->op[at].kid[0] = c->kid[0];
      EMIT_END();
    }
    break;
  case R1_2: /* map(map(R)) = map(composed), both arity one, key maps id */
    if (o->kind == IA_MAP && c->kind == IA_MAP) {
      EMIT_BEGIN();
      u->op[at].npost = (int8_t)(o->npost + c->npost);
      u->op[at].kid[0] = c->kid[0];
      EMIT_END();
    }
    break;
  case R1_3: /* map and filter commute when the key map is the identity */
    if ((o->kind == IA_MAP && c->kind == IA_FILTER) || (o->kind == IA_FILTER && c->kind == IA_MAP)) {
      EMIT_BEGIN();
      s_swap(u, at);
      EMIT_END();
    }
    break;
  case R1_4: /* map(agg(R)) = agg with the map composed (key map id) */
    if (o->kind == IA_MAP && c->kind == IA_AGG) {
      EMIT_BEGIN();
      int8_t np = o->npost;
      s_lift(u, at);
      u->op[at].npost = (int8_t)(u->op[at].npost + np);
      EMIT_END();
    }
    break;
  case R1_5: /* filter(agg(R)) = agg with the filter composed, if the
             ** filter only reads group-by keys */
    if (o->kind == IA_FILTER && c->kind == IA_AGG) {
      unsigned fl = 0;
      for (int i = 0; i < x->nin; i++)
        if (o->lab & (1u << i)) fl |= x->dlab[i];
      if ((fl & ~c->lab) == 0) {
        EMIT_BEGIN();
        unsigned f = o->lab;
        s_lift(u, at);
        u->op[at].fl |= f;
        EMIT_END();
      }
    }
    break;
  case R1_6: /* filter(join(L, R)) = join(filter(L), filter(R)): the
             ** filter checks only keys of the operands it names */
    if (o->kind == IA_FILTER && c->kind == IA_JOIN) {
      EMIT_BEGIN();
      unsigned f = o->lab;
      s_lift(u, at);
      for (int i = 0; i < u->op[at].nk; i++) {
        int k = u->op[at].kid[i];
        unsigned fi = f & s_operands_of(u, k);
        if (fi && s_wrap(u, k, IA_FILTER, fi) < 0) return;
      }
      EMIT_END();
    }
    break;
  case R1_7: /* map(join(..)) = join with the map composed */
    if (o->kind == IA_MAP && c->kind == IA_JOIN) {
      EMIT_BEGIN();
      int8_t np = o->npost;
      s_lift(u, at);
      u->op[at].npost = (int8_t)(u->op[at].npost + np);
      EMIT_END();
    }
    break;
  case R2_1: /* only the last of two moves matters */
    if (s_move(o) && s_move(c)) {
      EMIT_BEGIN();
      u->op[at].kid[0] = c->kid[0];
      EMIT_END();
    }
    break;
  case R2_2: /* moves commute with filters */
    if ((s_move(o) && c->kind == IA_FILTER) || (o->kind == IA_FILTER && s_move(c))) {
      EMIT_BEGIN();
      s_swap(u, at);
      EMIT_END();
    }
    break;
  case R2_3: /* bcast commutes with any map; shuf with maps whose key map
             ** is the identity (not a re-chunking) */
    if ((o->kind == IA_BCAST && (c->kind == IA_MAP || c->kind == IA_RECHUNK)) ||
        ((c->kind == IA_BCAST) && (o->kind == IA_MAP || o->kind == IA_RECHUNK)) ||
        (o->kind == IA_SHUF && c->kind == IA_MAP) || (o->kind == IA_MAP && c->kind == IA_SHUF)) {
      EMIT_BEGIN();
      s_swap(u, at);
      EMIT_END();
    }
    break;
  case R2_4: /* agg_G(shuf_D(R)) = agg_G(R) if R is partitioned on a subset
             ** of G; and a shuffle on any non-empty subset of G is enough */
    if (o->kind == IA_AGG && c->kind == IA_SHUF) {
      unsigned pl = 0;
      int pk = s_part(t, c->kid[0], &pl);
      if (pk == 'S' || (pk == 'H' && pl && (pl & ~o->lab) == 0)) {
        EMIT_BEGIN();
        u->op[at].kid[0] = c->kid[0];
        EMIT_END();
      }
      for (unsigned d = (c->lab - 1) & c->lab; d; d = (d - 1) & c->lab) {
        EMIT_BEGIN();
        u->op[o->kid[0]].lab = d;
        EMIT_END();
      }
    }
    break;
  case R2_5: /* two-phase aggregation when R is only partly partitioned */
    if (o->kind == IA_AGG && c->kind == IA_SHUF && t->op[c->kid[0]].kind != IA_PAGG) {
      unsigned pl = 0;
      int pk = s_part(t, c->kid[0], &pl);
      if (!(pk == 'H' && pl && (pl & ~o->lab) == 0)) {
        EMIT_BEGIN();
        if (s_wrap(u, c->kid[0], IA_PAGG, o->lab) < 0) return;
        EMIT_END();
      }
    }
    break;
  case R2_6: /* join(bcast(L), R) = join(L, bcast(R)) =
             ** join(shuf_jk(L), shuf_jk(R)) */
    if (o->kind == IA_JOIN) {
      int nb = 0, keep = -1;
      for (int i = 0; i < o->nk; i++) {
        if (t->op[o->kid[i]].kind == IA_BCAST) nb++;
        else keep = i;
      }
      if (nb != o->nk - 1 || keep < 0) break;
      for (int i = 0; i < o->nk; i++) {
        if (i == keep) continue;
        EMIT_BEGIN();
        s_lift(u, u->op[at].kid[i]);
        if (s_wrap(u, u->op[at].kid[keep], IA_BCAST, 0) < 0) return;
        EMIT_END();
      }
      unsigned jk = ~0u;
      for (int i = 0; i < o->nk; i++) jk &= s_labels_of(x, t, o->kid[i]);
      if (jk) {
        EMIT_BEGIN();
        for (int i = 0; i < o->nk; i++) {
          int k = u->op[at].kid[i];
          if (u->op[k].kind == IA_BCAST) s_lift(u, k);
          if (s_wrap(u, k, IA_SHUF, jk) < 0) return;
        }
        EMIT_END();
      }
    }
    break;
  case R2_7: /* shuf_D(join(bcast(L), R)) = join(bcast(L), shuf_D(R)) if
             ** D are labels of R; shuf_D(join(shuf_J(L), shuf_J(R))) =
             ** join(shuf_D(L), shuf_D(R)) if D is a subset of J */
    if (o->kind == IA_SHUF && c->kind == IA_JOIN) {
      int nb = 0, keep = -1, nshuf = 0;
      for (int i = 0; i < c->nk; i++) {
        const s_op *k = &t->op[c->kid[i]];
        if (k->kind == IA_BCAST) nb++;
        else keep = i;
        nshuf += k->kind == IA_SHUF && (o->lab & ~k->lab) == 0;
      }
      if (nb == c->nk - 1 && keep >= 0 && (o->lab & ~s_labels_of(x, t, c->kid[keep])) == 0) {
        EMIT_BEGIN();
        unsigned d = o->lab;
        s_lift(u, at);
        int k = u->op[at].kid[keep];
        if (u->op[k].kind == IA_SHUF) u->op[k].lab = d;
        else if (s_wrap(u, k, IA_SHUF, d) < 0) return;
        EMIT_END();
      } else if (nshuf == c->nk) {
        EMIT_BEGIN();
        unsigned d = o->lab;
        s_lift(u, at);
        for (int i = 0; i < u->op[at].nk; i++) u->op[u->op[at].kid[i]].lab = d;
        EMIT_END();
      }
    }
    break;
  case R_RMM: /* agg_G(shuf_D(join(..))), D a subset of G: replicate each
              ** input over the labels of D it lacks, shuffle on D, join
              ** and aggregate where the output lives */
    if (o->kind == IA_AGG && c->kind == IA_SHUF && t->op[c->kid[0]].kind == IA_JOIN &&
        (c->lab & ~o->lab) == 0) {
      EMIT_BEGIN();
      unsigned d = c->lab;
      u->op[at].kid[0] = c->kid[0];
      int j = u->op[at].kid[0];
      int dup = 0;
      for (int i = 0; i < u->op[j].nk; i++) {
        int k = u->op[j].kid[i];
        while (s_move(&u->op[k])) s_lift(u, k);
        unsigned lk = s_labels_of(x, u, k);
        if (d & ~lk) {
          if (s_wrap(u, k, IA_DUP, d & ~lk) < 0) return;
          dup = 1;
        }
        if (s_wrap(u, k, IA_SHUF, d) < 0) return;
      }
      if (!dup) break; /* nothing replicated: an R2-7 plan */
      EMIT_END();
    }
    break;
  case R_LOCAL: /* join(bcast(L), R) = join(L, R) when L and R are already
                ** co-partitioned on the join keys (checked on the
                ** catalog's placement when the plan is costed) */
    if (o->kind == IA_JOIN) {
      for (int i = 0; i < o->nk; i++) {
        const s_op *k = &t->op[o->kid[i]];
        if (k->kind != IA_BCAST) continue;
        unsigned pl = 0;
        int others_stored = 1;
        for (int j = 0; j < o->nk; j++)
          if (j != i && t->op[o->kid[j]].kind != IA_BCAST) others_stored &= s_part(t, o->kid[j], &pl) == 'S';
        if (!others_stored || s_part(t, k->kid[0], &pl) != 'S') continue;
        EMIT_BEGIN();
        s_lift(u, u->op[at].kid[i]);
        EMIT_END();
      }
    }
    break;
  }
#undef EMIT_BEGIN
#undef EMIT_END
}

/* ---- Lowering an IA tree to what the executor runs ----------------------- */

/* Walk one join input from the top: its move (at most one: R2-1 first),
** the labels it is shuffled on or replicated over, and whether its
** diagonal filter runs after the move.  0 if the executor cannot run it. */
static int s_lower_input(const s_tree *t, int at, int *operand, int *mv, unsigned *shuf,
                         unsigned *dup, int *late) {
  int filter_first = 0, moved = 0;
  *mv = TO_MV_KEEP;
  *shuf = *dup = 0;
  *late = 0;
  for (;;) {
    const s_op *o = &t->op[at];
    switch (o->kind) {
    case IA_SCAN:
      *operand = o->operand;
      /* The executor moves only the chunks the join reads, so a filter
      ** after a shuffle costs what it costs before it; only a broadcast
      ** (every chunk to every site) moves more with the filter after. */
      *late = filter_first && moved && *mv == TO_MV_BCAST;
      return 1;
    case IA_FILTER:
      if (!moved) filter_first = 1;
      break;
    case IA_MAP: case IA_RECHUNK: break;
    case IA_BCAST: case IA_SHUF:
      if (moved) return 0;
      moved = 1;
      *mv = o->kind == IA_BCAST ? TO_MV_BCAST : TO_MV_SHUF;
      *shuf = o->kind == IA_SHUF ? o->lab : 0;
      break;
    case IA_DUP:
      if (*mv != TO_MV_SHUF) return 0;
      *mv = TO_MV_DUP;
      *dup = o->lab;
      break;
    default: return 0;
    }
    at = o->kid[0];
  }
}

static void s_name(const s_ctx *x, to_choice *c) {
  char b[96], l[64];
  size_t w = 0;
  int nb = 0, ndup = 0, nshuf = 0, nkeep = 0, shuf_on_k = 1;
  for (int i = 0; i < x->nin; i++) {
    nb += c->mv[i] == TO_MV_BCAST;
    ndup += c->mv[i] == TO_MV_DUP;
    nkeep += c->mv[i] == TO_MV_KEEP;
    nshuf += c->mv[i] == TO_MV_SHUF;
  }
  shuf_on_k = c->drive >= 0 && c->part && (c->part & ~x->K) == 0;
#define W(...) w += (size_t)snprintf(b + w, w < sizeof b ? sizeof b - w : 0, __VA_ARGS__)
  if (ndup > 1) {
    s_label_text(x, c->part, l, sizeof l);
    W("RMM[%s]", l);
  } else if (ndup) {
    s_label_text(x, c->part, l, sizeof l);
    W("BMM[");
    for (int i = 0; i < x->nin; i++)
      if (c->mv[i] == TO_MV_DUP) W("replicate %s; ", s_opname(x, i));
    for (int i = 0, f = 1; i < x->nin; i++)
      if (c->mv[i] != TO_MV_DUP) {
        W("%s%s %s", f ? "" : ", ", s_opname(x, i), c->mv[i] == TO_MV_BCAST ? "bcast" : "by");
        f = 0;
      }
    W(" %s]", l);
  } else if (!nb && nshuf && shuf_on_k && c->twophase) {
    s_label_text(x, c->part, l, sizeof l);
    W("CMM[%s]", l);
  } else if (!nb && nshuf == 0) {
    W("LOCAL");
  } else {
    W("%s[", nb ? "BMM" : "SHUF");
    int first = 1;
    for (int i = 0; i < x->nin; i++)
      if (c->mv[i] == TO_MV_BCAST) {
        W("%sbcast %s", first ? "" : ", ", s_opname(x, i));
        first = 0;
      }
    for (int i = 0; i < x->nin; i++) {
      if (c->mv[i] == TO_MV_BCAST) continue;
      if (c->mv[i] == TO_MV_SHUF && i == c->drive) {
        s_label_text(x, c->part, l, sizeof l);
        W("%s%s by %s", first ? "" : "; ", s_opname(x, i), l);
      } else if (c->mv[i] == TO_MV_KEEP && i == c->drive) {
        W("%s%s in place", first ? "" : "; ", s_opname(x, i));
      } else {
        continue;
      }
      first = 0;
    }
    W("]");
  }
  if (c->twophase && !(ndup == 0 && !nb && shuf_on_k)) {
    s_label_text(x, c->agg_part, l, sizeof l);
    W(" 2-phase[%s]", l);
  }
  for (int i = 0; i < x->nin; i++)
    if (c->late[i]) W(" late-filter %s", s_opname(x, i));
#undef W
  snprintf(c->name, sizeof c->name, "%s", b);
}

/* Lower tree t to a choice; 0 if the executor cannot run it as it is. */
static int s_lower(const s_ctx *x, const s_tree *t, to_choice *c) {
  memset(c, 0, sizeof *c);
  int at = 0, agg = 0, pagg = 0;
  unsigned shuf = 0;
  int has_shuf = 0;
  while (t->op[at].kind == IA_MAP) at = t->op[at].kid[0];
  if (t->op[at].kind == IA_AGG) {
    agg = 1;
    at = t->op[at].kid[0];
    if (t->op[at].kind == IA_SHUF) {
      has_shuf = 1;
      shuf = t->op[at].lab;
      at = t->op[at].kid[0];
      if (t->op[at].kind == IA_PAGG) {
        pagg = 1;
        at = t->op[at].kid[0];
      }
    }
  }
  if (has_shuf && !pagg) return 0; /* raw join tuples shuffled: R2-5 first */
  if (!!agg != !!x->K) return 0;
  int kids[TK_MAX_INPUTS], nk;
  if (t->op[at].kind == IA_JOIN) {
    nk = t->op[at].nk;
    for (int i = 0; i < nk; i++) kids[i] = t->op[at].kid[i];
  } else {
    nk = 1;
    kids[0] = at;
  }
  if (nk != x->nin) return 0;
  unsigned shufs[TK_MAX_INPUTS], dups[TK_MAX_INPUTS];
  int opn[TK_MAX_INPUTS];
  for (int i = 0; i < nk; i++) {
    int mv, late, op;
    if (!s_lower_input(t, kids[i], &op, &mv, &shufs[i], &dups[i], &late)) return 0;
    opn[i] = op;
    c->mv[op] = mv;
    c->late[op] = late;
  }
  /* Filters left above the join would join non-diagonal pairs: R1-6 and
  ** R2-2 must have pushed them to the inputs. */
  for (int a = 0; a < t->n; a++)
    if (t->op[a].kind == IA_FILTER && (s_operands_of(t, a) & (s_operands_of(t, a) - 1))) return 0;
  /* Where the join tuples run. */
  int drive = -1, nkeep = 0, nshuf = 0, ndup = 0;
  unsigned part = 0;
  for (int i = 0; i < nk; i++) {
    int op = opn[i];
    if (c->mv[op] == TO_MV_BCAST) continue;
    if (c->mv[op] == TO_MV_KEEP) nkeep++;
    if (c->mv[op] == TO_MV_SHUF || c->mv[op] == TO_MV_DUP) {
      if (nshuf + ndup && shufs[i] != part) return 0;
      part = shufs[i];
      if (c->mv[op] == TO_MV_DUP) ndup++;
      else nshuf++;
    }
    if (drive < 0 && c->mv[op] != TO_MV_DUP) drive = op;
  }
  if (nkeep && (nshuf || ndup)) return 0;
  if (!nkeep && !nshuf && !ndup) return 0; /* everything broadcast */
  if (ndup) {
    if (part & ~x->G) return 0;
    drive = -1;
  }
  /* A re-chunked operand's chunks are assembled where the output chunk
  ** is (the shuffle inside Table 1's CONCAT): it cannot drive the join. */
  if (drive >= 0 && (x->rechunk >> drive & 1u)) {
    if (pagg) return 0;
    if (c->mv[drive] == TO_MV_KEEP) part = x->G;
    else if (part & ~x->G) return 0;
    drive = -1;
  }
  c->drive = drive;
  c->part = part;
  c->twophase = pagg;
  c->agg_part = pagg ? shuf : 0;
  if (pagg && (shuf & ~x->G)) return 0;
  if (ndup && pagg) return 0;
  s_name(x, c);
  return 1;
}

/* ---- Exact moves -------------------------------------------------------------- */

int to_hash_site(const ta_node *n, unsigned labels, const int64_t *lkey, int m) {
  int64_t h = 0;
  for (int l = 0; l < n->nlabels; l++)
    if (labels & (1u << l)) h = h * ((n->size[l] + n->chunk[l] - 1) / n->chunk[l]) + lkey[l];
  return (int)(h % m);
}

void to_moves_free(to_moves *mv) {
  for (int i = 0; i < TK_MAX_INPUTS; i++) free(mv->need[i]);
  free(mv->osites);
  free(mv->owner);
  memset(mv, 0, sizeof *mv);
}

void to_placed_free(to_placed *pl) {
  free(pl->has);
  free(pl->prim);
  memset(pl, 0, sizeof *pl);
}

static int64_t s_chunk_floats(const tr_tensor *t, int64_t lin) {
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
  tr_key_from_linear(t, lin, key);
  return tr_chunk_extent(t, key, ext);
}

int to_moves_compute(const ta_plan *p, int k, const to_choice *c, int m, int repl, to_placed *pl,
                     to_moves *mv, int out_pl, tr_err *err) {
  const ta_node *n = &p->nodes[k];
  const tr_tensor *om = &p->rels[n->out].meta;
  int64_t nout = tr_nchunks(om);
  uint64_t all = m >= 64 ? ~0ull : (1ull << m) - 1;
  uint8_t *touched[TK_MAX_INPUTS] = {0};
  int rc = TR_OK;
  memset(mv, 0, sizeof *mv);
  if (m < 1 || m > TO_MAX_SITES) return tr_seterr(err, TR_EINVAL, "cannot place on %d sites", m);
  mv->osites = calloc((size_t)nout + 1, sizeof *mv->osites);
  mv->owner = calloc((size_t)nout + 1, 1);
  if (!mv->osites || !mv->owner) rc = TR_ENOMEM;
  for (int i = 0; !rc && i < n->ninputs; i++) {
    int64_t cn = tr_nchunks(&p->rels[n->in[i].rel].meta);
    if (pl[n->in[i].rel].n != cn) {
      to_moves_free(mv);
      return tr_seterr(err, TR_EINVAL, "relation %s is not placed", p->rels[n->in[i].rel].meta.name);
    }
    mv->need[i] = calloc((size_t)cn + 1, sizeof *mv->need[i]);
    touched[i] = calloc((size_t)cn + 1, 1);
    if (!mv->need[i] || !touched[i]) rc = TR_ENOMEM;
  }
  if (rc) goto nomem;
  if (c->drive >= 0) {
    const ta_operand *o = &n->in[c->drive];
    const tr_tensor *it = &p->rels[o->rel].meta;
    for (int d = 0; d < o->rank; d++)
      if (it->chunk[d] != n->chunk[o->label[d]]) {
        rc = tr_seterr(err, TR_EINVAL, "%s is re-chunked: it cannot drive the join", it->name);
        goto done;
      }
  }
  int64_t ntuples = 1;
  double work[TO_MAX_SITES] = {0};
  for (int l = n->nout; l < n->nlabels; l++) ntuples *= (n->size[l] + n->chunk[l] - 1) / n->chunk[l];
  for (int64_t lin = 0; lin < nout && !rc; lin++) {
    int64_t okey[TR_MAX_RANK], lkey[TK_MAX_LABELS];
    tr_key_from_linear(om, lin, okey);
    for (int l = 0; l < n->nlabels; l++) lkey[l] = l < n->nout ? okey[l] : 0;
    for (int64_t t = 0; t < ntuples && !rc; t++) {
      int s;
      if (c->drive < 0) {
        s = to_hash_site(n, c->part, lkey, m);
      } else if (c->mv[c->drive] == TO_MV_KEEP) {
        const ta_operand *o = &n->in[c->drive];
        const tr_tensor *it = &p->rels[o->rel].meta;
        int64_t key[TR_MAX_RANK];
        for (int d = 0; d < o->rank; d++) key[d] = lkey[o->label[d]];
        s = pl[o->rel].prim[tr_key_linear(it, key)];
        if (s < 0) {
          char ks[200];
          size_t w = 0;
          ks[0] = '\0';
          for (int d = 0; d < o->rank && w < sizeof ks; d++)
            w += (size_t)snprintf(ks + w, sizeof ks - w, "%s%lld", d ? "," : "", (long long)key[d]);
          rc = tr_seterr(err, TR_ECORRUPT, "cannot read tensor %s chunk [%s]: no live replica holds it",
                         it->name, ks);
          break;
        }
      } else {
        s = to_hash_site(n, c->part, lkey, m);
      }
      mv->osites[lin] |= 1ull << s;
      double wk = 1;
      for (int l = 0; l < n->nlabels; l++) {
        int64_t rest = n->size[l] - lkey[l] * n->chunk[l];
        wk *= (double)(n->chunk[l] < rest ? n->chunk[l] : rest);
      }
      work[s] += wk;
      for (int i = 0; i < n->ninputs; i++) {
        const ta_operand *o = &n->in[i];
        const tr_tensor *it = &p->rels[o->rel].meta;
        int64_t first[TR_MAX_RANK], last[TR_MAX_RANK], sk[TR_MAX_RANK];
        for (int d = 0; d < o->rank; d++) {
          int64_t cz = n->chunk[o->label[d]], lo = lkey[o->label[d]] * cz;
          int64_t hi = lo + cz < it->shape[d] ? lo + cz : it->shape[d];
          first[d] = sk[d] = lo / it->chunk[d];
          last[d] = (hi - 1) / it->chunk[d];
        }
        for (;;) {
          int64_t cl = tr_key_linear(it, sk);
          touched[i][cl] = 1;
          if (c->mv[i] != TO_MV_BCAST) {
            if (c->mv[i] == TO_MV_KEEP && !(pl[o->rel].has[cl] & (1ull << s))) {
              rc = tr_seterr(err, TR_EINVAL, "%s and the drive operand are not co-partitioned",
                             it->name);
              break;
            }
            mv->need[i][cl] |= 1ull << s;
          }
          int d = o->rank - 1;
          while (d >= 0 && ++sk[d] > last[d]) {
            sk[d] = first[d];
            d--;
          }
          if (d < 0) break;
        }
        if (rc) break;
      }
      int l = n->nlabels - 1;
      while (l >= n->nout) {
        if (++lkey[l] * n->chunk[l] < n->size[l]) break;
        lkey[l--] = 0;
      }
    }
  }
  if (rc) goto done;
  for (int u = 0; u < m; u++) {
    mv->work_total += work[u];
    if (work[u] > mv->work_max) mv->work_max = work[u];
  }
  /* Broadcasts: every chunk the join reads (all of them if the filter
  ** runs after the move) to every site. */
  for (int i = 0; i < n->ninputs; i++) {
    if (c->mv[i] != TO_MV_BCAST) continue;
    int64_t cn = pl[n->in[i].rel].n;
    for (int64_t l = 0; l < cn; l++)
      if (touched[i][l] || c->late[i]) mv->need[i][l] = all;
  }
  for (int i = 0; i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    const tr_tensor *it = &p->rels[o->rel].meta;
    for (int64_t l = 0; l < pl[o->rel].n; l++)
      if (mv->need[i][l] & ~pl[o->rel].has[l])
        mv->in_floats[i] += s_pop(mv->need[i][l] & ~pl[o->rel].has[l]) * s_chunk_floats(it, l);
    mv->total += mv->in_floats[i];
  }
  /* Owners; partial results shuffled to them. */
  for (int64_t lin = 0; lin < nout; lin++) {
    int own;
    if (c->twophase) {
      int64_t okey[TR_MAX_RANK], lkey[TK_MAX_LABELS] = {0};
      tr_key_from_linear(om, lin, okey);
      for (int l = 0; l < n->nout; l++) lkey[l] = okey[l];
      own = to_hash_site(n, c->agg_part, lkey, m);
      mv->partial_floats += s_pop(mv->osites[lin] & ~(1ull << own)) * s_chunk_floats(om, lin);
    } else {
      if (s_pop(mv->osites[lin]) != 1) {
        rc = tr_seterr(err, TR_EINVAL, "output chunk %lld would be computed on %d sites",
                       (long long)lin, s_pop(mv->osites[lin]));
        goto done;
      }
      own = __builtin_ctzll(mv->osites[lin]);
    }
    mv->owner[lin] = (int8_t)own;
  }
  mv->total += mv->partial_floats;
  if (out_pl) {
    /* Copies sent stay for the rest of the run: later nodes read them
    ** where they are (the executor sends a chunk to a site once). */
    for (int i = 0; i < n->ninputs; i++) {
      to_placed *pi = &pl[n->in[i].rel];
      for (int64_t l = 0; l < pi->n; l++) pi->has[l] |= mv->need[i][l];
    }
    to_placed *po = &pl[n->out];
    to_placed_free(po);
    po->has = calloc((size_t)nout + 1, sizeof *po->has);
    po->prim = calloc((size_t)nout + 1, 1);
    if (!po->has || !po->prim) goto nomem;
    po->n = nout;
    int r = p->rels[n->out].kind == TA_REL_OUTPUT ? repl : 1;
    for (int64_t lin = 0; lin < nout; lin++) {
      po->prim[lin] = mv->owner[lin];
      for (int j = 0; j < r; j++) po->has[lin] |= 1ull << ((mv->owner[lin] + j) % m);
    }
  }
done:
  for (int i = 0; i < TK_MAX_INPUTS; i++) free(touched[i]);
  if (rc) to_moves_free(mv);
  return rc;
nomem:
  for (int i = 0; i < TK_MAX_INPUTS; i++) free(touched[i]);
  to_moves_free(mv);
  return tr_seterr(err, TR_ENOMEM, "out of memory");
}

/* ---- Search ---------------------------------------------------------------- */

/* Open-addressing set of canonical texts (hashes; a collision only loses
** a duplicate plan). */
typedef struct s_seen {
  uint64_t *h;
  size_t cap;
} s_seen;

static uint64_t s_fnv(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h | 1;
}

static int s_seen_add(s_seen *S, uint64_t h) {
  size_t i = h & (S->cap - 1);
  while (S->h[i]) {
    if (S->h[i] == h) return 0;
    i = (i + 1) & (S->cap - 1);
  }
  S->h[i] = h;
  return 1;
}

typedef struct s_cands {
  int n;
  to_choice c[S_MAX_CANDS];
} s_cands;

static void s_ctx_init(s_ctx *x, const ta_plan *p, int k) {
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
}

/* All runnable plans the rules reach from the Table 1 plan of node k. */
static int s_enumerate(const ta_plan *p, int k, s_cands *out, int *ntrees, int *fired) {
  s_ctx x;
  s_ctx_init(&x, p, k);
  s_tree *q = malloc(sizeof *q * S_MAX_TREES);
  s_tree *tmp = malloc(sizeof *tmp * 16);
  char *rules = calloc(S_MAX_TREES, 160);
  s_seen S = {calloc(16384, sizeof(uint64_t)), 16384};
  char text[640];
  int nq = 0;
  out->n = 0;
  if (!q || !tmp || !rules || !S.h) {
    free(q);
    free(tmp);
    free(rules);
    free(S.h);
    return TR_ENOMEM;
  }
  s_initial(&x, &q[0]);
  s_normalize(&q[0]);
  s_text(&x, &q[0], 0, text, sizeof text);
  s_seen_add(&S, s_fnv(text));
  nq = 1;
  for (int qi = 0; qi < nq; qi++) {
    to_choice c;
    if (s_lower(&x, &q[qi], &c)) {
      int dup = 0;
      for (int j = 0; j < out->n && !dup; j++) {
        const to_choice *d = &out->c[j];
        dup = d->drive == c.drive && d->part == c.part && d->twophase == c.twophase &&
              d->agg_part == c.agg_part && !memcmp(d->mv, c.mv, sizeof c.mv) &&
              !memcmp(d->late, c.late, sizeof c.late);
      }
      if (!dup && out->n < S_MAX_CANDS) {
        s_text(&x, &q[qi], 0, c.ia, sizeof c.ia);
        snprintf(c.rules, sizeof c.rules, "%s", rules + (size_t)qi * 160);
        out->c[out->n++] = c;
      }
    }
    for (int at = 0; at < q[qi].n; at++)
      for (int r = 0; r < S_NRULES; r++) {
        int nt = 0;
        s_apply(&x, &q[qi], at, r, tmp, &nt, 16);
        for (int j = 0; j < nt; j++) {
          s_text(&x, &tmp[j], 0, text, sizeof text);
          if (!s_seen_add(&S, s_fnv(text))) continue;
          fired[r]++;
          if (nq >= S_MAX_TREES) continue;
          q[nq] = tmp[j];
          const char *prev = rules + (size_t)qi * 160;
          char *dst = rules + (size_t)nq * 160;
          size_t pl = strlen(prev);
          if (pl + 8 < 160) {
            memcpy(dst, prev, pl);
            snprintf(dst + pl, 160 - pl, "%s%s", pl ? " " : "", s_rule_name[r]);
          }
          nq++;
        }
      }
  }
  *ntrees += nq;
  free(q);
  free(tmp);
  free(rules);
  free(S.h);
  return TR_OK;
}

/* A partial plan of the beam. */
typedef struct s_state {
  double cost;                     /* floats + imbalance: the rank */
  int64_t floats;
  int64_t extra;                   /* tie-break: partial combines */
  uint64_t fp;                     /* fingerprint of its placements */
  int pick[TA_MAX_NODES];          /* candidate index per node */
  to_placed pl[TA_MAX_RELS];       /* placements it leaves */
} s_state;

static void s_state_free(s_state *s, int nrels) {
  for (int i = 0; i < nrels; i++) to_placed_free(&s->pl[i]);
}

static int s_placed_copy(to_placed *d, const to_placed *s) {
  memset(d, 0, sizeof *d);
  if (!s->n) return TR_OK;
  d->has = malloc(sizeof *d->has * (size_t)s->n);
  d->prim = malloc((size_t)s->n);
  if (!d->has || !d->prim) {
    to_placed_free(d);
    return TR_ENOMEM;
  }
  memcpy(d->has, s->has, sizeof *d->has * (size_t)s->n);
  memcpy(d->prim, s->prim, (size_t)s->n);
  d->n = s->n;
  return TR_OK;
}

static int s_cmp_state(const void *a, const void *b) {
  const s_state *x = *(s_state *const *)a, *y = *(s_state *const *)b;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  if (x->floats != y->floats) return x->floats < y->floats ? -1 : 1;
  if (x->extra != y->extra) return x->extra < y->extra ? -1 : 1;
  for (int k = 0; k < TA_MAX_NODES; k++)
    if (x->pick[k] != y->pick[k]) return x->pick[k] < y->pick[k] ? -1 : 1;
  return 0;
}

static int s_strcaseeq(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    char ca = *a >= 'A' && *a <= 'Z' ? (char)(*a + 32) : *a;
    char cb = *b >= 'A' && *b <= 'Z' ? (char)(*b + 32) : *b;
    if (ca != cb) return 0;
  }
  return *a == *b;
}

void to_opt_free(to_opt *o) {
  free(o->alt);
  o->alt = NULL;
  for (int k = 0; k < TA_MAX_NODES; k++) to_moves_free(&o->moves[k]);
}

int to_optimize(const ta_plan *p, int m, int repl, to_placed *pl, const char *force, to_opt *o,
                tr_err *err) {
  double t0 = tr_now();
  int rc = TR_OK;
  memset(o, 0, sizeof *o);
  o->m = m;
  o->repl = repl;
  if (m < 1 || m > TO_MAX_SITES)
    return tr_seterr(err, TR_EINVAL, "the optimizer places on 1 to %d sites, not %d", TO_MAX_SITES, m);
  s_cands *cands = calloc((size_t)p->nnodes + 1, sizeof *cands);
  s_state **beam = calloc(TO_MAX_ALTS, sizeof *beam), **next = calloc(TO_MAX_ALTS * S_MAX_CANDS, sizeof *next);
  int nbeam = 0, nnext = 0;
  tr_err last;
  tr_clearerr(&last);
  if (!cands || !beam || !next) {
    rc = TR_ENOMEM;
    goto done;
  }
  for (int k = 0; k < p->nnodes && !rc; k++)
    rc = s_enumerate(p, k, &cands[k], &o->ntrees, o->fired);
  if (rc) goto done;
  /* The beam starts from the stored placement. */
  if (!(beam[0] = calloc(1, sizeof **beam))) {
    rc = TR_ENOMEM;
    goto done;
  }
  nbeam = 1;
  for (int i = 0; i < p->nrels && !rc; i++) rc = s_placed_copy(&beam[0]->pl[i], &pl[i]);
  for (int k = 0; k < p->nnodes && !rc; k++) {
    nnext = 0;
    for (int b = 0; b < nbeam && !rc; b++)
      for (int ci = 0; ci < cands[k].n && !rc; ci++) {
        to_moves mv;
        tr_err e2;
        s_state *s = calloc(1, sizeof *s);
        if (!s) {
          rc = TR_ENOMEM;
          break;
        }
        for (int i = 0; i < p->nrels && !rc; i++) rc = s_placed_copy(&s->pl[i], &beam[b]->pl[i]);
        if (rc) {
          s_state_free(s, p->nrels);
          free(s);
          break;
        }
        if (to_moves_compute(p, k, &cands[k].c[ci], m, repl, s->pl, &mv, 1, &e2)) {
          s_state_free(s, p->nrels);
          free(s);
          if (e2.code == TR_ECORRUPT || e2.code == TR_ENOMEM) last = e2;
          continue; /* not valid on this placement */
        }
        memcpy(s->pick, beam[b]->pick, sizeof s->pick);
        s->pick[k] = ci;
        s->floats = beam[b]->floats + mv.total;
        s->cost = beam[b]->cost + (double)mv.total + (m * mv.work_max - mv.work_total) / TO_WORK_PER_FLOAT;
        s->extra = beam[b]->extra + mv.partial_floats;
        s->fp = beam[b]->fp;
        {
          const to_placed *po = &s->pl[p->nodes[k].out];
          for (int64_t l = 0; l < po->n; l++) s->fp = (s->fp ^ po->has[l] ^ ((uint64_t)po->prim[l] << 56)) * 1099511628211ull + (uint64_t)k;
        }
        to_moves_free(&mv);
        next[nnext++] = s;
      }
    for (int b = 0; b < nbeam; b++) {
      s_state_free(beam[b], p->nrels);
      free(beam[b]);
    }
    nbeam = 0;
    if (rc) break;
    if (!nnext) {
      /* an unreadable input makes every plan fail: say which chunk */
      if (last.code) *err = last, rc = last.code;
      else rc = tr_seterr(err, TR_EINVAL, "no runnable plan for %s", p->rels[p->nodes[k].out].meta.name);
      goto done;
    }
    qsort(next, (size_t)nnext, sizeof *next, s_cmp_state);
    /* Keep the cheapest: S_BEAM between nodes, TO_MAX_ALTS after the
    ** last; of partial plans that moved the same floats and left the same
    ** placement, the first (fewest rewrites) stands for all. */
    int keep = k == p->nnodes - 1 ? TO_MAX_ALTS : S_BEAM;
    for (int i = 0; i < nnext; i++) {
      int same = 0;
      for (int j = 0; j < nbeam && !same; j++)
        same = beam[j]->floats == next[i]->floats && beam[j]->fp == next[i]->fp;
      if (!same && nbeam < keep) {
        beam[nbeam++] = next[i];
      } else {
        s_state_free(next[i], p->nrels);
        free(next[i]);
      }
    }
  }
  if (rc) goto done;
  /* Alternatives: single-node plans list every candidate; longer plans
  ** the beam's survivors. */
  o->alt = calloc(TO_MAX_ALTS + 1, sizeof *o->alt);
  if (!o->alt) {
    rc = TR_ENOMEM;
    goto done;
  }
  for (int b = 0; b < nbeam && o->nalt < TO_MAX_ALTS; b++) {
    struct to_alt *a = &o->alt[o->nalt++];
    size_t w = 0;
    a->floats = beam[b]->floats;
    a->cost = beam[b]->cost;
    for (int k = 0; k < p->nnodes; k++) {
      a->choice[k] = cands[k].c[beam[b]->pick[k]];
      if (p->nnodes > 1)
        w += (size_t)snprintf(a->name + w, w < sizeof a->name ? sizeof a->name - w : 0, "%s%s: %s",
                              k ? " | " : "", p->rels[p->nodes[k].out].meta.name, a->choice[k].name);
      else
        snprintf(a->name, sizeof a->name, "%s", a->choice[k].name);
    }
  }
  /* Alternatives with the same name (equal moves reached by different
  ** rewrites) keep the first, cheapest. */
  for (int i = 1; i < o->nalt; i++)
    for (int j = 0; j < i; j++)
      if (!strcmp(o->alt[i].name, o->alt[j].name)) {
        memmove(&o->alt[i], &o->alt[i + 1], sizeof *o->alt * (size_t)(o->nalt - i - 1));
        o->nalt--;
        i--;
        break;
      }
  o->chosen = 0;
  if (force) {
    int hit = -1, nhit = 0;
    for (int i = 0; i < o->nalt; i++)
      if (s_strcaseeq(o->alt[i].name, force)) hit = i, nhit = 1;
    if (hit < 0)
      for (int i = 0; i < o->nalt; i++) {
        size_t fl = strlen(force);
        if (!strncasecmp(o->alt[i].name, force, fl) && (o->alt[i].name[fl] == '[' || !o->alt[i].name[fl])) {
          if (!nhit) hit = i;
          nhit++;
        }
      }
    if (hit < 0 || nhit > 1) {
      char names[2048];
      size_t w = 0;
      for (int i = 0; i < o->nalt && w < sizeof names; i++)
        w += (size_t)snprintf(names + w, sizeof names - w, "%s'%s'", i ? ", " : "", o->alt[i].name);
      rc = tr_seterr(err, TR_ENOTFOUND, "%s plan '%s'; the plans are: %s",
                     nhit > 1 ? "more than one" : "no", force, names);
      goto done;
    }
    o->chosen = hit;
  }
  /* The predicted transfer of the plan that runs, node by node. */
  {
    to_placed *cur = calloc(TA_MAX_RELS, sizeof *cur);
    if (!cur) {
      rc = TR_ENOMEM;
      goto done;
    }
    for (int i = 0; i < p->nrels && !rc; i++) rc = s_placed_copy(&cur[i], &pl[i]);
    for (int k = 0; k < p->nnodes && !rc; k++) {
      to_moves *mvp = &o->moves[k], mv;
      o->choice[k] = o->alt[o->chosen].choice[k];
      rc = to_moves_compute(p, k, &o->choice[k], m, repl, cur, mvp, 1, err);
      if (rc) break;
      mv = *mvp;
      o->node_floats[k] = mv.total;
      o->imbalance += (m * mv.work_max - mv.work_total) / TO_WORK_PER_FLOAT;
      memcpy(o->in_floats[k], mv.in_floats, sizeof mv.in_floats);
      o->partial_floats[k] = mv.partial_floats;
      o->total += mv.total;
      if (p->rels[p->nodes[k].out].kind == TA_REL_OUTPUT) {
        const tr_tensor *om = &p->rels[p->nodes[k].out].meta;
        int64_t nf = 1;
        for (int d = 0; d < om->rank; d++) nf *= om->shape[d];
        o->repl_floats += nf * (repl - 1);
      }
    }
    for (int i = 0; i < TA_MAX_RELS; i++) to_placed_free(&cur[i]);
    free(cur);
    o->total += o->repl_floats;
    for (int i = 0; i < o->nalt; i++) {
      o->alt[i].floats += o->repl_floats;
      o->alt[i].cost += (double)o->repl_floats;
    }
  }
done:
  for (int b = 0; b < nbeam; b++) {
    s_state_free(beam[b], p->nrels);
    free(beam[b]);
  }
  free(beam);
  free(next);
  free(cands);
  o->ms = (tr_now() - t0) * 1e3;
  if (rc == TR_ENOMEM) tr_seterr(err, rc, "out of memory");
  if (rc) to_opt_free(o);
  return rc;
}

/* ---- EXPLAIN ------------------------------------------------------------------ */

typedef struct s_out {
  char *s;
  size_t n, cap;
  int oom;
} s_out;

static void s_put(s_out *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_put(s_out *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    size_t room = b->cap - b->n;
    va_start(ap, fmt);
    int w = vsnprintf(b->s ? b->s + b->n : NULL, room, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    if ((size_t)w < room) {
      b->n += (size_t)w;
      return;
    }
    size_t cap = (b->cap + (size_t)w + 1) * 2;
    char *ns = realloc(b->s, cap);
    if (!ns) {
      b->oom = 1;
      return;
    }
    b->s = ns;
    b->cap = cap;
  }
}

/* JSON string contents. */
static void s_put_js(s_out *b, const char *t) {
  for (const unsigned char *c = (const unsigned char *)t; *c; c++) {
    if (*c == '"' || *c == '\\') s_put(b, "\\%c", *c);
    else if (*c == '\n') s_put(b, "\\n");
    else if (*c < 0x20) s_put(b, "\\u%04x", *c);
    else s_put(b, "%c", *c);
  }
}

static char *s_done(s_out *b) {
  if (b->oom) {
    free(b->s);
    return NULL;
  }
  if (!b->s) return calloc(1, 1);
  return b->s;
}

/* One IA operator of the chosen plan, for all three formats. */
typedef struct s_iaop {
  const char *op;     /* bcast, shuffle, local_join, local_agg, local_filter, local_map */
  char what[160];     /* relation and detail */
  char labels[96];    /* partitioning labels */
  int64_t floats;     /* predicted floats moved */
  int depth;          /* in the tree */
  int sites;          /* sites it runs on / sends to */
} s_iaop;

/* The operators of node k under choice c, root first. */
static int s_ia_ops(const ta_plan *p, int k, const to_opt *o, s_iaop *ops) {
  const ta_node *n = &p->nodes[k];
  const to_choice *c = &o->choice[k];
  const char *out = p->rels[n->out].meta.name;
  static const char *const aggname[] = {"NONE", "SUM", "MAX", "MIN"};
  s_ctx x;
  int no = 0, d = 0;
  s_ctx_init(&x, p, k);
#define OP(o_, ...) do { s_iaop *q = &ops[no++]; memset(q, 0, sizeof *q); q->op = o_; q->depth = d; \
                         q->sites = o->m; snprintf(q->what, sizeof q->what, __VA_ARGS__); } while (0)
  if (n->post.n && !n->agg) {
    OP("local_map", "%s (transform, composed with the join: R1-7)", out);
    d++;
  }
  if (n->agg) {
    OP("local_agg", "%s group by output labels, %s%s%s", out, aggname[n->agg],
       c->twophase ? ", combining partials" : "", n->post.n ? ", then the transform (R1-4)" : "");
    s_label_text(&x, x.G, ops[no - 1].labels, sizeof ops[no - 1].labels);
    d++;
    if (c->twophase) {
      OP("shuffle", "partials of %s", out);
      s_label_text(&x, c->agg_part, ops[no - 1].labels, sizeof ops[no - 1].labels);
      ops[no - 1].floats = o->partial_floats[k];
      d++;
      OP("local_agg", "%s partial, per site (R2-5)", out);
      d++;
    }
  }
  OP("local_join", "%s (kernel %s)%s", out, n->gemm ? "gemm" : "contract",
     c->drive >= 0 ? "" : ", by output chunk");
  if (c->drive >= 0) snprintf(ops[no - 1].labels, sizeof ops[no - 1].labels, "follows %s", s_opname(&x, c->drive));
  d++;
  for (int i = 0; i < n->ninputs; i++) {
    const char *nm = s_opname(&x, i);
    int base = d;
    int diag = (x.diag >> i) & 1, rech = (x.rechunk >> i) & 1;
    if (c->late[i] && diag) {
      OP("local_filter", "%s diagonal keys (after the move)", nm);
      d++;
    }
    if (rech) {
      OP("local_map", "%s re-chunk (tile + concat)", nm);
      d++;
    }
    if (c->mv[i] == TO_MV_BCAST) {
      OP("bcast", "%s", nm);
    } else if (c->mv[i] == TO_MV_SHUF || c->mv[i] == TO_MV_DUP) {
      OP("shuffle", "%s%s", nm, i == c->drive ? "" : " (to the sites its join tuples run on)");
      if (i == c->drive || c->mv[i] == TO_MV_DUP) s_label_text(&x, c->part, ops[no - 1].labels, sizeof ops[no - 1].labels);
    }
    if (c->mv[i] != TO_MV_KEEP) {
      ops[no - 1].floats = o->in_floats[k][i];
      d++;
    }
    if (c->mv[i] == TO_MV_DUP) {
      OP("local_map", "%s duplicate over the output labels it lacks (RMM)", nm);
      d++;
    }
    if (diag && !c->late[i]) {
      OP("local_filter", "%s diagonal keys (before the move)", nm);
      d++;
    }
    OP(NULL, "%s%s%s", nm, p->rels[n->in[i].rel].kind == TA_REL_STORED ? "" : " (temporary)",
       c->mv[i] != TO_MV_KEEP ? "" : i == c->drive ? ", in place (drives the join)" : ", in place (co-partitioned)");
    d = base;
  }
#undef OP
  return no;
}

static const char *s_kindname(const s_iaop *q) { return q->op ? q->op : "scan"; }

char *to_opt_text(const ta_plan *p, const to_opt *o, const char *tra) {
  s_out b = {0};
  s_iaop ops[64];
  if (tra) s_put(&b, "%s", tra);
  s_put(&b, "IA plan on %d sites: %s\n", o->m, o->alt[o->chosen].name);
  for (int k = 0; k < p->nnodes; k++) {
    int no = s_ia_ops(p, k, o, ops);
    if (p->nnodes > 1) s_put(&b, "  node %d -> %s: %s\n", k + 1, p->rels[p->nodes[k].out].meta.name, o->choice[k].name);
    for (int i = 0; i < no; i++) {
      const s_iaop *q = &ops[i];
      s_put(&b, "  %*s%s %s", 2 * q->depth, "", s_kindname(q), q->what);
      if (q->labels[0]) s_put(&b, " [%s]", q->labels);
      if (q->op && (!strcmp(q->op, "bcast") || !strcmp(q->op, "shuffle")))
        s_put(&b, "  predicted %lld floats", (long long)q->floats);
      s_put(&b, "\n");
    }
    s_put(&b, "  %*sIA expression: %s\n", 2, "", o->choice[k].ia);
    if (o->choice[k].rules[0]) s_put(&b, "  %*srules: %s\n", 2, "", o->choice[k].rules);
  }
  if (o->repl_floats) s_put(&b, "  replication of the output: %lld floats\n", (long long)o->repl_floats);
  s_put(&b, "Predicted transfer: %lld floats (work imbalance: %.0f float-equivalents)\n", (long long)o->total,
        o->imbalance);
  s_put(&b, "Alternatives (%d distinct of %d IA plans reached, %.2f ms), by cost = floats moved + imbalance:\n",
        o->nalt, o->ntrees, o->ms);
  for (int i = 0; i < o->nalt; i++)
    s_put(&b, "  %14lld floats  cost %14.0f  %s%s\n", (long long)o->alt[i].floats, o->alt[i].cost,
          o->alt[i].name, i == o->chosen ? "  <- chosen" : "");
  return s_done(&b);
}

char *to_opt_json(const ta_plan *p, const to_opt *o, const char *tra) {
  s_out b = {0};
  s_iaop ops[64];
  s_put(&b, "\"sites\": %d, ", o->m);
  if (tra) {
    s_put(&b, "\"tra\": \"");
    s_put_js(&b, tra);
    s_put(&b, "\", ");
  }
  s_put(&b, "\"predicted_transfer_floats\": %lld, \"chosen\": {\"name\": \"", (long long)o->total);
  s_put_js(&b, o->alt[o->chosen].name);
  s_put(&b, "\", \"predicted_transfer_floats\": %lld, \"replication_floats\": %lld, \"nodes\": [",
        (long long)o->total, (long long)o->repl_floats);
  for (int k = 0; k < p->nnodes; k++) {
    s_put(&b, "%s{\"output\": \"", k ? ", " : "");
    s_put_js(&b, p->rels[p->nodes[k].out].meta.name);
    s_put(&b, "\", \"name\": \"");
    s_put_js(&b, o->choice[k].name);
    s_put(&b, "\", \"predicted_transfer_floats\": %lld, \"ia_expression\": \"", (long long)o->node_floats[k]);
    s_put_js(&b, o->choice[k].ia);
    s_put(&b, "\", \"rules\": \"");
    s_put_js(&b, o->choice[k].rules);
    s_put(&b, "\"}");
  }
  s_put(&b, "], \"ia\": [");
  int first = 1;
  for (int k = 0; k < p->nnodes; k++) {
    int no = s_ia_ops(p, k, o, ops);
    for (int i = 0; i < no; i++) {
      const s_iaop *q = &ops[i];
      if (!q->op) continue;
      s_put(&b, "%s{\"op\": \"%s\", \"node\": %d, \"depth\": %d, \"relation\": \"", first ? "" : ", ", q->op,
            k + 1, q->depth);
      s_put_js(&b, q->what);
      s_put(&b, "\", \"labels\": \"");
      s_put_js(&b, q->labels);
      s_put(&b, "\", \"sites\": %d, \"predicted_floats\": %lld}", q->sites, (long long)q->floats);
      first = 0;
    }
  }
  s_put(&b, "]}, \"alternatives\": [");
  for (int i = 0; i < o->nalt; i++) {
    s_put(&b, "%s{\"name\": \"", i ? ", " : "");
    s_put_js(&b, o->alt[i].name);
    s_put(&b, "\", \"predicted_transfer_floats\": %lld, \"cost\": %.0f, \"chosen\": %s}",
          (long long)o->alt[i].floats, o->alt[i].cost, i == o->chosen ? "true" : "false");
  }
  s_put(&b, "], \"ia_plans_reached\": %d, \"optimize_ms\": %.3f, \"rules_fired\": {", o->ntrees, o->ms);
  for (int r = 0; r < S_NRULES; r++) s_put(&b, "%s\"%s\": %d", r ? ", " : "", s_rule_name[r], o->fired[r]);
  s_put(&b, "}");
  return s_done(&b);
}

char *to_opt_dot(const ta_plan *p, const to_opt *o) {
  s_out b = {0};
  s_iaop ops[64];
  s_put(&b, "digraph plan {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n");
  s_put(&b, "  label=\"");
  s_put_js(&b, o->alt[o->chosen].name);
  s_put(&b, ": %lld floats on %d sites\";\n", (long long)o->total, o->m);
  for (int k = 0; k < p->nnodes; k++) {
    int no = s_ia_ops(p, k, o, ops);
    int parent[64];
    for (int i = 0; i < no; i++) {
      const s_iaop *q = &ops[i];
      s_put(&b, "  n%d_%d [label=\"%s ", k, i, s_kindname(q));
      s_put_js(&b, q->what);
      if (q->labels[0]) {
        s_put(&b, "\\n[");
        s_put_js(&b, q->labels);
        s_put(&b, "]");
      }
      if (q->op && (!strcmp(q->op, "bcast") || !strcmp(q->op, "shuffle")))
        s_put(&b, "\\n%lld floats", (long long)q->floats);
      s_put(&b, "\"%s];\n", q->op ? "" : ", shape=ellipse");
      parent[i] = -1;
      for (int j = i - 1; j >= 0; j--)
        if (ops[j].depth == q->depth - 1) {
          parent[i] = j;
          break;
        }
      if (parent[i] >= 0) s_put(&b, "  n%d_%d -> n%d_%d;\n", k, i, k, parent[i]);
    }
  }
  s_put(&b, "}\n");
  return s_done(&b);
}
