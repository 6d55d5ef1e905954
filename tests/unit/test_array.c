/*
** tests/unit/test_array.c - dense array files: .npy reading and writing
** (versions, orders, ranks, every kind of bad file) and CSV reading and
** exact round trips.
*/
#include "config.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>
#include "catalog/catalog.h"
#include "tests/unit/fixture.h"

TestSuite(array, .init = tf_setup, .fini = tf_teardown);

/* Write a .npy file with a given version, header text and data bytes;
** the header is padded to `align` (0: no padding besides '\n'). */
static void s_npy(const char *path, int major, const char *dict,
                  const void *data, size_t n, size_t align) {
  unsigned char buf[4096];
  size_t pre = major == 1 ? 10 : 12, len = strlen(dict);
  size_t total = pre + len + 1;
  if (align) total = (total + align - 1) / align * align;
  size_t hlen = total - pre;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  buf[8] = (unsigned char)(hlen & 0xff);
  buf[9] = (unsigned char)(hlen >> 8);
  if (major != 1) buf[10] = buf[11] = 0;
  memcpy(buf + pre, dict, len);
  memset(buf + pre + len, ' ', hlen - len - 1);
  buf[total - 1] = '\n';
  cr_assert_leq(total + n, sizeof buf);
  memcpy(buf + total, data, n);
  tf_write(path, buf, total + n);
}

/* Open path expecting failure `code` with `frag` in the message. */
static void s_bad(const char *path, int code, const char *frag) {
  tc_array a;
  tr_err err;
  int rc = tc_array_open(path, TR_F64, NULL, &a, &err);
  cr_assert_eq(rc, code, "rc %d for %s: %s", rc, path, err.msg);
  cr_assert(strstr(err.msg, frag), "message '%s' lacks '%s'", err.msg, frag);
  cr_assert_null(a.data);
  tc_array_close(&a);
  tc_array_close(&a);
}

/* ---- .npy ---------------------------------------------------------------- */

Test(array, npy_round_trip_f32) {
  tc_array a;
  tr_err err;
  int64_t sh[2] = {3, 4};
  const char *p = tf_path("x.npy");
  cr_assert_eq(tc_array_create(p, TR_F32, 2, sh, &a, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(a.stride[0], 4);
  cr_assert_eq(a.stride[1], 1);
  cr_assert_eq((uintptr_t)a.data % 64, 0);
  for (int i = 0; i < 12; i++) ((float *)a.data)[i] = (float)i / 3.0f;
  cr_assert_neq(access(p, F_OK), 0); /* nothing until commit */
  cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_array_commit(&a, &err), TR_EINVAL);
  tc_array_close(&a);
  cr_assert_eq(tf_count(tf_dir, "", ""), 1);

  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.dtype, TR_F32);
  cr_assert_eq(a.rank, 2);
  cr_assert_eq(a.shape[0], 3);
  cr_assert_eq(a.shape[1], 4);
  cr_assert_eq(a.stride[0], 4);
  cr_assert_eq(a.stride[1], 1);
  for (int i = 0; i < 12; i++)
    cr_assert_eq(((float *)a.data)[i], (float)i / 3.0f);
  tc_array_close(&a);
  tc_array_close(&a);

  /* NumPy agrees, when Debian's numpy is there */
  if (access("/usr/bin/python3", X_OK) == 0 &&
      system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"import numpy as n; "
             "a = n.load('%s'); import sys; sys.exit(0 if a.dtype == "
             "n.float32 and a.shape == (3, 4) and a[2, 3] == n.float32(11) / "
             "n.float32(3) else 1)\"", p);
    cr_assert_eq(system(cmd), 0);
  }
}

Test(array, npy_round_trip_f64_rank3_and_numpy_file) {
  tc_array a;
  tr_err err;
  int64_t sh[3] = {2, 3, 5};
  const char *p = tf_path("y.NPY");
  cr_assert_eq(tc_array_create(p, TR_F64, 3, sh, &a, &err), TR_OK, "%s",
               err.msg);
  for (int i = 0; i < 30; i++) ((double *)a.data)[i] = i * 1.25 - 7;
  cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
  tc_array_close(&a);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.dtype, TR_F64);
  cr_assert_eq(a.rank, 3);
  cr_assert_eq(a.stride[0], 15);
  cr_assert_eq(a.stride[1], 5);
  cr_assert_eq(a.stride[2], 1);
  for (int i = 0; i < 30; i++)
    cr_assert_eq(((double *)a.data)[i], i * 1.25 - 7);
  tc_array_close(&a);

  /* a file NumPy wrote (Fortran order, version 1.0) */
  /* (a plain return, not cr_skip_test, so the fixture still cleans up) */
  if (access("/usr/bin/python3", X_OK) != 0 ||
      system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    return;
  char cmd[1024];
  const char *q = tf_path("np.npy");
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"import numpy as n; "
           "n.save('%s', n.asfortranarray(n.arange(24, dtype='<f4')"
           ".reshape(2, 3, 4)))\"", q);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(tc_array_open(q, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.stride[0], 1);
  cr_assert_eq(a.stride[1], 2);
  cr_assert_eq(a.stride[2], 6);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++)
        cr_assert_eq(((float *)a.data)[i * a.stride[0] + j * a.stride[1] +
                                       k * a.stride[2]],
                     (float)(i * 12 + j * 4 + k));
  tc_array_close(&a);
}

Test(array, npy_fortran_order_by_hand) {
  tc_array a;
  tr_err err;
  /* 2x3 matrix m[i][j] = 10*i + j stored column-major */
  double d[6] = {0, 10, 1, 11, 2, 12};
  const char *p = tf_path("f.npy");
  s_npy(p, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", d,
        sizeof d, 64);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.rank, 2);
  cr_assert_eq(a.stride[0], 1);
  cr_assert_eq(a.stride[1], 2);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      cr_assert_eq(((double *)a.data)[i * a.stride[0] + j * a.stride[1]],
                   10.0 * i + j);
  tc_array_close(&a);
}

Test(array, npy_rank0_rank1_and_header_variants) {
  tc_array a;
  tr_err err;
  const char *p = tf_path("s.npy");
  cr_assert_eq(tc_array_create(p, TR_F64, 0, NULL, &a, &err), TR_OK, "%s",
               err.msg);
  *(double *)a.data = 2.5;
  cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
  tc_array_close(&a);
  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.rank, 0);
  cr_assert_eq(*(double *)a.data, 2.5);
  tc_array_close(&a);

  int64_t five = 5;
  p = tf_path("v.npy");
  cr_assert_eq(tc_array_create(p, TR_F32, 1, &five, &a, &err), TR_OK, "%s",
               err.msg);
  for (int i = 0; i < 5; i++) ((float *)a.data)[i] = (float)i;
  cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
  tc_array_close(&a);
  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.rank, 1);
  cr_assert_eq(a.shape[0], 5);
  cr_assert_eq(a.stride[0], 1);
  cr_assert_eq(((float *)a.data)[4], 4.0f);
  tc_array_close(&a);

  /* key order, quotes, spacing, no trailing comma, version 2 and 3, Python 2
  ** 'L' suffixes, '=' byte order, unaligned data */
  float v[6] = {1, 2, 3, 4, 5, 6};
  const char *dicts[] = {
      "{\"shape\":(3,2),\"fortran_order\":False,\"descr\":\"<f4\"}",
      "{ 'fortran_order' : False , 'descr' : '<f4' , 'shape' : ( 3 , 2 , ) , }",
      "{'descr': '=f4', 'fortran_order': False, 'shape': (3L, 2L), }",
  };
  for (int k = 0; k < 3; k++) {
    for (int major = 1; major <= 3; major++) {
      for (size_t align = 0; align <= 64; align += 64) {
        p = tf_path("h.npy");
        s_npy(p, major, dicts[k], v, sizeof v, align);
        cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s: %s",
                     dicts[k], err.msg);
        cr_assert_eq(a.rank, 2);
        cr_assert_eq(a.shape[0], 3);
        cr_assert_eq(a.shape[1], 2);
        cr_assert_eq((uintptr_t)a.data % 4, 0);
        cr_assert_eq(((float *)a.data)[5], 6.0f);
        tc_array_close(&a);
      }
    }
  }
  /* empty arrays: no data, nothing mapped */
  p = tf_path("e.npy");
  s_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4), }",
        "", 0, 64);
  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.shape[0], 0);
  cr_assert_eq(a.shape[1], 4);
  tc_array_close(&a);
  int64_t z[2] = {4, 0};
  cr_assert_eq(tc_array_create(p, TR_F32, 2, z, &a, &err), TR_OK, "%s",
               err.msg);
  cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
  tc_array_close(&a);
  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.shape[0], 4);
  cr_assert_eq(a.shape[1], 0);
  tc_array_close(&a);
}

Test(array, npy_detected_by_magic_without_extension) {
  tc_array a;
  tr_err err;
  double d[2] = {1, 2};
  const char *p = tf_path("noext");
  s_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", d,
        sizeof d, 64);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(((double *)a.data)[1], 2.0);
  tc_array_close(&a);
  p = tf_path("other.txt");
  tf_write(p, "1,2\n", 4);
  s_bad(p, TR_EINVAL, "cannot tell the format");
}

Test(array, npy_missing_and_unwritable) {
  tc_array a;
  tr_err err;
  int64_t sh[1] = {3};
  s_bad(tf_path("none.npy"), TR_EIO, "No such file or directory");
  cr_assert_eq(tc_array_open(tf_path("none.npy"), TR_F64, NULL, &a, &err), TR_EIO);
  char want[600];
  snprintf(want, sizeof want, "cannot open '%s': No such file or directory",
           tf_path("none.npy"));
  cr_assert_str_eq(err.msg, want);
  cr_assert_eq(tc_array_create(tf_path("nodir/x.npy"), TR_F64, 1, sh, &a, &err),
               TR_EIO);
  snprintf(want, sizeof want, "cannot write '%s': No such file or directory",
           tf_path("nodir/x.npy"));
  cr_assert_str_eq(err.msg, want);
  cr_assert_eq(tc_array_create(tf_path("nodir/x.csv"), TR_F64, 1, sh, &a, &err),
               TR_EIO);
  cr_assert(strstr(err.msg, "cannot write"), "%s", err.msg);
  if (geteuid() != 0) {
    mkdir(tf_path("ro"), 0555);
    cr_assert_eq(tc_array_create(tf_path("ro/x.npy"), TR_F64, 1, sh, &a, &err),
                 TR_EIO);
    cr_assert(strstr(err.msg, "Permission denied"), "%s", err.msg);
  }
  cr_assert_eq(tc_array_create(tf_path("x.dat"), TR_F64, 1, sh, &a, &err),
               TR_EINVAL);
  cr_assert(strstr(err.msg, "unknown file type"), "%s", err.msg);
  /* a directory, and FIFOs (which must not hang) */
  mkdir(tf_path("d.npy"), 0755);
  s_bad(tf_path("d.npy"), TR_EIO, "not a regular file");
  cr_assert_eq(mkfifo(tf_path("p.npy"), 0644), 0);
  s_bad(tf_path("p.npy"), TR_EIO, "not a regular file");
  cr_assert_eq(mkfifo(tf_path("p.csv"), 0644), 0);
  s_bad(tf_path("p.csv"), TR_EIO, "not a regular file");
  cr_assert_eq(mkfifo(tf_path("p"), 0644), 0);
  s_bad(tf_path("p"), TR_EIO, "cannot read");
}

Test(array, npy_close_without_commit_leaves_nothing) {
  tc_array a, b;
  tr_err err;
  int64_t sh[2] = {100, 100};
  cr_assert_eq(tc_array_create(tf_path("x.npy"), TR_F64, 2, sh, &a, &err), TR_OK,
               "%s", err.msg);
  cr_assert_eq(tc_array_create(tf_path("y.csv"), TR_F64, 2, sh, &b, &err), TR_OK,
               "%s", err.msg);
  ((double *)a.data)[9999] = 1;
  ((double *)b.data)[9999] = 1;
  cr_assert_eq(tf_count(tf_dir, "", ""), 2); /* the temporaries */
  tc_array_close(&a);
  tc_array_close(&b);
  tc_array_close(&b);
  cr_assert_eq(tf_count(tf_dir, "", ""), 0);
}

Test(array, npy_truncated) {
  float v[8] = {0};
  const char *p = tf_path("t.npy");
  s_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10,), }", v,
        sizeof v, 64);
  char want[600];
  snprintf(want, sizeof want,
           "truncated .npy file %s: expected 40 bytes of data, found 32", p);
  tc_array a;
  tr_err err;
  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_ECORRUPT);
  cr_assert_str_eq(err.msg, want);
  /* header cut short */
  tf_write(p, "\x93NUMPY\x01\x00\x50\x00{'descr'", 17);
  s_bad(p, TR_ECORRUPT, "truncated .npy file");
  tf_write(p, "\x93NUMPY\x01", 7);
  s_bad(p, TR_ECORRUPT, "truncated .npy file");
}

Test(array, npy_bad_magic) {
  const char *p = tf_path("m.npy");
  tf_write(p, "hello world, not numpy", 22);
  char want[600];
  snprintf(want, sizeof want, "not a .npy file: %s (bad magic)", p);
  s_bad(p, TR_ECORRUPT, want);
  tf_write(p, "", 0);
  s_bad(p, TR_ECORRUPT, "bad magic");
}

/* Big-endian elements ('>f8', as FITS data reach NumPy) are read in this
** machine's order: floats in place, the others converted as their
** little-endian forms are, a value the type cannot hold still refused;
** one-byte ones need no swap; data at an odd offset (an old writer's
** header) too. */
static void s_be(void *dst, const void *src, size_t item, size_t n) {
  for (size_t at = 0; at < n * item; at += item)
    for (size_t b = 0; b < item; b++) ((char *)dst)[at + b] = ((const char *)src)[at + item - 1 - b];
}

Test(array, npy_big_endian_read_in_this_order) {
  const char *p = tf_path("be.npy");
  tc_array a;
  tr_err err;
  double f8[6] = {0, 10, 1, 11, 2, 12}, bf8[6];
  s_be(bf8, f8, 8, 6);
  for (int fortran = 0; fortran < 2; fortran++) {
    s_npy(p, 1, fortran ? "{'descr': '>f8', 'fortran_order': True, 'shape': (2, 3), }"
                        : "{'descr': '>f8', 'fortran_order': False, 'shape': (3, 2), }",
          bf8, sizeof bf8, fortran ? 64 : 0);
    cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
    cr_assert_eq(a.dtype, TR_F64);
    for (int i = 0; i < 6; i++) cr_assert_eq(((double *)a.data)[i], f8[i], "element %d", i);
    tc_array_close(&a);
  }
  float f4[3] = {1.5f, -2, 3e10f}, bf4[3];
  s_be(bf4, f4, 4, 3);
  s_npy(p, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", bf4, sizeof bf4, 64);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert(!memcmp(a.data, f4, sizeof f4));
  tc_array_close(&a);
  int32_t i4[3] = {1, -2, 300000}, bi4[3];
  s_be(bi4, i4, 4, 3);
  s_npy(p, 1, "{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }", bi4, sizeof bi4, 64);
  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  for (int i = 0; i < 3; i++) cr_assert_eq(((double *)a.data)[i], i4[i]);
  tc_array_close(&a);
  uint16_t u2[2] = {1, 65535}, h2[2] = {0x3e00, 0xc000}, b2[2]; /* half: 1.5, -2 */
  s_be(b2, u2, 2, 2);
  s_npy(p, 1, "{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }", b2, sizeof b2, 0);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert(((float *)a.data)[0] == 1 && ((float *)a.data)[1] == 65535);
  tc_array_close(&a);
  s_be(b2, h2, 2, 2);
  s_npy(p, 1, "{'descr': '>f2', 'fortran_order': False, 'shape': (2,), }", b2, sizeof b2, 64);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert(((float *)a.data)[0] == 1.5f && ((float *)a.data)[1] == -2);
  tc_array_close(&a);
  int64_t i8[2] = {3, ((int64_t)1 << 53) + 1}, bi8[2];
  s_be(bi8, i8, 8, 2);
  s_npy(p, 1, "{'descr': '>i8', 'fortran_order': False, 'shape': (2,), }", bi8, sizeof bi8, 64);
  s_bad(p, TR_ETYPE, "value 9007199254740993 at [1]");
  uint8_t b1[3] = {0, 1, 255};
  s_npy(p, 1, "{'descr': '>u1', 'fortran_order': False, 'shape': (3,), }", b1, sizeof b1, 64);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert(((float *)a.data)[2] == 255);
  tc_array_close(&a);
}

Test(array, npy_unsupported_dtypes) {
  int32_t v[4] = {1, 2, 3, 4};
  const char *p = tf_path("i.npy");
  char want[600];
  s_npy(p, 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", v,
        sizeof v, 64);
  snprintf(want, sizeof want,
           "unsupported dtype '<c8' in %s (tradb reads bool, int8..int64, uint8..uint64 "
           "and float16..float64)", p);
  s_bad(p, TR_ETYPE, want);
  const char *others[] = {"'O'", "'<f16'", "''", "'<f'", "'<U4'", "'<i16'", "'<b2'", "'<u3'"};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    char dict[200];
    snprintf(dict, sizeof dict, "{'descr': %s, 'fortran_order': False, "
             "'shape': (4,), }", others[i]);
    s_npy(p, 1, dict, v, sizeof v, 64);
    s_bad(p, TR_ETYPE, "unsupported dtype");
  }
  s_npy(p, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, "
        "'shape': (4,), }", v, sizeof v, 64);
  s_bad(p, TR_ECORRUPT, "structured dtype");
}

/* Open the .npy of descr and shape "(2, 3)" holding data, as dt; returns
** the values as doubles in memory order, or fails with msg in want. */
static void s_npy_as(const char *descr, const char *order, const void *data, size_t n,
                     tr_dtype dt, const double *values, const char *want) {
  const char *p = tf_path("c.npy");
  char dict[200];
  tc_array a;
  tr_err err;
  snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': (2, 3), }", descr,
           order);
  s_npy(p, 1, dict, data, n, 64);
  int rc = tc_array_open(p, dt, NULL, &a, &err);
  if (want) {
    cr_assert_eq(rc, TR_ETYPE, "%s: %s", descr, err.msg);
    cr_assert(strstr(err.msg, want), "%s: '%s' lacks '%s'", descr, err.msg, want);
    cr_assert_null(a.data);
    return;
  }
  cr_assert_eq(rc, TR_OK, "%s: %s", descr, err.msg);
  cr_assert_eq(a.dtype, dt, "%s is read as the type asked for", descr);
  cr_assert_eq(a.rank, 2);
  for (int i = 0; i < 6; i++) {
    double v = dt == TR_F32 ? ((float *)a.data)[i] : ((double *)a.data)[i];
    cr_assert_eq(v, values[i], "%s [%d]: %g, not %g", descr, i, v, values[i]);
  }
  cr_assert_eq(a.stride[0], order[0] == 'T' ? 1 : 3, "%s keeps its order", descr);
  tc_array_close(&a);
}

/* bool, int8..int64, uint8..uint64 and float16 are converted to the type
** asked for, exactly, or refused naming the first value that is not. */
Test(array, npy_converted) {
  const double small[6] = {0, 1, -2, 3, 127, -128}, usmall[6] = {0, 1, 2, 3, 127, 255};
  int8_t i1[6] = {0, 1, -2, 3, 127, -128};
  uint8_t u1[6] = {0, 1, 2, 3, 127, 255}, b1[6] = {0, 1, 1, 0, 2, 1};
  int16_t i2[6] = {0, 1, -2, 3, 127, -128};
  uint16_t u2[6] = {0, 1, 2, 3, 127, 255};
  int32_t i4[6] = {0, 1, -2, 3, 127, -128};
  uint32_t u4[6] = {0, 1, 2, 3, 127, 255};
  int64_t i8[6] = {0, 1, -2, 3, 127, -128};
  uint64_t u8[6] = {0, 1, 2, 3, 127, 255};
  for (int t = 0; t < 2; t++) {
    tr_dtype dt = t ? TR_F64 : TR_F32;
    const double bools[6] = {0, 1, 1, 0, 1, 1};
    s_npy_as("|b1", "False", b1, sizeof b1, dt, bools, NULL);
    s_npy_as("|i1", "False", i1, sizeof i1, dt, small, NULL);
    s_npy_as("|u1", "False", u1, sizeof u1, dt, usmall, NULL);
    s_npy_as("<i2", "False", i2, sizeof i2, dt, small, NULL);
    s_npy_as("<u2", "True", u2, sizeof u2, dt, usmall, NULL);
    s_npy_as("<i4", "False", i4, sizeof i4, dt, small, NULL);
    s_npy_as("<u4", "False", u4, sizeof u4, dt, usmall, NULL);
    s_npy_as("<i8", "True", i8, sizeof i8, dt, small, NULL);
    s_npy_as("=u8", "False", u8, sizeof u8, dt, usmall, NULL);
  }
  /* float16: normal, subnormal, zero, negative, inf, the largest */
  uint16_t h[6] = {0x3c00, 0x0001, 0x8000, 0xc100, 0x7c00, 0x7bff};
  const double hv[6] = {1, 0x1p-24, -0.0, -2.5, INFINITY, 65504};
  s_npy_as("<f2", "False", h, sizeof h, TR_F32, hv, NULL);
  s_npy_as("<f2", "False", h, sizeof h, TR_F64, hv, NULL);
  /* 2^24 + 1 is not a float: the message names the value and its index
  ** (in Fortran order the second value in memory is [1, 0]) */
  int32_t big[6] = {0, 16777217, 2, 3, 4, 5};
  s_npy_as("<i4", "False", big, sizeof big, TR_F32, NULL,
           "value 16777217 at [0, 1] of");
  s_npy_as("<i4", "False", big, sizeof big, TR_F32, NULL, "is not exactly a f32 (load it with TYPE f64)");
  s_npy_as("<i4", "True", big, sizeof big, TR_F32, NULL, "value 16777217 at [1, 0] of");
  const double bigd[6] = {0, 16777217, 2, 3, 4, 5};
  s_npy_as("<i4", "False", big, sizeof big, TR_F64, bigd, NULL);
  int64_t huge[6] = {1, 2, 3, 4, 5, INT64_C(9007199254740993)}; /* 2^53 + 1 */
  s_npy_as("<i8", "False", huge, sizeof huge, TR_F64, NULL, "value 9007199254740993 at [1, 2]");
  uint64_t uhuge[6] = {UINT64_MAX, 0, 0, 0, 0, 0};
  s_npy_as("<u8", "False", uhuge, sizeof uhuge, TR_F64, NULL, "value 18446744073709551615 at [0, 0]");
  int64_t exact[6] = {INT64_C(1) << 62, -(INT64_C(1) << 62), 0, 0, 0, 0}; /* powers of 2 are */
  const double exactv[6] = {0x1p62, -0x1p62, 0, 0, 0, 0};
  s_npy_as("<i8", "False", exact, sizeof exact, TR_F32, exactv, NULL);
}

Test(array, npy_header_garbage) {
  char v[64] = {0};
  const char *p = tf_path("g.npy");
  const struct {
    const char *dict; /* header text */
    const char *frag; /* expected in the message */
  } cases[] = {
      {"", "not a dict"},
      {"garbage", "not a dict"},
      {"{'descr': '<f4', 'fortran_order': False}", "missing 'shape'"},
      {"{'descr': '<f4', 'shape': (2,)}", "missing 'fortran_order'"},
      {"{'shape': (2,), 'fortran_order': False}", "missing 'descr'"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}",
       "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
       "unknown key 'x'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
       "'shape': (2,)}", "duplicate key"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", "expected"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
       "negative dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}",
       "expected an integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
       "not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}",
       "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} extra",
       "after the dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",
       "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': "
       "(99999999999999999999,)}", "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': "
       "(4611686018427387904, 4)}", "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': "
       "(0, 4611686018427387904, 4611686018427387904)}", "too large"},
      {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}",
       "unsupported character"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    s_npy(p, 1, cases[i].dict, v, sizeof v, 64);
    tc_array a;
    tr_err err;
    int rc = tc_array_open(p, TR_F64, NULL, &a, &err);
    cr_assert(rc == TR_ECORRUPT || rc == TR_ESHAPE, "case %zu: rc %d", i, rc);
    cr_assert(strstr(err.msg, cases[i].frag), "case %zu: '%s' lacks '%s'", i,
              err.msg, cases[i].frag);
    tc_array_close(&a);
  }
  /* rank 9 */
  s_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': "
        "(1,1,1,1,1,1,1,1,1)}", v, sizeof v, 64);
  s_bad(p, TR_ESHAPE, "rank greater than 8");
  /* a NUL inside the header */
  s_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", v,
        sizeof v, 64);
  FILE *f = fopen(p, "r+b");
  fseek(f, 20, SEEK_SET);
  fputc(0, f);
  fclose(f);
  s_bad(p, TR_ECORRUPT, "bad .npy header");
  /* unknown format version */
  s_npy(p, 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", v,
        sizeof v, 64);
  s_bad(p, TR_ECORRUPT, "format version 4.0");
  /* absurd header length (version 2: 32-bit length) */
  tf_write(p, "\x93NUMPY\x02\x00\xff\xff\xff\x7f{}", 14);
  s_bad(p, TR_ECORRUPT, "too large");
}

/* ---- CSV ----------------------------------------------------------------- */

/* Bit patterns equal, or both NaN. */
static int s_same64(double x, double y) {
  return (isnan(x) && isnan(y)) || memcmp(&x, &y, sizeof x) == 0;
}

Test(array, csv_round_trip_exact) {
  static const double vals[] = {0.1, 1.0 / 3, -0.0, 1e-310, 5e-324, 1e300,
                                -2.5, INFINITY, -INFINITY, NAN, 3.4028234663852886e38,
                                123456789.123456789};
  const int n = (int)(sizeof vals / sizeof vals[0]);
  int64_t sh[2] = {3, 4};
  for (int dt = 0; dt < 2; dt++) {
    tc_array a;
    tr_err err;
    const char *p = tf_path("r.csv");
    cr_assert_eq(tc_array_create(p, (tr_dtype)dt, 2, sh, &a, &err), TR_OK,
                 "%s", err.msg);
    for (int i = 0; i < n; i++) {
      if (dt == TR_F32)
        ((float *)a.data)[i] = (float)vals[i];
      else
        ((double *)a.data)[i] = vals[i];
    }
    /* also awkward float-only values */
    if (dt == TR_F32) ((float *)a.data)[4] = 1.4e-45f;
    cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
    tc_array_close(&a);
    cr_assert_eq(tf_count(tf_dir, "", ""), 1);
    cr_assert_eq(tc_array_open(p, (tr_dtype)dt, NULL, &a, &err), TR_OK, "%s",
                 err.msg);
    cr_assert_eq(a.rank, 2);
    cr_assert_eq(a.shape[0], 3);
    cr_assert_eq(a.shape[1], 4);
    cr_assert_eq(a.stride[0], 4);
    for (int i = 0; i < n; i++) {
      if (dt == TR_F32) {
        float want = i == 4 ? 1.4e-45f : (float)vals[i];
        cr_assert(s_same64(((float *)a.data)[i], want), "f32 value %d", i);
      } else {
        cr_assert(s_same64(((double *)a.data)[i], vals[i]), "f64 value %d", i);
      }
    }
    tc_array_close(&a);
  }
}

/* The text of file p, in buf. */
static const char *s_text(const char *p, char *buf, size_t size) {
  FILE *f = fopen(p, "r");
  cr_assert(f, "cannot open %s", p);
  size_t n = fread(buf, 1, size - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

Test(array, csv_ranks_written) {
  tc_array a;
  tr_err err;
  char buf[200];
  int64_t four = 4, sh3[3] = {1, 2, 3};
  const char *p = tf_path("v.csv");
  cr_assert_eq(tc_array_create(p, TR_F64, 1, &four, &a, &err), TR_OK);
  for (int i = 0; i < 4; i++) ((double *)a.data)[i] = i + 0.5;
  cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
  tc_array_close(&a);
  cr_assert_str_eq(s_text(p, buf, sizeof buf), "0.5\n1.5\n2.5\n3.5\n");
  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.rank, 1);
  cr_assert_eq(a.shape[0], 4);
  tc_array_close(&a);

  p = tf_path("s.csv");
  cr_assert_eq(tc_array_create(p, TR_F32, 0, NULL, &a, &err), TR_OK);
  *(float *)a.data = 7;
  cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
  tc_array_close(&a);
  cr_assert_str_eq(s_text(p, buf, sizeof buf), "7\n");

  /* NaN is written "nan" whatever its sign bit, as NumPy's savetxt writes
  ** it (log of a negative number gives a NaN with the sign set: "-nan") */
  for (int dt = 0; dt < 2; dt++) {
    int64_t two = 2;
    p = tf_path(dt ? "n64.csv" : "n32.csv");
    cr_assert_eq(tc_array_create(p, (tr_dtype)dt, 1, &two, &a, &err), TR_OK);
    if (dt == TR_F32) {
      ((float *)a.data)[0] = -NAN;
      ((float *)a.data)[1] = NAN;
    } else {
      ((double *)a.data)[0] = -NAN;
      ((double *)a.data)[1] = NAN;
    }
    cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
    tc_array_close(&a);
    cr_assert_str_eq(s_text(p, buf, sizeof buf), "nan\nnan\n");
  }

  cr_assert_eq(tc_array_create(tf_path("t.csv"), TR_F32, 3, sh3, &a, &err),
               TR_ESHAPE);
  cr_assert(strstr(err.msg, "CSV holds rank 1 or 2 tensors"), "%s", err.msg);
  int64_t z[2] = {0, 3};
  cr_assert_eq(tc_array_create(tf_path("z.csv"), TR_F32, 2, z, &a, &err),
               TR_ESHAPE);
  cr_assert_eq(tf_count(tf_dir, "", ""), 4);
}

Test(array, csv_parse_forms) {
  tc_array a;
  tr_err err;
  const char *p = tf_path("in.csv");
  const char *text = "\xEF\xBB\xBF" "1, 2 ,3\r\n 4,5,\t6\r\n-7,nan,inf\n\n  \n";
  tf_write(p, text, strlen(text));
  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.dtype, TR_F64);
  cr_assert_eq(a.rank, 2);
  cr_assert_eq(a.shape[0], 3);
  cr_assert_eq(a.shape[1], 3);
  double *d = a.data;
  cr_assert_eq(d[0], 1);
  cr_assert_eq(d[5], 6);
  cr_assert_eq(d[6], -7);
  cr_assert(isnan(d[7]));
  cr_assert(isinf(d[8]));
  tc_array_close(&a);
  /* one value per line: rank 1; no final newline */
  tf_write(p, "1.5\n2.5\n3.5", 11);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.dtype, TR_F32);
  cr_assert_eq(a.rank, 1);
  cr_assert_eq(a.shape[0], 3);
  cr_assert_eq(((float *)a.data)[2], 3.5f);
  tc_array_close(&a);
  /* one line of several fields: rank 2 [1, n] */
  tf_write(p, "1,2,3,4\n", 8);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.rank, 2);
  cr_assert_eq(a.shape[0], 1);
  cr_assert_eq(a.shape[1], 4);
  tc_array_close(&a);
  /* a single value */
  tf_write(p, "42", 2);
  cr_assert_eq(tc_array_open(p, TR_F64, NULL, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(a.rank, 1);
  cr_assert_eq(a.shape[0], 1);
  cr_assert_eq(*(double *)a.data, 42);
  tc_array_close(&a);
}

/* Bad CSV files: the code of each and a part of its message, where '@'
** stands for the file's path. */
Test(array, csv_errors) {
  static const struct {
    const char *text; /* the file */
    size_t len;       /* its bytes (a NUL may be among them) */
    int code;
    const char *msg;
  } cases[] = {
      {"1,2,3\n4,5,6\n7,8\n", 16, TR_ESHAPE, "ragged CSV @: line 3 has 2 fields, expected 3"},
      {"1,2\nabc,3\n", 10, TR_ESYNTAX, "bad number 'abc' in @ line 2 field 1"},
      {"1,2\n3,4x\n", 9, TR_ESYNTAX, "bad number '4x'"},
      {"1,,2\n", 5, TR_ESYNTAX, "empty field"},
      {"1,2,\n", 5, TR_ESYNTAX, "empty field"},
      {"1\n\n2\n", 5, TR_ESYNTAX, "empty line 2"},
      {"1\x00" "2\n", 4, TR_ESYNTAX, "bad number"},
      {"", 0, TR_ESYNTAX, "empty CSV file"},
      {"\n \r\n\n", 5, TR_ESYNTAX, "empty CSV file"},
  };
  const char *p = tf_path("bad.csv");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *msg = cases[i].msg, *at = strchr(msg, '@');
    char want[600];
    if (at)
      snprintf(want, sizeof want, "%.*s%s%s", (int)(at - msg), msg, p, at + 1);
    else
      snprintf(want, sizeof want, "%s", msg);
    tf_write(p, cases[i].text, cases[i].len);
    s_bad(p, cases[i].code, want);
  }
  char longnum[200];
  memset(longnum, '1', sizeof longnum);
  tf_write(p, longnum, sizeof longnum);
  s_bad(p, TR_ESYNTAX, "bad number '1111");
  s_bad(tf_path("missing.csv"), TR_EIO, "No such file or directory");
}

/* Read text as CSV with options o (NULL: the defaults): the shape and the
** values, or the failure's message in msg. */
static int s_csv_read(const char *text, const tc_csv_opts *o, int64_t *rows, int64_t *cols,
                      double *v, size_t nv, char *msg, size_t n) {
  const char *p = tf_path("o.csv");
  tc_array a;
  tr_err err;
  tf_write(p, text, strlen(text));
  msg[0] = '\0';
  int rc = tc_array_open(p, TR_F64, o, &a, &err);
  if (rc) {
    snprintf(msg, n, "%s", err.msg);
    return rc;
  }
  *rows = a.shape[0];
  *cols = a.rank == 2 ? a.shape[1] : 1;
  for (size_t i = 0; i < nv && i < (size_t)(*rows * *cols); i++) v[i] = ((double *)a.data)[i];
  tc_array_close(&a);
  return TR_OK;
}

/* A header line is told from its having no number in it, the separator
** from how it cuts the first lines; options say otherwise.  Fields may be
** quoted. */
Test(array, csv_header_and_delimiters) {
  static const struct {
    const char *text;
    tc_csv_opts o;
    int64_t rows, cols;
    double v0, vlast;
  } ok[] = {
      {"sepal_len,sepal_wid\n5.1,3.5\n4.9,3\n", {0}, 2, 2, 5.1, 3},
      {"a;b;c\n1;2;3\n", {0}, 1, 3, 1, 3},
      {"1;2.5;3\n4;5;6\n", {0}, 2, 3, 1, 6},
      {"x\ty\n1\t2\n3\t4\n", {0}, 2, 2, 1, 4},
      {"1\t 2\n3\t4\n", {0}, 2, 2, 1, 4},
      {" w , h \n1,2\n", {0}, 1, 2, 1, 2},
      {"1|2\n3|4\n", {0, '|', 0, 0}, 2, 2, 1, 4},
      {"10,20\n1,2\n", {1, 0, 0, 0}, 1, 2, 1, 2},        /* HEADER: even numbers */
      {"1,,3\n4,5,\n", {0, 0, 1, -1}, 2, 3, 1, -1},     /* NULL -1 */
      {"value\n7\n", {0}, 1, 1, 7, 7},
      /* quoted as RFC 4180 quotes: numbers, names holding the separator or
      ** a line break, R's write.csv with its row names */
      {"\"a\",\"b\"\n\"1\",\"2\"\n3, \"4\" \n", {0}, 2, 2, 1, 4},
      {"\"weight, kg\",\"height\nin cm\"\n1,2\n", {0}, 1, 2, 1, 2},
      {"\"\",\"x\",\"y\"\n\"1\",0.5,0.25\n\"2\",0.125,2\n", {0}, 2, 3, 1, 2},
      {"\"x;y\";z\n1;\"2\"\n3;4\n", {0}, 2, 2, 1, 4},
  };
  char msg[1100];
  double v[16];
  int64_t rows, cols;
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    int rc = s_csv_read(ok[i].text, &ok[i].o, &rows, &cols, v, 16, msg, sizeof msg);
    cr_assert_eq(rc, TR_OK, "case %zu: %s", i, msg);
    cr_assert(rows == ok[i].rows && cols == ok[i].cols, "case %zu: %lld x %lld", i,
              (long long)rows, (long long)cols);
    cr_assert_eq(v[0], ok[i].v0, "case %zu", i);
    cr_assert_eq(v[rows * cols - 1], ok[i].vlast, "case %zu", i);
  }
  tc_csv_opts nan_null = {0, 0, 1, NAN};
  cr_assert_eq(s_csv_read("1,,3\n", &nan_null, &rows, &cols, v, 16, msg, sizeof msg), TR_OK);
  cr_assert(isnan(v[1]) && v[2] == 3);
  static const struct {
    const char *text;
    tc_csv_opts o;
    const char *msg;
  } bad[] = {
      {"1,2\n3,\n", {0}, "empty field in"},
      {"1,2\n3,\n", {0}, "line 2 field 2 (LOAD .. (NULL nan) reads empty fields as NaN)"},
      {"a,b\n1,2\n", {-1, 0, 0, 0}, "bad number 'a' in"},      /* HEADER false */
      {"1,2,x\n3,4,5\n", {0}, "bad number 'x'"},               /* not a header: a number */
      {"1,2,x\n3,4,5\n", {0}, "(if the first line names the columns: LOAD .. (HEADER))"},
      {"a,b,c\n1,2\n", {0}, "line 2 has 2 fields, expected 3 (as many as the header line names)"},
      {"name\n", {0}, "bad number 'name'"},                    /* a header and nothing */
      {"name\n", {1, 0, 0, 0}, "has a header line but no data"},
      {"1;2\n3;4\n", {-1, ',', 0, 0}, "bad number '1;2'"},
      {"\"a\",\"b\"\n\"1,2\n", {0}, "a quoted field on line 2 of CSV"},
      {"\"a\",\"b\"\n\"1,2\n", {0}, "is never closed"},
      {"\"a\",\"b\"\n1,2\n3,\"x\"\n", {0}, "bad number 'x' in"},
      {"\"a\",\"b\"\n1,2\n3,\"x\"\n", {0}, "line 3 field 2 ('b')"},
      {"a, weight ,c\n1,2,3\n4,-,6\n", {0}, "bad number '-' in "},
      {"a, weight ,c\n1,2,3\n4,-,6\n", {0}, "line 3 field 2 ('weight')"},
      {"\"kg, net\";b\n;2\n", {0}, "line 2 field 1 ('kg, net')"},
      {"\"a\",\"b\nc\"\n1,2\n3,\"x\"\n", {0}, "line 4 field 2 ('b?c')"}, /* the record's lines counted */
      {"\"a\",\"b\"\n1,\"\"\n", {0}, "empty field"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_neq(s_csv_read(bad[i].text, &bad[i].o, &rows, &cols, v, 16, msg, sizeof msg), TR_OK,
                  "case %zu", i);
    cr_assert(strstr(msg, bad[i].msg), "case %zu: '%s' lacks '%s'", i, msg, bad[i].msg);
  }
}

/* Open text as a one-line CSV of type dt: the value, or NAN on failure
** (with the message in msg). */
static double s_csv_value(const char *text, tr_dtype dt, char *msg, size_t n) {
  const char *p = tf_path("num.csv");
  tc_array a;
  tr_err err;
  double v = NAN;
  tf_write(p, text, strlen(text));
  msg[0] = '\0';
  if (tc_array_open(p, dt, NULL, &a, &err) != TR_OK) {
    snprintf(msg, n, "%s", err.msg);
    cr_assert_null(a.data);
    return NAN;
  }
  cr_assert_eq(a.rank, 1);
  v = dt == TR_F32 ? (double)*(float *)a.data : *(double *)a.data;
  tc_array_close(&a);
  return v;
}

/* Numbers are decimal or inf/nan spelled out: strtod's hexadecimal and its
** inf for an overflowing literal are errors naming file, line and column. */
Test(array, csv_numbers) {
  const char *p = tf_path("num.csv");
  char msg[1100], want[1100];
  struct {
    const char *text;
    double want; /* NAN: expect an error */
  } ok[] = {{"1.5", 1.5},   {"-2", -2},       {"+.5", 0.5},  {"5.", 5},
            {"1E3", 1000},  {"2.5e-1", 0.25}, {"007", 7},    {"1e308", 1e308},
            {"1e-400", 0},  {"-1e-400", -0.0}, {"inf", INFINITY},
            {"-Infinity", -INFINITY}, {"+INF", INFINITY}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    double v = s_csv_value(ok[i].text, TR_F64, msg, sizeof msg);
    cr_assert_eq(v, ok[i].want, "'%s': %g (%s)", ok[i].text, v, msg);
  }
  cr_assert(signbit(s_csv_value("-1e-400", TR_F64, msg, sizeof msg)));
  cr_assert(s_csv_value("4.9e-324", TR_F64, msg, sizeof msg) > 0, "%s", msg); /* subnormal */
  cr_assert(isnan(s_csv_value("nan", TR_F64, msg, sizeof msg)) && !msg[0], "%s", msg);
  cr_assert(isnan(s_csv_value("-NaN", TR_F32, msg, sizeof msg)) && !msg[0], "%s", msg);
  cr_assert_eq(s_csv_value("1e-50", TR_F32, msg, sizeof msg), 0, "%s", msg);
  cr_assert_eq(s_csv_value("1e39", TR_F64, msg, sizeof msg), 1e39, "%s", msg);

  const char *bad[] = {"0x10", "0X1p3", "-0x1", "1e", "1e+", ".", "-", "e5", "1.2.3",
                       "nan(1)", "infin", "1_000", "1e5x", "in"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    s_csv_value(bad[i], TR_F64, msg, sizeof msg);
    cr_assert(strstr(msg, "bad number"), "'%s' was accepted (%s)", bad[i], msg);
  }
  s_csv_value("1,2\n3, 0x10\n", TR_F64, msg, sizeof msg);
  snprintf(want, sizeof want, "bad number '0x10' in %s line 2 field 2", p);
  cr_assert_str_eq(msg, want);
  s_csv_value("1e999", TR_F64, msg, sizeof msg);
  snprintf(want, sizeof want, "number '1e999' is too large for f64 in %s line 1 field 1", p);
  cr_assert_str_eq(msg, want);
  s_csv_value("1,2\n3,-1e999\n", TR_F32, msg, sizeof msg);
  cr_assert(strstr(msg, "'-1e999' is too large for f32"), "%s", msg);
  cr_assert(strstr(msg, "line 2 field 2"), "%s", msg);
  s_csv_value("1e39", TR_F32, msg, sizeof msg);
  cr_assert(strstr(msg, "'1e39' is too large for f32"), "%s", msg);
  s_csv_value("1,,2", TR_F64, msg, sizeof msg);
  cr_assert(strstr(msg, "empty field in"), "%s", msg);
  cr_assert(strstr(msg, "line 1 field 2"), "%s", msg);
}

/* tc_array_write: runs of a created array's elements, in any order.  A
** large .npy starts its data on a page, so that runs on pages go to the
** disk past the page cache (filling fresh page cache pages cost a SAVE a
** quarter of its time here), where the file system takes O_DIRECT;
** others, and a CSV's, are stored as they are. */
Test(array, runs_written_past_the_page_cache) {
  tc_array a;
  tr_err err;
  const int64_t rows = 1100, cols = 1024; /* 4.3 MiB of f32: a large array */
  int64_t sh[2] = {rows, cols};
  const char *p = tf_path("big.npy");
  float *buf = NULL;
  cr_assert_eq(posix_memalign((void **)&buf, TR_PAGE, (size_t)(300 * cols) * sizeof *buf), 0);
  cr_assert_eq(tc_array_create(p, TR_F32, 2, sh, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq((uintptr_t)a.data % TR_PAGE, 0, "data not on a page");
  /* bands of 300 rows, last first; then a run off the pages */
  for (int64_t r0 = 900; r0 >= 0; r0 -= 300) {
    int64_t nr = r0 + 300 > 1000 ? 1000 - r0 : 300;
    for (int64_t i = 0; i < nr * cols; i++) buf[i] = (float)(r0 * cols + i);
    cr_assert_eq(tc_array_write(&a, r0 * cols, buf, nr * cols, &err), TR_OK, "%s", err.msg);
  }
  for (int64_t i = 0; i < 100 * cols - 1; i++) buf[i] = (float)(1000 * cols + 1 + i);
  cr_assert_eq(tc_array_write(&a, 1000 * cols + 1, buf, 100 * cols - 1, &err), TR_OK, "%s", err.msg);
  float first = 1000.0f * (float)cols;
  cr_assert_eq(tc_array_write(&a, 1000 * cols, &first, 1, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_array_write(&a, rows * cols - 1, buf, 2, &err), TR_EINVAL, "a run past the end");
  cr_assert(strstr(err.msg, "outside"), "%s", err.msg);
  cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
  tc_array_close(&a);
  int fd = open(tf_path("probe"), O_WRONLY | O_CREAT | O_DIRECT, 0600);
  if (fd >= 0) { /* the page-aligned bands (all but the last 100 rows) past the cache */
    close(fd);
    cr_assert_leq(tf_cached_pages(p), 1 + (size_t)(100 * cols * 4) / TR_PAGE + 1);
  }
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  for (int64_t i = 0; i < rows * cols; i++)
    if (((float *)a.data)[i] != (float)i) cr_assert_fail("element %lld: %g", (long long)i, ((float *)a.data)[i]);
  tc_array_close(&a);
  /* a CSV's runs, into its buffer */
  int64_t sh2[2] = {2, 3};
  float v[6] = {1, 2, 3, 4, 5, 6};
  p = tf_path("small.csv");
  cr_assert_eq(tc_array_create(p, TR_F32, 2, sh2, &a, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_array_write(&a, 3, v + 3, 3, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_array_write(&a, 0, v, 3, &err), TR_OK, "%s", err.msg);
  cr_assert_eq(tc_array_commit(&a, &err), TR_OK, "%s", err.msg);
  tc_array_close(&a);
  cr_assert_eq(tc_array_open(p, TR_F32, NULL, &a, &err), TR_OK, "%s", err.msg);
  for (int i = 0; i < 6; i++) cr_assert_eq(((float *)a.data)[i], v[i]);
  tc_array_close(&a);
  free(buf);
}
