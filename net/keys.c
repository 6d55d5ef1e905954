/*
** net/keys.c - cluster security: the CURVE key pair on disk (generate,
** load, validate), socket configuration for servers and clients, the ZAP
** handler that admits only holders of the cluster key, and the check for
** endpoints that are reachable from this host only.  See net/net.h.
*/
#include "config.h"
#include "net/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_KEY_FILE "cluster.key"
#define S_PUB_FILE "cluster.pub"
#define S_ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define S_ZAP_DOMAIN "tradb"
#define S_Z85_LEN 40

/* ---- Key files --------------------------------------------------------------- */

/* Create path exclusively with mode and write text to it, durably; on
** failure nothing is left behind.  Returns 0 or an errno value. */
static int s_write_new(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  int e = 0;
  if (fd < 0) return errno;
  if ((e = tr_write_all(fd, text, strlen(text))) == 0 && fsync(fd) != 0) e = errno;
  if (close(fd) != 0 && e == 0) e = errno;
  if (e) unlink(path);
  return e;
}

int tn_gen_keys(const char *dir, tr_err *err) {
  char pub[S_Z85_LEN + 1], sec[S_Z85_LEN + 1];
  char kpath[4096], ppath[4096], text[2 * (S_Z85_LEN + 8) + 1];
  struct stat st;
  int rc = TR_OK, e;

  if (!dir || !*dir) return tr_seterr(err, TR_EINVAL, "no key directory given");
  if (snprintf(kpath, sizeof kpath, "%s/%s", dir, S_KEY_FILE) >= (int)sizeof kpath ||
      snprintf(ppath, sizeof ppath, "%s/%s", dir, S_PUB_FILE) >= (int)sizeof ppath)
    return tr_seterr(err, TR_EINVAL, "key directory name too long");
  if (mkdir(dir, 0700) != 0) {
    if (errno != EEXIST)
      return tr_seterr(err, TR_EIO, "cannot create key directory %s: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
      return tr_seterr(err, TR_EIO, "%s exists and is not a directory", dir);
  }
  if (lstat(kpath, &st) == 0 || lstat(ppath, &st) == 0)
    return tr_seterr(err, TR_EINVAL, "keys already exist in %s", dir);
  if (zmq_curve_keypair(pub, sec) != 0)
    return tr_seterr(err, TR_EIO, "cannot make a CURVE key pair: %s", zmq_strerror(zmq_errno()));

  snprintf(text, sizeof text, "public %s\nsecret %s\n", pub, sec);
  /* O_EXCL: a concurrent --gen-keys into the same directory loses cleanly
  ** instead of mixing two pairs. */
  if ((e = s_write_new(kpath, text, 0600)) != 0) {
    rc = e == EEXIST ? tr_seterr(err, TR_EINVAL, "keys already exist in %s", dir)
                     : tr_seterr(err, TR_EIO, "cannot write %s: %s", kpath, strerror(e));
    goto done;
  }
  snprintf(text, sizeof text, "public %s\n", pub);
  if ((e = s_write_new(ppath, text, 0644)) != 0) {
    unlink(kpath); /* a pair without its public half would confuse a retry */
    rc = e == EEXIST ? tr_seterr(err, TR_EINVAL, "keys already exist in %s", dir)
                     : tr_seterr(err, TR_EIO, "cannot write %s: %s", ppath, strerror(e));
    goto done;
  }

done:
  explicit_bzero(sec, sizeof sec);
  explicit_bzero(text, sizeof text);
  return rc;
}

/* If line is "<name> <40 Z85 chars>" copy the key into out (41 bytes) and
** return 1; 0 if the line is about another name; -1 if malformed. */
static int s_key_line(const char *line, size_t len, const char *name, char *out) {
  size_t nl = strlen(name);
  uint8_t bin[32];
  if (len < nl + 1 || memcmp(line, name, nl) != 0 || line[nl] != ' ') return 0;
  if (len - nl - 1 != S_Z85_LEN) return -1;
  memcpy(out, line + nl + 1, S_Z85_LEN);
  out[S_Z85_LEN] = '\0';
  if (!zmq_z85_decode(bin, out)) return -1;
  explicit_bzero(bin, sizeof bin);
  return 1;
}

int tn_load_keys(const char *dir, tn_keys *keys, tr_err *err) {
  char path[4096], buf[1024], derived[S_Z85_LEN + 1];
  tn_keys k;
  struct stat st;
  ssize_t got = 0;
  int fd = -1, rc = TR_OK, lineno = 0;
  const char *p, *end;

  memset(keys, 0, sizeof *keys);
  memset(&k, 0, sizeof k);
  if (!dir) return TR_OK;
  if (stat(dir, &st) != 0)
    return tr_seterr(err, TR_EIO, "key directory %s: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return tr_seterr(err, TR_EIO, "key directory %s: not a directory", dir);
  if (snprintf(path, sizeof path, "%s/%s", dir, S_KEY_FILE) >= (int)sizeof path)
    return tr_seterr(err, TR_EINVAL, "key directory name too long");
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    rc = tr_seterr(err, TR_EIO, "cannot open %s: %s%s", path, strerror(errno),
                   errno == ENOENT ? " (make keys with tradb --gen-keys DIR)" : "");
    goto done;
  }
  /* As ssh does for its keys: a secret others can read is no secret, and
  ** one others can write lets them choose it. */
  if (fstat(fd, &st) != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot read %s: %s", path, strerror(errno));
    goto done;
  }
  if (st.st_mode & 066) {
    int rd = (st.st_mode & 044) != 0;
    rc = tr_seterr(err, TR_EINVAL, "cluster key %s is %s by %s (mode %04o): chmod 600 it", path,
                   rd ? "readable" : "writable",
                   st.st_mode & (rd ? 004 : 002) ? "others" : "its group",
                   (unsigned)(st.st_mode & 07777));
    goto done;
  }
  for (;;) { /* the file is tiny: read it whole, refusing anything large */
    ssize_t n = read(fd, buf + got, sizeof buf - 1 - (size_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = tr_seterr(err, TR_EIO, "cannot read %s: %s", path, strerror(errno));
      goto done;
    }
    if (n == 0) break;
    got += n;
    if ((size_t)got == sizeof buf - 1) {
      rc = tr_seterr(err, TR_EINVAL, "%s: bad format (file too large)", path);
      goto done;
    }
  }
  buf[got] = '\0';

  for (p = buf, end = buf + got; p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *next = nl ? nl + 1 : end;
    size_t len = (size_t)((nl ? nl : end) - p);
    int a, b;
    lineno++;
    if (len > 0 && p[len - 1] == '\r') len--; /* tolerate a file edited on Windows */
    if (len > 0) {
      a = s_key_line(p, len, "public", k.pub);
      b = a ? 0 : s_key_line(p, len, "secret", k.sec);
      if (a < 0 || b < 0 || (a == 0 && b == 0)) {
        rc = tr_seterr(err, TR_EINVAL, "%s:%d: bad format (want \"public KEY\" and "
                       "\"secret KEY\", keys 40 Z85 characters)", path, lineno);
        goto done;
      }
    }
    p = next;
  }
  if (!k.pub[0] || !k.sec[0]) {
    rc = tr_seterr(err, TR_EINVAL, "%s: bad format (missing %s key)", path,
                   k.pub[0] ? "secret" : "public");
    goto done;
  }
  /* A pair pasted together from two files would fail every handshake with
  ** an obscure error; catch it here with a clear one. */
  if (zmq_curve_public(derived, k.sec) != 0 || strcmp(derived, k.pub) != 0) {
    rc = tr_seterr(err, TR_EINVAL, "%s: public key does not match the secret key", path);
    goto done;
  }
  k.on = 1;
  *keys = k;

done:
  if (fd >= 0) close(fd);
  explicit_bzero(buf, sizeof buf);
  explicit_bzero(&k, sizeof k);
  return rc;
}

/* ---- ZAP handler ----------------------------------------------------------- */

/*
** One handler per process (ZeroMQ looks for it at a fixed inproc endpoint
** of the context).  Between tn_zap_start and tn_zap_stop the calling side
** holds no socket: the handler thread owns both of its sockets, so a
** zmq_ctx_term() issued while it runs makes its poll fail with ETERM, the
** thread closes them and exits, and the termination cannot hang on us.
*/
static struct {
  int running;         /* between start and stop */
  pthread_t thread;
  void *ctx;
  void *rep;           /* ZAP REP socket, owned by the thread once started */
  void *ctl;           /* control PAIR (bound), owned by the thread */
  char ctl_ep[64];     /* its endpoint */
  unsigned gen;        /* makes ctl_ep unique across start/stop cycles */
  atomic_int exited;   /* thread has left its loop (sockets closed or closing) */
  uint8_t pub[32];     /* cluster public key, binary */
} s_zap;

/* Answer one ZAP request (RFC 27).  Request: version, request id, domain,
** address, routing id, mechanism, credentials (CURVE: the client's 32-byte
** public key).  Reply: version, request id, status code, status text,
** user id, metadata.  A REP socket must answer every request, so even a
** malformed one gets a reply (500). */
static void s_zap_serve(void *rep) {
  enum { MAXF = 8 };
  zmq_msg_t f[MAXF];
  int nf = 0, more = 1, over = 0;
  const char *code = "500", *text = "malformed ZAP request";
  const void *rid = "";
  size_t ridlen = 0;

  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, rep, 0) < 0) {
      zmq_msg_close(&m);
      if (zmq_errno() == EINTR) continue;
      goto done; /* context terminating: no reply possible */
    }
    more = zmq_msg_more(&m);
    if (nf < MAXF) {
      zmq_msg_init(&f[nf]);
      zmq_msg_move(&f[nf], &m);
      nf++;
    } else {
      over = 1;
    }
    zmq_msg_close(&m);
  }

  if (nf >= 2) {
    rid = zmq_msg_data(&f[1]);
    ridlen = zmq_msg_size(&f[1]);
  }
  if (!over && nf >= 6 && zmq_msg_size(&f[0]) == 3 && !memcmp(zmq_msg_data(&f[0]), "1.0", 3)) {
    int curve = zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5);
    code = "400";
    text = "not a member of this cluster";
    if (curve && nf == 7 && zmq_msg_size(&f[6]) == sizeof s_zap.pub &&
        !memcmp(zmq_msg_data(&f[6]), s_zap.pub, sizeof s_zap.pub)) {
      code = "200";
      text = "OK";
    }
  }
  /* Errors here mean the context is going away; the poll loop sees it. */
  if (zmq_send(rep, "1.0", 3, ZMQ_SNDMORE) >= 0 && zmq_send(rep, rid, ridlen, ZMQ_SNDMORE) >= 0 &&
      zmq_send(rep, code, 3, ZMQ_SNDMORE) >= 0 &&
      zmq_send(rep, text, strlen(text), ZMQ_SNDMORE) >= 0 && zmq_send(rep, "", 0, ZMQ_SNDMORE) >= 0)
    zmq_send(rep, "", 0, 0);

done:
  for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
}

static void *s_zap_main(void *arg) {
  void *rep = s_zap.rep, *ctl = s_zap.ctl;
  (void)arg;
  for (;;) {
    zmq_pollitem_t items[2] = {{rep, 0, ZMQ_POLLIN, 0}, {ctl, 0, ZMQ_POLLIN, 0}};
    int n = zmq_poll(items, 2, -1);
    if (n < 0 && zmq_errno() == EINTR) continue;
    if (n < 0 || (items[1].revents & ZMQ_POLLIN)) break; /* ETERM or stop */
    if (items[0].revents & ZMQ_POLLIN) s_zap_serve(rep);
  }
  atomic_store(&s_zap.exited, 1);
  /* Unbind first: inproc endpoints are otherwise released asynchronously
  ** by the reaper, and a quick restart would find the address in use. */
  zmq_unbind(rep, S_ZAP_ENDPOINT);
  zmq_close(rep);
  zmq_close(ctl);
  return NULL;
}

int tn_zap_start(void *ctx, const tn_keys *keys, tr_err *err) {
  int zero = 0, rc = TR_OK;
  void *rep = NULL, *ctl = NULL;

  if (!keys || !keys->on) return TR_OK;
  if (s_zap.running) return tr_seterr(err, TR_EINVAL, "ZAP handler already running");
  if (!zmq_z85_decode(s_zap.pub, keys->pub))
    return tr_seterr(err, TR_EINVAL, "cluster public key is not valid Z85");
  s_zap.gen++;
  snprintf(s_zap.ctl_ep, sizeof s_zap.ctl_ep, "inproc://tradb-zap-ctl-%u", s_zap.gen);
  /* Both sockets are made and bound here so that failures (another ZAP
  ** handler in the context: EADDRINUSE) are reported to the caller; they
  ** migrate to the thread, pthread_create being the memory barrier
  ** ZeroMQ asks for. */
  if (!(rep = zmq_socket(ctx, ZMQ_REP)) || !(ctl = zmq_socket(ctx, ZMQ_PAIR)) ||
      zmq_setsockopt(rep, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
      zmq_setsockopt(ctl, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
      zmq_bind(rep, S_ZAP_ENDPOINT) != 0 || zmq_bind(ctl, s_zap.ctl_ep) != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot start the ZAP handler: %s", zmq_strerror(zmq_errno()));
    goto done;
  }
  s_zap.ctx = ctx;
  s_zap.rep = rep;
  s_zap.ctl = ctl;
  atomic_store(&s_zap.exited, 0);
  if (pthread_create(&s_zap.thread, NULL, s_zap_main, NULL) != 0) {
    rc = tr_seterr(err, TR_EIO, "cannot start the ZAP handler thread");
    goto done;
  }
  s_zap.running = 1;
  rep = ctl = NULL; /* the thread's now */

done:
  if (rep) {
    zmq_unbind(rep, S_ZAP_ENDPOINT);
    zmq_close(rep);
  }
  if (ctl) zmq_close(ctl);
  return rc;
}

/*
** Safe before zmq_ctx_term() (the usual order) and after it has returned
** (the thread then already left on ETERM); not concurrently with it.  The
** stop signal goes through a socket made for the occasion, kept open until
** the thread has read it and exited, then closed.
*/
void tn_zap_stop(void) {
  void *s;
  if (!s_zap.running) return;
  s_zap.running = 0;
  if (!atomic_load(&s_zap.exited) && (s = zmq_socket(s_zap.ctx, ZMQ_PAIR)) != NULL) {
    int zero = 0;
    if (zmq_connect(s, s_zap.ctl_ep) == 0) zmq_send(s, "", 0, 0);
    /* If connect or send failed the context is terminating, and the
    ** thread leaves on ETERM all the same. */
    pthread_join(s_zap.thread, NULL);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(s);
  } else {
    pthread_join(s_zap.thread, NULL);
  }
  explicit_bzero(s_zap.pub, sizeof s_zap.pub);
}

/* ---- Socket configuration ------------------------------------------------- */

int tn_secure_server(void *sock, const tn_keys *keys, tr_err *err) {
  int one = 1;
  if (!keys || !keys->on) return TR_OK;
  /* Without the ZAP handler any CURVE client that knows the public key
  ** (cluster.pub is not secret) would be let in: refuse to configure a
  ** server that would fail open. */
  if (!s_zap.running || atomic_load(&s_zap.exited))
    return tr_seterr(err, TR_EINVAL, "secure server socket needs the ZAP handler "
                     "(tn_zap_start) running first");
  if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
      zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, keys->sec, S_Z85_LEN) != 0 ||
      zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, S_ZAP_DOMAIN, strlen(S_ZAP_DOMAIN)) != 0)
    return tr_seterr(err, TR_EIO, "cannot configure CURVE server: %s", zmq_strerror(zmq_errno()));
  return TR_OK;
}

int tn_secure_client(void *sock, const tn_keys *keys, tr_err *err) {
  if (!keys || !keys->on) return TR_OK;
  if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, keys->pub, S_Z85_LEN) != 0 ||
      zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, keys->pub, S_Z85_LEN) != 0 ||
      zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, keys->sec, S_Z85_LEN) != 0)
    return tr_seterr(err, TR_EIO, "cannot configure CURVE client: %s", zmq_strerror(zmq_errno()));
  return TR_OK;
}

/* ---- Endpoints ------------------------------------------------------------- */

int tn_endpoint_is_local(const char *ep) {
  char host[256];
  const char *h, *e;
  size_t len;
  struct in_addr a4;
  struct in6_addr a6;

  if (!ep) return 0;
  if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9)) return 1;
  if (strncmp(ep, "tcp://", 6) != 0) return 0;
  h = ep + 6;
  /* "tcp://src;dst" names a source interface too: not a plain local bind. */
  if (strchr(h, ';')) return 0;
  if (*h == '[') {
    if (!(e = strchr(h, ']')) || (e[1] != ':' && e[1] != '\0')) return 0;
    h++;
  } else {
    e = strrchr(h, ':');
    if (!e) e = h + strlen(h);
  }
  len = (size_t)(e - h);
  if (len == 0 || len >= sizeof host) return 0;
  memcpy(host, h, len);
  host[len] = '\0';
  if (!strcasecmp(host, "localhost")) return 1;
  /* Numeric addresses only: "127.example.com" is a name, not loopback. */
  if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (ep[6] == '[' && inet_pton(AF_INET6, host, &a6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return 1;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
  }
  return 0; /* "*", 0.0.0.0, interface names, other hosts */
}
