#!/usr/bin/env python3
"""Trains an EAGLE-1 drafter (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking
Feature Uncertainty", ICML 2024, sec. 4) on `lio spec-data` output, in JAX on the CPU, and writes
it beside the model (issue 63; chapter 06).

    .venv/bin/python scripts/train_eagle.py --data D.safetensors --model M.gguf [--out F]
        [--vocab 4096] [--epochs E] [--batch B] [--lr LR] [--weight-decay WD] ...

The drafter (the contract with lio/eagle.h is the format below; one "entry" per position i):

    a_i = [E[x_{i+1}]; f_i]                 (2d) the next token's embedding, then the target's feature
    u_i = W_fc a_i + b_fc                   (d)
    h_i = u_i + W_o attn(W_q u, W_k u, W_v u)_i     one causal GQA attention layer, RoPE (NEOX
                                            rotate-half) at the absolute position i, scale 1/sqrt(hd),
                                            no norm before it (EAGLE-1's layer 0)
    g_i = h_i + W_down(silu(W_gate n_i) * W_up n_i),   n_i = rmsnorm(h_i) * w_norm
    logits_i = L g_i                        L (V', d): the target's frozen output rows of V'

f_i = spec-data's hidden[i] (the target's last hidden state after its output norm), E = the
target's token_embd rows (dequantized, no sqrt(d) scaling). g_i regresses f_{i+1} and logits_i
predict x_{i+2}. The drafter sees generated positions only: a sequence with prompt length p has
entries i = p-1 .. N-2 and attends causally among them (the engine has no features for prompt rows).

Loss (EAGLE sec. 4.2): mean SmoothL1(g_i, f_{i+1}) (beta 1, per element) + w_cls * mean CE(logits_i,
x_{i+2}) over entries whose x_{i+2} exists and lies in V'; uniform noise U(-noise, noise) on the
input features during training; AdamW, warmup + cosine schedule, gradient clipping. Batches are
whole sequences' windows padded to one length. 5% of the sequences (whole) are held out.

Reduced draft vocabulary (EAGLE-3, Li et al. 2025, sec. 3.2): the V' most frequent answer tokens
of the training split, as scripts/train_medusa.py; a label outside V' counts as a miss.

Held-out accuracies: top1 = argmax logits_i == x_{i+2} with the true features (the first draft
token). top1_depth2 / top1_depth3: entry i is fed the drafter's own g_{i-1} (depth 2), or the g
of an entry that was itself fed its predecessor's g (depth 3), in place of f_i, while its
token input stays the true x_{i+1} and every earlier entry keeps its true-feature keys -- a
chain's second and third draft, as EAGLE's serving computes them. accept_chain[k] is the share of
chain starts whose first k + 1 drafts are all right (an estimate of acceptance at depth k + 1).

Output (safetensors, F32 unless said; d = d_model, H, Hkv heads of hd, F = FFN width):
    eagle.vocab I32 (V'), eagle.lm_head (V', d), eagle.fc.weight (d, 2d), eagle.fc.bias (d),
    eagle.attn_q.weight (H*hd, d), eagle.attn_k.weight / eagle.attn_v.weight (Hkv*hd, d),
    eagle.attn_output.weight (d, H*hd), eagle.ffn_norm.weight (d), eagle.ffn_gate.weight /
    eagle.ffn_up.weight (F, d), eagle.ffn_down.weight (d, F)   -- row-major (out, in): y = W x
    probe.tokens I32 (P + 1): x_{s+1} .. x_{s+P+1} of the first held-out sequence (s = p - 1; the last
    id unused), probe.features (P, d): f_s .. f_{s+P-1}, probe.out (P, d): g_s .. g_{s+P-1}
    __metadata__ (strings): format "lio-eagle-1", d_model, n_heads, n_kv_heads, head_dim, ffn,
    rope_theta, rms_eps, vocab_size, draft_vocab_size, probe_start, source_model,
    source_model_sha256, train_data, coverage, top1, top1_depth2, top1_depth3, accept_chain,
    loss_initial, loss_final (held-out), epochs, train_seconds, and the training settings.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_medusa import output_rows, read_safetensors, sha256, write_safetensors  # noqa: E402


# ---- the target's GGUF: configuration and embedding rows ---------------------------------------

def target_config(model_path):
    """The target's drafter-relevant configuration from its GGUF metadata (read with the `gguf`
    package): {d, n_heads, n_kv_heads, ffn, rope_theta, rms_eps, arch}. rope_theta defaults to
    10000 and rms_eps to 1e-6 when absent. Raises KeyError when a required key is missing."""
    from gguf import GGUFReader
    fields = GGUFReader(model_path).fields
    arch = fields["general.architecture"].contents()

    def get(key, default=None):
        f = fields.get(f"{arch}.{key}")
        if f is None:
            if default is None:
                raise KeyError(f"{model_path}: no {arch}.{key} in the GGUF metadata")
            return default
        v = f.contents()
        return v[0] if isinstance(v, list) else v   # per-layer arrays (some archs): the first layer's
    return {"arch": arch, "d": int(get("embedding_length")), "n_heads": int(get("attention.head_count")),
            "n_kv_heads": int(get("attention.head_count_kv")), "ffn": int(get("feed_forward_length")),
            "rope_theta": float(get("rope.freq_base", 10000.0)),
            "rms_eps": float(get("attention.layer_norm_rms_epsilon", 1e-6))}


def embedding_rows(model_path, ids):
    """(len(ids), d) f32: rows `ids` of the GGUF's token_embd.weight, dequantized by gguf.quants
    (no sqrt(d) scaling, whatever the architecture does at its input)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    t = {t.name: t for t in GGUFReader(model_path).tensors}["token_embd.weight"]
    data = np.asarray(t.data)[ids]
    return np.asarray(dequantize(data, t.tensor_type), dtype=np.float32).reshape(len(ids), -1)


# ---- the windows -------------------------------------------------------------------------------

def make_windows(seq_starts, prompt_lens, seqs, tokens, emb_index, to_draft, length):
    """Padded windows of sequences `seqs`, one row each, `length` entries (>= the longest window).
    Sequence s (rows b .. e-1 of the data, prompt length p) has entries i = p-1 .. e-b-2; entry i
    reads feature row b+i and token tokens[b+i+1], is at RoPE position i, regresses row b+i+1 and
    predicts tokens[b+i+2] (label -1 when past the end or outside V'). Returns a dict of
    (len(seqs), length) arrays: feat (int32 data row of f_i), emb (int32 index into the embedding
    table), pos (int32), label (int32 draft index or -1), valid (bool: a real entry)."""
    n = len(seqs)
    w = {"feat": np.zeros((n, length), np.int32), "emb": np.zeros((n, length), np.int32),
         "pos": np.zeros((n, length), np.int32), "label": np.full((n, length), -1, np.int32),
         "valid": np.zeros((n, length), bool)}
    for r, s in enumerate(seqs):
        b, e, p = int(seq_starts[s]), int(seq_starts[s + 1]), int(prompt_lens[s])
        i = np.arange(p - 1, e - b - 1)                       # local entries p-1 .. N-2
        t = len(i)
        w["feat"][r, :t] = b + i
        w["emb"][r, :t] = emb_index[tokens[b + i + 1]]
        w["pos"][r, :t] = i
        nxt = b + i + 2
        has = nxt < e
        w["label"][r, :t][has] = to_draft[tokens[nxt[has]]]
        w["valid"][r, :t] = True
        w["feat"][r, t:] = b + i[-1] if t else b           # padding reads a real row, masked out
    return w


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", required=True, help="lio spec-data output (tokens, hidden, seq_starts, prompt_lens)")
    ap.add_argument("--model", required=True, help="the GGUF the data came from (embeddings, LM head, config)")
    ap.add_argument("--out", help="output file (default: beside the model, <model stem>.eagle.safetensors)")
    ap.add_argument("--vocab", type=int, default=4096, help="V', the draft vocabulary size (default 4096)")
    ap.add_argument("--epochs", type=int, default=20, help="passes over the training sequences (default 20)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step (default 8)")
    ap.add_argument("--lr", type=float, default=1.5e-3, help="peak AdamW learning rate (default 1.5e-3)")
    ap.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay (default 0.1)")
    ap.add_argument("--clip", type=float, default=0.5, help="gradient clipping by global norm (EAGLE: 0.5)")
    ap.add_argument("--noise", type=float, default=0.1, help="uniform feature noise U(-n, n) (EAGLE: 0.1)")
    ap.add_argument("--w-cls", type=float, default=0.1, help="classification loss weight (EAGLE: 0.1)")
    ap.add_argument("--holdout", type=float, default=0.05, help="share of sequences held out (default 0.05)")
    ap.add_argument("--heads", type=int, help="attention heads H (default: the target's)")
    ap.add_argument("--kv-heads", type=int, help="KV heads Hkv (default: the target's)")
    ap.add_argument("--head-dim", type=int, help="head dimension hd (default d / H)")
    ap.add_argument("--ffn", type=int, help="FFN width F (default: the target's)")
    ap.add_argument("--probe", type=int, default=16, help="probe entries P at most (default 16)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import optax

    t_start = time.perf_counter()
    log = lambda msg: print(f"[train_eagle] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    data, meta = read_safetensors(args.data)
    tokens, hidden = np.asarray(data["tokens"]), np.array(data["hidden"])   # hidden read into memory
    seq_starts, prompt_lens = np.asarray(data["seq_starts"]), np.asarray(data["prompt_lens"])
    n, d = hidden.shape
    cfg = target_config(args.model)
    if cfg["d"] != d:
        raise SystemExit(f"train_eagle: {args.data} has d_model {d}, {args.model} has {cfg['d']}")
    n_heads = args.heads or cfg["n_heads"]
    n_kv = args.kv_heads or cfg["n_kv_heads"]
    hd = args.head_dim or d // n_heads
    ffn = args.ffn or cfg["ffn"]
    theta, eps = cfg["rope_theta"], cfg["rms_eps"]
    if n_heads % n_kv or hd % 2:
        raise SystemExit(f"train_eagle: heads {n_heads} must be a multiple of kv heads {n_kv}, head dim {hd} even")
    group = n_heads // n_kv

    # Held-out sequences (whole sequences), as train_medusa.py.
    rng = np.random.default_rng(args.seed)
    n_seqs = len(seq_starts) - 1
    n_hold = max(1, int(round(args.holdout * n_seqs))) if n_seqs > 1 else 0
    held = np.zeros(n_seqs, bool)
    held[rng.permutation(n_seqs)[:n_hold]] = True
    lens = np.diff(seq_starts) - prompt_lens                   # window lengths N - p
    train_seqs = np.flatnonzero(~held & (lens > 0))
    eval_seqs = np.flatnonzero(held & (lens > 0))

    # Reduced vocabulary: the V' most frequent answer tokens of the training split.
    answer = np.concatenate([tokens[seq_starts[s] + prompt_lens[s]:seq_starts[s + 1]] for s in train_seqs])
    counts = np.bincount(answer, minlength=1)
    v_draft = int(min(args.vocab, np.count_nonzero(counts)))
    vocab = np.argsort(-counts, kind="stable")[:v_draft].astype(np.int32)
    vocab_size = max(int(tokens.max()) + 1, int(meta.get("vocab_size", 0) or 0))
    to_draft = np.full(vocab_size, -1, np.int32)
    to_draft[vocab] = np.arange(v_draft, dtype=np.int32)

    # Embedding rows of every token that is some entry's input x_{i+1} (all splits).
    inputs = np.concatenate([tokens[seq_starts[s] + prompt_lens[s]:seq_starts[s + 1]] for s in range(n_seqs)])
    emb_ids = np.unique(inputs).astype(np.int64)
    emb_index = np.zeros(vocab_size, np.int32)
    emb_index[emb_ids] = np.arange(len(emb_ids), dtype=np.int32)
    emb_table = embedding_rows(args.model, emb_ids)
    lm_head, lm_name = output_rows(args.model, vocab)

    length = int(lens.max())
    length += -length % 8
    train_w = make_windows(seq_starts, prompt_lens, train_seqs, tokens, emb_index, to_draft, length)
    eval_w = make_windows(seq_starts, prompt_lens, eval_seqs, tokens, emb_index, to_draft, length)
    # + one empty window (no valid entry, no label): the padding of a partial held-out batch
    eval_w = {k: np.concatenate([v, np.full((1, length), -1 if k == "label" else 0, v.dtype)])
              for k, v in eval_w.items()}
    n_lab = int((train_w["label"] >= 0).sum())
    n_lab_all = sum(max(int(lens[s]) - 1, 0) for s in train_seqs)
    coverage = n_lab / max(n_lab_all, 1)
    log(f"data {args.data}: {n_seqs} sequences, {n} positions, d_model {d}; {int(train_w['valid'].sum())} "
        f"training / {int(eval_w['valid'].sum())} held-out entries ({len(train_seqs)} / {len(eval_seqs)} "
        f"sequences, windows padded to {length}); draft vocabulary {v_draft} of {vocab_size} covers "
        f"{coverage:.3f} of the training labels; drafter H {n_heads}, Hkv {n_kv}, hd {hd}, F {ffn}, "
        f"theta {theta:g}, eps {eps:g}; {len(emb_ids)} embedding rows, LM head {lm_name} rows; read in "
        f"{time.perf_counter() - t_start:.1f} s")

    # ---- the model ----
    lm = jnp.asarray(lm_head)                                  # (V', d), frozen
    feats_all = jnp.asarray(hidden)                            # (N, d): gathered inside the jitted steps
    emb_all = jnp.asarray(emb_table)                           # (U, d)
    inv_freq = theta ** (-np.arange(0, hd // 2, dtype=np.float64) * 2.0 / hd)

    def rope(x, pos):
        """NEOX rotate-half RoPE on x (B, T, heads, hd) at positions pos (B, T)."""
        ang = pos[..., None].astype(jnp.float32) * jnp.asarray(inv_freq, jnp.float32)  # (B, T, hd/2)
        cos, sin = jnp.cos(ang)[:, :, None, :], jnp.sin(ang)[:, :, None, :]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)

    def project(params, f, e, pos):
        """u (B, T, d) and RoPE'd q (B, T, Hkv, G, hd), k, v (B, T, Hkv, hd) of entries with features f
        and input-token embeddings e (B, T, d)."""
        u = jnp.concatenate([e, f], axis=-1) @ params["fc_w"].T + params["fc_b"]
        b, t = u.shape[:2]
        q = rope((u @ params["q"].T).reshape(b, t, n_heads, hd), pos).reshape(b, t, n_kv, group, hd)
        k = rope((u @ params["k"].T).reshape(b, t, n_kv, hd), pos)
        v = (u @ params["v"].T).reshape(b, t, n_kv, hd)
        return u, q, k, v

    def finish(params, u, attn):
        """g (B, T, d) from u and the attention output (B, T, H*hd): residual, norm, SwiGLU FFN."""
        h = u + attn @ params["o"].T
        nrm = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + eps) * params["norm"]
        return h + (jax.nn.silu(nrm @ params["gate"].T) * (nrm @ params["up"].T)) @ params["down"].T

    def attend(q, k1, v1, base_mask, extra_k=(), extra_v=(), extra_valid=()):
        """Softmax attention of q (B, T, Hkv, G, hd) over keys k1/v1 (B, S, Hkv, hd) where base_mask
        (B, T, S), plus one extra key per query for each (k, v, valid) in extra_* (B, T, Hkv, hd),
        (B, T): the query's own-row keys of a draft chain. Returns (B, T, H*hd)."""
        scale = 1.0 / np.sqrt(hd)
        s = jnp.einsum("btkgh,bskh->btkgs", q, k1) * scale
        s = jnp.where(base_mask[:, :, None, None, :], s, -jnp.inf)
        ex = [jnp.where(ok[:, :, None, None], jnp.einsum("btkgh,btkh->btkg", q, k) * scale, -jnp.inf)
              for k, ok in zip(extra_k, extra_valid)]
        allsc = jnp.concatenate([s] + [x[..., None] for x in ex], axis=-1)
        p = jax.nn.softmax(allsc, axis=-1)
        out = jnp.einsum("btkgs,bskh->btkgh", p[..., :s.shape[-1]], v1)
        for j, v in enumerate(extra_v):
            out = out + p[..., s.shape[-1] + j][..., None] * v[:, :, :, None, :]
        return out.reshape(q.shape[0], q.shape[1], n_heads * hd)

    causal = np.tril(np.ones((length, length), bool))

    def forward(params, f, e, pos, valid):
        """g (B, T, d) of padded windows with true (or noised) features f: causal over valid keys."""
        u, q, k, v = project(params, f, e, pos)
        mask = jnp.asarray(causal)[None] & valid[:, None, :]
        mask = mask | jnp.eye(length, dtype=bool)[None]        # padded queries see themselves (no NaN)
        return finish(params, u, attend(q, k, v, mask))

    def loss_parts(g, target, labels, valid):
        """(SmoothL1 mean over valid entries' elements, CE mean over labelled entries)."""
        diff = jnp.abs(g - target)
        sl1 = jnp.where(diff < 1.0, 0.5 * diff * diff, diff - 0.5).mean(-1)
        vm = valid.astype(jnp.float32)
        reg = (sl1 * vm).sum() / jnp.maximum(vm.sum(), 1.0)
        logp = jax.nn.log_softmax(g @ lm.T, axis=-1)
        lm_ = (labels >= 0).astype(jnp.float32)
        nll = -jnp.take_along_axis(logp, jnp.maximum(labels, 0)[..., None], axis=-1)[..., 0]
        ce = (nll * lm_).sum() / jnp.maximum(lm_.sum(), 1.0)
        return reg, ce

    def gather(w):
        """Device arrays of a batch of windows: f, target f_{i+1}, e, pos, label, valid."""
        return (feats_all[w["feat"]], feats_all[w["feat"] + 1], emb_all[w["emb"]], w["pos"], w["label"], w["valid"])

    def loss_fn(params, w, key):
        f, tgt, e, pos, lab, valid = gather(w)
        if args.noise > 0:
            f = f + jax.random.uniform(key, f.shape, jnp.float32, -args.noise, args.noise)
        reg, ce = loss_parts(forward(params, f, e, pos, valid), tgt, lab, valid)
        return reg + args.w_cls * ce, (reg, ce)

    # ---- parameters: torch.nn.Linear's default initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) ----
    key = jax.random.PRNGKey(args.seed)
    shapes = {"fc_w": (d, 2 * d), "fc_b": (d,), "q": (n_heads * hd, d), "k": (n_kv * hd, d),
              "v": (n_kv * hd, d), "o": (d, n_heads * hd), "gate": (ffn, d), "up": (ffn, d), "down": (d, ffn)}
    params = {}
    for name, shape in shapes.items():
        key, sub = jax.random.split(key)
        fan_in = 2 * d if name == "fc_b" else shape[-1]
        params[name] = jax.random.uniform(sub, shape, jnp.float32, -1.0, 1.0) / np.sqrt(fan_in)
    params["norm"] = jnp.ones((d,), jnp.float32)
    n_params = sum(int(np.prod(p.shape)) for p in params.values())

    steps_per_epoch = max(1, len(train_seqs) // args.batch)
    total_steps = steps_per_epoch * args.epochs
    schedule = optax.warmup_cosine_decay_schedule(0.0, args.lr, min(100, total_steps // 10 + 1), max(total_steps, 2))
    # weight decay on matrices only (not biases or the norm weight)
    decay_mask = {k: v.ndim == 2 for k, v in params.items()}
    opt = optax.chain(optax.clip_by_global_norm(args.clip),
                      optax.adamw(schedule, weight_decay=args.weight_decay, mask=decay_mask))
    opt_state = opt.init(params)

    @jax.jit
    def train_step(params, opt_state, w, key):
        """One AdamW step on windows w with noise key `key`; returns (params, opt_state, loss)."""
        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, w, key)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def shift(x, by):
        """x moved `by` entries later along axis 1 (zeros first): shift(x, 1)[:, i] = x[:, i - 1]."""
        pad = jnp.zeros_like(x[:, :by])
        return jnp.concatenate([pad, x[:, :x.shape[1] - by]], axis=1)

    @jax.jit
    def eval_step(params, w):
        """Held-out loss sums and the chain accuracies of a batch: hits (3, B, T) of depth 1..3
        (entry i at depth m is fed the g of entry i-1 at depth m-1; its own and its m-1 predecessors'
        keys come from those chain entries, earlier keys from true features)."""
        f, tgt, e, pos, lab, valid = gather(w)
        u1, q1, k1, v1 = project(params, f, e, pos)
        mask = jnp.asarray(causal)[None] & valid[:, None, :] | jnp.eye(length, dtype=bool)[None]
        g = finish(params, u1, attend(q1, k1, v1, mask))
        reg, ce = loss_parts(g, tgt, lab, valid)
        n_valid, n_lab = valid.sum(), (lab >= 0).sum()
        hits = [(jnp.argmax(g @ lm.T, -1) == lab) & (lab >= 0)]
        ks, vs = [k1], [v1]
        first = jnp.argmax(valid, axis=1)[:, None]            # 0 for every non-empty window
        idx = jnp.arange(length)[None, :]
        for m in (2, 3):
            fm = shift(g, 1)                                   # g of entry i-1 at depth m-1
            um, qm, km, vm = project(params, fm, e, pos)
            ks.append(km)
            vs.append(vm)
            base = jnp.asarray(np.tril(np.ones((length, length), bool), -(m - 1)))[None] & valid[:, None, :]
            ek, ev, eok = [], [], []
            for r in range(2, m + 1):                          # key of entry i-(m-r) at depth r
                ek.append(shift(ks[r - 1], m - r))
                ev.append(shift(vs[r - 1], m - r))
                eok.append(idx - (m - r) >= first)
            g = finish(params, um, attend(qm, k1, v1, base, ek, ev, eok))
            ok = (lab >= 0) & (idx - (m - 1) >= first)
            hits.append((jnp.argmax(g @ lm.T, -1) == lab) & ok)
        return reg * n_valid, ce * n_lab, n_valid, n_lab, jnp.stack(hits)

    @jax.jit
    def probe_step(params, w):
        """g (B, T, d) of windows w with their true features (no noise)."""
        f, _, e, pos, _, valid = gather(w)
        return forward(params, f, e, pos, valid)

    def batches(w, rows):
        """Device arrays of windows `rows` of w."""
        return {k: jnp.asarray(v[rows]) for k, v in w.items()}

    def evaluate(params):
        """Held-out (loss, [top1 at depth 1..3], [chain acceptance at depth 1..3]). Depth m scores the
        entries with a next-next token at least m - 1 entries after their window's start; a label
        outside V' is a miss. A chain from entry s is accepted to depth m when depths 1..m hit at
        s .. s+m-1."""
        if len(eval_seqs) == 0:
            return float("nan"), [float("nan")] * 3, [float("nan")] * 3
        reg_s = ce_s = n_valid = n_lab = 0.0
        hit, chain, n_scored = np.zeros(3), np.zeros(3), np.zeros(3)
        for i in range(0, len(eval_seqs), args.batch):
            rows = np.arange(i, i + args.batch)
            rows[rows >= len(eval_seqs)] = len(eval_seqs)         # the empty window: one compiled shape
            r, c, a, b, hits = eval_step(params, batches(eval_w, rows))
            reg_s, ce_s, n_valid, n_lab = reg_s + float(r), ce_s + float(c), n_valid + float(a), n_lab + float(b)
            hits = np.asarray(hits)
            t = np.asarray(eval_w["valid"][rows].sum(axis=1))
            for m in range(3):
                hit[m] += hits[m].sum()
                n_scored[m] += np.maximum(t - 1 - m, 0).sum()
                ok = np.ones_like(hits[0][:, :length - m])
                for q in range(m + 1):
                    ok &= hits[q][:, q:length - m + q]
                chain[m] += ok.sum()
        loss = reg_s / max(n_valid, 1) + args.w_cls * ce_s / max(n_lab, 1)
        return loss, list(hit / np.maximum(n_scored, 1)), list(chain / np.maximum(n_scored, 1))

    fmt = lambda xs: " ".join(f"{x:.3f}" for x in xs)  # noqa: E731
    loss0, top1, chain = evaluate(params)
    log(f"epoch 0 (untrained, {n_params / 1e6:.2f} M parameters): held-out loss {loss0:.4f}, top-1 depth 1-3 "
        f"{fmt(top1)}")

    t_train = time.perf_counter()
    history = []
    key = jax.random.PRNGKey(args.seed + 1)
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(train_seqs))
        t_epoch, run_loss = time.perf_counter(), 0.0
        for step in range(steps_per_epoch):
            rows = np.sort(order[step * args.batch:(step + 1) * args.batch])
            key, sub = jax.random.split(key)
            params, opt_state, loss = train_step(params, opt_state, batches(train_w, rows), sub)
            run_loss += float(loss)
        loss_e, top1, chain = evaluate(params)
        history.append(loss_e)
        log(f"epoch {epoch}/{args.epochs}: train loss {run_loss / steps_per_epoch:.4f}, held-out loss "
            f"{loss_e:.4f}, top-1 depth 1-3 {fmt(top1)}, chain acceptance {fmt(chain)} "
            f"({time.perf_counter() - t_epoch:.1f} s, {time.perf_counter() - t_train:.0f} s in all)")
    train_s = time.perf_counter() - t_train

    # ---- the probe: the first held-out sequence's first P entries, true features, no noise ----
    ps = int(eval_seqs[0]) if len(eval_seqs) else int(train_seqs[0])
    b, p = int(seq_starts[ps]), int(prompt_lens[ps])
    s = p - 1
    n_probe = max(1, min(args.probe, int(lens[ps]) - 1))
    pw = make_windows(seq_starts, prompt_lens, [ps], tokens, emb_index, to_draft, length)
    pw["valid"][0, n_probe:] = False
    probe_out = np.asarray(probe_step(params, {k: jnp.asarray(v) for k, v in pw.items()}))[0, :n_probe]
    probe_tokens = tokens[b + s + 1:b + s + n_probe + 2].astype(np.int32)

    out = args.out or os.path.splitext(args.model)[0] + ".eagle.safetensors"
    P = {k: np.asarray(v, np.float32) for k, v in params.items()}
    tensors = {
        "eagle.vocab": vocab, "eagle.lm_head": lm_head, "eagle.fc.weight": P["fc_w"], "eagle.fc.bias": P["fc_b"],
        "eagle.attn_q.weight": P["q"], "eagle.attn_k.weight": P["k"], "eagle.attn_v.weight": P["v"],
        "eagle.attn_output.weight": P["o"], "eagle.ffn_norm.weight": P["norm"], "eagle.ffn_gate.weight": P["gate"],
        "eagle.ffn_up.weight": P["up"], "eagle.ffn_down.weight": P["down"],
        "probe.tokens": probe_tokens, "probe.features": np.asarray(hidden[b + s:b + s + n_probe], np.float32),
        "probe.out": probe_out.astype(np.float32),
    }
    metadata = {
        "format": "lio-eagle-1", "d_model": d, "n_heads": n_heads, "n_kv_heads": n_kv, "head_dim": hd, "ffn": ffn,
        "rope_theta": repr(float(theta)), "rms_eps": repr(float(eps)), "vocab_size": vocab_size,
        "draft_vocab_size": v_draft, "probe_start": s, "source_model": os.path.basename(args.model),
        "source_model_sha256": sha256(args.model), "train_data": os.path.basename(args.data),
        "train_sequences": len(train_seqs), "train_entries": int(train_w["valid"].sum()),
        "coverage": f"{coverage:.4f}", "top1": f"{top1[0]:.4f}", "top1_depth2": f"{top1[1]:.4f}",
        "top1_depth3": f"{top1[2]:.4f}", "accept_chain": json.dumps([round(x, 4) for x in chain]),
        "loss_initial": f"{loss0:.4f}", "loss_final": f"{history[-1] if history else loss0:.4f}",
        "epochs": args.epochs, "batch": args.batch, "lr": args.lr, "weight_decay": args.weight_decay,
        "noise": args.noise, "w_cls": args.w_cls, "train_seconds": f"{train_s:.1f}",
    }
    write_safetensors(out, tensors, metadata)
    log(f"wrote {out}: d {d}, H {n_heads}, Hkv {n_kv}, hd {hd}, F {ffn}, draft vocabulary {v_draft}, probe "
        f"{n_probe} entries from position {s}; training {train_s:.1f} s, total {time.perf_counter() - t_start:.1f} s")
    print(json.dumps({"out": out, "loss_initial": loss0, "loss_final": history[-1] if history else loss0,
                      "top1": top1[0], "top1_depth2": top1[1], "top1_depth3": top1[2], "accept_chain": chain,
                      "coverage": coverage, "train_s": train_s, "total_s": time.perf_counter() - t_start}))


if __name__ == "__main__":
    main()
