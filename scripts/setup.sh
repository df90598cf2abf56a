#!/usr/bin/env bash
# Installs the Debian packages meg needs to build, test and run its demo, when any is missing.
# Safe to run again: it does nothing when everything is there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libzstd-dev zstd libsentencepiece-dev sentencepiece libfmt-dev catch2
  libopenmpi-dev openmpi-bin libopenblas-dev libcli11-dev nlohmann-json3-dev
  clang libclang-rt-dev   # the sanitizer build and the fuzz targets (libFuzzer)
  fortunes fortunes-min   # the demo corpus
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >&2; then
  echo "setup: could not install ${missing[*]}; the build will say what it lacks" >&2
fi
