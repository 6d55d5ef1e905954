/*
** tests/unit/test_optimize.c - the optimizer on hand-built plans and
** placements (no workers): which plans the rules reach, their exact
** transfer, the choice per shape regime, forcing a plan by name, and the
** side conditions checked against the placement.
*/
#include "config.h"
#include <criterion/criterion.h>
#include <string.h>
#include <stdio.h>
#include "optimize/optimize.h"

/* C[i,j] = SUM_k A[i,k] * B[k,j] with the given shapes and chunks. */
static void s_matmul(ta_plan *p, int64_t I, int64_t J, int64_t K, int64_t ci, int64_t cj, int64_t ck) {
  memset(p, 0, sizeof *p);
  p->nrels = 3;
  const char *nm[3] = {"A", "B", "C"};
  int64_t sh[3][2] = {{I, K}, {K, J}, {I, J}}, ch[3][2] = {{ci, ck}, {ck, cj}, {ci, cj}};
  for (int r = 0; r < 3; r++) {
    p->rels[r].kind = r < 2 ? TA_REL_STORED : TA_REL_OUTPUT;
    snprintf(p->rels[r].meta.name, sizeof p->rels[r].meta.name, "%s", nm[r]);
    p->rels[r].meta.rank = 2;
    p->rels[r].meta.dtype = TR_F32;
    p->rels[r].meta.version = 1;
    for (int d = 0; d < 2; d++) {
      p->rels[r].meta.shape[d] = sh[r][d];
      p->rels[r].meta.chunk[d] = ch[r][d];
    }
  }
  ta_node *n = &p->nodes[0];
  p->nnodes = 1;
  n->nlabels = 3;
  n->nout = 2;
  const char *ln[3] = {"i", "j", "k"};
  int64_t sz[3] = {I, J, K}, cz[3] = {ci, cj, ck};
  for (int l = 0; l < 3; l++) {
    snprintf(n->lname[l], sizeof n->lname[l], "%s", ln[l]);
    n->size[l] = sz[l];
    n->chunk[l] = cz[l];
  }
  n->ninputs = 2;
  n->in[0] = (ta_operand){0, 2, {0, 2}};
  n->in[1] = (ta_operand){1, 2, {2, 1}};
  n->prog.n = 3;
  n->prog.code[0] = (tk_insn){TK_OP_INPUT, 0, 0};
  n->prog.code[1] = (tk_insn){TK_OP_INPUT, 1, 0};
  n->prog.code[2] = (tk_insn){TK_OP_MUL, 0, 0};
  n->agg = TK_AGG_SUM;
  n->gemm = 1;
  n->drive = -1;
  n->out = 2;
}

/* Stored relations placed as FILL places them: chunk lin on site lin % m. */
static void s_place(const ta_plan *p, to_placed *pl, int m) {
  memset(pl, 0, sizeof *pl * TA_MAX_RELS);
  for (int r = 0; r < p->nrels; r++) {
    if (p->rels[r].kind != TA_REL_STORED) continue;
    int64_t n = tr_nchunks(&p->rels[r].meta);
    pl[r].n = n;
    pl[r].has = calloc((size_t)n, sizeof *pl[r].has);
    pl[r].prim = calloc((size_t)n, 1);
    for (int64_t l = 0; l < n; l++) {
      pl[r].prim[l] = (int8_t)(l % m);
      pl[r].has[l] = 1ull << (l % m);
    }
  }
}

static void s_unplace(to_placed *pl) {
  for (int r = 0; r < TA_MAX_RELS; r++) to_placed_free(&pl[r]);
}

static const struct to_alt *s_alt(const to_opt *o, const char *prefix) {
  for (int i = 0; i < o->nalt; i++)
    if (!strncmp(o->alt[i].name, prefix, strlen(prefix))) return &o->alt[i];
  return NULL;
}

Test(optimize, rules_reach_bmm_cmm_rmm_and_rank_them_by_exact_transfer) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  /* i and j in 2 chunks each, so partitioning both (RMM) differs from
  ** partitioning one of them */
  s_matmul(&p, 512, 512, 512, 256, 256, 128);
  s_place(&p, pl, 4);
  cr_assert_eq(to_optimize(&p, 4, 1, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert_not_null(s_alt(&o, "BMM"));
  cr_assert_not_null(s_alt(&o, "CMM"));
  cr_assert_not_null(s_alt(&o, "RMM"));
  cr_assert_gt(o.ntrees, 10, "the rewrites reach many IA plans");
  cr_assert_gt(o.fired[12] + o.fired[11], 0, "R2-6 and R2-5 lead to CMM");
  for (int i = 1; i < o.nalt; i++) cr_assert_leq(o.alt[i - 1].cost, o.alt[i].cost, "alternatives in cost order");
  /* CMM[k] on 4 sites with k in 4 chunks: A and B each hashed on k; the
  ** 4 output chunks' partials, 4 per chunk, 3 of them move. */
  const struct to_alt *cmm = s_alt(&o, "CMM[k]");
  cr_assert_not_null(cmm);
  to_moves mv;
  to_placed cur[TA_MAX_RELS];
  s_place(&p, cur, 4);
  cr_assert_eq(to_moves_compute(&p, 0, &cmm->choice[0], 4, 1, cur, &mv, 0, &err), TR_OK, "%s", err.msg);
  int64_t partial = 4 * 3 * 256 * 256;
  cr_assert_eq(mv.partial_floats, partial);
  cr_assert_eq(mv.total, mv.in_floats[0] + mv.in_floats[1] + partial);
  cr_assert_eq(cmm->floats, mv.total, "the alternative's cost is the moves'");
  to_moves_free(&mv);
  s_unplace(cur);
  to_opt_free(&o);
  s_unplace(pl);
}

Test(optimize, table4_regimes) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  /* A common large dimension: CMM moves only small partial outputs. */
  s_matmul(&p, 256, 256, 16384, 256, 256, 2048);
  s_place(&p, pl, 4);
  cr_assert_eq(to_optimize(&p, 4, 1, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(!strncmp(o.alt[o.chosen].name, "CMM", 3), "chose %s", o.alt[o.chosen].name);
  to_opt_free(&o);
  s_unplace(pl);
  /* Two large dimensions: moving the (large) output's partials loses. */
  s_matmul(&p, 2048, 2048, 256, 512, 512, 256);
  s_place(&p, pl, 4);
  cr_assert_eq(to_optimize(&p, 4, 1, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(strncmp(o.alt[o.chosen].name, "CMM", 3), "chose %s", o.alt[o.chosen].name);
  const struct to_alt *cmm = s_alt(&o, "CMM");
  cr_assert(!cmm || cmm->floats > o.alt[o.chosen].floats);
  to_opt_free(&o);
  s_unplace(pl);
}

Test(optimize, plan_by_name_and_unknown_names) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_matmul(&p, 512, 512, 512, 128, 128, 128);
  s_place(&p, pl, 4);
  cr_assert_eq(to_optimize(&p, 4, 2, pl, "cmm", &o, &err), TR_OK, "%s", err.msg);
  cr_assert(!strncmp(o.alt[o.chosen].name, "CMM", 3), "forced %s", o.alt[o.chosen].name);
  cr_assert_eq(o.total, o.alt[o.chosen].floats, "the forced plan's prediction");
  cr_assert_eq(o.repl_floats, 512 * 512, "replication 2: one more copy of C");
  to_opt_free(&o);
  cr_assert_eq(to_optimize(&p, 4, 1, pl, "XMM", &o, &err), TR_ENOTFOUND);
  cr_assert(strstr(err.msg, "no plan 'XMM'") && strstr(err.msg, "CMM[k]"), "%s", err.msg);
  cr_assert_eq(to_optimize(&p, 4, 1, pl, "BMM", &o, &err), TR_ENOTFOUND, "several BMM plans: ambiguous");
  cr_assert(strstr(err.msg, "more than one"), "%s", err.msg);
  s_unplace(pl);
}

Test(optimize, side_conditions_checked_on_the_placement) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_moves mv;
  tr_err err;
  s_matmul(&p, 512, 512, 512, 128, 128, 128);
  s_place(&p, pl, 4);
  /* A and B both kept in place are not co-partitioned on k here. */
  to_choice c;
  memset(&c, 0, sizeof c);
  c.drive = 0;
  c.mv[0] = c.mv[1] = TO_MV_KEEP;
  c.twophase = 1;
  c.agg_part = 3;
  cr_assert_eq(to_moves_compute(&p, 0, &c, 4, 1, pl, &mv, 0, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "co-partitioned"), "%s", err.msg);
  /* A local aggregation whose tuples are spread over sites is refused. */
  c.mv[1] = TO_MV_BCAST;
  c.twophase = 0;
  cr_assert_eq(to_moves_compute(&p, 0, &c, 4, 1, pl, &mv, 0, &err), TR_EINVAL);
  /* A chunk nobody holds: the error names tensor and chunk. */
  c.twophase = 1;
  pl[0].prim[5] = -1;
  pl[0].has[5] = 0;
  cr_assert_eq(to_moves_compute(&p, 0, &c, 4, 1, pl, &mv, 0, &err), TR_ECORRUPT);
  cr_assert(strstr(err.msg, "tensor A chunk [1,1]"), "%s", err.msg);
  s_unplace(pl);
}

Test(optimize, explain_formats) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_matmul(&p, 512, 512, 512, 256, 256, 128);
  s_place(&p, pl, 4);
  cr_assert_eq(to_optimize(&p, 4, 1, pl, "CMM", &o, &err), TR_OK, "%s", err.msg);
  char *t = to_opt_text(&p, &o, NULL), *j = to_opt_json(&p, &o, NULL), *d = to_opt_dot(&p, &o);
  cr_assert(t && strstr(t, "IA plan on 4 sites: CMM[k]") && strstr(t, "<- chosen") && strstr(t, "shuffle A"), "%s", t);
  cr_assert(j && strstr(j, "\"sites\": 4") && strstr(j, "\"chosen\": {\"name\": \"CMM[k]\"") &&
                strstr(j, "\"op\": \"shuffle\"") && strstr(j, "\"op\": \"local_join\"") &&
                strstr(j, "\"alternatives\": [{\"name\""),
            "%s", j);
  cr_assert(d && !strncmp(d, "digraph plan {", 14) && strstr(d, "->") && strstr(d, "partials of C"), "%s", d);
  free(t);
  free(j);
  free(d);
  to_opt_free(&o);
  s_unplace(pl);
}

/* A scheduler's placement: every tuple of output chunk lin runs on
** site_of[lin], so each operand chunk goes exactly to the sites of the
** output chunks that read it, and nothing is two-phase. */
Test(optimize, moves_of_an_assigned_placement) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_choice c;
  to_moves mv;
  tr_err err;
  /* C: 2 x 2 output chunks, k in 2 chunks; A: 2 x 2 chunks, B: 2 x 2 */
  s_matmul(&p, 64, 64, 64, 32, 32, 32);
  s_place(&p, pl, 3);
  int8_t site_of[4] = {2, 0, 0, 1}; /* C chunks (0,0) (0,1) (1,0) (1,1) */
  cr_assert_eq(to_moves_assigned(&p, 0, site_of, 3, 1, pl, &c, &mv, &err), TR_OK, "%s", err.msg);
  cr_assert(!c.twophase && c.drive == -1);
  for (int64_t lin = 0; lin < 4; lin++) {
    cr_assert_eq(mv.owner[lin], site_of[lin]);
    cr_assert_eq(mv.osites[lin], 1ull << site_of[lin], "one site per output chunk");
  }
  /* A[i,k] is read by the output chunks of row i: A (0,*) by sites 2, 0;
  ** A (1,*) by 0, 1.  B[k,j] by column j: B (*,0) by 2, 0; B (*,1) by 0, 1. */
  uint64_t row0 = (1ull << 2) | 1ull, row1 = 1ull | (1ull << 1);
  cr_assert_eq(mv.need[0][0], row0);
  cr_assert_eq(mv.need[0][1], row0);
  cr_assert_eq(mv.need[0][2], row1);
  cr_assert_eq(mv.need[0][3], row1);
  cr_assert_eq(mv.need[1][0], row0);
  cr_assert_eq(mv.need[1][1], row1);
  cr_assert_eq(mv.need[1][2], row0);
  cr_assert_eq(mv.need[1][3], row1);
  cr_assert_eq(mv.partial_floats, 0);
  cr_assert_eq(pl[2].n, 4, "the output is placed for the nodes after it");
  cr_assert_eq(pl[2].prim[0], 2);
  to_moves_free(&mv);
  site_of[3] = 3; /* no such site */
  cr_assert_eq(to_moves_assigned(&p, 0, site_of, 3, 1, pl, &c, &mv, &err), TR_EINVAL);
  s_unplace(pl);
}
