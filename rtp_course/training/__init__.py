"""Training the course models: `data` (synthetic, no downloads), `memory` (bytes by category),
`strategies` (DDP / FSDP2 / TP / RTP wrappers), `train` (the training entry point),
`bench` (`rtp-course bench`), `timing` (its interleaved step times), `workloads` (what a
row of it trains), `bench_rows` (which row trains which) and `pipeline_rows` and
`expert_rows` (E9's and E10's rows)."""
