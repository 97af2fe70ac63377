"""`rtp-course grade ASSIGNMENT --slurm`: a class graded as a Slurm job array.

One array task per student (grade.sbatch, beside this module: instructor-only, so
not in the released slurm/) grades that student's code and
writes its points as JSON next to the report (checks/<student>/<assignment>/).
The tasks never touch the gradebook: this process waits for the array, then
writes every student's points and feedback into it one after the other, as a
local `rtp-course grade` does. `--no-wait` submits and returns; `--merge` later
writes what the tasks left.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from rtp_course.cluster.job import SlurmError, run_slurm_command
from rtp_course.cluster.slurm import sbatch
from rtp_course.instructor import grade_code

POINTS = "points.json"
TEMPLATE = Path(__file__).with_name("grade.sbatch")


def points_file(course: Path, student: str, assignment: str) -> Path:
    return course / "checks" / student / assignment / POINTS


def students_of(course: Path, assignment: str, only=None) -> list[str]:
    found = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}"))
    return [s for s in found if not only or s in only]


def run_task(course: Path, assignment: str, students_file: Path, index: int, world_sizes=None) -> str:
    """Array task `index`: grade the student on line `index` of `students_file`."""
    students = Path(students_file).read_text().split()
    if not 0 <= index < len(students):
        raise ValueError(f"array task {index}: {students_file} lists {len(students)} students")
    student = students[index]
    cells = grade_code.graded_cells(course, assignment)
    points = grade_code.grade_student(course, assignment, student, cells, world_sizes)
    path = points_file(course, student, assignment)
    path.write_text(json.dumps(points))
    print(f"{student}/{assignment}: " + ", ".join(f"{c.exercise} {points[c.grade_id]:g}/{c.points:g}"
                                                for c in cells))
    return student


def submit(course: Path, assignment: str, students, *, world_sizes=None, gpus=0, cpus=4,
           max_running=None, time_limit="00:20:00", partition=None, account=None, qos=None,
           extra_sbatch=(), setup=None) -> str:
    """Submit the array for `students`; return its job id."""
    work = course / "slurm" / assignment
    work.mkdir(parents=True, exist_ok=True)
    listing = work / "students.txt"
    listing.write_text("\n".join(students) + "\n")
    for s in students:                      # a result from an earlier run must not count
        points_file(course, s, assignment).unlink(missing_ok=True)
    array = f"0-{len(students) - 1}" + (f"%{max_running}" if max_running else "")
    env = {"RTP_COURSE_GRADING_DIR": str(course), "RTP_ASSIGNMENT": assignment,
           "RTP_STUDENTS": str(listing)}
    if world_sizes:
        env["RTP_WORLD_SIZES"] = " ".join(map(str, world_sizes))
    if setup:
        env["RTP_SETUP"] = setup
    return sbatch(TEMPLATE, flags=[f"--array={array}", f"--cpus-per-task={cpus}",
                                   f"--gpus-per-task={gpus}",
                                   f"--output={work / 'rtp-grade-%A_%a.out'}"],
                  gpus=gpus, time_limit=time_limit, partition=partition, account=account,
                  qos=qos, extra_sbatch=extra_sbatch, env=env, what="the grading array")


def wait(job_id: str, poll: float = 1.0, timeout: float | None = None, log=print) -> None:
    """Until no task of the array is pending or running."""
    start, last = time.monotonic(), None
    while True:
        r = run_slurm_command("squeue", "-h", "-r", "-j", job_id, "-o", "%T", check=False)
        states = r.stdout.split()
        if r.returncode == 0 and not states:
            return
        summary = ", ".join(f"{states.count(s)} {s.lower()}" for s in sorted(set(states)))
        if summary != last:
            log(f"grading array {job_id}: {summary}")
            last = summary
        if timeout is not None and time.monotonic() - start > timeout:
            raise SlurmError(f"grading array {job_id} still has tasks after {timeout:.0f} s: {summary}")
        time.sleep(poll)


def merge(course: Path, assignment: str, students, log=print) -> dict:
    """Write the points the tasks left into the gradebook and the feedback; {student: points}."""
    cells = grade_code.graded_cells(course, assignment)
    out = {}
    for student in students:
        path = points_file(course, student, assignment)
        try:
            points = json.loads(path.read_text())
            assert set(points) == {c.grade_id for c in cells}
        except (OSError, ValueError, AssertionError):
            logs = sorted((course / "slurm" / assignment).glob("rtp-grade-*.out"))
            log(f"{student}/{assignment}: no result from its array task (see its log in "
                f"{course / 'slurm' / assignment}{'' if logs else ', none written yet'}); "
                f"grade it again with: rtp-course grade {assignment} --student {student}")
            continue
        out[student] = points
        grade_code.record(course, assignment, student, cells, points, log)
    return out


def cli(args, course: Path, assignment: str) -> int:
    students = students_of(course, assignment, args.student)
    if not students:
        raise ValueError(f"no submission of {assignment} in {course / 'submitted'}")
    if args.merge:
        merge(course, assignment, students)
        return 0
    job_id = submit(course, assignment, students, world_sizes=args.world_size, gpus=args.gpus,
                    max_running=args.max_running, time_limit=args.time, partition=args.partition,
                    account=args.account, qos=args.qos, extra_sbatch=args.sbatch, setup=args.setup)
    print(f"{assignment}: Slurm array {job_id}, {len(students)} task(s), logs in "
          f"{course / 'slurm' / assignment}")
    if args.no_wait:
        print(f"when it has finished: rtp-course grade {assignment} --merge")
        return 0
    wait(job_id)
    merge(course, assignment, students)
    return 0
