// communicator.h — collective and point-to-point communication between the ranks of one job
// (chapter 08). Megatron-LM's tensor parallelism needs all-reduce (sum) after every row-parallel
// layer, all-gather for the vocabulary-parallel LM head, broadcast for the driver's batch, and
// pipeline parallelism needs point-to-point sends between stages.
//
// Three implementations behind one interface, as vLLM's `vllm/distributed/` keeps its
// device communicators behind one group coordinator:
//   SingleCommunicator  world size 1, the default: every collective is the identity;
//   MpiCommunicator     Open MPI (Message Passing Interface 3.1 / 4.0): CPU ranks on one host or
//                       many, started by `mpirun`; its all-reduce is MPI_Allreduce or chapter 08's
//                       ring all-reduce (Task 2), as asked;
//   NcclCommunicator    NVIDIA NCCL, one rank per GPU, its unique id broadcast over MPI
//                       (lio/nccl_communicator.h; only in builds with CUDA and NCCL).
// Buffers live where memory_kind() says: host memory for Single and MPI, device memory for NCCL
// (Backend::all_reduce moves data between the two when they differ).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace lio {

/// Where a communicator's buffers must live.
enum class CommMemory { Host, Device };

/// How MpiCommunicator::all_reduce_sum sums (--all-reduce).
enum class AllReduceAlgorithm {
  Library,  ///< MPI_Allreduce: Open MPI picks its own algorithm by message size
  Ring,     ///< chapter 08's ring_all_reduce (Task 2; Patarasuk & Yuan 2009) over send_recv
  Nccl,     ///< the tensor-parallel group's data over NCCL (device memory; --device cuda), control over MPI
};

/// A group of `size()` ranks; this process is `rank()`. Every collective must be called by
/// every rank of the group in the same order with the same counts (MPI's rule); a rank that
/// dies makes the others fail (MpiCommunicator aborts the whole job) rather than hang.
/// Errors: CommError (lio/error.h's Error) for a failed call; InvalidArgument for a bad
/// argument (negative count, peer outside the group).
class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This process's rank in the group, 0 .. size() - 1.
  virtual int rank() const = 0;
  /// Ranks in the group.
  virtual int size() const = 0;
  /// "single", "mpi" or "nccl", with the algorithm where it matters ("mpi (ring)").
  virtual std::string name() const = 0;
  /// Where buffers passed to this communicator must live.
  virtual CommMemory memory_kind() const { return CommMemory::Host; }
  /// The all-reduce algorithm this communicator was asked for (--all-reduce).
  virtual AllReduceAlgorithm algorithm() const { return AllReduceAlgorithm::Library; }

  /// data (n floats) = the element-wise sum of every rank's data; every rank gets the same
  /// values (the algorithms here reduce in one order per element and share the result).
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  /// out (size() * n floats) = every rank's `in` (n floats), rank 0's first. `in` and `out`
  /// must not overlap.
  virtual void all_gather(const float* in, float* out, int64_t n) = 0;
  /// `data` (n bytes) = rank `root`'s bytes on every rank.
  virtual void broadcast(void* data, int64_t n_bytes, int root) = 0;
  /// Returns once every rank has called it.
  virtual void barrier() = 0;
  /// Sends `send` (n_send floats) to rank `dest` while receiving n_recv floats into `recv` from
  /// rank `source` (MPI_Sendrecv: neither blocks the other, so a ring cannot deadlock). Either
  /// side may be empty (count 0) to only send or only receive; dest / source may be -1 then.
  virtual void send_recv(const float* send, int64_t n_send, int dest, float* recv, int64_t n_recv,
                         int source) = 0;
  /// A communicator over the ranks that pass the same `color`, ordered by `key` (MPI_Comm_split):
  /// how the tensor-parallel groups and pipeline stages of a TP x PP grid are cut from the world.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

/// World size 1: all_reduce_sum and broadcast leave the data as it is, all_gather copies,
/// send_recv throws InvalidArgument (there is no peer).
class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  void all_reduce_sum(float*, int64_t n) override;
  void all_gather(const float* in, float* out, int64_t n) override;
  void broadcast(void*, int64_t n_bytes, int root) override;
  void barrier() override {}
  void send_recv(const float* send, int64_t n_send, int dest, float* recv, int64_t n_recv, int source) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
};

// ---- the job: MPI's world, when the program runs under mpirun -----------------------------

/// True when this process was started by an MPI launcher (mpirun / mpiexec set
/// OMPI_COMM_WORLD_SIZE or PMI_SIZE / PMIX_RANK), whether or not MPI is initialized yet.
bool launched_by_mpi();

/// Initializes MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED: the server's engine thread calls
/// MPI, never two threads at once) when launched_by_mpi() and this build has MPI; otherwise
/// does nothing. Safe to call twice. Throws UnsupportedError when launched by mpirun in a build
/// without MPI (the message says how to get it).
void init_parallel(int* argc, char*** argv);

/// True once init_parallel() has initialized MPI (and MPI_Finalize has not run).
bool mpi_active();

/// The job's world: an MpiCommunicator over MPI_COMM_WORLD when mpi_active(), else a
/// SingleCommunicator. `algorithm` chooses MPI's all-reduce.
std::unique_ptr<Communicator> world_communicator(AllReduceAlgorithm algorithm = AllReduceAlgorithm::Library);

/// This process's rank among the job's ranks on this host, and how many there are (0 and 1
/// without MPI): what picks a rank's GPU. From the launcher's environment when it sets it
/// (Open MPI: OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE; MPICH: MPI_LOCALRANKID / MPI_LOCALNRANKS),
/// else from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) over the world, which is collective: then
/// every rank must call it. Throws CommError if that MPI call fails.
int local_rank();
/// See local_rank().
int local_size();

/// This process's rank in the world (0 without MPI).
int world_rank();
/// Ranks in the world (1 without MPI).
int world_size();

/// Ends every rank of the job with `code` (MPI_Abort) when mpi_active() and the world has more
/// than one rank; otherwise returns. What run_main calls after printing an error, so a failure on
/// one rank never leaves the others waiting in a collective.
void abort_world(int code);

/// MPI_Finalize when mpi_active(); idempotent. Called at a clean exit.
void finalize_parallel();

}  // namespace lio
