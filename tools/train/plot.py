"""Loss curves of a training run (results.json history) as a PNG, with matplotlib."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(meta, path):
    h = meta["history"]
    if not h:
        return
    tok = [r["tokens"] / 1e6 for r in h]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for key, label in (("target", "target"), ("mtp0_ce", "MTP draft 1"), ("mtp2_ce", "MTP draft 3"),
                       ("dflash1_ce", "DFlash pos 1"), ("dflash4_ce", "DFlash pos 4"), ("draft_ce", "draft model")):
        if key in h[0]:
            a.plot(tok, [r[key] for r in h], label=label, lw=1)
    a.set_xlabel("training tokens (M)")
    a.set_ylabel("cross-entropy (nats), training batch")
    a.set_title("training loss")
    a.legend()
    a.grid(alpha=0.3)
    ev = [r for r in h if "heldout" in r]
    if ev:
        for dom in sorted(k for k in ev[0]["heldout"]):
            b.plot([r["tokens"] / 1e6 for r in ev], [r["heldout"][dom] for r in ev], label=dom, marker=".", lw=1)
    b.set_xlabel("training tokens (M)")
    b.set_ylabel("cross-entropy (nats), held-out")
    b.set_title(f"held-out loss (best step {meta.get('best_step')})")
    b.legend(fontsize=7)
    b.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
