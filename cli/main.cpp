// kvplan: plan VRAM for local LLM inference. Parsing and rendering only; libplanner does the work.
// Exit codes: 0 a plan was found, 1 nothing fits, 2 bad input (under --json also an error object on stdout).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "gpu_detect.hpp"
#include "host_memory.hpp"
#include "model_source.hpp"
#include "kvplan/kvplan.hpp"
#include "render.hpp"
#include "run.hpp"

namespace {

using kvplan::InputError;

// --json asks for JSON on stdout, errors included: read from the arguments as typed, since parsing them may be
// what failed.
bool json_asked(const std::vector<std::string>& raw) {
  return std::any_of(raw.begin(), raw.end(), [](const std::string& a) {
    if (a == "--json") return true;
    if (a.rfind("--json=", 0) != 0) return false;
    std::string value = a.substr(7);
    std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return value != "false" && value != "0" && value != "off" && value != "no";  // CLI11's false words
  });
}

// Bad input as JSON: schema/plan.schema.json's $defs/error (python/kvplan/_errors.py InputError.to_dict() mirrors it).
std::string error_json(const InputError& e, const std::string& message) {
  using json = nlohmann::ordered_json;
  const json error = {{"field", e.field()},     {"value", e.value()},       {"problem", e.problem()},
                      {"accepted", e.accepted()}, {"suggestion", e.suggestion().empty() ? json(nullptr) : json(e.suggestion())},
                      {"message", message}};
  const json doc = {{"schema_version", kvplan::kSchemaVersion}, {"error", error}};
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";  // a value may hold invalid UTF-8
}

// Bad input, exit 2: the message on stderr and, under --json, the error object on stdout (its message: the
// first line of stderr's, after "kvplan: ").
int bad_input(const InputError& e, bool json, const std::string& message, std::ostream& out, std::ostream& err) {
  err << "kvplan: " << message << "\n";
  if (json) out << error_json(e, message.substr(0, message.find('\n')));
  return 2;
}

// The flag a CLI11 parse error names ("Could not convert: --parallel = abc", "--fit: maybe not in {on,off}").
std::string flag_named(const std::string& message) {
  std::istringstream words(message);
  for (std::string w; words >> w;)
    if (w.rfind("--", 0) == 0 && w.size() > 2) return w.back() == ':' ? w.substr(0, w.size() - 1) : w;
  return "arguments";
}

// --license a,b: the values, blanks trimmed; an empty entry is refused by name rather than dropped.
std::vector<std::string> license_values(const std::string& list) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    std::string v = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    v.erase(0, v.find_first_not_of(" \t"));
    v.erase(v.find_last_not_of(" \t") + 1);
    if (v.empty()) throw InputError("--license", list, "has an empty entry; give comma-separated license ids, open or other");
    out.push_back(v);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::vector<std::string> split_paths(const char* env) {
  std::vector<std::string> out;
  if (!env) return out;
  std::stringstream ss(env);
  std::string part;
  while (std::getline(ss, part, ':'))
    if (!part.empty()) out.push_back(part);
  return out;
}

// Host RAM for offloaded plans: --ram, else KVPLAN_RAM (a size, or "unknown" to leave it to the planner's stated
// assumption), else what this machine reports (MemAvailable: what the OS can give now), said in the plan.
void resolve_host_ram(const std::string& flag, kvplan::Request& req) {
  if (!flag.empty()) {
    req.host_ram = kvplan::parse_size(flag, "--ram");
    req.host_ram_source = "--ram";
    return;
  }
  if (const char* env = std::getenv("KVPLAN_RAM"); env && *env) {
    if (std::string(env) == "unknown") return;
    req.host_ram = kvplan::parse_size(env, "KVPLAN_RAM");
    req.host_ram_source = "KVPLAN_RAM";
    return;
  }
  if (const auto mem = kvplan::cli::detect_host_memory()) {
    const bool available = mem->available_bytes > 0;
    req.host_ram = available ? mem->available_bytes : mem->total_bytes;
    std::string source = mem->source;
    if (const auto at = source.find("MemTotal"); available && at != std::string::npos) source.replace(at, 8, "MemAvailable");
    req.host_ram_source = "this machine's " + std::string(available ? "available RAM" : "installed RAM") + " (" + source + ")";
  }
}

// --gpu auto / --free auto: this machine's GPUs (cli/gpu_detect.hpp), as devices and what is free on them now.
void detect_gpus_if_asked(const kvplan::Catalog& catalog, kvplan::Request& req, const std::vector<std::string>& gpus, bool free_auto) {
  const bool gpu_auto = std::find(gpus.begin(), gpus.end(), "auto") != gpus.end();
  if (gpu_auto && gpus.size() > 1)
    throw InputError("--gpu", "auto", "detects every GPU of this machine; give it alone, not with other --gpu values");
  if (!gpu_auto && !free_auto) return;
  if (gpus.empty()) throw InputError("--free", "auto", "needs --gpu (auto, or the GPU's name) to know which devices it applies to");
  kvplan::cli::apply_detection(catalog, req, kvplan::cli::detect_gpus(kvplan::cli::detect_options_from_env()), gpu_auto, free_auto);
}

// --models a,b,c: catalog names as they are; files, folders and remote ids read here (the planner reads no network).
void add_models(const std::string& list, const kvplan::Catalog& catalog, const std::string& engine, kvplan::WhatFitsRequest& q) {
  std::string item;
  for (char ch : list + ",") {
    if (ch != ',') {
      item += ch;
      continue;
    }
    if (item.empty()) continue;
    std::error_code ec;
    if (kvplan::cli::looks_like_path(item) && !kvplan::cli::remote_shaped(item) && !std::filesystem::exists(item, ec))
      throw InputError("--models", item, "no such file");
    if (auto spec = kvplan::cli::read_model(item, catalog, engine)) q.model_specs.push_back(spec);
    else q.models.push_back(item);
    item.clear();
  }
  if (!list.empty() && q.models.empty() && q.model_specs.empty()) throw InputError("--models", list, "names no model (comma-separated names)");
}

// kvplan needs --model M --task T: the hardware the model needs (docs/ranking.md §10). Exit 0 found, 1 nothing suffices.
int run_needs(const kvplan::Catalog& catalog, kvplan::Request req, const std::string& engine, int max_gpus,
              const std::vector<std::string>& gpus, bool json, std::ostream& out) {
  if (!gpus.empty()) throw InputError("--gpu", gpus.front(), "is what `kvplan needs` searches for; drop it (or plan that GPU without `needs`)");
  if (req.model.empty()) throw InputError("--model", "", "`kvplan needs` needs a model (kvplan needs --model qwen2.5-coder-32b --task agentic)");
  req.model_spec = kvplan::cli::read_model(req.model, catalog, engine);
  const kvplan::NeedsResult n = kvplan::needs(catalog, req, max_gpus);
  out << (json ? kvplan::to_json(n) : kvplan::cli::render_needs(n));
  return n.found() ? 0 : 1;
}

int run(std::vector<std::string> raw, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args;

  CLI::App app{"kvplan: which weights, context and K/V cache types fit your GPU, and what they cost in quality", "kvplan"};
  app.set_version_flag("--version", "kvplan 0.1.0");
  app.fallthrough();
  app.require_subcommand(0, 1);

  kvplan::Request req;
  std::string model, task = "general", flash_attn = "auto", reserve, free_mem, ngl, rope_type;
  std::optional<std::string> ctx;
  std::optional<int> ubatch, batch;
  std::optional<std::string> ctk, ctv, weights, tensor_split;
  std::optional<double> rope_scale;
  std::optional<int> yarn_orig;
  std::vector<std::string> data_dirs;
  bool json = false, kv_unified = false, swa_full = false, allow_slow = false;
  int parallel = 1, top = 5;
  std::string build = "default", engine = "llama.cpp";

  std::string rpc;
  app.add_option("--rpc", rpc, "llama.cpp rpc-server hosts (one GPU each), placed before the local GPUs: host:port=rtx3090,host:port=24GB");
  std::vector<std::string> gpus;
  app.add_option("--gpu", gpus, "GPU name (rtx4090, \"RTX 3090\", h100-sxm) or size (24GB = 24 GiB); repeat it, or 2x24GB, for several GPUs; auto: this machine's GPUs")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::string split_mode = "layer", device_draft;
  app.add_option("--split-mode", split_mode, "several GPUs: layer (default) or none (the main GPU alone); row is not modelled");
  app.add_option("--device-draft", device_draft, "the draft model's device; kvplan plans it on the main GPU (CUDA0)");
  app.add_option("--model", model, "catalog name, alias or HF id (see `kvplan models`), a GGUF/config.json file or folder, "
                                   "or read remotely, header only: owner/repo[:quant], an https://…/file.gguf URL, an Ollama tag");
  app.add_option("--task", task, "task profile: general (default), agentic, coding, rag, chat, summarization, creative, reasoning");
  app.add_option("--weights", weights, "GGUF weight format, e.g. Q4_K_M");
  app.add_option("--ctx-size,--ctx", ctx, "pin the context length in tokens (llama.cpp -c): 32768, 32k, 128K");
  app.add_option("--cache-type-k,--ctk", ctk, "pin the K cache type (llama.cpp -ctk)");
  app.add_option("--cache-type-v,--ctv", ctv, "pin the V cache type (llama.cpp -ctv)");
  app.add_option("--flash-attn,--fa", flash_attn, "on | off | auto (auto: chosen per option)");
  app.add_option("--parallel,--np", parallel, "server slots (llama.cpp -np; vLLM --max-num-seqs); kvplan's default is 1");
  int tensor_parallel = 1;
  app.add_option("--tensor-parallel-size,--tp", tensor_parallel, "GPUs of the kind --gpu names to split the model over (vLLM, SGLang)");
  // Serving at scale (vLLM, SGLang): docs/engines.md "Serving at scale".
  int pipeline_parallel = 1, data_parallel = 1, nodes = 1, concurrency = 1;
  bool expert_parallel = false;
  std::optional<int> max_num_seqs, max_batched_tokens;
  std::string interconnect;
  app.add_option("--pipeline-parallel-size,--pp", pipeline_parallel, "pipeline stages, each holding a share of the layers (vLLM --pipeline-parallel-size, SGLang --pp-size)");
  app.add_option("--data-parallel-size,--dp", data_parallel, "replicas of the model (vLLM --data-parallel-size, SGLang --dp-size)");
  app.add_flag("--enable-expert-parallel,--ep", expert_parallel, "split MoE experts over the GPUs instead of sharding each (vLLM --enable-expert-parallel, SGLang --ep-size)");
  app.add_option("--nodes", nodes, "machines the tp x pp x dp GPUs are spread over, in equal shares (--gpu names one GPU: 8 per node is --tp 8 --pp 2 --nodes 2)");
  app.add_option("--interconnect", interconnect, "the link between nodes: ib-ndr (default), ib-hdr, eth-400, eth-100 (data/interconnects.yaml)");
  app.add_option("--max-num-seqs,--max-running-requests", max_num_seqs, "sequences the scheduler admits at once (default: --parallel, else the engine's default)");
  app.add_option("--concurrency", concurrency, "full-length conversations the KV pool must hold at once (vLLM/SGLang; default 1, the engine's start-up check); with --max-ctx: the longest context for that many");
  app.add_option("--max-num-batched-tokens,--chunked-prefill-size", max_batched_tokens, "the prefill chunk vLLM/SGLang size activations for (vLLM --max-num-batched-tokens)");
  app.add_flag("--kv-unified", kv_unified, "one KV buffer shared by all slots (llama.cpp -kvu)");
  app.add_option("--ubatch-size,--ub", ubatch, "physical batch (llama.cpp -ub, default 512)");
  app.add_option("--batch-size", batch, "logical batch (llama.cpp -b, default 2048)");
  std::optional<int> outputs_max;
  app.add_option("--n-outputs-max", outputs_max, "logits rows per batch (llama-server: -np x (1 + drafted tokens); a library context such as llama-cpp-python: the batch size)");
  app.add_flag("--swa-full", swa_full, "full-size sliding-window cache (llama.cpp --swa-full)");
  app.add_option("--n-gpu-layers,--ngl", ngl, "layers on the GPU (default all; N < layers + 1 offloads the rest to RAM)");
  app.add_option("--tensor-split", tensor_split, "several GPUs: each one's share of the layers, e.g. 3,1 (default: by free memory)");
  app.add_option("--rope-scaling", rope_type, "rope scaling type (as llama.cpp); enables the model's extended context");
  app.add_option("--rope-scale", rope_scale, "rope scale factor (must match the model's)");
  app.add_option("--yarn-orig-ctx", yarn_orig, "YaRN original context (must match the model's)");
  app.add_option("--engine", engine, "inference engine: llama.cpp (default), ollama, vllm, sglang, exllamav2, exllamav3, mlx (see `kvplan engines`)");
  std::string emit, program;
  app.add_option("--program", program, "the llama.cpp program that runs the plan: llama-server (default) or llama-cli (also a library context such as llama-cpp-python); it decides the logits rows of the compute buffer and the launch line");
  app.add_option("--emit", emit, "print only the recommended option's launch line NAME (llama-server, llama-cli, ollama-env, modelfile, vllm, sglang, tabby-config, mlx-generate, mlx-server)");
  std::optional<std::string> backend;
  app.add_option("--backend", backend, "override the GPU's backend: cuda, metal, rocm, vulkan, sycl, cpu");
  app.add_option("--build", build, "default | fa-all-quants (CUDA built with GGML_CUDA_FA_ALL_QUANTS)");
  app.add_flag("--allow-slow", allow_slow, "also offer K/V pairs that run off the fast path");
  app.add_option("--reserve", reserve, "memory kept for the display and other processes, e.g. 1GB");
  app.add_option("--free", free_mem, "memory actually free on the GPU (replaces its total), e.g. 22.5GB; auto: what is free now on this machine's GPUs");
  app.add_option("--top", top, "options to show (default 5)");
  bool max_ctx = false, accept_risk = false;
  app.add_flag("--max-ctx", max_ctx, "the largest context, every setting not pinned free (flash attention included)");
  app.add_flag("--accept-risk", accept_risk, "recommend the least bad option even when every one rates avoid for the task (exit 0)");
  app.add_option("--data", data_dirs, "extra data directory (repeatable; also KVPLAN_DATA=dir:dir)");
  app.add_flag("--json", json, "print the plan as JSON, and bad input as a JSON error (schema/plan.schema.json)");
  // Flags llama.cpp has whose effect kvplan does not model yet: accepted by name so the error is clear.
  std::vector<std::string> unmodelled_values;
  std::vector<CLI::Option*> unmodelled;
  std::string fit;
  app.add_option("--fit", fit, "off (default): kvplan places layers (-ngl N --fit off); on: llama-server's fit does, with kvplan's --fit-target")
      ->check(CLI::IsMember({"on", "off"}, CLI::ignore_case));
  std::optional<int> fit_target;
  app.add_option("--fit-target", fit_target, "with --fit on: MiB llama-server's fit keeps free per device (default: kvplan's margin and overheads)");
  // Speculative decoding and a vision projector (llama-server -md / --mmproj).
  std::string model_draft, mmproj, spec_type;
  std::optional<std::string> weights_draft, ctkd, ctvd;
  std::optional<int> ngld, draft_max;
  bool no_mmproj_offload = false;
  app.add_option("--model-draft", model_draft, "draft model for speculative decoding: catalog name, GGUF file name or path (llama-server -md)");
  app.add_option("--weights-draft", weights_draft, "the draft's GGUF format when it is a catalog model (default Q8_0)");
  app.add_option("--cache-type-k-draft,--ctkd", ctkd, "the draft's K cache type (llama-server -ctkd, default f16)");
  app.add_option("--cache-type-v-draft,--ctvd", ctvd, "the draft's V cache type (llama-server -ctvd, default f16)");
  app.add_option("--n-gpu-layers-draft,--ngld", ngld, "the draft's layers on the GPU (llama-server -ngld, default all)");
  app.add_option("--spec-draft-n-max,--draft-max", draft_max, "tokens drafted per step (default 3)");
  app.add_option("--spec-type", spec_type, "speculative decoding type: draft-simple (the draft model's)")
      ->check(CLI::IsMember({"draft-simple"}).description("only draft-simple is modelled"));
  app.add_option("--mmproj", mmproj, "vision projector GGUF (llama-server --mmproj)");
  app.add_flag("--no-mmproj-offload", no_mmproj_offload, "keep the projector in RAM (llama-server --no-mmproj-offload)");
  std::vector<std::string> override_tensor;
  app.add_option("--override-tensor", override_tensor, "PATTERN=DEVICE[,…]: weight tensors whose name matches go to DEVICE (CPU, CUDA0, …), as llama.cpp -ot")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  for (const char* flag : {"--fit-ctx"})
    unmodelled.push_back(app.add_option(flag, unmodelled_values, "not modelled yet")->group(""));
  bool no_kv_offload = false, cpu_moe = false;
  unmodelled.push_back(app.add_flag("--no-kv-offload", no_kv_offload, "not modelled yet")->group(""));
  std::optional<int> n_cpu_moe;
  app.add_flag("--cpu-moe", cpu_moe, "keep every MoE expert tensor in RAM (llama.cpp --cpu-moe)");
  app.add_option("--n-cpu-moe", n_cpu_moe, "keep the experts of the first N layers in RAM (llama.cpp -ncmoe)");
  std::string priors_file;
  app.add_option("--priors", priors_file, "your own K/V measurements (tools/measure_kv CSV or llama-perplexity output) to calibrate the prior");
  std::string ram;
  app.add_option("--ram", ram, "host RAM the plan may use, e.g. 64GB (default: not checked)");
  std::optional<double> ram_bandwidth;
  app.add_option("--ram-bandwidth", ram_bandwidth, "host memory bandwidth in GB/s for the speed estimate (default 60)");

  // What fits (no --model): every catalog model, or --models, ranked for the GPU and task (docs/ranking.md §9).
  std::string models_list, family, arch_kind, min_ctx_text;
  std::optional<double> min_tps;
  bool moe_only = false, dense_only = false;
  app.add_option("--models", models_list, "without --model: rank these models (comma-separated catalog names, GGUF files, Hub ids) instead of the whole catalog");
  app.add_option("--min-ctx", min_ctx_text, "without --model: only models whose plan reaches this context per conversation (32k, 65536)");
  app.add_option("--min-tps", min_tps, "without --model: only models whose plan decodes at least this many tokens per second");
  app.add_option("--family", family, "without --model: only this model family (see `kvplan models`)");
  app.add_option("--arch-kind", arch_kind, "without --model: moe or dense");
  std::string license_list;
  app.add_option("--license", license_list, "without --model, and for `kvplan models`: only models under these licenses (comma-separated "
                 "ids as `kvplan models` lists them, e.g. apache-2.0,mit; open = OSI-approved; other = a custom license)");
  app.add_flag("--moe", moe_only, "without --model: mixture-of-experts models only (--arch-kind moe)");
  app.add_flag("--dense", dense_only, "without --model: dense models only (--arch-kind dense)");
  auto* models_cmd = app.add_subcommand("models", "list the catalog's models (optionally those matching FILTER: id, name, family, arch, moe, dense)");
  std::string models_filter;
  models_cmd->add_option("filter", models_filter, "a substring of the id, name, family or architecture; or moe, dense");
  auto* needs_cmd = app.add_subcommand("needs", "the smallest catalog GPU (and count, and Mac) on which --model meets --task: its target context, K at 8 bits or more, the speed floor");
  int max_gpus = 8;
  needs_cmd->add_option("--max-gpus", max_gpus, "the most GPUs of one kind to try (default 8)");
  auto* gpus_cmd = app.add_subcommand("gpus", "list the catalog's GPUs");
  auto* engines_cmd = app.add_subcommand("engines", "list the engines with the cache types and rules kvplan plans by");
  auto* inspect_cmd = app.add_subcommand("inspect", "print what kvplan reads from a GGUF file, config.json or model folder");
  std::string inspect_path;
  inspect_cmd->add_option("file", inspect_path, "GGUF file, config.json or folder")->required();
  // Run by cli/kvplan_main.cpp before this parser (the Python package's servers); named here for --help.
  auto* serve_cmd = app.add_subcommand("serve", "a web page and JSON API on http://127.0.0.1:8765/ (--host, --port, --allow-remote; docs/serve.md)");
  auto* mcp_cmd = app.add_subcommand("mcp", "an MCP server on stdio for agents: plan, explain, what_fits, list_models, list_gpus (docs/serve.md)");
  auto* explain_cmd = app.add_subcommand("explain", "one option's breakdown, risk and evidence in full");
  int explain_rank = 1;
  explain_cmd->add_option("--rank", explain_rank, "which ranked option (default 1, the recommendation)");

  {  // every flag name kvplan and its subcommands know, and which take a value
    std::vector<std::string> known = kvplan::cli::llama_short_flags(), takes_value;
    std::vector<const CLI::App*> apps = {&app};
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) apps.push_back(sub);
    for (const CLI::App* a : apps)
      for (const CLI::Option* o : a->get_options()) {
        std::vector<std::string> names;
        for (const auto& n : o->get_lnames()) names.push_back("--" + n);
        for (const auto& n : o->get_snames()) names.push_back("-" + n);
        for (const auto& n : names) {
          known.push_back(n);
          // a switch (--json, --max-ctx) may take an optional =value but never the next argument
          if (o->get_type_size_min() > 0 && o->get_expected_min() > 0) takes_value.push_back(n);
        }
      }
    req.server_args = kvplan::cli::take_server_args(raw, known, takes_value, kvplan::builtin_catalog().engine("llama.cpp"));
    args = kvplan::cli::rewrite_llama_flags(raw);
    kvplan::cli::check_flags(args, known, takes_value);
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's parse(vector) takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ExtrasError&) {
    // CLI11 2.1 prints the leftovers last first; say them in the order they were typed
    std::string rest;
    for (const auto& a : app.remaining()) rest += (rest.empty() ? "" : " ") + (a.empty() ? std::string("''") : a);
    return bad_input(InputError("arguments", rest, "not expected (kvplan takes flags with values, e.g. --gpu 24GB --model qwen3-8b)"),
                     json_asked(raw), "not expected: " + rest + "\n(kvplan takes flags with values, e.g. --gpu 24GB --model qwen3-8b; run kvplan --help)", out, err);
  } catch (const CLI::ParseError& e) {
    return bad_input(InputError(flag_named(e.what()), "", e.what()), json_asked(raw), std::string(e.what()) + "\n(run kvplan --help for the flags)", out, err);
  }
  // A value that names a file must name one that exists (a catalog name never looks like a path).
  for (const auto& [flag, value] : {std::pair<std::string, const std::string*>{"--model", &model}, {"--model-draft", &model_draft},
                                    {"--mmproj", &mmproj}, {"--priors", &priors_file}}) {
    std::error_code ec;
    const bool file_flag = flag == "--mmproj" || flag == "--priors";
    const bool remote = flag == "--model" && kvplan::cli::remote_shaped(*value);
    if (!value->empty() && !remote && (file_flag || kvplan::cli::looks_like_path(*value)) && !std::filesystem::exists(*value, ec))
      throw InputError(flag, *value, "no such file");
  }
  for (const auto& d : data_dirs) {
    std::error_code ec;
    if (!std::filesystem::exists(d, ec)) throw InputError("--data", d, "no such directory");
  }

  for (const auto* opt : unmodelled)
    if (opt->count() > 0)
      throw InputError("--" + opt->get_lnames().front(), "", "is a llama.cpp flag whose memory effect kvplan does not model yet");
  if (tensor_split) {
    // llama.cpp reads "3,1" or "3/1" (common/arg.cpp --tensor-split)
    std::string item;
    for (char ch : *tensor_split + ",") {
      if (ch != ',' && ch != '/') {
        item += ch;
        continue;
      }
      try {
        size_t used = 0;
        req.tensor_split.push_back(std::stod(item, &used));
        if (used != item.size()) throw std::invalid_argument(item);
      } catch (const std::exception&) {
        throw InputError("--tensor-split", *tensor_split, "needs numbers separated by commas, e.g. 3,1");
      }
      item.clear();
    }
  }
  req.split_mode = split_mode;
  if (!device_draft.empty() && (device_draft.empty() || device_draft.back() != '0'))
    throw InputError("--device-draft", device_draft, "kvplan plans the draft model on the main GPU (CUDA0, ROCm0, …)");
  if (!ngl.empty()) {
    if (ngl == "all" || ngl == "auto") {
      req.n_gpu_layers = -1;
    } else {
      try {
        size_t used = 0;
        req.n_gpu_layers = std::stoi(ngl, &used);
        if (used != ngl.size()) throw std::invalid_argument(ngl);
      } catch (const std::exception&) {
        throw InputError("--n-gpu-layers", ngl, "not a layer count", {"99", "all", "-1"});
      }
    }
  }

  std::vector<std::string> dirs = split_paths(std::getenv("KVPLAN_DATA"));
  dirs.insert(dirs.end(), data_dirs.begin(), data_dirs.end());
  std::optional<kvplan::Catalog> overlaid;  // the built-in catalog is used in place, not copied (~5 M instructions)
  if (!dirs.empty()) overlaid = kvplan::load_catalog(dirs);
  const kvplan::Catalog& catalog = overlaid ? *overlaid : kvplan::builtin_catalog();

  for (const auto* server : {serve_cmd, mcp_cmd})
    if (server->parsed())
      throw InputError(server->get_name(), "", "runs from the kvplan program or `python -m kvplan " + server->get_name() + "`");
  if (models_cmd->parsed()) {
    const auto licenses = license_values(license_list);
    out << (json ? kvplan::cli::models_json(catalog, models_filter, licenses) : kvplan::cli::render_models(catalog, models_filter, licenses));
    return 0;
  }
  if (gpus_cmd->parsed()) {
    out << (json ? kvplan::cli::gpus_json(catalog) : kvplan::cli::render_gpus(catalog));
    return 0;
  }
  if (engines_cmd->parsed()) {
    out << (json ? kvplan::cli::engines_json(catalog) : kvplan::cli::render_engines(catalog));
    return 0;
  }
  // Model files are read with llama.cpp's architecture table whatever the engine (an unknown engine fails here).
  const std::string arch_engine = catalog.runtime(engine) ? "llama.cpp" : engine;
  if (inspect_cmd->parsed()) {
    auto spec = kvplan::cli::read_model(inspect_path, catalog, arch_engine);
    if (!spec) spec = kvplan::load_model_file(inspect_path, catalog, arch_engine);  // says what is wrong
    out << (json ? kvplan::model_to_json(*spec) : kvplan::cli::render_inspect(*spec));
    return 0;
  }

  req.gpu = gpus.empty() ? std::string() : gpus.front();
  if (gpus.size() > 1) req.extra_gpus.assign(gpus.begin() + 1, gpus.end());
  // llama.cpp's --rpc is comma-separated (common/arg.cpp); an empty entry is kept, for the planner to refuse by name
  for (std::string item; const char ch : rpc.empty() ? std::string() : rpc + ",") {
    if (ch != ',') { item += ch; continue; }
    req.rpc_servers.push_back(item);
    item.clear();
  }
  req.model = model;
  req.task = task;
  req.engine = engine;
  req.build = build;
  req.weights = weights;
  if (ctx) req.ctx_size = kvplan::parse_token_count(*ctx, "--ctx-size");
  req.cache_type_k = ctk;
  req.cache_type_v = ctv;
  req.flash_attn = flash_attn;
  req.n_parallel = parallel;
  for (const auto& list : override_tensor) {  // llama.cpp takes comma-separated lists
    std::string item;
    for (char ch : list + ",") {
      if (ch != ',') {
        item += ch;
      } else if (!item.empty()) {
        req.override_tensors.push_back(item);
        item.clear();
      }
    }
  }
  req.fit_placement = fit == "on" || fit == "ON" || fit == "On";
  req.fit_target_mib = fit_target;
  req.tensor_parallel = tensor_parallel;
  req.pipeline_parallel = pipeline_parallel;
  req.data_parallel = data_parallel;
  req.expert_parallel = expert_parallel;
  req.nodes = nodes;
  req.interconnect = interconnect;
  req.concurrency = concurrency;
  req.max_batched_tokens = max_batched_tokens;
  req.max_num_seqs = max_num_seqs;
  // vLLM/SGLang take --parallel as the sequences they admit: an explicit --parallel 1 is kept, not the engine's default
  if (!max_num_seqs && app.get_option("--parallel")->count() > 0 && (engine == "vllm" || engine == "sglang") && parallel == 1)
    req.max_num_seqs = 1;
  req.kv_unified = kv_unified;
  req.n_ubatch = ubatch;
  req.n_batch = batch;
  req.n_outputs_max = outputs_max;
  req.swa_full = swa_full;
  req.allow_slow = allow_slow;
  req.top = top;
  req.max_ctx = max_ctx;
  // the line asked for names its program, whose logits rows the compute buffer follows
  const std::string pasted = kvplan::cli::pasted_program(raw);
  req.program = !program.empty() ? program : !pasted.empty() ? pasted : emit == "llama-cli" ? "llama-cli" : "llama-server";
  req.accept_risk = accept_risk;
  if (!reserve.empty()) req.reserve = kvplan::parse_size(reserve, "--reserve");
  const bool free_auto = free_mem == "auto";
  if (!free_mem.empty() && !free_auto) req.free = kvplan::parse_size(free_mem, "--free");
  resolve_host_ram(ram, req);
  req.host_bandwidth_gbs = ram_bandwidth;
  if (cpu_moe && n_cpu_moe) throw InputError("--cpu-moe", "", "give either --cpu-moe or --n-cpu-moe N, not both");
  if (cpu_moe) req.n_cpu_moe = -1;
  if (n_cpu_moe) {
    if (*n_cpu_moe < 0) throw InputError("--n-cpu-moe", std::to_string(*n_cpu_moe), "must be a layer count");
    req.n_cpu_moe = n_cpu_moe;
  }
  if (!rope_type.empty()) req.rope_scaling = rope_type;
  req.rope_scale = rope_scale;
  req.yarn_orig_ctx = yarn_orig;
  req.backend = backend;
  detect_gpus_if_asked(catalog, req, gpus, free_auto);
  if (needs_cmd->parsed()) return run_needs(catalog, req, arch_engine, max_gpus, gpus, json, out);
  if (model.empty() && !gpus.empty() && !explain_cmd->parsed() && emit.empty()) {  // explain and --emit need a model
    kvplan::WhatFitsRequest q;
    q.base = req;
    q.top = app.get_option("--top")->count() ? top : 20;
    q.family = family;
    q.licenses = license_values(license_list);
    if (moe_only && dense_only) throw InputError("--moe", "", "give --moe or --dense, not both");
    q.arch_kind = moe_only ? "moe" : dense_only ? "dense" : arch_kind;
    if (!arch_kind.empty() && (moe_only || dense_only) && arch_kind != q.arch_kind) throw InputError("--arch-kind", arch_kind, "disagrees with --moe/--dense");
    if (!min_ctx_text.empty()) q.min_ctx = kvplan::parse_token_count(min_ctx_text, "--min-ctx");
    q.min_tps = min_tps;
    add_models(models_list, catalog, arch_engine, q);
    const kvplan::WhatFits w = kvplan::what_fits(catalog, q);
    out << (json ? kvplan::to_json(w) : kvplan::cli::render_what_fits(w));
    return w.rows.empty() ? 1 : 0;
  }
  if (!models_list.empty() || !family.empty() || !arch_kind.empty() || moe_only || dense_only || !min_ctx_text.empty() || min_tps || !license_list.empty())
    throw InputError(!models_list.empty() ? "--models" : !family.empty() ? "--family" : !license_list.empty() ? "--license" : !min_ctx_text.empty() ? "--min-ctx" : min_tps ? "--min-tps" : "--arch-kind",
                     "", "ranks models without --model (kvplan --gpu G --task T); with --model, drop it");
  std::error_code ec;
  req.model_spec = kvplan::cli::read_model(req.model, catalog, arch_engine);
  if (!spec_type.empty() && model_draft.empty()) throw InputError("--spec-type", spec_type, "needs a draft model (--model-draft)");
  req.model_draft = model_draft;
  if (!model_draft.empty() && std::filesystem::exists(model_draft, ec))
    req.model_draft_spec = kvplan::load_model_file(model_draft, catalog, arch_engine);
  req.weights_draft = weights_draft;
  req.cache_type_k_draft = ctkd;
  req.cache_type_v_draft = ctvd;
  req.n_gpu_layers_draft = ngld;
  req.draft_max = draft_max;
  if (!mmproj.empty()) req.mmproj = kvplan::load_projector_file(mmproj, catalog);
  if (no_mmproj_offload && mmproj.empty()) throw InputError("--no-mmproj-offload", "", "needs --mmproj FILE");
  req.mmproj_offload = !no_mmproj_offload;

  kvplan::Catalog calibrated;
  const kvplan::Catalog* use = &catalog;
  if (!priors_file.empty()) {
    // Calibrate the prior to the user's model from their own measurements (kvplan/priors.hpp).
    calibrated = catalog;
    const kvplan::ModelSpec& m = req.model_spec ? *req.model_spec : catalog.model(req.model);
    calibrated.prior = kvplan::calibrate(catalog.prior, kvplan::read_measurements(priors_file, &catalog), m);
    use = &calibrated;
  }
  const kvplan::Plan plan = kvplan::plan(*use, req);
  if (!emit.empty()) {
    // For scripts: the recommended option's line alone (exit 1 with the reason when nothing fits or is acceptable).
    if (!plan.recommended()) {
      err << "kvplan: " << (plan.fits() ? "nothing acceptable: " + plan.nothing_acceptable : "nothing fits: " + plan.nothing_fits) << "\n";
      return 1;
    }
    std::vector<std::string> names;
    for (const auto& l : plan.recommended()->launches) {
      if (l.name == emit) {
        out << l.text << "\n";
        return 0;
      }
      names.push_back(l.name);
    }
    // llama.cpp plans one program's line; --emit llama-cli plans for llama-cli (a plan for the server has no such line)
    if (plan.resolved.engine_id == "llama.cpp" && plan.resolved.program == "llama-server") names.push_back("llama-cli");
    throw InputError("--emit", emit, "is not a launch line of " + plan.resolved.engine, names, kvplan::closest_match(emit, names));
  }
  if (json) out << kvplan::to_json(plan);
  else if (explain_cmd->parsed()) out << kvplan::cli::render_explain(plan, explain_rank);
  else out << kvplan::cli::render_plan(plan);
  return plan.recommended() ? 0 : 1;
}

}  // namespace

namespace kvplan::cli {

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    return run(args, out, err);
  } catch (const InputError& e) {
    return bad_input(e, json_asked(args), e.what(), out, err);
  } catch (const std::exception& e) {
    err << "kvplan: internal error: " << e.what() << "\n";
    return 3;
  }
}

}  // namespace kvplan::cli
