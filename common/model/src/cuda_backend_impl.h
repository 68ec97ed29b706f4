// cuda_backend_impl.h — private to the CUDA backend: the state CudaBackend's files share
// (CudaBackend::Impl): stream, cuBLAS handle, device weights, per-pass buffers, profiling.
// Its parts are defined by concept: cuda_backend.cpp (device, stream, batch upload, scratch,
// to_host, profiling), cuda_backend_weights.cpp (weights in device memory),
// cuda_backend_ops.cpp (the forward pass's operators), cuda_backend_sampling.cpp (greedy
// sampling on the device).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cublas_handle.h"
#include "cuda_check.h"
#include "cuda_device_memory.h"
#include "device_matrix.h"
#include "flash_attention_cuda.h"
#include "fused_kernels.h"
#include "sampling.h"
#include "device_buffer.h"
#include "lio/cuda_backend.h"

namespace lio::cuda {

/// One decoder layer's weights in device memory, indexed by WeightKind like LayerWeights
/// (lio/model_loader.h): a kind the layer lacks is an empty matrix / a null vector.
struct DeviceLayer {
  std::array<DeviceMatrix, kWeightKindCount> matrices;  // by index_of(kind)
  std::array<const float*, kWeightKindCount>
      vectors{};  // by index_of(kind): norms and biases, null where absent
};

struct CudaBackend::Impl {
  ModelConfig config;
  std::string description;
  int device = 0;  // CUDA ordinal; every call makes it current
  cudaStream_t stream = nullptr;
  std::unique_ptr<CublasHandle> cublas;

  // ---- weights
  std::vector<DeviceBuffer<std::byte>> matrix_buffers;
  std::map<const std::byte*, const std::byte*> uploaded;  // host data -> device data (tied head)
  std::vector<DeviceBuffer<float>> vector_buffers;
  DeviceMatrix token_embd, output;
  const float* output_norm = nullptr;
  std::vector<DeviceLayer> layers;
  int64_t weight_bytes = 0;
  int64_t max_dequant_floats = 0;  // largest non-F32 matmul weight, for the cuBLAS path
  const float* mla_inv_freq = nullptr;  // MLA: (qk_rope_head_dim / 2) RoPE frequencies

  // ---- per pass: the batch's index arrays (one device array, one pinned staging array)
  DeviceBuffer<int32_t> batch_d;
  PinnedBuffer<int32_t> batch_h;  // rewritten by the next upload: every pass ends in a wait first
  int64_t n_logits = 0;           // logits rows of the last uploaded batch
  // ---- no synchronization inside a step (what a CUDA graph needs; reserve() sizes the buffers)
  bool stream_idle = true;    // nothing queued since the last wait (or drain)
  int64_t buffer_grows = 0;   // ensure() calls that reallocated (each synchronizes the stream)
  int64_t outside_graph_grows = 0;  // those of buffers no graph holds (sampling, read-back)
  int64_t upload_syncs = 0;   // uploads that found the previous pass unwaited
  // MLA: the last batch's context-row offsets (n_seqs + 1, device; prefix sums of seq_lens)
  // and their total, for the naive path's gather; the naive path's buffers
  const int32_t* mla_ctx_first = nullptr;
  int64_t mla_ctx_total = 0;
  DeviceBuffer<float> mla_c, mla_k_pe, mla_k, mla_v;
  std::array<DeviceBuffer<float>, static_cast<size_t>(Scratch::kCount)> scratch;
  DeviceBuffer<float> dequant_scratch;  // f32 copy of a quantized W for cuBLAS
  // ---- int8 activations (chapter 03): x's codes (n, cols) and scales (n, cols / 32)
  ActivationPrecision activations = ActivationPrecision::F32;
  DeviceBuffer<int8_t> act_codes;
  DeviceBuffer<float> act_scales;
  PinnedBuffer<float> to_host_h;
  // ---- attention kernels (chapter 07): flash (default) or the naive twin, and their scratch
  AttentionBackend attention_backend = AttentionBackend::Flash;
  FlashWorkspace flash_workspace;     // cuda::flash_attention's split-KV partials
  DeviceBuffer<float> naive_scores;   // cuda::naive_attention's S, the largest sequence's
  // ---- greedy sampling on the device
  DeviceBuffer<int32_t> penalty_tokens_d;  // every row's distinct ids, concatenated
  PinnedBuffer<int32_t> penalty_tokens_h;
  DeviceBuffer<ArgmaxResult> argmax_d;  // (rows)
  PinnedBuffer<ArgmaxResult> argmax_h;

  // ---- fused decode kernels (issue 45; off until a GPU check has compared them): chosen by
  // cuda::FusedKernels (kernels/cuda/fused_kernels.h), the one place that decides
  FusedKernels fused;
  /// Whether one decode row of `weights` (reading the norm `norm`'s output) can go through the
  /// fused kernels: fused.rmsnorm_gemv() at the norm's width, and none taking int8 activations.
  bool can_fuse(WeightRef norm, std::span<const WeightRef> weights, int64_t n_rows) const;

  // ---- decode CUDA graphs (issue 45): one executable graph per bucket, replayed by replay_graph
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    float* logits = nullptr;      // the captured pass's device logits
    std::vector<int64_t> layout;  // the captured upload's array sizes, in staging order
    int64_t buffer_grows = 0;     // graph_buffer_grows() at the capture: a later growth moves a buffer it uses
  };
  /// Reallocations of the buffers a captured graph may hold: every per-step buffer but greedy
  /// sampling's and the logits read-back's (grown through grow_outside_graphs), plus the flash
  /// workspace's split partials (grown inside cuda::flash_attention). A graph whose count differs
  /// from this is refused (issue 60, defects 4 and 5: a penalty request's buffer refused every
  /// replay for good; a regrown flash workspace was not counted and would have been replayed).
  int64_t graph_buffer_grows() const { return buffer_grows - outside_graph_grows + flash_workspace.grows; }
  std::map<int64_t, Graph> graphs;
  bool capturing = false;                // capture_graph is running: upload() records its layout
  std::vector<int64_t> captured_layout;  // that upload's array sizes
  int64_t graph_replays = 0;
  /// Destroys every graph (errors dropped: also called from the destructor).
  void destroy_graphs();
  /// A captured graph, destroyed with its owner.
  using GraphPtr = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, decltype(&cudaGraphDestroy)>;
  /// Waits for the stream, then runs `body` with the stream capturing in `mode` and returns what
  /// it queued (null when nothing). capture_step and capture_graph share it. Throws
  /// InvalidArgument (naming `op`) while profiling, what `body` throws, and CudaError when the
  /// capture failed (cudaErrorStreamCaptureInvalidated: `body` allocated or synchronized).
  GraphPtr capture(const char* op, const std::function<void()>& body, cudaStreamCaptureMode mode);
  /// Copies `arrays` back to back into batch_h (after waiting for the previous pass's copy to
  /// have read it, growing both staging buffers first); sets *total to their summed length and
  /// returns each array's address in batch_d. The copy itself is the caller's (upload()'s op, or
  /// the memcpy node of a replayed graph).
  std::vector<const int32_t*> stage(const std::vector<const std::vector<int32_t>*>& arrays, int64_t* total);

  // ---- profiling
  bool profiling = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;  // pool, reused every pass
  std::vector<const char*> event_ops;                       // op of events[i] since the last wait
  std::map<std::string, OpTime> op_times;

  explicit Impl(const ModelConfig& c) : config(c) {}
  /// Drains the stream, then frees the cuBLAS handle, the events and the stream.
  ~Impl();

  /// Runs `body` (which queues work); if it throws, drains the stream first, so no work the
  /// failed op queued is left in flight, and forgets the op's unmatched profiling events.
  template <typename F>
  auto guarded(F&& body) {
    CUDA_CHECK(cudaSetDevice(device));  // the calling thread may have another current device
    try {
      return body();
    } catch (...) {
      cudaStreamSynchronize(stream);  // its own error, if any, is already being thrown
      (void)cudaGetLastError();
      event_ops.clear();
      stream_idle = true;
      throw;
    }
  }

  /// ensure() on a per-step buffer, counted in buffer_grows when it reallocates (which
  /// synchronizes the stream: reserve() sizes them up front so a step does not).
  template <typename T>
  void grow(DeviceBuffer<T>& buf, int64_t n) {
    if (buf.n_elems() >= n) return;
    ++buffer_grows;
    ensure(buf, n, stream);
  }
  /// PinnedBuffer::reserve on a staging buffer, counted likewise (cudaFreeHost synchronizes).
  template <typename T>
  void grow(PinnedBuffer<T>& buf, int64_t n) {
    if (buf.capacity() >= n) return;
    ++buffer_grows;
    buf.reserve(n);
  }
  /// grow() on a buffer no captured graph reads or writes (greedy sampling's, the logits
  /// read-back's): counted in buffer_grows (it still synchronizes) but not in graph_buffer_grows().
  template <typename Buffer>
  void grow_outside_graphs(Buffer& buf, int64_t n) {
    const int64_t before = buffer_grows;
    grow(buf, n);
    outside_graph_grows += buffer_grows - before;
  }

  /// Runs `launch` (which queues work on `stream`), timed under `name` when profiling.
  template <typename F>
  void op(const char* name, F&& launch) {
    if (!profiling) {
      launch();
      return;
    }
    const size_t i = event_ops.size();
    if (i == events.size()) {
      cudaEvent_t start = nullptr, stop = nullptr;
      CUDA_CHECK(cudaEventCreate(&start));
      CUDA_CHECK(cudaEventCreate(&stop));
      events.emplace_back(start, stop);
    }
    CUDA_CHECK(cudaEventRecord(events[i].first, stream));
    launch();
    CUDA_CHECK(cudaEventRecord(events[i].second, stream));
    event_ops.push_back(name);
  }

  /// Waits for the stream (it is idle afterwards), then adds the timed ops' event times to
  /// op_times.
  void wait();

  // Weights (cuda_backend_weights.cpp).
  /// Uploads every matrix and norm of `weights` (called once, by the constructor).
  void upload_weights(const Weights& weights);
  /// Uploads a matrix once (tied matrices share one copy). `in_matmul`: it goes through
  /// matmul() and so may need the cuBLAS path's dequantization scratch.
  DeviceMatrix upload(const WeightMatrix& w, bool in_matmul = true);
  /// Uploads a vector (a norm weight, RoPE frequencies).
  const float* upload(const std::vector<float>& v);
  /// The layer `ref` names, checked.
  const DeviceLayer& layer(WeightRef ref) const;
  /// The device matrix `ref` names. Throws InvalidArgument for a norm or a bad layer.
  const DeviceMatrix& matrix(WeightRef ref) const;
  /// The device norm weight `ref` names. Throws InvalidArgument for a matrix or a bad layer.
  /// The norm or bias vector `ref` names on the device. Throws InvalidArgument for another kind
  /// or a vector this model's layers lack.
  const float* vector(WeightRef ref) const;

  // Operators (cuda_backend_ops.cpp).
  /// Whether `w` (as `matrix`) multiplies int8 activations (chapter 03's rules).
  bool int8_activations_for(WeightRef w, const DeviceMatrix& matrix) const;
  /// Rounds x (n_rows, cols) to int8 codes and scales into act_codes / act_scales (one op).
  void quantize_x(const float* x, int64_t n_rows, int64_t cols);
  /// `pool` as this backend's device pool with `layer` in range and the batch present.
  void check_pool(const char* op, KvPool& pool, int64_t layer, const BatchView& batch) const;
};

}  // namespace lio::cuda
