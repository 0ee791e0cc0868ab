// `kvplan serve` and `kvplan mcp`: the HTTP server and the MCP server live in the Python package (python/kvplan/
// serve.py, mcp_server.py); the program runs `python -m kvplan serve|mcp ...` in its place.
#pragma once
#include <string>
#include <vector>

namespace kvplan::cli {

// Replaces this process with the Python package's server; returns (2, with the reason on stderr) only when it
// cannot. The Python: KVPLAN_PYTHON, else the one this build was configured with, else python3 on PATH.
int exec_python_server(const std::vector<std::string>& args);

}  // namespace kvplan::cli
