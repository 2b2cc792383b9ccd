// The exporting side of tidepool's IPC (ipc_exporter.hpp).
#include "runtime/ipc_exporter.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "runtime/allocator.hpp"
#include "runtime/logging.hpp"
#include "util/util.hpp"

namespace tidepool::runtime {

namespace {

CUresult result_of(const util::Status& s) {
  switch (s.error()) {
    case util::Error::ok: return CUDA_SUCCESS;
    case util::Error::out_of_memory: return CUDA_ERROR_OUT_OF_MEMORY;
    case util::Error::not_supported: return CUDA_ERROR_NOT_SUPPORTED;
    case util::Error::invalid_value: return CUDA_ERROR_INVALID_VALUE;
    default: return s.driver_code() != 0 ? static_cast<CUresult>(s.driver_code()) : CUDA_ERROR_UNKNOWN;
  }
}

}  // namespace

IpcExporter::~IpcExporter() {
  std::unique_lock<std::mutex> guard(lock_);
  if (thread_ == nullptr) return;
  if (pid_ != ::getpid()) {
    // The parent's threads: not in this process.
    (void)thread_.release();  // NOLINT(bugprone-unused-return-value)
    (void)work_.release();    // NOLINT(bugprone-unused-return-value)
    return;
  }
  guard.unlock();
  {
    std::lock_guard<std::mutex> guard_work(work_->lock);
    work_->stopping = true;
  }
  work_->ready.notify_all();
  const char stop = 1;
  (void)!::write(wake_[1], &stop, 1);
  thread_->join();
  // A worker mid-open finishes it first: within open_wait_ where events
  // answer the wait, and the send's own time limit (ipc::limit_waits).
  for (const auto& worker : work_->workers) worker->join();
  for (const auto& c : connections_) ::close(c->fd);
  ::close(listener_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

std::uint64_t IpcExporter::channel() const {
  std::lock_guard<std::mutex> guard(lock_);
  return pid_ == ::getpid() ? channel_ : 0;
}

IpcExporter::Counters IpcExporter::counters() const {
  std::lock_guard<std::mutex> guard(lock_);
  return counters_;
}

util::Result<CUipcMemHandle> IpcExporter::export_block(Allocator* owner, std::uintptr_t base, std::size_t bytes,
                                                       std::uint64_t buffer_id) {
  std::lock_guard<std::mutex> guard(lock_);
  if (channel_ != 0 && pid_ != ::getpid()) forget_after_fork_locked();
  if (channel_ == 0) {
    if (util::Status started = start_locked(); !started) return started;
  }
  Export* e = nullptr;
  if (auto it = by_buffer_.find(buffer_id); it != by_buffer_.end()) {
    e = &exports_[it->second];
  } else {
    if (exports_.size() >= prune_at_) prune_locked();
    Export made;
    made.id = ++next_id_;
    made.secret[0] = ipc::random_word();
    made.secret[1] = ipc::random_word();
    made.owner = owner;
    made.base = base;
    made.bytes = bytes;
    made.buffer_id = buffer_id;
    by_buffer_[buffer_id] = made.id;
    e = &(exports_[made.id] = made);
    counters_.exports++;
  }
  ipc::Handle h;
  h.magic = ipc::kMagic;
  h.channel = channel_;
  h.export_id = e->id;
  h.secret[0] = e->secret[0];
  h.secret[1] = e->secret[1];
  h.block_bytes = e->bytes;
  h.exporter_pid = static_cast<std::uint32_t>(pid_);
  h.device = owner->device();
  return ipc::encode(h);
}

void IpcExporter::prune_locked() {
  for (auto it = exports_.begin(); it != exports_.end();) {
    std::uintptr_t base = 0;
    std::size_t size = 0;
    std::uint64_t id = 0;
    const Export& e = it->second;
    const bool live = e.holds > 0 || (e.owner->pool().find_containing(e.base, &base, &size, &id) && base == e.base &&
                                      id == e.buffer_id);
    if (live) {
      ++it;
      continue;
    }
    by_buffer_.erase(e.buffer_id);
    it = exports_.erase(it);
  }
  prune_at_ = std::max<std::size_t>(64, 2 * exports_.size());
}

void IpcExporter::forget_after_fork_locked() {
  // The thread and the connections are the parent's; the fds are copies
  // this process must not use to answer for the parent.
  (void)thread_.release();  // NOLINT(bugprone-unused-return-value): not this process's to join
  // The workers are the parent's too, and their lock may have been held at
  // the fork: leave it all behind, untouched.
  (void)work_.release();  // NOLINT(bugprone-unused-return-value)
  work_ = std::make_unique<OpenWork>();
  for (const auto& c : connections_) ::close(c->fd);
  connections_.clear();
  if (listener_ >= 0) ::close(listener_);
  if (wake_[0] >= 0) ::close(wake_[0]);
  if (wake_[1] >= 0) ::close(wake_[1]);
  listener_ = wake_[0] = wake_[1] = -1;
  channel_ = 0;
  exports_.clear();
  by_buffer_.clear();
  counters_ = Counters{};
}

util::Status IpcExporter::start_locked() {
  const int listener = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (listener < 0) return {util::Error::driver_error, "IPC: cannot make a Unix socket"};
  std::uint64_t channel = 0;
  bool bound = false;
  for (int attempt = 0; attempt < 4 && !bound; ++attempt) {
    channel = ipc::random_word();
    const std::string name = ipc::channel_name(channel);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name.data(), name.size());
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    bound = ::bind(listener, reinterpret_cast<const sockaddr*>(&address), length) == 0;
  }
  if (!bound || ::listen(listener, 64) != 0 || ::pipe2(wake_, O_CLOEXEC) != 0) {
    ::close(listener);
    return {util::Error::driver_error, "IPC: cannot listen on a Unix socket"};
  }
  listener_ = listener;
  channel_ = channel;
  pid_ = ::getpid();
  thread_ = std::make_unique<std::thread>(util::start_background_thread([this] { serve(); }));
  log_info("IPC: sharing pool blocks through channel {:016x}", channel);
  return util::Status::success();
}

void IpcExporter::serve() {
  // Nothing may escape into the host process: a failure here ends only the
  // channel (opens then fail, holds taken so far stay).
  try {
    std::vector<pollfd> polled;
    std::vector<Connection*> polled_connections;
    for (;;) {
      polled.clear();
      polled_connections.clear();
      polled.push_back({wake_[0], POLLIN, 0});
      polled.push_back({listener_, POLLIN, 0});
      for (const auto& c : connections_) {
        if (c->busy) continue;
        polled.push_back({c->fd, POLLIN, 0});
        polled_connections.push_back(c.get());
      }
      if (::poll(polled.data(), polled.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (polled[0].revents != 0) {
        char bytes[64];
        (void)!::read(wake_[0], bytes, sizeof(bytes));
        {
          std::lock_guard<std::mutex> guard_work(work_->lock);
          if (work_->stopping) return;
        }
        take_back_finished();
      }
      if (polled[1].revents != 0) accept_one();
      for (std::size_t i = 2; i < polled.size(); ++i) {
        if (polled[i].revents == 0) continue;
        Connection* c = polled_connections[i - 2];
        if (!answer(*c)) drop(c);
      }
    }
  } catch (...) {
    log_error("IPC: the channel stopped on an internal error; opens of this process's handles now fail");
  }
}

void IpcExporter::accept_one() {
  const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  ucred peer{};
  socklen_t length = sizeof(peer);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.uid != ::geteuid() ||
      !ipc::limit_waits(fd)) {
    // Another user's process: no answer at all.
    ::close(fd);
    std::lock_guard<std::mutex> guard(lock_);
    counters_.refused++;
    log_warn("IPC: refused a connection from pid {} (uid {}): not this process's user", peer.pid, peer.uid);
    return;
  }
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  connections_.push_back(std::move(c));
}

bool IpcExporter::answer(Connection& c) {
  ipc::Request request;
  if (!ipc::receive_message(c.fd, &request, sizeof(request))) return false;
  if (request.kind == ipc::Request::open) {
    // The deadline runs from the request's arrival: this thread reads every
    // request as it comes, whatever the workers wait on. With no worker to
    // take it (none could be started), the open is answered here.
    const auto deadline = std::chrono::steady_clock::now() + open_wait_;
    return hand_out(c, request, deadline) || answer_open(c, request, deadline);
  }
  if (request.kind == ipc::Request::close) return answer_close(c, request);
  return false;
}

bool IpcExporter::hand_out(Connection& c, const ipc::Request& request, std::chrono::steady_clock::time_point deadline) {
  std::lock_guard<std::mutex> guard_work(work_->lock);
  if (work_->idle <= work_->jobs.size() && work_->workers.size() < kOpenWorkers) {
    try {
      // Room first and the thread last: once it runs nothing may throw, or
      // a joinable thread would be destroyed.
      work_->workers.reserve(kOpenWorkers);
      auto worker = std::make_unique<std::thread>();
      *worker = util::start_background_thread([this] { work(); });
      work_->workers.push_back(std::move(worker));
    } catch (...) {
      if (work_->workers.empty()) return false;
      log_warn("IPC: could not start another open worker; opens wait for the {} there are", work_->workers.size());
    }
  }
  c.busy = true;
  work_->jobs.push_back({&c, request, deadline});
  work_->ready.notify_one();
  return true;
}

void IpcExporter::work() {
  OpenWork& w = *work_;
  for (;;) {
    OpenJob job;
    {
      std::unique_lock<std::mutex> guard(w.lock);
      w.idle++;
      w.ready.wait(guard, [&] { return w.stopping || !w.jobs.empty(); });
      w.idle--;
      if (w.stopping) return;
      job = w.jobs.front();
      w.jobs.pop_front();
    }
    // Nothing may escape into the host process: an internal error ends
    // this open's connection (its holds let go), never the worker.
    bool keep = false;
    try {
      keep = answer_open(*job.connection, job.request, job.deadline);
    } catch (...) {
      log_error("IPC: an open failed on an internal error; its connection ends");
    }
    {
      std::lock_guard<std::mutex> guard(w.lock);
      w.finished.emplace_back(job.connection, keep);
    }
    const char done = 2;
    (void)!::write(wake_[1], &done, 1);
  }
}

void IpcExporter::take_back_finished() {
  std::vector<std::pair<Connection*, bool>> finished;
  {
    std::lock_guard<std::mutex> guard_work(work_->lock);
    finished.swap(work_->finished);
  }
  for (auto [c, keep] : finished) {
    c->busy = false;
    if (!keep) drop(c);
  }
}

void IpcExporter::drop(Connection* c) {
  end_connection(*c);
  auto it = std::find_if(connections_.begin(), connections_.end(), [&](const auto& kept) { return kept.get() == c; });
  if (it == connections_.end()) return;
  *it = std::move(connections_.back());
  connections_.pop_back();
}

bool IpcExporter::answer_open(Connection& c, const ipc::Request& request,
                              std::chrono::steady_clock::time_point deadline) {
  ipc::Reply reply;
  Export e;
  {
    std::lock_guard<std::mutex> guard(lock_);
    auto it = exports_.find(request.export_id);
    if (it == exports_.end() || it->second.secret[0] != request.secret[0] ||
        it->second.secret[1] != request.secret[1]) {
      counters_.refused++;
      reply.result = CUDA_ERROR_INVALID_VALUE;
    } else {
      e = it->second;
    }
  }
  space::AddressSpace::SharedPages pages;
  if (reply.result == CUDA_SUCCESS) {
    const util::Status held = e.owner->pool().hold_for_import(e.base, e.buffer_id, &pages, deadline);
    reply.result = result_of(held);
    std::lock_guard<std::mutex> guard(lock_);
    if (!held) {
      counters_.refused++;
    } else {
      // Held from here: the connection's end lets go, whatever happens next.
      c.held.push_back(e.id);
      exports_[e.id].holds++;
      counters_.opens++;
      counters_.holds++;
    }
  }
  if (reply.result != CUDA_SUCCESS) return ipc::send_message(c.fd, &reply, sizeof(reply));
  reply.device = e.owner->device();
  reply.block_offset = e.base - pages.first_page;
  reply.block_bytes = e.bytes;
  reply.page_size = pages.page_size;
  reply.page_count = pages.pages.size();
  reply.is_chunk = pages.is_chunk ? 1 : 0;
  reply.chunk = pages.chunk;
  return ipc::send_message(c.fd, &reply, sizeof(reply)) && send_pages(c.fd, pages.pages);
}

bool IpcExporter::send_pages(int socket, const std::vector<CUmemGenericAllocationHandle>& pages) {
  std::vector<int> fds;
  fds.reserve(std::min(pages.size(), ipc::kFdsPerMessage));
  bool ok = true;
  for (std::size_t i = 0; ok && i < pages.size(); i += ipc::kFdsPerMessage) {
    const std::size_t count = std::min(ipc::kFdsPerMessage, pages.size() - i);
    for (std::size_t p = i; ok && p < i + count; ++p) {
      int fd = -1;
      ok = api_.memExportToShareableHandle(&fd, pages[p], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS;
      if (ok) fds.push_back(fd);
    }
    const auto batch = static_cast<std::uint32_t>(fds.size());
    ok = ok && ipc::send_message(socket, &batch, sizeof(batch), fds.data(), fds.size());
    for (int fd : fds) ::close(fd);
    fds.clear();
  }
  return ok;
}

bool IpcExporter::answer_close(Connection& c, const ipc::Request& request) {
  ipc::Reply reply;
  auto it = std::find(c.held.begin(), c.held.end(), request.export_id);
  if (it == c.held.end()) {
    reply.result = CUDA_ERROR_INVALID_VALUE;
  } else {
    c.held.erase(it);
    release_hold(request.export_id);
  }
  return ipc::send_message(c.fd, &reply, sizeof(reply));
}

void IpcExporter::release_hold(std::uint64_t export_id) {
  Export e;
  {
    std::lock_guard<std::mutex> guard(lock_);
    auto it = exports_.find(export_id);
    if (it == exports_.end()) return;
    if (it->second.holds > 0) it->second.holds--;
    e = it->second;
    counters_.holds--;
  }
  e.owner->pool().release_import_hold(e.base, e.buffer_id);
}

void IpcExporter::end_connection(Connection& c) {
  for (std::uint64_t id : c.held) release_hold(id);
  c.held.clear();
  ::close(c.fd);
}

}  // namespace tidepool::runtime
