// HTTP GET over libcurl for the remote model reader: bounded (a size cap, connect and total timeouts, a redirect
// limit), with an optional byte range, and a cache under $XDG_CACHE_HOME/kvplan so a second read works offline.
// Failures are HttpError with a cause fit for the user ("HTTP 404", "timed out after 30 s", ...).
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvplan::net {

struct HttpError : std::runtime_error {
  HttpError(long status_, const std::string& cause) : std::runtime_error(cause), status(status_) {}
  long status;  // the HTTP status, 0 when none came back (a timeout, a refused connection, ...)
};

struct ByteRange {
  std::uint64_t first = 0, last = 0;  // inclusive, as the Range header says it
};

struct HttpGet {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::optional<ByteRange> range;
  std::uint64_t max_bytes = 64ull << 20;  // a body larger than this is refused (a server that ignores Range)
};

struct HttpReply {
  std::string body;
  std::uint64_t total_size = 0;  // a ranged reply: the size of the whole file (Content-Range: bytes a-b/TOTAL)
  std::string next_page;         // Link: <...>; rel="next" (the Hub's paginated listings)
};

// Settings from the environment: KVPLAN_HTTP_TIMEOUT (seconds, default 60), HF_HUB_OFFLINE (cache only).
struct HttpSettings {
  long timeout_s = 60;
  long connect_timeout_s = 10;
  long max_redirects = 5;
  bool offline = false;
  std::string cache_dir;  // "" = no cache
  static HttpSettings from_environment();
};

// GET with the cache: offline, only the cache answers (HttpError when it holds nothing for this request); online,
// the server answers and the reply is stored. A ranged GET must come back 206 with that range.
HttpReply http_get(const HttpGet& get, const HttpSettings& settings);

}  // namespace kvplan::net
