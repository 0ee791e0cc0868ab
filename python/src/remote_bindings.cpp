// kvplan._core.load_remote_model / is_remote_model: the remote model adapter (net/, kvplan/remote.hpp) for Python,
// so kvplan.plan(model="Qwen/...") reads a Hub repo, GGUF URL or Ollama tag as the CLI's --model does. Kept apart
// from bindings.cpp; the network call releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "kvplan/kvplan.hpp"
#if KVPLAN_REMOTE
#include "kvplan/remote.hpp"
#endif

namespace py = pybind11;

using Utf8Check = void (*)(const std::string& field, const std::string& value, const kvplan::ModelSpec& m);

void bind_remote(py::module_& m, Utf8Check require_utf8) {
  m.def(
      "load_remote_model",
      [require_utf8](const std::string& model, const kvplan::Catalog& catalog, const std::string& engine) -> std::shared_ptr<kvplan::ModelSpec> {
#if KVPLAN_REMOTE
        std::shared_ptr<const kvplan::ModelSpec> spec;
        {
          py::gil_scoped_release release;
          spec = kvplan::net::load_remote_model(model, catalog, engine);
        }
        if (!spec) return nullptr;
        require_utf8("--model", model, *spec);
        return std::make_shared<kvplan::ModelSpec>(*spec);
#else
        (void)model, (void)catalog, (void)engine, (void)require_utf8;
        return nullptr;
#endif
      },
      py::arg("model"), py::arg("catalog"), py::arg("engine") = "llama.cpp");
  m.def(
      "is_remote_model",
      [](const std::string& model) {
#if KVPLAN_REMOTE
        try {
          return kvplan::net::parse_remote_id(model).has_value();
        } catch (const kvplan::InputError&) {
          return true;  // of a remote shape but malformed: reading it says what is wrong
        }
#else
        (void)model;
        return false;
#endif
      },
      py::arg("model"));
}
