#include "args.hpp"

#include <algorithm>
#include <cctype>
#include <map>

#include "kvplan/error.hpp"

namespace kvplan::cli {

namespace {
const std::map<std::string, std::string>& llama_long_names() {
  static const std::map<std::string, std::string> long_names = {
      {"-c", "--ctx-size"},      {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-fa", "--flash-attn"},
      {"-np", "--parallel"},     {"-kvu", "--kv-unified"},   {"-ub", "--ubatch-size"},   {"-b", "--batch-size"},
      {"-ngl", "--n-gpu-layers"}, {"-ts", "--tensor-split"}, {"-m", "--model"},          {"-sm", "--split-mode"},
      {"-nkvo", "--no-kv-offload"}, {"-ot", "--override-tensor"}, {"-cmoe", "--cpu-moe"}, {"-ncmoe", "--n-cpu-moe"},
      {"-md", "--model-draft"}, {"-ctkd", "--cache-type-k-draft"}, {"-ctvd", "--cache-type-v-draft"},
      {"-ngld", "--n-gpu-layers-draft"}, {"-mm", "--mmproj"}, {"-devd", "--device-draft"}, {"-fit", "--fit"}, {"-fitt", "--fit-target"}, {"-fitc", "--fit-ctx"},
      // llama.cpp's remote model flags: -hf repo:quant and -mu URL name what --model reads remotely (kvplan/remote.hpp)
      {"-hf", "--model"}, {"-hfr", "--model"}, {"--hf-repo", "--model"}, {"-mu", "--model"}, {"--model-url", "--model"}};
  return long_names;
}
}  // namespace

std::vector<std::string> llama_short_flags() {
  std::vector<std::string> out;
  for (const auto& [short_name, long_name] : llama_long_names()) out.push_back(short_name);
  return out;
}

std::vector<std::string> rewrite_llama_flags(const std::vector<std::string>& args) {
  const auto& long_names = llama_long_names();
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // a pasted launch line starts with the program name (but --emit takes one as its value)
    if ((a == "llama-server" || a == "llama-cli") && (i == 0 || (args[i - 1] != "--emit" && args[i - 1] != "--program"))) continue;
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

namespace {
bool is_number(const std::string& s) {
  size_t i = s[0] == '-' || s[0] == '+' ? 1 : 0;
  if (i >= s.size()) return false;
  for (; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i])) && s[i] != '.' && s[i] != 'e' && s[i] != 'E') return false;
  return true;
}
bool contains(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

// llama.cpp reads integers in base 10 (std::stoi): "-c 010000" is 10000 there and "0x1000" is 0, where a base-0
// parser would plan 4096. A value with a leading zero or a radix prefix is refused rather than read either way.
void check_decimal(const std::string& flag, const std::string& value) {
  size_t i = !value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0;
  if (value.size() < i + 2 || value[i] != '0') return;
  const char next = value[i + 1];
  const bool digits = std::all_of(value.begin() + static_cast<std::ptrdiff_t>(i), value.end(),
                                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (digits || ((next == 'x' || next == 'X' || next == 'b' || next == 'B' || next == 'o' || next == 'O') && value.size() > i + 2 &&
                 std::isxdigit(static_cast<unsigned char>(value[i + 2]))))
    throw InputError(flag, value, "has a leading zero or a radix prefix, which llama.cpp and kvplan would read differently; "
                                  "accepted: a decimal number without leading zeros (e.g. 10000)");
}
}  // namespace

void check_flags(const std::vector<std::string>& args, const std::vector<std::string>& known,
                 const std::vector<std::string>& takes_value) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool previous_takes_value = i > 0 && contains(takes_value, args[i - 1]);
    if (a.empty()) {
      if (previous_takes_value) throw InputError(args[i - 1], "", "needs a value, and an empty one was given (see kvplan --help)");
      continue;
    }
    if (previous_takes_value) check_decimal(args[i - 1], a);
    if (a.size() < 2 || a[0] != '-' || is_number(a) || previous_takes_value) continue;  // a value, a negative number
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    if (!contains(known, name)) {
      // the closest name, trying those of the typed length first (so --tpo suggests --top, not --tp),
      // and none under half its length: a short flag is a substring of too many typos (--frobnicate is not -b)
      std::vector<std::string> by_length;
      for (const auto& k : known)
        if (2 * k.size() >= name.size()) by_length.push_back(k);
      auto gap = [&](const std::string& k) { return k.size() > name.size() ? k.size() - name.size() : name.size() - k.size(); };
      std::stable_sort(by_length.begin(), by_length.end(), [&](const std::string& x, const std::string& y) { return gap(x) < gap(y); });
      throw InputError(name, "", "is not a kvplan flag (kvplan --help lists them)", {}, closest_match(name, by_length));
    }
    if (eq != std::string::npos && eq + 1 == a.size() && contains(takes_value, name))
      throw InputError(name, "", "needs a value, and an empty one was given (see kvplan --help)");
  }
}

std::string pasted_program(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i)
    if ((args[i] == "llama-server" || args[i] == "llama-cli") && (i == 0 || (args[i - 1] != "--emit" && args[i - 1] != "--program")))
      return args[i];
  return "";
}

std::vector<std::string> take_server_args(std::vector<std::string>& args, const std::vector<std::string>& known,
                                          const std::vector<std::string>& takes_value, const EngineSpec& engine) {
  const auto& long_names = llama_long_names();
  auto program = [&](size_t i) { return (args[i] == "llama-server" || args[i] == "llama-cli") && (i == 0 || (args[i - 1] != "--emit" && args[i - 1] != "--program")); };
  size_t i = 0;
  while (i < args.size() && !program(i)) ++i;
  std::vector<std::string> kept, taken;
  kept.insert(kept.end(), args.begin(), args.begin() + static_cast<std::ptrdiff_t>(std::min(i + 1, args.size())));
  for (++i; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = a.substr(0, a.find('='));
    const auto as_kvplan = long_names.count(name) ? long_names.at(name) : name;
    const EngineSpec::ServerFlag* flag = contains(known, as_kvplan) ? nullptr : engine.server_flag(name);
    if (!flag) {  // kvplan's own flag (with its value), or something check_flags will name
      kept.push_back(a);
      if (a.find('=') == std::string::npos && contains(takes_value, as_kvplan) && i + 1 < args.size()) kept.push_back(args[++i]);
      continue;
    }
    if (!flag->kept)
      throw InputError(a, "", "changes memory kvplan does not size yet: " + flag->reason + "; remove it to plan the rest of the line");
    taken.push_back(a);
    const int values = a.find('=') == std::string::npos ? flag->values : flag->values - 1;
    for (int v = 0; v < values; ++v) {
      if (i + 1 >= args.size()) throw InputError(a, "", "needs a value, as llama-server reads it");
      taken.push_back(args[++i]);
    }
  }
  args = kept;
  return taken;
}

bool looks_like_path(const std::string& v) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return v.size() >= s.size() && v.compare(v.size() - s.size(), s.size(), s) == 0;
  };
  if (v.rfind("/", 0) == 0 || v.rfind("./", 0) == 0 || v.rfind("../", 0) == 0 || v.rfind("~", 0) == 0) return true;
  if (ends_with(".json")) return true;
  return ends_with(".gguf") && v.find('/') != std::string::npos;
}

}  // namespace kvplan::cli
