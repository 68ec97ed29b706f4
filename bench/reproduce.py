#!/usr/bin/env python3
"""Every CPU speedup table of the course from one command, in the course's order (issue 44).

    bench/reproduce.sh [--quick] [--chapter NN ...] [--resume] [--stop-after MIN] [--list] [--dry-run]
                       [--keep-going] [--no-render]

It checks that the code is committed (the results name one clean commit: LIO_COMMIT is set once
for every producer), builds LIO (`cmake --build build`) and llama.cpp's peer tools once
(bench/batched/build_llama_tools.sh, and --ik for ik_llama.cpp), runs each chapter's benchmarks and their llama.cpp
comparisons in order with a progress line (elapsed time, and an estimate of what is left from
the last recorded run on this machine, else from built-in estimates), writes bench/results/, then
re-renders the lessons and the README (scripts/render_docs.py). A run of every chapter writes its
own timing to bench/results/reproduce_cpu.{json,md} (--quick: reproduce_cpu_quick.*) after each
step, marked unfinished until the last: the full run takes hours on a 2-core machine, so a run
cut short goes on with --resume, which runs only the steps the record lacks, on the same machine
(the record lists each sitting with its commit and time; each results file names its own commit).
--stop-after MIN ends a sitting before a step that would run past MIN minutes.

One run, one machine: when bench/results holds another machine's full run (reproduce_cpu.json
names its CPU), this machine's sittings are staged in bench/results/runs/<machine>/ (its record
and every results file its finished steps wrote); bench/results is put back as it was whenever a
sitting ends unfinished, and the staged run is published (its files and record in bench/results,
the stage removed) only when it is whole. So two machines can each go on with their own run, and
the published files never mix them.

--quick runs fewer repeats and shorter sweeps and skips the slowest steps (GPTQ / AWQ making,
the full perplexity runs, the serving comparison); every results file it writes says so in its
provenance ("below_rule") and on the second line of its Markdown: such numbers are below the
course's five-repeat rule and are for seeing the effects, not for comparing engines. The steps
it skips keep the committed results. `git checkout bench/results docs README.md` returns to
the committed numbers.

--chapter takes 01 .. 09 or `engine` (batch-1 decode, activations, families, batched): several
may be given. What is not here: the GPU results (bench/results/cuda_*, *_h100*: they need a GPU
and the one-call GPU check, scripts/gpu_check.sh), the hour-long soak (bench/soak/run.sh), the
fuzzing run (scripts/fuzz.sh) and the fresh-machine measurement (bench/fresh_machine/measure.sh).

Exit status: 0 when every step ran, 1 when one failed (the rest still ran with --keep-going),
2 for bad arguments or a checkout that is not clean.
"""
import argparse
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time

from liobench import ROOT, results_meta


PY = ".venv/bin/python"
R = "bench/results"
B = "build/bin"
Q41 = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
F32 = "models/SmolLM2-135M-Instruct.F32.gguf"
KQ = ("models/SmolLM2-135M-Instruct.Q4_K_M.gguf,models/SmolLM2-135M-Instruct.Q4_K_M.gguf+a8b,"
      "models/SmolLM2-135M-Instruct.Q6_K.gguf,models/SmolLM2-135M-Instruct.Q6_K.gguf+a8b")
SCRATCH = "build/reproduce"  # quantized variants made on the way (gitignored with build/)


@dataclasses.dataclass
class Step:
    """One measurement: shell commands run from the repository root, in order."""
    chapter: str          # "01" .. "09" or "engine"
    name: str             # what it measures, for the progress line
    full: list            # commands of the full run
    quick: list = None    # commands of --quick; None: skipped there (the committed results stay)
    outputs: tuple = ()   # results files it writes (relative to bench/results), for --quick's mark
    llama: bool = False   # needs build-llama/bin's tools
    est_full: float = 60  # seconds, when no recorded run says better
    est_quick: float = 30


def ch03_json(name, args):
    """ch03_quantization ARGS --json > NAME.json, then the provenance stamp with that command."""
    cmd = f"{B}/ch03_quantization {args} --json"
    return [f"{cmd} > {R}/{name}.json",
            f"{PY} -m liobench.results_meta stamp {R}/{name}.json --command {shlex.quote(cmd)}"]


def stdout_md(md, title, cmd, json_path=None):
    """CMD > MD with a title and the provenance lines on top (from JSON_PATH's record if given)."""
    src = f"--json-provenance {json_path} " if json_path else ""
    return (f"{cmd} > {SCRATCH}/stdout.txt && {PY} bench/reproduce.py --stdout-md {md} --title "
            f"{shlex.quote(title)} --command {shlex.quote(cmd)} {src}--stdout {SCRATCH}/stdout.txt")


def steps():
    s = []
    # ---- 01 KV cache
    kv = f"{B}/bench_kv_cache --repeats 3 --long-from 256 --long-repeats 1"
    kv_q = f"{B}/bench_kv_cache --lengths 32,64,128 --repeats 1 --long-from 256 --long-repeats 1"
    s.append(Step("01", "KV cache vs recompute (bench_kv_cache)",
                  [stdout_md(f"{R}/01_kv_cache.md", "Chapter 01 — KV cache vs recompute (CPU)", kv),
                   f"{PY} bench/01_kv_cache/plot.py"],
                  [stdout_md(f"{R}/01_kv_cache.md", "Chapter 01 — KV cache vs recompute (CPU)", kv_q),
                   f"{PY} bench/01_kv_cache/plot.py"],
                  ("01_kv_cache.csv", "01_kv_cache.md", "01_kv_cache.json"), est_full=240, est_quick=25))
    # ---- 02 GQA / MLA
    gqa = (f"{B}/bench_gqa --variants mha,gqa,mqa --contexts 256,512,1024,2048,4096 --batches 1,16 --steps 5 "
           f"--out-md {R}/02_gqa_cpu.md --out-json {R}/02_gqa_cpu.json")
    gqa_q = (f"{B}/bench_gqa --variants mha,gqa,mqa --contexts 256,1024,4096 --batches 1,16 --steps 2 "
             f"--eval-tokens 128 --out-md {R}/02_gqa_cpu.md --out-json {R}/02_gqa_cpu.json")
    s.append(Step("02", "MHA / GQA / MQA (bench_gqa)", [gqa, f"{PY} bench/02_gqa_mla/plot.py {R}/02_gqa_cpu.json"],
                  [gqa_q, f"{PY} bench/02_gqa_mla/plot.py {R}/02_gqa_cpu.json"],
                  ("02_gqa_cpu.json", "02_gqa_cpu.md"), est_full=45, est_quick=25))
    mla = (f"{B}/bench_mla --layers 4 --contexts 256,512,1024,2048,4096 --steps 3 --ranks 48,96,144,192,216,240 "
           f"--rope-pairs 24 --eval-tokens 512 --out-md {R}/02_mla_cpu.md --out-json {R}/02_mla_cpu.json")
    mla_q = (f"{B}/bench_mla --layers 2 --contexts 256,1024,4096 --steps 1 --ranks 144,240 --rope-pairs 24 "
             f"--eval-tokens 128 --out-md {R}/02_mla_cpu.md --out-json {R}/02_mla_cpu.json")
    s.append(Step("02", "MLA naive vs absorbed, GQA -> MLA (bench_mla)",
                  [mla, f"{PY} bench/02_gqa_mla/plot_mla.py {R}/02_mla_cpu.json"],
                  [mla_q, f"{PY} bench/02_gqa_mla/plot_mla.py {R}/02_mla_cpu.json"],
                  ("02_mla_cpu.json", "02_mla_cpu.md"), est_full=105, est_quick=40))
    # ---- 03 quantization
    s.append(Step("03", "K-quant files by llama-quantize (make_kquant.sh)", ["bash bench/03_quantization/make_kquant.sh"],
                  ["bash bench/03_quantization/make_kquant.sh"], llama=True, est_full=30, est_quick=30))
    s.append(Step("03", "containers: f32, Q8_0, Q4_1, Q4_0 (ch03_quantization)",
                  ch03_json("03_quantization_cpu", f"--variants f32,q8_0,q4_1,q4_0 --files {Q41} --steps 15"),
                  ch03_json("03_quantization_cpu", f"--variants f32,q8_0,q4_1,q4_0 --files {Q41} --steps 3 "
                                                   "--eval-tokens 128 --ppl-chunks 1"),
                  ("03_quantization_cpu.json",), est_full=120, est_quick=45))
    s.append(Step("03", "int8 activations and KV cache (ch03_quantization)",
                  ch03_json("03_quantization_int8_cpu", "--variants f32,f32+kv16,f32+kv8,q8_0,q8_0+a8b,q8_0+a8,w8a16,"
                                                        "w8a8,smoothquant:8gch+a8,w8a8+kv8 --steps 15"),
                  None, ("03_quantization_int8_cpu.json",), est_full=300))
    s.append(Step("03", "every method at 8 / 4 / 3 bits with speed (ch03_quantization)",
                  ch03_json("03_quantization_all_cpu", "--variants f32,f32+kv8,q8_0,w8a16,w8a8,smoothquant:8gch+a8,"
                                                       "q4_1,q4_0,gptq:4g32,awq:4g32,rtn:4g128,gptq:4g128,awq:4g128,"
                                                       f"rtn:3g128,gptq:3g128,awq:3g128 --files {Q41} --steps 10"),
                  None, ("03_quantization_all_cpu.json",), est_full=900))
    s.append(Step("03", "GPTQ / AWQ / RTN quality, files kept for the perplexity check (ch03_quantization)",
                  [f"mkdir -p {SCRATCH}/methods"]
                  + ch03_json("03_quantization_methods_cpu", "--variants f32,q4_0,gptq:4g32,awq:4g32,rtn:4g128,gptq:4g128,"
                                                             "awq:4g128,rtn:3g128,gptq:3g128,awq:3g128,rtn:3ag128,"
                                                             f"gptq:3ag128,awq:3ag128 --skip-speed --llama-blocks "
                                                             f"--out-dir {SCRATCH}/methods"),
                  None, ("03_quantization_methods_cpu.json",), est_full=900))
    s.append(Step("03", "3 bits in llama.cpp's blocks (lio quantize, ch03_quantization)",
                  [f"mkdir -p {SCRATCH} && {B}/lio quantize --model {F32} --out {SCRATCH}/rtn-3g128-llama-blocks.gguf "
                   "--bits 3 --group-size 128 --llama-blocks --keep q8_0:token_embd"]
                  + ch03_json("03_quantization_q3_cpu", "--variants f32,q4_0,rtn:3g128,gptq:3g128,awq:3g128,rtn:3ag128 "
                                                        f"--files {SCRATCH}/rtn-3g128-llama-blocks.gguf --steps 10"),
                  None, ("03_quantization_q3_cpu.json",), est_full=420))
    s.append(Step("03", "llama.cpp's Q4_K_M / Q6_K as stored (ch03_quantization)",
                  ch03_json("03_quantization_kquant_cpu", f"--variants f32,q8_0,q4_1,q4_1+a8b --files {KQ} --steps 10"),
                  ch03_json("03_quantization_kquant_cpu", f"--variants f32,q8_0,q4_1,q4_1+a8b --files {KQ} --steps 3 "
                                                          "--eval-tokens 128 --ppl-chunks 1"),
                  ("03_quantization_kquant_cpu.json",), est_full=180, est_quick=70))
    plot03 = (f"{PY} bench/03_quantization/plot.py " + " ".join(
        f"{R}/03_quantization_{n}.json" for n in ("all_cpu", "cpu", "int8_cpu", "kquant_cpu", "methods_cpu", "q3_cpu")))
    s.append(Step("03", "chapter 03 plots", [plot03], [plot03], est_full=10, est_quick=10))
    rtn = (f"mkdir -p {SCRATCH} && {B}/lio quantize --model {F32} --out {SCRATCH}/SmolLM2-135M-Instruct.rtn-Q8_0.gguf "
           f"--bits 8 && {B}/lio quantize --model {F32} --out {SCRATCH}/SmolLM2-135M-Instruct.rtn-Q4_0.gguf --bits 4")
    ppl_models = f"{F32} {Q41} {SCRATCH}/SmolLM2-135M-Instruct.rtn-Q8_0.gguf {SCRATCH}/SmolLM2-135M-Instruct.rtn-Q4_0.gguf"
    s.append(Step("03", "lio perplexity vs llama-perplexity (check_perplexity.sh)",
                  [rtn, f'MODELS="{ppl_models}" OUT={R}/03_perplexity_check.md bash bench/03_quantization/check_perplexity.sh'],
                  [rtn, f'MODELS="{ppl_models}" OUT={R}/03_perplexity_check.md bash bench/03_quantization/check_perplexity.sh '
                        "--quick"],
                  ("03_perplexity_check.json", "03_perplexity_check.md"), llama=True, est_full=420, est_quick=90))
    kq_models = " ".join(f"models/SmolLM2-135M-Instruct.{q}.gguf" for q in ("Q4_1", "Q4_K_M", "Q6_K"))
    s.append(Step("03", "perplexity of llama.cpp's K-quants (check_perplexity.sh --quick)",
                  [f'MODELS="{kq_models}" OUT={R}/03_perplexity_check_kquant.md bash '
                   "bench/03_quantization/check_perplexity.sh --quick"],
                  None, ("03_perplexity_check_kquant.json",), llama=True, est_full=120))
    meth = " ".join(f"{SCRATCH}/methods/{n}.gguf" for n in ("rtn-4g128", "gptq-4g128", "awq-4g128", "rtn-3g128",
                                                             "gptq-3g128", "awq-3g128", "gptq-3ag128"))
    s.append(Step("03", "perplexity of the GPTQ / AWQ / RTN files (check_perplexity.sh --quick)",
                  [f'MODELS="{meth}" OUT={R}/03_perplexity_check_methods.md bash '
                   "bench/03_quantization/check_perplexity.sh --quick || true"],
                  None, ("03_perplexity_check_methods.json",), llama=True, est_full=240))
    s.append(Step("03", "quantized speed vs llama-bench (peer_speed.py)",
                  [f"{PY} bench/03_quantization/peer_speed.py --repeats 5"],
                  None,  # every variant the tables name, at lengths its harness can time: no quick form
                  ("03_quantization_peer_cpu.json", "03_quantization_peer_cpu.md"), llama=True, est_full=3900))
    s.append(Step("03", "K-quant speed vs llama-bench (peer_speed.py)",
                  [f"{PY} bench/03_quantization/peer_speed.py --repeats 5 --variants q4_1,q4_1+a8b --files {KQ} "
                   f"--out {R}/03_quantization_peer_kquant_cpu"],
                  None, ("03_quantization_peer_kquant_cpu.json",), llama=True, est_full=2400))
    # ---- 04 paged attention
    s.append(Step("04", "static vs paged KV waste, a simulation (bench_paged_memory)",
                  [stdout_md(f"{R}/04_paged_memory.md", "Chapter 04 — static vs paged KV-cache memory (simulation)",
                             f"{B}/bench_paged_memory --json {R}/04_paged_memory.json", f"{R}/04_paged_memory.json")],
                  [stdout_md(f"{R}/04_paged_memory.md", "Chapter 04 — static vs paged KV-cache memory (simulation)",
                             f"{B}/bench_paged_memory --requests 500 --json {R}/04_paged_memory.json",
                             f"{R}/04_paged_memory.json")],
                  ("04_paged_memory.json", "04_paged_memory.md"), est_full=20, est_quick=8))
    ind = f"{B}/bench_paged_indirection --layers 30 --repeats 10 --json {R}/04_indirection_cpu.json"
    ind_q = (f"{B}/bench_paged_indirection --layers 8 --repeats 3 --contexts 128 256 1024 4096 "
             f"--json {R}/04_indirection_cpu.json")
    title = "Chapter 04 — paged vs contiguous decode attention (CPU)"
    s.append(Step("04", "paged vs contiguous attention (bench_paged_indirection)",
                  [stdout_md(f"{R}/04_indirection_cpu.md", title, ind, f"{R}/04_indirection_cpu.json")],
                  [stdout_md(f"{R}/04_indirection_cpu.md", title, ind_q, f"{R}/04_indirection_cpu.json")],
                  ("04_indirection_cpu.json", "04_indirection_cpu.md"), est_full=120, est_quick=20))
    eng = f"{B}/bench_paged_engine --out-json {R}/04_paged_engine_cpu.json"
    eng_q = f"{B}/bench_paged_engine --requests 8 --conversations 2 --turns 2 --out-json {R}/04_paged_engine_cpu.json"
    title = "Chapter 04 — prefix caching and parallel sampling in the engine (CPU)"
    s.append(Step("04", "prefix caching + parallel sampling (bench_paged_engine)",
                  [stdout_md(f"{R}/04_paged_engine_cpu.md", title, eng, f"{R}/04_paged_engine_cpu.json"),
                   f"{PY} bench/04_paged_attention/plot.py"],
                  [stdout_md(f"{R}/04_paged_engine_cpu.md", title, eng_q, f"{R}/04_paged_engine_cpu.json"),
                   f"{PY} bench/04_paged_attention/plot.py"],
                  ("04_paged_engine_cpu.json", "04_paged_engine_cpu.md"), est_full=360, est_quick=70))
    # ---- 05 continuous batching
    cb = (f"OMP_WAIT_POLICY=passive {B}/bench_continuous_batching --requests 200 --scale 0.1 --max-num-seqs 32 "
          f"--max-num-batched-tokens 64 --rates 5,10,inf --out-json {R}/05_continuous_batching_cpu.json")
    cb_q = (f"OMP_WAIT_POLICY=passive {B}/bench_continuous_batching --requests 40 --scale 0.05 --max-num-seqs 32 "
            f"--max-num-batched-tokens 64 --rates 5,10,inf --out-json {R}/05_continuous_batching_cpu.json")
    plot05 = f"{PY} bench/05_continuous_batching/plot.py {R}/05_continuous_batching_cpu.json"
    s.append(Step("05", "static vs continuous batching, preemption (bench_continuous_batching)",
                  [f"{cb} > {R}/05_continuous_batching_cpu.md", plot05],
                  [f"{cb_q} > {R}/05_continuous_batching_cpu.md", plot05],
                  ("05_continuous_batching_cpu.json", "05_continuous_batching_cpu.md"), est_full=700, est_quick=90))
    def abc(cmd):  # the table as text, then as JSON stamped with its command
        return [f"{cmd} > {R}/05_abc_cpu.txt", f"{PY} -m liobench.results_meta strip-paths {R}/05_abc_cpu.txt",
                f"{cmd} --json > {R}/05_abc_cpu.json",
                f"{PY} -m liobench.results_meta stamp {R}/05_abc_cpu.json --command {shlex.quote(cmd + ' --json')}"]
    s.append(Step("05", "the lecture's A, B, C requests, static vs continuous (ch05_continuous_batching)",
                  abc(f"{B}/ch05_continuous_batching --threads 1"),
                  abc(f"{B}/ch05_continuous_batching --threads 1 --scale 0.2"),
                  ("05_abc_cpu.json", "05_abc_cpu.txt"), est_full=120, est_quick=30))
    # ---- 06 speculative decoding
    s.append(Step("06", "draft model, n-gram, early exit: speedup by k and batch (run.py)",
                  [f"{PY} bench/06_speculative/run.py --repeats 5"],
                  [f"{PY} bench/06_speculative/run.py --repeats 1 --k-max 4 --max-tokens 32 --batch-sizes 1 32"],
                  ("06_speculative_cpu.json", "06_speculative_cpu.md"), est_full=900, est_quick=150))
    s.append(Step("06", "against llama-lookup / llama-speculative (peer.py)",
                  [f"{PY} bench/06_speculative/peer.py --repeats 5"],
                  [f"{PY} bench/06_speculative/peer.py --repeats 2 --max-tokens 32"],
                  ("06_speculative_peer_cpu.json", "06_speculative_peer_cpu.md"), llama=True,
                  est_full=300, est_quick=80))
    s.append(Step("06", "what a draft model costs (draft_cost.py)",
                  [f"{PY} bench/06_speculative/draft_cost.py --repeats 5 --threads 2"],
                  [f"{PY} bench/06_speculative/draft_cost.py --repeats 2 --threads 2"],
                  ("06_speculative_draft_cost_cpu.json", "06_speculative_draft_cost_cpu.md"), llama=True,
                  est_full=180, est_quick=60))
    s.append(Step("06", "lio-server with and without n-gram speculation (serve.sh)",
                  ['bash bench/06_speculative/serve.sh --repeats 5 --spec "ngram --num-speculative-tokens 4"'],
                  None, ("06_speculative_serve_cpu.json",), est_full=300))
    # ---- 07 FlashAttention
    s.append(Step("07", "naive vs flash attention kernels (run.py)", [f"{PY} bench/07_flash_attention/run.py --threads 2"],
                  [f"{PY} bench/07_flash_attention/run.py --threads 2 --repeats 2 --n 16,64,512,2048,8192"],
                  ("07_flash_attention_cpu.json", "07_flash_attention_cpu.md"), est_full=300, est_quick=60))
    s.append(Step("07", "the whole model at long context vs llama-bench -fa (peer.py)",
                  [f"{PY} bench/07_flash_attention/peer.py"],
                  [f"{PY} bench/07_flash_attention/peer.py --repeats 2 --contexts 1024 --decode-tokens 16"],
                  ("07_flash_attention_peer_cpu.json", "07_flash_attention_peer_cpu.md"), llama=True,
                  est_full=420, est_quick=90))
    # ---- 08 tensor parallelism
    s.append(Step("08", "TP 1 / 2 / 3 and PP 2 under mpirun (run.py)",
                  [f"{PY} bench/08_tensor_parallel/run.py --rounds 5 --batch 1,8"],
                  [f"{PY} bench/08_tensor_parallel/run.py --rounds 1 --repeats 1 --batch 1,8 --decode-steps 8"],
                  ("08_tensor_parallel_cpu.json", "08_tensor_parallel_cpu.md"), est_full=420, est_quick=90))
    numerics = [f"{PY} bench/08_tensor_parallel/numerics.py"]
    s.append(Step("08", "TP / PP logits against one process, f32 and int8 activations (numerics.py)", numerics,
                  numerics, ("08_tp_numerics_cpu.json", "08_tp_numerics_cpu.md"), est_full=60, est_quick=60))
    # ---- engine-wide: batch-1 decode, activations, families, batched
    s.append(Step("engine", "batch-1 prefill and decode vs llama-bench, Q4_1 and F32 (cpu_decode/run.py)",
                  [f"{PY} bench/cpu_decode/run.py --repeats 5 --threads 2"],
                  [f"{PY} bench/cpu_decode/run.py --repeats 2 --threads 2"],
                  ("cpu_decode.json", "cpu_decode.md"), llama=True, est_full=100, est_quick=45))
    s.append(Step("engine", "Gemma 3 270M batch-1 vs llama-bench (cpu_decode/run.py)",
                  [f"{PY} bench/cpu_decode/run.py --repeats 5 --threads 2 --model models/gemma-3-270m-q4_k_m.gguf "
                   "--f32-model models/gemma-3-270m.F32.gguf --label Q4_K_M --description 'Gemma 3 270M as shipped "
                   "(Q4_K_M: Q5_0 / Q8_0 / Q4_K / Q6_K matrices, token_embd Q8_0)' --out bench/results/cpu_decode_gemma3"],
                  None, ("cpu_decode_gemma3.json",), llama=True, est_full=600))
    s.append(Step("engine", "batch-1 decode against the read bandwidth, by weight format (cpu_decode/formats.py)",
                  [f"{PY} bench/cpu_decode/formats.py --repeats 5 --threads 2"],
                  [f"{PY} bench/cpu_decode/formats.py --repeats 1 --threads 2 --formats F32,Q4_1"],
                  ("cpu_decode_formats.json", "cpu_decode_formats.md"), llama=True, est_full=2400, est_quick=60))
    s.append(Step("engine", "the CPU roofline from the formats run (cpu_decode/roofline.py)",
                  [f"{PY} bench/cpu_decode/roofline.py"], [f"{PY} bench/cpu_decode/roofline.py"],
                  ("cpu_roofline.json", "cpu_roofline.png"), est_full=5, est_quick=5))
    s.append(Step("engine", "int8 vs f32 activations: KL from the F32 model vs llama.cpp's (activations_kl.py)",
                  [f"{PY} bench/cpu_decode/activations_kl.py"], [f"{PY} bench/cpu_decode/activations_kl.py --windows 2"],
                  ("cpu_activations_kl.json", "cpu_activations_kl.md"), est_full=60, est_quick=35))
    s.append(Step("engine", "read bandwidth by streams (bandwidth_streams.py)",
                  [f"{PY} bench/cpu_decode/bandwidth_streams.py --repeats 5 --threads 2"],
                  [f"{PY} bench/cpu_decode/bandwidth_streams.py --repeats 2 --threads 2"],
                  ("read_bandwidth_streams_cpu.json",), est_full=60, est_quick=25))
    s.append(Step("engine", "model families: KV bytes and decode by context (families/run.py)",
                  [f"{PY} bench/families/run.py --repeats 5"], None, ("families_cpu.json",), est_full=400))
    s.append(Step("engine", "Gemma 3's hybrid KV cache (families/hybrid_kv.py)",
                  [f"{PY} bench/families/hybrid_kv.py --repeats 5 --threads 2"], None, ("hybrid_kv_cpu.json",),
                  est_full=240))
    s.append(Step("engine", "lio batch (defaults) vs llama-batched-bench and ik_llama.cpp's (batched/run.py)",
                  [f"{PY} bench/batched/run.py --concurrency 1,32 --repeats 5 --threads 2"],
                  [f"{PY} bench/batched/run.py --concurrency 1,32 --repeats 2 --threads 2 --requests 32 --waves 1 "
                   "--gen-tokens 16 --ik-bench none"],
                  ("batched.json", "batched.md", "batched.csv"), llama=True, est_full=1800, est_quick=80))
    # ---- 09 capstone
    s.append(Step("09", "lio-server vs llama-server (bench_serve.sh)",
                  ['LIO_ARGS="--activations int8 --kv-cache-dtype f16" RATES=2,inf bash scripts/bench_serve.sh '
                   "--repeats 5 --device cpu"],
                  None, ("09_serve_cpu.json",), llama=True, est_full=1300))
    s.append(Step("09", "structured outputs: a JSON schema's cost, lio-server vs llama-server (structured/run.py)",
                  [f"{PY} bench/structured/run.py"], None, ("09_structured_cpu.json", "09_structured_cpu.md"),
                  llama=True, est_full=540))
    s.append(Step("09", "the closing table: each chapter's switch in one engine (capstone/run.py)",
                  [f"{PY} bench/capstone/run.py"], [f"{PY} bench/capstone/run.py --quick"],
                  ("09_closing_cpu.json", "09_closing_cpu.md"), est_full=400, est_quick=120))
    return s


def check_plan(plan, bin_dir):
    """Every script a step runs exists, and every build/bin program is built in bin_dir; 0 or 1."""
    import re
    missing = set()
    for s in plan:
        for c in s.full + (s.quick or []):
            for path in re.findall(r"(?:^|\s)((?:bench|scripts)/[\w./-]+\.(?:py|sh))", c):
                if not os.path.isfile(os.path.join(ROOT, path)):
                    missing.add(f"{s.chapter} {s.name}: {path} is not in the tree")
            for mod in re.findall(r"-m liobench\.(\w+)", c):
                if not os.path.isfile(os.path.join(ROOT, "bench", "liobench", mod + ".py")):
                    missing.add(f"{s.chapter} {s.name}: bench/liobench/{mod}.py is not in the tree")
            for prog in re.findall(r"build/bin/([\w-]+)", c):
                if not os.access(os.path.join(bin_dir, prog), os.X_OK):
                    missing.add(f"{s.chapter} {s.name}: build/bin/{prog} is not built")
    for m in sorted(missing):
        print(f"reproduce --check: {m}", file=sys.stderr)
    print(f"reproduce --check: {len(plan)} steps, {'OK' if not missing else f'{len(missing)} problem(s)'}")
    return 1 if missing else 0


def chapter_key(text):
    text = text.strip().lower()
    if text in ("engine", "e"):
        return "engine"
    if text.isdigit() and 1 <= int(text) <= 9:
        return f"{int(text):02d}"
    raise SystemExit(f"reproduce: --chapter '{text}': want 01 .. 09 or engine")


def fmt_s(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


def recorded_seconds(quick, staged=None):
    """{step name: seconds} from this machine's last recorded run of the same kind (its staged
    record, else the published one), if any."""
    path = os.path.join(ROOT, R, "reproduce_cpu_quick.json" if quick else "reproduce_cpu.json")
    if staged and os.path.exists(os.path.join(ROOT, staged)):
        path = os.path.join(ROOT, staged)
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return {}
    if d.get("provenance", {}).get("machine", {}).get("cpu") != results_meta.machine().get("cpu"):
        return {}
    return {s["name"]: s["seconds"] for s in d.get("steps", []) if s.get("ok")}


def mark_below_rule(outputs, note):
    """--quick: say in each results file that its numbers are below the rule."""
    for name in outputs:
        path = os.path.join(ROOT, R, name)
        if not os.path.exists(path):
            continue
        if name.endswith(".json"):
            with open(path) as f:
                d = json.load(f)
            if isinstance(d, dict):
                d.setdefault("provenance", {})["below_rule"] = note
                results_meta.write_text(path, json.dumps(d, indent=1) + "\n")
        elif name.endswith((".md", ".txt")):
            with open(path) as f:
                lines = f.read().splitlines()
            banner = f"> **Below the rule**: {note}"
            at = 1 if lines and lines[0].startswith("#") else 0
            if banner not in lines:
                if not at:
                    lines[0:0] = [banner, ""]
                elif len(lines) > 1 and lines[1] == "":
                    lines[1:1] = ["", banner]
                else:
                    lines[1:1] = ["", banner, ""]
            results_meta.write_text(path, "\n".join(lines) + "\n")


def stdout_md_main(a):
    """--stdout-md: a results Markdown file from a program's stdout, with provenance on top."""
    prov = None
    if a.json_provenance:
        with open(a.json_provenance) as f:
            prov = json.load(f).get("provenance")
    if not isinstance(prov, dict) or not isinstance(prov.get("machine"), dict):
        prov = results_meta.provenance(a.command)
    prov["command"] = results_meta.local_path_free(a.command)
    with open(a.stdout) as f:
        body = f.read().rstrip("\n").splitlines()
    # Drop the program's own provenance lines: the header carries them.
    body = [ln for ln in body if not ln.startswith(("- Command:", "- Commit:", "- Date:", "Command:"))]
    lines = [f"# {a.title}", "", *results_meta.provenance_lines(prov), ""]
    if a.stdout_md.endswith("01_kv_cache.md"):
        lines += kv_cache_table()
        import csv
        with open(os.path.join(ROOT, R, "01_kv_cache.csv")) as f:
            rows = [{k: (v if k == "identical" else float(v)) for k, v in r.items()} for r in csv.DictReader(f)]
        results_meta.write_text(os.path.join(ROOT, R, "01_kv_cache.json"),
                           json.dumps({"provenance": prov, "rows": rows}, indent=1) + "\n")
    else:
        lines += body
    results_meta.write_text(a.stdout_md, "\n".join(lines).rstrip("\n") + "\n")


def kv_cache_table():
    """01_kv_cache.md's table, from the CSV bench_kv_cache wrote."""
    import csv
    with open(os.path.join(ROOT, R, "01_kv_cache.csv")) as f:
        rows = list(csv.DictReader(f))
    out = ["- Model: SmolLM2-135M-Instruct Q4_1 as stored, f32 activations (the chapter programs' default); "
           "a 32-token prompt, greedy, EOS ignored (every run generates exactly N tokens).", "",
           "| generated tokens | KV cache (ms) | recompute (ms) | recompute / cache | tokens identical |",
           "|---:|---:|---:|---:|:---:|"]
    for r in rows:
        kv, rc = float(r["cached_ms_median"]), float(r["recompute_ms_median"])
        same = "yes" if r["identical"].lower() in ("1", "true", "yes") else "no"
        out.append(f"| {r['gen_tokens']} | {kv:,.1f} | {rc:,.1f} | {rc / kv:.1f}x | {same} |")
    out += ["", "![KV cache vs recompute](01_kv_cache.png)"]
    return out


RUNS = "runs"  # under bench/results: the staged sittings of machines that do not own the published run


def machine_slug(cpu):
    """A directory name for a CPU model: "AMD EPYC" -> "amd-epyc"."""
    import re
    return re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") or "unknown-cpu"


def needs_stage(published_json, cpu):
    """True when bench/results holds another machine's full run (finished or not): a full run on
    this machine then stages its results (Stage) and publishes them only when it is whole, so the
    published files never mix two machines' sittings and the other machine can still resume."""
    try:
        with open(published_json) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return False
    return d.get("provenance", {}).get("machine", {}).get("cpu") not in (None, cpu)


class Stage:
    """The staged sittings of one machine's full run: results_dir/runs/<machine>/ holds its record
    (reproduce_cpu.{json,md}) and, under files/, every results file its finished steps wrote.

    begin() remembers the published files (every file under results_dir except runs/) and lays the
    staged ones over them, so a step that reads an earlier step's results (chapter 03's plots) reads
    this machine's. keep() copies what differs from the published files into files/ (after each
    finished step); reset() drops what a failed step left; restore() puts the published files back
    (a sitting that ends unfinished, or is killed, leaves bench/results as it found it); publish()
    ends the stage once the run is whole: its files are already in place, its record becomes the
    published one and runs/<machine>/ is removed."""

    def __init__(self, results_dir, slug):
        self.results = results_dir
        self.dir = os.path.join(results_dir, RUNS, slug)
        self.files = os.path.join(self.dir, "files")
        self.published = {}

    def _walk(self, top, skip_runs):
        out = {}
        for dirpath, dirnames, names in os.walk(top):
            if skip_runs and os.path.abspath(dirpath) == os.path.abspath(self.results):
                dirnames[:] = [d for d in dirnames if d != RUNS]
            for n in names:
                full = os.path.join(dirpath, n)
                out[os.path.relpath(full, top)] = full
        return out

    def _write(self, path, data):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        results_meta.write_text(path, data)

    def begin(self):
        for rel, full in self._walk(self.results, True).items():
            with open(full, "rb") as f:
                self.published[rel] = f.read()
        self.overlay()

    def overlay(self):
        """The staged files over the published ones."""
        for rel, full in self._walk(self.files, False).items():
            with open(full, "rb") as f:
                self._write(os.path.join(self.results, rel), f.read())

    def keep(self):
        """Stages every results file that is new or differs from its published version."""
        for rel, full in self._walk(self.results, True).items():
            with open(full, "rb") as f:
                data = f.read()
            if self.published.get(rel) != data:
                self._write(os.path.join(self.files, rel), data)

    def restore(self):
        """The published files back; files the sitting added are removed."""
        for rel, full in self._walk(self.results, True).items():
            if rel not in self.published:
                os.remove(full)
        for rel, data in self.published.items():
            path = os.path.join(self.results, rel)
            try:
                with open(path, "rb") as f:
                    same = f.read() == data
            except OSError:
                same = False
            if not same:
                self._write(path, data)

    def reset(self):
        """bench/results as the last finished step left it: published files plus the staged ones."""
        self.restore()
        self.overlay()

    def publish(self, record_base):
        import shutil
        for ext in (".json", ".md"):
            shutil.copyfile(os.path.join(self.dir, "reproduce_cpu" + ext), record_base + ext)
        shutil.rmtree(self.dir)
        runs = os.path.join(self.results, RUNS)
        if os.path.isdir(runs) and not os.listdir(runs):
            os.rmdir(runs)


def resumable(path, mode):
    """The record of an unfinished whole run of `mode` on this machine, for --resume; exits with
    status 2 when there is none."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"reproduce --resume: no run to resume ({e})")
    if d.get("mode") != mode or d.get("complete", True):
        raise SystemExit(f"reproduce --resume: {path} holds a {'finished' if d.get('complete', True) else d.get('mode')} "
                         f"run, not an unfinished {mode} one: start a new run without --resume")
    if d.get("provenance", {}).get("machine", {}).get("cpu") != results_meta.machine().get("cpu"):
        raise SystemExit(f"reproduce --resume: {path} was measured on another machine "
                         f"({d['provenance']['machine'].get('cpu')}): start a new run")
    d.setdefault("sittings", [])
    d.setdefault("prepare", [])
    return d


def steps_to_run(plan, earlier):
    """The steps of `plan` that the earlier sittings (a resumable() record) did not finish: the
    failed ones and the ones not reached, in plan order."""
    finished = {d["name"] for d in earlier["steps"] if d["ok"]}
    return [s for s in plan if s.name not in finished]


def write_record(path, mode, note, earlier, sitting, prep, done, skipped, complete):
    """Writes the run's timing, PATH.json and PATH.md: the steps of earlier sittings (--resume)
    followed by this sitting's. `seconds` is the sum of the sittings' wall times."""
    prov = results_meta.provenance()
    if mode == "quick":
        prov["below_rule"] = note
    if earlier["steps"]:
        prov["date_first"] = earlier["provenance"].get("date_first", earlier["provenance"]["date"])
    steps_all = [d for d in earlier["steps"] if d["ok"]] + done
    sittings = earlier["sittings"] + [dict(sitting)]
    failed = [d["name"] for d in steps_all if not d["ok"]]
    rec = {"provenance": prov, "mode": mode, "complete": complete and not failed,
           "seconds": round(sum(x["seconds"] for x in sittings), 1),
           "benchmark_seconds": round(sum(d["seconds"] for d in steps_all), 1), "sittings": sittings,
           "prepare": earlier["prepare"] + prep, "steps": steps_all,
           "skipped": [{"chapter": s.chapter, "name": s.name} for s in skipped], "failed": failed}
    results_meta.write_text(path + ".json", json.dumps(rec, indent=1) + "\n")
    state = "" if rec["complete"] else f" (unfinished: {len(steps_all)} steps so far; go on with --resume)"
    md = [f"# bench/reproduce.sh{' --quick' if mode == 'quick' else ''}: every CPU results file in one run{state}", "",
          *results_meta.provenance_lines(prov), "",
          f"Total {fmt_s(rec['seconds'])} in {len(sittings)} sitting{'s' if len(sittings) > 1 else ''} (benchmarks "
          f"{fmt_s(rec['benchmark_seconds'])}, building {fmt_s(sum(p['seconds'] for p in rec['prepare']))}); "
          f"{len(failed)} failed.", "",
          "| sitting | commit | date | seconds |", "|---:|---|---|---:|"]
    md += [f"| {i + 1} | {x['commit']} | {x['date']} | {x['seconds']:.0f} |" for i, x in enumerate(sittings)]
    md += ["", "| chapter | step | commit | seconds | ok |", "|---|---|---|---:|:---:|"]
    md += [f"| {d['chapter']} | {d['name']} | {d.get('commit', prov['commit'])} | {d['seconds']:.0f} | "
           f"{'yes' if d['ok'] else 'NO'} |" for d in steps_all]
    md += [f"| {s.chapter} | {s.name} | | skipped by --quick | |" for s in skipped]
    results_meta.write_text(path + ".md", "\n".join(md) + "\n")
    return rec


def self_test():
    """The --resume bookkeeping on a temporary record: a sitting cut short (one step failed) is
    recorded unfinished; --resume keeps its finished steps, runs the failed one again and adds
    the second sitting's time; a finished run or another machine's is refused. Exit 0 or 1."""
    import tempfile
    problems = []

    def check(cond, what):
        if not cond:
            problems.append(what)

    steps_ = [Step("01", "a", ["true"]), Step("02", "b", ["false"]), Step("03", "c", ["true"])]

    def entry(s, ok, seconds):
        return {"chapter": s.chapter, "name": s.name, "seconds": seconds, "ok": ok, "commit": "c1", "commands": s.full}

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "reproduce_cpu")
        empty = {"steps": [], "sittings": [], "prepare": []}
        write_record(path, "full", "", empty, {"commit": "c1", "date": "d1", "seconds": 30.0}, [],
                     [entry(steps_[0], True, 10.0), entry(steps_[1], False, 5.0)], [], False)
        d = resumable(path + ".json", "full")
        check(not d["complete"] and d["failed"] == ["b"], "a sitting cut short is recorded unfinished, its failure named")
        todo = [s.name for s in steps_to_run(steps_, d)]
        check(todo == ["b", "c"], f"--resume runs the failed and the missing steps, got {todo}")
        write_record(path, "full", "", d, {"commit": "c2", "date": "d2", "seconds": 40.0}, [],
                     [entry(steps_[1], True, 6.0), entry(steps_[2], True, 7.0)], [], True)
        with open(path + ".json") as f:
            e = json.load(f)
        check(e["complete"] and not e["failed"], "the second sitting finishes the run")
        check([x["name"] for x in e["steps"]] == ["a", "b", "c"], "each step once, in order")
        check(e["seconds"] == 70.0 and e["benchmark_seconds"] == 23.0,
              f"the sittings' times add up (70 s, steps 23 s), got {e['seconds']}, {e['benchmark_seconds']}")
        check([x["commit"] for x in e["sittings"]] == ["c1", "c2"], "each sitting keeps its commit")
        for bad, why in ((dict(e), "a finished run"), (dict(e, complete=False, mode="quick"), "a quick run"),
                         (dict(e, complete=False, provenance=dict(e["provenance"], machine={"cpu": "elsewhere"})),
                          "another machine's run")):
            with open(path + ".json", "w") as f:
                json.dump(bad, f)
            try:
                resumable(path + ".json", "full")
                problems.append(f"--resume took {why}")
            except SystemExit:
                pass
    stage_self_test(check)
    for p in problems:
        print(f"reproduce --self-test: FAIL: {p}", file=sys.stderr)
    print(f"reproduce --self-test: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def stage_self_test(check):
    """Stage on a temporary results directory: two sittings of machine B while A's run is published."""
    import tempfile

    def put(path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def get(path):
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return None

    with tempfile.TemporaryDirectory() as res:
        put(os.path.join(res, "reproduce_cpu.json"), json.dumps({"provenance": {"machine": {"cpu": "A"}},
                                                                 "complete": False}))
        put(os.path.join(res, "01.json"), "A01")
        put(os.path.join(res, "sub", "02.png"), "A02")
        check(needs_stage(os.path.join(res, "reproduce_cpu.json"), "B"), "another machine's published run is staged")
        check(not needs_stage(os.path.join(res, "reproduce_cpu.json"), "A"), "the owner's own run is not staged")
        check(machine_slug("Intel(R) Xeon(R) Processor") == "intel-r-xeon-r-processor", "the machine's directory name")
        st = Stage(res, "b")
        st.begin()
        put(os.path.join(res, "01.json"), "B01")           # step 1 finishes
        put(os.path.join(res, "new.json"), "Bnew")
        st.keep()
        put(os.path.join(res, "sub", "02.png"), "junk")    # step 2 fails half-way
        st.reset()
        check(get(os.path.join(res, "sub", "02.png")) == "A02", "a failed step's leftovers are dropped")
        check(get(os.path.join(res, "01.json")) == "B01", "a finished step's results stay for the next steps")
        st.restore()                                       # the sitting ends unfinished
        check(get(os.path.join(res, "01.json")) == "A01" and get(os.path.join(res, "new.json")) is None,
              "an unfinished sitting leaves the published files as they were")
        check(get(os.path.join(st.files, "01.json")) == "B01" and get(os.path.join(st.files, "new.json")) == "Bnew"
              and get(os.path.join(st.files, "sub", "02.png")) is None, "the finished step's files are staged")
        st2 = Stage(res, "b")                              # --resume: the second sitting
        st2.begin()
        check(get(os.path.join(res, "01.json")) == "B01", "--resume lays the staged files over the published ones")
        put(os.path.join(res, "sub", "02.png"), "B02")
        st2.keep()
        put(os.path.join(st2.dir, "reproduce_cpu.json"), json.dumps({"provenance": {"machine": {"cpu": "B"}},
                                                                     "complete": True}))
        put(os.path.join(st2.dir, "reproduce_cpu.md"), "# B")
        st2.publish(os.path.join(res, "reproduce_cpu"))
        check([get(os.path.join(res, n)) for n in ("01.json", "new.json", os.path.join("sub", "02.png"))]
              == ["B01", "Bnew", "B02"], "a whole run's files are all published")
        check(not needs_stage(os.path.join(res, "reproduce_cpu.json"), "B") and not os.path.exists(
            os.path.join(res, RUNS)), "the published record is B's and the stage is gone")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, shorter sweeps (below the rule)")
    ap.add_argument("--chapter", action="append", default=[], help="01 .. 09 or engine; repeatable")
    ap.add_argument("--list", action="store_true", help="print the steps and their commands, run nothing")
    ap.add_argument("--dry-run", action="store_true", help="the same as --list")
    ap.add_argument("--check", action="store_true",
                    help="run nothing; exit 1 if a step names a script that is not in the tree or a program "
                         "build/bin lacks (the test suite's check that the plan still matches the code)")
    ap.add_argument("--self-test", action="store_true", help="check the --resume bookkeeping on a temporary record")
    ap.add_argument("--bin-dir", help="with --check: where the programs are built (default build/bin)")
    ap.add_argument("--keep-going", action="store_true", help="run the remaining steps after a failure")
    ap.add_argument("--resume", action="store_true",
                    help="go on with this machine's unfinished whole run (bench/results/reproduce_cpu*.json): "
                         "run only the steps it has not finished")
    ap.add_argument("--stop-after", type=float, metavar="MIN",
                    help="start no step that would end more than MIN minutes after the start (by this machine's "
                         "recorded step times, else the built-in estimates, lengthened when this sitting runs slower); the run "
                         "stays unfinished, to go on with --resume")
    ap.add_argument("--no-render", action="store_true", help="do not re-render the lessons and the README")
    ap.add_argument("--no-build", action="store_true", help="skip cmake --build build and the llama.cpp tools")
    ap.add_argument("--allow-dirty", action="store_true",
                    help="run with uncommitted code (the results then say '-dirty'); for developing a step")
    # internal: a results Markdown file from a program's stdout
    ap.add_argument("--stdout-md", help=argparse.SUPPRESS)
    ap.add_argument("--title", help=argparse.SUPPRESS)
    ap.add_argument("--command", help=argparse.SUPPRESS)
    ap.add_argument("--stdout", help=argparse.SUPPRESS)
    ap.add_argument("--json-provenance", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.stdout_md:
        return stdout_md_main(a)
    if a.self_test:
        return self_test()
    os.chdir(ROOT)
    chapters = [chapter_key(c) for arg in a.chapter for c in arg.split(",")]
    if a.resume and chapters:
        raise SystemExit("reproduce: --resume goes on with a run of every chapter; it takes no --chapter")
    plan = [s for s in steps() if not chapters or s.chapter in chapters]
    skipped = [s for s in plan if a.quick and s.quick is None]
    plan = [s for s in plan if not (a.quick and s.quick is None)]
    mode = "quick" if a.quick else "full"
    if a.check:
        return check_plan(steps(), a.bin_dir or os.path.join(ROOT, B))
    if a.list or a.dry_run:
        for s in plan:
            print(f"[{s.chapter}] {s.name}")
            for c in (s.quick if a.quick else s.full):
                print(f"    {c}")
        for s in skipped:
            print(f"[{s.chapter}] {s.name}: skipped by --quick (the committed results stay)")
        return 0

    commit = results_meta.git_commit()
    if commit.endswith("-dirty") and not a.allow_dirty:
        print("reproduce: the code differs from HEAD (git status); commit it first, so that every results file "
              "names the commit that ran (or pass --allow-dirty while developing a step)", file=sys.stderr)
        return 2
    os.environ["LIO_COMMIT"] = commit  # the record too names the commit the sitting started at, not a later HEAD
    env = dict(os.environ)
    os.makedirs(os.path.join(ROOT, SCRATCH), exist_ok=True)
    t0 = time.time()
    prep = []
    if not a.no_build:
        for cmd in (["cmake", "--build", "build"],
                    ["bash", "bench/batched/build_llama_tools.sh", "--speculative", "--perplexity", "--quantize",
                     "--server"] if any(s.llama for s in plan) else None,
                    # ik_llama.cpp, the second CPU peer of cpu_decode/run.py and formats.py (issue 64)
                    ["bash", "bench/batched/build_llama_tools.sh", "--ik"] if any(s.llama for s in plan) else None):
            if cmd is None:
                continue
            print(f"reproduce: {' '.join(cmd)}", flush=True)
            t = time.time()
            if subprocess.run(cmd, env=env).returncode != 0:
                print(f"reproduce: '{' '.join(cmd)}' failed", file=sys.stderr)
                return 1
            prep.append({"command": " ".join(cmd), "seconds": round(time.time() - t, 1)})
    cpu = results_meta.machine().get("cpu")
    published = os.path.join(R, "reproduce_cpu_quick" if a.quick else "reproduce_cpu")
    stage = None
    if not a.quick and not chapters and needs_stage(published + ".json", cpu):
        stage = Stage(os.path.join(ROOT, R), machine_slug(cpu))
    record_path = os.path.join(stage.dir, "reproduce_cpu") if stage else published
    known = recorded_seconds(a.quick, record_path + ".json")
    note = ("bench/reproduce.sh --quick: fewer repeats and shorter sweeps than the course's rule "
            "(5 interleaved repeats); for seeing the effects, not for comparing engines")
    earlier = {"steps": [], "sittings": [], "prepare": []}
    if stage:
        if not a.resume and os.path.isdir(stage.dir):
            import shutil
            shutil.rmtree(stage.dir)  # a new run: this machine's earlier staged sittings go
        print(f"reproduce: {published}.json holds another machine's run, so this machine's sittings are staged in "
              f"{os.path.relpath(stage.dir, ROOT)}/ and published when the run is whole; bench/results is put back "
              "as it was when a sitting ends unfinished", flush=True)
    if a.resume:
        earlier = resumable(record_path + ".json", mode)
        plan = steps_to_run(plan, earlier)
        print(f"reproduce: resuming the {mode} run of {earlier['provenance']['date']}: "
              f"{sum(d['ok'] for d in earlier['steps'])} steps done, {len(plan)} to run", flush=True)
    est = [known.get(s.name, s.est_quick if a.quick else s.est_full) for s in plan]
    done, failed = [], []
    sitting = {"commit": commit, "date": results_meta.provenance()["date"], "seconds": 0.0}
    last = {"complete": False}  # the record as last written: complete when every sitting's steps finished

    def record():
        # The run's timing after every step (for the README and the next run's estimates), so a
        # run cut short can go on with --resume. Only a run of every chapter is recorded.
        if chapters:
            return
        sitting["seconds"] = round(time.time() - t0, 1)
        last.update(write_record(record_path, mode, note, earlier, sitting, prep, done, skipped,
                                 len(plan) == len(done)))

    def terminated(signum, _frame):  # kill: the finally below still puts bench/results back
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    whole = False
    try:
        if stage:
            stage.begin()
        for i, s in enumerate(plan):
            elapsed = time.time() - t0
            # How this sitting runs against the estimates, from the steps that finished: a failed
            # step stops early and would make the steps ahead look short.
            spent_est = sum(e for e, d in zip(est, done) if d["ok"])
            spent = sum(d["seconds"] for d in done if d["ok"])
            scale = spent / spent_est if spent_est > 0 else 1.0
            left = sum(est[i:]) * max(scale, 0.25)
            this = est[i] * max(scale, 1.0)  # --stop-after: never count on a step running faster than estimated
            if a.stop_after is not None and elapsed + this > a.stop_after * 60:
                print(f"\nreproduce: --stop-after {a.stop_after:g}: {s.chapter} {s.name} (about "
                      f"{fmt_s(this)}) would end past it; stopping after "
                      f"{fmt_s(elapsed)} with {len(plan) - i} steps left: go on with --resume", flush=True)
                break
            print(f"\n[{i + 1}/{len(plan)}] {s.chapter} {s.name} — elapsed {fmt_s(elapsed)}, about {fmt_s(left)} left",
                  flush=True)
            t = time.time()
            ok = True
            for c in (s.quick if a.quick else s.full):
                print(f"  $ {c}", flush=True)
                if subprocess.run(["bash", "-c", "set -o pipefail; " + c], env=env).returncode != 0:
                    ok = False
                    break
            if ok and a.quick:
                mark_below_rule(s.outputs, note)
            if stage:
                stage.keep() if ok else stage.reset()
            done.append({"chapter": s.chapter, "name": s.name, "seconds": round(time.time() - t, 1), "ok": ok,
                         "commit": commit, "commands": s.quick if a.quick else s.full})
            if not ok:
                failed.append(s.name)
                print(f"reproduce: step failed: {s.chapter} {s.name}", file=sys.stderr)
            record()
            if not ok and not a.keep_going:
                break
        whole = last["complete"]
    finally:
        if stage and whole:
            stage.publish(os.path.join(ROOT, published))
            print(f"reproduce: the run is whole: its results and record are published in {R}/", flush=True)
        elif stage:
            stage.restore()
            print(f"reproduce: the run is unfinished: this sitting's results are staged in "
                  f"{os.path.relpath(stage.dir, ROOT)}/ (commit them; go on with --resume on this machine) and "
                  f"{R}/ is as it was", flush=True)
    total = time.time() - t0
    if stage and not whole:
        print("reproduce: not re-rendering the lessons: the published results did not change")
    elif not a.no_render:
        print(f"\nreproduce: {PY} scripts/render_docs.py", flush=True)
        if subprocess.run([PY, "scripts/render_docs.py"], env=env).returncode != 0:
            failed.append("render_docs")
    print(f"\nreproduce: {mode} run done in {fmt_s(total)}; {len(done) - len(failed)} of {len(plan)} steps ran"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
