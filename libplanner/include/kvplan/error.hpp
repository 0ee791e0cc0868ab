// kvplan/error.hpp — the one exception type for bad input.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvplan {

// Thrown for anything the user (or a data file) got wrong. The CLI maps it to exit code 2,
// Python to a ValueError subclass. `field` names the flag or file:line, `value` what was given,
// `accepted` what would have been valid, `suggestion` the closest accepted value ("did you mean").
class InputError : public std::runtime_error {
 public:
  InputError(std::string field, std::string value, std::string problem,
             std::vector<std::string> accepted = {}, std::string suggestion = {});

  const std::string& field() const noexcept { return field_; }
  const std::string& value() const noexcept { return value_; }
  const std::string& problem() const noexcept { return problem_; }
  const std::vector<std::string>& accepted() const noexcept { return accepted_; }
  const std::string& suggestion() const noexcept { return suggestion_; }

 private:
  std::string field_, value_, problem_;
  std::vector<std::string> accepted_;
  std::string suggestion_;
};

// Optimal string alignment distance (an adjacent swap costs one), on the strings as given.
std::size_t edit_distance(const std::string& a, const std::string& b);

// The closest candidate by edit distance (case-insensitive), or "" when nothing is close enough.
std::string closest_match(const std::string& wanted, const std::vector<std::string>& candidates);

}  // namespace kvplan
