/*
** worker/worker_int.h - private to worker/: a worker's state, its jobs
** and what its files share.  `tradb --worker` is a site of the
** implementation algebra.
**
** A worker holds chunks in its store (catalog/ tc_store: checksummed
** files, durable on SYNC), runs the kernel tasks it is sent (tx_node_run
** over its own chunks), and pushes chunks straight to other workers when
** told to (SEND): the coordinator never relays chunk data between workers.
** A worker listening on ipc:// makes its big chunks in shared memory
** (util/blob.c), and its ipc:// peers map them (TN_PULL) rather than copy.
**
** Threads: the main thread owns every ZeroMQ socket and never blocks on
** work and never touches the disk: it answers HELLO / HEARTBEAT / STATS
** itself, queues TASK and SYNC for the task thread, which posts the reply
** back through an inproc pair, and hands PUT, GET, SEND, DROP and INVENTORY
** (their frames moved, not copied) to the store thread, which writes,
** reads or removes their chunks and wakes the main loop through the push
** pipe to send what it read.  So a worker keeps heartbeating while it computes,
** and while its disk is slow: with hundreds of megabytes of dirty pages
** the kernel throttles a writer for seconds, longer than the
** coordinator's liveness window.  Peers are reached through one DEALER
** socket each, opened on first use; a SEND is answered once every peer
** confirmed its PUT.
**
** Files: worker.c (the main loop: requests routed, replies sent, start and
** stop), jobs.c (the task thread: TASK and SYNC), io.c (the store thread:
** PUT, GET, SEND, DROP, INVENTORY), peers.c (chunks pushed to other
** workers and their confirmations), dbs.c (a database's store), base.c
** (logging, replies, the job queue).
**
** Databases: every request names its database (the id of its catalog),
** and each database's chunks live in a store of their own,
** DATA/db-<16 hex digits>, opened on first use: one worker serves several
** databases, and a coordinator sees and drops only its own database's
** chunks.  Chunk files in DATA itself (the layout before per-database
** stores) are served to no one until a database's INVENTORY lists them:
** they then move into that database's store.  The worker never drops a
** chunk on its own; the coordinator decides from what INVENTORY reports.
**
** Failures: a malformed message is logged and dropped; a coordinator that
** goes away is simply no longer answered, and a new one may say HELLO.
** A chunk that fails its checksum when read is set aside by the store
** and the error reply names it, so the coordinator can forget that
** replica, repair it from a good one and retry.
**
** Cancellation: a TASK carries a cancel token of its own, which its
** kernels poll.  A CANCEL stops the running task of the coordinator that
** sent it (through that token) and drops its queued TASKs and SYNCs; a
** coordinator silent for the liveness window (its shell was killed or cut
** off) gets the same, so no work outlives the statement it is for.
** SIGTERM and SIGINT cancel the running task and stop the worker.
*/
#ifndef TRADB_WORKER_WORKER_INT_H
#define TRADB_WORKER_WORKER_INT_H

#include "worker/worker.h"
#include "exec/exec.h"
#include "catalog/catalog.h"
#include "net/net.h"

#include <pthread.h>
#include <stdatomic.h>

struct wi_job;

#define S_MAX_PEERS 64

#define S_MAX_DBS 64          /* databases one worker serves at once */

/* A database none of whose coordinators has sent anything for this long,
** and with no job of it queued or running, has its store closed when a
** new database needs the slot: what it holds only in memory is written
** first, and a later request opens it again.  A statement running sends
** heartbeats every TN_HEARTBEAT_MS, so its store, and the intermediates
** in it between its phases, stay; between statements nothing of one is
** held, so a shell waiting at its prompt may find its store closed, and
** its next statement opens it again. */
#define S_DB_IDLE_S 60.0

#define S_SEND_TIMEOUT_S 30.0 /* a peer that has not confirmed by then fails the SEND */

#define S_TRIM_IDLE_S 2.0     /* idle this long, a worker returns free memory */

/* A peer sending garbage (a scanner, a tradb of another protocol version)
** must not fill the log at the rate it sends: a peer's first malformed
** message is logged with its reason, the ones after it are only counted,
** and the count is logged once the interval since that line has passed. */
#define S_DROP_PEERS 32 /* peers followed at once; a new one evicts the stalest */

typedef struct wi_drop {
  uint8_t route[256]; /* the peer's routing id */
  size_t route_len;   /* its length */
  int used;           /* slot in use */
  double since;       /* when this peer's last line was logged */
  int64_t count;      /* dropped since then, not yet logged */
  char why[128];      /* the reason for the last of them */
} wi_drop;

/* The peers followed, and how often a count is logged. */
typedef struct wi_drops {
  wi_drop d[S_DROP_PEERS]; /* the peers */
  double every;           /* seconds; TRADB_TEST_DROP_LOG_S for tests */
} wi_drops;

/* A SEND (or a task's replica push) waiting for its peers' confirmations. */
typedef struct wi_pending {
  struct wi_job *job;        /* replica push: the task it belongs to; NULL: a SEND */
  uint64_t my_req;          /* request id used towards the peers */
  uint8_t route[256];       /* who asked */
  size_t route_len;         /* its length */
  uint64_t req;             /* their request id */
  uint64_t db;              /* database the chunks belong to */
  int waiting;              /* confirmations still due */
  uint16_t peer_waiting[S_MAX_PEERS]; /* of them, per peer socket */
  uint64_t bytes;           /* bytes sent */
  double deadline;          /* when to give up */
  int failed;               /* a peer answered with an error */
  char why[sizeof(((tr_err *)0)->msg) + 300]; /* that error */
  struct wi_pull *pulls, **pulls_end; /* its chunks peers are copying, in
                                         the order asked */
  int ready;                /* confirmed, failed or late: on the ready list */
  struct wi_pending *prev, *next; /* the list of them all */
  struct wi_pending *ready_next;  /* the ready list */
} wi_pending;

/* A chunk a peer on this machine is mapping or copying out of this
** worker's memory (TN_PULL): its bytes stay referenced, so unchanged (and
** a memfd's descriptor still names them), until the peer answers; if it
** can neither map nor copy them, they are sent as a PUT instead. */
typedef struct wi_pull {
  int peer;                 /* the peer socket */
  uint64_t db;              /* database */
  tn_chunk c;               /* id, dtype, size, checksum */
  tr_blob *data;            /* its bytes (a reference) */
  int keep;                 /* how the peer keeps it (a tc_keep) */
  struct wi_pull *next;      /* its request's list */
} wi_pull;

/* A chunk read from the store to be sent (GET, SEND). */
typedef struct wi_out_chunk {
  tn_chunk c;               /* id, dtype, size, checksum */
  tr_blob *data;            /* its bytes (a reference), until handed to ZeroMQ */
  char ep[TC_ENDPOINT_MAX]; /* SEND: the peer it goes to */
} wi_out_chunk;

/* A job for the task or store thread, and its reply. */
typedef struct wi_job {
  int type;                 /* TN_TASK, TN_SYNC, or TN_PUT / TN_GET / TN_SEND */
  tn_in in;                 /* store jobs: the request's frames (moved) */
  uint64_t recv;            /* TN_PUT: bytes stored */
  wi_out_chunk *out;         /* TN_GET, TN_SEND: the chunks read */
  uint32_t nout;            /* their number */
  int keep;                 /* TN_SEND: how the peers keep them (a tc_keep) */
  uint8_t route[256];       /* requester */
  size_t route_len;         /* its length */
  uint64_t req;             /* request id */
  uint64_t db;              /* database (the request's) */
  tc_store *store;          /* its store (NULL: it has none here yet;
                               wi_job_store sets it) */
  struct wi_worker *w;      /* the worker it is for (wi_job_for) */
  int slot;                 /* with store: its slot in w->dbs, which
                               stays put while the job holds it */
  void *body;               /* request body (copied) */
  size_t body_len;          /* its length */
  int rtype;                /* reply type (TN_ERROR: code and msg) */
  tn_wbuf reply;            /* reply body */
  atomic_int pushing;       /* replica pushes not yet confirmed: raised by
                               kernel threads, lowered by the main loop */
  int push_failed;          /* a replica push failed */
  char push_why[sizeof(((tr_err *)0)->msg) + 300]; /* why */
  int code;                 /* TN_ERROR: status */
  char msg[sizeof(((tr_err *)0)->msg) + 300]; /* TN_ERROR: message */
  _Atomic uint64_t bad;     /* TN_ERROR: a chunk that failed its checksum */
  tr_cancel cancel;         /* TN_TASK: set to stop it (its kernels poll) */
  char why[80];             /* why it was cancelled (wi_cancel_from, under mu):
                               its TN_ERROR says so, not just "interrupted" */
  _Atomic int64_t made;     /* TN_TASK: output chunks stored so far, which
                               heartbeats report (progress) */
  double heard;             /* TN_TASK, TN_SYNC: when its coordinator last
                               sent anything (under mu) */
  int waits_known;          /* TN_TASK: waits below read from its body */
  uint64_t *waits;          /* a combine's partials still on their way when
                               it was sent (tx_task.in_wait): it is set
                               aside until they are all stored */
  uint32_t nwaits;          /* their number */
  struct wi_job *next;       /* queue */
} wi_job;

typedef struct wi_worker {
  const tw_config *cfg; /* options */
  const tk_backend *kt;        /* kernels */
  int threads;                 /* kernel threads */
  tc_store *root;              /* DATA itself: holds the directory lock, and
                                  chunk files of the layout before
                                  per-database stores */
  pthread_mutex_t db_mu;       /* held to open or close a store, and to
                                  change the table below */
  pthread_mutex_t heard_mu;    /* guards users and heard, and is also held
                                  to change the table: the main loop takes
                                  only this one, never waiting on a store
                                  being opened (it reads every chunk file) */
  int ndbs;                    /* databases open (slots with an id) */
  int max_dbs;                 /* at most this many (S_MAX_DBS) */
  tc_mem_pool *pool;           /* the memory budget their stores share */
  double db_idle_s;            /* idle this long, closed if need be (S_DB_IDLE_S) */
  struct {
    uint64_t id;               /* database id (0: a free slot) */
    tc_store *store;           /* its store, DATA/db-<id> */
    int users;                 /* jobs holding it (wi_job_store) */
    double heard;              /* when a request for it last came */
  } dbs[S_MAX_DBS];
  tn_keys keys;                /* CURVE keys */
  void *ctx;                   /* ZeroMQ context */
  void *router;                /* our endpoint */
  void *notify_rx;             /* task thread -> main: "a reply is ready" */
  int npeers;                  /* peer sockets */
  char peer_ep[S_MAX_PEERS][TC_ENDPOINT_MAX]; /* their endpoints */
  void *peer[S_MAX_PEERS];     /* DEALER sockets */
  /* SENDs and replica pushes in flight: a list, an index by request id
  ** (open addressing, a power of two slots; a reply finds its request at
  ** once however many are in flight) and those ready to settle. */
  wi_pending *pending;
  wi_pending **pend_slot;
  size_t pend_cap, npend;
  wi_pending *ready;
  double late_check;           /* when wi_settle next looks for late ones */
  int pull_local;              /* listens on ipc://: chunks move between it
                                  and its ipc:// peers by TN_PULL */
  uint8_t put_only[S_MAX_PEERS]; /* a pull by that peer failed: PUT to it */
  int refuse_pulls;            /* TRADB_TEST_NO_PULL: refuse every PULL (tests) */
  int map_failed;              /* a pull's shared memory could not be
                                  mapped (logged once; store thread) */
  uint64_t next_req;           /* request ids towards peers */
  uint64_t incarnation;        /* random per process: in HELLO_OK and heartbeats */
  char fs[64];                 /* the file system DATA is on, as HELLO_OK
                                  says it: "boot id:device", "" if unknown */
  uint8_t coord[256];          /* last coordinator's route, for heartbeats */
  size_t coord_len;            /* its length (0: none yet) */
  /* counters (.workers) */
  uint64_t tasks, bytes_sent, bytes_recv;
  /* task thread */
  pthread_t tid;               /* the thread */
  pthread_mutex_t mu;          /* guards the queues */
  pthread_cond_t cv;           /* work arrived or stop */
  wi_job *todo, *todo_tail;     /* jobs waiting */
  wi_job *running;              /* the job the task thread runs, or NULL */
  wi_job *parked;               /* combines set aside until their partials
                                   are stored; only the task thread adds or
                                   removes one, CANCEL sets its token */
  int recheck;                  /* something arrived or was cancelled since
                                   the parked jobs were last looked at */
  wi_job *done;                 /* replies ready */
  int quit;                    /* stop the task and store threads */
  /* store thread: PUT, GET, SEND, DROP and INVENTORY, so a slow disk does not
  ** stall the main loop */
  pthread_t io_tid;            /* the thread */
  int io_started;              /* it runs */
  pthread_cond_t io_cv;        /* a store job arrived, or stop */
  int slow_store_ms;           /* TRADB_TEST_SLOW_STORE_MS: a slow disk, for tests */
  int set_writeback;           /* TRADB_TEST_WRITEBACK_S given: each store's */
  double writeback_s;          /* background write delay (< 0: none), for tests */
  int trace;                   /* TRADB_TEST_TRACE: log every request (tests) */
  wi_job *io_todo, *io_tail;    /* store jobs waiting (under mu) */
  /* chunks a peer sent (PUT, PULL): a task reading a copy still on its way
  ** (tx_task.in_wait) waits on arrived for arrivals to change */
  uint64_t arrivals;            /* chunks stored from peers (under mu) */
  pthread_cond_t arrived;       /* arrivals changed */
  /* replica pushes: kernel threads queue output chunks, the main loop
  ** sends them (it owns the sockets); a pipe wakes it up */
  struct wi_push *pushq;        /* queued pushes (under mu) */
  int wake[2];                 /* pipe: kernel threads -> main loop */
  wi_job *held;                 /* finished tasks waiting for their pushes */
  double last_busy;            /* when the last request came or work ended */
  int trimmed;                 /* free memory given back since then */
  wi_drops drops;               /* malformed messages, per peer */
} wi_worker;

/* How wi_store_for finds a database's store. */
typedef enum wi_open {
  S_OPEN_NONE,   /* only one already open (the main thread: opening reads
                    every chunk file) */
  S_OPEN_EXISTS, /* open it if its directory exists */
  S_OPEN_CREATE  /* open or create it (a request that writes) */
} wi_open;

/* An output chunk to push to the task's replica workers. */
typedef struct wi_push {
  tn_chunk c;                  /* the chunk: id, dtype, size, checksum */
  tr_blob *data;               /* its bytes, shared with the store: the
                                  main loop sends them without reading it */
  wi_job *job;                  /* task it belongs to (and its database) */
  int nrep;                    /* peers */
  char rep[TC_MAX_REPLICAS][TC_ENDPOINT_MAX]; /* their endpoints */
  int keep[TC_MAX_REPLICAS];   /* how each keeps it (a tc_keep) */
  struct wi_push *next;         /* queue */
} wi_push;

/* ---- base.c -------------------------------------------------------------- */

/* Log lines say they come from worker ep. */
void wi_log_as(const char *ep);
void wi_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Log a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) and the
** stack before the worker dies of it; after wi_log_as. */
void wi_log_fatal_signals(void);
/* One malformed message from in's sender (tn_recv leaves in->route). */
void wi_drop_note(wi_drops *D, const tn_in *in, const char *why, double now);
/* Log the counts whose interval has passed (all of them when all != 0), and
** forget the peers quiet for a whole interval. */
void wi_drop_tick(wi_drops *D, double now, int all);
/* Note activity: the worker is not idle. */
void wi_busy(wi_worker *w);
/* The memory the worker keeps within: --memory, or its default share. */
int64_t wi_memory(wi_worker *w);
/* Bytes free to this worker on the file system of its data (statvfs),
** UINT64_MAX when it cannot tell: HELLO_OK, TASK_OK and STATS_OK say it,
** so that a shell refuses an output its workers' disks cannot hold
** (dist/sites.c, di_disk_room). */
uint64_t wi_disk_free(const wi_worker *w);

/* Give free heap memory back to the system once the worker has been idle
** for S_TRIM_IDLE_S and holds more of it than tr_heap_reserve: between
** statements the heap is kept (the next one reuses it), but a worker left
** idle should not hold its peak. */
void wi_trim_when_idle(wi_worker *w);
/* Fault in the heap kept free between statements, in the background,
** while no tradb process on this machine works; a worker whose chunks are
** in shared memory fills its pool instead, with memory of the sizes it
** made lately (tr_blob_pool_wanted), for as long as it serves. */
void wi_warm_heap(wi_worker *w);
void wi_warm_heap_stop(void);   /* a warm heap stops where it is */
void wi_warm_heap_report(void); /* logs how far it got */
int wi_reply(wi_worker *w, const uint8_t *route, size_t rl, int type, uint64_t req,
                   uint64_t db, const tn_wbuf *body, int ndata, void *const *data,
                   const size_t *len, tn_free_fn *fr);
void wi_fail_job(wi_job *j, int code, const char *msg);
void wi_job_free(wi_job *j);
/* A zeroed job answering request in (its type, route and request id), or
** NULL after answering ENOMEM. */
wi_job *wi_job_for(wi_worker *w, const tn_in *in);
/* Append j to the queue (*head, *tail) and wake the thread waiting on cv. */
void wi_enqueue(wi_worker *w, wi_job **head, wi_job **tail, pthread_cond_t *cv, wi_job *j);
/* A request's body as a read cursor, and a clear error buffer. */
void wi_request_body(tn_in *in, tn_rbuf *r, tr_err *err);

/* ---- dbs.c --------------------------------------------------------------- */

/* The store of database db, DATA/db-<id>, found or opened as `how` says.
** NULL with err set when there is none or it cannot be opened.  With
** S_MAX_DBS open, the one idle longest (S_DB_IDLE_S, no job holding it) is
** closed to make room.  The pointer stays valid while the request that
** asked is handled (the database was heard from just now); a job that
** keeps it takes it through wi_job_store instead. */
tc_store *wi_store_for(wi_worker *w, uint64_t db, wi_open how, tr_err *err);
/* Close database db's store *s (if any), logging what it wrote; why is
** appended to the line. */
void wi_store_close(uint64_t db, tc_store **s, const char *why);
/* The store of job j's database, as wi_store_for finds it, held for the
** job until wi_job_free (j->store and j->slot; taken once). */
tc_store *wi_job_store(wi_job *j, wi_open how, tr_err *err);
/* A request for database db came (the main loop, on every request). */
void wi_db_heard(wi_worker *w, uint64_t db);
/* Chunk id (of bytes) of the job's store, as a blob reference the caller
** drops; a checksum failure names the chunk in the job's error reply. */
int wi_job_get(wi_job *j, uint64_t id, size_t bytes, tr_blob **out, tr_err *err);

/* ---- jobs.c -------------------------------------------------------------- */

void *wi_task_thread(void *arg);
/* Hand a TASK or SYNC to the task thread, its body copied. */
void wi_queue(wi_worker *w, tn_in *in);
/* Any message from route is a sign of life of the coordinator of the jobs
** it sent (heartbeats included). */
void wi_heard(wi_worker *w, const uint8_t *route, size_t len);
/* Append to heartbeat body hb the TASK running for route, if any: its
** request id and the output chunks it has made (the shell's progress). */
void wi_task_progress(wi_worker *w, const uint8_t *route, size_t len, tn_wbuf *hb);
/* Cancel the task-thread jobs from route: the running one through its
** token (its kernels stop within a poll), the queued ones answered
** TR_EINTR and dropped.  Logs one line saying why; a no-op when there is
** nothing of route's to cancel and quiet is set. */
void wi_cancel_from(wi_worker *w, const uint8_t *route, size_t len, int quiet,
                          const char *why);
/* Cancel the jobs of coordinators silent for the liveness window (their
** shell was killed or cut off): nobody will take the result.  The worker
** stays up for the next coordinator. */
void wi_cancel_lost(wi_worker *w);
/* The worker did not run for gap seconds (stopped, or its machine
** suspended or starved): the coordinators' silence over that time is not
** theirs, so it is not counted (each job's heard moves on by gap). */
void wi_paused(wi_worker *w, double gap);

/* ---- io.c ---------------------------------------------------------------- */

void *wi_store_thread(void *arg);
/* Hand a store request (PUT, PULL, GET, SEND, DROP, INVENTORY) to the store thread,
** its frames moved, not copied. */
void wi_queue_store(wi_worker *w, tn_in *in);

/* ---- peers.c ------------------------------------------------------------- */

/* SEND, second half (main loop): PUT each chunk the store thread read to
** its peer; the SEND is answered (wi_settle) once every peer confirmed. */
void wi_send_out(wi_worker *w, wi_job *j);
/* Answer SENDs whose peers all confirmed (or failed, or timed out). */
void wi_settle(wi_worker *w);
/* Send the queued replica pushes: one PUT per chunk and peer, each
** sending the bytes the task's store keeps (a blob reference per peer,
** dropped once sent), kept by the peers as the task's outputs are. */
void wi_send_pushes(wi_worker *w);
/* A reply from a peer (to one of our PUTs or PULLs). */
void wi_on_peer_reply(wi_worker *w, int peer, tn_in *in);
/* Free every request in flight (at exit), and the chunks peers were to
** copy for them. */
void wi_pending_free_all(wi_worker *w);

#endif /* TRADB_WORKER_WORKER_INT_H */
