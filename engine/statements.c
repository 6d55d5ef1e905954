/*
** engine/statements.c - the statements: CREATE, LOAD, SAVE, FILL, SHOW,
** DESCRIBE, PRINT, and assignments, whose plans go compile -> optimize ->
** run in te_run_plan.
*/
#include "config.h"
#include "engine/engine_int.h"

#include <math.h>
#include <sys/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PRINT_MAX 1000000 /* elements PRINT shows at most */

/* SAVE: each chunk read from a worker goes into its box of the file. */
typedef struct s_save_ctx {
  te_engine *e;     /* engine */
  tr_tensor *t;     /* tensor */
  tc_array *a;      /* destination */
} s_save_ctx;

/* PRINT: values of each chunk that fall in the slice go to the result. */
typedef struct s_print_ctx {
  const tr_tensor *t;  /* tensor */
  te_result *r;        /* result being filled */
} s_print_ctx;

/* Check a CHUNK clause against a rank and fill t->chunk (clamped to the
** shape); without one pick the default.  A chunk travels to and from the
** workers as one data frame, so one larger than a worker accepts
** (TN_MAX_DATA) is refused here rather than at its first use. */
static int s_set_chunk(const tp_stmt *s, tr_tensor *t, tr_err *err) {
  if (!s->has_chunk) {
    tx_default_chunk(t->rank, t->shape, t->dtype, t->chunk);
    return TR_OK;
  }
  if (s->chunk_rank != t->rank)
    return tr_seterr(err, TR_ESHAPE, "CHUNK has %d entr%s but %s has rank %d", s->chunk_rank,
                     s->chunk_rank == 1 ? "y" : "ies", t->name, t->rank);
  double bytes = (double)tr_dtype_size(t->dtype);
  for (int d = 0; d < t->rank; d++) {
    t->chunk[d] = s->chunk[d] < t->shape[d] ? s->chunk[d] : t->shape[d];
    bytes *= (double)t->chunk[d];
  }
  if (bytes > (double)TN_MAX_DATA) {
    char dims[256];
    te_dims_text(dims, sizeof dims, t->rank, t->chunk, ", ");
    return tr_seterr(err, TR_ESHAPE,
                     "chunk [%s] of %s is %.3g GiB; a chunk may be at most %g GiB (the largest "
                     "a worker accepts): give a smaller CHUNK",
                     dims, tr_dtype_name(t->dtype), bytes / (1 << 30), (double)TN_MAX_DATA / (1 << 30));
  }
  return TR_OK;
}

/* Copy between chunk lin of t (row-major, type t->dtype) and its box in
** the user's array a (type a->dtype), in either direction, with e's
** kernels; TR_EINTR once e is interrupted. */
static int s_chunk_array_copy(te_engine *e, const tr_tensor *t, tc_array *a, int64_t lin,
                              void *chunk, int to_array) {
  const tk_backend *kt = e->kt;
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK], cs[TR_MAX_RANK], off = 0;
  tr_key_from_linear(t, lin, key);
  int64_t n = tr_chunk_extent(t, key, ext);
  tx_row_major(t->rank, ext, cs);
  for (int d = 0; d < t->rank; d++) off += key[d] * t->chunk[d] * a->stride[d];
  size_t asz = tr_dtype_size(a->dtype);
  char *abase = (char *)a->data + (size_t)off * asz;
  void *tmp = chunk;
  if (a->dtype != t->dtype) {
    tmp = tr_alloc_aligned((size_t)n * asz);
    if (!tmp) return TR_ENOMEM;
    if (to_array) tx_convert(tmp, a->dtype, chunk, t->dtype, n);
  }
  int rc = TR_OK;
  if (t->rank == 0)
    memcpy(to_array ? (void *)abase : tmp, to_array ? tmp : (void *)abase, asz);
  else if (to_array)
    rc = kt->copy(a->dtype, a->rank, ext, abase, a->stride, tmp, cs, &e->interrupt);
  else
    rc = kt->copy(a->dtype, a->rank, ext, tmp, cs, abase, a->stride, &e->interrupt);
  if (!rc && !to_array && tmp != chunk) tx_convert(chunk, t->dtype, tmp, a->dtype, n);
  if (tmp != chunk) tr_free_aligned(tmp);
  return rc;
}

/* Every chunk number of t, 0..n-1 (caller frees). */
static int64_t *s_all_lins(const tr_tensor *t) {
  int64_t n = tr_nchunks(t);
  int64_t *v = malloc(sizeof *v * (size_t)(n + 1));
  for (int64_t i = 0; v && i < n; i++) v[i] = i;
  return v;
}

int te_create(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor t;
  memset(&t, 0, sizeof t);
  snprintf(t.name, sizeof t.name, "%s", s->name);
  t.dtype = s->has_type ? s->dtype : TR_F32;
  t.rank = s->rank;
  memcpy(t.shape, s->shape, sizeof t.shape);
  int rc = s_set_chunk(s, &t, err);
  return rc ? rc : tc_tensor_create(e->db, &t, err);
}

int te_load(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor t;
  tc_array a;
  td_pwrite *w = NULL;
  void *buf = NULL;
  int exists = tc_tensor_get(e->db, s->name, &t, NULL) == TR_OK;
  tr_dtype csv_dt = s->has_type ? s->dtype : exists ? t.dtype : TR_F32;
  int rc = tc_array_open(s->path, csv_dt, &a, err);
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
  if ((rc = td_pwrite_begin(e->cluster, &t, &w, err))) goto done;
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
  size_t cap = (size_t)tr_chunk_extent(&t, (int64_t[TR_MAX_RANK]){0}, ext) * tr_dtype_size(t.dtype);
  if (!(buf = tr_alloc_aligned(cap))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  for (int64_t lin = 0; lin < tr_nchunks(&t) && !rc; lin++) {
    tr_key_from_linear(&t, lin, key);
    size_t bytes = (size_t)tr_chunk_extent(&t, key, ext) * tr_dtype_size(t.dtype);
    if ((rc = s_chunk_array_copy(e, &t, &a, lin, buf, 0)))
      tr_seterr(err, rc, rc == TR_EINTR ? "interrupted" : "copy from '%s' failed", s->path);
    else
      rc = td_pwrite_chunk(w, lin, buf, bytes, err);
    if (!rc && tr_cancelled(&e->interrupt)) rc = tr_seterr(err, TR_EINTR, "interrupted");
  }
  if (!rc) rc = td_pwrite_commit(w, err);
done:
  tr_free_aligned(buf);
  td_pwrite_free(&w);
  tc_array_close(&a);
  return rc;
}

static int s_save_chunk(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
  s_save_ctx *c = ctx;
  (void)bytes;
  int rc = s_chunk_array_copy(c->e, c->t, c->a, lin, (void *)buf, 1);
  if (rc == TR_EINTR) return tr_seterr(err, rc, "interrupted");
  return rc ? tr_seterr(err, rc, "copy to the output file failed") : TR_OK;
}

int te_save(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor t;
  tc_array a;
  int rc = tc_tensor_get(e->db, s->name, &t, err);
  if (rc) return rc;
  if ((rc = tc_array_create(s->path, t.dtype, t.rank, t.shape, &a, err))) return rc;
  s_save_ctx c = {e, &t, &a};
  int64_t *lins = s_all_lins(&t);
  rc = lins ? td_pread(e->cluster, &t, lins, tr_nchunks(&t), s_save_chunk, &c, err)
            : tr_seterr(err, TR_ENOMEM, "out of memory");
  free(lins);
  if (!rc) rc = tc_array_commit(&a, err);
  tc_array_close(&a);
  return rc;
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

static int s_print_chunk(void *ctx, int64_t lin, const void *cb, size_t bytes, tr_err *err) {
  s_print_ctx *c = ctx;
  const tr_tensor *t = c->t;
  te_result *r = c->r;
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK], idx[TR_MAX_RANK] = {0}, vs[TR_MAX_RANK];
  (void)bytes;
  (void)err;
  tr_key_from_linear(t, lin, key);
  int64_t n = tr_chunk_extent(t, key, ext);
  tx_row_major(t->rank, r->shape, vs);
  for (int64_t i = 0; i < n; i++) {
    int inside = 1;
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++) {
      int64_t gpos = key[d] * t->chunk[d] + idx[d] - r->origin[d];
      if (gpos < 0 || gpos >= r->shape[d]) inside = 0;
      off += gpos * vs[d];
    }
    if (inside) r->values[off] = t->dtype == TR_F64 ? ((const double *)cb)[i] : (double)((const float *)cb)[i];
    for (int d = t->rank - 1; d >= 0 && ++idx[d] == ext[d]; d--) idx[d] = 0;
  }
  return TR_OK;
}

int te_print(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err) {
  tr_tensor t;
  int64_t *lins = NULL, nl = 0;
  int rc = tc_tensor_get(e->db, s->name, &t, err);
  if (rc) return rc;
  if (s->nranges && s->nranges != t.rank)
    return tr_seterr(err, TR_ESHAPE, "PRINT %s: %d range%s given but %s has rank %d", s->name,
                     s->nranges, s->nranges == 1 ? "" : "s", s->name, t.rank);
  te_result *r = calloc(1, sizeof *r);
  if (!r) return tr_seterr(err, TR_ENOMEM, "out of memory");
  r->kind = TE_RES_TENSOR;
  snprintf(r->name, sizeof r->name, "%s", t.name);
  r->dtype = t.dtype;
  r->rank = t.rank;
  int64_t total = 1;
  for (int d = 0; d < t.rank; d++) {
    int64_t lo = s->nranges ? s->lo[d] : 0, hi = s->nranges ? s->hi[d] : -1;
    if (hi < 0) hi = t.shape[d];
    if (lo >= hi || hi > t.shape[d]) {
      rc = tr_seterr(err, TR_ESHAPE, "range %lld:%lld out of bounds for dimension %d of %s (size %lld)",
                     (long long)lo, (long long)hi, d, t.name, (long long)t.shape[d]);
      goto done;
    }
    r->origin[d] = lo;
    r->shape[d] = hi - lo;
    total *= hi - lo;
  }
  if (total > S_PRINT_MAX) {
    rc = tr_seterr(err, TR_EINVAL, "PRINT %s would show %lld values (at most %d): print a slice, e.g. PRINT %s[0:10%s]",
                   t.name, (long long)total, S_PRINT_MAX, t.name, t.rank > 1 ? ", 0:10" : "");
    goto done;
  }
  r->values = malloc(sizeof(double) * (size_t)total);
  lins = malloc(sizeof *lins * (size_t)(tr_nchunks(&t) + 1));
  if (!r->values || !lins) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  /* The chunks overlapping the slice. */
  int64_t first[TR_MAX_RANK], last[TR_MAX_RANK], key[TR_MAX_RANK];
  for (int d = 0; d < t.rank; d++) {
    first[d] = r->origin[d] / t.chunk[d];
    last[d] = (r->origin[d] + r->shape[d] - 1) / t.chunk[d];
    key[d] = first[d];
  }
  for (;;) {
    lins[nl++] = tr_key_linear(&t, key);
    int d = t.rank - 1;
    while (d >= 0 && ++key[d] > last[d]) {
      key[d] = first[d];
      d--;
    }
    if (d < 0) break;
  }
  s_print_ctx c = {&t, r};
  rc = td_pread(e->cluster, &t, lins, nl, s_print_chunk, &c, err);
done:
  free(lins);
  if (rc) te_result_free(&r);
  else *res = r;
  return rc;
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

int te_run_plan(te_engine *e, ta_plan *p, const tp_stmt *x, const char *tra, te_result **res,
                tr_err *err) {
  td_run *run = NULL;
  to_placed *pl = NULL;
  to_opt opt;
  int m = 0, repl = 0, exec = !x || x->analyze;
  memset(&opt, 0, sizeof opt);
  /* compile (the caller's) -> where the inputs are -> optimize -> run */
  int rc = td_run_begin(e->cluster, p, exec, &run, &m, &repl, &pl, err);
  if (!rc) rc = to_optimize(p, m, repl, pl, x && x->plan[0] ? x->plan : NULL, &opt, err);
  /* A plan named with PLAN runs as the optimizer's alternative says. */
  if (!rc && !(x && x->plan[0])) rc = td_run_schedule(run, err);
  if (!rc && exec) rc = td_run_exec(run, &opt, err);
  if (!rc && x && x->trace && res) {
    char *tj = NULL;
    if (!(rc = td_run_trace(run, &tj, err)) && !(*res = te_text_result(tj)))
      rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  } else if (!rc && x && res && !(*res = s_explain(p, &opt, run, x, tra))) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  to_opt_free(&opt);
  td_run_end(&run);
  return rc;
}

int te_assign(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err) {
  ta_plan *plan = calloc(1, sizeof *plan);
  char *tra = NULL;
  if (!plan) return tr_seterr(err, TR_ENOMEM, "out of memory");
  int rc = ta_compile(e->db, e->pend, e->npend, s, plan, err);
  if (!rc && s->kind == TP_ST_EXPLAIN && !(tra = ta_plan_explain(plan)))
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  if (!rc) rc = te_run_plan(e, plan, s->kind == TP_ST_EXPLAIN ? s : NULL, tra, res, err);
  free(tra);
  free(plan);
  return rc;
}
