// kvplan_catalog_image OUT.cpp: parses and validates data/ (the embedded files) with the YAML loader that reads
// --data overlays, and writes the catalog as an image in a C++ source (catalog/image.hpp). Bad data fails the build
// with the loader's message; so does a catalog field that the image's field lists leave out.
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "catalog/embedded.hpp"
#include "catalog/image.hpp"
#include "kvplan/error.hpp"

namespace {

// The image as one C string literal: printable characters as they are, the rest as three-digit octal escapes.
std::string as_cpp_source(const std::string& image) {
  std::string out = "// Generated from data/ by kvplan_catalog_image (libplanner/src/catalog/make_image.cpp). Do not edit.\n"
                    "#include \"catalog/image.hpp\"\n"
                    "namespace kvplan::detail {\n"
                    "std::string_view catalog_image() {\n"
                    "  static const char image[] =\n    \"";
  std::size_t line = 0;
  for (const unsigned char ch : image) {
    if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\' && ch != '?') {
      out += static_cast<char>(ch);
      ++line;
    } else {
      const char esc[] = {'\\', static_cast<char>('0' + (ch >> 6)), static_cast<char>('0' + ((ch >> 3) & 7)),
                          static_cast<char>('0' + (ch & 7))};
      out.append(esc, sizeof esc);
      line += 4;
    }
    if (line >= 120) out += "\"\n    \"", line = 0;
  }
  out += "\";\n  return {image, sizeof image - 1};\n}\n}  // namespace kvplan::detail\n";
  return out;
}

void write_if_changed(const std::string& path, const std::string& text) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream old;
  old << in.rdbuf();
  if (in && old.str() == text) return;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kvplan_catalog_image OUT.cpp\n";
    return 2;
  }
  try {
    using namespace kvplan::detail;
    const kvplan::Catalog catalog = parse_catalog({});
    const std::string image = encode_catalog_image(catalog, embedded_data_hash());
    if (!(decode_catalog_image(image, embedded_data_hash()) == catalog)) {
      std::cerr << "kvplan_catalog_image: the image does not reproduce the catalog: a field is missing from the lists in "
                   "libplanner/src/catalog/image.cpp\n";
      return 1;
    }
    write_if_changed(argv[1], as_cpp_source(image));
  } catch (const kvplan::InputError& e) {
    std::cerr << "data/: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kvplan_catalog_image: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
