#include "data/blend_cache.hpp"

#include <filesystem>
#include <system_error>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace meg {

CachedBlend cached_blend(const std::vector<BlendInput>& inputs, const BlendOptions& options,
                         const std::string& cache_dir) {
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) input_error("{}: cannot create the blend cache directory: {}", cache_dir, ec.message());
  const std::string path =
      (std::filesystem::path(cache_dir) / (hex64(planned_blend_fingerprint(inputs, options)) + ".blend")).string();
  if (std::filesystem::is_regular_file(path, ec)) return {path, false};
  build_blend(inputs, options, path);
  return {path, true};
}

}  // namespace meg
