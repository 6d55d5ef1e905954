/*
** optimize/moves.c - the exact moves of a node under a choice: where
** each join tuple runs, which chunks must reach which site, the partials
** shuffled, and the floats all of it moves; and from the same walk, what
** every site does (the components of the cost in seconds, layout/'s
** tl_cost).  A node runs in phases: the join, then for a 2-phase
** aggregation the shuffle and combine of its partials, which start only
** when the last join task is done.  Each phase takes as long as its
** busiest site, the node the sum of its phases: a combine that lands on
** one site adds all its time to the slowest join, however idle the
** other sites are meanwhile (EinDecomp's aggregation cost, section 7,
** charged where it is paid).
*/
#include "config.h"
#include "optimize/optimize_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int to_hash_site(const ta_node *n, unsigned labels, const int64_t *lkey, int m) {
  int64_t h = 0;
  for (int l = 0; l < n->nlabels; l++)
    if (labels & (1u << l)) h = h * ((n->size[l] + n->chunk[l] - 1) / n->chunk[l]) + lkey[l];
  return (int)(h % m);
}

void to_moves_free(to_moves *mv) {
  for (int i = 0; i < TK_MAX_INPUTS; i++) free(mv->need[i]);
  free(mv->osites);
  free(mv->owner);
  memset(mv, 0, sizeof *mv);
}

void to_placed_free(to_placed *pl) {
  free(pl->has);
  free(pl->prim);
  memset(pl, 0, sizeof *pl);
}

static int64_t s_chunk_floats(const tr_tensor *t, int64_t lin) {
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
  tr_key_from_linear(t, lin, key);
  return tr_chunk_extent(t, key, ext);
}

/* What to_moves_compute's steps share. */
typedef struct s_mc {
  const ta_plan *p;                /* plan */
  const ta_node *n;                /* the node */
  const to_choice *c;              /* the choice */
  const to_env *env;               /* sites, replication, threads, weights */
  int m;                           /* sites */
  to_placed *pl;                   /* placement of every relation */
  to_moves *mv;                    /* the moves being computed */
  uint8_t *touched[TK_MAX_INPUTS]; /* per operand chunk: a tuple reads it */
  int64_t piece[TK_MAX_LABELS];    /* per label: the executor's pieces
                                      (ta_label_piece), 0 */
  tl_cost site[TO_MAX_SITES];      /* what each site does in the join phase
                                      (not yet per core) */
  tl_cost comb[TO_MAX_SITES];      /* and in the combine phase: the shuffle
                                      of partials, their combine and the
                                      output written */
  double outs[TO_MAX_SITES];       /* output chunks each site computes */
  tr_err *err;                     /* where failures go */
  const int8_t *assign;            /* per output chunk: the site all its
                                      tuples run on (to_moves_assigned), or NULL */
  const int8_t *hold;              /* per chunk of the drive operand: the
                                      holder its tuples run on (NULL: its
                                      primary) */
  int64_t cur_out;                 /* the output chunk whose tuples are walked */
  int cur_site;                    /* the site its tuples run on, -1: as
                                      the choice places them */
} s_mc;

/* The site join tuple lkey runs on, or -1 (err set). */
static int s_tuple_site(s_mc *M, const int64_t *lkey) {
  const to_choice *c = M->c;
  if (M->assign) return M->assign[M->cur_out];
  if (M->cur_site >= 0) return M->cur_site;
  if (c->drive < 0 || c->mv[c->drive] != TO_MV_KEEP) return to_hash_site(M->n, c->part, lkey, M->m);
  const ta_operand *o = &M->n->in[c->drive];
  const tr_tensor *it = &M->p->rels[o->rel].meta;
  int64_t key[TR_MAX_RANK];
  /* the drive's chunk holding the tuple's box (the box may be a piece of
  ** it: a stored operand cut into the node's chunks where it is) */
  for (int d = 0; d < o->rank; d++) key[d] = lkey[o->label[d]] * M->n->chunk[o->label[d]] / it->chunk[d];
  int64_t cl = tr_key_linear(it, key);
  int s = M->hold ? M->hold[cl] : M->pl[o->rel].prim[cl];
  if (s < 0) {
    char ks[200];
    size_t w = 0;
    ks[0] = '\0';
    for (int d = 0; d < o->rank && w < sizeof ks; d++)
      w += (size_t)snprintf(ks + w, sizeof ks - w, "%s%lld", d ? "," : "", (long long)key[d]);
    tr_seterr(M->err, TR_ECORRUPT, "cannot read tensor %s chunk [%s]: no live replica holds it",
              it->name, ks);
  }
  return s;
}

/* The elements an elementwise join's kernel copies through tiles for the
** tuple of extents box: the operands (out included) that hold the label
** the kernel runs along but not as their last, contiguous dimension (a
** transpose; kernels/fast.c).  That label is taken to be the one most
** operands are contiguous along, the later on a tie; the kernel also
** weighs each label by its extent (up to a block) and counts the operands
** it broadcasts over, so on uneven chunks it may choose otherwise. */
static double s_across(const ta_node *n, const int64_t *box) {
  int count[TK_MAX_LABELS] = {0}, inner = -1;
  if (n->nout > 0) count[n->nout - 1]++;
  for (int i = 0; i < n->ninputs; i++)
    if (n->in[i].rank > 0) count[n->in[i].label[n->in[i].rank - 1]]++;
  for (int l = 0; l < n->nlabels; l++)
    if (inner < 0 || count[l] >= count[inner]) inner = l;
  double el = 0, out = 1;
  for (int l = 0; l < n->nout; l++) out *= (double)box[l];
  if (n->nout > 0 && n->nout - 1 != inner) el += out;
  for (int i = 0; i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    double e = 1;
    int has = 0;
    for (int d = 0; d < o->rank; d++) {
      e *= (double)box[o->label[d]];
      has |= o->label[d] == inner;
    }
    if (has && o->label[o->rank - 1] != inner) el += e;
  }
  return el;
}

/* The stored chunks of operand i that the box of tuple lkey covers (keys
** first..last: several when it is re-chunked). */
static void s_box_chunks(const s_mc *M, int i, const int64_t *lkey, int64_t *first, int64_t *last) {
  const ta_operand *o = &M->n->in[i];
  const tr_tensor *it = &M->p->rels[o->rel].meta;
  int64_t lo[TR_MAX_RANK], ext[TR_MAX_RANK];
  for (int d = 0; d < o->rank; d++) {
    int64_t cz = M->n->chunk[o->label[d]];
    lo[d] = lkey[o->label[d]] * cz;
    ext[d] = (lo[d] + cz < it->shape[d] ? lo[d] + cz : it->shape[d]) - lo[d];
  }
  tr_chunks_under(it, lo, ext, first, last);
}

/* Join tuple lkey runs on site s: count its work there, and mark the
** chunks of each operand it reads as needed at s. */
static int s_tuple(s_mc *M, const int64_t *lkey, int s) {
  const ta_node *n = M->n;
  double wk = 1;
  int64_t box[TK_MAX_LABELS];
  for (int l = 0; l < n->nlabels; l++) {
    int64_t rest = n->size[l] - lkey[l] * n->chunk[l];
    box[l] = n->chunk[l] < rest ? n->chunk[l] : rest;
    wk *= (double)box[l];
  }
  /* gemm: a multiply and an add per term; the other kernels evaluate the
  ** join's scalar program per term (and fold it, for an aggregation) */
  if (n->gemm) {
    /* and each call packs its factors' blocks (once a piece along a label
    ** the other factor lacks) and reads and writes its output block: a
    ** gemm thin in any dimension is bound by those, not by its flops */
    double out = 1;
    for (int l = 0; l < n->nout; l++) out *= (double)box[l];
    M->site[s].c[TL_C_GEMM] += 2 * wk * ta_gemm_share(n, lkey);
    M->site[s].c[TL_C_PACK] += ta_gemm_packed(n, box, M->piece);
    M->site[s].c[TL_C_ELEMWISE] += out;
  } else if (n->agg != TK_AGG_NONE) M->site[s].c[TL_C_CONTRACT] += wk * (n->prog.n + 1);
  else M->site[s].c[TL_C_ELEMWISE] += wk * n->prog.n + s_across(n, box);
  M->site[s].c[TL_C_TASKS] += 1;
  for (int i = 0; i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    const tr_tensor *it = &M->p->rels[o->rel].meta;
    int64_t first[TR_MAX_RANK], last[TR_MAX_RANK], sk[TR_MAX_RANK];
    s_box_chunks(M, i, lkey, first, last);
    /* a box over several stored chunks is copied together, unless they
    ** follow one another along labels the executor runs in pieces
    ** (ta_label_piece); a box inside one is read where it is */
    int copied = 0;
    for (int d = 0; d < o->rank; d++) copied |= first[d] != last[d] && !M->piece[o->label[d]];
    if (copied) {
      double el = 1;
      for (int d = 0; d < o->rank; d++) el *= (double)box[o->label[d]];
      M->site[s].c[TL_C_ELEMWISE] += el;
    }
    memcpy(sk, first, sizeof sk);
    for (;;) {
      int64_t cl = tr_key_linear(it, sk);
      M->touched[i][cl] = 1;
      if (M->c->mv[i] != TO_MV_BCAST) {
        if (M->c->mv[i] == TO_MV_KEEP && !(M->pl[o->rel].has[cl] & (1ull << s)))
          return tr_seterr(M->err, TR_EINVAL, "%s and the drive operand are not co-partitioned",
                           it->name);
        M->mv->need[i][cl] |= 1ull << s;
      }
      if (!tr_key_next(o->rank, sk, first, last)) break;
    }
  }
  return TR_OK;
}

/* Whether output chunk lin is made as the transpose of its mirror,
** chunk *mlin (ta_gemm_mirror), under moves that mirror. */
static int s_mirrored(const s_mc *M, int64_t lin, int64_t *mlin) {
  const ta_node *n = M->n;
  const tr_tensor *om = &M->p->rels[n->out].meta;
  int64_t lkey[TK_MAX_LABELS] = {0}, mkey[TK_MAX_LABELS];
  if (!M->mv->mirror) return 0;
  tr_key_from_linear(om, lin, lkey);
  if (!ta_gemm_mirror(n, lkey, mkey)) return 0;
  *mlin = tr_key_linear(om, mkey);
  return 1;
}

/* The sites every tuple of the output block at lkey (its summed labels'
** keys 0) may run on: those holding the chunks of every operand kept in
** place that they read (the drive's, a co-partitioned one's). */
static uint64_t s_block_sites(const s_mc *M, const int64_t *lkey, int64_t ntuples) {
  const ta_node *n = M->n;
  uint64_t may = M->m == 64 ? ~0ull : (1ull << M->m) - 1;
  int64_t tk[TK_MAX_LABELS], first[TR_MAX_RANK], last[TR_MAX_RANK], sk[TR_MAX_RANK];
  memcpy(tk, lkey, sizeof tk);
  for (int64_t t = 0; t < ntuples; t++, ta_next_tuple(n, tk))
    for (int i = 0; i < n->ninputs; i++) {
      const ta_operand *o = &n->in[i];
      if (M->c->mv[i] != TO_MV_KEEP) continue;
      s_box_chunks(M, i, tk, first, last);
      memcpy(sk, first, sizeof sk);
      do
        may &= M->pl[o->rel].has[tr_key_linear(&M->p->rels[o->rel].meta, sk)];
      while (tr_key_next(o->rank, sk, first, last));
    }
  return may;
}

/* Whether every tuple of each block below the diagonal runs on the site
** its mirror's tuple of the same summed keys runs on: then each site's
** partial of the block is the transpose of its partial of the mirror. */
static int s_partials_alike(s_mc *M, int64_t ntuples) {
  const ta_node *n = M->n;
  const tr_tensor *om = &M->p->rels[n->out].meta;
  int64_t mlin;
  for (int64_t lin = 0; lin < tr_nchunks(om); lin++) {
    int64_t lkey[TK_MAX_LABELS] = {0}, mkey[TK_MAX_LABELS];
    if (!s_mirrored(M, lin, &mlin)) continue;
    tr_key_from_linear(om, lin, lkey);
    ta_gemm_mirror(n, lkey, mkey);
    for (int64_t t = 0; t < ntuples; t++, ta_next_tuple(n, lkey), ta_next_tuple(n, mkey)) {
      int s = s_tuple_site(M, lkey);
      if (s < 0 || s != s_tuple_site(M, mkey)) return 0;
    }
  }
  return 1;
}

/* Every join tuple of the node, output chunk by output chunk; then the
** chunks made as their mirrors' transposes, each where its mirror is: a
** copy of the block (of each site's partial of it, in a 2-phase plan
** whose tuples of a block and its mirror run alike) instead of its gemm.
** Not in a schedule's placement, which places chunk by chunk. */
static int s_tuples(s_mc *M) {
  const ta_node *n = M->n;
  const tr_tensor *om = &M->p->rels[n->out].meta;
  int64_t nout = tr_nchunks(om), ntuples = 1, mlin;
  for (int l = n->nout; l < n->nlabels; l++) ntuples *= (n->size[l] + n->chunk[l] - 1) / n->chunk[l];
  int li, lj; /* a node that is no Gram product mirrors nothing: s_mirrored stops at once */
  M->mv->mirror = !M->assign && ta_gram_labels(n, &li, &lj);
  M->cur_site = -1;
  if (M->c->twophase && !s_partials_alike(M, ntuples)) M->mv->mirror = 0;
  /* Mirrored blocks placed by a hash or by where their drive chunks'
  ** primaries are would leave the sites uneven (on 2 sites, G's 2 x 2
  ** blocks hash (0,0) to one and (0,1), its mirror (1,0) and (1,1) to the
  ** other: 1.5 blocks' gemm against 0.5, measured 0.64 s against 0.31):
  ** each block, with its mirror, goes instead to the site with the least
  ** gemm so far (a diagonal block is half, syrk's share) among those it
  ** may run on: those holding every chunk it reads in place (any, when
  ** it reads none in place).  A 2-phase plan's sites stay its own. */
  int lpt = 0;
  double load[TO_MAX_SITES] = {0};
  for (int64_t lin = 0; lin < nout && !M->c->twophase; lin++) lpt |= s_mirrored(M, lin, &mlin);
  for (int64_t lin = 0; lin < nout; lin++) {
    int64_t okey[TR_MAX_RANK], lkey[TK_MAX_LABELS];
    if (s_mirrored(M, lin, &mlin)) continue;
    tr_key_from_linear(om, lin, okey);
    for (int l = 0; l < n->nlabels; l++) lkey[l] = l < n->nout ? okey[l] : 0;
    M->cur_out = lin;
    M->cur_site = -1;
    uint64_t may = lpt ? s_block_sites(M, lkey, ntuples) : 0;
    for (int u = 0; u < M->m; u++)
      if (may >> u & 1 && (M->cur_site < 0 || load[u] < load[M->cur_site])) M->cur_site = u;
    if (M->cur_site >= 0) load[M->cur_site] += ta_gemm_share(n, lkey) * (double)s_chunk_floats(om, lin);
    for (int64_t t = 0; t < ntuples; t++) {
      int s = s_tuple_site(M, lkey), rc;
      if (s < 0) return M->err->code;
      M->mv->osites[lin] |= 1ull << s;
      if ((rc = s_tuple(M, lkey, s))) return rc;
      ta_next_tuple(n, lkey);
    }
  }
  int mirrored = 0;
  for (int64_t lin = 0; lin < nout; lin++)
    if (s_mirrored(M, lin, &mlin)) {
      M->mv->osites[lin] = M->mv->osites[mlin];
      for (int u = 0; u < M->m; u++)
        if (M->mv->osites[lin] >> u & 1) M->site[u].c[TL_C_ELEMWISE] += (double)s_chunk_floats(om, lin);
      mirrored = 1;
    }
  M->mv->mirror = mirrored;
  return TR_OK;
}

/* Broadcasts (every chunk the join reads, all of them if the filter runs
** after the move, to every site that runs tuples: a site with none has no
** use for a copy), and the floats each operand moves to sites that do
** not hold its chunks, sent by the holder reads come from. */
static void s_input_floats(s_mc *M) {
  const ta_node *n = M->n;
  to_moves *mv = M->mv;
  uint64_t all = 0;
  for (int64_t lin = 0; lin < tr_nchunks(&M->p->rels[n->out].meta); lin++) all |= mv->osites[lin];
  for (int i = 0; i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    const tr_tensor *it = &M->p->rels[o->rel].meta;
    const to_placed *pi = &M->pl[o->rel];
    for (int64_t l = 0; M->c->mv[i] == TO_MV_BCAST && l < pi->n; l++)
      if (M->touched[i][l] || M->c->late[i]) mv->need[i][l] = all;
    for (int64_t l = 0; l < pi->n; l++) {
      uint64_t to = mv->need[i][l] & ~pi->has[l];
      /* a chunk two operands read (X^T X) goes to a site once for both */
      for (int j = 0; j < i; j++)
        if (n->in[j].rel == o->rel) to &= ~mv->need[j][l];
      if (!to) continue;
      int64_t fl = s_chunk_floats(it, l);
      mv->in_floats[i] += oi_pop(to) * fl;
      for (int u = 0; u < M->m; u++)
        if (to >> u & 1) M->site[u].c[TL_C_NET] += (double)fl;
      if (pi->prim[l] >= 0) M->site[pi->prim[l]].c[TL_C_NET] += (double)(oi_pop(to) * fl);
    }
    mv->total += mv->in_floats[i];
  }
}

/* The owner of each output chunk, and the partials shuffled to it. */
static int s_owners(s_mc *M) {
  const ta_node *n = M->n;
  const tr_tensor *om = &M->p->rels[n->out].meta;
  to_moves *mv = M->mv;
  int64_t nout = tr_nchunks(om);
  for (int64_t lin = 0; lin < nout; lin++) {
    int own;
    if (M->c->twophase) {
      int64_t okey[TR_MAX_RANK], lkey[TK_MAX_LABELS] = {0};
      tr_key_from_linear(om, lin, okey);
      for (int l = 0; l < n->nout; l++) lkey[l] = okey[l];
      own = to_hash_site(n, M->c->agg_part, lkey, M->m);
      int64_t fl = s_chunk_floats(om, lin);
      uint64_t from = mv->osites[lin] & ~(1ull << own);
      mv->partial_floats += oi_pop(from) * fl;
      /* each site writes its partial; the owner receives the others and
      ** combines them all in one more kernel call, after the joins */
      for (int u = 0; u < M->m; u++)
        if (mv->osites[lin] >> u & 1) {
          M->site[u].c[TL_C_WRITE] += (double)fl;
          M->site[u].c[TL_C_CHUNKS] += 1;
          if (from >> u & 1) M->comb[u].c[TL_C_NET] += (double)fl;
        }
      M->comb[own].c[TL_C_NET] += (double)(oi_pop(from) * fl);
      M->comb[own].c[TL_C_ELEMWISE] += (double)(oi_pop(mv->osites[lin]) * fl);
      M->comb[own].c[TL_C_TASKS] += 1;
    } else {
      if (oi_pop(mv->osites[lin]) != 1)
        return tr_seterr(M->err, TR_EINVAL, "output chunk %lld would be computed on %d sites",
                         (long long)lin, oi_pop(mv->osites[lin]));
      own = __builtin_ctzll(mv->osites[lin]);
    }
    mv->owner[lin] = (int8_t)own;
    int64_t mlin;
    if (M->c->twophase || !s_mirrored(M, lin, &mlin)) M->outs[own] += 1; /* else made in its mirror's task */
  }
  mv->total += mv->partial_floats;
  return TR_OK;
}

/* A site's compute as the executor runs it (exec/exec.c tx_node_run):
** its output chunks are tasks that its threads take in turn, one thread
** each, so n chunks of equal work on t threads keep t threads busy for
** floor(n / t) chunks' time and then n mod t threads for one chunk more;
** with fewer chunks than threads each chunk's gemm calls get t / n BLAS
** threads (integer division) and its other kernels one; where the node
** cuts a tail in pieces (ta_tail_pieces), the n mod t chunks left after
** the full rounds keep all t threads busy.  A segment is k threads busy
** for `len` seconds of work each at full speed. */
typedef struct s_seg {
  double k, len;
} s_seg;

enum { S_SEGS = 2 };

static int s_segments(double gemm, double other, double n, double thr, int tailp, s_seg *seg) {
  int ns = 0;
  if (gemm + other <= 0) return 0;
  if (n < 1) { /* no chunk of its own (a 2-phase join's partials): spread */
    if (gemm > 0) seg[ns++] = (s_seg){thr, gemm / thr};
    if (other > 0) seg[ns++] = (s_seg){1, other};
  } else if (n <= thr) {
    double b = floor(thr / n);
    if (gemm > 0) seg[ns++] = (s_seg){n * b, gemm / (n * b)};
    if (other > 0) seg[ns++] = (s_seg){n, other / n};
  } else {
    double w = (gemm + other) / n, full = floor(n / thr), rest = n - full * thr;
    if (rest > 0 && tailp > 1) {
      seg[ns++] = (s_seg){thr, (full + rest / thr) * w};
    } else {
      seg[ns++] = (s_seg){thr, full * w};
      if (rest > 0) seg[ns++] = (s_seg){rest, w};
    }
  }
  return ns;
}

/* When the last site finishes its segments, sites sharing `cores` cores
** (0: each its own).  Each local worker is a session of its own
** (dist/cluster.c), and Linux's autogroup scheduling shares the cores
** equally between busy sessions, not threads: each busy site gets an
** equal share, at most a core a busy thread, and what a site cannot use
** goes to the others.  So when the lighter sites or a site's last chunks
** leave threads idle the rest speed up, and a core no thread can use is
** lost.  With 4 local workers on 2 cores, work of 2, 1, 1 and 0 chunks
** takes 2.5 chunks' time where 1, 1, 1, 1 takes 2 (measured 0.093 s
** against 0.077 s for a product stored cut on its summed label in 4
** pieces on 3 of 4 workers); on 2 workers of 2 threads, a 3072^3 product
** in 9 tiles takes 4.5 tiles' time placed 6 and 3, and placed 5 and 4
** when the fifth is made in pieces (ta_tail_pieces; whole, alone on a
** core, 5). */
static double s_finish(s_seg seg[][S_SEGS], const int *nseg, int m, double cores) {
  int at[TO_MAX_SITES] = {0};
  double t = 0;
  for (;;) {
    double speed[TO_MAX_SITES], step = -1, left = cores;
    int order[TO_MAX_SITES], n = 0;
    for (int u = 0; u < m; u++)
      if (at[u] < nseg[u]) order[n++] = u;
    if (n == 0) return t;
    for (int i = 1; i < n; i++) /* fewest busy threads first */
      for (int j = i; j > 0 && seg[order[j]][at[order[j]]].k < seg[order[j - 1]][at[order[j - 1]]].k; j--) {
        int x = order[j];
        order[j] = order[j - 1];
        order[j - 1] = x;
      }
    for (int i = 0; i < n; i++) {
      int u = order[i];
      double k = seg[u][at[u]].k, share = left / (n - i);
      if (cores <= 0 || share > k) share = k;
      left -= share;
      speed[u] = share / k;
      double dt = seg[u][at[u]].len / speed[u];
      if (step < 0 || dt < step) step = dt;
    }
    t += step;
    for (int i = 0; i < n; i++) {
      int u = order[i];
      if ((seg[u][at[u]].len -= step * speed[u]) <= 1e-12 * t) at[u]++;
    }
  }
}

/* The busiest site of one phase (per-site amounts in c[0..m), made per
** core here; joins: whether it is the joins' phase, whose tails may be
** cut in pieces, ta_tail_pieces, where combines run whole): its
** components into *out, its site the return value. */
static int s_phase(s_mc *M, tl_cost *c, int joins, tl_cost *out) {
  double best = -1, sec[TO_MAX_SITES] = {0}, all[TL_NCOST] = {0}, total = 0;
  double esz = (double)tr_dtype_size(M->p->rels[M->n->out].meta.dtype);
  double thr = M->env->threads > 0 ? M->env->threads : 1;
  int tailp = joins ? ta_tail_pieces(M->n, (int)thr) : 0;
  const tl_weights *w = &M->env->w;
  s_seg seg[TO_MAX_SITES][S_SEGS];
  int nseg[TO_MAX_SITES], busiest = 0;
  for (int u = 0; u < M->m; u++) {
    double gemm = w->w[TL_C_GEMM] * c[u].c[TL_C_GEMM] + w->w[TL_C_PACK] * c[u].c[TL_C_PACK];
    double other = w->w[TL_C_CONTRACT] * c[u].c[TL_C_CONTRACT] +
                   w->w[TL_C_ELEMWISE] * c[u].c[TL_C_ELEMWISE];
    nseg[u] = s_segments(gemm, other, M->outs[u], thr, tailp, seg[u]);
    /* per core, as if the work spread over the threads it can use */
    double width = M->outs[u] < thr ? (M->outs[u] < 1 ? 1 : M->outs[u]) : thr;
    c[u].c[TL_C_GEMM] /= thr;
    c[u].c[TL_C_PACK] /= thr;
    c[u].c[TL_C_CONTRACT] /= width;
    c[u].c[TL_C_ELEMWISE] /= width;
    c[u].c[TL_C_WRITE] *= esz;
    for (int k = TL_C_GEMM; k <= TL_C_ELEMWISE; k++) {
      all[k] += c[u].c[k];
      sec[u] += w->w[k] * c[u].c[k];
    }
    total += sec[u];
    double t = tl_seconds(w, &c[u]);
    if (t > best) {
      best = t;
      busiest = u;
      *out = c[u];
    }
  }
  /* the busiest site's compute stretched to the time the sites' threads
  ** take, chunk by chunk, on the cores they share (or each on its own) */
  double cores = M->env->cores > 0 && M->env->cores < M->m * thr ? M->env->cores : 0;
  double t = s_finish(seg, nseg, M->m, cores), own = sec[busiest];
  /* t > own: some site computes, so total > 0; a busiest site with no
  ** compute of its own takes the phase's mix */
  for (int k = TL_C_GEMM; k <= TL_C_ELEMWISE && t > own; k++)
    out->c[k] = own > 0 ? out->c[k] * t / own : all[k] * t / total;
  return busiest;
}

/* The output written where it is made and at its replicas (bytes, and
** each chunk made or received there: a map into 512 chunks of 64 rows
** took 0.044 s on 2 local workers where the same map into 4 took 0.012 s,
** some 60 us a chunk, against 9 us for a kernel call),
** after the combine when there is one; then each phase's busiest site,
** and the node's round trips (its operand moves, its tasks, the
** partials' shuffle and combine, the commit of an output).  The executor
** sends the moves, the tasks and the combines in one round trip, and the
** tasks push the partials (dist/run.c), but each step still waits for
** the one before it, now worker to worker, and counting fewer phases made
** the optimizer pick
** 2-phase plans that ran slower (a tiny product on 4 local workers: 7.2
** ms against 5.1 ms for the 1-phase plan it chose before; BENCHMARKS.md,
** *Moves sent with their tasks*).  mv->cost is
** the sum of the phases' busiest sites, so that it prices to
** mv->seconds.  Elements count once per instruction of the program
** evaluated on them. */
static void s_seconds(s_mc *M) {
  const ta_node *n = M->n;
  const tr_tensor *om = &M->p->rels[n->out].meta;
  to_moves *mv = M->mv;
  int out = M->p->rels[n->out].kind == TA_REL_OUTPUT, r = out ? M->env->repl : 1;
  tl_cost *last = M->c->twophase ? M->comb : M->site, join, comb;
  if (r > M->m) r = M->m;
  for (int64_t lin = 0; lin < tr_nchunks(om); lin++) {
    double fl = (double)s_chunk_floats(om, lin);
    last[mv->owner[lin]].c[TL_C_ELEMWISE] += fl * n->post.n; /* the fused transform */
    for (int j = 0; j < r; j++) {
      int u = (mv->owner[lin] + j) % M->m;
      last[u].c[TL_C_WRITE] += fl;
      last[u].c[TL_C_CHUNKS] += 1; /* a blob, its checksum, a message, a row */
      if (j) last[u].c[TL_C_NET] += fl, last[mv->owner[lin]].c[TL_C_NET] += fl;
    }
  }
  memset(&comb, 0, sizeof comb);
  mv->busiest = s_phase(M, M->site, 1, &join);
  if (M->c->twophase) s_phase(M, M->comb, 0, &comb);
  for (int k = 0; k < TL_NCOST; k++) mv->cost.c[k] = join.c[k] + comb.c[k];
  int moved = 0;
  for (int i = 0; i < n->ninputs; i++) moved |= mv->in_floats[i] > 0;
  /* Sites busy in the join beyond the cores they share each add a round
  ** trip: a phase's messages (partials pushed, answers) wait for a core
  ** the other sites compute on.  The dense layer in 32 tiles on 4 local
  ** workers sharing 2 cores took 8.8 ms beyond its tasks on 4 busy
  ** workers and 2.0 ms on 2, where the weights saw 2, 2 as fast as 1, 1,
  ** 1, 1 and the 3 partials shuffled instead of 1 as all the difference. */
  int busy = 0;
  for (int u = 0; u < M->m; u++) busy += M->site[u].c[TL_C_TASKS] > 0;
  int excess = M->env->cores > 0 && busy > M->env->cores ? busy - M->env->cores : 0;
  mv->cost.c[TL_C_PHASES] = 1 + moved + 2 * M->c->twophase + out + excess;
  mv->seconds = tl_seconds(&M->env->w, &mv->cost);
}

/* The placement the node leaves: copies sent stay for the rest of the run
** (later nodes read them where they are: the executor sends a chunk to a
** site once), and the output is on its owners (and their replicas). */
static int s_leave(const ta_plan *p, const ta_node *n, to_placed *pl, const to_moves *mv, int m, int repl) {
  int64_t nout = tr_nchunks(&p->rels[n->out].meta);
  for (int i = 0; i < n->ninputs; i++) {
    to_placed *pi = &pl[n->in[i].rel];
    for (int64_t l = 0; l < pi->n; l++) pi->has[l] |= mv->need[i][l];
  }
  to_placed *po = &pl[n->out];
  to_placed_free(po);
  po->has = calloc((size_t)nout + 1, sizeof *po->has);
  po->prim = calloc((size_t)nout + 1, 1);
  if (!po->has || !po->prim) return TR_ENOMEM;
  po->n = nout;
  int r = p->rels[n->out].kind == TA_REL_OUTPUT ? repl : 1;
  for (int64_t lin = 0; lin < nout; lin++) {
    po->prim[lin] = mv->owner[lin];
    for (int j = 0; j < r; j++) po->has[lin] |= 1ull << ((mv->owner[lin] + j) % m);
  }
  return TR_OK;
}

/* The moves of node k with its tuples on the sites assign or hold says
** (both NULL: where the choice puts them). */
static int s_moves_at(const ta_plan *p, int k, const to_choice *c, const int8_t *assign, const int8_t *hold,
                      const to_env *env, to_placed *pl, to_moves *mv, int out_pl, tr_err *err) {
  const ta_node *n = &p->nodes[k];
  int64_t nout = tr_nchunks(&p->rels[n->out].meta);
  int m = env->m;
  int rc = TR_OK;
  s_mc M;
  memset(&M, 0, sizeof M);
  memset(mv, 0, sizeof *mv);
  M.p = p;
  M.n = n;
  M.c = c;
  M.env = env;
  M.m = m;
  M.pl = pl;
  M.mv = mv;
  M.err = err;
  M.assign = assign;
  M.hold = hold;
  const tr_tensor *in_meta[TK_MAX_INPUTS];
  for (int i = 0; i < n->ninputs; i++) in_meta[i] = &p->rels[n->in[i].rel].meta;
  for (int l = 0; l < n->nlabels; l++) M.piece[l] = ta_label_piece(n, in_meta, l);
  if (m < 1 || m > TO_MAX_SITES) return tr_seterr(err, TR_EINVAL, "cannot place on %d sites", m);
  mv->osites = calloc((size_t)nout + 1, sizeof *mv->osites);
  mv->owner = calloc((size_t)nout + 1, 1);
  if (!mv->osites || !mv->owner) rc = TR_ENOMEM;
  for (int i = 0; !rc && i < n->ninputs; i++) {
    int64_t cn = tr_nchunks(&p->rels[n->in[i].rel].meta);
    if (pl[n->in[i].rel].n != cn) {
      rc = tr_seterr(err, TR_EINVAL, "relation %s is not placed", p->rels[n->in[i].rel].meta.name);
      break;
    }
    mv->need[i] = calloc((size_t)cn + 1, sizeof *mv->need[i]);
    M.touched[i] = calloc((size_t)cn + 1, 1);
    if (!mv->need[i] || !M.touched[i]) rc = TR_ENOMEM;
  }
  if (!rc && c->drive >= 0) {
    const ta_operand *o = &n->in[c->drive];
    const tr_tensor *it = &p->rels[o->rel].meta;
    for (int d = 0; d < o->rank && !rc; d++)
      if (it->chunk[d] != n->chunk[o->label[d]] && !oi_cut_node(p, n))
        rc = tr_seterr(err, TR_EINVAL, "%s is re-chunked: it cannot drive the join", it->name);
  }
  if (!rc) rc = s_tuples(&M);
  if (!rc) s_input_floats(&M);
  if (!rc) rc = s_owners(&M);
  if (!rc) s_seconds(&M);
  if (!rc && out_pl) rc = s_leave(p, n, pl, mv, m, env->repl);
  for (int i = 0; i < TK_MAX_INPUTS; i++) free(M.touched[i]);
  if (rc == TR_ENOMEM) tr_seterr(err, rc, "out of memory");
  if (rc) to_moves_free(mv);
  return rc;
}

/* Each join tuple is a kernel call counted on the site it runs on
** (s_tuple), and the busiest site's phase is at least its calls' time, so
** the node takes at least the calls of the m-th of its tuples, and its
** one round trip.  A Gram product's blocks below the diagonal may be
** copies of their mirrors' (s_tuples): half its tuples then. */
double oi_moves_floor(const ta_node *n, const int64_t *chunk, const int64_t *const *in_chunk,
                      const to_env *env, double *walk) {
  double tuples = 1, steps = 1;
  int li, lj;
  for (int l = 0; l < n->nlabels; l++) tuples *= (double)((n->size[l] + chunk[l] - 1) / chunk[l]);
  for (int i = 0; i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    double box = 1; /* the operand chunks a tuple's box covers, at most */
    for (int d = 0; d < o->rank && in_chunk && in_chunk[i]; d++) {
      int l = o->label[d];
      double along = (double)((n->size[l] + in_chunk[i][d] - 1) / in_chunk[i][d]);
      double per = (double)(chunk[l] / in_chunk[i][d]) + 1;
      box *= per < along ? per : along;
    }
    steps += box;
  }
  *walk = tuples * steps;
  if (ta_gram_labels(n, &li, &lj)) tuples /= 2;
  double m = env->m > 0 ? env->m : 1;
  return env->w.w[TL_C_TASKS] * ceil(tuples / m) + env->w.w[TL_C_PHASES];
}

/* Placements of a drive's tuples tried: every combination of holders
** when there are at most S_HOLD_MAX (a drive of 4 chunks with 2 replicas
** each has 16).  Moving one chunk's tuples at a time would not find what
** pays: on 4 local workers sharing 2 cores, a row block's tuples moved to
** its replica leave 3 workers computing 2, 1 and 1 blocks, slower than
** 1, 1, 1, 1; two moved together leave 2 workers computing 2 each, as
** fast, with the other operand sent to 2 sites instead of 4.  With more
** combinations than that, on sites sharing fewer cores than there are
** sites (up to S_SET_SITES of them), the primaries are tried against one
** set of as many sites as cores that holds every chunk, the chunks spread
** evenly over their holders in it (s_hold_sets): the dense layer stored in 32 square tiles of its summed
** label on 4 local workers sharing 2 cores ran in 0.017-0.019 s with its
** tiles read at their primaries, 4 workers of 8 tiles, and in
** 0.014-0.016 s read on the 2 workers that hold every tile, 16 each
** (medians of 14, alternating). */
#define S_HOLD_MAX 16
#define S_SET_SITES 8

/* The moves of the drive's tuples held as `hold` says: kept in *best
** when cheaper than what it holds (best->owner NULL: nothing yet). */
static int s_try_hold(const ta_plan *p, int k, const to_choice *c, const to_env *env, to_placed *pl,
                      const int8_t *hold, to_moves *best, tr_err *err) {
  to_moves t;
  tr_err e2;
  if (!s_moves_at(p, k, c, NULL, hold, env, pl, &t, 0, &e2)) {
    if (!best->owner || t.seconds < best->seconds) {
      to_moves_free(best);
      *best = t;
    } else {
      to_moves_free(&t);
    }
  } else if (e2.code == TR_ENOMEM) {
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  return TR_OK;
}

/* Every combination of holders: chunk l's at[l]-th holder counting from
** its primary (mixed radix over the chunks with several holders). */
static int s_hold_combos(const ta_plan *p, int k, const to_choice *c, const to_env *env, to_placed *pl,
                         const to_placed *dp, uint64_t live, int64_t combos, int8_t *hold, to_moves *best,
                         tr_err *err) {
  int64_t *at = calloc((size_t)dp->n + 1, sizeof *at);
  int rc = at ? TR_OK : tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int64_t i = 0; !rc && i < combos; i++) {
    for (int64_t l = 0; l < dp->n; l++) {
      int s = dp->prim[l];
      uint64_t h = dp->has[l] & live;
      for (int64_t j = 0; s >= 0 && j < at[l]; j++) {
        do s = (s + 1) % env->m;
        while (!(h >> s & 1));
      }
      hold[l] = (int8_t)s;
    }
    rc = s_try_hold(p, k, c, env, pl, hold, best, err);
    for (int64_t l = 0; l < dp->n; l++) { /* next combination */
      int h = oi_pop(dp->has[l] & live);
      if (h < 2 || dp->prim[l] < 0) continue;
      if (++at[l] < h) break;
      at[l] = 0;
    }
  }
  free(at);
  return rc;
}

/* The chunks spread over the holders in `set`: in order, each on its
** holder there that has taken the fewest so far (its primary when that
** is one of them).  Returns the most any site took, and the chunks kept
** at their primaries in *kept; -1 when the set does not hold every chunk. */
static int64_t s_spread(const to_placed *dp, uint64_t live, uint64_t set, int m, int8_t *hold, int64_t *kept) {
  int64_t took[S_SET_SITES] = {0}, most = 0;
  *kept = 0;
  for (int64_t l = 0; l < dp->n; l++) {
    uint64_t h = dp->has[l] & live;
    if (dp->prim[l] < 0 || oi_pop(h) < 2) {
      hold[l] = dp->prim[l];
      continue;
    }
    if (!(h &= set)) return -1;
    int s = dp->prim[l];
    if (!(h >> s & 1)) s = __builtin_ctzll(h);
    for (int u = 0; u < m; u++)
      if (h >> u & 1 && took[u] < took[s]) s = u;
    hold[l] = (int8_t)s;
    *kept += s == dp->prim[l];
    if (++took[s] > most) most = took[s];
  }
  return most;
}

/* The primaries, and the set of `size` sites that holds every chunk and
** spreads them most evenly (the most kept at their primaries on a tie):
** sets alike in that cost alike, and costing each (2 of the 6 pairs of 4
** sites with FILL's replicas) doubled the time a statement's layout
** took. */
static int s_hold_sets(const ta_plan *p, int k, const to_choice *c, const to_env *env, to_placed *pl,
                       const to_placed *dp, uint64_t live, int size, int8_t *hold, to_moves *best,
                       tr_err *err) {
  int rc = s_try_hold(p, k, c, env, pl, dp->prim, best, err);
  uint64_t pick = 0;
  int64_t pmost = -1, pkept = -1;
  for (uint64_t set = 1; !rc && set <= live; set++) {
    int64_t kept, most = oi_pop(set) == size ? s_spread(dp, live, set, env->m, hold, &kept) : -1;
    if (most >= 0 && (pmost < 0 || most < pmost || (most == pmost && kept > pkept)))
      pick = set, pmost = most, pkept = kept;
  }
  if (!rc && pick) {
    int64_t kept;
    s_spread(dp, live, pick, env->m, hold, &kept);
    rc = s_try_hold(p, k, c, env, pl, hold, best, err);
  }
  return rc;
}

/* The tuples of a drive operand follow its chunks.  A chunk with several
** replicas may be read at any of them, so the holders are chosen too, the
** cheapest placement tried kept.  The result depends only on the choice,
** the placement and the environment, so the optimizer's search, its
** prediction and the executor's run see the same moves. */
int to_moves_compute(const ta_plan *p, int k, const to_choice *c, const to_env *env,
                     to_placed *pl, to_moves *mv, int out_pl, tr_err *err) {
  const ta_node *n = &p->nodes[k];
  if (c->drive < 0 || c->mv[c->drive] != TO_MV_KEEP || env->m < 2 || env->m > TO_MAX_SITES)
    return s_moves_at(p, k, c, NULL, NULL, env, pl, mv, out_pl, err);
  const to_placed *dp = &pl[n->in[c->drive].rel];
  uint64_t live = env->m >= 64 ? ~0ull : (1ull << env->m) - 1;
  int64_t combos = 1, nfree = 0;
  for (int64_t l = 0; l < dp->n && combos <= S_HOLD_MAX; l++) {
    int h = oi_pop(dp->has[l] & live);
    if (h > 1 && dp->prim[l] >= 0) combos *= h, nfree++;
  }
  int sets = env->m <= S_SET_SITES && env->cores > 0 && env->cores < env->m;
  if (nfree == 0 || (combos > S_HOLD_MAX && !sets)) return s_moves_at(p, k, c, NULL, NULL, env, pl, mv, out_pl, err);
  int8_t *hold = malloc((size_t)dp->n + 1);
  to_moves best;
  memset(&best, 0, sizeof best);
  int rc = hold ? TR_OK : tr_seterr(err, TR_ENOMEM, "out of memory");
  if (!rc && combos <= S_HOLD_MAX)
    rc = s_hold_combos(p, k, c, env, pl, dp, live, combos, hold, &best, err);
  else if (!rc)
    rc = s_hold_sets(p, k, c, env, pl, dp, live, env->cores, hold, &best, err);
  free(hold);
  if (rc || !best.owner) { /* none valid: the primaries' failure says why */
    to_moves_free(&best);
    return rc ? rc : s_moves_at(p, k, c, NULL, NULL, env, pl, mv, out_pl, err);
  }
  *mv = best;
  if (out_pl && (rc = s_leave(p, n, pl, mv, env->m, env->repl))) {
    to_moves_free(mv);
    return tr_seterr(err, rc, "out of memory");
  }
  return TR_OK;
}

int to_moves_assigned(const ta_plan *p, int k, const int8_t *site_of, const to_env *env, to_placed *pl,
                      to_choice *c, to_moves *mv, tr_err *err) {
  int m = env->m;
  const ta_node *n = &p->nodes[k];
  memset(c, 0, sizeof *c);
  c->drive = -1;
  for (int i = 0; i < n->ninputs; i++) c->mv[i] = TO_MV_SHUF;
  snprintf(c->name, sizeof c->name, "scheduled");
  for (int64_t lin = 0; lin < tr_nchunks(&p->rels[n->out].meta); lin++)
    if (site_of[lin] < 0 || site_of[lin] >= m)
      return tr_seterr(err, TR_EINVAL, "output chunk %lld placed on site %d of %d", (long long)lin,
                       site_of[lin], m);
  return s_moves_at(p, k, c, site_of, NULL, env, pl, mv, 1, err);
}

/* Can node e join a group (nodes k..e-1) that makes some of what it
** reads?  Only when each of its tasks reads those chunks on the worker
** whose task of the group made them, and moves nothing else: its task is
** then queued behind that worker's task of the group (a worker runs its
** tasks in the order they came), and starts as soon as that one is done.
** The producing node must not be two-phase (its chunks are made by the
** combine, after the phase), nor may e. */
static int s_chains(const ta_plan *p, const to_opt *opt, int k, int e) {
  const ta_node *n = &p->nodes[e];
  if (!opt || opt->choice[e].twophase) return 0;
  for (int i = 0; i < n->ninputs; i++) {
    int r = n->in[i].rel, j = k;
    while (j < e && p->nodes[j].out != r) j++;
    if (j == e) {
      if (opt->moves[e].in_floats[i]) return 0; /* a stored operand that moves */
      continue;
    }
    if (opt->choice[j].twophase || opt->choice[e].mv[i] == TO_MV_BCAST) return 0;
    for (int64_t cl = 0; cl < tr_nchunks(&p->rels[r].meta); cl++) {
      uint64_t need = opt->moves[e].need[i][cl];
      if (need && need != 1ull << opt->moves[j].owner[cl]) return 0;
    }
  }
  return 1;
}

int to_group_end(const ta_plan *p, const to_opt *opt, int k) {
  int e = k + 1;
  for (; e < p->nnodes; e++) {
    const ta_node *n = &p->nodes[e];
    int dep = 0, name = 0;
    for (int j = k; j < e; j++) {
      int o = p->nodes[j].out;
      for (int i = 0; i < n->ninputs; i++) dep |= n->in[i].rel == o;
      name |= n->out == o || !strcmp(p->rels[n->out].meta.name, p->rels[o].meta.name);
    }
    if (name || (dep && !s_chains(p, opt, k, e))) break;
  }
  return e;
}

/* Does elementwise node e of the group k..end run inside producer j's
** tasks: e reads j's output through one operand, with the same labels in
** the same order and the same chunks, so output chunk lin of e is made
** from chunk lin of j's alone; each of those chunks is made whole on one
** site, where e makes its own from it; and e's other operands are already
** there (stored, or made before the group, none moving). */
static int s_fuses(const ta_plan *p, const to_opt *opt, int k, int j, int e) {
  const ta_node *n = &p->nodes[e];
  const to_moves *mj = &opt->moves[j], *me = &opt->moves[e];
  int r = p->nodes[j].out, from = -1;
  const tr_tensor *rm = &p->rels[r].meta;
  if (n->agg != TK_AGG_NONE || opt->choice[j].twophase || opt->choice[e].twophase) return 0;
  for (int i = 0; i < n->ninputs; i++) {
    int ri = n->in[i].rel;
    if (ri == r) {
      if (from >= 0) return 0; /* read twice */
      from = i;
      continue;
    }
    for (int g = k; g < e; g++)
      if (p->nodes[g].out == ri) return 0; /* made in the group */
    if (me->in_floats[i]) return 0;
  }
  if (from < 0 || n->in[from].rank != n->nout || rm->rank != n->nout) return 0;
  for (int d = 0; d < n->nout; d++)
    if (n->in[from].label[d] != d || rm->chunk[d] != n->chunk[d] || rm->shape[d] != n->size[d]) return 0;
  for (int64_t lin = 0; lin < tr_nchunks(rm); lin++) {
    uint64_t at = 1ull << mj->owner[lin];
    if (mj->osites[lin] != at || me->osites[lin] != at || me->owner[lin] != mj->owner[lin] ||
        me->need[from][lin] != at)
      return 0;
  }
  return 1;
}

void to_group_fusion(const ta_plan *p, const to_opt *opt, int k, int end, int *into) {
  for (int e = k; e < end; e++) into[e] = -1;
  if (!opt) return;
  for (int e = k + 1; e < end; e++) {
    for (int j = k; j < e && into[e] < 0; j++) {
      int taken = into[j] >= 0; /* j runs inside another's tasks, or has a consumer inside */
      for (int f = k; f < e; f++) taken |= into[f] == j;
      if (!taken && s_fuses(p, opt, k, j, e)) into[e] = j;
    }
  }
}

int to_fused_stored(const ta_plan *p, int j, int e) {
  int r = p->nodes[j].out;
  if (p->rels[r].kind != TA_REL_TEMP) return 1;
  for (int g = 0; g < p->nnodes; g++)
    for (int i = 0; g != e && i < p->nodes[g].ninputs; i++)
      if (p->nodes[g].in[i].rel == r) return 1;
  return 0;
}
