#!/usr/bin/env python3
"""Every environment variable that tidepool's code reads is in the one table
of docs/configuration.md ("Environment variables"), and the table names no
variable the code has stopped reading.

Usage: env_vars_documented.py SOURCE_DIR
"""

import pathlib
import re
import sys

READS = [
    re.compile(r'\b(?:secure_)?getenv\("([A-Z][A-Z0-9_]*)"\)'),  # C and C++
    re.compile(r'environ(?:\.get\(|\[)"([A-Z][A-Z0-9_]*)"'),  # Python
]
# Read or set by the loader and by tidepool-run, not by tidepool's own code paths alone.
LOADER = {"LD_PRELOAD", "LD_LIBRARY_PATH"}
SCANNED = ("src", "interpose", "tools", "python", "include")


def variables_in_code(root):
    found = {}
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".cpp", ".hpp", ".h", ".c", ".py"):
                continue
            text = path.read_text(errors="replace")
            for pattern in READS:
                for name in pattern.findall(text):
                    found.setdefault(name, str(path.relative_to(root)))
    return found


def variables_in_table(root):
    doc = (root / "docs" / "configuration.md").read_text()
    start = doc.index("## Environment variables")
    section = doc[start:]
    end = section.find("\n## ", 1)
    if end != -1:
        section = section[:end]
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, flags=re.MULTILINE))


def main():
    root = pathlib.Path(sys.argv[1])
    code = variables_in_code(root)
    table = variables_in_table(root)
    if len(code) < 8:
        print(f"found only {sorted(code)} in the code: the scan is broken")
        return 1
    missing = sorted(set(code) - table)
    stale = sorted(table - set(code) - LOADER)
    for name in missing:
        print(f"{name} (read in {code[name]}) is not in docs/configuration.md's environment table")
    for name in stale:
        print(f"{name} is in docs/configuration.md's environment table but no code reads it")
    if missing or stale:
        return 1
    print(f"{len(table)} variables, all documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
