#!/usr/bin/env python3
"""How far TP and PP put the logits from one process's, with f32 and with int8 activations, and
why: the all-reduce's summation order, amplified by int8 rounding.

A row-parallel layer (W_o, W_down) sums each rank's partial product in an all-reduce, so the
residual stream differs from one process's in the last bits (float addition is not associative).
With f32 activations that difference stays in the last bits. With int8 activations (chapter 03:
each 32-element block of x rounded to int8 at scale max|x| / 127) a value sitting near a
rounding boundary can land on the other code: an error of one code step, about 1% of the block's
largest value, where the cause was 1e-7. That error feeds every later layer, where more values
flip. To show the cause is the rounding and not the sharding, the script nudges one norm weight
of one process's model by one ulp (a change of the same size as the summation order's, with no
ranks at all) and measures the same distances.

Rows, each against one process with the same activations, teacher-forced over the same tokens:
  - TP 3 (SmolLM2's 9 heads / 3 KV heads split 3 ways), PP 2;
  - one process on a copy of the model whose blk.0.attn_norm weights are each moved one ulp;
  - the yardstick: one process's int8 logits against its f32 logits (int8's own error), and TP 3's
    int8 logits against the same f32 logits (whether TP's int8 is any further from f32).
Metrics: the largest |logit difference| over every position and token, the mean, and the share
of positions whose argmax (the greedy token) is the same.

The matrix (key "matrix"): the same comparisons at every setting the engine offers, activations
f32 / int8 / int8-token times KV cache f32 / f16 / int8, each against one process at that
setting, plus each setting's distance from one process at f32 / f32 (its own error) for one
process and for TP 3. An int8 KV cache rounds K and V per (token, KV head), so it amplifies the
summation order the way int8 activations do. int8-token rounds each token's row at one scale: a
row-parallel input is split over the ranks, and each rank must round its shard at the whole
row's scale (issue 62 found TP ranks using their shard's own scale; the row's max|x| is now
exchanged). With --check the script asserts, at every setting, what the lesson claims (see
check()): PP 2 bitwise equal to one process; TP 3 within 1e-3 at f32 / f32; TP 3 as far from
one process as a one-ulp nudge moves it, and as far from f32 / f32 as one process is.

Writes bench/results/08_tp_numerics_cpu.{json,md} with command, commit, machine and date.
  .venv/bin/python bench/08_tensor_parallel/numerics.py
  .venv/bin/python bench/08_tensor_parallel/numerics.py --check --tokens 32 --out /tmp/x   (ctest)
Needs Open MPI (scripts/setup.sh), build/bin/lio and the model.
"""
import argparse
import os
import shutil
import subprocess
import tempfile

import numpy as np

from liobench import ROOT, flags
from liobench.results_meta import command_line, provenance, provenance_lines, write_results


MPIRUN = os.path.join(ROOT, "scripts", "mpirun.sh")
NUDGED_TENSOR = "blk.0.attn_norm.weight"
# A passage of ordinary prose (the opening of Debian's GPL-3 text is not on every machine).
TEXT = ("The printing press, invented in the fifteenth century, changed how knowledge moved. "
        "Before it, a book was copied by hand, and a library of a few hundred volumes was a "
        "treasure. Within fifty years of the first printed bibles, presses ran in more than two "
        "hundred cities, and millions of books had been made. Scholars could compare the same "
        "text in distant places, errors could be corrected in the next edition, and ideas spread "
        "faster than any ruler could stop them. Historians still argue about how much of the "
        "scientific revolution rested on this quiet machine of wood, ink and metal type.")


def tokenize(lio, model):
    out = subprocess.run([lio, "tokenize", "--model", model, "--prompt", TEXT, "--json"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    import json
    return json.loads(out)["ids"]


def logits(lio, model, ids, activations, ranks=1, grid=(), kv="f32"):
    """Teacher-forced logits (len(ids), vocab) from `lio logits` with these activations and KV
    cache dtype, on `ranks` MPI ranks when > 1."""
    with tempfile.NamedTemporaryFile(suffix=".f32", delete=False) as f:
        out = f.name
    try:
        cmd = [lio, "logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", out,
               "--threads", "1", "--activations", activations, "--kv-cache-dtype", kv, *grid]
        if ranks > 1:
            cmd = [MPIRUN, "-x", "OMP_NUM_THREADS=1", "-x", "OMP_WAIT_POLICY=passive", "-n", str(ranks)] + cmd
        subprocess.run(cmd, check=True, stdout=subprocess.PIPE, timeout=600)
        return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)
    finally:
        os.unlink(out)


def nudged_copy(model, dst):
    """Copies the GGUF to dst with every element of NUDGED_TENSOR (f32) moved one ulp up or down
    (a fixed pseudo-random sign per element). Returns the largest relative change."""
    import gguf
    shutil.copyfile(model, dst)
    t = next(t for t in gguf.GGUFReader(model).tensors if t.name == NUDGED_TENSOR)
    if t.tensor_type != gguf.GGMLQuantizationType.F32:
        raise SystemExit(f"numerics: {NUDGED_TENSOR} is {t.tensor_type.name}, not F32")
    off, n = int(t.data_offset), int(t.n_elements)
    with open(dst, "r+b") as f:
        f.seek(off)
        a = np.frombuffer(f.read(4 * n), dtype=np.float32).copy()
        up = np.random.default_rng(0).integers(0, 2, n) == 1
        b = np.where(up, np.nextafter(a, np.float32(np.inf)), np.nextafter(a, np.float32(-np.inf))).astype(np.float32)
        f.seek(off)
        f.write(b.tobytes())
    return float(np.max(np.abs(b - a) / np.maximum(np.abs(a), 1e-30)))


def distance(ref, other):
    d = np.abs(ref.astype(np.float64) - other)
    return {"max_abs": float(d.max()), "mean_abs": float(d.mean()),
            "max_abs_over_max_logit": float(d.max() / np.abs(ref).max()),
            "argmax_agreement": float(np.mean(ref.argmax(1) == other.argmax(1)))}


def markdown(res):
    lines = ["# Chapter 08: TP / PP logits against one process, f32 and int8 activations", ""]
    lines += provenance_lines(res["provenance"]) + [""]
    lines += [f"{res['n_tokens']} tokens of prose teacher-forced through {res['model']}, 1 thread a rank. "
              f"Each row against one process with the same activations; the nudge moves each of "
              f"{res['nudged_tensor']}'s weights one ulp (largest relative change {res['nudge_rel']:.2g}).", "",
              "| compared with one process | activations | max abs logit diff | mean abs diff | max / max logit | same argmax |",
              "|---|---|---:|---:|---:|---:|"]
    for r in res["rows"]:
        lines.append(f"| {r['what']} | {r['activations']} | {r['max_abs']:.3g} | {r['mean_abs']:.3g} | "
                     f"{r['max_abs_over_max_logit']:.2g} | {100 * r['argmax_agreement']:.1f}% |")
    lines += ["", "## Every setting", "",
              "Each against one process at the same setting (max abs / mean abs logit difference, same argmax); "
              "the last two columns: mean abs distance from one process at f32 activations and f32 KV.", "",
              "| activations | KV cache | TP 3 | TP 3 same argmax | PP 2 | one-ulp nudge | one process from f32/f32 | TP 3 from f32/f32 |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for m in res["matrix"]:
        lines.append(f"| {m['activations']} | {m['kv']} | {m['tp']['max_abs']:.3g} / {m['tp']['mean_abs']:.3g} | "
                     f"{100 * m['tp']['argmax_agreement']:.1f}% | {m['pp']['max_abs']:.3g} | "
                     f"{m['nudge']['max_abs']:.3g} / {m['nudge']['mean_abs']:.3g} | "
                     f"{m['one_vs_ref']['mean_abs']:.3g} | {m['tp_vs_ref']['mean_abs']:.3g} |")
    return "\n".join(lines) + "\n"


def check(matrix):
    """The lesson's claims at every setting; returns the failures (empty: all hold).

    Rounding (int8 or int8-token activations, an f16 or int8 KV cache) makes the distance chaotic:
    a last-bit change lands some value on the other side of a rounding boundary. So TP 3 is held
    to the distance a one-ulp nudge of one norm weight moves one process at the same setting, and
    to one process's own distance from f32 / f32, each within a factor measured across prompts and
    lengths (2 and 1.25); the exact guard of a shard rounded on its own grid is the unit test
    RowParallelInt8PerToken.ShardsRoundOnTheWholeRowsGrid."""
    bad = []
    for m in matrix:
        at = f"activations {m['activations']}, KV {m['kv']}"
        if m["pp"]["max_abs"] != 0:
            bad.append(f"{at}: PP 2 differs from one process by {m['pp']['max_abs']:.3g} (expected bitwise equal)")
        if m["activations"] == "f32" and m["kv"] == "f32" and m["tp"]["max_abs"] > 1e-3:
            bad.append(f"{at}: TP 3 differs from one process by {m['tp']['max_abs']:.3g} (> 1e-3)")
        if m["tp"]["mean_abs"] > 2 * m["nudge"]["mean_abs"] + 1e-4:
            bad.append(f"{at}: TP 3 sits {m['tp']['mean_abs']:.3g} from one process, more than twice the one-ulp "
                       f"nudge's {m['nudge']['mean_abs']:.3g}")
        if m["tp_vs_ref"]["mean_abs"] > 1.25 * m["one_vs_ref"]["mean_abs"] + 1e-4:
            bad.append(f"{at}: TP 3 sits {m['tp_vs_ref']['mean_abs']:.3g} from f32/f32, one process "
                       f"{m['one_vs_ref']['mean_abs']:.3g}: TP is less accurate than one process")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    flags.add_model(ap)
    flags.add_lio(ap)
    flags.add_out(ap, "08_tp_numerics_cpu")
    ap.add_argument("--tokens", type=int, default=0, help="use the first N tokens of the prose (0: all)")
    ap.add_argument("--check", action="store_true", help="exit 1 unless every claim holds at every setting")
    a = ap.parse_args()
    for need in (a.model, a.lio):
        if not os.path.exists(need):
            raise SystemExit(f"numerics: missing {need}")
    if shutil.which("mpirun") is None:
        raise SystemExit("numerics: no mpirun (scripts/setup.sh installs Open MPI)")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    ids = tokenize(a.lio, a.model)
    if a.tokens > 0:
        ids = ids[:a.tokens]
    rows, matrix = [], []
    with tempfile.TemporaryDirectory() as tmp:
        nudged = os.path.join(tmp, "nudged.gguf")
        rel = nudged_copy(a.model, nudged)
        ref = None
        for act in ("f32", "int8", "int8-token"):
            for kv in ("f32", "f16", "int8"):
                one = logits(a.lio, a.model, ids, act, kv=kv)
                if ref is None:
                    ref = one  # f32 activations, f32 KV: the yardstick's origin
                tp = logits(a.lio, a.model, ids, act, 3, ("--tensor-parallel-size", "3"), kv=kv)
                pp = logits(a.lio, a.model, ids, act, 2, ("--pipeline-parallel-size", "2"), kv=kv)
                nu = logits(a.lio, nudged, ids, act, kv=kv)
                m = {"activations": act, "kv": kv, "tp": distance(one, tp), "pp": distance(one, pp),
                     "nudge": distance(one, nu), "one_vs_ref": distance(ref, one), "tp_vs_ref": distance(ref, tp)}
                matrix.append(m)
                print(f"{act:10s} kv {kv:4s} TP3 max {m['tp']['max_abs']:.3g} PP2 max {m['pp']['max_abs']:.3g} "
                      f"nudge max {m['nudge']['max_abs']:.3g}", flush=True)
                if kv == "f32":  # the lesson's first table: KV f32, each activation setting
                    for what, key in (("TP 3 (3 ranks)", "tp"), ("PP 2 (2 ranks)", "pp"),
                                      (f"one process, {NUDGED_TENSOR} moved one ulp", "nudge")):
                        rows.append({"what": what, "activations": act, **m[key]})
                    if act != "f32":  # the yardstick: this setting's own error, in one process and at TP 3
                        rows.append({"what": f"one process, {act} against f32 ({act}'s own error)",
                                     "activations": f"{act} vs f32", **m["one_vs_ref"]})
                        rows.append({"what": f"TP 3 {act} against one process's f32", "activations": f"{act} vs f32",
                                     **m["tp_vs_ref"]})
    res = {"provenance": provenance(command_line()), "model": os.path.basename(a.model), "n_tokens": len(ids),
           "nudged_tensor": NUDGED_TENSOR, "nudge_rel": rel, "rows": rows, "matrix": matrix}
    write_results(a.out, res, markdown)
    print(markdown(res))
    if a.check:
        bad = check(matrix)
        for b in bad:
            print("FAIL:", b)
        if bad:
            raise SystemExit(1)
        print(f"ok: every claim holds at all {len(matrix)} settings")


if __name__ == "__main__":
    main()
