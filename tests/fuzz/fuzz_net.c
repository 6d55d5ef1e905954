/*
** tests/fuzz/fuzz_net.c - libFuzzer target for the wire protocol
** (net/proto.c): any multipart message must be either received whole and
** decodable without reading out of bounds, or rejected with TR_EINVAL and
** drained to its end, so that the next message is received intact.
**
** Input:
**   byte 0   bits 0-2: frames - 1 (1..8)
**            bit 3:    0: DEALER -> ROUTER (routed), 1: PAIR -> PAIR
**            bit 4:    PAIR path only: receive as routed (first frame is
**                      taken for a routing id, so long ids are reachable)
**            bits 5-7: all set: pad the message with empty frames up to
**                      TN_MAX_FRAMES - 4 + (byte 1 % 8) data frames, to
**                      probe the frame limit
**   then per frame but the last: u16 length (LE) and that many bytes (cut
**   short where the input ends); the last frame takes the rest.
**
** Oracles: every accepted message is decoded with the body layout of its
** type, and bodies that decode are re-encoded and must come out byte for
** byte the same; the message is then echoed back with zero-copy data
** frames, must arrive unchanged, and every frame must be freed exactly
** once.  After each input a sentinel HEARTBEAT must be the very next
** message received (malformed input drained completely).
*/
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Created on the first call, closed at exit (so leak checkers see no loss). */
static void *s_ctx, *s_router, *s_dealer, *s_pa, *s_pb;
static uint64_t s_seq;
static int s_freed;
static volatile uint64_t s_sink;

/* A failed oracle names its line (compilers merge identical abort() calls,
** which makes the stack trace point at the wrong check). */
static void s_fail(int line) __attribute__((noreturn, noinline));
static void s_fail(int line) {
  fprintf(stderr, "fuzz_net: check at line %d failed\n", line);
  abort();
}
#define S_CHECK(c) \
  do {             \
    if (!(c)) s_fail(__LINE__); \
  } while (0)

static void s_teardown(void) {
  zmq_close(s_router);
  zmq_close(s_dealer);
  zmq_close(s_pa);
  zmq_close(s_pb);
  zmq_ctx_term(s_ctx);
}

static void *s_sock(int type) {
  int zero = 0, tmo = 2000, hwm = 100000;
  void *s = zmq_socket(s_ctx, type);
  S_CHECK(s);
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
  /* A lost message shows up as a receive timeout, not a hang. */
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(s, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
  return s;
}

static void s_setup(void) {
  if (s_ctx) return;
  s_ctx = zmq_ctx_new();
  S_CHECK(s_ctx);
  s_router = s_sock(ZMQ_ROUTER);
  s_dealer = s_sock(ZMQ_DEALER);
  s_pa = s_sock(ZMQ_PAIR);
  s_pb = s_sock(ZMQ_PAIR);
  S_CHECK(zmq_bind(s_router, "inproc://fuzz-router") == 0);
  S_CHECK(zmq_connect(s_dealer, "inproc://fuzz-router") == 0);
  S_CHECK(zmq_bind(s_pb, "inproc://fuzz-pair") == 0);
  S_CHECK(zmq_connect(s_pa, "inproc://fuzz-pair") == 0);
  atexit(s_teardown);
}

static void s_count_free(void *data, void *hint) {
  (void)data;
  S_CHECK(hint == &s_freed);
  s_freed++;
}

/* Signals (libFuzzer's SIGALRM timer among them) interrupt ZeroMQ calls
** with EINTR; the harness retries them, as a caller of the library would. */
static int s_zsend(void *s, const void *p, size_t n, int flags) {
  int rc;
  while ((rc = zmq_send(s, p, n, flags)) < 0 && zmq_errno() == EINTR) {
  }
  return rc;
}

static int s_recv(void *s, int routed, tn_in *in, tr_err *err) {
  int rc;
  while ((rc = tn_recv(s, routed, 0, in, err)) == TR_EINTR) {
  }
  return rc;
}

/*
** Decode a body the way the engine does for its type, re-encoding into w
** what was read.  Returns tn_rbuf_ok(); on TR_OK w must equal the body.
*/
static int s_decode(int type, tn_rbuf *r, tn_wbuf *w, int ndata) {
  char s[256];
  uint32_t n;
  tn_chunk c;
  switch (type) {
  case TN_PUT:
  case TN_DATA:
  case TN_TASK_OK:
    n = tn_get_count(r, 25);
    tn_put_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
      tn_get_chunk(r, &c);
      tn_put_chunk(w, &c);
    }
    (void)ndata; /* the engine checks n == ndata and sizes; not our concern */
    break;
  case TN_GET:
  case TN_SYNC:
  case TN_DROP:
  case TN_INVENTORY:
    n = tn_get_count(r, 8);
    tn_put_u32(w, n);
    for (uint32_t i = 0; i < n; i++) tn_put_u64(w, tn_get_u64(r));
    if (type == TN_SYNC && r->off < r->n) tn_put_u8(w, tn_get_u8(r)); /* [u8 all] */
    break;
  case TN_SEND:
    n = tn_get_count(r, 12);
    tn_put_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
      tn_put_u64(w, tn_get_u64(r));
      tn_get_str(r, s, sizeof s);
      tn_put_str(w, s);
    }
    break;
  case TN_HELLO:
    tn_get_str(r, s, sizeof s);
    tn_put_str(w, s);
    break;
  case TN_HELLO_OK:
    tn_get_str(r, s, sizeof s);
    tn_put_str(w, s);
    tn_put_u32(w, tn_get_u32(r));
    tn_get_str(r, s, sizeof s);
    tn_put_str(w, s);
    tn_put_u64(w, tn_get_u64(r));
    tn_put_u64(w, tn_get_u64(r));
    tn_get_str(r, s, sizeof s);
    tn_put_str(w, s);
    break;
  case TN_HEARTBEAT: /* empty, or a worker's incarnation */
    if (r->n) tn_put_u64(w, tn_get_u64(r));
    break;
  case TN_PUT_OK:
  case TN_SYNC_OK:
  case TN_DROP_OK:
    tn_put_u32(w, tn_get_u32(r));
    break;
  case TN_INVENTORY_OK:
    n = tn_get_count(r, 8);
    tn_put_u32(w, n);
    for (uint32_t i = 0; i < n; i++) tn_put_u64(w, tn_get_u64(r));
    n = tn_get_count(r, 25);
    tn_put_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
      tn_get_chunk(r, &c);
      tn_put_chunk(w, &c);
    }
    break;
  case TN_SEND_OK:
    tn_put_u64(w, tn_get_u64(r));
    break;
  case TN_STATS_OK:
    for (int i = 0; i < 5; i++) tn_put_u64(w, tn_get_u64(r));
    tn_get_str(r, s, sizeof s);
    tn_put_str(w, s);
    break;
  case TN_ERROR:
    tn_put_u32(w, (uint32_t)(int32_t)tn_get_u32(r));
    tn_get_str(r, s, sizeof s);
    tn_put_str(w, s);
    tn_put_u64(w, tn_get_u64(r));
    break;
  case TN_TASK: { /* engine-encoded: exercise the remaining readers */
    size_t bn;
    const uint8_t *b;
    tn_put_i64(w, tn_get_i64(r));
    tn_put_f64(w, tn_get_f64(r));
    tn_put_u8(w, tn_get_u8(r));
    b = tn_get_bytes(r, &bn);
    tn_put_bytes(w, b, bn);
    break;
  }
  default: /* STATS, CANCEL: empty */
    break;
  }
  S_CHECK(r->off <= r->n);
  return tn_rbuf_ok(r);
}

/* Echo the accepted message back from the receiving side with zero-copy
** data frames and check it arrives unchanged and is freed once per frame. */
static void s_echo(void *rx, void *tx, int send_route, tn_in *in) {
  tn_in back;
  tr_err err;
  void *dp[8];
  size_t dl[8], bn, bn2;
  const void *body = tn_in_body(in, &bn), *body2;
  /* tn_send only reads the body: point a wbuf at the received bytes. */
  tn_wbuf b = {(uint8_t *)(uintptr_t)body, bn, bn, 0};
  int nd = in->ndata, rc;
  if (nd > 8) return; /* bounded arrays; the frame loop is covered above */
  for (int i = 0; i < nd; i++) dp[i] = (void *)(uintptr_t)tn_in_data(in, i, &dl[i]);
  do { /* TR_EINTR: nothing sent and every frame freed; try again */
    s_freed = 0;
    rc = tn_send(rx, send_route ? in->route : NULL, send_route ? in->route_len : 0, in->type,
                 in->req, in->db, &b, nd, dp, dl, s_count_free, &s_freed, &err);
    S_CHECK(rc == TR_OK || (rc == TR_EINTR && s_freed == nd));
  } while (rc == TR_EINTR);
  S_CHECK(s_recv(tx, 0, &back, &err) == TR_OK);
  S_CHECK(back.type == in->type && back.req == in->req && back.db == in->db && back.ndata == nd);
  body2 = tn_in_body(&back, &bn2);
  S_CHECK(bn2 == bn && (bn == 0 || memcmp(body, body2, bn) == 0));
  for (int i = 0; i < nd; i++) {
    size_t n;
    const void *d = tn_in_data(&back, i, &n);
    S_CHECK(n == dl[i] && (n == 0 || memcmp(d, dp[i], n) == 0));
  }
  tn_in_close(&back);
  S_CHECK(s_freed == nd); /* inproc: the last reference went with back */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tn_in in;
  tr_err err;
  uint8_t hdr[TN_HEADER_SIZE];
  void *tx, *rx;
  int routed, nf, pad = 0, rc;
  size_t off = 1;

  if (size < 1) return 0;
  s_setup();
  nf = 1 + (data[0] & 7);
  if (data[0] & 8) {
    tx = s_pa;
    rx = s_pb;
    routed = (data[0] & 16) != 0;
  } else {
    tx = s_dealer;
    rx = s_router;
    routed = 1;
  }
  if ((data[0] & 0xe0) == 0xe0 && size > 1) {
    pad = TN_MAX_FRAMES - 4 + (data[1] % 8);
    off = 2;
  }

  /* Send the frames as one message. */
  for (int i = 0; i < nf; i++) {
    size_t len = size - off;
    int last = i == nf - 1 && pad == 0;
    if (i < nf - 1) {
      size_t want = 0;
      if (size - off >= 2) {
        want = (size_t)data[off] | (size_t)data[off + 1] << 8;
        off += 2;
      } else {
        off = size;
      }
      len = want < size - off ? want : size - off;
    }
    S_CHECK(s_zsend(tx, data + off, len, last ? 0 : ZMQ_SNDMORE) >= 0);
    off += len;
  }
  for (int i = 0; i < pad; i++) S_CHECK(s_zsend(tx, "", 0, i + 1 < pad ? ZMQ_SNDMORE : 0) >= 0);

  /* A sentinel right behind it. */
  s_seq++;
  memset(hdr, 0, sizeof hdr);
  hdr[0] = 'T';
  hdr[1] = 'R';
  hdr[2] = TN_PROTOCOL_VERSION;
  hdr[3] = TN_HEARTBEAT;
  for (int i = 0; i < 8; i++) hdr[8 + i] = (uint8_t)(s_seq >> (8 * i));

  memset(&err, 0, sizeof err);
  rc = s_recv(rx, routed, &in, &err);
  S_CHECK(rc == TR_OK || rc == TR_EINVAL);
  if (rc == TR_OK) {
    tn_rbuf r;
    tn_wbuf w = {0};
    size_t bn;
    const void *body = tn_in_body(&in, &bn);
    S_CHECK(in.type >= TN_HELLO && in.type < TN_TYPE_END && bn <= TN_MAX_BODY);
    S_CHECK(in.ndata >= 0 && in.ndata <= TN_MAX_FRAMES && in.route_len <= sizeof in.route);
    for (int i = 0; i < in.ndata; i++) {
      size_t n;
      const uint8_t *d = tn_in_data(&in, i, &n);
      for (size_t k = 0; k < n; k++) s_sink += d[k];
    }
    tn_rbuf_init(&r, body, bn);
    if (s_decode(in.type, &r, &w, in.ndata) == TR_OK)
      S_CHECK(!w.oom && w.n == bn && (bn == 0 || memcmp(w.p, body, bn) == 0));
    tn_wbuf_free(&w);
    s_echo(rx, tx, tx == s_dealer, &in);
    tn_in_close(&in);
  } else {
    S_CHECK(err.msg[0] != '\0' && in.ndata == 0 && !in.data);
  }
  tn_in_close(&in);

  /* The sentinel must be next: the input was read or drained completely. */
  if (routed && tx == s_pa) S_CHECK(s_zsend(tx, "r", 1, ZMQ_SNDMORE) >= 0);
  S_CHECK(s_zsend(tx, hdr, sizeof hdr, ZMQ_SNDMORE) >= 0);
  S_CHECK(s_zsend(tx, "", 0, 0) >= 0);
  S_CHECK(s_recv(rx, routed, &in, &err) == TR_OK);
  S_CHECK(in.type == TN_HEARTBEAT && in.req == s_seq && in.ndata == 0);
  tn_in_close(&in);
  return 0;
}
