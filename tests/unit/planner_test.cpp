#include <algorithm>
// plan(): modes, refusals, nothing-fits and the mission request.
#include <catch2/catch.hpp>

#include "helpers.hpp"

using namespace kvplan;

namespace {
Request mission() {
  Request r;
  r.gpu = "24GB";
  r.model = "qwen2.5-coder-32b";
  r.task = "agentic";
  return r;
}
// Qwen3-30B-A3B in Q8_0 (about 30 GiB) on 24 GiB, f16 cache at 16K: fits only with its experts in RAM.
Request moe_on_24gb() {
  Request r;
  r.gpu = "24GB";
  r.model = "qwen3-30b-a3b";
  r.weights = "Q8_0";
  r.ctx_size = 16384;
  r.cache_type_k = r.cache_type_v = "f16";
  r.flash_attn = "on";
  return r;
}
}  // namespace

namespace {
Request ask(const char* gpu, const char* model, const char* task = "general") {
  Request r;
  r.gpu = gpu;
  r.model = model;
  r.task = task;
  return r;
}
}  // namespace

TEST_CASE("the mission: a 32B coder on a 24 GiB card for agentic work") {
  const Plan p = plan(kvtest::catalog(), mission());
  REQUIRE(p.recommended());
  const Option& best = *p.recommended();
  CHECK(best.cache_type_k == best.cache_type_v);  // no mixed pair on a default CUDA build
  CHECK(best.cache_type_k != "q4_0");             // K is not starved
  CHECK(best.flash_attn);
  CHECK(best.launch.find(" -np 1") != std::string::npos);
  CHECK(best.launch.find(" -fa on") != std::string::npos);
  CHECK(p.pools.size() == 2);
  CHECK(p.pools[0].kind == "gpu");
  CHECK(p.pools[0].capacity == 24LL << 30);
  CHECK(p.pools[1].kind == "host");
  for (const auto& o : p.options) {
    CHECK(o.fits());
    CHECK(o.ctx_size >= p.task->ctx_min);
    for (const auto& a : o.allocations) CHECK((a.pool == "gpu0" || a.pool == "host"));
  }
  // token_embd stays in RAM, logits in pinned host memory
  CHECK(best.sum("weights_host") > 0);
  CHECK(best.sum("output") == 152064LL * 4);
  CHECK_FALSE(p.explanation.empty());
}

TEST_CASE("pinned types: the largest context that fits") {
  Request r = mission();
  r.cache_type_k = r.cache_type_v = "q8_0";
  r.weights = "Q4_K_M";
  const Plan p = plan(kvtest::catalog(), r);
  CHECK(p.mode == "max_context");
  REQUIRE(p.recommended());
  const int c = p.options.front().ctx_size;
  CHECK(c % 256 == 0);
  Request at = r;
  at.ctx_size = c;
  CHECK(plan(kvtest::catalog(), at).fits());
  at.ctx_size = c + 256;
  // without rope flags the inverse query stops at the native window; more fits on 24 GiB only below it
  if (c < kvtest::catalog().model(r.model).ctx_native) CHECK_FALSE(plan(kvtest::catalog(), at).fits());
}

TEST_CASE("pinned types on a roomy device stop at the native window and say so") {
  Request r = mission();
  r.gpu = "h100-sxm";
  r.cache_type_k = r.cache_type_v = "q8_0";
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  CHECK(p.options.front().ctx_size == 32768);
  bool said = false;
  for (const auto& w : p.options.front().warnings) said |= w.find("--rope-scaling") != std::string::npos;
  CHECK(said);
  r.rope_scaling = "yarn";
  CHECK(plan(kvtest::catalog(), r).options.front().ctx_size == 131072);
}

TEST_CASE("pinned context: the best types for it; everything pinned: that one configuration") {
  Request r = mission();
  r.ctx_size = 16384;
  const Plan p = plan(kvtest::catalog(), r);
  CHECK(p.mode == "best_types");
  for (const auto& o : p.options) CHECK(o.ctx_size == 16384);
  r.weights = "Q4_K_M";
  r.cache_type_k = "f16";
  r.cache_type_v = "f16";
  r.flash_attn = "on";
  const Plan one = plan(kvtest::catalog(), r);
  CHECK(one.mode == "single");
  REQUIRE(one.options.size() == 1);
  CHECK(one.options[0].sum("k_cache") == 2048LL << 20);  // 64 layers · 16384 cells · 2048 B
}

TEST_CASE("an explicit pair the engine will not run is an input error with alternatives") {
  Request r = mission();
  r.cache_type_k = "q8_0";
  r.cache_type_v = "q4_0";
  try {
    plan(kvtest::catalog(), r);
    FAIL("accepted a mixed pair on a default CUDA build");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("same-type") != std::string::npos);
    CHECK(std::find(e.accepted().begin(), e.accepted().end(), "q8_0/q8_0") != e.accepted().end());
  }
  r.build = "fa-all-quants";
  CHECK(plan(kvtest::catalog(), r).fits());
  r.build = "default";
  r.allow_slow = true;
  const Plan slow = plan(kvtest::catalog(), r);
  REQUIRE_FALSE(slow.options.empty());
  CHECK_FALSE(slow.options.front().warnings.empty());
}

TEST_CASE("nothing fits is a result that says what is missing") {
  Request r;
  r.gpu = "8GB";
  r.model = "llama-3.1-70b-instruct";
  r.host_ram = 8LL << 30;  // too little RAM to hold the layers that do not fit the GPU, even of IQ2_S (~20 GiB)
  const Plan p = plan(kvtest::catalog(), r);
  CHECK_FALSE(p.fits());
  CHECK(p.verdict == "nothing_fits");
  CHECK(p.recommended() == nullptr);
  CHECK(p.nothing_fits.find("needs") != std::string::npos);
  CHECK_FALSE(p.options.empty());
  // every shown option is sized, those whose weights alone overflow a pool too (sized only once nothing fits)
  for (const Option& o : p.options) {
    CAPTURE(o.weights, o.cache_type_k, o.cache_type_v);
    CHECK(o.ctx_size > 0);
    CHECK(o.pools.size() == p.pools.size());
    CHECK(o.sum("weights") + o.sum("weights_host") > 0);
    CHECK(o.sum("compute") > 0);
    CHECK(o.quality.expected_loss > 0);
  }
  r.weights = "F16";  // weights alone overflow: the option is sized after the search
  const Plan f16 = plan(kvtest::catalog(), r);
  CHECK(f16.verdict == "nothing_fits");
  REQUIRE_FALSE(f16.options.empty());
  for (const Option& o : f16.options) {
    CHECK(o.sum("compute") > 0);
    CHECK_FALSE(o.fits());
  }
}

TEST_CASE("placement by default: a dense model that does not fit keeps layers in RAM, an MoE its experts") {
  Request r = ask("8GB", "llama-3.1-70b-instruct");
  r.host_ram = 128LL << 30;
  const Plan dense = plan(kvtest::catalog(), r);
  REQUIRE(dense.recommended());
  const Option& d = *dense.recommended();
  REQUIRE(d.n_gpu_layers);
  CHECK(*d.n_gpu_layers < 80);
  CHECK_FALSE(d.n_cpu_moe);
  CHECK(d.launch.find(" -ngl " + std::to_string(*d.n_gpu_layers) + " ") != std::string::npos);
  CHECK(d.usage("host").headroom >= 0);
  r.model = "qwen3-30b-a3b";
  const Plan moe = plan(kvtest::catalog(), r);
  REQUIRE(moe.recommended());
  const Option& m = *moe.recommended();
  REQUIRE(m.n_cpu_moe);
  CHECK(*m.n_cpu_moe > 0);
  CHECK(*m.n_cpu_moe <= 48);
  CHECK(m.launch.find("--n-cpu-moe " + std::to_string(*m.n_cpu_moe)) != std::string::npos);
  // the placement is the least that reaches the planned context: one layer's experts fewer does not fit
  if (*m.n_cpu_moe > 1) {
    Request fewer = r;
    fewer.n_cpu_moe = *m.n_cpu_moe - 1;
    fewer.weights = m.weights;
    fewer.cache_type_k = m.cache_type_k;
    fewer.cache_type_v = m.cache_type_v;
    fewer.flash_attn = m.flash_attn ? "on" : "off";
    fewer.ctx_size = m.ctx_size;
    CHECK_FALSE(plan(kvtest::catalog(), fewer).fits());
  }
  // Ollama has no --n-cpu-moe: layers only (num_gpu)
  r.engine = "ollama";
  const Plan ollama = plan(kvtest::catalog(), r);
  REQUIRE(ollama.recommended());
  CHECK_FALSE(ollama.recommended()->n_cpu_moe);
  CHECK(ollama.recommended()->n_gpu_layers);
}

TEST_CASE("honest exits: every fitting option rates avoid -> nothing acceptable, unless accepted") {
  Request r = ask("8GB", "qwen2.5-14b", "reasoning");
  r.host_ram = 1LL << 30;  // no room to offload: only the squeezed full-GPU options fit
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.fits());
  CHECK(p.options.front().quality.risk == Risk::avoid);
  CHECK(p.verdict == "nothing_acceptable");
  CHECK(p.recommended() == nullptr);
  CHECK_FALSE(p.nothing_acceptable.empty());
  // every suggestion was re-planned: running it again gives an acceptable recommendation
  REQUIRE_FALSE(p.suggestions.empty());
  for (const auto& s : p.suggestions) {
    INFO(s.summary);
    const Plan again = plan(kvtest::catalog(), s.request);
    REQUIRE(again.recommended());
    CHECK(again.recommended()->quality.risk != Risk::avoid);
    CHECK(again.recommended()->weights == s.option.weights);
    CHECK(again.recommended()->ctx_size == s.option.ctx_size);
  }
  r.accept_risk = true;
  const Plan accepted = plan(kvtest::catalog(), r);
  CHECK(accepted.verdict == "ok");
  REQUIRE(accepted.recommended());
  CHECK(accepted.recommended()->quality.risk == Risk::avoid);
}

TEST_CASE("the task's context is capped by the model's window, never a token count below it") {
  Request r = ask("rtx4090", "yi-1.5-34b", "agentic");  // native 4096, below the agentic minimum of 16384
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  CHECK(p.recommended()->ctx_per_slot == 4096);
  CHECK_FALSE(p.recommended()->below_task_min);
}

TEST_CASE("max context: the largest over every free setting, flash attention included") {
  Request r = ask("rtx4090", "qwen3-coder-30b-a3b");
  r.weights = "Q4_K_M";
  r.cache_type_k = r.cache_type_v = "f16";
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  CHECK(p.mode == "max_context");
  const Option& best = *p.recommended();
  CHECK(best.flash_attn);
  for (const char* fa : {"on", "off"}) {  // neither flash-attention setting fits one step more
    Request more = r;  // the same placement as the answer's
    more.flash_attn = fa;
    more.ctx_size = best.ctx_size + 256;
    more.n_gpu_layers = best.n_gpu_layers.value_or(-1);
    more.n_cpu_moe = best.n_cpu_moe;
    CHECK_FALSE(plan(kvtest::catalog(), more).fits());
  }
}

TEST_CASE("bad input: unknown names suggest, impossible values name the field") {
  Request r = mission();
  r.model = "qwen2.5-coder-23b";
  CHECK_THROWS_AS(plan(kvtest::catalog(), r), InputError);
  r = mission();
  r.gpu = "rtx4900";
  try {
    plan(kvtest::catalog(), r);
    FAIL();
  } catch (const InputError& e) {
    CHECK(e.field() == "--gpu");
    CHECK(e.suggestion() == "rtx4090");
  }
  r = mission();
  r.cache_type_k = "q4_k";
  CHECK_THROWS_AS(plan(kvtest::catalog(), r), InputError);
  r = mission();
  r.ctx_size = (1 << 28) + 1;  // past any model's window for 16 slots: a typo
  CHECK_THROWS_AS(plan(kvtest::catalog(), r), InputError);
  r = mission();
  r.free = 100LL << 20;
  CHECK_THROWS_AS(plan(kvtest::catalog(), r), InputError);
}

TEST_CASE("named GPUs: driver-reported totals, unified memory is one pool") {
  Request r = mission();
  r.gpu = "rtx4090";
  const Plan p = plan(kvtest::catalog(), r);
  CHECK(p.pools[0].capacity == 24564LL << 20);
  CHECK(p.pools[0].device.find("4090") != std::string::npos);
  r.gpu = "m4max-128gb";
  const Plan mac = plan(kvtest::catalog(), r);
  REQUIRE(mac.pools.size() == 1);
  CHECK(mac.pools[0].kind == "unified");
  CHECK(mac.resolved.backend == "metal");
  for (const auto& a : mac.options.front().allocations) CHECK(a.pool == "unified");
}

TEST_CASE("--reserve and --free shrink the budget") {
  Request r = mission();
  const Bytes base = plan(kvtest::catalog(), r).pools[0].budget();
  r.reserve = 1LL << 30;
  CHECK(plan(kvtest::catalog(), r).pools[0].budget() == base - (1LL << 30));
  r.reserve.reset();
  r.free = 20LL << 30;
  CHECK(plan(kvtest::catalog(), r).pools[0].budget() == base - (4LL << 30));
}

TEST_CASE("beyond the native window only when rope scaling is asked for, with its flags") {
  Request r = mission();
  r.gpu = "h100-sxm";
  r.task = "rag";  // wants 65536 > Qwen2.5's native 32768
  const Plan native = plan(kvtest::catalog(), r);
  REQUIRE(native.recommended());
  CHECK_FALSE(native.recommended()->beyond_native);
  CHECK(native.recommended()->ctx_per_slot == 32768);
  CHECK(std::any_of(native.warnings.begin(), native.warnings.end(),
                    [](const std::string& w) { return w.find("--rope-scaling yarn --rope-scale 4") != std::string::npos; }));
  r.rope_scaling = "yarn";
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  const Option& best = *p.recommended();
  CHECK(best.beyond_native);
  CHECK(best.launch.find("--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768") != std::string::npos);
  CHECK_FALSE(best.warnings.empty());
  r.task = "agentic";
  for (const auto& o : plan(kvtest::catalog(), r).options) CHECK_FALSE(o.beyond_native);
}

TEST_CASE("slots: without unified KV each conversation gets its share of -c; targets are per conversation") {
  Request r;
  r.gpu = "rtx4090";
  r.model = "qwen3-14b";
  r.task = "coding";
  r.n_parallel = 4;
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  for (const auto& o : p.options) {
    CHECK(o.ctx_per_slot * 4 == o.ctx_size);
    CHECK(o.ctx_per_slot <= p.task->ctx_target);
    CHECK(o.launch.find(" -np 4") != std::string::npos);
    CHECK(o.launch.find("-kvu") == std::string::npos);
  }
  r.kv_unified = true;
  const Plan u = plan(kvtest::catalog(), r);
  REQUIRE(u.recommended());
  CHECK(u.options.front().ctx_per_slot == u.options.front().ctx_size);
  CHECK(u.options.front().launch.find(" -np 4 -kvu") != std::string::npos);
}

TEST_CASE("partial offload: -ngl N puts the output layer and the last N - 1 layers on the GPU (b10454)") {
  Request r = mission();
  r.gpu = "16GB";
  r.weights = "Q4_K_M";
  r.ctx_size = 32768;
  r.cache_type_k = r.cache_type_v = "q8_0";
  r.flash_attn = "on";
  // of 64, at b10454 (load_tensors: i_gpu_start = 64 + 1 - 40 = 25): layers 0..24 on the CPU, layers 25..63
  // and the output layer on the GPU
  r.n_gpu_layers = 40;
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.options.size() == 1);
  const Option& o = p.options.front();
  // per layer: 32768 cells × (1088 + 1088) B (q8_0 rows of 1024)
  CHECK(o.sum("k_cache", "gpu0") + o.sum("v_cache", "gpu0") == 39LL * 32768 * 2176);
  CHECK(o.sum("k_cache", "host") + o.sum("v_cache", "host") == 25LL * 32768 * 2176);
  CHECK(o.launch.find(" -ngl 40 --fit off") != std::string::npos);
  // the weights split between the pools and add up to the full-offload total (up to padding)
  Request full = r;
  full.n_gpu_layers = -1;  // every layer on the GPU (it does not fit 16 GB: the option is sized all the same)
  const Plan full_plan = plan(kvtest::catalog(), full);  // kept alive: f refers into it
  const Option& f = full_plan.options.front();
  const Bytes split = o.sum("weights") + o.sum("weights_host");
  const Bytes whole = f.sum("weights") + f.sum("weights_host");
  CHECK(std::llabs(split - whole) < 64LL * 9 * 128);  // at most one alignment pad per tensor differs
  CHECK(o.sum("weights_host") > f.sum("weights_host"));
  // the largest RAM-resident matmul weight is copied into the GPU compute buffer (batch >= 32)
  CHECK(o.sum("compute", "gpu0") > f.sum("compute", "gpu0"));
  bool warned = false;
  for (const auto& w : o.warnings) warned |= w.find("25 of 64 layers run on the CPU") != std::string::npos;
  CHECK(warned);
}

TEST_CASE("-ngl counts the output layer first at b10454; older builds count repeating layers first") {
  const ModelSpec& m = kvtest::catalog().model("qwen2.5-coder-32b");  // 64 layers
  // src/llama-model.cpp load_tensors (b10454): i_gpu_start = max(n_layer + 1 - ngl, 0), output = index n_layer
  const Placement one = Placement::for_request(m, 1, std::nullopt, true);
  CHECK(one.first_gpu_layer == 64);
  CHECK(one.output_on_gpu);
  const Placement none = Placement::for_request(m, 0, std::nullopt, true);
  CHECK(none.first_gpu_layer == 64);
  CHECK_FALSE(none.output_on_gpu);
  const Placement all = Placement::for_request(m, 65, std::nullopt, true);
  CHECK(all.first_gpu_layer == 0);
  CHECK(all.output_on_gpu);
  CHECK(Placement::for_request(m, 64, std::nullopt, true).first_gpu_layer == 1);
  // the older rule: -ngl 64 = every repeating layer, the output layer in RAM
  const Placement old = Placement::for_request(m, 64, std::nullopt, false);
  CHECK(old.first_gpu_layer == 0);
  CHECK_FALSE(old.output_on_gpu);
}

TEST_CASE("expert offload keeps MoE experts in RAM; a RAM budget can make a plan not fit") {
  Request r = moe_on_24gb();
  r.n_cpu_moe = -1;
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  const Option& o = p.options.front();
  CHECK(o.sum("weights_host") > 20LL * kGiB);  // 128 experts × 48 layers of q8_0
  CHECK(o.sum("weights", "gpu0") < 3LL * kGiB);
  CHECK(o.launch.find(" --cpu-moe") != std::string::npos);
  r.host_ram = 16LL * kGiB;
  CHECK_FALSE(plan(kvtest::catalog(), r).fits());
  r.model = "qwen3-8b";
  CHECK_THROWS_AS(plan(kvtest::catalog(), r), InputError);  // no experts to move
}

TEST_CASE("several GPUs: layers split as llama.cpp load_tensors does, each GPU with its layers' KV") {
  Request r;
  r.gpu = "2x24GB";
  r.model = "llama-3.3-70b";  // 80 layers, 8 KV heads × 128
  r.weights = "IQ4_XS";
  r.ctx_size = 32768;
  r.cache_type_k = r.cache_type_v = "q8_0";
  r.flash_attn = "on";
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(!p.options.empty());
  const Option& o = p.options.front();
  // Equal free memory: split points 0.5, 1. GPU layers counting the output layer: 81; layer il goes to the
  // first device whose split point exceeds il / 81 (upper_bound): il 0..40 on gpu0, 41..79 and the output
  // layer on gpu1. q8_0 K and V per layer: 32768 · 1024 / 32 · 34 · 2 = 71 303 168 B.
  CHECK(o.sum("k_cache", "gpu0") + o.sum("v_cache", "gpu0") == 41LL * 71303168);
  CHECK(o.sum("k_cache", "gpu1") + o.sum("v_cache", "gpu1") == 39LL * 71303168);
  CHECK(p.resolved.tensor_split == std::vector<double>{24576, 24576});
  CHECK(p.resolved.pipeline_parallel);
  CHECK(o.launch.find(" -ts 24576,24576") != std::string::npos);
  CHECK(o.sum("weights", "gpu0") > 0);
  CHECK(o.sum("weights", "gpu1") > 0);
  // output.weight (vocab 128256 × 8192) is on gpu1 with its logits; both GPUs have a compute buffer.
  CHECK(o.sum("compute", "gpu0") > 0);
  CHECK(o.sum("compute", "gpu1") > 0);
  // --tensor-split 3,1: split points 0.75, 1: il / 81 < 0.75 for il 0..60 (61 layers) on gpu0 (which then
  // does not fit: the plan says so and how many layers would).
  r.tensor_split = {3, 1};
  const Plan q = plan(kvtest::catalog(), r);
  REQUIRE(!q.options.empty());
  CHECK(q.options.front().sum("k_cache", "gpu0") + q.options.front().sum("v_cache", "gpu0") == 61LL * 71303168);
  r.tensor_split = {1};
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("one value per GPU (2)"));
  r.tensor_split.clear();
  r.split_mode = "row";
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("does not support split buffers"));
  r.split_mode = "layer";
  r.flash_attn = "auto";
  r.engine = "vllm";
  r.weights.reset();
  r.cache_type_k.reset();
  r.cache_type_v.reset();
  // identical GPUs under vLLM: its tensor parallelism, said in a warning; mixed ones are refused
  const Plan tp = plan(kvtest::catalog(), r);
  CHECK(tp.resolved.tensor_parallel == 2);
  CHECK(std::any_of(tp.warnings.begin(), tp.warnings.end(), [](const std::string& w) { return w.find("--tensor-parallel-size 2") != std::string::npos; }));
  r.gpu = "rtx4090";
  r.extra_gpus = {"rtx3090"};
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("--tensor-parallel-size"));
}

// Decode speed against published llama.cpp measurements (llama-bench, batch 1): the estimate is bandwidth
// bound at 0.75 of the card's peak; docs/formulas.md §11 lists the errors.
TEST_CASE("decode speed estimate against published llama-bench figures") {
  auto decode = [](const char* gpu, int ctx) {
    Request r;
    r.gpu = gpu;
    r.model = "llama-3.1-8b";
    r.weights = "Q4_0";
    r.ctx_size = ctx;
    r.cache_type_k = r.cache_type_v = "f16";
    r.flash_attn = "on";
    const Plan p = plan(kvtest::catalog(), r);
    REQUIRE(!p.options.empty());
    return p.options.front().decode_tps;
  };
  // RTX 3090, Llama-3-8B Q4_0, one token at a time: 155.0 t/s (ggml-org/llama.cpp#15802, 2025-09).
  const double short_ctx = decode("rtx3090", 512);
  CHECK(short_ctx == Approx(155.0).epsilon(0.15));
  // RTX 4090 at 32768 tokens of context (pp512@d32768, ubatch 1): 98.1 t/s (ggml-org/llama.cpp#17505, 2025-11);
  // every token also reads the 4 GiB f16 cache.
  const double long_ctx = decode("rtx4090", 32768);
  CHECK(long_ctx == Approx(98.1).epsilon(0.20));
  CHECK(long_ctx < short_ctx);
  // a bare size has no bandwidth: no estimate
  CHECK(decode("24GB", 512) == 0);
  // Full offload: token_embd stays in RAM but is only looked up, so the GPU bounds decoding. F16 on an RTX 4090:
  // about 15 GB of GPU weights per token, 0.75 · 1008 GB/s / 15 GB ≈ 50 t/s.
  Request f16;
  f16.gpu = "rtx4090";
  f16.model = "llama-3.1-8b";
  f16.weights = "F16";
  f16.ctx_size = 512;
  f16.cache_type_k = f16.cache_type_v = "f16";
  f16.flash_attn = "on";
  const Plan pf = plan(kvtest::catalog(), f16);
  REQUIRE(!pf.options.empty());
  CHECK(pf.options.front().decode_bound == "gpu0");
  CHECK(pf.options.front().decode_tps == Approx(50).epsilon(0.1));
}

TEST_CASE("prefill speed estimate against published llama-bench figures") {
  auto prefill = [](const char* gpu, const char* weights, int ctx) {
    Request r;
    r.gpu = gpu;
    r.model = "llama-3.1-8b";
    r.weights = weights;
    r.ctx_size = ctx;
    r.cache_type_k = r.cache_type_v = "f16";
    r.flash_attn = "on";
    const Plan p = plan(kvtest::catalog(), r);
    REQUIRE(!p.options.empty());
    return p.options.front().prefill_tps;
  };
  // RTX 3090, Llama-3-8B Q6_K, pp2048 at ubatch 512: 3491 t/s (ggml-org/llama.cpp#7860, 2024-06).
  CHECK(prefill("rtx3090", "Q6_K", 2048) == Approx(3491).epsilon(0.10));
  // RTX 4090, Llama-3-8B Q4_0, pp512: 10358 t/s (ggml-org/llama.cpp#7676, 2024-06): kvplan is ~21 % low.
  CHECK(prefill("rtx4090", "Q4_0", 512) == Approx(10358).epsilon(0.25));
}

TEST_CASE("--override-tensor: weight tensors matching a pattern go to the named device") {
  Request r = moe_on_24gb();
  r.override_tensors = {"exps=CPU"};
  const Plan ot = plan(kvtest::catalog(), r);
  r.override_tensors.clear();
  r.n_cpu_moe = -1;  // --cpu-moe is the same override llama.cpp builds for the experts
  const Plan moe = plan(kvtest::catalog(), r);
  REQUIRE(!ot.options.empty());
  REQUIRE(!moe.options.empty());
  CHECK(ot.options.front().sum("weights", "gpu0") == moe.options.front().sum("weights", "gpu0"));
  CHECK(ot.options.front().sum("weights_host", "host") == moe.options.front().sum("weights_host", "host"));
  CHECK(ot.options.front().launch.find(" -ot exps=CPU") != std::string::npos);
  r.n_cpu_moe.reset();
  r.override_tensors = {"exps=CUDA1"};
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("names no device") && Catch::Contains("CUDA0"));
  r.override_tensors = {"([=CPU"};
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("not a valid regular expression"));
  r.override_tensors = {"exps"};
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("PATTERN=DEVICE"));
}
