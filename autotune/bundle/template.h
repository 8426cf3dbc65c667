/* autotune_bundle.h: the tuned kernels of one GPU, as `autotune export --format bundle` wrote them.
 *
 * Self-contained C99 and C++ (link with -lm in C). Nothing here calls CUDA: a program loads an
 * entry's `kernel_file` (relative to the bundle folder) with cuModuleLoad, takes `kernel_name` with
 * cuModuleGetFunction and launches it as this header describes (examples/cpp/ in the autotune
 * repository does all of it with the driver API; docs/deploy.md explains every field).
 *
 *   const autotune_entry *e = autotune_find("gemv", "float16", m, n, 0, 0);
 *   autotune_launch launch;  autotune_launch_for(e, m, n, 0, sm_count, &launch);
 *   autotune_args args;      autotune_bind(e, &args, m, n, 0, A, x, y, 1.0f, 0.0f, workspace, counters);
 *   cuLaunchKernelEx(&config built from launch, function, args.params, NULL);
 *
 * Every array is row-major and must start at a 16-byte aligned address (cuMemAlloc's are). */
#ifndef AUTOTUNE_BUNDLE_H
#define AUTOTUNE_BUNDLE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* @CONSTANTS@ */

/* Kernel families (autotune/ops/): which rules say whether an entry's config runs a shape, and
 * how its launch geometry follows from the shape. A transposed GEMV of 16 columns or more runs the
 * narrow family, one of 8 or fewer the tall family, one of 9 to 15 the skinny GEMM family as the
 * one-row GEMM (1 x n) = (1 x m) A (same arguments). The strips family, which narrow replaced, keeps
 * its constant and rules, but the look-up (autotune_family_for) no longer picks it: an entry of it
 * never runs. */
enum {
  AUTOTUNE_FAMILY_GEMV = 1,
  AUTOTUNE_FAMILY_SKINNY = 2,
  AUTOTUNE_FAMILY_SKINNY_TC = 3,
  AUTOTUNE_FAMILY_SIMT = 4,
  AUTOTUNE_FAMILY_MMA = 5,
  AUTOTUNE_FAMILY_WGMMA = 6,
  AUTOTUNE_FAMILY_STRIPS = 7,
  AUTOTUNE_FAMILY_NARROW = 8,
  AUTOTUNE_FAMILY_TALL = 9
};

/* What runs an entry. Every entry of this format runs one of the kernels in the bundle. A cuBLAS
 * entry (a cuBLASLt algorithm in place of a kernel file) is reserved for when autotune tunes
 * cuBLAS too: a program that meets a backend it does not know must skip the entry. */
enum { AUTOTUNE_BACKEND_KERNEL = 0, AUTOTUNE_BACKEND_CUBLAS = 1 };

enum { AUTOTUNE_FLOAT32 = 0, AUTOTUNE_FLOAT16 = 1, AUTOTUNE_BFLOAT16 = 2 };

/* A config's parameters, by the names the tuner gives them; 0 where the family has no such
 * parameter. What each means: the family's module in autotune/ops/. */
typedef struct autotune_config {
  /* @CONFIG_FIELDS@ */
} autotune_config;

/* One launch: cuLaunchKernelEx's grid, block and dynamic shared memory, and the split-K scratch
 * the kernel needs (0: none). Scratch must be zero before the first launch; the kernels leave it
 * zero, so one zeroed buffer serves every later launch on the same stream. */
typedef struct autotune_launch {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes; /* above 0: set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first */
  uint64_t workspace_floats; /* float partial sums, passed as the `workspace` argument */
  uint64_t counters;         /* uint32 arrival counters, passed as the `counters` argument */
} autotune_launch;

/* A TMA box: rows x cols elements of a row-major operand, swizzled over swizzle_bytes (0: none). */
typedef struct autotune_box {
  uint32_t rows, cols, swizzle_bytes;
} autotune_box;

/* One tuned problem of the GPU: its best config and how to run it. */
typedef struct autotune_entry {
  int index;               /* position in autotune_entries and in manifest.json's "entries" */
  const char *op;          /* "gemv" or "gemm" */
  const char *dtype;       /* "float32", "float16" or "bfloat16": every array, alpha/beta are float */
  int dtype_code;          /* AUTOTUNE_FLOAT32, ... */
  int m, n, k, trans;      /* the tuned problem (k = 0 for a GEMV; trans: y = A^T x) */
  int family;              /* AUTOTUNE_FAMILY_* */
  const char *family_name; /* "gemv", "skinny", ..., "strips", "narrow", "tall" */
  int backend;             /* AUTOTUNE_BACKEND_KERNEL */
  const char *kernel_file; /* relative to the bundle folder: a cubin or a fatbin */
  const char *kernel_name; /* the extern "C" kernel in it */
  const char *arg_types;   /* the kernel's parameters: P a device address, i an int32, f a float */
  int swap_inputs;         /* 1: the kernel takes (x, A, y), not (A, x, y) (the transposed GEMV) */
  uint32_t cluster[3];     /* blocks per thread-block cluster, compiled into the kernel (no launch attribute) */
  int programmatic;        /* 1: launch with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 1 */
  int operand_maps;        /* 1: TMA kernel; pass its tensor maps (autotune_tensor_maps) as `workspace` */
  autotune_box a_box, b_box; /* the TMA boxes of A and B (operand_maps only) */
  autotune_launch launch;  /* at the tuned problem, on AUTOTUNE_BUNDLE_SM_COUNT SMs */
  double time_us;          /* its measured time on AUTOTUNE_BUNDLE_GPU */
  autotune_config config;
} autotune_entry;

/* @ENTRIES@ */

/* ---- shape rules: mirror the parameter spaces of autotune/ops/ ---- */

static inline int64_t autotune_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t autotune_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t autotune_max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The smallest power of two not below v (1 for v <= 1). */
static inline int64_t autotune_pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

static inline int64_t autotune_itemsize(int dtype_code) { return dtype_code == AUTOTUNE_FLOAT32 ? 4 : 2; }

/* Whether a transposed GEMV of m rows and n columns is tall and narrow enough for the strips family
 * (autotune/ops/gemv/strips.py: serves). */
static inline int autotune_strips_serve(int64_t m, int64_t n) {
  return n >= AUTOTUNE_STRIPS_MIN_N && n <= AUTOTUNE_STRIPS_MAX_N && m >= (int64_t)AUTOTUNE_STRIPS_ROWS_PER_COLUMN * n;
}

/* Whether a transposed GEMV of n columns is wide enough for the narrow family (narrow.py: serves). */
static inline int autotune_narrow_serve(int64_t n) { return n >= AUTOTUNE_NARROW_MIN_N; }

/* Whether a transposed GEMV of n columns is narrow enough for the tall family (tall.py: serves). */
static inline int autotune_tall_serve(int64_t n) { return n <= AUTOTUNE_TALL_MAX_N; }

/* The family that serves a problem on this GPU (autotune/ops/gemm/__init__.py: family; the transposed
 * GEMV's: autotune/ops/gemv/transposed.py). */
static inline int autotune_family_for(int gemm, int dtype_code, int64_t m, int64_t n, int64_t k, int trans) {
  if (!gemm) {
    if (!trans) return AUTOTUNE_FAMILY_GEMV;
    if (autotune_tall_serve(n)) return AUTOTUNE_FAMILY_TALL;
    return autotune_narrow_serve(n) ? AUTOTUNE_FAMILY_NARROW : AUTOTUNE_FAMILY_SKINNY;
  }
  if (m <= AUTOTUNE_SKINNY_MAX_M) {
    return m >= AUTOTUNE_TC_MIN_M && dtype_code != AUTOTUNE_FLOAT32 ? AUTOTUNE_FAMILY_SKINNY_TC : AUTOTUNE_FAMILY_SKINNY;
  }
  if (dtype_code == AUTOTUNE_FLOAT32) return AUTOTUNE_FAMILY_SIMT;
  /* wgmma needs 16-byte rows of A and B: K long, and B's N long where it is stored K x N (trans: N x K). */
  if (AUTOTUNE_BUNDLE_WGMMA && k % 8 == 0 && (trans || n % 8 == 0)) return AUTOTUNE_FAMILY_WGMMA;
  return AUTOTUNE_FAMILY_MMA;
}

/* Rows of K each split of a streaming kernel gets: a whole number of its steps. */
static inline int64_t autotune_rows_per_split(int64_t k, int64_t split, int64_t step) {
  return autotune_ceil_div(autotune_ceil_div(k, split), step) * step;
}

/* autotune/ops/gemm/shared.py: split_k_reason (1: the split is allowed). */
static inline int autotune_split_ok(int64_t m, int64_t k, int64_t itemsize, int64_t split, int64_t step,
                                    int64_t tiles, int64_t cluster) {
  if (cluster > 1 && split != cluster) return 0;
  if (split == 1) return 1;
  if ((split - 1) * autotune_rows_per_split(k, split, step) >= k) return 0;
  if (cluster > 1) return 1;
  if (tiles * (split / 2) >= 1024) return 0;
  if (12 * split * m > k * itemsize) return 0;
  return 1;
}

/* Whether vec is 1 or one of the two widest loads (at most max_bytes) that divide n: the skinny
 * families' choices of vec. */
static inline int autotune_two_widest_ok(int64_t vec, int64_t n, int64_t itemsize, int64_t max_bytes) {
  static const int64_t widths[4] = {1, 2, 4, 8};
  int64_t fits[4];
  int count = 0, i;
  if (vec == 1) return 1;
  for (i = 0; i < 4; ++i) {
    if (widths[i] * itemsize <= max_bytes && (widths[i] == 1 || n % widths[i] == 0)) fits[count++] = widths[i];
  }
  for (i = count - 2 < 0 ? 0 : count - 2; i < count; ++i) {
    if (fits[i] == vec) return 1;
  }
  return 0;
}

/* The widest of those choices (the vec a skinny_tc TMA config keeps). */
static inline int64_t autotune_widest_vec(int64_t n) {
  return n % 8 == 0 ? 8 : n % 4 == 0 ? 4 : n % 2 == 0 ? 2 : 1;
}

static inline int64_t autotune_gemv_split_vectors(const autotune_config *c, int64_t n) {
  return autotune_ceil_div(autotune_ceil_div(n / c->vec, c->split), c->lanes) * c->lanes;
}

static inline int autotune_gemv_runs(const autotune_config *c, int64_t n, int64_t itemsize) {
  int64_t x_bytes, cluster_sums;
  if (c->vec != 1 && n % c->vec) return 0;
  if (c->split > 1 && (int64_t)c->split * c->lanes > n / c->vec) return 0;
  x_bytes = c->x_smem ? autotune_gemv_split_vectors(c, n) * c->vec * itemsize : 0;
  cluster_sums = c->cluster > 1 ? (int64_t)(c->block / c->lanes) * c->rows * 4 : 0;
  return x_bytes + cluster_sums <= AUTOTUNE_GEMV_MAX_SHARED_BYTES;
}

/* A skinny tile's columns of C: nt*vec for B stored K x N, nt*unroll (rows of W) for N x K (b_nk). */
static inline int64_t autotune_skinny_columns(const autotune_config *c, int b_nk) {
  return (int64_t)c->nt * (b_nk ? c->unroll : c->vec);
}

static inline int autotune_skinny_runs(const autotune_config *c, int64_t m, int64_t n, int64_t k, int64_t itemsize,
                                       int b_nk) {
  int64_t top = autotune_pow2_ceil(autotune_min64(m, AUTOTUNE_SKINNY_MAX_M));
  int64_t step = (int64_t)c->kw * (b_nk ? c->vec : c->unroll), half = c->nt / 2, tiles;
  if (m > AUTOTUNE_SKINNY_MAX_M) return 0;
  if (!autotune_two_widest_ok(c->vec, b_nk ? k : n, itemsize, 16)) return 0;
  if (c->mt < top / 2 || c->mt > top) return 0;
  if (b_nk) { /* skinny.py: _nk_shape_reason */
    if (c->unroll > 1 && c->unroll / 2 >= n) return 0;
    if (half >= AUTOTUNE_SKINNY_MIN_NT && half * c->kw >= 32 && half * c->unroll >= n) return 0;
    if (step > k) return 0;
    tiles = autotune_ceil_div(m, c->mt) * autotune_ceil_div(n, autotune_skinny_columns(c, 1));
    return autotune_split_ok(m, k, itemsize, c->split, step, tiles, c->cluster);
  }
  if (c->nt > 32 && (int64_t)(c->nt / 2) * c->vec >= n) return 0;
  if (c->nt < 32 && (int64_t)32 * c->vec <= n) return 0;
  if (step > k) return 0;
  tiles = autotune_ceil_div(m, c->mt) * autotune_ceil_div(n, autotune_skinny_columns(c, 0));
  return autotune_split_ok(m, k, itemsize, c->split, step, tiles, c->cluster);
}

static inline int autotune_skinny_tc_runs(const autotune_config *c, int64_t m, int64_t n, int64_t k, int64_t itemsize,
                                          int b_nk) {
  /* B's rows are N long (K x N) or K long (N x K, b_nk); a warp's slice covers 16 rows of K, 32 for
   * N x K loaded 16 bytes at a time (skinny_tc.py: slice_rows). */
  int64_t columns = (int64_t)64 * c->wn, row = b_nk ? k : n, slice = b_nk && c->vec == 8 ? 32 : 16;
  int64_t step = c->stages ? 64 : slice * c->kw * c->unroll;
  if (m > AUTOTUNE_SKINNY_MAX_M) return 0;
  if (!autotune_two_widest_ok(c->vec, row, itemsize, 16)) return 0;
  if (c->stages && !(k % 8 == 0 && row % 8 == 0 && AUTOTUNE_BUNDLE_CLUSTERS)) return 0;
  if (c->wn > 1 && columns / 2 >= n) return 0;
  if ((int64_t)c->kw * c->unroll > 1 && step > autotune_max64(k, slice)) return 0;
  if (c->stages) {
    int64_t tiles = autotune_ceil_div(autotune_rows_per_split(k, c->split, step), 64);
    if (c->vec != autotune_widest_vec(row)) return 0;
    if (c->stages > autotune_max64(2, tiles)) return 0;
  }
  return autotune_split_ok(m, k, itemsize, c->split, step, autotune_ceil_div(n, columns), c->cluster);
}

/* The strips family (strips.py: _reason) on a transposed GEMV of m rows and n columns. */
static inline int autotune_strips_runs(const autotune_config *c, int64_t m, int64_t n, int64_t itemsize) {
  int64_t words = c->vec > 0 ? c->width / c->vec : 0, loaded = autotune_max64(1, c->vec * itemsize / 4);
  int64_t registers = (int64_t)c->unroll * (loaded + 1) + c->vec + AUTOTUNE_STRIPS_REGISTER_BASE;
  if (!autotune_strips_serve(m, n) || !autotune_two_widest_ok(c->vec, n, itemsize, 16)) return 0;
  if (words == 0 || words > c->block || c->block % words) return 0;
  if (c->width > AUTOTUNE_STRIPS_MIN_WIDTH && c->width / 2 >= n) return 0;
  return registers <= autotune_min64(AUTOTUNE_MAX_REGISTERS_PER_THREAD, AUTOTUNE_REGISTERS_PER_SM / c->block);
}

/* Its contiguous shares of the rows (strips.py: splits): about per_sm blocks an SM over all strips,
 * none smaller than what a block's teams read in one step. */
static inline int64_t autotune_strips_splits(const autotune_config *c, int64_t m, int64_t n, int sm_count) {
  int64_t strips = autotune_ceil_div(n, c->width), teams = (int64_t)c->block * c->vec / c->width;
  int64_t most = autotune_max64(1, m / (teams * c->unroll));
  return autotune_max64(1, autotune_min64(most, (int64_t)c->per_sm * sm_count / strips));
}

/* The wide body's team (narrow.py: team_of): the loads of vec elements of one of the row's bands. */
static inline int64_t autotune_wide_team(const autotune_config *c, int64_t n) {
  return autotune_ceil_div(n / c->vec, c->bands);
}

/* The narrow family (narrow.py: _reason) on a transposed GEMV of n columns: a team of width / vec
 * threads, a power of two up to a warp, reads a row of a strip; a lean kernel takes its fixed registers.
 * With bands (the wide body), a team of up to the block reads a row of one of `bands` bands. */
static inline int autotune_narrow_runs(const autotune_config *c, int64_t n, int64_t itemsize) {
  int64_t words = c->vec > 0 ? c->width / c->vec : 0, loaded = autotune_max64(1, c->vec * itemsize / 4);
  int64_t registers = c->lean ? AUTOTUNE_NARROW_LEAN_REGISTERS
                              : (int64_t)c->unroll * (loaded + 1) + c->vec + AUTOTUNE_NARROW_REGISTER_BASE;
  if (!autotune_narrow_serve(n) || !autotune_two_widest_ok(c->vec, n, itemsize, 16)) return 0;
  if (c->bands > 0) {
    if (c->lean || c->bands > n / c->vec || autotune_wide_team(c, n) > c->block) return 0;
    return registers <= autotune_min64(AUTOTUNE_MAX_REGISTERS_PER_THREAD, AUTOTUNE_REGISTERS_PER_SM / c->block);
  }
  if (words == 0 || c->width % c->vec || 32 % words || c->block <= 0 || c->block % 32) return 0;
  if (c->width > AUTOTUNE_NARROW_MIN_WIDTH && c->width / 2 >= n) return 0;
  return registers <= autotune_min64(AUTOTUNE_MAX_REGISTERS_PER_THREAD, AUTOTUNE_REGISTERS_PER_SM / c->block);
}

/* Its contiguous shares of the rows (narrow.py: splits): one for per_sm 0, else the count nearest
 * per_sm blocks an SM over all strips, none smaller than what a block's teams read in one step. */
static inline int64_t autotune_narrow_splits(const autotune_config *c, int64_t m, int64_t n, int sm_count) {
  int64_t strips = autotune_ceil_div(n, c->width), teams = (int64_t)c->block * c->vec / c->width;
  if (c->bands > 0) { /* the wide body: bands of whole loads, the block's teams of one band's loads */
    int64_t team = autotune_wide_team(c, n);
    strips = autotune_ceil_div(n / c->vec, team), teams = c->block / team;
  }
  int64_t most = autotune_max64(1, m / (teams * c->unroll));
  if (c->per_sm == 0) return 1;
  return autotune_max64(1, autotune_min64(most, ((int64_t)c->per_sm * sm_count + strips / 2) / strips));
}

/* The tall family (tall.py: _reason) on a transposed GEMV of m rows and n columns: chunks of `rows`
 * rows, no more than half of them past m, the chunks in flight within the bytes a thread holds, and
 * depth pinned where the grid is one cluster. */
static inline int autotune_tall_runs(const autotune_config *c, int64_t m, int64_t n, int64_t itemsize) {
  if (!autotune_tall_serve(n) || c->rows < 1 || c->block < 32 || c->block % 32 || c->depth < 1) return 0;
  if (c->rows > 1 && c->rows / 2 >= m) return 0;
  if (c->cluster > 1 && c->depth != 1) return 0; /* one cluster: depth pinned */
  return (int64_t)c->rows * (n + 1) * itemsize * c->unroll <= AUTOTUNE_TALL_MOST_BYTES_IN_FLIGHT;
}

/* Its blocks (tall.py: blocks): about `depth` chunks of `rows` rows a thread, at most one wave. */
static inline int64_t autotune_tall_blocks(const autotune_config *c, int64_t m, int sm_count) {
  int64_t chunks = autotune_max64(1, m / c->rows);
  int64_t wanted = autotune_ceil_div(chunks, (int64_t)c->block * c->depth);
  return autotune_max64(1, autotune_min64(wanted, (int64_t)sm_count * (AUTOTUNE_MAX_THREADS_PER_SM / c->block)));
}

static inline int autotune_simt_runs(const autotune_config *c, int64_t n, int64_t k) {
  return k % c->vec == 0 && n % c->vec == 0;
}

/* The tensor-core families' rules on the output tile and the tile order (shared.py). */
static inline int autotune_tiles_ok(const autotune_config *c, int64_t m, int64_t n) {
  if (c->bm > autotune_max64(64, autotune_pow2_ceil(m)) || c->bn > autotune_max64(64, autotune_pow2_ceil(n))) return 0;
  return !(c->swizzle > 1 && c->swizzle > autotune_pow2_ceil(autotune_ceil_div(m, c->bm)));
}

static inline int autotune_mma_runs(const autotune_config *c, int64_t m, int64_t n, int64_t k, int b_nk) {
  /* Copies run along A's rows (K) and B's (N for K x N, K for N x K: b_nk). */
  int64_t k_tiles = autotune_ceil_div(k, c->bk), widest = 1, row = b_nk ? k : n;
  if (k % 8 == 0 && row % 8 == 0) widest = 8;
  else if (k % 4 == 0 && row % 4 == 0) widest = 4;
  else if (k % 2 == 0 && row % 2 == 0) widest = 2;
  if (!autotune_tiles_ok(c, m, n)) return 0;
  if (c->bk > autotune_max64(32, autotune_pow2_ceil(k))) return 0;
  if (c->stages > autotune_max64(2, k_tiles + 1)) return 0;
  if (c->vec != 1 && c->vec != widest) return 0;
  if (c->split > 1) {
    if (autotune_ceil_div(m, c->bm) * autotune_ceil_div(n, c->bn) >= AUTOTUNE_MMA_SPLIT_MAX_TILES) return 0;
    if ((c->split - 1) * autotune_ceil_div(k_tiles, c->split) >= k_tiles) return 0;
  }
  return 1;
}

static inline int autotune_wgmma_runs(const autotune_config *c, int64_t m, int64_t n, int64_t k, int b_nk) {
  if (k % 8 || (!b_nk && n % 8)) return 0;
  if (!autotune_tiles_ok(c, m, n)) return 0;
  return c->stages <= autotune_max64(3, autotune_ceil_div(k, c->bk) + 2);
}

/* The kernel's own sizes of a problem, leading dimensions included (contiguous rows): (m, n, lda = n)
 * for a GEMV, (1, n, m, lda = m, ldb = n, ldc = n) for the transposed GEMV (a one-row GEMM), and
 * (m, n, k, lda = k, ldb, ldc = n) for a GEMM, ldb = n for B stored K x N and k for N x K (trans).
 * Returns how many. */
static inline int autotune_is_gemm(const autotune_entry *e) { return strcmp(e->op, "gemm") == 0; }

static inline int autotune_kernel_sizes(const autotune_entry *e, int64_t m, int64_t n, int64_t k, int64_t sizes[6]) {
  if (autotune_is_gemm(e)) {
    sizes[0] = m, sizes[1] = n, sizes[2] = k, sizes[3] = k, sizes[4] = e->trans ? k : n, sizes[5] = n;
    return 6;
  }
  if (e->trans) {
    sizes[0] = 1, sizes[1] = n, sizes[2] = m, sizes[3] = m, sizes[4] = n, sizes[5] = n;
    return 6;
  }
  sizes[0] = m, sizes[1] = n, sizes[2] = n;
  return 3;
}

/* 1 where a problem of this shape may exist: every size within 32 bits (the kernels' int sizes, which
 * autotune_bind passes) and its largest matrix within AUTOTUNE_MAX_MATRIX_BYTES. */
static inline int autotune_size_ok(int64_t m, int64_t n, int64_t k, int64_t item) {
  int64_t largest;
  if (m > AUTOTUNE_MAX_DIM || n > AUTOTUNE_MAX_DIM || k > AUTOTUNE_MAX_DIM) return 0; /* then no product overflows */
  largest = m * n;
  if (k > 0) largest = autotune_max64(largest, autotune_max64(m * k, k * n));
  return largest <= AUTOTUNE_MAX_MATRIX_BYTES / item;
}

/* 1 where the entry's config runs the problem (e->op, e->dtype, e->trans) of this shape: the family
 * the GPU would pick for it is the entry's, and the config is a point of its parameter space there. */
static inline int autotune_runs(const autotune_entry *e, int64_t m, int64_t n, int64_t k) {
  int gemm = autotune_is_gemm(e), b_nk = gemm && e->trans; /* a GEMM's trans: B stored N x K */
  int64_t s[6], item = autotune_itemsize(e->dtype_code);
  const autotune_config *c = &e->config;
  if (e->backend != AUTOTUNE_BACKEND_KERNEL || m < 1 || n < 1 || (gemm ? k < 1 : k != 0)) return 0;
  if (!autotune_size_ok(m, n, k, item)) return 0;
  if (autotune_family_for(gemm, e->dtype_code, m, n, k, e->trans) != e->family) return 0;
  autotune_kernel_sizes(e, m, n, k, s);
  switch (e->family) {
    case AUTOTUNE_FAMILY_GEMV: return autotune_gemv_runs(c, n, item);
    case AUTOTUNE_FAMILY_SKINNY: return autotune_skinny_runs(c, s[0], s[1], s[2], item, b_nk);
    case AUTOTUNE_FAMILY_SKINNY_TC: return autotune_skinny_tc_runs(c, m, n, k, item, b_nk);
    case AUTOTUNE_FAMILY_SIMT: return autotune_simt_runs(c, n, k);
    case AUTOTUNE_FAMILY_MMA: return autotune_mma_runs(c, m, n, k, b_nk);
    case AUTOTUNE_FAMILY_WGMMA: return autotune_wgmma_runs(c, m, n, k, b_nk);
    case AUTOTUNE_FAMILY_STRIPS: return autotune_strips_runs(c, m, n, item);
    case AUTOTUNE_FAMILY_NARROW: return autotune_narrow_runs(c, n, item);
    case AUTOTUNE_FAMILY_TALL: return autotune_tall_runs(c, m, n, item);
    default: return 0;
  }
}

/* The launch of an entry on a problem of this shape on a GPU of sm_count SMs (<= 0: the bundle's
 * GPU's). Returns 0, or -1 where the entry does not run that shape (autotune_runs). */
static inline int autotune_launch_for(const autotune_entry *e, int64_t m, int64_t n, int64_t k, int sm_count,
                                      autotune_launch *out) {
  const autotune_config *c = &e->config;
  int64_t s[6], grid_x = 1, grid_y = 1, grid_z = 1, tiles = 0, workspace = 0;
  int global_split = c->split > 1 && c->cluster <= 1;
  if (!autotune_runs(e, m, n, k)) return -1;
  if (sm_count <= 0) sm_count = AUTOTUNE_BUNDLE_SM_COUNT;
  autotune_kernel_sizes(e, m, n, k, s);
  *out = e->launch; /* block and (but for the GEMV's) shared memory follow from the config alone */
  switch (e->family) {
    case AUTOTUNE_FAMILY_GEMV: {
      int64_t rows_per_block = (int64_t)(c->block / c->lanes) * c->rows;
      tiles = autotune_ceil_div(m, rows_per_block);
      grid_x = c->persist ? autotune_min64(tiles, (int64_t)c->persist * sm_count) : tiles;
      grid_y = c->split;
      workspace = (int64_t)c->split * m;
      out->shared_bytes =
          (uint32_t)(c->x_smem ? autotune_gemv_split_vectors(c, n) * c->vec * autotune_itemsize(e->dtype_code) : 0);
      break;
    }
    case AUTOTUNE_FAMILY_SKINNY:
      tiles = autotune_ceil_div(s[0], c->mt) * autotune_ceil_div(s[1], autotune_skinny_columns(c, autotune_is_gemm(e) && e->trans));
      grid_x = tiles, grid_y = c->split, workspace = (int64_t)c->split * s[0] * s[1];
      break;
    case AUTOTUNE_FAMILY_SKINNY_TC:
      tiles = autotune_ceil_div(n, (int64_t)64 * c->wn);
      grid_x = tiles, grid_y = c->split, workspace = (int64_t)c->split * m * n;
      break;
    case AUTOTUNE_FAMILY_SIMT:
      grid_x = autotune_ceil_div(n, c->bn);
      grid_y = autotune_min64(autotune_ceil_div(m, c->bm), AUTOTUNE_MAX_GRID_Y);
      global_split = 0;
      break;
    case AUTOTUNE_FAMILY_MMA:
      tiles = grid_x = autotune_ceil_div(m, c->bm) * autotune_ceil_div(n, c->bn);
      grid_z = c->split, workspace = (int64_t)c->split * m * n;
      global_split = c->split > 1;
      break;
    case AUTOTUNE_FAMILY_WGMMA:
      grid_x = autotune_ceil_div(m, c->bm) * autotune_ceil_div(n, c->bn);
      global_split = 0;
      break;
    case AUTOTUNE_FAMILY_STRIPS:
      tiles = grid_x = autotune_ceil_div(n, c->width);
      grid_y = autotune_strips_splits(c, m, n, sm_count), workspace = grid_y * n;
      global_split = grid_y > 1;
      break;
    case AUTOTUNE_FAMILY_NARROW:
      tiles = grid_x = autotune_ceil_div(n, c->width);
      if (c->bands > 0) { /* the wide body: a band a block column, the block its whole teams */
        int64_t team = autotune_wide_team(c, n);
        tiles = grid_x = autotune_ceil_div(n / c->vec, team);
        out->block[0] = (uint32_t)(c->block / team * team);
      }
      grid_y = autotune_narrow_splits(c, m, n, sm_count), workspace = grid_y * n;
      global_split = grid_y > 1;
      break;
    case AUTOTUNE_FAMILY_TALL: /* one counter for the whole grid, or one cluster along y and none */
      if (c->cluster > 1) {
        grid_y = c->cluster, global_split = 0;
        break;
      }
      grid_x = autotune_tall_blocks(c, m, sm_count), tiles = 1, workspace = grid_x * n;
      global_split = grid_x > 1;
      break;
    default: return -1;
  }
  out->grid[0] = (uint32_t)grid_x, out->grid[1] = (uint32_t)grid_y, out->grid[2] = (uint32_t)grid_z;
  out->workspace_floats = global_split ? (uint64_t)workspace : 0;
  out->counters = global_split ? (uint64_t)tiles : 0;
  return 0;
}

/* ---- TMA tensor maps ---- */

/* What cuTensorMapEncodeTiled takes for one operand, beside its address (cuda.h's enum values;
 * element strides are 1, 1). */
typedef struct autotune_tensor_map {
  int data_type;         /* CUtensorMapDataType */
  uint64_t dims[2];      /* columns, rows */
  uint64_t stride_bytes; /* the row pitch: the one global stride of a rank-2 map */
  uint32_t box[2];       /* columns, rows */
  int interleave;        /* CUtensorMapInterleave */
  int swizzle;           /* CUtensorMapSwizzle */
  int l2_promotion;      /* CUtensorMapL2promotion */
  int oob_fill;          /* CUtensorMapFloatOOBfill */
} autotune_tensor_map;

static inline int autotune_swizzle_code(uint32_t swizzle_bytes) {
  switch (swizzle_bytes) {
    case 32: return AUTOTUNE_TMA_SWIZZLE_32B;
    case 64: return AUTOTUNE_TMA_SWIZZLE_64B;
    case 128: return AUTOTUNE_TMA_SWIZZLE_128B;
    default: return AUTOTUNE_TMA_SWIZZLE_NONE;
  }
}

static inline void autotune_fill_map(autotune_tensor_map *map, int dtype_code, int64_t rows, int64_t cols,
                                     const autotune_box *box) {
  map->data_type = dtype_code == AUTOTUNE_BFLOAT16 ? AUTOTUNE_TMA_DATA_BFLOAT16 : AUTOTUNE_TMA_DATA_FLOAT16;
  map->dims[0] = (uint64_t)cols, map->dims[1] = (uint64_t)rows;
  map->stride_bytes = (uint64_t)(cols * autotune_itemsize(dtype_code));
  map->box[0] = box->cols, map->box[1] = box->rows;
  map->interleave = AUTOTUNE_TMA_INTERLEAVE_NONE;
  map->swizzle = autotune_swizzle_code(box->swizzle_bytes);
  map->l2_promotion = AUTOTUNE_TMA_L2_PROMOTION;
  map->oob_fill = AUTOTUNE_TMA_OOB_FILL;
}

/* A TMA entry's maps for a GEMM of this shape with contiguous rows: A's (m x k) then B's (k x n, or
 * n x k for an entry with B stored N x K: e->trans). Encode each at its
 * operand's address, copy both (2 x AUTOTUNE_TMA_MAP_BYTES, A's first) into device memory aligned to
 * 64 bytes and pass its address as `workspace`. Returns 2, or 0 for an entry without maps. */
static inline int autotune_tensor_maps(const autotune_entry *e, int64_t m, int64_t n, int64_t k,
                                       autotune_tensor_map maps[2]) {
  if (!e->operand_maps) return 0;
  autotune_fill_map(&maps[0], e->dtype_code, m, k, &e->a_box);
  if (e->trans)
    autotune_fill_map(&maps[1], e->dtype_code, n, k, &e->b_box);
  else
    autotune_fill_map(&maps[1], e->dtype_code, k, n, &e->b_box);
  return 2;
}

/* ---- kernel arguments ---- */

/* A call's kernel arguments and the array cuLaunchKernelEx reads (params: pointers into this
 * structure, so bind it where it stays until the launch). */
typedef struct autotune_args {
  uint64_t arrays[3]; /* in the kernel's order */
  int32_t sizes[6];
  float alpha, beta;
  uint64_t workspace, counters;
  void *params[13];
  int count;
} autotune_args;

/* out = alpha * op(a, b) + beta * out for the problem (m, n, k) with the entry's kernel: a = A and
 * b = x for a GEMV (also transposed: the kernel's own order is taken care of), a = A and b = B for a
 * GEMM. workspace: the split-K buffer, or for a TMA entry its tensor maps; 0 where none. */
static inline void autotune_bind(const autotune_entry *e, autotune_args *args, int64_t m, int64_t n, int64_t k,
                                 uint64_t a, uint64_t b, uint64_t out, float alpha, float beta, uint64_t workspace,
                                 uint64_t counters) {
  int64_t sizes[6];
  int count = autotune_kernel_sizes(e, m, n, k, sizes), i, p = 0;
  args->arrays[0] = e->swap_inputs ? b : a;
  args->arrays[1] = e->swap_inputs ? a : b;
  args->arrays[2] = out;
  args->alpha = alpha, args->beta = beta, args->workspace = workspace, args->counters = counters;
  for (i = 0; i < 3; ++i) args->params[p++] = &args->arrays[i];
  for (i = 0; i < count; ++i) {
    args->sizes[i] = (int32_t)sizes[i];
    args->params[p++] = &args->sizes[i];
  }
  args->params[p++] = &args->alpha;
  args->params[p++] = &args->beta;
  args->params[p++] = &args->workspace;
  args->params[p++] = &args->counters;
  args->count = p;
}

/* ---- lookup ---- */

/* How far a tuned shape is from another: the squared distance in log2 space, sum over m, n (and k)
 * of log2(tuned / asked)^2, as the selector measures it (1024 is as far from 2048 as 4096 from 8192). */
static inline double autotune_distance(const autotune_entry *e, int64_t m, int64_t n, int64_t k) {
  double dm = log2((double)e->m / (double)m), dn = log2((double)e->n / (double)n), dk = 0.0;
  if (e->k > 0 && k > 0) dk = log2((double)e->k / (double)k);
  return dm * dm + dn * dn + dk * dk;
}

/* Orders two entries of equal distance as the selector does: the smaller shape first. */
static inline int autotune_shape_before(const autotune_entry *a, const autotune_entry *b) {
  if (a->m != b->m) return a->m < b->m;
  if (a->n != b->n) return a->n < b->n;
  return a->k < b->k;
}

/* The entry for op ("gemv" or "gemm"), dtype ("float32", "float16" or "bfloat16"), the shape (k = 0
 * for a GEMV) and trans (GEMV only): the tuned problem itself, else the nearest tuned problem of the
 * same op, dtype and layout whose config runs this shape (autotune_runs), else NULL. */
static inline const autotune_entry *autotune_find(const char *op, const char *dtype, int64_t m, int64_t n, int64_t k,
                                                 int trans) {
  const autotune_entry *best = NULL;
  double best_distance = 0.0;
  size_t i;
  if (op == NULL || dtype == NULL) return NULL;
  for (i = 0; i < AUTOTUNE_ENTRY_COUNT; ++i) {
    const autotune_entry *e = &autotune_entries[i];
    if (strcmp(e->op, op) != 0 || strcmp(e->dtype, dtype) != 0 || e->trans != (trans != 0)) continue;
    if (e->m == m && e->n == n && e->k == k) return e;
  }
  for (i = 0; i < AUTOTUNE_ENTRY_COUNT; ++i) {
    const autotune_entry *e = &autotune_entries[i];
    double distance;
    if (strcmp(e->op, op) != 0 || strcmp(e->dtype, dtype) != 0 || e->trans != (trans != 0)) continue;
    if (!autotune_runs(e, m, n, k)) continue;
    distance = autotune_distance(e, m, n, k);
    if (best == NULL || distance < best_distance || (distance == best_distance && autotune_shape_before(e, best))) {
      best = e, best_distance = distance;
    }
  }
  return best;
}

#endif /* AUTOTUNE_BUNDLE_H */
