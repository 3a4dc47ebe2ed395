"""Build dist/course/: the student bundle and the class autograder with hidden tests (`make course`).

    python course/make_course.py --data CIFAR_ZIP          # everything, into dist/course/
    python course/make_course.py --data CIFAR_ZIP --only 06 --seed 1   # one notebook's autograder, fixed seeds

dist/course/
  reluattn-course-student.zip   the student bundle, zipped: what students download
  student/
    README.md                   running it on a laptop with only Python (from course/student_README.md)
    notebooks/NN_*.ipynb        the exercise versions (tutorials/exercises/): no solution code, no hidden result
    reluattn-VERSION-py3-none-any.whl   the package (pip wheel of this checkout)
    data/cifar10-subset.zip     a few hundred CIFAR-10 training images, train/<class>/<image>, copied
                                byte for byte from CIFAR_ZIP (an image-folder zip such as the JPEG copy)
  autograder/
    README.md                   how to grade (from course/autograder_README.md)
    grade.py                    python grade.py SUBMISSIONS --out scores.csv (course/grade.py)
    NN_*.zip                    one otter-grader autograder per notebook
    hidden_seeds.json           the seeds of the hidden tests: for the lecturer, never for students

Each exercise is one question of its notebook's autograder, worth 3 points: 1 for the check the student
ran in the notebook (seed 0, public) and 1 for each of two hidden variants, the same checker with seeds drawn
at build time (other inputs, sizes kept) that the students never see. (Two checkers take no seed:
check_expected_activation and check_accuracy_standard_error are deterministic, so their hidden cases run the
public check again.) The checkers refuse reluattn's own functions, JAX inside a NumPy backward and finite
differences (reluattn/grading/refusal.py), so an answer imported from the package scores 0.
"""

from __future__ import annotations

import argparse
import json
import os
import pprint
import random
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "course"
EXERCISES = ROOT / "tutorials" / "exercises"
POINTS = {"public": 1, "hidden": 1}
HIDDEN_CASES = 2
IMAGE_MEMBER = re.compile(r"train/[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+\.(?:jpg|jpeg|png)", re.IGNORECASE)


def checkers() -> dict:
    """{notebook stem: checker names}, from reluattn.grading."""
    sys.path.insert(0, str(ROOT))
    from reluattn.grading import CHECKERS
    return CHECKERS


def test_file(checker: str, seeds: list[int]) -> str:
    """An otter-grader OK-format test: the public case (seed 0) and the hidden seeded variants."""
    exercise = checker.removeprefix("check_")

    def case(seed, hidden):
        code = (f">>> from reluattn.grading.autograde import passes\n"
                f">>> passes({checker!r}, {exercise}, seed={seed})\nTrue\n")
        return {"code": code, "hidden": hidden, "locked": False, "points": POINTS["hidden" if hidden else "public"]}

    test = {"name": exercise, "points": None,
            "suites": [{"cases": [case(0, False), *(case(seed, True) for seed in seeds)], "scored": True,
                        "setup": "", "teardown": "", "type": "doctest"}]}
    return f"OK_FORMAT = True\n\ntest = {pprint.pformat(test, width=110, sort_dicts=False)}\n"


def build_autograder(notebook: str, names: tuple, seeds: dict, target: Path) -> None:
    """target: the otter-grader autograder zip of one notebook (`otter generate`)."""
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        (work / "tests").mkdir()
        for checker in names:
            (work / "tests" / f"{checker.removeprefix('check_')}.py").write_text(test_file(checker, seeds[checker]),
                                                                                 encoding="utf-8")
        subprocess.run([sys.executable, "-m", "otter", "generate", "-t", "tests", "-o", "autograder.zip",
                        "--no-requirements", "--no-environment", "--no-config"], cwd=work, check=True, capture_output=True)
        replace_with(work / "autograder.zip", target)


def replace_with(source: Path, target: Path) -> None:
    """Move `source` onto `target` atomically (a temporary name in target's folder, then a rename)."""
    temporary = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source, temporary)
    os.replace(temporary, target)


def cifar_subset(source: Path, target: Path, per_class: int, seed: int) -> int:
    """Copy `per_class` images of each class of an image-folder zip (train/<class>/<image>) into a new zip,
    byte for byte (nothing decoded or extracted); returns the number of images."""
    if not zipfile.is_zipfile(source):
        raise SystemExit(f"--data {source}: not a zip file; give an image-folder zip of CIFAR-10 "
                         f"(train/<class>/<image>.jpg), such as the JPEG copy")
    with zipfile.ZipFile(source) as archive:
        by_class = {}
        for name in sorted(archive.namelist()):
            if IMAGE_MEMBER.fullmatch(name):  # plain names only: nothing that could leave the folder
                by_class.setdefault(name.split("/")[1], []).append(name)
        if len(by_class) < 2:
            raise SystemExit(f"--data {source}: found no train/<class>/<image> members; give an image-folder zip")
        rng = random.Random(seed)
        chosen = [name for names in by_class.values() for name in sorted(rng.sample(names, min(per_class, len(names))))]
        temporary = target.with_name(f".{target.name}.tmp")
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED) as subset:  # JPEGs do not compress
            for name in chosen:
                subset.writestr(name, archive.read(name))
    os.replace(temporary, target)
    return len(chosen)


def build_wheel(target_folder: Path) -> Path:
    """The reluattn wheel of this checkout (pip wheel), in target_folder."""
    with tempfile.TemporaryDirectory() as work:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", work, str(ROOT)],
                       check=True, capture_output=True)
        wheel = next(Path(work).glob("reluattn-*.whl"))
        replace_with(wheel, target_folder / wheel.name)
        return target_folder / wheel.name


def zip_folder(folder: Path, target: Path) -> None:
    temporary = target.with_name(f".{target.name}.tmp")
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, f"{target.stem}/{path.relative_to(folder)}")
    os.replace(temporary, target)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="an image-folder zip of CIFAR-10 (train/<class>/<image>), e.g. the JPEG copy")
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "course")
    parser.add_argument("--images-per-class", type=int, default=40, help="images of each class in the subset")
    parser.add_argument("--only", nargs="*", default=[], help="notebook prefixes whose autograders to build (default: all)")
    parser.add_argument("--seed", type=int, default=None,
                        help="draw the hidden seeds from this (default: unpredictable, from the OS)")
    args = parser.parse_args(argv)
    if not args.data.exists():
        parser.error(f"--data {args.data}: no such file; give an image-folder zip of CIFAR-10")
    student, autograder = args.out / "student", args.out / "autograder"
    for folder in (student, autograder):
        shutil.rmtree(folder, ignore_errors=True)
    (student / "notebooks").mkdir(parents=True)
    (student / "data").mkdir()
    autograder.mkdir(parents=True)

    for notebook in sorted(EXERCISES.glob("[0-9][0-9]_*.ipynb")):
        shutil.copyfile(notebook, student / "notebooks" / notebook.name)
    wheel = build_wheel(student)
    images = cifar_subset(args.data, student / "data" / "cifar10-subset.zip", args.images_per_class, seed=0)
    readme = (COURSE / "student_README.md").read_text(encoding="utf-8")
    (student / "README.md").write_text(readme.replace("WHEEL", wheel.name).replace("IMAGES", str(images)),
                                       encoding="utf-8")
    zip_folder(student, args.out / "reluattn-course-student.zip")

    draw = random.Random(args.seed).randrange if args.seed is not None else secrets.randbelow
    seeds = {}
    for notebook, names in checkers().items():
        if args.only and not notebook.startswith(tuple(args.only)):
            continue
        seeds[notebook] = {checker: [1 + draw(10 ** 6) for _ in range(HIDDEN_CASES)] for checker in names}
        build_autograder(notebook, names, seeds[notebook], autograder / f"{notebook}.zip")
        print(f"wrote {autograder / notebook}.zip ({len(names)} questions, {3 * len(names)} points)")
    (autograder / "hidden_seeds.json").write_text(json.dumps(seeds, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(COURSE / "grade.py", autograder / "grade.py")
    shutil.copyfile(COURSE / "autograder_README.md", autograder / "README.md")
    print(f"wrote {args.out / 'reluattn-course-student.zip'} ({wheel.name}, {images} images) and {autograder}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
