#include <catch2/catch.hpp>

#include "kvplan/error.hpp"
#include "kvplan/units.hpp"

using kvplan::parse_size;

TEST_CASE("sizes are binary: a 24GB card has 24 GiB") {
  CHECK(parse_size("24GB", "--gpu") == 24LL << 30);
  CHECK(parse_size("24GiB", "--gpu") == 24LL << 30);
  CHECK(parse_size("24 G", "--gpu") == 24LL << 30);
  CHECK(parse_size("23.5GiB", "--gpu") == 47LL << 29);
  CHECK(parse_size("24576MiB", "--gpu") == 24LL << 30);
  CHECK(parse_size("512mb", "--reserve") == 512LL << 20);
}

TEST_CASE("malformed sizes are input errors naming the field") {
  for (const char* bad : {"24", "24XB", "", "GB", "-3GB", "1.2.3GB", "24GB extra", "0GB"}) {
    INFO(bad);
    try {
      parse_size(bad, "--gpu");
      FAIL("accepted");
    } catch (const kvplan::InputError& e) {
      CHECK(e.field() == "--gpu");
      CHECK(e.value() == bad);
    }
  }
}

TEST_CASE("formatting in one place") {
  CHECK(kvplan::format_gib(18LL << 30) == "18.00");
  CHECK(kvplan::format_mib(4352LL << 20) == "4352.00");
  CHECK(kvplan::format_size(512LL << 20) == "512.00 MiB");
  CHECK(kvplan::format_size(3LL << 30) == "3.00 GiB");
}

TEST_CASE("did you mean") {
  CHECK(kvplan::closest_match("rtx4900", {"rtx4090", "rtx3090", "h100-sxm"}) == "rtx4090");
  CHECK(kvplan::closest_match("qwen2.5-coder-32", {"qwen2.5-coder-32b", "llama-3.1-8b"}) == "qwen2.5-coder-32b");
  CHECK(kvplan::closest_match("zzzzzzzzzz", {"rtx4090"}).empty());
}
