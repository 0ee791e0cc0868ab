// kvplan/model_file.hpp — models read from files: a GGUF (header only), a Hugging Face config.json,
// or a snapshot folder holding one.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kvplan/catalog.hpp"

namespace kvplan {

// The parsed header of one GGUF file. Only metadata and tensor infos: tensor data is never read.
struct GgufHeader {
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;
  std::uint64_t data_offset = 0;  // where tensor data starts (header end padded to alignment)
  std::uint64_t file_size = 0;
  // Scalars as int64/uint64/double/bool/string; arrays keep their length and (for numbers) values.
  struct Array {
    std::uint32_t type = 0;
    std::uint64_t count = 0;
    std::vector<double> numbers;  // numeric arrays only (and only up to a sane size)
  };
  using Value = std::variant<std::int64_t, std::uint64_t, double, bool, std::string, Array>;
  std::map<std::string, Value> metadata;
  struct Tensor {
    std::string name;
    std::uint32_t type = 0;  // ggml type id
    std::vector<std::int64_t> ne;
    std::uint64_t offset = 0;
  };
  std::vector<Tensor> tensors;
};

// Parse a GGUF header from memory (`size` bytes of a file of `file_size` bytes). Hostile input:
// every count and length is checked against what remains before anything is allocated. Throws
// InputError naming `name` for anything that is not a well-formed GGUF.
GgufHeader parse_gguf_header(const std::uint8_t* data, std::size_t size, std::uint64_t file_size, const std::string& name);

// The same for a reader that holds only a prefix of the file (a remote one, fetching by range): no header and
// `need` set to the bytes the header needs at least when the prefix ends inside it; throws as above otherwise.
struct GgufPrefix {
  std::optional<GgufHeader> header;
  std::uint64_t need = 0;
};
GgufPrefix parse_gguf_prefix(const std::uint8_t* data, std::size_t size, std::uint64_t file_size, const std::string& name);

// Read a GGUF file's header (reading only as much of the file as the header takes, at most 256 MiB).
// `field` names the flag the path came from in errors.
GgufHeader read_gguf_header(const std::string& path, const std::string& field = "--model");

// A model from a GGUF (split files are followed), a config.json, or a folder with a config.json.
// The result carries the exact tensors (GGUF) or the fields used and assumed (config.json).
std::shared_ptr<const ModelSpec> load_model_file(const std::string& path, const Catalog& catalog,
                                                 const std::string& engine = "llama.cpp");

// A model from the text of a Hugging Face config.json (and of its safetensors index, when there is one), as
// load_model_file reads a folder; `path` names the file in errors and gives the model id (its folder's name).
std::shared_ptr<const ModelSpec> model_from_config_json(const std::string& config_text, const std::optional<std::string>& index_text,
                                                        const std::string& path, const Catalog& catalog,
                                                        const std::string& engine = "llama.cpp");

// A vision projector GGUF (general.architecture "clip"), header only: its tensors and vision encoder shape.
std::shared_ptr<const ProjectorSpec> load_projector_file(const std::string& path, const Catalog& catalog);

// Derive the model from parsed GGUF headers (the first split first).
ModelSpec model_from_gguf(const std::vector<GgufHeader>& splits, const std::vector<std::string>& paths, const Catalog& catalog,
                          const EngineSpec& engine);

}  // namespace kvplan
