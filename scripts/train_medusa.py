#!/usr/bin/env python3
"""Trains Medusa-1 draft heads (Cai et al. 2024, "Medusa", sec. 2.1.1 and 2.2.1) on `lio spec-data`
output, in JAX on the CPU, and writes them beside the model (issue 63; chapter 06).

    .venv/bin/python scripts/train_medusa.py --data D.safetensors --model M.gguf [--out F]
        [--heads 4] [--vocab 4096] [--epochs 6] [--batch 256] [--lr 2e-3] ...

The heads. Head k (k = 1..K) reads the target's final hidden state h_t (after the output norm,
what the LM head reads) and predicts token t + k + 1, one further than the LM head's t + 1:

    head_k(h) = h + SiLU(W_k h + b_k)               W_k (d, d), b_k (d), both initialised to zero
    logits_k  = head_k(h) . L^T                     L (V', d): the model's frozen output rows

so each head starts as the LM head itself. Loss: sum_k 0.8^k CE_k (Medusa's decay weighting),
AdamW with a cosine schedule. Only positions whose target token is part of a generated answer
are used (--all-positions: prompt targets too), held-out 5% of the sequences for accuracy.

Reduced draft vocabulary (EAGLE-3, Li et al. 2025, sec. 3.2): logits and loss over the V' most
frequent answer tokens of the training data only; a label outside them is skipped for that head
(it counts as a miss in the accuracies) and its share is reported as the coverage.

The output matrix: read from the GGUF with the `gguf` package (scripts/requirements.txt),
`output.weight`, else `token_embd.weight` (tied embeddings), dequantized with gguf.quants.

Output (safetensors; every tensor F32 unless said):
    medusa.vocab         I32 (V')    draft vocabulary: target token ids, most frequent first
    medusa.lm_head       (V', d)     the output matrix's rows of those ids
    medusa.{k}.weight    (d, d)      W of head k = 0..K-1 (head k predicts t + k + 2), row-major
                                     (out, in): y = W h, as torch.nn.Linear stores it
    medusa.{k}.bias      (d)
    __metadata__ (strings): format "lio-medusa-1", num_heads, d_model, vocab_size (the target's),
    draft_vocab_size, source_model (file name), source_model_sha256, train_data, coverage, and per
    head top1 / top5 on the held-out split, loss_initial / loss_final (held-out).
"""
import argparse
import hashlib
import json
import os
import struct
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- safetensors (the format spec: u64 header length, JSON header, data) -------------------------

def read_safetensors(path):
    """Returns ({name: np.ndarray}, metadata) of a safetensors file (F32 / I32 tensors), memory-mapped."""
    dtypes = {"F32": np.float32, "I32": np.int32}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {})
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        out[name] = raw[begin:end].view(dtypes[t["dtype"]]).reshape(t["shape"])
    return out, meta


def write_safetensors(path, tensors, metadata):
    """Writes `tensors` ({name: F32 or I32 array}, in order) and string `metadata` atomically."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}
    header, offset, blobs = {"__metadata__": {k: str(v) for k, v in metadata.items()}}, 0, []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# ---- the frozen output matrix -------------------------------------------------------------------

def output_rows(model_path, ids):
    """(len(ids), d) f32: rows `ids` of the GGUF's output matrix (output.weight, else the tied
    token_embd.weight), dequantized by gguf.quants."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    reader = GGUFReader(model_path)
    tensors = {t.name: t for t in reader.tensors}
    t = tensors.get("output.weight") or tensors["token_embd.weight"]
    data = np.asarray(t.data)[ids]  # (V', row bytes) for block types, (V', d) for float types
    return np.asarray(dequantize(data, t.tensor_type), dtype=np.float32).reshape(len(ids), -1), t.name


def sha256(path):
    """The file's SHA-256, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# ---- the examples ------------------------------------------------------------------------------

def make_labels(tokens, seq_starts, prompt_lens, n_heads, all_positions):
    """(N, K + 1) int32: column j holds the token j + 1 positions ahead (j = 0: the LM head's own
    target, j = k: head k's), or -1 where that lies past the sequence's end or, unless
    all_positions, inside its prompt."""
    n = len(tokens)
    labels = np.full((n, n_heads + 1), -1, dtype=np.int32)
    for s in range(len(seq_starts) - 1):
        b, e = int(seq_starts[s]), int(seq_starts[s + 1])
        first = b if all_positions else b + int(prompt_lens[s])  # first position whose token may be a target
        for j in range(n_heads + 1):
            t = np.arange(b, e - j - 1)                # positions whose target t + j + 1 < e
            t = t[t + j + 1 >= first]
            labels[t, j] = tokens[t + j + 1]
    return labels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", required=True, help="lio spec-data output (tokens, hidden, seq_starts, prompt_lens)")
    ap.add_argument("--model", required=True, help="the GGUF the data came from (its output matrix is the LM head)")
    ap.add_argument("--out", help="output file (default: beside the model, <model stem>.medusa.safetensors)")
    ap.add_argument("--heads", type=int, default=4, help="K, the number of heads (default 4)")
    ap.add_argument("--vocab", type=int, default=4096, help="V', the draft vocabulary size (default 4096)")
    ap.add_argument("--epochs", type=int, default=6, help="passes over the training positions (default 6)")
    ap.add_argument("--batch", type=int, default=256, help="positions per step (default 256)")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak AdamW learning rate (default 2e-3)")
    ap.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (default 0)")
    ap.add_argument("--decay", type=float, default=0.8, help="head k's loss weight is decay^k (Medusa: 0.8)")
    ap.add_argument("--holdout", type=float, default=0.05, help="share of sequences held out (default 0.05)")
    ap.add_argument("--all-positions", action="store_true", help="also train on targets inside the prompts")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import optax

    t_start = time.perf_counter()
    log = lambda msg: print(f"[train_medusa] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    data, meta = read_safetensors(args.data)
    tokens, hidden = np.asarray(data["tokens"]), data["hidden"]
    seq_starts, prompt_lens = np.asarray(data["seq_starts"]), np.asarray(data["prompt_lens"])
    n, d = hidden.shape
    k_heads = args.heads
    labels = make_labels(tokens, seq_starts, prompt_lens, k_heads, args.all_positions)

    # Held-out sequences (whole sequences, so no answer is seen in training and scored).
    rng = np.random.default_rng(args.seed)
    n_seqs = len(seq_starts) - 1
    n_hold = max(1, int(round(args.holdout * n_seqs))) if n_seqs > 1 else 0
    held = np.zeros(n_seqs, bool)
    held[rng.permutation(n_seqs)[:n_hold]] = True
    seq_of = np.repeat(np.arange(n_seqs), np.diff(seq_starts))
    usable = (labels[:, 1:] >= 0).any(axis=1)
    train_rows = np.flatnonzero(usable & ~held[seq_of])
    eval_rows = np.flatnonzero(usable & held[seq_of])

    # Reduced vocabulary: the V' most frequent answer tokens of the training split.
    train_targets = labels[train_rows, 0]
    counts = np.bincount(train_targets[train_targets >= 0], minlength=1)
    v_draft = int(min(args.vocab, np.count_nonzero(counts)))
    vocab = np.argsort(-counts, kind="stable")[:v_draft].astype(np.int32)
    to_draft = np.full(max(int(tokens.max()) + 1, int(meta.get("vocab_size", 0))), -1, np.int32)
    to_draft[vocab] = np.arange(v_draft, dtype=np.int32)
    draft_labels = np.where(labels >= 0, to_draft[np.maximum(labels, 0)], -1)  # -1: none, or outside V'
    valid = labels[train_rows, 1:] >= 0
    coverage = float((draft_labels[train_rows, 1:] >= 0).sum() / max(valid.sum(), 1))
    lm_head, lm_name = output_rows(args.model, vocab)
    log(f"data {args.data}: {n_seqs} sequences, {n} positions, d_model {d}; {len(train_rows)} training / "
        f"{len(eval_rows)} held-out positions ({n_hold} sequences); draft vocabulary {v_draft} of "
        f"{meta.get('vocab_size', '?')} tokens covers {coverage:.3f} of the heads' training labels; LM head "
        f"{lm_name} rows; read in {time.perf_counter() - t_start:.1f} s")

    # ---- the model and its loss ----
    lm = jnp.asarray(lm_head)                                   # (V', d), frozen
    weights = jnp.asarray([args.decay ** (k + 1) for k in range(k_heads)], jnp.float32)

    def head_logits(params, h):
        """(K, B, V') logits of every head for hidden rows h (B, d)."""
        z = jnp.einsum("bd,ked->kbe", h, params["w"]) + params["b"][:, None, :]  # W_k h + b_k
        return jnp.einsum("kbd,vd->kbv", h[None] + jax.nn.silu(z), lm)

    def loss_fn(params, h, y):
        """sum_k decay^k * mean CE_k over rows whose head-k label is in V' (y: (B, K), -1 = none)."""
        logits = head_logits(params, h)
        logp = jax.nn.log_softmax(logits, axis=-1)
        yk = y.T                                                # (K, B)
        mask = (yk >= 0).astype(jnp.float32)
        nll = -jnp.take_along_axis(logp, jnp.maximum(yk, 0)[..., None], axis=-1)[..., 0]
        per_head = (nll * mask).sum(axis=1) / jnp.maximum(mask.sum(axis=1), 1.0)
        return (weights * per_head).sum(), per_head

    steps_per_epoch = max(1, len(train_rows) // args.batch)
    total_steps = steps_per_epoch * args.epochs
    schedule = optax.warmup_cosine_decay_schedule(0.0, args.lr, min(100, total_steps // 10 + 1), total_steps)
    opt = optax.adamw(schedule, weight_decay=args.weight_decay)
    params = {"w": jnp.zeros((k_heads, d, d), jnp.float32), "b": jnp.zeros((k_heads, d), jnp.float32)}
    opt_state = opt.init(params)

    @jax.jit
    def train_step(params, opt_state, h, y):
        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, h, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def eval_step(params, h, y):
        loss, per_head = loss_fn(params, h, y)
        top5 = jax.lax.top_k(head_logits(params, h), 5)[1]      # (K, B, 5) draft indices
        hit5 = (top5 == y.T[..., None]).any(-1) & (y.T >= 0)
        return loss, per_head, (top5[..., 0] == y.T) & (y.T >= 0), hit5

    def evaluate(params):
        """Held-out (loss, per-head top-1, per-head top-5); accuracies over every head label,
        labels outside V' counted as misses (what acceptance sees)."""
        if len(eval_rows) == 0:
            return float("nan"), [float("nan")] * k_heads, [float("nan")] * k_heads
        tot_loss, n_b, hit1, hit5 = 0.0, 0, np.zeros(k_heads), np.zeros(k_heads)
        for i in range(0, len(eval_rows), args.batch):
            rows = eval_rows[i:i + args.batch]
            pad = args.batch - len(rows)                       # one compiled shape: pad with label -1
            h = np.concatenate([hidden[rows], np.zeros((pad, d), np.float32)])
            y = np.concatenate([draft_labels[rows, 1:], np.full((pad, k_heads), -1, np.int32)])
            loss, _, h1, h5 = eval_step(params, jnp.asarray(h), jnp.asarray(y))
            tot_loss += float(loss) * len(rows)
            n_b += len(rows)
            hit1 += np.asarray(h1).sum(axis=1)
            hit5 += np.asarray(h5).sum(axis=1)
        n_labels = (labels[eval_rows, 1:] >= 0).sum(axis=0)
        return tot_loss / n_b, list(hit1 / np.maximum(n_labels, 1)), list(hit5 / np.maximum(n_labels, 1))

    fmt = lambda xs: " ".join(f"{x:.3f}" for x in xs)  # noqa: E731
    # The LM head's own top-1 on its target (t + 1) over V': near the coverage, since the answers
    # are the model's greedy output (a target outside V' is a miss) -- a check that hidden states,
    # tokens and the output rows line up.
    base_rows = eval_rows if len(eval_rows) else train_rows
    base_hit = 0
    for i in range(0, len(base_rows), 4096):
        rows = base_rows[i:i + 4096]
        top = np.asarray(jnp.argmax(jnp.asarray(hidden[rows]) @ lm.T, axis=-1))
        base_hit += int((vocab[top] == labels[rows, 0]).sum())
    base_n = int((labels[base_rows, 0] >= 0).sum())
    loss0, top1, top5 = evaluate(params)
    log(f"epoch 0 (untrained: each head is the LM head): held-out loss {loss0:.4f}, top-1 per head {fmt(top1)}, "
        f"top-5 {fmt(top5)}; the LM head's own top-1 on t + 1 within V': {base_hit / max(base_n, 1):.3f}")

    t_train = time.perf_counter()
    history = []
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(train_rows)
        t_epoch, run_loss = time.perf_counter(), 0.0
        for step in range(steps_per_epoch):
            rows = np.sort(order[step * args.batch:(step + 1) * args.batch])
            params, opt_state, loss = train_step(params, opt_state, jnp.asarray(hidden[rows]),
                                                 jnp.asarray(draft_labels[rows, 1:]))
            run_loss += float(loss)
            if (step + 1) % max(1, steps_per_epoch // 4) == 0 or step + 1 == steps_per_epoch:
                log(f"epoch {epoch} step {step + 1}/{steps_per_epoch}: train loss {run_loss / (step + 1):.4f} "
                    f"({time.perf_counter() - t_epoch:.1f} s)")
        loss_e, top1, top5 = evaluate(params)
        history.append(loss_e)
        log(f"epoch {epoch}: held-out loss {loss_e:.4f}, top-1 per head {fmt(top1)}, top-5 {fmt(top5)} "
            f"({time.perf_counter() - t_epoch:.1f} s)")
    train_s = time.perf_counter() - t_train

    out = args.out or os.path.splitext(args.model)[0] + ".medusa.safetensors"
    tensors = {"medusa.vocab": vocab, "medusa.lm_head": lm_head}
    w, b = np.asarray(params["w"]), np.asarray(params["b"])
    for k in range(k_heads):
        tensors[f"medusa.{k}.weight"] = w[k]
        tensors[f"medusa.{k}.bias"] = b[k]
    metadata = {
        "format": "lio-medusa-1", "num_heads": k_heads, "d_model": d, "vocab_size": meta.get("vocab_size", ""),
        "draft_vocab_size": v_draft, "source_model": os.path.basename(args.model),
        "source_model_sha256": sha256(args.model), "train_data": os.path.basename(args.data),
        "train_sequences": n_seqs - n_hold, "train_positions": len(train_rows), "epochs": args.epochs,
        "coverage": f"{coverage:.4f}", "loss_initial": f"{loss0:.4f}", "loss_final": f"{history[-1]:.4f}",
        "top1": json.dumps([round(x, 4) for x in top1]), "top5": json.dumps([round(x, 4) for x in top5]),
        "lm_head_top1": f"{base_hit / max(base_n, 1):.4f}",
    }
    write_safetensors(out, tensors, metadata)
    log(f"wrote {out}: {k_heads} heads, d {d}, draft vocabulary {v_draft}; training {train_s:.1f} s, "
        f"total {time.perf_counter() - t_start:.1f} s")
    print(json.dumps({"out": out, "loss_initial": loss0, "loss_final": history[-1], "top1": top1, "top5": top5,
                      "coverage": coverage, "train_s": train_s, "total_s": time.perf_counter() - t_start}))


if __name__ == "__main__":
    main()
