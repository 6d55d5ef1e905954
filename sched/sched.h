/*
** sched/sched.h - placing a task graph on machines that each have their
** own memory: m-TOPO, m-ETF and m-SCT, and the ILP that gives the optimum
** of a small graph, after P. Srivastava, "Exploring model parallelism in
** distributed scheduling of neural network frameworks" (UIUC, 2018),
** chapter 4 (shared/papers/device-placement-msct.txt).  The module knows
** nothing of tensors or of the engine: it takes numbers and gives numbers.
**
** The problem (thesis 3.1).  n tasks; task i computes for p_i seconds and
** needs d_i bytes of memory.  An edge i -> j says j uses what i produced;
** it costs c_ij seconds of communication, paid only when i and j run on
** different machines.  m machines; machine k has M_k bytes of memory.
**
** A schedule gives every task a machine and a start time s_i.  It is legal
** (thesis 5.4.1) when
**   - no two tasks of one machine overlap (a task runs from s_i to
**     s_i + p_i without interruption);
**   - for every edge i -> j, s_j >= s_i + p_i when i and j share a machine
**     and s_j >= s_i + p_i + c_ij when they do not;
**   - every machine's memory holds, under the model below.
** Its makespan is the largest finish time s_i + p_i (0 for no tasks).
**
** Memory model (thesis 3.1 and (4.4)).  Task i's d_i bytes are allocated
** on its machine when the graph starts (time 0) and held until the whole
** graph has finished (the makespan): they are its resident inputs, its
** output and its workspace, reserved for the run and never handed to
** another task in between.  The thesis pre-allocates them because a
** network's graph runs again and again; for tradb it means a worker never
** has to evict or wait for memory in the middle of a block.  So machine
** k uses the same amount at every moment of the run, the sum of d_i over
** the tasks placed on it; that sum must not exceed M_k, and it is the
** schedule's peak memory on k.  A chunk two tasks of one machine both hold
** is counted once per task: d_i is what task i needs, whoever else uses it.
**
** The algorithms (thesis chapter 4):
**   TM_TOPO  m-TOPO (4.1.3): tasks in topological order fill machine 1,
**            then 2, ..., each until it is full or holds its n/m share.
**   TM_ETF   m-ETF (4.2.2): repeatedly the (ready task, machine) pair with
**            the earliest start among those that fit in memory.
**   TM_SCT   m-SCT (4.3): the infinite-machine LP relaxation of ILP (4.1)
**            picks each task's favourite child (the successor it keeps on
**            its machine); list scheduling then serves machines in order
**            of availability with the urgent / awake / free rules, and a
**            machine whose memory can take no remaining task leaves the
**            list.  An LP that fails or runs out of time leaves the graph
**            to m-ETF, and the schedule says so.
**   TM_OPT   the memory- and machine-constrained ILP (4.13), solved to
**            optimality: exponential, for small graphs and for testing.
**            A failure or a timeout falls back to m-ETF as for m-SCT.
** GLPK (glp_simplex, glp_intopt) solves the LP and the ILP, silently: the
** module keeps no state between calls, prints nothing, and the same
** problem always gets the same schedule.  GLPK keeps an environment per
** thread, so threads may place graphs at once; each solve ends with
** glp_free_env, so a thread must not hold GLPK objects of its own across
** tm_place (sched/ is tradb's only GLPK user).  Like GLPK everywhere, a
** failed allocation inside the solver ends the process.
**
** Pinned tasks (tm_task.only) are an addition to the thesis's model: every
** algorithm places such a task only on a machine it allows (the LP, which
** has no machines, ignores it), and m-TOPO leaves pinned tasks out of the
** n/m shares it fills the machines with.
**
** Errors (tr_err, TR_EINVAL): a bad field (negative time or memory, an
** edge to a task that does not exist, a repeated edge, no machines, a
** task allowed on no machine), a
** cycle (the message lists the tasks on it), a task larger than every
** machine (the message names it and the capacity it needs), tasks that
** need more memory in all than the machines have, and a graph the
** algorithm cannot pack into the machines' memory (it names the task left
** without room; another algorithm may still succeed).  An empty graph is
** not an error: its makespan is 0.
*/
#ifndef TRADB_SCHED_H
#define TRADB_SCHED_H

#include <stdint.h>
#include "util/util.h"

/* One task of the graph. */
typedef struct tm_task {
  double time;      /* p_i: compute time, seconds, finite and >= 0 */
  int64_t mem;      /* d_i: bytes held on its machine for the whole run, >= 0 */
  const char *name; /* label in errors and traces (borrowed); NULL: "task <i>" */
  uint64_t only;    /* the machines it may run on (bit k: machine k < 64);
                       0: any.  Data that is where it is (a stored chunk
                       read by the graph) is such a task, of time 0, whose
                       edges carry the cost of fetching it elsewhere */
} tm_task;

/* One edge i -> j: j reads what i produced. */
typedef struct tm_edge {
  int from;    /* i, a task index */
  int to;      /* j, a task index */
  double comm; /* c_ij: seconds to send i's output to j's machine, >= 0 */
} tm_edge;

/* The input: a DAG and the machines.  All arrays are borrowed. */
typedef struct tm_problem {
  int ntasks;              /* n >= 0 */
  const tm_task *tasks;    /* [ntasks] */
  int nedges;              /* number of edges, >= 0 */
  const tm_edge *edges;    /* [nedges], at most one per (from, to) */
  int nmachines;           /* m >= 1 */
  const int64_t *capacity; /* [nmachines] M_k: memory of machine k, bytes */
} tm_problem;

typedef enum tm_algo {
  TM_TOPO = 0, /* m-TOPO */
  TM_ETF,      /* m-ETF */
  TM_SCT,      /* m-SCT: LP relaxation, favourite children, list scheduling */
  TM_OPT       /* the ILP: optimal, exponential time */
} tm_algo;

/* How to place. */
typedef struct tm_options {
  tm_algo algo;             /* the algorithm */
  double solver_time_limit; /* seconds GLPK may take for the LP (TM_SCT) or
                               the ILP (TM_OPT); past it the solver fails
                               and m-ETF places the graph.  0 fails at once
                               (a way to exercise the fallback); < 0: none */
} tm_options;

/* What the solver step of TM_SCT and TM_OPT came to. */
typedef enum tm_solver {
  TM_SOLVER_NONE = 0, /* the algorithm has no solver step (TM_TOPO, TM_ETF) */
  TM_SOLVER_SOLVED,   /* the LP or the ILP was solved to optimality */
  TM_SOLVER_FAILED    /* it failed or ran out of time: m-ETF placed the
                         graph, and `why` says what happened */
} tm_solver;

/* A schedule (tm_place makes it, tm_schedule_destroy frees it). */
typedef struct tm_schedule {
  int ntasks;          /* n, as in the problem */
  int nmachines;       /* m, as in the problem */
  int *machine;        /* [ntasks] the machine task i runs on, 0..m-1 */
  double *start;       /* [ntasks] s_i, seconds after the graph starts */
  int *order;          /* [ntasks] the tasks by start time, ties in the order
                          they were placed: a topological order, and each
                          machine's running order */
  double makespan;     /* predicted: the largest s_i + p_i, 0 if no tasks */
  int64_t *peak_mem;   /* [nmachines] bytes held on machine k (memory model) */
  tm_algo algo;        /* the algorithm asked for */
  tm_algo placed_by;   /* the one that placed the tasks: algo, or TM_ETF
                          after a solver failure */
  tm_solver solver;    /* the outcome of the LP / ILP step */
  char why[256];       /* solver == TM_SOLVER_FAILED: the reason; else "" */
  double lp_makespan;  /* TM_SCT solved: the LP's optimum w (a lower bound
                          on the infinite-machine makespan when every
                          c_ij <= every p_k); TM_OPT solved: the ILP's
                          optimum; else 0 */
  double inf_makespan; /* TM_SCT solved: makespan of the infinite-machine
                          schedule with the rounded favourite children
                          (thesis: within (2+2r)/(2+r) of lp_makespan, r the
                          largest c over the smallest p); else 0 */
  int *favourite;      /* TM_SCT solved: [ntasks] the favourite child of
                          task i (rounded LP x = 0), -1 for none; else NULL */
} tm_schedule;

/* Defaults: algo, and a solver time limit of 10 seconds. */
void tm_options_init(tm_options *opt, tm_algo algo);

/* "m-TOPO", "m-ETF", "m-SCT", "ILP" (static strings). */
const char *tm_algo_name(tm_algo algo);

/* Place pb's tasks with opt (NULL: m-SCT with the defaults).  On success
** *out is a new schedule the caller frees with tm_schedule_destroy; on
** failure *out is NULL, err says why, and the status is TR_EINVAL (bad
** input, a cycle, a graph that does not fit) or TR_ENOMEM. */
int tm_place(const tm_problem *pb, const tm_options *opt, tm_schedule **out, tr_err *err);

/* Free *s and set *s to NULL; safe on NULL and twice. */
void tm_schedule_destroy(tm_schedule **s);

/* The schedule as Chrome trace-format JSON, which Perfetto and
** chrome://tracing open: one complete event ("ph":"X") per task with
** "ts"/"dur" in microseconds, "pid" its machine and "tid" 0, its index,
** memory and the algorithm in "args", and a process_name record per
** machine.  *out is a NUL-terminated string the caller frees with free().
** TR_EINVAL if s does not belong to pb, TR_ENOMEM. */
int tm_trace_json(const tm_problem *pb, const tm_schedule *s, char **out, tr_err *err);

#endif /* TRADB_SCHED_H */
