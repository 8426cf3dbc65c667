// Uniformly random bytes for the inputs a tuning run fills that are packed integers (int4 codes,
// int8, uint8 zero points): every bit pattern is a valid value, so raw random bits are uniform
// values; and float8 e4m3 codes, the same bytes with its two NaN codes made finite. A file of its own,
// so that support.cu (and the records measured with it) stay unchanged.
// Counter-based as support.cu's at_fill, so the bytes do not depend on the launch geometry.

// splitmix64, as support.cu's at_mix.
__device__ __forceinline__ unsigned long long at_bytes_mix(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Where a byte's low 7 bits are all ones (float8 e4m3's two NaN codes, 0x7F and 0xFF) its lowest bit is
// cleared (to 448 and -448): (b & 0x7F) + 1 carries into bit 7 of its own byte exactly then.
__device__ __forceinline__ unsigned long long at_bytes_finite_e4m3(unsigned long long w) {
  const unsigned long long nan = ((w & 0x7F7F7F7F7F7F7F7Full) + 0x0101010101010101ull) & 0x8080808080808080ull;
  return w ^ (nan >> 7);
}

// n bytes at out (16-byte aligned, as cuMemAlloc's are), 16 to a thread per step: one 16-byte
// store each, so a fill of hundreds of MB runs at memory speed. FINITE_E4M3: no NaN as float8 e4m3.
template <bool FINITE_E4M3>
__device__ __forceinline__ void at_fill(unsigned char* out, unsigned long long n, unsigned long long seed) {
  const unsigned long long chunks = (n + 15) / 16;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long base = seed * 0xD1B54A32D192ED03ull;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += stride) {
    unsigned long long lo = at_bytes_mix(base + 2 * i), hi = at_bytes_mix(base + 2 * i + 1);
    if (FINITE_E4M3) {
      lo = at_bytes_finite_e4m3(lo);
      hi = at_bytes_finite_e4m3(hi);
    }
    if (16 * i + 16 <= n) {
      *reinterpret_cast<ulonglong2*>(out + 16 * i) = make_ulonglong2(lo, hi);
    } else {  // the last, partial chunk
      for (unsigned long long b = 16 * i; b < n; ++b) {
        const unsigned long long word = (b - 16 * i) < 8 ? lo : hi;
        out[b] = (unsigned char)(word >> (8 * ((b - 16 * i) % 8)));
      }
    }
  }
}

extern "C" __global__ void at_fill_bytes(unsigned char* out, unsigned long long n, unsigned long long seed) {
  at_fill<false>(out, n, seed);
}

// float8 e4m3 codes: every byte a finite value (the NaN codes moved to +-448).
extern "C" __global__ void at_fill_fp8e4m3(unsigned char* out, unsigned long long n, unsigned long long seed) {
  at_fill<true>(out, n, seed);
}
