// hbm_working_set.h — how many copies of a kernel's matrices a GPU benchmark cycles through so
// that every timed launch streams its weights from HBM, not from the L2 cache. Host-only
// arithmetic, no CUDA: bench_cuda_gemv and copy_bandwidth.h use it, and
// tests/unit/test_bench_hbm_working_set.cpp checks it on a machine without a GPU.
//
// Why (issue 60, defect 6): a decode step reads each weight once per token, from HBM. A benchmark
// that launches a kernel 200 times on the same 1 MB matrix reads it from the L2 after the first
// launch (50 MB on an H100 / H200), so its GB/s measured the L2 and called it HBM. Cycling launch
// by launch through N copies means that between two reads of one copy the other N - 1 copies are
// read; when those bytes are several times the L2 size, the copy has been evicted and is read
// from HBM again. The factor (4, with a 256 MiB floor) leaves room for an L2 whose replacement
// is not a perfect LRU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "lio/error.h"

namespace lio::bench {

/// The working set of one timing loop is at least this many times the L2 size...
inline constexpr int64_t kHbmL2Multiple = 4;
/// ...and at least this many bytes (256 MiB), whatever the L2 size reported (0 when unknown).
inline constexpr int64_t kHbmMinWorkingSetBytes = int64_t{256} << 20;
/// Never fewer copies than this: with one copy a matrix is read back to back, and even a matrix
/// larger than the L2 leaves its last lines there for the next launch's first reads.
inline constexpr int64_t kHbmMinCopies = 2;

/// Bytes a timing loop must read between two reads of the same data for those reads to come
/// from HBM: max(kHbmL2Multiple x l2_bytes, kHbmMinWorkingSetBytes). `l2_bytes` is the device's
/// L2 size (cudaDevAttrL2CacheSize; 0 when the device does not report one). Throws
/// InvalidArgument when l2_bytes < 0.
inline int64_t hbm_working_set_target_bytes(int64_t l2_bytes) {
  if (l2_bytes < 0)
    throw InvalidArgument("hbm_working_set_target_bytes: L2 size " + std::to_string(l2_bytes) +
                          " < 0");
  return std::max(kHbmL2Multiple * l2_bytes, kHbmMinWorkingSetBytes);
}

/// True when a loop that reads `working_set_bytes` distinct bytes, over and over, reads them
/// from HBM on a device whose L2 holds `l2_bytes`: working_set_bytes >=
/// hbm_working_set_target_bytes(l2_bytes). Throws InvalidArgument when l2_bytes < 0.
inline bool streams_from_hbm(int64_t working_set_bytes, int64_t l2_bytes) {
  return working_set_bytes >= hbm_working_set_target_bytes(l2_bytes);
}

/// How one benchmarked kernel is timed from HBM: launch i reads copy i % n_copies.
struct HbmRotation {
  int64_t n_copies = 0;        ///< copies of the kernel's matrices, cycled launch by launch (>= 2)
  int64_t bytes_per_copy = 0;  ///< bytes of matrices one launch reads (one copy)
  int64_t working_set_bytes = 0;  ///< n_copies x bytes_per_copy: the bytes one timing loop reads
  int64_t launches = 0;  ///< launches per timing: >= n_copies, so each copy is read each loop
};

/// The rotation for a kernel that reads `bytes_per_copy` bytes of matrices per launch, on a
/// device with `l2_bytes` of L2, timed over at least `min_launches` launches:
///   n_copies = max(kHbmMinCopies, ceil(target / bytes_per_copy)),
///   launches = max(min_launches, n_copies),
/// with target = hbm_working_set_target_bytes(l2_bytes). So the working set reaches the target
/// (streams_from_hbm holds) and stays below target + bytes_per_copy, or 2 x bytes_per_copy for a
/// matrix larger than the target: memory is bounded by the larger of the two. Example: a 1 MB
/// matrix on a 50 MB L2 gets 256 copies (256 MiB), timed over at least 256 launches. Throws
/// InvalidArgument when bytes_per_copy < 1 (or so large that two copies overflow int64), l2_bytes <
/// 0 or min_launches < 1.
inline HbmRotation plan_hbm_rotation(int64_t bytes_per_copy, int64_t l2_bytes,
                                     int64_t min_launches) {
  if (bytes_per_copy < 1) {
    throw InvalidArgument("plan_hbm_rotation: bytes per copy must be >= 1, got " +
                          std::to_string(bytes_per_copy));
  }
  if (min_launches < 1) {
    throw InvalidArgument("plan_hbm_rotation: launches must be >= 1, got " +
                          std::to_string(min_launches));
  }
  if (bytes_per_copy > INT64_MAX / kHbmMinCopies) {
    throw InvalidArgument("plan_hbm_rotation: " + std::to_string(bytes_per_copy) +
                          " bytes per copy overflow");
  }
  const int64_t target = hbm_working_set_target_bytes(l2_bytes);
  const int64_t n_copies = std::max(kHbmMinCopies, (target + bytes_per_copy - 1) / bytes_per_copy);
  return {n_copies, bytes_per_copy, n_copies * bytes_per_copy, std::max(min_launches, n_copies)};
}

}  // namespace lio::bench
