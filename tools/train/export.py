"""Exports the trained family: the target and the draft model as Hugging Face Qwen3ForCausalLM
checkpoints (config.json, model.safetensors in fp16, tokenizer files), the MTP head and the
DFlash drafter as safetensors with a drafter config (read by src/model/convert_drafters.cpp).
Writes safetensors itself (the format is a JSON header and raw little-endian data), so it runs
where the `safetensors` package is missing. Also reads them back (read_safetensors).
"""
import json
import os
import shutil
import struct

import numpy as np
import torch

DTYPES = {torch.float16: "F16", torch.float32: "F32", torch.bfloat16: "BF16"}
NP = {"F16": np.float16, "F32": np.float32}


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: torch tensor}; stored in name order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        b = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """{name: float32 numpy array} (F16/F32 only)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=NP[info["dtype"]]).reshape(info["shape"]).astype(np.float32)
    return out


def half(sd, prefix=""):
    return {prefix + k: v.detach().to(torch.float16) for k, v in sd.items()}


def export_hf_lm(lm, tok_dir, tk, out_dir):
    """A Qwen3LM as an HF Qwen3ForCausalLM directory (tied: no lm_head.weight stored)."""
    os.makedirs(out_dir, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if os.path.exists(os.path.join(tok_dir, f)):
            shutil.copy(os.path.join(tok_dir, f), out_dir)
    cfg = lm.c.hf_config(tk.ids["<|endoftext|>"], tk.ids["<|im_end|>"])
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), half(lm.state_dict()), {"format": "pt"})


def mtp_tensors(mtp):
    """HF-style names (DeepSeek-V3 MTP module under "mtp.", its block as mtp.layers.0)."""
    out = {}
    for k, v in mtp.state_dict().items():
        out["mtp." + k.replace("block.", "layers.0.", 1)] = v
    return half(out)


def dflash_tensors(df):
    return half(df.state_dict(), "dflash.")


def export_all(fam, tk, tok_dir, out_dir):
    export_hf_lm(fam.target, tok_dir, tk, os.path.join(out_dir, "target"))
    export_hf_lm(fam.draft, tok_dir, tk, os.path.join(out_dir, "draft"))
    tc = fam.target.c
    base = {"target_architecture": "qwen3", "hidden_size": tc.hidden_size,
            "intermediate_size": tc.intermediate_size, "num_attention_heads": tc.num_attention_heads,
            "num_key_value_heads": tc.num_key_value_heads, "head_dim": tc.head_dim,
            "rms_norm_eps": tc.rms_norm_eps, "rope_theta": tc.rope_theta,
            "max_position_embeddings": tc.max_position_embeddings, "vocab_size": tc.vocab_size,
            "tie_word_embeddings": True}
    d = os.path.join(out_dir, "mtp")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(base, architectures=["Qwen3MtpHead"], model_type="qwen3_mtp",
                       num_nextn_predict_layers=1, num_speculative_tokens=3), f, indent=1)
    write_safetensors(os.path.join(d, "model.safetensors"), mtp_tensors(fam.mtp), {"format": "pt"})
    d = os.path.join(out_dir, "dflash")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(base, architectures=["DflashDrafter"], model_type="qwen3_dflash",
                       num_hidden_layers=fam.fc.n_layers, block_size=fam.fc.block_size,
                       target_layer_ids=list(fam.fc.target_layers),
                       add_last_context=fam.fc.add_last_context), f, indent=1)
    write_safetensors(os.path.join(d, "model.safetensors"), dflash_tensors(fam.dflash), {"format": "pt"})


def load_lm(d):
    """An exported Qwen3ForCausalLM directory as a model.Qwen3LM (fp32)."""
    import model as M
    cfg = json.load(open(os.path.join(d, "config.json")))
    keys = [f for f in M.Qwen3Config.__dataclass_fields__ if f in cfg]
    lm = M.Qwen3LM(M.Qwen3Config(**{k: cfg[k] for k in keys})).eval()
    lm.load_state_dict({k: torch.from_numpy(v) for k, v in read_safetensors(os.path.join(d, "model.safetensors")).items()})
    return lm


def load_family(export_dir, dflash_dir=None):
    """The four exported models, shaped like train.Family for evaluate.py (fp32, eval mode).
    dflash_dir overrides export_dir/dflash (a fine-tuned drafter)."""
    import types
    import model as M
    target = load_lm(os.path.join(export_dir, "target"))
    draft = load_lm(os.path.join(export_dir, "draft"))
    mtp = M.MtpHead(target.c).eval()
    sd = read_safetensors(os.path.join(export_dir, "mtp", "model.safetensors"))
    mtp.load_state_dict({k[len("mtp."):].replace("layers.0.", "block.", 1): torch.from_numpy(v) for k, v in sd.items()})
    dd = dflash_dir or os.path.join(export_dir, "dflash")
    dc = json.load(open(os.path.join(dd, "config.json")))
    fc = M.DflashConfig(block_size=dc["block_size"], n_layers=dc["num_hidden_layers"],
                        target_layers=tuple(dc["target_layer_ids"]),
                        add_last_context=dc.get("add_last_context", False))
    df = M.DflashDrafter(target.c, fc).eval()
    sd = read_safetensors(os.path.join(dd, "model.safetensors"))
    df.load_state_dict({k[len("dflash."):]: torch.from_numpy(v) for k, v in sd.items()})
    return types.SimpleNamespace(target=target, draft=draft, mtp=mtp, dflash=df, tc=target.c, fc=fc)
