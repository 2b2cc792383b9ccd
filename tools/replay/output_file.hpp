// OutputFile: a file named on tidepool-replay's command line (--html,
// --chrome-trace). It is opened before the replay, so that a path that
// cannot be written fails at once with the reason rather than after the
// whole replay, and written whole at the end; a name ending in .gz is
// written gzipped (ui.perfetto.dev opens a gzipped trace as it is).
// Opening changes nothing: an existing file keeps its contents until the
// write, and a file the open created is removed again if no write comes
// (the replay failed).
#pragma once

#include <string>
#include <string_view>

namespace tidepool::replay {

class OutputFile {
 public:
  OutputFile() = default;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  // Opens `path` for writing, creating it if need be; false with `error`
  // ("PATH: reason").
  bool open(const std::string& path, std::string* error);
  [[nodiscard]] bool is_open() const noexcept { return fd_ >= 0; }
  // Writes `text` (gzipped for a .gz name) and closes the file; false with
  // `error`.
  bool write_and_close(std::string_view text, std::string* error);

 private:
  std::string path_;
  int fd_ = -1;
  bool created_ = false;  // by open(): removed again unless written
};

}  // namespace tidepool::replay
