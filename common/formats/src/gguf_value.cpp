// gguf_value.cpp — GGUF metadata values (lio/gguf.h): the spec's type names and the GgufValue
// constructors a writer builds metadata with.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lio/gguf.h"

namespace lio {

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "invalid";
}

GgufValue GgufValue::u32(uint32_t v) { return {GgufType::U32, uint64_t{v}}; }
GgufValue GgufValue::i32(int32_t v) { return {GgufType::I32, int64_t{v}}; }
GgufValue GgufValue::u64(uint64_t v) { return {GgufType::U64, v}; }
GgufValue GgufValue::f32(float v) { return {GgufType::F32, double{v}}; }
GgufValue GgufValue::boolean(bool v) { return {GgufType::Bool, v}; }
GgufValue GgufValue::str(std::string v) { return {GgufType::String, std::move(v)}; }

GgufValue GgufValue::str_array(std::vector<std::string> v) {
  auto array = std::make_shared<GgufArray>();
  array->elem_type = GgufType::String;
  array->items.reserve(v.size());
  for (auto& s : v) array->items.push_back(str(std::move(s)));
  return {GgufType::Array, std::move(array)};
}

GgufValue GgufValue::i32_array(std::vector<int32_t> v) {
  auto array = std::make_shared<GgufArray>();
  array->elem_type = GgufType::I32;
  array->items.reserve(v.size());
  for (int32_t x : v) array->items.push_back(i32(x));
  return {GgufType::Array, std::move(array)};
}

GgufValue GgufValue::f32_array(std::vector<float> v) {
  auto array = std::make_shared<GgufArray>();
  array->elem_type = GgufType::F32;
  array->items.reserve(v.size());
  for (float x : v) array->items.push_back(f32(x));
  return {GgufType::Array, std::move(array)};
}

}  // namespace lio
