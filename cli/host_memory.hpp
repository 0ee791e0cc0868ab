// Host RAM of the machine kvplan runs on, for plans that keep layers or MoE experts in system memory.
// It lives in the CLI because it reads the running machine; libplanner stays a pure function of its inputs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kvplan::cli {

struct HostMemory {
  std::int64_t total_bytes = 0;      // physical RAM
  std::int64_t available_bytes = 0;  // what the OS says is available now (0 if unknown)
  std::string source;                // e.g. "/proc/meminfo MemTotal" or "sysctl hw.memsize"
};

// Pure parsers, tested with recorded outputs of the real sources. Malformed or implausible input (a missing
// MemTotal, a non-numeric or unitless value, 0, a negative figure, more than 64 TiB) gives std::nullopt:
// a wrong RAM figure would pass or fail offloaded plans silently, and "unknown" lets the caller say so.
std::optional<HostMemory> parse_proc_meminfo(const std::string& text);    // Linux /proc/meminfo (kB units)
std::optional<HostMemory> parse_sysctl_memsize(const std::string& text);  // macOS `sysctl -n hw.memsize` (bytes)

// A cgroup memory limit file: v2 memory.max ("max" or bytes) or v1 memory.limit_in_bytes (bytes; "no limit"
// is LONG_MAX rounded down to a page). std::nullopt means no usable limit: "max", v1's unlimited, malformed.
std::optional<std::int64_t> parse_cgroup_limit(const std::string& text);

// The process's own cgroups from /proc/self/cgroup: the v2 path ("0::/user.slice/...") and the v1 memory
// controller's ("4:memory:/docker/..."); empty where absent or where the path leaves the namespace ("/..").
struct CgroupPaths {
  std::string v2;
  std::string v1_memory;
};
CgroupPaths parse_proc_self_cgroup(const std::string& text);

// Reads the running machine (Linux: /proc/meminfo, lowered to the tightest cgroup limit on the way from the
// process's cgroup to the root, named in source; macOS: sysctlbyname("hw.memsize")). std::nullopt when
// nothing can be read. Never throws, never hangs: it reads a few small procfs/sysfs files, no commands.
std::optional<HostMemory> detect_host_memory();

}  // namespace kvplan::cli
