"""What the notebooks use: `demos/` (worker functions they launch on several processes),
`plots`, `diagrams`, `timeline` (figures) and `trace` (torch.profiler recordings of a run)."""
