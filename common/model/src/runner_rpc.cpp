// runner_rpc.cpp — chapter 08: the driver and its workers. World rank 0 drives the engine and
// broadcasts each forward batch and block copy (runner_rpc.h's encodings); the other ranks run
// ModelRunner::serve_worker until the driver sends kStop.
#include "runner_rpc.h"

#include <algorithm>
#include <string>

#include "lio/error.h"
#include "lio/model_runner.h"

namespace lio {

namespace rpc {

namespace {

void append(std::vector<int32_t>& out, const std::vector<int32_t>& v) {
  out.push_back(static_cast<int32_t>(v.size()));
  out.insert(out.end(), v.begin(), v.end());
}

}  // namespace

std::vector<int32_t> serialize(const ForwardBatch& b) {
  std::vector<int32_t> out{static_cast<int32_t>(b.block_size), static_cast<int32_t>(b.max_blocks_per_seq),
                           static_cast<int32_t>(b.n_layers)};
  for (const std::vector<int32_t>* v : {&b.token_ids, &b.positions, &b.slot_mapping, &b.query_start_loc, &b.seq_lens,
                                        &b.block_tables, &b.logits_rows}) {
    append(out, *v);
  }
  out.push_back(static_cast<int32_t>(b.group_slot_mapping.size()));  // KV cache groups 1..
  for (size_t g = 0; g < b.group_slot_mapping.size(); ++g) {
    append(out, b.group_slot_mapping[g]);
    append(out, b.group_block_tables[g]);
  }
  append(out, b.tree_lens);  // draft trees: each uint64 mask as (low, high) int32 words
  std::vector<int32_t> words;
  for (const uint64_t m : b.tree_masks) {
    words.push_back(static_cast<int32_t>(static_cast<uint32_t>(m)));
    words.push_back(static_cast<int32_t>(static_cast<uint32_t>(m >> 32)));
  }
  append(out, words);
  return out;
}

ForwardBatch deserialize(const std::vector<int32_t>& in) {
  size_t at = 0;
  auto next = [&]() -> int32_t {
    if (at >= in.size()) throw CommError("worker: a forward batch from the driver ends early");
    return in[at++];
  };
  ForwardBatch b(next());
  b.max_blocks_per_seq = next();
  b.n_layers = next();
  const auto take = [&](std::vector<int32_t>& v) {
    const int32_t len = next();
    if (len < 0 || static_cast<size_t>(len) > in.size() - at) throw CommError("worker: a forward batch from the driver is malformed");
    v.assign(in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at) + len);
    at += static_cast<size_t>(len);
  };
  for (std::vector<int32_t>* v : {&b.token_ids, &b.positions, &b.slot_mapping, &b.query_start_loc, &b.seq_lens,
                                  &b.block_tables, &b.logits_rows}) {
    take(*v);
  }
  const int32_t n_extra_tables = next();
  if (n_extra_tables < 0 || static_cast<size_t>(n_extra_tables) > in.size() - at)
    throw CommError("worker: a forward batch from the driver is malformed");
  b.group_slot_mapping.resize(static_cast<size_t>(n_extra_tables));
  b.group_block_tables.resize(static_cast<size_t>(n_extra_tables));
  for (int32_t g = 0; g < n_extra_tables; ++g) {
    take(b.group_slot_mapping[static_cast<size_t>(g)]);
    take(b.group_block_tables[static_cast<size_t>(g)]);
  }
  take(b.tree_lens);
  std::vector<int32_t> words;
  take(words);
  if (words.size() % 2 != 0) throw CommError("worker: a forward batch from the driver is malformed");
  for (size_t i = 0; i < words.size(); i += 2) {
    b.tree_masks.push_back(uint64_t{static_cast<uint32_t>(words[i])} | uint64_t{static_cast<uint32_t>(words[i + 1])} << 32);
  }
  return b;
}

std::vector<int32_t> serialize(std::span<const BlockCopy> copies) {
  std::vector<int32_t> out;
  for (const BlockCopy& c : copies) out.insert(out.end(), {c.src, c.dst});
  return out;
}

std::vector<BlockCopy> copies_of(const std::vector<int32_t>& in) {
  std::vector<BlockCopy> out;
  for (size_t i = 0; i + 1 < in.size(); i += 2) out.push_back({in[i], in[i + 1]});
  return out;
}

}  // namespace rpc

void ModelRunner::set_parallel(std::unique_ptr<ParallelContext> parallel) {
  if (parallel_) throw InvalidArgument("ModelRunner::set_parallel: the runner already has a grid");
  parallel_ = std::move(parallel);
  model_.set_parallel(parallel_.get());
}

void ModelRunner::broadcast_command(int32_t cmd, const std::vector<int32_t>& payload) {
  if (!parallel_ || parallel_->world->size() == 1 || !parallel_->driver()) return;
  int64_t header[2] = {cmd, static_cast<int64_t>(payload.size())};
  parallel_->world->broadcast(header, sizeof(header), 0);
  if (!payload.empty()) {
    parallel_->world->broadcast(const_cast<int32_t*>(payload.data()),
                                static_cast<int64_t>(payload.size() * sizeof(int32_t)), 0);
  }
}

void ModelRunner::stop_workers() {
  if (workers_stopped_ || !parallel_ || !parallel_->driver() || !mpi_active()) return;
  workers_stopped_ = true;
  broadcast_command(rpc::kStop, {});
}

void ModelRunner::serve_worker() {
  if (is_driver()) throw InvalidArgument("ModelRunner::serve_worker: the driver (world rank 0) does not serve");
  Communicator& world = *parallel_->world;
  std::vector<int32_t> payload;
  for (;;) {
    int64_t header[2] = {0, 0};
    world.broadcast(header, sizeof(header), 0);
    if (header[1] < 0 || header[1] > (int64_t{1} << 31)) throw CommError("worker: a message of bad length from the driver");
    payload.resize(static_cast<size_t>(header[1]));
    if (!payload.empty()) world.broadcast(payload.data(), static_cast<int64_t>(payload.size() * sizeof(int32_t)), 0);
    switch (header[0]) {
      case rpc::kForward: {
        const ForwardBatch batch = rpc::deserialize(payload);
        model_.forward(batch, *pool_, {});
        break;
      }
      case rpc::kCopyBlocks: copy_blocks(rpc::copies_of(payload)); break;
      case rpc::kCopySlots: copy_slots(rpc::copies_of(payload)); break;
      case rpc::kSwapOut:
      case rpc::kSwapIn: {
        const std::vector<BlockCopy> copies = rpc::copies_of(payload);
        int64_t host_blocks = 0;
        for (const BlockCopy& c : copies) host_blocks = std::max<int64_t>(host_blocks, 1 + (header[0] == rpc::kSwapOut ? c.dst : c.src));
        const auto need = static_cast<size_t>(host_blocks * pool_->block_floats());
        if (worker_swap_.size() < need) worker_swap_.resize(need);
        if (header[0] == rpc::kSwapOut) swap_out(copies, worker_swap_.data());
        else swap_in(copies, worker_swap_.data());
        break;
      }
      case rpc::kStop: return;
      default: throw CommError("worker: unknown command " + std::to_string(header[0]) + " from the driver");
    }
  }
}

void ModelRunner::copy_blocks(std::span<const BlockCopy> copies) {
  if (!copies.empty()) broadcast_command(rpc::kCopyBlocks, rpc::serialize(copies));
  for (const BlockCopy& c : copies) pool_->copy_block(c.src, c.dst);
}

void ModelRunner::copy_slots(std::span<const BlockCopy> copies) {
  if (!copies.empty()) broadcast_command(rpc::kCopySlots, rpc::serialize(copies));
  for (const BlockCopy& c : copies) pool_->copy_slot(c.src, c.dst);
}

void ModelRunner::swap_out(std::span<const BlockCopy> copies, float* host) {
  if (!copies.empty()) broadcast_command(rpc::kSwapOut, rpc::serialize(copies));
  for (const BlockCopy& c : copies) pool_->copy_block_to_host(c.src, host + c.dst * pool_->block_floats());
}

void ModelRunner::swap_in(std::span<const BlockCopy> copies, const float* host) {
  if (!copies.empty()) broadcast_command(rpc::kSwapIn, rpc::serialize(copies));
  for (const BlockCopy& c : copies) pool_->copy_block_from_host(host + c.src * pool_->block_floats(), c.dst);
}

}  // namespace lio
