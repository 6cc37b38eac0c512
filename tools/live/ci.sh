#!/usr/bin/env bash
# Build (or reuse) the live cache, then run tests/live against a real llama-server and
# a real vLLM. With HARMONIA_LIVE=require a server that cannot be set up fails the run
# with the reason instead of skipping. Cache: $HARMONIA_LIVE_CACHE (~/.cache/harmonia-live).
#   PYTHON: the project's interpreter (with torch and transformers, for the model build)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
CACHE="${HARMONIA_LIVE_CACHE:-$HOME/.cache/harmonia-live}"
export HARMONIA_LIVE_CACHE="$CACHE"
started=$(date +%s)
PYTHON="$PY" bash tools/live/build_llamacpp.sh
echo "live: llama-server ready after $(( $(date +%s) - started )) s"
bash tools/live/build_vllm.sh
echo "live: vLLM ready after $(( $(date +%s) - started )) s"
"$PY" tools/live/build_model.py --gguf "$CACHE/llamacpp-11434.0.0/src/convert_hf_to_gguf.py"
echo "live: model ready after $(( $(date +%s) - started )) s"
HARMONIA_LIVE=require "$PY" -m pytest tests/live -rs -p no:cacheprovider
echo "live: done after $(( $(date +%s) - started )) s"
