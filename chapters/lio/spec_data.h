// spec_data.h — `lio spec-data`: self-distillation data for trained drafters (issue 63;
// chapter 06). Medusa's recipe for a model without its training data (Cai et al. 2024, sec. 3.2,
// "self-distillation"): the target answers a prompt set greedily, then one teacher-forced pass
// over prompt + answer records the target's final hidden state at every position. A trainer
// (scripts/train_medusa.py) fits draft heads to predict the target's own next tokens from them.
//
// Output, one safetensors file over all sequences concatenated (S sequences, N positions):
//   tokens      I32 (N)           prompt + generated ids of each sequence, in input order
//   hidden      F32 (N, d_model)  hidden state at each position: the residual stream after the
//                                 output norm, before the LM head (ModelRunner::hidden_states),
//                                 so logits[t] = hidden[t] . W_out^T predicts tokens[t + 1]
//   seq_starts  I32 (S + 1)       sequence s holds rows seq_starts[s] .. seq_starts[s + 1] - 1
//   prompt_lens I32 (S)           the first prompt_lens[s] rows of sequence s are its prompt
// and __metadata__: model, prompts, d_model, vocab_size, max_tokens, n_sequences, n_tokens.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "lio/cli_common.h"

namespace lio {

/// Values of `lio spec-data`'s own flags; the shared ones (--model, --dtype, --threads, --device,
/// --activations, --kv-cache-mib, ...) live in CommonOptions.
struct SpecDataOptions {
  std::string prompts_path;      ///< --prompts: JSONL, {"prompt": ...} or {"messages": [...]} a line
  std::string out_path;          ///< --out: the safetensors file written
  int64_t max_tokens = 128;      ///< --max-tokens: greedy answer length at most (EOS ends it sooner)
  int64_t max_num_seqs = 32;     ///< --max-num-seqs: answers generated together (one Engine)
  int64_t limit = 0;             ///< --limit: use the first N prompts only (0 = all)
  bool ignore_eos = false;       ///< --ignore-eos: answers of exactly max_tokens (tests on random models)
};

/// Registers the `spec-data` subcommand on `parent`, binding its flags to `common` and `opts`
/// (which must outlive parsing). Returns the subcommand (check ->parsed()).
CLI::App* add_spec_data_subcommand(CLI::App& parent, CommonOptions& common, SpecDataOptions& opts);

/// Runs `lio spec-data` (see the file comment): reads and checks the prompts (lio batch's reader:
/// chat prompts rendered with the model's chat template and its generation prompt), generates a
/// greedy answer to each through one Engine, runs each prompt + answer through the model again
/// teacher-forced with return_hidden, and writes the safetensors file atomically. Progress and the
/// time of each phase on stderr; one JSON summary line on stdout. Returns 0. Throws
/// InvalidArgument for bad flags or a bad prompts file (before the model loads), and what loading,
/// the engine and the writer throw; UnsupportedError under pipeline parallelism.
int run_spec_data(const CommonOptions& common, const SpecDataOptions& opts);

}  // namespace lio
