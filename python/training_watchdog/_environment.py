"""The run's Python side as the watchdog records it: ``<request file>.environment``.

The interpreter and the versions of the packages that decide how training behaves, read from
their metadata (none is imported), written once per request file.
"""

import json
import os
import re
import sys

from training_watchdog._files import _write_atomic


# The packages whose versions decide how training behaves (their distribution names).
_PACKAGES = ("torch", "tensorflow", "keras", "jax", "lightning", "pytorch-lightning", "transformers", "numpy")
_CUDA_LINE = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]{1,32})['\"]", re.M)
_reported = set()


def _normalized(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def _metadata_version(path):
    """The ``Version:`` header of a METADATA or PKG-INFO file, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line[8:].strip()[:64] or None
                if line in ("\n", "\r\n"):  # the headers end at the first blank line
                    return None
    except OSError:
        return None
    return None


def _installed(wanted):
    """``{name: (version, sys.path entry)}`` of the distributions in ``wanted`` (their normalized
    names), from the ``.dist-info``/``.egg-info`` metadata on ``sys.path``; the first entry wins,
    as for an import. Reads directory listings and METADATA headers only: importing
    ``importlib.metadata`` alone costs more than the 50 ms budget of ``install()``."""
    found = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for item in names:
            stem, dot, suffix = item.rpartition(".")
            if not dot or suffix not in ("dist-info", "egg-info"):
                continue
            name = _normalized(stem.split("-", 1)[0])
            if name not in wanted or name in found:
                continue
            path = os.path.join(entry or ".", item)
            meta = os.path.join(path, "METADATA" if suffix == "dist-info" else "PKG-INFO")
            version = _metadata_version(meta) if os.path.isdir(path) else _metadata_version(path)
            if version is None and "-" in stem:
                version = stem.split("-")[1]
            if version:
                found[name] = (version, entry or ".")
    return found


def environment():
    """The run's Python side, as the watchdog records it: the interpreter's implementation and
    version (not its path), the installed versions of the packages that decide how training
    behaves (from their metadata; none is imported) and torch's CUDA build (read from
    ``torch/version.py`` as a file). Standard library only."""
    wanted = {_normalized(n): n for n in _PACKAGES}
    packages = {}
    torch_cuda = None
    for key, (version, entry) in _installed(wanted).items():
        packages[wanted[key]] = version
        if key == "torch":
            try:
                with open(os.path.join(entry, "torch", "version.py"), encoding="utf-8") as f:
                    found = _CUDA_LINE.search(f.read(65536))
                torch_cuda = found.group(1) if found else None
            except (OSError, ValueError):
                pass
    v = sys.version_info
    report = {
        "implementation": {"cpython": "CPython", "pypy": "PyPy"}.get(sys.implementation.name, sys.implementation.name),
        "version": "%d.%d.%d" % (v.major, v.minor, v.micro),
        "packages": packages,
    }
    if torch_cuda:
        report["torch_cuda"] = torch_cuda
    return report


def _report_environment(path):
    """Write :func:`environment` to ``<request file>.environment`` once per request file."""
    if not path or path in _reported:
        return
    _reported.add(path)
    try:
        # The PID tells the watchdog the file is this run's, not one left by an earlier run.
        report = dict(environment(), pid=os.getpid())
        _write_atomic(path + ".environment", (json.dumps(report, sort_keys=True) + "\n").encode())
    except Exception as e:  # the report is a nicety: never stop the run for it
        sys.stderr.write("training_watchdog: cannot write the environment report: %s\n" % e)
