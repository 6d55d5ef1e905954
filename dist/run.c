/*
** dist/run.c - running a plan on the workers as the optimizer chose: the
** moves of each node's operands, one fused local join + aggregation + map
** task per site, partials shuffled and combined, outputs replicated and
** committed, damaged copies routed around; and FILL.
*/
#include "config.h"
#include "dist/dist_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Where the chunks of one plan relation are during a run. */
typedef struct s_prel {
  tc_chunkloc *locs;   /* per chunk: id, size, checksum, sites (catalog ids) */
  int64_t n;           /* chunks */
  uint8_t *copy;       /* [site * n + lin]: a transient copy was sent there */
  int made;            /* chunks made by this run (temporaries, output) */
  int committed;       /* an output already made visible */
} s_prel;

/* One IA operator as measured, for EXPLAIN ANALYZE. */
#define S_OP_SITES 64 /* sites broken down per operator */

typedef struct s_opstat {
  char op[16];          /* bcast, shuffle, local_filter, local_map, local_join,
                           local_agg, replicate, commit */
  char what[96];        /* relation, and for fused steps what they do */
  int fused;            /* runs inside the local_join task: not timed apart */
  int64_t floats;       /* moved */
  int64_t tasks;        /* tasks run */
  double seconds;       /* wall time of the phase */
  int64_t site_in[S_OP_SITES], site_out[S_OP_SITES]; /* floats per site */
  int64_t site_tasks[S_OP_SITES];                    /* tasks per site */
  double site_s[S_OP_SITES];                         /* task time per site */
} s_opstat;

struct td_run {
  td_cluster *c;                /* the coordinator */
  ta_plan *p;                   /* plan */
  int run;                      /* 0: only explained, nothing runs */
  int cleaned;                  /* temporaries dropped (td_run_exec ran) */
  double t0, t1;                /* when td_run_begin started, when the run ended */
  double texec;                 /* when td_run_exec started: t1 - texec is the makespan */
  s_prel rel[TA_MAX_RELS];      /* placement of every relation */
  to_placed pl[TA_MAX_RELS];    /* the same as site-position masks */
  int up[256], m;               /* live sites */
  s_opstat *ops;                /* measured operators: S_MAX_OPS, each zeroed
                                   when s_op takes it (2 MB in all: zeroing
                                   them was a tenth of the shell's time on a
                                   short statement) */
  double node_s[TA_MAX_NODES];  /* measured seconds of each node, its commit included */
  int group[TA_MAX_NODES];      /* the first node of the group each ran in (to_group_end) */
  int nops;                     /* used */
  uint64_t *drop;               /* ids to drop at the end (per site in drop_site) */
  int *drop_site;               /* site of each (-1: every site) */
  int64_t ndrop, capdrop;       /* count, allocated */
  di_sched sched;               /* the task graph's placement (td_run_schedule);
                                   sched.sched NULL: the optimizer's plan */
  to_env env;                   /* what the plan was optimized for */
  int which;                    /* TD_SCHED_* the database is set to */
  int64_t cap[TO_MAX_SITES];    /* each live site's --memory */
  int64_t plan_peak[TO_MAX_SITES]; /* the optimizer's plan's working set on each */
  int over;                     /* a site the plan does not fit (-1: none) */
  double phase_t0;              /* when the tasks of the current phase were sent */
  di_event *ev;                 /* the tasks run, as measured (FORMAT TRACE) */
  int nev, capev;               /* used, allocated */
};

typedef struct td_run s_run;

#define S_MAX_OPS (TA_MAX_NODES * (3 * TK_MAX_INPUTS + 4) + 2)

/* A zeroed run with room for its operators (freed by s_run_free and
** free), or NULL. */
static s_run *s_run_new(void) {
  s_run *R = calloc(1, sizeof *R);
  if (R && !(R->ops = malloc(sizeof *R->ops * S_MAX_OPS))) {
    free(R);
    R = NULL;
  }
  return R;
}

static s_opstat *s_op(s_run *R, const char *op, const char *what, int fused) {
  s_opstat *os = &R->ops[R->nops++];
  memset(os, 0, sizeof *os);
  snprintf(os->op, sizeof os->op, "%s", op);
  snprintf(os->what, sizeof os->what, "%s", what);
  os->fused = fused;
  return os;
}

/* Count floats moved from site src to site dst by operator os. */
static void s_moved(s_run *R, s_opstat *os, int src, int dst, int64_t fl) {
  R->c->sites[src].floats_out += fl;
  R->c->sites[dst].floats_in += fl;
  if (!os) return;
  os->floats += fl;
  if (src < S_OP_SITES) os->site_out[src] += fl;
  if (dst < S_OP_SITES) os->site_in[dst] += fl;
}

static int s_note_drop(s_run *R, int site, uint64_t id) {
  if (R->ndrop == R->capdrop) {
    int64_t cap = R->capdrop ? R->capdrop * 2 : 256;
    uint64_t *d = realloc(R->drop, sizeof *d * (size_t)cap);
    int *ds = d ? realloc(R->drop_site, sizeof *ds * (size_t)cap) : NULL;
    if (d) R->drop = d;
    if (!ds) return TR_ENOMEM;
    R->drop_site = ds;
    R->capdrop = cap;
  }
  R->drop[R->ndrop] = id;
  R->drop_site[R->ndrop++] = site;
  return TR_OK;
}

/* Replicas of what site position u makes: the next r-1 live sites, and
** how each of them and site u keep the outputs (di_keep_at, holders in
** the order s_note_reps records them).  The worker pushes each output
** chunk to them as soon as it is made, so replication overlaps the
** computation. */
static void s_task_reps(s_run *R, int u, tx_task *task) {
  int r = di_replication(R->c, R->m), full = di_sync_full(R->c);
  int64_t ids[TC_MAX_REPLICAS];
  for (int j = 0; j < r; j++) ids[j] = R->c->sites[R->up[(u + j) % R->m]].id;
  task->nrep = r - 1;
  task->keep = di_keep_at(R->c, full, ids, r, 0);
  for (int j = 1; j < r; j++) {
    snprintf(task->rep[j - 1], sizeof task->rep[j - 1], "%s", R->c->sites[R->up[(u + j) % R->m]].ep);
    task->rep_keep[j - 1] = di_keep_at(R->c, full, ids, r, j);
  }
}

/* Record the replicas a task's pushes made, and count their transfer. */
static void s_note_reps(s_run *R, int u, tc_chunkloc *loc, tr_dtype dt, s_opstat *os) {
  td_cluster *c = R->c;
  int r = di_replication(c, R->m);
  int64_t fl = (int64_t)(loc->nbytes / tr_dtype_size(dt));
  for (int j = 1; j < r; j++) {
    int dst = R->up[(u + j) % R->m];
    loc->site[loc->nsites++] = c->sites[dst].id;
    s_moved(R, os, R->up[u], dst, fl);
  }
}

/* Remember a task of `what` that the site at position u ran for secs,
** sent at the phase's start (best effort: the trace only loses it). */
static void s_note_event(s_run *R, const char *what, int u, double secs) {
  if (R->nev == R->capev) {
    int cap = R->capev ? 2 * R->capev : 64;
    di_event *e = realloc(R->ev, sizeof *e * (size_t)cap);
    if (!e) return;
    R->ev = e;
    R->capev = cap;
  }
  di_event *e = &R->ev[R->nev++];
  snprintf(e->what, sizeof e->what, "%s", what);
  e->site = u;
  e->start = R->phase_t0 - R->texec;
  e->dur = secs;
}

/* What a task's reply lists chunks of: a relation's chunk list (pr NULL:
** none kept, as for partials), their type, and whether they were
** replicated (counted in rs). */
typedef struct s_made {
  s_prel *pr;
  tr_dtype dt;
  int replicate;
  s_opstat *rs;
} s_made;

/* What site st's task reply says of its background writes (why: "" when
** they succeed): a notice when they start failing (the chunks it holds in
** memory only are not reaching its disk, and a stop loses them) and when
** they succeed again. */
static void s_write_trouble(td_cluster *c, int st, const char *why) {
  td_site *site = &c->sites[st];
  if (why[0] && !site->write_trouble)
    td_notice(c, "worker %s cannot write what it holds in memory only to its disk (%s): free room "
              "there, or what it holds is lost if it stops first", site->ep, why);
  else if (!why[0] && site->write_trouble)
    td_notice(c, "worker %s writes to its disk again", site->ep);
  site->write_trouble = why[0] != '\0';
}

/* Apply the TASK_OK replies i0..i1 of ph to the chunks of made[0..nmade)
** (nmade 1, or 2 for a task with a consumer inside it: two relations'
** chunks): sizes, checksums, and the replicas each worker pushed; and the
** counters and write trouble the rest of each says (its body: worker/jobs.c,
** s_run_task). */
static void s_task_results(s_run *R, di_phase *ph, int i0, int i1, const s_made *made, int nmade,
                           s_opstat *js) {
  td_cluster *c = R->c;
  for (int i = i0; i < i1; i++) {
    tn_rbuf r;
    int u = 0;
    while (R->up[u] != ph->out[i].site) u++;
    di_reply_body(ph, i, &r);
    uint32_t cnt = tn_get_count(&r, 25);
    int64_t hint[2] = {0, 0};
    for (uint32_t j = 0; j < cnt; j++) {
      tn_chunk ck;
      tn_get_chunk(&r, &ck);
      int found = 0;
      for (int t = 0; t < nmade && !found; t++) {
        s_prel *pr = made[t].pr;
        /* replies list chunks in task order: search on from the last one */
        for (int64_t k = 0; pr && k < pr->n; k++) {
          tc_chunkloc *loc = &pr->locs[(hint[t] + k) % pr->n];
          if (loc->chunk_id != ck.id) continue;
          loc->nbytes = ck.nbytes;
          loc->checksum = ck.checksum;
          if (made[t].replicate) s_note_reps(R, u, loc, made[t].dt, made[t].rs);
          hint[t] = (hint[t] + k + 1) % pr->n;
          found = 1;
          break;
        }
      }
    }
    double secs = tn_get_f64(&r);
    int st = ph->out[i].site;
    tn_get_str(&r, c->sites[st].kernels, sizeof c->sites[st].kernels);
    c->sites[st].h2d += tn_get_u64(&r);
    c->sites[st].d2h += tn_get_u64(&r);
    c->sites[st].copy_s += tn_get_f64(&r);
    c->cpu_user += tn_get_f64(&r);
    c->cpu_sys += tn_get_f64(&r);
    int64_t peak = (int64_t)tn_get_u64(&r);
    if (peak > c->sites[st].peak_rss) c->sites[st].peak_rss = peak;
    char why[256];
    tn_get_str(&r, why, sizeof why);
    uint64_t room = tn_get_u64(&r);
    if (tn_rbuf_ok(&r) == TR_OK) {
      s_write_trouble(c, st, why);
      di_disk_said(&c->sites[st], room);
    }
    c->sites[st].busy_s += secs;
    c->sites[st].tasks++;
    if (js) s_note_event(R, js->what, u, secs);
    if (js) {
      js->tasks++;
      if (st < S_OP_SITES) {
        js->site_tasks[st]++;
        js->site_s[st] += secs;
      }
    }
  }
}

/* Room in task t for nin input and nout output chunk entries. */
static int s_task_lists(tx_task *t, int64_t nin, int64_t nout, tr_err *err) {
  t->in_op = calloc((size_t)nin + 1, sizeof *t->in_op);
  t->in_lin = calloc((size_t)nin + 1, sizeof *t->in_lin);
  t->in_id = calloc((size_t)nin + 1, sizeof *t->in_id);
  t->in_wait = calloc((size_t)nin + 1, sizeof *t->in_wait);
  t->out_lin = calloc((size_t)nout + 1, sizeof *t->out_lin);
  t->out_id = calloc((size_t)nout + 1, sizeof *t->out_id);
  if (t->in_op && t->in_lin && t->in_id && t->in_wait && t->out_lin && t->out_id) return TR_OK;
  tx_task_free(t);
  return tr_seterr(err, TR_ENOMEM, "out of memory");
}

/* How task t for site position u keeps its outputs: with `reps`, pushed
** to the replica sites too. */
static void s_task_keep(s_run *R, tx_task *t, int reps, int u) {
  /* What is not replicated is not committed either: partials, a plan's
  ** intermediates, zeros standing in for declared-only tensors. */
  if (reps)
    s_task_reps(R, u, t);
  else
    t->keep = TC_KEEP_SCRATCH;
}

/* Send task t to site position u if it makes anything (with `reps`, its
** outputs are also pushed to the replica sites; a fused consumer's keep
** is set already); frees t's lists. */
static int s_task_submit(s_run *R, di_phase *ph, tx_task *t, int reps, int u, tr_err *err) {
  int rc = TR_OK;
  s_task_keep(R, t, reps, u);
  if (t->nout) {
    tn_wbuf b = {0};
    tx_task_encode(t, &b);
    rc = di_request(ph, R->up[u], TN_TASK, &b, 0, NULL, NULL, NULL, err);
    /* progress: chunk by chunk, as the worker stores them */
    if (!rc) ph->out[ph->n - 1].units = t->nout * (t->then && t->then_store ? 2 : 1);
    tn_wbuf_free(&b);
  }
  tx_task_free(t);
  return rc;
}

/* Run FILL tasks: chunk lin of t on site up[lin % m]. */
static int s_fill_tasks(s_run *R, const tr_tensor *t, const tx_fill *f, s_prel *pr, int replicate,
                        tr_err *err) {
  td_cluster *c = R->c;
  int64_t n = tr_nchunks(t);
  di_phase ph;
  int rc = TR_OK;
  pr->n = n;
  pr->made = 1;
  if (!(pr->locs = calloc((size_t)n + 1, sizeof *pr->locs))) return tr_seterr(err, TR_ENOMEM, "out of memory");
  di_phase_init(&ph, c);
  ph.watch_all = 1; /* tasks push replicas to peers */
  for (int k = 0; k < R->m && !rc; k++) {
    tx_task task;
    memset(&task, 0, sizeof task);
    task.kind = TX_TASK_FILL;
    task.f = *f;
    task.out_meta = *t;
    if ((rc = s_task_lists(&task, 0, n / R->m + 1, err))) break;
    for (int64_t lin = k; lin < n; lin += R->m) {
      pr->locs[lin].lin = lin;
      pr->locs[lin].chunk_id = tc_new_chunk_id();
      pr->locs[lin].nsites = 1;
      pr->locs[lin].site[0] = c->sites[R->up[k]].id;
      task.out_lin[task.nout] = lin;
      task.out_id[task.nout++] = pr->locs[lin].chunk_id;
    }
    rc = s_task_submit(R, &ph, &task, replicate, k, err);
  }
  if (!rc) rc = di_wait(&ph, err);
  if (!rc) s_task_results(R, &ph, 0, ph.n, &(s_made){pr, t->dtype, replicate, NULL}, 1, NULL);
  di_phase_free(&ph);
  return rc;
}

/* Send the chunks of pr that `need` says must reach sites not holding
** them (from a live holder); each send counted in os. */
static int s_plan_sends(s_run *R, s_prel *pr, const tr_tensor *t, const uint64_t *need,
                        s_opstat *os, tn_wbuf *sends, uint32_t *nsend, tr_err *err) {
  td_cluster *c = R->c;
  if (!pr->copy && !(pr->copy = calloc((size_t)c->nsites * (size_t)pr->n + 1, 1)))
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int u = 0; u < R->m; u++) {
    int su = R->up[u];
    for (int64_t lin = 0; lin < pr->n; lin++) {
      if (!(need[lin] & (1ull << u))) continue;
      tc_chunkloc *loc = &pr->locs[lin];
      if (di_has(loc, c->sites[su].id) || pr->copy[(size_t)su * (size_t)pr->n + (size_t)lin]) continue;
      int src = di_holder(c, t, loc);
      if (src < 0) return di_unreadable(t, loc, NULL, err);
      pr->copy[(size_t)su * (size_t)pr->n + (size_t)lin] = 1;
      tn_put_u64(&sends[src], loc->chunk_id);
      tn_put_str(&sends[src], c->sites[su].ep);
      nsend[src]++;
      s_moved(R, os, src, su, (int64_t)(loc->nbytes / tr_dtype_size(t->dtype)));
      if (s_note_drop(R, su, loc->chunk_id)) return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
  }
  return TR_OK;
}

/* Task *t of node n for site position u (site index su): over the chunks
** of each operand that `need` sends to u (but operand skip, -1 for none),
** making the output chunks `mine` selects with ids ids[lin].  A chunk
** copied to su for this statement may be arriving while the task runs
** (its SEND goes in the task's phase): the task waits for it. */
static int s_make_task(const ta_node *n, const tr_tensor *const *in_meta, s_prel *const *in,
                       uint64_t *const *need, int skip, const tr_tensor *om, int64_t nout,
                       const uint8_t *mine, const uint64_t *ids, int u, int su, tx_task *t, tr_err *err) {
  int rc;
  memset(t, 0, sizeof *t);
  t->kind = TX_TASK_NODE;
  t->node = *n;
  t->out_meta = *om;
  int64_t cap_in = 0;
  for (int i = 0; i < n->ninputs; i++) {
    t->in_meta[i] = *in_meta[i];
    cap_in += in[i]->n;
  }
  if ((rc = s_task_lists(t, cap_in, nout, err))) return rc;
  for (int i = 0; i < n->ninputs; i++)
    for (int64_t lin = 0; i != skip && lin < in[i]->n; lin++)
      if (need[i][lin] & (1ull << u)) {
        t->in_op[t->nin] = i;
        t->in_lin[t->nin] = lin;
        t->in_wait[t->nin] = in[i]->copy && in[i]->copy[(size_t)su * (size_t)in[i]->n + (size_t)lin];
        t->in_id[t->nin++] = in[i]->locs[lin].chunk_id;
      }
  for (int64_t lin = 0; lin < nout; lin++)
    if (mine[lin]) {
      t->out_lin[t->nout] = lin;
      t->out_id[t->nout++] = ids[lin];
    }
  return TR_OK;
}

/* Run node k as the optimizer chose: move operand chunks where the
** choice needs them (BCAST, SHUF), one fused join/aggregate/map task per
** site, and for a two-phase aggregation the partials pushed by those
** tasks to their owners and a combine task there. */
/* One node being run: its choice and moves, and what its steps share. */
typedef struct s_nrun {
  int k;                     /* node */
  const to_choice *ch;       /* as run */
  const to_moves *moves;     /* as run */
  uint64_t *pids;            /* [nout x m] partial ids (two-phase) */
  uint8_t *mine;             /* [nout] scratch: the chunks one site makes */
  uint64_t *ids;             /* [nout] scratch: their ids */
  s_opstat *js, *rs;         /* its join and replication operators */
  s_opstat *ss, *cs, *crs;   /* two-phase: the partials' shuffle, the
                                combine and its replication operators */
  int r0, r1;                /* its requests in the task phase */
  int c0, c1;                /* two-phase: its combine tasks' requests */
  struct s_nrun *then;       /* the node run inside its tasks, or NULL */
  struct s_nrun *into;       /* the node inside whose tasks it runs, or NULL */
  int from;                  /* with into: its operand that reads into's chunks */
  int store;                 /* with into: into's chunks are stored too */
} s_nrun;

static void s_nrun_free(s_nrun *nr) {
  free(nr->pids);
  free(nr->mine);
  free(nr->ids);
  nr->pids = NULL;
  nr->mine = NULL;
  nr->ids = NULL;
}

/* Node step 1: its output chunks' ids and owners, and the moves of its
** operands added to the SEND batches. */
static int s_node_moves(s_run *R, s_nrun *nr, tn_wbuf *sends, uint32_t *nsend, tr_err *err) {
  td_cluster *c = R->c;
  ta_plan *p = R->p;
  ta_node *n = &p->nodes[nr->k];
  s_prel *po = &R->rel[n->out];
  int64_t nout = tr_nchunks(&p->rels[n->out].meta);
  int rc = TR_OK;
  po->n = nout;
  po->made = 1;
  nr->pids = calloc((size_t)nout * (size_t)R->m + 1, sizeof *nr->pids);
  nr->mine = calloc((size_t)nout + 1, 1);
  nr->ids = calloc((size_t)nout + 1, sizeof *nr->ids);
  if (!(po->locs = calloc((size_t)nout + 1, sizeof *po->locs)) || !nr->pids || !nr->mine || !nr->ids)
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int64_t lin = 0; lin < nout; lin++) {
    po->locs[lin].lin = lin;
    po->locs[lin].chunk_id = tc_new_chunk_id();
    po->locs[lin].nsites = 1;
    po->locs[lin].site[0] = c->sites[R->up[nr->moves->owner[lin]]].id;
  }
  for (int i = 0; !rc && i < n->ninputs; i++) {
    const ta_operand *o = &n->in[i];
    const tr_tensor *it = &p->rels[o->rel].meta;
    int diag = 0, rechunk = 0;
    for (int d = 0; d < o->rank; d++) {
      rechunk |= it->chunk[d] != n->chunk[o->label[d]];
      for (int d2 = d + 1; d2 < o->rank; d2++) diag |= o->label[d] == o->label[d2];
    }
    char what[96];
    s_opstat *os = NULL;
    if (nr->ch->mv[i] != TO_MV_KEEP) os = s_op(R, nr->ch->mv[i] == TO_MV_BCAST ? "bcast" : "shuffle", it->name, 0);
    snprintf(what, sizeof what, "%s (diagonal keys)", it->name);
    if (diag) s_op(R, "local_filter", what, 1);
    snprintf(what, sizeof what, "%s (re-chunk: tile + concat)", it->name);
    if (rechunk) s_op(R, "local_map", what, 1);
    rc = s_plan_sends(R, &R->rel[o->rel], it, nr->moves->need[i], os, sends, nsend, err);
  }
  return rc;
}

/* Node e (e->into set) as the part of its producer's task *t for site
** position u that makes, from each output chunk mine selects, e's chunk of
** the same number (tx_task.then). */
static int s_then_task(s_run *R, const s_nrun *e, const uint8_t *mine, int u, tx_task *t, tr_err *err) {
  const ta_plan *p = R->p;
  const ta_node *n = &p->nodes[e->k];
  const tr_tensor *in_meta[TK_MAX_INPUTS];
  s_prel *in[TK_MAX_INPUTS];
  s_prel *po = &R->rel[n->out];
  for (int i = 0; i < n->ninputs; i++) {
    in_meta[i] = &p->rels[n->in[i].rel].meta;
    in[i] = &R->rel[n->in[i].rel];
  }
  for (int64_t lin = 0; lin < po->n; lin++) e->ids[lin] = po->locs[lin].chunk_id;
  ta_node tn = *n;
  tn.drive = -1; /* every chunk it reads is listed */
  tx_task *c = calloc(1, sizeof *c);
  if (!c) return tr_seterr(err, TR_ENOMEM, "out of memory");
  int rc = s_make_task(&tn, in_meta, in, e->moves->need, e->from, &p->rels[n->out].meta, po->n, mine, e->ids,
                       u, R->up[u], c, err);
  if (rc) {
    free(c);
    return rc;
  }
  s_task_keep(R, c, p->rels[n->out].kind == TA_REL_OUTPUT, u);
  t->then = c;
  t->then_from = e->from;
  t->then_store = e->store;
  return TR_OK;
}

/* Task t of a two-phase node for site position u pushes each partial it
** makes to the owner of its chunk, unless that is u (s_combine_tasks). */
static int s_partials_to(s_run *R, const s_nrun *nr, int u, tx_task *t, tr_err *err) {
  td_cluster *c = R->c;
  if (!(t->out_to = calloc((size_t)t->nout + 1, sizeof *t->out_to)))
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int64_t i = 0; i < t->nout; i++) {
    int own = nr->moves->owner[t->out_lin[i]];
    if (own != u) snprintf(t->out_to[i], sizeof t->out_to[i], "%s", c->sites[R->up[own]].ep);
  }
  return TR_OK;
}

/* Node step 2: the fused local join + aggregation + map, one task per
** site, sent in phase ph (its requests are ph->out[r0, r1)).  A node fused
** into another's tasks (nr->into) sends none: its chunks are made there. */
static int s_node_tasks(s_run *R, s_nrun *nr, di_phase *ph, tr_err *err) {
  td_cluster *c = R->c;
  ta_plan *p = R->p;
  const ta_node *n = &p->nodes[nr->k];
  const to_choice *ch = nr->ch;
  const tr_tensor *om = &p->rels[n->out].meta;
  s_prel *po = &R->rel[n->out];
  int final = p->rels[n->out].kind == TA_REL_OUTPUT, m = R->m, rc = TR_OK;
  int64_t nout = po->n;
  const tr_tensor *in_meta[TK_MAX_INPUTS];
  s_prel *in[TK_MAX_INPUTS];
  for (int i = 0; i < n->ninputs; i++) {
    in_meta[i] = &p->rels[n->in[i].rel].meta;
    in[i] = &R->rel[n->in[i].rel];
  }
  char what[96];
  snprintf(what, sizeof what, "%s (in %s's tasks)", om->name,
           nr->into ? p->rels[p->nodes[nr->into->k].out].meta.name : "");
  nr->js = s_op(R, "local_join", nr->into ? what : om->name, nr->into != NULL);
  snprintf(what, sizeof what, "%s (%s%s)", om->name,
           n->agg == TK_AGG_MAX ? "MAX" : n->agg == TK_AGG_MIN ? "MIN" : "SUM",
           ch->twophase ? ", partial" : "");
  if (n->agg != TK_AGG_NONE) s_op(R, "local_agg", what, 1);
  snprintf(what, sizeof what, "%s (fused transform)", om->name);
  if (n->post.n && !ch->twophase) s_op(R, "local_map", what, 1);
  nr->rs = final && !ch->twophase && di_replication(c, m) > 1 ? s_op(R, "replicate", om->name, 0) : NULL;
  ta_node tn = *n;
  tn.drive = ch->drive;
  tn.mirror = nr->moves->mirror;
  /* a drive operand cut into finer chunks (moves.c): each output chunk is
  ** one tuple, and its task has it whole */
  for (int d = 0; tn.drive >= 0 && d < n->in[tn.drive].rank; d++)
    if (in_meta[tn.drive]->chunk[d] != n->chunk[n->in[tn.drive].label[d]]) tn.drive = -1;
  if (ch->twophase) tn.post.n = 0;
  nr->r0 = ph->n;
  for (int u = 0; !rc && !nr->into && u < m; u++) {
    for (int64_t lin = 0; lin < nout; lin++) {
      nr->mine[lin] = (nr->moves->osites[lin] >> u) & 1;
      nr->ids[lin] = ch->twophase ? (nr->pids[(size_t)lin * (size_t)m + (size_t)u] = tc_new_chunk_id())
                                  : po->locs[lin].chunk_id;
      /* partials go when the run ends, even if it fails before combining */
      if (ch->twophase && nr->mine[lin] && s_note_drop(R, -1, nr->ids[lin]))
        rc = tr_seterr(err, TR_ENOMEM, "out of memory");
    }
    tx_task t;
    if (!rc)
      rc = s_make_task(&tn, in_meta, in, nr->moves->need, -1, om, nout, nr->mine, nr->ids, u, R->up[u], &t, err);
    if (!rc && nr->then && (rc = s_then_task(R, nr->then, nr->mine, u, &t, err))) tx_task_free(&t);
    if (!rc && ch->twophase && (rc = s_partials_to(R, nr, u, &t, err))) tx_task_free(&t);
    if (!rc) rc = s_task_submit(R, ph, &t, final && !ch->twophase, u, err);
  }
  nr->r1 = ph->n;
  return rc;
}

/* Node step 3: what its tasks made (replies r0..r1 of ph); a two-phase
** plan's partials, which its combine tasks took (s_combine_results). */
static void s_node_results(s_run *R, s_nrun *nr, di_phase *ph, double t0) {
  const ta_plan *p = R->p;
  const ta_node *n = &p->nodes[nr->k];
  int final = p->rels[n->out].kind == TA_REL_OUTPUT;
  s_made made[2] = {{nr->ch->twophase ? NULL : &R->rel[n->out], p->rels[n->out].meta.dtype,
                     final && !nr->ch->twophase, nr->rs}};
  if (nr->then) {
    const ta_node *e = &p->nodes[nr->then->k];
    made[1] = (s_made){&R->rel[e->out], p->rels[e->out].meta.dtype, p->rels[e->out].kind == TA_REL_OUTPUT,
                       nr->then->rs};
  }
  if (!nr->into) s_task_results(R, ph, nr->r0, nr->r1, made, nr->then ? 2 : 1, nr->js);
  nr->js->seconds = tr_now() - t0;
  if (nr->rs) nr->rs->seconds = nr->js->seconds; /* overlapped with the join */
}

/* The second step of a two-phase aggregation: each partial (pids, one
** per output chunk and site that made one) is pushed by the join task
** that makes it to its chunk's owner (tx_task.out_to, set by
** s_node_tasks), where a combine task folds them (and applies the node's
** transform).  The combines go in the join tasks' phase, their partials
** listed as on their way: a worker sets a combine aside until they are
** all stored (worker/jobs.c).  Its requests are ph->out[c0, c1). */
static int s_combine_tasks(s_run *R, s_nrun *nr, di_phase *ph, tr_err *err) {
  td_cluster *c = R->c;
  const ta_node *n = &R->p->nodes[nr->k];
  const to_moves *mv = nr->moves;
  const tr_tensor *om = &R->p->rels[n->out].meta;
  s_prel *po = &R->rel[n->out];
  int64_t nout = tr_nchunks(om);
  int m = R->m, rc = TR_OK, final = R->p->rels[n->out].kind == TA_REL_OUTPUT;
  nr->ss = s_op(R, "shuffle", "partials", 0);
  snprintf(nr->ss->what, sizeof nr->ss->what, "%s (partials)", om->name);
  for (int64_t lin = 0; lin < nout; lin++) {
    int own = R->up[mv->owner[lin]];
    for (int u = 0; u < m; u++)
      if (((mv->osites[lin] >> u) & 1) && R->up[u] != own) {
        int64_t kk[TR_MAX_RANK], ext[TR_MAX_RANK];
        tr_key_from_linear(om, lin, kk);
        s_moved(R, nr->ss, R->up[u], own, tr_chunk_extent(om, kk, ext));
      }
  }
  nr->cs = s_op(R, "local_agg", om->name, 0);
  snprintf(nr->cs->what, sizeof nr->cs->what, "%s (combine partials%s)", om->name, n->post.n ? ", transform" : "");
  nr->crs = final && di_replication(c, m) > 1 ? s_op(R, "replicate", om->name, 0) : NULL;
  nr->c0 = ph->n;
  for (int u = 0; !rc && u < m; u++) {
    tx_task task;
    memset(&task, 0, sizeof task);
    task.kind = TX_TASK_COMBINE;
    task.node = *n;
    task.node.drive = -1;
    task.node.ninputs = 1;
    task.node.in[0].rel = n->out;
    task.node.in[0].rank = om->rank;
    for (int d = 0; d < om->rank; d++) task.node.in[0].label[d] = d;
    task.node.nlabels = task.node.nout = om->rank;
    task.node.gemm = 0;
    task.node.prog.n = 1;
    task.node.prog.code[0].op = TK_OP_INPUT;
    task.node.prog.code[0].arg = 0;
    task.in_meta[0] = *om;
    task.out_meta = *om;
    if ((rc = s_task_lists(&task, nout * m, nout, err))) break;
    for (int64_t lin = 0; lin < nout; lin++) {
      if (mv->owner[lin] != u) continue;
      for (int v = 0; v < m; v++)
        if ((mv->osites[lin] >> v) & 1) {
          task.in_op[task.nin] = 0;
          task.in_lin[task.nin] = lin;
          task.in_wait[task.nin] = 1;
          task.in_id[task.nin++] = nr->pids[(size_t)lin * (size_t)m + (size_t)v];
        }
      task.out_lin[task.nout] = lin;
      task.out_id[task.nout++] = po->locs[lin].chunk_id;
    }
    rc = s_task_submit(R, ph, &task, final, u, err);
  }
  nr->c1 = ph->n;
  return rc;
}

/* What a two-phase node's combine tasks made (replies c0..c1 of ph, the
** phase from t0, in which the partials moved too). */
static void s_combine_results(s_run *R, s_nrun *nr, di_phase *ph, double t0) {
  const ta_node *n = &R->p->nodes[nr->k];
  const tr_tensor *om = &R->p->rels[n->out].meta;
  int final = R->p->rels[n->out].kind == TA_REL_OUTPUT;
  s_task_results(R, ph, nr->c0, nr->c1, &(s_made){&R->rel[n->out], om->dtype, final, nr->crs}, 1, nr->cs);
  nr->ss->seconds = nr->cs->seconds = tr_now() - t0;
  if (nr->crs) nr->crs->seconds = nr->cs->seconds; /* overlapped with the combine */
}

/* Run nodes nr[0..n), none of which reads what another makes: their moves,
** their tasks and the combines of the two-phase ones in one phase, so a
** worker goes on to the next node's task as soon as it has finished its
** own, without waiting for the others. */
static int s_run_nodes(s_run *R, s_nrun *nr, int n, tr_err *err) {
  td_cluster *c = R->c;
  int rc = TR_OK;
  tn_wbuf *sends = calloc((size_t)c->nsites, sizeof *sends);
  uint32_t *nsend = calloc((size_t)c->nsites, sizeof *nsend);
  if (!sends || !nsend) {
    free(sends);
    free(nsend);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  int opbase = R->nops;
  for (int j = 0; !rc && j < n; j++) rc = s_node_moves(R, &nr[j], sends, nsend, err);
  int opend = R->nops;
  /* The moves and the tasks in one phase: a task starts as soon as it
  ** arrives and waits only for the copies it reads before they are there
  ** (tx_task.in_wait), instead of every task waiting for every move to
  ** be confirmed.  A move that fails fails the phase, which cancels the
  ** tasks still waiting.  A two-phase node's join tasks push their
  ** partials to the owners as they make them (tx_task.out_to), where its
  ** combine tasks, sent after them, are set aside until their partials
  ** are all there. */
  double t0 = R->phase_t0 = tr_now();
  di_phase ph;
  di_phase_init(&ph, c);
  ph.watch_all = 1; /* tasks push replicas to peers */
  /* copies for this statement only, dropped when it ends */
  rc = di_add_sends(&ph, sends, nsend, TC_KEEP_SCRATCH, rc, err);
  for (int j = 0; !rc && j < n; j++) rc = s_node_tasks(R, &nr[j], &ph, err);
  for (int j = 0; !rc && j < n; j++)
    if (nr[j].ch->twophase) rc = s_combine_tasks(R, &nr[j], &ph, err);
  if (!rc) rc = di_wait(&ph, err);
  for (int j = 0; !rc && j < n; j++) {
    s_node_results(R, &nr[j], &ph, t0);
    if (nr[j].ch->twophase) s_combine_results(R, &nr[j], &ph, t0);
  }
  di_phase_free(&ph);
  for (int i = opbase; i < opend; i++) /* overlapped with the tasks */
    if (!R->ops[i].fused) R->ops[i].seconds = tr_now() - t0;
  for (int j = 0; j < n; j++) s_nrun_free(&nr[j]);
  return rc;
}

static int s_run_node(s_run *R, int k, const to_choice *ch, const to_moves *moves, tr_err *err) {
  s_nrun nr = {.k = k, .ch = ch, .moves = moves};
  return s_run_nodes(R, &nr, 1, err);
}

/* The error for damaged chunk id that could not be repaired: names the
** tensor and chunk it belongs to, keeping the worker's message. */
static int s_name_bad(s_run *R, uint64_t id, tr_err *err) {
  for (int r = 0; r < R->p->nrels; r++)
    for (int64_t lin = 0; R->rel[r].locs && lin < R->rel[r].n; lin++)
      if (R->rel[r].locs[lin].chunk_id == id) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        di_unreadable(&R->p->rels[r].meta, &R->rel[r].locs[lin], why, err);
        return TR_ECORRUPT;
      }
  return TR_ECORRUPT;
}

/* Drop what a failed attempt at node k made, and forget the copies of its
** operands it sent, so that the next attempt makes and sends them again. */
static void s_forget(s_run *R, int k) {
  const ta_node *n = &R->p->nodes[k];
  s_prel *po = &R->rel[n->out];
  for (int64_t lin = 0; po->locs && lin < po->n; lin++)
    if (po->locs[lin].chunk_id) s_note_drop(R, -1, po->locs[lin].chunk_id);
  free(po->locs);
  po->locs = NULL;
  for (int i = 0; i < n->ninputs; i++) {
    free(R->rel[n->in[i].rel].copy);
    R->rel[n->in[i].rel].copy = NULL;
  }
}

/* Run node k; when a task or a move meets a damaged copy of a stored
** chunk (a checksum failure that names it), that copy is repaired from a
** good replica and the node runs again: what the failed attempt made is
** dropped, and the copies it sent are sent again.  Each attempt repairs
** one more copy, so at most one per input chunk is needed. */
static int s_run_node_safe(s_run *R, int k, const to_choice *ch, const to_moves *moves, tr_err *err) {
  td_cluster *c = R->c;
  const ta_node *n = &R->p->nodes[k];
  int64_t attempts = 1;
  for (int i = 0; i < n->ninputs; i++) attempts += R->rel[n->in[i].rel].n;
  for (int64_t attempt = 1;; attempt++) {
    c->bad_chunk = 0;
    int rc = s_run_node(R, k, ch, moves, err);
    if (rc != TR_ECORRUPT || !c->bad_chunk || attempt >= attempts) return rc;
    int site = c->bad_site;
    uint64_t id = c->bad_chunk;
    s_forget(R, k);
    tr_err ferr;
    if (di_fix_bad(c, site, id, &ferr)) return s_name_bad(R, id, err);
  }
}

/* The schedule's peak memory for site index s, -1 without a schedule. */
static int64_t s_predicted_peak(const s_run *R, int s) {
  for (int u = 0; R->sched.sched && u < R->m; u++)
    if (R->up[u] == s) return R->sched.sched->peak_mem[u];
  return -1;
}

/* EXPLAIN ANALYZE output, text or JSON. */
static char *s_analyze_text(const s_run *R, double elapsed, int json) {
  const td_cluster *c = R->c;
  tr_text out = {0};
  int64_t total = 0;
  int ns = c->nsites < S_OP_SITES ? c->nsites : S_OP_SITES;
  for (int i = 0; i < R->nops; i++) total += R->ops[i].floats;
#define PUT(...) tr_text_put(&out, __VA_ARGS__)
  if (json) {
    PUT("\"elapsed_s\": %.6f, \"measured_transfer_floats\": %lld, \"node_s\": [", elapsed,
        (long long)total);
    for (int k = 0; k < R->p->nnodes; k++) PUT("%s%.6f", k ? ", " : "", R->node_s[k]);
    /* the nodes that ran together, 1-based as in the text */
    PUT("], \"node_groups\": [");
    for (int k = 0; k < R->p->nnodes; k++)
      PUT("%s%s%d", k ? (R->group[k] == R->group[k - 1] ? ", " : "], ") : "", k && R->group[k] == R->group[k - 1] ? "" : "[",
          k + 1);
    PUT("%s], \"operators\": [", R->p->nnodes ? "]" : "");
    for (int i = 0; i < R->nops; i++) {
      const s_opstat *op = &R->ops[i];
      PUT("%s{\"op\": \"%s\", \"relation\": \"%s\", \"fused\": %s, \"floats\": %lld, "
          "\"tasks\": %lld, \"time_s\": %.6f, \"per_site\": [",
          i ? ", " : "", op->op, op->what, op->fused ? "true" : "false", (long long)op->floats,
          (long long)op->tasks, op->seconds);
      for (int s = 0; s < ns; s++)
        PUT("%s{\"site\": %d, \"floats_in\": %lld, \"floats_out\": %lld, \"tasks\": %lld, "
            "\"time_s\": %.6f}",
            s ? ", " : "", s, (long long)op->site_in[s], (long long)op->site_out[s],
            (long long)op->site_tasks[s], op->site_s[s]);
      PUT("]}");
    }
    PUT("], \"per_site\": [");
    for (int s = 0; s < c->nsites; s++)
      PUT("%s{\"site\": %d, \"endpoint\": \"%s\", \"state\": \"%s\", \"tasks\": %lld, \"floats_in\": %lld, "
          "\"floats_out\": %lld, \"task_s\": %.6f, \"kernels\": \"%s\", \"gpu_h2d_bytes\": %llu, "
          "\"gpu_d2h_bytes\": %llu, \"gpu_copy_s\": %.6f, \"peak_memory_bytes\": %lld, "
          "\"predicted_peak_memory_bytes\": %lld}",
          s ? ", " : "", s, c->sites[s].ep, c->sites[s].up ? "up" : "down", (long long)c->sites[s].tasks,
          (long long)c->sites[s].floats_in, (long long)c->sites[s].floats_out, c->sites[s].busy_s,
          c->sites[s].kernels, (unsigned long long)c->sites[s].h2d,
          (unsigned long long)c->sites[s].d2h, c->sites[s].copy_s, (long long)c->sites[s].peak_rss,
          (long long)s_predicted_peak(R, s));
    PUT("], \"measured_makespan_s\": %.6f", R->t1 - R->texec);
  } else {
    PUT("IA operators run (fused ones run inside the local_join task):\n");
    for (int i = 0; i < R->nops; i++) {
      const s_opstat *op = &R->ops[i];
      PUT("  %-12s %-34s", op->op, op->what);
      if (op->fused) {
        PUT(" fused\n");
        continue;
      }
      PUT(" floats moved %12lld  tasks %4lld  time %.3f s\n", (long long)op->floats,
          (long long)op->tasks, op->seconds);
      for (int s = 0; s < ns; s++)
        if (op->site_in[s] || op->site_out[s] || op->site_tasks[s])
          PUT("      site %d: floats in %12lld  out %12lld  tasks %4lld  task time %.3f s\n", s,
              (long long)op->site_in[s], (long long)op->site_out[s], (long long)op->site_tasks[s],
              op->site_s[s]);
    }
    PUT("Sites:\n");
    for (int s = 0; s < c->nsites; s++) {
      PUT("  %d %-40s %-4s tasks %4lld  floats in %12lld  out %12lld  task time %.3f s  kernels %s\n",
          s, c->sites[s].ep, c->sites[s].up ? "up" : "down", (long long)c->sites[s].tasks,
          (long long)c->sites[s].floats_in, (long long)c->sites[s].floats_out, c->sites[s].busy_s,
          c->sites[s].kernels[0] ? c->sites[s].kernels : "-");
      if (c->sites[s].peak_rss)
        PUT("    peak memory %.1f MiB", (double)c->sites[s].peak_rss / (1 << 20));
      if (c->sites[s].peak_rss && s_predicted_peak(R, s) >= 0)
        PUT(" (predicted %.1f MiB of tasks' working sets)", (double)s_predicted_peak(R, s) / (1 << 20));
      if (c->sites[s].peak_rss) PUT("\n");
      if (c->sites[s].h2d || c->sites[s].d2h)
        PUT("    gpu copies: %llu bytes in, %llu bytes out, %.3f s\n", (unsigned long long)c->sites[s].h2d,
            (unsigned long long)c->sites[s].d2h, c->sites[s].copy_s);
    }
    PUT("Nodes:");
    for (int k = 0; k < R->p->nnodes; k++)
      PUT(" %d -> %s %.3f s", k + 1, R->p->rels[R->p->nodes[k].out].meta.name, R->node_s[k]);
    PUT("\n");
    int said = 0;
    for (int g = 0, e; g < R->p->nnodes; g = e) {
      for (e = g + 1; e < R->p->nnodes && R->group[e] == g;) e++;
      if (e - g < 2) continue;
      PUT("%s", said++ ? "," : "Run together:");
      for (int k = g; k < e; k++) PUT("%s%d", k == g ? " " : "+", k + 1);
    }
    if (said) PUT("\n");
    PUT("Makespan: %.3f s measured", R->t1 - R->texec);
    if (R->sched.sched) PUT(", %.3f s predicted", R->sched.sched->makespan);
    PUT("\nElapsed: %.3f s, measured transfer: %lld floats\n", elapsed, (long long)total);
  }
#undef PUT
  return tr_text_done(&out);
}

static void s_run_free(s_run *R) {
  for (int i = 0; i < TA_MAX_RELS; i++) {
    free(R->rel[i].locs);
    free(R->rel[i].copy);
  }
  free(R->drop);
  free(R->drop_site);
  free(R->ops);
}

/* Drop transient copies and temporaries, and the versions the outputs
** replaced; on failure also the output.  One round trip: each site is
** sent the ids noted for it and those for every site together. */
static void s_cleanup(s_run *R, int failed) {
  td_cluster *c = R->c;
  for (int i = 0; i < R->p->nrels; i++) {
    s_prel *pr = &R->rel[i];
    if (!pr->made || !pr->locs || (R->p->rels[i].kind == TA_REL_OUTPUT && (!failed || pr->committed)))
      continue;
    for (int64_t lin = 0; lin < pr->n; lin++)
      if (pr->locs[lin].chunk_id) s_note_drop(R, -1, pr->locs[lin].chunk_id);
  }
  if (R->ndrop) di_drop_later(c, R->drop, R->drop_site, R->ndrop);
  di_flush(c, 0);
}

/* R->pl[rel] from the chunk locations of rel (site ids to positions in
** R->up; the primary is the replica reads come from). */
static int s_placed_from_locs(s_run *R, int rel, tr_err *err) {
  to_placed *pl = &R->pl[rel];
  const s_prel *pr = &R->rel[rel];
  to_placed_free(pl);
  pl->has = calloc((size_t)pr->n + 1, sizeof *pl->has);
  pl->prim = calloc((size_t)pr->n + 1, 1);
  if (!pl->has || !pl->prim) return tr_seterr(err, TR_ENOMEM, "out of memory");
  pl->n = pr->n;
  for (int64_t lin = 0; lin < pr->n; lin++) {
    const tc_chunkloc *loc = &pr->locs[lin];
    int h = di_holder(R->c, &R->p->rels[rel].meta, loc);
    pl->prim[lin] = -1;
    for (int u = 0; u < R->m; u++) {
      if (di_has(loc, R->c->sites[R->up[u]].id)) pl->has[lin] |= 1ull << u;
      if (R->up[u] == h) pl->prim[lin] = (int8_t)u;
    }
  }
  return TR_OK;
}

/* A declared-only tensor as FILL would place its zeros (EXPLAIN only). */
static int s_placed_zeros(s_run *R, int rel, tr_err *err) {
  to_placed *pl = &R->pl[rel];
  int64_t n = tr_nchunks(&R->p->rels[rel].meta);
  to_placed_free(pl);
  pl->has = calloc((size_t)n + 1, sizeof *pl->has);
  pl->prim = calloc((size_t)n + 1, 1);
  if (!pl->has || !pl->prim) return tr_seterr(err, TR_ENOMEM, "out of memory");
  pl->n = n;
  for (int64_t lin = 0; lin < n; lin++) {
    pl->prim[lin] = (int8_t)(lin % R->m);
    pl->has[lin] = 1ull << (lin % R->m);
  }
  return TR_OK;
}

int td_run_begin(td_cluster *c, ta_plan *p, int run, td_run **out, int *m, int *repl,
                 to_placed **pl, tr_err *err) {
  s_run *R = s_run_new();
  if (R) R->over = -1;
  int rc = TR_OK;
  *out = NULL;
  if (!R) return tr_seterr(err, TR_ENOMEM, "out of memory");
  R->c = c;
  R->p = p;
  R->run = run;
  R->t0 = tr_now();
  di_ping(c);
  for (int s = 0; s < c->nsites; s++) {
    c->sites[s].tasks = c->sites[s].floats_in = c->sites[s].floats_out = 0;
    c->sites[s].busy_s = c->sites[s].copy_s = 0;
    c->sites[s].h2d = c->sites[s].d2h = 0;
    c->sites[s].peak_rss = 0;
  }
  R->m = di_up_sites(c, R->up);
  if (!R->m) rc = tr_seterr(err, TR_EIO, "no worker is up");
  /* Where the stored inputs are; declared-only tensors become zeros
  ** (and index operands their indices). */
  for (int i = 0; !rc && i < p->nrels; i++) {
    ta_rel *r = &p->rels[i];
    if (r->kind != TA_REL_STORED || r->pending) continue;
    if (r->meta.version == 0 && !run) {
      rc = s_placed_zeros(R, i, err);
      continue;
    }
    if (r->meta.version == 0) { /* an ARGMAX's index operand holds indices */
      tx_fill zeros = {r->iota ? TP_FILL_INDEX : TP_FILL_ZEROS, 0, 0, 0};
      rc = s_fill_tasks(R, &r->meta, &zeros, &R->rel[i], 0, err);
    } else {
      rc = tc_chunk_locations(c->db, &r->meta, &R->rel[i].locs, &R->rel[i].n, err);
    }
    if (!rc) rc = s_placed_from_locs(R, i, err);
  }
  if (rc) {
    td_run_end(&R);
    return rc;
  }
  *m = R->m;
  *repl = di_replication(c, R->m);
  *pl = R->pl;
  *out = R;
  return TR_OK;
}

int td_run_schedule(td_run *R, const to_opt *opt, const to_env *env, int which, double lp_seconds, int trace,
                    tr_err *err) {
  td_cluster *c = R->c;
  R->env = *env;
  R->which = which;
  R->over = -1;
  if (R->m > TO_MAX_SITES) return TR_OK;
  /* A worker that did not say its memory gets the share a local one has. */
  for (int u = 0; u < R->m; u++)
    R->cap[u] = c->sites[R->up[u]].memory > 0 ? c->sites[R->up[u]].memory : tr_phys_memory() / 8 / R->m;
  di_plan_peak(R->p, opt, R->m, R->plan_peak);
  for (int u = 0; u < R->m && R->over < 0; u++)
    if (R->plan_peak[u] > R->cap[u]) R->over = u;
  if (which == TD_SCHED_STATEMENT || (R->over < 0 && !trace)) return TR_OK;
  if (!di_sched_sizable(R->p)) {
    td_notice(c, "the plan's task graph has more than %d chunks or %d edges: it runs as the optimizer placed it",
              DI_SCHED_MAX_GRAPH_TASKS, DI_SCHED_MAX_EDGES);
    return TR_OK;
  }
  int rc = di_sched_place(&R->sched, R->p, R->pl, &env->w, which, lp_seconds, R->m, R->cap, err);
  /* Said once per session, as the worker's log says a fallback once;
  ** EXPLAIN says it for every statement. */
  if (!rc && R->sched.sched->solver == TM_SOLVER_FAILED && !c->lp_failed_said) {
    c->lp_failed_said = 1;
    td_notice(c, "m-SCT: %s; m-ETF placed the tasks", R->sched.sched->why);
  }
  if (!rc && R->sched.algo != R->sched.asked && !c->topo_said) {
    c->topo_said = 1;
    td_notice(c, "a plan has more than %d chunk tasks, more than %s places: %s placed them", DI_SCHED_MAX_TASKS,
              tm_algo_name(R->sched.asked), tm_algo_name(R->sched.algo));
  }
  return rc;
}

char *td_run_schedule_text(const td_run *R, int json) {
  tr_text out = {0};
  const char *eps[TO_MAX_SITES];
  for (int u = 0; u < R->m; u++) eps[u] = R->c->sites[R->up[u]].ep;
  if (R->sched.sched) {
    di_sched_text(&R->sched, eps, &out, json);
    if (R->over >= 0 && !json)
      tr_text_put(&out, "  the optimizer's plan holds %.1f MiB on worker %d, over its --memory (%.1f MiB)\n",
                  (double)R->plan_peak[R->over] / (1 << 20), R->over, (double)R->cap[R->over] / (1 << 20));
    return tr_text_done(&out);
  }
  /* The optimizer's plan runs: node by node, its working set per worker. */
  if (json) {
    tr_text_put(&out, "\"schedule\": {\"scheduler\": \"%s\", \"placed_by\": \"optimizer\", \"fits\": %s, "
                "\"per_worker\": [", td_sched_names[R->which], R->over < 0 ? "true" : "false");
    for (int u = 0; u < R->m; u++) {
      tr_text_put(&out, "%s{\"site\": %d, \"endpoint\": \"", u ? ", " : "", u);
      tr_text_json(&out, eps[u]);
      tr_text_put(&out, "\", \"memory_bytes\": %lld, \"predicted_peak_memory_bytes\": %lld}",
                  (long long)R->cap[u], (long long)R->plan_peak[u]);
    }
    tr_text_put(&out, "]}");
    return tr_text_done(&out);
  }
  tr_text_put(&out, "Schedule: the optimizer's plan, node by node (%s)\n",
              R->over < 0 ? "it fits every worker's memory"
                          : R->which == TD_SCHED_STATEMENT ? "SET scheduler = statement, or a PLAN named"
                                                           : "too many chunks for a task graph");
  for (int u = 0; u < R->m; u++)
    tr_text_put(&out, "  worker %d (%s): predicted peak memory %lld of %lld bytes\n", u, eps[u],
                (long long)R->plan_peak[u], (long long)R->cap[u]);
  return tr_text_done(&out);
}

int td_run_trace(const td_run *R, char **out, tr_err *err) {
  *out = NULL;
  if (!R->sched.sched)
    return tr_seterr(err, TR_EINVAL, "FORMAT TRACE shows a scheduler's task graph: SET scheduler = msct, metf "
                     "or mtopo (the plan has at most %d chunks and %d edges)", DI_SCHED_MAX_GRAPH_TASKS,
                     DI_SCHED_MAX_EDGES);
  return di_sched_trace(&R->sched, R->ev, R->nev, out, err);
}

/* Run nodes k..e-1 together (to_group_end), each as opt chose or where the
** schedule placed its tasks.  When a move or task meets a damaged copy of
** a stored chunk, what the group made is dropped and its nodes run one at
** a time, each repairing the copy it meets (s_run_node_safe). */
static int s_run_group(s_run *R, const to_opt *opt, int k, int e, tr_err *err) {
  s_nrun nr[TA_MAX_NODES];
  to_choice ch[TA_MAX_NODES];
  to_moves mv[TA_MAX_NODES];
  int n = e - k, nmv = 0, rc = TR_OK;
  memset(nr, 0, sizeof *nr * (size_t)n);
  for (int j = 0; !rc && j < n; j++) {
    nr[j].k = k + j;
    if (R->sched.sched) {
      rc = to_moves_assigned(R->p, k + j, R->sched.site_of + R->sched.base[k + j], &R->env, R->pl, &ch[j],
                             &mv[j], err);
      if (!rc) nmv++;
      nr[j].ch = &ch[j];
      nr[j].moves = &mv[j];
    } else {
      nr[j].ch = &opt->choice[k + j];
      nr[j].moves = &opt->moves[k + j];
    }
  }
  if (!rc && !R->sched.sched) { /* elementwise consumers inside their producers' tasks */
    int into[TA_MAX_NODES];
    to_group_fusion(R->p, opt, k, e, into);
    for (int j = 0; j < n; j++) {
      if (into[k + j] < 0) continue;
      s_nrun *c = &nr[j], *pj = &nr[into[k + j] - k];
      const ta_node *cn = &R->p->nodes[k + j];
      c->into = pj;
      pj->then = c;
      for (c->from = 0; cn->in[c->from].rel != R->p->nodes[pj->k].out;) c->from++;
      c->store = to_fused_stored(R->p, pj->k, k + j);
    }
  }
  if (!rc && n == 1) {
    rc = s_run_node_safe(R, k, nr[0].ch, nr[0].moves, err);
  } else if (!rc) {
    R->c->bad_chunk = 0;
    rc = s_run_nodes(R, nr, n, err);
    if (rc == TR_ECORRUPT && R->c->bad_chunk) {
      rc = TR_OK;
      for (int j = 0; j < n; j++) s_forget(R, k + j);
      for (int j = 0; !rc && j < n; j++) rc = s_run_node_safe(R, k + j, nr[j].ch, nr[j].moves, err);
    }
  }
  for (int j = 0; j < nmv; j++) to_moves_free(&mv[j]);
  return rc;
}

/* Whether the plan's stored outputs fit the workers' disks (di_disk_room). */
static int s_outputs_room(td_cluster *c, const ta_plan *p, tr_err *err) {
  double bytes = 0;
  int n = 0, last = 0;
  for (int r = 0; r < p->nrels; r++)
    if (p->rels[r].kind == TA_REL_OUTPUT) {
      bytes += tr_tensor_bytes(&p->rels[r].meta);
      n++;
      last = r;
    }
  return n ? di_disk_room(c, bytes, n == 1 ? p->rels[last].meta.name : "the block's outputs", err) : TR_OK;
}

int td_run_exec(td_run *R, const to_opt *opt, tr_err *err) {
  td_cluster *c = R->c;
  ta_plan *p = R->p;
  int rc = s_outputs_room(c, p, err);
  R->texec = tr_now();
  /* a statement expected to run long would keep the catalog unsynced
  ** (and the chunks it forgot held) all that while */
  if (!rc && opt && opt->seconds > c->forgot_s) di_flush(c, 1);
  for (int k = 0; !rc && k < p->nnodes;) {
    int e = to_group_end(p, R->sched.sched ? NULL : opt, k);
    double tn0 = tr_now();
    for (int j = k; j < e; j++) R->group[j] = k;
    rc = s_run_group(R, opt, k, e, err);
    for (int j = k; !rc && j < e; j++) {
      int out = p->nodes[j].out;
      R->node_s[j] = tr_now() - tn0;
      if (p->rels[out].kind != TA_REL_OUTPUT) continue;
      double tc0 = tr_now();
      uint64_t *old = NULL;
      int64_t nold = 0;
      rc = di_commit(c, &p->rels[out].meta, R->rel[out].locs, R->rel[out].n, &old, &nold, err);
      /* the replaced version goes with the statement's cleanup */
      int64_t i = 0;
      while (i < nold && !s_note_drop(R, -1, old[i])) i++;
      if (i < nold) di_drop_ids(c, -1, old + i, nold - i); /* no room to note them */
      free(old);
      if (!rc) {
        R->rel[out].committed = 1;
        /* Not an IA operator, but where durability costs show: fdatasync
        ** on the workers and the catalog transaction. */
        s_op(R, "commit", p->rels[out].meta.name, 0)->seconds = tr_now() - tc0;
      }
      R->node_s[j] = tr_now() - tn0;
    }
    k = e;
  }
  s_cleanup(R, rc != TR_OK);
  R->cleaned = 1;
  R->t1 = tr_now();
  return rc;
}

int td_run_committed(const td_run *R) {
  int n = 0;
  for (int i = 0; R && i < R->p->nrels; i++) n += R->rel[i].committed;
  return n;
}

char *td_run_analysis(const td_run *R, int json) {
  return s_analyze_text(R, R->t1 - R->t0, json);
}

void td_run_end(td_run **pr) {
  s_run *R = pr ? *pr : NULL;
  if (!R) return;
  *pr = NULL;
  /* Never executed (only explained, or the optimizer failed): what
  ** td_run_begin made (zeros for declared-only inputs) goes. */
  if (!R->cleaned) s_cleanup(R, 1);
  for (int i = 0; i < TA_MAX_RELS; i++) to_placed_free(&R->pl[i]);
  di_sched_free(&R->sched);
  free(R->ev);
  s_run_free(R);
  free(R);
}

int td_fill(td_cluster *c, const tr_tensor *t, const tx_fill *f, tr_err *err) {
  s_run *R = s_run_new();
  ta_plan *p = calloc(1, sizeof *p);
  int rc = TR_OK;
  if (!R || !p) {
    if (R) s_run_free(R);
    free(R);
    free(p);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  /* A one-relation plan: the output, made by FILL tasks. */
  p->nrels = 1;
  p->rels[0].kind = TA_REL_OUTPUT;
  p->rels[0].meta = *t;
  R->c = c;
  R->p = p;
  di_ping(c);
  R->m = di_up_sites(c, R->up);
  if (!R->m) rc = tr_seterr(err, TR_EIO, "no worker is up");
  if (!rc) rc = di_disk_room(c, tr_tensor_bytes(t), t->name, err);
  if (!rc) rc = s_fill_tasks(R, t, f, &R->rel[0], 1, err);
  if (!rc) rc = di_commit(c, t, R->rel[0].locs, R->rel[0].n, NULL, NULL, err);
  s_cleanup(R, rc != TR_OK);
  s_run_free(R);
  free(R);
  free(p);
  return rc;
}
