// packed_matmul.cpp — packing, ISA dispatch and threading of the packed matmul, and the scalar
// twins every SIMD kernel must equal bit for bit.
//
// ---- Layout ------------------------------------------------------------------------------------
// A panel is weight rows 16p .. 16p + 15 (rows past the matrix are zeros).
// Float kinds (F32, F16, BF16): element (k, j) of the panel at index k * 16 + j, in the source's
//   element type: one aligned 64-byte (f32) or 32-byte (f16 / bf16) load gives row j's W[j][k]
//   in lane j.
// Code kinds: per 32-element block b a record of block_bytes:
//   U4 (4-bit codes): 4 chunks of 64 bytes; chunk c, bytes 4j .. 4j + 3 (lane j) hold row j's
//     codes of elements 4c .. 4c + 3 in their low nibbles and 16 + 4c .. 16 + 4c + 3 in their
//     high nibbles: one load and two masks give the int8 operands of elements 4c.. and 16 + 4c..
//     for all 16 rows, exactly what vpdpbusd multiplies by a broadcast of 4 x bytes.
//   U8 / S8 (byte codes, unsigned / signed): 8 chunks of 64 bytes, chunk g lane j = row j's
//     elements 4g .. 4g + 3.
//   then 16 scales d (f16 or f32), then 16 minimums m if the format has them.
// (AVX2 reads a 64-byte chunk as two 32-byte halves: rows 0-7, rows 8-15.)
//
// ---- Threads
// ------------------------------------------------------------------------------------- One OpenMP
// region per call: the x rows are rounded to int8 (Int8) first, then the work items (target, chunk
// of up to kRowChunk x rows, panel) are split statically. Nothing a thread does depends on which
// items it got, so the result does not depend on the thread count either.
#include "packed_matmul.h"

#include "lio/omp_compat.h"
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lio/error.h"

namespace lio::cpu {
namespace {

using packed::Int8Rows;
using packed::kBlock;
using packed::Kind;
using packed::kPanelRows;
using packed::Out;
using packed::View;

/// x rows per work item: a chunk's f32 rows (64 x 1536 x 4 bytes = 384 KiB at most here) stay
/// in L2 while the thread walks the panels.
constexpr int64_t kRowChunk = 64;

// ---- packing
// -------------------------------------------------------------------------------------

Kind kind_of(DType d) {
  switch (d) {
    case DType::F32: return Kind::F32;
    case DType::F16: return Kind::F16;
    case DType::BF16: return Kind::BF16;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q4_K:
    case DType::Q3_0:
    case DType::Q3_1: return Kind::U4;
    case DType::Q5_0:
    case DType::Q5_1: return Kind::U8;
    case DType::Q8_0:
    case DType::Q6_K: return Kind::S8;
    default: break;
  }
  throw UnsupportedError("packed matmul: no packed layout for " + std::string(dtype_info(d).name) +
                         " weights");
}

bool is_code_kind(Kind k) { return k == Kind::U4 || k == Kind::U8 || k == Kind::S8; }

int64_t code_bytes(Kind k) { return k == Kind::U4 ? 4 * 64 : 8 * 64; }

/// One 32-element block of a source row as codes u (value d * (u - z) + m), with the scales'
/// f16 bits where the format stores f16.
struct BlockCodes {
  int u[kBlock];
  uint16_t d16 = 0, m16 = 0;  // f16 formats
  float d32 = 0, m32 = 0;     // Q4_K; Q6_K: the scales of elements 0..15 and 16..31
};

template <class B>
const B& block_at(const std::byte* row, int64_t b) {
  return reinterpret_cast<const B*>(row)[b];
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

BlockCodes read_block(DType dtype, const std::byte* row, int64_t b) {
  BlockCodes c;
  const auto nibbles = [&](const uint8_t* qs) {
    for (int i = 0; i < 16; ++i) {
      c.u[i] = qs[i] & 15;
      c.u[i + 16] = qs[i] >> 4;
    }
  };
  const auto fifth_bits = [&](const uint8_t* qh) {
    const uint32_t h = load_u32(qh);
    for (int i = 0; i < 32; ++i) c.u[i] |= static_cast<int>((h >> i) & 1) << 4;
  };
  switch (dtype) {
    case DType::Q4_0: {
      const auto& q = block_at<BlockQ4_0>(row, b);
      nibbles(q.qs);
      c.d16 = q.d;
      break;
    }
    case DType::Q4_1: {
      const auto& q = block_at<BlockQ4_1>(row, b);
      nibbles(q.qs);
      c.d16 = q.d;
      c.m16 = q.m;
      break;
    }
    case DType::Q5_0: {
      const auto& q = block_at<BlockQ5_0>(row, b);
      nibbles(q.qs);
      fifth_bits(q.qh);
      c.d16 = q.d;
      break;
    }
    case DType::Q5_1: {
      const auto& q = block_at<BlockQ5_1>(row, b);
      nibbles(q.qs);
      fifth_bits(q.qh);
      c.d16 = q.d;
      c.m16 = q.m;
      break;
    }
    case DType::Q8_0: {
      const auto& q = block_at<BlockQ8_0>(row, b);
      for (int i = 0; i < 32; ++i) c.u[i] = q.qs[i];
      c.d16 = q.d;
      break;
    }
    case DType::Q3_0: {
      const auto& q = block_at<BlockQ3_0>(row, b);
      for (int i = 0; i < 32; ++i) c.u[i] = q3_code(q.qh, q.qs, i);
      c.d16 = q.d;
      break;
    }
    case DType::Q3_1: {
      const auto& q = block_at<BlockQ3_1>(row, b);
      for (int i = 0; i < 32; ++i) c.u[i] = q3_code(q.qh, q.qs, i);
      c.d16 = q.d;
      c.m16 = q.m;
      break;
    }
    case DType::Q4_K: {  // sub-block j = b % 8 of super-block b / 8 (see matmul.cpp's q4_k_codes)
      const auto& s = block_at<BlockQ4_K>(row, b / 8);
      const int j = static_cast<int>(b % 8);
      const KQuantScaleMin sm = q4_k_scale_min(s.scales, j);
      for (int i = 0; i < 32; ++i) {
        const uint8_t byte = s.qs[32 * (j / 2) + i];
        c.u[i] = j % 2 == 0 ? byte & 15 : byte >> 4;
      }
      c.d32 = f16_to_f32(s.d) * static_cast<float>(sm.scale);
      c.m32 = -(f16_to_f32(s.dmin) * static_cast<float>(sm.min));
      break;
    }
    case DType::Q6_K: {  // 32-element run k of half h of super-block b / 8 (dequantize_row's walk)
      const auto& s = block_at<BlockQ6_K>(row, b / 8);
      const int h = static_cast<int>(b % 8) / 4, k = static_cast<int>(b % 4);
      for (int l = 0; l < 32; ++l) {
        const uint8_t low_byte = s.ql[64 * h + 32 * (k % 2) + l];
        const int low = k < 2 ? low_byte & 0x0f : low_byte >> 4;
        const int high = (s.qh[32 * h + l] >> (2 * k)) & 3;
        c.u[l] = (low | (high << 4)) - 32;
      }
      // d * sc is exact in f32 (11 + 8 bits), and so is its product with q - 32 (6 more bits).
      c.d32 = f16_to_f32(s.d) * static_cast<float>(s.scales[8 * h + 2 * k]);
      c.m32 = f16_to_f32(s.d) * static_cast<float>(s.scales[8 * h + 2 * k + 1]);
      break;
    }
    default: throw InternalError("packed matmul: read_block for an unpacked dtype");
  }
  return c;
}

int32_t zero_of(DType d) {
  return d == DType::Q4_0 ? 8 : d == DType::Q5_0 ? 16 : d == DType::Q3_0 ? 4 : 0;
}

bool has_min_of(DType d) {
  return d == DType::Q4_1 || d == DType::Q5_1 || d == DType::Q3_1 || d == DType::Q4_K;
}

void pack_code_panel(const WeightMatrix& w, const View& v, int64_t p, std::byte* panel) {
  const int64_t nb = v.cols / kBlock, sb = v.scale_f16 ? 2 : 4, cb = code_bytes(v.kind);
  for (int64_t b = 0; b < nb; ++b) {
    auto* blk = reinterpret_cast<uint8_t*>(panel + b * v.block_bytes);
    for (int64_t j = 0; j < kPanelRows; ++j) {
      const int64_t row = p * kPanelRows + j;
      BlockCodes c{};
      if (row < v.rows) c = read_block(w.dtype, w.row(row), b);  // padding rows: all zero
      if (v.kind == Kind::U4) {
        for (int ch = 0; ch < 4; ++ch)
          for (int t = 0; t < 4; ++t)
            blk[ch * 64 + j * 4 + t] =
                static_cast<uint8_t>((c.u[4 * ch + t] & 15) | (c.u[16 + 4 * ch + t] << 4));
      } else {
        for (int g = 0; g < 8; ++g)
          for (int t = 0; t < 4; ++t)
            blk[g * 64 + j * 4 + t] = static_cast<uint8_t>(c.u[4 * g + t]);
      }
      uint8_t* d = blk + cb + j * sb;
      uint8_t* m = blk + cb + kPanelRows * sb + j * sb;
      if (v.scale_f16) {
        std::memcpy(d, &c.d16, 2);
        if (v.has_min) std::memcpy(m, &c.m16, 2);
      } else {
        std::memcpy(d, &c.d32, 4);
        if (v.has_min || v.split_scales) std::memcpy(m, &c.m32, 4);  // split: the second scale
      }
    }
  }
}

void pack_float_panel(const WeightMatrix& w, const View& v, int64_t p, std::byte* panel) {
  const int64_t eb = v.kind == Kind::F32 ? 4 : 2;
  std::memset(panel, 0, static_cast<size_t>(v.panel_bytes));
  for (int64_t j = 0; j < kPanelRows; ++j) {
    const int64_t row = p * kPanelRows + j;
    if (row >= v.rows) break;
    const std::byte* src = w.row(row);
    for (int64_t k = 0; k < v.cols; ++k)
      std::memcpy(panel + (k * kPanelRows + j) * eb, src + k * eb, static_cast<size_t>(eb));
  }
}

// ---- the scalar twins
// -----------------------------------------------------------------------------

float scale_at(const View& w, const uint8_t* blk, int64_t which, int64_t j) {  // which 0: d, 1: m
  const int64_t cb = code_bytes(w.kind);
  if (w.scale_f16) {
    uint16_t h;
    std::memcpy(&h, blk + cb + (which * kPanelRows + j) * 2, 2);
    return f16_to_f32(h);
  }
  float f;
  std::memcpy(&f, blk + cb + (which * kPanelRows + j) * 4, 4);
  return f;
}

int code_at(const View& w, const uint8_t* blk, int64_t j, int64_t i) {
  if (w.kind == Kind::U4) {
    const uint8_t byte = blk[((i % 16) / 4) * 64 + j * 4 + i % 4];
    return i < 16 ? byte & 15 : byte >> 4;
  }
  const uint8_t byte = blk[(i / 4) * 64 + j * 4 + i % 4];
  return w.kind == Kind::S8 ? static_cast<int8_t>(byte) : byte;
}

/// W[16p + j][k] as the f32 kernels multiply it: the stored float, or fma(d, float(u) - z, m).
float value_at(const View& w, int64_t p, int64_t j, int64_t k) {
  const std::byte* panel = w.panel(p);
  if (w.kind == Kind::F32) return reinterpret_cast<const float*>(panel)[k * kPanelRows + j];
  if (w.kind == Kind::F16 || w.kind == Kind::BF16) {
    const uint16_t h = reinterpret_cast<const uint16_t*>(panel)[k * kPanelRows + j];
    return w.kind == Kind::F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
  const auto* blk = reinterpret_cast<const uint8_t*>(panel) + (k / kBlock) * w.block_bytes;
  const bool second = w.split_scales && k % kBlock >= 16;  // Q6_K: elements 16..31's own scale
  const float d = scale_at(w, blk, second ? 1 : 0, j),
              m = w.has_min ? scale_at(w, blk, 1, j) : 0.0f;
  return std::fma(
      d, static_cast<float>(code_at(w, blk, j, k % kBlock)) - static_cast<float>(w.zero), m);
}

}  // namespace

// The scalar twins: the reference sequence of operations for each output element.
namespace packed {

void scalar_f32_panels(const View& w, int64_t p0, int64_t p1, const float* x, int64_t r0,
                       int64_t r1, const Out& out) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t j_end = std::min(kPanelRows, w.rows - p * kPanelRows);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < j_end; ++j) {
        float acc = 0.0f;
        for (int64_t k = 0; k < w.cols; ++k)
          acc = std::fma(value_at(w, p, j, k), x[r * w.cols + k], acc);
        float& y = out.y[r * out.ld + p * kPanelRows + j];
        y = out.accumulate ? y + acc : acc;
      }
  }
}

void scalar_int8_panels(const View& w, int64_t p0, int64_t p1, const Int8Rows& x, int64_t r0,
                        int64_t r1, const Out& out) {
  const int64_t nb = w.cols / kBlock;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t j_end = std::min(kPanelRows, w.rows - p * kPanelRows);
    const auto* panel = reinterpret_cast<const uint8_t*>(w.panel(p));
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < j_end; ++j) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = panel + b * w.block_bytes;
          const int8_t* q = x.qx + r * x.cols + b * kBlock;
          const int64_t at = r * nb + b;
          if (w.split_scales) {  // Q6_K: each 16-element half at its own scale (z = 0)
            int32_t lo = 0, hi = 0;
            for (int64_t i = 0; i < 16; ++i) lo += code_at(w, blk, j, i) * q[i];
            for (int64_t i = 16; i < kBlock; ++i) hi += code_at(w, blk, j, i) * q[i];
            acc = std::fma(scale_at(w, blk, 0, j) * x.dx[at], static_cast<float>(lo), acc);
            acc = std::fma(scale_at(w, blk, 1, j) * x.dx[at], static_cast<float>(hi), acc);
            continue;
          }
          int32_t isum = 0;
          for (int64_t i = 0; i < kBlock; ++i) isum += code_at(w, blk, j, i) * q[i];
          isum -= w.zero * x.qsum[at];
          acc = std::fma(scale_at(w, blk, 0, j) * x.dx[at], static_cast<float>(isum), acc);
          if (w.has_min) acc = std::fma(scale_at(w, blk, 1, j), x.xs[at], acc);
        }
        float& y = out.y[r * out.ld + p * kPanelRows + j];
        y = out.accumulate ? y + acc : acc;
      }
  }
}

void scalar_decode_panel(const View& w, int64_t p, float* values) {
  for (int64_t k = 0; k < w.cols; ++k)
    for (int64_t j = 0; j < kPanelRows; ++j) values[k * kPanelRows + j] = value_at(w, p, j, k);
}

void scalar_quantize_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, int8_t* qx,
                          float* dx, int32_t* qsum, int32_t* qsum_lo, float* xs) {
  const int64_t nb = cols / kBlock;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + r * cols + b * kBlock;
      float amax = 0.0f;
      for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      int32_t sum = 0;
      for (int64_t i = 0; i < kBlock; ++i) {
        const auto v = static_cast<int32_t>(std::nearbyint(xb[i] * inv));
        qx[r * cols + b * kBlock + i] = static_cast<int8_t>(v);
        sum += v;
        if (i == 15) qsum_lo[r * nb + b] = sum;
      }
      dx[r * nb + b] = d;
      qsum[r * nb + b] = sum;
      xs[r * nb + b] = d * static_cast<float>(sum);
    }
}

}  // namespace packed

// ---- dispatch
// -------------------------------------------------------------------------------------

namespace {

struct IsaKernels {
  decltype(&packed::scalar_f32_panels) f32_panels;
  decltype(&packed::scalar_int8_panels) int8_panels;
  decltype(&packed::scalar_quantize_rows) quantize_rows;
};

constexpr IsaKernels kScalar{packed::scalar_f32_panels, packed::scalar_int8_panels,
                             packed::scalar_quantize_rows};
#if defined(__x86_64__)
constexpr IsaKernels kAvx2{packed::avx2_f32_panels, packed::avx2_int8_panels,
                           packed::avx2_quantize_rows};
constexpr IsaKernels kAvx512{packed::avx512_f32_panels, packed::avx512_int8_panels,
                             packed::avx512_quantize_rows};
#endif

#if defined(__x86_64__)
/// ECX bit `bit` of CPUID leaf `leaf`, sub-leaf 0 (Intel SDM vol. 2A, CPUID): F16C is leaf 1
/// bit 29, AVX512-VNNI leaf 7 bit 11. Clang 14's __builtin_cpu_supports knows neither name.
static bool cpuid_ecx_bit(unsigned leaf, unsigned bit) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(leaf, 0, &eax, &ebx, &ecx, &edx) != 0 && ((ecx >> bit) & 1u) != 0;
}
#endif

/// What the CPU supports, asked once. CPUID is a VM exit under a hypervisor (microseconds
/// each): asked on every matmul it took 18% of batch-1 decode on a 2-vCPU Xeon VM.
bool cpu_has_uncached(CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::Avx512)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && cpuid_ecx_bit(7, 11) && cpu_has_uncached(CpuIsa::Avx2);
  if (isa == CpuIsa::Avx2)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_ecx_bit(1, 29);
#endif
  return isa == CpuIsa::Scalar;
}

bool cpu_has(CpuIsa isa) {
  static const bool has_avx512 = cpu_has_uncached(CpuIsa::Avx512), has_avx2 = cpu_has_uncached(CpuIsa::Avx2);
  switch (isa) {
    case CpuIsa::Avx512: return has_avx512;
    case CpuIsa::Avx2: return has_avx2;
    case CpuIsa::Scalar: break;
  }
  return true;
}

const IsaKernels& kernels_for(CpuIsa isa) {
  if (!cpu_has(isa))
    throw InvalidArgument("packed matmul: this CPU has no " + std::string(cpu_isa_name(isa)));
#if defined(__x86_64__)
  if (isa == CpuIsa::Avx512) return kAvx512;
  if (isa == CpuIsa::Avx2) return kAvx2;
#endif
  return kScalar;
}

/// The shared body of packed_matmul and packed_matmul_int8: `token_qx` null means x is f32.
void run(std::span<const PackedTarget> targets, const float* x, const int8_t* token_qx,
         const float* token_sx, int64_t n, MatmulActivations activations, CpuIsa isa,
         PackedScratch& scratch) {
  if (targets.empty()) return;
  if ((x == nullptr && token_qx == nullptr) || n <= 0)
    throw InvalidArgument("packed matmul: null x or n <= 0");
  if (activations == MatmulActivations::Int8PerToken && token_qx == nullptr)
    throw InvalidArgument(
        "packed matmul: per-token int8 activations are rounded by the caller; call "
        "packed_matmul_int8");
  const int64_t cols = targets[0].w != nullptr ? targets[0].w->cols() : 0;
  for (const PackedTarget& t : targets) {
    if (t.w == nullptr || t.y == nullptr)
      throw InvalidArgument("packed matmul: null weights or output");
    if (t.w->cols() != cols)
      throw InvalidArgument("packed matmul: '" + t.w->name() + "' has " +
                            std::to_string(t.w->cols()) + " columns, the batch's first target " +
                            std::to_string(cols));
    if (token_qx != nullptr && !t.w->has_int8_kernel())
      throw InvalidArgument("packed matmul: '" + t.w->name() + "' (" +
                            std::string(dtype_info(t.w->dtype()).name) +
                            ") has no integer kernel for int8 activations");
  }
  const IsaKernels& k = kernels_for(isa);
  // Int8 rows are needed when some target is quantized and takes int8 activations.
  bool any_int8 = token_qx != nullptr;
  for (const PackedTarget& t : targets)
    any_int8 = any_int8 || (t.w->has_int8_kernel() && activations != MatmulActivations::F32);
  const int64_t nb = cols / kBlock;
  if (any_int8) {
    scratch.qx.resize(static_cast<size_t>(n * cols));
    scratch.dx.resize(static_cast<size_t>(n * nb));
    scratch.qsum.resize(static_cast<size_t>(n * nb));
    scratch.qsum_lo.resize(static_cast<size_t>(n * nb));
    scratch.xs.resize(static_cast<size_t>(n * nb));
  }
  const int n_threads = omp_get_max_threads();
  const Int8Rows rows8{token_qx != nullptr ? token_qx : scratch.qx.data(),
                       scratch.dx.data(),
                       scratch.qsum.data(),
                       scratch.qsum_lo.data(),
                       scratch.xs.data(),
                       cols};
  // Work items, target-major, then row chunk, then a group of up to kMaxGroup panels: at least
  // one group per thread, the panels split evenly between the groups.
  const int64_t n_chunks = (n + kRowChunk - 1) / kRowChunk;
  std::vector<int64_t> n_groups(targets.size()), first_item(targets.size() + 1, 0);
  for (size_t t = 0; t < targets.size(); ++t) {
    const int64_t np = targets[t].w->view().n_panels;
    int64_t g = std::max<int64_t>(n_threads, (np + packed::kMaxGroup - 1) / packed::kMaxGroup);
    g = std::min(np, (g + n_threads - 1) / n_threads * n_threads);
    n_groups[t] = g;
    first_item[t + 1] = first_item[t] + n_chunks * g;
  }
  const int64_t n_items = first_item.back();
#pragma omp parallel num_threads(n_threads)
  {
    if (any_int8 && token_qx == nullptr) {
#pragma omp for schedule(static)
      for (int64_t r = 0; r < n; ++r)
        k.quantize_rows(x, r, r + 1, cols, scratch.qx.data(), scratch.dx.data(),
                        scratch.qsum.data(), scratch.qsum_lo.data(), scratch.xs.data());
    } else if (token_qx != nullptr) {
      // One scale per token: every block of row r at sx[r]; the sums are exact integers.
#pragma omp for schedule(static)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t b = 0; b < nb; ++b) {
          int32_t sum = 0;
          for (int64_t i = 0; i < kBlock; ++i) {
            sum += token_qx[r * cols + b * kBlock + i];
            if (i == 15) scratch.qsum_lo[static_cast<size_t>(r * nb + b)] = sum;
          }
          scratch.dx[static_cast<size_t>(r * nb + b)] = token_sx[r];
          scratch.qsum[static_cast<size_t>(r * nb + b)] = sum;
          scratch.xs[static_cast<size_t>(r * nb + b)] = token_sx[r] * static_cast<float>(sum);
        }
    }
#pragma omp for schedule(static)
    for (int64_t item = 0; item < n_items; ++item) {
      const auto t = static_cast<size_t>(
          std::upper_bound(first_item.begin(), first_item.end(), item) - first_item.begin() - 1);
      const PackedTarget& target = targets[t];
      const View& v = target.w->view();
      const int64_t local = item - first_item[t], chunk = local / n_groups[t],
                    g = local % n_groups[t];
      const int64_t p0 = g * v.n_panels / n_groups[t], p1 = (g + 1) * v.n_panels / n_groups[t];
      const int64_t r0 = chunk * kRowChunk, r1 = std::min(n, r0 + kRowChunk);
      const Out out{target.y, v.rows, target.accumulate};
      if (target.w->has_int8_kernel() &&
          (activations != MatmulActivations::F32 || token_qx != nullptr)) {
        k.int8_panels(v, p0, p1, rows8, r0, r1, out);
      } else {
        k.f32_panels(v, p0, p1, x, r0, r1, out);
      }
    }
  }
}

}  // namespace

CpuIsa detect_cpu_isa() {
  if (cpu_has(CpuIsa::Avx512)) return CpuIsa::Avx512;
  if (cpu_has(CpuIsa::Avx2)) return CpuIsa::Avx2;
  return CpuIsa::Scalar;
}

CpuIsa default_cpu_isa() {
  const char* env = std::getenv("LIO_CPU_ISA");
  return env != nullptr && *env != '\0' ? parse_cpu_isa(env) : detect_cpu_isa();
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Scalar: break;
  }
  return "scalar";
}

CpuIsa parse_cpu_isa(std::string_view text) {
  CpuIsa isa;
  if (text == "auto") return detect_cpu_isa();
  if (text == "avx512") {
    isa = CpuIsa::Avx512;
  } else if (text == "avx2") {
    isa = CpuIsa::Avx2;
  } else if (text == "scalar") {
    isa = CpuIsa::Scalar;
  } else {
    throw InvalidArgument("--cpu-isa '" + std::string(text) +
                          "': want auto, avx512, avx2 or scalar");
  }
  if (!cpu_has(isa))
    throw UnsupportedError("--cpu-isa " + std::string(text) + ": this CPU lacks it (it has " +
                           std::string(cpu_isa_name(detect_cpu_isa())) + ")");
  return isa;
}

bool can_pack(DType dtype) {
  switch (dtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q3_0:
    case DType::Q3_1:
    case DType::Q6_K: return true;
    default: return false;
  }
}

PackedMatrix::PackedMatrix(const WeightMatrix& w) : name_(w.name), dtype_(w.dtype) {
  if (!can_pack(w.dtype)) kind_of(w.dtype);  // throws UnsupportedError naming the dtype
  if (w.data == nullptr || w.rows <= 0 || w.cols <= 0)
    throw InvalidArgument("PackedMatrix: weight '" + w.name + "' is null or empty");
  const Kind kind = kind_of(w.dtype);
  const int64_t block_elems = dtype_info(w.dtype).block_elems;
  if (is_code_kind(kind) && w.cols % block_elems != 0)
    throw InvalidArgument("PackedMatrix: weight '" + w.name + "' (" +
                          std::string(dtype_info(w.dtype).name) + ") has " +
                          std::to_string(w.cols) + " columns, not a multiple of its " +
                          std::to_string(block_elems) + "-element block");
  View& v = view_;
  v.kind = kind;
  v.rows = w.rows;
  v.cols = w.cols;
  v.n_panels = (w.rows + kPanelRows - 1) / kPanelRows;
  if (is_code_kind(kind)) {
    v.scale_f16 = w.dtype != DType::Q4_K && w.dtype != DType::Q6_K;
    v.has_min = has_min_of(w.dtype);
    v.split_scales = w.dtype == DType::Q6_K;
    v.zero = zero_of(w.dtype);
    v.block_bytes = code_bytes(kind) +
                    kPanelRows * (v.scale_f16 ? 2 : 4) * (v.has_min || v.split_scales ? 2 : 1);
    v.panel_bytes = (w.cols / kBlock) * v.block_bytes;
  } else {
    v.panel_bytes = w.cols * kPanelRows * (kind == Kind::F32 ? 4 : 2);
  }
  storage_ = std::make_unique<std::byte[]>(static_cast<size_t>(size_bytes() + 63));
  const auto base = reinterpret_cast<uintptr_t>(storage_.get());
  auto* data = storage_.get() + ((64 - base % 64) % 64);
  v.data = data;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < v.n_panels; ++p) {
    if (is_code_kind(kind)) {
      pack_code_panel(w, v, p, data + p * v.panel_bytes);
    } else {
      pack_float_panel(w, v, p, data + p * v.panel_bytes);
    }
  }
}

bool PackedMatrix::has_int8_kernel() const { return is_code_kind(view_.kind); }

void packed_matmul(std::span<const PackedTarget> targets, const float* x, int64_t n,
                   MatmulActivations activations, CpuIsa isa, PackedScratch& scratch) {
  if (x == nullptr) throw InvalidArgument("packed matmul: null x");
  run(targets, x, nullptr, nullptr, n, activations, isa, scratch);
}

void packed_matmul(const PackedMatrix& w, const float* x, float* y, int64_t n, bool accumulate,
                   MatmulActivations activations, CpuIsa isa, PackedScratch& scratch) {
  const PackedTarget t{&w, y, accumulate};
  packed_matmul(std::span<const PackedTarget>(&t, 1), x, n, activations, isa, scratch);
}

void packed_matmul_int8(std::span<const PackedTarget> targets, const int8_t* qx, const float* sx,
                        int64_t n, CpuIsa isa, PackedScratch& scratch) {
  if (qx == nullptr || sx == nullptr) throw InvalidArgument("packed matmul: null int8 x or scales");
  run(targets, nullptr, qx, sx, n, MatmulActivations::Int8PerToken, isa, scratch);
}

}  // namespace lio::cpu
