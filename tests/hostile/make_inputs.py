#!/usr/bin/env python3
"""Writes the crafted inputs of tests/hostile/cases.txt into a directory (run_hostile.py calls it).

Each input is small and made here, not committed, so the corpus stays readable: GGUF headers with NaN, float,
huge or zero fields, overflowing shapes and offsets, a first key claiming 2 GiB (in a sparse file of 3 GiB, so
the claim fits the file and only the reader's own bound refuses it), config.json folders with wrong JSON
types, impossible numbers and deep nesting, --data overlays with zero paddings and malformed shapes, and
--priors files with long fields, long lines and numbers too large for a double.
"""
import json
import os
import struct
import sys

F32, F16, Q8_0 = 0, 1, 8
T_U32, T_I32, T_F32, T_STRING, T_U64, T_F64 = 4, 5, 6, 8, 10, 12


class Gguf:
    """A GGUF v3 writer (the layout of ggml/src/gguf.cpp), enough for crafted headers."""

    def __init__(self):
        self.kvs = []
        self.tensors = []
        self.data_size = 0

    def kv(self, key, typ, payload):
        self.kvs.append(struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", typ) + payload)

    def u32(self, key, v):
        self.kv(key, T_U32, struct.pack("<I", v))

    def u64(self, key, v):
        self.kv(key, T_U64, struct.pack("<Q", v))

    def f32(self, key, v):
        self.kv(key, T_F32, struct.pack("<f", v))

    def str(self, key, v):
        self.kv(key, T_STRING, struct.pack("<Q", len(v)) + v.encode())

    def tensor(self, name, typ, ne, nbytes, offset=None):
        self.tensors.append((name, typ, ne, self.data_size if offset is None else offset))
        self.data_size += (nbytes + 31) // 32 * 32

    def bytes(self):
        b = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kvs)) + b"".join(self.kvs)
        for name, typ, ne, offset in self.tensors:
            b += struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(ne))
            b += b"".join(struct.pack("<q", n) for n in ne) + struct.pack("<IQ", typ, offset)
        b += b"\0" * ((-len(b)) % 32)
        return b + b"\0" * self.data_size


def tiny_llama(**override):
    """A valid 2-layer llama (n_embd 256, 4 heads, 2 KV heads, ff 512, vocab 1000); override=(type, value) per key."""
    g = Gguf()
    g.str("general.architecture", "llama")
    g.str("general.name", "tiny")
    fields = {"llama.block_count": 2, "llama.embedding_length": 256, "llama.attention.head_count": 4,
              "llama.attention.head_count_kv": 2, "llama.feed_forward_length": 512, "llama.context_length": 4096}
    for key, v in fields.items():
        typ, val = override.pop(key, ("u32", v))
        getattr(g, typ)(key, val)
    for key, (typ, val) in override.items():
        getattr(g, typ)(key, val)
    g.tensor("token_embd.weight", F16, [256, 1000], 256 * 1000 * 2)
    for i in range(2):
        for name, typ, ne, n in [("attn_norm", F32, [256], 1024), ("attn_q", F16, [256, 256], 131072),
                                 ("attn_k", F16, [256, 128], 65536), ("attn_v", F16, [256, 128], 65536),
                                 ("attn_output", F16, [256, 256], 131072), ("ffn_norm", F32, [256], 1024),
                                 ("ffn_gate", F16, [256, 512], 262144), ("ffn_up", F16, [256, 512], 262144),
                                 ("ffn_down", F16, [512, 256], 262144)]:
            g.tensor(f"blk.{i}.{name}.weight", typ, ne, n)
    g.tensor("output_norm.weight", F32, [256], 1024)
    return g


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def config_dir(out, name, cfg, index=None, raw=None):
    write(os.path.join(out, name, "config.json"), raw if raw is not None else json.dumps(cfg))
    if index is not None:
        write(os.path.join(out, name, "model.safetensors.index.json"), index)


QWEN2 = {"model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 27648, "max_position_embeddings": 32768,
         "num_attention_heads": 40, "num_hidden_layers": 64, "num_key_value_heads": 8, "vocab_size": 152064,
         "tie_word_embeddings": False, "use_sliding_window": False}


def main(out):
    os.makedirs(out, exist_ok=True)
    # --- GGUF headers
    write(f"{out}/ok.gguf", tiny_llama().bytes())
    write(f"{out}/nan_embd.gguf", tiny_llama(**{"llama.embedding_length": ("f32", float("nan"))}).bytes())
    write(f"{out}/float_layers.gguf", tiny_llama(**{"llama.block_count": ("f32", 2.5)}).bytes())
    write(f"{out}/zero_heads.gguf", tiny_llama(**{"llama.attention.head_count": ("u32", 0),
                                                  "llama.attention.head_count_kv": ("u32", 0)}).bytes())
    write(f"{out}/kv_not_dividing.gguf", tiny_llama(**{"llama.attention.head_count_kv": ("u32", 3)}).bytes())
    write(f"{out}/huge_heads.gguf", tiny_llama(**{"llama.attention.head_count": ("u32", 1_000_000_000),
                                                  "llama.attention.head_count_kv": ("u32", 1_000_000_000),
                                                  "llama.attention.key_length": ("u32", 1_000_000_000),
                                                  "llama.attention.value_length": ("u32", 1_000_000_000)}).bytes())
    write(f"{out}/huge_ctx.gguf", tiny_llama(**{"llama.context_length": ("u64", 2**63 - 1)}).bytes())
    write(f"{out}/ctx_2g.gguf", tiny_llama(**{"llama.context_length": ("u32", 2**31 - 1)}).bytes())
    write(f"{out}/huge_embd.gguf", tiny_llama(**{"llama.embedding_length": ("u32", 999_999_999)}).bytes())
    g = tiny_llama()
    g.tensor("blk.0.huge.weight", F32, [2**31, 2**31, 2**20], 1024)  # 2^82 elements
    write(f"{out}/overflow_shape.gguf", g.bytes())
    g = tiny_llama()
    g.tensor("blk.0.far.weight", F32, [256], 1024, offset=2**64 - 32)  # data offset past 2^64
    write(f"{out}/offset_2_64.gguf", g.bytes())
    g = tiny_llama()
    g.tensor("blk.0.big.weight", F32, [2**30, 2**20], 1024)  # 2^50 elements, 2^52 bytes: beyond the file
    write(f"{out}/tensor_beyond_file.gguf", g.bytes())
    # a first key claiming 2 GiB, in a sparse 3 GiB file: refused by the reader's key bound, not read
    with open(f"{out}/key_2gib.gguf", "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**31))
        f.truncate(3 * 2**30)
    write(f"{out}/tensor_count.gguf", b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0) + b"\0" * 64)
    write(f"{out}/not_gguf.gguf", b"GGUX" + b"\0" * 60)
    # --- config.json folders
    config_dir(out, "cfg_ok", QWEN2)
    config_dir(out, "cfg_model_type_5", {**QWEN2, "model_type": 5})
    config_dir(out, "cfg_hidden_string", {**QWEN2, "hidden_size": "5120"})
    config_dir(out, "cfg_hidden_float", {**QWEN2, "hidden_size": 5120.5})
    config_dir(out, "cfg_zero_heads", {**QWEN2, "num_attention_heads": 0, "num_key_value_heads": 0})
    config_dir(out, "cfg_kv_not_dividing", {**QWEN2, "num_key_value_heads": 7})
    config_dir(out, "cfg_huge_layers", {**QWEN2, "num_hidden_layers": 1_000_000_000})
    config_dir(out, "cfg_total_1e300", QWEN2, index='{"metadata": {"total_size": 1e300}, "weight_map": {}}')
    config_dir(out, "cfg_total_negative", QWEN2, index='{"metadata": {"total_size": -5}, "weight_map": {}}')
    config_dir(out, "cfg_index_malformed", QWEN2, index='{"metadata": ')
    config_dir(out, "cfg_rope_factor", {**QWEN2, "rope_scaling": {"type": "yarn", "factor": 1e308,
                                                                  "original_max_position_embeddings": 32768}})
    config_dir(out, "cfg_rope_string", {**QWEN2, "rope_scaling": {"type": 7, "factor": "4"}})
    config_dir(out, "cfg_shared_experts", {**QWEN2, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
                                           "moe_intermediate_size": 1_000_000_000, "n_shared_experts": 1_000_000_000})
    config_dir(out, "cfg_not_object", None, raw="[1, 2, 3]")
    config_dir(out, "cfg_malformed", None, raw='{"model_type": "qwen2", ')
    config_dir(out, "cfg_deep", None, raw="[" * 100_000 + "]" * 100_000)
    config_dir(out, "cfg_bool_string", {**QWEN2, "tie_word_embeddings": "yes"})
    # --- --data overlays
    overlays = {
        "data_ctx_pad_0": "engine:\n  id: llama.cpp\n  ctx_pad: 0\n",
        "data_block_0": "engine:\n  id: llama.cpp\n  ggml_types:\n    q8_0: {id: 8, block: 0, bytes: 34}\n",
        "data_alignment_0": ("engine:\n  id: llama.cpp\n  backends:\n    - id: cuda\n      alignment: 0\n"
                             "      fa_types_default: [f16]\n      context: {typical_mib: 1, high_mib: 2}\n"
                             "      pool: {typical_mib: 1, high_mib: 2}\n"),
        "data_ubatch_0": "engine:\n  id: llama.cpp\n  default_ubatch: 0\n",
        "data_gpu_nan": "gpus:\n  - id: nan-card\n    backend: cuda\n    total_mib: 24576\n    bandwidth_gbs: .nan\n",
        "data_gpu_negative": "gpus:\n  - id: neg-card\n    backend: cuda\n    total_mib: -24576\n",
        "data_model_negative": ("models:\n  - id: neg-model\n    arch: llama\n    params: 8000000000\n    layers: -32\n"
                                "    embd: 4096\n    heads: 32\n    kv_heads: 8\n    vocab: 128256\n    ctx_native: 8192\n"
                                "    source: crafted\n"),
        "data_model_nan": ("models:\n  - id: nan-model\n    arch: llama\n    params: 8000000000\n    layers: 32\n"
                           "    embd: .nan\n    heads: 32\n    kv_heads: 8\n    vocab: 128256\n    ctx_native: 8192\n"
                           "    source: crafted\n"),
        "data_model_zero_heads": ("models:\n  - id: zero-heads\n    arch: llama\n    params: 8000000000\n    layers: 32\n"
                                  "    embd: 4096\n    heads: 0\n    kv_heads: 0\n    vocab: 128256\n    ctx_native: 8192\n"
                                  "    source: crafted\n"),
        "data_model_huge": ("models:\n  - id: huge-model\n    arch: llama\n    params: 8000000000\n    layers: 32\n"
                            "    embd: 2000000000\n    heads: 32\n    kv_heads: 8\n    vocab: 128256\n    ctx_native: 8192\n"
                            "    source: crafted\n"),
        "data_rope_scalar": ("models:\n  - id: rope-scalar\n    arch: llama\n    params: 8000000000\n    layers: 32\n"
                             "    embd: 4096\n    heads: 32\n    kv_heads: 8\n    vocab: 128256\n    ctx_native: 8192\n"
                             "    rope_scaling: 5\n    source: crafted\n"),
        "data_models_mapping": "models:\n  id: not-a-list\n",
        "data_models_scalar_entry": "models:\n  - 5\n",
        "data_engine_list": "engine:\n  - 1\n  - 2\n",
        "data_key_sequence": "? [a, b]\n: 1\n",
        "data_backends_scalar": "engine:\n  id: llama.cpp\n  backends: 5\n",
        "data_deep": "models: " + "[" * 20_000 + "]" * 20_000 + "\n",
        "data_prior_inf": "prior:\n  id: default\n  a_k: .inf\n",
        "data_task_zero": ("tasks:\n  - id: zero-task\n    ctx_target: 0\n    ctx_min: 0\n    decode_floor_tps: 1\n"
                           "    speed_source: crafted\n    source: crafted\n"),
    }
    for name, text in overlays.items():
        write(f"{out}/{name}/data.yaml", text)
    # --- --priors files
    header = "k_type,v_type,metric,ctx,rotation,rel_change,noise,weights\n"
    write(f"{out}/priors_long_field.csv", header + "q8_0,q4_0,ppl,512,no,0.01,0.001," + "9" * 40_000 + " bpw\n"
          + "q8_0,q8_0,ppl,512,no,0.001,0.001," + "(" * 40_000 + "\n")
    write(f"{out}/priors_huge_rel.csv", header + "q8_0,q4_0,ppl,512,no,1e999,0.001,Q4_K_M\n")
    write(f"{out}/priors_huge_ctx.csv", header + "q8_0,q4_0,ppl,1e400,no,0.01,0.001,Q4_K_M\n")
    write(f"{out}/priors_nan.csv", header + "q8_0,q4_0,ppl,512,no,nan,0.001,Q4_K_M\n")
    write(f"{out}/priors_unclosed.csv", header + 'q8_0,q4_0,ppl,512,no,0.01,0.001,"Q4_K_M\n')
    write(f"{out}/priors_long_line.log",
          "llama_kv_cache: K (q8_0): 1 MiB, V (q4_0): 1 MiB " + "a" * 40_000 + "\n"
          "perplexity: calculating perplexity over 10 chunks, n_ctx=512, batch_size=2048\n"
          "Final estimate: PPL = 5.1234 +/- 0.0345" + " (" * 20_000 + "\n"
          "llama_kv_cache: K (f16): 1 MiB, V (f16): 1 MiB\n"
          "perplexity: calculating perplexity over 10 chunks, n_ctx=512, batch_size=2048\n"
          "Final estimate: PPL = 5.0000 +/- 0.0345\n")
    write(f"{out}/priors_log_huge_ctx.log",
          "llama_kv_cache: K (q8_0): 1 MiB, V (q4_0): 1 MiB\n"
          "perplexity: calculating perplexity over 10 chunks, n_ctx=99999999999999999999999, batch_size=2048\n"
          "Final estimate: PPL = 5.1234 +/- 0.0345\n")
    write(f"{out}/priors_log_bad_number.log",
          "llama_kv_cache: K (q8_0): 1 MiB, V (q4_0): 1 MiB\n"
          "Final estimate: PPL = - +/- 0.0345\n")
    # --- found by an independent audit (2026-12-02): names that are not text, files that never end, a bad prior
    g = tiny_llama()
    g.kvs = [kv for kv in g.kvs if b"general.name" not in kv[:32]]
    name = b"tiny\xff\xfe"
    g.kv("general.name", T_STRING, struct.pack("<Q", len(name)) + name)
    write(f"{out}/name_not_utf8.gguf", g.bytes())
    g = tiny_llama()
    g.kvs = [kv for kv in g.kvs if b"general.name" not in kv[:32]]
    g.str("general.name", "tiny\x1b[2J\x1b[31m\nforged line")
    write(f"{out}/name_ansi.gguf", g.bytes())
    write(f"{out}/data_prior_negative/data.yaml", "prior:\n  id: default\n  a_k: -1\n")
    os.makedirs(f"{out}/cfg_devzero", exist_ok=True)
    for link, target in ((f"{out}/cfg_devzero/config.json", "/dev/zero"), (f"{out}/priors_devzero.csv", "/dev/zero")):
        if not os.path.lexists(link):
            os.symlink(target, link)
    if not os.path.exists(f"{out}/priors_fifo.csv"):
        os.mkfifo(f"{out}/priors_fifo.csv")
    write(f"{out}/ot_100k.txt", "a" * 100_000 + "=CPU")
    write(f"{out}/name_100k.txt", "q" * 100_000)  # an argument is at most 128 KiB (MAX_ARG_STRLEN)


if __name__ == "__main__":
    main(sys.argv[1])
