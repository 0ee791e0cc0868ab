// libcurl GET with limits, and the on-disk cache of what was read (net/src/http.hpp).
#include "http.hpp"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>

#include <curl/curl.h>
#include <fmt/format.h>

namespace kvplan::net {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// huggingface_hub's constants._is_true: 1, ON, YES, TRUE in any case.
bool env_true(const char* name) {
  std::string v = env(name);
  for (auto& ch : v) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

// ---- cache: one body file and one meta file per (URL, range), named by a hash, the URL kept to check it ----

std::string cache_key(const HttpGet& get) {
  const std::string text = get.url + "\n" + (get.range ? fmt::format("{}-{}", get.range->first, get.range->last) : "");
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: a file name, not a security boundary (the meta file is checked)
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

std::string meta_of(const HttpGet& get, const HttpReply& r) {
  return fmt::format("{}\n{}\n{}\n{}\n", get.url, get.range ? fmt::format("{}-{}", get.range->first, get.range->last) : "-",
                     r.total_size, r.next_page);
}

std::optional<HttpReply> cache_read(const HttpGet& get, const std::string& dir) {
  if (dir.empty()) return std::nullopt;
  const fs::path base = fs::path(dir) / "http" / cache_key(get);
  std::ifstream meta(base.string() + ".meta"), body(base.string() + ".body", std::ios::binary);
  if (!meta || !body) return std::nullopt;
  std::string url, range, total, next;
  std::getline(meta, url), std::getline(meta, range), std::getline(meta, total), std::getline(meta, next);
  const std::string want_range = get.range ? fmt::format("{}-{}", get.range->first, get.range->last) : "-";
  if (url != get.url || range != want_range) return std::nullopt;
  HttpReply r;
  std::ostringstream ss;
  ss << body.rdbuf();
  r.body = ss.str();
  if (r.body.size() > get.max_bytes) return std::nullopt;
  try {
    r.total_size = std::stoull(total);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  r.next_page = next;
  return r;
}

void cache_write(const HttpGet& get, const HttpReply& r, const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  const fs::path folder = fs::path(dir) / "http";
  fs::create_directories(folder, ec);
  const fs::path base = folder / cache_key(get);
  for (const auto& [ext, text] : {std::pair<std::string, const std::string*>{".body", &r.body}, {".meta", nullptr}}) {
    const std::string data = text ? *text : meta_of(get, r);
    const std::string tmp = base.string() + ext + ".tmp";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) return;  // a cache that cannot be written is no error: the next read goes to the network again
    fs::rename(tmp, base.string() + ext, ec);
  }
}

// ---- libcurl ----

struct Transfer {
  CURL* curl = nullptr;
  const HttpGet* get = nullptr;
  HttpReply reply;
  std::string content_range, link;
  bool ignored_range = false, too_large = false;
};

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->get->range && status == 200) {  // the whole file is coming: stop at once rather than read it
    t->ignored_range = true;
    return 0;
  }
  if (t->reply.body.size() + size * n > t->get->max_bytes) {
    t->too_large = true;
    return 0;
  }
  t->reply.body.append(data, size * n);
  return size * n;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  const auto colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon), value = line.substr(colon + 1);
  for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(0, 1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.pop_back();
  if (name == "content-range") t->content_range = value;
  if (name == "link") t->link = value;
  return size * n;
}

// Content-Range: bytes FIRST-LAST/TOTAL, checked against the range asked for.
void check_range(Transfer& t) {
  const ByteRange want = *t.get->range;
  unsigned long long first = 0, last = 0, total = 0;
  char tail = 0;
  if (std::sscanf(t.content_range.c_str(), "bytes %llu-%llu/%llu%c", &first, &last, &total, &tail) != 3 || first != want.first ||
      last < first || last > want.last || total <= last)
    throw HttpError(206, fmt::format("the server answered the range {}-{} with Content-Range '{}'", want.first, want.last,
                                     t.content_range.substr(0, 80)));
  if (t.reply.body.size() != last - first + 1)
    throw HttpError(206, fmt::format("truncated reply: {} bytes of the {} the server announced", t.reply.body.size(), last - first + 1));
  t.reply.total_size = total;
}

// The next page of a listing: Link: <URL>; rel="next".
std::string next_link(const std::string& link) {
  const auto rel = link.find("rel=\"next\"");
  if (rel == std::string::npos) return "";
  const auto open = link.rfind('<', rel), close = link.find('>', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos || close > rel) return "";
  return link.substr(open + 1, close - open - 1);
}

void curl_global() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

HttpReply fetch(const HttpGet& get, const HttpSettings& s) {
  curl_global();
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw HttpError(0, "libcurl could not start a transfer");
  Transfer t{curl.get(), &get, {}, {}, {}, false, false};
  curl_slist* list = nullptr;
  for (const auto& h : get.headers) list = curl_slist_append(list, h.c_str());
  const std::string range = get.range ? fmt::format("{}-{}", get.range->first, get.range->last) : "";
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, get.url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  if (get.range) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, s.max_redirects);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, s.connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, s.timeout_s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "kvplan/0.1.0");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(list);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (t.ignored_range) throw HttpError(200, "the server ignored Range (it began sending the whole file)");
  if (t.too_large) throw HttpError(status, fmt::format("the reply is larger than the {} bytes asked for or allowed", get.max_bytes));
  if (rc == CURLE_OPERATION_TIMEDOUT) throw HttpError(0, fmt::format("timed out after {} s", s.timeout_s));
  if (rc == CURLE_TOO_MANY_REDIRECTS) throw HttpError(status, fmt::format("more than {} redirects", s.max_redirects));
  if (rc != CURLE_OK) throw HttpError(status, curl_easy_strerror(rc));
  if (status < 200 || status >= 300) throw HttpError(status, fmt::format("HTTP {}", status));
  if (get.range) {
    if (status != 206) throw HttpError(status, "the server ignored Range");
    check_range(t);
  }
  t.reply.next_page = next_link(t.link);
  return std::move(t.reply);
}

}  // namespace

HttpSettings HttpSettings::from_environment() {
  HttpSettings s;
  if (const std::string t = env("KVPLAN_HTTP_TIMEOUT"); !t.empty()) {
    char* end = nullptr;
    const long v = std::strtol(t.c_str(), &end, 10);
    if (end && *end == '\0' && v > 0 && v <= 3600) s.timeout_s = v;
  }
  s.offline = env_true("HF_HUB_OFFLINE");
  if (const std::string x = env("XDG_CACHE_HOME"); !x.empty()) s.cache_dir = (fs::path(x) / "kvplan").string();
  else if (const std::string home = env("HOME"); !home.empty()) s.cache_dir = (fs::path(home) / ".cache" / "kvplan").string();
  return s;
}

HttpReply http_get(const HttpGet& get, const HttpSettings& settings) {
  if (settings.offline) {
    if (auto cached = cache_read(get, settings.cache_dir)) return *cached;
    throw HttpError(0, fmt::format("HF_HUB_OFFLINE is set and the cache ({}) holds no copy of {}; run once online first",
                                   settings.cache_dir.empty() ? "none" : settings.cache_dir, get.url));
  }
  HttpReply reply = fetch(get, settings);
  cache_write(get, reply, settings.cache_dir);
  return reply;
}

}  // namespace kvplan::net
