// CallSites: the slow paths (a new caller, a caller's name).
#include "runtime/call_sites.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <memory>
#include <thread>

namespace tidepool::runtime {

std::uint16_t CallSites::find_or_claim(std::uintptr_t caller) noexcept {
  std::size_t slot = hash(caller);
  for (std::size_t probes = 0; probes < kSlots; ++probes, slot = (slot + 1) & (kSlots - 1)) {
    Slot& s = slots_[slot];
    std::uintptr_t seen = s.caller.load(std::memory_order_acquire);
    // Once the tags are gone, new callers claim no slot: the table stays at
    // most half full (a few more where threads race for the last tags), so
    // probes stay short.
    if (seen == 0 && next_tag_.load(std::memory_order_relaxed) >= kTags) return 0;
    if (seen == 0 && s.caller.compare_exchange_strong(seen, caller, std::memory_order_acq_rel)) {
      // Ours: a tag while any are left. The slot stays claimed either way,
      // so later calls from this address find it and get the same answer.
      const std::size_t t = next_tag_.fetch_add(1, std::memory_order_relaxed);
      const auto tag = static_cast<std::uint16_t>(t < kTags ? t : 0);
      if (tag != 0) callers_[tag].store(caller, std::memory_order_release);
      s.tag.store(tag, std::memory_order_release);
      return tag;
    }
    if (seen == caller) return published_tag(s);
  }
  return 0;  // every slot taken by other callers
}

std::uint16_t CallSites::published_tag(const Slot& slot) noexcept {
  for (int tries = 0; tries < 1000; ++tries) {
    const std::uint16_t t = slot.tag.load(std::memory_order_acquire);
    if (t != kUnpublished) return t;
    std::this_thread::yield();
  }
  return 0;
}

namespace {

std::string_view base_name(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool starts_with_any(std::string_view name, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view p : prefixes) {
    if (name.starts_with(p)) return true;
  }
  return false;
}

// The executable's load address, as dladdr reports it for its own code.
const void* program_base() {
  const auto phdr = static_cast<std::uintptr_t>(::getauxval(AT_PHDR));
  Dl_info info{};
  if (phdr == 0 || ::dladdr(reinterpret_cast<const void*>(phdr), &info) == 0) return nullptr;
  return info.dli_fbase;
}

// The object holding `caller`, by dladdr; false when none does.
bool object_of(std::uintptr_t caller, Dl_info* info, CallerName* name) {
  if (caller == 0) return false;
  // One byte back: a call that is its function's last instruction returns
  // to the next function's first.
  if (::dladdr(reinterpret_cast<const void*>(caller - 1), info) == 0) return false;
  name->program = info->dli_fbase != nullptr && info->dli_fbase == program_base();
  if (info->dli_fname != nullptr) name->library = std::string(base_name(info->dli_fname));
  if (name->program && name->library.empty()) name->library = "(program)";
  name->offset = caller - reinterpret_cast<std::uintptr_t>(info->dli_fbase);
  return true;
}

// The path of the file mapped at `address` in /proc/self/maps; empty when
// none is (or the table cannot be read).
std::string mapped_file_of(std::uintptr_t address) {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string table;
  std::array<char, 16384> chunk{};
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    table.append(chunk.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  // Lines: "begin-end perms offset dev inode   path".
  std::size_t at = 0;
  while (at < table.size()) {
    std::size_t end = table.find('\n', at);
    if (end == std::string::npos) end = table.size();
    const std::string_view line(table.data() + at, end - at);
    at = end + 1;
    char* rest = nullptr;
    const std::uintptr_t begin = std::strtoull(line.data(), &rest, 16);
    if (rest == nullptr || *rest != '-') continue;
    const std::uintptr_t finish = std::strtoull(rest + 1, nullptr, 16);
    if (address < begin || address >= finish) continue;
    const std::size_t path = line.find('/');
    if (path == std::string_view::npos) return {};
    std::string_view file = line.substr(path);
    constexpr std::string_view kDeleted = " (deleted)";  // the file was replaced since it was mapped
    if (file.ends_with(kDeleted)) file.remove_suffix(kDeleted.size());
    return std::string(file);
  }
  return {};
}

}  // namespace

std::string CallSites::library_of(std::uintptr_t caller) {
  if (caller == 0) return {};
  // One byte back, as object_of.
  return std::string(base_name(mapped_file_of(caller - 1)));
}


CallerName CallSites::describe(std::uintptr_t caller) {
  CallerName name;
  Dl_info info{};
  if (!object_of(caller, &info, &name)) return name;
  if (info.dli_sname != nullptr) {
    int status = 0;
    const std::unique_ptr<char, decltype(&std::free)> demangled(
        abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status), &std::free);
    name.function = status == 0 && demangled ? demangled.get() : info.dli_sname;
    constexpr std::size_t kLongest = 200;
    if (name.function.size() > kLongest) name.function = name.function.substr(0, kLongest - 3) + "...";
  }
  return name;
}

std::string_view CallSites::owner_kind(std::string_view library, bool is_program) {
  if (is_program) return "program";
  const std::string_view name = base_name(library);
  if (starts_with_any(
          name, {"libtorch", "libc10", "libcaffe2", "_C.", "libtensorflow", "_pywrap_tensorflow", "libjax",
                 "xla_extension", "libxla", "libcaffe", "libpaddle", "libmxnet", "libonnxruntime", "libtriton"})) {
    return "framework";
  }
  if (name.starts_with("libcublas")) return "cuBLAS";
  if (name.starts_with("libcudnn")) return "cuDNN";
  if (name.starts_with("libnccl")) return "NCCL";
  if (starts_with_any(name, {"libcufft", "libcusparse", "libcusolver", "libcurand", "libnvrtc", "libnvjpeg",
                             "libcutensor", "libnpp", "libcutlass", "libnvinfer", "libcufile"})) {
    return "CUDA library";
  }
  if (name.starts_with("libcudart")) return "CUDA runtime";
  if (name.starts_with("libtidepool")) return "tidepool";
  // Shared objects are named *.so*; a name without is an executable's (a
  // trace's Owner column gives names alone).
  if (!name.empty() && name.find(".so") == std::string_view::npos) return "program";
  return "other";
}

}  // namespace tidepool::runtime
