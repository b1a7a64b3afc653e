//! alpha-cpu
