// gqa.cpp — KV-head variants of a loaded model (chapter 02): MHA by repeating K/V heads,
// GQA/MQA by mean-pooling them (the learner's Task 3).
#include "lio/kv_head_variants.h"

#include <cstring>
#include <memory>
#include <string>

#include "lio/dtype.h"
#include "lio/error.h"

namespace lio {

int64_t parse_attention_variant(const std::string& text, const ModelConfig& c) {
  int64_t n = 0;
  if (text == "gqa") {
    n = c.n_kv_heads;
  } else if (text == "mha") {
    n = c.n_heads;
  } else if (text == "mqa") {
    n = 1;
  } else if (text.rfind("gqa:", 0) == 0) {
    try {
      size_t used = 0;
      n = std::stoll(text.substr(4), &used);
      if (used != text.size() - 4) n = 0;
    } catch (const std::exception&) {
      n = 0;
    }
    if (n < 1) throw InvalidArgument("--attention gqa:N needs a positive integer N, got '" + text + "'");
  } else {
    throw InvalidArgument("--attention must be mha, gqa, mqa or gqa:N, got '" + text + "'");
  }
  if (n > c.n_heads || c.n_heads % n != 0) {
    throw InvalidArgument("--attention " + text + ": " + std::to_string(n) + " KV heads do not divide the " +
                          std::to_string(c.n_heads) + " query heads");
  }
  if (n % c.n_kv_heads != 0 && c.n_kv_heads % n != 0) {
    throw InvalidArgument("--attention " + text + ": " + std::to_string(n) +
                          " KV heads are neither a multiple nor a divisor of the model's " +
                          std::to_string(c.n_kv_heads) + " (repeat or mean-pool needs one)");
  }
  return n;
}

namespace {

// Rebuilds one K or V projection (n_kv_heads * head_dim, d_model) with n_new heads.
WeightMatrix rebuild(const WeightMatrix& w, const ModelConfig& c, int64_t n_new,
                     std::vector<std::shared_ptr<const void>>& storage) {
  const int64_t n_old = c.n_kv_heads, hd = c.head_dim, cols = w.cols;
  WeightMatrix out = w;
  out.rows = n_new * hd;
  if (n_new >= n_old) {
    // Repeat: new head j is a byte copy of stored head j / (n_new / n_old).
    const int64_t rep = n_new / n_old, head_bytes = hd * w.row_bytes;
    auto buf = std::shared_ptr<std::byte[]>(new std::byte[static_cast<size_t>(out.rows * w.row_bytes)]);
    for (int64_t j = 0; j < n_new; ++j) std::memcpy(buf.get() + j * head_bytes, w.row((j / rep) * hd), head_bytes);
    out.data = buf.get();
    storage.push_back(std::shared_ptr<const void>(buf, buf.get()));
    return out;
  }
  // Mean-pool (Task 3) in f32.
  std::vector<float> dense(static_cast<size_t>(w.rows * cols));
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w.dtype, w.row(r), dense.data() + r * cols, cols);
  auto pooled = std::make_shared<std::vector<float>>(mean_pool_kv_heads(dense, n_old, hd, cols, n_new));
  out.dtype = DType::F32;
  out.row_bytes = dtype_row_bytes(DType::F32, cols);
  out.data = reinterpret_cast<const std::byte*>(pooled->data());
  storage.push_back(std::shared_ptr<const void>(pooled, pooled->data()));
  return out;
}

}  // namespace

KvHeadVariant make_kv_head_variant(const ModelConfig& config, const Weights& weights, int64_t n_kv_heads) {
  if (n_kv_heads < 1 || n_kv_heads > config.n_heads || config.n_heads % n_kv_heads != 0 ||
      (n_kv_heads % config.n_kv_heads != 0 && config.n_kv_heads % n_kv_heads != 0)) {
    throw InvalidArgument("make_kv_head_variant: " + std::to_string(n_kv_heads) + " KV heads do not fit " +
                          std::to_string(config.n_heads) + " query heads and " + std::to_string(config.n_kv_heads) +
                          " stored KV heads");
  }
  KvHeadVariant v{config, weights};
  if (n_kv_heads == config.n_kv_heads) return v;
  for (LayerWeights& L : v.weights.layers) {
    L.matrix(WeightKind::Wk) =
        rebuild(L.matrix(WeightKind::Wk), config, n_kv_heads, v.weights.storage);
    L.matrix(WeightKind::Wv) =
        rebuild(L.matrix(WeightKind::Wv), config, n_kv_heads, v.weights.storage);
    L.matrix(WeightKind::Wk).name +=
        n_kv_heads > config.n_kv_heads ? " (repeated)" : " (mean-pooled)";
    L.matrix(WeightKind::Wv).name +=
        n_kv_heads > config.n_kv_heads ? " (repeated)" : " (mean-pooled)";
  }
  v.config.n_kv_heads = n_kv_heads;
  return v;
}

void apply_kv_head_variant(LoadedModel& model, int64_t n_kv_heads) {
  if (n_kv_heads == model.config.n_kv_heads) return;
  KvHeadVariant v = make_kv_head_variant(model.config, model.weights, n_kv_heads);
  model.config = std::move(v.config);
  model.weights = std::move(v.weights);
}

}  // namespace lio
