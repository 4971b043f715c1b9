// Shared by the parser fuzz targets: after a file parses, read every tensor it accepted (small
// ones, to keep runs fast) through the same copy path the loader uses, whole and sliced.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/tensor_copy.h"

namespace tensorpar::fuzz {

inline void exercise(const StoredTensor& s) {
  if (s.nbytes > (int64_t(1) << 20)) return;
  for (auto out : {std::optional<DType>(), std::optional<DType>(DType::kF32)}) {
    try {
      copy_whole(s, out);
    } catch (const Error&) {
    }
    if (s.shape.empty()) continue;
    const int d = int(s.shape.size()) - 1;  // the last dim, the awkward one for blocks
    const int64_t n = s.shape[size_t(d)];
    try {
      copy_slice(s, d, n / 3, n - n / 4, out);
    } catch (const Error&) {
    }
    try {
      copy_slice(s, 0, s.shape[0] / 2, s.shape[0], out);
    } catch (const Error&) {
    }
  }
}

}  // namespace tensorpar::fuzz
