// omp_compat.h — the few OpenMP runtime calls LIO makes, with or without OpenMP. A build with
// LIO_OPENMP=OFF (the tsan preset: ThreadSanitizer cannot see into libgomp's barriers and
// reports its threads' handoffs as races) ignores the `#pragma omp` lines and runs every loop
// on the calling thread; these stand-ins then answer as a one-thread team does.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#else
/// One thread: the calling one (OpenMP 5.2, sec. 18.2 omp_get_max_threads).
inline int omp_get_max_threads() { return 1; }
/// The calling thread is thread 0 of its one-thread team (sec. 18.2 omp_get_thread_num).
inline int omp_get_thread_num() { return 0; }
/// Team size request: nothing to set without OpenMP (sec. 18.2 omp_set_num_threads).
inline void omp_set_num_threads(int) {}
#endif
