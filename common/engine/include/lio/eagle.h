// eagle.h — the EAGLE drafter (chapter 06, section 7): one decoder layer that predicts the
// target's next feature from its current feature and the token that followed, run
// autoregressively at the feature level, its drafts grown into a confidence-ordered tree.
//
// Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty" (ICML),
// sec. 4.1: the drafter reads f_i, the target's final hidden state at position i, with the
// embedding of the token x_{i+1} sampled from it (the token removes the feature's uncertainty),
//   u_i = W_fc [E x_{i+1}; f_i] + b_fc,   g_i = DecoderLayer(u_i)   (no norm before attention),
// and g_i, a prediction of f_{i+1}, goes through the target's frozen LM head to draft x_{i+2}.
// Deeper drafts feed g back as the next feature. EAGLE-2 (Li et al. 2024, EMNLP, sec. 4): the
// tree is grown by expanding, depth by depth, the nodes whose path probability is highest, and
// the best nodes of all depths are verified (tree mask, Task 6). EAGLE-3 (Li et al. 2025, sec.
// 3.3): the LM head keeps only a reduced draft vocabulary. Trained on this machine by
// scripts/make_eagle.sh (self-distillation data from `lio spec-data`, scripts/train_eagle.py).
//
// LIO's window: the engine keeps the target's hidden state only for the rows whose logits it
// computes, so the drafter never sees the prompt's features. A sequence's drafter context starts
// at its last prompt row (the prefill's logits row) and grows with every verified token; the
// trainer uses the same window.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lio/medusa.h"
#include "lio/speculative.h"

namespace lio {

/// An EAGLE drafter as scripts/train_eagle.py writes it, f32 on the host. d = d_model, H heads,
/// Hkv KV heads of head_dim hd, FFN width F, V' draft vocabulary.
struct EagleDrafter {
  int64_t d_model = 0;     ///< d, the target's hidden size
  int64_t n_heads = 0;     ///< H, query heads
  int64_t n_kv_heads = 0;  ///< Hkv, K/V heads (H a multiple of it: GQA)
  int64_t head_dim = 0;    ///< hd, even
  int64_t ffn = 0;         ///< F, the SwiGLU MLP's width
  float rope_theta = 10000.0f;  ///< RoPE base; rotate-half (NeoX) pairs (j, j + hd / 2)
  float rms_eps = 1e-6f;        ///< the MLP's RMS-norm epsilon
  std::vector<int32_t> vocab;   ///< (V') target token ids, distinct
  std::vector<float> lm_head;   ///< (V', d) the target's output rows of `vocab`
  std::vector<float> fc_weight;  ///< (d, 2d) over [embedding; feature]
  std::vector<float> fc_bias;    ///< (d)
  std::vector<float> wq;         ///< (H hd, d)
  std::vector<float> wk;         ///< (Hkv hd, d)
  std::vector<float> wv;         ///< (Hkv hd, d)
  std::vector<float> wo;         ///< (d, H hd)
  std::vector<float> ffn_norm;   ///< (d) RMS-norm weight before the MLP
  std::vector<float> w_gate;     ///< (F, d)
  std::vector<float> w_up;       ///< (F, d)
  std::vector<float> w_down;     ///< (d, F)
  /// The trainer's own outputs on a held-out sequence, for checking this forward against it
  /// (a contract test, not an oracle): entries probe_start .. probe_start + P - 1.
  int64_t probe_start = -1;
  std::vector<int32_t> probe_tokens;    ///< (P + 1) x_{s+1} .. (the last unused)
  std::vector<float> probe_features;    ///< (P, d) f_s ..
  std::vector<float> probe_out;         ///< (P, d) g_s .. as the trainer computed them

  /// Reads a drafter file: the tensors `eagle.vocab` (I32), `eagle.lm_head`, `eagle.fc.weight`,
  /// `eagle.fc.bias`, `eagle.attn_{q,k,v,output}.weight`, `eagle.ffn_norm.weight`,
  /// `eagle.ffn_{gate,up,down}.weight` (F32, shapes above) and the metadata n_heads, n_kv_heads,
  /// head_dim, ffn, rope_theta, rms_eps; the probe tensors (probe.tokens, probe.features,
  /// probe.out) when present. Throws
  /// InvalidArgument if the file is missing or d differs from `target_d_model` ("trained for
  /// another model"); FormatError naming the tensor or key when one is missing, mistyped or
  /// misshapen, H not a multiple of Hkv, hd odd, or a vocab id outside [0, target_vocab) or
  /// repeated.
  static EagleDrafter load(const std::string& path, int64_t target_d_model, int64_t target_vocab);
};

/// The EAGLE drafter in the engine (`--spec-method eagle`). Every pass returns the target's
/// final hidden states (wants_hidden) and on_hidden gets the rows of the verified path; before
/// the next schedule, propose() runs the drafter over them (the "catch-up" rows, whose K/V the
/// sequence keeps), then grows the tree: depth 1 is the top_k tokens of the last catch-up row;
/// each further depth expands the top_k nodes of the previous depth by path log-probability,
/// one drafter row each (attending to the sequence's drafter cache and the node's ancestors),
/// until `depth` levels exist; the ks[i] best nodes of all levels are the draft (a parent
/// before its children). top_k = 1 is a chain. The drafts are deterministic (q one-hot), exact
/// under sampling with Task 6's rule. Rows of every sequence share one batched pass per depth.
/// Weights run as Q8_0 with int8 activations (the CPU's packed kernels) unless `f32_weights`.
/// Not thread-safe.
class EagleProposer final : public Proposer {
 public:
  /// `embed(ids, out)`: the target's token embedding rows of ids, unscaled, out (n, d) f32.
  /// Throws InvalidArgument if top_k < 1 or depth < 1.
  EagleProposer(EagleDrafter drafter, std::function<void(std::span<const int32_t>, float*)> embed, int64_t top_k,
                int64_t depth, bool f32_weights = false);
  ~EagleProposer() override;

  bool drafts_before_schedule() const override { return true; }
  bool wants_hidden() const override { return true; }
  void on_hidden(const Sequence& seq, std::span<const float> hidden) override;
  std::vector<DraftProposal> propose(std::span<Sequence* const> seqs, std::span<const int64_t> ks) override;
  void release(const Sequence& seq) override;

  /// The drafter's outputs g for one causal window: features (n, d) at positions `start` to
  /// `start` + n - 1, next_tokens (n) the tokens x_{i+1}; returns (n, d). No state is kept. For
  /// tests against EagleDrafter's probe. Throws InvalidArgument on mismatched sizes.
  std::vector<float> forward_window(std::span<const float> features, std::span<const int32_t> next_tokens,
                                    int64_t start);
  /// The drafter's weights.
  const EagleDrafter& drafter() const { return w_; }

 private:
  struct Packed;
  struct SeqState;
  struct Row;
  /// Runs `rows` through the drafter: each row's K/V written to its sequence's cache at its
  /// slot; writes g (n, d) and, when `logits` is not null, the draft-vocab logits (n, V').
  void forward(std::vector<Row>& rows, std::vector<float>& g, std::vector<float>* logits);

  EagleDrafter w_;
  std::function<void(std::span<const int32_t>, float*)> embed_;
  int64_t top_k_;
  int64_t depth_;
  std::unique_ptr<Packed> packed_;
  std::map<int64_t, std::unique_ptr<SeqState>> states_;
};

}  // namespace lio
