// The output of a meg-ckpt-convert run: never inside its input, and gone when the run fails.
#pragma once

#include <functional>
#include <string>

namespace meg {

// InputError naming --save unless OUT lies outside INPUT: a conversion only reads its input.
void check_output_outside(const std::string& out, const std::string& input);

// Calls WRITE, which writes into OUT (its files through temporary names renamed into place); when
// WRITE throws, also removes OUT if this call found it absent, so a failed run leaves nothing.
void write_or_nothing(const std::string& out, const std::function<void()>& write);

}  // namespace meg
