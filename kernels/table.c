/*
** kernels/table.c - backends by name.  A backend's table may leave entries
** NULL; the table handed out fills each from the next layer down (for
** openblas: its gemm, then the portable fast kernels, then the reference),
** so callers never test for missing entries.
*/
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "kernels/kernels.h"

/* The completed tables, built once; never written afterwards. */
static tk_backend s_openblas;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* Fill the NULL entries of t from lower. */
static void s_complete(tk_backend *t, const tk_backend *lower) {
  if (!t->gemm) t->gemm = lower->gemm;
  if (!t->contract) t->contract = lower->contract;
  if (!t->combine) t->combine = lower->combine;
  if (!t->map) t->map = lower->map;
  if (!t->copy) t->copy = lower->copy;
  if (!t->fill_random) t->fill_random = lower->fill_random;
}

static void s_build(void) {
  s_openblas = *tk_openblas();
  s_complete(&s_openblas, tk_fast());
  s_complete(&s_openblas, tk_reference());
}

const tk_backend *tk_backend_get(const char *name) {
  if (!strcmp(name, "reference")) return tk_reference();
  if (!strcmp(name, "openblas") || !strcmp(name, "auto")) {
    pthread_once(&s_once, s_build);
    return &s_openblas;
  }
  return NULL;
}

const char *tk_backends_compiled(void) { return "reference openblas"; }
