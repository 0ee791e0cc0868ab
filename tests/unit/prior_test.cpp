// The quality prior: the fitted model against its calibration rows (data/priors/measurements.csv, fitted by
// tools/fit_priors.py), the orderings every source agrees on, Python/C++ agreement, and user calibration.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "helpers.hpp"
#include "kvplan/priors.hpp"
#include "priors/prior.hpp"

using namespace kvplan;

namespace {
// One fit_residuals.csv row as the prior's input, as tools/fit_priors.py builds it: a model of the row's family, size
// and window, F16 weights at the row's bits per weight, its cache types, context, rotation and task factor.
struct RowInput {
  ModelSpec model;
  WeightFormat f16;
  TaskProfile task;
  priors::QualityInput in;
  explicit RowInput(const std::map<std::string, std::string>& r) {
    model.id = "row:" + r.at("id");
    model.family = r.at("family");
    model.params = static_cast<std::int64_t>(std::llround(std::stod(r.at("params_b")) * 1e9));
    if (const std::string swa = r.at("swa"); !swa.empty()) {  // layers/window/pattern of a sliding-window model
      int layers = 0, window = 0, pattern = 0;
      REQUIRE(std::sscanf(swa.c_str(), "%d/%d/%d", &layers, &window, &pattern) == 3);
      model.layers = layers;
      model.swa = SlidingWindow{window, pattern, false};
    }
    f16.id = "F16";
    task.strictness = {{0, std::stod(r.at("task_factor"))}};
    in.model = &model;
    in.weights = &f16;
    in.weights_bpw = std::stod(r.at("bpw"));
    in.type_k = r.at("k_type");
    in.type_v = r.at("v_type");
    in.ctx = std::stoi(r.at("ctx"));
    in.rotation = r.at("rotation") == "yes";
    in.task = &task;
  }
  RowInput(const RowInput&) = delete;
  RowInput& operator=(const RowInput&) = delete;
};

Quality assess(const char* model, const char* k, const char* v, int ctx, const char* task = "general", bool rotation = true,
               const char* weights = "F16") {
  const auto& c = kvtest::catalog();
  priors::QualityInput in;
  in.model = &c.model(model);
  in.weights = &c.weight_format(weights);
  in.weights_bpw = std::string(weights) == "F16" ? 16 : 4.9;
  in.type_k = k;
  in.type_v = v;
  in.ctx = ctx;
  in.rotation = rotation;
  in.task = &c.task(task);
  return priors::assess(c.prior, in);
}

// RFC 4180 line splitting for the generated CSV files (quoted fields may hold commas).
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
    else if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) out.emplace_back();
    else out.back() += c;
  }
  return out;
}

std::vector<std::map<std::string, std::string>> read_csv(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::string line;
  std::getline(in, line);
  const auto header = split_csv(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const auto f = split_csv(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < f.size(); ++i) row[header[i]] = f[i];
    rows.push_back(row);
  }
  return rows;
}

// A row's measured loss in the model's unit (tools/fit_priors.py nats()): ln(PPL_Q/PPL_base) for the
// perplexity-class rows (relative perplexity, KLD mapped by exp(KLD - floor) - 1, NLL), accuracy drops as they are.
double measured_in_model_unit(const std::map<std::string, std::string>& r) {
  const double m = std::max(0.0, std::stod(r.at("measured")));
  const std::string& kind = r.at("kind");
  return kind == "ppl" || kind == "ctx_growth" || kind == "kld" || kind == "nll" ? std::log1p(m) : m;
}
}  // namespace

TEST_CASE("LLaMA-3-8B q8_0/q8_0: PR #7412's +0.035% is within its noise of the 80% interval; free") {
  // Fitted: ~0.005% (K and V 8-bit at 8B: 1/256 of q4_0's loss, the bit slope being ln 4). The row pr7412-08
  // (+0.035%, unrotated, 512 tokens) is within its own noise of 0: PR #7412 measured 0.04% between two f16 attention
  // paths (the PPL noise floor of docs/priors.md 3.3). The interval must reach the measurement within that noise.
  constexpr double measured = 0.00035, noise = 0.0004;
  const Quality q = assess("llama-3.1-8b", "q8_0", "q8_0", 4096);
  CHECK(q.low < measured);
  CHECK(q.high + noise > measured);
  CHECK(q.expected_loss < 0.002);
  CHECK(q.risk == Risk::free);
}

TEST_CASE("keys weigh more than values at the same bits, for every size (the fit constrains a_v <= a_k, sigma_V <= sigma_K)") {
  for (const char* model : {"llama-3.2-1b-instruct", "llama-3.1-8b", "llama-3.1-70b-instruct"})
    for (const char* t : {"q8_0", "q5_0", "q4_0", "iq4_nl"}) {
      INFO(model << " " << t);
      CHECK(assess(model, t, "f16", 8192).expected_loss > assess(model, "f16", t, 8192).expected_loss);
    }
  // Qwen3-0.6B at 8K, unrotated: K=V=q4_0 far worse than K=f16,V=q4_0 (+280% vs +0.33% measured, rows writeupB-04, -05)
  const double both = assess("qwen3-0.6b", "q4_0", "q4_0", 8192, "general", false).expected_loss;
  const double v_only = assess("qwen3-0.6b", "f16", "q4_0", 8192, "general", false).expected_loss;
  CHECK(both > 20 * v_only);
  CHECK(both > 0.10);  // "avoid"
}

TEST_CASE("low-bit K loss grows with context; 8-bit does not") {
  CHECK(assess("qwen3-8b", "q4_0", "q4_0", 32768).expected_loss > assess("qwen3-8b", "q4_0", "q4_0", 4096).expected_loss);
  CHECK(assess("qwen3-8b", "q8_0", "q8_0", 32768).expected_loss == Approx(assess("qwen3-8b", "q8_0", "q8_0", 4096).expected_loss));
  // flat below the fitted ctx_floor (~2.2K; the old prior was flat below 4096)
  CHECK(assess("qwen3-8b", "q4_0", "q4_0", 512).expected_loss == Approx(assess("qwen3-8b", "q4_0", "q4_0", 1024).expected_loss));
  CHECK(assess("qwen3-8b", "q4_0", "q4_0", 4096).expected_loss > assess("qwen3-8b", "q4_0", "q4_0", 2048).expected_loss);
}

TEST_CASE("smaller models suffer more; rotation helps 4-bit K") {
  CHECK(assess("qwen3-0.6b", "q4_0", "f16", 8192).expected_loss > assess("qwen3-32b", "q4_0", "f16", 8192).expected_loss);
  // Fitted unrotated/rotated ratio for q4_0 K at 8B: ~2.4x (exllamav2 Q4 before/after Hadamard 1.8x on Llama-2-7B,
  // PR #20995 3.3x on TinyLlama; the 12x of ik_llama #1034 is Qwen3). The old hand-set prior assumed 10x.
  CHECK(assess("llama-3.1-8b", "q4_0", "f16", 4096, "general", false).expected_loss >
        1.5 * assess("llama-3.1-8b", "q4_0", "f16", 4096, "general", true).expected_loss);
  // rotation matters less at more bits
  const double r4 = assess("llama-3.1-8b", "q4_0", "f16", 4096, "general", false).kv_loss /
                    assess("llama-3.1-8b", "q4_0", "f16", 4096, "general", true).kv_loss;
  const double r8 = assess("llama-3.1-8b", "q8_0", "f16", 4096, "general", false).kv_loss /
                    assess("llama-3.1-8b", "q8_0", "f16", 4096, "general", true).kv_loss;
  CHECK(r8 < r4);
  CHECK(r8 < 1.1);
}

TEST_CASE("rotation never raises the predicted loss: every catalog model, every quantized llama.cpp K type, short and long") {
  // A rotated Qwen3 K once predicted worse than an unrotated one at 5 bits (the family's rotated factor 3.5 against
  // 1.9 unrotated): the rotated term is now at most the unrotated one.
  const auto& c = kvtest::catalog();
  for (const auto& m : c.models)
    for (const char* k : {"q8_0", "q5_1", "q5_0", "q4_1", "iq4_nl", "q4_0"})
      for (int ctx : {2048, 32768}) {
        INFO(m.id << " K " << k << " ctx " << ctx);
        CHECK(assess(m.id.c_str(), k, "f16", ctx, "general", true).kv_loss <= assess(m.id.c_str(), k, "f16", ctx, "general", false).kv_loss);
      }
}

TEST_CASE("tool calling past 32K is stricter than below it; chat is the most tolerant") {
  const double agent_long = assess("llama-3.1-8b", "q8_0", "q4_0", 65536, "agentic").expected_loss;
  const double agent_short = assess("llama-3.1-8b", "q8_0", "q4_0", 32768, "agentic").expected_loss;
  const double chat = assess("llama-3.1-8b", "q8_0", "q4_0", 65536, "chat").expected_loss;
  CHECK(agent_long > 3 * agent_short);
  CHECK(chat < agent_short);
  // Fitted: ~3% (a hand calculation with the hand-set prior v1's values said ~8%); either way a warning, not "avoid".
  CHECK(agent_long > 0.02);
  CHECK(agent_long < 0.10);
  CHECK(priors::risk_band(kvtest::catalog().prior, agent_long) == Risk::noticeable);
}

TEST_CASE("weights loss: Q4_K_M adds PR #6936's +2.8% at 8B, less for larger models") {
  const Quality q8 = assess("llama-3.1-8b", "f16", "f16", 4096, "general", true, "Q4_K_M");
  CHECK(q8.weights_loss == Approx(0.0282).epsilon(0.02));
  const Quality q70 = assess("llama-3.1-70b-instruct", "f16", "f16", 4096, "general", true, "Q4_K_M");
  CHECK(q70.weights_loss < q8.weights_loss);
  CHECK(q8.low < q8.expected_loss);
  CHECK(q8.high > q8.expected_loss);
}

TEST_CASE("every explanation names its evidence: the closest measurement with its source and figure") {
  const Quality q = assess("qwen2.5-coder-32b", "q4_0", "q4_0", 32768, "agentic");
  REQUIRE_FALSE(q.evidence.empty());
  bool cites_k4 = false, cites_row = false;
  for (const auto& e : q.evidence) {
    cites_k4 |= e.find("+280%") != std::string::npos;
    cites_row |= e.rfind("Closest measurement: K=", 0) == 0 && e.find('%') != std::string::npos && e.find('[') != std::string::npos;
  }
  CHECK(cites_k4);
  CHECK(cites_row);
  // an f16 cache rests on nothing measured
  for (const auto& e : assess("llama-3.1-8b", "f16", "f16", 4096).evidence) CHECK(e.find("Closest measurement") == std::string::npos);
  // the cited row for q8_0/q8_0 on a Llama is a q8_0/q8_0 row
  bool q8_row = false;
  for (const auto& e : assess("llama-3.1-8b", "q8_0", "q8_0", 4096).evidence) q8_row |= e.find("K=q8_0 V=q8_0") != std::string::npos;
  CHECK(q8_row);
}

TEST_CASE("risk bands: free < 0.5% < mild < 2% < noticeable < 10% < avoid") {
  const auto& p = kvtest::catalog().prior;
  CHECK(priors::risk_band(p, 0.0049) == Risk::free);
  CHECK(priors::risk_band(p, 0.005) == Risk::mild);
  CHECK(priors::risk_band(p, 0.0199) == Risk::mild);
  CHECK(priors::risk_band(p, 0.05) == Risk::noticeable);
  CHECK(priors::risk_band(p, 0.10) == Risk::avoid);
}

TEST_CASE("cache types of other engines: fp8, ExLlamaV2/V3, MLX, NVFP4") {
  const auto& p = kvtest::catalog().prior;
  for (const char* t : {"fp8_e4m3", "fp8_e5m2", "exl2_fp8", "exl2_q4", "exl2_q6", "exl2_q8", "exl3_2", "exl3_8", "mlx_4bit", "mlx_8bit",
                        "nvfp4", "fp4_e2m1"}) {
    INFO(t);
    CHECK(p.type(t).quantized());
  }
  // exl2 Q6 mode = K 8-bit, V 4-bit (exllamav2 cache.cu fp16_to_q_kv_kernel<8, 4>)
  CHECK(p.type("exl2_q6").k_bits == p.type("exl2_q8").k_bits);
  CHECK(p.type("exl2_q6").v_bits == p.type("exl2_q4").v_bits);
  // e4m3 keeps more precision than e5m2; exllamav2's truncating FP8 is the worst 8-bit format (about 4-bit)
  CHECK(p.type("fp8_e4m3").k_bits > p.type("fp8_e5m2").k_bits);
  CHECK(p.type("fp8_e5m2").k_bits > p.type("exl2_fp8").k_bits);
  CHECK(p.type("exl2_fp8").k_bits < p.type("q5_0").k_bits);
  // ExLlamaV3 bits are monotone; builtin rotation ignores the engine flag, llama.cpp types follow it
  for (int b = 2; b < 8; ++b) CHECK(p.type("exl3_" + std::to_string(b)).k_bits < p.type("exl3_" + std::to_string(b + 1)).k_bits);
  CHECK(assess("llama-3.1-8b", "exl2_q4", "exl2_q4", 4096, "general", false).kv_loss ==
        Approx(assess("llama-3.1-8b", "exl2_q4", "exl2_q4", 4096, "general", true).kv_loss));
  CHECK(assess("llama-3.1-8b", "q4_0", "q4_0", 4096, "general", false).kv_loss >
        assess("llama-3.1-8b", "q4_0", "q4_0", 4096, "general", true).kv_loss);
  // more bits never cost more, within each engine's ladder
  CHECK(assess("llama-3.1-8b", "exl3_3", "exl3_3", 8192).kv_loss > assess("llama-3.1-8b", "exl3_5", "exl3_5", 8192).kv_loss);
  CHECK(assess("llama-3.1-8b", "mlx_4bit", "mlx_4bit", 8192).kv_loss > assess("llama-3.1-8b", "mlx_8bit", "mlx_8bit", 8192).kv_loss);
  CHECK(assess("llama-3.1-8b", "nvfp4", "nvfp4", 8192).kv_loss > assess("llama-3.1-8b", "fp8_e4m3", "fp8_e4m3", 8192).kv_loss);
}

TEST_CASE("sliding-window layers attend to at most their window: the context low-bit K damage grows with") {
  const auto& c = kvtest::catalog();
  // Gemma 3 270M: 3 global + 15 sliding layers of 512 -> (3 · 8192 + 15 · 512) / 18 = 1792
  CHECK(priors::attended_context(c.model("gemma-3-270m-it"), 8192) == Approx(1792));
  // gpt-oss-20b: 12 global + 12 sliding layers of 128 -> (12 · 8192 + 12 · 128) / 24 = 4160
  CHECK(priors::attended_context(c.model("gpt-oss-20b"), 8192) == Approx(4160));
  CHECK(priors::attended_context(c.model("gpt-oss-20b"), 100) == Approx(100));
  CHECK(priors::attended_context(c.model("qwen2.5-coder-32b"), 32768) == Approx(32768));
  // So a 4-bit K on Gemma 3 270M does not grow from 2K to 8K (its attended span, 768 -> 1792, stays under the
  // context floor), while a model without sliding windows of similar size grows.
  const double g2k = assess("gemma-3-270m-it", "q4_0", "f16", 2048).kv_loss;
  const double g8k = assess("gemma-3-270m-it", "q4_0", "f16", 8192).kv_loss;
  CHECK(g8k == Approx(g2k));
  const double q2k = assess("qwen3-0.6b", "q4_0", "f16", 2048).kv_loss;
  const double q8k = assess("qwen3-0.6b", "q4_0", "f16", 8192).kv_loss;
  CHECK(q8k / q2k > 1.5);
}

// tools/fit_priors.py writes its prediction for every row to data/priors/fit_residuals.csv, computed with the very
// numbers it writes to prior.yaml. The C++ prior must reproduce them: Python and C++ cannot drift apart.
TEST_CASE("C++ prior = tools/fit_priors.py on every fitted row of fit_residuals.csv") {
  const auto& p = kvtest::catalog().prior;
  const auto rows = read_csv(std::filesystem::path(KVPLAN_SOURCE_DIR) / "data/priors/fit_residuals.csv");
  int checked = 0;
  for (const auto& r : rows) {
    if (r.at("kind") == "excluded" || r.at("k_type").empty() || r.at("builtin_off") == "yes") continue;
    INFO(r.at("id"));
    const RowInput input(r);
    const priors::QualityInput& in = input.in;
    const double kv = priors::kv_loss(p, in);
    CHECK(kv == Approx(std::stod(r.at("kv_loss"))).epsilon(1e-6).margin(1e-12));
    if (r.at("base_k_type").empty() && r.at("kind") != "ctx_growth") {
      const Quality q = priors::assess(p, in);
      const double row = q.task_factor * q.weights_factor * q.kv_loss;
      const double predicted = r.at("saturate") == "yes" ? -std::expm1(-row) : row;
      CHECK(predicted == Approx(std::stod(r.at("predicted"))).epsilon(1e-6).margin(1e-12));
    }
    ++checked;
  }
  CHECK(checked > 150);
}

TEST_CASE("read_measurements: CSV rows (measurements.csv / tools/measure_kv columns) with clear errors") {
  const std::string csv =
      "id,k_type,v_type,metric,ctx,rotation,value,baseline,rel_change,noise,weights,notes\n"
      "a,f16,f16,ppl,4096,no,10.00,,,,Q4_K_M,base\n"
      "b,q4_0,q4_0,ppl,4096,yes,10.30,,,,Q4_K_M,value-only row: baseline from the f16/f16 row\n"
      "c,q8_0,q4_0,ppl,4096,yes,,,0.004,0.001,Q4_K_M,\"with, a comma\"\n"
      "d,q4_0,f16,kld,4096,yes,0.02,,,,Q4_K_M,\n";
  const auto rows = parse_measurements(csv, "mine.csv", &kvtest::catalog());
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].k_type == "q4_0");
  CHECK(rows[0].value == Approx(0.03));
  CHECK(rows[0].rotation == 1);
  CHECK(rows[0].weights_bpw > 4);
  CHECK(rows[0].origin == "mine.csv:3");
  CHECK(rows[1].value == Approx(0.004));
  CHECK(rows[1].noise == Approx(0.001));
  CHECK(rows[2].metric == "kld");

  auto fails = [](const std::string& text, const std::string& field_has, const std::string& what) {
    try {
      parse_measurements(text, "x.csv");
      FAIL("no InputError for: " << text);
    } catch (const InputError& e) {
      INFO(e.field() << " | " << e.value() << " | " << e.problem());
      CHECK(e.field().find(field_has) != std::string::npos);
      CHECK(std::string(e.problem()).find(what) != std::string::npos);
    }
  };
  fails("k_type,rel_change\nq4_0,0.1\n", "x.csv:1", "lacks a required column");
  fails("k_type,v_type,rel_change\nq4_0,q4_0,abc\n", "x.csv:2", "not a number");
  fails("k_type,v_type,value\nq4_0,q4_0,10.3\n", "x.csv:2", "without a baseline");
  fails("k_type,v_type,rel_change,rotation\nq4_0,q4_0,0.1,maybe\n", "x.csv:2", "rotation");
  fails("k_type,v_type,metric,value\nq4_0,q4_0,gsm8k,0.9\n", "x.csv:2", "cannot calibrate");
  fails("k_type,v_type,rel_change\nf16,f16,0\n", "x.csv", "no row measures a quantized cache");
  CHECK_THROWS_AS(read_measurements("/nonexistent/kvplan.csv"), InputError);
}

TEST_CASE("read_measurements: llama-perplexity output, plain runs paired with f16 and --kl-divergence runs") {
  const std::string log =
      "print_info: file size   = 4.58 GiB (4.89 BPW)\n"
      "llama_kv_cache: attn_rot_k = 0, n_embd_head_k_all = 128\n"
      "llama_kv_cache: size =  256.00 MiB (  2048 cells,  32 layers,  4/4 seqs), K (f16):  128.00 MiB, V (f16):  128.00 MiB\n"
      "perplexity: calculating perplexity over 580 chunks, n_ctx=512, batch_size=2048, n_seq=4\n"
      "Final estimate: PPL = 6.2000 +/- 0.03800\n"
      "llama_kv_cache: attn_rot_k = 1, n_embd_head_k_all = 128\n"
      "llama_kv_cache: size =   68.00 MiB (  2048 cells,  32 layers,  4/4 seqs), K (q8_0):   34.00 MiB, V (q4_0):   34.00 MiB\n"
      "perplexity: calculating perplexity over 580 chunks, n_ctx=512, batch_size=2048, n_seq=4\n"
      "Final estimate: PPL = 6.2620 +/- 0.03850\n"
      "llama_kv_cache: size =   68.00 MiB (  2048 cells,  32 layers,  4/4 seqs), K (q4_0):   34.00 MiB, V (q4_0):   34.00 MiB\n"
      "perplexity: calculating perplexity over 580 chunks, n_ctx=512, batch_size=2048, n_seq=4\n"
      "Mean PPL(Q)/PPL(base)         :   1.050000 ±   0.002000\n";
  const auto rows = parse_measurements(log, "ppl.log");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].k_type == "q8_0");
  CHECK(rows[0].v_type == "q4_0");
  CHECK(rows[0].ctx == 512);
  CHECK(rows[0].rotation == 1);
  CHECK(rows[0].weights_bpw == Approx(4.89));
  CHECK(rows[0].value == Approx(0.01));
  CHECK(rows[1].value == Approx(0.05));
  CHECK(rows[1].noise == Approx(0.002));
  // a quantized run with no f16/f16 run at its context
  CHECK_THROWS_AS(parse_measurements("llama_kv_cache: size = 1 MiB, K (q8_0): 1 MiB, V (q8_0): 1 MiB\nperplexity: n_ctx=512\n"
                                     "Final estimate: PPL = 6.3 +/- 0.04\n",
                                     "ppl.log"),
                  InputError);
}

TEST_CASE("calibrate: a user's measurements scale the model's K and V terms, narrow the interval and are cited") {
  const auto& c0 = kvtest::catalog();
  // A prior spread of x[1/4, 4] (about the fits' of 2025-2026), so that the shrinkage tested below does not move with
  // each refit of the interval (x[0.35, 2.50] on 2026-12-03 shrinks the K factor to 1.96).
  Catalog c = c0;
  c.prior.interval_low = 0.25, c.prior.interval_high = 4;
  const ModelSpec& m = c.model("llama-3.1-8b");
  // "Measured" values: K terms 4x what the prior predicts, V terms as predicted.
  priors::QualityInput in;
  in.model = &m;
  in.ctx = 4096;
  in.rotation = true;
  std::vector<Measurement> rows;
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{{"q4_0", "f16"}, {"q5_0", "f16"}, {"f16", "q4_0"}, {"f16", "q5_0"}}) {
    in.type_k = k, in.type_v = v;
    const priors::KvParts parts = priors::kv_parts(c.prior, in);
    Measurement r;
    r.k_type = k, r.v_type = v, r.ctx = 4096, r.rotation = 1, r.value = 4 * parts.k + parts.v, r.origin = "test:" + k + "/" + v;
    rows.push_back(r);
  }
  const PriorParams cal = calibrate(c.prior, rows, m);
  const ModelCalibration* mc = cal.calibration(m.id);
  REQUIRE(mc != nullptr);
  CHECK(mc->rows == 4);
  // shrunk toward 1 by the prior's spread, but more than half the way to 4 in log terms (4^0.5 = 2): four
  // consistent rows outweigh the prior
  CHECK(mc->k_factor > 2.0);
  CHECK(mc->k_factor < 4.5);
  CHECK(mc->v_factor == Approx(1).margin(0.3));
  CHECK(mc->interval_high < c.prior.interval_high);
  // other models keep the global prior; this one moves and cites the user's rows first
  CHECK(cal.calibration("qwen3-8b") == nullptr);
  in.type_k = "q4_0", in.type_v = "q4_0";
  CHECK(priors::kv_loss(cal, in) > 2.5 * priors::kv_loss(c.prior, in) * 0.5);
  priors::QualityInput qi = in;
  qi.weights = &c.weight_format("F16");
  TaskProfile general = c.task("general");
  qi.task = &general;
  const Quality q = priors::assess(cal, qi);
  REQUIRE_FALSE(q.evidence.empty());
  CHECK(q.evidence.front().rfind("Calibrated to your 4 measurements", 0) == 0);
  CHECK(q.evidence.at(1).rfind("Your measurement: K=q4_0 V=f16", 0) == 0);
  // calibrating again replaces the earlier calibration
  CHECK(calibrate(cal, rows, m).calibrations.size() == 1);
  // unknown cache types are input errors with a suggestion
  Measurement bad = rows.front();
  bad.k_type = "q4_00";
  try {
    calibrate(c.prior, {bad}, m);
    FAIL("no InputError");
  } catch (const InputError& e) {
    CHECK(e.suggestion() == "q4_0");
  }
  CHECK_THROWS_AS(calibrate(c.prior, {}, m), InputError);
}

TEST_CASE("a --data prior override with model-version-1 keys is an error, not silently ignored") {
  const auto dir = std::filesystem::temp_directory_path() / "kvplan_prior_test_v1";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "prior.yaml") << "prior:\n  source: old\n  alpha_k_small: 1.0\n";
  CHECK_THROWS_AS(load_catalog({dir.string()}), InputError);
  std::ofstream(dir / "prior.yaml") << "prior:\n  source: mine\n  a_k: 0.01\n";
  CHECK(load_catalog({dir.string()}).prior.a_k == Approx(0.01));
  std::filesystem::remove_all(dir);
}

namespace {
// The cells the fitted rows measure, read from fit_residuals.csv (not from the prior): family|K|rotated and family|V.
struct Coverage {
  std::set<std::string> k, v;
  std::map<std::string, std::map<std::string, std::string>> rows;  // fitted rows by id
};
const Coverage& coverage() {
  static const Coverage c = [] {
    Coverage out;
    for (const auto& r : read_csv(std::filesystem::path(KVPLAN_SOURCE_DIR) / "data/priors/fit_residuals.csv")) {
      if (r.at("kind") == "excluded" || r.at("k_type").empty()) continue;
      out.k.insert(r.at("family") + "|" + r.at("k_type") + "|" + r.at("rotation"));
      out.v.insert(r.at("family") + "|" + r.at("v_type"));
      out.rows[r.at("id")] = r;
    }
    return out;
  }();
  return c;
}
const char* const kLlamaTypes[] = {"f16", "q8_0", "q5_1", "q5_0", "q4_1", "iq4_nl", "q4_0"};
}  // namespace

TEST_CASE("extrapolated exactly where no fitted row measures the family's K (with its rotation) or V type") {
  const auto& c = kvtest::catalog();
  const Coverage& cov = coverage();
  int extrapolated = 0, measured = 0;
  for (const auto& m : c.models)
    for (const char* k : kLlamaTypes)
      for (const char* v : kLlamaTypes) {
        const auto& tk = c.prior.type(k);
        const bool low_bit_k = tk.quantized() && tk.k_bits <= 6;
        bool k_covered = !tk.quantized();
        for (const char* rot : {"yes", "no"})
          if (!low_bit_k || std::string(rot) == "yes") k_covered = k_covered || cov.k.count(m.family + "|" + k + "|" + rot);
        const bool v_covered = std::string(v) == "f16" || cov.v.count(m.family + "|" + v);
        INFO(m.id << " (" << m.family << ") K " << k << " V " << v);
        const Quality q = assess(m.id.c_str(), k, v, 2048, "general", true);
        CHECK(q.extrapolated == !(k_covered && v_covered));
        if (std::string(k) == "f16" && std::string(v) == "f16") CHECK_FALSE(q.extrapolated);
        ++(q.extrapolated ? extrapolated : measured);
      }
  CHECK(extrapolated > 0);
  CHECK(measured > 0);
}

TEST_CASE("an extrapolated estimate carries its analogs' band: the prior's interval widened by their measured / predicted range") {
  const auto& c = kvtest::catalog();
  const Coverage& cov = coverage();
  double worst_7b = 0;
  std::string worst_what;
  int checked = 0;
  for (const auto& m : c.models)
    for (const char* k : kLlamaTypes)
      for (const char* v : kLlamaTypes)
        for (int ctx : {2048, 32768}) {
          INFO(m.id << " K " << k << " V " << v << " ctx " << ctx);
          const Quality q = assess(m.id.c_str(), k, v, ctx, "general", true);
          if (m.params >= 7'000'000'000 && q.kv_loss > worst_7b) worst_7b = q.kv_loss, worst_what = m.id + " " + k + "/" + v;
          if (!q.extrapolated || q.analogs.empty()) continue;
          // the ratios from fit_residuals.csv (the Python fit's own columns), for plain rows
          double lo = INFINITY, hi = 0;
          bool plain = true;
          for (const auto& id : q.analogs) {
            INFO("analog " << id);
            REQUIRE(cov.rows.count(id));
            const auto& row = cov.rows.at(id);
            const bool k_unquantized = row.at("k_type") == "f16" || row.at("k_type") == "bf16" || row.at("k_type") == "f32";
            CHECK(k_unquantized == (std::string(k) == "f16"));
            if (row.at("saturate") == "yes" || !row.at("base_k_type").empty()) { plain = false; continue; }
            // the noise-floored ratio (tools/fit_priors.py miss_ratio): a row within its noise says "small"
            const double noise = std::stod(row.at("noise"));
            const double r = (measured_in_model_unit(row) + noise) / (std::stod(row.at("predicted")) + noise);
            hi = std::max(hi, r);
            lo = std::min(lo, r);
          }
          if (!plain) continue;
          const double cache = q.task_factor * q.weights_factor * q.kv_loss;  // F16 weights: no weights part
          REQUIRE(cache > 0);
          // 5e-3: prior.yaml and fit_residuals.csv print loss, measured and noise to 4-6 and 3 significant digits
          CHECK(q.high / cache == Approx(std::max(hi, 1.0) * c.prior.interval_high).epsilon(5e-3));
          CHECK(q.low / cache == Approx(std::min(lo, 1.0) * c.prior.interval_low).epsilon(5e-3).margin(1e-9));
          CHECK(q.low <= q.expected_loss);
          CHECK(q.expected_loss <= q.high);
          ++checked;
        }
  CHECK(checked > 100);
  INFO("largest predicted cache loss at >= 7B, 4 bits or more: " << worst_7b * 100 << "% (" << worst_what << ")");
  CHECK(worst_7b < 1.0);  // was +599 % (Qwen2.5-Coder-32B, K=V=q4_0): Qwen2's TurboQuant factor applied to q4_0
}

namespace {
// The C++ prior's prediction for a plain row (no quantized or shorter-context baseline), else the fit's column.
double predicted_now(const PriorParams& p, const std::map<std::string, std::string>& r) {
  if (!r.at("base_k_type").empty() || r.at("kind") == "ctx_growth" || r.at("builtin_off") == "yes")
    return std::stod(r.at("predicted"));
  const RowInput input(r);
  const priors::QualityInput& in = input.in;
  const Quality q = priors::assess(p, in);
  const double row = q.task_factor * q.weights_factor * q.kv_loss;
  return r.at("saturate") == "yes" ? -std::expm1(-row) : row;
}
}  // namespace

TEST_CASE("no fitted row is mispredicted by more than 10x (noise-floored, in the model's unit; no row left out)") {
  // A measurement within its noise matches any prediction within it: ratio = (m + noise) / (p + noise).
  // Fails with the prior of 2026-12-02 (data/priors/prior.yaml at d5b8b37): 13 rows beyond 10x.
  const auto& p = kvtest::catalog().prior;
  const auto rows = read_csv(std::filesystem::path(KVPLAN_SOURCE_DIR) / "data/priors/fit_residuals.csv");
  int checked = 0, beyond = 0;
  for (const auto& r : rows) {
    if (r.at("kind") == "excluded") continue;
    const double noise = std::stod(r.at("noise"));
    const double ratio = (measured_in_model_unit(r) + noise) / (std::max(0.0, predicted_now(p, r)) + noise);
    INFO(r.at("id") << ": measured " << r.at("measured") << ", predicted " << predicted_now(p, r) << ", ratio " << ratio);
    const bool outside = ratio > 10.0 || ratio < 0.1;
    CHECK_FALSE(outside);
    beyond += outside;
    ++checked;
  }
  CHECK(beyond == 0);  // 13 rows with the prior at d5b8b37; 1 (localbench-06) before its category noise floor (docs/priors.md 3.2)
  CHECK(checked > 250);
}

TEST_CASE("the largest predicted loss for a >= 7B catalog model at >= 4 bits lies in the range its analogs measured") {
  const auto& c = kvtest::catalog();
  const auto rows = read_csv(std::filesystem::path(KVPLAN_SOURCE_DIR) / "data/priors/fit_residuals.csv");
  std::map<std::string, double> measured;  // row id -> measured, in the loss unit
  for (const auto& r : rows)
    if (r.at("kind") != "excluded" && r.at("base_k_type").empty() && r.at("saturate") != "yes")
      measured[r.at("id")] = std::max(0.0, std::stod(r.at("measured")));
  Quality worst;
  std::string what, worst_family, worst_k;
  for (const auto& m : c.models) {
    if (m.params < 7'000'000'000) continue;
    for (const char* k : kLlamaTypes)
      for (const char* v : kLlamaTypes)
        for (int ctx : {2048, 32768}) {
          const Quality q = assess(m.id.c_str(), k, v, ctx, "general", true);
          if (q.kv_loss > worst.kv_loss)
            worst = q, what = m.id + " K=" + k + " V=" + v + " ctx " + std::to_string(ctx), worst_family = m.family, worst_k = k;
        }
  }
  INFO("largest: " << what << " " << worst.kv_loss * 100 << "%");
  if (!worst.extrapolated) {
    // A cell its family measured (at another size): bounded by that family's own rows of the K type, at any size
    // (the size term only lowers a larger model's loss). Qwen2.5 q4_0 K since kvplan's Qwen2.5-Coder-0.5B sweep.
    double top = 0;
    for (const auto& r : rows)
      if (r.at("kind") != "excluded" && r.at("family") == worst_family && r.at("k_type") == worst_k && r.at("base_k_type").empty() &&
          r.at("saturate") != "yes")
        top = std::max(top, std::stod(r.at("measured")));
    INFO("the " << worst_family << " family's own " << worst_k << " K rows measured up to " << top * 100 << "%");
    REQUIRE(top > 0);
    CHECK(worst.kv_loss <= top);
    return;
  }
  double lo = INFINITY, hi = 0;
  for (const auto& id : worst.analogs)
    if (measured.count(id)) lo = std::min(lo, measured.at(id)), hi = std::max(hi, measured.at(id));
  INFO("analogs measured " << lo * 100 << "% .. " << hi * 100 << "%");
  REQUIRE(hi > 0);
  CHECK(worst.kv_loss >= lo);
  CHECK(worst.kv_loss <= hi);
}

// Published measurements that are NOT in data/priors/measurements.csv and never reach the fit
// (tests/unit/external/external_quality.csv, each with its public source): the prior's band must hold them.
// Prints measured / predicted for each (run with -s to read the table; docs/priors.md 5.3).
namespace {
// External rows outside the 80 % band, with the reason (docs/priors.md 5.3): an 80 % band misses about one in five.
const std::map<std::string, std::string> kExternalMisses = {
    {"ext-01", "Llama-3.1-8B unrotated q4_0 K at 512 tokens: +2.24 %, 2.6x the prediction (10 chunks)"},
    {"ext-02", "the same with the PR's random rotation: +1.38 %, 2.6x the prediction"},
};
}  // namespace

TEST_CASE("published measurements outside the fit lie within the prior's 80% band (noise-floored)", "[prior][external]") {
  const auto& c = kvtest::catalog();
  const auto rows = read_csv(std::filesystem::path(KVPLAN_SOURCE_DIR) / "tests/unit/external/external_quality.csv");
  const WeightFormat& f16 = c.weight_format("F16");  // the cache part only: every row's baseline has its weights
  int inside = 0;
  for (const auto& r : rows) {
    INFO(r.at("id") << " " << r.at("model") << " K=" << r.at("k_type") << " V=" << r.at("v_type"));
    priors::QualityInput in;
    in.model = &c.model(r.at("catalog_model"));
    in.weights = &f16;
    in.weights_bpw = std::stod(r.at("bpw"));
    in.type_k = r.at("k_type");
    in.type_v = r.at("v_type");
    in.ctx = std::stoi(r.at("ctx"));
    in.rotation = r.at("rotation") == "yes";
    in.task = &c.task("general");
    const Quality q = priors::assess(c.prior, in);
    const double cache = q.task_factor * q.weights_factor * q.kv_loss;  // L, in nats (the model's unit)
    double lo = q.low, hi = q.high, pred = cache;
    if (r.at("notes").find("baseline q8_0/q8_0") != std::string::npos) {  // the source's baseline is q8_0/q8_0
      priors::QualityInput base = in;
      base.type_k = base.type_v = "q8_0";
      base.rotation = false;
      const Quality b = priors::assess(c.prior, base);
      const double lb = b.task_factor * b.weights_factor * b.kv_loss;
      pred -= lb, lo -= lb, hi -= lb;
    }
    const double rel = std::stod(r.at("rel_change"));
    const bool accuracy = r.at("metric") != "ppl";
    // measured in the model's unit: ln(PPL_Q/PPL_base); an accuracy drop as 1 - exp(-L) inverted
    const double m = accuracy ? -std::log1p(-std::min(std::max(-rel, 0.0), 0.999)) : std::log1p(std::max(rel, 0.0));
    const double noise = r.at("noise").empty() ? 0.0004 : std::stod(r.at("noise"));
    const double ratio = (m + noise) / (std::max(pred, 0.0) + noise);
    const bool in_band = m >= lo - noise && m <= hi + noise;
    std::printf("external %-6s %-28s K=%-6s V=%-6s measured %9.4f%%  predicted %8.4f%%  band %7.4f..%9.4f%%  ratio %6.2f  %s\n",
                r.at("id").c_str(), r.at("model").c_str(), r.at("k_type").c_str(), r.at("v_type").c_str(), m * 100, pred * 100,
                lo * 100, hi * 100, ratio, in_band ? "inside" : "OUTSIDE");
    // a documented miss (docs/priors.md 5.3) stays within 10x; every other row within the band
    const bool documented = kExternalMisses.count(r.at("id")) > 0;
    CHECK((in_band || documented));
    if (documented) {
      CHECK_FALSE(in_band);  // the list follows the prior: a row the band now holds comes off it
      CHECK(ratio <= 10.0);
      CHECK(ratio >= 0.1);
    }
    inside += in_band;
  }
  CHECK(rows.size() >= 5);
  CHECK(inside + static_cast<int>(kExternalMisses.size()) == static_cast<int>(rows.size()));
}

TEST_CASE("the evidence search reads the rows as index_types() keyed them; a prior not indexed is refused, not misread") {
  const auto& c = kvtest::catalog();
  priors::QualityInput in;
  in.ctx = 8192;
  priors::EvidenceBounds indexed;
  for (const auto& m : c.models)  // the first catalog cell bounded by analogs
    for (const char* k : kLlamaTypes)
      for (const char* v : kLlamaTypes)
        if (indexed.analogs.empty()) {
          in.model = &m, in.type_k = k, in.type_v = v;
          indexed = priors::evidence_bounds(c.prior, in, true);
        }
  INFO(in.model->id << " K " << in.type_k << " V " << in.type_v);
  REQUIRE(indexed.extrapolated);
  REQUIRE_FALSE(indexed.analogs.empty());
  PriorParams copy = c.prior;  // its indices are positions, not the original's rows
  REQUIRE_FALSE(copy.analog_families.empty());
  copy.analog_families.clear();
  CHECK_THROWS_AS(priors::evidence_bounds(copy, in, true), std::logic_error);
  copy.index_types();
  const priors::EvidenceBounds again = priors::evidence_bounds(copy, in, true);
  CHECK(again.lo == indexed.lo);
  CHECK(again.hi == indexed.hi);
  REQUIRE(again.analogs.size() == indexed.analogs.size());
  for (size_t i = 0; i < again.analogs.size(); ++i) CHECK(again.analogs[i]->id == indexed.analogs[i]->id);
  // each row's indices name its own family and types
  for (const AnalogRow& a : copy.analogs) {
    CHECK(copy.analog_families.at(static_cast<size_t>(a.family_index)) == a.family);
    if (a.k_index >= 0) CHECK(copy.types.at(static_cast<size_t>(a.k_index)).type == a.k_type);
    if (a.v_index >= 0) CHECK(copy.types.at(static_cast<size_t>(a.v_index)).type == a.v_type);
  }
}

TEST_CASE("a cache loss the caller worked out is the one assess() uses (the ranker keeps one per context)") {
  const auto& c = kvtest::catalog();
  priors::QualityInput in;
  in.model = &c.model("llama-3.1-8b-instruct");
  in.weights = &c.weight_format("Q4_K_M");
  in.weights_bpw = 4.9;
  in.type_k = "q4_0";
  in.type_v = "q8_0";
  in.ctx = 16384;
  in.rotation = true;
  in.task = &c.task("agentic");
  const Quality own = priors::assess(c.prior, in);
  in.kv_loss = priors::kv_loss(c.prior, in);
  const Quality given = priors::assess(c.prior, in);
  CHECK(given.kv_loss == own.kv_loss);
  CHECK(given.expected_loss == own.expected_loss);
  CHECK(given.high == own.high);
  in.kv_loss = 2 * own.kv_loss;  // the caller's figure, not one worked out again
  const Quality twice = priors::assess(c.prior, in);
  CHECK(twice.kv_loss == 2 * own.kv_loss);
  CHECK(twice.expected_loss - twice.weights_loss == Approx(2 * (own.expected_loss - own.weights_loss)));
}
