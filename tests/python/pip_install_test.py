"""The offline `pip install` of python/ (python_pip_install).

Owns the promise that the install command of docs/pytorch.md works with no
network: a fresh virtual environment, setuptools and wheel from Debian's
/usr/share/python-wheels, then the package built from python/pyproject.toml.
The installed package must report the CMake project version (in its code and
its metadata) and find the library through $TIDEPOOL_LIBRARY or the loader
path, or say what to set.

It installs a copy of python/ made under --work, so the source tree gets no
build/ or egg-info. Exit 77 (ctest's skip) only when this machine has no venv
module or no wheels to build with; every other failure is a failure.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SKIP = 77
WHEELS = Path("/usr/share/python-wheels")


def skip(reason):
    print(f"SKIP: {reason}; scripts/setup.sh installs python3-venv python3-setuptools-whl python3-wheel-whl")
    sys.exit(SKIP)


def fail(message, done=None):
    print(f"FAIL: {message}")
    if done is not None:
        print(f"--- {' '.join(map(str, done.args))} (exit {done.returncode})\n{done.stdout}\n{done.stderr}")
    sys.exit(1)


def run(command, env, what):
    started = time.monotonic()
    done = subprocess.run([str(c) for c in command], env=env, capture_output=True, text=True, timeout=50)
    print(f"{what}: exit {done.returncode} in {time.monotonic() - started:.1f} s")
    return done


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, help="the python/ folder of the source tree")
    parser.add_argument("--work", required=True, help="a scratch folder, emptied first")
    parser.add_argument("--version", required=True, help="project(tidepool VERSION) of CMakeLists.txt")
    args = parser.parse_args()

    if not list(WHEELS.glob("wheel-*.whl")):
        skip(f"no wheel-*.whl in {WHEELS}")
    if sys.version_info >= (3, 12) and not list(WHEELS.glob("setuptools-*.whl")):
        skip(f"no setuptools-*.whl in {WHEELS} (Python 3.12+ venvs come without setuptools)")
    try:
        import venv  # noqa: F401
    except ImportError:
        skip("no venv module")

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    source = work / "python"
    shutil.copytree(args.source, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))

    # The command as a user on a bare machine types it: no pip configuration
    # (this machine's PIP_FIND_LINKS, an index URL) helps or hinders it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_CACHE_DIR"] = str(work / "pip-cache")

    started = time.monotonic()
    venv_dir = work / "venv"
    done = run([sys.executable, "-m", "venv", venv_dir], env, "python3 -m venv")
    if done.returncode != 0:
        if "ensurepip" in done.stdout + done.stderr:
            skip(f"{sys.executable} -m venv cannot install pip (no ensurepip)")
        fail("creating the virtual environment", done)
    pip, python = venv_dir / "bin" / "pip", venv_dir / "bin" / "python"

    done = run([pip, "install", "--no-index", "--find-links", WHEELS, "setuptools", "wheel"], env,
               "pip install setuptools wheel")
    if done.returncode != 0:
        fail("installing the build backend from the Debian wheels", done)
    done = run([pip, "install", "--no-index", "--no-build-isolation", source], env, "pip install ./python")
    if done.returncode != 0:
        fail("installing the package", done)

    # -I: the venv's own site-packages only, never this tree's python/ by PYTHONPATH or cwd.
    def in_venv(code, **changes):
        child = {k: v for k, v in env.items() if k not in ("TIDEPOOL_LIBRARY", "LD_LIBRARY_PATH")}
        child.update(changes)
        return subprocess.run([str(python), "-I", "-c", code], env=child, capture_output=True, text=True,
                              cwd=str(work), timeout=30)

    done = in_venv("import importlib.metadata as m, tidepool, tidepool.torch\n"
                   "print(tidepool.__version__); print(m.version('tidepool')); print(tidepool.__file__)")
    if done.returncode != 0:
        fail("importing the installed package", done)
    version, metadata_version, location = done.stdout.split("\n")[:3]
    if version != args.version or metadata_version != args.version:
        fail(f"installed version {version!r} (metadata {metadata_version!r}), CMake says {args.version!r}")
    if not Path(location).resolve().is_relative_to(venv_dir.resolve()):
        fail(f"imported {location}, not the copy installed in {venv_dir}")

    library = os.environ["TIDEPOOL_LIBRARY"]
    ask = "import tidepool; print(tidepool.library_version()); print(tidepool.stats()['allocations'])"
    done = in_venv(ask, TIDEPOOL_LIBRARY=library)
    if done.returncode != 0 or done.stdout.split() != [args.version, "0"]:
        fail("the installed package with TIDEPOOL_LIBRARY set", done)
    done = in_venv(ask, LD_LIBRARY_PATH=os.path.dirname(library))
    if done.returncode != 0 or done.stdout.split() != [args.version, "0"]:
        fail("the installed package finding the library on LD_LIBRARY_PATH", done)
    done = in_venv("import tidepool\ntry:\n    tidepool.stats()\nexcept OSError as e:\n    print(e)",
                   TIDEPOOL_LIBRARY=str(work / "missing" / "libtidepool.so"))
    if (done.returncode != 0 or "Set TIDEPOOL_LIBRARY" not in done.stdout
            or "cannot open shared object file" not in done.stdout):
        fail("the installed package without a library must say what to set", done)

    print(f"PASS: installed tidepool {version} offline and used it, {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
