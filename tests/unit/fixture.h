/*
** tests/unit/fixture.h - the one fixture of the unit tests that touch
** files (test_catalog.c, test_store.c, test_array.c), as CZMQ keeps one
** per class: a scratch directory made for each test and removed with all
** it holds afterwards, paths in it, files written and counted there (and
** their pages the page cache holds), and
** the catalog or chunk store opened in it.  Header-only, for test programs
** of one source file each.
**
**   TestSuite(array, .init = tf_setup, .fini = tf_teardown);
**
**   Test(array, csv) {
**     const char *p = tf_path("x.csv");   // <scratch>/x.csv
**     tf_write(p, "1,2\n", 4);
**     ...
**   }
*/
#ifndef TRADB_TEST_FIXTURE_H
#define TRADB_TEST_FIXTURE_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog/catalog.h"

#define TF_PATH 512 /* room for a path in the scratch directory */

/* The running test's scratch directory (tf_setup). */
static char tf_dir[256];

/* nftw's callback for tf_teardown: remove each entry, whatever fails. */
static inline int tf_remove_(const char *path, const struct stat *st, int flag,
                             struct FTW *ftw) {
  remove(path);
  return 0;
}

/* A suite's .init: a fresh scratch directory under $TMPDIR (else /tmp). */
static inline void tf_setup(void) {
  const char *t = getenv("TMPDIR");
  snprintf(tf_dir, sizeof tf_dir, "%s/tunit-XXXXXX", t && *t ? t : "/tmp");
  cr_assert_not_null(mkdtemp(tf_dir), "cannot make %s", tf_dir);
}

/* A suite's .fini: the scratch directory goes, with everything in it. */
static inline void tf_teardown(void) { nftw(tf_dir, tf_remove_, 16, FTW_DEPTH | FTW_PHYS); }

/* tf_dir/NAME, NAME formatted as printf does (it may hold '/'), in one of
** four static buffers taken in turn: the last four paths stay valid. */
static inline const char *tf_path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline const char *tf_path(const char *fmt, ...) {
  static char buf[4][TF_PATH];
  static unsigned next;
  char *p = buf[next++ % 4];
  int n = snprintf(p, TF_PATH, "%s/", tf_dir);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p + n, TF_PATH - (size_t)n, fmt, ap);
  va_end(ap);
  return p;
}

/* Write the n bytes of data to path, replacing what it held. */
static inline void tf_write(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "cannot write %s", path);
  cr_assert_eq(fwrite(data, 1, n, f), n, "%s", path);
  fclose(f);
}

/* Entries of dir (besides . and ..) whose names start with prefix and end
** with suffix; "" matches any. */
static inline int tf_count(const char *dir, const char *prefix, const char *suffix) {
  DIR *d = opendir(dir);
  struct dirent *e;
  size_t lp = strlen(prefix), ls = strlen(suffix);
  int n = 0;
  cr_assert_not_null(d, "%s", dir);
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && l >= lp && l >= ls &&
         !strncmp(e->d_name, prefix, lp) && !strcmp(e->d_name + l - ls, suffix);
  }
  closedir(d);
  return n;
}

/* What OPEN (tc_open, tc_store_open: a T) opens in dir, which must open. */
#define TF_OPEN_(T, OPEN, dir)                                                \
  ({                                                                          \
    T *x_ = NULL;                                                             \
    tr_err e_;                                                                \
    cr_assert_eq(OPEN(dir, &x_, &e_), TR_OK, "%s: %s", dir, e_.msg);          \
    x_;                                                                       \
  })

/* The catalog in dir, which must open. */
static inline tc_db *tf_db(const char *dir) { return TF_OPEN_(tc_db, tc_open, dir); }

/* The chunk store in dir, which must open. */
static inline tc_store *tf_store(const char *dir) { return TF_OPEN_(tc_store, tc_store_open, dir); }

/* Pages of the file at path that the page cache holds (mincore). */
static inline size_t tf_cached_pages(const char *path) {
  int fd = open(path, O_RDONLY);
  struct stat st;
  cr_assert(fd >= 0 && fstat(fd, &st) == 0, "cannot open %s", path);
  size_t n = ((size_t)st.st_size + TR_PAGE - 1) / TR_PAGE, held = 0;
  void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  unsigned char *vec = malloc(n);
  cr_assert(map != MAP_FAILED && vec);
  cr_assert_eq(mincore(map, (size_t)st.st_size, vec), 0);
  for (size_t i = 0; i < n; i++) held += vec[i] & 1;
  munmap(map, (size_t)st.st_size);
  free(vec);
  close(fd);
  return held;
}

#endif /* TRADB_TEST_FIXTURE_H */
