// Out-of-band notes between the processes of an MPI job about failures, on a duplicate of
// MPI_COMM_WORLD, so that a failure is reported by the survivors with the rank at fault:
// - a rank that fails outside a collective (an exception in its own code) announces it, and its
//   peers' pending collectives fail at once with its message instead of waiting for the timeout;
// - a rank whose collective timed out asks every peer whether it is there; a rank waiting in any
//   collective answers at once, so the ranks that do not answer are the dead or stalled ones;
// - before a failed job is aborted, each failing rank waits for the others that can still answer
//   to be ready to go, so that no survivor is killed before it has printed its error.
// The communicators' wait loops call service(); one channel per process (MpiRuntime owns it).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tensorpar::mpi {

class FailureChannel {
 public:
  // Takes ownership of `comm`, a duplicate of the world made for this channel alone.
  explicit FailureChannel(MPI_Comm comm);
  FailureChannel(const FailureChannel&) = delete;
  FailureChannel& operator=(const FailureChannel&) = delete;
  ~FailureChannel();

  int rank() const { return rank_; }
  // Handles the notes that arrived (answers probes, records announcements). Cheap; returns at
  // once when another thread is already doing it.
  void service();
  // The first failure a peer announced ("" when none) and its world rank (-1).
  std::string peer_failure();
  int peer_failure_rank();
  // Tells every peer that this rank failed, and why; does not wait.
  void announce(const std::string& why);
  // Asks every peer whether it is there and waits up to window_s for the answers; returns the
  // world ranks that did not answer, ascending.
  std::vector<int> unresponsive(double window_s);
  // Tells every peer this rank is about to end the job, then waits up to timeout_s until each
  // peer has said the same or is known not to answer.
  void linger(double timeout_s);

 private:
  enum Kind : int32_t { kFailed = 1, kProbe, kHere, kLeaving };
  struct Note {
    int32_t kind = 0;
    int32_t id = 0;
    char text[1016] = {};
  };
  void pump();  // service() with mu_ held
  void post_receive();
  void send(int peer, Kind kind, int32_t id, const std::string& text = "");
  void send_all(Kind kind, int32_t id, const std::string& text = "");

  std::mutex mu_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  Note in_;
  MPI_Request receive_ = MPI_REQUEST_NULL;
  std::deque<std::pair<MPI_Request, std::unique_ptr<Note>>> sends_;
  std::string failure_;
  int failure_rank_ = -1;
  int32_t probe_id_ = 0;
  std::vector<char> answered_, leaving_, silent_;
};

}  // namespace tensorpar::mpi
