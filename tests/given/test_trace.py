"""Timelines come from torch.profiler traces of real ranks, and make one Perfetto file."""
import json

from rtp_course.notebook import timeline
from rtp_course.notebook.timeline import Interval
from rtp_course.notebook.trace import write_trace
from rtp_course.runtime.launcher import launch

from launch_targets import traced_rotation


def test_a_profiled_ring_step_has_every_lane_and_one_trace_file(tmp_path):
    out = launch(traced_rotation, 2, results="objects", timeout=120)
    for res in out:
        kinds = {Interval._make(i).kind for i in res["intervals"]}
        assert {"compute", "wait", "weight rotation"} <= kinds, kinds
        by_kind = {i[0]: Interval._make(i) for i in res["intervals"]}
        assert by_kind["weight rotation"].start <= by_kind["compute"].start  # posted first
        names = {e.get("name") for e in res["events"]}
        assert "aten::mm" in names and "rtp/compute/shard" in names, sorted(names)[:30]
    stats = timeline.summary([res["intervals"] for res in out])
    assert 0.0 <= stats["hidden"] <= 1.0 and stats["transfer"] > 0, stats
    assert "ms)" in timeline.overlap_verdict(stats, 2)
    path = write_trace([res["events"] for res in out], tmp_path / "traces" / "ring.json")
    events = json.loads(path.read_text())["traceEvents"]
    assert {e["args"]["name"] for e in events if e.get("name") == "process_name"} == {"rank 0", "rank 1"}
    assert {e["pid"] for e in events} == {0, 1}
    assert any(e.get("cat") == "rtp transfer" for e in events)


def test_summary_counts_hidden_transfer_time_once():
    iv = [Interval("compute", "", 0.0, 10.0), Interval("weight rotation", "", 2.0, 6.0),
          Interval("accumulator rotation", "", 4.0, 12.0), Interval("wait", "", 10.0, 12.0)]
    s = timeline.summary([iv])
    assert s["transfer"] == 10.0 and s["overlap"] == 8.0 and abs(s["hidden"] - 0.8) < 1e-9, s
    assert s["total"] == 12.0 and s["wait"] == 2.0


def test_the_clocks_are_matched_on_the_shortest_mark():
    """The first profiled op can take milliseconds to set up: its mark must not set the
    offset between the profiler's clock and perf_counter."""
    from rtp_course.notebook.trace import PREFIX, _offset_us
    # perf_counter read at 10.0 s and 10.1 s; profiler time = perf_counter + 5 s (in us)
    events = [{"name": f"{PREFIX}clock 0", "ph": "X", "ts": 15.0e6 - 4000, "dur": 4003},
              {"name": f"{PREFIX}clock 1", "ph": "X", "ts": 15.1e6 - 1, "dur": 2}]
    assert abs(_offset_us(events, [10.0, 10.1]) - 5.0e6) < 2
