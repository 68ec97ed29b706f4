#include "lio/model_loader.h"

#include <cstdlib>
#include <filesystem>
#include <functional>

#include "lio/architecture.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/safetensors.h"

namespace lio {
namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// A raw tensor as either reader found it: enough to build matrices and vectors.
struct RawTensor {
  DType dtype;
  std::vector<int64_t> shape;
  const std::byte* data;
};

using Lookup = std::function<const RawTensor*(const std::string&)>;

/// Loads tensors by name from one source, checking shapes against the config.
class TensorBinder {
 public:
  TensorBinder(std::string source, std::map<std::string, RawTensor> tensors, WeightMode mode,
               Weights& weights)
      : source_(std::move(source)), tensors_(std::move(tensors)), mode_(mode), weights_(weights) {}

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

  const RawTensor& get(const std::string& name, const std::vector<int64_t>& want) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw FormatError(source_ + ": tensor '" + name + "' is missing");
    if (it->second.shape != want) {
      throw FormatError(source_ + ": tensor '" + name + "' has shape " + shape_str(it->second.shape) +
                        ", expected " + shape_str(want));
    }
    return it->second;
  }

  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
    const RawTensor& t = get(name, {rows, cols});
    WeightMatrix m;
    m.name = name;
    m.rows = rows;
    m.cols = cols;
    const DType target = target_dtype(t.dtype);
    if (target != t.dtype) {
      // Dequantize each row to f32, then (for F16/BF16) round once to the target type.
      const int64_t src_row_bytes = dtype_row_bytes(t.dtype, cols);
      const int64_t dst_row_bytes = dtype_row_bytes(target, cols);
      auto buf = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(rows * dst_row_bytes));
      std::byte* dst = buf->data();
#pragma omp parallel
      {
        std::vector<float> row_f32(static_cast<size_t>(cols));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
          float* out = target == DType::F32 ? reinterpret_cast<float*>(dst + r * dst_row_bytes)
                                            : row_f32.data();
          dequantize_row(t.dtype, t.data + r * src_row_bytes, out, cols);
          if (target != DType::F32) quantize_row(target, out, dst + r * dst_row_bytes, cols);
        }
      }
      m.dtype = target;
      m.data = buf->data();
      weights_.storage.push_back(buf);
    } else {
      m.dtype = t.dtype;
      m.data = t.data;
    }
    m.row_bytes = dtype_row_bytes(m.dtype, cols);
    return m;
  }

  /// The dtype a matrix stored as `stored` is kept in under this binder's mode (AsStored keeps
  /// the file's type, K-quants included).
  DType target_dtype(DType stored) const {
    switch (mode_) {
      case WeightMode::AsStored: return stored;
      case WeightMode::F32: return DType::F32;
      case WeightMode::F16: return DType::F16;
      case WeightMode::BF16: return DType::BF16;
    }
    return stored;
  }

  std::vector<float> vector(const std::string& name, int64_t n) const {
    const RawTensor& t = get(name, {n});
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(t.dtype, t.data, out.data(), n);
    return out;
  }

 private:
  std::string source_;
  std::map<std::string, RawTensor> tensors_;
  WeightMode mode_;
  Weights& weights_;
};

/// Tensor names of one kind of checkpoint: the model-level tensors' names, the prefix of layer
/// N's, and which column of a family's table holds the rest.
struct NameScheme {
  std::string embd, out_norm, output;
  std::string (*layer_prefix)(int64_t layer);
  std::string_view TensorSpec::*name;  ///< &TensorSpec::gguf or &TensorSpec::hf
};

const NameScheme kGgufNames{"token_embd.weight", "output_norm.weight", "output.weight",
                            [](int64_t l) { return "blk." + std::to_string(l) + "."; },
                            &TensorSpec::gguf};

const NameScheme kHfNames{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                          [](int64_t l) { return "model.layers." + std::to_string(l) + "."; },
                          &TensorSpec::hf};

/// Binds every tensor of `c`'s family table (lio/architecture.h) for every layer, then the
/// model-level ones. Throws FormatError for a required tensor that is missing or a shape that
/// disagrees with the config.
void bind_weights(const ModelConfig& c, TensorBinder& b, const NameScheme& names, Weights& w) {
  const Architecture& family = layer_architecture(c);
  const int64_t d = c.d_model;
  w.token_embd = b.matrix(names.embd, c.vocab_size, d);
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    for (const TensorSpec& t : family.tensors) {
      const std::string name = names.layer_prefix(l) + std::string(t.*names.name);
      if (t.optional && !b.has(name)) continue;
      if (t.cols == Dim::None) {
        L.vec(t.kind) = b.vector(name, dim_size(t.rows, c));
      } else {
        L.matrix(t.kind) = b.matrix(name, dim_size(t.rows, c), dim_size(t.cols, c));
      }
    }
  }
  w.output_norm = b.vector(names.out_norm, d);
  w.output = c.tied_embeddings ? w.token_embd : b.matrix(names.output, c.vocab_size, d);
}

LoadedModel load_gguf(const std::string& path, WeightMode mode) {
  auto file = std::make_shared<GgufFile>(GgufFile::open(path));
  LoadedModel m;
  m.path = path;
  m.format = "gguf";
  m.mode = mode;
  m.config = config_from_gguf(*file);
  std::map<std::string, RawTensor> raw;
  for (const auto& t : file->tensors()) raw[t.name] = RawTensor{t.dtype, t.shape, t.data};
  m.weights.storage.push_back(file);
  TensorBinder binder(path, std::move(raw), mode, m.weights);
  bind_weights(m.config, binder, kGgufNames, m.weights);
  m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(*file));
  if (m.tokenizer->vocab_size() != m.config.vocab_size) {
    throw FormatError(path + ": tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
                      " tokens, model vocab_size is " + std::to_string(m.config.vocab_size));
  }
  return m;
}

LoadedModel load_hf_dir(const std::string& dir, WeightMode mode) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  LoadedModel m;
  m.path = dir;
  m.format = "hf";
  m.mode = mode;
  m.config = config_from_hf_json(config_path);
  auto set = std::make_shared<SafetensorsSet>(SafetensorsSet::open_dir(dir));
  std::map<std::string, RawTensor> raw;
  for (const auto& [name, t] : set->tensors()) {
    if (!t.supported) {
      if (name.find("rotary_emb") != std::string::npos) continue;  // recomputed, not weights
      throw UnsupportedError(t.file + ": tensor '" + name + "' has dtype " + t.dtype_name +
                             " (supported: F32, F16, BF16)");
    }
    raw[name] = RawTensor{t.dtype, t.shape, t.data};
  }
  m.weights.storage.push_back(set);
  if (m.config.tied_embeddings == false && raw.count("lm_head.weight") == 0) {
    m.config.tied_embeddings = true;  // some exports drop lm_head when it equals the embedding
  }
  TensorBinder binder(dir, std::move(raw), mode, m.weights);
  bind_weights(m.config, binder, kHfNames, m.weights);
  if (find_architecture(m.config.architecture, dir).hf_norm_plus_one) {
    // HF's w -> the 1 + w GGUF stores and the backends multiply by
    const auto plus_one = [](std::vector<float>& v) {
      for (float& x : v) x += 1.0f;
    };
    for (LayerWeights& L : m.weights.layers) {
      for (size_t k = 0; k < kWeightKindCount; ++k)
        if (is_norm(static_cast<WeightKind>(k))) plus_one(L.vectors[k]);
    }
    plus_one(m.weights.output_norm);
  }
  m.tokenizer = load_tokenizer(dir);
  return m;
}

}  // namespace

namespace {

const LayerWeights& layer_of(const Weights& w, WeightRef ref) {
  if (ref.layer < 0 || ref.layer >= static_cast<int64_t>(w.layers.size())) {
    throw InvalidArgument("weight " + std::string(weight_kind_name(ref.kind)) + " of layer " +
                          std::to_string(ref.layer) + ": the model has layers [0, " +
                          std::to_string(w.layers.size()) + ")");
  }
  return w.layers[static_cast<size_t>(ref.layer)];
}

}  // namespace

const WeightMatrix& Weights::matrix(WeightRef w) const {
  if (w.kind == WeightKind::TokenEmbd) return token_embd;
  if (w.kind == WeightKind::Output) return output;
  if (!is_matrix(w.kind)) {
    throw InvalidArgument("weight kind " + std::string(weight_kind_name(w.kind)) +
                          " is not a matrix");
  }
  return layer_of(*this, w).matrix(w.kind);
}

const std::vector<float>& Weights::vector(WeightRef w) const {
  if (w.kind == WeightKind::OutputNorm) return output_norm;
  if (is_matrix(w.kind)) {
    throw InvalidArgument("weight kind " + std::string(weight_kind_name(w.kind)) +
                          " is not a norm or bias");
  }
  const std::vector<float>& v = layer_of(*this, w).vec(w.kind);
  if (v.empty()) {
    throw InvalidArgument("layer " + std::to_string(w.layer) + " has no " +
                          std::string(weight_kind_name(w.kind)) +
                          " (its family's tensor table, lio/architecture.h, does not carry it)");
  }
  return v;
}

int64_t Weights::size_bytes() const {
  int64_t total = token_embd.size_bytes();
  for (const auto& L : layers) {
    total += static_cast<int64_t>(L.vector_floats() * sizeof(float));
    for (const WeightMatrix& m : L.matrices) total += m.size_bytes();
  }
  total += static_cast<int64_t>(output_norm.size() * sizeof(float));
  if (output.data != token_embd.data) total += output.size_bytes();
  return total;
}

int64_t Weights::n_params() const {
  int64_t total = token_embd.rows * token_embd.cols;
  for (const auto& L : layers) {
    total += L.vector_floats();
    for (const WeightMatrix& m : L.matrices) total += m.rows * m.cols;
  }
  total += static_cast<int64_t>(output_norm.size());
  if (output.data != token_embd.data) total += output.rows * output.cols;
  return total;
}

LoadedModel load_model(const std::string& path, WeightMode mode) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InvalidArgument("model path '" + path + "' does not exist");
  if (fs::is_directory(path, ec)) return load_hf_dir(path, mode);
  return load_gguf(path, mode);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InvalidArgument("tokenizer path '" + path + "' does not exist");
  if (fs::is_directory(path, ec)) {
    const std::string json = (fs::path(path) / "tokenizer.json").string();
    if (!fs::exists(json, ec)) throw FormatError(path + ": no tokenizer.json in the model directory");
    return std::make_unique<Tokenizer>(Tokenizer::from_hf_json(json));
  }
  if (fs::path(path).extension() == ".json") {
    return std::make_unique<Tokenizer>(Tokenizer::from_hf_json(path));
  }
  GgufFile file = GgufFile::open(path);
  return std::make_unique<Tokenizer>(Tokenizer::from_gguf(file));
}

std::string default_model_path() {
  if (const char* env = std::getenv("LIO_MODEL"); env && *env) return env;
  return std::string(LIO_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace lio
