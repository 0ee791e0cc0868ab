// kvplan --mmproj FILE: a vision projector GGUF (tools/mtmd/clip.cpp clip_model_loader; keys in clip-impl.h).
#include <filesystem>

#include <fmt/format.h>

#include "kvplan/checked.hpp"
#include "kvplan/error.hpp"
#include "kvplan/model_file.hpp"

namespace kvplan {
namespace {
int number(const GgufHeader& h, const std::string& key, const std::string& path, long long max) {
  auto it = h.metadata.find(key);
  if (it == h.metadata.end()) return 0;
  double v = -1;
  if (const auto* i = std::get_if<std::int64_t>(&it->second)) v = static_cast<double>(*i);
  else if (const auto* u = std::get_if<std::uint64_t>(&it->second)) v = static_cast<double>(*u);
  if (!(v >= 0 && v <= static_cast<double>(max)))
    throw InputError(path, key, fmt::format("is not a sane non-negative integer (accepted: 0..{})", max));
  return static_cast<int>(v);
}
}  // namespace

std::shared_ptr<const ProjectorSpec> load_projector_file(const std::string& path, const Catalog& catalog) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError("--mmproj", path, "no such file");
  const GgufHeader h = read_gguf_header(path, "--mmproj");
  auto arch = h.metadata.find("general.architecture");
  const std::string* name = arch == h.metadata.end() ? nullptr : std::get_if<std::string>(&arch->second);
  if (!name || *name != "clip")
    throw InputError("--mmproj", path, fmt::format("is not a vision projector (general.architecture is '{}', expected 'clip')",
                                                  name ? *name : std::string("missing")));
  auto spec = std::make_shared<ProjectorSpec>();
  spec->path = path;
  if (auto t = h.metadata.find("clip.projector_type"); t != h.metadata.end())
    if (const auto* s = std::get_if<std::string>(&t->second)) spec->projector_type = *s;
  spec->image_size = number(h, "clip.vision.image_size", path, 16384);
  spec->patch_size = number(h, "clip.vision.patch_size", path, 16384);
  spec->embd = number(h, "clip.vision.embedding_length", path, 1 << 20);
  spec->ff = number(h, "clip.vision.feed_forward_length", path, 1 << 22);
  spec->heads = number(h, "clip.vision.attention.head_count", path, 1 << 14);
  spec->layers = number(h, "clip.vision.block_count", path, 4096);
  if (spec->patch_size > 0 && spec->image_size % spec->patch_size != 0)
    throw InputError(path, "clip.vision.image_size", "is not a multiple of clip.vision.patch_size");
  const EngineSpec& engine = catalog.engine("llama.cpp");
  for (const auto& t : h.tensors) {
    const GgmlType* type = nullptr;
    for (const auto& g : engine.ggml_types)
      if (static_cast<std::uint32_t>(g.id) == t.type) type = &g;
    if (!type) throw InputError(path, t.name, fmt::format("tensor has ggml type {}, which kvplan does not know", t.type));
    if (t.ne.empty() || t.ne[0] % type->block != 0) throw InputError(path, t.name, "row is not a whole number of blocks");
    std::int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows = checked_mul(rows, t.ne[d], "tensor " + t.name + " shape");
    const auto bytes = static_cast<std::uint64_t>(checked_mul(type->row_size(t.ne[0]), rows, "tensor " + t.name + " bytes"));
    std::uint64_t end = 0;
    if (__builtin_add_overflow(h.data_offset, t.offset, &end) || __builtin_add_overflow(end, bytes, &end) || end > h.file_size) throw InputError(path, t.name, "tensor data lies outside the file (truncated or corrupt)");
    spec->tensors.push_back({t.name, type->name, t.ne[0], rows, false});
  }
  if (spec->tensors.empty()) throw InputError(path, "", "the projector holds no tensors");
  return spec;
}

}  // namespace kvplan
