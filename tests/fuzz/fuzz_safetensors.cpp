// fuzz_safetensors.cpp — libFuzzer target: any bytes as a .safetensors file (an 8-byte header
// length, a JSON header of dtypes, shapes and data offsets, the data), or, when the first byte
// is 'I', the rest as a model.safetensors.index.json beside one valid shard. Hugging Face
// checkpoints arrive this way (SafetensorsSet::open_file / open_dir).
// Seeds: corpus/safetensors. Dictionary: dict/json.dict.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "fuzz_support.h"
#include "lio/error.h"
#include "lio/safetensors.h"

namespace {

/// A directory holding one small valid shard, model-00001-of-00001.safetensors (2 x 3 f32
/// "w" and a 4-element "b"), whose index file each input replaces. Removed when the fuzzer
/// exits (libFuzzer ends with exit(), which runs static destructors; a crash leaves it, named
/// after the pid, for the reproducer).
class ShardDir {
 public:
  ShardDir()
      : path_((std::filesystem::temp_directory_path() / ("lio_fuzz_st_" + std::to_string(getpid()))).string()) {
    std::filesystem::create_directories(path_);
    lio::SafetensorsWriter w;
    w.add_tensor_f32("w", lio::DType::F32, {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
    w.add_tensor_f32("b", lio::DType::F32, {4}, std::vector<float>{1, 2, 3, 4});
    w.write(path_ + "/model-00001-of-00001.safetensors");
  }
  ~ShardDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ShardDir(const ShardDir&) = delete;
  ShardDir& operator=(const ShardDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const std::string& shard_dir() {
  static const ShardDir dir;
  return dir.path();
}

void touch(const lio::SafetensorsSet& set) {
  for (const auto& [name, t] : set.tensors()) (void)set.find(name), (void)t.size_bytes;
  for (const auto& [k, v] : set.metadata()) (void)k.size(), (void)v.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static lio::fuzz::InputFile file;
  try {
    if (size > 0 && data[0] == 'I') {
      const std::string dir = shard_dir();
      std::ofstream(dir + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
      touch(lio::SafetensorsSet::open_dir(dir));
    } else {
      touch(lio::SafetensorsSet::open_file(file.write(data, size)));
    }
  } catch (const lio::Error&) {
  }
  return 0;
}
