// GGUF header parsing (ggml/src/gguf.cpp gguf_init_from_file_impl is the reference layout).
// The file is hostile input: every count and length is checked against the bytes that remain
// before anything is allocated, and every failure is an InputError naming the file.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "kvplan/error.hpp"
#include "kvplan/model_file.hpp"
#include "input_file.hpp"

namespace kvplan {
namespace {

enum GgufType : std::uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12, kTypeCount = 13
};
constexpr std::size_t kScalarSize[kTypeCount] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
constexpr std::uint64_t kMaxNumbersKept = 1 << 16;  // numeric arrays longer than this keep only their length
constexpr int kMaxDims = 4;                         // GGML_MAX_DIMS
// Sane limits, checked before anything is allocated or read (real headers: keys of tens of bytes, chat
// templates of tens of KiB, 256k-token vocabularies, tens of thousands of tensors, a few MiB in all).
constexpr std::uint64_t kMaxKeyBytes = 64 * 1024;
constexpr std::uint64_t kMaxStringBytes = 64ull << 20;
constexpr std::uint64_t kMaxEntries = 1 << 20;       // metadata pairs and tensors
}  // namespace

// read_gguf_header reads at most this much of a file for its header.
constexpr std::uint64_t kMaxGgufHeaderBytes = 256ull << 20;

namespace {

class Cursor {
 public:
  Cursor(const std::uint8_t* data, std::size_t size, std::uint64_t file_size, std::string name)
      : data_(data), size_(size), file_size_(file_size), name_(std::move(name)) {}

  std::uint64_t remaining_in_file() const { return file_size_ - pos_; }
  std::uint64_t pos() const { return pos_; }
  // Bytes still readable from the buffer (the caller may hold only a prefix of the file).
  void need(std::uint64_t n, const char* what) const {
    if (n > remaining_in_file())
      fail(fmt::format("truncated: {} needs {} bytes at offset {}, the file has {} left", what, n, pos_, remaining_in_file()));
    if (pos_ + n > size_) throw NeedMore{pos_ + n};
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what, std::uint64_t limit) {
    const auto len = read<std::uint64_t>(what);
    if (len > limit) fail(fmt::format("{} claims {} bytes at offset {} (accepted: at most {})", what, len, pos_ - 8, limit));
    need(len, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(len));
    pos_ += len;
    return s;
  }
  void skip(std::uint64_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }
  [[noreturn]] void fail(const std::string& why) const { throw InputError(name_, "", "not a valid GGUF file: " + why); }

  struct NeedMore {
    std::uint64_t bytes;
  };

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::uint64_t file_size_;
  std::string name_;
  std::uint64_t pos_ = 0;
};

double read_number(Cursor& c, std::uint32_t type) {
  switch (type) {
    case kU8: return c.read<std::uint8_t>("value");
    case kI8: return c.read<std::int8_t>("value");
    case kU16: return c.read<std::uint16_t>("value");
    case kI16: return c.read<std::int16_t>("value");
    case kU32: return c.read<std::uint32_t>("value");
    case kI32: return c.read<std::int32_t>("value");
    case kF32: return c.read<float>("value");
    case kBool: return c.read<std::uint8_t>("value") != 0;
    case kU64: return static_cast<double>(c.read<std::uint64_t>("value"));
    case kI64: return static_cast<double>(c.read<std::int64_t>("value"));
    case kF64: return c.read<double>("value");
    default: c.fail(fmt::format("unknown value type {}", type));
  }
}

GgufHeader::Value read_value(Cursor& c, std::uint32_t type, const std::string& key) {
  switch (type) {
    case kU8: case kU16: case kU32: return static_cast<std::int64_t>(read_number(c, type));
    case kI8: case kI16: case kI32: return static_cast<std::int64_t>(read_number(c, type));
    case kU64: return c.read<std::uint64_t>("value");
    case kI64: return c.read<std::int64_t>("value");
    case kF32: case kF64: return read_number(c, type);
    case kBool: return c.read<std::uint8_t>("value") != 0;
    case kString: return c.string("string value", kMaxStringBytes);
    case kArray: {
      GgufHeader::Array a;
      a.type = c.read<std::uint32_t>("array type");
      a.count = c.read<std::uint64_t>("array length");
      if (a.type >= kTypeCount || a.type == kArray)
        c.fail(fmt::format("key '{}': unsupported array element type {}", key, a.type));
      if (a.type == kString) {
        // every string needs at least its 8-byte length
        if (a.count > c.remaining_in_file() / 8) c.fail(fmt::format("key '{}': {} strings cannot fit in the file", key, a.count));
        for (std::uint64_t i = 0; i < a.count; ++i) {
          const auto len = c.read<std::uint64_t>("string length");
          if (len > kMaxStringBytes) c.fail(fmt::format("key '{}': string {} claims {} bytes (accepted: at most {})", key, i, len, kMaxStringBytes));
          c.skip(len, "string");
        }
      } else {
        const std::size_t elt = kScalarSize[a.type];
        if (a.count > c.remaining_in_file() / elt) c.fail(fmt::format("key '{}': array of {} elements cannot fit in the file", key, a.count));
        if (a.count <= kMaxNumbersKept) {
          a.numbers.reserve(static_cast<std::size_t>(a.count));
          for (std::uint64_t i = 0; i < a.count; ++i) a.numbers.push_back(read_number(c, a.type));
        } else {
          c.skip(a.count * elt, "array");
        }
      }
      return a;
    }
    default: c.fail(fmt::format("key '{}': unknown value type {}", key, type));
  }
}

std::uint64_t as_u64(const GgufHeader::Value& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v)) return *i < 0 ? 0 : static_cast<std::uint64_t>(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&v)) return *u;
  return 0;
}

}  // namespace

GgufHeader parse_gguf_header(const std::uint8_t* data, std::size_t size, std::uint64_t file_size, const std::string& name) {
  Cursor c(data, size, file_size, name);
  GgufHeader h;
  h.file_size = file_size;
  if (file_size < 4 || (size >= 4 && std::memcmp(data, "GGUF", 4) != 0)) c.fail("no GGUF magic");
  c.skip(4, "magic");
  h.version = c.read<std::uint32_t>("version");
  if (h.version < 2 || h.version > 3) c.fail(fmt::format("unsupported version {} (kvplan reads GGUF v2 and v3)", h.version));
  const auto n_tensors = c.read<std::uint64_t>("tensor count");
  const auto n_kv = c.read<std::uint64_t>("metadata count");
  // a key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8 + 4 + 4 + 8
  if (n_kv > c.remaining_in_file() / 13) c.fail(fmt::format("{} metadata entries cannot fit in the file", n_kv));
  if (n_tensors > c.remaining_in_file() / 24) c.fail(fmt::format("{} tensors cannot fit in the file", n_tensors));
  if (n_kv > kMaxEntries) c.fail(fmt::format("{} metadata entries (accepted: at most {})", n_kv, kMaxEntries));
  if (n_tensors > kMaxEntries) c.fail(fmt::format("{} tensors (accepted: at most {})", n_tensors, kMaxEntries));
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("metadata key", kMaxKeyBytes);
    const auto type = c.read<std::uint32_t>("metadata type");
    if (type >= kTypeCount) c.fail(fmt::format("key '{}': unknown value type {}", key, type));
    auto value = read_value(c, type, key);
    if (!h.metadata.emplace(key, std::move(value)).second) c.fail(fmt::format("duplicate key '{}'", key));
  }
  if (auto it = h.metadata.find("general.alignment"); it != h.metadata.end()) {
    h.alignment = as_u64(it->second);
    if (h.alignment == 0 || (h.alignment & (h.alignment - 1)) != 0 || h.alignment > (1u << 20))
      c.fail(fmt::format("general.alignment {} is not a power of two", h.alignment));
  }
  h.tensors.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(n_tensors, 4096)));
  std::set<std::string> tensor_names;
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufHeader::Tensor t;
    t.name = c.string("tensor name", kMaxKeyBytes);
    if (!tensor_names.insert(t.name).second) c.fail(fmt::format("duplicate tensor name '{}'", t.name));  // gguf.cpp refuses it
    const auto n_dims = c.read<std::uint32_t>("tensor dimensions");
    if (n_dims == 0 || n_dims > kMaxDims) c.fail(fmt::format("tensor '{}' has {} dimensions", t.name, n_dims));
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = c.read<std::int64_t>("tensor shape");
      if (ne <= 0 || static_cast<std::uint64_t>(ne) > std::numeric_limits<std::uint64_t>::max() / elements / 64)
        c.fail(fmt::format("tensor '{}' has an impossible shape", t.name));
      elements *= static_cast<std::uint64_t>(ne);
      t.ne.push_back(ne);
    }
    t.type = c.read<std::uint32_t>("tensor type");
    t.offset = c.read<std::uint64_t>("tensor offset");
    h.tensors.push_back(std::move(t));
  }
  h.data_offset = (c.pos() + h.alignment - 1) / h.alignment * h.alignment;  // pos < file size, alignment <= 2^20
  if (h.data_offset > file_size && n_tensors > 0) c.fail("tensor data would start past the end of the file");
  return h;
}

GgufPrefix parse_gguf_prefix(const std::uint8_t* data, std::size_t size, std::uint64_t file_size, const std::string& name) {
  try {
    return {parse_gguf_header(data, size, file_size, name), 0};
  } catch (const Cursor::NeedMore& more) {
    return {std::nullopt, more.bytes};
  }
}

GgufHeader read_gguf_header(const std::string& path, const std::string& field) {
  detail::require_regular_file(path, field, ~std::uint64_t{0});  // a pipe would block the read
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(field, path, "cannot open the file");
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  if (end < 0) throw InputError(field, path, "cannot read the file size");
  const auto file_size = static_cast<std::uint64_t>(end);
  // Read a prefix and grow it until the header parses: headers are small next to the tensor data.
  std::uint64_t want = std::min<std::uint64_t>(file_size, 1 << 20);
  std::vector<std::uint8_t> buf;
  for (;;) {
    buf.resize(static_cast<std::size_t>(want));
    in.clear();
    in.seekg(0);
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(want));
    if (static_cast<std::uint64_t>(in.gcount()) != want) throw InputError(field, path, "short read");
    try {
      return parse_gguf_header(buf.data(), buf.size(), file_size, path);
    } catch (const Cursor::NeedMore& more) {
      if (more.bytes > kMaxGgufHeaderBytes)
        throw InputError(field, path, fmt::format("not a GGUF kvplan reads: its header runs past {} MiB", kMaxGgufHeaderBytes >> 20));
      want = std::min<std::uint64_t>({file_size, std::max<std::uint64_t>(want * 2, more.bytes), kMaxGgufHeaderBytes});
    }
  }
}

}  // namespace kvplan
