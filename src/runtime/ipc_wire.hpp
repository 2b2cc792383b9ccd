// IPC on the wire: what a tidepool IPC handle holds, and the messages an
// importing process and the exporting one exchange over a Unix socket.
//
// Legacy CUDA IPC (cuIpcGetMemHandle) refuses VMM memory, so a handle of a
// pool block is tidepool's own 64 bytes: a magic, the exporting process's
// channel (a random number naming its abstract Unix socket), the export's
// id and a 128-bit secret. The importer connects to that socket and asks for
// the export; the exporter checks the peer's credentials (same user), the
// secret, and that the block still lives, and answers with the block's place
// in its pages and one file descriptor per page (SCM_RIGHTS), or for a pool
// without VMM, the driver's own IPC handle of the chunk. No privilege a
// container may lack is needed (PyTorch's pidfd_getfd route needs ptrace
// rights).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tidepool::runtime::ipc {

inline constexpr std::uint64_t kMagic = 0x3143504c4f4f5044ULL;  // "DPOOLPC1" little-endian

struct Handle {
  std::uint64_t magic = 0;
  std::uint64_t channel = 0;  // the exporting process's socket
  std::uint64_t export_id = 0;
  std::uint64_t secret[2] = {0, 0};
  std::uint64_t block_bytes = 0;  // for the record (the importer maps what the exporter answers)
  std::uint32_t exporter_pid = 0;
  std::int32_t device = 0;
  std::uint64_t reserved = 0;
};
static_assert(sizeof(Handle) == sizeof(CUipcMemHandle));

// Whether `raw` is a tidepool handle (else it is the driver's own).
bool decode(const CUipcMemHandle& raw, Handle* out);
CUipcMemHandle encode(const Handle& handle);

// The socket address of a channel, in the abstract namespace (nothing on
// disk to clean up; gone with the process).
std::string channel_name(std::uint64_t channel);

// An importer's request.
struct Request {
  enum Kind : std::uint32_t { open = 1, close = 2 };
  std::uint32_t kind = 0;
  std::uint32_t unused = 0;
  std::uint64_t export_id = 0;
  std::uint64_t secret[2] = {0, 0};
};

// The exporter's answer to an open. Page file descriptors follow in batches
// (kFdsPerMessage a message) after it; to a close, only `result`.
struct Reply {
  std::int32_t result = CUDA_SUCCESS;  // a CUresult
  std::int32_t device = 0;
  std::uint64_t block_offset = 0;  // the block's start from the first page shared
  std::uint64_t block_bytes = 0;
  std::uint64_t page_size = 0;
  std::uint64_t page_count = 0;  // fds to follow (0 for a chunk)
  std::uint32_t is_chunk = 0;
  std::uint32_t unused = 0;
  CUipcMemHandle chunk{};  // the driver's handle of the whole chunk
};

inline constexpr std::size_t kFdsPerMessage = 200;  // under the kernel's SCM_MAX_FD (253)

// Whether the answer to an open describes pages a mapping can be made of: a
// page size that is a power of two up to 1 GiB, and exactly the pages the
// block's offset and size cover (a chunk: any offset, no pages).
bool plausible(const Reply& reply);

// One message of `bytes` with `fds` attached (may be empty). False on any
// error (errno set); never raises SIGPIPE.
bool send_message(int socket, const void* data, std::size_t bytes, const int* fds = nullptr, std::size_t fd_count = 0);
// One message of exactly `bytes`; received fds are appended to `fds` (when
// null, any that arrive are closed). False on error, a short message or a
// closed peer.
bool receive_message(int socket, void* data, std::size_t bytes, std::vector<int>* fds = nullptr);

// How long either side waits for the other before it gives up on the
// connection: a peer that stopped answering (or a dead exporter whose forked
// children keep its socket open) never hangs the process.
inline constexpr int kWaitSeconds = 10;
bool limit_waits(int socket);
// Whether the process at the other end runs as this process's user.
bool same_user(int socket);

// A random 64-bit number from the kernel (getrandom), never zero.
std::uint64_t random_word();

}  // namespace tidepool::runtime::ipc
