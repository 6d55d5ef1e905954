/*
** util/grid.h - a tensor's description and the arithmetic of its chunk
** grid: how many chunks, which elements a chunk holds, chunk keys and
** their row-major numbers.  Pure arithmetic, shared by every stage (the
** catalog stores descriptions, the compiler and optimizer reason about
** grids, the executor and the workers cut and assemble chunks).
*/
#ifndef TRADB_UTIL_GRID_H
#define TRADB_UTIL_GRID_H

#include <stdint.h>
#include "util/util.h"

#define TR_NAME_MAX 64 /* tensor names: [A-Za-z_][A-Za-z0-9_]*, < 64 */
/* The most chunks one tensor may have: every stage walks a tensor's grid
** chunk by chunk (and the catalog keeps a row per stored chunk), so a grid
** beyond this is refused when the tensor is declared rather than running
** the shell out of memory at its first use. */
#define TR_MAX_CHUNKS ((int64_t)1 << 24)

/* A tensor: its catalog entry, and what every stage knows of it. */
typedef struct tr_tensor {
  int64_t id;                  /* catalog row id (0 before first commit) */
  char name[TR_NAME_MAX];      /* unique name */
  tr_dtype dtype;              /* element type */
  int rank;                    /* 0..TR_MAX_RANK */
  int64_t shape[TR_MAX_RANK];  /* extent of each dimension */
  int64_t chunk[TR_MAX_RANK];  /* chunk shape; edge chunks may be smaller */
  char format[16];             /* physical format, see tr_format_name() */
  int64_t version;             /* content version; 0 = declared, no chunks
                                  stored yet (reads as zeros) */
} tr_tensor;

/* Bytes of the whole tensor (a double: beyond 2^63 for shapes only
** declared). */
double tr_tensor_bytes(const tr_tensor *t);
/* Number of chunks along dimension d, and in total (-1 on overflow). */
int64_t tr_grid(const tr_tensor *t, int d);
int64_t tr_nchunks(const tr_tensor *t);
/* Extent of the chunk with key `key` along each dimension (edge chunks are
** smaller) written to ext (may be NULL); returns the number of elements. */
int64_t tr_chunk_extent(const tr_tensor *t, const int64_t *key, int64_t *ext);
/* Row-major linear number of a chunk key in the chunk grid, and back. */
int64_t tr_key_linear(const tr_tensor *t, const int64_t *key);
void tr_key_from_linear(const tr_tensor *t, int64_t lin, int64_t *key);
/* Step key (rank dimensions) to the next one in the box lo..hi (both
** included), the last dimension fastest; 0 once it has passed the last,
** key back at lo. */
int tr_key_next(int rank, int64_t *key, const int64_t *lo, const int64_t *hi);
/* Does every chunk of shape `inner` lie inside one chunk of shape `outer`
** of the same tensor (each inner extent divides the outer one)? */
int tr_chunk_nests(int rank, const int64_t *inner, const int64_t *outer);
/* The keys of t's chunks that the box of extent ext at element lo (ext >
** 0 in every dimension) overlaps: first..last, both included, to walk with
** tr_key_next (a chunk read in another chunk shape is made of them). */
void tr_chunks_under(const tr_tensor *t, const int64_t *lo, const int64_t *ext, int64_t *first, int64_t *last);
/* Physical format implied by shape and chunk shape: "single" (one chunk),
** "row_strip", "col_strip" (rank 2), or "tile". Returns a static string. */
const char *tr_format_name(const tr_tensor *t);

#endif /* TRADB_UTIL_GRID_H */
