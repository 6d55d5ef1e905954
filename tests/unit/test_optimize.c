/*
** tests/unit/test_optimize.c - the optimizer on hand-built plans and
** placements (no workers): which plans the rules reach, their exact
** transfer, the choice per shape regime, forcing a plan by name, and the
** side conditions checked against the placement.
*/
#include "config.h"
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
#include "optimize/optimize.h"
#include "optimize/optimize_int.h"

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

/* m sites, outputs replicated repl times, one thread each, the default
** weights, the chunking as declared. */
static to_env s_env(int m, int repl) {
  to_env env = {m, repl, 1, 0, {{0}, 0}, TO_LAYOUT_DECLARED, 256 << 20, 1 << 30, NULL, 0};
  tl_weights_default(&env.w);
  return env;
}

#define ENV(m, repl) (&(to_env[]){s_env(m, repl)}[0])

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
  cr_assert_eq(to_optimize(&p, ENV(4, 1), pl, NULL, &o, &err), TR_OK, "%s", err.msg);
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
  cr_assert_eq(to_moves_compute(&p, 0, &cmm->choice[0], ENV(4, 1), cur, &mv, 0, &err), TR_OK, "%s", err.msg);
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
  cr_assert_eq(to_optimize(&p, ENV(4, 1), pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(!strncmp(o.alt[o.chosen].name, "CMM", 3), "chose %s", o.alt[o.chosen].name);
  to_opt_free(&o);
  s_unplace(pl);
  /* Two large dimensions: moving the (large) output's partials loses. */
  s_matmul(&p, 2048, 2048, 256, 512, 512, 256);
  s_place(&p, pl, 4);
  cr_assert_eq(to_optimize(&p, ENV(4, 1), pl, NULL, &o, &err), TR_OK, "%s", err.msg);
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
  cr_assert_eq(to_optimize(&p, ENV(4, 2), pl, "cmm", &o, &err), TR_OK, "%s", err.msg);
  cr_assert(!strncmp(o.alt[o.chosen].name, "CMM", 3), "forced %s", o.alt[o.chosen].name);
  cr_assert_eq(o.total, o.alt[o.chosen].floats, "the forced plan's prediction");
  cr_assert_eq(o.repl_floats, 512 * 512, "replication 2: one more copy of C");
  to_opt_free(&o);
  cr_assert_eq(to_optimize(&p, ENV(4, 1), pl, "XMM", &o, &err), TR_ENOTFOUND);
  cr_assert(strstr(err.msg, "no plan 'XMM'") && strstr(err.msg, "CMM[k]"), "%s", err.msg);
  cr_assert_eq(to_optimize(&p, ENV(4, 1), pl, "BMM", &o, &err), TR_ENOTFOUND, "several BMM plans: ambiguous");
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
  cr_assert_eq(to_moves_compute(&p, 0, &c, ENV(4, 1), pl, &mv, 0, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "co-partitioned"), "%s", err.msg);
  /* A local aggregation whose tuples are spread over sites is refused. */
  c.mv[1] = TO_MV_BCAST;
  c.twophase = 0;
  cr_assert_eq(to_moves_compute(&p, 0, &c, ENV(4, 1), pl, &mv, 0, &err), TR_EINVAL);
  /* A chunk nobody holds: the error names tensor and chunk. */
  c.twophase = 1;
  pl[0].prim[5] = -1;
  pl[0].has[5] = 0;
  cr_assert_eq(to_moves_compute(&p, 0, &c, ENV(4, 1), pl, &mv, 0, &err), TR_ECORRUPT);
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
  cr_assert_eq(to_optimize(&p, ENV(4, 1), pl, "CMM", &o, &err), TR_OK, "%s", err.msg);
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

Test(optimize, plans_ranked_by_predicted_seconds) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_matmul(&p, 512, 512, 512, 256, 256, 128);
  s_place(&p, pl, 4);
  cr_assert_eq(to_optimize(&p, ENV(4, 2), pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  for (int i = 1; i < o.nalt; i++) cr_assert_leq(o.alt[i - 1].cost, o.alt[i].cost, "by seconds");
  cr_assert_eq(o.alt[o.chosen].cost + o.w.w[TL_C_PHASES], o.seconds,
               "the plan's seconds: its node's, and the statement's round trip");
  cr_assert_eq(o.node_s[0], o.moves[0].seconds);
  cr_assert_eq(tl_seconds(&o.w, &o.node_cost[0]), o.node_s[0], "seconds are the weighted components");
  cr_assert_gt(o.node_cost[0].c[TL_C_GEMM], 0);
  cr_assert_gt(o.node_cost[0].c[TL_C_WRITE], 0, "the output is written, and replicated");
  cr_assert_eq(o.node_cost[0].c[TL_C_PHASES], 2 + (o.node_floats[0] > 0) + 2 * o.choice[0].twophase,
               "tasks, the commit, and the moves and combine if any");
  /* cores shared by the sites: the gemm can go no faster than all the
  ** work over the cores */
  to_env env = s_env(4, 2);
  env.cores = 1;
  to_opt o1;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o1, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(o1.node_cost[0].c[TL_C_GEMM], 2.0 * 512 * 512 * 512);
  to_opt_free(&o1);
  to_opt_free(&o);
  s_unplace(pl);
}

/* A gemm cut thin on its summed label does the same flops in more
** calls, each reading and writing its whole output block: that traffic
** is counted, so the thin cut is predicted slower. */
Test(optimize, thin_gemm_calls_count_the_blocks_they_touch) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o[2];
  tr_err err;
  to_env env = s_env(1, 1);
  env.cores = 1;
  for (int t = 0; t < 2; t++) {
    s_matmul(&p, 1024, 1024, 64, 1024, 1024, t ? 16 : 64);
    s_place(&p, pl, 1);
    cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o[t], &err), TR_OK, "%s", err.msg);
    s_unplace(pl);
  }
  cr_assert_eq(o[1].node_cost[0].c[TL_C_GEMM], o[0].node_cost[0].c[TL_C_GEMM], "the same flops");
  cr_assert_eq(o[1].node_cost[0].c[TL_C_ELEMWISE] - o[0].node_cost[0].c[TL_C_ELEMWISE],
               3.0 * 1024 * 1024, "three more calls, each touching the 1024 x 1024 output");
  cr_assert_gt(o[1].seconds, o[0].seconds);
  to_opt_free(&o[0]);
  to_opt_free(&o[1]);
}

/* Relation r's chunks all on site 0 (and its replica on site 1). */
static void s_on_one_site(const ta_plan *p, to_placed *pl, int r) {
  for (int64_t l = 0; l < pl[r].n; l++) {
    pl[r].prim[l] = 0;
    pl[r].has[l] = 3;
  }
  (void)p;
}

/* A 3072 x 3072 product in square chunks of `chunk`, placed over m
** sites with both operands on sites 0 and 1 (every chunk on both). */
static void s_square_on_two(ta_plan *p, to_placed *pl, int64_t chunk, int m) {
  s_matmul(p, 3072, 3072, 3072, chunk, chunk, chunk);
  s_place(p, pl, m);
  s_on_one_site(p, pl, 0);
  s_on_one_site(p, pl, 1);
}

Test(optimize, auto_layout_spreads_a_product_stored_as_one_chunk) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  /* A 3072 x 3072 product, each input one chunk on sites 0 and 1: as
  ** declared the whole product runs on one site */
  s_square_on_two(&p, pl, 3072, 4);
  to_env env = s_env(4, 2);
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(!o.layout.ran);
  double declared = o.seconds;
  to_opt_free(&o);
  env.layout = TO_LAYOUT_AUTO;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(o.layout.ran && o.layout.used, "the chosen chunking runs");
  cr_assert_gt(o.layout.candidates, 1);
  cr_assert_eq(o.layout.declared_s, declared);
  cr_assert_lt(o.seconds, 0.8 * declared, "chosen %g s, declared %g s", o.seconds, declared);
  int64_t pieces = 1, sites = 0;
  for (int l = 0; l < 3; l++) pieces *= (3072 + p.nodes[0].chunk[l] - 1) / p.nodes[0].chunk[l];
  cr_assert_gt(pieces, 1, "the plan is written back in its new chunking");
  for (int d = 0; d < 2; d++) cr_assert_eq(p.rels[2].meta.chunk[d], p.nodes[0].chunk[d ? 1 : 0]);
  for (int64_t l = 0; l < tr_nchunks(&p.rels[2].meta); l++) sites |= o.moves[0].osites[l];
  cr_assert_gt(__builtin_popcountll((uint64_t)sites), 1, "computed on more than one site");
  to_opt_free(&o);
  s_unplace(pl);
}

/* Cuts that cost the same: the output is cut on its leading dimension.
** A 3072 x 3072 product whose operands every site holds moves nothing
** cut by rows or by columns; by rows, the next product of a chain
** (`O = T * C`) runs where T's rows are, where by columns it summed
** partials across the sites (BENCHMARKS.md, *A chain's intermediate cut
** by rows*). */
Test(optimize, auto_layout_cuts_a_tie_on_the_leading_dimension) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_square_on_two(&p, pl, 1024, 2);
  to_env env = s_env(2, 2);
  env.layout = TO_LAYOUT_AUTO;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(o.layout.used, "a chunking of its own, not the declared tiles");
  cr_assert_eq(p.rels[2].meta.chunk[0], 1536, "rows cut in two, got %lld x %lld",
               (long long)p.rels[2].meta.chunk[0], (long long)p.rels[2].meta.chunk[1]);
  cr_assert_eq(p.rels[2].meta.chunk[1], 3072);
  to_opt_free(&o);
  s_unplace(pl);
}

/* Each chunk an output is made in costs its own (a blob, a checksum, a
** message to each replica, a catalog row: some 60 us on local workers,
** against 9 us a kernel call).  A projection of a 32768 x 256 matrix
** stored in 128 tiles: made in tiles, 128 chunks and their replicas; the
** layout reads the tiles into a few row blocks instead.  With chunks
** costing nothing, the tiles stay (the nn block of bench-opt in 256 x
** 256 tiles ran 0.067 s against 0.050 s in row blocks). */
Test(optimize, auto_layout_makes_an_output_in_fewer_chunks_than_its_tiles) {
  static ta_plan p0, p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_matmul(&p0, 32768, 256, 256, 256, 256, 256);
  s_place(&p0, pl, 4);
  to_env env = s_env(4, 2);
  env.layout = TO_LAYOUT_AUTO;
  p = p0;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(o.layout.used, "a chunking of its own");
  cr_assert_leq(tr_nchunks(&p.rels[2].meta), 8, "%lld chunks of %lld x %lld",
                (long long)tr_nchunks(&p.rels[2].meta), (long long)p.rels[2].meta.chunk[0],
                (long long)p.rels[2].meta.chunk[1]);
  to_opt_free(&o);
  env.w.w[TL_C_CHUNKS] = 0;
  p = p0;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tr_nchunks(&p.rels[2].meta), 128, "chunks free: the tiles kept (%lld chunks)",
               (long long)tr_nchunks(&p.rels[2].meta));
  to_opt_free(&o);
  s_unplace(pl);
}

/* The session's memo: the same statement again (its output rewritten: a
** new version) takes the decision remembered, the same chunkings, choice
** and seconds as a search; other weights or placement search again,
** and a PLAN named is remembered apart. */
Test(optimize, a_remembered_layout_is_the_one_searched_for) {
  static ta_plan p0, p, q;
  to_placed pl[TA_MAX_RELS];
  to_opt o, m;
  tr_err err;
  s_matmul(&p0, 3072, 3072, 3072, 3072, 3072, 3072);
  s_place(&p0, pl, 4);
  s_on_one_site(&p0, pl, 0);
  to_env env = s_env(4, 2);
  env.layout = TO_LAYOUT_AUTO;
  p = p0;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg); /* no memo */
  env.memo = to_memo_new();
  cr_assert_not_null(env.memo);
  q = p0;
  cr_assert_eq(to_optimize(&q, &env, pl, NULL, &m, &err), TR_OK, "%s", err.msg);
  cr_assert(!m.layout.remembered, "the first time, the search runs");
  to_opt_free(&m);
  q = p0;
  q.rels[2].meta.version = 7; /* the output as the last statement left it */
  q.rels[0].meta.id = 41;
  cr_assert_eq(to_optimize(&q, &env, pl, NULL, &m, &err), TR_OK, "%s", err.msg);
  cr_assert(m.layout.remembered, "the same inputs again: remembered");
  cr_assert(m.layout.ran && m.layout.used == o.layout.used);
  cr_assert_eq(m.layout.candidates, o.layout.candidates);
  cr_assert_eq(q.nnodes, p.nnodes);
  for (int k = 0; k < p.nnodes; k++)
    for (int l = 0; l < p.nodes[k].nlabels; l++) cr_assert_eq(q.nodes[k].chunk[l], p.nodes[k].chunk[l]);
  for (int r = 0; r < p.nrels; r++)
    for (int d = 0; d < p.rels[r].meta.rank; d++) cr_assert_eq(q.rels[r].meta.chunk[d], p.rels[r].meta.chunk[d]);
  cr_assert_eq(q.rels[2].meta.version, 7, "this statement's versions and ids are kept");
  cr_assert_eq(q.rels[0].meta.id, 41);
  cr_assert_eq(m.seconds, o.seconds);
  cr_assert_str_eq(m.alt[m.chosen].name, o.alt[o.chosen].name);
  to_opt_free(&m);
  /* other weights (CALIBRATE), another placement, a PLAN named: searched */
  env.w.w[TL_C_NET] *= 2;
  q = p0;
  cr_assert_eq(to_optimize(&q, &env, pl, NULL, &m, &err), TR_OK, "%s", err.msg);
  cr_assert(!m.layout.remembered, "new weights: searched again");
  to_opt_free(&m);
  s_on_one_site(&p0, pl, 1);
  q = p0;
  cr_assert_eq(to_optimize(&q, &env, pl, NULL, &m, &err), TR_OK, "%s", err.msg);
  cr_assert(!m.layout.remembered, "another placement: searched again");
  /* a plan named is remembered under its name: searched the first time,
  ** then the same plan and chunkings without the search; the statement
  ** without a name still finds its own decision.  The name is one the
  ** search just listed, under these weights and this placement: another
  ** search's alternatives may be in chunkings this one does not take. */
  cr_assert_gt(m.nalt, 1);
  char named[sizeof m.alt->name];
  snprintf(named, sizeof named, "%s", m.alt[m.chosen == 0 ? 1 : 0].name);
  to_opt_free(&m);
  to_opt f;
  q = p0;
  cr_assert_eq(to_optimize(&q, &env, pl, named, &f, &err), TR_OK, "%s", err.msg);
  cr_assert(!f.layout.remembered, "a plan named: searched the first time");
  cr_assert_str_eq(f.alt[f.chosen].name, named);
  ta_plan fq = q;
  q = p0;
  cr_assert_eq(to_optimize(&q, &env, pl, named, &m, &err), TR_OK, "%s", err.msg);
  cr_assert(m.layout.remembered, "the plan named again: remembered");
  cr_assert_str_eq(m.alt[m.chosen].name, named);
  cr_assert_eq(m.seconds, f.seconds);
  for (int k = 0; k < fq.nnodes; k++)
    for (int l = 0; l < fq.nodes[k].nlabels; l++) cr_assert_eq(q.nodes[k].chunk[l], fq.nodes[k].chunk[l]);
  to_opt_free(&m);
  to_opt_free(&f);
  q = p0;
  cr_assert_eq(to_optimize(&q, &env, pl, NULL, &m, &err), TR_OK, "%s", err.msg);
  cr_assert(m.layout.remembered, "unnamed, after the named: its own decision");
  cr_assert_str_neq(m.alt[m.chosen].name, named);
  to_opt_free(&m);
  to_memo_free(&env.memo);
  cr_assert_null(env.memo);
  to_opt_free(&o);
  s_unplace(pl);
}

Test(optimize, auto_layout_keeps_a_declared_output_chunking) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  /* as above, and C declared with 768 x 3072 chunks */
  s_matmul(&p, 3072, 3072, 3072, 3072, 3072, 3072);
  p.rels[2].declared = 1;
  p.rels[2].dchunk[0] = 768;
  p.rels[2].dchunk[1] = 3072;
  s_place(&p, pl, 4);
  s_on_one_site(&p, pl, 0);
  s_on_one_site(&p, pl, 1);
  to_env env = s_env(4, 1);
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(p.rels[2].meta.chunk[0], 3072, "declared layout: the operands' chunking");
  to_opt_free(&o);
  env.layout = TO_LAYOUT_AUTO;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(o.layout.ran);
  cr_assert_eq(p.rels[2].meta.chunk[0], 768);
  cr_assert_eq(p.rels[2].meta.chunk[1], 3072);
  cr_assert_eq(p.nodes[0].chunk[0], 768, "the node computes in the declared output chunking");
  to_opt_free(&o);
  s_unplace(pl);
  /* a chunking no worker accepts does not run, whatever it is predicted */
  s_matmul(&p, 1024, 1024, 1024, 1024, 1024, 1024);
  s_place(&p, pl, 4);
  env.chunk_max = 1 << 20;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(o.layout.used && isnan(o.layout.declared_s), "the declared 4 MiB chunks are refused");
  cr_assert_leq(p.rels[2].meta.chunk[0] * p.rels[2].meta.chunk[1], 1 << 18);
  to_opt_free(&o);
  s_unplace(pl);
}

/* A 2-phase plan's combine starts when the last join task is done.  A
** 3072^3 product stored cut on k (4 chunks of each operand), B in place
** driving the join, C one chunk owned by site 0: one site joins two of
** B's chunks, and site 0 then takes in and combines every partial.
** Whichever site the double join lands on, the node takes the double
** join and then the combine; it is not cheaper when the owner is not
** the one joining twice. */
Test(optimize, a_combine_waits_for_the_slowest_join) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  const char *plan = "BMM[bcast A; B in place] 2-phase[i,j]";
  double s[2], join[2];
  for (int t = 0; t < 2; t++) {
    s_matmul(&p, 3072, 3072, 3072, 3072, 3072, 768);
    s_place(&p, pl, 4);
    int8_t at[2][4] = {{0, 0, 2, 3}, {0, 1, 1, 3}}; /* B's chunks: site 0 or 1 joins two */
    for (int l = 0; l < 4; l++) {
      pl[1].prim[l] = at[t][l];
      pl[1].has[l] = 1ull << at[t][l];
    }
    to_env env = s_env(4, 1);
    cr_assert_eq(to_optimize(&p, &env, pl, plan, &o, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(o.moves[0].owner[0], 0, "C's one chunk is combined on site 0");
    cr_assert_gt(o.moves[0].partial_floats, 0);
    s[t] = o.node_s[0];
    join[t] = o.node_cost[0].c[TL_C_GEMM];
    to_opt_free(&o);
    s_unplace(pl);
  }
  cr_assert_eq(join[0], join[1], "the double join's flops, either way");
  cr_assert_eq(join[0], 2.0 * 3072 * 3072 * 768 * 2);
  cr_assert_float_eq(s[1], s[0], 1e-9 * s[0], "owner joining twice %g s, another site %g s", s[0],
                     s[1]);
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
  cr_assert_eq(to_moves_assigned(&p, 0, site_of, ENV(3, 1), pl, &c, &mv, &err), TR_OK, "%s", err.msg);
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
  cr_assert_eq(to_moves_assigned(&p, 0, site_of, ENV(3, 1), pl, &c, &mv, &err), TR_EINVAL);
  s_unplace(pl);
}

/* Local workers sharing fewer cores than they are: a site with more of
** the work than the others finishes alone after they do, so a plan that
** leaves work 2, 1, 1, 0 on 4 sites over 2 cores takes 2.5 units (three
** share the cores until two finish), not the 2 of its busiest site nor of
** the whole work over the cores; 1, 1, 1, 1 takes 2. */
Test(optimize, sites_sharing_cores_finish_uneven_work_later) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  /* stored cut on k in 4 pieces, pieces 0 and 3 on site 0 */
  s_matmul(&p, 512, 512, 16384, 512, 512, 4096);
  s_place(&p, pl, 4);
  for (int r = 0; r < 2; r++) {
    pl[r].prim[3] = 0;
    pl[r].has[3] = 1;
  }
  double gemm[2][2]; /* [cores 0 | 2][LOCAL | CMM] */
  for (int shared = 0; shared < 2; shared++) {
    to_env env = s_env(4, 1);
    env.cores = shared ? 2 : 0;
    cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
    const char *names[2] = {"LOCAL", "CMM[k]"};
    for (int a = 0; a < 2; a++) {
      const struct to_alt *alt = s_alt(&o, names[a]);
      cr_assert_not_null(alt, "%s reached", names[a]);
      to_moves mv;
      cr_assert_eq(to_moves_compute(&p, 0, &alt->choice[0], &env, pl, &mv, 0, &err), TR_OK, "%s", err.msg);
      gemm[shared][a] = mv.cost.c[TL_C_GEMM];
      to_moves_free(&mv);
    }
    if (shared) cr_assert(!strncmp(o.alt[o.chosen].name, "CMM", 3), "chose %s", o.alt[o.chosen].name);
    to_opt_free(&o);
  }
  double unit = 2.0 * 512 * 512 * 4096; /* one piece's gemm flops */
  cr_assert_float_eq(gemm[0][0], 2 * unit, 1e-6 * unit, "own cores: the busiest site's two pieces");
  cr_assert_float_eq(gemm[0][1], unit, 1e-6 * unit, "own cores: one piece each");
  cr_assert_float_eq(gemm[1][0], 2.5 * unit, 1e-6 * unit, "shared: 2, 1, 1 over 2 cores");
  cr_assert_float_eq(gemm[1][1], 2 * unit, 1e-6 * unit, "shared: 1, 1, 1, 1 over 2 cores");
  s_unplace(pl);
}

/* A site's output chunks are its tasks, and its threads take them one at
** a time: 9 chunks of a 3072^3 product on 2 sites of 2 threads, 5 and 4 a
** site.  The fifth chunk would keep one thread busy, a core idle beside
** it (3 chunks' time on cores of their own, 5 for the two sharing 2
** cores), so it is made in two pieces of its rows, one a thread
** (ta_tail_pieces): 2.5 on cores of their own, and 4.5 sharing 2 cores,
** as 6 and 3 take (each busy site gets a core, and once the site of 3 is
** done the site of 6 gets both).  With pieces under TA_PIECE_MIN rows the
** tail runs whole.  One chunk on a site of 2 threads gets both as BLAS
** threads.  Measured in BENCHMARKS.md, *A site's chunks on its threads*
** and *A site's last chunks made in pieces*. */
Test(optimize, a_sites_chunks_run_on_its_threads_one_at_a_time) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_moves mv;
  to_choice c;
  tr_err err;
  s_matmul(&p, 3072, 3072, 3072, 1024, 1024, 3072);
  s_place(&p, pl, 2);
  double unit = 2.0 * 1024 * 1024 * 3072; /* one output chunk's gemm flops */
  int8_t five[9] = {0, 1, 0, 1, 0, 1, 0, 1, 0}, six[9] = {0, 0, 0, 1, 1, 1, 0, 0, 0};
  struct {
    const int8_t *site_of;
    int cores;
    double chunks; /* the node's gemm in chunks' time */
  } cs[] = {{five, 0, 2.5}, {five, 2, 4.5}, {six, 2, 4.5}, {six, 0, 3}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    to_env env = s_env(2, 1);
    env.threads = 2;
    env.cores = cs[i].cores;
    cr_assert_eq(to_moves_assigned(&p, 0, cs[i].site_of, &env, pl, &c, &mv, &err), TR_OK, "%s", err.msg);
    cr_assert_float_eq(mv.cost.c[TL_C_GEMM], cs[i].chunks * unit, 1e-6 * unit, "case %zu: %g chunks' time",
                       i, mv.cost.c[TL_C_GEMM] / unit);
    to_moves_free(&mv);
  }
  s_unplace(pl);
  /* chunks of 200 rows: pieces of 100 would be too thin, the tail runs whole */
  s_matmul(&p, 1800, 3072, 3072, 200, 1024, 3072);
  s_place(&p, pl, 2);
  int8_t whole[27];
  for (int l = 0; l < 27; l++) whole[l] = l < 15 ? 0 : 1; /* 15 and 12 */
  to_env thin = s_env(2, 1);
  thin.threads = 2;
  cr_assert_eq(to_moves_assigned(&p, 0, whole, &thin, pl, &c, &mv, &err), TR_OK, "%s", err.msg);
  double small = 2.0 * 200 * 1024 * 3072;
  cr_assert_float_eq(mv.cost.c[TL_C_GEMM], 8 * small, 1e-6 * small, "%g chunks' time",
                     mv.cost.c[TL_C_GEMM] / small);
  to_moves_free(&mv);
  s_unplace(pl);
  /* one chunk: its gemm calls on the site's 2 threads */
  s_matmul(&p, 1024, 1024, 3072, 1024, 1024, 3072);
  s_place(&p, pl, 2);
  int8_t one[1] = {0};
  to_env env = s_env(2, 1);
  env.threads = 2;
  env.cores = 2;
  cr_assert_eq(to_moves_assigned(&p, 0, one, &env, pl, &c, &mv, &err), TR_OK, "%s", err.msg);
  cr_assert_float_eq(mv.cost.c[TL_C_GEMM], unit / 2, 1e-6 * unit);
  to_moves_free(&mv);
  s_unplace(pl);
}

/* The choice BMM[bcast B; A in place] of a product (s_matmul). */
static to_choice s_bcast_b_a_in_place(void) {
  to_choice c;
  memset(&c, 0, sizeof c);
  c.drive = 0;
  c.mv[0] = TO_MV_KEEP;
  c.mv[1] = TO_MV_BCAST;
  return c;
}

/* A drive operand whose chunks have two holders each (row block l of A on
** sites l and l + 1, as FILL replicates it) may be read at either.  On 4
** sites sharing 2 cores, two sites joining two blocks each compute as fast
** as four joining one, and B goes to one site instead of two: the dense
** layer stored in row blocks measured 0.0095-0.0099 s against
** 0.0109-0.0122 s with every block read at its primary.  On sites with
** cores of their own, four sites compute twice as fast and the blocks
** stay at their primaries.  A broadcast reaches only the sites that run
** tuples. */
Test(optimize, a_drive_is_read_at_the_replicas_that_pay) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_moves mv;
  tr_err err;
  to_choice c = s_bcast_b_a_in_place();
  s_matmul(&p, 512, 64, 16384, 128, 64, 16384);
  s_place(&p, pl, 4);
  for (int l = 0; l < 4; l++) pl[0].has[l] |= 1ull << ((l + 1) % 4);
  pl[1].has[0] = 3; /* B, one chunk, on sites 0 and 1 */
  for (int shared = 0; shared < 2; shared++) {
    to_env env = s_env(4, 1);
    env.cores = shared ? 2 : 0;
    cr_assert_eq(to_moves_compute(&p, 0, &c, &env, pl, &mv, 0, &err), TR_OK, "%s", err.msg);
    uint64_t sites = 0;
    int per[4] = {0};
    for (int l = 0; l < 4; l++) {
      cr_assert_eq(oi_pop(mv.osites[l]), 1, "a block's tuples on one site");
      cr_assert(pl[0].has[l] & mv.osites[l], "block %d read where it is held", l);
      sites |= mv.osites[l];
      per[__builtin_ctzll(mv.osites[l])]++;
    }
    cr_assert_eq(mv.in_floats[0], 0, "A moves nothing");
    if (shared) {
      cr_assert_eq(oi_pop(sites), 2, "two sites of the four join");
      for (int u = 0; u < 4; u++) cr_assert(per[u] == 0 || per[u] == 2);
      cr_assert_eq(mv.in_floats[1], 16384 * 64, "B reaches the one joining site without it");
    } else {
      for (int l = 0; l < 4; l++) cr_assert_eq(mv.osites[l], 1ull << l, "block %d at its primary", l);
      cr_assert_eq(mv.in_floats[1], 2 * 16384 * 64, "B reaches sites 2 and 3");
    }
    to_moves_free(&mv);
  }
  s_unplace(pl);
  /* no replicas, two blocks on 4 sites: B goes to site 1 only, not to the
  ** two sites that run nothing */
  s_matmul(&p, 256, 64, 16384, 128, 64, 16384);
  s_place(&p, pl, 4);
  cr_assert_eq(to_moves_compute(&p, 0, &c, ENV(4, 1), pl, &mv, 0, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(mv.in_floats[1], 16384 * 64);
  cr_assert_eq(mv.need[1][0], 3ull, "B needed on sites 0 and 1");
  to_moves_free(&mv);
  s_unplace(pl);
}

/* More sites than a site set's 64 bits: refused before the layout search
** (auto layout), whose per-site arrays are that long. */
Test(optimize, more_sites_than_it_places_on_are_refused) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_matmul(&p, 512, 512, 512, 128, 128, 128);
  s_place(&p, pl, 4);
  to_env env = s_env(TO_MAX_SITES + 1, 1);
  env.layout = TO_LAYOUT_AUTO;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "places on 1 to 64 sites, not 65"), "%s", err.msg);
  s_unplace(pl);
}

/* A drive of more chunks than S_HOLD_MAX combinations of holders: the
** dense layer in 32 square tiles along its summed label, A's tile k and
** B's on sites k and k + 1 (as FILL replicates them), run LOCAL (every
** operand in place, partials combined by output chunk).  On 4 sites
** sharing 2 cores, the tiles are read on the 2 sites that hold them all,
** 16 each, and the partials of 2 sites are combined, not 4: measured
** 0.014-0.016 s against 0.017-0.019 s at the primaries.  On sites with
** cores of their own the tiles stay at their primaries, 8 a site. */
Test(optimize, a_many_chunk_drive_is_read_on_as_many_sites_as_cores) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_moves mv;
  tr_err err;
  to_choice c;
  memset(&c, 0, sizeof c);
  c.drive = 0; /* LOCAL 2-phase[i,j] */
  c.twophase = 1;
  c.agg_part = 3;
  s_matmul(&p, 512, 64, 16384, 512, 64, 512);
  for (int shared = 0; shared < 2; shared++) {
    s_place(&p, pl, 4);
    for (int r = 0; r < 2; r++)
      for (int l = 0; l < 32; l++) pl[r].has[l] |= 1ull << ((l + 1) % 4);
    to_env env = s_env(4, 1);
    env.cores = shared ? 2 : 0;
    cr_assert_eq(to_moves_compute(&p, 0, &c, &env, pl, &mv, 0, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(mv.in_floats[0] + mv.in_floats[1], 0, "the operands move nothing");
    cr_assert_eq(mv.partial_floats, (shared ? 1 : 3) * 512 * 64, "the partials of %d sites combined",
                 shared ? 2 : 4);
    to_moves_free(&mv);
    s_unplace(pl);
  }
}

/* Sites busy in a join beyond the cores they share each add a round trip
** (the busiest site's compute alike): 9 chunks of a 3072^3 product on 2
** sites sharing 1 core, against 2 of their own. */
Test(optimize, busy_sites_beyond_the_cores_add_a_round_trip_each) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_moves mv;
  to_choice c;
  tr_err err;
  s_matmul(&p, 3072, 3072, 3072, 1024, 1024, 3072);
  s_place(&p, pl, 2);
  int8_t five[9] = {0, 1, 0, 1, 0, 1, 0, 1, 0}, one[9] = {0};
  double phases[2][2];
  for (int cores = 1; cores <= 2; cores++)
    for (int spread = 0; spread < 2; spread++) {
      to_env env = s_env(2, 1);
      env.cores = cores;
      cr_assert_eq(to_moves_assigned(&p, 0, spread ? five : one, &env, pl, &c, &mv, &err), TR_OK, "%s",
                   err.msg);
      phases[cores - 1][spread] = mv.cost.c[TL_C_PHASES];
      to_moves_free(&mv);
    }
  cr_assert_float_eq(phases[0][1] - phases[0][0], 1, 1e-9, "one core: the second busy site a round trip");
  cr_assert_float_eq(phases[1][1] - phases[1][0], 0, 1e-9, "two cores: none");
  s_unplace(pl);
}

/* A stored operand in finer chunks than the node along labels the
** executor runs in pieces (ta_label_piece) is read where it is: the dense
** layer's weights in 4 row blocks of 4096 under a product whose k is
** whole cost no copy; in blocks of 100 (under TA_PIECE_MIN) they are
** copied together, 16384 x 64 elements a tuple. */
Test(optimize, operands_read_in_pieces_are_not_copied) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_moves mv;
  tr_err err;
  to_choice c = s_bcast_b_a_in_place();
  double elem[2];
  int64_t rows[2] = {4096, 100};
  for (int t = 0; t < 2; t++) {
    s_matmul(&p, 512, 64, 16384, 128, 64, 16384);
    p.rels[1].meta.chunk[0] = rows[t];
    s_place(&p, pl, 4);
    cr_assert_eq(to_moves_compute(&p, 0, &c, ENV(4, 1), pl, &mv, 0, &err), TR_OK, "%s", err.msg);
    elem[t] = mv.cost.c[TL_C_ELEMWISE];
    to_moves_free(&mv);
    s_unplace(pl);
  }
  /* one tuple a site: the copy is the only difference */
  cr_assert_float_eq(elem[1] - elem[0], 16384.0 * 64, 1e-6 * elem[1], "%g against %g", elem[1], elem[0]);
}

/* Pieces along a kept label of a product make BLAS pack the other factor
** once a piece: they are run only where that packs fewer floats again
** than copying the pieces together moves.  X in 128-row blocks under a
** 512-row node times a 4096 x 1024 factor (the projection) is copied
** together; under a 256-row node times a 16384 x 64 factor (the dense
** layer) it is read in pieces; pieces along the summed label always are. */
Test(optimize, pieces_along_a_kept_label_only_where_repacking_is_cheap) {
  static ta_plan p;
  const tr_tensor *in[2];
  s_matmul(&p, 512, 1024, 4096, 512, 1024, 4096);
  p.rels[0].meta.chunk[0] = 128;
  in[0] = &p.rels[0].meta;
  in[1] = &p.rels[1].meta;
  cr_assert_eq(ta_label_piece(&p.nodes[0], in, 0), 0, "the projection's rows are copied together");
  s_matmul(&p, 256, 64, 16384, 256, 64, 16384);
  p.rels[0].meta.chunk[0] = 128;
  cr_assert_eq(ta_label_piece(&p.nodes[0], in, 0), 128, "the dense layer's rows are read in pieces");
  s_matmul(&p, 512, 1024, 4096, 512, 1024, 4096);
  p.rels[0].meta.chunk[1] = p.rels[1].meta.chunk[0] = 128;
  cr_assert_eq(ta_label_piece(&p.nodes[0], in, 2), 128, "the summed label is read in pieces");
}

/* BLAS packs each factor of a gemm call once: a tuple of C = A B packs A's
** block and B's; run in pieces along i, B's block once a piece; along k,
** each once still.  The model counts it as its own component: a product
** 32 rows thin packs 4096 x 4096 floats of B for 2^30 flops, 16 times
** what a 1024^3 product packs a flop. */
Test(optimize, a_product_packs_each_factor_once_a_call) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_moves mv;
  tr_err err;
  int64_t box[3] = {512, 1024, 4096}, piece[3] = {128, 0, 0};
  s_matmul(&p, 512, 1024, 4096, 512, 1024, 4096);
  cr_assert_float_eq(ta_gemm_packed(&p.nodes[0], box, NULL), 512.0 * 4096 + 4096.0 * 1024, 1e-9);
  cr_assert_float_eq(ta_gemm_packed(&p.nodes[0], box, piece), 512.0 * 4096 + 4 * 4096.0 * 1024, 1e-9);
  piece[0] = 0;
  piece[2] = 1024;
  cr_assert_float_eq(ta_gemm_packed(&p.nodes[0], box, piece), 512.0 * 4096 + 4096.0 * 1024, 1e-9);
  double per_flop[2];
  const int64_t m[2] = {32, 1024}, nk[2] = {4096, 1024};
  for (int t = 0; t < 2; t++) {
    to_choice c = s_bcast_b_a_in_place();
    s_matmul(&p, m[t], nk[t], nk[t], m[t], nk[t], nk[t]);
    s_place(&p, pl, 1);
    cr_assert_eq(to_moves_compute(&p, 0, &c, ENV(1, 1), pl, &mv, 0, &err), TR_OK, "%s", err.msg);
    cr_assert_float_eq(mv.cost.c[TL_C_PACK], (double)(m[t] * nk[t] + nk[t] * nk[t]), 1e-6);
    per_flop[t] = mv.cost.c[TL_C_PACK] / mv.cost.c[TL_C_GEMM];
    to_moves_free(&mv);
    s_unplace(pl);
  }
  cr_assert_gt(per_flop[0], 15 * per_flop[1], "%g against %g", per_flop[0], per_flop[1]);
}

/* p: stored relation `in` (0) and the output `out` (1) a node of one
** operand makes; their shapes, and the node, are the caller's. */
static void s_one_input(ta_plan *p, const char *in, const char *out, tr_dtype dt) {
  memset(p, 0, sizeof *p);
  p->nrels = 2;
  const char *nm[2] = {in, out};
  for (int r = 0; r < 2; r++) {
    p->rels[r].kind = r ? TA_REL_OUTPUT : TA_REL_STORED;
    snprintf(p->rels[r].meta.name, sizeof p->rels[r].meta.name, "%s", nm[r]);
    p->rels[r].meta.dtype = dt;
    p->rels[r].meta.version = 1;
  }
}

/* MIN of a vector into a scalar, the node in other chunks than the vector
** is stored in (what the layout chose for a block's last step, `best[] =
** MIN(dist[n])` after dist in 256-element chunks): the pieces are
** assembled where the one output chunk is, and that site aggregates them
** in one phase.  Every plan the rules reached was refused, so the block
** fell back to its declared chunking, 1.6x slower. */
Test(optimize, a_scalar_aggregate_of_a_rechunked_operand_runs_in_one_phase) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_one_input(&p, "dist", "best", TR_F32);
  p.rels[0].meta.rank = 1;
  p.rels[0].meta.shape[0] = 512;
  p.rels[0].meta.chunk[0] = 256;
  ta_node *n = &p.nodes[0];
  p.nnodes = 1;
  n->nlabels = 1;
  n->nout = 0;
  snprintf(n->lname[0], sizeof n->lname[0], "n");
  n->size[0] = n->chunk[0] = 512;
  n->ninputs = 1;
  n->in[0] = (ta_operand){0, 1, {0}};
  n->prog.n = 1;
  n->prog.code[0] = (tk_insn){TK_OP_INPUT, 0, 0};
  n->agg = TK_AGG_MIN;
  n->drive = -1;
  n->out = 1;
  s_place(&p, pl, 4);
  cr_assert_eq(to_optimize(&p, ENV(4, 1), pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  const struct to_alt *one = &o.alt[o.chosen];
  cr_assert_eq(one->choice[0].twophase, 0, "one phase: %s", one->name);
  cr_assert_eq(one->choice[0].drive, -1, "the re-chunked operand does not drive the join");
  cr_assert_eq(one->floats, 256, "one of the two pieces moves to the output's site: %lld floats",
               (long long)one->floats);
  to_opt_free(&o);
  s_unplace(pl);
}

/* A transpose into a tensor declared in other chunks (`CREATE TENSOR
** B[4,2] CHUNK [3,1]; B[j,i] = A[i,j];` with A stored in 1 x 4 rows): the
** node computes in B's chunks, so A is read in 1 x 3 boxes, which do not
** nest in its chunks and so cannot drive the join.  Its one plan, LOCAL,
** was refused ("no runnable plan for B") and the statement failed under
** the default layout; its pieces now go where their output chunk is. */
Test(optimize, a_lone_operand_read_in_other_chunks_is_sent_to_its_output_chunks) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_one_input(&p, "A", "B", TR_F64);
  p.rels[0].meta.rank = p.rels[1].meta.rank = 2;
  p.rels[0].meta.shape[0] = 2, p.rels[0].meta.shape[1] = 4; /* A[i,j], 1 x 4 chunks */
  p.rels[0].meta.chunk[0] = 1, p.rels[0].meta.chunk[1] = 4;
  p.rels[1].meta.shape[0] = 4, p.rels[1].meta.shape[1] = 2; /* B[j,i], 3 x 1 chunks */
  p.rels[1].meta.chunk[0] = 3, p.rels[1].meta.chunk[1] = 1;
  ta_node *n = &p.nodes[0];
  p.nnodes = 1;
  n->nlabels = n->nout = 2;
  snprintf(n->lname[0], sizeof n->lname[0], "j");
  snprintf(n->lname[1], sizeof n->lname[1], "i");
  n->size[0] = 4, n->chunk[0] = 3;
  n->size[1] = 2, n->chunk[1] = 1;
  n->ninputs = 1;
  n->in[0] = (ta_operand){0, 2, {1, 0}};
  n->prog.n = 1;
  n->prog.code[0] = (tk_insn){TK_OP_INPUT, 0, 0};
  n->agg = TK_AGG_NONE;
  n->drive = -1;
  n->out = 1;
  s_place(&p, pl, 4);
  cr_assert_eq(to_optimize(&p, ENV(4, 1), pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  const struct to_alt *one = &o.alt[o.chosen];
  cr_assert_str_eq(one->name, "SHUF[A by j,i]");
  cr_assert_eq(one->choice[0].drive, -1, "the re-chunked operand does not drive the join");
  cr_assert_eq(one->choice[0].mv[0], TO_MV_SHUF);
  /* A's row i (on site i) goes whole, once, to each other site that
  ** computes an output chunk of column i, as the executor sends it */
  int64_t want = 0;
  for (int ib = 0; ib < 2; ib++) {
    uint64_t to = 0;
    for (int jb = 0; jb < 2; jb++) to |= 1ull << to_hash_site(n, one->choice[0].part, (int64_t[]){jb, ib}, 4);
    want += 4 * __builtin_popcountll(to & ~(1ull << ib));
  }
  cr_assert_gt(want, 0, "some output chunk is away from its row of A");
  cr_assert_eq(one->floats, want, "%lld floats moved, %lld expected", (long long)one->floats, (long long)want);
  to_opt_free(&o);
  s_unplace(pl);
}

/* A dense layer's input stored as one 512 x 16384 chunk, on site 0 and its
** replica on site 1, times 16384 x 64 weights likewise, on 4 sites: the
** join reads the input's row halves in place, one on each holder, so the
** layout cuts the rows; costed as copies made on the primary alone, it
** cut the weights' 64 columns instead, and each task packed all of the
** input (a 0.012 s gemm where a row half takes 0.010 s). */
Test(optimize, a_stored_operand_read_in_flight_is_cut_where_its_replicas_are) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_matmul(&p, 512, 64, 16384, 512, 64, 16384);
  s_place(&p, pl, 4);
  for (int r = 0; r < 2; r++) pl[r].has[0] = 3; /* held by sites 0 and 1 */
  to_env env = s_env(4, 2);
  env.layout = TO_LAYOUT_AUTO;
  cr_assert_eq(to_optimize(&p, &env, pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  cr_assert(o.layout.ran && o.layout.used, "the chosen chunking runs");
  cr_assert(p.nodes[0].chunk[0] < 512 && p.nodes[0].chunk[1] == 64,
            "rows cut, not the weights' columns: chunk %lld x %lld",
            (long long)p.nodes[0].chunk[0], (long long)p.nodes[0].chunk[1]);
  cr_assert_eq(o.alt[o.chosen].floats, 512 * 64, "nothing moves but the output's replicas: %lld",
               (long long)o.alt[o.chosen].floats);
  to_opt_free(&o);
  s_unplace(pl);
}

/* When no plan runs in the chunking the layout chose, the declared one
** runs and EXPLAIN says why (a block once fell back without a word): here
** a forced CMM[k], which the chosen chunking does not split k for (an
** outer product's short k, stored in 4 pieces: summing 4096 x 4096
** partials would move far more than the operands). */
Test(optimize, explain_says_why_the_chosen_chunking_does_not_run) {
  static ta_plan p;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  tr_err err;
  s_matmul(&p, 4096, 4096, 256, 4096, 4096, 64);
  s_place(&p, pl, 4);
  to_env env = s_env(4, 1);
  env.layout = TO_LAYOUT_AUTO;
  cr_assert_eq(to_optimize(&p, &env, pl, "CMM", &o, &err), TR_OK, "%s", err.msg);
  cr_assert(o.layout.ran && isnan(o.layout.auto_s), "the chosen chunking ran: %g s", o.layout.auto_s);
  cr_assert(!strncmp(o.alt[o.chosen].name, "CMM", 3), "ran %s", o.alt[o.chosen].name);
  char *text = to_opt_text(&p, &o, "");
  cr_assert(text && strstr(text, "none runs (no plan 'CMM'); the declared chunking does"), "%s", text);
  free(text);
  text = to_opt_json(&p, &o, "");
  cr_assert(text && strstr(text, "\"chosen_fails\": \"no plan 'CMM'\""), "%s", text);
  free(text);
  to_opt_free(&o);
  s_unplace(pl);
}

/* The rewrite search dedupes the trees it reaches by oi_hash, not by
** formatting their text: over every tree the rules reach from a product
** (and from one whose two operands are one relation, A[i,k] * A[k,j]), two
** trees hash equal exactly when their canonical texts are equal. */
Test(optimize, tree_hashes_agree_with_canonical_texts) {
  enum { NMAX = 600 };
  static ta_plan p;
  static oi_tree q[NMAX], tmp[16];
  static char text[NMAX][640];
  static uint64_t hash[NMAX];
  for (int same = 0; same < 2; same++) {
    s_matmul(&p, 512, 512, 512, 256, 256, 128);
    if (same) p.nodes[0].in[1].rel = 0, p.rels[1] = p.rels[0]; /* both read A */
    oi_ctx x;
    oi_ctx_init(&x, &p, 0);
    oi_initial(&x, &q[0]);
    oi_normalize(&q[0]);
    int n = 1, reached = 0;
    oi_text(&x, &q[0], 0, text[0], sizeof text[0]);
    hash[0] = oi_hash(&x, &q[0], 0);
    for (int qi = 0; qi < n; qi++)
      for (int at = 0; at < q[qi].n; at++)
        for (int r = 0; r < oi_rule_count(); r++) {
          int nt = 0;
          oi_apply(&x, &q[qi], at, r, tmp, &nt, 16);
          for (int j = 0; j < nt; j++) {
            char t[640];
            uint64_t h = oi_hash(&x, &tmp[j], 0);
            oi_text(&x, &tmp[j], 0, t, sizeof t);
            int seen = 0;
            reached++;
            for (int k = 0; k < n && !seen; k++) {
              int eqt = !strcmp(t, text[k]), eqh = h == hash[k];
              cr_assert_eq(eqt, eqh, "texts '%s' and '%s', hashes %s", t, text[k],
                           eqh ? "equal" : "different");
              seen = eqt;
            }
            if (!seen && n < NMAX) {
              q[n] = tmp[j];
              memcpy(text[n], t, sizeof t);
              hash[n++] = h;
            }
          }
        }
    cr_assert_gt(n, 10, "the rules reach many distinct trees");
    cr_assert_gt(reached, n, "and some more than once");
  }
}

/* A Gram product, G[i,j] = SUM_k X[k,i] * X[k,j], X K x D in ck x cd
** chunks: s_matmul's product with both operands relation 0. */
static void s_gram(ta_plan *p, int64_t K, int64_t D, int64_t ck, int64_t cd) {
  s_matmul(p, D, D, K, cd, cd, ck);
  p->nrels = 2;
  p->rels[1] = p->rels[2];
  p->rels[0].meta.shape[0] = K, p->rels[0].meta.shape[1] = D;
  p->rels[0].meta.chunk[0] = ck, p->rels[0].meta.chunk[1] = cd;
  snprintf(p->rels[0].meta.name, sizeof p->rels[0].meta.name, "X");
  ta_node *n = &p->nodes[0];
  n->in[0] = (ta_operand){0, 2, {2, 0}};
  n->in[1] = (ta_operand){0, 2, {2, 1}};
  n->out = 1;
}

/* A Gram product's blocks below the diagonal are their mirrors'
** transposes (ta_gemm_mirror), each made where its mirror is, in a
** 1-phase plan: a copy, not a gemm, so on one site G's 4 x 4 blocks cost
** 4 halves (syrk) and 6 gemm blocks, half of A^T B's 16 (without the
** mirrors, 14), and the blocks go to the sites by their gemm, not by a
** hash.  A 2-phase plan sums a block's partials on several sites: they
** are mirrored where each site sums the same tuples of a block and of its
** mirror, else computed. */
Test(optimize, gram_blocks_below_the_diagonal_cost_a_copy_where_their_mirror_is) {
  static ta_plan p, q;
  to_placed pl[TA_MAX_RELS];
  to_opt o;
  to_moves mv, ab;
  tr_err err;
  s_gram(&p, 1024, 256, 1024, 64);
  s_matmul(&q, 256, 256, 1024, 64, 64, 1024);
  q.rels[0].meta.shape[0] = 1024, q.rels[0].meta.shape[1] = 256; /* A^T: A[k,i] */
  q.rels[0].meta.chunk[0] = 1024, q.rels[0].meta.chunk[1] = 64;
  q.nodes[0].in[0] = (ta_operand){0, 2, {2, 0}};
  to_choice rmm;
  memset(&rmm, 0, sizeof rmm);
  rmm.drive = -1;
  rmm.part = 3; /* i, j */
  rmm.mv[0] = rmm.mv[1] = TO_MV_DUP;
  s_place(&p, pl, 1);
  cr_assert_eq(to_moves_compute(&p, 0, &rmm, ENV(1, 1), pl, &mv, 0, &err), TR_OK, "%s", err.msg);
  s_unplace(pl);
  s_place(&q, pl, 1);
  cr_assert_eq(to_moves_compute(&q, 0, &rmm, ENV(1, 1), pl, &ab, 0, &err), TR_OK, "%s", err.msg);
  s_unplace(pl);
  cr_assert(mv.mirror && !ab.mirror);
  cr_assert_float_eq(mv.cost.c[TL_C_GEMM], ab.cost.c[TL_C_GEMM] * 8 / 16, 1e-6 * ab.cost.c[TL_C_GEMM]);
  to_moves_free(&mv);
  to_moves_free(&ab);
  /* 2 x 2 blocks hashed to 2 sites would put (0,1), its mirror and (1,1)
  ** on one: the two diagonal halves go to one site, (0,1) to the other */
  s_gram(&p, 1024, 256, 1024, 128);
  s_place(&p, pl, 2);
  cr_assert_eq(to_moves_compute(&p, 0, &rmm, ENV(2, 1), pl, &mv, 0, &err), TR_OK, "%s", err.msg);
  s_unplace(pl);
  cr_assert(mv.owner[0] == mv.owner[3] && mv.owner[1] == mv.owner[2] && mv.owner[0] != mv.owner[1]);
  to_moves_free(&mv);
  /* the same with X kept in place, driving the join: among the sites
  ** that hold a block's chunks of X, so with X's column blocks on both
  ** sites as above; with column block l on site l alone, (0,1) and its
  ** mirror where block 0 is */
  to_choice keep = s_bcast_b_a_in_place();
  for (int both = 1; both >= 0; both--) {
    s_place(&p, pl, 2);
    for (int64_t l = 0; both && l < pl[0].n; l++) pl[0].has[l] = 3;
    cr_assert_eq(to_moves_compute(&p, 0, &keep, ENV(2, 1), pl, &mv, 0, &err), TR_OK, "%s", err.msg);
    s_unplace(pl);
    cr_assert(mv.mirror && mv.owner[1] == mv.owner[2]);
    if (both) cr_assert(mv.owner[0] == mv.owner[3] && mv.owner[0] != mv.owner[1]);
    else cr_assert(mv.owner[0] == 0 && mv.owner[1] == 0 && mv.owner[3] == 1);
    to_moves_free(&mv);
  }
  /* on 3 sites, the 1-phase plans the rules reach and CMM[k] mirror, each
  ** block below the diagonal made where its mirror is: in a 1-phase plan
  ** on one site; in CMM[k], on each site that sums a share of the depth
  ** (a block's tuples and its mirror's of the same depth on one site) */
  s_gram(&p, 1024, 256, 256, 64);
  s_place(&p, pl, 3);
  cr_assert_eq(to_optimize(&p, ENV(3, 1), pl, NULL, &o, &err), TR_OK, "%s", err.msg);
  int one = 0, two = 0;
  for (int a = 0; a < o.nalt; a++) {
    to_placed cur[TA_MAX_RELS];
    s_place(&p, cur, 3);
    cr_assert_eq(to_moves_compute(&p, 0, &o.alt[a].choice[0], ENV(3, 1), cur, &mv, 0, &err), TR_OK,
                 "%s: %s", o.alt[a].name, err.msg);
    int cmm = !strncmp(o.alt[a].name, "CMM", 3);
    cr_assert(mv.mirror || (o.alt[a].choice[0].twophase && !cmm), "%s", o.alt[a].name);
    one += !o.alt[a].choice[0].twophase, two += cmm;
    for (int64_t i = 0; i < 4; i++)
      for (int64_t j = 0; j < i && mv.mirror; j++)
        cr_assert_eq(mv.osites[i * 4 + j], mv.osites[j * 4 + i], "%s: block (%lld,%lld)", o.alt[a].name,
                     (long long)i, (long long)j);
    to_moves_free(&mv);
    s_unplace(cur);
  }
  cr_assert(one && two, "%d 1-phase plans and %d CMM", one, two);
  to_opt_free(&o);
  /* a 2-phase plan whose tuples follow X kept in place: block (a,b)'s
  ** tuple of depth t runs where X's chunk (t,a) is, its mirror's where
  ** (t,b) is, another site: every block is computed */
  keep.twophase = 1;
  keep.agg_part = 3;
  cr_assert_eq(to_moves_compute(&p, 0, &keep, ENV(3, 1), pl, &mv, 0, &err), TR_OK, "%s", err.msg);
  cr_assert(!mv.mirror);
  to_moves_free(&mv);
  s_unplace(pl);
}
