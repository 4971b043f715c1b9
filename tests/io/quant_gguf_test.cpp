// Every block-quant type llama.cpp's presets write (and their fallbacks) loads from GGUF as it
// is stored: tests/fixtures/io/quants.gguf (tools/make_quant_fixtures.py) holds random blocks of
// each type beside gguf.quants.dequantize of them (the Python reference), and TP slices keep
// blocks quantized when cut at block boundaries (32 weights, 256 for K-quants).
#include <cmath>

#include "core/quant.h"
#include "io/gguf.h"
#include "io_test_util.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_error;

struct Case {
  const char* prefix;  // tensor names "<prefix>.weight" / "<prefix>.expected"
  const char* format;
  DType dtype;
};

const Case kCases[] = {
    {"q4_0", "Q4_0", DType::kQ4_0}, {"q4_1", "Q4_1", DType::kQ4_1},
    {"q5_0", "Q5_0", DType::kQ5_0}, {"q5_1", "Q5_1", DType::kQ5_1},
    {"q8_0", "Q8_0", DType::kQ8_0}, {"iq4_nl", "IQ4_NL", DType::kIQ4_NL},
    {"q2_k", "Q2_K", DType::kQ2_K}, {"q3_k", "Q3_K", DType::kQ3_K},
    {"q4_k", "Q4_K", DType::kQ4_K}, {"q5_k", "Q5_K", DType::kQ5_K},
    {"q6_k", "Q6_K", DType::kQ6_K},
};

// The reference computes each weight in f32 as we do (scale products, then q * s - m): equal up
// to the rounding of a product, 2^-23 relative.
void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2.4e-7 * std::fabs(want[i]) + 1e-12) << "element " << i;
}

TEST(QuantGguf, EveryTypeMatchesTheReferenceDequantization) {
  auto g = GgufFile::open(testing::fixture("quants.gguf"));
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.prefix);
    const std::string name = std::string(c.prefix) + ".weight";
    auto info = g->find(name);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->format, c.format);
    ASSERT_EQ(info->dtype, c.dtype);
    EXPECT_EQ(info->shape, (Shape{2, 512}));
    EXPECT_EQ(info->nbytes, 2 * dtype_nbytes(c.dtype, 512));
    const std::vector<float> want = g->read(std::string(c.prefix) + ".expected").to_vector();
    // Decoded at load (the f32 path) and kept quantized (then dequantized by core).
    expect_close(g->read(name, DType::kF32).to_vector(), want);
    const Tensor kept = g->read(name);
    EXPECT_EQ(kept.dtype(), c.dtype);
    EXPECT_EQ(kept.nbytes(), info->nbytes);
    expect_close(kept.to_vector(), want);
    expect_close(g->view(name).to_vector(), want);
  }
}

TEST(QuantGguf, TpSlicesKeepBlocksQuantized) {
  auto g = GgufFile::open(testing::fixture("quants.gguf"));
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.prefix);
    const std::string name = std::string(c.prefix) + ".weight";
    const Tensor whole = g->read(std::string(c.prefix) + ".expected");
    const int64_t be = dtype_block_elems(c.dtype);
    // A row shard (ColumnParallelLinear) and a block-aligned column shard (RowParallelLinear).
    const Tensor rows = g->read_slice(name, 0, 1, 2);
    EXPECT_EQ(rows.dtype(), c.dtype);
    expect_close(rows.to_vector(), whole.slice(0, 1, 2).contiguous().to_vector());
    const Tensor cols = g->read_slice(name, 1, be, 2 * be);
    EXPECT_EQ(cols.dtype(), c.dtype);
    EXPECT_EQ(cols.nbytes(), 2 * dtype_block_bytes(c.dtype));
    expect_close(cols.to_vector(), whole.slice(1, be, 2 * be).contiguous().to_vector());
    // Columns that cut a block: kept quantized is refused, naming the block size; as f32 they
    // are dequantized and sliced exactly.
    expect_error([&] { g->read_slice(name, 1, 32 + be / 2, 512); }, {name, std::to_string(be)});
    expect_close(g->read_slice(name, 1, 32 + be / 2, 512, DType::kF32).to_vector(),
                 whole.slice(1, 32 + be / 2, 512).contiguous().to_vector());
  }
}

}  // namespace
}  // namespace tensorpar
