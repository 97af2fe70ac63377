"""Reference implementations of every exercise module (instructor edition only)."""
