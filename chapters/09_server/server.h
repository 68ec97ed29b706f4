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
  /// --max-request-bytes: a larger request body is answered 413 before it is parsed (TGI's
  /// --payload-limit; cpp-httplib skips the body unread past the limit).
  int64_t max_request_bytes = int64_t{32} << 20;
  /// --max-model-len: prompt + max_tokens at most, in tokens (vLLM's flag); 0 = the model's
  /// context length, and at most that. A request over it is a 400 naming the field.
  int64_t max_model_len = 0;
  /// --max-input-tokens: prompt tokens at most (TGI's flag); 0 = max_model_len - 1. A longer
  /// prompt is a 400 before the engine sees it.
  int64_t max_input_tokens = 0;
  /// --shutdown-timeout: seconds the requests in flight get to finish after SIGTERM / SIGINT
  /// (shutdown()) before they are aborted; 0 aborts them at once.
  double shutdown_timeout_s = 20.0;
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
  /// Graceful shutdown (what SIGTERM does; Kubernetes sends it, then SIGKILL after its 30 s
  /// grace period): takes no new request from now on (each is answered 503 before any work,
  /// /health answers 503 "draining" so a load balancer looks elsewhere), lets the requests in
  /// flight finish for at most `timeout_s` seconds, aborts the rest (a stream gets an error
  /// event naming --shutdown-timeout, then [DONE]; a whole response a 503), closes the
  /// listening socket and makes serve() return (an idle keep-alive connection can hold that up
  /// to cpp-httplib's 5 s keep-alive timeout). The socket stays open while requests run because
  /// cpp-httplib 0.11 ends every open stream when it closes. Blocks until the abort; returns the
  /// requests aborted at the deadline (0: all finished). Thread-safe; call it from a thread
  /// other than serve()'s. Throws InvalidArgument for timeout_s < 0.
  int64_t shutdown(double timeout_s);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lio::server
