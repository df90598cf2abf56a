// meg-pretrain --plot: the loss curves of one or more runs, read from their metrics files
// (train/run_log.hpp), drawn as an SVG image a browser opens: the train losses as one line per run,
// the validation losses as markers in the run's colour, a legend naming each run, axes with ticks
// (iteration; loss on a log scale when it is positive, so that the slow end of a run is not
// flattened by its first steps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meg {

struct LossPoint {
  int64_t iteration = 0;
  double loss = 0;
};

struct LossCurve {
  std::string name;                    // the run as given, a metrics file named by its directory
  std::vector<LossPoint> train, valid;  // by iteration, one point each (a resumed run's last)
};

// RUN is a metrics file or a directory holding metrics.jsonl (a --save directory). InputError
// naming the file (and the line) when it is missing, malformed or holds no loss.
LossCurve read_loss_curve(const std::string& run);

// The SVG document of CURVES (at least one, each with a point).
std::string loss_plot_svg(const std::vector<LossCurve>& curves);

// Reads RUNS and writes their plot to OUTPUT, whole or not at all.
void write_loss_plot(const std::string& output, const std::vector<std::string>& runs);

}  // namespace meg
