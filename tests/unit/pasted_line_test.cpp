// A pasted llama-server line (cli/args.cpp take_server_args) and context sizes as users write them (units.cpp).
#include <catch2/catch.hpp>

#include "args.hpp"
#include "helpers.hpp"
#include "kvplan/error.hpp"
#include "kvplan/plan.hpp"
#include "kvplan/units.hpp"

using kvplan::InputError;

namespace {
const std::vector<std::string> kKnown = {"--gpu", "--task", "--model", "--ctx-size", "-c", "-m", "--json"};
const std::vector<std::string> kTakesValue = {"--gpu", "--task", "--model", "--ctx-size", "-c", "-m"};
const kvplan::EngineSpec& llama() { return kvtest::catalog().engine("llama.cpp"); }
}  // namespace

TEST_CASE("a pasted llama-server line keeps the flags kvplan does not plan, with their values, in order") {
  std::vector<std::string> args = {"--gpu", "24GB", "llama-server", "-m", "x.gguf", "-c", "8192", "--jinja", "--host", "0.0.0.0",
                                   "--port", "8080", "--temp", "0.7", "-t", "8", "--no-mmap", "--json"};
  const auto taken = kvplan::cli::take_server_args(args, kKnown, kTakesValue, llama());
  // arities read from b10454's common/arg.cpp: --jinja and --no-mmap are switches, --host/--port/--temp/-t take one value
  CHECK(taken == std::vector<std::string>{"--jinja", "--host", "0.0.0.0", "--port", "8080", "--temp", "0.7", "-t", "8", "--no-mmap"});
  CHECK(args == std::vector<std::string>{"--gpu", "24GB", "llama-server", "-m", "x.gguf", "-c", "8192", "--json"});
}

TEST_CASE("a pasted flag whose memory kvplan does not size is refused by name; flags before the line are kvplan's") {
  std::vector<std::string> cache_ram = {"--gpu", "24GB", "llama-server", "-m", "x.gguf", "--cache-ram", "8192"};
  try {
    kvplan::cli::take_server_args(cache_ram, kKnown, kTakesValue, llama());
    FAIL("--cache-ram was accepted");
  } catch (const InputError& e) {
    CHECK(e.field() == "--cache-ram");
    CHECK(std::string(e.what()).find("prompt cache") != std::string::npos);
  }
  std::vector<std::string> no_line = {"--gpu", "24GB", "--jinja"};  // not pasted: check_flags names it as unknown
  CHECK(kvplan::cli::take_server_args(no_line, kKnown, kTakesValue, llama()).empty());
  CHECK(no_line.size() == 3);
  std::vector<std::string> missing = {"--gpu", "24GB", "llama-server", "--port"};
  CHECK_THROWS_AS(kvplan::cli::take_server_args(missing, kKnown, kTakesValue, llama()), InputError);
}

TEST_CASE("context sizes: tokens, or k = 1024 as model cards write 128k") {
  CHECK(kvplan::parse_token_count("8192", "--ctx-size") == 8192);
  CHECK(kvplan::parse_token_count("32k", "--ctx-size") == 32768);
  CHECK(kvplan::parse_token_count("128K", "--ctx-size") == 131072);
  CHECK(kvplan::parse_token_count("1M", "--ctx-size") == 1048576);
  CHECK(kvplan::parse_token_count("1.5k", "--ctx-size") == 1536);
  for (const char* bad : {"", "k", "32kk", "-1", "0", "0.1k", "3000M", "1e3", "32 k", "8192tokens"}) {
    INFO(bad);
    CHECK_THROWS_AS(kvplan::parse_token_count(bad, "--ctx-size"), InputError);
  }
}

TEST_CASE("an Ollama tag that ends in a weight format plans those weights") {
  kvplan::Request r;
  r.gpu = "rtx4090";
  r.task = "coding";
  r.host_ram = 64LL << 30;
  r.model = "qwen3:30b-a3b-q8_0";  // Ollama library tag: Qwen3-30B-A3B at Q8_0
  const kvplan::Plan p = kvplan::plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  CHECK(p.recommended()->weights == "Q8_0");
  r.model = "gpt-oss:20b-fp16";  // Ollama writes fp16 for GGUF's F16
  CHECK(kvplan::plan(kvtest::catalog(), r).options.front().weights == "F16");
  r.model = "qwen3:30b-a3b-q4_K_M";
  r.weights = "Q8_0";
  CHECK_THROWS_AS(kvplan::plan(kvtest::catalog(), r), InputError);
}
