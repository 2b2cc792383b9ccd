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
import glob
import os
import re
import subprocess
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
RELATIVE = re.compile(r"(?<![\w./])((?:\.\./)+[\w.*<>-][\w./*<>-]*)")


def tracked_markdown(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "*.md"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


def top_folders(root):
    return {name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name)) and name not in
            (".git", "build")}


def exists(root, path):
    full = os.path.join(root, path)
    if "*" in path:
        return bool(glob.glob(full))
    return os.path.exists(full)


SOURCE_FOLDERS = set()


def code_path(text, folders):
    """The repository path a backticked text names, or None."""
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
    folders = top_folders(root)
    SOURCE_FOLDERS.update(name for name in os.listdir(os.path.join(root, "src"))
                          if os.path.isdir(os.path.join(root, "src", name)))
    problems = []
    checked = 0
    sources = tracked_markdown(root) + ["CMakeLists.txt"]
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
                elif "<" not in path and not exists(root, path):
                    problems.append(f"{where}: {relative} names nothing ({path})")
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                path = os.path.normpath(os.path.join(base, target.split("#", 1)[0]))
                if path.startswith(".."):
                    problems.append(f"{where}: the link {target} leaves the repository")
                elif not os.path.exists(os.path.join(root, path)):
                    problems.append(f"{where}: the link {target} names nothing ({path})")
            for text in CODE.findall(line):
                path = code_path(text, folders)
                checked += path is not None
                if path is not None and not exists(root, path):
                    problems.append(f"{where}: `{text}` names nothing in the repository")
    for p in problems:
        print(p)
    print(f"{len(sources)} documents, {checked} paths in backticks checked: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
