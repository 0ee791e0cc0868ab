// Catalog listings: `kvplan models`, `kvplan gpus`.
#include <algorithm>

#include <fmt/format.h>

#include "render.hpp"

namespace kvplan::cli {

std::string render_models(const Catalog& c) {
  std::string out = fmt::format("{:<36} {:<10} {:>8} {:>6} {:>4} {:>5} {:>8} {:>8}  {}\n", "id", "arch", "params", "layers", "kv", "head",
                                "native", "extended", "aliases");
  for (const auto& m : c.models) {
    std::string aliases;
    for (const auto& a : m.aliases) aliases += (aliases.empty() ? "" : ", ") + a;
    out += fmt::format("{:<36} {:<10} {:>7.2f}B {:>6} {:>4} {:>5} {:>8} {:>8}  {}\n", m.id, m.arch, static_cast<double>(m.params) / 1e9,
                       m.layers, m.kv_heads, m.head_dim_k, m.ctx_native, m.ctx_extended ? std::to_string(m.ctx_extended) : "-", aliases);
  }
  return out;
}

std::string render_gpus(const Catalog& c) {
  size_t id_w = 2, name_w = 4;
  for (const auto& g : c.gpus) id_w = std::max(id_w, g.id.size()), name_w = std::max(name_w, g.name.size());
  std::string out = fmt::format("{:<{}} {:<{}} {:<7} {:<10} {:>10} {:>12}\n", "id", id_w, "name", name_w, "backend", "memory",
                                "total MiB", "usable MiB");
  for (const auto& g : c.gpus)
    out += fmt::format("{:<{}} {:<{}} {:<7} {:<10} {:>10} {:>12}\n", g.id, id_w, g.name, name_w, g.backend, g.memory_kind, g.total_mib,
                       g.unified() && g.working_set_mib > 0 ? std::to_string(g.working_set_mib) : std::to_string(g.total_mib));
  return out;
}

}  // namespace kvplan::cli
