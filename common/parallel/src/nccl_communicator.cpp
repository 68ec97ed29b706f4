// nccl_communicator.cpp — NcclCommunicator (LIO_HAVE_NCCL builds: nccl.h found) or the refusal
// without it. libnccl.so.2 is loaded at run time (dlopen), so no binary needs it to start.
#include "lio/nccl_communicator.h"

#include <string>
#include <type_traits>

#include "lio/error.h"
#include "lio/poll_until.h"

#if LIO_HAVE_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#endif

namespace lio {

#if LIO_HAVE_NCCL

namespace {

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw CommError(std::string(call) + " failed: " + cudaGetErrorString(e));
}

/// The NCCL entry points LIO calls, resolved from libnccl.so.2 (same ABI as the nccl.h LIO was
/// compiled with: NCCL 2.x keeps it).
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) get_async_error = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string error;  ///< why loading failed; empty when every entry point resolved
};

NcclApi load_nccl() {
  NcclApi api;
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    api.error = std::string("libnccl.so.2 could not be loaded (") + (why ? why : "unknown reason") + ")";
    return api;
  }
  const auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr && api.error.empty()) api.error = std::string("libnccl.so.2 has no ") + name;
  };
  resolve(api.get_unique_id, "ncclGetUniqueId");
  resolve(api.init_rank_config, "ncclCommInitRankConfig");
  resolve(api.get_async_error, "ncclCommGetAsyncError");
  resolve(api.abort, "ncclCommAbort");
  resolve(api.destroy, "ncclCommDestroy");
  resolve(api.all_reduce, "ncclAllReduce");
  resolve(api.all_gather, "ncclAllGather");
  resolve(api.broadcast, "ncclBroadcast");
  resolve(api.group_start, "ncclGroupStart");
  resolve(api.group_end, "ncclGroupEnd");
  resolve(api.send, "ncclSend");
  resolve(api.recv, "ncclRecv");
  resolve(api.error_string, "ncclGetErrorString");
  return api;  // the library stays loaded for the process's life
}

/// The process's NCCL, loaded on first use and read-only afterwards (a shared library is
/// process-wide state by nature; nothing here changes after the load).
const NcclApi& nccl() {
  static const NcclApi api = load_nccl();
  return api;
}

/// NCCL over the ranks of a bootstrap (MPI) communicator, on GPU `device`, in NCCL's
/// non-blocking mode (ncclConfig_t::blocking = 0): every call returns at once, and each wait polls
/// ncclCommGetAsyncError next to the stream, so a failed or hung peer becomes a CommError (after
/// ncclCommAbort) within comm_timeout_seconds() instead of a hang.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, int device)
      : bootstrap_(bootstrap.split(0, bootstrap.rank())), device_(device), timeout_s_(comm_timeout_seconds()) {
    ncclUniqueId id{};
    if (bootstrap_->rank() == 0) check_nccl(nccl().get_unique_id(&id), "ncclGetUniqueId");
    bootstrap_->broadcast(&id, sizeof(id), 0);
    check_cuda(cudaSetDevice(device_), "cudaSetDevice (NCCL)");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    try {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      started(nccl().init_rank_config(&comm_, bootstrap_->size(), id, bootstrap_->rank(), &config),
              "ncclCommInitRankConfig");
      wait_for_comm("ncclCommInitRankConfig");
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclCommunicator() override { release(); }
  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  std::string name() const override { return "nccl"; }
  CommMemory memory_kind() const override { return CommMemory::Device; }
  void all_reduce_sum(float* data, int64_t n) override {
    if (n < 0) throw InvalidArgument("all_reduce_sum: negative count " + std::to_string(n));
    if (n == 0) return;
    enqueue(nccl().all_reduce(data, data, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
  }
  void all_gather(const float* in, float* out, int64_t n) override {
    if (n < 0) throw InvalidArgument("all_gather: negative count " + std::to_string(n));
    enqueue(nccl().all_gather(in, out, static_cast<size_t>(n), ncclFloat, comm_, stream_), "ncclAllGather");
  }
  void broadcast(void* data, int64_t n_bytes, int root) override {
    if (n_bytes < 0 || root < 0 || root >= size()) throw InvalidArgument("broadcast: bad root or count");
    enqueue(nccl().broadcast(data, data, static_cast<size_t>(n_bytes), ncclChar, root, comm_, stream_), "ncclBroadcast");
  }
  void barrier() override { bootstrap_->barrier(); }
  void send_recv(const float* send, int64_t n_send, int dest, float* recv, int64_t n_recv, int source) override {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice (NCCL)");
    started(nccl().group_start(), "ncclGroupStart");
    if (n_send > 0) started(nccl().send(send, static_cast<size_t>(n_send), ncclFloat, dest, comm_, stream_), "ncclSend");
    if (n_recv > 0) started(nccl().recv(recv, static_cast<size_t>(n_recv), ncclFloat, source, comm_, stream_), "ncclRecv");
    started(nccl().group_end(), "ncclGroupEnd");
    wait("ncclSend / ncclRecv");
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> sub = bootstrap_->split(color, key);
    return std::make_unique<NcclCommunicator>(*sub, device_);
  }

 private:
  /// Aborts the communicator (so no rank waits on it any more) and throws CommError for `r`.
  [[noreturn]] void fail(ncclResult_t r, const std::string& call) {
    abort();
    throw CommError(call + " failed: " + nccl().error_string(r) + " (NCCL on GPU " + std::to_string(device_) + ")");
  }
  void abort() {
    if (comm_ != nullptr && !aborted_) {
      nccl().abort(comm_);
      aborted_ = true;
    }
  }
  /// Destroys the communicator (unless aborted: ncclCommAbort released it) and the stream.
  void release() noexcept {
    cudaSetDevice(device_);
    if (comm_ != nullptr && !aborted_) nccl().destroy(comm_);
    comm_ = nullptr;
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
  void check_nccl(ncclResult_t r, const char* call) {
    if (r != ncclSuccess) fail(r, call);
  }
  /// A call of the non-blocking API: ncclSuccess or ncclInProgress are fine, anything else fails.
  void started(ncclResult_t r, const char* call) {
    if (r != ncclSuccess && r != ncclInProgress) fail(r, call);
  }
  /// Polls the communicator's asynchronous state until no call is in progress.
  void wait_for_comm(const char* call) {
    poll_until(
        [&] {
          ncclResult_t state = ncclSuccess;
          const ncclResult_t r = nccl().get_async_error(comm_, &state);
          if (r != ncclSuccess) fail(r, "ncclCommGetAsyncError");
          if (state == ncclInProgress) return PollState::Pending;
          if (state != ncclSuccess) fail(state, call);
          return PollState::Done;
        },
        timeout_s_, call, [&] { abort(); });
  }
  /// Queues one collective, then waits for it (the Communicator contract: data in place on return).
  void enqueue(ncclResult_t r, const char* call) {
    started(r, call);
    wait(call);
  }
  /// Waits until the collective is enqueued and its stream has run it, polling NCCL's error state
  /// all the while; a peer that never joins ends in CommError after timeout_s_.
  void wait(const char* call) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice (NCCL)");
    wait_for_comm(call);
    poll_until(
        [&] {
          const cudaError_t q = cudaStreamQuery(stream_);
          if (q == cudaSuccess) return PollState::Done;
          if (q != cudaErrorNotReady) {
            abort();
            throw CommError(std::string(call) + ": the stream failed: " + cudaGetErrorString(q));
          }
          ncclResult_t state = ncclSuccess;
          const ncclResult_t r = nccl().get_async_error(comm_, &state);
          if (r != ncclSuccess) fail(r, "ncclCommGetAsyncError");
          if (state != ncclSuccess && state != ncclInProgress) fail(state, call);
          return PollState::Pending;
        },
        timeout_s_, call, [&] { abort(); });
  }

  std::unique_ptr<Communicator> bootstrap_;  ///< host-memory twin (MPI) for the id, barrier and split
  int device_;                               ///< the CUDA ordinal every call runs on
  double timeout_s_;                         ///< comm_timeout_seconds()
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool aborted_ = false;
};

}  // namespace

bool nccl_available() { return nccl().error.empty(); }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device) {
  if (!nccl_available()) {
    throw UnsupportedError("--all-reduce nccl: " + nccl().error +
                           "; install NCCL (the CUDA toolkit's, or PyTorch's nvidia-nccl wheel on LD_LIBRARY_PATH) "
                           "or use --all-reduce library");
  }
  return std::make_unique<NcclCommunicator>(bootstrap, device);
}

#else

bool nccl_available() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int) {
  throw UnsupportedError(
      "--all-reduce nccl: this build of LIO has no NCCL (it needs the CUDA toolkit's NCCL and Open MPI "
      "when configured); use --all-reduce library");
}

#endif

}  // namespace lio
