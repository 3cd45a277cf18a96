"""Check a published FasterTransformer shard directory against its config.ini.

    python3 -m ftnative.verify OUT/2-gpu

Reads the family and sizes from config.ini, then requires every weight file ft_expected_files
lists, at its exact size, no other weight file, and every config.ini key the backend requires.
Exits 0 and prints "ok" when correct; exits 2 naming every problem otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .convert import ConversionError, verify
from .decode import ModelError, read_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m ftnative.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="the <tp>-gpu directory")
    args = parser.parse_args(argv)
    directory = Path(args.directory)
    try:
        family, params, dtype = read_config(directory)
        # The upstream converters do not all write tensor_para_size: the directory says it too.
        named = re.match(r"\.?(\d+)-gpu", directory.name) or re.match(r"\.?(\d+)-gpu", directory.resolve().name)
        tp = params.get("tensor_para_size") or (int(named.group(1)) if named else None)
        if not tp:
            raise ModelError(f"{directory}: config.ini lacks tensor_para_size and the directory is not named <tp>-gpu")
        verify(directory, family, params, tp, dtype)
    except (ConversionError, ModelError) as err:
        print(f"ftnative.verify: {err}", file=sys.stderr)
        return 2
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
