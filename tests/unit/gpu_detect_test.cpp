// GPU detection adapter (cli/gpu_detect): parsers against recorded outputs of nvidia-smi, rocm-smi and sysctl
// (tests/unit/recorded/gpu/README.md names each source), catalog matching, the request it fills, and the runner's
// time limit. Byte figures are the recorded MiB times 2^20, worked out by hand in the comments.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "gpu_detect.hpp"
#include "kvplan/error.hpp"
#include "kvplan/kvplan.hpp"

using namespace kvplan::cli;
using kvplan::GpuSpec;

namespace {
std::string recorded(const std::string& name) {
  std::ifstream in(std::string(KVPLAN_SOURCE_DIR) + "/tests/unit/recorded/gpu/" + name, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
constexpr std::int64_t kMiB = std::int64_t{1} << 20;
const kvplan::Catalog& catalog() { return kvplan::builtin_catalog(); }
Detection found(std::vector<DetectedGpu> gpus) { return {std::move(gpus), {}}; }
}  // namespace

TEST_CASE("nvidia-smi: recorded cards give name, total and free in bytes", "[gpu_detect]") {
  struct Case {
    const char* file;
    const char* name;
    std::int64_t total, free;
  };
  for (const Case& c : {Case{"nvidia_smi_rtx4080super_595.71.05.txt", "NVIDIA GeForce RTX 4080 SUPER", 17171480576, 16093544448},  // 16376, 15348 MiB
                        Case{"nvidia_smi_h100_80gb_hbm3_590.48.01.txt", "NVIDIA H100 80GB HBM3", 85520809984, 85019590656},       // 81559, 81081 MiB
                        Case{"nvidia_smi_l40s_595.80.txt", "NVIDIA L40S", 48305799168, 47668264960}}) {                              // 46068, 45460 MiB
    INFO(c.file);
    const auto gpus = parse_nvidia_smi(recorded(c.file));
    REQUIRE(gpus);
    REQUIRE(gpus->size() == 1);
    CHECK(gpus->front().name == c.name);
    CHECK(gpus->front().total_bytes == c.total);
    CHECK(gpus->front().free_bytes == c.free);
    CHECK(gpus->front().backend == "cuda");
    CHECK(gpus->front().source == "nvidia-smi");
  }
}

TEST_CASE("nvidia-smi: one line per GPU; other queries and unreadable figures are refused", "[gpu_detect]") {
  const auto two = parse_nvidia_smi(recorded("nvidia_smi_two_gpus_rtx4080super_rtx2080super.txt"));
  REQUIRE(two);
  REQUIRE(two->size() == 2);
  CHECK(two->at(1).name == "NVIDIA GeForce RTX 2080 SUPER");
  CHECK(two->at(1).total_bytes == 8589934592);  // 8192 MiB
  CHECK(two->at(1).free_bytes == 7938768896);   // 7571 MiB
  // A real two-column output (name, memory.free) would read as a total of 2131 MiB if taken loosely.
  CHECK_FALSE(parse_nvidia_smi(recorded("nvidia_smi_name_free_only_clic89.txt")));
  CHECK_FALSE(parse_nvidia_smi(""));
  CHECK_FALSE(parse_nvidia_smi("NVIDIA GB10, [N/A], [N/A]\n"));               // memory the driver does not report
  CHECK_FALSE(parse_nvidia_smi("NVIDIA GeForce RTX 4090, 24564, 30000\n"));   // free above total
  CHECK_FALSE(parse_nvidia_smi("NVIDIA GeForce RTX 4090, 24564 MiB, 1 MiB\n"));  // units: not the query kvplan runs
  CHECK_FALSE(parse_nvidia_smi(", 24564, 100\n"));                             // no name
}

TEST_CASE("rocm-smi csv: recorded cards give VRAM total and total - used as free", "[gpu_detect]") {
  const auto one = parse_rocm_smi_csv(recorded("rocm_smi_csv_rx7900xt.txt"));
  REQUIRE(one);
  REQUIRE(one->size() == 1);
  CHECK(one->front().name == "Radeon RX 7900 XT");
  CHECK(one->front().total_bytes == 21458059264);
  CHECK(one->front().free_bytes == 21430202368);  // 21458059264 - 27856896
  CHECK(one->front().backend == "rocm");
  const auto two = parse_rocm_smi_csv(recorded("rocm_smi_csv_rx6800_raphael.txt"));
  REQUIRE(two);
  REQUIRE(two->size() == 2);
  CHECK(two->at(0).name == "Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]");
  CHECK(two->at(0).total_bytes == 17163091968);
  CHECK(two->at(1).total_bytes == 67108864);  // the iGPU's 64 MiB carve-out
  CHECK_FALSE(parse_rocm_smi_csv("device,GPU use (%)\ncard0,0\n"));  // no VRAM columns
  CHECK_FALSE(parse_rocm_smi_csv("device,VRAM Total Memory (B),VRAM Total Used Memory (B)\ncard0,N/A,N/A\n"));
  CHECK_FALSE(parse_rocm_smi_csv("device,VRAM Total Memory (B),VRAM Total Used Memory (B)\ncard0,100,200\n"));
}

TEST_CASE("Apple: the default working-set rule reproduces the catalog's measured limits", "[gpu_detect]") {
  // data/gpus.yaml's measured recommendedMaxWorkingSetSize (llama.cpp --list-devices on real Macs) in MiB.
  CHECK(apple_default_working_set(std::int64_t{16} << 30) == 12124 * kMiB);   // m4-16gb
  CHECK(apple_default_working_set(std::int64_t{24} << 30) == 18186 * kMiB);   // m4pro-24gb
  CHECK(apple_default_working_set(std::int64_t{32} << 30) == 25559 * kMiB);   // m1max-32gb
  CHECK(apple_default_working_set(std::int64_t{48} << 30) == 38338 * kMiB);   // m4pro-48gb
  CHECK(apple_default_working_set(std::int64_t{128} << 30) == 110100 * kMiB);  // m4max-128gb, m3max-128gb
}

TEST_CASE("Apple sysctl: RAM, chip and the wired limit; an Intel Mac is no Apple GPU", "[gpu_detect]") {
  const std::string m4max_ram = [] {
    std::ifstream in(std::string(KVPLAN_SOURCE_DIR) + "/tests/unit/recorded/sysctl_hw_memsize_m4max_128g.txt");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  const auto stock = parse_apple_sysctl(m4max_ram, recorded("sysctl_n_wired_limit_default.txt"), recorded("sysctl_n_brand_m4max.txt"));
  REQUIRE(stock);
  CHECK(stock->name == "Apple M4 Max");
  CHECK(stock->total_bytes == 110100 * kMiB);
  CHECK_FALSE(stock->wired_limit);
  CHECK_FALSE(stock->free_bytes);
  const GpuSpec* spec = match_catalog_gpu(catalog(), *stock);
  REQUIRE(spec);
  CHECK(spec->id == "m4max-128gb");
  // The raised limit antirez/ds4 PR #893 measured (114688 MiB = 112.00 GiB) replaces the default.
  const auto raised = parse_apple_sysctl(m4max_ram, recorded("sysctl_n_wired_limit_114688.txt"), recorded("sysctl_n_brand_m4max.txt"));
  REQUIRE(raised);
  CHECK(raised->total_bytes == 114688 * kMiB);
  CHECK(raised->wired_limit);
  // Recordings of two machines combined (each a real output): an M1 Pro with 32 GiB, the catalog's m1pro-32gb.
  const auto m1pro = parse_apple_sysctl(recorded("sysctl_n_memsize_m2pro_32g.txt"), "", recorded("sysctl_n_brand_m1pro.txt"));
  REQUIRE(m1pro);
  CHECK(m1pro->total_bytes == 25559 * kMiB);
  REQUIRE(match_catalog_gpu(catalog(), *m1pro));
  CHECK(match_catalog_gpu(catalog(), *m1pro)->id == "m1pro-32gb");
  CHECK_FALSE(parse_apple_sysctl("17179869184\n", "0\n", "Intel(R) Core(TM) i7-9750H CPU @ 2.60GHz\n"));
  CHECK_FALSE(parse_apple_sysctl("sysctl: unknown oid 'hw.memsize'", "0", "Apple M4 Max"));
  CHECK_FALSE(parse_apple_sysctl(m4max_ram, "999999999", "Apple M4 Max"));  // a limit above the RAM
}

TEST_CASE("catalog match: driver name and memory; cards sharing a name differ by memory", "[gpu_detect]") {
  auto match = [](const std::string& name, std::int64_t mib, const std::string& backend = "cuda") {
    const GpuSpec* g = match_catalog_gpu(catalog(), DetectedGpu{name, backend, mib * kMiB, std::nullopt, "test", "", 0});
    return g ? g->id : std::string("none");
  };
  CHECK(match("NVIDIA GeForce RTX 4080 SUPER", 16376) == "rtx4080super");
  CHECK(match("NVIDIA H100 80GB HBM3", 81559) == "h100-sxm");
  CHECK(match("NVIDIA L40S", 46068) == "l40s");
  CHECK(match("NVIDIA GeForce RTX 3060", 12288) == "rtx3060-12gb");
  CHECK(match("NVIDIA GeForce RTX 3060", 8192) == "rtx3060-8gb");  // the 8 GB card shares the name, not the entry
  CHECK(match("NVIDIA L40S", 46068, "rocm") == "none");
  CHECK(match("Radeon RX 7900 XTX", 24560, "rocm") == "rx7900xtx");  // rocm-smi leaves out "AMD"
  CHECK(match("Radeon RX 7900 XT", 20464, "rocm") == "rx7900xt");    // the XT is not the XTX
  CHECK(match("Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]", 16368, "rocm") == "none");  // RX 6000 cards: not in the catalog
}

TEST_CASE("apply_detection: catalog ids, or sizes with the detected backend, each device labelled", "[gpu_detect]") {
  kvplan::Request req;
  apply_detection(catalog(), req, found(*parse_nvidia_smi(recorded("nvidia_smi_two_gpus_rtx4080super_rtx2080super.txt"))), true, true);
  CHECK(req.gpu == "rtx4080super");
  REQUIRE(req.extra_gpus.size() == 1);
  CHECK(req.extra_gpus[0] == "8192MiB");  // the RTX 2080 SUPER is not in the catalog: a CUDA device of its size
  CHECK_FALSE(req.backend);                // CUDA, the main card's own backend: nothing to override
  REQUIRE(req.gpu_detected.size() == 2);
  CHECK(req.gpu_detected[0] == "NVIDIA GeForce RTX 4080 SUPER via nvidia-smi");
  CHECK_FALSE(req.free);
  CHECK(req.free_per_gpu == std::vector<kvplan::Bytes>{16093544448, 7938768896});

  kvplan::Request amd;
  apply_detection(catalog(), amd, found(*parse_rocm_smi_csv(recorded("rocm_smi_csv_rx6800_raphael.txt"))), true, true);
  CHECK(amd.gpu == "16368MiB");  // 17163091968 B; the Raphael iGPU's 64 MiB is skipped
  CHECK(amd.extra_gpus.empty());
  CHECK(amd.backend == std::optional<std::string>("rocm"));
  CHECK(amd.free == 17163091968 - 692142080);
  REQUIRE(amd.gpu_detected.size() == 1);
  CHECK(amd.gpu_detected[0].find("not in kvplan's catalog") != std::string::npos);
}

TEST_CASE("apply_detection: nothing found, or no free figure, is an InputError saying what to pass", "[gpu_detect]") {
  kvplan::Request req;
  Detection none{{}, {"NVML: libnvidia-ml.so.1 not loaded", "nvidia-smi: not on PATH"}};
  try {
    apply_detection(catalog(), req, none, true, false);
    FAIL("no error");
  } catch (const kvplan::InputError& e) {
    const std::string what = e.what();
    CHECK(e.field() == "--gpu");
    CHECK(what.find("nvidia-smi: not on PATH") != std::string::npos);
    CHECK(what.find("--gpu 24GB") != std::string::npos);
    CHECK(what.find("--gpu rtx4090") != std::string::npos);
  }
  // Only an iGPU carve-out: nothing to plan for, and the message says why.
  auto igpu = *parse_rocm_smi_csv(recorded("rocm_smi_csv_rx6800_raphael.txt"));
  igpu.erase(igpu.begin());
  CHECK_THROWS_WITH(apply_detection(catalog(), req, found(igpu), true, false), Catch::Contains("Raphael (64 MiB of VRAM"));
  // Apple's sysctl has no free figure: --free auto says so rather than guess.
  const auto mac = parse_apple_sysctl("137438953472", "0", "Apple M4 Max");
  CHECK_THROWS_WITH(apply_detection(catalog(), req, found({*mac}), true, true), Catch::Contains("no free-memory figure"));
  // --free auto with a named --gpu: the device count must agree.
  kvplan::Request named;
  named.gpu = "2xrtx4080super";
  CHECK_THROWS_WITH(apply_detection(catalog(), named, found(*parse_nvidia_smi(recorded("nvidia_smi_rtx4080super_595.71.05.txt"))), false, true),
                    Catch::Contains("found 1 GPU(s)"));
}

TEST_CASE("detected devices plan: labels reach the pools and --free auto the capacities", "[gpu_detect]") {
  kvplan::Request req;
  req.model = "qwen3-8b";
  apply_detection(catalog(), req, found(*parse_nvidia_smi(recorded("nvidia_smi_rtx4080super_595.71.05.txt"))), true, true);
  const kvplan::Plan p = kvplan::plan(catalog(), req);
  CHECK(p.pools.front().detected == "NVIDIA GeForce RTX 4080 SUPER via nvidia-smi");
  CHECK(p.pools.front().capacity == 16093544448);
  CHECK(p.pools.front().device == "NVIDIA GeForce RTX 4080 SUPER");
}

TEST_CASE("run_tool: output, a missing tool, a failure, and a hang cut at the time limit", "[gpu_detect]") {
  std::string why;
  CHECK(run_tool({"sh", "-c", "echo 'NVIDIA L40S, 46068, 45460'"}, 5000) == std::optional<std::string>("NVIDIA L40S, 46068, 45460\n"));
  CHECK_FALSE(run_tool({"kvplan-no-such-tool-xyz"}, 5000, &why));
  CHECK(why == "not on PATH");
  CHECK_FALSE(run_tool({"sh", "-c", "echo partial; exit 3"}, 5000, &why));
  CHECK(why == "exit status 3");
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(run_tool({"sh", "-c", "sleep 30; echo late"}, 200, &why));
  CHECK(why == "no answer within 200 ms");
  // Output closed, the process still running: the wait for its exit has the same limit.
  CHECK_FALSE(run_tool({"sh", "-c", "echo early; exec >&-; sleep 30"}, 200, &why));
  CHECK(why == "no answer within 200 ms");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("sysfs: amdgpu cards with mem_info_vram_total, others and connectors ignored", "[gpu_detect]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("kvplan_drm_" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto put = [&](const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  };
  // The rocm-smi recording's figures: rocm-smi reads these same files.
  put("card1/device/vendor", "0x1002\n");
  put("card1/device/mem_info_vram_total", "21458059264\n");
  put("card1/device/mem_info_vram_used", "27856896\n");
  put("card1-DP-1/status", "connected\n");
  put("card0/device/vendor", "0x10de\n");  // an NVIDIA card: not read here
  put("card0/device/mem_info_vram_total", "1\n");
  DetectOptions o;
  o.sources = {"sysfs"};
  o.drm_root = root.string();
  const Detection d = detect_gpus(o);
  REQUIRE(d.gpus.size() == 1);
  CHECK(d.gpus[0].total_bytes == 21458059264);
  CHECK(d.gpus[0].free_bytes == 21430202368);
  CHECK(d.gpus[0].name == "AMD GPU card1");
  CHECK(d.gpus[0].source == "sysfs");
  fs::remove_all(root);
  const Detection none = detect_gpus(o);
  REQUIRE(none.tried.size() == 1);
  CHECK(none.tried[0].starts_with("sysfs: no amdgpu card"));
}
