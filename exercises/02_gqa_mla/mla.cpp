// Chapter 02, Tasks 2 and 4 — YOUR implementation: MLA's cache per token and its absorbed attention step.
// Declarations and contracts: common/model/include/lio/mla.h.
// Grade: ctest -R ch02_task_2 / ch02_task_4
#include "lio/mla.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "lio/error.h"

namespace lio {
// ---- Task 2 -----------------------------------------------------------------------------------

int64_t mla_latent_bytes_per_token(const ModelConfig& config, int64_t bytes_per_elem) {
  // TODO(Task 2): what does one token leave in an MLA layer's cache? Read section 5 of the
  //   lesson: which of the config's MLA widths are cached, which are rebuilt from the cache on
  //   every step, and is anything stored once per head? Every layer caches its own. Throw
  //   InvalidArgument for a config that is not MLA (kv_lora_rank < 1), n_layers < 1,
  //   qk_rope_head_dim < 0 (0 is allowed) or bytes_per_elem < 1.
  (void)config, (void)bytes_per_elem;
  throw NotImplemented("Task 2 (exercises/02_gqa_mla/mla.cpp): mla_latent_bytes_per_token — "
                       "lesson docs/02_gqa_mla.md, section 5 and Task 2");
}

// ---- Task 4 -----------------------------------------------------------------------------------

void mla_absorbed_attention_head(std::span<const float> q_nope, std::span<const float> q_pe,
                                 std::span<const float> w_uk, std::span<const float> w_uv,
                                 std::span<const float> latents, int64_t n_ctx, const MlaHeadShape& sh,
                                 float scale, std::span<float> out) {
  // TODO(Task 4): check the span sizes against sh and n_ctx (InvalidArgument). Then one head's
  //   attention over the latent rows [c_j | kpe_j] that equals the naive path's (lio/mla.h)
  //   without building any key or value: section 5 of docs/02_gqa_mla.md derives where W_UK
  //   and W_UV go. Must hold: finite for scores that overflow exp.
  //   cpu::dot(a, b, n) (kernels/cpu/cpu_ops.h) is a fast dot product if you want one.
  (void)q_nope, (void)q_pe, (void)w_uk, (void)w_uv, (void)latents, (void)n_ctx, (void)sh, (void)scale, (void)out;
  throw NotImplemented("Task 4 (exercises/02_gqa_mla/mla.cpp): mla_absorbed_attention_head — "
                       "lesson docs/02_gqa_mla.md, section 5 and Task 4");
}

}  // namespace lio
