// make_runner.cpp — the one place that knows which runners this build has.
#include <memory>

#include "lio/error.h"
#include "lio/model_runner.h"
#ifdef LIO_HAVE_CUDA
#include "lio/cuda_runner.h"
#endif

namespace lio {

std::unique_ptr<ModelRunner> make_runner(const LoadedModel& model, Device device) {
  if (device == Device::Cpu) return std::make_unique<CpuRunner>(model.config, model.weights);
#ifdef LIO_HAVE_CUDA
  return std::make_unique<cuda::CudaRunner>(model.config, model.weights);
#else
  throw UnsupportedError("--device cuda: this build of LIO has no CUDA support (nvcc was not found "
                         "when it was configured); install the CUDA toolkit and reconfigure with "
                         "-DLIO_CUDA=ON, or run with --device cpu");
#endif
}

}  // namespace lio
