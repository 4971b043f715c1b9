// WeightSource keeps quantized matrices quantized when a TP slice cuts whole blocks (32 weights
// for legacy quants, 256 for K-quants) and otherwise dequantizes that slice to f32, counting and
// reporting the fallback. Data: tests/fixtures/io/quants.gguf (tools/make_quant_fixtures.py).
#include "model/weight_source.h"

#include "fixtures_dir.h"
#include "io/tensor_store.h"
#include "test_util.h"

namespace tensorpar {
namespace {

TEST(WeightSource, QuantizedSlicesStayQuantizedOrFallBackToF32) {
  const std::string path = test::fixtures_dir() + "/io/quants.gguf";
  const WeightSource src(open_tensor_store(path), path, LoadOptions{});
  for (const auto& [name, dtype] : {std::pair<std::string, DType>{"q4_k", DType::kQ4_K},
                                    {"q6_k", DType::kQ6_K},
                                    {"q5_0", DType::kQ5_0},
                                    {"q8_0", DType::kQ8_0}}) {
    SCOPED_TRACE(name);
    const SliceLoader load = src.matrix(name + ".weight", {2, 512});
    // The whole tensor decoded (its values are checked against gguf.quants in tests/io).
    const std::vector<float> want = src.whole_f32(name + ".weight", {2, 512}).to_vector();
    const int64_t before = src.dequantized_fallbacks();
    // Rows (column-parallel) and whole-block columns (row-parallel) stay in the stored type.
    const Tensor rows = load(0, {1, 2});
    EXPECT_EQ(rows.dtype(), dtype);
    EXPECT_EQ(rows.to_vector(), std::vector<float>(want.begin() + 512, want.end()));
    const Tensor cols = load(1, {256, 512});
    EXPECT_EQ(cols.dtype(), dtype);
    EXPECT_EQ(src.dequantized_fallbacks(), before);
    // 384 columns: whole 32-weight blocks, but not whole 256-weight super-blocks.
    const Tensor part = load(1, {0, 384});
    EXPECT_EQ(part.dtype(), dtype_is_kquant(dtype) ? DType::kF32 : dtype);
    EXPECT_EQ(src.dequantized_fallbacks(), before + (dtype_is_kquant(dtype) ? 1 : 0));
    const std::vector<float> got = part.to_vector();
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 384; ++c)
        ASSERT_EQ(got[size_t(r * 384 + c)], want[size_t(r * 512 + c)]) << r << "," << c;
  }
}

}  // namespace
}  // namespace tensorpar
