#!/usr/bin/env bash
# Build the one-file `peermr` executable at dist/peermr (work files in build/).
#
# Run from the repository root, normally through `make binary`, with the
# virtual environment's bin directory first on PATH: the build bundles what is
# installed in the environment of the `python` it finds, so building from the
# project's venv keeps unrelated globally installed packages out.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python}"
if ! "$PYTHON" -c "import PyInstaller" 2>/dev/null; then
    echo "build.sh: PyInstaller is not installed for $(command -v "$PYTHON"); run make binary" >&2
    exit 1
fi

started=$(date +%s)
"$PYTHON" -m PyInstaller \
    --noconfirm \
    --log-level "${PYINSTALLER_LOG_LEVEL:-WARN}" \
    --workpath build/pyinstaller \
    --distpath dist \
    packaging/peermr.spec

size=$(du -m dist/peermr | cut -f1)
echo "Built dist/peermr (${size} MiB) in $(( $(date +%s) - started )) s"
