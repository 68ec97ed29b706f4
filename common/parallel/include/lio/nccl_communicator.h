// nccl_communicator.h — chapter 08's Communicator over NVIDIA NCCL: one rank per GPU, buffers in
// device memory (CommMemory::Device), the unique id that joins the ranks broadcast over an MPI
// communicator (NCCL's documented MPI bootstrap, "Example 2: One Device per Process or Thread").
// Built only where CUDA and NCCL are (LIO_HAVE_NCCL); nccl_available() says which.
#pragma once

#include <memory>

#include "lio/communicator.h"

namespace lio {

/// True when this build has NCCL (configure found nccl.h and libnccl with CUDA and MPI).
bool nccl_available();

/// A communicator over the same ranks as `bootstrap` (host memory: MPI) whose collectives run on
/// GPU `device` (this rank's: cuda_device_for_rank) with NCCL: rank 0 creates the unique id
/// (ncclGetUniqueId) and broadcasts it over `bootstrap`, every rank calls ncclCommInitRankConfig.
/// Collective over `bootstrap`. all_reduce_sum / all_gather / broadcast / send_recv take device
/// pointers and return when the data is in place. NCCL runs non-blocking: every wait polls
/// ncclCommGetAsyncError beside the stream, and a collective that does not finish within
/// comm_timeout_seconds() (LIO_COMM_TIMEOUT_S, default 60) is aborted (ncclCommAbort) and throws
/// CommError, so a dead or mismatched peer ends the rank with an error instead of a hang; the
/// CLI then ends the job (abort_world). split() splits through `bootstrap`'s twin.
/// Throws UnsupportedError when !nccl_available(), CommError when an NCCL or CUDA call fails or
/// times out.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device = 0);

}  // namespace lio
