#include "train/loss_plot.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/json_file.hpp"
#include "data/document_reader.hpp"

namespace meg {
namespace {

// The picture: a plot area inside margins that hold the tick labels and the axis titles.
constexpr double kWidth = 960, kHeight = 540;
constexpr double kLeft = 72, kRight = 24, kTop = 36, kBottom = 56;
constexpr double kPlotWidth = kWidth - kLeft - kRight, kPlotHeight = kHeight - kTop - kBottom;
// Tableau's ten colours, which stay apart for most readers; more runs reuse them.
constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string xml_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

// The largest of 1, 2 or 5 times a power of ten that gives SPAN at least TARGET steps (at most 2.5
// times as many): a tick step a person reads easily.
double nice_step(double span, int target) {
  const double raw = span / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {5.0, 2.0, 1.0})
    if (m * power <= raw) return m * power;
  return power;
}

// The ticks of [LO, HI], and their labels.
struct Tick {
  double value;
  std::string label;
};

// Ticks are counted, not stepped to the end, so that a range too narrow for its magnitude (where
// adding the step changes nothing) cannot go on for ever.
constexpr int kMaxTicks = 32;

std::vector<Tick> linear_ticks(double lo, double hi, int target, double min_step = 0) {
  const double step = std::max(nice_step(hi - lo, target), min_step);
  std::vector<Tick> ticks;
  if (!(step > 0) || !std::isfinite(step) || !std::isfinite(lo / step)) return ticks;
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step))));
  const double first = std::ceil(lo / step) * step;
  for (int i = 0; i < kMaxTicks && first + i * step <= hi + step * 1e-9; ++i)
    ticks.push_back({first + i * step, fmt::format("{:.{}f}", first + i * step, decimals)});
  return ticks;
}

// On a log axis: over more than a decade 1, 2 and 5 times the powers of ten (only the powers when
// they would crowd); within a decade, about six values spread evenly on the axis, each rounded to
// a value of two digits that reads easily; within a narrow band, evenly spaced values.
std::vector<Tick> log_ticks(double lo, double hi) {
  std::vector<Tick> ticks;
  const auto inside = [&](double v) { return v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9); };
  if (hi / lo >= 10) {
    const bool crowded = hi / lo > 1e4;
    const int first = static_cast<int>(std::floor(std::log10(lo))), last = static_cast<int>(std::ceil(std::log10(hi)));
    for (int e = first; e <= last && ticks.size() < kMaxTicks; ++e)  // e within the doubles' -324 to 308
      for (const double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (inside(v) && (!crowded || m == 1)) ticks.push_back({v, fmt::format("{:g}", v)});
      }
    return ticks;
  }
  constexpr int kTicks = 6;
  for (int i = 0; i < kTicks; ++i) {
    const double target = lo * std::pow(hi / lo, (i + 0.5) / kTicks);
    const double power = std::pow(10.0, std::floor(std::log10(target)));
    double best = 0;
    for (const double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0}) {
      const double v = m * power;
      if (inside(v) && (best == 0 || std::abs(std::log(v / target)) < std::abs(std::log(best / target)))) best = v;
    }
    if (best > 0 && (ticks.empty() || best > ticks.back().value)) ticks.push_back({best, fmt::format("{:g}", best)});
  }
  return ticks.size() >= 3 ? ticks : linear_ticks(lo, hi, 4);
}

// Maps data to the picture: iterations to x, losses to y (log scale when every loss is positive).
class Axes {
 public:
  explicit Axes(const std::vector<LossCurve>& curves) {
    double ilo = INFINITY, ihi = -INFINITY, llo = INFINITY, lhi = -INFINITY;
    for (const auto& c : curves)
      for (const auto* points : {&c.train, &c.valid})
        for (const auto& p : *points) {
          ilo = std::min(ilo, double(p.iteration));
          ihi = std::max(ihi, double(p.iteration));
          llo = std::min(llo, p.loss);
          lhi = std::max(lhi, p.loss);
        }
    if (!(ihi > ilo)) {  // one iteration (or iterations past 2^53 that doubles cannot tell apart)
      const double pad = std::max(1.0, std::abs(ilo) * 1e-6);
      ilo -= pad;
      ihi += pad;
    }
    x_lo_ = ilo;
    x_hi_ = ihi;
    log_ = llo > 0;
    if (!(lhi > llo)) {  // one loss: a band around it
      const double pad = llo == 0 ? 1 : std::abs(llo) * 0.1;
      llo -= log_ ? pad / 2 : pad;
      lhi += pad;
    }
    // A little room above and below, so that no point sits on the frame (none where the room
    // would pass the doubles' range).
    double lo = llo, hi = lhi;
    if (log_) {
      const double margin = (std::log(lhi) - std::log(llo)) * 0.04;
      lo = std::exp(std::log(llo) - margin);
      hi = std::exp(std::log(lhi) + margin);
    } else {
      const double margin = (lhi - llo) * 0.04;
      lo = llo - margin;
      hi = lhi + margin;
    }
    y_lo_ = std::isfinite(lo) && (!log_ || lo > 0) ? lo : llo;
    y_hi_ = std::isfinite(hi) ? hi : lhi;
  }

  double x(double iteration) const { return kLeft + (iteration - x_lo_) / (x_hi_ - x_lo_) * kPlotWidth; }
  double y(double loss) const {
    const double f = log_ ? std::log(loss / y_lo_) / std::log(y_hi_ / y_lo_) : (loss - y_lo_) / (y_hi_ - y_lo_);
    return kTop + (1 - f) * kPlotHeight;
  }
  std::vector<Tick> x_ticks() const { return linear_ticks(x_lo_, x_hi_, 5, 1); }  // whole iterations
  std::vector<Tick> y_ticks() const { return log_ ? log_ticks(y_lo_, y_hi_) : linear_ticks(y_lo_, y_hi_, 4); }
  bool log_scale() const { return log_; }

 private:
  double x_lo_, x_hi_, y_lo_, y_hi_;
  bool log_;
};

void line(std::string& svg, double x1, double y1, double x2, double y2, const char* colour) {
  svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"/>", x1, y1, x2, y2,
                     colour);
}

// The frame, and each tick as a grid line across the plot, a mark outside it and its label.
void draw_axes(std::string& svg, const Axes& axes) {
  constexpr const char* kGrid = "#e4e4e4";
  constexpr const char* kInk = "#333";
  const double bottom = kTop + kPlotHeight, right = kLeft + kPlotWidth;
  svg += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"{}\"/>\n",
                     kLeft, kTop, kPlotWidth, kPlotHeight, kInk);
  svg += "<g class=\"x-ticks\" text-anchor=\"middle\">\n";
  for (const auto& t : axes.x_ticks()) {
    const double x = axes.x(t.value);
    line(svg, x, kTop, x, bottom, kGrid);
    line(svg, x, bottom, x, bottom + 5, kInk);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\">{}</text>\n", x, bottom + 19, t.label);
  }
  svg += "</g>\n<g class=\"y-ticks\" text-anchor=\"end\">\n";
  for (const auto& t : axes.y_ticks()) {
    const double y = axes.y(t.value);
    line(svg, kLeft, y, right, y, kGrid);
    line(svg, kLeft - 5, y, kLeft, y, kInk);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{}</text>\n", kLeft - 8, y + 4, t.label);
  }
  svg += "</g>\n";
  svg += fmt::format("<text class=\"x-title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">iteration</text>\n",
                     kLeft + kPlotWidth / 2, kHeight - 14);
  svg += fmt::format("<text class=\"y-title\" transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     kTop + kPlotHeight / 2, axes.log_scale() ? "loss (log scale)" : "loss");
}

void draw_curve(std::string& svg, const LossCurve& c, const Axes& axes, const char* colour) {
  svg += fmt::format("<g class=\"run\" data-name=\"{}\">\n<title>{}</title>\n", xml_escape(c.name), xml_escape(c.name));
  if (!c.train.empty()) {
    svg += fmt::format("<polyline class=\"train\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
                       "stroke-linejoin=\"round\" stroke-linecap=\"round\" points=\"",
                       colour);
    for (size_t i = 0; i < c.train.size(); ++i)
      svg += fmt::format("{}{:.1f},{:.1f}", i ? " " : "", axes.x(double(c.train[i].iteration)), axes.y(c.train[i].loss));
    if (c.train.size() == 1)  // a line of no length: its round caps draw the one point as a dot
      svg += fmt::format(" {:.1f},{:.1f}", axes.x(double(c.train[0].iteration)), axes.y(c.train[0].loss));
    svg += "\"/>\n";
  }
  for (const auto& p : c.valid)
    svg += fmt::format("<circle class=\"valid\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\" stroke=\"white\"/>\n",
                       axes.x(double(p.iteration)), axes.y(p.loss), colour);
  svg += "</g>\n";
}

// Top right inside the plot: a line of each run's colour and its name, then the marker's meaning.
void draw_legend(std::string& svg, const std::vector<LossCurve>& curves) {
  const bool any_valid = std::any_of(curves.begin(), curves.end(), [](const LossCurve& c) { return !c.valid.empty(); });
  size_t longest = std::string_view("validation loss").size();
  for (const auto& c : curves) longest = std::max(longest, c.name.size());
  const double row = 18, width = 44 + 7.0 * double(longest);
  const double height = row * double(curves.size() + (any_valid ? 1 : 0)) + 8;
  const double x = kLeft + kPlotWidth - width - 10, y = kTop + 10;
  svg += fmt::format("<g class=\"legend\">\n<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"white\" "
                     "fill-opacity=\"0.85\" stroke=\"#999\"/>\n",
                     x, y, width, height);
  for (size_t i = 0; i < curves.size(); ++i) {
    const double cy = y + 4 + row * (double(i) + 0.5);
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"/>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
                       x + 8, cy, x + 32, cy, kColours[i % std::size(kColours)], x + 38, cy + 4,
                       xml_escape(curves[i].name));
  }
  if (any_valid) {
    const double cy = y + 4 + row * (double(curves.size()) + 0.5);
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"#555\"/><text x=\"{:.1f}\" y=\"{:.1f}\">"
                       "validation loss</text>\n",
                       x + 20, cy, x + 38, cy + 4);
  }
  svg += "</g>\n";
}

std::vector<LossPoint> by_iteration(const std::map<int64_t, double>& points) {
  std::vector<LossPoint> out;
  for (const auto& [iteration, loss] : points) out.push_back({iteration, loss});
  return out;
}

}  // namespace

LossCurve read_loss_curve(const std::string& run) {
  std::filesystem::path path(run);
  std::string name = run;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path /= "metrics.jsonl";
  else if (path.filename() == "metrics.jsonl" && path.has_parent_path()) name = path.parent_path().string();
  const std::string file = path.string();

  // A resumed run logs again the iterations after its checkpoint: the later record is the run's.
  std::map<int64_t, double> train, valid;
  RecordReader reader(file, DocumentFormat{});
  RecordBatch batch;
  while (reader.next_batch(batch, 1 << 20)) {
    for (const auto& r : batch.records) {
      const std::string_view raw(batch.data.data() + r.begin, r.end - r.begin);
      if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      nlohmann::json j;
      if (std::string problem = parse_json_record(raw, file, r.line + 1, j); !problem.empty()) throw InputError(problem);
      const std::string where = fmt::format("{}:{}", file, r.line + 1);
      const auto iteration = json_get<int64_t>(j, "iteration", where);
      // Files written before records had a "split" tell validation records by their key.
      const std::string split = json_get<std::string>(j, "split", where, j.contains("valid_loss") ? "valid" : "train");
      if (split == "train") train[iteration] = json_get<double>(j, "loss", where);
      else if (split == "valid") valid[iteration] = json_get<double>(j, "valid_loss", where);
      // Records of other splits are not losses this plot draws.
    }
  }
  if (train.empty() && valid.empty()) input_error("{}: no train or validation losses", file);
  return {name, by_iteration(train), by_iteration(valid)};
}

std::string loss_plot_svg(const std::vector<LossCurve>& curves) {
  const Axes axes(curves);
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<title>loss</title>\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      kWidth, kHeight);
  draw_axes(svg, axes);
  for (size_t i = 0; i < curves.size(); ++i) draw_curve(svg, curves[i], axes, kColours[i % std::size(kColours)]);
  draw_legend(svg, curves);
  return svg + "</svg>\n";
}

void write_loss_plot(const std::string& output, const std::vector<std::string>& runs) {
  if (runs.empty()) input_error("--plot {}: name the runs to draw (metrics files or --save directories)", output);
  std::vector<LossCurve> curves;
  for (const auto& run : runs) curves.push_back(read_loss_curve(run));
  const std::string svg = loss_plot_svg(curves);
  ByteWriter out(output);
  out.write(svg.data(), svg.size());
  out.commit();
}

}  // namespace meg
