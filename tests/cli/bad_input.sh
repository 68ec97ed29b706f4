#!/usr/bin/env bash
# bad_input.sh BIN_DIR WORK_DIR — every bad input gives a one-line error naming the
# problem and a non-zero exit (1 for input errors, CLI11's code for usage errors), never
# a crash (signal, sanitizer report) or a silent success.
set -uo pipefail
bin="$1"
work="$2"
rm -rf "$work" && mkdir -p "$work"
"$bin/make_test_models" "$work/models" >/dev/null || { echo "FAIL: make_test_models"; exit 1; }
m="$work/models"
pass=0
fail=0

# expect_error NAME EXPECTED_SUBSTRING CMD...
expect_error() {
  local name="$1" want="$2"
  shift 2
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  local lines
  lines=$(grep -c . "$work/err")
  if ((rc == 0)); then
    echo "FAIL $name: exit 0 (expected an error)"; ((fail++)); return
  fi
  if ((rc >= 128)) || grep -qE "Sanitizer|runtime error|Segmentation|Aborted|terminate called" "$work/err"; then
    echo "FAIL $name: crashed (rc=$rc)"; cat "$work/err"; ((fail++)); return
  fi
  if ! grep -qF -- "$want" "$work/err"; then
    echo "FAIL $name: stderr lacks '$want':"; cat "$work/err"; ((fail++)); return
  fi
  if ((lines != 1)); then
    echo "FAIL $name: expected a one-line error, got $lines lines:"; cat "$work/err"; ((fail++)); return
  fi
  echo "ok   $name (rc=$rc): $(cat "$work/err")"
  ((pass++))
}

long_prompt=$(printf 'token %.0s' $(seq 1 400))
expect_error missing_file        "does not exist"        "$bin/lio" info --model "$m/nope.gguf"
expect_error empty_file          "empty.gguf"            "$bin/lio" info --model "$m/empty.gguf"
expect_error truncated_gguf      "truncated.gguf"        "$bin/lio" info --model "$m/truncated.gguf"
expect_error truncated_header    "truncated_header.gguf" "$bin/lio" generate --model "$m/truncated_header.gguf" --prompt hi
expect_error bad_magic           "magic"                 "$bin/lio" info --model "$m/bad_magic.gguf"
expect_error offset_past_end     "token_embd.weight"     "$bin/lio" info --model "$m/offset_past_end.gguf"
expect_error unknown_tensor_type "Q5_K"                  "$bin/lio" info --model "$m/unknown_type.gguf"
expect_error unknown_arch        "architecture 'mamba'"  "$bin/lio" generate --model "$m/unknown_arch.gguf" --prompt hi
expect_error prompt_too_long     "the context holds"     "$bin/lio" generate --model "$m/tiny.gguf" --prompt "$long_prompt"
expect_error temperature_neg     "--temperature"         "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --temperature -1
expect_error top_p_zero          "--top-p"               "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --top-p 0
expect_error top_p_big           "--top-p"               "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --top-p 1.5
expect_error bad_dtype           "--dtype"               "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --dtype q3
expect_error max_tokens_zero     "--max-tokens"          "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --max-tokens 0
expect_error ch01_temperature    "--temperature"         "$bin/ch01_kv_cache" --model "$m/tiny.gguf" --prompt hi --temperature -0.5
expect_error ch01_missing        "does not exist"        "$bin/ch01_kv_cache" --model "$m/missing" --prompt hi
expect_error hf_missing_config   "config.json"           "$bin/lio" info --model "$m"
expect_error bad_ids             "--ids"                 "$bin/lio" logits --model "$m/tiny.gguf" --ids 1,x --out "$work/l.bin"
expect_error id_out_of_range     "token"                 "$bin/lio" logits --model "$m/tiny.gguf" --ids 1,99999 --out "$work/l.bin"
expect_error bad_device          "--device"              "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --device gpu
expect_error ch01_bad_device     "--device"              "$bin/ch01_kv_cache" --model "$m/tiny.gguf" --prompt hi --device tpu
expect_error attention_unknown   "--attention must be"   "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --attention mla
expect_error attention_no_divide "do not divide"         "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --attention gqa:3
expect_error attention_bad_n     "positive integer"      "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --attention gqa:x
printf 'A short text.' >"$work/short.txt"
expect_error ppl_missing_text    "--text: cannot read"   "$bin/lio" perplexity --model "$m/tiny.gguf" --text "$work/nope.txt"
expect_error ppl_text_too_short  "needs at least"        "$bin/lio" perplexity --model "$m/tiny.gguf" --text "$work/short.txt" -c 64
expect_error ppl_ctx_too_small   "--ctx-size must be"    "$bin/lio" perplexity --model "$m/tiny.gguf" --text "$work/short.txt" -c 2
expect_error ppl_zero_chunks     "--chunks must be"      "$bin/lio" perplexity --model "$m/tiny.gguf" --text "$work/short.txt" -c 4 --chunks 0
expect_error quant_bits_2         "--bits 2: want 8, 4 or 3" "$bin/lio" quantize --model "$m/tiny.gguf" --out "$work/q.gguf" --bits 2
expect_error quant_group_96       "--group-size 96"        "$bin/lio" quantize --model "$m/tiny.gguf" --out "$work/q.gguf" --group-size 96
expect_error quant_method         "--method hqq"           "$bin/lio" quantize --model "$m/tiny.gguf" --out "$work/q.gguf" --method hqq
expect_error quant_gptq_no_calib  "needs --calib FILE"     "$bin/lio" quantize --model "$m/tiny.gguf" --out "$work/q.gguf" --method gptq
expect_error quant_calib_missing  "cannot read --calib"    "$bin/lio" quantize --model "$m/tiny.gguf" --out "$work/q.gguf" --method awq --calib "$work/nope.txt"
expect_error quant_calib_short    "fewer than one chunk"   "$bin/lio" quantize --model "$m/tiny.gguf" --out "$work/q.gguf" --method gptq --calib "$work/short.txt" --calib-ctx 64
expect_error quant_same_file      "--out is the input"     "$bin/lio" quantize --model "$m/tiny.gguf" --out "$m/tiny.gguf" --bits 8
expect_error quant_bad_keep       "--keep"                 "$bin/lio" quantize --model "$m/tiny.gguf" --out "$work/q.gguf" --keep q4_k:token_embd
expect_error quant_corrupt_input  "truncated.gguf"         "$bin/lio" quantize --model "$m/truncated.gguf" --out "$work/q.gguf"
expect_error ch02_odd_rank       "rank must be even"     "$bin/ch02_gqa_mla" --model "$m/tiny.gguf" --variants gqa --context 16 --decode-steps 1 --eval-tokens 32 --mla-ranks 7 --mla-rope-pairs 2
expect_error ch02_bad_device     "--device must be 'cpu' or 'cuda'"  "$bin/ch02_gqa_mla" --model "$m/tiny.gguf" --variants gqa --context 16 --decode-steps 1 --eval-tokens 32 --device tpu
expect_error ch02_rope_pairs     "rope_pairs must be"    "$bin/ch02_gqa_mla" --model "$m/tiny.gguf" --variants gqa --context 16 --decode-steps 1 --eval-tokens 32 --mla-ranks 8 --mla-rope-pairs 99
# lio batch: a bad prompts file is rejected whole, naming FILE:LINE, before anything runs.
printf '{"prompt": "hi"}\n{"prompt": "oops",\n' >"$work/batch_malformed.jsonl"
printf '{"prompt": "hi"}\n\n{"prompt": "hi", "temprature": 0.5}\n' >"$work/batch_unknown.jsonl"
printf '{"prompt": "hi", "messages": []}\n' >"$work/batch_two_prompts.jsonl"
printf '{"prompt": "hi", "max_tokens": "8"}\n' >"$work/batch_bad_type.jsonl"
printf '{"prompt": "hi", "top_p": 0}\n' >"$work/batch_bad_value.jsonl"
printf '\n  \n' >"$work/batch_empty.jsonl"
printf '{"prompt": "hi", "n": 0}\n' >"$work/batch_bad_n.jsonl"
expect_error batch_malformed_line "batch_malformed.jsonl:2: not valid JSON" "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/batch_malformed.jsonl"
expect_error batch_unknown_field  "batch_unknown.jsonl:3: unknown field \"temprature\"" "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/batch_unknown.jsonl"
expect_error batch_two_prompts    "batch_two_prompts.jsonl:1: several prompts" "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/batch_two_prompts.jsonl"
expect_error batch_bad_type       "batch_bad_type.jsonl:1: \"max_tokens\" must be an integer" "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/batch_bad_type.jsonl"
expect_error batch_bad_value      "batch_bad_value.jsonl:1: top_p" "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/batch_bad_value.jsonl"
expect_error batch_empty_file     "no requests"           "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/batch_empty.jsonl"
expect_error batch_missing_file   "does not exist"        "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/nope.jsonl"
expect_error batch_bad_max_seqs   "--max-num-seqs"         "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/batch_empty.jsonl" --max-num-seqs 0
expect_error batch_bad_n          "batch_bad_n.jsonl:1: \"n\"" "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/batch_bad_n.jsonl"
expect_error batch_bad_prefix     "--prefix-cache must be none, hash or radix" "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$work/batch_empty.jsonl" --prefix-cache lru

# --device cuda where no GPU can be used (or the build has no CUDA): one clear line, exit 1.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  expect_error cuda_without_gpu  "--device cuda"         "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --device cuda
  expect_error ch02_cuda_without_gpu "--device cuda"     "$bin/ch02_gqa_mla" --model "$m/tiny.gguf" --variants gqa --context 16 --decode-steps 1 --eval-tokens 32 --mla-ranks "" --device cuda
fi

# And the good path still works on the same tiny model (so the errors above are specific).
if "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --max-tokens 4 --json >"$work/out" 2>"$work/err"; then
  echo "ok   tiny_model_generates"; ((pass++))
else
  echo "FAIL tiny_model_generates"; cat "$work/err"; ((fail++))
fi
# lio quantize's output runs in the engine (8, 4 and 3 bits, mixed precision, GPTQ, AWQ).
calib=/usr/share/common-licenses/GFDL-1.3
for args in "--bits 8" "--bits 8 --group-size channel" "--bits 4 --asymmetric --keep f16:token_embd" \
            "--method gptq --bits 3 --group-size 128 --act-order --calib $calib --calib-ctx 64 --calib-chunks 2" \
            "--method awq --bits 4 --group-size 64 --asymmetric --calib $calib --calib-ctx 64 --calib-chunks 2"; do
  # shellcheck disable=SC2086
  if "$bin/lio" quantize --model "$m/tiny.gguf" --out "$work/q.gguf" $args --json >"$work/out" 2>"$work/err" &&
     "$bin/lio" generate --model "$work/q.gguf" --prompt hi --max-tokens 4 --json >"$work/out" 2>"$work/err"; then
    echo "ok   quantized_model_generates ($args)"; ((pass++))
  else
    echo "FAIL quantized_model_generates ($args)"; cat "$work/err"; ((fail++))
  fi
done
# W4A8 with per-token activations (Task 6) on the last file (Q4_1 blocks).
if "$bin/lio" generate --model "$work/q.gguf" --prompt hi --max-tokens 4 --activations int8-token --json >"$work/out" 2>"$work/err"; then
  echo "ok   int8_token_activations_generate"; ((pass++))
else
  echo "FAIL int8_token_activations_generate"; cat "$work/err"; ((fail++))
fi
expect_error bad_activations "--activations must be" "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --activations int4
expect_error bad_attention_backend "--attention-backend must be 'flash', 'naive' or 'paged'" "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --attention-backend fast
expect_error bad_attention_backend_logits "--attention-backend must be" "$bin/lio" logits --model "$m/tiny.gguf" --ids 1,2 --out "$work/logits.bin" --attention-backend Flash
# Chapter 08's flags without mpirun: a clear error, never a hang waiting for ranks.
expect_error bad_all_reduce "--all-reduce: unknown algorithm" "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --all-reduce tree
expect_error bad_tp_size "must be >= 1" "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --tensor-parallel-size 0
expect_error tp_without_mpirun "start it with scripts/mpirun.sh -n 2" "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --tensor-parallel-size 2
expect_error nccl_on_cpu "--all-reduce nccl runs on GPUs" "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --tensor-parallel-size 2 --all-reduce nccl
# The KV cache in int8 (one scale per token and KV head) and f16.
for kv in int8 f16; do
  if "$bin/lio" generate --model "$m/tiny.gguf" --prompt "hello there" --max-tokens 6 --kv-cache-dtype $kv --json >"$work/out" 2>"$work/err" &&
     grep -q '"kv_bytes"' "$work/out"; then
    echo "ok   kv_cache_dtype_generates ($kv)"; ((pass++))
  else
    echo "FAIL kv_cache_dtype_generates ($kv)"; cat "$work/err" "$work/out"; ((fail++))
  fi
done
expect_error bad_kv_cache_dtype "--kv-cache-dtype" "$bin/lio" generate --model "$m/tiny.gguf" --prompt hi --kv-cache-dtype int4
# Speculative decoding (chapter 06): bad settings are refused before anything runs.
g=("$bin/lio" generate --model "$m/tiny.gguf" --prompt "hello there hello there" --max-tokens 8)
expect_error spec_bad_method "--spec-method must be" "${g[@]}" --spec-method hydra
expect_error spec_k_zero "--num-speculative-tokens must be in [1, 16]" "${g[@]}" --spec-method ngram --num-speculative-tokens 0
expect_error spec_k_too_many "--num-speculative-tokens must be in [1, 16]" "${g[@]}" --spec-method ngram --num-speculative-tokens 17
expect_error spec_draft_layers "--draft-layers must be in [1," "${g[@]}" --spec-method early-exit --draft-layers 0
expect_error spec_draft_no_model "needs --draft-model" "${g[@]}" --spec-method draft
expect_error spec_draft_missing "does not exist" "${g[@]}" --spec-method draft --draft-model "$m/nope.gguf"
expect_error spec_draft_corrupt "truncated.gguf" "${g[@]}" --spec-method draft --draft-model "$m/truncated.gguf"
expect_error spec_model_without_method "--draft-model is used only with --spec-method draft" "${g[@]}" --draft-model "$m/tiny.gguf"
expect_error spec_medusa_no_heads "needs --medusa-heads" "${g[@]}" --spec-method medusa
expect_error spec_medusa_missing "nope.safetensors" "${g[@]}" --spec-method medusa --medusa-heads "$m/nope.safetensors"
expect_error spec_medusa_not_heads "truncated.gguf" "${g[@]}" --spec-method medusa --medusa-heads "$m/truncated.gguf"
expect_error spec_medusa_tree_too_big "--num-speculative-tokens must be in [1, 63]" "${g[@]}" --spec-method medusa --medusa-heads "$m/nope.safetensors" --num-speculative-tokens 64
expect_error spec_eagle_no_drafter "needs --eagle-drafter" "${g[@]}" --spec-method eagle
expect_error spec_eagle_missing "nope.safetensors" "${g[@]}" --spec-method eagle --eagle-drafter "$m/nope.safetensors"
expect_error spec_eagle_not_drafter "truncated.gguf" "${g[@]}" --spec-method eagle --eagle-drafter "$m/truncated.gguf"
expect_error spec_eagle_top_k "--eagle-top-k and --eagle-depth must be >= 1" "${g[@]}" --spec-method eagle --eagle-drafter "$m/nope.safetensors" --eagle-top-k 0
expect_error spec_bad_acceptance "--spec-acceptance must be rejection or typical" "${g[@]}" --spec-method ngram --spec-acceptance lossy
expect_error spec_typical_no_method "--spec-acceptance typical needs a --spec-method" "${g[@]}" --spec-acceptance typical
expect_error spec_typical_threshold "--typical-posterior-threshold must be in (0, 1]" "${g[@]}" --spec-method ngram --spec-acceptance typical --typical-posterior-threshold 0
expect_error spec_typical_alpha "--typical-posterior-alpha finite and >= 0" "${g[@]}" --spec-method ngram --spec-acceptance typical --typical-posterior-alpha -1
expect_error spec_batch_bad_method "--spec-method must be" "$bin/lio" batch --model "$m/tiny.gguf" --prompts "$m/nope.jsonl" --spec-method hydra
expect_error spec_server_k "--num-speculative-tokens must be in [1, 16]" "$bin/lio-server" --model "$m/tiny.gguf" --spec-method ngram --num-speculative-tokens 0
if "${g[@]}" --spec-method ngram --spec-acceptance typical --temperature 0.8 --seed 3 --json >"$work/out" 2>"$work/err" &&
   grep -q '"spec_acceptance": "typical"' "$work/out"; then
  echo "ok   spec_typical_generates"; ((pass++))  # the summary labels the lossy rule
else
  echo "FAIL spec_typical_generates"; cat "$work/err" "$work/out"; ((fail++))
fi
for method in "ngram" "early-exit --draft-layers 1" "draft --draft-model $m/tiny.gguf"; do
  # shellcheck disable=SC2086
  if "${g[@]}" --spec-method $method --json >"$work/out" 2>"$work/err" && grep -q '"acceptance_rate"' "$work/out"; then
    echo "ok   spec_generates ($method)"; ((pass++))
  else
    echo "FAIL spec_generates ($method)"; cat "$work/err" "$work/out"; ((fail++))
  fi
done
# ch03_quantization's table on the tiny model: every variant measured, none failing.
printf 'the quick brown fox jumps over the lazy dog %.0s' $(seq 1 60) >"$work/text.txt"
ch03=("$bin/ch03_quantization" --reference "$m/tiny.gguf" --ppl-ctx 64 --ppl-chunks 2
      --eval-tokens 64 --context 32 --prefill-tokens 32 --steps 1 --calib "$calib" --calib-ctx 64 --calib-chunks 2)
expect_error ch03_a8_on_f32_file "need quantized weights" "${ch03[@]}" --text "$work/text.txt" --variants f32 --files "$m/tiny.gguf+a8b"
if "${ch03[@]}" --text "$work/text.txt" --variants f32,f32+kv8,q8_0,w8a16,w8a8+kv16,q4_0+a8b,smoothquant:8gch+a8,q4_1,q4_0,rtn:3g64,gptq:3g64,awq:4ag32 --json >"$work/out" 2>"$work/err" &&
   [[ $(grep -c '"perplexity":' "$work/out") -eq 12 ]]; then
  echo "ok   ch03_table_on_tiny_model"; ((pass++))
else
  echo "FAIL ch03_table_on_tiny_model"; cat "$work/err" "$work/out"; ((fail++))
fi
expect_error ch03_unknown_variant "unknown variant 'q3_k'" "${ch03[@]}" --text "$work/text.txt" --variants f32,q3_k
expect_error ch03_bad_bits        "--bits 5"               "${ch03[@]}" --text "$work/text.txt" --variants f32,gptq:5g32
expect_error ch03_f32_int8_acts   "no int8 kernel"         "${ch03[@]}" --text "$work/text.txt" --variants f32+a8
expect_error ch03_bad_suffix      "unknown suffix '+a4'"   "${ch03[@]}" --text "$work/text.txt" --variants q8_0+a4
expect_error ch03_missing_text    "--text: cannot read"    "${ch03[@]}" --text "$work/nope.txt"
echo "$pass passed, $fail failed"
((fail == 0))
