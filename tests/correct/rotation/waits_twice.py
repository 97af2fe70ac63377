"""wait() keeps the works and waits on them again when called twice: NCCL allows it (gloo's
point-to-point work would block for ever, so the checker lets a second wait return at once on
CPU, as NCCL does)."""
EDITS = {
    "RotationHandle.wait": [
        (r'''        self._works, self._sent = [], None  # never wait twice: gloo can block on a finished work
''',
         r'''        self._sent = None
'''),
    ],
}
