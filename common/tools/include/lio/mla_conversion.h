// mla_conversion.h — chapter 02's offline tool: a GQA model converted to multi-head latent
// attention in memory (MHA2MLA / TransMLA recipes), for `--attention mla:R` and `bench_mla`.
// Defined in common/tools/src/mla_conversion.cpp; not part of the serving core (the forward
// pass's MLA attention is lio/mla.h, Task 4).
#pragma once

#include <cstdint>
#include <vector>

#include "lio/mla.h"
#include "lio/model_config.h"
#include "lio/model_loader.h"

namespace lio {

/// How the course model's GQA attention becomes MLA (no training): MHA2MLA's recipe (Ji et
/// al. 2025): partial RoPE keeping the highest-frequency pairs ("S_high"), then a joint
/// low-rank SVD of the no-RoPE keys and the values ("SVD_joint").
struct MlaConversion {
  int64_t rank = 0;        ///< d_c: latent width (even, 1 .. rows of [W_k,nope ; W_v])
  int64_t rope_pairs = 0;  ///< RoPE pairs each KV head keeps (1 .. head_dim / 2 - 1), highest frequency first
  /// Calibration text (token ids). Empty: the SVD factorises the weights alone (MHA2MLA's
  /// SVD_joint). Otherwise the model runs over these tokens first and each layer's latent is
  /// the PCA of the keys and values it actually produces there, keys scaled to the values'
  /// norm first (TransMLA's activation PCA with balanced K/V; Meng et al. 2025).
  std::vector<int32_t> calibration_tokens;
};

/// Converts `model` (a GQA Llama model) into MLA in place:
/// 1. Partial RoPE: of each KV head's head_dim / 2 rotary pairs, the `rope_pairs`
///    highest-frequency ones stay rotary; they form the shared RoPE key k_pe
///    (d_R = n_kv_heads * 2 * rope_pairs: each KV head's kept pairs side by side), and each
///    query head's RoPE query holds its own kept pairs in its KV head's place (zeros elsewhere),
///    so q_pe . k_pe is exactly the kept part of the original score. The other pairs lose their
///    rotation (they become no-RoPE dimensions): the approximation, small for the slow pairs.
/// 2. Joint low rank of [W_k,nope ; W_v] ((n_kv_heads * (head_dim - 2 * rope_pairs) +
///    n_kv_heads * head_dim), d_model). Without calibration tokens: its SVD U S V^T truncated to
///    `rank`, W_DKV = S_r V_r^T, and W_UK,i / W_UV,i are the rows of U_r for query head i's KV
///    head. With them: U_r are the top eigenvectors of the covariance of the (balanced) K/V
///    rows over the calibration text, W_DKV = U_r^T [a W_k,nope ; W_v], W_UK = U_r,K / a. At
///    full rank only step 1 changes the model.
/// The softmax scale stays 1/sqrt(head_dim); every new matrix is f32. Throws InvalidArgument
/// for an out-of-range rank or rope_pairs, UnsupportedError for a model that is already MLA.
void convert_to_mla(LoadedModel& model, const MlaConversion& conversion);

/// Rows of the matrix convert_to_mla factorises: n_kv_heads * (2 * head_dim - 2 * rope_pairs),
/// the largest rank it accepts.
int64_t mla_max_rank(const ModelConfig& config, int64_t rope_pairs);

}  // namespace lio
