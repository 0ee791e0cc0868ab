// Reading a user's own cache measurements and calibrating the prior to them (kvplan/priors.hpp, docs/priors.md §7).
#include "kvplan/priors.hpp"

#include "input_file.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "kvplan/error.hpp"
#include "priors/prior.hpp"

namespace kvplan {
namespace {

constexpr double kPplNoiseFloor = 0.0004;  // docs/priors.md §3: PR #7412 f16 FA vs non-FA path, 0.04%
constexpr double kKldNoiseFloor = 0.0005;  // PR #6936: f16 logits downcast KLD
constexpr int kDefaultCtx = 512;           // llama-perplexity's default context
constexpr double kZ80 = 1.2815515655446004;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// RFC 4180 records: quoted fields may hold commas, quotes ("") and newlines. Returns (first line, fields) per record.
std::vector<std::pair<int, std::vector<std::string>>> csv_records(const std::string& text, const std::string& origin) {
  std::vector<std::pair<int, std::vector<std::string>>> out;
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false, any = false;
  int line = 1, start = 1;
  size_t i = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;  // UTF-8 BOM
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += '"', ++i;
      else if (c == '"') quoted = false;
      else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && field.empty()) quoted = true, any = true;
    else if (c == ',') fields.push_back(field), field.clear(), any = true;
    else if (c == '\r') continue;
    else if (c == '\n') {
      fields.push_back(field);
      if (any || !trim(field).empty()) out.emplace_back(start, fields);
      fields.clear(), field.clear(), any = false;
      start = ++line;
    } else field += c, any = true;
  }
  if (quoted) throw InputError(fmt::format("{}:{}", origin, start), "", "a quoted field is not closed");
  if (any || !field.empty()) fields.push_back(field), out.emplace_back(start, fields);
  return out;
}

// The whole of `t` as a finite decimal number (an optional sign, digits, a fraction, an exponent), without
// locale or exceptions; nullopt for anything else, out-of-range magnitudes included.
std::optional<double> parse_double(std::string_view t) {
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  if (t.empty() || !(std::isdigit(static_cast<unsigned char>(t.front())) || t.front() == '.' || t.front() == '-')) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v, std::chars_format::general);
  if (ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Shown in messages: a value is cut to a readable length.
std::string shown(std::string_view t) { return t.size() > 60 ? std::string(t.substr(0, 60)) + "…" : std::string(t); }

double number(const std::string& s, const std::string& where, const std::string& column) {
  const std::string t = trim(s);
  if (const auto v = parse_double(t)) return *v;
  throw InputError(where, shown(t), "column '" + column + "' is not a number", {"a finite decimal such as 0.012 or 1.5e-3"});
}

int rotation_of(const std::string& s, const std::string& where) {
  const std::string t = lower(trim(s));
  if (t.empty() || t == "unknown" || t == "?") return -1;
  if (t == "yes" || t == "y" || t == "1" || t == "true" || t == "on") return 1;
  if (t == "no" || t == "n" || t == "0" || t == "false" || t == "off") return 0;
  throw InputError(where, s, "column 'rotation' must be yes, no or unknown", {"yes", "no", "unknown"});
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// "4.5bpw", "exl2 6.0 BPW": the first number directly before "bpw" (any case), else nullopt. A plain scan.
std::optional<double> bpw_in(const std::string& w) {
  const std::string l = lower(w);
  for (size_t at = l.find("bpw"); at != std::string::npos; at = l.find("bpw", at + 1)) {
    size_t end = at;
    while (end > 0 && std::isspace(static_cast<unsigned char>(l[end - 1]))) --end;
    size_t begin = end;
    while (begin > 0 && is_digit(l[begin - 1])) --begin;
    if (begin == end) continue;
    if (begin >= 2 && l[begin - 1] == '.' && is_digit(l[begin - 2])) {  // a fraction: take its integer part too
      begin -= 1;
      while (begin > 0 && is_digit(l[begin - 1])) --begin;
    }
    if (const auto v = parse_double(std::string_view(l).substr(begin, end - begin))) return v;
  }
  return std::nullopt;
}

double bpw_of(const std::string& weights, const Catalog* catalog) {
  const std::string w = trim(weights);
  if (w.empty() || lower(w) == "f16" || lower(w) == "bf16" || lower(w) == "f32") return 16;
  if (const auto v = bpw_in(w)) return *v;
  if (catalog)
    if (const WeightFormat* f = catalog->find_weight_format(w); f && f->bpw_llama31_8b > 0) return f->bpw_llama31_8b;
  return 0;
}

bool unquantized(const std::string& t) {
  const std::string l = lower(t);
  return l == "f16" || l == "bf16" || l == "f32" || l == "fp16" || l == "fp32";
}

std::vector<Measurement> parse_csv(const std::string& text, const std::string& origin, const Catalog* catalog) {
  auto records = csv_records(text, origin);
  if (records.empty()) throw InputError(origin, "", "the measurements file is empty");
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < records.front().second.size(); ++i) col[lower(trim(records.front().second[i]))] = i;
  for (const char* need : {"k_type", "v_type"})
    if (!col.count(need))
      throw InputError(origin + ":1", need, "the header row lacks a required column",
                       {"k_type", "v_type", "metric", "ctx", "rotation", "value", "baseline", "rel_change", "noise", "weights"});
  if (!col.count("rel_change") && !col.count("value"))
    throw InputError(origin + ":1", "rel_change", "the header row needs a 'rel_change' or a 'value' column");
  struct Raw {
    int line;
    std::vector<std::string> f;
  };
  auto get = [&](const Raw& r, const char* name) -> std::string {
    auto it = col.find(name);
    return it == col.end() || it->second >= r.f.size() ? std::string{} : trim(r.f[it->second]);
  };
  std::vector<Raw> rows;
  rows.reserve(records.size());
  for (size_t i = 1; i < records.size(); ++i) rows.push_back({records[i].first, std::move(records[i].second)});
  // f16/f16 perplexity rows without a baseline are baselines for value-only rows at the same context and weights
  std::map<std::pair<std::string, std::string>, double> base_ppl;
  for (const auto& r : rows) {
    const std::string metric = lower(get(r, "metric"));
    if ((metric.empty() || metric == "ppl") && unquantized(get(r, "k_type")) && unquantized(get(r, "v_type")) &&
        !get(r, "value").empty() && get(r, "baseline").empty())
      base_ppl[{get(r, "ctx"), get(r, "weights")}] = number(get(r, "value"), fmt::format("{}:{}", origin, r.line), "value");
  }
  std::vector<Measurement> out;
  for (const auto& r : rows) {
    const std::string where = fmt::format("{}:{}", origin, r.line);
    Measurement m;
    m.origin = where;
    m.k_type = get(r, "k_type");
    m.v_type = get(r, "v_type");
    if (m.k_type.empty()) throw InputError(where, "", "column 'k_type' is empty");
    if (m.v_type.empty()) throw InputError(where, "", "column 'v_type' is empty (an MLA latent cache: give the type twice)");
    if (unquantized(m.k_type) && unquantized(m.v_type)) continue;  // a baseline
    const std::string metric = lower(get(r, "metric").empty() ? "ppl" : get(r, "metric"));
    const std::string rel = get(r, "rel_change"), value = get(r, "value"), baseline = get(r, "baseline"), noise = get(r, "noise");
    if (const std::string c = get(r, "ctx"); !c.empty()) {
      const double ctx = number(c, where, "ctx");
      if (ctx < 1 || ctx > 1e8 || ctx != std::floor(ctx)) throw InputError(where, c, "column 'ctx' must be a whole number of tokens");
      m.ctx = static_cast<int>(ctx);
    }
    m.rotation = rotation_of(get(r, "rotation"), where);
    m.weights = get(r, "weights");
    m.weights_bpw = bpw_of(m.weights, catalog);
    if (metric == "ppl" || metric == "rel_ppl" || metric == "nll") {
      m.metric = "ppl";
      if (!rel.empty()) {
        m.value = number(rel, where, "rel_change");
      } else if (!value.empty()) {
        double b = 0;
        if (!baseline.empty()) b = number(baseline, where, "baseline");
        else if (auto it = base_ppl.find({get(r, "ctx"), get(r, "weights")}); it != base_ppl.end()) b = it->second;
        else throw InputError(where, value, "a perplexity without a baseline: add 'baseline' or an f16/f16 row at the same ctx");
        if (b <= 0) throw InputError(where, baseline, "column 'baseline' must be positive");
        m.value = number(value, where, "value") / b - 1;
      } else {
        throw InputError(where, "", "neither 'rel_change' nor 'value' is given");
      }
      if (metric == "nll") m.value = std::expm1(m.value);
      // beyond x100,000 a perplexity measures a broken model, not a loss (the worst published row is x10,428)
      if (!(m.value > -1 && m.value <= 1e5))
        throw InputError(where, fmt::format("{}", m.value), !rel.empty() ? "column 'rel_change' is not a relative perplexity change" : "value / baseline is not a relative perplexity change", {"above -1 (-100 %), at most 100000"});
    } else if (metric == "kld" || metric == "mean_kld") {
      m.metric = "kld";
      if (value.empty()) throw InputError(where, "", "a kld row needs its KLD in 'value'");
      m.value = number(value, where, "value");
      if (!(m.value >= 0 && m.value <= 100)) throw InputError(where, value, "is not a mean KL divergence", {"0..100 nats"});
    } else {
      throw InputError(where, metric, "this metric cannot calibrate the prior", {"ppl", "kld", "nll"});
    }
    if (!noise.empty()) {
      m.noise = number(noise, where, "noise");
      if (m.noise < 0) throw InputError(where, noise, "column 'noise' cannot be negative");
    }
    out.push_back(m);
  }
  return out;
}

// A plain scanner over one line of llama-perplexity output: linear, no backtracking, no recursion (a line of
// any length is safe). Each reader returns nullopt when its pattern is not on the line.
class LineScan {
 public:
  LineScan(std::string_view line, std::string where) : l_(line), where_(std::move(where)) {}

  // "K (q8_0): ... V (q4_0)": the first K type and the last V type after it (llama_kv_cache lines).
  std::optional<std::pair<std::string, std::string>> kv_types() const {
    for (size_t at = l_.find("K ("); at != std::string_view::npos; at = l_.find("K (", at + 1)) {
      const size_t id_end = ident_end(at + 3);
      if (id_end == at + 3 || l_.compare(id_end, 2, "):") != 0) continue;
      const std::string k(l_.substr(at + 3, id_end - at - 3));
      for (size_t v = l_.rfind("V ("); v != std::string_view::npos && v > id_end; v = v == 0 ? std::string_view::npos : l_.rfind("V (", v - 1)) {
        const size_t v_end = ident_end(v + 3);
        if (v_end > v + 3 && v_end < l_.size() && l_[v_end] == ')') return std::pair{k, std::string(l_.substr(v + 3, v_end - v - 3))};
      }
      return std::nullopt;
    }
    return std::nullopt;
  }
  // "KEY = 123" (spaces optional): the digits after the first KEY that has them.
  std::optional<std::string_view> assigned_digits(std::string_view key) const {
    for (size_t at = l_.find(key); at != std::string_view::npos; at = l_.find(key, at + 1)) {
      size_t i = skip_spaces(at + key.size());
      if (i >= l_.size() || l_[i] != '=') continue;
      i = skip_spaces(i + 1);
      const size_t begin = i;
      while (i < l_.size() && is_digit(l_[i])) ++i;
      if (i > begin) return l_.substr(begin, i - begin);
    }
    return std::nullopt;
  }
  // "(4.89 BPW)"
  std::optional<std::string_view> bpw() const {
    for (size_t at = l_.find('('); at != std::string_view::npos; at = l_.find('(', at + 1)) {
      size_t i = at + 1;
      while (i < l_.size() && (is_digit(l_[i]) || l_[i] == '.')) ++i;
      if (i == at + 1) continue;
      const std::string_view num = l_.substr(at + 1, i - at - 1);
      i = skip_spaces(i);
      if (l_.compare(i, 4, "BPW)") == 0) return num;
    }
    return std::nullopt;
  }
  // "PREFIX<number> SEP <number>": the two numbers of "Final estimate: PPL = 5.1 +/- 0.03" or of
  // "Mean PPL(Q)/PPL(base)     :   1.0012 ±   0.0004" (sep: one run of non-space characters).
  std::optional<std::pair<std::string_view, std::string_view>> two_numbers(std::string_view prefix, bool colon_form) const {
    const size_t at = l_.find(prefix);
    if (at == std::string_view::npos) return std::nullopt;
    size_t i = at + prefix.size();
    if (colon_form) {
      i = skip_spaces(i);
      if (i >= l_.size() || l_[i] != ':') return std::nullopt;
      i = skip_spaces(i + 1);
    }
    const std::string_view a = numeric_run(i);
    if (a.empty()) return std::nullopt;
    i += a.size();
    if (colon_form) {
      i = skip_spaces(i);
      const size_t sep = i;
      while (i < l_.size() && !std::isspace(static_cast<unsigned char>(l_[i]))) ++i;
      if (i == sep) return std::nullopt;
      i = skip_spaces(i);
    } else {
      if (l_.compare(i, 5, " +/- ") != 0) return std::nullopt;
      i += 5;
    }
    const std::string_view b = numeric_run(i);
    if (b.empty()) return std::nullopt;
    return std::pair{a, b};
  }
  double to_double(std::string_view t, const char* what) const {
    if (const auto v = parse_double(t)) return *v;
    throw InputError(where_, shown(t), std::string(what) + " is not a number");
  }
  int to_int(std::string_view t, const char* what, int max, int min = 0) const {
    const auto v = parse_double(t);
    if (!v || *v < min || *v > max) throw InputError(where_, shown(t), std::string(what) + " is not a count", {fmt::format("{}..{}", min, max)});
    return static_cast<int>(*v);
  }

 private:
  size_t ident_end(size_t i) const {
    while (i < l_.size() && (std::isalnum(static_cast<unsigned char>(l_[i])) || l_[i] == '_')) ++i;
    return i;
  }
  size_t skip_spaces(size_t i) const {
    while (i < l_.size() && std::isspace(static_cast<unsigned char>(l_[i]))) ++i;
    return i;
  }
  std::string_view numeric_run(size_t i) const {
    size_t e = i;
    while (e < l_.size() && (is_digit(l_[e]) || l_[e] == '.' || l_[e] == 'e' || l_[e] == 'E' || l_[e] == '+' || l_[e] == '-')) ++e;
    return l_.substr(i, e - i);
  }
  std::string_view l_;
  std::string where_;
};

// llama-perplexity output: runs in sequence; each run prints its cache types, context and result.
std::vector<Measurement> parse_perplexity_log(const std::string& text, const std::string& origin) {
  struct Run {
    std::string k, v;
    int ctx = 0, rot = -1, line = 0;
    double bpw = 0, ppl = 0, ppl_err = 0, rel = std::numeric_limits<double>::quiet_NaN(), rel_err = 0;
  };
  std::vector<Run> runs;
  Run cur;
  int line = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = text.find('\n', pos);
    const std::string_view l = std::string_view(text).substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    ++line;
    const LineScan scan(l, fmt::format("{}:{}", origin, line));
    if (l.find("llama_kv_cache") != std::string_view::npos)
      if (const auto kv = scan.kv_types()) cur.k = kv->first, cur.v = kv->second;
    if (l.find("perplexity") != std::string_view::npos)
      if (const auto n = scan.assigned_digits("n_ctx")) cur.ctx = scan.to_int(*n, "n_ctx", 100'000'000, 1);
    if (const auto r = scan.assigned_digits("attn_rot_k"); r && (*r == "0" || *r == "1")) cur.rot = *r == "1" ? 1 : 0;
    if (l.find("file size") != std::string_view::npos)
      if (const auto b = scan.bpw()) cur.bpw = scan.to_double(*b, "the file's BPW");
    bool done = false;
    if (const auto f = scan.two_numbers("Final estimate: PPL = ", false))
      cur.ppl = scan.to_double(f->first, "PPL"), cur.ppl_err = scan.to_double(f->second, "the PPL error"), done = true;
    if (const auto q = scan.two_numbers("Mean PPL(Q)/PPL(base)", true))
      cur.rel = scan.to_double(q->first, "PPL(Q)/PPL(base)") - 1, cur.rel_err = scan.to_double(q->second, "the ratio's error"), done = true;
    if (done) {
      if (cur.k.empty() || cur.v.empty())
        throw InputError(fmt::format("{}:{}", origin, line), "", "a perplexity result without the run's 'llama_kv_cache ... K (type) ... V (type)' line");
      cur.line = line;
      if (!runs.empty() && runs.back().k == cur.k && runs.back().v == cur.v && runs.back().ctx == cur.ctx &&
          line - runs.back().line < 50) {
        runs.back() = cur;  // --kl-divergence prints both lines: keep one run
      } else {
        runs.push_back(cur);
      }
      Run next;  // the model and its size carry over to the next run
      next.bpw = cur.bpw;
      cur = next;
    }
  }
  std::vector<Measurement> out;
  for (const auto& r : runs) {
    if (unquantized(r.k) && unquantized(r.v)) continue;
    Measurement me;
    me.origin = fmt::format("{}:{}", origin, r.line);
    me.k_type = r.k, me.v_type = r.v, me.ctx = r.ctx, me.rotation = r.rot, me.weights_bpw = r.bpw;
    if (!std::isnan(r.rel)) {
      me.value = r.rel, me.noise = r.rel_err;
    } else {
      const Run* base = nullptr;
      for (const auto& b : runs)
        if (unquantized(b.k) && unquantized(b.v) && b.ctx == r.ctx && b.ppl > 0) base = &b;
      if (!base)
        throw InputError(me.origin, r.k + "/" + r.v, fmt::format("no f16/f16 run at n_ctx={} to compare this perplexity with", r.ctx));
      me.value = r.ppl / base->ppl - 1;
      me.noise = 0;  // the two runs' errors are correlated; the paired error is not printed: use the default
    }
    out.push_back(me);
  }
  return out;
}

double log_gap(double predicted, double measured, double noise) {
  return std::log(std::max(predicted, 0.0) + noise) - std::log(std::max(measured, 0.0) + noise);
}

}  // namespace

std::vector<Measurement> parse_measurements(const std::string& text, const std::string& origin, const Catalog* catalog) {
  const bool log = text.find("Final estimate: PPL") != std::string::npos || text.find("Mean PPL(Q)/PPL(base)") != std::string::npos;
  std::vector<Measurement> rows = log ? parse_perplexity_log(text, origin) : parse_csv(text, origin, catalog);
  if (rows.empty())
    throw InputError(origin, "", log ? "the llama-perplexity output has no run with a quantized cache"
                                     : "no row measures a quantized cache (rows with f16/f16 are baselines only)");
  return rows;
}

std::vector<Measurement> read_measurements(const std::string& path, const Catalog* catalog) {
  return parse_measurements(detail::read_text_file(path, "--priors", detail::kMaxPriorsBytes), path, catalog);
}

PriorParams calibrate(const PriorParams& prior, const std::vector<Measurement>& rows, const ModelSpec& model) {
  if (model.params <= 0) throw InputError("--priors", model.id, "the model has no parameter count to calibrate against");
  struct Row {
    const Measurement* m;
    double k, v, w, meas, noise;
  };
  std::vector<Row> use;
  for (const auto& m : rows) {
    for (const std::string& t : {m.k_type, m.v_type}) {
      bool known = false;
      std::vector<std::string> names;
      for (const auto& s : prior.types) names.push_back(s.type), known |= s.type == t;
      if (!known) throw InputError(m.origin, t, "unknown cache type", names, closest_match(t, names));
    }
    const TypeSensitivity& tk = prior.type(m.k_type);
    const TypeSensitivity& tv = prior.type(m.v_type);
    if (!tk.quantized() && !tv.quantized()) continue;
    if (m.metric != "ppl" && m.metric != "kld") throw InputError(m.origin, m.metric, "metric must be ppl or kld", {"ppl", "kld"});
    if (!std::isfinite(m.value) || m.value <= -1) throw InputError(m.origin, fmt::format("{}", m.value), "not a relative change");
    priors::QualityInput in;
    in.model = &model;
    in.type_k = m.k_type, in.type_v = m.v_type;
    in.ctx = m.ctx > 0 ? m.ctx : kDefaultCtx;
    in.rotation = m.rotation >= 0 ? m.rotation == 1 : model.head_dim_k % 64 == 0;  // the reference build's rule
    const priors::KvParts parts = priors::kv_parts(prior, in);
    const double floor = m.metric == "kld" ? kKldNoiseFloor : kPplNoiseFloor;
    const double meas = m.metric == "kld" ? std::expm1(m.value) : m.value;
    use.push_back({&m, parts.k, parts.v, priors::weights_factor(prior, m.weights_bpw > 0 ? m.weights_bpw : 16), meas,
                   std::hypot(m.noise, floor)});
  }
  if (use.empty()) throw InputError("--priors", model.id, "no measurement of a quantized cache to calibrate with");
  // Prior on log factors: the fitted prior's own 80% interval read as a log-normal spread.
  const double s0 = std::max(std::log(prior.interval_high / prior.interval_low) / (2 * kZ80), 0.05);
  const bool has_k = std::any_of(use.begin(), use.end(), [](const Row& r) { return r.k > 0; });
  const bool has_v = std::any_of(use.begin(), use.end(), [](const Row& r) { return r.v > 0; });
  // Rows that share a prediction (the same K and V terms, W and noise) enter the cost through their count, mean and
  // spread of log(measured + noise): sum (A - y_i)^2 = n (A - mean)^2 + sum (y_i - mean)^2, so the grid search costs
  // one evaluation per distinct prediction, not per row (a 10 MB file of 240,000 rows took minutes).
  struct Group {
    double n = 0, sum_y = 0, sum_y2 = 0;
  };
  std::map<std::tuple<double, double, double, double>, Group> groups;
  for (const auto& r : use) {
    Group& g = groups[{r.k, r.v, r.w, r.noise}];
    const double y = std::log(std::max(r.meas, 0.0) + r.noise);
    g.n += 1, g.sum_y += y, g.sum_y2 += y * y;
  }
  auto cost = [&](double lk, double lv) {
    double c = (lk * lk + lv * lv) / (s0 * s0);
    const double ck = std::exp(lk), cv = std::exp(lv);
    for (const auto& [key, g] : groups) {
      const auto& [k, v, w, noise] = key;
      const double a = std::log(std::max(w * (ck * k + cv * v), 0.0) + noise);
      const double mean = g.sum_y / g.n;
      c += g.n * (a - mean) * (a - mean) + std::max(0.0, g.sum_y2 - g.n * mean * mean);
    }
    return c;
  };
  // Grid search (robust to the flat directions), then a finer grid around the best point.
  double best_k = 0, best_v = 0, best = cost(0, 0);
  for (int pass = 0; pass < 2; ++pass) {
    const double step = pass == 0 ? 0.1 : 0.005, half = pass == 0 ? 7.0 : 0.1;
    const double ck0 = best_k, cv0 = best_v;
    for (double lk = has_k ? ck0 - half : 0; lk <= (has_k ? ck0 + half : 0) + 1e-9; lk += step)
      for (double lv = has_v ? cv0 - half : 0; lv <= (has_v ? cv0 + half : 0) + 1e-9; lv += step)
        if (const double c = cost(lk, lv); c < best) best = c, best_k = lk, best_v = lv;
  }
  ModelCalibration cal;
  cal.model = model.id;
  cal.k_factor = std::exp(best_k);
  cal.v_factor = std::exp(best_v);
  cal.rows = static_cast<int>(use.size());
  // Interval: the rows' own residual spread plus what remains of the prior's, never wider than the prior's.
  double ss = 0;
  for (const auto& r : use) {
    const double d = log_gap(r.w * (cal.k_factor * r.k + cal.v_factor * r.v), r.meas, r.noise);
    ss += d * d;
  }
  const double n = static_cast<double>(use.size());
  const double s_res = std::max(std::sqrt(ss / n), 0.1);
  const double sigma = std::min(std::sqrt(s_res * s_res + s0 * s0 / (1 + n)), s0);
  cal.interval_low = std::exp(-kZ80 * sigma);
  cal.interval_high = std::exp(kZ80 * sigma);
  // Cite the calibration and the user's rows with the largest effect (those are what the factors rest on).
  cal.evidence.push_back(fmt::format("Calibrated to your {} measurement{} ({}): K term x{:.2g}, V term x{:.2g}", cal.rows,
                                     cal.rows == 1 ? "" : "s", use.front().m->origin, cal.k_factor, cal.v_factor));
  std::vector<const Row*> order;
  for (const auto& r : use) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(), [](const Row* a, const Row* b) { return a->meas > b->meas; });
  for (size_t i = 0; i < order.size() && i < 2; ++i) {
    const Measurement& m = *order[i]->m;
    const std::string fig = m.metric == "kld" ? fmt::format("KLD {:.4g}", m.value) : fmt::format("{:+.2f}% perplexity", m.value * 100);
    cal.evidence.push_back(fmt::format("Your measurement: K={} V={}{}: {} [{}]", m.k_type, m.v_type,
                                       m.ctx > 0 ? fmt::format(" at {} tokens", m.ctx) : "", fig, m.origin));
  }
  PriorParams out = prior;
  out.calibrations.erase(std::remove_if(out.calibrations.begin(), out.calibrations.end(),
                                        [&](const ModelCalibration& c) { return c.model == model.id; }),
                         out.calibrations.end());
  out.calibrations.push_back(cal);
  return out;
}

}  // namespace kvplan
