// Chapter 08, Task 6 — YOUR implementation: one Llama decoder layer on one rank of a tensor-
// parallel group, over the rank's shards.
// Declaration and contract: common/model/include/lio/tp_decoder_layer.h (lio::tp_decoder_layer).
// Grade: ctest -R ch08_task_6 (2 ranks under scripts/mpirun.sh)
#include "lio/tp_decoder_layer.h"

#include "lio/backend.h"
#include "lio/error.h"
#include "lio/model_config.h"

namespace lio {

void tp_decoder_layer(LayerPass& p, int64_t layer) {
  // TODO(Task 6): update p.x to the layer's output on every rank and leave this rank's K and V
  //   of every row in p.pool, as lio/tp_decoder_layer.h states, with p.be's operators and
  //   p.tp.all_reduce only.
  //   Must hold: at TP 2 the model's logits equal one rank's and the lesson's equations on a tiny
  //   random model, prefill and one token at a time from the cache
  //   (lesson: docs/08_tensor_parallel.md, "Task 6").
  (void)p, (void)layer;
  throw NotImplemented("Task 6 (exercises/08_tensor_parallel/tp_decoder_layer.cpp): tp_decoder_layer — "
                       "lesson docs/08_tensor_parallel.md, Task 6");
}

}  // namespace lio
