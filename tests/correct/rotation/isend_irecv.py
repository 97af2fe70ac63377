"""rotate_async with a separate irecv and isend (the receive posted first) instead of
batch_isend_irecv."""
REPLACE = [
    ("""    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, dst, group),
                                    dist.P2POp(dist.irecv, received, src, group)])""",
     """    works = [dist.irecv(received, src=src, group=group), dist.isend(sent, dst=dst, group=group)]"""),
]
