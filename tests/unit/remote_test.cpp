// What a --model value names remotely (net/src/remote_id.cpp): the shapes users paste, and the values that stay
// catalog names or paths. The reading itself is tested against a loopback server (tests/remote).
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <vector>

#include "kvplan/error.hpp"
#include "kvplan/model_file.hpp"
#include "kvplan/remote.hpp"

using kvplan::net::parse_remote_id;
using Kind = kvplan::net::RemoteId::Kind;

TEST_CASE("remote ids: Hub repos, quants, URLs and Ollama tags", "[remote]") {
  auto hub = parse_remote_id("Qwen/Qwen2.5-Coder-32B-Instruct");
  REQUIRE(hub);
  CHECK((hub->kind == Kind::hub && hub->repo == "Qwen/Qwen2.5-Coder-32B-Instruct" && hub->tag.empty()));
  auto quant = parse_remote_id("unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M");
  REQUIRE(quant);
  CHECK((quant->kind == Kind::hub && quant->repo == "unsloth/Qwen3-30B-A3B-GGUF" && quant->tag == "Q4_K_M"));
  auto hfco = parse_remote_id("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0");  // Ollama's spelling
  REQUIRE(hfco);
  CHECK((hfco->kind == Kind::hub && hfco->repo == "bartowski/Llama-3.2-1B-Instruct-GGUF" && hfco->tag == "Q8_0"));
  auto page = parse_remote_id("https://huggingface.co/Qwen/Qwen3-8B/");
  REQUIRE(page);
  CHECK((page->kind == Kind::hub && page->repo == "Qwen/Qwen3-8B"));
  auto blob = parse_remote_id("https://huggingface.co/a/b-GGUF/blob/main/b-Q4_K_M.gguf");
  REQUIRE(blob);
  CHECK((blob->kind == Kind::url && blob->url == "https://huggingface.co/a/b-GGUF/resolve/main/b-Q4_K_M.gguf"));
  auto url = parse_remote_id("https://example.com/models/x.gguf?download=1");
  REQUIRE(url);
  CHECK((url->kind == Kind::url && url->url == "https://example.com/models/x.gguf?download=1"));
  auto ollama = parse_remote_id("qwen2.5-coder:32b");
  REQUIRE(ollama);
  CHECK((ollama->kind == Kind::ollama && ollama->repo == "library/qwen2.5-coder" && ollama->tag == "32b"));
  auto latest = parse_remote_id("ollama.com/library/llama3.2");
  REQUIRE(latest);
  CHECK((latest->kind == Kind::ollama && latest->repo == "library/llama3.2" && latest->tag == "latest"));
}

TEST_CASE("remote ids: catalog names, file names and paths are not remote", "[remote]") {
  for (const char* local : {"qwen3-8b", "Qwen3-8B-Q6_K.gguf", "./models/x", "/abs/x.gguf", "~/x", "a/b/c", "models/x.gguf",
                            "dir/config.json", ""})
    CHECK_FALSE(parse_remote_id(local));
}

TEST_CASE("remote ids: malformed remote shapes are refused before any request", "[remote]") {
  for (const char* bad : {"a--b/c", "-a/b", "a/b.", "owner/ repo", "a/b:Q4 K", "a/b:", "x:", ":7b", "https://host/model.bin",
                          "https://host/a b.gguf", "hf.co/a/b/c"})
    CHECK_THROWS_AS(parse_remote_id(bad), kvplan::InputError);
}

TEST_CASE("parse_gguf_prefix: a prefix asks for more until the header is whole, then equals the full parse", "[remote]") {
  std::ifstream in(std::string(KVPLAN_SOURCE_DIR) + "/tests/fuzz/seeds/llama-small.gguf", std::ios::binary);
  const std::vector<std::uint8_t> file{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  REQUIRE(file.size() > 1000);
  const kvplan::GgufHeader full = kvplan::parse_gguf_header(file.data(), file.size(), file.size(), "full");
  std::size_t first_whole = 0;
  for (std::size_t n = 0; n <= file.size() && !first_whole; ++n) {
    const kvplan::GgufPrefix p = kvplan::parse_gguf_prefix(file.data(), n, file.size() + (4 << 20), "prefix");
    if (p.header) first_whole = n;
    else REQUIRE(p.need > n);  // it always asks for more than it has
  }
  CHECK(first_whole > 24);
  CHECK(first_whole <= full.data_offset);
  const kvplan::GgufPrefix whole = kvplan::parse_gguf_prefix(file.data(), first_whole, file.size(), "prefix");
  REQUIRE(whole.header);
  CHECK(whole.header->tensors.size() == full.tensors.size());
  CHECK(whole.header->data_offset == full.data_offset);
  // a file that ends inside its header is refused as truncated, not asked for more
  CHECK_THROWS_AS(kvplan::parse_gguf_prefix(file.data(), 300, 300, "cut"), kvplan::InputError);
}
