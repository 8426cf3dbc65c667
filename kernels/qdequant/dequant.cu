// An int4 weight (docs/lowbit.md's canonical format) dequantized into the activations' dtype:
// out[n][k] = alpha * (q[n][k] - z) * s[n][k / GROUP] + beta * out[n][k]. autotune.linear needs it for
// more rows of x than the int4 GEMM kernels take (qgemm.MAX_M), then runs the float16 or bfloat16 GEMM
// on out: this kernel reads the codes once and writes the weight once, the bytes a dequantization must
// move, where torch's elementwise ops pass over the weight several times.
//
// Each thread turns CHUNKS pieces of 32 codes (one 16-byte load each; a piece lies within one group,
// GROUP being a multiple of 32) into 32 values written as four 16-byte stores; the loads of all its
// pieces are issued before the first value is computed. (q - z) * s is exact in float (a 4-bit
// integer times a 16-bit float), so with alpha = 1 and beta = 0 each value is rounded once, to the
// value QuantizedWeight.dequantize() gives, bit for bit. A zero point is the low 4 bits of its byte,
// as the int4 GEMM kernels read it.
//
// Preconditions (autotune/ops/qdequant: bind): K % 32 == 0, qweight and out 16-byte aligned.
#pragma once
#include "common.cuh"

namespace at_qdequant {

constexpr int PIECE = 32;  // codes a 16-byte load holds

template <typename T, int GROUP, int SYM, int CHUNKS, int POLICY>
__device__ void dequant(const unsigned char* qweight, const T* scales, const unsigned char* zeros, T* out, int N,
                        int K, float alpha, float beta) {
  static_assert(GROUP % PIECE == 0, "a piece of 32 codes must lie within one group");
  const long long per_row = K / PIECE;
  const long long pieces = (long long)N * per_row;
  const long long first = (long long)blockIdx.x * blockDim.x * CHUNKS + threadIdx.x;
  uint4 codes[CHUNKS];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const long long p = first + (long long)c * blockDim.x;
    if (p < pieces) codes[c] = at_common::load_stream<POLICY>(reinterpret_cast<const uint4*>(qweight) + p);
  }
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const long long p = first + (long long)c * blockDim.x;
    if (p >= pieces) continue;
    const long long row = p / per_row;
    const int k0 = (int)(p % per_row) * PIECE;
    const long long group = row * (K / GROUP) + k0 / GROUP;
    const float s = at_common::to_float(scales[group]);
    const float z = SYM ? 8.0f : (float)(zeros[group] & 0xF);
    const unsigned int words[4] = {codes[c].x, codes[c].y, codes[c].z, codes[c].w};
    T* piece = out + row * K + k0;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      // Word w holds codes 8w .. 8w + 7 of the piece, k = 8w + j in its nibble j (little-endian bytes,
      // even k in a byte's low nibble).
      alignas(16) T values[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float q = (float)((words[w] >> (4 * j)) & 0xFu);
        values[j] = at_common::finish<T>((q - z) * s, alpha, beta, piece + 8 * w + j);
      }
      *reinterpret_cast<uint4*>(piece + 8 * w) = *reinterpret_cast<const uint4*>(values);
    }
  }
}

}  // namespace at_qdequant
