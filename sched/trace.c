/*
** sched/trace.c - a schedule as Chrome trace-format JSON (the "JSON Object
** Format" of the Trace Event Format), which Perfetto and chrome://tracing
** open: a machine is a process, each task a complete ("X") event on its
** thread 0.  The engine's EXPLAIN ANALYZE (FORMAT TRACE) prints it.
*/
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sched/sched.h"

/* A growing NUL-terminated string. */
typedef struct s_buf {
  char *p;    /* the text */
  size_t len; /* bytes used, without the NUL */
  size_t cap; /* bytes allocated */
  int oom;    /* 1 once an allocation failed: later appends do nothing */
} s_buf;

static void s_put(s_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_put(s_buf *b, const char *fmt, ...) {
  for (int pass = 0; pass < 2 && !b->oom; pass++) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (w < 0) {
      b->oom = 1;
      return;
    }
    if ((size_t)w < b->cap - b->len) {
      b->len += (size_t)w;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)w + 1;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

/* s as a JSON string body: quotes, backslashes and control bytes escaped;
** other bytes (UTF-8) as they are. */
static void s_put_json(s_buf *b, const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      s_put(b, "\\%c", ch);
    else if (ch < 0x20)
      s_put(b, "\\u%04x", ch);
    else
      s_put(b, "%c", ch);
  }
}

int tm_trace_json(const tm_problem *pb, const tm_schedule *s, char **out, tr_err *err) {
  *out = NULL;
  if (!pb || !s || s->ntasks != pb->ntasks || s->nmachines != pb->nmachines || (pb->ntasks > 0 && !pb->tasks))
    return tr_seterr(err, TR_EINVAL, "the schedule does not belong to this problem");
  s_buf b = {malloc(4096), 0, 4096, 0};
  if (!b.p) return tr_seterr(err, TR_ENOMEM, "out of memory");
  s_put(&b, "{\"traceEvents\":[");
  for (int k = 0; k < s->nmachines; k++)
    s_put(&b, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"machine %d\"}}",
          k ? "," : "", k, k);
  for (int q = 0; q < s->ntasks; q++) {
    int i = s->order[q];
    const tm_task *t = &pb->tasks[i];
    s_put(&b, ",{\"name\":\"");
    if (t->name && *t->name)
      s_put_json(&b, t->name);
    else
      s_put(&b, "task %d", i);
    s_put(&b,
          "\",\"cat\":\"task\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":0,"
          "\"args\":{\"task\":%d,\"mem\":%lld}}",
          s->start[i] * 1e6, t->time * 1e6, s->machine[i], i, (long long)t->mem);
  }
  s_put(&b, "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"algorithm\":\"%s\",\"placed_by\":\"%s\",\"makespan_s\":%.9g",
        tm_algo_name(s->algo), tm_algo_name(s->placed_by), s->makespan);
  if (s->solver == TM_SOLVER_FAILED) {
    s_put(&b, ",\"fallback\":\"");
    s_put_json(&b, s->why);
    s_put(&b, "\"");
  }
  s_put(&b, "}}");
  if (b.oom) {
    free(b.p);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  *out = b.p;
  return TR_OK;
}
