// kvprobe: reads the exact bytes llama.cpp allocates, for tests/validation/measure.py.
//
// Loaded with RTLD_GLOBAL before libllama, this library interposes
// ggml_backend_alloc_ctx_tensors_from_buft, the call through which llama.cpp allocates the weights
// (mmap off), each KV cache and each recurrent-state cache. For every buffer it records the buffer
// type, the buffer's size and, for every tensor in it, the name, type, shape, ggml_nbytes and the
// backend's allocation size (ggml_backend_buffer_get_alloc_size). It also interposes
// ggml_backend_buft_alloc_buffer to record the other buffers (the output buffer, the compute buffers)
// with the caller's symbol, and wraps llama_get_memory_breakdown (llama-ext.h), whose model / context
// / compute bytes per buffer type are what llama.cpp itself reports in its memory breakdown.
//
// Everything is returned as JSON text through a C interface for ctypes.
// Built by run.sh against the headers of the llama-cpp-python sdist it installed. It links libggml-base
// (one copy is loaded) but not libllama, whose llama_get_memory_breakdown
// measure.py passes in (kvprobe_set_breakdown_fn) from the copy llama-cpp-python opened.

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "llama-ext.h"
#include "llama.h"

namespace {

std::mutex g_mutex;
std::string g_records;  // JSON objects separated by ",\n"
std::string g_out;      // returned to the caller; valid until the next call

using breakdown_fn_t = llama_memory_breakdown (*)(const struct llama_context *);
breakdown_fn_t g_breakdown_fn = nullptr;

void append_escaped(std::string & out, const char * s) {
    out += '"';
    for (; s && *s; ++s) {
        const char c = *s;
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += c;
        }
    }
    out += '"';
}

void add_record(const std::string & rec) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_records.empty()) {
        g_records += ",\n";
    }
    g_records += rec;
}

const char * caller_symbol(void * addr) {
    Dl_info info;
    if (addr && dladdr(addr, &info) && info.dli_sname) {
        return info.dli_sname;
    }
    return "?";
}

}  // namespace

extern "C" {

ggml_backend_buffer_t ggml_backend_alloc_ctx_tensors_from_buft(struct ggml_context * ctx,
                                                               ggml_backend_buffer_type_t buft) {
    using fn_t = ggml_backend_buffer_t (*)(struct ggml_context *, ggml_backend_buffer_type_t);
    static fn_t real = reinterpret_cast<fn_t>(dlsym(RTLD_NEXT, "ggml_backend_alloc_ctx_tensors_from_buft"));
    void * caller = __builtin_return_address(0);
    ggml_backend_buffer_t buf = real(ctx, buft);

    std::string rec = "{\"kind\": \"ctx_tensors\", \"caller\": ";
    append_escaped(rec, caller_symbol(caller));
    rec += ", \"buft\": ";
    append_escaped(rec, ggml_backend_buft_name(buft));
    rec += ", \"size\": " + std::to_string(buf ? ggml_backend_buffer_get_size(buf) : 0);
    rec += ", \"tensors\": [";
    bool first = true;
    for (ggml_tensor * t = ggml_get_first_tensor(ctx); t != nullptr; t = ggml_get_next_tensor(ctx, t)) {
        if (t->view_src != nullptr) {
            continue;  // views share their source's memory
        }
        rec += first ? "\n  [" : ",\n  [";
        first = false;
        append_escaped(rec, ggml_get_name(t));
        rec += ", ";
        append_escaped(rec, ggml_type_name(t->type));
        rec += ", [" + std::to_string(t->ne[0]) + ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) +
               ", " + std::to_string(t->ne[3]) + "]";
        rec += ", " + std::to_string(ggml_nbytes(t));
        rec += ", " + std::to_string(buf ? ggml_backend_buft_get_alloc_size(buft, t) : 0);
        rec += "]";
    }
    rec += "]}";
    add_record(rec);
    return buf;
}

ggml_backend_buffer_t ggml_backend_buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    using fn_t = ggml_backend_buffer_t (*)(ggml_backend_buffer_type_t, size_t);
    static fn_t real = reinterpret_cast<fn_t>(dlsym(RTLD_NEXT, "ggml_backend_buft_alloc_buffer"));
    void * caller = __builtin_return_address(0);
    ggml_backend_buffer_t buf = real(buft, size);

    std::string rec = "{\"kind\": \"buffer\", \"caller\": ";
    append_escaped(rec, caller_symbol(caller));
    rec += ", \"buft\": ";
    append_escaped(rec, ggml_backend_buft_name(buft));
    rec += ", \"requested\": " + std::to_string(size);
    rec += ", \"size\": " + std::to_string(buf ? ggml_backend_buffer_get_size(buf) : 0) + "}";
    add_record(rec);
    return buf;
}

// Returns the records since the last call (a JSON array) and forgets them.
const char * kvprobe_take_records(void) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_out = "[" + g_records + "]";
    g_records.clear();
    return g_out.c_str();
}

// The address of llama_get_memory_breakdown in the libllama that llama-cpp-python opened.
void kvprobe_set_breakdown_fn(void * fn) { g_breakdown_fn = reinterpret_cast<breakdown_fn_t>(fn); }

// llama.cpp's own memory breakdown of a context, per buffer type: a JSON array of
// {"buft", "model", "context", "compute"} in bytes.
const char * kvprobe_breakdown(const struct llama_context * ctx) {
    // Not linked: linking libllama here would load a second copy of it (the wheel ships
    // libllama.so and libllama.so.0 as two files, and llama-cpp-python opens the first).
    if (g_breakdown_fn == nullptr) {
        return "null";
    }
    const llama_memory_breakdown mb = g_breakdown_fn(ctx);
    std::string out = "[";
    bool first = true;
    for (const auto & [buft, data] : mb) {
        out += first ? "{" : ", {";
        first = false;
        out += "\"buft\": ";
        append_escaped(out, buft ? ggml_backend_buft_name(buft) : "?");
        out += ", \"model\": " + std::to_string(data.model);
        out += ", \"context\": " + std::to_string(data.context);
        out += ", \"compute\": " + std::to_string(data.compute) + "}";
    }
    out += "]";
    std::lock_guard<std::mutex> lock(g_mutex);
    g_out = out;
    return g_out.c_str();
}

// 1 when the interposition is active (the library was loaded before libllama resolved the symbol).
int kvprobe_version(void) { return 1; }

}  // extern "C"
