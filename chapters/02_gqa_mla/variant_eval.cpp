// variant_eval.cpp — quality and decode-speed measurements of chapter 02 (see variant_eval.h).
#include "variant_eval.h"

#include "lio/omp_compat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "lio/error.h"
#include "lio/forward_batch.h"
#include "lio/kv_pool.h"

namespace lio::ch02 {
namespace {

constexpr int64_t kBlock = 16;

// All-position logits of `tokens` through a SoloSequence.
std::vector<float> all_logits(const LoadedModel& model, const std::vector<int32_t>& tokens,
                              const RunSettings& run = {}) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > model.config.context_length) {
    throw InvalidArgument("ch02: the evaluation text has " + std::to_string(n) + " tokens, need 1 .. " +
                          std::to_string(model.config.context_length));
  }
  const int64_t mib = (kv_block_bytes(model.config, kBlock) * ((n + kBlock - 1) / kBlock) >> 20) + 1;
  auto runner = make_runner(model, Device::Cpu, KvPoolOptions{kBlock, mib, run.kv}, run.activations);
  SoloSequence seq(*runner, n);
  const std::span<const float> out = seq.forward(tokens, /*all_logits=*/true);
  return {out.begin(), out.end()};
}

void log_softmax_rows(std::vector<float>& x, int64_t vocab) {
  for (size_t r = 0; r < x.size(); r += static_cast<size_t>(vocab)) {
    float* row = x.data() + r;
    const float mx = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
    const auto lse = static_cast<float>(mx + std::log(sum));
    for (int64_t j = 0; j < vocab; ++j) row[j] -= lse;
  }
}

}  // namespace

ReferenceLogprobs reference_logprobs(const LoadedModel& model, const std::vector<int32_t>& tokens) {
  ReferenceLogprobs r{tokens, model.config.vocab_size, all_logits(model, tokens)};
  log_softmax_rows(r.logprobs, r.vocab);
  return r;
}

Quality evaluate_quality(const LoadedModel& model, const ReferenceLogprobs& ref, const RunSettings& run) {
  if (model.config.vocab_size != ref.vocab) {
    throw InvalidArgument("ch02: the variant's vocabulary (" + std::to_string(model.config.vocab_size) +
                          ") is not the reference's (" + std::to_string(ref.vocab) + ")");
  }
  std::vector<float> lp = all_logits(model, ref.tokens, run);
  log_softmax_rows(lp, ref.vocab);
  const auto n = static_cast<int64_t>(ref.tokens.size());
  Quality q;
  q.n_positions = n;
  double kl = 0.0, nll = 0.0;
  int64_t agree = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* p = ref.logprobs.data() + i * ref.vocab;  // log P_ref
    const float* v = lp.data() + i * ref.vocab;            // log P_variant
    double row_kl = 0.0;
    for (int64_t j = 0; j < ref.vocab; ++j) row_kl += std::exp(static_cast<double>(p[j])) * (p[j] - v[j]);
    kl += row_kl;
    agree += (std::max_element(p, p + ref.vocab) - p) == (std::max_element(v, v + ref.vocab) - v);
    if (i + 1 < n) nll -= v[ref.tokens[static_cast<size_t>(i + 1)]];
  }
  q.mean_kl = kl / static_cast<double>(n);
  q.top1_agreement = static_cast<double>(agree) / static_cast<double>(n);
  q.perplexity = n > 1 ? std::exp(nll / static_cast<double>(n - 1)) : 0.0;
  return q;
}

double decode_tokens_per_s(const LoadedModel& model, int64_t context, int64_t batch, int steps, Device device,
                           const RunSettings& run) {
  if (context < 1 || batch < 1 || steps < 1 || context + steps > model.config.context_length) {
    throw InvalidArgument("ch02: decode at context " + std::to_string(context) + " + " + std::to_string(steps) +
                          " steps, batch " + std::to_string(batch) + " does not fit (context length " +
                          std::to_string(model.config.context_length) + ")");
  }
  const int64_t per_seq = (context + steps + kBlock - 1) / kBlock;
  const int64_t mib = ((kv_block_bytes(model.config, kBlock) * per_seq * batch) >> 20) + 1;
  auto runner = make_runner(model, device, KvPoolOptions{kBlock, mib, run.kv}, run.activations);
  std::vector<double> times;
  for (int t = -1; t < steps; ++t) {  // step -1 warms up (scratch, caches)
    const int64_t pos = context + std::max(t, 0);
    ForwardBatch b(kBlock);
    for (int64_t s = 0; s < batch; ++s) {
      std::vector<int32_t> table(static_cast<size_t>(per_seq));
      for (int64_t j = 0; j < per_seq; ++j) table[static_cast<size_t>(j)] = static_cast<int32_t>(s * per_seq + j);
      const int32_t token = static_cast<int32_t>(100 + s);
      b.add_sequence(std::span<const int32_t>(&token, 1), pos, table);
    }
    const auto t0 = std::chrono::steady_clock::now();
    runner->forward(b);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (t >= 0) times.push_back(dt.count());
  }
  std::sort(times.begin(), times.end());
  return static_cast<double>(batch) / times[times.size() / 2];
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string describe_device(const LoadedModel& model, Device device) {
  if (device == Device::Cpu) return "cpu, " + std::to_string(omp_get_max_threads()) + " threads";
  return make_backend(model, device)->device_description();
}

namespace {
std::vector<int32_t> text_tokens(const LoadedModel& model, const std::string& name, int64_t max_tokens) {
  const std::string path = std::string(LIO_SOURCE_DIR) + "/chapters/02_gqa_mla/" + name;
  std::ifstream in(path);
  if (!in) throw InvalidArgument("ch02: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int32_t> ids = model.tokenizer->encode(ss.str(), /*parse_special=*/false, /*add_bos=*/false);
  if (static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
  return ids;
}

}  // namespace

std::vector<int32_t> eval_text_tokens(const LoadedModel& model, int64_t max_tokens) {
  return text_tokens(model, "eval_text.txt", max_tokens);
}

std::vector<int32_t> calibration_text_tokens(const LoadedModel& model, int64_t max_tokens) {
  return text_tokens(model, "calib_text.txt", max_tokens);
}

}  // namespace lio::ch02
