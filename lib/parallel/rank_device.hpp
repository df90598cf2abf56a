// The GPU of this process, for --device cuda (CUDA builds only).
#pragma once

namespace meg {

// Checks that a GPU is visible (InputError otherwise, as require_cuda_devices()) and makes the
// current device this process's: under MPI the ranks of a node take its GPUs in turn (local rank
// modulo the GPUs it sees), one GPU per process, for training and inference alike.
void use_rank_cuda_device();

}  // namespace meg
