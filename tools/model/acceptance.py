#!/usr/bin/env python3
"""A drafter's acceptance in the engine against PyTorch on the same prompts (issue 16).

Acceptance is tokens per verification step (the drafts the target keeps + its own token), as
tools/train/evaluate.py measures it: 16 windows of 64 tokens of the held-out code (and prose)
text, 128 greedy tokens, fixed draft lengths (MTP 3, DFlash block 8 = 7 drafts, draft model 3).

  # here: the held-out text as evaluate.py builds it (tools/train/prepare_data.py), tokenized
  python3 tools/model/acceptance.py prompts --out build/acceptance/prompts.json
  # on the GPU machine (torch): PyTorch's acceptance on those prompts, weights read from the GGUFs
  python3 tools/model/acceptance.py torch --prompts build/acceptance/prompts.json --out $OUT/torch.json
  # here (or --device cuda there): the engine's, through `1bit serve --mtp-fixed` and each drafter,
  # with the replies compared to drafting off and the decode speed against it
  python3 tools/model/acceptance.py engine --prompts build/acceptance/prompts.json [--torch torch.json]
Every command takes --family PREFIX (default models/onebit-20m: PREFIX-q8_0.gguf and its drafters
PREFIX-{mtp,dflash,draft}-q8_0.gguf); `prompts --heldout FILE` reads prepare_data.py's held-out rows
instead of preparing them (tools/train/run_family_device.sh).
"""
import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT_TOKENS, GEN_TOKENS, N_SAMPLES = 64, 128, 16
EOT = 8187  # <|endoftext|>: documents are joined by it (tools/train/train.py)
DRAFTERS = {  # name: (serve option, --mtp-max as evaluate.py drafts); the file: FAMILY-name-q8_0.gguf
    "mtp": ("--mtp", 3),
    "dflash": ("--dflash", 7),
    "draft": ("--draft", 3),
}


def drafter_file(a, name):
    return f"{a.family}-{name}-q8_0.gguf"


def tokenize(binary, model, texts):
    p = subprocess.run([binary, "tokenize", "-m", model, "--jsonl"], input="".join(json.dumps({"text": t}) + "\n" for t in texts),
                       capture_output=True, text=True, check=True)
    return [json.loads(line)["ids"] for line in p.stdout.splitlines()]


def cmd_prompts(a):
    with tempfile.TemporaryDirectory() as d:
        heldout = a.heldout
        if not heldout:
            subprocess.run([sys.executable, os.path.join(ROOT, "tools/train/prepare_data.py"), "--out", d,
                            "--text", a.text, "--repo", ROOT], check=True, stdout=subprocess.DEVNULL)
            heldout = os.path.join(d, "heldout.jsonl.xz")
        with lzma.open(heldout, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
    out = {}
    # evaluate.py's groups: code; prose = held prose then held stories (torch.cat order)
    for dom, parts in (("code", ["code"]), ("prose", ["prose", "story"])):
        stream = []
        for part in parts:
            docs = [r["text"] for r in rows if r["domain"] == part]
            for ids in tokenize(a.binary, a.model, docs):
                stream += ids + [EOT]
        span = len(stream) - PROMPT_TOKENS - GEN_TOKENS
        out[dom] = [stream[int(k * span / N_SAMPLES):int(k * span / N_SAMPLES) + PROMPT_TOKENS] for k in range(N_SAMPLES)]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f)
    print(f"{a.out}: " + ", ".join(f"{k} {len(v)} prompts" for k, v in out.items()))


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def serve(a, port, extra):
    args = [a.binary, "serve", "-m", a.model, "--port", str(port), "-c", "1024", "--threads", str(a.threads),
            "--device", a.device, *extra]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return server
        except Exception:
            if server.poll() is not None:
                sys.exit(f"1bit serve {' '.join(extra)} exited: {server.stderr.read()}")
            time.sleep(0.1)
    sys.exit("1bit serve did not become healthy")


def run_prompts(port, prompts):
    """{domain: [(text, predicted_n, accepted, decode tok/s)]} for greedy replies of GEN_TOKENS."""
    out = {}
    for dom, ps in prompts.items():
        out[dom] = []
        for p in ps:
            r = post(port, {"prompt": p, "max_tokens": GEN_TOKENS, "temperature": 0, "cache_prompt": False})
            t = r["timings"]
            out[dom].append((r["choices"][0]["text"], t["predicted_n"], t.get("draft_n_accepted", 0),
                             t["predicted_per_second"]))
    return out


def cmd_engine(a):
    with open(a.prompts) as f:
        prompts = json.load(f)
    ref = json.load(open(a.torch)) if a.torch else None
    server = serve(a, a.port, [])
    try:
        base = run_prompts(a.port, prompts)
    finally:
        server.terminate()
        server.wait()
    results = {}
    for i, (name, (opt, n_max)) in enumerate(DRAFTERS.items()):
        if a.only and name not in a.only.split(","):
            continue
        server = serve(a, a.port + 1 + i, [opt, drafter_file(a, name), "--mtp-max", str(n_max), "--mtp-fixed"])
        try:
            got = run_prompts(a.port + 1 + i, prompts)
        finally:
            server.terminate()
            server.wait()
        results[name] = {}
        for dom, rows in got.items():
            # the first token comes from the prompt's step; every later step verified a draft
            produced = sum(n - 1 for _, n, _, _ in rows)
            steps = sum(n - 1 - acc for _, n, acc, _ in rows)
            same = sum(x[0] == y[0] for x, y in zip(rows, base[dom]))
            speed = sum(r[3] for r in rows) / sum(b[3] for b in base[dom])
            results[name][dom] = {"tokens_per_step": round(produced / steps, 3) if steps else None,
                                  "same_replies": f"{same}/{len(rows)}", "decode_speed_vs_off": round(speed, 2)}
    print(f"| drafter | domain | engine tokens/step | PyTorch tokens/step | replies equal to drafting off | "
          f"decode tok/s vs off ({a.device}) |")
    print("|---|---|---|---|---|---|")
    for name, doms in results.items():
        for dom, v in doms.items():
            t = ref["accept"][dom].get(name) if ref else None
            print(f"| {name} | {dom} | {v['tokens_per_step']} | {t if t is not None else '-'} | {v['same_replies']} | "
                  f"{v['decode_speed_vs_off']}x |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


def cmd_torch(a):
    sys.path.insert(0, os.path.join(ROOT, "tools/train"))
    sys.path.insert(0, os.path.join(ROOT, "tools/model"))
    from types import SimpleNamespace
    import torch
    import evaluate as EV
    from dflash_distill import target_from_gguf
    from make_drafter_goldens import dflash_from_gguf, mtp_from_gguf
    with open(a.prompts) as f:
        prompts = json.load(f)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    target = target_from_gguf(a.model).to(dev)
    df = dflash_from_gguf(drafter_file(a, "dflash"), target.c).to(dev)
    fam = SimpleNamespace(target=target, dflash=df, fc=df.d,
                          mtp=mtp_from_gguf(drafter_file(a, "mtp"), target.c).to(dev),
                          draft=target_from_gguf(drafter_file(a, "draft")).to(dev))
    stop = {EOT, 8189}  # <|endoftext|>, <|im_end|>
    out = {"accept": {}, "settings": {"prompt_tokens": PROMPT_TOKENS, "gen_tokens": GEN_TOKENS,
                                      "mtp_draft": EV.MTP_DRAFT, "draft_model_draft": EV.DRAFT_MODEL_DRAFT}}
    with torch.no_grad():
        for dom, ps in prompts.items():
            tot = {"mtp": [0, 0], "dflash": [0, 0], "draft": [0, 0]}
            for p in ps:
                pr = torch.tensor(p, device=dev)
                s = EV.greedy(fam.target, pr, GEN_TOKENS, stop)
                if s.shape[0] - len(p) < 2:
                    continue
                for k, (prod, steps) in EV.acceptance(fam, s, len(p)).items():
                    tot[k][0] += prod
                    tot[k][1] += steps
            out["accept"][dom] = {k: round(v[0] / v[1], 3) if v[1] else None for k, v in tot.items()}
            print(dom, out["accept"][dom], flush=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prompts")
    p.add_argument("--out", required=True)
    p.add_argument("--text", default=os.path.join(ROOT, "../shared/testdata/text"))
    p.add_argument("--heldout", help="prepare_data.py's heldout.jsonl.xz (instead of running it on --text)")
    e = sub.add_parser("engine")
    e.add_argument("--prompts", required=True)
    e.add_argument("--torch", help="torch.json to print beside the engine's numbers")
    e.add_argument("--out")
    e.add_argument("--only", help="comma-separated drafters")
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--device", default="cpu")
    e.add_argument("--port", type=int, default=8469, help="drafting off's server; the drafters' the next ports")
    t = sub.add_parser("torch")
    t.add_argument("--prompts", required=True)
    t.add_argument("--out", required=True)
    for x in (p, e, t):
        x.add_argument("--binary", default=os.path.join(ROOT, "build/bin/1bit"))
        x.add_argument("--family", default=os.path.join(ROOT, "models/onebit-20m"),
                       help="PREFIX of the family's files: PREFIX-q8_0.gguf (the target), PREFIX-{mtp,dflash,draft}-q8_0.gguf")
        x.add_argument("--model", help="the target (default FAMILY-q8_0.gguf)")
    a = ap.parse_args()
    a.model = a.model or f"{a.family}-q8_0.gguf"
    {"prompts": cmd_prompts, "engine": cmd_engine, "torch": cmd_torch}[a.cmd](a)


if __name__ == "__main__":
    main()
