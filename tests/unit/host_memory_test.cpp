// Host RAM adapter (cli/host_memory): parsers against recorded /proc/meminfo, sysctl and cgroup outputs.
// Expected byte figures are the recorded kB figures times 1024, worked out by hand in the comments.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "host_memory.hpp"

using kvplan::cli::parse_cgroup_limit;
using kvplan::cli::parse_proc_meminfo;
using kvplan::cli::parse_proc_self_cgroup;
using kvplan::cli::parse_sysctl_memsize;

namespace {
std::string recorded(const char* name) {
  std::ifstream in(std::string(KVPLAN_SOURCE_DIR) + "/tests/unit/recorded/" + name, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
constexpr std::int64_t kTiB = std::int64_t{1} << 40;
}  // namespace

TEST_CASE("meminfo: recorded machines give MemTotal and MemAvailable in bytes") {
  struct Case {
    const char* file;
    std::int64_t total, available;
  };
  for (const Case& c : {
           Case{"meminfo_desktop_64g_kernel6.8.txt", 67347152896, 56443228160},  // 65768704 kB, 55120340 kB
           Case{"meminfo_laptop_16g_kernel6.10.txt", 16031547392, 10059173888},  // 15655808 kB, 9823412 kB
           Case{"meminfo_wsl2_16g_kernel5.15.txt", 16710053888, 15837831168},    // 16318412 kB, 15466632 kB
           Case{"meminfo_vm_24g_kernel6.18.txt", 25275973632, 24855523328},      // 24683568 kB, 24272972 kB
       }) {
    INFO(c.file);
    const auto m = parse_proc_meminfo(recorded(c.file));
    REQUIRE(m);
    CHECK(m->total_bytes == c.total);
    CHECK(m->available_bytes == c.available);
    CHECK(m->source == "/proc/meminfo MemTotal");
  }
}

TEST_CASE("meminfo: a kernel before 3.14 has no MemAvailable, which reads as unknown") {
  const auto m = parse_proc_meminfo(recorded("meminfo_centos6_8g_kernel2.6.32.txt"));
  REQUIRE(m);
  CHECK(m->total_bytes == 8254951424);  // 8061476 kB
  CHECK(m->available_bytes == 0);
}

TEST_CASE("meminfo: the edges of the plausible range") {
  CHECK(parse_proc_meminfo("MemTotal:       1 kB\n")->total_bytes == 1024);
  CHECK(parse_proc_meminfo("MemTotal:       68719476736 kB\n")->total_bytes == 64 * kTiB);  // exactly 64 TiB
  CHECK_FALSE(parse_proc_meminfo("MemTotal:       68719476737 kB\n"));                         // 1 kB more
  // An exhausted machine really reports MemAvailable 0; that is a reading, not a fault.
  const auto full = parse_proc_meminfo("MemTotal:       65768704 kB\nMemAvailable:          0 kB\n");
  REQUIRE(full);
  CHECK(full->available_bytes == 0);
  // No trailing newline and CRLF line ends (a file copied through Windows) still parse.
  CHECK(parse_proc_meminfo("MemTotal:       65768704 kB")->total_bytes == 67347152896);
  CHECK(parse_proc_meminfo("MemTotal:       65768704 kB\r\nMemAvailable:   55120340 kB\r\n")->available_bytes == 56443228160);
}

TEST_CASE("meminfo: MemAvailable above MemTotal is nonsense and reads as unknown") {
  const auto m = parse_proc_meminfo("MemTotal:       16318412 kB\nMemAvailable:   16318413 kB\n");
  REQUIRE(m);
  CHECK(m->total_bytes == 16710053888);
  CHECK(m->available_bytes == 0);
}

TEST_CASE("meminfo: malformed input is rejected, never thrown") {
  for (const std::string& bad : {
           std::string(""),
           std::string("\n\n"),
           std::string("MemFree:        38214556 kB\nMemAvailable:   55120340 kB\n"),  // no MemTotal
           std::string("MemTotal:\n"),
           std::string("MemTotal:       abc kB\n"),
           std::string("MemTotal:       -65768704 kB\n"),
           std::string("MemTotal:       +65768704 kB\n"),
           std::string("MemTotal:              0 kB\n"),
           std::string("MemTotal:       65768704\n"),     // no unit
           std::string("MemTotal:       65768704 MB\n"),  // not the kernel's unit
           std::string("MemTotal:       65768704 kBx\n"),
           std::string("MemTotal:       6576.8704 kB\n"),
           std::string("MemTotal:       6576 8704 kB\n"),
           std::string("MemTotal:       0x3eb8000 kB\n"),
           std::string("MemTotal:       9007199254740993 kB\n"),      // fits int64, x1024 would overflow
           std::string("MemTotal:       18446744073709551615 kB\n"),  // uint64 max
           std::string("MemTotal:       99999999999999999999999 kB\n"),
           std::string("MemTotal:       65768704 kB\nMemTotal:       15655808 kB\n"),  // which one?
           std::string("MemTotal:       65768704 kB\nMemAvailable:   lots kB\n"),
           std::string("MemTotal:       65768704 kB\nMemAvailable:   -1 kB\n"),
           std::string("MemTotal:\0 65768704 kB\n", 23),  // a NUL byte inside the value
           std::string("MemTotal:       ") + std::string(100000, '9') + " kB\n",
       }) {
    INFO(bad.substr(0, 80));
    CHECK_NOTHROW(parse_proc_meminfo(bad));
    CHECK_FALSE(parse_proc_meminfo(bad));
  }
}

TEST_CASE("meminfo: very long lines elsewhere cost nothing and change nothing") {
  const std::string junk(1 << 20, 'x');
  const auto m = parse_proc_meminfo(junk + "\nMemTotal:       65768704 kB\nNoise:" + junk + " kB\n");
  REQUIRE(m);
  CHECK(m->total_bytes == 67347152896);
  CHECK_FALSE(parse_proc_meminfo(junk));
}

TEST_CASE("meminfo: every truncation of a real file is rejected or read correctly") {
  // A read cut short (a full disk, a signal) must never yield a smaller MemTotal than the machine has.
  const std::string full = recorded("meminfo_desktop_64g_kernel6.8.txt");
  for (std::size_t n = 0; n <= full.size(); ++n) {
    const auto m = parse_proc_meminfo(full.substr(0, n));
    if (!m) continue;
    INFO(n);
    CHECK(m->total_bytes == 67347152896);
    CHECK((m->available_bytes == 0 || m->available_bytes == 56443228160));
  }
}

TEST_CASE("sysctl hw.memsize: recorded Apple silicon outputs") {
  const auto m4max = parse_sysctl_memsize(recorded("sysctl_hw_memsize_m4max_128g.txt"));
  REQUIRE(m4max);
  CHECK(m4max->total_bytes == 137438953472);  // 128 GiB
  CHECK(m4max->available_bytes == 0);         // hw.memsize says nothing about what is free
  CHECK(m4max->source == "sysctl hw.memsize");
  const auto m3pro = parse_sysctl_memsize(recorded("sysctl_hw_memsize_m3pro_36g.txt"));
  REQUIRE(m3pro);
  CHECK(m3pro->total_bytes == 38654705664);  // 36 GiB
}

TEST_CASE("sysctl hw.memsize: malformed output is rejected") {
  for (const std::string& bad : {
           std::string(""),
           std::string("\n"),
           std::string("0\n"),
           std::string("-1\n"),
           std::string("abc\n"),
           std::string("hw.memsize: 137438953472\n"),  // sysctl without -n
           std::string("137438953472 bytes\n"),
           std::string("1.37438953472e11\n"),
           std::string("70368744177665\n"),        // 64 TiB + 1
           std::string("18446744073709551616\n"),  // 2^64
           std::string(100000, '1') + "\n",
       }) {
    INFO(bad.substr(0, 80));
    CHECK_NOTHROW(parse_sysctl_memsize(bad));
    CHECK_FALSE(parse_sysctl_memsize(bad));
  }
  CHECK(parse_sysctl_memsize("70368744177664\n")->total_bytes == 64 * kTiB);
}

TEST_CASE("cgroup limits: v2 memory.max and v1 memory.limit_in_bytes") {
  CHECK(parse_cgroup_limit("8589934592\n") == std::int64_t{8} << 30);  // docker run -m 8g
  CHECK(parse_cgroup_limit("17179869184") == std::int64_t{16} << 30);  // systemd MemoryMax=16G
  CHECK_FALSE(parse_cgroup_limit("max\n"));                             // v2: no limit
  CHECK_FALSE(parse_cgroup_limit("9223372036854771712\n"));             // v1: no limit (recorded on this project's VM)
  for (const char* bad : {"", "\n", "0\n", "-1\n", "8g\n", "8589934592 bytes\n", "maximum\n", "18446744073709551616\n"}) {
    INFO(bad);
    CHECK_FALSE(parse_cgroup_limit(bad));
  }
}

TEST_CASE("/proc/self/cgroup: the paths of the process's own cgroups") {
  // Recorded on a cgroup v1 VM (hybrid: a v2 hierarchy without the memory controller).
  const auto vm = parse_proc_self_cgroup(recorded("proc_self_cgroup_vm_v1.txt"));
  CHECK(vm.v2 == "/");
  CHECK(vm.v1_memory == "/process_api/6e0840ab1c1868b6ad58f8f771c7b8aa");
  // A GNOME terminal on a systemd, pure cgroup v2 desktop.
  const auto desk = parse_proc_self_cgroup(
      "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-4f1c.scope\n");
  CHECK(desk.v2 == "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-4f1c.scope");
  CHECK(desk.v1_memory.empty());
  // Controllers can share a hierarchy; only an exact "memory" counts.
  CHECK(parse_proc_self_cgroup("7:hugetlb,memory:/docker/ab12\n").v1_memory == "/docker/ab12");
  CHECK(parse_proc_self_cgroup("7:memoryx:/docker/ab12\n").v1_memory.empty());
  CHECK(parse_proc_self_cgroup("0::/a:b\n").v2 == "/a:b");
}

TEST_CASE("/proc/self/cgroup: paths outside the namespace and garbage are ignored") {
  CHECK(parse_proc_self_cgroup("0::/../../user.slice\n").v2.empty());
  CHECK(parse_proc_self_cgroup("4:memory:/..\n").v1_memory.empty());
  CHECK(parse_proc_self_cgroup("0::/..hidden\n").v2 == "/..hidden");  // a name, not a step up
  for (const std::string& bad : {std::string(""), std::string("garbage\n"), std::string("0:\n"), std::string("0::relative\n"),
                                std::string(1 << 20, ':')}) {
    const auto p = parse_proc_self_cgroup(bad);
    CHECK(p.v2.empty());
    CHECK(p.v1_memory.empty());
  }
}

TEST_CASE("detect_host_memory reads this machine without throwing") {
  std::optional<kvplan::cli::HostMemory> m;
  REQUIRE_NOTHROW(m = kvplan::cli::detect_host_memory());
#if defined(__linux__) || defined(__APPLE__)
  // Linux without a readable /proc (some build sandboxes) is the one case where nothing is found.
  if (!m && !std::ifstream("/proc/meminfo")) return;
  REQUIRE(m);
  CHECK(m->total_bytes > 0);
  CHECK(m->total_bytes <= 64 * kTiB);
  CHECK(m->available_bytes >= 0);
  CHECK(m->available_bytes <= m->total_bytes);
  CHECK_FALSE(m->source.empty());
#endif
}
