"""Split a small GGUF in two as llama.cpp's gguf-split does (split.no u16, split.count u16, split.tensors.count i32 in
every split; the first keeps the metadata), so the remote tests can serve a split model. Only for the tests' tiny
real GGUF files (tests/fuzz/seeds); layout as ggml/src/gguf.cpp reads it."""
from __future__ import annotations

import struct

SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        v = struct.unpack_from("<" + fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize("<" + fmt)
        return int(v)

    def string(self) -> bytes:
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s

    def skip_value(self, t: int) -> None:
        if t == 8:
            self.string()
        elif t == 9:
            et, n = self.take("I"), self.take("Q")
            for _ in range(n):
                self.skip_value(et)
        else:
            self.pos += SCALAR[t]


def kv(key: str, fmt: str, type_id: int, value: int) -> bytes:
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", type_id) + struct.pack("<" + fmt, value)


def parse(data: bytes) -> tuple[int, int, bytes, list[tuple[bytes, list[int], int, int]], int, int]:
    """version, metadata count, metadata bytes, tensor infos (name, dims, type, offset), alignment, data start."""
    r = Reader(data)
    assert data[:4] == b"GGUF"
    r.pos = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    kv_start = r.pos
    alignment = 32
    for _ in range(n_kv):
        key = r.string()
        t = r.take("I")
        at = r.pos
        r.skip_value(t)
        if key == b"general.alignment":
            alignment = struct.unpack_from("<I", data, at)[0]
    kvs = data[kv_start:r.pos]
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("I")
        dims = [r.take("Q") for _ in range(n_dims)]
        tensors.append((name, dims, r.take("I"), r.take("Q")))
    data_start = (r.pos + alignment - 1) // alignment * alignment
    return version, n_kv, kvs, tensors, alignment, data_start


def tensor_info(name: bytes, dims: list[int], t: int, offset: int) -> bytes:
    return (struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            + struct.pack("<IQ", t, offset))


def with_file_type(data: bytes, ftype: int) -> bytes:
    """The same GGUF with general.file_type (u32) added, so a file name's quant agrees with the file."""
    return with_kv(data, kv("general.file_type", "I", 4, ftype))


def with_strings(data: bytes, key: str, count: int, length: int) -> bytes:
    """The same GGUF with a string array of `count` strings of `length` bytes (a large vocabulary's header size)."""
    k = key.encode()
    item = struct.pack("<Q", length) + b"t" * length
    return with_kv(data, struct.pack("<Q", len(k)) + k + struct.pack("<IIQ", 9, 8, count) + item * count)


def with_kv(data: bytes, extra: bytes) -> bytes:
    version, n_kv, kvs, tensors, alignment, data_start = parse(data)
    header = b"GGUF" + struct.pack("<IQQ", version, len(tensors), n_kv + 1) + kvs + extra
    header += b"".join(tensor_info(*t) for t in tensors)
    return header + b"\0" * (-len(header) % alignment) + data[data_start:]


def split(data: bytes, count: int = 2) -> list[bytes]:
    version, n_kv, kvs, tensors, alignment, data_start = parse(data)
    by_offset = sorted(tensors, key=lambda t: t[3])
    ends = [t[3] for t in by_offset[1:]] + [len(data) - data_start]
    blob = {t[0]: data[data_start + t[3]:data_start + end] for t, end in zip(by_offset, ends)}
    per = (len(tensors) + count - 1) // count
    out = []
    for i in range(count):
        part = tensors[i * per:(i + 1) * per]
        meta = kv("split.no", "H", 2, i) + kv("split.count", "H", 2, count) + kv("split.tensors.count", "i", 5, len(tensors))
        head = b"GGUF" + struct.pack("<IQQ", version, len(part), (n_kv if i == 0 else 0) + 3) + (kvs if i == 0 else b"") + meta
        infos, body = b"", b""
        for name, dims, t, _ in part:
            infos += tensor_info(name, dims, t, len(body))
            chunk = blob[name]
            body += chunk + b"\0" * (-len(chunk) % alignment)
        header = head + infos
        header += b"\0" * (-len(header) % alignment)
        out.append(header + body)
    return out
