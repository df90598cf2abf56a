// lm-evaluation-harness's wikitext_detokenizer: WikiText's tokenized pages ("@-@", " , ",
// "( text )", "= = Heading = =") turned back into plain text before they are scored, the same
// replacements in the same order (its quirks included), so that perplexities are comparable.
#pragma once

#include <string>
#include <string_view>

namespace meg {

std::string wikitext_detokenize(std::string_view page);

}  // namespace meg
