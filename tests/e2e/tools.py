#!/usr/bin/env python3
"""Tool calls through `1bit serve` with the official `openai` client (issue 18): for each chat
template family (Qwen3, Qwen2.5 and Hermes 3 <tool_call>, Llama 3.1 JSON, Mistral Nemo
[TOOL_CALLS]) on a random-init model with that family's tokenizer, and for templates that ignore
tools (our trained model's, DeepSeek-R1-Distill's: the server describes them), the client makes a round trip (a
required call, the tool's result, a final answer; plain and streamed) and `--samples` seeded
replies with tool_choice "required" or a named function. Every reply must be finish_reason
"tool_calls" with calls of allowed functions (the named one when named; one call when
parallel_tool_calls is false) whose arguments validate against the function's parameter schema
(Python's jsonschema).
    tools.py --binary build/bin/1bit --model models/onebit-20m-q8_0.gguf --testdata ../shared/testdata [--samples 40]
Prints "tools: ok" when everything held; exit 77 (skip) without node, npm or jsonschema."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Serve  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def tiny_model(binary, arch, tokenizer, out):
    """A random-init model of `arch` with the tokenizer's vocabulary (its size read from the file)."""
    tok = json.load(open(tokenizer, encoding="utf-8"))
    ids = set(tok["model"]["vocab"].values()) | {t["id"] for t in tok.get("added_tokens", [])}
    config = {"model_type": arch, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": max(ids) + 1,
              "max_position_embeddings": 4096, "tie_word_embeddings": True, "output_init_std": 0.5}
    if arch == "qwen3":
        config["head_dim"] = 32
    path = out + ".json"
    with open(path, "w") as f:
        json.dump(config, f)
    subprocess.run([binary, "convert", "--random", path, "--tokenizer", tokenizer, "--type", "f16", out],
                   check=True, capture_output=True)
    return out


def validate(report, label):
    import jsonschema
    schemas = {t["function"]["name"]: t["function"].get("parameters", {"type": "object", "properties": {},
                                                                         "additionalProperties": False})
               for t in report["tools"]}
    failures = []
    for k, s in enumerate(report["samples"]):
        where = f"{label} sample {k} (named {s['named']}, parallel {s['parallel']})"
        if s["finish_reason"] != "tool_calls" or not s["calls"]:
            failures.append(f"{where}: finish_reason {s['finish_reason']}, {len(s['calls'])} calls, content {str(s['content'])[:160]!r}")
            continue
        if not s["parallel"] and len(s["calls"]) != 1:
            failures.append(f"{where}: {len(s['calls'])} calls without parallel_tool_calls")
        for c in s["calls"]:
            if c["name"] not in schemas or (s["named"] and c["name"] != s["named"]):
                failures.append(f"{where}: called {c['name']}")
                continue
            try:
                jsonschema.Draft202012Validator(schemas[c["name"]]).validate(json.loads(c["arguments"]))
            except Exception as e:  # noqa: BLE001
                failures.append(f"{where}: {c['name']}({c['arguments'][:160]}): {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--testdata", required=True)
    ap.add_argument("--samples", type=int, default=40)
    args = ap.parse_args()
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        print("tools: python3-jsonschema is not installed")
        return 77
    templates = os.path.join(args.testdata, "templates")
    qwen_tok = os.path.join(args.testdata, "tokenizers", "qwen3", "tokenizer.json")
    llama_tok = os.path.join(args.testdata, "tokenizers", "llama3", "tokenizer.json")
    failures, total = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        qwen = tiny_model(args.binary, "qwen3", qwen_tok, os.path.join(tmp, "qwen3.gguf"))
        llama = tiny_model(args.binary, "llama", llama_tok, os.path.join(tmp, "llama.gguf"))
        cases = [
            ("onebit-20m (own template, tools described by the server)", args.model, []),
            ("Qwen3", qwen, []),
            ("Qwen2.5", qwen, ["--chat-template-file", os.path.join(templates, "Qwen-Qwen2.5-7B-Instruct.jinja")]),
            ("DeepSeek-R1-Distill (tools described by the server)", qwen,
             ["--chat-template-file", os.path.join(templates, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")]),
            ("Hermes 3", llama, ["--chat-template-file",
                                 os.path.join(templates, "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")]),
            ("Llama 3.1", llama, ["--chat-template-file", os.path.join(templates, "meta-llama-Llama-3.1-8B-Instruct.jinja")]),
            ("Mistral Nemo", llama, ["--chat-template-file",
                                     os.path.join(templates, "mistralai-Mistral-Nemo-Instruct-2407.jinja")]),
        ]
        for label, model, extra in cases:
            out = os.path.join(tmp, "report.json")
            with Serve(args.binary, model, ["--ctx-size", "4096"] + extra) as s:
                r = subprocess.run([os.path.join(HERE, "run_openai_client.sh"), f"http://127.0.0.1:{s.port}", "tools", out,
                                    str(args.samples)], capture_output=True, text=True)
            if r.returncode == 77:
                print("tools: node or npm is not available")
                return 77
            if r.returncode != 0:
                failures.append(f"{label}: the openai client failed:\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
                continue
            report = json.load(open(out, encoding="utf-8"))
            f = validate(report, label)
            total += len(report["samples"])
            calls = sum(len(s["calls"]) for s in report["samples"])
            print(f"tools: {label}: round trip ok; {len(report['samples'])} samples, {calls} calls, {len(f)} failed")
            failures += f
    for f in failures[:30]:
        print("FAIL " + f)
    if failures:
        return 1
    print(f"tools: ok ({total} samples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
