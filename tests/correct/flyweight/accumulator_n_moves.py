"""The fast reference with the stub's accumulator ring: every accumulator, the owner's own
part included, goes round all N ranks (N moves instead of N-1 plus a part kept at home)."""
EDITS = {
    "FlyweightWrapper._rotating_backward": [
        (r'''            def accumulator(s=s, previous=sending if k >= 2 else None):''',
         r'''            def accumulator(s=s, previous=sending):'''),
        (r'''            if k == 0:
                own_part = acc.pop()
            else:  # to rank r-1, which holds shard s next; the last one goes to its owner
                sending = rotation.rotate_async(acc.pop(), "counterclockwise", self.group,
                                                recv_shape=(self.numels[nxt],))''',
         r'''            sending = rotation.rotate_async(acc.pop(), "counterclockwise", self.group,
                                            recv_shape=(self.numels[nxt],))'''),
    ],
    "FlyweightWrapper._receive_grad": [
        (r'''        total = own_part if sending is None else own_part.add_(sending.wait())''',
         r'''        total = sending.wait().clone()  # ours: the received buffer is dropped'''),
    ],
}
