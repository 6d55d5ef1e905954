/*
** tests/fuzz/fuzz_task.c - libFuzzer target for the TASK message body
** (exec/task.c): a worker decodes whatever a peer sends as a task, so any
** bytes must be either refused with TR_EINVAL (or TR_ENOMEM) or decoded
** into a task every field of which a worker may rely on.
**
** Input: the body of a TASK message, as tx_task_encode writes it (a node,
** FILL or combine task, optionally with a consumer run inside it).
**
** Oracles: a body that decodes encodes to bytes that decode again and
** encode to the same bytes (a flag byte other than 0 or 1 is read as 1, so
** the first encoding may differ from the input); its chunk numbers lie within
** their relations' grids; a consumer inside it makes the same chunk
** numbers as the task and has no consumer of its own; every replica keeps
** its copy in its file or in the background, never as scratch; outputs pushed to
** other workers (out_to) are scratch, of a node task with no consumer.
** Freeing leaves nothing behind (valgrind or ASan).
*/
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define S_CHECK(c)                                                             \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_task: check failed: %s (line %d)\n", #c, __LINE__); \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* The chunk lists of a decoded task lie within their grids. */
static void s_lists_ok(const tx_task *t) {
  for (int64_t i = 0; t->kind != TX_TASK_FILL && i < t->nin; i++) {
    S_CHECK(t->in_op[i] >= 0 && t->in_op[i] < t->node.ninputs);
    S_CHECK(t->in_lin[i] >= 0 && t->in_lin[i] < tr_nchunks(&t->in_meta[t->in_op[i]]));
  }
  for (int64_t i = 0; i < t->nout; i++)
    S_CHECK(t->out_lin[i] >= 0 && t->out_lin[i] < tr_nchunks(&t->out_meta));
  for (int i = 0; i < t->nrep; i++) S_CHECK(t->rep_keep[i] == TC_KEEP_FILE || t->rep_keep[i] == TC_KEEP_BACKGROUND);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tx_task t;
  tr_err err;
  int rc = tx_task_decode(data, size, &t, &err);
  if (rc) {
    S_CHECK(rc == TR_EINVAL || rc == TR_ENOMEM);
    return 0;
  }
  s_lists_ok(&t);
  if (t.then) {
    S_CHECK(!t.then->then && t.then->nout == t.nout);
    for (int64_t i = 0; i < t.nout; i++) S_CHECK(t.then->out_lin[i] == t.out_lin[i]);
    s_lists_ok(t.then);
  }
  if (t.out_to) S_CHECK(t.kind == TX_TASK_NODE && t.keep == TC_KEEP_SCRATCH && !t.then && !t.nrep);
  tn_wbuf b = {0}, b2 = {0};
  tx_task t2;
  tx_task_encode(&t, &b);
  S_CHECK(tx_task_decode(b.p, b.n, &t2, &err) == TR_OK);
  tx_task_encode(&t2, &b2);
  S_CHECK(b2.n == b.n && memcmp(b2.p, b.p, b.n) == 0);
  tn_wbuf_free(&b);
  tn_wbuf_free(&b2);
  tx_task_free(&t2);
  tx_task_free(&t);
  S_CHECK(!t.then && !t.out_lin && !t.out_to && !t.in_wait);
  return 0;
}
