// Telling whether an HTTP client is still connected. cpp-httplib 0.11 hands a handler no socket,
// so the handler finds its connection's socket by the addresses httplib does give it, and peeks.
#pragma once

#include <string>

namespace tensorpar {

// The fd of this process's accepted TCP socket whose peer is remote_addr:remote_port (as
// httplib spells the address: numeric host) and whose local port is local_port; -1 when none.
// Valid while the handler runs: httplib closes the socket only after the response is written.
int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port);

// True when the peer closed or reset the connection. Consumes nothing, so a pipelined next
// request stays readable. fd < 0: false (unknown, assume connected).
bool peer_closed(int fd);

}  // namespace tensorpar
