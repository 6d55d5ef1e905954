/*
** tests/unit/test_net.c - the wire protocol (net/proto.c) and cluster
** security (net/keys.c): body encoding and its bounds checks, whole
** messages over real ZeroMQ sockets (zero-copy ownership, malformed input
** and recovery), CURVE keys with the ZAP handler, and local endpoints.
*/
#include "config.h"
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "net/net.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A body holding one field of every type, and the decoder for it; the
** decoder returns tn_rbuf_ok() after checking the values it read. */
static void s_put_all(tn_wbuf *b) {
  static const uint8_t raw[5] = {0, 1, 2, 0xfe, 0xff};
  tn_put_u8(b, 0xab);
  tn_put_u32(b, 0xdeadbeefu);
  tn_put_u64(b, 0x0102030405060708ull);
  tn_put_i64(b, -42);
  tn_put_f64(b, -1.5e300);
  tn_put_bytes(b, raw, sizeof raw);
  tn_put_bytes(b, NULL, 0);
  tn_put_str(b, "hello");
  tn_put_str(b, "");
}

static int s_get_all(tn_rbuf *r, int check) {
  uint8_t u8 = tn_get_u8(r);
  uint32_t u32 = tn_get_u32(r);
  uint64_t u64 = tn_get_u64(r);
  int64_t i64 = tn_get_i64(r);
  double f = tn_get_f64(r);
  size_t n1, n2;
  const uint8_t *b1 = tn_get_bytes(r, &n1);
  const void *b2 = tn_get_bytes(r, &n2);
  char s1[16], s2[4];
  tn_get_str(r, s1, sizeof s1);
  tn_get_str(r, s2, sizeof s2);
  (void)b2;
  if (check) {
    cr_assert_eq(u8, 0xab);
    cr_assert_eq(u32, 0xdeadbeefu);
    cr_assert_eq(u64, 0x0102030405060708ull);
    cr_assert_eq(i64, -42);
    cr_assert_eq(f, -1.5e300);
    cr_assert_eq(n1, 5);
    cr_assert(b1 && b1[0] == 0 && b1[3] == 0xfe && b1[4] == 0xff);
    cr_assert_eq(n2, 0);
    cr_assert_str_eq(s1, "hello");
    cr_assert_str_eq(s2, "");
  }
  return tn_rbuf_ok(r);
}

static atomic_int s_freed;

static void s_count_free(void *data, void *hint) {
  cr_assert_eq(hint, (void *)&s_freed);
  free(data);
  atomic_fetch_add(&s_freed, 1);
}

/* Wait up to ms for the counter to reach want. */
static int s_wait_freed(int want, int ms) {
  double end = tr_now() + ms / 1000.0;
  while (atomic_load(&s_freed) < want && tr_now() < end) usleep(1000);
  return atomic_load(&s_freed);
}

static void *s_sock(void *ctx, int type) {
  int zero = 0;
  void *s = zmq_socket(ctx, type);
  cr_assert_not_null(s);
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
  return s;
}

/* Bind to a random loopback port; the endpoint goes into ep. */
static void s_bind(void *s, char *ep, size_t cap) {
  size_t n = cap;
  cr_assert_eq(zmq_bind(s, "tcp://127.0.0.1:*"), 0, "%s", zmq_strerror(zmq_errno()));
  cr_assert_eq(zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &n), 0);
}

/* tn_recv with a deadline (never a fixed sleep): TR_ENOTFOUND if nothing
** arrived within ms. */
static int s_recv_within(void *s, int routed, tn_in *in, tr_err *err, int ms) {
  zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
  double end = tr_now() + ms / 1000.0;
  for (;;) {
    double left = (end - tr_now()) * 1000.0;
    if (left < 0) left = 0;
    int n = zmq_poll(&it, 1, (long)left);
    if (n > 0) return tn_recv(s, routed, ZMQ_DONTWAIT, in, err);
    if (left <= 0) {
      memset(in, 0, sizeof *in);
      return TR_ENOTFOUND;
    }
  }
}

/* Send a raw multipart message (frames of given lengths). */
static void s_raw(void *s, int nf, const void *const *f, const size_t *len) {
  for (int i = 0; i < nf; i++)
    cr_assert(zmq_send(s, f[i], len[i], i + 1 < nf ? ZMQ_SNDMORE : 0) >= 0);
}

static void s_header(uint8_t h[TN_HEADER_SIZE], int type, uint64_t req) {
  memset(h, 0, TN_HEADER_SIZE);
  h[0] = 'T';
  h[1] = 'R';
  h[2] = TN_PROTOCOL_VERSION;
  h[3] = (uint8_t)type;
  for (int i = 0; i < 8; i++) h[8 + i] = (uint8_t)(req >> (8 * i));
}

/* ---- bodies -------------------------------------------------------------------- */

Test(net, type_names) {
  cr_assert_str_eq(tn_type_name(TN_HELLO), "HELLO");
  cr_assert_str_eq(tn_type_name(TN_PUT), "PUT");
  cr_assert_str_eq(tn_type_name(TN_STATS_OK), "STATS_OK");
  cr_assert_str_eq(tn_type_name(TN_ERROR), "ERROR");
  cr_assert_str_eq(tn_type_name(0), "?");
  cr_assert_str_eq(tn_type_name(TN_TYPE_END), "?");
  cr_assert_str_eq(tn_type_name(-3), "?");
  for (int t = TN_HELLO; t < TN_TYPE_END; t++) cr_assert_str_neq(tn_type_name(t), "?");
}

Test(net, wbuf_little_endian_layout) {
  tn_wbuf b = {0};
  static const uint8_t want[] = {0x7f, 0x04, 0x03, 0x02, 0x01, 0x08, 0x07, 0x06, 0x05,
                                 0x04, 0x03, 0x02, 0x01, 0x02, 0, 0, 0, 'h', 'i'};
  tn_put_u8(&b, 0x7f);
  tn_put_u32(&b, 0x01020304u);
  tn_put_u64(&b, 0x0102030405060708ull);
  tn_put_str(&b, "hi");
  cr_assert_eq(b.oom, 0);
  cr_assert_eq(b.n, sizeof want);
  cr_assert_arr_eq(b.p, want, sizeof want);
  tn_wbuf_free(&b);
  cr_assert_null(b.p);
  cr_assert_eq(b.n, 0);
  tn_wbuf_free(&b); /* twice is fine */
}

Test(net, round_trip_every_field) {
  tn_wbuf b = {0};
  tn_rbuf r;
  s_put_all(&b);
  cr_assert_eq(b.oom, 0);
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_eq(s_get_all(&r, 1), TR_OK);
  tn_wbuf_free(&b);
}

Test(net, round_trip_extremes) {
  tn_wbuf b = {0};
  tn_rbuf r;
  tn_put_u8(&b, 0xff);
  tn_put_u32(&b, UINT32_MAX);
  tn_put_u64(&b, UINT64_MAX);
  tn_put_i64(&b, INT64_MIN);
  tn_put_i64(&b, INT64_MAX);
  tn_put_f64(&b, -0.0);
  tn_put_f64(&b, INFINITY);
  tn_put_f64(&b, NAN);
  tn_put_f64(&b, 5e-324);
  tn_put_str(&b, NULL);
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_eq(tn_get_u8(&r), 0xff);
  cr_assert_eq(tn_get_u32(&r), UINT32_MAX);
  cr_assert_eq(tn_get_u64(&r), UINT64_MAX);
  cr_assert_eq(tn_get_i64(&r), INT64_MIN);
  cr_assert_eq(tn_get_i64(&r), INT64_MAX);
  double z = tn_get_f64(&r);
  cr_assert(z == 0.0 && signbit(z));
  cr_assert(isinf(tn_get_f64(&r)));
  cr_assert(isnan(tn_get_f64(&r)));
  cr_assert_eq(tn_get_f64(&r), 5e-324);
  char s[2] = "x";
  tn_get_str(&r, s, sizeof s);
  cr_assert_str_eq(s, "");
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK);
  tn_wbuf_free(&b);
}

Test(net, wbuf_grows) {
  tn_wbuf b = {0};
  tn_rbuf r;
  for (uint64_t i = 0; i < 100000; i++) tn_put_u64(&b, i * 2654435761u);
  cr_assert_eq(b.n, 800000);
  cr_assert_geq(b.cap, b.n);
  tn_rbuf_init(&r, b.p, b.n);
  for (uint64_t i = 0; i < 100000; i++) cr_assert_eq(tn_get_u64(&r), i * 2654435761u);
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK);
  tn_wbuf_free(&b);
}

Test(net, wbuf_oom_stops_writing) {
  tn_wbuf b = {0};
  tn_put_u32(&b, 1);
  b.oom = 1; /* as after a failed realloc */
  tn_put_u64(&b, 2);
  tn_put_str(&b, "more");
  cr_assert_eq(b.n, 4);
  tn_wbuf_free(&b);
}

Test(net, every_truncation_fails) {
  tn_wbuf b = {0};
  s_put_all(&b);
  for (size_t n = 0; n < b.n; n++) {
    tn_rbuf r;
    tn_rbuf_init(&r, b.p, n);
    cr_assert_eq(s_get_all(&r, 0), TR_EINVAL, "prefix of %zu bytes accepted", n);
    cr_assert(r.bad, "prefix of %zu bytes: bad not set", n);
    cr_assert_leq(r.off, n);
  }
  /* and a trailing byte is not consumed: not ok, though nothing was bad */
  tn_put_u8(&b, 0);
  tn_rbuf r;
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_eq(s_get_all(&r, 1), TR_EINVAL);
  cr_assert_eq(r.bad, 0);
  tn_wbuf_free(&b);
}

Test(net, reads_past_end_return_zero) {
  static const uint8_t p[3] = {1, 2, 3};
  tn_rbuf r;
  tn_rbuf_init(&r, p, sizeof p);
  cr_assert_eq(tn_get_u32(&r), 0);
  cr_assert(r.bad);
  cr_assert_eq(tn_get_u8(&r), 0, "bad is sticky: no read after a failure");
  tn_rbuf_init(&r, NULL, 0);
  cr_assert_eq(tn_get_u64(&r), 0);
  cr_assert_eq(tn_rbuf_ok(&r), TR_EINVAL);
  tn_rbuf_init(&r, NULL, 0);
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK); /* an empty body is a valid empty body */
}

Test(net, bytes_length_must_fit) {
  tn_wbuf b = {0};
  tn_rbuf r;
  size_t n = 99;
  tn_put_u32(&b, 6); /* claims 6 bytes, holds 5 */
  tn_put_u32(&b, 7);
  tn_put_u8(&b, 8);
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_null(tn_get_bytes(&r, &n));
  cr_assert_eq(n, 0);
  cr_assert(r.bad);
  b.n = 0;
  tn_put_u32(&b, UINT32_MAX); /* wraps if added to off unchecked */
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_null(tn_get_bytes(&r, &n));
  cr_assert(r.bad);
  tn_wbuf_free(&b);
}

Test(net, str_rejects_nul_and_overlong) {
  tn_wbuf b = {0};
  tn_rbuf r;
  char out[6];
  tn_put_bytes(&b, "ab\0cd", 5);
  tn_rbuf_init(&r, b.p, b.n);
  tn_get_str(&r, out, sizeof out);
  cr_assert(r.bad, "embedded NUL accepted");
  cr_assert_str_eq(out, "");

  b.n = 0;
  tn_put_str(&b, "abcde"); /* exactly fits 6 with its NUL */
  tn_rbuf_init(&r, b.p, b.n);
  tn_get_str(&r, out, sizeof out);
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK);
  cr_assert_str_eq(out, "abcde");

  b.n = 0;
  tn_put_str(&b, "abcdef"); /* one too many */
  tn_rbuf_init(&r, b.p, b.n);
  tn_get_str(&r, out, sizeof out);
  cr_assert(r.bad, "over-long string accepted");
  cr_assert_str_eq(out, "");
  tn_wbuf_free(&b);
}

Test(net, count_rejects_what_cannot_fit) {
  tn_wbuf b = {0};
  tn_rbuf r;
  tn_put_u32(&b, 3);
  for (int i = 0; i < 3; i++) tn_put_u64(&b, (uint64_t)i);
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_eq(tn_get_count(&r, 8), 3);
  for (int i = 0; i < 3; i++) tn_get_u64(&r);
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK);

  /* the same bytes cannot hold 3 items of 9 bytes */
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_eq(tn_get_count(&r, 9), 0);
  cr_assert(r.bad);

  /* a huge count: rejected for any item size, 0 included */
  b.n = 0;
  tn_put_u32(&b, UINT32_MAX);
  tn_put_u64(&b, 1);
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_eq(tn_get_count(&r, 25), 0);
  cr_assert(r.bad);
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_eq(tn_get_count(&r, 1), 0);
  cr_assert(r.bad);
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_eq(tn_get_count(&r, 0), 0);
  cr_assert(r.bad);

  /* count 0 is always fine */
  b.n = 0;
  tn_put_u32(&b, 0);
  tn_rbuf_init(&r, b.p, b.n);
  cr_assert_eq(tn_get_count(&r, 1000), 0);
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK);
  tn_wbuf_free(&b);
}

Test(net, chunk_round_trip_and_checks) {
  tn_wbuf b = {0};
  tn_rbuf r;
  tn_chunk c = {.id = 0x1122334455667788ull, .dtype = TR_F64, .nbytes = TN_MAX_DATA,
                .checksum = 0xfedcba9876543210ull}, d;
  tn_put_chunk(&b, &c);
  cr_assert_eq(b.n, 25);
  tn_rbuf_init(&r, b.p, b.n);
  tn_get_chunk(&r, &d);
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK);
  cr_assert_eq(d.id, c.id);
  cr_assert_eq(d.dtype, c.dtype);
  cr_assert_eq(d.nbytes, c.nbytes);
  cr_assert_eq(d.checksum, c.checksum);

  c.dtype = TR_F32;
  b.n = 0;
  tn_put_chunk(&b, &c);
  tn_rbuf_init(&r, b.p, b.n);
  tn_get_chunk(&r, &d);
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK);
  cr_assert_eq(d.dtype, TR_F32);

  c.dtype = 2;
  b.n = 0;
  tn_put_chunk(&b, &c);
  tn_rbuf_init(&r, b.p, b.n);
  tn_get_chunk(&r, &d);
  cr_assert(r.bad, "dtype 2 accepted");

  c.dtype = TR_F32;
  c.nbytes = (uint64_t)TN_MAX_DATA + 1;
  b.n = 0;
  tn_put_chunk(&b, &c);
  tn_rbuf_init(&r, b.p, b.n);
  tn_get_chunk(&r, &d);
  cr_assert(r.bad, "oversized chunk accepted");

  tn_rbuf_init(&r, b.p, 24); /* truncated */
  tn_get_chunk(&r, &d);
  cr_assert(r.bad);
  tn_wbuf_free(&b);
}

/* ---- messages over real sockets ------------------------------------------------ */

/* A ROUTER on a random loopback port and a DEALER connected to it. */
typedef struct s_pair {
  void *ctx, *router, *dealer;
  char ep[256];
} s_pair;

static void s_pair_open(s_pair *p) {
  p->ctx = zmq_ctx_new();
  cr_assert_not_null(p->ctx);
  p->router = s_sock(p->ctx, ZMQ_ROUTER);
  s_bind(p->router, p->ep, sizeof p->ep);
  p->dealer = s_sock(p->ctx, ZMQ_DEALER);
  cr_assert_eq(zmq_connect(p->dealer, p->ep), 0);
}

static void s_pair_close(s_pair *p) {
  zmq_close(p->dealer);
  zmq_close(p->router);
  zmq_ctx_term(p->ctx);
}

Test(net, router_dealer_round_trip_zero_copy, .timeout = 20) {
  s_pair p;
  tn_wbuf b = {0};
  tn_in in, rep;
  tr_err err;
  void *data[3];
  size_t len[3] = {1000, 0, 1 << 20};
  tn_chunk c = {0};
  s_pair_open(&p);
  atomic_store(&s_freed, 0);

  tn_put_u32(&b, 3);
  for (int i = 0; i < 3; i++) {
    data[i] = malloc(len[i] ? len[i] : 1);
    memset(data[i], 'a' + i, len[i]);
    c.id = 100 + (uint64_t)i;
    c.dtype = TR_F32;
    c.nbytes = len[i];
    tn_put_chunk(&b, &c);
  }
  cr_assert_eq(tn_send(p.dealer, NULL, 0, TN_PUT, 77, 0x1122334455667788ull, &b, 3, data, len, s_count_free, &s_freed,
                       &err),
               TR_OK, "%s", err.msg);
  tn_wbuf_free(&b);

  cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK, "%s", err.msg);
  cr_assert_eq(in.type, TN_PUT);
  cr_assert_eq(in.req, 77);
  cr_assert_eq(in.db, 0x1122334455667788ull, "the database id travels in the header");
  cr_assert_gt(in.route_len, 0);
  cr_assert_eq(in.ndata, 3);
  size_t bn;
  const void *body = tn_in_body(&in, &bn);
  tn_rbuf r;
  tn_rbuf_init(&r, body, bn);
  uint32_t n = tn_get_count(&r, 25);
  cr_assert_eq(n, 3);
  for (int i = 0; i < 3; i++) {
    size_t dn;
    const uint8_t *d = tn_in_data(&in, i, &dn);
    tn_get_chunk(&r, &c);
    cr_assert_eq(c.id, 100 + (uint64_t)i);
    cr_assert_eq(c.nbytes, len[i]);
    cr_assert_eq(dn, len[i]);
    for (size_t k = 0; k < dn; k++) cr_assert_eq(d[k], 'a' + i);
  }
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK);
  size_t dn = 5;
  cr_assert_null(tn_in_data(&in, 3, &dn));
  cr_assert_eq(dn, 0);
  cr_assert_null(tn_in_data(&in, -1, &dn));
  cr_assert_eq(s_wait_freed(3, 5000), 3, "free_fn must run once per frame");

  /* reply routed back by the route */
  tn_put_u32(&b, 3);
  cr_assert_eq(tn_send(p.router, in.route, in.route_len, TN_PUT_OK, in.req, 0, &b, 0, NULL, NULL,
                       NULL, NULL, &err),
               TR_OK, "%s", err.msg);
  tn_wbuf_free(&b);
  tn_in_close(&in);
  tn_in_close(&in); /* safe twice */
  cr_assert_eq(in.ndata, 0);

  cr_assert_eq(s_recv_within(p.dealer, 0, &rep, &err, 5000), TR_OK, "%s", err.msg);
  cr_assert_eq(rep.type, TN_PUT_OK);
  cr_assert_eq(rep.req, 77);
  cr_assert_eq(rep.route_len, 0);
  cr_assert_eq(rep.ndata, 0);
  body = tn_in_body(&rep, &bn);
  tn_rbuf_init(&r, body, bn);
  cr_assert_eq(tn_get_u32(&r), 3);
  cr_assert_eq(tn_rbuf_ok(&r), TR_OK);
  tn_in_close(&rep);

  cr_assert_eq(atomic_load(&s_freed), 3, "a frame was freed twice");
  s_pair_close(&p);
}

Test(net, copied_data_and_empty_body) {
  s_pair p;
  tn_in in;
  tr_err err;
  char buf[4] = "abc";
  void *data[1] = {buf};
  size_t len[1] = {3};
  s_pair_open(&p);
  /* free_fn NULL: copied at once, the caller may reuse its buffer */
  cr_assert_eq(tn_send(p.dealer, NULL, 0, TN_HEARTBEAT, 1, 0, NULL, 1, data, len, NULL, NULL, &err),
               TR_OK);
  buf[0] = 'X';
  cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK, "%s", err.msg);
  size_t bn, dn;
  tn_in_body(&in, &bn);
  cr_assert_eq(bn, 0);
  const char *d = tn_in_data(&in, 0, &dn);
  cr_assert_eq(dn, 3);
  cr_assert_eq(memcmp(d, "abc", 3), 0);
  tn_in_close(&in);
  /* nothing waiting */
  cr_assert_eq(tn_recv(p.router, 1, ZMQ_DONTWAIT, &in, &err), TR_ENOTFOUND);
  tn_in_close(&in);
  s_pair_close(&p);
}

/* A received message moved to another tn_in keeps its route, header, body
** and frames (same memory: no copy); the source is left empty, and closing
** both frees each frame once. */
Test(net, in_move_hands_frames_over) {
  s_pair p;
  tn_in in, mv;
  tr_err err;
  char a[5] = "data", b[3] = "xy";
  void *data[2] = {a, b};
  size_t len[2] = {4, 2};
  tn_wbuf body = {0};
  tn_put_u32(&body, 77);
  s_pair_open(&p);
  cr_assert_eq(tn_send(p.dealer, NULL, 0, TN_PUT, 9, 0, &body, 2, data, len, NULL, NULL, &err), TR_OK);
  cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK, "%s", err.msg);
  size_t n0, n1;
  const void *d0 = tn_in_data(&in, 0, &n0);
  tn_in_move(&mv, &in);
  cr_assert_eq(mv.type, TN_PUT);
  cr_assert_eq(mv.req, 9);
  cr_assert_eq(mv.route_len, in.route_len);
  cr_assert_eq(memcmp(mv.route, in.route, in.route_len), 0);
  cr_assert_eq(in.ndata, 0);
  cr_assert_null(tn_in_body(&in, &n1));
  const void *m0 = tn_in_data(&mv, 0, &n1);
  cr_assert_eq(m0, d0);
  cr_assert_eq(n1, 4);
  cr_assert_eq(memcmp(tn_in_data(&mv, 1, &n1), "xy", 2), 0);
  tn_rbuf r;
  const void *bd = tn_in_body(&mv, &n1);
  tn_rbuf_init(&r, bd, n1);
  cr_assert_eq(tn_get_u32(&r), 77);
  tn_in_close(&in);
  tn_in_close(&mv);
  tn_wbuf_free(&body);
  s_pair_close(&p);
}

/* Blobs are sent without a copy, each reference dropped once its frame is
** sent (the adopted bytes handed back once, with the last reference); a
** received frame taken as a blob keeps its bytes in place until the
** blob's last reference goes, and leaves an empty frame behind. */
static atomic_int s_blob_back;
static void s_blob_fn(void *data, void *hint) {
  (void)hint;
  free(data);
  atomic_fetch_add(&s_blob_back, 1);
}

Test(net, blobs_sent_and_taken_without_copies, .timeout = 20) {
  s_pair p;
  tn_in in;
  tr_err err;
  tn_wbuf body = {0};
  atomic_store(&s_blob_back, 0);
  tr_blob *b[2];
  for (int i = 0; i < 2; i++) {
    char *d = malloc(4096);
    memset(d, 'p' + i, 4096);
    b[i] = tr_blob_adopt(d, 4096, s_blob_fn, NULL);
    cr_assert_not_null(b[i]);
  }
  tr_blob *kept = tr_blob_ref(b[0]); /* a second owner, as the store */
  tn_put_u32(&body, 2);
  s_pair_open(&p);
  cr_assert_eq(tn_send_blobs(p.dealer, NULL, 0, TN_PUT, 5, 0, &body, 2, b, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK, "%s", err.msg);
  /* the unshared blob is handed back once sent; the shared one is not */
  double end = tr_now() + 5;
  while (atomic_load(&s_blob_back) < 1 && tr_now() < end) usleep(1000);
  cr_assert_eq(atomic_load(&s_blob_back), 1);
  tr_blob_unref(&kept);
  cr_assert_eq(atomic_load(&s_blob_back), 2);
  size_t n;
  const void *frame = tn_in_data(&in, 1, &n);
  tr_blob *got = tn_in_take_data(&in, 1);
  cr_assert_not_null(got);
  if ((uintptr_t)frame % TN_DATA_ALIGN == 0)
    cr_assert_eq(tr_blob_data(got), frame, "the frame's bytes, not a copy");
  cr_assert_eq(tr_blob_size(got), 4096);
  cr_assert_eq(((char *)tr_blob_data(got))[4095], 'q');
  tn_in_data(&in, 1, &n);
  cr_assert_eq(n, 0, "the taken frame is left empty");
  cr_assert_null(tn_in_take_data(&in, 2));
  tn_in_close(&in); /* the blob outlives the message */
  cr_assert_eq(((char *)tr_blob_data(got))[0], 'q');
  tr_blob_unref(&got);
  cr_assert_null(got);
  tn_wbuf_free(&body);
  s_pair_close(&p);
}

/* ZeroMQ places small frames at any byte of its receive buffer: a frame
** taken as a blob starts on TN_DATA_ALIGN whatever its size and place
** (a double at 4 mod 8 faulted in OpenBLAS's generic x86 gemv), and is
** the frame itself wherever that already did. */
Test(net, taken_frames_start_aligned, .timeout = 20) {
  static const size_t sizes[] = {1, 3, 8, 13, 100, 104, 1000, 4096, 8000, 8192, 70001, 1 << 20};
  enum { NS = sizeof sizes / sizeof sizes[0] };
  s_pair p;
  tn_in in;
  tr_err err;
  void *data[NS];
  size_t len[NS];
  for (int i = 0; i < NS; i++) {
    len[i] = sizes[i];
    data[i] = malloc(sizes[i]);
    for (size_t k = 0; k < sizes[i]; k++) ((unsigned char *)data[i])[k] = (unsigned char)(k * 7 + i);
  }
  s_pair_open(&p);
  for (int round = 0; round < 2; round++) { /* a second message lands elsewhere */
    cr_assert_eq(tn_send(p.dealer, NULL, 0, TN_PUT, 1, 0, NULL, NS, data, len, NULL, NULL, &err),
                 TR_OK, "%s", err.msg);
    cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK, "%s", err.msg);
    for (int i = 0; i < NS; i++) {
      size_t n;
      const void *frame = tn_in_data(&in, i, &n);
      tr_blob *got = tn_in_take_data(&in, i);
      cr_assert_not_null(got);
      cr_assert_eq((uintptr_t)tr_blob_data(got) % TN_DATA_ALIGN, 0, "%zu bytes at %p", sizes[i],
                   tr_blob_data(got));
      /* (a frame of up to 33 bytes lives inside its message, which
      ** moves) */
      if ((uintptr_t)frame % TN_DATA_ALIGN == 0 && sizes[i] > 64)
        cr_assert_eq(tr_blob_data(got), frame, "%zu bytes copied", sizes[i]);
      cr_assert_eq(tr_blob_size(got), sizes[i]);
      cr_assert_eq(memcmp(tr_blob_data(got), data[i], sizes[i]), 0);
      tr_blob_unref(&got);
    }
    tn_in_close(&in);
  }
  for (int i = 0; i < NS; i++) free(data[i]);
  s_pair_close(&p);
}

Test(net, failed_send_frees_every_frame_once, .timeout = 20) {
  void *ctx = zmq_ctx_new();
  void *dealer = s_sock(ctx, ZMQ_DEALER), *router = s_sock(ctx, ZMQ_ROUTER);
  int zero = 0, one = 1;
  void *data[3];
  size_t len[3] = {10, 20, 30};
  tn_wbuf b = {0};
  tr_err err;
  tn_put_u32(&b, 1);

  /* unconnected DEALER, no wait allowed: nothing goes out */
  zmq_setsockopt(dealer, ZMQ_SNDTIMEO, &zero, sizeof zero);
  atomic_store(&s_freed, 0);
  for (int i = 0; i < 3; i++) data[i] = malloc(len[i]);
  cr_assert_eq(tn_send(dealer, NULL, 0, TN_PUT, 1, 0, &b, 3, data, len, s_count_free, &s_freed,
                       &err),
               TR_EIO);
  cr_assert(strstr(err.msg, "timed out"), "%s", err.msg);
  cr_assert_eq(atomic_load(&s_freed), 3);

  /* ROUTER, unknown route, mandatory routing */
  zmq_setsockopt(router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
  atomic_store(&s_freed, 0);
  for (int i = 0; i < 3; i++) data[i] = malloc(len[i]);
  cr_assert_eq(tn_send(router, "nobody", 6, TN_PUT, 1, 0, &b, 3, data, len, s_count_free,
                       &s_freed, &err),
               TR_EIO);
  cr_assert_eq(atomic_load(&s_freed), 3);

  /* refused before sending: bad type, body out of memory */
  atomic_store(&s_freed, 0);
  for (int i = 0; i < 3; i++) data[i] = malloc(len[i]);
  cr_assert_eq(tn_send(dealer, NULL, 0, 0, 1, 0, &b, 3, data, len, s_count_free, &s_freed, &err),
               TR_EINVAL);
  cr_assert_eq(atomic_load(&s_freed), 3);
  b.oom = 1;
  atomic_store(&s_freed, 0);
  for (int i = 0; i < 3; i++) data[i] = malloc(len[i]);
  cr_assert_eq(tn_send(dealer, NULL, 0, TN_PUT, 1, 0, &b, 3, data, len, s_count_free, &s_freed,
                       &err),
               TR_ENOMEM);
  cr_assert_eq(atomic_load(&s_freed), 3);

  tn_wbuf_free(&b);
  zmq_close(dealer);
  zmq_close(router);
  zmq_ctx_term(ctx);
  cr_assert_eq(atomic_load(&s_freed), 3);
}

static void s_on_usr1(int sig) { (void)sig; }

/* Interrupt the given thread with SIGUSR1 after 100 ms. */
static void *s_poke(void *arg) {
  usleep(100 * 1000);
  pthread_kill(*(pthread_t *)arg, SIGUSR1);
  return NULL;
}

Test(net, blocking_recv_interrupted, .timeout = 10) {
  s_pair p;
  tn_in in;
  tr_err err;
  pthread_t self = pthread_self(), th;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = s_on_usr1; /* no SA_RESTART: the blocking receive sees EINTR */
  sigemptyset(&sa.sa_mask);
  cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
  s_pair_open(&p);
  cr_assert_eq(pthread_create(&th, NULL, s_poke, &self), 0);
  cr_assert_eq(tn_recv(p.router, 1, 0, &in, &err), TR_EINTR, "%s", err.msg);
  pthread_join(th, NULL);
  tn_in_close(&in);
  /* nothing was consumed: the socket still works */
  cr_assert_eq(tn_send(p.dealer, NULL, 0, TN_STATS, 5, 0, NULL, 0, NULL, NULL, NULL, NULL, &err), 0);
  cr_assert_eq(tn_recv(p.router, 1, 0, &in, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(in.req, 5);
  tn_in_close(&in);
  s_pair_close(&p);
}

Test(net, error_reply) {
  s_pair p;
  tn_in in;
  tr_err err;
  char msg[64];
  int code;
  uint64_t chunk;
  s_pair_open(&p);
  /* Every code a worker sends reaches the reader as itself: the reader
  ** once took the i32 for a u64 and reported "malformed error reply". */
  static const int codes[] = {TR_ENAME, TR_EIO, TR_ENOMEM, TR_ECORRUPT, TR_EINTR, TR_ENOTFOUND};
  for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++) {
    cr_assert_eq(tn_send_error(p.dealer, NULL, 0, 9, 42, codes[k], k == 3 ? 0xabcull : 0,
                               "no chunk 12"), TR_OK);
    cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK);
    cr_assert_eq(in.type, TN_ERROR);
    cr_assert_eq(in.req, 9);
    cr_assert_eq(in.db, 42);
    cr_assert_eq(tn_get_error(&in, &code, &chunk, msg, sizeof msg), TR_OK);
    cr_assert_eq(code, codes[k]);
    cr_assert_eq(chunk, k == 3 ? 0xabcull : 0);
    cr_assert_str_eq(msg, "no chunk 12");
    tn_in_close(&in);
  }
  /* A code outside the TR_E* range is still a failure. */
  cr_assert_eq(tn_send_error(p.dealer, NULL, 0, 9, 42, 7, 0, "odd"), TR_OK);
  cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK);
  cr_assert_eq(tn_get_error(&in, &code, &chunk, msg, sizeof msg), TR_OK);
  cr_assert_eq(code, TR_ERR);
  tn_in_close(&in);
  /* A body without the chunk field does not decode. */
  tn_wbuf b = {0};
  tn_put_u32(&b, (uint32_t)TR_EIO);
  tn_put_str(&b, "short");
  cr_assert_eq(tn_send(p.dealer, NULL, 0, TN_ERROR, 9, 42, &b, 0, NULL, NULL, NULL, NULL, &err), TR_OK);
  tn_wbuf_free(&b);
  cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK);
  cr_assert_eq(tn_get_error(&in, &code, &chunk, msg, sizeof msg), TR_EINVAL);
  cr_assert_eq(code, TR_EINVAL);
  cr_assert_str_eq(msg, "malformed error reply");
  tn_in_close(&in);
  s_pair_close(&p);
}

/* Each malformed message is followed by a valid one, which must arrive
** intact: the bad one was drained to its end.  The failure still names the
** sender (its routing id), so that a worker can tell peers apart. */
Test(net, malformed_messages_are_drained, .timeout = 30) {
  s_pair p;
  tn_in in;
  tr_err err;
  uint8_t good[TN_HEADER_SIZE], h[TN_HEADER_SIZE];
  static const char *const want[] = {
      "bad magic",    "header of 5 bytes", "unknown protocol version 7", "unknown message type 99",
      "unknown message type 0", "missing body", "header of 0 bytes", "too many frames",
      "oversized body"};
  const int ncase = (int)(sizeof want / sizeof want[0]);
  s_pair_open(&p);

  for (int c = 0; c < ncase; c++) {
    const void *f[3];
    size_t l[3];
    s_header(h, TN_PUT, 5);
    f[0] = h;
    l[0] = TN_HEADER_SIZE;
    f[1] = "body";
    l[1] = 4;
    f[2] = "data";
    l[2] = 4;
    switch (c) {
    case 0: h[1] = 'X'; s_raw(p.dealer, 3, f, l); break;
    case 1: l[0] = 5; s_raw(p.dealer, 3, f, l); break;
    case 2: h[2] = 7; s_raw(p.dealer, 3, f, l); break;
    case 3: h[3] = 99; s_raw(p.dealer, 3, f, l); break;
    case 4: h[3] = 0; s_raw(p.dealer, 2, f, l); break;
    case 5: s_raw(p.dealer, 1, f, l); break;
    case 6: l[0] = 0; s_raw(p.dealer, 1, f, l); break;
    case 7: /* header, body, TN_MAX_FRAMES + 1 data frames */
      cr_assert(zmq_send(p.dealer, h, TN_HEADER_SIZE, ZMQ_SNDMORE) >= 0);
      cr_assert(zmq_send(p.dealer, "", 0, ZMQ_SNDMORE) >= 0);
      for (int i = 0; i <= TN_MAX_FRAMES; i++)
        cr_assert(zmq_send(p.dealer, "x", 1, i < TN_MAX_FRAMES ? ZMQ_SNDMORE : 0) >= 0);
      break;
    case 8: {
      size_t big = TN_MAX_BODY + 1;
      char *body = calloc(1, big);
      f[1] = body;
      l[1] = big;
      s_raw(p.dealer, 3, f, l);
      free(body);
      break;
    }
    }
    s_header(good, TN_HEARTBEAT, 1000 + (uint64_t)c);
    cr_assert(zmq_send(p.dealer, good, sizeof good, ZMQ_SNDMORE) >= 0);
    cr_assert(zmq_send(p.dealer, "", 0, 0) >= 0);

    memset(&err, 0, sizeof err);
    cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_EINVAL, "case %d: accepted", c);
    cr_assert(strstr(err.msg, want[c]), "case %d: message '%s', want '%s'", c, err.msg, want[c]);
    cr_assert_eq(in.ndata, 0);
    tn_in_close(&in); /* harmless after a failure */
    uint8_t route[sizeof in.route];
    size_t route_len = in.route_len;
    memcpy(route, in.route, route_len);
    cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK, "case %d: %s", c, err.msg);
    cr_assert(route_len > 0 && route_len == in.route_len && !memcmp(route, in.route, route_len),
              "case %d: the sender's routing id was lost", c);
    cr_assert_eq(in.type, TN_HEARTBEAT);
    cr_assert_eq(in.req, 1000 + (uint64_t)c, "case %d: not at a message boundary", c);
    cr_assert_eq(in.ndata, 0);
    tn_in_close(&in);
  }
  s_pair_close(&p);
}

Test(net, max_frames_accepted, .timeout = 30) {
  s_pair p;
  tn_in in;
  tr_err err;
  uint8_t h[TN_HEADER_SIZE];
  s_pair_open(&p);
  s_header(h, TN_DATA, 3);
  cr_assert(zmq_send(p.dealer, h, TN_HEADER_SIZE, ZMQ_SNDMORE) >= 0);
  cr_assert(zmq_send(p.dealer, "", 0, ZMQ_SNDMORE) >= 0);
  for (int i = 0; i < TN_MAX_FRAMES; i++) {
    uint32_t v = (uint32_t)i;
    cr_assert(zmq_send(p.dealer, &v, 4, i + 1 < TN_MAX_FRAMES ? ZMQ_SNDMORE : 0) >= 0);
  }
  cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 10000), TR_OK, "%s", err.msg);
  cr_assert_eq(in.ndata, TN_MAX_FRAMES);
  for (int i = 0; i < TN_MAX_FRAMES; i++) {
    size_t n;
    const void *d = tn_in_data(&in, i, &n);
    uint32_t v;
    cr_assert_eq(n, 4);
    memcpy(&v, d, 4);
    cr_assert_eq(v, (uint32_t)i, "frame %d moved wrongly", i);
  }
  tn_in_close(&in);
  s_pair_close(&p);
}

Test(net, dealer_side_header_checks) {
  /* Unrouted (DEALER) receive: the first frame is the header itself. */
  s_pair p;
  tn_in in;
  tr_err err;
  uint8_t h[TN_HEADER_SIZE];
  s_pair_open(&p);
  tn_wbuf b = {0};
  cr_assert_eq(tn_send(p.dealer, NULL, 0, TN_HELLO, 1, 0, &b, 0, NULL, NULL, NULL, NULL, &err), 0);
  cr_assert_eq(s_recv_within(p.router, 1, &in, &err, 5000), TR_OK);
  s_header(h, TN_HELLO_OK, 2);
  h[0] = 't';
  cr_assert(zmq_send(p.router, in.route, in.route_len, ZMQ_SNDMORE) >= 0);
  cr_assert(zmq_send(p.router, h, sizeof h, ZMQ_SNDMORE) >= 0);
  cr_assert(zmq_send(p.router, "", 0, 0) >= 0);
  h[0] = 'T';
  cr_assert_eq(tn_send(p.router, in.route, in.route_len, TN_HELLO_OK, 3, 0, &b, 0, NULL, NULL, NULL,
                       NULL, &err),
               0);
  tn_in_close(&in);
  cr_assert_eq(s_recv_within(p.dealer, 0, &in, &err, 5000), TR_EINVAL);
  cr_assert(strstr(err.msg, "bad magic"), "%s", err.msg);
  cr_assert_eq(s_recv_within(p.dealer, 0, &in, &err, 5000), TR_OK);
  cr_assert_eq(in.req, 3);
  tn_in_close(&in);
  s_pair_close(&p);
}

/* ---- keys and CURVE ---------------------------------------------------------- */

static void s_tmpdir(char *dir, size_t cap) {
  snprintf(dir, cap, "%s", "/tmp/tradb_test_net_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void s_rmkeys(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/cluster.key", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/cluster.pub", dir);
  unlink(path);
  rmdir(dir);
}

static void s_write(const char *dir, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/cluster.key", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
  cr_assert_eq(chmod(path, 0600), 0);
}

Test(net, gen_and_load_keys) {
  char base[64], dir[128], path[256];
  tn_keys k, k2;
  tr_err err;
  struct stat st;
  s_tmpdir(base, sizeof base);
  snprintf(dir, sizeof dir, "%s/keys", base); /* created by tn_gen_keys */
  cr_assert_eq(tn_gen_keys(dir, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(stat(dir, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700);
  snprintf(path, sizeof path, "%s/cluster.key", dir);
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600);
  snprintf(path, sizeof path, "%s/cluster.pub", dir);
  cr_assert_eq(stat(path, &st), 0);

  cr_assert_eq(tn_gen_keys(dir, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "keys already exist in"), "%s", err.msg);

  cr_assert_eq(tn_load_keys(dir, &k, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(k.on, 1);
  cr_assert_eq(strlen(k.pub), 40);
  cr_assert_eq(strlen(k.sec), 40);
  char derived[41];
  cr_assert_eq(zmq_curve_public(derived, k.sec), 0);
  cr_assert_str_eq(derived, k.pub);

  /* cluster.pub holds the same public key */
  char line[128];
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  cr_assert_not_null(fgets(line, sizeof line, f));
  fclose(f);
  cr_assert_eq(strncmp(line, "public ", 7), 0);
  cr_assert_eq(strncmp(line + 7, k.pub, 40), 0);

  cr_assert_eq(tn_load_keys(NULL, &k2, &err), TR_OK);
  cr_assert_eq(k2.on, 0);

  s_rmkeys(dir);
  rmdir(base);
}

Test(net, load_keys_errors) {
  char dir[64], text[256], other[64];
  tn_keys k, good;
  tr_err err;
  s_tmpdir(dir, sizeof dir);
  cr_assert_neq(tn_load_keys("/nonexistent/tradb/keys", &k, &err), TR_OK);
  cr_assert(strstr(err.msg, "/nonexistent/tradb/keys"), "%s", err.msg);
  cr_assert_eq(k.on, 0);

  cr_assert_neq(tn_load_keys(dir, &k, &err), TR_OK); /* no cluster.key */
  cr_assert(strstr(err.msg, "cluster.key"), "%s", err.msg);

  s_write(dir, "hello\n");
  cr_assert_eq(tn_load_keys(dir, &k, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "bad format"), "%s", err.msg);

  s_tmpdir(other, sizeof other);
  cr_assert_eq(tn_gen_keys(other, &err), TR_OK);
  cr_assert_eq(tn_load_keys(other, &good, &err), TR_OK);

  snprintf(text, sizeof text, "public %s\n", good.pub); /* no secret */
  s_write(dir, text);
  cr_assert_eq(tn_load_keys(dir, &k, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "missing secret"), "%s", err.msg);

  snprintf(text, sizeof text, "public %.39s\nsecret %s\n", good.pub, good.sec); /* 39 chars */
  s_write(dir, text);
  cr_assert_eq(tn_load_keys(dir, &k, &err), TR_EINVAL);

  snprintf(text, sizeof text, "public %s\nsecret %s\n", good.pub, good.sec);
  text[7] = '"'; /* not a Z85 character */
  s_write(dir, text);
  cr_assert_eq(tn_load_keys(dir, &k, &err), TR_EINVAL);

  char pub2[41], sec2[41];
  cr_assert_eq(zmq_curve_keypair(pub2, sec2), 0);
  snprintf(text, sizeof text, "public %s\nsecret %s\n", good.pub, sec2); /* mismatched */
  s_write(dir, text);
  cr_assert_eq(tn_load_keys(dir, &k, &err), TR_EINVAL);
  cr_assert(strstr(err.msg, "does not match"), "%s", err.msg);
  cr_assert_eq(k.on, 0);

  snprintf(text, sizeof text, "secret %s\r\npublic %s", good.sec, good.pub); /* order, CRLF */
  s_write(dir, text);
  cr_assert_eq(tn_load_keys(dir, &k, &err), TR_OK, "%s", err.msg);
  cr_assert_str_eq(k.pub, good.pub);
  cr_assert_str_eq(k.sec, good.sec);

  s_rmkeys(dir);
  s_rmkeys(other);
}

/* A cluster.key that its group or others may read or write is refused,
** with a message saying how to fix it. */
Test(net, load_keys_mode) {
  char dir[64], path[128];
  tn_keys k;
  tr_err err;
  struct {
    mode_t mode;
    const char *want; /* NULL: accepted */
  } cases[] = {{0600, NULL},
               {0400, NULL},
               {0644, "is readable by others (mode 0644): chmod 600 it"},
               {0640, "is readable by its group (mode 0640): chmod 600 it"},
               {0604, "is readable by others (mode 0604)"},
               {0620, "is writable by its group (mode 0620)"},
               {0602, "is writable by others (mode 0602)"},
               {0660, "is readable by its group (mode 0660)"},
               {0606, "is readable by others (mode 0606)"},
               {0646, "is readable by others (mode 0646)"},
               {0710, NULL}, /* execute bits let no one read or write it */
               {0601, NULL}};
  s_tmpdir(dir, sizeof dir);
  cr_assert_eq(tn_gen_keys(dir, &err), TR_OK, "%s", err.msg);
  snprintf(path, sizeof path, "%s/cluster.key", dir);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cr_assert_eq(chmod(path, cases[i].mode), 0);
    int rc = tn_load_keys(dir, &k, &err);
    if (!cases[i].want) {
      cr_assert_eq(rc, TR_OK, "mode %o: %s", (unsigned)cases[i].mode, err.msg);
      cr_assert_eq(k.on, 1);
      continue;
    }
    cr_assert_eq(rc, TR_EINVAL, "mode %o accepted", (unsigned)cases[i].mode);
    cr_assert_eq(k.on, 0);
    cr_assert(strstr(err.msg, path), "%s", err.msg);
    cr_assert(strstr(err.msg, cases[i].want), "mode %o: %s", (unsigned)cases[i].mode, err.msg);
  }
  s_rmkeys(dir);
}

/* Send a HELLO from client and report whether the server got it within ms. */
static int s_gets_through(void *server, void *client, uint64_t req, int ms) {
  tn_in in;
  tr_err err;
  int zero = 0, rc;
  zmq_setsockopt(client, ZMQ_SNDTIMEO, &zero, sizeof zero);
  /* A DEALER queues before the handshake completes; a refused one may
  ** report EAGAIN instead: either way nothing may reach the server. */
  tn_send(client, NULL, 0, TN_HELLO, req, 0, NULL, 0, NULL, NULL, NULL, NULL, &err);
  rc = s_recv_within(server, 1, &in, &err, ms);
  if (rc == TR_OK) {
    cr_assert_eq(in.req, req);
    tn_in_close(&in);
    return 1;
  }
  cr_assert_eq(rc, TR_ENOTFOUND, "%s", err.msg);
  return 0;
}

Test(net, curve_admits_only_cluster_members, .timeout = 30) {
  char dir[64], odir[64], ep[256];
  tn_keys k, other;
  tr_err err;
  tn_in in;
  void *ctx = zmq_ctx_new();
  s_tmpdir(dir, sizeof dir);
  s_tmpdir(odir, sizeof odir);
  cr_assert_eq(tn_gen_keys(dir, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tn_load_keys(dir, &k, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tn_gen_keys(odir, &err), TR_OK);
  cr_assert_eq(tn_load_keys(odir, &other, &err), TR_OK);

  void *server = s_sock(ctx, ZMQ_ROUTER);
  /* fail closed: no ZAP handler yet */
  cr_assert_eq(tn_secure_server(server, &k, &err), TR_EINVAL);
  cr_assert_eq(tn_zap_start(ctx, &k, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tn_zap_start(ctx, &k, &err), TR_EINVAL); /* only one */
  cr_assert_eq(tn_secure_server(server, &k, &err), TR_OK, "%s", err.msg);
  s_bind(server, ep, sizeof ep);

  /* plain client */
  void *plain = s_sock(ctx, ZMQ_DEALER);
  cr_assert_eq(zmq_connect(plain, ep), 0);
  cr_assert_eq(s_gets_through(server, plain, 1, 500), 0, "plain client got through");

  /* a client with its own pair that knows the cluster public key: CURVE
  ** succeeds, ZAP must refuse it */
  void *stranger = s_sock(ctx, ZMQ_DEALER);
  cr_assert_eq(zmq_setsockopt(stranger, ZMQ_CURVE_SERVERKEY, k.pub, 40), 0);
  cr_assert_eq(zmq_setsockopt(stranger, ZMQ_CURVE_PUBLICKEY, other.pub, 40), 0);
  cr_assert_eq(zmq_setsockopt(stranger, ZMQ_CURVE_SECRETKEY, other.sec, 40), 0);
  cr_assert_eq(zmq_connect(stranger, ep), 0);
  cr_assert_eq(s_gets_through(server, stranger, 2, 500), 0, "foreign key got through");

  /* another cluster's members altogether */
  void *foreign = s_sock(ctx, ZMQ_DEALER);
  cr_assert_eq(tn_secure_client(foreign, &other, &err), TR_OK);
  cr_assert_eq(zmq_connect(foreign, ep), 0);
  cr_assert_eq(s_gets_through(server, foreign, 3, 500), 0, "other cluster got through");

  /* a member still gets served, both ways */
  void *member = s_sock(ctx, ZMQ_DEALER);
  cr_assert_eq(tn_secure_client(member, &k, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(zmq_connect(member, ep), 0);
  int t = 5000;
  zmq_setsockopt(member, ZMQ_SNDTIMEO, &t, sizeof t);
  cr_assert_eq(tn_send(member, NULL, 0, TN_HELLO, 4, 0, NULL, 0, NULL, NULL, NULL, NULL, &err), 0,
               "%s", err.msg);
  cr_assert_eq(s_recv_within(server, 1, &in, &err, 5000), TR_OK, "member refused: %s", err.msg);
  cr_assert_eq(in.req, 4);
  cr_assert_eq(tn_send(server, in.route, in.route_len, TN_HELLO_OK, 4, 0, NULL, 0, NULL, NULL, NULL,
                       NULL, &err),
               0);
  tn_in_close(&in);
  cr_assert_eq(s_recv_within(member, 0, &in, &err, 5000), TR_OK, "%s", err.msg);
  cr_assert_eq(in.type, TN_HELLO_OK);
  tn_in_close(&in);
  /* and nothing from the refused ones trickled in meanwhile */
  cr_assert_eq(tn_recv(server, 1, ZMQ_DONTWAIT, &in, &err), TR_ENOTFOUND);

  zmq_close(plain);
  zmq_close(stranger);
  zmq_close(foreign);
  zmq_close(member);
  zmq_close(server);
  tn_zap_stop();
  tn_zap_stop(); /* idempotent */
  zmq_ctx_term(ctx);
  s_rmkeys(dir);
  s_rmkeys(odir);
}

Test(net, zap_restart_and_term_order, .timeout = 20) {
  char dir[64];
  tn_keys k;
  tr_err err;
  s_tmpdir(dir, sizeof dir);
  cr_assert_eq(tn_gen_keys(dir, &err), TR_OK);
  cr_assert_eq(tn_load_keys(dir, &k, &err), TR_OK);

  void *ctx = zmq_ctx_new();
  cr_assert_eq(tn_zap_start(ctx, &k, &err), TR_OK, "%s", err.msg);
  tn_zap_stop();
  cr_assert_eq(tn_zap_start(ctx, &k, &err), TR_OK, "restart: %s", err.msg);
  tn_zap_stop();
  cr_assert_eq(tn_zap_start(ctx, &k, &err), TR_OK, "%s", err.msg);
  zmq_ctx_term(ctx); /* with the handler running: must not hang */
  tn_zap_stop();     /* after termination: must not hang or crash */

  /* keys off: start / secure are no-ops */
  tn_keys off = {0};
  ctx = zmq_ctx_new();
  void *s = s_sock(ctx, ZMQ_ROUTER);
  cr_assert_eq(tn_zap_start(ctx, &off, &err), TR_OK);
  cr_assert_eq(tn_secure_server(s, &off, &err), TR_OK);
  cr_assert_eq(tn_secure_client(s, &off, &err), TR_OK);
  int mech = -1;
  size_t ml = sizeof mech;
  zmq_getsockopt(s, ZMQ_MECHANISM, &mech, &ml);
  cr_assert_eq(mech, ZMQ_NULL);
  tn_zap_stop();
  zmq_close(s);
  zmq_ctx_term(ctx);
  s_rmkeys(dir);
}

/* ---- endpoints ------------------------------------------------------------------ */

Test(net, endpoint_is_local) {
  static const char *const local[] = {
      "ipc:///tmp/tradb.sock", "inproc://w1",       "tcp://127.0.0.1:5555", "tcp://127.1.2.3:*",
      "tcp://localhost:7000",  "tcp://LOCALHOST:1", "tcp://[::1]:5555",     "tcp://[::ffff:127.0.0.1]:9"};
  static const char *const remote[] = {
      "tcp://*:5555",          "tcp://0.0.0.0:5555", "tcp://10.0.0.1:5555", "tcp://eth0:5555",
      "tcp://[::]:5555",       "tcp://[::2]:1",      "tcp://128.0.0.1:1",   "tcp://127.example.com:1",
      "tcp://localhost.evil:1", "tcp://127.0.0.1;10.0.0.1:5555", "pgm://eth0;239.1.1.1:5555",
      "tcp://:5555",           "",                   "tcp://[::1",          "udp://127.0.0.1:1"};
  for (size_t i = 0; i < sizeof local / sizeof *local; i++)
    cr_assert_eq(tn_endpoint_is_local(local[i]), 1, "%s", local[i]);
  for (size_t i = 0; i < sizeof remote / sizeof *remote; i++)
    cr_assert_eq(tn_endpoint_is_local(remote[i]), 0, "%s", remote[i]);
  cr_assert_eq(tn_endpoint_is_local(NULL), 0);
}
