// matmul.cpp — cpu::matmul and cpu::matmul_int8 on a weight matrix as stored: the packed
// kernels (packed_matmul.h) over a copy packed for this one call. For tests, tools and one-off
// products; the engine packs its weights once, at load (CpuBackend), and calls packed_matmul.
#include <string>

#include "cpu_ops.h"
#include "lio/error.h"
#include "packed_matmul.h"

namespace lio::cpu {

namespace {

/// The checks both entry points make before packing (same messages as before packing existed).
void check_blocks(const WeightMatrix& w, const char* who) {
  const int64_t block_elems = dtype_info(w.dtype).block_elems;
  if (block_elems > 1 && w.cols % block_elems != 0) {
    throw InvalidArgument(std::string(who) + ": weight '" + w.name + "' (" +
                          std::string(dtype_info(w.dtype).name) + ") has " +
                          std::to_string(w.cols) + " columns, not a multiple of its " +
                          std::to_string(block_elems) + "-element block");
  }
}

}  // namespace

bool has_int8_kernel(const WeightMatrix& w) {
  return dtype_info(w.dtype).block_elems > 1;  // every quantized dtype; F32 / F16 / BF16 have none
}

void matmul_int8(const WeightMatrix& w, const int8_t* qx, const float* sx, float* y, int64_t n,
                 bool accumulate) {
  if (w.data == nullptr || qx == nullptr || sx == nullptr || y == nullptr || n <= 0) {
    throw InvalidArgument("matmul_int8: null pointer or n <= 0 for weight '" + w.name + "'");
  }
  if (!has_int8_kernel(w)) {
    throw InvalidArgument(
        "matmul_int8: weight '" + w.name + "' (" + std::string(dtype_info(w.dtype).name) +
        ") has no integer kernel: want a block-quantized dtype (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
        "Q4_K, Q6_K, Q3_0 or Q3_1)");
  }
  check_blocks(w, "matmul_int8");
  const PackedMatrix packed(w);
  PackedScratch scratch;
  const PackedTarget target{&packed, y, accumulate};
  packed_matmul_int8({&target, 1}, qx, sx, n, default_cpu_isa(), scratch);
}

void matmul(const WeightMatrix& w, const float* x, float* y, int64_t n, bool accumulate,
            MatmulActivations activations) {
  if (activations == MatmulActivations::Int8PerToken) {
    throw InvalidArgument(
        "matmul: per-token int8 activations are rounded by the caller; call matmul_int8");
  }
  if (w.data == nullptr || x == nullptr || y == nullptr || n <= 0) {
    throw InvalidArgument("matmul: null pointer or n <= 0 for weight '" + w.name + "'");
  }
  check_blocks(w, "matmul");
  const PackedMatrix packed(w);
  PackedScratch scratch;
  packed_matmul(packed, x, y, n, accumulate, activations, default_cpu_isa(), scratch);
}

}  // namespace lio::cpu
