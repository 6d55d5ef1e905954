/*
** catalog/checksum.c - the checksum every chunk carries (XXH3_64bits), as
** fast as the CPU allows.
**
** Every chunk a task makes is hashed where it is made, and again by each
** worker that receives a replica of it, so a statement that writes N bytes
** hashes 2N with the default two replicas.  Debian's libxxhash is built
** for baseline x86-64 (SSE2): about 20 GB/s here, against 36-38 GB/s for
** the same function built for AVX2 (profiled: on attention's elementwise
** statements, hashing took nearly as much CPU as the kernels).  The AVX2
** build is compiled in this file only, with the target given to its
** functions alone, and called only when the CPU and the OS support AVX2;
** elsewhere the library's own function runs.  Both compute the same hash
** (XXH3's result does not depend on the vector unit), so chunk files and
** replicas from either are interchangeable.
*/
#include "config.h"
#include "catalog/catalog.h"

#include <xxhash.h>

/* The library's function, named before the inline build below renames it. */
static uint64_t s_portable(const void *data, size_t nbytes) {
  return (uint64_t)XXH3_64bits(data, nbytes);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define S_HAVE_AVX2 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
#include <immintrin.h>
#define XXH_INLINE_ALL
#define XXH_VECTOR 2 /* XXH_AVX2 */
#include <xxhash.h>
static uint64_t s_avx2(const void *data, size_t nbytes) {
  return (uint64_t)XXH3_64bits(data, nbytes);
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

/* __builtin_cpu_supports reads what the runtime found at start (a load),
** and says "avx2" only where the OS also saves the AVX state. */
uint64_t tc_checksum(const void *data, size_t nbytes) {
#ifdef S_HAVE_AVX2
  if (__builtin_cpu_supports("avx2")) return s_avx2(data, nbytes);
#endif
  return s_portable(data, nbytes);
}
