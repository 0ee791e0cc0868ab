// Remote models, header only (net/include/kvplan/remote.hpp): the Hub's public HTTP API as huggingface_hub speaks
// it (hf_api.py list_repo_tree: GET /api/models/{repo}/tree/{rev}?recursive=true, paginated by Link; file_download.py
// hf_hub_url: /{repo}/resolve/{rev}/{file}; Authorization: Bearer $HF_TOKEN), llama.cpp's choice of file for
// repo:quant (common/download.cpp find_best_model, get_split_files), and Ollama's registry (server/images.go
// pullModelManifest: /v2/{namespace}/{model}/manifests/{tag}; the layer application/vnd.ollama.image.model is the
// GGUF blob at /v2/{namespace}/{model}/blobs/{digest}). GGUF headers and safetensors headers are read with Range
// requests that grow until the header parses, never the tensor data; what is read goes through the same pure
// readers (and validation) as a local file.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <curl/curl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "http.hpp"
#include "kvplan/error.hpp"
#include "kvplan/model_file.hpp"
#include "kvplan/remote.hpp"

namespace kvplan::net {
namespace {

using json = nlohmann::json;

constexpr std::uint64_t kFirstChunk = 256 * 1024;          // most GGUF headers of small models fit; big vocabularies take a few MiB
constexpr std::uint64_t kMaxHeaderBytes = 64ull << 20;     // a GGUF or safetensors header larger than this is refused
constexpr std::uint64_t kMaxJsonBytes = 16ull << 20;       // config.json, an index, a listing page, a manifest
constexpr std::uint64_t kMaxSafetensorsHeader = 100000000; // safetensors' own MAX_HEADER_SIZE
constexpr int kMaxListingPages = 100;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string without_trailing_slash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// Each path segment percent-encoded (a repo's file names are the repo owner's choice).
std::string escape_path(const std::string& path) {
  std::string out;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    char* e = curl_easy_escape(nullptr, path.c_str() + start, static_cast<int>(end - start));
    if (start) out += '/';
    out += e ? e : "";
    curl_free(e);
    start = end + 1;
  }
  return out;
}

// A name from a server is shown to the user: no control characters (a terminal would obey them).
bool printable(const std::string& s) {
  return std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// huggingface_hub's token (utils/_auth.py get_token, v2.4.0): $HF_TOKEN, else $HUGGING_FACE_HUB_TOKEN, else the
// token file (constants.py HF_TOKEN_PATH: $HF_TOKEN_PATH, else $HF_HOME/token, HF_HOME defaulting to
// $XDG_CACHE_HOME/huggingface, XDG_CACHE_HOME to ~/.cache; a leading ~ is the home folder), each cleaned as
// _clean_token does (CR and LF removed, surrounding spaces stripped; empty = none). `source` says where it came from.
// Not followed: $VAR expansion inside those paths (os.path.expandvars), OIDC and Colab tokens.
std::string clean_token(std::string t) {
  t.erase(std::remove_if(t.begin(), t.end(), [](char c) { return c == '\r' || c == '\n'; }), t.end());
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!t.empty() && space(t.back())) t.pop_back();
  t.erase(t.begin(), std::find_if_not(t.begin(), t.end(), space));
  return t;
}
std::string expand_home(const std::string& path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  return env("HOME") + path.substr(1);
}
std::string hub_token(std::string& source) {
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    const std::string t = clean_token(env(name));
    if (!t.empty()) return source = std::string("$") + name, t;
  }
  const std::string home = !env("HF_HOME").empty() ? env("HF_HOME")
                         : (env("XDG_CACHE_HOME").empty() ? "~/.cache" : env("XDG_CACHE_HOME")) + "/huggingface";
  const std::string path = expand_home(env("HF_TOKEN_PATH").empty() ? home + "/token" : env("HF_TOKEN_PATH"));
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return source = "", "";  // huggingface_hub: FileNotFoundError = no token
  constexpr std::uintmax_t kMaxTokenFile = 64 * 1024;
  if (!std::filesystem::is_regular_file(path, ec) || std::filesystem::file_size(path, ec) > kMaxTokenFile || ec)
    throw InputError("HF_TOKEN_PATH", path, fmt::format("the Hugging Face token file is not a readable file of at most {} KiB", kMaxTokenFile / 1024),
                     {"a file holding one token (huggingface-cli login writes it)", "HF_TOKEN=hf_..."});
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string t = clean_token(text);
  if (!printable(t)) throw InputError("HF_TOKEN_PATH", path, "the Hugging Face token file holds control characters, not a token");
  source = t.empty() ? "" : path;
  return t;
}

// One model's reads: the settings, the headers every request carries, and how errors name the model.
struct Reader {
  HttpSettings settings = HttpSettings::from_environment();
  std::string id;
  std::vector<std::string> headers;
  std::string denied_hint;     // said after a 401/403
  std::string not_found_hint;  // said after a 404

  HttpReply get(const std::string& url, const std::string& what, std::optional<ByteRange> range = std::nullopt,
                std::uint64_t max_bytes = kMaxJsonBytes) const {
    try {
      return http_get({url, headers, range, max_bytes}, settings);
    } catch (const HttpError& e) {
      std::string cause = e.what();
      if ((e.status == 401 || e.status == 403) && !denied_hint.empty()) cause += ": " + denied_hint;
      if (e.status == 404) cause += not_found_hint.empty() ? " (not found)" : ": " + not_found_hint;
      if (e.status == 0 && !not_found_hint.empty()) cause += " (and no such file or folder here)";
      throw InputError("--model", id, fmt::format("reading {} ({}): {}", what, url, cause));
    }
  }
  json get_json(const std::string& url, const std::string& what) const {
    const std::string body = get(url, what).body;
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded()) throw InputError("--model", id, fmt::format("reading {} ({}): the server sent something that is not JSON", what, url));
    return j;
  }
  [[noreturn]] void fail(const std::string& why) const { throw InputError("--model", id, why); }
};

// A GGUF header by Range: a first chunk, then only the missing bytes, until the header parses (at most 64 MiB).
GgufHeader read_gguf(const Reader& r, const std::string& url, const std::string& name) {
  std::string buf;
  std::uint64_t total = 0, want = kFirstChunk;
  for (;;) {
    const std::uint64_t last = (total ? std::min(want, total) : want) - 1;
    const HttpReply part = r.get(url, name, ByteRange{buf.size(), last}, last + 1 - buf.size());
    if (total && part.total_size != total) r.fail(fmt::format("{} changed size while it was read ({} then {} bytes)", name, total, part.total_size));
    total = part.total_size;
    buf += part.body;
    try {
      GgufPrefix p = parse_gguf_prefix(reinterpret_cast<const std::uint8_t*>(buf.data()), buf.size(), total, name);
      if (p.header) return std::move(*p.header);
      if (p.need > kMaxHeaderBytes) r.fail(fmt::format("{}: a GGUF header larger than {} MiB is refused", name, kMaxHeaderBytes >> 20));
      want = std::min({std::max<std::uint64_t>(buf.size() * 2, p.need), kMaxHeaderBytes, total});
    } catch (const InputError& e) {
      if (e.field() == "--model") throw;
      r.fail(e.what());  // the reader's message names the file: "name: not a valid GGUF file: ..."
    }
  }
}

// llama.cpp's split naming: PREFIX-NNNNN-of-MMMMM.gguf -> {prefix, index, count}; count 1 when not split.
struct SplitName {
  std::string prefix;
  int index = 1, count = 1;
};
SplitName split_name(const std::string& path) {
  std::string stem = path.substr(0, path.size() - std::min<size_t>(path.size(), 5));  // without ".gguf"
  const std::string shape = "-00000-of-00000";
  if (stem.size() <= shape.size()) return {stem};
  const size_t at = stem.size() - shape.size();
  auto digits = [&](size_t from) {
    int v = 0;
    for (size_t i = from; i < from + 5; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(stem[i]))) return -1;
      v = v * 10 + (stem[i] - '0');
    }
    return v;
  };
  const int index = digits(at + 1), count = digits(at + 10);
  if (stem[at] != '-' || stem.compare(at + 6, 4, "-of-") != 0 || index < 1 || count < 1) return {stem};
  return {stem.substr(0, at), index, count};
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// common/download.cpp gguf_filename_is_model: sidecars (projectors, imatrix, MTP/EAGLE/DFlash drafts) are not the model.
bool is_model_gguf(const std::string& path) {
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".gguf") != 0) return false;
  const std::string file = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  for (const char* side : {"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"})
    if (file.find(side) != std::string::npos) return false;
  return true;
}

// common/download.cpp find_best_model: the first model GGUF whose path holds TAG followed by '.' or '-' (case
// folded; Q4_K_M then Q8_0 when no tag is given, then any), the first split of a split model.
std::string best_gguf(const std::vector<std::string>& files, const std::string& tag) {
  const std::vector<std::string> tags = tag.empty() ? std::vector<std::string>{"Q4_K_M", "Q8_0"} : std::vector<std::string>{tag};
  for (const auto& t : tags)
    for (const auto& f : files) {
      const std::string up = upper(f), want = upper(t);
      bool hit = false;
      for (size_t at = up.find(want); at != std::string::npos && !hit; at = up.find(want, at + 1))
        hit = at + want.size() < up.size() && (up[at + want.size()] == '.' || up[at + want.size()] == '-');
      if (hit && is_model_gguf(f) && split_name(f).index == 1) return f;
    }
  if (tag.empty())
    for (const auto& f : files)
      if (is_model_gguf(f) && split_name(f).index == 1) return f;
  return "";
}

// Every split of the model `first` begins, in order (common/download.cpp get_split_files).
std::vector<std::string> splits_of(const std::vector<std::string>& files, const std::string& first) {
  const SplitName s = split_name(first);
  std::vector<std::string> out(static_cast<size_t>(s.count));
  for (const auto& f : files)
    if (const SplitName o = split_name(f); o.count == s.count && o.prefix == s.prefix) out[static_cast<size_t>(o.index - 1)] = f;
  return out;
}

std::shared_ptr<ModelSpec> from_ggufs(const Reader& r, const std::vector<std::string>& urls, const std::vector<std::string>& names,
                                            const Catalog& catalog, const std::string& engine) {
  std::vector<GgufHeader> headers;
  for (size_t i = 0; i < urls.size(); ++i) headers.push_back(read_gguf(r, urls[i], names[i]));
  // the files found by name must be the splits the first one says (llama.cpp refuses a mismatch on load)
  const auto count = headers.front().metadata.find("split.count");
  const auto* n = count == headers.front().metadata.end() ? nullptr : std::get_if<std::int64_t>(&count->second);
  if (n ? *n != static_cast<std::int64_t>(urls.size()) : urls.size() > 1)
    r.fail(fmt::format("{}: split.count is {} but {} split file(s) were found", names.front(), n ? *n : 1, urls.size()));
  try {
    return std::make_shared<ModelSpec>(model_from_gguf(headers, urls, catalog, catalog.engine(engine)));
  } catch (const InputError& e) {
    r.fail(e.what());
  }
}

// ---- the Hub ----

struct Hub {
  Reader reader;
  std::string endpoint, repo, revision = "main";

  std::string file_url(const std::string& path) const { return fmt::format("{}/{}/resolve/{}/{}", endpoint, repo, revision, escape_path(path)); }

  // Every file path of the repo (list_repo_tree, recursive, following the pages).
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    std::string url = fmt::format("{}/api/models/{}/tree/{}?recursive=true", endpoint, repo, revision);
    for (int page = 0; !url.empty() && page < kMaxListingPages; ++page) {
      const HttpReply reply = reader.get(url, "the repo's file list");
      const json j = json::parse(reply.body, nullptr, false);
      if (!j.is_array()) reader.fail(fmt::format("the Hub's file list of {} ({}) is not a JSON array", repo, url));
      for (const auto& e : j)
        if (e.is_object() && e.contains("type") && e["type"] == "file" && e.contains("path") && e["path"].is_string() &&
            printable(e["path"].get<std::string>()))
          out.push_back(e["path"].get<std::string>());
      url = reply.next_page;
    }
    return out;
  }
};

std::shared_ptr<ModelSpec> hub_gguf(const Hub& hub, const std::vector<std::string>& files, const RemoteId& id, const Catalog& catalog,
                                    const std::string& engine) {
  const std::string first = best_gguf(files, id.tag);
  if (first.empty()) {
    std::vector<std::string> ggufs;
    for (const auto& f : files)
      if (is_model_gguf(f) && split_name(f).index == 1) ggufs.push_back(f);
    throw InputError("--model", id.spelled, fmt::format("{} has no GGUF for the quant '{}'", hub.repo, id.tag), ggufs);
  }
  const std::vector<std::string> paths = splits_of(files, first);
  std::vector<std::string> urls;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i].empty()) hub.reader.fail(fmt::format("{}: split {} of {} is not in the repo", first, i + 1, paths.size()));
    urls.push_back(hub.file_url(paths[i]));
  }
  auto m = (from_ggufs(hub.reader, urls, paths, catalog, engine));
  const std::string spec = id.tag.empty() ? hub.repo : hub.repo + ":" + id.tag;
  m->remote = ModelSpec::Remote{"hub", id.spelled, "-hf", spec, "hf.co/" + spec};
  m->source = fmt::format("GGUF header of {} in the Hub repo {} (read by range)", first, hub.repo);
  return m;
}

// A safetensors file's checkpoint size from its header (8-byte length, then JSON with each tensor's data_offsets),
// written as the index's metadata.total_size so the config reader counts parameters as for a folder.
std::string safetensors_index(const Hub& hub, const std::string& path) {
  const std::string url = hub.file_url(path);
  const HttpReply head = hub.reader.get(url, path, ByteRange{0, 7}, 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head.body[static_cast<size_t>(i)]);
  if (n < 2 || n > kMaxSafetensorsHeader || n > head.total_size - 8)
    hub.reader.fail(fmt::format("{}: not a safetensors file (its header claims {} bytes)", path, n));
  const json j = json::parse(hub.reader.get(url, path, ByteRange{8, 8 + n - 1}, n).body, nullptr, false);
  if (!j.is_object()) hub.reader.fail(fmt::format("{}: the safetensors header is not a JSON object", path));
  double total = 0;
  for (const auto& [name, t] : j.items()) {
    if (name == "__metadata__") continue;
    const json* off = t.is_object() && t.contains("data_offsets") ? &t["data_offsets"] : nullptr;
    if (!off || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned() ||
        (*off)[1].get<std::uint64_t>() < (*off)[0].get<std::uint64_t>() || (*off)[1].get<std::uint64_t>() > head.total_size - 8 - n)
      hub.reader.fail(fmt::format("{}: tensor '{}' has no valid data_offsets", path, name.substr(0, 80)));
    total = std::max(total, static_cast<double>((*off)[1].get<std::uint64_t>()));
  }
  return json{{"metadata", {{"total_size", total}}}}.dump();
}

std::shared_ptr<ModelSpec> hub_config(const Hub& hub, const std::vector<std::string>& files, const RemoteId& id, const Catalog& catalog,
                                      const std::string& engine) {
  auto has = [&](const char* f) { return std::find(files.begin(), files.end(), f) != files.end(); };
  const std::string config = hub.reader.get(hub.file_url("config.json"), "config.json").body;
  std::optional<std::string> index;
  if (has("model.safetensors.index.json")) index = hub.reader.get(hub.file_url("model.safetensors.index.json"), "model.safetensors.index.json").body;
  else if (has("model.safetensors")) index = safetensors_index(hub, "model.safetensors");
  std::shared_ptr<const ModelSpec> spec;
  try {
    spec = model_from_config_json(config, index, hub.repo + "/config.json", catalog, engine);
  } catch (const InputError& e) {
    hub.reader.fail(e.what());
  }
  auto m = std::make_shared<ModelSpec>(*spec);
  m->hf_id = hub.repo;
  m->file_paths = {hub.file_url("config.json")};
  m->remote = ModelSpec::Remote{"hub", id.spelled, "", "", ""};
  m->source = fmt::format("config.json of the Hub repo {}{}", hub.repo, index ? " and its safetensors index or header" : "");
  return m;
}

std::shared_ptr<ModelSpec> load_hub(const RemoteId& id, const Catalog& catalog, const std::string& engine) {
  Hub hub{{}, without_trailing_slash(env("HF_ENDPOINT").empty() ? "https://huggingface.co" : env("HF_ENDPOINT")), id.repo};
  hub.reader.id = id.spelled;
  std::string token_source;
  const std::string token = hub_token(token_source);
  if (!token.empty()) hub.reader.headers.push_back("Authorization: Bearer " + token);
  hub.reader.not_found_hint = fmt::format("no such repo or file on {} (and no such file or folder here)", hub.endpoint);
  hub.reader.denied_hint = fmt::format("{} is gated or private, or does not exist: accept its terms at {}/{} and set HF_TOKEN to a token "
                                       "that can read it{}",
                                       id.repo, hub.endpoint, id.repo,
                                       token.empty() ? " (no token: HF_TOKEN is not set and there is no token file)" : " (the token of " + token_source + ")");
  const std::vector<std::string> files = hub.files();
  const bool ggufs = std::any_of(files.begin(), files.end(), is_model_gguf);
  if (ggufs) return hub_gguf(hub, files, id, catalog, engine);
  if (!id.tag.empty()) hub.reader.fail(fmt::format("{} holds no GGUF file, so there is no quant '{}' to read", id.repo, id.tag));
  if (std::find(files.begin(), files.end(), "config.json") == files.end())
    hub.reader.fail(fmt::format("{} has neither a GGUF nor a config.json", id.repo));
  return hub_config(hub, files, id, catalog, engine);
}

// ---- a GGUF by URL, and Ollama's registry ----

std::shared_ptr<ModelSpec> load_url(const RemoteId& id, const Catalog& catalog, const std::string& engine) {
  Reader r;
  r.id = id.spelled;
  r.denied_hint = "the server refused access";
  const std::string path = id.url.substr(0, id.url.find('?'));
  const std::string file = path.substr(path.rfind('/') + 1);
  std::vector<std::string> urls = {id.url}, names = {file};
  if (const SplitName s = split_name(path); s.count > 1) {
    if (s.index != 1) r.fail(fmt::format("is one of {} split files; give the first (-00001-of-{:05d}.gguf)", s.count, s.count));
    urls.clear(), names.clear();
    for (int i = 1; i <= s.count; ++i) {
      urls.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", s.prefix, i, s.count));
      names.push_back(urls.back().substr(urls.back().rfind('/') + 1));
    }
  }
  auto m = (from_ggufs(r, urls, names, catalog, engine));
  m->remote = ModelSpec::Remote{"url", id.spelled, "-mu", id.url, "./" + file};
  m->source = fmt::format("GGUF header of {} (read by range)", id.url);
  return m;
}

std::shared_ptr<ModelSpec> load_ollama(const RemoteId& id, const Catalog& catalog, const std::string& engine) {
  Reader r;
  r.id = id.spelled;
  r.denied_hint = "the registry refused access";
  r.headers = {"Accept: application/vnd.docker.distribution.manifest.v2+json"};
  const std::string registry = without_trailing_slash(env("KVPLAN_OLLAMA_REGISTRY").empty() ? "https://registry.ollama.ai" : env("KVPLAN_OLLAMA_REGISTRY"));
  const json manifest = r.get_json(fmt::format("{}/v2/{}/manifests/{}", registry, id.repo, id.tag), "the registry manifest");
  std::string digest;
  if (manifest.is_object() && manifest.contains("layers") && manifest["layers"].is_array())
    for (const auto& layer : manifest["layers"])
      if (layer.is_object() && layer.value("mediaType", json("")).is_string() && layer.value("mediaType", "") == "application/vnd.ollama.image.model" &&
          layer.contains("digest") && layer["digest"].is_string())
        digest = layer["digest"].get<std::string>();
  const bool hex = digest.size() == 71 && digest.rfind("sha256:", 0) == 0 &&
                   std::all_of(digest.begin() + 7, digest.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f'); });
  if (!hex) r.fail("the registry manifest names no model layer (application/vnd.ollama.image.model with a sha256 digest)");
  r.headers.clear();
  const std::string blob = fmt::format("{}/v2/{}/blobs/{}", registry, id.repo, digest);
  auto m = (from_ggufs(r, {blob}, {"the model blob " + digest.substr(0, 19)}, catalog, engine));
  const std::string model = id.repo.substr(id.repo.find('/') + 1);
  if (m->name == m->id) m->name = model + "-" + id.tag;  // no general.name: the blob's digest names nothing
  m->id = model + "-" + id.tag;
  m->remote = ModelSpec::Remote{"ollama", id.spelled, "-m", "~/.ollama/models/blobs/sha256-" + digest.substr(7),
                                id.repo.rfind("library/", 0) == 0 ? model + ":" + id.tag : id.repo + ":" + id.tag};
  m->source = fmt::format("GGUF header of the Ollama model {}:{} (blob {}, read by range)", id.repo, id.tag, digest.substr(0, 19));
  return m;
}

}  // namespace

std::shared_ptr<const ModelSpec> load_remote_model(const std::string& text, const Catalog& catalog, const std::string& engine) {
  if (catalog.find_model(text)) return nullptr;  // the catalog answers without the network
  const std::optional<RemoteId> id = parse_remote_id(text);
  if (!id) return nullptr;
  try {
    switch (id->kind) {
      case RemoteId::Kind::hub: return load_hub(*id, catalog, engine);
      case RemoteId::Kind::url: return load_url(*id, catalog, engine);
      case RemoteId::Kind::ollama: return load_ollama(*id, catalog, engine);
    }
  } catch (const json::exception& e) {  // a JSON shape not checked field by field: still the server's bad input
    throw InputError("--model", text, std::string("the server's JSON has a field of the wrong type: ") + e.what());
  } catch (const InputError& e) {
    // A typo of a catalog name ("qwen3:29b") fails on the network too: say what the catalog would have taken.
    if (!e.suggestion().empty() || id->kind == RemoteId::Kind::url) throw;
    std::string near;
    try {
      catalog.model(text);
    } catch (const InputError& c) {
      near = c.suggestion();
    }
    if (near.empty()) throw;
    throw InputError(e.field(), e.value(), e.problem() + "; it is not a catalog name either", e.accepted(), near);
  }
  return nullptr;
}

}  // namespace kvplan::net
