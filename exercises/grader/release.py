"""Write the student copy of the repository:  python -m exercises.release OUT_DIR

The copy is the repository (the files git tracks, plus new files git does not ignore) minus
``exercises/solutions/``, the hidden tests (``exercises/grader/hidden/``) and the grader's test
fixtures (``exercises/grader/fixtures/``: its hostile submissions and its mutants, which are
near-solutions). Every exercise file
``exercises/exNN_<topic>.py`` is regenerated from its master copy in ``exercises/solutions/``,
with each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region replaced by the stub

    # TODO Exercise 2.1: your code here (replace the line below)
    raise NotImplementedError("Exercise 2.1: softmax")

so a solved ``exercises/exNN_*.py`` left in the instructor's working tree never leaks. Any other
``.py`` file with such regions gets the same treatment. The copy is checked before the command
returns (:func:`check_student_copy`): no solution region and no hidden test in any file, in any
encoding (UTF-8, UTF-16, UTF-32, or bytes that are not text), no solution whose markers were
stripped (its code lines compared with the solutions' regions), and no archive (zip, tar,
gzip ...) holding ``solutions/`` or ``hidden/`` or any of the above. Each problem names the file.

The same function, :func:`make_stub`, generates the committed stubs; ``tests/test_exercises.py``
checks that ``exercises/exNN_*.py`` equal ``make_stub(exercises/solutions/exNN_*.py)``.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# Assembled from two halves, so that this file holds no marker line itself.
BEGIN = "### BEGIN" + " SOLUTION"
END = "### END" + " SOLUTION"
ROOT = Path(__file__).resolve().parents[2]
EXCLUDED_DIRS = ("exercises/solutions/", "exercises/grader/hidden/", "exercises/grader/fixtures/")
HIDDEN_MARKER = "HIDDEN TESTS" + " -- instructors only"
_SKIP_PARTS = {".git", "__pycache__", ".pytest_cache", ".ipynb_checkpoints", "runs"}
_EXERCISE_ID = re.compile(r"Exercise (\d+\.\d+[a-z]?)")


class ReleaseError(RuntimeError):
    pass


def _scopes(tree: ast.AST):
    """Yield (function node, enclosing class node or None) for every function in the tree."""

    def walk(node, cls):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child, cls
                yield from walk(child, cls)
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, child)
            else:
                yield from walk(child, cls)

    yield from walk(tree, None)


def _exercise_of(func, cls) -> tuple[str, str]:
    """The exercise ID and the name to put in the NotImplementedError of a region in ``func``."""
    for node in (func, cls):
        doc = ast.get_docstring(node) if node is not None else None
        match = _EXERCISE_ID.search(doc or "")
        if match:
            name = func.name if cls is None else f"{cls.name}.{func.name}"
            return match.group(1), name
    raise ReleaseError(f"function {func.name!r} (line {func.lineno}) has a solution region but "
                       "neither it nor its class has 'Exercise N.M' in its docstring")


def make_stub(source: str, filename: str = "<source>") -> str:
    """Replace every solution region of ``source`` (a Python module) by its stub."""
    lines = source.splitlines(keepends=True)
    regions, start = [], None
    for i, line in enumerate(lines):
        text = line.strip()
        if text == BEGIN:
            if start is not None:
                raise ReleaseError(f"{filename}:{i + 1}: nested {BEGIN}")
            start = i
        elif text == END:
            if start is None:
                raise ReleaseError(f"{filename}:{i + 1}: {END} without {BEGIN}")
            regions.append((start, i))
            start = None
    if start is not None:
        raise ReleaseError(f"{filename}:{start + 1}: {BEGIN} without {END}")
    if not regions:
        return source
    scopes = list(_scopes(ast.parse(source, filename)))
    out, pos = [], 0
    for begin, end in regions:
        first_code_line = begin + 2  # 1-based line number of the region's first line
        inner = [(f, c) for f, c in scopes if f.lineno < first_code_line <= f.end_lineno]
        if not inner:
            raise ReleaseError(f"{filename}:{begin + 1}: a solution region must be inside a function")
        func, cls = max(inner, key=lambda fc: fc[0].lineno)  # the innermost function
        ex_id, name = _exercise_of(func, cls)
        indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
        out.extend(lines[pos:begin])
        out.append(f"{indent}# TODO Exercise {ex_id}: your code here (replace the line below)\n")
        out.append(f'{indent}raise NotImplementedError("Exercise {ex_id}: {name}")\n')
        pos = end + 1
    out.extend(lines[pos:])
    return "".join(out)


def _utf8_with_regions(path: Path) -> bool:
    """A UTF-8 file with solution regions (a file in another encoding is copied as it is, and
    the check of the copy refuses it if it holds a solution)."""
    try:
        return _has_regions(path.read_text())
    except UnicodeDecodeError:
        return False


def _has_regions(text: str) -> bool:
    return any(line.strip() in (BEGIN, END) for line in text.splitlines())


def solution_regions(source: str) -> list[str]:
    """The code inside each solution region of ``source`` (used by the tests of the release)."""
    found, current = [], None
    for line in source.splitlines():
        if line.strip() == BEGIN:
            current = []
        elif line.strip() == END:
            found.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return found


def repository_files(root: Path = ROOT) -> list[str]:
    """Paths (relative, with '/') of the files of the repository: git's tracked files plus the
    untracked ones it does not ignore; without git, every file outside caches and build output."""
    if (root / ".git").exists() and shutil.which("git"):
        result = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=root, capture_output=True, check=True)
        names = sorted({n for n in result.stdout.decode().split("\0") if n})
        return [n for n in names if (root / n).is_file()]
    names = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not _SKIP_PARTS.intersection(rel.parts) and path.suffix != ".pyc":
            names.append(rel.as_posix())
    return names


def release(out_dir, root: Path = ROOT, force: bool = False) -> dict:
    """Write the student copy of ``root`` to ``out_dir``; returns a summary."""
    root, out_dir = Path(root).resolve(), Path(out_dir).resolve()
    if out_dir == root or root in out_dir.parents:
        raise ReleaseError(f"OUT_DIR {out_dir} must be outside the repository {root}")
    above = next((p for p in [out_dir, *out_dir.parents] if p.exists()), None)
    if above is not None and not above.is_dir():
        what = "is a file" if above == out_dir else f"is inside {above}, which is a file"
        raise ReleaseError(f"OUT_DIR {out_dir} {what}, not a folder: give a folder that is empty or does not exist")
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise ReleaseError(f"OUT_DIR {out_dir} exists and is not empty (use --force to overwrite)")
    if not (root / "exercises" / "solutions").is_dir():
        raise ReleaseError(f"{root / 'exercises' / 'solutions'} not found: this already is a student "
                           "copy (release from the instructor's repository)")
    try:
        copied, stubs = _write_copy(root, out_dir)
    except OSError as err:
        raise ReleaseError(f"cannot write the student copy in {out_dir}: {err.strerror}"
                           + (f" ({err.filename})" if err.filename else "")) from None
    problems = check_student_copy(out_dir, root)
    if problems:
        raise ReleaseError("the student copy is not clean (nothing was released; the copy in "
                           f"{out_dir} is incomplete -- delete it):\n  " + "\n  ".join(problems))
    return {"out_dir": str(out_dir), "files": copied, "stubbed": stubs}


def _write_copy(root: Path, out_dir: Path) -> tuple[int, list]:
    copied, stubs = 0, []
    for rel in repository_files(root):
        if rel.startswith(EXCLUDED_DIRS):
            continue
        src, dst = root / rel, out_dir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        master = root / "exercises" / "solutions" / Path(rel).name
        if re.fullmatch(r"exercises/ex\d\d_\w+\.py", rel) and master.is_file():
            dst.write_text(make_stub(master.read_text(), str(master)))
            stubs.append(rel)
        elif rel.endswith(".py") and _utf8_with_regions(src):
            dst.write_text(make_stub(src.read_text(), rel))
            stubs.append(rel)
        else:
            shutil.copyfile(src, dst)
        shutil.copymode(src, dst)
        copied += 1
    return copied, stubs


ARCHIVES = (".zip", ".whl", ".egg", ".jar", ".tar", ".tgz", ".tbz2", ".txz", ".gz", ".bz2", ".xz")
_LEAK_PATH = re.compile(r"(^|/)(exercises/)?(grader/)?(solutions|hidden|fixtures)(/|$)")
_ENCODINGS = ("utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")


def _code_lines(text: str) -> set[str]:
    return {line.split("#")[0].strip() for line in text.splitlines()} - {""}


def solution_bodies(root: Path = ROOT) -> list[tuple[str, set[str]]]:
    """For each solution region of ``exercises/solutions/``: (where, its distinctive code lines --
    25 characters or more, comments removed), to recognise a solution whose markers were
    stripped."""
    bodies = []
    for master in sorted((Path(root) / "exercises" / "solutions").glob("ex*.py")):
        for i, region in enumerate(solution_regions(master.read_text())):
            lines = {line for line in _code_lines(region) if len(line) >= 25}
            if len(lines) >= 3:
                bodies.append((f"{master.name}, region {i + 1}", lines))
    return bodies


def _decodings(data: bytes) -> list[str]:
    """The texts ``data`` could be: UTF-8, UTF-16/32 when it has their zero bytes, and Latin-1."""
    texts = []
    for enc in _ENCODINGS:
        if enc != "utf-8" and b"\0" not in data:
            continue
        try:
            texts.append(data.decode(enc))
        except UnicodeDecodeError:
            pass
    texts.append(data.decode("latin-1"))
    return texts


def _archive_members(path: Path):
    """(name, bytes) of each file in an archive (zip, tar, or a single gzip/bzip2/xz stream)."""
    import bz2
    import gzip
    import lzma
    import tarfile
    import zipfile

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if not info.is_dir():
                    yield info.filename, z.read(info)
        return
    try:
        with tarfile.open(path) as t:
            for member in t.getmembers():
                if member.isfile():
                    yield member.name, t.extractfile(member).read()
        return
    except (tarfile.TarError, OSError, EOFError):
        pass
    for opener in (gzip.open, bz2.open, lzma.open):
        try:
            with opener(path) as fh:
                yield path.stem, fh.read()
            return
        except (OSError, EOFError, lzma.LZMAError):
            continue


def _leaks(rel: str, data: bytes, bodies) -> list[str]:
    for text in _decodings(data):
        if _has_regions(text) or HIDDEN_MARKER in text:
            return [f"{rel} contains a solution region or hidden tests"]
        lines = _code_lines(text)
        hit = next((where for where, body in bodies if len(body & lines) >= max(3, 0.6 * len(body))), None)
        if hit:
            return [f"{rel} contains the code of a solution ({hit}) without its markers"]
    return []


def check_student_copy(out_dir, root: Path = ROOT) -> list[str]:
    """What a student copy must not contain, each naming the file: solution regions, solutions
    whose markers were stripped, hidden tests -- in any encoding, and inside archives."""
    out_dir = Path(out_dir)
    problems = []
    for sub in EXCLUDED_DIRS:
        if (out_dir / sub).exists():
            problems.append(f"{sub} is present")
    bodies = solution_bodies(root)
    for path in sorted(out_dir.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(out_dir).as_posix()
        try:
            data = path.read_bytes()
        except OSError as err:
            problems.append(f"{rel} cannot be read ({err.strerror})")
            continue
        # the library holds its own versions of several exercises: markers only, not bodies
        problems += _leaks(rel, data, [] if rel.startswith("vit_scratch/") else bodies)
        if path.name.lower().endswith(ARCHIVES):
            try:
                for name, member in _archive_members(path):
                    if _LEAK_PATH.search(name.replace("\\", "/")):
                        problems.append(f"{rel} holds {name} (solutions/, hidden/ or fixtures/)")
                    problems += [f"{rel}: {p}" for p in _leaks(name, member, bodies)]
            except Exception as err:  # noqa: BLE001 - an archive we cannot read is not shipped
                problems.append(f"{rel} is an archive that cannot be read ({type(err).__name__}): "
                                "remove it or check it by hand")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exercises.release",
        description="Write the student copy: the repository minus exercises/solutions, "
                    "exercises/grader/hidden and exercises/grader/fixtures, every solution region "
                    "replaced by its stub.")
    parser.add_argument("out_dir", help="where to write the copy (must be empty or not exist)")
    parser.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    args = parser.parse_args(argv)
    try:
        summary = release(args.out_dir, force=args.force)
    except ReleaseError as err:
        print(f"release: {err}", file=sys.stderr)
        return 2
    print(f"wrote the student copy to {summary['out_dir']}: {summary['files']} files, "
          f"{len(summary['stubbed'])} with stubs ({', '.join(os.path.basename(s) for s in summary['stubbed'])})")
    print("left out: exercises/solutions/, exercises/grader/hidden/ (the hidden tests), "
          "exercises/grader/fixtures/ (the grader's tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
