"""What the notebooks use: `demos/` (worker functions they launch on several processes),
`plots`, `diagrams` and `timeline` (figures)."""
