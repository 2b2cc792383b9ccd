#!/usr/bin/env python3
"""Each layer of src/ is used from above only through its one header
(src/README.md): an #include "L/x.hpp" in a file outside layer L must be
L's header. Checks src/, interpose/, tools/ and bench/; prints each include
that bypasses a header and exits 1 if there is any."""
import re
import sys
from pathlib import Path

HEADERS = {
    "util": "util/util.hpp",
    "kernels": "kernels/kernels.hpp",
    "driver": "driver/driver.hpp",
    "sim": "sim/sim_control.h",
    "space": "space/space.hpp",
    "order": "order/order.hpp",
    "pool": "pool/pool.hpp",
    "residency": "residency/residency.hpp",
    "runtime": "runtime/runtime.hpp",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')


def main(root: Path) -> int:
    bypasses = []
    crossing = 0
    for front in ("src", "interpose", "tools", "bench"):
        for path in sorted((root / front).rglob("*")):
            if path.suffix not in (".cpp", ".hpp", ".h") or not path.is_file():
                continue
            relative = path.relative_to(root)
            home = relative.parts[1] if front == "src" else front
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                match = INCLUDE.match(line)
                if not match or match.group(1) not in HEADERS or match.group(1) == home:
                    continue
                crossing += 1
                named = f"{match.group(1)}/{match.group(2)}"
                if named != HEADERS[match.group(1)]:
                    bypasses.append(f"{relative}:{number}: includes {named}, not {HEADERS[match.group(1)]}")
    for line in bypasses:
        print(line)
    print(f"{crossing - len(bypasses)} passed, {len(bypasses)} failed")
    return 1 if bypasses or crossing == 0 else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
