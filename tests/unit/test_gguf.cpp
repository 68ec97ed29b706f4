// test_gguf.cpp — GGUF writer -> reader round trips, hand-built v2/v3 headers, and the
// reader's validation: every malformed file must raise a typed lio error naming the file
// and the offending key or tensor, never crash or throw bad_alloc.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/gguf_writer.h"
#include "tiny_model.h"

namespace {

namespace fs = std::filesystem;
using lio::DType;
using lio::GgufArray;
using lio::GgufFile;
using lio::GgufType;
using lio::GgufValue;
using lio::GgufWriter;

// ---- helpers ------------------------------------------------------------------------------

/// Little-endian byte builder for hand-made GGUF files.
struct Bytes {
  std::vector<std::byte> data;
  template <typename T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    data.insert(data.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    data.insert(data.end(), p, p + s.size());
    return *this;
  }
  Bytes& pad_to(size_t alignment) {
    data.resize((data.size() + alignment - 1) / alignment * alignment, std::byte{0});
    return *this;
  }
  Bytes& zeros(size_t n) {
    data.resize(data.size() + n, std::byte{0});
    return *this;
  }
  /// magic, version, counts.
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    data.insert(data.end(), {std::byte{'G'}, std::byte{'G'}, std::byte{'U'}, std::byte{'F'}});
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  /// name, n_dims, ne[], ggml type, offset.
  Bytes& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }
};

class Gguf : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = lio::testing::make_temp_dir("lio-test-gguf"); }
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

  /// Opens `file` expecting a FormatError whose message starts with the path and contains
  /// every one of `needles`.
  void expect_format_error(const std::string& file, std::vector<std::string> needles) const {
    try {
      GgufFile::open(file);
      ADD_FAILURE() << "expected FormatError for " << file;
    } catch (const lio::FormatError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(file + ": ", 0), 0u) << msg;
      for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    }
  }

  std::string dir_;
};

void expect_same_value(const GgufValue& a, const GgufValue& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  ASSERT_EQ(a.data.index(), b.data.index()) << where;
  if (a.type == GgufType::Array) {
    const GgufArray& x = *std::get<std::shared_ptr<GgufArray>>(a.data);
    const GgufArray& y = *std::get<std::shared_ptr<GgufArray>>(b.data);
    ASSERT_EQ(x.elem_type, y.elem_type) << where;
    ASSERT_EQ(x.items.size(), y.items.size()) << where;
    for (size_t i = 0; i < x.items.size(); ++i) {
      expect_same_value(x.items[i], y.items[i], where + "[" + std::to_string(i) + "]");
    }
    return;
  }
  EXPECT_TRUE(a.data == b.data) << where;
}

GgufValue make_array(GgufType elem_type, std::vector<GgufValue> items) {
  auto array = std::make_shared<GgufArray>();
  array->elem_type = elem_type;
  array->items = std::move(items);
  return {GgufType::Array, array};
}

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

/// A small valid file: a few keys of several types and two F32 tensors whose data ends
/// exactly at the end of the file (no trailing padding), so that every strict prefix of
/// it is malformed.
std::vector<std::byte> small_file_bytes() {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("llama.block_count", GgufValue::u32(2));
  w.set("tokenizer.ggml.tokens", GgufValue::str_array({"a", "bc", ""}));
  w.set("nested",
        make_array(GgufType::Array, {GgufValue::i32_array({1, 2}), GgufValue::i32_array({})}));
  w.set("flag", GgufValue::boolean(true));
  w.add_tensor_f32("w", DType::F32, {2, 8}, random_values(16, 1));
  w.add_tensor_f32("b", DType::F32, {8}, random_values(8, 2));
  return w.serialize();
}

// =========================================================================================
// Round trips
// =========================================================================================

TEST_F(Gguf, RoundTripsAllValueTypes) {
  std::vector<std::pair<std::string, GgufValue>> values = {
      {"u8", {GgufType::U8, uint64_t{200}}},
      {"i8", {GgufType::I8, int64_t{-100}}},
      {"u16", {GgufType::U16, uint64_t{60000}}},
      {"i16", {GgufType::I16, int64_t{-30000}}},
      {"u32", GgufValue::u32(4000000000u)},
      {"i32", GgufValue::i32(-2000000000)},
      {"f32", GgufValue::f32(1.5f)},
      {"bool_true", GgufValue::boolean(true)},
      {"bool_false", GgufValue::boolean(false)},
      {"string", GgufValue::str("h\xc3\xa9llo, \"world\"\n")},
      {"empty_string", GgufValue::str("")},
      {"u64", GgufValue::u64(0x8000000000000005ull)},
      {"i64", {GgufType::I64, int64_t{-(int64_t{1} << 62)}}},
      {"f64", {GgufType::F64, 0.1}},
      {"str_array", GgufValue::str_array({"Ġt", "he", "", "<|im_end|>"})},
      {"i32_array", GgufValue::i32_array({1, -2, 3})},
      {"f32_array", GgufValue::f32_array({0.25f, -1e30f})},
      {"u8_array",
       make_array(GgufType::U8, {{GgufType::U8, uint64_t{0}}, {GgufType::U8, uint64_t{255}}})},
      {"bool_array",
       make_array(GgufType::Bool, {GgufValue::boolean(false), GgufValue::boolean(true)})},
      {"f64_array", make_array(GgufType::F64, {{GgufType::F64, 1e300}})},
      {"empty_array", make_array(GgufType::U64, {})},
      {"array_of_arrays",
       make_array(GgufType::Array, {GgufValue::i32_array({1, 2}), GgufValue::i32_array({}),
                                    GgufValue::i32_array({-7})})},
      {"array_of_string_arrays", make_array(GgufType::Array, {GgufValue::str_array({"x"}),
                                                              GgufValue::str_array({"y", "z"})})},
      {"three_levels",
       make_array(GgufType::Array,
                  {make_array(GgufType::Array, {GgufValue::f32_array({1.0f, 2.0f})})})},
  };
  GgufWriter w;
  for (const auto& [k, v] : values) w.set(k, v);
  const std::string file = path("values.gguf");
  w.write(file);

  const GgufFile f = GgufFile::open(file);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.metadata().size(), values.size());
  EXPECT_TRUE(f.tensors().empty());
  for (const auto& [k, v] : values) {
    const GgufValue* got = f.find(k);
    ASSERT_NE(got, nullptr) << k;
    expect_same_value(*got, v, k);
  }
  EXPECT_EQ(f.get_uint("u8"), 200u);
  EXPECT_EQ(f.get_uint("u64"), 0x8000000000000005ull);
  EXPECT_EQ(f.get_float("f32"), 1.5);
  EXPECT_EQ(f.get_float("i16"), -30000.0);
  EXPECT_TRUE(f.get_bool("bool_true"));
  EXPECT_EQ(f.get_string("string"), "h\xc3\xa9llo, \"world\"\n");
  EXPECT_EQ(f.get_string_array("str_array"),
            (std::vector<std::string>{"Ġt", "he", "", "<|im_end|>"}));
  EXPECT_EQ(f.get_int_array("i32_array"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_int_array("u8_array"), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(f.get_float_array("f32_array"), (std::vector<float>{0.25f, -1e30f}));
  EXPECT_EQ(f.get_float_array("i32_array"), (std::vector<float>{1.0f, -2.0f, 3.0f}));
}

TEST_F(Gguf, RoundTripsAllTensorDtypes) {
  struct Case {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {"f32", DType::F32, {3, 5}},    {"f16", DType::F16, {2, 7}},
      {"bf16", DType::BF16, {4, 3}},  {"q8_0", DType::Q8_0, {3, 64}},
      {"q4_0", DType::Q4_0, {2, 96}}, {"q4_1", DType::Q4_1, {5, 32}},
      {"f32_1d", DType::F32, {9}},    {"q8_0_4d", DType::Q8_0, {2, 3, 1, 32}},
  };
  GgufWriter w;
  std::vector<std::vector<std::byte>> expected_bytes;
  uint64_t seed = 10;
  for (const Case& c : cases) {
    int64_t n = 1;
    for (int64_t d : c.shape) n *= d;
    const std::vector<float> values = random_values(static_cast<size_t>(n), seed++);
    std::vector<std::byte> bytes(static_cast<size_t>(lio::dtype_row_bytes(c.dtype, n)));
    lio::quantize_row(c.dtype, values.data(), bytes.data(), n);
    expected_bytes.push_back(bytes);
    if (c.name == "q4_1") {
      w.add_tensor(c.name, c.dtype, c.shape, bytes);  // raw-bytes entry point
    } else {
      w.add_tensor_f32(c.name, c.dtype, c.shape, values);
    }
  }
  const std::string file = path("tensors.gguf");
  w.write(file);

  const GgufFile f = GgufFile::open(file);
  ASSERT_EQ(f.tensors().size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const lio::GgufTensorInfo& t = f.tensors()[i];  // file order is insertion order
    EXPECT_EQ(t.name, cases[i].name);
    EXPECT_EQ(t.dtype, cases[i].dtype) << t.name;
    EXPECT_EQ(t.shape, cases[i].shape) << t.name;
    EXPECT_EQ(t.size_bytes, static_cast<int64_t>(expected_bytes[i].size())) << t.name;
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u) << t.name;  // mmap is page aligned
    ASSERT_EQ(std::memcmp(t.data, expected_bytes[i].data(), expected_bytes[i].size()), 0) << t.name;
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
  EXPECT_EQ(f.find_tensor("absent"), nullptr);
  EXPECT_EQ(f.find_tensor("q8_0_4d")->n_elems(), 2 * 3 * 1 * 32);
  EXPECT_EQ(f.file_bytes(), static_cast<int64_t>(fs::file_size(file)));
}

TEST_F(Gguf, HonoursCustomAlignment) {
  GgufWriter w;
  w.set("general.alignment", GgufValue::u32(128));
  w.add_tensor_f32("a", DType::Q8_0, {1, 32}, random_values(32, 3));
  w.add_tensor_f32("b", DType::F32, {3}, random_values(3, 4));
  const std::string file = path("aligned.gguf");
  w.write(file);
  const GgufFile f = GgufFile::open(file);
  EXPECT_EQ(f.alignment(), 128u);
  EXPECT_EQ(f.find_tensor("a")->offset, 0u);
  EXPECT_EQ(f.find_tensor("b")->offset, 128u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.find_tensor("b")->data) % 128, 0u);
}

TEST_F(Gguf, AcceptsHandBuiltVersion2File) {
  Bytes b;
  b.header(2, 1, 2);
  b.str("general.architecture").u32(8).str("llama");
  b.str("general.alignment").u32(4).u32(64);
  b.tensor("w", {32, 2}, 0, 0);  // ne[0] = 32 contiguous elements, 2 rows
  b.pad_to(64);
  for (int i = 0; i < 64; ++i) b.put(static_cast<float>(i) * 0.5f);
  const std::string file = write_bytes("v2.gguf", b.data);

  const GgufFile f = GgufFile::open(file);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  ASSERT_EQ(f.tensors().size(), 1u);
  const lio::GgufTensorInfo& t = f.tensors()[0];
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 32}));  // row-major: reversed ne
  EXPECT_EQ(t.size_bytes, 256);
  float values[64];
  lio::dequantize_row(t.dtype, t.data, values, 64);
  EXPECT_EQ(values[0], 0.0f);
  EXPECT_EQ(values[33], 16.5f);  // row 1, column 1
}

TEST_F(Gguf, TypedGettersReportMissingKeysAndWrongTypes) {
  GgufWriter w;
  w.set("neg", GgufValue::i32(-3));
  w.set("name", GgufValue::str("x"));
  w.set("count", GgufValue::u32(7));
  w.set("big", GgufValue::u64(~0ull));
  w.set("big_array", make_array(GgufType::U64, {GgufValue::u64(~0ull)}));
  w.set("tokens", GgufValue::str_array({"a"}));
  const std::string file = path("getters.gguf");
  w.write(file);
  const GgufFile f = GgufFile::open(file);

  auto expect_error = [&](auto&& call, std::vector<std::string> needles) {
    try {
      call();
      ADD_FAILURE() << "expected FormatError";
    } catch (const lio::FormatError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(file + ": ", 0), 0u) << msg;
      for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    }
  };
  expect_error([&] { f.get_string("absent.key"); }, {"'absent.key'", "missing"});
  expect_error([&] { f.get_string("count"); }, {"'count'", "u32", "string"});
  expect_error([&] { f.get_uint("name"); }, {"'name'", "string", "integer"});
  expect_error([&] { f.get_uint("neg"); }, {"'neg'", "-3"});
  expect_error([&] { f.get_bool("count"); }, {"'count'", "bool"});
  expect_error([&] { f.get_float("tokens"); }, {"'tokens'", "array"});
  expect_error([&] { f.get_string_array("count"); }, {"'count'", "array of string"});
  expect_error([&] { f.get_int_array("tokens"); }, {"'tokens'", "array of string"});
  expect_error([&] { f.get_int_array("big_array"); }, {"'big_array'", "int64"});
  EXPECT_EQ(f.get_uint("big"), ~0ull);
  EXPECT_EQ(f.get_float("count"), 7.0);
  EXPECT_TRUE(f.has("neg"));
  EXPECT_FALSE(f.has("absent.key"));
}

// =========================================================================================
// Malformed files
// =========================================================================================

TEST_F(Gguf, MissingFileThrowsInvalidArgument) {
  const std::string file = path("does-not-exist.gguf");
  try {
    GgufFile::open(file);
    FAIL() << "expected InvalidArgument";
  } catch (const lio::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  EXPECT_THROW(GgufFile::open(dir_), lio::InvalidArgument);  // a directory
}

TEST_F(Gguf, EveryTruncationThrowsFormatError) {
  const std::vector<std::byte> full = small_file_bytes();
  const std::string whole = write_bytes("whole.gguf", full);
  ASSERT_NO_THROW(GgufFile::open(whole));
  const std::string file = path("truncated.gguf");
  for (size_t n = 0; n < full.size(); ++n) {
    write_bytes("truncated.gguf", {full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)});
    try {
      GgufFile::open(file);
      ADD_FAILURE() << "prefix of " << n << " of " << full.size() << " bytes was accepted";
    } catch (const lio::FormatError& e) {
      ASSERT_EQ(std::string(e.what()).rfind(file + ": ", 0), 0u) << e.what();
    }
  }
}

TEST_F(Gguf, RejectsBadMagic) {
  std::vector<std::byte> bytes = small_file_bytes();
  bytes[0] = std::byte{'g'};
  expect_format_error(write_bytes("magic.gguf", bytes), {"magic", "47 47 55 46"});
}

TEST_F(Gguf, RejectsUnsupportedVersions) {
  std::vector<std::byte> bytes = small_file_bytes();
  const uint32_t v1 = 1;
  std::memcpy(bytes.data() + 4, &v1, 4);
  expect_format_error(write_bytes("v1.gguf", bytes), {"version 1", "supported: 2, 3"});
  const uint32_t v4 = 4;
  std::memcpy(bytes.data() + 4, &v4, 4);
  expect_format_error(write_bytes("v4.gguf", bytes), {"version 4"});
  const uint32_t v3_big_endian = 0x03000000;
  std::memcpy(bytes.data() + 4, &v3_big_endian, 4);
  expect_format_error(write_bytes("be.gguf", bytes), {"big-endian"});
}

TEST_F(Gguf, RejectsTensorDataPastEnd) {
  Bytes b;
  b.header(3, 1, 0).tensor("blk.0.attn_q.weight", {32, 4}, 0, 0).pad_to(32).zeros(32 * 4 * 4 - 1);
  expect_format_error(write_bytes("short.gguf", b.data), {"'blk.0.attn_q.weight'", "past the end"});

  Bytes c;
  c.header(3, 1, 0).tensor("far", {8}, 0, 1ull << 62).pad_to(32).zeros(32);
  expect_format_error(write_bytes("far.gguf", c.data), {"'far'", "past the end"});
}

TEST_F(Gguf, RejectsUnsupportedTensorTypeByName) {
  Bytes b;
  b.header(3, 1, 0).tensor("blk.3.ffn_down.weight", {256, 2}, 13, 0).pad_to(32).zeros(512);
  const std::string file = write_bytes("q5k.gguf", b.data);
  try {
    GgufFile::open(file);
    FAIL() << "expected UnsupportedError";
  } catch (const lio::UnsupportedError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(file + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find("'blk.3.ffn_down.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Q5_K"), std::string::npos) << msg;
  }
  Bytes c;
  c.header(3, 1, 0).tensor("t", {32}, 200, 0).pad_to(32).zeros(128);
  expect_format_error(write_bytes("type200.gguf", c.data), {"'t'", "200"});
}

TEST_F(Gguf, RejectsHugeCountsWithoutAllocating) {
  // Array of 2^60 u32: must be a FormatError, not std::bad_alloc or a crash.
  Bytes a;
  a.header(3, 0, 1).str("tokenizer.ggml.token_type").u32(9).u32(4).u64(1ull << 60).u32(1);
  expect_format_error(write_bytes("array.gguf", a.data),
                      {"'tokenizer.ggml.token_type'", "1152921504606846976"});
  // Array of 2^62 strings (8-byte length each): count * 8 overflows nothing, still rejected.
  Bytes s;
  s.header(3, 0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(~0ull).u64(0);
  expect_format_error(write_bytes("strings.gguf", s.data), {"'tokenizer.ggml.tokens'", "array"});
  // String length 2^63.
  Bytes l;
  l.header(3, 0, 1).str("general.name").u32(8).u64(1ull << 63).zeros(16);
  expect_format_error(write_bytes("string.gguf", l.data), {"'general.name'", "truncated"});
  // Key length past the end.
  Bytes k;
  k.header(3, 0, 1).u64(1000).zeros(20);
  expect_format_error(write_bytes("key.gguf", k.data), {"key of metadata pair #0"});
  // Counts of pairs and tensors.
  Bytes n;
  n.header(3, 0, 1ull << 60).zeros(64);
  expect_format_error(write_bytes("nkv.gguf", n.data), {"1152921504606846976 metadata pairs"});
  Bytes t;
  t.header(3, ~0ull, 0).zeros(64);
  expect_format_error(write_bytes("ntensors.gguf", t.data), {"18446744073709551615 tensors"});
}

TEST_F(Gguf, RejectsMisalignedOffset) {
  Bytes b;
  b.header(3, 2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 36).pad_to(32).zeros(128);
  expect_format_error(write_bytes("misaligned.gguf", b.data), {"'b'", "36", "alignment 32"});
}

TEST_F(Gguf, RejectsBadShapes) {
  Bytes partial;
  partial.header(3, 1, 0).tensor("blk.0.attn_k.weight", {31, 2}, 8, 0).pad_to(32).zeros(128);
  expect_format_error(write_bytes("partial.gguf", partial.data),
                      {"'blk.0.attn_k.weight'", "31", "Q8_0", "block size 32"});
  Bytes dims;
  dims.header(3, 1, 0).tensor("five", {1, 1, 1, 1, 1}, 0, 0).pad_to(32).zeros(32);
  expect_format_error(write_bytes("dims.gguf", dims.data), {"'five'", "n_dims is 5"});
  Bytes zero_dims;
  zero_dims.header(3, 1, 0).tensor("zero", {}, 0, 0).pad_to(32).zeros(32);
  expect_format_error(write_bytes("zero.gguf", zero_dims.data), {"'zero'", "n_dims is 0"});
  Bytes overflow;
  overflow.header(3, 1, 0).tensor("big", {1ull << 40, 1ull << 40}, 0, 0).pad_to(32).zeros(32);
  expect_format_error(write_bytes("overflow.gguf", overflow.data), {"'big'", "overflows"});
  Bytes negative;
  negative.header(3, 1, 0).tensor("neg", {~0ull}, 0, 0).pad_to(32).zeros(32);
  expect_format_error(write_bytes("negative.gguf", negative.data), {"'neg'", "overflows"});
}

TEST_F(Gguf, RejectsDuplicatesAndOverlaps) {
  Bytes keys;
  keys.header(3, 0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2);
  expect_format_error(write_bytes("dupkey.gguf", keys.data), {"duplicate", "'k'"});
  Bytes tensors;
  tensors.header(3, 2, 0).tensor("t", {8}, 0, 0).tensor("t", {8}, 0, 32).pad_to(32).zeros(64);
  expect_format_error(write_bytes("duptensor.gguf", tensors.data), {"duplicate", "'t'"});
  Bytes overlap;
  overlap.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad_to(32).zeros(128);
  expect_format_error(write_bytes("overlap.gguf", overlap.data), {"'a'", "'b'", "overlaps"});
}

TEST_F(Gguf, RejectsBadMetadataValues) {
  Bytes align;
  align.header(3, 0, 1).str("general.alignment").u32(4).u32(3);
  expect_format_error(write_bytes("align3.gguf", align.data),
                      {"'general.alignment'", "power of two"});
  Bytes align_type;
  align_type.header(3, 0, 1).str("general.alignment").u32(8).str("32");
  expect_format_error(write_bytes("alignstr.gguf", align_type.data),
                      {"'general.alignment'", "string"});
  Bytes boolean;
  boolean.header(3, 0, 1).str("tokenizer.ggml.add_bos_token").u32(7).put(uint8_t{2});
  expect_format_error(write_bytes("bool.gguf", boolean.data),
                      {"'tokenizer.ggml.add_bos_token'", "bool"});
  Bytes type;
  type.header(3, 0, 1).str("weird").u32(13).u32(0);
  expect_format_error(write_bytes("type.gguf", type.data), {"'weird'", "13"});
  Bytes elem_type;
  elem_type.header(3, 0, 1).str("weird_array").u32(9).u32(99).u64(0);
  expect_format_error(write_bytes("elem.gguf", elem_type.data), {"'weird_array'", "99"});
  Bytes deep;
  deep.header(3, 0, 1).str("deep");
  deep.u32(9);
  for (int i = 0; i < 100; ++i) deep.u32(9).u64(1);
  deep.u32(4).u64(0);
  expect_format_error(write_bytes("deep.gguf", deep.data), {"'deep'", "nested"});
}

TEST_F(Gguf, RandomCorruptionRaisesOnlyLioErrors) {
  // Mutation fuzzing: flip 1-4 random bytes of a valid file. Opening must succeed or throw
  // a lio::Error; any other exception (bad_alloc, out_of_range) or a crash fails the test.
  const std::vector<std::byte> original = small_file_bytes();
  std::mt19937_64 rng(7);
  int rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::byte> bytes = original;
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n_flips; ++i) {
      bytes[rng() % bytes.size()] = static_cast<std::byte>(rng() & 0xff);
    }
    const std::string file = write_bytes("fuzz.gguf", bytes);
    try {
      const GgufFile f = GgufFile::open(file);
      unsigned sum = 0;  // touch every accepted tensor byte: must lie inside the mapping
      for (const auto& t : f.tensors()) {
        for (int64_t i = 0; i < t.size_bytes; ++i) sum += static_cast<unsigned>(t.data[i]);
      }
      EXPECT_GE(sum, 0u);
    } catch (const lio::Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

// =========================================================================================
// Writer input checks
// =========================================================================================

TEST_F(Gguf, WriterRejectsBadInput) {
  GgufWriter w;
  const std::vector<float> values = random_values(64, 5);
  w.add_tensor_f32("a", DType::F32, {2, 32}, values);
  EXPECT_THROW(w.add_tensor_f32("a", DType::F32, {2, 32}, values), lio::InvalidArgument);
  EXPECT_THROW(w.add_tensor_f32("b", DType::F32, {3, 32}, values), lio::InvalidArgument);
  EXPECT_THROW(w.add_tensor_f32("c", DType::Q8_0, {4, 16}, values), lio::InvalidArgument);
  EXPECT_THROW(w.add_tensor_f32("d", DType::F32, {1, 1, 1, 2, 32}, values), lio::InvalidArgument);
  const std::vector<std::byte> short_bytes(10);
  EXPECT_THROW(w.add_tensor("e", DType::Q8_0, {32}, short_bytes), lio::InvalidArgument);
  EXPECT_THROW(w.set("x", GgufValue{GgufType::U8, uint64_t{300}}), lio::InvalidArgument);
  EXPECT_THROW(w.set("x", GgufValue{GgufType::I8, uint64_t{1}}), lio::InvalidArgument);
  EXPECT_THROW(w.set("x", make_array(GgufType::U32, {GgufValue::i32(1)})), lio::InvalidArgument);
  EXPECT_THROW(w.set("general.alignment", GgufValue::u32(48)), lio::InvalidArgument);
  EXPECT_THROW(w.set("general.alignment", GgufValue::u64(64)), lio::InvalidArgument);
  EXPECT_THROW(w.write(path("no-such-dir/x.gguf")), lio::InvalidArgument);
  // set() replaces an existing key in place.
  w.set("k", GgufValue::u32(1));
  w.set("k", GgufValue::str("two"));
  const std::string file = path("replaced.gguf");
  w.write(file);
  const GgufFile f = GgufFile::open(file);
  EXPECT_EQ(f.metadata().size(), 1u);
  EXPECT_EQ(f.get_string("k"), "two");
}

}  // namespace
