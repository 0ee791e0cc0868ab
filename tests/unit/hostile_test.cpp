// Hostile input (issue 15): the validation boundary, checked size arithmetic and bounded parsing, each refusing
// with an InputError that names the field. tests/hostile/ runs the same kinds of input through the CLI.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "gguf_writer.hpp"
#include "helpers.hpp"
#include "kvplan/checked.hpp"
#include "kvplan/model_file.hpp"
#include "kvplan/priors.hpp"

using namespace kvplan;

namespace {

// The message of the InputError `f` throws ("" when it throws none).
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

kvtest::GgufBuilder llama(float embd_as_float = 0) {
  kvtest::GgufBuilder g;
  g.str("general.architecture", "llama");
  g.u32("llama.block_count", 2);
  if (embd_as_float != 0) g.f32("llama.embedding_length", embd_as_float);
  else g.u32("llama.embedding_length", 256);
  g.u32("llama.attention.head_count", 4);
  g.u32("llama.attention.head_count_kv", 2);
  g.u32("llama.feed_forward_length", 512);
  g.u32("llama.context_length", 4096);
  g.tensor("token_embd.weight", 1, {256, 1000}, 256 * 1000 * 2);
  return g;
}

ModelSpec from(const kvtest::GgufBuilder& g) {
  const auto b = g.bytes();
  return model_from_gguf({parse_gguf_header(b.data(), b.size(), b.size(), "x.gguf")}, {"x.gguf"}, kvtest::catalog(), kvtest::engine());
}

}  // namespace

TEST_CASE("checked size arithmetic refuses what does not fit 64 bits") {
  CHECK(checked_mul(1LL << 31, 1LL << 31, "w") == 1LL << 62);
  CHECK(refusal([] { checked_mul(1LL << 32, 1LL << 32, "attention.key_length"); }).find("attention.key_length") != std::string::npos);
  CHECK_THROWS_AS(checked_add(std::numeric_limits<std::int64_t>::max(), 1, "x"), InputError);
  CHECK_THROWS_AS(checked_bytes(std::nan(""), "x"), InputError);
  CHECK_THROWS_AS(checked_bytes(1e300, "x"), InputError);
  CHECK(checked_bytes(1.6, "x") == 2);
  CHECK_THROWS_AS(pad_to(10, 0), InputError);
  CHECK(pad_to(257, 256) == 512);
  GgmlType broken{"q8_0", 8, 0, 34};
  CHECK_THROWS_AS(broken.row_size(64), InputError);
}

TEST_CASE("GGUF numbers: NaN or a float where llama.cpp reads an integer is refused, naming the key") {
  CHECK(from(llama()).embd == 256);
  CHECK(refusal([] { from(llama(std::nanf(""))); }).find("llama.embedding_length") != std::string::npos);
  CHECK(refusal([] { from(llama(256.0f)); }).find("an integer is expected") != std::string::npos);
  kvtest::GgufBuilder zero = llama();
  zero.u32("llama.attention.key_length", 0);  // attention layers need a head size
  CHECK(refusal([&] { from(zero); }).find("llama.attention.key_length") != std::string::npos);
}

TEST_CASE("a GGUF key claiming 2 GiB is refused before anything is read") {
  // Only the first 32 bytes are in memory, of a file said to be 3 GiB: the reader must not ask for more.
  std::uint8_t b[32] = {'G', 'G', 'U', 'F', 3};
  const std::uint64_t tensors = 0, kvs = 1, key = 1ULL << 31;
  std::memcpy(b + 8, &tensors, 8);
  std::memcpy(b + 16, &kvs, 8);
  std::memcpy(b + 24, &key, 8);
  const std::string msg = refusal([&] { parse_gguf_header(b, sizeof b, 3ULL << 30, "big.gguf"); });
  CHECK(msg.find("metadata key claims 2147483648 bytes") != std::string::npos);
}

TEST_CASE("the --priors reader: long fields and lines, numbers beyond a double") {
  const std::string header = "k_type,v_type,metric,ctx,rotation,rel_change,noise,weights\n";
  // a 40,000-character weights field (std::regex once overflowed the stack on it)
  const auto rows = parse_measurements(header + "q8_0,q4_0,ppl,512,no,0.01,0.001," + std::string(40000, '(') + "\n", "m.csv");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].weights_bpw == 0);
  CHECK(parse_measurements(header + "q8_0,q4_0,ppl,512,no,0.01,0.001,exl2 4.65 bpw\n", "m.csv")[0].weights_bpw == Approx(4.65));
  CHECK(refusal([&] { parse_measurements(header + "q8_0,q4_0,ppl,512,no,1e999,0.001,\n", "m.csv"); }).find("m.csv:2") != std::string::npos);
  CHECK(refusal([&] { parse_measurements(header + "q8_0,q4_0,ppl,1e400,no,0.01,0.001,\n", "m.csv"); }).find("'ctx'") != std::string::npos);
  const std::string log =
      "llama_kv_cache: size = 1 MiB, K (q8_0): 1 MiB, V (q4_0): 1 MiB " + std::string(40000, 'a') + "\n" +
      "perplexity: calculating perplexity over 10 chunks, n_ctx=512, batch_size=2048\n"
      "Final estimate: PPL = 5.1234 +/- 0.0345\n"
      "llama_kv_cache: K (f16): 1 MiB, V (f16): 1 MiB\n"
      "perplexity: calculating perplexity over 10 chunks, n_ctx=512, batch_size=2048\n"
      "Final estimate: PPL = 5.0000 +/- 0.0345\n";
  const auto runs = parse_measurements(log, "p.log");
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].k_type == "q8_0");
  CHECK(runs[0].v_type == "q4_0");
  CHECK(runs[0].ctx == 512);
  CHECK(runs[0].value == Approx(5.1234 / 5.0 - 1));
  CHECK(refusal([] { parse_measurements("llama_kv_cache: K (q8_0): 1, V (q4_0): 1\nFinal estimate: PPL = - +/- 1\n", "p.log"); })
            .find("p.log:2") != std::string::npos);
}

TEST_CASE("a caller's own model spec crosses the same boundary as a file's") {
  auto m = std::make_shared<ModelSpec>(kvtest::catalog().model("qwen3-8b"));
  m->heads = 0;  // attention layers without heads
  Request r;
  r.gpu = "24GB";
  r.model = m->id;
  r.model_spec = m;
  CHECK(refusal([&] { plan(kvtest::catalog(), r); }).find("'heads'") != std::string::npos);
  m->heads = 32;
  m->kv_heads = 7;  // does not divide
  CHECK(refusal([&] { plan(kvtest::catalog(), r); }).find("kv_heads") != std::string::npos);
}
