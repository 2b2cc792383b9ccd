#!/usr/bin/env python3
"""Every path the documentation names exists in the repository.

Reads every tracked Markdown file (and the comments of the top-level
CMakeLists.txt) and checks:
  - relative links, [text](path), resolve to a file or folder beside the
    document;
  - paths in backticks that begin with one of the repository's top-level
    folders (`src/pool/pool.hpp`, `docs/replay.md`, `scripts/test.sh`) exist;
    a `*` in one must match something, and a trailing `:line` or `(...)` is
    dropped;
  - nothing points outside the repository (`../shared/...`, `../`-anything
    from the root): a clone has only what is in it.

usage: doc_paths_exist.py REPOSITORY_ROOT
"""
import fnmatch
import os
import re
import subprocess
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # [text](path) and [text](path "title")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")  # [name]: path
CODE = re.compile(r"`([^`\n]+)`")
RELATIVE = re.compile(r"(?<![\w./])((?:\.\./)+[\w.*<>-][\w./*<>-]*)")


class Tracked:
    """What a clone holds: the files git tracks, and the folders above them."""

    def __init__(self, root):
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
        self.files = {line for line in out.splitlines() if line}
        self.folders = {""}
        for f in self.files:
            parts = f.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                self.folders.add("/".join(parts[:i]))

    def exists(self, path):
        path = path.rstrip("/")
        if "*" in path:
            return any(fnmatch.fnmatch(f, path) for f in self.files | self.folders)
        return path in self.files or path in self.folders


SOURCE_FOLDERS = set()


def code_path(text, folders):
    """The repository path a backticked text names, or None. `folders`: the
    repository's top-level folders (a clone's, so never build/ or out/)."""
    text = text.strip()
    if " " in text or "{" in text or "<" in text or "$" in text:
        return None
    text = re.sub(r"\(.*\)$", "", text)  # a call: `Runtime::get()`, `pool/pool.hpp (Pool::x)`
    text = re.sub(r":[0-9]+(-[0-9]+)?$", "", text)  # file:line
    text = text.rstrip(".,;:")
    if "/" not in text or "://" in text:
        return None
    first = text.split("/", 1)[0]
    if first in folders:
        return text
    if first in SOURCE_FOLDERS:  # `pool/pool.hpp`: named from src/, as the layer table names it
        return "src/" + text
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    try:
        tracked = Tracked(root)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"skipped: no git checkout to read the tracked files from ({e})")
        return 77
    folders = {f for f in tracked.folders if f and "/" not in f}
    SOURCE_FOLDERS.update(f[len("src/"):] for f in tracked.folders if f.startswith("src/") and f.count("/") == 1)
    problems = []
    checked = 0
    sources = sorted(f for f in tracked.files if f.endswith(".md")) + ["CMakeLists.txt"]
    for doc in sources:
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            lines = f.read().splitlines()
        base = os.path.dirname(doc)
        for number, line in enumerate(lines, 1):
            where = f"{doc}:{number}"
            if doc.endswith("CMakeLists.txt") and not line.lstrip().startswith("#"):
                continue
            for relative in RELATIVE.findall(line):
                path = os.path.normpath(os.path.join(base, relative))
                if path.startswith(".."):
                    problems.append(f"{where}: {relative} is outside the repository")
                elif "<" not in path and not tracked.exists(path):
                    problems.append(f"{where}: {relative} names nothing in the repository ({path})")
            for target in LINK.findall(line) + REFERENCE.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                if target.startswith("/"):
                    problems.append(f"{where}: the link {target} is an absolute path")
                    continue
                path = os.path.normpath(os.path.join(base, target.split("#", 1)[0]))
                if path.startswith(".."):
                    problems.append(f"{where}: the link {target} leaves the repository")
                elif not tracked.exists(path):
                    problems.append(f"{where}: the link {target} names nothing in the repository ({path})")
            for text in CODE.findall(line):
                path = code_path(text, folders)
                checked += path is not None
                if path is not None and not tracked.exists(path):
                    problems.append(f"{where}: `{text}` names nothing in the repository")
    for p in problems:
        print(p)
    print(f"{len(sources)} documents, {checked} paths in backticks checked: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
