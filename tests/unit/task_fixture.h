/*
** tests/unit/task_fixture.h - a small node task for the tests of the
** task message and of workers running it (test_fusion.c, test_worker.c).
** Header-only, for test programs of one source file.
*/
#ifndef TRADB_TEST_TASK_FIXTURE_H
#define TRADB_TEST_TASK_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

/* Task *t over chunk 0 of [4] f32 operands in0..: out = in0 * in1 (two)
** or in0 + 1, its output chunk 0 with id out.  With in_id, the chunk of
** its last operand is listed with that id (a consumer run inside another
** task has its first operand from that task). */
static inline void tf_ew_task(tx_task *t, int two, uint64_t in_id, uint64_t out) {
  memset(t, 0, sizeof *t);
  t->kind = TX_TASK_NODE;
  ta_node *n = &t->node;
  n->nlabels = n->nout = 1;
  n->size[0] = n->chunk[0] = 4;
  n->ninputs = two ? 2 : 1;
  for (int i = 0; i < n->ninputs; i++) {
    n->in[i] = (ta_operand){i, 1, {0}};
    snprintf(t->in_meta[i].name, sizeof t->in_meta[i].name, "in%d", i);
    t->in_meta[i].dtype = TR_F32;
    t->in_meta[i].rank = 1;
    t->in_meta[i].shape[0] = t->in_meta[i].chunk[0] = 4;
  }
  const tk_insn mul[] = {{TK_OP_INPUT, 0, 0}, {TK_OP_INPUT, 1, 0}, {TK_OP_MUL, 0, 0}},
                inc[] = {{TK_OP_INPUT, 0, 0}, {TK_OP_CONST, 0, 1}, {TK_OP_ADD, 0, 0}};
  n->prog.n = 3;
  memcpy(n->prog.code, two ? mul : inc, sizeof mul);
  n->agg = TK_AGG_NONE;
  n->drive = -1;
  t->out_meta = t->in_meta[0];
  t->in_op = calloc(1, sizeof *t->in_op);
  t->in_lin = calloc(1, sizeof *t->in_lin);
  t->in_id = calloc(1, sizeof *t->in_id);
  t->out_lin = calloc(1, sizeof *t->out_lin);
  t->out_id = calloc(1, sizeof *t->out_id);
  if (in_id) {
    t->nin = 1;
    t->in_op[0] = n->ninputs - 1;
    t->in_id[0] = in_id;
  }
  t->nout = 1;
  t->out_id[0] = out;
}

#endif /* TRADB_TEST_TASK_FIXTURE_H */
