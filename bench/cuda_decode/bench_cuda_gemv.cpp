// bench_cuda_gemv — the decode step's matmuls, one kernel at a time, on the model's own weights:
// device time per launch and achieved GB/s against a device-to-device copy measured in the same
// run (issue 45's goal: at least 60% of copy bandwidth on SmolLM2's Q4_1 matrices at batch 1).
//
// Each kernel is timed two ways (CUDA events, median of --repeats):
//   graph:  the launches captured into one CUDA graph, replayed: the kernel's device time with the
//           per-launch host work gone — what a graph-replayed decode step pays per kernel;
//   eager:  the same launches from the host, back to back: what an eager step pays (launch-bound
//           when the kernel is shorter than its launch).
// From HBM, not L2 (issue 60, defect 6): a decode step reads each weight from HBM once per token,
// but layer 0's matrices are at most a few MB and the L2 of an H100 / H200 holds 50 MB, so
// launching a kernel again and again on one copy of its matrices timed the L2. Each kernel instead
// cycles through enough copies of its matrices (launch i reads copy i % copies) that one timing
// loop reads at least max(4 x L2, 256 MiB) (hbm_working_set.h, the L2 size queried at run time),
// and is launched at least once per copy; the copy rate is measured on 1 GiB buffers, also far
// past the L2. The JSON and Markdown record the L2 size and each kernel's copies and working set,
// so a reader can check that a number is HBM's.
// Bytes per launch: the matrices (every weight read once) plus x and y; x and y stay in L2 and the
// fused kernels also read x once per block (from L2), which is not counted. Kernels: cuda::gemv
// on layer 0's W_q, W_k, W_o, W_gate, W_down and the LM head, cuda::gemv_q4_1_wide (issue 45's
// wide Q4_1 reader) on W_q, W_gate and W_down; cuda::rmsnorm_gemv_many on W_q/W_k/W_v and
// cuda::rmsnorm_gemv_swiglu on W_gate/W_up (issue 45's fused kernels) against the unfused
// launches they replace. Writes --out.json and --out.md (command, commit, GPU, driver, date).
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "copy_bandwidth.h"
#include "cuda_check.h"
#include "device_matrix.h"
#include "elementwise.h"
#include "gemv.h"
#include "gemv_fused.h"
#include "rmsnorm.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "hbm_working_set.h"
#include "lio/cli_common.h"
#include "lio/model_loader.h"

namespace {

using json = nlohmann::ordered_json;
using lio::cuda::DeviceBuffer;
using lio::cuda::DeviceMatrix;

/// `w`'s shape and dtype over device bytes `data` (which must hold w.size_bytes()).
DeviceMatrix device_view(const lio::WeightMatrix& w, const std::byte* data) {
  return DeviceMatrix{w.dtype, w.rows, w.cols, w.row_bytes, data};
}

/// The matrices one benchmarked launch reads, `n_copies` times over in one device allocation, so
/// that launch i can read copy i % n_copies from HBM (hbm_working_set.h). In each copy every
/// matrix starts on a kAlignBytes boundary (the wide Q4_1 reader's 4-byte loads, cudaMalloc's
/// own alignment). Throws UnsupportedError when the copies do not fit in the device's free
/// memory, CudaError when an allocation or copy fails.
class RotatingWeights {
 public:
  static constexpr int64_t kAlignBytes = 256;

  RotatingWeights(const std::vector<const lio::WeightMatrix*>& weights, int64_t n_copies) {
    std::vector<int64_t> offsets;
    int64_t stride_bytes = 0;  // one copy: every matrix, each aligned
    for (const lio::WeightMatrix* w : weights) {
      offsets.push_back(stride_bytes);
      stride_bytes += (w->size_bytes() + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
    }
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (n_copies * stride_bytes > static_cast<int64_t>(free_bytes)) {
      throw lio::UnsupportedError("bench_cuda_gemv: " + std::to_string(n_copies) + " copies of " +
                                  std::to_string(stride_bytes) + " bytes do not fit the device's " +
                                  std::to_string(free_bytes) + " free bytes");
    }
    bytes_ = DeviceBuffer<std::byte>(n_copies * stride_bytes);
    for (size_t k = 0; k < weights.size(); ++k) {
      CUDA_CHECK(cudaMemcpy(bytes_.data() + offsets[k], weights[k]->data, weights[k]->size_bytes(),
                            cudaMemcpyHostToDevice));
    }
    // Copies [0, done) duplicated into [done, 2 done): log2(n_copies) device-to-device copies.
    for (int64_t done = 1; done < n_copies; done *= 2) {
      const int64_t n = std::min(done, n_copies - done);
      CUDA_CHECK(cudaMemcpy(bytes_.data() + done * stride_bytes, bytes_.data(), n * stride_bytes,
                            cudaMemcpyDeviceToDevice));
    }
    for (int64_t c = 0; c < n_copies; ++c) {
      std::vector<DeviceMatrix> copy;
      for (size_t k = 0; k < weights.size(); ++k) {
        copy.push_back(device_view(*weights[k], bytes_.data() + c * stride_bytes + offsets[k]));
      }
      copies_.push_back(std::move(copy));
    }
  }

  /// Copy `c` of the matrices (0 <= c < n_copies), in the constructor's order.
  std::span<const DeviceMatrix> copy(int64_t c) const { return copies_[static_cast<size_t>(c)]; }
  /// Copies held.
  int64_t n_copies() const { return static_cast<int64_t>(copies_.size()); }

 private:
  DeviceBuffer<std::byte> bytes_;                   ///< (n_copies, stride) bytes
  std::vector<std::vector<DeviceMatrix>> copies_;  ///< copies_[c][k]: matrix k of copy c
};

/// One launch of a benchmarked kernel on copy `w` of its matrices.
using Launch = std::function<void(cudaStream_t, std::span<const DeviceMatrix> w)>;

/// Milliseconds per launch of `launch` queued `launches` times on `stream`, launch i on copy
/// i % n_copies of `weights`, median of `repeats` timings, as a graph replay (graph = true) or
/// eagerly.
double time_launches(const Launch& launch, const RotatingWeights& weights, int64_t launches, int repeats, bool graph,
                     cudaStream_t stream) {
  const auto launch_all = [&] {
    for (int64_t i = 0; i < launches; ++i) launch(stream, weights.copy(i % weights.n_copies()));
  };
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launch_all();
    CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  const auto run = [&] {
    if (graph) {
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
    } else {
      launch_all();
    }
  };
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  run();  // warm-up
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    run();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t / static_cast<double>(launches));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  return lio::bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The decode step's matmuls one kernel at a time: device time and GB/s against the copy rate",
               "bench_cuda_gemv"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  int64_t min_launches = 200;
  int repeats = 5;
  std::string out;
  app.add_option("--launches", min_launches,
                 "Launches per timing at least (one graph, or back to back); raised to one per copy of the "
                 "kernel's matrices, so that each timing reads them from HBM")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "Timings per kernel; medians are reported")->capture_default_str();
  app.add_option("--out", out, "Write OUT.json and OUT.md (default: JSON on stdout only)");
  return lio::run_main(app, argc, argv, [&]() -> int {
    if (min_launches < 1 || repeats < 1) throw lio::InvalidArgument("--launches and --repeats must be >= 1");
    if (!lio::cuda::cuda_available()) throw lio::UnsupportedError("bench_cuda_gemv: no CUDA device is available");
    const lio::LoadedModel model = lio::load_from_options(o);
    const lio::ModelConfig& c = model.config;
    if (model.weights.layers.empty() ||
        model.weights.layers[0].matrix(lio::WeightKind::Wk).data == nullptr) {
      throw lio::UnsupportedError("bench_cuda_gemv: needs a model with GQA layers (Q, K, V, O, gate, up, down)");
    }
    const lio::LayerWeights& L = model.weights.layers[0];
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreate(&stream));
    const int64_t l2_bytes = lio::bench::device_l2_bytes();
    const int64_t copy_bytes = std::max(int64_t{1} << 30, lio::bench::hbm_working_set_target_bytes(l2_bytes));
    const double copy_bw = lio::bench::measure_copy_bandwidth(copy_bytes, repeats);

    const int64_t width = std::max({c.d_model, c.d_ff, c.q_dim(), c.vocab_size});
    DeviceBuffer<float> x(width), y(width), y2(width), y3(width), norm(c.d_model);
    CUDA_CHECK(cudaMemset(x.data(), 0, x.size_bytes()));
    std::vector<float> ones(static_cast<size_t>(c.d_model), 1.0f);
    norm.copy_from_host(ones.data(), c.d_model);
    const float eps = c.rms_norm_eps;

    struct Case {
      std::string name;
      std::vector<const lio::WeightMatrix*> weights;  // what one launch reads, in the launch's order
      double bytes;                                   // per launch: weights (+ x and y for one gemv)
      Launch launch;
    };
    const auto weight_bytes = [](const std::vector<const lio::WeightMatrix*>& ws) {
      int64_t n = 0;
      for (const lio::WeightMatrix* w : ws) n += w->size_bytes();
      return n;
    };
    const auto gemv_case = [&](const char* name, const lio::WeightMatrix& w) {
      return Case{std::string("gemv ") + name + " (" + std::to_string(w.rows) + "x" + std::to_string(w.cols) + " " +
                      std::string(lio::dtype_info(w.dtype).name) + ")",
                  {&w},
                  static_cast<double>(w.size_bytes() + 4 * (w.rows + w.cols)),
                  [&](cudaStream_t s, std::span<const DeviceMatrix> m) {
                    lio::cuda::gemv(m[0], x.data(), y.data(), false, s);
                  }};
    };
    std::vector<Case> cases = {gemv_case("W_q", L.matrix(lio::WeightKind::Wq)),
                               gemv_case("W_k", L.matrix(lio::WeightKind::Wk)),
                               gemv_case("W_o", L.matrix(lio::WeightKind::Wo)),
                               gemv_case("W_gate", L.matrix(lio::WeightKind::Gate)),
                               gemv_case("W_down", L.matrix(lio::WeightKind::Down)),
                               gemv_case("LM head", model.weights.output)};
    // Issue 45's wide Q4_1 reader on the same matrices (Q4_1 with 4-byte rows; RotatingWeights
    // aligns every copy, so the view's null data pointer stands for an aligned one).
    for (const auto& [name, w] :
         {std::pair<const char*, const lio::WeightMatrix*>{"W_q", &L.matrix(lio::WeightKind::Wq)},
          {"W_gate", &L.matrix(lio::WeightKind::Gate)},
          {"W_down", &L.matrix(lio::WeightKind::Down)}}) {
      if (!lio::cuda::gemv_wide_supports(device_view(*w, nullptr))) continue;
      Case k = gemv_case(name, *w);
      k.name = "wide " + k.name;
      k.launch = [&](cudaStream_t s, std::span<const DeviceMatrix> m) {
        lio::cuda::gemv_q4_1_wide(m[0], x.data(), y.data(), false, s);
      };
      cases.push_back(std::move(k));
    }
    const std::vector<const lio::WeightMatrix*> qkv = {&L.matrix(lio::WeightKind::Wq),
                                                       &L.matrix(lio::WeightKind::Wk),
                                                       &L.matrix(lio::WeightKind::Wv)};
    cases.push_back({"unfused: rmsnorm + gemv W_q, W_k, W_v (4 launches)", qkv,
                     static_cast<double>(weight_bytes(qkv)), [&](cudaStream_t s, std::span<const DeviceMatrix> m) {
                       lio::cuda::rmsnorm(x.data(), norm.data(), y3.data(), 1, c.d_model, eps, s);
                       lio::cuda::gemv(m[0], y3.data(), y.data(), false, s);
                       lio::cuda::gemv(m[1], y3.data(), y2.data(), false, s);
                       lio::cuda::gemv(m[2], y3.data(), y2.data(), false, s);
                     }});
    if (lio::cuda::fused_gemv_supports(c.d_model)) {
      cases.push_back({"fused: rmsnorm_gemv_many W_q, W_k, W_v (1 launch)", qkv,
                       static_cast<double>(weight_bytes(qkv)), [&](cudaStream_t s, std::span<const DeviceMatrix> m) {
                         const lio::cuda::FusedGemvOut outs[] = {{m[0], y.data()}, {m[1], y2.data()}, {m[2], y3.data()}};
                         lio::cuda::rmsnorm_gemv_many(x.data(), norm.data(), c.d_model, eps, outs, s);
                       }});
    }
    const std::vector<const lio::WeightMatrix*> mlp = {&L.matrix(lio::WeightKind::Gate),
                                                       &L.matrix(lio::WeightKind::Up)};
    cases.push_back({"unfused: rmsnorm + gemv W_gate, W_up + swiglu (4 launches)", mlp,
                     static_cast<double>(weight_bytes(mlp)), [&](cudaStream_t s, std::span<const DeviceMatrix> m) {
                       lio::cuda::rmsnorm(x.data(), norm.data(), y3.data(), 1, c.d_model, eps, s);
                       lio::cuda::gemv(m[0], y3.data(), y.data(), false, s);
                       lio::cuda::gemv(m[1], y3.data(), y2.data(), false, s);
                       lio::cuda::swiglu(y.data(), y2.data(), y.data(), c.d_ff, s);
                     }});
    if (lio::cuda::fused_gemv_supports(c.d_model)) {
      cases.push_back({"fused: rmsnorm_gemv_swiglu W_gate, W_up (1 launch)", mlp,
                       static_cast<double>(weight_bytes(mlp)), [&](cudaStream_t s, std::span<const DeviceMatrix> m) {
                         lio::cuda::rmsnorm_gemv_swiglu(x.data(), norm.data(), c.d_model, eps, m[0], m[1], y.data(), s);
                       }});
    }

    json rows = json::array();
    for (const Case& k : cases) {
      const lio::bench::HbmRotation plan = lio::bench::plan_hbm_rotation(weight_bytes(k.weights), l2_bytes, min_launches);
      const RotatingWeights copies(k.weights, plan.n_copies);  // freed before the next kernel's
      const double graph_ms = time_launches(k.launch, copies, plan.launches, repeats, true, stream);
      const double eager_ms = time_launches(k.launch, copies, plan.launches, repeats, false, stream);
      const double gbs = k.bytes / (graph_ms * 1e-3) / 1e9;
      rows.push_back({{"kernel", k.name},
                      {"bytes", k.bytes},
                      {"copies", plan.n_copies},
                      {"working_set_bytes", plan.working_set_bytes},
                      {"launches_per_timing", plan.launches},
                      {"graph_us", graph_ms * 1e3},
                      {"eager_us", eager_ms * 1e3},
                      {"graph_gbs", gbs},
                      {"pct_of_copy_bw", 100.0 * gbs * 1e9 / copy_bw}});
      std::fprintf(stderr, "%-60s %8.2f us graph, %8.2f us eager, %7.1f GB/s (%.1f%% of copy; %lld copies, %.0f MiB)\n",
                   k.name.c_str(), graph_ms * 1e3, eager_ms * 1e3, gbs, 100.0 * gbs * 1e9 / copy_bw,
                   static_cast<long long>(plan.n_copies), static_cast<double>(plan.working_set_bytes) / (1 << 20));
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const std::string gpu = prop.name;
    json j{{"provenance",
            {{"command", lio::bench::command_line(argc, argv)},
             {"commit", lio::bench::git_commit()},
             {"machine", {{"cpu", lio::bench::cpu_name()}, {"gpu", gpu}, {"driver", lio::bench::gpu_driver()}}},
             {"date", lio::bench::utc_date()}}},
           {"model", lio::bench::local_path_free(model.path)},
           {"min_launches_per_timing", min_launches},
           {"repeats", repeats},
           {"l2_bytes", l2_bytes},
           {"hbm_working_set_target_bytes", lio::bench::hbm_working_set_target_bytes(l2_bytes)},
           {"copy_bytes", copy_bytes},
           {"copy_bandwidth_gbs", copy_bw / 1e9},
           {"kernels", rows}};
    std::printf("%s\n", j.dump(2).c_str());
    if (!out.empty()) {
      std::ofstream(out + ".json") << j.dump(2) << "\n";
      std::ofstream md(out + ".md");
      md << "# The decode step's matmuls on " << gpu << ", one kernel at a time\n\n"
         << lio::bench::provenance_markdown(argc, argv) << "- GPU: " << gpu << ", driver " << lio::bench::gpu_driver()
         << "; model " << lio::bench::local_path_free(model.path) << ", layer 0's weights as stored\n"
         << "- Device-to-device copy rate in the same run (read + write, " << (copy_bytes >> 20)
         << " MiB buffers): " << static_cast<long long>(copy_bw / 1e9) << " GB/s.\n"
         << "- From HBM: the L2 holds " << (l2_bytes >> 20) << " MiB, so each kernel cycles through copies of its "
         << "matrices, launch i on copy i % copies, one timing reading at least "
         << (lio::bench::hbm_working_set_target_bytes(l2_bytes) >> 20)
         << " MiB (max(4 x L2, 256 MiB); working set below). Each kernel: at least " << min_launches
         << " launches and one per copy, as one CUDA graph (graph) and back to back from the host (eager), median of "
         << repeats << " timings; GB/s = bytes per launch (weights, x, y) / graph time.\n\n"
         << "| kernel | bytes | copies | working set MiB | graph us | eager us | GB/s | % of copy |\n"
         << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
      for (const auto& r : rows) {
        char line[400];
        std::snprintf(line, sizeof line, "| %s | %.0f | %lld | %.0f | %.2f | %.2f | %.1f | %.1f |\n",
                      r["kernel"].get<std::string>().c_str(), r["bytes"].get<double>(),
                      static_cast<long long>(r["copies"].get<int64_t>()),
                      static_cast<double>(r["working_set_bytes"].get<int64_t>()) / (1 << 20),
                      r["graph_us"].get<double>(), r["eager_us"].get<double>(), r["graph_gbs"].get<double>(),
                      r["pct_of_copy_bw"].get<double>());
        md << line;
      }
    }
    return 0;
  });
}
