/*
** worker/io.c - the store thread: PUT, GET, SEND, DROP and INVENTORY, so
** a slow disk never stalls the main loop.
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
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* TRADB_TEST_SLOW_STORE_MS: every store access of the store thread takes
** that long (tests: a slow disk). */
static void s_slow_store(const wi_worker *w) {
  if (w->slow_store_ms > 0)
    nanosleep(&(struct timespec){w->slow_store_ms / 1000, (w->slow_store_ms % 1000) * 1000000L}, NULL);
}

/* Read chunk id into o (store thread). */
static int s_read_out(wi_worker *w, wi_job *j, uint64_t id, wi_out_chunk *o, tr_err *err) {
  tr_dtype dt;
  s_slow_store(w);
  o->c.id = id;
  if (tc_store_stat(j->store, id, &dt, &o->c.nbytes, &o->c.checksum))
    return tr_seterr(err, TR_ENOTFOUND, "chunk %016llx is not on worker %s", (unsigned long long)id,
                     w->cfg->listen);
  o->c.dtype = (uint8_t)dt;
  return wi_job_get(j, id, o->c.nbytes, &o->data, err);
}

/* How the chunks are kept: the optional last field of PUT and SEND, the
** field after the chunk meta of PULL. */
static int s_keep(tn_rbuf *r) {
  if (r->off >= r->n) return TC_KEEP_FILE;
  uint8_t k = tn_get_u8(r);
  if (k > TC_KEEP_BACKGROUND) r->bad = 1;
  return k;
}

/* GET {n x u64 id} -> DATA {n x chunk meta} + frames, and SEND {n x (u64
** id, str peer)}: the store thread reads the chunks, the main loop sends
** them (the main loop's replies, wi_send_out). */
static void s_run_read(wi_worker *w, wi_job *j) {
  int send = j->type == TN_SEND;
  tn_rbuf r;
  tr_err err;
  tr_clearerr(&err);
  wi_request_body(&j->in, &r, &err);
  uint32_t n = tn_get_count(&r, send ? 12 : 8);
  int rc = (j->out = calloc(n + 1, sizeof *j->out)) ? TR_OK : tr_seterr(&err, TR_ENOMEM, "out of memory");
  if (!rc && n && !wi_job_store(j, S_OPEN_EXISTS, &err)) rc = err.code;
  for (uint32_t i = 0; i < n && !rc; i++) {
    uint64_t id = tn_get_u64(&r);
    if (send) tn_get_str(&r, j->out[i].ep, sizeof j->out[i].ep);
    if (r.bad) break;
    j->nout = i + 1;
    rc = s_read_out(w, j, id, &j->out[i], &err);
  }
  if (send) j->keep = s_keep(&r);
  if (!rc && (r.bad || tn_rbuf_ok(&r) != TR_OK))
    rc = tr_seterr(&err, TR_EINVAL, send ? "malformed SEND" : "malformed GET");
  if (rc) {
    wi_fail_job(j, rc, err.msg);
    return;
  }
  j->rtype = send ? TN_SEND_OK : TN_DATA;
  if (!send) {
    tn_put_u32(&j->reply, n);
    for (uint32_t i = 0; i < n; i++) tn_put_chunk(&j->reply, &j->out[i].c);
  }
}

/* A chunk from a peer is in the store: wake a task waiting for it, and
** the task thread if a combine set aside may now have its partials. */
static void s_arrived(wi_worker *w) {
  pthread_mutex_lock(&w->mu);
  w->arrivals++;
  pthread_cond_broadcast(&w->arrived);
  if (w->parked) {
    w->recheck = 1;
    pthread_cond_signal(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
}

/* PUT {n x chunk meta} + n frames -> PUT_OK {u32 n}: stores the chunks,
** on the store thread. */
static void s_run_put(wi_worker *w, wi_job *j) {
  tn_in *in = &j->in;
  tn_rbuf r;
  tr_err err;
  tr_clearerr(&err);
  s_slow_store(w);
  wi_request_body(in, &r, &err);
  uint32_t n = tn_get_count(&r, 25);
  int rc = TR_OK;
  if (n != (uint32_t)in->ndata) rc = tr_seterr(&err, TR_EINVAL, "PUT lists %u chunks but carries %d", n, in->ndata);
  tn_chunk *c = rc ? NULL : calloc(n + 1, sizeof *c);
  if (!rc && !c) rc = tr_seterr(&err, TR_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < n && !rc; i++) tn_get_chunk(&r, &c[i]);
  int keep = rc ? TC_KEEP_FILE : s_keep(&r);
  if (!rc && tn_rbuf_ok(&r) != TR_OK) rc = tr_seterr(&err, TR_EINVAL, "malformed PUT");
  if (!rc && n && !wi_job_store(j, S_OPEN_CREATE, &err)) rc = err.code;
  for (uint32_t i = 0; i < n && !rc; i++) {
    /* the frame's bytes become the stored chunk: no copy */
    tr_blob *b = tn_in_take_data(in, (int)i);
    if (!b) rc = tr_seterr(&err, TR_ENOMEM, "out of memory");
    else if (tr_blob_size(b) != c[i].nbytes) rc = tr_seterr(&err, TR_EINVAL, "malformed PUT");
    else rc = tc_store_put_blob(j->store, c[i].id, (tr_dtype)c[i].dtype, b, (tc_keep)keep,
                                c[i].checksum, NULL, &err);
    if (!rc) j->recv += c[i].nbytes;
    tr_blob_unref(&b);
  }
  if (n) s_arrived(w); /* what was stored before a failure too */
  free(c);
  if (rc) {
    wi_log("PUT refused: %s", err.msg);
    wi_fail_job(j, rc, err.msg);
    return;
  }
  j->rtype = TN_PUT_OK;
  tn_put_u32(&j->reply, n);
}

/* Copy nbytes at addr in process pid into dst (process_vm_readv, which
** may copy less than asked: a page not mapped there ends it early). */
static int s_copy_from(uint32_t pid, uint64_t addr, void *dst, uint64_t nbytes, tr_err *err) {
  uint64_t done = 0;
  while (done < nbytes) {
    struct iovec to = {(char *)dst + done, (size_t)(nbytes - done)};
    struct iovec from = {(void *)(uintptr_t)(addr + done), (size_t)(nbytes - done)};
    ssize_t got = process_vm_readv((pid_t)pid, &to, 1, &from, 1, 0);
    if (got <= 0)
      return tr_seterr(err, TR_EIO, "cannot copy a chunk out of process %u: %s", pid,
                       got < 0 ? strerror(errno) : "nothing copied");
    done += (uint64_t)got;
  }
  return TR_OK;
}

/* PULL {chunk meta, u8 keep, u32 pid, u64 address [, u32 fd, u64 inode]}
** -> PULL_OK {u64 id}: store a chunk a peer on this machine holds in its
** memory (the peer waits for the answer before it lets the bytes go).
** With a descriptor, the bytes are in shared memory and are mapped, the
** very pages the peer hashed, so their checksum is taken as sent
** (tr_blob_map checks the descriptor still holds that memory); without
** one, or where mapping fails, they are copied out of the peer and the
** copy is checked against the checksum as a PUT's frame is.  Only a
** worker listening on ipc:// takes them (its peers are then processes on
** its machine, which its socket's permissions already trust). */
static void s_run_pull(wi_worker *w, wi_job *j) {
  tn_rbuf r;
  tr_err err;
  tn_chunk c = {0};
  tr_blob *b = NULL;
  tr_clearerr(&err);
  s_slow_store(w);
  wi_request_body(&j->in, &r, &err);
  tn_get_chunk(&r, &c);
  int keep = s_keep(&r);
  uint32_t pid = tn_get_u32(&r);
  uint64_t addr = tn_get_u64(&r);
  int shared = r.off < r.n;
  uint32_t fd = shared ? tn_get_u32(&r) : 0;
  uint64_t ino = shared ? tn_get_u64(&r) : 0;
  int rc = TR_OK;
  j->bad = c.id; /* an error names the chunk: the peer sends it instead */
  if (tn_rbuf_ok(&r) != TR_OK || pid == 0 || c.nbytes > TN_MAX_DATA || fd > INT32_MAX)
    rc = tr_seterr(&err, TR_EINVAL, "malformed PULL");
  else if (!w->pull_local || w->refuse_pulls)
    rc = tr_seterr(&err, TR_EINVAL, "this worker copies chunks out of no other process");
  else if (!wi_job_store(j, S_OPEN_CREATE, &err))
    rc = err.code;
  if (!rc && shared && !(b = tr_blob_map(pid, (int)fd, ino, c.nbytes, &err)) && !w->map_failed) {
    w->map_failed = 1; /* copied instead; said once */
    wi_log("copying chunks where they could be mapped: %s", err.msg);
  }
  if (rc)
    ;
  else if (b)
    rc = tc_store_put_summed(j->store, c.id, (tr_dtype)c.dtype, b, (tc_keep)keep, c.checksum, &err);
  else if (!(b = tr_blob_new(c.nbytes)))
    rc = tr_seterr(&err, TR_ENOMEM, "out of memory");
  else if (!(rc = s_copy_from(pid, addr, tr_blob_data(b), c.nbytes, &err)))
    rc = tc_store_put_blob(j->store, c.id, (tr_dtype)c.dtype, b, (tc_keep)keep, c.checksum, NULL,
                           &err);
  tr_blob_unref(&b);
  if (!rc) s_arrived(w);
  if (rc) {
    if (w->trace) wi_log("PULL refused: %s", err.msg);
    wi_fail_job(j, rc, err.msg);
    return;
  }
  j->recv += c.nbytes;
  j->rtype = TN_PULL_OK;
  tn_put_u64(&j->reply, c.id);
}

static int s_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* INVENTORY (second half of s_run_ids): the listed ids this worker does
** not hold, after moving any it holds in the old layout (DATA itself) into
** the database's store; then what the store holds that is not listed. */
static void s_inventory(wi_worker *w, wi_job *j, const uint64_t *ids, uint32_t n) {
  tn_wbuf *b = &j->reply;
  tc_stored *held = NULL;
  int64_t nheld = 0, moved = 0;
  uint32_t nmiss = 0, nextra = 0;
  tr_err err;
  for (uint32_t i = 0; i < n; i++)
    if ((!j->store || tc_store_stat(j->store, ids[i], NULL, NULL, NULL) != TR_OK) &&
        tc_store_stat(w->root, ids[i], NULL, NULL, NULL) == TR_OK &&
        wi_job_store(j, S_OPEN_CREATE, &err) &&
        tc_store_move(j->store, w->root, ids[i], &err) == TR_OK)
      moved++;
  for (uint32_t i = 0; i < n; i++)
    nmiss += !j->store || tc_store_stat(j->store, ids[i], NULL, NULL, NULL) != TR_OK;
  tn_put_u32(b, nmiss);
  for (uint32_t i = 0; i < n; i++)
    if (!j->store || tc_store_stat(j->store, ids[i], NULL, NULL, NULL) != TR_OK)
      tn_put_u64(b, ids[i]);
  if (j->store && tc_store_list(j->store, &held, &nheld, &err) != TR_OK) {
    wi_fail_job(j, err.code, err.msg);
    return;
  }
  uint64_t *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
  if (!sorted) {
    free(held);
    wi_fail_job(j, TR_ENOMEM, "out of memory");
    return;
  }
  memcpy(sorted, ids, (size_t)n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, s_cmp_u64);
  for (int64_t k = 0; k < nheld; k++)
    if (!bsearch(&held[k].id, sorted, n, sizeof *sorted, s_cmp_u64)) held[nextra++] = held[k];
  tn_put_u32(b, nextra);
  for (uint32_t k = 0; k < nextra; k++) {
    tn_chunk c = {held[k].id, (uint8_t)held[k].dtype, held[k].nbytes, held[k].sum};
    tn_put_chunk(b, &c);
  }
  free(sorted);
  free(held);
  if (moved) wi_log("moved %lld chunk(s) of database %016" PRIx64 " into its own store", (long long)moved, j->db);
  if (nmiss) wi_log("%u chunk(s) database %016" PRIx64 " lists here are missing", nmiss, j->db);
  j->rtype = TN_INVENTORY_OK;
}

/* DROP / INVENTORY {n x u64 id} (store thread: they unlink files, sync
** the directory, move files). */
static void s_run_ids(wi_worker *w, wi_job *j) {
  tn_in *in = &j->in;
  tn_rbuf r;
  tr_err err;
  s_slow_store(w);
  wi_request_body(in, &r, &err);
  uint32_t n = tn_get_count(&r, 8);
  uint64_t *ids = calloc(n + 1, sizeof *ids);
  int rc = ids ? TR_OK : tr_seterr(&err, TR_ENOMEM, "out of memory");
  for (uint32_t i = 0; !rc && i < n; i++) ids[i] = tn_get_u64(&r);
  if (!rc && tn_rbuf_ok(&r) != TR_OK) rc = tr_seterr(&err, TR_EINVAL, "malformed %s", tn_type_name(in->type));
  if (!rc && !j->db) rc = tr_seterr(&err, TR_EINVAL, "%s names no database", tn_type_name(in->type));
  /* A database with no store here has nothing to drop or report; one
  ** whose store cannot be opened is an error, never "holds nothing". */
  if (!rc && !wi_job_store(j, S_OPEN_EXISTS, &err) && err.code != TR_ENOTFOUND)
    rc = err.code;
  if (!rc && in->type == TN_DROP && j->store) rc = tc_store_drop(j->store, ids, n, &err);
  if (rc) {
    free(ids);
    wi_fail_job(j, rc, err.msg);
    return;
  }
  if (in->type == TN_DROP) {
    tn_put_u32(&j->reply, n);
    j->rtype = TN_DROP_OK;
  } else {
    s_inventory(w, j, ids, n);
  }
  free(ids);
}

void *wi_store_thread(void *arg) {
  wi_worker *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->io_todo && !w->quit) pthread_cond_wait(&w->io_cv, &w->mu);
    if (w->quit) break;
    wi_job *j = w->io_todo;
    w->io_todo = j->next;
    if (!w->io_todo) w->io_tail = NULL;
    pthread_mutex_unlock(&w->mu);
    if (j->type == TN_PUT) s_run_put(w, j);
    else if (j->type == TN_PULL) s_run_pull(w, j);
    else if (j->type == TN_GET || j->type == TN_SEND) s_run_read(w, j);
    else s_run_ids(w, j);
    pthread_mutex_lock(&w->mu);
    j->next = w->done;
    w->done = j;
    if (write(w->wake[1], "", 1) < 0) { /* full pipe: already awake */
    }
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Hand a store request (PUT, GET, SEND, DROP, INVENTORY) to the store thread,
** its frames moved, not copied. */
void wi_queue_store(wi_worker *w, tn_in *in) {
  wi_job *j = wi_job_for(w, in);
  if (!j) return;
  tn_in_move(&j->in, in);
  wi_enqueue(w, &w->io_todo, &w->io_tail, &w->io_cv, j);
}
