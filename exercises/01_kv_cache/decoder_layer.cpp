// Chapter 01, Task 5 — YOUR implementation: one Llama decoder layer over the KV cache.
// Declaration and contract: common/model/include/lio/decoder_layer.h (lio::llama_decoder_layer).
// Grade: ctest -R ch01_task_5
#include "lio/decoder_layer.h"

#include "lio/backend.h"
#include "lio/error.h"
#include "lio/model_config.h"

namespace lio {

void llama_decoder_layer(LayerPass& p, int64_t layer) {
  // TODO(Task 5): update p.x to the layer's output and leave this layer's K and V of every row
  //   in p.pool, as lio/decoder_layer.h states, with p.be's operators only.
  //   Must hold: the model's logits equal the lesson's equations on a tiny random model, prefill
  //   and one token at a time; the real model's next-token choices agree with llama.cpp's
  //   (lesson: docs/01_kv_cache.md, "Task 5").
  (void)p, (void)layer;
  throw NotImplemented("Task 5 (exercises/01_kv_cache/decoder_layer.cpp): llama_decoder_layer — "
                       "lesson docs/01_kv_cache.md, Task 5");
}

}  // namespace lio
