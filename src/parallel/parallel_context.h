// What a rank knows of the parallel layout: its communicators per parallel dimension, passed
// explicitly to every layer (never global state). Built by DeviceMesh from the world.
#pragma once

#include "comm/communicator.h"

namespace tensorpar {

struct ParallelContext {
  Communicator& tp;
  Communicator& dp;
  Communicator& pp;
  Communicator& ep;
};

}  // namespace tensorpar
