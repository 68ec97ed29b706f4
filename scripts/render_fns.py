"""The functions the lessons' render markers call (scripts/render_docs.py): the helpers every
marker may use, and the named functions that compute what a marker's one-line expression used to
(a list comprehension, a lambda or a long arithmetic of a results file), each checked by
scripts/test_render_fns.py.

Arguments are the marker's names: results files loaded by render_docs (JSON objects whose keys
also read as attributes, render_docs.Obj; CSV files as lists of such rows) and the values of
earlier `let` lines. Errors: a missing key raises AttributeError / KeyError, find() a
LookupError naming the match; render_docs reports either with the marker's file and line.
"""

import functools
import statistics


def find(seq, **match):
    """The one element of `seq` (dicts) whose keys have the values `match`; LookupError if none or several."""
    hits = where(seq, **match)
    if len(hits) != 1:
        raise LookupError(f"find({match}): {len(hits)} matches, expected 1")
    return hits[0]


def where(seq, **match):
    """Every element of `seq` (dicts) whose keys have the values `match`, in order."""
    return [x for x in seq if all(x.get(k) == v for k, v in match.items())]


def mib(n_bytes):
    """n_bytes / 2**20."""
    return n_bytes / 2**20


def spread(xs):
    """(min, max) of the numbers xs."""
    return (min(xs), max(xs))


def fmt(value, spec=""):
    """format(value, spec) ('.2f', ',.0f', '.1%'), or '-' for None: the template filter `fmt`."""
    return "-" if value is None else format(value, spec)


median = statistics.median

# Names every marker sees besides its sources and lets: these helpers, the Python built-ins the
# markers have always had, and the named functions below.
_BUILTIN_NAMES = "abs all any bool dict enumerate float int len list max min range round sorted str sum tuple zip"
BUILTINS = {
    name: __builtins__[name] if isinstance(__builtins__, dict) else getattr(__builtins__, name)
    for name in _BUILTIN_NAMES.split()
}
HELPERS = {
    "find": find,
    "where": where,
    "mib": mib,
    "median": median,
    "spread": spread,
    "fmt": fmt,
    "partial": functools.partial,
    **BUILTINS,
}


def names():
    """Every name a marker's expression may call: HELPERS and this module's named functions."""
    return {
        **{
            k: v
            for k, v in globals().items()
            if callable(v)
            and not k.startswith("_")
            and k not in ("names",)
            and getattr(v, "__module__", None) == __name__
        },
        **HELPERS,
    }


# ---------------------------------------------------------------------------------------------
# The lessons' named functions (one per expression too long or too Pythonic for a template).


def readme_TT(ec, cache, warm):
    """README.md, `let TT`. A function of cache, warm; the lesson binds ec with partial()."""
    return find(ec.shared_system_prompt, prefix_cache=cache, warm=warm).median_ttft_ms


def readme_machine_name(d):
    """README.md, `let M`. A function of d; the lesson names it as it is."""
    return (
        (d.provenance.machine if str(d.provenance.machine) == d.provenance.machine else d.provenance.machine.cpu)
        .split(" |")[0]
        .replace("host ", "")
    )


def readme_llm_inference_optimization_rows(M, kvj, cdj, ec, CB, tc, k7, sv, Q8, kv, TT):
    """README.md, `let rows`."""
    return [
        dict(
            ch="01",
            what="KV cache: recompute / cached time to generate {} tokens".format(kv[-1].gen_tokens),
            fig="{:.1f}x".format(kv[-1].recompute_ms_median / kv[-1].cached_ms_median),
            m=M(kvj),
        ),
        dict(
            ch="03",
            what="batch-1 decode, Q4_1 with the default int8 activations, LIO / llama.cpp (llama-bench)",
            fig="{:.2f}x ({:.0f} / {:.0f} tok/s)".format(Q8.decode_ratio, Q8.lio_decode_tps, Q8.llama_decode_tps),
            m=M(cdj),
        ),
        dict(
            ch="04",
            what="prefix caching: time to first token without / with a warm radix cache",
            fig="{:.1f}x".format(TT("none", True) / TT("radix", True)),
            m=M(ec),
        ),
        dict(
            ch="05",
            what="continuous / static batching, output throughput, all requests at once",
            fig="{:.2f}x".format(CB),
            m=M(tc),
        ),
        dict(
            ch="07",
            what="FlashAttention / naive attention, causal prefill at N = {:,}".format(k7.prefill[-1].n),
            fig="{:.1f}x".format(k7.prefill[-1].speedup),
            m=M(k7),
        ),
        dict(
            ch="09",
            what="lio-server / llama-server output tok/s, by request rate",
            fig="{:.2f}-{:.2f}x".format(
                min(r.output_throughput for r in sv.ratios), max(r.output_throughput for r in sv.ratios)
            ),
            m=M(sv),
        ),
    ]


def readme_quick_start_rows(f):
    """README.md, `let rows`."""
    return [
        dict(cmd="`scripts/run.sh`", until="the answer is printed", s=f.run_sh_seconds),
        dict(
            cmd="`CI=true bash .ci/run`",
            until="every test passed (stub check, ASan, fuzzing and TSan included)",
            s=f.ci_seconds,
        ),
    ]


def readme_scaled_same_measurement(f):
    """README.md, a {...} field."""
    return min(r.seconds for r in f.ci_reruns) / 60


def readme_every_wait_scaled_same_measurement(f):
    """README.md, a {...} field."""
    return max(r.seconds for r in f.ci_reruns) / 60


def readme_n_gram_lookup(s):
    """README.md, a {...} field."""
    return max(r.speedup for r in s.batch1.runs if r.method == "ngram" and r.prompt == "grounded")


def readme_llama_cpp_s(p):
    """README.md, a {...} field."""
    return min(r.lio_over_llama for r in p.ratios if r.method != "plain")


def readme_once_against_llama_cpp_s(p):
    """README.md, a {...} field."""
    return max(r.lio_over_llama for r in p.ratios if r.method != "plain")


def readme_speed_whole_model(p):
    """README.md, a {...} field."""
    return find(p.ratios, context=p.contexts[-1], metric="prefill", pair="LIO flash / llama.cpp no flash").ratio


def readme_mib_flash_speed_whole_model(p):
    """README.md, a {...} field."""
    return (
        " (the faster llama.cpp setting in prefill on this CPU)"
        if find(p.ratios, context=p.contexts[-1], metric="prefill", pair="llama.cpp flash / no flash").max < 1
        else ""
    )


def readme_exercises_done_cpu(sv):
    """README.md, a {...} field."""
    return min(r.output_throughput for r in sv.ratios)


def readme_compatible_server_exercises_done_cpu(sv):
    """README.md, a {...} field."""
    return max(r.output_throughput for r in sv.ratios)


def readme_from_fresh_clone(f):
    """README.md, a {...} field."""
    return ", ".join(p.phase + " " + str(p.seconds) + " s" for p in f.grade.phases)


def readme_SIT(S):
    """README.md, `let SIT`."""
    return (
        "in one sitting" if S == 1 else "in {} sittings, one after another with --resume, on the same machine".format(S)
    )


def readme_STATE(f):
    """README.md, `let STATE`."""
    return (
        "all {} steps".format(len(f.steps))
        if f.complete
        else "{} steps done; the steps it has not reached keep their earlier results until `bench/reproduce.sh --resume` runs them (each results file names its machine)".format(
            len(f.steps)
        )
    )


def readme_COMMITS(f):
    """README.md, `let COMMITS`."""
    return ", ".join(dict.fromkeys(x.commit for x in f.sittings))


def readme_NC(f):
    """README.md, `let NC`."""
    return len(dict.fromkeys(x.commit for x in f.sittings))


def machine_name(cd):
    """docs/01_kv_cache.md, a {...} field. Also docs/02_gqa_mla.md, docs/03_quantization.md, docs/04_paged_attention.md, docs/05_continuous_batching.md."""
    return (
        (cd.provenance.machine if str(cd.provenance.machine) == cd.provenance.machine else cd.provenance.machine.cpu)
        .split(" |")[0]
        .replace("host ", "")
        .split(",")[0]
    )


def ch01_our_q4_rates(Rp, k32):
    """docs/01_kv_cache.md, a {...} field."""
    return (
        ": R_p is the 512-token prompt rate, and these prefills are 32-63 tokens long"
        if k32.recompute_ms_median / 1000 < (32 * 32 + 32 * 31 / 2) / Rp
        else ": longer prefills also pay more for attention"
    )


def ch01_every_mode_length(kv):
    """docs/01_kv_cache.md, a {...} field. Also bench/results/README.md."""
    return "yes" if all(r.identical for r in kv) else "NO"


def ch01_DT(fam, n):
    """docs/01_kv_cache.md, `let DT`. A function of n; the lesson binds fam with partial()."""
    return 1000 / find(fam.decode, model="SmolLM2-135M (llama, GQA)", context=n).decode_tok_s


def ch02_tokens_smollm2_keeps(f):
    """docs/02_gqa_mla.md, a {...} field."""
    return (
        find(f.decode, model="SmolLM2-135M (llama, GQA)", context=8160).decode_tok_s
        / find(f.decode, model="SmolLM2-135M (llama, GQA)", context=1024).decode_tok_s
    )


def ch02_keeps_speed_gemma(f):
    """docs/02_gqa_mla.md, a {...} field."""
    return (
        find(f.decode, model="Gemma 3 270M (gemma3, MQA + window)", context=8160).decode_tok_s
        / find(f.decode, model="Gemma 3 270M (gemma3, MQA + window)", context=1024).decode_tok_s
    )


def ch02_G(g, name):
    """docs/02_gqa_mla.md, `let G`. A function of name; the lesson binds g with partial(). Also bench/results/README.md."""
    return find(g.variants, variant=name)


def ch02_T(G, name, b, c):
    """docs/02_gqa_mla.md, `let T`. A function of name, b, c; the lesson binds G with partial()."""
    return find(G(name).decode, batch=b, context=c).decode_tokens_per_s


def ch02_kl(x):
    """docs/02_gqa_mla.md, `let kl`. A function of x; the lesson names it as it is."""
    return "%.2f" % x if x >= 0.1 else "%.2g" % x if x > 0 else "0"


def ch02_ppl(x):
    """docs/02_gqa_mla.md, `let ppl`. A function of x; the lesson names it as it is."""
    return "{:,.0f}".format(x) if x >= 1000 else "%.3f" % x


def ch02_gqa_vs_mqa_rows(G):
    """docs/02_gqa_mla.md, `let rows`."""
    return [
        ("MHA (repeated heads)", G("mha")),
        ("GQA (as shipped)", G("gqa")),
        ("MQA (mean-pooled, no uptraining)", G("mqa")),
    ]


def ch02_D(ml, c):
    """docs/02_gqa_mla.md, `let D`. A function of c; the lesson binds ml with partial()."""
    return find(ml.stack.decode, context=c)


def ch02_RK(ml, r):
    """docs/02_gqa_mla.md, `let RK`. A function of r; the lesson binds ml with partial()."""
    return find(ml.conversion.ranks, rank=r)


def ch02_full(ml):
    """docs/02_gqa_mla.md, `let full`."""
    return max(r.rank for r in ml.conversion.ranks)


def ch02_best(ml):
    """docs/02_gqa_mla.md, `let best`."""
    return min(r.rank for r in ml.conversion.ranks if r.pca.mean_kl < 0.05)


def ch02_bold(text, on):
    """docs/02_gqa_mla.md, `let bold`. A function of text, on; the lesson names it as it is. Also docs/04_paged_attention.md."""
    return "**%s**" % text if on else text


def ch02_kv_bytes_gqa_s(bold, rank, best, kv_bytes_per_token_f16, ml):
    """docs/02_gqa_mla.md, a {...} field (column "KV bytes of GQA's")."""
    return bold("%.0f%%" % (100 * kv_bytes_per_token_f16 / ml.conversion.gqa_kv_bytes_per_token_f16), rank == best)


def ch03_V(doc, name):
    """docs/03_quantization.md, `let V`. A function of doc, name; the lesson names it as it is. Also bench/results/03_quantization_tables.md, bench/results/README.md."""
    return find(doc.variants, variant=name)


def ch03_P(doc, name):
    """docs/03_quantization.md, `let P`. A function of doc, name; the lesson names it as it is. Also bench/results/03_quantization_tables.md."""
    return find(doc.rows, model=name)


def ch03_GRIDS():
    """docs/03_quantization.md, `let GRIDS`. Also bench/results/README.md."""
    return [
        ("INT4 g32 symmetric (Q4_0)", "q4_0", "gptq:4g32", "awq:4g32"),
        ("INT4 g128 symmetric", "rtn:4g128", "gptq:4g128", "awq:4g128"),
        ("INT3 g128 symmetric", "rtn:3g128", "gptq:3g128", "awq:3g128"),
        ("INT3 g128 asymmetric", "rtn:3ag128", "gptq:3ag128", "awq:3ag128"),
    ]


def ch03_GPTQ_WINS(GRIDS, V, m):
    """docs/03_quantization.md, `let GPTQ_WINS`. Also bench/results/README.md."""
    return sum(1 for g in GRIDS if V(m, g[2]).perplexity < V(m, g[3]).perplexity)


def ch03_B1(V, allv, GRIDS):
    """docs/03_quantization.md, `let B1`."""
    return [V(allv, n).decode_tokens_per_s_b1 for g in GRIDS[:3] for n in g[1:]]


def ch03_same_tensors_differ(V, q):
    """docs/03_quantization.md, a {...} field."""
    return abs(V(q, "q4_1").decode_tokens_per_s_b1 / V(q, "SmolLM2-135M-Instruct.Q4_1.gguf").decode_tokens_per_s_b1 - 1)


def ch03_cpp_s_blocks_rows(F32):
    """docs/03_quantization.md, `let rows`."""
    return [
        ("F32 copy (= Q4_1 weights)", "32", F32),
        ("Q4_1 as shipped", "5.0 (Q8_0 embedding)", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ("RTN Q8_0", "8.5", "SmolLM2-135M-Instruct.rtn-Q8_0.gguf"),
        ("RTN Q4_0", "4.5", "SmolLM2-135M-Instruct.rtn-Q4_0.gguf"),
    ]


def ch03_measured_rows(GRIDS, V, m):
    """docs/03_quantization.md, `let rows`."""
    return [(g[0], V(m, g[1]), V(m, g[2]), V(m, g[3])) for g in GRIDS]


def ch03_B(v, other):
    """docs/03_quantization.md, `let B`. A function of v, other; the lesson names it as it is."""
    return ("**%.2f**" if v.perplexity < other.perplexity else "%.2f") % v.perplexity


def ch03_bits_standard_error(m):
    """docs/03_quantization.md, a {...} field."""
    return min(v.perplexity_uncertainty for v in m.variants if v.grid.startswith("int4"))


def ch03_gets_coarser_bits_standard_error(m):
    """docs/03_quantization.md, a {...} field."""
    return max(v.perplexity_uncertainty for v in m.variants if v.grid.startswith("int4"))


def ch03_activations_w8a8_smoothquant_rows():
    """docs/03_quantization.md, `let rows`."""
    return [
        ("q8_0", "INT8, scale per 32", "f32"),
        ("q8_0+a8b", "INT8, scale per 32", "int8, scale per 32 (llama.cpp's CPU rule)"),
        ("q8_0+a8", "INT8, scale per 32", "int8, scale per token"),
        ("w8a16", "INT8, scale per channel", "f32"),
        ("w8a8", "INT8, scale per channel", "int8, scale per token"),
        ("smoothquant:8gch+a8", "INT8, scale per channel", "int8, scale per token, SmoothQuant alpha 0.8"),
    ]


def ch03_calls_h200_took(g):
    """docs/03_quantization.md, a {...} field. Also docs/cuda_backend.md."""
    return find(g.kernel_breakdown, op="gemv").us_per_token / find(g.kernel_breakdown, op="gemv").calls_per_token


def ch04_S(mem, trace, scheme):
    """docs/04_paged_attention.md, `let S`. A function of trace, scheme; the lesson binds mem with partial(). Also bench/results/README.md."""
    return find(mem[trace].rows, scheme=scheme)


def ch04_TT(e, cache, warm):
    """docs/04_paged_attention.md, `let TT`. A function of e, cache, warm; the lesson names it as it is. Also bench/results/README.md."""
    return find(e.shared_system_prompt, prefix_cache=cache, warm=warm).median_ttft_ms


def ch04_SPEEDUPS(TT, e):
    """docs/04_paged_attention.md, `let SPEEDUPS`. A function of e; the lesson binds TT with partial(). Also bench/results/README.md."""
    return [TT(e, "none", w) / TT(e, c, w) for c in ("hash", "radix") for w in (False, True)]


def ch04_MT(ec, cache):
    """docs/04_paged_attention.md, `let MT`. A function of cache; the lesson binds ec with partial()."""
    return find(ec.multi_turn, prefix_cache=cache)


def ch04_LAYOUT(rows, n, bs):
    """docs/04_paged_attention.md, `let LAYOUT`. A function of rows, n, bs; the lesson names it as it is."""
    return [v for v in find(rows, n_ctx=n).variants if v.get("block_size") == bs][0].ratio_vs_one_block


def ch04_CPU_BS(LAYOUT, ic, bs):
    """docs/04_paged_attention.md, `let CPU_BS`. A function of bs; the lesson binds LAYOUT, ic with partial()."""
    return [LAYOUT(ic.rows, r.n_ctx, bs) for r in ic.rows]


def ch04_GPU_VS_CONTIG(ih):
    """docs/04_paged_attention.md, `let GPU_VS_CONTIG`."""
    return [1 / [v for v in r.variants if v.get("block_size") == 16][0].ratio_vs_contiguous for r in ih.batch_rows]


def ch04_buys_what_costs_rows():
    """docs/04_paged_attention.md, `let rows`."""
    return [
        ("static, max length 2048", "static max"),
        ("static, power of two", "static pow2"),
        ("static, oracle", "static oracle"),
        ("paged, block 16", "paged bs=16"),
        ("paged, block 256", "paged bs=256"),
    ]


def ch04_waste_used(b, row, S):
    """docs/04_paged_attention.md, a {...} field (column 'waste % of used')."""
    return b(
        ("%.1f" if S("ShareGPT-like", row[1]).waste_of_used_pct < 10 else "%.0f")
        % S("ShareGPT-like", row[1]).waste_of_used_pct,
        row[1] == "paged bs=16",
    )


def ch04_RUNNING(PG, S, scheme):
    """docs/04_paged_attention.md, `let RUNNING`. A function of scheme; the lesson binds PG, S with partial(). Also bench/results/README.md."""
    return PG.mean_running / S("ShareGPT-like", scheme).mean_running


def ch04_LESS_WASTE(PG, S, scheme):
    """docs/04_paged_attention.md, `let LESS_WASTE`. A function of scheme; the lesson binds PG, S with partial(). Also bench/results/README.md."""
    return 1 - PG.waste_of_used_pct / S("ShareGPT-like", scheme).waste_of_used_pct


def ch05_RUN(t, variant, rate):
    """docs/05_continuous_batching.md, `let RUN`. A function of t, variant, rate; the lesson names it as it is. Also bench/results/README.md."""
    return find(t.runs, variant=variant, rate=rate)


def ch05_RATIO(t, rate):
    """docs/05_continuous_batching.md, `let RATIO`. A function of t, rate; the lesson names it as it is. Also bench/results/README.md."""
    return find(t.continuous_over_static, rate=rate)


def ch05_REQ(abc, policy, name):
    """docs/05_continuous_batching.md, `let REQ`. A function of abc, policy, name; the lesson names it as it is."""
    return find(abc[policy].requests, name=name)


def ch05_run_benchmark_rows():
    """docs/05_continuous_batching.md, `let rows`."""
    return [
        ("static (HF generate: padding)", "static"),
        ("static, finished rows leave", "static_no_padding"),
        ("continuous, chunked", "continuous"),
        ("continuous, not chunked", "continuous_no_chunk"),
        ("continuous, 12-block pool, recompute", "small_kv_recompute"),
        ("continuous, 12-block pool, swap", "small_kv_swap"),
    ]


def ch05_R(RUN, tc, v):
    """docs/05_continuous_batching.md, `let R`. A function of v; the lesson binds RUN, tc with partial()."""
    return RUN(tc, v, "inf")


def ch05_output_tok_s(row, RATIO, tc):
    """docs/05_continuous_batching.md, a {...} field (column 'output tok/s')."""
    return " (**%.2fx** static)" % RATIO(tc, "inf").continuous_over_static_throughput if row[1] == "continuous" else ""


def ch05_C(RUN, tc, variant, rate):
    """docs/05_continuous_batching.md, `let C`. A function of variant, rate; the lesson binds RUN, tc with partial()."""
    return RUN(tc, variant, rate)


def ch05_exercise_production(ac, RATIO, tc):
    """docs/05_continuous_batching.md, a {...} field."""
    return min(
        ac.summary.throughput_ratio,
        RATIO(tc, "10").continuous_over_static_throughput,
        RATIO(tc, "inf").continuous_over_static_throughput,
    )


def ch05_best_throughput_ratio(ac, RATIO, tc):
    """docs/05_continuous_batching.md, a {...} field."""
    return max(
        ac.summary.throughput_ratio,
        RATIO(tc, "10").continuous_over_static_throughput,
        RATIO(tc, "inf").continuous_over_static_throughput,
    )


def ch05_smollm2_decode_step(h2):
    """docs/05_continuous_batching.md, a {...} field. Also docs/cuda_backend.md."""
    return (
        1e6
        / find(h2.decode, variant="cuda auto").decode_tokens_per_s
        / find(h2.decode_step_launches, attention="flash").kernel_launches
    )


def ch06_table_from_formula(s):
    """docs/06_speculative.md, a {...} field. Also docs/07_flash_attention.md."""
    return s.provenance.machine.cpu if str(s.provenance.machine) != s.provenance.machine else s.provenance.machine


def ch06_run_benchmark_rows(s):
    """docs/06_speculative.md, `let rows`."""
    return [
        r
        for r in s.batch1.runs + [dict(x, method="draft (3-bit)") for x in s.batch1_q3.runs]
        if r["k"] in (1, 2, 4, 8) and "sweep" not in r
    ]


def ch06_tokens_all_k_rows(s):
    """docs/06_speculative.md, `let rows`."""
    return s.batch1.best_k + [dict(x, method="draft (3-bit)") for x in s.batch1_q3.best_k]


def ch06_gives(d):
    """docs/06_speculative.md, a {...} field."""
    return (
        "faster"
        if find(d.rows, engine="LIO").target_tok_s.median > find(d.rows, engine="llama.cpp").target_tok_s.median
        else "slower"
    )


def ch06_faster_or_slower_draft(d):
    """docs/06_speculative.md, a {...} field."""
    return (
        "faster"
        if find(d.rows, engine="LIO").draft_tok_s.median > find(d.rows, engine="llama.cpp").draft_tok_s.median
        else "slower"
    )


def ch06_draft_step_costs(s, d):
    """docs/06_speculative.md, a {...} field."""
    return (
        "more than"
        if s.batch1.costs.c_draft > find(d.rows, engine="LIO").c.max
        else "less than" if s.batch1.costs.c_draft < find(d.rows, engine="LIO").c.min else "about as much as"
    )


def ch06_early_exit_prediction_rows(s):
    """docs/06_speculative.md, `let rows`."""
    return [r for r in s.batch1.runs if "sweep" in r]


def ch06_where_loses_rows(s):
    """docs/06_speculative.md, `let rows`."""
    return [r for r in s.batch_sweep if r["method"] != "none"]


def ch06_row_computed_nothing_rows(s):
    """docs/06_speculative.md, `let rows`."""
    return [r for r in s.batch1.runs if r["method"] == "ngram" and r["k"] in (2, 4)]


def ch07_kernel_reaches_only(g):
    """docs/07_flash_attention.md, a {...} field."""
    return max(r.tflops_bf16 for r in g.flash_kernels.rows)


def ch07_bf16_wmma_kernel_reaches_only(g):
    """docs/07_flash_attention.md, a {...} field."""
    return 100 * max(r.tflops_bf16 for r in g.flash_kernels.rows) / g.bf16_matmul_tflops


def ch07_run_benchmark_rows(k):
    """docs/07_flash_attention.md, `let rows`."""
    return [dict(r, x=x) for r, x in zip(k.prefill, k.derived.prefill)]


def ch07_walked_one_thread_rows(k):
    """docs/07_flash_attention.md, `let rows`."""
    return [dict(r, x=x) for r, x in zip(k.decode, k.derived.decode)]


def ch08_seventy(p, tp):
    """docs/08_tensor_parallel.md, `let seventy`. A function of tp; the lesson binds p with partial(). Also bench/results/README.md."""
    return find(p.rows, model="Llama-3.1-70B AWQ-4bit", link="NVLink 3 (A100)", tp=tp, batch=1)


def ch08_R(n, w, a):
    """docs/08_tensor_parallel.md, `let R`. A function of w, a; the lesson binds n with partial()."""
    return find(n.rows, what=w, activations=a)


def ch08_machine_name(n):
    """docs/08_tensor_parallel.md, `let M`."""
    return (
        n.provenance.machine if str(n.provenance.machine) == n.provenance.machine else n.provenance.machine.cpu
    ).split(" |")[0]


def ch08_model_this_cpu_rows(k):
    """docs/08_tensor_parallel.md, `let rows`."""
    return [
        dict(c, suite=s, cfg=n, b=b, base=cfgs["tp1"], base2=cfgs["tp1_2t"])
        for s, bs in k.suites.items()
        for b, cfgs in bs.items()
        for n, c in cfgs.items()
    ]


def ch08_can_be_checked_rows(k):
    """docs/08_tensor_parallel.md, `let rows`."""
    return [
        dict(
            c.predicted,
            suite=s,
            cfg=n,
            b=b,
            ranks=c.world_size,
            ar_p=c.prefill.all_reduce_ms.median,
            ar_d=c.decode.all_reduce_ms.median,
        )
        for s, bs in k.suites.items()
        for b, cfgs in bs.items()
        for n, c in cfgs.items()
        if "predicted" in c
    ]


def ch08_latency_bound_decode(r8):
    """docs/08_tensor_parallel.md, a {...} field."""
    return (
        "under-predicts: the engine measures "
        + ("%.2f" % r8.tp2.predicted.decode_measured_over_predicted)
        + "x the model"
        if r8.tp2.predicted.decode_measured_over_predicted > 1
        else "holds (measured / model " + ("%.2f" % r8.tp2.predicted.decode_measured_over_predicted) + ")"
    )


def ch08_batch(k):
    """docs/08_tensor_parallel.md, a {...} field."""
    return k.suites.smollm2["8"].pp2_mb1.prefill.step_ms.median / k.suites.smollm2["8"].pp2.prefill.step_ms.median


def ch08_backend_kv_pool_rows(sm):
    """docs/08_tensor_parallel.md, `let rows`."""
    return [dict(r, cfg=n) for n in ("tp1", "tp3", "pp2") for r in sm[n].ranks]


def ch08_your_ring_n_rows(r8, sm):
    """docs/08_tensor_parallel.md, `let rows`."""
    return [dict(bytes=a.bytes, a=a, t=t) for a, t in zip(r8.tp2.all_reduce_sweep, sm.tp3.all_reduce_sweep)]


def ch08_choice_tp_group_rows(k):
    """docs/08_tensor_parallel.md, `let rows`."""
    return [dict(cfgs.tp3.lm_head, b=b) for b, cfgs in k.suites.smollm2.items()]


def ch08_base(p, r):
    """docs/08_tensor_parallel.md, `let base`. A function of r; the lesson binds p with partial()."""
    return where(p.rows, model=r.model, link=r.link, batch=1, fits=True)[0]


def ch08_tp_pays_projection_rows(p, base):
    """docs/08_tensor_parallel.md, `let rows`."""
    return [
        dict(
            r,
            bt=base(r).tp,
            sp=(base(r).step_ms / r.step_ms if r.fits else None),
            b64=find(p.rows, model=r.model, link=r.link, tp=r.tp, batch=64),
        )
        for r in p.rows
        if r.batch == 1
    ]


def ch09_RUN(sv, target, rate):
    """docs/09_server.md, `let RUN`. A function of target, rate; the lesson binds sv with partial(). Also bench/results/README.md."""
    return find(sv.runs, target=target, rate=rate)


def ch09_RAT(sv, rate):
    """docs/09_server.md, `let RAT`. A function of rate; the lesson binds sv with partial()."""
    return find(sv.ratios, rate=rate)


def ch09_OUT_RATIOS(sv):
    """docs/09_server.md, `let OUT_RATIOS`."""
    return [r.output_throughput for r in sv.ratios]


def ch09_s_batched_decode(bt):
    """docs/09_server.md, a {...} field."""
    return (
        find(bt, engine="lio", weights="Q4_1", concurrency=32).decode_tok_s
        / find(bt, engine="llama.cpp", weights="Q4_1", concurrency=32).decode_tok_s
    )


def ch09_itl_p99_shows(RUN, sv):
    """docs/09_server.md, a {...} field."""
    return min(RUN("llama", r).itl_p99_ms for r in sv.settings.request_rates) / 1000


def ch09_every_stream_itl_p99_shows(RUN, sv):
    """docs/09_server.md, a {...} field."""
    return max(RUN("llama", r).itl_p99_ms for r in sv.settings.request_rates) / 1000


def ch09_against(RUN, sv):
    """docs/09_server.md, a {...} field."""
    return min(RUN("lio", r).itl_p99_ms for r in sv.settings.request_rates) / 1000


def ch09_worst_itl_p99_s(RUN, sv):
    """docs/09_server.md, a {...} field."""
    return max(RUN("lio", r).itl_p99_ms for r in sv.settings.request_rates) / 1000


def ch09_goodput_ranges_over(sv):
    """docs/09_server.md, a {...} field."""
    return min(r.goodput for r in sv.runs)


def ch09_best_goodput(sv):
    """docs/09_server.md, a {...} field."""
    return max(r.goodput for r in sv.runs)


def ch09_shutdown_hour_traffic_rows(F):
    """docs/09_server.md, `let rows`."""
    return [
        dict(
            what="requests (of them malformed, answered 4xx)", v=f"{F.requests:,} ({F.requests_per_kind.malformed:,})"
        ),
        dict(
            what="sequences finished, dropped mid-stream by their client",
            v=f"{F.sequences_sent:,}, {F.sequences_cancelled:,}",
        ),
        dict(what="5xx responses, incomplete or inconsistent responses", v=f"{F.responses_5xx}, {F.failures}"),
        dict(
            what="pinned seeded requests that differed from their solo run",
            v=f"{F.pinned_mismatches} of {F.requests_per_kind.pinned:,}",
        ),
        dict(
            what="preemptions, prefix-cache hits, accepted draft tokens",
            v=f"{F.metrics_delta.preemptions:,}, {F.metrics_delta.prefix_hits:,}, {F.metrics_delta.accepted_drafts:,}",
        ),
        dict(what="RSS after warm-up, at the end (MiB)", v=f"{F.rss_mib.after_warmup:.0f}, {F.rss_mib.end:.0f}"),
        dict(what="RSS slope after warm-up (MiB per hour)", v=f"{F.rss_slope_mib_per_hour:+.1f}"),
        dict(what="open-fd slope after warm-up (per hour)", v=f"{F.fd_slope_per_hour:+.2f}"),
        dict(
            what="idle fds / threads before and after",
            v=f"{F.idle_fds[0]} / {F.idle_threads[0]} and {F.idle_fds[1]} / {F.idle_threads[1]}",
        ),
        dict(what="back to idle (KV cache empty) after the last request (s)", v=f"{F.idle_after_s:.2f}"),
        dict(what="exit code after SIGTERM", v=f"{F.server_exit_code}"),
    ]


def ch09_HOURS(TOKENS, tps):
    """docs/09_server.md, `let HOURS`. A function of tps; the lesson binds TOKENS with partial()."""
    return TOKENS / tps / 3600


def ch09_PER_1K(TOKENS, HOURS, tps):
    """docs/09_server.md, `let PER_1K`. A function of tps; the lesson binds TOKENS, HOURS with partial()."""
    return 3 * HOURS(tps) / (TOKENS / 1000)


def ch09_S(cl, key):
    """docs/09_server.md, `let S`. A function of key; the lesson binds cl with partial(). Also bench/results/README.md."""
    return find(cl.steps, key=key)


def ch09_MED(d, spec):
    """docs/09_server.md, `let MED`. A function of d, spec; the lesson names it as it is."""
    return "-" if d is None else ("{:" + spec + "}").format(d["median"])


def ch09_RANGE(d, spec):
    """docs/09_server.md, `let RANGE`. A function of d, spec; the lesson names it as it is."""
    return (
        "-"
        if d is None
        else ("{:" + spec + "} [{:" + spec + "}-{:" + spec + "}]").format(d["median"], d["min"], d["max"])
    )


def ch09_RATIO(d):
    """docs/09_server.md, `let RATIO`. A function of d; the lesson names it as it is."""
    return "" if d is None else "{:.2f}x ({:.2f}-{:.2f})".format(d["median"], d["min"], d["max"])


def ch09_WHAT(S, key):
    """docs/09_server.md, `let WHAT`. A function of key; the lesson binds S with partial()."""
    return (
        "did not run (" + str(S(key).reason) + ")"
        if not S(key).ran
        else (
            "gained"
            if S(key).vs_previous["min"] > 1
            else ("lost" if S(key).vs_previous["max"] < 1 else "tied, its per-repeat ratios straddling 1")
        )
    )


def ch09_STEP(WHAT, S, key):
    """docs/09_server.md, `let STEP`. A function of key; the lesson binds WHAT, S with partial()."""
    return WHAT(key) + (
        ""
        if not S(key).ran
        else ": {:.2f}x the previous step ({:.2f}-{:.2f} over repeats)".format(
            S(key).vs_previous["median"], S(key).vs_previous["min"], S(key).vs_previous["max"]
        )
    )


def ch09_predates_run_below(cl):
    """docs/09_server.md, a {...} field."""
    return (
        "**a smoke run** (`--quick`: fewer requests and tokens, two repeats) on a 2-core machine that other jobs were sharing, so its numbers are noise; rerun the script on a quiet machine for the chapter numbers."
        if cl.quick
        else "the full run."
    )


def cuda_backend_weights_own_time(g):
    """docs/cuda_backend.md, a {...} field."""
    return (
        100
        * find(g.decode, variant="cuda auto").weight_mib
        * 1048576
        / (g.copy_bandwidth_gbs * 1e9)
        * find(g.decode, variant="cuda auto").decode_tokens_per_s
    )


def cuda_backend_over_floats_takes(g):
    """docs/cuda_backend.md, a {...} field."""
    return find(g.kernel_breakdown, op="swiglu").us_per_token / find(g.kernel_breakdown, op="swiglu").calls_per_token


def cuda_backend_swiglu_over_floats_takes(g):
    """docs/cuda_backend.md, a {...} field."""
    return find(g.kernel_breakdown, op="rmsnorm").us_per_token / find(g.kernel_breakdown, op="rmsnorm").calls_per_token


def cuda_backend_rope_us_per_call(g):
    """docs/cuda_backend.md, a {...} field."""
    return find(g.kernel_breakdown, op="rope").us_per_token / find(g.kernel_breakdown, op="rope").calls_per_token


def cuda_backend_one_call(g):
    """docs/cuda_backend.md, a {...} field."""
    return sum(1 for s in g.steps if s.status == "passed")


def cuda_backend_gtest_total(g):
    """docs/cuda_backend.md, a {...} field."""
    return sum(t.tests for t in g.gtest)


def cuda_backend_gtest_failed(g):
    """docs/cuda_backend.md, a {...} field."""
    return sum(t.failed for t in g.gtest)


def engine_or_int8_activations_rows(kl):
    """docs/engine.md, `let rows`."""
    return [dict(name=k, **v) for k, v in kl.rows.items()]


def engine_int8_kl_verdict(kl):
    """docs/engine.md, a {...} field."""
    return (
        "a tie with llama.cpp, so int8 passes the rule"
        if kl.int8_over_llama_kl_p5_p95[0] <= 1 <= kl.int8_over_llama_kl_p5_p95[1]
        else (
            "below llama.cpp, so int8 passes the rule"
            if kl.int8_over_llama_kl_p5_p95[1] < 1
            else "above llama.cpp: int8 fails the rule"
        )
    )


def engine_greedy_text_rows(kl):
    """docs/engine.md, `let rows`."""
    return [dict(name=k, text=v) for k, v in kl.greedy.items()]


def quant_tables_RM(r, key):
    """bench/results/03_quantization_tables.md, `let RM`. A function of r, key; the lesson names it as it is."""
    return r[key].ratio.median if key in r else r.lio[key] / r.llama_cpp[key]


def quant_tables_RC(RM, r, key):
    """bench/results/03_quantization_tables.md, `let RC`. A function of r, key; the lesson binds RM with partial()."""
    return "{:.2f}x".format(RM(r, key)) + (
        (" [{:.2f}-{:.2f}]".format(r[key].ratio.min, r[key].ratio.max) + (" tie" if r[key].ratio.tie else ""))
        if key in r
        else ""
    )


def quant_tables_LL(r, key):
    """bench/results/03_quantization_tables.md, `let LL`. A function of r, key; the lesson names it as it is."""
    return r[key].llama_cpp.median if key in r else r.llama_cpp[key]


def quant_tables_OLD(d):
    """bench/results/03_quantization_tables.md, `let OLD`. A function of d; the lesson names it as it is."""
    return str(d.get("harness", "")).startswith("old")


def quant_tables_SPAN(d):
    """bench/results/03_quantization_tables.md, `let SPAN`. A function of d; the lesson names it as it is."""
    return "decode at context %d, prefill of prompt positions %d..%d" % (
        d.prompt_tokens,
        d.prompt_tokens,
        d.prompt_tokens + d.get("prefill_tokens", d.prompt_tokens),
    )


def quant_tables_PEER_NOTE(OLD, peer):
    """bench/results/03_quantization_tables.md, `let PEER_NOTE`."""
    return (
        "`bench/results/03_quantization_peer_cpu.md` predates that harness: LIO was timed inside `ch03_quantization`, llama.cpp by its own report, one engine after the other, once or twice, with no spread recorded. They stay here as measured, **pending a re-run with the new harness** (`bench/reproduce.sh --chapter 03`); until then no ratio below is a win, a loss or a tie (LIO / llama.cpp, above 1 means LIO is faster; old harness):"
        if OLD(peer)
        else "LIO / llama.cpp (above 1: LIO faster), median [min-max] of the %d interleaved repeats, tie when the range holds 1 (`bench/results/03_quantization_peer_cpu.md`):"
        % peer.repeats
    )


def quant_tables_PEERK_NOTE(OLD, peerk):
    """bench/results/03_quantization_tables.md, `let PEERK_NOTE`."""
    return (
        "Speed ratios are LIO / llama.cpp on 2 cores, from the old peer harness (the first table above): one run, no spread, **pending a re-run**:"
        if OLD(peerk)
        else "Speed ratios are LIO / llama.cpp, median [min-max] of %d interleaved repeats, tie when the range holds 1:"
        % peerk.repeats
    )


def quant_tables_cpp_same_files_rows():
    """bench/results/03_quantization_tables.md, `let rows`."""
    return [
        ("f32", "f32"),
        ("Q8_0", "q8_0"),
        ("Q8_0, per-channel (w8a16)", "w8a16"),
        ("Q4_1", "q4_1"),
        ("Q4_0", "q4_0"),
    ]


def quant_tables_R(RC, peer, name, key):
    """bench/results/03_quantization_tables.md, `let R`. A function of name, key; the lesson binds RC, peer with partial()."""
    return RC(find(peer.rows, variant=name), key)


def quant_tables_q8_blocks_differ(LL, peer):
    """bench/results/03_quantization_tables.md, a {...} field."""
    return LL(find(peer.rows, variant="w8a16"), "decode_b1") / LL(find(peer.rows, variant="q8_0"), "decode_b1") - 1


def quant_tables_they_are_stored_rows():
    """bench/results/03_quantization_tables.md, `let rows`."""
    return [
        ("RTN, symmetric", "Q3_0 (3.5 bits per weight)", "rtn:3g128"),
        ("RTN, symmetric, `--llama-blocks`", "Q4_0 (4.5)", "rtn-3g128-llama-blocks.gguf"),
        ("RTN, asymmetric", "Q3_1 (4.0)", "rtn:3ag128"),
    ]


def quant_tables_wild_k_quants_rows(QKM, Q6K, P, pck, Q41):
    """bench/results/03_quantization_tables.md, `let rows`."""
    return [
        ("Q4_1 (`lio quantize`), f32", "q4_1", "%.3f (the shipped Q4_1)" % P(pck, Q41).llama_ppl),
        ("Q4_1, int8 per 32", "q4_1+a8b", ""),
        ("Q4_K_M (llama.cpp), f32", QKM, "%.3f" % P(pck, QKM).llama_ppl),
        ("Q4_K_M, int8 per 32", QKM + "+a8b", ""),
        ("Q6_K (llama.cpp), f32", Q6K, "%.3f" % P(pck, Q6K).llama_ppl),
        ("Q6_K, int8 per 32", Q6K + "+a8b", ""),
    ]


def quant_tables_decode_was(PR2, A8B):
    """bench/results/03_quantization_tables.md, a {...} field."""
    return min(PR2(v, "decode_b1") for v in A8B)


def quant_tables_best_a8b_decode_b1(PR2, A8B):
    """bench/results/03_quantization_tables.md, a {...} field."""
    return max(PR2(v, "decode_b1") for v in A8B)


def quant_tables_file_batch_decode(PR2, A8B):
    """bench/results/03_quantization_tables.md, a {...} field."""
    return min(PR2(v, "decode_b32") for v in A8B)


def quant_tables_s_every_file_batch_decode(PR2, A8B):
    """bench/results/03_quantization_tables.md, a {...} field."""
    return max(PR2(v, "decode_b32") for v in A8B)


def quant_tables_k_quant_files(PR2, A8B):
    """bench/results/03_quantization_tables.md, a {...} field."""
    return min(PR2(v, "prefill") for v in A8B[1:])


def quant_tables_decode_prefill_k_quant_files(PR2, A8B):
    """bench/results/03_quantization_tables.md, a {...} field."""
    return max(PR2(v, "prefill") for v in A8B[1:])


def quant_tables_cpu_cuda_kernel_rows():
    """bench/results/03_quantization_tables.md, `let rows`."""
    return [
        ("q8_0 (W8A16)", "q8_0"),
        ("q8_0+a8b (W8A8, scale per block)", "q8_0+a8b"),
        ("q8_0+a8 (W8A8, scale per token)", "q8_0+a8"),
    ]


def results_SD(fam):
    """bench/results/README.md, `let SD`."""
    return sorted(where(fam.decode, model="SmolLM2-135M (llama, GQA)"), key=lambda r: r.context)


def results_DT(r):
    """bench/results/README.md, `let DT`. A function of r; the lesson names it as it is."""
    return 1000 / r.decode_tok_s


def results_BC(bt):
    """bench/results/README.md, `let BC`."""
    return max(r.concurrency for r in bt.rows)


def results_BL(bt, c):
    """bench/results/README.md, `let BL`. A function of c; the lesson binds bt with partial()."""
    return find(bt.rows, engine="lio", weights="Q4_1", concurrency=c)


def results_ppl(x):
    """bench/results/README.md, `let ppl`. A function of x; the lesson names it as it is."""
    return "{:,.0f}".format(x) if x >= 1000 else "%.2f" % x


def results_GB(G):
    """bench/results/README.md, `let GB`."""
    return max(r.batch for r in G("gqa").decode)


def results_GC(G):
    """bench/results/README.md, `let GC`."""
    return max(r.context for r in G("gqa").decode)


def results_GT(GB, GC, G, name):
    """bench/results/README.md, `let GT`. A function of name; the lesson binds GB, GC, G with partial()."""
    return find(G(name).decode, batch=GB, context=GC).decode_tokens_per_s


def results_B1G(GRIDS, V, allv):
    """bench/results/README.md, `let B1G`."""
    return max(
        max(V(allv, n).decode_tokens_per_s_b1 for n in gr[1:]) / min(V(allv, n).decode_tokens_per_s_b1 for n in gr[1:])
        for gr in GRIDS[:3]
    )


def results_UNUSED(S4, scheme):
    """bench/results/README.md, `let UNUSED`. A function of scheme; the lesson binds S4 with partial()."""
    return 100 - S4("ShareGPT-like", scheme).util_pct


def results_PF4(ec, cache):
    """bench/results/README.md, `let PF4`. A function of cache; the lesson binds ec with partial()."""
    return find(ec.shared_system_prompt, prefix_cache=cache, warm=False).prefill_tokens


def results_PSN(ec):
    """bench/results/README.md, `let PSN`."""
    return find(ec.parallel_sampling, n=max(r.n for r in ec.parallel_sampling))


def results_CB(ac, RATIO5, tc):
    """bench/results/README.md, `let CB`."""
    return [
        ac.summary.throughput_ratio,
        RATIO5(tc, "10").continuous_over_static_throughput,
        RATIO5(tc, "inf").continuous_over_static_throughput,
    ]


def results_CB_VERDICT(CB):
    """bench/results/README.md, `let CB_VERDICT`."""
    return (
        ("2-4x holds; 3-5x " + ("holds" if max(CB) >= 3 else "is not reached here"))
        if max(CB) >= 2
        else "neither 2-4x nor 3-5x is reached here"
    )


def results_BEST(RUNS6, method):
    """bench/results/README.md, `let BEST`. A function of method; the lesson binds RUNS6 with partial()."""
    return max(r.speedup for r in RUNS6 if r.method == method)


def results_BEST_P(RUNS6, method, prompt):
    """bench/results/README.md, `let BEST_P`. A function of method, prompt; the lesson binds RUNS6 with partial()."""
    return max(r.speedup for r in RUNS6 if r.method == method and r.prompt == prompt)


def results_SLOW(RUNS6):
    """bench/results/README.md, `let SLOW`."""
    return sorted(RUNS6, key=lambda r: r.speedup)[0]


def results_BMAX(s):
    """bench/results/README.md, `let BMAX`."""
    return max(r.batch for r in s.batch_sweep)


def results_SWEEP(s, BMAX, method):
    """bench/results/README.md, `let SWEEP`. A function of method; the lesson binds s, BMAX with partial()."""
    return find(s.batch_sweep, batch=BMAX, method=method).speedup


def results_EEH(s):
    """bench/results/README.md, `let EEH`."""
    return sorted(s.batch1.costs.early_exit, key=lambda e: abs(e.layers - 15))[0]


def results_PEER_DRAFT(sp, engine):
    """bench/results/README.md, `let PEER_DRAFT`. A function of engine; the lesson binds sp with partial()."""
    return max(r.speedup for r in sp.rows if r.engine == engine and r.method == "draft")


def results_NAME(e):
    """bench/results/README.md, `let NAME`. A function of e; the lesson names it as it is."""
    return "LIO" if e == "lio" else e


def results_DRAFT_VERDICT(NAME, FAST, PEER_DRAFT, SLOWER, DCC, DCL):
    """bench/results/README.md, `let DRAFT_VERDICT`."""
    return (
        "holds" if PEER_DRAFT(FAST) > PEER_DRAFT(SLOWER) else "not shown here"
    ) + ": the faster draft ({}, {:.1f}x its target) gives {:.2f}x, the slower ({}, {:.1f}x) {:.2f}x".format(
        NAME(FAST), 1 / min(DCC, DCL), PEER_DRAFT(FAST), NAME(SLOWER), 1 / max(DCC, DCL), PEER_DRAFT(SLOWER)
    )


def results_IN59(H2):
    """bench/results/README.md, `let IN59`."""
    return [r.n for r in H2 if 5 <= r.speedup_f32 <= 9]


def results_IN59_TEXT(IN59):
    """bench/results/README.md, `let IN59_TEXT`."""
    return ", ".join("{:,}".format(n) for n in IN59)


def results_H2_LIST(H2):
    """bench/results/README.md, `let H2_LIST`."""
    return ", ".join("{:.1f}x at N = {:,}".format(r.speedup_f32, r.n) for r in H2)


def results_PR(p7, pair, metric):
    """bench/results/README.md, `let PR`. A function of pair, metric; the lesson binds p7 with partial()."""
    return find(p7.ratios, context=p7.contexts[-1], metric=metric, pair=pair).ratio


def results_STEP8(cfgs, a, b):
    """bench/results/README.md, `let STEP8`. A function of cfgs, a, b; the lesson names it as it is."""
    return cfgs[a].decode.step_ms.median / cfgs[b].decode.step_ms.median


def results_default_int8_activations(Q):
    """bench/results/README.md, a {...} field."""
    return "" if Q.lio_pct_bw >= 50 else ": two cores unpack 4-bit blocks more slowly than memory delivers them"


def results_tokens_identical_yes(kv):
    """bench/results/README.md, a {...} field."""
    return "holds" if all(r.ratio > 1 for r in kv) else "does not hold here"


def results_cache_perplexity_becomes(V, i8):
    """bench/results/README.md, a {...} field."""
    return (
        "holds"
        if V(i8, "f32+kv16").kv_bytes_per_token / V(i8, "f32+kv8").kv_bytes_per_token >= 1.8
        else "does not hold here"
    )


def results_batch_continuous_throughput(ac):
    """bench/results/README.md, a {...} field."""
    return ", ".join(str(n) for n in ac.summary.static_first_batch.lengths)


def results_leave_cpu_h100(RATIO5, tc, th):
    """bench/results/README.md, a {...} field."""
    return (
        "does not hold here"
        if max(
            RATIO5(tc, "inf").continuous_over_static_no_padding_throughput,
            RATIO5(th, "inf").continuous_over_static_throughput,
        )
        < 10
        else "holds"
    )


def results_output_distribution_stays(RUNS6):
    """bench/results/README.md, a {...} field."""
    return sum(1 for r in RUNS6 if r.same_tokens)


def results_decoding_s_tokens(RUNS6):
    """bench/results/README.md, a {...} field."""
    return "holds" if all(r.same_tokens for r in RUNS6) else "does not hold here"


def results_cpp_fa_off(PR):
    """bench/results/README.md, a {...} field."""
    return (
        ""
        if PR("llama.cpp flash / no flash", "prefill") >= 1
        else "; not for llama.cpp on this CPU, whose matmul-based path beats its own flash kernel on two cores"
    )


def results_CL_LINE():
    """bench/results/README.md, `let CL_LINE`."""
    return {
        "bf16": "003:1438; 003:1322",
        "flash": "003:1439; 003:1334",
        "paged_batching": "003:1440; 003:1370",
        "awq": "003:1441; 003:1389",
        "speculative": "003:1442; 003:1401",
        "tp": "003:1443; 003:1413",
    }


def results_CL_WHY():
    """bench/results/README.md, `let CL_WHY`."""
    return {
        "bf16": "half the bytes; the arithmetic stays f32 (a BF16 weight widens by a 16-bit shift)",
        "flash": "the 2-4x is the attention kernel's, at long context; at a few hundred tokens attention is a small share of a step",
        "paged_batching": "the step before served one request at a time; now one weight read serves a row per request",
        "awq": "the memory part holds (weights column); after batching a step waits on arithmetic, and 4-bit blocks must be unpacked",
        "speculative": "a batch-1 latency claim; verifying drafts adds rows to steps that are already full",
        "tp": "the 3 ranks share the same 2 cores: TP buys hardware, not speed",
    }


def results_CL_RATIO(d):
    """bench/results/README.md, `let CL_RATIO`. A function of d; the lesson names it as it is."""
    return "-" if d is None else "{:.2f}x ({:.2f}-{:.2f})".format(d["median"], d["min"], d["max"])


def results_CL_VERDICT(CL_LOW, x):
    """bench/results/README.md, `let CL_VERDICT`. A function of x; the lesson binds CL_LOW with partial()."""
    return (
        "did not run"
        if not x.ran
        else (
            "holds"
            if x.vs_previous["min"] >= CL_LOW[x.key]
            else ("does not hold here" if x.vs_previous["max"] < CL_LOW[x.key] else "inside the spread")
        )
    )


def results_closing_table_rows(cl, CL_LINE):
    """bench/results/README.md, `let rows`."""
    return [x for x in cl.steps if x.key in CL_LINE]


def results_MACH(p):
    """bench/results/README.md, `let MACH`. A function of p; the lesson names it as it is."""
    return (
        p.machine
        if str(p.machine) == p.machine
        else p.machine.cpu + ("" if not p.machine.get("gpu") else " + " + p.machine.gpu)
    ).replace("|", "\\|")


def results_CMD(p):
    """bench/results/README.md, `let CMD`. A function of p; the lesson names it as it is."""
    return str(p.command).replace("|", "\\|")


def results_SOURCES(
    cdj, fam, bt, g, ml, q, allv, m, i8, kq, mem, ec, eh, ac, ah, tc, th, gpu, s, dc, sp, ss, k7, p7, h2, k8, p8, sv, cl,
    st
):
    """bench/results/README.md, `let SOURCES`."""
    return [
        ("cpu_decode.json (and .csv)", cdj),
        ("families_cpu.json", fam),
        ("batched.json", bt),
        ("02_gqa_cpu.json", g),
        ("02_mla_cpu.json", ml),
        ("03_quantization_cpu.json", q),
        ("03_quantization_all_cpu.json", allv),
        ("03_quantization_methods_cpu.json", m),
        ("03_quantization_int8_cpu.json", i8),
        ("03_quantization_kquant_cpu.json", kq),
        ("04_paged_memory.json", mem),
        ("04_paged_engine_cpu.json", ec),
        ("04_paged_engine_h100.json", eh),
        ("05_abc_cpu.json", ac),
        ("05_abc_h100.json", ah),
        ("05_continuous_batching_cpu.json", tc),
        ("05_continuous_batching_h100.json", th),
        ("cuda_h100_validation.json", gpu),
        ("06_speculative_cpu.json", s),
        ("06_speculative_draft_cost_cpu.json", dc),
        ("06_speculative_peer_cpu.json", sp),
        ("06_speculative_serve_cpu.json", ss),
        ("07_flash_attention_cpu.json", k7),
        ("07_flash_attention_peer_cpu.json", p7),
        ("cuda_h200_validation.json", h2),
        ("08_tensor_parallel_cpu.json", k8),
        ("08_tensor_parallel_projection.json", p8),
        ("09_serve_cpu.json", sv),
        ("09_closing_cpu.json", cl),
        ("09_structured_cpu.json", st),
    ]
