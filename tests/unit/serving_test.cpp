// Serving at scale with vLLM and SGLang (docs/engines.md "Serving at scale"): the pool's capacity against
// figures vLLM printed, the pipeline partition of vllm/distributed/utils.py get_pp_indices worked by hand,
// per-stage weights, the checkpoints named, the launch lines, and the refusals of the new flags.
#include <catch2/catch.hpp>

#include "engines/checkpoints.hpp"
#include "engines/serving.hpp"
#include "helpers.hpp"
#include "kvplan/plan.hpp"

using namespace kvplan;

namespace {
Request serve(const char* engine, const char* gpu, const char* model_id, int ctx) {
  Request r;
  r.gpu = gpu;
  r.model = model_id;
  r.engine = engine;
  r.ctx_size = ctx;
  return r;
}
const WeightFormat& format(const char* engine, const char* id) {
  for (const auto& f : kvtest::catalog().runtime(engine)->weight_formats)
    if (f.id == id) return f;
  throw std::runtime_error(id);
}
}  // namespace

TEST_CASE("pool capacity: vLLM's num_blocks / cdiv(len, 16), checked against vLLM's own log lines") {
  // vllm#17327 (vLLM 0.8.5): "GPU KV cache size: 198,784 tokens" and "Maximum concurrency for 8,192 tokens per
  // request: 24.27x": 198784 / 16 = 12424 blocks, 8192 / 16 = 512 per request, 12424 / 512 = 24.27.
  const double per_block = 1000;  // any page size: the figure depends on block counts only
  auto c = engines::pool_capacity(12424 * per_block + 999, 512 * per_block, 8192, 16);
  CHECK(c.tokens == 198784);
  CHECK(c.concurrency == Approx(24.27).epsilon(0.0005));
  // vLLM 0.10 (a gpt-oss-20b log): 652,144 tokens, 4,096 per request: 40759 / 256 = 159.21.
  c = engines::pool_capacity(40759 * per_block, 256 * per_block, 4096, 16);
  CHECK(c.tokens == 652144);
  CHECK(c.concurrency == Approx(159.21).epsilon(0.0001));
  // A length that is not a block multiple: cdiv(32769, 16) = 2049 blocks per request.
  c = engines::pool_capacity(98304 * per_block, 2049 * per_block, 32769, 16);
  CHECK(c.concurrency == Approx(98304.0 / 2049));
  // SGLang: blocks of one token, max_total_num_tokens = pool // cell size.
  c = engines::pool_capacity(1000.5 * 40960, 32768.0 * 40960, 32768, 1);
  CHECK(c.tokens == 1000);
  CHECK(engines::pool_capacity(0, 1, 1, 16).tokens == 0);
}

TEST_CASE("pipeline partition: get_pp_indices gives the remainder to the stages before the last") {
  CHECK(engines::pp_partition(80, 2) == std::vector<int>{40, 40});
  CHECK(engines::pp_partition(61, 2) == std::vector<int>{31, 30});          // DeepSeek-V3: remainder 1 to partitions[-2]
  CHECK(engines::pp_partition(80, 3) == std::vector<int>{27, 27, 26});      // 26 each, remainder 2 to [-2] and [-3]
  CHECK(engines::pp_partition(94, 4) == std::vector<int>{23, 24, 24, 23});  // Qwen3-235B: the middle stages take it
  CHECK(engines::pp_partition(7, 1) == std::vector<int>{7});
}

TEST_CASE("stage weights: layers by share, embeddings on the first stage, the head on the last") {
  const ModelSpec& m = kvtest::catalog().model("llama-3.3-70b-instruct");
  const WeightFormat& bf16 = format("vllm", "bf16");
  engines::Shard whole;
  const double all = static_cast<double>(engines::shard_weight_bytes(m, bf16, 0, whole).device.bytes);
  CHECK(all == Approx(2.0 * static_cast<double>(m.params)).epsilon(1e-9));  // bf16: 2 bytes a parameter
  const double embed = 2.0 * m.vocab * m.embd;
  engines::Shard first{1, 1, 0, 40, true, false}, last{1, 1, 40, 80, false, true};
  const double a = static_cast<double>(engines::shard_weight_bytes(m, bf16, 0, first).device.bytes);
  const double b = static_cast<double>(engines::shard_weight_bytes(m, bf16, 0, last).device.bytes);
  CHECK(a + b == Approx(all).epsilon(1e-9));                                 // untied: nothing doubled
  CHECK(a == Approx((all - 2 * embed) / 2 + embed).epsilon(1e-9));           // half the layers and the embeddings
  engines::Shard tp8{8, 8, 0, 80, true, true};
  CHECK(static_cast<double>(engines::shard_weight_bytes(m, bf16, 0, tp8).device.bytes) == Approx(all / 8).epsilon(1e-9));
}

TEST_CASE("MXFP4 weights: experts at 4.25 bits, the rest bf16 (gpt-oss-120b fits one 80 GB GPU)") {
  const ModelSpec& m = kvtest::catalog().model("gpt-oss-120b");
  // 36 layers x 128 experts x 3 x 2880 x 2880 = 114.65 B expert weights at 4.25 / 8 B; the other 2.18 B at 2 B.
  const double experts = 36.0 * 128 * 3 * 2880 * 2880;
  const double expected = experts * 4.25 / 8 + (static_cast<double>(m.params) - experts) * 2;
  const double got = static_cast<double>(engines::shard_weight_bytes(m, format("vllm", "mxfp4"), 0, {}).device.bytes);
  CHECK(got == Approx(expected).epsilon(1e-9));
  CHECK(got / (1 << 30) == Approx(60.8).epsilon(0.01));
}

TEST_CASE("checkpoints: listed repos, the model's own for bf16, FP8 online from bf16, none for a native FP8 model's bf16") {
  const auto& c = kvtest::catalog();
  auto ck = [&](const char* model, const char* weights) { return engines::checkpoint_for(c, kvtest::catalog().model(model), format("vllm", weights)); };
  CHECK(ck("llama-3.3-70b-instruct", "bf16").repo == "meta-llama/Llama-3.3-70B-Instruct");
  CHECK(ck("deepseek-v3", "fp8").repo == "deepseek-ai/DeepSeek-V3");
  CHECK_FALSE(ck("deepseek-v3", "fp8").quantize_online);
  CHECK(ck("deepseek-v3", "bf16").repo.empty());  // only FP8 weights are published
  CHECK(ck("gpt-oss-120b", "mxfp4").repo == "openai/gpt-oss-120b");
  CHECK(ck("qwen2.5-coder-32b-instruct", "fp8").repo == "Qwen/Qwen2.5-Coder-32B-Instruct");
  CHECK(ck("qwen2.5-coder-32b-instruct", "fp8").quantize_online);
  CHECK(ck("qwen2.5-coder-32b-instruct", "gptq").repo.empty());
  for (const auto& k : c.checkpoints) CHECK(k.source.rfind("https://huggingface.co/" + k.repo, 0) == 0);
}

TEST_CASE("vLLM serving: --parallel is --max-num-seqs, the pool need hold one full-length request, capacity stated") {
  Request r = serve("vllm", "h100-sxm", "llama-3.3-70b", 32768);
  r.tensor_parallel = 8;
  r.n_parallel = 128;
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  const Option& o = *p.recommended();
  CHECK(o.launch.find("vllm serve meta-llama/Llama-3.3-70B-Instruct ") == 0);
  CHECK(o.launch.find("--max-num-seqs 128") != std::string::npos);
  // KV per token per GPU: 80 layers x 1 KV head x 128 x (K + V) x 2 B = 40960 B; one 32768-token request 1.25 GiB.
  CHECK(o.kv_total() == 40960LL * 32768);
  CHECK(o.max_concurrency > 40);
  CHECK(o.max_concurrency < 128);
  CHECK(o.kv_pool_tokens % 16 == 0);
  CHECK(o.max_concurrency == Approx(static_cast<double>(o.kv_pool_tokens) / 32768).epsilon(1e-9));
  bool queued = false;
  for (const auto& w : o.warnings) queued = queued || w.find("wait in the queue") != std::string::npos;
  CHECK(queued);
  // Without --parallel: vLLM's default for `vllm serve` on an H100 (get_batch_defaults), never 1.
  r.n_parallel = 1;
  CHECK(plan(kvtest::catalog(), r).options.front().launch.find("--max-num-seqs 1024") != std::string::npos);
  // --concurrency 64 at 32768 tokens needs 80 GiB of bf16 KV per GPU: nothing fits; --max-ctx finds the longest for 64:
  // (72.49 GiB budget - 16.43 weights - 0.76 activations - 0.37 graphs) / (64 x 40960 B) = 22.3k tokens.
  r.weights = "bf16";
  r.cache_type_k = r.cache_type_v = "auto";
  r.concurrency = 64;
  CHECK_FALSE(plan(kvtest::catalog(), r).fits());
  r.ctx_size.reset();
  r.max_ctx = true;
  const Plan longest = plan(kvtest::catalog(), r);
  REQUIRE(longest.fits());
  CHECK(longest.options.front().max_concurrency >= 64);
  CHECK(longest.options.front().ctx_per_slot < 32768);
  CHECK(longest.options.front().ctx_per_slot > 20000);
}

TEST_CASE("vLLM pipeline across nodes: stages, Ray lines, DeepSeek-V3's own FP8 weights with no --quantization") {
  Request r = serve("vllm", "h100-sxm", "deepseek-v3", 32768);
  r.tensor_parallel = 8;
  r.pipeline_parallel = 2;
  r.nodes = 2;
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  const Option& o = *p.recommended();
  CHECK(o.weights == "fp8");
  CHECK(o.launch.find("vllm serve deepseek-ai/DeepSeek-V3 ") == 0);
  CHECK(o.launch.find("--quantization") == std::string::npos);
  CHECK(o.launch.find("--tensor-parallel-size 8 --pipeline-parallel-size 2") != std::string::npos);
  CHECK(o.launch.find("--distributed-executor-backend ray") != std::string::npos);
  REQUIRE(o.stages.size() == 2);
  CHECK(o.stages[0].end_layer == 31);
  CHECK(o.stages[1].first_layer == 31);
  CHECK(o.stages[0].embeddings);
  CHECK(o.stages[1].output);
  std::vector<std::string> names;
  for (const auto& l : o.launches) names.push_back(l.name);
  CHECK(names == std::vector<std::string>{"vllm", "ray-head", "ray-worker"});
  // The same 16 GPUs as TP 16 span both nodes: allowed, with a warning, and the link slows decoding.
  r.tensor_parallel = 16;
  r.pipeline_parallel = 1;
  r.weights = "fp8";
  r.ctx_size = 8192;
  const Plan wide = plan(kvtest::catalog(), r);
  bool warned = false;
  for (const auto& w : wide.warnings) warned = warned || w.find("spans 2 nodes") != std::string::npos;
  CHECK(warned);
  r.nodes = 1;
  const Plan one = plan(kvtest::catalog(), r);
  CHECK(wide.options.front().decode_tps < one.options.front().decode_tps);
}

TEST_CASE("SGLang across nodes: one launch per node") {
  Request r = serve("sglang", "h100-sxm", "qwen3-235b-a22b", 32768);
  r.tensor_parallel = 4;
  r.pipeline_parallel = 2;
  r.nodes = 2;
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  const auto& l = p.recommended()->launches;
  REQUIRE(l.size() == 2);
  CHECK(l[0].text.find("--tp 4 --pp-size 2") != std::string::npos);
  CHECK(l[1].text.find("--nnodes 2 --node-rank 1 --dist-init-addr") != std::string::npos);
}

TEST_CASE("serving flags: bad values and other engines are refused, naming the flag") {
  Request r = serve("vllm", "h100-sxm", "llama-3.3-70b", 8192);
  r.nodes = 3;
  r.tensor_parallel = 8;
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("--nodes") && Catch::Contains("equal nodes"));
  r.nodes = 1;
  r.pipeline_parallel = 0;
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("--pipeline-parallel-size"));
  r.pipeline_parallel = 1;
  r.expert_parallel = true;
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("dense model"));
  r.expert_parallel = false;
  r.interconnect = "infiniband";
  r.nodes = 2;
  r.pipeline_parallel = 2;
  CHECK_THROWS_WITH(plan(kvtest::catalog(), r), Catch::Contains("--interconnect"));
  Request l = serve("llama.cpp", "24GB", "qwen3-8b", 8192);
  l.pipeline_parallel = 2;
  CHECK_THROWS_WITH(plan(kvtest::catalog(), l), Catch::Contains("--pipeline-parallel-size") && Catch::Contains("vllm"));
  l.pipeline_parallel = 1;
  l.concurrency = 4;
  CHECK_THROWS_WITH(plan(kvtest::catalog(), l), Catch::Contains("--concurrency"));
  Request g = serve("vllm", "h100-sxm", "llama-3.3-70b", 8192);
  g.weights = "mxfp4";
  CHECK_THROWS_WITH(plan(kvtest::catalog(), g), Catch::Contains("mxfp4") && Catch::Contains("release"));
}

TEST_CASE("llama.cpp over RPC: the hosts' devices come first, hold their layers, and get an rpc-server line each") {
  // src/llama.cpp llama_model_load_from_file_impl: "add RPC servers at the front of the list"; without -ts the layers
  // follow each device's free memory, which ggml-rpc reports for the remote.
  Request r;
  r.gpu = "rtx3090";
  r.model = "llama-3.3-70b-instruct";
  r.task = "chat";
  r.rpc_servers = {"10.0.0.2:50052=rtx3090", "10.0.0.3:50053=16GB"};
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE(p.recommended());
  REQUIRE(p.pools.size() == 4);  // two RPC devices, the local GPU, host RAM
  CHECK(p.pools[0].device.find("RPC[10.0.0.2:50052]") != std::string::npos);
  CHECK(p.pools[1].device.find("RPC[10.0.0.3:50053]") != std::string::npos);
  CHECK(p.pools[1].capacity == 16LL << 30);
  CHECK(p.pools[2].device.find("RPC") == std::string::npos);
  const Option& best = *p.recommended();
  for (const char* pool : {"gpu0", "gpu1", "gpu2"}) CHECK(best.sum("weights", pool) > 0);
  // 24 : 16 : 24 GiB of devices: the 16 GiB host holds the fewest layers
  CHECK(best.sum("weights", "gpu1") < best.sum("weights", "gpu0"));
  CHECK(best.launch.find(" --rpc 10.0.0.2:50052,10.0.0.3:50053") != std::string::npos);
  REQUIRE(best.launches.size() == 3);
  CHECK(best.launches[1].name == "rpc-server0");
  CHECK(best.launches[1].text == "rpc-server -H 0.0.0.0 -p 50052  # on 10.0.0.2");
  CHECK(best.launches[2].text == "rpc-server -H 0.0.0.0 -p 50053  # on 10.0.0.3");
}

TEST_CASE("--rpc refuses what it cannot plan, naming the entry") {
  auto refused = [](const std::string& entry, const char* engine = "llama.cpp") {
    Request r;
    r.gpu = "rtx3090";
    r.model = "qwen2.5-7b-instruct";
    r.engine = engine;
    r.rpc_servers = {entry};
    try {
      (void)plan(kvtest::catalog(), r);
    } catch (const InputError& e) {
      CHECK(e.field() == "--rpc");
      return true;
    }
    return false;
  };
  CHECK(refused("10.0.0.2:50052"));            // no device: its memory is unknown
  CHECK(refused("10.0.0.2=24GB"));             // no port
  CHECK(refused("10.0.0.2:99999=24GB"));       // port out of range
  CHECK(refused(":50052=24GB"));               // no host
  CHECK(refused("10.0.0.2:50052=rtx9999"));    // unknown GPU
  CHECK(refused("10.0.0.2:50052=24GB", "vllm"));  // not llama.cpp
  CHECK_FALSE(refused("10.0.0.2:50052=24GB"));
}
