//! Robustness cases: runs (filled in by its owner).
