#include "parallel/rank_agreement.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace meg {
namespace {

// Bytes of a value as the report shows it: long paths are cut, the report is one line.
constexpr size_t kShownBytes = 96;
// Distinct values shown per setting; a job of many ranks may hold many.
constexpr size_t kShownValues = 3;
// How long the members other than 0 wait for member 0's report to end the job.
constexpr auto kReportWait = std::chrono::seconds(10);

// VALUE (NOTE), an empty value as "", cut to fit kShownBytes with its terminating zero, at a
// UTF-8 character boundary.
std::array<char, kShownBytes> shown(const RankSetting& s) {
  const std::string value = s.value.empty() ? "\"\"" : s.value;
  std::string text = s.note.empty() ? value : fmt::format("{} ({})", value, s.note);
  if (text.size() >= kShownBytes) {
    size_t cut = kShownBytes - 4;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  std::array<char, kShownBytes> out{};
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

uint64_t hash_of(const std::string& s) { return xxh64(s.data(), s.size()); }

}  // namespace

std::string rank_disagreement(Comm& comm, const std::vector<RankSetting>& settings) {
  if (comm.size() == 1) return {};
  const auto ranks = static_cast<size_t>(comm.size());

  // Which settings: their number and names must match before the hashes can be compared by place.
  Hasher names;
  for (const auto& s : settings) names.update(s.name + '\0');
  const std::array<uint64_t, 2> mine{settings.size(), names.digest()};
  std::vector<uint64_t> all(2 * ranks);
  comm.all_gather_bytes(all.data(), mine.data(), sizeof mine);
  for (size_t r = 1; r < ranks; ++r)
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
      return fmt::format("the settings to compare (rank 0 has {}, rank {} has {} or names them otherwise): not the "
                         "same build of the tool?",
                         all[0], r, all[2 * r]);

  const size_t n = settings.size();
  std::vector<uint64_t> hashes(n), table(n * ranks);
  for (size_t i = 0; i < n; ++i) hashes[i] = hash_of(settings[i].value);
  comm.all_gather_bytes(table.data(), hashes.data(), n * sizeof(uint64_t));
  std::vector<size_t> differ;
  for (size_t i = 0; i < n; ++i)
    for (size_t r = 1; r < ranks; ++r)
      if (table[r * n + i] != table[i]) {
        differ.push_back(i);
        break;
      }
  if (differ.empty()) return {};

  // Every member knows which settings differ: now their values, for the report.
  std::vector<std::array<char, kShownBytes>> values, gathered(differ.size() * ranks);
  for (const size_t i : differ) values.push_back(shown(settings[i]));
  comm.all_gather_bytes(gathered.data(), values.data(), values.size() * kShownBytes);
  std::string report;
  for (size_t k = 0; k < differ.size(); ++k) {
    const size_t i = differ[k];
    std::vector<uint64_t> seen;
    std::string held;
    for (size_t r = 0; r < ranks; ++r) {
      const uint64_t h = table[r * n + i];
      if (std::find(seen.begin(), seen.end(), h) != seen.end()) continue;
      seen.push_back(h);
      if (seen.size() > kShownValues) {
        held += ", ...";
        break;
      }
      held += fmt::format("{}rank {}: {}", r == 0 ? "" : ", ", r, gathered[r * differ.size() + k].data());
    }
    report += fmt::format("{}{} ({})", report.empty() ? "" : ", ", settings[i].name, held);
  }
  return report;
}

void check_ranks_agree(Comm& comm, const std::vector<RankSetting>& settings) {
  const std::string report = rank_disagreement(comm, settings);
  if (report.empty()) return;
  if (comm.rank() != 0) std::this_thread::sleep_for(kReportWait);
  input_error("ranks disagree on {}", report);
}

}  // namespace meg
