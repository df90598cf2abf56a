#include "data/gpt_dataset.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace meg {

// ---------------------------------------------------------------------------------------------
// BlendFile

BlendFile::BlendFile(const std::string& path) : map_(path) {
  const uint8_t* p = map_.data();
  const uint64_t size = map_.size();
  if (size >= sizeof(kBlendMagic) && std::memcmp(p, kBlendMagic, sizeof(kBlendMagic)) != 0)
    input_error("{}: offset 0: not a meg blend file (bad magic)", path);
  if (size < sizeof(BlendHeader))
    input_error("{}: truncated: {} bytes, shorter than the {}-byte header", path, size, sizeof(BlendHeader));
  std::memcpy(&header_, p, sizeof(header_));
  if (header_.version != kBlendVersion)
    input_error("{}: offset 16: blend version {} is not supported (only version {})", path, header_.version,
                kBlendVersion);
  if (header_.file_size != size)
    input_error("{}: size is {} bytes but its header says {}{}", path, size, header_.file_size,
                size < header_.file_size ? " (truncated)" : " (trailing bytes)");
  const uint64_t sum = xxh64(p + kBlendChecksummed, size - kBlendChecksummed);
  if (sum != header_.checksum)
    input_error("{}: checksum mismatch (stored {}, computed {}): the file is corrupt", path, hex64(header_.checksum),
                hex64(sum));

  // The checksum says these are the bytes meg-blend wrote; the checks below keep a forged or
  // mis-built file from sending a reader outside the map.
  const uint64_t K = header_.num_inputs;
  if (K == 0 || K > (size - sizeof(BlendHeader)) / sizeof(BlendInputRecord))
    input_error("{}: offset 20: {} inputs do not fit in a {}-byte file (corrupt blend)", path, K, size);
  inputs_.resize(K);
  std::memcpy(inputs_.data(), p + sizeof(BlendHeader), K * sizeof(BlendInputRecord));
  arrays_.resize(K);
  for (uint64_t k = 0; k < K; ++k) {
    const auto& in = inputs_[k];
    array<char>(in.prefix_offset, in.prefix_bytes, "prefix");
    for (int s = 0; s < kNumSplits; ++s) {
      const auto& r = in.splits[s];
      if (r.begin > r.end || r.end > in.documents || (r.epochs > 0 && r.end - r.begin > UINT64_MAX / r.epochs) ||
          r.samples >= UINT64_MAX / 2)
        input_error("{}: input {}: inconsistent {} split record (corrupt blend)", path, k + 1, split_name(Split(s)));
      auto& a = arrays_[k][s];
      a.document_index = array<int32_t>(r.document_index, r.epochs * (r.end - r.begin), "document index");
      a.sample_index = array<int64_t>(r.sample_index, r.samples == 0 ? 0 : 2 * (r.samples + 1), "sample index");
      a.shuffle_index = array<int64_t>(r.shuffle_index, r.samples, "shuffle index");
    }
  }
  for (int s = 0; s < kNumSplits; ++s) {
    dataset_index_[s] = array<uint16_t>(header_.dataset_index[s], header_.samples[s], "dataset index");
    dataset_sample_[s] = array<int64_t>(header_.dataset_sample[s], header_.samples[s], "dataset sample index");
  }
}

template <typename T>
std::span<const T> BlendFile::array(uint64_t offset, uint64_t count, const char* what) const {
  if (count == 0) return {};
  const uint64_t size = map_.size();
  if (offset % 8 != 0 || offset > size || count > (size - offset) / sizeof(T))
    input_error("{}: offset {}: a {} of {} entries lies outside the file (corrupt blend)", path(), offset, what, count);
  return {reinterpret_cast<const T*>(map_.data() + offset), count};
}

std::string_view BlendFile::prefix(size_t k) const {
  return {reinterpret_cast<const char*>(map_.data() + inputs_[k].prefix_offset), inputs_[k].prefix_bytes};
}

// ---------------------------------------------------------------------------------------------
// GptDataset

uint64_t GptDataset::source_fingerprint() const {
  std::vector<BlendInputRecord> records;
  std::vector<std::string_view> prefixes;
  for (size_t k = 0; k < blend_.num_inputs(); ++k) {
    records.push_back(blend_.input(k));
    prefixes.push_back(blend_.prefix(k));
  }
  return blend_fingerprint(blend_.header(), records, prefixes, false);
}

GptDataset::GptDataset(const std::string& blend_path) : blend_(blend_path) {
  inputs_.reserve(blend_.num_inputs());
  for (size_t k = 0; k < blend_.num_inputs(); ++k) {
    const std::string prefix(blend_.prefix(k));
    try {
      inputs_.emplace_back(prefix);
    } catch (const InputError& e) {
      input_error("{}: input {}: {}", blend_path, k + 1, e.what());
    }
    const auto& rec = blend_.input(k);
    const auto& d = inputs_.back();
    const bool idx_changed = d.idx_fingerprint() != rec.idx_hash;
    if (idx_changed || d.bin_bytes() != rec.bin_bytes)
      input_error("{}: input {} ({}) changed since the blend was built ({} differs): build the blend again with meg-blend",
                  blend_path, k + 1, prefix, idx_changed ? prefix + ".idx" : prefix + ".bin size");
  }
}

void GptDataset::corrupt(Split split, uint64_t i, const char* what) const {
  input_error("{}: {} sample {}: {} (corrupt blend)", blend_.path(), split_name(split), i, what);
}

GptDataset::Span GptDataset::locate(Split split, uint64_t i) const {
  const int s = int(split);
  if (i >= num_samples(split))
    throw std::out_of_range(fmt::format("{} sample {} of {}", split_name(split), i, num_samples(split)));
  const size_t k = blend_.dataset_index(split)[i];
  if (k >= inputs_.size()) corrupt(split, i, "input out of range");
  const auto& rec = blend_.input(k).splits[s];
  const uint64_t j = static_cast<uint64_t>(blend_.dataset_sample(split)[i]);
  if (j >= rec.samples) corrupt(split, i, "input sample out of range");
  const uint64_t shuffled = static_cast<uint64_t>(blend_.shuffle_index(k, split)[j]);
  if (shuffled >= rec.samples) corrupt(split, i, "shuffled sample out of range");

  const auto bounds = blend_.sample_index(k, split).subspan(2 * shuffled, 4);
  const uint64_t first = static_cast<uint64_t>(bounds[0]), last = static_cast<uint64_t>(bounds[2]);
  if (first > last || last >= blend_.document_index(k, split).size()) corrupt(split, i, "document position out of range");
  return {k, first, last, static_cast<uint64_t>(bounds[1]), static_cast<uint64_t>(bounds[3])};
}

int32_t GptDataset::document_at(Split split, uint64_t i, const Span& span, uint64_t pos) const {
  const int32_t doc = blend_.document_index(span.input, split)[pos];
  if (doc < 0 || static_cast<size_t>(doc) >= inputs_[span.input].num_sequences()) corrupt(split, i, "document out of range");
  return doc;
}

void GptDataset::sample(Split split, uint64_t i, int32_t* out) const {
  const Span span = locate(split, i);
  const auto& dataset = inputs_[span.input];
  // From the start offset in the first document to one token past the end offset in the last:
  // samples share their boundary token, which is what gives each one T+1 tokens.
  uint64_t filled = 0;
  for (uint64_t pos = span.first; pos <= span.last; ++pos) {
    const TokenView view = dataset.sequence(static_cast<size_t>(document_at(split, i, span, pos)));
    const uint64_t from = pos == span.first ? span.from : 0;
    const uint64_t to = pos == span.last ? span.to + 1 : view.size;
    if (from > to || to > view.size || filled + (to - from) > seq_length() + 1) corrupt(split, i, "offsets out of range");
    view.copy_to(out + filled, from, to - from);
    filled += to - from;
  }
  if (filled != seq_length() + 1) corrupt(split, i, "sample shorter than the sequence length");
}

GptDataset::SampleDocuments GptDataset::sample_documents(Split split, uint64_t i) const {
  const Span span = locate(split, i);
  SampleDocuments out{span.input, {}};
  for (uint64_t pos = span.first; pos <= span.last; ++pos) out.documents.push_back(document_at(split, i, span, pos));
  return out;
}

// ---------------------------------------------------------------------------------------------
// --dump

nlohmann::ordered_json describe_blend(const BlendFile& blend) {
  const auto& h = blend.header();
  nlohmann::ordered_json j;
  j["blend"] = blend.path();
  j["version"] = h.version;
  j["fingerprint"] = hex64(h.fingerprint);
  j["seq_length"] = h.seq_length;
  j["seed"] = h.seed;
  j["split"] = {h.split[0], h.split[1], h.split[2]};
  for (int s = 0; s < kNumSplits; ++s) j["samples"][split_name(Split(s))] = h.samples[s];

  std::array<std::vector<uint64_t>, kNumSplits> drawn;
  for (int s = 0; s < kNumSplits; ++s) {
    drawn[s].assign(blend.num_inputs(), 0);
    for (uint16_t k : blend.dataset_index(Split(s)))
      if (k < blend.num_inputs()) ++drawn[s][k];
  }
  j["inputs"] = nlohmann::ordered_json::array();
  for (size_t k = 0; k < blend.num_inputs(); ++k) {
    const auto& in = blend.input(k);
    nlohmann::ordered_json i;
    i["prefix"] = std::string(blend.prefix(k));
    i["weight"] = in.weight;
    i["normalized_weight"] = in.normalized;
    i["documents"] = in.documents;
    i["idx_xxh64"] = hex64(in.idx_hash);
    i["bin_bytes"] = in.bin_bytes;
    for (int s = 0; s < kNumSplits; ++s) {
      const auto& r = in.splits[s];
      nlohmann::ordered_json sj;
      sj["first_document"] = r.begin;
      sj["documents"] = r.end - r.begin;
      sj["tokens"] = r.tokens;
      sj["epochs"] = r.epochs;
      sj["separate_final_epoch"] = (r.flags & kBlendFinalEpochSeparate) != 0;
      sj["samples_requested"] = r.requested;
      sj["samples_built"] = r.samples;
      sj["samples_drawn"] = drawn[s][k];
      sj["share"] = h.samples[s] == 0 ? 0.0 : double(drawn[s][k]) / double(h.samples[s]);
      i["splits"][split_name(Split(s))] = sj;
    }
    j["inputs"].push_back(i);
  }
  return j;
}

std::string format_blend_description(const nlohmann::ordered_json& j) {
  std::string out;
  const auto& split = j["split"];
  const auto& samples = j["samples"];
  out += fmt::format("blend        {} (version {}, fingerprint {})\n", j["blend"].get<std::string>(),
                     j["version"].get<int>(), j["fingerprint"].get<std::string>());
  out += fmt::format("sequence     {} tokens (+1 per sample), seed {}\n", j["seq_length"].get<uint64_t>(),
                     j["seed"].get<uint64_t>());
  out += fmt::format("split        train {:.4g}, valid {:.4g}, test {:.4g}\n", split[0].get<double>(),
                     split[1].get<double>(), split[2].get<double>());
  out += fmt::format("samples      train {}, valid {}, test {}\n", samples["train"].get<uint64_t>(),
                     samples["valid"].get<uint64_t>(), samples["test"].get<uint64_t>());
  size_t k = 0;
  for (const auto& in : j["inputs"]) {
    out += fmt::format("\ninput {}      {}\n", ++k, in["prefix"].get<std::string>());
    out += fmt::format("  weight     {:g} (normalized {:.6f})\n", in["weight"].get<double>(),
                       in["normalized_weight"].get<double>());
    out += fmt::format("  documents  {}, .idx xxh64 {}, .bin {} bytes\n", in["documents"].get<uint64_t>(),
                       in["idx_xxh64"].get<std::string>(), in["bin_bytes"].get<uint64_t>());
    out += fmt::format("  {:<6} {:>10} {:>12} {:>7} {:>12} {:>12} {:>12} {:>8}\n", "split", "documents", "tokens",
                       "epochs", "requested", "built", "drawn", "share");
    for (const auto& [name, s] : in["splits"].items())
      out += fmt::format("  {:<6} {:>10} {:>12} {:>7} {:>12} {:>12} {:>12} {:>8.4f}\n", name,
                         s["documents"].get<uint64_t>(), s["tokens"].get<uint64_t>(), s["epochs"].get<uint64_t>(),
                         s["samples_requested"].get<uint64_t>(), s["samples_built"].get<uint64_t>(),
                         s["samples_drawn"].get<uint64_t>(), s["share"].get<double>());
  }
  return out;
}

}  // namespace meg
