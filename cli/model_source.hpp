// --model as the CLI reads it: a file or folder, else a remote id (kvplan/remote.hpp: a Hub repo, a GGUF URL, an
// Ollama tag), else a catalog name the planner resolves. The network stays in this adapter, out of libplanner.
#pragma once
#include <memory>
#include <string>

#include "kvplan/kvplan.hpp"

namespace kvplan::cli {

// The model the value names when it is a file, folder or remote id; nullptr for a catalog name.
std::shared_ptr<const ModelSpec> read_model(const std::string& value, const Catalog& catalog, const std::string& engine);

// Whether the value has a remote shape (then it need not name an existing file).
bool remote_shaped(const std::string& value);

}  // namespace kvplan::cli
