//! Robustness cases: data (filled in by its owner).
