#include "kernels/cpu/packed_weights.h"

#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/int8_packed.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/panel_matmul.h"

namespace tensorpar {

Tensor row_packed_as(const Tensor& w, bool int8_on) {
  if (!w.defined()) return w;
  if (dtype_panels(w.dtype()) != w.dtype() && w.ndim() == 2 && panels_preferred())
    return pack_panels(w);
  if (int8_on && int8_packed_rows_preferred(w.dtype())) return int8_pack_rows(w);
  if (!int8_on && dtype_is_row_packed(w.dtype())) return int8_unpack_rows(w);
  return w;
}

}  // namespace tensorpar
