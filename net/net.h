/*
** net/net.h - the ZeroMQ protocol between the coordinator (the shell's
** engine) and `tradb --worker` processes, and between workers.
**
** Not built yet: the foundation runs every plan in the shell's own process.
** The distributed stage fills this folder; the catalog already records,
** for every chunk, the sites (workers) that hold a replica.
*/
#ifndef TRADB_NET_H
#define TRADB_NET_H

#define TN_PROTOCOL_VERSION 1

#endif /* TRADB_NET_H */
