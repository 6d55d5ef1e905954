/*
** kernels/cuda_kernels.h - the CUDA kernels of kernels/cuda_kernels.cu
** (compiled by nvcc) as kernels/cuda.c (compiled by the C compiler) calls
** them.  Internal to kernels/.
*/
#ifndef TRADB_CUDA_KERNELS_H
#define TRADB_CUDA_KERNELS_H

#include <cuda_runtime_api.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How many partial results per output element a contraction with nouter
** output elements and ninner aggregated index tuples is split into (1: one
** thread per output element does the whole aggregation). */
int64_t tk_cu_parts(int64_t nouter, int64_t ninner);

/* Run op (a checked tk_contract whose in[] and out are device pointers) on
** stream st.  nouter and ninner as above, ninner 0 for an empty
** aggregation; with nparts > 1, partial holds nouter * nparts elements of
** scratch.  Returns cudaSuccess or the launch error. */
cudaError_t tk_cu_contract(const tk_contract *op, int64_t nouter, int64_t ninner,
                           int64_t nparts, void *partial, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif /* TRADB_CUDA_KERNELS_H */
