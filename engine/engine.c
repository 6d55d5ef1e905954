/*
** engine/engine.c - the engine handle and one function per statement kind.
**
** Assignments go through compile.c (bind, EinSum nodes, TRA) and exec.c
** (chunk tasks).  The other statements are chunk loops of their own here:
** LOAD and SAVE copy between a user file and chunks, FILL generates
** chunks, PRINT gathers a slice; each runs its chunks on the thread pool
** and a statement that writes becomes visible only when all its chunks
** are durable on their workers (dist.c).
*/
#include "config.h"
#include "engine/engine_int.h"

#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

int te_open(const te_config *cfg, te_engine **out, tr_err *err) {
  te_engine *e = calloc(1, sizeof *e);
  int rc;
  *out = NULL;
  if (!e || !(e->memo = to_memo_new())) {
    free(e);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  e->kt = tk_backend_get(cfg && cfg->backend ? cfg->backend : "auto");
  if (!e->kt) {
    rc = tr_seterr(err, TR_EINVAL, "unknown kernel backend '%s' (compiled in: %s)",
                   cfg->backend, tk_backends_compiled());
    goto fail;
  }
  e->threads = cfg && cfg->threads > 0 ? cfg->threads : tr_ncores();
  int64_t mem = tr_phys_memory();
  e->cache_budget = mem > 0 ? (size_t)mem / 4 : (size_t)1 << 30;
  if ((rc = tc_open(cfg ? cfg->dbpath : NULL, &e->db, err))) goto fail;
  td_config dc = {0};
  if (cfg) {
    dc = (td_config){cfg->workers, cfg->local_workers, cfg->threads, cfg->backend, cfg->keys,
                     cfg->self_exe, cfg->device, cfg->gpu_memory};
  }
  if ((rc = te_settings_load(e, err)) || (rc = te_weights_load(e, err)) ||
      (rc = td_cluster_open(e->db, &dc, &e->interrupt, &e->cluster, err))) {
    tc_close(&e->db);
    goto fail;
  }
  *out = e;
  return TR_OK;
fail:
  to_memo_free(&e->memo);
  free(e);
  return rc;
}

static void s_block_clear(te_engine *e);

void te_close(te_engine **pe) {
  if (!pe || !*pe) return;
  s_block_clear(*pe); /* an open block's statements never ran */
  td_cluster_close(&(*pe)->cluster);
  tc_close(&(*pe)->db);
  to_memo_free(&(*pe)->memo);
  free(*pe);
  *pe = NULL;
}

const char *te_backend_name(const te_engine *e) { return e->kt->name; }

int te_check_output_path(const te_engine *e, const char *path, tr_err *err) {
  char why[512];
  if (!tc_holds_data(tc_dir(e->db), path, why, sizeof why)) return TR_OK;
  return tr_seterr(err, TR_EINVAL, "will not write over '%s': %s", path, why);
}

/* The lexer's services, for the shell (parse/ is below the engine). */
size_t te_statement_end(const char *text) { return tp_statement_end(text); }
long te_open_quote(const char *text) { return tp_open_quote(text); }
int te_is_blank(const char *text) { return tp_is_blank(text); }
const char *const *te_keywords(void) { return tp_keywords(); }

const char *const *te_words(te_words_kind kind) {
  switch (kind) {
  case TE_WORDS_STATEMENTS: return tp_statement_words;
  case TE_WORDS_EXPLAIN: return tp_explain_words;
  case TE_WORDS_LOAD: return tp_load_words;
  case TE_WORDS_AGGREGATES: return tp_aggregate_words;
  case TE_WORDS_FUNCTIONS: return tp_function_words;
  }
  return NULL;
}

void te_set_progress(te_engine *e, te_progress_fn *fn, void *ctx) {
  td_set_progress(e->cluster, fn, ctx);
}

void te_worker_cpu(te_engine *e, double *user, double *sys) {
  td_worker_cpu(e->cluster, user, sys);
}

void te_set_print(te_engine *e, int summarise, int width) {
  e->print_summary = summarise;
  e->print_width = width;
}

void te_interrupt(te_engine *e) { tr_cancel_set(&e->interrupt); }

void te_interrupt_clear(te_engine *e) { tr_cancel_clear(&e->interrupt); }

/* ---- workers --------------------------------------------------------------- */

int te_worker_add(te_engine *e, const char *endpoint, te_result **res, tr_err *err) {
  int rc = td_worker_add(e->cluster, endpoint, err);
  te_result *r = te_take_notice(e, NULL);
  if (res) *res = r;
  else te_result_free(&r);
  return rc;
}

int te_worker_remove(te_engine *e, const char *endpoint, te_result **res, tr_err *err) {
  int rc = td_worker_remove(e->cluster, endpoint, err);
  te_result *r = te_take_notice(e, NULL);
  if (res) *res = r;
  else te_result_free(&r);
  return rc;
}

int te_workers(te_engine *e, te_result **res, tr_err *err) {
  static const char *const cols[] = {"endpoint", "state", "tasks", "chunks", "bytes_sent",
                                     "bytes_received", "kernels"};
  td_worker_stat *w = NULL;
  int n = 0, rc = td_workers(e->cluster, &w, &n, err);
  te_result *r = rc ? NULL : te_rows_new(7, cols);
  if (!rc && !r) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int i = 0; !rc && i < n; i++) {
    char v[4][32] = {"-", "-", "-", "-"};
    if (w[i].up) {
      snprintf(v[0], sizeof v[0], "%llu", (unsigned long long)w[i].tasks);
      snprintf(v[1], sizeof v[1], "%llu", (unsigned long long)w[i].chunks);
      snprintf(v[2], sizeof v[2], "%llu", (unsigned long long)w[i].bytes_sent);
      snprintf(v[3], sizeof v[3], "%llu", (unsigned long long)w[i].bytes_received);
    }
    const char *cells[7] = {w[i].endpoint, w[i].up ? "up" : "down", v[0], v[1], v[2], v[3],
                            w[i].up ? w[i].kernels : "-"};
    if (te_rows_add(r, cells)) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  free(w);
  if (rc) {
    te_result_free(&r);
    return rc;
  }
  *res = r;
  return TR_OK;
}

int te_maintain(te_engine *e, double budget_s, tr_err *err) {
  return td_maintain(e->cluster, budget_s, err);
}

void te_sync(te_engine *e) {
  if (e && e->cluster) td_sync(e->cluster);
}

int te_write_held(te_engine *e, int *refused, tr_err *err) {
  if (refused) *refused = 0;
  return e && e->cluster ? td_sync_local(e->cluster, refused, err) : TR_OK;
}

static void s_block_clear(te_engine *e) {
  for (int i = 0; i < e->nblock; i++) tp_stmt_free(&e->block[i]);
  e->nblock = e->npend = 0;
  e->in_block = 0;
}

/* An assignment inside BEGIN .. COMMIT: checked now (against the block's
** earlier outputs), run at COMMIT.  Takes *sp. */
static int s_block_add(te_engine *e, tp_stmt **sp, tr_err *err) {
  ta_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return tr_seterr(err, TR_ENOMEM, "out of memory");
  int rc = e->nblock >= TA_MAX_NODES
               ? tr_seterr(err, TR_EINVAL, "block too large: at most %d statements", TA_MAX_NODES)
               : ta_compile(e->db, e->pend, te_block_defs(e), e->npend, *sp, te_compile_flags(e),
                            plan, err);
  if (!rc) {
    const ta_node *last = &plan->nodes[plan->nnodes - 1];
    e->pend[e->npend++] = plan->rels[last->out].meta;
    e->block[e->nblock++] = *sp;
    *sp = NULL;
  }
  free(plan);
  return rc;
}

/* COMMIT (x NULL) or EXPLAIN [ANALYZE] COMMIT (x): the block's statements
** as one plan, optimized together. */
static int s_block_run(te_engine *e, const tp_stmt *x, te_result **res, tr_err *err) {
  ta_plan *all = calloc(1, sizeof *all), *one = calloc(1, sizeof *one);
  int rc = all && one ? TR_OK : tr_seterr(err, TR_ENOMEM, "out of memory");
  e->npend = 0;
  for (int i = 0; !rc && i < e->nblock; i++) {
    rc = ta_compile(e->db, e->pend, te_block_defs(e), e->npend, e->block[i], te_compile_flags(e),
                    one, err);
    /* a product read through the products that made it is more steps: a
    ** block that fits as written runs as written */
    if (!rc && all->nnodes + one->nnodes > TA_MAX_NODES)
      rc = ta_compile(e->db, e->pend, NULL, e->npend, e->block[i], te_compile_flags(e), one, err);
    if (!rc) rc = ta_plan_append(all, one, err);
    if (!rc) e->pend[e->npend++] = one->rels[one->nodes[one->nnodes - 1].out].meta;
  }
  /* e->pend now holds the block's outputs again, for an open block's
  ** later statements (EXPLAIN .. COMMIT without ANALYZE keeps it open). */
  if (!rc && all->nnodes) rc = te_run_plan(e, all, x, res, NULL, err);
  free(all);
  free(one);
  return rc;
}

/* A worker lost while a statement ran fails it (its tasks and copies are
** gone), yet the replicas of what the worker held are on the others.  So
** a statement that failed that way runs once more on the workers left,
** as a user would run it again: when it committed nothing (a block's
** later statement failing after earlier ones committed does not, since
** those would apply twice) and no worker lost was a local one that died
** of a fault of its own (SIGSEGV and the like: the same work could bring
** down the next).  Before it, the live workers make durable what they hold
** in memory only, so that losing more of them in the second run costs no
** committed data.  s_again decides, given the losses counted before the
** first run; the first failure becomes the warning of a result
** (te_take_notice), or leads the error of a second failure
** (s_again_failed). */
typedef struct s_losses { uint64_t lost, faults; } s_losses;

static s_losses s_losses_now(te_engine *e) {
  s_losses l;
  l.lost = td_losses(e->cluster, &l.faults);
  return l;
}

static int s_again(te_engine *e, s_losses before, int rc, tr_err *err) {
  s_losses now = s_losses_now(e);
  tr_err serr;
  if (rc != TR_EIO || now.lost == before.lost || now.faults != before.faults || e->committed || e->again)
    return 0;
  if (td_sync_held(e->cluster, &serr)) return 0;
  if (!(e->again = strdup(err->msg))) return 0;
  tr_clearerr(err);
  return 1;
}

static void s_again_failed(te_engine *e, int rc, tr_err *err) {
  if (rc && e->again && err->code) tr_prefix(err, err->code, "%s; it ran again", e->again);
}

/* Statements while a block is open. */
static int s_in_block(te_engine *e, tp_stmt **sp, te_result **res, tr_err *err) {
  tp_stmt *s = *sp;
  int rc;
  s_losses before;
  int done;
  switch (s->kind) {
  case TP_ST_ASSIGN: return s_block_add(e, sp, err);
  case TP_ST_BEGIN: return tr_seterr(err, TR_EINVAL, "a block is already open (COMMIT or ROLLBACK it first)");
  case TP_ST_ROLLBACK: s_block_clear(e); return TR_OK;
  case TP_ST_COMMIT:
    before = s_losses_now(e);
    done = e->committed;
    rc = s_block_run(e, NULL, res, err);
    if (s_again(e, before, rc, err)) {
      rc = s_block_run(e, NULL, res, err);
      s_again_failed(e, rc, err);
    }
    s_block_clear(e);
    if (rc && err->code) {
      /* say what stayed: outputs made before the failure are committed */
      size_t l = strlen(err->msg);
      const char *more = e->committed == done ? " (the block committed nothing)"
                                              : " (the block stopped there; outputs made before it are committed)";
      if (l + strlen(more) < sizeof err->msg) memcpy(err->msg + l, more, strlen(more) + 1);
    }
    return rc;
  case TP_ST_EXPLAIN:
    if (!s->block)
      return tr_seterr(err, TR_EINVAL, "EXPLAIN of one statement inside a block: use EXPLAIN [ANALYZE] COMMIT");
    rc = s_block_run(e, s, res, err);
    if (s->analyze) s_block_clear(e);
    return rc;
  default:
    return tr_seterr(err, TR_EINVAL, "only assignments can be in a block (BEGIN .. COMMIT); ROLLBACK leaves it");
  }
}

/* After a failure naming a tensor that does not exist ("no such tensor:
** NAME", the catalog's words): point at it if nothing is pointed at yet
** (at, the statement's name), and add the nearest tensor name; 1 when one
** was added. */
static int s_suggest(te_engine *e, int at, tr_err *err) {
  static const char lead[] = "no such tensor: ";
  char name[TP_NAME_MAX], **names = NULL;
  size_t n, o;
  int k, count = 0;
  if (err->code == TR_ENAME && !err->at) err->at = at; /* exists already, or is unknown */
  if ((err->code != TR_ENAME && err->code != TR_ENOTFOUND) || strncmp(err->msg, lead, sizeof lead - 1))
    return 0;
  if (!err->at) err->at = at;
  n = strcspn(err->msg + sizeof lead - 1, " ");
  if (n >= sizeof name) return 0;
  memcpy(name, err->msg + sizeof lead - 1, n);
  name[n] = '\0';
  if (te_tensor_names(e, &names, NULL)) return 0;
  while (names[count]) count++;
  k = tr_closest(name, (const char *const *)names, count);
  o = sizeof lead - 1 + n;
  if (k >= 0) {
    char msg[sizeof err->msg + TP_NAME_MAX + 32];
    int m = snprintf(msg, sizeof msg, "%.*s (did you mean %s?)%s", (int)o, err->msg, names[k],
                     err->msg + o);
    if (m > 0 && (size_t)m < sizeof err->msg) memcpy(err->msg, msg, (size_t)m + 1);
  }
  te_free_names(names);
  return k >= 0;
}

/* A name written alone (`X;`, shown as PRINT shows it) that is no tensor,
** and near none (s_suggest found none), may be a statement mistyped: say
** so, with the nearest statement if one is. */
static void s_not_a_statement(const tp_stmt *s, tr_err *err) {
  int count, k;
  for (count = 0; tp_statement_words[count]; count++) {}
  k = tr_closest(s->name, tp_statement_words, count);
  if (k >= 0)
    tr_seterr(err, TR_ESYNTAX, "unknown statement '%s' (did you mean %s?)", s->name, tp_statement_words[k]);
  else
    tr_seterr(err, TR_ENOTFOUND, "no such tensor or statement: %s", s->name);
  err->at = s->name_pos;
}

/* A statement outside a block. */
static int s_stmt(te_engine *e, tp_stmt *s, te_result **res, tr_err *err) {
  int rc = TR_OK;
  switch (s->kind) {
  case TP_ST_BEGIN: e->in_block = 1; break;
  case TP_ST_COMMIT:
  case TP_ST_ROLLBACK: rc = tr_seterr(err, TR_EINVAL, "no block is open (BEGIN starts one)"); break;
  case TP_ST_CREATE: rc = te_create(e, s, err); break;
  case TP_ST_LOAD: rc = te_load(e, s, err); break;
  case TP_ST_SAVE: rc = te_save(e, s, err); break;
  case TP_ST_FILL: rc = te_fill(e, s, err); break;
  case TP_ST_SHOW: rc = te_show(e, res, err); break;
  case TP_ST_SETTINGS: rc = te_show_settings(e, res, err); break;
  case TP_ST_SLICE: rc = te_slice(e, s, err); break;
  case TP_ST_DESCRIBE: rc = te_describe(e, s, res, err); break;
  case TP_ST_DROP:
    rc = td_drop(e->cluster, s->name, err);
    if (rc == TR_ENOTFOUND && s->if_exists) rc = TR_OK;
    if (!rc) rc = tc_declared_chunk_set(e->db, s->name, -1, NULL, err);
    break;
  case TP_ST_PRINT:
    rc = te_print(e, s, res, err);
    break;
  case TP_ST_ASSIGN: rc = te_assign(e, s, res, err); break;
  case TP_ST_EXPLAIN:
    rc = s->block ? tr_seterr(err, TR_EINVAL, "no block is open (BEGIN starts one)") : te_assign(e, s, res, err);
    break;
  case TP_ST_SET: rc = te_set(e, s, err); break;
  case TP_ST_CALIBRATE: rc = te_calibrate(e, res, err); break;
  }
  return rc;
}

/* Statements that may run again after a worker was lost (s_again): those
** that work on the workers and change nothing before they commit.  Not
** DROP, whose catalog change comes first. */
static int s_may_run_again(const tp_stmt *s) {
  switch (s->kind) {
  case TP_ST_LOAD:
  case TP_ST_SAVE:
  case TP_ST_FILL:
  case TP_ST_SLICE:
  case TP_ST_PRINT:
  case TP_ST_ASSIGN:
  case TP_ST_EXPLAIN:
  case TP_ST_CALIBRATE: return 1;
  default: return 0;
  }
}

static int s_exec(te_engine *e, const char *text, size_t len, te_result **res, tr_err *err) {
  tp_stmt *s = NULL;
  te_result *r = NULL;
  if (res) *res = NULL;
  tr_clearerr(err);
  td_progress_start(e->cluster);
  e->committed = 0;
  int rc = tp_parse(text, len, &s, err);
  if (rc) return rc;
  if (e->in_block) {
    rc = s_in_block(e, &s, &r, err);
    goto done;
  }
  s_losses before = s_losses_now(e);
  rc = s_stmt(e, s, &r, err);
  if (s_may_run_again(s) && s_again(e, before, rc, err)) {
    te_result_free(&r);
    td_progress_start(e->cluster);
    rc = s_stmt(e, s, &r, err);
    s_again_failed(e, rc, err);
  }
done:
  if (rc && err && !s_suggest(e, s->name_pos, err) && rc == TR_ENOTFOUND && s->kind == TP_ST_PRINT &&
      s->bare)
    s_not_a_statement(s, err);
  tp_stmt_free(&s);
  if (rc && err && !err->code) tr_seterr(err, rc, "statement failed (status %d)", rc);
  if (!rc) r = te_take_notice(e, r);
  free(td_take_notice(e->cluster)); /* a failed statement's error says what matters */
  free(e->again);
  e->again = NULL;
  if (res) *res = r;
  else te_result_free(&r);
  return rc;
}

int te_exec(te_engine *e, const char *text, size_t len, te_result **res, tr_err *err) {
  tr_work(1); /* background chores on this machine wait (util.h) */
  int rc = s_exec(e, text, len, res, err);
  tr_work(0);
  return rc;
}

int te_tensor_names(te_engine *e, char ***names, tr_err *err) {
  tr_tensor *ts = NULL;
  int n = 0, rc = tc_tensor_list(e->db, &ts, &n, err);
  if (rc) return rc;
  char **v = calloc((size_t)n + 1, sizeof(char *));
  if (!v) {
    free(ts);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++) v[i] = strdup(ts[i].name);
  free(ts);
  *names = v;
  return TR_OK;
}

void te_free_names(char **names) {
  if (!names) return;
  for (char **p = names; *p; p++) free(*p);
  free(names);
}

int te_schema(te_engine *e, const char *name, char **text, tr_err *err) {
  tr_tensor *ts = NULL;
  int n = 0, rc = tc_tensor_list(e->db, &ts, &n, err);
  if (rc) return rc;
  size_t cap = 256, len = 0;
  char *out = malloc(cap);
  int found = 0;
  if (!out) {
    free(ts);
    return tr_seterr(err, TR_ENOMEM, "out of memory");
  }
  out[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (name && strcmp(name, ts[i].name)) continue;
    found = 1;
    char shape[256], chunk[256], line[700];
    te_dims_text(shape, sizeof shape, ts[i].rank, ts[i].shape, ", ");
    te_dims_text(chunk, sizeof chunk, ts[i].rank, ts[i].chunk, ", ");
    int k = snprintf(line, sizeof line, "CREATE TENSOR %s[%s] CHUNK [%s] TYPE %s;\n", ts[i].name,
                     shape, chunk, tr_dtype_name(ts[i].dtype));
    if (len + (size_t)k + 1 > cap) {
      cap = (len + (size_t)k + 1) * 2;
      char *t = realloc(out, cap);
      if (!t) {
        free(out);
        free(ts);
        return tr_seterr(err, TR_ENOMEM, "out of memory");
      }
      out = t;
    }
    memcpy(out + len, line, (size_t)k + 1);
    len += (size_t)k;
  }
  free(ts);
  if (name && !found) {
    free(out);
    return tr_seterr(err, TR_ENOTFOUND, "no such tensor: %s", name);
  }
  *text = out;
  return TR_OK;
}
