// Which Hugging Face checkpoint a vLLM/SGLang launch line names for a model and weight format
// (data/engines/checkpoints.yaml; docs/engines.md "Checkpoints").
#pragma once
#include <string>

#include "kvplan/catalog.hpp"

namespace kvplan::engines {

struct CheckpointChoice {
  std::string repo;             // owner/name; empty: none known (the user must supply one)
  bool quantize_online = false; // the line adds the format's --quantization flag (fp8 from a bf16 checkpoint)
  std::string source;           // where the repo id comes from
};

// An entry of checkpoints.yaml for (model, format); else bf16 is the model's hf_id unless its own release is
// another format; fp8 is the bf16 checkpoint quantized online (--quantization fp8); anything else is unknown.
CheckpointChoice checkpoint_for(const Catalog& catalog, const ModelSpec& model, const WeightFormat& format);

}  // namespace kvplan::engines
