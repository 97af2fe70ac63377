"""rotate_async places its receive buffer on device=str(tensor.device), the device named as
text: "cuda:0" on a GPU run, "cpu" on a CPU run, the data's device on both (rule 'Device'
allows it; red team rt9, A13: it was taken for a buffer written on "cpu")."""
EDITS = {
    "rotate_async": [
        (r'''                           dtype=recv_dtype or tensor.dtype, device=tensor.device)''',
         r'''                           dtype=recv_dtype or tensor.dtype, device=str(tensor.device))'''),
    ],
}
