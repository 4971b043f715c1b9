// GGUF: the fixture written by the Python gguf package (metadata of every type, tensors
// compared with gguf.quants.dequantize), TP slices that keep blocks quantized, files built
// byte by byte from the spec for every bad-input case, and the default model when present.
#include "io/gguf.h"

#include <cstring>
#include <filesystem>

#include "fixtures_dir.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_error;

// Builds a GGUF file following the spec, little-endian.
class Builder {
 public:
  Builder& u32(uint32_t v) { return put(&v, 4); }
  Builder& u64(uint64_t v) { return put(&v, 8); }
  Builder& u8(uint8_t v) { return put(&v, 1); }
  Builder& str(const std::string& s) {
    u64(s.size());
    return put(s.data(), s.size());
  }
  Builder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    put("GGUF", 4);
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  Builder& kv_u32(const std::string& k, uint32_t v) { return str(k).u32(4).u32(v); }
  Builder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                  uint64_t offset) {
    str(name).u32(uint32_t(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  Builder& pad(size_t align = 32) {
    while (b.size() % align) b.push_back(std::byte{0});
    return *this;
  }
  Builder& zeros(size_t n) {
    b.resize(b.size() + n);
    return *this;
  }
  Builder& put(const void* p, size_t n) {
    const auto* c = static_cast<const std::byte*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  std::vector<std::byte> b;
};

void expect_gguf_error(const std::vector<std::byte>& b, std::initializer_list<std::string> words) {
  expect_error([&] { parse_gguf(b, "bad.gguf"); }, words);
}

TEST(Gguf, FixtureMetadataOfEveryType) {
  auto g = GgufFile::open(testing::fixture("tiny.gguf"));
  const GgufMetadata& m = g->metadata();
  EXPECT_EQ(g->header().version, 3u);
  EXPECT_EQ(g->header().alignment, 32u);
  EXPECT_EQ(m.get_string("general.architecture"), "llama");
  EXPECT_EQ(m.get_u32("test.u8"), 200u);
  EXPECT_EQ(m.get_i32("test.i8"), -5);
  EXPECT_EQ(m.get_u32("test.u16"), 60000u);
  EXPECT_EQ(m.get_i32("test.i16"), -30000);
  EXPECT_EQ(m.get_u32("test.u32"), 4000000000u);
  EXPECT_EQ(m.get_i32("test.i32"), -7);
  EXPECT_EQ(m.get_f32("test.f32"), 1.5f);
  EXPECT_EQ(m.get_u64("test.u64"), (uint64_t(1) << 40) + 3);
  EXPECT_EQ(m.get_i64("test.i64"), -(int64_t(1) << 40));
  EXPECT_EQ(m.get_f64("test.f64"), 2.25);
  EXPECT_TRUE(m.get_bool("test.bool"));
  EXPECT_EQ(m.get_string("test.string"), "h\xc3\xa9llo \xe2\x9c\x93");
  EXPECT_EQ(m.get_string_array("test.tokens"), (std::vector<std::string>{"<s>", "</s>", "a",
                                                                         "\xc4\xa0"
                                                                         "b",
                                                                         ""}));
  EXPECT_EQ(m.get_i32_array("test.i32_array"), (std::vector<int32_t>{1, -2, 3, 1 << 30}));
  EXPECT_EQ(m.get_i64_array("test.i32_array"), (std::vector<int64_t>{1, -2, 3, 1 << 30}));
  EXPECT_EQ(m.get_f32_array("test.f32_array"), (std::vector<float>{0.5f, -1.25f, 3.0f}));
  const GgufValue* nested = m.find("test.nested");
  ASSERT_TRUE(nested);
  ASSERT_EQ(nested->array.elem_type, GgufType::kArray);
  ASSERT_EQ(nested->array.arrays.size(), 2u);
  EXPECT_EQ(nested->array.arrays[0].count, 3);
  EXPECT_EQ(nested->array.arrays[1].strings, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(m.get_u32("llama.block_count"), 2u);
  EXPECT_EQ(m.get_u32_or("llama.nope", 7), 7u);
  EXPECT_EQ(m.get_f32_or("test.f32", 0), 1.5f);
  // Wrong type, out of range, missing: errors naming the key and file.
  expect_error([&] { m.get_u32("test.i32"); }, {"test.i32", "tiny.gguf", "u32"});
  expect_error([&] { m.get_i32("test.u32"); }, {"test.u32", "i32"});
  expect_error([&] { m.get_string("test.u8"); }, {"test.u8", "string"});
  expect_error([&] { m.get_f32("test.u8"); }, {"test.u8"});
  expect_error([&] { m.get_string_array("test.i32_array"); }, {"test.i32_array"});
  expect_error([&] { m.get_u32("llama.nope"); }, {"llama.nope", "not found", "tiny.gguf"});
  EXPECT_NE(GgufMetadata::describe(*m.find("test.tokens")).find("array<string>[5]"),
            std::string::npos);
}

TEST(Gguf, FixtureTensorsMatchReferenceDequantization) {
  auto g = GgufFile::open(testing::fixture("tiny.gguf"));
  auto ref = SafetensorsFile::open(testing::fixture("tiny_gguf_expected.safetensors"));
  ASSERT_EQ(ref->tensors().size(), 11u);
  for (const TensorInfo& r : ref->tensors()) {
    SCOPED_TRACE(r.name);
    auto info = g->find(r.name);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->shape, r.shape);  // HF order
    const GgufTensorInfo* gi = g->gguf_tensor(r.name);
    EXPECT_EQ(Shape(gi->dims.rbegin(), gi->dims.rend()), r.shape);
    const auto want = ref->read(r.name).to_vector();
    EXPECT_EQ(g->read(r.name, DType::kF32).to_vector(), want);
    // Every type here (K-quants included) has an in-memory dtype: kept in it, then dequantized
    // by core, the same values; float targets of unaligned slices dequantize exactly.
    ASSERT_TRUE(info->dtype);
    EXPECT_EQ(g->read(r.name).to_vector(), want);
    const Tensor whole = ref->read(r.name);
    EXPECT_EQ(g->read_slice(r.name, 0, 1, 2, DType::kF32).to_vector(), whole.slice(0, 1, 2).to_vector());
  }
  EXPECT_EQ(g->gguf_tensor("q8_0.weight")->dims, (std::vector<int64_t>{96, 6}));
  EXPECT_EQ(g->find("q4_1.weight")->dtype, DType::kQ4_1);
  EXPECT_EQ(g->find("bf16.weight")->dtype, DType::kBF16);
  // Views are zero-copy over the mapping.
  Tensor v = g->view("q4_1.weight");
  EXPECT_EQ(v.dtype(), DType::kQ4_1);
  EXPECT_EQ(v.to_vector(), ref->read("q4_1.weight").to_vector());
}

TEST(Gguf, TpSlicesKeepBlocksQuantized) {
  auto g = GgufFile::open(testing::fixture("tiny.gguf"));
  for (const char* name :
       {"q8_0.weight", "q4_0.weight", "q4_1.weight", "f16.weight", "bf16.weight"}) {
    SCOPED_TRACE(name);
    const Tensor whole = g->read(name, DType::kF32);
    const int64_t rows = whole.dim(0), cols = whole.dim(1);
    // Rows [r0, r1) (ColumnParallelLinear's shard), kept in the stored dtype.
    for (int64_t r0 = 0; r0 < rows; r0 += 2) {
      const int64_t r1 = std::min(rows, r0 + 3);
      Tensor s = g->read_slice(name, 0, r0, r1);
      EXPECT_EQ(s.dtype(), *g->find(name)->dtype);
      EXPECT_EQ(s.to_vector(), whole.slice(0, r0, r1).to_vector());
    }
    // Block-aligned columns (RowParallelLinear's shard) stay quantized.
    Tensor c = g->read_slice(name, 1, 32, cols);
    EXPECT_EQ(c.to_vector(), whole.slice(1, 32, cols).to_vector());
    // Unaligned columns: dequantize then slice exactly; kept quantized is refused.
    EXPECT_EQ(g->read_slice(name, 1, 5, cols - 3, DType::kF32).to_vector(),
              whole.slice(1, 5, cols - 3).to_vector());
    EXPECT_EQ(g->read_slice(name, 1, 5, 6, DType::kBF16).to_vector(),
              whole.slice(1, 5, 6).to(DType::kBF16).to_vector());
  }
  expect_error([&] { g->read_slice("q8_0.weight", 1, 5, 37); }, {"q8_0.weight", "not aligned"});
  // 3-D: the middle dim.
  const Tensor cube = g->read("cube.weight", DType::kF32);
  EXPECT_EQ(g->read_slice("cube.weight", 1, 1, 3).to_vector(), cube.slice(1, 1, 3).to_vector());
  // Converting a float tensor to a block quant on load.
  Tensor q = g->read("f16.weight", DType::kQ8_0);
  EXPECT_EQ(q.dtype(), DType::kQ8_0);
  EXPECT_LT(testing::max_abs_diff(q.to_vector(), g->read("f16.weight", DType::kF32).to_vector()),
            0.05);
}

TEST(Gguf, RecognisedTypesAreListedButNotLoadable) {
  auto q = GgufFile::open(testing::fixture("quants.gguf"));
  auto info = q->find("iq2_xxs.weight");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->format, "IQ2_XXS");
  EXPECT_FALSE(info->dtype);
  EXPECT_EQ(info->nbytes, 66);
  expect_error([&] { q->read("iq2_xxs.weight", DType::kF32); },
               {"iq2_xxs.weight", "quants.gguf", "IQ2_XXS", "not supported"});
  auto g = GgufFile::open(testing::fixture("tiny.gguf"));
  expect_error([&] { g->read("missing.weight"); }, {"missing.weight", "not found", "tiny.gguf"});
  // Block geometry of every ggml type, from the Python gguf package's GGML_QUANT_SIZES.
  const std::vector<std::tuple<uint32_t, const char*, int, int>> sizes = {
      {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
      {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},      {10, "Q2_K", 256, 84},
      {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
      {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
      {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
      {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
      {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
      {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
      {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
      {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
      {41, "Q1_0", 128, 18}};
  for (auto [id, name, be, bb] : sizes) {
    const StoredFormat* f = ggml_format(id);
    ASSERT_TRUE(f) << id;
    EXPECT_STREQ(f->name, name);
    EXPECT_EQ(f->block_elems, be) << name;
    EXPECT_EQ(f->block_bytes, bb) << name;
  }
  EXPECT_EQ(ggml_format(4), nullptr);
  EXPECT_EQ(ggml_format(1000), nullptr);
}

TEST(Gguf, EveryTruncationIsAnError) {
  const auto good = testing::read_bytes(testing::fixture("tiny.gguf"));
  const GgufHeader h = parse_gguf(good, "ok");
  // Padding after the last tensor is optional: every cut before its end must fail.
  int64_t end = 0;
  for (const auto& t : h.tensors) end = std::max(end, h.data_start + t.offset + t.nbytes);
  ASSERT_LE(size_t(end), good.size());
  for (size_t n = 0; n < size_t(end); ++n) {
    std::span<const std::byte> cut(good.data(), n);
    EXPECT_THROW(parse_gguf(cut, "cut"), Error) << n;
  }
}

TEST(Gguf, HandBuiltFileFollowsTheSpec) {
  // Two f32 tensors [2,3] and [4], general.alignment 64, version 2.
  Builder b;
  b.header(2, 2, 2).kv_u32("general.alignment", 64).str("k").u32(8).str("v");
  b.tensor("a", {3, 2}, 0, 0).tensor("b", {4}, 0, 64).pad(64);
  const int64_t start = int64_t(b.b.size());
  for (int k = 0; k < 6; ++k) {
    const float x = float(k);
    b.put(&x, 4);
  }
  b.zeros(64 - 24);
  for (int k = 0; k < 4; ++k) {
    const float x = float(10 + k);
    b.put(&x, 4);
  }
  const std::string dir = testing::temp_dir();
  testing::write_bytes(dir + "/h.gguf", b.b);
  auto g = GgufFile::open(dir + "/h.gguf");
  EXPECT_EQ(g->header().version, 2u);
  EXPECT_EQ(g->header().alignment, 64u);
  EXPECT_EQ(g->header().data_start, start);
  EXPECT_EQ(g->metadata().get_string("k"), "v");
  EXPECT_EQ(g->find("a")->shape, (Shape{2, 3}));
  EXPECT_EQ(g->read_slice("a", 0, 1, 2).to_vector(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(g->read_slice("a", 1, 2, 3).to_vector(), (std::vector<float>{2, 5}));
  EXPECT_EQ(g->read("b").to_vector(), (std::vector<float>{10, 11, 12, 13}));
  auto store = open_tensor_store(dir + "/h.gguf");
  EXPECT_EQ(store->tensors().size(), 2u);
  testing::write_bytes(dir + "/weights.bin", b.b);  // told apart by its magic
  EXPECT_TRUE(dynamic_cast<GgufFile*>(open_tensor_store(dir + "/weights.bin").get()));
}

TEST(Gguf, BadFilesAreClearErrors) {
  auto one_tensor = [](uint32_t type, std::vector<uint64_t> dims, uint64_t offset, size_t data) {
    Builder b;
    b.header(1, 0).tensor("t", dims, type, offset).pad().zeros(data);
    return b.b;
  };
  EXPECT_NO_THROW(parse_gguf(one_tensor(0, {8, 2}, 0, 64), "ok"));
  {
    auto b = one_tensor(0, {8, 2}, 0, 64);
    std::memcpy(b.data(), "GGML", 4);
    expect_gguf_error(b, {"bad.gguf", "bad magic", "GGML"});
  }
  {
    Builder b;
    b.header(0, 0, 1);
    expect_gguf_error(b.b, {"version 1"});
  }
  {
    Builder b;
    b.header(0, 0, 0x03000000u);
    expect_gguf_error(b.b, {"big-endian"});
  }
  // Counts far beyond what the file could hold: refused before any allocation.
  {
    Builder b;
    b.header(uint64_t(1) << 60, 0);
    expect_gguf_error(b.b, {"tensor info count"});
  }
  {
    Builder b;
    b.header(0, ~uint64_t(0));
    expect_gguf_error(b.b, {"metadata key/value count"});
  }
  {
    Builder b;
    b.header(0, 1).u64(~uint64_t(0)).zeros(16);
    expect_gguf_error(b.b, {"metadata key length"});
  }
  {
    Builder b;
    b.header(0, 1).str("k").u32(9).u32(10).u64(uint64_t(1) << 61).zeros(16);
    expect_gguf_error(b.b, {"array count"});
  }
  {
    Builder b;
    b.header(0, 1).str("k").u32(9).u32(8).u64(3).str("a");
    expect_gguf_error(b.b, {"array count"});
  }
  {
    Builder b;
    b.header(0, 1).str("k").u32(13).u8(0).zeros(8);
    expect_gguf_error(b.b, {"value type 13"});
  }
  {
    Builder b;
    b.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
    expect_gguf_error(b.b, {"duplicate metadata key 'k'"});
  }
  {
    Builder b;
    b.header(0, 1).kv_u32("general.alignment", 48);
    expect_gguf_error(b.b, {"general.alignment"});
  }
  {
    Builder b;  // arrays nested 100 deep
    b.header(0, 1).str("k").u32(9);
    for (int k = 0; k < 100; ++k) b.u32(9).u64(1);
    b.zeros(64);
    expect_gguf_error(b.b, {"nested"});
  }
  expect_gguf_error(one_tensor(0, {8, 2, 1, 1, 1}, 0, 64), {"'t'", "n_dims 5"});
  expect_gguf_error(one_tensor(77, {8, 2}, 0, 64), {"'t'", "unknown ggml type 77"});
  expect_gguf_error(one_tensor(8, {40, 2}, 0, 200), {"'t'", "Q8_0", "multiple"});
  expect_gguf_error(one_tensor(0, {8, 2}, 16, 64), {"'t'", "alignment"});
  expect_gguf_error(one_tensor(0, {8, 2}, 32, 64), {"'t'", "past the end"});
  expect_gguf_error(one_tensor(0, {8, 2}, 0, 63), {"'t'", "past the end"});
  expect_gguf_error(one_tensor(0, {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 64), {"overflow"});
  expect_gguf_error(one_tensor(0, {uint64_t(1) << 62, 1}, 0, 64), {"overflow"});
  expect_gguf_error(one_tensor(0, {~uint64_t(0)}, 0, 64), {"too large"});
  expect_gguf_error(one_tensor(0, {uint64_t(1) << 40, uint64_t(1) << 40, 0}, 0, 64), {"overflow"});
  {
    // Empty tensors with huge other dims parse and read as empty (a fuzzer find).
    const auto b = one_tensor(0, {uint64_t(6124895493223874593), 0}, 0, 0);
    const GgufHeader h = parse_gguf(b, "empty.gguf");
    ASSERT_EQ(h.tensors.size(), 1u);
    const GgufTensorInfo& t = h.tensors[0];
    StoredTensor s{t.name, "empty.gguf", t.shape, t.format, b.data() + h.data_start, 0, nullptr};
    EXPECT_EQ(copy_whole(s, DType::kF32).numel(), 0);
    EXPECT_EQ(copy_slice(s, 1, 5, 9, DType::kBF16).shape(), (Shape{0, 4}));
  }
  {
    Builder b;  // b starts inside a
    b.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad().zeros(128);
    expect_gguf_error(b.b, {"'a'", "'b'", "overlap"});
  }
  {
    Builder b;
    b.header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).pad().zeros(64);
    expect_gguf_error(b.b, {"duplicate tensor name 'a'"});
  }
}

// The project's default model, when scripts have fetched it (models/ is not committed).
TEST(Gguf, DefaultModelWhenPresent) {
  const std::string path =
      test::fixtures_dir() + "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto g = GgufFile::open(path);
  const GgufMetadata& m = g->metadata();
  EXPECT_EQ(m.get_string("general.architecture"), "llama");
  EXPECT_EQ(m.get_u32("llama.attention.head_count"), 9u);
  EXPECT_EQ(m.get_u32("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(m.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(m.get_i32_array("tokenizer.ggml.token_type").size(), 49152u);
  EXPECT_EQ(g->tensors().size(), 272u);
  // Every type present is loadable: f32, q4_1 and the q8_0 embedding.
  for (const TensorInfo& t : g->tensors())
    EXPECT_TRUE(t.dtype.has_value()) << t.name << " " << t.format;
  EXPECT_EQ(g->find("token_embd.weight")->shape, (Shape{49152, 576}));
  EXPECT_EQ(g->find("token_embd.weight")->dtype, DType::kQ8_0);
  EXPECT_EQ(g->find("blk.0.ffn_down.weight")->shape, (Shape{576, 1536}));
  // A vocab shard of the embedding stays q8_0 and equals the same rows of the whole.
  Tensor shard = g->read_slice("token_embd.weight", 0, 24576, 24576 + 100);
  EXPECT_EQ(shard.dtype(), DType::kQ8_0);
  EXPECT_EQ(shard.to_vector(),
            g->view("token_embd.weight").slice(0, 24576, 24576 + 100).to_vector());
  // A row-parallel shard (columns) of a q4_1 weight.
  Tensor down = g->read_slice("blk.0.ffn_down.weight", 1, 768, 1536);
  EXPECT_EQ(down.shape(), (Shape{576, 768}));
  EXPECT_EQ(down.to_vector(),
            g->read("blk.0.ffn_down.weight", DType::kF32).slice(1, 768, 1536).to_vector());
}

}  // namespace
}  // namespace tensorpar
