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
from rtp_course.instructor.assignment import graded_cells

POINTS = "points.json"
JOB_ID = "job_id"               # the last array submitted for the assignment (slurm/<assignment>/)
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
    cells = graded_cells(course, assignment)
    points = grade_code.grade_student(course, assignment, student, cells, world_sizes)
    path = points_file(course, student, assignment)
    path.write_text(json.dumps(points))
    print(f"{student}/{assignment}: " + ", ".join(f"{c.exercise} {points[c.grade_id]:g}/{c.points:g}"
                                                for c in cells))
    return student


def submit(course: Path, assignment: str, students, *, world_sizes=None, gpus=0, cpus=None,
           max_running=None, time_limit="00:20:00", partition=None, account=None, qos=None,
           extra_sbatch=(), setup=None) -> str:
    """Submit the array for `students`; return its job id. A task asks for `cpus`, by default
    a core per rank of the largest world size it grades (4 for the course's)."""
    work = course / "slurm" / assignment
    work.mkdir(parents=True, exist_ok=True)
    listing = work / "students.txt"
    listing.write_text("\n".join(students) + "\n")
    for s in students:                      # a result from an earlier run must not count
        points_file(course, s, assignment).unlink(missing_ok=True)
    world_sizes = _world_sizes(world_sizes, gpus)
    cpus = cpus or max(world_sizes or (4,))
    array = f"0-{len(students) - 1}" + (f"%{max_running}" if max_running else "")
    env = {"RTP_COURSE_GRADING_DIR": str(course), "RTP_ASSIGNMENT": assignment,
           "RTP_STUDENTS": str(listing)}
    if world_sizes:
        env["RTP_WORLD_SIZES"] = " ".join(map(str, world_sizes))
    if gpus:                                # the task grades on its GPUs (grade.sbatch says so too)
        env["RTP_COURSE_GRADE_BACKEND"] = "nccl"
    if setup:
        env["RTP_SETUP"] = setup
    job_id = sbatch(TEMPLATE, flags=[f"--array={array}", f"--cpus-per-task={cpus}",
                                     f"--gpus-per-task={gpus}",
                                     f"--output={work / 'rtp-grade-%A_%a.out'}"],
                    gpus=gpus, time_limit=time_limit, partition=partition, account=account,
                    qos=qos, extra_sbatch=extra_sbatch, env=env, what="the grading array")
    (work / JOB_ID).write_text(f"{job_id}\n")      # --merge asks Slurm whether it still runs
    return job_id


def _world_sizes(asked, gpus: int):
    """On GPUs, the course's world sizes that `gpus` hold unless some are asked for, which
    must fit (NCCL takes a GPU per rank); on CPU, what was asked (None: the course's)."""
    if not gpus:
        return asked
    from rtp_course.course import COURSE
    sizes = asked or sorted(n for n in {n for ex in COURSE for n in ex.world_sizes} if n <= gpus)
    if max(sizes) > gpus:
        raise ValueError(f"world size {max(sizes)} needs {max(sizes)} GPUs per task on NCCL; "
                         f"--gpus {gpus}: ask for more GPUs or smaller world sizes")
    return sizes


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


def still_running(course: Path, assignment: str) -> tuple[str, dict]:
    """(job id, {student: state}) of the assignment's last array, for its tasks that Slurm
    still has pending or running; ("", {}) when none is known or Slurm does not answer."""
    work = course / "slurm" / assignment
    try:
        job_id = (work / JOB_ID).read_text().strip()
        students = (work / "students.txt").read_text().split()
    except OSError:
        return "", {}
    r = run_slurm_command("squeue", "-h", "-r", "-j", job_id, "-o", "%i %T", check=False)
    if r.returncode != 0:
        return job_id, {}
    states = {}
    for line in r.stdout.splitlines():
        task, _, state = line.partition(" ")
        index = task.rpartition("_")[2]
        if index.isdigit() and int(index) < len(students):
            states[students[int(index)]] = state.strip().lower()
    return job_id, states


def merge(course: Path, assignment: str, students, log=print) -> dict:
    """Write the points the tasks left into the gradebook and the feedback; {student: points}.
    A student whose task Slurm still runs is said to be running, not to have failed."""
    cells = graded_cells(course, assignment)
    job_id, running = still_running(course, assignment)
    out = {}
    for student in students:
        path = points_file(course, student, assignment)
        if student in running and not path.exists():
            log(f"{student}/{assignment}: still {running[student]} in array {job_id}")
            continue
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
    waiting = [s for s in students if s in running and s not in out]
    if waiting:
        log(f"grading array {job_id} is still running ({len(waiting)} task(s) not finished): "
            f"merge again when it has finished: rtp-course grade {assignment} --merge")
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
