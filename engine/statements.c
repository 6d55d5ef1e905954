/*
** engine/statements.c - the statements: CREATE, LOAD, SAVE, FILL, SHOW,
** DESCRIBE, and assignments, whose plans go compile -> optimize -> run in
** te_run_plan (PRINT and slices are in slice.c, SET in settings.c).
*/
#include "config.h"
#include "engine/engine_int.h"

#include <inttypes.h>
#include <math.h>
#include <sys/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SAVE: each chunk read from a worker goes into its box of the file, by
** bands (else in place). */
typedef struct s_save_ctx {
  te_engine *e;     /* engine */
  tr_tensor *t;     /* tensor */
  tc_array *a;      /* destination */
  const te_box *box;/* the part of t it holds */
  te_bands *bands;  /* NULL: bands too large, copied into a->data */
} s_save_ctx;

/* Check a CHUNK clause against a rank and fill t->chunk (clamped to the
** shape); without one pick the default.  A chunk travels to and from the
** workers as one data frame, so one larger than a worker accepts
** (TN_MAX_DATA) is refused here rather than at its first use, as is a
** grid of more than TR_MAX_CHUNKS chunks. */
static int s_set_chunk(const tp_stmt *s, tr_tensor *t, tr_err *err) {
  char dims[256];
  if (s->has_chunk && s->chunk_rank != t->rank)
    return tr_seterr(err, TR_ESHAPE, "CHUNK has %d entr%s but %s has rank %d", s->chunk_rank,
                     s->chunk_rank == 1 ? "y" : "ies", t->name, t->rank);
  if (!s->has_chunk) tx_default_chunk(t->rank, t->shape, t->dtype, t->chunk);
  double bytes = (double)tr_dtype_size(t->dtype), all = tr_tensor_bytes(t), grid = 1;
  for (int d = 0; d < t->rank; d++) {
    if (s->has_chunk) t->chunk[d] = s->chunk[d] < t->shape[d] ? s->chunk[d] : t->shape[d];
    bytes *= (double)t->chunk[d];
    grid *= (double)tr_grid(t, d);
  }
  te_dims_text(dims, sizeof dims, t->rank, t->chunk, ", ");
  if (!s->has_chunk && (bytes > (double)TN_MAX_DATA || grid > (double)TR_MAX_CHUNKS))
    return tr_seterr(err, TR_ESHAPE,
                     "%s is too large: %.3g PiB of %s, more than %" PRId64 " chunks of at most %g GiB "
                     "each hold (%.3g PiB)", t->name, all / (double)(1LL << 50), tr_dtype_name(t->dtype),
                     TR_MAX_CHUNKS, (double)TN_MAX_DATA / (1 << 30),
                     (double)TR_MAX_CHUNKS * (double)TN_MAX_DATA / (double)(1LL << 50));
  if (bytes > (double)TN_MAX_DATA)
    return tr_seterr(err, TR_ESHAPE,
                     "chunk [%s] of %s is %.3g GiB; a chunk may be at most %g GiB (the largest "
                     "a worker accepts): give a smaller CHUNK",
                     dims, tr_dtype_name(t->dtype), bytes / (1 << 30), (double)TN_MAX_DATA / (1 << 30));
  if (grid > (double)TR_MAX_CHUNKS)
    return tr_seterr(err, TR_ESHAPE,
                     "CHUNK [%s] cuts %s into %.0f chunks; a tensor may have at most %" PRId64
                     ": give a larger CHUNK", dims, t->name, grid, TR_MAX_CHUNKS);
  return TR_OK;
}

int te_create(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor t;
  memset(&t, 0, sizeof t);
  snprintf(t.name, sizeof t.name, "%s", s->name);
  t.dtype = s->has_type ? s->dtype : TR_F32;
  t.rank = s->rank;
  memcpy(t.shape, s->shape, sizeof t.shape);
  int rc = s_set_chunk(s, &t, err);
  if (!rc) rc = tc_tensor_create(e->db, &t, err);
  /* the chunks a user declares are kept by assignments to the tensor */
  if (!rc) rc = tc_declared_chunk_set(e->db, t.name, s->has_chunk ? t.rank : -1, t.chunk, err);
  return rc;
}

int te_load(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor t;
  tc_array a;
  int exists = tc_tensor_get(e->db, s->name, &t, NULL) == TR_OK;
  tr_dtype dt = s->has_type ? s->dtype : exists ? t.dtype : TR_F32;
  tc_csv_opts csv = {s->header, s->delim, s->has_null, s->null_value};
  int rc = tc_array_open(s->path, dt, &csv, &a, err);
  if (rc) return rc;
  if (exists) {
    int same = a.rank == t.rank;
    for (int d = 0; same && d < a.rank; d++) same = a.shape[d] == t.shape[d];
    if (!same) {
      char hv[256], fv[256];
      te_dims_text(hv, sizeof hv, t.rank, t.shape, " x ");
      te_dims_text(fv, sizeof fv, a.rank, a.shape, " x ");
      rc = tr_seterr(err, TR_ESHAPE, "shape mismatch: %s is %s but '%s' holds %s", s->name,
                     t.rank ? hv : "a scalar", s->path, a.rank ? fv : "a scalar");
      goto done;
    }
    if (s->has_type && s->dtype != t.dtype) {
      rc = tr_seterr(err, TR_ETYPE, "type mismatch: %s is %s, not %s", s->name,
                     tr_dtype_name(t.dtype), tr_dtype_name(s->dtype));
      goto done;
    }
    if (s->has_chunk && (rc = s_set_chunk(s, &t, err))) goto done;
  } else {
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", s->name);
    t.dtype = s->has_type ? s->dtype : a.dtype;
    t.rank = a.rank;
    memcpy(t.shape, a.shape, sizeof t.shape);
    for (int d = 0; d < a.rank; d++)
      if (a.shape[d] == 0) {
        rc = tr_seterr(err, TR_ESHAPE, "'%s' is empty (dimension %d has size 0)", s->path, d);
        goto done;
      }
    if ((rc = s_set_chunk(s, &t, err))) goto done;
  }
  rc = te_write_array(e, &t, &a, s->path, err);
  if (!rc && s->has_chunk) rc = tc_declared_chunk_set(e->db, t.name, t.rank, t.chunk, err);
done:
  tc_array_close(&a);
  return rc;
}

static int s_save_chunk(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
  s_save_ctx *c = ctx;
  (void)bytes;
  if (c->bands) return te_bands_put(c->bands, lin, (void *)buf, err);
  int rc = te_box_copy(c->e, c->t, c->box, c->a, lin, (void *)buf, 1);
  if (rc == TR_EINTR) return tr_seterr(err, rc, "interrupted");
  return rc ? tr_seterr(err, rc, "copy to the output file failed") : TR_OK;
}

/* SAVE name[ranges] TO 'path': the chunks that overlap the slice are
** read, each into its part of the file. */
int te_save(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor t;
  tc_array a;
  te_box box;
  int64_t shape[TR_MAX_RANK], *lins = NULL, nl = 0;
  int rank = 0;
  int rc = tc_tensor_get(e->db, s->name, &t, err);
  if (rc || (rc = te_box_of(s, &t, &box, err))) return rc;
  for (int d = 0; d < t.rank; d++)
    if (box.keep[d]) shape[rank++] = box.ext[d];
  if ((rc = tc_array_create(s->path, t.dtype, rank, shape, &a, err))) return rc;
  s_save_ctx c = {e, &t, &a, &box, NULL};
  if ((rc = te_bands_begin(e, &t, &box, &a, &c.bands, err))) goto done;
  if (!(lins = malloc(sizeof *lins * (size_t)(tr_nchunks(&t) + 1)))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int64_t lin = 0; lin < tr_nchunks(&t); lin++) { /* those overlapping the box */
    int64_t key[TR_MAX_RANK], in = 1;
    tr_key_from_linear(&t, lin, key);
    for (int d = 0; d < t.rank; d++)
      in &= key[d] * t.chunk[d] < box.lo[d] + box.ext[d] && (key[d] + 1) * t.chunk[d] > box.lo[d];
    if (in) lins[nl++] = lin;
  }
  rc = td_pread(e->cluster, &t, lins, nl, s_save_chunk, &c, err);
  if (!rc && c.bands) rc = te_bands_end(c.bands, err);
  if (!rc) rc = tc_array_commit(&a, err);
done:
  te_bands_free(&c.bands);
  free(lins);
  tc_array_close(&a);
  return rc;
}

/* FILL PERMUTATION needs one row of its leading dimensions for each entry
** of its last: P[s,j,h] with S*J == H assigns every h to exactly one
** (s,j). */
static int s_check_permutation(const tr_tensor *t, tr_err *err) {
  int64_t rows = 1;
  if (t->rank < 2)
    return tr_seterr(err, TR_ESHAPE,
                     "FILL %s PERMUTATION needs a tensor of rank 2 or more (it has rank %d)",
                     t->name, t->rank);
  for (int d = 0; d < t->rank - 1; d++) rows *= t->shape[d];
  if (rows != t->shape[t->rank - 1])
    return tr_seterr(err, TR_ESHAPE,
                     "FILL %s PERMUTATION needs the leading dimensions to hold as many rows "
                     "(%" PRId64 ") as the last dimension has entries (%" PRId64 ")",
                     t->name, rows, t->shape[t->rank - 1]);
  return TR_OK;
}

int te_fill(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor t;
  int rc = tc_tensor_get(e->db, s->name, &t, err);
  if (rc == TR_ENOTFOUND)
    return tr_seterr(err, TR_ENAME, "no such tensor: %s (declare it with CREATE TENSOR)", s->name);
  if (rc) return rc;
  if (s->fill == TP_FILL_UNIFORM && !(s->p0 < s->p1))
    return tr_seterr(err, TR_EINVAL, "UNIFORM(lo, hi) needs lo < hi");
  if (s->fill == TP_FILL_NORMAL && !(s->p1 >= 0))
    return tr_seterr(err, TR_EINVAL, "NORMAL(mu, sd) needs sd >= 0");
  if (s->fill == TP_FILL_PERMUTATION && (rc = s_check_permutation(&t, err)) != TR_OK) return rc;
  tx_fill f = {s->fill, s->p0, s->p1, s->seed};
  if (!s->has_seed && getrandom(&f.seed, sizeof f.seed, 0) != (ssize_t)sizeof f.seed)
    f.seed = (uint64_t)(tr_now() * 1e9);
  return td_fill(e->cluster, &t, &f, err);
}

int te_show(te_engine *e, te_result **res, tr_err *err) {
  static const char *const cols[] = {"name",  "shape",  "chunk",    "type",
                                     "format", "chunks", "replicas", "under_replicated"};
  tr_tensor *ts = NULL;
  int n = 0, rc = tc_tensor_list(e->db, &ts, &n, err), target = td_target(e->cluster);
  if (rc) return rc;
  te_result *r = te_rows_new(8, cols);
  if (!r) {
    free(ts);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n && !rc; i++) {
    char shape[256], chunk[256], nch[32], reps[32], under[32];
    int fewest;
    int64_t nunder;
    if ((rc = tc_tensor_replicas(e->db, &ts[i], target, &fewest, &nunder, err))) break;
    te_dims_text(shape, sizeof shape, ts[i].rank, ts[i].shape, " x ");
    te_dims_text(chunk, sizeof chunk, ts[i].rank, ts[i].chunk, " x ");
    snprintf(nch, sizeof nch, "%lld", (long long)tr_nchunks(&ts[i]));
    snprintf(reps, sizeof reps, "%d", fewest);
    snprintf(under, sizeof under, "%lld", (long long)nunder);
    if (!ts[i].version) strcpy(reps, "-"), strcpy(under, "-"); /* declared only: nothing stored */
    const char *cells[] = {ts[i].name, ts[i].rank ? shape : "scalar", ts[i].rank ? chunk : "-",
                           tr_dtype_name(ts[i].dtype), ts[i].format, nch, reps, under};
    te_rows_add(r, cells);
  }
  free(ts);
  if (rc) {
    te_result_free(&r);
    return rc;
  }
  *res = r;
  return TR_OK;
}

int te_describe(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err) {
  static const char *const cols[] = {"property", "value"};
  tr_tensor t;
  int64_t bytes = 0;
  int rc = tc_tensor_get(e->db, s->name, &t, err);
  if (rc || (rc = tc_tensor_bytes(e->db, &t, &bytes, err))) return rc;
  te_result *r = te_rows_new(2, cols);
  if (!r) return tr_seterr(err, TR_ENOMEM, "out of memory");
  char shape[256], chunk[256], rank[16], nch[32], nb[32], grid[256], ver[32];
  int64_t g[TR_MAX_RANK];
  for (int d = 0; d < t.rank; d++) g[d] = tr_grid(&t, d);
  te_dims_text(shape, sizeof shape, t.rank, t.shape, " x ");
  te_dims_text(chunk, sizeof chunk, t.rank, t.chunk, " x ");
  te_dims_text(grid, sizeof grid, t.rank, g, " x ");
  snprintf(rank, sizeof rank, "%d", t.rank);
  snprintf(nch, sizeof nch, "%lld", (long long)tr_nchunks(&t));
  snprintf(nb, sizeof nb, "%lld", (long long)bytes);
  snprintf(ver, sizeof ver, "%lld", (long long)t.version);
  const char *rows[][2] = {
    {"name", t.name}, {"type", tr_dtype_name(t.dtype)}, {"rank", rank},
    {"shape", t.rank ? shape : "scalar"}, {"chunk", t.rank ? chunk : "-"},
    {"chunk grid", t.rank ? grid : "1"}, {"format", t.format}, {"chunks", nch},
    {"stored bytes", nb}, {"version", ver}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) te_rows_add(r, rows[i]);
  *res = r;
  return TR_OK;
}

/* The EXPLAIN of plan p as optimized (o), with what run measured when it
** ran (ANALYZE): text after the TRA expression tra, JSON or Graphviz. */
/* The optimizer's EXPLAIN with the schedule per worker after it. */
static char *s_plan_schedule(const ta_plan *p, const to_opt *o, const td_run *run, const tp_stmt *x,
                             const char *tra) {
  char *plan = x->json ? to_opt_json(p, o, tra) : to_opt_text(p, o, tra);
  char *sc = plan ? td_run_schedule_text(run, x->json) : NULL;
  char *all = NULL;
  if (sc) {
    tr_text t = {0};
    tr_text_put(&t, x->json ? "%s, %s" : "%s%s", plan, sc);
    all = tr_text_done(&t);
  }
  free(plan);
  free(sc);
  return all;
}

static te_result *s_explain(const ta_plan *p, const to_opt *o, const td_run *run,
                            const tp_stmt *x, const char *tra) {
  char *plan = x->dot ? to_opt_dot(p, o) : s_plan_schedule(p, o, run, x, tra);
  char *meas = plan && x->analyze && !x->dot ? td_run_analysis(run, x->json) : NULL;
  char *all = NULL;
  if (plan && (meas || !x->analyze || x->dot)) {
    size_t n = strlen(plan) + (meas ? strlen(meas) : 0) + 16;
    if ((all = malloc(n))) {
      if (x->json && meas) snprintf(all, n, "{%s, %s}\n", plan, meas);
      else if (x->json && !x->dot) snprintf(all, n, "{%s}\n", plan);
      else snprintf(all, n, "%s%s", plan, meas ? meas : "");
    }
  }
  free(plan);
  free(meas);
  return te_text_result(all);
}

/* Outputs whose tensors exist with a chunk shape the user declared keep
** it (auto layout; declared layout takes the operands' chunking). */
static int s_declared_outputs(te_engine *e, ta_plan *p, tr_err *err) {
  for (int i = 0; i < p->nrels && e->layout == TO_LAYOUT_AUTO; i++) {
    ta_rel *r = &p->rels[i];
    tr_tensor t;
    int64_t ch[TR_MAX_RANK];
    int declared = 0, rc, same;
    if (r->kind != TA_REL_OUTPUT || tc_tensor_get(e->db, r->meta.name, &t, NULL)) continue;
    if ((rc = tc_declared_chunk_get(e->db, r->meta.name, r->meta.rank, ch, &declared, err))) return rc;
    same = declared && t.rank == r->meta.rank;
    for (int d = 0; same && d < t.rank; d++) same = t.shape[d] == r->meta.shape[d];
    if (!same) continue;
    r->declared = 1;
    for (int d = 0; d < t.rank; d++) r->dchunk[d] = ch[d] < t.shape[d] ? ch[d] : t.shape[d];
  }
  return TR_OK;
}

unsigned te_compile_flags(const te_engine *e) { return e->layout == TO_LAYOUT_AUTO ? TA_SPLIT : 0; }

int te_run_plan(te_engine *e, ta_plan *p, const tp_stmt *x, te_result **res, te_measure *meas,
                tr_err *err) {
  td_run *run = NULL;
  to_placed *pl = NULL;
  to_opt opt;
  char *tra = NULL;
  int m = 0, repl = 0, exec = !x || x->analyze;
  double t0 = tr_now();
  memset(&opt, 0, sizeof opt);
  /* compile (the caller's) -> where the inputs are -> optimize -> run */
  int rc = s_declared_outputs(e, p, err);
  if (!rc) rc = td_run_begin(e->cluster, p, exec, &run, &m, &repl, &pl, err);
  to_env env = {m,        repl,      td_threads(e->cluster), td_cores(e->cluster),
                e->w,     e->layout, TE_CHUNK_LIMIT,         TN_MAX_DATA,
                e->memo,  x && !x->analyze}; /* EXPLAIN lists every alternative */
  /* A task holds its output chunk and a chunk of each operand: the chunks
  ** the layout search chooses fit a quarter of the smallest worker's
  ** --memory, so a scheduler can place every task within it. */
  int64_t mem = td_memory(e->cluster);
  if (mem > 0 && mem / 4 < env.chunk_limit) env.chunk_limit = mem / 4;
  if (!rc) rc = to_optimize(p, &env, pl, x && x->plan[0] ? x->plan : NULL, &opt, err);
  /* A plan named with PLAN runs as the optimizer's alternative says. */
  if (!rc)
    rc = td_run_schedule(run, &opt, &env, x && x->plan[0] ? TD_SCHED_STATEMENT : (int)te_setting(e, "scheduler"),
                         (double)te_setting(e, "scheduler_lp_seconds"), x && x->trace, err);
  if (!rc && exec) rc = td_run_exec(run, &opt, err);
  if (exec) e->committed += td_run_committed(run);
  if (!rc && meas) *meas = (te_measure){opt.cost, opt.seconds, tr_now() - t0};
  /* the TRA text of the plan as it ran: in the chunking chosen */
  if (!rc && x && res && !x->dot && !x->trace && !(tra = ta_plan_explain(p)))
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  if (!rc && x && x->trace && res) {
    char *tj = NULL;
    if (!(rc = td_run_trace(run, &tj, err)) && !(*res = te_text_result(tj)))
      rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  } else if (!rc && x && res && !(*res = s_explain(p, &opt, run, x, tra))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  free(tra);
  to_opt_free(&opt);
  td_run_end(&run);
  return rc;
}

int te_assign(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err) {
  ta_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return tr_seterr(err, TR_ENOMEM, "out of memory");
  int rc = ta_compile(e->db, e->pend, te_block_defs(e), e->npend, s, te_compile_flags(e), plan, err);
  if (!rc) rc = te_run_plan(e, plan, s->kind == TP_ST_EXPLAIN ? s : NULL, res, NULL, err);
  free(plan);
  return rc;
}
