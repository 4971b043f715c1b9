// A sequence's sampling state: its draws follow its seed, its history holds the prompt for the
// repetition penalty only and counts every accepted token.
#include "infer/sequence_sampler.h"

#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using Counts = std::vector<std::pair<int32_t, int32_t>>;

TEST(SequenceSampler, DrawsFollowTheSeed) {
  const SamplingParams p{.temperature = 0.9f, .seed = 42};
  SequenceSampler a(p, {}), b(p, {}), other({.temperature = 0.9f, .seed = 43}, {});
  bool differs = false;
  for (int i = 0; i < 50; ++i) {
    const double u = a.next_row().u;
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    EXPECT_EQ(u, b.next_row().u) << "draw " << i;  // same seed, same stream
    differs |= u != other.next_row().u;
  }
  EXPECT_TRUE(differs);
  // Greedy rows draw nothing.
  EXPECT_EQ(SequenceSampler({.seed = 42}, {}).next_row().u, 0.0);
}

TEST(SequenceSampler, HistoryHoldsWhatThePenaltiesNeed) {
  const std::vector<int32_t> prompt = {5, 9, 5, 2};
  // Repetition: the prompt's distinct ids at count 0, then generated tokens counted.
  SequenceSampler rep({.repetition_penalty = 1.3f}, prompt);
  EXPECT_EQ(rep.next_row().counts, (Counts{{2, 0}, {5, 0}, {9, 0}}));
  rep.accept(9);
  rep.accept(7);
  rep.accept(9);
  EXPECT_EQ(rep.next_row().counts, (Counts{{2, 0}, {5, 0}, {7, 1}, {9, 2}}));
  // Frequency / presence only: the prompt is not listed.
  SequenceSampler freq({.frequency_penalty = 0.5f}, prompt);
  EXPECT_TRUE(freq.next_row().counts.empty());
  freq.accept(3);
  freq.accept(3);
  EXPECT_EQ(freq.next_row().counts, (Counts{{3, 2}}));
  // No penalties: no history is sent.
  SequenceSampler plain({.temperature = 1}, prompt);
  plain.accept(3);
  EXPECT_TRUE(plain.next_row().counts.empty());
  EXPECT_EQ(plain.next_row(4).top_logprobs, 4);
}

TEST(SequenceSampler, RejectsBadParams) {
  EXPECT_THROW(SequenceSampler({.temperature = -1}, {}), Error);
  EXPECT_THROW(SequenceSampler({.repetition_penalty = -1}, {}), Error);
}

}  // namespace
}  // namespace tensorpar
