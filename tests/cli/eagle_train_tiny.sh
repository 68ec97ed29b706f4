#!/usr/bin/env bash
# eagle_train_tiny.sh BIN_DIR WORK_DIR PYTHON — issue 63's EAGLE drafter pipeline end to end on the
# tiny random model, in seconds: `lio spec-data` on a few prompts of both forms, then
# scripts/train_eagle.py (JAX) trains the one-layer drafter. Checks the file's tensors, shapes and
# metadata keys (the format of scripts/train_eagle.py / lio/eagle.h), that training lowered the
# held-out loss, and that probe.out equals an independent float64 numpy reading of the drafter's
# definition (embedding first in the FC input, NEOX RoPE at absolute positions from probe_start,
# causal GQA, residual, RMS norm, SwiGLU) applied to probe.tokens / probe.features, and that the
# C++ drafter (test_eagle's EagleProbe) computes the same outputs.
# Skips (77) when PYTHON lacks jax / optax / gguf.
source "$(dirname "$0")/smoke_setup.sh" "$1" "$2"
python="$3"
root="$(cd "$(dirname "$0")/../.." && pwd)"
if ! "$python" -c "import jax, optax, gguf" 2>/dev/null; then
  echo "SKIP: $python lacks jax / optax / gguf (scripts/setup.sh installs scripts/requirements.txt)"; exit 77
fi

{
  for i in $(seq 1 12); do
    echo "{\"prompt\": \"the cat sat on mat number $i and then\"}"
    echo "{\"messages\": [{\"role\": \"user\", \"content\": \"tell me about the $i-th thing\"}]}"
  done
} >"$work/prompts.jsonl"

if ! "$bin/lio" spec-data --model "$work/models/tiny.gguf" --prompts "$work/prompts.jsonl" \
    --out "$work/data.safetensors" --max-tokens 24 --ignore-eos --threads 1 --kv-cache-mib 4 \
    >"$work/summary.json" 2>"$work/err"; then
  echo "FAIL: lio spec-data exited non-zero"; cat "$work/err"; exit 1
fi
tail -n 1 "$work/err"

if ! OMP_NUM_THREADS=1 "$python" "$root/scripts/train_eagle.py" --data "$work/data.safetensors" \
    --model "$work/models/tiny.gguf" --out "$work/eagle.safetensors" --vocab 128 \
    --epochs 6 --batch 4 --lr 3e-3 --holdout 0.2 >"$work/train.json" 2>"$work/train_err"; then
  echo "FAIL: train_eagle.py exited non-zero"; cat "$work/train_err"; exit 1
fi
tail -n 2 "$work/train_err"

# The C++ drafter (lio/eagle.h, EagleProposer::forward_window) on the probe: the trainer's JAX
# outputs within 1e-3 (test_eagle's EagleProbe, which skips unless these variables are set).
if ! LIO_EAGLE_PROBE="$work/eagle.safetensors" LIO_EAGLE_MODEL="$work/models/tiny.gguf" \
     "$bin/test_eagle" --gtest_filter='EagleProbe.*' >"$work/probe_cpp" 2>&1 ||
   ! grep -q "PASSED  \] 1 test" "$work/probe_cpp"; then
  echo "FAIL: the C++ drafter differs from the trainer's probe outputs"; cat "$work/probe_cpp"; exit 1
fi
echo "ok: the C++ drafter matches the trainer's probe outputs"

"$python" - "$work" "$root/scripts" <<'PY'
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from train_medusa import read_safetensors
from train_eagle import embedding_rows
work = sys.argv[1]
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
t, meta = read_safetensors(f"{work}/eagle.safetensors")
d = 64
keys = ["format", "d_model", "n_heads", "n_kv_heads", "head_dim", "ffn", "rope_theta", "rms_eps", "vocab_size",
        "draft_vocab_size", "probe_start", "source_model", "source_model_sha256", "train_data", "coverage", "top1",
        "top1_depth2", "top1_depth3", "loss_initial", "loss_final", "epochs", "train_seconds"]
missing = [k for k in keys if k not in meta]
check(not missing, f"metadata lacks {missing}")
check(meta.get("format") == "lio-eagle-1", f"format {meta.get('format')}")
if not missing:
    H, Hkv, hd, F, v = (int(meta[k]) for k in ("n_heads", "n_kv_heads", "head_dim", "ffn", "draft_vocab_size"))
    check(int(meta["d_model"]) == d, f"d_model {meta['d_model']}")
    P = len(t.get("probe.out", []))
    want = {"eagle.vocab": [v], "eagle.lm_head": [v, d], "eagle.fc.weight": [d, 2 * d], "eagle.fc.bias": [d],
            "eagle.attn_q.weight": [H * hd, d], "eagle.attn_k.weight": [Hkv * hd, d],
            "eagle.attn_v.weight": [Hkv * hd, d], "eagle.attn_output.weight": [d, H * hd],
            "eagle.ffn_norm.weight": [d], "eagle.ffn_gate.weight": [F, d], "eagle.ffn_up.weight": [F, d],
            "eagle.ffn_down.weight": [d, F], "probe.tokens": [P + 1], "probe.features": [P, d], "probe.out": [P, d]}
    check(sorted(t) == sorted(want), f"tensors {sorted(t)}")
    for name, shape in want.items():
        if name in t:
            check(list(t[name].shape) == shape, f"{name} shape {list(t[name].shape)}, want {shape}")
    check(t["eagle.vocab"].dtype.name == "int32" and t["probe.tokens"].dtype.name == "int32", "vocab/tokens not I32")
    check(0 < v <= 128 and len(set(t["eagle.vocab"].tolist())) == v, f"draft vocabulary {v}")
    check(P == 16, f"probe of {P} entries, want 16")

    # The probe: the held-out sequence's data rows, and probe.out recomputed from the spec in float64.
    data, _ = read_safetensors(f"{work}/data.safetensors")
    s0 = int(meta["probe_start"])
    b = [int(x) for x, p in zip(data["seq_starts"][:-1], data["prompt_lens"])
         if p - 1 == s0 and np.array_equal(data["hidden"][x + s0:x + s0 + P], t["probe.features"])]
    check(len(b) >= 1 and (data["tokens"][b[0] + s0 + 1:b[0] + s0 + P + 2] == t["probe.tokens"]).all(),
          "probe.tokens / probe.features are not x_{s+1}.. / f_s.. of a data sequence")
    W = {k: t[k].astype(np.float64) for k in t if k.startswith("eagle.") and k != "eagle.vocab"}
    theta, eps = float(meta["rope_theta"]), float(meta["rms_eps"])
    x = np.concatenate([embedding_rows(f"{work}/models/tiny.gguf", t["probe.tokens"][:P].astype(np.int64)),
                        t["probe.features"].astype(np.float64)], 1)
    u = x @ W["eagle.fc.weight"].T + W["eagle.fc.bias"]
    q = (u @ W["eagle.attn_q.weight"].T).reshape(P, H, hd)
    k = (u @ W["eagle.attn_k.weight"].T).reshape(P, Hkv, hd)
    vv = (u @ W["eagle.attn_v.weight"].T).reshape(P, Hkv, hd)
    ang = np.arange(s0, s0 + P)[:, None] * theta ** (-2.0 * np.arange(hd // 2) / hd)
    c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
    rot = lambda z: np.concatenate([z[..., :hd // 2] * c - z[..., hd // 2:] * s,
                                    z[..., :hd // 2] * s + z[..., hd // 2:] * c], -1)
    q, k = rot(q), rot(k)
    att = np.zeros((P, H, hd))
    for h in range(H):
        sc = q[:, h] @ k[:, h // (H // Hkv)].T / np.sqrt(hd)
        sc[np.triu(np.ones((P, P), bool), 1)] = -np.inf
        pr = np.exp(sc - sc.max(1, keepdims=True))
        att[:, h] = (pr / pr.sum(1, keepdims=True)) @ vv[:, h // (H // Hkv)]
    hh = u + att.reshape(P, -1) @ W["eagle.attn_output.weight"].T
    n = hh / np.sqrt((hh ** 2).mean(1, keepdims=True) + eps) * W["eagle.ffn_norm.weight"]
    z = n @ W["eagle.ffn_gate.weight"].T
    g = hh + (z / (1 + np.exp(-z)) * (n @ W["eagle.ffn_up.weight"].T)) @ W["eagle.ffn_down.weight"].T
    err = float(np.abs(g - t["probe.out"]).max())
    check(err < 1e-4 * max(1.0, float(np.abs(g).max())), f"probe.out differs from the numpy drafter by {err}")
    check(abs(t["eagle.fc.weight"]).max() > 0 and abs(t["eagle.ffn_down.weight"]).max() > 0, "zero weights")
r = json.load(open(f"{work}/train.json"))
check(r["loss_final"] < r["loss_initial"], f"held-out loss did not fall: {r['loss_initial']} -> {r['loss_final']}")
if fails:
    print("FAIL:\n  " + "\n  ".join(fails)); sys.exit(1)
print(f"ok: drafter H {H}, Hkv {Hkv}, hd {hd}, F {F}, draft vocabulary {v}; probe of {P} matches numpy to {err:.1e}; "
      f"held-out loss {r['loss_initial']:.3f} -> {r['loss_final']:.3f}")
PY
