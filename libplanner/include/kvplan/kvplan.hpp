// kvplan/kvplan.hpp — umbrella header.
#pragma once
#include "kvplan/catalog.hpp"
#include "kvplan/error.hpp"
#include "kvplan/memory.hpp"
#include "kvplan/model_file.hpp"
#include "kvplan/plan.hpp"
#include "kvplan/priors.hpp"
#include "kvplan/units.hpp"
#include "kvplan/whatfits.hpp"
