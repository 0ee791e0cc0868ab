// The whole CLI as a function: the arguments as typed (without the program name) in, the exit code out, what it
// prints written to out and err. cli/kvplan_main.cpp calls it for the `kvplan` program; the Python module calls it
// (kvplan._core.run_cli) so that `kvplan serve` and `kvplan mcp` answer exactly what `kvplan ... --json` prints.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace kvplan::cli {

// Exit codes: 0 a plan was found, 1 nothing fits, 2 bad input (under --json also an error object on out), 3 internal.
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kvplan::cli
