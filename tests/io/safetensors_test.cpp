// safetensors: round trips through our writer, reading a file written by the reference Python
// package, TP slices against a naive slice of the whole tensor, and every bad-input case.
#include "io/safetensors.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "io/atomic_file.h"
#include "io/safetensors_writer.h"
#include "io_test_util.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_error;
using testing::Rng;

// A raw safetensors file from header text and data bytes.
std::vector<std::byte> make_file(const std::string& header, size_t data_bytes,
                                 uint64_t n_override = 0) {
  std::vector<std::byte> b(8 + header.size() + data_bytes, std::byte{0x11});
  const uint64_t n = n_override ? n_override : header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void expect_parse_error(const std::string& header, size_t data_bytes,
                        std::initializer_list<std::string> words) {
  const auto b = make_file(header, data_bytes);
  expect_error([&] { parse_safetensors(b, "bad.safetensors"); }, words);
}

TEST(Safetensors, RoundTripEveryDtypeAndMetadata) {
  TP_SEED_TRACE();
  Rng rng(1);
  const std::string dir = testing::temp_dir();
  std::vector<NamedTensor> ts;
  ts.push_back({"w.f32", rng.uniform_tensor({7, 33})});
  ts.push_back({"w.bf16", rng.uniform_tensor({5, 1, 3}, DType::kBF16)});
  ts.push_back({"w.f16", rng.uniform_tensor({577}, DType::kF16)});
  Tensor i32 = Tensor::empty({3, 4}, DType::kI32), i64 = Tensor::empty({2}, DType::kI64),
         u8 = Tensor::empty({9}, DType::kU8);
  for (int k = 0; k < 12; ++k) i32.data<int32_t>()[k] = int32_t(rng.integer(-1000, 1000));
  i64.data<int64_t>()[0] = int64_t(1) << 40, i64.data<int64_t>()[1] = -3;
  for (int k = 0; k < 9; ++k) u8.data<uint8_t>()[k] = uint8_t(rng.integer(0, 256));
  ts.push_back({"i32", i32});
  ts.push_back({"i64", i64});
  ts.push_back({"u8", u8});
  ts.push_back({"empty", Tensor::empty({0, 5}, DType::kF32)});
  Tensor big = rng.uniform_tensor({6, 8});
  ts.push_back({"strided", big.transpose(0, 1)});  // written contiguous
  const std::string path = dir + "/m.safetensors";
  save_safetensors(path, ts, {{"step", "12"}, {"global_shape", "[8, 6]"}});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->metadata().at("step"), "12");
  EXPECT_EQ(f->header().data_start % 8, 0);
  ASSERT_EQ(f->tensors().size(), ts.size());
  for (const NamedTensor& nt : ts) {
    auto info = f->find(nt.name);
    ASSERT_TRUE(info) << nt.name;
    EXPECT_EQ(info->shape, nt.tensor.shape());
    EXPECT_EQ(info->dtype, nt.tensor.dtype());
    Tensor got = f->read(nt.name);
    ASSERT_EQ(got.dtype(), nt.tensor.dtype());
    const Tensor want = nt.tensor.contiguous();
    ASSERT_EQ(got.nbytes(), want.nbytes());
    if (want.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), size_t(want.nbytes())), 0) << nt.name;
    }
  }
  // Zero-copy view keeps the mapping alive after the file object is gone.
  Tensor v = f->view("w.f32");
  const std::vector<float> want = ts[0].tensor.to_vector();
  f.reset();
  EXPECT_EQ(v.to_vector(), want);
}

TEST(Safetensors, SlicesMatchNaiveSliceWithConversion) {
  TP_SEED_TRACE();
  Rng rng(2);
  const std::string dir = testing::temp_dir();
  Tensor a = rng.uniform_tensor({7, 33}, DType::kBF16);
  Tensor c = rng.uniform_tensor({3, 5, 4}, DType::kF32);
  save_safetensors(dir + "/s.safetensors", {{"a", a}, {"c", c}});
  auto f = SafetensorsFile::open(dir + "/s.safetensors");
  struct Case {
    const char* name;
    Tensor src;
    int dim;
    int64_t b, e;
    DType out;
  };
  const Case cases[] = {
      {"a", a, 0, 2, 5, DType::kF32},   {"a", a, 1, 1, 32, DType::kF32},
      {"a", a, 1, 0, 33, DType::kBF16}, {"a", a, 0, 6, 7, DType::kF16},
      {"a", a, 1, 4, 4, DType::kF32},   {"c", c, 1, 1, 4, DType::kBF16},
      {"c", c, 2, 3, 4, DType::kF32},   {"c", c, 0, 0, 3, DType::kF32},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message()
                 << k.name << " dim " << k.dim << " [" << k.b << "," << k.e << ")");
    Tensor got = f->read_slice(k.name, k.dim, k.b, k.e, k.out);
    Tensor want = k.src.slice(k.dim, k.b, k.e).to(k.out);
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_EQ(got.dtype(), k.out);
    EXPECT_EQ(got.to_vector(), want.to_vector());
  }
  // bf16 -> f32 by default keeps bf16.
  EXPECT_EQ(f->read_slice("a", 0, 0, 1).dtype(), DType::kBF16);
  expect_error([&] { f->read_slice("a", 0, 3, 8); }, {"a", "outside shape"});
  expect_error([&] { f->read_slice("a", 2, 0, 1); }, {"dim 2"});
  expect_error([&] { f->read("nope"); }, {"'nope'", "s.safetensors"});
}

TEST(Safetensors, ReadsFileWrittenByReferencePackage) {
  auto f = SafetensorsFile::open(testing::fixture("tiny_ref.safetensors"));
  EXPECT_EQ(f->metadata().at("note"), "tensorpar io fixture");
  const auto a32 = f->read("a.f32").to_vector();
  const auto a64 = f->read("a.f64", DType::kF32).to_vector();
  EXPECT_EQ(a64, a32);  // f64 rounded to f32 equals numpy's astype(float32)
  EXPECT_EQ(f->read("a.f16", DType::kF32).to_vector(), f->read("a.f16_as_f32").to_vector());
  Tensor ids = f->read("ids.i64");
  for (int k = 0; k < 10; ++k) EXPECT_EQ(ids.data<int64_t>()[k], k * 3 - 7);
  Tensor ids32 = f->read_slice("ids.i32", 0, 2, 5);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(ids32.data<int32_t>()[k], (k + 2) * 5 - 2);
  EXPECT_EQ(f->read("bytes.u8").data<uint8_t>()[4], 4);
  Tensor s = f->read("scalar.f32");
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.to_vector(), std::vector<float>{3.5f});
  EXPECT_EQ(f->read("empty.f32").numel(), 0);
  // Known dtypes that we cannot hold: listed, and a clear error on load.
  EXPECT_EQ(f->find("mask.bool")->format, "BOOL");
  expect_error([&] { f->read("mask.bool"); }, {"mask.bool", "BOOL", "not supported"});
  expect_error([&] { f->read("small.i8", DType::kF32); }, {"small.i8", "I8"});
  expect_error([&] { f->read("ids.i64", DType::kF32); }, {"ids.i64", "cannot load"});
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const auto good = testing::read_bytes(testing::fixture("tiny_ref.safetensors"));
  ASSERT_GT(good.size(), 100u);
  EXPECT_NO_THROW(parse_safetensors(good, "ok"));
  for (size_t n = 0; n < good.size(); ++n) {
    std::span<const std::byte> cut(good.data(), n);
    EXPECT_THROW(parse_safetensors(cut, "cut"), Error) << n;
  }
  // Trailing bytes that no tensor owns are rejected too (the reference does the same).
  auto longer = good;
  longer.push_back(std::byte{0});
  expect_error([&] { parse_safetensors(longer, "long.safetensors"); },
               {"long.safetensors", "cover"});
}

TEST(Safetensors, BadHeadersAreClearErrors) {
  const std::string ok = R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  EXPECT_NO_THROW(parse_safetensors(make_file(ok, 24), "ok"));
  {
    const auto b = make_file(ok, 24, uint64_t(1) << 62);
    expect_error([&] { parse_safetensors(b, "huge.safetensors"); },
                 {"huge.safetensors", "header length", "exceeds"});
    const auto c = make_file(ok, 24, ok.size() + 25);
    expect_error([&] { parse_safetensors(c, "past.safetensors"); },
                 {"past.safetensors", "exceeds file size"});
  }
  expect_parse_error("[1, 2]   ", 0, {"does not start with '{'"});
  expect_parse_error("{\"t\": ", 0, {"not valid JSON"});
  expect_parse_error(R"({"t":{"dtype":"F33","shape":[2,3],"data_offsets":[0,24]}})", 24,
                     {"'t'", "unknown dtype 'F33'"});
  expect_parse_error(R"({"t":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})", 24,
                     {"'t'", "shape"});
  expect_parse_error(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,24]}})", 24,
                     {"'t'", "shape"});
  expect_parse_error(R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0,28]}})", 24,
                     {"'t'", "past the data"});
  expect_parse_error(R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24,
                     {"'t'", "needs 24 bytes"});
  expect_parse_error(R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[4,28]}})", 28,
                     {"'t'", "contiguous"});
  expect_parse_error(R"({"t":{"dtype":"F32","shape":[2,3]}})", 24, {"'t'", "lacks"});
  expect_parse_error(R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0]}})", 24,
                     {"'t'", "data_offsets"});
  expect_parse_error(R"({"t":5})", 0, {"'t'", "not an object"});
  expect_parse_error(R"({"__metadata__":{"a":1}})", 0, {"__metadata__"});
  // Overlap: b starts inside a.
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                     R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                     24, {"'b'", "non-overlapping"});
  // dtype x shape overflow (numel fits, bytes do not; and numel itself overflows).
  expect_parse_error(R"({"t":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})",
                     8, {"overflow"});
  expect_parse_error(R"({"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                     8, {"overflow"});
  // An empty tensor whose other dims multiply past int64: refused (its strides would overflow).
  expect_parse_error(
      R"({"t":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", 0,
      {"overflow"});
  // Deeply nested JSON is refused, not recursed into.
  expect_parse_error("{\"t\":" + std::string(5000, '[') + std::string(5000, ']') + "}", 0,
                     {"nested"});
}

TEST(Safetensors, BadFileErrorsNameTheFile) {
  const std::string dir = testing::temp_dir();
  expect_error([&] { SafetensorsFile::open(dir + "/missing.safetensors"); },
               {"missing.safetensors"});
  testing::write_bytes(dir + "/empty.safetensors", {});
  expect_error([&] { SafetensorsFile::open(dir + "/empty.safetensors"); },
               {"empty.safetensors", "truncated"});
}

TEST(AtomicFile, UncommittedWriteLeavesOldFile) {
  const std::string dir = testing::temp_dir();
  const std::string path = dir + "/x.bin";
  const std::vector<std::byte> old{std::byte{1}, std::byte{2}};
  write_file_atomic(path, old);
  {
    AtomicFileWriter w(path);
    w.write(std::vector<std::byte>(100, std::byte{7}));
    EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
    // destroyed without commit: a crash mid-save
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(testing::read_bytes(path), old);
  expect_error(
      [&] {
        save_safetensors(dir + "/q.safetensors", {{"q", Tensor::zeros({1, 32}, DType::kQ8_0)}});
      },
      {"q8_0", "no safetensors"});
  expect_error([&] { AtomicFileWriter w(dir + "/no/such/dir/f"); }, {"no/such/dir"});
}

}  // namespace
}  // namespace tensorpar
