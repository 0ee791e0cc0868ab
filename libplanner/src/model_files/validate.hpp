// The one validation boundary for a model's numbers (docs/formulas.md §1 lists the shapes kvplan sizes): every
// source of a ModelSpec — a GGUF header, a config.json, a catalog or --data YAML entry, a caller's own spec —
// runs check_model before the planner sees it, so the memory rules never meet a zero that divides, a negative
// width or dimensions whose products cannot be sized.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "kvplan/catalog.hpp"

namespace kvplan::detail {

// Throws the source's InputError: `field` is the catalog's name for it (layers, embd, heads, kv_heads, head_dim,
// moe.experts, mla.kv_lora_rank, recurrent.d_inner, …), which the source maps to its own key; `accepted` says
// what would be valid ("1..4096", "a divisor of 32").
using FieldError = std::function<void(const std::string& field, const std::string& value, const std::string& problem,
                                      const std::string& accepted)>;

// Ranges and consistency of every number of `m`; calls `fail` (which must throw) for the first that is wrong.
void check_model(const ModelSpec& m, const FieldError& fail);

// A name read from a file, safe to print: control characters (an ESC sequence in general.name would drive the
// user's terminal) become '?'. Invalid UTF-8 is left to the JSON writer, which replaces it.
std::string printable(std::string s);

// check_model for a spec a caller built or loaded (Request::model_spec): errors name `flag` and the model.
void check_model_spec(const ModelSpec& m, const std::string& flag);

// A model from the text of a config.json at `path` (a safetensors index beside `path` is read when present):
// load_model_file's reader, for the fuzz target that plans from config.json text.
std::shared_ptr<const ModelSpec> model_from_config_text(const std::string& text, const std::string& path, const Catalog& catalog,
                                                        const EngineSpec& engine);

// The GGUF metadata key (without the architecture prefix) and the config.json field of a catalog field name.
std::string gguf_key_of(const std::string& field);
std::string config_key_of(const std::string& field);

}  // namespace kvplan::detail
