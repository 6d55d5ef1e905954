/*
** engine/engine_int.h - private to engine/ (and, until the coordinator has
** a handle of its own, dist/): the engine handle.
*/
#ifndef TRADB_ENGINE_INT_H
#define TRADB_ENGINE_INT_H

#include "engine/engine.h"
#include "compile/compile.h"
#include "net/net.h"

/* A worker as the coordinator sees it (dist.c). */
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
  /* measured by the coordinator, reset per statement (EXPLAIN ANALYZE) */
  int64_t tasks;                 /* tasks run */
  int64_t floats_in, floats_out; /* floats received / sent */
  double busy_s;                 /* time in its tasks */
  char kernels[16];              /* backend its last task ran on */
  uint64_t h2d, d2h;             /* bytes its tasks copied to / from a GPU */
  double copy_s;                 /* time of those copies */
} td_site;

/* The engine handle. */
struct te_engine {
  tc_db *db;              /* catalog */
  uint64_t db_id;         /* tc_db_id(db): every message carries it */
  const tk_backend *kt;   /* kernel table (coordinator-side work) */
  int threads;            /* threads for local chunk loops */
  size_t cache_budget;    /* bytes of chunks kept in memory per plan */
  void *zctx;             /* ZeroMQ context */
  tn_keys keys;           /* CURVE keys */
  int nsites;             /* workers */
  td_site *sites;         /* them */
  uint64_t next_req;      /* request ids */
  tr_cancel interrupt;    /* set by te_interrupt (Ctrl-C): the running
                             statement stops, its workers are told to */
  char workdir[4200];     /* where local workers keep data and logs */
  /* An open block (BEGIN .. COMMIT): its assignments, optimized and run
  ** together at COMMIT; pend[] are their outputs so far, which later
  ** statements of the block read (the compiler consults them first). */
  int in_block;
  int nblock;
  tp_stmt *block[TA_MAX_NODES];
  int npend;
  tr_tensor pend[TA_MAX_NODES];
  /* Replicas: a chunk a worker reported damaged in the last failed phase
  ** (site index and chunk id, for the retry), and whether some chunks may
  ** have fewer replicas than the setting (te_maintain's work). */
  int bad_site;
  uint64_t bad_chunk;
  int repair;
  /* Copies workers lost (damaged, missing): a repair puts the chunk back
  ** on the same worker when it can, so placement stays as it was. */
  struct td_lost { uint64_t chunk; int64_t site; } *lost;
  int64_t nlost, caplost;
  double last_ping;       /* when s_ping last asked who is alive (tr_now) */
  /* Warnings for the running statement's result (te_result.notice),
  ** collected by te_notice; heap text, one per line. */
  char *notice;
};

/* Add a line to the running statement's warnings. */
void te_notice(te_engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the warnings collected so far to result r (a TE_RES_NONE result is
** made when r is NULL and there are any); returns r. */
te_result *te_take_notice(te_engine *e, te_result *r);

#endif /* TRADB_ENGINE_INT_H */
