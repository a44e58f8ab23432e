#!/usr/bin/env bash
# Installs distserve and its test dependencies into the current Python environment.
# TORCH_SPEC selects the torch build: the CPU build pinned here by default; set TORCH_SPEC=torch on GPU hosts.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --upgrade pip
python3 -m pip install "${TORCH_SPEC:-torch==2.13.0}"
python3 -m pip install -e ".[${EXTRAS:-dev}]"
