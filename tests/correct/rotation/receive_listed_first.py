"""rotate_async lists the receive before the send in its batch (any order inside one
batch_isend_irecv is valid).
"""
REPLACE = [
    ("""    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, dst, group),
                                    dist.P2POp(dist.irecv, received, src, group)])""",
     """    works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, received, src, group),
                                    dist.P2POp(dist.isend, sent, dst, group)])"""),
]
