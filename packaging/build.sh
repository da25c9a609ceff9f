#!/usr/bin/env bash
# Build the `peermr` binary: dist/peermr/ (the executable dist/peermr/peermr and its _internal/
# folder) and the same folder as one tarball, dist/peermr-<version>-linux-<arch>.tar.xz, with its
# SHA-256 beside it (.sha256). Work files go to build/.
#
# Run from anywhere, normally through `make binary`. The build environment is a venv of its own,
# build/binary-venv, installed from packaging/requirements.lock (hashes checked, no test extras) with
# the interpreter of PYTHON (default: python on the PATH; a venv's base, without its packages), and made
# again when the lock changes. SOURCE_DATE_EPOCH (default: the last commit's time) dates every file, so
# a build of the same commit with the same Python gives the same tarball, wherever it is checked out.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python}"
VENV=build/binary-venv
LOCK=packaging/requirements.lock
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
export PYTHONHASHSEED=0  # the analysis walks sets: a fixed order

started=$(date +%s)
stamp=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ "$(cat "$VENV/.lock" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$VENV"
    base=$("$PYTHON" -c 'import sys; print(sys._base_executable)')  # not a venv's: its packages stay out
    "$base" -m venv "$VENV"
    "$VENV/bin/pip" install -qq --disable-pip-version-check --require-hashes --no-deps --only-binary :all: -r "$LOCK"
    echo "$stamp" >"$VENV/.lock"
fi

rm -rf dist/peermr dist/peermr-*.tar.xz dist/peermr-*.tar.xz.sha256
"$VENV/bin/python" -m PyInstaller \
    --noconfirm \
    --log-level "${PYINSTALLER_LOG_LEVEL:-WARN}" \
    --workpath build/pyinstaller \
    --distpath dist \
    packaging/peermr.spec

version=$(dist/peermr/peermr version | cut -d' ' -f2)
tarball="peermr-$version-linux-$(uname -m).tar.xz"
# Same bytes for the same files: names sorted, one date, no owners; xz on one thread.
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --format=gnu \
    -C dist -cf - peermr | xz -T1 -6 >"dist/$tarball"
(cd dist && sha256sum "$tarball" >"$tarball.sha256")

glibc=$(find dist/peermr -type f \( -name '*.so*' -o -name peermr \) -exec objdump -T {} + 2>/dev/null |
    grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
echo "Built dist/peermr/ ($(du -sm dist/peermr | cut -f1) MiB) in $(($(date +%s) - started)) s; needs ${glibc/_/ } or later"
echo "dist/$tarball: $(du -m "dist/$tarball" | cut -f1) MiB"
echo "SHA-256 $(cut -d' ' -f1 "dist/$tarball.sha256")"
