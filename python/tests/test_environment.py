"""The client's environment report: python3 -m unittest discover -s python/tests"""

import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, PYTHON_DIR)

import training_watchdog as tw  # noqa: E402


def run_isolated(script, extra_path=(), env=None):
    """Run ``script`` in ``python3 -S`` (no site-packages) with only the client and
    ``extra_path`` importable; returns its stdout parsed as JSON."""
    full_env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([PYTHON_DIR, *extra_path])}
    full_env.update(env or {})
    out = subprocess.run(
        [sys.executable, "-S", "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
    )
    if out.returncode != 0:
        raise AssertionError(out.stderr)
    return json.loads(out.stdout)


def make_site(root, dists, torch_version_py=None):
    """A site directory as pip leaves it: ``<name>-<version>.dist-info/METADATA`` per
    distribution, and ``torch/version.py`` when given."""
    for name, version in dists.items():
        info = os.path.join(root, "%s-%s.dist-info" % (name.replace("-", "_"), version))
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: %s\nVersion: %s\n\nlong description\n" % (name, version))
    if torch_version_py is not None:
        os.makedirs(os.path.join(root, "torch"))
        with open(os.path.join(root, "torch", "version.py"), "w") as f:
            f.write(torch_version_py)


class EnvironmentReport(unittest.TestCase):
    def test_versions_match_what_importlib_metadata_says_of_the_installed_packages(self):
        report = tw.environment()
        for name in tw._PACKAGES:
            try:
                expected = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                self.assertNotIn(name, report["packages"])
            else:
                self.assertEqual(report["packages"].get(name), expected, name)
        self.assertEqual(report["version"], "%d.%d.%d" % sys.version_info[:3])
        self.assertNotIn(sys.executable, json.dumps(report))

    def test_nothing_installed(self):
        report = run_isolated("""
            import json, training_watchdog as tw
            print(json.dumps(tw.environment()))
        """)
        self.assertEqual(report["packages"], {})
        self.assertNotIn("torch_cuda", report)
        self.assertIn(report["implementation"], ("CPython", "PyPy"))

    def test_torch_and_its_cuda_build_are_read_without_importing_anything(self):
        with tempfile.TemporaryDirectory() as site:
            make_site(
                site,
                {"torch": "2.3.1+cu121", "numpy": "1.26.4", "pytorch-lightning": "2.2.0"},
                torch_version_py="from typing import Optional\n__version__ = '2.3.1+cu121'\n"
                "debug = False\ncuda: Optional[str] = '12.1'\ngit_version = 'abc'\n",
            )
            # A torch that would fail if imported.
            with open(os.path.join(site, "torch", "__init__.py"), "w") as f:
                f.write("raise SystemExit('torch was imported')\n")
            report = run_isolated(
                """
                import json, sys, training_watchdog as tw
                report = tw.environment()
                report["imported"] = [m for m in ("torch", "numpy") if m in sys.modules]
                print(json.dumps(report))
                """,
                extra_path=[site],
            )
        self.assertEqual(
            report["packages"], {"torch": "2.3.1+cu121", "numpy": "1.26.4", "pytorch-lightning": "2.2.0"}
        )
        self.assertEqual(report["torch_cuda"], "12.1")
        self.assertEqual(report["imported"], [])

    def test_a_cpu_torch_has_no_cuda_build(self):
        with tempfile.TemporaryDirectory() as site:
            make_site(site, {"torch": "2.3.1+cpu"}, torch_version_py="cuda: Optional[str] = None\n")
            report = run_isolated(
                "import json, training_watchdog as tw; print(json.dumps(tw.environment()))", extra_path=[site]
            )
        self.assertEqual(report["packages"], {"torch": "2.3.1+cpu"})
        self.assertNotIn("torch_cuda", report)

    def test_install_writes_the_report_beside_the_request_file_from_listings_and_headers_only(self):
        # install() is cheap because it reads directory listings of sys.path and the METADATA
        # headers of the packages it reports, and nothing else: no importlib.metadata (its import
        # alone costs more than the 50 ms install() may take), no framework imported, no other
        # distribution's metadata opened. What it does is watched with an audit hook, not a clock.
        with tempfile.TemporaryDirectory() as d:
            site = os.path.join(d, "site")
            others = {"other-dist%d" % i: "1.%d" % i for i in range(40)}
            make_site(
                site,
                dict(others, torch="2.3.1+cu121", numpy="1.26.4"),
                torch_version_py="cuda: Optional[str] = '12.1'\n",
            )
            with open(os.path.join(site, "torch", "__init__.py"), "w") as f:
                f.write("raise SystemExit('torch was imported')\n")
            run_dir = os.path.join(d, "run")
            os.makedirs(run_dir)
            request = os.path.join(run_dir, "run.request.json")
            result = run_isolated(
                """
                import json, os, sys, training_watchdog as tw
                before = set(sys.modules)
                seen = []
                def audit(event, args):
                    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
                        seen.append(["open", os.fsdecode(args[0])])
                    elif event.startswith(("os.listdir", "os.scandir", "os.walk", "glob.")):
                        seen.append(["list", os.fsdecode(args[0]) if args and args[0] is not None else "."])
                sys.addaudithook(audit)
                tw.install()
                seen = list(seen)
                print(json.dumps({"seen": seen, "imported": sorted(set(sys.modules) - before)}))
                """,
                extra_path=[site],
                env={"WATCHDOG_REQUEST_FILE": request},
            )
            with open(request + ".environment") as f:
                written = json.load(f)
        self.assertEqual(written["packages"], {"torch": "2.3.1+cu121", "numpy": "1.26.4"})
        self.assertEqual(written["torch_cuda"], "12.1")
        self.assertIn("version", written)
        self.assertIsInstance(written["pid"], int)
        heavy = {"importlib_metadata", "pkg_resources", "torch", "tensorflow", "keras", "jax", "lightning",
                 "pytorch_lightning", "transformers", "numpy"}
        imported = [m for m in result["imported"] if m.startswith("importlib.metadata") or m.split(".")[0] in heavy]
        self.assertEqual(imported, [])
        # In the site (where the distributions are): its listing, and no more than the reported
        # packages' METADATA and torch's version.py. The interpreter's own opens and listings (a
        # lazy import of the standard library) are elsewhere and left out of it.
        inside = site + os.sep
        listed = [path for what, path in result["seen"] if what == "list" and (path + os.sep).startswith(inside)]
        self.assertEqual(listed, [site], "only the sys.path entry itself is listed, not what is in it")
        may_open = {
            os.path.join(site, "torch-2.3.1+cu121.dist-info", "METADATA"),
            os.path.join(site, "numpy-1.26.4.dist-info", "METADATA"),
            os.path.join(site, "torch", "version.py"),
        }
        opened = [path for what, path in result["seen"] if what == "open"]
        self.assertEqual(
            [p for p in opened if p.startswith(inside) and p not in may_open], [],
            "only the reported packages' metadata and torch's version.py are opened",
        )
        # The hook saw the report's write too: the opens above were watched, not missed.
        self.assertTrue(any(os.path.dirname(p) == run_dir for p in opened), "no open of the report was seen")

    def test_a_symlink_at_the_report_path_is_not_followed(self):
        with tempfile.TemporaryDirectory() as d:
            request = os.path.join(d, "run.request.json")
            victim = os.path.join(d, "victim")
            with open(victim, "w") as f:
                f.write("keep")
            os.symlink(victim, request + ".environment")
            run_isolated(
                "import json, training_watchdog as tw; tw.install(); print('{}')",
                env={"WATCHDOG_REQUEST_FILE": request},
            )
            with open(victim) as f:
                self.assertEqual(f.read(), "keep")


if __name__ == "__main__":
    unittest.main()
