// GGUF input: hostile-input handling and the model read from it, against hand-computed bytes.
#include <catch2/catch.hpp>

#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "gguf_writer.hpp"
#include "helpers.hpp"
#include "memory/weights.hpp"

using namespace kvplan;
namespace fs = std::filesystem;

namespace {
constexpr std::uint32_t F32 = 0, F16 = 1, Q8_0 = 8;

// A 2-layer llama: n_embd 256, 4 heads, 2 KV heads (head 64), ff 512, vocab 1000; f16 matrices, q8_0 FFN.
kvtest::GgufBuilder tiny_llama(bool with_output = true) {
  kvtest::GgufBuilder g;
  g.str("general.architecture", "llama");
  g.str("general.name", "tiny");
  g.u32("general.file_type", 7);
  g.u32("llama.block_count", 2);
  g.u32("llama.embedding_length", 256);
  g.u32("llama.attention.head_count", 4);
  g.u32("llama.attention.head_count_kv", 2);
  g.u32("llama.feed_forward_length", 512);
  g.u32("llama.context_length", 4096);
  g.tensor("token_embd.weight", F16, {256, 1000}, 256 * 1000 * 2);
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    g.tensor(b + "attn_norm.weight", F32, {256}, 1024);
    g.tensor(b + "attn_q.weight", F16, {256, 256}, 131072);
    g.tensor(b + "attn_k.weight", F16, {256, 128}, 65536);
    g.tensor(b + "attn_v.weight", F16, {256, 128}, 65536);
    g.tensor(b + "attn_output.weight", F16, {256, 256}, 131072);
    g.tensor(b + "ffn_norm.weight", F32, {256}, 1024);
    g.tensor(b + "ffn_gate.weight", Q8_0, {256, 512}, 256 / 32 * 34 * 512);
    g.tensor(b + "ffn_up.weight", Q8_0, {256, 512}, 256 / 32 * 34 * 512);
    g.tensor(b + "ffn_down.weight", Q8_0, {512, 256}, 512 / 32 * 34 * 256);
  }
  g.tensor("output_norm.weight", F32, {256}, 1024);
  if (with_output) g.tensor("output.weight", F16, {256, 1000}, 512000);
  return g;
}

std::string temp(const std::string& name) { return (fs::temp_directory_path() / ("kvplan_gguf_" + name)).string(); }

void expect_input_error(const std::vector<std::uint8_t>& b, const std::string& fragment) {
  try {
    parse_gguf_header(b.data(), b.size(), b.size(), "test.gguf");
    FAIL("accepted: " << fragment);
  } catch (const InputError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("a GGUF header gives the architecture and the exact tensors") {
  const std::string path = temp("tiny.gguf");
  tiny_llama().write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  CHECK(spec->arch == "llama");
  CHECK(spec->name == "tiny");
  CHECK(spec->layers == 2);
  CHECK(spec->embd == 256);
  CHECK(spec->heads == 4);
  CHECK(spec->kv_heads == 2);
  CHECK(spec->head_dim_k == 64);
  CHECK(spec->vocab == 1000);
  CHECK(spec->ctx_native == 4096);
  CHECK(spec->file_format == "Q8_0");
  CHECK_FALSE(spec->tied_embeddings);
  // Weights on CUDA: every tensor but token_embd, each padded to 128 B. A q8_0 row of 256 is 272 B;
  // gate/up (ne0 256, not a multiple of 512) get one tail of row(q8_0, 256) = 272 B; down (ne0 512) none.
  //   per layer: norms 2×1024, q/o 2×131072, k/v 2×65536,
  //   gate/up 2×PAD(272·512 + 272, 128) = 2×139648, down 544·256 = 139264
  //   = 2048 + 262144 + 131072 + 279296 + 139264 = 813824; ×2 layers = 1627648; + output_norm 1024 + output 512000
  const auto w = weight_bytes(*spec, kvtest::catalog().weight_format("Q8_0"), kvtest::engine(), kvtest::cuda());
  CHECK(w.device.bytes == 1627648 + 1024 + 512000);
  CHECK(w.device.unpadded == 2 * (2048 + 262144 + 131072 + 3 * 139264) + 1024 + 512000);
  CHECK(w.device.accuracy == Accuracy::exact);
  CHECK(w.host.bytes == 512000);  // token_embd in RAM
  // KV: 2 layers × 128 wide f16 K and V at 4096 cells = 2·2·4096·256 B = 4 MiB
  Request r;
  r.gpu = "8GB";
  r.model = path;
  r.model_spec = spec;
  r.ctx_size = 4096;
  r.cache_type_k = r.cache_type_v = "f16";
  r.flash_attn = "on";
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  CHECK(p.options.front().sum("k_cache") + p.options.front().sum("v_cache") == 4LL << 20);
  CHECK(p.options.front().weights == "Q8_0");
  r.weights = "Q4_K_M";
  CHECK_THROWS_AS(plan(kvtest::catalog(), r), InputError);  // --weights disagrees with the file
  fs::remove(path);
}

TEST_CASE("a tied GGUF copies token_embd to the GPU as the output") {
  const std::string path = temp("tied.gguf");
  tiny_llama(false).write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  CHECK(spec->tied_embeddings);
  const auto w = weight_bytes(*spec, kvtest::catalog().weight_format("Q8_0"), kvtest::engine(), kvtest::cuda());
  CHECK(w.device.bytes == 1627648 + 1024 + 512000);  // the copy replaces output.weight
  fs::remove(path);
}

TEST_CASE("hostile GGUF input: every truncation and absurd count is a clear error, never a crash") {
  const auto good = tiny_llama().bytes();
  // every prefix of the header
  for (std::size_t n = 0; n < 1200; n += 7) {
    std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    CHECK_THROWS_AS(parse_gguf_header(cut.data(), cut.size(), cut.size(), "cut.gguf"), InputError);
  }
  auto bad = good;
  std::memcpy(bad.data(), "GGML", 4);
  expect_input_error(bad, "no GGUF magic");
  bad = good;
  bad[4] = 9;  // version
  expect_input_error(bad, "unsupported version 9");
  bad = good;
  const std::uint64_t huge = 1ULL << 60;
  std::memcpy(bad.data() + 16, &huge, 8);  // metadata count
  expect_input_error(bad, "metadata entries cannot fit");
  bad = good;
  std::memcpy(bad.data() + 8, &huge, 8);  // tensor count
  expect_input_error(bad, "tensors cannot fit");
  kvtest::GgufBuilder arr;
  arr.u32_array("x", {1, 2, 3});
  auto a = arr.bytes();
  std::memcpy(a.data() + 24 + 8 + 1 + 4 + 4, &huge, 8);  // the array's length
  expect_input_error(a, "cannot fit in the file");
}

TEST_CASE("tensor data past the end of the file is refused") {
  auto b = tiny_llama().bytes();
  b.resize(b.size() - 4096);
  const std::string path = temp("short.gguf");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  try {
    load_model_file(path, kvtest::catalog());
    FAIL("accepted a truncated file");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("outside the file") != std::string::npos);
  }
  fs::remove(path);
}

TEST_CASE("split GGUF files are read together") {
  auto g1 = tiny_llama();
  g1.u32("split.count", 2);
  // the second split holds one more tensor-less header with the same split.count
  kvtest::GgufBuilder g2;
  g2.u32("split.count", 2);
  g2.tensor("extra.weight", F32, {256}, 1024);
  const std::string base = temp("split");
  g1.write(base + "-00001-of-00002.gguf");
  g2.write(base + "-00002-of-00002.gguf");
  const auto spec = load_model_file(base + "-00001-of-00002.gguf", kvtest::catalog());
  CHECK(spec->file_paths.size() == 2);
  CHECK(spec->file_tensors.size() == 2 * 9 + 3 + 1);
  fs::remove(base + "-00002-of-00002.gguf");
  CHECK_THROWS_AS(load_model_file(base + "-00001-of-00002.gguf", kvtest::catalog()), InputError);  // a split is missing
  fs::remove(base + "-00001-of-00002.gguf");
}

TEST_CASE("MLA GGUF: one 576-wide latent K per layer and no V (PR #19067; docs/formulas.md §2)") {
  kvtest::GgufBuilder g;
  g.str("general.architecture", "deepseek2");
  g.u32("deepseek2.block_count", 27);
  g.u32("deepseek2.embedding_length", 2048);
  g.u32("deepseek2.attention.head_count", 16);
  g.u32("deepseek2.attention.head_count_kv", 1);
  g.u32("deepseek2.attention.key_length", 576);
  g.u32("deepseek2.attention.value_length", 512);
  g.u32("deepseek2.attention.key_length_mla", 192);
  g.u32("deepseek2.attention.value_length_mla", 128);
  g.u32("deepseek2.attention.kv_lora_rank", 512);
  g.u32("deepseek2.rope.dimension_count", 64);
  g.u32("deepseek2.context_length", 163840);
  g.tensor("token_embd.weight", F16, {2048, 102400}, 2048ULL * 102400 * 2);
  const std::string path = temp("mla.gguf");
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  REQUIRE(spec->mla);
  CHECK_FALSE(spec->mla->legacy);
  const auto s = context_shape(*spec, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  CHECK(kv.k.bytes == 1019215872LL);  // 972.0 MiB
  CHECK(kv.v.bytes == 0);
  const auto q8 = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("q8_0"), kvtest::type("q8_0"), true, kvtest::cuda());
  CHECK(q8.k.unpadded == 541458432LL);  // 516.375 MiB
  CHECK(q8.k.bytes == 541472256LL);     // CUDA: 576 % 512 != 0 adds 476 B per layer, then PAD 128
  fs::remove(path);
}

// DeepSeek-V3.2 (b10454 src/models/deepseek32.cpp, src/llama-kv-cache-dsa.cpp): the MLA latent plus, in a second cache of
// the same cells and type_k, one indexer key of attention.indexer.key_length per layer; the three indexer keys are
// required, the indexer head must hold the rope part, and the architecture runs only as MLA.
TEST_CASE("DSA GGUF: the lightning indexer's keys beside the MLA latent, in K") {
  auto write = [](const std::string& path, bool mla, int key_length, bool top_k) {
    kvtest::GgufBuilder g;
    g.str("general.architecture", "deepseek32");
    g.u32("deepseek32.block_count", 4);
    g.u32("deepseek32.embedding_length", 1024);
    g.u32("deepseek32.attention.head_count", 8);
    g.u32("deepseek32.attention.head_count_kv", 1);
    g.u32("deepseek32.attention.key_length", 576);
    g.u32("deepseek32.attention.value_length", 512);
    if (mla) {
      g.u32("deepseek32.attention.key_length_mla", 192);
      g.u32("deepseek32.attention.value_length_mla", 128);
    }
    g.u32("deepseek32.attention.kv_lora_rank", 512);
    g.u32("deepseek32.rope.dimension_count", 64);
    g.u32("deepseek32.attention.indexer.head_count", 16);
    g.u32("deepseek32.attention.indexer.key_length", key_length);
    if (top_k) g.u32("deepseek32.attention.indexer.top_k", 2048);
    g.u32("deepseek32.context_length", 163840);
    g.tensor("token_embd.weight", F16, {1024, 1000}, 1024 * 1000 * 2);
    g.write(path);
  };
  const std::string path = temp("dsa.gguf");
  write(path, true, 128, true);
  const auto spec = load_model_file(path, kvtest::catalog());
  REQUIRE(spec->mla);
  CHECK(spec->mla->indexer_key_length == 128);
  CHECK(spec->mla->indexer_heads == 16);
  CHECK(spec->mla->indexer_top_k == 2048);
  const auto s = context_shape(*spec, kvtest::engine(), 8192, 2, false, 512, 2048, false);  // 2 streams of 4096 cells
  REQUIRE(s.n_ctx_seq == 4096);
  const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  CHECK(kv.k.bytes == 4LL * 2 * 4096 * (576 + 128) * 2);
  CHECK(kv.v.bytes == 0);
  const auto q4 = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("q4_0"), kvtest::type("q4_0"), true, kvtest::cuda());
  CHECK(q4.k.unpadded == 4LL * 2 * 4096 * (576 + 128) / 32 * 18);  // both caches in type_k
  for (auto [mla, key_length, top_k, field] : {std::tuple{false, 128, true, "key_length_mla"}, std::tuple{true, 32, true, "indexer.key_length"},
                                               std::tuple{true, 128, false, "indexer.top_k"}}) {
    INFO(field);
    write(path, mla, key_length, top_k);
    try {
      load_model_file(path, kvtest::catalog());
      FAIL("loaded a deepseek32 GGUF llama.cpp refuses");
    } catch (const InputError& e) {
      CHECK(e.value().find(field) != std::string::npos);  // the GGUF key; the field is the file
    }
  }
  fs::remove(path);
}

TEST_CASE("recurrent state: f32 per sequence, independent of context (src/llama-memory-recurrent.cpp; docs/formulas.md §2)") {
  // A Qwen3-Next-shaped hybrid: 48 layers, attention every 4th (12 layers, 2 KV heads × 256),
  // 36 gated delta-net layers with d_conv 4, d_inner 4096, d_state 128, n_group 16.
  kvtest::GgufBuilder g;
  g.str("general.architecture", "qwen3next");
  g.u32("qwen3next.block_count", 48);
  g.u32("qwen3next.embedding_length", 2048);
  g.u32("qwen3next.attention.head_count", 16);
  g.u32("qwen3next.attention.head_count_kv", 2);
  g.u32("qwen3next.attention.key_length", 256);
  g.u32("qwen3next.attention.value_length", 256);
  g.u32("qwen3next.context_length", 262144);
  g.u32("qwen3next.ssm.conv_kernel", 4);
  g.u32("qwen3next.ssm.inner_size", 4096);
  g.u32("qwen3next.ssm.state_size", 128);
  g.u32("qwen3next.ssm.group_count", 16);
  g.tensor("token_embd.weight", F16, {2048, 1000}, 2048 * 1000 * 2);
  const std::string path = temp("hybrid.gguf");
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  REQUIRE(spec->recurrent);
  int attention = 0;
  for (int il = 0; il < 48; ++il) attention += !spec->is_recurrent(il);
  CHECK(attention == 12);
  for (int n_seq : {1, 4}) {
    const auto s = context_shape(*spec, kvtest::engine(), 32768, n_seq, true, 512, 2048, false);
    const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
    // per sequence and layer: r = 3·(4096 + 2·16·128) = 24576 f32, s = 128·4096 = 524288 f32
    CHECK(kv.state.unpadded == 36LL * n_seq * (24576 + 524288) * 4);  // 75.4 MiB per sequence
    CHECK(kv.k.bytes + kv.v.bytes == 768LL << 20);                  // 12 · 32768 · (512+512) · 2 B
  }
  fs::remove(path);
}

TEST_CASE("Qwen3.5 GGUF: the MTP block is neither cached nor loaded (b10454 models/qwen35.cpp, create_memory filters)") {
  // Qwen3.5-27B's shape (config.json: 64 layers + mtp_num_hidden_layers 1, 4 KV heads x 256, linear_conv_kernel_dim 4,
  // 16 key heads and 48 value heads of 128): conversion/qwen.py writes block_count 65 and nextn_predict_layers 1.
  kvtest::GgufBuilder g;
  g.str("general.architecture", "qwen35");
  for (auto [k, v] : std::initializer_list<std::pair<const char*, std::uint32_t>>{
           {"qwen35.block_count", 65}, {"qwen35.nextn_predict_layers", 1}, {"qwen35.embedding_length", 5120},
           {"qwen35.attention.head_count", 24}, {"qwen35.attention.head_count_kv", 4}, {"qwen35.attention.key_length", 256},
           {"qwen35.attention.value_length", 256}, {"qwen35.context_length", 262144}, {"qwen35.ssm.conv_kernel", 4},
           {"qwen35.ssm.inner_size", 6144}, {"qwen35.ssm.state_size", 128}, {"qwen35.ssm.group_count", 16},
           {"qwen35.ssm.time_step_rank", 48}, {"qwen35.full_attention_interval", 4}})
    g.u32(k, v);
  g.tensor("token_embd.weight", F16, {5120, 1000}, 5120 * 1000 * 2);
  g.tensor("blk.63.attn_norm.weight", 0, {5120}, 5120 * 4);
  g.tensor("blk.64.attn_norm.weight", 0, {5120}, 5120 * 4);   // the MTP block: TENSOR_SKIP without load_mtp
  g.tensor("blk.64.nextn.eh_proj.weight", F16, {10240, 5120}, 10240LL * 5120 * 2);
  const std::string path = temp("qwen35.gguf");
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  CHECK(spec->layers == 65);  // -ngl still counts it (load_tensors: n_layer_all)
  CHECK(spec->mtp_layers == 1);
  int attention = 0, recurrent = 0;
  for (int il = 0; il < 65; ++il) attention += !spec->is_recurrent(il) && spec->kv_heads_at(il) > 0, recurrent += spec->is_recurrent(il);
  CHECK(attention == 16);  // il % 4 == 3 below 64; not the MTP block 64
  CHECK(recurrent == 48);
  for (const auto& t : spec->file_tensors) CHECK(t.name.rfind("blk.64.", 0) != 0);
  const auto s = context_shape(*spec, kvtest::engine(), 32768, 1, true, 512, 2048, false);
  const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  // per GDN layer: r = 3 * (6144 + 2*16*128) = 30720 f32, s = 128 * 6144 = 786432 f32
  CHECK(kv.state.unpadded == 48LL * (30720 + 786432) * 4);  // 149.6 MiB
  CHECK(kv.k.bytes + kv.v.bytes == 16LL * 32768 * 2 * 1024 * 2);  // 16 layers x 32768 x (1024 + 1024) x 2 B = 2 GiB
  fs::remove(path);
}

TEST_CASE("Nemotron-H GGUF: FFN-only layers hold neither KV nor state (b10454 models/nemotron-h.cpp, create_memory)") {
  // Nemotron-Nano-9B-v2's widths on the pattern "M-M*-M-" (conversion/nemotron.py: per-layer head_count_kv and
  // feed_forward_length): 3 Mamba-2, 1 attention and 3 FFN-only layers
  kvtest::GgufBuilder g;
  g.str("general.architecture", "nemotron_h");
  for (auto [k, v] : std::initializer_list<std::pair<const char*, std::uint32_t>>{
           {"nemotron_h.block_count", 7}, {"nemotron_h.embedding_length", 4480}, {"nemotron_h.attention.head_count", 40},
           {"nemotron_h.attention.key_length", 128}, {"nemotron_h.attention.value_length", 128},
           {"nemotron_h.context_length", 131072}, {"nemotron_h.ssm.conv_kernel", 4}, {"nemotron_h.ssm.inner_size", 10240},
           {"nemotron_h.ssm.state_size", 128}, {"nemotron_h.ssm.group_count", 8}, {"nemotron_h.ssm.time_step_rank", 128}})
    g.u32(k, v);
  g.u32_array("nemotron_h.attention.head_count_kv", {0, 0, 0, 8, 0, 0, 0});
  g.u32_array("nemotron_h.feed_forward_length", {0, 15680, 0, 0, 0, 15680, 15680});
  g.tensor("token_embd.weight", F16, {4480, 1000}, 4480 * 1000 * 2);
  const std::string path = temp("nemotron_h.gguf");
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  const auto counts = layer_counts(*spec);
  CHECK(counts.recurrent == 3);
  CHECK(counts.full == 1);
  CHECK(counts.none == 3);
  const auto s = context_shape(*spec, kvtest::engine(), 4096, 2, true, 512, 2048, false);
  const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  // per Mamba-2 layer and sequence: r = 3 (10240 + 2 8 128) = 36864, s = 128 x 10240 = 1310720 f32; 2 sequences
  CHECK(kv.state.unpadded == 3LL * 2 * (36864 + 1310720) * 4);
  CHECK(kv.k.bytes + kv.v.bytes == 1LL * 4096 * 2 * 1024 * 2);  // one attention layer, 8 x 128 wide, 4096 cells
  fs::remove(path);
}

TEST_CASE("Nemotron-H MoE GGUF: MoE layers hold neither KV nor state (b10454 models/nemotron-h-moe.cpp, create_memory)") {
  // conversion/nemotron.py for is_moe: feed_forward_length per layer (moe_intermediate_size on 'E', else 0) and the
  // expert keys; the pattern "MEM*EME" (Nemotron 3's shapes: 2688 wide, 2 KV heads of 128, Mamba-2 d_inner 4096)
  kvtest::GgufBuilder g;
  g.str("general.architecture", "nemotron_h_moe");
  for (auto [k, v] : std::initializer_list<std::pair<const char*, std::uint32_t>>{
           {"nemotron_h_moe.block_count", 7}, {"nemotron_h_moe.embedding_length", 2688},
           {"nemotron_h_moe.attention.head_count", 32}, {"nemotron_h_moe.attention.key_length", 128},
           {"nemotron_h_moe.attention.value_length", 128}, {"nemotron_h_moe.context_length", 262144},
           {"nemotron_h_moe.ssm.conv_kernel", 4}, {"nemotron_h_moe.ssm.inner_size", 4096}, {"nemotron_h_moe.ssm.state_size", 128},
           {"nemotron_h_moe.ssm.group_count", 8}, {"nemotron_h_moe.ssm.time_step_rank", 64}, {"nemotron_h_moe.expert_count", 128},
           {"nemotron_h_moe.expert_used_count", 6}, {"nemotron_h_moe.expert_feed_forward_length", 1856},
           {"nemotron_h_moe.expert_shared_feed_forward_length", 3712}, {"nemotron_h_moe.expert_shared_count", 1}})
    g.u32(k, v);
  g.u32_array("nemotron_h_moe.attention.head_count_kv", {0, 0, 0, 2, 0, 0, 0});
  g.u32_array("nemotron_h_moe.feed_forward_length", {0, 1856, 0, 0, 1856, 0, 1856});
  g.tensor("token_embd.weight", F16, {2688, 1000}, 2688 * 1000 * 2);
  const std::string path = temp("nemotron_h_moe.gguf");
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  REQUIRE(spec->moe);
  CHECK(spec->moe->expert_ff == 1856);
  CHECK(spec->moe->shared_ff == 3712);
  const auto counts = layer_counts(*spec);
  CHECK(counts.recurrent == 3);
  CHECK(counts.full == 1);
  CHECK(counts.none == 3);
  const auto s = context_shape(*spec, kvtest::engine(), 8192, 1, true, 512, 2048, false);
  const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  // per Mamba-2 layer: r = 3 (4096 + 2 8 128) = 18432, s = 128 x 4096 = 524288 f32
  CHECK(kv.state.unpadded == 3LL * (18432 + 524288) * 4);
  CHECK(kv.k.bytes + kv.v.bytes == 1LL * 8192 * 2 * 256 * 2);  // one attention layer, 2 x 128 wide
  fs::remove(path);
}

TEST_CASE("parallel hybrid rule: every layer holds attention KV and a Mamba-2 state (b10454 create_memory, Falcon-H1)") {
  // The shipped rule (data/engines/llama.cpp.yaml archs.falcon-h1: recurrent mamba2, attention parallel) on a
  // Falcon-H1-shaped parallel hybrid: 4 layers, 2 KV heads x 128, Mamba-2 d_inner 3072, d_state 256, 1 group, d_conv 4
  kvtest::GgufBuilder g;
  g.str("general.architecture", "falcon-h1");
  for (auto [k, v] : std::initializer_list<std::pair<const char*, std::uint32_t>>{
           {"falcon-h1.block_count", 4}, {"falcon-h1.embedding_length", 2048}, {"falcon-h1.attention.head_count", 8},
           {"falcon-h1.attention.head_count_kv", 2}, {"falcon-h1.attention.key_length", 128},
           {"falcon-h1.attention.value_length", 128}, {"falcon-h1.context_length", 16384}, {"falcon-h1.ssm.conv_kernel", 4},
           {"falcon-h1.ssm.inner_size", 3072}, {"falcon-h1.ssm.state_size", 256}, {"falcon-h1.ssm.group_count", 1},
           {"falcon-h1.ssm.time_step_rank", 48}})
    g.u32(k, v);
  g.tensor("token_embd.weight", F16, {2048, 1000}, 2048 * 1000 * 2);
  const std::string path = temp("falcon-h1.gguf");
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  REQUIRE(spec->recurrent);
  CHECK(spec->recurrent->parallel);
  const auto s = context_shape(*spec, kvtest::engine(), 4096, 1, true, 512, 2048, false);
  const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  CHECK(kv.k.bytes + kv.v.bytes == 4LL * 4096 * 2 * 256 * 2);  // every layer: 4096 cells x (256 + 256) x 2 B
  // every layer: r = 3 (3072 + 2 x 256) = 10752, s = 256 x 3072 = 786432 f32
  CHECK(kv.state.unpadded == 4LL * (10752 + 786432) * 4);
  fs::remove(path);
}

TEST_CASE("config.json input: fields used and assumed are reported") {
  const fs::path dir = fs::temp_directory_path() / "kvplan_config_test";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen2", "num_hidden_layers": 64, "hidden_size": 5120,
    "num_attention_heads": 40, "num_key_value_heads": 8, "intermediate_size": 27648, "vocab_size": 152064,
    "max_position_embeddings": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
  const auto spec = load_model_file(dir.string(), kvtest::catalog());
  CHECK(spec->arch == "qwen2");
  CHECK(spec->head_dim_k == 128);
  CHECK(spec->params > 32'000'000'000LL);
  CHECK(std::find(spec->fields_used.begin(), spec->fields_used.end(), "num_key_value_heads") != spec->fields_used.end());
  CHECK_FALSE(spec->fields_assumed.empty());  // head_dim and the parameter count were derived
  const auto s = context_shape(*spec, kvtest::engine(), 32768, 1, false, 512, 2048, false);
  const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("q8_0"), kvtest::type("q8_0"), true, kvtest::cuda());
  CHECK(kv.k.bytes + kv.v.bytes == 4563402752LL);  // the same as the catalog's Qwen2.5-Coder-32B
  // GLM-4.5-Air's config.json (data/models/glm.yaml sources): 46 layers + 1 MTP block, which conversion/glm.py writes as a
  // GGUF block with its own cache; one leading dense layer; 1 shared expert of 1408
  std::ofstream(dir / "config.json") << R"({"model_type": "glm4_moe", "num_hidden_layers": 46, "num_nextn_predict_layers": 1,
    "hidden_size": 4096, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 10944,
    "moe_intermediate_size": 1408, "n_routed_experts": 128, "num_experts_per_tok": 8, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "attention_bias": true, "use_qk_norm": false, "vocab_size": 151552,
    "max_position_embeddings": 131072, "tie_word_embeddings": false})";
  const auto glm = load_model_file(dir.string(), kvtest::catalog());
  CHECK(glm->arch == "glm4moe");
  CHECK(glm->layers == 47);
  REQUIRE(glm->moe);
  CHECK(glm->moe->shared_ff == 1408);
  CHECK(glm->moe->dense_lead == 1);
  const auto gs = context_shape(*glm, kvtest::engine(), 4096, 1, false, 512, 2048, false);
  const auto gkv = kv_cache_bytes(*glm, kvtest::engine(), gs, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  CHECK(gkv.k.bytes + gkv.v.bytes == 47LL * 8 * 128 * 2 * 2 * 4096);
  // DeepSeek-V3.2's shapes (data/models/deepseek.yaml IDX and MAX sources): 61 layers + the NextN block, which
  // conversion/deepseek.py DeepseekV32Model appends; neither cached nor loaded (deepseek32.cpp, create_memory filters)
  std::ofstream(dir / "config.json") << R"({"model_type": "deepseek_v32", "num_hidden_layers": 61, "num_nextn_predict_layers": 1,
    "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
    "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048, "vocab_size": 129280,
    "max_position_embeddings": 163840, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
  // MLA models take the parameter count from the safetensors index (here the V3.2 entry's 671,877,944,064 in bf16)
  std::ofstream(dir / "model.safetensors.index.json") << R"({"metadata": {"total_size": 1343755888128}, "weight_map": {}})";
  const auto dsa = load_model_file(dir.string(), kvtest::catalog());
  fs::remove(dir / "model.safetensors.index.json");
  CHECK(dsa->params == 671877944064LL);
  CHECK(dsa->arch == "deepseek32");
  CHECK(dsa->layers == 62);
  CHECK(dsa->mtp_layers == 1);
  REQUIRE(dsa->mla);
  CHECK(dsa->mla->indexer_key_length == 128);
  const auto ds = context_shape(*dsa, kvtest::engine(), 4096, 1, false, 512, 2048, false);
  const auto dkv = kv_cache_bytes(*dsa, kvtest::engine(), ds, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  CHECK(dkv.k.bytes == 61LL * 4096 * (576 + 128) * 2);
  CHECK(dkv.v.bytes == 0);
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen2", "num_hidden_layers": )";
  CHECK_THROWS_AS(load_model_file(dir.string(), kvtest::catalog()), InputError);
  std::ofstream(dir / "config.json") << R"({"model_type": "bert"})";
  CHECK_THROWS_AS(load_model_file(dir.string(), kvtest::catalog()), InputError);
  fs::remove_all(dir);
}

// Llama 4's config.json (data/models/llama4.yaml sources: MAX-L4, CFG-S, CFG-M): the text decoder under text_config,
// the dense FFN in intermediate_size_mlp and the experts in intermediate_size (conversion/llama.py Llama4Model), MoE
// every interleave_moe_layer_step layers, no_rope_layers as transformers' Llama4TextConfig writes its default
// ((il + 1) % 4 != 0: 1 = RoPE, chunked). The parameter counts are the catalog's hand-computed text-decoder totals.
TEST_CASE("Llama 4 config.json: text_config, interleaved MoE, chunked attention as b10454 applies them") {
  const fs::path dir = fs::temp_directory_path() / "kvplan_llama4_config_test";
  fs::create_directories(dir);
  auto config = [&](int experts, int step, int ctx, const std::string& no_rope) {
    std::ofstream(dir / "config.json") << fmt::format(R"({{"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
      "tie_word_embeddings": false, "vision_config": {{"hidden_size": 1408}},
      "text_config": {{"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 48, "num_local_experts": {},
        "num_experts_per_tok": 1, "interleave_moe_layer_step": {}, "vocab_size": 202048, "max_position_embeddings": {},
        "attention_chunk_size": 8192, "no_rope_layers": {}, "rope_scaling": {{"rope_type": "llama3", "factor": 16.0,
        "low_freq_factor": 1.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}}}}}})",
                                                      experts, step, ctx, no_rope);
  };
  std::string nope = "[";
  for (int il = 0; il < 48; ++il) nope += fmt::format("{}{}", il ? ", " : "", (il + 1) % 4 != 0 ? 1 : 0);
  nope += "]";
  for (const auto& [id, experts, step, ctx] : {std::tuple{"llama-4-scout-17b-16e-instruct", 16, 1, 10485760},
                                              std::tuple{"llama-4-maverick-17b-128e-instruct", 128, 2, 1048576}}) {
    INFO(id);
    config(experts, step, ctx, nope);
    const auto spec = load_model_file(dir.string(), kvtest::catalog());
    const ModelSpec& cat = kvtest::catalog().model(id);
    CHECK(spec->arch == "llama4");
    REQUIRE(spec->moe);
    CHECK(spec->moe->experts == experts);
    CHECK(spec->moe->expert_ff == 8192);
    CHECK(spec->moe->shared_ff == 8192);
    CHECK(spec->moe->layer_step == step);
    CHECK(spec->moe_layer_count() == 48 / step);
    REQUIRE(spec->swa);
    CHECK(spec->swa->window == 8192);
    CHECK(spec->swa->chunked);
    CHECK(std::find(spec->fields_used.begin(), spec->fields_used.end(), "no_rope_layers") != spec->fields_used.end());
    CHECK(spec->ctx_native == cat.ctx_native);
    CHECK(spec->params == cat.params);  // 107,769,861,120 and 400,711,848,960: the data's hand-computed totals
    const auto s = context_shape(*spec, kvtest::engine(), 32768, 1, true, 512, 2048, false);
    const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
    // 12 global layers x 32768 cells; 36 chunked layers x (8192 + 512 ubatch) cells (the iSWA cache); 8 x 128 x 2 B each
    CHECK(kv.k.bytes + kv.v.bytes == 12LL * 32768 * 8 * 128 * 2 * 2);
    CHECK(kv.swa_k.bytes + kv.swa_v.bytes == 36LL * (8192 + 512) * 8 * 128 * 2 * 2);
  }
  config(16, 1, 10485760, "[1, 0, 1]");  // a pattern llama.cpp does not follow is reported, not obeyed
  const auto odd = load_model_file(dir.string(), kvtest::catalog());
  CHECK(std::any_of(odd->fields_assumed.begin(), odd->fields_assumed.end(), [](const std::string& f) { return f.find("no_rope_layers") != std::string::npos; }));
  fs::remove_all(dir);
}

namespace {
std::vector<std::uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

TEST_CASE("fuzz crash corpus replays cleanly") {
  // Every input libFuzzer ever found (tests/fuzz/crashes/) and every seed must parse or be refused.
  int files = 0;
  for (const char* dir : {"tests/fuzz/crashes", "tests/fuzz/seeds"}) {
    const fs::path d = fs::path(KVPLAN_SOURCE_DIR) / dir;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (!e.is_regular_file() || e.path().extension() == ".md") continue;
      const auto b = read_all(e.path());
      INFO(e.path().string());
      ++files;
      try {
        const GgufHeader h = parse_gguf_header(b.data(), b.size(), b.size(), e.path().string());
        (void)model_from_gguf({h}, {e.path().string()}, kvtest::catalog(), kvtest::engine());
      } catch (const InputError&) {
      }
    }
  }
  CHECK(files > 0);
}

TEST_CASE("write fuzz seeds", "[.write-seeds]") {
  // Run by hand (kvplan_tests "[.write-seeds]") to refresh tests/fuzz/seeds/.
  const fs::path d = fs::path(KVPLAN_SOURCE_DIR) / "tests/fuzz/seeds";
  fs::create_directories(d);
  kvtest::GgufBuilder small;
  small.str("general.architecture", "llama");
  small.u32("llama.block_count", 1);
  small.u32("llama.embedding_length", 64);
  small.u32("llama.attention.head_count", 2);
  small.u32("llama.attention.head_count_kv", 1);
  small.u32("llama.context_length", 256);
  small.u32_array("llama.attention.sliding_window_pattern", {1});
  small.tensor("token_embd.weight", 1, {64, 8}, 64 * 8 * 2);
  small.tensor("blk.0.attn_q.weight", 8, {64, 64}, 64 / 32 * 34 * 64);
  small.write((d / "llama-small.gguf").string());
  kvtest::GgufBuilder mla;
  mla.str("general.architecture", "deepseek2");
  for (auto [k, v] : std::initializer_list<std::pair<const char*, std::uint32_t>>{
           {"deepseek2.block_count", 2}, {"deepseek2.embedding_length", 64}, {"deepseek2.attention.head_count", 2},
           {"deepseek2.attention.head_count_kv", 1}, {"deepseek2.attention.key_length", 96}, {"deepseek2.attention.value_length", 64},
           {"deepseek2.attention.key_length_mla", 48}, {"deepseek2.attention.kv_lora_rank", 64}, {"deepseek2.rope.dimension_count", 32},
           {"deepseek2.context_length", 512}})
    mla.u32(k, v);
  mla.tensor("token_embd.weight", 0, {64, 4}, 64 * 4 * 4);
  mla.write((d / "deepseek2-mla.gguf").string());
  kvtest::GgufBuilder hybrid;
  hybrid.str("general.architecture", "qwen3next");
  for (auto [k, v] : std::initializer_list<std::pair<const char*, std::uint32_t>>{
           {"qwen3next.block_count", 4}, {"qwen3next.embedding_length", 64}, {"qwen3next.attention.head_count", 2},
           {"qwen3next.attention.head_count_kv", 1}, {"qwen3next.attention.key_length", 32}, {"qwen3next.context_length", 512},
           {"qwen3next.ssm.conv_kernel", 4}, {"qwen3next.ssm.inner_size", 64}, {"qwen3next.ssm.state_size", 16},
           {"qwen3next.ssm.group_count", 2}})
    hybrid.u32(k, v);
  hybrid.tensor("token_embd.weight", 0, {64, 4}, 64 * 4 * 4);
  hybrid.write((d / "qwen3next-hybrid.gguf").string());
}

TEST_CASE("a tied model's output copy exists only when the output layer is on another device than token_embd") {
  const std::string path = temp("tied-cpu.gguf");
  tiny_llama(false).write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  const auto& fmt = kvtest::catalog().weight_format("Q8_0");
  const auto on_cpu = weight_bytes(*spec, fmt, kvtest::engine(), kvtest::engine().backend("cpu"));
  const auto on_gpu = weight_bytes(*spec, fmt, kvtest::engine(), kvtest::cuda());
  CHECK(on_gpu.device.unpadded - on_cpu.device.unpadded == 512000);  // the token_embd copy (f16 256 × 1000)
  fs::remove(path);
}

// A file's tensors placed from the layers' sums (placed_weights' common case) and one by one (sized with names) agree
// at every -ngl; a file that lists a layer out of order is placed one by one. Fails if the sums trusted the file's
// order (the reversed file's layer 1 would be counted as layer 0).
TEST_CASE("a GGUF's layers placed from their sums equal its tensors placed one by one, in any file order") {
  const auto& c = kvtest::catalog();
  const EngineSpec& e = kvtest::engine();
  kvtest::GgufBuilder reversed = tiny_llama();
  reversed.reverse_tensors();
  for (auto [name, file] : {std::pair{"in-order.gguf", tiny_llama()}, std::pair{"reversed.gguf", reversed}}) {
    const std::string path = temp(name);
    file.write(path);
    const auto spec = load_model_file(path, c);
    const SizedWeights by_sums = sized_weights(*spec, c.weight_format("Q8_0"), e, kvtest::cuda(), false);
    const SizedWeights one_by_one = sized_weights(*spec, c.weight_format("Q8_0"), e, kvtest::cuda(), true);
    const std::optional<SizedLayers> layers = sum_layers(by_sums, spec->layers);
    CHECK(layers.has_value() == (std::string(name) == "in-order.gguf"));
    for (int ngl = 0; ngl <= spec->layers + 1; ++ngl) {
      INFO(name << " -ngl " << ngl);
      const Placement p = Placement::for_request(*spec, ngl, std::nullopt);
      const WeightBytes x = placed_weights(by_sums, *spec, e, kvtest::cuda(), p, layers ? &*layers : nullptr),
                        y = placed_weights(one_by_one, *spec, e, kvtest::cuda(), p);
      CHECK(x.device.bytes == y.device.bytes);
      CHECK(x.device.unpadded == y.device.unpadded);
      CHECK(x.host.bytes == y.host.bytes);
      CHECK(x.host.unpadded == y.host.unpadded);
      CHECK(x.largest_host_matrix == y.largest_host_matrix);
      CHECK(x.host_weights == y.host_weights);
    }
    fs::remove(path);
  }
}

namespace {
// One attention block of n_embd 256, 4 heads, 2 KV heads of 64, f16 matrices: 2·1024 + 2·131072 + 2·65536 B.
constexpr std::int64_t kBlockBytes = 2 * 1024 + 2 * 131072 + 2 * 65536;
void attention_block(kvtest::GgufBuilder& g, int i) {
  const std::string b = "blk." + std::to_string(i) + ".";
  g.tensor(b + "attn_norm.weight", F32, {256}, 1024);
  g.tensor(b + "attn_q.weight", F16, {256, 256}, 131072);
  g.tensor(b + "attn_k.weight", F16, {256, 128}, 65536);
  g.tensor(b + "attn_v.weight", F16, {256, 128}, 65536);
  g.tensor(b + "attn_output.weight", F16, {256, 256}, 131072);
  g.tensor(b + "post_attention_norm.weight", F32, {256}, 1024);
}
void header(kvtest::GgufBuilder& g, const std::string& arch, int layers) {
  g.str("general.architecture", arch);
  g.u32(arch + ".block_count", static_cast<std::uint32_t>(layers));
  g.u32(arch + ".embedding_length", 256);
  g.u32(arch + ".attention.head_count", 4);
  g.u32(arch + ".attention.head_count_kv", 2);
  g.u32(arch + ".feed_forward_length", 512);
  g.u32(arch + ".context_length", 4096);
  g.tensor("token_embd.weight", F16, {256, 1000}, 512000);
  g.tensor("output_norm.weight", F32, {256}, 1024);
}
Bytes cpu_weights(const ModelSpec& m) {
  const auto w = weight_bytes(m, kvtest::catalog().weight_format("Q8_0"), kvtest::engine(), kvtest::engine().backend("cpu"));
  return w.device.unpadded + w.host.unpadded;
}
}  // namespace

TEST_CASE("glm4moe: the NextN block's tensors are not loaded but its layer is cached (src/models/glm4-moe.cpp TENSOR_SKIP)") {
  const std::string path = temp("glm4moe.gguf");
  kvtest::GgufBuilder g;
  header(g, "glm4moe", 3);
  g.u32("glm4moe.nextn_predict_layers", 1);
  g.tensor("output.weight", F16, {256, 1000}, 512000);
  for (int i = 0; i < 3; ++i) attention_block(g, i);
  g.tensor("blk.2.nextn.eh_proj.weight", F16, {512, 256}, 262144);
  g.tensor("blk.2.nextn.enorm.weight", F32, {256}, 1024);
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  CHECK(spec->layers == 3);
  // token_embd + output_norm + output + blocks 0 and 1; block 2 (the NextN block) is skipped whole
  CHECK(cpu_weights(*spec) == 512000 + 1024 + 512000 + 2 * kBlockBytes);
  const auto caches = layer_caches(*spec, kvtest::engine());
  CHECK(std::count_if(caches.begin(), caches.end(), [](const LayerCache& c) { return c.kind == LayerKind::full; }) == 3);
  fs::remove(path);
}

TEST_CASE("gemma3n: layers from 20 on have no cache, whatever the file says; the tied output is a second copy on the CPU") {
  const std::string path = temp("gemma3n.gguf");
  kvtest::GgufBuilder g;
  header(g, "gemma3n", 22);
  g.u32("gemma3n.attention.sliding_window", 512);
  g.u32("gemma3n.attention.shared_kv_layers", 10);  // ignored: llama.cpp hard-codes n_layer_kv_from_start = 20
  for (int i = 0; i < 22; ++i) attention_block(g, i);
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  CHECK(spec->shared_kv_from == 20);
  const auto caches = layer_caches(*spec, kvtest::engine());
  // period 5: il % 5 < 4 slides; layers 0..19 are cached: 16 sliding, 4 full
  CHECK(std::count_if(caches.begin(), caches.end(), [](const LayerCache& c) { return c.kind == LayerKind::sliding; }) == 16);
  CHECK(std::count_if(caches.begin(), caches.end(), [](const LayerCache& c) { return c.kind == LayerKind::full; }) == 4);
  CHECK(std::count_if(caches.begin(), caches.end(), [](const LayerCache& c) { return c.kind == LayerKind::none; }) == 2);
  // token_embd twice (the output copy is created first, so TENSOR_DUPLICATED finds nothing to reuse)
  CHECK(cpu_weights(*spec) == 2 * 512000 + 1024 + 22 * kBlockBytes);
  fs::remove(path);
}

TEST_CASE("Gemma 4 GGUF: per-layer sliding pattern and heads, shared KV layers, a tied output copy (b10454 models/gemma4.cpp)") {
  kvtest::GgufBuilder g;
  header(g, "gemma4", 6);
  g.u32("gemma4.attention.key_length", 128);
  g.u32("gemma4.attention.value_length", 128);
  g.u32("gemma4.attention.key_length_swa", 64);
  g.u32("gemma4.attention.value_length_swa", 64);
  g.u32("gemma4.attention.sliding_window", 512);
  g.u32_array("gemma4.attention.sliding_window_pattern", {1, 1, 1, 0, 1, 0});
  g.u32("gemma4.attention.shared_kv_layers", 2);
  for (int i = 0; i < 6; ++i) attention_block(g, i);
  const std::string path = temp("gemma4.gguf");
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  CHECK(spec->shared_kv_from == 4);  // n_layer_kv_from_start = n_layer - shared_kv_layers
  CHECK(spec->tied_embeddings);
  const auto counts = layer_counts(*spec);
  CHECK(counts.sliding == 3);  // layers 0-2; layer 4 reuses layer 2's cache
  CHECK(counts.full == 1);     // layer 3; layer 5 reuses it
  CHECK(counts.none == 2);
  const auto s = context_shape(*spec, kvtest::engine(), 8192, 1, true, 512, 2048, false);
  const auto kv = kv_cache_bytes(*spec, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  CHECK(kv.k.bytes + kv.v.bytes == 1LL * 8192 * 2 * 128 * 2 * 2);        // one global layer, 2 KV heads of 128
  CHECK(kv.swa_k.bytes + kv.swa_v.bytes == 3LL * 1024 * 2 * 64 * 2 * 2);  // 512 + 512 ubatch cells, 2 heads of 64
  // token_embd twice: the tied output is created before token_embd, so TENSOR_DUPLICATED allocates a second copy
  CHECK(cpu_weights(*spec) == 2 * 512000 + 1024 + 6 * kBlockBytes);
  fs::remove(path);
}

TEST_CASE("llama4 GGUF: chunked attention of 8192 whatever the file says, MoE every interleave step (b10454 models/llama4.cpp)") {
  // conversion/llama.py Llama4Model writes interleave_moe_layer_step and no chunk size; load_arch_hparams sets
  // n_swa = 8192 (LLAMA_SWA_TYPE_CHUNKED, pattern 4) unless attention.sliding_window is present and 0 (MobileLLM).
  auto llama4 = [](bool sliding_zero) {
    kvtest::GgufBuilder g;
    header(g, "llama4", 4);
    g.u32("llama4.expert_count", 4);
    g.u32("llama4.expert_used_count", 1);
    g.u32("llama4.expert_feed_forward_length", 128);
    g.u32("llama4.interleave_moe_layer_step", 2);
    if (sliding_zero) g.u32("llama4.attention.sliding_window", 0);
    g.tensor("output.weight", F16, {256, 1000}, 512000);
    for (int i = 0; i < 4; ++i) attention_block(g, i);
    return g;
  };
  const std::string path = temp("llama4.gguf");
  llama4(false).write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  REQUIRE(spec->moe);
  CHECK(spec->moe->layer_step == 2);
  CHECK(spec->moe->shared_ff == 128);  // n_ff_shexp = n_ff_exp
  CHECK(!spec->is_moe_layer(0));
  CHECK(spec->is_moe_layer(1));
  CHECK(spec->moe_layer_count() == 2);
  REQUIRE(spec->swa);
  CHECK(spec->swa->window == 8192);
  CHECK(spec->swa->chunked);
  auto count = [](const ModelSpec& m, LayerKind kind) {
    const auto caches = layer_caches(m, kvtest::engine());
    return std::count_if(caches.begin(), caches.end(), [&](const LayerCache& c) { return c.kind == kind; });
  };
  CHECK(count(*spec, LayerKind::sliding) == 3);
  CHECK(count(*spec, LayerKind::full) == 1);
  llama4(true).write(path);
  const auto mobile = load_model_file(path, kvtest::catalog());
  CHECK(!mobile->swa);
  CHECK(count(*mobile, LayerKind::full) == 4);
  fs::remove(path);
}
