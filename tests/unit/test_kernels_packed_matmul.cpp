// The packed matmul (kernels/cpu/packed_matmul.h): decoding is exact, every instruction set gives
// the scalar twin's bits, a row's result does not depend on its batch, and the results are the
// dequantized product within the stated rounding.
#include <gtest/gtest.h>
#include "lio/omp_compat.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "packed_matmul.h"
#include "random_inputs.h"

namespace {

using lio::DType;
using lio::cpu::CpuIsa;
using lio::cpu::MatmulActivations;
using lio::cpu::PackedMatrix;
using lio::cpu::PackedScratch;

constexpr DType kPackable[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                               DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                               DType::Q4_K, DType::Q6_K, DType::Q3_0, DType::Q3_1};

bool encodable(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
         t == DType::Q4_0 || t == DType::Q4_1;
}

struct Weight {
  std::vector<std::byte> bytes;
  lio::WeightMatrix w;
  std::vector<float> dequantized;  // (rows, cols)
};

/// A (rows, cols) weight: normal values through quantize_row where LIO has an encoder, random
/// blocks otherwise (every code pattern), with its dequantized values.
Weight make_weight(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  Weight q;
  const int64_t rb = lio::dtype_row_bytes(dtype, cols);
  if (encodable(dtype)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(cols));
    q.bytes.resize(static_cast<size_t>(rows * rb));
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = dist(rng);
      lio::quantize_row(dtype, row.data(), q.bytes.data() + r * rb, cols);
    }
  } else {
    q.bytes = lio::testing::random_read_only_blocks(dtype, rows, cols, seed);
  }
  q.dequantized.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    lio::dequantize_row(dtype, q.bytes.data() + r * rb, q.dequantized.data() + r * cols, cols);
  q.w = lio::WeightMatrix{std::string("w_") + std::string(lio::dtype_info(dtype).name),
                          dtype,
                          rows,
                          cols,
                          rb,
                          q.bytes.data()};
  return q;
}

int64_t cols_for(DType t) { return t == DType::Q4_K || t == DType::Q6_K ? 512 : 96; }

/// Every ISA this CPU runs, scalar first (the reference).
std::vector<CpuIsa> isas() {
  std::vector<CpuIsa> v{CpuIsa::Scalar};
  const CpuIsa best = lio::cpu::detect_cpu_isa();
  if (best == CpuIsa::Avx2 || best == CpuIsa::Avx512) v.push_back(CpuIsa::Avx2);
  if (best == CpuIsa::Avx512) v.push_back(CpuIsa::Avx512);
  return v;
}

std::vector<float> run(const PackedMatrix& pm, const std::vector<float>& x, int64_t n,
                       MatmulActivations act, CpuIsa isa) {
  PackedScratch scratch;
  std::vector<float> y(static_cast<size_t>(n * pm.rows()) + 1, -7.0f);  // + a guard element
  lio::cpu::packed_matmul(pm, x.data(), y.data(), n, false, act, isa, scratch);
  EXPECT_EQ(y.back(), -7.0f) << "wrote past the last row";
  y.pop_back();
  return y;
}

std::string label(DType t, MatmulActivations act, CpuIsa isa) {
  return std::string(lio::dtype_info(t).name) +
         (act == MatmulActivations::Int8 ? " int8 " : " f32 ") +
         std::string(lio::cpu::cpu_isa_name(isa));
}

// Every packed value is the dequantized weight, bit for bit: the f32 path over a quantized
// matrix equals the f32 path over its dequantized F32 copy on every ISA (same values, same
// operations). 37 rows: two full panels and a padded one.
TEST(PackedMatmul, QuantizedWeightsDecodeToTheirDequantizedValues) {
  for (DType dtype : kPackable) {
    const int64_t rows = 37, cols = cols_for(dtype), n = 3;
    const Weight q = make_weight(dtype, rows, cols, 11);
    const lio::WeightMatrix f32{"f32",    DType::F32,
                                rows,     cols,
                                cols * 4, reinterpret_cast<const std::byte*>(q.dequantized.data())};
    const PackedMatrix pq(q.w), pf(f32);
    const std::vector<float> x =
        lio::testing::random_floats(static_cast<size_t>(n * cols), -2.0f, 2.0f, 12);
    for (CpuIsa isa : isas()) {
      const std::vector<float> a = run(pq, x, n, MatmulActivations::F32, isa),
                               b = run(pf, x, n, MatmulActivations::F32, isa);
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_EQ(a[i], b[i]) << label(dtype, MatmulActivations::F32, isa) << " at " << i;
    }
  }
}

// The decoded panel itself, every value against dequantize_row (== : -0 and +0 agree).
TEST(PackedMatmul, DecodedPanelsAreDequantizeRow) {
  for (DType dtype : kPackable) {
    const PackedMatrix probe(make_weight(dtype, 1, cols_for(dtype), 1).w);
    if (!probe.has_int8_kernel()) continue;  // float panels hold the values as stored
    const int64_t rows = 21, cols = cols_for(dtype);
    const Weight q = make_weight(dtype, rows, cols, 13);
    const PackedMatrix pm(q.w);
    std::vector<float> values(static_cast<size_t>(cols * 16));
    for (int64_t p = 0; p < pm.view().n_panels; ++p) {
      lio::cpu::packed::scalar_decode_panel(pm.view(), p, values.data());
      for (int64_t j = 0; j < 16 && p * 16 + j < rows; ++j)
        for (int64_t k = 0; k < cols; ++k)
          ASSERT_EQ(values[static_cast<size_t>(k * 16 + j)],
                    q.dequantized[static_cast<size_t>((p * 16 + j) * cols + k)])
              << lio::dtype_info(dtype).name << " row " << p * 16 + j << " col " << k;
    }
  }
}

// AVX2 and AVX-512 give the scalar twin's bits, for both activation precisions.
TEST(PackedMatmul, EveryIsaGivesTheScalarTwinsBits) {
  for (DType dtype : kPackable)
    for (MatmulActivations act : {MatmulActivations::F32, MatmulActivations::Int8}) {
      const int64_t rows = 45, cols = cols_for(dtype), n = 11;
      const Weight q = make_weight(dtype, rows, cols, 17);
      const PackedMatrix pm(q.w);
      const std::vector<float> x =
          lio::testing::random_floats(static_cast<size_t>(n * cols), -3.0f, 3.0f, 18);
      const std::vector<float> ref = run(pm, x, n, act, CpuIsa::Scalar);
      double mag = 0;
      for (float v : ref) mag += std::fabs(v);
      ASSERT_GT(mag, 1e-3 * static_cast<double>(ref.size()))
          << "outputs too small to tell paths apart";
      for (CpuIsa isa : isas()) {
        const std::vector<float> y = run(pm, x, n, act, isa);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], ref[i]) << label(dtype, act, isa) << " at " << i;
      }
    }
}

// The AVX2 int8 kernel sums several pmaddubsw results as int16 before widening them (4-bit,
// 5-bit and Q6_K codes), which is exact only while no int16 lane can pass 32,767. The largest
// codes times x at +-127 everywhere (every product the same sign) are that bound's worst case:
// every ISA must still give the scalar twin's bits.
TEST(PackedMatmul, ExtremeCodesDoNotSaturateTheInt16Sums) {
  for (DType dtype : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q6_K}) {
    const int64_t rows = 16, cols = cols_for(dtype);
    Weight q = make_weight(dtype, rows, cols, 91);  // random scales, codes overwritten below
    const int64_t rb = lio::dtype_row_bytes(dtype, cols), blocks = cols / lio::dtype_info(dtype).block_elems;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < blocks; ++b) {
        std::byte* at = q.bytes.data() + r * rb;
        const auto fill = [](auto& array, uint8_t v) { std::memset(array, v, sizeof array); };
        switch (dtype) {
          case DType::Q4_0: fill(reinterpret_cast<lio::BlockQ4_0*>(at)[b].qs, 0xFF); break;  // code 15
          case DType::Q4_1: fill(reinterpret_cast<lio::BlockQ4_1*>(at)[b].qs, 0xFF); break;
          case DType::Q5_0: {  // code 31
            auto& blk = reinterpret_cast<lio::BlockQ5_0*>(at)[b];
            fill(blk.qs, 0xFF), fill(blk.qh, 0xFF);
            break;
          }
          case DType::Q5_1: {
            auto& blk = reinterpret_cast<lio::BlockQ5_1*>(at)[b];
            fill(blk.qs, 0xFF), fill(blk.qh, 0xFF);
            break;
          }
          case DType::Q4_K: fill(reinterpret_cast<lio::BlockQ4_K*>(at)[b].qs, 0xFF); break;
          default: {  // Q6_K: q = 0, the code q - 32 = -32 of largest magnitude
            auto& blk = reinterpret_cast<lio::BlockQ6_K*>(at)[b];
            fill(blk.ql, 0x00), fill(blk.qh, 0x00);
            break;
          }
        }
      }
    const PackedMatrix pm(q.w);
    for (const float sign : {1.0f, -1.0f}) {
      const std::vector<float> x(static_cast<size_t>(2 * cols), 3.0f * sign);  // every code 127 * sign
      const std::vector<float> ref = run(pm, x, 2, MatmulActivations::Int8, CpuIsa::Scalar);
      for (CpuIsa isa : isas()) {
        const std::vector<float> y = run(pm, x, 2, MatmulActivations::Int8, isa);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], ref[i]) << label(dtype, MatmulActivations::Int8, isa) << " x sign " << sign << " at " << i;
      }
    }
  }
}

// A row alone, or in a batch of 70 (R-groups of 8 / 6 / 4 with remainders, two row chunks of
// 64), gives the same bits; with 1 or 2 threads alike.
TEST(PackedMatmul, RowsAreBitwiseIdenticalAloneAndInAnyBatch) {
  for (DType dtype : kPackable)
    for (MatmulActivations act : {MatmulActivations::F32, MatmulActivations::Int8})
      for (CpuIsa isa : isas()) {
        const int64_t rows = 40, cols = cols_for(dtype), n = 70;
        const Weight q = make_weight(dtype, rows, cols, 23);
        const PackedMatrix pm(q.w);
        const std::vector<float> x =
            lio::testing::random_floats(static_cast<size_t>(n * cols), -2.0f, 2.0f, 24);
        const std::vector<float> batched = run(pm, x, n, act, isa);
        for (int64_t i : {int64_t{0}, int64_t{5}, int64_t{63}, int64_t{64}, int64_t{69}}) {
          const std::vector<float> xi(x.begin() + i * cols, x.begin() + (i + 1) * cols);
          const std::vector<float> single = run(pm, xi, 1, act, isa);
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(single[r], batched[i * rows + r])
                << label(dtype, act, isa) << " row " << i << " out " << r;
        }
      }
}

// f32 activations: the dequantized product to f32 rounding; int8 activations: within the
// rounding of x to 8 bits (each element of a block carries up to 0.5 / 127 of its max |x|).
TEST(PackedMatmul, MatchesTheDequantizedProduct) {
  for (DType dtype : kPackable)
    for (MatmulActivations act : {MatmulActivations::F32, MatmulActivations::Int8}) {
      const int64_t rows = 33, cols = cols_for(dtype), n = 4;
      const Weight q = make_weight(dtype, rows, cols, 31);
      const PackedMatrix pm(q.w);
      const bool int8 = act == MatmulActivations::Int8 && pm.has_int8_kernel();
      const std::vector<float> x =
          lio::testing::random_floats(static_cast<size_t>(n * cols), -2.0f, 2.0f, 32);
      const std::vector<float> y = run(pm, x, n, act, lio::cpu::detect_cpu_isa());
      double worst = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < rows; ++r) {
          double ref = 0, mag = 0, bound = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const double w = q.dequantized[static_cast<size_t>(r * cols + c)],
                         xv = x[static_cast<size_t>(i * cols + c)];
            ref += w * xv;
            mag += std::fabs(w * xv);
            double amax = 0;
            for (int64_t k = c / 32 * 32; k < c / 32 * 32 + 32; ++k)
              amax = std::max(amax, double(std::fabs(x[static_cast<size_t>(i * cols + k)])));
            bound += std::fabs(w) * amax * 0.5 / 127.0;
          }
          const double got = y[static_cast<size_t>(i * rows + r)];
          ASSERT_NEAR(got, ref, (int8 ? bound : 0.0) + 1e-5 * mag + 1e-6)
              << label(dtype, act, CpuIsa::Scalar);
          worst = std::max(worst, std::fabs(got - ref));
        }
      if (int8) {
        EXPECT_GT(worst, 1e-6) << "no rounding at all: the int8 path did not run";
      }
    }
}

// Fused targets (Q, K, V sharing x) equal separate calls, and accumulate adds to y.
TEST(PackedMatmul, FusedTargetsAndAccumulateEqualSeparateCalls) {
  const int64_t cols = 64, n = 9;
  const Weight a = make_weight(DType::Q4_1, 48, cols, 41),
               b = make_weight(DType::Q8_0, 20, cols, 42),
               c = make_weight(DType::F32, 17, cols, 43);
  const PackedMatrix pa(a.w), pb(b.w), pc(c.w);
  const std::vector<float> x =
      lio::testing::random_floats(static_cast<size_t>(n * cols), -1.0f, 1.0f, 44);
  for (MatmulActivations act : {MatmulActivations::F32, MatmulActivations::Int8}) {
    const CpuIsa isa = lio::cpu::detect_cpu_isa();
    std::vector<float> ya(static_cast<size_t>(n * 48)), yb(static_cast<size_t>(n * 20), 1.5f),
        yc(static_cast<size_t>(n * 17));
    const lio::cpu::PackedTarget targets[] = {
        {&pa, ya.data(), false}, {&pb, yb.data(), true}, {&pc, yc.data(), false}};
    PackedScratch scratch;
    lio::cpu::packed_matmul(targets, x.data(), n, act, isa, scratch);
    const std::vector<float> sa = run(pa, x, n, act, isa), sb = run(pb, x, n, act, isa),
                             sc = run(pc, x, n, act, isa);
    for (size_t i = 0; i < ya.size(); ++i) ASSERT_EQ(ya[i], sa[i]);
    for (size_t i = 0; i < yb.size(); ++i) ASSERT_EQ(yb[i], 1.5f + sb[i]);
    for (size_t i = 0; i < yc.size(); ++i) ASSERT_EQ(yc[i], sc[i]);
  }
}

// Per-token int8 rows (W8A8): the dequantized weights times the dequantized x, bit-identical
// on every ISA and within f32 rounding of the double product.
TEST(PackedMatmul, PerTokenInt8IsTheDequantizedProduct) {
  for (DType dtype :
       {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_1, DType::Q4_K, DType::Q6_K}) {
    const int64_t rows = 30, cols = cols_for(dtype), n = 3;
    const Weight q = make_weight(dtype, rows, cols, 51);
    const PackedMatrix pm(q.w);
    std::mt19937 rng(52);
    std::uniform_int_distribution<int> code(-127, 127);
    std::vector<int8_t> qx(static_cast<size_t>(n * cols));
    for (int8_t& v : qx) v = static_cast<int8_t>(code(rng));
    const std::vector<float> sx = {0.01f, 0.02f, 0.005f};
    std::vector<float> ref_bits;
    for (CpuIsa isa : isas()) {
      std::vector<float> y(static_cast<size_t>(n * rows));
      PackedScratch scratch;
      const lio::cpu::PackedTarget t{&pm, y.data(), false};
      lio::cpu::packed_matmul_int8({&t, 1}, qx.data(), sx.data(), n, isa, scratch);
      if (ref_bits.empty()) ref_bits = y;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const double p = double(q.dequantized[static_cast<size_t>(r * cols + c)]) * sx[i] *
                             qx[static_cast<size_t>(i * cols + c)];
            ref += p;
            mag += std::fabs(p);
          }
          ASSERT_NEAR(y[static_cast<size_t>(i * rows + r)], ref, 2e-6 * mag + 1e-6)
              << lio::dtype_info(dtype).name;
          ASSERT_EQ(y[static_cast<size_t>(i * rows + r)],
                    ref_bits[static_cast<size_t>(i * rows + r)])
              << lio::dtype_info(dtype).name << " " << lio::cpu::cpu_isa_name(isa);
        }
    }
  }
}

// Groups of 1-4 panels (645 rows: 41 panels, split in 12 groups of 3 and 4) and 1 or 2 threads
// give the same bits as the scalar twin, which walks one panel at a time.
TEST(PackedMatmul, PanelGroupsAndThreadCountsDoNotChangeTheBits) {
  for (DType dtype : {DType::F32, DType::BF16, DType::Q4_1, DType::Q8_0})
    for (MatmulActivations act : {MatmulActivations::F32, MatmulActivations::Int8}) {
      const int64_t rows = 645, cols = 64;
      const Weight q = make_weight(dtype, rows, cols, 71);
      const PackedMatrix pm(q.w);
      for (int64_t n : {1, 2, 5}) {
        const std::vector<float> x =
            lio::testing::random_floats(static_cast<size_t>(n * cols), -1.0f, 1.0f, 72);
        const std::vector<float> ref = run(pm, x, n, act, CpuIsa::Scalar);
        for (CpuIsa isa : isas())
          for (int threads : {1, 2}) {
            const int saved = omp_get_max_threads();
            omp_set_num_threads(threads);
            const std::vector<float> y = run(pm, x, n, act, isa);
            omp_set_num_threads(saved);
            for (size_t i = 0; i < y.size(); ++i)
              ASSERT_EQ(y[i], ref[i])
                  << label(dtype, act, isa) << " n " << n << " threads " << threads << " at " << i;
          }
      }
    }
}

TEST(PackedMatmul, RejectsWhatItCannotRun) {
  for (DType t : kPackable) EXPECT_TRUE(lio::cpu::can_pack(t)) << lio::dtype_info(t).name;
  const Weight f = make_weight(DType::F32, 16, 64, 62), g = make_weight(DType::Q4_0, 16, 96, 63);
  const PackedMatrix pf(f.w), pg(g.w);
  std::vector<float> x(96, 1.0f), y(32);
  PackedScratch s;
  EXPECT_THROW(lio::cpu::packed_matmul(pf, nullptr, y.data(), 1, false, MatmulActivations::F32,
                                       CpuIsa::Scalar, s),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::packed_matmul(pf, x.data(), y.data(), 0, false, MatmulActivations::F32,
                                       CpuIsa::Scalar, s),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::packed_matmul(pf, x.data(), y.data(), 1, false,
                                       MatmulActivations::Int8PerToken, CpuIsa::Scalar, s),
               lio::InvalidArgument);
  const lio::cpu::PackedTarget mixed[] = {{&pf, y.data(), false}, {&pg, y.data(), false}};
  EXPECT_THROW(
      lio::cpu::packed_matmul(mixed, x.data(), 1, MatmulActivations::F32, CpuIsa::Scalar, s),
      lio::InvalidArgument);
  const std::vector<int8_t> qx(64, 1);
  const float sx = 1.0f;
  const lio::cpu::PackedTarget on_f32{&pf, y.data(), false};
  EXPECT_THROW(lio::cpu::packed_matmul_int8({&on_f32, 1}, qx.data(), &sx, 1, CpuIsa::Scalar, s),
               lio::InvalidArgument);
  const lio::WeightMatrix ragged{"ragged", DType::Q4_0, 16, 40, 0, g.w.data};
  EXPECT_THROW(PackedMatrix{ragged}, lio::InvalidArgument);
  EXPECT_THROW(lio::cpu::parse_cpu_isa("sse"), lio::InvalidArgument);
  EXPECT_EQ(lio::cpu::parse_cpu_isa("scalar"), CpuIsa::Scalar);
  EXPECT_EQ(lio::cpu::parse_cpu_isa("auto"), lio::cpu::detect_cpu_isa());
}

}  // namespace
