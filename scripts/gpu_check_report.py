#!/usr/bin/env python3
"""The GPU check's report: reads what scripts/gpu_check.sh left in its work folder (one JSON line
per step, gtest's JSON results, each step's log) and writes cuda_<gpu>_validation.json and .md into
--out, with command, commit, GPU, driver and date. Standard library only (it runs on the lent
machine's Python). The decode numbers keep the keys earlier results files used (decode[variant],
copy_bandwidth_gbs, kernel_breakdown), so the lessons that render from them keep working.

    python3 scripts/gpu_check_report.py --work DIR --out DIR --commit C --gpu NAME --driver D \\
        --dry-run 0|1 [--manifest MANIFEST.txt] [--command TEXT]
"""
import argparse
import glob
import json
import os
import re
import sys

from liobench import flags
from liobench.results_meta import local_path_free, machine, machine_text
from liobench.tables import md_table as table


def gpu_slug(name, dry):
    """'NVIDIA H100 80GB HBM3' -> 'h100'; no GPU -> 'dry_run'."""
    if dry or not name or name == "none":
        return "dry_run"
    m = re.search(r"\b([A-Z]+\d{2,4}[A-Za-z]?)\b", name.replace("NVIDIA", ""))
    return (m.group(1) if m else re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")).lower()


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def first_json(text):
    """The first JSON object in a log (a program's --json output after any other lines)."""
    start = text.find("{")
    while start >= 0:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            start = text.find("{", start + 1)
    return None


def gtest_summary(work):
    rows = []
    for path in sorted(glob.glob(os.path.join(work, "gtest", "*.json"))):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError):
            continue
        failed, skipped, ran = [], 0, 0
        for suite in d.get("testsuites", []):
            for t in suite.get("testsuite", []):
                ran += 1
                if t.get("failures"):
                    failed.append(f'{suite["name"]}.{t["name"]}')
                elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                    skipped += 1
        rows.append({"binary": os.path.splitext(os.path.basename(path))[0], "tests": ran,
                     "passed": ran - len(failed) - skipped, "failed": len(failed), "skipped": skipped,
                     "failed_tests": failed, "seconds": float(str(d.get("time", "0s")).rstrip("s") or 0)})
    return rows


REAL = re.compile(r"real-model config \| (.+?) \| (.+?) \| (\d+) rows \| top-1 ([0-9.]+) \| max rel ([0-9.eE+-]+|nan|inf)"
                  r"(?: \| vs f32: KL cpu ([0-9.eE+-]+|nan|inf) cuda ([0-9.eE+-]+|nan|inf), top-1 cpu ([0-9.]+) cuda ([0-9.]+))?")


def real_model_rows(work):
    rows = []
    for path in sorted(glob.glob(os.path.join(work, "logs", "*.log"))):
        for m in REAL.finditer(read(path)):
            row = {"config": m.group(1), "file": m.group(2), "rows": int(m.group(3)),
                   "top1": float(m.group(4)), "max_rel": float(m.group(5))}
            if m.group(6) is not None:  # int8 rows: each device's distance from the f32 run
                row.update({"kl_cpu": float(m.group(6)), "kl_cuda": float(m.group(7)),
                            "top1_f32_cpu": float(m.group(8)), "top1_f32_cuda": float(m.group(9))})
            rows.append(row)
    return rows


def step_log(work, steps, name):
    for s in steps:
        if s["name"] == name and s.get("log"):
            return read(os.path.join(work, s["log"]))
    return ""


def decode_section(bench):
    """bench_cuda_decode's JSON in the keys the lessons render from."""
    if not bench:
        return {}
    copy = bench.get("copy_bandwidth_gbs")
    cpu = next((v for v in bench.get("variants", []) if v["variant"].startswith("cpu")), None)
    decode = []
    for v in bench.get("variants", []):
        decode.append({"variant": v["variant"], "weight_mib": round(v["weight_bytes"] / 2**20, 1),
                       "prefill_tokens_per_s": round(v["prefill_tokens_per_s"]),
                       "decode_tokens_per_s": round(v["decode_tokens_per_s"], 1),
                       "decode_gbs": round(v["decode_achieved_gbs"], 1),
                       "pct_of_copy_bw": round(100 * v["decode_fraction_of_copy_bandwidth"], 1),
                       "decode_vs_cpu": round(v["decode_tokens_per_s"] / cpu["decode_tokens_per_s"], 3) if cpu else None})
    breakdown = [{"op": o["op"], "calls_per_token": o["calls"] / bench["decode_tokens"],
                  "us_per_token": round(o["us_per_token"], 1), "share_pct": round(100 * o["share"], 1)}
                 for o in bench.get("decode_kernel_breakdown", [])]
    return {"copy_bandwidth_gbs": round(copy) if copy else None, "decode": decode, "kernel_breakdown": breakdown,
            "decode_step_launches": bench.get("decode_step_launches", []),
            "buffer_grows_during_timed_steps": bench.get("buffer_grows_during_timed_steps"),
            "bench_device": bench.get("device"), "prompt_tokens": bench.get("prompt_tokens"),
            "decode_tokens": bench.get("decode_tokens"), "repeats": bench.get("repeats")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    flags.add_out(ap)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--dry-run", type=int, default=0)
    ap.add_argument("--manifest", default="")
    ap.add_argument("--command", default="bash scripts/gpu_check.sh")
    a = ap.parse_args()

    steps = [json.loads(line) for line in read(os.path.join(a.work, "steps.jsonl")).splitlines() if line.strip()]
    manifest = dict(line.split("=", 1) for line in read(a.manifest).splitlines() if "=" in line) if a.manifest else {}
    m = machine()
    m["gpu"], m["driver"] = (None, None) if a.dry_run else (a.gpu, a.driver)
    import datetime
    prov = {"command": local_path_free(" ".join(a.command.split())), "commit": a.commit, "machine": m,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    if manifest:
        prov["bundle"] = {k: manifest.get(k) for k in ("arch", "built", "nvcc", "builder_cpu", "model", "model_sha256")}
    counts = {s: sum(1 for x in steps if x["status"] == s) for s in ("passed", "failed", "skipped")}
    result = {"provenance": prov, "dry_run": bool(a.dry_run),
              "summary": {**counts, "seconds": round(sum(x["seconds"] for x in steps), 1)},
              "steps": steps, "gtest": gtest_summary(a.work), "real_model": real_model_rows(a.work)}
    greedy = []
    for path in sorted(glob.glob(os.path.join(a.work, "logs", "greedy_*.txt"))):
        d = first_json(read(path))
        if d:
            greedy.append(d)
    result["greedy"] = greedy
    result.update(decode_section(first_json(step_log(a.work, steps, "bench_cuda_decode"))))
    ceiling = first_json(step_log(a.work, steps, "bf16 matmul ceiling (PyTorch)"))
    result["bf16_matmul_tflops"] = round(ceiling["bf16_matmul_tflops"], 1) if ceiling else None
    kernels = first_json(step_log(a.work, steps, "ch07_flash_attention kernels --device cuda"))
    if kernels:
        for row in kernels.get("rows", []):
            if result["bf16_matmul_tflops"] and row.get("tflops_bf16"):
                row["pct_of_bf16_ceiling"] = round(100 * row["tflops_bf16"] / result["bf16_matmul_tflops"], 1)
    result["flash_kernels"] = kernels
    result = json.loads(local_path_free(json.dumps(result)))  # no path of the machine it ran on

    slug = gpu_slug(a.gpu, a.dry_run)
    base = os.path.join(a.out, f"cuda_{slug}_validation")
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")

    title = "dry run, no GPU" if a.dry_run else f"{a.gpu}, driver {a.driver}"
    md = [f"# GPU check — {title} ({prov['date'][:10]})", "",
          f"- Command: `{prov['command']}` (scripts/gpu_check.sh; binaries from scripts/gpu_bundle.sh)",
          f"- Commit: {prov['commit']}" + (f" (bundle built {manifest.get('built')} for {manifest.get('arch')}, "
                                           f"nvcc {manifest.get('nvcc')})" if manifest else ""),
          f"- Machine: {machine_text(m)}", f"- Date: {prov['date']}", "",
          f"{counts['passed']} steps passed, {counts['failed']} failed, {counts['skipped']} skipped "
          f"({result['summary']['seconds']:.0f} s of steps).", "", "## Steps", ""]
    md += table(["step", "result", "s", "detail"],
                [[s["name"], s["status"], f'{s["seconds"]:.0f}', s["detail"].replace("|", "/")] for s in steps])
    if result["gtest"]:
        md += ["", "## CUDA test binaries (gtest JSON)", ""]
        md += table(["binary", "tests", "passed", "failed", "skipped", "failed tests"],
                    [[g["binary"], g["tests"], g["passed"], g["failed"], g["skipped"], ", ".join(g["failed_tests"]) or "-"]
                     for g in result["gtest"]])
    if result["real_model"]:
        md += ["", "## The real model: CUDA against CPU logits (teacher-forced text, then 3 decode steps)", ""]
        md += ["The int8 rows are judged by each device's distance from the f32 run (mean KL in nats, top-1 "
               "agreement), not by CUDA against CPU row by row: two int8 runs that round one code differently "
               "are independent samples of the rounding noise (tests/unit/test_cuda_runner.cpp says why).", ""]
        md += table(["file", "configuration", "rows", "top-1 agreement", "max error / logit scale",
                     "KL from f32: CPU / CUDA", "top-1 vs f32: CPU / CUDA"],
                    [[r["file"], r["config"], r["rows"], f'{r["top1"]:.4f}', f'{r["max_rel"]:.2e}',
                      f'{r["kl_cpu"]:.4f} / {r["kl_cuda"]:.4f}' if "kl_cpu" in r else "",
                      f'{r["top1_f32_cpu"]:.4f} / {r["top1_f32_cuda"]:.4f}' if "kl_cpu" in r else ""]
                     for r in result["real_model"]])
    if greedy:
        md += ["", "## Greedy text, CPU and CUDA (`lio generate --temperature 0 --max-tokens 48`)", ""]
        md += table(["attention / setting", "required", "same text", "CUDA text"],
                    [[g["variant"], "yes" if g["required"] else "no", "yes" if g["same_text"] else "NO",
                      json.dumps(g.get("cuda"))[:120]] for g in greedy])
    if result.get("decode"):
        md += ["", f'## Batch-1 decode (`bench_cuda_decode --repeats {result.get("repeats")}`, prompt '
                   f'{result.get("prompt_tokens")}, decode {result.get("decode_tokens")} tokens, eager launches; the ", CUDA graph" rows replay each decode step as one graph launch)', "",
               f'Device-to-device copy bandwidth measured in the same run (read + write): {result["copy_bandwidth_gbs"]:,} GB/s.', ""]
        md += table(["variant", "weights MiB", "prefill tok/s", "decode tok/s", "decode GB/s", "% of copy BW", "vs CPU"],
                    [[d["variant"], d["weight_mib"], d["prefill_tokens_per_s"], d["decode_tokens_per_s"], d["decode_gbs"],
                      d["pct_of_copy_bw"], d["decode_vs_cpu"]] for d in result["decode"]])
        if result.get("decode_step_launches"):
            md += ["", "Kernel launches of one decode step's forward pass (captured into a CUDA graph and counted; "
                       f'buffers grown during the timed steps: {result.get("buffer_grows_during_timed_steps")}):', ""]
            md += table(["attention", "kernel launches", "copies"],
                        [[x["attention"], x["kernel_launches"], x["copies"]] for x in result["decode_step_launches"]])
        md += ["", "Decode kernel breakdown (CUDA events around each op):", ""]
        md += table(["op", "calls/token", "us/token", "share %"],
                    [[k["op"], f'{k["calls_per_token"]:.0f}', k["us_per_token"], k["share_pct"]] for k in result["kernel_breakdown"]])
    if kernels:
        md += ["", f'## Chapter 07 kernels (`ch07_flash_attention kernels --device cuda`; bf16 matmul ceiling measured '
                   f'in the same run: {result["bf16_matmul_tflops"]} TFLOP/s)', ""]
        md += table(["N", "naive ms", "flash f32 ms", "flash bf16 ms", "bf16 TFLOP/s", "% of ceiling", "decode split / no split ms"],
                    [[r.get("n"), r.get("naive_ms"), r.get("flash_f32_ms"), r.get("flash_bf16_ms"),
                      round(r["tflops_bf16"], 1) if r.get("tflops_bf16") else "-", r.get("pct_of_bf16_ceiling", "-"),
                      f'{r.get("decode_split_ms")} / {r.get("decode_nosplit_ms")}'] for r in kernels.get("rows", [])])
    with open(base + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {local_path_free(base)}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
