// FailureChannel: fixed-size notes, one receive always posted, sends never waited for (a dead
// peer's send may never complete; the job is aborted by then).
#include "comm/mpi/mpi_failure_channel.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace tensorpar::mpi {

namespace {
constexpr int kTag = 4242;
using Clock = std::chrono::steady_clock;
}  // namespace

FailureChannel::FailureChannel(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  answered_.assign(size_t(size_), 0);
  leaving_.assign(size_t(size_), 0);
  silent_.assign(size_t(size_), 0);
  post_receive();
}

// Pending requests on a failed job cannot be cancelled reliably: the communicator is left to
// MPI_Finalize / MPI_Abort.
FailureChannel::~FailureChannel() = default;

void FailureChannel::post_receive() {
  if (MPI_Irecv(&in_, int(sizeof(Note)), MPI_BYTE, MPI_ANY_SOURCE, kTag, comm_, &receive_) != MPI_SUCCESS)
    receive_ = MPI_REQUEST_NULL;
}

void FailureChannel::send(int peer, Kind kind, int32_t id, const std::string& text) {
  auto note = std::make_unique<Note>();
  note->kind = kind;
  note->id = id;
  std::strncpy(note->text, text.c_str(), sizeof(note->text) - 1);
  MPI_Request req;
  if (MPI_Isend(note.get(), int(sizeof(Note)), MPI_BYTE, peer, kTag, comm_, &req) == MPI_SUCCESS)
    sends_.emplace_back(req, std::move(note));
}

void FailureChannel::send_all(Kind kind, int32_t id, const std::string& text) {
  for (int p = 0; p < size_; ++p)
    if (p != rank_) send(p, kind, id, text);
}

void FailureChannel::pump() {
  while (receive_ != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_Status st;
    if (MPI_Test(&receive_, &done, &st) != MPI_SUCCESS || !done) break;
    const int src = st.MPI_SOURCE;
    const Note n = in_;
    post_receive();
    if (src < 0 || src >= size_) continue;
    switch (n.kind) {
      case kFailed:
        if (failure_.empty()) failure_ = std::string(n.text, strnlen(n.text, sizeof(n.text))), failure_rank_ = src;
        break;
      case kProbe: send(src, kHere, n.id); break;
      case kHere:
        if (n.id == probe_id_) answered_[size_t(src)] = 1;
        break;
      case kLeaving: leaving_[size_t(src)] = 1; break;
      default: break;
    }
  }
  while (!sends_.empty()) {
    int done = 0;
    if (MPI_Test(&sends_.front().first, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) break;
    sends_.pop_front();
  }
}

void FailureChannel::service() {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) pump();
}

std::string FailureChannel::peer_failure() {
  std::lock_guard lock(mu_);
  return failure_;
}

int FailureChannel::peer_failure_rank() {
  std::lock_guard lock(mu_);
  return failure_rank_;
}

void FailureChannel::announce(const std::string& why) {
  std::lock_guard lock(mu_);
  send_all(kFailed, 0, why);
  pump();
}

std::vector<int> FailureChannel::unresponsive(double window_s) {
  std::lock_guard lock(mu_);
  ++probe_id_;
  answered_.assign(size_t(size_), 0);
  answered_[size_t(rank_)] = 1;
  send_all(kProbe, probe_id_);
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(window_s));
  auto all_answered = [&] {
    for (char a : answered_)
      if (!a) return false;
    return true;
  };
  while (!all_answered() && Clock::now() < end) {
    pump();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::vector<int> out;
  for (int p = 0; p < size_; ++p)
    if (!answered_[size_t(p)]) out.push_back(p), silent_[size_t(p)] = 1;
  return out;
}

void FailureChannel::linger(double timeout_s) {
  std::lock_guard lock(mu_);
  send_all(kLeaving, 0);
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  auto all_ready = [&] {
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && !leaving_[size_t(p)] && !silent_[size_t(p)]) return false;
    return true;
  };
  while (!all_ready() && Clock::now() < end) {
    pump();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace tensorpar::mpi
