// kvplan: plan VRAM for local LLM inference (cli/main.cpp parses, libplanner does the work). `kvplan serve` and
// `kvplan mcp` run the Python package's servers (python/kvplan/serve.py, mcp_server.py), which call the same
// run_cli through the Python module.
#include <iostream>
#include <string>
#include <vector>

#include "run.hpp"
#include "serve_exec.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args.front() == "serve" || args.front() == "mcp")) return kvplan::cli::exec_python_server(args);
  return kvplan::cli::run_cli(args, std::cout, std::cerr);
}
