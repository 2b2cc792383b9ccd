// CUDA IPC on pool memory: which side answers each call (ipc_sharing.hpp).
#include "runtime/ipc_sharing.hpp"

#include "runtime/allocator.hpp"

namespace tidepool::runtime {

std::optional<CUresult> IpcSharing::get_handle(CUipcMemHandle* handle, CUdeviceptr address) {
  const auto at = static_cast<std::uintptr_t>(address);
  Allocator* owner = segment_owner_(at);
  if (owner == nullptr) return std::nullopt;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const space::AddressSpace& space = owner->space();
  if (space.uses_vmm() && !space.capabilities().posix_fd_handles) return CUDA_ERROR_NOT_SUPPORTED;
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  std::uint64_t buffer_id = 0;
  // Any address inside a block names the block, as the driver's handle
  // names the whole allocation.
  if (!owner->pool().find_containing(at, &base, &bytes, &buffer_id)) return CUDA_ERROR_INVALID_VALUE;
  auto made = exporter_.export_block(owner, base, bytes, buffer_id);
  if (!made) return made.status().error() == util::Error::not_supported ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_UNKNOWN;
  *handle = made.value();
  return CUDA_SUCCESS;
}

std::optional<CUresult> IpcSharing::open(CUdeviceptr* out, const CUipcMemHandle& handle, unsigned flags) {
  ipc::Handle decoded;
  if (!ipc::decode(handle, &decoded)) return std::nullopt;
  // The driver refuses to open a handle in the process that made it.
  if (decoded.channel == exporter_.channel()) return CUDA_ERROR_INVALID_CONTEXT;
  return importer_.open(decoded, flags, out);
}

std::optional<CUresult> IpcSharing::close(CUdeviceptr pointer) {
  if (!importer_.imported(pointer)) return std::nullopt;
  return importer_.close(pointer);
}

}  // namespace tidepool::runtime
