// Sizing a plan's candidates (plan(): enumerate → size → rank): each as an option at the context it reaches, the
// request's placement first, kvplan's placements where the model does not fit the GPU for the task. In rank mode
// the candidates go best bound first (planner/bound.cpp), and those that could neither be shown nor remove an
// option shown are left unsized (docs/ranking.md §5, "Sizing best bound first").
#pragma once
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <string>
#include <unordered_map>
#include <vector>

#include "planner/setup.hpp"

namespace kvplan::detail {

// The option's -ngl / --n-cpu-moe: the request's, or kvplan's choice for this candidate.
void set_placement(const Setup& s, const Candidate& c, Option& o);
// The pool an option is short in by the most (the GPU, or host RAM under --ram), and by how much.
size_t short_pool(const Option& o);
Bytes shortfall(const Option& o);

// The options of every candidate sized, each with where it came from, and split by the fit check (indices). One
// store for all: the mission sizes ~1,200 options of ~0.5 KiB, and two lists reserved for all of them each made the
// allocator return and fault in a megabyte per plan (18 % of a repeated CPU-backend mission, docs/benchmarks.md).
struct Sized {
  struct Origin {
    const Candidate* candidate;
    bool at_cap;
    size_t ordinal;  // the candidate's place in the plan's order: the request's placement first, then kvplan's
  };
  std::vector<Option> options;
  std::vector<Origin> origins;
  std::vector<size_t> fitting, failing;  // into options, each in the order added
  void reserve(size_t n);
  void add(Option&& o, int ctx, const Candidate& c, bool at_cap, size_t ordinal);
  // A candidate whose main weights alone overflow a pool fits at no context (weights_alone_overflow): its option is
  // read only when nothing fits (report_nothing_fits), so it is sized then if it can be shown (Sizer::size_closest_deferred).
  // placement_pending: kvplan's placement of c, not searched yet, is known to overflow so (offloaded_shortfall_bound):
  // a lower bound on that shortfall.
  void defer(const Candidate& c, size_t ordinal, std::optional<Bytes> placement_pending = std::nullopt);
  struct Deferred {
    size_t option;  // into options: failing, not sized yet
    std::optional<Bytes> placement_pending;  // the origin's candidate is the one before kvplan's placement
  };
  std::vector<Deferred> deferred;
  // A candidate the ranking left unsized: it could neither be shown nor remove an option shown (cannot_show).
  struct Unsized {
    const Candidate* candidate;  // at the request's placement
    bool placement_open;         // kvplan's placement search not run yet
    size_t ordinal;
    RankBound bound;
  };
  std::vector<Unsized> unsized;
  // an option at the task minimum that rates mild or better: the model fits the GPU for the task
  bool good_at_min() const;
  // The fitting options in the plan's order (what the explanation compares the recommendation with).
  std::vector<const Option*> fitting_in_order() const;
};

// Candidates alike in memory fit the same context: one weight format and flash attention setting, the request's
// placement, and cache types of the same size (q4_0 and iq4_nl: compute_type_key with row sizes is everything
// account() reads of a type). Each such class is searched once per plan; kvplan's own placements are searched each.
class ContextSearches {
 public:
  // round: the ranking's round numbers (largest_round_ctx), else to the step
  int largest_fitting(const Setup& s, const Candidate& c, int cap, bool round);

 private:
  using Key = FlatKey<1, 9>;
  std::unordered_map<Key, int, FlatKeyHash> found_;
};

// One plan's sizing: its mode and context cap, the context searches' memo, kvplan's placements and the options.
class Sizer {
 public:
  // shown: how many options the plan shows (1 for a re-plan that reads only its recommendation)
  Sizer(const Setup& s, const std::string& mode, int cap, size_t shown);
  // The candidates at the request's placement; the context each reaches (for one left unsized, the cap where it
  // fits there, else 0: all size_placed reads).
  // Each candidate's weights are sized when it is (enumerate without weights leaves them to the sizer). The sizer
  // keeps cs: the options and size_placed point into it.
  std::vector<int> size_candidates(std::vector<Candidate>& cs);
  // Whether the sizer leaves candidates unsized (rank mode, bounds_apply): enumerate may leave the weights to it.
  bool prunes() const { return prune_; }
  // The model does not fit the GPU for the task: the candidates that do not reach `at`, with layers or experts in
  // RAM (kvplan's placement).
  void size_placed(std::vector<Candidate>& cs, const std::vector<int>& reached, int at);
  // Nothing fits: the deferred candidates that could be among the closest options shown.
  void size_closest_deferred();
  // The unsized candidates `wanted` picks (asked of each before any is sized), sized now (the explanation compares
  // the recommendation with them).
  void size_unsized(const std::function<bool(const Sized::Unsized&)>& wanted);
  Sized& sized() { return sized_; }

 private:
  struct Result;
  static size_t count_kept(const std::vector<Result>& results);
  RankBound bound(const Candidate& c, bool placement_open);
  std::optional<Bytes> shortfall_bound(const Candidate& c);
  Option size_option(const Candidate& c, int& ctx_found, bool& at_cap);
  // Every candidate left unsized checked against the final ranking, and sized if it could now be shown.
  void settle();
  template <class SizeOne, class Refine>
  std::vector<size_t> best_first(const std::vector<size_t>& ids, std::vector<RankBound>& bounds, bool needs_good_at_min,
                                 SizeOne&& size_one, Refine&& refine);
  // The candidate with its weights' figures at its placement (sized now if enumerate left them).
  const Candidate& weighed(Candidate& c);
  const Setup& s_;
  const std::string& mode_;
  int cap_;
  size_t shown_;
  bool prune_;  // rank mode where bounds hold
  bool device_rate_unknown_ = false;  // every layer on a device of no known bandwidth: no option's decode rate is known
  int at_ = 0;  // the context kvplan's placements are searched at
  ContextSearches searches_;
  Sized sized_;
  std::vector<RankBound> bounds_;  // of the candidates at the request's placement
  std::map<std::pair<const WeightBytes*, bool>, DecodeBound> decode_bounds_;  // by weights and placement_open
  std::map<const WeightBytes*, std::optional<Bytes>> shortfall_bounds_;          // by weights
  std::vector<Candidate>* candidates_ = nullptr;  // size_candidates's
  std::deque<Candidate> placed_;  // kvplan's placements: the options point at them (a deque keeps them in place)
};

}  // namespace kvplan::detail
