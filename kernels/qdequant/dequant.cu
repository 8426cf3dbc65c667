// An int4 weight (docs/lowbit.md's canonical format) dequantized into the activations' dtype:
// out[n][k] = alpha * (q[n][k] - z) * s[n][k / GROUP] + beta * out[n][k]. autotune.linear needs it for
// more rows of x than the int4 GEMM kernels take (qgemm.MAX_M), then runs the float16 or bfloat16 GEMM
// on out: this kernel reads the codes once and writes the weight once, the bytes a dequantization must
// move, where torch's elementwise ops pass over the weight several times.
//
// The unit is a 4-byte word of 8 codes, whose 8 values are one 16-byte store: a warp's loads read
// 128 contiguous bytes and its stores write 512, both fully coalesced. (Pieces of 32 codes, a 16-byte
// load each written as four 16-byte stores 64 bytes apart across a warp, reached 1.7-1.9 TB/s on an
// H200.) Word w is codes 8w .. 8w + 7 of the weight read as one flat array, so its values go to
// out + 8w and its scale is scales[8w / GROUP]: K is a multiple of GROUP, so the flat index divided by
// GROUP is the row's group plus the groups of the rows before it; no division by K. Each thread
// handles CHUNKS words a block's width apart, all loads issued before the first value is computed.
// (q - z) * s is exact in float (a 4-bit integer times a 16-bit float), so with alpha = 1 and beta = 0
// each value is rounded once, to the value QuantizedWeight.dequantize() gives, bit for bit. A zero
// point is the low 4 bits of its byte, as the int4 GEMM kernels read it.
//
// Preconditions (autotune/ops/qdequant: bind): K % 32 == 0, qweight 4-byte and out 16-byte aligned.
#pragma once
#include "common.cuh"

namespace at_qdequant {

constexpr int WORD = 8;  // codes a 4-byte word holds

template <typename T, int GROUP, int SYM, int CHUNKS, int POLICY>
__device__ void dequant(const unsigned char* qweight, const T* scales, const unsigned char* zeros, T* out, int N,
                        int K, float alpha, float beta) {
  static_assert(GROUP % WORD == 0, "a word of 8 codes must lie within one group");
  const long long words = (long long)N * K / WORD;
  const long long first = (long long)blockIdx.x * blockDim.x * CHUNKS + threadIdx.x;
  unsigned int codes[CHUNKS];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const long long w = first + (long long)c * blockDim.x;
    if (w < words) codes[c] = at_common::load_stream<POLICY>(reinterpret_cast<const unsigned int*>(qweight) + w);
  }
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const long long w = first + (long long)c * blockDim.x;
    if (w >= words) continue;
    const long long group = w / (GROUP / WORD);
    const float s = at_common::to_float(scales[group]);
    const float z = SYM ? 8.0f : (float)(zeros[group] & 0xF);
    T* values_out = out + w * WORD;
    // Code j of the word is k = 8w + j (mod K) in its nibble j: little-endian bytes, even k in a byte's
    // low nibble.
    alignas(16) T values[WORD];
#pragma unroll
    for (int j = 0; j < WORD; ++j) {
      const float q = (float)((codes[c] >> (4 * j)) & 0xFu);
      values[j] = at_common::finish<T>((q - z) * s, alpha, beta, values_out + j);
    }
    *reinterpret_cast<uint4*>(values_out) = *reinterpret_cast<const uint4*>(values);
  }
}

}  // namespace at_qdequant
