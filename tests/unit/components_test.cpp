// Extra components in the plan: a draft model for speculative decoding and a vision projector, each with
// its memory in the right pool (component "draft" / "mmproj"). Expected bytes are worked out by hand from
// llama.cpp b10454's rules (common/speculative.cpp, tools/mtmd/clip.cpp), not from kvplan's output.
#include <catch2/catch.hpp>

#include <filesystem>

#include "gguf_writer.hpp"
#include "helpers.hpp"
#include "kvplan/model_file.hpp"

using namespace kvplan;

namespace {
Request coder_with_draft() {
  Request r;
  r.gpu = "24GB";
  r.model = "qwen2.5-coder-32b";
  r.task = "agentic";
  r.model_draft = "qwen2.5-0.5b";
  r.weights_draft = "Q8_0";
  r.ctx_size = 16384;
  r.cache_type_k = "q8_0";
  r.cache_type_v = "q8_0";
  r.weights = "Q4_K_M";
  return r;
}
Bytes sum(const Option& o, const std::string& component, const std::string& what, const std::string& pool = {}) {
  Bytes b = 0;
  for (const auto& a : o.allocations)
    if (a.component == component && a.what == what && (pool.empty() || a.pool == pool)) b += a.figure.bytes;
  return b;
}
}  // namespace

TEST_CASE("draft model: its own context with the main n_ctx and slots, its cache types, its weights") {
  const Plan p = plan(kvtest::catalog(), coder_with_draft());
  REQUIRE(!p.options.empty());
  const Option& o = p.options.front();
  // Qwen2.5-0.5B: 24 layers, 2 KV heads × 64 = 128 elements; f16 (the -ctkd default) at 16384 cells:
  // 24 · 16384 · 128 · 2 B = 100 663 296 B for K and the same for V.
  CHECK(sum(o, "draft", "k_cache", "gpu0") == 100663296);
  CHECK(sum(o, "draft", "v_cache", "gpu0") == 100663296);
  // Its output buffer: vocab 151936 × n_parallel 1 × 4 B (output_reserve).
  CHECK(sum(o, "draft", "output", "host") == 151936LL * 4);
  CHECK(sum(o, "draft", "weights", "gpu0") > 0);
  CHECK(sum(o, "draft", "weights_host", "host") > 0);  // token_embd stays in RAM
  // The main context reserves logits for n_parallel · (1 + draft_max) = 4 rows (server_output_limits).
  CHECK(p.resolved.n_outputs_max == 4);
  CHECK(o.launch.find(" -md Qwen2.5-0.5B-Instruct-Q8_0.gguf --spec-type draft-simple -ctkd f16 -ctvd f16") != std::string::npos);
  // The totals count it: the same plan without a draft holds less.
  Request without = coder_with_draft();
  without.model_draft.clear();
  without.weights_draft.reset();
  const Plan plain = plan(kvtest::catalog(), without);
  CHECK(o.usage("gpu0").total > plain.options.front().usage("gpu0").total + 200000000);

  // -ctkd q8_0: 16384 · 128 / 32 · 34 B = 2 228 224 B per layer, plus CUDA's row tail for ne0 128
  // (512 - 128 = 384 elements = 408 B) padded to 128 B: 2 228 736 B; × 24 layers = 53 489 664 B.
  Request q = coder_with_draft();
  q.cache_type_k_draft = "q8_0";
  q.cache_type_v_draft = "q8_0";
  const Plan pq = plan(kvtest::catalog(), q);
  const Option& oq = pq.options.front();
  CHECK(sum(oq, "draft", "k_cache", "gpu0") == 53489664);
  CHECK(oq.launch.find("-ctkd q8_0 -ctvd q8_0") != std::string::npos);
}

TEST_CASE("draft model refusals: vocabulary, quantized V without flash attention, flags without a draft") {
  const auto& c = kvtest::catalog();
  Request r = coder_with_draft();
  r.model_draft = "llama-3.2-1b";  // vocabulary 128256 against 152064
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("differs by more than 128"));
  r = coder_with_draft();
  r.cache_type_v_draft = "q4_0";
  r.cache_type_k = "f16";
  r.cache_type_v = "f16";
  r.flash_attn = "off";
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("the draft model: quantized V cache"));
  r = coder_with_draft();
  r.model_draft.clear();
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("--model-draft") && Catch::Contains("need a draft model"));
  r = coder_with_draft();
  r.engine = "vllm";
  r.weights.reset();
  r.cache_type_k.reset();
  r.cache_type_v.reset();
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("llama.cpp only"));
}

TEST_CASE("vision projector: a clip GGUF's tensors on the GPU (or RAM) and an estimated encoder buffer") {
  // A small clip projector: image 448 / patch 14 = 32 × 32 = 1024 patches, width 1024, FFN 4096, 16 heads.
  kvtest::GgufBuilder g;
  g.str("general.architecture", "clip");
  g.str("clip.projector_type", "mlp");
  g.u32("clip.vision.image_size", 448);
  g.u32("clip.vision.patch_size", 14);
  g.u32("clip.vision.embedding_length", 1024);
  g.u32("clip.vision.feed_forward_length", 4096);
  g.u32("clip.vision.attention.head_count", 16);
  g.u32("clip.vision.block_count", 2);
  g.tensor("v.blk.0.ffn_up.weight", 1, {1024, 4096}, 1024LL * 4096 * 2);  // f16
  g.tensor("mm.0.weight", 8, {1024, 5120}, 1024LL / 32 * 34 * 5120);     // q8_0
  const auto path = (std::filesystem::temp_directory_path() / "kvplan-test-mmproj.gguf").string();
  g.write(path);
  const auto spec = load_projector_file(path, kvtest::catalog());
  CHECK(spec->n_patches() == 1024);
  REQUIRE(spec->tensors.size() == 2);

  Request r = coder_with_draft();
  r.model_draft.clear();
  r.weights_draft.reset();
  r.mmproj = spec;
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(!p.options.empty());
  const Option& o = p.options.front();
  // CUDA: each tensor padded to 128 B; the q8_0 tensor's ne0 1024 is a multiple of 512 (no row tail).
  CHECK(sum(o, "mmproj", "weights", "gpu0") == 1024LL * 4096 * 2 + 1024LL / 32 * 34 * 5120);
  // Encoder buffer (FA on): 1025 rows · (2 · 4096 + 6 · 1024) · 4 B = 58 777 600 B.
  CHECK(sum(o, "mmproj", "compute", "gpu0") == 58777600);
  CHECK(o.launch.find(" --mmproj " + path) != std::string::npos);
  r.mmproj_offload = false;
  const Plan on_host = plan(kvtest::catalog(), r);
  const Option& host = on_host.options.front();
  CHECK(sum(host, "mmproj", "weights", "host") == 1024LL * 4096 * 2 + 1024LL / 32 * 34 * 5120);
  CHECK(host.launch.find("--no-mmproj-offload") != std::string::npos);

  // Not a projector: a model GGUF is refused by name.
  kvtest::GgufBuilder m;
  m.str("general.architecture", "llama");
  m.tensor("token_embd.weight", 0, {32, 8}, 32 * 8 * 4);
  const auto model_path = (std::filesystem::temp_directory_path() / "kvplan-test-not-mmproj.gguf").string();
  m.write(model_path);
  CHECK_THROWS_WITH(load_projector_file(model_path, kvtest::catalog()), Catch::Contains("is not a vision projector"));
  std::filesystem::remove(path);
  std::filesystem::remove(model_path);
}
