/*
** optimize/explain.c - EXPLAIN of an optimized plan: text, JSON and
** Graphviz.
*/
#include "config.h"
#include "optimize/optimize_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
  oi_ctx x;
  int no = 0, d = 0;
  oi_ctx_init(&x, p, k);
#define OP(o_, ...) do { s_iaop *q = &ops[no++]; memset(q, 0, sizeof *q); q->op = o_; q->depth = d; \
                         q->sites = o->m; snprintf(q->what, sizeof q->what, __VA_ARGS__); } while (0)
  if (n->post.n && !n->agg) {
    OP("local_map", "%s (transform, composed with the join: R1-7)", out);
    d++;
  }
  if (n->agg) {
    OP("local_agg", "%s group by output labels, %s%s%s", out, aggname[n->agg],
       c->twophase ? ", combining partials" : "", n->post.n ? ", then the transform (R1-4)" : "");
    oi_label_text(&x, x.G, ops[no - 1].labels, sizeof ops[no - 1].labels);
    d++;
    if (c->twophase) {
      OP("shuffle", "partials of %s", out);
      oi_label_text(&x, c->agg_part, ops[no - 1].labels, sizeof ops[no - 1].labels);
      ops[no - 1].floats = o->partial_floats[k];
      d++;
      OP("local_agg", "%s partial, per site (R2-5)", out);
      d++;
    }
  }
  OP("local_join", "%s (kernel %s)%s%s", out, n->gemm ? "gemm" : "contract",
     c->drive >= 0 ? "" : ", by output chunk",
     o->moves[k].mirror ? ", blocks below the diagonal transposed from their mirrors" : "");
  if (c->drive >= 0) snprintf(ops[no - 1].labels, sizeof ops[no - 1].labels, "follows %s", oi_opname(&x, c->drive));
  d++;
  for (int i = 0; i < n->ninputs; i++) {
    const char *nm = oi_opname(&x, i);
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
      if (i == c->drive || c->mv[i] == TO_MV_DUP) oi_label_text(&x, c->part, ops[no - 1].labels, sizeof ops[no - 1].labels);
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

/* " (gemm 0.1 s, net 0.02 s, ..)": a cost's seconds by component. */
static void s_components(tr_text *b, const tl_weights *w, const tl_cost *c) {
  int first = 1;
  for (int k = 0; k < TL_NCOST; k++) {
    double t = w->w[k] * c->c[k];
    if (!(t > 0)) continue;
    tr_text_put(b, "%s%s %.3g s", first ? " (" : ", ", tl_cost_name(k), t);
    first = 0;
  }
  if (!first) tr_text_put(b, ")");
}

/* The layout line: what the chunking search did. */
static void s_layout_text(tr_text *b, const to_opt *o) {
  const to_layout_info *l = &o->layout;
  if (!l->ran) {
    tr_text_put(b, "Layout: declared (each node in the chunking its stored operands have)\n");
    return;
  }
  const char *how = !l->dag ? "tree DP" : l->linearised ? "DP along paths" : "frontier DP";
  const char *cut = l->cut ? ", stored operands cut into its chunks where they are" : "";
  if (l->remembered)
    tr_text_put(b, "Layout: auto, chunkings remembered from an earlier statement of the session with "
                   "the same plan, settings and placement (chosen by the %s over %d candidates for %d "
                   "pieces of work): ", how, l->candidates, l->pieces);
  else
    tr_text_put(b, "Layout: auto, chunkings chosen by the %s over %d candidates for %d pieces of work "
                   "(%.2f ms): ", how, l->candidates, l->pieces, l->ms);
  if (isnan(l->auto_s))
    tr_text_put(b, "none runs (%s); the declared chunking does (predicted %.3g s)\n",
                l->why[0] ? l->why : "no plan", l->declared_s);
  else if (isnan(l->declared_s))
    tr_text_put(b, "predicted %.3g s; the declared chunking cannot run%s\n", l->auto_s, cut);
  else if (l->declared_floor)
    tr_text_put(b, "predicted %.3g s, the declared chunking over %.3g s (its join tuples alone, not "
                   "searched): the chosen chunking runs%s\n", l->auto_s, l->declared_s, cut);
  else
    tr_text_put(b, "predicted %.3g s, the declared chunking %.3g s: the %s runs%s\n", l->auto_s,
                l->declared_s, l->used ? "chosen chunking" : "declared chunking",
                l->used ? cut : "");
}

/* into[k]: the node inside whose tasks node k runs, or -1 (dist/run.c
** runs the plan's groups so, when no scheduler places its tasks). */
static void s_fusion(const ta_plan *p, const to_opt *o, int *into) {
  for (int k = 0, e; k < p->nnodes; k = e) {
    e = to_group_end(p, o, k);
    to_group_fusion(p, o, k, e, into);
  }
}

char *to_opt_text(const ta_plan *p, const to_opt *o, const char *tra) {
  tr_text b = {0};
  s_iaop ops[64];
  int into[TA_MAX_NODES];
  s_fusion(p, o, into);
  if (tra) tr_text_put(&b, "%s", tra);
  s_layout_text(&b, o);
  tr_text_put(&b, "IA plan on %d sites: %s\n", o->m, o->alt[o->chosen].name);
  for (int k = 0; k < p->nnodes; k++) {
    int no = s_ia_ops(p, k, o, ops);
    if (p->nnodes > 1) tr_text_put(&b, "  node %d -> %s: %s\n", k + 1, p->rels[p->nodes[k].out].meta.name, o->choice[k].name);
    if (into[k] >= 0) {
      const char *pn = p->rels[p->nodes[into[k]].out].meta.name;
      tr_text_put(&b, "  runs inside node %d's tasks: each chunk of %s as soon as it is made, %s\n", into[k] + 1,
                  pn, to_fused_stored(p, into[k], k) ? "which is stored too" : "which is never stored");
    }
    for (int i = 0; i < no; i++) {
      const s_iaop *q = &ops[i];
      tr_text_put(&b, "  %*s%s %s", 2 * q->depth, "", s_kindname(q), q->what);
      if (q->labels[0]) tr_text_put(&b, " [%s]", q->labels);
      if (q->op && (!strcmp(q->op, "bcast") || !strcmp(q->op, "shuffle")))
        tr_text_put(&b, "  predicted %lld floats", (long long)q->floats);
      tr_text_put(&b, "\n");
    }
    tr_text_put(&b, "  %*sIA expression: %s\n", 2, "", o->choice[k].ia);
    if (o->choice[k].rules[0]) tr_text_put(&b, "  %*srules: %s\n", 2, "", o->choice[k].rules);
    tr_text_put(&b, "  %*spredicted %.3g s on its busiest site per phase", 2, "", o->node_s[k]);
    s_components(&b, &o->w, &o->node_cost[k]);
    tr_text_put(&b, "\n");
  }
  if (o->repl_floats) tr_text_put(&b, "  replication of the output: %lld floats\n", (long long)o->repl_floats);
  tr_text_put(&b, "Predicted: %.3g s (weights %s), transfer %lld floats\n", o->seconds,
              o->w.fitted ? "fitted by CALIBRATE" : "uncalibrated defaults", (long long)o->total);
  if (o->layout.narrowed)
    tr_text_put(&b, "Alternatives: the IA plan remembered with the chunkings, costed again (%.2f ms; EXPLAIN "
                    "without ANALYZE costs them all):\n", o->ms);
  else
    tr_text_put(&b, "Alternatives (%d distinct of %d IA plans reached, %.2f ms), by predicted seconds:\n",
                o->nalt, o->ntrees, o->ms);
  for (int i = 0; i < o->nalt; i++)
    tr_text_put(&b, "  %14lld floats  %9.3g s  %s%s\n", (long long)o->alt[i].floats, o->alt[i].cost,
          o->alt[i].name, i == o->chosen ? "  <- chosen" : "");
  return tr_text_done(&b);
}

/* ", "fused_into_product": "(X[n,d] - q[d])"": the elementwise factors
** node k's product computes tile by tile in its own task (none: nothing). */
static void s_fused_json(tr_text *b, const ta_plan *p, int k) {
  char *f = ta_node_fused(p, k);
  if (!f) return;
  tr_text_put(b, ", \"fused_into_product\": \"");
  tr_text_json(b, f);
  tr_text_put(b, "\"");
  free(f);
}

char *to_opt_json(const ta_plan *p, const to_opt *o, const char *tra) {
  tr_text b = {0};
  s_iaop ops[64];
  int into[TA_MAX_NODES];
  s_fusion(p, o, into);
  tr_text_put(&b, "\"sites\": %d, ", o->m);
  if (tra) {
    tr_text_put(&b, "\"tra\": \"");
    tr_text_json(&b, tra);
    tr_text_put(&b, "\", ");
  }
  tr_text_put(&b, "\"predicted_s\": %.6g, \"weights\": {\"fitted\": %s", o->seconds,
              o->w.fitted ? "true" : "false");
  for (int c = 0; c < TL_NCOST; c++) tr_text_put(&b, ", \"%s\": %.6g", tl_cost_name(c), o->w.w[c]);
  tr_text_put(&b, "}, \"layout\": {\"mode\": \"%s\"", o->layout.ran ? "auto" : "declared");
  if (o->layout.ran)
    tr_text_put(&b, ", \"chosen_chunking_runs\": %s, \"search\": \"%s\", \"candidates\": %d, "
                    "\"pieces\": %d, \"max_class\": %d, \"search_ms\": %.3f",
                o->layout.used ? "true" : "false",
                !o->layout.dag ? "tree" : o->layout.linearised ? "paths" : "frontier",
                o->layout.candidates, o->layout.pieces, o->layout.max_class, o->layout.ms);
  if (o->layout.ran)
    tr_text_put(&b, ", \"remembered\": %s, \"narrowed\": %s", o->layout.remembered ? "true" : "false",
                o->layout.narrowed ? "true" : "false");
  if (o->layout.ran && !isnan(o->layout.auto_s)) tr_text_put(&b, ", \"chosen_s\": %.6g", o->layout.auto_s);
  if (o->layout.ran && isnan(o->layout.auto_s) && o->layout.why[0]) {
    tr_text_put(&b, ", \"chosen_fails\": \"");
    tr_text_json(&b, o->layout.why);
    tr_text_put(&b, "\"");
  }
  if (o->layout.ran && !isnan(o->layout.declared_s))
    tr_text_put(&b, ", \"%s\": %.6g", o->layout.declared_floor ? "declared_over_s" : "declared_s",
                o->layout.declared_s);
  tr_text_put(&b, "}, \"predicted_transfer_floats\": %lld, \"chosen\": {\"name\": \"", (long long)o->total);
  tr_text_json(&b, o->alt[o->chosen].name);
  tr_text_put(&b, "\", \"predicted_s\": %.6g, \"predicted_transfer_floats\": %lld, \"replication_floats\": %lld, \"nodes\": [",
        o->seconds, (long long)o->total, (long long)o->repl_floats);
  for (int k = 0; k < p->nnodes; k++) {
    tr_text_put(&b, "%s{\"output\": \"", k ? ", " : "");
    tr_text_json(&b, p->rels[p->nodes[k].out].meta.name);
    tr_text_put(&b, "\", \"name\": \"");
    tr_text_json(&b, o->choice[k].name);
    tr_text_put(&b, "\", \"chunk\": [");
    for (int l = 0; l < p->nodes[k].nlabels; l++)
      tr_text_put(&b, "%s%lld", l ? ", " : "", (long long)p->nodes[k].chunk[l]);
    tr_text_put(&b, "], \"predicted_s\": %.6g, \"cost\": {", o->node_s[k]);
    for (int c = 0; c < TL_NCOST; c++)
      tr_text_put(&b, "%s\"%s\": %.6g", c ? ", " : "", tl_cost_name(c), o->node_cost[k].c[c]);
    tr_text_put(&b, "}, \"predicted_transfer_floats\": %lld, \"ia_expression\": \"", (long long)o->node_floats[k]);
    tr_text_json(&b, o->choice[k].ia);
    tr_text_put(&b, "\", \"rules\": \"");
    tr_text_json(&b, o->choice[k].rules);
    tr_text_put(&b, "\"");
    s_fused_json(&b, p, k);
    if (o->moves[k].mirror) tr_text_put(&b, ", \"blocks_from_mirrors\": true");
    if (into[k] >= 0)
      tr_text_put(&b, ", \"inside_tasks_of\": %d, \"producer_stored\": %s", into[k] + 1,
                  to_fused_stored(p, into[k], k) ? "true" : "false");
    tr_text_put(&b, "}");
  }
  tr_text_put(&b, "], \"ia\": [");
  int first = 1;
  for (int k = 0; k < p->nnodes; k++) {
    int no = s_ia_ops(p, k, o, ops);
    for (int i = 0; i < no; i++) {
      const s_iaop *q = &ops[i];
      if (!q->op) continue;
      tr_text_put(&b, "%s{\"op\": \"%s\", \"node\": %d, \"depth\": %d, \"relation\": \"", first ? "" : ", ", q->op,
            k + 1, q->depth);
      tr_text_json(&b, q->what);
      tr_text_put(&b, "\", \"labels\": \"");
      tr_text_json(&b, q->labels);
      tr_text_put(&b, "\", \"sites\": %d, \"predicted_floats\": %lld}", q->sites, (long long)q->floats);
      first = 0;
    }
  }
  tr_text_put(&b, "]}, \"alternatives\": [");
  for (int i = 0; i < o->nalt; i++) {
    tr_text_put(&b, "%s{\"name\": \"", i ? ", " : "");
    tr_text_json(&b, o->alt[i].name);
    tr_text_put(&b, "\", \"predicted_transfer_floats\": %lld, \"predicted_s\": %.6g, \"chosen\": %s}",
          (long long)o->alt[i].floats, o->alt[i].cost, i == o->chosen ? "true" : "false");
  }
  tr_text_put(&b, "], \"ia_plans_reached\": %d, \"optimize_ms\": %.3f, \"rules_fired\": {", o->ntrees, o->ms);
  for (int r = 0; r < oi_rule_count(); r++) tr_text_put(&b, "%s\"%s\": %d", r ? ", " : "", oi_rule_name(r), o->fired[r]);
  tr_text_put(&b, "}");
  return tr_text_done(&b);
}

char *to_opt_dot(const ta_plan *p, const to_opt *o) {
  tr_text b = {0};
  s_iaop ops[64];
  tr_text_put(&b, "digraph plan {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n");
  tr_text_put(&b, "  label=\"");
  tr_text_json(&b, o->alt[o->chosen].name);
  tr_text_put(&b, ": %lld floats, %.3g s on %d sites\";\n", (long long)o->total, o->seconds, o->m);
  for (int k = 0; k < p->nnodes; k++) {
    int no = s_ia_ops(p, k, o, ops);
    int parent[64];
    for (int i = 0; i < no; i++) {
      const s_iaop *q = &ops[i];
      tr_text_put(&b, "  n%d_%d [label=\"%s ", k, i, s_kindname(q));
      tr_text_json(&b, q->what);
      if (q->labels[0]) {
        tr_text_put(&b, "\\n[");
        tr_text_json(&b, q->labels);
        tr_text_put(&b, "]");
      }
      if (q->op && (!strcmp(q->op, "bcast") || !strcmp(q->op, "shuffle")))
        tr_text_put(&b, "\\n%lld floats", (long long)q->floats);
      tr_text_put(&b, "\"%s];\n", q->op ? "" : ", shape=ellipse");
      parent[i] = -1;
      for (int j = i - 1; j >= 0; j--)
        if (ops[j].depth == q->depth - 1) {
          parent[i] = j;
          break;
        }
      if (parent[i] >= 0) tr_text_put(&b, "  n%d_%d -> n%d_%d;\n", k, i, k, parent[i]);
    }
  }
  tr_text_put(&b, "}\n");
  return tr_text_done(&b);
}
