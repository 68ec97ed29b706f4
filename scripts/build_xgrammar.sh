#!/usr/bin/env bash
# build_xgrammar.sh — builds xgrammar's C++ core (structured outputs: lio/grammar.h) into
# build-deps/xgrammar/{include,lib}, where CMake finds it (LIO_XGRAMMAR_ROOT).
#
# xgrammar (Apache-2.0; Dong et al. 2024) is the grammar engine of vLLM and SGLang. Debian does
# not package it, and its wheels hold only the Python extension, so its C++ sources come from
# the pinned PyPI sdist (xgrammar==$XGRAMMAR_PIN, sha256 checked), built as a static library with
# the project's own CMake: no Python bindings, no LTO (the objects must link into GCC and Clang
# builds alike), its -Werror off (a newer compiler's new warning must not stop the setup).
# Idempotent: does nothing when the pinned build is in place.
# Env: JOBS (nproc), LIO_XGRAMMAR_ROOT (build-deps/xgrammar).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
XGRAMMAR_PIN=0.2.9
XGRAMMAR_SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
XGRAMMAR_URL="https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$XGRAMMAR_PIN.tar.gz"
dest="${LIO_XGRAMMAR_ROOT:-$root/build-deps/xgrammar}"
stamp="$dest/.lio-xgrammar-$XGRAMMAR_PIN"
if [[ -f "$stamp" && -f "$dest/lib/libxgrammar.a" && -f "$dest/include/xgrammar/xgrammar.h" ]]; then
  echo "build_xgrammar: xgrammar $XGRAMMAR_PIN present in $dest"
  exit 0
fi
work="$root/build-deps/src"
mkdir -p "$work"
tarball="$work/xgrammar-$XGRAMMAR_PIN.tar.gz"
if [[ ! -f "$tarball" ]] || [[ "$(sha256sum "$tarball" | cut -d' ' -f1)" != "$XGRAMMAR_SHA256" ]]; then
  echo "build_xgrammar: downloading the xgrammar $XGRAMMAR_PIN sdist" >&2
  rm -f "$tarball"
  # pip, through whatever index it is configured for (only xgrammar as source: its build
  # dependencies come as wheels, for the metadata step); PyPI's file host directly if that fails.
  py="$root/.venv/bin/python"
  [[ -x "$py" ]] || py="$(command -v python3)"
  if ! "$py" -m pip download --quiet --no-deps --no-binary xgrammar "xgrammar==$XGRAMMAR_PIN" -d "$work" >&2; then
    echo "build_xgrammar: pip download failed; fetching $XGRAMMAR_URL" >&2
    curl -fsSL --retry 3 -o "$tarball.part" "$XGRAMMAR_URL"
    mv "$tarball.part" "$tarball"
  fi
fi
got="$(sha256sum "$tarball" | cut -d' ' -f1)"
if [[ "$got" != "$XGRAMMAR_SHA256" ]]; then
  echo "build_xgrammar: $tarball has sha256 $got, expected $XGRAMMAR_SHA256" >&2
  exit 1
fi
src="$work/xgrammar-$XGRAMMAR_PIN"
rm -rf "$src" "$work/build-xgrammar"
tar -xzf "$tarball" -C "$work"
# The sdist's cmake/config.cmake switches the Python bindings on unconditionally; a config.cmake in
# the build folder is read first and keeps them off.
mkdir -p "$work/build-xgrammar"
cat >"$work/build-xgrammar/config.cmake" <<'EOF'
set(CMAKE_BUILD_TYPE Release)
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
EOF
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$src" -B "$work/build-xgrammar" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" -DCMAKE_INSTALL_PREFIX="$dest" >/dev/null
cmake --build "$work/build-xgrammar" -j "${JOBS:-$(nproc)}"
rm -rf "$dest"
cmake --install "$work/build-xgrammar" >/dev/null
cp "$src/LICENSE" "$dest/LICENSE"
touch "$stamp"
rm -rf "$src" "$work/build-xgrammar"
echo "build_xgrammar: xgrammar $XGRAMMAR_PIN installed in $dest"
