"""wait() polls is_completed() until the works are done and never calls wait() on them: NCCL's
works complete by themselves (gloo's point-to-point works say so only inside wait(); the
checker makes them progress on CPU, as NCCL's do)."""
EDITS = {
    "RotationHandle.wait": [
        (r'''        for w in self._works:
            w.wait()
''',
         r'''        while not all(w.is_completed() for w in self._works):
            pass
'''),
    ],
}
