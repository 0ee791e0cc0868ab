// What llama.cpp will start (ggml-cuda/fattn.cu ggml_cuda_get_best_fattn_kernel, src/llama-context.cpp), read at b10454.
#include <catch2/catch.hpp>

#include "engines/llama_cpp.hpp"
#include "helpers.hpp"

using namespace kvplan;
using engines::check_pair;

TEST_CASE("CUDA default build: flash attention only for same-type f16/bf16/q8_0/q4_0 pairs") {
  const ModelSpec& m = kvtest::catalog().model("qwen2.5-coder-32b");
  const auto& e = kvtest::engine();
  const auto& cuda = kvtest::cuda();
  for (const char* t : {"f16", "bf16", "q8_0", "q4_0"}) CHECK(check_pair(e, cuda, m, "default", t, t, true).ok);
  const auto mixed = check_pair(e, cuda, m, "default", "q8_0", "q4_0", true);
  CHECK_FALSE(mixed.ok);
  CHECK(mixed.slow);  // -fa on would run attention on the CPU
  REQUIRE(mixed.needs.size() == 1);
  CHECK(mixed.needs[0] == "GGML_CUDA_FA_ALL_QUANTS build");
  CHECK_FALSE(check_pair(e, cuda, m, "default", "f16", "q8_0", true).ok);
  CHECK_FALSE(check_pair(e, cuda, m, "default", "q5_0", "q5_0", true).ok);
  CHECK_FALSE(check_pair(e, cuda, m, "default", "iq4_nl", "iq4_nl", true).ok);
}

TEST_CASE("CUDA with GGML_CUDA_FA_ALL_QUANTS: any pair of f16/bf16/q4_0/q4_1/q5_0/q5_1/q8_0, never iq4_nl") {
  const ModelSpec& m = kvtest::catalog().model("qwen2.5-coder-32b");
  CHECK(check_pair(kvtest::engine(), kvtest::cuda(), m, "fa-all-quants", "q8_0", "q4_0", true).ok);
  CHECK(check_pair(kvtest::engine(), kvtest::cuda(), m, "fa-all-quants", "f16", "q5_1", true).ok);
  CHECK_FALSE(check_pair(kvtest::engine(), kvtest::cuda(), m, "fa-all-quants", "iq4_nl", "iq4_nl", true).ok);
}

TEST_CASE("quantized V needs flash attention; quantized K alone does not") {
  const ModelSpec& m = kvtest::catalog().model("qwen2.5-coder-32b");
  const auto v = check_pair(kvtest::engine(), kvtest::cuda(), m, "default", "f16", "q8_0", false);
  CHECK_FALSE(v.ok);
  CHECK_FALSE(v.slow);
  CHECK(v.reason.find("requires flash attention") != std::string::npos);
  CHECK(check_pair(kvtest::engine(), kvtest::cuda(), m, "default", "q8_0", "f16", false).ok);
  CHECK(check_pair(kvtest::engine(), kvtest::cuda(), m, "default", "iq4_nl", "f16", false).ok);
}

TEST_CASE("head sizes: quantized types need a multiple of the block; FA needs a kernel for the size") {
  ModelSpec m = kvtest::catalog().model("qwen2.5-coder-32b");
  m.head_dim_k = m.head_dim_v = 80;  // 80 % 32 != 0
  CHECK_FALSE(check_pair(kvtest::engine(), kvtest::cuda(), m, "default", "q8_0", "f16", false).ok);
  CHECK(check_pair(kvtest::engine(), kvtest::cuda(), m, "default", "f16", "f16", true).ok);  // FA has an 80 kernel
  m.head_dim_k = m.head_dim_v = 160;
  CHECK_FALSE(check_pair(kvtest::engine(), kvtest::cuda(), m, "default", "f16", "f16", true).ok);
  CHECK(check_pair(kvtest::engine(), kvtest::cuda(), m, "default", "f16", "f16", false).ok);
}

TEST_CASE("Metal runs mixed pairs, but only off the fast path") {
  const ModelSpec& m = kvtest::catalog().model("qwen2.5-coder-32b");
  const auto r = check_pair(kvtest::engine(), kvtest::engine().backend("metal"), m, "default", "q8_0", "q4_0", true);
  CHECK_FALSE(r.ok);
  CHECK(r.slow);
  CHECK(check_pair(kvtest::engine(), kvtest::engine().backend("metal"), m, "default", "q8_0", "q8_0", true).ok);
}

TEST_CASE("launch lines carry -np and an explicit -fa; rope flags only beyond the native window") {
  const ModelSpec& m = kvtest::catalog().model("qwen2.5-coder-32b");
  Option o;
  o.weights = "Q4_K_M";
  o.ctx_size = 32768;
  o.cache_type_k = o.cache_type_v = "q8_0";
  Resolved r;
  CHECK(engines::launch_line(m, o, r, 512, 2048) ==
        "llama-server -m Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf -c 32768 -np 1 -fa on -ctk q8_0 -ctv q8_0 -ngl 99 --fit off");
  o.ctx_size = 65536;
  o.beyond_native = true;
  r.n_parallel = 4;
  r.kv_unified = true;
  r.n_ubatch = 1024;
  CHECK(engines::launch_line(m, o, r, 512, 2048) ==
        "llama-server -m Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf -c 65536 -np 4 -kvu -fa on -ctk q8_0 -ctv q8_0 -ngl 99 --fit off -ub 1024 "
        "--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768");
}

TEST_CASE("MLA models without a V cache refuse different K and V types (found by tests/validation)") {
  const ModelSpec& m = kvtest::catalog().model("deepseek-v2-lite");
  const auto r = check_pair(kvtest::engine(), kvtest::cuda(), m, "fa-all-quants", "q8_0", "q4_0", true);
  CHECK_FALSE(r.ok);
  CHECK(r.reason.find("different K and V") != std::string::npos);
  CHECK(check_pair(kvtest::engine(), kvtest::cuda(), m, "default", "q8_0", "q8_0", true).ok);
}

// The other backends' supports_op for GGML_OP_FLASH_ATTN_EXT, read at ggml-org/ggml@acfb0dd (= llama.cpp
// 1692f9e5, the day before b10454): ggml-metal-device.m, ggml-vulkan.cpp, ggml-sycl/fattn.cpp; ROCm compiles
// ggml-cuda/fattn.cu without a HIP branch.
TEST_CASE("Metal, ROCm, Vulkan, SYCL: flash-attention kernels as each backend's supports_op reads") {
  const auto& e = kvtest::engine();
  const ModelSpec& qwen = kvtest::catalog().model("qwen2.5-coder-32b");  // head size 128
  const auto& metal = e.backend("metal");
  // Metal: K and V must be the same type, whatever the build; q4_1/q5_x run; iq4_nl has no kernel.
  CHECK(check_pair(e, metal, qwen, "default", "q5_1", "q5_1", true).ok);
  const auto mixed = check_pair(e, metal, qwen, "fa-all-quants", "q8_0", "q4_0", true);
  CHECK_FALSE(mixed.ok);
  CHECK(mixed.needs.empty());  // no build of Metal has mixed kernels
  CHECK_FALSE(check_pair(e, metal, qwen, "default", "iq4_nl", "iq4_nl", true).ok);
  // ROCm: CUDA's rules (same-type f16/bf16/q8_0/q4_0 on a default build; head size 80 has kernels).
  const auto& rocm = e.backend("rocm");
  CHECK(check_pair(e, rocm, qwen, "default", "q8_0", "q8_0", true).ok);
  CHECK_FALSE(check_pair(e, rocm, qwen, "default", "q8_0", "q4_0", true).ok);
  CHECK(check_pair(e, rocm, qwen, "fa-all-quants", "q8_0", "q4_0", true).ok);
  // Vulkan: K and V checked separately (mixed pairs run), iq4_nl included, any head size multiple of 8.
  const auto& vulkan = e.backend("vulkan");
  CHECK(check_pair(e, vulkan, qwen, "default", "q8_0", "q4_0", true).ok);
  CHECK(check_pair(e, vulkan, qwen, "default", "iq4_nl", "iq4_nl", true).ok);
  // SYCL: GGML_SYCL_FA_ALL_QUANTS is on by default (mixed pairs run); no iq4_nl; head size 192 has no kernel.
  const auto& sycl = e.backend("sycl");
  CHECK(check_pair(e, sycl, qwen, "default", "q8_0", "q4_0", true).ok);
  CHECK_FALSE(check_pair(e, sycl, qwen, "default", "iq4_nl", "iq4_nl", true).ok);
  const ModelSpec* mla_like = nullptr;
  for (const auto& m : kvtest::catalog().models)
    if (m.head_dim_k == 192 && m.head_dim_v == 128 && !m.mla) mla_like = &m;
  if (mla_like) CHECK_FALSE(check_pair(e, sycl, *mla_like, "default", "f16", "f16", true).ok);
  for (const auto& b : e.backends) CHECK(b.verified);
}
