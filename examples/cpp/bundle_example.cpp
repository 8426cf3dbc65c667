// Runs GEMVs and GEMMs from an autotune bundle with the CUDA driver API alone, and checks every result
// against a float64 reference computed on the host.
//
//   autotune export --format bundle --gpu h200 -o bundle
//   nvcc -std=c++17 -O2 -I bundle examples/cpp/bundle_example.cpp -o bundle_example -lcuda
//   ./bundle_example bundle                                  # the bundle's first GEMV and first GEMM
//   ./bundle_example bundle gemv float16 4096 8192 0 0 gemm bfloat16 16 4096 4096 0
//
// A problem is OP DTYPE M N K TRANS: gemv (K = 0; TRANS 1 for y = A^T x) or gemm, and float32, float16 or
// bfloat16. Each runs twice with alpha = 0.5 and beta = 0.25 on random data (the second run checks that
// the split-K scratch was left zero), then 20 times more to time it. Exit status: 0 when every result is
// within tolerance, 1 when one is not or no entry runs a shape, 2 on bad arguments or CUDA errors.

#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "autotune_bundle.h"

namespace {

void check(CUresult result, const char *what) {
  if (result == CUDA_SUCCESS) return;
  const char *name = nullptr;
  cuGetErrorName(result, &name);
  std::fprintf(stderr, "error: %s failed: %s\n", what, name ? name : "unknown CUDA error");
  std::exit(2);
}

// -- element encodings: the device's bits of each dtype, round to nearest even --------------------

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

uint16_t to_half(float value) {
  uint32_t x = float_bits(value), sign = (x >> 16) & 0x8000u;
  int exponent = (int)((x >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  if (exponent >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exponent <= 0) {  // subnormal or zero
    if (exponent < -10) return (uint16_t)sign;
    mantissa |= 0x800000u;
    int shift = 14 - exponent;
    uint32_t half = mantissa >> shift, rest = mantissa & ((1u << shift) - 1), midway = 1u << (shift - 1);
    if (rest > midway || (rest == midway && (half & 1u))) ++half;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)exponent << 10) | (mantissa >> 13), rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry into the exponent is right
  return (uint16_t)half;
}

double from_half(uint16_t h) {
  int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double sign = (h & 0x8000u) ? -1.0 : 1.0;
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp((double)mantissa, -24);
  return sign * std::ldexp((double)(mantissa | 0x400), exponent - 25);
}

uint16_t to_bfloat16(float value) {
  uint32_t x = float_bits(value);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

double from_bfloat16(uint16_t b) { return (double)bits_float((uint32_t)b << 16); }

// A host array in the dtype's device bits, with the values it holds as doubles.
struct Array {
  int dtype;
  std::vector<double> values;
  std::vector<unsigned char> bytes;

  Array(int dtype_code, std::size_t count) : dtype(dtype_code), values(count), bytes(count * itemsize()) {}
  std::size_t itemsize() const { return dtype == AUTOTUNE_FLOAT32 ? 4 : 2; }

  void encode() {
    for (std::size_t i = 0; i < values.size(); ++i) {
      float v = (float)values[i];
      if (dtype == AUTOTUNE_FLOAT32) {
        std::memcpy(&bytes[4 * i], &v, 4);
      } else {
        uint16_t bits = dtype == AUTOTUNE_FLOAT16 ? to_half(v) : to_bfloat16(v);
        std::memcpy(&bytes[2 * i], &bits, 2);
      }
    }
  }

  double decode(std::size_t i) const {
    if (dtype == AUTOTUNE_FLOAT32) {
      float v;
      std::memcpy(&v, &bytes[4 * i], 4);
      return v;
    }
    uint16_t bits;
    std::memcpy(&bits, &bytes[2 * i], 2);
    return dtype == AUTOTUNE_FLOAT16 ? from_half(bits) : from_bfloat16(bits);
  }
};

// Multiples of 1/8 in [-1, 1]: exact in every dtype, and their float32 sums are exact too.
void fill(Array &array, std::mt19937 &random) {
  std::uniform_int_distribution<int> eighths(-8, 8);
  for (double &v : array.values) v = eighths(random) / 8.0;
  array.encode();
}

struct Problem {
  std::string op, dtype;
  long long m = 0, n = 0, k = 0;
  int trans = 0;
};

int dtype_code(const std::string &dtype) {
  if (dtype == "float32") return AUTOTUNE_FLOAT32;
  if (dtype == "float16") return AUTOTUNE_FLOAT16;
  if (dtype == "bfloat16") return AUTOTUNE_BFLOAT16;
  return -1;
}

double unit_roundoff(int dtype) {
  return dtype == AUTOTUNE_FLOAT32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, dtype == AUTOTUNE_FLOAT16 ? -11 : -8);
}

struct Device {
  CUdevice device;
  CUcontext context;
  CUstream stream;
  int sm_count;
  std::string folder;
  std::map<std::string, CUmodule> modules;

  CUfunction function(const autotune_entry *e, unsigned shared_bytes) {
    CUmodule &module = modules[e->kernel_file];
    if (!module) {
      std::string path = folder + "/" + e->kernel_file;
      check(cuModuleLoad(&module, path.c_str()), path.c_str());
    }
    CUfunction function;
    check(cuModuleGetFunction(&function, module, e->kernel_name), e->kernel_name);
    if (shared_bytes > 0) {  // static and dynamic shared memory past 48 KiB together need the opt-in
      check(cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shared_bytes),
            "cuFuncSetAttribute");
    }
    return function;
  }
};

CUdeviceptr upload(const Array &array) {
  CUdeviceptr pointer;
  check(cuMemAlloc(&pointer, array.bytes.size()), "cuMemAlloc");
  check(cuMemcpyHtoD(pointer, array.bytes.data(), array.bytes.size()), "cuMemcpyHtoD");
  return pointer;
}

// Split-K scratch, zeroed in the stream's order before the first launch (the kernels keep it zero).
CUdeviceptr zeroed_words(uint64_t words, CUstream stream) {
  CUdeviceptr pointer;
  check(cuMemAlloc(&pointer, words * 4), "cuMemAlloc");
  check(cuMemsetD32Async(pointer, 0, words, stream), "cuMemsetD32Async");
  return pointer;
}

// The kernel's `workspace` for a TMA entry: A's tensor map then B's, in device memory.
CUdeviceptr tensor_maps(const autotune_entry *e, const Problem &p, CUdeviceptr a, CUdeviceptr b) {
  autotune_tensor_map maps[2];
  autotune_tensor_maps(e, p.m, p.n, p.k, maps);
  CUtensorMap encoded[2];  // 64-byte aligned, as cuTensorMapEncodeTiled wants
  CUdeviceptr addresses[2] = {a, b};
  for (int i = 0; i < 2; ++i) {
    cuuint64_t dims[2] = {maps[i].dims[0], maps[i].dims[1]};
    cuuint64_t strides[1] = {maps[i].stride_bytes};
    cuuint32_t box[2] = {maps[i].box[0], maps[i].box[1]};
    cuuint32_t element_strides[2] = {1, 1};
    check(cuTensorMapEncodeTiled(&encoded[i], (CUtensorMapDataType)maps[i].data_type, 2, (void *)addresses[i], dims,
                                 strides, box, element_strides, (CUtensorMapInterleave)maps[i].interleave,
                                 (CUtensorMapSwizzle)maps[i].swizzle, (CUtensorMapL2promotion)maps[i].l2_promotion,
                                 (CUtensorMapFloatOOBfill)maps[i].oob_fill),
          "cuTensorMapEncodeTiled");
  }
  static_assert(sizeof(CUtensorMap) == AUTOTUNE_TMA_MAP_BYTES, "a tensor map's size");
  CUdeviceptr buffer;
  check(cuMemAlloc(&buffer, sizeof(encoded)), "cuMemAlloc");  // 256-byte aligned
  check(cuMemcpyHtoD(buffer, encoded, sizeof(encoded)), "cuMemcpyHtoD");
  return buffer;
}

// The outputs the reference checks: all of them, or an even sample where a GEMM's are too many to
// compute on the host in a moment.
std::vector<std::size_t> checked_outputs(std::size_t outputs, long long terms) {
  std::vector<std::size_t> chosen;
  const long long budget = 1ll << 28;  // multiply-adds
  std::size_t step = (long long)outputs * terms <= budget ? 1 : (std::size_t)((long long)outputs * terms / budget) + 1;
  for (std::size_t i = 0; i < outputs; i += step) chosen.push_back(i);
  if (chosen.back() != outputs - 1) chosen.push_back(outputs - 1);
  return chosen;
}

// out = alpha * op(A, B) + beta * out0 for one output, in float64, and the sum of its terms' magnitudes.
void reference(const Problem &p, const Array &a, const Array &b, std::size_t index, double *sum, double *scale) {
  double s = 0.0, abs_sum = 0.0;
  if (p.op == "gemm") {
    std::size_t row = index / (std::size_t)p.n, col = index % (std::size_t)p.n;
    for (long long i = 0; i < p.k; ++i) {  // B is k x n, or n x k where trans (an nn.Linear weight)
      const std::size_t at = p.trans ? col * (std::size_t)p.k + i : (std::size_t)i * p.n + col;
      double term = a.values[row * p.k + i] * b.values[at];
      s += term, abs_sum += std::fabs(term);
    }
  } else if (p.trans) {  // y[index] = sum_i A[i][index] x[i]
    for (long long i = 0; i < p.m; ++i) {
      double term = a.values[i * p.n + index] * b.values[i];
      s += term, abs_sum += std::fabs(term);
    }
  } else {
    for (long long j = 0; j < p.n; ++j) {
      double term = a.values[index * p.n + j] * b.values[j];
      s += term, abs_sum += std::fabs(term);
    }
  }
  *sum = s, *scale = abs_sum;
}

// Runs one problem from the bundle; returns whether every checked output is within tolerance.
bool run(Device &gpu, const Problem &p, std::mt19937 &random) {
  const int dtype = dtype_code(p.dtype);
  std::printf("%s %s %lldx%lld", p.op.c_str(), p.dtype.c_str(), p.m, p.n);
  if (p.op == "gemm") std::printf("x%lld", p.k);
  std::printf("%s: ", p.trans ? " (transposed)" : "");
  const autotune_entry *e = autotune_find(p.op.c_str(), p.dtype.c_str(), p.m, p.n, p.k, p.trans);
  if (e == nullptr || e->backend != AUTOTUNE_BACKEND_KERNEL) {
    std::printf("no entry of the bundle runs this shape\n");
    return false;
  }
  autotune_launch launch;
  if (autotune_launch_for(e, p.m, p.n, p.k, gpu.sm_count, &launch) != 0) {
    std::printf("entry %d does not run this shape\n", e->index);
    return false;
  }
  const bool exact = e->m == p.m && e->n == p.n && e->k == p.k;
  std::printf("entry %d (%s %dx%d", e->index, exact ? "tuned" : "nearest tuned", e->m, e->n);
  if (e->k) std::printf("x%d", e->k);
  std::printf(", %s) ", e->family_name);

  // A (m x n, or m x k), x (n; m when transposed) or B (k x n), y (m; n when transposed) or C (m x n).
  const bool gemm = p.op == "gemm";
  Array a(dtype, (std::size_t)(p.m * (gemm ? p.k : p.n)));
  Array b(dtype, (std::size_t)(gemm ? p.k * p.n : (p.trans ? p.m : p.n)));
  Array out0(dtype, (std::size_t)(gemm ? p.m * p.n : (p.trans ? p.n : p.m)));
  fill(a, random), fill(b, random), fill(out0, random);
  CUdeviceptr da = upload(a), db = upload(b), dout = upload(out0);

  CUfunction function = gpu.function(e, launch.shared_bytes);
  CUdeviceptr workspace = 0, counters = 0;
  if (e->operand_maps) {
    workspace = tensor_maps(e, p, da, db);
  } else {
    if (launch.workspace_floats) workspace = zeroed_words(launch.workspace_floats, gpu.stream);
    if (launch.counters) counters = zeroed_words(launch.counters, gpu.stream);
  }
  const float alpha = 0.5f, beta = 0.25f;
  autotune_args args;
  autotune_bind(e, &args, p.m, p.n, p.k, da, db, dout, alpha, beta, workspace, counters);

  CUlaunchAttribute attribute;
  std::memset(&attribute, 0, sizeof(attribute));
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config;
  std::memset(&config, 0, sizeof(config));
  config.gridDimX = launch.grid[0], config.gridDimY = launch.grid[1], config.gridDimZ = launch.grid[2];
  config.blockDimX = launch.block[0], config.blockDimY = launch.block[1], config.blockDimZ = launch.block[2];
  config.sharedMemBytes = launch.shared_bytes;
  config.hStream = gpu.stream;
  config.attrs = e->programmatic ? &attribute : nullptr;
  config.numAttrs = e->programmatic ? 1 : 0;

  const double unit = unit_roundoff(dtype), accumulation = std::ldexp(1.0, -12);
  const std::vector<std::size_t> outputs = checked_outputs(out0.values.size(), gemm ? p.k : (p.trans ? p.m : p.n));
  Array got(dtype, out0.values.size());
  double worst = 0.0;
  bool finite = true;
  for (int round = 0; round < 2; ++round) {  // the second run finds scratch the first left dirty
    check(cuMemcpyHtoD(dout, out0.bytes.data(), out0.bytes.size()), "cuMemcpyHtoD");
    check(cuLaunchKernelEx(&config, function, args.params, nullptr), "cuLaunchKernelEx");
    check(cuStreamSynchronize(gpu.stream), "running the kernel");
    check(cuMemcpyDtoH(got.bytes.data(), dout, got.bytes.size()), "cuMemcpyDtoH");
    for (std::size_t i : outputs) {
      double sum, scale;
      reference(p, a, b, i, &sum, &scale);
      const double want = alpha * sum + beta * out0.values[i], value = got.decode(i);
      const double tolerance = unit * std::fabs(want) + accumulation * (alpha * scale + beta * std::fabs(out0.values[i]));
      if (!std::isfinite(value)) finite = false;
      worst = std::fmax(worst, std::fabs(value - want) / (tolerance + 1e-30));
    }
  }

  CUevent start, stop;
  check(cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  const int launches = 20;
  check(cuEventRecord(start, gpu.stream), "cuEventRecord");
  for (int i = 0; i < launches; ++i) check(cuLaunchKernelEx(&config, function, args.params, nullptr), "cuLaunchKernelEx");
  check(cuEventRecord(stop, gpu.stream), "cuEventRecord");
  check(cuEventSynchronize(stop), "running the kernel");
  float milliseconds = 0.0f;
  check(cuEventElapsedTime(&milliseconds, start, stop), "cuEventElapsedTime");
  cuEventDestroy(start), cuEventDestroy(stop);
  for (CUdeviceptr pointer : {da, db, dout, workspace, counters}) {
    if (pointer) cuMemFree(pointer);
  }

  const bool right = finite && worst <= 1.0;
  std::printf("%s: %.2f us a call (tuned: %.2f us), worst error %.3g of the tolerance over %zu outputs: %s\n",
              e->kernel_name, 1000.0 * milliseconds / launches, e->time_us, worst, outputs.size(),
              right ? "ok" : "WRONG");
  return right;
}

// The bundle's first GEMV (not transposed) and first GEMM, at their tuned shapes.
std::vector<Problem> default_problems() {
  std::vector<Problem> found;
  for (const char *op : {"gemv", "gemm"}) {
    for (size_t i = 0; i < AUTOTUNE_ENTRY_COUNT; ++i) {
      const autotune_entry &e = autotune_entries[i];
      if (std::strcmp(e.op, op) == 0 && !e.trans) {
        found.push_back(Problem{e.op, e.dtype, e.m, e.n, e.k, 0});
        break;
      }
    }
  }
  return found;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2 || (argc - 2) % 6 != 0) {
    std::fprintf(stderr, "usage: %s BUNDLE_DIR [OP DTYPE M N K TRANS]...\n", argv[0]);
    return 2;
  }
  std::vector<Problem> problems;
  for (int i = 2; i < argc; i += 6) {
    Problem p{argv[i], argv[i + 1], std::atoll(argv[i + 2]), std::atoll(argv[i + 3]), std::atoll(argv[i + 4]),
              std::atoi(argv[i + 5])};
    if ((p.op != "gemv" && p.op != "gemm") || dtype_code(p.dtype) < 0 || p.m < 1 || p.n < 1 || p.k < 0) {
      std::fprintf(stderr, "error: %s %s %s %s %s %s is not OP DTYPE M N K TRANS\n", argv[i], argv[i + 1],
                   argv[i + 2], argv[i + 3], argv[i + 4], argv[i + 5]);
      return 2;
    }
    problems.push_back(p);
  }
  if (problems.empty()) problems = default_problems();

  Device gpu;
  gpu.folder = argv[1];
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&gpu.device, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&gpu.context, gpu.device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(gpu.context), "cuCtxSetCurrent");
  // A blocking stream: its launches wait for the copies this program makes on the legacy default stream.
  check(cuStreamCreate(&gpu.stream, CU_STREAM_DEFAULT), "cuStreamCreate");
  check(cuDeviceGetAttribute(&gpu.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, gpu.device), "SM count");
  char name[256] = {0};
  check(cuDeviceGetName(name, sizeof(name) - 1, gpu.device), "cuDeviceGetName");
  std::printf("%s (%d SMs); bundle of %s, %zu entries\n", name, gpu.sm_count, AUTOTUNE_BUNDLE_GPU,
              (size_t)AUTOTUNE_ENTRY_COUNT);

  std::mt19937 random(31);
  int wrong = 0;
  for (const Problem &p : problems) wrong += run(gpu, p, random) ? 0 : 1;
  std::printf("%s: %d of %zu problems right\n", wrong ? "FAILED" : "ok", (int)problems.size() - wrong,
              problems.size());
  cuStreamDestroy(gpu.stream);
  cuDevicePrimaryCtxRelease(gpu.device);
  return wrong ? 1 : 0;
}
