// Modules: cuModuleLoadData, cuModuleGetFunction, cuModuleUnload, and the
// kernels the sim can run from them.
//
// The sim cannot execute device code. It loads a fatbin (anything else is
// CUDA_ERROR_INVALID_IMAGE, which is what a driver says of bytes that are not
// an image) and runs the kernels it names that the sim knows by name:
// tidepool's own (kernels/kernels.hpp), through their host reference. A name
// it does not know is CUDA_ERROR_NOT_FOUND, as a name missing from the image
// is. A reference kernel takes the grid it was launched with, checks its
// device may touch the memory it reads and writes, at the alignment of the
// kernel's loads and stores, and faults as a GPU's kernel would otherwise
// (CUDA_ERROR_ILLEGAL_ADDRESS or CUDA_ERROR_MISALIGNED_ADDRESS, sticky); the
// prefixes that say where its payloads lie are checked before they are read. Where
// a GPU's kernel would write past what it was meant to (a pack whose offsets
// are not the stream's), the sim cannot tell where those bytes would land:
// it faults rather than write them. It takes the time a GPU would: its device bytes at
// kReferenceDeviceGbps and the bytes it moves between device and host memory at the
// copy bandwidth (tidepool_sim_set_copy_gbps), which count as copied bytes.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "kernels/kernels.hpp"
#include "sim/sim.hpp"

namespace tidepool::sim {

namespace codec = tidepool::kernels;

// The memory a reference kernel reaches: what its access check and its
// time are made of.
struct ReferenceRegion {
  std::uintptr_t begin = 0;
  std::uint64_t span = 0;   // the range it may touch
  std::uint64_t bytes = 0;  // the bytes it moves there
  bool write = false;
  std::uint32_t align = 1;  // of the kernel's widest access there: a begin off it faults
  bool stray = false;       // a write the kernel was not meant to make: the sim faults
};
// What a call of a reference kernel does. Listing its regions reads the
// prefixes that place its payloads, which are device-reachable memory like
// the rest: they are checked before the listing reads them, so that a
// kernel whose prefix is not mapped faults as on a GPU instead of killing
// the process.
enum class Pass {
  prefixes,  // list only the prefixes the listing reads (reading no memory)
  regions,   // list every region it would reach (reading the prefixes)
  run,       // list them, and run
};
using ReferenceRun = void (*)(void** params, const std::array<unsigned, 3>& grid, std::vector<ReferenceRegion>* regions,
                              Pass pass);

namespace {

// A GPU's memory bandwidth, in GB/s: an H100's is over 3000.
constexpr double kReferenceDeviceGbps = 2000;
constexpr std::uint32_t kFatbinMagic = 0xBA55ED50U;

// The bytes a reference kernel reached, for its time and the copy counters.
struct ReferenceTraffic {
  std::uint64_t device = 0;   // device memory
  std::uint64_t to_host = 0;  // written to host memory
  std::uint64_t to_device = 0;
};

// Page `page` of the launch; a page past the launch's count (a grid taller
// than it) has no chunks, as the kernels skip it.
codec::PageTask reference_task(void** params, unsigned page) {
  codec::PageTasks tasks;
  std::memcpy(&tasks, params[0], sizeof(tasks));
  if (page >= tasks.count || page >= codec::kMaxTasks) return {};
  return tasks.page[page];
}

std::uint32_t reference_offset(std::uint64_t prefix, std::uint32_t chunk) {
  std::uint32_t at = 0;
  std::memcpy(&at, reinterpret_cast<const void*>(prefix + codec::offsets_at() + std::uint64_t{chunk} * 4U), sizeof(at));
  return at;
}

void report_malformed_stream(const codec::PageTask& task, std::uint32_t chunk) {
  static std::atomic<bool> reported{false};
  if (!reported.exchange(true)) {
    std::fprintf(stderr, "tidepool sim: tidepool_zvc_unpack: chunk %u of the stream at 0x%llx is malformed\n", chunk,
                 static_cast<unsigned long long>(task.stream));
  }
}

// The first chunk offset in the prefix at `prefix_at` that places a payload
// off a 4-byte word, before the payloads, past `end` or before the chunk
// ahead of it; nothing when every chunk is in place.
std::optional<std::uint32_t> first_misplaced_offset(std::uint64_t prefix_at, std::uint32_t chunks,
                                                    std::uint32_t payloads, std::uint32_t end) {
  std::uint32_t last = payloads;
  for (std::uint32_t chunk = 0; chunk <= chunks; ++chunk) {
    const std::uint32_t at = reference_offset(prefix_at, chunk);
    if (at % 4 != 0 || at < last || at > end) return at;
    last = at;
  }
  return std::nullopt;
}

// A fault the listing found before the kernel ran: counted, the first
// reported, and the kernel skipped, as a faulting GPU kernel's later work is.
void kernel_fault(CUresult code, std::uintptr_t at, const char* why) {
  State& s = state();
  auto& count = code == CUDA_ERROR_MISALIGNED_ADDRESS ? s.misaligned_faults : s.access_faults;
  if (count.fetch_add(1) == 0) {
    std::fprintf(
        stderr, "tidepool sim: a tidepool kernel reaches %#llx, %s: on a GPU it faults (%s, sticky)\n",
        static_cast<unsigned long long>(at), why,
        code == CUDA_ERROR_MISALIGNED_ADDRESS ? "CUDA_ERROR_MISALIGNED_ADDRESS" : "CUDA_ERROR_ILLEGAL_ADDRESS");
  }
}

void report_overrun(const codec::PageTask& task, std::uint32_t chunk) {
  State& s = state();
  if (s.access_faults.fetch_add(1) == 0) {
    std::fprintf(stderr,
                 "tidepool sim: tidepool_zvc_pack: chunk %u's payload is longer than the room its offsets give it "
                 "in the stream at 0x%llx (offsets planned from other counts): on a GPU it writes over what "
                 "follows; the sim faults (CUDA_ERROR_ILLEGAL_ADDRESS, sticky)\n",
                 chunk, static_cast<unsigned long long>(task.stream));
  }
}

// Each kernel lists one region per page and stream it reaches (not one per
// chunk: each region costs the sim a lookup under its lock).
void reference_count_kernel(void** params, const std::array<unsigned, 3>& grid, std::vector<ReferenceRegion>* regions,
                            Pass pass) {
  if (pass == Pass::prefixes) return;  // its regions follow from the launch alone
  const bool run = pass == Pass::run;
  std::uint32_t stride = 0;
  std::memcpy(&stride, params[1], sizeof(stride));
  for (unsigned page = 0; page < grid[1]; ++page) {
    const codec::PageTask task = reference_task(params, page);
    std::uint32_t sampled = 0;
    for (unsigned x = 0; x < grid[0] && std::uint64_t{x} * stride < task.chunks; ++x) ++sampled;
    if (sampled == 0) continue;
    // 16-byte loads of the page, 4-byte stores of the counts.
    regions->push_back({static_cast<std::uintptr_t>(task.device), std::uint64_t{task.chunks} * codec::kChunkBytes,
                        std::uint64_t{sampled} * codec::kChunkBytes, false, 16});
    regions->push_back(
        {static_cast<std::uintptr_t>(task.table), std::uint64_t{task.chunks} * 4, sampled * 4ULL, true, 4});
    for (std::uint32_t x = 0; run && x < sampled; ++x) {
      const std::uint64_t chunk = std::uint64_t{x} * stride;
      const std::uint32_t word =
          codec::reference_count(reinterpret_cast<const void*>(task.device + chunk * codec::kChunkBytes));
      std::memcpy(reinterpret_cast<void*>(task.table + chunk * 4), &word, sizeof(word));
    }
  }
}

void reference_pack_kernel(void** params, const std::array<unsigned, 3>& grid, std::vector<ReferenceRegion>* regions,
                           Pass pass) {
  for (unsigned page = 0; page < grid[1]; ++page) {
    const codec::PageTask task = reference_task(params, page);
    const std::uint32_t chunks = std::min<std::uint32_t>(task.chunks, grid[0]);
    if (chunks == 0) continue;
    const auto c = static_cast<codec::Codec>(task.codec);
    const std::uint32_t prefix = codec::payloads_at(task.chunks);
    regions->push_back({static_cast<std::uintptr_t>(task.table), prefix, prefix, false, 4});
    if (pass == Pass::prefixes) continue;
    const std::uint32_t end = reference_offset(task.table, chunks);
    regions->push_back({static_cast<std::uintptr_t>(task.device), std::uint64_t{chunks} * codec::kChunkBytes,
                        std::uint64_t{chunks} * codec::kChunkBytes, false, codec::element_bytes(c)});
    regions->push_back({static_cast<std::uintptr_t>(task.stream), end, end, true, 4});
    // Each chunk's payload is stored in 4-byte words at its offset.
    if (const auto at = first_misplaced_offset(task.table, chunks, prefix, end)) {
      // Off a word: misaligned; on one but out of place: a stray write.
      const bool aligned = *at % 4 == 0;
      regions->push_back({static_cast<std::uintptr_t>(task.stream) + *at, 4, 0, true, aligned ? 1U : 4U, aligned});
    }
    if (pass != Pass::run) continue;
    std::memcpy(reinterpret_cast<void*>(task.stream), reinterpret_cast<const void*>(task.table), prefix);
    std::array<unsigned char, codec::payload_bytes(codec::Codec::zero16, codec::kChunkBytes / 2)> payload{};
    for (std::uint32_t chunk = 0; chunk < chunks; ++chunk) {
      const std::uintptr_t from = task.device + std::uint64_t{chunk} * codec::kChunkBytes;
      const std::uint32_t at = reference_offset(task.table, chunk);
      const std::uint32_t length = codec::reference_pack(c, reinterpret_cast<const void*>(from), payload.data());
      if (length > reference_offset(task.table, chunk + 1) - at) {
        // Offsets from counts of other data: the GPU's kernel would write
        // over the next chunk's payload or past the stream. The sim stops
        // here; what it wrote before is in the stream's own bytes.
        report_overrun(task, chunk);
        return;
      }
      std::memcpy(reinterpret_cast<void*>(task.stream + at), payload.data(), length);
    }
  }
}

void reference_unpack_kernel(void** params, const std::array<unsigned, 3>& grid, std::vector<ReferenceRegion>* regions,
                             Pass pass) {
  for (unsigned page = 0; page < grid[1]; ++page) {
    const codec::PageTask task = reference_task(params, page);
    const std::uint32_t chunks = std::min<std::uint32_t>(task.chunks, grid[0]);
    if (chunks == 0) continue;
    const auto c = static_cast<codec::Codec>(task.codec);
    if (pass == Pass::prefixes) {
      const std::uint32_t prefix = codec::payloads_at(chunks);
      regions->push_back({static_cast<std::uintptr_t>(task.stream), prefix, prefix, false, 4});
      continue;
    }
    const std::uint32_t end = reference_offset(task.stream, chunks);
    regions->push_back({static_cast<std::uintptr_t>(task.stream), end, end, false, 4});
    regions->push_back({static_cast<std::uintptr_t>(task.device), std::uint64_t{chunks} * codec::kChunkBytes,
                        std::uint64_t{chunks} * codec::kChunkBytes, true, codec::element_bytes(c)});
    // Each chunk's payload is read in 4-byte words from its offset.
    for (std::uint32_t chunk = 0; chunk <= chunks; ++chunk) {
      if (const std::uint32_t at = reference_offset(task.stream, chunk); at % 4 != 0) {
        regions->push_back({static_cast<std::uintptr_t>(task.stream) + at, 4, 0, false, 4});
        break;
      }
    }
    for (std::uint32_t chunk = 0; pass == Pass::run && chunk < chunks; ++chunk) {
      const std::uintptr_t to = task.device + std::uint64_t{chunk} * codec::kChunkBytes;
      const std::uint32_t at = reference_offset(task.stream, chunk);
      const std::uint32_t length = reference_offset(task.stream, chunk + 1) - at;
      if (!codec::reference_unpack(c, reinterpret_cast<const void*>(task.stream + at), length,
                                   reinterpret_cast<void*>(to))) {
        report_malformed_stream(task, chunk);
      }
    }
  }
}

struct KnownKernel {
  const char* name;
  ReferenceRun run;
  std::vector<std::size_t> param_sizes;
};

const std::vector<KnownKernel>& known_kernels() {
  static const std::vector<KnownKernel> known = {
      {codec::kCountKernel, reference_count_kernel, {sizeof(codec::PageTasks), sizeof(std::uint32_t)}},
      {codec::kPackKernel, reference_pack_kernel, {sizeof(codec::PageTasks)}},
      {codec::kUnpackKernel, reference_unpack_kernel, {sizeof(codec::PageTasks)}},
  };
  return known;
}

}  // namespace

struct ReferenceKernel {
  ReferenceRun run = nullptr;
};

namespace {

// The touches of `regions`, and the bytes they move into `traffic`; false,
// with the fault counted, where one is off its alignment or a stray write.
bool touches_of(const std::vector<ReferenceRegion>& regions, std::vector<State::Touch>* touches,
                ReferenceTraffic* traffic) {
  touches->reserve(regions.size());
  for (const ReferenceRegion& r : regions) {
    if (r.align > 1 && r.begin % r.align != 0) {
      kernel_fault(CUDA_ERROR_MISALIGNED_ADDRESS, r.begin, "an access off its alignment");
      return false;
    }
    if (r.stray) {
      kernel_fault(CUDA_ERROR_ILLEGAL_ADDRESS, r.begin, "a pack offset outside its stream's payloads");
      return false;
    }
    touches->push_back({r.begin, r.begin + r.span, r.write});
    if (traffic == nullptr) continue;
    if (!host_located(r.begin)) {
      traffic->device += r.bytes;
    } else if (r.write) {
      traffic->to_host += r.bytes;
    } else {
      traffic->to_device += r.bytes;
    }
  }
  return true;
}

}  // namespace

void run_reference(const ReferenceKernel& kernel, void** params, const std::array<unsigned, 3>& grid, int device) {
  const std::int64_t start = now_ns();
  std::vector<ReferenceRegion> regions;
  kernel.run(params, grid, &regions, Pass::prefixes);
  std::vector<State::Touch> prefixes;
  if (!touches_of(regions, &prefixes, nullptr) || !device_may_touch(device, prefixes)) return;
  {
    // Held while the listing reads them: an unmap meanwhile is a fault,
    // not a read of nothing. Released before the kernel registers its own
    // regions (the prefixes among them), so that one unmap is one fault.
    std::optional<Running> listing;
    if (!prefixes.empty()) {
      listing.emplace(prefixes, "kernel of tidepool's");
      if (!listing->reachable()) return;
    }
    regions.clear();
    kernel.run(params, grid, &regions, Pass::regions);
    if (listing && listing->hit().load()) return;  // faulted: what it listed was read from scratch
  }
  std::vector<State::Touch> touches;
  ReferenceTraffic traffic;
  if (!touches_of(regions, &touches, &traffic) || !device_may_touch(device, touches)) return;
  {
    const Running running(touches, "kernel of tidepool's");
    if (!running.reachable()) return;
    regions.clear();
    kernel.run(params, grid, &regions, Pass::run);
  }
  State& s = state();
  s.copied_to_host.fetch_add(traffic.to_host);
  s.copied_to_device.fetch_add(traffic.to_device);
  double ns = static_cast<double>(traffic.device) / kReferenceDeviceGbps;
  if (const double gbps = s.copy_gbps.load(); gbps > 0) {
    ns += static_cast<double>(traffic.to_host + traffic.to_device) / gbps;
  }
  const std::int64_t due = start + static_cast<std::int64_t>(std::min(ns, 3.2e18));
  if (const std::int64_t left = due - now_ns(); left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
}

}  // namespace tidepool::sim

using namespace tidepool::sim;

TIDEPOOL_SIM_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (CUresult r = enter_initialized("cuModuleLoadData"); r != CUDA_SUCCESS) return r;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof(magic));
  if (magic != kFatbinMagic) return CUDA_ERROR_INVALID_IMAGE;
  auto m = std::make_unique<Module>();
  m->context = context;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  *module = reinterpret_cast<CUmodule>(m.get());
  s.modules[m.get()] = std::move(m);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (CUresult r = enter_initialized("cuModuleGetFunction"); r != CUDA_SUCCESS) return r;
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.modules.find(reinterpret_cast<Module*>(module));
  if (it == s.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  Module& m = *it->second;
  if (auto f = m.functions.find(name); f != m.functions.end()) {
    *function = reinterpret_cast<CUfunction>(f->second);
    return CUDA_SUCCESS;
  }
  for (const KnownKernel& known : known_kernels()) {
    if (std::strcmp(known.name, name) != 0) continue;
    static std::unordered_map<ReferenceRun, std::unique_ptr<ReferenceKernel>> references;  // under s.lock
    auto& reference = references[known.run];
    if (!reference) reference = std::make_unique<ReferenceKernel>(ReferenceKernel{known.run});
    auto k = std::make_unique<Kernel>();
    k->reference = reference.get();
    std::size_t offset = 0;
    for (const std::size_t size : known.param_sizes) {
      const std::size_t align = size >= 8 ? 8 : size;
      offset = (offset + align - 1) / align * align;
      k->offsets.push_back(offset);
      k->sizes.push_back(size);
      offset += size;
    }
    m.functions[name] = k.get();
    *function = reinterpret_cast<CUfunction>(k.get());
    s.kernels[k.get()] = std::move(k);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

TIDEPOOL_SIM_EXPORT CUresult cuModuleUnload(CUmodule module) {
  if (CUresult r = enter_initialized("cuModuleUnload"); r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard<std::mutex> guard(s.lock);
  auto it = s.modules.find(reinterpret_cast<Module*>(module));
  if (it == s.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  // Its functions' handles stop working; their records stay, as work
  // already queued still runs them.
  for (auto& [name, kernel] : it->second->functions) kernel->unloaded.store(true);
  s.modules.erase(it);
  return CUDA_SUCCESS;
}
