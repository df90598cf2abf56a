// A metrics file (meg-pretrain's metrics.jsonl) read as meg-pretrain --plot reads it, and its loss
// curve drawn: the plot's axes must cope with any losses and iterations a file can hold.
#include "fuzz_input.hpp"
#include "train/loss_plot.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = meg::fuzz::write_file("metrics.jsonl", {data, size});
  return meg::fuzz::refuse_only_with_input_error([&] { (void)meg::loss_plot_svg({meg::read_loss_curve(path)}); });
}
