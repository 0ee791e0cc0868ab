// Decode and prefill speed of an option (docs/formulas.md §11).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "engines/serving.hpp"
#include "planner/setup.hpp"

namespace kvplan::detail {

double bandwidth_of(const Setup& s, const std::string& pool) {
  const auto it = s.pool_bandwidth.find(pool);
  return it == s.pool_bandwidth.end() ? 0.0 : it->second;
}

namespace {

// The share of the weights a token reads: MoE experts in proportion experts_used / experts.
double active_fraction(const ModelSpec& m) {
  if (!m.moe || m.moe->experts <= 0 || m.params <= 0) return 1;
  const double expert_params = static_cast<double>(m.moe_layer_count()) * m.moe->experts * 3.0 * m.embd * m.moe->expert_ff;
  return 1 - std::min(0.95, expert_params / static_cast<double>(m.params)) * (1 - static_cast<double>(m.moe->experts_used) / m.moe->experts);
}

// The conversations the plan's KV allocations hold: vLLM/SGLang size them for --concurrency, others for --parallel.
int kv_sequences(const Setup& s) {
  const bool serving = s.runtime && (s.runtime->kind == "vllm" || s.runtime->kind == "sglang");
  return std::max(1, serving ? s.resolved.concurrency : s.request.n_parallel);
}

constexpr double kTypicalEfficiency = 0.75, kLowEfficiency = 0.55;  // of the memory bandwidth (estimate_decode)

// The seconds reading `bytes` takes at a pool's full bandwidth.
double read_seconds(double bytes, double bandwidth_gbs) { return bytes / (bandwidth_gbs * 1e9); }

// Without a bandwidth the ranking still sees what RAM costs: a GPU reads about 10x faster than host RAM
// (RTX 4060 272 GB/s, RTX 4090 1008 GB/s against dual-channel DDR5's ~60: 4.5x to 17x).
double relative_speed(double device_bytes, double host_bytes) {
  return (device_bytes + host_bytes) / (device_bytes + 10 * host_bytes);
}

// Tokens per second from the seconds a token's reads take at full bandwidth.
double decode_rate(const Setup& s, double seconds, double efficiency) {
  // Pipeline stages run one after another for a token: the tightest stage's GPU stands for each (they differ by a
  // layer or the embeddings). Links between nodes add their time, which is not a memory read (no efficiency factor).
  const double stages = std::max(1, s.resolved.pipeline_stages);
  const double link = s.interconnect ? engines::inter_node_seconds_per_token(*s.model, *s.interconnect, s.resolved.tensor_parallel,
                                                                             s.tp_spans_nodes, s.stage_crossings)
                                     : 0;
  return 1 / (seconds * stages / efficiency + link);
}

// Decode: one token reads every active weight and the whole KV cache once; each pool streams its share at its
// bandwidth, the pools one after another (layers run in order). Bandwidth efficiency 0.75 typical, 0.55 low:
// llama.cpp reaches about 0.77 of an RTX 3090's 936 GB/s on Llama-3-8B Q4_0 at batch 1 (155 t/s,
// ggml-org/llama.cpp#15802). token_embd is a row lookup, not read.
void estimate_decode(const Setup& s, const SpeedInputs& in, Option& o) {
  const double active = active_fraction(*s.model);
  double seconds = 0, worst = 0;
  bool known = true;
  double device_bytes = 0, host_bytes = 0;
  for (size_t i = 0; i < s.pools.size(); ++i) {
    const Pool& pool = s.pools[i];
    const TokenReads& r = in.pools[i];
    const double bytes = static_cast<double>(checked_add(r.weights, r.weights_in_ram, "weights read")) * active +
                         static_cast<double>(r.kv) / kv_sequences(s);  // one conversation's cache
    if (bytes <= 0) continue;
    (pool.kind == "host" ? host_bytes : device_bytes) += bytes;
    const double bw = bandwidth_of(s, pool.id);
    if (bw <= 0) {  // unknown bandwidth: no estimate
      known = false;
      continue;
    }
    const double t = read_seconds(bytes, bw);
    seconds += t;
    if (t > worst) worst = t, o.decode_bound = pool.id;
  }
  if (device_bytes + host_bytes > 0) o.decode_relative = relative_speed(device_bytes, host_bytes);
  if (!known || seconds <= 0) return;
  o.decode_tps = decode_rate(s, seconds, kTypicalEfficiency);
  o.decode_tps_low = decode_rate(s, seconds, kLowEfficiency);
}

// Prefill: per token 2 FLOPs per active weight plus the attention over half the prompt on average
// (4 · n_layer · n_head · head_dim · ctx / 2), on the GPUs at 0.8 of their FP16 tensor throughput
// (RTX 3090 pp2048 Q6_K: 3491 t/s, ggml-org/llama.cpp#7860; RTX 4090 pp512 Q4_0: 10358 t/s, #7676).
// Weights in RAM are computed on the GPU too (op offload), after a PCIe copy per ubatch (25 GB/s).
void estimate_prefill(const Setup& s, const Candidate& c, const SpeedInputs& in, Option& o) {
  const ModelSpec& m = *s.model;
  const double active = active_fraction(m);
  const Bytes weights_all = in.main_weights, weights_gpu = in.main_weights_on_devices;
  const Bytes weights_host_matmul =
      c.placement.host_matmuls() ? std::max<Bytes>(0, weights_all - weights_gpu - c.weight_bytes->lookup_host) : 0;
  double tflops = 0;  // the GPUs work one after another: the slowest one's throughput, a lower bound
  for (const auto& pool : s.pools)
    if (s.pool_tflops.count(pool.id)) tflops = tflops == 0 ? s.pool_tflops.at(pool.id) : std::min(tflops, s.pool_tflops.at(pool.id));
  if (tflops <= 0 || weights_all <= 0) return;
  const double flops_per_token = 2.0 * static_cast<double>(m.params) * active +
                                 4.0 * m.layers * m.heads * m.head_dim_k * (o.ctx_per_slot / 2.0);
  const double ub = s.resolved.n_ubatch;
  const double t_ubatch = flops_per_token * ub / (tflops * 1e12 * 0.8) + static_cast<double>(weights_host_matmul) * active / 25e9;
  o.prefill_tps = ub / t_ubatch;
  o.ttft_s = o.ctx_per_slot / o.prefill_tps;  // a prompt as long as the context, at the average rate
}

}  // namespace

bool TokenReads::add(std::string_view what, Bytes bytes, Bytes lookup, bool host_pool) {
  if (what == "weights") weights = checked_add(weights, bytes, "weights read");
  else if (is_kv_part(what)) kv = checked_add(kv, bytes, "KV read");
  if (what != "weights_host" || !host_pool) return false;
  // RAM-resident layers are read by the CPU; token_embd (the input layer) is only looked up
  weights_in_ram = checked_add(weights_in_ram, std::max<Bytes>(0, bytes - lookup), "weights read");
  return true;
}

SpeedInputs speed_inputs(const Setup& s, const Candidate& c, const Option& o) {
  SpeedInputs in;
  in.pools.resize(s.pools.size());
  for (const auto& a : o.allocations) {
    if (const size_t i = s.pool_index(a.pool); i < s.pools.size())
      in.pools[i].add(a.what, a.figure.bytes, c.weight_bytes->lookup_host, s.pools[i].kind == "host");
    if (a.component != "main" || (a.what != "weights" && a.what != "weights_host")) continue;
    in.main_weights += a.figure.bytes;
    if (a.what == "weights") in.main_weights_on_devices += a.figure.bytes;
  }
  return in;
}

void estimate_speed(const Setup& s, const Candidate& c, Option& o, const SpeedInputs& in) {
  estimate_decode(s, in, o);
  if (o.decode_tps > 0) estimate_prefill(s, c, in, o);  // as before: no prefill figure where decode has none
}

void estimate_speed(const Setup& s, const Candidate& c, Option& o) { estimate_speed(s, c, o, speed_inputs(s, c, o)); }

DecodeBound decode_bound(const Setup& s, const Candidate& c, bool placement_open) {
  const size_t dev = s.pool_index(s.device_pool), host = s.pool_index(s.host_pool);
  if (s.pools.size() > 2 || dev >= s.pools.size() || host >= s.pools.size() || (s.pools.size() == 2 && dev == host))
    throw std::logic_error("decode_bound: one device and host RAM only");
  const WeightBytes& w = *c.weight_bytes;
  const double active = active_fraction(*s.model);
  // What a token reads of the main weights as ranked_account counts it: the device's, and host RAM's less the
  // token_embd rows looked up (a pool that is not host RAM reads no host weights); all else it reads (the KV cache,
  // a draft) only adds.
  double on_device = static_cast<double>(w.device.bytes) * active;
  double in_ram = s.pools[host].kind == "host" ? static_cast<double>(std::max<Bytes>(0, w.host.bytes - w.lookup_host)) * active : 0;
  DecodeBound out;
  auto bandwidth = [&](size_t i) { return bandwidth_of(s, s.pools[i].id); };
  if (dev == host) {  // one pool reads everything: its relative speed is what it is for every option, at most 1
    const double seconds = bandwidth(dev) > 0 ? read_seconds(on_device + in_ram, bandwidth(dev)) : 0;
    out.tps = seconds > 0 ? decode_rate(s, seconds, kTypicalEfficiency) : HUGE_VAL;
    out.tps_certain = seconds > 0;
    out.tps_unknown = !placement_open && bandwidth(dev) <= 0 && on_device + in_ram > 0;
    return out;
  }
  // What the device may hold of what a token reads there (KV included): its budget, where the option fits.
  const Pool& device = s.pools[dev];
  const double room = device.bounded() ? static_cast<double>(std::max<Bytes>(0, device.budget())) : HUGE_VAL;
  if (placement_open && s.pools[host].kind == "host") {  // the most the device could hold, the rest in RAM
    const double reads = on_device + in_ram;
    on_device = std::min(reads, room);
    in_ram = reads - on_device;
  }
  // estimate_decode's relative speed, the device's bytes at most its room and RAM's at least these
  if (in_ram > 0 && room < HUGE_VAL) out.relative = relative_speed(room, in_ram);
  // A pool without a bandwidth leaves the speed unknown, or it reads nothing: its seconds are left out either way.
  // (A rate is known only where every pool that reads has a bandwidth: with one unknown, these seconds are the
  // known pool's reads where the rate could be known.)
  double seconds = 0;
  if (bandwidth(dev) > 0) seconds += read_seconds(on_device, bandwidth(dev));
  if (bandwidth(host) > 0) seconds += read_seconds(in_ram, bandwidth(host));
  out.tps_certain = on_device + in_ram > 0 && bandwidth(dev) > 0 && bandwidth(host) > 0;
  // the device reads, at no known rate (with the placement open it may be left with nothing to read)
  out.tps_unknown = !placement_open && bandwidth(dev) <= 0 && on_device > 0;
  if (placement_open && out.tps_certain && bandwidth(host) > bandwidth(dev))  // RAM the faster: all of it there
    seconds = read_seconds(on_device + in_ram, bandwidth(host));
  out.tps = seconds > 0 ? decode_rate(s, seconds, kTypicalEfficiency) : HUGE_VAL;
  return out;
}

}  // namespace kvplan::detail
