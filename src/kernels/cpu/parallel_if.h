// An OpenMP parallel region only where the work asks for one. libgomp sets up and tears down a
// team of one for a region whose `if` clause is false (~0.6 us on a 2-core EPYC, against ~35 ns
// for a plain call), and a decode step runs ~10 kernels a layer below their threshold (norms,
// RoPE, activation functions, quantising a matmul's input): ~5% of a small model's step.
//
// parallel_if(cond, body) runs body() in a parallel region when cond holds, else on the calling
// thread; a worksharing loop in body (`#pragma omp for`, orphaned) then runs every iteration
// there. Inside an enclosing active region (where an orphaned loop would bind to the outer team)
// it opens a region of its own, as `#pragma omp parallel if (cond)` would.
#pragma once

#include <omp.h>

namespace tensorpar {

template <class F>
inline void parallel_if(bool cond, F&& body) {
  if (cond || omp_in_parallel()) {
#pragma omp parallel if (cond)
    body();
  } else {
    body();
  }
}

}  // namespace tensorpar
