// connection.cpp — socket lookup by address and a non-blocking liveness poll (see the header).
#include "connection.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace lio::server {

namespace {

/// The numeric host and the port of `addr`, as cpp-httplib's get_remote_ip_and_port prints them.
bool host_and_port(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  char host_buf[NI_MAXHOST];
  char port_buf[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host_buf, sizeof(host_buf),
                  port_buf, sizeof(port_buf), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  host = host_buf;
  port = std::atoi(port_buf);
  return true;
}

}  // namespace

int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;  // "." and ".."
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0)
      continue;
    if (local.ss_family != AF_INET && local.ss_family != AF_INET6) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
      continue;
    std::string local_host, peer_host;
    int lport = -1, pport = -1;
    if (!host_and_port(local, local_len, local_host, lport) || lport != local_port) continue;
    if (!host_and_port(peer, peer_len, peer_host, pport) || pport != remote_port ||
        peer_host != remote_addr)
      continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(dir);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace lio::server
