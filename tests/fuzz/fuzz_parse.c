/*
** tests/fuzz/fuzz_parse.c - libFuzzer target for the statement parser.
**
** The input is copied to a NUL-terminated buffer, split into statements
** with tp_statement_end() and each statement is parsed (and freed); then
** the whole buffer is parsed as one statement.  Besides the sanitizers'
** checks, a few invariants are asserted: a statement's length lies within
** the text, success yields a tree and failure a message and no tree.
** Built with clang by `make fuzz`; replayed over the kept corpus by
** tests/fuzz/replay.c under `make check`.
*/
#include "config.h"
#include "parse/parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Parse text[0, len) and check the result's invariants. */
static void parse_one(const char *text, size_t len) {
  tp_stmt *st = NULL;
  tr_err err;
  int rc;
  tr_clearerr(&err);
  rc = tp_parse(text, len, &st, &err);
  if (rc == TR_OK) {
    if (!st) abort();
    /* EXPLAIN [ANALYZE] COMMIT explains the open block: no expression */
    if (st->kind == TP_ST_ASSIGN || (st->kind == TP_ST_EXPLAIN && !st->block)) {
      if (!st->rhs || st->nout < 0 || st->nout > TR_MAX_RANK) abort();
    }
    if (st->rank < 0 || st->rank > TR_MAX_RANK) abort();
    if (memchr(st->name, '\0', sizeof st->name) == NULL) abort();
  } else {
    if (st || err.msg[0] == '\0' || strchr(err.msg, '\n')) abort();
    if (rc != TR_ESYNTAX && rc != TR_ENOMEM) abort();
  }
  tp_stmt_free(&st);
  tp_stmt_free(&st); /* safe twice */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  size_t off = 0, total;
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  total = strlen(buf);
  (void)tp_is_blank(buf);
  for (;;) {
    size_t n = tp_statement_end(buf + off);
    if (n == 0) {
      /* no complete statement left: if it ends inside a string, the
      ** offset named is a quote within what is left */
      long q = tp_open_quote(buf + off);
      if (q < -1 || (q >= 0 && ((size_t)q >= total - off || buf[off + (size_t)q] != '\''))) abort();
      break;
    }
    if (tp_open_quote(buf + off) != -1) abort(); /* a statement that completes is in no string */
    if (n > total - off || buf[off + n - 1] != ';') abort();
    if (!tp_is_blank(buf + off)) parse_one(buf + off, n);
    off += n;
  }
  parse_one(buf, total);
  /* also parse with the raw length (embedded NULs reach the lexer) */
  parse_one((const char *)data, size);
  free(buf);
  return 0;
}
