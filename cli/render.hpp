// Rendering plans and catalog listings as text. Formatting only: every number comes from libplanner.
#pragma once
#include <string>

#include "kvplan/plan.hpp"
#include "kvplan/whatfits.hpp"

namespace kvplan::cli {

std::string render_plan(const Plan& plan);                 // the default table
std::string render_explain(const Plan& plan, int rank);     // one option in full
// filter: a substring of id, name, family or arch; licenses: as what-fits --license (empty: any)
std::string render_models(const Catalog& catalog, const std::string& filter = {}, const std::vector<std::string>& licenses = {});
std::string render_what_fits(const WhatFits& w);           // models ranked for a GPU and a task
std::string render_needs(const NeedsResult& n);            // the hardware a model needs
std::string render_gpus(const Catalog& catalog);
std::string render_engines(const Catalog& catalog);         // `kvplan engines`
std::string render_inspect(const ModelSpec& model);          // what was read from a model file
std::string model_shape(const ModelSpec& model);             // "qwen2, 32.76B params, 64 layers, 8 KV heads x 128 head size"
// --json forms of the listings (schema/catalog.schema.json)
std::string models_json(const Catalog& catalog, const std::string& filter = "", const std::vector<std::string>& licenses = {});  // `kvplan models [FILTER] --json`
std::string gpus_json(const Catalog& catalog);
std::string engines_json(const Catalog& catalog);

}  // namespace kvplan::cli
