"""Make the imports of a family's upstream converter work inside the FT image.

ft_convert's upstream engine runs this with the image's own Python (in the image, before the
converter) for the family's converter imports (ftdomain.ft.families: ConverterImport; filter
ft_converter_imports). Each import line is tried as the converter would run it, with TARGET
first on its path; what fails and has pip requirements (markers choose by the image's Python) is
installed into TARGET with the image's
pip, built against the image's own packages (--no-build-isolation: GreenWaves' bfloat16 includes
numpy's headers and must match the numpy it runs with) and without its dependencies (--no-deps:
a second numpy in TARGET would shadow the one the image's torch was built for). Every line is
tried again afterwards. TARGET is complete only once its manifest (MANIFEST) is written: the
installation goes to TARGET.partial and is renamed, so an interrupted run leaves no half of it.

    python3 -m ftnative.converter_deps --target DIR \\
        --imports '[{"statement": ..., "requirements": [...], "cflags": ...}]'

Exit status: 0 done (one JSON line: what was present, what was installed), 2 an import that no
requirement provides fails, 1 pip failed or what it installed still does not import.
Standard library only: it runs on whatever Python the FT image has (3.8 in the default 22.04).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

MANIFEST = "ftfleet-converter-deps.json"


def probe_env(target):
    """The environment an import line is tried in: TARGET first, then the image's own
    PYTHONPATH without this tool's zip (the converter runs without it)."""
    own = __file__.split(".zip", 1)[0] + ".zip" if ".zip" in __file__ else ""
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != own]
    return dict(os.environ, PYTHONPATH=os.pathsep.join([target, *kept]))


def failing(imports, target):
    """The imports whose line fails, each with the last line of its error."""
    out = []
    for item in imports:
        done = subprocess.run([sys.executable, "-c", item["statement"]], env=probe_env(target),
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
            out.append(dict(item, error=lines[-1]))
    return out


def install(missing, partial):
    """pip-install the missing requirements into PARTIAL, one pip per set of CFLAGS."""
    by_flags = {}
    for item in missing:
        by_flags.setdefault(item.get("cflags", ""), []).extend(item["requirements"])
    for cflags, requirements in sorted(by_flags.items()):
        env = dict(os.environ)
        if cflags:
            env["CFLAGS"] = f"{env.get('CFLAGS', '')} {cflags}".strip()
        argv = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-cache-dir",
                "--disable-pip-version-check", "--target", partial, *requirements]  # fmt: skip
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join(done.stdout.strip().splitlines()[-15:])
            raise SystemExit(f"converter_deps: pip could not install {' '.join(requirements)} "
                             f"(exit status {done.returncode}):\n{tail}")  # fmt: skip


def installed(folder):
    """The distributions pip installed into FOLDER, as name==version."""
    found = []
    for entry in sorted(os.listdir(folder)):
        for suffix in (".dist-info", ".egg-info"):
            if entry.endswith(suffix):
                name, _, rest = entry[: -len(suffix)].partition("-")
                found.append(f"{name}=={rest.split('-')[0]}")
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="the folder the converter finds its packages in")
    parser.add_argument("--imports", required=True, help="JSON list of {statement, requirements, cflags}")
    args = parser.parse_args(argv)
    imports = json.loads(args.imports)
    if not isinstance(imports, list) or not all(isinstance(i, dict) and i.get("statement") for i in imports):
        parser.error("--imports must be a JSON list of objects with a statement")
    target, partial = args.target.rstrip("/"), args.target.rstrip("/") + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    missing = failing(imports, partial)
    unprovided = [m for m in missing if not m.get("requirements")]
    if unprovided:
        shutil.rmtree(partial, ignore_errors=True)
        lines = "; ".join(f"`{m['statement']}` fails ({m['error']})" for m in unprovided)
        fix = "build the FT image from sources whose image brings it, or use ft_convert_engine=native"
        print(f"converter_deps: the FT image lacks what the converter imports: {lines}; fix: {fix}", file=sys.stderr)
        return 2
    if missing:
        install(missing, partial)
        still = failing(imports, partial)
        if still:
            lines = "; ".join(f"`{m['statement']}` fails ({m['error']})" for m in still)
            asked = ", ".join(r for m in missing for r in m["requirements"])
            got = ", ".join(installed(partial)) or "nothing"
            print(f"converter_deps: pip installed {got} for {asked}, yet {lines}", file=sys.stderr)
            return 1
    absent = {m["statement"] for m in missing}
    report = {"python": sys.version.split()[0], "installed": installed(partial),
              "present": [i["statement"] for i in imports if i["statement"] not in absent]}  # fmt: skip
    with open(os.path.join(partial, MANIFEST), "w") as manifest:
        json.dump({**report, "imports": imports}, manifest, sort_keys=True)
    shutil.rmtree(target, ignore_errors=True)
    os.rename(partial, target)
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
