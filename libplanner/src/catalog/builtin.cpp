// The built-in catalog, decoded from the image the build made of data/ (no YAML parsing at start-up), and
// load_catalog(): the same with overlay directories, which the YAML loader merges at run time.
#include "catalog/embedded.hpp"
#include "catalog/image.hpp"

namespace kvplan {

const Catalog& builtin_catalog() {
  static const Catalog catalog = detail::decode_catalog_image(detail::catalog_image(), detail::embedded_data_hash());
  return catalog;
}

Catalog load_catalog(const std::vector<std::string>& extra_dirs) {
  return extra_dirs.empty() ? builtin_catalog() : detail::parse_catalog(extra_dirs);
}

}  // namespace kvplan
