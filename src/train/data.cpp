// Corpus reading, tokenising, broadcasting and window sampling (counter-based, stateless).
#include "train/data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tensorpar {
namespace fs = std::filesystem;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> list_text_files(const std::string& path) {
  TP_CHECK(fs::exists(path), "[list_text_files] data path '", path, "' does not exist");
  if (!fs::is_directory(path)) return {path};
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(path)) {
    const std::string p = e.path().string();
    if (!e.is_regular_file() || ends_with(p, ".dat") || ends_with(p, ".u8")) continue;
    out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  TP_CHECK(!out.empty(), "[list_text_files] directory '", path, "' holds no text files");
  return out;
}

TokenCorpus tokenize_corpus(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                            double val_fraction, int64_t seq) {
  TP_CHECK(val_fraction >= 0 && val_fraction < 1, "[tokenize_corpus] val_fraction ", val_fraction,
           ", expected in [0, 1)");
  std::vector<int32_t> all;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    TP_CHECK(in.good(), "[tokenize_corpus] cannot read '", f, "'");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    if (!all.empty()) text = "\n\n" + text;
    const std::vector<int32_t> ids = tokenizer.encode(text, /*allow_special=*/false);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  const int64_t n = int64_t(all.size());
  const int64_t n_val = int64_t(double(n) * val_fraction);
  TP_CHECK(n - n_val > seq + 1 && (n_val == 0 || n_val > seq + 1), "[tokenize_corpus] ", n,
           " tokens (", n_val, " for validation) are too few for windows of ", seq + 1, " tokens");
  TokenCorpus c;
  c.train.assign(all.begin(), all.end() - n_val);
  c.val.assign(all.end() - n_val, all.end());
  return c;
}

void broadcast_corpus(TokenCorpus& corpus, Communicator& comm, int root) {
  if (comm.size() == 1) return;
  int64_t sizes[2] = {int64_t(corpus.train.size()), int64_t(corpus.val.size())};
  comm.broadcast(sizes, 2, DType::kI64, root);
  corpus.train.resize(size_t(sizes[0]));
  corpus.val.resize(size_t(sizes[1]));
  comm.broadcast(corpus.train.data(), sizes[0], DType::kI32, root);
  comm.broadcast(corpus.val.data(), sizes[1], DType::kI32, root);
}

void sample_windows(Tensor& tokens, Tensor& targets, std::span<const int32_t> data, int64_t B,
                    int64_t T, uint64_t seed, uint64_t stream, uint64_t index) {
  const int64_t n = int64_t(data.size());
  TP_CHECK(B >= 1 && T >= 1 && n >= T + 1, "[sample_windows] ", n, " tokens cannot give ", B,
           " windows of ", T + 1);
  tokens = Tensor::empty({B, T}, DType::kI64);
  targets = Tensor::empty({B, T}, DType::kI64);
  int64_t* x = tokens.data<int64_t>();
  int64_t* y = targets.data<int64_t>();
  const uint64_t starts = uint64_t(n - T);  // start in [0, n - T - 1]
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t h = splitmix64(
        splitmix64(splitmix64(seed ^ (stream * 0x2545F4914F6CDD1Dull)) + index) + uint64_t(b));
    const int64_t s = int64_t(h % starts);
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = data[size_t(s + t)];
      y[b * T + t] = data[size_t(s + t + 1)];
    }
  }
}

}  // namespace tensorpar
