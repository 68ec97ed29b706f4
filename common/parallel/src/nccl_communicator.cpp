// nccl_communicator.cpp — NcclCommunicator (LIO_HAVE_NCCL builds) or the refusal without it.
#include "lio/nccl_communicator.h"

#include <string>

#include "lio/error.h"

#if LIO_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace lio {

#if LIO_HAVE_NCCL

namespace {

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw CommError(std::string(call) + " failed: " + ncclGetErrorString(r));
}

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw CommError(std::string(call) + " failed: " + cudaGetErrorString(e));
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(Communicator& bootstrap) : bootstrap_(bootstrap.split(0, bootstrap.rank())) {
    ncclUniqueId id{};
    if (bootstrap_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    bootstrap_->broadcast(&id, sizeof(id), 0);
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_nccl(ncclCommInitRank(&comm_, bootstrap_->size(), id, bootstrap_->rank()), "ncclCommInitRank");
  }
  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  std::string name() const override { return "nccl"; }
  CommMemory memory_kind() const override { return CommMemory::Device; }
  void all_reduce_sum(float* data, int64_t n) override {
    if (n < 0) throw InvalidArgument("all_reduce_sum: negative count " + std::to_string(n));
    if (n == 0) return;
    check_nccl(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
    wait();
  }
  void all_gather(const float* in, float* out, int64_t n) override {
    if (n < 0) throw InvalidArgument("all_gather: negative count " + std::to_string(n));
    check_nccl(ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat, comm_, stream_), "ncclAllGather");
    wait();
  }
  void broadcast(void* data, int64_t n_bytes, int root) override {
    if (n_bytes < 0 || root < 0 || root >= size()) throw InvalidArgument("broadcast: bad root or count");
    check_nccl(ncclBroadcast(data, data, static_cast<size_t>(n_bytes), ncclChar, root, comm_, stream_), "ncclBroadcast");
    wait();
  }
  void barrier() override { bootstrap_->barrier(); }
  void send_recv(const float* send, int64_t n_send, int dest, float* recv, int64_t n_recv, int source) override {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    if (n_send > 0) check_nccl(ncclSend(send, static_cast<size_t>(n_send), ncclFloat, dest, comm_, stream_), "ncclSend");
    if (n_recv > 0) check_nccl(ncclRecv(recv, static_cast<size_t>(n_recv), ncclFloat, source, comm_, stream_), "ncclRecv");
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    wait();
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> sub = bootstrap_->split(color, key);
    return std::make_unique<NcclCommunicator>(*sub);
  }

 private:
  void wait() { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (NCCL)"); }
  std::unique_ptr<Communicator> bootstrap_;  ///< host-memory twin (MPI) for the id, barrier and split
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap) {
  return std::make_unique<NcclCommunicator>(bootstrap);
}

#else

bool nccl_available() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&) {
  throw UnsupportedError(
      "--all-reduce nccl: this build of LIO has no NCCL (it needs the CUDA toolkit's NCCL and Open MPI "
      "when configured); use --all-reduce library");
}

#endif

}  // namespace lio
