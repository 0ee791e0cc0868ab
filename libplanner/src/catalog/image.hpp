// The built-in catalog as a compact binary image: data/ is parsed and validated once, at build time, by the same
// YAML loader that reads --data overlays (tools: kvplan_catalog_image), and the binary decodes the image at start-up
// instead of parsing YAML. The image names the embedded sources it was made from (embedded_data_hash) and its
// format version; a mismatch is a stale build and refused.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "kvplan/catalog.hpp"

namespace kvplan::detail {

// Bump when the encoding or any catalog type's field list changes.
constexpr unsigned kCatalogImageVersion = 1;

std::string encode_catalog_image(const Catalog& catalog, std::string_view source_hash);
// Throws std::logic_error when the image is not a version-kCatalogImageVersion image of `source_hash`.
Catalog decode_catalog_image(std::string_view image, std::string_view source_hash);

// The image itself: a source file kvplan_catalog_image generates at build time.
std::string_view catalog_image();

// The YAML loader: the embedded data/ files merged with each directory of `extra_dirs` (catalog/load.cpp).
Catalog parse_catalog(const std::vector<std::string>& extra_dirs);

}  // namespace kvplan::detail
