/*
** sched/trace.c - a schedule as Chrome trace-format JSON (the "JSON Object
** Format" of the Trace Event Format), which Perfetto and chrome://tracing
** open: a machine is a process, each task a complete ("X") event on its
** thread 0.  The engine's EXPLAIN ANALYZE (FORMAT TRACE) prints it.
*/
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sched/sched.h"

int tm_trace_json(const tm_problem *pb, const tm_schedule *s, char **out, tr_err *err) {
  *out = NULL;
  if (!pb || !s || s->ntasks != pb->ntasks || s->nmachines != pb->nmachines || (pb->ntasks > 0 && !pb->tasks))
    return tr_seterr(err, TR_EINVAL, "the schedule does not belong to this problem");
  tr_text b = {0};
  tr_text_put(&b, "{\"traceEvents\":[");
  for (int k = 0; k < s->nmachines; k++)
    tr_text_put(&b, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"machine %d\"}}",
          k ? "," : "", k, k);
  for (int q = 0; q < s->ntasks; q++) {
    int i = s->order[q];
    const tm_task *t = &pb->tasks[i];
    tr_text_put(&b, ",{\"name\":\"");
    if (t->name && *t->name)
      tr_text_json(&b, t->name);
    else
      tr_text_put(&b, "task %d", i);
    tr_text_put(&b,
          "\",\"cat\":\"task\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":0,"
          "\"args\":{\"task\":%d,\"mem\":%lld}}",
          s->start[i] * 1e6, t->time * 1e6, s->machine[i], i, (long long)t->mem);
  }
  tr_text_put(&b, "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"algorithm\":\"%s\",\"placed_by\":\"%s\",\"makespan_s\":%.9g",
        tm_algo_name(s->algo), tm_algo_name(s->placed_by), s->makespan);
  if (s->solver == TM_SOLVER_FAILED) {
    tr_text_put(&b, ",\"fallback\":\"");
    tr_text_json(&b, s->why);
    tr_text_put(&b, "\"");
  }
  tr_text_put(&b, "}}");
  if (!(*out = tr_text_done(&b))) return tr_seterr(err, TR_ENOMEM, "out of memory");
  return TR_OK;
}
