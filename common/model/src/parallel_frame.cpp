// parallel_frame.cpp — the communication around a forward pass's layers on one rank of a TP x PP
// grid (chapter 08): the pipeline's receive and send, the tensor-parallel all-reduce and gather,
// each timed into ParallelContext's CommStats (the compute / communication split of
// bench/results/08_tensor_parallel_cpu.md). Model::forward_device calls these; the layer loop
// itself holds no communication code.
#include <cstdint>
#include <vector>

#include "lio/backend.h"
#include "lio/parallel.h"

namespace lio {

void ParallelContext::wait_for_group(Backend& be, const float* buf) {
  if (!split_wait) return;
  if (!be.host_memory()) be.to_host(buf, 0, nullptr);  // this rank's kernels are done before it waits
  const double t0 = comm_clock_seconds();
  tp->barrier();
  wait.add(0, comm_clock_seconds() - t0);
}

void ParallelContext::receive_from_previous_stage(Backend& be, float* x, int64_t n_floats) {
  staging_.resize(static_cast<size_t>(n_floats));
  const double t0 = comm_clock_seconds();
  world->send_recv(nullptr, 0, -1, staging_.data(), n_floats,
                   static_cast<int>(plan.world_rank_of(plan.pp_rank - 1, plan.tp_rank)));
  send_recv.add(n_floats * static_cast<int64_t>(sizeof(float)), comm_clock_seconds() - t0);
  be.from_host(staging_.data(), n_floats, x);
}

void ParallelContext::send_to_next_stage(Backend& be, const float* x, int64_t n_floats) {
  staging_.resize(static_cast<size_t>(n_floats));
  be.to_host(x, n_floats, staging_.data());
  const double t0 = comm_clock_seconds();
  world->send_recv(staging_.data(), n_floats, static_cast<int>(plan.world_rank_of(plan.pp_rank + 1, plan.tp_rank)),
                   nullptr, 0, -1);
  send_recv.add(n_floats * static_cast<int64_t>(sizeof(float)), comm_clock_seconds() - t0);
}

void ParallelContext::tp_all_reduce(Backend& be, float* x, int64_t n_floats) {
  wait_for_group(be, x);
  const double t0 = comm_clock_seconds();
  be.all_reduce(*tp, x, n_floats);
  all_reduce.add(n_floats * static_cast<int64_t>(sizeof(float)), comm_clock_seconds() - t0);
}

void ParallelContext::tp_all_gather(Backend& be, const float* in, float* out, int64_t n_floats) {
  wait_for_group(be, in);
  const double t0 = comm_clock_seconds();
  be.all_gather(*tp, in, out, n_floats);
  all_gather.add(n_floats * static_cast<int64_t>(sizeof(float)), comm_clock_seconds() - t0);
}

TpGroup ParallelContext::tp_group(Backend& be) {
  if (plan.tp_size <= 1) return {};
  return {plan.tp_rank, plan.tp_size, [this, &be](float* buf, int64_t count) { tp_all_reduce(be, buf, count); }};
}

}  // namespace lio
