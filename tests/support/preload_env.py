"""The environment for a test that runs a program under tidepool's preload
from Python: under a sanitizer build the sanitizer's runtime must lead
LD_PRELOAD (ASan insists on coming first; see preload.hpp for TSan), and
the tools keep entries already there ahead of libtidepool.so.
"""
import os
import subprocess


def sanitizer_runtime(binary):
    """The path of the ASan or TSan runtime `binary` links, or None."""
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if name.startswith(("libasan.so", "libtsan.so")) and rest:
            return rest.split(" (")[0].strip()
    return None


def preload_env(binary, **extra):
    """os.environ with `extra`, and the sanitizer runtime of `binary` leading LD_PRELOAD."""
    env = dict(os.environ, **extra)
    runtime = sanitizer_runtime(binary)
    if runtime:
        env["LD_PRELOAD"] = runtime + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    return env
