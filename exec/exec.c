/*
** engine/exec.c - running a plan.
**
** A node (TRA join + aggregation) runs as one task per output chunk key:
** the task walks the join tuples of its group (every chunk key of the
** aggregated labels), fetches the operand chunks of each tuple, calls the
** join kernel and folds its result into the output chunk with the
** aggregation, then applies the fused transform and stores the chunk.
** On the gemm path a factor that is an elementwise function of its
** operands (ta_gemm_ok) is computed tile by tile inside the
** task, into a scratch chunk that lives for one join tuple (s_factor).
** Tasks run on the thread pool; BLAS runs single-threaded inside them
** unless there are fewer tasks than threads.  The caller's cancel token
** reaches every kernel call, and a product too large to stop in time is cut
** into gemm calls of the backend's panel size, so a cancelled node stops
** within a panel's time whatever its chunk sizes.
**
** Operand chunks come through a cache shared by the tasks of a plan,
** bounded in bytes (least recently used chunks are dropped first), so a
** chunk read by many tasks is read and checksummed once while it is hot
** and no node holds all chunks of its inputs at once.  An operand stored
** with a chunk shape other than the node's is re-chunked on the fly: the
** target chunk is cut and assembled from the overlapping stored chunks
** (TILE then CONCAT, fused into one strided copy per piece).
*/
#include "config.h"
#include "exec/exec.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- Chunk cache --------------------------------------------------------- */

#define S_BUCKETS 4096

typedef struct s_entry {
  int rel;              /* relation */
  int64_t lin;          /* chunk number */
  tr_blob *blob;        /* the chunk's bytes (a reference), NULL while loading */
  void *buf;            /* its data, NULL while loading */
  size_t bytes;         /* payload size */
  int refs;             /* tasks using it */
  int ready;            /* 1 once loaded */
  uint64_t tick;        /* last use, for LRU */
  struct s_entry *next; /* hash chain */
} s_entry;

typedef struct s_cache {
  pthread_mutex_t mu;          /* guards everything below */
  pthread_cond_t cv;           /* signalled when a load finishes */
  s_entry *bucket[S_BUCKETS];  /* hash table */
  size_t bytes;                /* payload bytes held */
  size_t budget;               /* soft limit */
  uint64_t tick;               /* use counter */
  const tk_backend *kt;        /* told which chunks it holds (keep/release) */
} s_cache;

/* What the tasks of one node share. */
typedef struct s_run {
  const tk_backend *kt;                  /* kernels */
  const ta_node *node;                   /* node being run */
  const tr_tensor *in_meta[TK_MAX_INPUTS]; /* each operand's relation */
  const tr_tensor *out_meta;             /* the output relation */
  const tx_chunk_io *io;                 /* chunk source and sink */
  const int64_t *lins;                   /* output chunks to compute */
  const int64_t *twin;                   /* NULL, or per task: the chunk
                                            made as the transpose of the
                                            one it computes (-1: none) */
  const tr_cancel *cancel;               /* stops every task; may be NULL */
  s_cache *cache;    /* operand chunks, keyed by operand number */
  tr_dtype dt;       /* node element type (of its output) */
  size_t esz;        /* its size */
  int64_t ngroups;   /* output chunk keys */
  int64_t ntuples;   /* join tuples per group */
  int64_t piece[TK_MAX_LABELS]; /* per label: the stride its tuples run
                                   in pieces at (ta_label_piece), 0 */
  int li, lj;        /* a Gram product's kept labels (ta_gram_labels), -1 */
  int64_t nwhole;    /* tasks [0, nwhole) make whole chunks, the ones
                        after them chunk nwhole + k / tailp in piece
                        k % tailp of its rows (ta_tail_pieces) */
  int tailp;         /* pieces a chunk of the tail is cut into, 1: none */
  struct s_part *part; /* per chunk of the tail: what its pieces share */
  pthread_mutex_t mu;/* guards err and part */
  tr_err err;        /* first failure of a task */
} s_run;

/* A chunk made in pieces of its rows by several tasks: the first to start
** makes the output, each computes its rows, the last stores it. */
typedef struct s_part {
  tr_blob *ob; /* the output chunk, NULL until a piece starts */
  int left;    /* pieces not yet done */
  int failed;  /* a piece failed: the chunk is not stored */
} s_part;

static unsigned s_hash(int rel, int64_t lin) {
  uint64_t h = (uint64_t)lin * 0x9E3779B97F4A7C15ull ^ (uint64_t)rel * 0xC2B2AE3D27D4EB4Full;
  return (unsigned)(h >> 40) % S_BUCKETS;
}

/* Drop unused entries, oldest first, until under budget (mu held). */
static void s_evict(s_cache *c) {
  while (c->bytes > c->budget) {
    s_entry **victim = NULL;
    for (int b = 0; b < S_BUCKETS; b++)
      for (s_entry **pp = &c->bucket[b]; *pp; pp = &(*pp)->next)
        if ((*pp)->ready && !(*pp)->refs && (!victim || (*pp)->tick < (*victim)->tick))
          victim = pp;
    if (!victim) return;
    s_entry *v = *victim;
    *victim = v->next;
    c->bytes -= v->bytes;
    c->kt->release(v->buf);
    tr_blob_unref(&v->blob);
    free(v);
  }
}

static void s_cache_release(s_cache *c, s_entry *en) {
  pthread_mutex_lock(&c->mu);
  en->refs--;
  s_evict(c);
  pthread_mutex_unlock(&c->mu);
}

/* Get chunk lin of rel, loading it if needed; the entry is pinned until
** s_cache_release. */
static int s_cache_get(s_run *run, int rel, int64_t lin, s_entry **out, tr_err *err) {
  s_cache *c = run->cache;
  const tr_tensor *t = run->in_meta[rel];
  unsigned h = s_hash(rel, lin);
  pthread_mutex_lock(&c->mu);
  for (s_entry *en = c->bucket[h]; en; en = en->next)
    if (en->rel == rel && en->lin == lin) {
      en->refs++;
      while (!en->ready) pthread_cond_wait(&c->cv, &c->mu);
      en->tick = ++c->tick;
      pthread_mutex_unlock(&c->mu);
      if (!en->buf) { /* its load failed */
        s_cache_release(c, en);
        return tr_seterr(err, TR_EIO, "chunk %lld of %s could not be read", (long long)lin,
                         t->name);
      }
      *out = en;
      return TR_OK;
    }
  s_entry *en = calloc(1, sizeof *en);
  if (!en) {
    pthread_mutex_unlock(&c->mu);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  en->rel = rel;
  en->lin = lin;
  en->refs = 1;
  en->next = c->bucket[h];
  c->bucket[h] = en;
  pthread_mutex_unlock(&c->mu);

  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
  tr_key_from_linear(t, lin, key);
  size_t bytes = (size_t)tr_chunk_extent(t, key, ext) * tr_dtype_size(t->dtype);
  tr_blob *blob = NULL;
  int rc = run->io->read(run->io->ctx, rel, lin, bytes, &blob, err);
  void *buf = rc ? NULL : tr_blob_data(blob);
  if (!rc) run->kt->keep(buf, bytes); /* unchanged until evicted */
  pthread_mutex_lock(&c->mu);
  if (rc) {
    tr_blob_unref(&blob);
    bytes = 0;
    /* Unlink it so a later request retries; waiters see buf == NULL. */
    for (s_entry **pp = &c->bucket[h]; *pp; pp = &(*pp)->next)
      if (*pp == en) {
        *pp = en->next;
        break;
      }
  }
  en->blob = blob;
  en->buf = buf;
  en->bytes = bytes;
  en->ready = 1;
  en->tick = ++c->tick;
  c->bytes += bytes;
  pthread_cond_broadcast(&c->cv);
  if (rc) {
    /* Waiters hold references; the last one out frees the entry. */
    int last = --en->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last) free(en);
    return rc;
  }
  pthread_mutex_unlock(&c->mu);
  *out = en;
  return TR_OK;
}

static void s_cache_free(s_cache *c) {
  for (int b = 0; b < S_BUCKETS; b++)
    for (s_entry *en = c->bucket[b], *nx; en; en = nx) {
      nx = en->next;
      tr_blob_unref(&en->blob);
      free(en);
    }
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

/* ---- Element conversion ------------------------------------------------ */


/* ---- Operands -------------------------------------------------------------- */

/* One operand chunk as a task sees it. */
typedef struct s_chunk {
  const void *data;        /* elements, node dtype */
  int64_t ext[TR_MAX_RANK];/* extent of each dimension */
  int64_t stride[TR_MAX_RANK]; /* element stride of each: row-major over
                                  ext, or the stored chunk's when this is
                                  a box inside it, read where it is */
  s_entry *pin;            /* cache entry to release, or NULL */
  void *own;               /* buffer to free, or NULL */
} s_chunk;

static void s_chunk_done(s_run *run, s_chunk *ch) {
  if (ch->pin) s_cache_release(run->cache, ch->pin);
  tr_free_aligned(ch->own);
  memset(ch, 0, sizeof *ch);
}


/* Fetch operand oi's box whose node labels start at llo[] and extend
** lext[]: a stored chunk whole, a box inside one (in place, with the
** stored chunk's strides, when no conversion is needed), or a box over
** several (assembled into a buffer of its own). */
static int s_fetch(s_run *run, int oi, const int64_t *llo, const int64_t *lext, s_chunk *ch, tr_err *err) {
  const ta_node *n = run->node;
  const ta_operand *o = &n->in[oi];
  const tr_tensor *t = run->in_meta[oi];
  int64_t lo[TR_MAX_RANK], n_el = 1, first[TR_MAX_RANK], last[TR_MAX_RANK], sext[TR_MAX_RANK];
  int one = 1, whole = 1, rc;
  memset(ch, 0, sizeof *ch);
  for (int d = 0; d < o->rank; d++) {
    lo[d] = llo[o->label[d]];
    ch->ext[d] = lext[o->label[d]];
    n_el *= ch->ext[d];
  }
  tx_row_major(o->rank, ch->ext, ch->stride);
  tr_chunks_under(t, lo, ch->ext, first, last);
  for (int d = 0; d < o->rank; d++) one &= first[d] == last[d];
  if (one) { /* inside stored chunk `first`: all of it? */
    tr_chunk_extent(t, first, sext);
    for (int d = 0; d < o->rank; d++) whole &= lo[d] == first[d] * t->chunk[d] && ch->ext[d] == sext[d];
  }
  if (one && (whole || t->dtype == run->dt)) {
    if ((rc = s_cache_get(run, oi, tr_key_linear(t, first), &ch->pin, err))) return rc;
    if (!whole) { /* a box inside the stored chunk, read where it is */
      int64_t off = 0;
      tx_row_major(o->rank, sext, ch->stride);
      for (int d = 0; d < o->rank; d++) off += (lo[d] - first[d] * t->chunk[d]) * ch->stride[d];
      ch->data = (const char *)ch->pin->buf + (size_t)off * run->esz;
      return TR_OK;
    }
    if (t->dtype == run->dt) {
      ch->data = ch->pin->buf;
      return TR_OK;
    }
    ch->own = tr_alloc_aligned((size_t)n_el * run->esz);
    if (!ch->own) {
      s_chunk_done(run, ch);
      return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
    tx_convert(ch->own, run->dt, ch->pin->buf, t->dtype, n_el);
    s_cache_release(run->cache, ch->pin);
    ch->pin = NULL;
    ch->data = ch->own;
    return TR_OK;
  }
  /* Re-chunk: assemble the box [lo, lo+ext) from the stored chunks that
  ** overlap it. */
  void *dst = tr_alloc_aligned((size_t)n_el * run->esz);
  if (!dst) return tr_seterr(err, TR_ENOMEM, "out of memory");
  ch->own = dst;
  ch->data = dst;
  int64_t sk[TR_MAX_RANK], *dstride = ch->stride;
  memcpy(sk, first, sizeof sk);
  void *conv = NULL;
  for (;;) {
    s_entry *en;
    if ((rc = s_cache_get(run, oi, tr_key_linear(t, sk), &en, err))) break;
    int64_t sstride[TR_MAX_RANK], box[TR_MAX_RANK];
    int64_t soff = 0, doff = 0, nbox = 1;
    tr_chunk_extent(t, sk, sext);
    tx_row_major(o->rank, sext, sstride);
    for (int d = 0; d < o->rank; d++) {
      int64_t s0 = sk[d] * t->chunk[d];
      int64_t a = lo[d] > s0 ? lo[d] : s0;
      int64_t bnd = lo[d] + ch->ext[d] < s0 + sext[d] ? lo[d] + ch->ext[d] : s0 + sext[d];
      box[d] = bnd - a;
      nbox *= box[d];
      soff += (a - s0) * sstride[d];
      doff += (a - lo[d]) * dstride[d];
    }
    const void *src = (const char *)en->buf + (size_t)soff * tr_dtype_size(t->dtype);
    if (t->dtype != run->dt) {
      /* Convert the stored chunk whole, then copy from the converted one. */
      int64_t sn = 1;
      for (int d = 0; d < o->rank; d++) sn *= sext[d];
      void *cv = realloc(conv, (size_t)sn * run->esz);
      if (!cv) {
        s_cache_release(run->cache, en);
        rc = tr_seterr(err, TR_ENOMEM, "out of memory");
        break;
      }
      conv = cv;
      tx_convert(conv, run->dt, en->buf, t->dtype, sn);
      src = (const char *)conv + (size_t)soff * run->esz;
    }
    if (nbox > 0)
      rc = run->kt->copy(run->dt, o->rank, box, (char *)dst + (size_t)doff * run->esz,
                         dstride, src, sstride, run->cancel);
    s_cache_release(run->cache, en);
    if (rc || !tr_key_next(o->rank, sk, first, last)) break;
  }
  free(conv);
  if (rc) s_chunk_done(run, ch);
  return rc;
}

/* ---- Kernel calls ---------------------------------------------------------- */

/* Element strides of operand o's chunk, per node label. */
static void s_label_strides(const ta_operand *o, const s_chunk *ch, int64_t *ls) {
  memset(ls, 0, sizeof(int64_t) * TK_MAX_LABELS);
  for (int d = 0; d < o->rank; d++) ls[o->label[d]] += ch->stride[d];
}

/*
** The gemm path.  Labels fall into groups: batch (both operands and the
** output), M (first operand and output), N (second and output), K (both
** operands, summed).  Each operand chunk is a (batched) matrix when its
** labels of one group are laid out contiguously; the group order follows
** the output for M and N, the first operand for K.  A chunk that is not
** such a matrix is first copied into one.
*/
typedef struct s_mat {
  int64_t rs, cs, bs; /* row, column and batch strides */
} s_mat;

/* Stride of a group of labels if they form one dimension in ls, else -1. */
static int64_t s_group_stride(const int *g, int ng, const int64_t *ls, const int64_t *ext) {
  int64_t s = 0;
  int have = 0;
  for (int i = ng - 1; i >= 0; i--) {
    if (ext[g[i]] == 1) continue; /* size-1 labels fit anywhere */
    if (!have) {
      s = ls[g[i]];
      have = 1;
    } else {
      int64_t want = 0;
      /* find the next inner non-trivial label to compute expected stride */
      for (int j = i + 1; j < ng; j++)
        if (ext[g[j]] != 1) {
          want = ls[g[j]] * ext[g[j]];
          break;
        }
      if (ls[g[i]] != want) return -1;
    }
  }
  return have ? s : 0;
}

static int64_t s_group_size(const int *g, int ng, const int64_t *ext) {
  int64_t s = 1;
  for (int i = 0; i < ng; i++) s *= ext[g[i]];
  return s;
}

/* Can a (rows x cols) matrix with strides (rs, cs) go to gemm as is?
** Sets *trans and *ld. */
static int s_gemmable(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int *trans,
                      int64_t *ld) {
  if (rs < 0 || cs < 0) return 0;
  if (cols == 1 || cs == 1) {
    int64_t l = rows == 1 ? cols : rs;
    if (l >= cols && l >= 1) {
      *trans = 0;
      *ld = l;
      return 1;
    }
  }
  if (rows == 1 || rs == 1) {
    int64_t l = cols == 1 ? rows : cs;
    if (l >= rows && l >= 1) {
      *trans = 1;
      *ld = l;
      return 1;
    }
  }
  return 0;
}

/* Copy operand data viewed with label strides ls into a canonical buffer
** laid out as [g0 labels][g1 labels][g2 labels] (row-major). */
static int s_canon(s_run *run, const void *src, const int64_t *ls, const int64_t *ext,
                   const int *order, int norder, void **out) {
  int64_t e2[TK_MAX_LABELS], ss[TK_MAX_LABELS], ds[TK_MAX_LABELS], total = 1;
  for (int i = 0; i < norder; i++) {
    e2[i] = ext[order[i]];
    ss[i] = ls[order[i]];
    total *= e2[i];
  }
  tx_row_major(norder, e2, ds);
  *out = tr_alloc_aligned((size_t)total * run->esz);
  if (!*out) return TR_ENOMEM;
  return run->kt->copy(run->dt, norder, e2, *out, ds, src, ss, run->cancel);
}

/* Concatenate up to three label groups into ord; returns the count. */
static int s_order(int *ord, const int *g1, int n1, const int *g2, int n2, const int *g3, int n3) {
  int k = 0;
  for (int i = 0; i < n1; i++) ord[k++] = g1[i];
  for (int i = 0; i < n2; i++) ord[k++] = g2[i];
  for (int i = 0; i < n3; i++) ord[k++] = g3[i];
  return k;
}

/* View an operand (label strides ls) as a batch of matrices over the
** label groups [gb][g1][g2] for gemm: *m, *trans, *ld and batch stride
** *bs.  An operand whose layout gemm cannot take as it is gets copied into
** that order first; *buf receives the copy (caller frees). */
static int s_matrix(s_run *run, const void *data, const int64_t *ls, const int64_t *ext,
                    const int *gb, int nb, const int *g1, int n1, const int *g2, int n2,
                    const void **m, int *trans, int64_t *ld, int64_t *bs, void **buf) {
  int64_t rows = s_group_size(g1, n1, ext), cols = s_group_size(g2, n2, ext);
  *m = data;
  *bs = s_group_stride(gb, nb, ls, ext);
  if (*bs >= 0 && s_gemmable(rows, cols, s_group_stride(g1, n1, ls, ext),
                             s_group_stride(g2, n2, ls, ext), trans, ld))
    return TR_OK;
  int ord[TK_MAX_LABELS], k = s_order(ord, gb, nb, g1, n1, g2, n2);
  int rc = s_canon(run, data, ls, ext, ord, k, buf);
  if (rc) return rc;
  *m = *buf;
  *trans = 0;
  *ld = cols;
  *bs = rows * cols;
  return TR_OK;
}

/* Rows, columns or depth of a gemm panel at least (see tx_gemm_panels). */
#define S_PANEL_MIN 256

int tx_gemm_panels(const tk_backend *kt, const tr_cancel *cancel, tr_dtype dt, int ta, int tb,
                   int64_t M, int64_t N, int64_t K, double alpha, const void *a, int64_t lda,
                   int64_t sa, const void *b, int64_t ldb, int64_t sb, double beta, void *c,
                   int64_t ldc, int64_t sc, int64_t B) {
  const int64_t esz = (int64_t)tr_dtype_size(dt), panel = kt->gemm_panel;
  const char *pa = a, *pb = b;
  char *pc = c;
  enum { WHOLE, BATCH, ROWS, COLS, DEPTH } cut = WHOLE;
  if (tr_cancelled(cancel)) return TR_EINTR;
  /* Batches are independent products.  Depth next: BLAS walks K in blocks
  ** of a few hundred anyway, updating C after each, so calls along K pack
  ** each factor once as one call would (4096^3 f32 on 2 threads: one call
  ** 0.43-0.45 s, 16 calls of depth 256 the same, 16 calls of 1024 x 1024
  ** output 0.47-0.49 s).  Rows and columns re-pack the other operand per
  ** call, and leave each BLAS thread a thinner share: the longer is cut. */
  if (panel > 0 && (double)B * (double)M * (double)N * (double)K > (double)panel) {
    if (B > 1) cut = BATCH;
    else if (K >= 2 * S_PANEL_MIN) cut = DEPTH;
    else if (M >= N && M >= 2 * S_PANEL_MIN) cut = ROWS;
    else if (N >= 2 * S_PANEL_MIN) cut = COLS;
    else if (M >= 2 * S_PANEL_MIN) cut = ROWS;
  }
  int rc;
  int64_t h;
  switch (cut) {
  case WHOLE:
    return kt->gemm(dt, ta, tb, M, N, K, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, B);
  case BATCH:
    h = B / 2;
    rc = tx_gemm_panels(kt, cancel, dt, ta, tb, M, N, K, alpha, a, lda, sa, b, ldb, sb, beta, c,
                        ldc, sc, h);
    return rc ? rc
              : tx_gemm_panels(kt, cancel, dt, ta, tb, M, N, K, alpha, pa + h * sa * esz, lda, sa,
                               pb + h * sb * esz, ldb, sb, beta, pc + h * sc * esz, ldc, sc, B - h);
  case ROWS: /* row r of op(A) starts at r * lda, or at r when A is transposed */
    h = M / 2;
    rc = tx_gemm_panels(kt, cancel, dt, ta, tb, h, N, K, alpha, a, lda, sa, b, ldb, sb, beta, c,
                        ldc, sc, B);
    return rc ? rc
              : tx_gemm_panels(kt, cancel, dt, ta, tb, M - h, N, K, alpha,
                               pa + h * (ta ? 1 : lda) * esz, lda, sa, b, ldb, sb, beta,
                               pc + h * ldc * esz, ldc, sc, B);
  case COLS:
    h = N / 2;
    rc = tx_gemm_panels(kt, cancel, dt, ta, tb, M, h, K, alpha, a, lda, sa, b, ldb, sb, beta, c,
                        ldc, sc, B);
    return rc ? rc
              : tx_gemm_panels(kt, cancel, dt, ta, tb, M, N - h, K, alpha, a, lda, sa,
                               pb + h * (tb ? ldb : 1) * esz, ldb, sb, beta, pc + h * esz, ldc, sc,
                               B);
  default: /* DEPTH: the second half adds to the first */
    h = K / 2;
    rc = tx_gemm_panels(kt, cancel, dt, ta, tb, M, N, h, alpha, a, lda, sa, b, ldb, sb, beta, c,
                        ldc, sc, B);
    return rc ? rc
              : tx_gemm_panels(kt, cancel, dt, ta, tb, M, N, K - h, alpha,
                               pa + h * (ta ? lda : 1) * esz, lda, sa,
                               pb + h * (tb ? 1 : ldb) * esz, ldb, sb, 1.0, c, ldc, sc, B);
  }
}

/*
** Factor f (0 left, 1 right) of a gemm node's  left right MUL  as an
** operand chunk.  One INPUT: that operand's chunk.  Else an elementwise
** producer fused into the product: its tile is computed here, in the
** labels of its largest operand (ta_gemm_ok), into *buf
** (caller frees), and lives only for this join tuple.
*/
static int s_factor(s_run *run, int f, const s_chunk *ch, const int64_t *ext, ta_operand *vo,
                    s_chunk *vc, void **buf) {
  const ta_node *n = run->node;
  int split = ta_gemm_split(&n->prog);
  int from = f ? split : 0, to = f ? n->prog.n - 1 : split;
  tr_assert(split > 0);
  if (to - from == 1 && n->prog.code[from].op == TK_OP_INPUT) {
    *vo = n->in[n->prog.code[from].arg];
    *vc = ch[n->prog.code[from].arg];
    return TR_OK;
  }
  tk_contract op;
  memset(&op, 0, sizeof op);
  int map[TK_MAX_INPUTS], w = -1;
  for (int i = 0; i < n->ninputs; i++) map[i] = -1;
  for (int pc = from; pc < to; pc++)
    if (n->prog.code[pc].op == TK_OP_INPUT && map[n->prog.code[pc].arg] < 0) {
      int i = n->prog.code[pc].arg;
      map[i] = op.ninputs++;
      if (w < 0 || n->in[i].rank > n->in[w].rank) w = i;
    }
  *vo = n->in[w];
  memset(vc, 0, sizeof *vc);
  int64_t nel = 1;
  for (int d = 0; d < vo->rank; d++) nel *= vc->ext[d] = ext[vo->label[d]];
  tx_row_major(vo->rank, vc->ext, vc->stride);
  void *t = tr_alloc_aligned((size_t)nel * run->esz);
  if (!t) return TR_ENOMEM;
  *buf = t;
  vc->data = t;
  op.dtype = run->dt;
  op.nlabels = op.nout = vo->rank;
  for (int d = 0; d < vo->rank; d++) op.extent[d] = vc->ext[d];
  tx_row_major(vo->rank, vc->ext, op.out_stride);
  for (int i = 0; i < n->ninputs; i++) {
    if (map[i] < 0) continue;
    int64_t ls[TK_MAX_LABELS];
    s_label_strides(&n->in[i], &ch[i], ls);
    op.in[map[i]] = ch[i].data;
    for (int d = 0; d < vo->rank; d++) op.in_stride[map[i]][d] = ls[vo->label[d]];
  }
  op.prog.n = to - from;
  for (int pc = from; pc < to; pc++) {
    op.prog.code[pc - from] = n->prog.code[pc];
    if (n->prog.code[pc].op == TK_OP_INPUT) op.prog.code[pc - from].arg = map[n->prog.code[pc].arg];
  }
  op.out = t;
  op.agg = TK_AGG_NONE;
  op.cancel = run->cancel;
  return run->kt->contract(&op);
}

/* Blocks of an output chunk that syrk summed: their upper triangles
** are copied across once the chunk is summed (s_tri_fill). */
#define S_TRI_MAX 16
typedef struct s_tri {
  int n;
  struct {
    void *c;
    int64_t n, ldc;
  } r[S_TRI_MAX];
} s_tri;

/* C's lower triangle from its upper one (row-major, n x n, ldc), in tiles
** that stay in cache: the upper triangle is read down its columns. */
#define S_TRI_TILE 64
static void s_tri_copy(tr_dtype dt, void *c, int64_t n, int64_t ldc) {
  for (int64_t i0 = 0; i0 < n; i0 += S_TRI_TILE)
    for (int64_t j0 = 0; j0 <= i0; j0 += S_TRI_TILE)
      for (int64_t i = i0; i < n && i < i0 + S_TRI_TILE; i++)
        for (int64_t j = j0; j < i && j < j0 + S_TRI_TILE; j++) {
          if (dt == TR_F32) ((float *)c)[i * ldc + j] = ((float *)c)[j * ldc + i];
          else ((double *)c)[i * ldc + j] = ((double *)c)[j * ldc + i];
        }
}

/* Where block c is noted in tri (every tuple so far summed it by syrk),
** or -1. */
static int s_tri_find(const s_tri *tri, const void *c) {
  for (int i = 0; tri && i < tri->n; i++)
    if (tri->r[i].c == c) return i;
  return -1;
}

/* Block c (n x n, ldc) was summed by syrk: note it, or copy its triangle
** now when tri is NULL or full. */
static void s_tri_note(const s_run *run, s_tri *tri, void *c, int64_t n, int64_t ldc) {
  if (s_tri_find(tri, c) >= 0) return;
  if (!tri || tri->n == S_TRI_MAX) {
    s_tri_copy(run->dt, c, n, ldc);
    return;
  }
  tri->r[tri->n].c = c;
  tri->r[tri->n].n = n;
  tri->r[tri->n++].ldc = ldc;
}

/* Block c gets a tuple that is no Gram block (twin tiles are found by
** their values, tuple by tuple): what syrk summed into it so far is
** symmetric, so its triangle is copied across now, before the gemm adds
** to both. */
static void s_tri_settle(const s_run *run, s_tri *tri, void *c) {
  int i = s_tri_find(tri, c);
  if (i < 0) return;
  s_tri_copy(run->dt, c, tri->r[i].n, tri->r[i].ldc);
  tri->r[i] = tri->r[--tri->n];
}

static void s_tri_fill(const s_run *run, s_tri *tri) {
  for (int i = 0; i < tri->n; i++) s_tri_copy(run->dt, tri->r[i].c, tri->r[i].n, tri->r[i].ldc);
  tri->n = 0;
}

/* Whether stored matrices a and b (rows x cols, leading dimension ld)
** hold the same values bit for bit: one chunk read by both factors, or a
** fused factor's tile made twice alike, as SUM((X[n,i] - mu[i]) *
** (X[n,j] - mu[j])) makes them on a diagonal block.  Two matrices that
** differ usually do so in their first row. */
static int s_same_matrix(const void *a, const void *b, int64_t rows, int64_t cols, int64_t ld,
                         size_t esz) {
  for (int64_t r = 0; a != b && r < rows; r++)
    if (memcmp((const char *)a + (size_t)(r * ld) * esz, (const char *)b + (size_t)(r * ld) * esz,
               (size_t)cols * esz))
      return 0;
  return 1;
}

/* A Gram product's C = op(A) op(A)^T by the backend's syrk, in slices of
** the summed depth that each stay within gemm_panel multiply-adds, the
** cancel token polled between them (a BLAS call cannot be stopped). */
static int s_syrk_panels(const s_run *run, int trans, int64_t n, int64_t k, const void *a,
                         int64_t lda, double beta, void *c, int64_t ldc) {
  const tk_backend *kt = run->kt;
  double half = (double)n * (double)n / 2;
  int64_t step = k;
  if (kt->gemm_panel > 0 && half * (double)k > (double)kt->gemm_panel) {
    step = (int64_t)((double)kt->gemm_panel / half);
    if (step < S_PANEL_MIN) step = S_PANEL_MIN;
  }
  for (int64_t p = 0; p < k; p += step) {
    if (tr_cancelled(run->cancel)) return TR_EINTR;
    /* depth p of op(A): column p of A, or its row p when A is transposed */
    const char *ap = (const char *)a + (trans ? p * lda : p) * run->esz;
    int rc = kt->syrk(run->dt, trans, n, k - p < step ? k - p : step, 1.0, ap, lda,
                      p ? 1.0 : beta, c, ldc);
    if (rc) return rc;
  }
  return TR_OK;
}

/* One join tuple on the gemm path: out (+)= left * right (tri: the blocks
** syrk summed, s_tri_note).  twin: a Gram product's tuple whose two kept
** labels cover the same range, so its right factor is its left one read
** with the labels swapped (a fused factor's tile is made once). */
static int s_gemm_tuple(s_run *run, const s_chunk *ch, const int64_t *ext, void *out,
                        const int64_t *ols, int first, s_tri *tri, int twin) {
  const ta_node *n = run->node;
  int gb[TK_MAX_LABELS], gm[TK_MAX_LABELS], gn[TK_MAX_LABELS], gk[TK_MAX_LABELS];
  int nb = 0, nm = 0, nn = 0, nk = 0;
  int64_t ls0[TK_MAX_LABELS], ls1[TK_MAX_LABELS];
  ta_operand vo[2];
  s_chunk vc[2];
  void *bufa = NULL, *bufb = NULL, *bufc = NULL, *fa = NULL, *fb = NULL;
  int rc = s_factor(run, 0, ch, ext, &vo[0], &vc[0], &fa);
  if (!rc && twin) {
    vo[1] = vo[0];
    vc[1] = vc[0];
    for (int d = 0; d < vo[1].rank; d++)
      if (vo[1].label[d] == run->li) vo[1].label[d] = run->lj;
  } else if (!rc) {
    rc = s_factor(run, 1, ch, ext, &vo[1], &vc[1], &fb);
  }
  if (rc) goto done;
  /* The product is symmetric: the left factor is the one without the
  ** output's innermost label, so that C is written in place, not into a
  ** transposed scratch folded in afterwards (a pass over C the wrong way:
  ** a chain's last step O[i,m] = SUM(D[l,m] * T[i,l]), 4096 x 4096 by 64,
  ** took 0.041 s against 0.022 s with the factors the other way round) */
  int inner = -1;
  for (int l = 0; l < n->nout; l++)
    if (ext[l] > 1 && (inner < 0 || ols[l] < ols[inner])) inner = l;
  if (inner >= 0) {
    int in0 = 0, in1 = 0;
    for (int d = 0; d < vo[0].rank; d++) in0 |= vo[0].label[d] == inner;
    for (int d = 0; d < vo[1].rank; d++) in1 |= vo[1].label[d] == inner;
    if (in0 && !in1) {
      ta_operand tv = vo[0];
      s_chunk tcnk = vc[0];
      vo[0] = vo[1], vo[1] = tv;
      vc[0] = vc[1], vc[1] = tcnk;
    }
  }
  s_label_strides(&vo[0], &vc[0], ls0);
  int has0[TK_MAX_LABELS] = {0}, has1[TK_MAX_LABELS] = {0};
  for (int d = 0; d < vo[0].rank; d++) has0[vo[0].label[d]] = 1;
  for (int d = 0; d < vo[1].rank; d++) has1[vo[1].label[d]] = 1;
  s_label_strides(&vo[1], &vc[1], ls1);
  for (int l = 0; l < n->nout; l++) {
    if (has0[l] && has1[l]) gb[nb++] = l;
    else if (has0[l]) gm[nm++] = l;
    else gn[nn++] = l;
  }
  for (int d = 0; d < vo[0].rank; d++)
    if (vo[0].label[d] >= n->nout) gk[nk++] = vo[0].label[d];
  int64_t B = s_group_size(gb, nb, ext), M = s_group_size(gm, nm, ext);
  int64_t N = s_group_size(gn, nn, ext), K = s_group_size(gk, nk, ext);
  const void *a, *b;
  int ta, tb;
  int64_t lda, ldb, ldc, sa, sb, sc;
  if ((rc = s_matrix(run, vc[0].data, ls0, ext, gb, nb, gm, nm, gk, nk, &a, &ta, &lda, &sa,
                     &bufa)) ||
      (rc = s_matrix(run, vc[1].data, ls1, ext, gb, nb, gk, nk, gn, nn, &b, &tb, &ldb, &sb,
                     &bufb)))
    goto done;
  /* C as [batch][M][N] with unit column stride; else a scratch matrix
  ** folded into out afterwards. */
  int64_t cb = s_group_stride(gb, nb, ols, ext), cm = s_group_stride(gm, nm, ols, ext),
          cn = s_group_stride(gn, nn, ols, ext);
  int tc = 0;
  void *c = out;
  if (cb < 0 || !s_gemmable(M, N, cm, cn, &tc, &ldc) || tc) {
    bufc = tr_alloc_aligned((size_t)(B * M * N) * run->esz);
    if (!bufc) {
      rc = TR_ENOMEM;
      goto done;
    }
    c = bufc;
    ldc = N;
    cb = M * N;
  }
  sc = cb;
  double beta = (first || c == bufc) ? 0.0 : 1.0;
  /* A Gram product's diagonal block, X^T X: one matrix read both ways
  ** (ta_gemm_share prices it so where both factors are one relation's
  ** chunks; a fused factor's twin tiles are found here only).  Only onto
  ** a block that syrk alone summed so far: its lower triangle is left
  ** for later, which a gemm's sums there would make wrong. */
  if (run->kt->syrk && B == 1 && M == N && lda == ldb && ta != tb &&
      (c == bufc || first || s_tri_find(tri, c) >= 0) &&
      s_same_matrix(a, b, ta ? K : M, ta ? M : K, lda, run->esz)) {
    rc = s_syrk_panels(run, ta, M, K, a, lda, beta, c, ldc);
    if (!rc) s_tri_note(run, c == bufc ? NULL : tri, c, M, ldc); /* a scratch is folded now */
  } else {
    if (c != bufc) s_tri_settle(run, tri, c);
    rc = tx_gemm_panels(run->kt, run->cancel, run->dt, ta, tb, M, N, K, 1.0, a, lda, sa, b, ldb,
                        sb, beta, c, ldc, sc, B);
  }
  if (!rc && c == bufc) {
    /* out (+)= scratch, through the contract kernel's strided add. */
    tk_contract op;
    memset(&op, 0, sizeof op);
    op.dtype = run->dt;
    int64_t sstr[TK_MAX_LABELS];
    int ord[TK_MAX_LABELS], k = s_order(ord, gb, nb, gm, nm, gn, nn);
    int64_t e2[TK_MAX_LABELS], s2[TK_MAX_LABELS];
    for (int i = 0; i < k; i++) e2[i] = ext[ord[i]];
    tx_row_major(k, e2, s2);
    for (int i = 0; i < k; i++) sstr[ord[i]] = s2[i];
    op.nlabels = op.nout = n->nout;
    op.ninputs = 1;
    op.in[0] = bufc;
    for (int l = 0; l < n->nout; l++) {
      op.extent[l] = ext[l];
      op.in_stride[0][l] = sstr[l];
      op.out_stride[l] = ols[l];
    }
    op.out = out;
    op.prog.n = 1;
    op.prog.code[0].op = TK_OP_INPUT;
    op.agg = TK_AGG_SUM;
    op.accumulate = !first;
    op.cancel = run->cancel;
    rc = run->kt->contract(&op);
  }
done:
  tr_free_aligned(bufa);
  tr_free_aligned(bufb);
  tr_free_aligned(bufc);
  tr_free_aligned(fa);
  tr_free_aligned(fb);
  return rc == TR_ENOMEM ? TR_ENOMEM : rc;
}

/* One join tuple on the general path. */
static int s_contract_tuple(s_run *run, const s_chunk *ch, const int64_t *ext, void *out,
                            const int64_t *ols, int first) {
  const ta_node *n = run->node;
  tk_contract op;
  memset(&op, 0, sizeof op);
  op.dtype = run->dt;
  op.nlabels = n->nlabels;
  op.nout = n->nout;
  memcpy(op.extent, ext, sizeof(int64_t) * (size_t)n->nlabels);
  op.ninputs = n->ninputs;
  for (int i = 0; i < n->ninputs; i++) {
    op.in[i] = ch[i].data;
    s_label_strides(&n->in[i], &ch[i], op.in_stride[i]);
  }
  op.out = out;
  memcpy(op.out_stride, ols, sizeof(int64_t) * (size_t)n->nout);
  op.prog = n->prog;
  op.agg = n->agg;
  op.accumulate = !first;
  op.cancel = run->cancel;
  return run->kt->contract(&op);
}

/* ---- Node tasks ------------------------------------------------------------ */

static int s_fail(s_run *run, const tr_err *err) {
  pthread_mutex_lock(&run->mu);
  if (run->err.code == TR_OK) run->err = *err;
  pthread_mutex_unlock(&run->mu);
  return err->code ? err->code : TR_ERR;
}

/* A kernel call of a task on output om failed with rc. */
static void s_kernel_failed(tr_err *err, const tr_tensor *om, int rc) {
  if (rc == TR_EINTR)
    tr_seterr(err, rc, "interrupted");
  else
    tr_seterr(err, rc, "kernel failed in %s (status %d)", om->name, rc);
}

/* Does the tuple at lkey run here: is its chunk of the drive operand one
** this task was given?  (The drive operand is never re-chunked.) */
static int s_drives_here(s_run *run, const int64_t *lkey) {
  const ta_node *n = run->node;
  const ta_operand *o = &n->in[n->drive];
  int64_t key[TR_MAX_RANK];
  for (int d = 0; d < o->rank; d++) key[d] = lkey[o->label[d]];
  return run->io->has(run->io->ctx, n->drive, tr_key_linear(run->in_meta[n->drive], key));
}

/* Length of the piece of [at, end) that starts at `at` with pieces at
** multiples of `piece` (0: the rest whole). */
static int64_t s_piece_len(int64_t at, int64_t end, int64_t piece) {
  int64_t stop = piece ? (at / piece + 1) * piece : end;
  return (stop < end ? stop : end) - at;
}

/* How many pieces [lo, lo + ext) falls into, pieces at multiples of
** `piece` (0: one). */
static int64_t s_pieces(int64_t lo, int64_t ext, int64_t piece) {
  return piece ? (lo + ext - 1) / piece - lo / piece + 1 : 1;
}

/* Join tuple [llo, llo + ext) into out (ols: its strides): whole, or piece
** by piece along the labels whose operands are stored in finer chunks
** (run->piece), so that each piece reads one stored chunk of each
** operand, or a box inside one, where it is: a dense layer's weights
** stored in 4 row blocks were copied into one 16384 x 64 matrix for
** every output chunk, 4 MB a call.  Along an output label a piece writes
** its part of out.  written[]: per output piece (the pieces of out, in
** row-major order), whether one has written it yet; *any: whether any
** has. */
static int s_tuple_run(s_run *run, const int64_t *llo, const int64_t *ext, void *out, const int64_t *ols,
                       uint8_t *written, int *any, s_tri *tri, tr_err *err) {
  const ta_node *n = run->node;
  int64_t plo[TK_MAX_LABELS], pext[TK_MAX_LABELS];
  memcpy(plo, llo, sizeof(int64_t) * (size_t)n->nlabels);
  for (int l = 0; l < n->nlabels; l++) pext[l] = s_piece_len(llo[l], llo[l] + ext[l], run->piece[l]);
  for (;;) {
    s_chunk ch[TK_MAX_INPUTS];
    int i, rc = TR_OK;
    int64_t at = 0, off = 0; /* the output piece, and where it starts in out */
    for (int l = 0; l < n->nout; l++) {
      off += (plo[l] - llo[l]) * ols[l];
      if (run->piece[l])
        at = at * s_pieces(llo[l], ext[l], run->piece[l]) + (plo[l] / run->piece[l] - llo[l] / run->piece[l]);
    }
    memset(ch, 0, sizeof ch);
    for (i = 0; i < n->ninputs; i++)
      if ((rc = s_fetch(run, i, plo, pext, &ch[i], err))) break;
    if (!rc) {
      void *o = (char *)out + (size_t)off * run->esz;
      int twin = run->li >= 0 && plo[run->li] == plo[run->lj] && pext[run->li] == pext[run->lj];
      rc = n->gemm ? s_gemm_tuple(run, ch, pext, o, ols, !written[at], tri, twin)
                   : s_contract_tuple(run, ch, pext, o, ols, !written[at]);
      written[at] = 1;
      *any = 1;
      if (rc) s_kernel_failed(err, run->out_meta, rc);
    }
    for (int j = 0; j < i; j++) s_chunk_done(run, &ch[j]);
    if (rc) return rc;
    int l = n->nlabels - 1; /* the next piece: odometer over the split labels */
    for (; l >= 0; l--) {
      if (!run->piece[l]) continue;
      int64_t end = llo[l] + ext[l];
      if ((plo[l] += pext[l]) < end) {
        pext[l] = s_piece_len(plo[l], end, run->piece[l]);
        break;
      }
      plo[l] = llo[l];
      pext[l] = s_piece_len(llo[l], end, run->piece[l]);
    }
    if (l < 0) return TR_OK;
  }
}

/* Output chunk lin as the transpose of the chunk in b, of extents ext
** (a Gram product's block below the diagonal from its mirror above it,
** ta_gemm_mirror: the same sums, exactly symmetric), in tiles that stay
** in cache. */
#define S_TWIN_TILE 64
static int s_twin_write(s_run *run, const int64_t *ext, tr_blob *b, int64_t lin, tr_err *err) {
  int64_t rows = ext[0], cols = ext[1];
  size_t esz = run->esz;
  tr_blob *tb = tr_blob_new((size_t)(rows * cols) * esz);
  if (!tb) return tr_seterr(err, TR_ENOMEM, "out of memory");
  const char *src = tr_blob_data(b);
  char *dst = tr_blob_data(tb);
  for (int64_t i0 = 0; i0 < rows; i0 += S_TWIN_TILE)
    for (int64_t j0 = 0; j0 < cols; j0 += S_TWIN_TILE)
      for (int64_t i = i0; i < rows && i < i0 + S_TWIN_TILE; i++)
        for (int64_t j = j0; j < cols && j < j0 + S_TWIN_TILE; j++)
          memcpy(dst + (size_t)(j * rows + i) * esz, src + (size_t)(i * cols + j) * esz, esz);
  int rc = tr_cancelled(run->cancel) ? tr_seterr(err, TR_EINTR, "interrupted")
                                     : run->io->write(run->io->ctx, lin, tb, err);
  tr_blob_unref(&tb);
  return rc;
}

/* A new output chunk of bytes, kept by the backend: written by kernels
** only.  NULL: out of memory. */
static tr_blob *s_out_blob(s_run *run, size_t bytes) {
  tr_blob *b = tr_blob_new(bytes);
  if (b) run->kt->keep(tr_blob_data(b), bytes);
  return b;
}

/* The output chunk of a piece of the tail, made by the first of its
** pieces to start (run->mu held by the caller). */
static tr_blob *s_part_blob(s_run *run, s_part *pt, size_t bytes) {
  if (!pt->ob && !pt->failed) pt->ob = s_out_blob(run, bytes);
  return pt->ob;
}

/* Task t: compute output chunk lins[t] of the node (and its twin), or
** one piece of its rows when t is in the tail (ta_tail_pieces). */
static int s_node_task(void *arg, int64_t t) {
  s_run *run = arg;
  const ta_node *n = run->node;
  const tr_tensor *om = run->out_meta;
  int64_t ti = t < run->nwhole ? t : run->nwhole + (t - run->nwhole) / run->tailp;
  int64_t g = run->lins ? run->lins[ti] : ti;
  s_part *pt = t < run->nwhole ? NULL : &run->part[ti - run->nwhole];
  tr_err err;
  tr_clearerr(&err);
  int64_t lkey[TK_MAX_LABELS], ext[TK_MAX_LABELS], okey[TR_MAX_RANK], oext[TR_MAX_RANK];
  int64_t ols[TK_MAX_LABELS] = {0}, nel = 1;
  int rc = TR_OK;
  /* Output key from g; aggregated label keys start at 0. */
  tr_key_from_linear(om, g, okey);
  nel = tr_chunk_extent(om, okey, oext);
  for (int l = 0; l < n->nlabels; l++) lkey[l] = l < n->nout ? okey[l] : 0;
  tx_row_major(n->nout, oext, ols);
  /* the rows [r0, r1) of the chunk this task makes: a piece's rows start
  ** at multiples of 8 (whole cache lines of f64) */
  int64_t r0 = 0, r1 = n->nout ? oext[0] : 1;
  if (pt) {
    int64_t p = (t - run->nwhole) % run->tailp;
    r0 = r1 * p / run->tailp / 8 * 8;
    r1 = p + 1 == run->tailp ? r1 : r1 * (p + 1) / run->tailp / 8 * 8;
  }
  int any = 0;
  s_tri tri = {0};
  int64_t npieces = 1; /* pieces of the output chunk (s_tuple_run) */
  for (int l = 0; l < n->nout; l++)
    npieces *= s_pieces(okey[l] * n->chunk[l] + (l ? 0 : r0), l ? oext[l] : r1 - r0, run->piece[l]);
  uint8_t *written = calloc((size_t)(npieces > 0 ? npieces : 1), 1);
  tr_blob *ob = NULL;
  if (written && pt) {
    pthread_mutex_lock(&run->mu);
    ob = s_part_blob(run, pt, (size_t)nel * run->esz);
    pthread_mutex_unlock(&run->mu);
  } else if (written) {
    ob = s_out_blob(run, (size_t)nel * run->esz);
  }
  void *out = ob ? tr_blob_data(ob) : NULL;
  if (!ob) rc = tr_seterr(&err, TR_ENOMEM, "out of memory");
  for (int64_t tu = 0; !rc && r1 > r0 && tu < run->ntuples; tu++) {
    if (tr_cancelled(run->cancel)) {
      rc = tr_seterr(&err, TR_EINTR, "interrupted");
      break;
    }
    if (n->drive >= 0 && run->io->has && !s_drives_here(run, lkey)) {
      ta_next_tuple(n, lkey);
      continue;
    }
    int64_t llo[TK_MAX_LABELS];
    for (int l = 0; l < n->nlabels; l++) {
      int64_t rest = n->size[l] - lkey[l] * n->chunk[l];
      ext[l] = n->chunk[l] < rest ? n->chunk[l] : rest;
      llo[l] = lkey[l] * n->chunk[l];
    }
    if (n->nout) llo[0] += r0, ext[0] = r1 - r0;
    void *o = (char *)out + (size_t)(r0 * ols[0]) * run->esz;
    if ((rc = s_tuple_run(run, llo, ext, o, ols, written, &any, &tri, &err))) break;
    ta_next_tuple(n, lkey);
  }
  s_tri_fill(run, &tri);
  free(written);
  if (!rc && !any && r1 > r0)
    rc = tr_seterr(&err, TR_EINVAL, "no join tuple of output chunk %lld runs here", (long long)g);
  if (!rc && n->post.n && r1 > r0) {
    int64_t row = n->nout ? ols[0] : 1; /* elements a row */
    rc = run->kt->map(run->dt, &n->post, (char *)out + (size_t)(r0 * row) * run->esz, (r1 - r0) * row,
                      run->cancel);
    if (rc) s_kernel_failed(&err, om, rc);
  }
  if (pt) { /* the last piece done stores the chunk */
    pthread_mutex_lock(&run->mu);
    pt->failed |= rc != TR_OK;
    int last = --pt->left == 0, failed = pt->failed;
    pthread_mutex_unlock(&run->mu);
    if (!last) return rc ? s_fail(run, &err) : TR_OK;
    ob = pt->ob;
    pt->ob = NULL;
    if (failed && !rc) rc = TR_EINTR; /* another piece reported its failure */
  }
  if (ob) run->kt->release(tr_blob_data(ob));
  if (!rc) rc = run->io->write(run->io->ctx, g, ob, &err);
  if (!rc && run->twin && run->twin[ti] >= 0) rc = s_twin_write(run, oext, ob, run->twin[ti], &err);
  tr_blob_unref(&ob);
  if (rc && pt && !err.code) return rc;
  return rc ? s_fail(run, &err) : TR_OK;
}

/* With node.mirror: the output chunks lins[0..*n) (all of them when lins
** is NULL) less those made as the transposes of their mirrors
** (ta_gemm_mirror) where the mirror is among them, into *tasks, and for
** each the chunk its task also makes so, into *twin (-1: none).  TR_OK
** with *tasks NULL when no chunk is mirrored. */
static int s_twins(const ta_node *n, const tr_tensor *om, const int64_t *lins, int64_t *n_io,
                   int64_t **tasks, int64_t **twin) {
  int64_t nchunks = tr_nchunks(om), nl = *n_io, k = 0;
  *tasks = *twin = NULL;
  int64_t *at = calloc((size_t)nchunks + 1, sizeof *at); /* per chunk: its task + 1, 0: none */
  int64_t *mir = calloc((size_t)nl + 1, sizeof *mir);    /* per listed chunk: its mirror, -1 */
  if (!at || !mir) {
    free(at);
    free(mir);
    return TR_ENOMEM;
  }
  for (int64_t i = 0; i < nl; i++) at[lins ? lins[i] : i] = i + 1;
  for (int64_t i = 0; i < nl; i++) {
    int64_t lkey[TK_MAX_LABELS] = {0}, mkey[TK_MAX_LABELS], lin = lins ? lins[i] : i;
    tr_key_from_linear(om, lin, lkey);
    mir[i] = ta_gemm_mirror(n, lkey, mkey) ? tr_key_linear(om, mkey) : -1;
    if (mir[i] >= 0 && !at[mir[i]]) mir[i] = -1; /* its mirror is made elsewhere */
    if (mir[i] >= 0) k++;
  }
  int rc = TR_OK;
  if (k) {
    *tasks = malloc(sizeof **tasks * (size_t)(nl - k));
    *twin = malloc(sizeof **twin * (size_t)(nl - k));
    if (!*tasks || !*twin) rc = TR_ENOMEM;
    for (int64_t i = 0, t = 0; !rc && i < nl; i++) {
      if (mir[i] >= 0) continue;
      at[lins ? lins[i] : i] = t + 1; /* now its task */
      (*tasks)[t] = lins ? lins[i] : i;
      (*twin)[t++] = -1;
    }
    for (int64_t i = 0; !rc && i < nl; i++)
      if (mir[i] >= 0) (*twin)[at[mir[i]] - 1] = lins ? lins[i] : i;
    if (rc) {
      free(*tasks);
      free(*twin);
      *tasks = *twin = NULL;
    } else {
      *n_io = nl - k;
    }
  }
  free(at);
  free(mir);
  return rc;
}

int tx_node_run(const tk_backend *kt, int threads, size_t cache_budget, const ta_node *n,
                const tr_tensor *const *in_meta, const tr_tensor *out_meta,
                const tx_chunk_io *io, const int64_t *lins, int64_t nlins,
                const tr_cancel *cancel, tr_err *err) {
  s_run run;
  memset(&run, 0, sizeof run);
  run.kt = kt;
  run.node = n;
  for (int i = 0; i < n->ninputs; i++) run.in_meta[i] = in_meta[i];
  run.out_meta = out_meta;
  run.io = io;
  run.lins = lins;
  run.cancel = cancel;
  run.dt = out_meta->dtype;
  run.esz = tr_dtype_size(run.dt);
  run.ngroups = lins ? nlins : tr_nchunks(out_meta);
  run.ntuples = 1;
  for (int l = n->nout; l < n->nlabels; l++) run.ntuples *= (n->size[l] + n->chunk[l] - 1) / n->chunk[l];
  for (int l = 0; l < n->nlabels; l++) run.piece[l] = ta_label_piece(n, in_meta, l);
  if (!ta_gram_labels(n, &run.li, &run.lj)) run.li = run.lj = -1;
  if (run.ngroups == 0) return TR_OK;
  int64_t *tasks = NULL, *twin = NULL;
  if (n->mirror && s_twins(n, out_meta, lins, &run.ngroups, &tasks, &twin))
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  if (tasks) run.lins = tasks, run.twin = twin;
  s_cache *cache = calloc(1, sizeof *cache);
  if (!cache) {
    free(tasks);
    free(twin);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  pthread_mutex_init(&cache->mu, NULL);
  pthread_cond_init(&cache->cv, NULL);
  cache->budget = cache_budget;
  cache->kt = kt;
  run.cache = cache;
  pthread_mutex_init(&run.mu, NULL);
  /* Parallel over output chunks; BLAS gets the cores only when there are
  ** fewer chunks than threads.  Chunks that do not fill the threads
  ** evenly leave a tail, made in pieces by every thread. */
  int inner = threads == 0;
  run.nwhole = run.ngroups;
  run.tailp = 1;
  if (inner) {
    threads = 1;
  } else if (run.ngroups >= threads) {
    tk_set_blas_threads(1);
    int64_t tail = run.ngroups % threads;
    int p = tail ? ta_tail_pieces(n, threads) : 0; /* (never a Gram product's: no twins) */
    if (p > 1 && (run.part = calloc((size_t)tail, sizeof *run.part))) {
      run.nwhole = run.ngroups - tail;
      run.tailp = p;
      for (int64_t k = 0; k < tail; k++) run.part[k].left = p;
    }
  } else {
    tk_set_blas_threads(threads / (int)run.ngroups);
    threads = (int)run.ngroups;
  }
  int64_t ntasks = run.nwhole + (run.ngroups - run.nwhole) * run.tailp;
  int rc = tr_parallel_for(threads, ntasks, s_node_task, &run, cancel);
  if (rc && run.err.code) { /* the first failure (a piece of the tail may end before the
                             ** piece whose failure stopped it reports it) */
    *err = run.err;
    rc = err->code;
  } else if (rc) {
    tr_seterr(err, rc, rc == TR_EINTR ? "interrupted" : "statement failed (status %d)", rc);
  }
  for (int64_t k = 0; run.part && k < run.ngroups - run.nwhole; k++) /* pieces never run (cancelled) */
    if (run.part[k].ob) {
      run.kt->release(tr_blob_data(run.part[k].ob));
      tr_blob_unref(&run.part[k].ob);
    }
  free(run.part);
  pthread_mutex_destroy(&run.mu);
  s_cache_free(cache);
  free(tasks);
  free(twin);
  if (!inner) {
    tk_set_blas_threads(1);
    kt->release(NULL); /* the plan's chunks leave the device */
  }
  return rc;
}
