// --model: a file or folder, a remote id, or a catalog name (cli/model_source.hpp).
#include "model_source.hpp"

#include <filesystem>

#if KVPLAN_REMOTE
#include "kvplan/remote.hpp"
#endif

namespace kvplan::cli {

std::shared_ptr<const ModelSpec> read_model(const std::string& value, const Catalog& catalog, const std::string& engine) {
  std::error_code ec;
  if (value.empty()) return nullptr;
  if (std::filesystem::exists(value, ec)) return load_model_file(value, catalog, engine);
#if KVPLAN_REMOTE
  return net::load_remote_model(value, catalog, engine);
#else
  return nullptr;
#endif
}

bool remote_shaped(const std::string& value) {
#if KVPLAN_REMOTE
  try {
    return net::parse_remote_id(value).has_value();
  } catch (const InputError&) {
    return true;  // malformed, but of a remote shape: reading it says what is wrong
  }
#else
  (void)value;
  return false;
#endif
}

}  // namespace kvplan::cli
