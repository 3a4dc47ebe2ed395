"""Grade a folder of submitted notebooks into a CSV of scores per question, with the otter-grader autograders
that sit beside this file (built by course/make_course.py, `make course`).

    python grade.py SUBMISSIONS --out scores.csv

Each SUBMISSIONS/*.ipynb is matched to its notebook by its title cell ("# 06 · Parallelism ..."), so students
may rename the files. The notebook runs in full (otter-grader, without Docker: in this Python environment,
which needs reluattn and otter-grader installed; a cell that fails is skipped, as otter does), then every
question's public and hidden cases run against what it defined. One row per submission: the file, the
notebook, the points of each question, the total and the possible; a submission that cannot be matched or
graded gets a row with the reason in `error`. The notebooks run with RELUATTN_QUICK=1 (their sweeps and
training shortened) unless it is set; RELUATTN_DATA, when set, is what notebook 04 trains on.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def notebook_of(path: Path) -> str | None:
    """The two-digit number in the submission's title cell ("# 06 · ..."), else None."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for cell in cells:
        source = cell.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        match = re.match(r"#\s+(\d\d)\b", source.lstrip())
        if cell.get("cell_type") == "markdown" and match:
            return match.group(1)
    return None


def questions(autograder: Path) -> list[str]:
    """The question names of an autograder (NN_name.zip): the notebook's exercises, in order."""
    from reluattn.grading import CHECKERS
    return [checker.removeprefix("check_") for checker in CHECKERS[autograder.stem]]


def grade_one(submission: Path, autograder: Path) -> dict:
    """{question: points, "total": ..., "possible": ...} for one submission (otter-grader's grade_submission)."""
    from otter.api import grade_submission

    with tempfile.TemporaryDirectory() as work:  # otter writes next to the submission; keep the folder clean
        copy = Path(work) / submission.name
        copy.write_bytes(submission.read_bytes())
        results = grade_submission(str(copy), str(autograder), quiet=True)
    if results.catastrophic_error is not None:
        raise RuntimeError(f"otter-grader could not run it: {results.catastrophic_error}")
    scores = {name: results.get_score(name) for name in questions(autograder)}
    return {**scores, "total": results.total, "possible": results.possible}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", type=Path, help="a folder of submitted .ipynb notebooks")
    parser.add_argument("--out", type=Path, default=Path("scores.csv"), help="the CSV to write (default scores.csv)")
    parser.add_argument("--autograders", type=Path, default=HERE, help="the folder of NN_*.zip autograders")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions}: not a folder; give the folder of submitted notebooks")
    autograders = {path.name[:2]: path for path in sorted(args.autograders.glob("[0-9][0-9]_*.zip"))}
    if not autograders:
        parser.error(f"{args.autograders}: holds no NN_*.zip autograder; run `make course` first")
    os.environ.setdefault("RELUATTN_QUICK", "1")
    rows, columns = [], []
    for submission in sorted(args.submissions.glob("*.ipynb")):
        number = notebook_of(submission)
        row = {"submission": submission.name, "notebook": number or ""}
        if number not in autograders:
            row["error"] = ("no title cell '# NN · ...' found" if number is None
                            else f"no autograder for notebook {number} in {args.autograders}")
        else:
            try:
                row.update(grade_one(submission, autograders[number]))
            except Exception as error:  # one broken submission must not stop the class's grading
                row["error"] = f"{type(error).__name__}: {error}"
        columns += [key for key in row if key not in columns and key not in ("total", "possible", "error")]
        rows.append(row)
        print(f"{submission.name}: {row.get('total', '-')} / {row.get('possible', '-')} {row.get('error', '')}".rstrip())
    header = [*columns, "total", "possible", "error"]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=header, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    temporary = args.out.with_name(f".{args.out.name}.tmp")
    temporary.write_text(text.getvalue(), encoding="utf-8")
    os.replace(temporary, args.out)
    print(f"wrote {args.out} ({len(rows)} submissions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
