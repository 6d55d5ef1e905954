/*
** optimize/memo.c - layout decisions a session remembers.  The layout
** search is most of the shell's time on a short statement in auto layout
** (two format searches and three IA searches: 1.2 ms of 2.3 ms on a 10 ms
** dense layer, 4 local workers), and a loop runs the same statements again
** and again.  A statement whose plan, settings and operand placement are
** the same as an earlier one's takes the chunkings decided then and is
** only optimized in them.  The key is everything to_optimize reads, so a
** change of any (CALIBRATE's weights, SET layout, a worker down, a tensor
** re-chunked or moved) is a miss; nothing needs invalidating.  A stale
** entry could only cost speed, never a wrong result: the plan is still
** optimized and run on the current placement.
*/
#include "config.h"
#include "optimize/optimize_int.h"

#include <stdlib.h>
#include <string.h>

#define S_ENTRIES 16 /* statements remembered: a training loop's block has a
                        few, a session's recent ones are what repeats */

typedef struct s_entry {
  uint8_t *key;          /* the serialized inputs (s_key) */
  size_t klen;           /* its length */
  uint64_t hash;         /* of the key (tc_checksum) */
  ta_plan *plan;         /* the plan as to_optimize left it */
  to_layout_info info;   /* what the search decided */
  uint64_t used;         /* clock of its last use (least recently used goes) */
} s_entry;

struct to_memo {
  s_entry e[S_ENTRIES];
  uint64_t clock;
};

/* A growable byte buffer for keys. */
typedef struct s_buf {
  uint8_t *p;
  size_t n, cap;
  int oom;
} s_buf;

static void s_put(s_buf *b, const void *v, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->n + n) cap *= 2;
    uint8_t *np = realloc(b->p, cap);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->n, v, n);
  b->n += n;
}

static void s_i64(s_buf *b, int64_t v) { s_put(b, &v, sizeof v); }

static void s_str(s_buf *b, const char *s) { s_put(b, s, strlen(s) + 1); }

static void s_prog(s_buf *b, const tk_prog *pr) {
  s_i64(b, pr->n);
  for (int i = 0; i < pr->n; i++) {
    s_i64(b, pr->code[i].op);
    s_i64(b, pr->code[i].arg);
    s_put(b, &pr->code[i].c, sizeof pr->code[i].c);
  }
}

/* What to_optimize reads, field by field (never whole structs: padding and
** unused tails would make equal inputs differ).  Left out: the version and
** catalog id of each relation (a tensor rewritten by the last statement
** is the same operand), except whether it was ever written (a declared-only
** tensor reads as zeros, placed otherwise). */
static void s_key(s_buf *b, const ta_plan *p, const to_env *env, const to_placed *pl, const char *force) {
  s_str(b, force ? force : "");
  s_i64(b, env->m);
  s_i64(b, env->repl);
  s_i64(b, env->threads);
  s_i64(b, env->cores);
  s_put(b, env->w.w, sizeof env->w.w);
  s_i64(b, env->w.fitted);
  s_i64(b, env->layout);
  s_i64(b, env->chunk_limit);
  s_i64(b, env->chunk_max);
  s_i64(b, p->nrels);
  for (int r = 0; r < p->nrels; r++) {
    const ta_rel *x = &p->rels[r];
    const tr_tensor *t = &x->meta;
    s_i64(b, x->kind);
    s_str(b, t->name);
    s_i64(b, t->dtype);
    s_i64(b, t->rank);
    for (int d = 0; d < t->rank; d++) {
      s_i64(b, t->shape[d]);
      s_i64(b, t->chunk[d]);
      s_i64(b, x->declared ? x->dchunk[d] : 0);
    }
    s_str(b, t->format);
    s_i64(b, t->version == 0);
    s_i64(b, x->pending);
    s_i64(b, x->iota);
    s_i64(b, x->declared);
    int64_t n = pl ? pl[r].n : 0;
    s_i64(b, n);
    if (n > 0 && pl[r].has) s_put(b, pl[r].has, (size_t)n * sizeof *pl[r].has);
    if (n > 0 && pl[r].prim) s_put(b, pl[r].prim, (size_t)n * sizeof *pl[r].prim);
  }
  s_i64(b, p->nnodes);
  for (int k = 0; k < p->nnodes; k++) {
    const ta_node *n = &p->nodes[k];
    s_i64(b, n->nlabels);
    s_i64(b, n->nout);
    for (int l = 0; l < n->nlabels; l++) {
      s_str(b, n->lname[l]);
      s_i64(b, n->size[l]);
      s_i64(b, n->chunk[l]);
    }
    s_i64(b, n->ninputs);
    for (int i = 0; i < n->ninputs; i++) {
      s_i64(b, n->in[i].rel);
      s_i64(b, n->in[i].rank);
      for (int d = 0; d < n->in[i].rank; d++) s_i64(b, n->in[i].label[d]);
    }
    s_prog(b, &n->prog);
    s_i64(b, n->agg);
    s_prog(b, &n->post);
    s_i64(b, n->out);
    s_i64(b, n->gemm);
    s_i64(b, n->drive);
  }
  s_i64(b, p->nsplits);
  for (int i = 0; i < p->nsplits; i++) {
    s_i64(b, p->splits[i].first);
    s_i64(b, p->splits[i].last);
    s_str(b, p->splits[i].order);
    s_str(b, p->splits[i].inlined);
  }
}

to_memo *to_memo_new(void) { return calloc(1, sizeof(to_memo)); }

void to_memo_free(to_memo **pm) {
  if (!pm || !*pm) return;
  for (int i = 0; i < S_ENTRIES; i++) {
    free((*pm)->e[i].key);
    free((*pm)->e[i].plan);
  }
  free(*pm);
  *pm = NULL;
}

int oi_memo_key(const ta_plan *p, const to_env *env, const to_placed *pl, const char *force,
                oi_memokey *k) {
  s_buf b = {0};
  s_key(&b, p, env, pl, force);
  if (b.oom) {
    free(b.p);
    return TR_ENOMEM;
  }
  k->key = b.p;
  k->len = b.n;
  k->hash = tc_checksum(b.p, b.n); /* to skip most comparisons: a hit compares the whole key */
  return TR_OK;
}

int oi_memo_find(to_memo *m, const oi_memokey *k, ta_plan *p, to_layout_info *info) {
  for (int i = 0; i < S_ENTRIES; i++) {
    s_entry *e = &m->e[i];
    if (!e->key || e->hash != k->hash || e->klen != k->len || memcmp(e->key, k->key, k->len)) continue;
    /* the plan decided then, with this statement's versions and ids */
    int64_t id[TA_MAX_RELS], version[TA_MAX_RELS];
    int nrels = p->nrels;
    for (int r = 0; r < nrels; r++) {
      id[r] = p->rels[r].meta.id;
      version[r] = p->rels[r].meta.version;
    }
    *p = *e->plan;
    for (int r = 0; r < nrels; r++) {
      p->rels[r].meta.id = id[r];
      p->rels[r].meta.version = version[r];
    }
    *info = e->info;
    e->used = ++m->clock;
    return 1;
  }
  return 0;
}

void oi_memo_keep(to_memo *m, oi_memokey *k, const ta_plan *p, const to_layout_info *info) {
  s_entry *e = &m->e[0];
  for (int i = 1; i < S_ENTRIES && e->key; i++)
    if (!m->e[i].key || m->e[i].used < e->used) e = &m->e[i];
  ta_plan *copy = malloc(sizeof *copy);
  if (!copy) return; /* not remembered: the next one searches again */
  *copy = *p;
  free(e->key);
  free(e->plan);
  e->key = k->key;
  e->klen = k->len;
  e->hash = k->hash;
  k->key = NULL; /* the entry owns it now */
  e->plan = copy;
  e->info = *info;
  e->used = ++m->clock;
}
