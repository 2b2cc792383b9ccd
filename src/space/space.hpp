// The space layer's one header: device virtual address space, physical pages
// on device or host, the page map, and batched map/unmap. It knows nothing of
// blocks or streams.
#pragma once

#include "space/address_space.hpp"
#include "space/reservation.hpp"
