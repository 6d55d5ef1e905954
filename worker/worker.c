/*
** worker/worker.c - `tradb --worker`: start, the main loop that routes
** requests and sends what the threads finished, and stop.
*/
#include "config.h"
#include "worker/worker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t s_stop = 0;
static int s_stop_wake = -1; /* the main loop's wake pipe, once made */

/* SIGTERM, SIGINT: the main loop wakes and cancels the running task (a
** handler cannot take the queue's lock).  The signal may go to any of the
** worker's threads, which does not end the main loop's poll: without the
** wake, a worker told to stop went on waiting for up to the poll's 250 ms,
** and so did its shell's close. */
static void s_on_signal(int sig) {
  (void)sig;
  s_stop = 1;
  int e = errno;
  if (s_stop_wake >= 0 && write(s_stop_wake, "", 1) < 0) { /* full pipe: awake already */
  }
  errno = e;
}

/* GET, second half (main loop): the chunks the store thread read, as the
** reply's frames (the store's bytes, not copies). */
static void s_reply_data(wi_worker *w, wi_job *j) {
  tr_blob **blobs = calloc(j->nout + 1, sizeof *blobs);
  tr_err err;
  if (!blobs) {
    tn_send_error(w->router, j->route, j->route_len, j->req, j->db, TR_ENOMEM, 0, "out of memory");
    return;
  }
  for (uint32_t i = 0; i < j->nout; i++) {
    blobs[i] = j->out[i].data;
    j->out[i].data = NULL; /* tn_send_blobs drops them, sent or not */
    w->bytes_sent += j->out[i].c.nbytes;
  }
  if (tn_send_blobs(w->router, j->route, j->route_len, TN_DATA, j->req, j->db, &j->reply,
                    (int)j->nout, blobs, &err))
    wi_log("cannot reply %s: %s", tn_type_name(TN_DATA), err.msg);
  free(blobs);
}

static void s_flush_done(wi_worker *w) {
  pthread_mutex_lock(&w->mu);
  wi_job *j = w->done;
  w->done = NULL;
  pthread_mutex_unlock(&w->mu);
  while (j) {
    wi_job *nx = j->next;
    if (j->pushing > 0) { /* answered once its replica pushes are confirmed */
      j->next = w->held;
      w->held = j;
      j = nx;
      continue;
    }
    if (j->push_failed) wi_fail_job(j, TR_EIO, j->push_why);
    if (j->type == TN_TASK && j->rtype == TN_TASK_OK) w->tasks++;
    w->bytes_recv += j->recv;
    if (j->rtype == TN_ERROR) {
      tn_send_error(w->router, j->route, j->route_len, j->req, j->db, j->code, j->bad, j->msg);
    } else if (j->type == TN_SEND) {
      wi_send_out(w, j);
    } else if (j->type == TN_GET) {
      s_reply_data(w, j);
    } else {
      wi_reply(w, j->route, j->route_len, j->rtype, j->req, j->db, &j->reply, 0, NULL, NULL, NULL);
    }
    wi_job_free(j);
    j = nx;
  }
}

/* Answer the held tasks whose replica pushes are all confirmed. */
static void s_release_held(wi_worker *w) {
  wi_job *keep = NULL, *ready = NULL;
  for (wi_job *j = w->held, *nx; j; j = nx) {
    nx = j->next;
    if (j->pushing > 0) {
      j->next = keep;
      keep = j;
    } else {
      j->next = ready;
      ready = j;
    }
  }
  w->held = keep;
  if (!ready) return;
  pthread_mutex_lock(&w->mu);
  wi_job *tail = ready;
  while (tail->next) tail = tail->next;
  tail->next = w->done;
  w->done = ready;
  pthread_mutex_unlock(&w->mu);
  s_flush_done(w);
}

static void s_on_request(wi_worker *w, tn_in *in) {
  if (w->trace) wi_log("got %s (request %llu)", tn_type_name(in->type), (unsigned long long)in->req);
  tn_wbuf b = {0};
  wi_heard(w, in->route, in->route_len);
  wi_db_heard(w, in->db);
  if (in->type != TN_HEARTBEAT) wi_busy(w);
  /* Remember who coordinates us, for heartbeats. */
  if (in->type == TN_HELLO || in->type == TN_HEARTBEAT || in->type == TN_TASK) {
    memcpy(w->coord, in->route, in->route_len);
    w->coord_len = in->route_len;
  }
  switch (in->type) {
  case TN_HELLO: {
    size_t n;
    const void *body = tn_in_body(in, &n);
    tn_rbuf r;
    char who[128];
    tn_rbuf_init(&r, body, n);
    tn_get_str(&r, who, sizeof who);
    wi_log("hello from %s", tn_rbuf_ok(&r) == TR_OK ? who : "?");
    tn_put_str(&b, w->cfg->listen);
    tn_put_u32(&b, (uint32_t)w->threads);
    tn_put_str(&b, w->kt->name);
    tn_put_u64(&b, w->incarnation);
    tn_put_u64(&b, (uint64_t)wi_memory(w)); /* the scheduler places within it */
    tn_put_str(&b, w->fs);
    tn_put_u64(&b, wi_disk_free(w));
    wi_reply(w, in->route, in->route_len, TN_HELLO_OK, in->req, in->db, &b, 0, NULL, NULL, NULL);
    break;
  }
  case TN_HEARTBEAT:
    /* A coordinator's ping (request id set) is echoed at once, so it can
    ** tell a live worker from heartbeats queued before one died. */
    tn_put_u64(&b, w->incarnation);
    if (in->req) wi_reply(w, in->route, in->route_len, TN_HEARTBEAT, in->req, in->db, &b, 0, NULL, NULL, NULL);
    break;
  case TN_PUT:
  case TN_PULL:
  case TN_GET:
  case TN_SEND:
  case TN_DROP:
  case TN_INVENTORY: wi_queue_store(w, in); break;
  case TN_TASK:
  case TN_SYNC: wi_queue(w, in); break;
  case TN_CANCEL:
    /* Its statement is gone: stop its running task, fail its queued ones.
    ** Another coordinator's work goes on. */
    wi_cancel_from(w, in->route, in->route_len, 0, "cancelled by its shell");
    break;
  case TN_STATS: {
    /* The requesting database's chunks (none if its store is not open:
    ** every coordinator sends INVENTORY, which opens it, first). */
    int64_t chunks = 0, bytes = 0;
    tr_err err;
    tc_store_usage(wi_store_for(w, in->db, S_OPEN_NONE, &err), &chunks, &bytes);
    tn_put_u64(&b, w->tasks);
    tn_put_u64(&b, (uint64_t)chunks);
    tn_put_u64(&b, (uint64_t)bytes);
    tn_put_u64(&b, w->bytes_sent);
    tn_put_u64(&b, w->bytes_recv);
    tn_put_str(&b, w->kt->name);
    tn_put_u64(&b, wi_disk_free(w));
    wi_reply(w, in->route, in->route_len, TN_STATS_OK, in->req, in->db, &b, 0, NULL, NULL, NULL);
    break;
  }
  default:
    wi_log("dropped unexpected %s message", tn_type_name(in->type));
    tn_send_error(w->router, in->route, in->route_len, in->req, in->db, TR_EINVAL, 0,
                  "unexpected message");
  }
  tn_wbuf_free(&b);
}

/* Name the file system dir is on in out (n bytes): the kernel's boot id,
** which no other machine or boot shares, and the device number, which
** within one kernel is the file system's.  "" if either is unknown.
** TRADB_TEST_FS names another (tests: workers on "different disks"). */
static void s_fs_name(const char *dir, char *out, size_t n) {
  const char *test = getenv("TRADB_TEST_FS");
  char boot[64] = "";
  struct stat sb;
  out[0] = '\0';
  if (test) {
    snprintf(out, n, "%s", test);
    return;
  }
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) boot[0] = '\0';
    fclose(f);
  }
  boot[strcspn(boot, "\n")] = '\0';
  if (boot[0] && stat(dir, &sb) == 0) snprintf(out, n, "%s:%llx", boot, (unsigned long long)sb.st_dev);
}

/* Start the worker: kernels, keys, the root store, signals, sockets and
** threads.  0, or the exit status to return (w is then torn down by the
** caller when *started says sockets exist). */
static int s_start(wi_worker *w, const tw_config *cfg) {
  tr_err err;
  tr_clearerr(&err);
  while (getrandom(&w->incarnation, sizeof w->incarnation, 0) != sizeof w->incarnation || !w->incarnation)
    w->incarnation = (uint64_t)getpid() << 32 ^ (uint64_t)(tr_now() * 1e9);
  wi_log_as(cfg->listen);
  w->kt = tk_backend_get(cfg->backend ? cfg->backend : "auto");
  w->threads = cfg->threads > 0 ? cfg->threads : tr_ncores();
  if (!w->kt) {
    wi_log("unknown kernel backend '%s'", cfg->backend);
    return 2;
  }
  if (tn_load_keys(cfg->keys, &w->keys, &err)) {
    wi_log("%s", err.msg);
    return 2;
  }
  if (!w->keys.on && !tn_endpoint_is_local(cfg->listen)) {
    wi_log("listening on %s needs --keys (CURVE): only loopback and ipc endpoints may be open",
          cfg->listen);
    return 2;
  }
  /* A predecessor on the same store may still be shutting down (its
  ** shell was killed): give it a few seconds to let go. */
  for (double end = tr_now() + 5.0;;) {
    if (tc_store_open(cfg->data, &w->root, &err) == TR_OK) break;
    if (tr_now() > end || !strstr(err.msg, "in use")) {
      wi_log("%s", err.msg);
      return 1;
    }
    usleep(50000);
  }
  s_fs_name(cfg->data, w->fs, sizeof w->fs);
  /* One memory budget for every database's store: --memory less what a
  ** task works in (its chunks, within a quarter of the smallest worker's
  ** memory and 256 MiB, and the operand cache: half of it for a small
  ** worker, all but 256 MiB for a large one), or a store's default. */
  int64_t budget = 0;
  if (cfg->memory > 0) {
    int64_t m = cfg->memory, task = m / 2 < ((int64_t)256 << 20) ? m / 2 : (int64_t)256 << 20;
    budget = m - task;
  } else {
    tc_store_budgets(w->root, &budget, NULL);
  }
  if (!(w->pool = tc_mem_pool_new(budget))) {
    wi_log("out of memory");
    tc_store_close(&w->root);
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = s_on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  wi_log_fatal_signals();
  if (pipe2(w->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    wi_log("cannot make a pipe: %s", strerror(errno));
    tc_store_close(&w->root);
    tc_mem_pool_free(&w->pool);
    return 1;
  }
  s_stop_wake = w->wake[1];
  w->ctx = zmq_ctx_new();
  pthread_mutex_init(&w->mu, NULL);
  pthread_mutex_init(&w->db_mu, NULL);
  pthread_mutex_init(&w->heard_mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  pthread_cond_init(&w->io_cv, NULL);
  pthread_cond_init(&w->arrived, NULL);
  w->trace = getenv("TRADB_TEST_TRACE") != NULL;
  const char *slow = getenv("TRADB_TEST_SLOW_STORE_MS");
  w->slow_store_ms = slow ? atoi(slow) : 0;
  /* TRADB_TEST_WRITEBACK_S: when chunks held in memory only are written
  ** (-1: only when synced or closed), so a test can act before they are */
  const char *wb = getenv("TRADB_TEST_WRITEBACK_S");
  w->set_writeback = wb != NULL;
  w->writeback_s = wb ? atof(wb) : 0;
  const char *drop_every = getenv("TRADB_TEST_DROP_LOG_S");
  w->drops.every = drop_every && atof(drop_every) > 0 ? atof(drop_every) : 60.0;
  w->pull_local = !strncmp(cfg->listen, "ipc://", 6);
  /* TRADB_TEST_NO_PULL: refuse to copy chunks out of peers (tests: a peer
  ** the OS does not let this worker read) */
  w->refuse_pulls = getenv("TRADB_TEST_NO_PULL") != NULL;
  /* TRADB_TEST_MAX_DBS, TRADB_TEST_DB_IDLE_S: fewer open stores, idle
  ** sooner (tests of closing idle stores) */
  const char *maxdbs = getenv("TRADB_TEST_MAX_DBS"), *idle = getenv("TRADB_TEST_DB_IDLE_S");
  w->max_dbs = maxdbs && atoi(maxdbs) > 0 && atoi(maxdbs) < S_MAX_DBS ? atoi(maxdbs) : S_MAX_DBS;
  w->db_idle_s = idle && atof(idle) > 0 ? atof(idle) : S_DB_IDLE_S;
  w->router = zmq_socket(w->ctx, ZMQ_ROUTER);
  w->notify_rx = zmq_socket(w->ctx, ZMQ_PAIR);
  int linger = 0, hwm = 0, tmo = 30000;
  zmq_setsockopt(w->router, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(w->router, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(w->router, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(w->router, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(w->notify_rx, ZMQ_LINGER, &linger, sizeof linger);
  if ((w->keys.on && (tn_zap_start(w->ctx, &w->keys, &err) || tn_secure_server(w->router, &w->keys, &err))) ||
      zmq_bind(w->notify_rx, "inproc://tradb-worker-done") != 0) {
    wi_log("%s", err.msg[0] ? err.msg : zmq_strerror(errno));
    return 1;
  }
  /* An ipc endpoint is a socket file that anyone who may write it can
  ** connect to: create it owner-only (no chmod after, which leaves a
  ** window).  No other thread of ours creates files yet. */
  mode_t umask_was = umask(0177);
  int bound = zmq_bind(w->router, cfg->listen);
  umask(umask_was);
  if (bound != 0) {
    wi_log("cannot listen on %s: %s", cfg->listen, zmq_strerror(errno));
    return 1;
  }
  if (pthread_create(&w->io_tid, NULL, wi_store_thread, w) != 0) {
    wi_log("cannot start the store thread");
    return 1;
  }
  w->io_started = 1;
  if (pthread_create(&w->tid, NULL, wi_task_thread, w) != 0) {
    wi_log("cannot start the task thread");
    return 1;
  }
  {
    /* Each database's store gets the budget (wi_store_for); the default is
    ** a store's own, which the root store shows. */
    int64_t legacy, bytes, scratch = wi_memory(w);
    tc_store_usage(w->root, &legacy, &bytes);
    /* A local worker holds its big chunks in shared memory, so that its
    ** peers map what it moves or replicates to them instead of copying it
    ** (util/blob.c); its pool keeps as much free as the heap would.
    ** TRADB_TEST_NO_SHARE: copied as before (tests, and measuring it). */
    int shared = w->pull_local && !w->refuse_pulls && !getenv("TRADB_TEST_NO_SHARE") &&
                 tr_blob_share((size_t)tr_heap_reserve(scratch)) == TR_OK;
    int mib = scratch >= (1 << 20);
    wi_log("listening (data %s, %d threads, kernels %s, OpenBLAS %s, memory %lld %s%s%s)",
           cfg->data, w->threads, w->kt->name, tk_blas_core(),
           (long long)(scratch >> (mib ? 20 : 10)), mib ? "MiB" : "KiB",
           shared ? ", chunks in shared memory" : "", w->keys.on ? ", CURVE" : "");
    if (legacy)
      wi_log("%lld chunk(s) in %s are kept for the database that lists them", (long long)legacy,
            cfg->data);
  }
  return 0;
}

/* Serve until SIGTERM or SIGINT: route requests, send what the threads
** finished, heartbeat the coordinator. */
static void s_serve(wi_worker *w) {
  tr_err err;
  double next_beat = tr_now(), turn = next_beat;
  while (!s_stop) {
    zmq_pollitem_t items[3 + S_MAX_PEERS];
    items[0] = (zmq_pollitem_t){w->router, 0, ZMQ_POLLIN, 0};
    items[1] = (zmq_pollitem_t){w->notify_rx, 0, ZMQ_POLLIN, 0};
    for (int i = 0; i < w->npeers; i++) items[2 + i] = (zmq_pollitem_t){w->peer[i], 0, ZMQ_POLLIN, 0};
    items[2 + w->npeers] = (zmq_pollitem_t){NULL, w->wake[0], ZMQ_POLLIN, 0};
    int rc = zmq_poll(items, 3 + w->npeers, TN_HEARTBEAT_MS / 2);
    /* The worker did not run (tn_paused): what its coordinators sent
    ** meanwhile may still be unread when this turn ends, and their
    ** silence, counted, would stop their tasks on waking (wi_cancel_lost,
    ** below). */
    double paused = tn_paused(&turn, tr_now());
    if (paused > 0) wi_paused(w, paused);
    if (rc > 0 && (items[2 + w->npeers].revents & ZMQ_POLLIN)) {
      wi_busy(w);
      wi_send_pushes(w);
      s_flush_done(w); /* stored PUTs */
    }
    if (rc < 0 && errno != EINTR) {
      wi_log("poll failed: %s", zmq_strerror(errno));
      break;
    }
    if (rc > 0 && (items[0].revents & ZMQ_POLLIN)) {
      for (int k = 0; k < 256; k++) { /* drain, bounded so replies keep flowing */
        tn_in in;
        int r = tn_recv(w->router, 1, ZMQ_DONTWAIT, &in, &err);
        if (r == TR_ENOTFOUND || r == TR_EINTR) break;
        if (r == TR_EINVAL) {
          wi_drop_note(&w->drops, &in, err.msg, tr_now());
          continue;
        }
        if (r) {
          wi_log("receive failed: %s", err.msg);
          break;
        }
        s_on_request(w, &in);
        tn_in_close(&in);
      }
    }
    if (rc > 0 && (items[1].revents & ZMQ_POLLIN)) {
      char c;
      while (zmq_recv(w->notify_rx, &c, 1, ZMQ_DONTWAIT) >= 0) {
      }
      wi_busy(w);
      wi_send_pushes(w); /* a finished task's last pushes go out first */
      s_flush_done(w);
    }
    for (int i = 0; rc > 0 && i < w->npeers; i++)
      if (items[2 + i].revents & ZMQ_POLLIN) {
        tn_in in;
        while (tn_recv(w->peer[i], 0, ZMQ_DONTWAIT, &in, &err) == TR_OK) {
          wi_on_peer_reply(w, i, &in);
          tn_in_close(&in);
        }
      }
    wi_settle(w);
    s_release_held(w);
    wi_cancel_lost(w);
    wi_trim_when_idle(w);
    wi_drop_tick(&w->drops, tr_now(), 0);
    if (tr_now() >= next_beat) {
      next_beat = tr_now() + TN_HEARTBEAT_MS / 1000.0;
      /* Best effort: a coordinator that went away is not an error (the
      ** ROUTER drops messages for routes it no longer knows). */
      if (w->coord_len) {
        tn_wbuf hb = {0};
        tn_put_u64(&hb, w->incarnation);
        wi_task_progress(w, w->coord, w->coord_len, &hb);
        tn_send(w->router, w->coord, w->coord_len, TN_HEARTBEAT, 0, 0, &hb, 0, NULL, NULL, NULL, NULL,
                &err);
        tn_wbuf_free(&hb);
      }
    }
  }
}

/* Stop the threads and free everything s_start made. */
static void s_teardown(wi_worker *w) {
  if (w->io_started) { /* after the task thread, or when it never started */
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->io_cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->io_tid, NULL);
  }
  s_flush_done(w);
  wi_pending_free_all(w);
  for (wi_job *j = w->todo, *nx; j; j = nx) {
    nx = j->next;
    wi_job_free(j);
  }
  for (wi_job *j = w->parked, *nx; j; j = nx) {
    nx = j->next;
    wi_job_free(j);
  }
  for (wi_job *j = w->io_todo, *nx; j; j = nx) {
    nx = j->next;
    wi_job_free(j);
  }
  for (int i = 0; i < w->npeers; i++) zmq_close(w->peer[i]);
  zmq_close(w->router);
  zmq_close(w->notify_rx);
  if (w->keys.on) tn_zap_stop();
  zmq_ctx_term(w->ctx);
  for (int i = 0; i < S_MAX_DBS; i++) wi_store_close(w->dbs[i].id, &w->dbs[i].store, "");
  tc_mem_pool_free(&w->pool);
  tc_store_close(&w->root);
  for (wi_push *p = w->pushq, *nx; p; p = nx) {
    nx = p->next;
    tr_blob_unref(&p->data);
    free(p);
  }
  for (wi_job *j = w->held, *nx; j; j = nx) {
    nx = j->next;
    wi_job_free(j);
  }
  s_stop_wake = -1;
  close(w->wake[0]);
  close(w->wake[1]);
  pthread_mutex_destroy(&w->mu);
  pthread_mutex_destroy(&w->db_mu);
  pthread_mutex_destroy(&w->heard_mu);
  pthread_cond_destroy(&w->cv);
  pthread_cond_destroy(&w->io_cv);
  pthread_cond_destroy(&w->arrived);
}

int tw_main(const tw_config *cfg) {
  wi_worker w;
  memset(&w, 0, sizeof w);
  w.cfg = cfg;
  int status = s_start(&w, cfg);
  if (status == 0) {
    wi_warm_heap(&w);
    s_serve(&w);
    wi_warm_heap_stop();
    wi_drop_tick(&w.drops, tr_now(), 1);
    wi_log("stopping");
    pthread_mutex_lock(&w.mu);
    w.quit = 1; /* the task thread takes no further job */
    if (w.running) tr_cancel_set(&w.running->cancel);
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(w.tid, NULL);
  }
  if (w.ctx) s_teardown(&w);
  if (status == 0) wi_warm_heap_report();
  return status;
}
