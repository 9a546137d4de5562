"""Checks that the parallel drafts used for training and evaluation see only what a real
verification step would see: drafts at anchor a do not change when tokens after a change, and
the MTP chain equals running the head one entry at a time. Run: python3 tools/train/tests/test_masks.py"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import model as M  # noqa: E402
import train as TR  # noqa: E402


def main():
    torch.manual_seed(0)
    fam = TR.Family(TR.PRESETS["tiny"], 300).eval()
    for p in fam.parameters():  # larger weights so argmaxes are not all ties
        p.data.normal_(0, 0.3)
    ew = fam.target.model.embed_tokens.weight
    t, a = 40, 20
    s = torch.randint(0, 300, (t,))
    s2 = s.clone()
    s2[a + 1:] = torch.randint(0, 300, (t - a - 1,))
    with torch.no_grad():
        outs = []
        for x in (s, s2):
            _, h, feats = fam.target(x[None], keep_layers=set(fam.fc.target_layers))
            mtp = [lg[0].argmax(-1) for lg in fam.mtp(h, x[None], ew, ew, 3, greedy=True)]
            df = fam.dflash(feats, x[None], torch.tensor([a]), ew, ew)[0, 0]
            outs.append(([mtp[k][a - 1 + k].item() for k in range(3)], df.argmax(-1).tolist(), h, mtp, df))
        assert outs[0][0] == outs[1][0], (outs[0][0], outs[1][0])
        assert outs[0][1] == outs[1][1]
        assert torch.allclose(outs[0][4], outs[1][4], atol=1e-5)
        # MTP one entry at a time: entries (h_p, s[p+1]) for p < a, then the chain.
        _, h, _ = fam.target(s[None])
        mt = fam.mtp
        inputs = mt.entry(h[:, :a], ew[s[1:a + 1]][None])   # entries 0..a-1
        pos = list(range(a))
        chain = []
        for k in range(3):
            n = inputs.shape[1]
            cos, sin = M.rope_cos_sin(torch.tensor(pos), mt.c.head_dim, mt.c.rope_theta, "cpu")
            out = mt.block(inputs, cos, sin, torch.ones(n, n, dtype=torch.bool).tril())
            d = (mt.norm(out[:, -1]) @ ew.t()).argmax(-1)
            chain.append(d.item())
            inputs = torch.cat([inputs, mt.entry(out[:, -1:], ew[d][None])], dim=1)
            pos.append(pos[-1] + 1)
        assert chain == outs[0][0], (chain, outs[0][0])
    print("masks ok: MTP chain", chain, "DFlash block", outs[0][1])


if __name__ == "__main__":
    main()
