// CpuBackend::set_profiling (issue 64): the per-op times bench_decode --profile prints.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace {

const lio::CpuOpTime* find_op(const std::vector<lio::CpuOpTime>& ops, const std::string& name) {
  const auto it = std::find_if(ops.begin(), ops.end(), [&](const lio::CpuOpTime& t) { return t.op == name; });
  return it == ops.end() ? nullptr : &*it;
}

// A decode step of the tiny llama model (2 layers) profiled: each layer's ops counted once per
// token, the matmuls' bytes are the packed matrices' (every layer's and the LM head's, nothing
// twice: matmul_many's targets are one op), off records nothing, clear_op_times empties.
TEST(CpuProfile, CountsEachOpOncePerLayerAndTheMatricesBytes) {
  const std::string dir = lio::testing::make_temp_dir("lio_cpu_profile");
  lio::testing::TinyModelSpec spec;
  lio::testing::write_tiny_gguf(dir + "/m.gguf", spec);
  const lio::LoadedModel m = lio::load_model(dir + "/m.gguf", lio::WeightMode::AsStored);
  auto backend = std::make_unique<lio::CpuBackend>(m.config, m.weights);
  lio::CpuBackend* cpu = backend.get();
  lio::ModelRunner runner(std::move(backend), lio::KvPoolConfig{16, 16});
  lio::SoloSequence seq(runner, 64);
  const std::vector<int32_t> prompt = {5, 17, 200, 3, 99};
  seq.forward(prompt);
  EXPECT_TRUE(cpu->op_times().empty()) << "profiling is off by default";

  cpu->set_profiling(true);
  const int32_t next = 42;
  constexpr int kSteps = 3;
  for (int i = 0; i < kSteps; ++i) seq.forward(std::span(&next, 1));
  cpu->set_profiling(false);
  const std::vector<lio::CpuOpTime> ops = cpu->op_times();
  const int64_t layers = spec.n_layers;
  for (const char* name : {"attention", "matmul q/k/v", "matmul o", "matmul gate/up", "matmul down"}) {
    const lio::CpuOpTime* t = find_op(ops, name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->calls, kSteps * layers) << name;
    EXPECT_GE(t->total_ms, 0.0) << name;
  }
  const lio::CpuOpTime* head = find_op(ops, "matmul lm_head");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->calls, kSteps);
  double matmul_bytes = 0;
  for (const lio::CpuOpTime& t : ops) {
    if (t.op.rfind("matmul", 0) == 0) {
      EXPECT_GT(t.weight_bytes, 0.0) << t.op;
    } else {
      EXPECT_EQ(t.weight_bytes, 0.0) << t.op;
    }
    matmul_bytes += t.weight_bytes;
  }
  // Every packed matrix once a token: the backend's bytes less the embedding table and the norms
  // (counted from the weights, not from the profile).
  double vectors = static_cast<double>(m.weights.output_norm.size() * sizeof(float));
  for (const lio::LayerWeights& L : m.weights.layers) vectors += static_cast<double>(L.vector_floats() * sizeof(float));
  const double packed =
      static_cast<double>(cpu->weight_bytes() - m.weights.token_embd.size_bytes()) - vectors;
  EXPECT_DOUBLE_EQ(matmul_bytes, packed * kSteps);
  for (size_t i = 1; i < ops.size(); ++i) EXPECT_GE(ops[i - 1].total_ms, ops[i].total_ms) << "largest first";

  // Off again: nothing more is added.
  seq.forward(std::span(&next, 1));
  EXPECT_EQ(find_op(cpu->op_times(), "attention")->calls, kSteps * layers);
  cpu->clear_op_times();
  EXPECT_TRUE(cpu->op_times().empty());
}

}  // namespace
