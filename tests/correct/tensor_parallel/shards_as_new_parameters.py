"""from_tensors makes each shard a new nn.Parameter of a copied slice, frozen where the serial
tensor is, instead of copying into the constructor's parameters.
"""
EDITS = {
    "ColumnParallelLinear.from_tensors": [
        (r'''        with torch.no_grad():
            layer.weight.copy_(_slice(weight, 0, layer.tp_size, layer.tp_rank))
            if bias is not None:
                layer.bias.copy_(_slice(bias, 0, layer.tp_size, layer.tp_rank))
        return _frozen_like(layer, weight=weight, bias=bias)
''',
         r'''        layer.weight = nn.Parameter(_slice(weight, 0, layer.tp_size, layer.tp_rank).clone(),
                                    requires_grad=weight.requires_grad)
        if bias is not None:
            layer.bias = nn.Parameter(_slice(bias, 0, layer.tp_size, layer.tp_rank).clone(),
                                      requires_grad=bias.requires_grad)
        return layer
'''),
    ],
    "ParallelEmbedding.from_serial": [
        (r'''        with torch.no_grad():
            layer.weight.copy_(_slice(embedding.weight, 1, layer.tp_size, layer.tp_rank))
        return _frozen_like(layer, weight=embedding.weight)
''',
         r'''        layer.weight = nn.Parameter(
            _slice(embedding.weight, 1, layer.tp_size, layer.tp_rank).contiguous().clone(),
            requires_grad=embedding.weight.requires_grad)
        return layer
'''),
    ],
}
