#!/usr/bin/env python3
"""Checks that ember.h, the umbrella header, reaches every public header.

Public headers: every .h under autograd/, ops/, nn/ and distributed/ (the layers a user's code
calls), except those named in INTERNAL below (with the reason) and any *_internal.h. A header is
reached when ember.h includes it directly or through the headers it includes. Prints the headers
ember.h misses and exits 1 when there are any, so that a new public header is caught by CI
(ctest: static.umbrella_header) until it is added to ember.h or declared internal here.
Usage: python3 scripts/check_umbrella.py [REPO_ROOT]
"""
import pathlib
import re
import sys

PUBLIC_DIRS = ("autograd", "ops", "nn", "distributed")
# Headers of those folders that a user's code does not include (implementation helpers shared by
# the library's own .cpp files). Each entry says why.
INTERNAL = {
    "ops/binary_dispatch.h": "the broadcasting/dtype plumbing of the binary ops' .cpp files",
    "distributed/rendezvous.h": "the NCCL backend's TCP exchange of its unique id",
}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"ember/([^"]+)"', re.M)


def reached(root: pathlib.Path, start: str) -> set:
    seen, todo = set(), [start]
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        path = root / rel
        if path.is_file():
            todo.extend(INCLUDE_RE.findall(path.read_text(encoding="utf-8", errors="replace")))
    return seen


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    public = sorted(
        str(p.relative_to(root))
        for d in PUBLIC_DIRS
        for p in (root / d).rglob("*.h")
        if "tools" not in p.relative_to(root).parts
        and not p.name.endswith("_internal.h")
        and str(p.relative_to(root)) not in INTERNAL
    )
    missing = [h for h in public if h not in reached(root, "ember.h")]
    stale = [h for h in INTERNAL if not (root / h).is_file()]
    for h in stale:
        print(f"check_umbrella: INTERNAL names {h}, which does not exist; remove it from the list")
    if missing:
        print(f"check_umbrella: ember.h does not reach {len(missing)} public header(s):")
        for h in missing:
            print(f'  #include "ember/{h}"')
        print("add them to ember.h (or, for a header users never include, to INTERNAL in "
              "scripts/check_umbrella.py with the reason)")
    if missing or stale:
        return 1
    print(f"check_umbrella: ember.h reaches all {len(public)} public headers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
