#!/usr/bin/env python3
"""Chapter 08's benchmark: the real model on one rank and over ranks (TP 3, TP 3 with the ring
all-reduce, PP 2) on this machine, the all-reduce's bandwidth over MPI, and the cost model's
projection for 7B and 70B on 2/4/8 A100s (COURSE.md, "Performance method").

    .venv/bin/python bench/08_tensor_parallel/run.py [--rounds 3] [--batch 1,8] [--threads 1]

Each round runs every configuration once, in turn (interleaved), as
`scripts/mpirun.sh -n N build/bin/ch08_tensor_parallel ... --json`; a configuration's number is
the median over rounds of its per-run medians, with the min-max over rounds. Configurations:
- tp1:      one process, --threads T (the baseline)
- tp1_2t:   one process, 2 x T threads (the same cores the 3 ranks share here)
- tp3:      3 ranks x T threads, --tensor-parallel-size 3 (MPI_Allreduce)
- tp3_ring: the same with --all-reduce ring (chapter 08's Task 2)
- pp2:      2 ranks x T threads, --pipeline-parallel-size 2 (2 micro-batches per step)
- pp2_mb1:  the same with --micro-batches 1 (one stage works at a time: the whole bubble)
Every run reports prefill and decode step time with the driver's communication split out and the
cost model's prediction of its all-reduce time (alpha and bus bandwidth read off the run's own
sweep, Task 4's volume); tp3 and pp2 runs also sweep the all-reduce from 4 KiB to 64 MiB (MPI's
and the ring) and time the LM head's two choices (gather the logits, gather (max, index)).

Writes bench/results/08_tensor_parallel_cpu.{json,md,png} and
bench/results/08_tensor_parallel_projection.{json,md,png} (the projection: a cost model with
published bandwidths, not a measurement). The lesson (docs/08_tensor_parallel.md) and the README
render their tables from the JSON. Nothing here is a test.
"""
import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile

from liobench import ROOT, flags
from liobench.results_meta import local_path_free, provenance, provenance_lines


BIN = os.path.join(ROOT, "build", "bin", "ch08_tensor_parallel")
MPIRUN = os.path.join(ROOT, "scripts", "mpirun.sh")


def configs(threads):
    """(suite, name, ranks, program arguments). The real model: TP 3 (its 9 heads and 3 KV heads
    split only 3 ways) and PP 2; 3 ranks share 2 cores here, so a second suite runs a random
    model of the same size with 8 heads (make_test_models --smollm2-8-heads) at TP 2: 2 ranks on
    2 cores, the setting where the cost model's prediction can be checked."""
    t, t2 = str(threads), str(2 * threads)
    return [
        ("smollm2", "tp1", 1, ["--threads", t, "--no-sweep"]),
        ("smollm2", "tp1_2t", 1, ["--threads", t2, "--no-sweep"]),
        ("smollm2", "tp3", 3, ["--threads", t, "--tensor-parallel-size", "3"]),
        ("smollm2", "tp3_ring", 3, ["--threads", t, "--tensor-parallel-size", "3", "--all-reduce", "ring", "--no-sweep"]),
        ("smollm2", "pp2", 2, ["--threads", t, "--pipeline-parallel-size", "2", "--no-sweep"]),
        ("smollm2", "pp2_mb1", 2, ["--threads", t, "--pipeline-parallel-size", "2", "--micro-batches", "1", "--no-sweep"]),
        ("random8h", "tp1", 1, ["--threads", t, "--no-sweep"]),
        ("random8h", "tp1_2t", 1, ["--threads", t2, "--no-sweep"]),
        ("random8h", "tp2", 2, ["--threads", t, "--tensor-parallel-size", "2"]),
        ("random8h", "tp2_ring", 2, ["--threads", t, "--tensor-parallel-size", "2", "--all-reduce", "ring"]),
    ]


def run_one(np_, args, batch, a, model):
    cmd = [BIN] + args + (["--model", model] if model else []) + ["--batch", str(batch), "--prompt-tokens", str(a.prompt_tokens), "--decode-steps",
                          str(a.decode_steps), "--repeats", str(a.repeats), "--json"]
    if np_ > 1:
        cmd = [MPIRUN, "-n", str(np_), "-x", "OMP_WAIT_POLICY=passive"] + cmd
    print("+ " + local_path_free(" ".join(cmd)), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, text=True, stdout=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"run.py: {' '.join(cmd[:6])} ... exited {r.returncode}")
    out = r.stdout
    return json.loads(out[out.index("{"):])


def med(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def aggregate(runs):
    """One configuration's runs (one per round) -> medians over rounds with min-max."""
    first = runs[0]
    agg = {k: first[k] for k in ("model", "tensor_parallel_size", "pipeline_parallel_size", "world_size", "all_reduce",
                                  "device", "threads_per_rank", "batch", "prompt_tokens", "decode_steps", "ranks")}
    for phase in ("prefill", "decode"):
        agg[phase] = {k: med([r[phase][k]["median"] for r in runs])
                      for k in ("step_ms", "comm_ms", "all_reduce_ms", "all_gather_ms", "send_recv_ms", "wait_ms")}
        agg[phase]["compute_ms"] = med([r[phase]["compute_ms"] for r in runs])
    agg["prefill_tok_s"] = med([r["prefill_tok_s"] for r in runs])
    agg["decode_tok_s"] = med([r["decode_tok_s"] for r in runs])
    if first.get("predicted"):
        agg["predicted"] = {k: med([r["predicted"][k] for r in runs])
                            for k in ("alpha_us", "busbw_GBps", "prefill_all_reduce_ms", "decode_all_reduce_ms")}
        agg["predicted"]["all_reduces_per_step"] = first["predicted"]["all_reduces_per_step"]
        for phase in ("prefill", "decode"):
            p = agg["predicted"][f"{phase}_all_reduce_ms"]["median"]
            m = agg[phase]["all_reduce_ms"]["median"]
            agg["predicted"][f"{phase}_measured_over_predicted"] = m / p if p else None
    if first.get("all_reduce_sweep"):
        agg["all_reduce_sweep"] = []
        for i, row in enumerate(first["all_reduce_sweep"]):
            out = {"bytes": row["bytes"]}
            for alg in ("library", "ring"):
                out[alg] = {k: med([r["all_reduce_sweep"][i][alg][k] for r in runs])
                            for k in ("us", "algbw_GBps", "busbw_GBps")}
            agg["all_reduce_sweep"].append(out)
    if first.get("lm_head"):
        agg["lm_head"] = {k: (med([r["lm_head"][k] for r in runs]) if k.endswith("_us") else first["lm_head"][k])
                          for k in first["lm_head"]}
    return agg


def ms(t, digits=2):
    return f"{t['median']:.{digits}f} ({t['min']:.{digits}f}-{t['max']:.{digits}f})"


SUITE_TITLES = {"smollm2": "SmolLM2-135M-Instruct Q4_1 (9 heads, 3 KV heads): TP 3 and PP 2, 3 ranks on this machine",
                "random8h": "A random Q4_1 model of the same size with 8 heads, 2 KV heads: TP 2, 2 ranks"}


def markdown(res):
    lines = ["# Chapter 08: tensor and pipeline parallelism on this machine", ""] + provenance_lines(res["provenance"])
    lines += ["", f"{res['rounds']} interleaved rounds; median (min-max) over rounds of each run's median; prompt "
                  f"{res['prompt_tokens']} tokens then {res['decode_steps']} decode steps; {res['cpus']} cores. "
                  "Step = compute + wait (a barrier before each collective: the ranks' imbalance) + communication "
                  "(the collectives after every rank arrived). The cost model: (2 L + 1) all-reduces per step of "
                  "t(M) = alpha + 2(n-1)/n M / busbw, fitted to the run's own sweep.", ""]
    for suite, batches in res["suites"].items():
        lines += [f"## {SUITE_TITLES.get(suite, suite)}", ""]
        for b, cfgs in batches.items():
            base = cfgs["tp1"]
            lines += [f"### Batch {b}", "",
                      "| config | ranks | prefill ms | decode ms | decode tok/s | decode vs tp1 | compute ms | wait ms "
                      "| comm ms | model: all-reduce ms (prefill / decode) | measured / model (prefill / decode) |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for name, c in cfgs.items():
                d, p = c["decode"], c["prefill"]
                pred = c.get("predicted") or {}
                model = (f"{pred['prefill_all_reduce_ms']['median']:.2f} / {pred['decode_all_reduce_ms']['median']:.3f} | "
                         f"{pred['prefill_measured_over_predicted']:.2f} / {pred['decode_measured_over_predicted']:.2f}"
                         if pred else "- | -")
                lines.append(f"| {name} | {c['world_size']} | {ms(p['step_ms'], 1)} | {ms(d['step_ms'])} | "
                             f"{c['decode_tok_s']['median']:.1f} | "
                             f"{base['decode']['step_ms']['median'] / d['step_ms']['median']:.2f}x | "
                             f"{d['compute_ms']['median']:.2f} | {d['wait_ms']['median']:.2f} | {d['comm_ms']['median']:.3f} | "
                             f"{model} |")
            lines.append("")
        b0 = next(iter(batches))
        tp_name = "tp3" if "tp3" in batches[b0] else "tp2"
        lines += [f"Each rank of {tp_name} (read on the rank: its backend's weight bytes, its KV pool's bytes per token):",
                  "", "| rank | layers | heads | KV heads | d_ff | vocab rows | weight MB | KV bytes/token |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in batches[b0][tp_name]["ranks"]:
            lines.append(f"| {r['rank']} | {r['layers']} | {r['heads']} | {r['kv_heads']} | {r['d_ff']} | {r['vocab_rows']} "
                         f"| {r['weight_bytes'] / 1e6:.2f} | {r['kv_bytes_per_token']} |")
        t1 = batches[b0]["tp1"]["ranks"][0]
        lines += ["", f"One rank (tp1) holds {t1['weight_bytes'] / 1e6:.2f} MB of weights and "
                      f"{t1['kv_bytes_per_token']} KV bytes per token.", ""]
        sweep = batches[b0][tp_name].get("all_reduce_sweep")
        if sweep:
            n = batches[b0][tp_name]["world_size"]
            lines += [f"All-reduce over MPI, {n} ranks (busbw = algbw x 2(n-1)/n, nccl-tests' PERFORMANCE.md):", "",
                      "| bytes | MPI_Allreduce us | busbw GB/s | ring (Task 2) us | busbw GB/s |", "|---:|---:|---:|---:|---:|"]
            for r in sweep:
                lines.append(f"| {r['bytes']:,} | {r['library']['us']['median']:.1f} | "
                             f"{r['library']['busbw_GBps']['median']:.3f} | {r['ring']['us']['median']:.1f} | "
                             f"{r['ring']['busbw_GBps']['median']:.3f} |")
            lines += ["", "The LM head's choice (gather every rank's logits rows, or only each row's (max, index)):", "",
                      "| batch | gather logits us | bytes/rank | gather (max, index) us | bytes/rank |",
                      "|---:|---:|---:|---:|---:|"]
            for b, cfgs in batches.items():
                h = cfgs[tp_name]["lm_head"]
                lines.append(f"| {b} | {h['gather_logits_us']['median']:.1f} | {h['gather_logits_bytes_per_rank']:,} | "
                             f"{h['gather_argmax_us']['median']:.1f} | {h['gather_argmax_bytes_per_rank']} |")
            lines.append("")
    return "\n".join(lines) + "\n"


def projection_markdown(proj):
    lines = ["# Chapter 08: tensor parallelism projected for 7B and 70B (a projection, not a measurement)", ""]
    lines += provenance_lines(proj["provenance"]) + ["", proj["label"] + ". Assumptions: " +
                                                     json.dumps(proj["assumptions"]), "",
              "| model | link | TP | batch | fits 40 GB | GB/GPU | KV tokens/GPU | compute ms | comm ms | step ms |",
              "|---|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in proj["rows"]:
        lines.append(f"| {r['model']} | {r['link']} | {r['tp']} | {r['batch']} | {'yes' if r['fits'] else 'no'} | "
                     f"{r['weight_GB_per_gpu']:.2f} | {r['kv_tokens_per_gpu']:,} | {r['compute_ms']:.2f} | "
                     f"{r['comm_ms']:.3f} | {r['step_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(res, json_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from liobench.plot_util import save_beside

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    for suite, batches in res["suites"].items():
        b0 = next(iter(batches))
        for name, c in batches[b0].items():
            sweep = c.get("all_reduce_sweep")
            if not sweep:
                continue
            xs = [r["bytes"] for r in sweep]
            for alg, fmt, label in (("library", "o-", "MPI_Allreduce"), ("ring", "s--", "ring (Task 2)")):
                ax.plot(xs, [r[alg]["busbw_GBps"]["median"] for r in sweep], fmt, label=f"{label}, {c['world_size']} ranks")
            break
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("all-reduce over MPI on this machine", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[1]
    names, comp, wait, comm = [], [], [], []
    for suite, batches in res["suites"].items():
        b0 = next(iter(batches))
        for name, c in batches[b0].items():
            names.append(f"{suite}\n{name}")
            comp.append(c["decode"]["compute_ms"]["median"])
            wait.append(c["decode"]["wait_ms"]["median"])
            comm.append(c["decode"]["comm_ms"]["median"])
    xs = range(len(names))
    ax.bar(xs, comp, label="compute")
    ax.bar(xs, wait, bottom=comp, label="wait (imbalance)")
    ax.bar(xs, comm, bottom=[a + b for a, b in zip(comp, wait)], label="communication")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, fontsize=6)
    ax.set_ylabel(f"decode step, batch {next(iter(next(iter(res['suites'].values()))))} (ms)")
    ax.set_title("decode step: compute, wait, communication (driver)", fontsize=10)
    ax.legend(fontsize=8)
    save_beside(fig, json_path)


def plot_projection(proj, json_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from liobench.plot_util import save_beside

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=False)
    for ax, model in zip(axes, sorted({r["model"] for r in proj["rows"]})):
        for link, fmt in (("NVLink 3 (A100)", "o-"), ("PCIe 4.0 x16", "s--")):
            rows = [r for r in proj["rows"] if r["model"] == model and r["link"] == link and r["batch"] == 1 and r["fits"]]
            ax.plot([r["tp"] for r in rows], [r["step_ms"] for r in rows], fmt, label=f"{link}: step")
            ax.plot([r["tp"] for r in rows], [r["compute_ms"] for r in rows], "k:", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tensor-parallel size (A100 40 GB)")
        ax.set_ylabel("decode step, batch 1 (ms)")
        ax.set_title(f"{model} (projection; dotted: compute alone)", fontsize=10)
        ax.legend(fontsize=8)
    save_beside(fig, json_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3, help="prefill + decode rounds inside each run")
    flags.add_out(ap, "08_tensor_parallel_cpu")
    ap.add_argument("--projection-out", default=os.path.join(ROOT, "bench", "results", "08_tensor_parallel_projection"))
    args = ap.parse_args()
    if not os.path.exists(BIN):
        sys.exit("run.py: build/bin/ch08_tensor_parallel is missing (cmake --build build --target ch08_tensor_parallel)")
    batches = [int(x) for x in args.batch.split(",") if x.strip()]
    command = "bench/08_tensor_parallel/run.py " + " ".join(sys.argv[1:])
    make_models = os.path.join(ROOT, "build", "bin", "make_test_models")
    tmp = tempfile.mkdtemp(prefix="lio_ch08_")
    random8h = os.path.join(tmp, "random8h.gguf")
    subprocess.run([make_models, "--smollm2-8-heads", random8h], check=True)
    models = {"smollm2": None, "random8h": random8h}
    plan = configs(args.threads)
    runs = {}
    for _ in range(args.rounds):
        for b in batches:
            for suite, name, np_, cargs in plan:
                runs.setdefault(suite, {}).setdefault(str(b), {}).setdefault(name, []).append(
                    run_one(np_, cargs, b, args, models[suite]))
    shutil.rmtree(tmp, ignore_errors=True)
    res = {"provenance": provenance(command=command), "rounds": args.rounds, "prompt_tokens": args.prompt_tokens,
           "decode_steps": args.decode_steps, "cpus": os.cpu_count(),
           "models": {suite: runs[suite][str(batches[0])]["tp1"][0]["model"] for suite in runs},
           "suites": {suite: {b: {name: aggregate(r) for name, r in cfgs.items()} for b, cfgs in bs.items()}
                      for suite, bs in runs.items()}}
    text = local_path_free(json.dumps(res, indent=1))
    with open(args.out + ".json", "w") as f:
        f.write(text + "\n")
    res = json.loads(text)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(res))
    plot(res, args.out + ".json")
    r = subprocess.run([BIN, "project", "--json"], text=True, stdout=subprocess.PIPE, check=True)
    proj = json.loads(r.stdout)
    proj["provenance"] = provenance(command=command)
    with open(args.projection_out + ".json", "w") as f:
        f.write(local_path_free(json.dumps(proj, indent=1)) + "\n")
    with open(args.projection_out + ".md", "w") as f:
        f.write(projection_markdown(proj))
    plot_projection(proj, args.projection_out + ".json")
    print(f"wrote {os.path.relpath(args.out, ROOT)}.json/.md/.png and the projection", file=sys.stderr)


if __name__ == "__main__":
    main()
