/*
** worker/worker.h - `tradb --worker`: a site of the implementation
** algebra, holding chunks and running the tasks coordinators send it.
*/
#ifndef TRADB_WORKER_WORKER_H
#define TRADB_WORKER_WORKER_H

#include <stdint.h>

/* How to run a worker process (tradb --worker). */
typedef struct tw_config {
  const char *listen;  /* endpoint to bind (--listen) */
  const char *data;    /* chunk store directory (--data), created if absent */
  const char *keys;    /* CURVE key directory (--keys), NULL = none */
  int threads;         /* kernel threads; 0 = all cores */
  const char *backend; /* kernel backend; NULL = "auto" */
  int64_t memory;      /* bytes for scratch chunks (--memory); 0 = 1/8 of
                          the machine's memory */
} tw_config;

/* Run a worker until SIGTERM or SIGINT; logs to stderr.  Returns the
** process exit status (0 after a clean shutdown). */
int tw_main(const tw_config *cfg);

#endif /* TRADB_WORKER_WORKER_H */
