#!/usr/bin/env python3
"""Writes small GGUF seed files for fuzz/gguf_reader_fuzz into fuzz/corpus/gguf_reader_fuzz/.

Independent of the C++ writer (built from the spec with struct.pack), so the seeds also cross-check
the reader. Run from the repository root: python3 tools/gen_gguf_fuzz_seeds.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus", "gguf_reader_fuzz")

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B",
              U64: "Q", I64: "q", F64: "d"}


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(value(et, x) for x in items)
    return struct.pack("<" + SCALAR_FMT[t], v)


def kv(key, t, v):
    return s(key) + struct.pack("<I", t) + value(t, v)


def gguf(kvs, tensors=(), version=3, alignment=32):
    """tensors: (name, ne list, ggml type, bytes); laid out in order, each padded to alignment."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    infos, data, offset = b"", b"", 0
    for name, ne, ttype, payload in tensors:
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", ttype, offset)
        padded = payload + b"\0" * (-len(payload) % alignment)
        data += padded
        offset += len(padded)
    meta = head + infos
    if tensors:
        meta += b"\0" * (-len(meta) % alignment)
    return meta + data


def main():
    os.makedirs(OUT, exist_ok=True)
    f32x8 = struct.pack("<8f", *[float(i) for i in range(8)])
    q8_block = struct.pack("<H", 0x3C00) + bytes(range(32))  # scale 1.0 (f16), 32 int8
    every_type = [
        kv("general.architecture", STR, "llama"), kv("t.u8", U8, 255), kv("t.i8", I8, -1),
        kv("t.u16", U16, 65535), kv("t.i16", I16, -2), kv("t.u32", U32, 7), kv("t.i32", I32, -3),
        kv("t.f32", F32, 0.5), kv("t.bool", BOOL, 1), kv("t.u64", U64, 2**40), kv("t.i64", I64, -(2**40)),
        kv("t.f64", F64, -1.25), kv("t.strs", ARR, (STR, ["a", "", "bc"])), kv("t.ints", ARR, (I32, [1, -2, 3])),
        kv("t.floats", ARR, (F32, [0.25, 2.0])), kv("t.bools", ARR, (BOOL, [1, 0])),
        kv("t.nested", ARR, (ARR, [(U32, [1, 2]), (STR, ["x"])])),
    ]
    seeds = {
        "empty_v3.gguf": gguf([]),
        "every_value_type.gguf": gguf(every_type, [("w", [8], 0, f32x8)]),
        "two_tensors_align64.gguf": gguf([kv("general.alignment", U32, 64)],
                                         [("q", [32, 1], 8, q8_block), ("f", [4, 2], 0, f32x8)], alignment=64),
        "version2.gguf": gguf([kv("general.name", STR, "v2")], [("f", [8], 0, f32x8)], version=2),
        "f16_and_bf16.gguf": gguf([], [("h", [4], 1, b"\0" * 8), ("b", [2, 2], 30, b"\1" * 8)]),
        "vocab_like.gguf": gguf([kv("tokenizer.ggml.model", STR, "gpt2"),
                                 kv("tokenizer.ggml.tokens", ARR, (STR, ["<s>", "</s>", "a", "b", "ab"])),
                                 kv("tokenizer.ggml.merges", ARR, (STR, ["a b"])),
                                 kv("tokenizer.ggml.token_type", ARR, (I32, [3, 3, 1, 1, 1]))]),
    }
    valid = seeds["two_tensors_align64.gguf"]
    seeds["bad_magic.gguf"] = b"GGML" + valid[4:]
    seeds["truncated_infos.gguf"] = valid[: len(valid) // 3]
    seeds["huge_array.gguf"] = gguf([s("x") + struct.pack("<IIQ", ARR, STR, 2**61)])
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
