// Handle encoding and the socket messages of tidepool's IPC (ipc_wire.hpp).
#include "runtime/ipc_wire.hpp"

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace tidepool::runtime::ipc {

bool decode(const CUipcMemHandle& raw, Handle* out) {
  Handle h;
  std::memcpy(static_cast<void*>(&h), &raw, sizeof(h));
  if (h.magic != kMagic || h.channel == 0 || h.export_id == 0) return false;
  *out = h;
  return true;
}

CUipcMemHandle encode(const Handle& handle) {
  CUipcMemHandle raw{};
  std::memcpy(&raw, static_cast<const void*>(&handle), sizeof(handle));
  return raw;
}

std::string channel_name(std::uint64_t channel) {
  char name[64];
  const int n =
      std::snprintf(name, sizeof(name), "%ctidepool-ipc-%016llx", '\0', static_cast<unsigned long long>(channel));
  return {name, static_cast<std::size_t>(n)};
}

bool send_message(int socket, const void* data, std::size_t bytes, const int* fds, std::size_t fd_count) {
  iovec io{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdsPerMessage)];
  if (fd_count > kFdsPerMessage) {
    errno = EINVAL;
    return false;
  }
  if (fd_count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * fd_count);
  }
  for (;;) {
    const ssize_t sent = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(bytes)) return true;
    if (sent < 0 && errno == EINTR) continue;
    return false;
  }
}

bool receive_message(int socket, void* data, std::size_t bytes, std::vector<int>* fds) {
  iovec io{data, bytes};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdsPerMessage)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got = 0;
  do {
    got = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  // A failed or empty read leaves msg_controllen as it was: nothing to walk.
  if (got <= 0) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0)) continue;
    const std::size_t count = std::min<std::size_t>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int), kFdsPerMessage);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fds != nullptr) {
        fds->push_back(fd);
      } else {
        ::close(fd);
      }
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) return false;
  return got == static_cast<ssize_t>(bytes);
}

bool plausible(const Reply& reply) {
  if (reply.is_chunk != 0) return reply.page_count == 0;
  const std::uint64_t page = reply.page_size;
  if (page == 0 || (page & (page - 1)) != 0 || page > (std::uint64_t{1} << 30)) return false;
  if (reply.block_offset >= page || reply.block_bytes == 0 || reply.block_bytes > (std::uint64_t{1} << 50))
    return false;
  const std::uint64_t pages = (reply.block_offset + reply.block_bytes + page - 1) / page;
  return reply.page_count == pages;
}

bool limit_waits(int socket) {
  timeval limit{};
  limit.tv_sec = kWaitSeconds;
  return ::setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit)) == 0 &&
         ::setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit)) == 0;
}

bool same_user(int socket) {
  ucred peer{};
  socklen_t length = sizeof(peer);
  return ::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &peer, &length) == 0 && peer.uid == ::geteuid();
}

std::uint64_t random_word() {
  std::uint64_t word = 0;
  for (int attempt = 0; attempt < 8 && word == 0; ++attempt) {
    if (::getrandom(&word, sizeof(word), 0) != static_cast<ssize_t>(sizeof(word))) word = 0;
  }
  if (word == 0) {
    // No entropy source: unique enough per process, and the peer's
    // credentials are checked regardless.
    word = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
           (static_cast<std::uint64_t>(::getpid()) << 32) ^ 0x9e3779b97f4a7c15ULL;
  }
  return word;
}

}  // namespace tidepool::runtime::ipc
