// Philox4x32-10 streams and sliced initialisation (see rng.h).
#include "parallel/rng.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tensorpar {
namespace {
// Below this many elements a loop stays on the calling thread: waking a team costs more.
constexpr int64_t kMinParallelWork = int64_t(1) << 15;
}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = uint64_t(kM0) * c[0], p1 = uint64_t(kM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1],
         uint32_t(p0)};
  }
  return c;
}

std::array<uint32_t, 4> RngStream::block(uint64_t index) const {
  return philox4x32_10({uint32_t(index), uint32_t(index >> 32), uint32_t(stream_id_),
                        uint32_t(stream_id_ >> 32)},
                       {uint32_t(seed_), uint32_t(seed_ >> 32)});
}

float RngStream::uniform(uint64_t index) const {
  // 24 random bits: every value is exactly representable and strictly below 1.
  return float(block(index)[0] >> 8) * (1.0f / 16777216.0f);
}

float RngStream::normal(uint64_t index) const {
  const auto b = block(index);
  // 64-bit uniforms: u1 in (0, 1] keeps the log finite.
  const double u1 = (double((uint64_t(b[0]) << 32 | b[1]) >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = double((uint64_t(b[2]) << 32 | b[3]) >> 11) * 0x1.0p-53;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

uint64_t tensor_id_of(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

void fill_normal(Tensor& out, const RngStream& stream, uint64_t first_index, float stddev) {
  TP_CHECK(out.dtype() == DType::kF32 && out.is_contiguous(), "[fill_normal] out: got ",
           out.describe(), ", expected contiguous f32");
  float* o = out.data<float>();
  const int64_t n = out.numel();
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) o[i] = stddev * stream.normal(first_index + uint64_t(i));
}

void init_normal_sliced(Tensor& out, const Shape& full_shape, int dim, Range slice, float stddev,
                        uint64_t seed, uint64_t tensor_id) {
  const int nd = int(full_shape.size());
  TP_CHECK(dim >= 0 && dim < nd, "[init_normal_sliced] dim: got ", dim, ", expected in [0, ", nd,
           ") for full shape ", shape_str(full_shape));
  TP_CHECK(slice.begin >= 0 && slice.begin <= slice.end && slice.end <= full_shape[size_t(dim)],
           "[init_normal_sliced] slice: got ", range_str(slice), ", expected inside [0, ",
           full_shape[size_t(dim)], ") of dim ", dim, " of ", shape_str(full_shape));
  Shape want = full_shape;
  want[size_t(dim)] = slice.size();
  TP_CHECK(out.dtype() == DType::kF32 && out.is_contiguous() && out.shape() == want,
           "[init_normal_sliced] out: got ", out.describe(), ", expected contiguous f32",
           shape_str(want), " (slice ", range_str(slice), " of dim ", dim, " of ",
           shape_str(full_shape), ")");
  shape_numel(full_shape);  // overflow check of the full index space
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= full_shape[size_t(d)];
  for (int d = dim + 1; d < nd; ++d) inner *= full_shape[size_t(d)];
  const int64_t full_dim = full_shape[size_t(dim)], n_local = slice.size();
  const RngStream stream = replicated_stream(seed, tensor_id);
  float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (out.numel() > kMinParallelWork)
  for (int64_t row = 0; row < outer * n_local; ++row) {
    const int64_t a = row / n_local, j = slice.begin + row % n_local;
    const uint64_t first = uint64_t((a * full_dim + j) * inner);
    for (int64_t i = 0; i < inner; ++i)
      o[row * inner + i] = stddev * stream.normal(first + uint64_t(i));
  }
}

}  // namespace tensorpar
