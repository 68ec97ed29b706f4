// make_seeds.cpp — writes the binary seed inputs of tests/fuzz/corpus: tiny model files of
// every family (GGUF, safetensors shards and their index, tokenizer.json) from the unit
// tests' tiny-model writer, and the chat templates of the models scripts/setup.sh fetches.
// Run once by hand, output committed:
//   cmake --build build-asan --target fuzz_make_seeds && build-asan/bin/fuzz_make_seeds tests/fuzz/corpus
// libFuzzer names corpus files by content, so each seed is written as seed-<what>.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "lio/gguf.h"
#include "tiny_model.h"

namespace fs = std::filesystem;

namespace {

lio::testing::TinyModelSpec small(const std::string& arch) {
  lio::testing::TinyModelSpec s;
  s.architecture = arch;
  s.n_layers = arch == "gemma3" ? 6 : 1;
  s.sliding_window = 4;
  s.d_model = 8;
  s.n_heads = 2;
  s.n_kv_heads = 1;
  s.head_dim = 4;
  s.d_ff = 8;
  s.context_length = 64;
  return s;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  std::printf("%s (%zu bytes)\n", p.c_str(), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path tmp = lio::testing::make_temp_dir("lio_fuzz_seeds");
  for (const std::string arch : {"llama", "qwen2", "qwen3", "gemma3"}) {
    const fs::path g = tmp / (arch + ".gguf");
    lio::testing::write_tiny_gguf(g.string(), small(arch));
    put(out / "gguf" / ("seed-" + arch), slurp(g));
  }
  const fs::path one = tmp / "hf1", two = tmp / "hf2";
  lio::testing::write_tiny_hf_dir(one.string(), small("llama"), 1);
  lio::testing::write_tiny_hf_dir(two.string(), small("llama"), 2);
  put(out / "safetensors" / "seed-model", slurp(one / "model.safetensors"));
  put(out / "safetensors" / "seed-shard", slurp(two / "model-00001-of-00002.safetensors"));
  put(out / "safetensors" / "seed-index", "I" + slurp(two / "model.safetensors.index.json"));
  put(out / "tokenizer_json" / "seed-tiny-bpe", slurp(one / "tokenizer.json"));
  const std::string models = std::string(LIO_SOURCE_DIR) + "/models/";
  for (const auto& [file, what] : {std::pair<const char*, const char*>{"SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2"},
                                   {"gemma-3-270m-q4_k_m.gguf", "gemma3"}}) {
    if (!fs::exists(models + file)) continue;
    const lio::GgufFile g = lio::GgufFile::open(models + file);
    if (!g.has("tokenizer.chat_template")) continue;
    const std::string tmpl = g.get_string("tokenizer.chat_template");
    // template \0 role \1 content \2 ... ; the last byte's low bit: add_generation_prompt
    put(out / "chat_template" / (std::string("seed-") + what),
        tmpl + std::string(1, '\0') + "system\x01You are helpful.\x02user\x01Hi there\x02" + "\x01");
  }
  fs::remove_all(tmp);
  return 0;
}
