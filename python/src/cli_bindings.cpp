// kvplan._core.run_cli: the `kvplan` program as a function (cli/run.hpp), so that the HTTP and MCP servers
// (python/kvplan/serve.py, mcp_server.py) answer exactly what `kvplan ... --json` prints, through the same parsing,
// planning and rendering code, with no request building of their own.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <tuple>

#include "args.hpp"
#include "model_source.hpp"
#include "render.hpp"
#include "run.hpp"

namespace py = pybind11;

void bind_cli(py::module_& m) {
  m.def(
      "run_cli",
      [](const std::vector<std::string>& args) {
        std::ostringstream out, err;
        int code = 0;
        {
          py::gil_scoped_release unlocked;  // planning is pure C++: concurrent requests run in parallel
          code = kvplan::cli::run_cli(args, out, err);
        }
        return std::make_tuple(code, py::bytes(out.str()), py::bytes(err.str()));
      },
      py::arg("args"), "Run `kvplan ARGS...`: (exit code, stdout bytes, stderr bytes).");
  m.def(
      "names_local_file",
      [](const std::string& value) { return kvplan::cli::looks_like_path(value) && !kvplan::cli::remote_shaped(value); },
      py::arg("value"), "Whether the CLI reads this --model value as a local file or folder (by its shape).");
  m.def("model_shape", &kvplan::cli::model_shape, py::arg("model"),
        "The plan table's model shape: architecture, parameters, layers by kind and the KV heads of each kind.");
}
