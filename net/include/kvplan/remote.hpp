// kvplan/remote.hpp — models named by a remote id, read header only over HTTP (the network adapter: libplanner's
// plan() stays a pure function of the ModelSpec this returns).
//
//   Qwen/Qwen2.5-Coder-32B-Instruct        a Hub repo: its config.json and safetensors index (or safetensors header)
//   unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M      a Hub GGUF repo and quant (llama.cpp's -hf; hf.co/… as Ollama spells it)
//   https://host/path/model.gguf           a GGUF by URL
//   qwen2.5-coder:32b                      an Ollama tag, through the registry's manifest to the model blob
//
// Environment: HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, KVPLAN_OLLAMA_REGISTRY (default https://registry.ollama.ai),
// KVPLAN_HTTP_TIMEOUT (seconds), XDG_CACHE_HOME (the cache of what was read: $XDG_CACHE_HOME/kvplan).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "kvplan/catalog.hpp"

namespace kvplan::net {

struct RemoteId {
  enum class Kind { hub, url, ollama } kind = Kind::hub;
  std::string spelled;  // as given
  std::string repo;     // hub: owner/name; ollama: namespace/model
  std::string tag;      // hub: the quant ("" = llama.cpp's default choice); ollama: the tag ("latest")
  std::string url;      // url: the GGUF's URL
};

// What a --model value names remotely, or nullopt when it has none of the shapes above (a catalog name, a path).
// A value of a remote shape that is malformed (an empty owner, a character no repo id has) is an InputError.
std::optional<RemoteId> parse_remote_id(const std::string& text);

// The model a remote id names, read header only; nullptr when `text` is a catalog model or has no remote shape.
// Errors are InputError on --model naming the id and the cause (HTTP status, timeout, not a GGUF, gated repo, ...).
std::shared_ptr<const ModelSpec> load_remote_model(const std::string& text, const Catalog& catalog,
                                                   const std::string& engine = "llama.cpp");

}  // namespace kvplan::net
