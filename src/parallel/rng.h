// Deterministic counter-based random streams (Philox4x32-10, Salmon et al. 2011): a value is a
// pure function of (seed, stream id, index), so any rank can draw any slice of a tensor without
// drawing the rest. Weights are initialised from the full matrix's values and sliced, so a model
// is the same at every TP size.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "core/tensor.h"
#include "parallel/partition.h"

namespace tensorpar {

// Philox4x32-10 block: 4 x 32 random bits for a 128-bit counter and 64-bit key.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// One stream: key = seed, counter = (index, stream_id). Values at different indices or stream
// ids are independent.
class RngStream {
 public:
  RngStream(uint64_t seed, uint64_t stream_id) : seed_(seed), stream_id_(stream_id) {}

  std::array<uint32_t, 4> block(uint64_t index) const;
  float uniform(uint64_t index) const;  // in [0, 1)
  float normal(uint64_t index) const;   // N(0, 1), Box-Muller in double

  // Reserves n indices for the caller and returns the first (Megatron's Philox offset).
  uint64_t advance(uint64_t n) {
    const uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  uint64_t offset() const { return offset_; }
  uint64_t seed() const { return seed_; }
  uint64_t stream_id() const { return stream_id_; }

 private:
  uint64_t seed_;
  uint64_t stream_id_;
  uint64_t offset_ = 0;
};

// The same on every rank (a region that differs per TP rank, like dropout on head-sharded
// activations, would add Megatron's seed + 2718 + tp_rank; nothing here draws one yet).
inline RngStream replicated_stream(uint64_t seed, uint64_t stream_id = 0) {
  return RngStream(seed, stream_id);
}

// A stable tensor id from a parameter name (FNV-1a 64), so adding a tensor never shifts the
// values of the others.
uint64_t tensor_id_of(std::string_view name);

// out (f32, contiguous) = element i of `stream` at index first_index + i, times stddev.
void fill_normal(Tensor& out, const RngStream& stream, uint64_t first_index, float stddev);

// Initialise this rank's slice of a full tensor drawn N(0, stddev^2): element (i0, i1, ...) of
// the full tensor is stddev * normal(row-major index) of stream (seed, tensor_id), so it depends
// only on seed, tensor_id and its position. out's shape is full_shape with dim `dim` cut to
// `slice`. The full tensor is never materialised.
void init_normal_sliced(Tensor& out, const Shape& full_shape, int dim, Range slice, float stddev,
                        uint64_t seed, uint64_t tensor_id);

}  // namespace tensorpar
