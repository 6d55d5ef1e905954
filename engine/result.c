/*
** engine/result.c - what statements return: results made and freed in one
** place, and the warnings they carry.
*/
#include "config.h"
#include "engine/engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void te_result_free(te_result **pr) {
  if (!pr || !*pr) return;
  te_result *r = *pr;
  for (int i = 0; i < r->ncols; i++) free(r->colnames[i]);
  for (int i = 0; i < r->ncols * r->nrows; i++) free(r->cells[i]);
  free(r->colnames);
  free(r->cells);
  free(r->values);
  free(r->text);
  free(r->notice);
  free(r);
  *pr = NULL;
}

te_result *te_take_notice(te_engine *e, te_result *r) {
  char *n = td_take_notice(e->cluster);
  if (e->again) { /* first: the warnings of the run that counts follow */
    const char *more = "; the statement ran again\n";
    char *a = malloc(strlen(e->again) + strlen(more) + (n ? strlen(n) : 0) + 1);
    if (a) sprintf(a, "%s%s%s", e->again, more, n ? n : "");
    free(n);
    n = a;
  }
  if (!n) return r;
  if (!r && !(r = calloc(1, sizeof *r))) {
    free(n);
    return NULL;
  }
  free(r->notice); /* only this function sets it */
  r->notice = n;
  return r;
}

void te_dims_text(char *buf, size_t n, int rank, const int64_t *v, const char *sep) {
  size_t o = 0;
  buf[0] = '\0';
  for (int d = 0; d < rank && o < n; d++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? sep : "", (long long)v[d]);
}

/* Result with a table of ncols named columns. */
te_result *te_rows_new(int ncols, const char *const *names) {
  te_result *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->kind = TE_RES_ROWS;
  r->ncols = ncols;
  r->colnames = calloc((size_t)ncols, sizeof(char *));
  if (!r->colnames) {
    free(r);
    return NULL;
  }
  for (int i = 0; i < ncols; i++) r->colnames[i] = strdup(names[i]);
  return r;
}

int te_rows_add(te_result *r, const char *const *cells) {
  char **c = realloc(r->cells, sizeof(char *) * (size_t)(r->nrows + 1) * (size_t)r->ncols);
  if (!c) return TR_ENOMEM;
  r->cells = c;
  for (int i = 0; i < r->ncols; i++) c[r->nrows * r->ncols + i] = strdup(cells[i]);
  r->nrows++;
  return TR_OK;
}

te_result *te_text_result(char *text) {
  te_result *r = text ? calloc(1, sizeof *r) : NULL;
  if (!r) {
    free(text);
    return NULL;
  }
  r->kind = TE_RES_TEXT;
  r->text = text;
  return r;
}
