r"""RotationHandle.wait() waits on works[0] and works[1], the send's and the receive's handles
of the batch as gloo would return them: NCCL returns ONE handle for the batch (the checker
too, on CPU), so works[1] is an IndexError.

EXPECT: raised IndexError: batch_isend_irecv returned ONE handle for the whole batch.*posted at rotation\.py:\d+ in rotate_async.*index 1 is past it.*in your code:.*self\._works\[1\]\.wait\(\).*rule 'Device'
SAYS: exception.one-handle
CLASS: device
WORLD_SIZES: 2
ONLY: rotate
"""
EDITS = {
    "RotationHandle.wait": [
        (r'''        for w in self._works:
            w.wait()
        self._works, self._sent = [], None''',
         r'''        if self._works:
            self._works[0].wait()   # the send
            self._works[1].wait()   # the receive
        self._works, self._sent = [], None'''),
    ],
}
