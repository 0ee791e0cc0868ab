// libFuzzer target for model files through the planner: the input is a GGUF header (it starts with "GGUF")
// or the text of a config.json; whatever parses is planned on a 24 GiB CUDA device, so the memory rules' size
// arithmetic (KV cache, weights, compute, pools) runs on the file's numbers. Every input must plan or be
// refused with an InputError, and a plan must carry no negative size: anything else aborts (a finding).
// The first two bytes of an input are the request's pins (flash attention, cache types, context, slots, max-context
// mode, unified KV, partial offload, the device and the CPU backend); the rest is the file.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kvplan/kvplan.hpp"
#include "model_files/validate.hpp"

namespace {

void check_sane(const kvplan::Plan& plan) {
  for (const auto& o : plan.options) {
    for (const auto& a : o.allocations)
      if (a.figure.bytes < 0 || a.figure.unpadded < 0 || a.figure.high < a.figure.bytes) std::abort();
    for (const auto& p : o.pools)
      if (p.allocations < 0 || p.total < 0 || p.total_high < p.total) std::abort();
    if (o.ctx_size < 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kvplan::Catalog& catalog = kvplan::builtin_catalog();
  static const kvplan::EngineSpec& engine = catalog.engine("llama.cpp");
  if (size < 2) return 0;
  // The first two bytes pick the request's pins and devices; the rest is the file.
  const std::uint8_t knobs = data[0], more = data[1];
  data += 2, size -= 2;
  try {
    kvplan::Request r;
    r.gpu = "24GB";
    r.task = "general";
    r.top = 1;
    r.suggest = false;  // suggestions re-plan many times: fewer executions, the same arithmetic
    r.flash_attn = knobs & 1 ? "on" : "auto";
    r.cache_type_k = std::string(knobs & 2 ? "q8_0" : "f16");
    r.cache_type_v = std::string(knobs & 4 ? "q4_0" : "f16");
    if (knobs & 8) r.ctx_size = 256 << (knobs >> 4 & 7);
    if (knobs & 0x80) r.n_parallel = more & 2 ? 256 : 4;
    r.max_ctx = more & 1;
    r.kv_unified = more & 4;
    if (more & 8) r.n_gpu_layers = 10;
    static const char* gpus[] = {"24GB", "8GB", "80GB", "2x24GB"};
    r.gpu = gpus[more >> 4 & 3];
    if (more & 0x40) r.ctx_size = 1 << 20;  // a long pinned context (beyond most models: refused or planned)
    if (more & 0x80) r.backend = std::string("cpu");  // the CPU backend sizes compute from its reserve-graph model
    if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) {
      const kvplan::GgufHeader h = kvplan::parse_gguf_header(data, size, size, "fuzz.gguf");
      r.model_spec = std::make_shared<const kvplan::ModelSpec>(kvplan::model_from_gguf({h}, {"fuzz.gguf"}, catalog, engine));
    } else {
      const std::string text(reinterpret_cast<const char*>(data), size);
      r.model_spec = kvplan::detail::model_from_config_text(text, "/nonexistent-kvplan-fuzz/config.json", catalog, engine);
      r.weights = std::string("Q4_K_M");
    }
    r.model = r.model_spec->id;
    check_sane(kvplan::plan(catalog, r));
  } catch (const kvplan::InputError&) {
    // refused cleanly
  }
  return 0;
}
