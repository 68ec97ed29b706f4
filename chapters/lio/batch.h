// batch.h — `lio batch`: every request of a JSONL file through one Engine, as vLLM's offline
// `LLM.generate(prompts, sampling_params)` does: add them all, step until none is left, write
// one result line per request in input order, and a throughput summary.
// The input format is batch_requests.h's.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "lio/cli_common.h"

namespace lio {

/// Values of `lio batch`'s own flags; the shared ones (--model, --dtype, --threads, --json,
/// --device, --block-size, --kv-cache-mib, and the sampling defaults) live in CommonOptions.
struct BatchOptions {
  std::string prompts_path;              ///< --prompts: JSONL input, one request a line
  std::string out_path;                  ///< --out: JSONL output ("" = stdout)
  std::string summary_path;              ///< --summary: summary JSON file ("" = none)
  bool ignore_eos = false;               ///< --ignore-eos: default for every request
  int64_t max_num_seqs = 64;             ///< --max-num-seqs: sequences in one step at most
  int64_t max_num_batched_tokens = 512;  ///< --max-num-batched-tokens: rows in one step at most
  bool no_chunked_prefill = false;       ///< --no-chunked-prefill: a prompt runs whole or waits
  std::string prefix_cache = "none";     ///< --prefix-cache: none | hash | radix (chapter 04)
  std::string scheduling = "continuous"; ///< --scheduling: continuous | static (chapter 05)
  std::string preemption = "recompute";  ///< --preemption: recompute | swap (chapter 05)
  int64_t swap_space_mib = 1024;         ///< --swap-space-mib: host swap space for --preemption swap
  bool profile = false;                  ///< --profile: time every CPU op (CpuBackend::set_profiling)
};

/// Registers the `batch` subcommand on `parent`, binding its flags to `common` and `batch`
/// (which must outlive parsing). Sets the sampling defaults to greedy, 128 tokens. Returns the
/// subcommand (check ->parsed()).
CLI::App* add_batch_subcommand(CLI::App& parent, CommonOptions& common, BatchOptions& batch);

/// Runs `lio batch`: checks the flags and the whole prompts file, loads the model, builds one
/// Engine, adds every request, steps until all finish, and writes one JSON line per request in
/// input order (to --out or stdout) with index, text, token_ids, finish_reason,
/// n_prompt_tokens, n_generated_tokens, ttft_ms, tpot_ms, e2e_ms, n_preemptions (and, where the
/// request speculated, spec_decode_json's counters) — or "error" (finish_reason null) for a
/// request the engine refused. Prints the setup and a summary on
/// stderr (a progress bar too when stderr is a terminal) and writes --summary. Returns 0.
/// Throws InvalidArgument for bad flags or a bad prompts file (before anything runs), and what
/// model loading and the engine throw.
int run_batch(const CommonOptions& common, const BatchOptions& batch);

}  // namespace lio
