#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "helpers.hpp"

using namespace kvplan;
namespace fs = std::filesystem;

TEST_CASE("the catalog has what the planner needs, each number with a source") {
  const auto& c = kvtest::catalog();
  CHECK(c.models.size() >= 30);
  CHECK(c.gpus.size() >= 30);
  for (const auto& m : c.models) {
    INFO(m.id);
    CHECK_FALSE(m.source.empty());
    if (m.kv_heads > 0) CHECK(m.heads % m.kv_heads == 0);
    CHECK(m.ctx_native > 0);
    CHECK(m.params > 0);
  }
  for (const auto& g : c.gpus) {
    INFO(g.id);
    CHECK_FALSE(g.source.empty());
    CHECK_FALSE(g.total_source.empty());
    CHECK(g.total_mib > 1000);
    CHECK_NOTHROW(kvtest::engine().backend(g.backend));
  }
  for (const auto& t : c.tasks) CHECK_FALSE(t.source.empty());
  CHECK_NOTHROW(c.task("general"));
}

TEST_CASE("names, aliases and HF ids resolve, case- and punctuation-insensitively") {
  const auto& c = kvtest::catalog();
  CHECK(c.model("qwen2.5-coder-32b").id == "qwen2.5-coder-32b-instruct");
  CHECK(c.model("Qwen/Qwen2.5-Coder-32B-Instruct").id == "qwen2.5-coder-32b-instruct");
  CHECK(c.model("QWEN2.5-CODER-32B-INSTRUCT").id == "qwen2.5-coder-32b-instruct");
  CHECK(c.gpu("RTX 3090").id == c.gpu("rtx3090").id);
  CHECK(c.gpu("h100-sxm").total_mib == 81559);
}

TEST_CASE("--data overrides merge by id, field by field; later directories win") {
  const fs::path dir = fs::temp_directory_path() / "kvplan_catalog_test_override";
  fs::create_directories(dir);
  {
    std::ofstream(dir / "gpus.yaml") << "gpus:\n  - id: rtx4090\n    total_mib: 20000\n  - id: my-card\n    name: My Card\n"
                                        "    backend: cuda\n    total_mib: 12000\n    total_source: measured\n    source: test\n";
  }
  const Catalog c = load_catalog({dir.string()});
  CHECK(c.gpu("rtx4090").total_mib == 20000);
  CHECK(c.gpu("rtx4090").name == kvtest::catalog().gpu("rtx4090").name);  // other fields kept
  CHECK(c.gpu("my-card").total_mib == 12000);
  fs::remove_all(dir);
}

TEST_CASE("malformed data files are input errors naming file and line") {
  const fs::path dir = fs::temp_directory_path() / "kvplan_catalog_test_bad";
  fs::create_directories(dir);
  {
    std::ofstream(dir / "bad.yaml") << "gpus:\n  - id: x\n    total_mib: [1, 2\n";
  }
  try {
    load_catalog({dir.string()});
    FAIL("accepted malformed YAML");
  } catch (const InputError& e) {
    CHECK(e.field().find("bad.yaml:") != std::string::npos);
  }
  {
    std::ofstream(dir / "bad.yaml") << "gpus:\n  - id: x\n    backend: cuda\n    total_mib: lots\n";
  }
  try {
    load_catalog({dir.string()});
    FAIL("accepted a non-number");
  } catch (const InputError& e) {
    CHECK(e.field() == (dir / "bad.yaml").string() + ":4");
  }
  CHECK_THROWS_AS(load_catalog({(dir / "missing").string()}), InputError);
  fs::remove_all(dir);
}

TEST_CASE("an engine's graph fields accept only the modelled values") {
  const fs::path dir = fs::temp_directory_path() / "kvplan_catalog_test_graph";
  fs::create_directories(dir);
  {
    std::ofstream(dir / "e.yaml") << "engine:\n  id: llama.cpp\n  archs:\n    llama: {family: llama, graph: kvq}\n";
  }
  try {
    load_catalog({dir.string()});
    FAIL("accepted an unknown projection order");
  } catch (const InputError& e) {
    CHECK(e.value() == "kvq");
    CHECK(e.field().find("archs.llama.graph") != std::string::npos);
    CHECK(e.accepted() == std::vector<std::string>{"qvk", "qkv"});
  }
  {
    std::ofstream(dir / "e.yaml") << "engine:\n  id: llama.cpp\n  archs:\n    qwen3moe: {graph: qvk, moe_gating: sigmoid}\n";
  }
  try {
    load_catalog({dir.string()});
    FAIL("accepted an unknown expert gating");
  } catch (const InputError& e) {
    CHECK(e.value() == "sigmoid");
    CHECK(e.field().find("archs.qwen3moe.moe_gating") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("architectures kvplan does not model are refused, and unknown model fields are errors") {
  const fs::path dir = fs::temp_directory_path() / "kvplan_catalog_test_arch";
  fs::create_directories(dir);
  {
    std::ofstream(dir / "m.yaml") << "models:\n  - id: dsv2-lite\n    arch: deepseek2\n    params: 15700000000\n    layers: 27\n"
                                     "    embd: 2048\n    heads: 16\n    kv_heads: 16\n    head_dim: 192\n    vocab: 102400\n"
                                     "    ctx_native: 32768\n    source: test\n";
  }
  const Catalog c = load_catalog({dir.string()});
  Request r;
  r.gpu = "24GB";
  r.model = "dsv2-lite";
  try {
    plan(c, r);
    FAIL("sized an MLA model with the plain formula");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("MLA") != std::string::npos);
  }
  {
    std::ofstream(dir / "m.yaml") << "models:\n  - id: qwen3-8b\n    kv_lora_rank: 512\n";
  }
  try {
    load_catalog({dir.string()});
    FAIL("ignored an unknown model field");
  } catch (const InputError& e) {
    CHECK(e.value() == "kv_lora_rank");
    CHECK(e.field() == (dir / "m.yaml").string() + ":3");
  }
  fs::remove_all(dir);
}
