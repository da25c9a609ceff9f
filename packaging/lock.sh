#!/usr/bin/env bash
# Write packaging/requirements.lock: the binary's build environment, hash-pinned. It holds the
# appliance's runtime dependencies (pyproject.toml's dependencies) and PyInstaller (the binary
# extra), at the versions the project's venv has (the ones the tests run), and no test extras.
# Run it after changing pyproject.toml's dependencies (it installs uv into .venv to resolve them).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -x .venv/bin/uv ] || .venv/bin/pip install --quiet uv

tested=$(mktemp)
trap 'rm -f "$tested"' EXIT
.venv/bin/pip freeze --exclude-editable >"$tested"
.venv/bin/uv pip compile pyproject.toml --extra binary --generate-hashes --quiet \
    --python-version 3.11 --constraint "$tested" --no-header \
    --output-file packaging/requirements.lock
sed -i "\|-c $tested|d" packaging/requirements.lock  # the constraint file is a temporary one
