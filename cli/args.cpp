#include "args.hpp"

#include <map>

namespace kvplan::cli {

std::vector<std::string> rewrite_llama_flags(const std::vector<std::string>& args) {
  static const std::map<std::string, std::string> long_names = {
      {"-c", "--ctx-size"},      {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-fa", "--flash-attn"},
      {"-np", "--parallel"},     {"-kvu", "--kv-unified"},   {"-ub", "--ubatch-size"},   {"-b", "--batch-size"},
      {"-ngl", "--n-gpu-layers"}, {"-ts", "--tensor-split"}, {"-m", "--model"},          {"-sm", "--split-mode"},
      {"-nkvo", "--no-kv-offload"}, {"-ot", "--override-tensor"}, {"-cmoe", "--cpu-moe"}, {"-ncmoe", "--n-cpu-moe"},
      {"-md", "--model-draft"}, {"-ctkd", "--cache-type-k-draft"}, {"-ctvd", "--cache-type-v-draft"},
      {"-ngld", "--n-gpu-layers-draft"}, {"-mm", "--mmproj"}, {"-devd", "--device-draft"}, {"-fit", "--fit"}, {"-fitt", "--fit-target"}, {"-fitc", "--fit-ctx"}};
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // a pasted launch line starts with the program name (but --emit takes one as its value)
    if ((a == "llama-server" || a == "llama-cli") && (i == 0 || args[i - 1] != "--emit")) continue;
    auto it = long_names.find(a);
    if (it == long_names.end()) {
      out.push_back(a);
      continue;
    }
    out.push_back(it->second);
    // llama.cpp's -fa once was a bare switch; without a value it means "on".
    if (a == "-fa" && (i + 1 >= args.size() || (args[i + 1] != "on" && args[i + 1] != "off" && args[i + 1] != "auto")))
      out.push_back("on");
  }
  return out;
}

}  // namespace kvplan::cli
