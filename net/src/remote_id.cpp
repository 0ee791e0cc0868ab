// Which remote thing a --model value names (net/include/kvplan/remote.hpp). Read by position, no regex: the
// value is user input. Hub ids follow the Hub's rules (huggingface_hub utils/_validators.py validate_repo_id).
#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "kvplan/error.hpp"
#include "kvplan/remote.hpp"

namespace kvplan::net {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with_ci(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  return std::equal(suffix.begin(), suffix.end(), s.end() - static_cast<std::ptrdiff_t>(suffix.size()),
                    [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b)); });
}

// [A-Za-z0-9._-], 1..96 characters, no "--" or "..", not starting or ending with '-' or '.' (the Hub's repo name rule).
bool is_name(const std::string& s, size_t max = 96) {
  if (s.empty() || s.size() > max || s.front() == '-' || s.front() == '.' || s.back() == '-' || s.back() == '.') return false;
  if (s.find("--") != std::string::npos || s.find("..") != std::string::npos) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'; });
}

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw InputError("--model", text, why,
                   {"a catalog model", "a file or folder", "OWNER/REPO (a Hub repo)", "OWNER/REPO:QUANT (a Hub GGUF repo)",
                    "https://…/file.gguf", "MODEL:TAG (an Ollama tag)"});
}

RemoteId hub(const std::string& text, const std::string& spec) {
  const auto colon = spec.find(':');
  RemoteId id{RemoteId::Kind::hub, text, spec.substr(0, colon), colon == std::string::npos ? "" : spec.substr(colon + 1), ""};
  const auto slash = id.repo.find('/');
  if (slash == std::string::npos || !is_name(id.repo.substr(0, slash)) || !is_name(id.repo.substr(slash + 1)))
    bad(text, "is not a Hugging Face repo id (OWNER/NAME of letters, digits, '.', '_' and '-')");
  if (colon != std::string::npos && !is_name(id.tag, 64)) bad(text, "has a quant tag that is not one (e.g. :Q4_K_M)");
  return id;
}

RemoteId ollama(const std::string& text, const std::string& spec) {
  const auto colon = spec.find(':');
  std::string name = spec.substr(0, colon);
  RemoteId id{RemoteId::Kind::ollama, text, name.find('/') == std::string::npos ? "library/" + name : name,
              colon == std::string::npos ? "latest" : spec.substr(colon + 1), ""};
  const auto slash = id.repo.find('/');
  if (!is_name(id.repo.substr(0, slash)) || !is_name(id.repo.substr(slash + 1)) || !is_name(id.tag, 128))
    bad(text, "is not an Ollama model tag (MODEL:TAG of letters, digits, '.', '_' and '-')");
  return id;
}

// https://huggingface.co/OWNER/REPO[/resolve|blob/REV/FILE]: a repo, or one file of it.
std::optional<RemoteId> url(const std::string& text) {
  const size_t scheme = text.find("://") + 3;
  const size_t path = text.find('/', scheme);
  const std::string host = text.substr(scheme, path == std::string::npos ? std::string::npos : path - scheme);
  const std::string rest = path == std::string::npos ? "" : text.substr(path + 1);
  const bool control = std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  if (text.size() > 2048 || control || text.find_first_of(" \"<>\\^`{|}") != std::string::npos) bad(text, "is not a URL kvplan reads");
  const bool hub_host = host == "huggingface.co" || host == "hf.co" || host == "www.huggingface.co";
  if (hub_host && rest.find("/resolve/") == std::string::npos && rest.find("/blob/") == std::string::npos) {
    std::string repo = rest;
    while (!repo.empty() && repo.back() == '/') repo.pop_back();
    return hub(text, repo);
  }
  if (!ends_with_ci(text.substr(0, text.find('?')), ".gguf")) bad(text, "is a URL, but not of a .gguf file or a huggingface.co repo");
  RemoteId id{RemoteId::Kind::url, text, "", "", text};
  if (const auto blob = id.url.find("/blob/"); hub_host && blob != std::string::npos) id.url.replace(blob, 6, "/resolve/");  // the page -> the file
  return id;
}

}  // namespace

std::optional<RemoteId> parse_remote_id(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (starts_with(text, "https://") || starts_with(text, "http://")) return url(text);
  for (const char* prefix : {"hf.co/", "huggingface.co/"})
    if (starts_with(text, prefix)) return hub(text, text.substr(std::string(prefix).size()));
  for (const char* prefix : {"ollama.com/", "registry.ollama.ai/"})
    if (starts_with(text, prefix)) return ollama(text, text.substr(std::string(prefix).size()));
  if (text.front() == '/' || text.front() == '.' || text.front() == '~') return std::nullopt;  // a path
  if (ends_with_ci(text, ".gguf") || ends_with_ci(text, ".json")) return std::nullopt;        // a file name
  const auto slashes = std::count(text.begin(), text.end(), '/');
  if (slashes == 0) return text.find(':') != std::string::npos ? std::optional(ollama(text, text)) : std::nullopt;
  if (slashes == 1) return hub(text, text);
  return std::nullopt;
}

}  // namespace kvplan::net
