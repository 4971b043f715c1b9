// Matmul through oneDNN (the only file that includes dnnl.hpp): strided views map onto oneDNN
// memory descriptors directly, so transposed operands cost nothing. Primitives are cached in
// the rank's MatmulEngine keyed by shapes, strides, dtypes, scales and the OpenMP team size.
#include "kernels/cpu/matmul.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "kernels/cpu/amx_matmul.h"
#include "kernels/cpu/avx512bf16_matmul.h"
#include "kernels/cpu/panel_matmul.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/rowwise_matmul.h"

namespace tensorpar {

namespace {

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& v) const {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t x : v) h = (h ^ uint64_t(x)) * 0x100000001b3ull;
    return size_t(h);
  }
};

// One cached primitive with its memory objects; only their data handles change per call.
struct CachedMatmul {
  dnnl::matmul prim;
  dnnl::memory a, b, c, bias, scratch;
  int64_t scratch_bytes = 0;
};

dnnl::memory::data_type to_dnnl(DType t) {
  return t == DType::kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

struct Buffer {
  std::shared_ptr<void> mem;
  int64_t bytes = 0;
  void* get(int64_t nbytes) {
    if (nbytes > bytes) {
      mem = aligned_alloc_shared(nbytes);
      bytes = nbytes;
    }
    return mem.get();
  }
};

}  // namespace

struct MatmulEngine::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<std::vector<int64_t>, CachedMatmul, KeyHash> cache;
  Buffer scratchpad;
  Buffer slots[kScratchSlots];
};

MatmulEngine::MatmulEngine() : impl_(std::make_unique<Impl>()) {}
MatmulEngine::~MatmulEngine() = default;
int64_t MatmulEngine::cached_primitives() const { return int64_t(impl_->cache.size()); }
void MatmulEngine::clear_cache() { impl_->cache.clear(); }
void MatmulEngine::set_compute_dtype(DType dtype) {
  TP_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "[MatmulEngine] compute dtype: got ",
           dtype_name(dtype), ", expected f32 or bf16");
  compute_ = dtype;
}
void* MatmulEngine::scratch(int slot, int64_t nbytes) {
  TP_ASSERT(slot >= 0 && slot < kScratchSlots);
  return impl_->slots[slot].get(nbytes);
}

namespace {

// Bound on cached primitives: varying shapes (e.g. prompt lengths) must not grow it forever.
constexpr size_t kMaxCached = 512;

void check_matmul_args(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor* bias) {
  const int nd = a.ndim();
  TP_CHECK(nd >= 2 && nd <= 6 && b.ndim() == nd && c.ndim() == nd,
           "[matmul] ranks: got a ", a.describe(), ", b ", b.describe(), ", c ", c.describe(),
           ", expected the same rank, 2 to 6");
  TP_CHECK(a.device() == Device::kCpu && b.device() == Device::kCpu && c.device() == Device::kCpu,
           "[matmul] tensors must be on the cpu");
  TP_CHECK((a.dtype() == DType::kF32 || a.dtype() == DType::kBF16) && a.dtype() == b.dtype(),
           "[matmul] dtypes: got a ", a.describe(), ", b ", b.describe(),
           ", expected both f32 or both bf16");
  TP_CHECK(c.dtype() == DType::kF32 || c.dtype() == DType::kBF16, "[matmul] output dtype: got ",
           c.describe(), ", expected f32 or bf16");
  const int64_t M = a.dim(-2), K = a.dim(-1), N = b.dim(-1);
  TP_CHECK(b.dim(-2) == K && c.dim(-2) == M && c.dim(-1) == N, "[matmul] shapes: got a ",
           a.describe(), " x b ", b.describe(), " -> c ", c.describe(),
           ", expected (..,M,K) x (..,K,N) -> (..,M,N)");
  for (int d = 0; d < nd - 2; ++d) {
    TP_CHECK((a.dim(d) == c.dim(d) || a.dim(d) == 1) && (b.dim(d) == c.dim(d) || b.dim(d) == 1),
             "[matmul] batch dim ", d, ": got a ", a.describe(), ", b ", b.describe(), ", c ",
             c.describe(), ", expected a and b to match c or be 1");
  }
  if (bias) {
    TP_CHECK(bias->ndim() == 1 && bias->dim(0) == N && bias->dtype() == DType::kF32 &&
                 bias->is_contiguous(),
             "[matmul] bias: got ", bias->describe(), ", expected contiguous f32[", N, "]");
  }
}

void append_desc(std::vector<int64_t>& key, const Tensor& t) {
  key.push_back(int64_t(t.dtype()));
  for (int d = 0; d < t.ndim(); ++d) key.push_back(t.dim(d));
  for (int d = 0; d < t.ndim(); ++d) key.push_back(t.dim(d) == 1 ? 0 : t.strides()[size_t(d)]);
}

dnnl::memory::desc md_of(const Tensor& t) {
  dnnl::memory::dims dims(t.shape().begin(), t.shape().end());
  dnnl::memory::dims strides(t.strides().begin(), t.strides().end());
  // Dims of size 1 may carry any stride; oneDNN wants them consistent, so give them the
  // product of the inner extent (the stride a contiguous layout would have).
  for (int d = t.ndim() - 1; d >= 0; --d) {
    if (t.dim(d) == 1) {
      int64_t s = 1;
      for (int e = d + 1; e < t.ndim(); ++e) s = std::max(s, t.strides()[size_t(e)] * t.dim(e));
      strides[size_t(d)] = s;
    }
  }
  return dnnl::memory::desc(dims, to_dnnl(t.dtype()), strides);
}

CachedMatmul& get_primitive(MatmulEngine::Impl& im, const Tensor& c, const Tensor& a,
                            const Tensor& b, const Tensor* bias, float alpha, float beta) {
  std::vector<int64_t> key;
  key.reserve(64);
  append_desc(key, a);
  append_desc(key, b);
  append_desc(key, c);
  key.push_back(bias ? 1 : 0);
  key.push_back(int64_t(std::bit_cast<uint32_t>(alpha)));
  key.push_back(int64_t(std::bit_cast<uint32_t>(beta)));
  // oneDNN fixes its work split at creation from the calling thread's OpenMP team size.
  key.push_back(omp_get_max_threads());
  auto it = im.cache.find(key);
  if (it != im.cache.end()) return it->second;

  if (im.cache.size() >= kMaxCached) im.cache.clear();
  const auto a_md = md_of(a), b_md = md_of(b), c_md = md_of(c);
  dnnl::memory::desc bias_md;
  if (bias) {
    dnnl::memory::dims bd(size_t(c.ndim()), 1);
    bd.back() = c.dim(-1);
    dnnl::memory::dims bs(size_t(c.ndim()), c.dim(-1));
    bs.back() = 1;
    bias_md = dnnl::memory::desc(bd, dnnl::memory::data_type::f32, bs);
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // our buffer: concurrent ranks are safe
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  CachedMatmul e;
  try {
    const auto desc = bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md)
                           : dnnl::matmul::desc(a_md, b_md, c_md);
    const dnnl::matmul::primitive_desc pd(desc, attr, im.engine);
    e.prim = dnnl::matmul(pd);
    e.a = dnnl::memory(a_md, im.engine, DNNL_MEMORY_NONE);
    e.b = dnnl::memory(b_md, im.engine, DNNL_MEMORY_NONE);
    e.c = dnnl::memory(c_md, im.engine, DNNL_MEMORY_NONE);
    if (bias) e.bias = dnnl::memory(bias_md, im.engine, DNNL_MEMORY_NONE);
    e.scratch_bytes = int64_t(pd.scratchpad_desc().get_size());
    e.scratch = dnnl::memory(pd.scratchpad_desc(), im.engine, DNNL_MEMORY_NONE);
  } catch (const dnnl::error& err) {
    TP_CHECK(false, "[matmul] oneDNN cannot build a matmul for a ", a.describe(), " x b ",
             b.describe(), " -> c ", c.describe(), ": ", err.what());
  }
  return im.cache.emplace(std::move(key), std::move(e)).first->second;
}

}  // namespace

// Asked once with a tiny primitive.
bool onednn_has_bf16_matmul() {
  static const bool has = [] {
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const dnnl::memory::desc a({2, 2}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
      const dnnl::memory::desc c({2, 2}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

namespace {

Tensor converted(MatmulEngine& eng, const Tensor& t, DType dtype, int slot);  // below

// A bf16 operand widened to f32 (exact), in the engine's scratch `slot` when 2-D.
Tensor widened(MatmulEngine& eng, const Tensor& t, int slot) {
  return t.ndim() == 2 ? converted(eng, t, DType::kF32, slot) : t.to(DType::kF32);
}

}  // namespace

void matmul(MatmulEngine& eng, Tensor& c, const Tensor& a, const Tensor& b, const Tensor* bias,
            float alpha, float beta) {
  check_matmul_args(c, a, b, bias);
  if (c.numel() == 0) return;
  if (a.dim(-1) == 0) {  // empty sum: c = beta * c + bias, done by hand (oneDNN rejects K = 0)
    matmul_naive(c, a, b, bias, alpha, beta);
    return;
  }
  if (a.dtype() == DType::kBF16 && !onednn_has_bf16_matmul()) {
    // bf16 products are exact in f32 and oneDNN accumulates bf16 in f32: the same arithmetic.
    matmul(eng, c, widened(eng, a, 6), widened(eng, b, 7), bias, alpha, beta);
    return;
  }
  if (a.dtype() == DType::kF32 && c.dtype() == DType::kBF16) {
    // oneDNN has no f32 x f32 -> bf16 matmul: run it into f32 scratch and round once.
    Tensor tmp = Tensor::borrow(eng.scratch(5, dtype_nbytes(DType::kF32, c.numel())), c.shape(),
                                DType::kF32);
    if (beta != 0.0f) tmp.copy_from(c);
    matmul(eng, tmp, a, b, bias, alpha, beta);
    c.copy_from(tmp);
    return;
  }
  auto& im = eng.impl();
  CachedMatmul& e = get_primitive(im, c, a, b, bias, alpha, beta);
  e.a.set_data_handle(const_cast<void*>(a.raw()));
  e.b.set_data_handle(const_cast<void*>(b.raw()));
  e.c.set_data_handle(c.raw());
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
  if (bias) {
    e.bias.set_data_handle(const_cast<void*>(bias->raw()));
    args.emplace(DNNL_ARG_BIAS, e.bias);
  }
  if (e.scratch_bytes > 0) {
    e.scratch.set_data_handle(im.scratchpad.get(e.scratch_bytes));
    args.emplace(DNNL_ARG_SCRATCHPAD, e.scratch);
  }
  e.prim.execute(im.stream, args);
  im.stream.wait();
}

namespace {

// 2-D view of a tensor whose leading dims flatten into rows.
Tensor as_rows(const Tensor& t, const char* what) {
  if (t.ndim() == 2) return t;
  TP_CHECK(t.ndim() >= 1 && t.is_contiguous(), "[matmul_forward] ", what, ": got ", t.describe(),
           ", expected 2-D or contiguous");
  const int64_t k = t.dim(-1);
  return t.reshape({k == 0 ? 0 : t.numel() / k, k});
}

// Copy of a 2-D f32/bf16 tensor converted to `dtype`, in the engine's scratch `slot`.
Tensor converted(MatmulEngine& eng, const Tensor& t, DType dtype, int slot) {
  if (t.dtype() == dtype) return t;
  const int64_t rows = t.dim(0), cols = t.dim(1);
  Tensor out = Tensor::borrow(eng.scratch(slot, dtype_nbytes(dtype, t.numel())), {rows, cols}, dtype);
  const int64_t ss = t.strides()[0], cs = t.strides()[1];
  if (t.dtype() == DType::kF32 && dtype == DType::kBF16) {
    const float* src = t.data<float>();
    bf16* dst = out.data<bf16>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      if (cs == 1) {
        f32_to_bf16_n(dst + i * cols, src + i * ss, cols);
        continue;
      }
      for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = f32_to_bf16(src[i * ss + j * cs]);
    }
  } else if (t.dtype() == DType::kBF16 && dtype == DType::kF32) {
    const bf16* src = t.data<bf16>();
    float* dst = out.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      if (cs == 1) {
        bf16_to_f32_n(dst + i * cols, src + i * ss, cols);
        continue;
      }
      for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = bf16_to_f32(src[i * ss + j * cs]);
    }
  } else {
    TP_CHECK(false, "[matmul] cannot convert ", t.describe(), " to ", dtype_name(dtype),
             ", expected f32 or bf16");
  }
  return out;
}

// The weight as multiplied: an f32 weight rounded to bf16 (scratch `slot`) in bf16 compute.
Tensor compute_weight(MatmulEngine& eng, const Tensor& weight, int slot) {
  if (weight.dtype() == DType::kF32 && eng.compute_dtype() == DType::kBF16)
    return converted(eng, weight, DType::kBF16, slot);
  return weight;
}

// The kernel row-invariant inference multiplies bf16 weights with: AMX tiles where the CPU has
// them, else AVX512-BF16 dots, else the panel kernel on AVX2 CPUs without AVX-512 (the weights
// packed at load, panel_matmul.h; f32 and f16 weights too), else the row-wise kernel (f32
// activations). TENSORPAR_BF16_KERNEL=amx|avx512bf16|panels|rowwise picks one, to measure them
// against each other on one machine (bench/decode_bench.py; panels and rowwise decide for f32
// and f16 weights too);
// one this CPU cannot run is an error. Read once.
enum class Bf16Kernel { kAmx, kAvx512Bf16, kPanels, kRowwise };

Bf16Kernel bf16_kernel() {
  static const Bf16Kernel kernel = [] {
    const char* env = std::getenv("TENSORPAR_BF16_KERNEL");
    const std::string asked = env ? env : "";
    if (asked.empty()) {
      if (amx_bf16_usable()) return Bf16Kernel::kAmx;
      if (avx512_bf16_usable()) return Bf16Kernel::kAvx512Bf16;
      return panels_usable() && !quant_detail::cpu_has_avx512() ? Bf16Kernel::kPanels : Bf16Kernel::kRowwise;
    }
    if (asked == "rowwise") return Bf16Kernel::kRowwise;
    TP_CHECK(asked == "amx" || asked == "avx512bf16" || asked == "panels", "TENSORPAR_BF16_KERNEL=", asked,
             ": expected amx, avx512bf16, panels or rowwise");
    const Bf16Kernel k = asked == "amx" ? Bf16Kernel::kAmx : asked == "panels" ? Bf16Kernel::kPanels
                                                                                : Bf16Kernel::kAvx512Bf16;
    const bool usable = k == Bf16Kernel::kAmx ? amx_bf16_usable()
                        : k == Bf16Kernel::kPanels ? panels_usable()
                                                   : avx512_bf16_usable();
    TP_CHECK(usable, "TENSORPAR_BF16_KERNEL=", asked, ": this CPU (or its kernel) does not allow it");
    return k;
  }();
  return kernel;
}

void check_weight(const Tensor& weight, int64_t K, const char* where) {
  TP_CHECK(weight.ndim() == 2 && weight.dim(1) == K, "[", where, "] weight: got ",
           weight.describe(), ", expected (N,", K, ") in the [out,in] layout");
}

}  // namespace

bool panels_preferred() { return bf16_kernel() == Bf16Kernel::kPanels; }

void matmul_forward(MatmulEngine& eng, Tensor& out, const Tensor& in, const Tensor& weight,
                    const Tensor* bias) {
  const Tensor in2 = as_rows(in, "in");
  Tensor out2 = as_rows(out, "out");
  check_weight(weight, in2.dim(1), "matmul_forward");
  TP_CHECK(out2.dim(0) == in2.dim(0) && out2.dim(1) == weight.dim(0), "[matmul_forward] out: got ",
           out.describe(), " for in ", in.describe(), " and weight ", weight.describe(),
           ", expected (..,", weight.dim(0), ") with the rows of in");
  TP_CHECK(!dtype_is_row_packed(weight.dtype()) || (eng.row_invariant() && eng.int8_activations()),
           "[matmul_forward] weight ", weight.describe(), " is row-packed for inference's int8 kernel: it cannot be "
           "multiplied with f32 activations or in training");
  TP_CHECK(!dtype_is_panels(weight.dtype()) || eng.row_invariant(), "[matmul_forward] weight ", weight.describe(),
           " is in panels for inference's kernel: it cannot be multiplied in training");
  if (eng.row_invariant()) {
    const Tensor a = converted(eng, in2, DType::kF32, 0);
    // bf16 weights on AMX tiles, else with AVX512-BF16 dots, and block-quantized weights with
    // 8-bit activations on AVX2 or VNNI, where the CPU has them (the choice depends on the CPU and the
    // weight type only, never on M: every row of every batch takes the same path).
    const bool bf16 = weight.dtype() == DType::kBF16;
    if (bf16 && bf16_kernel() == Bf16Kernel::kAmx)
      amx_bf16_matmul_forward(out2, a, weight, bias, eng.scratch(4, amx_bf16_scratch_bytes(a.dim(0), a.dim(1))));
    else if (eng.int8_activations() && (dtype_is_quantized(weight.dtype()) || dtype_is_row_packed(weight.dtype())) &&
             int8_matmul_usable(weight.dtype()))
      int8_matmul_forward(out2, a, weight, bias, eng.scratch(4, int8_matmul_scratch_bytes(a.dim(0), a.dim(1), weight.dtype())));
    else if (dtype_is_panels(weight.dtype()))
      panel_matmul_forward(out2, a, weight, bias);
    else if (bf16 && bf16_kernel() == Bf16Kernel::kAvx512Bf16)
      avx512bf16_matmul_forward(out2, a, weight, bias,
                                eng.scratch(4, avx512bf16_scratch_bytes(a.dim(0), a.dim(1))));
    else
      rowwise_matmul_forward(out2, a, weight, bias);
    return;
  }
  if (dtype_is_quantized(weight.dtype())) {
    quant_matmul_forward(eng, out2, in2, weight, bias);
    return;
  }
  const Tensor w = compute_weight(eng, weight, 1);
  const Tensor a = converted(eng, in2, w.dtype(), 0);
  matmul(eng, out2, a, w.transpose(0, 1), bias);
}

void matmul_backward(MatmulEngine& eng, Tensor* d_in, Tensor* d_weight, Tensor* d_bias,
                     const Tensor& d_out, const Tensor& in, const Tensor& weight) {
  const Tensor dy = as_rows(d_out, "d_out");
  const Tensor x = as_rows(in, "in");
  check_weight(weight, x.dim(1), "matmul_backward");
  TP_CHECK(dy.dim(0) == x.dim(0) && dy.dim(1) == weight.dim(0), "[matmul_backward] d_out: got ",
           d_out.describe(), " for in ", in.describe(), " and weight ", weight.describe(),
           ", expected (..,", weight.dim(0), ") with the rows of in");
  TP_CHECK(!dtype_packed_rows(weight.dtype()), "[matmul_backward] weight ", weight.describe(),
           " is row-packed for inference: no backward through it");
  const bool quantized = dtype_is_quantized(weight.dtype());
  TP_CHECK(!quantized || (!d_weight && !d_bias), "[matmul_backward] weight ", weight.describe(),
           " is quantized (frozen): only d_in is available");
  std::optional<Tensor> dy_converted;  // d_out as the input gradient's matmul took it (scratch slot 0)
  if (d_in) {
    Tensor dx = as_rows(*d_in, "d_in");
    TP_CHECK(dx.dim(0) == x.dim(0) && dx.dim(1) == x.dim(1), "[matmul_backward] d_in: got ",
             d_in->describe(), ", expected the shape of in ", in.describe());
    if (quantized) {
      quant_matmul_backward_input(eng, dx, dy, weight);
    } else {
      const Tensor w = compute_weight(eng, weight, 1);
      dy_converted = converted(eng, dy, w.dtype(), 0);
      matmul(eng, dx, *dy_converted, w, nullptr, 1.0f, 1.0f);
    }
  }
  if (d_weight) {
    TP_CHECK(d_weight->ndim() == 2 && d_weight->shape() == weight.shape(),
             "[matmul_backward] d_weight: got ", d_weight->describe(), ", expected the shape of ",
             weight.describe());
    // Both operands in the activations' dtype (bf16 in bf16 compute); d_out follows in.
    const DType t = eng.compute_dtype() == DType::kBF16 ? DType::kBF16 : x.dtype();
    const Tensor g = dy_converted && dy_converted->dtype() == t ? *dy_converted : converted(eng, dy, t, 0);
    const Tensor xc = converted(eng, x, t, 2);
    matmul(eng, *d_weight, g.transpose(0, 1), xc, nullptr, 1.0f, 1.0f);
  }
  if (d_bias) {
    const int64_t M = dy.dim(0), N = dy.dim(1);
    TP_CHECK(d_bias->ndim() == 1 && d_bias->dim(0) == N && d_bias->dtype() == DType::kF32 &&
                 d_bias->is_contiguous(),
             "[matmul_backward] d_bias: got ", d_bias->describe(), ", expected contiguous f32[", N,
             "]");
    const Tensor g = converted(eng, dy, DType::kF32, 0);
    const float* gp = g.data<float>();
    const int64_t rs = g.strides()[0], cs = g.strides()[1];
    float* db = d_bias->data<float>();
    constexpr int64_t kCols = 64;  // a strip of columns per task, walked row by row
#pragma omp parallel for schedule(static)
    for (int64_t n0 = 0; n0 < N; n0 += kCols) {
      const int64_t n1 = std::min(N, n0 + kCols);
      float acc[kCols] = {};
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n1; ++n) acc[n - n0] += gp[m * rs + n * cs];
      for (int64_t n = n0; n < n1; ++n) db[n] += acc[n - n0];
    }
  }
}

}  // namespace tensorpar
