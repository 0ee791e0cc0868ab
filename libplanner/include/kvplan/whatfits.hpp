// kvplan/whatfits.hpp — "what can I run?" (models ranked for a GPU and a task) and "what do I need?" (hardware for
// a model and a task), built on plan(). docs/ranking.md §8–§10 give the rules.
//
//   kvplan::WhatFitsRequest q;
//   q.base.gpu = "rtx4090"; q.base.task = "agentic";
//   kvplan::WhatFits list = kvplan::what_fits(kvplan::builtin_catalog(), q);
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"
#include "kvplan/plan.hpp"

namespace kvplan {

// ---------- a model's quality for a task (docs/ranking.md §8) ----------
struct TaskQuality {
  double value = 0;               // what ranks: mean − sd, on the task's common scale (the reference benchmark's units; at least its floor, may pass its top)
  double mean = 0;                // the figure's best value: measured figures shrunk towards the size fit, or the fallback's estimate
  double sd = 0;                  // its uncertainty (one standard deviation, docs/ranking.md §8 step 5)
  bool estimated = false;         // no published figure for this task: the fallback rule's estimate
  std::string basis;              // what it rests on: the figures used, or the fallback rule and the models it scales
  std::vector<std::string> benchmarks;  // the benchmark columns used ("livecodebench v5", "mmlu-pro")
};

// One task's common scale: every benchmark column linked to the reference column by linear equating over the
// models measured on both, and the measured figure of each model that has one.
struct QualityScale {
  std::string task, reference;  // reference: the column with the most catalog models measured
  struct Column {
    std::string id;             // benchmark id, then the variant when it has one: "livecodebench v5"
    double slope = 1, shift = 0;  // on the reference scale: shift + slope · value (value mirrored when lower is better)
    int overlap = 0;            // models that linked it (0: the reference itself)
    bool linked = false;        // false: too few models in common with the scale; not used
    // the link's own error: how far the common models' figures lie from the line (root mean square, on the scale),
    // and where its figures centre and spread, for the error of a figure far from them (docs/ranking.md §8 step 5)
    double residual = 0, mean_x = 0, sd_x = 0;
    double error_at(double x) const;  // the linking error of a figure x of this column, on the scale
  };
  std::vector<Column> columns;
  std::map<std::string, TaskQuality> measured;  // by model id
  double scale_low = 0, scale_high = 100;       // the reference benchmark's scale
  double size_slope = 0, size_intercept = 0;    // catalog-wide fit of the figure on ln(effective parameters)
  double size_sd = 0;    // how far measured figures lie from the size fit (root mean square): the prior's uncertainty
  double family_sd = 0;  // how far the family rule misses a measured model's figure, each left out in turn (root mean square)
};

QualityScale quality_scale(const Catalog& c, const std::string& task_id);
// The model's figure: measured (its columns' mean, shrunk towards the size fit as one more column), else estimated by the fallback rule (the family's figures scaled by size, else the
// catalog-wide fit on size), with `estimated` and the reason set.
TaskQuality task_quality(const QualityScale& scale, const Catalog& c, const ModelSpec& m);
// Parameters a token reads: the total for a dense model; for an MoE the shared part plus the routed experts used.
double active_params(const ModelSpec& m);
// The size the fallback rule scales by: the parameters for a dense model, √(total · active) for an MoE.
double effective_params(const ModelSpec& m);

// ---------- what fits (docs/ranking.md §9) ----------
struct WhatFitsRequest {
  Request base;                       // GPU(s), task, engine and the rest; `model` is ignored
  std::vector<std::string> models;    // --models: catalog names or GGUF file names (empty: the whole catalog)
  std::vector<std::shared_ptr<const ModelSpec>> model_specs;  // models read from files or the Hub (added to `models`)
  std::optional<int> min_ctx;         // per conversation
  std::optional<double> min_tps;      // decode tokens per second (options of unknown speed are left out)
  std::string family;                 // catalog family id ("" = any)
  std::string arch_kind;              // "moe" | "dense" | "" (any)
  std::vector<std::string> licenses;  // --license: license ids, "open" (OSI-approved) or "other" (custom); any of them (empty: any)
  int top = 20;
};

struct FitRow {
  std::string model, name, family;    // model: catalog id (or the file's name)
  std::string license;                // data/licenses.yaml id ("" for a model read from a file)
  std::int64_t params = 0;
  bool moe = false;
  TaskQuality quality;
  Option option;                      // the planner's recommendation for this model
  int target_ctx = 0;                 // the task's target context (not capped by the model's window)
  bool reaches_min = true;            // the option's context reaches the task's minimum
  bool meets_floor = true;            // decode speed at or above the task's floor (or unknown)
  double plan_factor = 1;             // exp(the option's objective, with the task's uncapped target): what the plan keeps
  double score = 0;                   // quality.value × plan_factor
  std::string why;                    // one line: what the score rests on
};

struct WhatFits {
  WhatFitsRequest request;
  const TaskProfile* task = nullptr;
  std::string reference;              // the quality scale's reference benchmark
  std::vector<Pool> pools;            // the device(s), as the first plan resolved them
  std::vector<FitRow> rows;           // ranked, best first, at most `top`
  int considered = 0, filtered = 0, fitting = 0, not_fitting = 0;
  std::vector<std::string> notes;
};

WhatFits what_fits(const Catalog& c, const WhatFitsRequest& request);
// --license: throws InputError naming the value, what is accepted and the closest id for a value that is none of
// the catalog's license ids, "open" or "other".
void check_license_filter(const Catalog& c, const std::vector<std::string>& licenses);
// The model's license passes the --license filter (an empty filter passes everything).
bool license_matches(const Catalog& c, const std::string& license, const std::vector<std::string>& filter);
// a ranks before b: tiers (task minimum reached, speed floor met), then the score, then the model id.
bool fit_ranks_before(const FitRow& a, const FitRow& b);

// ---------- what a model needs (docs/ranking.md §10) ----------
struct NeedsDevice {
  std::string gpu, name;      // catalog GPU id and name ("" for a bare size)
  int count = 1;
  Bytes memory = 0;           // usable device memory in all (working set on a Mac)
  Option option;              // the best option that meets the requirement
};
struct NeedsResult {
  Request base;
  const ModelSpec* model = nullptr;
  const TaskProfile* task = nullptr;
  int target_ctx = 0;                  // the task's target, capped by the model's window
  double floor_tps = 0;
  std::optional<NeedsDevice> smallest_gpu;     // one catalog GPU, smallest memory first
  std::optional<NeedsDevice> smallest_memory;  // a bare size (speed not judged: a size names no bandwidth)
  std::vector<NeedsDevice> multi;              // per discrete GPU kind: the fewest that suffice (up to max_count)
  std::vector<NeedsDevice> apple;              // per Apple chip: its smallest configuration that suffices
  bool found() const { return smallest_gpu || !multi.empty() || !apple.empty(); }
};
NeedsResult needs(const Catalog& c, const Request& base, int max_count = 8);

// JSON (schema/what_fits.schema.json).
inline constexpr int kWhatFitsSchemaVersion = 1;
std::string to_json(const WhatFits& w, int indent = 2);
std::string to_json(const NeedsResult& n, int indent = 2);

}  // namespace kvplan
