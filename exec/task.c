/*
** exec/task.c - the tasks a coordinator ships to workers (a node's share,
** FILL, combining partials) and their encoding in a TASK message body.
** Decoding validates everything a worker then relies on: ranks, labels,
** programs, chunk numbers within their grids.
*/
#include "config.h"
#include "exec/exec.h"

#include <stdlib.h>
#include <string.h>

/* Top bit of an input's operand number on the wire: tx_task.in_wait. */
#define S_IN_WAIT 0x80000000u

static void s_put_prog(tn_wbuf *b, const tk_prog *p) {
  tn_put_u32(b, (uint32_t)p->n);
  for (int i = 0; i < p->n; i++) {
    tn_put_u32(b, (uint32_t)p->code[i].op);
    tn_put_u32(b, (uint32_t)p->code[i].arg);
    tn_put_f64(b, p->code[i].c);
  }
}

static void s_get_prog(tn_rbuf *r, tk_prog *p, int ninputs) {
  uint32_t n = tn_get_u32(r);
  if (n > TK_MAX_PROG) {
    r->bad = 1;
    return;
  }
  p->n = (int)n;
  for (int i = 0; i < p->n; i++) {
    p->code[i].op = (int)tn_get_u32(r);
    p->code[i].arg = (int)tn_get_u32(r);
    p->code[i].c = tn_get_f64(r);
    if (p->code[i].op == TK_OP_INPUT && (p->code[i].arg < 0 || p->code[i].arg >= ninputs))
      r->bad = 1;
  }
  if (p->n && tk_prog_depth(p) < 0) r->bad = 1;
}

static void s_put_meta(tn_wbuf *b, const tr_tensor *t) {
  tn_put_str(b, t->name);
  tn_put_u8(b, (uint8_t)t->dtype);
  tn_put_u32(b, (uint32_t)t->rank);
  for (int d = 0; d < t->rank; d++) {
    tn_put_i64(b, t->shape[d]);
    tn_put_i64(b, t->chunk[d]);
  }
}

static void s_get_meta(tn_rbuf *r, tr_tensor *t) {
  memset(t, 0, sizeof *t);
  tn_get_str(r, t->name, sizeof t->name);
  uint8_t dt = tn_get_u8(r);
  uint32_t rank = tn_get_u32(r);
  if (dt > TR_F64 || rank > TR_MAX_RANK) {
    r->bad = 1;
    return;
  }
  t->dtype = (tr_dtype)dt;
  t->rank = (int)rank;
  for (int d = 0; d < t->rank; d++) {
    t->shape[d] = tn_get_i64(r);
    t->chunk[d] = tn_get_i64(r);
    if (t->shape[d] < 1 || t->chunk[d] < 1 || t->chunk[d] > t->shape[d]) r->bad = 1;
  }
}

/* Whether a and b describe one relation: its name, type and chunks. */
static int s_same_meta(const tr_tensor *a, const tr_tensor *b) {
  if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d] || a->chunk[d] != b->chunk[d]) return 0;
  return 1;
}

static void s_encode(const tx_task *t, tn_wbuf *b) {
  const ta_node *n = &t->node;
  tn_put_u8(b, (uint8_t)t->kind);
  s_put_meta(b, &t->out_meta);
  if (t->kind == TX_TASK_FILL) {
    tn_put_u8(b, (uint8_t)t->f.kind);
    tn_put_f64(b, t->f.p0);
    tn_put_f64(b, t->f.p1);
    tn_put_u64(b, t->f.seed);
  } else {
    tn_put_u32(b, (uint32_t)n->nlabels);
    tn_put_u32(b, (uint32_t)n->nout);
    for (int l = 0; l < n->nlabels; l++) {
      tn_put_i64(b, n->size[l]);
      tn_put_i64(b, n->chunk[l]);
    }
    tn_put_u32(b, (uint32_t)n->ninputs);
    for (int i = 0; i < n->ninputs; i++) {
      tn_put_u32(b, (uint32_t)n->in[i].rank);
      for (int d = 0; d < n->in[i].rank; d++) tn_put_u32(b, (uint32_t)n->in[i].label[d]);
      s_put_meta(b, &t->in_meta[i]);
    }
    s_put_prog(b, &n->prog);
    tn_put_u8(b, (uint8_t)n->agg);
    s_put_prog(b, &n->post);
    tn_put_u8(b, (uint8_t)((n->gemm != 0) | (n->mirror != 0) << 1)); /* bit 1: mirror */
    tn_put_u32(b, (uint32_t)(n->drive + 1));
    tn_put_u32(b, (uint32_t)t->nin);
    for (int64_t i = 0; i < t->nin; i++) {
      /* the operand number's top bit says the chunk may still be arriving */
      tn_put_u32(b, (uint32_t)t->in_op[i] | (t->in_wait && t->in_wait[i] ? S_IN_WAIT : 0));
      tn_put_i64(b, t->in_lin[i]);
      tn_put_u64(b, t->in_id[i]);
    }
  }
  tn_put_u32(b, (uint32_t)t->nout);
  for (int64_t i = 0; i < t->nout; i++) {
    tn_put_i64(b, t->out_lin[i]);
    tn_put_u64(b, t->out_id[i]);
  }
  tn_put_u32(b, (uint32_t)t->nrep);
  for (int i = 0; i < t->nrep; i++) {
    tn_put_str(b, t->rep[i]);
    tn_put_u8(b, (uint8_t)t->rep_keep[i]);
  }
  tn_put_u8(b, (uint8_t)t->keep);
}

void tx_task_encode(const tx_task *t, tn_wbuf *b) {
  s_encode(t, b);
  tn_put_u8(b, t->then != NULL);
  if (t->then) {
    tn_put_u32(b, (uint32_t)t->then_from);
    tn_put_u8(b, (uint8_t)t->then_store);
    s_encode(t->then, b);
  }
  /* an optional last field: where each output chunk is pushed */
  if (!t->out_to) return;
  for (int64_t i = 0; i < t->nout; i++) tn_put_str(b, t->out_to[i]);
}

/* Inputs i before j: by operand, then chunk number. */
static int s_input_cmp(const void *a, const void *b, void *ctx) {
  const tx_task *t = ctx;
  int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
  if (t->in_op[i] != t->in_op[j]) return t->in_op[i] < t->in_op[j] ? -1 : 1;
  return (t->in_lin[i] > t->in_lin[j]) - (t->in_lin[i] < t->in_lin[j]);
}

int64_t tx_task_input(const tx_task *t, int operand, int64_t lin) {
  int64_t n = t->in_by ? t->nin : 0, lo = 0, hi = n;
  while (lo < hi) { /* the first input not before (operand, lin) */
    int64_t mid = lo + (hi - lo) / 2, i = t->in_by[mid];
    if (t->in_op[i] < operand || (t->in_op[i] == operand && t->in_lin[i] < lin))
      lo = mid + 1;
    else
      hi = mid;
  }
  int64_t i = lo < n ? t->in_by[lo] : -1;
  return i >= 0 && t->in_op[i] == operand && t->in_lin[i] == lin ? i : -1;
}

void tx_task_free(tx_task *t) {
  free(t->in_by);
  t->in_by = NULL;
  free(t->in_op);
  free(t->in_lin);
  free(t->in_id);
  free(t->in_wait);
  free(t->out_to);
  free(t->out_lin);
  free(t->out_id);
  t->in_op = NULL;
  t->in_lin = t->out_lin = NULL;
  t->in_id = t->out_id = NULL;
  t->in_wait = NULL;
  t->out_to = NULL;
  if (t->then) {
    tx_task_free(t->then);
    free(t->then);
    t->then = NULL;
  }
}

/* One task of the message at r (a then is read by the caller). */
static int s_decode(tn_rbuf *rb, tx_task *t, tr_err *err) {
  tn_rbuf r = *rb;
  memset(t, 0, sizeof *t);
  ta_node *n = &t->node;
  t->kind = tn_get_u8(&r);
  s_get_meta(&r, &t->out_meta);
  if (t->kind > TX_TASK_COMBINE) goto bad;
  if (t->kind == TX_TASK_FILL) {
    t->f.kind = (tp_fill_kind)tn_get_u8(&r);
    t->f.p0 = tn_get_f64(&r);
    t->f.p1 = tn_get_f64(&r);
    t->f.seed = tn_get_u64(&r);
    if (t->f.kind > TP_FILL_PERMUTATION) r.bad = 1; /* the last kind */
  } else if (!r.bad) {
    uint32_t nl = tn_get_u32(&r), no = tn_get_u32(&r);
    if (nl > TK_MAX_LABELS || no > nl || (int)no != t->out_meta.rank) goto bad;
    n->nlabels = (int)nl;
    n->nout = (int)no;
    for (int l = 0; l < n->nlabels; l++) {
      n->size[l] = tn_get_i64(&r);
      n->chunk[l] = tn_get_i64(&r);
      if (n->size[l] < 1 || n->chunk[l] < 1) goto bad;
      if (l < n->nout && (n->size[l] != t->out_meta.shape[l] || n->chunk[l] != t->out_meta.chunk[l]))
        goto bad;
    }
    uint32_t ni = tn_get_u32(&r);
    if (ni > TK_MAX_INPUTS) goto bad;
    n->ninputs = (int)ni;
    for (int i = 0; i < n->ninputs && !r.bad; i++) {
      uint32_t rank = tn_get_u32(&r);
      if (rank > TR_MAX_RANK) goto bad;
      n->in[i].rank = (int)rank;
      for (int d = 0; d < n->in[i].rank; d++) {
        uint32_t l = tn_get_u32(&r);
        if (l >= nl) goto bad;
        n->in[i].label[d] = (int)l;
      }
      s_get_meta(&r, &t->in_meta[i]);
      if ((int)rank != t->in_meta[i].rank) goto bad;
      for (int d = 0; d < n->in[i].rank; d++)
        if (t->in_meta[i].shape[d] != n->size[n->in[i].label[d]]) goto bad;
      /* operands of one relation (a plan's relations have names of their
      ** own) share its number, as in the plan: ta_gram_labels reads it */
      n->in[i].rel = i;
      for (int j = 0; j < i; j++)
        if (s_same_meta(&t->in_meta[j], &t->in_meta[i])) {
          n->in[i].rel = n->in[j].rel;
          break;
        }
    }
    s_get_prog(&r, &n->prog, n->ninputs);
    n->agg = (tk_agg)tn_get_u8(&r);
    s_get_prog(&r, &n->post, 1);
    uint8_t gm = tn_get_u8(&r);
    n->gemm = gm & 1;
    n->mirror = gm >> 1 & 1;
    if (gm > 3 || (n->mirror && !n->gemm)) goto bad;
    uint32_t drive = tn_get_u32(&r);
    if (drive > ni) goto bad;
    n->drive = (int)drive - 1;
    if (t->kind == TX_TASK_COMBINE &&
        (ni != 1 || n->drive >= 0 || n->agg == TK_AGG_NONE || t->in_meta[0].rank != t->out_meta.rank))
      goto bad;
    if (n->agg > TK_AGG_MIN || (n->agg == TK_AGG_NONE && n->nout != n->nlabels) || !n->prog.n)
      goto bad;
    if (n->gemm && !ta_gemm_ok(n)) goto bad; /* exec's s_factor relies on it */
    uint32_t nin = tn_get_count(&r, 20);
    t->nin = nin;
    t->in_op = calloc(nin + 1, sizeof *t->in_op);
    t->in_lin = calloc(nin + 1, sizeof *t->in_lin);
    t->in_id = calloc(nin + 1, sizeof *t->in_id);
    t->in_wait = calloc(nin + 1, sizeof *t->in_wait);
    t->in_by = calloc(nin + 1, sizeof *t->in_by);
    if (!t->in_op || !t->in_lin || !t->in_id || !t->in_wait || !t->in_by) {
      tx_task_free(t);
      return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < nin && !r.bad; i++) {
      uint32_t op = tn_get_u32(&r);
      t->in_wait[i] = (op & S_IN_WAIT) != 0;
      op &= ~S_IN_WAIT;
      t->in_lin[i] = tn_get_i64(&r);
      t->in_id[i] = tn_get_u64(&r);
      if (op >= ni) goto bad;
      t->in_op[i] = (int)op;
      if (t->in_lin[i] < 0 || t->in_lin[i] >= tr_nchunks(&t->in_meta[op])) goto bad;
      t->in_by[i] = i;
    }
    qsort_r(t->in_by, nin, sizeof *t->in_by, s_input_cmp, t);
  }
  uint32_t no = tn_get_count(&r, 16);
  t->nout = no;
  t->out_lin = calloc(no + 1, sizeof *t->out_lin);
  t->out_id = calloc(no + 1, sizeof *t->out_id);
  if (!t->out_lin || !t->out_id) {
    tx_task_free(t);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  for (uint32_t i = 0; i < no && !r.bad; i++) {
    t->out_lin[i] = tn_get_i64(&r);
    t->out_id[i] = tn_get_u64(&r);
    if (t->out_lin[i] < 0 || t->out_lin[i] >= tr_nchunks(&t->out_meta)) goto bad;
  }
  uint32_t nrep = tn_get_u32(&r);
  if (nrep > TC_MAX_REPLICAS) goto bad;
  t->nrep = (int)nrep;
  for (int i = 0; i < t->nrep; i++) {
    tn_get_str(&r, t->rep[i], sizeof t->rep[i]);
    uint8_t k = tn_get_u8(&r);
    if (k != TC_KEEP_FILE && k != TC_KEEP_BACKGROUND) goto bad; /* a replica is committed */
    t->rep_keep[i] = k;
  }
  uint8_t keep = tn_get_u8(&r);
  if (keep > TC_KEEP_BACKGROUND || (keep == TC_KEEP_SCRATCH && t->nrep))
    goto bad; /* a scratch chunk has no replicas */
  t->keep = keep;
  *rb = r;
  if (!r.bad) return TR_OK;
bad:
  tx_task_free(t);
  return tr_seterr(err, TR_EINVAL, "malformed task");
}

/* A fused consumer (tx_task.then) must be able to take each of t's output
** chunks as its operand then_from, chunk for chunk: an elementwise node
** whose operand has t's output labels in order, its shape, chunks and
** type, making the same chunk numbers. */
static int s_then_ok(const tx_task *t) {
  const tx_task *c = t->then;
  const ta_node *n = &c->node;
  const tr_tensor *om = &t->out_meta, *fm;
  if (t->kind != TX_TASK_NODE || c->kind != TX_TASK_NODE || n->agg != TK_AGG_NONE ||
      t->then_from < 0 || t->then_from >= n->ninputs || c->nout != t->nout || n->drive >= 0)
    return 0;
  fm = &c->in_meta[t->then_from];
  if (n->in[t->then_from].rank != n->nout || fm->rank != om->rank || fm->dtype != om->dtype) return 0;
  for (int d = 0; d < om->rank; d++)
    if (n->in[t->then_from].label[d] != d || fm->shape[d] != om->shape[d] || fm->chunk[d] != om->chunk[d] ||
        n->chunk[d] != om->chunk[d])
      return 0;
  for (int64_t i = 0; i < c->nout; i++)
    if (c->out_lin[i] != t->out_lin[i]) return 0;
  for (int64_t i = 0; i < c->nin; i++)
    if (c->in_op[i] == t->then_from) return 0; /* that operand is this task's */
  return 1;
}

int tx_task_decode(const void *p, size_t len, tx_task *t, tr_err *err) {
  tn_rbuf r;
  tn_rbuf_init(&r, p, len);
  int rc = s_decode(&r, t, err);
  if (rc) return rc;
  if (tn_get_u8(&r)) {
    t->then_from = (int)tn_get_u32(&r);
    t->then_store = tn_get_u8(&r) != 0;
    if (!(t->then = calloc(1, sizeof *t->then))) {
      tx_task_free(t);
      return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
    if ((rc = s_decode(&r, t->then, err))) {
      free(t->then);
      t->then = NULL;
      tx_task_free(t);
      return rc;
    }
    if (!s_then_ok(t)) r.bad = 1;
  }
  if (!r.bad && r.off < r.n) {
    /* pushed partials: a node task that stores its outputs as scratch */
    if (t->kind != TX_TASK_NODE || t->keep != TC_KEEP_SCRATCH || t->then ||
        !(t->out_to = calloc((size_t)t->nout + 1, sizeof *t->out_to))) {
      r.bad = 1;
    } else {
      for (int64_t i = 0; i < t->nout; i++) tn_get_str(&r, t->out_to[i], sizeof t->out_to[i]);
    }
  }
  if (tn_rbuf_ok(&r) == TR_OK) return TR_OK;
  tx_task_free(t);
  return tr_seterr(err, TR_EINVAL, "malformed task");
}

