/*
** optimize/rules.c - the rewrite rules, one function each in one table:
** the TRA paper's R1-1..R1-7 (kernel composition) and R2-1..R2-7
** (re-partitioning), and the domain rules RMM and LOCAL.
*/
#include "config.h"
#include "optimize/optimize_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Where a rule puts the plans it makes: out[0..max), *nout used. */
typedef struct s_emit {
  oi_tree *out; /* results */
  int *nout;   /* used */
  int max;     /* room */
} s_emit;

/* A copy of t to rewrite into the next slot, or NULL when there is no
** room (the rule then stops: later results would not fit either). */
static oi_tree *s_emit_begin(s_emit *em, const oi_tree *t) {
  if (*em->nout >= em->max) return NULL;
  em->out[*em->nout] = *t;
  return &em->out[*em->nout];
}

/* The slot s_emit_begin gave is a result. */
static void s_emit_end(s_emit *em) {
  oi_normalize(&em->out[*em->nout]);
  (*em->nout)++;
}

/* Every rule is a function that rewrites op `at` of t (whose first child
** is c), emitting each plan it reaches; a rule that does not apply emits
** nothing. */
typedef void s_rule_fn(const oi_ctx *x, const oi_tree *t, int at, s_emit *em);

/* filter(f1, filter(f2, R)) = filter(f1 and f2, R) */
static void s_r1_1(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  (void)x;
  if (o->kind == IA_FILTER && c->kind == IA_FILTER) {
    oi_tree *u = s_emit_begin(em, t);
    if (!u) return;
    u->op[at].lab |= c->lab;
    u->op[at].kid[0] = c->kid[0];
    s_emit_end(em);
  }
}

/* map(map(R)) = map(composed), both arity one, key maps id */
static void s_r1_2(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  (void)x;
  if (o->kind == IA_MAP && c->kind == IA_MAP) {
    oi_tree *u = s_emit_begin(em, t);
    if (!u) return;
    u->op[at].npost = (int8_t)(o->npost + c->npost);
    u->op[at].kid[0] = c->kid[0];
    s_emit_end(em);
  }
}

/* map and filter commute when the key map is the identity */
static void s_r1_3(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  (void)x;
  if ((o->kind == IA_MAP && c->kind == IA_FILTER) || (o->kind == IA_FILTER && c->kind == IA_MAP)) {
    oi_tree *u = s_emit_begin(em, t);
    if (!u) return;
    oi_swap(u, at);
    s_emit_end(em);
  }
}

/* map(child) = child with the map's functions composed after its own
** (R1-4 for an aggregation, R1-7 for a join). */
static void s_compose_map(const oi_tree *t, int at, s_emit *em, int child_kind) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  if (o->kind == IA_MAP && c->kind == child_kind) {
    oi_tree *u = s_emit_begin(em, t);
    if (!u) return;
    int8_t np = o->npost;
    oi_lift(u, at);
    u->op[at].npost = (int8_t)(u->op[at].npost + np);
    s_emit_end(em);
  }
}

/* map(agg(R)) = agg with the map composed (key map id) */
static void s_r1_4(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  (void)x;
  s_compose_map(t, at, em, IA_AGG);
}

/* filter(agg(R)) = agg with the filter composed, if the
** filter only reads group-by keys */
static void s_r1_5(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  if (o->kind == IA_FILTER && c->kind == IA_AGG) {
    unsigned fl = 0;
    for (int i = 0; i < x->nin; i++)
      if (o->lab & (1u << i)) fl |= x->dlab[i];
    if ((fl & ~c->lab) == 0) {
      oi_tree *u = s_emit_begin(em, t);
      if (!u) return;
      unsigned f = o->lab;
      oi_lift(u, at);
      u->op[at].fl |= f;
      s_emit_end(em);
    }
  }
}

/* filter(join(L, R)) = join(filter(L), filter(R)): the
** filter checks only keys of the operands it names */
static void s_r1_6(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  (void)x;
  if (o->kind == IA_FILTER && c->kind == IA_JOIN) {
    oi_tree *u = s_emit_begin(em, t);
    if (!u) return;
    unsigned f = o->lab;
    oi_lift(u, at);
    for (int i = 0; i < u->op[at].nk; i++) {
      int k = u->op[at].kid[i];
      unsigned fi = f & oi_operands_of(u, k);
      if (fi && oi_wrap(u, k, IA_FILTER, fi) < 0) return;
    }
    s_emit_end(em);
  }
}

/* map(join(..)) = join with the map composed */
static void s_r1_7(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  (void)x;
  s_compose_map(t, at, em, IA_JOIN);
}

/* only the last of two moves matters */
static void s_r2_1(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  (void)x;
  if (oi_move(o) && oi_move(c)) {
    oi_tree *u = s_emit_begin(em, t);
    if (!u) return;
    u->op[at].kid[0] = c->kid[0];
    s_emit_end(em);
  }
}

/* moves commute with filters */
static void s_r2_2(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  (void)x;
  if ((oi_move(o) && c->kind == IA_FILTER) || (o->kind == IA_FILTER && oi_move(c))) {
    oi_tree *u = s_emit_begin(em, t);
    if (!u) return;
    oi_swap(u, at);
    s_emit_end(em);
  }
}

/* bcast commutes with any map; shuf with maps whose key map
** is the identity (not a re-chunking) */
static void s_r2_3(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  (void)x;
  if ((o->kind == IA_BCAST && (c->kind == IA_MAP || c->kind == IA_RECHUNK)) ||
      ((c->kind == IA_BCAST) && (o->kind == IA_MAP || o->kind == IA_RECHUNK)) ||
      (o->kind == IA_SHUF && c->kind == IA_MAP) || (o->kind == IA_MAP && c->kind == IA_SHUF)) {
    oi_tree *u = s_emit_begin(em, t);
    if (!u) return;
    oi_swap(u, at);
    s_emit_end(em);
  }
}

/* agg_G(shuf_D(R)) = agg_G(R) if R is partitioned on a subset
** of G; and a shuffle on any non-empty subset of G is enough */
static void s_r2_4(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  (void)x;
  if (o->kind == IA_AGG && c->kind == IA_SHUF) {
    unsigned pl = 0;
    int pk = oi_part(t, c->kid[0], &pl);
    if (pk == 'S' || (pk == 'H' && pl && (pl & ~o->lab) == 0)) {
      oi_tree *u = s_emit_begin(em, t);
      if (!u) return;
      u->op[at].kid[0] = c->kid[0];
      s_emit_end(em);
    }
    for (unsigned d = (c->lab - 1) & c->lab; d; d = (d - 1) & c->lab) {
      oi_tree *u = s_emit_begin(em, t);
      if (!u) return;
      u->op[o->kid[0]].lab = d;
      s_emit_end(em);
    }
  }
}

/* two-phase aggregation when R is only partly partitioned */
static void s_r2_5(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  (void)x;
  if (o->kind == IA_AGG && c->kind == IA_SHUF && t->op[c->kid[0]].kind != IA_PAGG) {
    unsigned pl = 0;
    int pk = oi_part(t, c->kid[0], &pl);
    if (!(pk == 'H' && pl && (pl & ~o->lab) == 0)) {
      oi_tree *u = s_emit_begin(em, t);
      if (!u) return;
      if (oi_wrap(u, c->kid[0], IA_PAGG, o->lab) < 0) return;
      s_emit_end(em);
    }
  }
}

/* join(bcast(L), R) = join(L, bcast(R)) =
** join(shuf_jk(L), shuf_jk(R)) */
static void s_r2_6(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at];
  if (o->kind == IA_JOIN) {
    int nb = 0, keep = -1;
    for (int i = 0; i < o->nk; i++) {
      if (t->op[o->kid[i]].kind == IA_BCAST) nb++;
      else keep = i;
    }
    if (nb != o->nk - 1 || keep < 0) return;
    for (int i = 0; i < o->nk; i++) {
      if (i == keep) continue;
      oi_tree *u = s_emit_begin(em, t);
      if (!u) return;
      oi_lift(u, u->op[at].kid[i]);
      if (oi_wrap(u, u->op[at].kid[keep], IA_BCAST, 0) < 0) return;
      s_emit_end(em);
    }
    unsigned jk = ~0u;
    for (int i = 0; i < o->nk; i++) jk &= oi_labels_of(x, t, o->kid[i]);
    if (jk) {
      oi_tree *u = s_emit_begin(em, t);
      if (!u) return;
      for (int i = 0; i < o->nk; i++) {
        int k = u->op[at].kid[i];
        if (u->op[k].kind == IA_BCAST) oi_lift(u, k);
        if (oi_wrap(u, k, IA_SHUF, jk) < 0) return;
      }
      s_emit_end(em);
    }
  }
}

/* shuf_D(join(bcast(L), R)) = join(bcast(L), shuf_D(R)) if
** D are labels of R; shuf_D(join(shuf_J(L), shuf_J(R))) =
** join(shuf_D(L), shuf_D(R)) if D is a subset of J */
static void s_r2_7(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  if (o->kind == IA_SHUF && c->kind == IA_JOIN) {
    int nb = 0, keep = -1, nshuf = 0;
    for (int i = 0; i < c->nk; i++) {
      const oi_op *k = &t->op[c->kid[i]];
      if (k->kind == IA_BCAST) nb++;
      else keep = i;
      nshuf += k->kind == IA_SHUF && (o->lab & ~k->lab) == 0;
    }
    if (nb == c->nk - 1 && keep >= 0 && (o->lab & ~oi_labels_of(x, t, c->kid[keep])) == 0) {
      oi_tree *u = s_emit_begin(em, t);
      if (!u) return;
      unsigned d = o->lab;
      oi_lift(u, at);
      int k = u->op[at].kid[keep];
      if (u->op[k].kind == IA_SHUF) u->op[k].lab = d;
      else if (oi_wrap(u, k, IA_SHUF, d) < 0) return;
      s_emit_end(em);
    } else if (nshuf == c->nk) {
      oi_tree *u = s_emit_begin(em, t);
      if (!u) return;
      unsigned d = o->lab;
      oi_lift(u, at);
      for (int i = 0; i < u->op[at].nk; i++) u->op[u->op[at].kid[i]].lab = d;
      s_emit_end(em);
    }
  }
}

/* agg_G(shuf_D(join(..))), D a subset of G: replicate each
** input over the labels of D it lacks, shuffle on D, join
** and aggregate where the output lives */
static void s_rmm(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at], *c = &t->op[o->kid[0]];
  if (o->kind == IA_AGG && c->kind == IA_SHUF && t->op[c->kid[0]].kind == IA_JOIN &&
      (c->lab & ~o->lab) == 0) {
    oi_tree *u = s_emit_begin(em, t);
    if (!u) return;
    unsigned d = c->lab;
    u->op[at].kid[0] = c->kid[0];
    int j = u->op[at].kid[0];
    int dup = 0;
    for (int i = 0; i < u->op[j].nk; i++) {
      int k = u->op[j].kid[i];
      while (oi_move(&u->op[k])) oi_lift(u, k);
      unsigned lk = oi_labels_of(x, u, k);
      if (d & ~lk) {
        if (oi_wrap(u, k, IA_DUP, d & ~lk) < 0) return;
        dup = 1;
      }
      if (oi_wrap(u, k, IA_SHUF, d) < 0) return;
    }
    if (!dup) return; /* nothing replicated: an R2-7 plan */
    s_emit_end(em);
  }
}

/* join(bcast(L), R) = join(L, R) when L and R are already
** co-partitioned on the join keys (checked on the
** catalog's placement when the plan is costed) */
static void s_local(const oi_ctx *x, const oi_tree *t, int at, s_emit *em) {
  const oi_op *o = &t->op[at];
  (void)x;
  if (o->kind == IA_JOIN) {
    for (int i = 0; i < o->nk; i++) {
      const oi_op *k = &t->op[o->kid[i]];
      if (k->kind != IA_BCAST) continue;
      unsigned pl = 0;
      int others_stored = 1;
      for (int j = 0; j < o->nk; j++)
        if (j != i && t->op[o->kid[j]].kind != IA_BCAST) others_stored &= oi_part(t, o->kid[j], &pl) == 'S';
      if (!others_stored || oi_part(t, k->kid[0], &pl) != 'S') continue;
      oi_tree *u = s_emit_begin(em, t);
      if (!u) return;
      oi_lift(u, u->op[at].kid[i]);
      s_emit_end(em);
    }
  }
}

/* The rules, in the order they are tried: the TRA paper's R1-1..R1-7
** (kernel composition) and R2-1..R2-7 (re-partitioning), then the two
** domain rules.  Their names are what EXPLAIN reports. */
static const struct s_rule {
  const char *name;
  s_rule_fn *fn;
} s_rules[] = {
  {"R1-1", s_r1_1},
  {"R1-2", s_r1_2},
  {"R1-3", s_r1_3},
  {"R1-4", s_r1_4},
  {"R1-5", s_r1_5},
  {"R1-6", s_r1_6},
  {"R1-7", s_r1_7},
  {"R2-1", s_r2_1},
  {"R2-2", s_r2_2},
  {"R2-3", s_r2_3},
  {"R2-4", s_r2_4},
  {"R2-5", s_r2_5},
  {"R2-6", s_r2_6},
  {"R2-7", s_r2_7},
  {"RMM", s_rmm},
  {"LOCAL", s_local},
};

#define S_NRULES ((int)(sizeof s_rules / sizeof s_rules[0]))
_Static_assert(sizeof s_rules / sizeof s_rules[0] <= TO_MAX_RULES, "to_opt.fired counts every rule");

int oi_rule_count(void) { return S_NRULES; }

const char *oi_rule_name(int r) { return s_rules[r].name; }

/* Apply rule r at op `at` of t; each result goes to out[*nout]. */
void oi_apply(const oi_ctx *x, const oi_tree *t, int at, int r, oi_tree *out, int *nout, int max) {
  s_emit em = {out, nout, max};
  if (!t->op[at].nk) return; /* a scan: no rule rewrites it alone */
  s_rules[r].fn(x, t, at, &em);
}
