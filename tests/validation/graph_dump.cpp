// graph_dump: prints the graphs llama.cpp reserves its compute buffer with, for writing and checking kvplan's
// reserve-graph model (libplanner/src/memory/transformer_graph.cpp).
//
// Loaded with LD_PRELOAD (graph_dump.py does it), this library interposes ggml_backend_sched_reserve, which
// llama_context::graph_reserve calls for each worst-case graph, and appends every node and leaf of the graph
// to the file named by $KVPLAN_GRAPH_DUMP before reserving: id, op, name, bytes, flags, the view source and
// the layout (type / ne / nb) that decides in-place reuse in ggml-alloc, then the sources.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "ggml-backend.h"
#include "ggml-impl.h"
#include "ggml.h"

namespace {
std::string layout(const ggml_tensor* t) {
  char b[256];
  std::snprintf(b, sizeof b, "%d/%lld,%lld,%lld,%lld/%zu,%zu,%zu,%zu", static_cast<int>(t->type),
                static_cast<long long>(t->ne[0]), static_cast<long long>(t->ne[1]), static_cast<long long>(t->ne[2]),
                static_cast<long long>(t->ne[3]), t->nb[0], t->nb[1], t->nb[2], t->nb[3]);
  return b;
}
}  // namespace

extern "C" bool ggml_backend_sched_reserve(ggml_backend_sched_t sched, struct ggml_cgraph* graph) {
  using fn_t = bool (*)(ggml_backend_sched_t, struct ggml_cgraph*);
  static fn_t real = reinterpret_cast<fn_t>(dlsym(RTLD_NEXT, "ggml_backend_sched_reserve"));
  if (const char* path = std::getenv("KVPLAN_GRAPH_DUMP")) {
    if (FILE* f = std::fopen(path, "a")) {
      std::map<const ggml_tensor*, int> ids;
      auto id = [&](const ggml_tensor* t) { return ids.emplace(t, static_cast<int>(ids.size())).first->second; };
      auto placed = [](const ggml_tensor* t) { return t->data != nullptr || t->buffer != nullptr; };
      std::fprintf(f, "GRAPH %d nodes %d leafs\n", graph->n_nodes, graph->n_leafs);
      for (int i = 0; i < graph->n_nodes; i++) {
        const ggml_tensor* t = graph->nodes[i];
        std::fprintf(f, "N %d %s '%s' %zu flags=%d view=%d external=%d L=%s", id(t), ggml_op_name(t->op), ggml_get_name(t),
                     ggml_nbytes(t), t->flags, t->view_src ? id(t->view_src) : -1, placed(t) ? 1 : 0, layout(t).c_str());
        for (int j = 0; j < GGML_MAX_SRC; j++) {
          if (const ggml_tensor* s = t->src[j]) std::fprintf(f, " S:%d", id(s));
        }
        std::fprintf(f, "\n");
      }
      for (int i = 0; i < graph->n_leafs; i++) {
        const ggml_tensor* t = graph->leafs[i];
        std::fprintf(f, "LEAF %d '%s' %zu flags=%d external=%d L=%s\n", id(t), ggml_get_name(t), ggml_nbytes(t), t->flags,
                     placed(t) ? 1 : 0, layout(t).c_str());
      }
      std::fclose(f);
    }
  }
  return real(sched, graph);
}
