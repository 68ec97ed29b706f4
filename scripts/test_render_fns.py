"""Tests of the lessons' render functions (scripts/render_fns.py) and of render_docs' Jinja2 engine:

    .venv/bin/python scripts/test_render_fns.py        (ctest -R docs_render_fns)

ORIGINALS holds, for every named function, the Python expression it replaced in its lesson (issue
62, item 4: the markers' `let` lines once were evaluated with eval). RenderedLessons renders every
lesson with each call of a named function recorded, and checks that the function returned what its
original expression gives on the same arguments (the committed bench/results files), and that each
function is called at least once.
"""
import ast
import math
import os
import unittest

import render_docs
import render_fns

# name -> the expression of the marker it came from (a lambda: the function takes the lambda's
# free names first, then its arguments)
ORIGINALS = {
    'readme_TT': 'lambda cache, warm: find(ec.shared_system_prompt, prefix_cache=cache, warm=warm).median_ttft_ms',
    'readme_machine_name': "lambda d: (d.provenance.machine if str(d.provenance.machine) == d.provenance.machine else d.provenance.machine.cpu).split(' |')[0].replace('host ', '')",
    'readme_llm_inference_optimization_rows': "[dict(ch='01', what='KV cache: recompute / cached time to generate {} tokens'.format(kv[-1].gen_tokens), fig='{:.1f}x'.format(kv[-1].recompute_ms_median / kv[-1].cached_ms_median), m=M(kvj)), dict(ch='03', what='batch-1 decode, Q4_1 with the default int8 activations, LIO / llama.cpp (llama-bench)', fig='{:.2f}x ({:.0f} / {:.0f} tok/s)'.format(Q8.decode_ratio, Q8.lio_decode_tps, Q8.llama_decode_tps), m=M(cdj)), dict(ch='04', what='prefix caching: time to first token without / with a warm radix cache', fig='{:.1f}x'.format(TT('none', True) / TT('radix', True)), m=M(ec)), dict(ch='05', what='continuous / static batching, output throughput, all requests at once', fig='{:.2f}x'.format(CB), m=M(tc)), dict(ch='07', what='FlashAttention / naive attention, causal prefill at N = {:,}'.format(k7.prefill[-1].n), fig='{:.1f}x'.format(k7.prefill[-1].speedup), m=M(k7)), dict(ch='09', what='lio-server / llama-server output tok/s, by request rate', fig='{:.2f}-{:.2f}x'.format(min(r.output_throughput for r in sv.ratios), max(r.output_throughput for r in sv.ratios)), m=M(sv))]",
    'readme_quick_start_rows': "[dict(cmd='`scripts/run.sh`', until='the answer is printed', s=f.run_sh_seconds), dict(cmd='`CI=true bash .ci/run`', until='every test passed (stub check, ASan, fuzzing and TSan included)', s=f.ci_seconds)]",
    'readme_scaled_same_measurement': 'min(r.seconds for r in f.ci_reruns) / 60',
    'readme_every_wait_scaled_same_measurement': 'max(r.seconds for r in f.ci_reruns) / 60',
    'readme_n_gram_lookup': "max(r.speedup for r in s.batch1.runs if r.method == 'ngram' and r.prompt == 'grounded')",
    'readme_llama_cpp_s': "min(r.lio_over_llama for r in p.ratios if r.method != 'plain')",
    'readme_once_against_llama_cpp_s': "max(r.lio_over_llama for r in p.ratios if r.method != 'plain')",
    'readme_speed_whole_model': "find(p.ratios, context=p.contexts[-1], metric='prefill', pair='LIO flash / llama.cpp no flash').ratio",
    'readme_mib_flash_speed_whole_model': "' (the faster llama.cpp setting in prefill on this CPU)' if find(p.ratios, context=p.contexts[-1], metric='prefill', pair='llama.cpp flash / no flash').max < 1 else ''",
    'readme_exercises_done_cpu': 'min(r.output_throughput for r in sv.ratios)',
    'readme_compatible_server_exercises_done_cpu': 'max(r.output_throughput for r in sv.ratios)',
    'readme_from_fresh_clone': "', '.join(p.phase + ' ' + str(p.seconds) + ' s' for p in f.grade.phases)",
    'readme_SIT': "'in one sitting' if S == 1 else 'in {} sittings, one after another with --resume, on the same machine'.format(S)",
    'readme_STATE': "'all {} steps'.format(len(f.steps)) if f.complete else '{} steps done; the steps it has not reached keep their earlier results until `bench/reproduce.sh --resume` runs them (each results file names its machine)'.format(len(f.steps))",
    'readme_COMMITS': "', '.join(dict.fromkeys(x.commit for x in f.sittings))",
    'readme_NC': 'len(dict.fromkeys(x.commit for x in f.sittings))',
    'machine_name': "(cd.provenance.machine if str(cd.provenance.machine) == cd.provenance.machine else cd.provenance.machine.cpu).split(' |')[0].replace('host ', '').split(',')[0]",
    'ch01_our_q4_rates': "': R_p is the 512-token prompt rate, and these prefills are 32-63 tokens long' if k32.recompute_ms_median / 1000 < (32 * 32 + 32 * 31 / 2) / Rp else ': longer prefills also pay more for attention'",
    'ch01_every_mode_length': "'yes' if all(r.identical for r in kv) else 'NO'",
    'ch01_DT': "lambda n: 1000 / find(fam.decode, model='SmolLM2-135M (llama, GQA)', context=n).decode_tok_s",
    'ch02_tokens_smollm2_keeps': "find(f.decode, model='SmolLM2-135M (llama, GQA)', context=8160).decode_tok_s / find(f.decode, model='SmolLM2-135M (llama, GQA)', context=1024).decode_tok_s",
    'ch02_keeps_speed_gemma': "find(f.decode, model='Gemma 3 270M (gemma3, MQA + window)', context=8160).decode_tok_s / find(f.decode, model='Gemma 3 270M (gemma3, MQA + window)', context=1024).decode_tok_s",
    'ch02_G': 'lambda name: find(g.variants, variant=name)',
    'ch02_T': 'lambda name, b, c: find(G(name).decode, batch=b, context=c).decode_tokens_per_s',
    'ch02_kl': "lambda x: '%.2f' % x if x >= 0.1 else '%.2g' % x if x > 0 else '0'",
    'ch02_ppl': "lambda x: '{:,.0f}'.format(x) if x >= 1000 else '%.3f' % x",
    'ch02_gqa_vs_mqa_rows': "[('MHA (repeated heads)', G('mha')), ('GQA (as shipped)', G('gqa')), ('MQA (mean-pooled, no uptraining)', G('mqa'))]",
    'ch02_D': 'lambda c: find(ml.stack.decode, context=c)',
    'ch02_RK': 'lambda r: find(ml.conversion.ranks, rank=r)',
    'ch02_full': 'max(r.rank for r in ml.conversion.ranks)',
    'ch02_best': 'min(r.rank for r in ml.conversion.ranks if r.pca.mean_kl < 0.05)',
    'ch02_bold': "lambda text, on: '**%s**' % text if on else text",
    'ch02_kv_bytes_gqa_s': "bold('%.0f%%' % (100 * kv_bytes_per_token_f16 / ml.conversion.gqa_kv_bytes_per_token_f16), rank == best)",
    'ch03_V': 'lambda doc, name: find(doc.variants, variant=name)',
    'ch03_P': 'lambda doc, name: find(doc.rows, model=name)',
    'ch03_GRIDS': "[('INT4 g32 symmetric (Q4_0)', 'q4_0', 'gptq:4g32', 'awq:4g32'), ('INT4 g128 symmetric', 'rtn:4g128', 'gptq:4g128', 'awq:4g128'), ('INT3 g128 symmetric', 'rtn:3g128', 'gptq:3g128', 'awq:3g128'), ('INT3 g128 asymmetric', 'rtn:3ag128', 'gptq:3ag128', 'awq:3ag128')]",
    'ch03_GPTQ_WINS': 'sum(1 for g in GRIDS if V(m, g[2]).perplexity < V(m, g[3]).perplexity)',
    'ch03_B1': '[V(allv, n).decode_tokens_per_s_b1 for g in GRIDS[:3] for n in g[1:]]',
    'ch03_same_tensors_differ': "abs(V(q, 'q4_1').decode_tokens_per_s_b1 / V(q, 'SmolLM2-135M-Instruct.Q4_1.gguf').decode_tokens_per_s_b1 - 1)",
    'ch03_cpp_s_blocks_rows': "[('F32 copy (= Q4_1 weights)', '32', F32), ('Q4_1 as shipped', '5.0 (Q8_0 embedding)', 'SmolLM2-135M-Instruct.Q4_1.gguf'), ('RTN Q8_0', '8.5', 'SmolLM2-135M-Instruct.rtn-Q8_0.gguf'), ('RTN Q4_0', '4.5', 'SmolLM2-135M-Instruct.rtn-Q4_0.gguf')]",
    'ch03_measured_rows': '[(g[0], V(m, g[1]), V(m, g[2]), V(m, g[3])) for g in GRIDS]',
    'ch03_B': "lambda v, other: ('**%.2f**' if v.perplexity < other.perplexity else '%.2f') % v.perplexity",
    'ch03_bits_standard_error': "min(v.perplexity_uncertainty for v in m.variants if v.grid.startswith('int4'))",
    'ch03_gets_coarser_bits_standard_error': "max(v.perplexity_uncertainty for v in m.variants if v.grid.startswith('int4'))",
    'ch03_activations_w8a8_smoothquant_rows': '[(\'q8_0\', \'INT8, scale per 32\', \'f32\'), (\'q8_0+a8b\', \'INT8, scale per 32\', "int8, scale per 32 (llama.cpp\'s CPU rule)"), (\'q8_0+a8\', \'INT8, scale per 32\', \'int8, scale per token\'), (\'w8a16\', \'INT8, scale per channel\', \'f32\'), (\'w8a8\', \'INT8, scale per channel\', \'int8, scale per token\'), (\'smoothquant:8gch+a8\', \'INT8, scale per channel\', \'int8, scale per token, SmoothQuant alpha 0.8\')]',
    'ch03_calls_h200_took': "find(g.kernel_breakdown, op='gemv').us_per_token / find(g.kernel_breakdown, op='gemv').calls_per_token",
    'ch04_S': 'lambda trace, scheme: find(mem[trace].rows, scheme=scheme)',
    'ch04_TT': 'lambda e, cache, warm: find(e.shared_system_prompt, prefix_cache=cache, warm=warm).median_ttft_ms',
    'ch04_SPEEDUPS': "lambda e: [TT(e, 'none', w) / TT(e, c, w) for c in ('hash', 'radix') for w in (False, True)]",
    'ch04_MT': 'lambda cache: find(ec.multi_turn, prefix_cache=cache)',
    'ch04_LAYOUT': "lambda rows, n, bs: [v for v in find(rows, n_ctx=n).variants if v.get('block_size') == bs][0].ratio_vs_one_block",
    'ch04_CPU_BS': 'lambda bs: [LAYOUT(ic.rows, r.n_ctx, bs) for r in ic.rows]',
    'ch04_GPU_VS_CONTIG': "[1 / [v for v in r.variants if v.get('block_size') == 16][0].ratio_vs_contiguous for r in ih.batch_rows]",
    'ch04_buys_what_costs_rows': "[('static, max length 2048', 'static max'), ('static, power of two', 'static pow2'), ('static, oracle', 'static oracle'), ('paged, block 16', 'paged bs=16'), ('paged, block 256', 'paged bs=256')]",
    'ch04_waste_used': "b(('%.1f' if S('ShareGPT-like', row[1]).waste_of_used_pct < 10 else '%.0f') % S('ShareGPT-like', row[1]).waste_of_used_pct, row[1] == 'paged bs=16')",
    'ch04_RUNNING': "lambda scheme: PG.mean_running / S('ShareGPT-like', scheme).mean_running",
    'ch04_LESS_WASTE': "lambda scheme: 1 - PG.waste_of_used_pct / S('ShareGPT-like', scheme).waste_of_used_pct",
    'ch05_RUN': 'lambda t, variant, rate: find(t.runs, variant=variant, rate=rate)',
    'ch05_RATIO': 'lambda t, rate: find(t.continuous_over_static, rate=rate)',
    'ch05_REQ': 'lambda abc, policy, name: find(abc[policy].requests, name=name)',
    'ch05_run_benchmark_rows': "[('static (HF generate: padding)', 'static'), ('static, finished rows leave', 'static_no_padding'), ('continuous, chunked', 'continuous'), ('continuous, not chunked', 'continuous_no_chunk'), ('continuous, 12-block pool, recompute', 'small_kv_recompute'), ('continuous, 12-block pool, swap', 'small_kv_swap')]",
    'ch05_R': "lambda v: RUN(tc, v, 'inf')",
    'ch05_output_tok_s': "' (**%.2fx** static)' % RATIO(tc, 'inf').continuous_over_static_throughput if row[1] == 'continuous' else ''",
    'ch05_C': 'lambda variant, rate: RUN(tc, variant, rate)',
    'ch05_exercise_production': "min(ac.summary.throughput_ratio, RATIO(tc, '10').continuous_over_static_throughput, RATIO(tc, 'inf').continuous_over_static_throughput)",
    'ch05_best_throughput_ratio': "max(ac.summary.throughput_ratio, RATIO(tc, '10').continuous_over_static_throughput, RATIO(tc, 'inf').continuous_over_static_throughput)",
    'ch05_smollm2_decode_step': "1e6 / find(h2.decode, variant='cuda auto').decode_tokens_per_s / find(h2.decode_step_launches, attention='flash').kernel_launches",
    'ch06_table_from_formula': 's.provenance.machine.cpu if str(s.provenance.machine) != s.provenance.machine else s.provenance.machine',
    'ch06_run_benchmark_rows': "[r for r in s.batch1.runs + [dict(x, method='draft (3-bit)') for x in s.batch1_q3.runs] if r['k'] in (1, 2, 4, 8) and 'sweep' not in r]",
    'ch06_tokens_all_k_rows': "s.batch1.best_k + [dict(x, method='draft (3-bit)') for x in s.batch1_q3.best_k]",
    'ch06_gives': "'faster' if find(d.rows, engine='LIO').target_tok_s.median > find(d.rows, engine='llama.cpp').target_tok_s.median else 'slower'",
    'ch06_faster_or_slower_draft': "'faster' if find(d.rows, engine='LIO').draft_tok_s.median > find(d.rows, engine='llama.cpp').draft_tok_s.median else 'slower'",
    'ch06_draft_step_costs': "'more than' if s.batch1.costs.c_draft > find(d.rows, engine='LIO').c.max else 'less than' if s.batch1.costs.c_draft < find(d.rows, engine='LIO').c.min else 'about as much as'",
    'ch06_early_exit_prediction_rows': "[r for r in s.batch1.runs if 'sweep' in r]",
    'ch06_where_loses_rows': "[r for r in s.batch_sweep if r['method'] != 'none']",
    'ch06_row_computed_nothing_rows': "[r for r in s.batch1.runs if r['method'] == 'ngram' and r['k'] in (2, 4)]",
    'ch07_kernel_reaches_only': 'max(r.tflops_bf16 for r in g.flash_kernels.rows)',
    'ch07_bf16_wmma_kernel_reaches_only': '100 * max(r.tflops_bf16 for r in g.flash_kernels.rows) / g.bf16_matmul_tflops',
    'ch07_run_benchmark_rows': '[dict(r, x=x) for r, x in zip(k.prefill, k.derived.prefill)]',
    'ch07_walked_one_thread_rows': '[dict(r, x=x) for r, x in zip(k.decode, k.derived.decode)]',
    'ch08_seventy': "lambda tp: find(p.rows, model='Llama-3.1-70B AWQ-4bit', link='NVLink 3 (A100)', tp=tp, batch=1)",
    'ch08_R': 'lambda w, a: find(n.rows, what=w, activations=a)',
    'ch08_machine_name': "(n.provenance.machine if str(n.provenance.machine) == n.provenance.machine else n.provenance.machine.cpu).split(' |')[0]",
    'ch08_model_this_cpu_rows': "[dict(c, suite=s, cfg=n, b=b, base=cfgs['tp1'], base2=cfgs['tp1_2t']) for s, bs in k.suites.items() for b, cfgs in bs.items() for n, c in cfgs.items()]",
    'ch08_can_be_checked_rows': "[dict(c.predicted, suite=s, cfg=n, b=b, ranks=c.world_size, ar_p=c.prefill.all_reduce_ms.median, ar_d=c.decode.all_reduce_ms.median) for s, bs in k.suites.items() for b, cfgs in bs.items() for n, c in cfgs.items() if 'predicted' in c]",
    'ch08_latency_bound_decode': "'under-predicts: the engine measures ' + ('%.2f' % r8.tp2.predicted.decode_measured_over_predicted) + 'x the model' if r8.tp2.predicted.decode_measured_over_predicted > 1 else 'holds (measured / model ' + ('%.2f' % r8.tp2.predicted.decode_measured_over_predicted) + ')'",
    'ch08_batch': "k.suites.smollm2['8'].pp2_mb1.prefill.step_ms.median / k.suites.smollm2['8'].pp2.prefill.step_ms.median",
    'ch08_backend_kv_pool_rows': "[dict(r, cfg=n) for n in ('tp1', 'tp3', 'pp2') for r in sm[n].ranks]",
    'ch08_your_ring_n_rows': '[dict(bytes=a.bytes, a=a, t=t) for a, t in zip(r8.tp2.all_reduce_sweep, sm.tp3.all_reduce_sweep)]',
    'ch08_choice_tp_group_rows': '[dict(cfgs.tp3.lm_head, b=b) for b, cfgs in k.suites.smollm2.items()]',
    'ch08_base': 'lambda r: where(p.rows, model=r.model, link=r.link, batch=1, fits=True)[0]',
    'ch08_tp_pays_projection_rows': '[dict(r, bt=base(r).tp, sp=(base(r).step_ms / r.step_ms if r.fits else None), b64=find(p.rows, model=r.model, link=r.link, tp=r.tp, batch=64)) for r in p.rows if r.batch == 1]',
    'ch09_RUN': 'lambda target, rate: find(sv.runs, target=target, rate=rate)',
    'ch09_RAT': 'lambda rate: find(sv.ratios, rate=rate)',
    'ch09_OUT_RATIOS': '[r.output_throughput for r in sv.ratios]',
    'ch09_s_batched_decode': "find(bt, engine='lio', weights='Q4_1', concurrency=32).decode_tok_s / find(bt, engine='llama.cpp', weights='Q4_1', concurrency=32).decode_tok_s",
    'ch09_itl_p99_shows': "min(RUN('llama', r).itl_p99_ms for r in sv.settings.request_rates) / 1000",
    'ch09_every_stream_itl_p99_shows': "max(RUN('llama', r).itl_p99_ms for r in sv.settings.request_rates) / 1000",
    'ch09_against': "min(RUN('lio', r).itl_p99_ms for r in sv.settings.request_rates) / 1000",
    'ch09_worst_itl_p99_s': "max(RUN('lio', r).itl_p99_ms for r in sv.settings.request_rates) / 1000",
    'ch09_goodput_ranges_over': 'min(r.goodput for r in sv.runs)',
    'ch09_best_goodput': 'max(r.goodput for r in sv.runs)',
    'ch09_shutdown_hour_traffic_rows': "[dict(what='requests (of them malformed, answered 4xx)', v=f'{F.requests:,} ({F.requests_per_kind.malformed:,})'), dict(what='sequences finished, dropped mid-stream by their client', v=f'{F.sequences_sent:,}, {F.sequences_cancelled:,}'), dict(what='5xx responses, incomplete or inconsistent responses', v=f'{F.responses_5xx}, {F.failures}'), dict(what='pinned seeded requests that differed from their solo run', v=f'{F.pinned_mismatches} of {F.requests_per_kind.pinned:,}'), dict(what='preemptions, prefix-cache hits, accepted draft tokens', v=f'{F.metrics_delta.preemptions:,}, {F.metrics_delta.prefix_hits:,}, {F.metrics_delta.accepted_drafts:,}'), dict(what='RSS after warm-up, at the end (MiB)', v=f'{F.rss_mib.after_warmup:.0f}, {F.rss_mib.end:.0f}'), dict(what='RSS slope after warm-up (MiB per hour)', v=f'{F.rss_slope_mib_per_hour:+.1f}'), dict(what='open-fd slope after warm-up (per hour)', v=f'{F.fd_slope_per_hour:+.2f}'), dict(what='idle fds / threads before and after', v=f'{F.idle_fds[0]} / {F.idle_threads[0]} and {F.idle_fds[1]} / {F.idle_threads[1]}'), dict(what='back to idle (KV cache empty) after the last request (s)', v=f'{F.idle_after_s:.2f}'), dict(what='exit code after SIGTERM', v=f'{F.server_exit_code}')]",
    'ch09_HOURS': 'lambda tps: TOKENS / tps / 3600',
    'ch09_PER_1K': 'lambda tps: 3 * HOURS(tps) / (TOKENS / 1000)',
    'ch09_S': 'lambda key: find(cl.steps, key=key)',
    'ch09_MED': "lambda d, spec: '-' if d is None else ('{:' + spec + '}').format(d['median'])",
    'ch09_RANGE': "lambda d, spec: '-' if d is None else ('{:' + spec + '} [{:' + spec + '}-{:' + spec + '}]').format(d['median'], d['min'], d['max'])",
    'ch09_RATIO': "lambda d: '' if d is None else '{:.2f}x ({:.2f}-{:.2f})'.format(d['median'], d['min'], d['max'])",
    'ch09_WHAT': "lambda key: 'did not run (' + str(S(key).reason) + ')' if not S(key).ran else ('gained' if S(key).vs_previous['min'] > 1 else ('lost' if S(key).vs_previous['max'] < 1 else 'tied, its per-repeat ratios straddling 1'))",
    'ch09_STEP': "lambda key: WHAT(key) + ('' if not S(key).ran else ': {:.2f}x the previous step ({:.2f}-{:.2f} over repeats)'.format(S(key).vs_previous['median'], S(key).vs_previous['min'], S(key).vs_previous['max']))",
    'ch09_predates_run_below': "'**a smoke run** (`--quick`: fewer requests and tokens, two repeats) on a 2-core machine that other jobs were sharing, so its numbers are noise; rerun the script on a quiet machine for the chapter numbers.' if cl.quick else 'the full run.'",
    'cuda_backend_weights_own_time': "100 * find(g.decode, variant='cuda auto').weight_mib * 1048576 / (g.copy_bandwidth_gbs * 1e9) * find(g.decode, variant='cuda auto').decode_tokens_per_s",
    'cuda_backend_over_floats_takes': "find(g.kernel_breakdown, op='swiglu').us_per_token / find(g.kernel_breakdown, op='swiglu').calls_per_token",
    'cuda_backend_swiglu_over_floats_takes': "find(g.kernel_breakdown, op='rmsnorm').us_per_token / find(g.kernel_breakdown, op='rmsnorm').calls_per_token",
    'cuda_backend_rope_us_per_call': "find(g.kernel_breakdown, op='rope').us_per_token / find(g.kernel_breakdown, op='rope').calls_per_token",
    'cuda_backend_one_call': "sum(1 for s in g.steps if s.status == 'passed')",
    'cuda_backend_gtest_total': 'sum(t.tests for t in g.gtest)',
    'cuda_backend_gtest_failed': 'sum(t.failed for t in g.gtest)',
    'engine_or_int8_activations_rows': '[dict(name=k, **v) for k, v in kl.rows.items()]',
    'engine_int8_kl_verdict': "'a tie with llama.cpp, so int8 passes the rule' if kl.int8_over_llama_kl_p5_p95[0] <= 1 <= kl.int8_over_llama_kl_p5_p95[1] else ('below llama.cpp, so int8 passes the rule' if kl.int8_over_llama_kl_p5_p95[1] < 1 else 'above llama.cpp: int8 fails the rule')",
    'engine_greedy_text_rows': '[dict(name=k, text=v) for k, v in kl.greedy.items()]',
    'quant_tables_RM': 'lambda r, key: r[key].ratio.median if key in r else r.lio[key] / r.llama_cpp[key]',
    'quant_tables_RC': "lambda r, key: '{:.2f}x'.format(RM(r, key)) + ((' [{:.2f}-{:.2f}]'.format(r[key].ratio.min, r[key].ratio.max) + (' tie' if r[key].ratio.tie else '')) if key in r else '')",
    'quant_tables_LL': 'lambda r, key: r[key].llama_cpp.median if key in r else r.llama_cpp[key]',
    'quant_tables_OLD': "lambda d: str(d.get('harness', '')).startswith('old')",
    'quant_tables_SPAN': "lambda d: 'decode at context %d, prefill of prompt positions %d..%d' % (d.prompt_tokens, d.prompt_tokens, d.prompt_tokens + d.get('prefill_tokens', d.prompt_tokens))",
    'quant_tables_PEER_NOTE': "('`bench/results/03_quantization_peer_cpu.md` predates that harness: LIO was timed inside `ch03_quantization`, llama.cpp by its own report, one engine after the other, once or twice, with no spread recorded. They stay here as measured, **pending a re-run with the new harness** (`bench/reproduce.sh --chapter 03`); until then no ratio below is a win, a loss or a tie (LIO / llama.cpp, above 1 means LIO is faster; old harness):' if OLD(peer) else 'LIO / llama.cpp (above 1: LIO faster), median [min-max] of the %d interleaved repeats, tie when the range holds 1 (`bench/results/03_quantization_peer_cpu.md`):' % peer.repeats)",
    'quant_tables_PEERK_NOTE': "('Speed ratios are LIO / llama.cpp on 2 cores, from the old peer harness (the first table above): one run, no spread, **pending a re-run**:' if OLD(peerk) else 'Speed ratios are LIO / llama.cpp, median [min-max] of %d interleaved repeats, tie when the range holds 1:' % peerk.repeats)",
    'quant_tables_cpp_same_files_rows': "[('f32', 'f32'), ('Q8_0', 'q8_0'), ('Q8_0, per-channel (w8a16)', 'w8a16'), ('Q4_1', 'q4_1'), ('Q4_0', 'q4_0')]",
    'quant_tables_R': 'lambda name, key: RC(find(peer.rows, variant=name), key)',
    'quant_tables_q8_blocks_differ': "LL(find(peer.rows, variant='w8a16'), 'decode_b1') / LL(find(peer.rows, variant='q8_0'), 'decode_b1') - 1",
    'quant_tables_they_are_stored_rows': "[('RTN, symmetric', 'Q3_0 (3.5 bits per weight)', 'rtn:3g128'), ('RTN, symmetric, `--llama-blocks`', 'Q4_0 (4.5)', 'rtn-3g128-llama-blocks.gguf'), ('RTN, asymmetric', 'Q3_1 (4.0)', 'rtn:3ag128')]",
    'quant_tables_wild_k_quants_rows': "[('Q4_1 (`lio quantize`), f32', 'q4_1', '%.3f (the shipped Q4_1)' % P(pck, Q41).llama_ppl), ('Q4_1, int8 per 32', 'q4_1+a8b', ''), ('Q4_K_M (llama.cpp), f32', QKM, '%.3f' % P(pck, QKM).llama_ppl), ('Q4_K_M, int8 per 32', QKM + '+a8b', ''), ('Q6_K (llama.cpp), f32', Q6K, '%.3f' % P(pck, Q6K).llama_ppl), ('Q6_K, int8 per 32', Q6K + '+a8b', '')]",
    'quant_tables_decode_was': "min(PR2(v, 'decode_b1') for v in A8B)",
    'quant_tables_best_a8b_decode_b1': "max(PR2(v, 'decode_b1') for v in A8B)",
    'quant_tables_file_batch_decode': "min(PR2(v, 'decode_b32') for v in A8B)",
    'quant_tables_s_every_file_batch_decode': "max(PR2(v, 'decode_b32') for v in A8B)",
    'quant_tables_k_quant_files': "min(PR2(v, 'prefill') for v in A8B[1:])",
    'quant_tables_decode_prefill_k_quant_files': "max(PR2(v, 'prefill') for v in A8B[1:])",
    'quant_tables_cpu_cuda_kernel_rows': "[('q8_0 (W8A16)', 'q8_0'), ('q8_0+a8b (W8A8, scale per block)', 'q8_0+a8b'), ('q8_0+a8 (W8A8, scale per token)', 'q8_0+a8')]",
    'results_SD': "sorted(where(fam.decode, model='SmolLM2-135M (llama, GQA)'), key=lambda r: r.context)",
    'results_DT': 'lambda r: 1000 / r.decode_tok_s',
    'results_BC': 'max(r.concurrency for r in bt.rows)',
    'results_BL': "lambda c: find(bt.rows, engine='lio', weights='Q4_1', concurrency=c)",
    'results_ppl': "lambda x: '{:,.0f}'.format(x) if x >= 1000 else '%.2f' % x",
    'results_GB': "max(r.batch for r in G('gqa').decode)",
    'results_GC': "max(r.context for r in G('gqa').decode)",
    'results_GT': 'lambda name: find(G(name).decode, batch=GB, context=GC).decode_tokens_per_s',
    'results_B1G': 'max(max(V(allv, n).decode_tokens_per_s_b1 for n in gr[1:]) / min(V(allv, n).decode_tokens_per_s_b1 for n in gr[1:]) for gr in GRIDS[:3])',
    'results_UNUSED': "lambda scheme: 100 - S4('ShareGPT-like', scheme).util_pct",
    'results_PF4': 'lambda cache: find(ec.shared_system_prompt, prefix_cache=cache, warm=False).prefill_tokens',
    'results_PSN': 'find(ec.parallel_sampling, n=max(r.n for r in ec.parallel_sampling))',
    'results_CB': "[ac.summary.throughput_ratio, RATIO5(tc, '10').continuous_over_static_throughput, RATIO5(tc, 'inf').continuous_over_static_throughput]",
    'results_CB_VERDICT': "('2-4x holds; 3-5x ' + ('holds' if max(CB) >= 3 else 'is not reached here')) if max(CB) >= 2 else 'neither 2-4x nor 3-5x is reached here'",
    'results_BEST': 'lambda method: max(r.speedup for r in RUNS6 if r.method == method)',
    'results_BEST_P': 'lambda method, prompt: max(r.speedup for r in RUNS6 if r.method == method and r.prompt == prompt)',
    'results_SLOW': 'sorted(RUNS6, key=lambda r: r.speedup)[0]',
    'results_BMAX': 'max(r.batch for r in s.batch_sweep)',
    'results_SWEEP': 'lambda method: find(s.batch_sweep, batch=BMAX, method=method).speedup',
    'results_EEH': 'sorted(s.batch1.costs.early_exit, key=lambda e: abs(e.layers - 15))[0]',
    'results_PEER_DRAFT': "lambda engine: max(r.speedup for r in sp.rows if r.engine == engine and r.method == 'draft')",
    'results_NAME': "lambda e: 'LIO' if e == 'lio' else e",
    'results_DRAFT_VERDICT': "('holds' if PEER_DRAFT(FAST) > PEER_DRAFT(SLOWER) else 'not shown here') + ': the faster draft ({}, {:.1f}x its target) gives {:.2f}x, the slower ({}, {:.1f}x) {:.2f}x'.format(NAME(FAST), 1 / min(DCC, DCL), PEER_DRAFT(FAST), NAME(SLOWER), 1 / max(DCC, DCL), PEER_DRAFT(SLOWER))",
    'results_IN59': '[r.n for r in H2 if 5 <= r.speedup_f32 <= 9]',
    'results_IN59_TEXT': "', '.join('{:,}'.format(n) for n in IN59)",
    'results_H2_LIST': "', '.join('{:.1f}x at N = {:,}'.format(r.speedup_f32, r.n) for r in H2)",
    'results_PR': 'lambda pair, metric: find(p7.ratios, context=p7.contexts[-1], metric=metric, pair=pair).ratio',
    'results_STEP8': 'lambda cfgs, a, b: cfgs[a].decode.step_ms.median / cfgs[b].decode.step_ms.median',
    'results_default_int8_activations': "'' if Q.lio_pct_bw >= 50 else ': two cores unpack 4-bit blocks more slowly than memory delivers them'",
    'results_tokens_identical_yes': "'holds' if all(r.ratio > 1 for r in kv) else 'does not hold here'",
    'results_cache_perplexity_becomes': "'holds' if V(i8, 'f32+kv16').kv_bytes_per_token / V(i8, 'f32+kv8').kv_bytes_per_token >= 1.8 else 'does not hold here'",
    'results_batch_continuous_throughput': "', '.join(str(n) for n in ac.summary.static_first_batch.lengths)",
    'results_leave_cpu_h100': "'does not hold here' if max(RATIO5(tc, 'inf').continuous_over_static_no_padding_throughput, RATIO5(th, 'inf').continuous_over_static_throughput) < 10 else 'holds'",
    'results_output_distribution_stays': 'sum(1 for r in RUNS6 if r.same_tokens)',
    'results_decoding_s_tokens': "'holds' if all(r.same_tokens for r in RUNS6) else 'does not hold here'",
    'results_cpp_fa_off': "'' if PR('llama.cpp flash / no flash', 'prefill') >= 1 else '; not for llama.cpp on this CPU, whose matmul-based path beats its own flash kernel on two cores'",
    'results_CL_LINE': "{'bf16': '003:1438; 003:1322', 'flash': '003:1439; 003:1334', 'paged_batching': '003:1440; 003:1370', 'awq': '003:1441; 003:1389', 'speculative': '003:1442; 003:1401', 'tp': '003:1443; 003:1413'}",
    'results_CL_WHY': '{\'bf16\': \'half the bytes; the arithmetic stays f32 (a BF16 weight widens by a 16-bit shift)\', \'flash\': "the 2-4x is the attention kernel\'s, at long context; at a few hundred tokens attention is a small share of a step", \'paged_batching\': \'the step before served one request at a time; now one weight read serves a row per request\', \'awq\': \'the memory part holds (weights column); after batching a step waits on arithmetic, and 4-bit blocks must be unpacked\', \'speculative\': \'a batch-1 latency claim; verifying drafts adds rows to steps that are already full\', \'tp\': \'the 3 ranks share the same 2 cores: TP buys hardware, not speed\'}',
    'results_CL_RATIO': "lambda d: '-' if d is None else '{:.2f}x ({:.2f}-{:.2f})'.format(d['median'], d['min'], d['max'])",
    'results_CL_VERDICT': "lambda x: 'did not run' if not x.ran else ('holds' if x.vs_previous['min'] >= CL_LOW[x.key] else ('does not hold here' if x.vs_previous['max'] < CL_LOW[x.key] else 'inside the spread'))",
    'results_closing_table_rows': '[x for x in cl.steps if x.key in CL_LINE]',
    'results_MACH': "lambda p: (p.machine if str(p.machine) == p.machine else p.machine.cpu + ('' if not p.machine.get('gpu') else ' + ' + p.machine.gpu)).replace('|', '\\\\|')",
    'results_CMD': "lambda p: str(p.command).replace('|', '\\\\|')",
    'results_SOURCES': "[('cpu_decode.json (and .csv)', cdj), ('families_cpu.json', fam), ('batched.json', bt), ('02_gqa_cpu.json', g), ('02_mla_cpu.json', ml), ('03_quantization_cpu.json', q), ('03_quantization_all_cpu.json', allv), ('03_quantization_methods_cpu.json', m), ('03_quantization_int8_cpu.json', i8), ('03_quantization_kquant_cpu.json', kq), ('04_paged_memory.json', mem), ('04_paged_engine_cpu.json', ec), ('04_paged_engine_h100.json', eh), ('05_abc_cpu.json', ac), ('05_abc_h100.json', ah), ('05_continuous_batching_cpu.json', tc), ('05_continuous_batching_h100.json', th), ('cuda_h100_validation.json', gpu), ('06_speculative_cpu.json', s), ('06_speculative_draft_cost_cpu.json', dc), ('06_speculative_peer_cpu.json', sp), ('06_speculative_serve_cpu.json', ss), ('07_flash_attention_cpu.json', k7), ('07_flash_attention_peer_cpu.json', p7), ('cuda_h200_validation.json', h2), ('08_tensor_parallel_cpu.json', k8), ('08_tensor_parallel_projection.json', p8), ('09_serve_cpu.json', sv), ('09_closing_cpu.json', cl), ('09_structured_cpu.json', st)]",
}


def same(a, b):
    """Equal values of the same type, NaN equal to NaN, recursively."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


class Helpers(unittest.TestCase):
    ROWS = [{"name": "a", "tps": 10.0}, {"name": "b", "tps": 25.0}, {"name": "b", "tps": 5.0}]

    def test_find_and_where(self):
        self.assertEqual(render_fns.find(self.ROWS, name="a")["tps"], 10.0)
        self.assertEqual([r["tps"] for r in render_fns.where(self.ROWS, name="b")], [25.0, 5.0])
        with self.assertRaises(LookupError):
            render_fns.find(self.ROWS, name="b")
        with self.assertRaises(LookupError):
            render_fns.find(self.ROWS, name="c")

    def test_numbers(self):
        self.assertEqual(render_fns.mib(3 * 2**20), 3.0)
        self.assertEqual(render_fns.spread([3, 1, 2]), (1, 3))
        self.assertEqual(render_fns.fmt(1234.5, ",.0f"), "1,234")
        self.assertEqual(render_fns.fmt(0.123, ".1%"), "12.3%")
        self.assertEqual(render_fns.fmt(None, ".2f"), "-")


class Engine(unittest.TestCase):
    SCOPE = {"r": render_docs.wrap({"rows": [{"name": "a", "tps": 10.0}]}), "x": None}

    def test_expressions_and_fields(self):
        self.assertEqual(render_docs.evaluate("find(r.rows, name='a').tps * 2", self.SCOPE), 20.0)
        self.assertEqual(render_docs.fill("| {{ r.rows[0].tps | fmt('.1f') }} | {{ x }} |", self.SCOPE), "| 10.0 | - |")

    def test_errors_name_the_expression(self):
        for expr in ("r.rows[0].missing + 1", "nope", "r.__class__", "[x for x in r]"):
            with self.assertRaises(render_docs.RenderError, msg=expr):
                render_docs.evaluate(expr, self.SCOPE)


class RenderedLessons(unittest.TestCase):
    def test_each_function_gives_what_its_expression_gave(self):
        calls = {name: [] for name in ORIGINALS}
        saved = dict(render_docs.ENV.globals)

        def recorder(name, fn):
            def call(*args):
                value = fn(*args)
                calls[name].append((args, value))
                return value
            return call

        try:
            for name in ORIGINALS:
                render_docs.ENV.globals[name] = recorder(name, getattr(render_fns, name))
            render_docs._EXPRESSIONS.clear()
            render_docs._TEMPLATES.clear()
            cache = {}
            for path in render_docs.default_files(render_docs.ROOT):
                rel = os.path.relpath(path, render_docs.ROOT)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                self.assertEqual(render_docs.render_text(text, rel, render_docs.ROOT, cache), text, f"{rel} is stale")
        finally:
            render_docs.ENV.globals.clear()
            render_docs.ENV.globals.update(saved)
            render_docs._EXPRESSIONS.clear()
            render_docs._TEMPLATES.clear()
        for name, expr in ORIGINALS.items():
            with self.subTest(name):
                self.assertTrue(calls[name], f"{name} is never called")
                code = getattr(render_fns, name).__code__
                params = code.co_varnames[:code.co_argcount]
                for args, value in calls[name]:
                    env = {"__builtins__": {}, **render_fns.HELPERS}
                    tree = ast.parse(expr, mode="eval").body
                    if isinstance(tree, ast.Lambda):  # the free names first, then the lambda's arguments
                        n_free = len(params) - len(tree.args.args)
                        env.update(zip(params[:n_free], args[:n_free]))
                        want = eval(expr, env)(*args[n_free:])  # noqa: S307 (the test's reference)
                    else:
                        env.update(zip(params, args))
                        want = eval(expr, env)  # noqa: S307 (the test's reference)
                    self.assertTrue(same(value, want), f"{name}{args!r:.200}: {value!r:.200} != {want!r:.200}")


if __name__ == "__main__":
    unittest.main()
