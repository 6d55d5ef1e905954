/*
** dist/graph.c - a plan (one statement, or a block's statements together)
** as one graph of chunk tasks, placed by a memory-aware scheduler
** (sched/: m-SCT, m-ETF, m-TOPO) within every worker's memory; the
** placement becomes the site of each output chunk, which the executor
** (run.c) sends the chunk's task to.
**
** The graph.  A task is one output chunk of one node: every join tuple of
** it, its aggregation and its fused map, on one worker.  Its time is the
** layout optimizer's cost in seconds (layout/cost.c, default weights) of
** its kernel calls; its memory is what it holds while it streams its
** tuples through: its output chunk and the operand chunks of one tuple.
** An edge i -> j says task j reads a chunk task i made; it costs the
** chunk's floats at the network weight.  Chunks of stored tensors are not
** tasks: they are where the catalog says, and the cost of fetching them is
** not part of the prediction.
**
** Memory.  sched/ holds a task's memory on its worker from the start of
** the graph to its end (the thesis's pre-allocation).  A graph whose tasks
** need more than the workers have is cut into waves, consecutive in task
** order (a topological order), each placed on its own and started when
** the one before has finished and its outputs have reached their readers:
** what a wave held is stored or dropped by then, so only one wave's
** working set is in memory at a time.  A wave that still does not fit is
** halved; a task larger than every worker is placed as if it fitted the
** smallest (it streams through its own operands) and the schedule says so.
*/
#include "config.h"
#include "dist/dist_int.h"
#include "layout/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names SET scheduler takes, in the order of di_sched_algo. */
static const char *const s_names[] = {"statement", "msct", "metf", "mtopo"};
static const tm_algo s_algos[] = {TM_SCT, TM_SCT, TM_ETF, TM_TOPO};

int di_sched_parse(const char *value, tr_err *err) {
  for (int i = 0; i < (int)(sizeof s_names / sizeof *s_names); i++)
    if (!strcmp(value, s_names[i])) return i;
  return tr_seterr(err, TR_EINVAL, "unknown scheduler '%s' (schedulers: msct, metf, mtopo, statement)",
                   value);
}

double di_sched_lp_seconds(td_cluster *c) {
  char v[32];
  tm_options o;
  tm_options_init(&o, TM_SCT);
  if (tc_setting_get(c->db, "scheduler_lp_seconds", v, sizeof v, NULL) == TR_OK) o.solver_time_limit = atof(v);
  return o.solver_time_limit;
}

int di_sched_lp_parse(const char *value, tr_err *err) {
  char *end;
  double x = strtod(value, &end);
  if (*end || end == value || !(x >= 0) || x > 86400)
    return tr_seterr(err, TR_EINVAL, "scheduler_lp_seconds must be a number of seconds from 0 to 86400 "
                     "(0: m-ETF places every graph)");
  return TR_OK;
}

int di_sched_setting(td_cluster *c) {
  char v[32];
  if (tc_setting_get(c->db, "scheduler", v, sizeof v, NULL) != TR_OK) return DI_SCHED_MSCT;
  int a = di_sched_parse(v, NULL);
  return a < 0 ? DI_SCHED_MSCT : a;
}

void di_sched_free(di_sched *s) {
  if (!s) return;
  free(s->tasks);
  free(s->edges);
  free(s->names);
  free(s->site_of);
  tm_schedule_destroy(&s->sched);
  memset(s, 0, sizeof *s);
}

/* Floats of chunk lin of t. */
static int64_t s_floats(const tr_tensor *t, int64_t lin) {
  int64_t key[TR_MAX_RANK], ext[TR_MAX_RANK];
  tr_key_from_linear(t, lin, key);
  return tr_chunk_extent(t, key, ext);
}

/* Time and memory of output chunk lin of node n (output om, operands' meta
** in `in`): its multiply-adds and tuples costed by the layout weights. */
static void s_task_cost(const ta_plan *p, const ta_node *n, int64_t lin, const tl_weights *w, tm_task *t) {
  const tr_tensor *om = &p->rels[n->out].meta;
  int64_t okey[TR_MAX_RANK], oext[TR_MAX_RANK];
  tr_key_from_linear(om, lin, okey);
  int64_t onel = tr_chunk_extent(om, okey, oext);
  double work = (double)onel, tuples = 1;
  for (int l = n->nout; l < n->nlabels; l++) {
    work *= (double)n->size[l];
    tuples *= (double)((n->size[l] + n->chunk[l] - 1) / n->chunk[l]);
  }
  tl_cost c;
  memset(&c, 0, sizeof c);
  int ops = n->prog.n > 1 ? n->prog.n : 1;
  if (n->gemm) c.c[TL_C_GEMM] = 2 * work;
  else if (n->agg != TK_AGG_NONE) c.c[TL_C_CONTRACT] = work * ops;
  else c.c[TL_C_ELEMWISE] = work * ops;
  c.c[TL_C_ELEMWISE] += (double)onel * n->post.n;
  c.c[TL_C_TASKS] = tuples;
  c.c[TL_C_WRITE] = (double)onel * (double)tr_dtype_size(om->dtype);
  t->time = tl_seconds(w, &c);
  /* streamed: the output chunk and one tuple's operand chunks */
  int64_t mem = onel * (int64_t)tr_dtype_size(om->dtype);
  for (int i = 0; i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    const tr_tensor *it = &p->rels[o->rel].meta;
    int64_t fl = 1;
    for (int d = 0; d < o->rank; d++) fl *= n->chunk[o->label[d]] < it->chunk[d] ? it->chunk[d] : n->chunk[o->label[d]];
    mem += fl * (int64_t)tr_dtype_size(it->dtype);
  }
  t->mem = mem;
}

/* Room for one more edge. */
static int s_edge(di_sched *s, int *cap, int from, int to, double comm) {
  if (s->nedges == *cap) {
    int nc = *cap ? *cap * 2 : 256;
    tm_edge *e = realloc(s->edges, sizeof *e * (size_t)nc);
    if (!e) return TR_ENOMEM;
    s->edges = e;
    *cap = nc;
  }
  s->edges[s->nedges++] = (tm_edge){from, to, comm};
  return TR_OK;
}

/* Edges into task j (output chunk lin of node k) from the tasks that made
** the chunks it reads of relations this plan makes (producer[rel] >= 0). */
static int s_task_edges(di_sched *s, const ta_plan *p, int k, int64_t lin, const int *producer,
                        const tl_weights *w, int *cap) {
  const ta_node *n = &p->nodes[k];
  const tr_tensor *om = &p->rels[n->out].meta;
  int64_t okey[TR_MAX_RANK];
  int j = s->base[k] + (int)lin, first = s->nedges;
  tr_key_from_linear(om, lin, okey);
  for (int i = 0; i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    const tr_tensor *it = &p->rels[o->rel].meta;
    int pk = producer[o->rel];
    if (pk < 0) continue;
    int64_t lo[TR_MAX_RANK], hi[TR_MAX_RANK], key[TR_MAX_RANK];
    /* the box of its chunks the output chunk's tuples read */
    for (int d = 0; d < o->rank; d++) {
      int l = o->label[d];
      int64_t a = l < n->nout ? okey[l] * n->chunk[l] : 0;
      int64_t b = l < n->nout ? a + n->chunk[l] : n->size[l];
      if (b > it->shape[d]) b = it->shape[d];
      lo[d] = key[d] = a / it->chunk[d];
      hi[d] = (b - 1) / it->chunk[d];
    }
    for (;;) {
      int64_t cl = tr_key_linear(it, key);
      tl_cost c;
      memset(&c, 0, sizeof c);
      c.c[TL_C_NET] = (double)s_floats(it, cl);
      int from = s->base[pk] + (int)cl, dup = 0;
      for (int q = first; q < s->nedges && !dup; q++) dup = s->edges[q].from == from;
      if (!dup && s_edge(s, cap, from, j, tl_seconds(w, &c))) return TR_ENOMEM;
      int d = o->rank - 1;
      while (d >= 0 && ++key[d] > hi[d]) {
        key[d] = lo[d];
        d--;
      }
      if (d < 0) break;
    }
  }
  return TR_OK;
}

/* The tasks and edges of plan p. */
static int s_build(di_sched *s, const ta_plan *p, tr_err *err) {
  tl_weights w;
  int producer[TA_MAX_RELS], cap = 0, rc = TR_OK;
  tl_weights_default(&w);
  for (int r = 0; r < TA_MAX_RELS; r++) producer[r] = -1;
  s->ntasks = 0;
  for (int k = 0; k < p->nnodes; k++) {
    int64_t nout = tr_nchunks(&p->rels[p->nodes[k].out].meta);
    if (s->ntasks + nout > DI_SCHED_MAX_TASKS)
      return tr_seterr(err, TR_EINVAL, "the plan has more than %d output chunks to schedule (SET scheduler = "
                       "statement runs it)", DI_SCHED_MAX_TASKS);
    s->base[k] = s->ntasks;
    s->ntasks += (int)nout;
  }
  s->base[p->nnodes] = s->ntasks;
  s->tasks = calloc((size_t)s->ntasks + 1, sizeof *s->tasks);
  s->names = calloc((size_t)s->ntasks + 1, sizeof *s->names);
  s->site_of = calloc((size_t)s->ntasks + 1, sizeof *s->site_of);
  if (!s->tasks || !s->names || !s->site_of) return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int k = 0; !rc && k < p->nnodes; k++) {
    const ta_node *n = &p->nodes[k];
    const tr_tensor *om = &p->rels[n->out].meta;
    for (int64_t lin = 0; !rc && lin < s->base[k + 1] - s->base[k]; lin++) {
      int j = s->base[k] + (int)lin;
      s_task_cost(p, n, lin, &w, &s->tasks[j]);
      snprintf(s->names[j], sizeof s->names[j], "%s#%lld", om->name, (long long)lin);
      s->tasks[j].name = s->names[j];
      rc = s_task_edges(s, p, k, lin, producer, &w, &cap);
    }
    producer[n->out] = k;
  }
  return rc ? tr_seterr(err, TR_ENOMEM, "out of memory") : TR_OK;
}

/* Place tasks [a, b) alone (edges inside the range), starting at t0, into
** the merged schedule; *end is when its last task finishes. */
static int s_wave(di_sched *s, int a, int b, double t0, double *end, tr_err *err) {
  tm_problem pb = {b - a, s->tasks + a, 0, NULL, s->m, s->cap};
  tm_edge *e = malloc(sizeof *e * ((size_t)s->nedges + 1));
  if (!e) return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int q = 0; q < s->nedges; q++)
    if (s->edges[q].from >= a && s->edges[q].to < b && s->edges[q].from < b && s->edges[q].to >= a)
      e[pb.nedges++] = (tm_edge){s->edges[q].from - a, s->edges[q].to - a, s->edges[q].comm};
  pb.edges = e;
  tm_options opt;
  tm_options_init(&opt, s->algo);
  opt.solver_time_limit = s->lp_seconds;
  tm_schedule *ws = NULL;
  int rc = tm_place(&pb, &opt, &ws, err);
  free(e);
  if (rc) return rc;
  tm_schedule *S = s->sched;
  for (int i = 0; i < b - a; i++) {
    S->machine[a + i] = ws->machine[i];
    S->start[a + i] = t0 + ws->start[i];
    S->order[a + i] = a + ws->order[i];
  }
  for (int k = 0; k < s->m; k++)
    if (ws->peak_mem[k] > S->peak_mem[k]) S->peak_mem[k] = ws->peak_mem[k];
  if (ws->solver == TM_SOLVER_FAILED && S->solver != TM_SOLVER_FAILED) {
    S->solver = TM_SOLVER_FAILED;
    S->placed_by = TM_ETF;
    snprintf(S->why, sizeof S->why, "%s", ws->why);
  }
  *end = t0 + ws->makespan;
  tm_schedule_destroy(&ws);
  return TR_OK;
}

/* Place every task, wave by wave (see the top of the file). */
static int s_place_all(di_sched *s, tr_err *err) {
  tm_schedule *S = calloc(1, sizeof *S);
  size_t n1 = (size_t)s->ntasks + 1;
  if (!S || !(S->machine = calloc(n1, sizeof *S->machine)) || !(S->start = calloc(n1, sizeof *S->start)) ||
      !(S->order = calloc(n1, sizeof *S->order)) || !(S->peak_mem = calloc((size_t)s->m, sizeof *S->peak_mem))) {
    tm_schedule_destroy(&S);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  s->sched = S;
  S->ntasks = s->ntasks;
  S->nmachines = s->m;
  S->algo = S->placed_by = s->algo;
  S->solver = s->algo == TM_SCT ? TM_SOLVER_SOLVED : TM_SOLVER_NONE;
  int64_t smallest = s->cap[0], total = 0;
  for (int k = 0; k < s->m; k++) {
    if (s->cap[k] < smallest) smallest = s->cap[k];
    total += s->cap[k];
  }
  for (int j = 0; j < s->ntasks; j++)
    if (s->tasks[j].mem > smallest) {
      s->tasks[j].mem = smallest;
      s->oversize++;
    }
  double t = 0, maxcomm = 0;
  for (int q = 0; q < s->nedges; q++)
    if (s->edges[q].comm > maxcomm) maxcomm = s->edges[q].comm;
  for (int a = 0; a < s->ntasks;) {
    /* the longest run of tasks whose memory the workers hold together */
    int b = a;
    int64_t sum = 0;
    while (b < s->ntasks && sum + s->tasks[b].mem <= total) sum += s->tasks[b++].mem;
    if (b == a) b = a + 1;
    double end = 0;
    tr_err werr;
    int rc;
    while ((rc = s_wave(s, a, b, t, &end, &werr)) == TR_EINVAL && b - a > 1) b = a + (b - a) / 2;
    if (rc) {
      *err = werr;
      return rc;
    }
    s->waves++;
    t = b < s->ntasks ? end + maxcomm : end;
    a = b;
  }
  S->makespan = t;
  return TR_OK;
}

int di_sched_place(di_sched *s, const ta_plan *p, int algo, double lp_seconds, int m, const int64_t *cap,
                   tr_err *err) {
  memset(s, 0, sizeof *s);
  s->which = algo;
  s->lp_seconds = lp_seconds;
  s->algo = s_algos[algo];
  s->m = m;
  for (int k = 0; k < m; k++) s->cap[k] = cap[k] > 0 ? cap[k] : 1;
  int rc = s_build(s, p, err);
  if (!rc) rc = s_place_all(s, err);
  for (int j = 0; !rc && j < s->ntasks; j++) s->site_of[j] = (int8_t)s->sched->machine[j];
  if (rc) di_sched_free(s);
  return rc;
}

/* Per worker: tasks, predicted busy time. */
static void s_per_site(const di_sched *s, int k, int *tasks, double *busy) {
  *tasks = 0;
  *busy = 0;
  for (int j = 0; j < s->ntasks; j++)
    if (s->sched->machine[j] == k) {
      (*tasks)++;
      *busy += s->tasks[j].time;
    }
}

void di_sched_text(const di_sched *s, const char *const *eps, tr_text *out, int json) {
  const tm_schedule *S = s->sched;
  if (json) {
    tr_text_put(out, "\"schedule\": {\"scheduler\": \"%s\", \"placed_by\": \"%s\", \"tasks\": %d, \"edges\": %d, "
                "\"waves\": %d, \"predicted_makespan_s\": %.6f, ", s_names[s->which], tm_algo_name(S->placed_by),
                s->ntasks, s->nedges, s->waves, S->makespan);
    if (S->solver == TM_SOLVER_FAILED) {
      tr_text_put(out, "\"fallback\": \"");
      tr_text_json(out, S->why);
      tr_text_put(out, "\", ");
    }
    tr_text_put(out, "\"per_worker\": [");
    for (int k = 0; k < s->m; k++) {
      int nt;
      double busy;
      s_per_site(s, k, &nt, &busy);
      tr_text_put(out, "%s{\"site\": %d, \"endpoint\": \"", k ? ", " : "", k);
      tr_text_json(out, eps[k]);
      tr_text_put(out, "\", \"tasks\": %d, \"predicted_busy_s\": %.6f, \"memory_bytes\": %lld, "
                  "\"predicted_peak_memory_bytes\": %lld}", nt, busy, (long long)s->cap[k],
                  (long long)S->peak_mem[k]);
    }
    tr_text_put(out, "]}");
    return;
  }
  tr_text_put(out, "Schedule: %s, %d chunk task%s, %d edge%s, %d wave%s; predicted makespan %.3f s\n",
              tm_algo_name(S->placed_by), s->ntasks, s->ntasks == 1 ? "" : "s", s->nedges,
              s->nedges == 1 ? "" : "s", s->waves, s->waves == 1 ? "" : "s", S->makespan);
  if (S->solver == TM_SOLVER_FAILED) tr_text_put(out, "  the LP failed (%s): m-ETF placed the tasks\n", S->why);
  if (s->oversize)
    tr_text_put(out, "  %d task%s need more than the smallest worker's memory: placed as if they fitted\n",
                s->oversize, s->oversize == 1 ? "" : "s");
  for (int k = 0; k < s->m; k++) {
    int nt;
    double busy;
    s_per_site(s, k, &nt, &busy);
    tr_text_put(out, "  worker %d (%s): %d task%s, busy %.3f s, predicted peak memory %lld of %lld bytes\n", k,
                eps[k], nt, nt == 1 ? "" : "s", busy, (long long)S->peak_mem[k], (long long)s->cap[k]);
  }
}

int di_sched_trace(const di_sched *s, const di_event *ev, int nev, char **out, tr_err *err) {
  tm_problem pb = {s->ntasks, s->tasks, s->nedges, s->edges, s->m, s->cap};
  char *pred = NULL;
  int rc = tm_trace_json(&pb, s->sched, &pred, err);
  if (rc) return rc;
  /* The measured tasks go in before the event list closes: worker k
  ** measured is process m + k, named so. */
  const char *tail = strstr(pred, "],\"displayTimeUnit\"");
  tr_text t = {0};
  tr_text_put(&t, "%.*s", (int)(tail - pred), pred);
  for (int k = 0; nev && k < s->m; k++)
    tr_text_put(&t, ",{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                "\"args\":{\"name\":\"machine %d (measured)\"}}", s->m + k, k);
  for (int i = 0; i < nev; i++) {
    tr_text_put(&t, ",{\"name\":\"");
    tr_text_json(&t, ev[i].what);
    tr_text_put(&t, "\",\"cat\":\"measured\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":0}",
                ev[i].start * 1e6, ev[i].dur * 1e6, s->m + ev[i].site);
  }
  tr_text_put(&t, "%s\n", tail);
  free(pred);
  if (!(*out = tr_text_done(&t))) return tr_seterr(err, TR_ENOMEM, "out of memory");
  return TR_OK;
}
