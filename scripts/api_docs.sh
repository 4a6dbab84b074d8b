#!/usr/bin/env bash
# Builds the API reference from the public headers with Doxygen (docs/Doxyfile, the headers'
# // comments read through scripts/doxygen_filter.py) into build/api-docs/html, and checks that
# every public symbol of the covered headers is documented:
#   bash scripts/api_docs.sh            build the reference; list undocumented symbols
#   bash scripts/api_docs.sh --check    the same, and fail on an undocumented symbol in a covered
#                                       header (CI runs this)
# Covered: every header Doxygen reads (docs/Doxyfile's INPUT less its EXCLUDE_PATTERNS) except
# those in docs/api_uncovered.txt, a list that should only shrink.
# Environment: EMBER_API_DOCS_DIR (output folder, default build/api-docs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=0
[[ ${1:-} == --check ]] && check=1
command -v doxygen >/dev/null || { echo "api_docs: doxygen not found (bash scripts/setup.sh installs it)"; exit 1; }
out=${EMBER_API_DOCS_DIR:-build/api-docs}
mkdir -p "$out"
warnings=$out/warnings.txt
{ cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; echo "WARN_LOGFILE = $warnings"; } | doxygen - >/dev/null
uncovered=$(grep -v '^\s*#' docs/api_uncovered.txt 2>/dev/null | sed '/^\s*$/d' || true)
# One line per undocumented declaration (Doxygen repeats a template's members per instantiation).
undocumented=$(grep 'is not documented' "$warnings" | sed "s|^$PWD/||" | sort -t: -k1,1 -k2,2n -u |
               awk -F: '!seen[$1":"$2]++' || true)
covered_missing=$(while IFS= read -r line; do
                    [[ -z $line ]] && continue
                    file=${line%%:*}
                    grep -qxF "$file" <<<"$uncovered" || echo "$line"
                  done <<<"$undocumented")
total=$(grep -c . <<<"$undocumented" || true)
missing=$(grep -c . <<<"$covered_missing" || true)
echo "api_docs: reference in $out/html/index.html; $total undocumented declarations, $missing in covered headers"
if ((missing > 0)); then
  echo "$covered_missing" | sed 's/: warning: / /' | head -n 60
  if ((check)); then
    echo "api_docs: document them (a // comment above the declaration, see scripts/doxygen_filter.py)"
    exit 1
  fi
fi
