#include "ckpt/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "core/byte_stream.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/json_file.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"

namespace meg {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 30;  // checkpoint.json: a sanity limit
constexpr uint64_t kMaxLatestBytes = 4096;

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

std::string quote(const std::string& s) { return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace); }

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) system_error(to, fmt::format("cannot rename {} to it", from));
}

// A name a checkpoint may hold a file under: plain, visible, not the record itself.
bool valid_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name.find('\0') == std::string::npos &&
         name[0] != '.' && name != kCheckpointRecordFile && name != kCheckpointLatestFile;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Temporary directories and files that saves leave behind when they crash.
bool is_leftover(const std::string& name) {
  if (name.rfind(".iter_", 0) == 0)
    return name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos;
  return name.rfind(".latest.tmp.", 0) == 0;
}

std::string aside_path(const std::string& dir, int64_t iteration) {
  return join(dir, fmt::format(".{}.old-{}", checkpoint_dir_name(iteration), ::getpid()));
}

// Reads a small file whole; InputError when it cannot be read or exceeds LIMIT bytes.
std::string read_small_file(const std::string& path, uint64_t limit) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) throw InputError(fmt::format("{}: cannot read: {}", path, ec.message()));
  if (size > limit) input_error("{}: {} bytes, more than the {}-byte limit", path, size, limit);
  std::ifstream in(path, std::ios::binary);
  if (!in) system_error(path, "cannot open");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool is_complete(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(join(path, kCheckpointRecordFile), ec);
}

// PATH without a trailing separator, so that its filename() is the directory's name.
fs::path strip_trailing(const std::string& path) {
  fs::path p(path);
  if (p.filename().empty() && p.has_parent_path()) p = p.parent_path();
  return p;
}

}  // namespace

std::string checkpoint_dir_name(int64_t iteration) {
  if (iteration < 0) throw std::invalid_argument(fmt::format("negative checkpoint iteration {}", iteration));
  return fmt::format("iter_{:07d}", iteration);
}

std::optional<int64_t> parse_checkpoint_dir_name(const std::string& name) {
  if (name.size() < 12 || name.size() > 24 || name.rfind("iter_", 0) != 0) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    if (v > (INT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  if (checkpoint_dir_name(v) != name) return std::nullopt;  // one spelling per iteration
  return v;
}

// ---------------------------------------------------------------------------------------------
// Saving

namespace {

// DIR/latest names iter_ITERATION, replaced through a synced temporary file and a rename.
void write_latest(const std::string& dir, int64_t iteration) {
  {
    ByteWriter latest(join(dir, kCheckpointLatestFile));
    const std::string text = checkpoint_dir_name(iteration) + "\n";
    latest.write(text.data(), text.size());
    latest.commit();
  }
  sync_directory(dir);
}

// The directory name DIR/latest holds, "" when there is no `latest`.
std::string read_latest(const std::string& dir) {
  const std::string latest = join(dir, kCheckpointLatestFile);
  std::error_code ec;
  if (!fs::exists(latest, ec)) return "";
  std::string text = read_small_file(latest, kMaxLatestBytes);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

CheckpointWriter::CheckpointWriter(const std::string& dir, int64_t iteration, CheckpointSaveOptions options)
    : dir_(dir), iteration_(iteration), options_(options) {
  if (options.keep < 0) throw std::invalid_argument(fmt::format("negative checkpoint keep {}", options.keep));
  const std::string name = checkpoint_dir_name(iteration);
  final_ = join(dir_, name);

  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw InputError(fmt::format("{}: cannot create checkpoint directory: {}", dir_, ec.message()));
  if (!fs::is_directory(dir_, ec)) input_error("{}: not a directory", dir_);
  if (fs::exists(final_, ec) && !options_.overwrite)
    input_error("{}: checkpoint of iteration {} already exists; refusing to overwrite it", final_, iteration);

  // Leftovers of crashed saves.
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string leftover = entry.path().filename().string();
    if (!is_leftover(leftover)) continue;
    std::error_code rm;
    fs::remove_all(entry.path(), rm);
    if (rm) log::warn("{}: cannot remove leftover of an earlier save: {}", entry.path().string(), rm.message());
  }
  if (ec) throw InputError(fmt::format("{}: cannot list checkpoint directory: {}", dir_, ec.message()));

  temp_ = join(dir_, fmt::format(".{}.tmp-{}", name, ::getpid()));
  if (!fs::create_directory(temp_, ec) || ec)
    throw InputError(fmt::format("{}: cannot create temporary checkpoint directory: {}", temp_,
                                 ec ? ec.message() : "it exists"));
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  files_.clear();  // their temporary files go first
  std::error_code ec;
  fs::remove_all(temp_, ec);
}

namespace {
void check_file_name(const std::string& name) {
  if (!valid_file_name(name) || !ends_with(name, ".safetensors"))
    throw std::invalid_argument(fmt::format("checkpoint file name {} is not a plain NAME.safetensors", quote(name)));
}

uint64_t size_of(const std::string& path) {
  std::error_code ec;
  const uint64_t bytes = fs::file_size(path, ec);
  if (ec) throw InputError(fmt::format("{}: cannot stat written file: {}", path, ec.message()));
  return bytes;
}
}  // namespace

CheckpointFileInfo write_checkpoint_file(const std::string& temp_dir, const std::string& name,
                                         const std::vector<SafetensorsInput>& tensors,
                                         const SafetensorsMetadata& metadata) {
  check_file_name(name);
  const std::string path = join(temp_dir, name);
  SafetensorsWriter writer(path, metadata);
  write_tensors(writer, tensors);
  const uint64_t xxh64 = writer.commit();
  return {name, xxh64, size_of(path)};
}

SafetensorsWriter& CheckpointWriter::file(const std::string& name, SafetensorsMetadata metadata) {
  if (committed_) throw std::logic_error("CheckpointWriter::file after commit");
  check_file_name(name);
  if (files_.count(name)) throw std::invalid_argument(fmt::format("checkpoint file {} added twice", quote(name)));
  auto& state = files_[name];
  state.writer = std::make_unique<SafetensorsWriter>(join(temp_, name), std::move(metadata));
  return *state.writer;
}

void CheckpointWriter::close_file(const std::string& name) {
  const auto it = files_.find(name);
  if (it == files_.end()) throw std::invalid_argument(fmt::format("no checkpoint file {} to close", quote(name)));
  auto& state = it->second;
  if (!state.writer) return;
  state.xxh64 = state.writer->commit();
  state.writer.reset();
  state.bytes = size_of(join(temp_, name));
}

void CheckpointWriter::write_file(const std::string& name, const std::vector<CheckpointTensor>& tensors,
                                  const SafetensorsMetadata& metadata) {
  add_file(write_checkpoint_file(temp_, name, tensors, metadata));
}

void CheckpointWriter::add_file(const CheckpointFileInfo& info) {
  if (committed_) throw std::logic_error("CheckpointWriter::add_file after commit");
  check_file_name(info.name);
  if (files_.count(info.name)) throw std::invalid_argument(fmt::format("checkpoint file {} added twice", quote(info.name)));
  const std::string path = join(temp_, info.name);
  if (size_of(path) != info.bytes)
    input_error("{}: {} bytes where its writer reported {}", path, size_of(path), info.bytes);
  auto& state = files_[info.name];
  state.xxh64 = info.xxh64;
  state.bytes = info.bytes;
}

void CheckpointWriter::attach(const CheckpointAttachment& a) {
  if (!valid_file_name(a.name) || ends_with(a.name, ".safetensors") || files_.count(a.name) || attached_.count(a.name))
    throw std::invalid_argument(fmt::format("checkpoint attachment name {} is not a plain, new, non-safetensors name",
                                            quote(a.name)));
  const std::string to = join(temp_, a.name);
  if (!a.link || ::link(a.source.c_str(), to.c_str()) != 0) {  // another file system: a copy
    const MappedFile from(a.source);
    ByteWriter out(to);
    out.write(from.data(), from.size());
    out.commit();
  }
  const MappedFile placed(to);
  const uint64_t sum = xxh64(placed.data(), placed.size());
  if (a.xxh64 && sum != *a.xxh64)
    input_error("{}: changed since it was read (xxh64 {}, then {}); the checkpoint would not keep what was used",
                a.source, hex64(sum), hex64(*a.xxh64));
  attached_[a.name] = {a.name, sum, placed.size()};
}

std::string CheckpointWriter::commit(const ojson& record) {
  if (committed_) throw std::logic_error("CheckpointWriter::commit called twice");
  ojson files = ojson::object();
  for (auto& [name, state] : files_) {
    close_file(name);
    files[name] = {{"xxh64", hex64(state.xxh64)}, {"bytes", state.bytes}};
  }
  for (const auto& a : options_.attachments) attach(a);
  ojson j = {{"format", kCheckpointFormat},
             {"version", kCheckpointVersion},
             {"iteration", iteration_},
             {"meg_version", MEG_VERSION},
             {"record", record},
             {"files", std::move(files)}};
  if (!attached_.empty()) {
    ojson attachments = ojson::object();
    for (const auto& [name, info] : attached_) attachments[name] = {{"xxh64", hex64(info.xxh64)}, {"bytes", info.bytes}};
    j["attachments"] = std::move(attachments);
  }
  {
    ByteWriter out(join(temp_, kCheckpointRecordFile));
    const std::string text = j.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
    out.write(text.data(), text.size());
    out.commit();
  }
  sync_directory(temp_);

  // Into place. An existing checkpoint of this iteration (overwrite) is moved aside first, so
  // that the name never holds a mix of the two.
  std::string aside;
  std::error_code ec;
  if (fs::exists(final_, ec)) {
    if (!options_.overwrite)
      input_error("{}: checkpoint of iteration {} already exists; refusing to overwrite it", final_, iteration_);
    aside = aside_path(dir_, iteration_);
    rename_or_throw(final_, aside);
  }
  if (::rename(temp_.c_str(), final_.c_str()) != 0) {
    const int err = errno;
    if (!aside.empty()) ::rename(aside.c_str(), final_.c_str());  // put the replaced one back
    errno = err;
    system_error(final_, fmt::format("cannot rename {} to it", temp_));
  }
  committed_ = true;
  sync_directory(dir_);

  write_latest(dir_, iteration_);

  if (!aside.empty()) {
    fs::remove_all(aside, ec);
    if (ec) log::warn("{}: cannot remove replaced checkpoint: {}", aside, ec.message());
  }

  // Old checkpoints beyond keep: never the one just written, which counts as one of them.
  if (options_.keep > 0) {
    std::vector<CheckpointEntry> others;
    for (auto& e : list_checkpoints(dir_))
      if (e.iteration != iteration_) others.push_back(std::move(e));
    const size_t keep_others = static_cast<size_t>(options_.keep) - 1;
    if (others.size() > keep_others) {
      others.resize(others.size() - keep_others);  // oldest first: these go
      for (const auto& e : others) {
        const std::string to = aside_path(dir_, e.iteration);
        if (::rename(e.path.c_str(), to.c_str()) != 0) {
          log::warn("{}: cannot remove old checkpoint: {}", e.path, std::strerror(errno));
          continue;
        }
        fs::remove_all(to, ec);
        if (ec) log::warn("{}: cannot remove old checkpoint: {}", to, ec.message());
      }
    }
  }
  return final_;
}

std::string save_checkpoint(const std::string& dir, int64_t iteration, const ojson& record,
                            const std::map<std::string, std::vector<CheckpointTensor>>& files,
                            CheckpointSaveOptions options) {
  CheckpointWriter w(dir, iteration, options);
  for (const auto& [name, tensors] : files) w.write_file(name, tensors);
  return w.commit(record);
}

// ---------------------------------------------------------------------------------------------
// Finding

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto it = parse_checkpoint_dir_name(entry.path().filename().string());
    if (it && is_complete(entry.path().string())) out.push_back({*it, entry.path().string()});
  }
  if (ec) throw InputError(fmt::format("{}: cannot list checkpoint directory: {}", dir, ec.message()));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.iteration < b.iteration; });
  return out;
}

std::string find_latest(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) input_error("{}: no such checkpoint directory", dir);
  const std::string latest = join(dir, kCheckpointLatestFile);
  if (fs::exists(latest, ec)) {
    const std::string text = read_latest(dir);
    if (!parse_checkpoint_dir_name(text))
      input_error("{}: names {}, not a checkpoint directory iter_NNNNNNN", latest, quote(text));
    const std::string path = join(dir, text);
    if (!fs::is_directory(path, ec))
      input_error("{}: names {}, which does not exist (removed, or not copied with it?)", latest, text);
    if (!is_complete(path))
      input_error("{}: names {}, which is incomplete: it has no {}", latest, text, kCheckpointRecordFile);
    return path;
  }
  auto all = list_checkpoints(dir);
  if (all.empty()) input_error("{}: no checkpoint: neither a `latest` file nor a complete iter_NNNNNNN directory", dir);
  return all.back().path;
}

// ---------------------------------------------------------------------------------------------
// Loading

std::vector<std::string> Checkpoint::file_names() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : files_) out.push_back(name);
  return out;
}

const SafetensorsFile& Checkpoint::file(const std::string& name) const {
  const auto it = files_.find(name);
  if (it == files_.end()) input_error("{}: checkpoint has no file {}", path_, quote(name));
  return *it->second;
}

std::vector<std::string> Checkpoint::attachment_names() const {
  std::vector<std::string> out;
  for (const auto& [name, a] : attachments_) out.push_back(name);
  return out;
}

std::string Checkpoint::attachment_path(const std::string& name) const {
  const auto it = attachments_.find(name);
  if (it == attachments_.end()) input_error("{}: checkpoint has no attached file {}", path_, quote(name));
  return it->second.path;
}

std::vector<CheckpointAttachment> Checkpoint::carried_attachments() const {
  std::vector<CheckpointAttachment> out;
  for (const auto& [name, a] : attachments_) out.push_back({name, a.path, true, a.xxh64});
  return out;
}

const SafetensorsTensor& Checkpoint::tensor(const std::string& file_name, const std::string& name) const {
  return file(file_name).tensor(name);
}

const SafetensorsTensor& Checkpoint::tensor(const std::string& file_name, const std::string& name,
                                            SafetensorsDtype dtype, const std::vector<uint64_t>& shape) const {
  return file(file_name).tensor(name, dtype, shape);
}

bool holds_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::exists(join(path, kCheckpointRecordFile), ec) || fs::exists(join(path, kCheckpointLatestFile), ec) ||
         !list_checkpoints(path).empty();
}

std::string checkpoint_to_load(const std::string& path) {
  const fs::path p = strip_trailing(path);
  std::error_code ec;
  if (fs::exists(p / kCheckpointRecordFile, ec)) return p.string();
  if (parse_checkpoint_dir_name(p.filename().string()) && fs::is_directory(p, ec))
    input_error("{}: incomplete checkpoint: it has no {}", p.string(), kCheckpointRecordFile);
  return find_latest(p.string());
}

Checkpoint load_checkpoint(const std::string& path, CheckpointLoadOptions options) {
  const std::string dir = checkpoint_to_load(path);
  std::error_code ec;

  Checkpoint ck;
  ck.path_ = dir;
  const std::string record_path = join(dir, kCheckpointRecordFile);
  const std::string text = read_small_file(record_path, kMaxRecordBytes);
  ck.json_ = parse_json<ojson>(text, JsonSource{record_path});
  const ojson& j = ck.json_;
  if (!j.is_object()) input_error("{}: not a JSON object", record_path);
  const auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kCheckpointFormat)
    input_error("{}: not a meg checkpoint record (\"format\" is not \"{}\")", record_path, kCheckpointFormat);
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer())
    input_error("{}: no integer \"version\"", record_path);
  if (version->get<int64_t>() != kCheckpointVersion)
    input_error("{}: checkpoint format version {} is not supported (this meg reads version {})", record_path,
                version->get<int64_t>(), kCheckpointVersion);
  const auto iteration = j.find("iteration");
  if (iteration == j.end() || !iteration->is_number_unsigned() || iteration->get<uint64_t>() > INT64_MAX)
    input_error("{}: \"iteration\" is not a non-negative integer", record_path);
  ck.iteration_ = iteration->get<int64_t>();
  if (const auto named = parse_checkpoint_dir_name(strip_trailing(dir).filename().string());
      named && *named != ck.iteration_)
    input_error("{}: records iteration {} but its directory is named for iteration {}", record_path, ck.iteration_,
                *named);
  if (!j.contains("record")) input_error("{}: no \"record\"", record_path);
  const auto files = j.find("files");
  if (files == j.end() || !files->is_object()) input_error("{}: no \"files\" object", record_path);
  const auto attachments = j.find("attachments");
  if (attachments != j.end() && !attachments->is_object())
    input_error("{}: \"attachments\" is not an object", record_path);

  // A listed file: present, of its recorded size and (when verified) checksum.
  const auto check_listed = [&](const std::string& name, const ojson& entry, bool verify) {
    if (!valid_file_name(name)) input_error("{}: file name {} is not a plain file name", record_path, quote(name));
    const std::string where = fmt::format("{}: file {}", record_path, quote(name));
    if (!entry.is_object()) input_error("{}: entry is not an object", where);
    const auto xxh = entry.find("xxh64");
    const auto bytes = entry.find("bytes");
    if (xxh == entry.end() || !xxh->is_string() || xxh->get<std::string>().size() != 16 ||
        xxh->get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos)
      input_error("{}: \"xxh64\" is not 16 lowercase hex digits", where);
    if (bytes == entry.end() || !bytes->is_number_unsigned())
      input_error("{}: \"bytes\" is not a non-negative integer", where);
    const uint64_t want_bytes = bytes->get<uint64_t>();
    const uint64_t want_xxh = std::stoull(xxh->get<std::string>(), nullptr, 16);

    const std::string file_path = join(dir, name);
    if (!fs::exists(file_path, ec))
      input_error("{}: missing file (listed in {})", file_path, kCheckpointRecordFile);
    const uint64_t size = fs::file_size(file_path, ec);
    if (ec) throw InputError(fmt::format("{}: cannot read: {}", file_path, ec.message()));
    if (size < want_bytes)
      input_error("{}: truncated: {} bytes, {} recorded in {}", file_path, size, want_bytes, kCheckpointRecordFile);
    if (size > want_bytes)
      input_error("{}: {} bytes, longer than the {} recorded in {}", file_path, size, want_bytes,
                  kCheckpointRecordFile);
    if (verify) {
      MappedFile raw(file_path);
      const uint64_t got = xxh64(raw.data(), raw.size());
      if (got != want_xxh)
        input_error("{}: checksum mismatch: xxh64 {} but {} recorded in {} (corrupt or replaced file)", file_path,
                    hex64(got), hex64(want_xxh), kCheckpointRecordFile);
    }
    return Checkpoint::ListedFile{file_path, want_xxh, want_bytes};
  };
  for (const auto& [name, entry] : files->items()) {
    // The checksum comes before the structure: a corrupt file is named as such rather than
    // reported through whatever its damaged header happens to say.
    const bool verify = options.verify_checksums && (!options.checksum_file || options.checksum_file(name));
    ck.files_[name] = std::make_unique<SafetensorsFile>(check_listed(name, entry, verify).path);
  }
  if (attachments != j.end())
    for (const auto& [name, entry] : attachments->items()) {
      if (files->contains(name)) input_error("{}: {} is listed as a file and as an attachment", record_path, quote(name));
      ck.attachments_[name] = check_listed(name, entry, options.verify_checksums);  // small: always read
    }
  return ck;
}

std::optional<std::string> finish_interrupted_save(const std::string& dir, int64_t iteration, const ojson& record) {
  const std::string name = checkpoint_dir_name(iteration);
  const std::string path = join(dir, name);
  if (!is_complete(path)) return std::nullopt;
  // It is the newest: `latest`, if any, names an older one, and no complete checkpoint is newer.
  const auto named = parse_checkpoint_dir_name(read_latest(dir));
  const auto all = list_checkpoints(dir);
  if ((named && *named >= iteration) || all.back().iteration != iteration) return std::nullopt;
  try {
    if (load_checkpoint(path).record() != record) return std::nullopt;
  } catch (const InputError&) {
    return std::nullopt;  // not the same checkpoint, whole: the writer's refusal says the rest
  }
  write_latest(dir, iteration);
  return path;
}

}  // namespace meg
