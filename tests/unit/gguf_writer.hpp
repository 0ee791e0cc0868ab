// A minimal GGUF writer for tests: builds headers byte by byte (ggml/src/gguf.cpp layout), so the
// reader is tested against files whose every byte the test chose.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace kvtest {

class GgufBuilder {
 public:
  void u32(const std::string& key, std::uint32_t v) { kv(key, 4, &v, 4); }
  void i32(const std::string& key, std::int32_t v) { kv(key, 5, &v, 4); }
  void f32(const std::string& key, float v) { kv(key, 6, &v, 4); }
  void str(const std::string& key, const std::string& v) {
    key_(key, 8);
    string_(v);
    ++n_kv_;
  }
  void u32_array(const std::string& key, const std::vector<std::uint32_t>& v) {
    key_(key, 9);
    put<std::uint32_t>(4);
    put<std::uint64_t>(v.size());
    for (auto x : v) put(x);
    ++n_kv_;
  }
  // A tensor of ggml type `type` with shape ne (ne[0] first) and `bytes` of data.
  void tensor(const std::string& name, std::uint32_t type, std::vector<std::int64_t> ne, std::uint64_t bytes) {
    tensors_.push_back({name, type, std::move(ne), data_size_, bytes});
    data_size_ += (bytes + 31) / 32 * 32;
  }
  // The tensors listed last to first (their data where it was): a file need not list layers in order.
  void reverse_tensors() { std::reverse(tensors_.begin(), tensors_.end()); }
  std::vector<std::uint8_t> bytes() const {
    GgufBuilder out;
    out.raw("GGUF", 4);
    out.put<std::uint32_t>(3);
    out.put<std::uint64_t>(tensors_.size());
    out.put<std::uint64_t>(n_kv_);
    out.buf_.insert(out.buf_.end(), buf_.begin(), buf_.end());
    for (const auto& t : tensors_) {
      out.string_(t.name);
      out.put<std::uint32_t>(static_cast<std::uint32_t>(t.ne.size()));
      for (auto n : t.ne) out.put<std::int64_t>(n);
      out.put<std::uint32_t>(t.type);
      out.put<std::uint64_t>(t.offset);
    }
    std::vector<std::uint8_t> b = out.buf_;
    b.resize((b.size() + 31) / 32 * 32 + data_size_, 0);
    return b;
  }
  void write(const std::string& path) const {
    const auto b = bytes();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

 private:
  struct T {
    std::string name;
    std::uint32_t type;
    std::vector<std::int64_t> ne;
    std::uint64_t offset, bytes;
  };
  template <typename V>
  void put(V v) {
    raw(&v, sizeof v);
  }
  void raw(const void* p, std::size_t n) {
    const auto* c = static_cast<const std::uint8_t*>(p);
    buf_.insert(buf_.end(), c, c + n);
  }
  void string_(const std::string& s) {
    put<std::uint64_t>(s.size());
    raw(s.data(), s.size());
  }
  void key_(const std::string& key, std::uint32_t type) {
    string_(key);
    put(type);
  }
  void kv(const std::string& key, std::uint32_t type, const void* v, std::size_t n) {
    key_(key, type);
    raw(v, n);
    ++n_kv_;
  }
  std::vector<std::uint8_t> buf_;
  std::vector<T> tensors_;
  std::uint64_t n_kv_ = 0, data_size_ = 0;
};

}  // namespace kvtest
