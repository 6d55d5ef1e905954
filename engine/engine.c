/*
** engine/engine.c - the engine handle and one function per statement kind.
**
** Assignments go through compile.c (bind, EinSum nodes, TRA) and exec.c
** (chunk tasks).  The other statements are chunk loops of their own here:
** LOAD and SAVE copy between a user file and chunks, FILL generates
** chunks, PRINT gathers a slice; each runs its chunks on the thread pool
** and a statement that writes becomes visible only when all its chunks
** are durable on their workers (dist.c).
*/
#include "config.h"
#include "engine/engine_int.h"
#include "parse/parse.h"
#include "optimize/optimize.h"
#include "exec/exec.h"
#include "dist/dist.h"

#include <malloc.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define S_PRINT_MAX 1000000 /* elements PRINT shows at most */

void tx_reuse_chunk_buffers(void) {
  /* Chunk buffers are a few MiB each and every statement allocates and
  ** frees many of them.  glibc would serve each from a fresh mmap, so every
  ** statement would fault in and zero its buffers again (measured: about 5%
  ** of a 4096^3 product).  Keep such blocks in the heap for reuse.
  ** One arena: chunk buffers are allocated on task threads, and a thread's
  ** own arena lives in 64 MiB heaps that glibc unmaps as soon as they
  ** empty, so with per-thread arenas a worker still faulted in most of its
  ** buffers (nn-large's statements: 0.8-0.9M page faults and 12.6 s of
  ** CPU, against 0.2M and 11.0 s with one arena).  Big buffers are few per
  ** task, so sharing one lock costs nothing measurable. */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  mallopt(M_ARENA_MAX, 1);
}

int te_open(const te_config *cfg, te_engine **out, tr_err *err) {
  te_engine *e = calloc(1, sizeof *e);
  int rc;
  *out = NULL;
  if (!e) return tr_seterr(err, TR_ENOMEM, "out of memory");
  e->kt = tk_backend_get(cfg && cfg->backend ? cfg->backend : "auto");
  if (!e->kt) {
    rc = tr_seterr(err, TR_EINVAL, "unknown kernel backend '%s' (compiled in: %s)",
                   cfg->backend, tk_backends_compiled());
    goto fail;
  }
  e->threads = cfg && cfg->threads > 0 ? cfg->threads : tr_ncores();
  int64_t mem = tr_phys_memory();
  e->cache_budget = mem > 0 ? (size_t)mem / 4 : (size_t)1 << 30;
  if ((rc = tc_open(cfg ? cfg->dbpath : NULL, &e->db, err))) goto fail;
  if ((rc = td_cluster_open(e, cfg, err))) {
    td_cluster_close(e);
    tc_close(&e->db);
    goto fail;
  }
  tk_set_blas_threads(1);
  tx_reuse_chunk_buffers();
  *out = e;
  return TR_OK;
fail:
  free(e);
  return rc;
}

static void s_block_clear(te_engine *e);

void te_close(te_engine **pe) {
  if (!pe || !*pe) return;
  s_block_clear(*pe); /* an open block's statements never ran */
  td_cluster_close(*pe);
  tc_close(&(*pe)->db);
  free((*pe)->notice);
  free((*pe)->lost);
  free(*pe);
  *pe = NULL;
}

const char *te_backend_name(const te_engine *e) { return e->kt->name; }

/* The lexer's services, for the shell (parse/ is below the engine). */
size_t te_statement_end(const char *text) { return tp_statement_end(text); }
int te_is_blank(const char *text) { return tp_is_blank(text); }
const char *const *te_keywords(void) { return tp_keywords(); }

void te_interrupt(te_engine *e) { tr_cancel_set(&e->interrupt); }

void te_interrupt_clear(te_engine *e) { tr_cancel_clear(&e->interrupt); }

void te_result_free(te_result **pr) {
  if (!pr || !*pr) return;
  te_result *r = *pr;
  for (int i = 0; i < r->ncols; i++) free(r->colnames[i]);
  for (int i = 0; i < r->ncols * r->nrows; i++) free(r->cells[i]);
  free(r->colnames);
  free(r->cells);
  free(r->values);
  free(r->text);
  free(r->notice);
  free(r);
  *pr = NULL;
}

void te_notice(te_engine *e, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  size_t old = e->notice ? strlen(e->notice) : 0;
  char *n = realloc(e->notice, old + strlen(line) + 2);
  if (!n) return; /* a warning lost to a failed allocation is no error */
  sprintf(n + old, "%s\n", line);
  e->notice = n;
}

te_result *te_take_notice(te_engine *e, te_result *r) {
  if (!e->notice) return r;
  if (!r && !(r = calloc(1, sizeof *r))) return NULL;
  free(r->notice); /* only this function sets it */
  r->notice = e->notice;
  e->notice = NULL;
  return r;
}

void tx_default_chunk(int rank, const int64_t *shape, tr_dtype dt, int64_t *chunk) {
  const int64_t limit = ((int64_t)4 << 20) / (int64_t)tr_dtype_size(dt);
  int64_t n = 1;
  for (int d = 0; d < rank; d++) {
    chunk[d] = shape[d];
    n *= chunk[d];
  }
  while (n > limit) {
    int big = 0;
    for (int d = 1; d < rank; d++)
      if (chunk[d] > chunk[big]) big = d;
    n /= chunk[big];
    chunk[big] = (chunk[big] + 1) / 2;
    n *= chunk[big];
  }
}

/* ---- small helpers ------------------------------------------------------ */

static void s_dims_text(char *buf, size_t n, int rank, const int64_t *v, const char *sep) {
  size_t o = 0;
  buf[0] = '\0';
  for (int d = 0; d < rank && o < n; d++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? sep : "", (long long)v[d]);
}

/* Result with a table of ncols named columns. */
static te_result *s_rows_new(int ncols, const char *const *names) {
  te_result *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->kind = TE_RES_ROWS;
  r->ncols = ncols;
  r->colnames = calloc((size_t)ncols, sizeof(char *));
  if (!r->colnames) {
    free(r);
    return NULL;
  }
  for (int i = 0; i < ncols; i++) r->colnames[i] = strdup(names[i]);
  return r;
}

static int s_rows_add(te_result *r, const char *const *cells) {
  char **c = realloc(r->cells, sizeof(char *) * (size_t)(r->nrows + 1) * (size_t)r->ncols);
  if (!c) return TR_ENOMEM;
  r->cells = c;
  for (int i = 0; i < r->ncols; i++) c[r->nrows * r->ncols + i] = strdup(cells[i]);
  r->nrows++;
  return TR_OK;
}

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
    s_dims_text(dims, sizeof dims, t->rank, t->chunk, ", ");
    return tr_seterr(err, TR_ESHAPE,
                     "chunk [%s] of %s is %.3g GiB; a chunk may be at most %g GiB (the largest "
                     "a worker accepts): give a smaller CHUNK",
                     dims, tr_dtype_name(t->dtype), bytes / (1 << 30), (double)TN_MAX_DATA / (1 << 30));
  }
  return TR_OK;
}

/* ---- chunks between user files and the workers ---------------------------- */

static void s_row_major(int rank, const int64_t *ext, int64_t *stride) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= ext[d];
  }
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
  s_row_major(t->rank, ext, cs);
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

int tx_fill_chunk(const tk_backend *kt, const tr_tensor *t, const tx_fill *f, int64_t lin,
                  void *buf, const tr_cancel *cancel) {
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK], origin[TR_MAX_RANK];
  tr_key_from_linear(t, lin, key);
  int64_t n = tr_chunk_extent(t, key, ext);
  for (int d = 0; d < t->rank; d++) origin[d] = key[d] * t->chunk[d];
  if (f->kind == TP_FILL_UNIFORM || f->kind == TP_FILL_NORMAL)
    return kt->fill_random(t->dtype, f->kind == TP_FILL_UNIFORM ? TK_FILL_UNIFORM : TK_FILL_NORMAL,
                           f->p0, f->p1, f->seed, t->rank, t->shape, origin, ext, buf, cancel);
  double one = f->kind == TP_FILL_ONES ? 1.0 : 0.0;
  int64_t idx[TR_MAX_RANK] = {0};
  for (int64_t i = 0; i < n; i++) {
    double v = one;
    if (i % 65536 == 0 && tr_cancelled(cancel)) return TR_EINTR;
    if (f->kind == TP_FILL_IDENTITY) {
      v = 1.0;
      for (int d = 1; d < t->rank; d++)
        if (origin[d] + idx[d] != origin[0] + idx[0]) v = 0.0;
    }
    if (t->dtype == TR_F64) ((double *)buf)[i] = v;
    else ((float *)buf)[i] = (float)v;
    for (int d = t->rank - 1; d >= 0 && ++idx[d] == ext[d]; d--) idx[d] = 0;
  }
  return TR_OK;
}

/* Every chunk number of t, 0..n-1 (caller frees). */
static int64_t *s_all_lins(const tr_tensor *t) {
  int64_t n = tr_nchunks(t);
  int64_t *v = malloc(sizeof *v * (size_t)(n + 1));
  for (int64_t i = 0; v && i < n; i++) v[i] = i;
  return v;
}

/* ---- statements ------------------------------------------------------------ */

static int s_create(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor t;
  memset(&t, 0, sizeof t);
  snprintf(t.name, sizeof t.name, "%s", s->name);
  t.dtype = s->has_type ? s->dtype : TR_F32;
  t.rank = s->rank;
  memcpy(t.shape, s->shape, sizeof t.shape);
  int rc = s_set_chunk(s, &t, err);
  return rc ? rc : tc_tensor_create(e->db, &t, err);
}

static int s_load(te_engine *e, const tp_stmt *s, tr_err *err) {
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
      s_dims_text(hv, sizeof hv, t.rank, t.shape, " x ");
      s_dims_text(fv, sizeof fv, a.rank, a.shape, " x ");
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
  if ((rc = td_pwrite_begin(e, &t, &w, err))) goto done;
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

/* SAVE: each chunk read from a worker goes into its box of the file. */
typedef struct s_save_ctx {
  te_engine *e;     /* engine */
  tr_tensor *t;     /* tensor */
  tc_array *a;      /* destination */
} s_save_ctx;

static int s_save_chunk(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
  s_save_ctx *c = ctx;
  (void)bytes;
  int rc = s_chunk_array_copy(c->e, c->t, c->a, lin, (void *)buf, 1);
  if (rc == TR_EINTR) return tr_seterr(err, rc, "interrupted");
  return rc ? tr_seterr(err, rc, "copy to the output file failed") : TR_OK;
}

static int s_save(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor t;
  tc_array a;
  int rc = tc_tensor_get(e->db, s->name, &t, err);
  if (rc) return rc;
  if ((rc = tc_array_create(s->path, t.dtype, t.rank, t.shape, &a, err))) return rc;
  s_save_ctx c = {e, &t, &a};
  int64_t *lins = s_all_lins(&t);
  rc = lins ? td_pread(e, &t, lins, tr_nchunks(&t), s_save_chunk, &c, err)
            : tr_seterr(err, TR_ENOMEM, "out of memory");
  free(lins);
  if (!rc) rc = tc_array_commit(&a, err);
  tc_array_close(&a);
  return rc;
}

static int s_fill(te_engine *e, const tp_stmt *s, tr_err *err) {
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
  return td_fill(e, &t, &f, err);
}

static int s_show(te_engine *e, te_result **res, tr_err *err) {
  static const char *const cols[] = {"name",  "shape",  "chunk",    "type",
                                     "format", "chunks", "replicas", "under_replicated"};
  tr_tensor *ts = NULL;
  int n = 0, rc = tc_tensor_list(e->db, &ts, &n, err), target = td_target(e);
  if (rc) return rc;
  te_result *r = s_rows_new(8, cols);
  if (!r) {
    free(ts);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n && !rc; i++) {
    char shape[256], chunk[256], nch[32], reps[32], under[32];
    int fewest;
    int64_t nunder;
    if ((rc = tc_tensor_replicas(e->db, &ts[i], target, &fewest, &nunder, err))) break;
    s_dims_text(shape, sizeof shape, ts[i].rank, ts[i].shape, " x ");
    s_dims_text(chunk, sizeof chunk, ts[i].rank, ts[i].chunk, " x ");
    snprintf(nch, sizeof nch, "%lld", (long long)tr_nchunks(&ts[i]));
    snprintf(reps, sizeof reps, "%d", fewest);
    snprintf(under, sizeof under, "%lld", (long long)nunder);
    if (!ts[i].version) strcpy(reps, "-"), strcpy(under, "-"); /* declared only: nothing stored */
    const char *cells[] = {ts[i].name, ts[i].rank ? shape : "scalar", ts[i].rank ? chunk : "-",
                           tr_dtype_name(ts[i].dtype), ts[i].format, nch, reps, under};
    s_rows_add(r, cells);
  }
  free(ts);
  if (rc) {
    te_result_free(&r);
    return rc;
  }
  *res = r;
  return TR_OK;
}

static int s_describe(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err) {
  static const char *const cols[] = {"property", "value"};
  tr_tensor t;
  int64_t bytes = 0;
  int rc = tc_tensor_get(e->db, s->name, &t, err);
  if (rc || (rc = tc_tensor_bytes(e->db, &t, &bytes, err))) return rc;
  te_result *r = s_rows_new(2, cols);
  if (!r) return tr_seterr(err, TR_ENOMEM, "out of memory");
  char shape[256], chunk[256], rank[16], nch[32], nb[32], grid[256], ver[32];
  int64_t g[TR_MAX_RANK];
  for (int d = 0; d < t.rank; d++) g[d] = tr_grid(&t, d);
  s_dims_text(shape, sizeof shape, t.rank, t.shape, " x ");
  s_dims_text(chunk, sizeof chunk, t.rank, t.chunk, " x ");
  s_dims_text(grid, sizeof grid, t.rank, g, " x ");
  snprintf(rank, sizeof rank, "%d", t.rank);
  snprintf(nch, sizeof nch, "%lld", (long long)tr_nchunks(&t));
  snprintf(nb, sizeof nb, "%lld", (long long)bytes);
  snprintf(ver, sizeof ver, "%lld", (long long)t.version);
  const char *rows[][2] = {
    {"name", t.name}, {"type", tr_dtype_name(t.dtype)}, {"rank", rank},
    {"shape", t.rank ? shape : "scalar"}, {"chunk", t.rank ? chunk : "-"},
    {"chunk grid", t.rank ? grid : "1"}, {"format", t.format}, {"chunks", nch},
    {"stored bytes", nb}, {"version", ver}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) s_rows_add(r, rows[i]);
  *res = r;
  return TR_OK;
}

/* PRINT: values of each chunk that fall in the slice go to the result. */
typedef struct s_print_ctx {
  const tr_tensor *t;  /* tensor */
  te_result *r;        /* result being filled */
} s_print_ctx;

static int s_print_chunk(void *ctx, int64_t lin, const void *cb, size_t bytes, tr_err *err) {
  s_print_ctx *c = ctx;
  const tr_tensor *t = c->t;
  te_result *r = c->r;
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK], idx[TR_MAX_RANK] = {0}, vs[TR_MAX_RANK];
  (void)bytes;
  (void)err;
  tr_key_from_linear(t, lin, key);
  int64_t n = tr_chunk_extent(t, key, ext);
  s_row_major(t->rank, r->shape, vs);
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

static int s_print(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err) {
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
  rc = td_pread(e, &t, lins, nl, s_print_chunk, &c, err);
done:
  free(lins);
  if (rc) te_result_free(&r);
  else *res = r;
  return rc;
}

static int s_assign(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err) {
  ta_plan *plan = calloc(1, sizeof *plan);
  char *tra = NULL;
  if (!plan) return tr_seterr(err, TR_ENOMEM, "out of memory");
  int rc = ta_compile(e->db, e->pend, e->npend, s, plan, err);
  if (!rc && s->kind == TP_ST_EXPLAIN && !(tra = ta_plan_explain(plan)))
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  if (!rc) rc = td_run(e, plan, s->kind == TP_ST_EXPLAIN ? s : NULL, tra, res, err);
  free(tra);
  free(plan);
  return rc;
}

static void s_block_clear(te_engine *e) {
  for (int i = 0; i < e->nblock; i++) tp_stmt_free(&e->block[i]);
  e->nblock = e->npend = 0;
  e->in_block = 0;
}

/* An assignment inside BEGIN .. COMMIT: checked now (against the block's
** earlier outputs), run at COMMIT.  Takes *sp. */
static int s_block_add(te_engine *e, tp_stmt **sp, tr_err *err) {
  ta_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return tr_seterr(err, TR_ENOMEM, "out of memory");
  int rc = e->nblock >= TA_MAX_NODES
               ? tr_seterr(err, TR_EINVAL, "block too large: at most %d statements", TA_MAX_NODES)
               : ta_compile(e->db, e->pend, e->npend, *sp, plan, err);
  if (!rc) {
    const ta_node *last = &plan->nodes[plan->nnodes - 1];
    e->pend[e->npend++] = plan->rels[last->out].meta;
    e->block[e->nblock++] = *sp;
    *sp = NULL;
  }
  free(plan);
  return rc;
}

/* COMMIT (x NULL) or EXPLAIN [ANALYZE] COMMIT (x): the block's statements
** as one plan, optimized together. */
static int s_block_run(te_engine *e, const tp_stmt *x, te_result **res, tr_err *err) {
  ta_plan *all = calloc(1, sizeof *all), *one = calloc(1, sizeof *one);
  char *tra = NULL;
  size_t tl = 0;
  int rc = all && one ? TR_OK : tr_seterr(err, TR_ENOMEM, "out of memory");
  e->npend = 0;
  for (int i = 0; !rc && i < e->nblock; i++) {
    rc = ta_compile(e->db, e->pend, e->npend, e->block[i], one, err);
    if (!rc) rc = ta_plan_append(all, one, err);
    if (!rc) e->pend[e->npend++] = one->rels[one->nodes[one->nnodes - 1].out].meta;
    if (!rc && x) {
      char *t = ta_plan_explain(one);
      char *nt = t ? realloc(tra, tl + strlen(t) + 1) : NULL;
      if (!nt) {
        free(t);
        rc = tr_seterr(err, TR_ENOMEM, "out of memory");
        break;
      }
      tra = nt;
      memcpy(tra + tl, t, strlen(t) + 1);
      tl += strlen(t);
      free(t);
    }
  }
  /* e->pend now holds the block's outputs again, for an open block's
  ** later statements (EXPLAIN .. COMMIT without ANALYZE keeps it open). */
  if (!rc && all->nnodes) rc = td_run(e, all, x, tra, res, err);
  free(tra);
  free(all);
  free(one);
  return rc;
}

/* Statements while a block is open. */
static int s_in_block(te_engine *e, tp_stmt **sp, te_result **res, tr_err *err) {
  tp_stmt *s = *sp;
  int rc;
  switch (s->kind) {
  case TP_ST_ASSIGN: return s_block_add(e, sp, err);
  case TP_ST_BEGIN: return tr_seterr(err, TR_EINVAL, "a block is already open (COMMIT or ROLLBACK it first)");
  case TP_ST_ROLLBACK: s_block_clear(e); return TR_OK;
  case TP_ST_COMMIT:
    rc = s_block_run(e, NULL, res, err);
    s_block_clear(e);
    if (rc && err->code) {
      /* say what stayed: outputs made before the failure are committed */
      size_t l = strlen(err->msg);
      const char *more = " (the block stopped there; outputs made before it are committed)";
      if (l + strlen(more) < sizeof err->msg) memcpy(err->msg + l, more, strlen(more) + 1);
    }
    return rc;
  case TP_ST_EXPLAIN:
    if (!s->block)
      return tr_seterr(err, TR_EINVAL, "EXPLAIN of one statement inside a block: use EXPLAIN [ANALYZE] COMMIT");
    rc = s_block_run(e, s, res, err);
    if (s->analyze) s_block_clear(e);
    return rc;
  default:
    return tr_seterr(err, TR_EINVAL, "only assignments can be in a block (BEGIN .. COMMIT); ROLLBACK leaves it");
  }
}

int te_exec(te_engine *e, const char *text, size_t len, te_result **res, tr_err *err) {
  tp_stmt *s = NULL;
  te_result *r = NULL;
  if (res) *res = NULL;
  tr_clearerr(err);
  int rc = tp_parse(text, len, &s, err);
  if (rc) return rc;
  if (e->in_block) {
    rc = s_in_block(e, &s, &r, err);
    goto done;
  }
  switch (s->kind) {
  case TP_ST_BEGIN: e->in_block = 1; break;
  case TP_ST_COMMIT:
  case TP_ST_ROLLBACK: rc = tr_seterr(err, TR_EINVAL, "no block is open (BEGIN starts one)"); break;
  case TP_ST_CREATE: rc = s_create(e, s, err); break;
  case TP_ST_LOAD: rc = s_load(e, s, err); break;
  case TP_ST_SAVE: rc = s_save(e, s, err); break;
  case TP_ST_FILL: rc = s_fill(e, s, err); break;
  case TP_ST_SHOW: rc = s_show(e, &r, err); break;
  case TP_ST_DESCRIBE: rc = s_describe(e, s, &r, err); break;
  case TP_ST_DROP:
    rc = td_drop(e, s->name, err);
    if (rc == TR_ENOTFOUND && s->if_exists) rc = TR_OK;
    break;
  case TP_ST_PRINT: rc = s_print(e, s, &r, err); break;
  case TP_ST_ASSIGN: rc = s_assign(e, s, &r, err); break;
  case TP_ST_EXPLAIN:
    rc = s->block ? tr_seterr(err, TR_EINVAL, "no block is open (BEGIN starts one)") : s_assign(e, s, &r, err);
    break;
  case TP_ST_SET: rc = td_set(e, s->setting, s->value, err); break;
  }
done:
  tp_stmt_free(&s);
  if (rc && err && !err->code) tr_seterr(err, rc, "statement failed (status %d)", rc);
  if (!rc) r = te_take_notice(e, r);
  free(e->notice); /* a failed statement's error says what matters */
  e->notice = NULL;
  if (res) *res = r;
  else te_result_free(&r);
  return rc;
}

int te_tensor_names(te_engine *e, char ***names, tr_err *err) {
  tr_tensor *ts = NULL;
  int n = 0, rc = tc_tensor_list(e->db, &ts, &n, err);
  if (rc) return rc;
  char **v = calloc((size_t)n + 1, sizeof(char *));
  if (!v) {
    free(ts);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++) v[i] = strdup(ts[i].name);
  free(ts);
  *names = v;
  return TR_OK;
}

void te_free_names(char **names) {
  if (!names) return;
  for (char **p = names; *p; p++) free(*p);
  free(names);
}

int te_schema(te_engine *e, const char *name, char **text, tr_err *err) {
  tr_tensor *ts = NULL;
  int n = 0, rc = tc_tensor_list(e->db, &ts, &n, err);
  if (rc) return rc;
  size_t cap = 256, len = 0;
  char *out = malloc(cap);
  int found = 0;
  if (!out) {
    free(ts);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  out[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (name && strcmp(name, ts[i].name)) continue;
    found = 1;
    char shape[256], chunk[256], line[700];
    s_dims_text(shape, sizeof shape, ts[i].rank, ts[i].shape, ", ");
    s_dims_text(chunk, sizeof chunk, ts[i].rank, ts[i].chunk, ", ");
    int k = snprintf(line, sizeof line, "CREATE TENSOR %s[%s] CHUNK [%s] TYPE %s;\n", ts[i].name,
                     shape, chunk, tr_dtype_name(ts[i].dtype));
    if (len + (size_t)k + 1 > cap) {
      cap = (len + (size_t)k + 1) * 2;
      char *t = realloc(out, cap);
      if (!t) {
        free(out);
        free(ts);
        return tr_seterr(err, TR_ENOMEM, "out of memory");
      }
      out = t;
    }
    memcpy(out + len, line, (size_t)k + 1);
    len += (size_t)k;
  }
  free(ts);
  if (name && !found) {
    free(out);
    return tr_seterr(err, TR_ENOTFOUND, "no such tensor: %s", name);
  }
  *text = out;
  return TR_OK;
}
