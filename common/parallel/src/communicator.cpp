// communicator.cpp — SingleCommunicator, the MPI world and MpiCommunicator (when built with MPI).
#include "lio/communicator.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "lio/error.h"
#include "lio/tensor_parallel.h"

#if LIO_HAVE_MPI
#include <mpi.h>
#endif

namespace lio {

// ---- SingleCommunicator ---------------------------------------------------------------------

void SingleCommunicator::all_reduce_sum(float*, int64_t n) {
  if (n < 0) throw InvalidArgument("all_reduce_sum: negative count " + std::to_string(n));
}

void SingleCommunicator::all_gather(const float* in, float* out, int64_t n) {
  if (n < 0) throw InvalidArgument("all_gather: negative count " + std::to_string(n));
  if (n > 0) std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
}

void SingleCommunicator::broadcast(void*, int64_t n_bytes, int root) {
  if (n_bytes < 0 || root != 0) {
    throw InvalidArgument("broadcast: root " + std::to_string(root) + " or count " + std::to_string(n_bytes) +
                          " invalid in a world of 1");
  }
}

void SingleCommunicator::send_recv(const float*, int64_t n_send, int, float*, int64_t n_recv, int) {
  if (n_send == 0 && n_recv == 0) return;
  throw InvalidArgument("send_recv: a world of one rank has no peer");
}

std::unique_ptr<Communicator> SingleCommunicator::split(int, int) { return std::make_unique<SingleCommunicator>(); }

// ---- the job ----------------------------------------------------------------------------------

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

namespace {

/// The local rank and size the launcher put in the environment, or {-1, -1}.
std::pair<int, int> local_rank_from_environment() {
  for (const auto& [rank_var, size_var] : {std::pair{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                                           std::pair{"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}}) {
    const char* r = std::getenv(rank_var);
    const char* n = std::getenv(size_var);
    if (r == nullptr || n == nullptr) continue;
    char* end_r = nullptr;
    char* end_n = nullptr;
    const long rank = std::strtol(r, &end_r, 10);
    const long size = std::strtol(n, &end_n, 10);
    if (*r != '\0' && *end_r == '\0' && *n != '\0' && *end_n == '\0' && size >= 1 && rank >= 0 && rank < size) {
      return {static_cast<int>(rank), static_cast<int>(size)};
    }
  }
  return {-1, -1};
}

}  // namespace

#if LIO_HAVE_MPI

namespace {

bool g_initialized_here = false;

/// Throws CommError naming `call` when an MPI call failed (communicators below set
/// MPI_ERRORS_RETURN so errors come back as codes).
void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw CommError(std::string(call) + " failed: " + std::string(text, static_cast<size_t>(len)));
}

/// MPI's counts are int: refuses a message past 2^31 - 1 elements.
int mpi_count(int64_t n, const char* what) {
  if (n < 0 || n > 2147483647) {
    throw InvalidArgument(std::string(what) + ": count " + std::to_string(n) + " outside [0, 2^31 - 1]");
  }
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned, AllReduceAlgorithm algorithm)
      : comm_(comm), owned_(owned), algorithm_(algorithm) {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    if (owned_ && mpi_active()) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  AllReduceAlgorithm algorithm() const override { return algorithm_; }
  std::string name() const override {
    return algorithm_ == AllReduceAlgorithm::Ring ? "mpi (ring all-reduce)" : "mpi (MPI_Allreduce)";
  }

  void all_reduce_sum(float* data, int64_t n) override {
    if (n == 0 || size_ == 1) return (void)mpi_count(n, "all_reduce_sum");
    if (algorithm_ == AllReduceAlgorithm::Ring) return ring_all_reduce(data, n, *this);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(n, "all_reduce_sum"), MPI_FLOAT, MPI_SUM, comm_),
              "MPI_Allreduce");
  }
  void all_gather(const float* in, float* out, int64_t n) override {
    const int count = mpi_count(n, "all_gather");
    check_mpi(MPI_Allgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, comm_), "MPI_Allgather");
  }
  void broadcast(void* data, int64_t n_bytes, int root) override {
    check_root(root, "broadcast");
    check_mpi(MPI_Bcast(data, mpi_count(n_bytes, "broadcast"), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  void barrier() override { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }
  void send_recv(const float* send, int64_t n_send, int dest, float* recv, int64_t n_recv, int source) override {
    const int ns = mpi_count(n_send, "send_recv");
    const int nr = mpi_count(n_recv, "send_recv");
    if (ns > 0) check_root(dest, "send_recv (dest)");
    if (nr > 0) check_root(source, "send_recv (source)");
    const int to = ns > 0 ? dest : MPI_PROC_NULL;
    const int from = nr > 0 ? source : MPI_PROC_NULL;
    check_mpi(MPI_Sendrecv(send, ns, MPI_FLOAT, to, kTag, recv, nr, MPI_FLOAT, from, kTag, comm_, MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    return std::make_unique<MpiCommunicator>(sub, true, algorithm_);
  }

 private:
  static constexpr int kTag = 8;
  void check_root(int r, const char* what) const {
    if (r < 0 || r >= size_) {
      throw InvalidArgument(std::string(what) + ": rank " + std::to_string(r) + " outside a group of " +
                            std::to_string(size_));
    }
  }
  MPI_Comm comm_;
  bool owned_;
  AllReduceAlgorithm algorithm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

void init_parallel(int* argc, char*** argv) {
  if (!launched_by_mpi() || mpi_active()) return;
  int provided = 0;
  check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  g_initialized_here = true;
  if (provided < MPI_THREAD_SERIALIZED) {
    throw CommError("MPI_Init_thread: this MPI gives thread level " + std::to_string(provided) +
                    ", LIO needs MPI_THREAD_SERIALIZED");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

bool mpi_active() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::unique_ptr<Communicator> world_communicator(AllReduceAlgorithm algorithm) {
  if (!mpi_active()) return std::make_unique<SingleCommunicator>();
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false, algorithm);
}

namespace {

/// This rank's place among the ranks on its host: the environment's, else MPI's shared-memory
/// split of the world (collective).
std::pair<int, int> host_local_rank() {
  if (const auto env = local_rank_from_environment(); env.first >= 0) return env;
  if (!mpi_active()) return {0, 1};
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  int rank = 0, size = 1;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return {rank, size};
}

}  // namespace

int local_rank() { return host_local_rank().first; }
int local_size() { return host_local_rank().second; }

int world_rank() {
  if (!mpi_active()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  if (!mpi_active()) return 1;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void abort_world(int code) {
  if (mpi_active() && world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

void finalize_parallel() {
  if (g_initialized_here && mpi_active()) MPI_Finalize();
}

#else  // no MPI in this build

void init_parallel(int*, char***) {
  if (launched_by_mpi()) {
    throw UnsupportedError(
        "this program was started by mpirun, but LIO was built without MPI: install Open MPI "
        "(scripts/setup.sh installs libopenmpi-dev) and reconfigure the build");
  }
}
bool mpi_active() { return false; }
std::unique_ptr<Communicator> world_communicator(AllReduceAlgorithm) { return std::make_unique<SingleCommunicator>(); }
int local_rank() {
  const auto env = local_rank_from_environment();
  return env.first >= 0 ? env.first : 0;
}
int local_size() {
  const auto env = local_rank_from_environment();
  return env.first >= 0 ? env.second : 1;
}
int world_rank() { return 0; }
int world_size() { return 1; }
void abort_world(int) {}
void finalize_parallel() {}

#endif

}  // namespace lio
