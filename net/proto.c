/*
** net/proto.c - the tradb wire protocol over ZeroMQ: little-endian body
** encoding (tn_wbuf / tn_rbuf), chunk metadata, and whole-message receive
** and send with header validation, zero-copy data frames and clean
** recovery from malformed or partially sent messages.  See net/net.h.
*/
#include "config.h"
#include "net/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Message type names --------------------------------------------------- */

static const char *const s_type_names[TN_TYPE_END] = {
    [TN_HELLO] = "HELLO",         [TN_HELLO_OK] = "HELLO_OK", [TN_HEARTBEAT] = "HEARTBEAT",
    [TN_PUT] = "PUT",             [TN_PUT_OK] = "PUT_OK",     [TN_GET] = "GET",
    [TN_DATA] = "DATA",           [TN_SEND] = "SEND",         [TN_SEND_OK] = "SEND_OK",
    [TN_TASK] = "TASK",           [TN_TASK_OK] = "TASK_OK",   [TN_SYNC] = "SYNC",
    [TN_SYNC_OK] = "SYNC_OK",     [TN_DROP] = "DROP",         [TN_DROP_OK] = "DROP_OK",
    [TN_INVENTORY] = "INVENTORY", [TN_INVENTORY_OK] = "INVENTORY_OK", [TN_STATS] = "STATS",
    [TN_STATS_OK] = "STATS_OK",   [TN_ERROR] = "ERROR",
    [TN_CANCEL] = "CANCEL",       [TN_PULL] = "PULL",         [TN_PULL_OK] = "PULL_OK",
};

const char *tn_type_name(int type) {
  if (type < TN_HELLO || type >= TN_TYPE_END || !s_type_names[type]) return "?";
  return s_type_names[type];
}

/* ---- Write buffer ------------------------------------------------------------ */

void tn_wbuf_free(tn_wbuf *b) {
  if (!b) return;
  free(b->p);
  b->p = NULL;
  b->n = b->cap = 0;
  b->oom = 0;
}

/* Make room for k more bytes; returns the write position or NULL (and sets
** oom, after which every writer is a no-op so the body stays a prefix of
** what was meant and tn_send refuses it). */
static uint8_t *s_reserve(tn_wbuf *b, size_t k) {
  if (b->oom) return NULL;
  if (k > b->cap - b->n) {
    size_t ncap = b->cap ? b->cap : 256;
    uint8_t *np;
    while (ncap - b->n < k) {
      if (ncap > SIZE_MAX / 2) {
        b->oom = 1;
        return NULL;
      }
      ncap *= 2;
    }
    np = realloc(b->p, ncap);
    if (!np) {
      b->oom = 1;
      return NULL;
    }
    b->p = np;
    b->cap = ncap;
  }
  b->n += k;
  return b->p + b->n - k;
}

static void s_le(uint8_t *d, uint64_t v, int k) {
  for (int i = 0; i < k; i++) d[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t s_from_le(const uint8_t *s, int k) {
  uint64_t v = 0;
  for (int i = 0; i < k; i++) v |= (uint64_t)s[i] << (8 * i);
  return v;
}

void tn_put_u8(tn_wbuf *b, uint8_t v) {
  uint8_t *d = s_reserve(b, 1);
  if (d) d[0] = v;
}

void tn_put_u32(tn_wbuf *b, uint32_t v) {
  uint8_t *d = s_reserve(b, 4);
  if (d) s_le(d, v, 4);
}

void tn_put_u64(tn_wbuf *b, uint64_t v) {
  uint8_t *d = s_reserve(b, 8);
  if (d) s_le(d, v, 8);
}

void tn_put_i64(tn_wbuf *b, int64_t v) { tn_put_u64(b, (uint64_t)v); }

void tn_put_f64(tn_wbuf *b, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  tn_put_u64(b, u);
}

void tn_put_bytes(tn_wbuf *b, const void *p, size_t n) {
  uint8_t *d;
  /* The length is a u32 on the wire; a longer field cannot be encoded, and
  ** is reported like an allocation failure (tn_send: TR_ENOMEM). */
  if (n > UINT32_MAX) {
    b->oom = 1;
    return;
  }
  d = s_reserve(b, 4 + n);
  if (!d) return;
  s_le(d, n, 4);
  if (n) memcpy(d + 4, p, n);
}

void tn_put_str(tn_wbuf *b, const char *s) {
  if (!s) s = "";
  tn_put_bytes(b, s, strlen(s));
}

/* ---- Read cursor ----------------------------------------------------------- */

void tn_rbuf_init(tn_rbuf *r, const void *p, size_t n) {
  r->p = p;
  r->n = p ? n : 0;
  r->off = 0;
  r->bad = 0;
}

/* Take k bytes; NULL (and bad) when fewer remain.  bad is sticky: once a
** read failed every later read fails too, so a decoder never acts on
** fields read from a misaligned position. */
static const uint8_t *s_take(tn_rbuf *r, size_t k) {
  const uint8_t *s;
  if (r->bad || k > r->n - r->off) {
    r->bad = 1;
    return NULL;
  }
  s = r->p + r->off;
  r->off += k;
  return s;
}

uint8_t tn_get_u8(tn_rbuf *r) {
  const uint8_t *s = s_take(r, 1);
  return s ? s[0] : 0;
}

uint32_t tn_get_u32(tn_rbuf *r) {
  const uint8_t *s = s_take(r, 4);
  return s ? (uint32_t)s_from_le(s, 4) : 0;
}

uint64_t tn_get_u64(tn_rbuf *r) {
  const uint8_t *s = s_take(r, 8);
  return s ? s_from_le(s, 8) : 0;
}

int64_t tn_get_i64(tn_rbuf *r) { return (int64_t)tn_get_u64(r); }

double tn_get_f64(tn_rbuf *r) {
  uint64_t u = tn_get_u64(r);
  double v;
  memcpy(&v, &u, sizeof v);
  return v;
}

const void *tn_get_bytes(tn_rbuf *r, size_t *n) {
  uint32_t len = tn_get_u32(r);
  const uint8_t *s = r->bad ? NULL : s_take(r, len);
  *n = s ? len : 0;
  return s;
}

void tn_get_str(tn_rbuf *r, char *out, size_t cap) {
  size_t n;
  const uint8_t *s = tn_get_bytes(r, &n);
  if (cap > 0) out[0] = '\0';
  if (!s) return;
  if (n >= cap || memchr(s, '\0', n)) {
    r->bad = 1;
    return;
  }
  memcpy(out, s, n);
  out[n] = '\0';
}

uint32_t tn_get_count(tn_rbuf *r, size_t item_min) {
  uint32_t count = tn_get_u32(r);
  /* Every field takes at least one byte, so an item_min of 0 still bounds
  ** the count by the bytes left: a 4-byte body never claims 4e9 items. */
  if (item_min == 0) item_min = 1;
  if (r->bad || count > (r->n - r->off) / item_min) {
    r->bad = 1;
    return 0;
  }
  return count;
}

int tn_rbuf_ok(const tn_rbuf *r) {
  return (!r->bad && r->off == r->n) ? TR_OK : TR_EINVAL;
}

/* ---- Chunk metadata -------------------------------------------------------- */

void tn_put_chunk(tn_wbuf *b, const tn_chunk *c) {
  tn_put_u64(b, c->id);
  tn_put_u8(b, c->dtype);
  tn_put_u64(b, c->nbytes);
  tn_put_u64(b, c->checksum);
}

void tn_get_chunk(tn_rbuf *r, tn_chunk *c) {
  c->id = tn_get_u64(r);
  c->dtype = tn_get_u8(r);
  c->nbytes = tn_get_u64(r);
  c->checksum = tn_get_u64(r);
  if (!r->bad && ((c->dtype != TR_F32 && c->dtype != TR_F64) || c->nbytes > TN_MAX_DATA))
    r->bad = 1;
  if (r->bad) memset(c, 0, sizeof *c);
}

/* ---- Receiving --------------------------------------------------------------- */

/* Receive the next part of a message already under way.  ZeroMQ delivers
** multipart messages atomically, so the part is there and only a signal
** can interrupt the call: retry then, because giving up mid-message would
** leave the socket off a message boundary.  Returns 0 or an errno value. */
static int s_recv_part(void *sock, zmq_msg_t *m) {
  for (;;) {
    if (zmq_msg_recv(m, sock, 0) >= 0) return 0;
    if (zmq_errno() != EINTR) return zmq_errno();
  }
}

static int s_more(void *sock) {
  int more = 0;
  size_t sz = sizeof more;
  if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) != 0) return 0;
  return more;
}

/* Read and drop every remaining part of the current message. */
static void s_drain(void *sock) {
  while (s_more(sock)) {
    zmq_msg_t m;
    int e;
    zmq_msg_init(&m);
    e = s_recv_part(sock, &m);
    zmq_msg_close(&m);
    if (e) return; /* socket or context gone: nothing left to keep aligned */
  }
}

void tn_in_close(tn_in *in) {
  if (!in) return;
  if (in->open_) zmq_msg_close(&in->body);
  in->open_ = 0;
  for (int i = 0; i < in->ndata; i++) zmq_msg_close(&in->data[i]);
  free(in->data);
  in->data = NULL;
  in->ndata = 0;
}

void tn_in_move(tn_in *dst, tn_in *src) {
  memcpy(dst->route, src->route, src->route_len);
  dst->route_len = src->route_len;
  dst->type = src->type;
  dst->req = src->req;
  dst->open_ = src->open_;
  if (src->open_) {
    zmq_msg_init(&dst->body);
    zmq_msg_move(&dst->body, &src->body);
    zmq_msg_close(&src->body);
  }
  src->open_ = 0;
  dst->ndata = src->ndata; /* the frame array is on the heap: its pointer moves */
  dst->data = src->data;
  src->ndata = 0;
  src->data = NULL;
}

/* Grow in->data to hold at least want frames.  The frames already there are
** moved with zmq_msg_move (not realloc'd) so no assumption is made about
** zmq_msg_t being relocatable by memcpy. */
static int s_grow(tn_in *in, int *cap, int want) {
  int ncap = *cap ? *cap * 2 : 8;
  zmq_msg_t *nd;
  if (want <= *cap) return TR_OK;
  if (ncap > TN_MAX_FRAMES) ncap = TN_MAX_FRAMES;
  if (ncap < want) ncap = want;
  nd = malloc((size_t)ncap * sizeof *nd);
  if (!nd) return TR_ENOMEM;
  for (int i = 0; i < in->ndata; i++) {
    zmq_msg_init(&nd[i]);
    zmq_msg_move(&nd[i], &in->data[i]);
    zmq_msg_close(&in->data[i]);
  }
  free(in->data);
  in->data = nd;
  *cap = ncap;
  return TR_OK;
}

/*
** The first part is the only one that can block (or be interrupted, or be
** absent under ZMQ_DONTWAIT); it is received with the caller's flags and
** nothing is consumed when it fails.  Every later part is already queued
** (atomic multipart delivery) and is read to the end even after the
** message turned out malformed, so the next call starts on a boundary.
** in is overwritten without being looked at (close the previous message
** first); after a failure it holds nothing but the routing id (ROUTER: who
** sent a malformed message, for the caller's log), and tn_in_close is
** harmless.
** A ZMQ_RCVTIMEO expiring reads like ZMQ_DONTWAIT: TR_ENOTFOUND.
*/
int tn_recv(void *sock, int routed, int flags, tn_in *in, tr_err *err) {
  zmq_msg_t first, hdr;
  const uint8_t *h;
  size_t hlen;
  int rc = TR_OK, cap = 0, hdr_open = 0, e;

  memset(in, 0, sizeof *in);
  zmq_msg_init(&first);
  if (zmq_msg_recv(&first, sock, flags) < 0) {
    e = zmq_errno();
    zmq_msg_close(&first);
    if (e == EAGAIN) return tr_seterr(err, TR_ENOTFOUND, "no message waiting");
    if (e == EINTR) return tr_seterr(err, TR_EINTR, "receive interrupted");
    return tr_seterr(err, TR_EIO, "receive failed: %s", zmq_strerror(e));
  }

  if (routed) {
    size_t rl = zmq_msg_size(&first);
    if (rl > sizeof in->route) {
      zmq_msg_close(&first);
      rc = tr_seterr(err, TR_EINVAL, "routing id of %zu bytes", rl);
      goto fail;
    }
    memcpy(in->route, zmq_msg_data(&first), rl);
    in->route_len = rl;
    zmq_msg_close(&first);
    if (!s_more(sock)) {
      rc = tr_seterr(err, TR_EINVAL, "missing header");
      goto fail;
    }
    zmq_msg_init(&hdr);
    hdr_open = 1;
    if ((e = s_recv_part(sock, &hdr)) != 0) {
      rc = tr_seterr(err, TR_EIO, "receive failed: %s", zmq_strerror(e));
      goto fail;
    }
  } else {
    zmq_msg_init(&hdr);
    zmq_msg_move(&hdr, &first);
    zmq_msg_close(&first);
    hdr_open = 1;
  }

  /* Header: "TR", version, type, flags, reserved, request id, database. */
  h = zmq_msg_data(&hdr);
  hlen = zmq_msg_size(&hdr);
  if (hlen != TN_HEADER_SIZE) {
    rc = tr_seterr(err, TR_EINVAL, "header of %zu bytes", hlen);
    goto fail;
  }
  if (h[0] != 'T' || h[1] != 'R') {
    rc = tr_seterr(err, TR_EINVAL, "bad magic");
    goto fail;
  }
  if (h[2] != TN_PROTOCOL_VERSION) {
    rc = tr_seterr(err, TR_EINVAL, "unknown protocol version %u", (unsigned)h[2]);
    goto fail;
  }
  if (h[3] < TN_HELLO || h[3] >= TN_TYPE_END) {
    rc = tr_seterr(err, TR_EINVAL, "unknown message type %u", (unsigned)h[3]);
    goto fail;
  }
  /* Flags (bytes 4-5) and reserved (6-7) are ignored: version 3 defines
  ** none, and a later minor use of them should not break older peers. */
  in->type = h[3];
  in->req = s_from_le(h + 8, 8);
  in->db = s_from_le(h + 16, 8);
  zmq_msg_close(&hdr);
  hdr_open = 0;

  if (!s_more(sock)) {
    rc = tr_seterr(err, TR_EINVAL, "missing body");
    goto fail;
  }
  zmq_msg_init(&in->body);
  in->open_ = 1;
  if ((e = s_recv_part(sock, &in->body)) != 0) {
    rc = tr_seterr(err, TR_EIO, "receive failed: %s", zmq_strerror(e));
    goto fail;
  }
  if (zmq_msg_size(&in->body) > TN_MAX_BODY) {
    rc = tr_seterr(err, TR_EINVAL, "oversized body (%zu bytes)", zmq_msg_size(&in->body));
    goto fail;
  }

  while (s_more(sock)) {
    zmq_msg_t *m;
    if (in->ndata == TN_MAX_FRAMES) {
      rc = tr_seterr(err, TR_EINVAL, "too many frames (more than %d data frames)",
                     TN_MAX_FRAMES);
      goto fail;
    }
    if (s_grow(in, &cap, in->ndata + 1) != TR_OK) {
      rc = tr_seterr(err, TR_ENOMEM, "out of memory receiving %s", tn_type_name(in->type));
      goto fail;
    }
    m = &in->data[in->ndata];
    zmq_msg_init(m);
    in->ndata++; /* counted now so that tn_in_close closes it */
    if ((e = s_recv_part(sock, m)) != 0) {
      rc = tr_seterr(err, TR_EIO, "receive failed: %s", zmq_strerror(e));
      goto fail;
    }
    if (zmq_msg_size(m) > TN_MAX_DATA) {
      rc = tr_seterr(err, TR_EINVAL, "oversized data frame (%zu bytes)", zmq_msg_size(m));
      goto fail;
    }
  }
  return TR_OK;

fail:
  if (hdr_open) zmq_msg_close(&hdr);
  s_drain(sock);
  tn_in_close(in);
  in->type = 0;
  in->req = 0;
  in->db = 0;
  return rc;
}

const void *tn_in_body(tn_in *in, size_t *n) {
  if (!in->open_) {
    *n = 0;
    return NULL;
  }
  *n = zmq_msg_size(&in->body);
  return zmq_msg_data(&in->body);
}

const void *tn_in_data(tn_in *in, int i, size_t *n) {
  if (i < 0 || i >= in->ndata) {
    *n = 0;
    return NULL;
  }
  *n = zmq_msg_size(&in->data[i]);
  return zmq_msg_data(&in->data[i]);
}

/* ---- Sending ----------------------------------------------------------------- */

/* Initialise m as a copy of n bytes; 0 or ENOMEM. */
static int s_init_copy(zmq_msg_t *m, const void *p, size_t n) {
  if (zmq_msg_init_size(m, n) != 0) return ENOMEM;
  if (n) memcpy(zmq_msg_data(m), p, n);
  return 0;
}

/* After a part failed mid-message, finish the message with an empty last
** part.  Every frame was built before the first went out, so such a
** failure comes from libzmq itself: it has rolled back the pipe and is
** dropping the rest of the message (lb_t / router_t "dropping" mode), and
** only a part without ZMQ_SNDMORE ends that mode; without it the next
** message sent on the socket would vanish.  The result is ignored: on a
** dead socket (ETERM) there is nothing to repair. */
static void s_end_message(void *sock) {
  zmq_msg_t m;
  zmq_msg_init(&m);
  if (zmq_msg_send(&m, sock, ZMQ_DONTWAIT) < 0) zmq_msg_close(&m);
}

#define S_LOCAL_FRAMES 16

/*
** Ownership contract for zero-copy data (the engine relies on it): after
** tn_send returns, whatever the status, every data[i] has been or will be
** passed to free_fn(data[i], hint) exactly once when free_fn is not NULL.
** Frames handed to zmq_msg_init_data belong to ZeroMQ, which frees them
** once sent, or when tn_send closes the unsent message; frames never
** initialised (an earlier step failed) are freed here directly.
**
** Every frame is built before the first is sent, so that running out of
** memory can never cut a message short on the wire.
*/
static int s_send(void *sock, const void *route, size_t route_len, int type, uint64_t req,
                  uint64_t db, const tn_wbuf *body, int ndata, void *const *data, const size_t *len,
                  tn_free_fn *free_fn, void *hint, void *const *hints, tr_err *err) {
  uint8_t hdr[TN_HEADER_SIZE];
  zmq_msg_t local[S_LOCAL_FRAMES], *msgs = local;
  int rc = TR_OK, started = 0, i = 0, nf = 0, sent = 0, total, e;
  size_t blen = body ? body->n : 0;

  if (ndata < 0) ndata = 0; /* nothing to free or send */
  if (body && body->oom) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory building the %s body", tn_type_name(type));
    goto done;
  }
  if (type < TN_HELLO || type >= TN_TYPE_END || ndata > TN_MAX_FRAMES ||
      (ndata > 0 && (!data || !len)) || (route && route_len > 256) || blen > TN_MAX_BODY) {
    rc = tr_seterr(err, TR_EINVAL, "cannot send %s: bad message (%d data frames, body %zu bytes)",
                   tn_type_name(type), ndata, blen);
    goto done;
  }
  for (int k = 0; k < ndata; k++)
    if (len[k] > TN_MAX_DATA || (!data[k] && len[k])) {
      rc = tr_seterr(err, TR_EINVAL, "cannot send %s: data frame %d of %zu bytes",
                     tn_type_name(type), k, len[k]);
      goto done;
    }

  total = (route ? 1 : 0) + 2 + ndata;
  if (total > S_LOCAL_FRAMES && !(msgs = malloc((size_t)total * sizeof *msgs))) {
    msgs = local;
    rc = tr_seterr(err, TR_ENOMEM, "out of memory sending %s", tn_type_name(type));
    goto done;
  }

  hdr[0] = 'T';
  hdr[1] = 'R';
  hdr[2] = TN_PROTOCOL_VERSION;
  hdr[3] = (uint8_t)type;
  s_le(hdr + 4, 0, 2); /* flags */
  s_le(hdr + 6, 0, 2); /* reserved */
  s_le(hdr + 8, req, 8);
  s_le(hdr + 16, db, 8);

  /* Route (if any), header, body: nf counts the frames initialised, which
  ** are the ones the cleanup must close. */
  if (route && s_init_copy(&msgs[nf++], route, route_len) != 0) nf--;
  else if (s_init_copy(&msgs[nf++], hdr, sizeof hdr) != 0) nf--;
  else if (s_init_copy(&msgs[nf++], body ? body->p : NULL, blen) != 0) nf--;
  if (nf != total - ndata) {
    rc = tr_seterr(err, TR_ENOMEM, "out of memory sending %s", tn_type_name(type));
    goto done;
  }
  while (i < ndata) {
    int k = i++; /* from here on frame k is ZeroMQ's or already freed */
    if (free_fn) {
      if (zmq_msg_init_data(&msgs[nf], data[k], len[k], free_fn, hints ? hints[k] : hint) != 0) {
        free_fn(data[k], hints ? hints[k] : hint);
        rc = tr_seterr(err, TR_ENOMEM, "out of memory sending %s", tn_type_name(type));
        goto done;
      }
    } else if (s_init_copy(&msgs[nf], data[k], len[k]) != 0) {
      rc = tr_seterr(err, TR_ENOMEM, "out of memory sending %s", tn_type_name(type));
      goto done;
    }
    nf++;
  }

  for (; sent < nf; sent++) {
    for (;;) {
      if (zmq_msg_send(&msgs[sent], sock, sent + 1 < nf ? ZMQ_SNDMORE : 0) >= 0) break;
      e = zmq_errno();
      /* Once a part is out, a signal must not end the message half-way. */
      if (e == EINTR && started) continue;
      if (e == EINTR) rc = tr_seterr(err, TR_EINTR, "send interrupted");
      else if (e == EAGAIN) rc = tr_seterr(err, TR_EIO, "send timed out");
      else if (e == EHOSTUNREACH) rc = tr_seterr(err, TR_EIO, "send failed: peer unreachable");
      else
        rc = tr_seterr(err, TR_EIO, "send failed%s: %s", started ? " mid-message" : "",
                       zmq_strerror(e));
      goto done;
    }
    started = 1;
  }

done:
  /* Unsent frames: closing a zero-copy one calls its free_fn. */
  for (int k = sent; k < nf; k++) zmq_msg_close(&msgs[k]);
  if (free_fn)
    for (; i < ndata; i++) free_fn(data[i], hints ? hints[i] : hint);
  if (rc != TR_OK && started) s_end_message(sock);
  if (msgs != local) free(msgs);
  return rc;
}

int tn_send(void *sock, const void *route, size_t route_len, int type, uint64_t req,
            uint64_t db, const tn_wbuf *body, int ndata, void *const *data, const size_t *len,
            tn_free_fn *free_fn, void *hint, tr_err *err) {
  return s_send(sock, route, route_len, type, req, db, body, ndata, data, len, free_fn, hint, NULL,
                err);
}

int tn_send_blobs(void *sock, const void *route, size_t route_len, int type, uint64_t req,
                  uint64_t db, const tn_wbuf *body, int n, tr_blob *const *blobs, tr_err *err) {
  void *local_d[S_LOCAL_FRAMES] = {0}, **data = local_d;
  size_t local_l[S_LOCAL_FRAMES] = {0}, *len = local_l;
  if (n > S_LOCAL_FRAMES) {
    data = malloc((size_t)n * sizeof *data);
    len = malloc((size_t)n * sizeof *len);
  }
  if (!data || !len) {
    for (int k = 0; k < n; k++) tr_blob_release(NULL, blobs[k]);
    if (data != local_d) free(data);
    if (len != local_l) free(len);
    return tr_seterr(err, TR_ENOMEM, "out of memory sending %s", tn_type_name(type));
  }
  for (int k = 0; k < n; k++) {
    data[k] = tr_blob_data(blobs[k]);
    len[k] = tr_blob_size(blobs[k]);
  }
  int rc = s_send(sock, route, route_len, type, req, db, body, n, data, len, tr_blob_release, NULL,
                  (void *const *)blobs, err);
  if (data != local_d) free(data);
  if (len != local_l) free(len);
  return rc;
}

/* A frame's bytes handed to a blob: the message is moved to the heap and
** closed with the blob's last reference. */
static void s_close_frame(void *data, void *hint) {
  (void)data;
  zmq_msg_close(hint);
  free(hint);
}

tr_blob *tn_in_take_data(tn_in *in, int i) {
  zmq_msg_t *m = malloc(sizeof *m);
  if (!m || i < 0 || i >= in->ndata) {
    free(m);
    return NULL;
  }
  zmq_msg_init(m);
  zmq_msg_move(m, &in->data[i]); /* in->data[i] is left an empty frame */
  tr_blob *b;
  if ((uintptr_t)zmq_msg_data(m) % TN_DATA_ALIGN) {
    /* ZeroMQ places a frame anywhere in its receive buffer (a small one
    ** at any byte); a chunk's elements must sit on their alignment: BLAS
    ** kernels load them with aligned vector loads (OpenBLAS's generic
    ** x86 ones fault on a double at 4 mod 8). */
    size_t n = zmq_msg_size(m);
    if ((b = tr_blob_new(n))) {
      if (n) memcpy(tr_blob_data(b), zmq_msg_data(m), n);
      s_close_frame(NULL, m);
      return b;
    }
  } else {
    b = tr_blob_adopt(zmq_msg_data(m), zmq_msg_size(m), s_close_frame, m);
  }
  if (!b) {
    zmq_msg_move(&in->data[i], m);
    free(m);
  }
  return b;
}

int tn_send_error(void *sock, const void *route, size_t route_len, uint64_t req, uint64_t db,
                  int code, uint64_t chunk, const char *msg) {
  tn_wbuf b = {0};
  int rc;
  /* i32 on the wire: the two's complement bits in a u32 field; tn_get_error
  ** converts back. */
  tn_put_u32(&b, (uint32_t)(int32_t)code);
  tn_put_str(&b, msg ? msg : "");
  tn_put_u64(&b, chunk);
  rc = tn_send(sock, route, route_len, TN_ERROR, req, db, &b, 0, NULL, NULL, NULL, NULL, NULL);
  tn_wbuf_free(&b);
  return rc;
}

int tn_get_error(tn_in *in, int *code, uint64_t *chunk, char *msg, size_t cap) {
  size_t n;
  const void *body = tn_in_body(in, &n);
  tn_rbuf r;
  tn_rbuf_init(&r, body, n);
  int32_t c = (int32_t)tn_get_u32(&r);
  tn_get_str(&r, msg, cap);
  *chunk = tn_get_u64(&r);
  if (in->type != TN_ERROR || tn_rbuf_ok(&r) != TR_OK) {
    *code = TR_EINVAL;
    *chunk = 0;
    snprintf(msg, cap, "malformed error reply");
    return TR_EINVAL;
  }
  /* A peer's code outside the TR_E* range is still a failure. */
  *code = c < 0 && c >= TR_E_LOWEST ? c : TR_ERR;
  return TR_OK;
}
