// The table of hooks by exported name, and by the real driver address each
// one stands in for. The real addresses are read once, on the first
// substitution, from the driver the program and tidepool share.
#include <atomic>
#include <cstring>

#include "hooks.hpp"
#include "real_symbols.hpp"

namespace tidepool::interpose {

namespace {

struct HookRow {
  const char* name;
  void* hook;
};

#define TIDEPOOL_HOOK_ROW(symbol) {#symbol, reinterpret_cast<void*>(&::symbol)},
const HookRow kDriverHooks[] = {
    TIDEPOOL_DRIVER_HOOKS(TIDEPOOL_HOOK_ROW)
    // cuda.h renames cuGetProcAddress to its _v2; both ABI names are hooked.
    {"cuGetProcAddress", reinterpret_cast<void*>(&::tidepool_cuGetProcAddress_v1)},
    {"cuStreamDestroy", reinterpret_cast<void*>(&::tidepool_cuStreamDestroy_v1)},
    {"cuStreamBeginCapture", reinterpret_cast<void*>(&::tidepool_cuStreamBeginCapture_v1)},
    {"cuStreamBeginCapture_ptsz", reinterpret_cast<void*>(&::tidepool_cuStreamBeginCapture_v1_ptsz)},
    {"cuIpcOpenMemHandle", reinterpret_cast<void*>(&::tidepool_cuIpcOpenMemHandle_v1)},
    {"cuGraphInstantiate_v2", reinterpret_cast<void*>(&::tidepool_cuGraphInstantiate_v2)},
    {"cuGraphExecUpdate", reinterpret_cast<void*>(&::tidepool_cuGraphExecUpdate_v1)},
    {"cuGraphExecKernelNodeSetParams", reinterpret_cast<void*>(&::tidepool_cuGraphExecKernelNodeSetParams_v1)},
    {"cuGetProcAddress_v2", reinterpret_cast<void*>(&::cuGetProcAddress_v2)},
    {"cuMemcpyBatchAsync", reinterpret_cast<void*>(&::tidepool_cuMemcpyBatchAsync_v1)},
    {"cuMemcpyBatchAsync_ptsz", reinterpret_cast<void*>(&::tidepool_cuMemcpyBatchAsync_v1_ptsz)},
    {"cuMemcpy3DBatchAsync", reinterpret_cast<void*>(&::tidepool_cuMemcpy3DBatchAsync_v1)},
    {"cuMemcpy3DBatchAsync_ptsz", reinterpret_cast<void*>(&::tidepool_cuMemcpy3DBatchAsync_v1_ptsz)},
    {"cuStreamWriteValue32", reinterpret_cast<void*>(&::tidepool_cuStreamWriteValue32_v1)},
    {"cuStreamWriteValue32_ptsz", reinterpret_cast<void*>(&::tidepool_cuStreamWriteValue32_v1_ptsz)},
    {"cuStreamWriteValue64", reinterpret_cast<void*>(&::tidepool_cuStreamWriteValue64_v1)},
    {"cuStreamWriteValue64_ptsz", reinterpret_cast<void*>(&::tidepool_cuStreamWriteValue64_v1_ptsz)},
    {"cuStreamWaitValue32", reinterpret_cast<void*>(&::tidepool_cuStreamWaitValue32_v1)},
    {"cuStreamWaitValue32_ptsz", reinterpret_cast<void*>(&::tidepool_cuStreamWaitValue32_v1_ptsz)},
    {"cuStreamWaitValue64", reinterpret_cast<void*>(&::tidepool_cuStreamWaitValue64_v1)},
    {"cuStreamWaitValue64_ptsz", reinterpret_cast<void*>(&::tidepool_cuStreamWaitValue64_v1_ptsz)},
    {"cuStreamBatchMemOp", reinterpret_cast<void*>(&::tidepool_cuStreamBatchMemOp_v1)},
    {"cuStreamBatchMemOp_ptsz", reinterpret_cast<void*>(&::tidepool_cuStreamBatchMemOp_v1_ptsz)},
};
#undef TIDEPOOL_HOOK_ROW

constexpr std::size_t kDriverHookCount = sizeof(kDriverHooks) / sizeof(kDriverHooks[0]);

// The real driver's address for each row of kDriverHooks.
struct RealAddresses {
  const void* address[kDriverHookCount] = {};
};

const RealAddresses& real_addresses() {
  static const RealAddresses table = [] {
    RealAddresses t;
    for (std::size_t i = 0; i < kDriverHookCount; ++i) t.address[i] = real_driver_symbol(kDriverHooks[i].name);
    return t;
  }();
  return table;
}

}  // namespace

void* hook_for_driver_symbol(const char* name) {
  if (name == nullptr || name[0] != 'c' || name[1] != 'u') return nullptr;
  for (const HookRow& row : kDriverHooks) {
    if (std::strcmp(row.name, name) == 0) return row.hook;
  }
  return nullptr;
}

void* hook_for_real_address(const void* real) {
  if (real == nullptr) return nullptr;
  const RealAddresses& table = real_addresses();
  for (std::size_t i = 0; i < kDriverHookCount; ++i) {
    if (table.address[i] == real) return kDriverHooks[i].hook;
  }
  return nullptr;
}

}  // namespace tidepool::interpose
