// IpcExporter: the pool blocks this process shares with others
// (cuIpcGetMemHandle), and the socket other processes open them through.
//
// A handle names an export (ipc_wire.hpp); asking again for the same block
// gives the same handle, as the driver does. The first export starts the
// channel: an abstract Unix socket named by a random number and one thread
// (signals blocked) that answers on it. A connection is refused unless its
// peer runs as the same user as this process (SO_PEERCRED), and a request
// unless it carries the export's secret. Each open is its own connection,
// and holds the block (Pool::hold_for_import: on the device, and a free of it
// waits) until that process closes the handle or the connection ends (it
// exited, or an exchange failed), so another process never sees the block's
// bytes reused under it. Pages go out as file descriptors in batches of
// ipc::kFdsPerMessage, each exported, sent and closed before the next.
//
// The channel's thread reads every request; it answers closes itself and
// hands each open to one of a few open workers, because an open may wait
// (within `open_wait` of the request's arrival) for the owner's queued work,
// and one importer's wait must not hold up another's answer, or run its
// deadline from when a busy thread got to it. A connection whose open is
// with a worker is not read until the worker gives it back.
//
// Thread-safe. After fork() the child shares nothing of the parent's
// channel: it starts its own on its first export. (A forked child that
// lives on keeps copies of the sockets: an importer that exits while its
// forked children live keeps its holds until they exit too.)
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "driver/driver.hpp"
#include "runtime/ipc_wire.hpp"
#include "util/util.hpp"

namespace tidepool::runtime {

class Allocator;

class IpcExporter {
 public:
  // An open waits for the owner's queued work at most half the importer's
  // own wait for the answer (ipc::kWaitSeconds), so that a refusal reaches
  // it as one.
  static constexpr std::chrono::milliseconds kOpenWait{ipc::kWaitSeconds * 1000 / 2};
  explicit IpcExporter(const driver::Api& api, std::chrono::milliseconds open_wait = kOpenWait)
      : api_(api), open_wait_(open_wait) {}
  ~IpcExporter();
  IpcExporter(const IpcExporter&) = delete;
  IpcExporter& operator=(const IpcExporter&) = delete;

  // A handle for the live block [base, base + bytes) of `owner`'s pool.
  util::Result<CUipcMemHandle> export_block(Allocator* owner, std::uintptr_t base, std::size_t bytes,
                                            std::uint64_t buffer_id);
  // This process's channel (0 before the first export): a handle naming it
  // is this process's own.
  [[nodiscard]] std::uint64_t channel() const;

  struct Counters {
    std::uint64_t exports = 0;  // handles made
    std::uint64_t opens = 0;    // opens answered with the block's pages
    std::uint64_t refused = 0;  // connections or requests refused (wrong user, wrong secret, block gone)
    std::uint64_t holds = 0;    // holds other processes keep now
  };
  [[nodiscard]] Counters counters() const;

 private:
  struct Export {
    std::uint64_t id = 0;
    std::uint64_t secret[2] = {0, 0};
    Allocator* owner = nullptr;
    std::uintptr_t base = 0;
    std::size_t bytes = 0;
    std::uint64_t buffer_id = 0;
    std::size_t holds = 0;  // opens not yet closed: never pruned while any
  };
  struct Connection {
    int fd = -1;
    std::vector<std::uint64_t> held;  // export ids, one per open not yet closed
    bool busy = false;                // its open is with a worker, which alone touches it
  };
  struct OpenJob {
    Connection* connection = nullptr;
    ipc::Request request;
    std::chrono::steady_clock::time_point deadline;
  };
  // The open workers and what passes between them and the channel's
  // thread. On the heap, so that a forked child can leave the parent's
  // (its lock may have been held at the fork) without touching it.
  struct OpenWork {
    std::mutex lock;  // guards the rest; never held with lock_
    std::condition_variable ready;
    std::deque<OpenJob> jobs;
    std::vector<std::pair<Connection*, bool>> finished;  // given back: keep the connection?
    std::vector<std::unique_ptr<std::thread>> workers;
    std::size_t idle = 0;
    bool stopping = false;
  };
  static constexpr std::size_t kOpenWorkers = 4;

  // Starts the socket and its thread; locked.
  util::Status start_locked();
  // The thread's loop: accepts, reads requests, hands opens out, and lets
  // go of the holds of connections that end.
  void serve();
  void accept_one();
  // One request of `c`; false when the connection should end.
  bool answer(Connection& c);
  // Queues `c`'s open for a worker, starting one if none is idle; false
  // when there is no worker to take it.
  bool hand_out(Connection& c, const ipc::Request& request, std::chrono::steady_clock::time_point deadline);
  // A worker's loop: answers opens until the exporter stops.
  void work();
  // Connections the workers gave back: read again, or ended.
  void take_back_finished();
  void drop(Connection* c);
  bool answer_open(Connection& c, const ipc::Request& request, std::chrono::steady_clock::time_point deadline);
  bool answer_close(Connection& c, const ipc::Request& request);
  // The pages' file descriptors, a batch at a time; false when one could
  // not be made or sent.
  bool send_pages(int socket, const std::vector<CUmemGenericAllocationHandle>& pages);
  void release_hold(std::uint64_t export_id);
  void end_connection(Connection& c);
  // Drops exports whose blocks are gone (each checked with its pool); locked.
  void prune_locked();
  // The parent's channel after fork(): forgotten, its thread is not here.
  void forget_after_fork_locked();

  const driver::Api& api_;
  const std::chrono::milliseconds open_wait_;
  mutable std::mutex lock_;
  std::uint64_t channel_ = 0;
  int listener_ = -1;
  // A pipe that wakes the channel's thread: the destructor writes to it to
  // end the thread, a worker when it gives a connection back.
  int wake_[2] = {-1, -1};
  int pid_ = 0;  // the process that started the channel
  // A pointer so that a forked child can drop the parent's without joining it.
  std::unique_ptr<std::thread> thread_;
  std::uint64_t next_id_ = 0;
  std::unordered_map<std::uint64_t, Export> exports_;           // by id
  std::unordered_map<std::uint64_t, std::uint64_t> by_buffer_;  // buffer id -> export id
  std::size_t prune_at_ = 64;
  Counters counters_;
  std::unique_ptr<OpenWork> work_ = std::make_unique<OpenWork>();
  // Touched only by the channel's thread, but for a busy connection, which
  // its worker has. Pointers stay put while connections come and go.
  std::vector<std::unique_ptr<Connection>> connections_;
};

}  // namespace tidepool::runtime
