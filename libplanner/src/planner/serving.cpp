// resolve_serving(): what vLLM and SGLang are told beyond one GPU's memory (docs/engines.md "Serving at scale"):
// tensor x pipeline x data parallel GPUs over nodes, expert parallelism, the sequences the scheduler admits,
// the full-length conversations the KV pool must hold, the prefill chunk the activation peak is sized for.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "engines/checkpoints.hpp"
#include "planner/setup.hpp"

namespace kvplan::detail {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

bool serving_engine(const Setup& s) { return s.runtime && (s.runtime->kind == "vllm" || s.runtime->kind == "sglang"); }

// Flags that only a serving engine takes: refused elsewhere rather than dropped.
void refuse_elsewhere(const Setup& s) {
  const Request& r = s.request;
  const std::string engine = s.runtime ? s.runtime->name : "llama.cpp";
  auto refuse = [&](bool given, const std::string& flag, const std::string& value) {
    if (given) throw InputError(flag, value, "is planned for --engine vllm and sglang only (" + engine + " was asked)", {"vllm", "sglang"});
  };
  refuse(r.pipeline_parallel != 1, "--pipeline-parallel-size", std::to_string(r.pipeline_parallel));
  refuse(r.data_parallel != 1, "--data-parallel-size", std::to_string(r.data_parallel));
  refuse(r.expert_parallel, "--enable-expert-parallel", "");
  refuse(r.nodes != 1, "--nodes", std::to_string(r.nodes));
  refuse(r.max_num_seqs.has_value(), "--max-num-seqs", r.max_num_seqs ? std::to_string(*r.max_num_seqs) : "");
  refuse(r.concurrency != 1, "--concurrency", std::to_string(r.concurrency));
  refuse(r.max_batched_tokens.has_value(), "--max-num-batched-tokens", r.max_batched_tokens ? std::to_string(*r.max_batched_tokens) : "");
  refuse(!r.interconnect.empty(), "--interconnect", r.interconnect);
}

void check_parallel_sizes(const Setup& s) {
  const Request& r = s.request;
  const ModelSpec& m = *s.model;
  if (r.pipeline_parallel < 1 || r.pipeline_parallel > m.layers)
    throw InputError("--pipeline-parallel-size", std::to_string(r.pipeline_parallel),
                     fmt::format("must be 1..{} ({}'s layers: each stage holds at least one)", m.layers, m.name));
  if (r.data_parallel < 1 || r.data_parallel > 1024) throw InputError("--data-parallel-size", std::to_string(r.data_parallel), "must be 1..1024");
  if (r.expert_parallel && !m.moe)
    throw InputError("--enable-expert-parallel", "", m.name + " is a dense model: expert parallelism splits MoE experts");
  const int gpus = r.tensor_parallel * r.pipeline_parallel * r.data_parallel;
  if (r.nodes < 1 || r.nodes > 1024) throw InputError("--nodes", std::to_string(r.nodes), "must be 1..1024");
  if (gpus % r.nodes != 0)
    throw InputError("--nodes", std::to_string(r.nodes),
                     fmt::format("must divide the {} GPUs (tp {} x pp {} x dp {}) into equal nodes", gpus, r.tensor_parallel,
                                 r.pipeline_parallel, r.data_parallel));
  if (r.concurrency < 1 || r.concurrency > 1 << 20) throw InputError("--concurrency", std::to_string(r.concurrency), "must be 1..1048576");
  if (r.max_num_seqs && (*r.max_num_seqs < 1 || *r.max_num_seqs > 1 << 20))
    throw InputError("--max-num-seqs", std::to_string(*r.max_num_seqs), "must be 1..1048576");
  if (r.max_batched_tokens && (*r.max_batched_tokens < 1 || *r.max_batched_tokens > 1 << 22))
    throw InputError("--max-num-batched-tokens", std::to_string(*r.max_batched_tokens), "must be 1..4194304 tokens");
}

// The link between nodes: --interconnect, or the catalog's first (InfiniBand NDR), said so.
void resolve_link(Setup& s) {
  const Request& r = s.request;
  const Catalog& c = *s.catalog;
  std::vector<std::string> ids;
  for (const auto& i : c.interconnects) ids.push_back(i.id);
  if (!r.interconnect.empty()) {
    for (const auto& i : c.interconnects)
      if (i.id == r.interconnect) s.interconnect = &i;
    if (!s.interconnect) throw InputError("--interconnect", r.interconnect, "unknown link between nodes", ids, closest_match(r.interconnect, ids));
    if (r.nodes == 1) throw InputError("--interconnect", r.interconnect, "describes the link between nodes; give --nodes N (N > 1)");
  }
  if (r.nodes == 1 || c.interconnects.empty()) return;
  if (!s.interconnect) {
    s.interconnect = &c.interconnects.front();
    s.warnings.push_back(fmt::format("the nodes are assumed linked by {} (--interconnect to change: {})", s.interconnect->name,
                                     join(ids)));
  }
  s.resolved.interconnect = s.interconnect->id;
  s.resolved.interconnect_gbs = s.interconnect->gbs;
}

// Ranks as vLLM lays them out, TP innermost, then PP, then DP (vllm/distributed/parallel_state.py): a TP group
// larger than a node spans nodes; a stage boundary crosses nodes where a node ends.
void place_on_nodes(Setup& s) {
  const Request& r = s.request;
  const int gpus = r.tensor_parallel * r.pipeline_parallel * r.data_parallel;
  const int per_node = gpus / r.nodes;
  s.tp_spans_nodes = r.nodes > 1 && r.tensor_parallel > per_node;
  s.stage_crossings = 0;
  for (int st = 1; st < r.pipeline_parallel; ++st)
    if ((st * r.tensor_parallel) / per_node != (st * r.tensor_parallel - 1) / per_node) ++s.stage_crossings;
  if (s.tp_spans_nodes)
    s.warnings.push_back(fmt::format("tensor parallelism of {} spans {} nodes of {} GPUs: every layer all-reduces over the link between "
                                     "nodes, which is far slower than NVLink; the usual layout is --tensor-parallel-size {} "
                                     "--pipeline-parallel-size {} (TP inside a node, PP across nodes)",
                                     r.tensor_parallel, r.tensor_parallel / std::max(1, per_node), per_node, per_node,
                                     r.pipeline_parallel * r.tensor_parallel / std::max(1, per_node)));
}

// Sequences the scheduler admits: --max-num-seqs, else --parallel when above 1, else the engine's default
// (vLLM EngineArgs.get_batch_defaults for `vllm serve`: 1024 on >= 70 GiB non-A100 GPUs, 256 below;
// SGLang derives --max-running-requests from its pool, so kvplan leaves it out).
void resolve_admission(Setup& s, Bytes device_total) {
  const Request& r = s.request;
  Resolved& out = s.resolved;
  if (r.max_num_seqs) {
    out.max_num_seqs = *r.max_num_seqs, out.max_num_seqs_source = "asked";
  } else if (r.n_parallel > 1) {
    out.max_num_seqs = r.n_parallel, out.max_num_seqs_source = "--parallel";
  } else if (s.runtime->kind == "vllm") {
    const bool large = device_total >= 70 * kGiB && (!s.gpu || s.gpu->id.find("a100") == std::string::npos);
    out.max_num_seqs = large ? 1024 : 256;
    out.max_num_seqs_source = "vLLM's default for `vllm serve` on this GPU (EngineArgs.get_batch_defaults)";
  } else {
    out.max_num_seqs = 0;
    out.max_num_seqs_source = "SGLang's own (derived from its KV pool)";
  }
  out.concurrency = r.concurrency;
  if (r.max_batched_tokens) s.activation_tokens = *r.max_batched_tokens;
  out.max_batched_tokens = s.activation_tokens;
  out.max_batched_tokens_asked = r.max_batched_tokens.has_value();
}

}  // namespace

void resolve_serving(Setup& s, Bytes device_total) {
  Resolved& out = s.resolved;
  if (!serving_engine(s)) {
    refuse_elsewhere(s);
    return;
  }
  const Request& r = s.request;
  check_parallel_sizes(s);
  out.pipeline_stages = r.pipeline_parallel;
  out.data_parallel = r.data_parallel;
  out.expert_parallel = r.expert_parallel;
  out.nodes = r.nodes;
  resolve_link(s);
  place_on_nodes(s);
  resolve_admission(s, device_total);
}

bool has_checkpoint(const Setup& s, const WeightFormat& f) {
  return !engines::checkpoint_for(*s.catalog, *s.model, f).repo.empty();
}

}  // namespace kvplan::detail
