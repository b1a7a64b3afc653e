//! CPU kernels, one module per family. Each is the reference for its GPU counterpart.

pub mod adamw;
pub mod attention;
pub mod delta_rule;
pub mod elementwise;
pub mod harmonic_scan;
pub mod index;
pub mod layout;
pub mod loss;
pub mod matmul;
pub mod norms;
pub mod recurrence;
pub mod replay;
pub mod rotary;
