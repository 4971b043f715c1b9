// The NCCL backend on one GPU: every op on device buffers in a world of one (results against
// the host reference, outputs poisoned first), in place and out of place, split, debug
// fingerprints, and the timeout path (an init whose second rank never arrives must fail with an
// Error, not hang). Skipped when no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "comm/nccl/nccl_backend.h"
#include "core/half.h"
#include "test_util.h"

namespace tensorpar {
namespace {

// A host group for bootstrapping: `size` ranks of which only `rank` exists in this process, so
// every exchange is a local copy. With size > 1 it models peers that never show up.
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
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SoloHost>(1); }

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

TEST_F(NcclSolo, AllReduceEveryDtypeAndOp) {
  TP_SEED_TRACE();
  testing::Rng rng(1);
  auto c = nccl::create(host_, 0, CommOptions::from_env());
  EXPECT_EQ(c->size(), 1);
  for (DType t : kDtypes)
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
      for (int64_t n : {1, 7, 33, 577})
        for (bool in_place : {false, true}) {
          const auto h = random_bytes(t, n, rng);
          DeviceBuffer in(h.size()), out(h.size());
          in.upload(h);
          out.upload(poison(h.size()));
          c->all_reduce(in.ptr, in_place ? in.ptr : out.ptr, n, t, op);
          EXPECT_EQ((in_place ? in : out).download(), h) << dtype_name(t) << " n=" << n;
        }
}

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

// Rank 0 of 2 creates the communicator but rank 1 never comes: the init must time out.
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
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2 * o.timeout_s);
}

TEST(NcclNoGpu, ReportsAvailability) {
  int n = 0;
  const bool have = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  EXPECT_EQ(nccl::is_available(), have);
}

}  // namespace
}  // namespace tensorpar
