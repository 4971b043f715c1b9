// GGUF metadata: typed key/value pairs (scalars, strings, arrays that nest), kept in file order,
// with typed getters for the model loader and tokenizer (missing key or wrong type -> Error
// naming the key and file; the *_or getters return a default for a missing key).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tensorpar {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view gguf_type_name(GgufType t);  // "u32", "string", "array", ...
// Bytes of one scalar of a numeric or bool type; 0 for string and array.
int64_t gguf_scalar_size(GgufType t);

struct GgufArray {
  GgufType elem_type = GgufType::kU8;
  int64_t count = 0;
  std::vector<std::byte> raw;        // numeric/bool elements, little-endian, count x size
  std::vector<std::string> strings;  // string elements
  std::vector<GgufArray> arrays;     // nested array elements
};

struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t u = 0;  // u8..u64, bool
  int64_t i = 0;   // i8..i64
  double f = 0;    // f32, f64
  std::string str;
  GgufArray array;
};

class GgufMetadata {
 public:
  GgufMetadata() = default;
  explicit GgufMetadata(std::string file) : file_(std::move(file)) {}

  // Adds a pair; a duplicate key is an Error.
  void add(std::string key, GgufValue value);
  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return kv_; }
  const GgufValue* find(std::string_view key) const;  // null when absent
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Integer getters accept any integer type whose value fits; float getters accept f32/f64.
  uint32_t get_u32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  double get_f64(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;
  // Numeric arrays of any integer (resp. numeric) element type, converted (values must fit).
  std::vector<int32_t> get_i32_array(std::string_view key) const;
  std::vector<int64_t> get_i64_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;

  uint32_t get_u32_or(std::string_view key, uint32_t def) const {
    return has(key) ? get_u32(key) : def;
  }
  float get_f32_or(std::string_view key, float def) const { return has(key) ? get_f32(key) : def; }
  bool get_bool_or(std::string_view key, bool def) const { return has(key) ? get_bool(key) : def; }
  std::string get_string_or(std::string_view key, std::string def) const {
    return has(key) ? get_string(key) : def;
  }

  // A short rendering of a value for `inspect` (arrays: type, count and the first few items).
  static std::string describe(const GgufValue& v);

 private:
  const GgufValue& get(std::string_view key, const char* want) const;
  const std::string& file() const { return file_; }
  std::string file_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace tensorpar
