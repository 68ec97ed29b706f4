// test_safetensors.cpp — safetensors writer -> reader round trips (single file and sharded
// directory) and header validation: each corrupt header raises FormatError naming the file
// and the tensor, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "lio/error.h"
#include "lio/safetensors.h"
#include "tiny_model.h"

namespace {

namespace fs = std::filesystem;
using lio::DType;
using lio::SafetensorsSet;
using lio::SafetensorsWriter;

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<float> read_f32(const lio::SafetensorsTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  lio::dequantize_row(t.dtype, t.data, out.data(), n);
  return out;
}

/// What a value reads back as after storing it in `dtype`.
std::vector<float> stored_as(DType dtype, const std::vector<float>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F16)
      out[i] = lio::f16_to_f32(lio::f32_to_f16(values[i]));
    else if (dtype == DType::BF16)
      out[i] = lio::bf16_to_f32(lio::f32_to_bf16(values[i]));
    else
      out[i] = values[i];
  }
  return out;
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = lio::testing::make_temp_dir("lio-test-safetensors"); }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string write_bytes(const std::string& name, const std::vector<std::byte>& bytes) const {
    const std::string p = path(name);
    // Remove first: truncating a file that has data makes ext4 (auto_da_alloc) flush it on
    // close, which costs milliseconds per write in the truncation and fuzz loops.
    std::error_code ec;
    fs::remove(p, ec);
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  /// A file with header `json` (length prefix computed) followed by `n_data_bytes` bytes.
  std::string write_raw(const std::string& name, const std::string& json,
                        size_t n_data_bytes) const {
    std::vector<std::byte> bytes(8 + json.size() + n_data_bytes, std::byte{0});
    const uint64_t n = json.size();
    std::memcpy(bytes.data(), &n, 8);
    std::memcpy(bytes.data() + 8, json.data(), json.size());
    return write_bytes(name, bytes);
  }

  void expect_format_error(const std::string& file, std::vector<std::string> needles) const {
    try {
      SafetensorsSet::open_file(file);
      ADD_FAILURE() << "expected FormatError for " << file;
    } catch (const lio::FormatError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(file + ": ", 0), 0u) << msg;
      for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    }
  }

  std::string dir_;
};

// =========================================================================================
// Round trips
// =========================================================================================

TEST_F(Safetensors, RoundTripsF32F16Bf16) {
  const std::vector<float> a = random_values(6, 1);
  const std::vector<float> b = random_values(12, 2);
  const std::vector<float> c = random_values(5, 3);
  SafetensorsWriter w;
  w.add_tensor_f32("model.embed_tokens.weight", DType::F32, {2, 3}, a);
  w.add_tensor_f32("model.layers.0.mlp.up_proj.weight", DType::F16, {4, 3}, b);
  w.add_tensor_f32("model.norm.weight", DType::BF16, {5}, c);
  w.add_tensor_f32("scalar", DType::F32, {}, std::vector<float>{42.0f});
  w.set_metadata("format", "pt");
  const std::string file = path("model.safetensors");
  w.write(file);

  const SafetensorsSet set = SafetensorsSet::open_file(file);
  EXPECT_EQ(set.tensors().size(), 4u);
  EXPECT_EQ(set.metadata().at("format"), "pt");
  const lio::SafetensorsTensor* ta = set.find("model.embed_tokens.weight");
  const lio::SafetensorsTensor* tb = set.find("model.layers.0.mlp.up_proj.weight");
  const lio::SafetensorsTensor* tc = set.find("model.norm.weight");
  const lio::SafetensorsTensor* ts = set.find("scalar");
  ASSERT_TRUE(ta && tb && tc && ts);
  EXPECT_EQ(set.find("absent"), nullptr);

  EXPECT_EQ(ta->dtype_name, "F32");
  EXPECT_TRUE(ta->supported);
  EXPECT_EQ(ta->dtype, DType::F32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->size_bytes, 24);
  EXPECT_EQ(ta->file, file);
  EXPECT_EQ(read_f32(*ta), a);

  EXPECT_EQ(tb->dtype, DType::F16);
  EXPECT_EQ(tb->dtype_name, "F16");
  EXPECT_EQ(tb->size_bytes, 24);
  EXPECT_EQ(read_f32(*tb), stored_as(DType::F16, b));

  EXPECT_EQ(tc->dtype, DType::BF16);
  EXPECT_EQ(tc->dtype_name, "BF16");
  EXPECT_EQ(tc->shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(read_f32(*tc), stored_as(DType::BF16, c));

  EXPECT_TRUE(ts->shape.empty());
  EXPECT_EQ(read_f32(*ts), std::vector<float>{42.0f});

  // The writer pads the header so the data buffer starts 8-byte aligned.
  uint64_t header_bytes = 0;
  std::ifstream in(file, std::ios::binary);
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  EXPECT_EQ(header_bytes % 8, 0u);
}

TEST_F(Safetensors, ListsUnsupportedDtypes) {
  const std::string json =
      R"({"__metadata__":{"a":"b"},"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
      R"("w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";
  const SafetensorsSet set = SafetensorsSet::open_file(write_raw("mixed.safetensors", json, 20));
  const lio::SafetensorsTensor* ids = set.find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_FALSE(ids->supported);
  EXPECT_EQ(ids->dtype_name, "I64");
  EXPECT_EQ(ids->size_bytes, 16);
  EXPECT_TRUE(set.find("w")->supported);
}

TEST_F(Safetensors, WritesI32Tensors) {
  SafetensorsWriter w;
  const std::vector<int32_t> ids = {7, -1, 49151, 0, 12, 3};
  w.add_tensor_i32("tokens", {2, 3}, ids);
  w.add_tensor_f32("h", DType::F32, {2}, std::vector<float>{1.5f, -2.0f});
  EXPECT_THROW(w.add_tensor_i32("tokens", {6}, ids), lio::InvalidArgument);  // duplicate
  EXPECT_THROW(w.add_tensor_i32("short", {7}, ids), lio::InvalidArgument);   // 6 values, 7 elements
  w.write(path("ids.safetensors"));
  const SafetensorsSet set = SafetensorsSet::open_file(path("ids.safetensors"));
  const lio::SafetensorsTensor* t = set.find("tokens");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype_name, "I32");
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(t->size_bytes, 24);
  std::vector<int32_t> back(6);
  std::memcpy(back.data(), t->data, 24);
  EXPECT_EQ(back, ids);
  EXPECT_TRUE(set.find("h")->supported);
}

TEST_F(Safetensors, RoundTripsShardedDirectory) {
  const std::vector<float> a = random_values(8, 4);
  const std::vector<float> b = random_values(4, 5);
  const std::vector<float> c = random_values(6, 6);
  SafetensorsWriter shard1;
  shard1.set_metadata("format", "pt");
  shard1.add_tensor_f32("a", DType::F32, {2, 4}, a);
  shard1.add_tensor_f32("b", DType::BF16, {4}, b);
  shard1.write(path("model-00001-of-00002.safetensors"));
  SafetensorsWriter shard2;
  shard2.add_tensor_f32("c", DType::F16, {3, 2}, c);
  shard2.write(path("model-00002-of-00002.safetensors"));
  std::ofstream(path("model.safetensors.index.json"))
      << R"({"metadata":{"total_size":52},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
      << R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})";

  const SafetensorsSet set = SafetensorsSet::open_dir(dir_);
  EXPECT_EQ(set.tensors().size(), 3u);
  EXPECT_EQ(set.metadata().at("format"), "pt");  // from the first shard
  EXPECT_EQ(read_f32(*set.find("a")), a);
  EXPECT_EQ(read_f32(*set.find("b")), stored_as(DType::BF16, b));
  EXPECT_EQ(read_f32(*set.find("c")), stored_as(DType::F16, c));
  EXPECT_EQ(set.find("a")->file, path("model-00001-of-00002.safetensors"));
  EXPECT_EQ(set.find("c")->file, path("model-00002-of-00002.safetensors"));
}

TEST_F(Safetensors, OpensSingleFileDirectory) {
  SafetensorsWriter w;
  w.add_tensor_f32("x", DType::F32, {3}, random_values(3, 7));
  w.write(path("model.safetensors"));
  const SafetensorsSet set = SafetensorsSet::open_dir(dir_);
  EXPECT_EQ(set.tensors().size(), 1u);
  EXPECT_TRUE(set.metadata().empty());
}

// =========================================================================================
// Errors
// =========================================================================================

TEST_F(Safetensors, MissingFilesAndDirectories) {
  EXPECT_THROW(SafetensorsSet::open_file(path("absent.safetensors")), lio::InvalidArgument);
  EXPECT_THROW(SafetensorsSet::open_dir(path("absent-dir")), lio::InvalidArgument);
  EXPECT_THROW(SafetensorsSet::open_dir(dir_), lio::InvalidArgument);  // empty directory
}

TEST_F(Safetensors, RejectsCorruptHeaders) {
  expect_format_error(write_bytes("tiny.safetensors", std::vector<std::byte>(5)), {"too short"});
  {
    std::vector<std::byte> bytes(16, std::byte{0});
    const uint64_t n = 1000;
    std::memcpy(bytes.data(), &n, 8);
    expect_format_error(write_bytes("len.safetensors", bytes), {"header length 1000", "8"});
    const uint64_t huge = ~0ull;
    std::memcpy(bytes.data(), &huge, 8);
    expect_format_error(write_bytes("huge.safetensors", bytes), {"header length"});
  }
  expect_format_error(write_raw("json.safetensors", R"({"w": {"dtype": "F32",)", 0),
                      {"not valid JSON"});
  expect_format_error(write_raw("array.safetensors", "[1, 2]", 0), {"not a JSON object"});
  expect_format_error(write_raw("entry.safetensors", R"({"w": 3})", 0),
                      {"'w'", "not a JSON object"});
  expect_format_error(
      write_raw("nodtype.safetensors", R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4),
      {"'w'", "dtype"});
  expect_format_error(write_raw("badtype.safetensors",
                                R"({"w":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}})", 4),
                      {"'w'", "unknown dtype 'Q9'"});
  expect_format_error(
      write_raw("noshape.safetensors", R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4),
      {"'w'", "shape"});
  expect_format_error(write_raw("negshape.safetensors",
                                R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                      {"'w'", "shape[0]", "-1"});
  expect_format_error(write_raw("offsets.safetensors",
                                R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
                      {"'w'", "data_offsets"});
  expect_format_error(write_raw("meta.safetensors", R"({"__metadata__":{"k":1}})", 0),
                      {"__metadata__", "'k'"});
}

TEST_F(Safetensors, RejectsBadOffsets) {
  // Past the end of the data buffer.
  expect_format_error(write_raw("past.safetensors",
                                R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12),
                      {"'w'", "[0, 16]", "12-byte"});
  // begin > end.
  expect_format_error(write_raw("reversed.safetensors",
                                R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8),
                      {"'w'", "[8, 4]"});
  // Byte count does not match dtype x shape.
  expect_format_error(write_raw("count.safetensors",
                                R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", 8),
                      {"'w'", "8 bytes", "expected", "6 bytes"});
  // Overlap.
  expect_format_error(
      write_raw(
          "overlap.safetensors",
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          12),
      {"'b'", "'a'", "overlap"});
  // Hole between tensors.
  expect_format_error(
      write_raw(
          "hole.safetensors",
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
          12),
      {"'b'", "hole"});
  // Trailing bytes after the last tensor.
  expect_format_error(write_raw("trailing.safetensors",
                                R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
                      {"trailing"});
  // Element count overflow.
  expect_format_error(
      write_raw("overflow.safetensors",
                R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4),
      {"'w'", "overflows"});
}

TEST_F(Safetensors, RejectsBadShardIndex) {
  SafetensorsWriter w;
  w.add_tensor_f32("a", DType::F32, {2}, random_values(2, 8));
  w.write(path("model-00001-of-00002.safetensors"));
  const std::string index = path("model.safetensors.index.json");
  auto expect_index_error = [&](const std::string& json, std::vector<std::string> needles) {
    std::ofstream(index, std::ios::trunc) << json;
    try {
      SafetensorsSet::open_dir(dir_);
      ADD_FAILURE() << "expected FormatError for " << json;
    } catch (const lio::FormatError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(index + ": ", 0), 0u) << msg;
      for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    }
  };
  expect_index_error(R"({"weight_map": )", {"not valid JSON"});
  expect_index_error(R"({"metadata": {}})", {"weight_map"});
  expect_index_error(
      R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})",
      {"'model-00002-of-00002.safetensors'", "does not exist"});
  expect_index_error(
      R"({"weight_map":{"a":"model-00001-of-00002.safetensors","z":"model-00001-of-00002.safetensors"}})",
      {"'z'", "no such tensor"});
  expect_index_error(R"({"weight_map":{"a":"../outside.safetensors"}})",
                     {"'a'", "inside the directory"});
  expect_index_error(R"({"weight_map":{"a":7}})", {"'a'", "not a string"});
}

TEST_F(Safetensors, RejectsDuplicateTensorAcrossShards) {
  SafetensorsWriter w;
  w.add_tensor_f32("a", DType::F32, {2}, random_values(2, 9));
  w.write(path("s1.safetensors"));
  w.write(path("s2.safetensors"));
  std::ofstream(path("model.safetensors.index.json"))
      << R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})";
  try {
    SafetensorsSet::open_dir(dir_);
    FAIL() << "expected FormatError";
  } catch (const lio::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'a' also appears in"), std::string::npos) << e.what();
  }
}

TEST_F(Safetensors, EveryTruncationThrowsFormatError) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add_tensor_f32("a", DType::F32, {2, 2}, random_values(4, 10));
  w.add_tensor_f32("b", DType::BF16, {3}, random_values(3, 11));
  const std::string whole = path("whole.safetensors");
  w.write(whole);
  std::vector<std::byte> full(fs::file_size(whole));
  std::ifstream(whole, std::ios::binary)
      .read(reinterpret_cast<char*>(full.data()), static_cast<std::streamsize>(full.size()));
  ASSERT_NO_THROW(SafetensorsSet::open_file(whole));
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string file = write_bytes(
        "cut.safetensors", {full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)});
    EXPECT_THROW(SafetensorsSet::open_file(file), lio::FormatError) << n << " bytes";
  }
}

TEST_F(Safetensors, RandomCorruptionRaisesOnlyLioErrors) {
  SafetensorsWriter w;
  w.add_tensor_f32("a", DType::F32, {2, 2}, random_values(4, 12));
  w.add_tensor_f32("b", DType::F16, {6}, random_values(6, 13));
  const std::string whole = path("whole.safetensors");
  w.write(whole);
  std::vector<std::byte> original(fs::file_size(whole));
  std::ifstream(whole, std::ios::binary)
      .read(reinterpret_cast<char*>(original.data()),
            static_cast<std::streamsize>(original.size()));
  std::mt19937_64 rng(17);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::byte> bytes = original;
    const int n_flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n_flips; ++i)
      bytes[rng() % bytes.size()] = static_cast<std::byte>(rng() & 0xff);
    const std::string file = write_bytes("fuzz.safetensors", bytes);
    try {
      const SafetensorsSet set = SafetensorsSet::open_file(file);
      unsigned sum = 0;  // every accepted byte range must lie inside the mapping
      for (const auto& [name, t] : set.tensors()) {
        for (int64_t i = 0; i < t.size_bytes; ++i) sum += static_cast<unsigned>(t.data[i]);
      }
      EXPECT_GE(sum, 0u);
    } catch (const lio::Error&) {
    }
  }
}

TEST_F(Safetensors, WriterRejectsBadInput) {
  SafetensorsWriter w;
  const std::vector<float> v = random_values(32, 14);
  w.add_tensor_f32("a", DType::F32, {32}, v);
  EXPECT_THROW(w.add_tensor_f32("a", DType::F32, {32}, v), lio::InvalidArgument);
  EXPECT_THROW(w.add_tensor_f32("b", DType::Q8_0, {32}, v), lio::InvalidArgument);
  EXPECT_THROW(w.add_tensor_f32("c", DType::F32, {31}, v), lio::InvalidArgument);
  EXPECT_THROW(w.add_tensor_f32("__metadata__", DType::F32, {32}, v), lio::InvalidArgument);
  EXPECT_THROW(w.add_tensor("d", DType::F16, {4}, std::vector<std::byte>(4)), lio::InvalidArgument);
  EXPECT_THROW(w.write(path("no-such-dir/x.safetensors")), lio::InvalidArgument);
}

}  // namespace
