"""Running code on several processes: `launcher` (spawn, rendezvous, deadlines, stacks of stuck
ranks; torchrun and srun) and `commlog` (a record of every torch.distributed call)."""
