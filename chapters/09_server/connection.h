// connection.h — is the client still there? Finding a request's TCP socket and polling it.
//
// A server must stop generating for a client that has gone (a streaming client that closed
// the tab, a script killed mid-request): its sequences hold KV blocks and batch seats.
// Writing is one way to find out — the second write after the peer closed fails — but a
// request still queued or a non-streamed one writes nothing until it is done. cpp-httplib 0.11
// does not hand its handlers the connection's socket (newer versions check liveness in
// DataSink::is_writable), so we find it: the open socket whose local port and peer address
// are the request's. That 4-tuple names one TCP connection, and the socket stays open while
// the request's handler (or its content provider) runs.
#pragma once

#include <string>

namespace lio::server {

/// The file descriptor of this process's TCP socket connected from `remote_addr`:`remote_port`
/// to local port `local_port` (addresses as getnameinfo(NI_NUMERICHOST) prints them, which is
/// how cpp-httplib fills Request::remote_addr); -1 if there is none. Scans /proc/self/fd
/// (Linux); costs one getsockname/getpeername pair per open descriptor.
int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port);

/// True when the peer of connected socket `fd` has closed or reset the connection (poll
/// reports POLLRDHUP, POLLHUP or POLLERR). Never blocks; false for fd < 0 (unknown). A
/// pipelined next request (readable data) does not count as closed.
bool peer_closed(int fd);

}  // namespace lio::server
