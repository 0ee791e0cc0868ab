// KV cache and context rules against the cases of docs/formulas.md §2-§6, worked by hand from llama.cpp's
// allocation code (src/llama-kv-cache.cpp, src/llama-kv-cache-iswa.cpp, ggml-cuda.cu), and compute buffers against
// CUDA log lines.
#include <catch2/catch.hpp>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include "helpers.hpp"
#include "memory/ggml_graph.hpp"
#include "memory/transformer_graph.hpp"

using namespace kvplan;
using kvtest::mib;

namespace {
struct KvCase {
  const char* k;
  const char* v;
  double total_mib;
};

double kv_mib(const ModelSpec& m, const ContextShape& s, const char* k, const char* v, bool fa = true) {
  const auto kv = kv_cache_bytes(m, kvtest::engine(), s, kvtest::type(k), kvtest::type(v), fa, kvtest::cuda());
  return mib(kv.k.bytes + kv.v.bytes + kv.swa_k.bytes + kv.swa_v.bytes);
}
}  // namespace

TEST_CASE("context: n_ctx padded to 256; streams without unified KV (src/llama-context.cpp)") {
  const ModelSpec& m = kvtest::catalog().model("qwen2.5-coder-32b");
  auto s = context_shape(m, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  CHECK(s.n_ctx == 32768);
  CHECK(s.n_stream == 1);
  s = context_shape(m, kvtest::engine(), 30000, 1, false, 512, 2048, false);
  CHECK(s.n_ctx == 30208);  // PAD(30000, 256)
  // -c 4096 -np 32 rounds UP to 32 streams of 256 cells = 8192 cells
  s = context_shape(m, kvtest::engine(), 4096, 32, false, 512, 2048, false);
  CHECK(s.n_ctx_seq == 256);
  CHECK(s.n_ctx == 8192);
  CHECK(s.n_stream == 32);
  s = context_shape(m, kvtest::engine(), 32768, 4, true, 512, 2048, false);
  CHECK(s.n_stream == 1);
  CHECK(s.n_ctx_seq == 32768);
  // a context shorter than the batch clamps the batch and the ubatch
  s = context_shape(m, kvtest::engine(), 256, 1, false, 512, 2048, false);
  CHECK(s.n_batch == 256);
  CHECK(s.n_ubatch == 256);
}

TEST_CASE("build rules are data: before PR #17046 a context without flash attention padded to 32") {
  const ModelSpec& m = kvtest::catalog().model("qwen2.5-coder-32b");
  EngineSpec old = kvtest::engine();
  old.build = 6000;
  CHECK(context_shape(m, old, 30000, 1, false, 512, 2048, false, false).n_ctx == 30016);  // PAD(30000, 32)
  CHECK(context_shape(m, old, 30000, 1, false, 512, 2048, false, true).n_ctx == 30208);   // PAD(30000, 256)
  CHECK(context_shape(m, kvtest::engine(), 30000, 1, false, 512, 2048, false, false).n_ctx == 30208);
}

TEST_CASE("Qwen2.5-Coder-32B KV cache at 32768 cells (docs/formulas.md §2)") {
  const ModelSpec& m = kvtest::catalog().model("qwen2.5-coder-32b");
  const auto s = context_shape(m, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  const KvCase cases[] = {{"f16", "f16", 8192.0},   {"q8_0", "q8_0", 4352.0}, {"q8_0", "q4_0", 3328.0}, {"q4_0", "q4_0", 2304.0},
                          {"q5_1", "q5_1", 3072.0}, {"q5_0", "q5_0", 2816.0}, {"q4_1", "q4_1", 2560.0}, {"iq4_nl", "iq4_nl", 2304.0},
                          {"bf16", "bf16", 8192.0}, {"f32", "f32", 16384.0}};
  for (const auto& c : cases) {
    INFO(c.k << "/" << c.v);
    CHECK(kv_mib(m, s, c.k, c.v) == Approx(c.total_mib).epsilon(1e-12));
  }
  const auto kv = kv_cache_bytes(m, kvtest::engine(), s, kvtest::type("q8_0"), kvtest::type("q8_0"), true, kvtest::cuda());
  CHECK(kv.k.bytes + kv.v.bytes == 4563402752LL);
  CHECK(kv.k.bytes == kv.k.unpadded);  // ne0 = 1024 is a multiple of 512: no CUDA row tail
  // The same bytes with 4 unified slots or 4 streams of 8192 (docs/formulas.md §2)
  const auto s4 = context_shape(m, kvtest::engine(), 32768, 4, false, 512, 2048, false);
  CHECK(kv_mib(m, s4, "f16", "f16") == Approx(8192.0));
}

TEST_CASE("Gemma 3 27B: 10 full + 52 sliding layers, SWA cache 1536 cells (docs/formulas.md §2)") {
  const ModelSpec& m = kvtest::catalog().model("gemma-3-27b");
  const auto s = context_shape(m, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  CHECK(s.swa_cells == 1536);
  const KvCase cases[] = {{"f16", "f16", 3184.0}, {"q8_0", "q8_0", 1691.5}, {"q8_0", "q4_0", 1293.5}, {"q4_0", "q4_0", 895.5}};
  for (const auto& c : cases) {
    INFO(c.k << "/" << c.v);
    CHECK(kv_mib(m, s, c.k, c.v) == Approx(c.total_mib).epsilon(1e-12));
  }
  const auto full = context_shape(m, kvtest::engine(), 32768, 1, false, 512, 2048, true);
  CHECK(full.swa_cells == 32768);
  const KvCase swa_full[] = {{"f16", "f16", 15872.0}, {"q8_0", "q8_0", 8432.0}, {"q8_0", "q4_0", 6448.0}, {"q4_0", "q4_0", 4464.0}};
  for (const auto& c : swa_full) {
    INFO("--swa-full " << c.k << "/" << c.v);
    CHECK(kv_mib(m, full, c.k, c.v) == Approx(c.total_mib).epsilon(1e-12));
  }
  // llama-server default: 4 unified slots -> SWA PAD(4·1024 + 512, 256) = 4608 cells, 4432 MiB at f16
  const auto np4 = context_shape(m, kvtest::engine(), 32768, 4, true, 512, 2048, false);
  CHECK(np4.swa_cells == 4608);
  CHECK(kv_mib(m, np4, "f16", "f16") == Approx(4432.0));
}

TEST_CASE("layer_run_ends: Gemma 3 27B's five sliding layers then one full, repeated; the KV from kept runs is the same") {
  const ModelSpec& m = kvtest::catalog().model("gemma-3-27b");
  const auto layers = layer_caches(m, kvtest::engine());
  const auto ends = layer_run_ends(layers);
  REQUIRE(ends.size() == 62);
  // llama.cpp's gemma3 pattern: layer il is full attention when (il + 1) % 6 == 0; 62 layers end with two sliding
  CHECK(ends[0] == 5);
  CHECK(ends[3] == 5);  // a range may start inside a run
  CHECK(ends[5] == 6);
  CHECK(ends[6] == 11);
  CHECK(ends[59] == 60);
  CHECK(ends[60] == 62);
  CHECK(ends[61] == 62);
  const auto s = context_shape(m, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  const GgmlType& q8 = kvtest::type("q8_0");
  for (const auto& [begin, end] : std::vector<std::pair<int, int>>{{0, -1}, {3, 40}, {5, 6}, {61, 62}, {0, 0}}) {
    INFO(begin << ".." << end);
    for (const bool fa : {true, false}) {
      const auto a = kv_cache_bytes(layers, kvtest::engine(), s, q8, q8, fa, kvtest::cuda(), begin, end);
      const auto b = kv_cache_bytes(layers, kvtest::engine(), s, q8, q8, fa, kvtest::cuda(), begin, end, &ends);
      CHECK(a.k.bytes == b.k.bytes);
      CHECK(a.swa_k.bytes == b.swa_k.bytes);
      CHECK(a.v.high == b.v.high);
      CHECK(a.swa_v.unpadded == b.swa_v.unpadded);
    }
  }
  const std::vector<int> short_ends(3, 3);
  CHECK_THROWS_AS(kv_cache_bytes(layers, kvtest::engine(), s, q8, q8, true, kvtest::cuda(), 0, -1, &short_ends), std::logic_error);
}

TEST_CASE("gpt-oss-20b: alternating sliding window of 128, SWA cache 768 cells (docs/formulas.md §2)") {
  const ModelSpec& m = kvtest::catalog().model("gpt-oss-20b");
  const auto s = context_shape(m, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  CHECK(s.swa_cells == 768);
  CHECK(kv_mib(m, s, "f16", "f16") == Approx(786.0));
  CHECK(kv_mib(m, s, "q8_0", "q8_0") == Approx(417.5625));
  CHECK(kv_mib(m, s, "q4_0", "q4_0") == Approx(221.0625));
  const auto np4 = context_shape(m, kvtest::engine(), 32768, 4, true, 512, 2048, false);
  CHECK(np4.swa_cells == 1024);
  const auto kv = kv_cache_bytes(m, kvtest::engine(), np4, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  CHECK(mib(kv.swa_k.bytes + kv.swa_v.bytes) == Approx(24.0));
}

TEST_CASE("CUDA buffers: row tail for quantized tensors, 128-byte alignment (docs/formulas.md §3)") {
  // DeepSeek-V2-Lite MLA K row of 576 in q8_0 at 32768 cells: 541 472 256 B over 27 layers
  const Figure f = tensor_bytes(kvtest::type("q8_0"), 576, 32768, kvtest::cuda());
  CHECK(f.unpadded == 20054016);
  CHECK(f.bytes == 541472256 / 27);
  CHECK(f.accuracy == Accuracy::exact);
  // f16 has no row tail; the CPU backend has neither tail nor 128 alignment
  CHECK(tensor_bytes(kvtest::type("f16"), 576, 3, kvtest::cuda()).bytes == 3456);  // 3456 = 27·128
  CHECK(tensor_bytes(kvtest::type("q8_0"), 576, 1, kvtest::engine().backend("cpu")).bytes == 640);  // 612 B padded to 32
}

TEST_CASE("compute buffer estimates against CUDA logs (docs/formulas.md §5.2)") {
  // A Llama-3-8B shape: vocab 128256, n_embd 4096, 32 heads, ubatch 512
  const ModelSpec& m = kvtest::catalog().model("llama-3.1-8b");
  auto s = context_shape(m, kvtest::engine(), 512, 1, false, 512, 2048, false);
  auto c = compute_bytes(m, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), false, kvtest::cuda());
  CHECK(mib(c.device.bytes) == Approx(258.50).margin(0.01));     // log: CUDA0 compute buffer size = 258.50 MiB
  // log: CUDA_Host compute buffer size = 9.01 MiB (token rows 8 MiB + f32 mask 1 MiB); b10454 adds two inputs that
  // build did not have: the unused inp_embd (4096·512·4 = 8 MiB, rule embd_input_select) and V's SET_ROWS indices
  // (512·1024 i64 = 4 MiB), so the host buffer holds 12 MiB more (docs/formulas.md §5.1a)
  CHECK(mib(c.host.bytes) == Approx(9.01 + 12).margin(0.02));
  CHECK(c.device.accuracy == Accuracy::estimate);
  CHECK(c.device.high > c.device.bytes);
  s = context_shape(m, kvtest::engine(), 8192, 1, false, 512, 2048, false);
  c = compute_bytes(m, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), false, kvtest::cuda());
  // log: 560.00 MiB; at b10454 the device's copy of V's SET_ROWS indices (4 MiB) is live beside the KQ peak
  CHECK(mib(c.device.bytes) == Approx(560.00 + 4).margin(0.01));
  CHECK(mib(c.host.bytes) == Approx(24.01 + 12).margin(0.02));   // log: 24.01 MiB, + inp_embd and the V indices
  // A Qwen2.5-14B shape with flash attention: the logits block (152064+5120)·512·4 = 307.00 MiB
  const ModelSpec& q = kvtest::catalog().model("qwen2.5-14b-instruct");
  s = context_shape(q, kvtest::engine(), 8192, 1, false, 512, 2048, false);
  c = compute_bytes(q, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  CHECK(mib(c.device.bytes) == Approx(307.00).margin(0.01));
  // Qwen2.5-Coder-32B, FA on, q8_0 at 32k: the f16 scratch (128 MiB) stays under the logits block (docs/formulas.md §5.2),
  // plus b10454's Hadamard rotation inputs for a quantized cache of head size 128: 128² · 4 (K) + 64² · 4 (V) = 80 KiB
  const ModelSpec& coder = kvtest::catalog().model("qwen2.5-coder-32b");
  s = context_shape(coder, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  c = compute_bytes(coder, kvtest::engine(), s, kvtest::type("q8_0"), kvtest::type("q8_0"), true, kvtest::cuda());
  CHECK(c.device.bytes == 307LL * 1024 * 1024 + 81920);
  // FA off at 32k: 32768·512·40·4 = 2560 MiB + ~60 MiB (docs/formulas.md §5.2)
  c = compute_bytes(coder, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), false, kvtest::cuda());
  CHECK(mib(c.device.bytes) == Approx(2620.0).margin(20));
  // llama-server at b10454 reserves logits for min(n_batch, n_parallel · (1 + n_draft)) rows
  // (tools/server/server-context.cpp server_output_limits; llama-context.cpp n_outputs_pp): one row with -np 1,
  // so the FA-on peak is the attention stage: the f16 copies 32768 · 2048 · 2 = 134 217 728 B plus
  // (4 · 5120 + 2 · 40 · 128) · 512 · 4 = 62 914 560 B of rows beside it = 197 132 288 B, + 81 920 B of rotation inputs.
  s = context_shape(coder, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  s.n_outputs = 1;
  c = compute_bytes(coder, kvtest::engine(), s, kvtest::type("q8_0"), kvtest::type("q8_0"), true, kvtest::cuda());
  CHECK(c.device.bytes == 197132288 + 81920);
  // The upper bound: +10 % and one query-wide row per ubatch token (40 · 128 · 512 · 4 = 10 485 760 B)
  CHECK(c.device.high == std::llround((197132288 + 81920) * 1.10) + 10485760);
  // f16 cache: no copies; the FFN stage (2 · 27648 + 6 · 5120) · 512 · 4 = 176 160 768 B.
  c = compute_bytes(coder, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  CHECK(c.device.bytes == 176160768);
  Request r;
  r.gpu = "24GB";
  r.model = "qwen2.5-coder-32b";
  r.n_parallel = 3;
  CHECK(plan(kvtest::catalog(), r).resolved.n_outputs_max == 3);
  r.n_outputs_max = 4096;
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("--n-outputs-max") && Catch::Contains("1..2048"));
}

TEST_CASE("compute buffer: b10454's Hadamard rotation inputs for quantized caches (llama-kv-cache.cpp attn_rot_k/v)") {
  // What a quantized type adds over f16/f16 at the same shape (FA on, so no other term changes on CUDA for f16
  // vs q-types below the logits block). Measured on the CPU backend by tests/validation: a head size of 128
  // and one cache adds 81 920 B (qwen3-tiny q4_0/q4_0), K only 65 536 B, V only 16 384 B; iSWA doubles it
  // (gemma3-tiny 163 840 B); head size 64 gives 64² · 4 per side (gpt-oss-tiny, two caches: 65 536 B).
  auto extra = [](const char* id, const char* k, const char* v, const BackendSpec& backend = kvtest::cuda()) {
    const ModelSpec& m = kvtest::catalog().model(id);
    const auto s = context_shape(m, kvtest::engine(), 4096, 1, false, 512, 2048, false);
    // The closed forms (CUDA, an architecture without a graph model: the logits block is the peak at this shape, so
    // only the inputs differ); with a graph model on a GPU every input is in the host buffer, so the host grows by
    // exactly the rotation inputs. On the CPU backend the graph is checked in the next test case.
    const auto base = compute_bytes(m, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, backend);
    const auto test = compute_bytes(m, kvtest::engine(), s, kvtest::type(k), kvtest::type(v), true, backend);
    if (base.from_graph && backend.id != "cpu") return test.host.bytes - base.host.bytes;
    return test.device.bytes - base.device.bytes;
  };
  CHECK(extra("qwen2.5-coder-32b", "q4_0", "q4_0") == 81920);
  CHECK(extra("qwen2.5-coder-32b", "q8_0", "f16") == 65536);
  CHECK(extra("qwen2.5-coder-32b", "f16", "q8_0") == 16384);
  CHECK(extra("gemma-3-27b-it", "q8_0", "q8_0") == 163840);
  CHECK(extra("gpt-oss-20b", "q8_0", "q8_0") == 65536);
  // Head size 96 is not a multiple of 64: no rotation, no input
  // (CPU: on CUDA a quantized cache's f16 copies are the peak of this small-vocabulary model)
  CHECK(extra("phi-3.5-mini-instruct", "q4_0", "q4_0", kvtest::engine().backend("cpu")) == 0);
  // MLA: K rows of 512 + 64 = 576, whose largest power-of-two divisor is 64 (a 64² · 4 = 16 384 B input); no V head
  // size, no V input. (A rotated MLA cache has no graph model: the f16 and q8_0 figures come from different models.)
  CHECK(kv_rotation_size(576) == 64);
}

TEST_CASE("output buffer: n_vocab · n_seq · 4 bytes in pinned host memory (llama-context.cpp output_reserve)") {
  // vocab 248320 × 4 seqs × 4 B = 3.79 MiB, what a real llama.cpp log reports (origin not recorded): use a model with
  // that vocab shape
  ModelSpec m = kvtest::catalog().model("qwen2.5-coder-32b");
  m.vocab = 248320;
  const auto s = context_shape(m, kvtest::engine(), 32768, 4, true, 512, 2048, false);
  CHECK(mib(output_bytes(m, s).bytes) == Approx(3.79).margin(0.005));
}

namespace {
// tests/validation/make_models.py's synthetic models (vocab 1000), as kvplan reads them from their GGUF headers.
ModelSpec tiny(const char* arch, int layers, int embd, int ff, int heads, int kv_heads, int head_dim) {
  ModelSpec m;
  m.id = m.name = std::string(arch) + "-tiny";
  m.arch = arch;
  m.layers = layers, m.embd = embd, m.ff = ff, m.heads = heads, m.kv_heads = kv_heads;
  m.head_dim_k = m.head_dim_v = head_dim;
  m.vocab = 1000, m.ctx_native = 131072;
  return m;
}
Bytes cpu_compute(const ModelSpec& m, int ctx, const char* k, const char* v, bool fa, int ub = 256, int n_seq = 1) {
  const auto s = context_shape(m, kvtest::engine(), ctx, n_seq, false, ub, 2048, false, fa);
  return compute_bytes(m, kvtest::engine(), s, kvtest::type(k), kvtest::type(v), fa, kvtest::engine().backend("cpu")).device.bytes;
}
}  // namespace

TEST_CASE("CPU compute buffer: ggml-alloc over the modelled reserve graph equals llama.cpp b10454's, to the byte") {
  // Expected: llama_get_memory_breakdown's CPU compute bytes for these shapes, measured by tests/validation
  // (llama-cpp-python 0.3.35, library contexts: every ubatch token an output).
  const ModelSpec llama = tiny("llama", 2, 256, 512, 4, 2, 64);
  CHECK(cpu_compute(llama, 512, "f16", "f16", true) == 2366464);
  CHECK(cpu_compute(llama, 512, "f16", "f16", false) == 4199424);
  CHECK(cpu_compute(llama, 512, "q8_0", "q8_0", true) == 2661376);  // Hadamard rotations of Q, K, V and the output
  CHECK(cpu_compute(llama, 512, "f32", "f32", true) == 2628608);    // f16 copies of an f32 cache for flash attention
  CHECK(cpu_compute(llama, 1024, "f16", "f16", true, 256, 2) == 2366464);  // two streams of 512 cells

  ModelSpec qwen3 = tiny("qwen3", 2, 256, 512, 4, 2, 128);
  qwen3.qk_norm = true;
  CHECK(cpu_compute(qwen3, 1024, "f16", "f16", true) == 2890752);
  CHECK(cpu_compute(qwen3, 1024, "f16", "f16", false) == 7607296);

  ModelSpec gemma3 = tiny("gemma3", 8, 256, 512, 4, 2, 128);
  gemma3.qk_norm = gemma3.post_norms = gemma3.tied_embeddings = true;
  gemma3.swa = SlidingWindow{512, 6, false};
  CHECK(cpu_compute(gemma3, 1024, "f16", "f16", true) == 3288064);
  CHECK(cpu_compute(gemma3, 1024, "f16", "f16", false) == 8920064);

  ModelSpec gpt_oss = tiny("gpt-oss", 4, 256, 0, 8, 2, 64);
  gpt_oss.qkv_bias = gpt_oss.attn_sinks = true;
  gpt_oss.swa = SlidingWindow{128, 2, false};
  gpt_oss.moe = Moe{4, 2, 256, 0};
  CHECK(cpu_compute(gpt_oss, 1024, "f16", "f16", true) == 3681280);
  CHECK(cpu_compute(gpt_oss, 1024, "f16", "f16", false) == 12327936);

  ModelSpec qwen3moe = tiny("qwen3moe", 2, 256, 768, 4, 2, 128);
  qwen3moe.qk_norm = true;
  qwen3moe.moe = Moe{8, 2, 128, 0};
  CHECK(cpu_compute(qwen3moe, 1024, "f16", "f16", true) == 2366464);
  CHECK(cpu_compute(qwen3moe, 1024, "f16", "f16", false) == 7607296);

  // MLA (kv_lora_rank 128 + rope 32, q_lora_rank 128), one dense layer, then MoE with a shared expert and a
  // sigmoid router
  ModelSpec deepseek2 = tiny("deepseek2", 3, 256, 512, 4, 1, 160);
  deepseek2.head_dim_v = 128;
  deepseek2.mla = Mla{128, 32, 64, 64, 128, false};
  deepseek2.moe = Moe{4, 2, 128, 128, 1};
  CHECK(cpu_compute(deepseek2, 1024, "f16", "f16", true) == 3019776);
  CHECK(cpu_compute(deepseek2, 1024, "f32", "f32", true) == 3019776);
  CHECK(cpu_compute(deepseek2, 1024, "f16", "f16", false) == 7738368);
  CHECK(cpu_compute(deepseek2, 1024, "f32", "f32", false) == 7738368);

  // Hybrid: three gated delta-net layers (conv kernel 4, 2 key / 4 value heads of 64), then a gated-query
  // attention layer; MoE with a gated shared expert
  ModelSpec qwen3next = tiny("qwen3next", 4, 256, 512, 4, 2, 128);
  qwen3next.qk_norm = true;
  qwen3next.moe = Moe{4, 2, 128, 128, 0};
  Recurrent gdn;
  gdn.kind = "gdn", gdn.d_conv = 4, gdn.d_inner = 256, gdn.d_state = 64, gdn.n_group = 2;
  gdn.attention_every = 4, gdn.attention_offset = 3;
  qwen3next.recurrent = gdn;
  CHECK(cpu_compute(qwen3next, 1024, "f16", "f16", true) == 3685408);
  CHECK(cpu_compute(qwen3next, 1024, "f16", "f16", false) == 8401952);
  CHECK(cpu_compute(qwen3next, 1024, "q4_0", "f16", true) == 3750944);   // rotated query and key
  CHECK(cpu_compute(qwen3next, 1024, "q4_0", "f16", false) == 8991776);  // was -12.6 % with the closed forms

  // Mamba-2 (d_inner 512, state 64, 2 groups, 8 heads), no attention and no FFN
  ModelSpec mamba2 = tiny("mamba2", 2, 256, 0, 0, 0, 0);
  mamba2.tied_embeddings = true;
  Recurrent ssm;
  ssm.kind = "mamba2", ssm.d_conv = 4, ssm.d_inner = 512, ssm.d_state = 64, ssm.n_group = 2, ssm.dt_rank = 8;
  mamba2.recurrent = ssm;
  CHECK(cpu_compute(mamba2, 1024, "f16", "f16", true) == 4363296);

  // Granite 4.0-H style: three Mamba-2 layers (1 group) and a NoPE attention layer, dense FFN, residual scaling
  ModelSpec granite = tiny("granitehybrid", 4, 256, 512, 4, 2, 64);
  granite.rope = false;
  granite.tied_embeddings = true;
  granite.kv_heads_per_layer = {0, 0, 0, 2};
  ssm.n_group = 1, ssm.attention_layers = {3};
  granite.recurrent = ssm;
  CHECK(cpu_compute(granite, 1024, "f16", "f16", true) == 4355104);
  CHECK(cpu_compute(granite, 1024, "f16", "f16", false) == 6557728);
  CHECK(cpu_compute(granite, 10000, "f32", "f32", true, 256, 4) == 7608352);  // was +10.3 % with the closed forms
}

TEST_CASE("compute graph: a tensor or buffer beyond 64-bit byte counts is an InputError, not a wrapped size") {
  using namespace kvplan::ggml_graph;
  Graph g;
  const int a = g.input(Type::f32, {1 << 30, 1 << 30, 1 << 4, 1});  // 2^64 elements x 4 bytes: does not fit
  g.op(Type::f32, {1, 1, 1, 1}, {a});
  CHECK_THROWS_AS(peak_bytes(g, 32), kvplan::InputError);
  Graph ok;
  const int b = ok.input(Type::f32, {1 << 20, 1 << 10, 1, 1});
  ok.op(Type::f32, {1 << 20, 1 << 10, 1, 1}, {b});
  CHECK(peak_bytes(ok, 32) == 2 * 4 * (std::int64_t{1} << 30));
}

// GPU backends through the reserve-graph model (docs/formulas.md §5.1a). Hand-computed from the pinned llama.cpp b10454:
// Llama-3.1-8B shape (n_embd 4096, 32 heads, 8 KV heads of 128), n_ubatch 512, one sequence, f16 cache.
TEST_CASE("GPU compute buffer from the reserve graph: the host buffer holds every graph input and the token rows") {
  const ModelSpec& m = kvtest::catalog().model("llama-3.1-8b");
  const auto s = context_shape(m, kvtest::engine(), 512, 1, false, 512, 2048, false);
  const GgmlType& f16 = kvtest::type("f16");
  // FA off: inp_embd f32 4096·512·4 (build rule embd_input_select) + the token rows looked up on the CPU, the same
  // size + the f32 KQ mask 512·512·4 + V's SET_ROWS indices (transposed V: 512·128·8 i64, 4 MiB) + K's (512 i64)
  // + inp_tokens, positions and output ids (512 i32 each); every size a multiple of the 32-byte alignment.
  const Bytes mib = 1 << 20;
  auto c = compute_bytes(m, kvtest::engine(), s, f16, f16, false, kvtest::cuda());
  CHECK(c.from_graph);
  CHECK(c.host.bytes == 8 * mib + 8 * mib + 1 * mib + 4 * mib + 4096 + 3 * 2048);
  // FA on: the mask is f16 (build rule kq_mask_f16: 512·512·2) and V is written by row (512 i64 indices)
  c = compute_bytes(m, kvtest::engine(), s, f16, f16, true, kvtest::cuda());
  CHECK(c.host.bytes == 8 * mib + 8 * mib + mib / 2 + 2 * 4096 + 3 * 2048);
  // Metal reads the inputs in place: the same host buffer
  CHECK(compute_bytes(m, kvtest::engine(), s, f16, f16, true, kvtest::engine().backend("metal")).host.bytes == c.host.bytes);
  // A build before SET_ROWS (rule kv_set_rows) and inp_embd's select (rule embd_input_select) writes the cache with a
  // ggml_cpy and has no index inputs: the token rows, the f32 mask and the i32 inputs; the CUDA log of this shape
  // (b2700-era, the test case above) prints 9.01 MiB
  EngineSpec old = kvtest::engine();
  old.build = 2459;
  const auto before = compute_bytes(m, old, s, f16, f16, false, kvtest::cuda());
  CHECK(before.host.bytes == 8 * mib + 1 * mib + 3 * 2048);
  // and at 8192 cells the KQ peak has no copy of the V indices beside it: the log's 560.00 MiB (the test case above)
  const auto s8k = context_shape(m, kvtest::engine(), 8192, 1, false, 512, 2048, false);
  CHECK(static_cast<double>(compute_bytes(m, old, s8k, f16, f16, false, kvtest::cuda()).device.bytes) / mib ==
        Approx(560.00).margin(0.005));
  // Pipeline parallelism (ggml-backend.cpp pass 5): four copies of each graph input on the host, the token rows once
  const auto pp = compute_bytes(m, kvtest::engine(), s, f16, f16, false, kvtest::cuda(), true, 4);
  CHECK(pp.host.bytes == 4 * (8 * mib + 1 * mib + 4 * mib + 4096 + 3 * 2048) + 8 * mib);
  // and on the device, four copies of each split input it reads, never freed: the token rows' copy (8 MiB), the mask
  // (1 MiB), the SET_ROWS indices (4 MiB + 4 KiB), positions and output ids (2 KiB each, 128-aligned)
  const auto one = compute_bytes(m, kvtest::engine(), s, f16, f16, false, kvtest::cuda());
  CHECK(pp.device.bytes >= one.device.bytes + 3 * (8 * mib + 1 * mib + 4 * mib + 4096 + 2 * 2048));
}

TEST_CASE("GPU compute buffer from the reserve graph: CUDA's flash attention holds f16 copies of a quantized cache") {
  // ggml-cuda/fattn.cu ggml_cuda_flash_attn_ext_get_alloc_size: at a 512-token ubatch the tile/MMA kernel needs f16 K
  // and V, allocated after the FA output (128·32·512·4 = 8 MiB): K and V views of 4096 cells · 8 heads · 128 in f16,
  // 8 MiB each, in every one of the 32 layers' FA nodes.
  const ModelSpec& m = kvtest::catalog().model("llama-3.1-8b");
  const auto s = context_shape(m, kvtest::engine(), 4096, 1, false, 512, 2048, false);
  GraphTarget cuda;
  cuda.inputs = GraphInputs::copied;
  cuda.fa_f16_scratch = true;
  auto extras = [&](const char* k, const char* v, const GraphTarget& target) {
    std::vector<std::int64_t> out;
    const auto g = reserve_graph(m, kvtest::engine(), s, kvtest::type(k), kvtest::type(v), true, target);
    REQUIRE(g);
    for (const auto& t : g->tensors())
      if (t.extra > 0) out.push_back(t.extra);
    return out;
  };
  CHECK(extras("q8_0", "q8_0", cuda) == std::vector<std::int64_t>(32, 16LL << 20));
  CHECK(extras("q8_0", "f16", cuda) == std::vector<std::int64_t>(32, 8LL << 20));
  CHECK(extras("f16", "f16", cuda).empty());  // the kernels read f16 directly
  GraphTarget vulkan = cuda;
  vulkan.fa_f16_scratch = false;
  CHECK(extras("q8_0", "q8_0", vulkan).empty());
}

TEST_CASE("GPU compute buffer with host weights: each op-offload copy lives beside its matmul only (ggml-backend.cpp pass 5)") {
  // Llama-3.1-8B at 4096 cells, FA off: the device peak is the attention's (KQ 4096·512·32·4 = 256 MiB and rows). A
  // host weight's copy is allocated at the start of its matmul's split and freed after the matmul, so it raises the
  // peak only by what it outgrows there.
  const ModelSpec& m = kvtest::catalog().model("llama-3.1-8b");
  const auto s = context_shape(m, kvtest::engine(), 4096, 1, false, 512, 2048, false);
  const GgmlType& f16 = kvtest::type("f16");
  const std::int64_t mib = 1 << 20;
  GraphTarget cuda;
  cuda.inputs = GraphInputs::copied;
  auto peak = [&](std::vector<HostWeight> weights) {
    GraphTarget t = cuda;
    t.host.weights = &weights;
    const auto g = reserve_graph(m, kvtest::engine(), s, f16, f16, false, t);
    REQUIRE(g);
    CHECK(g->unplaced() == 0);
    return ggml_graph::peak_bytes(*g, 128);
  };
  const std::int64_t base = peak({});
  // a 14 MiB ffn_down copy (4096 x 14336 in Q4_0) of layer 3 stays under the attention peak
  CHECK(peak({{3, "ffn_down", 14336LL * 4096 / 32 * 18}}) == base);
  // the output matrix in RAM: at its matmul the device holds the copy, result_norm (4096·512·4 = 8 MiB, an output)
  // and the logits (128256·512·4 = 250.5 MiB); every other tensor is freed by then
  const std::int64_t logits_block = 8 * mib + 128256LL * 512 * 4;
  CHECK(peak({{32, "output", 1024 * mib}}) == 1024 * mib + logits_block);
  CHECK(peak({{32, "output", 2048 * mib}}) == 2048 * mib + logits_block);
  // a weight placed in every repeating layer (HostWeight::kEveryLayer, what weight_bytes gives the planner) is copied
  // before each layer's matmul: a small one changes neither peak, a large one rises with its own layer's live set
  CHECK(peak({{HostWeight::kEveryLayer, "ffn_up", 14 * mib}, {32, "output", 1024 * mib}}) == 1024 * mib + logits_block);
  CHECK(peak({{HostWeight::kEveryLayer, "ffn_up", 2048 * mib}}) == peak({{5, "ffn_up", 2048 * mib}}));
  // copies of several layers never add up: only one is live at a time
  CHECK(peak({{0, "ffn_up", 1024 * mib}, {1, "ffn_up", 1024 * mib}, {2, "attn_q", 1024 * mib}}) ==
        peak({{1, "ffn_up", 1024 * mib}}));
  // the KV cache in RAM (layers below kv_layers): each attention reads copies of its K and V views, allocated at the
  // start of the split after the CPU's SET_ROWS, both live at the KQ product. At 32768 cells they are 32768 · 1024 ·
  // 2 = 64 MiB each, too large for the holes the freed rows leave, so they add 128 MiB to the KQ peak (2 GiB + rows).
  const auto s_long = context_shape(m, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  GraphTarget kv_in_ram = cuda;
  const auto g_device_kv = reserve_graph(m, kvtest::engine(), s_long, f16, f16, false, kv_in_ram);
  kv_in_ram.host.kv_layers = 32;
  const auto g_host_kv = reserve_graph(m, kvtest::engine(), s_long, f16, f16, false, kv_in_ram);
  REQUIRE((g_device_kv && g_host_kv));
  CHECK(ggml_graph::peak_bytes(*g_host_kv, 128) == ggml_graph::peak_bytes(*g_device_kv, 128) + 128 * mib);
  // and the CPU writes that cache from copies of the rows the device computed, K and V in f32 (1024·512·4 = 2 MiB
  // each), in the host buffer for the write's split; the token rows (4096·512·4 = 8 MiB) are freed by then, so the host
  // buffer keeps the larger of the two, not their sum (the open_llama_7b_v2 -ngl 0 log of tests/validation/gpu_logs:
  // 1 MiB mask + 8 + 8 MiB of MHA rows = 17.00 MiB)
  CHECK(ggml_graph::host_bytes(*g_host_kv, 32) == ggml_graph::host_bytes(*g_device_kv, 32));
  // A Qwen3-0.6B shape (n_embd 1024, 8 KV heads of 128): its K and V rows (2 + 2 MiB) outgrow the 2 MiB of token
  // rows, so a cache in RAM adds 2 MiB to the host buffer (the Qwen3-0.6B -ngl 7 log of tests/validation/gpu_logs:
  // 43.51 MiB against 41.51 with every layer on the GPU)
  const ModelSpec& small = kvtest::catalog().model("qwen3-0.6b");
  const auto s_small = context_shape(small, kvtest::engine(), 20224, 1, false, 512, 2048, true);
  GraphTarget small_ram = cuda;
  small_ram.host.kv_layers = 21;
  const auto small_device = reserve_graph(small, kvtest::engine(), s_small, f16, f16, true, cuda);
  const auto small_host = reserve_graph(small, kvtest::engine(), s_small, f16, f16, true, small_ram);
  REQUIRE((small_device && small_host));
  CHECK(ggml_graph::host_bytes(*small_host, 32) == ggml_graph::host_bytes(*small_device, 32) + 2 * mib);
  // a weight the graph has no matmul for (a fused projection) is counted at the peak instead
  std::vector<HostWeight> fused{{0, "attn_qkv", 512 * mib}};
  GraphTarget t = cuda;
  t.host.weights = &fused;
  const auto g = reserve_graph(m, kvtest::engine(), s, f16, f16, false, t);
  REQUIRE(g);
  CHECK(g->unplaced() == 512 * mib);
}

TEST_CASE("build rule moe_batched: before it, one MUL_MAT_ID per chosen expert slot (llama.cpp up to April 2024)") {
  // llama.cpp's build_llama MoE branch until about April 2024 (data/engines/llama.cpp.yaml moe_batched): for each of
  // the n_expert_used slots, ggml_mul_mat_id(..., selected_experts, i, cur) gives one [expert_ff, n_tokens] product
  // for up and one for gate; since, one MUL_MAT_ID over every slot gives [expert_ff, n_expert_used, n_tokens]. With
  // FA and the logits on another device, those products are the graph's largest tensors (Mixtral: 14336 x 512 x 4 B
  // = 28 MiB per slot, two slots).
  const ModelSpec& m = kvtest::catalog().model("mixtral-8x7b-instruct-v0.1");
  const GgmlType& f16 = kvtest::type("f16");
  const auto s = context_shape(m, kvtest::engine(), 512, 1, false, 512, 512, true);
  GraphTarget t;
  t.inputs = GraphInputs::copied;
  t.holds_output = false;
  auto largest = [&](const EngineSpec& engine) {
    const auto g = reserve_graph(m, engine, s, f16, f16, true, t);
    REQUIRE(g);
    std::int64_t out = 0;
    for (const auto& x : g->tensors())
      if (x.view_of < 0) out = std::max(out, x.bytes());
    return out;
  };
  EngineSpec old = kvtest::engine();
  old.build = 1880;
  CHECK(largest(kvtest::engine()) == 14336LL * 2 * 512 * 4);
  CHECK(largest(old) == 14336LL * 512 * 4);
}

namespace {
// What compute_bytes takes from a reserve graph (pipeline parallelism keeping n_copies of each input).
struct GraphFigures {
  std::int64_t peak = 0, host = 0, inputs = 0, unplaced = 0;
  bool operator==(const GraphFigures&) const = default;
};
std::optional<GraphFigures> graph_figures(ggml_graph::Graph g, int n_copies) {
  if (n_copies > 1) g.keep_inputs();
  const auto peak = ggml_graph::proven_peak_bytes(g, 128);
  if (!peak) return std::nullopt;
  return GraphFigures{*peak, ggml_graph::host_bytes(g, 32, n_copies), ggml_graph::input_bytes(g, 128), g.unplaced()};
}
struct GraphCase {
  const char *k, *v;
  bool fa;
  int ctx, n_seq;
  bool unified;
  int ubatch;
  bool swa_full;
  GraphInputs inputs;
  bool holds_output;
  int n_copies;
  int offload;  // 0: everything on the GPU; 1: half the layers in RAM (-ngl); 2: a third of the experts (--n-cpu-moe);
                // 3: explicit host weights in the first half of the layers and the KV of the first quarter
};
}  // namespace

// The cut is proven by ggml_graph::proven_peak_bytes or not used; this checks the proof against the whole graph over
// the catalog: every model, GPU (inputs copied, read in place) and CPU targets, FA on and off, quantized caches,
// several sequences, SWA and hybrid models, partial offload, a device without the output, pipeline copies.
TEST_CASE("reserve graph with alike layers cut out: the whole graph's figures to the byte, for every catalog model") {
  const GraphCase cases[] = {
      {"f16", "f16", true, 4096, 1, false, 512, false, GraphInputs::copied, true, 1, 0},
      {"q8_0", "q8_0", false, 32768, 1, false, 512, false, GraphInputs::copied, true, 1, 0},
      {"q4_0", "q8_0", true, 8192, 4, false, 256, false, GraphInputs::copied, false, 4, 0},
      {"f16", "f16", true, 16384, 1, false, 512, true, GraphInputs::copied, true, 1, 1},
      {"q8_0", "f16", true, 4096, 2, true, 1024, false, GraphInputs::copied, true, 1, 2},
      {"f16", "f16", false, 4096, 1, false, 512, false, GraphInputs::copied, true, 1, 3},
      {"f32", "f32", true, 2048, 1, false, 512, false, GraphInputs::in_buffer, true, 1, 0},
      {"q8_0", "q8_0", false, 3000, 1, false, 128, false, GraphInputs::in_buffer, true, 1, 0},
      {"q8_0", "q8_0", true, 65536, 1, false, 512, false, GraphInputs::read_in_place, true, 1, 0},
  };
  const WeightFormat& q4 = kvtest::catalog().weight_format("Q4_K_M");
  int graphs = 0, cut = 0, proven = 0, whole_built = 0, several_cuts = 0;
  std::set<std::string> archs_cut, unproven;
  for (const ModelSpec& m : kvtest::catalog().models) {
    for (const GraphCase& c : cases) {
      CAPTURE(m.id, c.k, c.v, c.fa, c.ctx, c.offload, static_cast<int>(c.inputs));
      const auto s = context_shape(m, kvtest::engine(), c.ctx, c.n_seq, c.unified, c.ubatch, 2048, c.swa_full, c.fa);
      GraphTarget t;
      t.inputs = c.inputs;
      t.fa_f16_scratch = c.inputs == GraphInputs::copied;
      t.holds_output = c.holds_output;
      std::vector<HostWeight> host;
      if (c.offload == 1 || c.offload == 2) {
        const auto placement = c.offload == 1 ? Placement::for_request(m, m.layers / 2, std::nullopt)
                                              : Placement::for_request(m, std::nullopt, m.moe ? m.layers / 3 : 0);
        host = weight_bytes(m, q4, kvtest::engine(), kvtest::cuda(), placement).host_weights;
        t.host.kv_layers = placement.first_gpu_layer;
      } else if (c.offload == 3) {
        for (int il = 0; il < m.layers / 2; ++il) host.push_back({il, m.moe ? "ffn_up_exps" : "ffn_up", 1LL << 30});
        host.push_back({m.layers * 3 / 4, "attn_q", 1LL << 28});  // one layer unlike its neighbours
        t.host.kv_layers = m.layers / 4;
      }
      if (!host.empty()) t.host.weights = &host;
      auto build = [&](int cut_factor) {
        return reserve_graph(m, kvtest::engine(), s, kvtest::type(c.k), kvtest::type(c.v), c.fa, t, cut_factor);
      };
      const auto whole = build(0);
      if (!whole) continue;
      ++graphs;
      REQUIRE(!whole->cut());
      const auto expected = graph_figures(*whole, c.n_copies);
      REQUIRE(expected);
      bool was_cut = false, was_proven = false;
      for (const int factor : {1, 2}) {  // compute_bytes' order
        const auto part = build(factor);
        REQUIRE(part);
        if (!part->cut()) continue;
        was_cut = true;
        CHECK(part->tensors().size() < whole->tensors().size());
        const auto got = graph_figures(*part, c.n_copies);
        if (!got) continue;
        was_proven = true;
        several_cuts += part->cuts().size() > 1 ? 1 : 0;
        CHECK(got->peak == expected->peak);
        CHECK(got->host == expected->host);
        CHECK(got->inputs == expected->inputs);
        CHECK(got->unplaced == expected->unplaced);
      }
      cut += was_cut ? 1 : 0;
      proven += was_proven ? 1 : 0;
      if (was_proven) archs_cut.insert(m.arch);
      if (was_cut && !was_proven) unproven.insert(m.id), ++whole_built;
    }
  }
  std::string unproven_list;
  for (const auto& id : unproven) unproven_list += " " + id;
  WARN("reserve graphs " << graphs << ", cut " << cut << ", proven " << proven << " (" << archs_cut.size()
                         << " architectures, " << several_cuts << " with several cuts); whole graph " << whole_built << " times, for:" << unproven_list);
  CHECK(cut >= graphs * 3 / 4);
  CHECK(several_cuts > 0);  // KV in RAM for the first layers, host weights in the first half: runs cut one by one
  // where no cut is proven, ggml-alloc's free blocks have not settled within the kept periods (a few hybrid and Mamba
  // graphs, listed above): compute_bytes builds those whole. Graphs with KV in RAM are cut since each layer's K/V rows
  // for the CPU's cache write (transient host tensors) may repeat in a period: 307 -> 373 of 389 proven (2026-12-03).
  CHECK(proven >= cut * 9 / 10);
  for (const char* arch : {"llama", "qwen3moe", "gemma3", "qwen3next", "deepseek2", "gpt-oss", "granitehybrid"})
    CHECK(archs_cut.count(arch) == 1);
}

TEST_CASE("reserve graph cut: a period whose placement does not repeat is not proven") {
  using namespace kvplan::ggml_graph;
  // Each period reads the previous one's output and leaves one tensor no node reads (ggml-alloc never frees it): the
  // buffer grows with every period, so the kept periods cannot stand for the left-out ones.
  auto build = [](bool leak) {
    Graph g;
    int cur = g.input(Type::f32, {256, 1, 1, 1});
    std::vector<int> starts;
    for (int period = 0; period < 6; ++period) {
      starts.push_back(static_cast<int>(g.tensors().size()));
      const int wide = g.op(Type::f32, {1024, 1, 1, 1}, {cur});
      if (leak) g.op(Type::f32, {64, 1, 1, 1}, {cur});
      cur = g.op(Type::f32, {256, 1, 1, 1}, {wide});
    }
    g.mark_output(g.op(Type::f32, {256, 1, 1, 1}, {cur}));
    g.add_cut({starts[1], starts[2], starts[3], starts[4], starts[5]});
    return g;
  };
  CHECK(proven_peak_bytes(build(false), 32).has_value());
  CHECK_FALSE(proven_peak_bytes(build(true), 32).has_value());
  CHECK_THROWS_AS(peak_bytes(build(false), 32), std::logic_error);
}

TEST_CASE("compute_type_key: cache types with one key give the same compute figures (the ranker's memo shares them)") {
  const EngineSpec& e = kvtest::engine();
  const WeightFormat& q4 = kvtest::catalog().weight_format("Q4_K_M");
  struct Setting {
    const char* backend;
    bool fa;
    int kv_layers_in_ram;  // the first layers' KV in RAM (op offload), with the first half's weights
  };
  const Setting settings[] = {{"cuda", true, 0}, {"cuda", false, 0}, {"cuda", true, 2}, {"cpu", true, 0}, {"metal", false, 0}};
  int groups_shared = 0;
  for (const ModelSpec& m : kvtest::catalog().models) {
    const auto layers = layer_caches(m, e);
    for (const Setting& st : settings) {
      CAPTURE(m.id, st.backend, st.fa, st.kv_layers_in_ram);
      const BackendSpec& b = e.backend(st.backend);
      const auto shape = context_shape(m, e, 8192, 1, false, 512, 2048, false, st.fa);
      std::vector<HostWeight> host;
      HostResident in_ram;
      if (st.kv_layers_in_ram > 0) {
        host = weight_bytes(m, q4, e, b, Placement::for_request(m, m.layers / 2, std::nullopt)).host_weights;
        in_ram = {&host, st.kv_layers_in_ram};
      }
      const bool row_sizes = compute_reads_row_sizes(m, st.fa, st.kv_layers_in_ram);
      std::map<std::array<std::int64_t, 6>, std::pair<std::string, ComputeBytes>> first;  // key -> first pair and figures
      for (const std::string& k : e.cache_types) {
        for (const std::string& v : {std::string("f16"), std::string("q4_0"), k}) {
          const GgmlType &tk = e.type(k, "k"), &tv = e.type(v, "v");
          const auto a = compute_type_key(tk, row_sizes), c = compute_type_key(tv, row_sizes);
          const std::array<std::int64_t, 6> key{a[0], a[1], a[2], c[0], c[1], c[2]};
          const ComputeBytes got = compute_bytes(layers, m, e, shape, tk, tv, st.fa, b, true, 1, in_ram);
          auto [it, fresh] = first.emplace(key, std::make_pair(k + "/" + v, got));
          if (fresh) continue;
          ++groups_shared;
          INFO(k << "/" << v << " shares the key of " << it->second.first);
          CHECK(got.device.bytes == it->second.second.device.bytes);
          CHECK(got.device.high == it->second.second.device.high);
          CHECK(got.host.bytes == it->second.second.host.bytes);
          CHECK(got.host.high == it->second.second.host.high);
        }
      }
    }
  }
  CHECK(groups_shared > 1000);  // the key does merge pairs (q8_0 and q4_0 caches on a GPU with flash attention)
}

TEST_CASE("compute_bytes' cut hint changes the cost, never the figures; a hybrid's cut holds at twice its period") {
  const EngineSpec& e = kvtest::engine();
  int hybrids_at_two = 0;
  for (const ModelSpec& m : kvtest::catalog().models) {
    CAPTURE(m.id);
    const auto layers = layer_caches(m, e);
    const auto shape = context_shape(m, e, 16384, 1, false, 512, 2048, false, true);
    const GgmlType& q8 = kvtest::type("q8_0");
    const ComputeBytes plain = compute_bytes(layers, m, e, shape, q8, q8, true, kvtest::cuda());
    int hint = 0;
    const ComputeBytes learned = compute_bytes(layers, m, e, shape, q8, q8, true, kvtest::cuda(), true, 1, {}, &hint);
    int twice = 2;
    const ComputeBytes hinted = compute_bytes(layers, m, e, shape, q8, q8, true, kvtest::cuda(), true, 1, {}, &twice);
    for (const ComputeBytes* got : {&learned, &hinted}) {
      CHECK(got->device.bytes == plain.device.bytes);
      CHECK(got->device.high == plain.device.high);
      CHECK(got->host.bytes == plain.host.bytes);
    }
    CHECK((hint == 0 || hint == 1 || hint == 2));
    if (m.arch == "granitehybrid" && hint == 2) ++hybrids_at_two;
  }
  CHECK(hybrids_at_two > 0);  // Granite 4.0-H: the cut by one period is not proven, by two it is
}
