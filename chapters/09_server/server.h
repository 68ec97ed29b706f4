// server.h — the OpenAI-compatible HTTP server over one Engine.
//
// Threads: one engine thread drives Engine::step() and hands each output to the request it
// belongs to (a per-request queue, mutex + condition variable); a pool of HTTP threads parses
// and validates requests, calls Engine::add_request (thread-safe), then waits on its queue and
// answers — whole, or streamed as server-sent events. A client that goes away has its
// request aborted (Engine::abort_request), which frees its KV blocks at the next step.
// Endpoints: GET /v1/models, GET /v1/models/{id}, POST /v1/completions,
// POST /v1/chat/completions, GET /health, GET /metrics, and GET / (a chat page over the same API,
// chapters/09_server/web/index.html, compiled in).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lio/engine.h"
#include "lio/model_config.h"
#include "lio/tokenizer.h"
#include "metrics.h"
#include "openai_protocol.h"

namespace lio::server {

/// Server settings (the lio-server flags).
struct ServerConfig {
  std::string host = "127.0.0.1";  ///< --host: address to listen on
  int port = 8000;                 ///< --port: TCP port; 0 = any free port (see port())
  std::string api_key;  ///< --api-key: required as "Authorization: Bearer KEY" on /v1/*; "" = open
  std::string served_model_name;  ///< --served-model-name: the `model` clients name
  int64_t max_queue = 512;  ///< --max-queue: prompts waiting at most; more are refused with 503
  int http_threads = 128;   ///< --http-threads: HTTP worker threads (one per open connection)
  RequestLimits limits;     ///< n and prompt-list limits
  SloConfig slo;            ///< --slo-ttft-ms, --slo-tpot-ms (goodput)
};

/// An OpenAI-compatible server over `engine`. Owns the engine thread; the engine, tokenizer
/// and model config must outlive it.
class OpenAiServer {
 public:
  /// Sets up the routes; starts nothing yet.
  OpenAiServer(Engine& engine, const Tokenizer& tokenizer, const ModelConfig& model,
               const ServerConfig& config);
  /// Stops serving and joins the engine thread.
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  /// Binds config.host:config.port. Throws InvalidArgument if it cannot (address in use, bad
  /// host).
  void bind();
  /// The bound port (the one picked when config.port was 0); valid after bind().
  int port() const;
  /// Starts the engine thread and serves until stop(); blocks. Call bind() first.
  void serve();
  /// Makes serve() return: open streams end, waiting requests are aborted. Thread-safe; may be
  /// called before serve().
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lio::server
