// Engines other than llama.cpp: KV bytes against the per-token figures each engine's documented formula
// gives (the engines' cache code cited in data/engines/*.yaml and docs/engines.md), weights from the parameter count,
// refusals, and launch lines checked verbatim. Every expected number is worked out by hand here.
#include <catch2/catch.hpp>

#include "engines/runtimes.hpp"
#include "helpers.hpp"

using namespace kvplan;

namespace {
const RuntimeProfile& runtime(const char* id) { return *kvtest::catalog().runtime(id); }
const RuntimeCacheType& ctype(const RuntimeProfile& rt, const char* id) { return *rt.cache_type(id); }
const ModelSpec& model(const char* id) { return kvtest::catalog().model(id); }

// Total KV bytes (K + V + sliding + state) for `seqs` sequences of `len` tokens.
Bytes kv(const char* engine, const char* model_id, const char* k, const char* v, int len, int seqs = 1, int batch = 2048) {
  const RuntimeProfile& rt = runtime(engine);
  const KvCacheBytes b = engines::runtime_kv_bytes(rt, model(model_id), kvtest::engine(), ctype(rt, k), ctype(rt, v), len, seqs, batch);
  return b.k.bytes + b.v.bytes + b.swa_k.bytes + b.swa_v.bytes + b.state.bytes;
}

// Qwen2.5-Coder-32B: 64 layers, 8 KV heads × 128 = 1024 K and 1024 V elements per token and layer.
constexpr Bytes kQwenPerToken = 64LL * 2 * 1024;  // elements per token, K and V
constexpr int kCtx = 32768;
constexpr Bytes KiB = 1024;

Request ask(const char* engine, const char* gpu = "24GB", const char* model_id = "qwen2.5-coder-32b") {
  Request r;
  r.gpu = gpu;
  r.model = model_id;
  r.task = "agentic";
  r.engine = engine;
  return r;
}
}  // namespace

TEST_CASE("engine catalog: every runtime loads, with sources and prior types") {
  const auto& c = kvtest::catalog();
  for (const char* id : {"ollama", "vllm", "sglang", "exllamav2", "exllamav3", "mlx"}) {
    const RuntimeProfile* rt = c.runtime(id);
    REQUIRE(rt != nullptr);
    CHECK_FALSE(rt->source.empty());
    CHECK_FALSE(rt->rules.empty());
    for (const auto& t : rt->cache_types) CHECK_FALSE(t.source.empty());
    for (const auto& f : rt->weight_formats) CHECK_FALSE(f.source.empty());
  }
  CHECK(c.runtime("llama.cpp") == nullptr);
  CHECK(c.runtime("tabbyapi")->id == "exllamav3");
  CHECK(c.runtime("mlx-lm")->id == "mlx");
  CHECK_THROWS_WITH(c.runtime("vlm"), Catch::Contains("did you mean 'vllm'"));
}

TEST_CASE("vLLM KV: FullAttentionSpec page bytes, one dtype for K and V (vllm/v1/kv_cache_interface.py)") {
  // bf16: 256 KiB per token; fp8: 128 KiB (64 layers × 8 KV heads × (128 + 128) × 2 B, and × 1 B).
  CHECK(kv("vllm", "qwen2.5-coder-32b", "auto", "auto", kCtx) == 256 * KiB * kCtx);
  CHECK(kv("vllm", "qwen2.5-coder-32b", "fp8", "fp8", kCtx) == 128 * KiB * kCtx);
  CHECK(kv("vllm", "qwen2.5-coder-32b", "fp8_e5m2", "fp8_e5m2", kCtx, 4) == 4 * 128 * KiB * kCtx);
  // Blocks of 16 tokens: 1000 tokens hold cdiv(1000, 16) = 63 blocks = 1008 tokens.
  CHECK(kv("vllm", "qwen2.5-coder-32b", "auto", "auto", 1000) == 1008 * 256 * KiB);
}

TEST_CASE("vLLM KV: sliding-window layers keep window - 1 + max_num_batched_tokens tokens (SlidingWindowSpec)") {
  // Gemma 3 27B: 10 full layers and 52 sliding (window 1024), 16 KV heads × 128 = 2048 elements.
  // Sliding: (cdiv(min(1024 - 1 + 2048, 32768), 16) + 1) × 16 = (192 + 1) × 16 = 3088 tokens.
  const Bytes full = 10LL * kCtx * 2048 * 2 * 2;
  const Bytes sliding = 52LL * 3088 * 2048 * 2 * 2;
  CHECK(kv("vllm", "gemma-3-27b", "auto", "auto", kCtx) == full + sliding);
  // With max_num_batched_tokens 8192 (H100-class defaults): (cdiv(9215, 16) + 1) × 16 = 9232.
  CHECK(kv("vllm", "gemma-3-27b", "auto", "auto", kCtx, 1, 8192) == full + 52LL * 9232 * 2048 * 2 * 2);
}

TEST_CASE("vLLM KV: MLA caches 576 elements per token and layer, no V (MLAAttentionSpec, vllm/v1/kv_cache_interface.py)") {
  // DeepSeek-V2-Lite, 27 layers: 1152 B per token and layer in bf16 = 972 MiB at 32k.
  CHECK(kv("vllm", "deepseek-v2-lite", "auto", "auto", kCtx) == 27LL * kCtx * 1152);
  CHECK(kvtest::mib(kv("vllm", "deepseek-v2-lite", "auto", "auto", kCtx)) == Approx(972.0));
}

TEST_CASE("SGLang KV: cell_size × tokens (profile_max_num_token)") {
  CHECK(kv("sglang", "qwen2.5-coder-32b", "fp8_e4m3", "fp8_e4m3", kCtx) == 128 * KiB * kCtx);
  CHECK(kv("sglang", "qwen2.5-coder-32b", "fp4_e2m1", "fp4_e2m1", kCtx) == 72 * KiB * kCtx);
  CHECK(kv("sglang", "qwen2.5-coder-32b", "auto", "auto", 1000) == 1000 * 256 * KiB);  // page size 1
}

TEST_CASE("ExLlamaV2 KV: FP16/Q8/Q6/Q4 storage with fp16 scales per 32, pages of 256 (exllamav2/cache.py)") {
  // §7.1: EXL2 FP16 256, Q8 136, Q6 104, Q4 72 KiB per token.
  CHECK(kv("exllamav2", "qwen2.5-coder-32b", "FP16", "FP16", kCtx) == 256 * KiB * kCtx);
  CHECK(kv("exllamav2", "qwen2.5-coder-32b", "Q8", "Q8", kCtx) == 136 * KiB * kCtx);
  CHECK(kv("exllamav2", "qwen2.5-coder-32b", "Q6", "Q6", kCtx) == 104 * KiB * kCtx);
  CHECK(kv("exllamav2", "qwen2.5-coder-32b", "Q4", "Q4", kCtx) == 72 * KiB * kCtx);
  CHECK(kv("exllamav2", "qwen2.5-coder-32b", "FP16", "FP16", 1000) == 1024 * 256 * KiB);  // PAGED_PAGE_SIZE 256
}

TEST_CASE("ExLlamaV3 KV: k_bits and v_bits separately (CacheLayer_quant, exllamav3/cache/quant.py)") {
  // §7.1: EXL3 k4v4 72, k6v6 104, k8v8 136 KiB per token; k8v4 = 1024 × 64 × (1.0625 + 0.5625) B = 104 KiB.
  CHECK(kv("exllamav3", "qwen2.5-coder-32b", "4", "4", kCtx) == 72 * KiB * kCtx);
  CHECK(kv("exllamav3", "qwen2.5-coder-32b", "6", "6", kCtx) == 104 * KiB * kCtx);
  CHECK(kv("exllamav3", "qwen2.5-coder-32b", "8", "8", kCtx) == 136 * KiB * kCtx);
  CHECK(kv("exllamav3", "qwen2.5-coder-32b", "8", "4", kCtx) == 104 * KiB * kCtx);
}

TEST_CASE("MLX KV: 256-token steps; bits/8 + scale and bias per 64 (mlx_lm/models/cache.py)") {
  CHECK(kv("mlx", "qwen2.5-coder-32b", "8", "8", kCtx) == 136 * KiB * kCtx);
  CHECK(kv("mlx", "qwen2.5-coder-32b", "4", "4", kCtx) == 72 * KiB * kCtx);
  CHECK(kv("mlx", "qwen2.5-coder-32b", "fp16", "fp16", 1000) == 1024 * 256 * KiB);
  // Gemma 3 27B sliding layers: a rotating cache of the window (1024), which peaks during a 2048-token
  // prefill chunk at 1023 + 2048 = 3071 tokens (measured: tests/validation/results/mlx-cache.csv).
  CHECK(kv("mlx", "gemma-3-27b", "fp16", "fp16", kCtx) == 10LL * kCtx * 2048 * 4 + 52LL * 3071 * 2048 * 4);
  CHECK(kv("mlx", "gemma-3-27b", "fp16", "fp16", 1000) == 10LL * 1024 * 2048 * 4 + 52LL * 1024 * 2048 * 4);
  CHECK(kv("mlx", "gemma-3-27b", "fp16", "fp16", 1500) == 10LL * 1536 * 2048 * 4 + 52LL * 1500 * 2048 * 4);
}

TEST_CASE("weights from the parameter count: linear, head and embeddings at their own bits") {
  const ModelSpec& m = model("qwen2.5-coder-32b");  // 32,763,876,352 params, untied, vocab 152064 × 5120
  const double embed = 152064.0 * 5120;
  const double linear = 32763876352.0 - 2 * embed;
  const auto bytes = [&](const char* engine, const char* format) {
    for (const auto& f : runtime(engine).weight_formats)
      if (f.id == format) return engines::runtime_weight_bytes(m, f, 0.05);
    FAIL("no format");
    return WeightBytes{};
  };
  CHECK(bytes("vllm", "bf16").device.bytes == 32763876352LL * 2);
  CHECK(static_cast<double>(bytes("vllm", "awq").device.bytes) == Approx(linear * 4.156 / 8 + 2 * embed * 2).epsilon(1e-9));
  // EXL2: token embeddings fp16 in system RAM, lm_head at 6 bits on the GPU.
  const WeightBytes exl2 = bytes("exllamav2", "4.0bpw");
  CHECK(exl2.host.bytes == 152064LL * 5120 * 2);
  CHECK(static_cast<double>(exl2.device.bytes) == Approx(linear * 4.0 / 8 + embed * 6 / 8).epsilon(1e-9));
  CHECK(exl2.device.high > exl2.device.bytes);  // an estimate with an upper bound
  CHECK(bytes("mlx", "4bit").device.bytes == std::llround(32763876352.0 * 4.5 / 8));
}

TEST_CASE("Ollama: llama.cpp's memory, one cache type, per-slot num_ctx, env and Modelfile lines") {
  Request r = ask("ollama", "rtx5090");
  r.ctx_size = 32768;
  r.cache_type_k = "q8_0";  // one type: V follows
  r.weights = "Q4_K_M";
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  const Option& o = *p.recommended();
  CHECK(o.cache_type_v == "q8_0");
  CHECK(kvtest::mib(o.sum("k_cache") + o.sum("v_cache")) == Approx(4352.0));  // docs/formulas.md §2
  REQUIRE(o.launches.size() == 2);
  CHECK(o.launches[0].name == "ollama-env");
  CHECK(o.launches[0].text ==
        "OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE=q8_0 OLLAMA_NUM_PARALLEL=1 OLLAMA_CONTEXT_LENGTH=32768 ollama serve");
  CHECK(o.launches[1].text == "FROM ./Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf\nPARAMETER num_ctx 32768");
  // Placement is llama-server's fit with its default target of 1024 MiB; the plan keeps what the target leaves
  // after what fit cannot see: CUDA pool growth (300 MiB bound) and the Blackwell cuBLAS workspace (32 MiB).
  CHECK(p.resolved.placement == "llama-server --fit");
  CHECK(p.resolved.fit_target_mib == 1024);
  CHECK(p.pools.front().margin == (1024LL - 300 - 32) << 20);
  // num_gpu: Ollama passes -ngl, so kvplan places the layers and the Modelfile says so.
  Request ngl = r;
  ngl.n_gpu_layers = 40;
  const Plan pn = plan(kvtest::catalog(), ngl);
  REQUIRE(!pn.options.empty());
  CHECK(pn.resolved.placement == "kvplan");
  CHECK(pn.options.front().launches[1].text.find("PARAMETER num_gpu 40") != std::string::npos);
  ngl.n_gpu_layers.reset();
  ngl.n_cpu_moe = -1;
  CHECK_THROWS_WITH(plan(kvtest::catalog(), ngl), Catch::Contains("Ollama has no setting"));
  // Two slots: -c is num_ctx × 2 with a stream each; num_ctx stays per conversation.
  r.n_parallel = 2;
  r.ctx_size = 32768;
  const Plan two = plan(kvtest::catalog(), r);
  REQUIRE(!two.options.empty());
  CHECK(two.options.front().ctx_per_slot == 16384);
  CHECK(two.options.front().launches[1].text.find("PARAMETER num_ctx 16384") != std::string::npos);
  // An Ollama tag that names its quantization pulls exactly the file planned: the Modelfile uses it as typed. A bare
  // tag (an alias of data/models/qwen3.yaml) pulls the weights Ollama chose for it, unknown offline: the Modelfile
  // names the GGUF file of the planned weights and says why, so the launch never starts other weights than planned.
  for (const char* tag : {"qwen3:30b-a3b-q4_K_M", "Qwen3:30B-A3B-Q4_K_M"}) {
    Request t = ask("ollama", "rtx5090", tag);
    t.ctx_size = 8192;
    const Plan pt = plan(kvtest::catalog(), t);
    REQUIRE(!pt.options.empty());
    CHECK(pt.options.front().weights == "Q4_K_M");
    CHECK(pt.options.front().launches[1].text == std::string("FROM ") + tag + "\nPARAMETER num_ctx 8192");
  }
  for (const char* tag : {"qwen3:30b", "Qwen3:30B"}) {
    Request t = ask("ollama", "rtx5090", tag);
    t.ctx_size = 8192;
    const Plan pt = plan(kvtest::catalog(), t);
    REQUIRE(!pt.options.empty());
    const std::string& modelfile = pt.options.front().launches[1].text;
    CHECK(modelfile.rfind(std::string("# ") + tag + " pulls the weights Ollama chose", 0) == 0);
    CHECK(modelfile.find("\nFROM ./Qwen3-30B-A3B-" + pt.options.front().weights + ".gguf\nPARAMETER num_ctx 8192") != std::string::npos);
  }
  Request by_id = ask("ollama", "rtx5090", "qwen3-30b-a3b");
  by_id.ctx_size = 8192;
  const Plan pi = plan(kvtest::catalog(), by_id);
  REQUIRE(!pi.options.empty());
  CHECK(pi.options.front().launches[1].text.rfind("FROM ./", 0) == 0);
}

TEST_CASE("engine refusals: what each engine will not run exits 2 with the reason") {
  const auto& c = kvtest::catalog();
  Request r = ask("ollama");
  r.cache_type_k = "q8_0";
  r.cache_type_v = "q4_0";
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("Ollama has one cache type for K and V") && Catch::Contains("q8_0/q8_0"));
  r = ask("ollama");
  r.kv_unified = true;
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("never --kv-unified"));
  r = ask("vllm");
  r.cache_type_k = "q4_0";
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("unknown cache type for vLLM") && Catch::Contains("fp8"));
  r = ask("vllm");
  r.n_gpu_layers = 20;
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("--n-gpu-layers") && Catch::Contains("vLLM"));
  r = ask("vllm");
  r.weights = "Q4_K_M";
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("not a weight format of vLLM") && Catch::Contains("awq"));
  r = ask("exllamav3");
  r.cache_type_k = "FP16";
  r.cache_type_v = "4";
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("FP16 for both K and V or quantized for both"));
  r = ask("mlx", "rtx4090");
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("does not run on the CUDA backend"));
  r = ask("mlx", "m4max-128gb", "gemma-3-27b");
  r.cache_type_k = "8";
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("rotating cache, which cannot be quantized"));
  r = ask("vllm", "m4max-128gb");
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("vLLM does not run on the Metal backend"));
}

TEST_CASE("engine plans: budgets, concurrency and launch lines verbatim") {
  const auto& c = kvtest::catalog();
  // vLLM on an H100: 0.92 of TOTAL memory; pinned everything gives one line to compare.
  Request r = ask("vllm", "h100-sxm", "qwen3-14b");
  r.ctx_size = 32768;
  r.cache_type_k = "fp8";
  r.weights = "bf16";
  r.n_parallel = 4;   // --max-num-seqs
  r.concurrency = 4;  // the pool must hold four full-length conversations
  const Plan v = plan(c, r);
  REQUIRE(v.recommended());
  const Option& o = *v.recommended();
  CHECK(o.launch ==
        "vllm serve Qwen/Qwen3-14B --max-model-len 32768 --max-num-seqs 4 --kv-cache-dtype fp8 --gpu-memory-utilization 0.92");
  // Qwen3-14B: 40 layers × 8 KV heads × 128 × (K + V) × 1 B = 80 KiB per token in fp8.
  CHECK(o.sum("k_cache") + o.sum("v_cache") == 4LL * 80 * KiB * 32768);
  const Pool& dev = v.pools.front();
  CHECK(dev.reserve == std::llround(static_cast<double>(dev.capacity) * 0.08));
  // Concurrency: the pool's tokens (whole blocks of 16) over the request's (serving_test.cpp checks the formula).
  CHECK(o.kv_pool_tokens % 16 == 0);
  CHECK(o.max_concurrency == Approx(static_cast<double>(o.kv_pool_tokens) / 32768));
  CHECK(o.max_concurrency >= 4);
  CHECK(o.sum("cuda_graphs") > 0);

  r = ask("sglang", "h100-sxm");
  r.ctx_size = 16384;
  r.cache_type_k = "fp8_e4m3";
  r.weights = "awq";
  const Plan s = plan(c, r);
  REQUIRE(s.recommended());
  CHECK(s.recommended()->launch ==
        "python -m sglang.launch_server --model-path Qwen/Qwen2.5-Coder-32B-Instruct-AWQ --context-length 16384 "
        "--kv-cache-dtype fp8_e4m3 --mem-fraction-static 0.85");  // SGLang derives --max-running-requests; the repo carries its quantization
  CHECK(s.recommended()->sum("compute") == 0);  // activations live outside --mem-fraction-static

  r = ask("exllamav3", "rtx4090");
  r.ctx_size = 32768;
  r.cache_type_k = "8";
  r.cache_type_v = "4";
  r.weights = "4.0bpw";
  r.n_parallel = 2;
  const Plan x = plan(c, r);
  REQUIRE(!x.options.empty());
  CHECK(x.options.front().launch ==
        "model:\n  model_name: Qwen2.5-Coder-32B-Instruct-exl3-4.0bpw\n  max_seq_len: 32768\n  cache_size: 65536\n"
        "  cache_mode: \"8,4\"\n  chunk_size: 2048\n  max_batch_size: 2");

  r = ask("exllamav2", "rtx4090");
  r.ctx_size = 32768;
  r.cache_type_k = "Q6";
  r.weights = "4.0bpw";
  const Plan x2 = plan(c, r);
  REQUIRE(!x2.options.empty());
  // The fp16 temporary of one layer: 2 × 32768 × 1024 × 2 B = 128 MiB (exllamav2/cache.py footprint()).
  CHECK(x2.options.front().sum("cache_temp") == 128LL << 20);
  CHECK(x2.options.front().launch.find("cache_mode: Q6") != std::string::npos);

  r = ask("mlx", "m4max-128gb", "qwen3-14b");
  r.cache_type_k = "4";
  r.weights = "4bit";
  r.ctx_size = 32768;
  r.accept_risk = true;  // 4-bit keys at 32K rate avoid; the launch line is what is checked here
  const Plan mx = plan(c, r);
  REQUIRE(mx.recommended());
  REQUIRE(mx.recommended()->launches.size() == 1);  // mlx_lm.server cannot quantize the cache
  CHECK(mx.recommended()->launch ==
        "mlx_lm.generate --model mlx-community/Qwen3-14B-4bit --kv-bits 4 --kv-group-size 64 --quantized-kv-start 0 --prompt -");
  CHECK(mx.pools.size() == 1);  // unified memory
}

TEST_CASE("ranking under other engines keeps K precise: never a 4-bit K when an 8-bit one fits") {
  for (const char* e : {"ollama", "vllm", "sglang", "exllamav2", "exllamav3"}) {
    const Plan p = plan(kvtest::catalog(), ask(e, "rtx4090"));
    INFO(e);
    REQUIRE(!p.options.empty());
    const Option& best = p.options.front();
    CHECK(best.cache_type_k != "q4_0");
    CHECK(best.cache_type_k != "Q4");
    CHECK(best.cache_type_k != "4");
  }
}

TEST_CASE("tensor parallelism (vLLM, SGLang): figures per GPU, KV heads split, refusals") {
  const auto& c = kvtest::catalog();
  // Llama-3.3-70B: 80 layers, 8 KV heads × 128. Over 4 GPUs each holds 2 heads: per GPU and token
  // 80 × 2 × 128 × (K + V) × 2 B = 80 KiB in bf16.
  Request r = ask("vllm", "rtx4090", "llama-3.3-70b");
  r.tensor_parallel = 4;
  r.weights = "awq";
  r.ctx_size = 32768;
  r.cache_type_k = "auto";
  r.n_parallel = 4;
  r.concurrency = 4;
  const Plan p = plan(c, r);
  REQUIRE(!p.options.empty());
  const Option& o = p.options.front();
  CHECK(o.sum("k_cache") + o.sum("v_cache") == 4LL * 80 * KiB * 32768);
  CHECK(o.launch.find(" --tensor-parallel-size 4") != std::string::npos);
  CHECK(p.pools.front().device.find("4 x ") == 0);
  // The weights split four ways (the same format on one GPU is four times the bytes).
  for (const auto& f : runtime("vllm").weight_formats)
    if (f.id == "awq")
      CHECK(std::llabs(o.sum("weights") * 4 - engines::runtime_weight_bytes(model("llama-3.3-70b"), f, 0.05).device.bytes) <= 4);
  // More GPUs than KV heads: each GPU keeps one whole head (get_num_kv_heads: max(1, heads / tp)).
  r.tensor_parallel = 16;  // 64 attention heads / 16 = 4 per GPU; 8 KV heads → 1 per GPU
  const Plan wide = plan(c, r);
  REQUIRE(!wide.options.empty());
  CHECK(wide.options.front().sum("k_cache") == 4LL * 80 * 128 * 2 * 32768);
  r.tensor_parallel = 3;
  CHECK_THROWS_WITH(plan(c, r), Catch::Contains("must divide") && Catch::Contains("64 attention heads"));
  Request l = ask("llama.cpp", "rtx4090");
  l.tensor_parallel = 2;
  CHECK_THROWS_WITH(plan(c, l), Catch::Contains("vllm and sglang only"));
  Request sg = ask("sglang", "rtx4090", "llama-3.3-70b");
  sg.tensor_parallel = 4;
  sg.weights = "awq";
  const Plan s = plan(c, sg);
  REQUIRE(!s.options.empty());
  // A pre-quantized repo carries its quantization_config: no --quantization flag
  CHECK(s.options.front().launch.find("--model-path casperhansen/llama-3.3-70b-instruct-awq ") != std::string::npos);
  CHECK(s.options.front().launch.find(" --tp 4") != std::string::npos);
  CHECK(s.options.front().launch.find("--quantization") == std::string::npos);
}

TEST_CASE("vLLM activation: fused-MoE caches and the sampler run after the forward pass, worked by hand") {
  // Qwen3-235B-A22B over TP 4, 8192 tokens (vllm fused_moe.py fused_experts_impl): N = 2 x 1536 / 4 = 768,
  // cache13 = 8192 x 8 x max(768, 4096) and intermediate_cache2 = 8192 x 8 x 384 elements; per token also the
  // query rows 2 x 64 x 128 / 4 = 4096 and four hidden rows 16384; bf16: (8192 x 8 x 4480 + 8192 x 20480) x 2 B.
  const auto& c = kvtest::catalog();
  const RuntimeProfile& vllm = *c.runtime("vllm");
  const ModelSpec& m = c.model("qwen3-235b-a22b");
  const double forward = (8192.0 * 8 * 4480 + 8192.0 * 20480) * 2;  // 922,746,880 B
  CHECK(engines::runtime_activation_bytes(vllm, m, {8192, 0, 4, false}).bytes == static_cast<Bytes>(forward));
  // The sampler over 1024 rows follows with the hidden states still held: 8192 x 4096 x 2 + 1024 x 151936 x 14 B.
  const double sampler = 8192.0 * 4096 * 2 + 1024.0 * 151936 * vllm.sampler_bytes_per_logit;
  const Figure both = engines::runtime_activation_bytes(vllm, m, {8192, 1024, 4, false});
  CHECK(both.bytes == static_cast<Bytes>(std::max(forward, sampler)));
  CHECK(both.high == static_cast<Bytes>(std::max(forward, sampler) * 1.5));
  // Expert parallelism keeps each expert whole: N = 3072, cache13 = 8192 x 8 x 4096, cache2 = 8192 x 8 x 1536.
  const double ep = (8192.0 * 8 * (4096 + 1536) + 8192.0 * 20480) * 2;
  CHECK(engines::runtime_activation_bytes(vllm, m, {8192, 0, 4, true}).bytes == static_cast<Bytes>(ep));
}
