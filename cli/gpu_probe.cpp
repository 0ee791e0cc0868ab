// The readers of gpu_detect.hpp: tools run with a time limit, NVML through dlopen, amdgpu's sysfs files.
// Everything here is "found or not"; the parsing is in gpu_detect.cpp, tested with recorded outputs.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "gpu_detect.hpp"
#include "text.hpp"
#include "kvplan/error.hpp"

extern char** environ;

namespace kvplan::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Reads the child's stdout until EOF or the deadline; false on the deadline.
bool read_until(int fd, Clock::time_point deadline, std::string& out) {
  constexpr std::size_t kCap = 1 << 20;  // no tool's answer is longer; more is not an answer
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    if (out.size() < kCap) out.append(buf, static_cast<std::size_t>(n));
  }
}

// posix_spawnp with stdout to a pipe, stdin and stderr to /dev/null, in a new process group.
pid_t spawn(const std::vector<std::string>& argv, int out_fd, int in_fd, int null_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, null_fd, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, null_fd, 2);
  posix_spawn_file_actions_addclose(&actions, in_fd);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return pid;
}

// sysfs attributes are a page at most.
std::optional<std::string> read_small_file(const std::filesystem::path& path) { return cli::read_small_file(path.string(), 4096); }

// ---- NVML: the few prototypes kvplan calls (nvml.h, NVML API reference), declared here rather than vendored.
using nvmlReturn_t = int;  // NVML_SUCCESS = 0
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {  // nvmlMemory_v1: bytes
  unsigned long long total, free, used;
};

std::optional<std::vector<DetectedGpu>> probe_nvml(std::string& why) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    why = "libnvidia-ml.so.1 not loaded";
    return std::nullopt;
  }
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown"));
  auto count_of = reinterpret_cast<nvmlReturn_t (*)(unsigned*)>(sym("nvmlDeviceGetCount_v2"));
  auto handle_of = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto name_of = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(sym("nvmlDeviceGetName"));
  auto memory_of = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(sym("nvmlDeviceGetMemoryInfo"));
  std::vector<DetectedGpu> out;
  unsigned count = 0;
  if (!init || !shutdown || !count_of || !handle_of || !name_of || !memory_of) why = "libnvidia-ml.so.1 lacks a function";
  else if (init() != 0) why = "nvmlInit_v2 failed";
  else {
    if (count_of(&count) != 0) why = "nvmlDeviceGetCount_v2 failed";
    for (unsigned i = 0; why.empty() && i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      char name[96] = {};
      nvmlMemory_t mem{};
      if (handle_of(i, &dev) != 0 || name_of(dev, name, sizeof name) != 0 || memory_of(dev, &mem) != 0) why = "a device query failed";
      else out.push_back({name, "cuda", static_cast<std::int64_t>(mem.total), static_cast<std::int64_t>(mem.free), "NVML", "", 0});
    }
    shutdown();
  }
  dlclose(lib);
  if (!why.empty()) return std::nullopt;
  return out;
}

std::optional<std::vector<DetectedGpu>> probe_tool(const std::vector<std::string>& argv, int timeout_ms, std::string& why,
                                                   std::optional<std::vector<DetectedGpu>> (*parse)(const std::string&)) {
  const auto text = run_tool(argv, timeout_ms, &why);
  if (!text) return std::nullopt;
  auto gpus = parse(*text);
  if (!gpus) why = "output kvplan cannot read";
  return gpus;
}

// amdgpu's own files: card<N>/device/{vendor, mem_info_vram_total, mem_info_vram_used, product_name}.
std::optional<std::vector<DetectedGpu>> probe_sysfs(const std::string& root, std::string& why) {
  std::vector<DetectedGpu> out;
  std::error_code ec;
  std::vector<std::filesystem::path> cards;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 4 && n.starts_with("card") && n.find_first_not_of("0123456789", 4) == std::string::npos) cards.push_back(e.path());
  }
  std::sort(cards.begin(), cards.end(), [](const auto& a, const auto& b) {
    return std::stoi(a.filename().string().substr(4)) < std::stoi(b.filename().string().substr(4));
  });
  for (const auto& card : cards) {
    const auto vendor = read_small_file(card / "device/vendor");
    if (!vendor || vendor->rfind("0x1002", 0) != 0) continue;  // AMD's PCI vendor id
    const auto total = parse_sysfs_bytes(read_small_file(card / "device/mem_info_vram_total").value_or(""));
    const auto used = parse_sysfs_bytes(read_small_file(card / "device/mem_info_vram_used").value_or(""));
    if (!total) continue;
    std::string name(read_small_file(card / "device/product_name").value_or(""));
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    if (name.empty()) name = "AMD GPU " + card.filename().string();
    const std::int64_t free = used && *used <= *total ? *total - *used : *total;
    out.push_back({name, "rocm", *total, used ? std::optional<std::int64_t>(free) : std::nullopt, "sysfs", "", 0});
  }
  if (out.empty()) why = "no amdgpu card with mem_info_vram_total under " + root;
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<std::vector<DetectedGpu>> probe_sysctl(int timeout_ms, std::string& why) {
  const auto memsize = run_tool({"sysctl", "-n", "hw.memsize"}, timeout_ms, &why);
  if (!memsize) return std::nullopt;
  const auto brand = run_tool({"sysctl", "-n", "machdep.cpu.brand_string"}, timeout_ms, &why);
  if (!brand) return std::nullopt;
  std::string ignored;  // absent on older macOS: the default working set
  const auto wired = run_tool({"sysctl", "-n", "iogpu.wired_limit_mb"}, timeout_ms, &ignored);
  const auto gpu = parse_apple_sysctl(*memsize, wired.value_or(""), *brand);
  if (!gpu) {
    why = "not Apple silicon, or output kvplan cannot read";
    return std::nullopt;
  }
  return std::vector<DetectedGpu>{*gpu};
}

}  // namespace

std::optional<std::string> run_tool(const std::vector<std::string>& argv, int timeout_ms, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<std::string> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  int fds[2];
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0 || pipe2(fds, O_CLOEXEC) != 0) {
    if (null_fd >= 0) close(null_fd);
    return fail("cannot start tools");
  }
  const pid_t pid = spawn(argv, fds[1], fds[0], null_fd);
  close(fds[1]);
  close(null_fd);
  if (pid < 0) {
    close(fds[0]);
    return fail("not on PATH");
  }
  std::string out;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  bool done = read_until(fds[0], deadline, out);
  close(fds[0]);
  int status = 0;
  // A tool that closed its output may still not exit: its exit is awaited within the same limit.
  while (done) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (Clock::now() >= deadline) done = false;
    else usleep(5000);
  }
  if (!done) {
    kill(-pid, SIGKILL);  // the whole group: a script's own children too
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return fail(fmt::format("no answer within {} ms", timeout_ms));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status)) : "killed by a signal");
  return out;
}

DetectOptions detect_options_from_env() {
  DetectOptions o;
  const std::vector<std::string> all = o.sources;
  if (const char* env = std::getenv("KVPLAN_DETECT_SOURCES"); env && *env) {
    o.sources.clear();
    std::stringstream ss(env);
    for (std::string s; std::getline(ss, s, ',');) {
      if (std::find(all.begin(), all.end(), s) == all.end())
        throw InputError("KVPLAN_DETECT_SOURCES", s, "is not a detection source", all, closest_match(s, all));
      o.sources.push_back(s);
    }
  }
  if (const char* env = std::getenv("KVPLAN_DETECT_TIMEOUT_MS"); env && *env) {
    const std::string v(env);
    if (v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1)
      throw InputError("KVPLAN_DETECT_TIMEOUT_MS", v, "must be milliseconds, 1 to 999999");
    o.timeout_ms = std::stoi(v);
  }
  return o;
}

Detection detect_gpus(const DetectOptions& o) {
  Detection d;
  const std::vector<std::string> smi = {"nvidia-smi", "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"};
  const std::vector<std::string> rocm = {"rocm-smi", "--showproductname", "--showmeminfo", "vram", "--csv"};
  for (const auto& source : o.sources) {
    std::string why;
    std::optional<std::vector<DetectedGpu>> found;
    try {
      if (source == "NVML") found = probe_nvml(why);
      else if (source == "nvidia-smi") found = probe_tool(smi, o.timeout_ms, why, parse_nvidia_smi);
      else if (source == "rocm-smi") found = probe_tool(rocm, o.timeout_ms, why, parse_rocm_smi_csv);
      else if (source == "sysfs") found = probe_sysfs(o.drm_root, why);
      else if (source == "sysctl") found = probe_sysctl(o.timeout_ms, why);
    } catch (const std::exception& e) {  // a detection problem is "not found", never a crash
      why = e.what();
    }
    if (found && found->empty()) why = "no GPU listed";
    if (found && !found->empty()) {
      d.gpus = std::move(*found);
      return d;
    }
    d.tried.push_back(source + ": " + why);
  }
  return d;
}

}  // namespace kvplan::cli
