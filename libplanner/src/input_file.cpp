#include "input_file.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kvplan/error.hpp"

namespace kvplan::detail {

void require_regular_file(const std::string& path, const std::string& field, std::uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // follows links: a link to /dev/zero is a device
  if (ec || !fs::exists(st)) throw InputError(field, path, "no such file");
  if (fs::is_directory(st)) throw InputError(field, path, "is a directory, not a file");
  if (!fs::is_regular_file(st))
    throw InputError(field, path, "is not a regular file (a pipe, socket or device); accepted: a file on disk");
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) throw InputError(field, path, "cannot read the file size");
  if (size > max_bytes)
    throw InputError(field, path, fmt::format("is {} bytes; accepted: at most {} MiB", size, max_bytes >> 20));
}

std::string read_text_file(const std::string& path, const std::string& field, std::uint64_t max_bytes) {
  require_regular_file(path, field, max_bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(field, path, "cannot open the file");
  std::string text;
  text.resize(static_cast<std::size_t>(std::filesystem::file_size(path)));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));  // the file may shrink under us; never read past what was sized
  return text;
}

}  // namespace kvplan::detail
