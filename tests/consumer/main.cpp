#include <iostream>

#include <kvplan/kvplan.hpp>

int main() {
  kvplan::Request request;
  request.gpu = "24GB";
  request.model = "qwen2.5-coder-32b";
  request.task = "agentic";
  const kvplan::Plan plan = kvplan::plan(kvplan::builtin_catalog(), request);
  if (!plan.fits()) return 1;
  std::cout << plan.recommended()->launch << "\n";
  return 0;
}
