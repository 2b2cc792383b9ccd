// CUDA arrays and the copies that reach them: cuArrayCreate, cuArrayDestroy,
// cuArrayGetDescriptor, cuMemcpyDtoA/AtoD/HtoA/AtoH, and
// cuMemcpy3DBatchAsync (CUDA 12.8's, with failIdx, and 13.0's _v2, each with
// its per-thread form), whose operands are pointers or arrays.
//
// An array's bytes live in device memory of the sim's own (counted against
// the device's capacity), row after row and layer after layer with no
// padding; its handle is that storage's address, which no pointer query
// answers for. Every copy to or from it is queued as a linear copy is
// (queue_copy), a row at a time, so its stream order, its capture as memcpy
// nodes and its side of the host-device link are decided as theirs are.
// Texture formats the driver packs in blocks (BC*) and layered, cubemap or
// surface arrays are not simulated: they are refused as invalid.
#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "sim.hpp"

namespace tidepool::sim {
namespace {

struct Shape {
  std::size_t width = 0;    // elements per row
  std::size_t height = 1;   // rows per layer (a 1D array has one)
  std::size_t depth = 1;    // layers
  std::size_t element = 0;  // bytes per element
  CUDA_ARRAY_DESCRIPTOR descriptor{};
  [[nodiscard]] std::size_t bytes() const { return width * height * depth * element; }
};

// Every live array by handle. Never destroyed: an array left at exit is the
// program's leak, and a copy on a worker may still look one up.
struct Arrays {
  std::mutex lock;
  std::map<std::uintptr_t, Shape> shapes;
};
Arrays& arrays() {
  static auto* all = new Arrays();
  return *all;
}

std::size_t format_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
  }
}

// Whether `a * b` fits, into `*out`.
bool times(std::size_t a, std::size_t b, std::size_t* out) { return !__builtin_mul_overflow(a, b, out); }

bool find_array(CUarray handle, Shape* shape) {
  Arrays& all = arrays();
  std::lock_guard<std::mutex> guard(all.lock);
  auto it = all.shapes.find(reinterpret_cast<std::uintptr_t>(handle));
  if (it == all.shapes.end()) return false;
  *shape = it->second;
  return true;
}

unsigned char* storage(CUarray handle) { return reinterpret_cast<unsigned char*>(handle); }

// A linear copy between a 1D array's bytes at `offset` and memory at
// `linear`, `n` bytes, on the legacy stream, the host waiting as for any
// synchronous copy (an array is device memory).
CUresult array_copy(const char* name, CUarray array, std::size_t offset, void* linear, std::size_t n, bool to_array) {
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  Shape shape;
  if (!find_array(array, &shape)) return CUDA_ERROR_INVALID_HANDLE;
  if (shape.descriptor.Height != 0 || (linear == nullptr && n > 0) || offset > shape.bytes() ||
      n > shape.bytes() - offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(nullptr, &stream); r != CUDA_SUCCESS) return r;
  unsigned char* bytes = storage(array) + offset;
  return to_array ? synchronous_copy(stream, bytes, linear, n) : synchronous_copy(stream, linear, bytes, n);
}

// One end of a 3D batch copy: where element (0, y, z) of the copy lies, and
// how far apart rows and layers are.
struct End {
  unsigned char* first = nullptr;
  std::size_t row_pitch = 0;    // bytes
  std::size_t layer_pitch = 0;  // bytes
};

// `operand` as an end of a copy of `extent` elements of `element` bytes;
// false when it is out of its array's bounds, or its pitches are below the
// extent or overflow.
bool end_of(const CUmemcpy3DOperand& operand, const CUextent3D& extent, std::size_t element, End* end) {
  if (operand.type == CU_MEMCPY_OPERAND_TYPE_POINTER) {
    const auto& p = operand.op.ptr;
    const std::size_t row = p.rowLength == 0 ? extent.width : p.rowLength;
    const std::size_t rows = p.layerHeight == 0 ? extent.height : p.layerHeight;
    if (p.ptr == 0 || row < extent.width || rows < extent.height) return false;
    if (!times(row, element, &end->row_pitch) || !times(end->row_pitch, rows, &end->layer_pitch)) return false;
    // The whole span must fit in the address space (a bad pitch is refused,
    // never a fault on the stream's worker).
    std::size_t span = 0;
    if (!times(end->layer_pitch, extent.depth, &span) || span > UINTPTR_MAX - p.ptr) return false;
    end->first = reinterpret_cast<unsigned char*>(p.ptr);
    return true;
  }
  Shape shape;
  if (!find_array(operand.op.array.array, &shape)) return false;
  const CUoffset3D& at = operand.op.array.offset;
  if (at.x > shape.width || extent.width > shape.width - at.x || at.y > shape.height ||
      extent.height > shape.height - at.y || at.z > shape.depth || extent.depth > shape.depth - at.z) {
    return false;
  }
  end->row_pitch = shape.width * shape.element;
  end->layer_pitch = end->row_pitch * shape.height;
  end->first = storage(operand.op.array.array) + at.z * end->layer_pitch + at.y * end->row_pitch + at.x * shape.element;
  return true;
}

bool valid_operand_type(CUmemcpy3DOperandType type) {
  return type == CU_MEMCPY_OPERAND_TYPE_POINTER || type == CU_MEMCPY_OPERAND_TYPE_ARRAY;
}

// The element size of `op`: 1 between pointers, else its array's (both
// arrays' alike). 0 when an array is unknown or the two differ.
std::size_t element_of(const CUDA_MEMCPY3D_BATCH_OP& op) {
  std::size_t element = 0;
  for (const CUmemcpy3DOperand* operand : {&op.src, &op.dst}) {
    if (operand->type != CU_MEMCPY_OPERAND_TYPE_ARRAY) continue;
    Shape shape;
    if (!find_array(operand->op.array.array, &shape)) return 0;
    if (element != 0 && element != shape.element) return 0;
    element = shape.element;
  }
  return element == 0 ? 1 : element;
}

// One operation of a batch, checked: its rows' ends and length.
struct Planned {
  End src;
  End dst;
  CUextent3D extent{};
  std::size_t row_bytes = 0;
  bool read_now = false;  // the source is read before the call returns
};

CUresult plan(const CUDA_MEMCPY3D_BATCH_OP& op, Planned* out) {
  const CUextent3D& extent = op.extent;
  if (extent.width == 0 || extent.height == 0 || extent.depth == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_operand_type(op.src.type) || !valid_operand_type(op.dst.type)) return CUDA_ERROR_INVALID_VALUE;
  if ((op.flags & ~static_cast<unsigned>(CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUmemcpySrcAccessOrder order = op.srcAccessOrder;
  if (order != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM && order != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
      order != CU_MEMCPY_SRC_ACCESS_ORDER_ANY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::size_t element = element_of(op);
  if (element == 0 || !times(extent.width, element, &out->row_bytes) || !end_of(op.src, extent, element, &out->src) ||
      !end_of(op.dst, extent, element, &out->dst)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  out->extent = extent;
  out->read_now = order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  return CUDA_SUCCESS;
}

// `p`'s rows as linear copies on `stream`.
CUresult queue_rows(const std::shared_ptr<Stream>& stream, const Planned& p) {
  for (std::size_t z = 0; z < p.extent.depth; ++z) {
    for (std::size_t y = 0; y < p.extent.height; ++y) {
      unsigned char* to = p.dst.first + z * p.dst.layer_pitch + y * p.dst.row_pitch;
      const unsigned char* from = p.src.first + z * p.src.layer_pitch + y * p.src.row_pitch;
      if (CUresult r = queue_copy(stream, to, from, p.row_bytes, false, p.read_now); r != CUDA_SUCCESS) return r;
    }
  }
  return CUDA_SUCCESS;
}

// cuMemcpy3DBatchAsync: every operation checked before any is queued, then
// queued in the order given (the driver promises no order among them).
// `fail_index` (v1 only): the operation that failed, or SIZE_MAX when the
// batch failed as a whole or not at all.
CUresult copy_3d_batch(const char* name, std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, std::size_t* fail_index,
                       unsigned long long flags, CUstream handle) {
  if (fail_index != nullptr) *fail_index = SIZE_MAX;
  if (CUresult r = enter_initialized(name); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || handle == CU_STREAM_LEGACY || count == 0 || ops == nullptr || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<Stream> stream;
  if (CUresult r = resolve_stream(handle, &stream); r != CUDA_SUCCESS) return r;
  std::vector<Planned> planned(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (CUresult r = plan(ops[i], &planned[i]); r != CUDA_SUCCESS) {
      if (fail_index != nullptr) *fail_index = i;
      return r;
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (CUresult r = queue_rows(stream, planned[i]); r != CUDA_SUCCESS) {
      if (fail_index != nullptr) *fail_index = i;
      return r;
    }
  }
  return CUDA_SUCCESS;
}

CUstream ptsz_stream(CUstream s) { return s == nullptr ? CU_STREAM_PER_THREAD : s; }

}  // namespace
}  // namespace tidepool::sim

using namespace tidepool::sim;  // NOLINT(google-build-using-namespace): exported C entry points below

TIDEPOOL_SIM_EXPORT CUresult cuArrayCreate(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* descriptor) {
  if (CUresult r = enter_initialized("cuArrayCreate_v2"); r != CUDA_SUCCESS) return r;
  if (current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (handle == nullptr || descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned channels = descriptor->NumChannels;
  const std::size_t format = format_bytes(descriptor->Format);
  Shape shape;
  shape.width = descriptor->Width;
  shape.height = descriptor->Height == 0 ? 1 : descriptor->Height;
  shape.element = format * channels;
  shape.descriptor = *descriptor;
  std::size_t bytes = 0;
  if (format == 0 || (channels != 1 && channels != 2 && channels != 4) || shape.width == 0 ||
      !times(shape.width, shape.element, &bytes) || !times(bytes, shape.height, &bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  std::uintptr_t base = 0;
  if (CUresult r = allocate_array_storage(bytes, &base); r != CUDA_SUCCESS) return r;
  Arrays& all = arrays();
  std::lock_guard<std::mutex> guard(all.lock);
  all.shapes[base] = shape;
  *handle = reinterpret_cast<CUarray>(base);
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuArrayDestroy(CUarray handle) {
  if (CUresult r = enter_initialized("cuArrayDestroy"); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_unsafe_call(); r != CUDA_SUCCESS) return r;
  const auto base = reinterpret_cast<std::uintptr_t>(handle);
  {
    Arrays& all = arrays();
    std::lock_guard<std::mutex> guard(all.lock);
    if (all.shapes.erase(base) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  // Like cuMemFree, destroying waits for work that may still use it.
  synchronize_all();
  return release_array_storage(base);
}

TIDEPOOL_SIM_EXPORT CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR* descriptor, CUarray handle) {
  if (CUresult r = enter_initialized("cuArrayGetDescriptor_v2"); r != CUDA_SUCCESS) return r;
  if (descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Shape shape;
  if (!find_array(handle, &shape)) return CUDA_ERROR_INVALID_HANDLE;
  *descriptor = shape.descriptor;
  return CUDA_SUCCESS;
}

TIDEPOOL_SIM_EXPORT CUresult cuMemcpyDtoA(CUarray dst, std::size_t dst_offset, CUdeviceptr src, std::size_t n) {
  return array_copy("cuMemcpyDtoA_v2", dst, dst_offset, reinterpret_cast<void*>(src), n, true);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyAtoD(CUdeviceptr dst, CUarray src, std::size_t src_offset, std::size_t n) {
  return array_copy("cuMemcpyAtoD_v2", src, src_offset, reinterpret_cast<void*>(dst), n, false);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyHtoA(CUarray dst, std::size_t dst_offset, const void* src, std::size_t n) {
  return array_copy("cuMemcpyHtoA_v2", dst, dst_offset, const_cast<void*>(src), n, true);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpyAtoH(void* dst, CUarray src, std::size_t src_offset, std::size_t n) {
  return array_copy("cuMemcpyAtoH_v2", src, src_offset, dst, n, false);
}

TIDEPOOL_SIM_EXPORT CUresult cuMemcpy3DBatchAsync_v2(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                     unsigned long long flags, CUstream s) {
  return copy_3d_batch("cuMemcpy3DBatchAsync_v2", count, ops, nullptr, flags, s);
}
TIDEPOOL_SIM_EXPORT CUresult cuMemcpy3DBatchAsync_v2_ptsz(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                          unsigned long long flags, CUstream s) {
  return copy_3d_batch("cuMemcpy3DBatchAsync_v2_ptsz", count, ops, nullptr, flags, ptsz_stream(s));
}
TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_cuMemcpy3DBatchAsync_v1(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                                  std::size_t* fail_idx, unsigned long long flags,
                                                                  CUstream s) {
  return copy_3d_batch("cuMemcpy3DBatchAsync", count, ops, fail_idx, flags, s);
}
TIDEPOOL_SIM_EXPORT CUresult tidepool_sim_cuMemcpy3DBatchAsync_v1_ptsz(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                                       std::size_t* fail_idx, unsigned long long flags,
                                                                       CUstream s) {
  return copy_3d_batch("cuMemcpy3DBatchAsync_ptsz", count, ops, fail_idx, flags, ptsz_stream(s));
}
