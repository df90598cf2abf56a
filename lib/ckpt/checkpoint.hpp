// The native checkpoint of meg-pretrain: one directory per saved iteration.
//
// Layout of a checkpoint directory DIR:
//
//   DIR/latest                       "iter_0000100\n": the newest checkpoint, replaced atomically
//   DIR/iter_0000100/                one saved iteration (7 digits, more past 9999999)
//     model.safetensors              tensors, in safetensors files; the names are the caller's
//     optimizer.safetensors          (one file per concern or per shard)
//     tokenizer.model                attached files (not safetensors): the caller's, listed
//                                    under "attachments" (meg-pretrain's tokenizer)
//     checkpoint.json                the record, written last
//   DIR/iter_0000200/ ...
//   DIR/.iter_0000300.tmp-PID/       a save in progress, or one that crashed: never loaded
//   DIR/.iter_0000100.old-PID/       a checkpoint being replaced or removed: never loaded
//
// checkpoint.json (format "meg-checkpoint", version 1):
//
//   {"format": "meg-checkpoint",
//    "version": 1,
//    "iteration": 100,
//    "meg_version": "0.1.0",                      the meg that wrote it (informative)
//    "record": {...},                             the caller's: model config, resolved options,
//                                                 consumed samples, data position, RNG states,
//                                                 optimizer settings, parallel layout ...
//    "files": {"model.safetensors": {"xxh64": "16 hex digits", "bytes": 123456}, ...},
//    "attachments": {"tokenizer.model": {"xxh64": "16 hex digits", "bytes": 4567}, ...}}
//
// "files" are safetensors files; "attachments" (optional) are other files kept with the
// checkpoint, copied from elsewhere when it is saved: a reader that does not know them ignores
// them. An attachment that is a file of another checkpoint is hard-linked where the file system
// allows, so that the checkpoints of a run share one copy of what they all hold.
//
// Saving: the files are written into DIR/.iter_NNNNNNN.tmp-PID/, each through a temporary name,
// synced and renamed; checkpoint.json is written last and synced; the directory is synced and
// renamed to DIR/iter_NNNNNNN (refused when that exists, unless overwrite is asked for); DIR is
// synced; DIR/latest is replaced through a synced temporary file and a rename. Then, with keep N
// > 0, the oldest complete checkpoints beyond N are removed (renamed aside first, then deleted);
// the one just written always stays, even when older ones have higher iteration numbers. A save
// also removes temporary directories left by crashed saves: one writer per DIR at a time.
// A crash at any point leaves either the previous state or the new checkpoint, never a directory
// named iter_* that holds a partial checkpoint.
//
// Loading: a checkpoint directory is complete when it holds checkpoint.json. DIR/latest, when
// present, is the truth: a `latest` naming a missing or incomplete directory is refused, never
// silently replaced by another checkpoint. Without `latest` (a hand-copied tree), the complete
// iter_* directory with the highest iteration is taken. The record is checked (format, version,
// iteration against the directory name, file names), then every file it lists: present, its
// recorded size (else "truncated" or "longer than recorded"), a valid safetensors file (not the
// attachments), and its recorded XXH64. Tensors are fetched by file and name with their expected dtype and shape.
// Every refusal is a one-line InputError naming the file and the problem.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.hpp"

namespace meg {

inline constexpr const char* kCheckpointFormat = "meg-checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kCheckpointRecordFile = "checkpoint.json";
inline constexpr const char* kCheckpointLatestFile = "latest";

// "iter_0000100" for 100.
std::string checkpoint_dir_name(int64_t iteration);
// The iteration of a directory name "iter_NNNNNNN" (7 or more digits), or nullopt.
std::optional<int64_t> parse_checkpoint_dir_name(const std::string& name);

// One tensor to save, as safetensors files take them.
using CheckpointTensor = SafetensorsInput;

// A file of a checkpoint: its name, checksum and size, as the record lists it.
struct CheckpointFileInfo {
  std::string name;
  uint64_t xxh64 = 0;
  uint64_t bytes = 0;
};

// Writes TENSORS as the safetensors file NAME into TEMP_DIR, the temporary directory of a
// CheckpointWriter (possibly another process's: the ranks of a distributed job write their shards
// in parallel into rank 0's), synced; returns what CheckpointWriter::add_file() takes.
CheckpointFileInfo write_checkpoint_file(const std::string& temp_dir, const std::string& name,
                                         const std::vector<SafetensorsInput>& tensors,
                                         const SafetensorsMetadata& metadata = {});

// A file to keep with a checkpoint (not a safetensors file): copied from SOURCE when it commits.
struct CheckpointAttachment {
  std::string name;    // a plain file name in the checkpoint, not ending in .safetensors
  std::string source;  // the file to take
  // SOURCE is a file of another checkpoint, which nothing rewrites: hard-link it rather than copy
  // where the file system allows (a link to a file that may be edited in place would change too).
  bool link = false;
  // When set, the checksum SOURCE must have: a file that changed since the caller read it is an
  // InputError naming it.
  std::optional<uint64_t> xxh64;
};

struct CheckpointSaveOptions {
  int keep = 0;            // keep the newest N complete checkpoints; 0 keeps all
  bool overwrite = false;  // replace an existing checkpoint of the same iteration
  std::vector<CheckpointAttachment> attachments = {};
};

// Writes one checkpoint in steps, for tensors streamed piece by piece:
//
//   CheckpointWriter w(dir, 100, {.keep = 3});
//   SafetensorsWriter& f = w.file("model.safetensors");
//   f.declare(...); f.write_header(); f.write(...);     as SafetensorsWriter documents
//   w.close_file("model.safetensors");                 optional: commit() closes the rest
//   std::string path = w.commit(record);
//
// Destroying a writer before commit() removes its temporary directory. The constructor refuses
// (InputError) an iteration that is already saved, unless options.overwrite.
class CheckpointWriter {
 public:
  CheckpointWriter(const std::string& dir, int64_t iteration, CheckpointSaveOptions options = {});
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // A new safetensors file in the checkpoint. NAME is a plain file name ending in ".safetensors",
  // not seen before (std::invalid_argument otherwise).
  SafetensorsWriter& file(const std::string& name, SafetensorsMetadata metadata = {});
  // Commits file NAME (every tensor must be written) and records its checksum and size.
  void close_file(const std::string& name);
  // Writes the whole of TENSORS as file NAME.
  void write_file(const std::string& name, const std::vector<CheckpointTensor>& tensors,
                  const SafetensorsMetadata& metadata = {});
  // Lists a file that write_checkpoint_file() wrote into temp_path() (another process, say). The
  // name rules of file() apply; InputError when the file is missing or not of INFO's size.
  void add_file(const CheckpointFileInfo& info);

  // Closes the open files, places the attachments, writes checkpoint.json with RECORD, renames
  // the directory into place, updates `latest` and removes old checkpoints. Returns the path of
  // the checkpoint directory.
  std::string commit(const nlohmann::ordered_json& record);

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }

 private:
  struct FileState {
    std::unique_ptr<SafetensorsWriter> writer;
    uint64_t xxh64 = 0, bytes = 0;
  };

  std::string dir_, temp_, final_;
  int64_t iteration_;
  CheckpointSaveOptions options_;
  std::map<std::string, FileState> files_;
  std::map<std::string, CheckpointFileInfo> attached_;
  bool committed_ = false;

  void attach(const CheckpointAttachment& a);
};

// Saves a checkpoint in one call; FILES maps file names to their tensors. Returns its path.
std::string save_checkpoint(const std::string& dir, int64_t iteration, const nlohmann::ordered_json& record,
                            const std::map<std::string, std::vector<CheckpointTensor>>& files,
                            CheckpointSaveOptions options = {});

// A complete checkpoint found in a directory.
struct CheckpointEntry {
  int64_t iteration;
  std::string path;
};

// The complete checkpoints (iter_* directories holding checkpoint.json) in DIR, oldest first.
// Temporary and incomplete directories are left out. An absent DIR has none.
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

// The path of the checkpoint to resume from in DIR: the one `latest` names (InputError when it
// names a missing or incomplete directory), or without `latest` the highest complete iter_*
// directory. InputError when DIR holds no checkpoint.
std::string find_latest(const std::string& dir);

// Whether PATH names a checkpoint (a directory holding checkpoint.json) or a directory holding
// some (a `latest` file, or complete iter_* directories).
bool holds_checkpoint(const std::string& path);

// The checkpoint directory load_checkpoint(PATH) reads: PATH itself when it holds checkpoint.json,
// else find_latest(PATH). InputError for an iter_* directory without its record.
std::string checkpoint_to_load(const std::string& path);

struct CheckpointLoadOptions {
  // The files whose checksums are verified, when set (a reader of some files, such as an export of
  // the parameters alone, need not read the rest); all when empty.
  std::function<bool(const std::string& file)> checksum_file;
  bool verify_checksums = true;  // reads every byte; sizes and headers are checked regardless
};

// A loaded checkpoint: its record and its safetensors files, mapped and verified.
class Checkpoint {
 public:
  const std::string& path() const { return path_; }  // the iter_* directory
  int64_t iteration() const { return iteration_; }
  const nlohmann::ordered_json& record() const { return json_["record"]; }
  const nlohmann::ordered_json& json() const { return json_; }  // the whole checkpoint.json

  std::vector<std::string> file_names() const;  // the safetensors files
  const SafetensorsFile& file(const std::string& name) const;  // InputError when absent

  // The attached files (CheckpointAttachment), checked as the others are (present, size, checksum).
  std::vector<std::string> attachment_names() const;
  bool has_attachment(const std::string& name) const { return attachments_.count(name) > 0; }
  std::string attachment_path(const std::string& name) const;  // InputError when absent
  // Attachments that carry them into another checkpoint (by hard link where possible).
  std::vector<CheckpointAttachment> carried_attachments() const;

  // Tensor NAME of FILE; InputError when absent or of another dtype or shape.
  const SafetensorsTensor& tensor(const std::string& file, const std::string& name) const;
  const SafetensorsTensor& tensor(const std::string& file, const std::string& name, SafetensorsDtype dtype,
                                  const std::vector<uint64_t>& shape) const;

 private:
  friend Checkpoint load_checkpoint(const std::string&, CheckpointLoadOptions);
  std::string path_;
  int64_t iteration_ = 0;
  nlohmann::ordered_json json_;
  struct ListedFile {
    std::string path;
    uint64_t xxh64 = 0, bytes = 0;
  };
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, ListedFile> attachments_;
};

// Loads PATH: a checkpoint directory (holding checkpoint.json) or a directory of checkpoints
// (then find_latest() picks one). Validates everything the header comment lists.
Checkpoint load_checkpoint(const std::string& path, CheckpointLoadOptions options = {});

// A save of ITERATION into DIR killed after its rename and before `latest`: DIR/iter_NNNNNNN is the
// newest complete checkpoint, `latest` is absent or names an older one, its files check and its
// record is RECORD. Then writes `latest` and returns the checkpoint's path, so that rerunning a
// conversion finishes it; otherwise (no such checkpoint, a newer one or `latest` naming it or a
// newer one, another record, a file that fails its check) changes nothing and returns nullopt.
std::optional<std::string> finish_interrupted_save(const std::string& dir, int64_t iteration,
                                                   const nlohmann::ordered_json& record);

}  // namespace meg
