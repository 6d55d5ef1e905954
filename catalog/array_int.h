/*
** catalog/array_int.h - private to catalog/: what array.c (.npy and the
** tc_array entry points), csv.c (.csv) and arrayio.c (their shared file
** helpers) share.  array.c hands CSV files to csv.c; both use arrayio.c.
*/
#ifndef TRADB_CATALOG_ARRAY_INT_H
#define TRADB_CATALOG_ARRAY_INT_H

#include "catalog/catalog.h"

/* Values of tc_array.kind_: what the array holds and how to release it. */
enum {
  TA_NONE = 0,      /* closed or never opened: nothing to release */
  TA_NPY_MAP = 1,   /* .npy read: map_ is a read-only mapping (or NULL) */
  TA_NPY_HEAP = 2,  /* .npy read whose data was not aligned: map_ is a heap
                       copy of the data */
  TA_NPY_WRITE = 3, /* .npy created: map_ maps the temporary file fd_ */
  TA_CSV_READ = 4,  /* .csv read: map_ is a heap buffer */
  TA_CSV_WRITE = 5  /* .csv created: map_ is a heap buffer, fd_ the temp */
};

/* CSV (csv.c); a is reset on entry and on failure. */
int ta_csv_open(const char *path, tr_dtype dtype, const tc_csv_opts *opts, tc_array *a,
                tr_err *err);
int ta_csv_create(const char *path, tr_dtype dtype, int rank,
                  const int64_t *shape, tc_array *a, tr_err *err);
int ta_csv_commit(tc_array *a, tr_err *err);

/* Shared file helpers (arrayio.c). */
/* Reset a to the closed state. */
void ta_reset(tc_array *a);
/* Create "PATH.tmp.XXXXXX" next to path, mode 0644; *tmp is malloc'd.
** Errors say "cannot write 'PATH': reason". */
int ta_tmpfile(const char *path, char **tmp, int *fd, tr_err *err);
/* fsync fd, rename tmp to path and fsync path's directory. */
int ta_publish(int fd, const char *tmp, const char *path, tr_err *err);
/* C-order element strides for shape (rank dims). */
void ta_c_strides(int rank, const int64_t *shape, int64_t *stride);

#endif /* TRADB_CATALOG_ARRAY_INT_H */
