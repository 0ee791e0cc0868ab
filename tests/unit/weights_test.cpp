// Weight sizes from the catalog's shapes and llama-quantize's recipe, against published files
// (llama.cpp tools/quantize/README.md, bartowski's Qwen3-32B GGUF table, a third-party size of Qwen2.5-Coder-32B)
// and the recipe's own rules (src/llama-quant.cpp).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include "gguf_writer.hpp"
#include "helpers.hpp"
#include "memory/weights.hpp"

using namespace kvplan;

namespace {
// File bytes: every tensor once (a tied model's GPU copy is not in the file).
double file_gib(const char* model, const char* format) {
  const auto& c = kvtest::catalog();
  const ModelSpec& m = c.model(model);
  Bytes sum = 0;
  for (const auto& t : weight_tensors(m, c.weight_format(format), kvtest::engine())) {
    if (t.name.find("copy of token_embd") != std::string::npos) continue;
    sum += kvtest::type(t.type.c_str()).row_size(t.ne0) * t.nrows;
  }
  return static_cast<double>(sum) / (1024.0 * 1024 * 1024);
}
std::map<std::string, std::string> types_of(const char* model, const char* format) {
  const auto& c = kvtest::catalog();
  std::map<std::string, std::string> out;
  for (const auto& t : weight_tensors(c.model(model), c.weight_format(format), kvtest::engine())) out[t.name] = t.type;
  return out;
}
}  // namespace

TEST_CASE("Llama-3.1-8B file sizes match llama.cpp's quantize README table (tools/quantize/README.md)") {
  // tools/quantize/README.md, meta-llama/Llama-3.1-8B: Q4_K_M 4.58 GiB, Q8_0 7.95 GiB, F16 14.96 GiB, Q6_K 6.14, Q5_K_M 5.33
  CHECK(file_gib("llama-3.1-8b", "Q4_K_M") == Approx(4.58).epsilon(0.01));
  CHECK(file_gib("llama-3.1-8b", "Q8_0") == Approx(7.95).epsilon(0.01));
  CHECK(file_gib("llama-3.1-8b", "F16") == Approx(14.96).epsilon(0.01));
  CHECK(file_gib("llama-3.1-8b", "Q6_K") == Approx(6.14).epsilon(0.01));
  CHECK(file_gib("llama-3.1-8b", "Q5_K_M") == Approx(5.33).epsilon(0.01));
}

TEST_CASE("published GGUF sizes of larger models") {
  constexpr double GB = 1e9 / (1024.0 * 1024 * 1024);
  // llama.cpp quantize README memory table: Llama-3.1-70B Q4_K_M 43.1 GB
  CHECK(file_gib("llama-3.1-70b-instruct", "Q4_K_M") == Approx(43.1 * GB).epsilon(0.02));
  // bartowski Qwen_Qwen3-32B-GGUF: Q8_0 34.82 GB, bf16 65.53 GB
  CHECK(file_gib("qwen3-32b", "Q8_0") == Approx(34.82 * GB).epsilon(0.01));
  CHECK(file_gib("qwen3-32b", "BF16") == Approx(65.53 * GB).epsilon(0.01));
  // Qwen's own Qwen2.5-Coder-32B-Instruct q4_k_m: about 19.8 GB (third-party catalogue, approximate)
  CHECK(file_gib("qwen2.5-coder-32b", "Q4_K_M") == Approx(19.8 * GB).epsilon(0.03));
}

TEST_CASE("Q4_K_M recipe: q6_K for output and for attn_v/ffn_down on use_more_bits layers") {
  const auto t = types_of("llama-3.1-8b", "Q4_K_M");
  CHECK(t.at("output.weight") == "q6_K");
  CHECK(t.at("token_embd.weight") == "q4_K");
  CHECK(t.at("blk.0.attn_v.weight") == "q6_K");   // 0 < 32/8
  CHECK(t.at("blk.4.attn_v.weight") == "q4_K");   // (4 - 4) % 3 != 2
  CHECK(t.at("blk.6.attn_v.weight") == "q6_K");   // (6 - 4) % 3 == 2
  CHECK(t.at("blk.28.ffn_down.weight") == "q6_K");  // 28 >= 7·32/8
  CHECK(t.at("blk.5.attn_q.weight") == "q4_K");
  CHECK(t.at("blk.5.attn_norm.weight") == "f32");
}

TEST_CASE("k-quants fall back when the row does not divide into 256 (gpt-oss n_embd 2880)") {
  const auto t = types_of("gpt-oss-20b", "Q4_K_M");
  CHECK(t.at("blk.0.attn_q.weight") != "q4_K");
  const GgmlType& q = kvtest::type(t.at("blk.0.attn_q.weight").c_str());
  CHECK(2880 % q.block == 0);
}

TEST_CASE("full offload keeps token_embd on the host; a tied model copies it to the GPU (src/llama-model.cpp load_tensors)") {
  const auto& c = kvtest::catalog();
  const ModelSpec& untied = c.model("llama-3.1-8b");
  const ModelSpec& tied = c.model("gemma-3-27b");
  const auto& fmt = c.weight_format("Q4_K_M");
  const auto wu = weight_bytes(untied, fmt, kvtest::engine(), kvtest::cuda());
  // token_embd 4096 × 128256 in q4_K on the host
  CHECK(wu.host.unpadded == kvtest::type("q4_K").row_size(4096) * 128256);
  const auto wt = weight_bytes(tied, fmt, kvtest::engine(), kvtest::cuda());
  // the GPU holds an output copy of the same size (tied: token_embd quantized as the output tensor)
  CHECK(wt.host.unpadded > 0);
  CHECK(wt.device.unpadded > wt.host.unpadded);
  CHECK(wt.device.accuracy == Accuracy::estimate);
}

// ---- formats found in the wild (issue 16 item 5) ----

namespace {
constexpr double kGB = 1e9 / (1024.0 * 1024 * 1024);  // a decimal GB in GiB
}  // namespace

TEST_CASE("gpt-oss keeps its experts in MXFP4 at every file type (native_expert_type)", "[weights][mxfp4]") {
  for (const char* f : {"F16", "BF16", "Q8_0", "Q4_K_M", "Q2_K", "MXFP4", "IQ2_M"}) {
    const auto t = types_of("gpt-oss-20b", f);
    CHECK(t.at("blk.0.ffn_gate_exps.weight") == "mxfp4");
    CHECK(t.at("blk.23.ffn_down_exps.weight") == "mxfp4");
  }
  // MXFP4_MOE: everything else q8_0, token_embd and output included (llama-quant.cpp MOSTLY_MXFP4_MOE branches)
  const auto m = types_of("gpt-oss-20b", "MXFP4");
  CHECK(m.at("token_embd.weight") == "q8_0");
  CHECK(m.at("output.weight") == "q8_0");
  CHECK(m.at("blk.3.attn_q.weight") == "q8_0");
  CHECK(m.at("blk.3.attn_output.weight") == "q8_0");
  CHECK(m.at("blk.3.ffn_gate_inp.weight") == "f32");  // the router is never quantized
  // F16: the converter's own output, experts MXFP4 and the rest f16
  CHECK(types_of("gpt-oss-20b", "F16").at("blk.3.attn_q.weight") == "f16");
  // a model without native experts is unaffected
  CHECK(types_of("qwen3-30b-a3b", "Q4_K_M").at("blk.0.ffn_gate_exps.weight") == "q4_K");
}

TEST_CASE("gpt-oss tensor count matches the converted GGUF (459 tensors for the 20b)", "[weights][mxfp4]") {
  // danbev/learning-ai notes/llama.cpp/gpt-oss.md: convert_hf_to_gguf.py --outtype bf16 -> "n_tensors = 459"
  const auto& c = kvtest::catalog();
  CHECK(weight_tensors(c.model("gpt-oss-20b"), c.weight_format("MXFP4"), kvtest::engine()).size() == 459);
}

TEST_CASE("gpt-oss file sizes against published GGUFs", "[weights][mxfp4]") {
  // Before this change the recipe quantized the experts too: gpt-oss-20b Q8_0 was 20.1 GiB, every published file
  // is 11.3-12.9 GiB. Errors of the figures below: under 0.3 % against the exact (llama-bench) sizes.
  // gpt-oss-20b, bartowski/openai_gpt-oss-20b-GGUF README (llama.cpp b6096): MXFP4 12.1 GB, Q6_K 12.04 GB
  // ("Q6_K with all FFN kept at MXFP4_MOE").
  CHECK(file_gib("gpt-oss-20b", "MXFP4") == Approx(12.1 * kGB).epsilon(0.005));
  CHECK(file_gib("gpt-oss-20b", "Q6_K") == Approx(12.04 * kGB).epsilon(0.005));
  // a bf16 conversion (experts stay MXFP4): "total_size = 13.8G" (danbev/learning-ai notes/llama.cpp/gpt-oss.md);
  // F16 and BF16 have the same size.
  CHECK(file_gib("gpt-oss-20b", "F16") == Approx(13.8 * kGB).epsilon(0.005));
  // gpt-oss-120b: llama-bench "size" (the tensors' bytes) of ggml-org/gpt-oss-120b-GGUF mxfp4 = 59.02 GiB
  // (llama.cpp PR #19922 tables; community.frame.work thread 73280) and of unsloth's gpt-oss-120b-F16.gguf = 60.87 GiB.
  CHECK(file_gib("gpt-oss-120b", "MXFP4") == Approx(59.02).epsilon(0.001));
  CHECK(file_gib("gpt-oss-120b", "F16") == Approx(60.87).epsilon(0.001));
  // unsloth/gpt-oss-120b-GGUF other types (third-party listing ailocalcheck.com, weights column; its F16 row 60.88
  // matches llama-bench's 60.87 GiB, so the column is GiB): Q8_0 59.03, Q4_K_M 58.46, Q2_K 58.27. Unsloth's
  // quants use an imatrix and their own tweaks, so within 1 %.
  CHECK(file_gib("gpt-oss-120b", "Q8_0") == Approx(59.03).epsilon(0.01));
  CHECK(file_gib("gpt-oss-120b", "Q4_K_M") == Approx(58.46).epsilon(0.01));
  CHECK(file_gib("gpt-oss-120b", "Q2_K") == Approx(58.27).epsilon(0.01));
  // every 20b file lies in the published 11.5-13.8 GB range
  for (const char* f : {"Q8_0", "Q4_K_M", "Q2_K"}) {
    INFO(f);
    CHECK(file_gib("gpt-oss-20b", f) > 11.3 * kGB);
    CHECK(file_gib("gpt-oss-20b", f) < 12.2 * kGB);
  }
}

TEST_CASE("--weights MXFP4 is planned for gpt-oss and refused, with the reason, elsewhere", "[weights][mxfp4]") {
  Request r;
  r.model = "gpt-oss-20b";
  r.gpu = "rtx4090";
  r.weights = "MXFP4";
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.fits());
  CHECK(p.options.front().weights == "MXFP4");
  r.model = "qwen3-30b-a3b";
  try {
    (void)plan(kvtest::catalog(), r);
    FAIL("MXFP4 on a model not released in it must be refused");
  } catch (const InputError& e) {
    CHECK(e.field() == "--weights");
    CHECK(std::string(e.what()).find("gpt-oss-20b") != std::string::npos);
  }
}

TEST_CASE("Unsloth Dynamic quants named without a file are refused: only a header knows their mix", "[weights][ud]") {
  Request r;
  r.model = "gpt-oss-20b";
  r.gpu = "rtx4090";
  r.weights = "UD-Q4_K_XL";
  try {
    (void)plan(kvtest::catalog(), r);
    FAIL("a UD quant without its file must be refused");
  } catch (const InputError& e) {
    CHECK(e.field() == "--weights");
    CHECK(std::string(e.what()).find("header") != std::string::npos);
  }
  r.weights.reset();
  r.model = "gpt-oss-20b-UD-Q4_K_XL.gguf";  // a pasted Hub file name, not a local file
  CHECK_THROWS_AS(plan(kvtest::catalog(), r), InputError);
}

TEST_CASE("i-quant recipes against llama.cpp's quantize README (Llama-3.1-8B) and the upstream snapshots", "[weights][iq]") {
  // tools/quantize/README.md (Llama-3.1-8B, GiB; the size_gib_llama31_8b column of gguf_quality.yaml). These
  // files were made with an imatrix, which the recipe assumes for the i-quants.
  CHECK(file_gib("llama-3.1-8b", "IQ3_S") == Approx(3.42).epsilon(0.005));
  CHECK(file_gib("llama-3.1-8b", "IQ3_XS") == Approx(3.27).epsilon(0.005));
  CHECK(file_gib("llama-3.1-8b", "IQ3_XXS") == Approx(3.04).epsilon(0.005));
  CHECK(file_gib("llama-3.1-8b", "IQ2_M") == Approx(2.74).epsilon(0.005));
  CHECK(file_gib("llama-3.1-8b", "IQ2_S") == Approx(2.56).epsilon(0.005));
  CHECK(file_gib("llama-3.1-8b", "IQ2_XS") == Approx(2.42).epsilon(0.005));
  CHECK(file_gib("llama-3.1-8b", "IQ2_XXS") == Approx(2.23).epsilon(0.005));
  CHECK(file_gib("llama-3.1-8b", "IQ1_M") == Approx(2.01).epsilon(0.005));
  CHECK(file_gib("llama-3.1-8b", "IQ1_S") == Approx(1.87).epsilon(0.005));
  // tests/snapshots/gpt-oss-120b.schema [IQ2_XXS]: token_embd q2_K, attn_v q4_K, ffn_down of blk 0-3 q2_K
  // (n/8 = 4 of 36). The snapshot lists the type before tensor_type_fallback; gpt-oss's 2880-wide rows then fall
  // back (q2_K -> q4_0, q4_K -> q5_0), which is what the unsloth 120b sizes above confirm. Experts stay mxfp4.
  const auto t = types_of("gpt-oss-120b", "IQ2_XXS");
  CHECK(t.at("token_embd.weight") == "q4_0");
  CHECK(t.at("blk.0.attn_v.weight") == "q5_0");
  CHECK(t.at("blk.4.attn_v.weight") == "q5_0");
  CHECK(t.at("blk.4.attn_output.weight") == "iq2_xxs");  // 4096-wide: no fallback, base type
  // [IQ3_XS]: attn_q / attn_k iq3_xxs (gpt-oss's 2880-wide rows fall back to iq4_nl, as llama-quantize does)
  const auto x = types_of("llama-3.1-8b", "IQ3_XS");
  CHECK(x.at("blk.0.attn_q.weight") == "iq3_xxs");
  CHECK(x.at("blk.0.attn_k.weight") == "iq3_xxs");
  CHECK(x.at("blk.0.attn_v.weight") == "q4_K");         // n_gqa 4
  CHECK(x.at("blk.0.ffn_up.weight") == "iq3_s");        // first eighth: base
  CHECK(x.at("blk.10.ffn_up.weight") == "iq3_xxs");     // middle
  CHECK(x.at("output.weight") == "q6_K");
  const auto m = types_of("llama-3.1-8b", "IQ2_M");
  CHECK(m.at("output.weight") == "q5_K");
  CHECK(m.at("token_embd.weight") == "iq3_s");
  CHECK(m.at("blk.0.ffn_down.weight") == "iq3_s");      // i < 32/8
  CHECK(m.at("blk.4.ffn_down.weight") == "iq2_s");
  CHECK(m.at("blk.4.attn_output.weight") == "iq3_s");
}

TEST_CASE("ggml type sizes of the newer and ternary types (ggml-common.h block structs)", "[weights][types]") {
  // block_tq1_0: qs[48] + qh[4] + fp16 d = 54 B / 256; block_tq2_0: qs[64] + d = 66 B / 256 (1.6875 / 2.0625 bpw)
  CHECK(kvtest::type("tq1_0").row_size(256) == 54);
  CHECK(kvtest::type("tq2_0").row_size(256) == 66);
  CHECK(kvtest::type("mxfp4").row_size(2880) == 2880 / 32 * 17);  // e8m0 scale + 16 B per 32: 4.25 bpw
  CHECK(kvtest::type("iq1_s").row_size(256) == 50);
  CHECK(kvtest::type("iq1_m").row_size(256) == 56);
  CHECK(kvtest::type("nvfp4").row_size(64) == 36);
  CHECK(kvtest::type("tq1_0").id == 34);
  CHECK(kvtest::type("mxfp4").id == 39);
}

TEST_CASE("a UD GGUF is sized from its header, i-quant/ternary/MXFP4 tensors included, and named by file type and file name", "[weights][ud]") {
  // ggml type ids and block bytes: iq2_xxs 16 (66 B / 256), tq1_0 34 (54 B / 256), mxfp4 39 (17 B / 32)
  constexpr std::uint32_t F32 = 0, F16 = 1, IQ2_XXS = 16, TQ1_0 = 34, MXFP4 = 39;
  kvtest::GgufBuilder g;
  g.str("general.architecture", "llama");
  g.str("general.name", "tiny-ud");
  g.u32("general.file_type", 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M: what Unsloth's UD-Q4_K_XL files carry
  g.u32("llama.block_count", 2);
  g.u32("llama.embedding_length", 256);
  g.u32("llama.attention.head_count", 4);
  g.u32("llama.attention.head_count_kv", 2);
  g.u32("llama.feed_forward_length", 512);
  g.u32("llama.context_length", 4096);
  g.tensor("token_embd.weight", F16, {256, 1000}, 512000);
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    g.tensor(b + "attn_norm.weight", F32, {256}, 1024);
    g.tensor(b + "attn_q.weight", F16, {256, 256}, 131072);
    g.tensor(b + "attn_k.weight", F16, {256, 128}, 65536);
    g.tensor(b + "attn_v.weight", F16, {256, 128}, 65536);
    g.tensor(b + "attn_output.weight", F16, {256, 256}, 131072);
    g.tensor(b + "ffn_norm.weight", F32, {256}, 1024);
    g.tensor(b + "ffn_gate.weight", IQ2_XXS, {256, 512}, 512 * 66);
    g.tensor(b + "ffn_up.weight", TQ1_0, {256, 512}, 512 * 54);
    g.tensor(b + "ffn_down.weight", MXFP4, {512, 256}, 256 * (512 / 32 * 17));
  }
  g.tensor("output_norm.weight", F32, {256}, 1024);
  g.tensor("output.weight", F16, {256, 1000}, 512000);
  const std::string path = (std::filesystem::temp_directory_path() / "kvplan_tiny-UD-Q4_K_XL.gguf").string();
  g.write(path);
  const auto spec = load_model_file(path, kvtest::catalog());
  CHECK(spec->file_format == "Q4_K_M");
  CHECK(spec->file_quant_label == "UD-Q4_K_XL");
  // per layer: norms 2048 + q/o 262144 + k/v 131072 + gate 33792 + up 27648 + down 69632 = 526336
  const auto w = weight_bytes(*spec, kvtest::catalog().weight_format("Q4_K_M"), kvtest::engine(), kvtest::cuda());
  CHECK(w.device.unpadded == 2 * 526336 + 1024 + 512000);
  CHECK(w.device.accuracy == Accuracy::exact);
  Request r;
  r.gpu = "8GB";
  r.model = path;
  r.model_spec = spec;
  r.ctx_size = 4096;
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.fits());
  CHECK(p.options.front().weights == "UD-Q4_K_XL (file type Q4_K_M)");
  r.weights = "UD-Q4_K_XL";  // naming the file's own mix is not a disagreement
  CHECK_NOTHROW(plan(kvtest::catalog(), r));
  std::filesystem::remove(path);
}

TEST_CASE("a gpt-oss config.json with quant_method mxfp4 keeps the experts in MXFP4, as the catalog entry does", "[weights][mxfp4]") {
  // openai/gpt-oss-20b config.json (the fields kvplan reads)
  const auto dir = std::filesystem::temp_directory_path() / "kvplan_gptoss_config";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088,
    "max_position_embeddings": 131072, "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128,
    "tie_word_embeddings": false, "quantization_config": {"quant_method": "mxfp4"}})";
  const auto spec = load_model_file(dir.string(), kvtest::catalog());
  CHECK(spec->native_expert_type == "mxfp4");
  const auto& c = kvtest::catalog();
  for (const auto& t : weight_tensors(*spec, c.weight_format("Q4_K_M"), kvtest::engine()))
    if (t.name.find("_exps.weight") != std::string::npos) CHECK(t.type == "mxfp4");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a native_expert_type that is no ggml type is refused when the catalog loads", "[weights][mxfp4]") {
  const auto dir = std::filesystem::temp_directory_path() / "kvplan_native_expert_bad";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "m.yaml") << "models:\n  - id: moe-x\n    arch: gpt-oss\n    params: 1000\n    layers: 2\n    embd: 64\n"
                                   "    heads: 4\n    kv_heads: 1\n    vocab: 100\n    ctx_native: 4096\n"
                                   "    moe: {experts: 4, experts_used: 2, expert_ff: 64}\n    native_expert_type: mxfp5\n"
                                   "    source: test\n";
  try {
    (void)load_catalog({dir.string()});
    FAIL("accepted native_expert_type mxfp5");
  } catch (const InputError& e) {
    CHECK(e.field() == "models.moe-x.native_expert_type");
    CHECK(e.suggestion() == "mxfp4");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("Llama 4 Maverick interleaves dense and MoE layers as llama.cpp creates them", "[weights][llama4]") {
  // src/llama-model.cpp create_tensors, LLM_ARCH_LLAMA4: is_moe_layer = (i + 1) % n_moe_layer_step == 0; MoE layers
  // get 128 experts of 8192 and a shared expert of 8192, the others a dense FFN of feed_forward_length 16384.
  const auto& c = kvtest::catalog();
  const ModelSpec& m = c.model("llama-4-maverick-17b-128e-instruct");
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> shape;
  std::int64_t elements = 0;
  for (const auto& t : weight_tensors(m, c.weight_format("BF16"), kvtest::engine())) {
    shape[t.name] = {t.ne0, t.nrows};
    if (t.name.find("copy of token_embd") == std::string::npos) elements += t.ne0 * t.nrows;
  }
  CHECK(shape.count("blk.0.ffn_gate.weight") == 1);
  CHECK(shape.count("blk.0.ffn_gate_exps.weight") == 0);
  CHECK(shape.at("blk.0.ffn_gate.weight") == std::pair<std::int64_t, std::int64_t>{5120, 16384});
  CHECK(shape.count("blk.1.ffn_gate.weight") == 0);
  CHECK(shape.at("blk.1.ffn_gate_exps.weight") == std::pair<std::int64_t, std::int64_t>{5120, 8192LL * 128});
  CHECK(shape.at("blk.1.ffn_gate_shexp.weight") == std::pair<std::int64_t, std::int64_t>{5120, 8192});
  CHECK(shape.count("blk.47.ffn_gate_exps.weight") == 1);
  CHECK(m.moe_layer_count() == 24);
  // By hand: 2 x 202048 x 5120 (untied) + 48 x (2 x 5120^2 + 2 x 5120 x 1024) + 24 x 3 x 5120 x 16384
  // + 24 x (128 x 3 x 5120 x 8192 + 3 x 5120 x 8192 + 5120 x 128) + 97 norms of 5120 = 400,711,848,960
  CHECK(elements == 400711848960LL);
  CHECK(elements == m.params);
  // Scout (interleave step 1) keeps experts on every layer
  CHECK(c.model("llama-4-scout-17b-16e-instruct").moe_layer_count() == 48);
}

namespace {
// Elements and tensors of a catalog model's recipe (the tied output copy is not in the file).
std::pair<std::int64_t, size_t> recipe_elements(const char* model) {
  const auto& c = kvtest::catalog();
  std::int64_t elements = 0;
  size_t tensors = 0;
  for (const auto& t : weight_tensors(c.model(model), c.weight_format("BF16"), kvtest::engine())) {
    if (t.name.find("copy of token_embd") != std::string::npos) continue;
    elements += t.ne0 * t.nrows;
    ++tensors;
  }
  return {elements, tensors};
}
std::map<std::string, std::pair<std::int64_t, std::int64_t>> recipe_shapes(const char* model) {
  const auto& c = kvtest::catalog();
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& t : weight_tensors(c.model(model), c.weight_format("BF16"), kvtest::engine())) out[t.name] = {t.ne0, t.nrows};
  return out;
}
}  // namespace

TEST_CASE("Gemma 4 recipes give llama.cpp's parameter and tensor counts (src/models/gemma4.cpp load_arch_tensors)", "[weights][gemma4]") {
  // llama.cpp print_info "model params" (two decimals of 1e9): 31B 30.70 B and 833 tensors (bartowski Q8_0,
  // ggml-org/llama.cpp#21760), E4B 7.52 B (canonical/inference-snaps#275). 26B-A4B: 658 tensors in a GGUF whose
  // experts are fused into ffn_gate_up_exps (LostRuins/koboldcpp#2262), i.e. 688 with gate and up apart; the card's
  // 25.2B total.
  const auto [p31, n31] = recipe_elements("gemma-4-31b-it");
  CHECK(p31 == Approx(30.70e9).margin(0.005e9));
  CHECK(n31 == 833);
  CHECK(recipe_elements("gemma-4-e4b-it").first == Approx(7.52e9).margin(0.005e9));
  const auto [p26, n26] = recipe_elements("gemma-4-26b-a4b-it");
  CHECK(p26 == Approx(25.2e9).margin(0.05e9));
  CHECK(n26 == 658 + 30);
  // E2B: 601 tensors and "file size = 3.21 GiB (5.93 BPW)" for a Q4_K_M (animehacker/llama-turboquant#3). That file
  // was quantized with an imatrix from a 'calibration_datav5.txt' (Unsloth's pipeline, which re-types tensors): f32 283
  // (as the recipe), bf16 1 (per_layer_model_proj, f16 here: same bytes), q4_K 194, q5_K 70, q6_K 53, where b10454's
  // plain Q4_K_M rules give q4_K 281 and q6_K 36 (attn_v and ffn_down on use_more_bits layers, both token embeddings
  // as the tied output). The recipe's 3.18 GiB is 1 % under it.
  CHECK(recipe_elements("gemma-4-e2b-it").second == 601);
  CHECK(file_gib("gemma-4-e2b-it", "Q4_K_M") == Approx(3.21).epsilon(0.015));
  // 12B: 667 tensors in the GGUF Ollama serves (ollama/ollama#16617)
  CHECK(recipe_elements("gemma-4-12b-it").second == 667);
  for (const char* id : {"gemma-4-e2b-it", "gemma-4-e4b-it", "gemma-4-12b-it", "gemma-4-26b-a4b-it", "gemma-4-31b-it"}) {
    INFO(id);
    CHECK(recipe_elements(id).first == kvtest::catalog().model(id).params);
  }
}

TEST_CASE("Gemma 4 per-layer shapes: head sizes, KV heads, K=V, double-wide FFN, per-layer inputs, dense FFN beside experts", "[weights][gemma4]") {
  const auto g31 = recipe_shapes("gemma-4-31b-it");
  using Shape = std::pair<std::int64_t, std::int64_t>;
  CHECK(g31.at("blk.0.attn_q.weight") == Shape{5376, 32 * 256});   // sliding: key_length_swa 256
  CHECK(g31.at("blk.0.attn_k.weight") == Shape{5376, 16 * 256});   // 16 KV heads
  CHECK(g31.at("blk.5.attn_q.weight") == Shape{5376, 32 * 512});   // full: key_length 512
  CHECK(g31.at("blk.5.attn_k.weight") == Shape{5376, 4 * 512});    // 4 KV heads
  CHECK(g31.count("blk.5.attn_v.weight") == 0);                    // attention_k_eq_v
  CHECK(g31.count("blk.4.attn_v.weight") == 1);
  CHECK(g31.at("blk.5.attn_k_norm.weight") == Shape{512, 1});
  const auto e2b = recipe_shapes("gemma-4-e2b-it");
  CHECK(e2b.at("blk.14.ffn_up.weight") == Shape{1536, 6144});
  CHECK(e2b.at("blk.15.ffn_up.weight") == Shape{1536, 12288});     // use_double_wide_mlp in the KV-shared layers
  CHECK(e2b.at("per_layer_token_embd.weight") == Shape{35 * 256, 262144});
  CHECK(e2b.at("blk.0.inp_gate.weight") == Shape{1536, 256});
  const auto g26 = recipe_shapes("gemma-4-26b-a4b-it");
  CHECK(g26.at("blk.0.ffn_gate.weight") == Shape{2816, 2112});
  CHECK(g26.at("blk.0.ffn_gate_exps.weight") == Shape{2816, 704 * 128});
  CHECK(g26.at("blk.5.attn_k.weight") == Shape{2816, 2 * 512});
  const auto& c = kvtest::catalog();
  // per_layer_token_embd is typed as the tied output (q6_K at Q4_K_M) and kept in host memory; per_layer_model_proj is not quantized
  for (const auto& t : weight_tensors(c.model("gemma-4-e2b-it"), c.weight_format("Q4_K_M"), kvtest::engine())) {
    if (t.name == "per_layer_token_embd.weight") {
      CHECK(t.on_host);
      CHECK(t.type == "q6_K");
    }
    if (t.name == "per_layer_model_proj.weight") CHECK(t.type == "f16");
  }
}

// sized_weights sizes one layer per class (its shapes and the format rules that select it) and repeats it; with names
// it sizes every tensor of the recipe one by one. Both must place to the same bytes, whatever the placement. Fails
// when a class leaves out what decides a layer's tensors (e.g. without the rules, every layer would take the first
// layer's types: Q4_K_M's use_more_bits layers would lose their q6_K). Sized by class, one GPU's placements of the
// first layers or experts in RAM are placed from the layers' sums (sum_layers): they must equal the
// tensors placed one by one too (e.g. fails if the sums of layers [0, k) counted layer k, or an expert-only
// placement moved a layer's other parts to RAM).
TEST_CASE("weights sized once per layer class equal the recipe sized tensor by tensor, for every catalog model and format",
          "[weights][layer-class]") {
  const auto& c = kvtest::catalog();
  const EngineSpec& e = kvtest::engine();
  auto same = [](const Figure& a, const Figure& b) { return a.bytes == b.bytes && a.unpadded == b.unpadded && a.high == b.high; };
  int compared = 0;
  for (const ModelSpec& m : c.models) {
    if (sized_from_params(m) || !m.file_tensors.empty() || m.layers < 2) continue;
    std::vector<Placement> placements{Placement::full()};
    for (int ngl : {0, 1, 2, m.layers / 2, m.layers - 1, m.layers, m.layers + 1})
      placements.push_back(Placement::for_request(m, ngl, std::nullopt));
    if (m.moe)
      for (int n_cpu_moe : {1, m.layers / 3, m.layers, m.layers + 5}) {
        placements.push_back(Placement::for_request(m, std::nullopt, n_cpu_moe));
        placements.push_back(Placement::for_request(m, m.layers / 2, n_cpu_moe));  // layers and experts in RAM
      }
    Placement split = Placement::full();
    split.n_layer = m.layers;
    split.split({1, 2});
    placements.push_back(split);
    for (const WeightFormat& f : c.weight_formats) {
      if (!f.offered || f.base_type.empty() || !(f.native_only.empty() || f.native_only == m.native_expert_type)) continue;
      for (const char* backend : {"cuda", "cpu"}) {
        const BackendSpec& b = e.backend(backend);
        const SizedWeights by_class = sized_weights(m, f, e, b, false), by_tensor = sized_weights(m, f, e, b, true);
        const std::optional<SizedLayers> layers = sum_layers(by_class, m.layers);
        REQUIRE(layers);  // a recipe lists the input layer, the layers in order, then the output layer
        for (const Placement& p : placements) {
          INFO(m.id << " " << f.id << " " << backend << " first_gpu_layer " << p.first_gpu_layer << " cpu_moe " << p.cpu_moe_layers
                    << " devices " << p.devices());
          const WeightBytes x = placed_weights(by_class, m, e, b, p, &*layers), y = placed_weights(by_tensor, m, e, b, p);
          REQUIRE(same(x.device, y.device));
          REQUIRE(same(x.host, y.host));
          REQUIRE(x.per_device.size() == y.per_device.size());
          for (size_t d = 0; d < x.per_device.size(); ++d) REQUIRE(same(x.per_device[d], y.per_device[d]));
          REQUIRE(x.largest_host_matrix == y.largest_host_matrix);
          REQUIRE(x.lookup_host == y.lookup_host);
          REQUIRE(x.host_weights == y.host_weights);
          REQUIRE(x.host_weights_digest == y.host_weights_digest);
          ++compared;
        }
      }
    }
  }
  CHECK(compared > 30000);
}
