#include <catch2/catch.hpp>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

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
  CHECK(c.model("Qwen 2.5 Coder 32B!").id == "qwen2.5-coder-32b-instruct");
  // folded names match whole: neither a prefix nor an extension of one does
  CHECK(c.find_model("qwen2.5-coder-32") == nullptr);
  CHECK(c.find_model("qwen2.5-coder-32b-instruct-x") == nullptr);
  CHECK(c.gpu("RTX 3090").id == c.gpu("rtx3090").id);
  CHECK(c.gpu("h100-sxm").total_mib == 81559);
}

TEST_CASE("an id as written wins over another entry's name that folds to it") {
  Catalog c = kvtest::catalog();
  REQUIRE(c.models.size() > 2);
  const std::string later = c.models.back().id;
  c.models.front().aliases.push_back(later);  // an earlier model claims the later one's id as an alias
  CHECK(c.model(later).id == later);
  CHECK(c.model(" " + later + " ").id == c.models.front().id);  // folded, the earlier entry's alias matches first
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

TEST_CASE("data overlays: a name that folds to another model's (its id, alias, Hub id or Hub repo name) is an input error") {
  const fs::path dir = fs::temp_directory_path() / "kvplan_catalog_test_names";
  fs::create_directories(dir);
  // the repo name of Nemotron 3 Nano's Hub id (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16), none of its other names
  for (const std::string alias : {"nvidia nemotron 3 nano 30b a3b bf16", "qwen2.5-coder-32b-instruct"}) {
    INFO(alias);
    {
      std::ofstream(dir / "models.yaml") << "models:\n  - id: qwen2.5-0.5b-instruct\n    aliases: [\"" << alias << "\"]\n";
    }
    try {
      (void)load_catalog({dir.string()});
      FAIL("the overlay loaded");
    } catch (const InputError& e) {
      CHECK(e.field() == "data models");
      CHECK(e.value() == alias);
      CHECK(std::string(e.what()).find("used by both") != std::string::npos);
    }
  }
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

namespace {
// A citation a user cannot follow: a path into private notes ("shared/...", "/work/..."), the research notes' own file
// names or labels without a repository path ("sensitivity.md", "research §1.2", "write-up B"), or a section of a
// bare file name ("notes.md §2.3", "notes.md 2.3"). A path with a directory ("docs/formulas.md §5",
// "tools/quantize/README.md") names a file of kvplan or of a public repository and passes. Returns what matched.
std::string private_reference(const std::string& s) {
  for (const char* needle : {"shared/", "/work/", "research §", "research formulas", "community-reports", "write-up A",
                             "write-up B", "sensitivity.csv", "peers.md"})
    if (s.find(needle) != std::string::npos) return needle;
  for (std::size_t at = s.find(".md"); at != std::string::npos; at = s.find(".md", at + 1)) {
    std::size_t begin = at;
    while (begin > 0 && (std::isalnum(static_cast<unsigned char>(s[begin - 1])) || std::strchr("_.-", s[begin - 1]) != nullptr))
      --begin;
    if (begin > 0 && s[begin - 1] == '/') continue;  // a path
    const std::string name = s.substr(begin, at + 3 - begin);
    if (name == "formulas.md" || name == "sensitivity.md" || name == "catalog.md") return name;
    std::size_t after = at + 3;
    while (after < s.size() && s[after] == ' ') ++after;
    if (s.compare(after, 2, "\xc2\xa7") == 0) return name + " \xc2\xa7";
    if (after + 2 < s.size() && std::isdigit(static_cast<unsigned char>(s[after])) && s[after + 1] == '.' &&
        std::isdigit(static_cast<unsigned char>(s[after + 2])))
      return name + " " + s.substr(after, 3);
  }
  return {};
}

// Every source string the catalog exposes (and the texts printed next to them), labelled by where it is.
std::vector<std::pair<std::string, std::string>> exposed_sources(const Catalog& c) {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const std::string& where, const std::string& text) { out.emplace_back(where, text); };
  for (const auto& m : c.models) {
    add("model " + m.id + " source", m.source);
    add("model " + m.id + " note", m.note);
  }
  for (const auto& g : c.gpus) {
    add("gpu " + g.id + " source", g.source);
    add("gpu " + g.id + " total_source", g.total_source);
  }
  for (const auto& e : c.engines) {
    add("engine " + e.id + " build_source", e.build_source);
    add("engine " + e.id + " margin_source", e.margin_source);
    for (const auto& b : e.backends) add("engine " + e.id + " backend " + b.id, b.source);
    for (const auto& r : e.build_rules) add("engine " + e.id + " build rule " + r.rule, r.source);
  }
  for (const auto& f : c.weight_formats) {
    add("format " + f.id + " source", f.source);
    add("format " + f.id + " quality_source", f.quality_source);
  }
  for (const auto& r : c.runtimes) {
    for (const auto* field : {&r.source, &r.memory_fraction_source, &r.activation_source, &r.sampler_source, &r.overhead_source, &r.margin_source})
      add("runtime " + r.id, *field);
    for (const auto& t : r.cache_types) add("runtime " + r.id + " cache type " + t.id, t.source);
    for (const auto& f : r.weight_formats) add("runtime " + r.id + " format " + f.id, f.source + " " + f.quality_source);
    for (const auto& rule : r.rules) add("runtime " + r.id + " rule", rule);
  }
  for (const auto& t : c.tasks) add("task " + t.id + " source", t.source);
  add("prior source", c.prior.source);
  for (const auto& f : c.prior.families) add("prior family " + f.family, f.source);
  for (const auto& m : c.prior.measured) add("prior measured " + m.id, m.text + " [" + m.source + "]");
  for (const auto& e : c.prior.evidence) add("prior evidence " + e.id, e.text + " [" + e.source + "]");
  return out;
}
}  // namespace

TEST_CASE("the private-reference check flags what users cannot follow and passes public paths") {
  CHECK(private_reference("community write-up B, shared/research/community-reports.md; rows writeupB-04") == "shared/");
  CHECK(private_reference("Source keys as in /work/shared/research/catalog.md") == "shared/");
  CHECK(private_reference("KVTuner (sensitivity.md \xc2\xa7" "2.1.5)") == "sensitivity.md");
  CHECK(private_reference("starting point sensitivity.md 2.3") == "sensitivity.md");
  CHECK(private_reference("swa: formulas.md 7.2 (n_swa 1024)") == "formulas.md");
  CHECK(private_reference("cc 12.0 per catalog.md (the RTX 5090 reference note)") == "catalog.md");
  CHECK(private_reference("research \xc2\xa7" "7.4 (DeepSeek-V2-Lite)") == "research \xc2\xa7");
  CHECK(private_reference("see notes.md \xc2\xa7" "3") == "notes.md \xc2\xa7");
  CHECK(private_reference("see notes.md 2.3") == "notes.md 2.3");
  CHECK(private_reference("community write-up A; Level1Techs") == "write-up A");
  CHECK(private_reference("docs/formulas.md \xc2\xa7" "5.2; llama.cpp tools/quantize/README.md") == "");
  CHECK(private_reference("sgl-project/sglang docs/advanced_features/quantized_kv_cache.md (PR #10078)") == "");
  CHECK(private_reference("ATINEO rtx6000ada_specs.md (48 GB)") == "");
  CHECK(private_reference("a community llama.cpp sweep on Qwen3-0.6B (not re-verified; data/priors/measurements.csv "
                          "rows writeupB-04, writeupB-05)") == "");
  // A --data override that cites a private note is found among the catalog's sources.
  const fs::path dir = fs::temp_directory_path() / "kvplan_catalog_test_private_source";
  fs::create_directories(dir);
  {
    std::ofstream(dir / "gpus.yaml") << "gpus:\n  - id: rtx4090\n    source: \"see shared/research/catalog.md Part C\"\n";
  }
  const Catalog c = load_catalog({dir.string()});
  bool found = false;
  for (const auto& [where, text] : exposed_sources(c))
    if (where == "gpu rtx4090 source") found = !private_reference(text).empty();
  CHECK(found);
  fs::remove_all(dir);
}

TEST_CASE("every source the built-in catalog exposes is public: no private notes, no /work/ paths") {
  const auto sources = exposed_sources(kvtest::catalog());
  CHECK(sources.size() > 200);
  for (const auto& [where, text] : sources) {
    INFO(where << ": " << text);
    CHECK(private_reference(text) == "");
  }
}

TEST_CASE("no file under data/ cites the private research notes") {
  const fs::path data = fs::path(KVPLAN_SOURCE_DIR) / "data";
  REQUIRE(fs::is_directory(data));
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(data)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      INFO(entry.path().string() << ":" << n << ": " << line.substr(0, 300));
      CHECK(line.find("shared/research") == std::string::npos);
      CHECK(line.find("/work/shared") == std::string::npos);
      CHECK(private_reference(line) == "");
    }
  }
  CHECK(files >= 20);
}

namespace {
// f16 K + V bytes of one catalog model at 4096 cells (a multiple of 256: no padding), on CUDA.
std::int64_t kv_bytes_4096(const char* model) {
  const ModelSpec& m = kvtest::catalog().model(model);
  const auto s = context_shape(m, kvtest::engine(), 4096, 1, false, 512, 2048, false);
  const auto kv = kv_cache_bytes(m, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda());
  return kv.k.bytes + kv.v.bytes + kv.swa_k.bytes + kv.swa_v.bytes;
}
}  // namespace

// Each figure is layers x kv_heads x head_dim x 2 (K and V) x 2 bytes (f16) x 4096, from the config.json the entry cites.
TEST_CASE("issue 16 catalog entries: f16 KV at 4096 tokens from each config.json", "[catalog][issue16]") {
  const std::int64_t n = 4096;
  // GLM-4.5-Air config: num_hidden_layers 46 + num_nextn_predict_layers 1, num_key_value_heads 8, head_dim 128; the MTP
  // block is a GGUF block with a cache of its own (llama-kv-cache.cpp loops over n_layer_all; no MTP filter for glm4moe)
  CHECK(kv_bytes_4096("glm-4.5-air") == (46LL + 1) * 8 * 128 * 2 * 2 * n);
  // GLM-4.5 / GLM-4.6 config: 92 layers + 1 MTP, 8 KV heads, head_dim 128
  CHECK(kv_bytes_4096("glm-4.5") == (92LL + 1) * 8 * 128 * 2 * 2 * n);
  CHECK(kv_bytes_4096("glm-4.6") == (92LL + 1) * 8 * 128 * 2 * 2 * n);
  // Devstral Small / Magistral Small = Mistral Small 3.1 decoder: 40 layers, 8 KV heads, head_dim 128
  CHECK(kv_bytes_4096("devstral") == 40LL * 8 * 128 * 2 * 2 * n);
  CHECK(kv_bytes_4096("devstral-small-2505") == 40LL * 8 * 128 * 2 * 2 * n);
  CHECK(kv_bytes_4096("magistral-small-2509") == 40LL * 8 * 128 * 2 * 2 * n);
  // Qwen3-Coder-480B-A35B config: 62 layers, 8 KV heads, head_dim 128
  CHECK(kv_bytes_4096("qwen3-coder-480b-a35b-instruct") == 62LL * 8 * 128 * 2 * 2 * n);
  // Qwen3-30B-A3B-Thinking-2507: 48 layers, 4 KV heads, head_dim 128; Qwen3-4B-Thinking-2507: 36 layers, 8 x 128
  CHECK(kv_bytes_4096("qwen3-30b-a3b-thinking-2507") == 48LL * 4 * 128 * 2 * 2 * n);
  CHECK(kv_bytes_4096("qwen3-4b-thinking-2507") == 36LL * 8 * 128 * 2 * 2 * n);
  // DeepSeek-V3.1 (V3 shapes): MLA latent K of kv_lora_rank 512 + rope 64 per layer, no V (V-less cache), 61 layers
  CHECK(kv_bytes_4096("deepseek-v3.1") == 61LL * (512 + 64) * 2 * n);
  // Gemma 3n E2B / E4B: layers 0-19 own a cache (llama.cpp n_layer_kv_from_start 20); every 5th global:
  // 4 global layers x 4096 cells + 16 sliding layers x PAD(512 window + 512 ubatch, 256) = 1024 cells; 2 KV heads x 256
  CHECK(kv_bytes_4096("gemma-3n-e2b-it") == 4LL * 2 * 256 * 2 * 2 * n + 16LL * 2 * 256 * 2 * 2 * 1024);
  CHECK(kv_bytes_4096("gemma-3n-e4b-it") == 4LL * 2 * 256 * 2 * 2 * n + 16LL * 2 * 256 * 2 * 2 * 1024);
}

TEST_CASE("Ollama tags resolve to the catalog entry, with or without a weight suffix", "[catalog][issue16]") {
  const auto& c = kvtest::catalog();
  CHECK(c.model("qwen3:30b").id == "qwen3-30b-a3b");  // Ollama's qwen3:30b is the MoE, not the dense 32B
  CHECK(c.model("qwen3-30b").id == "qwen3-30b-a3b");  // punctuation aside, the same name
  CHECK(c.model("qwen3:30b-a3b-q4_K_M").id == "qwen3-30b-a3b");
  CHECK(c.model("qwen3:30b-a3b-thinking-2507-q4_K_M").id == "qwen3-30b-a3b-thinking-2507");
  CHECK(c.model("qwen3:30b-a3b-instruct-2507-q8_0").id == "qwen3-30b-a3b-instruct-2507");
  CHECK(c.model("qwen2.5-coder:32b-instruct-q4_K_M").id == "qwen2.5-coder-32b-instruct");
  CHECK(c.model("qwen3-coder:480b").id == "qwen3-coder-480b-a35b-instruct");
  CHECK(c.model("gemma3:27b-it-qat").id == "gemma-3-27b-it");
  CHECK(c.model("gemma3n:e4b").id == "gemma-3n-e4b-it");
  CHECK(c.model("gpt-oss:20b").id == "gpt-oss-20b");
  CHECK(c.model("llama3.3").id == "llama-3.3-70b-instruct");
  CHECK(c.model("devstral").id == "devstral-small-2507");
  CHECK(c.model("devstral:24b").id == "devstral-small-2507");
  CHECK(c.model("magistral:24b").id == "magistral-small-2509");
  CHECK(c.model("deepseek-v3.1:671b").id == "deepseek-v3.1");
  CHECK(c.model("glm-4.5-air").id == "glm-4.5-air");
  CHECK(c.model("zai-org/GLM-4.5-Air").id == "glm-4.5-air");
  CHECK(c.model("GLM-4.6").id == "glm-4.6");
  // a weight suffix only after an Ollama ':' tag; a name that is not a model stays unknown
  CHECK_THROWS_AS(c.model("qwen3-q4_K_M"), InputError);
  CHECK(c.find_model("qwen3:30b-fp16") == &c.model("qwen3-30b-a3b"));
}

namespace {
std::string suggestion_for(const std::string& name) {
  try {
    kvtest::catalog().model(name);
  } catch (const InputError& e) {
    CHECK(e.field() == "--model");
    CHECK(e.value() == name);
    CHECK_FALSE(e.accepted().empty());
    return e.suggestion();
  }
  FAIL("'" << name << "' resolved");
  return {};
}
}  // namespace

TEST_CASE("'did you mean' for a model keeps its line, the nearest size and MoE for MoE", "[catalog][issue16]") {
  CHECK(suggestion_for("qwen3-29b") == "qwen3-30b-a3b");     // 30.5B MoE, not the dense 32.8B
  CHECK(suggestion_for("qwen3:31b") == "qwen3-30b-a3b");
  CHECK(suggestion_for("qwen3-33b") == "qwen3-32b");
  CHECK(suggestion_for("qwen3:7b") == "qwen3-8b");
  CHECK(suggestion_for("qwen3-20b-a3b") == "qwen3-30b-a3b");  // says MoE: the dense 14B is not offered
  CHECK(suggestion_for("qwen2.5-coder:30b") == "qwen2.5-coder-32b-instruct");  // the Coder line, not Qwen2.5-32B
  CHECK(suggestion_for("gemma3:26b") == "gemma-3-27b-it");
  CHECK(suggestion_for("qwn3:30b") == "qwen3-30b-a3b");  // a typo in the line
  CHECK(suggestion_for("glm-4.5-ai") == "glm-4.5-air");  // no size named: the closest spelling
}

TEST_CASE("architectures llama.cpp loads but kvplan does not size are refused naming the architecture", "[catalog][issue16]") {
  Request r;
  r.gpu = "80GB";
  auto spec = std::make_shared<ModelSpec>(kvtest::catalog().model("deepseek-v3"));
  spec->arch = "plamo2";  // loaded by b10454, listed in unmodelled_archs
  r.model = "plamo-2-8b.gguf";
  r.model_spec = spec;
  try {
    plan(kvtest::catalog(), r);
    FAIL("planned an architecture kvplan has no rules for");
  } catch (const InputError& e) {
    INFO(e.what());
    CHECK(e.field() == "--model");
    CHECK(std::string(e.what()).find("'plamo2'") != std::string::npos);
    CHECK(std::string(e.what()).find("hybrid") != std::string::npos);
  }
  // loaded by b10454 and checked by tests/validation (gemma4-tiny, nemotron_h_moe-tiny, falcon-h1-tiny): sized
  for (const char* arch : {"glm4moe", "qwen35", "qwen35moe", "nemotron_h", "gemma4", "nemotron_h_moe", "falcon-h1", "deepseek32"}) {
    INFO(arch);
    CHECK(kvtest::engine().arch(arch) != nullptr);
    CHECK(kvtest::engine().unmodelled_archs.count(arch) == 0);
  }
}

// DeepSeek-V3.2 (DSA): the MLA latent (512 + 64) and, in a second cache of the same cells and type_k, the lightning
// indexer's one 128-wide key per layer and token (src/llama-kv-cache-dsa.cpp); both in k_cache, no V. By hand from
// the entry's config (deepseek-ai/DeepSeek-V3.2-Exp inference/model.py index_head_dim 128).
TEST_CASE("issue 16: DeepSeek-V3.2's K cache holds the MLA latent and the indexer keys", "[catalog][issue16]") {
  const std::int64_t n = 4096;
  CHECK(kv_bytes_4096("deepseek-v3.2-exp") == 61LL * (576 + 128) * 2 * n);
  CHECK(kv_bytes_4096("deepseek-v3.2-exp") - kv_bytes_4096("deepseek-v3.1") == 61LL * 128 * 2 * n);
  // q8_0: 34 bytes per 32 elements, in both caches
  const ModelSpec& m = kvtest::catalog().model("deepseek-v3.2-exp");
  const auto s = context_shape(m, kvtest::engine(), 4096, 1, false, 512, 2048, false);
  const auto kv = kv_cache_bytes(m, kvtest::engine(), s, kvtest::type("q8_0"), kvtest::type("q8_0"), true, kvtest::cuda());
  CHECK(kv.k.unpadded == 61LL * (576 + 128) / 32 * 34 * n);
  CHECK(kv.v.unpadded == 0);
  Request r;
  r.gpu = "80GB";
  r.model = "deepseek-v3.2";  // planned now, not refused
  CHECK_NOTHROW(plan(kvtest::catalog(), r));
}

// Hybrids: f16 KV of the attention layers at 4096 tokens and the f32 recurrent state of one sequence, by hand from the
// config.json the entry cites (r = (d_conv-1)(d_inner + 2 n_group d_state), s = d_state d_inner per recurrent layer).
TEST_CASE("issue 16 hybrid entries: Qwen3.5/3.6 and Nemotron-H KV and state from each config", "[catalog][issue16]") {
  auto state_bytes = [](const char* model) {
    const ModelSpec& m = kvtest::catalog().model(model);
    const auto s = context_shape(m, kvtest::engine(), 4096, 1, false, 512, 2048, false);
    return kv_cache_bytes(m, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::cuda()).state.unpadded;
  };
  const std::int64_t n = 4096;
  // Qwen3.5-27B: 64 layers (+ the MTP block, no cache), attention at il % 4 == 3: 16 layers x 4 KV heads x 256;
  // 48 GDN layers: r = 3 (6144 + 2 16 128) = 30720, s = 128 x 6144 = 786432
  CHECK(kv_bytes_4096("qwen3.5-27b") == 16LL * 4 * 256 * 2 * 2 * n);
  CHECK(state_bytes("qwen3.5-27b") == 48LL * (30720 + 786432) * 4);
  // Qwen3.6-35B-A3B: 40 layers (+ MTP): 10 attention layers x 2 KV heads x 256; 30 GDN layers: r = 3 (4096 + 4096), s = 128 x 4096
  CHECK(kv_bytes_4096("qwen3.6-35b-a3b") == 10LL * 2 * 256 * 2 * 2 * n);
  CHECK(state_bytes("qwen3.6-35b-a3b") == 30LL * (24576 + 524288) * 4);
  // Nemotron-Nano-9B-v2: 4 attention layers x 8 KV heads x 128; 27 Mamba-2 layers: r = 3 (10240 + 2 8 128), s = 128 x 10240;
  // the 25 FFN-only layers hold nothing
  CHECK(kv_bytes_4096("nvidia-nemotron-nano-9b-v2") == 4LL * 8 * 128 * 2 * 2 * n);
  CHECK(state_bytes("nvidia-nemotron-nano-9b-v2") == 27LL * (36864 + 1310720) * 4);
  // Falcon-H1-7B (parallel hybrid): every one of 44 layers holds 2 KV heads x 128 and a Mamba-2 state
  // r = 3 (3072 + 2 1 256) = 10752, s = 256 x 3072 = 786432
  CHECK(kv_bytes_4096("falcon-h1-7b") == 44LL * 2 * 128 * 2 * 2 * n);
  CHECK(state_bytes("falcon-h1-7b") == 44LL * (10752 + 786432) * 4);
  const ModelSpec& q = kvtest::catalog().model("qwen3.5-27b");
  CHECK_FALSE(q.is_recurrent(64));  // the MTP block
  CHECK(q.kv_heads_at(64) == 0);
}

// The KV cache (and Nemotron's recurrent state) of the Gemma 4 and Nemotron 3 Nano entries against the pinned llama.cpp
// (b10454, llama-cpp-python 0.3.35): synthetic GGUFs with each entry's layer count, KV heads per layer, head sizes,
// sliding pattern and window, shared-KV layers and (k_eq_v) no attn_v on full layers, small n_embd/n_ff/vocab, loaded
// with n_ctx 4096, n_ubatch 512, flash attention, f16 cache. The MiB below are llama.cpp's "llama_kv_cache: size" and
// "llama_memory_recurrent: size" lines (K or V of the full cache, K or V of the SWA cache, and its cells).
TEST_CASE("issue 16: Gemma 4 and Nemotron 3 Nano caches equal llama.cpp's at 4096 tokens", "[catalog][issue16][gemma4]") {
  constexpr std::int64_t MiB = 1 << 20;
  struct Row {
    const char* model;
    double full_k_mib, swa_k_mib, swa_k_mib_full;  // swa_full false / true
  };
  // 31B: 10 full layers x 4 x 512 and 50 sliding x 16 x 256 (SWA cache 1536 cells = window 1024 + ubatch 512);
  // 26B-A4B: 5 x 2 x 512 and 25 x 8 x 256; E4B: 4 x 2 x 512 and 20 x 2 x 256 (1024 cells; layers 24-41 reuse);
  // E2B: 3 x 1 x 512 and 12 x 1 x 256 (layers 15-34 reuse); 12B: 8 x 1 x 512 and 40 x 8 x 256.
  for (const Row& r : {Row{"gemma-4-31b-it", 160, 600, 1600}, Row{"gemma-4-26b-a4b-it", 40, 150, 400},
                       Row{"gemma-4-e4b-it", 32, 20, 80}, Row{"gemma-4-e2b-it", 12, 6, 24},
                       Row{"gemma-4-12b-it", 32, 240, 640}}) {
    INFO(r.model);
    const ModelSpec& m = kvtest::catalog().model(r.model);
    for (bool swa_full : {false, true}) {
      const auto s = context_shape(m, kvtest::engine(), 4096, 1, false, 512, 2048, swa_full);
      const auto kv = kv_cache_bytes(m, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::engine().backend("cpu"));
      CHECK(kv.k.unpadded == static_cast<std::int64_t>(r.full_k_mib * MiB));
      CHECK(kv.v.unpadded == kv.k.unpadded);
      CHECK(kv.swa_k.unpadded == static_cast<std::int64_t>((swa_full ? r.swa_k_mib_full : r.swa_k_mib) * MiB));
      CHECK(kv.swa_v.unpadded == kv.swa_k.unpadded);
    }
  }
  // Nemotron 3 Nano: K 12 MiB and V 12 MiB (6 attention layers x 2 x 128), state R 1.62 MiB + S 46.00 MiB
  // (23 Mamba-2 layers: 3 x 6144 and 128 x 4096 f32 per sequence).
  const ModelSpec& n = kvtest::catalog().model("nvidia-nemotron-3-nano-30b-a3b");
  const auto s = context_shape(n, kvtest::engine(), 4096, 1, false, 512, 2048, false);
  const auto kv = kv_cache_bytes(n, kvtest::engine(), s, kvtest::type("f16"), kvtest::type("f16"), true, kvtest::engine().backend("cpu"));
  CHECK(kv.k.unpadded == 12 * MiB);
  CHECK(kv.v.unpadded == 12 * MiB);
  CHECK(kv.state.unpadded == 23LL * (3 * 6144 + 128 * 4096) * 4);
  CHECK(static_cast<double>(kv.state.unpadded) / MiB == Approx(47.62).margin(0.005));
}
