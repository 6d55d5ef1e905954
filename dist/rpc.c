/*
** dist/rpc.c - requests to the workers: a phase sends its requests and
** waits for every reply while heartbeating, a silent or restarted worker
** fails it, the user can interrupt it; and the requests every other file
** uses (SEND batches, SYNC, DROP).
*/
#include "config.h"
#include "dist/dist_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_CALL_TIMEOUT_S 600.0   /* longest wait for one phase */
/* The slowest a reply's bytes arrive: the shell takes a 1 GiB chunk into
** fresh memory at 0.5-3 ms a MiB on the development machine, and a 1 GiB
** reply held its site silent past the liveness window. */
#define S_SLOW_BYTES_PER_S 100e6

/* A phase's requests take the ids base, base+1, ...: a reply maps to its
** slot by subtraction.  That holds only while one phase is open at a time
** (a second would reuse the first's ids), which the asserts check. */
void di_phase_init(di_phase *ph, td_cluster *c) {
  tr_assert(!c->phase_open);
  memset(ph, 0, sizeof *ph);
  ph->c = c;
  ph->base = c->next_req + 1;
  c->phase_open = 1;
}

void di_phase_free(di_phase *ph) {
  for (int i = 0; i < ph->n; i++) {
    if (ph->out[i].done == 1) tn_in_close(&ph->out[i].reply);
    ph->c->prog_done += ph->out[i].units; /* over, one way or the other */
    ph->c->prog_total += ph->out[i].units;
  }
  free(ph->out);
  tr_assert(ph->c->phase_open);
  ph->c->next_req = ph->base + (uint64_t)ph->n;
  ph->c->phase_open = 0;
  memset(ph, 0, sizeof *ph);
}

/* Send a request to site s as part of the phase. */
int di_request(di_phase *ph, int s, int type, const tn_wbuf *body, int ndata,
                     void *const *data, const size_t *len, tn_free_fn *fr, tr_err *err) {
  td_cluster *c = ph->c;
  if (ph->n == ph->cap) {
    int cap = ph->cap ? ph->cap * 2 : 16;
    di_out *o = realloc(ph->out, sizeof *o * (size_t)cap);
    if (!o) {
      for (int i = 0; fr && i < ndata; i++) fr(data[i], NULL);
      return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
    ph->out = o;
    ph->cap = cap;
  }
  di_out *o = &ph->out[ph->n];
  memset(o, 0, sizeof *o);
  o->site = s;
  o->type = type;
  o->units = 1;
  int rc = tn_send(c->sites[s].sock, NULL, 0, type, ph->base + (uint64_t)ph->n, c->db_id, body,
                   ndata, data, len, fr, NULL, err);
  if (rc) return tr_prefix(err, rc, "cannot send to worker %s", c->sites[s].ep);
  ph->n++;
  return TR_OK;
}

/* Heartbeat the live sites.  Not the ones down: a DEALER queues what it
** cannot deliver, and a worker that comes back would get all of it. */
static void s_heartbeat_all(td_cluster *c) {
  tr_err err;
  for (int s = 0; s < c->nsites; s++)
    if (c->sites[s].up)
      tn_send(c->sites[s].sock, NULL, 0, TN_HEARTBEAT, 0, c->db_id, NULL, 0, NULL, NULL, NULL, NULL,
              &err);
}

/* Note the worker process a HEARTBEAT or HELLO_OK came from: another one
** than before means the worker restarted, and requests the old one held
** will never be answered. */
static void s_incarnation(td_site *st, tn_in *in) {
  size_t n;
  const void *b = tn_in_body(in, &n);
  tn_rbuf r;
  uint64_t inc;
  if (in->type != TN_HEARTBEAT && in->type != TN_HELLO_OK) return;
  tn_rbuf_init(&r, b, n);
  if (in->type == TN_HELLO_OK) {
    char skip[TC_ENDPOINT_MAX];
    tn_get_str(&r, skip, sizeof skip);
    st->threads = (int)tn_get_u32(&r);
    tn_get_str(&r, skip, sizeof skip);
  }
  inc = tn_get_u64(&r);
  if (tn_rbuf_ok(&r) != TR_OK || !inc) return;
  if (st->incarnation && inc != st->incarnation) st->restarted = 1;
  st->incarnation = inc;
  /* A heartbeat may go on with the task the worker runs for us: its
  ** request id and the output chunks made so far. */
  if (in->type == TN_HEARTBEAT && r.off < r.n) {
    uint64_t req = tn_get_u64(&r);
    int64_t made = (int64_t)tn_get_u64(&r);
    if (tn_rbuf_ok(&r) == TR_OK) {
      st->task_req = req;
      st->task_made = made;
    }
  }
}

void td_set_progress(td_cluster *c, td_progress_fn *fn, void *ctx) {
  c->progress = fn;
  c->progress_ctx = ctx;
}

void td_progress_start(td_cluster *c) {
  c->prog_done = c->prog_total = 0;
  for (int s = 0; s < c->nsites; s++) c->sites[s].task_req = 0;
}

void td_worker_cpu(const td_cluster *c, double *user, double *sys) {
  *user = c->cpu_user;
  *sys = c->cpu_sys;
}

/* Tell the progress callback how far the statement is: the finished
** phases, and of this one the replies in and what running tasks made. */
static void s_progress(di_phase *ph) {
  td_cluster *c = ph->c;
  int64_t done = c->prog_done, total = c->prog_total;
  if (!c->progress) return;
  for (int i = 0; i < ph->n; i++) {
    const di_out *o = &ph->out[i];
    const td_site *st = &c->sites[o->site];
    total += o->units;
    if (o->done) done += o->units;
    else if (st->task_req == ph->base + (uint64_t)i)
      done += st->task_made < o->units ? st->task_made : o->units - 1;
  }
  c->progress(c->progress_ctx, done, total);
}

/* Read what the sites sent; replies of ph (may be NULL) are stored. */
void di_drain(td_cluster *c, di_phase *ph, int timeout_ms) {
  zmq_pollitem_t items[256];
  int n = c->nsites < 256 ? c->nsites : 256;
  for (int s = 0; s < n; s++) items[s] = (zmq_pollitem_t){c->sites[s].sock, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(items, n, timeout_ms) <= 0) return;
  for (int s = 0; s < n; s++) {
    if (!(items[s].revents & ZMQ_POLLIN)) continue;
    for (;;) {
      tn_in in;
      tr_err err;
      int rc = tn_recv(c->sites[s].sock, 0, ZMQ_DONTWAIT, &in, &err);
      if (rc == TR_ENOTFOUND || rc == TR_EINTR || rc == TR_EIO) break;
      if (rc) continue; /* malformed: dropped */
      c->sites[s].last_seen = tr_now();
      s_incarnation(&c->sites[s], &in);
      if (ph && in.req >= ph->base && in.req < ph->base + (uint64_t)ph->n) {
        di_out *o = &ph->out[in.req - ph->base];
        tr_assert(o->site >= 0 && o->site < c->nsites);
        /* a heartbeat answers only a ping (the worker's own carry id 0) */
        if (!o->done && o->site == s && (in.type != TN_HEARTBEAT || o->type == TN_HEARTBEAT)) {
          o->done = 1;
          o->reply = in;
          continue;
        }
      }
      tn_in_close(&in);
    }
  }
}

int di_wait(di_phase *ph, tr_err *err) { return di_wait_ex(ph, 0, err); }

/* Tell the workers still busy with requests of ph to stop: the phase
** failed, so their work for this statement is of no use. */
static void s_cancel_busy(di_phase *ph) {
  td_cluster *c = ph->c;
  tr_err ignore;
  for (int s = 0; s < c->nsites; s++) {
    int busy = 0;
    for (int i = 0; i < ph->n && !busy; i++) busy = !ph->out[i].done && ph->out[i].site == s;
    if (busy && c->sites[s].up)
      tn_send(c->sites[s].sock, NULL, 0, TN_CANCEL, 0, c->db_id, NULL, 0, NULL, NULL, NULL, NULL, &ignore);
  }
}

int di_local_exited(td_cluster *c, int s, tr_err *err) {
  td_site *st = &c->sites[s];
  int wst;
  if (st->pid <= 0 || waitpid(st->pid, &wst, WNOHANG) != st->pid) return TR_OK;
  st->pid = 0;
  /* Its own fault (what a bad kernel call raises, or an exit it chose):
  ** running its work elsewhere could bring another worker down alike.
  ** Killed or stopped from outside (SIGKILL, SIGTERM, status 0), it is not. */
  int sig = WIFSIGNALED(wst) ? WTERMSIG(wst) : 0;
  int fault = sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT ||
              sig == SIGSYS || sig == SIGTRAP || (WIFEXITED(wst) && WEXITSTATUS(wst) != 0);
  di_site_lost(c, s, fault);
  if (WIFSIGNALED(wst))
    snprintf(st->died, sizeof st->died, "died of signal %d (%s)", WTERMSIG(wst), strsignal(WTERMSIG(wst)));
  else
    snprintf(st->died, sizeof st->died, "exited with status %d", WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
  return di_local_died(c, s, err);
}

int di_local_died(const td_cluster *c, int s, tr_err *err) {
  const td_site *st = &c->sites[s];
  return tr_seterr(err, TR_EIO, "local worker %s %s (see %s/w%d.log)", st->ep, st->died, c->workdir,
                   st->local ? st->local - 1 : s);
}

/* Silence counts from when the wait began listening: what a site sent
** while the shell was busy elsewhere (writing out the chunks a SAVE read
** before, or in the wait's on_reply) waits in its socket, not yet seen.
** And nothing else comes from a site while a large reply is on its way. */
static double s_silence(double now, double last_seen, double start) {
  return now - (last_seen > start ? last_seen : start);
}

int di_silent(const td_cluster *c, double now, double last_seen, double start, size_t expect) {
  double window = c->live_s + (double)expect / S_SLOW_BYTES_PER_S;
  return s_silence(now, last_seen, start) > window;
}

static int s_wait_loop(di_phase *ph, int tolerant, tr_err *err) {
  td_cluster *c = ph->c;
  /* listen: when the wait last began reading the sites (its start, or the
  ** end of an on_reply, which reads none of what they sent meanwhile) */
  double start = tr_now(), listen = start, next_beat = 0, turn = start;
  for (;;) {
    /* This shell did not run (tn_paused): what the sites sent meanwhile
    ** is not all read yet, so silence counts from now, and the replies
    ** read so far are judged knowing it (di_reply_error). */
    double woke = tr_now(), paused = tn_paused(&turn, woke);
    if (paused > 0) {
      listen = woke;
      if (paused > ph->paused_s) ph->paused_s = paused;
    }
    int pending = 0;
    for (int i = 0; i < ph->n; i++) {
      di_out *o = &ph->out[i];
      if (!o->done) {
        pending++;
        continue;
      }
      if (o->done == 1 && !o->taken && ph->on_reply) {
        o->taken = 1;
        int rc = ph->on_reply(ph, i, ph->on_reply_ctx, err);
        listen = tr_now();
        if (rc) return rc;
        continue;
      }
      if (o->reply.type == TN_ERROR && !tolerant) {
        uint64_t chunk;
        int code = di_reply_error(ph, i, &chunk, err);
        if (code == TR_ECORRUPT && chunk) {
          c->bad_site = o->site;
          c->bad_chunk = chunk;
        }
        return code;
      }
    }
    if (!pending) return TR_OK;
    s_progress(ph);
    double now = tr_now();
    if (tr_cancelled(c->interrupt)) return tr_seterr(err, TR_EINTR, "interrupted");
    if (!ph->patient && now - start > S_CALL_TIMEOUT_S) {
      int i = 0;
      while (ph->out[i].done) i++; /* pending > 0: one is not done */
      return tr_seterr(err, TR_EIO, "workers did not answer within %.0f s (%d requests, first %s to %s)",
                       S_CALL_TIMEOUT_S, pending, tn_type_name(ph->out[i].type), c->sites[ph->out[i].site].ep);
    }
    if (now >= next_beat) {
      s_heartbeat_all(c);
      next_beat = now + TN_HEARTBEAT_MS / 1000.0;
    }
    /* A local worker that died (a fault in a kernel, killed) is known at
    ** once, with how, where a remote one is known by its silence. */
    for (int s = 0; s < c->nsites; s++) {
      if (c->sites[s].pid <= 0) continue; /* remote */
      int waited = ph->watch_all && !tolerant && c->sites[s].up;
      for (int i = 0; i < ph->n && !waited; i++) waited = !ph->out[i].done && ph->out[i].site == s;
      tr_err died;
      if (!waited || !di_local_exited(c, s, &died)) continue;
      if (!tolerant) {
        *err = died;
        return TR_EIO;
      }
      for (int i = 0; i < ph->n; i++)
        if (!ph->out[i].done && ph->out[i].site == s) ph->out[i].done = 2; /* no reply */
    }
    if (ph->watch_all && !tolerant)
      for (int s = 0; s < c->nsites; s++) {
        td_site *st = &c->sites[s];
        if (st->up && di_silent(c, now, st->last_seen, listen, 0)) {
          di_site_lost(c, s, 0);
          return tr_seterr(err, TR_EIO, "worker %s is down (silent for %.1f s)", st->ep,
                           s_silence(now, st->last_seen, listen));
        }
      }
    for (int i = 0; i < ph->n; i++) {
      td_site *st = &c->sites[ph->out[i].site];
      int silent = di_silent(c, now, st->last_seen, listen, ph->out[i].expect);
      if (!ph->out[i].done && (silent || st->restarted)) {
        di_site_lost(c, ph->out[i].site, 0);
        if (tolerant) {
          ph->out[i].done = 2; /* no reply */
          continue;
        }
        if (st->restarted)
          return tr_seterr(err, TR_EIO, "worker %s restarted while it worked for this statement", st->ep);
        return tr_seterr(err, TR_EIO, "worker %s is down (silent for %.1f s)", st->ep,
                         s_silence(now, st->last_seen, listen));
      }
    }
    di_drain(c, ph, TN_HEARTBEAT_MS / 5);
  }
}


int di_wait_ex(di_phase *ph, int tolerant, tr_err *err) {
  int rc = s_wait_loop(ph, tolerant, err);
  if (rc) s_cancel_busy(ph);
  return rc;
}
int di_reply_error(di_phase *ph, int i, uint64_t *chunk, tr_err *err) {
  char msg[600];
  int code;
  tn_get_error(&ph->out[i].reply, &code, chunk, msg, sizeof msg);
  const char *ep = ph->c->sites[ph->out[i].site].ep;
  /* A task a worker stopped on its own (its shell silent too long) is not
  ** a Ctrl-C, which alone stops a script.  Where this shell had stopped
  ** running, that silence was its own: the work is lost as with a worker
  ** lost (td_losses), and the statement may run again. */
  if (code == TR_EINTR && !tr_cancelled(ph->c->interrupt)) {
    code = TR_EIO;
    if (ph->paused_s > 0) {
      ph->c->losses++;
      return tr_seterr(err, code, "worker %s: %s (this shell did not run for %.1f s)", ep, msg, ph->paused_s);
    }
  }
  return tr_seterr(err, code, "worker %s: %s", ep, msg);
}

/* Reply i's body as a read cursor. */
void di_reply_body(di_phase *ph, int i, tn_rbuf *r) {
  size_t n;
  const void *b = tn_in_body(&ph->out[i].reply, &n);
  tn_rbuf_init(r, b, n);
}

void di_drop_ids(td_cluster *c, int only, const uint64_t *ids, int64_t n) {
  if (!n) return;
  di_drop_each(c, only, ids, n, NULL, NULL, 0, 1);
}

/* Chunk ids for DROP requests: ids[i] goes to site index `to` (-1: to
** every site) where site is NULL, site[i] is -1 or site[i] is that
** site's catalog id. */
typedef struct s_drops {
  const uint64_t *ids;
  int64_t n;
  const int64_t *site;
  int to;
} s_drops;

/* The ids of lists l[0..nl) that go to site s, put into b (NULL: only
** counted); returns how many. */
static uint32_t s_drops_for(const s_drops *l, int nl, const td_cluster *c, int s, tn_wbuf *b) {
  uint32_t k = 0;
  for (int j = 0; j < nl; j++) {
    if (l[j].to >= 0 && l[j].to != s) continue;
    for (int64_t i = 0; i < l[j].n; i++)
      if (!l[j].site || l[j].site[i] < 0 || l[j].site[i] == c->sites[s].id) {
        k++;
        if (b) tn_put_u64(b, l[j].ids[i]);
      }
  }
  return k;
}

/* One DROP request in phase ph to each live site, for the ids of lists
** l[0..nl) that go to it: the one place the message is built. */
static void s_drop_requests(di_phase *ph, const s_drops *l, int nl) {
  td_cluster *c = ph->c;
  tr_err err;
  for (int s = 0; s < c->nsites; s++) {
    uint32_t k = c->sites[s].up ? s_drops_for(l, nl, c, s, NULL) : 0;
    if (!k) continue;
    tn_wbuf b = {0};
    tn_put_u32(&b, k);
    s_drops_for(l, nl, c, s, &b);
    di_request(ph, s, TN_DROP, &b, 0, NULL, NULL, NULL, &err);
    tn_wbuf_free(&b);
  }
}

void di_pending_requests(di_phase *ph) {
  td_cluster *c = ph->c;
  s_drop_requests(ph, &(s_drops){c->pend, c->npend, c->pend_site, -1}, 1);
  c->npend = 0;
}

void di_drop_pending(td_cluster *c) {
  if (!c->npend) return;
  di_phase ph;
  tr_err err;
  di_phase_init(&ph, c);
  di_pending_requests(&ph);
  di_wait(&ph, &err);
  di_phase_free(&ph);
}

void di_drop_later(td_cluster *c, const uint64_t *ids, const int *site, int64_t n) {
  if (c->npend + n > c->cappend) {
    int64_t cap = 2 * (c->npend + n);
    uint64_t *v = realloc(c->pend, (size_t)cap * sizeof *v);
    int64_t *vs = v ? realloc(c->pend_site, (size_t)cap * sizeof *vs) : NULL;
    if (v) c->pend = v;
    if (vs) c->pend_site = vs;
    if (!vs) { /* no room to keep them: drop those kept, then these, on every site */
      di_drop_pending(c);
      di_drop_each(c, -1, ids, n, NULL, NULL, 0, 0);
      return;
    }
    c->cappend = cap;
  }
  for (int64_t i = 0; i < n; i++) {
    c->pend[c->npend] = ids[i];
    c->pend_site[c->npend++] = site[i] < 0 ? -1 : c->sites[site[i]].id;
  }
}

void di_forget_later(td_cluster *c, uint64_t *ids, int64_t n, uint64_t old_bytes) {
  if (n > 0 && c->nforgot + n > c->capforgot) {
    int64_t cap = 2 * (c->nforgot + n);
    uint64_t *v = realloc(c->forgot, (size_t)cap * sizeof *v);
    if (!v) { /* no room to keep them: sync the catalog and drop them now */
      di_drop_each(c, -1, ids, n, NULL, NULL, 0, 1);
      free(ids);
      return;
    }
    c->forgot = v;
    c->capforgot = cap;
  }
  if (n > 0) memcpy(c->forgot + c->nforgot, ids, (size_t)n * sizeof *ids);
  c->nforgot += n;
  c->forgot_bytes += old_bytes;
  free(ids);
}

/* Whether to sync the catalog and drop what it forgot now. */
static int s_flush_due(td_cluster *c) {
  double since = tc_unsynced_since(c->db);
  if (since) return tr_now() - since >= c->forgot_s || c->forgot_bytes >= DI_FORGOT_BYTES;
  return c->nforgot > 0; /* an ordinary commit synced the catalog since */
}

void di_flush(td_cluster *c, int force) {
  /* a drop of nothing more: the sync, and the forgotten chunks if any */
  if ((c->nforgot || tc_unsynced_since(c->db)) && (force || s_flush_due(c)))
    di_drop_each(c, -1, NULL, 0, NULL, NULL, 0, 1);
}

void di_drop_each(td_cluster *c, int only, const uint64_t *ids, int64_t n, uint64_t *const *own,
                  const int64_t *nown, int nsites, int catalog) {
  di_phase ph;
  tr_err err;
  uint64_t *forgot = NULL;
  int64_t nforgot = 0;
  if (catalog || s_flush_due(c)) {
    /* A chunk goes only once the catalog that forgot it is on disk. */
    if (tc_sync(c->db, &err) != TR_OK) {
      td_notice(c, "%s%s", err.msg,
                c->nforgot ? " (chunks it no longer lists are removed when it next opens)" : "");
      if (catalog) return;
    } else {
      forgot = c->forgot;
      nforgot = c->nforgot;
      c->forgot = NULL;
      c->nforgot = c->capforgot = 0;
      c->forgot_bytes = 0;
    }
  }
  s_drops l[TO_MAX_SITES + 2];
  int nl = 0;
  for (int s = 0; own && s < nsites && s < c->nsites; s++) l[nl++] = (s_drops){own[s], nown[s], NULL, s};
  l[nl++] = (s_drops){ids, n, NULL, only};
  l[nl++] = (s_drops){forgot, nforgot, NULL, -1};
  di_phase_init(&ph, c);
  s_drop_requests(&ph, l, nl);
  di_wait(&ph, &err);
  di_phase_free(&ph);
  free(forgot);
}

/* SYNC every chunk of locs on the sites holding it; with all, every live
** site also writes and syncs whatever it holds in memory only (SYNC's
** `all` byte); with local, only the local workers, waited for as long as
** they answer. */
static int s_sync_sites(td_cluster *c, const tc_chunkloc *locs, int64_t n, int all, int local,
                        int *refused, tr_err *err) {
  di_phase ph;
  di_phase_init(&ph, c);
  ph.patient = local;
  int rc = TR_OK;
  for (int s = 0; s < c->nsites && !rc; s++) {
    tn_wbuf b = {0};
    uint32_t k = 0;
    for (int64_t i = 0; i < n; i++)
      for (int j = 0; j < locs[i].nsites; j++) k += locs[i].site[j] == c->sites[s].id;
    if ((!k && !(all && c->sites[s].up)) || (local && c->sites[s].pid <= 0)) continue;
    tn_put_u32(&b, k);
    for (int64_t i = 0; i < n; i++)
      for (int j = 0; j < locs[i].nsites; j++)
        if (locs[i].site[j] == c->sites[s].id) tn_put_u64(&b, locs[i].chunk_id);
    if (all) tn_put_u8(&b, 1);
    rc = di_request(&ph, s, TN_SYNC, &b, 0, NULL, NULL, NULL, err);
    tn_wbuf_free(&b);
  }
  if (!rc) rc = di_wait(&ph, err);
  for (int i = 0; refused && rc && i < ph.n; i++)
    *refused |= ph.out[i].done && ph.out[i].reply.type == TN_ERROR;
  di_phase_free(&ph);
  return rc;
}

int di_sync(td_cluster *c, const tc_chunkloc *locs, int64_t n, tr_err *err) {
  return s_sync_sites(c, locs, n, 0, 0, NULL, err);
}

/* Every worker (local ones only, with local) writes all it holds in memory
** only: but first the versions no commit lists any longer go, the catalog
** synced and what it forgot dropped, and the drops that wait for a ping
** sent, so that none is written only to be dropped.  The close of a
** session of 40 statements replacing a tensor of 4 chunks had each local
** worker write and sync the 4 chunks of every version, 165 files a worker
** (0.3 s of a 0.45 s close after 600 such statements). */
static int s_sync_all(td_cluster *c, int local, int *refused, tr_err *err) {
  di_flush(c, 1);
  di_drop_pending(c);
  return s_sync_sites(c, NULL, 0, 1, local, refused, err);
}

int td_sync_local(td_cluster *c, int *refused, tr_err *err) {
  if (refused) *refused = 0;
  return s_sync_all(c, 1, refused, err);
}

int td_sync_held(td_cluster *c, tr_err *err) { return s_sync_all(c, 0, NULL, err); }

/* The SEND batches (entries {u64 id, str peer} per source site) as
** requests of phase ph (di_add_sends), or of a phase of their own that is
** waited for (di_flush_sends); both free the batches. */
int di_add_sends(di_phase *ph, tn_wbuf *sends, uint32_t *nsend, int keep, int rc, tr_err *err) {
  td_cluster *c = ph->c;
  for (int s = 0; !rc && s < c->nsites; s++)
    if (nsend[s]) {
      tn_wbuf b = {0};
      tn_put_u32(&b, nsend[s]);
      if (sends[s].n && !b.oom) {
        uint8_t *np = realloc(b.p, b.n + sends[s].n);
        if (np) {
          memcpy(np + b.n, sends[s].p, sends[s].n);
          b.p = np;
          b.n += sends[s].n;
          b.cap = b.n;
        } else {
          b.oom = 1;
        }
      }
      tn_put_u8(&b, (uint8_t)keep);
      rc = di_request(ph, s, TN_SEND, &b, 0, NULL, NULL, NULL, err);
      tn_wbuf_free(&b);
    }
  for (int s = 0; sends && s < c->nsites; s++) tn_wbuf_free(&sends[s]);
  free(sends);
  free(nsend);
  return rc;
}

int di_flush_sends(td_cluster *c, tn_wbuf *sends, uint32_t *nsend, int keep, int rc, tr_err *err) {
  di_phase ph;
  di_phase_init(&ph, c);
  ph.watch_all = 1;
  rc = di_add_sends(&ph, sends, nsend, keep, rc, err);
  if (!rc) rc = di_wait(&ph, err);
  di_phase_free(&ph);
  return rc;
}
