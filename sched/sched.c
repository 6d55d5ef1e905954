/*
** sched/sched.c - the placement algorithms of sched.h: input checks and a
** topological order, the list-scheduling state they share, m-TOPO, m-ETF,
** m-SCT with its LP relaxation, and the optimal ILP.
**
** Every list scheduler here appends: a task placed on machine k starts at
** or after the finish of k's last task, never in a gap before it.  That is
** how the thesis states all three (free(p) is "the next available time"
** of p), and it makes each machine's order the order of placement.
**
** Determinism: every choice compares a full key that ends in a task or
** machine index, the ready list keeps the order in which tasks became
** ready, and GLPK's simplex and branch-and-bound are deterministic for the
** same problem; no clock, no randomness, no hash order.
*/
#include "config.h"
#include <glpk.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sched/sched.h"

/* ---- the graph ----------------------------------------------------------- */

/* A checked problem in adjacency form. */
typedef struct s_graph {
  const tm_problem *pb; /* the caller's problem (borrowed) */
  int n;                /* tasks */
  int m;                /* machines */
  int *poff;            /* [n+1] task j's incoming edges: pin[poff[j] .. poff[j+1]) */
  int *pin;             /* [nedges] edge indices grouped by head, in edge order */
  int *soff;            /* [n+1] task i's outgoing edges: sout[soff[i] .. soff[i+1]) */
  int *sout;            /* [nedges] edge indices grouped by tail, in edge order */
  int *topo;            /* [n] a topological order (Kahn's, FIFO from index order) */
  int *rank;            /* [n] position of each task in topo */
} s_graph;

/* "task 3" or "task 3 (name)", for messages. */
static const char *s_task_label(const tm_problem *pb, int i, char *buf, size_t len) {
  const char *nm = pb->tasks[i].name;
  if (nm && *nm)
    snprintf(buf, len, "task %d (%s)", i, nm);
  else
    snprintf(buf, len, "task %d", i);
  return buf;
}

/* a + b for non-negative byte counts, saturating instead of overflowing. */
static int64_t s_add_sat(int64_t a, int64_t b) {
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static void s_graph_free(s_graph *g) {
  free(g->poff);
  free(g->pin);
  free(g->soff);
  free(g->sout);
  free(g->topo);
  free(g->rank);
  memset(g, 0, sizeof *g);
}

/* Group edges by tail (head = 0) or by head (head = 1) into off/idx, in
** edge order within a group; fill is scratch of n + 1 ints. */
static void s_group(const tm_problem *pb, int head, int *off, int *idx, int *fill) {
  int n = pb->ntasks;
  memset(off, 0, sizeof *off * (size_t)(n + 1));
  for (int e = 0; e < pb->nedges; e++) off[(head ? pb->edges[e].to : pb->edges[e].from) + 1]++;
  for (int i = 0; i < n; i++) off[i + 1] += off[i];
  memcpy(fill, off, sizeof *fill * (size_t)(n + 1));
  for (int e = 0; e < pb->nedges; e++) idx[fill[head ? pb->edges[e].to : pb->edges[e].from]++] = e;
}

/* A cycle among the tasks Kahn's algorithm could not order (left[j] > 0),
** written into err as "task a -> task b -> ... -> task a". */
static int s_cycle_error(const s_graph *g, const int *left, tr_err *err) {
  const tm_problem *pb = g->pb;
  int n = g->n, start = -1;
  for (int j = 0; j < n && start < 0; j++)
    if (left[j] > 0) start = j;
  /* Every unordered task has an unordered predecessor, so walking back
  ** through them must come round to a task already seen: it is on a cycle. */
  int *seen = calloc((size_t)n, sizeof *seen), *path = malloc(sizeof *path * (size_t)(n + 1));
  if (!seen || !path) {
    free(seen);
    free(path);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  int j = start, len = 0;
  while (!seen[j]) {
    seen[j] = 1;
    path[len++] = j;
    for (int q = g->poff[j]; q < g->poff[j + 1]; q++) {
      int i = pb->edges[g->pin[q]].from;
      if (left[i] > 0) {
        j = i;
        break;
      }
    }
  }
  /* path[] runs against the edges, and j -> path[len-1]: forwards, the
  ** cycle is j, path[len-1], ..., path[from+1], j where path[from] = j. */
  int from = 0;
  while (path[from] != j) from++;
  char msg[sizeof err->msg - 64], lab[160];
  size_t used = 0;
  msg[0] = 0;
  for (int q = len; q >= from && used < sizeof msg; q--) {
    int t = q == len || q == from ? j : path[q];
    int w = snprintf(msg + used, sizeof msg - used, "%s%s", used ? " -> " : "", s_task_label(pb, t, lab, sizeof lab));
    if (w < 0) break;
    used += (size_t)w;
  }
  free(seen);
  free(path);
  return tr_seterr(err, TR_EINVAL, "the task graph has a cycle: %s", msg);
}

/* Check pb and build g: counts and fields, repeated edges, tasks larger
** than every machine, more memory than all machines hold, cycles. */
static int s_graph_init(s_graph *g, const tm_problem *pb, tr_err *err) {
  char lab[160];
  int rc = TR_OK, *left = NULL, *queue = NULL, *mark = NULL;
  memset(g, 0, sizeof *g);
  if (!pb) return tr_seterr(err, TR_EINVAL, "no problem given");
  if (pb->ntasks < 0 || pb->nedges < 0) return tr_seterr(err, TR_EINVAL, "negative task or edge count");
  if (pb->nmachines < 1) return tr_seterr(err, TR_EINVAL, "no machines to place tasks on");
  if ((pb->ntasks > 0 && !pb->tasks) || (pb->nedges > 0 && !pb->edges) || !pb->capacity)
    return tr_seterr(err, TR_EINVAL, "a task, edge or capacity array is missing");
  int n = pb->ntasks, m = pb->nmachines;
  int64_t maxcap = 0, allcap = 0, allmem = 0;
  for (int k = 0; k < m; k++) {
    if (pb->capacity[k] < 0) return tr_seterr(err, TR_EINVAL, "machine %d has a negative memory capacity", k);
    if (pb->capacity[k] > maxcap) maxcap = pb->capacity[k];
    allcap = s_add_sat(allcap, pb->capacity[k]);
  }
  for (int i = 0; i < n; i++) {
    const tm_task *t = &pb->tasks[i];
    if (!isfinite(t->time) || t->time < 0)
      return tr_seterr(err, TR_EINVAL, "%s: compute time %g is not a finite number >= 0",
                       s_task_label(pb, i, lab, sizeof lab), t->time);
    if (t->mem < 0) return tr_seterr(err, TR_EINVAL, "%s: negative memory need", s_task_label(pb, i, lab, sizeof lab));
    if (t->only && !(m >= 64 ? t->only : t->only & ((1ull << m) - 1)))
      return tr_seterr(err, TR_EINVAL, "%s may run on no machine of the %d", s_task_label(pb, i, lab, sizeof lab), m);
    if (t->mem > maxcap)
      return tr_seterr(err, TR_EINVAL,
                       "%s needs %lld bytes, more than any machine has (the largest has %lld): "
                       "it needs a machine with at least %lld bytes",
                       s_task_label(pb, i, lab, sizeof lab), (long long)t->mem, (long long)maxcap, (long long)t->mem);
    allmem = s_add_sat(allmem, t->mem);
  }
  if (allmem > allcap)
    return tr_seterr(err, TR_EINVAL, "the tasks need %lld bytes in all, more than the %d machines' %lld",
                     (long long)allmem, m, (long long)allcap);
  for (int e = 0; e < pb->nedges; e++) {
    const tm_edge *d = &pb->edges[e];
    if (d->from < 0 || d->from >= n || d->to < 0 || d->to >= n)
      return tr_seterr(err, TR_EINVAL, "edge %d (%d -> %d) names a task that does not exist", e, d->from, d->to);
    if (d->from == d->to)
      return tr_seterr(err, TR_EINVAL, "the task graph has a cycle: %s depends on itself",
                       s_task_label(pb, d->from, lab, sizeof lab));
    if (!isfinite(d->comm) || d->comm < 0)
      return tr_seterr(err, TR_EINVAL, "edge %d (%d -> %d): communication time %g is not a finite number >= 0", e,
                       d->from, d->to, d->comm);
  }
  g->pb = pb;
  g->n = n;
  g->m = m;
  size_t n1 = (size_t)n + 1, ne = (size_t)pb->nedges + 1, nn = (size_t)n + 1;
  g->poff = malloc(sizeof *g->poff * n1);
  g->pin = malloc(sizeof *g->pin * ne);
  g->soff = malloc(sizeof *g->soff * n1);
  g->sout = malloc(sizeof *g->sout * ne);
  g->topo = malloc(sizeof *g->topo * nn);
  g->rank = malloc(sizeof *g->rank * nn);
  left = malloc(sizeof *left * nn);
  queue = malloc(sizeof *queue * nn);
  mark = malloc(sizeof *mark * nn);
  if (!g->poff || !g->pin || !g->soff || !g->sout || !g->topo || !g->rank || !left || !queue || !mark) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  s_group(pb, 1, g->poff, g->pin, mark);
  s_group(pb, 0, g->soff, g->sout, mark);
  /* A repeated edge: mark[j] = i + 1 while scanning i's successors. */
  for (int j = 0; j < n; j++) mark[j] = 0;
  for (int i = 0; i < n; i++)
    for (int q = g->soff[i]; q < g->soff[i + 1]; q++) {
      int j = pb->edges[g->sout[q]].to;
      if (mark[j] == i + 1) {
        rc = tr_seterr(err, TR_EINVAL, "edge %d -> %d is given twice", i, j);
        goto done;
      }
      mark[j] = i + 1;
    }
  /* Kahn: sources in index order, then successors in edge order. */
  int head = 0, tail = 0;
  for (int j = 0; j < n; j++) {
    left[j] = g->poff[j + 1] - g->poff[j];
    if (!left[j]) queue[tail++] = j;
  }
  while (head < tail) {
    int i = queue[head++];
    g->rank[i] = head - 1;
    g->topo[head - 1] = i;
    for (int q = g->soff[i]; q < g->soff[i + 1]; q++) {
      int j = pb->edges[g->sout[q]].to;
      if (--left[j] == 0) queue[tail++] = j;
    }
  }
  if (tail < n) rc = s_cycle_error(g, left, err);
done:
  free(left);
  free(queue);
  free(mark);
  if (rc) s_graph_free(g);
  return rc;
}

/* ---- the schedule --------------------------------------------------------- */

static tm_schedule *s_schedule_new(int n, int m) {
  tm_schedule *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->ntasks = n;
  s->nmachines = m;
  size_t n1 = (size_t)n + 1;
  s->machine = calloc(n1, sizeof *s->machine);
  s->start = calloc(n1, sizeof *s->start);
  s->order = calloc(n1, sizeof *s->order);
  s->peak_mem = calloc((size_t)m + 1, sizeof *s->peak_mem);
  if (!s->machine || !s->start || !s->order || !s->peak_mem) tm_schedule_destroy(&s);
  return s;
}

void tm_schedule_destroy(tm_schedule **sp) {
  if (!sp || !*sp) return;
  tm_schedule *s = *sp;
  free(s->machine);
  free(s->start);
  free(s->order);
  free(s->peak_mem);
  free(s->favourite);
  free(s);
  *sp = NULL;
}

void tm_options_init(tm_options *opt, tm_algo algo) {
  opt->algo = algo;
  opt->solver_time_limit = 10.0;
}

const char *tm_algo_name(tm_algo algo) {
  switch (algo) {
  case TM_TOPO: return "m-TOPO";
  case TM_ETF: return "m-ETF";
  case TM_SCT: return "m-SCT";
  case TM_OPT: return "ILP";
  }
  return "?";
}

/* ---- list scheduling: the state every algorithm shares ----------------- */

/* A partial schedule being built by appending tasks to machines. */
typedef struct s_run {
  const s_graph *g; /* the graph */
  tm_schedule *out; /* machine[], start[] and order[] (placement order) fill in */
  double *avail;    /* [m] when machine k's last task finishes (0: none yet) */
  int *last;        /* [m] the last task placed on k, -1 for none */
  int64_t *room;    /* [m] bytes still free on k */
  int *waiting;     /* [n] predecessors of j not yet placed */
  char *placed;     /* [n] 1 once j is placed */
  double *data;     /* [n*m] for a ready j: when all its inputs can be on k */
  int *ready;       /* unplaced tasks whose predecessors are all placed, in
                       the order they became ready; with key set, a binary
                       heap on it (s_run_fixed) */
  int nready;       /* entries in ready */
  int nplaced;      /* tasks placed so far */
  const double *key; /* s_run_fixed's order, NULL for the other lists */
} s_run;

static void s_run_free(s_run *r) {
  free(r->avail);
  free(r->last);
  free(r->room);
  free(r->waiting);
  free(r->placed);
  free(r->data);
  free(r->ready);
  memset(r, 0, sizeof *r);
}

/* s_run_fixed's order: key, then topological rank (unique, so a total
** order, the one scanning the ready list for the least key gave). */
static int s_first(const s_run *r, int a, int b) {
  return r->key[a] < r->key[b] || (r->key[a] == r->key[b] && r->g->rank[a] < r->g->rank[b]);
}

static void s_heap_down(s_run *r, int q) {
  int *h = r->ready, n = r->nready;
  for (;;) {
    int c = 2 * q + 1;
    if (c >= n) return;
    if (c + 1 < n && s_first(r, h[c + 1], h[c])) c++;
    if (!s_first(r, h[c], h[q])) return;
    int x = h[c];
    h[c] = h[q];
    h[q] = x;
    q = c;
  }
}

static void s_heap_push(s_run *r, int j) {
  int *h = r->ready, q = r->nready++;
  h[q] = j;
  while (q > 0 && s_first(r, h[q], h[(q - 1) / 2])) {
    int p = (q - 1) / 2, x = h[p];
    h[p] = h[q];
    h[q] = x;
    q = p;
  }
}

/* Task j's predecessors are all placed: when can its inputs be on each machine? */
static void s_make_ready(s_run *r, int j) {
  const s_graph *g = r->g;
  const tm_problem *pb = g->pb;
  double *row = r->data + (size_t)j * (size_t)g->m;
  for (int k = 0; k < g->m; k++) row[k] = 0;
  for (int q = g->poff[j]; q < g->poff[j + 1]; q++) {
    const tm_edge *e = &pb->edges[g->pin[q]];
    int i = e->from, ki = r->out->machine[i];
    double fin = r->out->start[i] + pb->tasks[i].time;
    for (int k = 0; k < g->m; k++) {
      double at = fin + (k == ki ? 0 : e->comm);
      if (at > row[k]) row[k] = at;
    }
  }
  if (r->key)
    s_heap_push(r, j);
  else
    r->ready[r->nready++] = j;
}

static int s_run_init(s_run *r, const s_graph *g, tm_schedule *out, tr_err *err) {
  memset(r, 0, sizeof *r);
  r->g = g;
  r->out = out;
  size_t n = (size_t)g->n + 1, m = (size_t)g->m;
  r->avail = calloc(m, sizeof *r->avail);
  r->last = malloc(sizeof *r->last * m);
  r->room = malloc(sizeof *r->room * m);
  r->waiting = malloc(sizeof *r->waiting * n);
  r->placed = calloc(n, 1);
  r->data = malloc(sizeof *r->data * n * m);
  r->ready = malloc(sizeof *r->ready * n);
  if (!r->avail || !r->last || !r->room || !r->waiting || !r->placed || !r->data || !r->ready) {
    s_run_free(r);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  for (int k = 0; k < g->m; k++) {
    r->last[k] = -1;
    r->room[k] = g->pb->capacity[k];
  }
  for (int j = 0; j < g->n; j++) {
    r->waiting[j] = g->poff[j + 1] - g->poff[j];
    if (!r->waiting[j]) s_make_ready(r, j);
  }
  return TR_OK;
}

/* The earliest start of ready task j on machine k, appended to k. */
static double s_est(const s_run *r, int j, int k) {
  double d = r->data[(size_t)j * (size_t)r->g->m + (size_t)k];
  return d > r->avail[k] ? d : r->avail[k];
}

/* Task j may run on machine k (tm_task.only). */
static int s_allowed(const tm_problem *pb, int j, int k) {
  return !pb->tasks[j].only || (k < 64 && (pb->tasks[j].only >> k & 1));
}

static int s_fits(const s_run *r, int j, int k) {
  return r->g->pb->tasks[j].mem <= r->room[k] && s_allowed(r->g->pb, j, k);
}

/* Place ready task j on machine k at time t (t >= s_est(r, j, k)). */
static void s_place(s_run *r, int j, int k, double t) {
  const s_graph *g = r->g;
  const tm_problem *pb = g->pb;
  r->out->machine[j] = k;
  r->out->start[j] = t;
  r->out->order[r->nplaced++] = j;
  r->placed[j] = 1;
  r->avail[k] = t + pb->tasks[j].time;
  r->last[k] = j;
  r->room[k] -= pb->tasks[j].mem;
  int q = 0;
  if (!r->key) { /* (s_run_fixed took it off its heap) */
    while (r->ready[q] != j) q++;
    memmove(r->ready + q, r->ready + q + 1, sizeof *r->ready * (size_t)(r->nready - q - 1));
    r->nready--;
  }
  for (q = g->soff[j]; q < g->soff[j + 1]; q++) {
    int s = pb->edges[g->sout[q]].to;
    if (--r->waiting[s] == 0) s_make_ready(r, s);
  }
}

/* Task j fits in no machine's room[] after nplaced tasks were placed. */
static int s_noroom_task(const s_graph *g, int j, int nplaced, const int64_t *room, tr_err *err) {
  const tm_problem *pb = g->pb;
  char lab[160];
  int64_t most = 0;
  for (int k = 0; k < g->m; k++)
    if (room[k] > most) most = room[k];
  return tr_seterr(err, TR_EINVAL,
                   "%s needs %lld bytes but after placing %d of %d tasks no machine has that much left "
                   "(the most is %lld): the graph does not fit in the machines' memory",
                   s_task_label(pb, j, lab, sizeof lab), (long long)pb->tasks[j].mem, nplaced, g->n, (long long)most);
}

/* No ready task fits any machine's remaining memory: name the first. */
static int s_noroom(const s_run *r, tr_err *err) {
  int j = r->ready[0];
  for (int q = 1; q < r->nready; q++)
    if (r->ready[q] < j) j = r->ready[q];
  return s_noroom_task(r->g, j, r->nplaced, r->room, err);
}

/* Place every task on the machine given, in order of key (ties: topological
** rank), each at its earliest start there.  A task is taken only once its
** predecessors are placed, so a key that is not a topological order is
** still safe.  m-TOPO and the ILP's read-back use it.  The ready tasks are
** a heap: scanning them for the least key made m-TOPO quadratic, when
** thousands of independent chunk tasks are ready at once. */
static void s_run_fixed(s_run *r, const int *mach, const double *key) {
  r->key = key;
  for (int q = r->nready / 2 - 1; q >= 0; q--) s_heap_down(r, q);
  while (r->nplaced < r->g->n) {
    int best = r->ready[0];
    r->ready[0] = r->ready[--r->nready];
    s_heap_down(r, 0);
    s_place(r, best, mach[best], s_est(r, best, mach[best]));
  }
}

/* ---- m-TOPO (thesis 4.1.3) ------------------------------------------------ */

/* Tasks in topological order fill machine 0 until it is full or the tasks
** placed so far reach 1/m of all, then machine 1 until 2/m, and so on.
** The thesis stops there; a task that finds the last machine full goes to
** the first machine, in index order, that still has room for it. */
static int s_topo(s_run *r, tr_err *err) {
  const s_graph *g = r->g;
  const tm_problem *pb = g->pb;
  int n = g->n, m = g->m, k = 0, rc = TR_OK;
  int *mach = malloc(sizeof *mach * ((size_t)n + 1));
  double *key = malloc(sizeof *key * ((size_t)n + 1));
  int64_t *room = malloc(sizeof *room * (size_t)m);
  if (!mach || !key || !room) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  memcpy(room, r->room, sizeof *room * (size_t)m);
  /* shares count the tasks free to go anywhere (nf of them, qf so far) */
  int nf = 0, qf = 0;
  for (int j = 0; j < n; j++) nf += !pb->tasks[j].only;
  for (int q = 0; q < n; q++) {
    int j = g->topo[q];
    int64_t d = pb->tasks[j].mem;
    int pinned = pb->tasks[j].only != 0;
    /* machine k has its share once qf >= (k+1) nf / m */
    while (!pinned && k < m && ((int64_t)qf * m >= (int64_t)(k + 1) * nf || room[k] < d)) k++;
    int at = pinned || k == m ? 0 : k;
    while (at < m && (room[at] < d || !s_allowed(pb, j, at))) at++;
    qf += !pinned;
    if (at == m) {
      rc = s_noroom_task(g, j, q, room, err);
      goto done;
    }
    mach[j] = at;
    room[at] -= d;
    key[j] = q;
  }
  s_run_fixed(r, mach, key);
done:
  free(mach);
  free(key);
  free(room);
  return rc;
}

/* ---- m-ETF (thesis 4.2.2) -------------------------------------------------- */

/* Of all (ready task, machine) pairs, sorted by the task's earliest start on
** the machine, place the first whose task fits in the machine's memory.
** Ties: lower task index, then lower machine index. */
static int s_etf(s_run *r, tr_err *err) {
  const s_graph *g = r->g;
  while (r->nplaced < g->n) {
    int bj = -1, bk = -1;
    double bt = 0;
    for (int q = 0; q < r->nready; q++) {
      int j = r->ready[q];
      for (int k = 0; k < g->m; k++) {
        if (!s_fits(r, j, k)) continue;
        double t = s_est(r, j, k);
        if (bj < 0 || t < bt || (t == bt && (j < bj || (j == bj && k < bk)))) {
          bj = j;
          bk = k;
          bt = t;
        }
      }
    }
    if (bj < 0) return s_noroom(r, err);
    s_place(r, bj, bk, bt);
  }
  return TR_OK;
}

/* ---- m-SCT: the LP relaxation (thesis (4.1) relaxed) -------------------- */

/* GLPK's time limit in milliseconds for a limit in seconds (< 0: none). */
static int s_glpk_ms(double seconds) {
  if (seconds < 0 || seconds * 1000.0 >= (double)INT_MAX) return INT_MAX;
  return (int)ceil(seconds * 1000.0);
}

/* Why GLPK stopped without an optimum, into why. */
static void s_glpk_why(char *why, size_t len, const char *what, int ret, int status, double limit) {
  if (ret == GLP_ETMLIM)
    snprintf(why, len, "the %s ran past its time limit of %g s", what, limit);
  else if (ret == GLP_ENOPFS || status == GLP_NOFEAS)
    snprintf(why, len, "the %s has no feasible solution", what);
  else if (ret != 0)
    snprintf(why, len, "GLPK could not solve the %s (error %d)", what, ret);
  else
    snprintf(why, len, "GLPK found no optimum of the %s (status %d)", what, status);
}

/* The largest compute or communication time: the LP and the ILP are built
** in units of it, because GLPK's tolerances are absolute (about 1e-7) and
** chunk tasks take microseconds. */
static double s_time_unit(const tm_problem *pb) {
  double u = 0;
  for (int i = 0; i < pb->ntasks; i++)
    if (pb->tasks[i].time > u) u = pb->tasks[i].time;
  for (int e = 0; e < pb->nedges; e++)
    if (pb->edges[e].comm > u) u = pb->edges[e].comm;
  return u > 0 ? u : 1;
}

/* A sparse constraint matrix for GLPK, 1-based as glp_load_matrix wants. */
typedef struct s_mat {
  int *ia;    /* row of each entry */
  int *ja;    /* column of each entry */
  double *ar; /* value of each entry */
  int nnz;    /* entries so far (entry 0 is unused) */
} s_mat;

static int s_mat_init(s_mat *a, size_t cap) {
  a->ia = malloc(sizeof *a->ia * (cap + 1));
  a->ja = malloc(sizeof *a->ja * (cap + 1));
  a->ar = malloc(sizeof *a->ar * (cap + 1));
  a->nnz = 0;
  return a->ia && a->ja && a->ar ? TR_OK : TR_ENOMEM;
}

static void s_mat_free(s_mat *a) {
  free(a->ia);
  free(a->ja);
  free(a->ar);
}

static void s_mat_put(s_mat *a, int row, int col, double v) {
  a->nnz++;
  a->ia[a->nnz] = row;
  a->ja[a->nnz] = col;
  a->ar[a->nnz] = v;
}

/* A new row with bounds of the given type; returns its index. */
static int s_row(glp_prob *lp, int type, double lo, double hi) {
  int i = glp_add_rows(lp, 1);
  glp_set_row_bnds(lp, i, type, lo, hi);
  return i;
}

/* The infinite-machine LP of m-SCT, in units of s_time_unit:
**   min w
**   s_i + p_i <= w                                 every task
**   s_i + p_i + c_ij x_ij <= s_j                   every edge
**   sum_{j in succ(i)} x_ij >= |succ(i)| - 1       at most one favourite child
**   sum_{j in pred(i)} x_ji >= |pred(i)| - 1       favourite child of at most one
**   0 <= x_ij <= 1, s_i >= 0
** x_ij = 0 means j runs after i on i's machine (no communication).  The
** thesis prints the predecessor row with <=; that would let a task be the
** favourite child of every predecessor, which no schedule can honour, so
** it reads >= here (READING-GUIDE).  On success x[e] holds each edge's x
** and *w the optimum in seconds; 1 with why filled if GLPK failed. */
static int s_lp_solve(const s_graph *g, double limit, double *x, double *w, char *why, size_t whylen) {
  const tm_problem *pb = g->pb;
  int n = g->n, ne = pb->nedges, rc = 1;
  double u = s_time_unit(pb);
  s_mat a;
  if (n == 0) { /* GLPK takes no problem without columns; the optimum is 0 */
    *w = 0;
    return 0;
  }
  if (s_mat_init(&a, 2 * (size_t)n + 5 * (size_t)ne) != TR_OK) {
    s_mat_free(&a);
    return TR_ENOMEM;
  }
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  int cs = glp_add_cols(lp, n);           /* s_i: column cs + i */
  int cx = ne ? glp_add_cols(lp, ne) : 0; /* x_e: column cx + e */
  int cw = glp_add_cols(lp, 1);
  for (int i = 0; i < n; i++) glp_set_col_bnds(lp, cs + i, GLP_LO, 0, 0);
  for (int e = 0; e < ne; e++) glp_set_col_bnds(lp, cx + e, GLP_DB, 0, 1);
  glp_set_col_bnds(lp, cw, GLP_LO, 0, 0);
  glp_set_obj_coef(lp, cw, 1);
  for (int i = 0; i < n; i++) {
    int row = s_row(lp, GLP_UP, 0, -pb->tasks[i].time / u);
    s_mat_put(&a, row, cs + i, 1);
    s_mat_put(&a, row, cw, -1);
  }
  for (int e = 0; e < ne; e++) {
    const tm_edge *d = &pb->edges[e];
    int row = s_row(lp, GLP_UP, 0, -pb->tasks[d->from].time / u);
    s_mat_put(&a, row, cs + d->from, 1);
    s_mat_put(&a, row, cs + d->to, -1);
    s_mat_put(&a, row, cx + e, d->comm / u);
  }
  for (int side = 0; side < 2; side++) {
    const int *off = side ? g->poff : g->soff, *idx = side ? g->pin : g->sout;
    for (int i = 0; i < n; i++) {
      int deg = off[i + 1] - off[i];
      if (deg < 2) continue;
      int row = s_row(lp, GLP_LO, deg - 1, 0);
      for (int q = off[i]; q < off[i + 1]; q++) s_mat_put(&a, row, cx + idx[q], 1);
    }
  }
  glp_load_matrix(lp, a.nnz, a.ia, a.ja, a.ar);
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.tm_lim = s_glpk_ms(limit);
  /* The first basis (every row's slack basic, s = x = w = 0) is dual
  ** feasible, since the only cost is w's +1: the dual simplex needs no
  ** first phase, and takes a third of the primal's time on large graphs. */
  parm.meth = GLP_DUALP;
  int term = glp_term_out(GLP_OFF); /* glp_scale_prob reports regardless of msg_lev */
  glp_scale_prob(lp, GLP_SF_AUTO);
  int ret = glp_simplex(lp, &parm), status = ret ? 0 : glp_get_status(lp);
  glp_term_out(term);
  if (ret || status != GLP_OPT) {
    s_glpk_why(why, whylen, "LP", ret, status, limit);
  } else {
    for (int e = 0; e < ne; e++) x[e] = glp_get_col_prim(lp, cx + e);
    *w = glp_get_obj_val(lp) * u;
    rc = 0;
  }
  glp_delete_prob(lp);
  /* GLPK's environment lives per thread until freed: a thread that placed
  ** a graph and ended (a pool's worker) would leave it behind.  This also
  ** ends anything else the thread held in GLPK, hence sched.h's rule. */
  glp_free_env();
  s_mat_free(&a);
  return rc;
}

/* Round the LP: j is i's favourite child when x_ij < 1/2 (x rounds to 0).
** The rows allow at most one such child per task and one such parent per
** task; should rounding noise offer two, the smaller x (then the lower
** index) wins and the other is not a favourite. */
static void s_favourites(const s_graph *g, const double *x, int *fav, int *favpar) {
  const tm_problem *pb = g->pb;
  for (int i = 0; i < g->n; i++) fav[i] = favpar[i] = -1;
  for (int i = 0; i < g->n; i++) {
    int best = -1;
    for (int q = g->soff[i]; q < g->soff[i + 1]; q++) {
      int e = g->sout[q];
      if (x[e] < 0.5 && (best < 0 || x[e] < x[best])) best = e;
    }
    if (best >= 0 && favpar[pb->edges[best].to] < 0) {
      fav[i] = pb->edges[best].to;
      favpar[fav[i]] = i;
    }
  }
}

/* The infinite-machine schedule of the rounded LP: every task as early as
** its predecessors allow, paying c_ij except after its favourite parent.
** Fills sinf[] (its start times) and returns its makespan. */
static double s_infinite(const s_graph *g, const int *fav, double *sinf) {
  const tm_problem *pb = g->pb;
  double span = 0;
  for (int q = 0; q < g->n; q++) {
    int j = g->topo[q];
    double t = 0;
    for (int p = g->poff[j]; p < g->poff[j + 1]; p++) {
      const tm_edge *e = &pb->edges[g->pin[p]];
      double at = sinf[e->from] + pb->tasks[e->from].time + (fav[e->from] == j ? 0 : e->comm);
      if (at > t) t = at;
    }
    sinf[j] = t;
    if (t + pb->tasks[j].time > span) span = t + pb->tasks[j].time;
  }
  return span;
}

/* ---- m-SCT: list scheduling (thesis 4.3.1, 4.3.2) ------------------------ */

/* What m-SCT's list scheduling needs besides the shared state. */
typedef struct s_sct_state {
  s_run *r;           /* the partial schedule */
  const int *fav;     /* [n] favourite child, -1 for none */
  const double *sinf; /* [n] start in the infinite-machine schedule */
  char *inlist;       /* [m] 1 while machine k can still take some unplaced task */
  int *awaits;        /* [m] the favourite child machine k is awake for, -1: k is free */
  int *reserver;      /* [n] the machine awake for task j, -1 for none */
} s_sct_state;

/* A machine stays in the list while some unplaced task fits in what is
** left of its memory; once none does it never will again (tasks only
** leave, memory only fills), so it is dropped for good. */
static void s_sct_list(s_sct_state *c) {
  const s_run *r = c->r;
  const tm_problem *pb = r->g->pb;
  int64_t least = INT64_MAX;
  for (int j = 0; j < r->g->n; j++)
    if (!r->placed[j] && pb->tasks[j].mem < least) least = pb->tasks[j].mem;
  for (int k = 0; k < r->g->m; k++) c->inlist[k] = c->inlist[k] && r->room[k] >= least;
}

/* When ready task j can start on every machine of the list: from then on
** it is urgent. */
static double s_sct_urgent_at(const s_sct_state *c, int j) {
  const s_run *r = c->r;
  double t = 0;
  for (int k = 0; k < r->g->m; k++) {
    double d = r->data[(size_t)j * (size_t)r->g->m + (size_t)k];
    if (c->inlist[k] && d > t) t = d;
  }
  return t;
}

/* Awake and free (thesis 4.3.1): with i the last task on machine k, k is
** awake when i's favourite child f is unplaced, ready, fits in k and can
** start on k no later than on any other machine of the list, ep(f) = k;
** otherwise k is free.  A favourite child whose other predecessors are not
** all placed has no earliest start yet, so its parent's machine is free. */
static void s_sct_awake(s_sct_state *c) {
  const s_run *r = c->r;
  int m = r->g->m;
  for (int k = 0; k < m; k++)
    if (c->awaits[k] >= 0) c->reserver[c->awaits[k]] = -1;
  for (int k = 0; k < m; k++) {
    c->awaits[k] = -1;
    int i = r->last[k], f = i >= 0 ? c->fav[i] : -1;
    if (!c->inlist[k] || f < 0 || r->placed[f] || r->waiting[f] || !s_fits(r, f, k)) continue;
    double here = s_est(r, f, k);
    int best = 1;
    for (int q = 0; q < m && best; q++)
      if (q != k && c->inlist[q] && s_fits(r, f, q) && s_est(r, f, q) < here) best = 0;
    if (best) {
      c->awaits[k] = f;
      c->reserver[f] = k;
    }
  }
}

/* The order among tasks a machine could take: the earliest task first, by
** the time it becomes urgent (so an urgent task, already delayed, always
** comes before one that is not), then by its start in the infinite-machine
** schedule, then by index. */
static int s_sct_before(const s_sct_state *c, int a, double ua, int b, double ub) {
  if (ua != ub) return ua < ub;
  if (c->sinf[a] != c->sinf[b]) return c->sinf[a] < c->sinf[b];
  return a < b;
}

/* The task machine k (idle at t, in the list) takes at t, or -1 to stay
** idle.  Free: the earliest task that can start on k at t.  Awake for f:
** an urgent task if there is one, else f once it can start, else wait for
** it.  A favourite child another machine is awake for is left to that
** machine. */
static int s_sct_pick(const s_sct_state *c, int k, double t) {
  const s_run *r = c->r;
  int f = c->awaits[k], best = -1;
  double bu = 0;
  for (int q = 0; q < r->nready; q++) {
    int j = r->ready[q];
    if (!s_fits(r, j, k) || (c->reserver[j] >= 0 && c->reserver[j] != k)) continue;
    double u = s_sct_urgent_at(c, j);
    int ok = f < 0 ? s_est(r, j, k) <= t : u <= t;
    if (ok && (best < 0 || s_sct_before(c, j, u, best, bu))) {
      best = j;
      bu = u;
    }
  }
  if (best < 0 && f >= 0 && s_est(r, f, k) <= t) best = f;
  return best;
}

/* The next moment after t at which a machine could start a task or a
** ready task becomes urgent; INFINITY if there is none. */
static double s_sct_next(const s_sct_state *c, double t) {
  const s_run *r = c->r;
  double next = INFINITY;
  for (int q = 0; q < r->nready; q++) {
    int j = r->ready[q];
    double u = s_sct_urgent_at(c, j);
    if (u > t && u < next) next = u;
    for (int k = 0; k < r->g->m; k++) {
      if (!c->inlist[k] || !s_fits(r, j, k)) continue;
      double e = s_est(r, j, k);
      if (e > t && e < next) next = e;
    }
  }
  return next;
}

/* Serve the machines of the list idle at time t in order of when they
** became available (then index); a task of zero time leaves its machine
** idle at t, so serve again until nobody takes anything, then move t to
** the next moment something can change. */
static int s_sct_run(s_sct_state *c, tr_err *err) {
  s_run *r = c->r;
  int m = r->g->m;
  double t = 0;
  int *idle = malloc(sizeof *idle * (size_t)m);
  if (!idle) return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int k = 0; k < m; k++) {
    c->inlist[k] = 1;
    c->awaits[k] = -1;
  }
  for (int j = 0; j < r->g->n; j++) c->reserver[j] = -1;
  s_sct_list(c);
  while (r->nplaced < r->g->n) {
    int nidle = 0, took = 0;
    for (int k = 0; k < m; k++) {
      if (!c->inlist[k] || r->avail[k] > t) continue;
      int q = nidle++;
      while (q > 0 && (r->avail[idle[q - 1]] > r->avail[k])) {
        idle[q] = idle[q - 1];
        q--;
      }
      idle[q] = k;
    }
    for (int q = 0; q < nidle; q++) {
      int k = idle[q];
      if (!c->inlist[k]) continue;
      s_sct_awake(c);
      int j = s_sct_pick(c, k, t);
      if (j < 0) continue;
      s_place(r, j, k, t);
      s_sct_list(c);
      took = 1;
    }
    if (took) continue;
    t = s_sct_next(c, t);
    if (t == INFINITY) {
      free(idle);
      return s_noroom(r, err);
    }
  }
  free(idle);
  return TR_OK;
}

/* m-SCT: the LP's favourite children, then list scheduling.  Returns 1
** (not an error) when the LP failed, with out->why filled, so the caller
** places the graph with m-ETF instead. */
static int s_sct(s_run *r, double limit, tr_err *err) {
  const s_graph *g = r->g;
  tm_schedule *out = r->out;
  int n = g->n, m = g->m, rc;
  size_t n1 = (size_t)n + 1;
  double *x = malloc(sizeof *x * ((size_t)g->pb->nedges + 1)), *sinf = malloc(sizeof *sinf * n1), w = 0;
  int *fav = malloc(sizeof *fav * n1), *favpar = malloc(sizeof *favpar * n1);
  s_sct_state c = {r, fav, sinf, malloc((size_t)m), malloc(sizeof(int) * (size_t)m), malloc(sizeof(int) * n1)};
  if (!x || !sinf || !fav || !favpar || !c.inlist || !c.awaits || !c.reserver) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  rc = s_lp_solve(g, limit, x, &w, out->why, sizeof out->why);
  if (rc == TR_ENOMEM) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  if (rc) goto done;
  s_favourites(g, x, fav, favpar);
  out->lp_makespan = w;
  out->inf_makespan = s_infinite(g, fav, sinf);
  rc = s_sct_run(&c, err);
  if (rc) goto done;
  out->favourite = fav;
  fav = NULL;
done:
  free(x);
  free(sinf);
  free(fav);
  free(favpar);
  free(c.inlist);
  free(c.awaits);
  free(c.reserver);
  return rc;
}

/* ---- the optimal ILP (thesis 4.4, (4.13)) ---------------------------------- */

/* The thesis's ILP, in units of s_time_unit, with y_ik = 1 when task i is
** on machine k and, for every pair i < j, x_ij = 1 when they share a
** machine (the sense of 4.4.1; (4.13) uses both senses in places):
**   min w;  s_i + p_i <= w;  sum_k y_ik = 1;  sum_i d_i y_ik <= M_k
**   y_ijk >= y_ik + y_jk - 1,  y_ijk <= y_ik,  y_ijk <= y_jk,  x_ij = sum_k y_ijk
**   edge a -> b:   s_a + p_a + (1 - x_ab) c_ab <= s_b
**   other pairs:   s_i - s_j <= -p_i + (U + p_i) b_ij + U (1 - x_ij)
**                  s_i - s_j >= L + (p_j - L) b_ij + L (1 - x_ij),  L = -U
** with U = sum p + sum c + 1, more than any schedule that runs the tasks
** one after another on the machines of a memory-feasible assignment, so
** bounding w by U cuts off no optimum and keeps every |s_i - s_j| <= U.
** y and b are binary; y_ijk and x are continuous in [0, 1], which the
** rows force to 0 or 1 once the y are, so branch and bound works on y and
** b alone.  Memory rows are divided by the largest capacity.  On success
** mach[] and key[] (the ILP's start times) are filled and *w is the
** optimum in seconds; 1 with why filled on failure. */
static int s_ilp_solve(const s_graph *g, double limit, int *mach, double *key, double *w, char *why, size_t whylen) {
  const tm_problem *pb = g->pb;
  int n = g->n, m = g->m, rc = 1;
  double u = s_time_unit(pb), big = 1;
  if (n == 0) { /* GLPK takes no problem without columns; the optimum is 0 */
    *w = 0;
    return 0;
  }
  int64_t maxcap = 1;
  for (int i = 0; i < n; i++) big += pb->tasks[i].time / u;
  for (int e = 0; e < pb->nedges; e++) big += pb->edges[e].comm / u;
  for (int k = 0; k < m; k++)
    if (pb->capacity[k] > maxcap) maxcap = pb->capacity[k];
  /* edge[i*n+j] = e + 1 for an edge between i and j (either way), else 0 */
  int *edge = calloc((size_t)n * (size_t)n + 1, sizeof *edge);
  size_t npairs = (size_t)n * (size_t)(n > 0 ? n - 1 : 0) / 2;
  s_mat a = {0};
  /* entries: per task 2 + m (makespan, assignment) and m (memory); per
  ** pair 1 + m (x), 7 m (y_ijk) and at most 8 (precedence or order) */
  if (!edge || s_mat_init(&a, (size_t)n * (2 + 2 * (size_t)m) + npairs * (8 * (size_t)m + 9)) != TR_OK) {
    free(edge);
    s_mat_free(&a);
    return TR_ENOMEM;
  }
  for (int e = 0; e < pb->nedges; e++) {
    edge[pb->edges[e].from * n + pb->edges[e].to] = e + 1;
    edge[pb->edges[e].to * n + pb->edges[e].from] = e + 1;
  }
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  int cs = glp_add_cols(lp, n), cw = glp_add_cols(lp, 1);
  int cy = glp_add_cols(lp, n * m); /* y_ik: column cy + i*m + k */
  glp_set_col_bnds(lp, cw, GLP_DB, 0, big);
  glp_set_obj_coef(lp, cw, 1);
  for (int i = 0; i < n; i++) {
    glp_set_col_bnds(lp, cs + i, GLP_DB, 0, big);
    int row = s_row(lp, GLP_UP, 0, -pb->tasks[i].time / u);
    s_mat_put(&a, row, cs + i, 1);
    s_mat_put(&a, row, cw, -1);
    row = s_row(lp, GLP_FX, 1, 1);
    for (int k = 0; k < m; k++) {
      int col = cy + i * m + k;
      glp_set_col_kind(lp, col, GLP_BV);
      if (pb->tasks[i].mem > pb->capacity[k] || !s_allowed(pb, i, k)) glp_set_col_bnds(lp, col, GLP_FX, 0, 0);
      s_mat_put(&a, row, col, 1);
    }
  }
  for (int k = 0; k < m; k++) {
    int row = s_row(lp, GLP_UP, 0, (double)pb->capacity[k] / (double)maxcap);
    for (int i = 0; i < n; i++)
      if (pb->tasks[i].mem) s_mat_put(&a, row, cy + i * m + k, (double)pb->tasks[i].mem / (double)maxcap);
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      int cx = glp_add_cols(lp, 1), cyy = glp_add_cols(lp, m);
      glp_set_col_bnds(lp, cx, GLP_DB, 0, 1);
      int rx = s_row(lp, GLP_FX, 0, 0);
      s_mat_put(&a, rx, cx, 1);
      for (int k = 0; k < m; k++) {
        int c = cyy + k, yi = cy + i * m + k, yj = cy + j * m + k, row;
        glp_set_col_bnds(lp, c, GLP_DB, 0, 1);
        s_mat_put(&a, rx, c, -1);
        row = s_row(lp, GLP_LO, -1, 0);
        s_mat_put(&a, row, c, 1);
        s_mat_put(&a, row, yi, -1);
        s_mat_put(&a, row, yj, -1);
        row = s_row(lp, GLP_UP, 0, 0);
        s_mat_put(&a, row, c, 1);
        s_mat_put(&a, row, yi, -1);
        row = s_row(lp, GLP_UP, 0, 0);
        s_mat_put(&a, row, c, 1);
        s_mat_put(&a, row, yj, -1);
      }
      int e = edge[i * n + j] - 1;
      if (e >= 0) {
        const tm_edge *d = &pb->edges[e];
        double c = d->comm / u;
        int row = s_row(lp, GLP_UP, 0, -pb->tasks[d->from].time / u - c);
        s_mat_put(&a, row, cs + d->from, 1);
        s_mat_put(&a, row, cs + d->to, -1);
        s_mat_put(&a, row, cx, -c);
        continue;
      }
      double pi = pb->tasks[i].time / u, pj = pb->tasks[j].time / u;
      int cb = glp_add_cols(lp, 1);
      glp_set_col_kind(lp, cb, GLP_BV);
      int row = s_row(lp, GLP_UP, 0, -pi + big);
      s_mat_put(&a, row, cs + i, 1);
      s_mat_put(&a, row, cs + j, -1);
      s_mat_put(&a, row, cb, -(big + pi));
      s_mat_put(&a, row, cx, big);
      row = s_row(lp, GLP_LO, -2 * big, 0);
      s_mat_put(&a, row, cs + i, 1);
      s_mat_put(&a, row, cs + j, -1);
      s_mat_put(&a, row, cb, -(pj + big));
      s_mat_put(&a, row, cx, -big);
    }
  glp_load_matrix(lp, a.nnz, a.ia, a.ja, a.ar);
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.presolve = GLP_ON;
  parm.tm_lim = s_glpk_ms(limit);
  int term = glp_term_out(GLP_OFF);
  int ret = glp_intopt(lp, &parm), status = ret ? 0 : glp_mip_status(lp);
  glp_term_out(term);
  if (ret || status != GLP_OPT) {
    s_glpk_why(why, whylen, "ILP", ret, status, limit);
  } else {
    for (int i = 0; i < n; i++) {
      mach[i] = 0;
      for (int k = 0; k < m; k++)
        if (glp_mip_col_val(lp, cy + i * m + k) > 0.5) mach[i] = k;
      key[i] = glp_mip_col_val(lp, cs + i);
    }
    *w = glp_mip_obj_val(lp) * u;
    rc = 0;
  }
  glp_delete_prob(lp);
  glp_free_env();
  s_mat_free(&a);
  free(edge);
  return rc;
}

/* The ILP's assignment, run in the order of its start times; each task
** starts as early as that order allows, so no later than in the ILP. */
static int s_opt(s_run *r, double limit, tr_err *err) {
  const s_graph *g = r->g;
  const tm_problem *pb = g->pb;
  size_t n1 = (size_t)g->n + 1;
  int *mach = malloc(sizeof *mach * n1), rc;
  double *key = malloc(sizeof *key * n1), w = 0;
  if (!mach || !key) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    goto done;
  }
  rc = s_ilp_solve(g, limit, mach, key, &w, r->out->why, sizeof r->out->why);
  if (rc == TR_ENOMEM) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  if (rc) goto done;
  /* GLPK's row tolerance is relative; the bytes must hold exactly. */
  for (int i = 0; i < g->n; i++) r->room[mach[i]] -= pb->tasks[i].mem;
  for (int k = 0; k < g->m; k++)
    if (r->room[k] < 0) {
      snprintf(r->out->why, sizeof r->out->why, "the ILP's solution overfills machine %d by %lld bytes", k,
               (long long)-r->room[k]);
      rc = 1;
      goto done;
    }
  for (int k = 0; k < g->m; k++) r->room[k] = pb->capacity[k];
  s_run_fixed(r, mach, key);
  r->out->lp_makespan = w;
done:
  free(mach);
  free(key);
  return rc;
}

/* ---- tm_place ------------------------------------------------------------- */

/* Sort key of out->order: start time, then placement position. */
typedef struct s_ord {
  double start; /* the task's start */
  int pos;      /* its position in placement order */
  int task;     /* the task */
} s_ord;

static int s_ord_cmp(const void *pa, const void *pb) {
  const s_ord *a = pa, *b = pb;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  return (a->pos > b->pos) - (a->pos < b->pos);
}

/* Makespan, peak memory, and order[] from placement order to start order. */
static int s_finish(const tm_problem *pb, tm_schedule *s, tr_err *err) {
  s_ord *o = malloc(sizeof *o * ((size_t)s->ntasks + 1));
  if (!o) return tr_seterr(err, TR_ENOMEM, "out of memory");
  s->makespan = 0;
  for (int k = 0; k < s->nmachines; k++) s->peak_mem[k] = 0;
  for (int q = 0; q < s->ntasks; q++) {
    int j = s->order[q];
    o[q] = (s_ord){s->start[j], q, j};
    double fin = s->start[j] + pb->tasks[j].time;
    if (fin > s->makespan) s->makespan = fin;
    s->peak_mem[s->machine[j]] += pb->tasks[j].mem;
  }
  qsort(o, (size_t)s->ntasks, sizeof *o, s_ord_cmp);
  for (int q = 0; q < s->ntasks; q++) s->order[q] = o[q].task;
  free(o);
  return TR_OK;
}

/* Run algo on a fresh state; 1 if its solver step failed (out->why says why). */
static int s_algo(const s_graph *g, tm_algo algo, double limit, tm_schedule *out, tr_err *err) {
  s_run r;
  int rc = s_run_init(&r, g, out, err);
  if (rc) return rc;
  switch (algo) {
  case TM_TOPO: rc = s_topo(&r, err); break;
  case TM_ETF: rc = s_etf(&r, err); break;
  case TM_SCT: rc = s_sct(&r, limit, err); break;
  case TM_OPT: rc = s_opt(&r, limit, err); break;
  }
  s_run_free(&r);
  return rc;
}

int tm_place(const tm_problem *pb, const tm_options *opt, tm_schedule **out, tr_err *err) {
  tm_options def;
  s_graph g;
  *out = NULL;
  if (!opt) {
    tm_options_init(&def, TM_SCT);
    opt = &def;
  }
  if (opt->algo < TM_TOPO || opt->algo > TM_OPT)
    return tr_seterr(err, TR_EINVAL, "unknown algorithm %d", (int)opt->algo);
  if (isnan(opt->solver_time_limit)) return tr_seterr(err, TR_EINVAL, "the solver time limit is not a number");
  int rc = s_graph_init(&g, pb, err);
  if (rc) return rc;
  tm_schedule *s = s_schedule_new(g.n, g.m);
  if (!s) {
    s_graph_free(&g);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  s->algo = s->placed_by = opt->algo;
  int solver = opt->algo == TM_SCT || opt->algo == TM_OPT;
  s->solver = solver ? TM_SOLVER_SOLVED : TM_SOLVER_NONE;
  rc = s_algo(&g, opt->algo, opt->solver_time_limit, s, err);
  if (rc == 1) {
    s->solver = TM_SOLVER_FAILED;
    s->placed_by = TM_ETF;
    s->lp_makespan = s->inf_makespan = 0;
    rc = s_algo(&g, TM_ETF, 0, s, err);
  }
  if (!rc) rc = s_finish(pb, s, err);
  s_graph_free(&g);
  if (rc)
    tm_schedule_destroy(&s);
  else
    *out = s;
  return rc;
}
