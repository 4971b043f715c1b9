// WeightSource: the model loader's view of a checkpoint (HF directory, safetensors or GGUF file):
// checks a tensor exists with the shape the config implies, then hands the TP layers slice
// loaders that read only this rank's bytes, converting on the way per LoadOptions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <optional>

#include "core/tensor.h"
#include "io/tensor_store.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

struct LoadOptions {
  // Matrices stored as f32/f16/bf16 become this (f32 or bf16); nullopt: 16-bit matrices keep
  // their stored type (bf16, f16), others become f32.
  std::optional<DType> float_weights = DType::kF32;
  bool keep_quantized = true;         // block-quantized matrices stay quantized; false: dequantize to f32
  // Inference: row-parallel layers hold whole rows of their weight and gather their input, so
  // the logits are bitwise the same at every TP size (RowParallelLinear::hold_whole_rows).
  bool tp_invariant = false;
};

struct FallbackLog;

class WeightSource {
 public:
  WeightSource(std::shared_ptr<TensorStore> store, std::string path, LoadOptions opt);

  const std::string& path() const { return path_; }
  const LoadOptions& options() const { return opt_; }
  const TensorStore& store() const { return *store_; }
  bool has(const std::string& name) const { return store_->contains(name); }

  // Slices (dim, range) of the [out, in] matrix `name` whose full shape must be `shape`. With
  // conv1d the file holds [in, out] (GPT-2 Conv1D) and slices are transposed after reading.
  // Quantized slices stay quantized when the cut is block-aligned (32 weights for legacy quants,
  // 256 for K-quants), else they dequantize to f32 and a note on stderr names the tensor kind,
  // the columns and the block size (once per kind and range).
  SliceLoader matrix(const std::string& name, const Shape& shape, bool conv1d = false) const;
  // The same as f32 (biases, norms, embeddings a layer needs in f32). For conv1d biases the
  // offset selects the part of a fused vector: element offset + i of the stored [n] vector.
  SliceLoader f32(const std::string& name, const Shape& shape) const;
  // A slice loader over part of a fused tensor: rows/columns [offset, offset + shape[dim]) of
  // stored dim `fused_dim` (GPT-2's c_attn holds q, k, v side by side); conv1d as matrix().
  SliceLoader fused(const std::string& name, const Shape& stored_shape, int fused_dim, int64_t offset,
                    const Shape& shape, bool conv1d) const;
  // Matrix `index` of the stacked 3-D tensor `name` (count, rows, cols) (GGUF's MoE experts,
  // ffn_gate_exps etc.), sliced as matrix() does: shape is (rows, cols).
  SliceLoader stacked(const std::string& name, int64_t count, int64_t index, const Shape& shape) const;
  Tensor whole_f32(const std::string& name, const Shape& shape) const;
  // Slices that were to stay quantized but had to be dequantized so far (any rank).
  int64_t dequantized_fallbacks() const;

 private:
  void check(const std::string& name, const Shape& stored_shape) const;
  // fused() and stacked() without the check: outer >= 0 reads part `outer` of a stacked tensor
  // whose parts have shape stored_shape.
  SliceLoader loader(const std::string& name, const Shape& stored_shape, int fused_dim, int64_t offset,
                     const Shape& shape, bool conv1d, int64_t outer) const;

  std::shared_ptr<TensorStore> store_;
  std::string path_;
  LoadOptions opt_;
  std::shared_ptr<FallbackLog> fallbacks_;
};

}  // namespace tensorpar
