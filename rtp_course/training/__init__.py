"""Training the course models: `data` (synthetic, no downloads), `memory` (bytes by category),
`strategies` (DDP / FSDP2 / TP / RTP wrappers), `train` (the training entry point) and
`bench` (`rtp-course bench`)."""
