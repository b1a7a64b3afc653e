//! Robustness cases: arguments (filled in by its owner).
