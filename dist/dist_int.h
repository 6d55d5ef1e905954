/*
** dist/dist_int.h - private to dist/: the coordinator's handle, the
** workers as it sees them, and the request phases its files share.
*/
#ifndef TRADB_DIST_DIST_INT_H
#define TRADB_DIST_DIST_INT_H

#include "dist/dist.h"
#include "net/net.h"

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
  /* measured by the coordinator, reset per statement (EXPLAIN ANALYZE) */
  int64_t tasks;                 /* tasks run */
  int64_t floats_in, floats_out; /* floats received / sent */
  double busy_s;                 /* time in its tasks */
  char kernels[16];              /* backend its last task ran on */
  uint64_t h2d, d2h;             /* bytes its tasks copied to / from a GPU */
  double copy_s;                 /* time of those copies */
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
  char workdir[4200];     /* where local workers keep data and logs */
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
};

/* Add a line to the notices. */
void td_notice(td_cluster *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* TRADB_DIST_DIST_INT_H */
