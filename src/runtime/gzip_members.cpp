// See gzip_members.hpp.
#include "runtime/gzip_members.hpp"

#include <dlfcn.h>
#include <zlib.h>

#include <cerrno>

namespace tidepool::runtime {

// The zlib entry points used, found with dlsym in the library dlopen gave.
// Only the z_stream layout and the constants come from zlib.h.
struct GzipMembers::Zlib {
  using DeflateInit2 = int (*)(z_streamp, int, int, int, int, int, const char*, int);
  using Deflate = int (*)(z_streamp, int);
  using DeflateReset = int (*)(z_streamp);
  using DeflateEnd = int (*)(z_streamp);
  using DeflateBound = unsigned long (*)(z_streamp, unsigned long);  // NOLINT(google-runtime-int): zlib's uLong

  void* handle = nullptr;
  DeflateInit2 init = nullptr;
  Deflate deflate = nullptr;
  DeflateReset reset = nullptr;
  DeflateEnd end = nullptr;
  DeflateBound bound = nullptr;
  z_stream stream{};
  bool initialised = false;

  ~Zlib() {
    if (initialised) end(&stream);
    if (handle != nullptr) ::dlclose(handle);
  }
};

util::Result<std::unique_ptr<GzipMembers>> GzipMembers::create(std::size_t max_input) {
  auto zlib = std::make_unique<Zlib>();
  zlib->handle = ::dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
  if (zlib->handle == nullptr) {
    return util::Status(util::Error::io_error, "a .gz trace needs zlib (libz.so.1), which could not be loaded");
  }
  // Names that do not begin with "cu": the preload's dlsym passes them
  // straight to libc's.
  zlib->init = reinterpret_cast<Zlib::DeflateInit2>(::dlsym(zlib->handle, "deflateInit2_"));
  zlib->deflate = reinterpret_cast<Zlib::Deflate>(::dlsym(zlib->handle, "deflate"));
  zlib->reset = reinterpret_cast<Zlib::DeflateReset>(::dlsym(zlib->handle, "deflateReset"));
  zlib->end = reinterpret_cast<Zlib::DeflateEnd>(::dlsym(zlib->handle, "deflateEnd"));
  zlib->bound = reinterpret_cast<Zlib::DeflateBound>(::dlsym(zlib->handle, "deflateBound"));
  if (zlib->init == nullptr || zlib->deflate == nullptr || zlib->reset == nullptr || zlib->end == nullptr ||
      zlib->bound == nullptr) {
    return util::Status(util::Error::io_error, "a .gz trace needs zlib, and libz.so.1 lacks its deflate functions");
  }
  // Window bits 15 + 16: a gzip header and trailer around each member.
  constexpr int kGzipWindow = 15 + 16;
  constexpr int kLevel = 6;
  constexpr int kMemoryLevel = 8;
  if (zlib->init(&zlib->stream, kLevel, Z_DEFLATED, kGzipWindow, kMemoryLevel, Z_DEFAULT_STRATEGY, ZLIB_VERSION,
                 static_cast<int>(sizeof(z_stream))) != Z_OK) {
    return util::Status(util::Error::io_error, "zlib refused to start a gzip stream");
  }
  zlib->initialised = true;
  std::unique_ptr<GzipMembers> members(new GzipMembers());
  members->max_input_ = max_input;
  members->out_bytes_ = zlib->bound(&zlib->stream, max_input);
  members->out_ = std::make_unique<unsigned char[]>(members->out_bytes_);
  members->zlib_ = std::move(zlib);
  return members;
}

GzipMembers::~GzipMembers() = default;

bool GzipMembers::wanted_for(const std::string& path) noexcept {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

bool GzipMembers::write(int fd, std::string_view data) noexcept {
  if (data.size() > max_input_) {
    errno = EINVAL;
    return false;
  }
  z_stream& s = zlib_->stream;
  if (zlib_->reset(&s) != Z_OK) {
    errno = EIO;
    return false;
  }
  // deflateBound leaves room for the whole member: one call finishes it.
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = out_.get();
  s.avail_out = static_cast<uInt>(out_bytes_);
  if (zlib_->deflate(&s, Z_FINISH) != Z_STREAM_END) {
    errno = EIO;
    return false;
  }
  return util::write_all(fd, std::string_view(reinterpret_cast<const char*>(out_.get()), out_bytes_ - s.avail_out));
}

}  // namespace tidepool::runtime
