// The importing side of tidepool's IPC (ipc_importer.hpp).
#include "runtime/ipc_importer.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "runtime/logging.hpp"

namespace tidepool::runtime {

namespace {

template <typename Import>
ipc::Request request_for(ipc::Request::Kind kind, const Import& import) {
  ipc::Request request;
  request.kind = kind;
  request.export_id = import.export_id;
  request.secret[0] = import.secret[0];
  request.secret[1] = import.secret[1];
  return request;
}

}  // namespace

IpcImporter::~IpcImporter() {
  std::lock_guard<std::mutex> guard(lock_);
  for (const auto& [key, import] : imports_) ::close(import.socket);
}

int IpcImporter::connect(std::uint64_t channel) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const std::string name = ipc::channel_name(channel);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  // Whoever holds the name must be this user's process: another user's
  // could otherwise collect the secret and hand back memory of its own.
  if (!ipc::limit_waits(fd) || ::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      !ipc::same_user(fd)) {
    ::close(fd);
    return -1;
  }
  return fd;
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
  Import import;
  import.channel = handle.channel;
  import.export_id = handle.export_id;
  import.secret[0] = handle.secret[0];
  import.secret[1] = handle.secret[1];
  import.socket = connect(handle.channel);
  const ipc::Request request = request_for(ipc::Request::open, import);
  ipc::Reply reply;
  if (import.socket < 0 || !ipc::send_message(import.socket, &request, sizeof(request)) ||
      !ipc::receive_message(import.socket, &reply, sizeof(reply))) {
    // No such process, another user's, or it went away: the handle is no good here.
    log_warn("IPC: cannot reach the process that exported handle {:016x}/{} (pid {})", handle.channel, handle.export_id,
             handle.exporter_pid);
    if (import.socket >= 0) ::close(import.socket);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (reply.result != CUDA_SUCCESS || !ipc::plausible(reply)) {
    ::close(import.socket);
    return reply.result != CUDA_SUCCESS ? static_cast<CUresult>(reply.result) : CUDA_ERROR_INVALID_VALUE;
  }
  CUdeviceptr pointer = 0;
  CUresult r = CUDA_SUCCESS;
  if (reply.is_chunk != 0) {
    CUdeviceptr chunk = 0;
    r = api_.ipcOpenMemHandle == nullptr ? CUDA_ERROR_NOT_SUPPORTED : api_.ipcOpenMemHandle(&chunk, reply.chunk, flags);
    import.chunk = chunk;
    pointer = chunk + reply.block_offset;
  } else {
    r = map_pages(reply, import.socket, &import, &pointer);
  }
  if (r != CUDA_SUCCESS) {
    ::close(import.socket);  // the exporter lets go
    return r;
  }
  import.opens = 1;
  imports_[key] = import;
  by_pointer_[pointer] = key;
  *out = pointer;
  return CUDA_SUCCESS;
}

CUresult IpcImporter::map_pages(const ipc::Reply& reply, int socket, Import* import, CUdeviceptr* out) {
  if (api_.memImportFromShareableHandle == nullptr || api_.memAddressReserve == nullptr || api_.memMap == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  CUdevice device = 0;
  if (CUresult r = api_.ctxGetDevice(&device); r != CUDA_SUCCESS) return r;
  const std::size_t page = reply.page_size;
  const std::size_t bytes = reply.page_count * page;  // bounded by ipc::plausible
  CUdeviceptr base = 0;
  if (CUresult r = api_.memAddressReserve(&base, bytes, page, 0, 0); r != CUDA_SUCCESS) return r;
  import->reserved = base;
  import->reserved_bytes = bytes;
  CUresult r = CUDA_SUCCESS;
  std::vector<int> fds;
  while (r == CUDA_SUCCESS && import->mapped_bytes < bytes) {
    std::uint32_t batch = 0;
    fds.clear();
    if (!ipc::receive_message(socket, &batch, sizeof(batch), &fds) || fds.size() != batch || batch == 0 ||
        import->mapped_bytes + fds.size() * page > bytes) {
      r = CUDA_ERROR_INVALID_VALUE;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (r == CUDA_SUCCESS) {
        CUmemGenericAllocationHandle physical = 0;
        r = api_.memImportFromShareableHandle(&physical, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fds[i])),
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r == CUDA_SUCCESS) {
          r = api_.memMap(base + import->mapped_bytes, page, 0, physical, 0);
          // The mapping keeps the memory; the handle is not needed past it.
          (void)api_.memRelease(physical);
          if (r == CUDA_SUCCESS) import->mapped_bytes += page;
        }
      }
      ::close(fds[i]);
    }
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

void IpcImporter::tell_closed(const Import& import) {
  const ipc::Request request = request_for(ipc::Request::close, import);
  ipc::Reply reply;
  // The word back says the exporter has let go; without it, the end of the
  // connection tells it the same a moment later.
  if (ipc::send_message(import.socket, &request, sizeof(request))) {
    (void)ipc::receive_message(import.socket, &reply, sizeof(reply));
  }
  ::close(import.socket);
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
  tell_closed(it->second);
  imports_.erase(it);
  by_pointer_.erase(at);
  return CUDA_SUCCESS;
}

}  // namespace tidepool::runtime
