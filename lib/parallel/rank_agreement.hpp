// Settings that every rank of a job must share, compared before the first collective that depends
// on them. Ranks started with different options (mpirun's MPMD form `-np 1 TOOL A : -np 1 TOOL B`,
// a settings file edited between the launches of two nodes) would otherwise enter different
// collectives and hang, or meet in the same ones and compute something wrong without a word.
//
// Each rank hashes each of its settings; the ranks exchange fixed-size records (the number of
// settings and a hash of their names, then one hash per setting), so every rank learns which
// settings differ and where, and then only the values of those, so the report can show them.
// Three small all-gathers: cheap at any scale, and done before the watchdog of a training loop
// starts.
#pragma once

#include <string>
#include <vector>

#include "parallel/comm.hpp"

namespace meg {

struct RankSetting {
  std::string name;   // as the user spells it: "--iters"
  std::string value;  // what is compared: "300", or the fingerprint of the file an option names
  std::string note;   // shown after the value but not compared: the file's path, say
};

// Collective over COMM: the settings whose values differ between members, each with the values
// held and the first member holding each (at most a few), e.g.
//   --iters (rank 0: 300, rank 1: 301), --data (rank 0: 3f0c... (a.blend), rank 1: 81e2... (b.blend))
// Empty when every member holds the same. Every member gets the same text.
std::string rank_disagreement(Comm& comm, const std::vector<RankSetting>& settings);

// Collective over COMM: returns when every member holds the same SETTINGS. Otherwise member 0
// throws InputError "ranks disagree on ..." (rank_disagreement's text). The job needs that one
// line only, and member 0's failure ends the job (cli::run_tool aborts it), so the others wait for
// that quietly; should the job still run a few seconds later, they throw the same error.
void check_ranks_agree(Comm& comm, const std::vector<RankSetting>& settings);

}  // namespace meg
