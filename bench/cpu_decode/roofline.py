#!/usr/bin/env python3
"""The CPU roofline (Williams, Waterman, Patterson 2009, "Roofline"): measured decode steps against
the machine's two ceilings, both measured in the same runs.

A decode step of C sequences multiplies every weight matrix by C rows: 2 C operations per weight
(a multiply and an add), over the bytes the matrices take. Its arithmetic intensity (연산 강도)
is therefore I = 2 C W / B operations per byte (W matrix weights, B their packed bytes), and
  attainable ops/s = min(read bandwidth x I, compute peak).
Batch-1 decode of a 4-bit file sits at I ~ 3 op/B, far left of the ridge point (peak / bandwidth,
tens of op/B on a CPU): memory-bound, and its distance below the slanted line is what the kernels
lose. C sequences move the point C times to the right at the same bytes.

Points: every row of bench/results/cpu_decode_formats.json (batch 1, its read-bandwidth and
compute probes), and the C = 32 rows of bench/results/batched.json when that file was measured
on the same machine (it is left out, and the figure says so, otherwise). W is counted from each
GGUF file's tensor table (every 2-D matrix a decode step multiplies: token_embd only as a tied
LM head).

Writes bench/results/cpu_roofline.{png,json}.
  .venv/bin/python bench/cpu_decode/roofline.py
"""
import argparse
import json
import os
import statistics

from liobench import ROOT


def matrix_weights(path):
    """Weights in the matrices one decode step multiplies: every 2-D tensor but the embedding
    table, plus the embedding table when it is also the LM head (no output.weight)."""
    import gguf
    tensors = gguf.GGUFReader(path).tensors
    names = {t.name for t in tensors}
    n = 0
    for t in tensors:
        if len(t.shape) != 2:
            continue
        if t.name == "token_embd.weight" and "output.weight" in names:
            continue
        n += int(t.shape[0]) * int(t.shape[1])
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--formats", default=os.path.join(ROOT, "bench/results/cpu_decode_formats.json"))
    ap.add_argument("--batched", default=os.path.join(ROOT, "bench/results/batched.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/cpu_roofline"))
    a = ap.parse_args()
    with open(a.formats) as f:
        fm = json.load(f)
    machine = fm["provenance"]["machine"]
    peaks = [r["compute_peak"] for row in fm["rows"] for r in row["runs"] if r.get("compute_peak")]
    if not peaks or not peaks[0].get("compute_peak_isa"):
        raise SystemExit(f"{a.formats} has no compute probe: re-run bench/cpu_decode/formats.py")
    bw = statistics.median(row["read_bw_gbs"] for row in fm["rows"])
    f32_peak = statistics.median(p["compute_peak_f32_gflops"] for p in peaks)
    int8_peak = statistics.median(p["compute_peak_int8_gops"] for p in peaks)
    points = []
    for row in fm["rows"]:
        w = matrix_weights(os.path.join(ROOT, row["file"]))
        intensity = 2 * w / row["decode_bytes"]
        points.append({"label": f"{row['format']}, 1 seq", "format": row["format"], "seqs": 1,
                       "activations": row["activations"], "weights": w, "bytes": row["decode_bytes"],
                       "tok_s": row["lio_tg"][0], "intensity": intensity, "gops": 2 * w * row["lio_tg"][0] / 1e9,
                       "roof_gops": min(bw * intensity, int8_peak if row["activations"] == "int8" else f32_peak)})
    batched_note = None
    if os.path.exists(a.batched):
        with open(a.batched) as f:
            bt = json.load(f)
        if bt.get("provenance", {}).get("machine") == machine:
            files = {"Q4_1": "models/SmolLM2-135M-Instruct.Q4_1.gguf", "F32": "models/SmolLM2-135M-Instruct.F32.gguf"}
            for row in bt.get("rows", []):
                if row.get("engine") != "lio" or row.get("concurrency") != 32 or row.get("weights") not in files:
                    continue
                w = matrix_weights(os.path.join(ROOT, files[row["weights"]]))
                steps = row["decode_tok_s"] / 32  # decode steps per second, 32 rows each
                mb = row["weight_gbs"] * 1e9 / steps  # the bytes one step reads
                intensity = 2 * 32 * w / mb
                act = "f32" if row["weights"] == "F32" or "f32" in str(bt.get("lio_cmd", "")) else "int8"
                points.append({"label": f"{row['weights']}, 32 seqs", "format": row["weights"], "seqs": 32,
                               "activations": act, "weights": w, "bytes": mb, "tok_s": row["decode_tok_s"],
                               "intensity": intensity, "gops": 2 * 32 * w * steps / 1e9,
                               "roof_gops": min(bw * intensity, int8_peak if act == "int8" else f32_peak)})
        else:
            batched_note = "batched.json was measured on another machine: its 32-sequence points are left out"
    for p in points:
        p["fraction_of_roof"] = p["gops"] / p["roof_gops"]
    out = {"provenance": fm["provenance"], "source": os.path.relpath(a.formats, ROOT), "read_bw_gbs": bw,
           "f32_peak_gflops": f32_peak, "int8_peak_gops": int8_peak, "isa": peaks[0]["compute_peak_isa"],
           "ridge_int8": int8_peak / bw, "ridge_f32": f32_peak / bw, "points": points, "note": batched_note}
    with open(a.out + ".json", "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    lo, hi = 0.2, 1000
    for peak, name, style in ((int8_peak, "int8", "-"), (f32_peak, "f32", "--")):
        ridge = peak / bw
        ax.plot([lo, ridge, hi], [bw * lo, peak, peak], "k" + style, lw=1,
                label=f"roof: {bw:.1f} GB/s x intensity, {name} peak {peak:.0f} GOP/s (ridge {ridge:.0f} op/B)")
    for i, p in enumerate(points):
        ax.plot(p["intensity"], p["gops"], "o" if p["seqs"] == 1 else "s", ms=6, color=f"C{i}",
                label=f"{p['label']}: {p['gops']:.1f} GOP/s, {p['fraction_of_roof']:.0%} of its roof")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(1, max(int8_peak, f32_peak) * 2)
    ax.set_xlabel("arithmetic intensity (ops per weight byte)")
    ax.set_ylabel("GOP/s (2 ops per weight per sequence)")
    m = fm["provenance"]["machine"]
    cpu = (m.get("cpu") or "") if isinstance(m, dict) else str(m)
    ax.set_title(f"LIO decode on the CPU roofline ({cpu.split(' |')[0][:60]}, {fm.get('threads', '?')} threads)",
                 fontsize=9)
    if batched_note:
        ax.text(0.01, 0.98, batched_note, fontsize=7, transform=ax.transAxes, va="top")
    fig.tight_layout()
    fig.savefig(a.out + ".png", dpi=110)
    print(f"wrote {a.out}.json and .png")


if __name__ == "__main__":
    main()
