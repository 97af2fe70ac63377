"""Instructor-side review of submissions, beside the checks' verdict (used by grading).

* `scan`: a static scan of an exercise module for code that reaches into the grader or
  around the exercise (frames, gc, torch.distributed's internals, monkey-patching ...),
  with its rule table (`rules`), string folding (`fold`), function scopes (`scopes`) and
  node shapes (`shapes`), run on a class's files in a worker process bounded in CPU time,
  memory and wall time (`worker`);
* `similarity`: token fingerprints (winnowing, as MOSS) of the code normalised as a syntax
  tree, that survive renaming, reformatting, reordering, identity wrappers, dead code and
  no-op padding, to find submissions that are near copies of the reference or of each other.

Both only read source text: nothing submitted is imported or run here.
"""
