// GPU detection: pure parsers of the tools' own reports, one runner of tools with a time limit, NVML through
// dlopen, and the step that turns what was found into request fields.
#include "gpu_detect.hpp"
#include "text.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "kvplan/catalog.hpp"
#include "kvplan/error.hpp"
#include "kvplan/units.hpp"

namespace kvplan::cli {
namespace {

constexpr std::int64_t kMiBytes = std::int64_t{1} << 20;
// No GPU has more; a bigger figure is a misread.
constexpr std::int64_t kMaxPlausibleBytes = std::int64_t{64} << 40;

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const auto at = text.find(sep);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return out;
    text.remove_prefix(at + 1);
  }
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  for (auto line : split(text, '\n'))
    if (!trim(line).empty()) out.push_back(trim(line));
  return out;
}

bool plausible(std::int64_t bytes) { return bytes > 0 && bytes <= kMaxPlausibleBytes; }

std::string fold(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<std::vector<DetectedGpu>> parse_nvidia_smi(const std::string& text) {
  std::vector<DetectedGpu> out;
  for (auto line : lines_of(text)) {
    // The name comes first and the two MiB figures last, so a comma in a name cannot shift them.
    const auto fields = split(line, ',');
    if (fields.size() < 3) return std::nullopt;
    const auto total = parse_count(fields[fields.size() - 2]), free = parse_count(fields.back());
    if (!total || !free || *total > kMaxPlausibleBytes / kMiBytes || *free > *total) return std::nullopt;  // "[N/A]" too
    const auto name = trim(line.substr(0, line.size() - fields[fields.size() - 2].size() - fields.back().size() - 2));
    if (name.empty() || *total == 0) return std::nullopt;
    out.push_back({std::string(name), "cuda", *total * kMiBytes, *free * kMiBytes, "nvidia-smi", "", 0});
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<std::vector<DetectedGpu>> parse_rocm_smi_csv(const std::string& text) {
  const auto lines = lines_of(text);
  if (lines.size() < 2) return std::nullopt;
  const auto header = split(lines[0], ',');
  auto column = [&](std::initializer_list<std::string_view> names) -> std::optional<size_t> {
    for (size_t i = 0; i < header.size(); ++i)
      for (auto n : names)
        if (trim(header[i]) == n) return i;
    return std::nullopt;
  };
  const auto total_at = column({"VRAM Total Memory (B)"}), used_at = column({"VRAM Total Used Memory (B)"});
  const auto name_at = column({"Card Series", "Card series"}), device_at = column({"device"});
  if (!total_at || !used_at) return std::nullopt;
  std::vector<DetectedGpu> out;
  for (size_t l = 1; l < lines.size(); ++l) {
    const auto row = split(lines[l], ',');
    if (row.size() != header.size()) return std::nullopt;  // rocm-smi's csv drops commas from its values
    const auto total = parse_count(row[*total_at]), used = parse_count(row[*used_at]);
    if (!total || !used || !plausible(*total) || *used > *total) return std::nullopt;
    std::string name(name_at ? trim(row[*name_at]) : std::string_view{});
    if (name.empty() || name == "N/A") name = "AMD GPU " + std::string(device_at ? trim(row[*device_at]) : "");
    out.push_back({name, "rocm", *total, *total - *used, "rocm-smi", "", 0});
  }
  return out;
}

std::optional<std::int64_t> parse_sysfs_bytes(const std::string& text) {
  const auto v = parse_count(text);
  if (!v || !plausible(*v)) return std::nullopt;
  return v;
}

std::int64_t apple_default_working_set(std::int64_t ram_bytes) {
  // the catalog's one rule for macOS's default Metal working set (libplanner catalog/gpu_lookup.cpp, data/gpus.yaml)
  return metal_default_working_set_mib(ram_bytes / kMiBytes) * kMiBytes;
}

std::optional<DetectedGpu> parse_apple_sysctl(const std::string& memsize, const std::string& wired_limit_mb,
                                              const std::string& brand) {
  const auto ram = parse_count(memsize);
  const auto chip = trim(brand);
  if (!ram || !plausible(*ram) || !chip.starts_with("Apple")) return std::nullopt;  // an Intel Mac has no Metal GPU pool
  const auto wired = trim(wired_limit_mb).empty() ? std::optional<std::int64_t>(0) : parse_count(wired_limit_mb);
  if (!wired || *wired > *ram / kMiBytes) return std::nullopt;
  DetectedGpu gpu{std::string(chip), "metal", 0, std::nullopt, "sysctl", "", *ram};
  if (*wired > 0) {
    gpu.total_bytes = *wired * kMiBytes;
    gpu.note = fmt::format("working set iogpu.wired_limit_mb = {}", *wired);
    gpu.wired_limit = true;
  } else {
    gpu.total_bytes = apple_default_working_set(*ram);
    gpu.note = fmt::format("working set: macOS's default for {} GiB of RAM", *ram >> 30);
  }
  return gpu;
}

namespace {

bool names_match(const GpuSpec& spec, const std::string& wanted) {
  if (wanted.empty()) return false;
  if (fold(spec.name) == wanted || fold(spec.id) == wanted) return true;
  if (std::any_of(spec.aliases.begin(), spec.aliases.end(), [&](const std::string& a) { return fold(a) == wanted; })) return true;
  // rocm-smi's "Radeon RX 7900 XTX" for the catalog's "AMD Radeon RX 7900 XTX": the vendor's prefix left out
  const std::string full = fold(spec.name);
  return wanted.size() >= 8 && full.size() > wanted.size() && full.ends_with(wanted);
}

// The catalog entry's memory as the detected figure states it: RAM for Apple (hw.memsize), else the driver's total.
std::int64_t comparable_bytes(const DetectedGpu& g) { return g.backend == "metal" ? g.host_ram_bytes : g.total_bytes; }

std::string size_spec(std::int64_t bytes) { return fmt::format("{}MiB", bytes / kMiBytes); }

bool is_size(const std::string& s) { return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.'); }

// The devices a request names, "2x24GB" counted twice, as resolve.cpp's device_specs expands them.
std::vector<std::string> device_specs(const Request& req) {
  std::vector<std::string> all = {req.gpu}, out;
  all.insert(all.end(), req.extra_gpus.begin(), req.extra_gpus.end());
  for (const auto& g : all) {
    const auto x = g.find('x');
    const bool counted = x != std::string::npos && x > 0 && x < 3 && std::all_of(g.begin(), g.begin() + static_cast<long>(x), ::isdigit);
    for (int i = 0; i < (counted ? std::stoi(g.substr(0, x)) : 1); ++i) out.push_back(counted ? g.substr(x + 1) : g);
  }
  return out;
}

// What the planner will take as the device's total: --free may not exceed it.
std::int64_t device_total(const Catalog& catalog, const std::string& spec) {
  if (is_size(spec)) return parse_size(spec, "--gpu");
  const GpuSpec& g = catalog.gpu(spec);
  return (g.unified() && g.working_set_mib > 0 ? g.working_set_mib : g.total_mib) * kMiBytes;
}

std::string nothing_found(const Detection& d, const std::vector<std::string>& skipped) {
  std::string tried;
  for (const auto& t : d.tried) tried += (tried.empty() ? "" : "; ") + t;
  for (const auto& s : skipped) tried += (tried.empty() ? "" : "; ") + s;
  return "found no GPU on this machine (tried " + (tried.empty() ? std::string("nothing: KVPLAN_DETECT_SOURCES is empty") : tried) +
         "); name the GPU instead: --gpu rtx4090 (see `kvplan gpus`) or its memory, --gpu 24GB";
}

// Integrated GPUs' carve-outs (under 1 GiB) are no device to plan for; Apple's unified pool always is.
std::vector<DetectedGpu> usable(const Detection& d, std::vector<std::string>& skipped) {
  std::vector<DetectedGpu> out;
  for (const auto& g : d.gpus) {
    if (g.backend != "metal" && g.total_bytes < kMinDetectedVram)
      skipped.push_back(fmt::format("{}: skipped {} ({} MiB of VRAM, an integrated GPU's carve-out)", g.source, g.name, g.total_bytes / kMiBytes));
    else
      out.push_back(g);
  }
  return out;
}

void set_devices(const Catalog& catalog, Request& req, const std::vector<DetectedGpu>& gpus) {
  std::vector<std::string> specs;
  req.gpu_detected.clear();
  for (const auto& g : gpus) {
    const bool main_gpu = specs.empty();
    const GpuSpec* spec = match_catalog_gpu(catalog, g);
    std::string label = g.name + " via " + g.source + (g.note.empty() ? "" : " (" + g.note + ")");
    if (spec && !g.wired_limit) {
      specs.push_back(spec->id);
    } else {
      // Not in the catalog (or an Apple working set raised by hand): a device of the detected size and backend.
      specs.push_back(size_spec(g.total_bytes));
      // The main device's backend is the plan's (a size alone reads as CUDA); --backend, when given, wins.
      if (main_gpu && !req.backend && g.backend != "cuda") req.backend = g.backend;
      if (!spec) label += "; not in kvplan's catalog, so planned by its memory alone, without a bandwidth figure";
    }
    req.gpu_detected.push_back(label);
  }
  req.gpu = specs.front();
  req.extra_gpus.assign(specs.begin() + 1, specs.end());
}

void set_free(const Catalog& catalog, Request& req, const std::vector<DetectedGpu>& gpus) {
  const auto specs = device_specs(req);
  if (specs.size() != gpus.size())
    throw InputError("--free", "auto", fmt::format("found {} GPU(s) on this machine, and --gpu names {}; give --free SIZE", gpus.size(), specs.size()));
  std::vector<Bytes> free;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (!gpus[i].free_bytes)
      throw InputError("--free", "auto", gpus[i].source + " gives no free-memory figure for " + gpus[i].name + "; give --free SIZE");
    // The detected total may exceed the catalog's by the matching tolerance; free cannot exceed the planned device.
    free.push_back(std::min<Bytes>(*gpus[i].free_bytes, device_total(catalog, specs[i])));
  }
  if (free.size() == 1) req.free = free.front();
  else req.free_per_gpu = free;
}

}  // namespace

const GpuSpec* match_catalog_gpu(const Catalog& catalog, const DetectedGpu& gpu) {
  const std::string wanted = fold(gpu.name);
  const double have = static_cast<double>(comparable_bytes(gpu));
  const double tolerance = gpu.backend == "metal" ? 0.01 : 0.08;  // hw.memsize is exactly the RAM sold
  const GpuSpec* best = nullptr;
  double best_gap = tolerance;
  for (const auto& spec : catalog.gpus) {
    if (spec.backend != gpu.backend || spec.total_mib <= 0 || !names_match(spec, wanted)) continue;
    const double total = static_cast<double>(spec.total_mib * kMiBytes);
    const double gap = std::abs(have - total) / total;
    if (gap <= best_gap) best = &spec, best_gap = gap;
  }
  return best;
}

void apply_detection(const Catalog& catalog, Request& req, const Detection& detection, bool gpu_auto, bool free_auto) {
  std::vector<std::string> skipped;
  const auto gpus = usable(detection, skipped);
  if (gpus.empty()) throw InputError(gpu_auto ? "--gpu" : "--free", "auto", nothing_found(detection, skipped));
  if (gpu_auto) set_devices(catalog, req, gpus);
  if (free_auto) set_free(catalog, req, gpus);
}

}  // namespace kvplan::cli
