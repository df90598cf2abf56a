# meg-tokenize | meg-index reproduces Megatron-LM's own .bin/.idx byte for byte, for both tokenizer
# kinds and any number of workers, and meg reads Megatron's files.
source "$(dirname "$0")/lib.sh"
M=$MEG_TEST_DATA/megatron
G=$MEG_TEST_DATA/gpt2

for workers in 1 2 3; do
  meg-tokenize -q --tokenizer $M/fortunes_spm.model --append-eod --workers $workers $M/fortunes_fixture.jsonl \
    | meg-index -q -o spm$workers
  same_file spm$workers.bin $M/fortunes_spm.bin
  same_file spm$workers.idx $M/fortunes_spm.idx

  meg-tokenize -q --tokenizer $G/vocab.json --merges $G/merges.txt --append-eod --workers $workers \
    $M/fortunes_fixture.jsonl | meg-index -q -o gpt2_$workers
  same_file gpt2_$workers.bin $M/fortunes_gpt2.bin
  same_file gpt2_$workers.idx $M/fortunes_gpt2.idx
done

# Compressed streams and files given as arguments give the same result.
meg-tokenize -q --tokenizer $M/fortunes_spm.model --append-eod --zstd -o spm.tok.zst $M/fortunes_fixture.jsonl
meg-index -q -o spmz spm.tok.zst
same_file spmz.bin $M/fortunes_spm.bin
same_file spmz.idx $M/fortunes_spm.idx

# Megatron's files read back: --info, --verify and a decode of its tokens.
meg-index --verify --vocab-size 2000 $M/fortunes_spm 2>/dev/null
meg-index --verify --vocab-size 50257 $M/fortunes_gpt2 2>/dev/null
[ "$(meg-index --info --json $M/fortunes_gpt2 | grep -o '"documents":[0-9]*')" = '"documents":605' ] || fail "info"
echo "megatron parity: ok"
