/*
** kernels/kernels.h - chunk kernels behind one table.
**
** The engine never calls BLAS (or CUDA) directly: it asks tk_backend_get()
** for a table of function pointers and calls through it.  Every entry has a
** portable reference implementation in C (kernels/reference.c); as BLIS
** does, every table starts as the reference and a backend such as OpenBLAS
** (kernels/blas.c) sets the entries it serves over it (kernels/table.c).
** Tests compare each backend with the reference on random chunks.
**
** Kernels are single-threaded: the engine runs many chunk tasks at once on
** its thread pool.  A kernel never prints and never allocates more than a
** small, bounded scratch (except where noted).
**
** Cancellation: contract, combine, map, copy and fill_random take a cancel
** token (NULL: never cancelled) and poll it inside their loops, at least
** every millisecond or so of work; once it is set they return TR_EINTR with
** their output partly written.  What cannot poll runs to its end: a device
** kernel, and gemm (a BLAS call cannot be stopped), which takes no token;
** the engine splits products larger than the backend's gemm_panel into
** panels instead and polls between them.
*/
#ifndef TRADB_KERNELS_H
#define TRADB_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/opcodes.h"
#include "util/util.h"

#define TK_MAX_LABELS 16 /* distinct labels in one chunk task */
#define TK_MAX_INPUTS 16 /* tensor references in one chunk task */
#define TK_MAX_PROG 64   /* instructions in one scalar program */

/*
** Scalar programs.  The scalar function of an EinSum (the join function of
** the TRA join) is compiled to a short postfix program evaluated on a stack
** of doubles or floats.  TK_OP_INPUT pushes the current element of input
** `arg`; TK_OP_CONST pushes `c`; binary ops pop b then a and push a op b;
** unary ops replace the top of the stack.  The opcodes, their names and
** what each computes are listed once, in kernels/opcodes.h.
*/
#define TK_OP_ENUM_(NAME, ...) TK_OP_##NAME,
typedef enum tk_opcode {
  TK_OPCODES(TK_OP_ENUM_, TK_OP_ENUM_, TK_OP_ENUM_, TK_OP_ENUM_)
} tk_opcode;
#undef TK_OP_ENUM_
#define TK_OP_COUNT_(...) +1
enum { TK_NOPCODES = 0 TK_OPCODES(TK_OP_COUNT_, TK_OP_COUNT_, TK_OP_COUNT_, TK_OP_COUNT_) };
#undef TK_OP_COUNT_

/* The opcode's name ("input", "const", "+", "relu"...: kernels/opcodes.h),
** for EXPLAIN; NULL if op is not an opcode. */
const char *tk_opcode_name(int op);
/* How many values op pops (0 to 3; every opcode pushes one), -1 if op is
** not an opcode. */
int tk_opcode_pops(int op);
/* The function (a unary one, TK_OP_NEG.., or TK_OP_WHERE) that a statement
** spells name, in ASCII letters of any case ("relu", "TANH", "where"), or
** -1 if there is none; tk_opcode_pops says how many arguments it takes. */
int tk_opcode_function(const char *name);

typedef struct tk_insn {
  int op;   /* a tk_opcode */
  int arg;  /* input index for TK_OP_INPUT */
  double c; /* constant for TK_OP_CONST */
} tk_insn;

typedef struct tk_prog {
  int n;                     /* number of instructions; 0 = empty program */
  tk_insn code[TK_MAX_PROG]; /* postfix code; must leave one value */
} tk_prog;

/* Evaluate a program on scalars (in[i] is input i).  Used by reference
** kernels and by tests; backends may use faster forms. */
double tk_prog_eval(const tk_prog *p, const double *in);
/* Maximum stack depth the program needs (for validation), -1 if invalid. */
int tk_prog_depth(const tk_prog *p);

/* How values are combined over aggregated labels (the TRA aggregation). */
typedef enum tk_agg { TK_AGG_NONE = 0, TK_AGG_SUM, TK_AGG_MAX, TK_AGG_MIN } tk_agg;

/*
** One chunk contraction, the kernel of a TRA join followed (within the
** chunk) by aggregation:
**
**   out[o_0..o_{nout-1}]  (agg)=  AGG over a_nout..a_{nlabels-1} of
**                                  prog(in_0[..], in_1[..], ...)
**
** Labels 0..nout-1 are the output labels, labels nout..nlabels-1 the
** aggregated ones.  Each label has an extent (its size within this chunk
** task).  Every operand is addressed by element strides per label: a label
** an input does not use has stride 0 (broadcast); a label an input uses on
** two axes (A[i,i], a diagonal) has the sum of the two axis strides.  So
** transposes, diagonals, broadcasts and batch labels need no special case.
**
** agg == TK_AGG_NONE requires nout == nlabels.
** accumulate == 0: out is overwritten with the result.
** accumulate == 1: out = agg(out, result) elementwise (agg NONE: overwrite),
**                  which is how the engine aggregates across chunk keys.
** All operands have the same dtype.
*/
typedef struct tk_contract {
  tr_dtype dtype;
  int nlabels;                       /* total labels in this task */
  int nout;                          /* leading labels that index out */
  int64_t extent[TK_MAX_LABELS];     /* size of each label in this task */
  int ninputs;                       /* operands referenced by prog */
  const void *in[TK_MAX_INPUTS];     /* operand base pointers */
  int64_t in_stride[TK_MAX_INPUTS][TK_MAX_LABELS]; /* element strides */
  void *out;                         /* result base pointer */
  int64_t out_stride[TK_MAX_LABELS]; /* element strides, labels < nout */
  tk_prog prog;                      /* scalar function of the operands */
  tk_agg agg;                        /* combine over aggregated labels */
  int accumulate;                    /* see above */
  const tr_cancel *cancel;           /* stop with TR_EINTR once set; NULL:
                                        never */
} tk_contract;

/* TR_OK if op is well formed (ranges, program, operands present), else
** TR_EINVAL or TR_ETYPE.  Every backend's contract checks this first. */
int tk_contract_check(const tk_contract *op);

/* Random distributions for fill. */
typedef enum tk_dist { TK_FILL_UNIFORM, TK_FILL_NORMAL } tk_dist;

/*
** A kernel backend.  Strides and leading dimensions are in elements,
** matrices are row-major.  Every function returns TR_OK or a TR_E* code.
*/
typedef struct tk_backend {
  const char *name; /* "reference", "openblas", "cuda" */

  /* C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b in [0, batch);
  ** op(X) is X or X^T (trans != 0); A[b] = a + b*stride_a, and so on. */
  int (*gemm)(tr_dtype dt, int transa, int transb,
              int64_t m, int64_t n, int64_t k, double alpha,
              const void *a, int64_t lda, int64_t stride_a,
              const void *b, int64_t ldb, int64_t stride_b,
              double beta, void *c, int64_t ldc, int64_t stride_c,
              int64_t batch);
  /* Multiply-adds (batch * m * n * k) that one gemm call does in well under
  ** 0.1 s on one core.  A gemm cannot be interrupted, so the engine splits
  ** larger products into panels of about this size and polls its cancel
  ** token between them.  0: never split. */
  int64_t gemm_panel;

  /* The upper triangle (diagonal included) of C = alpha * op(A) *
  ** op(A)^T + beta * C, C n x n, op(A) n x k (A^T when trans, A then
  ** k x n): a Gram matrix, X^T X, in half a gemm's multiply-adds.  The
  ** strictly lower triangle is left as it was: the engine copies the upper
  ** one across once the output chunk is summed.  NULL: the engine calls
  ** gemm with A twice. */
  int (*syrk)(tr_dtype dt, int trans, int64_t n, int64_t k, double alpha, const void *a,
              int64_t lda, double beta, void *c, int64_t ldc);

  /* General chunk contraction (see tk_contract). */
  int (*contract)(const tk_contract *op);

  /* dst[i] = agg(dst[i], src[i]) for i < n (TK_AGG_NONE copies). */
  int (*combine)(tr_dtype dt, tk_agg agg, void *dst, const void *src, int64_t n,
                 const tr_cancel *cancel);

  /* x[i] = prog(x[i]) in place for i < n; prog's input 0 is x[i]. */
  int (*map)(tr_dtype dt, const tk_prog *prog, void *x, int64_t n, const tr_cancel *cancel);

  /* Strided copy of a rank-`rank` box (rank <= TK_MAX_LABELS, so a box
  ** over a node's labels, not only a tensor's dimensions): dst[idx .
  ** dst_stride] = src[idx . src_stride] for idx < extent.  Used by tile, concat and
  ** re-chunking; both sides may be any strides (transposes too). */
  int (*copy)(tr_dtype dt, int rank, const int64_t *extent,
              void *dst, const int64_t *dst_stride,
              const void *src, const int64_t *src_stride, const tr_cancel *cancel);

  /* Fill a chunk of a tensor.  The chunk starts at global index `origin`
  ** and has extent `extent` (rank dims, row-major, contiguous in out); the
  ** whole tensor has shape `shape`.  Value of element g (global index) is a
  ** pure function of (seed, row-major linear index of g in shape), so the
  ** result does not depend on the chunking.  UNIFORM: p0 = lo, p1 = hi;
  ** NORMAL: p0 = mean, p1 = standard deviation. */
  int (*fill_random)(tr_dtype dt, tk_dist dist, double p0, double p1,
                     uint64_t seed, int rank, const int64_t *shape,
                     const int64_t *origin, const int64_t *extent, void *out,
                     const tr_cancel *cancel);

  /* Residency hints, for backends with memory of their own (a GPU); no-ops
  ** elsewhere.  keep(p, bytes): until release(p), the host buffer p changes
  ** only through this backend's entries (an operand chunk of a plan, or
  ** the chunk a task computes), so a copy of it on the device may serve
  ** later calls without copying it again.  release(p): p is about to be
  ** freed or reused.  release(NULL): the plan ends; drop every copy. */
  void (*keep)(const void *p, size_t bytes);
  void (*release)(const void *p);
} tk_backend;

/* The reference backend: every entry, portable C. */
const tk_backend *tk_reference(void);

/* A backend by name ("reference", "openblas", "cuda" where compiled in,
** "auto" = the best one for the device chosen with tk_device_select()),
** every entry filled; NULL if unknown. */
const tk_backend *tk_backend_get(const char *name);

/* Names of the backends compiled in, space-separated ("reference openblas"
** or "reference openblas cuda"). */
const char *tk_backends_compiled(void);

/*
** The accelerator (a CUDA GPU, device 0 of those CUDA_VISIBLE_DEVICES
** shows).  Without CUDA compiled in there is none.  The "cuda" backend runs
** on the host when there is none, so it is always safe to call.
*/
typedef struct tk_device_stats {
  uint64_t h2d_bytes; /* bytes copied host to device */
  uint64_t d2h_bytes; /* bytes copied device to host */
  double copy_s;      /* time the device spent in those copies */
  uint64_t gpu_calls; /* kernel calls run on the device */
  uint64_t cpu_calls; /* "cuda" calls run on the host (small, no fit) */
} tk_device_stats;

/* 1 if a device can be used, else 0.  buf (size bytes, may be NULL)
** receives its description ("NVIDIA H100 80GB HBM3, 79.2 GiB") or why
** there is none ("none (no CUDA-capable device is detected)"). */
int tk_device_info(char *buf, size_t size);

/* Which kernels "auto" picks: "gpu" (TR_ENOTFOUND if no device can be
** used), "cpu", or "auto" (the GPU when there is one, the default);
** TR_EINVAL for another word.  Call before the first tk_backend_get. */
int tk_device_select(const char *mode);

/* Device memory this process may hold for chunks and scratch (bytes;
** 0 = most of what is free when the device is first used).  Calls whose
** chunks do not fit run in pieces or on the host; they never fail for it. */
void tk_device_set_memory(size_t bytes);

/* Counters since the process started (all zero without a device). */
void tk_device_stats_get(tk_device_stats *out);

/* Smallest work (multiply-adds, program steps) a "cuda" call sends to the
** device, and the smallest buffer keep() holds there; 0 sends everything
** (tests).  Default: about a 256^3 product, 1 MiB. */
void tk_device_set_offload(int64_t min_work);

/* The kernels BLAS runs on this CPU (OpenBLAS's core name, "SkylakeX"). */
const char *tk_blas_core(void);
/* The OPENBLAS_CORETYPE a process should load OpenBLAS with, when OpenBLAS
** fell back to generic kernels below what this CPU runs (a CPU newer than
** the library); NULL when its own choice stands or OPENBLAS_CORETYPE is
** set.  OpenBLAS reads it only as it loads (see tk_blas_setenv). */
const char *tk_blas_core_wanted(void);
/* Sets in the environment what OpenBLAS should load with in a process that
** runs BLAS: OPENBLAS_CORETYPE where tk_blas_core_wanted names one, and
** OPENBLAS_THREAD_TIMEOUT unless it (or GOTO_THREAD_TIMEOUT) is set.
** OpenBLAS reads them only as it loads: 1 when this process's OpenBLAS
** loaded without something set here.  main() calls it first: a shell,
** which runs no BLAS, passes the settings to the local workers it starts;
** a worker re-executes itself when it returns 1. */
int tk_blas_setenv(void);

/* Let BLAS use nthreads threads in its own calls (1 while the engine runs
** chunk tasks in parallel; all cores for a single large task). */
void tk_set_blas_threads(int nthreads);

#endif /* TRADB_KERNELS_H */
