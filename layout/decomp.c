/*
** layout/decomp.c - EinDecomp's partition vectors (Bourgeois et al.,
** sections 6 and 8.1): the candidate chunkings of an EinSum that the
** format search (format.c, tree.c, dag.c) chooses among, by its own
** seconds rather than the paper's floats.
**
** A partition vector d has one entry per label of the join, a power of
** two; labels shared by operands are one entry, so shared labels are
** co-partitioned.  The join then has prod(d) tuples, one kernel call
** each, and d is chosen with prod(d) = p (p = sites x threads, rounded up
** to a power of two).  An entry cannot exceed its label's size; where the
** sizes cannot reach p, the largest product they allow is taken.  There
** are C(log2 p + u - 1, u - 1) vectors for u labels of large size
** (section 8.1: log2 p "balls" in u "buckets").
*/
#include "config.h"
#include "layout/layout.h"

#include <stdlib.h>
#include <string.h>

#define S_MAX_LOG2P 15         /* exponents are packed 4 bits per label */
#define S_MAX_VECTORS (1 << 20) /* partition vectors one vertex may enumerate */

/* A partitioning as exponents of two, 4 bits per label (or dimension). */
typedef uint64_t s_key;

static int s_get(s_key k, int i) { return (int)((k >> (4 * i)) & 15); }
static s_key s_put(s_key k, int i, int x) {
  return (k & ~(15ull << (4 * i))) | ((uint64_t)x << (4 * i));
}

static int s_floor_log2(int64_t x) { return 63 - __builtin_clzll((uint64_t)x); }

/* ---- Enumerating partition vectors ---------------------------------------- */

/* Largest exponent per label and the total the vector reaches. */
static int s_caps(const tl_einsum *e, int P, int *cap) {
  int sum = 0;
  for (int l = 0; l < e->nlabels; l++) {
    cap[l] = s_floor_log2(e->size[l]);
    if (cap[l] > P) cap[l] = P;
    sum += cap[l];
  }
  return sum < P ? sum : P;
}

typedef struct s_keys {
  int n, cap;
  s_key *k;
} s_keys;

static int s_keys_add(s_keys *a, s_key k) {
  if (a->n == a->cap) {
    int nc = a->cap ? a->cap * 2 : 64;
    s_key *nk = realloc(a->k, sizeof *nk * (size_t)nc);
    if (!nk) return TR_ENOMEM;
    a->k = nk;
    a->cap = nc;
  }
  a->k[a->n++] = k;
  return TR_OK;
}

/* All vectors with exponents summing to `left` over labels l.., within cap,
** those cutting label l most first.  Candidates that cost the same go to
** the first, so a result is cut on its leading dimensions, where a
** row-major chunk is one slab and where the next statement of a chain
** usually keeps its cut: `T[i,k] = A[i,j] * B[j,k]` in row halves lets
** `O[i,l] = T[i,k] * C[k,l]` run where T is, where column halves made it
** sum partials across the workers. */
static int s_enum(int l, int nl, int left, const int *cap, s_key k, s_keys *out) {
  if (l == nl) return left ? TR_OK : s_keys_add(out, k);
  int hi = left < cap[l] ? left : cap[l];
  for (int x = hi; x >= 0; x--) {
    int rc = s_enum(l + 1, nl, left - x, cap, s_put(k, l, x), out);
    if (rc) return rc;
  }
  return TR_OK;
}

static int s_log2p(int p) {
  int P = 0;
  while ((1 << P) < p && P <= S_MAX_LOG2P) P++;
  return P;
}

/* Partition vectors of e's labels within cap[] whose exponents sum to S
** (section 8.1's count), without enumerating them. */
static int64_t s_count(const tl_einsum *e, const int *cap, int S) {
  int64_t ways[S_MAX_LOG2P + 1] = {1}; /* ways[s]: vectors of the labels so far summing to s */
  for (int l = 0; l < e->nlabels; l++) {
    int64_t nw[S_MAX_LOG2P + 1] = {0};
    for (int s = 0; s <= S; s++)
      for (int x = 0; x <= cap[l] && s + x <= S; x++) nw[s + x] += ways[s];
    memcpy(ways, nw, sizeof ways);
  }
  return ways[S];
}

int tl_decomp_vectors(const tl_einsum *e, int p, int **out, int *n, tr_err *err) {
  int cap[TL_MAX_LABELS], P = s_log2p(p < 1 ? 1 : p), rc;
  s_keys ks = {0};
  *out = NULL;
  *n = 0;
  if (P > S_MAX_LOG2P || e->nlabels > TK_MAX_LABELS)
    return tr_seterr(err, TR_EINVAL, "%d pieces over %d labels: at most %d pieces, %d labels", p,
                     e->nlabels, 1 << S_MAX_LOG2P, TK_MAX_LABELS);
  int S = s_caps(e, P, cap);
  if (s_count(e, cap, S) > S_MAX_VECTORS)
    return tr_seterr(err, TR_EINVAL, "more than %d partition vectors for %d pieces", S_MAX_VECTORS,
                     1 << P);
  if ((rc = s_enum(0, e->nlabels, S, cap, 0, &ks)))
    return tr_seterr(err, rc, "out of memory enumerating partition vectors");
  int *v = malloc(sizeof *v * (size_t)(ks.n * (e->nlabels ? e->nlabels : 1) + 1));
  if (!v) {
    free(ks.k);
    return tr_seterr(err, TR_ENOMEM, "out of memory enumerating partition vectors");
  }
  for (int i = 0; i < ks.n; i++)
    for (int l = 0; l < e->nlabels; l++) v[i * e->nlabels + l] = 1 << s_get(ks.k[i], l);
  *out = v;
  *n = ks.n;
  free(ks.k);
  return TR_OK;
}
