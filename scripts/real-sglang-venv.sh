#!/usr/bin/env bash
# Build (once per machine) the venv holding the real SGLang 0.5.23 CPU install used by the
# contract tests (tests/contract/, marker real_sglang). Cached under
# ~/.cache/mtpconsole-ci/sglang-0.5.23-venv and keyed by a hash of the pinned requirements file:
# a changed file rebuilds it, an unchanged one is reused at once.
#
#   scripts/real-sglang-venv.sh          # build or reuse; prints the venv's python on stdout
#   MTPCONSOLE_SGLANG_VENV=DIR scripts/real-sglang-venv.sh   # another place
#
# Every package is pinned (requirements/sglang-0.5.23-cpu.txt) and installed with --no-deps, so
# the install is reproducible and pip never pulls SGLang's GPU-only requirements.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
req="$root/requirements/sglang-0.5.23-cpu.txt"
venv="${MTPCONSOLE_SGLANG_VENV:-$HOME/.cache/mtpconsole-ci/sglang-0.5.23-venv}"
py="${MTPCONSOLE_SGLANG_BASE_PYTHON:-python3}"
key="$(sha256sum "$req" | cut -c1-16)"
stamp="$venv/.mtpconsole-requirements-$key"

if [ -f "$stamp" ] && [ -x "$venv/bin/python" ]; then
  echo "$venv/bin/python"
  exit 0
fi

start=$(date +%s)
echo "building $venv from $req (key $key)" >&2
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$req" >&2
# The import-time check the contract tests rely on: the real parser loads.
"$venv/bin/python" -c "import sglang.srt.server_args" >&2
touch "$stamp"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$venv/bin/python"
