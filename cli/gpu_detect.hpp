// The GPUs of the machine kvplan runs on (--gpu auto, --free auto). It lives outside libplanner because it reads
// the running machine: NVML, nvidia-smi, rocm-smi, amd-smi's sysfs files, sysctl. The parsers are pure functions of
// the tools' text, tested with recorded outputs (tests/unit/recorded/gpu/README.md); the readers run the tools
// with a time limit and treat a failure, a hang or unreadable output as "not found here".
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"
#include "kvplan/plan.hpp"

namespace kvplan::cli {

struct DetectedGpu {
  std::string name;                   // as the driver names it: "NVIDIA GeForce RTX 4090", "Radeon RX 7900 XT", "Apple M4 Max"
  std::string backend;                // cuda | rocm | metal
  std::int64_t total_bytes = 0;       // what the driver reports; Apple: the GPU working-set limit
  std::optional<std::int64_t> free_bytes;  // free now (unknown for Apple: sysctl gives no such figure)
  std::string source;                 // NVML | nvidia-smi | rocm-smi | sysfs | sysctl
  std::string note;                   // how total was found when it is not the driver's own figure
  std::int64_t host_ram_bytes = 0;    // Apple: hw.memsize, to match a catalog entry by its RAM
  bool wired_limit = false;           // Apple: iogpu.wired_limit_mb was set, so the catalog's working set does not hold
};

// ---- pure parsers (malformed input gives std::nullopt, never a guess) ----

// `nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits`: one line per GPU, MiB.
std::optional<std::vector<DetectedGpu>> parse_nvidia_smi(const std::string& text);

// `rocm-smi --showproductname --showmeminfo vram --csv`: a header line, then one line per card with
// "VRAM Total Memory (B)", "VRAM Total Used Memory (B)" and "Card Series" (or "Card series") among the columns.
std::optional<std::vector<DetectedGpu>> parse_rocm_smi_csv(const std::string& text);

// A sysfs figure such as mem_info_vram_total: bytes as one decimal number.
std::optional<std::int64_t> parse_sysfs_bytes(const std::string& text);

// Apple silicon from `sysctl -n hw.memsize`, `sysctl -n iogpu.wired_limit_mb` and `sysctl -n
// machdep.cpu.brand_string`. A wired limit of 0 or none (empty text) means macOS's default working set.
std::optional<DetectedGpu> parse_apple_sysctl(const std::string& memsize, const std::string& wired_limit_mb,
                                              const std::string& brand);

// macOS's default GPU working set for a Mac with `ram_bytes` of RAM (the measured ratios of data/gpus.yaml's
// Apple section); the one place kvplan states that rule.
std::int64_t apple_default_working_set(std::int64_t ram_bytes);

// Devices with less VRAM than this are an integrated GPU's carve-out (a Raphael iGPU reports 64 MiB): skipped.
inline constexpr std::int64_t kMinDetectedVram = std::int64_t{1} << 30;

// ---- readers of the running machine ----

struct DetectOptions {
  std::vector<std::string> sources = {"NVML", "nvidia-smi", "rocm-smi", "sysfs", "sysctl"};  // tried in this order
  int timeout_ms = 5000;                          // per tool: a hung tool must not hang kvplan
  std::string drm_root = "/sys/class/drm";        // sysfs: where card0, card1, … live
};

// KVPLAN_DETECT_SOURCES (comma-separated subset of the sources, e.g. "nvidia-smi,sysctl") and
// KVPLAN_DETECT_TIMEOUT_MS override the defaults; an unknown source name is an InputError.
DetectOptions detect_options_from_env();

struct Detection {
  std::vector<DetectedGpu> gpus;    // from the first source that found any
  std::vector<std::string> tried;   // "nvidia-smi: not on PATH", … for the message when nothing was found
};

Detection detect_gpus(const DetectOptions& options);

// Runs argv[0] (looked up on PATH) with stdout captured, stderr discarded, in its own process group; the group is
// killed when it runs past timeout_ms. std::nullopt: not found, a non-zero exit, a signal or the time limit
// (why: in `why`).
std::optional<std::string> run_tool(const std::vector<std::string>& argv, int timeout_ms, std::string* why = nullptr);

// A catalog GPU for a detected one: same driver name (the catalog's name or an alias, or the catalog name ending
// in the driver's, as "AMD Radeon RX 7900 XTX" ends in "Radeon RX 7900 XTX") and a memory total within 8 % (ECC
// and driver reservations move it a few percent; cards that share a name differ by far more: RTX 3060 8/12 GB).
// Apple: the chip name and hw.memsize against the entry's RAM. nullptr: none.
const GpuSpec* match_catalog_gpu(const Catalog& catalog, const DetectedGpu& gpu);

// Fills the request from a detection: gpu_auto replaces req.gpu/extra_gpus with the detected devices (catalog
// ids, or sizes with the detected backend), free_auto sets what is free now per device. Throws InputError when
// nothing was found, naming what was tried and what to pass instead.
void apply_detection(const Catalog& catalog, Request& req, const Detection& detection, bool gpu_auto, bool free_auto);

}  // namespace kvplan::cli
