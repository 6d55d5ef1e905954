/*
** tests/unit/test_sched.c - the scheduler (sched/): every algorithm's
** schedules checked for legality by a checker of their own here, against
** the optimum of small graphs found by exhaustive search (and by the ILP,
** which must agree with it), against the thesis's bounds, on hand-made
** cases (favourite children, memory that forces tasks apart or onto one
** machine, the LP's known optimum), the LP fallback, bad input, and the
** Chrome trace.
*/
#include "config.h"
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sched/sched.h"

#define MAXT 64  /* most tasks in a generated graph */
#define MAXE 512 /* most edges */
#define MAXM 8   /* most machines */

/* A problem with its own storage. */
typedef struct g_case {
  tm_task task[MAXT]; /* the tasks */
  tm_edge edge[MAXE]; /* the edges */
  int64_t cap[MAXM];  /* machine capacities */
  tm_problem pb;      /* points into the arrays above */
} g_case;

static void g_init(g_case *c, int n, int m) {
  memset(c, 0, sizeof *c);
  c->pb = (tm_problem){n, c->task, 0, c->edge, m, c->cap};
}

/* n tasks of the same time and memory on m machines of the same size. */
static void g_same(g_case *c, int n, int m, double time, int64_t mem, int64_t cap) {
  g_init(c, n, m);
  for (int i = 0; i < n; i++) c->task[i] = (tm_task){time, mem, NULL};
  for (int k = 0; k < m; k++) c->cap[k] = cap;
}

static void g_edge(g_case *c, int from, int to, double comm) {
  c->edge[c->pb.nedges++] = (tm_edge){from, to, comm};
}

/* A small deterministic generator (xorshift64*), one stream per seed. */
static uint64_t g_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}
static double g_unif(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * (double)(g_next(s) >> 11) / 9007199254740992.0;
}
static int g_int(uint64_t *s, int lo, int hi) { /* lo..hi inclusive */
  return lo + (int)(g_next(s) % (uint64_t)(hi - lo + 1));
}

/* A random DAG: edges only from lower to higher index (so no cycle), each
** present with probability dens; times in [pmin, pmax], communication in
** [0, cmax], memory in [1, 100] bytes.  Capacities: every machine holds
** slack times the average share, and at least the largest task; with
** uniform = 0 they also vary by up to a factor 2. */
static void g_random(g_case *c, uint64_t seed, int n, int m, double dens, double pmin, double pmax, double cmax,
                     double slack, int uniform) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  g_init(c, n, m);
  int64_t total = 0, largest = 0;
  for (int i = 0; i < n; i++) {
    c->task[i].time = g_unif(&s, pmin, pmax);
    c->task[i].mem = g_int(&s, 1, 100);
    total += c->task[i].mem;
    if (c->task[i].mem > largest) largest = c->task[i].mem;
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (c->pb.nedges < MAXE && g_unif(&s, 0, 1) < dens) g_edge(c, i, j, g_unif(&s, 0, cmax));
  double f[MAXM], fsum = 0;
  for (int k = 0; k < m; k++) fsum += f[k] = uniform ? 1 : g_unif(&s, 0.5, 1.5);
  for (int k = 0; k < m; k++) {
    int64_t cap = (int64_t)ceil(slack * f[k] * (double)total / fsum);
    c->cap[k] = cap > largest ? cap : largest;
  }
}

/* Tolerance for comparing computed times. */
static double g_eps(double x) {
  return 1e-9 * (1 + fabs(x));
}

/* Is s a legal schedule of pb under the thesis's model (sched.h)?  Checks
** everything a schedule claims; on failure why says what is wrong. */
static int g_legal(const tm_problem *pb, const tm_schedule *s, char *why, size_t len) {
  int n = pb->ntasks, m = pb->nmachines;
  int64_t held[MAXM] = {0};
  int seen[MAXT] = {0}, pos[MAXT];
  double span = 0;
  if (s->ntasks != n || s->nmachines != m) return snprintf(why, len, "sizes"), 0;
  for (int i = 0; i < n; i++) {
    if (s->machine[i] < 0 || s->machine[i] >= m) return snprintf(why, len, "task %d: machine %d", i, s->machine[i]), 0;
    if (!(s->start[i] >= 0)) return snprintf(why, len, "task %d starts at %g", i, s->start[i]), 0;
    held[s->machine[i]] += pb->tasks[i].mem;
    double fin = s->start[i] + pb->tasks[i].time;
    if (fin > span) span = fin;
  }
  for (int e = 0; e < pb->nedges; e++) {
    const tm_edge *d = &pb->edges[e];
    double need =
        s->start[d->from] + pb->tasks[d->from].time + (s->machine[d->from] == s->machine[d->to] ? 0 : d->comm);
    if (s->start[d->to] < need - g_eps(need))
      return snprintf(why, len, "edge %d -> %d: starts at %g before %g", d->from, d->to, s->start[d->to], need), 0;
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      if (s->machine[i] != s->machine[j]) continue;
      double fi = s->start[i] + pb->tasks[i].time, fj = s->start[j] + pb->tasks[j].time;
      /* tasks of zero time overlap nothing */
      if (s->start[i] < fj - g_eps(fj) && s->start[j] < fi - g_eps(fi))
        return snprintf(why, len, "tasks %d and %d overlap on machine %d", i, j, s->machine[i]), 0;
    }
  for (int k = 0; k < m; k++) {
    if (held[k] > pb->capacity[k])
      return snprintf(why, len, "machine %d holds %lld > %lld", k, (long long)held[k], (long long)pb->capacity[k]), 0;
    if (s->peak_mem[k] != held[k])
      return snprintf(why, len, "machine %d: peak_mem %lld", k, (long long)s->peak_mem[k]), 0;
  }
  if (fabs(s->makespan - span) > g_eps(span))
    return snprintf(why, len, "makespan %g, largest finish %g", s->makespan, span), 0;
  for (int q = 0; q < n; q++) {
    int i = s->order[q];
    if (i < 0 || i >= n || seen[i]++) return snprintf(why, len, "order is not a permutation"), 0;
    pos[i] = q;
    if (q && s->start[i] < s->start[s->order[q - 1]]) return snprintf(why, len, "order not by start"), 0;
  }
  for (int e = 0; e < pb->nedges; e++)
    if (pos[pb->edges[e].from] > pos[pb->edges[e].to]) return snprintf(why, len, "order not topological"), 0;
  return 1;
}

#define ASSERT_LEGAL(pb, s, ...)                                                                                       \
  do {                                                                                                                 \
    char why_[256] = "";                                                                                               \
    int ok_ = g_legal((pb), (s), why_, sizeof why_);                                                                   \
    cr_assert(ok_, "illegal schedule (%s): " __VA_ARGS__, why_);                                                       \
  } while (0)

static tm_schedule *g_place(const tm_problem *pb, tm_algo algo, tr_err *err) {
  tm_options o;
  tm_schedule *s = NULL;
  tm_options_init(&o, algo);
  tr_clearerr(err);
  int rc = tm_place(pb, &o, &s, err);
  cr_assert((rc == 0) == (s != NULL), "status %d and schedule disagree", rc);
  return s;
}

static tm_schedule *g_must(const tm_problem *pb, tm_algo algo) {
  tr_err err;
  tm_schedule *s = g_place(pb, algo, &err);
  cr_assert(s, "%s failed: %s", tm_algo_name(algo), err.msg);
  return s;
}

/* ---- the optimum by exhaustive search ------------------------------------ */

/* Search state: every semi-active schedule arises from some order in which
** tasks are appended (a topological order) and some machine per task, and
** a schedule can always be shifted left to a semi-active one without
** growing its makespan, so trying all of them finds the optimum. */
typedef struct g_search {
  const tm_problem *pb; /* the problem */
  int placed[MAXT];     /* 1 once placed */
  int mach[MAXT];       /* machine of each placed task */
  double start[MAXT];   /* start of each placed task */
  double avail[MAXM];   /* finish of each machine's last task */
  int64_t room[MAXM];   /* memory left */
  double best;          /* best makespan so far */
  int bmach[MAXT];      /* its machines */
  double bstart[MAXT];  /* its starts */
} g_search;

static void g_dfs(g_search *g, int nplaced, double span) {
  const tm_problem *pb = g->pb;
  int n = pb->ntasks, m = pb->nmachines;
  if (nplaced == n) {
    if (span < g->best) {
      g->best = span;
      memcpy(g->bmach, g->mach, sizeof g->mach);
      memcpy(g->bstart, g->start, sizeof g->start);
    }
    return;
  }
  for (int j = 0; j < n; j++) {
    if (g->placed[j]) continue;
    int ready = 1;
    for (int e = 0; e < pb->nedges && ready; e++)
      if (pb->edges[e].to == j && !g->placed[pb->edges[e].from]) ready = 0;
    if (!ready) continue;
    for (int k = 0; k < m; k++) {
      if (pb->tasks[j].mem > g->room[k]) continue;
      double t = g->avail[k];
      for (int e = 0; e < pb->nedges; e++) {
        const tm_edge *d = &pb->edges[e];
        if (d->to != j) continue;
        double at = g->start[d->from] + pb->tasks[d->from].time + (g->mach[d->from] == k ? 0 : d->comm);
        if (at > t) t = at;
      }
      double fin = t + pb->tasks[j].time, old = g->avail[k];
      if (fmax(span, fin) >= g->best) continue;
      g->placed[j] = 1;
      g->mach[j] = k;
      g->start[j] = t;
      g->avail[k] = fin;
      g->room[k] -= pb->tasks[j].mem;
      g_dfs(g, nplaced + 1, fmax(span, fin));
      g->room[k] += pb->tasks[j].mem;
      g->avail[k] = old;
      g->placed[j] = 0;
    }
  }
}

/* The optimal makespan (INFINITY if nothing fits), and its schedule in g. */
static double g_optimum(const tm_problem *pb, g_search *g) {
  memset(g, 0, sizeof *g);
  g->pb = pb;
  g->best = INFINITY;
  for (int k = 0; k < pb->nmachines; k++) g->room[k] = pb->capacity[k];
  g_dfs(g, 0, 0);
  return g->best;
}

/* ---- every algorithm is legal and deterministic on random DAGs ---------- */

Test(sched, legal_and_deterministic_on_random_dags) {
  static g_case c;
  const tm_algo algos[] = {TM_TOPO, TM_ETF, TM_SCT};
  int placed = 0, tries = 0;
  for (uint64_t seed = 1; seed <= 240; seed++) {
    uint64_t s = seed;
    int n = g_int(&s, 0, 60), m = g_int(&s, 1, MAXM);
    double dens = g_unif(&s, 0.02, 0.3), cmax = g_unif(&s, 0, 3), slack = g_unif(&s, 1.05, 4);
    g_random(&c, seed, n, m, dens, 0.01, 2, cmax, slack, (int)(seed & 1));
    for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
      tr_err err;
      tries++;
      tm_schedule *x = g_place(&c.pb, algos[a], &err), *y = g_place(&c.pb, algos[a], &err);
      if (!x) {
        /* only memory may defeat a greedy placement of a valid graph */
        cr_assert(!y && err.code == TR_EINVAL && strstr(err.msg, "does not fit"), "seed %llu %s: %s",
                  (unsigned long long)seed, tm_algo_name(algos[a]), err.msg);
        continue;
      }
      placed++;
      ASSERT_LEGAL(&c.pb, x, "seed %llu %s", (unsigned long long)seed, tm_algo_name(algos[a]));
      cr_assert(y && y->makespan == x->makespan, "seed %llu: not deterministic", (unsigned long long)seed);
      cr_assert(!memcmp(x->machine, y->machine, sizeof *x->machine * (size_t)n) &&
                    !memcmp(x->start, y->start, sizeof *x->start * (size_t)n) &&
                    !memcmp(x->order, y->order, sizeof *x->order * (size_t)n),
                "seed %llu %s: two runs differ", (unsigned long long)seed, tm_algo_name(algos[a]));
      cr_assert_eq(x->placed_by, algos[a], "seed %llu: %s fell back: %s", (unsigned long long)seed,
                   tm_algo_name(algos[a]), x->why);
      if (algos[a] == TM_SCT) {
        cr_assert_eq(x->solver, TM_SOLVER_SOLVED);
        /* favourite children: a successor, and no task the favourite of two */
        int parents[MAXT] = {0};
        for (int i = 0; i < n; i++) {
          int f = x->favourite[i], edge = f < 0;
          for (int e = 0; e < c.pb.nedges && !edge; e++) edge = c.edge[e].from == i && c.edge[e].to == f;
          cr_assert(edge, "seed %llu: favourite %d of %d is not a successor", (unsigned long long)seed, f, i);
          if (f >= 0) cr_assert_eq(++parents[f], 1, "task %d is the favourite child of two tasks", f);
        }
      }
      tm_schedule_destroy(&x);
      tm_schedule_destroy(&y);
      cr_assert_null(y);
    }
  }
  cr_assert(placed > tries * 9 / 10, "only %d of %d placements succeeded", placed, tries);
}

/* ---- small graphs against the optimum ------------------------------------ */

Test(sched, small_graphs_against_the_optimum_and_the_thesis_bounds) {
  static g_case c;
  static g_search g;
  int bounded = 0, etf_bounded = 0;
  for (uint64_t seed = 1; seed <= 120; seed++) {
    uint64_t s = seed + 1000;
    int n = g_int(&s, 1, 6), m = g_int(&s, 1, 3), sct = (int)(seed % 3 != 0), uniform = (int)(seed % 4 != 1);
    double dens = g_unif(&s, 0.1, 0.7), slack = seed % 5 == 0 ? 1.0 : g_unif(&s, 1.1, 3);
    /* sct: the small communication times of the thesis, c <= every p */
    g_random(&c, seed, n, m, dens, sct ? 0.5 : 0.05, 1, sct ? 0.5 : 2, slack, uniform);
    double opt = g_optimum(&c.pb, &g);
    if (isinf(opt)) continue; /* memory admits no placement at all */

    /* the search's own best schedule passes the checker: they agree */
    int order[MAXT];
    int64_t peak[MAXM] = {0};
    for (int i = 0; i < n; i++) {
      peak[g.bmach[i]] += c.task[i].mem;
      int q = i; /* by start; times are > 0, so that is topological */
      while (q > 0 && g.bstart[order[q - 1]] > g.bstart[i]) {
        order[q] = order[q - 1];
        q--;
      }
      order[q] = i;
    }
    tm_schedule b = {.ntasks = n,
                     .nmachines = m,
                     .machine = g.bmach,
                     .start = g.bstart,
                     .order = order,
                     .makespan = opt,
                     .peak_mem = peak};
    ASSERT_LEGAL(&c.pb, &b, "seed %llu: the optimum found by search", (unsigned long long)seed);

    /* the ILP finds the same optimum */
    tm_schedule *ilp = g_must(&c.pb, TM_OPT);
    cr_assert_eq(ilp->solver, TM_SOLVER_SOLVED, "seed %llu: %s", (unsigned long long)seed, ilp->why);
    ASSERT_LEGAL(&c.pb, ilp, "seed %llu ILP", (unsigned long long)seed);
    cr_assert(fabs(ilp->makespan - opt) <= 1e-6 * (1 + opt), "seed %llu: ILP %.9g, search %.9g",
              (unsigned long long)seed, ilp->makespan, opt);
    cr_assert(fabs(ilp->lp_makespan - opt) <= 1e-6 * (1 + opt));
    tm_schedule_destroy(&ilp);

    double pmin = INFINITY, cmax = 0;
    int64_t need = 0, total = 0;
    for (int i = 0; i < n; i++) {
      pmin = fmin(pmin, c.task[i].time);
      need += c.task[i].mem;
    }
    for (int e = 0; e < c.pb.nedges; e++) cmax = fmax(cmax, c.edge[e].comm);
    for (int k = 0; k < m; k++) total += c.cap[k];
    double rho = cmax / pmin, beta = (2 + 2 * rho) / (2 + rho);

    for (tm_algo a = TM_TOPO; a <= TM_SCT; a++) {
      tr_err err;
      tm_schedule *x = g_place(&c.pb, a, &err);
      if (!x) {
        cr_assert(strstr(err.msg, "does not fit"), "seed %llu %s: %s", (unsigned long long)seed, tm_algo_name(a),
                  err.msg);
        continue;
      }
      ASSERT_LEGAL(&c.pb, x, "seed %llu %s", (unsigned long long)seed, tm_algo_name(a));
      cr_assert(x->makespan >= opt - g_eps(opt), "seed %llu %s: %.9g beats the optimum %.9g", (unsigned long long)seed,
                tm_algo_name(a), x->makespan, opt);
      /* ETF (thesis 4.2.1, Hwang et al.): within 2 + rho - 1/m of the
      ** optimum when memory does not bind */
      if (a == TM_ETF && uniform && need <= c.cap[0]) {
        cr_assert(x->makespan <= (2 + rho - 1.0 / m) * opt + g_eps(opt), "seed %llu: m-ETF %.9g, optimum %.9g",
                  (unsigned long long)seed, x->makespan, opt);
        etf_bounded++;
      }
      if (a == TM_SCT && sct) {
        /* the LP relaxes an ILP that every schedule satisfies once c <= p */
        cr_assert(x->lp_makespan <= opt + 1e-6 * (1 + opt), "seed %llu: LP %.9g > optimum %.9g",
                  (unsigned long long)seed, x->lp_makespan, opt);
        /* rounding loses at most (2+2rho)/(2+rho) (thesis 4.3.1) */
        cr_assert(x->inf_makespan <= beta * x->lp_makespan + 1e-6, "seed %llu: rounded %.9g, LP %.9g",
                  (unsigned long long)seed, x->inf_makespan, x->lp_makespan);
        /* Theorem 4.1, for machines of one size M, K = mM / sum d > 1 */
        double k = (double)total / (double)need;
        if (uniform && k > 1) {
          double alpha = 1 + (1 - 1.0 / m) * beta, bound = alpha + (1 + beta / m) / (k - 1);
          cr_assert(x->makespan <= bound * opt + g_eps(opt), "seed %llu: m-SCT %.9g > %.4g x optimum %.9g",
                    (unsigned long long)seed, x->makespan, bound, opt);
          bounded++;
        }
      }
      tm_schedule_destroy(&x);
    }
  }
  cr_assert(bounded >= 30, "only %d graphs checked against Theorem 4.1", bounded);
  cr_assert(etf_bounded >= 20, "only %d graphs checked against ETF's bound", etf_bounded);
}

/* ---- hand-made cases ---------------------------------------------------------- */

/* A -> B (c = 0.5), A -> C (c = 1), unit times, two roomy machines.
** LP: w = 2 + 0.5 x_AB = 2 + x_AC at the optimum with x_AB + x_AC = 1, so
** x_AB = 2/3, x_AC = 1/3, w = 7/3; C (x < 1/2) is A's favourite child.
** Rounded: B pays its 0.5, so the infinite-machine makespan is 2.5.
** m-SCT keeps C after A on A's machine and sends B away: 2.5, optimal.
** m-ETF takes B first (it can start at 1 like C, and has the lower index)
** on A's machine, then C there too: 3. */
static void g_fork(g_case *c) {
  g_same(c, 3, 2, 1, 1, 100);
  c->task[0].name = "A";
  c->task[1].name = "B";
  c->task[2].name = "C";
  g_edge(c, 0, 1, 0.5);
  g_edge(c, 0, 2, 1);
}

Test(sched, lp_of_a_fork_solved_by_hand) {
  static g_case c;
  g_fork(&c);
  tm_schedule *s = g_must(&c.pb, TM_SCT);
  cr_assert_eq(s->solver, TM_SOLVER_SOLVED);
  cr_assert_float_eq(s->lp_makespan, 7.0 / 3, 1e-9);
  cr_assert_eq(s->favourite[0], 2, "A's favourite child is C");
  cr_assert_eq(s->favourite[1], -1);
  cr_assert_eq(s->favourite[2], -1);
  cr_assert_float_eq(s->inf_makespan, 2.5, 1e-12);
  ASSERT_LEGAL(&c.pb, s, "fork m-SCT");
  cr_assert_eq(s->machine[2], s->machine[0], "C stays with A");
  cr_assert_neq(s->machine[1], s->machine[0], "B goes elsewhere");
  cr_assert_float_eq(s->start[2], 1, 1e-12);
  cr_assert_float_eq(s->start[1], 1.5, 1e-12);
  cr_assert_float_eq(s->makespan, 2.5, 1e-12);
  tm_schedule_destroy(&s);
  s = g_must(&c.pb, TM_ETF);
  ASSERT_LEGAL(&c.pb, s, "fork m-ETF");
  cr_assert_float_eq(s->makespan, 3, 1e-12);
  cr_assert(s->start[1] < s->start[2], "m-ETF takes B first");
  tm_schedule_destroy(&s);
  s = g_must(&c.pb, TM_OPT);
  cr_assert_float_eq(s->makespan, 2.5, 1e-9);
  tm_schedule_destroy(&s);
}

/* LPs solved by hand; unit times and communication, roomy machines.
**   chain  A -> B: x_AB = 0 costs nothing, so w = 2 and B is A's favourite.
**   join   X -> Z, Y -> Z: with the predecessor row as READING-GUIDE reads
**          it (x_XZ + x_YZ >= 1) Z skips the communication of at most one
**          input: w = 2.5 at x = 1/2 each.  The row as printed in the
**          thesis (<= 1) would allow both, w = 2.  One input must travel,
**          so the optimum is 3.
**   diamond A -> B, A -> C, B -> D, C -> D: each path pays one unit at
**          best, so w = 4, and so is the optimum on two machines. */
Test(sched, lps_solved_by_hand) {
  static const struct {
    const char *what; /* the graph */
    int n, m;         /* tasks, machines */
    int ne;           /* edges */
    int edge[4][2];   /* from, to */
    double lp;        /* the LP's optimum w */
    int fav0;         /* task 0's favourite child, -2: either */
    double opt;       /* the optimal makespan */
  } cases[] = {
      {"chain", 2, 2, 1, {{0, 1}}, 2, 1, 2},
      {"join", 3, 3, 2, {{0, 2}, {1, 2}}, 2.5, -2, 3},
      {"diamond", 4, 2, 4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}, 4, -2, 4},
  };
  static g_case c;
  for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
    g_same(&c, cases[t].n, cases[t].m, 1, 1, cases[t].n);
    for (int e = 0; e < cases[t].ne; e++) g_edge(&c, cases[t].edge[e][0], cases[t].edge[e][1], 1);
    tm_schedule *s = g_must(&c.pb, TM_SCT);
    cr_assert_float_eq(s->lp_makespan, cases[t].lp, 1e-9, "%s", cases[t].what);
    if (cases[t].fav0 > -2) cr_assert_eq(s->favourite[0], cases[t].fav0, "%s", cases[t].what);
    ASSERT_LEGAL(&c.pb, s, "%s", cases[t].what);
    cr_assert_geq(s->makespan, cases[t].opt - 1e-12, "%s", cases[t].what);
    tm_schedule_destroy(&s);
    s = g_must(&c.pb, TM_OPT);
    cr_assert_float_eq(s->makespan, cases[t].opt, 1e-9, "%s", cases[t].what);
    tm_schedule_destroy(&s);
  }
}

/* Memory decides where tasks go.  A chain A -> B of 60-byte tasks on two
** machines of 100 must be split and pay its communication; with 120 on one
** machine it stays there (m-TOPO aside: it spreads by count).  Three
** independent 10-byte tasks where machine 1 holds 5 must all run on
** machine 0 one after another; with 20 there, two machines share them. */
Test(sched, memory_forces_tasks_apart_or_together) {
  static const struct {
    const char *what; /* the case */
    int n;            /* tasks (unit time) */
    int64_t mem;      /* each task's memory */
    int64_t cap[2];   /* the two machines */
    int chain;        /* 1: edges i -> i+1 with c = 1 */
    tm_algo from;     /* algorithms from this one on must pass */
    double makespan;  /* the makespan all of them reach */
    int apart;        /* 1: tasks 0 and 1 on different machines */
    int on;           /* the machine every task runs on, -1: any */
  } cases[] = {
      {"chain apart", 2, 60, {100, 100}, 1, TM_TOPO, 3, 1, -1},
      {"chain together", 2, 60, {120, 100}, 1, TM_ETF, 2, 0, 0},
      {"one machine, serialized", 3, 10, {30, 5}, 0, TM_TOPO, 3, 0, 0},
      {"two machines", 3, 10, {30, 20}, 0, TM_TOPO, 2, 0, -1},
  };
  static g_case c;
  for (size_t t = 0; t < sizeof cases / sizeof *cases; t++)
    for (tm_algo a = cases[t].from; a <= TM_OPT; a++) {
      g_same(&c, cases[t].n, 2, 1, cases[t].mem, cases[t].cap[0]);
      c.cap[1] = cases[t].cap[1];
      for (int i = 0; cases[t].chain && i + 1 < cases[t].n; i++) g_edge(&c, i, i + 1, 1);
      tm_schedule *s = g_must(&c.pb, a);
      ASSERT_LEGAL(&c.pb, s, "%s, %s", cases[t].what, tm_algo_name(a));
      cr_assert_float_eq(s->makespan, cases[t].makespan, 1e-9, "%s, %s", cases[t].what, tm_algo_name(a));
      if (cases[t].apart) cr_assert_neq(s->machine[0], s->machine[1], "%s, %s", cases[t].what, tm_algo_name(a));
      for (int i = 0; i < cases[t].n && cases[t].on >= 0; i++)
        cr_assert_eq(s->machine[i], cases[t].on, "%s, %s", cases[t].what, tm_algo_name(a));
      tm_schedule_destroy(&s);
    }
}

/* m-TOPO (thesis 4.1.3): machine i fills until it is full or the tasks
** placed reach i n / m. */
Test(sched, topo_fills_machines_in_turn) {
  static g_case c;
  g_same(&c, 6, 3, 1, 10, 100);
  for (int i = 0; i + 1 < 6; i++) g_edge(&c, i, i + 1, 0.5);
  tm_schedule *s = g_must(&c.pb, TM_TOPO);
  const int want[6] = {0, 0, 1, 1, 2, 2};
  const double start[6] = {0, 1, 2.5, 3.5, 5, 6};
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(s->machine[i], want[i], "task %d", i);
    cr_assert_float_eq(s->start[i], start[i], 1e-12, "task %d", i);
  }
  cr_assert_float_eq(s->makespan, 7, 1e-12);
  tm_schedule_destroy(&s);
  /* machine 0 full after one task: the next go on to machine 1 */
  c.pb.ntasks = 4;
  c.pb.nedges = 3;
  c.cap[0] = 10;
  s = g_must(&c.pb, TM_TOPO);
  const int want2[4] = {0, 1, 1, 2};
  for (int i = 0; i < 4; i++) cr_assert_eq(s->machine[i], want2[i], "task %d", i);
  ASSERT_LEGAL(&c.pb, s, "topo, full machine");
  tm_schedule_destroy(&s);
}

/* m-TOPO on a graph of tens of thousands of chunk tasks, as a statement
** over a finely chunked tensor makes (dist/graph.c gives m-TOPO every
** graph over 5000 tasks): sources 0..h-1, then task h + i reading source
** i.  The topological order is the index order, so machine k takes the
** k-th quarter of it, and each machine runs its tasks in that order: a
** source i at i mod q, and its reader, on another machine, half a time
** unit of transfer after the source ends. */
Test(sched, topo_places_a_wide_graph_in_order) {
  enum { H = 20000, N = 2 * H, M = 4, Q = N / M };
  tm_task *t = calloc(N, sizeof *t);
  tm_edge *e = calloc(H, sizeof *e);
  int64_t cap[M];
  cr_assert(t && e);
  for (int j = 0; j < N; j++) t[j] = (tm_task){1, 1, NULL, 0};
  for (int i = 0; i < H; i++) e[i] = (tm_edge){i, H + i, 0.5};
  for (int k = 0; k < M; k++) cap[k] = N;
  tm_problem pb = {N, t, H, e, M, cap};
  tm_schedule *s = g_must(&pb, TM_TOPO);
  for (int j = 0; j < N; j++) {
    cr_assert_eq(s->machine[j], j / Q, "task %d on machine %d", j, s->machine[j]);
    double want = j < H ? j % Q : (j - H) % Q + 1.5;
    cr_assert_float_eq(s->start[j], want, 1e-9, "task %d starts at %g, not %g", j, s->start[j], want);
  }
  cr_assert_float_eq(s->makespan, Q + 1.5, 1e-9);
  for (int k = 0; k < M; k++) cr_assert_eq(s->peak_mem[k], Q);
  tm_schedule_destroy(&s);
  free(t);
  free(e);
}

Test(sched, empty_graph) {
  static g_case c;
  g_same(&c, 0, 2, 0, 0, 10);
  for (tm_algo a = TM_TOPO; a <= TM_OPT; a++) {
    tm_schedule *s = g_must(&c.pb, a);
    cr_assert_eq(s->makespan, 0);
    cr_assert_eq(s->ntasks, 0);
    cr_assert_eq(s->peak_mem[0], 0);
    cr_assert_eq(s->peak_mem[1], 0);
    char *json = NULL;
    cr_assert_eq(tm_trace_json(&c.pb, s, &json, NULL), 0);
    cr_assert(strstr(json, "\"traceEvents\":["));
    free(json);
    tm_schedule_destroy(&s);
  }
}

/* A zero time limit makes GLPK give up: m-ETF places the graph, and the
** schedule says so and why. */
Test(sched, solver_failure_falls_back_to_etf) {
  static g_case c;
  g_random(&c, 7, 30, 4, 0.15, 0.1, 1, 0.5, 2, 1);
  tm_schedule *etf = g_must(&c.pb, TM_ETF);
  for (tm_algo a = TM_SCT; a <= TM_OPT; a++) {
    tm_options o;
    tm_schedule *s = NULL;
    tr_err err;
    tm_options_init(&o, a);
    o.solver_time_limit = 0;
    cr_assert_eq(tm_place(&c.pb, &o, &s, &err), 0, "%s", err.msg);
    cr_assert_eq(s->algo, a);
    cr_assert_eq(s->placed_by, TM_ETF);
    cr_assert_eq(s->solver, TM_SOLVER_FAILED);
    cr_assert(strstr(s->why, "time limit"), "why: %s", s->why);
    cr_assert_null(s->favourite);
    cr_assert_eq(s->lp_makespan, 0);
    ASSERT_LEGAL(&c.pb, s, "fallback");
    cr_assert(!memcmp(s->machine, etf->machine, sizeof *s->machine * 30) &&
                  !memcmp(s->start, etf->start, sizeof *s->start * 30),
              "the fallback is m-ETF's schedule");
    char *json = NULL;
    cr_assert_eq(tm_trace_json(&c.pb, s, &json, NULL), 0);
    cr_assert(strstr(json, "\"placed_by\":\"m-ETF\""));
    cr_assert(strstr(json, "\"fallback\":\"the "), "%s", json);
    free(json);
    tm_schedule_destroy(&s);
  }
  tm_schedule_destroy(&etf);
}

/* One thread's share of threads_place_graphs_at_once. */
typedef struct g_thread {
  const tm_problem *pb; /* the graph, shared */
  tm_algo algo;         /* what to run */
  double makespan[4];   /* the makespans of four runs */
  int failed;           /* runs that failed or fell back */
} g_thread;

static void *g_thread_main(void *arg) {
  g_thread *t = arg;
  tm_options o;
  tm_options_init(&o, t->algo);
  for (int i = 0; i < 4; i++) {
    tm_schedule *s = NULL;
    if (tm_place(t->pb, &o, &s, NULL) || s->solver != TM_SOLVER_SOLVED)
      t->failed++;
    else
      t->makespan[i] = s->makespan;
    tm_schedule_destroy(&s);
  }
  return NULL;
}

/* GLPK's environment is per thread: threads solving at once get what one
** thread gets. */
Test(sched, threads_place_graphs_at_once) {
  static g_case big, small;
  g_random(&big, 11, 60, 4, 0.1, 0.1, 1, 0.5, 2, 1);
  g_random(&small, 12, 5, 2, 0.4, 0.5, 1, 0.5, 2, 1);
  tm_schedule *sct = g_must(&big.pb, TM_SCT), *opt = g_must(&small.pb, TM_OPT);
  g_thread th[4];
  pthread_t id[4];
  for (int i = 0; i < 4; i++) {
    th[i] = (g_thread){i % 2 ? &small.pb : &big.pb, i % 2 ? TM_OPT : TM_SCT, {0}, 0};
    cr_assert_eq(pthread_create(&id[i], NULL, g_thread_main, &th[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(id[i], NULL);
    cr_assert_eq(th[i].failed, 0, "thread %d", i);
    for (int r = 0; r < 4; r++)
      cr_assert_eq(th[i].makespan[r], (i % 2 ? opt : sct)->makespan, "thread %d run %d", i, r);
  }
  tm_schedule_destroy(&sct);
  tm_schedule_destroy(&opt);
}

/* ---- bad input -------------------------------------------------------------- */

/* tm_place fails with TR_EINVAL and a message containing want. */
static void g_bad(const tm_problem *pb, tm_algo algo, const char *want) {
  tr_err err;
  tm_schedule *s = (tm_schedule *)1;
  tm_options o;
  tm_options_init(&o, algo);
  tr_clearerr(&err);
  int rc = tm_place(pb, &o, &s, &err);
  cr_assert_eq(rc, TR_EINVAL, "%s: want an error containing '%s', got %d", tm_algo_name(algo), want, rc);
  cr_assert_null(s);
  cr_assert(strstr(err.msg, want), "%s: '%s' does not say '%s'", tm_algo_name(algo), err.msg, want);
}

Test(sched, bad_input) {
  static g_case c;
  for (tm_algo a = TM_TOPO; a <= TM_OPT; a++) {
    /* a task larger than every machine: named, with the capacity it needs */
    g_same(&c, 3, 2, 1, 10, 100);
    c.task[1] = (tm_task){1, 500, "big"};
    c.cap[1] = 400;
    g_bad(&c.pb, a, "task 1 (big) needs 500 bytes");
    g_bad(&c.pb, a, "at least 500 bytes");
    /* a cycle, named */
    c.task[1].mem = 10;
    g_edge(&c, 0, 1, 1);
    g_edge(&c, 1, 2, 1);
    g_edge(&c, 2, 0, 1);
    g_bad(&c.pb, a, "cycle: task 0 -> task 1 (big) -> task 2 -> task 0");
    c.pb.nedges = 0;
    g_edge(&c, 1, 1, 0);
    g_bad(&c.pb, a, "task 1 (big) depends on itself");
    c.pb.nedges = 0;
    g_edge(&c, 0, 3, 0);
    g_bad(&c.pb, a, "does not exist");
    c.pb.nedges = 0;
    g_edge(&c, 0, 1, 0);
    g_edge(&c, 0, 1, 2);
    g_bad(&c.pb, a, "given twice");
    c.pb.nedges = 0;
    g_edge(&c, 0, 1, -1);
    g_bad(&c.pb, a, "communication time");
    c.pb.nedges = 0;
    c.task[2].time = NAN;
    g_bad(&c.pb, a, "task 2: compute time");
    c.task[2].time = -1;
    g_bad(&c.pb, a, "task 2: compute time");
    c.task[2] = (tm_task){1, -5, NULL};
    g_bad(&c.pb, a, "negative memory");
    c.task[2].mem = 10;
    c.pb.nmachines = 0;
    g_bad(&c.pb, a, "no machines");
    c.pb.nmachines = 2;
    /* more memory than all machines together */
    c.task[0].mem = c.task[1].mem = c.task[2].mem = 200;
    g_bad(&c.pb, a, "600 bytes in all");
    /* three tasks of 60 on two machines of 100: each fits, together not */
    c.task[0].mem = c.task[1].mem = c.task[2].mem = 60;
    c.cap[1] = 100;
    g_bad(&c.pb, a, "does not fit in the machines' memory");
  }
  tm_options o = {(tm_algo)42, 1};
  tm_schedule *s = NULL;
  cr_assert_eq(tm_place(&c.pb, &o, &s, NULL), TR_EINVAL);
  tm_schedule_destroy(&s);
  tm_schedule_destroy(&s);
}

/* ---- the trace --------------------------------------------------------------- */

static int g_count(const char *s, const char *sub) {
  int k = 0;
  for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) k++;
  return k;
}

Test(sched, chrome_trace) {
  static g_case c;
  g_fork(&c);
  c.task[1].name = "B \"quoted\"\n";
  tm_schedule *s = g_must(&c.pb, TM_SCT);
  char *json = NULL;
  tr_err err;
  cr_assert_eq(tm_trace_json(&c.pb, s, &json, &err), 0);
  cr_assert(!strncmp(json, "{\"traceEvents\":[", 16), "%s", json);
  cr_assert_eq(g_count(json, "\"ph\":\"X\""), 3);
  cr_assert_eq(g_count(json, "\"ph\":\"M\""), 2);
  cr_assert(
      strstr(json,
             "{\"name\":\"A\",\"cat\":\"task\",\"ph\":\"X\",\"ts\":0.000,\"dur\":1000000.000,\"pid\":0,\"tid\":0,"),
      "%s", json);
  cr_assert(strstr(json, "\"name\":\"B \\\"quoted\\\"\\n\""), "%s", json);
  cr_assert(strstr(json, "\"ts\":1500000.000,\"dur\":1000000.000,\"pid\":1"), "%s", json);
  cr_assert(strstr(json, "\"algorithm\":\"m-SCT\""));
  cr_assert_eq(g_count(json, "{"), g_count(json, "}"));
  cr_assert_eq(g_count(json, "["), g_count(json, "]"));
  cr_assert_eq(json[strlen(json) - 1], '}');
  free(json);
  /* a schedule of another problem */
  c.pb.ntasks = 2;
  cr_assert_eq(tm_trace_json(&c.pb, s, &json, &err), TR_EINVAL);
  cr_assert_null(json);
  tm_schedule_destroy(&s);
}

/* Pinned tasks (tm_task.only): on random DAGs with a stored chunk's worth
** of pinned sources (time 0, memory 0, edges carrying a fetch) every
** algorithm, the ILP included, keeps each pinned task on a machine it
** allows and gives a legal schedule; when fetches cost much more than the
** work, a task reading only one source's data runs where that source is. */
Test(sched, pinned_tasks_stay_on_their_machines) {
  static g_case c;
  const tm_algo algos[] = {TM_TOPO, TM_ETF, TM_SCT};
  for (uint64_t seed = 1; seed <= 60; seed++) {
    uint64_t s = seed;
    int n = g_int(&s, 4, 40), m = g_int(&s, 2, MAXM);
    g_random(&c, seed, n, m, 0.1, 0.01, 2, 1, 3, 1);
    /* tasks 0..n/4 become sources pinned to one or two machines */
    for (int i = 0; i <= n / 4; i++) {
      c.task[i].time = 0;
      c.task[i].mem = 0;
      c.task[i].only = (1ull << g_int(&s, 0, m - 1)) | (seed & 1 ? 1ull << g_int(&s, 0, m - 1) : 0);
    }
    for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
      tr_err err;
      tm_schedule *x = g_place(&c.pb, algos[a], &err);
      cr_assert_not_null(x, "seed %llu %s: %s", (unsigned long long)seed, tm_algo_name(algos[a]), err.msg);
      ASSERT_LEGAL(&c.pb, x, "seed %llu %s", (unsigned long long)seed, tm_algo_name(algos[a]));
      for (int i = 0; i <= n / 4; i++)
        cr_assert(c.task[i].only >> x->machine[i] & 1, "seed %llu %s: task %d on machine %d, allowed %llx",
                  (unsigned long long)seed, tm_algo_name(algos[a]), i, x->machine[i],
                  (unsigned long long)c.task[i].only);
      tm_schedule_destroy(&x);
    }
  }
  /* a reader of one source: placed with it when fetching costs 10x the work */
  for (int pin = 0; pin < 3; pin++) {
    g_same(&c, 4, 3, 1, 1, 100);
    c.task[0] = (tm_task){0, 0, "src", 1ull << pin};
    g_edge(&c, 0, 1, 10);
    g_edge(&c, 1, 2, 0.1);
    g_edge(&c, 1, 3, 0.1);
    for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
      tm_schedule *x = g_must(&c.pb, algos[a]);
      cr_assert_eq(x->machine[0], pin, "%s", tm_algo_name(algos[a]));
      if (algos[a] != TM_TOPO) cr_assert_eq(x->machine[1], pin, "%s: the reader fetches", tm_algo_name(algos[a]));
      tm_schedule_destroy(&x);
    }
    tm_schedule *o = g_must(&c.pb, TM_OPT);
    cr_assert_eq(o->machine[0], pin);
    cr_assert_eq(o->machine[1], pin, "the optimum does not fetch");
    tm_schedule_destroy(&o);
  }
  /* allowed on no machine */
  g_same(&c, 2, 2, 1, 1, 10);
  c.task[1].only = 1ull << 5;
  g_bad(&c.pb, TM_ETF, "may run on no machine");
}
