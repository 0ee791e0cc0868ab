// kvplan._core.apply_gpu_detection: kvplan.plan(gpu="auto") and free="auto" detect this machine's GPUs as the CLI
// does (cli/gpu_detect.hpp, compiled into the module); kept out of bindings.cpp, which binds libplanner alone.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "gpu_detect.hpp"

namespace py = pybind11;

void bind_detect(py::module_& m) {
  m.def(
      "apply_gpu_detection",
      [](const kvplan::Catalog& catalog, kvplan::Request request, bool gpu_auto, bool free_auto) {
        // The tools run outside the GIL: a slow nvidia-smi must not stall other Python threads.
        py::gil_scoped_release unlocked;
        const auto detection = kvplan::cli::detect_gpus(kvplan::cli::detect_options_from_env());
        kvplan::cli::apply_detection(catalog, request, detection, gpu_auto, free_auto);
        return request;
      },
      py::arg("catalog"), py::arg("request"), py::arg("gpu_auto"), py::arg("free_auto"));
}
