// The NCCL backend. Without a GPU: the DType/ReduceOp -> NCCL enum mappings (pure functions,
// against nccl.h's own enums and element sizes) and a create() that fails with one clear error.
// On one GPU (a world of one): data movement on device buffers (outputs poisoned first, in place
// and out of place), split (a negative color is refused clearly), debug fingerprints, and an init
// whose second rank never comes (must fail, not hang). On two or more GPUs: all_reduce,
// all_gather and reduce_scatter across ranks against a host reference. Each group of tests
// skips itself when the GPUs it needs are missing.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "comm/launch.h"
#include "comm/nccl/nccl_backend.h"
#include "comm/nccl/nccl_types.h"
#include "core/half.h"
#include "test_util.h"

namespace tensorpar {
namespace {

// A host group for bootstrapping: `size` ranks of which only rank 0 exists in this process, so
// every exchange is a local copy. With size > 1 it models peers that never show up. Like the
// threads backend, split with a negative color leaves the rank out (no group).
class SoloHost final : public Communicator {
 public:
  explicit SoloHost(int size = 1) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string name() const override { return "solo"; }
  void all_reduce(const void* in, void* out, int64_t n, DType t, ReduceOp) override { copy(in, out, n, t); }
  void all_gather(const void* in, void* out, int64_t n, DType t) override {
    for (int r = 0; r < size_; ++r) copy(in, static_cast<char*>(out) + r * dtype_nbytes(t, n), n, t);
  }
  void reduce_scatter(const void* in, void* out, int64_t n, DType t, ReduceOp) override { copy(in, out, n, t); }
  void broadcast(void*, int64_t, DType, int) override {}
  void all_to_all(const void* in, std::span<const int64_t> s, void* out, std::span<const int64_t>, DType t) override {
    copy(in, out, s[0], t);
  }
  void send(const void*, int64_t, DType, int) override {}
  void recv(void*, int64_t, DType, int) override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int) override {
    return color < 0 ? nullptr : std::make_unique<SoloHost>(1);
  }

 private:
  static void copy(const void* in, void* out, int64_t n, DType t) {
    if (in != out) std::memmove(out, in, size_t(dtype_nbytes(t, n)));
  }
  int size_;
};

void cuda_ok(cudaError_t rc) { ASSERT_EQ(rc, cudaSuccess) << cudaGetErrorString(rc); }

// A device buffer with host-side helpers.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) { cuda_ok(cudaMalloc(&ptr, bytes ? bytes : 1)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  void upload(const std::vector<uint8_t>& h) { cuda_ok(cudaMemcpy(ptr, h.data(), h.size(), cudaMemcpyHostToDevice)); }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> h(bytes);
    cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost);
    return h;
  }
  char* at(size_t off) { return static_cast<char*>(ptr) + off; }
  void* ptr = nullptr;
  size_t bytes;
};

std::vector<uint8_t> random_bytes(DType t, int64_t n, testing::Rng& rng) {
  std::vector<uint8_t> b(size_t(dtype_nbytes(t, n)));
  for (int64_t i = 0; i < n; ++i) {
    const float f = rng.uniform(-100, 100);
    switch (t) {
      case DType::kF32: std::memcpy(b.data() + 4 * i, &f, 4); break;
      case DType::kBF16: { uint16_t h = f32_to_bf16(f).bits; std::memcpy(b.data() + 2 * i, &h, 2); break; }
      case DType::kF16: { uint16_t h = f32_to_f16(f).bits; std::memcpy(b.data() + 2 * i, &h, 2); break; }
      case DType::kI32: { int32_t k = int32_t(f * 1000); std::memcpy(b.data() + 4 * i, &k, 4); break; }
      default: { int64_t k = int64_t(f * 1e9); std::memcpy(b.data() + 8 * i, &k, 8); break; }
    }
  }
  return b;
}

std::vector<uint8_t> poison(size_t bytes) { return std::vector<uint8_t>(bytes, 0xff); }  // NaN / -1

class NcclSolo : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!nccl::is_available()) GTEST_SKIP() << "no CUDA device visible";
  }
  SoloHost host_;
};

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};

TEST_F(NcclSolo, GatherScatterBroadcastAllToAll) {
  TP_SEED_TRACE();
  testing::Rng rng(2);
  auto c = nccl::create(host_, 0, CommOptions::from_env());
  for (DType t : kDtypes)
    for (int64_t n : {1, 7, 577}) {
      const auto h = random_bytes(t, n, rng);
      const size_t bytes = h.size();
      DeviceBuffer in(bytes), out(bytes);
      in.upload(h);
      out.upload(poison(bytes));
      c->all_gather(in.ptr, out.ptr, n, t);
      EXPECT_EQ(out.download(), h) << "all_gather " << dtype_name(t);
      c->all_gather(in.ptr, in.ptr, n, t);  // in place: in == out + rank*n
      EXPECT_EQ(in.download(), h);
      out.upload(poison(bytes));
      c->reduce_scatter(in.ptr, out.ptr, n, t, ReduceOp::kSum);
      EXPECT_EQ(out.download(), h) << "reduce_scatter " << dtype_name(t);
      c->reduce_scatter(in.ptr, in.ptr, n, t, ReduceOp::kMax);
      EXPECT_EQ(in.download(), h);
      c->broadcast(in.ptr, n, t, 0);
      EXPECT_EQ(in.download(), h) << "broadcast";
      const int64_t counts[] = {n};
      out.upload(poison(bytes));
      c->all_to_all(in.ptr, counts, out.ptr, counts, t);
      EXPECT_EQ(out.download(), h) << "all_to_all";
      c->all_to_all(in.ptr, counts, in.ptr, counts, t);
      EXPECT_EQ(in.download(), h) << "all_to_all in place";
    }
  c->barrier();
  EXPECT_THROW(c->broadcast(nullptr, 1, DType::kF32, 1), Error);
  EXPECT_THROW(c->send(nullptr, 1, DType::kF32, 0), Error);
}

TEST_F(NcclSolo, SplitAndDebugFingerprints) {
  CommOptions o = CommOptions::from_env();
  o.debug = true;
  auto c = nccl::create(host_, 0, o);
  auto child = c->split(0, 0);
  EXPECT_EQ(child->size(), 1);
  std::vector<uint8_t> h(4 * 33, 0x3f);
  DeviceBuffer b(h.size());
  b.upload(h);
  child->all_reduce(b.ptr, b.ptr, 33, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(b.download(), h);
}

// A negative color gives no host group to bootstrap over: one clear error, not a null dereference.
TEST_F(NcclSolo, SplitWithANegativeColorIsRefused) {
  auto c = nccl::create(host_, 0, CommOptions::from_env());
  try {
    auto child = c->split(-1, 0);
    ADD_FAILURE() << "split(-1) returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[nccl split] host group solo returned no group for color -1"),
              std::string::npos) << e.what();
  }
}

// Rank 0 of 2 creates the communicator but rank 1 never comes: the init must fail with a
// timeout (a hang is caught by ctest's TIMEOUT). It cannot fail before its timeout has passed;
// how long after depends on the machine's load, so no upper bound is asserted.
TEST_F(NcclSolo, InitWithMissingPeerTimesOut) {
  SoloHost two(2);
  CommOptions o;
  o.timeout_s = 3;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    auto c = nccl::create(two, 0, o);
    ADD_FAILURE() << "init with a missing peer returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), o.timeout_s);
}

// ---- Without a GPU ----

// NCCL's element sizes, from its documentation (nccl.h gives the enum but no size function).
int64_t nccl_type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

TEST(NcclTypes, EveryCommunicableDtypeMapsToNcclsEnumOfTheSameSize) {
  const std::pair<DType, ncclDataType_t> want[] = {
      {DType::kF32, ncclFloat32}, {DType::kBF16, ncclBfloat16}, {DType::kF16, ncclFloat16},
      {DType::kI32, ncclInt32},   {DType::kI64, ncclInt64},     {DType::kU8, ncclUint8}};
  for (const auto& [dtype, nccl] : want) {
    EXPECT_EQ(nccl::nccl_type(dtype), nccl) << dtype_name(dtype);
    EXPECT_EQ(nccl_type_bytes(nccl::nccl_type(dtype)), dtype_nbytes(dtype, 1)) << dtype_name(dtype);
  }
}

TEST(NcclTypes, QuantizedDtypesAreRefusedByName) {
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K}) {
    try {
      (void)nccl::nccl_type(t);
      ADD_FAILURE() << dtype_name(t) << " was mapped";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("dtype ") + std::string(dtype_name(t)) + " cannot be communicated"),
                std::string::npos) << e.what();
    }
  }
}

TEST(NcclTypes, ReduceOpsMapToNcclsEnumAndAnInvalidOpIsRefused) {
  EXPECT_EQ(nccl::nccl_op(ReduceOp::kSum), ncclSum);
  EXPECT_EQ(nccl::nccl_op(ReduceOp::kMax), ncclMax);
  EXPECT_EQ(nccl::nccl_op(ReduceOp::kMin), ncclMin);
  EXPECT_THROW((void)nccl::nccl_op(static_cast<ReduceOp>(7)), Error);  // never a silent sum
}

// With no usable device, create() fails with one error naming it (no crash, no hang).
TEST(NcclNoGpu, CreateFailsWithOneClearError) {
  if (nccl::is_available()) GTEST_SKIP() << "a CUDA device is visible";
  SoloHost host;
  try {
    auto c = nccl::create(host, 0, CommOptions::from_env());
    ADD_FAILURE() << "create without a GPU returned";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[nccl::create] CUDA error", 0), 0u) << e.what();
  }
}

// ---- Two or more GPUs: real reductions across ranks ----

int visible_gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Small integers, exact in every dtype (bf16 included) and in any sum of a few of them, so
// NCCL's reduction order (a ring, in the element type's own precision) cannot change the result.
std::vector<uint8_t> encode(DType t, const std::vector<double>& v) {
  std::vector<uint8_t> b(size_t(dtype_nbytes(t, int64_t(v.size()))));
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = float(v[i]);
    switch (t) {
      case DType::kF32: std::memcpy(b.data() + 4 * i, &f, 4); break;
      case DType::kBF16: { uint16_t h = f32_to_bf16(f).bits; std::memcpy(b.data() + 2 * i, &h, 2); break; }
      case DType::kF16: { uint16_t h = f32_to_f16(f).bits; std::memcpy(b.data() + 2 * i, &h, 2); break; }
      case DType::kI32: { int32_t k = int32_t(v[i]); std::memcpy(b.data() + 4 * i, &k, 4); break; }
      default: { int64_t k = int64_t(v[i]); std::memcpy(b.data() + 8 * i, &k, 8); break; }
    }
  }
  return b;
}

TEST(NcclMultiGpu, AllReduceAllGatherReduceScatterMatchAHostReference) {
  const int n_ranks = std::min(visible_gpus(), 4);
  if (n_ranks < 2) GTEST_SKIP() << "needs two GPUs (NCCL refuses two ranks on one device)";
  TP_SEED_TRACE();
  testing::Rng rng(3);
  const int64_t n = 577;  // not a multiple of anything NCCL chunks by
  std::vector<std::vector<double>> in(size_t(n_ranks), std::vector<double>(size_t(n * n_ranks)));
  for (auto& v : in)
    for (auto& x : v) x = double(rng.integer(-8, 9));
  auto reduce = [&](ReduceOp op, int64_t i) {
    double r = in[0][size_t(i)];
    for (int k = 1; k < n_ranks; ++k) {
      const double x = in[size_t(k)][size_t(i)];
      r = op == ReduceOp::kSum ? r + x : op == ReduceOp::kMax ? std::max(r, x) : std::min(r, x);
    }
    return r;
  };
  LaunchConfig lc;
  lc.n_ranks = n_ranks;
  lc.threads_per_rank = 1;
  launch_ranks(lc, [&](Communicator& host) {
    const int rank = host.rank();
    auto c = nccl::create(host, rank, CommOptions::from_env());  // also selects the device
    for (DType t : kDtypes)
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        std::vector<double> want(size_t(n * n_ranks));
        for (int64_t i = 0; i < n * n_ranks; ++i) want[size_t(i)] = reduce(op, i);
        const auto mine = encode(t, in[size_t(rank)]);
        DeviceBuffer a(mine.size()), out(mine.size());
        a.upload(mine);
        out.upload(poison(mine.size()));
        c->all_reduce(a.ptr, out.ptr, n * n_ranks, t, op);
        EXPECT_EQ(out.download(), encode(t, want)) << "all_reduce " << dtype_name(t) << " rank " << rank;
        c->all_reduce(a.ptr, a.ptr, n * n_ranks, t, op);
        EXPECT_EQ(a.download(), encode(t, want)) << "all_reduce in place " << dtype_name(t);

        // reduce_scatter: rank r keeps block r of the reduction.
        const std::vector<double> block(want.begin() + rank * n, want.begin() + (rank + 1) * n);
        a.upload(mine);
        DeviceBuffer part(size_t(dtype_nbytes(t, n)));
        part.upload(poison(part.bytes));
        c->reduce_scatter(a.ptr, part.ptr, n, t, op);
        EXPECT_EQ(part.download(), encode(t, block)) << "reduce_scatter " << dtype_name(t);
      }
    // all_gather: block r of the output is rank r's first n inputs.
    for (DType t : kDtypes) {
      std::vector<double> want;
      for (int k = 0; k < n_ranks; ++k) want.insert(want.end(), in[size_t(k)].begin(), in[size_t(k)].begin() + n);
      const std::vector<double> mine_first(in[size_t(rank)].begin(), in[size_t(rank)].begin() + n);
      DeviceBuffer a(size_t(dtype_nbytes(t, n))), out(size_t(dtype_nbytes(t, n * n_ranks)));
      a.upload(encode(t, mine_first));
      out.upload(poison(out.bytes));
      c->all_gather(a.ptr, out.ptr, n, t);
      EXPECT_EQ(out.download(), encode(t, want)) << "all_gather " << dtype_name(t) << " rank " << rank;
    }
  });
}

}  // namespace
}  // namespace tensorpar
