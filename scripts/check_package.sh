#!/usr/bin/env bash
# Checks Ember as a user receives it, from an existing build folder (no rebuild of the library):
#   install  cmake --install into a clean prefix; the library's SONAME is versioned; the examples
#            are there as ember-resnet / ember-lstm and run (--help); tests/consumer builds against
#            the prefix with find_package(ember) while Eigen and doctest are made unfindable (the
#            package must not need them), and again through pkg-config (ember.pc).
#   deb      cpack -G DEB; the package's fields; dpkg -x into a scratch root; the same consumer
#            builds against <root>/usr and runs.
# Usage: bash scripts/check_package.sh BUILD_DIR [install|deb|all]   (default all)
# Prints one line per check and `package: ok` at the end; exits non-zero at the first failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
build=$(cd "${1:?usage: check_package.sh BUILD_DIR [install|deb|all]}" && pwd)
what=${2:-all}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ember-package.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
[[ -n $version ]] || version=$(sed -n 's/^ember_VERSION:STATIC=//p' "$build/CMakeCache.txt")

fail() { echo "package: FAILED: $*" >&2; exit 1; }

# The consumer of tests/consumer against an installed tree at $1, two ways.
consume() {
  local prefix=$1 name=$2
  # CMake: find_package(ember); Eigen3 and doctest cannot be found, as on a user's machine
  # without them.
  cmake -S tests/consumer -B "$scratch/$name-cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_doctest=ON >"$scratch/$name-cmake.log" 2>&1 ||
    { cat "$scratch/$name-cmake.log"; fail "$name: configuring tests/consumer against $prefix"; }
  cmake --build "$scratch/$name-cmake" >>"$scratch/$name-cmake.log" 2>&1 ||
    { cat "$scratch/$name-cmake.log"; fail "$name: building tests/consumer against $prefix"; }
  "$scratch/$name-cmake/ember_consumer" || fail "$name: ember_consumer (find_package) failed"
  echo "package: $name: find_package(ember) consumer ok (without Eigen and doctest)"
  # pkg-config: ember.pc gives the include and library flags.
  local pcdir
  pcdir=$(dirname "$(find "$prefix" -name ember.pc -path '*/pkgconfig/*' | head -n 1)")
  [[ -f $pcdir/ember.pc ]] || fail "$name: no pkgconfig/ember.pc under $prefix"
  local flags libdir
  flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs ember) ||
    fail "$name: pkg-config --cflags --libs ember"
  libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir ember)
  # shellcheck disable=SC2086  # the flags are words
  c++ -std=c++20 -O1 tests/consumer/main.cpp -o "$scratch/$name-pc" $flags \
    -Wl,-rpath,"$libdir" || fail "$name: compiling tests/consumer/main.cpp with $flags"
  "$scratch/$name-pc" || fail "$name: ember_consumer (pkg-config) failed"
  echo "package: $name: pkg-config consumer ok ($flags)"
}

check_install() {
  local prefix=$scratch/prefix
  cmake --install "$build" --prefix "$prefix" >"$scratch/install.log" 2>&1 ||
    { cat "$scratch/install.log"; fail "cmake --install $build"; }
  local lib
  lib=$(find "$prefix" -name 'libember.so.*.*.*' | head -n 1)
  [[ -n $lib ]] || fail "install: no libember.so.<version> under $prefix"
  local soname
  soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [[ $soname == libember.so.* && -L $(dirname "$lib")/$soname && -L $(dirname "$lib")/libember.so ]] ||
    fail "install: $lib has SONAME '$soname' (want libember.so.<ABI version>, with the links)"
  echo "package: install: $(basename "$lib"), SONAME $soname"
  for exe in ember-launch ember-resnet ember-lstm; do
    if [[ $exe != ember-launch && ! -e $build/examples/$exe ]]; then
      echo "package: install: $exe not built (EMBER_BUILD_EXAMPLES=OFF), not checked"
      continue
    fi
    [[ -x $prefix/bin/$exe ]] || fail "install: $prefix/bin/$exe is missing"
    "$prefix/bin/$exe" --help >/dev/null || fail "install: $prefix/bin/$exe --help failed"
  done
  echo "package: install: ember-launch and the examples run from $prefix/bin"
  consume "$prefix" install
}

check_deb() {
  (cd "$build" && cpack -G DEB -B "$scratch/deb" >"$scratch/cpack.log" 2>&1) ||
    { cat "$scratch/cpack.log"; fail "cpack -G DEB in $build"; }
  local deb
  deb=$(find "$scratch/deb" -maxdepth 1 -name '*.deb' | head -n 1)
  [[ -n $deb ]] || fail "cpack wrote no .deb"
  local field
  for field in Package Version Maintainer Depends Architecture; do
    [[ -n $(dpkg-deb -f "$deb" "$field") ]] || fail "$(basename "$deb") has no $field field"
  done
  [[ $(dpkg-deb -f "$deb" Version) == "$version"* ]] ||
    fail "$(basename "$deb"): Version $(dpkg-deb -f "$deb" Version), the project's is $version"
  echo "package: deb: $(basename "$deb"): $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" \
    Version), Depends: $(dpkg-deb -f "$deb" Depends)"
  dpkg -x "$deb" "$scratch/root" || fail "dpkg -x $deb"
  [[ -x $scratch/root/usr/bin/ember-launch ]] || fail "deb: no /usr/bin/ember-launch"
  consume "$scratch/root/usr" deb
}

case $what in
  install) check_install ;;
  deb) check_deb ;;
  all) check_install && check_deb ;;
  *) fail "unknown check '$what' (install, deb or all)" ;;
esac
echo "package: ok"
