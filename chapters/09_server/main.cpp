// lio-server — chapter 09, the capstone: the engine (with whichever chapters are yours) behind
// an OpenAI-compatible HTTP API.
//
//   build/bin/lio-server                         # default model on http://127.0.0.1:8000
//   curl localhost:8000/v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}]}'
//
// Any OpenAI client works: base_url="http://127.0.0.1:8000/v1". See docs/09_server.md.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "lio/cli_common.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "server.h"

namespace {

/// SIGINT and SIGTERM, which stop the server.
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

/// Shuts `server` down gracefully on SIGINT or SIGTERM (OpenAiServer::shutdown: no new
/// request, the requests in flight get `timeout_s` to finish, the rest are aborted): main
/// blocks both signals before any thread starts (OpenMP's, the engine's, the HTTP pool's inherit
/// the mask), and this thread takes them synchronously with sigwait, so the shutdown runs in a
/// normal thread rather than in a signal handler. The thread
/// is joined before the server is destroyed (the destructor wakes it when no signal came):
/// ThreadSanitizer caught a detached one still inside stop() while main, its serve() returned,
/// destroyed the engine loop's condition variable under it.
class StopOnSignal {
 public:
  StopOnSignal(lio::server::OpenAiServer& server, double timeout_s)
      : thread_([this, &server, timeout_s] {
          const sigset_t set = stop_signals();
          int sig = 0;
          sigwait(&set, &sig);
          if (exiting_.load()) return;  // the destructor's wake-up, not a signal from outside
          std::fprintf(stderr,
                       "lio-server: %s: no new requests; those in flight get %.0f s "
                       "(--shutdown-timeout)\n",
                       sig == SIGINT ? "SIGINT" : "SIGTERM", timeout_s);
          const auto t0 = std::chrono::steady_clock::now();
          const int64_t aborted = server.shutdown(timeout_s);
          const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (aborted > 0)
            std::fprintf(stderr, "lio-server: stopped after %.1f s, %lld request(s) aborted at the deadline\n", took,
                         static_cast<long long>(aborted));
          else
            std::fprintf(stderr, "lio-server: stopped after %.1f s, every request finished\n", took);
        }) {}
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  ~StopOnSignal() {
    exiting_ = true;
    pthread_kill(thread_.native_handle(), SIGTERM);  // blocked everywhere: only sigwait takes it
    thread_.join();
  }

 private:
  std::atomic<bool> exiting_{false};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  const sigset_t signals = stop_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a kill
  CLI::App app{
      "lio-server: an OpenAI-compatible server (/v1/completions, /v1/chat/completions, /v1/models, "
      "/health, /metrics) over the LIO engine"};
  lio::CommonOptions o;
  lio::server::ServerConfig sc;
  lio::EngineConfig ec;
  std::string prefix_cache = "none";
  lio::add_model_flags(app, o);
  app.remove_option(app.get_option("--json"));  // the server speaks JSON over HTTP
  o.activations = "auto";  // issue 44: the serving commands' default, chosen by measurement
  lio::add_device_flag(app, o);
  lio::add_kv_pool_flags(app, o, /*engine=*/true);
  lio::add_speculative_flags(app, o);
  app.add_option("--host", sc.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", sc.port, "TCP port (0 = any free port; the one taken is printed)")
      ->capture_default_str();
  app.add_option(
         "--api-key", sc.api_key,
         "Require 'Authorization: Bearer KEY' on /v1/* (default: $LIO_API_KEY; none = open)")
      ->envname("LIO_API_KEY");
  app.add_option(
      "--served-model-name", sc.served_model_name,
      "The model name clients send and responses carry (default: the model file's stem)");
  app.add_option("--max-num-seqs", ec.scheduler.max_num_seqs,
                 "Sequences in one engine step at most")
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", ec.scheduler.max_num_batched_tokens,
                 "Tokens (rows) in one engine step at most")
      ->capture_default_str();
  app.add_option("--prefix-cache", prefix_cache,
                 "Reuse the K/V of cached prompt prefixes: none, hash (full blocks, vLLM) or radix "
                 "(SGLang)")
      ->capture_default_str();
  app.add_option("--max-queue", sc.max_queue,
                 "Prompts waiting to be scheduled at most; more get 503")
      ->capture_default_str();
  app.add_option("--http-threads", sc.http_threads,
                 "HTTP worker threads: each open connection (a streaming client) holds one")
      ->capture_default_str();
  app.add_option("--max-request-bytes", sc.max_request_bytes,
                 "Request bodies larger than this get 413 before they are parsed (TGI's --payload-limit)")
      ->capture_default_str();
  app.add_option("--max-model-len", sc.max_model_len,
                 "Prompt + max_tokens at most, in tokens (vLLM's flag; 0 = the model's context); more is a 400")
      ->capture_default_str();
  app.add_option("--max-input-tokens", sc.max_input_tokens,
                 "Prompt tokens at most (TGI's flag; 0 = --max-model-len - 1); a longer prompt is a 400")
      ->capture_default_str();
  app.add_option("--shutdown-timeout", sc.shutdown_timeout_s,
                 "On SIGTERM / SIGINT: seconds the requests in flight get to finish before they are "
                 "aborted (new requests get 503 meanwhile); then exit 0")
      ->capture_default_str();
  app.add_option("--slo-ttft-ms", sc.slo.ttft_ms,
                 "Goodput SLO: time to first token at most this (ms; 0 = none)")
      ->capture_default_str();
  app.add_option("--slo-tpot-ms", sc.slo.tpot_ms,
                 "Goodput SLO: time per output token at most this (ms; 0 = none)")
      ->capture_default_str();

  return lio::run_main(app, argc, argv, [&] {
    lio::apply_threads(o.threads);
    ec.scheduler.validate();
    ec.prefix_cache = lio::parse_prefix_cache_mode(prefix_cache);
    lio::parse_device(o.device);  // a bad --device fails before the model loads
    lio::parse_spec_method(o.spec_method);
    if (sc.port < 0 || sc.port > 65535)
      throw lio::InvalidArgument("--port must be in [0, 65535], got " + std::to_string(sc.port));

    lio::LoadedModel m = lio::load_from_options(o);
    ec.speculative = lio::speculative_from_options(m, o);
    std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(m, o);
    if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
    lio::DraftRunner draft = lio::draft_from_options(m, *runner, o, ec.speculative);
    ec.enforce_eager = o.enforce_eager;
    lio::Engine engine(*runner, *m.tokenizer, ec, draft.runner.get());
    if (sc.served_model_name.empty())
      sc.served_model_name = std::filesystem::path(m.path).stem().string();

    lio::server::OpenAiServer server(engine, *m.tokenizer, m.config, sc);
    server.bind();
    const lio::KvPool& pool = runner->kv_pool();
    std::fprintf(stderr, "model   %s (%s), context %lld tokens\n", m.path.c_str(),
                 sc.served_model_name.c_str(), (long long)m.config.context_length);
    std::fprintf(stderr, "device  %s\n", runner->device_description().c_str());
    std::fprintf(stderr,
                 "KV pool %.1f MiB: %lld blocks x %lld tokens, %s; max_num_seqs %lld, "
                 "max_num_batched_tokens %lld, prefix cache %s\n",
                 pool.size_bytes() / 1048576.0, (long long)pool.n_blocks(),
                 (long long)pool.block_size(), lio::kv_cache_dtype_name(pool.dtype()),
                 (long long)ec.scheduler.max_num_seqs,
                 (long long)ec.scheduler.max_num_batched_tokens, prefix_cache.c_str());
    const std::string graphs = lio::describe_graph_capture(engine.graph_capture(), o);
    if (!graphs.empty()) std::fprintf(stderr, "graphs  %s\n", graphs.c_str());
    if (ec.speculative.method != lio::SpecMethod::None) {
      std::fprintf(stderr, "spec    %s, %lld speculative tokens per step%s%s\n", o.spec_method.c_str(),
                   (long long)ec.speculative.num_speculative_tokens,
                   o.draft_model.empty() ? "" : (", draft " + o.draft_model).c_str(),
                   ec.speculative.acceptance == lio::SpecAcceptance::Typical
                       ? ", typical acceptance (LOSSY when sampling: not the model's distribution)"
                       : "");
    }
    std::fprintf(stderr, "lio-server: listening on http://%s:%d%s\n", sc.host.c_str(),
                 server.port(), sc.api_key.empty() ? "" : " (API key required)");
    StopOnSignal stop_on_signal(server, sc.shutdown_timeout_s);  // joined before `server` is destroyed
    server.serve();
    return 0;
  });
}
