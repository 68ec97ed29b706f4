// make_test_models — writes the model files the bad-input CLI tests feed to the programs:
// one valid tiny model and one file per way a model file can be wrong.
//   make_test_models OUT_DIR
//   make_test_models --smollm2-8-heads PATH   a random-weight Q4_1 model of SmolLM2-135M's size
//       (30 layers, d_model 512, d_ff 1536) with 8 query / 2 KV heads, so tensor parallelism at
//       2, 4 and 8 ranks splits it (chapter 08's benchmark: TP 2 on 2 cores, not oversubscribed)
//   make_test_models --family ARCH PATH [SEED]   a tiny random-weight F32 model of the family ARCH
//       (llama, qwen2, qwen3, gemma2, gemma3, granite; lio/architecture.h; gemma2's small soft-caps and
//       granite's four scales as TinyModelSpec's defaults) that llama.cpp also loads: the oracle check of
//       each family's layer (tests/conformance/check_families.py)
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "lio/gguf.h"
#include "lio/gguf_writer.h"
#include "tiny_model.h"

namespace {

void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

/// Hand-built GGUF v3 with no metadata and one tensor, so single fields can be set to bad values.
std::vector<std::byte> one_tensor_gguf(uint32_t ggml_type, uint64_t offset) {
  std::vector<std::byte> b;
  auto put = [&](const void* p, size_t n) {
    const auto* c = static_cast<const std::byte*>(p);
    b.insert(b.end(), c, c + n);
  };
  auto u32 = [&](uint32_t v) { put(&v, 4); };
  auto u64 = [&](uint64_t v) { put(&v, 8); };
  put("GGUF", 4);
  u32(3);
  u64(1);  // tensors
  u64(0);  // kv pairs
  const std::string name = "token_embd.weight";
  u64(name.size());
  put(name.data(), name.size());
  u32(2);  // n_dims
  u64(256);
  u64(4);
  u32(ggml_type);
  u64(offset);
  while (b.size() % 32) b.push_back(std::byte{0});
  b.resize(b.size() + 256 * 4 * 4, std::byte{0});  // room for an F32 (4, 256) tensor
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--smollm2-8-heads") {
    lio::testing::TinyModelSpec spec;
    spec.n_layers = 30;
    spec.d_model = 512;
    spec.n_heads = 8;
    spec.n_kv_heads = 2;
    spec.head_dim = 64;
    spec.d_ff = 1536;
    spec.context_length = 2048;
    spec.weight_dtype = lio::DType::Q4_1;
    spec.embd_dtype = lio::DType::Q4_1;
    spec.init_std = 0.05f;
    lio::testing::write_tiny_gguf(argv[2], spec);
    return 0;
  }
  if ((argc == 4 || argc == 5) && std::string(argv[1]) == "--family") {
    lio::testing::TinyModelSpec spec;
    spec.architecture = argv[2];
    spec.n_layers = 3;
    spec.d_model = 128;
    spec.n_heads = 4;
    spec.n_kv_heads = 2;
    spec.head_dim = 32;
    spec.d_ff = 256;
    spec.context_length = 512;
    spec.rope_theta = spec.architecture == "llama" ? 10000.0f : 1000000.0f;  // Qwen's base
    spec.rms_norm_eps = spec.architecture == "llama" ? 1e-5f : 1e-6f;
    spec.tied_embeddings = spec.architecture != "qwen2";  // one family with its own LM head
    if (spec.architecture == "gemma3") {
      spec.n_layers = 6;         // five local layers, then a global one (llama.cpp's pattern of 6)
      spec.sliding_window = 16;  // the texts run past it
    }
    if (spec.architecture == "gemma2") {
      spec.n_layers = 4;         // local, global, local, global (llama.cpp's pattern of 2)
      spec.sliding_window = 16;  // the texts run past it
      spec.rope_theta = 10000.0f;  // Gemma 2's one base
    }
    spec.init_std = 0.08f;
    spec.seed = argc == 5 ? std::stoull(argv[4]) : 7;
    lio::testing::write_tiny_gguf(argv[3], spec);
    return 0;
  }
  if (argc != 2) {
    std::cerr << "usage: make_test_models OUT_DIR | --smollm2-8-heads PATH | --family ARCH PATH [SEED]\n";
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir);
  lio::testing::TinyModelSpec spec;
  const std::string tiny = dir + "/tiny.gguf";
  lio::testing::write_tiny_gguf(tiny, spec);
  lio::testing::write_tiny_hf_dir(dir + "/tiny_hf", spec);

  std::vector<std::byte> good = read_bytes(tiny);
  std::vector<std::byte> truncated(good.begin(), good.begin() + static_cast<long>(good.size() * 2 / 3));
  write_bytes(dir + "/truncated.gguf", truncated);
  std::vector<std::byte> header_only(good.begin(), good.begin() + 40);
  write_bytes(dir + "/truncated_header.gguf", header_only);
  std::vector<std::byte> bad_magic = good;
  std::memcpy(bad_magic.data(), "GGML", 4);
  write_bytes(dir + "/bad_magic.gguf", bad_magic);
  write_bytes(dir + "/offset_past_end.gguf", one_tensor_gguf(0, uint64_t{1} << 40));
  write_bytes(dir + "/unknown_type.gguf", one_tensor_gguf(13, 0));  // 13 = Q5_K (not read)
  write_bytes(dir + "/empty.gguf", {});

  // A valid GGUF whose architecture LIO does not run.
  lio::GgufFile src = lio::GgufFile::open(tiny);
  lio::GgufWriter w;
  for (const auto& [k, v] : src.metadata()) w.set(k, v);
  w.set("general.architecture", lio::GgufValue::str("mamba"));
  for (const auto& t : src.tensors())
    w.add_tensor(t.name, t.dtype, t.shape, std::span<const std::byte>(t.data, static_cast<size_t>(t.size_bytes)));
  w.write(dir + "/unknown_arch.gguf");
  std::cout << "wrote test models to " << dir << "\n";
  return 0;
}
