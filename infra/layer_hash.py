"""Prints the hash of a built layer directory, as `sam deploy` sees it.

With SAM CLI importable (run it with SAM CLI's Python), the MD5 of the zip SAM itself makes
(`sam deploy` uploads under that hash and skips an unchanged artifact); otherwise a SHA-256
over every file's path, mode and bytes. Usage: layer_hash.py <build dir>/TickworkLayer
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path


def tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(oct(path.stat().st_mode).encode() + b"\0")
        digest.update(path.read_bytes())
    return f"sha256:{digest.hexdigest()}"


def sam_zip_hash(root: Path) -> str | None:
    try:
        from samcli.lib.package.utils import make_zip  # noqa: PLC0415 - optional: SAM CLI is not a dependency
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        archive = make_zip(os.path.join(scratch, "layer"), str(root))
        return "md5:" + hashlib.md5(Path(archive).read_bytes(), usedforsecurity=False).hexdigest()


def main() -> None:
    root = Path(sys.argv[1])
    if not root.is_dir():
        sys.exit(f"{root} is not a directory")
    print(sam_zip_hash(root) or tree_hash(root))


if __name__ == "__main__":
    main()
