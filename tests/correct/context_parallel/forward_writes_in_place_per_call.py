r"""ring_attention_forward allocates out and lse once per call and writes every merged block into
them in place (slices assigned), returning those per-call tensors."""
EDITS = {
    "ring_attention_forward": [
        (r'''        if not causal:
            out, lse = merge_blocks(out, lse, *block_attention(q, k, v))
        elif s == rank:
            out, lse = merge_blocks(out, lse, *block_attention(q, k, v, _own_mask(q)))
        elif s < rank:                                           # its first chunk is before ours
            out, lse = merge_blocks(out, lse, *block_attention(q, k[..., :half, :],
                                                               v[..., :half, :]))
        else:                                                    # only our second chunk sees it
            late, late_lse = merge_blocks(out[..., half:, :], lse[..., half:],
                                          *block_attention(q[..., half:, :], k, v))
            out = torch.cat([out[..., :half, :], late], dim=-2)
            lse = torch.cat([lse[..., :half], late_lse], dim=-1)
''',
         r'''        if not causal:
            o, l = merge_blocks(out, lse, *block_attention(q, k, v))
            out.copy_(o); lse.copy_(l)
        elif s == rank:
            o, l = merge_blocks(out, lse, *block_attention(q, k, v, _own_mask(q)))
            out.copy_(o); lse.copy_(l)
        elif s < rank:                                           # its first chunk is before ours
            o, l = merge_blocks(out, lse, *block_attention(q, k[..., :half, :],
                                                           v[..., :half, :]))
            out.copy_(o); lse.copy_(l)
        else:                                                    # only our second chunk sees it
            late, late_lse = merge_blocks(out[..., half:, :], lse[..., half:],
                                          *block_attention(q[..., half:, :], k, v))
            out[..., half:, :] = late
            lse[..., half:] = late_lse
'''),
    ],
}
