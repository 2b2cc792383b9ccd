// The importing side of tidepool's IPC (ipc_importer.hpp).
#include "runtime/ipc_importer.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "runtime/logging.hpp"

namespace tidepool::runtime {

namespace {

void close_all(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

}  // namespace

IpcImporter::~IpcImporter() {
  std::lock_guard<std::mutex> guard(lock_);
  for (const auto& [channel, fd] : connections_) ::close(fd);
}

int IpcImporter::connect_locked(std::uint64_t channel) {
  if (auto it = connections_.find(channel); it != connections_.end()) return it->second;
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const std::string name = ipc::channel_name(channel);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    ::close(fd);
    return -1;
  }
  connections_[channel] = fd;
  return fd;
}

bool IpcImporter::exchange_locked(std::uint64_t channel, const ipc::Request& request, ipc::Reply* reply,
                                  std::vector<int>* fds) {
  const int fd = connect_locked(channel);
  if (fd < 0) return false;
  bool ok = ipc::send_message(fd, &request, sizeof(request)) && ipc::receive_message(fd, reply, sizeof(*reply));
  if (ok && fds != nullptr && reply->result == CUDA_SUCCESS) {
    while (ok && fds->size() < reply->page_count) {
      std::uint32_t batch = 0;
      const std::size_t before = fds->size();
      ok = ipc::receive_message(fd, &batch, sizeof(batch), fds) && fds->size() - before == batch;
    }
  }
  if (!ok) {
    // The exporter ended or answered out of step: start afresh next time.
    ::close(fd);
    connections_.erase(channel);
    if (fds != nullptr) close_all(*fds);
  }
  return ok;
}

CUresult IpcImporter::open(const ipc::Handle& handle, unsigned flags, CUdeviceptr* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> guard(lock_);
  const Key key{handle.channel, handle.export_id};
  if (auto it = imports_.find(key); it != imports_.end()) {
    if (it->second.secret[0] != handle.secret[0] || it->second.secret[1] != handle.secret[1]) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    it->second.opens++;
    for (const auto& [pointer, k] : by_pointer_) {
      if (k.channel == key.channel && k.export_id == key.export_id) *out = pointer;
    }
    return CUDA_SUCCESS;
  }
  ipc::Request request;
  request.kind = ipc::Request::open;
  request.export_id = handle.export_id;
  request.secret[0] = handle.secret[0];
  request.secret[1] = handle.secret[1];
  ipc::Reply reply;
  std::vector<int> fds;
  if (!exchange_locked(handle.channel, request, &reply, &fds)) {
    // No such process, another user's, or it went away: the handle is no good here.
    log_warn("IPC: cannot reach the process that exported handle {:016x}/{} (pid {})", handle.channel, handle.export_id,
             handle.exporter_pid);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (reply.result != CUDA_SUCCESS) return static_cast<CUresult>(reply.result);
  Import import;
  import.channel = handle.channel;
  import.export_id = handle.export_id;
  import.secret[0] = handle.secret[0];
  import.secret[1] = handle.secret[1];
  CUdeviceptr pointer = 0;
  CUresult r = CUDA_SUCCESS;
  if (reply.is_chunk != 0) {
    CUdeviceptr chunk = 0;
    r = api_.ipcOpenMemHandle == nullptr ? CUDA_ERROR_NOT_SUPPORTED : api_.ipcOpenMemHandle(&chunk, reply.chunk, flags);
    import.chunk = chunk;
    pointer = chunk + reply.block_offset;
  } else {
    r = map_pages(reply, fds, &import, &pointer);
  }
  close_all(fds);
  if (r != CUDA_SUCCESS) {
    tell_closed_locked(import);
    return r;
  }
  import.opens = 1;
  imports_[key] = import;
  by_pointer_[pointer] = key;
  *out = pointer;
  return CUDA_SUCCESS;
}

CUresult IpcImporter::map_pages(const ipc::Reply& reply, std::vector<int>& fds, Import* import, CUdeviceptr* out) {
  if (api_.memImportFromShareableHandle == nullptr || api_.memAddressReserve == nullptr || api_.memMap == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (fds.empty() || reply.page_size == 0 || fds.size() != reply.page_count) return CUDA_ERROR_INVALID_VALUE;
  CUdevice device = 0;
  if (CUresult r = api_.ctxGetDevice(&device); r != CUDA_SUCCESS) return r;
  const std::size_t bytes = fds.size() * reply.page_size;
  CUdeviceptr base = 0;
  if (CUresult r = api_.memAddressReserve(&base, bytes, reply.page_size, 0, 0); r != CUDA_SUCCESS) return r;
  import->reserved = base;
  import->reserved_bytes = bytes;
  CUresult r = CUDA_SUCCESS;
  for (std::size_t i = 0; i < fds.size() && r == CUDA_SUCCESS; ++i) {
    CUmemGenericAllocationHandle page = 0;
    r = api_.memImportFromShareableHandle(&page, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fds[i])),
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) break;
    r = api_.memMap(base + i * reply.page_size, reply.page_size, 0, page, 0);
    // The mapping keeps the memory; the handle is not needed past it.
    (void)api_.memRelease(page);
    if (r == CUDA_SUCCESS) import->mapped_bytes += reply.page_size;
  }
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = api_.memSetAccess(base, bytes, &access, 1);
  }
  if (r != CUDA_SUCCESS) {
    unmap(*import);
    return r;
  }
  *out = base + reply.block_offset;
  return CUDA_SUCCESS;
}

void IpcImporter::unmap(const Import& import) {
  if (import.chunk != 0 && api_.ipcCloseMemHandle != nullptr) (void)api_.ipcCloseMemHandle(import.chunk);
  if (import.reserved == 0) return;
  if (import.mapped_bytes > 0) (void)api_.memUnmap(import.reserved, import.mapped_bytes);
  (void)api_.memAddressFree(import.reserved, import.reserved_bytes);
}

void IpcImporter::tell_closed_locked(const Import& import) {
  ipc::Request request;
  request.kind = ipc::Request::close;
  request.export_id = import.export_id;
  request.secret[0] = import.secret[0];
  request.secret[1] = import.secret[1];
  ipc::Reply reply;
  (void)exchange_locked(import.channel, request, &reply, nullptr);
}

bool IpcImporter::imported(CUdeviceptr pointer) const {
  std::lock_guard<std::mutex> guard(lock_);
  return by_pointer_.contains(pointer);
}

CUresult IpcImporter::close(CUdeviceptr pointer) {
  std::lock_guard<std::mutex> guard(lock_);
  auto at = by_pointer_.find(pointer);
  if (at == by_pointer_.end()) return CUDA_ERROR_INVALID_VALUE;
  auto it = imports_.find(at->second);
  if (--it->second.opens > 0) return CUDA_SUCCESS;
  // Work queued on this context may still read the block: the pages go only
  // once it is done, as the driver's own close waits.
  (void)api_.ctxSynchronize();
  unmap(it->second);
  tell_closed_locked(it->second);
  imports_.erase(it);
  by_pointer_.erase(at);
  return CUDA_SUCCESS;
}

}  // namespace tidepool::runtime
