/*
** engine/slice.c - parts of tensors: the box a statement's ranges name
** (negative indices count from the end), copies between chunks and the
** user's arrays (LOAD, SAVE), R = X[...] (a copy of a slice, made through
** the shell: the chunks that overlap it are read, the slice cut out and
** written as R's chunks), and PRINT, which reads only the values it
** shows: a summary keeps the first and last rows and columns of each
** dimension, as NumPy prints large arrays.
*/
#include "config.h"
#include "engine/engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PRINT_MAX 1000000 /* values PRINT shows at most */

int te_box_of(const tp_stmt *s, const tr_tensor *t, te_box *box, tr_err *err) {
  const char *verb = s->kind == TP_ST_PRINT ? "PRINT " : s->kind == TP_ST_SAVE ? "SAVE " : "";
  memset(box, 0, sizeof *box);
  box->rank = t->rank;
  if (s->nranges && s->nranges != t->rank)
    return tr_at(err, s->ranges_pos,
                 tr_seterr(err, TR_ESHAPE, "%s%s: %d range%s given but %s has rank %d", verb, t->name,
                           s->nranges, s->nranges == 1 ? "" : "s", t->name, t->rank));
  for (int d = 0; d < t->rank; d++) {
    int64_t lo = 0, hi = t->shape[d];
    if (s->nranges && tp_range_resolve(&s->range[d], t->shape[d], d, t->name, &lo, &hi, err))
      return tr_at(err, s->ranges_pos, err->code);
    box->lo[d] = lo;
    box->ext[d] = hi - lo;
    box->keep[d] = !s->nranges || !s->range[d].single;
  }
  return TR_OK;
}

/* te_box_copy, the array's elements from element `first` on held at
** base (a band of them, or all at a->data); *count (if given): the
** elements of the chunk inside the box. */
static int s_box_copy(te_engine *e, const tr_tensor *t, const te_box *box, tc_array *a, int64_t lin,
                      void *chunk, int to_array, char *base, int64_t first, int64_t *count) {
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK], cs[TR_MAX_RANK], iext[TR_MAX_RANK];
  int64_t as[TR_MAX_RANK], coff = 0, aoff = -first, inside = 1;
  tr_key_from_linear(t, lin, key);
  int64_t n = tr_chunk_extent(t, key, ext);
  tx_row_major(t->rank, ext, cs);
  for (int d = 0, k = 0; d < t->rank; d++) {
    int64_t co = key[d] * t->chunk[d], lo = co > box->lo[d] ? co : box->lo[d];
    int64_t hi = co + ext[d] < box->lo[d] + box->ext[d] ? co + ext[d] : box->lo[d] + box->ext[d];
    if (hi <= lo) { /* outside the box */
      if (count) *count = 0;
      return TR_OK;
    }
    iext[d] = hi - lo;
    inside *= iext[d];
    as[d] = box->keep[d] ? a->stride[k++] : 0;
    coff += (lo - co) * cs[d];
    aoff += (lo - box->lo[d]) * as[d];
    tr_assert(to_array || iext[d] == ext[d]); /* a chunk is written whole */
  }
  if (count) *count = inside;
  size_t asz = tr_dtype_size(a->dtype);
  char *abase = base + aoff * (int64_t)asz;
  void *tmp = chunk;
  if (a->dtype != t->dtype) {
    if (!(tmp = tr_alloc_aligned((size_t)n * asz))) return TR_ENOMEM;
    if (to_array) tx_convert(tmp, a->dtype, chunk, t->dtype, n);
  }
  char *cbase = (char *)tmp + (size_t)coff * asz;
  int rc = TR_OK;
  if (t->rank == 0)
    memcpy(to_array ? (void *)abase : cbase, to_array ? cbase : (void *)abase, asz);
  else if (to_array)
    rc = e->kt->copy(a->dtype, t->rank, iext, abase, as, cbase, cs, &e->interrupt);
  else
    rc = e->kt->copy(a->dtype, t->rank, iext, cbase, cs, abase, as, &e->interrupt);
  if (!rc && !to_array && tmp != chunk) tx_convert(chunk, t->dtype, tmp, a->dtype, n);
  if (tmp != chunk) tr_free_aligned(tmp);
  return rc;
}

int te_box_copy(te_engine *e, const tr_tensor *t, const te_box *box, tc_array *a, int64_t lin,
                void *chunk, int to_array) {
  return s_box_copy(e, t, box, a, lin, chunk, to_array, a->data, 0, NULL);
}

/* ---- writing an array by bands --------------------------------------------
** A band is the array's rows (along the box's first kept dimension) that
** one row of chunks covers, with all of every other dimension: one run of
** the file, written once its chunks are in, from a buffer on a page
** boundary (so past the page cache, tc_array_write), which the next band
** uses again. */

#define S_BAND_MAX ((size_t)128 << 20) /* larger bands: copied in place */
#define S_BAND_SPARE 1                 /* buffers kept for the next bands */

typedef struct s_band {
  int64_t key;          /* the chunks' key along the band dimension */
  int64_t first, n;     /* the array's elements it holds */
  int64_t filled;       /* of them, copied so far */
  char *buf;            /* cap bytes */
} s_band;

struct te_bands {
  te_engine *e;
  const tr_tensor *t;
  const te_box *box;
  tc_array *a;
  int dim;              /* the band dimension of t; -1: the array is a scalar */
  size_t cap;           /* a band's bytes at most, whole pages */
  s_band *open;         /* bands with chunks still to come */
  int nopen, capopen;
  char *spare[S_BAND_SPARE]; /* finished bands' buffers, their pages in */
  int nspare;
};

int te_bands_begin(te_engine *e, const tr_tensor *t, const te_box *box, tc_array *a, te_bands **out,
                   tr_err *err) {
  *out = NULL;
  int dim = -1;
  for (int d = 0; d < t->rank && dim < 0; d++)
    if (box->keep[d]) dim = d;
  size_t cap = tr_dtype_size(a->dtype) * (size_t)(dim < 0 ? 1 : t->chunk[dim] * a->stride[0]);
  /* TRADB_TEST_BAND_MAX: another S_BAND_MAX (tests: the in-place path
  ** without a file of 128 MiB) */
  const char *max = getenv("TRADB_TEST_BAND_MAX");
  if (cap > (max ? (size_t)atoll(max) : S_BAND_MAX)) return TR_OK;
  te_bands *w = calloc(1, sizeof *w);
  if (!w) return tr_seterr(err, TR_ENOMEM, "out of memory");
  *w = (te_bands){e, t, box, a, dim, (cap + TR_PAGE - 1) / TR_PAGE * TR_PAGE, NULL, 0, 0, {NULL}, 0};
  *out = w;
  return TR_OK;
}

/* The open band of chunk key k, opened if new; NULL when out of memory. */
static s_band *s_band_of(te_bands *w, int64_t k) {
  for (int i = 0; i < w->nopen; i++)
    if (w->open[i].key == k) return &w->open[i];
  if (w->nopen == w->capopen) {
    int ncap = w->capopen ? 2 * w->capopen : 8;
    s_band *o = realloc(w->open, sizeof *o * (size_t)ncap);
    if (!o) return NULL;
    w->open = o;
    w->capopen = ncap;
  }
  s_band b = {k, 0, 1, 0, NULL};
  void *p = NULL;
  if (w->nspare)
    b.buf = w->spare[--w->nspare];
  else if (posix_memalign(&p, TR_PAGE, w->cap) == 0)
    b.buf = p;
  else
    return NULL;
  if (w->dim >= 0) {
    int64_t lo = w->box->lo[w->dim], c = w->t->chunk[w->dim];
    int64_t r0 = k * c > lo ? k * c : lo, r1 = (k + 1) * c;
    if (r1 > lo + w->box->ext[w->dim]) r1 = lo + w->box->ext[w->dim];
    b.first = (r0 - lo) * w->a->stride[0];
    b.n = (r1 - r0) * w->a->stride[0];
  }
  w->open[w->nopen] = b;
  return &w->open[w->nopen++];
}

int te_bands_put(te_bands *w, int64_t lin, void *chunk, tr_err *err) {
  int64_t key[TR_MAX_RANK], count;
  tr_key_from_linear(w->t, lin, key);
  s_band *b = s_band_of(w, w->dim < 0 ? 0 : key[w->dim]);
  if (!b) return tr_seterr(err, TR_ENOMEM, "out of memory");
  int rc = s_box_copy(w->e, w->t, w->box, w->a, lin, chunk, 1, b->buf, b->first, &count);
  if (rc) return tr_seterr(err, rc, rc == TR_EINTR ? "interrupted" : "out of memory");
  if ((b->filled += count) < b->n) return TR_OK;
  rc = tc_array_write(w->a, b->first, b->buf, b->n, err);
  if (w->nspare < S_BAND_SPARE)
    w->spare[w->nspare++] = b->buf;
  else
    free(b->buf);
  *b = w->open[--w->nopen];
  return rc;
}

int te_bands_end(te_bands *w, tr_err *err) {
  if (w->nopen)
    return tr_seterr(err, TR_EIO, "%s: %d band%s of the file missing chunks", w->t->name, w->nopen,
                     w->nopen == 1 ? "" : "s");
  return TR_OK;
}

void te_bands_free(te_bands **pw) {
  te_bands *w = *pw;
  if (!w) return;
  for (int i = 0; i < w->nopen; i++) free(w->open[i].buf);
  for (int i = 0; i < w->nspare; i++) free(w->spare[i]);
  free(w->open);
  free(w);
  *pw = NULL;
}

int te_write_array(te_engine *e, const tr_tensor *t, tc_array *a, const char *what, tr_err *err) {
  td_pwrite *w = NULL;
  void *buf = NULL;
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
  te_box box = {t->rank, {0}, {0}, {0}};
  for (int d = 0; d < t->rank; d++) {
    box.ext[d] = t->shape[d];
    box.keep[d] = 1;
  }
  int rc = td_pwrite_begin(e->cluster, t, &w, err);
  if (rc) return rc;
  size_t cap = (size_t)tr_chunk_extent(t, (int64_t[TR_MAX_RANK]){0}, ext) * tr_dtype_size(t->dtype);
  if (!(buf = tr_alloc_aligned(cap))) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int64_t lin = 0; lin < tr_nchunks(t) && !rc; lin++) {
    tr_key_from_linear(t, lin, key);
    size_t bytes = (size_t)tr_chunk_extent(t, key, ext) * tr_dtype_size(t->dtype);
    if ((rc = te_box_copy(e, t, &box, a, lin, buf, 0)))
      tr_seterr(err, rc, rc == TR_EINTR ? "interrupted" : "copy from %s failed", what);
    else
      rc = td_pwrite_chunk(w, lin, buf, bytes, err);
    if (!rc && tr_cancelled(&e->interrupt)) rc = tr_seterr(err, TR_EINTR, "interrupted");
  }
  if (!rc) rc = td_pwrite_commit(w, err);
  tr_free_aligned(buf);
  td_pwrite_free(&w);
  return rc;
}

/* Reading a box of a tensor into an array. */
typedef struct s_read_ctx {
  te_engine *e;
  const tr_tensor *t;
  const te_box *box;
  tc_array *a;
} s_read_ctx;

static int s_read_chunk(void *ctx, int64_t lin, const void *buf, size_t bytes, tr_err *err) {
  s_read_ctx *c = ctx;
  (void)bytes;
  int rc = te_box_copy(c->e, c->t, c->box, c->a, lin, (void *)buf, 1);
  return rc ? tr_seterr(err, rc, rc == TR_EINTR ? "interrupted" : "out of memory") : TR_OK;
}

/* The chunks of t that hold index sets sel[d] (up to two ranges [lo, hi)
** per dimension); *out is the caller's. */
static int s_chunks_of(const tr_tensor *t, const int64_t (*sel)[4], int64_t **out, int64_t *n) {
  int64_t first[TR_MAX_RANK][2], last[TR_MAX_RANK][2], key[TR_MAX_RANK], nk = 1;
  for (int d = 0; d < t->rank; d++) {
    for (int r = 0; r < 2; r++) {
      first[d][r] = sel[d][2 * r] / t->chunk[d];
      last[d][r] = sel[d][2 * r + 1] > sel[d][2 * r] ? (sel[d][2 * r + 1] - 1) / t->chunk[d] : -1;
    }
    nk *= tr_grid(t, d);
  }
  int64_t *v = malloc(sizeof *v * (size_t)(nk + 1));
  *n = 0;
  if (!v) return TR_ENOMEM;
  for (int64_t lin = 0; lin < nk; lin++) {
    int in = 1;
    tr_key_from_linear(t, lin, key);
    for (int d = 0; d < t->rank && in; d++)
      in = (key[d] >= first[d][0] && key[d] <= last[d][0]) ||
           (key[d] >= first[d][1] && key[d] <= last[d][1]);
    if (in) v[(*n)++] = lin;
  }
  *out = v;
  return TR_OK;
}

int te_slice(te_engine *e, const tp_stmt *s, tr_err *err) {
  tr_tensor src, t;
  te_box box;
  tc_array a;
  int64_t sel[TR_MAX_RANK][4], *lins = NULL, nl = 0;
  int rc = tc_tensor_get(e->db, s->src, &src, err);
  if (rc) return tr_at(err, s->src_pos, rc == TR_ENOTFOUND ? (err->code = TR_ENAME) : rc);
  if ((rc = te_box_of(s, &src, &box, err))) return rc;
  memset(&t, 0, sizeof t);
  memset(&a, 0, sizeof a);
  snprintf(t.name, sizeof t.name, "%s", s->name);
  t.dtype = a.dtype = src.dtype;
  double bytes = (double)tr_dtype_size(t.dtype);
  for (int d = 0; d < src.rank; d++) {
    sel[d][0] = box.lo[d];
    sel[d][1] = sel[d][2] = sel[d][3] = box.lo[d] + box.ext[d];
    if (!box.keep[d]) continue;
    t.shape[t.rank] = box.ext[d];
    t.chunk[t.rank] = src.chunk[d] < box.ext[d] ? src.chunk[d] : box.ext[d];
    bytes *= (double)box.ext[d];
    t.rank++;
  }
  if (tr_phys_memory() > 0 && bytes > (double)tr_phys_memory() / 4)
    return tr_seterr(err, TR_ENOMEM, "the slice is %.3g GiB, more than a quarter of this machine's "
                     "memory, which a copy through the shell may take", bytes / (1 << 30));
  a.rank = t.rank;
  memcpy(a.shape, t.shape, sizeof a.shape);
  tx_row_major(a.rank, a.shape, a.stride);
  if (!(a.data = tr_alloc_aligned((size_t)bytes)) || s_chunks_of(&src, (const int64_t(*)[4])sel, &lins, &nl)) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  s_read_ctx c = {e, &src, &box, &a};
  rc = td_pread(e->cluster, &src, lins, nl, s_read_chunk, &c, err);
  if (!rc) rc = te_write_array(e, &t, &a, "the slice", err);
done:
  free(lins);
  tr_free_aligned(a.data);
  return rc;
}

/* ---- PRINT ------------------------------------------------------------------ */

/* PRINT: the values of each chunk that are shown go to the result. */
typedef struct s_print_ctx {
  const tr_tensor *t;  /* tensor */
  te_result *r;        /* result being filled */
  int64_t head[TR_MAX_RANK]; /* shown from the start of each dimension */
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
  tx_row_major(t->rank, r->shape, vs);
  for (int64_t i = 0; i < n; i++) {
    int inside = 1;
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++) {
      int64_t rel = key[d] * t->chunk[d] + idx[d] - r->origin[d], pos = rel;
      if (rel >= c->head[d]) pos = rel - (r->gap[d] >= 0 ? r->skip[d] : 0); /* the tail */
      if (rel < 0 || rel >= r->full[d] || (rel >= c->head[d] && pos < c->head[d])) inside = 0;
      off += pos * vs[d];
    }
    if (inside) r->values[off] = t->dtype == TR_F64 ? ((const double *)cb)[i] : (double)((const float *)cb)[i];
    for (int d = t->rank - 1; d >= 0 && ++idx[d] == ext[d]; d--) idx[d] = 0;
  }
  return TR_OK;
}

/* How many of the first (head[d]) and last (tail[d]) indices of each
** dimension of extent ext[d] a summary shows: the columns a line of
** `width` characters can hold (values take at least 3), and for the rows
** and the blocks of higher ranks about `lines` lines: two blocks (the
** first and the last) of each leading dimension, and rows shared among
** them with a line for "...". */
static void s_edges(int rank, const int64_t *ext, long lines, int width, int64_t *head,
                    int64_t *tail) {
  int64_t blocks = 1, shown = 1, per;
  for (int d = 0; d < rank; d++) {
    head[d] = ext[d];
    tail[d] = 0;
  }
  if (rank == 0) return;
  int64_t cols = width > 24 ? (width - 8) / 3 : 5;
  if (ext[rank - 1] > cols) {
    head[rank - 1] = (cols + 1) / 2;
    tail[rank - 1] = cols / 2;
  }
  if (rank < 2) return;
  for (int d = 0; d < rank - 2; d++) blocks *= ext[d];
  if (blocks * (ext[rank - 2] + (rank > 2)) <= lines) return;
  for (int d = 0; d < rank - 2; d++)
    if (ext[d] > 2) {
      head[d] = tail[d] = 1;
      shown *= 2;
    } else {
      shown *= ext[d];
    }
  per = lines / shown - (rank > 2);
  if (per < 3) per = 3;
  if (ext[rank - 2] > per) {
    head[rank - 2] = per / 2;
    tail[rank - 2] = (per - 1) / 2;
  }
}

int te_print(te_engine *e, const tp_stmt *s, te_result **res, tr_err *err) {
  tr_tensor t;
  te_box box;
  int64_t *lins = NULL, nl = 0, sel[TR_MAX_RANK][4], tail[TR_MAX_RANK];
  int rc = tc_tensor_get(e->db, s->name, &t, err);
  if (rc || (rc = te_box_of(s, &t, &box, err))) return rc;
  te_result *r = calloc(1, sizeof *r);
  if (!r) return tr_seterr(err, TR_ENOMEM, "out of memory");
  s_print_ctx c = {&t, r, {0}};
  long lines = e->print_summary ? te_setting(e, "print_lines") : 0;
  r->kind = TE_RES_TENSOR;
  snprintf(r->name, sizeof r->name, "%s", t.name);
  r->dtype = t.dtype;
  r->rank = t.rank;
  s_edges(t.rank, box.ext, lines ? lines : INT64_MAX, lines ? e->print_width : INT32_MAX, c.head, tail);
  int64_t total = 1;
  for (int d = 0; d < t.rank; d++) {
    r->origin[d] = box.lo[d];
    r->full[d] = box.ext[d];
    r->shape[d] = c.head[d] + tail[d];
    r->gap[d] = r->shape[d] < box.ext[d] ? c.head[d] : -1;
    r->skip[d] = box.ext[d] - r->shape[d];
    total *= r->shape[d];
    sel[d][0] = box.lo[d];
    sel[d][1] = box.lo[d] + c.head[d];
    sel[d][2] = box.lo[d] + box.ext[d] - tail[d];
    sel[d][3] = box.lo[d] + box.ext[d];
  }
  if (total > S_PRINT_MAX) {
    rc = tr_seterr(err, TR_EINVAL, "PRINT %s would show %lld values (at most %d): print a slice, e.g. PRINT %s[0:10%s]",
                   t.name, (long long)total, S_PRINT_MAX, t.name, t.rank > 1 ? ", 0:10" : "");
    goto done;
  }
  if (!(r->values = malloc(sizeof(double) * (size_t)total)) ||
      s_chunks_of(&t, (const int64_t(*)[4])sel, &lins, &nl)) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  rc = td_pread(e->cluster, &t, lins, nl, s_print_chunk, &c, err);
done:
  free(lins);
  if (rc) te_result_free(&r);
  else *res = r;
  return rc;
}
