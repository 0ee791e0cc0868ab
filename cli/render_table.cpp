// The plan as a table a newcomer can read without the docs. Formatting only.
#include <fmt/format.h>

#include "kvplan/error.hpp"
#include "kvplan/memory.hpp"
#include "kvplan/units.hpp"
#include "render.hpp"

namespace kvplan::cli {
namespace {
// Engines that size memory themselves (vLLM, SGLang, ExLlama, MLX): no llama.cpp slots, ubatch or flash-attention choice.
bool own_memory(const Plan& p) { return p.resolved.engine_id != "llama.cpp" && p.resolved.engine_id != "ollama"; }


std::string gib(Bytes b) { return format_gib(b); }

std::string params_text(std::int64_t p) { return fmt::format("{:.2f}B params", static_cast<double>(p) / 1e9); }

// "*": extrapolated, bounded by measured analogs (the table's footnote says so)
std::string loss_text(const Quality& q) {
  const double pct = q.expected_loss * 100;
  const char* mark = q.extrapolated ? "*" : "";
  if (pct < 0.05) return fmt::format("{} (<0.1%){}", risk_name(q.risk), mark);
  if (pct < 10) return fmt::format("{} (~{:.1f}%){}", risk_name(q.risk), pct, mark);
  return fmt::format("{} (~{:.0f}%){}", risk_name(q.risk), pct, mark);
}

// --gpu gave a size: what it was taken to be. On Metal the size is the Mac's RAM and the GPU gets macOS's working set.
std::string bare_size_device(const Plan& p) {
  return p.resolved.backend == "metal" ? p.request.gpu + " Mac (unified memory), GPU working set" : p.request.gpu + " GPU";
}
std::string bare_size_note(const Plan& p) {
  if (p.resolved.backend == "metal")
    return fmt::format(" (macOS's default Metal working set of {} GiB RAM; `sudo sysctl iogpu.wired_limit_mb` raises it)",
                       gib(parse_size(p.request.gpu, "--gpu")));
  if (p.request.backend) return fmt::format(" (GB means GiB here, as GPU vendors count; a {} card)", p.resolved.backend);
  return " (GB means GiB here, as GPU vendors count; assumed a CUDA card)";
}

// "8 KV heads x 128 head size"; Gemma 4 gives sliding layers a head size of their own (key_length_swa) and the 26B-A4B,
// 31B and 12B fewer KV heads on full layers, so both are named when they differ.
std::string kv_geometry(const ModelSpec& m) {
  int sliding = -1, full = -1;
  for (int il = 0; il < m.layers; ++il)
    if (m.kv_heads_at(il) > 0 && !m.is_recurrent(il)) (m.is_sliding(il) ? sliding : full) = il;
  auto one = [&](int il) {
    const int head = m.is_sliding(il) && m.head_dim_k_swa > 0 ? m.head_dim_k_swa : m.head_dim_k;
    return fmt::format("{} KV heads x {} head size", m.kv_heads_at(il), head);
  };
  if (sliding < 0 || full < 0 || one(sliding) == one(full)) return fmt::format("{} KV heads x {} head size", m.kv_heads, m.head_dim_k);
  return fmt::format("{} (sliding) / {} (full)", one(sliding), one(full));
}

}  // namespace

// "qwen2, 32.76B params, 64 layers, 8 KV heads x 128 head size": the Model line's shape (also Python's plan header).
std::string model_shape(const ModelSpec& m) {
  const LayerCounts n = layer_counts(m);
  std::string kinds;
  if (n.sliding)
    kinds += fmt::format(", {} of them {} ({} tokens)", n.sliding, m.swa && m.swa->chunked ? "chunked-attention" : "sliding-window",
                         m.swa ? m.swa->window : 0);
  if (n.recurrent) kinds += fmt::format(", {} recurrent ({})", n.recurrent, m.recurrent->kind);
  if (n.none) kinds += fmt::format(", {} without a cache", n.none);
  std::string heads = n.full + n.sliding == 0 ? "no attention cache"
                      : m.mla ? fmt::format("MLA latent cache {} wide", m.mla->kv_lora_rank + m.mla->rope_dim)
                              : kv_geometry(m);
  return fmt::format("{}, {}, {} layers{}, {}", m.arch, params_text(m.params), m.layers, kinds, heads);
}

namespace {

std::string header(const Plan& p) {
  const ModelSpec& m = *p.model;
  const Pool& dev = p.pools.front();
  std::string out;
  out += fmt::format("Model    {}  ({})\n", m.name, model_shape(m));
  if (m.ctx_extended > 0 && m.rope_scaling)
    out += fmt::format("         context: native {}, extended {} with {} rope scaling x{:g}\n", m.ctx_native, m.ctx_extended,
                       m.rope_scaling->type, m.rope_scaling->factor);
  else
    out += fmt::format("         context: native {} (no documented extension)\n", m.ctx_native);
  const bool size_only = p.resolved.gpu_size_only;
  const size_t gpus = static_cast<size_t>(std::count_if(p.pools.begin(), p.pools.end(), [](const Pool& q) { return q.kind == "gpu"; }));
  if (gpus > 1) {
    // several GPUs (llama.cpp layer split): one line each; the table sums them and shows the tightest headroom
    for (size_t i = 0; i < gpus; ++i)
      out += fmt::format("{} {}: {} = {} GiB{}{}\n", i == 0 ? "Devices " : "        ", p.pools[i].id, p.pools[i].device,
                         gib(p.pools[i].capacity),
                         i < p.resolved.tensor_split.size() ? fmt::format(", layer share {:g}", p.resolved.tensor_split[i]) : "",
                         p.pools[i].detected.empty() ? "" : " (detected: " + p.pools[i].detected + ")");
  } else {
    // A detected device says how it was found; a size the user typed says how kvplan reads it.
    const std::string note = !dev.detected.empty() ? " (detected: " + dev.detected + ")" : size_only ? bare_size_note(p) : "";
    // a bare size split by tensor/pipeline parallelism keeps the layout kvplan names ("2 x 24GB GPU (...) (TP 2; ...)")
    const bool one_gpu = p.resolved.tensor_parallel <= 1 && dev.device.find("figures per GPU") == std::string::npos;
    out += fmt::format("Device   {} = {} GiB{}\n", size_only && one_gpu ? bare_size_device(p) : dev.device, gib(dev.capacity), note);
  }
  std::string budget = fmt::format("{} GiB", gib(dev.capacity));
  if (dev.reserve > 0) budget += fmt::format(" - reserve {}", gib(dev.reserve));
  budget += fmt::format(" - margin {}; runtime overhead (driver context, BLAS workspace, memory pool) {} typical, up to {}",
                        gib(dev.margin), gib(dev.overhead.bytes), gib(dev.overhead.high));
  out += "Budget   " + budget + "\n";
  const int slots = p.resolved.n_parallel;
  if (own_memory(p)) {
    out += fmt::format("Engine   {} ({}), {} backend\n", p.resolved.engine, p.resolved.engine_build, p.resolved.backend);
    const Resolved& r = p.resolved;
    const std::string fraction = r.memory_fraction > 0 ? fmt::format("; the engine uses {:g} of the device", r.memory_fraction) : "";
    if (r.engine_id == "vllm" || r.engine_id == "sglang")
      out += fmt::format("Serving  {}{}; the KV pool must hold {} full-length conversation{} (--concurrency){}\n",
                         r.max_num_seqs > 0 ? fmt::format("up to {} sequences admitted ({})", r.max_num_seqs, r.max_num_seqs_source)
                                            : "admitted sequences: " + r.max_num_seqs_source,
                         r.data_parallel > 1 ? fmt::format(" per replica, {} replicas", r.data_parallel) : "", r.concurrency,
                         r.concurrency > 1 ? "s" : "", fraction);
    else
      out += fmt::format("Serving  {} conversation{} of the planned context at once{}\n", slots, slots > 1 ? "s" : "", fraction);
  } else {
    out += fmt::format("Engine   {} {}, {} backend{}, {} build\n", p.resolved.engine, p.resolved.engine_build, p.resolved.backend,
                       p.resolved.backend_verified ? "" : " (kernel rules unverified)",
                       p.resolved.build == "default" ? "default" : "GGML_CUDA_FA_ALL_QUANTS");
    out += fmt::format("Serving  {} slot{}{}, ubatch {}; flash attention {}\n", slots, slots > 1 ? "s" : "",
                       slots > 1 ? (p.resolved.kv_unified ? " sharing one KV buffer" : " with a KV stream each") : "",
                       p.resolved.n_ubatch, p.request.flash_attn == "auto" ? "chosen per option" : p.request.flash_attn);
  }
  const TaskProfile& t = *p.task;
  out += fmt::format("Task     {}: wants {} tokens (at least {}); {}\n", t.name, t.ctx_target, t.ctx_min, t.summary);
  return out;
}

struct Column {
  std::string title;
  bool left;
};

std::string table(const Plan& p) {
  std::vector<Column> cols = {{"#", false},       {"weights", true},  {"ctx", false},     {"K", true},       {"V", true},
                                    {"FA", true},       {"weights", false}, {"K cache", false}, {"V cache", false}, {"compute", false},
                                    {"overhead", false}, {"total", false},  {"headroom", false}, {"tok/s", false}, {"risk (est. loss)", true}, {"reason", true}};
  const bool has_state = std::any_of(p.options.begin(), p.options.end(), [](const Option& o) { return o.sum("state") > 0; });
  // A RAM column when layers or experts live in host memory (the host pool holds more than token_embd).
  const bool has_ram = p.pools.back().kind == "host" && (p.resolved.n_cpu_moe || (p.resolved.n_gpu_layers && *p.resolved.n_gpu_layers >= 0 &&
                                                                      *p.resolved.n_gpu_layers <= p.model->layers));
  std::vector<std::vector<std::string>> rows;
  // The devices: one GPU (or unified memory, or the CPU), or several GPUs summed with the tightest headroom.
  std::vector<std::string> devices;
  for (const auto& q : p.pools)
    if (q.kind != "host") devices.push_back(q.id);
  for (size_t i = 0; i < p.options.size(); ++i) {
    const Option& o = p.options[i];
    auto on_devices = [&](const std::string& what) {
      Bytes b = 0;
      for (const auto& d : devices) b += o.sum(what, d);
      return b;
    };
    Bytes overhead = 0;
    for (size_t d = 0; d < devices.size(); ++d) overhead += p.pools[d].overhead.bytes;
    const Bytes total = o.device_total(), headroom = o.device_headroom();
    const std::string ctx = o.ctx_per_slot == o.ctx_size ? std::to_string(o.ctx_size)
                                                         : fmt::format("{}={}x{}", o.ctx_size, p.resolved.n_parallel, o.ctx_per_slot);
    rows.push_back({std::to_string(i + 1), o.weights, ctx, o.cache_type_k, o.cache_type_v, own_memory(p) ? "-" : o.flash_attn ? "on" : "off",
                    gib(on_devices("weights")), gib(on_devices("k_cache") + on_devices("swa_k_cache")),
                    gib(on_devices("v_cache") + on_devices("swa_v_cache")),
                    gib(o.sum("compute")), gib(overhead), gib(total),
                    gib(headroom), o.decode_tps > 0 ? fmt::format("{:.0f}", o.decode_tps) : "-", loss_text(o.quality), o.reason});
    const std::string dev = devices.front();
    if (has_state) rows.back().insert(rows.back().begin() + 9, gib(o.sum("state", dev)));
    if (has_ram) rows.back().insert(rows.back().end() - 3, gib(o.usage(p.pools.back().id).allocations));
  }
  if (has_state) cols.insert(cols.begin() + 9, Column{"state", false});
  if (has_ram) cols.insert(cols.end() - 3, Column{"RAM", false});
  std::vector<size_t> width(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) {
    width[c] = cols[c].title.size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < cols.size(); ++c) {
      const bool last = c + 1 == cols.size();
      if (c) s += "  ";
      if (last) s += cells[c];
      else s += cols[c].left ? fmt::format("{:<{}}", cells[c], width[c]) : fmt::format("{:>{}}", cells[c], width[c]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::vector<std::string> titles;
  for (const auto& c : cols) titles.push_back(c.title);
  std::string out = line(titles);
  for (const auto& r : rows) out += line(r);
  return out;
}

}  // namespace

// Verified alternatives, each with the arguments that re-plan it.
std::string render_suggestions(const Plan& p) {
  if (p.suggestions.empty()) return {};
  std::string out = p.recommended() ? "\nOn this card\n" : "\nWhat would work (each re-planned by kvplan)\n";
  for (const auto& s : p.suggestions) {
    std::string args;
    for (const auto& a : s.args) args += " " + (a.find_first_of(" \"'") == std::string::npos ? a : "'" + a + "'");
    out += "  - " + s.summary + "\n      kvplan" + args + "\n";
  }
  return out;
}

std::string render_plan(const Plan& p) {
  std::string out = header(p) + "\n";
  out += table(p);
  out += "\nSizes in GiB (2^30 bytes). KV cache is exact for this engine build; weights, compute and overhead are estimates:\n"
         "headroom = device - margin - every figure at its upper bound. `--json` has the bytes, `kvplan explain` one option in full.\n"
         "tok/s: decode speed of one conversation at full context, bandwidth bound (an estimate; - when a bandwidth is unknown).\n";
  bool any_extrapolated = false;
  for (const auto& o : p.options) any_extrapolated = any_extrapolated || o.quality.extrapolated;
  if (any_extrapolated)
    out += "*: extrapolated - no measurement of that K/V pair on this model family; its band comes from the nearest\n"
           "   measured analogs (`kvplan explain` names them).\n";
  if (const Option* rec = p.recommended()) {
    out += fmt::format("\nRecommended  #1: {} weights, {} tokens, K={} V={}, {}\n", rec->weights, rec->ctx_size, rec->cache_type_k,
                       rec->cache_type_v, loss_text(rec->quality));
    // Extra components: what each adds to the totals above.
    for (const char* component : {"draft", "mmproj"}) {
      Bytes dev = 0, host = 0;
      for (const auto& a : rec->allocations)
        if (a.component == component) (a.pool == p.pools.front().id ? dev : host) += a.figure.bytes;
      if (dev + host == 0) continue;
      const bool draft = std::string(component) == "draft";
      out += fmt::format("{}{} GiB on the device, {} GiB in RAM ({})\n", draft ? "Draft        " : "Projector    ", gib(dev), gib(host),
                         draft ? p.resolved.draft_file + ", K=" + p.resolved.draft_type_k + " V=" + p.resolved.draft_type_v
                               : p.resolved.mmproj_file);
    }
    if (rec->decode_tps > 0)
      out += fmt::format("Speed        decode ~{:.0f} tok/s at {} tokens (bound by {}){}\n", rec->decode_tps, rec->ctx_per_slot,
                         rec->decode_bound, rec->prefill_tps > 0 ? fmt::format(", prefill ~{:.0f} tok/s, first token of a full prompt ~{:.0f} s",
                                                                               rec->prefill_tps, rec->ttft_s) : "");
    if (rec->n_cpu_moe || (rec->n_gpu_layers && *rec->n_gpu_layers >= 0 && *rec->n_gpu_layers <= p.model->layers))
      out += fmt::format("Placement    {} ({} GiB in RAM{})\n",
                         rec->n_cpu_moe ? fmt::format("experts of {} of {} layers in RAM", *rec->n_cpu_moe, p.model->layers)
                                        : fmt::format("{} of {} layers on the GPU", std::min(*rec->n_gpu_layers, p.model->layers), p.model->layers),
                         gib(rec->usage(p.pools.back().id).allocations),
                         fmt::format(" of {} GiB, {}", gib(p.pools.back().capacity),
                                     !p.request.host_ram ? "assumed: give --ram" : p.request.host_ram_source.empty() ? "--ram" : p.request.host_ram_source));
    if (rec->max_concurrency > 0)
      out += fmt::format("Capacity     the KV pool holds {:.2f} conversations of {} tokens{}{}\n", rec->max_concurrency, rec->ctx_per_slot,
                         rec->kv_pool_tokens <= 0             ? ""
                         : p.resolved.engine_id == "vllm" ? fmt::format(" (vLLM's 'Maximum concurrency'; 'GPU KV cache size: {} tokens')", rec->kv_pool_tokens)
                                                            : fmt::format(" (SGLang's max_total_num_tokens={})", rec->kv_pool_tokens),
                         p.resolved.data_parallel > 1 ? fmt::format(", per replica: {:.2f} over the {} replicas", rec->max_concurrency * p.resolved.data_parallel,
                                                                    p.resolved.data_parallel)
                                                      : "");
    for (const auto& st : rec->stages)
      out += fmt::format("Stage        layers {}-{}{}{}: weights {} GiB, KV {} GiB, headroom {} GiB per GPU\n", st.first_layer, st.end_layer - 1,
                         st.embeddings ? " + embeddings" : "", st.output ? " + output head" : "", gib(st.weights), gib(st.kv), gib(st.headroom));
    for (const auto& l : rec->launches)  // one program's line for llama.cpp; Ollama's environment and Modelfile, named
      out += (rec->launches.size() > 1 ? "# " + l.name + "\n" : "") + l.text + "\n";
    if (!p.explanation.empty()) {
      out += "\nWhy\n";
      for (const auto& line : p.explanation) out += "  - " + line + "\n";
    }
    for (const auto& n : rec->needs) out += "Needs    " + n + "\n";
    for (const auto& w : rec->warnings) out += "Warning  " + w + "\n";
  } else if (p.verdict == "nothing_acceptable") {
    out += "\nNothing acceptable: " + p.nothing_acceptable + ".\n";
  } else {
    out += "\nNothing fits: " + p.nothing_fits + ".\n";
  }
  out += render_suggestions(p);
  for (const auto& w : p.warnings) out += "Warning  " + w + "\n";
  return out;
}

std::string render_explain(const Plan& p, int rank) {
  if (rank < 1 || rank > static_cast<int>(p.options.size()))
    throw InputError("--rank", std::to_string(rank), fmt::format("must be 1..{}", p.options.size()));
  const Option& o = p.options[static_cast<size_t>(rank - 1)];
  std::string out = header(p) + "\n";
  out += fmt::format("Option #{}: {} weights, {} tokens, K={} V={}, flash attention {}\n", rank, o.weights, o.ctx_size, o.cache_type_k,
                     o.cache_type_v, o.flash_attn ? "on" : "off");
  out += fmt::format("{}\n\n", o.reason);
  out += fmt::format("{:<14} {:<8} {:>14} {:>12} {:>12}  {}\n", "allocation", "pool", "bytes", "MiB", "upper MiB", "kind");
  for (const auto& a : o.allocations)
    out += fmt::format("{:<14} {:<8} {:>14} {:>12} {:>12}  {}\n", a.what, a.pool, a.figure.bytes, format_mib(a.figure.bytes),
                       format_mib(a.figure.high), a.figure.accuracy == Accuracy::exact ? "exact" : "estimate");
  for (const auto& pool : p.pools) {
    const PoolUsage& u = o.usage(pool.id);
    if (pool.bounded())
      out += fmt::format("pool {}: {} GiB typical, {} GiB at upper bounds (runtime overhead {} .. {}), of {} GiB (capacity {} - reserve {} "
                         "- margin {}): headroom {} GiB\n",
                         pool.id, gib(u.total), gib(u.total_high), gib(pool.overhead.bytes), gib(pool.overhead.high),
                         gib(pool.capacity - pool.reserve - pool.margin), gib(pool.capacity), gib(pool.reserve), gib(pool.margin),
                         gib(u.headroom));
    else
      out += fmt::format("pool {}: {} GiB (host RAM, not bounded by this plan)\n", pool.id, gib(u.total_high));
  }
  const Quality& q = o.quality;
  out += fmt::format("\nQuality  {}: expected loss {:.3f}% (80% interval {:.3f}% .. {:.3f}%)\n", risk_name(q.risk), q.expected_loss * 100,
                     q.low * 100, q.high * 100);
  out += fmt::format("         = weights {:.3f}% + task factor {:g} x weight-precision factor {:g} x cache {:.3f}%\n",
                     q.weights_loss * 100, q.task_factor, q.weights_factor, q.kv_loss * 100);
  for (const auto& e : q.evidence) out += "Evidence " + e + "\n";
  for (const auto& n : o.needs) out += "Needs    " + n + "\n";
  for (const auto& w : o.warnings) out += "Warning  " + w + "\n";
  out += "\n" + o.launch + "\n";
  return out;
}

}  // namespace kvplan::cli
