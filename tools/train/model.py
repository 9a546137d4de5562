"""PyTorch definitions of the 1bit model family (issue 8): a Qwen3 target, its MTP head, a
DFlash-style block drafter and a small Qwen3 draft model. Plain PyTorch (1.13 and 2.x), no
transformers: the parameter names of Qwen3LM are those of HF Qwen3ForCausalLM, so export is a
rename-free save. Depends on nothing else in the repository.
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Qwen3Config:
    vocab_size: int = 8192
    hidden_size: int = 384
    intermediate_size: int = 1024
    num_hidden_layers: int = 10
    num_attention_heads: int = 6
    num_key_value_heads: int = 2
    head_dim: int = 64
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 1024
    dropout: float = 0.0            # training only; HF attention_dropout stays 0 in the export

    def hf_config(self, bos_id, eos_id):
        """config.json of the matching HF Qwen3ForCausalLM (tied embeddings)."""
        return {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "hidden_act": "silu", "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
            "rope_scaling": None, "max_position_embeddings": self.max_position_embeddings,
            "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": True,
            "use_sliding_window": False, "sliding_window": None, "max_window_layers": self.num_hidden_layers,
            "bos_token_id": bos_id, "eos_token_id": eos_id, "torch_dtype": "float16",
            "initializer_range": 0.02, "use_cache": True,
        }


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # HF Qwen3RMSNorm normalises in fp32 and scales; the result keeps the input's dtype so
        # that bf16 autocast does not mix dtypes (identical to HF in fp32).
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * x).to(dtype)


def rope_cos_sin(pos, head_dim, theta, device):
    """cos/sin [N, head_dim] for integer positions pos [N] (HF rotate_half / NeoX ordering)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    f = pos.to(torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    """x [B, H, N, D]; cos/sin [N, D]."""
    d = x.shape[-1] // 2
    rot = torch.cat([-x[..., d:], x[..., :d]], dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


def attend(q, k, v, mask, dropout_p=0.0):
    """q [B,H,Nq,D], k/v [B,Hkv,Nk,D], mask: None (causal, Nq == Nk) or bool [Nq,Nk] (True attends)."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.to(q.dtype), v.to(q.dtype)
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    if hasattr(F, "scaled_dot_product_attention"):
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is None:
        n = q.shape[2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    p = F.dropout(s.softmax(-1), dropout_p)
    return (p @ v.float()).to(q.dtype)


class Attention(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.c = c
        h, d = c.num_attention_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(h * d, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(d, c.rms_norm_eps)
        self.k_norm = RMSNorm(d, c.rms_norm_eps)

    def kv(self, x, cos, sin):
        """Keys and values [B, Hkv, N, D] of x [B, N, hidden] (also used for DFlash context)."""
        b, n, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, n, -1, self.c.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, -1, self.c.head_dim).transpose(1, 2)
        return apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin, mask, ctx_kv=None):
        """x [B, N, hidden]; ctx_kv: keys/values put in front of x's own (mask covers both)."""
        b, n, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, n, -1, self.c.head_dim)).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k, v = self.kv(x, cos, sin)
        if ctx_kv is not None:
            k = torch.cat([ctx_kv[0], k], dim=2)
            v = torch.cat([ctx_kv[1], v], dim=2)
        p = self.c.dropout if self.training else 0.0
        o = attend(q, k, v, mask, p).transpose(1, 2).reshape(b, n, -1)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """HF Qwen3DecoderLayer."""

    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.c = c
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask=None, ctx_kv=None):
        p = self.c.dropout if self.training else 0.0
        x = x + F.dropout(self.self_attn(self.input_layernorm(x), cos, sin, mask, ctx_kv), p, self.training)
        return x + F.dropout(self.mlp(self.post_attention_layernorm(x)), p, self.training)


class Qwen3Model(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class Qwen3LM(nn.Module):
    """Qwen3ForCausalLM with tied embeddings; state_dict names match HF (lm_head is the embedding)."""

    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.c = c
        self.model = Qwen3Model(c)
        self.apply(init_weights)

    def lm_head(self, x):
        return x @ self.model.embed_tokens.weight.t()

    def forward(self, ids, keep_layers=()):
        """ids [B, T] -> (logits [B,T,V], last hidden before the final norm [B,T,hidden],
        {layer_idx: output of that layer [B,T,hidden]} for the layers in keep_layers)."""
        t = ids.shape[1]
        cos, sin = rope_cos_sin(torch.arange(t, device=ids.device), self.c.head_dim, self.c.rope_theta, ids.device)
        x = self.model.embed_tokens(ids)
        kept = {}
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin)
            if i in keep_layers:
                kept[i] = x
        return self.lm_head(self.model.norm(x)), x, kept


def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.02)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


class MtpHead(nn.Module):
    """DeepSeek-V3 multi-token prediction module (one Qwen3 block), as Qwen3-Next and GLM-4.5 ship
    it: entry p combines the target's last hidden state h_p (before the final norm) and the
    embedding of token p+1, and predicts token p+2 through the target's shared lm_head. For draft
    length k the head is chained: entry p+1 takes the head's own output at p and its drafted token.
    """

    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.c = c
        self.enorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.hnorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * c.hidden_size, c.hidden_size, bias=False)
        self.block = Block(c)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.apply(init_weights)

    def entry(self, h, emb):
        return self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(h)], dim=-1))

    @staticmethod
    def chain_mask(n_pass, t, device):
        """bool [n_pass*t, n_pass*t]: pass k (0-based) at position q sees pass 0 at positions
        <= q-k and pass j (1..k) at position q-(k-j) only, which is what the KV cache holds when
        the head drafts k+1 tokens in a row from accepted position q-k."""
        q = torch.arange(t, device=device)
        rows = []
        for k in range(n_pass):
            blocks = []
            for j in range(n_pass):
                if j == 0:
                    m = q[None, :] <= (q[:, None] - k)
                elif j <= k:
                    m = q[None, :] == (q[:, None] - (k - j))
                else:
                    m = torch.zeros(t, t, dtype=torch.bool, device=device)
                blocks.append(m)
            rows.append(torch.cat(blocks, dim=1))
        return torch.cat(rows, dim=0)

    def forward(self, h, ids, embed_w, lm_head_w, n_pass, greedy=False):
        """h [B,T,hidden] target hidden (before final norm), ids [B,T] tokens. Returns logits of
        each pass [n_pass][B,T,V]; every pass at position q predicts token q+2, pass k being the
        (k+1)-th draft of a chain started at accepted position q-k (valid for q >= k). Pass k>0
        takes the previous pass's output at q-1 with token q+1: the ground truth (training) or
        the previous pass's argmax (greedy, for measuring acceptance)."""
        b, t, _ = h.shape
        dev = h.device
        nxt = torch.cat([ids[:, 1:], ids[:, -1:]], dim=1)           # token q+1 at entry q
        inputs = [self.entry(h, F.embedding(nxt, embed_w))]
        logits = []
        for k in range(n_pass):
            pos = torch.arange(t, device=dev).repeat(k + 1)
            cos, sin = rope_cos_sin(pos, self.c.head_dim, self.c.rope_theta, dev)
            mask = self.chain_mask(k + 1, t, dev)
            out = self.block(torch.cat(inputs, dim=1), cos, sin, mask)[:, k * t:]
            lg = self.norm(out) @ lm_head_w.t()
            logits.append(lg)
            if k + 1 < n_pass:
                tok = shift_right(lg.argmax(-1)) if greedy else nxt
                inputs.append(self.entry(shift_right(out), F.embedding(tok, embed_w)))
        return logits


def shift_right(x):
    """x[:, q] <- x[:, q-1] along dim 1 (position 0 repeats; it is never used)."""
    return torch.cat([x[:, :1], x[:, :-1]], dim=1)


@dataclass
class DflashConfig:
    block_size: int = 8
    n_layers: int = 2
    target_layers: tuple = (1, 5, 9)   # target layer outputs read (0-based), concatenated
    add_last_context: bool = True      # add the fused context of position anchor-1 to the block


class DflashDrafter(nn.Module):
    """Block drafter in the manner of DFlash (Chen et al., 2025, "DFlash: block diffusion for
    flash speculative decoding"): one forward predicts a whole block. Block position 0 holds the
    last known token, positions 1..B-1 a learned mask embedding, and every position adds the fused
    context feature of position anchor-1; each layer attends to the
    context (the target's hidden states of the chosen layers at positions < anchor, fused by fc
    and projected by the layer's own k/v) and bidirectionally within the block. Logits come from
    the target's lm_head; position j predicts token anchor+j."""

    def __init__(self, c: Qwen3Config, d: DflashConfig):
        super().__init__()
        self.c, self.d = c, d
        self.fc = nn.Linear(len(d.target_layers) * c.hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mask_embd = nn.Parameter(torch.zeros(c.hidden_size))
        self.layers = nn.ModuleList([Block(c) for _ in range(d.n_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.apply(init_weights)
        nn.init.normal_(self.mask_embd, std=0.02)

    def forward(self, feats, ids, anchors, embed_w, lm_head_w):
        """feats: {layer: [B,T,hidden]} target layer outputs; ids [B,T]; anchors [A] positions
        (1 <= a < T) of the last known token. Returns logits [B, A, block_size, V]."""
        b, t = ids.shape
        bs, dev = self.d.block_size, ids.device
        a_n = anchors.shape[0]
        ctx = self.hidden_norm(self.fc(torch.cat([feats[i] for i in self.d.target_layers], dim=-1)))
        x = self.mask_embd.expand(b, a_n, bs, -1).clone()
        x[:, :, 0] = F.embedding(ids[:, anchors], embed_w)
        # The fused context feature of position a-1 (the state that produced token a) is added to
        # every block input, so position 1 starts where an MTP head starts (faster to learn than
        # finding it through attention alone).
        if self.d.add_last_context:
            x = x + ctx[:, anchors - 1][:, :, None, :]
        x = x.reshape(b, a_n * bs, -1)
        blk_pos = (anchors[:, None] + torch.arange(bs, device=dev)[None, :]).reshape(-1)
        cos_b, sin_b = rope_cos_sin(blk_pos, self.c.head_dim, self.c.rope_theta, dev)
        cos_c, sin_c = rope_cos_sin(torch.arange(t, device=dev), self.c.head_dim, self.c.rope_theta, dev)
        blk_id = torch.arange(a_n, device=dev).repeat_interleave(bs)
        m_ctx = torch.arange(t, device=dev)[None, :] < anchors.repeat_interleave(bs)[:, None]
        m_blk = blk_id[:, None] == blk_id[None, :]
        mask = torch.cat([m_ctx, m_blk], dim=1)
        for layer in self.layers:
            ctx_kv = layer.self_attn.kv(ctx, cos_c, sin_c)
            x = layer(x, cos_b, sin_b, mask, ctx_kv)
        return (self.norm(x) @ lm_head_w.t()).view(b, a_n, bs, -1)


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def config_dict(x):
    return asdict(x)
