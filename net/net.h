/*
** net/net.h - the wire protocol between the coordinator (the shell's
** engine) and `tradb --worker` processes, and between workers.
**
** Transport: ZeroMQ.  Every worker binds one ROUTER socket at its endpoint;
** the coordinator and the other workers connect DEALER sockets to it.  A
** message is a multipart ZeroMQ message:
**
**   [routing id]   only as seen on a ROUTER socket (tn_recv strips it)
**   header         24 bytes: magic "TR", version, type, flags (u16),
**                  reserved (u16), request id (u64), database id (u64),
**                  all little-endian
**   body           a field sequence written with tn_wbuf, read with tn_rbuf
**   data...        zero or more raw payload frames (chunk bytes), sent and
**                  received without copying where ZeroMQ allows
**
** A message with a bad magic, an unknown version or type, a truncated or
** oversized frame, or a body that does not decode is rejected by tn_recv /
** the caller with a TR_E* code and a message; it never crashes the peer.
**
** Databases: every message names the database it is about (the id in
** its catalog, tc_db_id), so one worker serves several databases and
** keeps their chunks apart; a worker's replies and pushes to other
** workers carry the id of the request they answer.  0 is "no database"
** (HELLO, HEARTBEAT).
**
** Security: with a key directory (tradb --gen-keys DIR) every socket uses
** CURVE with the cluster key pair: a peer without it completes no
** handshake and receives nothing.
*/
#ifndef TRADB_NET_H
#define TRADB_NET_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>
#include "util/util.h"

#define TN_PROTOCOL_VERSION 4
#define TN_HEADER_SIZE 24
#define TN_MAX_BODY (16u << 20)    /* largest body frame accepted */
#define TN_MAX_DATA (1u << 30)     /* largest data frame accepted */
#define TN_MAX_FRAMES 4096         /* most data frames in one message */
#define TN_HEARTBEAT_MS 500        /* heartbeat interval, both ways */
#define TN_LIVENESS 3              /* silent intervals before "down" */
#define TN_LIVENESS_S (TN_LIVENESS * TN_HEARTBEAT_MS / 1000.0) /* the same, in seconds */

/* A wait loop turns at least once a heartbeat interval (its poll's
** timeout) and does little work a turn: a turn that took longer means the
** process did not run (stopped, its machine suspended or starved), and
** the other side's silence meanwhile is not theirs.  Returns how long it
** did not run (0 for an ordinary turn); *turn, when the last turn ended,
** moves to now. */
static inline double tn_paused(double *turn, double now) {
  double gap = now - *turn;
  *turn = now;
  return gap > TN_HEARTBEAT_MS / 1000.0 ? gap : 0;
}

/* Message types.  Requests carry a request id that the reply echoes. */
typedef enum tn_type {
  TN_HELLO = 1,  /* coord -> worker: body {str coordinator} */
  TN_HELLO_OK,   /* worker -> coord: body {str endpoint, u32 threads, str backend,
                    u64 incarnation, u64 memory, str file system (its
                    data's: "boot id:device", "" if unknown), u64 bytes
                    free there (UINT64_MAX if unknown)} */
  TN_HEARTBEAT,  /* either way; any message counts as life; a worker echoes
                    a heartbeat whose request id is not 0.  Body: empty from
                    a coordinator; {u64 incarnation} from a worker: random
                    per worker process, so a coordinator sees a worker that
                    restarted (and lost the requests it held) at once;
                    then, while a TASK of that coordinator runs, {u64
                    request id, u64 output chunks made} (progress) */
  TN_PUT,        /* -> worker: store chunks; body {u32 n, n x chunk meta, [u8 keep]},
                    data n frames; keep (a tc_keep, default TC_KEEP_FILE) says
                    how the worker's store keeps them */
  TN_PUT_OK,     /* reply: body {u32 n} */
  TN_GET,        /* coord -> worker: body {u32 n, n x u64 chunk id}; */
  TN_DATA,       /* reply: body {u32 n, n x chunk meta}, data n frames */
  TN_SEND,       /* coord -> worker: push chunks to peers; body {u32 n, n x
                    (u64 chunk id, str peer endpoint), [u8 keep]}: the peers
                    keep them as keep says (as in PUT) */
  TN_SEND_OK,    /* reply once every peer confirmed: body {u64 bytes sent} */
  TN_TASK,       /* coord -> worker: run kernel tasks; body: engine-encoded */
  TN_TASK_OK,    /* reply: body engine-encoded results (chunk metas, stats) */
  TN_SYNC,       /* coord -> worker: make chunks durable; body {u32 n, n x u64,
                    [u8 all]}: all 1, also every chunk held in memory only */
  TN_SYNC_OK,    /* reply: body {u32 n} */
  TN_DROP,       /* coord -> worker: forget chunks; body {u32 n, n x u64} */
  TN_DROP_OK,    /* reply: body {u32 n} */
  TN_INVENTORY,  /* coord -> worker: what the catalog lists on it (at open
                    and rejoin); body {u32 n, n x u64 chunk id}; the worker
                    drops nothing */
  TN_INVENTORY_OK, /* reply: body {u32 n, n x u64 listed ids it does not
                    hold (lost or set aside as damaged), u32 k, k x chunk
                    meta: what it holds that is not listed (leftovers, or
                    copies the catalog forgot: the coordinator adopts or
                    drops each)} */
  TN_STATS,      /* coord -> worker: body empty */
  TN_STATS_OK,   /* reply: body {u64 tasks, u64 chunks, u64 bytes held,
                    u64 bytes sent, u64 bytes received, str backend,
                    u64 bytes free on its data's file system} */
  TN_ERROR,      /* reply to any request: body {i32 code, str message,
                    u64 chunk id the failure is about (a chunk that failed
                    its checksum), 0 if none} */
  TN_CANCEL,     /* coord -> worker: stop the running task and drop queued
                    ones (the statement was cancelled); no reply */
  TN_PULL,       /* worker -> worker on the same machine, both listening on
                    ipc://: store a chunk by copying it out of the sender's
                    memory (process_vm_readv) instead of a data frame; body
                    {chunk meta, u8 keep, u32 sender pid, u64 address}.  The
                    sender keeps those bytes unchanged until the reply */
  TN_PULL_OK,    /* reply: body {u64 chunk id}; a TN_ERROR reply names the
                    chunk, and the sender then PUTs it instead */
  TN_TYPE_END    /* one past the last type */
} tn_type;

/* Name of a message type ("PUT"), "?" if unknown. */
const char *tn_type_name(int type);

/* ---- Bodies: bounds-checked little-endian field sequences ---------------- */

/* A growing write buffer.  Writers never fail: an allocation failure sets
** oom, which tn_send reports. */
typedef struct tn_wbuf {
  uint8_t *p;  /* bytes */
  size_t n;    /* used */
  size_t cap;  /* allocated */
  int oom;     /* an allocation failed */
} tn_wbuf;

void tn_wbuf_free(tn_wbuf *b);
void tn_put_u8(tn_wbuf *b, uint8_t v);
void tn_put_u32(tn_wbuf *b, uint32_t v);
void tn_put_u64(tn_wbuf *b, uint64_t v);
void tn_put_i64(tn_wbuf *b, int64_t v);
void tn_put_f64(tn_wbuf *b, double v);
void tn_put_bytes(tn_wbuf *b, const void *p, size_t n); /* u32 length + bytes */
void tn_put_str(tn_wbuf *b, const char *s);             /* as bytes, no NUL */

/* A read cursor.  A read past the end sets bad and returns zeros; check
** tn_rbuf_ok() once after reading every field. */
typedef struct tn_rbuf {
  const uint8_t *p; /* bytes */
  size_t n;         /* length */
  size_t off;       /* next byte */
  int bad;          /* a read ran past the end or a value was invalid */
} tn_rbuf;

void tn_rbuf_init(tn_rbuf *r, const void *p, size_t n);
uint8_t tn_get_u8(tn_rbuf *r);
uint32_t tn_get_u32(tn_rbuf *r);
uint64_t tn_get_u64(tn_rbuf *r);
int64_t tn_get_i64(tn_rbuf *r);
double tn_get_f64(tn_rbuf *r);
/* Bytes field: returns a pointer into the buffer and sets *n (no copy). */
const void *tn_get_bytes(tn_rbuf *r, size_t *n);
/* String field copied into out (cap bytes, NUL-terminated); a longer string
** or one holding a NUL sets bad. */
void tn_get_str(tn_rbuf *r, char *out, size_t cap);
/* Count field for a list whose items take at least item_min bytes each: a
** count the remaining bytes cannot hold sets bad and returns 0. */
uint32_t tn_get_count(tn_rbuf *r, size_t item_min);
/* TR_OK if no read failed and every byte was consumed. */
int tn_rbuf_ok(const tn_rbuf *r);

/* ---- Chunk metadata, as carried by PUT / DATA / TASK_OK ------------------ */

typedef struct tn_chunk {
  uint64_t id;       /* cluster-wide chunk id (assigned by the coordinator) */
  uint8_t dtype;     /* tr_dtype */
  uint64_t nbytes;   /* payload bytes */
  uint64_t checksum; /* XXH3_64bits of the payload */
} tn_chunk;

void tn_put_chunk(tn_wbuf *b, const tn_chunk *c);
void tn_get_chunk(tn_rbuf *r, tn_chunk *c); /* checks dtype is known */

/* ---- Messages ------------------------------------------------------------ */

/* A received message.  Data frames stay ZeroMQ messages so their bytes are
** not copied; they live until tn_in_close(). */
typedef struct tn_in {
  uint8_t route[256];   /* routing id (ROUTER sockets), else empty */
  size_t route_len;     /* its length; 0 on DEALER sockets */
  int type;             /* tn_type */
  uint64_t req;         /* request id */
  uint64_t db;          /* database id (0: none) */
  zmq_msg_t body;       /* body frame */
  int ndata;            /* data frames */
  zmq_msg_t *data;      /* ndata frames (heap array) */
  int open_;            /* private: body initialised */
} tn_in;

/* Receive one message from sock (ROUTER when routed != 0).  Blocks unless
** flags has ZMQ_DONTWAIT.  Returns TR_OK; TR_ENOTFOUND when nothing is
** waiting (ZMQ_DONTWAIT); TR_EINTR when interrupted by a signal; TR_EINVAL
** with a message in err for a malformed message (already fully read and
** dropped: the caller logs it and carries on; in->route still says who
** sent it); TR_EIO for socket errors. */
int tn_recv(void *sock, int routed, int flags, tn_in *in, tr_err *err);
void tn_in_close(tn_in *in);
/* Move src's frames into dst (uninitialised), leaving src empty: hands a
** received message to another thread without copying its data. */
void tn_in_move(tn_in *dst, tn_in *src);

/* Body and data frame accessors.  A data frame's bytes lie where ZeroMQ
** placed them, at any alignment: to read a chunk's elements, take it with
** tn_in_take_data. */
const void *tn_in_body(tn_in *in, size_t *n);
const void *tn_in_data(tn_in *in, int i, size_t *n);

/*
** Send a message: [route] header body data...  route may be NULL (DEALER);
** db is the database the message is about (0: none).
** data[i] (len[i] bytes) are sent without copying: free_fn(data[i], hint)
** is called by ZeroMQ once it is done with each (free_fn NULL: the bytes
** are copied at once and the caller keeps them).  Returns TR_OK or TR_EIO.
*/
typedef void(tn_free_fn)(void *data, void *hint);
int tn_send(void *sock, const void *route, size_t route_len, int type, uint64_t req,
            uint64_t db, const tn_wbuf *body, int ndata, void *const *data, const size_t *len,
            tn_free_fn *free_fn, void *hint, tr_err *err);
/* Send n data frames from blobs: each blob's reference (the caller's) is
** dropped once its frame is sent or the message fails, as with tn_send's
** free_fn. */
int tn_send_blobs(void *sock, const void *route, size_t route_len, int type, uint64_t req,
                  uint64_t db, const tn_wbuf *body, int n, tr_blob *const *blobs, tr_err *err);
/* Data frame i of a received message as a blob whose bytes start on a
** multiple of TN_DATA_ALIGN (every element type's alignment): the frame
** itself, moved out of in (which keeps an empty one), where ZeroMQ placed
** it so, else a copy.  NULL if out of memory. */
#define TN_DATA_ALIGN 8
tr_blob *tn_in_take_data(tn_in *in, int i);
/* Reply with TN_ERROR {code, message, chunk} (chunk: the id of a chunk
** that failed its checksum, else 0). */
int tn_send_error(void *sock, const void *route, size_t route_len, uint64_t req, uint64_t db,
                  int code, uint64_t chunk, const char *msg);
/* Decode a TN_ERROR reply: *code (a TR_E* value; TR_ERR for one that is
** not), *chunk and the message (cap bytes).  TR_EINVAL if it does not
** decode, with msg saying so. */
int tn_get_error(tn_in *in, int *code, uint64_t *chunk, char *msg, size_t cap);

/* ---- Keys -------------------------------------------------------------------- */

typedef struct tn_keys {
  int on;               /* CURVE in use */
  char pub[41];         /* cluster public key, Z85 */
  char sec[41];         /* cluster secret key, Z85 */
} tn_keys;

/* Make a cluster key pair in directory dir (created, mode 0700), files
** cluster.key (secret, 0600) and cluster.pub. */
int tn_gen_keys(const char *dir, tr_err *err);
/* Load the key pair from dir (dir NULL: keys->on = 0). */
int tn_load_keys(const char *dir, tn_keys *keys, tr_err *err);
/* Configure a socket before bind (server) or connect (client).  With keys
** off these do nothing.  A server also rejects clients whose public key is
** not the cluster key (ZAP handler started by tn_zap_start). */
int tn_secure_server(void *sock, const tn_keys *keys, tr_err *err);
int tn_secure_client(void *sock, const tn_keys *keys, tr_err *err);
/* Start / stop the ZAP authentication handler in ctx (only with keys on):
** accepts CURVE clients holding the cluster public key, refuses others. */
int tn_zap_start(void *ctx, const tn_keys *keys, tr_err *err);
void tn_zap_stop(void);

/* True if endpoint binds only to loopback (tcp://127.x, tcp://localhost,
** tcp://[::1]) or is ipc:// or inproc://. */
int tn_endpoint_is_local(const char *endpoint);

#endif /* TRADB_NET_H */
