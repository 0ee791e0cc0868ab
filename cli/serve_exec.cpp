#include "serve_exec.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace kvplan::cli {

namespace {

// The build tree's package: <build>/python holds the compiled module, <source>/python the package itself
// (python/kvplan/__init__.py joins the two). An installed kvplan (pip install .) needs neither.
void add_build_tree_pythonpath() {
#ifdef KVPLAN_BUILD_PYTHONPATH
  std::string path = KVPLAN_BUILD_PYTHONPATH;
  std::error_code ec;
  if (!std::filesystem::exists(KVPLAN_SOURCE_PYTHON_DIR, ec)) return;
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) path += std::string(":") + old;
  setenv("PYTHONPATH", path.c_str(), 1);
#endif
}

std::string python_interpreter() {
  if (const char* env = std::getenv("KVPLAN_PYTHON"); env && *env) return env;
#ifdef KVPLAN_CONFIGURED_PYTHON
  std::error_code ec;
  if (std::filesystem::exists(KVPLAN_CONFIGURED_PYTHON, ec)) return KVPLAN_CONFIGURED_PYTHON;
#endif
  return "python3";
}

}  // namespace

int exec_python_server(const std::vector<std::string>& args) {
  add_build_tree_pythonpath();
  const std::string python = python_interpreter();
  std::vector<std::string> argv_s = {python, "-m", "kvplan"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(python.c_str(), argv.data());
  std::cerr << "kvplan: " << args.front() << " needs Python with the kvplan package (scripts/setup.sh builds it): could not run "
            << python << ": " << std::strerror(errno) << " (set KVPLAN_PYTHON to the Python to use)\n";
  return 2;
}

}  // namespace kvplan::cli
