// Weights arranged as this CPU's inference kernels read them fastest: GGUF block types row-packed
// for the int8 kernels (int8_packed.h) and float weights in K-major panels (panel_matmul.h).
#pragma once

#include "core/tensor.h"

namespace tensorpar {

// w in the layout inference multiplies it in, else w itself:
// - a type int8_packed_rows_preferred names for this CPU: row-packed when int8_on (the int8
//   kernel multiplies it), back to its GGUF layout when not;
// - f32, bf16 or f16, where panels_preferred(): panels whatever int8_on (their kernel takes f32
//   activations either way).
// Training must not call it: only inference kernels read the packed layouts.
Tensor row_packed_as(const Tensor& w, bool int8_on);

}  // namespace tensorpar
