// The util layer's one header: what the layers above may use from util.
// util knows nothing of CUDA.
#pragma once

#include "util/address_map.hpp"
#include "util/background_thread.hpp"
#include "util/host_time.hpp"
#include "util/installed_file.hpp"
#include "util/intrusive_treap.hpp"
#include "util/output_file.hpp"
#include "util/spin_lock.hpp"
#include "util/status.hpp"
#include "util/thread_counts.hpp"
#include "util/units.hpp"
#include "util/version.hpp"
