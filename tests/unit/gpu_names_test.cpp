// GPUs as users name them (issue 16): laptop names, bare numbers, Apple chips with their memory, a "did you mean"
// that keeps the card's size and kind, and `--gpu <size> --backend metal` as a Mac's unified memory.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iterator>
#include <string>

#include "helpers.hpp"

using namespace kvplan;

namespace {

InputError gpu_error(const std::string& name) {
  try {
    kvtest::catalog().gpu(name);
  } catch (const InputError& e) {
    return e;
  }
  FAIL("'" << name << "' resolved");
  throw;
}

bool lists(const InputError& e, const std::string& id) {
  return std::find(e.accepted().begin(), e.accepted().end(), id) != e.accepted().end();
}

}  // namespace

TEST_CASE("the names issue 16 reported resolve to the right card and its driver total", "[gpu-names]") {
  const auto& c = kvtest::catalog();
  // nvidia-smi memory.total of each card (data/gpus.yaml cites the records)
  CHECK(c.gpu("rtx4060").id == "rtx4060");
  CHECK(c.gpu("rtx4060").total_mib == 8188);
  CHECK(c.gpu("4090").id == "rtx4090");
  CHECK(c.gpu("4090").total_mib == 24564);
  CHECK(c.gpu("rtx4060-laptop").id == "rtx4060-laptop");
  CHECK(c.gpu("rtx4060-laptop").total_mib == 8188);
  CHECK(c.gpu("m2max-32gb").id == "m2max-32gb");
  CHECK(c.gpu("m2max-32gb").total_mib == 32768);
  CHECK(c.gpu("m2max-32gb").working_set_mib == 25559);  // 0.78 x 32768, as measured on a 32 GB M1 Max
}

TEST_CASE("spellings people type reach the same card", "[gpu-names]") {
  const auto& c = kvtest::catalog();
  for (const char* name : {"RTX 4060 Laptop", "4060 laptop", "rtx 4060 mobile", "NVIDIA GeForce RTX 4060 Laptop GPU", "RTX4060-LAPTOP"})
    CHECK(c.gpu(name).id == "rtx4060-laptop");
  for (const char* name : {"m2 max 32gb", "M2 Max 32GB", "apple m2 max 32gb", "m2-max-32gb"}) CHECK(c.gpu(name).id == "m2max-32gb");
  CHECK(c.gpu("3060").id == "rtx3060-12gb");  // two cards carry 3060; an alias names the 12 GB one
  CHECK(c.gpu("NVIDIA GeForce RTX 3060").id == "rtx3060-12gb");
  CHECK(c.gpu("3060 8gb").total_mib == 8192);
  CHECK(c.gpu("rx 7900 xt").id == "rx7900xt");
  CHECK(c.gpu("Intel(R) Arc(TM) B570 Graphics").id == "arc-b570");
  CHECK(c.gpu("5090 laptop").total_mib == 24463);
}

TEST_CASE("a name several cards carry is refused with the choices", "[gpu-names]") {
  const InputError bare = gpu_error("7900");
  CHECK(bare.field() == "--gpu");
  CHECK(bare.value() == "7900");
  CHECK(lists(bare, "rx7900xtx"));
  CHECK(lists(bare, "rx7900xt"));
  CHECK(lists(bare, "rx7900gre"));
  const InputError chip = gpu_error("m2 max");
  CHECK(chip.accepted() == std::vector<std::string>{"m2max-96gb", "m2max-32gb", "m2max-64gb"});
  const InputError ti = gpu_error("rtx 4060 ti");
  CHECK(lists(ti, "rtx4060ti-8gb"));
  CHECK(lists(ti, "rtx4060ti-16gb"));
  CHECK(ti.accepted().size() == 2);
  CHECK(lists(gpu_error("rtx 3080 laptop"), "rtx3080-laptop-16gb"));
}

TEST_CASE("did you mean keeps the card's number, kind and size", "[gpu-names]") {
  const auto& c = kvtest::catalog();
  // an 8 GB card asked with a size it is not sold in: the 4060, never the 12 GB 3060
  const InputError sized = gpu_error("rtx 4060 12gb");
  CHECK(sized.suggestion() == "rtx4060");
  CHECK(c.gpu(sized.suggestion()).total_mib < 9000);
  CHECK(gpu_error("rtx4600").suggestion() == "rtx4060");                     // a typo of the number
  CHECK(gpu_error("rtx 4060 laptp").suggestion() == "rtx4060-laptop");        // a typo of "laptop"
  CHECK(gpu_error("rtx 4060 laptop 16gb").suggestion() == "rtx4060-laptop");  // a laptop stays a laptop
  CHECK(gpu_error("m2 max 16gb").suggestion() == "m2max-32gb");               // the same chip, the nearest size
  CHECK(gpu_error("4060 ti 10gb").suggestion() == "rtx4060ti-8gb");  // the nearer of its two sizes
  const InputError e = gpu_error("rtx 4060 12gb");
  CHECK(e.field() == "--gpu");
  CHECK(e.value() == "rtx 4060 12gb");
  CHECK(lists(e, "rtx4060"));
}

TEST_CASE("the macOS working-set rule: measured values and the bands between them", "[gpu-names]") {
  // hand-computed floor(RAM MiB x fraction) against the measured llama.cpp MTL0 totals
  CHECK(metal_default_working_set_mib(8192) == 5461);       // 2/3; 'MTL0: Apple M1 (5461 MiB'
  CHECK(metal_default_working_set_mib(16384) == 12124);     // 0.74
  CHECK(metal_default_working_set_mib(24576) == 18186);     // 0.74; 'MTL0: Apple M2 (18186 MiB'
  CHECK(metal_default_working_set_mib(32768) == 25559);     // 0.78
  CHECK(metal_default_working_set_mib(49152) == 38338);     // 0.78
  CHECK(metal_default_working_set_mib(65536) == 53084);     // 0.81
  CHECK(metal_default_working_set_mib(131072) == 110100);   // 0.84
  CHECK(metal_default_working_set_mib(262144) == 228065);   // 0.87; 'MTL0: Apple M3 Ultra (228065 MiB'
  CHECK(metal_default_working_set_mib(18432) == 13639);     // 18 GB: not measured, 0.74 band
  CHECK(metal_default_working_set_mib(98304) == 79626);     // 96 GB: not measured, 0.81 band
  // every Apple entry uses the same rule
  for (const auto& g : kvtest::catalog().gpus) {
    if (g.vendor != "apple") continue;
    INFO(g.id);
    CHECK(g.working_set_mib == metal_default_working_set_mib(g.total_mib));
  }
}

TEST_CASE("--gpu <size> --backend metal is a Mac's unified memory under the working-set rule", "[gpu-names]") {
  Request r;
  r.gpu = "32GB";
  r.backend = "metal";
  r.model = "qwen3-8b";
  const Plan p = plan(kvtest::catalog(), r);
  REQUIRE_FALSE(p.pools.empty());
  CHECK(p.pools.front().kind == "unified");
  CHECK(p.pools.front().capacity == 25559 * kMiB);  // 0.78 x 32768 MiB, not all 32 GiB
  CHECK(p.resolved.gpu_size_only);
  Request cuda = r;
  cuda.backend.reset();
  CHECK(plan(kvtest::catalog(), cuda).pools.front().capacity == 32 * kGiB);  // a CUDA card: the size as given
}

TEST_CASE("--gpu 4090 is a card, --gpu 24 a size without its unit", "[gpu-names]") {
  Request r;
  r.model = "qwen3-8b";
  r.gpu = "4090";
  CHECK(plan(kvtest::catalog(), r).pools.front().capacity == 24564 * kMiB);
  r.gpu = "24";
  try {
    plan(kvtest::catalog(), r);
    FAIL("planned '24' without a unit");
  } catch (const InputError& e) {
    CHECK(e.field() == "--gpu");
    CHECK(std::string(e.problem()).find("unit") != std::string::npos);
  }
}

TEST_CASE("every GPU total cites the figure it gives, or says it is nominal", "[gpu-names]") {
  for (const auto& g : kvtest::catalog().gpus) {
    INFO(g.id);
    CHECK_FALSE(g.source.empty());
    std::string t;  // "16,303 MiB" quotes 16303
    std::copy_if(g.total_source.begin(), g.total_source.end(), std::back_inserter(t), [](char ch) { return ch != ','; });
    const bool nominal = t.rfind("nominal:", 0) == 0;
    const bool unverified = t.rfind("unverified:", 0) == 0;
    if (g.unified()) CHECK(nominal);
    else CHECK((nominal || unverified || t.find(std::to_string(g.total_mib)) != std::string::npos));
  }
}

TEST_CASE("a laptop that needs more memory is offered a laptop card, a desktop a desktop card", "[gpu-names]") {
  auto bigger_device = [](const std::string& gpu) {
    Request r;
    r.gpu = gpu;
    r.model = "qwen2.5-14b";
    r.task = "reasoning";
    r.host_ram = 1 * kGiB;
    for (const auto& s : plan(kvtest::catalog(), r).suggestions)
      if (s.summary.find("a device with more memory") != std::string::npos) return kvtest::catalog().gpu(s.request.gpu);
    FAIL("no larger device suggested for " << gpu);
    throw;
  };
  CHECK(bigger_device("rtx4060-laptop").id.find("laptop") != std::string::npos);
  CHECK(bigger_device("rtx4060").id.find("laptop") == std::string::npos);
}
