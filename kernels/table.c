/*
** kernels/table.c - backends by name.  Each table is built as BLIS builds
** a context (kernels/kernels_int.h): a copy of the reference, every entry
** filled, over which each backend sets the entries it serves: the portable
** fast kernels and cblas gemm for "openblas"; then, for "cuda", the CUDA
** entries, which receive the finished host table to fall back on.  Callers
** never test for missing entries.  Also which backend "auto" means: the
** device choice of tk_device_select(), and the device entry points of a
** build without CUDA.
*/
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels_int.h"

/* The tables, built once; never written afterwards. */
static tk_backend s_openblas;
#ifdef HAVE_CUDA
static tk_backend s_cuda;
#endif
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* What "auto" picks (tk_device_select). */
enum { S_AUTO, S_CPU, S_GPU };
static int s_mode = S_AUTO;

/* Every entry of t is set (callers never test). */
static int s_full(const tk_backend *t) {
  return t->name && t->gemm && t->contract && t->combine && t->map && t->copy &&
         t->fill_random && t->keep && t->release;
}

static void s_build(void) {
  s_openblas = *tk_reference();
  tk_fast_init(&s_openblas);
  tk_openblas_init(&s_openblas);
  tr_assert(s_full(&s_openblas));
#ifdef HAVE_CUDA
  s_cuda = s_openblas; /* the host kernels, which cuda keeps for its fallbacks */
  tk_cuda_init(&s_cuda);
  tr_assert(s_full(&s_cuda));
#endif
}

const tk_backend *tk_backend_get(const char *name) {
  pthread_once(&s_once, s_build);
  if (!strcmp(name, "reference")) return tk_reference();
  if (!strcmp(name, "openblas")) return &s_openblas;
#ifdef HAVE_CUDA
  if (!strcmp(name, "cuda")) return &s_cuda;
  if (!strcmp(name, "auto"))
    return s_mode != S_CPU && tk_device_info(NULL, 0) ? &s_cuda : &s_openblas;
#else
  if (!strcmp(name, "auto")) return &s_openblas;
#endif
  return NULL;
}

const char *tk_backends_compiled(void) {
#ifdef HAVE_CUDA
  return "reference openblas cuda";
#else
  return "reference openblas";
#endif
}

int tk_device_select(const char *mode) {
  if (!strcmp(mode, "auto")) s_mode = S_AUTO;
  else if (!strcmp(mode, "cpu")) s_mode = S_CPU;
  else if (!strcmp(mode, "gpu")) s_mode = S_GPU;
  else return TR_EINVAL;
  return s_mode == S_GPU && !tk_device_info(NULL, 0) ? TR_ENOTFOUND : TR_OK;
}

#ifndef HAVE_CUDA
int tk_device_info(char *buf, size_t size) {
  if (buf && size) snprintf(buf, size, "none (built without CUDA)");
  return 0;
}

void tk_device_set_memory(size_t bytes) { (void)bytes; }

void tk_device_stats_get(tk_device_stats *out) { memset(out, 0, sizeof *out); }

void tk_device_set_offload(int64_t min_work) { (void)min_work; }
#endif
