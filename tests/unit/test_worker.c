/*
** tests/unit/test_worker.c - requests sent by hand to a real worker
** (`$TRADB --worker` on an ipc:// socket in a scratch directory), for what
** the coordinator and the other workers never send: PULLs that name
** memory the worker cannot read, a copy that fails its checksum, a body
** cut short.  Each gets an error naming the chunk, and nothing is stored;
** a good PULL of this process's memory stores exactly its bytes, mapped
** rather than copied when they are in shared memory.  And a
** TASK with a consumer inside it: what it stores is what it was told to.
** And a SYNC of all a worker holds in memory only, or of chunks it names,
** writes them at once; a malformed one is refused.
*/
#include "config.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "catalog/catalog.h"
#include "exec/exec.h"
#include "net/net.h"
#include "tests/unit/task_fixture.h"
#include "util/util.h"

extern char **environ;

#define S_DB 0x5eedull /* the database the requests name */

static char s_dir[64];
static pid_t s_pid;
static void *s_ctx, *s_sock;
static uint64_t s_req;

/* The reply to request s_req within 10 s (heartbeats and late replies to
** earlier requests are skipped). */
static void s_reply(tn_in *rep) {
  tr_err err;
  for (;;) {
    zmq_pollitem_t it = {s_sock, 0, ZMQ_POLLIN, 0};
    cr_assert_gt(zmq_poll(&it, 1, 10000), 0, "the worker did not answer request %llu",
                 (unsigned long long)s_req);
    cr_assert_eq(tn_recv(s_sock, 0, 0, rep, &err), TR_OK, "%s", err.msg);
    if (rep->req == s_req) return;
    tn_in_close(rep);
  }
}

/* Send request `type` with body b (freed) and wait for its reply. */
static void s_call(int type, tn_wbuf *b, tn_in *rep) {
  tr_err err;
  cr_assert_eq(tn_send(s_sock, NULL, 0, type, ++s_req, S_DB, b, 0, NULL, NULL, NULL, NULL, &err),
               TR_OK, "%s", err.msg);
  tn_wbuf_free(b);
  s_reply(rep);
}

static void s_start(void) {
  const char *tradb = getenv("TRADB");
  cr_assert_not_null(tradb, "TRADB must name the tradb binary");
  snprintf(s_dir, sizeof s_dir, "/tmp/tradb-worker-test.XXXXXX");
  cr_assert_not_null(mkdtemp(s_dir));
  char ep[128], data[128], log[128];
  snprintf(ep, sizeof ep, "ipc://%s/w.ipc", s_dir);
  snprintf(data, sizeof data, "%s/w", s_dir);
  snprintf(log, sizeof log, "%s/w.log", s_dir);
  char worker[] = "--worker", listen[] = "--listen", dat[] = "--data", threads[] = "--threads", one[] = "1";
  char *argv[] = {(char *)tradb, worker, listen, ep, dat, data, threads, one, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert_eq(posix_spawn(&s_pid, tradb, &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  s_ctx = zmq_ctx_new();
  s_sock = zmq_socket(s_ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(s_sock, ZMQ_LINGER, &linger, sizeof linger);
  cr_assert_eq(zmq_connect(s_sock, ep), 0);
  /* Up once it echoes a ping (queued until its socket exists). */
  tn_wbuf b = {0};
  tn_in rep;
  s_call(TN_HEARTBEAT, &b, &rep);
  cr_assert_eq(rep.type, TN_HEARTBEAT);
  tn_in_close(&rep);
}

static void s_stop(void) {
  zmq_close(s_sock);
  zmq_ctx_term(s_ctx);
  kill(s_pid, SIGKILL);
  waitpid(s_pid, NULL, 0);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(pull, .init = s_start, .fini = s_stop, .timeout = 60);

/* PULL chunk c from address addr of this process (body cut after the
** chunk meta if cut); the reply. */
static void s_pull(const tn_chunk *c, const void *addr, int cut, tn_in *rep) {
  tn_wbuf b = {0};
  tn_put_chunk(&b, c);
  if (!cut) {
    tn_put_u8(&b, 0); /* TC_KEEP_FILE */
    tn_put_u32(&b, (uint32_t)getpid());
    tn_put_u64(&b, (uint64_t)(uintptr_t)addr);
  }
  s_call(TN_PULL, &b, rep);
}

/* The error rep carries: its code and chunk, the message in msg. */
static int s_error(tn_in *rep, uint64_t *chunk, char *msg, size_t cap) {
  int code = 0;
  cr_assert_eq(rep->type, TN_ERROR, "expected an error, got %s", tn_type_name(rep->type));
  cr_assert_eq(tn_get_error(rep, &code, chunk, msg, cap), TR_OK);
  return code;
}

/* GET chunk id: TR_OK and its bytes in out (n bytes), or the error. */
static int s_get(uint64_t id, void *out, size_t n) {
  tn_wbuf b = {0};
  tn_in rep;
  tn_put_u32(&b, 1);
  tn_put_u64(&b, id);
  s_call(TN_GET, &b, &rep);
  int rc = rep.type == TN_DATA ? TR_OK : TR_ENOTFOUND;
  if (!rc) {
    size_t got;
    const void *d = tn_in_data(&rep, 0, &got);
    cr_assert(d && got == n, "GET returned %zu bytes, not %zu", got, n);
    memcpy(out, d, n);
  }
  tn_in_close(&rep);
  return rc;
}

Test(pull, good_and_bad_pulls) {
  enum { N = 1 << 16 };
  float *v = malloc(N * sizeof *v), *back = malloc(N * sizeof *v);
  cr_assert(v && back);
  for (int i = 0; i < N; i++) v[i] = (float)i * 0.5f - 7;
  tn_chunk c = {.id = 0x1001, .dtype = TR_F32, .nbytes = N * sizeof *v};
  c.checksum = tc_checksum(v, c.nbytes);
  tn_in rep;
  uint64_t chunk;
  char msg[256];

  /* A good pull stores exactly these bytes (unless this machine does not
  ** let a process read its parent: then the worker says so). */
  s_pull(&c, v, 0, &rep);
  if (rep.type == TN_ERROR) {
    s_error(&rep, &chunk, msg, sizeof msg);
    cr_assert_eq(chunk, c.id);
    cr_assert(strstr(msg, "cannot copy a chunk out of process"), "%s", msg);
    cr_log_warn("this machine forbids process_vm_readv here (%s): good pull not checked", msg);
  } else {
    cr_assert_eq(rep.type, TN_PULL_OK);
    size_t n;
    const void *body = tn_in_body(&rep, &n);
    tn_rbuf r;
    tn_rbuf_init(&r, body, n);
    cr_assert_eq(tn_get_u64(&r), c.id);
    cr_assert_eq(s_get(c.id, back, c.nbytes), TR_OK);
    cr_assert_eq(memcmp(back, v, c.nbytes), 0, "the pulled chunk differs from its source");
  }
  tn_in_close(&rep);

  /* Memory the worker cannot read: an error naming the chunk, none kept. */
  tn_chunk bad = c;
  bad.id = 0x1002;
  s_pull(&bad, (const void *)(uintptr_t)4096, 0, &rep);
  cr_assert_eq(s_error(&rep, &chunk, msg, sizeof msg), TR_EIO);
  cr_assert_eq(chunk, bad.id);
  cr_assert(strstr(msg, "cannot copy a chunk out of process"), "%s", msg);
  tn_in_close(&rep);
  cr_assert_neq(s_get(bad.id, back, bad.nbytes), TR_OK, "a failed pull left a chunk");

  /* A copy that fails its checksum (where the copy itself is allowed). */
  bad.id = 0x1003;
  bad.checksum = c.checksum ^ 1;
  s_pull(&bad, v, 0, &rep);
  int code = s_error(&rep, &chunk, msg, sizeof msg);
  cr_assert(code == TR_ECORRUPT || strstr(msg, "cannot copy"), "%d %s", code, msg);
  cr_assert_eq(chunk, bad.id);
  tn_in_close(&rep);
  cr_assert_neq(s_get(bad.id, back, bad.nbytes), TR_OK, "a chunk that failed its checksum was kept");

  /* A body cut short. */
  bad.id = 0x1004;
  bad.checksum = c.checksum;
  s_pull(&bad, v, 1, &rep);
  cr_assert_eq(s_error(&rep, &chunk, msg, sizeof msg), TR_EINVAL);
  cr_assert(strstr(msg, "malformed PULL"), "%s", msg);
  tn_in_close(&rep);
  cr_assert_neq(s_get(bad.id, back, bad.nbytes), TR_OK);

  free(v);
  free(back);
}

/* PULL chunk c out of blob b, which is in this process's shared memory,
** naming descriptor fd and inode ino; the reply. */
static void s_pull_shared(const tn_chunk *c, tr_blob *b, int fd, uint64_t ino, tn_in *rep) {
  tn_wbuf w = {0};
  tn_put_chunk(&w, c);
  tn_put_u8(&w, 0); /* TC_KEEP_FILE */
  tn_put_u32(&w, (uint32_t)getpid());
  tn_put_u64(&w, (uint64_t)(uintptr_t)tr_blob_data(b));
  tn_put_u32(&w, (uint32_t)fd);
  tn_put_u64(&w, ino);
  s_call(TN_PULL, &w, rep);
}

/* Whether the worker's log holds line. */
static int s_logged(const char *line) {
  char path[128], buf[8192];
  snprintf(path, sizeof path, "%s/w.log", s_dir);
  FILE *f = fopen(path, "r");
  int found = 0;
  while (f && !found && fgets(buf, sizeof buf, f)) found = strstr(buf, line) != NULL;
  if (f) fclose(f);
  return found;
}

Test(pull, a_chunk_in_shared_memory_is_mapped_not_copied) {
  enum { N = 1 << 18 };
  cr_assert_eq(tr_blob_share((size_t)64 << 20), TR_OK);
  cr_assert(s_logged("chunks in shared memory"), "a local worker does not share its chunks");
  tr_blob *b = tr_blob_new(N * sizeof(float));
  float *v = tr_blob_data(b), *back = malloc(N * sizeof *v);
  cr_assert(back);
  for (int i = 0; i < N; i++) v[i] = (float)i * 0.25f + 3;
  uint64_t ino;
  int fd = tr_blob_shared_fd(b, &ino);
  cr_assert_geq(fd, 0);
  tn_chunk c = {.id = 0x2001, .dtype = TR_F32, .nbytes = N * sizeof *v};
  c.checksum = tc_checksum(v, c.nbytes);
  tn_in rep;
  s_pull_shared(&c, b, fd, ino, &rep);
  cr_assert_eq(rep.type, TN_PULL_OK, "%s", tn_type_name(rep.type));
  tn_in_close(&rep);
  cr_assert_eq(s_get(c.id, back, c.nbytes), TR_OK);
  cr_assert_eq(memcmp(back, v, c.nbytes), 0, "the mapped chunk differs from its source");
  /* no copy was made: the worker reads these very pages (a maker never
  ** writes a blob it shared; this write only shows where the bytes are) */
  v[N / 2] = -8;
  cr_assert_eq(s_get(c.id, back, c.nbytes), TR_OK);
  cr_assert_eq(back[N / 2], -8.0f, "the worker holds a copy, not the shared pages");
  /* this process lets go: the worker keeps the pages */
  tr_blob_unref(&b);
  cr_assert_eq(s_get(c.id, back, c.nbytes), TR_OK);
  cr_assert_eq(back[N / 2], -8.0f);
  cr_assert_eq(back[N - 1], (float)(N - 1) * 0.25f + 3);
  cr_assert_eq(tr_blob_pool_bytes(), 0, "memory the worker maps went to this process's pool");

  /* A descriptor that no longer holds that memory: the bytes are copied
  ** instead, checked, and the worker says so once. */
  b = tr_blob_new(N * sizeof(float));
  v = tr_blob_data(b);
  for (int i = 0; i < N; i++) v[i] = (float)i - 5;
  fd = tr_blob_shared_fd(b, &ino);
  c.id = 0x2002;
  c.checksum = tc_checksum(v, c.nbytes);
  s_pull_shared(&c, b, fd, ino + 1, &rep);
  cr_assert_eq(rep.type, TN_PULL_OK, "%s", tn_type_name(rep.type));
  tn_in_close(&rep);
  v[7] = 1e6f; /* a copy does not see this */
  cr_assert_eq(s_get(c.id, back, c.nbytes), TR_OK);
  cr_assert_eq(back[7], 2.0f);
  cr_assert(s_logged("copying chunks where they could be mapped"));
  tr_blob_unref(&b);
  free(back);
}

TestSuite(task, .init = s_start, .fini = s_stop, .timeout = 60);

/* Send a PUT of chunk id, the 4 floats v, to be written to its file;
** returns its request id. */
static uint64_t s_send_put(uint64_t id, const float *v) {
  tn_wbuf b = {0};
  tr_err err;
  tn_chunk c = {.id = id, .dtype = TR_F32, .nbytes = 4 * sizeof *v};
  c.checksum = tc_checksum(v, c.nbytes);
  tn_put_u32(&b, 1);
  tn_put_chunk(&b, &c);
  tn_put_u8(&b, TC_KEEP_FILE);
  void *data[1] = {(void *)v};
  size_t len[1] = {c.nbytes};
  cr_assert_eq(tn_send(s_sock, NULL, 0, TN_PUT, ++s_req, S_DB, &b, 1, data, len, NULL, NULL, &err), TR_OK,
               "%s", err.msg);
  tn_wbuf_free(&b);
  return s_req;
}

/* PUT chunk id: the 4 floats v, written to its file. */
static void s_put(uint64_t id, const float *v) {
  tn_in rep;
  s_send_put(id, v);
  s_reply(&rep);
  cr_assert_eq(rep.type, TN_PUT_OK);
  tn_in_close(&rep);
}

/* T = A + 1 with D = T * B inside it: told not to store T, the worker
** stores and lists D alone; told to store T, both.  D's values either
** way. */
Test(task, a_consumer_inside_stores_what_it_is_told) {
  const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  float got[4];
  s_put(0x2001, a);
  s_put(0x2002, b);
  for (int store = 0; store < 2; store++) {
    uint64_t tid = 0x3001 + 2 * (uint64_t)store, did = tid + 1;
    tx_task t;
    tf_ew_task(&t, 0, 0x2001, tid);
    t.then = calloc(1, sizeof *t.then);
    tf_ew_task(t.then, 1, 0x2002, did);
    t.then_store = store;
    tn_wbuf body = {0};
    tn_in rep;
    tx_task_encode(&t, &body);
    tx_task_free(&t);
    s_call(TN_TASK, &body, &rep);
    cr_assert_eq(rep.type, TN_TASK_OK, "%s", tn_type_name(rep.type));
    size_t n;
    const void *p = tn_in_body(&rep, &n);
    tn_rbuf r;
    tn_rbuf_init(&r, p, n);
    cr_assert_eq(tn_get_u32(&r), (uint32_t)(1 + store), "chunks listed");
    tn_chunk c;
    if (store) {
      tn_get_chunk(&r, &c);
      cr_assert_eq(c.id, tid);
    }
    tn_get_chunk(&r, &c);
    cr_assert_eq(c.id, did);
    tn_in_close(&rep);
    cr_assert_eq(s_get(did, got, sizeof got), TR_OK);
    for (int i = 0; i < 4; i++) cr_assert_eq(got[i], (a[i] + 1) * b[i]);
    if (store) {
      cr_assert_eq(s_get(tid, got, sizeof got), TR_OK);
      for (int i = 0; i < 4; i++) cr_assert_eq(got[i], a[i] + 1);
    } else {
      cr_assert_neq(s_get(tid, got, sizeof got), TR_OK, "T was stored");
    }
  }
}

/* Send task t (freed) without waiting for its answer; returns its request
** id. */
static uint64_t s_send_task(tx_task *t) {
  tn_wbuf body = {0};
  tr_err err;
  tx_task_encode(t, &body);
  tx_task_free(t);
  cr_assert_eq(tn_send(s_sock, NULL, 0, TN_TASK, ++s_req, S_DB, &body, 0, NULL, NULL, NULL, NULL, &err), TR_OK,
               "%s", err.msg);
  tn_wbuf_free(&body);
  return s_req;
}

/* Send a TASK computing chunk out = chunk in + 1, with in listed as a copy
** that may still be arriving (tx_task.in_wait); returns its request id. */
static uint64_t s_send_waiting_task(uint64_t in, uint64_t out) {
  tx_task t;
  tf_ew_task(&t, 0, in, out);
  t.in_wait = calloc(1, sizeof *t.in_wait);
  t.in_wait[0] = 1;
  return s_send_task(&t);
}

/* The reply to request req within ms milliseconds, in *rep: 1, or 0 if
** none came (other replies are skipped). */
static int s_reply_within(uint64_t req, int ms, tn_in *rep) {
  tr_err err;
  double until = tr_now() + ms / 1000.0;
  for (;;) {
    int left = (int)((until - tr_now()) * 1000);
    zmq_pollitem_t it = {s_sock, 0, ZMQ_POLLIN, 0};
    if (left <= 0 || zmq_poll(&it, 1, left) <= 0) return 0;
    cr_assert_eq(tn_recv(s_sock, 0, 0, rep, &err), TR_OK, "%s", err.msg);
    if (rep->req == req) return 1;
    tn_in_close(rep);
  }
}

/* A task reading a copy still on its way waits for it: no answer while it
** is missing (a task not told to wait fails at once, "not in chunk
** store"), and once a PUT brings it the task runs on it. */
Test(task, a_task_waits_for_a_copy_on_its_way) {
  const float a[4] = {1, 2, 3, 4};
  float got[4];
  uint64_t task = s_send_waiting_task(0x4001, 0x4002);
  tn_in rep;
  if (s_reply_within(task, 300, &rep)) {
    char msg[300] = "";
    uint64_t chunk;
    if (rep.type == TN_ERROR) s_error(&rep, &chunk, msg, sizeof msg);
    cr_assert_fail("the task answered %s (%s) before its input arrived", tn_type_name(rep.type), msg);
  }
  /* the two replies, in either order */
  uint64_t put = s_send_put(0x4001, a);
  int put_ok = 0, task_ok = 0;
  tr_err err;
  double until = tr_now() + 10;
  while (!(put_ok && task_ok)) {
    zmq_pollitem_t it = {s_sock, 0, ZMQ_POLLIN, 0};
    cr_assert_gt(zmq_poll(&it, 1, (long)((until - tr_now()) * 1000)), 0, "no answer to the PUT or the task");
    cr_assert_eq(tn_recv(s_sock, 0, 0, &rep, &err), TR_OK, "%s", err.msg);
    if (rep.req == put) {
      cr_assert_eq(rep.type, TN_PUT_OK, "the PUT failed");
      put_ok = 1;
    }
    if (rep.req == task) {
      cr_assert_eq(rep.type, TN_TASK_OK, "the task failed");
      task_ok = 1;
    }
    tn_in_close(&rep);
  }
  cr_assert_eq(s_get(0x4002, got, sizeof got), TR_OK, "the task made nothing from the copy that arrived");
  for (int i = 0; i < 4; i++) cr_assert_eq(got[i], a[i] + 1);
}

/* Cancel the coordinator's jobs: task req answers TR_EINTR and has not
** stored its output, chunk out. */
static void s_cancel_stops(uint64_t req, uint64_t out) {
  tn_in rep;
  tr_err err;
  cr_assert_eq(tn_send(s_sock, NULL, 0, TN_CANCEL, 0, S_DB, NULL, 0, NULL, NULL, NULL, NULL, &err), TR_OK, "%s",
               err.msg);
  cr_assert(s_reply_within(req, 10000, &rep), "the cancelled task never answered");
  char msg[300];
  uint64_t chunk;
  cr_assert_eq(s_error(&rep, &chunk, msg, sizeof msg), TR_EINTR, "%s", msg);
  tn_in_close(&rep);
  float got[4];
  cr_assert_neq(s_get(out, got, sizeof got), TR_OK, "a cancelled task stored its output");
}

/* A task waiting for a copy that never comes stops when its coordinator
** cancels it (as one does when the move fails), with an error. */
Test(task, a_task_waiting_for_a_copy_stops_when_cancelled) {
  uint64_t task = s_send_waiting_task(0x4101, 0x4102);
  tn_in rep;
  cr_assert_not(s_reply_within(task, 100, &rep), "the task answered before its input arrived");
  s_cancel_stops(task, 0x4102);
}

/* Send a combine task summing partials p1 and p2 (chunk 0 of a [4] f32
** tensor) into out, both listed as on their way (tx_task.in_wait), as
** the shell sends it with the join tasks that make them; returns its
** request id. */
static uint64_t s_send_combine(uint64_t p1, uint64_t p2, uint64_t out) {
  tx_task t;
  tf_ew_task(&t, 0, 0, out);
  t.kind = TX_TASK_COMBINE;
  t.node.agg = TK_AGG_SUM;
  t.node.prog.n = 1; /* the partials themselves */
  free(t.in_op);
  free(t.in_lin);
  free(t.in_id);
  t.nin = 2;
  t.in_op = calloc(2, sizeof *t.in_op);
  t.in_lin = calloc(2, sizeof *t.in_lin);
  t.in_id = calloc(2, sizeof *t.in_id);
  t.in_wait = calloc(2, sizeof *t.in_wait);
  t.in_id[0] = p1;
  t.in_id[1] = p2;
  t.in_wait[0] = t.in_wait[1] = 1;
  return s_send_task(&t);
}

/* No answer to req within ms milliseconds; an early one fails the test,
** saying what it was. */
static void s_no_reply_within(uint64_t req, int ms, const char *what) {
  tn_in rep;
  if (!s_reply_within(req, ms, &rep)) return;
  char msg[300] = "";
  uint64_t chunk;
  if (rep.type == TN_ERROR) s_error(&rep, &chunk, msg, sizeof msg);
  cr_assert_fail("%s: answered %s (%s)", what, tn_type_name(rep.type), msg);
}

/* Requests r1 and r2 both answered within 10 s, as types t1 and t2, in
** either order: a combine runs as soon as its last partial is stored, so
** its answer may come before the PUT's that brought the partial (s_reply
** would drop it, waiting for the PUT's). */
static void s_both_answered(uint64_t r1, int t1, uint64_t r2, int t2, const char *w1,
                            const char *w2) {
  const uint64_t req[2] = {r1, r2};
  const int type[2] = {t1, t2};
  const char *what[2] = {w1, w2};
  int got[2] = {0, 0};
  double until = tr_now() + 10;
  tr_err err;
  while (!(got[0] && got[1]) && tr_now() < until) {
    zmq_pollitem_t it = {s_sock, 0, ZMQ_POLLIN, 0};
    tn_in rep;
    if (zmq_poll(&it, 1, 100) <= 0) continue;
    cr_assert_eq(tn_recv(s_sock, 0, 0, &rep, &err), TR_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++)
      if (rep.req == req[i]) {
        cr_assert_eq(rep.type, type[i], "%s: answered %s", what[i], tn_type_name(rep.type));
        got[i] = 1;
      }
    tn_in_close(&rep);
  }
  for (int i = 0; i < 2; i++) cr_assert(got[i], "%s: no answer", what[i]);
}

/* A combine whose partials are on their way is set aside, not waited
** for on the task thread: a task sent after it runs and answers first
** (waiting there could deadlock two shells' statements, worker/jobs.c).
** It runs once the last of its partials is stored, on both of them. */
Test(task, a_combine_waiting_for_partials_lets_later_tasks_run) {
  const float p1[4] = {1, 2, 3, 4}, p2[4] = {10, 20, 30, 40};
  float got[4];
  s_put(0x5010, p1);
  uint64_t comb = s_send_combine(0x5001, 0x5002, 0x5003);
  uint64_t later = s_send_waiting_task(0x5010, 0x5011);
  tn_in rep;
  cr_assert(s_reply_within(later, 10000, &rep), "the task behind the combine never answered");
  cr_assert_eq(rep.type, TN_TASK_OK, "the task behind the combine failed");
  tn_in_close(&rep);
  s_no_reply_within(comb, 200, "the combine, with none of its partials there");
  s_put(0x5001, p1);
  s_no_reply_within(comb, 200, "the combine, with one of its two partials there");
  uint64_t put = s_send_put(0x5002, p2);
  s_both_answered(put, TN_PUT_OK, comb, TN_TASK_OK, "the PUT of the last partial",
                  "the combine once its partials were there");
  cr_assert_eq(s_get(0x5003, got, sizeof got), TR_OK, "the combine stored nothing");
  for (int i = 0; i < 4; i++) cr_assert_eq(got[i], p1[i] + p2[i]);
}

/* A combine set aside for partials that never come (a join task failed)
** answers its coordinator's cancel, with an error, and stores nothing. */
Test(task, a_combine_set_aside_stops_when_cancelled) {
  uint64_t comb = s_send_combine(0x5101, 0x5102, 0x5103);
  s_no_reply_within(comb, 100, "the combine, with none of its partials there");
  s_cancel_stops(comb, 0x5103);
}

TestSuite(sync, .init = s_start, .fini = s_stop, .timeout = 60);

/* Chunk files under the worker's data directory. */
static int s_chunk_files(void) {
  char cmd[200], buf[64] = "";
  snprintf(cmd, sizeof cmd, "find '%s/w' -name '*.chk' | wc -l", s_dir);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  cr_assert_not_null(fgets(buf, sizeof buf, p));
  pclose(p);
  return atoi(buf);
}

/* PUT chunks first, first + 1, .. (n of them) to be written in the
** background; none is in its file yet.  Returns when that was seen. */
static double s_put_held(uint64_t first, int n) {
  enum { N = 1024 };
  static float v[2][N];
  tn_wbuf b = {0};
  tn_in rep;
  tr_err err;
  void *data[2];
  size_t len[2];
  cr_assert_leq(n, 2);
  tn_put_u32(&b, (uint32_t)n);
  for (int k = 0; k < n; k++) {
    for (int i = 0; i < N; i++) v[k][i] = (float)(i * (k + 1));
    tn_chunk c = {.id = first + (uint64_t)k, .dtype = TR_F32, .nbytes = sizeof v[k]};
    c.checksum = tc_checksum(v[k], c.nbytes);
    tn_put_chunk(&b, &c);
    data[k] = v[k];
    len[k] = sizeof v[k];
  }
  tn_put_u8(&b, TC_KEEP_BACKGROUND);
  cr_assert_eq(tn_send(s_sock, NULL, 0, TN_PUT, ++s_req, S_DB, &b, n, data, len, NULL, NULL, &err), TR_OK,
               "%s", err.msg);
  tn_wbuf_free(&b);
  s_reply(&rep);
  cr_assert_eq(rep.type, TN_PUT_OK, "PUT: %s", tn_type_name(rep.type));
  tn_in_close(&rep);
  double t0 = tr_now();
  cr_assert_eq(s_chunk_files(), 0, "written before the sync");
  return t0;
}

/* The files a SYNC sent at t0 wrote must be `want`, unless the test ran
** past the write-back delay (2 s), when they could be the writer's. */
static void s_synced_files(double t0, int want, const char *what) {
  int files = s_chunk_files();
  if (tr_now() - t0 < 1.5) cr_assert_eq(files, want, "%s wrote %d of %d chunks", what, files, want);
  else cr_log_warn("the test ran past the write-back delay: the files could be the writer's");
}

/* Send SYNC with body b (freed): the reply's type. */
static int s_sync(tn_wbuf *b) {
  tn_in rep;
  s_call(TN_SYNC, b, &rep);
  int type = rep.type;
  tn_in_close(&rep);
  return type;
}

/* SYNC with its `all` flag (what the coordinator sends before a statement
** runs again without a lost worker) writes every chunk the worker holds
** in memory only, at once: here two PUT to be written in the background,
** whose delay (2 s) has not passed when the reply comes. */
Test(sync, all_writes_every_chunk_held_in_memory_only) {
  tn_wbuf b = {0};
  double t0 = s_put_held(0x2001, 2);
  tn_put_u32(&b, 0);
  tn_put_u8(&b, 1);
  int type = s_sync(&b);
  cr_assert_eq(type, TN_SYNC_OK, "SYNC: %s", tn_type_name(type));
  s_synced_files(t0, 2, "SYNC all");
  /* a flag that is neither 0 nor 1 is refused */
  tn_put_u32(&b, 0);
  tn_put_u8(&b, 7);
  cr_assert_eq(s_sync(&b), TN_ERROR);
}

/* A SYNC naming a chunk held in memory only writes it at once, and one
** whose flag is malformed is refused though the chunk it names is held:
** the sync used to run after the refusal and answer SYNC_OK. */
static void s_sync_of_chunks(void) {
  tn_wbuf b = {0};
  double t0 = s_put_held(0x3001, 2);
  tn_put_u32(&b, 1);
  tn_put_u64(&b, 0x3001);
  tn_put_u8(&b, 7);
  int type = s_sync(&b);
  cr_assert_eq(type, TN_ERROR, "a malformed SYNC answered %s", tn_type_name(type));
  cr_assert_eq(s_chunk_files(), 0, "a malformed SYNC wrote a chunk");
  tn_put_u32(&b, 1);
  tn_put_u64(&b, 0x3001);
  type = s_sync(&b);
  cr_assert_eq(type, TN_SYNC_OK, "SYNC: %s", tn_type_name(type));
  s_synced_files(t0, 1, "SYNC of one chunk");
}

Test(sync, a_sync_of_chunks_writes_them_and_a_malformed_one_is_refused) { s_sync_of_chunks(); }

/* The same with the worker's test trace on, whose log line for a SYNC
** once stood in its chain of checks and skipped the sync itself. */
static void s_start_traced(void) {
  setenv("TRADB_TEST_TRACE", "1", 1);
  s_start();
}

TestSuite(sync_traced, .init = s_start_traced, .fini = s_stop, .timeout = 60);

Test(sync_traced, a_sync_of_chunks_writes_them_and_a_malformed_one_is_refused) { s_sync_of_chunks(); }
