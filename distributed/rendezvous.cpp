// TCP rendezvous for the NCCL unique id (see rendezvous.h).
#include "ember/distributed/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "ember/tensor/error.h"

namespace ember::distributed {

namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

void send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    EMBER_CHECK_STATUS(k > 0, execution_failed, "rendezvous: send failed: ", std::strerror(errno));
    p += k;
    n -= size_t(k);
  }
}

void recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    EMBER_CHECK_STATUS(k > 0, execution_failed,
                       "rendezvous: the connection to rank 0 closed early (",
                       k == 0 ? "peer closed" : std::strerror(errno), ")");
    p += k;
    n -= size_t(k);
  }
}

sockaddr_in resolve(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &res);
  EMBER_CHECK(rc == 0 && res, "rendezvous: cannot resolve MASTER_ADDR '", addr,
              "': ", gai_strerror(rc));
  sockaddr_in sa = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  sa.sin_port = htons(uint16_t(port));
  return sa;
}

}  // namespace

std::string tcp_broadcast_blob(int rank, int world_size, const std::string& addr, int port,
                               const std::string& blob, std::chrono::milliseconds timeout) {
  if (world_size == 1) return blob;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (rank == 0) {
    Fd server(::socket(AF_INET, SOCK_STREAM, 0));
    EMBER_CHECK_STATUS(server.fd >= 0, execution_failed,
                       "rendezvous: socket: ", std::strerror(errno));
    int one = 1;
    ::setsockopt(server.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons(uint16_t(port));
    EMBER_CHECK_STATUS(::bind(server.fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0,
                       execution_failed, "rendezvous: rank 0 cannot listen on port ", port, ": ",
                       std::strerror(errno), "; pick another MASTER_PORT");
    EMBER_CHECK_STATUS(::listen(server.fd, world_size) == 0, execution_failed,
                       "rendezvous: listen: ", std::strerror(errno));
    for (int served = 1; served < world_size; ++served) {
      pollfd p{server.fd, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      EMBER_CHECK_STATUS(left.count() > 0 && ::poll(&p, 1, int(left.count())) == 1,
                         execution_failed, "rendezvous: rank 0 timed out on port ", port, " after ",
                         served - 1, " of ", world_size - 1,
                         " ranks connected; check that every rank started and uses "
                         "the same MASTER_ADDR/MASTER_PORT");
      Fd client(::accept(server.fd, nullptr, nullptr));
      EMBER_CHECK_STATUS(client.fd >= 0, execution_failed,
                         "rendezvous: accept: ", std::strerror(errno));
      uint32_t n = htonl(uint32_t(blob.size()));
      send_all(client.fd, reinterpret_cast<const char*>(&n), sizeof(n));
      send_all(client.fd, blob.data(), blob.size());
    }
    return blob;
  }
  const sockaddr_in sa = resolve(addr, port);
  while (true) {
    Fd s(::socket(AF_INET, SOCK_STREAM, 0));
    EMBER_CHECK_STATUS(s.fd >= 0, execution_failed, "rendezvous: socket: ", std::strerror(errno));
    if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0) {
      uint32_t n = 0;
      recv_all(s.fd, reinterpret_cast<char*>(&n), sizeof(n));
      std::string out(ntohl(n), '\0');
      recv_all(s.fd, out.data(), out.size());
      return out;
    }
    EMBER_CHECK_STATUS(std::chrono::steady_clock::now() < deadline, execution_failed,
                       "rendezvous: rank ", rank, " could not reach rank 0 at ", addr, ":", port,
                       " before the timeout (", std::strerror(errno), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace ember::distributed
