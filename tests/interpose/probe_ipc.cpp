// Two processes sharing device memory through CUDA IPC handles, as
// torch.multiprocessing shares CUDA tensors: for the preload tests, which
// run it natively (the sim's legacy IPC) and under the preload (tidepool's
// handles), and expect the same story from both.
//
// The parent (`probe_ipc run`) makes two blocks, one whose handle is asked
// for through an interior pointer, and one smaller than a page, fills them with kernels and spawns a child
// (`probe_ipc child FD`, the same environment, the preload included) that
// talks to it over a socket pair:
//   1. the child opens both handles, checks the parent's words with a
//      kernel and writes its own over them; it exports a block of its own;
//   2. the parent checks the child's words in its blocks and the child's
//      block through the child's handle, then frees both of its blocks
//      while the child still holds them, keeps 12 MiB more live (under a
//      16 MiB budget eviction must move pages, never the blocks the child
//      maps), and churns: allocates, fills and
//      frees blocks of the same sizes under a budget;
//   3. the child checks that its view of the freed blocks still holds its
//      words (nothing was reused under it), closes them, and exits;
//      (With PROBE_CHILD_DEVICE=1 the child runs on the second GPU, one
//      process per GPU as under torch.distributed.)
//   4. a handle with a wrong secret byte, a process running as another user
//      (when the probe runs as root), and a process that opens a handle and
//      dies without closing it are refused or cleaned up.
// Under the preload the parent then waits (a second at most) until the pool
// holds nothing live: a hold that outlived its importer would keep a freed
// block live, which the test sees in the exit report.
#include <cuda.h>
#include <dlfcn.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe_linked_common.hpp"
#include "tidepool/tidepool.h"

extern char** environ;

namespace {

using probe::make_context_current;
using probe::register_word_kernels;

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t kShared = 3 * MiB + 4096;  // spans pages, not page-aligned in size
constexpr std::size_t kSmall = 96 * 1024;        // shares its page with others
constexpr std::size_t kChilds = 5 * MiB;

struct Message {
  int step = 0;
  int value = 0;
  CUipcMemHandle handles[2]{};
};

bool send(int fd, const Message& m) { return ::write(fd, &m, sizeof(m)) == static_cast<ssize_t>(sizeof(m)); }
bool receive(int fd, Message* m) {
  std::size_t got = 0;
  auto* bytes = reinterpret_cast<char*>(m);
  while (got < sizeof(*m)) {
    const ssize_t n = ::read(fd, bytes + got, sizeof(*m) - got);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

struct Kernels {
  CUfunction fill = nullptr;
  CUfunction check = nullptr;
  CUstream stream = nullptr;
  std::atomic<std::uint64_t> wrong{0};

  Kernels() {
    register_word_kernels(&fill, &check);
    PROBE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  }
  void launch(CUfunction f, CUdeviceptr p, std::size_t bytes, std::uint32_t seed) {
    auto* words = reinterpret_cast<std::uint32_t*>(p);
    std::size_t count = bytes / 4;
    std::atomic<std::uint64_t>* errors = &wrong;
    void* params[] = {&words, &count, &seed, &errors};
    PROBE_CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) == CUDA_SUCCESS);
  }
  void write(CUdeviceptr p, std::size_t bytes, std::uint32_t seed) { launch(fill, p, bytes, seed); }
  // The words of [p, p + bytes) that do not hold `seed`'s pattern.
  std::uint64_t wrong_words(CUdeviceptr p, std::size_t bytes, std::uint32_t seed) {
    const std::uint64_t before = wrong.load();
    launch(check, p, bytes, seed);
    PROBE_CHECK(cuStreamSynchronize(stream) == CUDA_SUCCESS);
    return wrong.load() - before;
  }
};

pid_t spawn_child(const char* self, const char* role, int fd) {
  const std::string fd_text = std::to_string(fd);
  char* argv[] = {const_cast<char*>(self), const_cast<char*>(role), const_cast<char*>(fd_text.c_str()), nullptr};
  pid_t pid = -1;
  PROBE_CHECK(posix_spawn(&pid, self, nullptr, nullptr, argv, environ) == 0);
  return pid;
}

int exit_status(pid_t pid) {
  int status = 0;
  PROBE_CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Under the preload: waits until device 0's pool has nothing live (the
// exporter hears of a dead importer from its socket, on its own thread).
// Natively there is no pool to ask.
void wait_until_nothing_live() {
  using GetStats = tidepool_status (*)(int, tidepool_stats*);
  auto get = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "tidepool_get_stats"));
  if (get == nullptr) return;
  for (int attempt = 0; attempt < 100; ++attempt) {
    tidepool_stats stats{};
    if (get(0, &stats) != TIDEPOOL_OK || stats.live_bytes == 0) return;
    usleep(10000);
  }
}

// The primary context of `device` made current.
void use_device(int device) {
  CUdevice handle = 0;
  CUcontext context = nullptr;
  PROBE_CHECK(cuInit(0) == CUDA_SUCCESS);
  PROBE_CHECK(cuDeviceGet(&handle, device) == CUDA_SUCCESS);
  PROBE_CHECK(cuDevicePrimaryCtxRetain(&context, handle) == CUDA_SUCCESS);
  PROBE_CHECK(cuCtxSetCurrent(context) == CUDA_SUCCESS);
}

// The importing side of steps 1 and 3, on device PROBE_CHILD_DEVICE (0 by
// default; 1 plays one process per GPU).
int child(int fd) {
  const char* device = std::getenv("PROBE_CHILD_DEVICE");
  use_device(device != nullptr ? std::atoi(device) : 0);
  Kernels k;
  Message m;
  PROBE_CHECK(receive(fd, &m) && m.step == 1);
  CUdeviceptr shared = 0;
  CUdeviceptr small = 0;
  PROBE_CHECK(cuIpcOpenMemHandle(&shared, m.handles[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
  PROBE_CHECK(cuIpcOpenMemHandle(&small, m.handles[1], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
  std::uint64_t wrong = 0;
  if (shared != 0 && small != 0) {
    wrong += k.wrong_words(shared, kShared, 11) + k.wrong_words(small, kSmall, 12);
    k.write(shared, kShared, 21);
    k.write(small, kSmall, 22);
    PROBE_CHECK(cuStreamSynchronize(k.stream) == CUDA_SUCCESS);
  }
  CUdeviceptr mine = 0;
  PROBE_CHECK(cuMemAlloc(&mine, kChilds) == CUDA_SUCCESS);
  k.write(mine, kChilds, 31);
  PROBE_CHECK(cuStreamSynchronize(k.stream) == CUDA_SUCCESS);
  Message reply;
  reply.step = 2;
  reply.value = static_cast<int>(wrong);
  PROBE_CHECK(cuIpcGetMemHandle(&reply.handles[0], mine) == CUDA_SUCCESS);
  PROBE_CHECK(send(fd, reply));

  // Step 3: the parent freed its blocks and churned; ours still hold our words.
  PROBE_CHECK(receive(fd, &m) && m.step == 3);
  std::uint64_t after_free = 0;
  if (shared != 0 && small != 0) after_free = k.wrong_words(shared, kShared, 21) + k.wrong_words(small, kSmall, 22);
  PROBE_CHECK(cuIpcCloseMemHandle(shared) == CUDA_SUCCESS);
  PROBE_CHECK(cuIpcCloseMemHandle(small) == CUDA_SUCCESS);
  PROBE_CHECK(cuIpcCloseMemHandle(small) != CUDA_SUCCESS);  // closed already
  PROBE_CHECK(cuMemFree(mine) == CUDA_SUCCESS);
  reply.step = 4;
  reply.value = static_cast<int>(after_free);
  PROBE_CHECK(send(fd, reply));
  return probe::finish("ipc child");
}

// Opens the handle it is sent and reports the result; with `as_nobody`,
// first drops to another user. `hold_and_die`: exits without closing.
int opener(int fd, bool as_nobody, bool hold_and_die) {
  if (as_nobody && (setgid(65534) != 0 || setuid(65534) != 0)) return 3;
  make_context_current();
  Message m;
  if (!receive(fd, &m)) return 4;
  CUdeviceptr p = 0;
  const CUresult r = cuIpcOpenMemHandle(&p, m.handles[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  Message reply;
  reply.step = 5;
  reply.value = static_cast<int>(r);
  send(fd, reply);
  if (hold_and_die) _exit(0);  // no close, no exit handlers: a crash as far as the exporter can tell
  if (r == CUDA_SUCCESS) PROBE_CHECK(cuIpcCloseMemHandle(p) == CUDA_SUCCESS);
  return probe::finish("ipc opener");
}

// Spawns `role`, sends it `handle`, and returns what its open returned.
int open_elsewhere(const char* self, const char* role, const CUipcMemHandle& handle, int* status) {
  int pair[2];
  PROBE_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  const pid_t pid = spawn_child(self, role, pair[1]);
  ::close(pair[1]);
  Message m;
  m.step = 5;
  m.handles[0] = handle;
  PROBE_CHECK(send(pair[0], m));
  Message reply;
  const bool answered = receive(pair[0], &reply);
  *status = exit_status(pid);
  ::close(pair[0]);
  return answered ? reply.value : -1;
}

int parent(const char* self) {
  make_context_current();
  Kernels k;
  CUdeviceptr shared = 0;
  CUdeviceptr small = 0;
  PROBE_CHECK(cuMemAlloc(&shared, kShared) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemAlloc(&small, kSmall) == CUDA_SUCCESS);
  k.write(shared, kShared, 11);
  k.write(small, kSmall, 12);
  PROBE_CHECK(cuStreamSynchronize(k.stream) == CUDA_SUCCESS);

  Message m;
  m.step = 1;
  PROBE_CHECK(cuIpcGetMemHandle(&m.handles[0], shared + 4096) == CUDA_SUCCESS);  // an interior pointer names the block
  CUipcMemHandle again{};
  PROBE_CHECK(cuIpcGetMemHandle(&again, shared) == CUDA_SUCCESS);
  const bool same_handle = std::memcmp(&again, &m.handles[0], sizeof(again)) == 0;
  const CUresult small_handle = cuIpcGetMemHandle(&m.handles[1], small);
  CUdeviceptr own = 0;
  const CUresult own_open = cuIpcOpenMemHandle(&own, m.handles[0], 0);

  int pair[2];
  PROBE_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  const pid_t pid = spawn_child(self, "child", pair[1]);
  ::close(pair[1]);
  PROBE_CHECK(send(pair[0], m));
  Message reply;
  PROBE_CHECK(receive(pair[0], &reply) && reply.step == 2);
  const int child_saw_wrong = reply.value;

  // Step 2: the child's words are in our blocks; its block opens here.
  const std::uint64_t ours_wrong = k.wrong_words(shared, kShared, 21) + k.wrong_words(small, kSmall, 22);
  CUdeviceptr childs = 0;
  std::uint64_t childs_wrong = 1;
  PROBE_CHECK(cuIpcOpenMemHandle(&childs, reply.handles[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
  if (childs != 0) {
    childs_wrong = k.wrong_words(childs, kChilds, 31);
    PROBE_CHECK(cuIpcCloseMemHandle(childs) == CUDA_SUCCESS);
  }
  // Freed while the child holds them, then the same sizes churn.
  PROBE_CHECK(cuMemFree(shared) == CUDA_SUCCESS);
  PROBE_CHECK(cuMemFree(small) == CUDA_SUCCESS);
  // More live data than a 16 MiB budget holds: under one, eviction must
  // move pages, and never the blocks the child maps.
  std::vector<CUdeviceptr> live;
  for (int i = 0; i < 3; ++i) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, 4 * MiB) != CUDA_SUCCESS) break;
    k.write(p, 4 * MiB, 60 + static_cast<std::uint32_t>(i));
    live.push_back(p);
  }
  for (int round = 0; round < 8; ++round) {
    CUdeviceptr a = 0;
    CUdeviceptr b = 0;
    if (cuMemAlloc(&a, kShared) == CUDA_SUCCESS) k.write(a, kShared, 40 + static_cast<std::uint32_t>(round));
    if (cuMemAlloc(&b, kSmall) == CUDA_SUCCESS) k.write(b, kSmall, 50 + static_cast<std::uint32_t>(round));
    PROBE_CHECK(cuStreamSynchronize(k.stream) == CUDA_SUCCESS);
    if (a != 0) PROBE_CHECK(cuMemFree(a) == CUDA_SUCCESS);
    if (b != 0) PROBE_CHECK(cuMemFree(b) == CUDA_SUCCESS);
  }
  std::uint64_t live_wrong = 0;
  for (std::size_t i = 0; i < live.size(); ++i) {
    live_wrong += k.wrong_words(live[i], 4 * MiB, 60 + static_cast<std::uint32_t>(i));
    PROBE_CHECK(cuMemFree(live[i]) == CUDA_SUCCESS);
  }
  PROBE_CHECK(live.size() == 3 && live_wrong == 0);
  m.step = 3;
  PROBE_CHECK(send(pair[0], m));
  PROBE_CHECK(receive(pair[0], &reply) && reply.step == 4);
  const int child_after_free = reply.value;
  const int child_status = exit_status(pid);
  ::close(pair[0]);

  // Step 4: a wrong secret, another user, a process that dies holding a block.
  CUdeviceptr probe_block = 0;
  PROBE_CHECK(cuMemAlloc(&probe_block, kShared) == CUDA_SUCCESS);
  CUipcMemHandle handle{};
  PROBE_CHECK(cuIpcGetMemHandle(&handle, probe_block) == CUDA_SUCCESS);
  CUipcMemHandle forged = handle;
  forged.reserved[24] = static_cast<char>(forged.reserved[24] ^ 0x5a);
  int status = 0;
  const int forged_open = open_elsewhere(self, "opener", forged, &status);
  int stranger_open = -2;
  if (geteuid() == 0) stranger_open = open_elsewhere(self, "stranger", handle, &status);
  const int dying_open = open_elsewhere(self, "dier", handle, &status);
  PROBE_CHECK(cuMemFree(probe_block) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamSynchronize(k.stream) == CUDA_SUCCESS);
  wait_until_nothing_live();

  std::fprintf(stderr,
               "ipc: same handle %d, small block %s, own open %s; child saw %d wrong, we see %llu and %llu wrong in "
               "theirs; after our free the child saw %d wrong; stranger %s, dier %s\n",
               same_handle ? 1 : 0, small_handle == CUDA_SUCCESS ? "shared" : "refused",
               own_open == CUDA_SUCCESS ? "opened" : "refused", child_saw_wrong,
               static_cast<unsigned long long>(ours_wrong), static_cast<unsigned long long>(childs_wrong),
               child_after_free, stranger_open == -2 ? "not tried" : (stranger_open == 0 ? "opened" : "refused"),
               dying_open == 0 ? "opened" : "refused");
  // The sim's legacy handles carry no secret: this is tidepool's own check.
  std::fprintf(stderr, "ipc: a forged handle was %s\n", forged_open == 0 ? "opened" : "refused");
  PROBE_CHECK(child_status == probe::kPassed);
  PROBE_CHECK(cuStreamDestroy(k.stream) == CUDA_SUCCESS);
  return probe::finish("ipc");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  const int fd = argc > 2 ? std::atoi(argv[2]) : -1;
  if (role == "run") return parent(argv[0]);
  if (role == "child") return child(fd);
  if (role == "opener") return opener(fd, false, false);
  if (role == "stranger") return opener(fd, true, false);
  if (role == "dier") return opener(fd, false, true);
  std::fprintf(stderr, "usage: probe_ipc run\n");
  return 2;
}
