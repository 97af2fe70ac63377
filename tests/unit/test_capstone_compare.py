"""Notebook 11's capstone judge (`threed.compare`) on made-up rank results: results cut from
serial training pass; a difference is reported at its earliest step and phase, in the block
where it entered, with the exercise to look at."""
from rtp_course.models.stages import cut
from rtp_course.notebook.demos import threed


def _from_serial(expected):
    """What each of the 8 ranks would return if it matched serial training exactly."""
    results = []
    for rank in range(threed.WORLD):
        d, p, t = threed._coords(rank)
        names = sorted(threed._stage_names(p))

        def part(full, names=names, t=t):
            return {n: threed._shard(n, full[n], t).clone() for n in names}
        last = p == threed.SHAPE[1] - 1
        results.append({
            "losses": [expected["replica_losses"][s][d] if last else None
                       for s in range(threed.STEPS)],
            "replica_grads": [part(expected["replica_grads"][s][d]) for s in range(threed.STEPS)],
            "grads": [part(expected["grads"][s]) for s in range(threed.STEPS)],
            "weights": part(expected["weights"]),
            "groups": threed.layout_of(rank),
            "talks": {("all_reduce", tuple(threed.layout_of(rank)["dp"]), "x.py:1 in f"): 4}})
    return results


def test_results_cut_from_serial_training_pass():
    expected = threed.serial()
    verdict = threed.compare(_from_serial(expected), expected)
    assert verdict.ok and not verdict.problem, verdict
    assert verdict.traffic == {"dp": {"all_reduce": 4 * threed.WORLD}}


def test_the_rank_layout_is_the_device_meshs():
    layout = threed.layout()
    assert layout["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert layout["pp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert layout["dp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert [threed._coords(r) for r in (0, 3, 5)] == [(0, 0, 0), (0, 1, 1), (1, 0, 1)]


def test_a_wrong_loss_is_a_forward_problem():
    expected = threed.serial()
    results = _from_serial(expected)
    results[6]["losses"][1] += 1e-3
    verdict = threed.compare(results, expected)
    assert not verdict.ok and "step 2, forward: rank 6 (dp 1, pp 1, tp 0)" in verdict.problem


def test_a_backward_difference_is_located_in_the_block_where_it_entered():
    """Blocks 0 and 1 wrong, 2 and 3 right: the error entered at block 1, the last block of
    stage 0, whose output's gradient came from stage 1."""
    expected = threed.serial()
    results = _from_serial(expected)
    for name in ("0.0.weight", "1.2.bias"):
        results[4]["replica_grads"][0][name] += 1.0
    problem = threed.compare(results, expected).problem
    assert "step 1, backward, before the DP average: rank 4" in problem, problem
    assert "1.2.bias (block 1)" in problem and "receives from stage 1" in problem, problem


def test_gradients_right_before_the_average_and_wrong_after_it_name_average_gradients():
    expected = threed.serial()
    results = _from_serial(expected)
    results[3]["grads"][0]["3.0.weight"] *= 2
    world_call = ("all_reduce", tuple(range(8)), "data_parallel.py:9 in average_gradients")
    results[3]["talks"][world_call] = 2
    verdict = threed.compare(results, expected)
    assert "after average_gradients" in verdict.problem and "E1.1" in verdict.problem, verdict
    assert "all_reduce on ranks [0, 1, 2, 3, 4, 5, 6, 7] at data_parallel.py:9" in verdict.problem
    assert "other" in verdict.traffic


def test_a_stage_holding_other_blocks_breaks_the_layout_rule():
    expected = threed.serial()
    results = _from_serial(expected)
    start, stop = cut(1, 2, threed.LAYERS)
    results[2]["weights"] = dict(results[0]["weights"])          # stage 0's blocks
    problem = threed.compare(results, expected).problem
    assert "PipelineStage (E9.1) on rank 2" in problem and "rule 'Layout'" in problem, problem
    assert str(list(range(start, stop))) in problem, problem


def test_a_stage_of_copies_or_tp_layers_of_other_names_are_named():
    expected = threed.serial()
    results = _from_serial(expected)
    results[5]["weights"] = {}                      # the stage keeps copies, not the model's own
    assert "none of the model's own parameters" in threed.compare(results, expected).problem
    results = _from_serial(expected)
    results[1]["weights"]["0.0.w"] = results[1]["weights"].pop("0.0.weight")
    problem = threed.compare(results, expected).problem
    assert "The TP layers on rank 1" in problem and "['0.0.w']" in problem, problem


def test_a_gradient_that_never_came_is_a_difference():
    expected = threed.serial()
    results = _from_serial(expected)
    results[1]["replica_grads"][0]["0.0.bias"] = None
    assert "0.0.bias" in threed.compare(results, expected).problem


def test_the_mesh_picture_joins_each_dimensions_groups_and_shows_calls_outside_them():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rtp_course.notebook import diagrams
    flows = {"tp": {"all_reduce": 112}, "pp": {"isend": 32, "irecv": 32},
             "other": {"all_reduce on ranks [0, 1, 2, 3, 4, 5, 6, 7] at x.py:1 in f": 128}}
    ax = diagrams.device_mesh(threed.layout(), flows)
    links = [c for c in ax.get_children() if isinstance(c, matplotlib.text.Annotation)]
    assert len(links) == 3 * 4                        # 3 dimensions of 4 pairs each
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0].startswith("tp {0,1} {2,3} {4,5} {6,7}")
    assert "ran all_reduce x 112" in legend[0]
    assert legend[1].startswith("pp {0,2} {1,3} {4,6} {5,7}") and "isend x 32" in legend[1]
    assert legend[2].startswith("dp {0,4} {1,5} {2,6} {3,7}") and "ran" not in legend[2]
    assert "ranks [0, 1, 2, 3, 4, 5, 6, 7] at x.py:1 in f x 128" in ax.get_xlabel()
    plt.close(ax.figure)
