// ch08_tensor_parallel — chapter 08: one model over several ranks, and what the communication costs.
//
//   scripts/mpirun.sh -n 3 build/bin/ch08_tensor_parallel --tensor-parallel-size 3
//       every rank's shard (layers, heads, KV heads, d_ff, vocabulary rows) and the bytes its
//       backend and KV pool hold (measured on each rank); prefill and decode step time with the
//       driver's communication time split out (all-reduce, all-gather, pipeline sends) against the
//       cost model's prediction; the all-reduce's algorithm and bus bandwidth from 4 KiB to 64 MiB
//       (nccl-tests' formula) for MPI_Allreduce and for chapter 08's ring (Task 2); and the LM
//       head's two ways to pick a token: gather the logits, or gather only each rank's (max, index)
//   build/bin/ch08_tensor_parallel project
//       the cost model for Llama 2 7B and Llama 3.1 70B on 2/4/8 A100s over NVLink and PCIe
//       (published bandwidths): per-token decode time, compute vs communication. A projection.
// --json prints one object instead of tables (on the driver; the other ranks print nothing).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "lio/cli_common.h"
#include "lio/communicator.h"
#include "lio/error.h"
#include "lio/parallel.h"
#include "lio/tensor_parallel.h"

namespace {
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

json spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return json{{"median", median(v)}, {"min", v.front()}, {"max", v.back()}};
}

/// Seconds one all_reduce_sum of `n` floats takes on `comm` (every rank calls it; rank 0's
/// clock, after a barrier; repeated until 50 ms have passed, at least 3 calls).
double time_all_reduce(lio::Communicator& comm, std::vector<float>& buf, int64_t n) {
  comm.all_reduce_sum(buf.data(), n);  // warm-up
  int calls = 0;
  double elapsed = 0;
  int go = 1;
  float v = 0;
  while (go) {
    // As in the forward pass, this rank has just written the buffer (it sits in this core's
    // cache, not in the shared segment the transfer reads through).
    v += 1.0f;
    std::fill(buf.begin(), buf.begin() + n, v);
    comm.barrier();
    const double t0 = now_s();
    comm.all_reduce_sum(buf.data(), n);
    elapsed += now_s() - t0;
    ++calls;
    go = calls < 3 || elapsed < 0.05 ? 1 : 0;
    comm.broadcast(&go, sizeof(go), 0);  // rank 0 decides, so every rank makes the same calls
  }
  return elapsed / calls;
}

/// The all-reduce sweep of both algorithms over `world` (every rank calls it).
json all_reduce_sweep(lio::Communicator& library, lio::Communicator& ring) {
  json rows = json::array();
  const int p = library.size();
  std::vector<float> buf;
  for (int64_t bytes = 1 << 10; bytes <= (64 << 20); bytes *= 4) {
    const int64_t n = bytes / 4;
    buf.assign(static_cast<size_t>(n), 1.0f);
    json row{{"bytes", bytes}};
    for (lio::Communicator* c : {&library, &ring}) {
      const double t = time_all_reduce(*c, buf, n);
      const double algbw = static_cast<double>(bytes) / t / 1e9;
      const double busbw = algbw * 2.0 * (p - 1) / p;  // nccl-tests doc/PERFORMANCE.md
      row[c == &library ? "library" : "ring"] = json{{"us", t * 1e6}, {"algbw_GBps", algbw}, {"busbw_GBps", busbw}};
    }
    rows.push_back(row);
  }
  return rows;
}

struct PhaseTiming {
  std::vector<double> step_ms, comm_ms, all_reduce_ms, gather_ms, p2p_ms, wait_ms;
};

/// The driver's step: runs `batch`, returns wall seconds and adds its communication seconds.
void timed_step(lio::ModelRunner& runner, const lio::ForwardBatch& batch, PhaseTiming& t) {
  const lio::ParallelContext* par = runner.parallel();
  const lio::CommStats ar0 = par ? par->all_reduce : lio::CommStats{};
  const lio::CommStats ag0 = par ? par->all_gather : lio::CommStats{};
  const lio::CommStats p0 = par ? par->send_recv : lio::CommStats{};
  const lio::CommStats w0 = par ? par->wait : lio::CommStats{};
  const double t0 = now_s();
  runner.forward(batch);
  const double step = now_s() - t0;
  const double ar = par ? par->all_reduce.seconds - ar0.seconds : 0;
  const double ag = par ? par->all_gather.seconds - ag0.seconds : 0;
  const double pp = par ? par->send_recv.seconds - p0.seconds : 0;
  const double w = par ? par->wait.seconds - w0.seconds : 0;
  t.step_ms.push_back(step * 1e3);
  t.all_reduce_ms.push_back(ar * 1e3);
  t.gather_ms.push_back(ag * 1e3);
  t.p2p_ms.push_back(pp * 1e3);
  t.comm_ms.push_back((ar + ag + pp) * 1e3);
  t.wait_ms.push_back(w * 1e3);
}

json phase_json(const PhaseTiming& t) {
  return json{{"step_ms", spread(t.step_ms)},
              {"comm_ms", spread(t.comm_ms)},
              {"all_reduce_ms", spread(t.all_reduce_ms)},
              {"all_gather_ms", spread(t.gather_ms)},
              {"send_recv_ms", spread(t.p2p_ms)},
              {"wait_ms", spread(t.wait_ms)},
              {"compute_ms", median(t.step_ms) - median(t.comm_ms) - median(t.wait_ms)}};
}

// ---- the projection ----------------------------------------------------------------------------

/// A published model and link, for the cost model.
struct ProjectedModel {
  const char* name;
  double n_params, bits;
  int64_t n_layers, d_model, n_kv_heads, head_dim;
};
struct Link {
  const char* name;
  double bus_GBps;   ///< per GPU, one direction
  double latency_us; ///< per all-reduce of a small message (assumed; NCCL's low-latency protocols)
};

json projection() {
  // Llama 2 7B (Touvron et al. 2023, Table 1: 32 layers, d 4096, MHA 32 heads) in fp16, and
  // Llama 3.1 70B (Meta 2024: 80 layers, d 8192, 8 KV heads) in AWQ 4-bit group 128 (4.25 bits),
  // lecture note 000's deployment. A100 40 GB: 1,555 GB/s HBM2; NVLink 3: 600 GB/s total, 300 per
  // direction; PCIe 4.0 x16: 32 GB/s per direction (NVIDIA A100 datasheet).
  const ProjectedModel models[] = {{"Llama-2-7B fp16", 6.74e9, 16, 32, 4096, 32, 128},
                                   {"Llama-3.1-70B AWQ-4bit", 70.6e9, 4.25, 80, 8192, 8, 128}};
  const Link links[] = {{"NVLink 3 (A100)", 300, 8}, {"PCIe 4.0 x16", 32, 15}};
  const double hbm_GBps = 1555, card_bytes = 40e9;
  json rows = json::array();
  for (const ProjectedModel& m : models) {
    for (const Link& link : links) {
      for (int64_t tp : {1, 2, 4, 8}) {
        lio::TpMemoryInputs in;
        in.n_params = m.n_params;
        in.bits_per_weight = m.bits;
        in.n_layers = m.n_layers;
        in.n_kv_heads = m.n_kv_heads;
        in.head_dim = m.head_dim;
        in.gpu_bytes = card_bytes;
        in.tp_size = tp;
        const lio::RankMemory mem = lio::tp_rank_memory(in);  // Task 3
        for (int64_t batch : {1, 64}) {
          const lio::LayerCommVolume v = lio::layer_comm_volume(batch, m.d_model, 2, tp);  // Task 4
          // Decode step: every rank streams its weights once (bandwidth-bound), then 2 all-reduces
          // per layer, each t(M) = alpha + 2 (n - 1) / n M / busbw (the model ch08 fits on this
          // machine); Task 4's bytes_sent_per_rank is both all-reduces' 2 (n - 1) / n M.
          const double compute_ms = mem.weight_bytes / (hbm_GBps * 1e9) * 1e3;
          const double n_reduces = tp > 1 ? 2.0 : 0.0;
          const double comm_ms = static_cast<double>(m.n_layers) *
                                 (n_reduces * link.latency_us * 1e-3 + v.bytes_sent_per_rank / (link.bus_GBps * 1e9) * 1e3);
          rows.push_back(json{{"model", m.name},
                              {"link", link.name},
                              {"tp", tp},
                              {"batch", batch},
                              {"fits", mem.kv_budget_bytes > 0},
                              {"weight_GB_per_gpu", mem.weight_bytes / 1e9},
                              {"kv_tokens_per_gpu", mem.max_kv_tokens},
                              {"compute_ms", compute_ms},
                              {"comm_ms", comm_ms},
                              {"step_ms", compute_ms + comm_ms}});
        }
      }
    }
  }
  return json{{"label", "projection (cost model, published bandwidths; not measured)"},
              {"assumptions",
               {{"hbm_GBps", hbm_GBps},
                {"card_bytes", card_bytes},
                {"memory_utilization", 0.9},
                {"nvlink_bus_GBps", 300},
                {"pcie_bus_GBps", 32},
                {"latency_us_per_all_reduce", {{"nvlink", 8}, {"pcie", 15}}}}},
              {"rows", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ch08_tensor_parallel — tensor and pipeline parallelism: shards, step time, all-reduce bandwidth"};
  lio::CommonOptions o;
  int64_t prompt_tokens = 128;
  int64_t batch = 1;
  int64_t decode_steps = 16;
  int repeats = 3;
  bool skip_sweep = false;
  bool no_split_wait = false;
  int64_t micro_batches = 0;
  lio::add_model_flags(app, o);
  lio::add_device_flag(app, o);
  lio::add_kv_pool_flags(app, o);
  app.add_option("--prompt-tokens", prompt_tokens, "Prompt length of each sequence (the prefill step)")->capture_default_str();
  app.add_option("--batch", batch, "Sequences per step")->capture_default_str();
  app.add_option("--decode-steps", decode_steps, "Decode steps timed after each prefill")->capture_default_str();
  app.add_option("--repeats", repeats, "Prefill + decode rounds")->capture_default_str();
  app.add_flag("--no-sweep", skip_sweep, "Skip the all-reduce bandwidth sweep");
  app.add_option("--micro-batches", micro_batches,
                 "Pipeline micro-batches per step (0 = auto: as many as stages for steps of >= 64 rows per stage; "
                 "1 = none: one stage works at a time)")
      ->capture_default_str();
  app.add_flag("--no-split-wait", no_split_wait,
               "Time the collectives with the ranks' imbalance inside (no barrier before each; serving's setting)");
  CLI::App* project = app.add_subcommand("project", "The cost model for 7B and 70B on 2/4/8 GPUs (a projection)");
  project->fallthrough();  // --json after the subcommand too
  return lio::run_main(app, argc, argv, [&] {
    if (project->parsed()) {
      const json j = projection();
      if (o.json) {
        std::cout << j.dump(2) << "\n";
        return 0;
      }
      std::printf("%s\n%-24s %-16s %3s %5s %5s %9s %9s %9s %9s\n", j["label"].get<std::string>().c_str(), "model", "link",
                  "tp", "batch", "fits", "GB/gpu", "compute", "comm", "step ms");
      for (const json& r : j["rows"]) {
        std::printf("%-24s %-16s %3lld %5lld %5s %9.2f %9.3f %9.3f %9.3f\n", r["model"].get<std::string>().c_str(),
                    r["link"].get<std::string>().c_str(), static_cast<long long>(r["tp"].get<int64_t>()),
                    static_cast<long long>(r["batch"].get<int64_t>()), r["fits"].get<bool>() ? "yes" : "no",
                    r["weight_GB_per_gpu"].get<double>(), r["compute_ms"].get<double>(), r["comm_ms"].get<double>(),
                    r["step_ms"].get<double>());
      }
      return 0;
    }
    if (prompt_tokens < 1 || batch < 1 || decode_steps < 0 || repeats < 1) {
      throw lio::InvalidArgument("--prompt-tokens, --batch and --repeats must be >= 1, --decode-steps >= 0");
    }
    lio::apply_threads(o.threads);
    const lio::LoadedModel m = lio::load_from_options(o);
    const lio::ModelConfig& c = m.config;
    if (prompt_tokens + decode_steps > c.context_length) {
      throw lio::InvalidArgument("--prompt-tokens + --decode-steps exceed the context of " + std::to_string(c.context_length));
    }
    lio::KvPoolOptions pool = o.kv_pool;
    pool.dtype = lio::parse_kv_cache_dtype(o.kv_cache_dtype);
    const lio::AllReduceAlgorithm algorithm = lio::parse_all_reduce_algorithm(o.all_reduce);
    // Every rank builds its runner (collective), reports what it holds, then the driver runs.
    std::unique_ptr<lio::ModelRunner> runner = lio::make_parallel_runner(
        m, o.parallel, algorithm, lio::parse_device(o.device), pool, lio::activations_from_options(o),
        lio::parse_attention_backend(o.attention_backend));
    if (micro_batches < 0) throw lio::InvalidArgument("--micro-batches must be >= 0");
    if (runner->parallel() != nullptr) {
      runner->parallel()->split_wait = !no_split_wait;
      runner->parallel()->micro_batches = micro_batches;
    }
    std::unique_ptr<lio::Communicator> world = lio::world_communicator(algorithm);
    const int n_ranks = world->size();
    const lio::RankPlan plan = runner->parallel() ? runner->parallel()->plan : lio::RankPlan{};
    const lio::ModelConfig& local = runner->backend().config();
    const float mine[10] = {static_cast<float>(plan.tp_rank), static_cast<float>(plan.pp_rank),
                            static_cast<float>(local.n_layers), static_cast<float>(local.n_heads),
                            static_cast<float>(local.n_kv_heads), static_cast<float>(local.d_ff),
                            static_cast<float>(local.vocab_size), static_cast<float>(runner->backend().weight_bytes()),
                            static_cast<float>(runner->kv_pool().block_bytes() / runner->kv_pool().block_size()),
                            static_cast<float>(runner->kv_pool().n_blocks())};
    std::vector<float> shards(static_cast<size_t>(10 * n_ranks));
    world->all_gather(mine, shards.data(), 10);

    PhaseTiming prefill, decode;
    const int64_t bs = runner->kv_pool().block_size();
    const int64_t blocks_per_seq = (prompt_tokens + decode_steps + bs - 1) / bs;
    if (runner->is_driver()) {
      if (batch * blocks_per_seq > runner->kv_pool().n_blocks()) {
        runner->stop_workers();
        throw lio::InvalidArgument("--batch x (--prompt-tokens + --decode-steps) needs " +
                                   std::to_string(batch * blocks_per_seq) + " KV blocks; the pool has " +
                                   std::to_string(runner->kv_pool().n_blocks()) + " (raise --kv-cache-mib)");
      }
      std::mt19937 rng(8);
      std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab_size - 1));
      std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
      for (int64_t s = 0; s < batch; ++s) {
        for (int64_t b = 0; b < blocks_per_seq; ++b) tables[static_cast<size_t>(s)].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
      }
      for (int r = 0; r < repeats; ++r) {
        lio::ForwardBatch p(bs);
        for (int64_t s = 0; s < batch; ++s) {
          std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
          for (int32_t& t : prompt) t = token(rng);
          p.add_sequence(prompt, 0, tables[static_cast<size_t>(s)]);
        }
        timed_step(*runner, p, prefill);
        for (int64_t step = 0; step < decode_steps; ++step) {
          lio::ForwardBatch d(bs);
          for (int64_t s = 0; s < batch; ++s) {
            d.add_sequence(std::vector<int32_t>{token(rng)}, prompt_tokens + step, tables[static_cast<size_t>(s)]);
          }
          timed_step(*runner, d, decode);
        }
      }
      runner->stop_workers();
    } else {
      runner->serve_worker();
    }
    // Every rank's communication totals, then the sweep (all ranks take part in both).
    const lio::ParallelContext* par = runner->parallel();
    const float comm_mine[5] = {static_cast<float>(par ? par->all_reduce.seconds : 0),
                                static_cast<float>(par ? par->all_reduce.calls : 0),
                                static_cast<float>(par ? par->all_gather.seconds : 0),
                                static_cast<float>(par ? par->send_recv.seconds : 0),
                                static_cast<float>(par ? par->wait.seconds : 0)};
    std::vector<float> comm(static_cast<size_t>(5 * n_ranks));
    world->all_gather(comm_mine, comm.data(), 5);
    json sweep = json::array(), head = json::object();
    if (!skip_sweep && n_ranks > 1) {
      std::unique_ptr<lio::Communicator> library = lio::world_communicator(lio::AllReduceAlgorithm::Library);
      std::unique_ptr<lio::Communicator> ring = lio::world_communicator(lio::AllReduceAlgorithm::Ring);
      sweep = all_reduce_sweep(*library, *ring);
      // The LM head's choice, on the tensor-parallel group: gather every rank's logits rows, or
      // only each row's (max, index) and pick the winner (greedy decoding without the row).
      lio::Communicator& tp = par ? *par->tp : *world;
      const int64_t vocab_local = local.vocab_size;
      std::vector<float> logits(static_cast<size_t>(batch * vocab_local), 0.5f);
      std::vector<float> all(static_cast<size_t>(batch * vocab_local * tp.size()));
      std::vector<float> pairs(static_cast<size_t>(2 * batch)), all_pairs(static_cast<size_t>(2 * batch * tp.size()));
      auto time_gather = [&](const float* in, float* out, int64_t count) {
        int calls = 0, go = 1;
        double elapsed = 0;
        while (go) {
          tp.barrier();
          const double t0 = now_s();
          tp.all_gather(in, out, count);
          elapsed += now_s() - t0;
          go = ++calls < 5 || elapsed < 0.05 ? 1 : 0;
          tp.broadcast(&go, sizeof(go), 0);
        }
        return elapsed / calls * 1e6;
      };
      head = json{{"rows", batch},
                  {"gather_logits_us", time_gather(logits.data(), all.data(), batch * vocab_local)},
                  {"gather_logits_bytes_per_rank", batch * vocab_local * 4},
                  {"gather_argmax_us", time_gather(pairs.data(), all_pairs.data(), 2 * batch)},
                  {"gather_argmax_bytes_per_rank", 2 * batch * 4}};
    }
    if (!runner->is_driver()) {
      runner.reset();
      return 0;
    }
    // ---- the driver reports
    json ranks = json::array();
    for (int r = 0; r < n_ranks; ++r) {
      const float* s = shards.data() + 10 * r;
      const float* k = comm.data() + 5 * r;
      ranks.push_back(json{{"rank", r},
                           {"tp_rank", static_cast<int64_t>(s[0])},
                           {"pp_rank", static_cast<int64_t>(s[1])},
                           {"layers", static_cast<int64_t>(s[2])},
                           {"heads", static_cast<int64_t>(s[3])},
                           {"kv_heads", static_cast<int64_t>(s[4])},
                           {"d_ff", static_cast<int64_t>(s[5])},
                           {"vocab_rows", static_cast<int64_t>(s[6])},
                           {"weight_bytes", static_cast<int64_t>(s[7])},
                           {"kv_bytes_per_token", static_cast<int64_t>(s[8])},
                           {"kv_blocks", static_cast<int64_t>(s[9])},
                           {"all_reduce_s", k[0]},
                           {"all_reduces", static_cast<int64_t>(k[1])},
                           {"all_gather_s", k[2]},
                           {"send_recv_s", k[3]},
                           {"wait_s", k[4]}});
    }
    // The cost model's prediction of the driver's all-reduce time per step: (2 L + 1) all-reduces
    // of n_tokens x d_model floats (Task 4's volume), each t(M) = alpha + 2 (n-1)/n x M / busbw
    // (the ring's alpha-beta model, Patarasuk & Yuan 2009), read off this run's sweep: busbw the
    // least-squares slope over 64 KiB .. 4 MiB (bandwidth-bound), alpha what is left of the 1 KiB
    // time (latency-bound).
    json predicted = json::object();
    const int64_t tp_size = o.parallel.tensor_parallel_size;
    if (!sweep.empty() && tp_size > 1) {
      const char* alg = o.all_reduce == "ring" ? "ring" : "library";
      const double f = 2.0 * static_cast<double>(n_ranks - 1) / n_ranks;
      double n_pts = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
      for (const json& row : sweep) {
        const double bytes = static_cast<double>(row["bytes"].get<int64_t>());
        if (bytes < 65536 || bytes > 4 * 1048576.0) continue;
        const double x = f * bytes, y = row[alg]["us"].get<double>() * 1e-6;
        n_pts += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
      }
      const double inv_bw = (n_pts * sxy - sx * sy) / (n_pts * sxx - sx * sx);  // seconds per bus byte
      const double t_small = sweep.front()[alg]["us"].get<double>() * 1e-6;
      const double alpha_s = std::max(0.0, t_small - f * static_cast<double>(sweep.front()["bytes"].get<int64_t>()) * inv_bw);
      const int64_t n_reduces = 2 * plan.layer_end - 2 * plan.layer_begin + (plan.first_stage() ? 1 : 0);
      auto predict_ms = [&](int64_t n_tokens) {
        const lio::LayerCommVolume v = lio::layer_comm_volume(n_tokens, c.d_model, 4, tp_size);  // Task 4
        const double per_reduce_bytes = static_cast<double>(v.all_reduce_bytes) / 2.0;        // two per layer
        return static_cast<double>(n_reduces) * (alpha_s + f * per_reduce_bytes * inv_bw) * 1e3;
      };
      predicted = json{{"alpha_us", alpha_s * 1e6},
                       {"busbw_GBps", 1.0 / inv_bw / 1e9},
                       {"fit", "t(M) = alpha + 2(n-1)/n M / busbw; busbw: slope over 64 KiB..4 MiB; alpha: the 1 KiB time"},
                       {"all_reduces_per_step", n_reduces},
                       {"prefill_all_reduce_ms", predict_ms(batch * prompt_tokens)},
                       {"decode_all_reduce_ms", predict_ms(batch)}};
    }
    json out{{"model", c.name},
             {"tensor_parallel_size", tp_size},
             {"pipeline_parallel_size", o.parallel.pipeline_parallel_size},
             {"world_size", n_ranks},
             {"all_reduce", o.all_reduce},
             {"device", runner->device_description()},
             {"threads_per_rank", o.threads},
             {"split_wait", !no_split_wait},
             {"micro_batches", micro_batches},
             {"batch", batch},
             {"prompt_tokens", prompt_tokens},
             {"decode_steps", decode_steps},
             {"repeats", repeats},
             {"ranks", ranks},
             {"prefill", phase_json(prefill)},
             {"decode", phase_json(decode)},
             {"prefill_tok_s", static_cast<double>(batch * prompt_tokens) / median(prefill.step_ms) * 1e3},
             {"decode_tok_s", decode.step_ms.empty() ? 0.0 : static_cast<double>(batch) / median(decode.step_ms) * 1e3},
             {"predicted", predicted},
             {"all_reduce_sweep", sweep},
             {"lm_head", head}};
    if (o.json) {
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::printf("%s: TP %lld x PP %lld over %d rank(s), %s\n\n", c.name.c_str(), static_cast<long long>(tp_size),
                static_cast<long long>(o.parallel.pipeline_parallel_size), n_ranks, runner->device_description().c_str());
    std::printf("%4s %3s %3s %6s %5s %8s %6s %10s %12s %14s %12s\n", "rank", "tp", "pp", "layers", "heads", "kv_heads",
                "d_ff", "vocab_rows", "weight_MB", "KV_B/token", "all-reduce s");
    for (const json& r : ranks) {
      std::printf("%4lld %3lld %3lld %6lld %5lld %8lld %6lld %10lld %12.2f %14lld %12.4f\n",
                  static_cast<long long>(r["rank"].get<int64_t>()), static_cast<long long>(r["tp_rank"].get<int64_t>()),
                  static_cast<long long>(r["pp_rank"].get<int64_t>()), static_cast<long long>(r["layers"].get<int64_t>()),
                  static_cast<long long>(r["heads"].get<int64_t>()), static_cast<long long>(r["kv_heads"].get<int64_t>()),
                  static_cast<long long>(r["d_ff"].get<int64_t>()), static_cast<long long>(r["vocab_rows"].get<int64_t>()),
                  static_cast<double>(r["weight_bytes"].get<int64_t>()) / 1e6,
                  static_cast<long long>(r["kv_bytes_per_token"].get<int64_t>()), r["all_reduce_s"].get<double>());
    }
    for (const char* phase : {"prefill", "decode"}) {
      const json& p = out[phase];
      std::printf("\n%-8s step %8.3f ms (min %.3f, max %.3f): compute %.3f ms, waiting for the other ranks %.3f ms, "
                  "communication %.3f ms (all-reduce %.3f, all-gather %.3f, send/recv %.3f)",
                  phase, p["step_ms"]["median"].get<double>(), p["step_ms"]["min"].get<double>(),
                  p["step_ms"]["max"].get<double>(), p["compute_ms"].get<double>(), p["wait_ms"]["median"].get<double>(),
                  p["comm_ms"]["median"].get<double>(),
                  p["all_reduce_ms"]["median"].get<double>(), p["all_gather_ms"]["median"].get<double>(),
                  p["send_recv_ms"]["median"].get<double>());
      if (!predicted.empty()) {
        std::printf("; cost model: all-reduce %.3f ms", predicted[std::string(phase) + "_all_reduce_ms"].get<double>());
      }
      std::printf("\n");
    }
    if (!sweep.empty()) {
      std::printf("\nall-reduce over %d ranks (busbw = algbw x 2(n-1)/n, nccl-tests):\n%10s %12s %12s %12s %12s\n",
                  n_ranks, "bytes", "library us", "busbw GB/s", "ring us", "busbw GB/s");
      for (const json& r : sweep) {
        std::printf("%10lld %12.1f %12.3f %12.1f %12.3f\n", static_cast<long long>(r["bytes"].get<int64_t>()),
                    r["library"]["us"].get<double>(), r["library"]["busbw_GBps"].get<double>(), r["ring"]["us"].get<double>(),
                    r["ring"]["busbw_GBps"].get<double>());
      }
      std::printf("\nLM head, %lld row(s): gather the logits %.1f us (%lld B per rank) vs gather (max, index) %.1f us (%lld B)\n",
                  static_cast<long long>(batch), head["gather_logits_us"].get<double>(),
                  static_cast<long long>(head["gather_logits_bytes_per_rank"].get<int64_t>()),
                  head["gather_argmax_us"].get<double>(),
                  static_cast<long long>(head["gather_argmax_bytes_per_rank"].get<int64_t>()));
    }
    return 0;
  });
}
