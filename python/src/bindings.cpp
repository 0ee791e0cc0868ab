// kvplan._core: the pybind11 shim over libplanner. It converts the library's value types and calls its
// functions; it holds no logic. The Pythonic API (keyword arguments, result objects, tables, plots) is
// python/kvplan/; the types here are described for type checkers in python/kvplan/_core.pyi.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cxxabi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <typeinfo>

#include "kvplan/kvplan.hpp"

namespace py = pybind11;
using namespace kvplan;

namespace {

// kvplan::InputError becomes kvplan.InputError (a ValueError defined in python/kvplan/_errors.py),
// carrying the same field, value, problem, accepted values and suggestion. Any other C++ exception that
// reaches Python is kvplan's own mistake, not the caller's (input is checked where it enters: the Python
// layer's keywords, and the file readers below): a RuntimeError that says so and names the exception.
// pybind11's own exceptions (a Python error passing through, a cast error) go on to pybind11's translator.
std::string internal_error(const std::exception& e) {
  std::string type = typeid(e).name();
  int status = 0;
  if (char* readable = abi::__cxa_demangle(type.c_str(), nullptr, nullptr, &status)) {
    if (status == 0) type = readable;
    std::free(readable);
  }
  return "kvplan internal error (" + type + "): " + e.what() +
         " -- this is a bug in kvplan, not in the input; please report it with the call that raised it";
}

// Text from the library as a Python str: a message may quote bytes of a file that are not UTF-8, which are
// escaped (\xff) rather than failing the conversion.
py::str text(const std::string& s) {
  PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
  if (!u) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(u);
}

void translate_exceptions(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const InputError& e) {
    py::object cls = py::module_::import("kvplan._errors").attr("InputError");
    py::list accepted;
    for (const auto& a : e.accepted()) accepted.append(text(a));
    py::object err = cls(text(e.what()), text(e.field()), text(e.value()), text(e.problem()), accepted, text(e.suggestion()));
    PyErr_SetObject(cls.ptr(), err.ptr());
  } catch (const py::error_already_set&) {
    throw;
  } catch (const py::builtin_exception&) {
    throw;
  } catch (const std::exception& e) {
    PyErr_SetObject(PyExc_RuntimeError, text(internal_error(e)).ptr());
  }
}

// Reading a file the caller names (a model, a projector, a data directory) is input by definition: whatever
// the reader throws besides its own InputError (a YAML or JSON library error, a filesystem error, running out
// of memory on a header that claims too much) is an InputError naming the file.
template <typename F>
auto reading(const std::string& field, const std::string& what, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const InputError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw InputError(field, what, "is too large to read (it asks for more memory than there is)");
  } catch (const std::exception& e) {
    throw InputError(field, what, std::string("cannot be read: ") + e.what());
  }
}

// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool utf8(const std::string& s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = b[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    unsigned cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < len; ++k) {
      if ((b[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b[i + k] & 0x3F);
    }
    static constexpr unsigned kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// Every text a model read from a file carries into Python (and into the JSON) must be UTF-8: a GGUF string is
// bytes, and a name that is not text is refused where it is read, naming the field.
void require_utf8(const std::string& field, const std::string& path, const ModelSpec& m) {
  auto check = [&](const std::string& s, const char* what) {
    if (!utf8(s)) throw InputError(field, path, std::string("its ") + what + " is not UTF-8 text");
  };
  for (const auto& [s, what] : {std::pair<const std::string*, const char*>{&m.id, "id"}, {&m.name, "name (general.name)"},
                                {&m.hf_id, "Hugging Face id"}, {&m.arch, "architecture (general.architecture)"},
                                {&m.family, "family"}, {&m.source, "source"}, {&m.note, "note"},
                                {&m.file_format, "file type"}})
    check(*s, what);
  for (const auto* list : {&m.aliases, &m.file_paths, &m.fields_used, &m.fields_assumed})
    for (const auto& s : *list) check(s, "metadata");
  for (const auto& t : m.file_tensors) check(t.name, "tensor name"), check(t.type, "tensor type");
  if (m.rope_scaling) check(m.rope_scaling->type, "rope scaling type");
  if (m.recurrent) check(m.recurrent->kind, "recurrent kind");
}

// The data files of --data directories (every *.yaml / *.yml at any depth, as the library reads them) must be
// UTF-8: the YAML reader passes other bytes on into names that Python cannot decode. A directory that does not
// exist is left to the library's own error.
void require_utf8_files(const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const fs::path& p = it->path();
      if (!it->is_regular_file(ec) || (p.extension() != ".yaml" && p.extension() != ".yml")) continue;
      std::ifstream in(p, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!utf8(bytes)) throw InputError(p.string(), "", "is not UTF-8 text (a data file must be)");
    }
  }
}

std::string joined(const std::vector<std::string>& dirs) {
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ":") + d;
  return out;
}

}  // namespace

void bind_detect(py::module_& m);  // python/src/detect.cpp: --gpu auto / --free auto
void bind_cli(py::module_& m);     // python/src/cli_bindings.cpp: the CLI as a function (kvplan serve, kvplan mcp)
void bind_remote(py::module_& m, void (*require_utf8)(const std::string&, const std::string&, const ModelSpec&));  // remote_bindings.cpp

PYBIND11_MODULE(_core, m) {
  m.doc() = "kvplan's C++ planner (libplanner). Private: use the kvplan package.";
  m.attr("__version__") = KVPLAN_VERSION;
  m.attr("SCHEMA_VERSION") = kSchemaVersion;
  py::register_exception_translator(&translate_exceptions);

  // ---------- the request ----------
  py::class_<Request>(m, "Request")
      .def(py::init<>())
      .def_readwrite("model", &Request::model)
      // a model read from a file (load_model_file); ModelSpec is bound read-only, so const stays const
      .def_property("model_spec", [](const Request& r) { return std::const_pointer_cast<ModelSpec>(r.model_spec); },
                    [](Request& r, std::shared_ptr<ModelSpec> spec) { r.model_spec = std::move(spec); })
      .def_readwrite("backend", &Request::backend)
      .def_readwrite("gpu", &Request::gpu)
      .def_readwrite("task", &Request::task)
      .def_readwrite("engine", &Request::engine)
      .def_readwrite("build", &Request::build)
      .def_readwrite("weights", &Request::weights)
      .def_readwrite("ctx_size", &Request::ctx_size)
      .def_readwrite("cache_type_k", &Request::cache_type_k)
      .def_readwrite("cache_type_v", &Request::cache_type_v)
      .def_readwrite("flash_attn", &Request::flash_attn)
      .def_readwrite("n_parallel", &Request::n_parallel)
      .def_readwrite("fit_placement", &Request::fit_placement)
      .def_readwrite("n_outputs_max", &Request::n_outputs_max)
      .def_readwrite("program", &Request::program)
      .def_readwrite("extra_gpus", &Request::extra_gpus)
      .def_readwrite("override_tensors", &Request::override_tensors)
      .def_readwrite("host_bandwidth_gbs", &Request::host_bandwidth_gbs)
      .def_readwrite("tensor_split", &Request::tensor_split)
      .def_readwrite("split_mode", &Request::split_mode)
      .def_readwrite("model_draft", &Request::model_draft)
      .def_property("model_draft_spec", [](const Request& r) { return std::const_pointer_cast<ModelSpec>(r.model_draft_spec); },
                    [](Request& r, std::shared_ptr<ModelSpec> spec) { r.model_draft_spec = std::move(spec); })
      .def_readwrite("weights_draft", &Request::weights_draft)
      .def_readwrite("cache_type_k_draft", &Request::cache_type_k_draft)
      .def_readwrite("cache_type_v_draft", &Request::cache_type_v_draft)
      .def_readwrite("n_gpu_layers_draft", &Request::n_gpu_layers_draft)
      .def_readwrite("draft_max", &Request::draft_max)
      .def_property("mmproj", [](const Request& r) { return std::const_pointer_cast<ProjectorSpec>(r.mmproj); },
                    [](Request& r, std::shared_ptr<ProjectorSpec> spec) { r.mmproj = std::move(spec); })
      .def_readwrite("mmproj_offload", &Request::mmproj_offload)
      .def_readwrite("fit_target_mib", &Request::fit_target_mib)
      .def_readwrite("tensor_parallel", &Request::tensor_parallel)
      // Serving at scale: the JSON request's names (libplanner/src/json.cpp to_json "request")
      .def_readwrite("pipeline_parallel_size", &Request::pipeline_parallel)
      .def_readwrite("data_parallel", &Request::data_parallel)
      .def_readwrite("expert_parallel", &Request::expert_parallel)
      .def_readwrite("nodes", &Request::nodes)
      .def_readwrite("interconnect", &Request::interconnect)
      .def_readwrite("max_num_seqs", &Request::max_num_seqs)
      .def_readwrite("concurrency", &Request::concurrency)
      .def_readwrite("max_batched_tokens", &Request::max_batched_tokens)
      .def_readwrite("rpc_servers", &Request::rpc_servers)
      .def_readwrite("kv_unified", &Request::kv_unified)
      .def_readwrite("n_ubatch", &Request::n_ubatch)
      .def_readwrite("n_batch", &Request::n_batch)
      .def_readwrite("swa_full", &Request::swa_full)
      .def_readwrite("allow_slow", &Request::allow_slow)
      .def_readwrite("n_gpu_layers", &Request::n_gpu_layers)
      .def_readwrite("n_cpu_moe", &Request::n_cpu_moe)
      .def_readwrite("rope_scaling", &Request::rope_scaling)
      .def_readwrite("rope_scale", &Request::rope_scale)
      .def_readwrite("yarn_orig_ctx", &Request::yarn_orig_ctx)
      .def_readwrite("reserve", &Request::reserve)
      .def_readwrite("free", &Request::free)
      .def_readwrite("host_ram", &Request::host_ram)
      .def_readwrite("top", &Request::top)
      .def_readwrite("max_ctx", &Request::max_ctx)
      .def_readwrite("accept_risk", &Request::accept_risk)
      .def_readwrite("host_ram_source", &Request::host_ram_source)
      .def_readwrite("free_per_gpu", &Request::free_per_gpu)
      .def_readwrite("gpu_detected", &Request::gpu_detected)
      .def_readwrite("suggest", &Request::suggest);

  // ---------- the plan ----------
  py::enum_<Accuracy>(m, "Accuracy").value("exact", Accuracy::exact).value("estimate", Accuracy::estimate);
  py::enum_<Risk>(m, "Risk")
      .value("free", Risk::free)
      .value("mild", Risk::mild)
      .value("noticeable", Risk::noticeable)
      .value("avoid", Risk::avoid);

  py::class_<Figure>(m, "Figure")
      .def_readonly("bytes", &Figure::bytes)
      .def_readonly("unpadded", &Figure::unpadded)
      .def_readonly("high", &Figure::high)
      .def_readonly("accuracy", &Figure::accuracy);

  py::class_<Pool>(m, "Pool")
      .def_readonly("id", &Pool::id)
      .def_readonly("kind", &Pool::kind)
      .def_readonly("device", &Pool::device)
      .def_readonly("detected", &Pool::detected)
      .def_readonly("backend", &Pool::backend)
      .def_readonly("capacity", &Pool::capacity)
      .def_readonly("reserve", &Pool::reserve)
      .def_readonly("overhead", &Pool::overhead)
      .def_readonly("margin", &Pool::margin)
      .def("bounded", &Pool::bounded)
      .def("budget", &Pool::budget);

  py::class_<Allocation>(m, "Allocation")
      .def_readonly("component", &Allocation::component)
      .def_readonly("what", &Allocation::what)
      .def_readonly("pool", &Allocation::pool)
      .def_readonly("figure", &Allocation::figure);

  py::class_<PoolUsage>(m, "PoolUsage")
      .def_readonly("pool", &PoolUsage::pool)
      .def_readonly("allocations", &PoolUsage::allocations)
      .def_readonly("allocations_high", &PoolUsage::allocations_high)
      .def_readonly("total", &PoolUsage::total)
      .def_readonly("total_high", &PoolUsage::total_high)
      .def_readonly("headroom", &PoolUsage::headroom);

  py::class_<Quality>(m, "Quality")
      .def_readonly("expected_loss", &Quality::expected_loss)
      .def_readonly("low", &Quality::low)
      .def_readonly("high", &Quality::high)
      .def_readonly("kv_loss", &Quality::kv_loss)
      .def_readonly("weights_loss", &Quality::weights_loss)
      .def_readonly("task_factor", &Quality::task_factor)
      .def_readonly("weights_factor", &Quality::weights_factor)
      .def_readonly("risk", &Quality::risk)
      .def_readonly("extrapolated", &Quality::extrapolated)
      .def_readonly("analogs", &Quality::analogs)
      .def_readonly("evidence", &Quality::evidence);

  py::class_<Launch>(m, "Launch").def_readonly("name", &Launch::name).def_readonly("text", &Launch::text);

  py::class_<Option>(m, "Option")
      .def_readonly("weights", &Option::weights)
      .def_readonly("ctx_size", &Option::ctx_size)
      .def_readonly("ctx_per_slot", &Option::ctx_per_slot)
      .def_readonly("cache_type_k", &Option::cache_type_k)
      .def_readonly("cache_type_v", &Option::cache_type_v)
      .def_readonly("flash_attn", &Option::flash_attn)
      .def_readonly("beyond_native", &Option::beyond_native)
      .def_readonly("below_task_min", &Option::below_task_min)
      .def_readonly("allocations", &Option::allocations)
      .def_readonly("pools", &Option::pools)
      .def_readonly("quality", &Option::quality)
      .def_readonly("needs", &Option::needs)
      .def_readonly("warnings", &Option::warnings)
      .def_readonly("reason", &Option::reason)
      .def_readonly("launch", &Option::launch)
      .def_readonly("launches", &Option::launches)
      .def_readonly("max_concurrency", &Option::max_concurrency)
      .def_readonly("decode_tps", &Option::decode_tps)
      .def_readonly("decode_tps_low", &Option::decode_tps_low)
      .def_readonly("decode_bound", &Option::decode_bound)
      .def_readonly("prefill_tps", &Option::prefill_tps)
      .def_readonly("decode_relative", &Option::decode_relative)
      .def_readonly("ttft_s", &Option::ttft_s)
      .def_readonly("n_gpu_layers", &Option::n_gpu_layers)
      .def_readonly("n_cpu_moe", &Option::n_cpu_moe)
      .def_readonly("score", &Option::score)
      .def("sum", &Option::sum, py::arg("what"), py::arg("pool") = std::string())
      .def("usage", &Option::usage, py::arg("pool"))
      .def("fits", &Option::fits);

  py::class_<Resolved>(m, "Resolved")
      .def_readonly("engine", &Resolved::engine)
      .def_readonly("engine_build", &Resolved::engine_build)
      .def_readonly("engine_id", &Resolved::engine_id)
      .def_readonly("memory_fraction", &Resolved::memory_fraction)
      .def_readonly("backend", &Resolved::backend)
      .def_readonly("build", &Resolved::build)
      .def_readonly("backend_verified", &Resolved::backend_verified)
      .def_readonly("n_parallel", &Resolved::n_parallel)
      .def_readonly("tensor_parallel", &Resolved::tensor_parallel)
      .def_readonly("kv_unified", &Resolved::kv_unified)
      .def_readonly("n_ubatch", &Resolved::n_ubatch)
      .def_readonly("n_batch", &Resolved::n_batch)
      .def_readonly("n_outputs_max", &Resolved::n_outputs_max)
      .def_readonly("program", &Resolved::program)
      .def_readonly("swa_full", &Resolved::swa_full)
      .def_readonly("gpu_size_only", &Resolved::gpu_size_only)
      .def_readonly("n_gpu_layers", &Resolved::n_gpu_layers)
      .def_readonly("n_cpu_moe", &Resolved::n_cpu_moe)
      .def_readonly("placement", &Resolved::placement)
      .def_readonly("tensor_split", &Resolved::tensor_split)
      .def_readonly("pipeline_parallel", &Resolved::pipeline_parallel)
      .def_readonly("fit_target_mib", &Resolved::fit_target_mib);

  py::class_<Suggestion>(m, "Suggestion")
      .def_readonly("summary", &Suggestion::summary)
      .def_readonly("request", &Suggestion::request)
      .def_readonly("args", &Suggestion::args)
      .def_readonly("option", &Suggestion::option);

  // model and task point into the catalog, which plan() keeps alive for as long as the plan lives
  py::class_<Plan>(m, "Plan")
      .def_readonly("request", &Plan::request)
      .def_readonly("resolved", &Plan::resolved)
      .def_property_readonly("model", [](const Plan& p) { return p.model; }, py::return_value_policy::reference_internal)
      .def_property_readonly("task", [](const Plan& p) { return p.task; }, py::return_value_policy::reference_internal)
      .def_readonly("pools", &Plan::pools)
      .def_readonly("options", &Plan::options)
      .def_readonly("mode", &Plan::mode)
      .def_readonly("warnings", &Plan::warnings)
      .def_readonly("nothing_fits", &Plan::nothing_fits)
      .def_readonly("explanation", &Plan::explanation)
      .def_readonly("verdict", &Plan::verdict)
      .def_readonly("nothing_acceptable", &Plan::nothing_acceptable)
      .def_readonly("suggestions", &Plan::suggestions)
      .def("fits", &Plan::fits);

  // ---------- the catalog ----------
  py::class_<RopeScaling>(m, "RopeScaling")
      .def_readonly("type", &RopeScaling::type)
      .def_readonly("factor", &RopeScaling::factor)
      .def_readonly("orig_ctx", &RopeScaling::orig_ctx);
  py::class_<SlidingWindow>(m, "SlidingWindow")
      .def_readonly("window", &SlidingWindow::window)
      .def_readonly("pattern", &SlidingWindow::pattern)
      .def_readonly("chunked", &SlidingWindow::chunked);
  py::class_<Mla>(m, "Mla")
      .def_readonly("kv_lora_rank", &Mla::kv_lora_rank)
      .def_readonly("rope_dim", &Mla::rope_dim)
      .def_readonly("legacy", &Mla::legacy);
  py::class_<Recurrent>(m, "Recurrent")
      .def_readonly("kind", &Recurrent::kind)
      .def_readonly("d_conv", &Recurrent::d_conv)
      .def_readonly("d_inner", &Recurrent::d_inner)
      .def_readonly("d_state", &Recurrent::d_state)
      .def_readonly("n_group", &Recurrent::n_group)
      .def_readonly("head_size", &Recurrent::head_size);
  py::class_<Moe>(m, "Moe")
      .def_readonly("experts", &Moe::experts)
      .def_readonly("experts_used", &Moe::experts_used)
      .def_readonly("expert_ff", &Moe::expert_ff)
      .def_readonly("shared_ff", &Moe::shared_ff);

  py::class_<ModelSpec, std::shared_ptr<ModelSpec>>(m, "ModelSpec")
      .def_readonly("id", &ModelSpec::id)
      .def_readonly("name", &ModelSpec::name)
      .def_readonly("hf_id", &ModelSpec::hf_id)
      .def_readonly("arch", &ModelSpec::arch)
      .def_readonly("family", &ModelSpec::family)
      .def_readonly("license", &ModelSpec::license)
      .def_readonly("license_source", &ModelSpec::license_source)
      .def_readonly("source", &ModelSpec::source)
      .def_readonly("note", &ModelSpec::note)
      .def_readonly("aliases", &ModelSpec::aliases)
      .def_readonly("params", &ModelSpec::params)
      .def_readonly("layers", &ModelSpec::layers)
      .def_readonly("embd", &ModelSpec::embd)
      .def_readonly("heads", &ModelSpec::heads)
      .def_readonly("kv_heads", &ModelSpec::kv_heads)
      .def_readonly("head_dim_k", &ModelSpec::head_dim_k)
      .def_readonly("head_dim_v", &ModelSpec::head_dim_v)
      .def_readonly("ff", &ModelSpec::ff)
      .def_readonly("vocab", &ModelSpec::vocab)
      .def_readonly("tied_embeddings", &ModelSpec::tied_embeddings)
      .def_readonly("ctx_native", &ModelSpec::ctx_native)
      .def_readonly("ctx_extended", &ModelSpec::ctx_extended)
      .def_readonly("rope_scaling", &ModelSpec::rope_scaling)
      .def_readonly("swa", &ModelSpec::swa)
      .def_readonly("moe", &ModelSpec::moe)
      .def_readonly("mla", &ModelSpec::mla)
      .def_readonly("recurrent", &ModelSpec::recurrent)
      .def_readonly("file_format", &ModelSpec::file_format)
      .def_readonly("file_paths", &ModelSpec::file_paths)
      .def_readonly("fields_used", &ModelSpec::fields_used)
      .def_readonly("fields_assumed", &ModelSpec::fields_assumed)
      .def("max_ctx", &ModelSpec::max_ctx);

  py::class_<GpuSpec>(m, "GpuSpec")
      .def_readonly("id", &GpuSpec::id)
      .def_readonly("name", &GpuSpec::name)
      .def_readonly("vendor", &GpuSpec::vendor)
      .def_readonly("backend", &GpuSpec::backend)
      .def_readonly("memory_kind", &GpuSpec::memory_kind)
      .def_readonly("arch", &GpuSpec::arch)
      .def_readonly("source", &GpuSpec::source)
      .def_readonly("aliases", &GpuSpec::aliases)
      .def_readonly("total_mib", &GpuSpec::total_mib)
      .def_readonly("working_set_mib", &GpuSpec::working_set_mib)
      .def_readonly("bandwidth_gbs", &GpuSpec::bandwidth_gbs);

  py::class_<EngineSpec>(m, "EngineSpec")
      .def_readonly("id", &EngineSpec::id)
      .def_readonly("name", &EngineSpec::name)
      .def_readonly("build_name", &EngineSpec::build_name)
      .def_readonly("build", &EngineSpec::build)
      .def_readonly("vendored_by", &EngineSpec::vendored_by)
      .def_readonly("cache_types", &EngineSpec::cache_types)
      .def_readonly("cache_types_offered", &EngineSpec::cache_types_offered);

  py::class_<WeightFormat>(m, "WeightFormat")
      .def_readonly("id", &WeightFormat::id)
      .def_readonly("base_type", &WeightFormat::base_type)
      .def_readonly("source", &WeightFormat::source)
      .def_readonly("quality_source", &WeightFormat::quality_source)
      .def_readonly("rel_loss", &WeightFormat::rel_loss)
      .def_readonly("rel_loss_estimate", &WeightFormat::rel_loss_estimate)
      .def_readonly("bpw_llama31_8b", &WeightFormat::bpw_llama31_8b)
      .def_readonly("offered", &WeightFormat::offered);

  py::class_<TaskProfile>(m, "TaskProfile")
      .def_readonly("id", &TaskProfile::id)
      .def_readonly("name", &TaskProfile::name)
      .def_readonly("metric", &TaskProfile::metric)
      .def_readonly("summary", &TaskProfile::summary)
      .def_readonly("source", &TaskProfile::source)
      .def_readonly("aliases", &TaskProfile::aliases)
      .def_readonly("ctx_target", &TaskProfile::ctx_target)
      .def_readonly("ctx_min", &TaskProfile::ctx_min)
      .def_readonly("decode_floor_tps", &TaskProfile::decode_floor_tps)
      .def_readonly("ttft_max_s", &TaskProfile::ttft_max_s)
      .def_readonly("speed_source", &TaskProfile::speed_source);

  py::class_<RuntimeCacheType>(m, "RuntimeCacheType")
      .def_readonly("id", &RuntimeCacheType::id)
      .def_readonly("k_bytes", &RuntimeCacheType::k_bytes)
      .def_readonly("v_bytes", &RuntimeCacheType::v_bytes)
      .def_readonly("offered", &RuntimeCacheType::offered);
  py::class_<RuntimeProfile>(m, "RuntimeProfile")
      .def_readonly("id", &RuntimeProfile::id)
      .def_readonly("name", &RuntimeProfile::name)
      .def_readonly("kind", &RuntimeProfile::kind)
      .def_readonly("version", &RuntimeProfile::version)
      .def_readonly("same_type_kv", &RuntimeProfile::same_type_kv)
      .def_readonly("rules", &RuntimeProfile::rules)
      .def_readonly("cache_types", &RuntimeProfile::cache_types)
      .def_readonly("weight_formats", &RuntimeProfile::weight_formats);

  py::class_<Catalog>(m, "Catalog")
      .def_readonly("models", &Catalog::models)
      .def_readonly("gpus", &Catalog::gpus)
      .def_readonly("engines", &Catalog::engines)
      .def_readonly("runtimes", &Catalog::runtimes)
      .def_readonly("weight_formats", &Catalog::weight_formats)
      .def_readonly("tasks", &Catalog::tasks)
      .def("model", &Catalog::model, py::arg("name"), py::arg("field") = "--model", py::return_value_policy::reference_internal)
      .def("gpu", &Catalog::gpu, py::arg("name"), py::arg("field") = "--gpu", py::return_value_policy::reference_internal)
      .def("engine", &Catalog::engine, py::arg("id"), py::arg("field") = "--engine", py::return_value_policy::reference_internal)
      .def("runtime", &Catalog::runtime, py::arg("name"), py::arg("field") = "--engine", py::return_value_policy::reference_internal);

  // ---------- functions ----------
  m.def("builtin_catalog", &builtin_catalog, py::return_value_policy::reference);
  m.def("load_catalog",
        [](const std::vector<std::string>& dirs) {
          return reading("--data", joined(dirs), [&] {
            require_utf8_files(dirs);
            return load_catalog(dirs);
          });
        },
        py::arg("extra_dirs"));
  m.def("plan", &plan, py::arg("catalog"), py::arg("request"), py::keep_alive<0, 1>(), py::call_guard<py::gil_scoped_release>());
  m.def("to_json", py::overload_cast<const Plan&, int>(&to_json), py::arg("plan"), py::arg("indent") = 2);
  // What fits and needs (docs/ranking.md §9, §10) as their JSON contract (schema/what_fits.schema.json).
  m.def("what_fits_json",
        [](const Catalog& catalog, const Request& base, const std::vector<std::string>& models, std::optional<int> min_ctx,
           std::optional<double> min_tps, const std::string& family, const std::string& arch_kind, int top,
           const std::vector<std::string>& licenses) {
          WhatFitsRequest q;
          q.base = base;
          q.models = models;
          if (base.model_spec) q.model_specs.push_back(base.model_spec);
          q.base.model_spec = nullptr;
          q.min_ctx = min_ctx;
          q.min_tps = min_tps;
          q.family = family;
          q.arch_kind = arch_kind;
          q.licenses = licenses;
          q.top = top;
          return to_json(what_fits(catalog, q));
        },
        py::arg("catalog"), py::arg("request"), py::arg("models"), py::arg("min_ctx"), py::arg("min_tps"), py::arg("family"),
        py::arg("arch_kind"), py::arg("top"), py::arg("licenses") = std::vector<std::string>{}, py::call_guard<py::gil_scoped_release>());
  m.def("needs_json", [](const Catalog& catalog, const Request& base, int max_count) { return to_json(needs(catalog, base, max_count)); },
        py::arg("catalog"), py::arg("request"), py::arg("max_count") = 8, py::call_guard<py::gil_scoped_release>());
  m.attr("WHAT_FITS_SCHEMA_VERSION") = kWhatFitsSchemaVersion;
  m.def("request_args", &request_args, py::arg("request"));
  m.def("load_model_file",
        [](const std::string& path, const Catalog& catalog, const std::string& engine, const std::string& field) {
          auto spec = reading(field, path, [&] { return std::const_pointer_cast<ModelSpec>(load_model_file(path, catalog, engine)); });
          require_utf8(field, path, *spec);
          return spec;
        },
        py::arg("path"), py::arg("catalog"), py::arg("engine") = "llama.cpp", py::arg("field") = "--model");
  m.def("model_to_json", &model_to_json, py::arg("model"), py::arg("indent") = 2);
  bind_remote(m, &require_utf8);
  py::class_<ProjectorSpec, std::shared_ptr<ProjectorSpec>>(m, "ProjectorSpec")
      .def_readonly("path", &ProjectorSpec::path)
      .def_readonly("projector_type", &ProjectorSpec::projector_type)
      .def("n_patches", &ProjectorSpec::n_patches);
  m.def("load_projector_file",
        [](const std::string& path, const Catalog& catalog) {
          auto spec = reading("--mmproj", path, [&] { return std::const_pointer_cast<ProjectorSpec>(load_projector_file(path, catalog)); });
          if (!utf8(spec->projector_type)) throw InputError("--mmproj", path, "its projector type (clip.projector_type) is not UTF-8 text");
          return spec;
        },
        py::arg("path"), py::arg("catalog"));
  m.def("parse_size",
        [](const std::string& text, const std::string& field) { return reading(field, text, [&] { return parse_size(text, field); }); },
        py::arg("text"), py::arg("field"));
  m.def("parse_token_count",
        [](const std::string& text, const std::string& field) { return reading(field, text, [&] { return parse_token_count(text, field); }); },
        py::arg("text"), py::arg("field"));
  // for the input errors of the Python layer's own parsing: the library's exception, so the library's message
  m.def("raise_input_error",
        [](const std::string& field, const std::string& value, const std::string& problem, const std::vector<std::string>& accepted,
           const std::string& suggestion) { throw InputError(field, value, problem, accepted, suggestion); },
        py::arg("field"), py::arg("value"), py::arg("problem"), py::arg("accepted") = std::vector<std::string>{},
        py::arg("suggestion") = std::string());
  m.def("closest_match", &closest_match, py::arg("wanted"), py::arg("candidates"));
  m.def("format_gib", &format_gib, py::arg("bytes"));
  bind_detect(m);
  bind_cli(m);
}
