/*
** optimize/lower.c - an IA plan tree lowered to what the executor runs (a
** to_choice: which operand stays, moves or drives the join, and how the
** aggregation runs), and its name (BMM, CMM, RMM, LOCAL, 2-phase).
*/
#include "config.h"
#include "optimize/optimize_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Walk one join input from the top: its move (at most one: R2-1 first),
** the labels it is shuffled on or replicated over, and whether its
** diagonal filter runs after the move.  0 if the executor cannot run it. */
static int s_lower_input(const oi_tree *t, int at, int *operand, int *mv, unsigned *shuf,
                         unsigned *dup, int *late) {
  int filter_first = 0, moved = 0;
  *mv = TO_MV_KEEP;
  *shuf = *dup = 0;
  *late = 0;
  for (;;) {
    const oi_op *o = &t->op[at];
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

static void s_name(const oi_ctx *x, to_choice *c) {
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
    oi_label_text(x, c->part, l, sizeof l);
    W("RMM[%s]", l);
  } else if (ndup) {
    oi_label_text(x, c->part, l, sizeof l);
    W("BMM[");
    for (int i = 0; i < x->nin; i++)
      if (c->mv[i] == TO_MV_DUP) W("replicate %s; ", oi_opname(x, i));
    for (int i = 0, f = 1; i < x->nin; i++)
      if (c->mv[i] != TO_MV_DUP) {
        W("%s%s %s", f ? "" : ", ", oi_opname(x, i), c->mv[i] == TO_MV_BCAST ? "bcast" : "by");
        f = 0;
      }
    W(" %s]", l);
  } else if (!nb && nshuf && shuf_on_k && c->twophase) {
    oi_label_text(x, c->part, l, sizeof l);
    W("CMM[%s]", l);
  } else if (!nb && nshuf == 0) {
    W("LOCAL");
  } else {
    W("%s[", nb ? "BMM" : "SHUF");
    int first = 1;
    for (int i = 0; i < x->nin; i++)
      if (c->mv[i] == TO_MV_BCAST) {
        W("%sbcast %s", first ? "" : ", ", oi_opname(x, i));
        first = 0;
      }
    for (int i = 0; i < x->nin; i++) {
      if (c->mv[i] == TO_MV_BCAST) continue;
      /* with no drive, every operand shuffled is sent where its output
      ** chunks are: by the output labels (none: to the one output chunk,
      ** `SHUF[]`) */
      if (c->mv[i] == TO_MV_SHUF && (i == c->drive || (c->drive < 0 && c->part))) {
        oi_label_text(x, c->part, l, sizeof l);
        W("%s%s by %s", first ? "" : "; ", oi_opname(x, i), l);
      } else if (c->mv[i] == TO_MV_KEEP && i == c->drive) {
        W("%s%s in place", first ? "" : "; ", oi_opname(x, i));
      } else {
        continue;
      }
      first = 0;
    }
    W("]");
  }
  if (c->twophase && !(ndup == 0 && !nb && shuf_on_k)) {
    oi_label_text(x, c->agg_part, l, sizeof l);
    W(" 2-phase[%s]", l);
  }
  for (int i = 0; i < x->nin; i++)
    if (c->late[i]) W(" late-filter %s", oi_opname(x, i));
#undef W
  snprintf(c->name, sizeof c->name, "%s", b);
}

/* Lower tree t to a choice; 0 if the executor cannot run it as it is. */
int oi_lower(const oi_ctx *x, const oi_tree *t, to_choice *c) {
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
    if (t->op[a].kind == IA_FILTER && (oi_operands_of(t, a) & (oi_operands_of(t, a) - 1))) return 0;
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
  if (drive >= 0 && (x->rechunk >> drive & 1u) && !x->cut) {
    /* One operand aggregated by partials shuffled on output labels: its
    ** pieces are sent where their output chunk is (below) and aggregated
    ** there, in one phase (a MIN of a vector the layout gave other chunks,
    ** as in a block's last step), where every plan was refused before. */
    if (pagg) {
      if (x->nin > 1 || (shuf & ~x->G)) return 0;
      part = x->G;
      pagg = 0;
    }
    if (c->mv[drive] == TO_MV_KEEP) {
      /* the tuples run where their output chunk is, so no operand is
      ** read in place: each is sent there, as a shuffle on the output
      ** labels (a transpose, or an outer product, into a tensor declared
      ** in other chunks than its operands had no plan at all) */
      part = x->G;
      for (int i = 0; i < x->nin; i++)
        if (c->mv[i] == TO_MV_KEEP) c->mv[i] = TO_MV_SHUF;
    } else if (part & ~x->G) {
      return 0;
    }
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
