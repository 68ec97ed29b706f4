// packed_matmul.h — weight matrices repacked once at load into the layout the SIMD dot product
// wants, and the matmul over them (the CPU engine's matmul).
//
// Why repack. In GGUF's row-major blocks a dot product of one weight row with x ends in a
// horizontal sum, and each 32-element block's scale must be applied before the blocks can be
// added, so a row costs a reduction per block. Interleaving 16 rows block by block (a "panel",
// as llama.cpp's CPU repack does for Q4_0 and BLIS does for GEMM) puts one weight row in each
// lane of a register: a block's integer dot products for 16 rows come out of 8 `vpdpbusd`
// (AVX-512 VNNI; AVX2: `pmaddubsw` + `pmaddwd`) as 16 int32 lanes, its 16 scales are one load,
// and nothing is ever summed across lanes. Source: llama.cpp ggml/src/ggml-cpu/repack.cpp
// (block_q4_0x8, ggml_gemv_q4_0_8x8_q8_0); Goto & van de Geijn 2008 (packed panels).
//
// Reduction order. Lane = weight row, so an output element's value is one fixed sequence of
// IEEE operations over its k (f32 activations) or its blocks (int8 activations) that depends on
// nothing else: not on the batch size, the group of x rows a row shares a panel pass with, the
// thread, or the instruction set. A row's result is bitwise identical alone or in a batch of
// 512, on AVX-512, AVX2 or the scalar twin (tests/unit/test_kernels_packed_matmul.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cpu_ops.h"
#include "lio/tensor.h"
#include "packed_kernels.h"

namespace lio::cpu {

/// The instruction sets the packed kernels exist for. Chosen at run time (detect_cpu_isa), so
/// one binary runs its best path on an AVX2 or an AVX-512 machine.
enum class CpuIsa { Scalar, Avx2, Avx512 };

/// The best CpuIsa this CPU runs: Avx512 needs AVX-512 F, BW, VL and VNNI; Avx2 needs AVX2,
/// FMA and F16C; else Scalar (cpuid, via the compiler's __builtin_cpu_supports).
CpuIsa detect_cpu_isa();

/// The ISA a CpuBackend uses unless told otherwise: parse_cpu_isa of the environment variable
/// LIO_CPU_ISA when it is set (to measure the AVX2 or scalar path on an AVX-512 machine), else
/// detect_cpu_isa(). Throws as parse_cpu_isa for a bad value.
CpuIsa default_cpu_isa();

/// "avx512", "avx2" or "scalar".
std::string_view cpu_isa_name(CpuIsa isa);

/// "auto" -> detect_cpu_isa(); "avx512", "avx2", "scalar" -> that ISA. Throws InvalidArgument
/// for another text and UnsupportedError for an ISA this CPU lacks (it would fault).
CpuIsa parse_cpu_isa(std::string_view text);

/// Whether PackedMatrix takes weights of this dtype: every dtype LIO reads (F32, F16, BF16,
/// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K, Q3_0, Q3_1).
bool can_pack(DType dtype);

/// One weight matrix W (rows, cols) in packed panels of 16 rows (the last padded with zero
/// rows). Float weights (F32 / F16 / BF16) keep their element type, k-major within a panel.
/// Quantized weights become per-block codes u with a scale d and, where the format has one, a
/// minimum m, such that W[j][32b + i] = d * (u - z) + m exactly as dequantize_row computes it
/// (z: 8 for Q4_0, 16 for Q5_0, 4 for Q3_0, else 0); 4-bit codes stay 4 bits (Q4_0, Q4_1,
/// Q4_K, Q3_0, Q3_1), the others take a byte; d and m stay f16 where the format stores them so
/// (Q4_K's d * sc_j and dmin * m_j become f32). Q6_K keeps its 16-element scales: a block's
/// two halves each get an f32 d * sc (exact), codes q - 32 in a byte. Bytes per weight: the
/// source's for Q4_0, Q4_1, Q8_0, F32, F16, BF16 (Q4_1: 5 bits), more where codes widen (Q5_*:
/// 8 + 1, Q4_K: 4 + 2, Q6_K: 8 + 2 bits, Q3_*: 4 + 0.5 or 1). Source dtypes: see can_pack.
class PackedMatrix {
 public:
  /// Packs `w` (its bytes are read, not kept). Threads: OpenMP over panels.
  /// Throws UnsupportedError when !can_pack(w.dtype), InvalidArgument for a null or empty
  /// matrix or cols not a whole number of 32-element blocks (256 for Q4_K and Q6_K).
  explicit PackedMatrix(const WeightMatrix& w);

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }  ///< the source dtype
  int64_t rows() const { return view_.rows; }
  int64_t cols() const { return view_.cols; }
  /// Bytes the matmul reads for one pass over the matrix (padding included).
  int64_t size_bytes() const { return view_.n_panels * view_.panel_bytes; }
  /// Whether int8 activations have an integer kernel here (every quantized source dtype).
  bool has_int8_kernel() const;
  /// The layout as the kernels read it.
  const packed::View& view() const { return view_; }

 private:
  std::string name_;
  DType dtype_;
  std::unique_ptr<std::byte[]> storage_;  ///< size_bytes() + 63: data_ is 64-byte aligned
  packed::View view_;
};

/// Working memory of packed_matmul, owned by the caller (one per backend): the int8 rows.
/// Grows as needed; never shrinks.
struct PackedScratch {
  std::vector<int8_t> qx;        ///< (n, cols) int8 activation codes
  std::vector<float> dx;         ///< (n, cols / 32) block scales
  std::vector<int32_t> qsum;     ///< (n, cols / 32) block code sums
  std::vector<int32_t> qsum_lo;  ///< (n, cols / 32) sums of each block's first 16 codes
  std::vector<float> xs;         ///< (n, cols / 32) dx * qsum
};

/// One matmul of a batch: y = x W^T (y += x W^T when `accumulate`), y (n, w.rows()).
struct PackedTarget {
  const PackedMatrix* w = nullptr;
  float* y = nullptr;
  bool accumulate = false;
};

/// y = x W^T for every target at once, all of the same cols: x (n, cols) f32, each y
/// (n, w.rows()), no overlap with x. One OpenMP region for all targets (Q, K and V of a layer
/// share their input and their fork/join), x rounded to int8 once.
/// `activations`: F32 multiplies f32 x by the exact dequantized weights (per element: acc = 0;
/// acc = fma(W[j][k], x[k], acc) for k = 0 .. cols-1); Int8 rounds each 32-element block of x
/// to int8 with scale dx = max|x| / 127 (ggml's Q8 activations) and, per block b,
///   isum = sum_i u_i qx_i - z sum_i qx_i (exact int32); acc = fma(d dx, float(isum), acc);
///   acc = fma(m, dx float(sum_i qx_i), acc) (formats with a minimum),
/// on quantized weights (float weights always take F32). Int8PerToken: use packed_matmul_int8.
/// `isa`: which kernels run (results are bitwise the same on each). Throws InvalidArgument on
/// a null pointer, n <= 0, mixed cols, Int8PerToken, or an ISA this CPU lacks.
void packed_matmul(std::span<const PackedTarget> targets, const float* x, int64_t n,
                   MatmulActivations activations, CpuIsa isa, PackedScratch& scratch);

/// One target: packed_matmul({{&w, y, accumulate}}, x, n, activations, isa, scratch).
void packed_matmul(const PackedMatrix& w, const float* x, float* y, int64_t n, bool accumulate,
                   MatmulActivations activations, CpuIsa isa, PackedScratch& scratch);

/// W8A8 / W4A8 with x already rounded one row (token) at a time, x[r][c] ~ sx[r] * qx[r][c]
/// (SmoothQuant's per-token activations; chapter 03's Task 6 rounds them): the Int8 kernel
/// with every block of row r at scale sx[r]. qx (n, cols), sx (n). Throws InvalidArgument as
/// packed_matmul does, or when a target's weights have no integer kernel.
void packed_matmul_int8(std::span<const PackedTarget> targets, const int8_t* qx, const float* sx,
                        int64_t n, CpuIsa isa, PackedScratch& scratch);

}  // namespace lio::cpu
