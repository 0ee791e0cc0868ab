// libFuzzer target for the GGUF reader: any byte string must parse, or be refused with an
// InputError. Crashes, hangs, sanitizer reports and other exceptions are bugs.
#include <cstdint>
#include <algorithm>
#include <cstdlib>

#include "kvplan/kvplan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kvplan::Catalog& catalog = kvplan::builtin_catalog();
  static const kvplan::EngineSpec& engine = catalog.engine("llama.cpp");
  try {
    const kvplan::GgufHeader h = kvplan::parse_gguf_header(data, size, size, "fuzz.gguf");
    const kvplan::ModelSpec m = kvplan::model_from_gguf({h}, {"fuzz.gguf"}, catalog, engine);
    const auto shape = kvplan::context_shape(m, engine, 4096, 2, false, 512, 2048, false);
    (void)kvplan::kv_cache_bytes(m, engine, shape, engine.type("q8_0", "fuzz"), engine.type("f16", "fuzz"), true, engine.backend("cuda"));
  } catch (const kvplan::InputError&) {
    // refused cleanly
  }
  // The remote reader's view (net/src/remote_model.cpp read_gguf): a prefix of a file whose size the server
  // claims (Content-Range, hostile too): the first 8 bytes say the claimed size, the rest is the prefix.
  if (size >= 8) {
    std::uint64_t claimed = 0;
    for (int i = 0; i < 8; ++i) claimed = (claimed << 8) | data[i];
    claimed = std::max<std::uint64_t>(claimed, size - 8);
    try {
      (void)kvplan::parse_gguf_prefix(data + 8, size - 8, claimed, "remote.gguf");
    } catch (const kvplan::InputError&) {
    }
  }
  return 0;
}
