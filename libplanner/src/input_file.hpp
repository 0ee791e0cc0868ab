// Reading a file the user named: only a regular file (a pipe or device would hang or never end), and only up to
// a size the format can sensibly have, checked before anything is read. Errors name the flag and the path.
#pragma once
#include <cstdint>
#include <string>

namespace kvplan::detail {

// Throws InputError(field, path, ...) for a missing path, a directory, pipe or device, or a file over max_bytes.
void require_regular_file(const std::string& path, const std::string& field, std::uint64_t max_bytes);

// The whole file as text, after require_regular_file.
std::string read_text_file(const std::string& path, const std::string& field, std::uint64_t max_bytes);

constexpr std::uint64_t kMaxConfigBytes = 64ull << 20;    // config.json, safetensors index, --data YAML
constexpr std::uint64_t kMaxPriorsBytes = 512ull << 20;   // --priors measurements (a 100 MB file plans in seconds)

}  // namespace kvplan::detail
