"""Instructor-side review of submissions, beside the checks' verdict (used by grading).

* `scan`: a static scan of an exercise module for code that reaches into the grader or
  around the exercise (frames, gc, torch.distributed's internals, monkey-patching ...),
  with its rule table (`rules`), string folding (`fold`), function scopes (`scopes`) and
  node shapes (`shapes`);
* `similarity`: token fingerprints (winnowing, as MOSS) that survive renaming and
  reformatting, to find submissions that are near copies of the reference or of each other.

Both only read source text: nothing submitted is imported or run here.
"""
