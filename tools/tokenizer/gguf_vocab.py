"""Minimal pure-Python GGUF metadata reader (v2/v3, little-endian) for tokenizer tools.

Reads only the key/value section: enough to rebuild a Hugging Face tokenizer from
tokenizer.ggml.* keys. No third-party dependencies (the `gguf` package may be absent).
"""
import struct
import sys

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}


class _Cursor:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, fmt):
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self):
        n = self.take("<Q")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="surrogateescape")

    def value(self, vtype):
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype = self.take("<I")
            count = self.take("<Q")
            if etype in _SCALAR:
                fmt = _SCALAR[etype]
                size = struct.calcsize(fmt)
                out = list(struct.unpack_from("<%d%s" % (count, fmt[1]), self.data, self.pos))
                self.pos += size * count
                return out
            return [self.value(etype) for _ in range(count)]
        raise ValueError("unknown GGUF value type %d" % vtype)


def read_metadata(path):
    """Returns {key: value} of a GGUF file's metadata (arrays as lists)."""
    with open(path, "rb") as f:
        data = f.read()
    cur = _Cursor(data)
    if data[:4] != b"GGUF":
        raise ValueError("%s: not a GGUF file" % path)
    cur.pos = 4
    version = cur.take("<I")
    if version not in (2, 3):
        raise ValueError("%s: GGUF version %d unsupported" % (path, version))
    cur.take("<Q")  # tensor count
    n_kv = cur.take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.take("<I")
        meta[key] = cur.value(vtype)
    return meta


if __name__ == "__main__":
    for key, value in read_metadata(sys.argv[1]).items():
        if isinstance(value, list):
            print(key, "[%d]" % len(value), value[:8])
        else:
            print(key, repr(value)[:200])
