// Command-line parsing: llama.cpp spellings, flags → kvplan::Request. No arithmetic here.
#pragma once
#include <string>
#include <vector>

#include "kvplan/plan.hpp"

namespace kvplan::cli {

// llama.cpp's single-dash multi-letter flags (-ctk, -np, -kvu, …) rewritten to long names, which CLI11
// can declare; a leading "llama-server" is dropped so a pasted launch line parses.
std::vector<std::string> rewrite_llama_flags(const std::vector<std::string>& args);

}  // namespace kvplan::cli
