// CUDA arrays and 3D batch operands for tests and probe programs: how each
// is described, whichever way the caller reaches the driver.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace tidepool::testing {

inline CUDA_ARRAY_DESCRIPTOR array_descriptor(std::size_t width, std::size_t height, CUarray_format format,
                                              unsigned channels) {
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = width;
  d.Height = height;
  d.Format = format;
  d.NumChannels = channels;
  return d;
}

// A pointer operand; a row length or layer height of 0 is the copy's own.
inline CUmemcpy3DOperand pointer_operand(CUdeviceptr p, std::size_t row_length = 0, std::size_t layer_height = 0) {
  CUmemcpy3DOperand o{};
  o.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  o.op.ptr.ptr = p;
  o.op.ptr.rowLength = row_length;
  o.op.ptr.layerHeight = layer_height;
  return o;
}

// An array operand from element (x, y) of its first layer.
inline CUmemcpy3DOperand array_operand(CUarray array, std::size_t x = 0, std::size_t y = 0) {
  CUmemcpy3DOperand o{};
  o.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  o.op.array.array = array;
  o.op.array.offset = CUoffset3D{x, y, 0};
  return o;
}

}  // namespace tidepool::testing
