// bench_cuda_gemv — the decode step's matmuls, one kernel at a time, on the model's own weights:
// device time per launch and achieved GB/s against a device-to-device copy measured in the same
// run (issue 45's goal: at least 60% of copy bandwidth on SmolLM2's Q4_1 matrices at batch 1).
//
// Each kernel is timed two ways (CUDA events, median of --repeats):
//   graph:  R launches captured into one CUDA graph, replayed: the kernel's device time with the
//           per-launch host work gone — what a graph-replayed decode step pays per kernel;
//   eager:  R launches from the host, back to back: what an eager step pays (launch-bound when
//           the kernel is shorter than its launch).
// Bytes per launch: the matrix (every weight read once) plus x and y; the fused kernels also
// read x once per block (from L2), which is not counted. Kernels: cuda::gemv on layer 0's
// W_q, W_k, W_o, W_gate, W_down and the LM head, cuda::gemv_q4_1_wide (issue 45's wide Q4_1
// reader) on W_q, W_gate and W_down; cuda::rmsnorm_gemv_many on W_q/W_k/W_v and
// cuda::rmsnorm_gemv_swiglu on W_gate/W_up (issue 45's fused kernels) against the unfused
// launches they replace. Writes --out.json and --out.md (command, commit, GPU, driver, date).
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "copy_bandwidth.h"
#include "cuda_check.h"
#include "cuda_ops.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/cli_common.h"
#include "lio/model_loader.h"

namespace {

using json = nlohmann::ordered_json;
using lio::cuda::DeviceBuffer;
using lio::cuda::DeviceMatrix;

/// A weight matrix of the loaded model copied to the device as stored.
struct DeviceWeight {
  DeviceBuffer<std::byte> bytes;
  DeviceMatrix m;
  explicit DeviceWeight(const lio::WeightMatrix& w)
      : bytes(w.size_bytes()), m{w.dtype, w.rows, w.cols, w.row_bytes, nullptr} {
    bytes.copy_from_host(w.data, w.size_bytes());
    m.data = bytes.data();
  }
};

/// Milliseconds of `launch` queued `reps` times on `stream`, median of `repeats` timings, as a
/// graph replay (graph = true) or eagerly.
double time_launches(const std::function<void(cudaStream_t)>& launch, int reps, int repeats, bool graph,
                     cudaStream_t stream) {
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < reps; ++i) launch(stream);
    CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  const auto run = [&] {
    if (graph) {
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
    } else {
      for (int i = 0; i < reps; ++i) launch(stream);
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
    ms.push_back(t / reps);
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
  int reps = 200, repeats = 5;
  std::string out;
  app.add_option("--launches", reps, "Launches per timing (one graph, or back to back)")->capture_default_str();
  app.add_option("--repeats", repeats, "Timings per kernel; medians are reported")->capture_default_str();
  app.add_option("--out", out, "Write OUT.json and OUT.md (default: JSON on stdout only)");
  return lio::run_main(app, argc, argv, [&]() -> int {
    if (reps < 1 || repeats < 1) throw lio::InvalidArgument("--launches and --repeats must be >= 1");
    if (!lio::cuda::cuda_available()) throw lio::UnsupportedError("bench_cuda_gemv: no CUDA device is available");
    const lio::LoadedModel model = lio::load_from_options(o);
    const lio::ModelConfig& c = model.config;
    if (model.weights.layers.empty() || model.weights.layers[0].wk.data == nullptr) {
      throw lio::UnsupportedError("bench_cuda_gemv: needs a model with GQA layers (Q, K, V, O, gate, up, down)");
    }
    const lio::LayerWeights& L = model.weights.layers[0];
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreate(&stream));
    const double copy_bw = lio::bench::measure_copy_bandwidth(int64_t{1} << 30, repeats);

    const DeviceWeight wq(L.wq), wk(L.wk), wv(L.wv), wo(L.wo), gate(L.w_gate), up(L.w_up), down(L.w_down);
    const DeviceWeight head(model.weights.output);
    const int64_t width = std::max({c.d_model, c.d_ff, c.q_dim(), c.vocab_size});
    DeviceBuffer<float> x(width), y(width), y2(width), y3(width), norm(c.d_model);
    CUDA_CHECK(cudaMemset(x.data(), 0, x.size_bytes()));
    std::vector<float> ones(static_cast<size_t>(c.d_model), 1.0f);
    norm.copy_from_host(ones.data(), c.d_model);
    const float eps = c.rms_norm_eps;

    struct Case {
      std::string name;
      double bytes;  // per launch: weights + x + y
      std::function<void(cudaStream_t)> launch;
    };
    const auto gemv_case = [&](const char* name, const DeviceMatrix& w) {
      return Case{std::string("gemv ") + name + " (" + std::to_string(w.rows) + "x" + std::to_string(w.cols) + " " +
                      std::string(lio::dtype_info(w.dtype).name) + ")",
                  static_cast<double>(w.size_bytes() + 4 * (w.rows + w.cols)),
                  [&, w](cudaStream_t s) { lio::cuda::gemv(w, x.data(), y.data(), false, s); }};
    };
    std::vector<Case> cases = {gemv_case("W_q", wq.m),       gemv_case("W_k", wk.m),     gemv_case("W_o", wo.m),
                               gemv_case("W_gate", gate.m), gemv_case("W_down", down.m), gemv_case("LM head", head.m)};
    // Issue 45's wide Q4_1 reader on the same matrices (4-byte aligned Q4_1 only).
    for (const auto& [name, w] : {std::pair<const char*, const DeviceMatrix*>{"W_q", &wq.m}, {"W_gate", &gate.m},
                                  {"W_down", &down.m}}) {
      if (!lio::cuda::gemv_wide_supports(*w)) continue;
      Case k = gemv_case(name, *w);
      k.name = "wide " + k.name;
      const DeviceMatrix mat = *w;
      k.launch = [&, mat](cudaStream_t s) { lio::cuda::gemv_q4_1_wide(mat, x.data(), y.data(), false, s); };
      cases.push_back(std::move(k));
    }
    const double qkv_bytes = static_cast<double>(wq.m.size_bytes() + wk.m.size_bytes() + wv.m.size_bytes());
    cases.push_back({"unfused: rmsnorm + gemv W_q, W_k, W_v (4 launches)", qkv_bytes, [&](cudaStream_t s) {
                       lio::cuda::rmsnorm(x.data(), norm.data(), y3.data(), 1, c.d_model, eps, s);
                       lio::cuda::gemv(wq.m, y3.data(), y.data(), false, s);
                       lio::cuda::gemv(wk.m, y3.data(), y2.data(), false, s);
                       lio::cuda::gemv(wv.m, y3.data(), y2.data(), false, s);
                     }});
    if (lio::cuda::fused_gemv_supports(c.d_model)) {
      cases.push_back({"fused: rmsnorm_gemv_many W_q, W_k, W_v (1 launch)", qkv_bytes, [&](cudaStream_t s) {
                         const lio::cuda::FusedGemvOut outs[] = {{wq.m, y.data()}, {wk.m, y2.data()}, {wv.m, y3.data()}};
                         lio::cuda::rmsnorm_gemv_many(x.data(), norm.data(), c.d_model, eps, outs, s);
                       }});
    }
    const double mlp_bytes = static_cast<double>(gate.m.size_bytes() + up.m.size_bytes());
    cases.push_back({"unfused: rmsnorm + gemv W_gate, W_up + swiglu (4 launches)", mlp_bytes, [&](cudaStream_t s) {
                       lio::cuda::rmsnorm(x.data(), norm.data(), y3.data(), 1, c.d_model, eps, s);
                       lio::cuda::gemv(gate.m, y3.data(), y.data(), false, s);
                       lio::cuda::gemv(up.m, y3.data(), y2.data(), false, s);
                       lio::cuda::swiglu(y.data(), y2.data(), y.data(), c.d_ff, s);
                     }});
    if (lio::cuda::fused_gemv_supports(c.d_model)) {
      cases.push_back({"fused: rmsnorm_gemv_swiglu W_gate, W_up (1 launch)", mlp_bytes, [&](cudaStream_t s) {
                         lio::cuda::rmsnorm_gemv_swiglu(x.data(), norm.data(), c.d_model, eps, gate.m, up.m, y.data(), s);
                       }});
    }

    json rows = json::array();
    for (const Case& k : cases) {
      const double graph_ms = time_launches(k.launch, reps, repeats, true, stream);
      const double eager_ms = time_launches(k.launch, reps, repeats, false, stream);
      const double gbs = k.bytes / (graph_ms * 1e-3) / 1e9;
      rows.push_back({{"kernel", k.name},
                      {"bytes", k.bytes},
                      {"graph_us", graph_ms * 1e3},
                      {"eager_us", eager_ms * 1e3},
                      {"graph_gbs", gbs},
                      {"pct_of_copy_bw", 100.0 * gbs * 1e9 / copy_bw}});
      std::fprintf(stderr, "%-60s %8.2f us graph, %8.2f us eager, %7.1f GB/s (%.1f%% of copy)\n", k.name.c_str(),
                   graph_ms * 1e3, eager_ms * 1e3, gbs, 100.0 * gbs * 1e9 / copy_bw);
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
           {"launches_per_timing", reps},
           {"repeats", repeats},
           {"copy_bandwidth_gbs", copy_bw / 1e9},
           {"kernels", rows}};
    std::printf("%s\n", j.dump(2).c_str());
    if (!out.empty()) {
      std::ofstream(out + ".json") << j.dump(2) << "\n";
      std::ofstream md(out + ".md");
      md << "# The decode step's matmuls on " << gpu << ", one kernel at a time\n\n"
         << lio::bench::provenance_markdown(argc, argv) << "- GPU: " << gpu << ", driver " << lio::bench::gpu_driver()
         << "; model " << lio::bench::local_path_free(model.path) << ", layer 0's weights as stored\n"
         << "- Device-to-device copy rate in the same run (read + write): " << static_cast<long long>(copy_bw / 1e9)
         << " GB/s. Each kernel: " << reps << " launches as one CUDA graph (graph) and back to back from the host "
         << "(eager), median of " << repeats << " timings; GB/s = bytes per launch (weights, x, y) / graph time.\n\n"
         << "| kernel | bytes | graph us | eager us | GB/s | % of copy |\n|---|---:|---:|---:|---:|---:|\n";
      for (const auto& r : rows) {
        char line[320];
        std::snprintf(line, sizeof line, "| %s | %.0f | %.2f | %.2f | %.1f | %.1f |\n",
                      r["kernel"].get<std::string>().c_str(), r["bytes"].get<double>(), r["graph_us"].get<double>(),
                      r["eager_us"].get<double>(), r["graph_gbs"].get<double>(), r["pct_of_copy_bw"].get<double>());
        md << line;
      }
    }
    return 0;
  });
}
