// Host RAM detection: pure parsers of the OS's own reports, and one reader of the running machine.
#include "host_memory.hpp"
#include "text.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <limits>
#include <string_view>

#ifdef __APPLE__
#include <sys/sysctl.h>
#include <sys/types.h>
#endif

namespace kvplan::cli {
namespace {

// No machine kvplan plans for has more; a bigger figure is a misread, not a server.
constexpr std::int64_t kMaxPlausibleBytes = std::int64_t{64} << 40;
constexpr std::int64_t kMaxPlausibleKiB = kMaxPlausibleBytes / 1024;

std::optional<std::int64_t> plausible_bytes(std::optional<std::int64_t> b) {
  if (!b || *b <= 0 || *b > kMaxPlausibleBytes) return std::nullopt;
  return b;
}

// "      65768704 kB": the unit is required, since a bare number's scale would be a guess. The range check
// comes here, before anyone multiplies by 1024, so kB to bytes cannot overflow.
std::optional<std::int64_t> meminfo_kib(std::string_view value) {
  value = trim(value);
  if (value.size() < 2 || value.substr(value.size() - 2) != "kB") return std::nullopt;
  const auto kib = parse_count(trim(value.substr(0, value.size() - 2)));
  if (!kib || *kib > kMaxPlausibleKiB) return std::nullopt;
  return kib;
}

// Calls f(line) for each line; string_view slices, so a line of any length costs nothing extra.
template <class F>
void for_each_line(std::string_view text, F f) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    f(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

// Small procfs/sysfs files only; the cap keeps a surprising file from being read whole. Read in chunks: procfs
// reports size 0, and a buffer of the cap's size would be zeroed on every call.
// procfs and cgroup files: a megabyte is far past any of them.
std::optional<std::string> read_small_file(const std::string& path) { return cli::read_small_file(path, 1 << 20); }

// Outside the cgroup namespace the kernel writes "/../.."; such a path would lead out of /sys/fs/cgroup.
bool leaves_root(std::string_view path) {
  return path.ends_with("/..") || path.find("/../") != std::string_view::npos;
}

// v1 hierarchies can carry several controllers ("cpu,cpuacct"); a substring test would match "memoryx".
bool lists_controller(std::string_view list, std::string_view name) {
  for (;;) {
    const auto comma = list.find(',');
    if (list.substr(0, comma) == name) return true;
    if (comma == std::string_view::npos) return false;
    list.remove_prefix(comma + 1);
  }
}

struct Limit {
  std::int64_t bytes;
  std::string file;
};

// A parent's limit binds its children, so the effective limit is the lowest from the process's cgroup up to
// the mount's root. The root's file is the one a container sees as its own (its cgroup is mounted there);
// a path the mount lacks (the host's view of a container's cgroup) is skipped on the way up.
std::optional<Limit> lowest_limit(const std::string& mount, std::string path, const std::string& file) {
  std::optional<Limit> best;
  for (;;) {
    const std::string candidate = mount + (path == "/" ? "" : path) + "/" + file;
    const auto text = read_small_file(candidate);
    const auto limit = text ? parse_cgroup_limit(*text) : std::nullopt;
    if (limit && (!best || *limit < best->bytes)) best = Limit{*limit, candidate};
    if (path == "/") return best;
    const auto slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

std::optional<Limit> cgroup_limit() {
  const auto self = read_small_file("/proc/self/cgroup");
  const CgroupPaths paths = parse_proc_self_cgroup(self ? *self : "");
  // Without /proc/self/cgroup the roots are still worth a look: inside a container they are its own cgroup.
  auto v2 = lowest_limit("/sys/fs/cgroup", paths.v2.empty() ? "/" : paths.v2, "memory.max");
  auto v1 = lowest_limit("/sys/fs/cgroup/memory", paths.v1_memory.empty() ? "/" : paths.v1_memory, "memory.limit_in_bytes");
  if (v2 && v1) return v1->bytes < v2->bytes ? v1 : v2;
  return v2 ? v2 : v1;
}

std::optional<HostMemory> detect_linux() {
  const auto text = read_small_file("/proc/meminfo");
  if (!text) return std::nullopt;
  auto mem = parse_proc_meminfo(*text);
  if (!mem) return std::nullopt;
  if (const auto limit = cgroup_limit(); limit && limit->bytes < mem->total_bytes) {
    mem->total_bytes = limit->bytes;
    // MemAvailable is machine-wide; within the cgroup no more than its limit can be available.
    mem->available_bytes = std::min(mem->available_bytes, limit->bytes);
    mem->source += ", lowered to the cgroup limit in " + limit->file;
  }
  return mem;
}

#ifdef __APPLE__
std::optional<HostMemory> detect_apple() {
  std::uint64_t bytes = 0;
  std::size_t len = sizeof bytes;
  if (sysctlbyname("hw.memsize", &bytes, &len, nullptr, 0) != 0 || len != sizeof bytes) return std::nullopt;
  if (bytes > static_cast<std::uint64_t>(kMaxPlausibleBytes)) return std::nullopt;
  const auto total = plausible_bytes(static_cast<std::int64_t>(bytes));
  if (!total) return std::nullopt;
  // hw.memsize has no "available" counterpart; 0 says unknown rather than guessing from vm_stat.
  return HostMemory{*total, 0, "sysctl hw.memsize"};
}
#endif

}  // namespace

std::optional<HostMemory> parse_proc_meminfo(const std::string& text) {
  std::optional<std::int64_t> total_kib, available_kib;
  bool bad = false, total_seen = false, available_seen = false;
  for_each_line(text, [&](std::string_view line) {
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) return;
    const auto key = line.substr(0, colon);
    const auto read = [&](bool& seen, std::optional<std::int64_t>& kib) {
      // A repeated field is ambiguous, a malformed one unreadable: either makes the whole reading untrusted.
      bad |= seen;
      seen = true;
      kib = meminfo_kib(line.substr(colon + 1));
      bad |= !kib;
    };
    if (key == "MemTotal") read(total_seen, total_kib);
    else if (key == "MemAvailable") read(available_seen, available_kib);
  });
  if (bad || !total_kib) return std::nullopt;
  const auto total = plausible_bytes(*total_kib * 1024);  // a MemTotal of 0 is a misread; MemAvailable 0 is not
  if (!total) return std::nullopt;
  // Kernels before 3.14 have no MemAvailable; one above MemTotal is nonsense. Both read as unknown (0).
  const std::int64_t available = available_kib ? *available_kib * 1024 : 0;
  return HostMemory{*total, available <= *total ? available : 0, "/proc/meminfo MemTotal"};
}

std::optional<HostMemory> parse_sysctl_memsize(const std::string& text) {
  const auto total = plausible_bytes(parse_count(trim(text)));
  if (!total) return std::nullopt;
  return HostMemory{*total, 0, "sysctl hw.memsize"};
}

std::optional<std::int64_t> parse_cgroup_limit(const std::string& text) {
  // Above the plausible range is v1's spelling of "no limit" (9223372036854771712), not a real cap.
  return plausible_bytes(parse_count(trim(text)));
}

CgroupPaths parse_proc_self_cgroup(const std::string& text) {
  CgroupPaths out;
  for_each_line(text, [&](std::string_view line) {
    // hierarchy-ID:controller-list:path; the path itself may contain ':'.
    const auto c1 = line.find(':');
    const auto c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) return;
    const auto id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const auto path = trim(line.substr(c2 + 1));
    if (!path.starts_with('/') || leaves_root(path)) return;
    if (id == "0" && controllers.empty()) out.v2 = std::string(path);
    else if (lists_controller(controllers, "memory")) out.v1_memory = std::string(path);
  });
  return out;
}

std::optional<HostMemory> detect_host_memory() {
  // Only bad_alloc can escape the code above (the parsers use no throwing calls); a RAM check must not abort a plan.
  try {
#ifdef __APPLE__
    return detect_apple();
#else
    return detect_linux();
#endif
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace kvplan::cli
