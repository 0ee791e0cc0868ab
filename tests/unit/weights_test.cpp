// Weight sizes from the catalog's shapes and llama-quantize's recipe, against published files
// (llama.cpp tools/quantize/README.md, bartowski's Qwen3-32B GGUF table, a third-party size of Qwen2.5-Coder-32B)
// and the recipe's own rules (src/llama-quant.cpp).
#include <catch2/catch.hpp>

#include <map>

#include "helpers.hpp"

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
