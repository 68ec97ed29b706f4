// Chapter 01, Task 2: largest batch under a memory budget given with its unit
// (exercises/01_kv_cache/kv_sizing.cpp). GB = 10^9 bytes, GiB = 2^30 bytes, MB = 10^6, MiB = 2^20:
// each case below fails when a decimal unit is read as its binary namesake (or the reverse).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "configs.h"
#include "lio/error.h"
#include "lio/kv_sizing.h"

namespace {
using namespace lio;
using namespace lio::grade;

constexpr MemorySize size_bytes(double n) { return {n, MemoryUnit::Bytes}; }
constexpr MemorySize size_mb(double n) { return {n, MemoryUnit::MB}; }
constexpr MemorySize size_mib(double n) { return {n, MemoryUnit::MiB}; }
constexpr MemorySize size_gb(double n) { return {n, MemoryUnit::GB}; }
constexpr MemorySize size_gib(double n) { return {n, MemoryUnit::GiB}; }

TEST(Ch01Task2, Llama7bIn40GiBWith14GiBOfWeights) {
  // (40 - 14) GiB / 2 GiB per 4096-token sequence = 13, an exact fit.
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gib(40), size_gib(14)), 13);
}

TEST(Ch01Task2, Llama7bIn40GBWith14GBOfWeights) {
  // 26 x 10^9 bytes / 2,147,483,648 bytes per sequence = 12.1 -> 12. Reading GB as GiB gives 13.
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gb(40), size_gb(14)), 12);
}

TEST(Ch01Task2, BudgetInGBWeightsInGiB) {
  // Llama 3.1 8B at 8192 tokens: 1 GiB per sequence. 80 x 10^9 - 16 x 2^30 = 62,820,130,816 bytes
  // = 58.5 sequences -> 58. Both read as GiB: 64; both as GB: 59.
  EXPECT_EQ(max_batch_under_budget(llama31_8b(), 8192, KvDtype::F16, size_gb(80), size_gib(16)), 58);
}

TEST(Ch01Task2, MebibytesAreNotMegabytes) {
  // SmolLM2 f32, 512 tokens: 46,080 x 512 = 23,592,960 bytes = 22.5 MiB per sequence.
  EXPECT_EQ(max_batch_under_budget(smollm2_135m(), 512, KvDtype::F32, size_mib(45), size_bytes(0)), 2);  // exact fit
  EXPECT_EQ(max_batch_under_budget(smollm2_135m(), 512, KvDtype::F32, size_mb(45), size_bytes(0)), 1);   // 45 x 10^6 = 1.9
}

TEST(Ch01Task2, DecimalBoundaryOneByteShort) {
  // SmolLM2 f16, 3125 tokens: 23,040 x 3125 = 72,000,000 bytes = 72 MB per sequence, so 144 MB
  // holds exactly 2; one byte of weights leaves room for 1. (144 MiB would still hold 2.)
  EXPECT_EQ(max_batch_under_budget(smollm2_135m(), 3125, KvDtype::F16, size_mb(144), size_bytes(0)), 2);
  EXPECT_EQ(max_batch_under_budget(smollm2_135m(), 3125, KvDtype::F16, size_mb(144), size_bytes(1)), 1);
}

TEST(Ch01Task2, BinaryBoundaryOneMiBShort) {
  // 40,959 MiB is 1 MiB short of 40 GiB: 26 GiB - 1 MiB of room, 12 sequences of 2 GiB.
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_mib(40959), size_gib(14)), 12);
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_mib(40960), size_gib(14)), 13);
}

TEST(Ch01Task2, ExactFitAndOneByteShortInBytes) {
  const ModelConfig c = smollm2_135m();
  const double per_seq = 46080.0 * 512;  // f32, 512 tokens
  EXPECT_EQ(max_batch_under_budget(c, 512, KvDtype::F32, size_bytes(1000 + 3 * per_seq), size_bytes(1000)), 3);
  EXPECT_EQ(max_batch_under_budget(c, 512, KvDtype::F32, size_bytes(1000 + 3 * per_seq - 1), size_bytes(1000)), 2);
}

TEST(Ch01Task2, FractionalGiB) {
  // 1.5 GiB of room holds no 2 GiB sequence; 2 GiB holds one.
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gib(15.5), size_gib(14)), 0);
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gib(16), size_gib(14)), 1);
}

TEST(Ch01Task2, NothingFitsReturnsZero) {
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gib(14), size_gib(14)), 0);
  // Weights larger than the budget: 14 x 10^9 bytes against 10 GiB = 10.7 x 10^9 bytes.
  EXPECT_EQ(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gib(10), size_gb(14)), 0);
}

TEST(Ch01Task2, RejectsEmptySequences) {
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 0, KvDtype::F16, size_gib(40), size_gib(14)), InvalidArgument);
}

TEST(Ch01Task2, RejectsNegativeSizes) {
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gb(-1), size_gib(14)), InvalidArgument);
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gib(40), size_bytes(-5)), InvalidArgument);
}

TEST(Ch01Task2, RejectsNonFiniteAndOverflowingSizes) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gb(nan), size_gib(14)), InvalidArgument);
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gib(inf), size_gib(14)), InvalidArgument);
  // 10^10 GiB is 1.07 x 10^19 bytes, past int64's 9.2 x 10^18.
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gib(1e10), size_gib(14)), InvalidArgument);
}

TEST(Ch01Task2, RejectsUnknownUnit) {
  const MemorySize odd{40, static_cast<MemoryUnit>(42)};
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, odd, size_gib(14)), InvalidArgument);
  EXPECT_THROW(max_batch_under_budget(llama_7b(), 4096, KvDtype::F16, size_gib(40), odd), InvalidArgument);
}

}  // namespace
