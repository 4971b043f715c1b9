// `tensorpar bench comm`. Per size (doubling from --min-bytes to --max-bytes): warm-up, then
// kBatches timed batches of back-to-back collectives sized so the size takes ~0.2 s; a batch's
// time is the slowest rank's (all-reduce max), the reported time the median batch.
// bytes follow nccl-tests: the all-reduce/broadcast buffer, the all-gather output, the
// reduce-scatter input, the all-to-all send buffer (per rank). busbw factors as nccl-tests.
// mem_eff = traffic / (time * B_mem): traffic is the least memory traffic of the op
// (2nN for all-reduce and all-to-all, (n+1)N for all-gather and reduce-scatter, nN for
// broadcast), B_mem the read+write rate of one 256 MiB memcpy measured in the same run.
#include "comm_bench.h"

#ifdef TENSORPAR_HAVE_MPI
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/launch.h"
#include "core/error.h"
#include "core/tensor.h"
#include "median.h"

namespace tensorpar {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBatches = 7;
constexpr int64_t kMemcpyBytes = int64_t(256) << 20;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

enum class BenchOp { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll };

BenchOp op_from_name(const std::string& s) {
  if (s == "all_reduce") return BenchOp::kAllReduce;
  if (s == "all_gather") return BenchOp::kAllGather;
  if (s == "reduce_scatter") return BenchOp::kReduceScatter;
  if (s == "broadcast") return BenchOp::kBroadcast;
  if (s == "all_to_all") return BenchOp::kAllToAll;
  TP_CHECK(false, "[bench comm] op: got '", s,
           "', expected all_reduce | all_gather | reduce_scatter | broadcast | all_to_all");
  return BenchOp::kAllReduce;
}

// nccl-tests' bus bandwidth factor for n ranks.
double busbw_factor(BenchOp op, int n) {
  switch (op) {
    case BenchOp::kAllReduce: return 2.0 * (n - 1) / n;
    case BenchOp::kBroadcast: return 1.0;
    default: return double(n - 1) / n;
  }
}

// The least memory traffic (bytes read + written, all ranks) of the op on N bytes.
double traffic_bytes(BenchOp op, int n, double bytes) {
  switch (op) {
    case BenchOp::kAllReduce:
    case BenchOp::kAllToAll: return 2.0 * n * bytes;
    case BenchOp::kAllGather:
    case BenchOp::kReduceScatter: return (n + 1.0) * bytes;
    case BenchOp::kBroadcast: return n * bytes;
  }
  return 0;
}

// Read+write bytes per second of one large memcpy (median of 5), the physical limit of a copy.
double measure_memcpy_traffic() {
  std::unique_ptr<char[]> src(new char[size_t(kMemcpyBytes)]), dst(new char[size_t(kMemcpyBytes)]);
  std::memset(src.get(), 1, size_t(kMemcpyBytes));
  std::memset(dst.get(), 0, size_t(kMemcpyBytes));
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const double t0 = now_s();
    std::memcpy(dst.get(), src.get(), size_t(kMemcpyBytes));
    t.push_back(now_s() - t0);
  }
  return 2.0 * double(kMemcpyBytes) / median(t);
}

// Slowest rank's value (the group agrees on it).
int64_t max_over_ranks(Communicator& c, int64_t v) {
  c.all_reduce(&v, &v, 1, DType::kI64, ReduceOp::kMax);
  return v;
}

struct Buffers {
  Tensor in, out;
};

struct SizeResult {
  int64_t bytes = 0;
  double time_s = 0;
};

class Sweep {
 public:
  Sweep(Communicator& c, const CommBenchConfig& cfg)
      : c_(c), cfg_(cfg), op_(op_from_name(cfg.op)), dtype_(dtype_from_name(cfg.dtype)),
        esize_(dtype_nbytes(dtype_, 1)), n_(c.size()) {}

  void run() {
    // One rank measures memcpy while the others wait, so the figure is not shared bandwidth.
    c_.barrier();
    int64_t bmem = 0;
    if (c_.rank() == 0) bmem = int64_t(measure_memcpy_traffic());
    c_.broadcast(&bmem, 1, DType::kI64, 0);
    bmem_ = double(bmem);
    if (c_.rank() == 0) print_header();
    const int64_t max_elems = std::max<int64_t>(cfg_.max_bytes / esize_, n_);
    bufs_.in = Tensor::empty({max_elems + n_}, dtype_);
    bufs_.out = Tensor::empty({max_elems + n_}, dtype_);
    bufs_.in.fill(1.0f + 0.25f * float(c_.rank()));
    bufs_.out.fill(0.0f);
    for (int64_t bytes = cfg_.min_bytes; bytes <= cfg_.max_bytes; bytes *= 2) {
      const SizeResult r = measure(bytes);
      if (c_.rank() == 0) print_row(r);
    }
  }

 private:
  // Elements per rank piece, so that the op's nominal size is `bytes` (at least 1 element).
  int64_t piece(int64_t bytes) const {
    const int64_t elems = std::max<int64_t>(1, bytes / esize_);
    if (op_ == BenchOp::kAllReduce || op_ == BenchOp::kBroadcast) return elems;
    return std::max<int64_t>(1, elems / n_);
  }
  int64_t nominal_bytes(int64_t count) const {
    if (op_ == BenchOp::kAllReduce || op_ == BenchOp::kBroadcast) return count * esize_;
    return count * n_ * esize_;
  }

  void once(int64_t count) {
    void* in = bufs_.in.raw();
    void* out = bufs_.out.raw();
    if (cfg_.raw_mpi) return once_raw_mpi(in, out, count);
    switch (op_) {
      case BenchOp::kAllReduce: c_.all_reduce(in, out, count, dtype_, ReduceOp::kSum); break;
      case BenchOp::kAllGather: c_.all_gather(in, out, count, dtype_); break;
      case BenchOp::kReduceScatter: c_.reduce_scatter(in, out, count, dtype_, ReduceOp::kSum); break;
      case BenchOp::kBroadcast: c_.broadcast(in, count, dtype_, 0); break;
      case BenchOp::kAllToAll: c_.all_to_all(in, counts_, out, counts_, dtype_); break;
    }
  }

  // The peer baseline: OpenMPI's own blocking collectives (f32 only), no Communicator between.
  void once_raw_mpi(void* in, void* out, int64_t count) {
#ifdef TENSORPAR_HAVE_MPI
    const int n = int(count);
    MPI_Comm w = MPI_COMM_WORLD;
    switch (op_) {
      case BenchOp::kAllReduce: MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, w); break;
      case BenchOp::kAllGather: MPI_Allgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, w); break;
      case BenchOp::kReduceScatter: MPI_Reduce_scatter_block(in, out, n, MPI_FLOAT, MPI_SUM, w); break;
      case BenchOp::kBroadcast: MPI_Bcast(in, n, MPI_FLOAT, 0, w); break;
      case BenchOp::kAllToAll: {
        // MPI_Alltoallv, the form whose counts may differ per peer, as MoE dispatch needs and
        // as all_to_all takes them (here all equal).
        MPI_Alltoallv(in, mpi_counts_.data(), mpi_displs_.data(), MPI_FLOAT, out, mpi_counts_.data(),
                      mpi_displs_.data(), MPI_FLOAT, w);
        break;
      }
    }
#else
    (void)in, (void)out, (void)count;
#endif
  }

  // Seconds per op of a batch of `iters`, slowest rank.
  double batch(int64_t count, int64_t iters) {
    c_.barrier();
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < iters; ++i) once(count);
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    return double(max_over_ranks(c_, ns)) * 1e-9 / double(iters);
  }

  SizeResult measure(int64_t bytes) {
    const int64_t count = piece(bytes);
    counts_.assign(size_t(n_), count);
    mpi_counts_.assign(size_t(n_), int(count));
    mpi_displs_.resize(size_t(n_));
    for (int r = 0; r < n_; ++r) mpi_displs_[size_t(r)] = r * int(count);
    // Warm-up, doubling until a batch takes >= 5 ms (or one op alone is slower): gives the
    // per-op estimate that sizes the timed batches.
    double per_op = batch(count, 1);
    for (int64_t iters = 2; per_op * double(iters) < 5e-3 && iters <= (int64_t(1) << 22); iters *= 2)
      per_op = batch(count, iters);
    const double budget = cfg_.seconds_per_size / kBatches;
    const int64_t iters = std::max<int64_t>(1, int64_t(budget / std::max(per_op, 1e-9)));
    std::vector<double> times;
    for (int b = 0; b < kBatches; ++b) times.push_back(batch(count, iters));
    return SizeResult{nominal_bytes(count), median(times)};
  }

  const char* backend_label() const { return cfg_.raw_mpi ? "mpi-raw" : cfg_.backend.c_str(); }

  void print_header() const {
    if (cfg_.json) return;
    std::printf("# tensorpar bench comm: %s, backend %s, %d ranks, %s; B_mem = %.1f GB/s read+write "
                "(one 256 MiB memcpy: %.1f GB/s copied)\n",
                cfg_.op.c_str(), backend_label(), n_, cfg_.dtype.c_str(), bmem_ * 1e-9,
                bmem_ * 0.5e-9);
    std::printf("# time = median of %d batches, slowest rank per batch; mem_eff = op traffic / "
                "(time * B_mem)\n",
                kBatches);
    std::printf("%12s %12s %12s %12s %9s\n", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s",
                "mem_eff");
  }

  void print_row(const SizeResult& r) const {
    const double algbw = double(r.bytes) / r.time_s;
    const double busbw = algbw * busbw_factor(op_, n_);
    const double eff = traffic_bytes(op_, n_, double(r.bytes)) / (r.time_s * bmem_);
    if (cfg_.json) {
      std::printf("{\"bench\":\"comm\",\"op\":\"%s\",\"backend\":\"%s\",\"ranks\":%d,\"dtype\":\"%s\","
                  "\"bytes\":%lld,\"time_us\":%.4f,\"algbw_gbps\":%.5f,\"busbw_gbps\":%.5f,"
                  "\"mem_eff\":%.5f,\"bmem_gbps\":%.3f}\n",
                  cfg_.op.c_str(), backend_label(), n_, cfg_.dtype.c_str(),
                  static_cast<long long>(r.bytes), r.time_s * 1e6, algbw * 1e-9, busbw * 1e-9,
                  eff, bmem_ * 1e-9);
    } else {
      std::printf("%12lld %12.2f %12.3f %12.3f %9.3f\n", static_cast<long long>(r.bytes),
                  r.time_s * 1e6, algbw * 1e-9, busbw * 1e-9, eff);
    }
    std::fflush(stdout);
  }

  Communicator& c_;
  const CommBenchConfig& cfg_;
  BenchOp op_;
  DType dtype_;
  int64_t esize_;
  int n_;
  double bmem_ = 0;
  Buffers bufs_;
  std::vector<int64_t> counts_;
  std::vector<int> mpi_counts_, mpi_displs_;  // the same counts for MPI_Alltoallv
};

// "4096", "64K", "16M", "1G" (binary multiples).
int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  int64_t mult = 1;
  if (end && *end) {
    const char u = char(std::toupper(static_cast<unsigned char>(*end)));
    mult = u == 'K' ? 1 << 10 : u == 'M' ? 1 << 20 : u == 'G' ? 1 << 30 : 0;
    ++end;
    if (*end == 'i' || *end == 'I') ++end;
    if (*end == 'B' || *end == 'b') ++end;
  }
  TP_CHECK(end != s.c_str() && end && *end == '\0' && mult > 0 && v > 0, "[bench comm] size: got '",
           s, "', expected a positive byte count like 8, 64K, 16M");
  return int64_t(v) * mult;
}

}  // namespace

void run_comm_bench(const CommBenchConfig& config) {
  TP_CHECK(config.min_bytes > 0 && config.min_bytes <= config.max_bytes,
           "[bench comm] sizes: got min ", config.min_bytes, ", max ", config.max_bytes,
           ", expected 0 < min <= max");
  op_from_name(config.op);
  TP_CHECK(!config.raw_mpi || (config.backend == "mpi" && config.dtype == "f32"),
           "[bench comm] --raw-mpi needs --backend mpi and --dtype f32");
#ifndef TENSORPAR_HAVE_MPI
  TP_CHECK(!config.raw_mpi, "[bench comm] --raw-mpi: this build has no MPI");
#endif
  LaunchConfig launch;
  launch.backend = backend_from_name(config.backend);
  TP_CHECK(launch.backend != Backend::kNccl, "[bench comm] backend: nccl is not benchmarked here");
  launch.n_ranks = config.ranks;
  launch.threads_per_rank = config.threads_per_rank;
  launch_ranks(launch, [&](Communicator& world) { Sweep(world, config).run(); });
}

void add_comm_bench(CLI::App& bench) {
  auto cfg = std::make_shared<CommBenchConfig>();
  auto sizes = std::make_shared<std::pair<std::string, std::string>>("8", "64M");
  CLI::App* cmd = bench.add_subcommand(
      "comm", "Collective sweep over message sizes (nccl-tests style) with mem_eff vs memcpy");
  cmd->add_option("--backend", cfg->backend, "threads | mpi | hybrid (mpi and hybrid under mpirun)")
      ->check(CLI::IsMember({"threads", "mpi", "hybrid"}));
  cmd->add_option("--ranks", cfg->ranks, "Ranks (threads backend; mpi uses the MPI world)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--op", cfg->op, "all_reduce | all_gather | reduce_scatter | broadcast | all_to_all")
      ->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"}));
  cmd->add_option("--min-bytes", sizes->first, "Smallest message (bytes; K/M/G suffixes)");
  cmd->add_option("--max-bytes", sizes->second, "Largest message (bytes; K/M/G suffixes)");
  cmd->add_option("--dtype", cfg->dtype, "f32 | bf16 | f16 | i32 | i64")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "i32", "i64"}));
  cmd->add_option("--threads-per-rank", cfg->threads_per_rank, "Compute threads per rank (0 = cores / ranks)");
  cmd->add_option("--seconds-per-size", cfg->seconds_per_size, "Measuring time per size")
      ->check(CLI::Range(0.001, 60.0));
  cmd->add_flag("--json", cfg->json, "One JSON object per size on stdout");
  cmd->add_flag("--raw-mpi", cfg->raw_mpi,
                "mpi: time OpenMPI's blocking collectives directly (the peer baseline, no timeouts)");
  cmd->callback([cfg, sizes] {
    cfg->min_bytes = parse_bytes(sizes->first);
    cfg->max_bytes = parse_bytes(sizes->second);
    run_comm_bench(*cfg);
  });
}

}  // namespace tensorpar
