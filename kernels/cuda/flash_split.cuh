// flash_split.cuh — Flash-Decoding's key split as flash_attention's blocks compute it on the
// device (Dao, Haziza, Massa, Sizov 2023): the host fixes only the NUMBER of splits (from the
// batch's shape and the SM count, never from the context length, so a decode step's grid is the
// same at every context and a CUDA graph captured once replays at any length); each block then
// cuts the keys its query tile sees into that many whole-tile ranges. Host-callable too, so
// tests/unit/test_cuda_flash_host.cu checks the ranges on machines without a GPU.
#pragma once

namespace lio::cuda::detail {

/// Keys per split when `n_keys` keys are cut into `n_splits` ranges of whole `tile`-key tiles:
/// ceil(ceil(n_keys / n_splits) / tile) x tile, at least one tile. Preconditions: n_keys >= 0,
/// n_splits >= 1, tile >= 1.
__host__ __device__ __forceinline__ int flash_keys_per_split(int n_keys, int n_splits, int tile) {
  const int per_split = (n_keys + n_splits - 1) / n_splits;
  const int tiles = (per_split + tile - 1) / tile;
  return (tiles > 0 ? tiles : 1) * tile;
}

/// The keys [*begin, *end) split `split` of `n_splits` walks out of keys [0, n_keys): whole tiles,
/// in order, split 0 first (so key 0 is always in split 0 when n_keys > 0); splits past the last
/// key get an empty range (*begin == *end == n_keys). The ranges of splits 0 .. n_splits - 1 are
/// disjoint and cover [0, n_keys).
__host__ __device__ __forceinline__ void flash_split_range(int n_keys, int n_splits, int split,
                                                           int tile, int* begin, int* end) {
  const int per_split = flash_keys_per_split(n_keys, n_splits, tile);
  // per_split * split may pass n_keys by far (short context, many splits): compare first.
  const int b = split >= (n_keys + per_split - 1) / per_split ? n_keys : split * per_split;
  *begin = b;
  *end = b + per_split < n_keys ? b + per_split : n_keys;
}

}  // namespace lio::cuda::detail
