"""`rtp-course autograde ASSIGNMENT --slurm`: the notebooks' autograde as a Slurm job array.

One array task per student (autograde.sbatch, beside this module) runs `nbgrader autograde
ASSIGNMENT --student X` into a private copy of the gradebook, made here before the array is
submitted. This process waits for the array, then copies each student's autograde into the
gradebook, one at a time (autograde.merge_student), as a local `rtp-course autograde` does.
The grading directory must be on a file system the nodes share.
"""
from __future__ import annotations

import sys
from pathlib import Path

from rtp_course.instructor import autograde

TEMPLATE = Path(__file__).with_name("autograde.sbatch")


def work_dir(course: Path, assignment: str) -> Path:
    return course / "slurm" / assignment / "autograde"


def submit(course: Path, assignment: str, students, *, force=False, cpus=2, max_running=None,
           time_limit="00:30:00", partition=None, account=None, qos=None, extra_sbatch=(),
           setup=None) -> str:
    """Private gradebooks for `students`, then the array; return its job id."""
    from rtp_course.cluster.slurm import sbatch
    from rtp_course.instructor import REPOSITORY
    work = work_dir(course, assignment)
    work.mkdir(parents=True, exist_ok=True)
    listing = work / "students.txt"
    listing.write_text("\n".join(students) + "\n")
    for s in students:
        (work / f"{s}.done").unlink(missing_ok=True)
        autograde.private_gradebook(course, work / f"{s}.db")
    env = {"RTP_COURSE_GRADING_DIR": str(course), "RTP_REPOSITORY": str(REPOSITORY),
           "RTP_ASSIGNMENT": assignment, "RTP_STUDENTS": str(listing), "RTP_GRADEBOOKS": str(work),
           "RTP_FORCE": "1" if force else "0", "RTP_PYTHON": sys.executable}
    if setup:
        env["RTP_SETUP"] = setup
    array = f"0-{len(students) - 1}" + (f"%{max_running}" if max_running else "")
    return sbatch(TEMPLATE, flags=[f"--array={array}", f"--cpus-per-task={cpus}",
                                   f"--output={work / 'rtp-autograde-%A_%a.out'}"],
                  time_limit=time_limit, partition=partition, account=account, qos=qos,
                  extra_sbatch=extra_sbatch, env=env, what="the autograde array")


def merge(course: Path, assignment: str, students, log=print) -> dict:
    """{student: None, or why not}: each finished task's autograde into the gradebook."""
    work = work_dir(course, assignment)
    out = {}
    for s in students:
        if not (work / f"{s}.done").exists():
            out[s] = "its array task did not finish"
            log(f"{s}/{assignment}: NOT AUTOGRADED: its array task did not finish (logs: {work}); "
                f"autograde it again with: rtp-course autograde {assignment} --student {s} --force")
            continue
        try:
            got = autograde.merge_student(course, assignment, s, work / f"{s}.db")
        except Exception as e:
            out[s] = str(e)
            log(f"{s}/{assignment}: NOT MERGED into the gradebook: {type(e).__name__}: {e}")
            continue
        out[s] = None
        late = f"; submitted {got['late_s'] / 3600:.1f} h late" if got["late_s"] else ""
        log(f"{s}/{assignment}: autograded on Slurm (notebook points {got['score']:g}{late})")
    return out


def run(course: Path, assignment: str, students, args) -> dict:
    from rtp_course.instructor.grade_slurm import wait
    job_id = submit(course, assignment, students, force=args.force, max_running=args.max_running,
                    time_limit=args.time, partition=args.partition, account=args.account,
                    qos=args.qos, extra_sbatch=args.sbatch, setup=args.setup)
    print(f"{assignment}: autograde array {job_id}, {len(students)} task(s), logs in "
          f"{work_dir(course, assignment)}")
    wait(job_id)
    return merge(course, assignment, students)
