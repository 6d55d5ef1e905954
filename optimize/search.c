/*
** optimize/search.c - the search: every plan the rules reach from each
** node's Table 1 plan, and a beam over the nodes of a plan keeping the
** cheapest partial plans with the placements they leave.
*/
#include "config.h"
#include "optimize/optimize_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_MAX_TREES 4000  /* IA plans visited per node */

#define S_BEAM 16         /* partial plans kept between nodes */

/* Open-addressing set of the trees reached, by the hash of their canonical
** text (oi_hash; a collision only loses a duplicate plan). */
typedef struct s_seen {
  uint64_t *h;
  size_t cap;
} s_seen;

static int s_seen_add(s_seen *S, uint64_t h) {
  h |= 1; /* 0 marks an empty slot */
  size_t i = h & (S->cap - 1);
  while (S->h[i]) {
    if (S->h[i] == h) return 0;
    i = (i + 1) & (S->cap - 1);
  }
  S->h[i] = h;
  return 1;
}

int oi_enumerate(const ta_plan *p, int k, oi_cands *out, int *ntrees, int *fired) {
  oi_ctx x;
  oi_ctx_init(&x, p, k);
  oi_tree *q = malloc(sizeof *q * S_MAX_TREES);
  oi_tree *tmp = malloc(sizeof *tmp * 16);
  char *rules = malloc((size_t)S_MAX_TREES * 160); /* a tree's entry is written as it is queued */
  s_seen S = {calloc(16384, sizeof(uint64_t)), 16384};
  int nq = 0;
  out->n = 0;
  if (!q || !tmp || !rules || !S.h) {
    free(q);
    free(tmp);
    free(rules);
    free(S.h);
    return TR_ENOMEM;
  }
  oi_initial(&x, &q[0]);
  rules[0] = '\0'; /* no rule reached the initial plan */
  oi_normalize(&q[0]);
  s_seen_add(&S, oi_hash(&x, &q[0], 0));
  nq = 1;
  for (int qi = 0; qi < nq; qi++) {
    to_choice c;
    if (oi_lower(&x, &q[qi], &c)) {
      int dup = 0;
      for (int j = 0; j < out->n && !dup; j++) {
        const to_choice *d = &out->c[j];
        dup = d->drive == c.drive && d->part == c.part && d->twophase == c.twophase &&
              d->agg_part == c.agg_part && !memcmp(d->mv, c.mv, sizeof c.mv) &&
              !memcmp(d->late, c.late, sizeof c.late);
      }
      if (!dup && out->n < OI_MAX_CANDS) {
        oi_text(&x, &q[qi], 0, c.ia, sizeof c.ia);
        snprintf(c.rules, sizeof c.rules, "%s", rules + (size_t)qi * 160);
        out->c[out->n++] = c;
      }
    }
    for (int at = 0; at < q[qi].n; at++)
      for (int r = 0; r < oi_rule_count(); r++) {
        int nt = 0;
        oi_apply(&x, &q[qi], at, r, tmp, &nt, 16);
        for (int j = 0; j < nt; j++) {
          if (!s_seen_add(&S, oi_hash(&x, &tmp[j], 0))) continue;
          fired[r]++;
          if (nq >= S_MAX_TREES) continue;
          q[nq] = tmp[j];
          const char *prev = rules + (size_t)qi * 160;
          char *dst = rules + (size_t)nq * 160;
          size_t pl = strlen(prev);
          dst[0] = '\0';
          if (pl + 8 < 160) {
            memcpy(dst, prev, pl);
            snprintf(dst + pl, 160 - pl, "%s%s", pl ? " " : "", oi_rule_name(r));
          }
          nq++;
        }
      }
  }
  *ntrees += nq;
  free(q);
  free(tmp);
  free(rules);
  free(S.h);
  return TR_OK;
}

/* A partial plan of the beam. */
typedef struct s_state {
  double cost;                     /* predicted seconds: the rank */
  int64_t floats;
  int64_t extra;                   /* tie-break: partial combines */
  uint64_t fp;                     /* fingerprint of its placements */
  int pick[TA_MAX_NODES];          /* candidate index per node */
  to_placed pl[TA_MAX_RELS];       /* placements it leaves */
} s_state;

static void s_state_free(s_state *s, int nrels) {
  for (int i = 0; i < nrels; i++) to_placed_free(&s->pl[i]);
}

int oi_placed_copy(to_placed *d, const to_placed *s) {
  memset(d, 0, sizeof *d);
  if (!s->n) return TR_OK;
  d->has = malloc(sizeof *d->has * (size_t)s->n);
  d->prim = malloc((size_t)s->n);
  if (!d->has || !d->prim) {
    to_placed_free(d);
    return TR_ENOMEM;
  }
  memcpy(d->has, s->has, sizeof *d->has * (size_t)s->n);
  memcpy(d->prim, s->prim, (size_t)s->n);
  d->n = s->n;
  return TR_OK;
}

static int s_cmp_state(const void *a, const void *b) {
  const s_state *x = *(s_state *const *)a, *y = *(s_state *const *)b;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  if (x->floats != y->floats) return x->floats < y->floats ? -1 : 1;
  if (x->extra != y->extra) return x->extra < y->extra ? -1 : 1;
  for (int k = 0; k < TA_MAX_NODES; k++)
    if (x->pick[k] != y->pick[k]) return x->pick[k] < y->pick[k] ? -1 : 1;
  return 0;
}

static int s_strcaseeq(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    char ca = *a >= 'A' && *a <= 'Z' ? (char)(*a + 32) : *a;
    char cb = *b >= 'A' && *b <= 'Z' ? (char)(*b + 32) : *b;
    if (ca != cb) return 0;
  }
  return *a == *b;
}

void to_opt_free(to_opt *o) {
  free(o->alt);
  o->alt = NULL;
  for (int k = 0; k < TA_MAX_NODES; k++) to_moves_free(&o->moves[k]);
}

/* The beam of partial plans: the cheapest kept between nodes. */
typedef struct s_beam {
  s_state **cur, **next; /* the beam, and the states grown from it */
  int ncur, nnext;       /* their number */
} s_beam;

static void s_states_free(s_state **v, int *n, int nrels) {
  for (int b = 0; b < *n; b++) {
    s_state_free(v[b], nrels);
    free(v[b]);
  }
  *n = 0;
}

/* Grow every state of the beam by every candidate of node k that is valid
** on the placement it leaves; *last keeps the error of an unreadable
** input (every plan fails on it then). */
static int s_grow(const ta_plan *p, int k, const oi_cands *cands, const char *only, const to_env *env,
                  s_beam *B, tr_err *last) {
  int rc = TR_OK;
  B->nnext = 0;
  for (int b = 0; b < B->ncur && !rc; b++)
    for (int ci = 0; ci < cands->n && !rc; ci++) {
      to_moves mv;
      if (only && strcmp(only, cands->c[ci].name)) continue;
      tr_err e2;
      s_state *s = calloc(1, sizeof *s);
      if (!s) return TR_ENOMEM;
      for (int i = 0; i < p->nrels && !rc; i++) rc = oi_placed_copy(&s->pl[i], &B->cur[b]->pl[i]);
      if (!rc && to_moves_compute(p, k, &cands->c[ci], env, s->pl, &mv, 1, &e2)) {
        s_state_free(s, p->nrels);
        free(s);
        if (e2.code == TR_ECORRUPT || e2.code == TR_ENOMEM) *last = e2;
        continue; /* not valid on this placement */
      }
      if (rc) {
        s_state_free(s, p->nrels);
        free(s);
        break;
      }
      const s_state *from = B->cur[b];
      memcpy(s->pick, from->pick, sizeof s->pick);
      s->pick[k] = ci;
      s->floats = from->floats + mv.total;
      s->cost = from->cost + mv.seconds;
      s->extra = from->extra + mv.partial_floats;
      s->fp = from->fp;
      const to_placed *po = &s->pl[p->nodes[k].out];
      for (int64_t l = 0; l < po->n; l++)
        s->fp = (s->fp ^ po->has[l] ^ ((uint64_t)po->prim[l] << 56)) * 1099511628211ull + (uint64_t)k;
      to_moves_free(&mv);
      B->next[B->nnext++] = s;
    }
  return rc;
}

/* The new beam from the grown states: the cheapest `keep`; of partial
** plans that moved the same floats and left the same placement, the first
** (fewest rewrites) stands for all. */
static void s_prune(s_beam *B, int keep, int nrels) {
  s_states_free(B->cur, &B->ncur, nrels);
  qsort(B->next, (size_t)B->nnext, sizeof *B->next, s_cmp_state);
  for (int i = 0; i < B->nnext; i++) {
    int same = 0;
    for (int j = 0; j < B->ncur && !same; j++)
      same = B->cur[j]->floats == B->next[i]->floats && B->cur[j]->fp == B->next[i]->fp;
    if (!same && B->ncur < keep) {
      B->cur[B->ncur++] = B->next[i];
    } else {
      s_state_free(B->next[i], nrels);
      free(B->next[i]);
    }
  }
  B->nnext = 0;
}

/* The alternatives from the final beam: names, predicted floats and
** cost; alternatives with the same name (equal moves reached by different
** rewrites) keep the first, cheapest. */
static int s_alternatives(const ta_plan *p, const oi_cands *cands, const s_beam *B, to_opt *o) {
  /* one per plan of the beam, each written in full below: an alternative
  ** holds a choice for every node a plan may have (some 30 KB), and
  ** zeroing TO_MAX_ALTS of them was a tenth of the shell's time on a
  ** short statement */
  int n = B->ncur < TO_MAX_ALTS ? B->ncur : TO_MAX_ALTS;
  o->alt = malloc(sizeof *o->alt * (size_t)(n + 1));
  if (!o->alt) return TR_ENOMEM;
  memset(&o->alt[n], 0, sizeof *o->alt); /* the spare one past the last, as before */
  for (int b = 0; b < n; b++) {
    struct to_alt *a = &o->alt[o->nalt++];
    size_t w = 0;
    a->name[0] = '\0';
    a->floats = B->cur[b]->floats;
    a->cost = B->cur[b]->cost;
    for (int k = 0; k < p->nnodes; k++) {
      a->choice[k] = cands[k].c[B->cur[b]->pick[k]];
      if (p->nnodes > 1)
        w += (size_t)snprintf(a->name + w, w < sizeof a->name ? sizeof a->name - w : 0, "%s%s: %s",
                              k ? " | " : "", p->rels[p->nodes[k].out].meta.name, a->choice[k].name);
      else
        snprintf(a->name, sizeof a->name, "%s", a->choice[k].name);
    }
  }
  for (int i = 1; i < o->nalt; i++)
    for (int j = 0; j < i; j++)
      if (!strcmp(o->alt[i].name, o->alt[j].name)) {
        memmove(&o->alt[i], &o->alt[i + 1], sizeof *o->alt * (size_t)(o->nalt - i - 1));
        o->nalt--;
        i--;
        break;
      }
  return TR_OK;
}

/* o->chosen: the alternative named force (in full, or a unique prefix up
** to its '['), or the cheapest without one. */
static int s_choose(to_opt *o, const char *force, tr_err *err) {
  int hit = -1, nhit = 0;
  o->chosen = 0;
  if (!force) return TR_OK;
  for (int i = 0; i < o->nalt; i++)
    if (s_strcaseeq(o->alt[i].name, force)) hit = i, nhit = 1;
  if (hit < 0)
    for (int i = 0; i < o->nalt; i++) {
      size_t fl = strlen(force);
      if (!strncasecmp(o->alt[i].name, force, fl) && (o->alt[i].name[fl] == '[' || !o->alt[i].name[fl])) {
        if (!nhit) hit = i;
        nhit++;
      }
    }
  if (hit < 0 || nhit > 1) {
    char names[2048];
    size_t w = 0;
    for (int i = 0; i < o->nalt && w < sizeof names; i++)
      w += (size_t)snprintf(names + w, sizeof names - w, "%s'%s'", i ? ", " : "", o->alt[i].name);
    return tr_seterr(err, TR_ENOTFOUND, "%s plan '%s'; the plans are: %s",
                     nhit > 1 ? "more than one" : "no", force, names);
  }
  o->chosen = hit;
  return TR_OK;
}

/* The moves of the chosen plan node by node (what the executor runs) and
** its predicted transfer, from the stored placement pl. */
static int s_predict(const ta_plan *p, const to_env *env, const to_placed *pl, to_opt *o, tr_err *err) {
  to_placed *cur = calloc(TA_MAX_RELS, sizeof *cur);
  int rc = cur ? TR_OK : TR_ENOMEM;
  for (int i = 0; i < p->nrels && !rc; i++) rc = oi_placed_copy(&cur[i], &pl[i]);
  for (int k = 0; k < p->nnodes && !rc; k++) {
    const to_moves *mv = &o->moves[k];
    o->choice[k] = o->alt[o->chosen].choice[k];
    if ((rc = to_moves_compute(p, k, &o->choice[k], env, cur, &o->moves[k], 1, err))) break;
    o->node_floats[k] = mv->total;
    o->node_s[k] = mv->seconds;
    o->node_cost[k] = mv->cost;
    o->seconds += mv->seconds;
    for (int c = 0; c < TL_NCOST; c++) o->cost.c[c] += mv->cost.c[c];
    memcpy(o->in_floats[k], mv->in_floats, sizeof mv->in_floats);
    o->partial_floats[k] = mv->partial_floats;
    o->total += mv->total;
    if (p->rels[p->nodes[k].out].kind == TA_REL_OUTPUT) {
      const tr_tensor *om = &p->rels[p->nodes[k].out].meta;
      int64_t nf = 1;
      for (int d = 0; d < om->rank; d++) nf *= om->shape[d];
      o->repl_floats += nf * (env->repl - 1);
    }
  }
  for (int i = 0; cur && i < TA_MAX_RELS; i++) to_placed_free(&cur[i]);
  free(cur);
  if (rc) return rc;
  /* and the statement's own round trip: finding where its inputs are */
  o->cost.c[TL_C_PHASES] += 1;
  o->seconds += env->w.w[TL_C_PHASES];
  o->total += o->repl_floats;
  for (int i = 0; i < o->nalt; i++) o->alt[i].floats += o->repl_floats;
  return TR_OK;
}

/* Node k's part of alternative name `name` (s_alternatives writes it), in
** out; 0 if it has none. */
static int s_node_part(const ta_plan *p, const char *name, int k, char *out, size_t cap) {
  if (p->nnodes == 1) return snprintf(out, cap, "%s", name) < (int)cap;
  for (int j = 0; j < k; j++)
    if (!(name = strstr(name, " | "))) return 0;
    else name += 3;
  const char *o = p->rels[p->nodes[k].out].meta.name;
  size_t ol = strlen(o);
  if (strncmp(name, o, ol) || strncmp(name + ol, ": ", 2)) return 0;
  name += ol + 2;
  size_t n = strcspn(name, "|");
  while (n && name[n - 1] == ' ') n--;
  return snprintf(out, cap, "%.*s", (int)n, name) < (int)cap;
}

int oi_optimize_plan(const ta_plan *p, const to_env *env, to_placed *pl, const char *force,
                     const char *only, to_opt *o, tr_err *err) {
  double t0 = tr_now();
  int rc = TR_OK, m = env->m;
  memset(o, 0, sizeof *o);
  o->m = m;
  o->repl = env->repl;
  o->w = env->w;
  oi_cands *cands = calloc((size_t)p->nnodes + 1, sizeof *cands);
  s_beam B = {calloc(TO_MAX_ALTS, sizeof *B.cur), calloc(TO_MAX_ALTS * OI_MAX_CANDS, sizeof *B.next), 0, 0};
  tr_err last;
  tr_clearerr(&last);
  if (!cands || !B.cur || !B.next || !(B.cur[0] = calloc(1, sizeof **B.cur))) {
    rc = TR_ENOMEM;
    goto done;
  }
  for (int k = 0; k < p->nnodes && !rc; k++) rc = oi_enumerate(p, k, &cands[k], &o->ntrees, o->fired);
  /* The beam starts from the stored placement. */
  B.ncur = 1;
  for (int i = 0; i < p->nrels && !rc; i++) rc = oi_placed_copy(&B.cur[0]->pl[i], &pl[i]);
  for (int k = 0; k < p->nnodes && !rc; k++) {
    char part[sizeof o->alt->name];
    if (only && !s_node_part(p, only, k, part, sizeof part)) {
      rc = tr_seterr(err, TR_EINVAL, "no plan named %s", only);
      goto done;
    }
    if ((rc = s_grow(p, k, &cands[k], only ? part : NULL, env, &B, &last))) break;
    if (!B.nnext) {
      /* an unreadable input makes every plan fail: say which chunk */
      if (last.code) *err = last, rc = last.code;
      else rc = tr_seterr(err, TR_EINVAL, "no runnable plan for %s", p->rels[p->nodes[k].out].meta.name);
      goto done;
    }
    /* S_BEAM between nodes, TO_MAX_ALTS after the last */
    s_prune(&B, k == p->nnodes - 1 ? TO_MAX_ALTS : S_BEAM, p->nrels);
  }
  if (!rc) rc = s_alternatives(p, cands, &B, o);
  if (!rc) rc = s_choose(o, force, err);
  if (!rc) rc = s_predict(p, env, pl, o, err);
done:
  if (B.cur) s_states_free(B.cur, &B.ncur, p->nrels);
  if (B.next) s_states_free(B.next, &B.nnext, p->nrels);
  free(B.cur);
  free(B.next);
  free(cands);
  o->ms = (tr_now() - t0) * 1e3;
  if (rc == TR_ENOMEM) tr_seterr(err, rc, "out of memory");
  if (rc) to_opt_free(o);
  return rc;
}
