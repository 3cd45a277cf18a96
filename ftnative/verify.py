"""Check a published FasterTransformer shard directory against its config.ini.

    python3 -m ftnative.verify OUT/2-gpu

Reads the family and sizes from config.ini, then requires every weight file ft_expected_files
lists, at its exact size, no other weight file, and every config.ini key the backend requires.
Exits 0 and prints "ok" when correct; exits 2 naming every problem otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .convert import ConversionError, verify
from .decode import ModelError, read_config, shard_tp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m ftnative.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="the <tp>-gpu directory")
    args = parser.parse_args(argv)
    directory = Path(args.directory)
    try:
        family, params, dtype = read_config(directory)
        verify(directory, family, params, shard_tp(directory, params), dtype)
    except (ConversionError, ModelError) as err:
        print(f"ftnative.verify: {err}", file=sys.stderr)
        return 2
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
