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
** chunk's floats at the network weight.  A chunk of a stored tensor the
** plan reads is a task too, of time and memory 0, pinned to the workers
** that hold it (tm_task.only, an addition to the thesis's model), so a
** task that reads it elsewhere pays its fetch.  The thesis's model has
** every edge's delay overlap the others' (no bandwidth shared), so a task
** that reads many remote chunks pays for one: the prediction is optimistic
** about transfers, and the placement weighs locality that little.
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
#include <strings.h>

const char *const td_sched_names[] = {"statement", "msct", "metf", "mtopo", NULL};
/* TD_SCHED_* as the sched/ algorithm. */
static const tm_algo s_algos[] = {TM_SCT, TM_SCT, TM_ETF, TM_TOPO};

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
** in `in`): its multiply-adds, tuples and the chunk it makes costed by the
** layout weights. */
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
  if (n->gemm) {
    /* each tuple's call packs its operand blocks: the output chunk's
    ** extents along the kept labels, the node's chunk along the summed */
    int64_t box[TK_MAX_LABELS];
    for (int l = 0; l < n->nlabels; l++) box[l] = l < n->nout ? oext[l] : n->chunk[l];
    int64_t lkey[TK_MAX_LABELS] = {0}; /* the output chunk's keys: its tuples' */
    for (int l = 0; l < n->nout; l++) lkey[l] = okey[l];
    c.c[TL_C_GEMM] = 2 * work * ta_gemm_share(n, lkey);
    c.c[TL_C_PACK] = ta_gemm_packed(n, box, NULL) * tuples;
  } else if (n->agg != TK_AGG_NONE) c.c[TL_C_CONTRACT] = work * ops;
  else c.c[TL_C_ELEMWISE] = work * ops;
  c.c[TL_C_ELEMWISE] += (double)onel * n->post.n;
  c.c[TL_C_TASKS] = tuples;
  c.c[TL_C_CHUNKS] = 1;
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

/* The box [lo, hi) of operand i's chunks that output chunk okey of node n
** reads (its tuples'). */
static void s_box(const ta_plan *p, const ta_node *n, int i, const int64_t *okey, int64_t *lo, int64_t *hi) {
  const ta_operand *o = &n->in[i];
  const tr_tensor *it = &p->rels[o->rel].meta;
  int64_t at[TR_MAX_RANK], ext[TR_MAX_RANK];
  for (int d = 0; d < o->rank; d++) {
    int l = o->label[d];
    int64_t a = l < n->nout ? okey[l] * n->chunk[l] : 0;
    int64_t b = l < n->nout ? a + n->chunk[l] : n->size[l];
    at[d] = a;
    ext[d] = (b < it->shape[d] ? b : it->shape[d]) - a;
  }
  tr_chunks_under(it, at, ext, lo, hi);
}

/* Edges into task j (output chunk lin of node k) from the tasks that made
** the chunks it reads: of relations this plan makes (producer[rel] >= 0),
** or the stored chunks' pinned tasks (from[rel] >= 0: the first).  An
** operand read twice (X * X) reads its chunks once: seen[from] == j + 1
** marks an edge made. */
static int s_task_edges(di_sched *s, const ta_plan *p, int k, int64_t lin, const int *producer,
                        const int *from_rel, const tl_weights *w, int *seen, int *cap) {
  const ta_node *n = &p->nodes[k];
  const tr_tensor *om = &p->rels[n->out].meta;
  int64_t okey[TR_MAX_RANK];
  int j = s->base[k] + (int)lin;
  tr_key_from_linear(om, lin, okey);
  for (int i = 0; i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    const tr_tensor *it = &p->rels[o->rel].meta;
    int pk = producer[o->rel], first_from = pk >= 0 ? s->base[pk] : from_rel[o->rel];
    if (first_from < 0) continue;
    int64_t lo[TR_MAX_RANK], hi[TR_MAX_RANK], key[TR_MAX_RANK];
    s_box(p, n, i, okey, lo, hi);
    memcpy(key, lo, sizeof key);
    for (;;) {
      int64_t cl = tr_key_linear(it, key);
      tl_cost c;
      memset(&c, 0, sizeof c);
      c.c[TL_C_NET] = (double)s_floats(it, cl);
      int from = first_from + (int)cl;
      if (seen[from] != j + 1) {
        seen[from] = j + 1;
        if (s_edge(s, cap, from, j, tl_seconds(w, &c))) return TR_ENOMEM;
      }
      if (!tr_key_next(o->rank, key, lo, hi)) break;
    }
  }
  return TR_OK;
}

int di_sched_sizable(const ta_plan *p) {
  int64_t tasks = 0, edges = 0;
  int seen[TA_MAX_RELS] = {0};
  for (int k = 0; k < p->nnodes; k++) seen[p->nodes[k].out] = 1;
  for (int k = 0; k < p->nnodes; k++) {
    tasks += tr_nchunks(&p->rels[p->nodes[k].out].meta);
    for (int i = 0; i < p->nodes[k].ninputs; i++) {
      int r = p->nodes[k].in[i].rel;
      if (!seen[r]) tasks += tr_nchunks(&p->rels[r].meta);
      seen[r] = 1;
    }
  }
  if (tasks > DI_SCHED_MAX_GRAPH_TASKS) return 0;
  /* each output chunk's edges: the boxes of operand chunks it reads (an
  ** operand read twice counted twice: at most what s_task_edges makes) */
  for (int k = 0; k < p->nnodes; k++) {
    const ta_node *n = &p->nodes[k];
    const tr_tensor *om = &p->rels[n->out].meta;
    for (int64_t lin = 0; lin < tr_nchunks(om); lin++) {
      int64_t okey[TR_MAX_RANK], lo[TR_MAX_RANK], hi[TR_MAX_RANK];
      tr_key_from_linear(om, lin, okey);
      for (int i = 0; i < n->ninputs; i++) {
        int64_t box = 1;
        s_box(p, n, i, okey, lo, hi);
        for (int d = 0; d < n->in[i].rank; d++) box *= hi[d] - lo[d];
        if ((edges += box) > DI_SCHED_MAX_EDGES) return 0;
      }
    }
  }
  return 1;
}

/* The pinned tasks of the stored chunks the plan reads: time 0, memory 0,
** on the workers that hold them (pl), so a task that reads a chunk costs
** its fetch unless it runs where the chunk is.  from[rel] is the first of
** rel's, -1 for relations the plan makes. */
static void s_sources(di_sched *s, const ta_plan *p, const to_placed *pl, const int *producer, int *from) {
  for (int r = 0; r < TA_MAX_RELS; r++) from[r] = -1;
  s->nsrc = 0;
  for (int k = 0; k < p->nnodes; k++)
    for (int i = 0; i < p->nodes[k].ninputs; i++) {
      int r = p->nodes[k].in[i].rel;
      if (producer[r] >= 0 || from[r] >= 0) continue;
      from[r] = s->nsrc;
      s->nsrc += (int)tr_nchunks(&p->rels[r].meta);
    }
}

/* The tasks and edges of plan p (pl: where its stored inputs are). */
static int s_build(di_sched *s, const ta_plan *p, const to_placed *pl, const tl_weights *w, tr_err *err) {
  int producer[TA_MAX_RELS], from[TA_MAX_RELS], cap = 0, rc = TR_OK;
  for (int r = 0; r < TA_MAX_RELS; r++) producer[r] = -1;
  for (int k = 0; k < p->nnodes; k++) producer[p->nodes[k].out] = k;
  s_sources(s, p, pl, producer, from);
  s->ntasks = s->nsrc;
  for (int k = 0; k < p->nnodes; k++) {
    s->base[k] = s->ntasks;
    s->ntasks += (int)tr_nchunks(&p->rels[p->nodes[k].out].meta);
  }
  s->base[p->nnodes] = s->ntasks;
  s->tasks = calloc((size_t)s->ntasks + 1, sizeof *s->tasks);
  s->names = calloc((size_t)s->ntasks + 1, sizeof *s->names);
  s->site_of = calloc((size_t)s->ntasks + 1, sizeof *s->site_of);
  int *seen = calloc((size_t)s->ntasks + 1, sizeof *seen);
  if (!s->tasks || !s->names || !s->site_of || !seen) {
    free(seen);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  for (int r = 0; r < TA_MAX_RELS; r++)
    for (int64_t lin = 0; from[r] >= 0 && lin < tr_nchunks(&p->rels[r].meta); lin++) {
      int j = from[r] + (int)lin;
      snprintf(s->names[j], sizeof s->names[j], "%s#%lld (stored)", p->rels[r].meta.name, (long long)lin);
      s->tasks[j].name = s->names[j];
      /* a chunk no live worker holds fails the run later; here it may go anywhere */
      s->tasks[j].only = pl[r].n > lin ? pl[r].has[lin] : 0;
    }
  for (int k = 0; !rc && k < p->nnodes; k++) {
    const ta_node *n = &p->nodes[k];
    const tr_tensor *om = &p->rels[n->out].meta;
    for (int64_t lin = 0; !rc && lin < s->base[k + 1] - s->base[k]; lin++) {
      int j = s->base[k] + (int)lin;
      s_task_cost(p, n, lin, w, &s->tasks[j]);
      snprintf(s->names[j], sizeof s->names[j], "%s#%lld", om->name, (long long)lin);
      s->tasks[j].name = s->names[j];
      rc = s_task_edges(s, p, k, lin, producer, from, w, seen, &cap);
    }
  }
  free(seen);
  return rc ? tr_seterr(err, TR_ENOMEM, "out of memory") : TR_OK;
}

/* Place tasks [a, b) with the stored chunks' pinned tasks [0, nsrc) (edges
** among them; earlier waves' outputs are in place by then), starting at
** t0, into the merged schedule; *end is when its last task finishes. */
static int s_wave(di_sched *s, int a, int b, double t0, double *end, tr_err *err) {
  int ns = s->nsrc, n = ns + b - a;
  tm_problem pb = {n, NULL, 0, NULL, s->m, s->cap};
  tm_task *t = malloc(sizeof *t * ((size_t)n + 1));
  tm_edge *e = malloc(sizeof *e * ((size_t)s->nedges + 1));
  if (!t || !e) {
    free(t);
    free(e);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  memcpy(t, s->tasks, sizeof *t * (size_t)ns);
  memcpy(t + ns, s->tasks + a, sizeof *t * (size_t)(b - a));
  /* task g of the graph is ns + g - a here (g >= a), or g (a stored chunk) */
  for (int q = 0; q < s->nedges; q++) {
    const tm_edge *d = &s->edges[q];
    if (d->to >= a && d->to < b && (d->from < ns || (d->from >= a && d->from < b)))
      e[pb.nedges++] = (tm_edge){d->from < ns ? d->from : ns + d->from - a, ns + d->to - a, d->comm};
  }
  pb.tasks = t;
  pb.edges = e;
  tm_options opt;
  tm_options_init(&opt, s->algo);
  opt.solver_time_limit = s->lp_seconds;
  tm_schedule *ws = NULL;
  int rc = tm_place(&pb, &opt, &ws, err);
  free(t);
  free(e);
  if (rc) return rc;
  tm_schedule *S = s->sched;
  for (int i = 0; i < n; i++) {
    int g = i < ns ? i : a + i - ns;
    if (i < ns && a > ns) continue; /* the first wave places them */
    S->machine[g] = ws->machine[i];
    S->start[g] = (i < ns ? 0 : t0) + ws->start[i];
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

/* The schedule's tasks by start time, ties by index (a topological order:
** a task starts no earlier than its predecessors, zero-time ones at once). */
static int s_start_cmp(const void *x, const void *y, void *arg) {
  const tm_schedule *S = arg;
  int i = *(const int *)x, j = *(const int *)y;
  double a = S->start[i], b = S->start[j];
  return a < b ? -1 : a > b ? 1 : (i > j) - (i < j);
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
  for (int a = s->nsrc; a < s->ntasks;) {
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
  for (int j = 0; j < s->ntasks; j++) S->order[j] = j;
  qsort_r(S->order, (size_t)s->ntasks, sizeof *S->order, s_start_cmp, S);
  return TR_OK;
}

int di_sched_place(di_sched *s, const ta_plan *p, const to_placed *pl, const tl_weights *w, int which,
                   double lp_seconds, int m, const int64_t *cap, tr_err *err) {
  memset(s, 0, sizeof *s);
  s->which = which;
  s->lp_seconds = lp_seconds;
  s->algo = s->asked = s_algos[which];
  s->m = m;
  for (int k = 0; k < m; k++) s->cap[k] = cap[k] > 0 ? cap[k] : 1;
  int rc = s_build(s, p, pl, w, err);
  /* m-SCT's LP and m-ETF's list grow with the square of the tasks or
  ** worse: a larger graph is placed by m-TOPO (linear, but for the heap
  ** of its list) */
  if (s->ntasks > DI_SCHED_MAX_TASKS) s->algo = TM_TOPO;
  if (!rc) rc = s_place_all(s, err);
  for (int j = 0; !rc && j < s->ntasks; j++) s->site_of[j] = (int8_t)s->sched->machine[j];
  if (rc) di_sched_free(s);
  return rc;
}

void di_plan_peak(const ta_plan *p, const to_opt *opt, int m, int64_t *peak) {
  for (int u = 0; u < m; u++) peak[u] = 0;
  for (int k = 0; k < p->nnodes; k++) {
    const ta_node *n = &p->nodes[k];
    const to_moves *mv = &opt->moves[k];
    int64_t node[TO_MAX_SITES] = {0};
    for (int i = 0; i < n->ninputs; i++) {
      const tr_tensor *it = &p->rels[n->in[i].rel].meta;
      int all = opt->choice[k].mv[i] == TO_MV_BCAST; /* every site takes every chunk */
      for (int64_t cl = 0; mv->need[i] && cl < tr_nchunks(it); cl++) {
        int64_t b = s_floats(it, cl) * (int64_t)tr_dtype_size(it->dtype);
        for (int u = 0; u < m; u++)
          if (all || (mv->need[i][cl] >> u & 1)) node[u] += b;
      }
    }
    const tr_tensor *om = &p->rels[n->out].meta;
    for (int64_t lin = 0; mv->osites && lin < tr_nchunks(om); lin++)
      for (int u = 0; u < m; u++)
        if (mv->osites[lin] >> u & 1) node[u] += s_floats(om, lin) * (int64_t)tr_dtype_size(om->dtype);
    for (int u = 0; u < m; u++)
      if (node[u] > peak[u]) peak[u] = node[u];
  }
}

/* Per worker: tasks, predicted busy time. */
static void s_per_site(const di_sched *s, int k, int *tasks, double *busy) {
  *tasks = 0;
  *busy = 0;
  for (int j = s->nsrc; j < s->ntasks; j++)
    if (s->sched->machine[j] == k) {
      (*tasks)++;
      *busy += s->tasks[j].time;
    }
}

void di_sched_text(const di_sched *s, const char *const *eps, tr_text *out, int json) {
  const tm_schedule *S = s->sched;
  if (json) {
    tr_text_put(out, "\"schedule\": {\"scheduler\": \"%s\", \"placed_by\": \"%s\", \"tasks\": %d, "
                "\"stored_chunks\": %d, \"edges\": %d, \"waves\": %d, \"predicted_makespan_s\": %.6f, ",
                td_sched_names[s->which], tm_algo_name(S->placed_by), s->ntasks - s->nsrc, s->nsrc, s->nedges, s->waves,
                S->makespan);
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
  int all = s->ntasks - s->nsrc;
  tr_text_put(out, "Schedule: %s, %d chunk task%s reading %d stored chunk%s, %d edge%s, %d wave%s; "
              "predicted makespan %.3f s\n", tm_algo_name(S->placed_by), all, all == 1 ? "" : "s", s->nsrc,
              s->nsrc == 1 ? "" : "s", s->nedges, s->nedges == 1 ? "" : "s", s->waves, s->waves == 1 ? "" : "s",
              S->makespan);
  tr_text_put(out, "  each output chunk runs where its task is placed, and operand chunks go to the workers "
              "whose tasks read them (not the IA plan's moves)\n");
  if (S->solver == TM_SOLVER_FAILED) tr_text_put(out, "  the LP failed (%s): m-ETF placed the tasks\n", S->why);
  if (s->algo != s->asked)
    tr_text_put(out, "  %s places at most %d tasks: %s placed these\n", tm_algo_name(s->asked),
                DI_SCHED_MAX_TASKS, tm_algo_name(s->algo));
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
  /* the chunk tasks only: the stored chunks' pinned tasks do nothing */
  const tm_schedule *S = s->sched;
  int nt = s->ntasks - s->nsrc, q = 0;
  tm_problem pb = {nt, s->tasks + s->nsrc, 0, NULL, s->m, s->cap};
  tm_schedule v = *S;
  v.ntasks = nt;
  v.machine = S->machine + s->nsrc;
  v.start = S->start + s->nsrc;
  v.favourite = NULL;
  if (!(v.order = malloc(sizeof *v.order * ((size_t)nt + 1)))) return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int i = 0; i < s->ntasks; i++)
    if (S->order[i] >= s->nsrc) v.order[q++] = S->order[i] - s->nsrc;
  char *pred = NULL;
  int rc = tm_trace_json(&pb, &v, &pred, err);
  free(v.order);
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
