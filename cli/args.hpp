// Command-line parsing: llama.cpp spellings, flags → kvplan::Request. No arithmetic here.
#pragma once
#include <string>
#include <vector>

#include "kvplan/catalog.hpp"
#include "kvplan/plan.hpp"

namespace kvplan::cli {

// llama.cpp's single-dash multi-letter flags (-ctk, -np, -kvu, …) rewritten to long names, which CLI11
// can declare; a leading "llama-server" is dropped so a pasted launch line parses.
std::vector<std::string> rewrite_llama_flags(const std::vector<std::string>& args);

// The tail of a pasted llama-server (or llama-cli) line: the flags llama-server accepts that are not kvplan's own
// (--jinja, --port 8080, -t 8, …) are taken out of `args` with their values and returned in order, to go back on
// the launch line; a flag whose memory kvplan does not size is refused by name with the reason (`engine`'s
// server_flags table). Flags before the program name, and kvplan's own flags anywhere, are left in place. `known`
// and `takes_value` as for check_flags; call it before rewrite_llama_flags.
std::vector<std::string> take_server_args(std::vector<std::string>& args, const std::vector<std::string>& known,
                                          const std::vector<std::string>& takes_value, const EngineSpec& engine);

// The program a pasted launch line names ("llama-server" or "llama-cli"), or "" when no line was pasted.
std::string pasted_program(const std::vector<std::string>& args);

// The llama.cpp short spellings rewrite_llama_flags knows (-c, -ctk, -ngl, …), for "did you mean" suggestions.
std::vector<std::string> llama_short_flags();

// Checks the arguments before CLI11 parses them, so the message names the flag as typed: a flag kvplan does not
// know ("did you mean"), or an empty value given to a flag that takes one ("-c ''", "--fit-target="). `known`:
// every flag name; `takes_value`: those that take a value. Throws InputError.
void check_flags(const std::vector<std::string>& args, const std::vector<std::string>& known,
                 const std::vector<std::string>& takes_value);

// A --model / --model-draft / --mmproj value that names a file path rather than a catalog model.
bool looks_like_path(const std::string& value);

}  // namespace kvplan::cli
