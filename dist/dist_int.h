/*
** dist/dist_int.h - private to dist/: the coordinator's handle, the
** workers as it sees them, and the request phases its files share.
*/
#ifndef TRADB_DIST_DIST_INT_H
#define TRADB_DIST_DIST_INT_H

#include "dist/dist.h"
#include "net/net.h"
#include "sched/sched.h"

/* A worker as the coordinator sees it. */
typedef struct td_site {
  int64_t id;                    /* catalog site id */
  char ep[TC_ENDPOINT_MAX];      /* endpoint */
  void *sock;                    /* DEALER socket to it */
  int up;                        /* answered within the liveness window */
  double last_seen;              /* last message from it (tr_now) */
  int pid;                       /* local worker process, 0 if remote */
  void *mon;                     /* PAIR socket reading its socket's
                                    handshake failures (CURVE refused) */
  char refused[160];             /* why its handshake failed ("" if not) */
  uint64_t incarnation;          /* its process, as HELLO_OK and heartbeats say */
  int restarted;                 /* a new incarnation answered: what the old one
                                    held for us (requests, scratch) is lost */
  int threads;                   /* kernel threads it has (HELLO_OK) */
  /* measured by the coordinator, reset per statement (EXPLAIN ANALYZE) */
  int64_t tasks;                 /* tasks run */
  int64_t floats_in, floats_out; /* floats received / sent */
  double busy_s;                 /* time in its tasks */
  char kernels[16];              /* backend its last task ran on */
  uint64_t h2d, d2h;             /* bytes its tasks copied to / from a GPU */
  double copy_s;                 /* time of those copies */
  /* its running task, as its heartbeats say (progress) */
  uint64_t task_req;             /* request id of the task (0: none) */
  int64_t task_made;             /* output chunks it has made */
  int64_t peak_rss;              /* the largest resident memory its task
                                    replies reported (bytes) */
  int64_t memory;                /* its --memory as HELLO_OK said (0: not said) */
  char fs[64];                   /* the file system its data is on, as
                                    HELLO_OK said ("": unknown, its own) */
  int disk_said;                 /* disk_free holds what it last said: */
  uint64_t disk_free;            /* bytes free on its data's file system
                                    (HELLO_OK, TASK_OK, STATS_OK) */
  int write_trouble;             /* its last task reply said its background
                                    writes fail (the notice was given) */
  int local;                     /* 1 + its number among the local workers
                                    (w<local - 1>), 0 if remote */
  int answered;                  /* its process answered a HELLO or a ping: a
                                    local one that exits before it has is
                                    not started again (it would fail alike) */
  int restarts;                  /* times its local process was started again */
  char died[128];                /* how its local process ended ("died of
                                    signal 9 (Killed)"), once it has */
} td_site;

/* The coordinator of one database. */
struct td_cluster {
  tc_db *db;              /* the database's catalog (the engine's) */
  uint64_t db_id;         /* tc_db_id(db): every message carries it */
  const tr_cancel *interrupt; /* the engine's token: Ctrl-C */
  void *zctx;             /* ZeroMQ context */
  tn_keys keys;           /* CURVE keys */
  int nsites;             /* workers */
  td_site *sites;         /* them */
  uint64_t next_req;      /* request ids */
  int phase_open;          /* a di_phase is open (one at a time) */
  int lp_failed_said;      /* m-SCT's LP failed once: the notice was given */
  int topo_said;           /* a graph too large for m-SCT or m-ETF: the notice was given */
  char workdir[4200];     /* where local workers keep data and logs */
  /* How local workers are started: the open's settings (its strings
  ** copied) and how many share this machine, so that one that died can be
  ** started again as it was (di_ping). */
  td_config local_cfg;
  int local_of;
  /* Replicas: a chunk a worker reported damaged in the last failed phase
  ** (site index and chunk id, for the retry), and whether some chunks may
  ** have fewer replicas than the setting (td_maintain's work). */
  int bad_site;
  uint64_t bad_chunk;
  int repair;
  /* Copies workers lost (damaged, missing): a repair puts the chunk back
  ** on the same worker when it can, so placement stays as it was. */
  struct td_lost { uint64_t chunk; int64_t site; } *lost;
  int64_t nlost, caplost;
  double last_ping;       /* when the workers were last asked who is alive */
  char *notice;           /* warnings for the engine (td_take_notice) */
  /* Progress (td_set_progress): units of the statement's finished phases */
  td_progress_fn *progress;
  void *progress_ctx;
  int64_t prog_done, prog_total;
  double cpu_user, cpu_sys; /* workers' CPU in our tasks (td_worker_cpu) */
  /* Chunks the catalog forgot in commits not yet synced to disk (see
  ** di_forget_later): they stay on the workers until the catalog that
  ** forgot them is durable, since a crash of this machine could bring it
  ** back to them. */
  uint64_t *forgot;
  int64_t nforgot, capforgot;
  uint64_t forgot_bytes;
  /* Chunks finished statements left to drop (di_drop_later): ids and the
  ** catalog id of the site holding each (-1: every site). */
  uint64_t *pend;
  int64_t *pend_site;
  int64_t npend, cappend;
  double forgot_s;         /* DI_FORGOT_S, or a test's */
  double reap_s;           /* S_REAP_S, or a test's */
  double live_s;           /* the liveness window: a worker silent this long
                              is down (TN_LIVENESS heartbeats), or a test's */
  uint64_t repair_bytes;   /* copied per round of repair (di_repair):
                              DI_REPAIR_BYTES, or a test's */
  /* Workers lost while the coordinator waited on them (di_site_lost), and
  ** of those the local ones that died of a fault of their own (SIGSEGV and
  ** the like): what tells the engine that a statement which failed may
  ** run again on the workers left (td_losses). */
  uint64_t losses, faults;
};

/* Add a line to the notices. */
void td_notice(td_cluster *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- Requests ------------------------------------------------------------ */

/* One outstanding request of a phase. */
typedef struct di_out {
  int site;      /* site index */
  int type;      /* request type */
  int done;      /* reply received */
  tn_in reply;   /* the reply (when done) */
  int64_t units; /* the work it stands for (progress): a task's output
                    chunks, set by its sender; 1 by default */
  size_t expect;  /* bytes its reply brings, where large (a chunk read):
                    the site may be silent while they arrive */
  int taken;      /* handed to the phase's on_reply */
} di_out;

/* A phase: requests sent, replies awaited together. */
typedef struct di_phase {
  td_cluster *c;  /* engine */
  uint64_t base; /* request id of out[0] */
  int n, cap;    /* requests */
  di_out *out;    /* them */
  int watch_all;  /* workers pass data among themselves in this phase: any
                     live worker that goes silent fails it, not only those
                     with requests (a peer's death would otherwise surface
                     only as a survivor's timeout naming the survivor) */
  int patient;    /* no limit on the wait while the workers answer (a
                     shell closing waits for its local workers' writes) */
  /* Called in the wait with each reply as it arrives (its out's taken
  ** set), so that the shell works on it while the others are on their
  ** way; an error ends the wait with it. */
  int (*on_reply)(struct di_phase *ph, int k, void *ctx, tr_err *err);
  void *on_reply_ctx;
  double paused_s; /* the longest this shell did not run in the wait
                      (stopped, its machine suspended or starved) */
} di_phase;

/* A copy to make: chunk id from site index src to site index dst. */
typedef struct di_copy {
  uint64_t id;     /* chunk */
  uint64_t bytes;  /* its size */
  int src, dst;    /* site indexes */
} di_copy;

/* ---- rpc.c --------------------------------------------------------------- */

void di_phase_init(di_phase *ph, td_cluster *c);
void di_phase_free(di_phase *ph);
/* Send a request to site s as part of the phase. */
int di_request(di_phase *ph, int s, int type, const tn_wbuf *body, int ndata,
                     void *const *data, const size_t *len, tn_free_fn *fr, tr_err *err);
/* Read what the sites sent; replies of ph (may be NULL) are stored. */
void di_drain(td_cluster *c, di_phase *ph, int timeout_ms);
int di_wait(di_phase *ph, tr_err *err);
int di_wait_ex(di_phase *ph, int tolerant, tr_err *err);
/* Whether a site last heard at last_seen is down at now (silent past c's
** liveness window), for a wait that began at start and a reply of
** `expect` bytes due from it. */
int di_silent(const td_cluster *c, double now, double last_seen, double start, size_t expect);
/* Reply i's body as a read cursor. */
void di_reply_body(di_phase *ph, int i, tn_rbuf *r);
/* Reply i, a TN_ERROR, as err ("worker EP: its message"); returns its
** code, and *chunk the chunk it names (0: none). */
int di_reply_error(di_phase *ph, int i, uint64_t *chunk, tr_err *err);
/* Tell site `only` (-1: every live site) to drop ids, chunks the catalog
** no longer lists (best effort: cleanup never fails a statement). */
void di_drop_ids(td_cluster *c, int only, const uint64_t *ids, int64_t n);
/* Tell every live site s to drop its own ids, own[s][0..nown[s]) for s <
** nsites (own NULL: none), and ids[0..n) too where `only` is -1 or s: one
** round trip for them all.  `catalog`: some of them are chunks the
** catalog forgot (not only a statement's temporaries), so the catalog is
** synced first.  The chunks forgotten by unsynced commits go along when
** the catalog is synced, or when they are due (di_flush). */
void di_drop_each(td_cluster *c, int only, const uint64_t *ids, int64_t n, uint64_t *const *own,
                  const int64_t *nown, int nsites, int catalog);
/* A commit not synced holds back the chunks it forgot until this many
** bytes of them wait (the workers' memory), or the oldest waits this long
** (what a crash of the coordinator's machine can undo). */
#define DI_FORGOT_BYTES ((uint64_t)16 << 20)
#define DI_FORGOT_S 1.0
/* Chunk ids[0..n) (old_bytes in all) were forgotten by a commit not yet
** synced: they are dropped with the next drop once the catalog is synced.
** Takes ids (malloc'd). */
void di_forget_later(td_cluster *c, uint64_t *ids, int64_t n, uint64_t old_bytes);
/* Chunks a finished statement leaves to drop, ids[0..n): its scratch,
** and the version its output replaced once the catalog is synced; site[i]
** the index of the site holding ids[i], -1 for every site.  They go with
** the next ping's heartbeats (di_ping), in no round trip of their own, or
** at the close (di_drop_pending); the ping waits for their answers, so
** the next statement's tasks find them gone. */
void di_drop_later(td_cluster *c, const uint64_t *ids, const int *site, int64_t n);
/* The pending drops' requests, added to phase ph (the list emptied). */
void di_pending_requests(di_phase *ph);
/* Drop the pending chunks now, waiting for the workers. */
void di_drop_pending(td_cluster *c);
/* Sync the catalog and drop the chunks it forgot: `force`, or when they
** are due (DI_FORGOT_BYTES of them, or the oldest commit DI_FORGOT_S old). */
void di_flush(td_cluster *c, int force);
/* SYNC every chunk of locs on the sites holding it. */
int di_sync(td_cluster *c, const tc_chunkloc *locs, int64_t n, tr_err *err);

/* Send the SEND batches (entries {u64 id, str peer} per source site),
** the peers to keep the chunks as keep says (a tc_keep), and wait for all
** of them; frees the batches. */
int di_flush_sends(td_cluster *c, tn_wbuf *sends, uint32_t *nsend, int keep, int rc, tr_err *err);
/* The same batches as requests of the open phase ph, not waited for: a
** task of ph that reads what they send waits for it (tx_task.in_wait).
** Frees the batches; returns rc, or the error of a request not sent. */
int di_add_sends(di_phase *ph, tn_wbuf *sends, uint32_t *nsend, int keep, int rc, tr_err *err);

/* ---- sites.c ------------------------------------------------------------- */

/* Live sites, in index order; returns how many. */
int di_up_sites(const td_cluster *c, int *up);
/* The bytes free a worker's reply said (UINT64_MAX: it cannot tell),
** kept in st. */
void di_disk_said(td_site *st, uint64_t room);
/* Site s, a local worker, has exited: reap it (it is down, its pid 0)
** and return TR_EIO with how it ended (a signal, an exit status) and
** where its log is (di_local_died).  TR_OK while it runs, and for a
** remote site. */
int di_local_exited(td_cluster *c, int s, tr_err *err);
/* TR_EIO with how site s's local process ended, as di_local_exited said. */
int di_local_died(const td_cluster *c, int s, tr_err *err);
/* Site s is taken for down while a phase waits on it (silent, restarted,
** exited): counted in losses, and in faults too when fault is set. */
void di_site_lost(td_cluster *c, int s, int fault);
int di_site_index(const td_cluster *c, int64_t id);
/* Does loc list site_id as a holder? */
int di_has(const tc_chunkloc *loc, int64_t site_id);
/* Replication factor in effect: the setting (default 2), at most m. */
int di_replication(td_cluster *c, int m);
/* SET synchronous = full: a statement's outputs are durable on their
** workers' disks before it commits (else normal, the default: in memory on
** at least two workers, on disk within seconds; see the README). */
int di_sync_full(td_cluster *c);
/* How holder k of a chunk held by sites ids[0..n) (catalog site ids, in
** the order the copies are made) keeps its copy, a tc_keep; full is
** di_sync_full's answer.  In its file, to be synced before the commit,
** with fewer than 2 copies (one copy in memory dies with its worker), and
** under synchronous = full for the first holder on each file system (as
** HELLO_OK names it); else in memory, written in the background.  A later
** copy on the same file system adds nothing a crash could not take: the
** machine's crash spares the synced copy, and the disk's loss takes both,
** synced or not; syncing it doubled the statement's wait on the disk. */
int di_keep_at(const td_cluster *c, int full, const int64_t *ids, int n, int k);
/* The live site that serves chunk loc of t (reads it for others, and
** drives the joins that keep t in place), or -1.  The catalog lists a
** chunk's holders by site id, so taking the first would put every chunk
** of a tensor held everywhere (replication = sites, the embedded
** default) on the lowest site, and every plan driven by it would run on
** one worker.  The holders take turns by the chunk's row of the grid
** instead: such a tensor is served row-block partitioned, the
** partitioning under which a product needs no partial sums. */
int di_holder(const td_cluster *c, const tr_tensor *t, const tc_chunkloc *loc);
/* The error for a chunk no live site holds: names tensor and chunk key. */
int di_unreadable(const tr_tensor *t, const tc_chunkloc *loc, const char *why, tr_err *err);

/* ---- replicas.c ---------------------------------------------------------- */

#define DI_REPAIR_BYTES ((uint64_t)256 << 20) /* copied per round of repair */

/* Remember that site id lost its copy of chunk (for di_repair). */
void di_note_lost(td_cluster *c, int64_t site, uint64_t chunk);
/* After a commit: say when its chunks got fewer replicas than wanted
** (workers were down), and mark them for repair. */
void di_note_replicas(td_cluster *c, const tr_tensor *meta, const tc_chunkloc *locs, int64_t n);
/* Make copies c[0..n): each source pushes its chunks to their
** destinations (SEND), the destinations make them durable (SYNC), and
** only then does the catalog record the new replicas.  A source whose
** copy turns out damaged is forgotten as a holder (the failure is
** returned; a later round copies from another). */
int di_copy_chunks(td_cluster *c, const di_copy *cp, int64_t n, tr_err *err);
/* Repair site s's copy of chunk id, which failed its checksum there: the
** catalog forgets it, and a live holder copies a good one back. */
int di_fix_bad(td_cluster *c, int s, uint64_t id, tr_err *err);
/* One round of restoring replication: chunks with fewer replicas than
** the setting (at most the live workers) get copies from a live holder on
** the live workers that lack them, spread by chunk.  Returns 1 if chunks
** are left for another round, 0 if none (chunks no live worker holds wait
** for a holder to return), or a TR_E* code. */
int di_repair(td_cluster *c, tr_err *err);

/* ---- cluster.c ----------------------------------------------------------- */
/* Whether `bytes` more of output, stored with the replication in effect,
** can fit the disks of the workers up: TR_OK, or TR_EIO naming what
** (a tensor's name, or "the block's outputs") and the sizes.  The free
** space is counted once a file system (as each worker names its own in
** HELLO_OK): a local worker's read from its data directory now, a remote
** one's as it last said, asked again before a refusal rests on it; a
** worker that never said makes it TR_OK (it cannot tell).  A statement
** far too large for the disks is refused before it starts, instead of
** filling them (and failing on the full disk after, with every other
** program writing there failing too). */
int di_disk_room(td_cluster *c, double bytes, const char *what, tr_err *err);

/* Before a statement: which workers are alive now?  Ping every worker and
** wait (at most the liveness window) for the ones believed up; heartbeats
** queued while the shell was idle prove nothing, an echoed ping does.  A
** worker that answers after being down has rejoined: its inventory is
** reconciled with the catalog, and the replicas chunks lack may now be
** made (te_maintain). */
void di_ping(td_cluster *c);

/* ---- io.c ---------------------------------------------------------------- */

/* Make a written version visible: sync, commit, drop the old version; or,
** with keep given, hand the old version's chunk ids (*keep, *nkeep; the
** caller frees them) to a caller that drops them with its own in one
** round trip.  A version none of whose chunks had to be synced (SET
** synchronous = normal, two replicas or more) commits unsynced, and its
** old chunks wait in di_forget_later (*nkeep = 0). */
int di_commit(td_cluster *c, const tr_tensor *meta, tc_chunkloc *locs, int64_t n, uint64_t **keep,
              int64_t *nkeep, tr_err *err);

/* ---- graph.c ------------------------------------------------------------- */

#define DI_SCHED_MAX_TASKS 5000 /* tasks m-SCT and m-ETF place (placing takes
                                   seconds beyond: m-ETF is quadratic); m-TOPO
                                   places a larger graph */
#define DI_SCHED_MAX_GRAPH_TASKS 200000 /* tasks one graph may have */
#define DI_SCHED_MAX_EDGES 2000000      /* edges one graph may have (24 bytes
                                           each, copied once a wave) */

/* A plan as chunk tasks and their placement. */
typedef struct di_sched {
  int which;                  /* TD_SCHED_* */
  tm_algo asked;              /* the sched/ algorithm `which` names */
  tm_algo algo;               /* the one that places: asked, or m-TOPO for a
                                 graph larger than asked places */
  int ntasks;                 /* tasks: [0, nsrc) the stored chunks the plan reads
                                 (pinned, time 0), then node k's output chunk
                                 lin is task base[k] + lin */
  int nsrc;                   /* stored chunks' tasks */
  int base[TA_MAX_NODES + 1]; /* first task of each node */
  tm_task *tasks;             /* [ntasks] */
  char (*names)[48];          /* [ntasks] "tensor#chunk" */
  int nedges;                 /* edges */
  tm_edge *edges;             /* [nedges] */
  int m;                      /* workers (live-site positions) */
  int64_t cap[TO_MAX_SITES];  /* memory of each */
  tm_schedule *sched;         /* the placement (all waves) */
  int8_t *site_of;            /* [ntasks] site position of each task */
  int waves;                  /* waves the memory made (1: none) */
  int oversize;               /* tasks larger than the smallest worker */
  double lp_seconds;          /* m-SCT's LP time limit (past it: m-ETF) */
} di_sched;

/* Whether plan p's task graph (stored chunks included) is within
** DI_SCHED_MAX_GRAPH_TASKS tasks and DI_SCHED_MAX_EDGES edges. */
int di_sched_sizable(const ta_plan *p);
/* Build plan p's task graph (pl: where its stored inputs are, site-position
** masks) and place it with `which` (not STATEMENT; the LP may take
** lp_seconds) on m workers of memory cap[], task times by the weights w;
** *s is freed with di_sched_free. */
int di_sched_place(di_sched *s, const ta_plan *p, const to_placed *pl, const tl_weights *w, int which,
                   double lp_seconds, int m, const int64_t *cap, tr_err *err);
/* The optimizer's plan's working set on each of the m workers: the most,
** over its nodes, of the operand chunks a worker takes in or keeps for the
** node and the output chunks it computes (bytes, into peak[]). */
void di_plan_peak(const ta_plan *p, const to_opt *opt, int m, int64_t *peak);
void di_sched_free(di_sched *s);
/* A task as measured: what it made, the worker (its position among the
** live ones) and when, seconds after the run's first task was sent. */
typedef struct di_event {
  char what[96]; /* the operator's relation ("C (SUM)") */
  int site;      /* worker position */
  double start;  /* sent */
  double dur;    /* the time the worker reported for it */
} di_event;

/* EXPLAIN's schedule per worker (eps: their endpoints), text or a JSON field. */
void di_sched_text(const di_sched *s, const char *const *eps, tr_text *out, int json);
/* The schedule as Chrome trace JSON, and the nev measured tasks ev (after
** EXPLAIN ANALYZE; 0 for none) as a process per worker beside the
** predicted ones; the caller frees *out. */
int di_sched_trace(const di_sched *s, const di_event *ev, int nev, char **out, tr_err *err);

#endif /* TRADB_DIST_DIST_INT_H */
