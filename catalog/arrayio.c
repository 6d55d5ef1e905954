/*
** catalog/arrayio.c - what the two array file formats share (array_int.h):
** resetting a tc_array, and writing a file by a temporary next to it that
** is renamed over it once complete.  array.c (.npy, and the tc_array entry
** points that hand .csv files to csv.c) and csv.c both call it, and csv.c
** calls nothing in array.c.
*/
#include "config.h"
#include "catalog/array_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ta_reset(tc_array *a) {
  memset(a, 0, sizeof *a);
  a->fd_ = a->dfd_ = -1;
}

int ta_tmpfile(const char *path, char **tmp, int *fd, tr_err *err) {
  size_t n = strlen(path);
  char *t = malloc(n + 12);
  *tmp = NULL;
  *fd = -1;
  if (!t) return tr_seterr(err, TR_ENOMEM, "out of memory");
  memcpy(t, path, n);
  memcpy(t + n, ".tmp.XXXXXX", 12);
  int f = mkostemp(t, O_CLOEXEC);
  if (f < 0) {
    int e = errno;
    free(t);
    return tr_seterr(err, TR_EIO, "cannot write '%s': %s", path, strerror(e));
  }
  /* mkstemp makes 0600; a saved array is an ordinary user file. */
  if (fchmod(f, 0644) != 0) {
    /* harmless: the file just stays private */
  }
  *tmp = t;
  *fd = f;
  return TR_OK;
}

int ta_publish(int fd, const char *tmp, const char *path, tr_err *err) {
  if (fsync(fd) != 0)
    return tr_seterr(err, TR_EIO, "cannot write '%s': %s", path,
                     strerror(errno));
  if (rename(tmp, path) != 0)
    return tr_seterr(err, TR_EIO, "cannot write '%s': %s", path,
                     strerror(errno));
  /* Make the rename itself durable. */
  const char *slash = strrchr(path, '/');
  char *dir = NULL;
  if (!slash)
    dir = strdup(".");
  else if (slash == path)
    dir = strdup("/");
  else
    dir = strndup(path, (size_t)(slash - path));
  if (dir) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
    free(dir);
  }
  return TR_OK;
}

void ta_c_strides(int rank, const int64_t *shape, int64_t *stride) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d] > 0 ? shape[d] : 1;
  }
}
