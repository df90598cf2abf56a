// JSONL documents read as meg-tokenize reads them: whole records in batches, then each record's
// text under "text". A record that is not a document is the tool's to report (it counts or stops on
// them), so extract_document's problems are not crashes; only exceptions other than InputError are.
#include <string>

#include "data/document_reader.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = meg::fuzz::write_file("input.jsonl", {data, size});
  return meg::fuzz::refuse_only_with_input_error([&] {
    const meg::DocumentFormat format;
    meg::RecordReader reader(path, format);
    meg::RecordBatch batch;
    std::string text, message;
    while (reader.next_batch(batch, 1 << 12))
      for (size_t i = 0; i < batch.records.size(); ++i) meg::extract_document(batch, i, format, text, message);
  });
}
