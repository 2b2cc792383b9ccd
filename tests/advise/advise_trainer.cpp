// advise_trainer: a training-like driver-API program for tidepool-advise's
// tests, whose device memory grows with its batch in a way known in advance.
//
//   advise_trainer --batch B [--steps N] [--layers L] [--sample-mib S] [--weights-mib W]
//                  [--kernel-ms K] [--fail-at-batch F] [--hang-at-batch H] [--no-alloc]
//
// It keeps W MiB of weights, then runs N steps. A step is bench_residency's
// (bench/layer_kernel.hpp): a forward pass allocating and keeping one
// activation of B x S MiB per layer, each launch reading the previous one;
// a backward pass in reverse allocating a gradient of the same size per
// layer, launching on its activation and the gradient above, then freeing
// both; and a stream synchronisation, as a loss read back would be. Each
// launch also gets a small workspace of its own size (4 KiB times its place
// in the step), freed after it, as cuBLAS and cuDNN calls do: without it
// every allocation of a step would have one size, and a step could not be
// told from a run of equal sizes. So at most
//     W + (L + 1) x B x S MiB + 2 MiB
// are reserved at once (the top layer's gradient beside every activation;
// the workspaces share one small-block page), and with S a multiple of the
// 2 MiB page nothing is lost to rounding. A launch names at most three
// activations' worth, so with eviction a budget holds a larger batch.
//
// Exit status: 0 after N steps; 3 when an allocation fails with
// out-of-memory (as a framework raises it); 4 for any other failed call or
// for --fail-at-batch; --hang-at-batch sleeps forever instead of training.
// Everything it says goes to stderr; stdout gets one "step N" line per step,
// for step markers.
#include <cuda.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "layer_kernel.hpp"
#include "sim/sim_control.h"

namespace {

struct Options {
  long batch = 0;
  int steps = 6;
  int layers = 4;
  double sample_mib = 2;
  double weights_mib = 16;
  double kernel_ms = 0.2;
  long fail_at_batch = 0;
  long hang_at_batch = 0;
  bool no_alloc = false;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-alloc") {
      o->no_alloc = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    char* end = nullptr;
    const double number = std::strtod(value, &end);
    if (end == value || *end != '\0' || number < 0) return false;
    if (arg == "--batch") {
      o->batch = static_cast<long>(number);
    } else if (arg == "--steps") {
      o->steps = static_cast<int>(number);
    } else if (arg == "--layers") {
      o->layers = static_cast<int>(number);
    } else if (arg == "--sample-mib") {
      o->sample_mib = number;
    } else if (arg == "--weights-mib") {
      o->weights_mib = number;
    } else if (arg == "--kernel-ms") {
      o->kernel_ms = number;
    } else if (arg == "--fail-at-batch") {
      o->fail_at_batch = static_cast<long>(number);
    } else if (arg == "--hang-at-batch") {
      o->hang_at_batch = static_cast<long>(number);
    } else {
      return false;
    }
  }
  return o->batch > 0 && o->layers > 0;
}

constexpr int kOutOfMemory = 3;
constexpr int kOtherFailure = 4;

class Trainer {
 public:
  explicit Trainer(const Options& o)
      : o_(o),
        bytes_(static_cast<std::size_t>(static_cast<double>(o.batch) * o.sample_mib * 1024 * 1024)),
        sleep_ns_(static_cast<std::uint64_t>(o.kernel_ms * 1e6)) {}

  int run() {
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (!ok(cuInit(0), "cuInit") || !ok(cuDeviceGet(&device, 0), "cuDeviceGet") ||
        !ok(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain") ||
        !ok(cuCtxSetCurrent(context), "cuCtxSetCurrent") ||
        !ok(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
      return status_;
    }
    const std::size_t sizes[] = {sizeof(std::uintptr_t), sizeof(std::uintptr_t), sizeof(std::uintptr_t),
                                 sizeof(std::size_t), sizeof(std::uint64_t)};
    if (!ok(tidepool_sim_register_kernel(&kernel_, &tidepool::bench::layer_kernel, nullptr, 5, sizes),
            "registering the layer kernel")) {
      return status_;
    }
    if (o_.no_alloc) return 0;
    CUdeviceptr weights = 0;
    if (!allocate(&weights, static_cast<std::size_t>(o_.weights_mib * 1024 * 1024))) return status_;
    for (int step = 0; step < o_.steps; ++step) {
      if (!this->step() || !ok(cuStreamSynchronize(stream_), "cuStreamSynchronize")) return status_;
      std::printf("step %d\n", step);
      std::fflush(stdout);
    }
    return ok(cuMemFree(weights), "cuMemFree") ? 0 : status_;
  }

 private:
  bool ok(CUresult r, const char* what) {
    if (r == CUDA_SUCCESS) return true;
    status_ = r == CUDA_ERROR_OUT_OF_MEMORY ? kOutOfMemory : kOtherFailure;
    std::fprintf(stderr, "advise_trainer: batch %ld: %s failed: %s (%d)\n", o_.batch, what,
                 r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "error", static_cast<int>(r));
    return false;
  }

  bool allocate(CUdeviceptr* p, std::size_t bytes) { return ok(cuMemAlloc(p, bytes), "cuMemAlloc"); }
  bool release(CUdeviceptr p) { return p == 0 || ok(cuMemFree(p), "cuMemFree"); }

  bool launch(CUdeviceptr in_a, CUdeviceptr in_b, CUdeviceptr out, std::size_t place) {
    CUdeviceptr workspace = 0;
    if (!allocate(&workspace, 4096 * (place + 1))) return false;
    std::size_t bytes = bytes_;
    std::uint64_t sleep_ns = sleep_ns_;
    void* params[] = {&in_a, &in_b, &out, &bytes, &sleep_ns};
    return ok(cuLaunchKernel(kernel_, 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr), "cuLaunchKernel") &&
           release(workspace);
  }

  bool step() {
    const auto layers = static_cast<std::size_t>(o_.layers);
    std::vector<CUdeviceptr> activation(layers, 0);
    for (std::size_t l = 0; l < layers; ++l) {
      if (!allocate(&activation[l], bytes_) || !launch(l > 0 ? activation[l - 1] : 0, 0, activation[l], l)) {
        return false;
      }
    }
    CUdeviceptr upper = 0;
    for (std::size_t l = layers; l-- > 0;) {
      CUdeviceptr gradient = 0;
      if (!allocate(&gradient, bytes_) || !launch(activation[l], upper, gradient, 2 * layers - 1 - l) ||
          !release(activation[l]) || !release(upper)) {
        return false;
      }
      upper = gradient;
    }
    return release(upper);
  }

  const Options& o_;
  std::size_t bytes_;
  std::uint64_t sleep_ns_;
  CUfunction kernel_ = nullptr;
  CUstream stream_ = nullptr;
  int status_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr, "usage: advise_trainer --batch B [--steps N] [--layers L] [--sample-mib S] ...\n");
    return 2;
  }
  if (o.fail_at_batch != 0 && o.batch >= o.fail_at_batch) {
    std::fprintf(stderr, "advise_trainer: batch %ld: Traceback: ValueError: shapes do not match\n", o.batch);
    return kOtherFailure;
  }
  if (o.hang_at_batch != 0 && o.batch >= o.hang_at_batch) {
    for (;;) ::pause();
  }
  return Trainer(o).run();
}
