#include "engines/serving.hpp"

#include <algorithm>
#include <cmath>

namespace kvplan::engines {

std::vector<int> pp_partition(int layers, int pp) {
  std::vector<int> parts(static_cast<size_t>(std::max(1, pp)), layers / std::max(1, pp));
  const int remaining = layers % std::max(1, pp);
  for (int i = 2; i < remaining + 2; ++i) parts[parts.size() - static_cast<size_t>(i)] += 1;  // partitions[-i] += 1
  return parts;
}

namespace {
Bytes bytes_of(double x) { return checked_bytes(x, "engine memory"); }

double expert_params(const ModelSpec& m) {
  if (!m.moe || m.moe->experts <= 0) return 0;
  const double moe_layers = std::max(0, m.layers - m.moe->dense_lead);
  return moe_layers * m.moe->experts * 3.0 * m.embd * m.moe->expert_ff;
}
}  // namespace

WeightBytes shard_weight_bytes(const ModelSpec& m, const WeightFormat& f, double rel_error, const Shard& s) {
  const double embed = static_cast<double>(m.vocab) * m.embd;
  const int end = s.end_layer < 0 ? m.layers : s.end_layer;
  const bool whole = s.first && s.last;
  // A separate output head unless tied; tied, the last stage of a pipeline loads its own copy.
  const double head = !m.tied_embeddings || f.embed_on_host || !whole ? (s.last ? embed : 0) : 0;
  const double linear = std::max(0.0, static_cast<double>(m.params) - embed - (m.tied_embeddings ? 0 : embed));
  const double experts = std::min(linear, expert_params(m));
  const double dense = linear - experts;
  const double layers = std::max(1, m.layers);
  const double share = (end - s.first_layer) / layers;
  const int moe_first = m.moe ? m.moe->dense_lead : 0;
  const double moe_layers = std::max(1, m.layers - moe_first);
  const double moe_share = std::max(0, end - std::max(s.first_layer, moe_first)) / moe_layers;
  const double dense_bpw = f.experts_only ? f.head_bpw : f.bpw;
  const double on_device = (s.first && !f.embed_on_host ? embed * f.embed_bpw / 8 : 0) + head * f.head_bpw / 8;
  const double device = (on_device + dense * share * dense_bpw / 8) / s.tp + experts * moe_share * f.bpw / 8 / s.expert_shards;
  const double host = f.embed_on_host && s.first ? embed * f.embed_bpw / 8 : 0;
  WeightBytes w;
  w.device = Figure::estimate(bytes_of(device), bytes_of(device * (1 + rel_error)));
  w.host = Figure::estimate(bytes_of(host), bytes_of(host * (1 + rel_error)));
  w.lookup_host = bytes_of(host);  // the host part is the token embeddings alone
  return w;
}

PoolCapacity pool_capacity(double pool_bytes, double bytes_per_sequence, std::int64_t len, int block) {
  PoolCapacity c;
  if (pool_bytes <= 0 || bytes_per_sequence <= 0 || len <= 0) return c;
  const std::int64_t g = std::max(1, block);
  const std::int64_t blocks_per_request = (len + g - 1) / g;
  const double bytes_per_block = bytes_per_sequence / static_cast<double>(blocks_per_request);
  const auto num_blocks = static_cast<std::int64_t>(std::floor(pool_bytes / bytes_per_block));
  c.tokens = num_blocks * g;
  c.concurrency = static_cast<double>(num_blocks) / static_cast<double>(blocks_per_request);
  return c;
}

double inter_node_seconds_per_token(const ModelSpec& m, const Interconnect& link, int tp, bool tp_spans_nodes, int stage_crossings) {
  const double hidden_bytes = 2.0 * m.embd;  // one token's hidden state in bf16
  const double latency = link.allreduce_latency_us * 1e-6;
  const double bw = link.gbs * 1e9;
  double t = 0;
  if (tp_spans_nodes && tp > 1) t += 2.0 * m.layers * (latency + 2.0 * (tp - 1) / tp * hidden_bytes / bw);
  t += stage_crossings * (latency + hidden_bytes / bw);
  return t;
}

}  // namespace kvplan::engines
